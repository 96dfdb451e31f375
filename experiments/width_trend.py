"""Claims (a) and (c) across width: does the sign of the long runs' effects change with the model's width?

Past the plateau at width 256 (4 layers) talking heads is behind dot product in every seed and the Random +
dot-product mixture ahead of it (talking_heads.py step 7, synthesizer.py step 2). The papers' gains are at T5-base
width, so this claim re-runs the same long contrasts at width 128 and 384, with the committed tokenizer:

  width 128: 2 layers, FFN 512      (BERT-Tiny's shape, Turc et al. 2019)
  width 256: 4 layers, FFN 1024     (bert-mini: the rows of talking_heads.py and synthesizer.py, read from there)
  width 384: 6 layers, FFN 1536

Every width has 64 units of width per layer and an FFN of 4x the width, so width and depth grow together, as in
the miniature BERTs and in the papers' models; width 128 takes 2 layers, not 4, for that reason (4 layers at width
128 would change the depth-to-width ratio at one end of the trend only), and it is the cheapest point. The model
is bert-mini with its width, depth and FFN overridden (`shape`): nothing else changes with the width.

Variants, each as at width 256 (the same config fields, read from the claim scripts):
  (a) dot product and talking heads (both maps, the paper's init) at h = 16: head size 8 at width 128, 16 at 256,
      24 at 384;
  (c) dot product and the Random + dot-product Synthesizer mixture at 4 heads: head size 32, 64 and 96 (the width
      256 point of (c) is 4 heads of 64, and its mixture is paired with the dot product of the same shape).

1. learning-rate screens at widths 128 and 384 (one seed, 400 steps, lr 5e-4, 1e-3 and 2e-3; width 128 first, the
   cheaper), every variant: a learning rate screened at width 256 need not be the best at another width. Each
   variant's long learning rate follows cells.SCREEN_RULE (written before any of these screens ran): SCREEN_PICK
   records it per width and heads (None while the screen has not run: the long cells are then defined at the
   placeholder cells.PENDING_LR and are NOT to be run; tests/repository/test_experiments.py fails while a finished screen's
   pick is not written down).
2. the long cells: 1600 steps (3.6 passes), evaluated every 200 steps, three seeds, seed-major (width 128's cells
   of a seed before width 384's). Held-out and training loss are both reported.
3. the figure (TRENDS, rendered by report.py): each variant's final held-out loss minus dot product's, paired by
   seed, against width, every seed's point beside the mean.
4. a control outside the rule (CONTROL_LR, after every cell of the rule): dot product at width 384 at talking
   heads' rate, seed 0, to tell the rate from the attention in (a) at that width.

    OMP_NUM_THREADS=1 nice -n 19 python experiments/width_trend.py --only 'width_trend/*/screen-*'
    python experiments/width_trend.py --list
"""

import synthesizer
import talking_heads
from cells import (
    LONG_TRAINING,
    SCREEN_LRS,
    SCREEN_RULE,
    TRAINING,
    Table,
    Trend,
    cell,
    dedupe,
    long_lrs,
    long_note,
)
from runner import main

CLAIM = "width_trend"
SEEDS = (0, 1, 2)
WIDTHS = (128, 256, 384)
NEW_WIDTHS = (128, 384)  # 256 is done: its rows are read from the claim scripts
LAYERS = {128: 2, 256: 4, 384: 6}  # 64 units of width per layer
PRESET = "bert-mini-dot-product"
HEADS = {"a": 16, "c": 4}
# each claim's variants, with the config fields they have at width 256, and the long rows they have there
# ((claim, variant, size), read through an alias) at the learning rate they took there
VARIANTS = {
    "a": {"dot-product": talking_heads.DOT, "talking-heads": talking_heads.SWEEP_TH},
    "c": {
        "dot-product": synthesizer.LONG_FIELDS["dot-product"],
        "mixture-random-dot": synthesizer.LONG_FIELDS["mixture-random-dot"],
    },
}
LR_256 = {
    "a": {v: talking_heads.LONG_LR[v] for v in VARIANTS["a"]},
    "c": {v: synthesizer.LONG_LR[v] for v in VARIANTS["c"]},
}
ROWS_256 = {
    "a": {v: ("talking_heads", v, talking_heads.long_size(16, lr)) for v, lr in LR_256["a"].items()},
    "c": {v: ("synthesizer", v, synthesizer.long_size(lr)) for v, lr in LR_256["c"].items()},
}

