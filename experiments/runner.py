"""The shared runner of the research experiments: cells, their commands, resumable runs, the results file.

A cell is (claim, variant, size, seed): one run of `examples/run_pretraining.py` (the project's one training path)
as a subprocess, with flags that the cell alone decides. Its results row (one JSON line in experiments/results.jsonl)
records the command that re-runs it. Cells are resumable: a cell whose id is already in the results file is skipped,
and a row is appended only when a run has finished, so a killed or failed run leaves no row; it leaves its newest
checkpoint (one every eval_steps, see `checkpointing`), from which the cell's next attempt continues as if it had
never stopped (the same run: flags, text and code; anything else starts afresh), its row counting the cost of every
attempt (see `run_cell`). Several runners may work on the same list at once (one per core): a cell being run
holds a lock (`fcntl.flock`, released when its runner dies), and the others pass over it; `--parallel N` runs N
cells at once from one runner (on one GPU with `--device cuda`, or on N cores).

Every row records what it was made from: the command, the code (`git_commit`, "+dirty" when code differs from the
commit; results and docs do not count), the sha256 of the tokenizer.json it trained with and of its training and
validation text, and the machine (CPU model, torch/transformers/tokenizers versions, the device). KJV cells use the
tokenizer committed beside the corpus (`kjv.TOKENIZER`, `--tokenizer_name`). `python experiments/reproduce.py <id>`
re-runs a row's command in a scratch cache and compares the loss.

The claim scripts (talking_heads.py, single_head.py, synthesizer.py) define their cells and tables and call `main`:

    nice -n 19 python experiments/talking_heads.py --only 'talking_heads/lr-init/*/seed0'   # a subset, by glob
    python experiments/talking_heads.py --list                                               # every cell, done or not
"""

import contextlib
import ctypes
import fcntl
import fnmatch
import hashlib
import json
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "experiments" / "results.jsonl"
RUNS = ROOT / "experiments" / "runs"
SCRIPT = "examples/run_pretraining.py"
# The data of every cell, as a shell expression (so a recorded command runs on any machine from the repo root) and
# as the function that resolves it here.
KJV_FLAGS = {"train_file": '"$(python experiments/kjv.py --split train)"',
             "validation_file": '"$(python experiments/kjv.py --split validation)"'}

# What every cell shares unless it says otherwise: the setting (width 256, 4 layers, MLM on the KJV, 128
# tokens, batch 16, linear decay with 10% warm-up); evaluation on the first 256 held-out blocks (32k tokens, the same
# blocks and masks for every cell).
TRAINING = dict(
    max_seq_length=128, per_device_train_batch_size=16, per_device_eval_batch_size=64, max_steps=400,
    learning_rate=1e-3, warmup_steps=0.1, weight_decay=0.01, lr_scheduler_type="linear", eval_strategy="steps",
    eval_steps=100, logging_steps=25, save_strategy="no", max_eval_samples=256, report_to="none",
    disable_tqdm=True, dataloader_num_workers=0,
)

# Past the plateau: the long cells train 4x as long (3.6 passes over the KJV training chapters: an epoch
# is 442 steps), evaluated every 200 steps for the curve. A variant whose learning rate was inherited (the
# Synthesizer variants, the talking-heads ablation) is screened first at SCREEN_LRS (one seed, TRAINING's 400
# steps); SCREEN_RULE picks its long cells' rate (report.screen_pick applies it); a claim script records the pick
# as a constant (None while its screen has not run), and PENDING_LR stands in until then.
LONG_TRAINING = dict(max_steps=1600, eval_steps=200)
SCREEN_LRS = ("5e-4", "1e-3", "2e-3")
PENDING_LR = "1e-3"
SCREEN_RULE = ("the learning rate of the variant's lowest final eval loss in the screen, where a stalled run (within "
               "0.05 of the unigram point) never wins; 1e-3 if all three stall")


