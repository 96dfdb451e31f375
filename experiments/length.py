"""Claim (e): length. At four times the long cells' training length, does talking heads' deficit close, and does the
Random + dot-product mixture's lead hold?

Every claim was answered at 1600 steps (3.6 passes over the KJV training chapters), shortly past the unigram
plateau; the papers measured after full pretraining. These cells re-run two contrasts at 6400 steps (14.5 passes),
each in its own claim's long-cell setting and at the learning rates its 1600-step cells used (their screen picks):
- claim (a), h = 16 (16 heads of 16): dot product and talking heads (paper init), lr 1e-3 both;
- claim (c), h = 4 (4 heads of 64): dot product (lr 5e-4) and the Random + dot-product mixture (lr 1e-3).
Three seeds each. The schedule scales as the long cells scaled theirs: linear decay to zero at the last step with a
warm-up of 10% of the steps (640 at 6400, 160 at 1600). Evaluated on the held-out chapters every 400 steps, so one
run gives the curve.

The control against the schedule: one seed of claim (a)'s pair at 6400 steps with the 1600-step cells' warm-up,
160 steps, unscaled (the decay still ends at step 6400): does the ordering depend on the warm-up's length?

The control against the learning rate: claim (c)'s pair runs at two rates (dot product 5e-4, the mixture 1e-3, as
their screens picked), so one seed of each at the other's rate (dot product 1e-3, the mixture 5e-4) makes seed 0 a
two-by-two: is the mixture's lead there at equal rates?

    nice -n 19 python experiments/length.py --only 'length/*/seed0' --cell_timeout_minutes 600
    python experiments/length.py --list
"""

import synthesizer
import talking_heads
from cells import Table, cell
from runner import main

CLAIM = "length"
SEEDS = (0, 1, 2)
STEPS = 6400
TRAINING_6400 = dict(max_steps=STEPS, eval_steps=400)
CONTROL_WARMUP = 160  # the 1600-step cells' warm-up (10% of 1600), in steps
CONTROL_LRS = {"dot-product": "1e-3", "mixture-random-dot": "5e-4"}  # claim (c)'s pair, each at the other's rate
# (variant, heads, fields, learning rate), from the claims' long cells
CONTRASTS = {
    "a": (
        16,
        {
            "dot-product": talking_heads.long_fields("dot-product"),
            "talking-heads": talking_heads.long_fields("talking-heads"),
        },
        {v: talking_heads.LONG_LR[v] for v in ("dot-product", "talking-heads")},
    ),
    "c": (
        4,
        {
            "dot-product": synthesizer.LONG_FIELDS["dot-product"],
            "mixture-random-dot": synthesizer.LONG_FIELDS["mixture-random-dot"],
        },
        {v: synthesizer.LONG_LR[v] for v in ("dot-product", "mixture-random-dot")},
    ),
}


def size(h: int, lr: str, warmup: str = "") -> str:
    return f"h{h}-lr{lr}-steps{STEPS}{warmup}"


def length_cell(variant: str, h: int, fields: dict, lr: str, seed: int, warmup: str = "", **training):
    """One 6400-step cell of a contrast's variant at `lr` (`warmup`: the size's suffix, `training`: its flags)."""
    return cell(
        CLAIM,
        variant,
        size(h, lr, warmup),
        seed,
        "bert-mini-dot-product",
        {"num_attention_heads": h, **fields},
        learning_rate=lr,
        **{**TRAINING_6400, **training},
    )


def cells() -> list:
    """Seed-major (every variant gets a first seed before any gets a second), then the warm-up control, then the
    learning-rate control."""
    out = [
        length_cell(variant, h, fields, lrs[variant], seed)
        for seed in SEEDS
        for h, variants, lrs in CONTRASTS.values()
        for variant, fields in variants.items()
    ]
    h, variants, lrs = CONTRASTS["a"]
    out += [
        length_cell(variant, h, fields, lrs[variant], 0, f"-warmup{CONTROL_WARMUP}", warmup_steps=CONTROL_WARMUP)
        for variant, fields in variants.items()
    ]
    h, variants, _ = CONTRASTS["c"]
    out += [length_cell(variant, h, fields, CONTROL_LRS[variant], 0) for variant, fields in variants.items()]
    return out


CELLS = cells()
# a table column names no learning rate: each variant's cells are read through an alias
ALIASES = {
    (CLAIM, v, f"h{h}-steps{STEPS}"): (CLAIM, v, size(h, lrs[v])) for h, vs, lrs in CONTRASTS.values() for v in vs
}
_NOTE = (
    f"{STEPS} steps ({STEPS * 16 * 128 / 1e6:.1f}M tokens, {STEPS / 442:.1f} passes over the training chapters), "
    "evaluated every 400 steps, with the committed tokenizer; warm-up 10% of the steps, linear decay to zero. "
    "Held-out: the final eval MLM loss; train: the mean logged training loss over the last 100 steps."
)
TABLES = [
    Table(
        "length-a",
        f"Talking heads vs dot product at h = 16, {STEPS} steps (MLM loss)",
        CLAIM,
        (("dot product", "dot-product"), ("talking heads", "talking-heads")),
        (("h = 16", f"h16-steps{STEPS}"),),
        SEEDS,
        note=_NOTE,
        train_loss=True,
        paired=True,
    ),
    Table(
        "length-c",
        f"Random + dot-product mixture vs dot product at h = 4, {STEPS} steps (MLM loss)",
        CLAIM,
        (("dot product (lr 5e-4)", "dot-product"), ("Mixture: Random + dot product (lr 1e-3)", "mixture-random-dot")),
        (("h = 4", f"h4-steps{STEPS}"),),
        SEEDS,
        note=_NOTE,
        train_loss=True,
        paired=True,
    ),
    Table(
        "length-control",
        f"The control: claim (a)'s pair at {STEPS} steps with the warm-up scaled (640 steps) "
        f"or not ({CONTROL_WARMUP} steps), seed 0 (MLM loss)",
        CLAIM,
        (("dot product", "dot-product"), ("talking heads", "talking-heads")),
        (
            ("warm-up 640", size(16, "1e-3")),
            (f"warm-up {CONTROL_WARMUP}", size(16, "1e-3", f"-warmup{CONTROL_WARMUP}")),
        ),
        seeds=(0,),
        note="One seed: does the ordering depend on the warm-up's length?",
        paired=True,
    ),
    Table(
        "length-c-lr",
        f"The control: claim (c)'s pair at {STEPS} steps, each at both learning rates, seed 0 (MLM loss)",
        CLAIM,
        (("dot product", "dot-product"), ("Mixture: Random + dot product", "mixture-random-dot")),
        (("lr 5e-4", size(4, "5e-4")), ("lr 1e-3", size(4, "1e-3"))),
        seeds=(0,),
        note="One seed: is the mixture's lead there when both run at the same learning rate?",
        paired=True,
    ),
]

if __name__ == "__main__":
    main(CELLS, "experiments/length.py")