# What cells.SCREEN_RULE picked from each screen, by (width, claim); None: the screen has not run.
SCREEN_PICK = {
    (128, "a"): {"dot-product": "2e-3", "talking-heads": "1e-3"},  # the screen, 2026-12-03
    (128, "c"): {"dot-product": "2e-3", "mixture-random-dot": "1e-3"},  # the screen, 2026-12-03
    (384, "a"): {"dot-product": "1e-3", "talking-heads": "5e-4"},  # the screen, 2026-12-03 (dot product: all stall)
    (384, "c"): {"dot-product": "5e-4", "mixture-random-dot": "5e-4"},  # the screen, 2026-12-03
}
LONG_STEPS = LONG_TRAINING["max_steps"]
LONG_LR = {key: long_lrs({}, picks) for key, picks in SCREEN_PICK.items()}


def shape(width: int, claim: str) -> dict:
    """bert-mini at `width`: LAYERS[width] layers, FFN 4x the width, HEADS[claim] heads of width // heads."""
    return {
        "hidden_size": width,
        "num_hidden_layers": LAYERS[width],
        "intermediate_size": 4 * width,
        "num_attention_heads": HEADS[claim],
    }


def screen_size(width: int, claim: str, lr: str) -> str:
    return f"screen-w{width}-h{HEADS[claim]}-lr{lr}"


def long_size(width: int, claim: str, lr: str | None = None) -> str:
    """A long cell's size names its learning rate (a new rate is a new cell); without one, the table column that
    reads each variant's cells through an alias."""
    return f"w{width}-h{HEADS[claim]}" + ("" if lr is None else f"-lr{lr}") + f"-steps{LONG_STEPS}"


def committed_cells() -> list:
    """The screens (width 128 first), then the long cells seed-major."""
    out = []
    for width in NEW_WIDTHS:
        for lr in SCREEN_LRS:
            for claim, variants in VARIANTS.items():
                for variant, fields in variants.items():
                    out.append(
                        cell(
                            CLAIM,
                            variant,
                            screen_size(width, claim, lr),
                            0,
                            PRESET,
                            {**shape(width, claim), **fields},
                            learning_rate=lr,
                        )
                    )
    for seed in SEEDS:
        for width in NEW_WIDTHS:
            for claim, variants in VARIANTS.items():
                for variant, fields in variants.items():
                    lr = LONG_LR[(width, claim)][variant]
                    out.append(
                        cell(
                            CLAIM,
                            variant,
                            long_size(width, claim, lr),
                            seed,
                            PRESET,
                            {**shape(width, claim), **fields},
                            learning_rate=lr,
                            **LONG_TRAINING,
                        )
                    )
    return out


# A control outside the rule, added after (a)'s first pair at width 384 and run after every cell of the rule: dot
# product at width 384, h = 16, at talking heads' rate there (5e-4) instead of the rule's fallback (1e-3, picked when
# every screened rate stalled), seed 0. Beside that pair it tells the rate from the attention. It is not the rule's
# pick: the long table and the figure keep the rule's cells, and `control_table` shows the two rates side by side.
CONTROL_LR = "5e-4"


def control_cells() -> list:
    return [
        cell(
            CLAIM,
            "dot-product",
            long_size(384, "a", CONTROL_LR),
            0,
            PRESET,
            {**shape(384, "a"), **VARIANTS["a"]["dot-product"]},
            learning_rate=CONTROL_LR,
            **LONG_TRAINING,
        )
    ]


