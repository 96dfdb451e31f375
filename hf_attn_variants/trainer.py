"""`Trainer` pieces for pretraining the variants. Package-only; imported lazily by `hf_attn_variants` (it imports
transformers' `Trainer`, which needs `accelerate`: `pip install "hf-attn-variants[examples]"`).

- `MaskedLMTrainer`: a `Trainer` that calls the masked-LM heads with `sparse_prediction=True`;
- `EpochCallback`: tells a collator of `hf_attn_variants.data_collators` which epoch starts, so each epoch masks
  anew;
- `StepTimer`: the wall-clock seconds of the optimisation steps alone.

Admin's omegas are set by `hf_attn_variants.admin.AdminInitCallback` (also `hf_attn_variants.AdminInitCallback`).
"""

import time

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
