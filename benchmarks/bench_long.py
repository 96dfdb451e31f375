"""Long sequences: forward+backward time and peak memory of one BERT layer, talking heads (eager and blockwise)
against transformers' own BertModel (eager and SDPA), side by side.

Run from the repository root:

    python benchmarks/bench_long.py --markdown                      # width 256, 8 heads, batch 1, n = 512 2048 4096
    python benchmarks/bench_long.py --seq-lens 512 --quick          # a smoke run of seconds

Every row is a bare encoder (embeddings, `--num-layers` layers, pooler) built from the same seed, fed the same random
`input_ids` with no padding mask (so transformers' SDPA runs its fused kernel, O(n) memory), attention dropout 0
(on the CPU SDPA has no fused kernel with dropout), hidden dropout 0.1, in train mode. Measured per row:

- fwd+bwd ms: one forward and backward pass of `last_hidden_state.pow(2).mean()`, in this process, the rows
  interleaved per repeat, the fastest of `--repeats` (after one warm-up).
- peak MiB: the peak resident memory of one forward+backward pass above what the process held before it (the model,
  its inputs, torch itself), measured in a fresh subprocess per row and length: Linux's high-water mark (VmHWM) reset
  through /proc/self/clear_refs before the pass (where that file cannot be written: the lifetime peak, ru_maxrss).
  Gradients are kept, so their memory counts: the same for every row of a width.

Ratios are against `sdpa` (transformers' BertModel with SDPA: the O(n) reference). Rows: `eager` and `sdpa`
(transformers), `dot-product` (ours, SDPA), `talking-heads-eager` and `talking-heads-blockwise`
(`attention_algorithm`), `talking-heads-dynamic-blockwise` (all four dynamic maps).
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertModel

import hf_attn_variants
from hf_attn_variants.presets import ATTENTION

TALKING_HEADS = ATTENTION["talking-heads"][0]
ROWS = {  # name -> (whose model, config fields)
    "eager": ("transformers", {"attn_implementation": "eager"}),
    "sdpa": ("transformers", {"attn_implementation": "sdpa"}),
    "dot-product": ("ours", {"attention_type": "dot_product"}),
    "talking-heads-eager": ("ours", {**TALKING_HEADS, "attention_algorithm": "eager"}),
    "talking-heads-blockwise": ("ours", {**TALKING_HEADS, "attention_algorithm": "blockwise"}),
    "talking-heads-dynamic-blockwise": (
        "ours",
        {**TALKING_HEADS, "attention_algorithm": "blockwise", "talking_heads_dynamic": ["x2l", "m2l", "x2w", "m2w"]},
    ),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-lens", type=int, nargs="+", default=[512, 2048, 4096])
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--hidden-size", type=int, default=256)
    p.add_argument("--num-heads", type=int, default=8)
    p.add_argument("--num-layers", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--variants",
        nargs="+",
        choices=list(ROWS),
        default=list(ROWS),
        metavar="NAME",
        help=f"rows of {', '.join(ROWS)} (sdpa, the reference, always runs)",
    )
    p.add_argument("--no-memory", action="store_true", help="time only (no subprocesses)")
    p.add_argument("--quick", action="store_true", help="smoke run: width 64, 2 heads, n = 64 128, 1 repeat")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--peak-of", nargs=2, metavar=("ROW", "SEQ_LEN"), help=argparse.SUPPRESS)  # the subprocess
    args = p.parse_args(argv)
    if args.quick:
        args.hidden_size, args.num_heads, args.seq_lens, args.repeats = 64, 2, [64, 128], 1
    args.variants = ["sdpa", *(v for v in args.variants if v != "sdpa")]
    return args


def build(name: str, args, seq_len: int):
    whose, fields = ROWS[name]
    common = dict(
        vocab_size=1000,
        hidden_size=args.hidden_size,
        num_attention_heads=args.num_heads,
        num_hidden_layers=args.num_layers,
        intermediate_size=4 * args.hidden_size,
        max_position_embeddings=max(512, seq_len),
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(0)
    if whose == "transformers":
        return BertModel(BertConfig(**common, **fields)).train()
    return hf_attn_variants.VariantBertModel(hf_attn_variants.VariantBertConfig(**common, **fields)).train()


def step(model, ids) -> None:
    model(input_ids=ids).last_hidden_state.pow(2).mean().backward()


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def peak_of(name: str, seq_len: int, args) -> float:
    """MiB above the resident memory before one fwd+bwd pass, at its peak (run in a fresh process)."""
    model = build(name, args, seq_len)
    ids = torch.randint(0, 1000, (args.batch_size, seq_len), generator=torch.Generator().manual_seed(0))
    before = rss_mib()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark to the current RSS
        step(model, ids)
        status = Path("/proc/self/status").read_text()
        peak = int(next(line for line in status.splitlines() if line.startswith("VmHWM")).split()[1]) / 1024
    except OSError:
        step(model, ids)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return peak - before


def measure_peak(name: str, seq_len: int, args) -> float:
    command = [
        sys.executable,
        __file__,
        "--peak-of",
        name,
        str(seq_len),
        "--batch-size",
        str(args.batch_size),
        "--hidden-size",
        str(args.hidden_size),
        "--num-heads",
        str(args.num_heads),
        "--num-layers",
        str(args.num_layers),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])["peak_mib"]


def measure(args, seq_len: int) -> dict:
    models = {name: build(name, args, seq_len) for name in args.variants}
    ids = torch.randint(0, 1000, (args.batch_size, seq_len), generator=torch.Generator().manual_seed(0))
    times = {name: [] for name in models}
    for repeat in range(1 + args.repeats):  # the first is a warm-up
        for name, model in models.items():
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            step(model, ids)
            if repeat:
                times[name].append((time.perf_counter() - start) * 1e3)
    del models
    return {
        name: {"ms": min(t), "peak": None if args.no_memory else measure_peak(name, seq_len, args)}
        for name, t in times.items()
    }


def table(results: dict, markdown: bool) -> str:
    header = ["variant", "fwd+bwd ms", "/ sdpa", "peak MiB", "/ sdpa"]
    ref = results["sdpa"]
    rows = [
        [
            name,
            f"{r['ms']:.1f}",
            f"{r['ms'] / ref['ms']:.2f}",
            "-" if r["peak"] is None else f"{r['peak']:.0f}",
            "-" if r["peak"] is None else f"{r['peak'] / ref['peak']:.2f}",
        ]
        for name, r in results.items()
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def line(cells):
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "| " + " | ".join(cells) + " |" if markdown else "  ".join(cells)

    rule = (
        "|" + "|".join(":" + "-" * (w + 1) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
        if markdown
        else "  ".join("-" * w for w in widths)
    )
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def main(argv=None):
    args = parse_args(argv)
    if args.peak_of:
        print(json.dumps({"peak_mib": peak_of(args.peak_of[0], int(args.peak_of[1]), args)}))
        return
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}; batch {args.batch_size}, width "
        f"{args.hidden_size}, {args.num_heads} heads, {args.num_layers} layer(s); fastest of {args.repeats}"
    )
    for seq_len in args.seq_lens:
        print(f"\n{'### ' if args.markdown else ''}seq_len {seq_len}\n")
        print(table(measure(args, seq_len), args.markdown))


if __name__ == "__main__":
    main()
