"""Data collators for pretraining the variants with `Trainer`: masked LM as BERT masks (80% [MASK], 10% a random
token, 10% unchanged; optional whole-word masking) and T5's span corruption, each drawing its noise per example from a
generator seeded by the example's tokens, the seed and the epoch, so that one process and N processes train on the
same masks. Package-only (no modeling file imports it); torch alone.

    from hf_attn_variants import DataCollatorForT5SpanCorruption, EpochCallback, MaskedLMCollator

    collator = MaskedLMCollator(tokenizer, probability=0.15, whole_word=True)
    trainer = Trainer(model, args, train_dataset=blocks, data_collator=collator, callbacks=[EpochCallback(collator)])

Both take examples of `{"input_ids": [...]}` (packed blocks: `hf_attn_variants.training.pretraining_data`); an example that
already carries `labels` (an evaluation set labelled once, e.g. with `collator.mask` or `collator.corrupt` in a
batched `Dataset.map`) is only padded. Set `TrainingArguments(remove_unused_columns=False)`: the collators read every
field of an example.
"""

import zlib

import torch

# The seed the example scripts label their evaluation sets with, once (`MaskedLMCollator.mask`,
# `DataCollatorForT5SpanCorruption.corrupt` in a batched map), so that every evaluation, and every model trained on
# the same data, sees the same masks.
EVAL_SEED = 1234


def example_generator(input_ids, seed: int, epoch: int) -> torch.Generator:
    """A generator seeded by the example's content, the seed and the epoch: an example is masked the same way
    whichever process, batch or position it lands in (so 1 process and N processes see the same masks)."""
    digest = zlib.crc32(torch.as_tensor(input_ids, dtype=torch.int64).numpy().tobytes())
    return torch.Generator().manual_seed((seed * 1_000_003 + epoch * 7_919 + digest) % (2**63))


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


def flatten_batch(examples: list[dict]) -> dict:
    """The examples packed into one row, transformers' padding-free input (as `DataCollatorWithFlattening` makes
    it): every sequence field concatenated into [1, total], `position_ids` that restart at 0 at each example, and no
    attention mask (an example's own is dropped). BERT and ALBERT keep the examples apart (each attends only within
    itself), so no token is padding and none is computed for nothing. A field of one value per example (a class
    label) stays one per example, [examples], and `label`/`label_ids` are named `labels` (as transformers' collators
    name them): the sequence-level heads answer once per packed sequence. A `Trainer`'s `data_collator` as it is:
    the drop-in for `DataCollatorWithPadding` on BERT and ALBERT."""
    batch = {}
    for key in examples[0]:
        if key == "attention_mask":
            continue
        values = [torch.as_tensor(e[key]) for e in examples]
        name = "labels" if key in ("label", "label_ids") else key
        batch[name] = torch.stack(values) if values[0].dim() == 0 else torch.cat(values)[None]
    batch["position_ids"] = torch.cat([torch.arange(len(e["input_ids"])) for e in examples])[None]
    return batch


