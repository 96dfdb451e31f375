"""Speed and activation memory of the attention variants, as ratios against transformers' own BERT or ALBERT.

Run from the repository root:

    python benchmarks/bench_attention.py --markdown                   # BERT-base layers, seq 128 and 512
    python benchmarks/bench_attention.py --markdown --family albert   # the same for ALBERT (embedding 128, 1 group)
    python benchmarks/bench_attention.py --quick                      # tiny shapes, a smoke run of seconds
    python benchmarks/bench_attention.py --device cuda --dtype bfloat16 --seq-lens 512 2048   # on a GPU

Every row is a bare encoder (embeddings, `--num-layers` layers, pooler) built from the same seed and fed the same
random `input_ids` with an all-ones `attention_mask`. Per sequence length all models are built once, then each
repeat runs every model in turn (interleaved), so drift in machine speed hits all rows alike; the tables report
the fastest of `--repeats` runs (on a shared VM the median moved by up to 20% between identical runs; the
minimum, the cost without interference, is far more repeatable; `--stat median` reports the median instead, and on a
machine loaded by other processes `--clock process` times the process's own CPU time, which time-slicing does not
inflate when torch runs one thread, e.g. `OMP_NUM_THREADS=1`). Measured per row:

- fwd: one forward pass in eval mode under `torch.no_grad()`.
- fwd+bwd: one forward and backward pass in train mode (dropout 0.1 on; `--attention-dropout` sets the attention's) of
  `last_hidden_state.float().pow(2).mean()`, gradients cleared between runs.
- saved: bytes of the tensors autograd saves for backward in one train-mode forward, found with
  `torch.autograd.graph.saved_tensors_hooks`, each storage counted once, parameters and buffers left out. For
  `talking-heads-recompute` this counts what `torch.utils.checkpoint` keeps (the inputs of the attention core)
  and not the intermediates it recomputes in backward, which is the memory actually held.

Ratios are against `eager` (transformers' BertModel or AlbertModel with eager attention: the 1.00 reference) and
`sdpa` (the same with SDPA).

On a GPU (`--device cuda`) the times come from CUDA events around each pass (the GPU's own clock, after a
synchronisation), a `flash_attention_2` row of transformers' model joins where the flash-attn package is installed
and `--dtype` is bfloat16 or float16, and a "peak MiB" column gives `torch.cuda.max_memory_allocated` during one
fwd+bwd pass above what the model and inputs hold. `--dtype` casts the models' weights (pure bf16 / fp16, no
autocast). On the CPU and in float32 the output is what it always was.
The cost of a row is dominated by its layers and identical layers repeat, so the ratios barely move with depth:
`--num-layers` defaults to 2 to keep the run short. The FFN width is 4 x `--hidden-size`; synthesizers keep
BERT's `max_position_embeddings` (512) as their longest sequence, as a model trained at 512 would.
"""

import argparse
import statistics
import time

import torch
import transformers
from transformers import AlbertConfig, AlbertModel, BertConfig, BertModel
from transformers.utils import is_flash_attn_2_available

import hf_attn_variants
from hf_attn_variants.presets import ATTENTION

# setup -> config kwargs: the presets' setup of every registered attention type (its registration's presets), by preset
# suffix; the single-head twins are bench_single_head.py's
SETUPS = {name: fields for name, (fields, _) in ATTENTION.items() if "attention_type" in fields}
DYNAMIC = ["x2l", "m2l", "x2w", "m2w"]
# name -> (whose model, config kwargs). "transformers" is BertModel/AlbertModel (eager: the 1.00 reference), "ours"
# the variant model (SDPA where it can use it, as by default): every setup, then variants of two of them.
ROWS = {
    "eager": ("transformers", {"attn_implementation": "eager"}),
    "sdpa": ("transformers", {"attn_implementation": "sdpa"}),
    **{name: ("ours", fields) for name, fields in SETUPS.items()},
    **{
        f"talking-heads{suffix}": ("ours", {**SETUPS["talking-heads"], **fields})
        for suffix, fields in (
            ("-eager", {"attention_algorithm": "eager"}),
            ("-blockwise", {"attention_algorithm": "blockwise"}),
            ("-recompute", {"attention_algorithm": "eager", "attention_recompute": True}),
            ("-dynamic", {"talking_heads_dynamic": DYNAMIC}),
            ("-dynamic-eager", {"talking_heads_dynamic": DYNAMIC, "attention_algorithm": "eager"}),
        )
    },
    "synthesizer-factorized-random": (
        "ours",
        {**SETUPS["synthesizer-random"], "synthesizer_components": ["factorized_random"]},
    ),
    "synthesizer-factorized-dense": (
        "ours",
        {**SETUPS["synthesizer-dense"], "synthesizer_components": ["factorized_dense"]},
    ),
}
REFERENCES = ("eager", "sdpa")
FLASH = ("transformers", {"attn_implementation": "flash_attention_2"})  # joins on a GPU where flash-attn is installed
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
STATS = {"min": min, "median": statistics.median}


