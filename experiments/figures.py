"""The research pages' figures (docs/research/*.png), drawn by experiments/report.py: a table's eval curves and a
trend's paired differences. matplotlib is imported when a figure is drawn (`report.py --no_plots` needs none)."""

import statistics
import textwrap
from pathlib import Path

from cells import Table, Trend
from unigram import UNIGRAM_LOSS


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def paired_differences(baseline: list[dict], runs: list[dict]) -> dict[int, list[float]]:
    """Each eval step's held-out loss of `runs` minus that of the `baseline` run of the same seed (the same data
    order and masks), for the seeds both have: {step: [difference per seed]}, the steps every pair shares."""
    base = {r["seed"]: dict(p for p in r["eval_curve"] if p[1] is not None) for r in baseline}
    pairs = [
        (dict(p for p in r["eval_curve"] if p[1] is not None), base[r["seed"]]) for r in runs if r["seed"] in base
    ]
    if not pairs:
        return {}
    steps = sorted(set.intersection(*(set(curve) & set(ref) for curve, ref in pairs)))
    return {step: [curve[step] - ref[step] for curve, ref in pairs] for step in steps}


def _curves_panel(ax, title: str, panel: list, table: Table, reference: float) -> None:
    """One column's curves: per variant each seed's eval (and, for long runs, training) curve thin, the mean thick."""
    for index, (label, runs) in enumerate(panel):
        colour = f"C{index}"
        for key, style, name in (("eval_curve", "-", label), ("train_curve", ":", None))[: 1 + table.train_loss]:
            curves = [[(s, v) for s, v in r[key] if v is not None] for r in runs]
            for curve in curves:
                if curve:
                    ax.plot(*zip(*curve), color=colour, alpha=0.3, linewidth=0.8, linestyle=style)
            steps = sorted(set.intersection(*({s for s, _ in c} for c in curves))) if curves else []
            if steps:
                mean = [statistics.fmean(dict(c)[s] for c in curves) for s in steps]
                ax.plot(
                    steps,
                    mean,
                    color=colour,
                    linewidth=2 if name else 1.2,
                    linestyle=style,
                    label=f"{name} (n={len(curves)})" if name else None,
                )
    ax.axhline(reference, color="grey", linestyle="--", linewidth=0.8, label=f"unigram {reference}")
    if table.train_loss:  # the training curve starts near ln(vocabulary size): show from the plateau down
        ax.set_ylim(top=reference + 0.5)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _differences_panel(ax, title: str, panel: list, baseline_label: str) -> None:
    """One column's paired differences: each variant's held-out loss minus the baseline's (the panel's first row),
    thin per seed, thick for the mean."""
    (_, baseline), *others = panel
    for index, (label, runs) in enumerate(others, start=1):
        differences = paired_differences(baseline, runs)
        if not differences:
            continue
        steps = list(differences)
        pairs = len(differences[steps[0]])
        for seed_index in range(pairs):
            ax.plot(steps, [differences[s][seed_index] for s in steps], color=f"C{index}", alpha=0.3, linewidth=0.8)
        ax.plot(
            steps,
            [statistics.fmean(differences[s]) for s in steps],
            color=f"C{index}",
            linewidth=2,
            marker=".",
            label=f"{label} (n={pairs} pair{'s' * (pairs > 1)})",
        )
    ax.axhline(0, color="C0", linewidth=1)
    ax.set_title(textwrap.fill(f"{title}: minus {baseline_label}, paired by seed", 55), fontsize=9)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def plot_curves(panels: list[list[tuple[str, list[dict]]]], table: Table, path: Path) -> bool:
    """One panel per column, one colour per variant: each seed's eval curve thin, their mean thick (`panels`: per
    column of `table`, (label, runs) per row, as `report.curve_panels` gives them). A table with `train_loss` (the long
    runs, whose differences at the end are small beside the curves' range) has a second row of panels: each variant's
    held-out loss minus the first row's (the baseline), paired by seed, thin per seed and thick for the mean. False
    (and no file) when the table has no runs yet."""
    if not any(runs for panel in panels for _, runs in panel):
        return False
    plt = pyplot()
    grid = 2 if table.train_loss else 1
    reference = UNIGRAM_LOSS if table.reference is None else table.reference
    width = max(4.2 * len(panels), 6.4)  # one panel of four variants' legends needs more than 4.2 inches
    fig, axes = plt.subplots(grid, len(panels), figsize=(width, 3.4 * grid), squeeze=False, sharey="row")
    for ax, (title, _), panel in zip(axes[0], table.columns, panels):
        _curves_panel(ax, title, panel, table, reference)
    axes[0][0].set_ylabel(
        f"{table.loss_name}: held-out, training dotted" if table.train_loss else f"eval {table.loss_name}"
    )
    if grid == 2:
        for ax, (title, _), panel in zip(axes[1], table.columns, panels):
            _differences_panel(ax, title, panel, table.rows[0][0])
        axes[1][0].set_ylabel("held-out loss difference (below 0: ahead)")
    fig.suptitle(textwrap.fill(table.title, width=int(13 * width)), fontsize=9)  # within the figure
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def plot_trend(series: list, trend: Trend, path: Path) -> bool:
    """One panel: each series' paired differences against x, a small dot per seed (a cross where either run
    stalled) and the mean joined by a line (x offset a little per series, so that the seeds' points stay apart).
    False (and no file) with no pair yet."""
    if not any(pairs for _, per_column in series for pairs in per_column):
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    step = min(b - a for a, b in zip(trend.xs, trend.xs[1:])) if len(trend.xs) > 1 else 1
    for index, (label, per_column) in enumerate(series):
        colour, offset = f"C{index + 1}", (index - (len(series) - 1) / 2) * step * 0.04
        means = [
            (x + offset, statistics.fmean(d for _, d, _ in pairs)) for x, pairs in zip(trend.xs, per_column) if pairs
        ]
        if not means:
            continue
        for stall, marker in ((False, "o"), (True, "x")):
            seeds = [
                (x + offset, d) for x, pairs in zip(trend.xs, per_column) for _, d, s in pairs or () if s == stall
            ]
            if seeds:
                ax.scatter(*zip(*seeds), color=colour, s=14 if marker == "o" else 30, alpha=0.6, marker=marker)
        ax.plot(
            *zip(*means),
            color=colour,
            linewidth=2,
            marker="o",
            label=f"{label} (mean; dots: each seed, x: a run stalled)",
        )
    ax.axhline(0, color="grey", linewidth=1)
    ax.set_xticks(list(trend.xs))
    ax.set_xlabel(trend.xlabel)
    ax.set_ylabel("final held-out loss difference (below 0: ahead)", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16))  # below: never over a point
    ax.set_title(textwrap.fill(trend.title, 80), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
