"""Data for training scripts, read as transformers' examples read it (run_mlm.py, run_glue.py); the example
scripts' data path, package-only, for scripts of your own too: `DataArguments` and its flags, `load_raw_datasets`
(a Hub dataset or local folder, local files through datasets' builders, or the script's embedded data), the
validation split carved from train when the data has none, batched preparation into the datasets cache
(`map_batched`), and `split_info`, the record of where each split comes from that `training_info.json` and the model
card keep. Needs `datasets` (`pip install "hf-attn-variants[examples]"`).
"""

import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

try:
    from datasets import (
        DatasetDict,
        IterableDataset,
        get_dataset_config_names,
        load_dataset,
    )
except ImportError as error:
    raise ImportError(
        "hf_attn_variants.training.data_loading reads data with the `datasets` library, which is not installed: "
        'pip install "hf-attn-variants[examples]" (or pip install datasets).'
    ) from error

from .run_record import is_hub_id


@dataclass
class DataArguments:
    """Where a script's data comes from, with transformers' example flag names (run_mlm.py, run_glue.py). Each
    script subclasses it with its own fields (columns, lengths); `load_raw_datasets` reads it."""

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "A dataset on the Hugging Face Hub (e.g. wikitext) or a local dataset folder, through "
            "datasets.load_dataset."
        },
    )
    dataset_config_name: str | None = field(
        default=None, metadata={"help": "The configuration of --dataset_name (e.g. wikitext-103-raw-v1)."}
    )
    train_file: str | None = field(
        default=None,
        metadata={
            "help": "A local training file: .txt (one row per line), .csv, .tsv, .json/.jsonl (one object per line) or "
            ".parquet. Default: the script's embedded data."
        },
    )
    validation_file: str | None = field(
        default=None,
        metadata={
            "help": "A local evaluation file, same formats. Default: the data's validation split, else "
            "--validation_split_percentage of the training rows."
        },
    )
    test_file: str | None = field(
        default=None, metadata={"help": "A local file to predict on (--do_predict), same formats."}
    )
    streaming: bool = field(
        default=False,
        metadata={
            "help": "Stream the data (an IterableDataset: nothing is downloaded or prepared ahead; needs --max_steps)."
        },
    )
    preprocessing_num_workers: int | None = field(
        default=None,
        metadata={"help": "Processes for the preprocessing (Dataset.map num_proc). Not used with --streaming."},
    )
    overwrite_cache: bool = field(
        default=False, metadata={"help": "Redo the preprocessing instead of reading it from the datasets cache."}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Keep only the first N training examples (quick runs, debugging)."}
    )
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only the first N evaluation examples."})
    max_predict_samples: int | None = field(
        default=None, metadata={"help": "Keep only the first N prediction examples."}
    )
    validation_split_percentage: float = field(
        default=5.0,
        metadata={
            "help": "When the data has no validation split: the percentage of the training rows held out for "
            "evaluation (0: none)."
        },
    )


# load_dataset's builder for each file extension, and the options it needs
FILE_BUILDERS = {
    ".txt": ("text", ()),
    ".text": ("text", ()),
    ".csv": ("csv", ()),
    ".tsv": ("csv", (("delimiter", "\t"),)),
    ".json": ("json", ()),
    ".jsonl": ("json", ()),
    ".parquet": ("parquet", ()),
}


SPLIT_FLAGS = {"train": "--train_file", "validation": "--validation_file", "test": "--test_file"}


SAMPLE_FLAGS = {"train": "max_train_samples", "validation": "max_eval_samples", "test": "max_predict_samples"}


