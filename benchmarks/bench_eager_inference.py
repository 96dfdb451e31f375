"""Inference of talking heads' eager algorithm: in place (`mix_heads_`) against fresh tensors, and the blockwise core.

Run from the repository root (one thread per process on a shared machine):

    OMP_NUM_THREADS=1 python benchmarks/bench_eager_inference.py                 # BERT-base's core, b=8, n=512
    OMP_NUM_THREADS=1 python benchmarks/bench_eager_inference.py --what layer    # the whole layer

The attention core of layer 0 of a 1-layer `VariantBertModel` (width 768, 12 heads of 64, talking heads), eval, on
projections of random hidden states with one padded row. Modes: `in_place` (eager under `torch.no_grad()`: the
heads mixed in place), `fresh` (eager with grad mode on and nothing requiring a gradient: no autograd graph, the
mixes in fresh tensors), `blockwise` (the blockwise core under `torch.no_grad()`). Each mode runs in its own process
(peak RSS is per process), `--rounds` times, interleaved; a row gives the minimum time over every call and the range
of the peak RSS above what the process held before the first call.
"""

import argparse
import json
import resource
import subprocess
import sys
import time

MODES = ("in_place", "fresh", "blockwise")


def measure(mode: str, what: str, batch: int, length: int, repeats: int) -> dict:
    import torch

    import hf_attn_variants as hav

    torch.manual_seed(0)
    config = hav.VariantBertConfig(
        hidden_size=768,
        num_attention_heads=12,
        intermediate_size=3072,
        num_hidden_layers=1,
        attention_type="talking_heads",
        attn_implementation="eager",
        attention_algorithm="blockwise" if mode == "blockwise" else "eager",
    )
    layer = hav.VariantBertModel(config).eval().requires_grad_(False).encoder.layer[0]
    attn = layer.attention.self
    x = torch.randn(batch, length, 768)
    query = attn.core.project_query(x, attn.query)
    key, value = attn.core.project_memory(x, attn.key, attn.value)
    mask = torch.zeros(batch, 1, 1, length)
    mask[1, ..., -length // 5 :] = torch.finfo(torch.float32).min
    with torch.enable_grad() if mode == "fresh" else torch.no_grad():
        before, times = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, []
        for _ in range(repeats):
            start = time.perf_counter()
            if what == "core":
                attn.core(query, key, value, mask, x, attn_implementation="eager")
            else:
                layer(x, attention_mask=mask)
            times.append(time.perf_counter() - start)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"ms": min(times) * 1e3, "rss_mib": (peak - before) / 1024}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=("core", "layer"), default="core")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=9, help="calls per process")
    parser.add_argument("--rounds", type=int, default=4, help="processes per mode, interleaved")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # a child process: one mode
    args = parser.parse_args(argv)
    if args.mode:
        print(json.dumps(measure(args.mode, args.what, args.batch, args.length, args.repeats)))
        return
    results = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            out = subprocess.run(
                [sys.executable, __file__, *(argv or sys.argv[1:]), "--mode", mode],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            results[mode].append(json.loads(out.strip().splitlines()[-1]))
    print(f"| {args.what}, b={args.batch}, n={args.length}, no gradients | time (min) | peak RSS above the model |")
    print("|---|---|---|")
    for mode, runs in results.items():
        rss = [r["rss_mib"] for r in runs]
        print(f"| {mode} | {min(r['ms'] for r in runs):.0f} ms | {min(rss):.0f}-{max(rss):.0f} MiB |")


if __name__ == "__main__":
    main()
