"""Clear errors for impossible configurations and inputs; every variant in bfloat16 and float16."""

import pytest
import torch

import hf_attn_variants as hav
from conftest import TINY, build, current_device, make_config, on_device

pytestmark = pytest.mark.device


@pytest.mark.parametrize(
    "fields,match",
    [
        (dict(attention_type="linear"), r"`attention_type`='linear'.*'dot_product', 'talking_heads', 'synthesizer'"),
        (dict(attention_type="talking_heads", talking_heads_num_key_heads=5), r"`talking_heads_num_key_heads` \(5\)"),
        (dict(attention_type="talking_heads", talking_heads_num_value_heads=3), r"`talking_heads_num_value_heads`"),
        (dict(hidden_size=30), r"hidden size \(30\) is not a multiple of `num_attention_heads` \(4\)"),
        (  # talking heads' key and value heads default to num_attention_heads: the error names the field set
            dict(attention_type="talking_heads", hidden_size=30),
            r"hidden size \(30\) is not a multiple of `num_attention_heads` \(4\)",
        ),
        (dict(attention_type="dot_product", talking_heads_dynamic=["x2l"]), r"needs `attention_type`='talking_heads'"),
        (dict(attention_type="talking_heads", talking_heads_dynamic=["q2l"]), r"`talking_heads_dynamic`='q2l'"),
        (
            dict(attention_type="talking_heads", talking_heads_num_key_heads=2, talking_heads_init="identity"),
            r"`talking_heads_init`='identity' needs square maps",
        ),
        (
            dict(attention_type="talking_heads", talking_heads_num_key_heads=2, talking_heads_pre_softmax=False),
            r"`talking_heads_pre_softmax`=False needs",
        ),
        (dict(attention_type="talking_heads", talking_heads_init="xavier"), r"`talking_heads_init`='xavier'"),
        (dict(attention_type="synthesizer", synthesizer_components=["conv"]), r"`synthesizer_components`='conv'"),
        (dict(attention_type="synthesizer", synthesizer_components=["dot_product"]), r"plain attention"),
        (dict(attention_type="synthesizer", synthesizer_components=[]), r"`synthesizer_components` is empty"),
        (
            dict(
                attention_type="synthesizer", synthesizer_components=["dense"], synthesizer_mixture_init="dot_product"
            ),
            r"needs 'dot_product' among `synthesizer_components`",
        ),
        (
            dict(
                attention_type="synthesizer",
                synthesizer_components=["factorized_dense"],
                synthesizer_dense_factors=[4, 4],
            ),
            r"`synthesizer_dense_factors`=\[4, 4\] must be two integers whose product is .* \(64\)",
        ),
        (dict(add_cross_attention=True), r"`add_cross_attention`=True needs `is_decoder`=True"),
    ],
)
def test_impossible_config_builds_but_the_model_raises(fields, match):
    config = hav.VariantBertConfig(**{**TINY, **fields})  # a config always constructs, as transformers' do
    with pytest.raises(ValueError, match=match):
        hav.VariantBertModel(config)


def test_config_round_trips_through_json(tmp_path):
    config = make_config("talking_heads_dynamic", talking_heads_num_value_heads=8)
    config.save_pretrained(tmp_path)
    loaded = hav.VariantBertConfig.from_pretrained(tmp_path)
    assert loaded.to_dict() == config.to_dict()
    assert hav.VariantBertConfig().attention_type == "dot_product"


def test_sequence_longer_than_the_synthesizer_limit():
    model = build("VariantBertModel", "synth_random", synthesizer_max_position=8)
    model(on_device(torch.ones(1, 8, dtype=torch.long)))
    with pytest.raises(ValueError, match=r"at most `synthesizer_max_position`=8 positions, got 9"):
        model(on_device(torch.ones(1, 9, dtype=torch.long)))
    # the tables are read at the position ids: 8 tokens at positions 3..10 are refused too, 8 at 0..7 are not
    model(on_device(torch.ones(1, 8, dtype=torch.long)), position_ids=on_device(torch.arange(8)[None]))
    with pytest.raises(ValueError, match=r"`synthesizer_max_position`=8\), got position ids 3\.\.10"):
        model(on_device(torch.ones(1, 8, dtype=torch.long)), position_ids=on_device(torch.arange(3, 11)[None]))


def test_sequence_longer_than_the_position_embeddings():
    model = build("VariantBertModel", "talking_heads")
    with pytest.raises(ValueError, match=r"longer than `max_position_embeddings`=64"):
        model(on_device(torch.ones(1, 65, dtype=torch.long)))


def _half_supported(dtype):
    try:
        torch.nn.functional.layer_norm(on_device(torch.ones(2, 4, dtype=dtype)), (4,))
        on_device(torch.ones(2, 2, dtype=dtype)) @ on_device(torch.ones(2, 2, dtype=dtype))
        return True
    except RuntimeError:
        return False


def _low_precision_error(head, variant, dtype):
    """max and mean |low - fp32| of the last hidden state (LayerNorm scale), and the model for a training step."""
    model = build(head, variant, seed=11)
    ids = on_device(torch.randint(1, TINY["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(2)))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    with torch.no_grad():
        ref = model(ids, attention_mask=mask).last_hidden_state
        low = model.to(dtype)(ids, attention_mask=mask).last_hidden_state
    assert low.dtype == dtype
    err = (low.float() - ref).abs()
    return err.max().item(), err.mean().item(), model, ids, mask


# Measured: every variant's error is within 1.8x (max) and 1.2x (mean) of plain dot-product attention in the same
# model (bf16 max 0.02-0.07, fp16 max 0.002-0.007 across the three families); the test allows 2x.
@pytest.mark.parametrize("head", ["VariantBertModel", "VariantAlbertModel", "VariantT5EncoderModel"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_stays_close_to_float32(variant, dtype, head):
    """Every variant in bf16/fp16 is as close to its float32 self as dot-product attention is to its own."""
    if not _half_supported(dtype):
        pytest.skip(f"{dtype} matmul/layer_norm not available on {current_device()} with this torch build")
    max_err, mean_err, model, ids, mask = _low_precision_error(head, variant, dtype)
    base_max, base_mean, *_ = _low_precision_error(head, "dot_product", dtype)
    assert max_err < 2 * base_max and mean_err < 2 * base_mean, (max_err, mean_err, base_max, base_mean)
    assert max_err < (0.1 if dtype == torch.bfloat16 else 0.015)
    # training in low precision gives finite gradients
    model.train()
    model(ids, attention_mask=mask).last_hidden_state.float().pow(2).mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
