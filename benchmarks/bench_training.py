"""The whole training step (forward, backward, AdamW step) of our models against transformers' own, as ratios.

Run from the repository root:

    python benchmarks/bench_training.py --markdown                        # every setting, eager and torch.compile
    python benchmarks/bench_training.py --settings mini-128 --modes eager # one setting, no compilation
    python benchmarks/bench_training.py --only talking_heads --sparse on  # chosen rows (the references always run)
    python benchmarks/bench_training.py --quick                           # tiny shapes, a smoke run of seconds
    python benchmarks/bench_training.py --device cuda --dtype bfloat16    # on a GPU

A setting is a model size and a batch (`SETTINGS`): masked LM on `--family` (bert: BertForMaskedLM against our
VariantBertForMaskedLM; albert: AlbertForMaskedLM against VariantAlbertForMaskedLM) with the size's preset
(`hf_attn_variants.presets`, the shapes the example scripts train), or T5 span corruption (T5ForConditionalGeneration
against VariantT5ForConditionalGeneration on inputs of n tokens and targets of n/4, the lengths span corruption
with noise density 0.15 and mean span 3 gives). Masked-LM labels are at 15% of the positions (-100 elsewhere), as the
examples' collator makes them.

Rows: `sdpa` and `eager` are transformers' model with that `attn_implementation` (the references); the others are
ours (`ROWS`): dot product, talking heads, Synthesizer random and mixture (dot product + random), and the deep
single-head twin of the size's dot-product model (`single_head_twin`, plain and with Admin residuals), each with
the full masked-LM head and, as `<row>+sparse`, called with `sparse_prediction=True` (masked LM only). Every row is
built from the same seed and trained on the same batch; per repeat every row runs one step in turn (interleaved), and the tables report the
fastest of `--repeats` steps after `--warmup`. A step is `loss = model(**batch).loss; loss.backward();
optimizer.step(); optimizer.zero_grad(set_to_none=True)` with `torch.optim.AdamW` (lr 1e-4), in train mode
(the configs' dropout on).

`--modes compile` wraps every model, ours and transformers' alike, in `torch.compile(model,
backend=--compile-backend)` (not fullgraph, as Trainer's `--torch_compile` does, with
`capture_dynamic_output_shape_ops` so that sparse prediction stays one graph: docs/training.md); ratios in a compiled
table are against compiled references. "compile s" is the first step's time (compilation of forward and backward) less
the fastest step; "compiled / uncompiled" (when both modes run) is the row's compiled step over its eager-mode step
measured just before in the same process (the two modes are not interleaved). On a GPU (`--device cuda`) times come
from CUDA events (bench_attention.Clock) and "peak MiB" is `torch.cuda.max_memory_allocated` during one step above
what was allocated before it; `--dtype` casts the weights (pure bf16 / fp16, no autocast, AdamW on those weights).
"""

import argparse
import functools

import torch
import transformers

import hf_attn_variants
from bench_attention import DTYPES, Clock, format_ops, format_table, resolve_device, top_ops
from hf_attn_variants.families import FAMILIES
from hf_attn_variants.presets import SIZES, preset_config, single_head_twin

