"""The models train with transformers' Trainer, activation checkpointing on (ALBERT's shared layers included)."""

import functools
import math

import pytest
import torch
from transformers import Trainer, TrainingArguments

from conftest import TINY, TINY_T5, TinyBatches, build

# transformers >= 5.23 calls it activation checkpointing; gradient_checkpointing, the only name before, is now its
# deprecated alias (a FutureWarning)
CHECKPOINTING = "activation" if hasattr(TrainingArguments, "activation_checkpointing") else "gradient"


@pytest.mark.parametrize(
    "head,variant", [("VariantAlbertForMaskedLM", "talking_heads"), ("VariantBertForMaskedLM", "synth_mixture")]
)
def test_trainer_with_activation_checkpointing(tmp_path, head, variant):
    model = build(head, variant).train()
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=6,
        per_device_train_batch_size=4,
        learning_rate=5e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        **{f"{CHECKPOINTING}_checkpointing": True},
    )
    trainer = Trainer(model=model, args=args, train_dataset=TinyBatches())
    assert trainer.model_accepts_loss_kwargs  # masked-LM heads normalise by `num_items_in_batch`
    result = trainer.train()
    assert getattr(model, f"is_{CHECKPOINTING}_checkpointing")
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    assert result.global_step == 6


class _UnevenLabels(torch.utils.data.Dataset):
    """Sequences whose number of labelled tokens differs a lot, so a mean of per-micro-batch means is wrong."""

    def __init__(self, vocab, n=8, seq=8):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(2, vocab, (n, seq), generator=g)
        self.labels = self.ids.clone()
        for i in range(n):
            self.labels[i, 1 + i % seq :] = -100  # 1 .. seq labelled tokens

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


@pytest.mark.parametrize(
    "head,variant",
    [
        ("VariantBertForMaskedLM", "talking_heads"),
        ("VariantAlbertForMaskedLM", "synth_random"),
        ("VariantT5ForConditionalGeneration", "talking_heads"),
    ],
)
def test_gradient_accumulation_equals_one_big_batch(tmp_path, head, variant):
    """Token-level losses use `num_items_in_batch`: 2 accumulated micro-batches of 2 give exactly the loss and the
    update of one batch of 4 (the mean over all labelled tokens of the step, not a mean of per-batch means)."""
    vocab = TINY_T5["vocab_size"] if "T5" in head else TINY["vocab_size"]
    results = []
    for batch, accumulation in ((4, 1), (2, 2)):
        model = build(head, variant).train()  # the tiny configs have no dropout
        args = TrainingArguments(
            output_dir=str(tmp_path / str(batch)),
            max_steps=1,
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            learning_rate=1.0,
            optim="sgd",
            lr_scheduler_type="constant",
            max_grad_norm=0.0,
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            seed=0,
        )
        trainer = Trainer(model=model, args=args, train_dataset=_UnevenLabels(vocab))
        trainer.train()
        loss = next(log["loss"] for log in trainer.state.log_history if "loss" in log)
        results.append((loss, torch.cat([p.detach().flatten() for p in model.parameters()])))
    (loss_big, params_big), (loss_acc, params_acc) = results
    assert loss_acc == pytest.approx(loss_big, rel=1e-5)
    torch.testing.assert_close(params_acc, params_big, rtol=1e-5, atol=1e-6)


class _PretrainingPairs(_UnevenLabels):
    """`_UnevenLabels` with a sentence-task label per sequence (BERT's NSP, ALBERT's SOP)."""

    def __getitem__(self, i):
        return {**super().__getitem__(i), "sentence_order_label": torch.tensor(i % 2)}


