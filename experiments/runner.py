"""The research runner: runs a claim script's cells, one or several at a time, on the CPU or a GPU.

The claim scripts (talking_heads.py, single_head.py, synthesizer.py, width_trend.py, t5_places.py) define their
cells and tables (cells.py) and call `main`:

    nice -n 19 python experiments/talking_heads.py --only 'talking_heads/lr-init/*/seed0'   # a subset, by glob
    python experiments/talking_heads.py --list                                               # every cell, done or not

Each cell not yet in the results file (results_file.py) is run as a subprocess of its script (`Cell.script`:
examples/run_pretraining.py, or cells.T5_SCRIPT; pretrain_research.py where the cell sets a research optimizer flag,
`cells.launched_script`), resuming an earlier attempt at the same run (attempts.py), and its
row records what it was made from (provenance.py). A failed or killed run leaves no row. Several runners may work
on the same list at once (one per core): a cell being run holds a lock (`fcntl.flock`, released when its runner
dies), and the others pass over it; `--parallel N` runs N cells at once from one runner (on one GPU with `--device
cuda`, or on N cores). A runner starts no new cell once <runs_dir>/STOP exists, or after --stop_after_minutes; a
running cell finishes. KJV cells use the tokenizer committed beside the corpus for their script (`kjv_tokenizer`,
`--tokenizer_name`).
"""

import contextlib
import fcntl
import os
import shlex
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from attempts import checkpointing, clear_models, run_attempt, start_attempt
from cells import SCRIPT, T5_SCRIPT, Cell, launched_script, rerun_command, select, train_command
from provenance import ROOT, code_state, git_commit, hardware, sha256
from results_file import RESULTS, append_row, cell_row, done_ids

RUNS = ROOT / "experiments" / "runs"
# The data of every cell, as a shell expression (so a recorded command runs on any machine from the repo root) and
# as the function that resolves it here.
KJV_FLAGS = {
    "train_file": '"$(python experiments/kjv.py --split train)"',
    "validation_file": '"$(python experiments/kjv.py --split validation)"',
}
DEVICES = ("cpu", "cuda")


@dataclass
class RunnerArguments:
    only: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Run only the cells whose id matches one of these globs (ids are claim/variant/size/seedN, e.g. "
            "'talking_heads/*/h16-lr1e-3/seed0'). Default: every cell of the claim."
        },
    )
    list: bool = field(
        default=False, metadata={"help": "List the selected cells, each marked done or pending; run nothing."}
    )
    results: str = field(default=str(RESULTS), metadata={"help": "The JSON-lines results file."})
    runs_dir: str = field(
        default=str(RUNS),
        metadata={
            "help": "Where each cell's output folder goes (runs_dir/<cell id>): logs, metrics, attempts.json and, "
            "while the cell is unfinished, its newest checkpoint (a killed cell resumes from it); a finished "
            "cell's model and checkpoints are deleted unless --keep_models."
        },
    )
    keep_models: bool = field(
        default=False, metadata={"help": "Keep each finished cell's saved model, tokenizer and last checkpoint."}
    )
    max_cells: int | None = field(default=None, metadata={"help": "Run at most this many cells, then stop."})
    stop_after_minutes: float | None = field(
        default=None,
        metadata={
            "help": "Start no new cell after this many minutes (a running cell finishes). Creating the file "
            "<runs_dir>/STOP also stops every runner before its next cell. A runner killed instead loses at "
            "most its cells' work since their last checkpoint (eval_steps)."
        },
    )
    cell_timeout_minutes: float = field(
        default=240.0,
        metadata={
            "help": "Kill an attempt at a cell that runs longer than this, wall clock (it leaves no row; the next "
            "attempt resumes from its checkpoint): a guard against a hung run. On a shared machine a 10-minute "
            "cell can take 40 minutes; keep it generous."
        },
    )
    train_file: str | None = field(
        default=None,
        metadata={
            "help": "Train on this file instead of the KJV training chapters (tests, other corpora); recorded as given."
        },
    )
    validation_file: str | None = field(
        default=None,
        metadata={"help": "Evaluate on this file instead of the KJV held-out chapters; recorded as given."},
    )
    python: str = field(default=sys.executable, metadata={"help": "The interpreter that runs each cell."})
    device: str = field(
        default="cpu",
        metadata={
            "help": "cpu (each cell on the CPU, --use_cpu, even where a GPU is visible) or cuda (on the first GPU; "
            "refused where torch sees none). Recorded in each row's hardware."
        },
    )
    parallel: int = field(
        default=1,
        metadata={
            "help": "Run this many cells at once (threads, each driving one cell's process): on one GPU several small "
            "cells share it; on CPU give each its core (OMP_NUM_THREADS=1, the default). A cell alone on the machine may "
            "take more (OMP_NUM_THREADS=2): the row's train_command and hardware record the count, and a run resumes "
            "only at the count it started with."
        },
    )