def add_timing_args(p):
    """--stat and --clock, shared with bench_single_head.py."""
    p.add_argument("--stat", choices=list(STATS), default="min", help="of the repeats (default: the fastest)")
    p.add_argument(
        "--clock",
        choices=["wall", "process"],
        default="wall",
        help="CPU only: wall time, or this process's CPU time (robust to other load with one thread)",
    )


def resolve_device(parser, device: str) -> torch.device:
    """`--device` as a torch.device: cpu, or cuda / cuda:N where torch sees a CUDA device (else a parser error)."""
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {device}: torch {torch.__version__} sees no CUDA device")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device {device}: use cpu or cuda")
    return device


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-lens", type=int, nargs="+", default=[128, 512])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--hidden-size", type=int, default=768)
    p.add_argument("--num-heads", type=int, default=12)
    p.add_argument("--num-layers", type=int, default=2, help="ratios are dominated by the per-layer cost")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    add_timing_args(p)
    p.add_argument(
        "--variants",
        nargs="+",
        choices=list(ROWS),
        default=list(ROWS),
        metavar="NAME",
        help=f"rows to run, of {', '.join(ROWS)}; eager and sdpa are always run as references",
    )
    p.add_argument("--attention-dropout", type=float, default=0.1, help="attention_probs_dropout_prob of every row")
    p.add_argument("--family", choices=["bert", "albert"], default="bert")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--quick", action="store_true", help="smoke run: hidden 64, 4 heads, seq 16 32, batch 2, repeats 1, warmup 0"
    )
    p.add_argument("--markdown", action="store_true", help="print markdown tables")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32", help="the models' weights (no autocast)")
    args = p.parse_args()
    Clock.process = args.clock == "process"
    args.device = resolve_device(p, args.device)
    if args.quick:
        args.hidden_size, args.num_heads, args.seq_lens = 64, 4, [16, 32]
        args.batch_size, args.repeats, args.warmup = 2, 1, 0
    args.variants = [*REFERENCES, *(v for v in args.variants if v not in REFERENCES)]
    if args.device.type == "cuda" and args.dtype != "float32" and is_flash_attn_2_available():
        args.variants.insert(len(REFERENCES), "flash")
    return args


def build_model(name, args):
    family, kwargs = FLASH if name == "flash" else ROWS[name]
    common = dict(
        vocab_size=1000,
        hidden_size=args.hidden_size,
        num_attention_heads=args.num_heads,
        num_hidden_layers=args.num_layers,
        intermediate_size=4 * args.hidden_size,
        max_position_embeddings=max(512, *args.seq_lens),
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=args.attention_dropout,
    )
    if args.family == "albert":
        common.update(embedding_size=128, num_hidden_groups=1, hidden_act="gelu")
    torch.manual_seed(args.seed)
    if family == "transformers":
        ref_model, ref_config = (AlbertModel, AlbertConfig) if args.family == "albert" else (BertModel, BertConfig)
        model = ref_model(ref_config(**common, **kwargs))
    elif args.family == "albert":
        model = hf_attn_variants.VariantAlbertModel(hf_attn_variants.VariantAlbertConfig(**common, **kwargs))
    else:
        model = hf_attn_variants.VariantBertModel(hf_attn_variants.VariantBertConfig(**common, **kwargs))
    return model.to(device=args.device, dtype=DTYPES[args.dtype])


class Clock:
    """Milliseconds of the code in a `with` block: wall clock on the CPU (`Clock.process = True`: this process's CPU
    time); on a GPU, CUDA events recorded around it on the current stream, read after a synchronisation (the kernels'
    own time, not the launch time)."""

    process = False  # set from --clock process

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.now = time.process_time if self.process else time.perf_counter

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.start.record()
        else:
            self.t0 = self.now()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.end.record()
            torch.cuda.synchronize()
            self.ms = self.start.elapsed_time(self.end)
        else:
            self.ms = (self.now() - self.t0) * 1e3


def top_ops(call, device, top: int) -> list:
    """`call()` once under torch.profiler: its `top` ops by self time (device time on a GPU), as (name, calls, self
    ms, share of the total self time)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        call()
    attribute = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events = prof.key_averages()
    total = sum(getattr(e, attribute) for e in events) or 1.0
    ranked = sorted(events, key=lambda e: getattr(e, attribute), reverse=True)[:top]
    return [(e.key, e.count, getattr(e, attribute) / 1e3, getattr(e, attribute) / total) for e in ranked]


def format_ops(ops: list, markdown: bool) -> str:
    """`top_ops`'s list as a table."""
    rows = [[op, str(calls), f"{ms:.1f}", f"{share:.1%}"] for op, calls, ms, share in ops]
    return format_table(["op", "calls", "self ms", "share"], rows, markdown=markdown)