def long_lrs(fixed: dict, picked: dict) -> dict:
    """The long cells' learning rate of each variant: `fixed` (set earlier) and `picked` (by the screen; None while
    the screen is pending: PENDING_LR)."""
    return {**fixed, **{v: PENDING_LR if lr is None else lr for v, lr in picked.items()}}


def long_note(fixed: dict, picked: dict) -> str:
    """The note under a long table: what its columns are, and each variant's learning rate (pending or screened)."""
    lrs, pending = long_lrs(fixed, picked), [v for v, lr in picked.items() if lr is None]
    screened = [v for v, lr in picked.items() if lr is not None]
    steps = LONG_TRAINING["max_steps"]
    return (f"{steps} steps ({steps * 16 * 128 / 1e6:.1f}M tokens, {steps / 442:.1f} passes over the training "
            f"chapters), evaluated every {LONG_TRAINING['eval_steps']} steps, with the committed tokenizer. "
            "Held-out: the final eval MLM loss; train: the mean logged training loss over the last 100 steps (with "
            "dropout and fresh masks, so a little above the model's loss on training text); `rising`: a run whose "
            "held-out loss ended more than 0.01 above the lowest point of its curve (overfitting). Learning rates: "
            + ", ".join(f"{v} {lr}" for v, lr in lrs.items())
            + (f" ({', '.join(pending)}: the placeholder {PENDING_LR}, pending the screen: do not run these cells "
               "before it)" if pending else "") + (f" ({', '.join(screened)}: by the screen)" if screened else "")
            + ".")


# Changes to these do not make a row's code "+dirty": they are what runs write or what describes them.
NOT_CODE = ("experiments/results.jsonl", "experiments/runs", "docs", "*.md", "*.png")
DEVICES = ("cpu", "cuda")

# run_pretraining flags a cell may add that TRAINING leaves at the script's default
EXTRA_FLAGS = {"max_train_samples", "admin_init", "t5_adafactor", "dynamic_lr_scale", "sparse_prediction"}


@dataclass(frozen=True)
class Cell:
    """One run: `preset` with `overrides` (config fields), trained with `training` (run_pretraining flags on top of
    TRAINING), seeded by `seed`. `size` names the setting within the claim (e.g. "h16" or "h16-lr5e-4")."""

    claim: str
    variant: str
    size: str
    seed: int
    preset: str
    overrides: tuple = ()  # sorted (field, value) pairs; see `cell()`
    training: tuple = ()

    @property
    def id(self) -> str:
        return f"{self.claim}/{self.variant}/{self.size}/seed{self.seed}"

    @property
    def config(self) -> dict:
        return {"preset": self.preset, "overrides": dict(self.overrides),
                "training": {**TRAINING, **dict(self.training)}}

    def flags(self, data: dict[str, str], output_dir: str, **replaced) -> list[str]:
        """run_pretraining's arguments; `data` maps train_file/validation_file to a path (or a shell expression);
        `replaced` overrides training flags in place (the runner's checkpointing, see `checkpointing`)."""
        flags = {"preset": self.preset, **data}
        if self.overrides:
            flags["config_overrides"] = json.dumps(dict(self.overrides), separators=(",", ":"))
        flags.update({**TRAINING, **dict(self.training), "seed": self.seed, "output_dir": output_dir, **replaced})
        argv = []
        for name, value in flags.items():
            argv += [f"--{name}", str(value)]
        return argv


def cell(claim: str, variant: str, size: str, seed: int, preset: str, overrides: dict | None = None,
         **training) -> Cell:
    """A `Cell` from plain dicts (kept as sorted tuples, so cells are hashable and compare by value)."""
    unknown = sorted(set(training) - set(TRAINING) - EXTRA_FLAGS)
    if unknown:
        raise ValueError(f"{claim}/{variant}: unknown training flag(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(set(TRAINING) | EXTRA_FLAGS))}.")
    frozen = {k: tuple(v) if isinstance(v, list) else v for k, v in (overrides or {}).items()}
    return Cell(claim, variant, size, seed, preset, tuple(sorted(frozen.items())), tuple(sorted(training.items())))


