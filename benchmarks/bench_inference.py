"""Inference of every family and attention type against transformers' own models on the same weights, as ratios.

Run from the repository root with the package installed or on PYTHONPATH (the file imports its siblings
bench_attention and bench_training, so run it as a file, as the other benchmarks):

    python benchmarks/bench_inference.py --markdown                       # every family, type and shape, padded or not
    python benchmarks/bench_inference.py --families bert --shapes mini-8x512 --types dot-product talking-heads
    python benchmarks/bench_inference.py --serving --shapes mini-16x64    # + pipelines, sentence-transformers, compile
    python benchmarks/bench_inference.py --training-bars                  # + the training bars (bench_attention/_training)
    python benchmarks/bench_inference.py --types dot-product --shapes mini-8x512 --profile 12  # + each row's top ops
    python benchmarks/bench_inference.py --quick                          # tiny shapes, a smoke run of seconds
    python benchmarks/bench_inference.py --device cuda                    # on a GPU

What runs: an eval-mode forward under `torch.inference_mode()` of the masked-LM heads of BERT and ALBERT and of T5's
encoder (`BertForMaskedLM`, `AlbertForMaskedLM`, `T5EncoderModel` against `VariantBertForMaskedLM`, ...) at the
presets' sizes (`hf_attn_variants.presets.SIZES`; bert-mini: 4 layers, width 256, 4 heads, FFN 1024) with
`max_position_embeddings` 512 and a vocabulary of 8000 (bert-base: 30522). transformers' model is built from `--seed`
and saved, and every row loads that checkpoint: transformers' class with `attn_implementation` "sdpa" and "eager" (the
references), ours with each attention type of `--types` (the presets' setups) through `from_pretrained(path,
attention_type=...)`, so whatever maps is the same weights: the dot-product variant is transformers' model exactly
(its largest output difference from the SDPA reference at real tokens is printed), the parameters a type adds get
their own init.

Shapes (`--shapes`, batch x length): 1x128, 16x64 and 8x512 at bert-mini, 8x512 at bert-base; each unpadded (an
all-ones mask) and padded (`--padding`): right padding, each row's length drawn uniformly from min(64, n/2)..n by a
generator seeded per shape, the mask 0 and the ids the pad token beyond it. A setting (family, shape, padding) runs
every row once per repeat (interleaved); the tables give the fastest of `--repeats` after `--warmup` (`--stat median`:
the median), as time / transformers' SDPA model and / its eager model. `--threads` (default 1) sets
`torch.set_num_threads`; on a machine shared with other work, one thread and `--clock process` (this process's CPU
time) keep the ratios steady.

`--serving` adds the calls users make, each against the same call on transformers' model with the same weights (the
mini size, the vocabulary and tokenizer of examples/data/kjv-wordpiece-8000, KJV verses as text):
`pipeline("fill-mask")` (one [MASK] per verse) and `pipeline("text-classification")` (a 2-label
`...ForSequenceClassification`) on `--sentences` verses in batches of `--serving-batch` (BERT and ALBERT);
sentence-transformers' `encode` of `--encode-sentences` verses, the model built from a saved checkpoint folder with
its tokenizer (`SentenceTransformer(folder, trust_remote_code=True)`: mean pooling, our rows through remote code;
BERT and ALBERT); and `torch.compile(model)` in eval mode at `--compile-shape` (unpadded; every family; the first
call compiles and is left out). `--training-bars` prints the training bars that must not regress beside the
inference rows: talking heads' forward and backward over transformers' eager `BertModel` (bench_attention: 2
layers of width 768, batch 8 x 512), its sparse-prediction training step and the dot-product variant's full-head
step over transformers' SDPA `BertForMaskedLM` (bench_training: mini-128).

On a GPU (`--device cuda`) times come from CUDA events after a synchronisation (bench_attention.Clock); `--dtype`
casts the weights.
"""

import argparse
import functools
import gzip
import os
import platform
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from transformers.utils import logging as hf_logging

import bench_attention
import bench_training
import hf_attn_variants
from bench_attention import (
    DTYPES,
    SETUPS,
    STATS,
    Clock,
    add_timing_args,
    format_ops,
    format_table,
    resolve_device,
    top_ops,
)
from hf_attn_variants.families import FAMILIES
from hf_attn_variants.presets import SIZES

