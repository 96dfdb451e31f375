"""What the example scripts share: the embedded corpus, the project's tokenizers, model construction from a preset or
a checkpoint, masking, length checks and the `training_info.json` the model cards read.

Nothing here downloads anything: the corpus ships in `examples/data/`, the tokenizers are trained on it once and
cached (`$HF_ATTN_VARIANTS_CACHE`, default `~/.cache/hf_attn_variants`).
"""

import hashlib
import itertools
import json
import os
import re
import warnings
import shutil
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer, PreTrainedTokenizerFast, TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

import hf_attn_variants as hav
from hf_attn_variants.families import FAMILIES
from hf_attn_variants.families import family_of as model_family
from hf_attn_variants.presets import PRESETS, preset_config
from hf_attn_variants.publish import upload_card

DATA = Path(__file__).resolve().parent / "data"
CORPUS = DATA / "devils_dictionary.txt"
CORPUS_INFO = {
    "name": "The Devil's Dictionary (Ambrose Bierce, 1911)",
    "source": "examples/data/devils_dictionary.txt, from Debian's dict-devil 1.0 (Internet Wiretap edition, 1993)",
    "license": "public domain",
}


# ----------------------------------------------------------------------------------------------------------- data
def read_documents(path: str | os.PathLike = CORPUS) -> list[list[str]]:
    """A text file as documents: blank lines separate documents, each line of a document is one paragraph."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such data file: {path}. Pass an existing text file (documents separated by "
                                "blank lines).")
    text = path.read_text(encoding="utf-8")
    documents = [[line.strip() for line in block.splitlines() if line.strip()] for block in re.split(r"\n\s*\n", text)]
    documents = [d for d in documents if d]
    if not documents:
        raise ValueError(f"{path} holds no text.")
    return documents


@dataclass
class DataArguments:
    """Where a script's data comes from, with transformers' example flag names (run_mlm.py, run_glue.py). Each
    script subclasses it with its own fields (columns, lengths); `load_raw_datasets` reads it."""

    dataset_name: str | None = field(default=None, metadata={
        "help": "A dataset on the Hugging Face Hub (e.g. wikitext) or a local dataset folder, through "
                "datasets.load_dataset."})
    dataset_config_name: str | None = field(default=None, metadata={
        "help": "The configuration of --dataset_name (e.g. wikitext-103-raw-v1)."})
    train_file: str | None = field(default=None, metadata={
        "help": "A local training file: .txt (one row per line), .csv, .tsv, .json/.jsonl (one object per line) or "
                ".parquet. Default: the script's embedded data."})
    validation_file: str | None = field(default=None, metadata={
        "help": "A local evaluation file, same formats. Default: the data's validation split, else "
                "--validation_split_percentage of the training rows."})
    test_file: str | None = field(default=None, metadata={
        "help": "A local file to predict on (--do_predict), same formats."})
    streaming: bool = field(default=False, metadata={
        "help": "Stream the data (an IterableDataset: nothing is downloaded or prepared ahead; needs --max_steps)."})
    preprocessing_num_workers: int | None = field(default=None, metadata={
        "help": "Processes for the preprocessing (Dataset.map num_proc). Not used with --streaming."})
    overwrite_cache: bool = field(default=False, metadata={
        "help": "Redo the preprocessing instead of reading it from the datasets cache."})
    max_train_samples: int | None = field(default=None, metadata={
        "help": "Keep only the first N training examples (quick runs, debugging)."})
    max_eval_samples: int | None = field(default=None, metadata={
        "help": "Keep only the first N evaluation examples."})
    max_predict_samples: int | None = field(default=None, metadata={
        "help": "Keep only the first N prediction examples."})
    validation_split_percentage: float = field(default=5.0, metadata={
        "help": "When the data has no validation split: the percentage of the training rows held out for "
                "evaluation (0: none)."})


# load_dataset's builder for each file extension, and the options it needs
FILE_BUILDERS = {".txt": ("text", ()), ".text": ("text", ()), ".csv": ("csv", ()),
                 ".tsv": ("csv", (("delimiter", "\t"),)), ".json": ("json", ()), ".jsonl": ("json", ()),
                 ".parquet": ("parquet", ())}
SPLIT_FLAGS = {"train": "--train_file", "validation": "--validation_file", "test": "--test_file"}
SAMPLE_FLAGS = {"train": "max_train_samples", "validation": "max_eval_samples", "test": "max_predict_samples"}


def load_raw_datasets(args: DataArguments, *, default_files: dict[str, Path] | None, seed: int, cache_dir=None,
                      select_samples: bool = True, validation_block_rows: int = 1):
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
        if files and "train" not in files and "validation" not in files:
            raise ValueError("--test_file alone gives nothing to train or evaluate on: add --train_file or "
                             "--validation_file.")
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
    from datasets import get_dataset_config_names, load_dataset

    try:
        return load_dataset(name, config_name, **kwargs)
    except ValueError as error:  # datasets: "BuilderConfig 'x' not found. Available: [...]" / "Config name is missing"
        if "BuilderConfig" not in str(error) and "Config name is missing" not in str(error):
            raise
        configs = get_dataset_config_names(name)
        if config_name is None:
            raise ValueError(f"The dataset {name} has several configurations: pass --dataset_config_name, one of "
                             f"{configs}.") from None
        raise ValueError(f"The dataset {name} has no configuration {config_name!r}: pass --dataset_config_name "
                         f"one of {configs}.") from None


def _load_files(files: dict[str, str], kwargs: dict, user: bool):
    from datasets import load_dataset

    builders = set()
    for split, path in files.items():
        flag = SPLIT_FLAGS[split] if user else "the embedded data"
        if not Path(path).is_file():
            raise FileNotFoundError(f"{flag} {path}: no such file.")
        suffix = Path(path).suffix.lower()
        if suffix not in FILE_BUILDERS:
            raise ValueError(f"{flag} {path}: unknown extension {suffix!r}; use one of "
                             f"{', '.join(sorted(FILE_BUILDERS))} (or --dataset_name for a dataset folder).")
        builders.add(FILE_BUILDERS[suffix])
    if len(builders) > 1:
        raise ValueError(f"The data files have different formats ({', '.join(files.values())}): give every split in "
                         "the same format.")
    (builder, options), = builders
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
    from datasets import IterableDataset

    if not 0 < percentage < 100:
        raise ValueError(f"--validation_split_percentage must be in [0, 100), got {percentage}.")
    if isinstance(train, IterableDataset):
        def held_out(_, index):
            digest = zlib.crc32(f"{seed}/{index // block_rows}".encode())
            return digest % 10_000 < percentage * 100

        return (train.filter(lambda row, index: not held_out(row, index), with_indices=True),
                train.filter(held_out, with_indices=True))
    blocks = -(-len(train) // block_rows)
    if blocks < 2:
        raise ValueError(f"The training data has {len(train)} rows: too few to hold out a validation split; give "
                         "--validation_file or more data.")
    order = torch.randperm(blocks, generator=torch.Generator().manual_seed(seed))
    held = torch.zeros(blocks, dtype=torch.bool)
    held[order[: min(blocks - 1, max(1, round(blocks * percentage / 100)))]] = True
    rows = held.repeat_interleave(block_rows)[: len(train)]
    return train.select(torch.nonzero(~rows).flatten().tolist()), train.select(torch.nonzero(rows).flatten().tolist())


def first_rows(dataset, count: int):
    """The first `count` rows (map-style: select; streaming: take)."""
    from datasets import IterableDataset

    if count < 0:
        raise ValueError(f"max_*_samples must be positive, got {count}.")
    if isinstance(dataset, IterableDataset):
        return dataset.take(count)
    return dataset.select(range(min(count, len(dataset))))


def is_empty(dataset) -> bool:
    """Whether a split has no example (a stream is read up to its first one)."""
    from datasets import IterableDataset

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
        raise ValueError("--preprocessing_num_workers and --overwrite_cache do not apply with --streaming (the data "
                         "is prepared as it is read, nothing is cached): leave them out.")


def map_batched(dataset, function, training_args, data_args: DataArguments, *, desc: str, remove_columns=None,
                **kwargs):
    """`dataset.map(function, batched=True)` the way every script prepares data: map-style, with
    --preprocessing_num_workers processes, into the datasets cache (reused unless --overwrite_cache), by the main
    process first (the others then read its cache); streaming, lazily as the data is read."""
    from datasets import IterableDataset

    if isinstance(dataset, IterableDataset):
        return dataset.map(function, batched=True, remove_columns=remove_columns, **kwargs)
    workers = data_args.preprocessing_num_workers
    with training_args.main_process_first(desc=desc):
        # one worker is this process: datasets would start a pool of one (a second interpreter's memory, no gain)
        return dataset.map(function, batched=True, remove_columns=remove_columns,
                           num_proc=workers if workers and workers > 1 else None,
                           load_from_cache_file=not data_args.overwrite_cache, desc=desc, **kwargs)


def dataset_info(data_args: DataArguments, default: dict) -> dict:
    """What `training_info.json` (and the model card) records about the data."""
    if data_args.dataset_name:
        config = f" ({data_args.dataset_config_name})" if data_args.dataset_config_name else ""
        local = Path(data_args.dataset_name).exists()  # a local dataset folder is no Hub id (cards list only those)
        return {"name": f"{data_args.dataset_name}{config}", "hub_id": None if local else data_args.dataset_name,
                "config": data_args.dataset_config_name, "source": "datasets.load_dataset", "license": "unknown"}
    if data_args.train_file:
        return data_file_info(data_args.train_file, default)
    return default


_BLANK_LINE = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')_]*\s+(?=[\"'(_]*[A-Z0-9])")


def split_sentences(paragraph: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(paragraph) if s.strip()]


def rows_to_documents(texts: list[str | None]) -> list[list[str]]:
    """Rows of text (one batch) as documents, each a list of paragraphs (lines).

    - Rows of one line are paragraphs of one document, which an empty row ends: a text file read line by line
      (documents separated by blank lines, as the embedded corpus) or a dataset like wikitext.
    - A row of several lines is a document by itself (one document per row, as Wikipedia or C4); blank lines
      inside it separate documents too.

    A document that runs across the end of a batch (1000 rows) is cut there."""
    documents, current = [], []
    for text in texts:
        text = (text or "").strip()
        if "\n" in text:
            if current:
                documents.append(current)
                current = []
            for block in _BLANK_LINE.split(text):
                lines = [line.strip() for line in block.splitlines() if line.strip()]
                if lines:
                    documents.append(lines)
        elif text:
            current.append(text)
        elif current:
            documents.append(current)
            current = []
    if current:
        documents.append(current)
    return documents


def encode_texts(tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, no special tokens, in one batched call. Preparation tokenizes whole rows and cuts
    them afterwards, so it goes to the Rust tokenizer directly (no length warning, no BatchEncoding)."""
    if not texts:
        return []
    if tokenizer.is_fast:
        return [e.ids for e in tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)]
    return tokenizer(texts, add_special_tokens=False, return_attention_mask=False, verbose=False)["input_ids"]


