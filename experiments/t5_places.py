"""Claim (d): talking heads in T5 span corruption, by place: the encoder's self-attention against the decoder's.

Shazeer et al. (2020) ran their main experiments on T5 (span corruption, then fine-tuning) and asked where talking
heads helps: with it in the encoder's self-attention only, the downstream gains were larger than with it in the
decoder's self-attention only, and close to those of talking heads everywhere. The claims (a)-(c) of this page are
masked LM in BERT; this claim is the paper's own setting at CPU scale, with the pretraining loss as the measure (no
fine-tuning).

Setting: examples/run_t5_pretraining.py (`cells.T5_SCRIPT`: span corruption, 15% noise in spans of mean length 3,
inputs of 128 tokens after corruption, targets of 29) on the KJV splits, every other flag as cells.TRAINING (batch
16, AdamW with weight decay 0.01, linear decay, held-out loss on the first 256 held-out blocks, corrupted once with
the script's fixed seed). The measure is the final held-out target loss (nats per target token, sentinels and </s>
included). The tokenizer is committed beside the corpus, `examples/data/kjv-unigram-8000` (t5_unigram.T5_TOKENIZER:
the project's Unigram with T5's 100 sentinels, 8000 tokens, trained deterministically on the training chapters'
lines; the WordPiece of the other claims has no sentinels). Reference point: the targets' unigram,
t5_unigram.UNIGRAM_TARGET_LOSS (5.509); a run within 0.05 of it counts as stalled.

Shape: the t5-mini preset (4 encoder + 4 decoder layers, width 256, FFN 1024, ReLU, tied embeddings) with 16 heads
of 16 (`num_heads` 16, `d_kv` 16, so the attention's inner width stays 256), 9.4M parameters. Why: 16 heads of 16
is the head count and size of claim (a)'s long rows at width 256 (talking heads mixes across heads, and the paper's
gain grew with h), and 4 + 4 layers is the depth of those BERT rows on each side. Measured before the cells were
written (one thread, this machine's Intel Xeon, a training step of batch 16 on random tokens, CPU time): 1.09 s for
dot product, 1.12 for talking heads in the encoder, 1.08 in the decoder, 1.12 everywhere (the decoder's 29 target
positions cost little; the maps are 16 x 16 per position pair); a 40-step run of the script took 1.5 s a step wall
clock with its data and evaluation on a lightly loaded machine. So a screen cell (400 steps) costs about 10
CPU-minutes and a long cell (1600 steps) about 40: 12 screens and 12 long cells come to about 10 CPU-hours, the
issue's budget. Width 384 (6 + 6 layers) would cost three to four times that (as BERT's width-384 cells did against
width 256's); 2 + 2 layers would leave two self-attention layers on each side to compare.

Variants (config fields on top of the preset; talking heads: both maps, the paper's init, as claim (a)):
  dot-product     dot product everywhere;
  th-encoder      talking heads in the encoder's self-attention only (`encoder_attention_type`);
  th-decoder      talking heads in the decoder's self-attention only (`decoder_attention_type`);
  th-everywhere   talking heads in the encoder's and the decoder's self-attention and in the cross-attention.

1. learning-rate screens: one seed, 400 steps, lr 5e-4, 1e-3 and 2e-3, with the long cells' warm-up (160 steps, not
   the 40 of cells.TRAINING: at width 384 and 6 layers the 40-step screens stalled where the long cells trained, so
   a screen at this depth warms up as the long cells do). Each variant's long learning rate follows cells.SCREEN_RULE
   (with this claim's reference point); SCREEN_PICK records it (None while the screen has not run: the long cells
   are then defined at cells.PENDING_LR and are NOT to be run; tests/repository/test_experiments_t5.py fails while a finished
   screen's pick is not written down).
2. the long cells: 1600 steps (4.0 passes over the training blocks: an epoch is 398 steps), evaluated every 200,
   three seeds, seed-major. Held-out and training loss; the long table's figure pairs each variant with dot product
   by seed.
3. a matched-rate control, where the rule gives a talking-heads variant another rate than dot product: dot product
   at that variant's rate, seed 0, after every cell of the rule (`control_cells`; none while the picks are pending
   or equal), in a table of its own.

    OMP_NUM_THREADS=1 nice -n 10 python experiments/t5_places.py --only 't5_places/*/screen-*' --max_cells 1
    python experiments/t5_places.py --list
"""

