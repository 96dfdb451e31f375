"""Causal decoding: `generate` with a cache equals `generate` without one, token for token, for every variant; the
old cache argument name."""

import warnings

import pytest
import torch
from transformers import DynamicCache, EncoderDecoderCache

from conftest import TINY, build, on_device
from hf_attn_variants.modeling_variant_utils import CACHE_FIELD

pytestmark = pytest.mark.device


def _prompt():
    g = torch.Generator().manual_seed(7)
    return on_device(torch.randint(1, TINY["vocab_size"], (2, 5), generator=g))


@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_with_cache_equals_without(variant, num_beams):
    model = build("VariantBertLMHeadModel", variant, seed=2)
    with torch.no_grad():  # sharpen the distribution so greedy/beam choices are not decided by rounding
        model.cls.predictions.decoder.weight.mul_(4.0)
    prompt = _prompt()
    kwargs = dict(max_new_tokens=10, do_sample=False, num_beams=num_beams, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        cached = model.generate(prompt, attention_mask=torch.ones_like(prompt), use_cache=True, **kwargs)
        uncached = model.generate(prompt, attention_mask=torch.ones_like(prompt), use_cache=False, **kwargs)
    assert cached.shape == (2, 15)
    assert torch.equal(cached, uncached)


def test_cached_logits_equal_full_forward(variant):
    """Step-by-step decoding with a cache reproduces the logits of one causal forward over the whole sequence."""
    model = build("VariantBertLMHeadModel", variant, seed=4)
    ids = on_device(torch.randint(1, TINY["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(8)))
    with torch.no_grad():
        full = model(ids).logits
        out = model(ids[:, :4], use_cache=True)
        steps = [out.logits]
        cache = out.cache
        for t in range(4, 9):
            out = model(ids[:, t : t + 1], cache=cache, use_cache=True)
            cache = out.cache
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_causal_decoder_does_not_look_ahead(variant):
    model = build("VariantBertLMHeadModel", variant, seed=6)
    ids = on_device(torch.randint(1, TINY["vocab_size"], (1, 8), generator=torch.Generator().manual_seed(9)))
    changed = ids.clone()
    changed[0, 5:] = (changed[0, 5:] + 1) % TINY["vocab_size"]
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits[:, :5], model(changed).logits[:, :5])


def test_cross_attention_decoder_with_cache():
    """A decoder with cross-attention (talking heads with dynamic memory projections there) decodes incrementally."""
    model = build("VariantBertLMHeadModel", "talking_heads_dynamic", seed=3, add_cross_attention=True)
    encoder_states = on_device(torch.randn(2, 6, TINY["hidden_size"], generator=torch.Generator().manual_seed(1)))
    ids = on_device(torch.randint(1, TINY["vocab_size"], (2, 7), generator=torch.Generator().manual_seed(2)))
    with torch.no_grad():
        full = model(ids, encoder_hidden_states=encoder_states).logits
        out = model(ids[:, :3], encoder_hidden_states=encoder_states, use_cache=True)
        steps, cache = [out.logits], out.cache
        for t in range(3, 7):
            out = model(ids[:, t : t + 1], encoder_hidden_states=encoder_states, cache=cache, use_cache=True)
            steps.append(out.logits)
            cache = out.cache
        attn = model(ids, encoder_hidden_states=encoder_states, output_attentions=True)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert attn.cross_attentions[0].shape == (2, TINY["num_attention_heads"], 7, 6)


@pytest.mark.parametrize("head", ["VariantBertModel", "VariantBertLMHeadModel", "VariantT5Model",
                                  "VariantT5ForConditionalGeneration"])
def test_old_cache_name_warns_as_transformers_does(head):
    """transformers >= 5.24 renamed `past_key_values` to `cache`: the old name still works and warns as transformers'
    own forwards do (its common test `test_bc_cache_name_forward` looks for this message); both at once is refused;
    `generate` itself passes the new name and warns nothing."""
    t5 = head.startswith("VariantT5")
    model = build(head, "talking_heads", **({} if t5 else {"is_decoder": True}))
    ids = _prompt()
    inputs = dict(input_ids=ids, use_cache=True)
    if t5:
        inputs["decoder_input_ids"] = ids[:, :3]

    def new_cache():
        return EncoderDecoderCache(DynamicCache(), DynamicCache()) if t5 else DynamicCache()

    with torch.no_grad():
        expected = model(**inputs, cache=new_cache())[0]
        if CACHE_FIELD == "cache":
            with pytest.warns(FutureWarning, match="`past_key_values` is deprecated"):
                got = model(**inputs, past_key_values=new_cache())[0]
        else:  # older transformers: its own generate passes the old name, which is not deprecated there
            got = model(**inputs, past_key_values=new_cache())[0]
        torch.testing.assert_close(got, expected)
        with pytest.raises(ValueError, match="Both `cache` and `past_key_values`"):
            model(**inputs, cache=new_cache(), past_key_values=new_cache())
        if head.endswith(("LMHeadModel", "ForConditionalGeneration")):
            with warnings.catch_warnings():
                warnings.filterwarnings("error", message=".*past_key_values.*", category=FutureWarning)
                model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