def token_blocks(texts: list[str | None], tokenizer, size: int) -> np.ndarray:
    """The texts tokenized in one batched call (no special tokens), concatenated, and cut into rows of `size`
    tokens: an int32 array [blocks, size]; the tail shorter than `size` is dropped (as run_mlm's group_texts)."""
    encoded = encode_texts(tokenizer, [t for t in texts if t])
    lengths = [len(ids) for ids in encoded]
    stream = np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.int32, count=sum(lengths))
    blocks = len(stream) // size
    return stream[: blocks * size].reshape(blocks, size)


# ----------------------------------------------------------------------------------------------------- tokenizers
def cache_dir() -> Path:
    return Path(os.environ.get("HF_ATTN_VARIANTS_CACHE", Path.home() / ".cache" / "hf_attn_variants"))


# The project tokenizer of a run on other data than the embedded corpus is trained on the first this many characters
# of its training split (all of it when smaller); said in --tokenizer_name's help.
TOKENIZER_SAMPLE_CHARS = 20_000_000


def training_lines(dataset, column: str, max_chars: int = TOKENIZER_SAMPLE_CHARS) -> list[str]:
    """The non-empty lines of the first `max_chars` characters of `dataset[column]` (map-style or streamed): the
    text a project tokenizer is trained on."""
    lines, chars = [], 0
    batches = dataset.iter(batch_size=1000)
    for batch in batches:
        for text in batch[column]:
            for line in (text or "").splitlines():
                line = line.strip()
                if line:
                    lines.append(line)
                    chars += len(line)
            if chars >= max_chars:
                return lines
    return lines