from cells import (
    LONG_TRAINING,
    SCREEN_LRS,
    SCREEN_RULE,
    T5_SCRIPT,
    TRAINING,
    Table,
    cell,
    dedupe,
    long_lrs,
)
from runner import main
from t5_unigram import UNIGRAM_TARGET_LOSS

CLAIM = "t5_places"
SEEDS = (0, 1, 2)
PRESET = "t5-mini-dot-product"
HEADS = 16
SHAPE = {"num_heads": HEADS, "d_kv": 256 // HEADS}
TH = {"talking_heads_init": "paper"}  # both maps (the defaults), the paper's init: claim (a)'s talking heads
VARIANTS = {
    "dot-product": {"attention_type": "dot_product"},
    "th-encoder": {"attention_type": "dot_product", "encoder_attention_type": "talking_heads", **TH},
    "th-decoder": {"attention_type": "dot_product", "decoder_attention_type": "talking_heads", **TH},
    "th-everywhere": {"attention_type": "talking_heads", **TH},
}
LABELS = {
    "dot-product": "dot product",
    "th-encoder": "talking heads: encoder self-attention",
    "th-decoder": "talking heads: decoder self-attention",
    "th-everywhere": "talking heads: everywhere (with cross-attention)",
}
LONG_STEPS = LONG_TRAINING["max_steps"]
WARMUP = round(LONG_STEPS * TRAINING["warmup_steps"])  # the long cells' warm-up, in steps: the screens take it too
EPOCH_STEPS = 398  # 6355 training blocks of 141 raw tokens, batches of 16 (the last one short)

# What cells.SCREEN_RULE picked from the screen; None: the screen has not run.
SCREEN_PICK = {
    "dot-product": "2e-3",  # the screen, 2026-12-04: 5.117 / 4.730 / 4.573 at lr 5e-4 / 1e-3 / 2e-3
    "th-encoder": "2e-3",  # the screen, 2026-12-04: 5.119 / 4.731 / 4.584
    "th-decoder": "2e-3",  # the screen, 2026-12-04: 5.127 / 4.736 / 4.584
    "th-everywhere": "2e-3",  # the screen, 2026-12-04: 5.123 / 4.727 / 4.576
}
LONG_LR = long_lrs({}, SCREEN_PICK)


def screen_size(lr: str) -> str:
    return f"screen-h{HEADS}-lr{lr}-warmup{WARMUP}"


def long_size(lr: str | None = None) -> str:
    """A long cell's size names its learning rate (a new rate is a new cell); without one, the table column that
    reads each variant's cells through an alias."""
    return f"h{HEADS}" + ("" if lr is None else f"-lr{lr}") + f"-steps{LONG_STEPS}"


def t5_cell(variant: str, size: str, seed: int, lr: str, **training):
    return cell(
        CLAIM,
        variant,
        size,
        seed,
        PRESET,
        {**SHAPE, **VARIANTS[variant]},
        script=T5_SCRIPT,
        learning_rate=lr,
        **training,
    )


def rule_cells() -> list:
    """The screens (rate-major), then the long cells seed-major."""
    screens = [t5_cell(v, screen_size(lr), 0, lr, warmup_steps=WARMUP) for lr in SCREEN_LRS for v in VARIANTS]
    long = [t5_cell(v, long_size(LONG_LR[v]), seed, LONG_LR[v], **LONG_TRAINING) for seed in SEEDS for v in VARIANTS]
    return screens + long


def control_lrs() -> list[str]:
    """The rates the rule gave a talking-heads variant and not dot product (none while a pick is pending)."""
    if any(lr is None for lr in SCREEN_PICK.values()):
        return []
    return sorted(
        {lr for v, lr in SCREEN_PICK.items() if v != "dot-product" and lr != SCREEN_PICK["dot-product"]}, key=float
    )


def control_cells() -> list:
    return [t5_cell("dot-product", long_size(lr), 0, lr, **LONG_TRAINING) for lr in control_lrs()]


CELLS, COMMITTED_ALIASES = dedupe(rule_cells() + control_cells())
LONG_ALIASES = {(CLAIM, v, long_size()): (CLAIM, v, long_size(lr)) for v, lr in LONG_LR.items()}
ALIASES = {**COMMITTED_ALIASES, **LONG_ALIASES}
ROWS = tuple((LABELS[v], v) for v in VARIANTS)
MEASURE = dict(reference=UNIGRAM_TARGET_LOSS, loss_name="target loss")


def screen_table() -> Table:
    return Table(
        "t5-screen",
        f"Learning-rate screen of (d), T5 span corruption ({PRESET.split('-dot')[0]}: 4 + 4 "
        f"layers, width 256, {HEADS} heads of {256 // HEADS}; one seed, {TRAINING['max_steps']} steps with "
        f"{WARMUP} warm-up; held-out target loss)",
        CLAIM,
        ROWS,
        tuple((f"lr {lr}", screen_size(lr)) for lr in SCREEN_LRS),
        seeds=(0,),
        note=f"A screen with one seed: it picks each variant's long learning rate, {SCREEN_RULE}; the unigram "
        f"point here is the span-corruption targets' ({UNIGRAM_TARGET_LOSS}, "
        "experiments/t5_unigram.py).",
        screen=True,
        **MEASURE,
    )


def long_note() -> str:
    pending = [v for v, lr in SCREEN_PICK.items() if lr is None]
    screened = [v for v, lr in SCREEN_PICK.items() if lr is not None]
    return (
        f"{LONG_STEPS} steps ({LONG_STEPS * 16 * 128 / 1e6:.1f}M input tokens, {LONG_STEPS / EPOCH_STEPS:.1f} "
        "passes over the training blocks), evaluated every 200 steps, with the committed Unigram tokenizer. "
        "Held-out: the final target loss on the 256 held-out blocks; train: the mean logged training loss over "
        "the last 100 steps; `rising`: a run whose held-out loss ended more than 0.01 above the lowest point of "
        "its curve. Learning rates: "
        + ", ".join(f"{v} {lr}" for v, lr in LONG_LR.items())
        + (f" ({', '.join(screened)}: by the screening rule)" if screened else "")
        + (
            f" ({', '.join(pending)}: the placeholder, pending the screen: do not run these cells before it)"
            if pending
            else ""
        )
        + "."
    )


def long_table() -> Table:
    return Table(
        "t5-long",
        f"(d) Talking heads in T5 by place, {HEADS} heads of {256 // HEADS}, {LONG_STEPS} steps "
        "(span-corruption target loss)",
        CLAIM,
        ROWS,
        ((f"{LONG_STEPS} steps", long_size()),),
        SEEDS,
        note=long_note(),
        train_loss=True,
        paired=True,
        **MEASURE,
    )


def control_table() -> Table:
    rule = SCREEN_PICK["dot-product"]
    return Table(
        "t5-control",
        f"(d) Control outside the rule: dot product at the talking-heads variants' rates, "
        f"{LONG_STEPS} steps (span-corruption target loss)",
        CLAIM,
        ((LABELS["dot-product"], "dot-product"),),
        ((f"lr {rule} (the rule's)", long_size(rule)), *((f"lr {lr}", long_size(lr)) for lr in control_lrs())),
        seeds=(0,),
        note="One seed, the settings of the long table but the learning rate.",
        train_loss=True,
        **MEASURE,
    )


TABLES = [screen_table(), long_table(), *([control_table()] if control_lrs() else [])]

if __name__ == "__main__":
    main(CELLS, "experiments/t5_places.py")
