"""Checkpoints saved before the attention became one class per type (tests/fixtures/legacy, made by
fixtures/make_legacy_checkpoints.py) load with today's code: no missing or unexpected weights, the same outputs."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import hf_attn_variants as hav
from conftest import at_real_tokens

LEGACY = Path(__file__).resolve().parents[1] / "fixtures" / "legacy"
HEADS = {
    "variant_bert": hav.VariantBertForMaskedLM,
    "variant_albert": hav.VariantAlbertForMaskedLM,
    "variant_t5": hav.VariantT5ForConditionalGeneration,
}


@pytest.mark.parametrize("folder", sorted(p.name for p in LEGACY.iterdir()))
def test_legacy_checkpoint_loads_with_the_same_outputs(folder):
    path = LEGACY / folder
    head = HEADS[json.loads((path / "config.json").read_text())["model_type"]]
    model, info = head.from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    expected = load_file(path / "expected.safetensors")
    inputs = {k.removeprefix("input."): v for k, v in expected.items() if k.startswith("input.")}
    with torch.no_grad():
        logits = model.eval()(**inputs).logits
    real = inputs["attention_mask"]  # saved from the padded batch; a BERT/ALBERT encoder leaves zeros at its pads
    torch.testing.assert_close(
        at_real_tokens(logits, real), at_real_tokens(expected["logits"], real), atol=1e-5, rtol=1e-5
    )
    if "random_frozen" in folder:
        assert any(not p.requires_grad for p in model.parameters())
