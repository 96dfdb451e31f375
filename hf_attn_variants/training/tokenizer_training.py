"""Deterministic tokenizers for pretraining from scratch: BERT's uncased WordPiece and T5's Unigram with its 100
sentinels, trained on any lines of text. Package-only; `tokenizers` (a dependency of transformers) runs them.

    from hf_attn_variants.training.tokenizer_training import train_tokenizer

    tokenizer = train_tokenizer("unigram", 8000, lines=my_lines)   # a PreTrainedTokenizerFast; T5's special tokens

Both are functions of their training text (the same bytes in any process, on any machine): the WordPiece's merges
and the Unigram's EM and pruning are our own code (`hf_attn_variants.training.vocabularies`), and `tokenizers` only runs the
vocabulary they give, because its trainers' results depend on the iteration order of hash maps seeded afresh in
every process. `train_tokenizer` trains once per text and keeps the result in `cache_dir()`.
"""

import hashlib
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from .pretraining_data import read_documents
from .vocabularies import unigram_vocabulary, wordpiece_vocabulary

TOKENIZER_KINDS = ("wordpiece", "unigram")


def cache_dir() -> Path:
    """Where the package keeps what it trains once per input: `$HF_ATTN_VARIANTS_CACHE`, default
    `~/.cache/hf_attn_variants`."""
    return Path(os.environ.get("HF_ATTN_VARIANTS_CACHE", Path.home() / ".cache" / "hf_attn_variants"))


def train_tokenizer(
    kind: str, vocab_size: int = 8000, *, lines: list[str] | None = None, corpus: str | os.PathLike | None = None
) -> PreTrainedTokenizerFast:
    """A tokenizer trained on `lines`, or on the lines of the text file `corpus` (give one of them): `"wordpiece"`
    (BERT/ALBERT: [PAD]=0, [UNK], [CLS], [SEP], [MASK]; `wordpiece_tokenizer`) or `"unigram"` (T5: <pad>=0,
    </s>=1, <unk>=2, <extra_id_0> the last id; `unigram_tokenizer`). Trained once per content (cached by a hash of
    the text in `cache_dir()`), then read from the cache."""
    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"Unknown tokenizer kind {kind!r}: use 'wordpiece' or 'unigram'.")
    if (lines is None) == (corpus is None):
        raise ValueError("Give the text to train the tokenizer on: `lines` or `corpus` (a text file), one of them.")
    if lines is None:
        corpus = Path(corpus)
        key = hashlib.sha256(corpus.read_bytes() + f"{kind}/{vocab_size}/3".encode()).hexdigest()[:16]
    else:
        digest = hashlib.sha256(f"{kind}/{vocab_size}/lines/3".encode())
        for line in lines:
            digest.update(line.encode() + b"\n")
        key = digest.hexdigest()[:16]
    target = cache_dir() / "tokenizers" / f"{kind}-{vocab_size}-{key}"
    if not (target / "tokenizer.json").is_file():
        if lines is None:
            lines = [line for document in read_documents(corpus) for line in document]
        if not lines:
            raise ValueError("No text to train the tokenizer on: the training data is empty.")
        train = wordpiece_tokenizer if kind == "wordpiece" else unigram_tokenizer
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=target.parent))
        train(lines, vocab_size).save_pretrained(scratch)
        try:
            os.replace(scratch, target)  # atomic: concurrent processes (torchrun) never see half a tokenizer
        except OSError:  # another process finished first
            shutil.rmtree(scratch, ignore_errors=True)
    return PreTrainedTokenizerFast.from_pretrained(target)


def wordpiece_tokenizer(lines: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """BERT's uncased WordPiece of `vocab_size` tokens, trained deterministically on `lines` (see
    `wordpiece_vocabulary`); not cached."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    word_counts = Counter()
    for line in lines:  # the words the trainer would see: normalised, then pre-tokenized, as at encoding
        word_counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line)))
    vocab = wordpiece_vocabulary(word_counts, vocab_size, special)
    tok = Tokenizer(models.WordPiece({token: i for i, token in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = normalizer, pre_tokenizer
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(special)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
    )


def unigram_tokenizer(lines: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """T5's Unigram of `vocab_size` tokens with its 100 sentinels, trained deterministically on `lines` (see
    `unigram_vocabulary`); not cached."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    special = ["<pad>", "</s>", "<unk>"]
    normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    word_counts = Counter()
    for line in lines:  # the words the trainer would see: normalised, then pre-tokenized, as at encoding
        word_counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line)))
    sentinels = [f"<extra_id_{i}>" for i in reversed(range(100))]  # T5: <extra_id_0> is the last id
    pieces = unigram_vocabulary(word_counts, vocab_size - len(special) - len(sentinels))
    tok = Tokenizer(
        models.Unigram([(s, 0.0) for s in special] + pieces, unk_id=special.index("<unk>"), byte_fallback=False)
    )
    tok.normalizer, tok.pre_tokenizer = normalizer, pre_tokenizer
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.add_special_tokens(special)
    tok.add_special_tokens([AddedToken(s, special=True) for s in sentinels])
    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", eos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        additional_special_tokens=list(reversed(sentinels)),
        model_max_length=512,
    )