# name -> (size, batch, length)
SHAPES = {
    "mini-1x128": ("mini", 1, 128),
    "mini-16x64": ("mini", 16, 64),
    "mini-8x512": ("mini", 8, 512),
    "base-8x512": ("base", 8, 512),
}
QUICK_SHAPES = {"tiny-2x32": ("tiny", 2, 32)}
ALL_SHAPES = {**SHAPES, **QUICK_SHAPES}
VOCAB = {"tiny": 1000, "mini": 8000, "base": 30522}
MAX_POSITION = 512
HEADS = {"bert": "ForMaskedLM", "albert": "ForMaskedLM", "t5": "EncoderModel"}  # transformers' head: prefix + this
REFERENCES = ("sdpa", "eager")  # transformers' model with this attn_implementation
PADDINGS = ("none", "padded")
DATA = Path(__file__).resolve().parents[1] / "examples" / "data"
TOKENIZER = DATA / "kjv-wordpiece-8000"
SERVING_FAMILIES = ("bert", "albert")  # pipelines and sentence-transformers: the encoder families with a [MASK]
# (what, bar): the training ratios that must not regress, printed with --training-bars
TRAINING_BARS = {
    "talking heads fwd+bwd / eager BertModel (2 layers, width 768, 8 x 512)": 1.24,
    "talking heads sparse-prediction step / SDPA BertForMaskedLM (mini-128)": 0.72,
    "dot product step (full head) / SDPA BertForMaskedLM (mini-128)": 1.03,
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--shapes",
        nargs="+",
        default=None,
        metavar="NAME",
        help=f"of {', '.join(SHAPES)} (default: all; --quick: {', '.join(QUICK_SHAPES)})",
    )
    p.add_argument("--families", nargs="+", choices=list(HEADS), default=list(HEADS))
    p.add_argument(
        "--types",
        nargs="+",
        choices=list(SETUPS),
        default=list(SETUPS),
        metavar="NAME",
        help=f"our rows, of {', '.join(SETUPS)}; transformers' sdpa and eager always run as references",
    )
    p.add_argument("--padding", nargs="+", choices=PADDINGS, default=list(PADDINGS))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    add_timing_args(p)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--serving", action="store_true", help="add pipelines, sentence-transformers and torch.compile")
    p.add_argument("--sentences", type=int, default=64, help="verses per pipeline call")
    p.add_argument("--serving-batch", type=int, default=16, help="the pipelines' batch_size")
    p.add_argument("--encode-sentences", type=int, default=512, help="verses per sentence-transformers encode")
    p.add_argument(
        "--compile-shape",
        default=None,
        metavar="NAME",
        help="the shape of the torch.compile rows (default: mini-16x64; --quick: tiny-2x32)",
    )
    p.add_argument("--training-bars", action="store_true", help="add the training bars (minutes at bert-base)")
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="K",
        help="after each setting's timed calls, profile one more forward of transformers' SDPA model and of each "
        "of our rows (torch.profiler) and print its K ops with the most self time",
    )
    p.add_argument("--quick", action="store_true", help="smoke run: tiny shapes, 1 repeat, few sentences")
    p.add_argument("--markdown", action="store_true", help="print markdown tables")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32", help="the models' weights (no autocast)")
    args = p.parse_args(argv)
    Clock.process = args.clock == "process"
    args.device = resolve_device(p, args.device)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.quick:
        args.repeats, args.sentences, args.encode_sentences, args.serving_batch = 1, 8, 16, 4
    args.compile_shape = args.compile_shape or ("tiny-2x32" if args.quick else "mini-16x64")
    args.shapes = args.shapes or list(shapes)
    unknown = [name for name in [*args.shapes, args.compile_shape] if name not in shapes]
    if unknown:
        p.error(
            f"shape {' '.join(unknown)}: choose from {', '.join(shapes)}"
            + ("" if args.quick else f" (--quick: {', '.join(QUICK_SHAPES)})")
        )
    if args.serving and args.warmup < 1:
        p.error("--serving needs --warmup >= 1 (the first torch.compile call compiles)")
    return args


def save_reference(family: str, size: str, head: str, vocab_size: int, folder: str, seed: int) -> None:
    """transformers' `family` model (`head`) at the presets' `size`, built from `seed`, saved to `folder`."""
    fam = FAMILIES[family]
    shape = {key: value for key, value in SIZES[family][size].items() if not key.startswith("synthesizer_")}
    if not fam.encoder_decoder:
        shape["max_position_embeddings"] = MAX_POSITION
    extra = {"num_labels": 2} if head == "ForSequenceClassification" else {}
    config = getattr(transformers, fam.upstream_config)(**shape, vocab_size=vocab_size, **extra)
    torch.manual_seed(seed)
    getattr(transformers, f"{fam.prefix}{head}")(config).save_pretrained(folder)


