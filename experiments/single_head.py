"""Claim (b): multi-head or single-head? (Liu et al. 2021, with Admin, Liu et al. 2020).

The paper: a shallow multi-head Post-LN Transformer (L layers of h heads) and its deep single-head twin (L*h layers
of one head of the same size, FFN f/h: the same number of heads and about the same parameters) differ in training
stability; with default initialisation the deep Post-LN twin diverges or lags, with Admin it trains, and then it
beats the shallow model. In a 300-step run on a small book (docs/single-head-admin.md) a 32-layer twin at BERT's
init (std 0.02) and lr 1e-3 trained as well as the shallow model, so we first search for a setting reachable on a
CPU where the default-init twin fails: deeper (64 layers), larger learning rates, a larger init. Claim (a)'s study bounds the learning rate: at lr 2e-3 the
4-layer model (h = 16) stalls near 5.85 within 400 steps, and at 3e-3 the search's own shallow h = 8 model stalls
there too (5.861, the first search cell run), so lr 1e-2 is not tried and 3e-3 asks only whether Admin trains where
the shallow model does not.

Cells (width 256, MLM on the KJV, 128 tokens, batch 16, 400 steps; see cells.TRAINING), three variants each:
  multi-head     bert-mini with h heads (4 x h, head size 256/h); where claim (a) runs the same model (h = 8 and
                 16 at lr 1e-3), its runs are read from there
  twin           its deep single-head twin (4h x 1), Post-LN, default init  (preset bert-mini-single-head-admin,
                 admin off)
  twin-admin     the same twin with Admin residuals, omegas profiled on the first batch (run_pretraining does it)
  twin-admin-closed  (the main table and step 3) the same twin with admin-torch's closed-form omega,
                 sqrt((N+1)/ln(N+1) - 1) = 3.82 for its N = 64 residuals (--admin_init closed_form), whatever the
                 init. Added after the search: at BERT's init the profiled omegas stay within 1.032 of 1, so the
                 twin-admin row shows the paper's rule changing nothing; this row shows Admin's rescaling itself at
                 the setting where the twin fails.
1. search (one seed, a screening): h = 8 (32-layer twin) at lr 1e-3 and 3e-3; h = 16 (64-layer twin) at lr 1e-3;
   and h = 8 at lr 1e-3 with init std 0.07 instead of BERT's 0.02. Why the last: Admin sets omega_i from the
   variance of the residual branches at init, and at BERT's 0.02 those are so small that every omega stays within
   1.032 of 1 (32 and 64 layers), so Admin cannot change training there; 0.07 is about the Xavier init of the
   papers' fairseq models for these shapes (sqrt(2 / (fan_in + fan_out)): 0.06 to 0.08), where the omegas reach 4.
   Added after the first four columns, in which every twin stalled on the unigram plateau (Admin's too): h = 8 at
   lr 5e-4 (does the twin train at a smaller step, which would make its failure at 1e-3 the instability Admin is
   for?). A column at init 0.07 for 1600 steps (does the profiled Admin twin, whose omegas reach 4 there, leave
   the plateau sooner than the default one, given the time?) was planned and dropped unrun: it costs about 2.2
   CPU-hours, and the closed-form twin (3.) showed what Admin does where the twin fails.
2. main: h = 8 at lr 1e-3 (BERT's init), seeds 0, 1, 2: the cheapest setting where the default-init twin clearly
   lags (seed 0 stalled at 32 and at 64 layers alike, where the shallow model trains), so Admin is shown where the
   twin fails, as planned (chosen after the search's first columns), with the closed-form row added.
3. closed form across learning rates (one seed): the closed-form twin at lr 5e-4 and 3e-3 too (h = 8, BERT's
   init), beside the search's runs there. Added after the closed-form twin trained at lr 1e-3 (seeds 0 and 1)
   where the other twins stall: does it close the twin's lag at 5e-4, and does it train at 3e-3, where the shallow
   model stalls?
4. past the plateau (with the committed tokenizer, so no cell of this step reads the 400-step rows, which
   trained with a WordPiece retrained per process): the main table's shallow 4 x 8 model, its 32-layer twin with
   default init and the twin with Admin's closed form at 1600 steps (3.6 passes), evaluated every 200 steps, three
   seeds, lr 1e-3 (the main table's, not screened again: (b)'s search chose it). Does the default twin leave the
   plateau given four times the steps, and does the closed-form twin pull ahead of the shallow model past it?
   Held-out and training loss are both reported. Not defined: the profiled Admin twin at init 0.07 (where its
   omegas reach 4) for 1600 steps: beside the shallow model and the default twin at that init it costs about 2.1
   CPU-hours per seed (6.3 for three, a quarter of the long set again), and at 400 steps all three stalled there.
5. warm-up (the committed tokenizer): the default twin at 400 steps with the short runs' warm-up (10%, 40 steps)
   and with the long runs' (160 steps, the same 10% of 1600). Added after the long default twin's seed 0 left the
   plateau by step 200 (5.759), where the three 400-step twins never did: the long runs differ from the short ones
   in their tokenizer (committed, against one retrained per process) and in their warm-up (160 steps against 40,
   as both take 10%). The first cell changes only the tokenizer (and sparse prediction, the same loss at fewer
   positions), the second the warm-up too. Seed 0 first (40: stalled, 5.890; 160: trained, 5.569), then seeds 1
   and 2, so that the check has the tables' three seeds.

    nice -n 19 python experiments/single_head.py --only 'single_head/*/search-*'
"""

