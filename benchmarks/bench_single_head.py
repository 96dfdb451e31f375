"""The deep single-head twin against its multi-head original: inference and training step time, activation memory.

Run from the repository root:

    python benchmarks/bench_single_head.py --markdown            # BERT-base 12x12 against 144x1, batch 8, seq 128
    python benchmarks/bench_single_head.py --quick               # tiny shapes, a smoke run

Both models are `VariantBertModel` with dot-product attention (`--admin` adds Admin residuals to both), built from
the same seed, run interleaved in one process; fastest of `--repeats`. The paper (Liu et al. 2021) reports about
equal inference speed for the two at the same size; the twin has L*h layers of one head of the same head size
and a feed-forward h times narrower.
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_attention import format_table, saved_activation_bytes, time_forward, time_forward_backward  # noqa: E402

try:
    import hf_attn_variants
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import hf_attn_variants
from hf_attn_variants.presets import single_head_twin  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--hidden-size", type=int, default=768)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--admin", action="store_true")
    p.add_argument("--quick", action="store_true", help="4x4 layers of width 64, batch 2, seq 16")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.layers, args.heads, args.hidden_size, args.batch_size, args.seq_len, args.repeats = 4, 4, 64, 2, 16, 1
    config = hf_attn_variants.VariantBertConfig(
        vocab_size=1000, hidden_size=args.hidden_size, num_hidden_layers=args.layers, num_attention_heads=args.heads,
        intermediate_size=4 * args.hidden_size, admin=args.admin,
    )
    twin, counts = single_head_twin(config)
    models = {}
    for name, cfg in ((f"multi-head {args.layers}x{args.heads}", config), (f"single-head {twin.num_hidden_layers}x1", twin)):
        torch.manual_seed(0)
        models[name] = hf_attn_variants.VariantBertModel(cfg)
    torch.manual_seed(1)
    inputs = {"input_ids": torch.randint(0, 1000, (args.batch_size, args.seq_len))}
    fwd = {n: [] for n in models}
    train = {n: [] for n in models}
    for _ in range(1 + args.repeats):  # the first round warms up
        for name, model in models.items():
            fwd[name].append(time_forward(model, inputs))
            train[name].append(time_forward_backward(model, inputs))
    saved = {name: saved_activation_bytes(model, inputs) / 2**20 for name, model in models.items()}
    base = next(iter(models))
    header = ["model", "parameters", "fwd ms", "fwd ratio", "fwd+bwd ms", "fwd+bwd ratio", "saved MiB", "saved ratio"]
    rows = []
    for name, n_params in zip(models, (counts["multi_head"], counts["single_head"])):
        f, t = min(fwd[name][1:]), min(train[name][1:])
        rows.append([name, f"{n_params / 1e6:.1f}M", f"{f:.0f}", f"{f / min(fwd[base][1:]):.2f}", f"{t:.0f}",
                     f"{t / min(train[base][1:]):.2f}", f"{saved[name]:.0f}", f"{saved[name] / saved[base]:.2f}"])
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}; batch {args.batch_size}, seq {args.seq_len},"
          f" width {args.hidden_size}, admin {args.admin}; fastest of {args.repeats}\n")
    print(format_table(header, rows, markdown=args.markdown))


if __name__ == "__main__":
    main()