CELLS, COMMITTED_ALIASES = dedupe(committed_cells() + control_cells())
LONG_ALIASES = {
    (CLAIM, v, long_size(w, claim)): (CLAIM, v, long_size(w, claim, lr))
    for (w, claim), lrs in LONG_LR.items()
    for v, lr in lrs.items()
}
ALIASES_256 = {
    (CLAIM, v, long_size(256, claim)): group for claim, rows in ROWS_256.items() for v, group in rows.items()
}
ALIASES = {**COMMITTED_ALIASES, **LONG_ALIASES, **ALIASES_256}

LABELS = {
    "dot-product": "dot product",
    "talking-heads": "talking heads",
    "mixture-random-dot": "Mixture: Random + dot product",
}


def screen_table(width: int, claim: str) -> Table:
    h = HEADS[claim]
    return Table(
        f"width-screen-{claim}-w{width}",
        f"Learning-rate screen of ({claim}) at width {width} "
        f"({LAYERS[width]} layers, {h} heads of {width // h}; one seed, {TRAINING['max_steps']} steps, "
        "committed tokenizer; eval MLM loss)",
        CLAIM,
        tuple((LABELS[v], v) for v in VARIANTS[claim]),
        tuple((f"lr {lr}", screen_size(width, claim, lr)) for lr in SCREEN_LRS),
        seeds=(0,),
        note=f"A screen with one seed: it picks each variant's long learning rate at this width, {SCREEN_RULE}.",
        screen=True,
    )


def long_table(claim: str) -> Table:
    h = HEADS[claim]
    fixed = {f"{v} at width 256": lr for v, lr in LR_256[claim].items()}
    picked = {f"{v} at width {w}": SCREEN_PICK[(w, claim)][v] for w in NEW_WIDTHS for v in VARIANTS[claim]}
    source = "talking_heads.py, h = 16" if claim == "a" else "synthesizer.py, 4 heads of 64"
    return Table(
        f"width-long-{claim}",
        f"({claim}) across width, {h} heads (head size "
        f"{' / '.join(str(w // h) for w in WIDTHS)}), {LONG_STEPS} steps (MLM loss)",
        CLAIM,
        tuple((LABELS[v], v) for v in VARIANTS[claim]),
        tuple((f"width {w} ({LAYERS[w]} layers)", long_size(w, claim)) for w in WIDTHS),
        SEEDS,
        note=long_note(fixed, picked) + f" Width 256: the rows of the long table of {source}.",
        train_loss=True,
    )


def control_table() -> Table:
    rule = LONG_LR[(384, "a")]["dot-product"]
    return Table(
        "width-control-a-w384",
        f"Control outside the rule: dot product at width 384 ({LAYERS[384]} layers, "
        f"{HEADS['a']} heads of {384 // HEADS['a']}) at two learning rates, {LONG_STEPS} steps (MLM loss)",
        CLAIM,
        ((LABELS["dot-product"], "dot-product"),),
        (
            (f"lr {rule} (the rule's fallback)", long_size(384, "a", rule)),
            (f"lr {CONTROL_LR} (talking heads' rate)", long_size(384, "a", CONTROL_LR)),
        ),
        seeds=(0,),
        note=f"One seed, the settings of the long table of (a) but the learning rate. Talking heads at lr "
        f"{LONG_LR[(384, 'a')]['talking-heads']}, seed 0, is in that table.",
        train_loss=True,
    )


TABLES = [
    *(screen_table(w, claim) for w in NEW_WIDTHS for claim in VARIANTS),
    *map(long_table, VARIANTS),
    control_table(),
]
# The page's one figure: each variant's paired difference to dot product at the end of the long runs, against width.
TRENDS = [
    Trend(
        "width-trend",
        f"Final held-out loss minus dot product's (paired by seed) against width, "
        f"{LONG_STEPS} steps: (a) at 16 heads, (c) at 4 heads",
        tuple((f"({t.name[-1]}) ", t) for t in TABLES if t.name.startswith("width-long-")),
        WIDTHS,
        "width",
    )
]

if __name__ == "__main__":
    main(CELLS, "experiments/width_trend.py")