# ------------------------------------------------------------------------------------------------------ masked LM
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
    special = torch.tensor(
        tokenizer.get_special_tokens_mask(ids.tolist(), already_has_special_tokens=True), dtype=torch.bool
    )
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

    Args:
        tokenizer: a tokenizer with a mask token (BERT's WordPiece, ALBERT's SentencePiece, ...).
        probability: the share of the tokens predicted (BERT: 0.15).
        whole_word: mask a word's continuation tokens with it (`word_continuation`).
        seed: with the epoch and the example's tokens, seeds each example's masks.
        padding_free: pack a batch into one row with restarting position ids and no mask (`flatten_batch`) instead
            of padding it; the masks drawn are the same.

    Examples that already carry `labels` (a pre-masked eval set: the same masks at every evaluation and for every
    model) are only padded. `epoch` is advanced by `EpochCallback`, so each epoch masks differently. With the heads'
    sparse prediction (`MaskedLMTrainer`), only the masked positions reach the vocabulary projection.
    """

    def __init__(
        self, tokenizer, probability: float = 0.15, whole_word: bool = False, seed: int = 0, padding_free: bool = False
    ):
        if not 0 < probability < 1:
            raise ValueError(f"`mlm_probability` must be in (0, 1), got {probability}.")
        if tokenizer.mask_token_id is None:
            raise ValueError("The tokenizer has no mask token, which masked-LM pretraining needs.")
        self.tokenizer, self.probability, self.seed, self.epoch = tokenizer, probability, seed, 0
        self.continues = word_continuation(tokenizer) if whole_word else None
        self.padding_free = padding_free

    def mask(self, example: dict) -> dict:
        """The example with its masked `input_ids` and its `labels` (-100 where nothing is predicted)."""
        generator = example_generator(example["input_ids"], self.seed, self.epoch)
        inputs, labels = mask_example(
            example["input_ids"], self.tokenizer, self.probability, self.continues, generator
        )
        return {**example, "input_ids": inputs, "labels": labels}

    def __call__(self, examples: list[dict]) -> dict:
        examples = [e if "labels" in e else self.mask(e) for e in examples]
        if self.padding_free:
            return flatten_batch(examples)
        return pad_batch(examples, self.tokenizer.pad_token_id)


# ------------------------------------------------------------------------------------------------ span corruption
def random_spans_noise_mask(
    length: int, noise_density: float, mean_noise_span_length: float, generator: torch.Generator
) -> torch.Tensor:
    """Which of `length` tokens are noise: round(length * density) of them, in round(noise / mean span length)
    spans; span lengths are a uniformly random composition, noise and non-noise spans alternate, starting with
    non-noise (the T5 paper's procedure)."""
    num_noise = min(max(round(length * noise_density), 1), length - 1)
    num_spans = max(round(num_noise / mean_noise_span_length), 1)
    num_spans = min(num_spans, num_noise, length - num_noise)

    def segment(items: int) -> torch.Tensor:  # `items` split into `num_spans` positive lengths, uniformly
        cuts = torch.randperm(items - 1, generator=generator)[: num_spans - 1].sort().values + 1
        bounds = torch.cat([torch.tensor([0]), cuts, torch.tensor([items])])
        return bounds.diff()

    noise_lengths, keep_lengths = segment(num_noise), segment(length - num_noise)
    lengths = torch.stack([keep_lengths, noise_lengths], dim=1).flatten()
    is_noise = torch.tensor([0, 1]).repeat(num_spans)
    return torch.repeat_interleave(is_noise, lengths).bool()


def corrupted_lengths(raw_length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """(input length, target length) of a corrupted sequence of `raw_length` tokens, </s> included."""
    num_noise = min(max(round(raw_length * noise_density), 1), raw_length - 1)
    num_spans = min(max(round(num_noise / mean_noise_span_length), 1), num_noise, raw_length - num_noise)
    return raw_length - num_noise + num_spans + 1, num_noise + num_spans + 1


def raw_length_for(input_length: int, noise_density: float, mean_noise_span_length: float) -> int:
    """The longest raw token sequence whose corrupted input fits `input_length` (T5's inputs_length): the length
    of the blocks to pack the text into (`pretraining_data.block_batch`)."""
    raw = input_length
    while corrupted_lengths(raw + 1, noise_density, mean_noise_span_length)[0] <= input_length:
        raw += 1
    return raw


def span_corrupt(tokens, mask: torch.Tensor, sentinels: list[int], eos: int) -> tuple[list[int], list[int]]:
    """Inputs: every noise span replaced by the next sentinel; targets: each sentinel, then the span it replaced."""
    inputs, targets, span = [], [], -1
    for position, (token, noise) in enumerate(zip(tokens, mask.tolist())):
        if noise:
            if position == 0 or not mask[position - 1]:
                span += 1
                if span >= len(sentinels):
                    raise ValueError(
                        f"The sequence needs more than {len(sentinels)} sentinels: use shorter "
                        "sequences (--max_seq_length) or a larger mean_noise_span_length."
                    )
                inputs.append(sentinels[span])
                targets.append(sentinels[span])
            targets.append(token)
        else:
            inputs.append(token)
    return inputs + [eos], targets + [eos]


def sentinel_ids(tokenizer) -> list[int]:
    """The ids of <extra_id_0>, <extra_id_1>, ... (T5's span-corruption sentinels)."""
    ids = tokenizer.convert_tokens_to_ids([f"<extra_id_{i}>" for i in range(100)])
    if tokenizer.unk_token_id in ids:
        raise ValueError("The tokenizer has no <extra_id_N> sentinel tokens, which span corruption needs.")
    return ids


class DataCollatorForT5SpanCorruption:
    """Span-corrupts raw token sequences (`{"input_ids": [...]}` without </s>) and pads the batch: T5's
    pretraining objective (Raffel et al. 2020, section 3.1.4), which transformers has no collator for.

    Args:
        tokenizer: a tokenizer with T5's sentinels <extra_id_0> ... <extra_id_99> and </s>.
        noise_density: the share of each sequence's tokens that are dropped (T5: 0.15).
        mean_noise_span_length: the mean length of a dropped span (T5: 3); each span becomes one sentinel in the
            input, and the target lists the sentinels, each followed by the tokens it replaced.
        seed: with the epoch and the example's tokens, seeds each example's noise (see `example_generator`).

    Pack the text into blocks of `raw_length_for(input_length, noise_density, mean_noise_span_length)` tokens, so
    that each corrupted input is `input_length` tokens long. Examples that already carry `labels` (a pre-corrupted
    eval set) are only padded; `EpochCallback` advances `epoch`.
    """

    def __init__(self, tokenizer, noise_density: float = 0.15, mean_noise_span_length: float = 3.0, seed: int = 0):
        if not 0 < noise_density < 1:
            raise ValueError(f"`noise_density` must be in (0, 1), got {noise_density}.")
        if mean_noise_span_length < 1:
            raise ValueError(f"`mean_noise_span_length` must be at least 1, got {mean_noise_span_length}.")
        self.sentinels, self.eos, self.pad = sentinel_ids(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id
        self.noise_density, self.mean_noise_span_length, self.seed, self.epoch = (
            noise_density,
            mean_noise_span_length,
            seed,
            0,
        )

    def corrupt(self, example: dict) -> dict:
        """The example's corrupted `input_ids` and its `labels` (the target), both ending with </s>."""
        tokens = list(example["input_ids"])
        generator = example_generator(tokens, self.seed, self.epoch)
        mask = random_spans_noise_mask(len(tokens), self.noise_density, self.mean_noise_span_length, generator)
        inputs, targets = span_corrupt(tokens, mask, self.sentinels, self.eos)
        return {"input_ids": inputs, "labels": targets}

    def __call__(self, examples: list[dict]) -> dict:
        return pad_batch([e if "labels" in e else self.corrupt(e) for e in examples], self.pad)
