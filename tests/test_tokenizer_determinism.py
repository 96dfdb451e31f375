"""The project's WordPiece is a function of its training text: byte-identical files from two fresh processes (other
hash seeds, other thread counts), the merges of `tokenizers`' own BpeTrainer where that trainer is deterministic, and
the committed KJV tokenizer of the research cells rebuilt from its documented command.

`tokenizers`' WordPieceTrainer is not deterministic: it numbers the continuation tokens ("##e") in the order of a
Rust HashMap seeded per process, and breaks ties between equally frequent pairs by those numbers. On the 2000 lines
below it gave a different tokenizer.json in every process."""

import gzip
import hashlib
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "experiments"))

import kjv  # noqa: E402
from tokenization import wordpiece_vocabulary  # noqa: E402

TRAIN = """
import sys
sys.path.insert(0, "examples")
from tokenization import project_tokenizer
project_tokenizer("wordpiece", 3000, corpus=sys.argv[1])
"""


def kjv_lines(count: int) -> list[str]:
    return [line for line in gzip.decompress(kjv.ARCHIVE.read_bytes()).decode().splitlines()[:count] if line]


def train_in_fresh_process(tmp_path: Path, corpus: Path, name: str, **env) -> dict[str, bytes]:
    """The files of the project WordPiece trained on `corpus` by a new interpreter with its own empty cache."""
    cache = tmp_path / name
    environment = {**os.environ, "HF_ATTN_VARIANTS_CACHE": str(cache), "PYTHONPATH": str(ROOT), **env}
    subprocess.run([sys.executable, "-c", TRAIN, str(corpus)], cwd=ROOT, env=environment, check=True,
                   capture_output=True, timeout=300)
    (folder,) = (cache / "tokenizers").iterdir()
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_wordpiece_is_byte_identical_in_two_fresh_processes(tmp_path):
    corpus = tmp_path / "text.txt"
    corpus.write_text("\n".join(kjv_lines(2000)) + "\n")
    first = train_in_fresh_process(tmp_path, corpus, "a", PYTHONHASHSEED="1", RAYON_NUM_THREADS="1",
                                   TOKENIZERS_PARALLELISM="false")
    second = train_in_fresh_process(tmp_path, corpus, "b", PYTHONHASHSEED="2", RAYON_NUM_THREADS="3",
                                    TOKENIZERS_PARALLELISM="true")
    assert set(first) == {"tokenizer.json", "tokenizer_config.json"}
    assert first == second


def test_merges_are_those_of_tokenizers_bpe_trainer():
    """With no continuation prefix every token id is fixed before the merges, so `tokenizers`' BpeTrainer is
    deterministic: our vocabulary must equal its, token for token and id for id (ties included: small text has
    many)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    lines = kjv_lines(1500)
    theirs = Tokenizer(models.BPE())
    theirs.normalizer = normalizers.BertNormalizer(lowercase=True)
    theirs.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    theirs.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=2500, special_tokens=["[PAD]", "[UNK]"],
                                                          show_progress=False))
    vocab = theirs.get_vocab()
    words = Counter(word for line in lines
                    for word, _ in theirs.pre_tokenizer.pre_tokenize_str(theirs.normalizer.normalize_str(line)))
    ours = wordpiece_vocabulary(words, 2500, ["[PAD]", "[UNK]"], prefix="")
    assert len(ours) == 2500
    assert ours == sorted(vocab, key=vocab.get)


def test_wordpiece_vocabulary_continuation_tokens():
    """Hand-checked: 'aaab' (x2) and 'ab' (x1). Alphabet a, b; continuations ##a, ##b; pair counts (a,##a) 2,
    (##a,##a) 2, (##a,##b) 2, (a,##b) 1: the tie at 2 goes to the smallest ids, (a, ##a) -> 'aa'; then 'aaab' is
    aa ##a ##b: (aa,##a) 2 and (##a,##b) 2 tie, ##a (id 2) < aa (id 4), so '##ab'; then 'aa' + '##ab' -> 'aaab'."""
    assert wordpiece_vocabulary({"aaab": 2, "ab": 1}, 7, []) == ["a", "b", "##a", "##b", "aa", "##ab", "aaab"]
    assert wordpiece_vocabulary({"ab": 1, "aaab": 2}, 7, []) == wordpiece_vocabulary({"aaab": 2, "ab": 1}, 7, [])


@pytest.mark.skipif(not kjv.TOKENIZER.is_dir(), reason="the committed KJV tokenizer is absent")
def test_committed_kjv_tokenizer_is_its_documented_command(tmp_path):
    assert hashlib.sha256((kjv.TOKENIZER / "tokenizer.json").read_bytes()).hexdigest() == kjv.TOKENIZER_SHA256
    written = kjv.write_tokenizer(tmp_path / "kjv-wordpiece-8000")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (written.parent / name).read_bytes() == (kjv.TOKENIZER / name).read_bytes(), name
