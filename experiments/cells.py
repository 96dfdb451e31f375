"""The research cells and the tables that read their rows.

A cell is (claim, variant, size, seed): one run of a training script, `examples/run_pretraining.py` (masked LM: the
project's one training path for BERT) unless the cell names another (`T5_SCRIPT`, span corruption), with flags that
the cell alone decides, on top of the setting every cell shares (`TRAINING`; the long cells'
`LONG_TRAINING`). Its id, claim/variant/size/seedN, names its row in the results file; its `train_command` is the
shell line that makes that row from the repository root. A `Table` of docs/research.md is one row per variant and
one column per size, each entry the cells of one (variant, size) group over its seeds (report.py renders it).

A variant whose learning rate was inherited is screened first (`SCREEN_LRS`, one seed) and its long cells take the
rate `SCREEN_RULE` picks (report.screen_pick applies it); a claim script records the pick as a constant, None
while the screen has not run, and `PENDING_LR` stands in until then.

The claim scripts (talking_heads.py, single_head.py, synthesizer.py, width_trend.py) define their cells with
`cell`, their tables with `Table` (and a figure across tables with `Trend`), and hand the cells to runner.main.
"""

import fnmatch
import json
import shlex
from dataclasses import dataclass

SCRIPT = "examples/run_pretraining.py"
T5_SCRIPT = "examples/run_t5_pretraining.py"
# The metric of each script's final held-out loss (a row's eval_loss): masked LM's, or span corruption's target loss.
EVAL_METRICS = {SCRIPT: "eval_mlm_loss", T5_SCRIPT: "eval_target_loss"}

# What every cell shares unless it says otherwise: the setting (width 256, 4 layers, MLM on the KJV, 128
# tokens, batch 16, linear decay with 10% warm-up); evaluation on the first 256 held-out blocks (32k tokens, the same
# blocks and masks for every cell).
TRAINING = dict(
    max_seq_length=128,
    per_device_train_batch_size=16,
    per_device_eval_batch_size=64,
    max_steps=400,
    learning_rate=1e-3,
    warmup_steps=0.1,
    weight_decay=0.01,
    lr_scheduler_type="linear",
    eval_strategy="steps",
    eval_steps=100,
    logging_steps=25,
    save_strategy="no",
    max_eval_samples=256,
    report_to="none",
    disable_tqdm=True,
    dataloader_num_workers=0,
)

# Past the plateau: the long cells train 4x as long (3.6 passes over the KJV training chapters: an epoch
# is 442 steps), evaluated every 200 steps for the curve. The screens: one seed, TRAINING's 400 steps, SCREEN_LRS.
LONG_TRAINING = dict(max_steps=1600, eval_steps=200)
SCREEN_LRS = ("5e-4", "1e-3", "2e-3")
PENDING_LR = "1e-3"
SCREEN_RULE = (
    "the learning rate of the variant's lowest final eval loss in the screen, where a stalled run (within "
    "0.05 of the unigram point) never wins; 1e-3 if all three stall"
)


def long_lrs(fixed: dict, picked: dict) -> dict:
    """The long cells' learning rate of each variant: `fixed` (set earlier) and `picked` (by the screening rule:
    its pick, or its fallback where every screened rate stalled; None while the screen is pending: PENDING_LR)."""
    return {**fixed, **{v: PENDING_LR if lr is None else lr for v, lr in picked.items()}}


def long_note(fixed: dict, picked: dict) -> str:
    """The note under a long table: what its columns are, and each variant's learning rate (pending or screened)."""
    lrs, pending = long_lrs(fixed, picked), [v for v, lr in picked.items() if lr is None]
    screened = [v for v, lr in picked.items() if lr is not None]
    steps = LONG_TRAINING["max_steps"]
    return (
        f"{steps} steps ({steps * 16 * 128 / 1e6:.1f}M tokens, {steps / 442:.1f} passes over the training "
        f"chapters), evaluated every {LONG_TRAINING['eval_steps']} steps, with the committed tokenizer. "
        "Held-out: the final eval MLM loss; train: the mean logged training loss over the last 100 steps (with "
        "dropout and fresh masks, so a little above the model's loss on training text); `rising`: a run whose "
        "held-out loss ended more than 0.01 above the lowest point of its curve (overfitting). Learning rates: "
        + ", ".join(f"{v} {lr}" for v, lr in lrs.items())
        + (
            f" ({', '.join(pending)}: the placeholder {PENDING_LR}, pending the screen: do not run these cells "
            "before it)"
            if pending
            else ""
        )
        + (f" ({', '.join(screened)}: by the screening rule)" if screened else "")
        + "."
    )