@pytest.mark.parametrize(
    "head,variant,sparse",
    [
        ("VariantBertForMaskedLM", "talking_heads", True),
        ("VariantBertForMaskedLM", "synth_dense", False),
        ("VariantAlbertForPreTraining", "talking_heads", True),
        ("VariantT5ForConditionalGeneration", "talking_heads", False),
    ],
)
def test_evaluation_sums_give_the_whole_sets_loss(tmp_path, head, variant, sparse):
    """`MaskedLMTrainer` with `masked_lm_sums`/`masked_lm_metrics` (dense or sparse head), and `Trainer` with
    `span_corruption_sums`/`span_corruption_metrics`, report the mean loss over every labelled token of the set
    (eval batches of 3 over 8 sequences of 1 to 8 labelled tokens: a mean of batch means would differ) and the
    accuracy, as computed here from one forward pass over the whole set."""
    from hf_attn_variants.training.trainer import (
        MaskedLMTrainer,
        masked_lm_metrics,
        masked_lm_sums,
        span_corruption_metrics,
        span_corruption_sums,
    )

    t5 = "T5" in head
    data = (_PretrainingPairs if "PreTraining" in head else _UnevenLabels)(
        TINY_T5["vocab_size"] if t5 else TINY["vocab_size"]
    )
    model = build(head, variant).cpu()
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_eval_batch_size=3, report_to=[], use_cpu=True, disable_tqdm=True
    )
    if t5:
        make, sums, summarise = Trainer, span_corruption_sums, span_corruption_metrics
    else:
        make = functools.partial(MaskedLMTrainer, sparse_prediction=sparse)
        sums, summarise = masked_lm_sums, masked_lm_metrics
    trainer = make(
        model=model, args=args, eval_dataset=data, compute_metrics=summarise, preprocess_logits_for_metrics=sums
    )
    metrics = trainer.evaluate()

    batch = [data[i] for i in range(len(data))]
    inputs = {key: torch.stack([row[key] for row in batch]) for key in batch[0]}
    with torch.no_grad():
        output = model(**inputs)
    logits = output.logits if t5 or "MaskedLM" in head else output.prediction_logits
    scored = inputs["labels"] != -100
    loss = torch.nn.functional.cross_entropy(logits[scored], inputs["labels"][scored]).item()
    prefix = "eval_target" if t5 else "eval_mlm"
    assert metrics[f"{prefix}_loss"] == pytest.approx(loss, rel=1e-5)
    assert metrics["eval_perplexity"] == pytest.approx(math.exp(loss), rel=1e-5)
    if t5:
        accuracy = (logits[scored].argmax(-1) == inputs["labels"][scored]).float().mean().item()
        assert metrics["eval_target_token_accuracy"] == pytest.approx(accuracy)
    if "PreTraining" in head:
        order = output.sop_logits.argmax(-1) == inputs["sentence_order_label"]
        assert metrics["eval_sentence_accuracy"] == pytest.approx(order.float().mean().item())


@pytest.mark.parametrize("metrics,parts", [("masked_lm_metrics", 2), ("span_corruption_metrics", 3)])
def test_an_evaluation_that_counts_no_token_is_an_error_not_nan(metrics, parts):
    """The sums of a set without one labelled token: a ValueError naming it, never a NaN loss recorded as a result;
    one labelled token is enough."""
    import numpy as np
    from transformers import EvalPrediction

    from hf_attn_variants.training import trainer as pieces

    summarise = getattr(pieces, metrics)
    with pytest.raises(ValueError, match="The evaluation set has no .* token"):
        summarise(EvalPrediction(predictions=(np.zeros(2),) * parts, label_ids=None))
    one = (np.array([2.0, 0.0]), np.array([1.0, 0.0]), np.array([1.0, 0.0]))[:parts]
    assert all(math.isfinite(v) for v in summarise(EvalPrediction(predictions=one, label_ids=None)).values())


@pytest.mark.parametrize("logs", [{"loss": float("nan")}, {"grad_norm": float("inf")}, {"eval_loss": float("nan")}])
def test_a_non_finite_loss_or_gradient_stops_the_run_naming_the_step(logs):
    from transformers import TrainerControl, TrainerState

    from hf_attn_variants.training.learning_checks import StopOnNonFinite

    state = TrainerState()
    state.global_step = 7
    args = TrainingArguments(output_dir="unused", report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match=f"step 7: {next(iter(logs))} is (nan|inf)"):
        StopOnNonFinite().on_log(args, state, TrainerControl(), logs=logs)
    StopOnNonFinite().on_log(args, state, TrainerControl(), logs={"loss": 2.5, "grad_norm": 1.0})  # finite: goes on