def load_raw_datasets(
    args: DataArguments,
    *,
    default_files: dict[str, Path] | None,
    seed: int,
    cache_dir=None,
    select_samples: bool = True,
    validation_block_rows: int = 1,
):
    """The raw splits (`DatasetDict`, or `IterableDatasetDict` with --streaming), from the first of:

    1. `--dataset_name` (+ `--dataset_config_name`): `datasets.load_dataset`, a Hub id or a local dataset folder;
    2. `--train_file` / `--validation_file` / `--test_file`: through the builder of the extension (`FILE_BUILDERS`);
    3. `default_files` ({split: path}): the script's embedded data.

    Without a validation split and with `--validation_split_percentage` > 0, it is carved from train:
    map-style, a seeded split (`seed`) of blocks of `validation_block_rows` consecutive rows (1: rows; pretraining
    keeps neighbouring lines of a document together); streaming, a row is held out when a hash of (seed, its block
    index) falls under the percentage, so the same rows are held out on every pass and every process.
    `max_{train,eval,predict}_samples` keep the first N rows of train/validation/test (`select_samples=False`
    leaves that to the script, e.g. to count packed sequences instead)."""
    check_percentage(args.validation_split_percentage)
    kwargs = {"cache_dir": cache_dir, "streaming": args.streaming}
    if args.dataset_name:
        if args.train_file or args.validation_file or args.test_file:
            raise ValueError("Pass either --dataset_name or --train_file/--validation_file/--test_file, not both.")
        raw = _load_named_dataset(args.dataset_name, args.dataset_config_name, kwargs)
    else:
        if args.dataset_config_name:
            raise ValueError("--dataset_config_name needs --dataset_name.")
        given = {split: getattr(args, f"{split}_file") for split in SPLIT_FLAGS}
        files = {split: path for split, path in given.items() if path}
        if not files and not default_files:
            raise ValueError("No data: pass --dataset_name or --train_file.")
        raw = _load_files(files or {k: str(v) for k, v in default_files.items()}, kwargs, user=bool(files))
    raw, _ = carve_missing_validation(raw, args.validation_split_percentage, seed, validation_block_rows)
    if select_samples:
        for split, flag in SAMPLE_FLAGS.items():
            if split in raw and getattr(args, flag) is not None:
                raw[split] = first_rows(raw[split], getattr(args, flag))
    return raw


def _load_named_dataset(name: str, config_name: str | None, kwargs: dict):
    try:
        return load_dataset(name, config_name, **kwargs)
    except ValueError as error:  # datasets: "BuilderConfig 'x' not found. Available: [...]" / "Config name is missing"
        if "BuilderConfig" not in str(error) and "Config name is missing" not in str(error):
            raise
        configs = get_dataset_config_names(name)
        if config_name is None:
            raise ValueError(
                f"The dataset {name} has several configurations: pass --dataset_config_name, one of {configs}."
            ) from None
        raise ValueError(
            f"The dataset {name} has no configuration {config_name!r}: pass --dataset_config_name one of {configs}."
        ) from None


def _load_files(files: dict[str, str], kwargs: dict, user: bool):
    builders = set()
    for split, path in files.items():
        flag = SPLIT_FLAGS[split] if user else "the embedded data"
        if not Path(path).is_file():
            raise FileNotFoundError(f"{flag} {path}: no such file.")
        suffix = Path(path).suffix.lower()
        if suffix not in FILE_BUILDERS:
            raise ValueError(
                f"{flag} {path}: unknown extension {suffix!r}; use one of "
                f"{', '.join(sorted(FILE_BUILDERS))} (or --dataset_name for a dataset folder)."
            )
        builders.add(FILE_BUILDERS[suffix])
    if len(builders) > 1:
        raise ValueError(
            f"The data files have different formats ({', '.join(files.values())}): give every split in "
            "the same format."
        )
    ((builder, options),) = builders
    return load_dataset(builder, data_files=files, **dict(options), **kwargs)


def check_percentage(percentage: float) -> None:
    if not 0 <= percentage < 100:
        raise ValueError(f"--validation_split_percentage must be in [0, 100), got {percentage}.")


def carve_missing_validation(raw, percentage: float, seed: int, block_rows: int = 1):
    """(raw, carved): `raw` with a validation split carved from train when it has none and `percentage` > 0
    (`carve_validation`); `carved` says whether it was, for the record of what the eval metrics measured."""
    check_percentage(percentage)
    if "validation" in raw or "train" not in raw or percentage == 0:
        return raw, False
    train, validation = carve_validation(raw["train"], percentage, seed, block_rows)
    return type(raw)({**raw, "train": train, "validation": validation}), True


