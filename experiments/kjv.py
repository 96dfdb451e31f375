"""The King James Bible corpus (examples/data/kjv.txt.gz) decompressed once into the cache, as text files the
example scripts take with --train_file / --validation_file.

    python experiments/kjv.py              # prints the three paths, decompressing on the first call
    python examples/run_pretraining.py --train_file "$(python experiments/kjv.py --split train)" \
        --validation_file "$(python experiments/kjv.py --split validation)" --max_seq_length 128

Files (documents separated by blank lines, one chapter per document, one verse per line):
- `kjv.txt`: all 1189 chapters (4.1 MB); as `--train_file` alone the script carves its own validation split;
- `kjv_validation.txt`: every 20th chapter (the 20th, 40th, ...: 59 chapters from across the books, about 5%);
- `kjv_train.txt`: the other 1130 chapters. The experiments use this fixed pair, so every cell (every variant and
  every seed) is evaluated on the same held-out chapters.

The cache folder is `$HF_ATTN_VARIANTS_CACHE/data/kjv-<hash>` (default ~/.cache/hf_attn_variants), named by a hash
of the compressed file, and written atomically (concurrent callers never see half a file).

The research cells' tokenizer is committed beside the corpus, `examples/data/kjv-wordpiece-8000/` (the project's
uncased WordPiece, 8000 tokens, trained on the lines of `kjv_train.txt`; its training is deterministic, so this
command rewrites the same bytes on any machine, and `TOKENIZER_SHA256` is the hash of its tokenizer.json):

    python experiments/kjv.py --write_tokenizer examples/data/kjv-wordpiece-8000
"""

import gzip
import hashlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = ROOT / "examples" / "data" / "kjv.txt.gz"
VALIDATION_EVERY = 20  # every 20th chapter is held out
SPLITS = ("all", "train", "validation")
TOKENIZER = ROOT / "examples" / "data" / "kjv-wordpiece-8000"
TOKENIZER_SHA256 = "1a9d19a8ea79df50d513598aee67129d052cab5de3fd29b4c9d6e722b4defb82"  # of TOKENIZER/tokenizer.json
FILE_NAMES = {"all": "kjv.txt", "train": "kjv_train.txt", "validation": "kjv_validation.txt"}


def cache_root() -> Path:
    return Path(os.environ.get("HF_ATTN_VARIANTS_CACHE", Path.home() / ".cache" / "hf_attn_variants"))


def split_documents(text: str) -> dict[str, list[str]]:
    """{split: [chapter, ...]}: chapters are the blank-line separated documents of the corpus."""
    chapters = [c.strip("\n") for c in text.split("\n\n") if c.strip()]
    held = [i % VALIDATION_EVERY == VALIDATION_EVERY - 1 for i in range(len(chapters))]
    return {
        "all": chapters,
        "train": [c for c, h in zip(chapters, held) if not h],
        "validation": [c for c, h in zip(chapters, held) if h],
    }


def kjv_files(archive: str | os.PathLike = ARCHIVE, cache: str | os.PathLike | None = None) -> dict[str, Path]:
    """{"all"|"train"|"validation": path of the text file}, decompressing `archive` into the cache if needed."""
    archive = Path(archive)
    if not archive.is_file():
        raise FileNotFoundError(f"{archive}: no such file (the corpus ships in examples/data/kjv.txt.gz).")
    data = archive.read_bytes()
    target = Path(cache or cache_root()) / "data" / f"kjv-{hashlib.sha256(data).hexdigest()[:16]}"
    paths = {split: target / name for split, name in FILE_NAMES.items()}
    if all(p.is_file() for p in paths.values()):
        return paths
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=target.parent))
    for split, documents in split_documents(gzip.decompress(data).decode()).items():
        (scratch / FILE_NAMES[split]).write_text("\n\n".join(documents) + "\n")
    try:
        os.replace(scratch, target)  # atomic; fails when another process finished first (or a partial old folder)
    except OSError:
        if not all(p.is_file() for p in paths.values()):
            shutil.rmtree(target, ignore_errors=True)
            os.replace(scratch, target)
        shutil.rmtree(scratch, ignore_errors=True)
    return paths


def write_tokenizer(target: str | os.PathLike) -> Path:
    """Train the project's WordPiece (8000 tokens) on the lines of the training split and save it in `target`;
    returns the path of its tokenizer.json."""
    from hf_attn_variants.training.pretraining_data import read_documents
    from hf_attn_variants.training.tokenizer_training import wordpiece_tokenizer

    lines = [line for document in read_documents(kjv_files()["train"]) for line in document]
    wordpiece_tokenizer(lines, 8000).save_pretrained(target)
    return Path(target) / "tokenizer.json"


@dataclass
class KjvArguments:
    split: str | None = field(
        default=None,
        metadata={"help": "Print only this split's path: all, train or validation. Default: all three, one per line."},
    )
    write_tokenizer: str | None = field(
        default=None,
        metadata={
            "help": "Train the research cells' WordPiece on the training split into this folder (the committed one is "
            "examples/data/kjv-wordpiece-8000) and print its tokenizer.json's sha256."
        },
    )


def main(argv=None) -> dict[str, Path]:
    from transformers import HfArgumentParser

    (args,) = HfArgumentParser(KjvArguments).parse_args_into_dataclasses(argv)
    if args.split is not None and args.split not in SPLITS:
        raise ValueError(f"--split must be one of {', '.join(SPLITS)}, got {args.split!r}.")
    if args.write_tokenizer is not None:
        path = write_tokenizer(args.write_tokenizer)
        print(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path}")
        return {"tokenizer": path}
    paths = kjv_files()
    for split in [args.split] if args.split else SPLITS:
        print(paths[split] if args.split else f"{split}\t{paths[split]}")
    return paths


if __name__ == "__main__":
    sys.exit(main() and 0)
