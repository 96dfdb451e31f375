"""The pretraining example scripts (masked LM with NSP/SOP, T5 span corruption), their masking and span-corruption
collators, the same first step on 1 and 2 processes (torchrun), and clear errors for bad input before training."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import BertTokenizerFast

import hf_attn_variants as hav
import run_pretraining
import run_t5_pretraining
from hf_attn_variants.isolation import run_isolated
from hf_attn_variants.presets import preset_config
from hf_attn_variants.training import pretraining_data
from hf_attn_variants.training.data_collators import (
    DataCollatorForT5SpanCorruption,
    MaskedLMCollator,
    corrupted_lengths,
    mask_example,
    random_spans_noise_mask,
    raw_length_for,
    word_continuation,
)
from hf_attn_variants.training.tokenizer_training import train_tokenizer
from hub_server import card_metadata_errors
from run_pretraining import CORPUS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

FAST = [
    "--logging_steps",
    "1",
    "--eval_strategy",
    "no",
    "--save_strategy",
    "no",
    "--disable_tqdm",
    "true",
    "--max_seq_length",
    "32",
    "--per_device_train_batch_size",
    "8",
    "--warmup_steps",
    "0",
    "--max_eval_samples",
    "16",
]
NO_DROPOUT = '{"hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0}'


def logged_losses(output_dir) -> list[float]:
    history = json.loads((Path(output_dir) / "trainer_state.json").read_text())["log_history"]
    return [entry["loss"] for entry in history if "loss" in entry]


def assert_learns(output_dir) -> None:
    losses = logged_losses(output_dir)
    assert len(losses) >= 8 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.3, losses


def load_isolated(script: str) -> str:
    """Run `script` in an interpreter that cannot import hf_attn_variants (remote code only); return its stdout."""
    proc = run_isolated(script)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def test_masked_lm_pretraining_learns_and_reloads_as_remote_code(tmp_path):
    """The main job's script on a tiny preset: loss falls, perplexity is reported, and the folder works as the README
    says: AutoModelForMaskedLM with trust_remote_code and a fill-mask pipeline, without the package."""
    out = tmp_path / "mlm"
    metrics = run_pretraining.main(
        FAST
        + [
            "--preset",
            "bert-tiny-talking-heads",
            "--output_dir",
            str(out),
            "--max_steps",
            "12",
            "--learning_rate",
            "3e-3",
            "--max_train_samples",
            "96",
            "--whole_word_masking",
            "true",
        ]
    )
    assert_learns(out)
    assert math.isfinite(metrics["eval_perplexity"]) and metrics["eval_perplexity"] > 1
    assert metrics["eval_perplexity"] == pytest.approx(math.exp(metrics["eval_mlm_loss"]), rel=1e-6)
    info = json.loads((out / "training_info.json").read_text())
    assert info["task"] == "fill-mask" and info["preset"] == "bert-tiny-talking-heads"
    # the eval metrics name their data: the rows held out of the embedded book, not the book's training rows
    [measured] = info["evaluation"]
    assert measured["name"] == info["dataset"]["name"] and measured["metric_prefix"] == "eval_"
    assert measured["split"].startswith("validation: 5% of the train rows held out")
    card = (out / "README.md").read_text()
    assert f"| {metrics['eval_perplexity']:.4g} | {measured['name']}, split validation: 5% of the train" in card
    assert json.loads((out / "all_results.json").read_text())["eval_perplexity"] == metrics["eval_perplexity"]
    stdout = load_isolated(
        "from transformers import AutoModelForMaskedLM, pipeline\n"
        f"model = AutoModelForMaskedLM.from_pretrained({str(out)!r}, trust_remote_code=True)\n"
        "assert type(model).__module__.startswith('transformers_modules'), type(model).__module__\n"
        "assert model.config.attention_type == 'talking_heads'\n"
        f"fill = pipeline('fill-mask', model={str(out)!r}, trust_remote_code=True)\n"
        "print(len(fill('A cynic is a [MASK] whose faulty vision sees things as they are.')))\n"
        "long = 'A cynic is a [MASK] whose faulty vision sees things as they are. ' + 'Not as they ought to be. ' * 80\n"
        "assert fill.tokenizer.model_max_length == model.config.max_position_embeddings\n"
        "print(len(fill(long, tokenizer_kwargs={'truncation': True})))\n"  # longer than the model: truncated
    )
    assert stdout.split() == ["5", "5"]


@pytest.mark.parametrize(
    "preset,objective,label",
    [
        ("bert-tiny-synthesizer-random", "nsp", "next_sentence_label"),
        ("albert-tiny-talking-heads", "sop", "sentence_order_label"),
    ],
)
def test_sentence_objectives(tmp_path, preset, objective, label):
    """NSP (BERT) and SOP (ALBERT) train the ForPreTraining head; pairs are balanced; the accuracy is reported."""
    metrics = run_pretraining.main(
        FAST
        + [
            "--preset",
            preset,
            "--output_dir",
            str(tmp_path),
            "--max_steps",
            "10",
            "--learning_rate",
            "3e-3",
            "--sentence_objective",
            objective,
        ]
    )
    assert 0 <= metrics["eval_sentence_accuracy"] <= 1 and math.isfinite(metrics["eval_mlm_loss"])
    assert_learns(tmp_path)
    tokenizer = train_tokenizer("wordpiece", corpus=CORPUS)
    docs = pretraining_data.tokenize_sentences(pretraining_data.read_documents(CORPUS)[:200], tokenizer)
    pairs = pretraining_data.pair_examples(docs, tokenizer, 64, objective, seed=0)
    labels = [p[label] for p in pairs]
    assert 0.4 < sum(labels) / len(labels) < 0.6
    sep = tokenizer.sep_token_id
    for pair in pairs:
        ids = pair["input_ids"]
        assert len(ids) <= 64 and ids[0] == tokenizer.cls_token_id and ids[-1] == sep and ids.count(sep) == 2
        assert pair["token_type_ids"] == [0] * (ids.index(sep) + 1) + [1] * (len(ids) - ids.index(sep) - 1)


def test_sop_swaps_the_segments_it_labels():
    tokenizer = train_tokenizer("wordpiece", corpus=CORPUS)
    docs = [[[100 + 3 * i + j for j in range(1 + i % 3)] for i in range(300)]]  # ids increase along the text
    for pair in pretraining_data.pair_examples(docs, tokenizer, 64, "sop", seed=3):
        ids = pair["input_ids"]
        cut = ids.index(tokenizer.sep_token_id)
        first, second = ids[1:cut], ids[cut + 1 : -1]
        in_order = first[-1] < second[0]
        assert in_order == (pair["sentence_order_label"] == 0)


def test_masking_is_per_example_and_whole_word():
    tokenizer = train_tokenizer("wordpiece", corpus=CORPUS)
    text = "Abdication, an act whereby a sovereign attests his sense of the high temperature of the throne. " * 3
    ids = tokenizer(text)["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        inputs, labels = mask_example(ids, tokenizer, 0.15, word_continuation(tokenizer), g)
        predicted = (labels != -100).tolist()
        assert abs(sum(predicted) - 0.15 * (len(ids) - 2)) <= 3  # whole words can overshoot by a word
        for i, token in enumerate(tokens):  # a continuation is predicted exactly when its word start is
            if token.startswith("##"):
                assert predicted[i] == predicted[i - 1]
        assert not predicted[0] and not predicted[-1]  # never [CLS]/[SEP]
        changed = inputs != torch.tensor(ids)
        assert not (changed & (labels == -100)).any()  # only predicted positions change
    # SentencePiece-style vocabularies (T5's, vanilla ALBERT's) mark word starts instead: '▁' begins a word.
    unigram = word_continuation(train_tokenizer("unigram", corpus=CORPUS))
    assert [unigram(t) for t in ["▁The", "ory", "▁of"]] == [False, True, False]
    # The same example gets the same mask in any batch (1 or N processes), and a new one each epoch.
    collator = MaskedLMCollator(tokenizer, 0.15, False, seed=0)
    examples = [{"input_ids": tokenizer(f"Sentence number {i} of the test.")["input_ids"]} for i in range(6)]
    whole = collator(examples)
    halves = [collator(examples[:3]), collator(examples[3:])]
    for key in ("input_ids", "labels"):
        width = min(whole[key].shape[1], halves[0][key].shape[1])
        torch.testing.assert_close(whole[key][:3, :width], halves[0][key][:, :width])
    collator.epoch = 1
    assert not torch.equal(collator(examples)["labels"], whole["labels"])


def test_span_corruption_collator():
    """T5's span corruption: round(L * density) noise tokens in round(noise / mean) spans, alternating with kept
    spans from a kept start; sentinels <extra_id_0>, <extra_id_1>, ... in order; inputs + targets give back the text."""
    tokenizer = train_tokenizer("unigram", corpus=CORPUS)
    sentinels = tokenizer.convert_tokens_to_ids([f"<extra_id_{i}>" for i in range(100)])
    assert sentinels[0] == len(tokenizer) - 1 and sentinels[1] == len(tokenizer) - 2
    g = torch.Generator().manual_seed(0)
    span_lengths = []
    for length in (20, 57, 114):
        mask = random_spans_noise_mask(length, 0.15, 3.0, g)
        noise = round(length * 0.15)
        assert mask.sum() == noise and not mask[0]
        starts = (mask[1:] & ~mask[:-1]).sum().item()
        assert starts == max(round(noise / 3.0), 1)
    for _ in range(200):  # 114 tokens: 17 noise tokens in round(17 / 3) = 6 spans, mean 2.83, lengths random
        mask = random_spans_noise_mask(114, 0.15, 3.0, g).int()
        edges = torch.diff(torch.cat([torch.tensor([0]), mask, torch.tensor([0])]))
        lengths = ((edges == -1).nonzero() - (edges == 1).nonzero()).flatten().tolist()
        assert len(lengths) == 6 and sum(lengths) == 17 and min(lengths) >= 1
        span_lengths += lengths
    assert len(set(span_lengths)) > 5  # a random composition, not fixed lengths

    collator = DataCollatorForT5SpanCorruption(tokenizer, 0.15, 3.0, seed=0)
    text = "Zoology, n. The science and history of the animal kingdom, including its king, the House Fly."
    raw = tokenizer(text, add_special_tokens=False)["input_ids"]
    example = collator.corrupt({"input_ids": raw})
    inputs, targets = example["input_ids"], example["labels"]
    assert inputs[-1] == targets[-1] == tokenizer.eos_token_id
    used = [t for t in inputs if t in sentinels]
    assert used == sentinels[: len(used)] and [t for t in targets if t in sentinels] == used
    spans, current = {}, None
    for t in targets[:-1]:
        if t in sentinels:
            current = t
            spans[current] = []
        else:
            spans[current].append(t)
    rebuilt = [x for t in inputs[:-1] for x in (spans[t] if t in sentinels else [t])]
    assert rebuilt == raw
    assert tokenizer.decode(rebuilt) == text
    raw_length = raw_length_for(128, 0.15, 3.0)
    assert corrupted_lengths(raw_length, 0.15, 3.0)[0] == 128  # inputs fill --max_seq_length exactly
    batch = collator([{"input_ids": raw}, {"input_ids": raw[:20]}])
    assert batch["labels"][1].eq(-100).any() and (batch["attention_mask"] == (batch["input_ids"] != 0)).all()


def test_t5_span_corruption_pretraining_learns_and_reloads(tmp_path):
    metrics = run_t5_pretraining.main(
        FAST
        + [
            "--preset",
            "t5-tiny-synthesizer-random",
            "--output_dir",
            str(tmp_path),
            "--max_steps",
            "10",
            "--learning_rate",
            "1e-2",
            "--max_train_samples",
            "80",
        ]
    )
    assert_learns(tmp_path)
    assert metrics["eval_perplexity"] == pytest.approx(math.exp(metrics["eval_target_loss"]), rel=1e-6)
    assert 0 <= metrics["eval_target_token_accuracy"] <= 1
    stdout = load_isolated(
        "import torch\n"
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n"
        f"model = AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)\n"
        f"tok = AutoTokenizer.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)\n"
        "ids = tok('The science of <extra_id_0> kingdom.', return_tensors='pt').input_ids\n"
        "print(model.generate(ids, max_new_tokens=4, do_sample=False).shape[0])\n"
    )
    assert stdout.strip() == "1"


def test_first_step_on_two_processes_equals_one_process(tmp_path):
    """torchrun, 2 CPU processes (gloo) x 4 sequences against 1 process x 8: the same logged loss and the same
    weights after the step (masks depend on the example, and the loss is normalised by the step's token count)."""
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun is not on PATH")
    common = [
        "--preset",
        "bert-tiny-dot-product",
        "--max_steps",
        "1",
        "--logging_steps",
        "1",
        "--max_train_samples",
        "8",
        "--max_eval_samples",
        "8",
        "--max_seq_length",
        "32",
        "--save_strategy",
        "no",
        "--eval_strategy",
        "no",
        "--use_cpu",
        "--disable_tqdm",
        "true",
        "--warmup_steps",
        "0",
        "--learning_rate",
        "1e-2",
        "--config_overrides",
        NO_DROPOUT,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    script = str(EXAMPLES / "run_pretraining.py")
    runs = {
        "one": [sys.executable, script, "--per_device_train_batch_size", "8"],
        "two": [
            str(Path(sys.executable).parent / "torchrun"),
            "--nproc_per_node",
            "2",
            "--master_port",
            "29533",
            script,
            "--per_device_train_batch_size",
            "4",
            "--ddp_backend",
            "gloo",
        ],
    }
    for name, command in runs.items():
        proc = subprocess.run(
            command + common + ["--output_dir", str(tmp_path / name)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
    (one,), (two,) = logged_losses(tmp_path / "one"), logged_losses(tmp_path / "two")
    assert two == pytest.approx(one, rel=1e-6)
    from safetensors.torch import load_file

    a, b = load_file(tmp_path / "one" / "model.safetensors"), load_file(tmp_path / "two" / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=5e-5, msg=key)


@pytest.mark.parametrize(
    "args,error,match",
    [
        (
            ["--train_file", "/nonexistent/corpus.txt"],
            FileNotFoundError,
            "--train_file /nonexistent/corpus.txt: no such",
        ),
        (
            ["--text_column_name", "body"],
            ValueError,
            r"--text_column_name body: the data has no such column; its columns "
            r"are \['text'\]",
        ),
        (["--streaming", "--max_steps", "-1"], ValueError, "--streaming needs --max_steps"),
        (["--do_predict"], ValueError, "no prediction step"),
        (["--do_train", "--eval_strategy", "epoch"], ValueError, "--eval_strategy epoch evaluates during training"),
        (["--max_seq_length", "256"], ValueError, "max_position_embeddings=128"),
        (
            [
                "--preset",
                "bert-tiny-synthesizer-dense",
                "--config_overrides",
                '{"synthesizer_max_position": 64}',
                "--max_seq_length",
                "100",
            ],
            ValueError,
            "synthesizer_max_position=64",
        ),
        (["--preset", "bert-huge-talking-heads"], ValueError, "Unknown preset"),
        (["--preset", "albert-tiny-dot-product", "--sentence_objective", "nsp"], ValueError, "use sop"),
        (["--preset", "t5-tiny-dot-product"], ValueError, "run_t5_pretraining"),
        (["--config_overrides", "num_hidden_layers=3"], ValueError, "JSON object"),
        (["--resume_from_checkpoint", "last"], ValueError, "holds no checkpoint"),
        (["--admin_init", "closed_form"], ValueError, "the model has no Admin residuals"),
        (
            ["--preset", "bert-tiny-single-head-admin", "--admin_init", "xavier"],
            ValueError,
            "--admin_init must be one of profile, closed_form",
        ),
        (
            ["--preset", "bert-tiny-single-head-admin", "--admin_init", "profile", "--do_eval"],
            ValueError,
            "this run does not train",
        ),
        (
            ["--preset", "albert-tiny-single-head-admin", "--admin_init", "profile"],
            ValueError,
            "use --admin_init closed_form",
        ),
    ],
)
def test_bad_input_fails_before_training(tmp_path, args, error, match):
    with pytest.raises(error, match=match):
        run_pretraining.main(
            ["--preset", "bert-tiny-dot-product", "--output_dir", str(tmp_path / "x"), "--max_steps", "1", *args]
        )
    assert not (tmp_path / "x" / "model.safetensors").exists()


@pytest.mark.parametrize(
    "stages,evaluated",
    [([], True), (["--do_train"], False), (["--do_train", "--do_eval"], True), (["--do_tr", "--do_ev"], True)],
)
def test_the_stages_named_are_the_stages_run(tmp_path, stages, evaluated):
    """No stage flag: train and evaluate, also during training (the script's --eval_strategy steps); the flags
    named (argparse's abbreviations too): exactly those, so --do_train alone evaluates nothing, not even during
    training."""
    out = tmp_path / "run"
    argv = ["--preset", "bert-tiny-dot-product", "--output_dir", str(out), "--max_steps", "4", "--eval_steps", "2"]
    metrics = run_pretraining.main([*argv, "--max_seq_length", "32", "--max_eval_samples", "8", *stages])
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    during = [entry["step"] for entry in history if "eval_loss" in entry]
    assert ("eval_loss" in metrics, during == [2, 4]) == (evaluated, evaluated)
    assert metrics["train_loss"] > 0  # every case trains


@pytest.mark.parametrize("choice", ["closed_form", "profile"])
def test_admin_init_sets_the_omegas_it_names(tmp_path, choice):
    """--admin_init closed_form gives every residual admin-torch's omega for N = 2 residuals per layer; profile (the
    default) gives the paper's growing omegas, the first at exactly 1. A learning rate of 0 keeps what was set, so
    the saved checkpoint shows it too."""
    out = tmp_path / choice
    run_pretraining.main(
        [
            "--preset",
            "bert-tiny-single-head-admin",
            "--output_dir",
            str(out),
            "--max_steps",
            "1",
            "--learning_rate",
            "0",
            "--admin_init",
            choice,
            *FAST,
        ]
    )
    config = json.loads((out / "config.json").read_text())
    results = json.loads((out / "all_results.json").read_text())
    from safetensors.torch import load_file

    omegas = torch.cat([v for k, v in load_file(out / "model.safetensors").items() if k.endswith("admin_omega")])
    assert omegas.numel() == 2 * config["num_hidden_layers"] * config["hidden_size"]
    if choice == "closed_form":
        n = 2 * config["num_hidden_layers"]
        expected = math.sqrt((n + 1) / math.log(n + 1) - 1)
        assert results["admin_omega_min"] == pytest.approx(expected) == results["admin_omega_max"]
        torch.testing.assert_close(omegas, torch.full_like(omegas, expected))
    else:
        assert results["admin_omega_min"] == 1.0 < results["admin_omega_max"]
        assert omegas.min().item() == 1.0 and omegas.max().item() == pytest.approx(results["admin_omega_max"])


def test_a_resumed_admin_run_keeps_its_checkpoints_omegas(tmp_path):
    """Resuming must not set the omegas again over the trained ones the checkpoint holds (Trainer loads the
    checkpoint before on_train_begin): resumed at its last step, the run saves exactly the checkpoint's omegas."""
    from safetensors.torch import load_file

    args = [
        "--preset",
        "bert-tiny-single-head-admin",
        "--output_dir",
        str(tmp_path),
        "--max_steps",
        "2",
        "--learning_rate",
        "1e-2",
        "--admin_init",
        "closed_form",
        *FAST,
        "--save_strategy",
        "steps",
        "--save_steps",
        "2",
    ]
    run_pretraining.main(args)
    saved = {
        k: v
        for k, v in load_file(tmp_path / "checkpoint-2" / "model.safetensors").items()
        if k.endswith("admin_omega")
    }
    n = 2 * json.loads((tmp_path / "config.json").read_text())["num_hidden_layers"]
    formula = math.sqrt((n + 1) / math.log(n + 1) - 1)
    assert any((v - formula).abs().max() > 1e-3 for v in saved.values())  # training moved them
    run_pretraining.main([*args, "--resume_from_checkpoint", "last"])
    final = load_file(tmp_path / "model.safetensors")
    for key, value in saved.items():
        torch.testing.assert_close(final[key], value, atol=0, rtol=0, msg=key)  # weights: bitwise


def test_t5_bad_input_fails_before_training(tmp_path):
    with pytest.raises(ValueError, match="synthesizer_max_position=128"):
        run_t5_pretraining.main(
            [
                "--preset",
                "t5-tiny-synthesizer-dense",
                "--output_dir",
                str(tmp_path),
                "--max_seq_length",
                "200",
                "--max_steps",
                "1",
            ]
        )
    with pytest.raises(ValueError, match="run_pretraining"):
        run_t5_pretraining.main(["--preset", "bert-tiny-dot-product", "--output_dir", str(tmp_path)])


def test_side_by_side_comparison(tmp_path):
    pytest.importorskip("matplotlib")
    import compare_attention

    rows = compare_attention.main(
        [
            "--size",
            "tiny",
            "--attention",
            "dot-product,single-head-admin",
            "--max_steps",
            "4",
            "--eval_steps",
            "2",
            "--max_seq_length",
            "32",
            "--output_dir",
            str(tmp_path),
            "--max_train_samples",
            "64",
            "--max_eval_samples",
            "16",
            "--disable_tqdm",
            "true",
        ]
    )
    assert [r["preset"] for r in rows] == ["bert-tiny-dot-product", "bert-tiny-single-head-admin"]
    assert [step for step, _ in rows[0]["curve"]] == [step for step, _ in rows[1]["curve"]] == [2, 4]
    single = json.loads((tmp_path / "bert-tiny-single-head-admin" / "config.json").read_text())
    assert single["num_hidden_layers"] == 4 and single["num_attention_heads"] == 1 and single["admin"]
    results = json.loads((tmp_path / "bert-tiny-single-head-admin" / "all_results.json").read_text())
    # what Admin's profiling set is recorded: the first residual's omega is 1, the later ones grow
    assert results["admin_omega_min"] == 1.0 < results["admin_omega_max"]
    assert "admin_omega_min" not in json.loads((tmp_path / "bert-tiny-dot-product" / "all_results.json").read_text())
    table = (tmp_path / "results.md").read_text()
    assert "| single-head-admin | `bert-tiny-single-head-admin` |" in table
    assert (tmp_path / "eval_loss.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="Unknown attention setup"):
        compare_attention.main(["--attention", "dot-product,linear", "--output_dir", str(tmp_path)])


def test_push_to_hub_passes_through_with_the_real_card(hub, tmp_path):
    """--push_to_hub: Trainer's upload, then the model card rendered from the run replaces Trainer's README; the
    repository holds what `hf-attn-variants publish` would upload (loopback Hub, a fresh interpreter)."""
    out = tmp_path / "pushed"
    command = [
        sys.executable,
        str(EXAMPLES / "run_pretraining.py"),
        *FAST,
        "--preset",
        "bert-tiny-talking-heads",
        "--output_dir",
        str(out),
        "--max_steps",
        "2",
        "--max_train_samples",
        "16",
        "--push_to_hub",
        "--hub_model_id",
        "tester/tiny-mlm",
    ]
    proc = subprocess.run(command, env=hub.env(tmp_path / "hf_home"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    files = hub.state.files("tester/tiny-mlm")
    code = {
        "attention_variants.py",
        "configuration_variant_attention.py",
        "configuration_variant_bert.py",
        "modeling_variant_bert.py",
        "modeling_variant_utils.py",
    }
    assert {
        "README.md",
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "all_results.json",
        "training_info.json",
        *code,
    } <= set(files)
    assert "training_args.bin" not in files
    card = files["README.md"].decode()
    assert card_metadata_errors(card) == [] and "hf-attn-variants" in card
    results = json.loads(files["all_results.json"])
    assert f"| perplexity | {results['eval_perplexity']:.4g} |" in card
    assert "bert-tiny-talking-heads" in card and "Talking-Heads Attention" in card


# ------------------------------------------------------------------------------------------- data at real scale
LINES = (EXAMPLES / "data" / "devils_dictionary.txt").read_text().splitlines()[:400]
USER_TEXT = ["The software on the computer reads the database; no software, no database, no computer."] * 40
TINY_RUN = [
    "--logging_steps",
    "1",
    "--eval_strategy",
    "no",
    "--save_strategy",
    "no",
    "--disable_tqdm",
    "true",
    "--max_seq_length",
    "32",
    "--per_device_train_batch_size",
    "4",
    "--max_steps",
    "2",
    "--max_eval_samples",
    "8",
]


def write_corpus(path: Path, lines: list[str]) -> Path:
    """`lines` (empty strings: document breaks) as a .txt, .jsonl or .parquet file of one row per line."""
    if path.suffix == ".txt":
        path.write_text("\n".join(lines) + "\n")
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({"id": i, "body": line}) + "\n" for i, line in enumerate(lines)))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"body": lines}), path)
    return path


@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ".parquet"])
def test_pretraining_on_a_local_file(tmp_path, suffix):
    """--train_file in each format (json/parquet through --text_column_name); the project tokenizer is trained on
    that file (a word the embedded book lacks is one token), and the saved tokenizer agrees with the model's length."""
    corpus = write_corpus(tmp_path / f"corpus{suffix}", LINES[:200] + USER_TEXT + [""] + LINES[200:])
    column = [] if suffix == ".txt" else ["--text_column_name", "body"]
    out = tmp_path / "out"
    metrics = run_pretraining.main(
        [
            *TINY_RUN,
            "--preset",
            "bert-tiny-dot-product",
            "--output_dir",
            str(out),
            "--train_file",
            str(corpus),
            *column,
        ]
    )
    assert math.isfinite(metrics["eval_mlm_loss"]) and metrics["train_loss"] > 0
    from transformers import AutoTokenizer

    saved = AutoTokenizer.from_pretrained(out)
    assert saved.tokenize("software database") == ["software", "database"]
    assert (
        len(train_tokenizer("wordpiece", corpus=CORPUS).tokenize("software database")) > 2
    )  # the embedded book's splits them
    assert saved.model_max_length == 128 == json.loads((out / "config.json").read_text())["max_position_embeddings"]
    info = json.loads((out / "training_info.json").read_text())
    assert info["dataset"]["name"] == corpus.name
    [measured] = info["evaluation"]
    assert measured["name"] == corpus.name and measured["split"].startswith("validation: 5% of the train rows")