def project_tokenizer(kind: str, vocab_size: int = 8000, corpus: str | os.PathLike = CORPUS,
                      lines: list[str] | None = None) -> PreTrainedTokenizerFast:
    """A tokenizer trained on `lines` (default: the lines of the text file `corpus`): `"wordpiece"` (BERT/ALBERT:
    [PAD]=0, [UNK], [CLS], [SEP], [MASK]) or `"unigram"` (T5: <pad>=0, </s>=1, <unk>=2, <extra_id_0> the last id).
    Trained once per content (cached by a hash of the text), then read from the cache."""
    if kind not in ("wordpiece", "unigram"):
        raise ValueError(f"Unknown tokenizer kind {kind!r}: use 'wordpiece' or 'unigram'.")
    if lines is None:
        corpus = Path(corpus)
        key = hashlib.sha256(corpus.read_bytes() + f"{kind}/{vocab_size}/1".encode()).hexdigest()[:16]
    else:
        digest = hashlib.sha256(f"{kind}/{vocab_size}/lines/1".encode())
        for line in lines:
            digest.update(line.encode() + b"\n")
        key = digest.hexdigest()[:16]
    target = cache_dir() / "tokenizers" / f"{kind}-{vocab_size}-{key}"
    if not (target / "tokenizer.json").is_file():
        if lines is None:
            lines = [line for document in read_documents(corpus) for line in document]
        if not lines:
            raise ValueError("No text to train the tokenizer on: the training data is empty.")
        tokenizer = _train_wordpiece(lines, vocab_size) if kind == "wordpiece" else _train_unigram(lines, vocab_size)
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=target.parent))
        tokenizer.save_pretrained(scratch)
        try:
            os.replace(scratch, target)  # atomic: concurrent processes (torchrun) never see half a tokenizer
        except OSError:  # another process finished first
            shutil.rmtree(scratch, ignore_errors=True)
    return PreTrainedTokenizerFast.from_pretrained(target)


def _train_wordpiece(lines, vocab_size):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(lines, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=special))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=512)


def _train_unigram(lines, vocab_size):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size - 100, special_tokens=["<pad>", "</s>", "<unk>"],
                                      unk_token="<unk>")
    tok.train_from_iterator(lines, trainer)
    sentinels = [f"<extra_id_{i}>" for i in reversed(range(100))]  # T5: <extra_id_0> is the last id
    tok.add_special_tokens([AddedToken(s, special=True) for s in sentinels])
    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", eos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                                   additional_special_tokens=list(reversed(sentinels)), model_max_length=512)


def sentinel_ids(tokenizer) -> list[int]:
    """The ids of <extra_id_0>, <extra_id_1>, ... (T5's span-corruption sentinels)."""
    ids = tokenizer.convert_tokens_to_ids([f"<extra_id_{i}>" for i in range(100)])
    if tokenizer.unk_token_id in ids:
        raise ValueError("The tokenizer has no <extra_id_N> sentinel tokens, which span corruption needs.")
    return ids


# --------------------------------------------------------------------------------------------------------- models
@dataclass
class ModelArguments:
    """Where the model and tokenizer come from; each script sets its own default `--preset`."""

    preset: str | None = field(default=None, metadata={
        "help": "A preset from hf_attn_variants.presets, {bert,albert,t5}-{tiny,mini,small,base}-{dot-product, "
                "talking-heads, synthesizer-dense, synthesizer-random, synthesizer-mixture, single-head-admin (T5: "
                "single-head)}; the family picks the model class. Ignored with --model_name_or_path."})
    model_name_or_path: str | None = field(default=None, metadata={
        "help": "A checkpoint folder to start from: one of ours, or a transformers BERT/ALBERT/T5 one (with "
                "--attention_type for a function-preserving warm start)."})
    attention_type: str | None = field(default=None, metadata={
        "help": "Override the attention: dot_product, talking_heads or synthesizer."})
    config_overrides: str | None = field(default=None, metadata={
        "help": "JSON object of config fields, e.g. '{\"synthesizer_components\": [\"dense\", \"random\"]}'."})
    tokenizer_name: str | None = field(default=None, metadata={
        "help": "A tokenizer folder or Hub id. Default: the checkpoint's own, or the project's tokenizer of the family "
                "(WordPiece for BERT/ALBERT, Unigram with sentinels for T5) trained on the run's training text: "
                "the embedded corpus, or the first 20M characters of the training split of --train_file/"
                "--dataset_name (of the stream with --streaming); trained once per text (cached by its hash)."})
    vocab_size: int = field(default=8000, metadata={"help": "Vocabulary of the project's tokenizer."})


