"""Attempts at a cell, and resuming a stopped one where it stopped.

A cell's run folder (runs_dir/<cell id>) keeps what a killed attempt leaves: the newest checkpoint (one at every
evaluation, see `checkpointing`) and ATTEMPTS, which says what run it is of (the flags as run, the training and
validation text, provenance.code_state) and what each attempt cost (its wall and CPU seconds, written every
HEARTBEAT_SECONDS while it runs). An attempt at the same run resumes from the newest complete checkpoint
(`--resume_from_checkpoint`: Trainer restores the weights, optimizer, schedule and RNG states and skips the batches
already seen; the masks depend only on each example, the seed and the epoch), so the cell ends as the same run in
one go would; anything else starts afresh in a cleared folder. The row (results_file.cell_row) counts every attempt.

An attempt's process dies with the runner thread that started it (`die_with`), so no cell trains on without a
runner to write its row.
"""

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from cells import Cell
from provenance import ROOT

ATTEMPTS = "attempts.json"  # in a cell's run folder: what the checkpoints there are of, and every attempt's cost
HEARTBEAT_SECONDS = 30.0  # how often a running attempt's cost is written there (all a killed runner leaves)


def checkpointing(cell: Cell) -> dict:
    """The flags the runner adds to every cell (not part of its config or its `train_command`): a checkpoint every
    `eval_steps`, only the newest kept, so a killed cell resumes from its last evaluation. Every cell, not only the
    long ones: a checkpoint of these models (at most 6.4M parameters, with AdamW's two moments) is under 80 MB,
    written in about 0.2 s, every 100 or 200 steps of a cell of 5 to 65 CPU-minutes; one rule leaves no cell that a
    stopped session runs again from step 0. Saving reads the RNG states without drawing from them, so the run is
    the one `train_command` makes (checked by test_experiments)."""
    return {"save_strategy": "steps", "save_steps": cell.config["training"]["eval_steps"], "save_total_limit": 1}


def last_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete checkpoint-N (Trainer writes trainer_state.json last); incomplete newer ones, which a kill
    during a save leaves, are removed."""
    found = sorted(
        (int(d.name.split("-")[1]), d)
        for d in output_dir.glob("checkpoint-*")
        if d.is_dir() and d.name.split("-")[1].isdigit()
    )
    for _, folder in reversed(found):
        with contextlib.suppress(OSError, json.JSONDecodeError):
            json.loads((folder / "trainer_state.json").read_text())
            return folder
        shutil.rmtree(folder)
    return None


def write_json(path: Path, value: dict) -> None:
    """Write whole or not at all (a kill mid-write leaves the previous file)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(value, indent=1) + "\n")
    os.replace(partial, path)


def earlier_attempts(output_dir: Path, identity: dict) -> tuple[dict | None, Path | None]:
    """(record, checkpoint) of earlier attempts at the same run in `output_dir`: (None, None) when there were none,
    or they were of another run (other flags, data, code or thread count: their folder is then cleared by
    `start_attempt`)."""
    path = output_dir / ATTEMPTS
    with contextlib.suppress(OSError, json.JSONDecodeError):
        record = json.loads(path.read_text())
        differs = [key for key, value in identity.items() if record.get(key) != value]
        if not differs:
            return record, last_checkpoint(output_dir)
        print(
            f"  {identity['id']}: {output_dir} holds an attempt at another run (it differs in: "
            f"{', '.join(differs)}); starting afresh",
            file=sys.stderr,
        )
    return None, None


def start_attempt(output_dir: Path, identity: dict, commit: str | None) -> tuple[dict, Path | None]:
    """Begin an attempt at the run `identity` in `output_dir`: (the record of its attempts, this one last, as written
    to ATTEMPTS; the checkpoint it resumes from, None when it starts from step 0 in a cleared folder). The cost of
    an earlier attempt at the same run counts even when it left no checkpoint; `commit` is kept from the first."""
    record, checkpoint = earlier_attempts(output_dir, identity)
    if checkpoint is None:  # nothing to resume: a fresh folder (the cost of an attempt at the same run still counts)
        shutil.rmtree(output_dir, ignore_errors=True)
        output_dir.mkdir(parents=True)
    record = record or {**identity, "git_commit": commit, "attempts": []}
    step = json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] if checkpoint else 0
    record["attempts"].append({"from_step": step, "wall_seconds": 0.0, "cpu_seconds": 0.0})
    write_json(output_dir / ATTEMPTS, record)
    return record, checkpoint


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a running process and its waited-for children (Linux /proc; None elsewhere)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(tick) for tick in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return None


PR_SET_PDEATHSIG = 1  # linux/prctl.h
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with(parent: int):
    """A `preexec_fn` that makes the cell's process get SIGKILL when the runner thread that started it dies (Linux;
    elsewhere None: a killed runner's child trains on). Without it a runner killed alone leaves its cell training
    with no runner to write its row, and a later runner could resume into the folder it still writes. `parent` is
    the runner's pid: a runner that died before the call is caught by the check that follows it."""
    if _PRCTL is None:
        return None

    def preexec() -> None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def run_attempt(
    argv: list[str], env: dict, output_dir: Path, record: dict, timeout_seconds: float
) -> tuple[int, bool]:
    """Run the newest attempt of `record` (`argv` from ROOT, its output appended to output_dir/log.txt), writing its
    cost to ATTEMPTS every HEARTBEAT_SECONDS and when it ends; killed after `timeout_seconds` of wall time. Returns
    (its exit code, whether it was killed for time)."""
    attempt = record["attempts"][-1]
    start, timed_out, ended = time.time(), threading.Event(), threading.Event()
    with open(output_dir / "log.txt", "a") as log:
        log.write(f"=== attempt {len(record['attempts'])}, from step {attempt['from_step']}\n")
        log.flush()
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with(os.getpid())
        )

        def heartbeat() -> None:
            while not ended.wait(HEARTBEAT_SECONDS):
                attempt["wall_seconds"] = round(time.time() - start, 1)
                cpu = process_cpu_seconds(proc.pid)
                attempt["cpu_seconds"] = attempt["cpu_seconds"] if cpu is None else round(cpu, 1)
                write_json(output_dir / ATTEMPTS, record)

        beats = threading.Thread(target=heartbeat, daemon=True)
        beats.start()
        timer = threading.Timer(timeout_seconds, lambda: (timed_out.set(), proc.kill()))
        timer.start()
        try:  # wait4: this cell's own CPU time, even while other cells (--parallel) end
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
            ended.set()
            beats.join()
    # the cell's CPU time: independent of how busy the machine was
    attempt.update(wall_seconds=round(time.time() - start, 1), cpu_seconds=round(usage.ru_utime + usage.ru_stime, 1))
    write_json(output_dir / ATTEMPTS, record)
    return os.waitstatus_to_exitcode(status), timed_out.is_set()


def clear_models(output_dir: Path) -> None:
    """Delete a finished cell's saved model, tokenizer and checkpoints (its logs, metrics and ATTEMPTS stay)."""
    for pattern in ("*.safetensors", "*.bin", "tokenizer*", "vocab.txt", "special_tokens_map.json"):
        for path in output_dir.glob(pattern):
            path.unlink()
    for folder in output_dir.glob("checkpoint-*"):
        shutil.rmtree(folder)
