"""Data preparation at scale for masked-LM pretraining (examples/run_pretraining.py's own code path: the package's
`data_loading.load_raw_datasets`, `map_batched` and `pretraining_data.pack_batch`).

    HF_HUB_OFFLINE=1 python benchmarks/bench_data.py                 # ~100 MB of text, 128-token blocks
    HF_HUB_OFFLINE=1 python benchmarks/bench_data.py --size_mb 10    # a quick run

It writes a text file of `--size_mb` MB (the embedded corpus repeated) to a temporary folder and measures, each in a
fresh process with an empty datasets cache unless said otherwise:

- map-style preparation (load_dataset's text builder + the script's batched `Dataset.map` packing into the cache)
  with `--preprocessing_num_workers` 1 and 2: wall time, and peak memory;
- a cached rerun (the same preparation again: read back from the cache);
- `--streaming`: time from the start of loading to the first collated batch, and peak memory;
- the ceiling: the tokenizer's own batched throughput on the same lines (`encode_batch`, 1000 lines a call, the file
  already in memory, nothing written).

Peak memory is sampled every 20 ms (psutil): the resident set (RSS) of the preparing process alone, and with worker
processes (num_proc 2) the sum of their proportional set sizes (PSS: pages a forked worker shares with its parent
count once); `ru_maxrss` of the largest child so far is in the JSON too. The tokenizer is the project's WordPiece
tokenizer of the embedded corpus (passed as --tokenizer_name, so tokenizer training is not timed). Times include
neither the interpreter start nor the imports (reported separately). The machine's other load is not controlled:
run it on an idle machine, or read the figures as upper bounds.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "examples" / "data" / "devils_dictionary.txt"


# ------------------------------------------------------------------------------------------- the measured child
def child(mode: str, corpus: str, tokenizer_dir: str, num_proc: int, max_seq_length: int, batch_size: int) -> dict:
    started = time.perf_counter()
    from datasets import Features, Sequence, Value
    from transformers import AutoTokenizer, TrainingArguments

    from hf_attn_variants.training.data_collators import MaskedLMCollator
    from hf_attn_variants.training.data_loading import DataArguments, column_names, load_raw_datasets, map_batched
    from hf_attn_variants.training.pretraining_data import pack_batch

    imported = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if mode == "ceiling":
        with open(corpus, encoding="utf-8") as file:
            lines = [line.rstrip("\n") for line in file]
        begin = time.perf_counter()
        tokens = 0
        for start in range(0, len(lines), 1000):
            tokens += sum(
                len(e.ids)
                for e in tokenizer.backend_tokenizer.encode_batch(
                    [t for t in lines[start : start + 1000] if t], add_special_tokens=False
                )
            )
        return {"seconds": time.perf_counter() - begin, "tokens": tokens, "import_seconds": imported - started}
    streaming = mode == "streaming"
    data_args = DataArguments(
        train_file=corpus,
        streaming=streaming,
        validation_split_percentage=0,
        preprocessing_num_workers=None if streaming else num_proc,
    )
    training_args = TrainingArguments(tempfile.mkdtemp(), report_to="none", max_steps=10)
    begin = time.perf_counter()
    raw = load_raw_datasets(data_args, default_files=None, seed=0, select_samples=False)
    loaded = time.perf_counter()
    features = Features({"input_ids": Sequence(Value("int32"))})  # as run_pretraining.py packs masked LM
    train = map_batched(
        raw["train"],
        pack_batch,
        training_args,
        data_args,
        desc="Packing the train split",
        remove_columns=column_names(raw["train"]),
        features=features,
        fn_kwargs={"tokenizer": tokenizer, "column": "text", "max_seq_length": max_seq_length},
    )
    if streaming:
        collator = MaskedLMCollator(tokenizer)
        examples = []
        for example in train:
            examples.append(example)
            if len(examples) == batch_size:
                break
        batch = collator(examples)
        return {
            "seconds": time.perf_counter() - begin,
            "batch_shape": list(batch["input_ids"].shape),
            "import_seconds": imported - started,
        }
    return {
        "seconds": time.perf_counter() - begin,
        "load_seconds": loaded - begin,
        "map_seconds": time.perf_counter() - loaded,
        "sequences": len(train),
        "cache_files": len(train.cache_files),
        "import_seconds": imported - started,
    }


# ------------------------------------------------------------------------------------------------- the parent
def measure(mode: str, args, corpus: Path, tokenizer_dir: Path, cache: Path, num_proc: int = 1) -> dict:
    """Run one measurement in a fresh process; sample its memory (alone and with its children) meanwhile."""
    import psutil

    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    code = (
        "import json, bench_data; "
        f"print('RESULT', json.dumps(bench_data.child({mode!r}, {str(corpus)!r}, {str(tokenizer_dir)!r}, "
        f"{num_proc}, {args.max_seq_length}, {args.batch_size})))"
    )
    # output to files: a child writing more than a pipe holds (progress bars) would block until read
    log = open(cache.parent / f"{cache.name}-{mode}.log", "w+")
    # run from this folder: `python -c` puts it first on sys.path, so the child imports this file as bench_data
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=Path(__file__).parent,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    handle = psutil.Process(proc.pid)
    peak_main = peak_tree = 0
    while proc.poll() is None:
        try:
            main = handle.memory_info().rss
            children = handle.children(recursive=True)
            # with workers: proportional set sizes, so pages a forked worker shares with its parent count once
            tree = (
                handle.memory_full_info().pss + sum(c.memory_full_info().pss for c in children) if children else main
            )
        except psutil.Error:
            break
        peak_main, peak_tree = max(peak_main, main), max(peak_tree, tree)
        time.sleep(0.02)
    proc.wait()
    log.seek(0)
    output = log.read()
    log.close()
    if proc.returncode != 0 or "RESULT " not in output:
        raise RuntimeError(f"{mode} failed:\n{output[-3000:]}")
    result = json.loads(output.split("RESULT ", 1)[1].splitlines()[0])
    maxrss_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest child so far
    return {
        **result,
        "peak_rss_main_mb": peak_main / 2**20,
        "peak_rss_tree_mb": peak_tree / 2**20,
        "maxrss_children_mb": maxrss_children / 2**20,
    }


def write_corpus(path: Path, size_mb: float) -> int:
    text = CORPUS.read_text(encoding="utf-8").rstrip("\n") + "\n\n"
    target = int(size_mb * 2**20)
    written = 0
    with open(path, "w", encoding="utf-8") as file:
        while written < target:
            file.write(text)
            written += len(text.encode("utf-8"))
    return written


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size_mb", type=float, default=100.0, help="Size of the text file to prepare (MB).")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=32, help="Examples in the first streamed batch.")
    parser.add_argument("--num_proc", default="1,2", help="Comma-separated --preprocessing_num_workers to measure.")
    parser.add_argument("--output", default=None, help="Write the results as JSON here.")
    args = parser.parse_args(argv)

    from hf_attn_variants.training.tokenizer_training import train_tokenizer

    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        tmp = Path(tmp)
        corpus = tmp / "corpus.txt"
        size = write_corpus(corpus, args.size_mb)
        tokenizer_dir = tmp / "tokenizer"
        train_tokenizer("wordpiece", corpus=CORPUS).save_pretrained(tokenizer_dir)
        mb = size / 2**20
        rows, results = [], {"size_mb": mb, "max_seq_length": args.max_seq_length}

        ceiling = measure("ceiling", args, corpus, tokenizer_dir, tmp / "cache-ceiling")
        results["ceiling"] = ceiling
        ceiling_rate = mb / ceiling["seconds"]
        rows.append(("tokenizer alone (the ceiling)", ceiling["seconds"], ceiling_rate, None, None))
        for num_proc in [int(n) for n in args.num_proc.split(",")]:
            cache = tmp / f"cache-{num_proc}"
            first = measure("map", args, corpus, tokenizer_dir, cache, num_proc)
            results[f"map_num_proc_{num_proc}"] = first
            rows.append(
                (
                    f"map-style, num_proc {num_proc}",
                    first["seconds"],
                    mb / first["seconds"],
                    first["peak_rss_main_mb"],
                    first["peak_rss_tree_mb"],
                )
            )
            if num_proc == 1:
                again = measure("map", args, corpus, tokenizer_dir, cache, num_proc)
                results["cached_rerun"] = again
                rows.append(
                    (
                        "cached rerun (num_proc 1)",
                        again["seconds"],
                        None,
                        again["peak_rss_main_mb"],
                        again["peak_rss_tree_mb"],
                    )
                )
        streamed = measure("streaming", args, corpus, tokenizer_dir, tmp / "cache-stream")
        results["streaming"] = streamed
        rows.append(
            (
                "streaming: first batch",
                streamed["seconds"],
                None,
                streamed["peak_rss_main_mb"],
                streamed["peak_rss_tree_mb"],
            )
        )

    lines = [
        f"{mb:.0f} MB of text, {args.max_seq_length}-token blocks, {os.cpu_count()} CPU cores",
        "",
        "| step | wall time (s) | MB/s | x ceiling | peak RSS, process (MB) | peak, with workers (MB, PSS) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, seconds, rate, main_mb, tree_mb in rows:
        ratio = f"{rate / ceiling_rate:.2f}" if rate is not None else ""
        lines.append(
            f"| {name} | {seconds:.2f} | {f'{rate:.2f}' if rate else ''} | {ratio} | "
            f"{f'{main_mb:.0f}' if main_mb else ''} | {f'{tree_mb:.0f}' if tree_mb else ''} |"
        )
    first = results.get("map_num_proc_1")
    if first and "cached_rerun" in results:
        lines.append("")
        lines.append(
            f"cached rerun / first preparation: {results['cached_rerun']['seconds'] / first['seconds']:.1%}; "
            f"first preparation: {first['load_seconds']:.1f} s loading (text builder) + "
            f"{first['map_seconds']:.1f} s packing; {first['sequences']} sequences; imports "
            f"{first['import_seconds']:.1f} s (not counted)"
        )
    print("\n".join(lines))
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
