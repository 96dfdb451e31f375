"""Speed and activation memory of the attention variants, as ratios against transformers' own BERT or ALBERT.

Run from the repository root:

    python benchmarks/bench_attention.py --markdown                   # BERT-base layers, seq 128 and 512
    python benchmarks/bench_attention.py --markdown --family albert   # the same for ALBERT (embedding 128, 1 group)
    python benchmarks/bench_attention.py --quick                      # tiny shapes, a smoke run of seconds

Every row is a bare encoder (embeddings, `--num-layers` layers, pooler) built from the same seed and fed the same
random `input_ids` with an all-ones `attention_mask`. Per sequence length all models are built once, then each
repeat runs every model in turn (interleaved), so drift in machine speed hits all rows alike; the tables report
the fastest of `--repeats` runs (on a shared VM the median moved by up to 20% between identical runs; the
minimum, the cost without interference, is far more repeatable). Measured per row:

- fwd: one forward pass in eval mode under `torch.no_grad()`.
- fwd+bwd: one forward and backward pass in train mode (dropout 0.1 on) of
  `last_hidden_state.float().pow(2).mean()`, gradients cleared between runs.
- saved: bytes of the tensors autograd saves for backward in one train-mode forward, found with
  `torch.autograd.graph.saved_tensors_hooks`, each storage counted once, parameters and buffers left out. For
  `talking_heads_recompute` this counts what `torch.utils.checkpoint` keeps (the inputs of the attention core)
  and not the intermediates it recomputes in backward, which is the memory actually held.

Ratios are against `eager` (transformers' BertModel or AlbertModel with eager attention: the 1.00 reference) and
`sdpa` (the same with SDPA).
The cost of a row is dominated by its layers and identical layers repeat, so the ratios barely move with depth:
`--num-layers` defaults to 2 to keep the run short. The FFN width is 4 x `--hidden-size`; synthesizers keep
BERT's `max_position_embeddings` (512) as their longest sequence, as a model trained at 512 would.
"""

import argparse
import sys
import time
from pathlib import Path

import torch

try:
    import hf_attn_variants
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import hf_attn_variants

import transformers
from transformers import AlbertConfig, AlbertModel, BertConfig, BertModel

# name -> (whose model, config kwargs). "transformers" is BertModel/AlbertModel, "ours" the variant model.
ROWS = {
    "eager": ("transformers", {"attn_implementation": "eager"}),
    "sdpa": ("transformers", {"attn_implementation": "sdpa"}),
    "dot_product": ("ours", {"attention_type": "dot_product", "attn_implementation": "sdpa"}),
    "talking_heads": ("ours", {"attention_type": "talking_heads", "talking_heads_init": "paper"}),
    "talking_heads_recompute": ("ours", {"attention_type": "talking_heads", "attention_recompute": True}),
    "talking_heads_dynamic": (
        "ours", {"attention_type": "talking_heads", "talking_heads_dynamic": ["x2l", "m2l", "x2w", "m2w"]},
    ),
    "synth_dense": ("ours", {"attention_type": "synthesizer", "synthesizer_components": ["dense"]}),
    "synth_random": ("ours", {"attention_type": "synthesizer", "synthesizer_components": ["random"]}),
    "synth_factorized_random": (
        "ours", {"attention_type": "synthesizer", "synthesizer_components": ["factorized_random"]},
    ),
    "synth_factorized_dense": (
        "ours", {"attention_type": "synthesizer", "synthesizer_components": ["factorized_dense"]},
    ),
    "synth_mixture": (
        "ours", {"attention_type": "synthesizer", "synthesizer_components": ["dot_product", "random"]},
    ),
    "general_bilinear": ("ours", {"attention_type": "general_bilinear"}),
}
REFERENCES = ("eager", "sdpa")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-lens", type=int, nargs="+", default=[128, 512])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--hidden-size", type=int, default=768)
    p.add_argument("--num-heads", type=int, default=12)
    p.add_argument("--num-layers", type=int, default=2, help="ratios are dominated by the per-layer cost")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--variants", nargs="+", choices=list(ROWS), default=list(ROWS), metavar="NAME",
                   help=f"rows to run, of {', '.join(ROWS)}; eager and sdpa are always run as references")
    p.add_argument("--family", choices=["bert", "albert"], default="bert")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: hidden 64, 4 heads, seq 16 32, batch 2, repeats 1, warmup 0")
    p.add_argument("--markdown", action="store_true", help="print markdown tables")
    args = p.parse_args()
    if args.quick:
        args.hidden_size, args.num_heads, args.seq_lens = 64, 4, [16, 32]
        args.batch_size, args.repeats, args.warmup = 2, 1, 0
    args.variants = [*REFERENCES, *(v for v in args.variants if v not in REFERENCES)]
    return args