def dedupe(cells: list[Cell]) -> tuple[list[Cell], dict]:
    """Drop cells that repeat an earlier cell's run (same preset, overrides, training and seed under another name,
    e.g. a sweep point that is also a point of a study). Returns (cells, aliases): aliases maps the (claim, variant,
    size) of a dropped group to that of the group holding its runs, for the tables."""
    seen, kept, aliases = {}, [], {}
    for c in cells:
        key = (c.preset, c.overrides, c.training, c.seed)
        if key in seen:
            first = seen[key]
            aliases[(c.claim, c.variant, c.size)] = (first.claim, first.variant, first.size)
            continue
        seen[key] = c
        kept.append(c)
    return kept, aliases


@dataclass
class RunnerArguments:
    only: list[str] = field(default_factory=list, metadata={
        "help": "Run only the cells whose id matches one of these globs (ids are claim/variant/size/seedN, e.g. "
                "'talking_heads/*/h16-lr1e-3/seed0'). Default: every cell of the claim."})
    list: bool = field(default=False, metadata={
        "help": "List the selected cells, each marked done or pending; run nothing."})
    results: str = field(default=str(RESULTS), metadata={"help": "The JSON-lines results file."})
    runs_dir: str = field(default=str(RUNS), metadata={
        "help": "Where each cell's output folder goes (runs_dir/<cell id>): logs, metrics, attempts.json and, "
                "while the cell is unfinished, its newest checkpoint (a killed cell resumes from it); a finished "
                "cell's model and checkpoints are deleted unless --keep_models."})
    keep_models: bool = field(default=False, metadata={
        "help": "Keep each finished cell's saved model, tokenizer and last checkpoint."})
    max_cells: int | None = field(default=None, metadata={"help": "Run at most this many cells, then stop."})
    stop_after_minutes: float | None = field(default=None, metadata={
        "help": "Start no new cell after this many minutes (a running cell finishes). Creating the file "
                "<runs_dir>/STOP also stops every runner before its next cell. A runner killed instead loses at "
                "most its cells' work since their last checkpoint (eval_steps)."})
    cell_timeout_minutes: float = field(default=240.0, metadata={
        "help": "Kill an attempt at a cell that runs longer than this, wall clock (it leaves no row; the next "
                "attempt resumes from its checkpoint): a guard against a hung run. On a shared machine a 10-minute "
                "cell can take 40 minutes; keep it generous."})
    train_file: str | None = field(default=None, metadata={
        "help": "Train on this file instead of the KJV training chapters (tests, other corpora); recorded as given."})
    validation_file: str | None = field(default=None, metadata={
        "help": "Evaluate on this file instead of the KJV held-out chapters; recorded as given."})
    python: str = field(default=sys.executable, metadata={"help": "The interpreter that runs each cell."})
    device: str = field(default="cpu", metadata={
        "help": "cpu (each cell on the CPU, --use_cpu, even where a GPU is visible) or cuda (on the first GPU; "
                "refused where torch sees none). Recorded in each row's hardware."})
    parallel: int = field(default=1, metadata={
        "help": "Run this many cells at once (threads, each driving one cell's process): on one GPU several small "
                "cells share it; on CPU give each its core (OMP_NUM_THREADS=1)."})


def check_runner_args(args: RunnerArguments) -> None:
    if args.device not in DEVICES:
        raise ValueError(f"--device must be one of {', '.join(DEVICES)}, got {args.device!r}.")
    if args.parallel < 1:
        raise ValueError(f"--parallel must be at least 1, got {args.parallel}.")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device cuda: torch sees no CUDA device here (torch.cuda.is_available() is False); "
                             "run on a machine with a GPU, or use --device cpu.")


