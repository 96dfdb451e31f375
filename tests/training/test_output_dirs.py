"""Scripts never overwrite another run: the README's commands, run in its order with their default output folders,
leave every checkpoint intact; a run into a folder holding a checkpoint of another model or config stops before
training with a message naming both and --overwrite_output_dir; the same run again in its folder goes on."""

import hashlib
import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

import run_classification
import run_pretraining
import run_qa
import run_t5_pretraining
import run_text_to_text
from hf_attn_variants.presets import preset_config
from hf_attn_variants.training.output_folders import default_output_dir

ROOT = Path(__file__).resolve().parents[2]

SCRIPTS = {
    module.__name__: module
    for module in (run_pretraining, run_t5_pretraining, run_classification, run_qa, run_text_to_text)
}
# A couple of steps on a few examples; pretraining saves a checkpoint-2 folder as well as the final model.
COMMON = [
    "--max_steps",
    "2",
    "--per_device_train_batch_size",
    "4",
    "--max_train_samples",
    "16",
    "--max_eval_samples",
    "8",
    "--eval_strategy",
    "no",
    "--logging_steps",
    "1",
    "--disable_tqdm",
    "true",
]
TINY = {
    "run_pretraining": [*COMMON, "--max_seq_length", "32", "--save_steps", "2"],
    "run_t5_pretraining": [*COMMON, "--max_seq_length", "32", "--save_steps", "2"],
    "run_classification": [*COMMON, "--save_strategy", "no", "--max_seq_length", "32"],
    "run_qa": [*COMMON, "--save_strategy", "no", "--max_seq_length", "96", "--doc_stride", "32"],
    "run_text_to_text": [*COMMON, "--save_strategy", "no", "--max_source_length", "32"],
}


def readme_commands() -> list[tuple[str, list[str]]]:
    """(script, arguments) of each `python examples/run_*.py` command of the README's "Quick start" and "Training"
    sections, in the README's order, but those with a placeholder path (path/to/...)."""
    text = (ROOT / "README.md").read_text()
    sections = re.findall(r"^## (Quick start|Training)\n(.*?)(?=^## )", text, flags=re.MULTILINE | re.DOTALL)
    found = (
        re.match(r"HF_HUB_OFFLINE=1 python examples/(run_\w+)\.py(.*)$", line)
        for _, body in sections
        for line in body.splitlines()
    )
    commands = [(m.group(1), shlex.split(m.group(2))) for m in found if m]
    return [(script, argv) for script, argv in commands if not any("path/to/" in a for a in argv)]


