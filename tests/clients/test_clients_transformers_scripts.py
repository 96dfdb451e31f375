"""A fine-tuning script written as transformers' examples write one (tests/fixtures/run_glue_like.py: HfArgumentParser,
AutoConfig / AutoTokenizer / AutoModelForSequenceClassification with trust_remote_code, datasets' CSV builder,
Trainer) fine-tunes a saved checkpoint of ours in a process that cannot import this package, and what it saves loads
again, as remote code, where the package is absent."""

import ast
import csv
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("datasets")
from safetensors.torch import load_file
from transformers import AutoTokenizer

import hf_attn_variants as hav
from conftest import build, family
from hf_attn_variants.isolation import run_isolated

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parents[1] / "fixtures" / "run_glue_like.py"
DATA = ROOT / "examples" / "data"
TOKENIZER = DATA / "kjv-wordpiece-8000"
HEADS = [
    "VariantBertForSequenceClassification",
    "VariantAlbertForSequenceClassification",
    "VariantT5ForSequenceClassification",
]
TEXTS = ["a gripping , beautifully acted film .", "dull , lifeless and far too long ."]

# Appended to the script's source in the isolated process: after `main()` has run, which of our modules were loaded,
# and from where (the package, or the remote code transformers copied from the checkpoint).
EPILOGUE = textwrap.dedent(
    """
    import sys
    print("package modules:", sorted(m for m in sys.modules if m.split(".")[0] == "hf_attn_variants"))
    print("remote modules:", sorted(m.split(".")[-1] for m in sys.modules if m.startswith("transformers_modules")))
    try:
        import hf_attn_variants
    except ModuleNotFoundError as error:
        print("package import:", error)
    """
)

# Loads the fine-tuned folder where the package cannot be imported: the model by hand and through pipeline().
RELOAD = textwrap.dedent(
    """
    import json, sys, torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline
    path, texts = sys.argv[1], json.loads(sys.argv[2])
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    model = AutoModelForSequenceClassification.from_pretrained(path, trust_remote_code=True).eval()
    with torch.no_grad():
        logits = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits
    classifier = pipeline("text-classification", model=path, trust_remote_code=True)
    print(json.dumps({"module": type(model).__module__, "class": type(model).__name__, "logits": logits.tolist(),
                      "labels": [row["label"] for row in classifier(texts)]}))
    """
)


def _subset(source: Path, target: Path, rows: int) -> Path:
    """The first `rows` rows of one of the embedded CSV files (their labels alternate: balanced)."""
    with source.open(newline="") as f:
        reader = csv.reader(f)
        table = [next(reader)] + [row for _, row in zip(range(rows), reader)]
    with target.open("w", newline="") as f:
        csv.writer(f).writerows(table)
    return target


@pytest.fixture
def data(tmp_path):
    return (
        _subset(DATA / "rt_polarity_train.csv", tmp_path / "train.csv", 64),
        _subset(DATA / "rt_polarity_validation.csv", tmp_path / "validation.csv", 32),
    )


def _checkpoint(head: str, path: Path) -> Path:
    """A tiny talking-heads classifier of our package with the project's WordPiece tokenizer saved beside it (the
    model's vocabulary and special ids are the tokenizer's; T5 reads the sentence at its <eos>: [SEP] here)."""
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    ids = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, num_labels=2)
    if family(head) == "t5":
        ids.update(eos_token_id=tokenizer.sep_token_id, decoder_start_token_id=tokenizer.pad_token_id)
    build(head, "talking_heads", **ids).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _run_script(model, data, output_dir, *extra, cwd):
    """`python run_glue_like.py ...` as a Hub user runs it: in `run_isolated`, with the script's source as the code."""
    train, validation = data
    args = [
        "--model_name_or_path",
        model,
        "--train_file",
        train,
        "--validation_file",
        validation,
        "--max_seq_length",
        "32",
        "--do_train",
        "--do_eval",
        "--max_steps",
        "4",
        "--per_device_train_batch_size",
        "16",
        "--learning_rate",
        "1e-3",
        "--seed",
        "0",
        "--output_dir",
        output_dir,
        *extra,
    ]
    return run_isolated(SCRIPT.read_text() + EPILOGUE, args, cwd=cwd)