# name -> (task, size, vocab_size, batch, seq_len). T5 targets are seq_len // 4 tokens.
SETTINGS = {
    "mini-128": ("mlm", "mini", 8000, 16, 128),
    "base-128": ("mlm", "base", 30522, 8, 128),
    "base-512": ("mlm", "base", 30522, 2, 512),
    "t5-small": ("t5", "small", 32128, 8, 128),
}
QUICK_SETTINGS = {
    "tiny-32": ("mlm", "tiny", 1000, 2, 32),
    "t5-tiny": ("t5", "tiny", 1000, 2, 32),
}
REFERENCES = {"sdpa": "sdpa", "eager": "eager"}  # row -> transformers' attn_implementation
# row -> the attention of our preset (presets.ATTENTION); the twins are of the size's dot-product model
ROWS = {
    "dot_product": "dot-product",
    "talking_heads": "talking-heads",
    "synth_random": "synthesizer-random",
    "synth_mixture": "synthesizer-mixture",
    "single_head_twin": "dot-product",
    "single_head_twin_admin": "dot-product",
}
MLM_ONLY = ("single_head_twin", "single_head_twin_admin")  # T5 settings run the attention rows only
MLM_PROBABILITY = 0.15


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--settings",
        nargs="+",
        default=None,
        metavar="NAME",
        help=f"of {', '.join(SETTINGS)} (default: all; --quick: {', '.join(QUICK_SETTINGS)})",
    )
    p.add_argument("--family", choices=["bert", "albert"], default="bert", help="the masked-LM family")
    p.add_argument(
        "--only",
        nargs="+",
        choices=list(ROWS),
        default=list(ROWS),
        metavar="NAME",
        help=f"our rows to run, of {', '.join(ROWS)}; sdpa and eager always run as references",
    )
    p.add_argument(
        "--sparse",
        nargs="+",
        choices=["off", "on"],
        default=["off", "on"],
        help="sparse_prediction of our masked-LM rows (on: the `<row>+sparse` rows)",
    )
    p.add_argument(
        "--modes",
        nargs="+",
        choices=["eager", "compile"],
        default=None,
        help="eager and/or torch.compile (default: both; --quick: eager)",
    )
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend (inductor, aot_eager, ...)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="steps per row before timing (the first compiles)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: settings {', '.join(QUICK_SETTINGS)}, 1 repeat, eager only unless --modes",
    )
    p.add_argument("--markdown", action="store_true", help="print markdown tables")
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="K",
        help="after the timed steps, profile one more step of each row (torch.profiler) and print its K "
        "ops with the most self time, with call counts and their share of the step",
    )
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32", help="the models' weights (no autocast)")
    args = p.parse_args(argv)
    args.device = resolve_device(p, args.device)
    settings = QUICK_SETTINGS if args.quick else SETTINGS
    args.settings = args.settings or list(settings)
    unknown = [name for name in args.settings if name not in settings]
    if unknown:
        p.error(
            f"--settings {' '.join(unknown)}: choose from {', '.join(settings)}"
            + ("" if args.quick else f" (--quick: {', '.join(QUICK_SETTINGS)})")
        )
    args.settings = {name: settings[name] for name in args.settings}
    if args.quick:
        args.repeats = 1
    args.modes = args.modes or (["eager"] if args.quick else ["eager", "compile"])
    if args.warmup < 1 and "compile" in args.modes:
        p.error("--modes compile needs --warmup >= 1 (the first step compiles)")
    return args


def row_names(task, args):
    """The rows of one setting: the references, then ours (and their `+sparse` twins for masked LM)."""
    names = list(REFERENCES)
    for row in args.only:
        if task == "t5":
            if row not in MLM_ONLY:
                names.append(row)
            continue
        names += [row] * ("off" in args.sparse) + [f"{row}+sparse"] * ("on" in args.sparse)
    return names


def build(name, task, size, vocab_size, args):
    """Row `name` of a setting, on `args.device` in `args.dtype`, from `args.seed`."""
    family = FAMILIES["t5" if task == "t5" else args.family]
    head = "ForConditionalGeneration" if task == "t5" else "ForMaskedLM"
    shape = {key: value for key, value in SIZES[family.name][size].items() if not key.startswith("synthesizer_")}
    common = dict(vocab_size=vocab_size, **({"decoder_start_token_id": 0} if task == "t5" else {}))
    torch.manual_seed(args.seed)
    if name in REFERENCES:
        config = getattr(transformers, family.upstream_config)(**shape, **common)
        model = getattr(transformers, f"{family.prefix}{head}")(config)
        model.set_attn_implementation(REFERENCES[name])
    else:
        row, overrides = name.removesuffix("+sparse"), dict(common)
        if row == "single_head_twin_admin":
            overrides["admin"] = True
        config = preset_config(f"{family.name}-{size}-{ROWS[row]}", **overrides)
        if row.startswith("single_head_twin"):
            config, _ = single_head_twin(config)
        model = getattr(hf_attn_variants, f"Variant{family.prefix}{head}")(config)
    return model.to(device=args.device, dtype=DTYPES[args.dtype]).train()


