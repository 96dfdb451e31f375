"""The results file, experiments/results.jsonl: one JSON line per finished cell, and how a row is made.

A row is appended only when a run has finished, as one write under a lock (several runners may share the file); a
cell whose id is in the file is done. The row holds what the run gave (`read_outcome`: the final eval loss and
perplexity, the eval and training curves, the run's time and size), what its attempts cost (attempts.py), and what
it was made from (provenance.py; the commands of cells.py).
"""

import fcntl
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from cells import Cell
from provenance import sha256

RESULTS = Path(__file__).resolve().parent / "results.jsonl"


def load_results(path: str | os.PathLike) -> list[dict]:
    """The rows of a results file (missing file: none). A line that is not JSON (a writer killed mid-line) is
    skipped with a warning, so it never hides the rows after it."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            print(f"warning: {path}:{number} is not a JSON line; skipped", file=sys.stderr)
    return rows


def append_row(path: str | os.PathLike, row: dict) -> None:
    """Append one row as a single write under an exclusive lock (concurrent runners never interleave lines)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(row, sort_keys=False, allow_nan=False) + "\n").encode()
    with open(path, "ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            if handle.tell() > 0:  # a writer killed mid-line left no newline: end its torn line, keep ours whole
                with open(path, "rb") as reader:
                    reader.seek(-1, os.SEEK_END)
                    if reader.read(1) != b"\n":
                        line = b"\n" + line
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def done_ids(path) -> set[str]:
    return {row["id"] for row in load_results(path) if "id" in row}


def finite(value):
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def read_outcome(output_dir: Path, metric: str = "eval_mlm_loss") -> dict:
    """Metrics and curves of a finished run's output folder; `metric` is the key of its held-out loss (the
    script's: cells.EVAL_METRICS)."""
    results = json.loads((output_dir / "all_results.json").read_text())
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    # the script evaluates once more after training, at the last step: one point per step
    by_step = {h["step"]: finite(h[metric]) for h in history if metric in h}
    eval_curve = [[step, loss] for step, loss in sorted(by_step.items())]
    train_curve = [[h["step"], finite(h["loss"])] for h in history if "loss" in h]
    values = [results.get(metric)] + [v for _, v in eval_curve] + [v for _, v in train_curve]
    diverged = any(v is None or not math.isfinite(v) for v in values)
    loss = finite(results.get(metric))
    return {
        "eval_loss": loss,
        "eval_perplexity": finite(math.exp(min(loss, 50.0))) if loss is not None else None,
        "diverged": diverged,
        "eval_curve": eval_curve,
        "train_curve": train_curve,
        "train_loss": finite(results.get("train_loss")),
        "train_seconds_per_step": finite(results.get("train_seconds_per_step")),
        "train_runtime": finite(results.get("train_runtime")),
        "num_parameters": results.get("num_parameters"),
        # Admin runs: the range of the omegas it set (near 1: Admin changed little)
        **(
            {"admin_omegas": [results["admin_omega_min"], results["admin_omega_max"]]}
            if "admin_omega_min" in results
            else {}
        ),
    }


def whole_run_train_loss(curve: list) -> float | None:
    """The mean training loss over the logged steps of a whole run, from its curve ([[step, loss], ...]; each
    logged loss is the mean since the previous log): what Trainer's train_loss is for a run in one go (when the
    last step is logged), which for a resumed run covers the last attempt's steps alone. None when a logged loss is
    not finite."""
    if not curve or any(loss is None for _, loss in curve):
        return None
    steps = [step for step, _ in curve]
    return sum(loss * (step - before) for (step, loss), before in zip(curve, [0, *steps])) / steps[-1]


def cell_row(cell: Cell, output_dir: Path, record: dict, machine: dict, commands: dict, texts: dict) -> dict:
    """The row of a cell whose run finished in `output_dir`: its outcome, the cost of every attempt in `record` (the
    row's wall and CPU seconds are those of all attempts, `resumed_from_step` the step each later one started from,
    `git_commit` the first's), `machine` (provenance.hardware as the run started), its `commands` (command and
    train_command), the hashes of its text (`texts`) and of the tokenizer as the run saved it (byte-identical to the
    one it loaded)."""
    outcome = read_outcome(output_dir, cell.eval_metric)
    resumed = [a["from_step"] for a in record["attempts"][1:]]
    if resumed:  # Trainer's train_loss covers the last attempt's steps alone
        outcome["train_loss"] = whole_run_train_loss(outcome["train_curve"])
    return {
        "id": cell.id,
        "claim": cell.claim,
        "variant": cell.variant,
        "size": cell.size,
        "seed": cell.seed,
        "config": cell.config,
        "steps": json.loads((output_dir / "trainer_state.json").read_text())["global_step"],
        **outcome,
        "wall_seconds": round(sum(a["wall_seconds"] for a in record["attempts"]), 1),
        "cpu_seconds": round(sum(a["cpu_seconds"] for a in record["attempts"]), 1),
        "resumed_from_step": resumed,
        "hardware": {**machine, "load_average_1min_end": round(os.getloadavg()[0], 2)},
        **commands,
        "tokenizer_sha256": sha256(output_dir / "tokenizer.json"),
        **texts,
        "git_commit": record["git_commit"],
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def cpu_seconds_per_step(rows: list[dict], preset: str, overrides: dict) -> tuple[float | None, bool]:
    """(the mean CPU seconds per training step of the finished rows of one model, preset and config overrides
    whatever the training flags, or None when none has run; whether they are rows made before the tokenizer was committed, without a
    tokenizer hash). The newer rows win where there are both: the older ones predicted every position (dense
    masked-LM prediction), which costs more."""
    same = [
        r
        for r in rows
        if r.get("cpu_seconds")
        and r.get("steps")
        and r.get("config", {}).get("preset") == preset
        and r["config"].get("overrides") == overrides
    ]
    newer = [r for r in same if r.get("tokenizer_sha256")]
    chosen = newer or same
    if not chosen:
        return None, False
    return statistics.fmean(r["cpu_seconds"] / r["steps"] for r in chosen), not newer


def estimate_cpu_seconds(cells, rows: list[dict]) -> tuple[float, int]:
    """(what `cells` would cost: each at the CPU time per step of the rows of its own model, else of every row,
    times its steps; how many were costed from rows made before the tokenizer was committed, an overestimate for them)."""
    per_step = [r["cpu_seconds"] / r["steps"] for r in rows if r.get("cpu_seconds") and r.get("steps")]
    fallback = statistics.fmean(per_step) if per_step else 0.0
    total, older = 0.0, 0
    for c in cells:
        config = json.loads(json.dumps(c.config))  # tuples as the rows' JSON lists
        own, old = cpu_seconds_per_step(rows, config["preset"], config["overrides"])
        total += (fallback if own is None else own) * config["training"]["max_steps"]
        older += old or own is None
    return total, older
