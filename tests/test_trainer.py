"""The models train with transformers' Trainer, activation checkpointing on (ALBERT's shared layers included)."""

import pytest
import torch
from transformers import Trainer, TrainingArguments

from conftest import TINY, build


class _Batches(torch.utils.data.Dataset):
    def __init__(self, n=16, seq=8):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, TINY["vocab_size"], (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.ids[i]}


@pytest.mark.parametrize("head,variant", [("VariantAlbertForMaskedLM", "talking_heads"),
                                          ("VariantBertForMaskedLM", "synth_mixture")])
def test_trainer_with_gradient_checkpointing(tmp_path, head, variant):
    model = build(head, variant).train()
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=6, per_device_train_batch_size=4, learning_rate=5e-3,
        gradient_checkpointing=True, logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=_Batches())
    assert not trainer.model_accepts_loss_kwargs  # the heads average their own loss
    result = trainer.train()
    assert model.is_activation_checkpointing
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    assert result.global_step == 6
