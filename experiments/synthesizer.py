"""Claim (c): Synthesizer (Tay et al. 2020) vs dot-product attention.

The paper: synthetic attention (no query-key interaction) is competitive with dot product: Random is within a small
margin, Dense close; and a mixture of a synthesizer with dot product is at least as good as dot product alone.

Cells (bert-mini: width 256, 4 layers, 4 heads of 64, MLM on the KJV, 128 tokens, batch 16, 400 steps, lr 1e-3;
see cells.TRAINING), three seeds each: Dense, Random (trainable), Factorized Random (rank 8), and the mixture
Random + dot product (learned weights normalised to sum to 1, the paper's form; uniform start). The dot-product
baseline is the same run as claim (a)'s `talking_heads/dot-product/h4-lr1e-3` cells (identical configuration), so
it is read from there, not run twice.

Past the plateau, with the tokenizer committed beside the corpus (rows record its hash): none of these
cells reads the 400-step rows above, which trained with a WordPiece retrained in each process (unrecorded, and
moving a loss by 0.03 to 0.06), so a configuration identical to one of them is run again.
1. learning-rate screen (one seed, 400 steps, lr 5e-4, 1e-3, 2e-3): dot product, Dense, Random and the mixture,
   at 4 heads of 64. Every one inherited lr 1e-3 from claim (a)'s study at h = 16 without a screen at this shape.
2. the long cells: the same four at 1600 steps (3.6 passes), evaluated every 200 steps, three seeds, each at the
   learning rate the screen picks by cells.SCREEN_RULE (written down before the screen ran). Until the screen has
   run, SCREEN_PICK holds None and the long cells are defined at the placeholder lr 1e-3 (cells.PENDING_LR): do
   not run them before it. Held-out and training loss are both reported. Factorized Random is left out (it trailed
   in every seed at 400 steps; the paper offers it to save parameters).

    nice -n 19 python experiments/synthesizer.py --only 'synthesizer/*/h4-lr1e-3/*'
    nice -n 19 python experiments/synthesizer.py --only 'synthesizer/*/screen-*'
"""

from cells import (
    LONG_TRAINING,
    SCREEN_LRS,
    SCREEN_RULE,
    TRAINING,
    Table,
    cell,
    dedupe,
    long_lrs,
    long_note,
)
from runner import main

CLAIM = "synthesizer"
SEEDS = (0, 1, 2)
SIZE = "h4-lr1e-3"
VARIANTS = {
    "dense": dict(synthesizer_components=["dense"]),
    "random": dict(synthesizer_components=["random"]),
    "factorized-random": dict(synthesizer_components=["factorized_random"], synthesizer_factorized_rank=8),
    "mixture-random-dot": dict(synthesizer_components=["dot_product", "random"]),
}
# The baseline: claim (a)'s dot product at h = 4, lr 1e-3 (same preset, overrides and training).
SHORT_ALIASES = {(CLAIM, "dot-product", SIZE): ("talking_heads", "dot-product", SIZE)}
# Past the plateau: SCREEN_PICK holds the rate cells.SCREEN_RULE picked from the screen (None: not yet run; the
# long cells then train at cells.PENDING_LR and are not to be run). tests/repository/test_experiments.py checks it against
# the rule applied to the results file (report.screen_pick).
SCREEN_PICK = {
    "dot-product": "5e-4",
    "dense": "5e-4",
    "random": "1e-3",
    "mixture-random-dot": "1e-3",
}  # the screen, 2026-12-01
LONG_STEPS = LONG_TRAINING["max_steps"]
LONG_LR = long_lrs({}, SCREEN_PICK)
LONG_FIELDS = {
    "dot-product": dict(attention_type="dot_product"),
    **{v: dict(attention_type="synthesizer", **VARIANTS[v]) for v in SCREEN_PICK if v in VARIANTS},
}


def cells() -> list:
    return [
        cell(
            CLAIM,
            variant,
            SIZE,
            seed,
            "bert-mini-dot-product",
            {"num_attention_heads": 4, "attention_type": "synthesizer", **fields},
            learning_rate="1e-3",
        )
        for seed in SEEDS
        for variant, fields in VARIANTS.items()
    ]


def screen_size(lr: str) -> str:
    return f"screen-h4-lr{lr}"


def long_size(lr: str | None = None) -> str:
    """A long cell's size names its learning rate (a new rate is a new cell); without one, the table column that
    reads each variant's cells through an alias."""
    return "h4" + ("" if lr is None else f"-lr{lr}") + f"-steps{LONG_STEPS}"


