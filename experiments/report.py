"""Render the results file into docs/research.md: every claim's tables (mean ± std of the final eval MLM loss over
the seeds, with the number of seeds; "pending" where no run is in yet) and eval-curve PNGs (docs/research/*.png).

    python experiments/report.py            # after any cells have run; rewrites only the generated blocks

docs/research.md is written by hand except between the markers `<!-- BEGIN name -->` and `<!-- END name -->`, where
`name` is a table's name (its table, curves and command) or `summary` (what has run, what is pending, CPU time).
"""

import importlib
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runner import RESULTS, ROOT, Table, load_results  # noqa: E402
from unigram import UNIGRAM_LOSS  # noqa: E402

CLAIMS = ("talking_heads", "single_head", "synthesizer")
PAGE = ROOT / "docs" / "research.md"
FIGURES = "research"  # docs/research/<table>.png, linked relative to the page


# A finished run whose final eval loss is within STALL_MARGIN of the unigram reference point (experiments/unigram.py)
# never got past token frequencies: every run passes through that plateau early (eval loss about 5.9 by step 100),
# and a run that has not left it by step 400 is counted as stalled, so that a mean is never read without it.
STALL_MARGIN = 0.05


@dataclass
class Entry:
    """The runs of one table entry: final eval losses of the finished runs, and how many diverged."""

    losses: list[float]
    diverged: int
    expected: int

    @property
    def stalled(self) -> int:
        return sum(loss >= UNIGRAM_LOSS - STALL_MARGIN for loss in self.losses)

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
        notes = [of] + [f"{count} {what}" for count, what in ((self.stalled, "stalled"), (self.diverged, "diverged"))
                        if count]
        return f"{value} ({', '.join(notes)})"


def entry_rows(rows: list[dict], table: Table, variant: str, size: str, aliases: dict) -> list[dict]:
    """The rows of one entry: one per seed of the table, from its own group first, then its alias."""
    by_seed = {}
    for group in table.groups(variant, size, aliases):
        for row in rows:
            if (row["claim"], row["variant"], row["size"]) == group and row["seed"] in table.seeds:
                by_seed.setdefault(row["seed"], row)
    return [by_seed[s] for s in sorted(by_seed)]


def entry(rows: list[dict], table: Table, variant: str, size: str, aliases: dict) -> Entry:
    chosen = entry_rows(rows, table, variant, size, aliases)
    finished = [r["eval_loss"] for r in chosen if not r.get("diverged") and r.get("eval_loss") is not None]
    return Entry(finished, len(chosen) - len(finished), len(table.seeds))