def device_flags(args: RunnerArguments) -> list[str]:
    """run_pretraining's flags for the device: --use_cpu on CPU (so a GPU machine does not take the cell); on CUDA
    none (Trainer takes the GPU it sees)."""
    return ["--use_cpu", "true"] if args.device == "cpu" else []


def data_flags(args: RunnerArguments) -> tuple[dict[str, str], dict[str, str]]:
    """(flags as recorded, flags as run): the KJV split files unless --train_file/--validation_file are given."""
    if (args.train_file is None) != (args.validation_file is None):
        raise ValueError("Give both --train_file and --validation_file (or neither, for the KJV splits).")
    if args.train_file is not None:
        given = {"train_file": args.train_file, "validation_file": args.validation_file}
        for name, path in given.items():
            if not Path(path).is_file():
                raise FileNotFoundError(f"--{name} {path}: no such file.")
        return {k: shlex.quote(v) for k, v in given.items()}, given
    sys.path.insert(0, str(ROOT / "experiments"))
    from kjv import TOKENIZER, kjv_files

    paths = kjv_files()
    return ({**KJV_FLAGS, "tokenizer_name": os.path.relpath(TOKENIZER, ROOT)},
            {"train_file": str(paths["train"]), "validation_file": str(paths["validation"]),
             "tokenizer_name": str(TOKENIZER)})


# ----------------------------------------------------------------------------------------------------- results
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

    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "load_average_1min": round(os.getloadavg()[0], 2), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "os": platform.platform(),
            "device": f"cuda: {torch.cuda.get_device_name(0)}" if device == "cuda" else "cpu"}


def git_commit() -> str | None:
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":(exclude){path}" for path in NOT_CODE)], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return commit.stdout.strip() + ("+dirty" if dirty else "")
    return None


