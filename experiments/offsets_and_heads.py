"""Section (f): two questions that section (e)'s answers raise, at its 6400-step schedule.

1. Does talking heads' gain grow with the head count? At 1600 steps talking heads was behind dot product at h = 16
   (+0.015) and further behind at h = 32 (+0.030); at 6400 steps the h = 16 deficit closed (-0.005). These cells run
   claim (a)'s 6400-step pair (width 256, paper init, lr 1e-3 both) at h = 32 (32 heads of 8), three seeds, paired
   by seed, evaluated every 400 steps.

2. Is the Random + dot-product mixture's lead (claim (c), h = 4) a learned bias of the offset? Its trained Random
   maps hold little but their diagonals. The control is dot product with a learned per-head bias of the offset, one
   logit per offset j - i (2L - 1 per head, L = 128): the Synthesizer of dot product and a Random map tied to the
   offset (`synthesizer_random_offset`), its two weights learned but not normalised (both start at 1/2, as the
   mixture's alphas do; a factor on q . k is the projections' to absorb, so this is dot product plus a learned
   offset bias). A start at exactly dot product (weights 1 and 0) was not chosen: the bias and its weight would
   both start near zero, each's gradient proportional to the other. At the mixture's rate 1e-3, three seeds; one
   seed at 5e-4. And the mixture itself with its Random maps tied to the
   offset (claim (c)'s fields otherwise), one seed at 1e-3: does the offset alone carry the lead?

    nice -n 19 python experiments/offsets_and_heads.py --only 'offsets_and_heads/*/h32-*/seed0'
    python experiments/offsets_and_heads.py --list
"""

from cells import Table, cell
from length import CONTRASTS, SEEDS, STEPS, TRAINING_6400, size
from runner import main
from synthesizer import LONG_FIELDS

CLAIM = "offsets_and_heads"
HEADS = 32  # claim (a)'s pair at twice the h of its 6400-step cells
OFFSET_HEADS = 4  # claim (c)'s setting
OFFSET_FIELDS = {
    "dot-offset-bias": dict(
        attention_type="synthesizer",
        synthesizer_components=["dot_product", "random"],
        synthesizer_random_offset=True,
        synthesizer_mixture_normalize=False,
    ),
    "mixture-random-dot-offset": dict(LONG_FIELDS["mixture-random-dot"], synthesizer_random_offset=True),
}
# (variant, learning rate, seeds)
OFFSET_CELLS = [
    ("dot-offset-bias", "1e-3", SEEDS),
    ("dot-offset-bias", "5e-4", (0,)),
    ("mixture-random-dot-offset", "1e-3", (0,)),
]


def offset_cells() -> list:
    """The offset control and the tied mixture, seed-major."""
    return [
        cell(
            CLAIM,
            variant,
            size(OFFSET_HEADS, lr),
            seed,
            "bert-mini-dot-product",
            {"num_attention_heads": OFFSET_HEADS, **OFFSET_FIELDS[variant]},
            learning_rate=lr,
            **TRAINING_6400,
        )
        for seed in SEEDS
        for variant, lr, seeds in OFFSET_CELLS
        if seed in seeds
    ]


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


CELLS = cells() + offset_cells()
_OWN = f"h{OFFSET_HEADS}-steps{STEPS}"  # each variant at its own rate, claim (c)'s pairing in section (e)
_OWN_RUNS = {  # variant: (the claim that runs it, its rate)
    "dot-product": ("length", "5e-4"),
    "mixture-random-dot": ("length", "1e-3"),
    "dot-offset-bias": (CLAIM, "1e-3"),
}
ALIASES = {
    (CLAIM, variant, _OWN): (claim, variant, size(OFFSET_HEADS, lr)) for variant, (claim, lr) in _OWN_RUNS.items()
} | {  # claim (c)'s pair at both rates: section (e)'s cells
    (CLAIM, variant, size(OFFSET_HEADS, lr)): ("length", variant, size(OFFSET_HEADS, lr))
    for variant in ("dot-product", "mixture-random-dot")
    for lr in ("5e-4", "1e-3")
}
_CLAIM_C = (
    ("dot product", "dot-product"),
    ("Mixture: Random + dot product", "mixture-random-dot"),
    ("dot product + learned offset bias", "dot-offset-bias"),
)
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
    Table(
        "offset-control",
        f"A learned offset bias against claim (c)'s pair at h = {OFFSET_HEADS}, {STEPS} steps (MLM loss)",
        CLAIM,
        tuple((f"{label} (lr {_OWN_RUNS[variant][1]})", variant) for label, variant in _CLAIM_C),
        ((f"h = {OFFSET_HEADS}", _OWN),),
        SEEDS,
        note="Each model at its own learning rate, as in section (e)'s table length-c (whose rows the first two are); "
        "paired by seed (the same data order and masks).",
        train_loss=True,
        paired=True,
    ),
    Table(
        "offset-control-lr",
        "The offset control at both learning rates, and the mixture with offset-tied Random maps, seed 0 (MLM loss)",
        CLAIM,
        (*_CLAIM_C, ("Mixture: offset-tied Random + dot product", "mixture-random-dot-offset")),
        (("lr 5e-4", size(OFFSET_HEADS, "5e-4")), ("lr 1e-3", size(OFFSET_HEADS, "1e-3"))),
        seeds=(0,),
        note="One seed. The first two rows are section (e)'s table length-c-lr. Does the offset alone carry the "
        "mixture's lead, and does the offset bias need the higher rate as the mixture's Random maps do?",
        paired=True,
        not_run=(("mixture-random-dot-offset", size(OFFSET_HEADS, "5e-4")),),
    ),
]

if __name__ == "__main__":
    main(CELLS, "experiments/offsets_and_heads.py")
