"""`Trainer` pieces for pretraining the variants. Package-only; imported lazily by `hf_attn_variants` (it imports
transformers' `Trainer`, which needs `accelerate`: `pip install "hf-attn-variants[examples]"`).

- `MaskedLMTrainer`: a `Trainer` that calls the masked-LM heads with `sparse_prediction=True`;
- `EpochCallback`: tells a collator of `hf_attn_variants.training.data_collators` which epoch starts, so each epoch masks
  anew;
- `StepTimer`: the wall-clock seconds of the optimisation steps alone;
- evaluation without holding every batch's `[batch, seq, vocab]` logits: `masked_lm_sums` and `span_corruption_sums`
  (Trainer's `preprocess_logits_for_metrics`) keep per-batch sums, from which `masked_lm_metrics` and
  `span_corruption_metrics` (its `compute_metrics`) give the loss and perplexity of the whole evaluation set.

Admin's omegas are set by `hf_attn_variants.admin.AdminInitCallback` (also `hf_attn_variants.AdminInitCallback`).
"""

import math
import time

import torch
from transformers import Trainer, TrainerCallback


class MaskedLMTrainer(Trainer):
    """Trainer whose training and evaluation calls pass `sparse_prediction` to the masked-LM head: the head runs
    only at the positions that carry a label (`logits` is then `[n_scored, vocab_size]`), with the same loss and
    gradients as the dense head and a cheaper step.

    Args:
        sparse_prediction: pass `sparse_prediction=True` to the `ForMaskedLM` and `ForPreTraining` heads of BERT
            and ALBERT (default False: a plain `Trainer`). Everything else is `Trainer`'s.

    It is an argument of the call, not of the model or the batch, so the saved checkpoint keeps transformers' full
    logits and the batches stay tensors for every callback. A `compute_metrics` with `preprocess_logits_for_metrics`
    then sees the scored rows: the rows of the full logits at `labels != -100`, in row-major order of the batch.
    """

    def __init__(self, *args, sparse_prediction: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.sparse_prediction = sparse_prediction

    def compute_loss(self, model, inputs, *args, **kwargs):
        if self.sparse_prediction:
            inputs = {**inputs, "sparse_prediction": True}
        return super().compute_loss(model, inputs, *args, **kwargs)


class EpochCallback(TrainerCallback):
    """Tells a collator with an `epoch` attribute which epoch is starting (the collators seed each example's masks
    with it: `MaskedLMCollator`, `DataCollatorForT5SpanCorruption`)."""

    def __init__(self, collator):
        self.collator = collator

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.collator.epoch = int(state.epoch or 0)


class StepTimer(TrainerCallback):
    """Wall-clock seconds of the optimisation steps alone (evaluation and saving excluded): `seconds_per_step`."""

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


# ------------------------------------------------------------------------------------------------------ evaluation
def masked_lm_sums(logits, labels):
    """`preprocess_logits_for_metrics` of a masked-LM (or BERT/ALBERT pretraining) evaluation: per batch, the summed
    negative log-likelihood of the labelled tokens and their count (and, with a sentence task's labels, its correct
    predictions and count), in place of the logits. The logits may be full (`[batch, seq, vocab]`) or the scored rows
    of `MaskedLMTrainer(sparse_prediction=True)` (`[n_scored, vocab]`)."""
    if isinstance(labels, (tuple, list)):
        mlm_labels, sentence_labels = labels
    else:
        mlm_labels, sentence_labels = labels, None
    mlm_logits = logits[0] if isinstance(logits, (tuple, list)) else logits
    scored = mlm_labels.ne(-100)
    if mlm_logits.dim() == 3:  # full logits; the sparse head gives the scored rows only
        mlm_logits = mlm_logits[scored]
    nll = torch.nn.functional.cross_entropy(mlm_logits.float(), mlm_labels[scored], reduction="sum")
    outputs = [nll.reshape(1), scored.sum().reshape(1)]
    if sentence_labels is not None:
        correct = (logits[1].argmax(-1) == sentence_labels).sum()
        outputs += [correct.reshape(1), torch.tensor([sentence_labels.numel()], device=correct.device)]
    return tuple(outputs)


def _check_counted(count, what: str) -> None:
    """An evaluation that counts no token has no loss: a ValueError, not a NaN recorded as the result."""
    if float(count.sum()) == 0:
        raise ValueError(
            f"The evaluation set has no {what} token: its loss is undefined. Check --mlm_probability / "
            "--noise_density and that the validation text gives tokens at all."
        )


def masked_lm_metrics(prediction) -> dict:
    """`compute_metrics` after `masked_lm_sums`: `mlm_loss` (the mean over every labelled token of the set, as one
    batch would give it), `perplexity`, and `sentence_accuracy` with NSP/SOP labels."""
    nll, count, *sentence = prediction.predictions
    _check_counted(count, "masked")
    metrics = {"mlm_loss": float(nll.sum() / count.sum())}
    metrics["perplexity"] = math.exp(min(metrics["mlm_loss"], 50.0))
    if sentence:
        metrics["sentence_accuracy"] = float(sentence[0].sum() / sentence[1].sum())
    return metrics


def span_corruption_sums(logits, labels):
    """`preprocess_logits_for_metrics` of a T5 span-corruption evaluation: per batch, the summed negative
    log-likelihood of the target tokens, their count and the correct argmax predictions among them."""
    logits = logits[0] if isinstance(logits, (tuple, list)) else logits
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="sum")
    kept = labels.ne(-100)
    correct = ((logits.argmax(-1) == labels) & kept).sum()
    return nll.reshape(1), kept.sum().reshape(1), correct.reshape(1)


def span_corruption_metrics(prediction) -> dict:
    """`compute_metrics` after `span_corruption_sums`: `target_loss` (the mean over every target token of the set),
    `perplexity` and `target_token_accuracy`."""
    nll, count, correct = prediction.predictions
    _check_counted(count, "target")
    loss = float(nll.sum() / count.sum())
    return {
        "target_loss": loss,
        "perplexity": math.exp(min(loss, 50.0)),
        "target_token_accuracy": float(correct.sum() / count.sum()),
    }
