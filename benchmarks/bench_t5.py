"""Generation speed with a cache and training step time of VariantT5, as ratios against transformers' T5.

Run from the repository root:

    python benchmarks/bench_t5.py --markdown      # t5-small shapes (d_model 512, 8 heads, d_ff 2048)
    python benchmarks/bench_t5.py --quick         # tiny shapes, a smoke run of seconds
    python benchmarks/bench_t5.py --device cuda --dtype bfloat16   # on a GPU

Every row is a `T5ForConditionalGeneration`-shaped model (`--num-layers` encoder and decoder layers) built from the
same seed. Per repeat every model runs in turn (interleaved) and the tables report the fastest of `--repeats`:
- generate: `generate(max_new_tokens=min_new_tokens=--new-tokens, greedy, use_cache=True)` on `--batch-size`
  sources of `--source-len` tokens, in tokens per second (higher is better) and as a ratio of time;
- train step: forward with `labels` (`--target-len` tokens) and backward, dropout 0.1, in milliseconds.
Ratios are time / time of transformers' T5 with eager attention (`eager`) and with SDPA (`sdpa`).

On a GPU (`--device cuda`) times come from CUDA events (bench_attention.Clock), a `flash_attention_2` row joins
where flash-attn is installed and transformers' T5 supports it (T5 5.x does not: its position bias), and "peak MiB"
is `torch.cuda.max_memory_allocated` during one training step above what the model and inputs hold. `--dtype` casts
the weights. On the CPU in float32 the output is what it always was.
"""

import argparse

import torch
import transformers
from transformers import T5Config, T5ForConditionalGeneration
from transformers.utils import is_flash_attn_2_available

import hf_attn_variants
from bench_attention import DTYPES, SETUPS, Clock, resolve_device

# name -> (whose model, config kwargs): transformers' T5 (eager, sdpa), then every attention setup (bench_attention)
ROWS = {
    "eager": ("transformers", {"attn_implementation": "eager"}),
    "sdpa": ("transformers", {"attn_implementation": "sdpa"}),
    **{name: ("ours", fields) for name, fields in SETUPS.items()},
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--num-heads", type=int, default=8)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--source-len", type=int, default=128)
    p.add_argument("--target-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--variants", nargs="+", choices=list(ROWS), default=list(ROWS), metavar="NAME")
    p.add_argument("--quick", action="store_true", help="tiny shapes: d_model 64, 4 heads, 1 repeat")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32", help="the models' weights (no autocast)")
    args = p.parse_args()
    args.device = resolve_device(p, args.device)
    if args.quick:
        args.d_model, args.num_heads, args.batch_size, args.source_len = 64, 4, 2, 16
        args.target_len, args.new_tokens, args.repeats = 8, 8, 1
    args.variants = ["eager", "sdpa", *(v for v in args.variants if v not in ("eager", "sdpa"))]
    if (
        args.device.type == "cuda"
        and args.dtype != "float32"
        and is_flash_attn_2_available()
        and T5ForConditionalGeneration._supports_flash_attn
    ):
        args.variants.insert(2, "flash")
    return args


def build(name, args):
    whose, kwargs = ("transformers", {"attn_implementation": "flash_attention_2"}) if name == "flash" else ROWS[name]
    common = dict(
        vocab_size=1000,
        d_model=args.d_model,
        num_heads=args.num_heads,
        d_kv=args.d_model // args.num_heads,
        d_ff=4 * args.d_model,
        num_layers=args.num_layers,
        dropout_rate=0.1,
        decoder_start_token_id=0,
    )
    torch.manual_seed(0)
    if whose == "transformers":
        model = T5ForConditionalGeneration(T5Config(**common, **kwargs))
    else:
        config = hf_attn_variants.VariantT5Config(
            **common, synthesizer_max_position=max(args.source_len, 512), **kwargs
        )
        model = hf_attn_variants.VariantT5ForConditionalGeneration(config)
    return model.to(device=args.device, dtype=DTYPES[args.dtype])


def time_generate(model, ids, args):
    model.eval()
    with torch.no_grad(), Clock(args.device) as clock:
        out = model.generate(
            ids,
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            do_sample=False,
            use_cache=True,
            decoder_start_token_id=0,
        )
    assert out.shape[1] == args.new_tokens + 1
    return clock.ms / 1e3


def time_train_step(model, ids, labels):
    model.train()
    model.zero_grad(set_to_none=True)
    with Clock(ids.device) as clock:
        model(input_ids=ids, labels=labels).loss.backward()
    model.zero_grad(set_to_none=True)
    return clock.ms / 1e3


def peak_train_mib(model, ids, labels):
    """CUDA only: torch.cuda.max_memory_allocated during one training step, above what was allocated before it."""
    model.train()
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    model(input_ids=ids, labels=labels).loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    model.zero_grad(set_to_none=True)
    return peak / 2**20


def main():
    args = parse_args()
    models = {name: build(name, args) for name in args.variants}
    torch.manual_seed(1)
    ids = torch.randint(2, 1000, (args.batch_size, args.source_len)).to(args.device)
    labels = torch.randint(2, 1000, (args.batch_size, args.target_len)).to(args.device)
    gen = {name: [] for name in models}
    train = {name: [] for name in models}
    for step in range(args.warmup + args.repeats):
        for name, model in models.items():  # interleaved
            timings = time_generate(model, ids, args), time_train_step(model, ids, labels)
            if step >= args.warmup:
                gen[name].append(timings[0])
                train[name].append(timings[1])
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}; "
        f"d_model {args.d_model}, heads {args.num_heads}, layers {args.num_layers}+{args.num_layers}, batch "
        f"{args.batch_size}, source {args.source_len}, target {args.target_len}, {args.new_tokens} new tokens; "
        f"fastest of {args.repeats} (warmup {args.warmup})\n"
    )
    gpu = args.device.type == "cuda"
    if gpu or args.dtype != "float32":
        name = torch.cuda.get_device_name(args.device) if gpu else "cpu"
        print(f"device {args.device} ({name}), weights {args.dtype}\n")
    header = [
        "variant",
        "generate tok/s",
        "gen time / eager",
        "gen time / sdpa",
        "train step ms",
        "step / eager",
        "step / sdpa",
    ]
    peaks = {name: peak_train_mib(model, ids, labels) for name, model in models.items()} if gpu else {}
    if gpu:
        header += ["peak MiB", "peak / sdpa"]
    rows = []
    for name in models:
        g, t = min(gen[name]), min(train[name])
        rows.append(
            [
                name,
                f"{args.batch_size * args.new_tokens / g:.0f}",
                f"{g / min(gen['eager']):.2f}",
                f"{g / min(gen['sdpa']):.2f}",
                f"{t * 1e3:.0f}",
                f"{t / min(train['eager']):.2f}",
                f"{t / min(train['sdpa']):.2f}",
            ]
        )
        if gpu:
            rows[-1] += [f"{peaks[name]:.1f}", f"{peaks[name] / peaks['sdpa']:.2f}"]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for i, row in enumerate((header, *rows)):
        cells = [c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))]
        print("| " + " | ".join(cells) + " |" if args.markdown else "  ".join(cells))
        if i == 0:
            print(
                "|"
                + "|".join(
                    (":" if j == 0 else "") + "-" * (w + 1) + ("" if j == 0 else ":") for j, w in enumerate(widths)
                )
                + "|"
                if args.markdown
                else "  ".join("-" * w for w in widths)
            )


if __name__ == "__main__":
    main()
