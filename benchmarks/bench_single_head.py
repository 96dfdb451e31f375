"""The deep single-head twin against its multi-head original: inference and training step time, activation memory.

Run from the repository root:

    python benchmarks/bench_single_head.py --markdown            # BERT-base 12x12 against 144x1, batch 8, seq 128
    python benchmarks/bench_single_head.py --quick               # tiny shapes, a smoke run
    OMP_NUM_THREADS=1 python benchmarks/bench_single_head.py --batch-size 4 --transformers --stat median \
        --clock process --repeats 5                              # issue 23's case, on a machine shared with others

Both models are `VariantBertModel` with dot-product attention (`--admin` adds Admin residuals to both), built from
the same seed, run interleaved in one process; fastest of `--repeats` (`--stat median`: the median; `--clock
process`: CPU time, see bench_attention.py). `--transformers` adds transformers' own `BertModel` of the multi-head
shape as a row and the ratios' reference. `--dropout` sets the hidden and attention dropout of every model (BERT's
0.1 by default): PyTorch's CPU dropout draws one random number per element, and the twin has h times as many
hidden-width dropouts as its original. The paper (Liu et al. 2021) reports about
equal inference speed for the two at the same size; the twin has L*h layers of one head of the same head size
and a feed-forward h times narrower.
"""

import argparse

import torch
from transformers import BertConfig, BertModel

import hf_attn_variants
from bench_attention import (
    STATS,
    Clock,
    add_timing_args,
    format_table,
    saved_activation_bytes,
    time_forward,
    time_forward_backward,
)
from hf_attn_variants.presets import single_head_twin


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--hidden-size", type=int, default=768)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--admin", action="store_true")
    p.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout of every model")
    p.add_argument(
        "--transformers",
        action="store_true",
        help="add transformers' BertModel of the multi-head shape, the reference of the ratios",
    )
    add_timing_args(p)
    p.add_argument("--quick", action="store_true", help="4x4 layers of width 64, batch 2, seq 16")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    Clock.process = args.clock == "process"
    if args.quick:
        args.layers, args.heads, args.hidden_size, args.batch_size, args.seq_len, args.repeats = 4, 4, 64, 2, 16, 1
    config = hf_attn_variants.VariantBertConfig(
        vocab_size=1000,
        hidden_size=args.hidden_size,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=4 * args.hidden_size,
        admin=args.admin,
        hidden_dropout_prob=args.dropout,
        attention_probs_dropout_prob=args.dropout,
    )
    twin, counts = single_head_twin(config)
    models, sizes = {}, {}
    if args.transformers:
        reference = BertConfig(
            **{
                k: getattr(config, k)
                for k in (
                    "vocab_size",
                    "hidden_size",
                    "num_hidden_layers",
                    "num_attention_heads",
                    "intermediate_size",
                    "hidden_dropout_prob",
                    "attention_probs_dropout_prob",
                )
            }
        )
        torch.manual_seed(0)
        models[f"transformers {args.layers}x{args.heads}"] = BertModel(reference)
        sizes[f"transformers {args.layers}x{args.heads}"] = counts["multi_head"]
    for name, cfg in (
        (f"multi-head {args.layers}x{args.heads}", config),
        (f"single-head {twin.num_hidden_layers}x1", twin),
    ):
        torch.manual_seed(0)
        models[name] = hf_attn_variants.VariantBertModel(cfg)
    sizes.update(zip(list(models)[-2:], (counts["multi_head"], counts["single_head"])))
    torch.manual_seed(1)
    inputs = {"input_ids": torch.randint(0, 1000, (args.batch_size, args.seq_len))}
    fwd = {n: [] for n in models}
    train = {n: [] for n in models}
    for _ in range(1 + args.repeats):  # the first round warms up, interleaved: every model once per round
        for name, model in models.items():
            fwd[name].append(time_forward(model, inputs))
            train[name].append(time_forward_backward(model, inputs))
    saved = {name: saved_activation_bytes(model, inputs) / 2**20 for name, model in models.items()}
    base = next(iter(models))
    header = ["model", "parameters", "fwd ms", "fwd ratio", "fwd+bwd ms", "fwd+bwd ratio", "saved MiB", "saved ratio"]
    rows = []
    stat = STATS[args.stat]
    for name, n_params in sizes.items():
        f, t = stat(fwd[name][1:]), stat(train[name][1:])
        rows.append(
            [
                name,
                f"{n_params / 1e6:.1f}M",
                f"{f:.0f}",
                f"{f / stat(fwd[base][1:]):.2f}",
                f"{t:.0f}",
                f"{t / stat(train[base][1:]):.2f}",
                f"{saved[name]:.0f}",
                f"{saved[name] / saved[base]:.2f}",
            ]
        )
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}; batch {args.batch_size}, seq {args.seq_len},"
        f" width {args.hidden_size}, admin {args.admin}, dropout {args.dropout};"
        f" {'fastest' if args.stat == 'min' else 'median'} of {args.repeats}, {args.clock} clock\n"
    )
    print(format_table(header, rows, markdown=args.markdown))


if __name__ == "__main__":
    main()