@pytest.mark.parametrize(
    "script,preset,extra",
    [
        (run_pretraining, "bert-tiny-talking-heads", []),
        (run_pretraining, "albert-tiny-dot-product", ["--sentence_objective", "sop", "--whole_word_masking", "true"]),
        (run_t5_pretraining, "t5-tiny-dot-product", []),
    ],
)
def test_streaming_pretraining(tmp_path, script, preset, extra):
    """--streaming: an IterableDataset prepared as it is read, with --max_steps; evaluation on a bounded stream."""
    metrics = script.main(
        [
            *TINY_RUN,
            "--preset",
            preset,
            "--output_dir",
            str(tmp_path),
            "--streaming",
            "--eval_strategy",
            "steps",
            "--eval_steps",
            "2",
            *extra,
        ]
    )
    assert metrics["train_loss"] > 0 and metrics["epoch"] > 0
    loss = metrics.get("eval_mlm_loss", metrics.get("eval_target_loss"))
    assert math.isfinite(loss)
    if extra:
        assert 0 <= metrics["eval_sentence_accuracy"] <= 1


def cache_files(root: Path) -> dict[str, float]:
    return {str(f): f.stat().st_mtime_ns for f in root.rglob("cache-*.arrow")}


@pytest.mark.parametrize(
    "script,preset", [(run_pretraining, "bert-tiny-dot-product"), (run_t5_pretraining, "t5-tiny-dot-product")]
)
def test_a_rerun_reads_the_prepared_data_from_the_cache(tmp_path, monkeypatch, script, preset):
    """The same run twice: the second writes no cache file and rewrites none (the preparation is read back);
    --overwrite_cache prepares again."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    corpus = write_corpus(tmp_path / "corpus.txt", LINES)
    argv = [
        *TINY_RUN,
        "--preset",
        preset,
        "--output_dir",
        str(tmp_path / "out"),
        "--train_file",
        str(corpus),
        "--max_steps",
        "1",
    ]
    script.main(argv)
    first = cache_files(tmp_path / "datasets")
    assert len(first) >= 2  # the packed train and validation splits (and the pre-masked validation split)
    script.main(argv)
    assert cache_files(tmp_path / "datasets") == first
    script.main(argv + ["--overwrite_cache"])
    again = cache_files(tmp_path / "datasets")
    assert again.keys() == first.keys() and all(again[f] > first[f] for f in first)


def test_eval_only_and_checks_of_training_arguments(tmp_path):
    """--do_eval alone evaluates a checkpoint without training (the same eval set and masks as the training run's
    evaluation); warm-up reaching max_steps warns; no pinned memory without CUDA."""
    out = tmp_path / "trained"
    trained = run_pretraining.main([*TINY_RUN, "--preset", "bert-tiny-dot-product", "--output_dir", str(out)])
    evaluated = run_pretraining.main(
        [
            "--model_name_or_path",
            str(out),
            "--do_eval",
            "--output_dir",
            str(tmp_path / "eval"),
            "--max_seq_length",
            "32",
            "--max_eval_samples",
            "8",
            "--disable_tqdm",
            "true",
        ]
    )
    assert not any(key.startswith("train") for key in evaluated)
    assert evaluated["eval_mlm_loss"] == pytest.approx(trained["eval_mlm_loss"], rel=1e-4)
    info = json.loads((tmp_path / "eval" / "training_info.json").read_text())  # a complete folder, card included
    assert info["stages"] == ["eval"] and (tmp_path / "eval" / "README.md").is_file()
    assert (tmp_path / "eval" / "model.safetensors").is_file()
    from transformers import TrainingArguments

    from script_utils import settle_training_args

    args = TrainingArguments(str(tmp_path), max_steps=20, warmup_steps=40)
    with pytest.warns(UserWarning, match="--warmup_steps 40 reaches --max_steps 20"):
        settle_training_args(args)
    assert args.dataloader_pin_memory is torch.cuda.is_available()


HUB_CORPUS = {"lines": {"train": {"text": LINES[:300]}, "validation": {"text": LINES[300:]}}}
HUB_RUNS = """
import sys
sys.path.insert(0, {examples!r})
import run_pretraining, run_t5_pretraining
common, tmp = {common!r}, {tmp!r}
data = ["--dataset_name", "tester/devils-lines", "--dataset_config_name"]
run_pretraining.main(common + data + ["lines", "--preset", "bert-tiny-talking-heads", "--output_dir", tmp + "/mlm"])
run_t5_pretraining.main(common + data + ["lines", "--preset", "t5-tiny-dot-product", "--output_dir", tmp + "/t5"])
try:
    run_pretraining.main(common + data + ["wiki", "--preset", "bert-tiny-dot-product", "--output_dir", tmp + "/bad"])
