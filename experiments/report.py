"""Render the results file into docs/research.md and docs/research-short-runs.md: every claim's tables (mean ± std
of the final eval MLM loss over the seeds, with the number of seeds; "pending" where no run is in yet, "not run"
where the design leaves an entry out; a table with `train_loss` has a column of the final training loss beside each
held-out one) and eval-curve PNGs (docs/research/*.png, drawn by figures.py; such a table's training curves
dotted). `screen_pick` applies the learning-rate rule of the screening tables.

    python experiments/report.py            # after any cells have run; rewrites only the generated blocks

The pages are written by hand except between the markers `<!-- BEGIN name -->` and `<!-- END name -->`, where
`name` is a table's name (its table, curves and command), a trend's (its figure and the table of its numbers; a
claim script's TRENDS) or `summary` (what has run, what is pending, CPU time). Each block is rendered on whichever
page holds its markers (exactly one page must); to move a table, move its markers.
"""

import importlib
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from cells import PENDING_LR, SCREEN_LRS, Table, Trend
from figures import plot_curves, plot_trend
from provenance import ROOT
from results_file import RESULTS, estimate_cpu_seconds, load_results
from unigram import UNIGRAM_LOSS

CLAIMS = ("talking_heads", "single_head", "synthesizer", "width_trend", "t5_places", "length", "offsets_and_heads")
PAGE = ROOT / "docs" / "research.md"
PAGES = (PAGE, ROOT / "docs" / "research-short-runs.md")  # the current findings; the 400-step runs and screens
FIGURES = "research"  # docs/research/<table>.png, linked relative to the pages (which share a folder)


# A finished run whose final eval loss is within STALL_MARGIN of the unigram reference point (experiments/unigram.py)
# never got past token frequencies: every run passes through that plateau early (eval loss about 5.9 by step 100),
# and a run that has not left it by step 400 is counted as stalled, so that a mean is never read without it.
STALL_MARGIN = 0.05
# A run whose final eval loss is more than RISE_MARGIN above the lowest point of its own eval curve has turned up:
# counted as "rising" (the sign of overfitting that long runs, 3.6 passes over the KJV, may show).
RISE_MARGIN = 0.01
# The final training loss of a run: the mean of its logged training losses over its last TRAIN_WINDOW steps (each
# logged value is itself the mean over the `logging_steps` before it), with dropout on and the training masks, so
# it reads a little above what the same model scores on training text without dropout.
TRAIN_WINDOW = 100


def is_stalled(loss: float, reference: float | None = None) -> bool:
    """Whether a run ended within STALL_MARGIN of the unigram point of its loss (`reference`, a Table's; None:
    masked LM's)."""
    return loss >= (UNIGRAM_LOSS if reference is None else reference) - STALL_MARGIN


def final_train_loss(row: dict) -> float | None:
    points = [(step, loss) for step, loss in row.get("train_curve") or [] if loss is not None]
    if not points:
        return None
    last = points[-1][0]
    return statistics.fmean(loss for step, loss in points if step > last - TRAIN_WINDOW)


@dataclass
class Entry:
    """The runs of one table entry: final eval losses of the finished runs, how many diverged, and the lowest point
    of each finished run's eval curve (for the rising count); `reference`: the table's unigram point."""

    losses: list[float]
    diverged: int
    expected: int
    minima: list[float] = field(default_factory=list)
    reference: float | None = None

    @property
    def stalled(self) -> int:
        return sum(is_stalled(loss, self.reference) for loss in self.losses)

    @property
    def rising(self) -> int:
        return sum(loss > low + RISE_MARGIN for loss, low in zip(self.losses, self.minima))

    @property
    def n(self) -> int:
        return len(self.losses) + self.diverged

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.losses) if self.losses else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.losses) if len(self.losses) >= 2 else None

    def render(self) -> str:
        if self.n == 0:
            return "pending"
        of = f"n={self.n}" + (f" of {self.expected}" if self.n < self.expected else "")
        if not self.losses:
            return f"diverged ({of})"
        value = f"{self.mean:.3f}" + (f" ± {self.std:.3f}" if self.std is not None else "")
        notes = [of] + [
            f"{count} {what}"
            for count, what in ((self.stalled, "stalled"), (self.rising, "rising"), (self.diverged, "diverged"))
            if count
        ]
        return f"{value} ({', '.join(notes)})"


def entry_rows(rows: list[dict], table: Table, variant: str, size: str, aliases: dict) -> list[dict]:
    """The rows of one entry: one per seed of the table, from its own group first, then its alias."""
    by_seed = {}
    for group in table.groups(variant, size, aliases):
        for row in rows:
            if (row["claim"], row["variant"], row["size"]) == group and row["seed"] in table.seeds:
                by_seed.setdefault(row["seed"], row)
    return [by_seed[s] for s in sorted(by_seed)]