def build_model(name, args):
    family, kwargs = ROWS[name]
    common = dict(
        vocab_size=1000, hidden_size=args.hidden_size, num_attention_heads=args.num_heads,
        num_hidden_layers=args.num_layers, intermediate_size=4 * args.hidden_size,
        max_position_embeddings=max(512, *args.seq_lens),
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
    )
    if args.family == "albert":
        common.update(embedding_size=128, num_hidden_groups=1, hidden_act="gelu")
    torch.manual_seed(args.seed)
    if family == "transformers":
        ref_model, ref_config = (AlbertModel, AlbertConfig) if args.family == "albert" else (BertModel, BertConfig)
        return ref_model(ref_config(**common, **kwargs))
    if args.family == "albert":
        return hf_attn_variants.VariantAlbertModel(hf_attn_variants.VariantAlbertConfig(**common, **kwargs))
    return hf_attn_variants.VariantBertModel(hf_attn_variants.VariantBertConfig(**common, **kwargs))


def time_forward(model, inputs):
    model.eval()
    with torch.no_grad():
        start = time.perf_counter()
        model(**inputs)
        return (time.perf_counter() - start) * 1e3


def time_forward_backward(model, inputs):
    model.train()
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    out = model(**inputs)
    out.last_hidden_state.float().pow(2).mean().backward()
    elapsed = (time.perf_counter() - start) * 1e3
    model.zero_grad(set_to_none=True)
    return elapsed


def saved_activation_bytes(model, inputs):
    """Bytes autograd saves for backward in one train-mode forward, each storage once, parameters excluded."""
    own = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    seen = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in own:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = model(**inputs)
    del out
    return sum(seen.values())


def measure(args, seq_len):
    models = {name: build_model(name, args) for name in args.variants}
    torch.manual_seed(args.seed)
    inputs = {
        "input_ids": torch.randint(0, 1000, (args.batch_size, seq_len)),
        "attention_mask": torch.ones(args.batch_size, seq_len, dtype=torch.long),
    }
    fwd = {name: [] for name in models}
    fwd_bwd = {name: [] for name in models}
    for step in range(args.warmup + args.repeats):
        for name, model in models.items():  # interleaved: every model once per repeat
            t_fwd, t_fwd_bwd = time_forward(model, inputs), time_forward_backward(model, inputs)
            if step >= args.warmup:
                fwd[name].append(t_fwd)
                fwd_bwd[name].append(t_fwd_bwd)
    return {
        name: {
            "fwd": min(fwd[name]),
            "fwd_bwd": min(fwd_bwd[name]),
            "saved": saved_activation_bytes(model, inputs) / 2**20,
        }
        for name, model in models.items()
    }


def table(results):
    header = ["variant", "fwd ms", "fwd / eager", "fwd / sdpa", "fwd+bwd ms", "fwd+bwd / eager",
              "fwd+bwd / sdpa", "saved MiB", "saved / eager"]
    eager, sdpa = results["eager"], results["sdpa"]
    rows = [
        [name, f"{r['fwd']:.1f}", f"{r['fwd'] / eager['fwd']:.2f}", f"{r['fwd'] / sdpa['fwd']:.2f}",
         f"{r['fwd_bwd']:.1f}", f"{r['fwd_bwd'] / eager['fwd_bwd']:.2f}", f"{r['fwd_bwd'] / sdpa['fwd_bwd']:.2f}",
         f"{r['saved']:.1f}", f"{r['saved'] / eager['saved']:.2f}"]
        for name, r in results.items()
    ]
    return header, rows


def format_table(header, rows, markdown):
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    align = [str.ljust] + [str.rjust] * (len(header) - 1)

    def line(cells):
        cells = [fn(cell, w) for fn, cell, w in zip(align, cells, widths)]
        return "| " + " | ".join(cells) + " |" if markdown else "  ".join(cells)

    rule = ("|" + "|".join(":" + "-" * (w + 1) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
            if markdown else "  ".join("-" * w for w in widths))
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def main():
    args = parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(f"{args.family}: torch {torch.__version__}, transformers {transformers.__version__}, "
          f"hf_attn_variants {hf_attn_variants.__version__}, threads {torch.get_num_threads()}; "
          f"batch {args.batch_size}, hidden {args.hidden_size}, heads {args.num_heads}, layers {args.num_layers}, "
          f"fastest of {args.repeats} (warmup {args.warmup})")
    for seq_len in args.seq_lens:
        results = measure(args, seq_len)
        print(f"\n{'### ' if args.markdown else ''}seq_len {seq_len}\n")
        print(format_table(*table(results), markdown=args.markdown))


if __name__ == "__main__":
    main()