def make_batch(task, vocab_size, batch_size, seq_len, args):
    """One batch for every row: masked LM ids with labels at 15% of the positions, or T5 inputs and targets."""
    g = torch.Generator().manual_seed(args.seed + 1)
    ids = torch.randint(5, vocab_size, (batch_size, seq_len), generator=g)
    if task == "t5":
        labels = torch.randint(5, vocab_size, (batch_size, seq_len // 4), generator=g)
        batch = dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    else:
        scored = torch.rand(batch_size, seq_len, generator=g) < MLM_PROBABILITY
        scored[:, 1] = True  # at least one label per row
        batch = dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids.masked_fill(~scored, -100))
    return {key: value.to(args.device) for key, value in batch.items()}


class Trainee:
    """A model (compiled or not) with its AdamW optimizer; `step(batch)` runs and times one training step."""

    def __init__(self, model, args, compiled, **call_kwargs):
        self.model, self.call_kwargs = model, call_kwargs  # call_kwargs: sparse_prediction=True for `+sparse` rows
        self.run = torch.compile(model, backend=args.compile_backend) if compiled else model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.device = args.device

    def _step(self, batch):
        self.run(**batch, **self.call_kwargs).loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def step(self, batch) -> float:
        with Clock(self.device) as clock:
            self._step(batch)
        return clock.ms

    def profile(self, batch, top: int) -> list:
        """One step under torch.profiler: its `top` ops by self time (bench_attention.top_ops)."""
        return top_ops(functools.partial(self._step, batch), self.device, top)

    def peak_mib(self, batch) -> float:
        """CUDA only: torch.cuda.max_memory_allocated during one step, above what was allocated before it."""
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        self._step(batch)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20


def measure(setting, mode, args):
    task, size, vocab_size, batch_size, seq_len = setting
    torch._dynamo.reset()
    batch = make_batch(task, vocab_size, batch_size, seq_len, args)
    trainees = {
        name: Trainee(
            build(name, task, size, vocab_size, args),
            args,
            mode == "compile",
            **({"sparse_prediction": True} if name.endswith("+sparse") else {}),
        )
        for name in row_names(task, args)
    }
    times = {name: [] for name in trainees}
    for _ in range(args.warmup + args.repeats):
        for name, trainee in trainees.items():  # interleaved: every row once per repeat
            times[name].append(trainee.step(batch))
    results = {}
    for name, trainee in trainees.items():
        fastest = min(times[name][args.warmup :])
        results[name] = {"step": fastest, "compile": (times[name][0] - fastest) / 1e3 if mode == "compile" else None}
        if args.device.type == "cuda":
            results[name]["peak"] = trainee.peak_mib(batch)
        if args.profile:
            results[name]["profile"] = trainee.profile(batch, args.profile)
    return results


def table(results, uncompiled=None):
    """The rows' step times and ratios; a compiled table also gives the compile time and, with `uncompiled` (the
    eager-mode results of the same setting, same process), what compilation buys each row."""
    header = ["row", "step ms", "step / sdpa", "step / eager"]
    sdpa, eager = results["sdpa"]["step"], results["eager"]["step"]
    rows = [
        [name, f"{r['step']:.1f}", f"{r['step'] / sdpa:.2f}", f"{r['step'] / eager:.2f}"]
        for name, r in results.items()
    ]
    if results["sdpa"]["compile"] is not None:
        header.append("compile s")
        for row, r in zip(rows, results.values()):
            row.append(f"{r['compile']:.1f}")
        if uncompiled is not None:
            header.append("compiled / uncompiled")
            for row, (name, r) in zip(rows, results.items()):
                row.append(f"{r['step'] / uncompiled[name]['step']:.2f}")
    if "peak" in results["sdpa"]:
        header += ["peak MiB", "peak / sdpa"]
        for row, r in zip(rows, results.values()):
            row += [f"{r['peak']:.1f}", f"{r['peak'] / results['sdpa']['peak']:.2f}"]
    return header, rows


def twin_ratios(results):
    """The deep twins' step time over their multi-head original (our dot-product row, same sparse setting)."""
    lines = []
    for name, r in results.items():
        if name.startswith("single_head_twin"):
            original = "dot_product" + ("+sparse" if name.endswith("+sparse") else "")
            if original in results:
                lines.append(f"{name} / {original}: {r['step'] / results[original]['step']:.2f}")
    return lines


def main(argv=None):
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch._dynamo.config.recompile_limit = 64  # every row compiles the same forward code objects
    torch._dynamo.config.capture_dynamic_output_shape_ops = True  # sparse_prediction: one graph, no break
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, hf_attn_variants "
        f"{hf_attn_variants.__version__}, threads {torch.get_num_threads()}; family {args.family} (masked LM); "
        f"AdamW step, fastest of {args.repeats} (warmup {args.warmup}); compile backend {args.compile_backend}"
    )
    if args.device.type != "cpu" or args.dtype != "float32":
        name = torch.cuda.get_device_name(args.device) if args.device.type == "cuda" else "cpu"
        print(f"device {args.device} ({name}), weights {args.dtype}")
    for setting_name, setting in args.settings.items():
        task, size, vocab_size, batch_size, seq_len = setting
        uncompiled = None
        for mode in args.modes:
            results = measure(setting, mode, args)
            model = "t5" if task == "t5" else args.family
            print(
                f"\n{'### ' if args.markdown else ''}{setting_name}: {model}-{size}, vocab {vocab_size}, batch "
                f"{batch_size} x {seq_len}{f' (targets {seq_len // 4})' if task == 't5' else ''}, {mode}\n"
            )
            print(format_table(*table(results, uncompiled), markdown=args.markdown))
            uncompiled = results if mode == "eager" else uncompiled
            ratios = twin_ratios(results)
            if ratios:
                print("\n" + "\n".join(ratios))
            for name, r in results.items():
                if "profile" in r:
                    print(
                        f"\n{'#### ' if args.markdown else ''}{setting_name}, {mode}, {name}: one step's top ops "
                        "by self time\n"
                    )
                    print(format_ops(r["profile"], args.markdown))


if __name__ == "__main__":
    main()