except ValueError as error:
    print("ERROR", error)
"""


def test_pretraining_from_a_hub_dataset(hub, tmp_path):
    """--dataset_name tester/<name> --dataset_config_name <cfg> through the loopback Hub, masked LM and T5 (a fresh
    interpreter: huggingface_hub reads HF_ENDPOINT at import); a config the dataset lacks stops before training."""
    from conftest import run_with_hub

    hub.create_dataset_repo("tester/devils-lines", HUB_CORPUS)
    code = HUB_RUNS.format(examples=str(EXAMPLES), common=TINY_RUN, tmp=str(tmp_path))
    proc = run_with_hub(hub, tmp_path / "hf_home", [sys.executable, "-c", code])
    for run in ("mlm", "t5"):
        results = json.loads((tmp_path / run / "all_results.json").read_text())
        assert math.isfinite(results.get("eval_mlm_loss", results.get("eval_target_loss")))
        info = json.loads((tmp_path / run / "training_info.json").read_text())
        assert info["dataset"]["hub_id"] == "tester/devils-lines" and info["dataset"]["config"] == "lines"
        [measured] = info["evaluation"]  # the dataset's own validation split: nothing carved out of train
        assert (measured["hub_id"], measured["config"], measured["split"]) == (
            "tester/devils-lines",
            "lines",
            "validation",
        )
    assert ("GET", "/datasets/tester/devils-lines/resolve/main/README.md") in hub.state.requests
    assert (
        "ERROR The dataset tester/devils-lines has no configuration 'wiki': pass --dataset_config_name one of "
        "['lines']."
    ) in proc.stdout
    assert not (tmp_path / "bad").exists()


def test_bf16_trains_on_the_cpu_without_a_flag(tmp_path):
    """--bf16 on a machine without an accelerator runs with CPU autocast (the scripts default to --use_cpu there;
    transformers alone refuses bf16 without a GPU): the run trains and the weights are saved in float32."""
    if torch.cuda.is_available():
        pytest.skip("a GPU machine: Trainer puts the run on the GPU")
    metrics = run_pretraining.main(
        FAST
        + [
            "--preset",
            "bert-tiny-dot-product",
            "--output_dir",
            str(tmp_path),
            "--max_steps",
            "2",
            "--max_train_samples",
            "16",
            "--bf16",
        ]
    )
    assert math.isfinite(metrics["train_loss"]) and math.isfinite(metrics["eval_mlm_loss"])
    config = json.loads((tmp_path / "config.json").read_text())
    assert config.get("dtype", "float32") == "float32"


HUB_MODEL = """
import sys
sys.path.insert(0, {examples!r})
from huggingface_hub import HfApi
HfApi().create_repo("tester/tiny-bert")
HfApi().upload_folder(folder_path={folder!r}, repo_id="tester/tiny-bert")
import run_pretraining
run_pretraining.main({common!r} + ["--model_name_or_path", "tester/tiny-bert", "--attention_type", "talking_heads",
                                   "--output_dir", {out!r}])
