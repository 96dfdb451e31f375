"""Claim (c): Synthesizer (Tay et al. 2020) vs dot-product attention.

The paper: synthetic attention (no query-key interaction) is competitive with dot product: Random is within a small
margin, Dense close; and a mixture of a synthesizer with dot product is at least as good as dot product alone.

Cells (bert-mini: width 256, 4 layers, 4 heads of 64, MLM on the KJV, 128 tokens, batch 16, 400 steps, lr 1e-3;
see runner.TRAINING), three seeds each: Dense, Random (trainable), Factorized Random (rank 8), and the mixture
Random + dot product (learned weights normalised to sum to 1, the paper's form; uniform start). The dot-product
baseline is the same run as claim (a)'s `talking_heads/dot-product/h4-lr1e-3` cells (identical configuration), so
it is read from there, not run twice.

    nice -n 19 python experiments/synthesizer.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runner import Table, cell, main  # noqa: E402

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
ALIASES = {(CLAIM, "dot-product", SIZE): ("talking_heads", "dot-product", SIZE)}


def cells() -> list:
    return [cell(CLAIM, variant, SIZE, seed, "bert-mini-dot-product",
                 {"num_attention_heads": 4, "attention_type": "synthesizer", **fields}, learning_rate="1e-3")
            for seed in SEEDS for variant, fields in VARIANTS.items()]


CELLS = cells()
TABLES = [
    Table("synthesizer", "Synthesizer vs dot product, bert-mini (4 x 4 heads of 64), lr 1e-3 (eval MLM loss)", CLAIM,
          (("dot product (claim (a)'s h = 4 runs)", "dot-product"), ("Dense", "dense"), ("Random", "random"),
           ("Factorized Random (rank 8)", "factorized-random"),
           ("Mixture: Random + dot product", "mixture-random-dot")),
          (("4 heads of 64", SIZE),), SEEDS),
]

if __name__ == "__main__":
    main(CELLS, "experiments/synthesizer.py")
