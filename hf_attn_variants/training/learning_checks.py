"""Checks that a training run can learn, so that one that cannot stops with one line instead of training on nothing
and exiting 0 (a tokenizer that maps the text to [UNK], a batch with no labelled token: loss 0, evaluation NaN).

Before training: `check_first_batch` on the first batch the collator makes (the text covered by the tokenizer's
vocabulary, at least one labelled token). While training: `StopOnNonFinite`, a `TrainerCallback` that stops the run
at the first logged loss that is NaN or infinite, naming the step and the likely cause, before anything records it
as a result. (A model folder without a tokenizer, and a tokenizer with more ids than the model's embeddings, are
refused where the run loads them: `model_setup`.)
"""

import itertools
import math

import torch
from transformers import TrainerCallback

# a first batch with more than this share of its text tokens unknown to the tokenizer is refused
UNKNOWN_SHARE = 0.5


def check_first_batch(batch: dict, tokenizer, what: str = "masked", split: str = "training") -> None:
    """Raise a ValueError where the first batch (`batch`: the collator's output) cannot teach the model anything:
    more than `UNKNOWN_SHARE` of its text tokens (special tokens and padding left out) are the tokenizer's unknown
    token, or no position has a label (`labels` all -100). `what` names the labelled tokens and `split` the data in
    the message."""
    ids = batch["input_ids"]
    real = batch["attention_mask"].bool() if "attention_mask" in batch else torch.ones_like(ids, dtype=torch.bool)
    special = [i for i in tokenizer.all_special_ids if i != tokenizer.unk_token_id]
    text = real & ~torch.isin(ids, torch.tensor(special, dtype=ids.dtype))
    if tokenizer.unk_token_id is not None and int(text.sum()) > 0:
        unknown = int((text & (ids == tokenizer.unk_token_id)).sum()) / int(text.sum())
        if unknown > UNKNOWN_SHARE:
            raise ValueError(
                f"{unknown:.0%} of the first {split} batch's tokens are {tokenizer.unk_token}: the tokenizer's vocabulary "
                f"({len(tokenizer)} tokens) does not cover the text. Pass --tokenizer_name with a tokenizer of "
                "this text, or leave it out for the project's tokenizer, trained on the run's data."
            )
    labels = batch.get("labels")
    if labels is not None and int(labels.ne(-100).sum()) == 0:
        raise ValueError(
            f"The first {split} batch has no {what} token (its labels are all -100), so nothing to "
            f"{'learn from' if split == 'training' else 'measure'}: the text gives no token the objective may choose "
            "(only special tokens or padding?). Check the data and --mlm_probability / --noise_density."
        )


def check_first_batch_of(
    dataset, collator, batch_size: int, tokenizer, what: str = "masked", split: str = "training"
) -> None:
    """`check_first_batch` on the batch `collator` makes of the first `batch_size` rows of `dataset` (map-style or
    streamed; the collator's noise is seeded by the tokens, so this changes nothing of the run)."""
    rows = list(itertools.islice(iter(dataset), batch_size))
    if rows:
        check_first_batch(collator(rows), tokenizer, what, split)


def check_first_batches(training, validation, collator, batch_size: int, tokenizer, what: str = "masked") -> None:
    """`check_first_batch_of` the `training` and `validation` sets (either may be None): a run that cannot learn,
    or be measured, stops before training."""
    for data, split in ((training, "training"), (validation, "validation")):
        if data is not None:
            check_first_batch_of(data, collator, batch_size, tokenizer, what, split)


class StopOnNonFinite(TrainerCallback):
    """Stops the run with a ValueError at the first logged loss (training or evaluation) or gradient norm that is NaN
    or infinite: the step, the value and the likely causes, instead of training on and recording NaN as a result.
    (Trainer's `logging_nan_inf_filter`, on by default, logs a NaN training loss as the mean of the finite ones; the
    gradient norm still shows it.)"""

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key, value in (logs or {}).items():
            watched = key.endswith("loss") or key == "grad_norm"
            if watched and isinstance(value, (float, int)) and not math.isfinite(value):
                raise ValueError(
                    f"step {state.global_step}: {key} is {value}, so the run stopped (nothing was recorded as a "
                    f"result). Likely causes: a learning rate too high for this model (--learning_rate "
                    f"{args.learning_rate:g}), half precision overflowing (--fp16), or a batch with no labelled "
                    "token."
                )


__all__ = ["UNKNOWN_SHARE", "StopOnNonFinite", "check_first_batch", "check_first_batch_of", "check_first_batches"]