"""


def test_pretraining_from_a_hub_model_by_name(hub, tmp_path):
    """--model_name_or_path a Hub model id (a transformers BertForMaskedLM on the loopback Hub), as transformers'
    examples take it: warm-started as talking heads, and the card's base_model is that id."""
    from transformers import BertConfig, BertForMaskedLM

    from conftest import run_with_hub

    tokenizer = train_tokenizer("wordpiece", 8000, corpus=CORPUS)
    BertForMaskedLM(
        BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
            max_position_embeddings=64,
        )
    ).save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    out = tmp_path / "out"
    code = HUB_MODEL.format(examples=str(EXAMPLES), folder=str(tmp_path / "bert"), common=TINY_RUN, out=str(out))
    run_with_hub(hub, tmp_path / "hf_home", [sys.executable, "-c", code])
    config = json.loads((out / "config.json").read_text())
    assert (config["attention_type"], config["talking_heads_init"]) == ("talking_heads", "identity")
    info = json.loads((out / "training_info.json").read_text())
    assert info["base_model"] == info["started_from"] == "tester/tiny-bert" and info["preset"] is None
    assert card_metadata_errors((out / "README.md").read_text()) == []
    assert ModelCard((out / "README.md").read_text()).data.base_model == "tester/tiny-bert"


