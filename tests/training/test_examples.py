"""The example scripts run end to end on tiny settings (their `main(argv)` is callable in-process); examples/ holds
scripts only, each importing at most one sibling; no script, benchmark or experiment edits sys.path."""

import ast
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# An edit of sys.path: a call of one of its list methods, or an assignment to it or to a slice of it
SYS_PATH_EDIT = re.compile(
    r"\bsys\.path\s*(?:\.\s*(?:insert|append|extend|remove|pop|clear)\s*\(|\[[^\]]*\]\s*=(?!=)|\+=|=(?!=))"
)


def test_quickstart_runs_quietly_as_the_readme_runs_it(tmp_path):
    """`python examples/quickstart.py` as a user runs it: it works, and it prints no warning the user cannot act on:
    not DeepSpeed's "Setting accelerator to CPU" (installed with the test extras, used by nothing here), not
    transformers' warning about loading a `bert` checkpoint into `variant_bert` nor its report of the variant's
    parameters as missing; the warm start says what it converted in one line of ours."""
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    script = ROOT / "examples" / "quickstart.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "talking-heads-bert" / "attention_variants.py").exists()
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "it/s]" not in line]
    for noise in ("Setting accelerator", "model of type", "LOAD REPORT", "MISSING", "WARNING", "Warning"):
        assert not [line for line in said if noise in line], (noise, said)
    assert [line for line in said if line.startswith("Warm start: ")] == [
        f"Warm start: {tmp_path / 'vanilla-bert'} is a bert checkpoint, loaded as VariantBertForMaskedLM "
        "(attention_type='talking_heads'); it adds post_softmax_proj, pre_softmax_proj, starting with "
        "talking_heads_init='identity'."
    ]


def test_single_head_admin_reproduction(tmp_path):
    """The four runs go through run_pretraining with the shapes they name: the twin has L*h layers of one head,
    Admin's omegas are what each --admin_init sets (profiled: 1 then growing; closed form: one value above 1)."""
    pytest.importorskip("matplotlib")
    import single_head_admin

    runs = single_head_admin.main(
        [
            "--output_dir",
            str(tmp_path),
            "--max_steps",
            "4",
            "--eval_steps",
            "2",
            "--layers",
            "2",
            "--heads",
            "2",
            "--hidden_size",
            "32",
            "--per_device_train_batch_size",
            "8",
            "--max_seq_length",
            "32",
            "--max_train_samples",
            "64",
            "--max_eval_samples",
            "16",
            "--disable_tqdm",
            "true",
        ]
    )
    names = [
        "multi-head 2x2",
        "single-head 4x1",
        "single-head 4x1 + Admin (profile)",
        "single-head 4x1 + Admin (closed form)",
    ]
    assert [r["name"] for r in runs] == names
    assert all(math.isfinite(r["eval_mlm_loss"]) and [s for s, _ in r["curve"]] == [2, 4] for r in runs)
    folders = ["multi-head", "single-head", "single-head-admin-profile", "single-head-admin-closed-form"]
    configs = [json.loads((tmp_path / folder / "config.json").read_text()) for folder in folders]
    assert [(c["num_hidden_layers"], c["num_attention_heads"], c["admin"]) for c in configs] == [
        (2, 2, False),
        (4, 1, False),
        (4, 1, True),
        (4, 1, True),
    ]
    results = [json.loads((tmp_path / folder / "all_results.json").read_text()) for folder in folders]
    assert "admin_omega_min" not in results[0] and "admin_omega_min" not in results[1]
    assert results[2]["admin_omega_min"] == 1.0 < results[2]["admin_omega_max"]
    assert results[3]["admin_omega_min"] == results[3]["admin_omega_max"] > 1.0
    assert (tmp_path / "eval_loss.png").stat().st_size > 1000
    assert (
        "| single-head 4x1 + Admin (closed form) | `bert-mini-single-head-admin` |"
        in (tmp_path / "results.md").read_text()
    )


def test_no_script_benchmark_or_experiment_edits_sys_path():
    """`python examples/run_x.py` and `python experiments/x.py` put the file's own folder on sys.path, and the
    benchmarks import the installed package: no file there edits sys.path, in its own code or in code it hands to
    another interpreter (`python -c`)."""
    for edit in (
        "sys.path.insert(0, here)",
        "sys.path.append(x)",
        "sys.path[:0] = [x]",
        "sys.path += [x]",
        "sys.path = [x]",
    ):
        assert SYS_PATH_EDIT.search(edit), edit
    for mention in ("# `python -c` puts it first on sys.path", "if here in sys.path:", "sys.path == before"):
        assert not SYS_PATH_EDIT.search(mention), mention
    edits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in ("examples", "benchmarks", "experiments")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if SYS_PATH_EDIT.search(line)
    ]
    assert edits == []


def test_examples_holds_scripts_each_importing_at_most_one_sibling():
    """What scripts share lives in the package (hf_attn_variants.training.data_loading, .model_setup, ...) and, for
    what is script runtime (stages, the record and card of a run, one-line errors), in the one helper module beside
    them, script_utils.py, as transformers keeps utils_qa.py beside run_qa.py: every other file of examples/ is a
    script (it runs as `__main__`) and imports at most one other script (as run_t5_pretraining.py imports
    run_pretraining.py's corpus)."""
    helper = ROOT / "examples" / "script_utils.py"
    assert "__main__" not in helper.read_text()
    scripts = {path.stem: path for path in (ROOT / "examples").glob("*.py") if path != helper}
    assert {"run_pretraining", "run_t5_pretraining", "run_classification", "run_qa", "run_text_to_text"} <= set(
        scripts
    )
    for name, path in scripts.items():
        tree = ast.parse(path.read_text())
        assert any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body), name
        imported = {
            alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        }
        imported |= {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        }
        assert len(imported & set(scripts) - {name}) <= 1, (name, sorted(imported & set(scripts)))