def carve_validation(train, percentage: float, seed: int, block_rows: int = 1):
    """(train, validation) from one split; see `load_raw_datasets`."""
    if not 0 < percentage < 100:
        raise ValueError(f"--validation_split_percentage must be in [0, 100), got {percentage}.")
    if isinstance(train, IterableDataset):

        def held_out(_, index):
            digest = zlib.crc32(f"{seed}/{index // block_rows}".encode())
            return digest % 10_000 < percentage * 100

        return (
            train.filter(lambda row, index: not held_out(row, index), with_indices=True),
            train.filter(held_out, with_indices=True),
        )
    blocks = -(-len(train) // block_rows)
    if blocks < 2:
        raise ValueError(
            f"The training data has {len(train)} rows: too few to hold out a validation split; give "
            "--validation_file or more data."
        )
    order = torch.randperm(blocks, generator=torch.Generator().manual_seed(seed))
    held = torch.zeros(blocks, dtype=torch.bool)
    held[order[: min(blocks - 1, max(1, round(blocks * percentage / 100)))]] = True
    rows = held.repeat_interleave(block_rows)[: len(train)]
    return train.select(torch.nonzero(~rows).flatten().tolist()), train.select(torch.nonzero(rows).flatten().tolist())


def first_rows(dataset, count: int):
    """The first `count` rows (map-style: select; streaming: take)."""
    if count < 0:
        raise ValueError(f"max_*_samples must be positive, got {count}.")
    if isinstance(dataset, IterableDataset):
        return dataset.take(count)
    return dataset.select(range(min(count, len(dataset))))


def is_empty(dataset) -> bool:
    """Whether a split has no example (a stream is read up to its first one)."""
    if isinstance(dataset, IterableDataset):
        return next(iter(dataset), None) is None
    return len(dataset) == 0


def column_names(dataset) -> list[str]:
    """A split's columns; a streamed dataset whose features are unknown (json) is read for its first row."""
    if dataset.column_names is not None:
        return list(dataset.column_names)
    first = next(iter(dataset), None)
    return list(first) if first is not None else []


def pick_column(dataset, name: str | None, flag: str, default: str | None = None) -> str:
    """`name` if the data has it, else `default` if it has that, else its first column; an error naming `flag`
    if `name` is missing."""
    columns = column_names(dataset)
    if name is not None:
        if name not in columns:
            raise ValueError(f"{flag} {name}: the data has no such column; its columns are {columns}.")
        return name
    if default in columns:
        return default
    if not columns:
        raise ValueError("The data has no columns.")
    return columns[0]


def check_streaming(training_args, data_args: DataArguments) -> None:
    """--streaming gives an IterableDataset of unknown length: Trainer needs --max_steps to know when to stop."""
    if data_args.streaming and training_args.max_steps <= 0:
        raise ValueError("--streaming needs --max_steps (a streamed dataset has no length to count epochs by).")
    if data_args.streaming and (data_args.preprocessing_num_workers or data_args.overwrite_cache):
        raise ValueError(
            "--preprocessing_num_workers and --overwrite_cache do not apply with --streaming (the data "
            "is prepared as it is read, nothing is cached): leave them out."
        )


def map_batched(
    dataset, function, training_args, data_args: DataArguments, *, desc: str, remove_columns=None, **kwargs
):
    """`dataset.map(function, batched=True)` the way every script prepares data: map-style, with
    --preprocessing_num_workers processes, into the datasets cache (reused unless --overwrite_cache), by the main
    process first (the others then read its cache); streaming, lazily as the data is read."""
    if isinstance(dataset, IterableDataset):
        return dataset.map(function, batched=True, remove_columns=remove_columns, **kwargs)
    workers = data_args.preprocessing_num_workers
    with training_args.main_process_first(desc=desc):
        # one worker is this process: datasets would start a pool of one (a second interpreter's memory, no gain)
        return dataset.map(
            function,
            batched=True,
            remove_columns=remove_columns,
            num_proc=workers if workers and workers > 1 else None,
            load_from_cache_file=not data_args.overwrite_cache,
            desc=desc,
            **kwargs,
        )


def split_info(data_args, split: str, default: dict, carved_from: str | None = None) -> dict:
    """Where one split's rows come from, for `training_info.json` and the model card: a Hub dataset (`hub_id`,
    config, split), a local dataset folder, a user file, or the embedded data (`default`). `carved_from`: the split
    the rows were held out of by --validation_split_percentage."""
    if data_args.dataset_name:
        name, config = data_args.dataset_name, data_args.dataset_config_name
        info = {"name": f"{name} ({config})" if config else name, "config": config}
        if is_hub_id(name):
            info.update(hub_id=name, source=f"the Hugging Face Hub dataset {name}")
        else:
            info["source"] = f"the local dataset folder {name}"
    elif getattr(data_args, f"{carved_from or split}_file", None):
        file = getattr(data_args, f"{carved_from or split}_file")
        flag = f"--{carved_from or split}_file"
        info = {"name": Path(file).name, "source": f"user-provided file ({flag})", "license": "unknown"}
    else:
        info = dict(default)
    info["split"] = split
    if carved_from:
        info["split"] = (
            f"{split}: {data_args.validation_split_percentage:g}% of the {carved_from} rows held out "
            "(--validation_split_percentage)"
        )
    return {k: v for k, v in info.items() if v is not None}


# a carved validation split of a pretraining corpus takes blocks of consecutive rows: documents stay mostly whole
PRETRAINING_VALIDATION_BLOCK_ROWS = 32


def pretraining_splits(data_args: DataArguments, training_args, default_file=None, default_info: dict | None = None):
    """(raw splits, eval info) of a pretraining run: the data the flags name (when they name none, the text file
    `default_file`, which `default_info` describes), a validation split carved from train in blocks of
    `PRETRAINING_VALIDATION_BLOCK_ROWS` rows when it has none, and what the validation split is (`split_info`; None
    without one). An error names the split a chosen stage lacks. max_{train,eval}_samples are left to the script
    (they count packed sequences, not rows)."""
    default_files = {"train": default_file} if default_file is not None else None
    raw = load_raw_datasets(
        replace(data_args, validation_split_percentage=0),
        default_files=default_files,
        seed=training_args.seed,
        select_samples=False,
    )
    raw, carved = carve_missing_validation(
        raw, data_args.validation_split_percentage, training_args.seed, PRETRAINING_VALIDATION_BLOCK_ROWS
    )
    for needed, split in ((training_args.do_train, "train"), (training_args.do_eval, "validation")):
        if needed and split not in raw:
            raise ValueError(
                f"The data has no {split} split (it has {sorted(raw)}): give --{split}_file, or "
                "--validation_split_percentage above 0."
            )
    eval_info = (
        split_info(data_args, "validation", default_info, carved_from="train" if carved else None)
        if "validation" in raw
        else None
    )
    return raw, eval_info


def finetuning_splits(
    data_args,
    *,
    default_files: dict | None,
    default_info: dict,
    seed: int,
    eval_splits=("validation",),
    test_splits=("test",),
    convert_file=None,
):
    """The raw splits a fine-tuning script uses, loaded by `load_raw_datasets`: {"train": ..., eval split: ...,
    test split: ...} (only those present) and {split: `split_info`}. When the data holds none of `eval_splits`, a
    "validation" split is carved from train by --validation_split_percentage (the same seeded split as
    `load_raw_datasets`); max_{train,eval,predict}_samples keep the first N rows of each split. `convert_file`
    (path -> path) turns a data file into one datasets reads (e.g. SQuAD's nested JSON into JSON lines); the card
    still names the file the user gave."""
    check_percentage(data_args.validation_split_percentage)
    if data_args.streaming:
        raise ValueError(
            "The fine-tuning scripts read map-style datasets (they need the eval examples for "
            "post-processing): leave out --streaming."
        )
    loading = replace(
        data_args,
        validation_split_percentage=0,
        max_train_samples=None,
        max_eval_samples=None,
        max_predict_samples=None,
    )
    if convert_file is not None:
        for split in ("train", "validation", "test"):
            if getattr(loading, f"{split}_file"):
                setattr(loading, f"{split}_file", convert_file(getattr(loading, f"{split}_file")))
        default_files = {split: convert_file(path) for split, path in (default_files or {}).items()}
    raw = load_raw_datasets(loading, default_files=default_files, seed=seed)
    info = {}
    if "train" in raw:
        info["train"] = split_info(data_args, "train", default_info)
    if not any(split in raw for split in eval_splits):
        raw, carved = carve_missing_validation(raw, data_args.validation_split_percentage, seed)
        if carved:
            info["validation"] = split_info(data_args, "validation", default_info, carved_from="train")
    splits = DatasetDict()
    limits = {
        "train": data_args.max_train_samples,
        **dict.fromkeys((*eval_splits, "validation"), data_args.max_eval_samples),
        **dict.fromkeys(test_splits, data_args.max_predict_samples),
    }
    for split in ("train", *eval_splits, "validation", *test_splits):
        if split in raw and split not in splits:
            splits[split] = first_rows(raw[split], limits[split]) if limits[split] is not None else raw[split]
            info.setdefault(split, split_info(data_args, split, default_info))
    return splits, info


def check_stage_data(training_args, splits, eval_splits, test_splits) -> tuple[list[str], list[str]]:
    """The eval and test splits the chosen stages use (none for a stage not chosen); an error naming the missing
    data before anything runs."""
    evaluated = [s for s in eval_splits if s in splits] or (["validation"] if "validation" in splits else [])
    tested = [s for s in test_splits if s in splits]
    if training_args.do_train and "train" not in splits:
        raise ValueError("--do_train needs training data: pass --train_file, or a --dataset_name with a train split.")
    if training_args.do_eval and not evaluated:
        raise ValueError(
            "--do_eval needs evaluation data: pass --validation_file, a dataset with a validation "
            "split, or --validation_split_percentage > 0 with training data."
        )
    if training_args.do_predict and not tested:
        raise ValueError("--do_predict needs test data: pass --test_file, or a --dataset_name with a test split.")
    return evaluated if training_args.do_eval else [], tested if training_args.do_predict else []