def _cannot_learn_case(case: str, tmp_path) -> list[str]:
    """The flags of a run that cannot learn, and what it needs on disk."""
    specials = tmp_path / "specials.txt"  # text of special tokens only: nothing the masking may choose
    specials.write_text("[SEP] [PAD] [SEP] [PAD] [SEP]\n" * 400)
    if case in ("a model folder without its tokenizer", "ids beyond the embeddings"):
        config = preset_config("bert-tiny-dot-product", vocab_size=8000 if case.startswith("a model") else 100)
        hav.VariantBertForMaskedLM(config).save_pretrained(tmp_path / "model")  # the model only
        extra = ["--tokenizer_name", str(EXAMPLES / "data" / "kjv-wordpiece-8000")] if case.startswith("ids") else []
        return ["--model_name_or_path", str(tmp_path / "model"), "--attention_type", "talking_heads", *extra]
    if case == "a tokenizer that does not cover the text":
        vocab = tmp_path / "vocab.txt"
        vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a"]) + "\n")
        BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(tmp_path / "tokenizer")
        return ["--preset", "bert-tiny-dot-product", "--tokenizer_name", str(tmp_path / "tokenizer")]
    if case == "no masked token in training":
        return ["--preset", "bert-tiny-dot-product", "--train_file", str(specials), "--max_seq_length", "16"]
    if case == "no masked token in validation":
        return ["--preset", "bert-tiny-dot-product", "--train_file", str(CORPUS), "--validation_file", str(specials)]
    assert case == "a loss that turns NaN"
    return [
        "--preset",
        "bert-tiny-dot-product",
        "--learning_rate",
        "1e30",
        "--logging_steps",
        "5",
        "--max_steps",
        "30",
    ]