def finished_rows(rows: list[dict], table: Table, variant: str, size: str, aliases: dict) -> tuple[list, int]:
    """(the entry's finished runs, how many of its runs diverged)."""
    runs = entry_rows(rows, table, variant, size, aliases)
    finished = [r for r in runs if not r.get("diverged") and r.get("eval_loss") is not None]
    return finished, len(runs) - len(finished)


def entry(rows: list[dict], table: Table, variant: str, size: str, aliases: dict) -> Entry:
    finished, diverged = finished_rows(rows, table, variant, size, aliases)
    minima = [min([v for _, v in r.get("eval_curve") or [] if v is not None] + [r["eval_loss"]]) for r in finished]
    return Entry([r["eval_loss"] for r in finished], diverged, len(table.seeds), minima, table.reference)


def train_entry(rows: list[dict], table: Table, variant: str, size: str, aliases: dict) -> str:
    """The final training loss of an entry's finished runs (see `final_train_loss`): mean ± std, or pending."""
    finished, _ = finished_rows(rows, table, variant, size, aliases)
    losses = [loss for loss in map(final_train_loss, finished) if loss is not None]
    if not losses:
        return "pending"
    return f"{statistics.fmean(losses):.3f}" + (f" ± {statistics.stdev(losses):.3f}" if len(losses) >= 2 else "")


