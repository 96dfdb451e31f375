"""The models train with transformers' Trainer, activation checkpointing on (ALBERT's shared layers included)."""

import pytest
import torch
from transformers import Trainer, TrainingArguments

from conftest import TINY, TINY_T5, build

# transformers >= 5.23 calls it activation checkpointing; gradient_checkpointing, the only name before, is now its
# deprecated alias (a FutureWarning)
CHECKPOINTING = "activation" if hasattr(TrainingArguments, "activation_checkpointing") else "gradient"


class _Batches(torch.utils.data.Dataset):
    def __init__(self, n=16, seq=8):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, TINY["vocab_size"], (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.ids[i]}


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
    trainer = Trainer(model=model, args=args, train_dataset=_Batches())
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