def load_tokenizer(model_args: ModelArguments, family: str, lines=None):
    """The checkpoint's (or --tokenizer_name's) tokenizer, else the project's tokenizer of the family, trained on
    `lines` (a list, or a function giving it, called only when needed; default: the embedded corpus)."""
    if model_args.tokenizer_name or model_args.model_name_or_path:
        # trust_remote_code: our checkpoints' config names their code; without it transformers asks on the terminal
        return AutoTokenizer.from_pretrained(model_args.tokenizer_name or model_args.model_name_or_path,
                                             trust_remote_code=True)
    return project_tokenizer(FAMILIES[family].tokenizer, model_args.vocab_size,
                             lines=lines() if callable(lines) else lines)


# a carved validation split of a pretraining corpus takes blocks of consecutive rows: documents stay mostly whole
PRETRAINING_VALIDATION_BLOCK_ROWS = 32


def pretraining_corpus(model_args: ModelArguments, data_args: DataArguments, training_args, family: str):
    """(raw splits, text column, tokenizer, eval data) of a pretraining run: the data the flags name (the embedded
    corpus by default) with the splits its stages need, the tokenizer (the project's is trained on the run's training
    text when the user gave data), and what the validation split is (`split_info`, for `finish`; None without one)."""
    raw = load_raw_datasets(replace(data_args, validation_split_percentage=0), default_files={"train": CORPUS},
                            seed=training_args.seed, select_samples=False)
    raw, carved = carve_missing_validation(raw, data_args.validation_split_percentage, training_args.seed,
                                           PRETRAINING_VALIDATION_BLOCK_ROWS)
    eval_data = split_info(data_args, "validation", CORPUS_INFO, carved_from="train" if carved else None) \
        if "validation" in raw else None
    for needed, split in ((training_args.do_train, "train"), (training_args.do_eval, "validation")):
        if needed and split not in raw:
            raise ValueError(f"The data has no {split} split (it has {sorted(raw)}): give --{split}_file, or "
                             "--validation_split_percentage above 0.")
    column = pick_column(raw["train" if "train" in raw else "validation"], data_args.text_column_name,
                         "--text_column_name", default="text")
    user_data = bool(data_args.dataset_name or data_args.train_file)
    with training_args.main_process_first(desc="the project tokenizer"):
        tokenizer = load_tokenizer(model_args, family, lines=(lambda: training_lines(raw["train"], column))
                                   if user_data and "train" in raw else None)
    return raw, column, tokenizer, eval_data


def checkpoint_model_type(model_name_or_path: str) -> str:
    """The `model_type` of a checkpoint folder: one of transformers' BERT/ALBERT/T5 or ours."""
    config_file = Path(model_name_or_path) / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{model_name_or_path} has no config.json: pass a folder saved with "
                                "`save_pretrained` (a transformers BERT/ALBERT/T5 or one of ours).")
    model_type = json.loads(config_file.read_text()).get("model_type")
    try:
        model_family(model_type)  # transformers' model types and ours: a vanilla checkpoint warm-starts its variant
    except ValueError as err:
        raise ValueError(f"{model_name_or_path}: {err} These scripts take checkpoints of those families.") from None
    return model_type


def family_of(model_name_or_path: str | None, preset: str | None) -> str:
    """The family name ('bert', 'albert', 't5': a key of `FAMILIES`), from a checkpoint's config.json or a preset."""
    if model_name_or_path:
        return model_family(checkpoint_model_type(model_name_or_path)).name
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}. Choose one of: {', '.join(PRESETS)}.")
    return PRESETS[preset].family


def parse_config_overrides(text: str | None) -> dict:
    if not text:
        return {}
    try:
        overrides = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"--config_overrides must be a JSON object, e.g. '{{\"num_hidden_layers\": 6}}': {err}"
        ) from None
    if not isinstance(overrides, dict):
        raise ValueError("--config_overrides must be a JSON object, e.g. '{\"num_hidden_layers\": 6}'.")
    return overrides


def load_or_build_model(head: str, model_name_or_path: str | None, preset: str | None, tokenizer,
                        attention_type: str | None = None, config_overrides: dict | None = None, **extra):
    """The model for task `head` (e.g. "ForMaskedLM"): from a checkpoint (ours, or a transformers BERT/ALBERT/T5 one
    warm-started as a variant: `attention_type` given, talking heads start as the identity and mixtures as the dot
    product, so the model starts as the checkpoint), or built from `preset` with the tokenizer's vocabulary.
    `extra` holds task fields (num_labels, id2label, ...)."""
    family = family_of(model_name_or_path, preset)
    model_class = getattr(hav, f"Variant{FAMILIES[family].prefix}{head}")
    overrides = {**(config_overrides or {}), **extra}
    if attention_type:
        overrides["attention_type"] = attention_type
    if model_name_or_path:
        vanilla = not checkpoint_model_type(model_name_or_path).startswith("variant_")
        if vanilla and attention_type:  # function-preserving warm start, unless the user chose otherwise
            overrides.setdefault("talking_heads_init", "identity")
            overrides.setdefault("synthesizer_mixture_init", "dot_product")
        model = model_class.from_pretrained(model_name_or_path, **overrides)
    else:
        config = preset_config(preset, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **overrides)
        if FAMILIES[family].encoder_decoder:
            config.eos_token_id = tokenizer.eos_token_id
            config.decoder_start_token_id = tokenizer.pad_token_id
        model = model_class(config)
    if model.config.vocab_size < len(tokenizer):
        raise ValueError(f"The tokenizer has {len(tokenizer)} tokens but the model only {model.config.vocab_size}: "
                         "use the checkpoint's own tokenizer (--tokenizer_name) or a smaller --vocab_size.")
    return model


