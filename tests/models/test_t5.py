"""What only T5 has: the untied LM head of v1.1 and the attention chosen per place (encoder, decoder, across).

Every other T5 check runs with the family as a parameter beside the other families': parity with transformers' T5 in
test_parity.py, decoding in test_generation.py, every variant x every head (padding included) in test_variants.py.
"""

import pytest
import torch

import hf_attn_variants as hav
from conftest import build, on_device

pytestmark = pytest.mark.device


def test_untied_lm_head_v1_1(tmp_path):
    """tie_word_embeddings=False: a separate LM head (v1.1) that survives save/load; tied by default."""
    tied = build("VariantT5ForConditionalGeneration", "talking_heads")
    assert tied.lm_head.weight is tied.shared.weight
    model = build(
        "VariantT5ForConditionalGeneration", "talking_heads", feed_forward_proj="gated-gelu", tie_word_embeddings=False
    )
    assert model.lm_head.weight is not model.shared.weight
    assert model.encoder.embed_tokens.weight is model.shared.weight
    assert not model.config.scale_decoder_outputs
    model.save_pretrained(tmp_path)
    loaded = on_device(hav.VariantT5ForConditionalGeneration.from_pretrained(tmp_path))
    assert not loaded.config.tie_lm_head
    torch.testing.assert_close(loaded.lm_head.weight, model.lm_head.weight, atol=0, rtol=0)
    assert not torch.equal(loaded.lm_head.weight, loaded.shared.weight)


def test_attention_per_place():
    model = build("VariantT5ForConditionalGeneration", "synth_dense")
    block = model.decoder.block[0]
    assert block.layer[0].SelfAttention.spec.attention_type == "synthesizer"
    assert block.layer[1].EncDecAttention.spec.attention_type == "dot_product"  # no synthetic cross-attention
    mixed = build("VariantT5ForConditionalGeneration", "talking_heads", decoder_attention_type="dot_product")
    assert mixed.encoder.block[0].layer[0].SelfAttention.spec.attention_type == "talking_heads"
    assert mixed.decoder.block[0].layer[0].SelfAttention.spec.attention_type == "dot_product"
    assert mixed.decoder.block[0].layer[1].EncDecAttention.spec.attention_type == "talking_heads"
    # the relative position bias has one entry per softmax head
    rect = build("VariantT5Model", "talking_heads_hk_hv")
    assert rect.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.shape == (8, 4)
    with pytest.raises(ValueError, match="`cross_attention_type`='synthesizer' is not supported"):
        build("VariantT5Model", "dot_product", cross_attention_type="synthesizer")
