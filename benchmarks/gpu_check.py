"""One command for a machine with a GPU: the test suite on CUDA, the attention benchmark in bf16, a few bf16
pretraining steps and a DeepSpeed ZeRO-2 run, then one summary table. At most 580 s of stages (under 10 minutes).

    python3 -m venv .venv && . .venv/bin/activate
    $(python benchmarks/gpu_check.py --torch-command)   # the CUDA build of torch this machine's driver runs
    pip install -e ".[test,deepspeed]"
    python benchmarks/gpu_check.py                # everything (logs in outputs/gpu_check/)
    python benchmarks/gpu_check.py --dry-run      # the stages and their commands, without running them
    python benchmarks/gpu_check.py --only bench   # some stages: tests, bench, bf16, zero2, fsdp
    python benchmarks/gpu_check.py --research     # only the research stage: two KJV cells on the GPU
    python benchmarks/gpu_check.py --kernel       # only the Triton kernel's stages: its tests, then its benchmark

It installs nothing (the README's set-up with a CUDA build of torch is enough; flash-attn is used where installed).
A plain `pip install torch` brings the newest CUDA build, which an older driver cannot run (torch then sees no GPU):
`--torch-command` prints the pip command of the newest build the driver supports (from `nvidia-smi`), and without a
visible GPU the check says when that is the reason.
Every stage runs in its own process group with a time limit; a stage that fails or runs out of time is reported
and the next one still runs. The exit status is 0 when every stage passed, 1 otherwise, 2 when there is no GPU.

Stages:
- tests: `pytest tests` with HAV_TEST_DEVICE=cuda (the device-marked modules: parity, variants, generation, T5,
  bf16/fp16 precision; the example scripts train on the GPU through Trainer). tests/training/test_scaleout.py is left out:
  it runs CPU processes by design and gives the same result here as anywhere; tests/kernels/test_talking_heads_triton.py
  runs in the kernel-tests stage (its compilations alone would fill this stage).
- bench: benchmarks/bench_attention.py --device cuda --dtype bfloat16, BERT-base shapes (width 768, 12 heads,
  batch 8), n = 512 and 2048, fwd and fwd+bwd, every variant against transformers' SDPA (and flash-attn).
- bf16: examples/run_pretraining.py --bf16, 40 steps of the main job's preset.
- research (only with --research): experiments/talking_heads.py --device cuda --parallel 2, the two 400-step cells
  dot product and talking heads at h = 16, seed 0, at once on the GPU, into their own results file; the summary
  gives each eval loss beside the CPU row of experiments/results.jsonl.
- kernel-tests (only with --kernel): tests/kernels/test_talking_heads_triton.py on CUDA, the Triton talking-heads kernel
  compiled (not interpreted) against the einsum reference, every case of the table, float32 within 1e-5, bfloat16.
- kernel (only with --kernel): benchmarks/bench_kernel.py, the kernel against the eager core and SDPA (flash) at
  BERT-base shapes (batch 8, 12 heads of 64), n = 512, 2048, 4096, bf16 and fp32: forward+backward time, peak
  memory, largest difference from the eager core in float32.
- zero2: the same through torchrun and examples/deepspeed/zero2.json (one process per GPU, at most 2).
- fsdp: accelerate launch --config_file examples/accelerate/fsdp.yaml (one process per GPU, at most 2): Trainer
  with accelerate's own FSDP2 preparation, tested on CPU processes by tests/training/test_scaleout.py but not yet on a GPU;
  the stage records what this machine does.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
BIN = Path(PY).parent
TINY_RUN = [
    "--max_steps",
    "40",
    "--per_device_train_batch_size",
    "16",
    "--max_seq_length",
    "128",
    "--eval_strategy",
    "no",
    "--save_strategy",
    "no",
    "--logging_steps",
    "10",
    "--disable_tqdm",
    "true",
    "--report_to",
    "none",
    "--max_eval_samples",
    "64",
]


RESEARCH_CELLS = ("talking_heads/dot-product/h16-lr1e-3/seed0", "talking_heads/talking-heads/h16-lr1e-3/seed0")


def stages(out: Path, gpus: int, research: bool = False, kernel: bool = False) -> list[dict]:
    """name, command, environment additions, time limit (seconds) and how to read the result, per stage."""
    procs = str(max(1, min(gpus, 2)))
    if kernel:
        return [
            dict(
                name="kernel-tests",
                limit=250,
                env={"HAV_TEST_DEVICE": "cuda"},
                command=[
                    PY,
                    "-m",
                    "pytest",
                    "tests/kernels/test_talking_heads_triton.py",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                ],
            ),
            dict(
                name="kernel",
                limit=330,
                env={},
                command=[
                    PY,
                    "benchmarks/bench_kernel.py",
                    "--device",
                    "cuda",
                    "--markdown",
                    "--json",
                    str(out / "kernel.jsonl"),
                ],
            ),
        ]
    if research:
        return [
            dict(
                name="research",
                limit=300,
                env={},
                results=out / "research",
                command=[
                    PY,
                    "experiments/talking_heads.py",
                    "--only",
                    *RESEARCH_CELLS,
                    "--device",
                    "cuda",
                    "--parallel",
                    "2",
                    "--results",
                    str(out / "research" / "results.jsonl"),
                    "--runs_dir",
                    str(out / "research" / "runs"),
                ],
            )
        ]
    return [
        dict(
            name="tests",
            limit=250,
            env={"HAV_TEST_DEVICE": "cuda"},
            command=[
                PY,
                "-m",
                "pytest",
                "tests",
                "-q",
                "-p",
                "no:cacheprovider",
                "--ignore",
                "tests/training/test_scaleout.py",
                "--ignore",
                "tests/kernels/test_talking_heads_triton.py",
            ],
        ),
        dict(
            name="bench",
            limit=130,
            env={},
            command=[
                PY,
                "benchmarks/bench_attention.py",
                "--device",
                "cuda",
                "--dtype",
                "bfloat16",
                "--seq-lens",
                "512",
                "2048",
                "--markdown",
            ],
        ),
        dict(
            name="bf16",
            limit=50,
            env={},
            results=out / "bf16",
            command=[PY, "examples/run_pretraining.py", "--bf16", *TINY_RUN, "--output_dir", str(out / "bf16")],
        ),
        dict(
            name="zero2",
            limit=100,
            env={},
            results=out / "zero2",
            command=[
                str(BIN / "torchrun"),
                "--nproc_per_node",
                procs,
                "--master_port",
                "29517",
                "examples/run_pretraining.py",
                "--bf16",
                "--deepspeed",
                "examples/deepspeed/zero2.json",
                *TINY_RUN,
                "--output_dir",
                str(out / "zero2"),
            ],
        ),
        dict(
            name="fsdp",
            limit=50,
            env={},
            results=out / "fsdp",
            command=[
                str(BIN / "accelerate"),
                "launch",
                "--config_file",
                "examples/accelerate/fsdp.yaml",
                "--num_processes",
                procs,
                "--main_process_port",
                "29518",
                "examples/run_pretraining.py",
                "--bf16",
                *TINY_RUN,
                "--output_dir",
                str(out / "fsdp"),
            ],
        ),
    ]


def run_stage(stage: dict, log: Path) -> tuple[str, float, str]:
    """(status, seconds, what it found). Never raises: a stage's failure is its row in the summary."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **stage["env"]}
    start = time.perf_counter()
    try:
        with open(log, "w") as handle:
            proc = subprocess.Popen(
                stage["command"], cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                code = proc.wait(timeout=stage["limit"])
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the whole group: torchrun's and accelerate's workers too
                proc.wait()
                return "timeout", time.perf_counter() - start, f"stopped after {stage['limit']} s"
    except Exception as err:  # a missing launcher, an unwritable log, ...
        return "error", time.perf_counter() - start, f"{type(err).__name__}: {err}"
    seconds = time.perf_counter() - start
    text = log.read_text(errors="replace")
    return ("ok" if code == 0 else f"FAILED ({code})"), seconds, finding(stage, text)


def finding(stage: dict, text: str) -> str:
    """The figure worth a glance in the summary: the pytest tally, the benchmark's slowest ratio, steps and loss."""
    try:
        if stage["name"] in ("tests", "kernel-tests"):
            tallies = re.findall(
                r"^=* ?(\d+ (?:passed|failed|errors?|skipped)[^\n]*?) in [\d.]+s", text, flags=re.MULTILINE
            )
            return tallies[-1] if tallies else last_line(text)
        if stage["name"] == "kernel":
            rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
            timed = [r for r in rows if r.get("method") == "triton" and isinstance(r.get("ms"), (int, float))]
            worst = [r for r in rows if "out" in r]
            if not timed:
                return last_line(text)
            return f"{len(timed)} kernel timings; " + "; ".join(
                f"{r['dtype']} max diff {max(v for k, v in r.items() if k not in ('dtype', 'n', 'method')):.1e}"
                for r in worst
            )
        if stage["name"] == "bench":
            ratios = re.findall(r"^\| (\w+) .*$", text, flags=re.MULTILINE)
            rows = [r for r in ratios if r != "variant"]
            return f"{len(rows)} rows (tables in the log)" if rows else last_line(text)
        results = stage.get("results")
        if stage["name"] == "research":
            return research_finding(results / "results.jsonl") or last_line(text)
        if results and (results / "all_results.json").is_file():
            data = json.loads((results / "all_results.json").read_text())
            return (
                f"{data.get('train_seconds_per_step', float('nan')):.3f} s/step, train loss "
                f"{data.get('train_loss', float('nan')):.3f}, eval loss {data.get('eval_loss', float('nan')):.3f}"
            )
    except Exception as err:
        return f"(could not read the result: {err})"
    return last_line(text)


def research_finding(path: Path) -> str:
    """Each cell's eval loss on the GPU beside its CPU row's (experiments/results.jsonl)."""
    if not path.is_file():
        return ""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    cpu = {}
    recorded = ROOT / "experiments" / "results.jsonl"
    for line in recorded.read_text().splitlines() if recorded.is_file() else []:
        if line.strip():
            row = json.loads(line)
            cpu[row.get("id")] = row.get("eval_loss")
    return "; ".join(
        f"{r['id'].split('/')[1]} {r['eval_loss']:.4f} (CPU row {cpu.get(r['id'])}, {r['wall_seconds']:.0f} s)"
        for r in rows
    )


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error:" in line]
    return (errors or lines or ["(no output)"])[-1][:110]


# torch's CUDA builds, as its wheel index names them (cu118, ..., cu132): a driver runs a build of its CUDA version or
# older. Newer builds appear with new torch releases: add them here.
CUDA_BUILDS = ((11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9), (13, 0), (13, 2))
TORCH_INDEX = "https://download.pytorch.org/whl"


def driver_cuda(smi_output: str | None = None) -> tuple[int, int] | None:
    """The newest CUDA version the NVIDIA driver supports ("CUDA Version: 12.4" in `nvidia-smi`'s output), None
    where there is no driver (or no nvidia-smi)."""
    if smi_output is None:
        if shutil.which("nvidia-smi") is None:
            return None
        try:
            smi_output = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return None
    found = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", smi_output)
    return (int(found[1]), int(found[2])) if found else None


def torch_command(driver: tuple[int, int] | None) -> str:
    """The pip command of the newest CUDA build of torch that `driver` (its CUDA version) runs."""
    if driver is None:
        return "pip install torch==2.13.0"  # no NVIDIA driver: the CPU build the project is tested with
    build = max((b for b in CUDA_BUILDS if b <= driver), default=None)
    if build is None:
        raise SystemExit(
            f"The NVIDIA driver supports CUDA {driver[0]}.{driver[1]}, older than every CUDA build of "
            f"torch ({CUDA_BUILDS[0][0]}.{CUDA_BUILDS[0][1]} is the oldest): update the driver."
        )
    return f"pip install torch --index-url {TORCH_INDEX}/cu{build[0]}{build[1]}"


def gpu_description() -> tuple[int, str]:
    """(number of CUDA devices, a line about them and the software), without failing."""
    try:
        import torch
    except Exception as err:
        return 0, f"torch does not import: {err}"
    versions = f"torch {torch.__version__} (CUDA build {torch.version.cuda})"
    for name in ("transformers", "accelerate", "deepspeed", "flash_attn"):
        try:
            module = __import__(name)
            versions += f", {name} {getattr(module, '__version__', '?')}"
        except Exception:
            versions += f", no {name}"
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        count = 0
    if count:
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(count))
        return count, f"{count} GPU(s): {names}; {versions}"
    driver = driver_cuda()
    built = tuple(int(p) for p in (torch.version.cuda or "0.0").split(".")[:2])
    if driver is not None and built > driver:  # the usual cause: a plain `pip install torch` on an older driver
        return 0, (
            f"no CUDA device visible: torch is built for CUDA {torch.version.cuda}, the driver supports "
            f"{driver[0]}.{driver[1]}; install a build it runs: {torch_command(driver)}; {versions}"
        )
    return 0, f"no CUDA device visible; {versions}"