# run_pretraining flags a cell may add that TRAINING leaves at the script's default
EXTRA_FLAGS = {"max_train_samples", "admin_init", "t5_adafactor", "dynamic_lr_scale", "sparse_prediction"}
# the flags only pretrain_research.py knows (run_pretraining's, plus the research cells' optimizers)
RESEARCH_FLAGS = {"t5_adafactor", "dynamic_lr_scale"}
RESEARCH_SCRIPT = "experiments/pretrain_research.py"


def launched_script(cell: "Cell") -> str:
    """The script a cell's command runs: its own (`Cell.script`), or pretrain_research.py where the cell sets one of
    RESEARCH_FLAGS (it is run_pretraining with them)."""
    return RESEARCH_SCRIPT if RESEARCH_FLAGS & dict(cell.training).keys() else cell.script


def current_command(command: str) -> str:
    """A recorded train_command as it runs today: a row made when run_pretraining still took the research optimizer
    flags (RESEARCH_FLAGS) runs pretrain_research.py, which takes every other flag as run_pretraining does."""
    if f"python {SCRIPT} " in command and any(f" --{flag} " in command for flag in RESEARCH_FLAGS):
        return command.replace(f"python {SCRIPT} ", f"python {RESEARCH_SCRIPT} ", 1)
    return command


@dataclass(frozen=True)
class Cell:
    """One run: `preset` with `overrides` (config fields), trained with `training` (the script's flags on top of
    TRAINING), seeded by `seed`, by `script` (one of EVAL_METRICS). `size` names the setting within the claim (e.g.
    "h16" or "h16-lr5e-4")."""

    claim: str
    variant: str
    size: str
    seed: int
    preset: str
    overrides: tuple = ()  # sorted (field, value) pairs; see `cell()`
    training: tuple = ()
    script: str = SCRIPT

    @property
    def id(self) -> str:
        return f"{self.claim}/{self.variant}/{self.size}/seed{self.seed}"

    @property
    def config(self) -> dict:
        config = {
            "preset": self.preset,
            "overrides": dict(self.overrides),
            "training": {**TRAINING, **dict(self.training)},
        }
        return config if self.script == SCRIPT else {**config, "script": self.script}  # MLM rows as they were

    @property
    def eval_metric(self) -> str:
        """The key of the final held-out loss in the script's all_results.json."""
        return EVAL_METRICS[self.script]

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


def cell(
    claim: str,
    variant: str,
    size: str,
    seed: int,
    preset: str,
    overrides: dict | None = None,
    script: str = SCRIPT,
    **training,
) -> Cell:
    """A `Cell` from plain dicts (kept as sorted tuples, so cells are hashable and compare by value)."""
    if script not in EVAL_METRICS:
        raise ValueError(f"{claim}/{variant}: unknown script {script!r}; known: {', '.join(EVAL_METRICS)}.")
    unknown = sorted(set(training) - set(TRAINING) - EXTRA_FLAGS)
    if unknown:
        raise ValueError(
            f"{claim}/{variant}: unknown training flag(s) {', '.join(unknown)}; known: "
            f"{', '.join(sorted(set(TRAINING) | EXTRA_FLAGS))}."
        )
    frozen = {k: tuple(v) if isinstance(v, list) else v for k, v in (overrides or {}).items()}
    return Cell(
        claim, variant, size, seed, preset, tuple(sorted(frozen.items())), tuple(sorted(training.items())), script
    )