def length_limit(config) -> tuple[int | None, str]:
    """The longest input the model takes and the field that sets it (None: no limit, T5's relative positions)."""
    if model_family(config).encoder_decoder:
        types = {config.attention_type_of(place) for place in ("encoder", "decoder")}
        if "synthesizer" in types:
            return config.synthesizer_max_position, "synthesizer_max_position"
        return None, ""
    if config.attention_type == "synthesizer" and config.synthesizer_max_position is not None:
        limit = min(config.synthesizer_max_position, config.max_position_embeddings)
        field_name = "synthesizer_max_position" if limit < config.max_position_embeddings else "max_position_embeddings"
        return limit, field_name
    return config.max_position_embeddings, "max_position_embeddings"


def align_tokenizer(tokenizer, config) -> None:
    """The tokenizer's `model_max_length` set to the longest input the model takes, so that the saved pair agrees
    (`pipeline(..., truncation=True)` truncates to what the model can read)."""
    limit, _ = length_limit(config)
    if limit is not None:
        tokenizer.model_max_length = limit


def check_max_length(config, max_seq_length: int, argument: str = "--max_seq_length") -> None:
    limit, field = length_limit(config)
    if limit is not None and max_seq_length > limit:
        raise ValueError(f"{argument}={max_seq_length} is longer than this model takes ({field}={limit}): pass "
                         f"{argument} {limit} or less, or build a model with a larger {field}.")


# -------------------------------------------------------------------------------------------------------- masking
def example_generator(input_ids, seed: int, epoch: int) -> torch.Generator:
    """A generator seeded by the example's content, the seed and the epoch: an example is masked the same way
    whichever process, batch or position it lands in (so 1 process and N processes see the same masks)."""
    digest = zlib.crc32(torch.as_tensor(input_ids, dtype=torch.int64).numpy().tobytes())
    return torch.Generator().manual_seed((seed * 1_000_003 + epoch * 7_919 + digest) % (2**63))


def word_continuation(tokenizer):
    """Whether a token continues the word before it: WordPiece marks continuations with '##', SentencePiece-style
    (metaspace) vocabularies mark word starts with '▁' instead."""
    if any(token.startswith("▁") for token in tokenizer.get_vocab()):
        return lambda token: not token.startswith("▁")
    return lambda token: token.startswith("##")


def mask_example(input_ids, tokenizer, probability: float, continues, generator: torch.Generator):
    """BERT's masking of one example: `probability` of the tokens are predicted, or whole words with `continues`
    (see `word_continuation`: a word's continuation tokens go with it); of those 80% become [MASK], 10% a random
    token, 10% stay. Returns (inputs, labels) with -100 where nothing is predicted."""
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    special = torch.tensor(tokenizer.get_special_tokens_mask(ids.tolist(), already_has_special_tokens=True),
                           dtype=torch.bool)
    tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
    words, current = [], []  # groups of positions predicted together
    for position, (token, is_special) in enumerate(zip(tokens, special.tolist())):
        if is_special:  # a word never continues across [CLS]/[SEP]
            current = []
            continue
        if continues is not None and current and continues(token):
            current.append(position)
        else:
            current = [position]
            words.append(current)
    budget = max(1, round((~special).sum().item() * probability))
    chosen = torch.zeros_like(special)
    for index in torch.randperm(len(words), generator=generator).tolist():
        if chosen.sum() >= budget:
            break
        if chosen.sum() + len(words[index]) <= budget or not chosen.any():
            chosen[words[index]] = True
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    roll = torch.rand(ids.shape, generator=generator)
    inputs = ids.clone()
    inputs[chosen & (roll < 0.8)] = tokenizer.mask_token_id
    swap = chosen & (roll >= 0.8) & (roll < 0.9)
    inputs[swap] = torch.randint(len(tokenizer), ids.shape, generator=generator)[swap]
    return inputs, labels


class MaskedLMCollator:
    """Pads a list of examples and masks those without labels (per-example generators, see `example_generator`).

    Examples that already carry `labels` (a pre-masked eval set: the same masks at every evaluation and for every
    model) are only padded. `epoch` is advanced by `EpochCallback`, so each epoch masks differently.
    """

    def __init__(self, tokenizer, probability: float = 0.15, whole_word: bool = False, seed: int = 0):
        if not 0 < probability < 1:
            raise ValueError(f"`mlm_probability` must be in (0, 1), got {probability}.")
        if tokenizer.mask_token_id is None:
            raise ValueError("The tokenizer has no mask token, which masked-LM pretraining needs.")
        self.tokenizer, self.probability, self.seed, self.epoch = tokenizer, probability, seed, 0
        self.continues = word_continuation(tokenizer) if whole_word else None

    def mask(self, example: dict) -> dict:
        generator = example_generator(example["input_ids"], self.seed, self.epoch)
        inputs, labels = mask_example(example["input_ids"], self.tokenizer, self.probability, self.continues,
                                      generator)
        return {**example, "input_ids": inputs, "labels": labels}

    def __call__(self, examples: list[dict]) -> dict:
        examples = [e if "labels" in e else self.mask(e) for e in examples]
        return pad_batch(examples, self.tokenizer.pad_token_id)


