"""Masking for masked-LM pretraining, as BERT does it (80% [MASK], 10% a random token, 10% unchanged; optional
whole-word masking), drawn per example from a generator seeded by the example's content, the seed and the epoch, so
that one process and N processes mask alike; and the padding every collator of the scripts shares.
"""

import zlib

import torch
from transformers import TrainerCallback


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
