"""The example scripts run end to end on tiny settings (their `main(argv)` is callable in-process)."""

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
    pytest.importorskip("matplotlib")
    import single_head_admin

    runs = single_head_admin.main(
        ["--output_dir", str(tmp_path), "--steps", "6", "--eval_every", "3", "--layers", "2", "--heads", "2",
         "--hidden_size", "32", "--batch_size", "8", "--warmup_steps", "2"]
    )
    assert [r["name"] for r in runs] == ["multi-head 2x2", "single-head 4x1", "single-head 4x1 + Admin"]
    assert all(math.isfinite(r["final"]) and r["curve"][-1][1] < r["curve"][0][1] + 1.0 for r in runs)
    assert (tmp_path / "eval_loss.png").stat().st_size > 1000
    assert "| single-head 4x1 + Admin |" in (tmp_path / "results.md").read_text()