def dedupe(cells: list[Cell]) -> tuple[list[Cell], dict]:
    """Drop cells that repeat an earlier cell's run (same preset, overrides, training and seed under another name,
    e.g. a sweep point that is also a point of a study). Returns (cells, aliases): aliases maps the (claim, variant,
    size) of a dropped group to that of the group holding its runs, for the tables."""
    seen, kept, aliases = {}, [], {}
    for c in cells:
        key = (c.preset, c.overrides, c.training, c.seed, c.script)
        if key in seen:
            first = seen[key]
            aliases[(c.claim, c.variant, c.size)] = (first.claim, first.variant, first.size)
            continue
        seen[key] = c
        kept.append(c)
    return kept, aliases


def select(cells: list[Cell], patterns: list[str]) -> list[Cell]:
    """The cells whose id matches one of the globs (all, without any); an error when none does."""
    if not patterns:
        return list(cells)
    chosen = [c for c in cells if any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]
    if not chosen:
        raise ValueError(f"No cell matches {patterns}; see --list for the ids.")
    return chosen


def rerun_command(claim_script: str, cell: Cell) -> str:
    """The command that runs the cell again through its claim script (a row's `command`)."""
    return f"python {claim_script} --only {shlex.quote(cell.id)}"


def train_command(
    cell: Cell, recorded_data: dict[str, str], output_dir: str, extra: list[str] = (), threads: str = "1"
) -> str:
    """The training command of a cell (its script's) as a shell line, run from the repository root, with the thread
    count it ran with (a CPU's results can depend on it)."""
    words = []
    flags = [*cell.flags({k: "\0" + k for k in recorded_data}, output_dir), *extra]
    for word in flags:
        words.append(recorded_data[word[1:]] if word.startswith("\0") else shlex.quote(word))
    return f"OMP_NUM_THREADS={threads} HF_HUB_OFFLINE=1 python {launched_script(cell)} " + " ".join(words)


@dataclass(frozen=True)
class Table:
    """A results table of docs/research.md: one row per variant, one column per size, each entry the mean ± std of
    the final eval MLM loss over the seeds of that (variant, size) cell group; with `train_loss`, each size also
    has a column of the final training loss of the same runs (for long runs, where a model may overfit). A
    `screen` table's columns are the SCREEN_LRS, in order: its block also names each row's pick by SCREEN_RULE.
    `note` goes under the table. `reference` is the unigram point of the table's loss (None: masked LM's,
    unigram.UNIGRAM_LOSS), against which a run counts as stalled; `loss_name` names the loss in its figure. With
    `paired`, a second table under it gives each later row's final held-out loss minus the first row's (the
    baseline's) of the same seed, per column, as a `Trend` does. `not_run` names the (variant, size) entries that
    the design leaves out: they read "not run", where an entry no run has reached yet reads "pending"."""

    name: str
    title: str
    claim: str
    rows: tuple  # ((label, variant), ...)
    columns: tuple  # ((label, size), ...)
    seeds: tuple = (0, 1, 2)
    note: str = ""
    train_loss: bool = False
    screen: bool = False
    reference: float | None = None
    loss_name: str = "MLM loss"
    paired: bool = False
    not_run: tuple = ()  # ((variant, size), ...)

    def groups(self, variant: str, size: str, aliases: dict | None = None) -> list[tuple[str, str, str]]:
        """The (claim, variant, size) groups whose rows fill an entry: its own, then the groups that hold the runs
        `dedupe` did not repeat (or that another claim ran), following aliases of aliases."""
        groups = [(self.claim, variant, size)]
        while aliases and groups[-1] in aliases and aliases[groups[-1]] not in groups:
            groups.append(aliases[groups[-1]])
        return groups


@dataclass(frozen=True)
class Trend:
    """A figure of docs/research.md across the columns of long tables: for each variant of a table after its first
    row (the table's baseline), the final held-out loss minus the baseline's of the same seed (the same data order
    and masks), one point per seed and their mean, against `xs` (the x value of each column: every table has as many
    columns as `xs`, in that order). `tables` is ((prefix of its series' labels, Table), ...); report.py renders the
    figure and a table of its numbers."""

    name: str
    title: str
    tables: tuple
    xs: tuple
    xlabel: str