import talking_heads
from cells import LONG_TRAINING, Table, cell, dedupe, long_note
from runner import main

CLAIM = "single_head"
SEEDS = (0, 1, 2)
# (heads, learning rate, init std or None for BERT's 0.02)
SEARCH = (
    ("h8", "1e-3", None),
    ("h16", "1e-3", None),
    ("h8", "3e-3", None),
    ("h8", "1e-3", 0.07),
    ("h8", "5e-4", None),
)
MAIN = ("h8", "1e-3")
VARIANTS = {
    "multi-head": ("bert-mini-dot-product", talking_heads.DOT),  # as claim (a)'s dot product, to share its runs
    "twin": ("bert-mini-single-head-admin", {"admin": False}),
    "twin-admin": ("bert-mini-single-head-admin", {}),
}
# variant -> (preset, config fields, run_pretraining flags): the main table's rows beyond the search's
MAIN_ONLY = {"twin-admin-closed": ("bert-mini-single-head-admin", {}, {"admin_init": "closed_form"})}
CLOSED_LRS = ("5e-4", "1e-3", "3e-3")  # the closed-form twin's learning rates (h = 8, BERT's init)
LONG_STEPS = LONG_TRAINING["max_steps"]
LONG_VARIANTS = ("multi-head", "twin", "twin-admin-closed")  # step 4, at MAIN's heads and learning rate
LONG_SIZE = f"{MAIN[0]}-lr{MAIN[1]}-steps{LONG_STEPS}"
# step 5: warm-up steps of the default twin at MAIN's heads and learning rate, 400 steps: the short runs' 10% and the
# long runs' 10% of 1600 (the long column itself is LONG_SIZE's row)
WARMUPS = (40, 160)


def heads(size: str) -> int:
    return int(size.removeprefix("h"))


def init_fields(init: float | None) -> dict:
    return {} if init is None else {"initializer_range": init}


def search_size(h: str, lr: str, init: float | None = None) -> str:
    return f"search-{h}-lr{lr}" + ("" if init is None else f"-init{init:g}")


def search_label(h: str, lr: str, init: float | None = None) -> str:
    return f"h = {h[1:]} ({4 * heads(h)} layers), lr {lr}" + ("" if init is None else f", init {init:g}")


def cells() -> list:
    out = []
    for h, lr, init in SEARCH:
        for variant, (preset, fields) in VARIANTS.items():
            out.append(
                cell(
                    CLAIM,
                    variant,
                    search_size(h, lr, init),
                    0,
                    preset,
                    {"num_attention_heads": heads(h), **fields, **init_fields(init)},
                    learning_rate=lr,
                )
            )
    main_variants = {**{v: (preset, fields, {}) for v, (preset, fields) in VARIANTS.items()}, **MAIN_ONLY}
    for seed in SEEDS:
        h, lr = MAIN
        for variant, (preset, fields, flags) in main_variants.items():
            out.append(
                cell(
                    CLAIM,
                    variant,
                    f"{h}-lr{lr}",
                    seed,
                    preset,
                    {"num_attention_heads": heads(h), **fields},
                    learning_rate=lr,
                    **flags,
                )
            )
    preset, fields, flags = MAIN_ONLY["twin-admin-closed"]
    for lr in CLOSED_LRS:  # after the main cells: its lr 1e-3 seed 0 is the main table's (dedupe keeps that id)
        out.append(
            cell(
                CLAIM,
                "twin-admin-closed",
                search_size("h8", lr),
                0,
                preset,
                {"num_attention_heads": 8, **fields},
                learning_rate=lr,
                **flags,
            )
        )
    return out