def check_runner_args(args: RunnerArguments) -> None:
    if args.device not in DEVICES:
        raise ValueError(f"--device must be one of {', '.join(DEVICES)}, got {args.device!r}.")
    if args.parallel < 1:
        raise ValueError(f"--parallel must be at least 1, got {args.parallel}.")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError(
                "--device cuda: torch sees no CUDA device here (torch.cuda.is_available() is False); "
                "run on a machine with a GPU, or use --device cpu."
            )


def device_flags(args: RunnerArguments) -> list[str]:
    """run_pretraining's flags for the device: --use_cpu on CPU (so a GPU machine does not take the cell); on CUDA
    none (Trainer takes the GPU it sees)."""
    return ["--use_cpu", "true"] if args.device == "cpu" else []


def kjv_tokenizer(script: str) -> Path:
    """The tokenizer committed beside the corpus for a script's KJV cells: the WordPiece (kjv.TOKENIZER) for masked
    LM, the Unigram with T5's sentinels (t5_unigram.T5_TOKENIZER) for span corruption."""
    if script == T5_SCRIPT:
        from t5_unigram import T5_TOKENIZER

        return T5_TOKENIZER
    from kjv import TOKENIZER

    return TOKENIZER


def data_flags(args: RunnerArguments, script: str = SCRIPT) -> tuple[dict[str, str], dict[str, str]]:
    """(flags as recorded, flags as run): the KJV split files and `script`'s committed tokenizer unless
    --train_file/--validation_file are given."""
    if (args.train_file is None) != (args.validation_file is None):
        raise ValueError("Give both --train_file and --validation_file (or neither, for the KJV splits).")
    if args.train_file is not None:
        given = {"train_file": args.train_file, "validation_file": args.validation_file}
        for name, path in given.items():
            if not Path(path).is_file():
                raise FileNotFoundError(f"--{name} {path}: no such file.")
        return {k: shlex.quote(v) for k, v in given.items()}, given
    from kjv import kjv_files

    paths, tokenizer = kjv_files(), kjv_tokenizer(script)
    return (
        {**KJV_FLAGS, "tokenizer_name": os.path.relpath(tokenizer, ROOT)},
        {
            "train_file": str(paths["train"]),
            "validation_file": str(paths["validation"]),
            "tokenizer_name": str(tokenizer),
        },
    )


@contextlib.contextmanager
def cell_lock(lock_path: Path):
    """Yields True when this process holds the cell's lock, False when another runner does."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_cell(cell: Cell, args: RunnerArguments, claim_script: str, data: tuple[dict, dict]) -> dict | None:
    """Run one cell (resuming an earlier attempt at the same run: attempts.py) and append its row; None (and no row)
    when the run failed or was killed."""
    recorded, actual = data
    output_dir = Path(args.runs_dir) / cell.id
    inside = output_dir.resolve().is_relative_to(ROOT)
    relative = os.path.relpath(output_dir.resolve(), ROOT) if inside else str(output_dir)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "TOKENIZERS_PARALLELISM": "false",
    }
    flags = [*cell.flags(actual, str(output_dir), **checkpointing(cell)), *device_flags(args)]
    texts = {f"{split}_text_sha256": sha256(actual[f"{split}_file"]) for split in ("train", "validation")}
    identity = {"id": cell.id, "flags": flags, **texts, "code": code_state(), "threads": env["OMP_NUM_THREADS"]}
    machine = hardware(args.device)  # as the run starts, as is the commit start_attempt records: the code it runs
    record, checkpoint = start_attempt(output_dir, identity, git_commit())
    if checkpoint is not None:
        print(f"  {cell.id}: resuming from {checkpoint.name}", flush=True)
        flags = [*flags, "--resume_from_checkpoint", str(checkpoint)]  # a new list: the record keeps the run's
    returncode, timed_out = run_attempt(
        [args.python, str(ROOT / launched_script(cell)), *flags],
        env,
        output_dir,
        record,
        args.cell_timeout_minutes * 60,
    )
    if timed_out:
        print(f"  {cell.id}: killed after {args.cell_timeout_minutes} min; no row", file=sys.stderr)
        return None
    if returncode != 0:
        tail = (output_dir / "log.txt").read_text()[-2000:]
        print(f"  {cell.id}: failed (exit {returncode}); no row. Log tail:\n{tail}", file=sys.stderr)
        return None
    commands = {
        "command": rerun_command(claim_script, cell),
        "train_command": train_command(cell, recorded, relative, device_flags(args), env["OMP_NUM_THREADS"]),
    }
    row = cell_row(cell, output_dir, record, machine, commands, texts)
    if not args.keep_models:
        clear_models(output_dir)
    append_row(args.results, row)
    return row


class CellQueue:
    """The selected cells, handed to the runner's workers (threads) one at a time, in order: a cell already in the
    results file is passed over (re-read at each hand-out: another runner may have finished it), and none is handed
    out once a stop condition holds (--max_cells, the STOP file, --stop_after_minutes) or a worker has failed."""

    def __init__(self, cells: list[Cell], args: RunnerArguments):
        self.pending, self.args = iter(cells), args
        self.guard, self.stopped, self.start = threading.Lock(), threading.Event(), time.time()
        self.started, self.errors = 0, []
        self.counts = {"run": 0, "skipped": 0, "failed": 0, "busy": 0}

    def stop_reason(self) -> str | None:
        """Why no new cell may start ("" for --max_cells, which says nothing); None when one may."""
        args = self.args
        if args.max_cells is not None and self.started >= args.max_cells:
            return ""
        if (Path(args.runs_dir) / "STOP").exists():
            return f"{Path(args.runs_dir) / 'STOP'} exists: no new cell started (delete it to go on)."
        if args.stop_after_minutes is not None and time.time() - self.start > args.stop_after_minutes * 60:
            return f"--stop_after_minutes {args.stop_after_minutes} reached: no new cell started."
        return None

    def take(self) -> Cell | None:
        """The next cell to start (None: stop)."""
        with self.guard:
            for c in self.pending:
                if self.stopped.is_set():
                    return None
                if c.id in done_ids(self.args.results):
                    self.counts["skipped"] += 1
                    continue
                reason = self.stop_reason()
                if reason is not None:
                    self.stopped.set()
                    if reason:
                        print(reason)
                    return None
                self.started += 1
                return c
            return None

    def finished(self, outcome: str) -> None:
        """Count a taken cell's outcome; one that was not started after all does not count for --max_cells."""
        with self.guard:
            self.counts[outcome] += 1
            if outcome in ("busy", "skipped"):
                self.started -= 1