# The screen's dot product stalled at lr 1e-3 where the 400-step rows (dense prediction, another tokenizer) trained:
# the same cell with the full-vocabulary head tells whether sparse prediction has a part in it.
DENSE_AB = ("dot-product", "1e-3")


def committed_cells() -> list:
    """The screen first (and its dense-prediction twin of one cell), then the long cells seed-major."""
    out = [
        cell(
            CLAIM,
            variant,
            screen_size(lr),
            0,
            "bert-mini-dot-product",
            {"num_attention_heads": 4, **LONG_FIELDS[variant]},
            learning_rate=lr,
        )
        for lr in SCREEN_LRS
        for variant in SCREEN_PICK
    ]
    variant, lr = DENSE_AB
    out.append(
        cell(
            CLAIM,
            variant,
            f"screen-h4-dense-prediction-lr{lr}",
            0,
            "bert-mini-dot-product",
            {"num_attention_heads": 4, **LONG_FIELDS[variant]},
            learning_rate=lr,
            sparse_prediction=False,
        )
    )
    for seed in SEEDS:
        for variant in SCREEN_PICK:
            out.append(
                cell(
                    CLAIM,
                    variant,
                    long_size(LONG_LR[variant]),
                    seed,
                    "bert-mini-dot-product",
                    {"num_attention_heads": 4, **LONG_FIELDS[variant]},
                    learning_rate=LONG_LR[variant],
                    **LONG_TRAINING,
                )
            )
    return out


COMMITTED_CELLS, COMMITTED_ALIASES = dedupe(committed_cells())
CELLS = cells() + COMMITTED_CELLS
ALIASES = {
    **SHORT_ALIASES,
    **COMMITTED_ALIASES,
    **{(CLAIM, v, long_size()): (CLAIM, v, long_size(LONG_LR[v])) for v in SCREEN_PICK},
}
LONG_ROWS = (
    ("dot product", "dot-product"),
    ("Dense", "dense"),
    ("Random", "random"),
    ("Mixture: Random + dot product", "mixture-random-dot"),
)
TABLES = [
    Table(
        "synthesizer",
        "Synthesizer vs dot product, bert-mini (4 x 4 heads of 64), lr 1e-3 (eval MLM loss)",
        CLAIM,
        (
            ("dot product (claim (a)'s h = 4 runs)", "dot-product"),
            ("Dense", "dense"),
            ("Random", "random"),
            ("Factorized Random (rank 8)", "factorized-random"),
            ("Mixture: Random + dot product", "mixture-random-dot"),
        ),
        (("4 heads of 64", SIZE),),
        SEEDS,
    ),
    Table(
        "syn-screen",
        f"Learning-rate screen, bert-mini (4 x 4 heads of 64; one seed, {TRAINING['max_steps']} "
        "steps, committed tokenizer; eval MLM loss)",
        CLAIM,
        LONG_ROWS,
        tuple((f"lr {lr}", screen_size(lr)) for lr in SCREEN_LRS),
        seeds=(0,),
        note=f"A screen with one seed: it picks each variant's long learning rate, {SCREEN_RULE}.",
        screen=True,
    ),
    Table(
        "syn-dense-ab",
        f"Sparse vs dense prediction on one stalled screen cell, bert-mini (4 x 4 heads of 64), "
        f"lr {DENSE_AB[1]}, {TRAINING['max_steps']} steps, seed 0 (eval MLM loss)",
        CLAIM,
        ((LONG_ROWS[0][0], DENSE_AB[0]),),
        (
            ("sparse prediction (the screen)", screen_size(DENSE_AB[1])),
            ("dense prediction", f"screen-h4-dense-prediction-lr{DENSE_AB[1]}"),
        ),
        seeds=(0,),
        note="The same cell (seed, masks, data order, init) with the full-vocabulary MLM head: both compute the "
        "same loss, so a stall in one and not the other would point at the sparse path.",
    ),
    Table(
        "syn-long",
        f"Synthesizer vs dot product past the plateau, bert-mini (4 x 4 heads of 64), {LONG_STEPS} steps (MLM loss)",
        CLAIM,
        LONG_ROWS,
        (("4 heads of 64", long_size()),),
        SEEDS,
        note=long_note({}, SCREEN_PICK),
        train_loss=True,
    ),
]

if __name__ == "__main__":
    main(CELLS, "experiments/synthesizer.py")