def type_fields(name: str) -> dict:
    """The config fields of our row `name` (a presets' setup), synthesizers attending over `MAX_POSITION`."""
    fields = dict(SETUPS[name])
    if fields["attention_type"] == "synthesizer":
        fields["synthesizer_max_position"] = MAX_POSITION
    return fields


def load_rows(family: str, head: str, folder: str, args) -> dict:
    """name -> model from the checkpoint in `folder`: transformers' (`REFERENCES`) and ours (`args.types`), in eval
    mode on `args.device`."""
    fam = FAMILIES[family]
    ours = getattr(hf_attn_variants, f"Variant{fam.prefix}{head}")
    theirs = getattr(transformers, f"{fam.prefix}{head}")
    models = {name: theirs.from_pretrained(folder, attn_implementation=name) for name in REFERENCES}
    # general bilinear's query projection is h times wider than the checkpoint's: it gets its own init
    models.update(
        {name: ours.from_pretrained(folder, ignore_mismatched_sizes=True, **type_fields(name)) for name in args.types}
    )
    return {name: model.to(device=args.device, dtype=DTYPES[args.dtype]).eval() for name, model in models.items()}


def make_inputs(batch: int, n: int, vocab_size: int, padded: bool, pad_id: int, args) -> dict:
    """Random ids, fixed per shape and seed; padded: right padding, lengths drawn from min(64, n/2)..n."""
    generator = torch.Generator().manual_seed(args.seed * 1_000_003 + batch * 1009 + n)
    ids = torch.randint(5, vocab_size, (batch, n), generator=generator)
    mask = torch.ones(batch, n, dtype=torch.long)
    if padded:
        lengths = torch.randint(min(64, n // 2), n + 1, (batch,), generator=generator)
        mask = (torch.arange(n) < lengths[:, None]).long()
        ids = ids.masked_fill(mask == 0, pad_id)
    return {"input_ids": ids.to(args.device), "attention_mask": mask.to(args.device)}


def time_rows(calls: dict, args) -> dict:
    """name -> `args.stat` (the fastest) of `args.repeats` timed calls after `args.warmup`, each call once per repeat
    (interleaved)."""
    times = {name: [] for name in calls}
    for step in range(args.warmup + args.repeats):
        for name, call in calls.items():
            with Clock(args.device) as clock:
                call()
            if step >= args.warmup:
                times[name].append(clock.ms)
    return {name: STATS[args.stat](values) for name, values in times.items()}


def forward_rows(models: dict, shape, padded: bool, vocab_size: int, args) -> tuple[dict, str]:
    """One setting: the rows' times, and a note (padding share; the dot-product row's largest output difference at
    real tokens)."""
    _, batch, n = shape
    inputs = make_inputs(batch, n, vocab_size, padded, models["sdpa"].config.pad_token_id or 0, args)
    notes = [f"{1 - inputs['attention_mask'].float().mean().item():.0%} padding"] if padded else []
    with torch.inference_mode():
        if "dot-product" in models:
            # at real tokens: unpadding leaves our padded positions' hidden states zero (docs/unpadding.md)
            real = inputs["attention_mask"].bool()
            diff = (models["dot-product"](**inputs)[0] - models["sdpa"](**inputs)[0])[real].abs().max().item()
            notes.append(f"dot-product max |diff| {diff:.1e} at real tokens")
        calls = {name: functools.partial(model, **inputs) for name, model in models.items()}
        times = time_rows(calls, args)
        if args.profile:
            label = f"{shape[0]}-{batch}x{n}{', padded' if padded else ''}"
            for name in ("sdpa", *args.types):
                ops = top_ops(calls[name], args.device, args.profile)
                print(f"\n{'#### ' if args.markdown else ''}{label}, {name}: one forward's top ops by self time\n")
                print(format_ops(ops, args.markdown), flush=True)
    return times, ", ".join(notes)


def measure_family(family: str, args) -> list:
    """[(label, times, note)] for every shape and padding of `family`, the rows loaded once per size."""
    results = []
    sizes = dict.fromkeys(ALL_SHAPES[name][0] for name in args.shapes)
    for size in sizes:
        with tempfile.TemporaryDirectory() as folder:
            save_reference(family, size, HEADS[family], VOCAB[size], folder, args.seed)
            models = load_rows(family, HEADS[family], folder, args)
        for name in args.shapes:
            shape = ALL_SHAPES[name]
            if shape[0] != size:
                continue
            for padding in args.padding:
                times, note = forward_rows(models, shape, padding == "padded", VOCAB[size], args)
                results.append((f"{name}{', padded' if padding == 'padded' else ''}", times, note))
                print(f"{family} {results[-1][0]}: done ({note})", file=sys.stderr, flush=True)
        del models
    return results


def kjv_verses(count: int) -> list[str]:
    with gzip.open(DATA / "kjv.txt.gz", "rt", encoding="utf-8") as f:
        verses = []
        for line in f:
            if line.strip():
                verses.append(line.strip())
                if len(verses) == count:
                    return verses
    return verses


def pipeline_rows(family: str, task: str, tokenizer, args) -> tuple[dict, str]:
    """`pipeline(task)` on `args.sentences` verses with every row's model (BERT/ALBERT, mini)."""
    head = "ForMaskedLM" if task == "fill-mask" else "ForSequenceClassification"
    verses = kjv_verses(args.sentences)
    if task == "fill-mask":  # the third word of each verse masked
        verses = [" ".join(w if i != 2 else tokenizer.mask_token for i, w in enumerate(v.split())) for v in verses]
    with tempfile.TemporaryDirectory() as folder:
        save_reference(family, "mini", head, len(tokenizer), folder, args.seed)
        models = load_rows(family, head, folder, args)
    pipes = {
        name: transformers.pipeline(task, model=model, tokenizer=tokenizer, device=args.device)
        for name, model in models.items()
    }
    with torch.inference_mode():
        times = time_rows(
            {name: functools.partial(pipe, verses, batch_size=args.serving_batch) for name, pipe in pipes.items()},
            args,
        )
    return times, f"{len(verses)} verses, batch_size {args.serving_batch}"


def encode_rows(family: str, tokenizer, args) -> tuple[dict, str]:
    """sentence-transformers' `encode` of `args.encode_sentences` verses, each model a saved folder with the tokenizer
    (ours loaded as remote code)."""
    from sentence_transformers import SentenceTransformer

    verses = kjv_verses(args.encode_sentences)
    with tempfile.TemporaryDirectory() as root:
        reference = os.path.join(root, "reference")
        save_reference(family, "mini", "ForMaskedLM", len(tokenizer), reference, args.seed)
        tokenizer.save_pretrained(reference)
        encoders = {
            name: SentenceTransformer(
                reference,
                device=str(args.device),
                model_kwargs={"attn_implementation": name, "dtype": DTYPES[args.dtype]},
            )
            for name in REFERENCES
        }
        for name, model in load_rows(family, "ForMaskedLM", reference, args).items():
            if name not in REFERENCES:
                folder = os.path.join(root, name)
                model.save_pretrained(folder)
                tokenizer.save_pretrained(folder)
                encoders[name] = SentenceTransformer(
                    folder, device=str(args.device), trust_remote_code=True, model_kwargs={"dtype": DTYPES[args.dtype]}
                )
        times = time_rows(
            {
                name: functools.partial(encoder.encode, verses, batch_size=args.serving_batch)
                for name, encoder in encoders.items()
            },
            args,
        )
    return times, f"{len(verses)} verses, batch_size {args.serving_batch}, mean pooling"


def compile_rows(family: str, args) -> tuple[dict, str]:
    """`torch.compile(model)` (inductor, eval) of every row at `args.compile_shape`, unpadded; the first call compiles."""
    size, batch, n = ALL_SHAPES[args.compile_shape]
    torch._dynamo.reset()
    torch._dynamo.config.recompile_limit = 64  # every row compiles the same forward code objects
    with tempfile.TemporaryDirectory() as folder:
        save_reference(family, size, HEADS[family], VOCAB[size], folder, args.seed)
        models = load_rows(family, HEADS[family], folder, args)
    inputs = make_inputs(batch, n, VOCAB[size], False, 0, args)
    with torch.inference_mode():
        times = time_rows(
            {name: functools.partial(torch.compile(model), **inputs) for name, model in models.items()}, args
        )
    return times, "inductor; the first call (compiling) left out"


def serving_rows(family: str, args) -> list:
    """[(label, times, note)] of the serving paths that `family` has."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(TOKENIZER)
    rows = []
    if family in SERVING_FAMILIES:
        for task in ("fill-mask", "text-classification"):
            rows.append((f"pipeline {task}", *pipeline_rows(family, task, tokenizer, args)))
            print(f"{family} {rows[-1][0]}: done", file=sys.stderr, flush=True)
        rows.append(("sentence-transformers encode", *encode_rows(family, tokenizer, args)))
        print(f"{family} {rows[-1][0]}: done", file=sys.stderr, flush=True)
    rows.append((f"torch.compile, {args.compile_shape}", *compile_rows(family, args)))
    return rows


def ratio_tables(family: str, results: list, args) -> list[tuple[str, list, list]]:
    """The family's two tables (title, header, rows): time / transformers' SDPA model, and / its eager model."""
    tables = []
    for base, other in (("sdpa", "eager"), ("eager", "sdpa")):
        header = [f"{family}: time / {base}", f"{base} ms", other, *args.types]
        rows = [
            [label, f"{t[base]:.1f}", *(f"{t[name] / t[base]:.2f}" for name in (other, *args.types))]
            for label, t, _ in results
        ]
        tables.append(
            (f"{family}, time / transformers' {base.upper() if base == 'sdpa' else base} model", header, rows)
        )
    return tables


def training_bars(args) -> list[list[str]]:
    """The training bars (`TRAINING_BARS`), measured with bench_attention's and bench_training's own functions."""
    attention = bench_attention.measure(
        argparse.Namespace(
            variants=["eager", "sdpa", "talking-heads"],
            seq_lens=[512],
            batch_size=8,
            hidden_size=768,
            num_heads=12,
            num_layers=2,
            attention_dropout=0.1,
            family="bert",
            seed=args.seed,
            device=args.device,
            dtype=args.dtype,
            warmup=args.warmup,
            repeats=args.repeats,
            stat=args.stat,
        ),
        512,
    )
    training = bench_training.measure(
        bench_training.SETTINGS["mini-128"],
        "eager",
        argparse.Namespace(
            seed=args.seed,
            device=args.device,
            dtype=args.dtype,
            family="bert",
            only=["dot_product", "talking_heads"],
            sparse=["off", "on"],
            warmup=args.warmup,
            repeats=args.repeats,
            compile_backend="inductor",
            profile=0,
        ),
    )
    measured = (
        attention["talking-heads"]["fwd_bwd"] / attention["eager"]["fwd_bwd"],
        training["talking_heads+sparse"]["step"] / training["sdpa"]["step"],
        training["dot_product"]["step"] / training["sdpa"]["step"],
    )
    return [[what, f"{value:.2f}", f"{bar:.2f}"] for (what, bar), value in zip(TRAINING_BARS.items(), measured)]


def machine(device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor() or platform.machine()
    return f"{name}, {os.cpu_count()} cores"


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    # warm starts of the types that cannot start as the checkpoint say so, per row and per setting
    for logger in (hf_logging.get_logger(), hf_logging.get_logger("hf_attn_variants")):
        logger.setLevel("ERROR")
    hf_logging.disable_progress_bar()
    load = "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else ""
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, hf_attn_variants "
        f"{hf_attn_variants.__version__}; {args.device} ({machine(args.device)}), threads {torch.get_num_threads()}, "
        f"{args.dtype}; {'fastest' if args.stat == 'min' else 'median'} of {args.repeats} (warmup {args.warmup}), "
        f"{args.clock} clock; {load} at the start",
        flush=True,
    )
    for family in args.families:
        results = measure_family(family, args)
        if args.serving:
            results += serving_rows(family, args)
        for title, header, rows in ratio_tables(family, results, args):
            print(f"\n{'### ' if args.markdown else ''}{title}\n")
            print(format_table(header, rows, markdown=args.markdown))
        notes = [f"{label}: {note}" for label, _, note in results if note]
        print("\n" + "\n".join(f"- {note}" if args.markdown else note for note in notes), flush=True)
    if args.training_bars:
        print(f"\n{'### ' if args.markdown else ''}training bars (measured / the bar it must not pass)\n")
        print(format_table(["training bar", "measured", "bar"], training_bars(args), markdown=args.markdown))
    if hasattr(os, "getloadavg"):
        print("\nload average " + " ".join(f"{x:.1f}" for x in os.getloadavg()) + " at the end")


if __name__ == "__main__":
    main()