def attempt_cell(c: Cell, args: RunnerArguments, claim_script: str, data: dict) -> str:
    """Run a taken cell under its lock (`data`: data_flags of each script): "run", "failed", "busy" (another runner
    holds it) or "skipped" (another runner finished it meanwhile)."""
    with cell_lock(Path(args.runs_dir) / ".locks" / (c.id.replace("/", "__") + ".lock")) as held:
        if not held:
            return "busy"
        if c.id in done_ids(args.results):
            return "skipped"
        print(f"{time.strftime('%H:%M:%S')} running {c.id}", flush=True)
        row = run_cell(c, args, claim_script, data[c.script])
        if row is None:
            return "failed"
        print(f"  {c.id}: eval loss {row['eval_loss']}, {row['wall_seconds']} s", flush=True)
        return "run"


def work(queue: CellQueue, args: RunnerArguments, claim_script: str, data: dict) -> None:
    """One worker: run cells from the queue until it stops. An error stops every worker; the caller raises it."""
    try:
        while (c := queue.take()) is not None:
            queue.finished(attempt_cell(c, args, claim_script, data))
    except BaseException as error:  # raised again by run_cells, in the caller's thread
        queue.errors.append(error)
        queue.stopped.set()


def run_cells(cells: list[Cell], args: RunnerArguments, claim_script: str) -> dict:
    """Run the cells not yet in the results file, in order, `args.parallel` at a time; returns counts {"run",
    "skipped", "failed", "busy"}."""
    ids = [c.id for c in cells]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"Duplicate cell ids: {duplicates}.")
    done = done_ids(args.results)
    pending = {c.script for c in cells if c.id not in done}
    data = {script: data_flags(args, script) for script in pending}  # bad data flags: an error up front
    queue = CellQueue(cells, args)
    workers = [threading.Thread(target=work, args=(queue, args, claim_script, data)) for _ in range(args.parallel)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    if queue.errors:
        raise queue.errors[0]
    return queue.counts


def main(cells: list[Cell], claim_script: str, argv=None) -> dict:
    """The entry point of a claim script: parse RunnerArguments, list or run the selected cells."""
    from transformers import HfArgumentParser

    (args,) = HfArgumentParser(RunnerArguments).parse_args_into_dataclasses(argv)
    check_runner_args(args)
    chosen = select(cells, args.only)
    if args.list:
        done = done_ids(args.results)
        for c in chosen:
            print(f"{'done   ' if c.id in done else 'pending'} {c.id}")
        return {"listed": len(chosen), "done": sum(c.id in done for c in chosen)}
    counts = run_cells(chosen, args, claim_script)
    print(
        f"{counts['run']} run, {counts['skipped']} already done, {counts['failed']} failed, "
        f"{counts['busy']} being run by another runner."
    )
    if counts["failed"]:
        raise SystemExit(1)
    return counts
