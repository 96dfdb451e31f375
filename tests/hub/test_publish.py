"""Publishing through a loopback Hub (tests/hub_server.py): a tiny real Trainer run is pushed by Trainer.push_to_hub +
upload_card and by `hf-attn-variants publish`; both repositories hold the same files and cards with the run's real
metrics and valid metadata, and load with trust_remote_code where the package is not installed, giving identical
outputs. No test reaches huggingface.co: every Hub call runs in a subprocess whose HF_ENDPOINT is the loopback server.
"""

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard

from conftest import build
from hf_attn_variants.hub.cards import _load_yaml, attention_texts, render_card, render_record
from hf_attn_variants.hub.publish import is_published, publish
from hf_attn_variants.isolation import run_isolated
from hf_attn_variants.presets import PRESETS, preset_config
from hub_server import card_metadata_errors
from release import main as release_main
from release_set import RELEASES
from run_records import record_from_json

CODE = {
    "attention_variants.py",
    "configuration_variant_attention.py",
    "modeling_variant_utils.py",
    "configuration_variant_bert.py",
    "modeling_variant_bert.py",
}
REVISION = "0123456789abcdef0123456789abcdef01234567"
ROOT = Path(__file__).resolve().parents[2]

# Runs with HF_ENDPOINT = the loopback Hub: a tiny Trainer run, Trainer.push_to_hub + upload_card, and the CLI.
PUSH = textwrap.dedent(
    """
    import json, math, sys
    from pathlib import Path
    import torch, transformers
    import hf_attn_variants as hav
    from hf_attn_variants.cli import main
    from hf_attn_variants.convert import probe_inputs
    from hf_attn_variants.hub.publish import upload_card

    work = Path(sys.argv[1])
    run = work / "run"
    words = [f"w{i}" for i in range(94)]
    tokenizer = transformers.BertTokenizer(
        vocab={t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])})
    g = torch.Generator().manual_seed(0)
    data = [tokenizer(" ".join(words[j] for j in torch.randint(0, 94, (12,), generator=g).tolist()))
            for _ in range(32)]
    torch.manual_seed(0)
    model = hav.VariantBertForMaskedLM(hav.VariantBertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=64, attention_type="talking_heads"))
    args = transformers.TrainingArguments(
        output_dir=str(run), max_steps=4, per_device_train_batch_size=8, learning_rate=1e-3, report_to=[],
        save_strategy="no", use_cpu=True, seed=0, hub_model_id="tester/trainer-path", disable_tqdm=True)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=data[:24], eval_dataset=data[24:], processing_class=tokenizer,
        data_collator=transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.3))
    trainer.save_metrics("train", trainer.train().metrics)
    metrics = trainer.evaluate()
    metrics["perplexity"] = math.exp(metrics["eval_loss"])
    trainer.save_metrics("eval", metrics)
    trainer.save_model()
    (run / "training_info.json").write_text(json.dumps({
        "script": "tests/hub/test_publish.py", "task": "fill-mask", "preset": None, "base_model": None,
        "dataset": {"name": "random-words", "source": "generated in the test", "license": "cc0-1.0",
                    "hub_id": "tester/random-words", "split": "train"},
        "evaluation": [{"metric_prefix": "eval_", "metric_suffix": "", "name": "random-words",
                        "hub_id": "tester/random-words", "split": "validation"}],
        "training": {"max_steps": 4, "learning_rate": 1e-3, "per_device_train_batch_size": 8, "seed": 0}}))

    trainer.push_to_hub(commit_message="End of training")
    published = upload_card(run, "tester/trainer-path")
    assert main(["publish", str(run), "tester/cli-path", "--private", "--revision", "dev",
                 "--commit-message", "First release"]) == 0

    model.eval()
    inputs = probe_inputs(model.config, "VariantBertForMaskedLM")
    with torch.no_grad():
        torch.save({"inputs": inputs, "logits": model(**inputs).logits}, work / "expected.pt")
    print(json.dumps({"trainer_model_commit": published.model_commit}))
    """
)

