"""benchmarks/gpu_check.py, as far as a machine without a GPU can check it: the plan, the refusal without a GPU, and
the stage runner (a failing stage and one out of time are reported, the whole process group is stopped)."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

import gpu_check


def test_dry_run_lists_every_stage_within_ten_minutes(tmp_path, capsys):
    assert gpu_check.main(["--dry-run", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in ("tests", "bench", "bf16", "zero2", "fsdp"):
        assert f"[{name}, at most" in out
    assert "HAV_TEST_DEVICE=cuda" in out and "--dtype bfloat16 --seq-lens 512 2048" in out
    assert "examples/deepspeed/zero2.json" in out and "--bf16" in out
    assert sum(s["limit"] for s in gpu_check.stages(tmp_path, 1)) <= 590


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: gpu_check would run")
def test_without_a_gpu_it_says_so_and_runs_nothing(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(gpu_check.ROOT / "benchmarks" / "gpu_check.py"), "--output-dir", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "no CUDA device visible" in proc.stdout and "nothing to check" in proc.stdout
    assert not (tmp_path / "out").exists()


def test_stage_runner_reports_failure_and_timeout(tmp_path):
    failing = dict(
        name="tests",
        limit=60,
        env={},
        command=[sys.executable, "-c", "print('1 failed, 2 passed'); import sys; sys.exit(3)"],
    )
    status, _, result = gpu_check.run_stage(failing, tmp_path / "failing.log")
    assert status == "FAILED (3)" and "failed" in result
    # a child that outlives its parent is stopped with the group (torchrun and accelerate start workers)
    hanging = dict(
        name="zero2",
        limit=2,
        env={},
        command=[
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)",
        ],
    )
    start = time.perf_counter()
    status, seconds, result = gpu_check.run_stage(hanging, tmp_path / "hanging.log")
    assert status == "timeout" and seconds < 30 and time.perf_counter() - start < 30
    missing = dict(name="bf16", limit=5, env={}, command=[str(tmp_path / "no-such-launcher")])
    assert gpu_check.run_stage(missing, tmp_path / "missing.log")[0] == "error"


def test_summary_reads_the_pytest_tally():
    text = "....F\n=========== 1 failed, 812 passed, 3 skipped in 201.55s (0:03:21) ===========\n"
    assert gpu_check.finding({"name": "tests"}, text) == "1 failed, 812 passed, 3 skipped"
    quiet = "........\n812 passed, 2 skipped in 190.20s (0:03:10)\n"  # pytest -q
    assert gpu_check.finding({"name": "tests"}, quiet) == "812 passed, 2 skipped"
    table = gpu_check.table([["tests", "ok", "201", "812 passed"], ["zero2", "timeout", "100", "stopped"]])
    assert table.splitlines()[0].startswith("| stage") and "| zero2 | timeout |" in table


def test_research_stage_runs_two_cells_on_the_gpu_through_the_runner(tmp_path, capsys):
    assert gpu_check.main(["--dry-run", "--research", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "[research, at most 300 s]" in out and "[tests," not in out
    assert "experiments/talking_heads.py --only" in out and "--device cuda --parallel 2" in out
    (stage,) = gpu_check.stages(tmp_path, 1, research=True)
    assert stage["limit"] <= 590
    (tmp_path / "research").mkdir()
    (tmp_path / "research" / "results.jsonl").write_text(
        '{"id": "talking_heads/dot-product/h16-lr1e-3/seed0", "eval_loss": 5.5, "wall_seconds": 40.2}\n'
    )
    finding = gpu_check.finding(stage, "")
    assert finding.startswith("dot-product 5.5000 (CPU row ") and finding.endswith(", 40 s)")


SMI = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+"""


def test_torch_command_picks_the_newest_build_the_driver_runs():
    """A plain `pip install torch` brings the newest CUDA build; the check picks the build of the driver's CUDA or
    older (a 12.4 driver cannot run a 13.2 build), the CPU build without a driver, and refuses a driver too old."""
    assert gpu_check.driver_cuda(SMI) == (12, 4)
    assert gpu_check.driver_cuda("NVIDIA-SMI has failed") is None
    assert gpu_check.torch_command((12, 4)).endswith("/whl/cu124")
    assert gpu_check.torch_command((12, 5)).endswith("/whl/cu124")  # no 12.5 build: the older one
    assert gpu_check.torch_command((13, 2)).endswith("/whl/cu132")
    assert gpu_check.torch_command(None).startswith("pip install torch==")
    with pytest.raises(SystemExit, match="update the driver"):
        gpu_check.torch_command((10, 2))


def test_kernel_mode_runs_the_triton_kernel_tests_and_benchmark(tmp_path, capsys):
    """--kernel: the kernel's tests compiled on CUDA, then bench_kernel.py; the default tests stage leaves the kernel's
    test file to it (its compilations would fill the stage)."""
    assert gpu_check.main(["--dry-run", "--kernel", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "[kernel-tests, at most" in out and "[kernel, at most" in out and "[tests," not in out
    assert "HAV_TEST_DEVICE=cuda" in out and "tests/kernels/test_talking_heads_triton.py" in out
    assert "benchmarks/bench_kernel.py --device cuda" in out
    assert sum(s["limit"] for s in gpu_check.stages(tmp_path, 1, kernel=True)) <= 590
    (tests_stage,) = [s for s in gpu_check.stages(tmp_path, 1) if s["name"] == "tests"]
    assert "tests/kernels/test_talking_heads_triton.py" in tests_stage["command"]  # after --ignore
    log = (
        '{"dtype": "bfloat16", "n": 512, "method": "triton", "ms": 12.5, "peak_mb": 40.0}\n'
        '{"dtype": "bfloat16", "n": 512, "method": "sdpa", "ms": 3.1, "peak_mb": 20.0}\n'
        '{"dtype": "bfloat16", "n": 512, "method": "max |triton - eager fp32|", "out": 0.002, "dq": 0.01}\n'
    )
    assert gpu_check.finding({"name": "kernel"}, log) == "1 kernel timings; bfloat16 max diff 1.0e-02"
    assert gpu_check.finding({"name": "kernel-tests"}, "29 passed in 80.1s\n") == "29 passed"


def test_bench_kernel_smoke_test_through_the_interpreter(tmp_path):
    """benchmarks/bench_kernel.py --interpret: the whole script at a tiny shape on the CPU."""
    pytest.importorskip("triton")
    proc = subprocess.run(
        [
            sys.executable,
            str(gpu_check.ROOT / "benchmarks" / "bench_kernel.py"),
            "--interpret",
            "--json",
            str(tmp_path / "rows.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert {r["method"] for r in rows} == {"triton", "eager", "max |triton - eager fp32|"}
    check = rows[-1]
    assert max(v for k, v in check.items() if k not in ("dtype", "n", "method")) < 1e-4