def sha256(path: str | os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def finite(value):
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def read_outcome(output_dir: Path) -> dict:
    """Metrics and curves of a finished run_pretraining output folder."""
    results = json.loads((output_dir / "all_results.json").read_text())
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    # the script evaluates once more after training, at the last step: one point per step
    by_step = {h["step"]: finite(h["eval_mlm_loss"]) for h in history if "eval_mlm_loss" in h}
    eval_curve = [[step, loss] for step, loss in sorted(by_step.items())]
    train_curve = [[h["step"], finite(h["loss"])] for h in history if "loss" in h]
    values = [results.get("eval_mlm_loss")] + [v for _, v in eval_curve] + [v for _, v in train_curve]
    diverged = any(v is None or not math.isfinite(v) for v in values)
    loss = finite(results.get("eval_mlm_loss"))
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
        **({"admin_omegas": [results["admin_omega_min"], results["admin_omega_max"]]}
           if "admin_omega_min" in results else {}),
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


# --------------------------------------------------------------------------------------------------- running
def rerun_command(claim_script: str, cell: Cell) -> str:
    return f"python {claim_script} --only {shlex.quote(cell.id)}"


def train_command(cell: Cell, recorded_data: dict[str, str], output_dir: str, extra: list[str] = ()) -> str:
    """The run_pretraining command of a cell as a shell line, run from the repository root."""
    words = []
    flags = [*cell.flags({k: "\0" + k for k in recorded_data}, output_dir), *extra]
    for word in flags:
        words.append(recorded_data[word[1:]] if word.startswith("\0") else shlex.quote(word))
    return f"OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python {SCRIPT} " + " ".join(words)


def checkpointing(cell: Cell) -> dict:
    """The flags the runner adds to every cell (not part of its config or its `train_command`): a checkpoint every
    `eval_steps`, only the newest kept, so a killed cell resumes from its last evaluation. Every cell, not only the
    long ones: a checkpoint of these models (at most 6.4M parameters, with AdamW's two moments) is under 80 MB,
    written in about 0.2 s, every 100 or 200 steps of a cell of 5 to 65 CPU-minutes; one rule leaves no cell that a
    stopped session runs again from step 0. Saving reads the RNG states without drawing from them, so the run is
    the one `train_command` makes (checked by test_experiments)."""
    return {"save_strategy": "steps", "save_steps": cell.config["training"]["eval_steps"], "save_total_limit": 1}


ATTEMPTS = "attempts.json"  # in a cell's run folder: what the checkpoints there are of, and every attempt's cost
HEARTBEAT_SECONDS = 30.0  # how often a running attempt's cost is written there (all a killed runner leaves)


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


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a running process and its waited-for children (Linux /proc; None elsewhere)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(tick) for tick in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return None


def last_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete checkpoint-N (Trainer writes trainer_state.json last); incomplete newer ones, which a kill
    during a save leaves, are removed."""
    found = sorted((int(d.name.split("-")[1]), d) for d in output_dir.glob("checkpoint-*")
                   if d.is_dir() and d.name.split("-")[1].isdigit())
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
    """(record, checkpoint) of earlier attempts at the same run in `output_dir` (see `run_cell`): (None, None) when
    there were none, or they were of another run (other flags, data or code: their folder is cleared)."""
    path = output_dir / ATTEMPTS
    with contextlib.suppress(OSError, json.JSONDecodeError):
        record = json.loads(path.read_text())
        differs = [key for key, value in identity.items() if record.get(key) != value]
        if not differs:
            return record, last_checkpoint(output_dir)
        print(f"  {identity['id']}: {output_dir} holds an attempt at another run (its {', '.join(differs)} "
              "differ); starting afresh", file=sys.stderr)
    return None, None


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


def run_cell(cell: Cell, args: RunnerArguments, claim_script: str, data: tuple[dict, dict]) -> dict | None:
    """Run one cell and append its row; None (and no row) when the run failed or was killed.

    The run folder keeps what a killed attempt leaves: the newest checkpoint (see `checkpointing`) and ATTEMPTS, which
    says what run it is of (the flags as run, the training and validation text, `code_state`) and what each attempt
    cost (its wall and CPU seconds, written every HEARTBEAT_SECONDS while it runs). An attempt at the same run
    resumes from the newest complete checkpoint (`--resume_from_checkpoint`: Trainer restores the weights,
    optimizer, schedule, RNG states and skips the batches already seen; the masks depend only on each example, the
    seed and the epoch); anything else starts afresh in a cleared folder. The row's wall and CPU seconds are those of
    every attempt, `resumed_from_step` the step each later attempt started from ([] for a run in one go), and
    `git_commit` the first attempt's (the code is the same in all); its train_runtime and train_seconds_per_step
    are of the attempt that finished, its train_loss of the whole run (from the logged curve)."""
    recorded, actual = data
    runs_dir = Path(args.runs_dir)
    output_dir = runs_dir / cell.id
    inside = output_dir.resolve().is_relative_to(ROOT)
    relative = os.path.relpath(output_dir.resolve(), ROOT) if inside else str(output_dir)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "TOKENIZERS_PARALLELISM": "false"}
    flags = [*cell.flags(actual, str(output_dir), **checkpointing(cell)), *device_flags(args)]
    texts = {f"{split}_text_sha256": sha256(actual[f"{split}_file"]) for split in ("train", "validation")}
    identity = {"id": cell.id, "flags": flags, **texts, "code": code_state()}
    machine, commit = hardware(args.device), git_commit()  # as the run starts: the code it runs
    record, checkpoint = earlier_attempts(output_dir, identity)
    if checkpoint is None:  # nothing to resume: a fresh folder (the cost of an attempt at the same run still counts)
        shutil.rmtree(output_dir, ignore_errors=True)
        output_dir.mkdir(parents=True)
    record = record or {**identity, "git_commit": commit, "attempts": []}
    step = json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] if checkpoint else 0
    attempt = {"from_step": step, "wall_seconds": 0.0, "cpu_seconds": 0.0}
    record["attempts"].append(attempt)
    write_json(output_dir / ATTEMPTS, record)
    if checkpoint is not None:
        print(f"  {cell.id}: resuming from {checkpoint.name}", flush=True)
        flags = [*flags, "--resume_from_checkpoint", str(checkpoint)]  # a new list: the record keeps the run's
    start, timed_out, ended = time.time(), threading.Event(), threading.Event()
    with open(output_dir / "log.txt", "a") as log:
        log.write(f"=== attempt {len(record['attempts'])}, from step {step}\n")
        log.flush()
        proc = subprocess.Popen([args.python, str(ROOT / SCRIPT), *flags], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, preexec_fn=die_with(os.getpid()))

        def heartbeat() -> None:
            while not ended.wait(HEARTBEAT_SECONDS):
                attempt["wall_seconds"] = round(time.time() - start, 1)
                cpu = process_cpu_seconds(proc.pid)
                attempt["cpu_seconds"] = attempt["cpu_seconds"] if cpu is None else round(cpu, 1)
                write_json(output_dir / ATTEMPTS, record)

        beats = threading.Thread(target=heartbeat, daemon=True)
        beats.start()
        timer = threading.Timer(args.cell_timeout_minutes * 60, lambda: (timed_out.set(), proc.kill()))
        timer.start()
        try:  # wait4: this cell's own CPU time, even while other cells (--parallel) end
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
            ended.set()
            beats.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    # the cell's CPU time: independent of how busy the machine was
    attempt.update(wall_seconds=round(time.time() - start, 1), cpu_seconds=round(usage.ru_utime + usage.ru_stime, 1))
    write_json(output_dir / ATTEMPTS, record)
    if timed_out.is_set():
        print(f"  {cell.id}: killed after {args.cell_timeout_minutes} min; no row", file=sys.stderr)
        return None
    if proc.returncode != 0:
        tail = (output_dir / "log.txt").read_text()[-2000:]
        print(f"  {cell.id}: failed (exit {proc.returncode}); no row. Log tail:\n{tail}", file=sys.stderr)
        return None
    outcome = read_outcome(output_dir)
    resumed = [a["from_step"] for a in record["attempts"][1:]]
    if resumed:  # Trainer's train_loss covers the last attempt's steps alone
        outcome["train_loss"] = whole_run_train_loss(outcome["train_curve"])
    row = {
        "id": cell.id, "claim": cell.claim, "variant": cell.variant, "size": cell.size, "seed": cell.seed,
        "config": cell.config, "steps": None, **outcome,
        "wall_seconds": round(sum(a["wall_seconds"] for a in record["attempts"]), 1),
        "cpu_seconds": round(sum(a["cpu_seconds"] for a in record["attempts"]), 1),
        "resumed_from_step": resumed, "hardware": machine,
        "command": rerun_command(claim_script, cell),
        "train_command": train_command(cell, recorded, relative, device_flags(args)),
        # what it was made from: the tokenizer as the run saved it (byte-identical to the one it loaded), the text
        "tokenizer_sha256": sha256(output_dir / "tokenizer.json"), **texts,
        "git_commit": record["git_commit"], "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    row["steps"] = json.loads((output_dir / "trainer_state.json").read_text())["global_step"]
    row["hardware"]["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    if not args.keep_models:
        for pattern in ("*.safetensors", "*.bin", "tokenizer*", "vocab.txt", "special_tokens_map.json"):
            for path in output_dir.glob(pattern):
                path.unlink()
        for folder in output_dir.glob("checkpoint-*"):
            shutil.rmtree(folder)
    append_row(args.results, row)
    return row


def select(cells: list[Cell], patterns: list[str]) -> list[Cell]:
    if not patterns:
        return list(cells)
    chosen = [c for c in cells if any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]
    if not chosen:
        raise ValueError(f"No cell matches {patterns}; see --list for the ids.")
    return chosen


def run_cells(cells: list[Cell], args: RunnerArguments, claim_script: str) -> dict:
    """Run the cells not yet in the results file, in order, `args.parallel` at a time; returns counts {"run",
    "skipped", "failed", "busy"}."""
    ids = [c.id for c in cells]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"Duplicate cell ids: {duplicates}.")
    counts = {"run": 0, "skipped": 0, "failed": 0, "busy": 0}
    done = done_ids(args.results)
    data = data_flags(args) if any(c.id not in done for c in cells) else None  # bad data flags: an error up front
    pending, guard, start = iter(cells), threading.Lock(), time.time()
    started, stopped, errors = [0], threading.Event(), []

    def stop_reason() -> str | None:
        if args.max_cells is not None and started[0] >= args.max_cells:
            return ""
        if (Path(args.runs_dir) / "STOP").exists():
            return f"{Path(args.runs_dir) / 'STOP'} exists: no new cell started (delete it to go on)."
        if args.stop_after_minutes is not None and time.time() - start > args.stop_after_minutes * 60:
            return f"--stop_after_minutes {args.stop_after_minutes} reached: no new cell started."
        return None

    def take() -> Cell | None:
        """The next cell to start (None: stop), by one worker at a time."""
        with guard:
            for c in pending:
                if stopped.is_set():
                    return None
                if c.id in done_ids(args.results):  # re-read each time: another runner may have finished it
                    counts["skipped"] += 1
                    continue
                reason = stop_reason()
                if reason is not None:
                    stopped.set()
                    if reason:
                        print(reason)
                    return None
                started[0] += 1
                return c
            return None

    def worker() -> None:
        try:
            work()
        except BaseException as error:  # noqa: BLE001  (raised again below, in the caller's thread)
            errors.append(error)
            stopped.set()

    def work() -> None:
        while (c := take()) is not None:
            with cell_lock(Path(args.runs_dir) / ".locks" / (c.id.replace("/", "__") + ".lock")) as held:
                if not held:
                    outcome = "busy"
                elif c.id in done_ids(args.results):
                    outcome = "skipped"
                else:
                    print(f"{time.strftime('%H:%M:%S')} running {c.id}", flush=True)
                    row = run_cell(c, args, claim_script, data)
                    outcome = "failed" if row is None else "run"
                    if row is not None:
                        print(f"  {c.id}: eval loss {row['eval_loss']}, {row['wall_seconds']} s", flush=True)
            with guard:
                counts[outcome] += 1
                if outcome != "run" and outcome != "failed":
                    started[0] -= 1  # it was not started after all: --max_cells counts started cells

    workers = [threading.Thread(target=worker) for _ in range(args.parallel)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    if errors:
        raise errors[0]
    return counts


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
    print(f"{counts['run']} run, {counts['skipped']} already done, {counts['failed']} failed, "
          f"{counts['busy']} being run by another runner.")
    if counts["failed"]:
        raise SystemExit(1)
    return counts


@dataclass(frozen=True)
class Table:
    """A results table of docs/research.md: one row per variant, one column per size, each entry the mean ± std of
    the final eval MLM loss over the seeds of that (variant, size) cell group; with `train_loss`, each size also
    has a column of the final training loss of the same runs (for long runs, where a model may overfit). A
    `screen` table's columns are the SCREEN_LRS, in order: its block also names each row's pick by SCREEN_RULE.
    `note` goes under the table."""

    name: str
    title: str
    claim: str
    rows: tuple  # ((label, variant), ...)
    columns: tuple  # ((label, size), ...)
    seeds: tuple = (0, 1, 2)
    note: str = ""
    train_loss: bool = False
    screen: bool = False

    def groups(self, variant: str, size: str, aliases: dict | None = None) -> list[tuple[str, str, str]]:
        """The (claim, variant, size) groups whose rows fill an entry: its own, then the groups that hold the runs
        `dedupe` did not repeat (or that another claim ran), following aliases of aliases."""
        groups = [(self.claim, variant, size)]
        while aliases and groups[-1] in aliases and aliases[groups[-1]] not in groups:
            groups.append(aliases[groups[-1]])
        return groups