def config_of(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def digests(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under `folder`, by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_the_readme_commands_in_order_keep_every_checkpoint(tmp_path, monkeypatch):
    """Each command writes its own folder, named after what it trains; the main job's checkpoint (its final model
    and checkpoint-2) is byte for byte what it was after the later commands, and classification fine-tuned it; the
    folders the README loads from are there."""
    monkeypatch.chdir(tmp_path)
    commands = readme_commands()
    assert [s for s, _ in commands][:5] == [
        "run_pretraining",
        "run_pretraining",
        "run_t5_pretraining",
        "run_classification",
        "run_qa",
    ], commands
    main_job = tmp_path / "outputs" / "bert-mini-talking-heads"
    before = None
    for script, argv in commands:
        SCRIPTS[script].main([*argv, *TINY[script]])
        if before is None:
            before = digests(main_job)
    assert digests(main_job) == before
    expected = {  # folder: (architecture, attention type, what the run started from)
        "bert-mini-talking-heads": ("VariantBertForMaskedLM", "talking_heads", "bert-mini-talking-heads"),
        "albert-mini-synthesizer-random": (
            "VariantAlbertForPreTraining",
            "synthesizer",
            "albert-mini-synthesizer-random",
        ),
        "t5-mini-synthesizer-random": (
            "VariantT5ForConditionalGeneration",
            "synthesizer",
            "t5-mini-synthesizer-random",
        ),
        "classification-bert-mini-talking-heads": (
            "VariantBertForSequenceClassification",
            "talking_heads",
            "outputs/bert-mini-talking-heads",
        ),
        "qa-bert-tiny-talking-heads": ("VariantBertForQuestionAnswering", "talking_heads", "bert-tiny-talking-heads"),
        "text-to-text-t5-tiny-talking-heads": (
            "VariantT5ForConditionalGeneration",
            "talking_heads",
            "t5-tiny-talking-heads",
        ),
    }
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == sorted(expected)
    for name, (architecture, attention, source) in expected.items():
        folder = tmp_path / "outputs" / name
        config, info = config_of(folder), json.loads((folder / "training_info.json").read_text())
        assert (config["architectures"], config["attention_type"]) == ([architecture], attention), name
        assert (info["preset"] or info["started_from"]) == source, name
        for checkpoint in folder.glob("checkpoint-*"):
            assert config_of(checkpoint)["architectures"] == [architecture], checkpoint
    assert config_of(tmp_path / "outputs" / "albert-mini-synthesizer-random")["synthesizer_components"] == ["random"]
    assert (main_job / "checkpoint-2").is_dir() and not any(main_job.glob("*albert*"))
    loaded_in_readme = set(re.findall(r'"(outputs/[^"]+)"', (ROOT / "README.md").read_text()))
    assert loaded_in_readme and all((tmp_path / folder / "config.json").is_file() for folder in loaded_in_readme)


BERT = [
    "--max_seq_length",
    "32",
    "--per_device_train_batch_size",
    "4",
    "--max_train_samples",
    "8",
    "--max_eval_samples",
    "8",
    "--eval_strategy",
    "no",
    "--disable_tqdm",
    "true",
    "--max_steps",
    "2",
    "--save_steps",
    "1",
]


def test_a_run_into_another_runs_folder_stops_unless_told(tmp_path):
    """Another attention type, another head (NSP) or another script into the folder of a run: refused before
    training, the message naming both and the flag, the folder untouched, also where only its checkpoint-N folders
    are left; with --overwrite_output_dir it writes there. The same run again goes on, also resumed."""
    out = tmp_path / "run"
    first = ["--preset", "bert-tiny-talking-heads", "--output_dir", str(out), *BERT]
    run_pretraining.main(first)
    kept = digests(out)
    others = [
        (run_pretraining, ["--preset", "bert-tiny-synthesizer-random"], "synthesizer"),
        (
            run_pretraining,
            ["--preset", "bert-tiny-talking-heads", "--sentence_objective", "nsp"],
            "VariantBertForPreTraining",
        ),
        (
            run_pretraining,
            ["--preset", "bert-tiny-talking-heads", "--config_overrides", '{"num_hidden_layers": 1}'],
            "num_hidden_layers",
        ),
        (run_classification, ["--model_name_or_path", str(out)], "VariantBertForSequenceClassification"),
    ]
    for script, argv, differs in others:
        with pytest.raises(ValueError) as error:
            script.main([*BERT, "--output_dir", str(out), *argv])
        message = str(error.value)
        assert f"--output_dir {out} holds a checkpoint" in message, message
        assert (
            "VariantBertForMaskedLM (variant_bert, talking-heads; examples/run_pretraining.py, preset "
            "bert-tiny-talking-heads)"
            in message
            and differs in message
            and "--overwrite_output_dir" in message
        )
    assert digests(out) == kept
    (out / "config.json").unlink()  # a run that stopped before its final save leaves only checkpoint-N folders
    (out / "training_info.json").unlink()
    with pytest.raises(ValueError, match="holds a checkpoint in checkpoint-2 of another model"):
        run_pretraining.main([*BERT, "--output_dir", str(out), "--preset", "bert-tiny-synthesizer-random"])

    again = run_pretraining.main(first)  # the same run, and the same run resumed from its last checkpoint
    assert again["train_loss"] > 0 and config_of(out)["attention_type"] == "talking_heads"
    run_pretraining.main([*first, "--max_steps", "3", "--resume_from_checkpoint", "last"])
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3

    run_pretraining.main(
        [*BERT, "--output_dir", str(out), "--preset", "bert-tiny-synthesizer-random", "--overwrite_output_dir"]
    )
    assert config_of(out)["synthesizer_components"] == ["random"]
    assert json.loads((out / "training_info.json").read_text())["preset"] == "bert-tiny-synthesizer-random"


def test_a_folder_without_a_checkpoint_is_fine(tmp_path):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "notes.txt").write_text("not a checkpoint\n")
    run_t5_pretraining.main(["--preset", "t5-tiny-dot-product", "--output_dir", str(out), *BERT])
    assert config_of(out)["model_type"] == "variant_t5" and (out / "notes.txt").is_file()


@pytest.mark.parametrize(
    "preset, source, attention_type, task, expected",
    [
        ("bert-mini-talking-heads", None, None, None, "outputs/bert-mini-talking-heads"),
        ("bert-mini-talking-heads", None, "synthesizer", None, "outputs/bert-mini-synthesizer-dense"),
        ("bert-tiny-single-head-admin", None, None, "qa", "outputs/qa-bert-tiny-single-head-admin"),
        (
            "bert-mini-dot-product",
            "google-bert/bert-base-uncased",
            "talking_heads",
            None,
            "outputs/bert-base-uncased-talking-heads",
        ),
        (
            "bert-mini-dot-product",
            "google-bert/bert-base-uncased",
            None,
            "mnli",
            "outputs/mnli-bert-base-uncased-dot-product",
        ),
        (
            "bert-mini-talking-heads",
            "runs/bert-mini-talking-heads/",
            None,
            "classification",
            "outputs/classification-bert-mini-talking-heads",
        ),
    ],
)
def test_the_default_folder_is_named_after_the_run(preset, source, attention_type, task, expected):
    """The preset's family and size with the model's attention; a checkpoint's name with the attention, not
    repeated; the fine-tuning task first."""
    overrides = {"attention_type": attention_type} if attention_type else {}
    model_args = SimpleNamespace(preset=preset, model_name_or_path=source)
    assert default_output_dir(model_args, preset_config(preset, **overrides), task) == expected


def test_t5_folders_keep_which_place_has_which_attention():
    """A synthesizer encoder with a talking-heads decoder, and the reverse: two folders, each naming its places."""
    model_args = SimpleNamespace(preset="t5-tiny-dot-product", model_name_or_path=None)
    places = {"encoder_attention_type": "synthesizer", "decoder_attention_type": "talking_heads"}
    reverse = {"encoder_attention_type": "talking_heads", "decoder_attention_type": "synthesizer"}
    folders = [
        default_output_dir(model_args, preset_config("t5-tiny-dot-product", synthesizer_components=["dense"], **p))
        for p in (places, reverse)
    ]
    assert folders == [
        "outputs/t5-tiny-dot-product-encoder-synthesizer-dense-decoder-talking-heads",
        "outputs/t5-tiny-dot-product-encoder-talking-heads-decoder-synthesizer-dense",
    ]


def test_continuing_a_checkpoint_never_defaults_to_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs" / "bert-mini-talking-heads").mkdir(parents=True)
    model_args = SimpleNamespace(preset=None, model_name_or_path="outputs/bert-mini-talking-heads")
    assert (
        default_output_dir(model_args, preset_config("bert-mini-talking-heads"))
        == "outputs/bert-mini-talking-heads-continued"
    )
