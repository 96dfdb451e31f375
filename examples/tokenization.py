"""The tokenizers of the example scripts: a checkpoint's own (or --tokenizer_name's), or the project's tokenizer of
the family (WordPiece for BERT/ALBERT, Unigram with T5's sentinels), trained once on the run's training text and
cached by a hash of that text (`$HF_ATTN_VARIANTS_CACHE`, default `~/.cache/hf_attn_variants`).

Both are functions of their training text (the same bytes in any process, on any machine): the WordPiece's merges
and the Unigram's EM and pruning are our own code (`vocabularies.py`), and `tokenizers`
only runs the vocabulary they give, because its trainers' results depend on the iteration order of hash maps seeded
afresh in every process.
"""

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerFast

from data_loading import CORPUS, read_documents
from hf_attn_variants.families import FAMILIES
from vocabularies import unigram_vocabulary, wordpiece_vocabulary


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
    """BERT's uncased WordPiece, trained deterministically (see `wordpiece_vocabulary`)."""
    from collections import Counter

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
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=512)


def _train_unigram(lines, vocab_size):
    """T5's Unigram with its 100 sentinels, trained deterministically (see `unigram_vocabulary`)."""
    from collections import Counter

    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    special = ["<pad>", "</s>", "<unk>"]
    normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    word_counts = Counter()
    for line in lines:  # the words the trainer would see: normalised, then pre-tokenized, as at encoding
        word_counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line)))
    sentinels = [f"<extra_id_{i}>" for i in reversed(range(100))]  # T5: <extra_id_0> is the last id
    pieces = unigram_vocabulary(word_counts, vocab_size - len(special) - len(sentinels))
    tok = Tokenizer(models.Unigram([(s, 0.0) for s in special] + pieces, unk_id=special.index("<unk>"),
                                   byte_fallback=False))
    tok.normalizer, tok.pre_tokenizer = normalizer, pre_tokenizer
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.add_special_tokens(special)
    tok.add_special_tokens([AddedToken(s, special=True) for s in sentinels])
    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", eos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                                   additional_special_tokens=list(reversed(sentinels)), model_max_length=512)


def _holds_text(dataset, column: str) -> bool:
    """Whether a column holds strings (a streamed dataset whose features are unknown is taken at its word)."""
    from datasets import Value

    if dataset.features is None:
        return True
    feature = dataset.features.get(column)
    return isinstance(feature, Value) and feature.dtype in ("string", "large_string")


def load_tokenizer(model_args, family: str, data_args, training_args, train=None, columns=()):
    """The run's tokenizer: --tokenizer_name's, else the checkpoint's (--model_name_or_path), else the project's
    tokenizer of the family (`FAMILIES[family].tokenizer`, --vocab_size), trained on the run's training text: the
    text `columns` of the `train` split when the user gave data (the first `TOKENIZER_SAMPLE_CHARS` characters of
    each; columns that hold no text are skipped), else the embedded corpus. Under torchrun the main process trains
    it first and the others read its cache."""
    with training_args.main_process_first(desc="the tokenizer"):
        if model_args.tokenizer_name or model_args.model_name_or_path:
            # trust_remote_code: our checkpoints' config names their code; without it transformers asks on the terminal
            return AutoTokenizer.from_pretrained(model_args.tokenizer_name or model_args.model_name_or_path,
                                                 trust_remote_code=True)
        user_data = bool(data_args.dataset_name or data_args.train_file) and train is not None
        text = [column for column in columns if _holds_text(train, column)] if user_data else []
        lines = [line for column in text for line in training_lines(train, column)] if text else None
        return project_tokenizer(FAMILIES[family].tokenizer, model_args.vocab_size, lines=lines)