def committed_cells() -> list:
    """Step 4, seed-major, then step 5."""
    variants = {**{v: (preset, fields, {}) for v, (preset, fields) in VARIANTS.items()}, **MAIN_ONLY}
    h, lr = MAIN
    return [
        cell(
            CLAIM,
            variant,
            LONG_SIZE,
            seed,
            variants[variant][0],
            {"num_attention_heads": heads(h), **variants[variant][1]},
            learning_rate=lr,
            **variants[variant][2],
            **LONG_TRAINING,
        )
        for seed in SEEDS
        for variant in LONG_VARIANTS
    ] + [
        cell(
            CLAIM,
            "twin",
            warmup_size(warmup),
            seed,
            variants["twin"][0],
            {"num_attention_heads": heads(h), **variants["twin"][1]},
            learning_rate=lr,
            warmup_steps=warmup,
        )
        for seed in SEEDS
        for warmup in WARMUPS
    ]


def warmup_size(warmup: int) -> str:
    return f"{MAIN[0]}-lr{MAIN[1]}-warmup{warmup}"


# A multi-head cell that claim (a) already runs (same preset, config, training and seed: h = 8 and 16 at lr 1e-3) is
# read from there, not run twice; claim (a)'s own aliases are followed too. The 400-step cells and those with the
# committed tokenizer are deduplicated apart (see talking_heads.py).
_kept, _aliases = dedupe(talking_heads.SHORT_CELLS + cells())
_kept_new, _aliases_new = dedupe(talking_heads.COMMITTED_CELLS + committed_cells())
CELLS = [c for c in _kept + _kept_new if c.claim == CLAIM]
ALIASES = {**talking_heads.ALIASES, **_aliases, **_aliases_new}
ROWS = (
    ("multi-head 4 x h", "multi-head"),
    ("single-head twin 4h x 1, default init", "twin"),
    ("single-head twin 4h x 1, Admin", "twin-admin"),
)
MAIN_ROWS = ROWS + (("single-head twin 4h x 1, Admin, closed-form omega", "twin-admin-closed"),)

TABLES = [
    Table(
        "sh-search",
        "Search: where does the default-init Post-LN twin fail? (one seed; eval MLM loss)",
        CLAIM,
        ROWS,
        tuple((search_label(*setting), search_size(*setting)) for setting in SEARCH),
        seeds=(0,),
        note="A screening with one seed: it picks the setting of the main table, it shows no effect.",
    ),
    Table(
        "sh-main",
        f"Multi-head vs deep single-head at equal parameters, h = {MAIN[0][1:]}, lr {MAIN[1]} (eval MLM loss)",
        CLAIM,
        MAIN_ROWS,
        ((f"4 x {MAIN[0][1:]} vs {4 * heads(MAIN[0])} x 1", f"{MAIN[0]}-lr{MAIN[1]}"),),
        SEEDS,
    ),
    Table(
        "sh-closed",
        "Admin's closed form across learning rates, h = 8 (32 layers; one seed; eval MLM loss)",
        CLAIM,
        MAIN_ROWS,
        tuple((f"lr {lr}", search_size("h8", lr)) for lr in CLOSED_LRS),
        seeds=(0,),
        note="A screening with one seed, added after the closed-form twin trained at lr 1e-3: it shows no effect "
        "by itself.",
    ),
    Table(
        "sh-long",
        f"Multi-head vs deep single-head past the plateau, h = {MAIN[0][1:]}, lr {MAIN[1]}, "
        f"{LONG_STEPS} steps (MLM loss)",
        CLAIM,
        tuple(row for row in MAIN_ROWS if row[1] in LONG_VARIANTS),
        ((f"4 x {MAIN[0][1:]} vs {4 * heads(MAIN[0])} x 1", LONG_SIZE),),
        SEEDS,
        note=long_note(dict.fromkeys(LONG_VARIANTS, MAIN[1]), {}),
        train_loss=True,
    ),
    Table(
        "sh-warmup",
        f"The default twin's warm-up, h = {MAIN[0][1:]}, lr {MAIN[1]} (committed tokenizer; eval MLM loss)",
        CLAIM,
        (("single-head twin 4h x 1, default init", "twin"),),
        tuple((f"400 steps, {w} warm-up", warmup_size(w)) for w in WARMUPS)
        + ((f"{LONG_STEPS} steps, {LONG_STEPS // 10} warm-up", LONG_SIZE),),
        SEEDS,
        note="A check added after the long default twin trained where the 400-step ones did not: the first "
        "column changes only the tokenizer from the short runs (and sparse prediction, the same loss at "
        "fewer positions), the second the warm-up too.",
    ),
]

if __name__ == "__main__":
    main(CELLS, "experiments/single_head.py")