def pad_batch(examples: list[dict], pad_token_id: int) -> dict:
    """Right-pads every sequence field to its longest example (input_ids with the pad token, labels with -100, the
    rest with 0; labels may be shorter than the inputs, as a seq2seq target) and adds the attention mask."""
    batch = {}
    for key in examples[0]:
        values = [torch.as_tensor(e[key]) for e in examples]
        if values[0].dim() == 0:
            batch[key] = torch.stack(values)
            continue
        length = max(len(v) for v in values)
        fill = -100 if key == "labels" else pad_token_id if key == "input_ids" else 0
        batch[key] = torch.stack([torch.cat([v, v.new_full((length - len(v),), fill)]) for v in values])
    lengths = torch.tensor([len(e["input_ids"]) for e in examples])
    batch["attention_mask"] = (torch.arange(batch["input_ids"].shape[1]) < lengths[:, None]).long()
    return batch


class EpochCallback(TrainerCallback):
    """Tells a collator with an `epoch` attribute which epoch is starting."""

    def __init__(self, collator):
        self.collator = collator

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.collator.epoch = int(state.epoch or 0)


class StepTimer(TrainerCallback):
    """Wall-clock seconds of the optimisation steps alone (evaluation and saving excluded)."""

    def __init__(self):
        self.seconds, self.steps, self._start = 0.0, 0, None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds += time.perf_counter() - self._start
        self.steps += 1

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / max(1, self.steps)


# ----------------------------------------------------------------------------------------------- training flags
DO_FLAGS = ("--do_train", "--do_eval", "--do_predict")


def resolve_do_flags(argv: list[str] | None, training_args, default=("do_train", "do_eval")) -> None:
    """--do_train/--do_eval/--do_predict act as in transformers' examples: a script does what they ask and nothing
    else. With none of them on the command line a script does `default` (the main job: train, then evaluate)."""
    argv = sys.argv[1:] if argv is None else argv
    if not any(arg.split("=")[0] in DO_FLAGS for arg in argv):
        for name in default:
            setattr(training_args, name, True)
    if not (training_args.do_train or training_args.do_eval or training_args.do_predict):
        raise ValueError("Nothing to do: pass --do_train, --do_eval or --do_predict (or none of them for the "
                         "default).")


def check_pretraining_args(argv, training_args, data_args) -> None:
    """The checks both pretraining scripts make before anything runs: the stages (pretraining has no prediction),
    streaming, and the training arguments (see `check_training_args`)."""
    resolve_do_flags(argv, training_args)
    if training_args.do_predict or data_args.test_file or data_args.max_predict_samples is not None:
        raise ValueError("Pretraining has no prediction step (--do_predict, --test_file, --max_predict_samples): "
                         "use --do_train and/or --do_eval.")
    check_streaming(training_args, data_args)
    check_training_args(training_args)


def check_training_args(training_args) -> None:
    """Settings that make a correct run look broken, or do less than asked: pinned memory without CUDA (a warning
    at every evaluation) is turned off; warm-up that lasts the whole run gets a warning."""
    if not torch.cuda.is_available():
        training_args.dataloader_pin_memory = False
    warmup = training_args.warmup_steps
    if training_args.max_steps > 0 and warmup >= 1 and warmup >= training_args.max_steps:
        warnings.warn(f"--warmup_steps {int(warmup)} reaches --max_steps {training_args.max_steps}: the learning "
                      "rate never leaves warm-up. Pass a ratio instead, e.g. --warmup_steps 0.1.", stacklevel=2)


# -------------------------------------------------------------------------------------------------- bookkeeping
def finish(trainer, train_result, model_args: ModelArguments, script: str, task: str, dataset: dict,
           extra_metrics: dict | None = None, do_eval: bool = True, eval_data: dict | None = None,
           **training) -> dict:
    """What every script does after training: save the model and tokenizer, evaluate, write train/eval/all results,
    the trainer state, `training_info.json` and the model card (README.md), and with --push_to_hub push the folder
    and then the same model card (in place of Trainer's default README). Returns the train and eval metrics.
    `train_result` None: no training (--do_eval alone), the evaluation of the model as it was loaded is written;
    `do_eval` False: no evaluation. `eval_data` (name, source, split, hub_id, config: see `split_info`) says what
    the eval metrics were measured on, for the card."""
    args = trainer.args
    train_metrics, eval_metrics = {}, {}
    trainer.save_model()  # every run leaves a complete folder: the model it measured, its code, tokenizer and card
    if train_result is not None:
        train_metrics = {**train_result.metrics, **(extra_metrics or {}),
                         # ZeRO-3 leaves each process an empty placeholder per parameter; ds_numel is its real size
                         "num_parameters": sum(getattr(p, "ds_numel", p.numel()) for p in trainer.model.parameters())}
        trainer.log_metrics("train", train_metrics)
        trainer.save_metrics("train", train_metrics)
    if do_eval:
        eval_metrics = trainer.evaluate()
        trainer.log_metrics("eval", eval_metrics)
        trainer.save_metrics("eval", eval_metrics)  # save_metrics also merges both into all_results.json
    if train_result is not None:
        trainer.save_state()
    if trainer.is_world_process_zero():  # an evaluation-only run records itself and gets its card too
        evaluation = [{"metric_prefix": "eval_", "metric_suffix": "", **eval_data}] if eval_data and do_eval else None
        stages = None if train_result is not None else ["eval"]
        write_training_info(args.output_dir, script, task, model_args.preset, model_args.model_name_or_path, dataset,
                            args, evaluation=evaluation, stages=stages, **training)
        write_model_card(args.output_dir, args.hub_model_id)
    if args.push_to_hub:
        push_with_card(trainer)
    return {**train_metrics, **eval_metrics}


def resume_checkpoint(training_args) -> str | None:
    """`--resume_from_checkpoint PATH`, or `last` for the newest checkpoint in --output_dir; None starts afresh."""
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint == "last":
        checkpoint = get_last_checkpoint(training_args.output_dir) if Path(training_args.output_dir).is_dir() else None
        if checkpoint is None:
            raise ValueError(f"--resume_from_checkpoint last: {training_args.output_dir} holds no checkpoint-N folder.")
    elif checkpoint is not None and not Path(checkpoint).is_dir():
        raise FileNotFoundError(f"--resume_from_checkpoint {checkpoint}: no such folder.")
    return checkpoint