CANNOT_LEARN = {
    "a model folder without its tokenizer": "holds a model and no tokenizer: pass --tokenizer_name",
    "a tokenizer that does not cover the text": r"of the first training batch's tokens are \[UNK\]",
    "no masked token in training": "The first training batch has no masked token",
    "no masked token in validation": "The first validation batch has no masked token",
    "ids beyond the embeddings": "The tokenizer has 8000 tokens but the model only 100",
    "a loss that turns NaN": r"step 5: loss is nan, so the run stopped",
}


@pytest.mark.parametrize("case", sorted(CANNOT_LEARN))
def test_a_run_that_cannot_learn_stops_with_one_line(tmp_path, case):
    """As a user runs the script: exit status 1, one line naming the cause, and nothing recorded as a result (no
    metrics, no card); the NaN run after 5 steps, every other one before training."""
    out = tmp_path / "out"
    command = [sys.executable, str(EXAMPLES / "run_pretraining.py"), "--output_dir", str(out), "--max_steps", "3"]
    command += ["--disable_tqdm", "true", *_cannot_learn_case(case, tmp_path)]
    proc = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("run_pretraining.py: error: ") and re.search(CANNOT_LEARN[case], last), last
    assert "Traceback" not in proc.stderr
    recorded = [p.name for p in out.glob("*") if p.name in ("all_results.json", "train_results.json", "README.md")]
    assert recorded == []