def test_the_script_imports_only_what_a_transformers_user_has():
    tree = ast.parse(SCRIPT.read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"datasets", "numpy", "transformers"}, imported


@pytest.mark.parametrize("head", HEADS)
def test_run_glue_like_fine_tunes_a_checkpoint_without_the_package(tmp_path, data, head):
    fam = family(head)
    start = _checkpoint(head, tmp_path / "start")
    start_weights = load_file(start / "model.safetensors")
    out = tmp_path / "out"

    proc = _run_script(start, data, out, "--trust_remote_code", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # Non-vacuity: the package was refused in that process, and the model ran from the checkpoint's own code.
    assert "package modules: []" in proc.stdout
    assert "package import: hf_attn_variants is blocked" in proc.stdout
    remote = proc.stdout.split("remote modules:", 1)[1].splitlines()[0]
    assert f"'modeling_variant_{fam}'" in remote and "'attention_variants'" in remote

    eval_results = json.loads((out / "eval_results.json").read_text())
    assert 0.0 <= eval_results["eval_accuracy"] <= 1.0 and eval_results["eval_samples"] == 32
    assert "eval_accuracy" in json.loads((out / "all_results.json").read_text())
    assert json.loads((out / "train_results.json").read_text())["train_samples"] == 64

    # It trained: the output holds the checkpoint's tensors, and every one of them moved (compared exactly).
    trained = load_file(out / "model.safetensors")
    assert set(trained) == set(start_weights)
    unchanged = [name for name in trained if torch.equal(trained[name], start_weights[name])]
    assert not unchanged, unchanged

    # The output carries the remote code (Trainer's checkpoint too) and a full auto_map naming our head.
    for folder in (out, out / "checkpoint-4"):
        assert {f"modeling_variant_{fam}.py", f"configuration_variant_{fam}.py", "attention_variants.py"} <= {
            p.name for p in folder.glob("*.py")
        }, folder
    config = json.loads((out / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSequenceClassification"] == f"modeling_variant_{fam}.{head}"
    assert config["id2label"] == {"0": "negative", "1": "positive"}

    # The starting checkpoint is gone: the output loads on its own, as remote code, where the package is absent.
    shutil.rmtree(start)
    reload = run_isolated(RELOAD, [out, json.dumps(TEXTS)], cwd=tmp_path)
    assert reload.returncode == 0, reload.stderr[-4000:]
    loaded = json.loads(reload.stdout.strip().splitlines()[-1])
    assert loaded["class"] == head and loaded["module"].startswith("transformers_modules."), loaded

    # ... and computes what the package's own class computes from the same folder.
    model = getattr(hav, head).from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        expected = model(**tokenizer(TEXTS, padding=True, return_tensors="pt")).logits
    torch.testing.assert_close(torch.tensor(loaded["logits"]), expected, atol=1e-5, rtol=1e-5)
    assert loaded["labels"] == [config["id2label"][str(i)] for i in expected.argmax(-1).tolist()]


def test_without_trust_remote_code_the_script_cannot_load_the_checkpoint(tmp_path, data):
    """The script reaches our model only through the checkpoint's code: without --trust_remote_code transformers
    refuses it (had the package leaked into the process, or transformers known the model type, this would load)."""
    start = _checkpoint(HEADS[0], tmp_path / "start")
    proc = _run_script(start, data, tmp_path / "out", cwd=tmp_path)
    assert proc.returncode != 0
    assert f"The repository {start} contains custom code which must be executed to correctly load the model" in (
        proc.stderr
    )
    assert "Please pass the argument `trust_remote_code=True` to allow custom code to be run." in proc.stderr
    assert not (tmp_path / "out").exists()
