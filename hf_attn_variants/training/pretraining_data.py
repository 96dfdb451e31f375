"""Pretraining examples cut from text, each step a batched `Dataset.map` function (the collators of
`hf_attn_variants.training.data_collators` then mask or corrupt them at batch time). Package-only; numpy alone.

- `pack_batch`: masked LM, the token stream packed into [CLS] ... [SEP] blocks (as transformers' run_mlm groups
  texts); `block_batch`: T5, raw blocks for span corruption;
- `pair_batch`: BERT's next-sentence (NSP) and ALBERT's sentence-order (SOP) segment pairs, cut from the sentences of
  each document as BERT's create_pretraining_data does; documents come from rows of text (`rows_to_documents`);
- `read_documents`: a text file as documents (blank lines between them).

    from hf_attn_variants.training.pretraining_data import pack_batch

    blocks = raw["train"].map(pack_batch, batched=True, remove_columns=["text"],
                              fn_kwargs={"tokenizer": tokenizer, "column": "text", "max_seq_length": 128})
"""

import itertools
import os
import random
import re
import zlib
from pathlib import Path

import numpy as np

_BLANK_LINE = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')_]*\s+(?=[\"'(_]*[A-Z0-9])")


def read_documents(path: str | os.PathLike) -> list[list[str]]:
    """A text file as documents: blank lines separate documents, each line of a document is one paragraph."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No such data file: {path}. Pass an existing text file (documents separated by blank lines)."
        )
    text = path.read_text(encoding="utf-8")
    documents = [[line.strip() for line in block.splitlines() if line.strip()] for block in _BLANK_LINE.split(text)]
    documents = [d for d in documents if d]
    if not documents:
        raise ValueError(f"{path} holds no text.")
    return documents


# -------------------------------------------------------------------------------------------------------- packing
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


def pack_batch(batch, tokenizer, column: str, max_seq_length: int) -> dict:
    """Masked LM (a batched map): the batch's token stream cut into [CLS] x [SEP] blocks of max_seq_length."""
    blocks = token_blocks(batch[column], tokenizer, max_seq_length - 2)
    edge = np.ones((len(blocks), 1), dtype=np.int32)
    return {"input_ids": np.concatenate([edge * tokenizer.cls_token_id, blocks, edge * tokenizer.sep_token_id], 1)}


def line_batch(batch, tokenizer, column: str, max_seq_length: int) -> dict:
    """Masked LM line by line (a batched map): each non-empty row one sequence, [CLS] row [SEP], its tokens past
    max_seq_length cut (as run_mlm's --line_by_line). Sequences of many lengths: padded per batch, or packed into one
    row with --padding_free."""
    encoded = encode_texts(tokenizer, [t for t in batch[column] if t and t.strip()])
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    return {"input_ids": [[cls, *ids[: max_seq_length - 2], sep] for ids in encoded if ids]}


def block_batch(batch, tokenizer, column: str, raw_length: int) -> dict:
    """Span corruption (a batched map): the batch's token stream (no </s>) cut into blocks of `raw_length`
    (`data_collators.raw_length_for`)."""
    return {"input_ids": token_blocks(batch[column], tokenizer, raw_length)}


# ------------------------------------------------------------------------------------------------------- NSP / SOP
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


def tokenize_sentences(documents, tokenizer):
    """Every document as a list of sentences, each a list of token ids (no special tokens); one batched call."""
    sentences = [[s for p in doc for s in split_sentences(p)] for doc in documents]
    flat = [s for doc in sentences for s in doc]
    ids = iter(encode_texts(tokenizer, flat))
    return [[next(ids) for _ in doc] for doc in sentences]


def sentence_label(objective: str) -> str:
    """The label field of the sentence objective, "nsp" or "sop" (the ForPreTraining heads' forward argument)."""
    if objective not in ("nsp", "sop"):
        raise ValueError(f"The sentence objective must be nsp (BERT) or sop (ALBERT), got {objective!r}.")
    return "next_sentence_label" if objective == "nsp" else "sentence_order_label"


def pair_batch(batch, tokenizer, column: str, max_seq_length: int, objective: str, seed: int) -> dict:
    """NSP/SOP (a batched map): the segment pairs of the batch's documents (`pair_examples`), with a generator
    seeded by the seed and the batch's text, so a batch gives the same pairs in every process and every run."""
    texts = batch[column]
    documents = tokenize_sentences(rows_to_documents(texts), tokenizer)
    batch_seed = zlib.crc32("\n".join(t or "" for t in texts).encode(), seed)
    examples = pair_examples(documents, tokenizer, max_seq_length, objective, batch_seed)
    return {key: [e[key] for e in examples] for key in ("input_ids", "token_type_ids", sentence_label(objective))}


def pair_examples(documents, tokenizer, max_seq_length: int, objective: str, seed: int) -> list[dict]:
    """Segment pairs [CLS] A [SEP] B [SEP] cut from consecutive sentences (BERT's create_pretraining_data).

    nsp: label 1 when B is a random span from elsewhere in the corpus (half of the pairs), 0 when it follows A.
    sop: label 1 when A and B are swapped (half of the pairs), 0 in their original order.
    """
    key, rng = sentence_label(objective), random.Random(seed)
    sentences = [s for doc in documents for s in doc if s]
    budget = max_seq_length - 3
    examples, chunk, length = [], [], 0
    for index, sentence in enumerate(sentences):
        chunk.append(sentence)
        length += len(sentence)
        if length < budget and index < len(sentences) - 1:
            continue
        tokens = [t for s in chunk for t in s]
        if len(chunk) > 1:
            cut = sum(len(s) for s in chunk[: rng.randint(1, len(chunk) - 1)])
        else:
            cut = len(tokens) // 2
        first, second = tokens[:cut], tokens[cut:]
        label = int(rng.random() < 0.5)
        if objective == "nsp" and label:
            start = (index + rng.randint(len(sentences) // 4, 3 * len(sentences) // 4)) % len(sentences)
            second = [t for s in sentences[start : start + len(chunk)] for t in s]
        elif objective == "sop" and label:
            first, second = second, first
        while len(first) + len(second) > budget:  # trim the longer side, from a random end
            side = first if len(first) > len(second) else second
            del side[0 if rng.random() < 0.5 else -1]
        if first and second:
            ids = [tokenizer.cls_token_id, *first, tokenizer.sep_token_id, *second, tokenizer.sep_token_id]
            types = [0] * (len(first) + 2) + [1] * (len(second) + 1)
            examples.append({"input_ids": ids, "token_type_ids": types, key: label})
        chunk, length = [], 0
    return examples