def table(rows: list[list[str]]) -> str:
    header = ["stage", "status", "seconds", "result"]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(4)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the stages and their commands, run nothing")
    parser.add_argument("--only", default="", help="comma-separated stages to run (default: all)")
    parser.add_argument("--output-dir", default=str(ROOT / "outputs" / "gpu_check"))
    parser.add_argument(
        "--research",
        action="store_true",
        help="run only the research stage: two KJV cells on the GPU through the runner",
    )
    parser.add_argument(
        "--kernel",
        action="store_true",
        help="run only the Triton kernel's stages: its tests on CUDA, then bench_kernel.py",
    )
    parser.add_argument(
        "--torch-command",
        action="store_true",
        help="print the pip command of the torch build this machine's driver runs, and exit",
    )
    args = parser.parse_args(argv)
    if args.torch_command:  # stdout is the command alone, for $(...)
        driver = driver_cuda()
        print(
            f"gpu_check: {'no NVIDIA driver' if driver is None else f'driver CUDA {driver[0]}.{driver[1]}'}",
            file=sys.stderr,
        )
        print(torch_command(driver))
        return 0
    out = Path(args.output_dir).resolve()
    gpus, description = gpu_description()
    print(f"gpu_check: {description}", flush=True)
    if args.research and args.kernel:
        parser.error("--research and --kernel are two separate runs: choose one")
    plan = stages(out, gpus, args.research, args.kernel)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or [s["name"] for s in plan]
    unknown = sorted(set(chosen) - {s["name"] for s in plan})
    if unknown:
        parser.error(
            f"--only: unknown stage(s) {', '.join(unknown)}; choose from {', '.join(s['name'] for s in plan)}"
        )
    plan = [s for s in plan if s["name"] in chosen]
    if args.dry_run:
        for s in plan:
            env = " ".join(f"{k}={v}" for k, v in s["env"].items())
            print(f"[{s['name']}, at most {s['limit']} s] {env + ' ' if env else ''}{' '.join(s['command'])}")
        print(f"total at most {sum(s['limit'] for s in plan)} s; logs in {out}")
        return 0
    if not gpus:
        print("gpu_check: no GPU, so nothing to check here (use --dry-run to see the stages).")
        return 2
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for s in plan:
        if s.get("results"):
            shutil.rmtree(s["results"], ignore_errors=True)
        log = out / f"{s['name']}.log"
        print(f"\n== {s['name']} (at most {s['limit']} s): {' '.join(s['command'])}", flush=True)
        status, seconds, result = run_stage(s, log)
        print(f"== {s['name']}: {status} in {seconds:.0f} s: {result} (log: {log})", flush=True)
        if s["name"] in ("bench", "kernel") and log.is_file():
            print(log.read_text(errors="replace"), flush=True)
        rows.append([s["name"], status, f"{seconds:.0f}", result])
    print(f"\ngpu_check summary ({description})\n")
    print(table(rows))
    return 0 if all(r[1] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
