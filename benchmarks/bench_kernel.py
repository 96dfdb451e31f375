"""The Triton talking-heads kernel on a GPU against the eager einsum core and torch's SDPA (flash where it applies):
forward+backward time, peak memory, and the largest difference from the eager core.

    python benchmarks/bench_kernel.py --device cuda                       # BERT-base shapes, bf16 and fp32
    python benchmarks/bench_kernel.py --device cuda --seq-lens 512 --dtypes bfloat16 --markdown
    python benchmarks/bench_kernel.py --interpret                         # CPU smoke test through the interpreter

Rows, per dtype and sequence length n (batch 8, 12 heads of 64, self-attention, no mask):
- triton: talking_heads_triton with both head maps (h_k = h = h_v = 12);
- eager: talking_heads_reference with the same maps (n x n tensors; skipped above --eager-max-len or when it does
  not fit);
- sdpa: torch.nn.functional.scaled_dot_product_attention, plain dot-product attention (the flash kernel in bf16):
  the yardstick for time and memory, with no head maps.
Time: the median of --repeats forward+backward passes after a warm-up (which compiles the kernels: about a minute
per dtype on a first run, cached in ~/.triton afterwards). Memory: torch.cuda.max_memory_allocated during one
pass, less the inputs. Accuracy (one table row per dtype): the kernel against the eager core in float32 on the same
inputs at --check-len, largest absolute difference of the output and of each gradient.
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (the kernel needs a GPU unless --interpret)")
    parser.add_argument(
        "--interpret",
        action="store_true",
        help="run through Triton's interpreter on the CPU, at a tiny shape (a smoke test)",
    )
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--seq-lens", nargs="+", type=int, default=[512, 2048, 4096])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--eager-max-len", type=int, default=2048, help="longest n the eager core is timed at")
    parser.add_argument("--check-len", type=int, default=512, help="n of the accuracy check (eager in float32)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", action="store_true", help="also print markdown tables")
    parser.add_argument("--json", default="", help="write the rows to this file (JSON lines)")
    args = parser.parse_args(argv)
    if args.interpret:  # a shape the interpreter runs in seconds
        args.device, args.dtypes, args.seq_lens = "cpu", ["float32"], [32]
        args.batch, args.heads, args.head_size, args.check_len, args.repeats = 1, 2, 16, 32, 1
        args.eager_max_len = 32
    return args


def inputs(args, n, dtype, device, seed=0):
    import torch

    gen = torch.Generator().manual_seed(seed)
    b, h, d = args.batch, args.heads, args.head_size

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dtype).requires_grad_(True)

    maps = [
        (torch.eye(h) + torch.randn(h, h, generator=gen) * h**-0.5).to(device=device, dtype=dtype).requires_grad_(True)
        for _ in range(2)
    ]
    return [rand(b, h, n, d), rand(b, h, n, d), rand(b, h, n, d), *maps]


def methods(args):
    """name -> f(query, key, value, pre_proj, post_proj) -> output."""
    import torch
    import torch.nn.functional as F

    from hf_attn_variants.models.talking_heads_blockwise import talking_heads_reference
    from hf_attn_variants.models.talking_heads_triton import talking_heads_triton

    scaling = args.head_size**-0.5

    def sdpa(q, k, v, pre, post):
        return F.scaled_dot_product_attention(q, k, v, scale=scaling)

    return {
        "triton": lambda q, k, v, pre, post: talking_heads_triton(q, k, v, None, pre, post, scaling=scaling),
        "eager": lambda q, k, v, pre, post: talking_heads_reference(q, k, v, None, pre, post, scaling=scaling),
        "sdpa": sdpa if not args.interpret else None,
    }, torch


def measure(fn, tensors, args, torch):
    """(median seconds of forward+backward, peak bytes above the inputs) or an error string."""
    cuda = tensors[0].is_cuda

    def step():
        out = fn(*tensors)
        out.backward(torch.ones_like(out))
        for t in tensors:
            t.grad = None

    try:
        step()  # warm-up: compiles
        times = []
        for _ in range(args.repeats):
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            start = time.perf_counter()
            step()
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        peak = torch.cuda.max_memory_allocated() - base if cuda else float("nan")
        return statistics.median(times), peak
    except torch.cuda.OutOfMemoryError:
        return "out of memory", None
    finally:
        if cuda:
            torch.cuda.empty_cache()


def accuracy(args, dtype_name, run, torch):
    """{tensor: max |kernel - eager float32|} on the same inputs at n = check_len."""
    dtype = getattr(torch, dtype_name)
    ins = inputs(args, args.check_len, dtype, args.device, seed=1)
    ref_ins = [t.detach().float().requires_grad_(True) for t in ins]
    out = run["triton"](*ins)
    ref = run["eager"](*ref_ins)
    grad = torch.randn(ref.shape, generator=torch.Generator().manual_seed(2)).to(ref.device)
    out.backward(grad.to(out.dtype))
    ref.backward(grad)
    found = {"out": (out.float() - ref).abs().max().item()}
    for name, mine, theirs in zip(("dq", "dk", "dv", "dpre", "dpost"), ins, ref_ins):
        found[name] = (mine.grad.float() - theirs.grad).abs().max().item()
    return found


def main(argv=None) -> int:
    args = parse(argv)
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (by the kernel module, below)
    run, torch = methods(args)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_kernel: no CUDA device (use --interpret for the CPU smoke test)")
        return 2
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU, Triton interpreter"
    print(
        f"bench_kernel: {where}; torch {torch.__version__}; batch {args.batch}, {args.heads} heads of "
        f"{args.head_size}",
        flush=True,
    )
    rows = []
    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        for n in args.seq_lens:
            tensors = inputs(args, n, dtype, args.device)
            for name, fn in run.items():
                if fn is None:
                    continue
                if name == "eager" and n > args.eager_max_len:
                    result = ("skipped", None)
                else:
                    result = measure(fn, tensors, args, torch)
                seconds, peak = result
                row = dict(
                    dtype=dtype_name,
                    n=n,
                    method=name,
                    ms=round(seconds * 1e3, 2) if isinstance(seconds, float) else seconds,
                    peak_mb=round(peak / 2**20, 1) if isinstance(peak, (int, float)) else None,
                )
                rows.append(row)
                print(json.dumps(row), flush=True)
            del tensors
        check = accuracy(args, dtype_name, run, torch)
        row = dict(
            dtype=dtype_name,
            n=args.check_len,
            method="max |triton - eager fp32|",
            **{k: float(f"{v:.3g}") for k, v in check.items()},
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.markdown:
        print("\n| dtype | n | method | fwd+bwd ms | peak MB |\n|---|---|---|---|---|")
        for r in rows:
            if "ms" in r:
                print(f"| {r['dtype']} | {r['n']} | {r['method']} | {r['ms']} | {r['peak_mb']} |")
        print("\n| dtype | n | out | dq | dk | dv | dpre | dpost |\n|---|---|---|---|---|---|---|---|")
        for r in rows:
            if "out" in r:
                print(
                    f"| {r['dtype']} | {r['n']} | "
                    + " | ".join(f"{r[k]:.2e}" for k in ("out", "dq", "dk", "dv", "dpre", "dpost"))
                    + " |"
                )
    if args.json:
        Path(args.json).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