def write_training_info(output_dir, script: str, task: str, preset: str | None, base_model: str | None,
                        dataset: dict, training_args, evaluation: list[dict] | None = None,
                        stages: list[str] | None = None, **training) -> None:
    """`training_info.json`, read by `hf_attn_variants.publish` for the model card. `dataset` is the training data;
    `evaluation` says which data each recorded metric comes from: one entry per data set, the metrics named
    `metric_prefix` + name + `metric_suffix` (e.g. eval_accuracy_mm), with the data's name, source, split and, for
    a Hub dataset, `hub_id` and config. `stages`: what the run did ("train", "eval", "predict"), when not all
    of a training run."""
    info = {
        "script": f"examples/{Path(script).name}",
        "task": task,
        "preset": None if base_model else preset,
        "base_model": base_model,
        "dataset": dataset,
        "training": {
            "max_steps": training_args.max_steps,
            "learning_rate": training_args.learning_rate,
            "per_device_train_batch_size": training_args.per_device_train_batch_size,
            "seed": training_args.seed,
            **training,
        },
    }
    if evaluation is not None:
        info["evaluation"] = evaluation
    if stages is not None:
        info["stages"] = stages
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    (Path(output_dir) / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")


def data_file_info(train_file: str | None, default: dict) -> dict:
    if train_file:
        return {"name": Path(train_file).name, "source": "user-provided file", "license": "unknown"}
    return default


# ================================================================================================================
# Fine-tuning (run_classification.py, run_qa.py, run_text_to_text.py): splits, stages, metrics, predictions, and
# the model card every run writes. Kept in one section at the end of the file.
# ================================================================================================================


def choose_stages(training_args, argv, has_test_data: bool) -> None:
    """--do_train / --do_eval / --do_predict as in transformers' examples, with one default: a command line that
    names none of them trains and evaluates (and predicts when --test_file is given), so the bare script is the
    offline quick start. A command line that names some runs exactly those; without --do_eval (and without an
    explicit --eval_strategy) nothing is evaluated, also not during training. Then `check_training_args`."""
    import argparse

    from transformers.hf_argparser import string_to_bool
    from transformers.trainer_utils import IntervalStrategy

    argv = sys.argv[1:] if argv is None else list(argv)
    check_training_args(training_args)
    flags = argparse.ArgumentParser(add_help=False)
    for flag in DO_FLAGS:
        flags.add_argument(flag, type=string_to_bool, nargs="?", const=True, default=None)
    given = vars(flags.parse_known_args(argv)[0])  # {"do_train": True/False/None, ...}
    if all(value is None for value in given.values()):
        training_args.do_train, training_args.do_eval, training_args.do_predict = True, True, has_test_data
        return
    training_args.do_train, training_args.do_eval, training_args.do_predict = (
        bool(given[flag[2:]]) for flag in DO_FLAGS)
    if not training_args.do_eval and not any(a.split("=")[0] == "--eval_strategy" for a in argv):
        training_args.eval_strategy = IntervalStrategy.NO
    if has_test_data and not training_args.do_predict:
        raise ValueError("--test_file is given but --do_predict is not: add --do_predict, or leave out --test_file.")
    if not any((training_args.do_train, training_args.do_eval, training_args.do_predict)):
        raise ValueError("--do_train, --do_eval and --do_predict are all false: nothing to do.")


def is_hub_id(name: str | None) -> bool:
    """Whether --dataset_name names a Hub dataset (not a local folder)."""
    return bool(name) and not Path(name).exists()


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
        info["split"] = (f"{split}: {data_args.validation_split_percentage:g}% of the {carved_from} rows held out "
                         "(--validation_split_percentage)")
    return {k: v for k, v in info.items() if v is not None}


def finetuning_splits(data_args, *, default_files: dict | None, default_info: dict, seed: int,
                      eval_splits=("validation",), test_splits=("test",), convert_file=None):
    """The raw splits a fine-tuning script uses, loaded by `load_raw_datasets`: {"train": ..., eval split: ...,
    test split: ...} (only those present) and {split: `split_info`}. When the data holds none of `eval_splits`, a
    "validation" split is carved from train by --validation_split_percentage (the same seeded split as
    `load_raw_datasets`); max_{train,eval,predict}_samples keep the first N rows of each split. `convert_file`
    (path -> path) turns a data file into one datasets reads (e.g. SQuAD's nested JSON into JSON lines); the card
    still names the file the user gave."""
    from datasets import DatasetDict

    check_percentage(data_args.validation_split_percentage)
    if data_args.streaming:
        raise ValueError("The fine-tuning scripts read map-style datasets (they need the eval examples for "
                         "post-processing): leave out --streaming.")
    loading = replace(data_args, validation_split_percentage=0, max_train_samples=None, max_eval_samples=None,
                      max_predict_samples=None)
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
    limits = {"train": data_args.max_train_samples, **{s: data_args.max_eval_samples for s in (*eval_splits,
              "validation")}, **{s: data_args.max_predict_samples for s in test_splits}}
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
        raise ValueError("--do_eval needs evaluation data: pass --validation_file, a dataset with a validation "
                         "split, or --validation_split_percentage > 0 with training data.")
    if training_args.do_predict and not tested:
        raise ValueError("--do_predict needs test data: pass --test_file, or a --dataset_name with a test split.")
    return evaluated if training_args.do_eval else [], tested if training_args.do_predict else []


def load_metric(metric_name: str, config_name: str | None = None):
    """An evaluate module (Hub id or local path), loaded once before training so that a wrong name fails early."""
    import evaluate

    try:
        return evaluate.load(metric_name, config_name) if config_name else evaluate.load(metric_name)
    except Exception as error:  # evaluate raises FileNotFoundError, ConnectionError, ValueError, ...
        raise ValueError(f"--metric_name {metric_name}: evaluate.load failed ({type(error).__name__}: {error}). "
                         "Pass a local metric script path, or an evaluate module id reachable from here.") from error


def project_or_checkpoint_tokenizer(model_args, family: str, data_args, training_args, splits, columns: list[str]):
    """`load_tokenizer` for a fine-tuning script: the project tokenizer of a run on the user's data is trained on
    the text `columns` of its training split (`training_lines` of each; columns that do not hold text are skipped),
    as --tokenizer_name's help says."""
    from datasets import Value

    train = splits.get("train")
    user_data = bool(data_args.dataset_name or data_args.train_file) and train is not None
    text = [c for c in columns if isinstance(train.features.get(c), Value) and train.features[c].dtype in (
        "string", "large_string")] if user_data else []

    def lines():
        return [line for column in text for line in training_lines(train, column)]

    with training_args.main_process_first(desc="the project tokenizer"):
        return load_tokenizer(model_args, family, lines=lines if text else None)


@dataclass
class Evaluation:
    """One evaluation set: its features, what they are (`split_info`), the metrics' function and the suffix its
    metric names get (run_glue's "_mm" for mnli's mismatched validation; "" for the main one)."""

    dataset: object
    info: dict
    compute_metrics: object
    suffix: str = ""


@dataclass
class Prediction:
    """One prediction set: its features, what they are, and `write(PredictionOutput, output_dir) -> metrics` that
    writes the predictions file(s) and returns any metrics to record (e.g. when the test data has labels)."""

    dataset: object
    info: dict
    write: object
    compute_metrics: object = None
    suffix: str = ""


def run_finetuning(trainer, model_args, script: str, task: str, *, train_info: dict | None,
                   evaluations: list, predictions: list, **training) -> dict:
    """The stages of a fine-tuning script, as transformers' examples run them: --do_train (train, save the model,
    train metrics, trainer state), --do_eval (each `Evaluation`, metrics suffixed), --do_predict (each
    `Prediction`, its file written); then `training_info.json`, the model card (README.md) in the output folder,
    and with --push_to_hub the push and the same card on the Hub. The model is saved in every run, so the output
    folder is the checkpoint its card and metrics describe. Returns all metrics."""
    args = trainer.args
    results = {}
    if args.do_train:
        train_result = trainer.train(resume_from_checkpoint=resume_checkpoint(args))
        metrics = {**train_result.metrics, "train_samples": len(trainer.train_dataset),
                   "num_parameters": sum(p.numel() for p in trainer.model.parameters())}
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()
        results.update(metrics)
    trainer.save_model()
    if args.do_eval:
        combined = {}
        for evaluation in evaluations:
            trainer.compute_metrics = evaluation.compute_metrics
            metrics = trainer.evaluate(eval_dataset=evaluation.dataset)
            metrics = {f"{k}{evaluation.suffix}": v for k, v in
                       {**metrics, "eval_samples": len(evaluation.dataset)}.items()}
            trainer.log_metrics("eval", metrics)
            combined.update(metrics)
        trainer.save_metrics("eval", combined)
        results.update(combined)
    if args.do_predict:
        combined = {}
        for prediction in predictions:
            trainer.compute_metrics = prediction.compute_metrics
            output = trainer.predict(prediction.dataset, metric_key_prefix="predict")
            metrics = {**(output.metrics or {}), **(prediction.write(output, args.output_dir) or {})}
            metrics = {f"{k}{prediction.suffix}": v for k, v in
                       {**metrics, "predict_samples": len(prediction.dataset)}.items()}
            trainer.log_metrics("predict", metrics)
            combined.update(metrics)
        trainer.save_metrics("predict", combined)
        results.update(combined)
    measured = [{"metric_prefix": "eval_", "metric_suffix": e.suffix, **e.info} for e in evaluations] \
        if args.do_eval else []
    measured += [{"metric_prefix": "predict_", "metric_suffix": p.suffix, **p.info} for p in predictions] \
        if args.do_predict else []
    if args.do_train:
        training["steps"] = trainer.state.global_step
    if trainer.is_world_process_zero():
        stages = [name for name, flag in (("train", args.do_train), ("eval", args.do_eval),
                                          ("predict", args.do_predict)) if flag]
        write_training_info(args.output_dir, script, task, model_args.preset, model_args.model_name_or_path,
                            (train_info or {}) if args.do_train else {}, args, evaluation=measured, stages=stages,
                            **training)
        write_model_card(args.output_dir, args.hub_model_id)
    if args.push_to_hub:
        push_with_card(trainer)
    return results


def write_model_card(output_dir, repo_id: str | None = None, revision: str | None = None) -> Path:
    """README.md in `output_dir`: the card `hf_attn_variants.publish.render_card` makes of the folder, addressed to
    `repo_id` (default: the folder itself, which loads as it is) without a pinned revision until it is pushed."""
    from hf_attn_variants.publish import render_card

    path = Path(output_dir) / "README.md"
    render_card(output_dir, repo_id or str(output_dir), revision).save(path)
    return path


def push_with_card(trainer) -> None:
    """Trainer's push, then our card in place of Trainer's default README, on the Hub and in the output folder."""
    trainer.push_to_hub()
    if trainer.is_world_process_zero():
        published = upload_card(trainer.args.output_dir, trainer.hub_model_id, token=trainer.args.hub_token)
        write_model_card(trainer.args.output_dir, trainer.hub_model_id, published.model_commit)
