"""The example scripts run end to end on tiny settings (their `main(argv)` is callable in-process)."""

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))


def test_quickstart(tmp_path):
    import quickstart

    assert quickstart.main(["--output-dir", str(tmp_path)]) == 0
    assert (tmp_path / "talking-heads-bert" / "attention_variants.py").exists()


def test_single_head_admin_reproduction(tmp_path):
    """The four runs go through run_pretraining with the shapes they name: the twin has L*h layers of one head,
    Admin's omegas are what each --admin_init sets (profiled: 1 then growing; closed form: one value above 1)."""
    pytest.importorskip("matplotlib")
    import single_head_admin

    runs = single_head_admin.main(
        ["--output_dir", str(tmp_path), "--max_steps", "4", "--eval_steps", "2", "--layers", "2", "--heads", "2",
         "--hidden_size", "32", "--per_device_train_batch_size", "8", "--max_seq_length", "32",
         "--max_train_samples", "64", "--max_eval_samples", "16", "--disable_tqdm", "true"]
    )
    names = ["multi-head 2x2", "single-head 4x1", "single-head 4x1 + Admin (profile)",
             "single-head 4x1 + Admin (closed form)"]
    assert [r["name"] for r in runs] == names
    assert all(math.isfinite(r["eval_mlm_loss"]) and [s for s, _ in r["curve"]] == [2, 4] for r in runs)
    folders = ["multi-head", "single-head", "single-head-admin-profile", "single-head-admin-closed-form"]
    configs = [json.loads((tmp_path / folder / "config.json").read_text()) for folder in folders]
    assert [(c["num_hidden_layers"], c["num_attention_heads"], c["admin"]) for c in configs] == [
        (2, 2, False), (4, 1, False), (4, 1, True), (4, 1, True)]
    results = [json.loads((tmp_path / folder / "all_results.json").read_text()) for folder in folders]
    assert "admin_omega_min" not in results[0] and "admin_omega_min" not in results[1]
    assert results[2]["admin_omega_min"] == 1.0 < results[2]["admin_omega_max"]
    assert results[3]["admin_omega_min"] == results[3]["admin_omega_max"] > 1.0
    assert (tmp_path / "eval_loss.png").stat().st_size > 1000
    assert "| single-head 4x1 + Admin (closed form) | `bert-mini-single-head-admin` |" in (
        tmp_path / "results.md").read_text()