def time_forward(model, inputs):
    model.eval()
    with torch.no_grad(), Clock(next(model.parameters()).device) as clock:
        model(**inputs)
    return clock.ms


def time_forward_backward(model, inputs):
    model.train()
    model.zero_grad(set_to_none=True)
    with Clock(next(model.parameters()).device) as clock:
        out = model(**inputs)
        out.last_hidden_state.float().pow(2).mean().backward()
    model.zero_grad(set_to_none=True)
    return clock.ms


def peak_memory_mib(model, inputs):
    """CUDA only: torch.cuda.max_memory_allocated during one fwd+bwd pass, above what was allocated before it."""
    model.train()
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    model(**inputs).last_hidden_state.float().pow(2).mean().backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    model.zero_grad(set_to_none=True)
    return peak / 2**20


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
        "input_ids": torch.randint(0, 1000, (args.batch_size, seq_len)).to(args.device),
        "attention_mask": torch.ones(args.batch_size, seq_len, dtype=torch.long).to(args.device),
    }
    fwd = {name: [] for name in models}
    fwd_bwd = {name: [] for name in models}
    for step in range(args.warmup + args.repeats):
        for name, model in models.items():  # interleaved: every model once per repeat
            t_fwd, t_fwd_bwd = time_forward(model, inputs), time_forward_backward(model, inputs)
            if step >= args.warmup:
                fwd[name].append(t_fwd)
                fwd_bwd[name].append(t_fwd_bwd)
    results = {
        name: {
            "fwd": STATS[args.stat](fwd[name]),
            "fwd_bwd": STATS[args.stat](fwd_bwd[name]),
            "saved": saved_activation_bytes(model, inputs) / 2**20,
        }
        for name, model in models.items()
    }
    if args.device.type == "cuda":
        for name, model in models.items():
            results[name]["peak"] = peak_memory_mib(model, inputs)
    return results


def table(results):
    header = [
        "variant",
        "fwd ms",
        "fwd / eager",
        "fwd / sdpa",
        "fwd+bwd ms",
        "fwd+bwd / eager",
        "fwd+bwd / sdpa",
        "saved MiB",
        "saved / eager",
    ]
    eager, sdpa = results["eager"], results["sdpa"]
    rows = [
        [
            name,
            f"{r['fwd']:.1f}",
            f"{r['fwd'] / eager['fwd']:.2f}",
            f"{r['fwd'] / sdpa['fwd']:.2f}",
            f"{r['fwd_bwd']:.1f}",
            f"{r['fwd_bwd'] / eager['fwd_bwd']:.2f}",
            f"{r['fwd_bwd'] / sdpa['fwd_bwd']:.2f}",
            f"{r['saved']:.1f}",
            f"{r['saved'] / eager['saved']:.2f}",
        ]
        for name, r in results.items()
    ]
    if "peak" in eager:  # on a GPU
        header += ["peak MiB", "peak / sdpa"]
        for row, r in zip(rows, results.values()):
            row += [f"{r['peak']:.1f}", f"{r['peak'] / sdpa['peak']:.2f}"]
    return header, rows


def format_table(header, rows, markdown):
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    align = [str.ljust] + [str.rjust] * (len(header) - 1)

    def line(cells):
        cells = [fn(cell, w) for fn, cell, w in zip(align, cells, widths)]
        return "| " + " | ".join(cells) + " |" if markdown else "  ".join(cells)

    rule = (
        "|" + "|".join(":" + "-" * (w + 1) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
        if markdown
        else "  ".join("-" * w for w in widths)
    )
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def main():
    args = parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(
        f"{args.family}: torch {torch.__version__}, transformers {transformers.__version__}, "
        f"hf_attn_variants {hf_attn_variants.__version__}, threads {torch.get_num_threads()}; "
        f"batch {args.batch_size}, hidden {args.hidden_size}, heads {args.num_heads}, layers {args.num_layers}, "
        f"{'fastest' if args.stat == 'min' else 'median'} of {args.repeats} (warmup {args.warmup}), {args.clock} clock"
    )
    if args.device.type != "cpu" or args.dtype != "float32":
        name = torch.cuda.get_device_name(args.device) if args.device.type == "cuda" else "cpu"
        print(f"device {args.device} ({name}), weights {args.dtype}; flash-attn rows: {'flash' in args.variants}")
    for seq_len in args.seq_lens:
        results = measure(args, seq_len)
        print(f"\n{'### ' if args.markdown else ''}seq_len {seq_len}\n")
        print(format_table(*table(results), markdown=args.markdown))


if __name__ == "__main__":
    main()
