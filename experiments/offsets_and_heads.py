"""Section (f): two questions that section (e)'s answers raise, at its 6400-step schedule.

1. Does talking heads' gain grow with the head count? At 1600 steps talking heads was behind dot product at h = 16
   (+0.015) and further behind at h = 32 (+0.030); at 6400 steps the h = 16 deficit closed (-0.005). These cells run
   claim (a)'s 6400-step pair (width 256, paper init, lr 1e-3 both) at h = 32 (32 heads of 8), three seeds, paired
   by seed, evaluated every 400 steps.

    nice -n 19 python experiments/offsets_and_heads.py --only 'offsets_and_heads/*/h32-*/seed0'
    python experiments/offsets_and_heads.py --list
"""

from cells import Table, cell
from length import CONTRASTS, SEEDS, STEPS, TRAINING_6400, size
from runner import main

CLAIM = "offsets_and_heads"
HEADS = 32  # claim (a)'s pair at twice the h of its 6400-step cells


def cells() -> list:
    """Seed-major: every variant gets a first seed before any gets a second."""
    _, variants, lrs = CONTRASTS["a"]
    return [
        cell(
            CLAIM,
            variant,
            size(HEADS, lrs[variant]),
            seed,
            "bert-mini-dot-product",
            {"num_attention_heads": HEADS, **fields},
            learning_rate=lrs[variant],
            **TRAINING_6400,
        )
        for seed in SEEDS
        for variant, fields in variants.items()
    ]


CELLS = cells()
ALIASES = {}  # every table column names its cells' own size
TABLES = [
    Table(
        "heads-32",
        f"Talking heads vs dot product at h = {HEADS}, {STEPS} steps (MLM loss)",
        CLAIM,
        (("dot product", "dot-product"), ("talking heads", "talking-heads")),
        ((f"h = {HEADS}", size(HEADS, "1e-3")),),
        SEEDS,
        train_loss=True,
        paired=True,
    ),
]

if __name__ == "__main__":
    main(CELLS, "experiments/offsets_and_heads.py")