def render_table(rows: list[dict], table: Table, aliases: dict) -> str:
    if table.train_loss:
        labels = [f"{label}: {kind}" for label, _ in table.columns for kind in ("held-out", "train")]
    else:
        labels = [label for label, _ in table.columns]
    lines = ["| variant | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    for label, variant in table.rows:
        cells = []
        for _, size in table.columns:
            if (variant, size) in table.not_run:
                cells += ["not run"] * (2 if table.train_loss else 1)
                continue
            cells.append(entry(rows, table, variant, size, aliases).render())
            if table.train_loss:
                cells.append(train_entry(rows, table, variant, size, aliases))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def screen_pick(
    rows: list[dict], table: Table, variant: str, sizes: dict[str, str], aliases: dict, fallback: str
) -> str | None:
    """The learning-rate rule of a screening table (one seed; `sizes` maps each learning rate to its column's
    size): the rate of the variant's lowest final eval loss, where a stalled or diverged run never wins; `fallback`
    when every rate stalled or diverged; None while a rate has no run (the screen is not finished)."""
    losses = {}
    for lr, size in sizes.items():
        found = entry(rows, table, variant, size, aliases)
        if found.n == 0:
            return None
        if found.losses and not found.stalled:
            losses[lr] = found.mean
    return min(losses, key=losses.get) if losses else fallback


def curve_panels(rows: list[dict], table: Table, aliases: dict) -> list[list[tuple[str, list[dict]]]]:
    """What `figures.plot_curves` draws: per column of the table, (label, that entry's runs) per row."""
    return [
        [(label, entry_rows(rows, table, variant, size, aliases)) for label, variant in table.rows]
        for _, size in table.columns
    ]


def trend_series(rows: list[dict], trend: Trend, aliases: dict) -> list[tuple[str, list[list[tuple]]]]:
    """Each series of a trend (a table's variant after its baseline): its label and, per column, the final held-out
    loss minus the baseline's of the same seed, as (seed, difference, whether either run stalled) for the seeds both
    have finished; None where the table does not run the variant or the baseline at that column."""
    series = []
    for prefix, table in trend.tables:
        if len(table.columns) != len(trend.xs):
            raise ValueError(
                f"Trend {trend.name}: table {table.name} has {len(table.columns)} columns, xs has {len(trend.xs)}."
            )
        (base_label, base), *others = table.rows
        for label, variant in others:
            per_column = []
            for _, size in table.columns:
                if (variant, size) in table.not_run or (base, size) in table.not_run:
                    per_column.append(None)
                    continue
                baseline = {r["seed"]: r["eval_loss"] for r in finished_rows(rows, table, base, size, aliases)[0]}
                runs = finished_rows(rows, table, variant, size, aliases)[0]
                per_column.append(
                    [
                        (
                            r["seed"],
                            r["eval_loss"] - baseline[r["seed"]],
                            is_stalled(r["eval_loss"], table.reference)
                            or is_stalled(baseline[r["seed"]], table.reference),
                        )
                        for r in runs
                        if r["seed"] in baseline
                    ]
                )
            series.append((f"{prefix}{label} minus {base_label}", per_column))
    return series


def render_trend_table(series: list, trend: Trend) -> str:
    """The trend's numbers: per series and x, the mean ± std of the paired differences, each seed's, and how many
    pairs hold a stalled run (a difference in leaving the unigram plateau, not in the trained models)."""
    lines = [
        "| paired difference | " + " | ".join(f"{trend.xlabel} {x}".strip() for x in trend.xs) + " |",
        "|---|" + "---:|" * len(trend.xs),
    ]
    for label, per_column in series:
        cells = []
        for pairs in per_column:
            if pairs is None:
                cells.append("not run")
                continue
            if not pairs:
                cells.append("pending")
                continue
            values = [d for _, d, _ in pairs]
            spread = f" ± {statistics.stdev(values):.3f}" if len(values) >= 2 else ""
            each = ", ".join(f"{d:+.3f}" for _, d, _ in pairs)
            stalls = sum(stall for _, _, stall in pairs)
            seeds = ("seeds " if len(pairs) > 1 else "seed ") + ", ".join(str(s) for s, _, _ in pairs)
            cells.append(
                f"{statistics.fmean(values):+.3f}{spread} ({seeds}: "
                f"{each}" + (f"; {stalls} with a stalled run" if stalls else "") + ")"
            )
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_trend(rows: list[dict], trend: Trend, aliases: dict, figures: Path | None) -> str:
    """The generated block of a trend: its title, the table of its numbers, its figure (or why there is none)."""
    series = trend_series(rows, trend, aliases)
    parts = [f"**{trend.title}**", "", render_trend_table(series, trend)]
    if figures is not None:
        image = figures / f"{trend.name}.png"
        parts += [
            "",
            f"![{trend.title}]({FIGURES}/{image.name})" if plot_trend(series, trend, image) else "Figure: pending.",
        ]
    return "\n".join(parts)


def load_claims(names=CLAIMS) -> list:
    return [importlib.import_module(name) for name in names]


def cell_ids(claims) -> set[str]:
    return {c.id for claim in claims for c in claim.CELLS}


def table_patterns(table: Table, aliases: dict, cells=()) -> dict[str, list[str]]:
    """{claim script: --only globs} that select every cell of a table, including the cells it reads through an
    alias (a run another group or claim already holds), and no other cell of `cells` (its claim's cells): a column
    whose size other variants of the claim also have names its rows' variants, else every variant ("*"); one whose
    cells have seeds the table leaves out names the table's seeds."""
    patterns: dict[str, list[str]] = {}
    for _, size in table.columns:
        # a group that is an alias has no cells of its own (dedupe dropped them, or it names the cells elsewhere)
        own = [variant for _, variant in table.rows if (table.claim, variant, size) not in aliases]
        column = [c for c in cells if c.claim == table.claim and c.size == size]
        others = {c.variant for c in column} - {variant for _, variant in table.rows}
        seeds = ["*"] if {c.seed for c in column} <= set(table.seeds) else [f"seed{s}" for s in table.seeds]
        for variant in own if others else ["*"] if own else []:
            patterns.setdefault(table.claim, []).extend(f"{table.claim}/{variant}/{size}/{s}" for s in seeds)
        for _, variant in table.rows:
            for claim, other_variant, other_size in table.groups(variant, size, aliases)[1:]:
                patterns.setdefault(claim, []).append(f"{claim}/{other_variant}/{other_size}/*")
    return {claim: list(dict.fromkeys(globs)) for claim, globs in patterns.items()}


def render_block(rows: list[dict], table: Table, aliases: dict, figures: Path | None, cells=()) -> str:
    """The generated block of one table: the table, its note, the curves (or why there are none), its command (see
    `table_patterns` for `cells`)."""
    parts = [f"**{table.title}**", "", render_table(rows, table, aliases)]
    if table.paired:
        pairs = Trend(table.name, table.title, (("", table),), tuple(label for label, _ in table.columns), "")
        parts += ["", render_trend_table(trend_series(rows, pairs, aliases), pairs)]
    if table.note:
        parts += ["", table.note]
    if table.screen:
        sizes = dict(zip(SCREEN_LRS, (size for _, size in table.columns)))
        picks = [
            (label, screen_pick(rows, table, variant, sizes, aliases, PENDING_LR)) for label, variant in table.rows
        ]
        parts += [
            "",
            "The rule's pick: "
            + "; ".join(f"{label} {'pending' if lr is None else f'lr {lr}'}" for label, lr in picks)
            + ".",
        ]
    parts += [
        "",
        "Run its cells (those already in the results file are skipped): "
        + ", ".join(
            f"`nice -n 19 python experiments/{claim}.py "
            + " ".join(f"--only '{p}'" if i == 0 else f"'{p}'" for i, p in enumerate(patterns))
            + "`"
            for claim, patterns in table_patterns(table, aliases, cells).items()
        ),
    ]
    if figures is not None:
        image = figures / f"{table.name}.png"
        if plot_curves(curve_panels(rows, table, aliases), table, image):
            parts += ["", f"![eval curves: {table.title}]({FIGURES}/{image.name})"]
        else:
            parts += ["", "Eval curves: pending."]
    return "\n".join(parts)


def render_summary(rows: list[dict], claims) -> str:
    defined = cell_ids(claims)
    done = [r for r in rows if r["id"] in defined]
    done_ids = {r["id"] for r in done}
    pending = [c for claim in claims for c in claim.CELLS if c.id not in done_ids]
    cpu = [r["cpu_seconds"] for r in done if r.get("cpu_seconds")]
    lines = [
        f"Cells defined: {len(defined)} "
        f"({', '.join(f'{m.CLAIM} {len(m.CELLS)}' for m in claims)}); run: {len(done_ids)}; "
        f"pending: {len(pending)}."
    ]
    if cpu:
        mean = statistics.fmean(cpu)
        line = f"CPU time so far: {sum(cpu) / 3600:.2f} h (mean {mean / 60:.1f} min per cell, one thread)"
        if pending:
            estimate, older = estimate_cpu_seconds(pending, done)
            line += (
                f"; the pending cells at the CPU time per step of the cells of the same model so far, times "
                f"their steps: about {estimate / 3600:.1f} h of CPU"
                + (
                    f" ({older} of them costed from rows made before sparse prediction, an overestimate, or, "
                    "with no row of their own model yet, at the mean of every row: rough)"
                    if older
                    else ""
                )
            )
        lines.append(line + ".")
    return "\n".join(lines)


def block_pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- BEGIN {re.escape(name)} -->\n).*?(<!-- END {re.escape(name)} -->)", re.DOTALL)


