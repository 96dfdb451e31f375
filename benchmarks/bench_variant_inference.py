"""Inference of talking heads and every Synthesizer component against transformers' SDPA BERT, as ratios.

Run from the repository root (one thread, as a user of a CPU server would):

    OMP_NUM_THREADS=1 python benchmarks/bench_variant_inference.py                     # 8 x 512, padded and not
    OMP_NUM_THREADS=1 python benchmarks/bench_variant_inference.py --rows talking_heads --profile 12

Masked-LM forward (`eval()`, `torch.inference_mode()`) of transformers' `BertForMaskedLM` with
`attn_implementation="sdpa"` (the reference) and of our `VariantBertForMaskedLM` per attention type (`ROWS`), at
the bert-mini shape (4 layers, width 256, 4 heads, FFN 1024, vocab 8000). Our models load the reference's weights
where they map (embeddings, projections, FFN, LM head); what a type adds keeps its initialisation. Padded batches
draw each row's length uniformly from `--min-length`..length with a fixed seed. Per repeat every row runs once in
turn (interleaved); a row's ratio is its fastest call over the reference's fastest, and over our dot-product
model's (the same model but for the attention, so that column isolates the attention's cost). `--profile K` prints the K ops
with the most self time of one more call of each row.
"""

import argparse
import time

import torch
import transformers

import hf_attn_variants

CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
SHAPE = dict(
    vocab_size=8000,
    hidden_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=1024,
    max_position_embeddings=512,
)
# row -> the attention fields of our model (transformers' SDPA model is the reference row "sdpa")
ROWS = {
    "dot_product": dict(attention_type="dot_product"),
    "talking_heads": dict(attention_type="talking_heads"),
    "synth_dense": dict(attention_type="synthesizer", synthesizer_components=["dense"]),
    "synth_random": dict(attention_type="synthesizer", synthesizer_components=["random"]),
    "synth_factorized_dense": dict(attention_type="synthesizer", synthesizer_components=["factorized_dense"]),
    "synth_factorized_random": dict(attention_type="synthesizer", synthesizer_components=["factorized_random"]),
    "synth_mixture": dict(attention_type="synthesizer", synthesizer_components=["dot_product", "random"]),
    "synth_mixture_all": dict(
        attention_type="synthesizer",
        synthesizer_components=["dot_product", "dense", "random", "factorized_dense", "factorized_random"],
    ),
}


def build(row: str | None):
    """The reference (row None) or our model of `row`, on the reference's weights, in eval mode."""
    torch.manual_seed(0)
    reference = transformers.BertForMaskedLM(transformers.BertConfig(**SHAPE, attn_implementation="sdpa"))
    if row is None:
        return reference.eval()
    config = hf_attn_variants.VariantBertConfig(**SHAPE, **ROWS[row], attn_implementation="sdpa")
    model = hf_attn_variants.VariantBertForMaskedLM(config)
    model.load_state_dict(reference.state_dict(), strict=False)
    return model.eval()


def make_batch(batch: int, length: int, padded: bool, min_length: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, SHAPE["vocab_size"], (batch, length), generator=g)
    mask = torch.ones_like(ids)
    if padded:
        lengths = torch.randint(min_length, length + 1, (batch,), generator=g)
        mask = (torch.arange(length)[None] < lengths[:, None]).long()
    return dict(input_ids=ids, attention_mask=mask)


def timed(model, batch, clock) -> float:
    with torch.inference_mode():
        start = clock()
        model(**batch)
        return clock() - start


def profile(model, batch, top: int) -> str:
    with torch.inference_mode(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        model(**batch)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--padding", nargs="+", choices=["none", "uniform"], default=["none", "uniform"])
    p.add_argument("--min-length", type=int, default=64, help="shortest row of a padded batch")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--clock",
        choices=list(CLOCKS),
        default="wall",
        help="wall: elapsed time; cpu: this thread's CPU time (one thread: not counting the time other "
        "processes of a shared machine take the core)",
    )
    p.add_argument("--profile", type=int, default=0, metavar="K")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    models = {"sdpa": build(None), **{row: build(row) for row in args.rows}}
    print(
        f"bert-mini masked LM, {args.batch} x {args.length}, threads {torch.get_num_threads()}, fastest of "
        f"{args.repeats} ({args.clock} clock); torch {torch.__version__}, transformers {transformers.__version__}"
    )
    for padding in args.padding:
        batch = make_batch(args.batch, args.length, padding == "uniform", args.min_length, args.seed)
        times = {name: [] for name in models}
        for name, model in models.items():  # warm-up
            timed(model, batch, CLOCKS[args.clock])
        for _ in range(args.repeats):
            for name, model in models.items():
                times[name].append(timed(model, batch, CLOCKS[args.clock]))
        best = {name: min(t) for name, t in times.items()}
        dot = best.get("dot_product")
        print(
            f"\npadding {padding}: sdpa {best['sdpa'] * 1e3:.0f} ms\n  {'row':<24} / sdpa"
            + (" / dot_product" * bool(dot))
        )
        for name in args.rows:
            print(f"  {name:<24} {best[name] / best['sdpa']:6.3f}" + (f" {best[name] / dot:13.3f}" if dot else ""))
        for name in ["sdpa", *args.rows] if args.profile else []:
            print(f"\n{name}, padding {padding}\n{profile(models[name], batch, args.profile)}")


if __name__ == "__main__":
    main()