def _closed_port() -> str:
    import socket

    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.mark.parametrize(
    "case", ["bad flag", "hub unreachable (model)", "hub unreachable (push)", "hub asked for while offline"]
)
def test_expected_user_errors_print_one_line(tmp_path, case):
    """A bad flag, or a Hub that cannot be reached, ends the command line with one clear line and exit status 1,
    not a traceback; and no run prints DeepSpeed's "no accelerator" warning (installed or not, no --deepspeed)."""
    argv, expected = {
        "bad flag": (["--preset", "bert-tiny-nope"], "error: Unknown preset 'bert-tiny-nope'. Choose one of:"),
        "hub unreachable (model)": (
            ["--model_name_or_path", "tester/absent", "--attention_type", "talking_heads"],
            "error: --model_name_or_path tester/absent: no config.json there",
        ),
        "hub unreachable (push)": (
            ["--preset", "bert-tiny-dot-product", "--push_to_hub", "--hub_model_id", "tester/x"],
            "error: the Hugging Face Hub cannot be reached",
        ),
        "hub asked for while offline": (  # not "work offline: HF_HUB_OFFLINE=1", which is set already
            ["--preset", "bert-tiny-dot-product", "--push_to_hub", "--hub_model_id", "tester/x"],
            "error: the run needs the Hugging Face Hub, and HF_HUB_OFFLINE is set",
        ),
    }[case]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1" if "offline" in case else "0",
        "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",
        "HF_HOME": str(tmp_path / "hf_home"),
        "HF_TOKEN": "hf_dummy",
        "HF_HUB_ETAG_TIMEOUT": "2",
    }
    env.pop("DS_ACCELERATOR", None)
    proc = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "run_pretraining.py"),
            *FAST,
            *argv,
            "--output_dir",
            str(tmp_path / "out"),
            "--max_steps",
            "1",
            "--max_train_samples",
            "8",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("run_pretraining.py: " + expected), last
    assert "Setting accelerator to CPU" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("objective", ["none", "nsp"])
def test_pretraining_predicts_sparsely_by_default_with_the_dense_losses(tmp_path, objective, monkeypatch):
    """run_pretraining calls the heads with `sparse_prediction=True` (the collator's batches carry it); training and
    evaluation give the losses of the dense head (same seed, masks and data); the saved config does not carry it, and
    the folder serves fill-mask with full logits."""
    from hf_attn_variants.models import modeling_variant_utils

    seen = []
    real = modeling_variant_utils.scored_positions
    monkeypatch.setattr(
        modeling_variant_utils,
        "scored_positions",
        lambda hidden, labels, sparse: seen.append(sparse) or real(hidden, labels, sparse),
    )
    runs = {}
    for flag in ("true", "false"):
        out = tmp_path / flag
        seen.clear()
        runs[flag] = run_pretraining.main(
            FAST
            + [
                "--preset",
                "bert-tiny-talking-heads",
                "--output_dir",
                str(out),
                "--max_steps",
                "3",
                "--max_train_samples",
                "24",
                "--seed",
                "3",
                "--config_overrides",
                NO_DROPOUT,
                "--sentence_objective",
                objective,
                "--sparse_prediction",
                flag,
            ]
        )
        assert seen and set(seen) == {flag == "true"}, seen  # every training and evaluation call
        assert "sparse_prediction" not in json.loads((out / "config.json").read_text())
    for key in ("train_loss", "eval_loss", "eval_mlm_loss"):
        assert runs["true"][key] == pytest.approx(runs["false"][key], rel=1e-5, abs=1e-5), key
    from transformers import pipeline

    fill = pipeline("fill-mask", model=str(tmp_path / "true"), trust_remote_code=True)
    assert len(fill("the [MASK] of it")) == 5


@pytest.mark.parametrize("objective", ["none", "sop"])
def test_padding_free_pretraining_trains_as_the_padded_batch(tmp_path, objective, monkeypatch):
    """--padding_free collates each batch into one row (restarting position ids, no mask, no padding): with dropout
    off, the same losses as the padded batches, line by line or in sentence pairs; the model saw packed rows."""
    from hf_attn_variants.models import attention_base

    packed = []
    attend = attention_base.attend_per_sequence
    monkeypatch.setattr(
        attention_base, "attend_per_sequence", lambda *a, **k: packed.append(k["cu_seq_lens_q"]) or attend(*a, **k)
    )
    preset = "bert-tiny-talking-heads" if objective == "none" else "albert-tiny-synthesizer-mixture"
    layout = ["--line_by_line"] if objective == "none" else ["--sentence_objective", objective]
    runs = {}
    for flag in ("--padding_free", None):
        packed.clear()
        runs[flag] = run_pretraining.main(
            FAST
            + [*layout, *([flag] if flag else []), "--preset", preset, "--output_dir", str(tmp_path / str(flag))]
            + ["--max_steps", "3", "--seed", "3", "--config_overrides", NO_DROPOUT, "--max_seq_length", "48"]
        )
        if flag:
            assert packed and all(len(cu) > 2 for cu in packed)  # several sequences in each packed row
    for key in ("train_loss", "eval_loss", "eval_mlm_loss"):
        assert runs["--padding_free"][key] == pytest.approx(runs[None][key], rel=1e-5, abs=1e-5), key