def render_table(rows: list[dict], table: Table, aliases: dict) -> str:
    header = "| variant | " + " | ".join(label for label, _ in table.columns) + " |"
    lines = [header, "|---|" + "---:|" * len(table.columns)]
    for label, variant in table.rows:
        cells = [entry(rows, table, variant, size, aliases).render() for _, size in table.columns]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_curves(rows: list[dict], table: Table, aliases: dict, path: Path) -> bool:
    """One panel per column, one colour per variant: each seed's eval curve thin, their mean thick. False (and no
    file) when the table has no runs yet."""
    panels = [[(label, entry_rows(rows, table, variant, size, aliases)) for label, variant in table.rows]
              for _, size in table.columns]
    if not any(runs for panel in panels for _, runs in panel):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False, sharey=True)
    for ax, (title, _), panel in zip(axes[0], table.columns, panels):
        for index, (label, runs) in enumerate(panel):
            colour = f"C{index}"
            curves = [[(s, v) for s, v in r["eval_curve"] if v is not None] for r in runs]
            for curve in curves:
                if curve:
                    ax.plot(*zip(*curve), color=colour, alpha=0.3, linewidth=0.8)
            steps = sorted(set.intersection(*(set(s for s, _ in c) for c in curves))) if curves else []
            if steps:
                mean = [statistics.fmean(dict(c)[s] for c in curves) for s in steps]
                ax.plot(steps, mean, color=colour, linewidth=2, label=f"{label} (n={len(curves)})")
        ax.axhline(UNIGRAM_LOSS, color="grey", linestyle="--", linewidth=0.8, label=f"unigram {UNIGRAM_LOSS}")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("eval MLM loss")
    fig.suptitle(table.title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def load_claims(names=CLAIMS) -> list:
    return [importlib.import_module(name) for name in names]


def cell_ids(claims) -> set[str]:
    return {c.id for claim in claims for c in claim.CELLS}


def table_patterns(table: Table, aliases: dict) -> dict[str, list[str]]:
    """{claim script: --only globs} that select every cell of a table, including the cells it reads through an
    alias (a run another group or claim already holds)."""
    patterns: dict[str, list[str]] = {}
    for _, size in table.columns:
        patterns.setdefault(table.claim, []).append(f"{table.claim}/*/{size}/*")
        for _, variant in table.rows:
            for claim, other_variant, other_size in table.groups(variant, size, aliases)[1:]:
                patterns.setdefault(claim, []).append(f"{claim}/{other_variant}/{other_size}/*")
    return {claim: list(dict.fromkeys(globs)) for claim, globs in patterns.items()}


def render_block(rows: list[dict], table: Table, aliases: dict, figures: Path | None) -> str:
    """The generated block of one table: the table, its note, the curves (or why there are none), its command."""
    parts = [f"**{table.title}**", "", render_table(rows, table, aliases)]
    if table.note:
        parts += ["", table.note]
    parts += ["", "Run its cells (those already in the results file are skipped): " + ", ".join(
        f"`nice -n 19 python experiments/{claim}.py " + " ".join(f"--only '{p}'" if i == 0 else f"'{p}'"
                                                                 for i, p in enumerate(patterns)) + "`"
        for claim, patterns in table_patterns(table, aliases).items())]
    if figures is not None:
        image = figures / f"{table.name}.png"
        if plot_curves(rows, table, aliases, image):
            parts += ["", f"![eval curves: {table.title}]({FIGURES}/{image.name})"]
        else:
            parts += ["", "Eval curves: pending."]
    return "\n".join(parts)


def render_summary(rows: list[dict], claims) -> str:
    defined = cell_ids(claims)
    done = [r for r in rows if r["id"] in defined]
    pending = len(defined) - len({r["id"] for r in done})
    cpu = [r["cpu_seconds"] for r in done if r.get("cpu_seconds")]
    lines = [f"Cells defined: {len(defined)} "
             f"({', '.join(f'{m.CLAIM} {len(m.CELLS)}' for m in claims)}); run: {len({r['id'] for r in done})}; "
             f"pending: {pending}."]
    if cpu:
        mean = statistics.fmean(cpu)
        lines.append(f"CPU time so far: {sum(cpu) / 3600:.2f} h (mean {mean / 60:.1f} min per cell, one thread); "
                     f"the pending cells at that mean: about {pending * mean / 3600:.1f} h of CPU.")
    return "\n".join(lines)


def replace_block(page: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- BEGIN {re.escape(name)} -->\n).*?(<!-- END {re.escape(name)} -->)", re.S)
    if not pattern.search(page):
        raise ValueError(f"docs/research.md has no <!-- BEGIN {name} --> ... <!-- END {name} --> block.")
    return pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), page)


@dataclass
class ReportArguments:
    results: str = field(default=str(RESULTS), metadata={"help": "The JSON-lines results file."})
    page: str = field(default=str(PAGE), metadata={"help": "The page whose generated blocks are rewritten."})
    no_plots: bool = field(default=False, metadata={"help": "Tables only (no PNGs)."})


def render_page(page: str, rows: list[dict], claims, figures: Path | None) -> str:
    for claim in claims:
        aliases = getattr(claim, "ALIASES", {})
        for table in claim.TABLES:
            page = replace_block(page, table.name, render_block(rows, table, aliases, figures))
    return replace_block(page, "summary", render_summary(rows, claims))


def main(argv=None) -> str:
    from transformers import HfArgumentParser

    (args,) = HfArgumentParser(ReportArguments).parse_args_into_dataclasses(argv)
    page_path = Path(args.page)
    if not page_path.is_file():
        raise FileNotFoundError(f"{page_path}: no such page (it holds the hand-written text around the tables).")
    rows = load_results(args.results)
    bad = [r.get("id") for r in rows if r.get("eval_loss") is not None and not math.isfinite(r["eval_loss"])]
    if bad:
        raise ValueError(f"Rows with a non-finite eval loss (should be null and diverged): {bad}")
    figures = None if args.no_plots else page_path.parent / FIGURES
    page = render_page(page_path.read_text(), rows, load_claims(), figures)
    page_path.write_text(page)
    print(f"{page_path}: {len(rows)} rows rendered.")
    return page


if __name__ == "__main__":
    main()
