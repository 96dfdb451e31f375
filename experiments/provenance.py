"""What a results row was made from: the code, the files and the machine.

- the code: `git_commit`, the commit checked out, ending in "+dirty" when code differs from it (results, run
  folders, docs and Markdown do not count: `NOT_CODE`); `code_state`, a hash of the working tree's code, which tells
  whether a stopped attempt at a cell ran the same code as the next (see attempts.py);
- the files: `sha256` of the tokenizer.json a run trained with and of its training and validation text;
- the machine: `hardware`, the CPU model (rows made on different CPUs round differently), the thread count, the load,
  the torch, transformers and tokenizers versions, and the device.
"""

import contextlib
import hashlib
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Changes to these do not make a row's code "+dirty": they are what runs write or what describes them.
NOT_CODE = ("experiments/results.jsonl", "experiments/runs", "docs", "*.md", "*.png")


def sha256(path: str | os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def git_commit() -> str | None:
    """The commit checked out at ROOT, with "+dirty" when tracked code differs from it (None outside git)."""
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                *(f":(exclude){path}" for path in NOT_CODE),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return commit.stdout.strip() + ("+dirty" if dirty else "")
    return None


def code_state() -> str | None:
    """A hash of the tracked code as it is in the working tree (the index's blobs and the unstaged changes,
    NOT_CODE left out): equal only when the code is, whatever was committed to results or docs in between."""
    spec = ["--", ".", *(f":(exclude){path}" for path in NOT_CODE)]
    digest = hashlib.sha256()
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        for command in (["git", "ls-files", "-s", *spec], ["git", "diff", "--binary", *spec]):
            digest.update(subprocess.run(command, cwd=ROOT, capture_output=True, check=True).stdout)
        return digest.hexdigest()
    return None


def hardware(device: str = "cpu") -> dict:
    """What a row's wall time was measured on (the machine may be shared: the load average says how busy it was)."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    import tokenizers
    import torch
    import transformers

    return {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "os": platform.platform(),
        "device": f"cuda: {torch.cuda.get_device_name(0)}" if device == "cuda" else "cpu",
    }