def test_line_by_line_keeps_each_line_a_sequence():
    tokenizer = train_tokenizer("wordpiece", 300, lines=LINES[:200])
    out = pretraining_data.line_batch({"text": ["a cynic", "", "  ", "x " * 100]}, tokenizer, "text", 16)
    assert [len(ids) for ids in out["input_ids"]][1] == 16 and len(out["input_ids"]) == 2
    assert all(ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id for ids in out["input_ids"])
    with pytest.raises(ValueError, match="--line_by_line makes each line a sequence"):
        run_pretraining.check_objective("bert", "nsp", line_by_line=True)


# Evaluation code written for transformers (run_mlm's `preprocess_logits_for_metrics` and `compute_metrics`), on a
# checkpoint made by run_pretraining (sparse prediction on), loaded where the package is absent; `accuracy` is also
# computed by hand from the same model called without labels, batch by batch.
RUN_MLM_STYLE_EVAL = """
import json, sys
import numpy as np
import torch
from datasets import Dataset
from transformers import AutoModelForMaskedLM, AutoTokenizer, Trainer, TrainingArguments

path, lines_file, out_dir = sys.argv[1:4]
tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
model = AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=True)
lines = [line for line in open(lines_file).read().splitlines() if len(line.split()) > 12][:24]
ids = [tokenizer(line, truncation=True, max_length=16, padding="max_length")["input_ids"] for line in lines]
examples = []
for row in ids:
    labels = [-100] * len(row)
    inputs = list(row)
    for i in range(1, len(row) - 1, 5):  # a fixed 20% of the positions, masked
        labels[i], inputs[i] = row[i], tokenizer.mask_token_id
    examples.append({"input_ids": inputs, "attention_mask": [1] * len(row), "labels": labels})

def preprocess_logits_for_metrics(logits, labels):
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(dim=-1)

def compute_metrics(eval_preds):
    preds, labels = eval_preds
    labels, preds = labels.reshape(-1), preds.reshape(-1)
    scored = labels != -100
    return {"accuracy": float((preds[scored] == labels[scored]).mean()), "preds_shape": list(eval_preds[0].shape)}

args = TrainingArguments(out_dir, per_device_eval_batch_size=8, report_to="none", disable_tqdm=True)
trainer = Trainer(model=model, args=args, eval_dataset=Dataset.from_list(examples),
                  compute_metrics=compute_metrics, preprocess_logits_for_metrics=preprocess_logits_for_metrics)
metrics = trainer.evaluate()

correct = total = 0
model.eval()
with torch.no_grad():
    for start in range(0, len(examples), 8):
        batch = examples[start:start + 8]
        logits = model(input_ids=torch.tensor([e["input_ids"] for e in batch]),
                       attention_mask=torch.tensor([e["attention_mask"] for e in batch])).logits
        labels = torch.tensor([e["labels"] for e in batch])
        scored = labels != -100
        correct += int((logits.argmax(-1)[scored] == labels[scored]).sum())
        total += int(scored.sum())
print(json.dumps({"trainer": metrics, "by_hand": correct / total, "examples": len(examples), "seq": len(ids[0])}))
"""


def test_a_pretrained_checkpoint_keeps_transformers_logits_contract_in_run_mlm_style_evaluation(tmp_path):
    """A checkpoint trained by run_pretraining (sparse prediction on, the default) evaluated by a Trainer with
    run_mlm's metrics, as transformers' evaluation code is written: the logits of a labelled call are full
    [batch, seq, vocab], so the accuracy over the labelled positions is the one computed by hand."""
    out = tmp_path / "mlm"
    run_pretraining.main(
        FAST
        + [
            "--preset",
            "bert-tiny-talking-heads",
            "--output_dir",
            str(out),
            "--max_steps",
            "3",
            "--max_train_samples",
            "24",
        ]
    )
    lines = EXAMPLES / "data" / "devils_dictionary.txt"
    proc = run_isolated(RUN_MLM_STYLE_EVAL, [out, lines, tmp_path / "eval"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["trainer"]["eval_preds_shape"] == [result["examples"], result["seq"]]  # [b, n]: full logits
    assert 0 < result["by_hand"] < 1
    assert result["trainer"]["eval_accuracy"] == pytest.approx(result["by_hand"], abs=1e-9)


@pytest.mark.parametrize("script", ["run_pretraining", "run_t5_pretraining"])
def test_torch_compile_trains_end_to_end_as_the_uncompiled_script(tmp_path, script):
    """The scripts' `--torch_compile` (Trainer's: the model wrapped in torch.compile, no fullgraph), on a tiny preset:
    dynamo really compiled frames, and the losses equal the uncompiled run's (same seed, data and masks; no dropout).
    aot_eager traces forward and backward as inductor does, at a fraction of the compile time (inductor itself:
    tests/models/test_compile.py)."""
    import torch._dynamo

    module = {"run_pretraining": run_pretraining, "run_t5_pretraining": run_t5_pretraining}[script]
    preset = {"run_pretraining": "bert-tiny-talking-heads", "run_t5_pretraining": "t5-tiny-talking-heads"}[script]
    overrides = NO_DROPOUT if script == "run_pretraining" else '{"dropout_rate": 0}'
    runs = {}
    for compiled in (False, True):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        flags = ["--torch_compile", "true", "--torch_compile_backend", "aot_eager"] if compiled else []
        runs[compiled] = module.main(
            FAST
            + [
                "--preset",
                preset,
                "--output_dir",
                str(tmp_path / str(compiled)),
                "--max_steps",
                "3",
                "--max_train_samples",
                "24",
                "--seed",
                "5",
                "--config_overrides",
                overrides,
                *flags,
            ]
        )
        frames = torch._dynamo.utils.counters["frames"]["ok"]
        assert (frames > 0) is compiled, frames
    for key in ("train_loss", "eval_loss"):
        assert runs[True][key] == pytest.approx(runs[False][key], rel=1e-4, abs=1e-4), key