def replace_block(page: str, name: str, body: str) -> str:
    pattern = block_pattern(name)
    if not pattern.search(page):
        raise ValueError(f"The research pages have no <!-- BEGIN {name} --> ... <!-- END {name} --> block.")
    return pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), page)


@dataclass
class ReportArguments:
    results: str = field(default=str(RESULTS), metadata={"help": "The JSON-lines results file."})
    page: list[str] = field(
        default_factory=lambda: [str(p) for p in PAGES],
        metadata={
            "help": "The pages whose generated blocks are rewritten (one folder); each block on the page with its markers."
        },
    )
    no_plots: bool = field(default=False, metadata={"help": "Tables only (no PNGs)."})


def render_pages(pages: list[str], rows: list[dict], claims, figures: Path | None) -> list[str]:
    """The pages with every block rendered on the one page that holds its markers (none, or two, is an error)."""
    pages = list(pages)

    def put(name: str, render) -> None:
        holders = [i for i, page in enumerate(pages) if block_pattern(name).search(page)]
        if len(holders) > 1:
            raise ValueError(f"<!-- BEGIN {name} --> is on {len(holders)} pages; a block belongs on one.")
        i = holders[0] if holders else 0  # none: replace_block says which block is missing
        pages[i] = replace_block(pages[i], name, render())

    for claim in claims:
        aliases = getattr(claim, "ALIASES", {})
        for table in claim.TABLES:
            put(table.name, lambda: render_block(rows, table, aliases, figures, claim.CELLS))
        for trend in getattr(claim, "TRENDS", ()):
            put(trend.name, lambda: render_trend(rows, trend, aliases, figures))
    put("summary", lambda: render_summary(rows, claims))
    return pages


def render_page(page: str, rows: list[dict], claims, figures: Path | None) -> str:
    (page,) = render_pages([page], rows, claims, figures)
    return page


def main(argv=None) -> list[str]:
    from transformers import HfArgumentParser

    (args,) = HfArgumentParser(ReportArguments).parse_args_into_dataclasses(argv)
    paths = [Path(p) for p in args.page]
    for page_path in paths:
        if not page_path.is_file():
            raise FileNotFoundError(f"{page_path}: no such page (it holds the hand-written text around the tables).")
    if len({p.resolve().parent for p in paths}) > 1:
        raise ValueError(f"{args.page}: the pages share one folder (their figures are linked as {FIGURES}/*.png).")
    rows = load_results(args.results)
    bad = [r.get("id") for r in rows if r.get("eval_loss") is not None and not math.isfinite(r["eval_loss"])]
    if bad:
        raise ValueError(f"Rows with a non-finite eval loss (should be null and diverged): {bad}")
    figures = None if args.no_plots else paths[0].parent / FIGURES
    pages = render_pages([p.read_text() for p in paths], rows, load_claims(), figures)
    for page_path, page in zip(paths, pages):
        page_path.write_text(page)
    print(f"{', '.join(map(str, paths))}: {len(rows)} rows rendered.")
    return pages


if __name__ == "__main__":
    main()