# Runs with the package blocked: pulls each repository at its pinned revision and runs it.
PULL = textwrap.dedent(
    """
    import json, torch, transformers
    expected = torch.load(sys.argv[1])
    for repo, revision, out in json.loads(sys.argv[2]):
        model = transformers.AutoModelForMaskedLM.from_pretrained(repo, trust_remote_code=True, revision=revision)
        tokenizer = transformers.AutoTokenizer.from_pretrained(repo, revision=revision)
        assert tokenizer.convert_tokens_to_ids("w3") == 8
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        with torch.no_grad():
            torch.save(model.eval()(**expected["inputs"]).logits, out)
    """
)


def _run(hub, tmp_path, *command):
    proc = subprocess.run(
        [sys.executable, *map(str, command)],
        env=hub.env(tmp_path / "hf_home"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def _card(files):
    text = files["README.md"].decode()
    return text, {r.metric_type: r.metric_value for r in ModelCard(text).data.eval_results or []}


def test_trainer_push_and_publish_give_the_same_repository_and_it_loads_without_the_package(hub, tmp_path):
    out = _run(hub, tmp_path, "-c", PUSH, tmp_path)
    # a release of model_cards/ (the repository's tool, utils/release.py): the run's record (no weights), its card,
    # then `publish --release` with that card
    sources = ["--results", tmp_path / "no-results.jsonl", "--records", tmp_path / "records"]
    assert (
        release_main(
            [
                "record",
                str(tmp_path / "run"),
                "bert-mini-talking-heads",
                "--train-command",
                "python train.py",
                "--commit",
                "0123abc",
                "--records",
                str(tmp_path / "records"),
            ]
        )
        == 0
    )
    assert release_main(["cards", "--out", str(tmp_path / "cards"), *map(str, sources)]) == 0
    _run(
        hub,
        tmp_path,
        ROOT / "utils/release.py",
        "publish",
        tmp_path / "run",
        "tester/release-path",
        "--release",
        "bert-mini-talking-heads",
        "--cards",
        tmp_path / "cards",
        *sources,
    )
    trainer_commit = json.loads(out.strip().splitlines()[-1])["trainer_model_commit"]
    state = hub.state
    trainer_files, cli_files = state.files("tester/trainer-path"), state.files("tester/cli-path", "dev")

    # one layout, whichever path pushed: the checkpoint, its code, the tokenizer, the run's records and the card
    assert set(trainer_files) == set(cli_files)
    assert all(is_published(name) for name in cli_files)
    assert {
        "README.md",
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "all_results.json",
        "training_info.json",
        *CODE,
    } <= set(cli_files)
    assert "training_args.bin" in state.files("tester/trainer-path", trainer_commit)  # Trainer pushed it ...
    assert "training_args.bin" not in trainer_files  # ... and upload_card removed it with the card commit
    for name in set(cli_files) - {"README.md", "all_results.json", "train_results.json", "eval_results.json"}:
        assert trainer_files[name] == cli_files[name], name  # same bytes (metrics hold run times: same keys only)

    # --private and --revision: a private repo whose main branch stays empty, two commits on dev
    repo = state.repos["tester/cli-path"]
    assert repo.private and state.files("tester/cli-path", "main") == {}
    assert state.history("tester/cli-path", "dev")[:2] == ["Model card (hf-attn-variants)", "First release"]
    assert ("POST", "/api/validate-yaml") in state.requests  # the card was validated by the Hub before upload

    # the cards: valid metadata, the run's real metrics, and a quick start pinned to the commit holding the code
    cli_commit = repo.commits[repo.branches["dev"]]["parent"]
    results = json.loads(cli_files["all_results.json"])
    for name, files, commit in (("trainer-path", trainer_files, trainer_commit), ("cli-path", cli_files, cli_commit)):
        text, metrics = _card(files)
        assert card_metadata_errors(text) == [] and ModelCard(text).data.library_name == "transformers"
        assert metrics == {"loss": results["eval_loss"], "perplexity": results["perplexity"]}
        assert f"| train_loss | {results['train_loss']:.4g} |" in text
        assert ModelCard(text).data.datasets == ["tester/random-words"]
        assert "| loss | " in text and "| random-words, split validation |" in text
        assert f'revision = "{commit}"' in text and f'from_pretrained("tester/{name}"' in text
        assert CODE <= set(state.files(f"tester/{name}", commit))
    texts = [
        _card(f)[0].replace(n, "REPO").replace(c, "SHA")
        for n, f, c in (("trainer-path", trainer_files, trainer_commit), ("cli-path", cli_files, cli_commit))
    ]
    assert texts[0] == texts[1]

    # publish --release: the same files, and the card of model_cards/ with its reproduction section and the
    # release's own example, addressed to the repository and pinned to its model commit
    release_files = state.files("tester/release-path")
    release_repo = state.repos["tester/release-path"]
    release_commit = release_repo.commits[release_repo.branches["main"]]["parent"]
    record = record_from_json(json.loads((tmp_path / "records" / "bert-mini-talking-heads.json").read_text()))
    record = replace(record, example=next(r.example for r in RELEASES if r.name == "bert-mini-talking-heads"))
    release_card = release_files["README.md"].decode()
    assert set(release_files) == set(cli_files) and card_metadata_errors(release_card) == []
    assert release_card == str(render_record(record, "tester/release-path", release_commit))
    assert "## Reproducing the weights" in release_card and "git checkout 0123abc\npython train.py" in release_card
    assert 'fill_mask("CYNIC, n. A blackguard whose faulty [MASK] sees' in release_card  # the release's example
    committed = (tmp_path / "cards" / "bert-mini-talking-heads" / "README.md").read_text()
    # the folder's card: the same record, unpinned and addressed to the default owner
    assert committed == str(render_record(record, "hf-attn-variants/bert-mini-talking-heads", None))

    # pull both at their pinned revisions where the package cannot be imported: identical outputs
    jobs = [
        ["tester/trainer-path", trainer_commit, str(tmp_path / "a.pt")],
        ["tester/cli-path", cli_commit, str(tmp_path / "b.pt")],
    ]
    proc = run_isolated(
        PULL, [tmp_path / "expected.pt", json.dumps(jobs)], env=hub.env(tmp_path / "hf_home"), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    expected = torch.load(tmp_path / "expected.pt")["logits"]
    for _, _, path in jobs:
        torch.testing.assert_close(torch.load(path), expected, atol=1e-6, rtol=1e-6)


def test_publish_refuses_a_folder_that_does_not_load_without_the_package(tmp_path):
    build("VariantBertForMaskedLM", "talking_heads").save_pretrained(tmp_path)
    (tmp_path / "attention_variants.py").unlink()  # the modeling code imports it: remote loading must fail
    with pytest.raises(RuntimeError, match="does not load with trust_remote_code=True"):
        publish(tmp_path, "tester/broken")  # fails before any Hub call (the test process is offline anyway)


@pytest.mark.parametrize(
    "head,variant,setup,paper",
    [
        ("VariantBertForSequenceClassification", "synth_random", "Random Synthesizer", "tay2021synthesizer"),
        ("VariantAlbertForMaskedLM", "synth_mixture", "mixture of Synthesizer", "tay2021synthesizer"),
        ("VariantT5ForConditionalGeneration", "talking_heads", "talking-heads", "shazeer2020talking"),
    ],
)
def test_card_without_run_records_says_so_and_cites_its_paper_first(tmp_path, head, variant, setup, paper):
    build(head, variant).save_pretrained(tmp_path)
    text = str(render_card(tmp_path, "me/model", REVISION))
    assert card_metadata_errors(text) == []
    assert "No evaluation metrics were recorded" in text and "model-index" not in text
    assert "No training record (`training_info.json`)" in text
    assert setup in text.split("## Quick start")[0]
    own = text.split("This model's attention comes from:")[1].split("The other papers")[0]
    assert f"@{'inproceedings' if paper.startswith('tay') else 'article'}{{{paper}," in own
    assert text.count("@article{") + text.count("@inproceedings{") == 4  # every paper, each once


def test_every_preset_has_card_text_citing_the_presets_papers():
    papers = _load_yaml("papers.yaml")
    for name, preset in PRESETS.items():
        if preset.size != "tiny":  # larger sizes change widths only; tiny configs are fast to build
            continue
        texts = attention_texts(preset_config(name).to_dict())
        cited = {papers[key]["title"].split()[0] for s in texts for key in s["papers"]}
        # a type without card text of its own names its registration's paper in the text made from it
        cited |= {paper.split()[0] for paper in preset.papers if any(paper in s["description"] for s in texts)}
        assert cited == {paper.split()[0] for paper in preset.papers}, (name, texts)


def test_metadata_check_rejects_what_the_hub_would():
    good = "---\nlibrary_name: transformers\nlicense: apache-2.0\ntags: [a]\n---\n"
    assert card_metadata_errors(good) == []
    assert card_metadata_errors(good.replace("apache-2.0", "my-own")) == ["license 'my-own' is not a Hub license id"]
    bad_index = good.replace(
        "tags: [a]\n",
        "tags: [a]\nmodel-index:\n- name: x\n  results:\n"
        "  - task: {type: fill-mask}\n    dataset: {name: d, type: d}\n"
        "    metrics: [{type: loss, value: high}]\n",
    )
    assert any("non-numeric" in e for e in card_metadata_errors(bad_index))
    assert card_metadata_errors("# no metadata") == ["the card has no YAML front matter"]


@pytest.mark.parametrize(
    "path,published",
    [
        ("model.safetensors", True),
        ("modeling_variant_t5.py", True),
        ("spiece.model", True),
        ("all_results.json", True),
        ("training_args.bin", False),
        ("trainer_state.json", False),
        ("runs/events.out", False),
        ("checkpoint-10/model.safetensors", False),
    ],
)
def test_is_published(path, published):
    assert is_published(path) == published


def test_card_names_the_data_of_each_number_and_lists_only_hub_datasets(tmp_path):
    """training_info.json's `evaluation` records map each metric to its data (by prefix and the longest suffix):
    the card's table names it, the model-index carries the Hub ones with config and split, and `datasets` holds Hub
    ids only (not local files, not a local folder recorded as a name)."""
    build("VariantBertForSequenceClassification", "talking_heads").save_pretrained(tmp_path)
    glue = {"name": "nyu-mll/glue (mnli)", "hub_id": "nyu-mll/glue", "config": "mnli"}
    (tmp_path / "training_info.json").write_text(
        json.dumps(
            {
                "script": "examples/run_classification.py",
                "task": "text-classification",
                "preset": None,
                "base_model": None,
                "dataset": {**glue, "split": "train"},
                "training": {"max_steps": -1, "steps": 12},
                "evaluation": [
                    {"metric_prefix": "eval_", "metric_suffix": "", **glue, "split": "validation_matched"},
                    {"metric_prefix": "eval_", "metric_suffix": "_mm", **glue, "split": "validation_mismatched"},
                    {
                        "metric_prefix": "predict_",
                        "metric_suffix": "",
                        "name": "test.csv",
                        "hub_id": "/tmp/local/test.csv",
                        "split": "test",
                    },
                ],
            }
        )
    )
    (tmp_path / "all_results.json").write_text(
        json.dumps(
            {
                "train_loss": 0.5,
                "eval_accuracy": 0.75,
                "eval_loss": 0.6,
                "eval_samples": 8,
                "eval_accuracy_mm": 0.7,
                "eval_samples_mm": 10,
                "predict_accuracy": 0.5,
                "predict_runtime": 0.1,
                "epoch": 3.0,
            }
        )
    )
    text = str(render_card(tmp_path, "me/model", REVISION))
    assert card_metadata_errors(text) == []
    data = ModelCard(text).data
    assert data.datasets == ["nyu-mll/glue"]
    assert sorted((r.metric_type, r.metric_name, r.dataset_split, r.metric_value) for r in data.eval_results) == [
        ("accuracy", "accuracy", "validation_matched", 0.75),
        ("accuracy", "accuracy_mm", "validation_mismatched", 0.7),
        ("loss", "loss", "validation_matched", 0.6),
    ]
    assert "| accuracy_mm | 0.7 | nyu-mll/glue (mnli), split validation_mismatched |" in text
    assert "| predict_accuracy | 0.5 | test.csv, split test |" in text
    assert "samples" not in text.split("## Evaluation results")[1].split("## Limitations")[0]
    assert "(12 training steps on nyu-mll/glue (mnli))" in text
