"""Decoding, for every family that generates (BERT's causal LM head, T5): `generate` with a cache equals `generate`
without one, token for token, greedy and beam, for every variant; cached step-by-step logits equal one full pass; the
decoder never looks ahead; the old cache argument name. Left padding (BERT and ALBERT, every variant): masked pad
tokens before a batch, with position ids, leave its logits as they are (transformers' `test_left_padding_compatibility`)
and `generate` continues each left-padded prompt as it continues the prompt alone."""

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
from transformers import DynamicCache, EncoderDecoderCache

from conftest import FAMILIES, TINY, TINY_CONFIGS, VARIANTS, build, encoder_inputs, head_kind, on_device, sharpen_t5
from hf_attn_variants.models import attention_synthesizer
from hf_attn_variants.models.attention_synthesizer import SynthesizerAttention
from hf_attn_variants.models.modeling_variant_utils import CACHE_FIELD

pytestmark = pytest.mark.device


def _sharpen_lm_head(model):
    with torch.no_grad():  # sharpen the output distribution so greedy/beam choices are not decided by rounding
        model.cls.predictions.decoder.weight.mul_(4.0)


def _prompt():
    g = torch.Generator().manual_seed(7)
    return on_device(torch.randint(1, TINY["vocab_size"], (2, 5), generator=g))


def _lm_prompt():
    """A causal LM's prompt: 5 tokens per row, no padding."""
    prompt = _prompt()
    return prompt, torch.ones_like(prompt)


@dataclass(frozen=True)
class Decoder:
    """How the tests drive one family's generating head."""

    head: str
    sharpen: Callable  # (model) -> None: so that greedy/beam choices are not decided by rounding
    prompt: Callable  # () -> (input_ids, attention_mask): the causal LM's prompt, or the encoder-decoder's source
    new_tokens: int
    generate: dict = field(default_factory=dict)  # further `generate` arguments
    first_id: int = 1  # the smallest ordinary token id of the random decoder inputs
    dtype: torch.dtype = torch.float32  # the step-by-step test's precision and tolerance
    atol: float = 1e-5


DECODERS = {
    "bert": Decoder(
        "VariantBertLMHeadModel",
        _sharpen_lm_head,
        _lm_prompt,
        new_tokens=10,
        generate=dict(pad_token_id=0, eos_token_id=None),
    ),
    # a random T5 repeats one token (or <pad>/</s>) forever: suppress those and forbid repeats. In float64: T5's
    # unscaled logits amplify float32 rounding of the two summation orders to ~1e-4, while a wrong row, mask or cached
    # projection shows at any precision.
    "t5": Decoder(
        "VariantT5ForConditionalGeneration",
        sharpen_t5,
        encoder_inputs,
        new_tokens=8,
        generate=dict(suppress_tokens=[0, 1], no_repeat_ngram_size=1),
        first_id=2,
        dtype=torch.float64,
        atol=1e-10,
    ),
}


def _decoder_call(family, model):
    """What every decoder call of `family`'s model takes besides its token ids: the encoded source for an
    encoder-decoder (computed once), nothing for a causal LM; and the name of the token-id argument."""
    if not FAMILIES[family].encoder_decoder:
        return "input_ids", {}
    ids, mask = encoder_inputs()
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
    return "decoder_input_ids", dict(encoder_outputs=encoder_outputs, attention_mask=mask)


def _decoder_ids(family, length, seed):
    g = torch.Generator().manual_seed(seed)
    return on_device(
        torch.randint(DECODERS[family].first_id, TINY_CONFIGS[family]["vocab_size"], (2, length), generator=g)
    )


@pytest.mark.parametrize("family", list(DECODERS))
@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_with_cache_equals_without(variant, num_beams, family):
    decoder = DECODERS[family]
    model = build(decoder.head, variant, seed=2)
    decoder.sharpen(model)
    ids, mask = decoder.prompt()
    kwargs = dict(
        max_new_tokens=decoder.new_tokens,
        do_sample=False,
        num_beams=num_beams,
        attention_mask=mask,
        **decoder.generate,
    )
    with torch.no_grad():
        cached = model.generate(ids, use_cache=True, **kwargs)
        uncached = model.generate(ids, use_cache=False, **kwargs)
    # a causal LM returns the prompt and its continuation; an encoder-decoder the start token and the new tokens
    prompt_length = 1 if FAMILIES[family].encoder_decoder else ids.shape[1]
    assert cached.shape == (2, prompt_length + decoder.new_tokens)
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("family", list(DECODERS))
def test_cached_logits_equal_full_forward(variant, family):
    """Step-by-step decoding with a cache (an EncoderDecoderCache for T5) reproduces the logits of one causal
    forward over the whole sequence, synthesizer rows included."""
    decoder = DECODERS[family]
    model = build(decoder.head, variant, seed=3).to(decoder.dtype)
    ids = _decoder_ids(family, 9, seed=8)
    name, context = _decoder_call(family, model)
    with torch.no_grad():
        full = model(**{name: ids}, **context).logits
        out = model(**{name: ids[:, :4]}, **context, use_cache=True)
        steps, cache = [out.logits], getattr(out, CACHE_FIELD)
        for t in range(4, 9):
            out = model(**{name: ids[:, t : t + 1]}, **context, cache=cache, use_cache=True)
            steps.append(out.logits)
            cache = getattr(out, CACHE_FIELD)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=decoder.atol, rtol=decoder.atol)


@pytest.mark.parametrize("family", list(DECODERS))
def test_causal_decoder_does_not_look_ahead(variant, family):
    model = build(DECODERS[family].head, variant, seed=6)
    ids = _decoder_ids(family, 8, seed=9)
    changed = ids.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % TINY_CONFIGS[family]["vocab_size"]
    name, context = _decoder_call(family, model)
    with torch.no_grad():
        torch.testing.assert_close(
            model(**{name: ids}, **context).logits[:, :5], model(**{name: changed}, **context).logits[:, :5]
        )


def test_cross_attention_decoder_with_cache():
    """A decoder with cross-attention (talking heads with dynamic memory projections there) decodes incrementally."""
    model = build("VariantBertLMHeadModel", "talking_heads_dynamic", seed=3, add_cross_attention=True)
    encoder_states = on_device(torch.randn(2, 6, TINY["hidden_size"], generator=torch.Generator().manual_seed(1)))
    ids = on_device(torch.randint(1, TINY["vocab_size"], (2, 7), generator=torch.Generator().manual_seed(2)))
    with torch.no_grad():
        full = model(ids, encoder_hidden_states=encoder_states).logits
        out = model(ids[:, :3], encoder_hidden_states=encoder_states, use_cache=True)
        steps, cache = [out.logits], getattr(out, CACHE_FIELD)
        for t in range(3, 7):
            out = model(ids[:, t : t + 1], encoder_hidden_states=encoder_states, cache=cache, use_cache=True)
            steps.append(out.logits)
            cache = getattr(out, CACHE_FIELD)
        attn = model(ids, encoder_hidden_states=encoder_states, output_attentions=True)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert attn.cross_attentions[0].shape == (2, TINY["num_attention_heads"], 7, 6)


@pytest.mark.parametrize(
    "head", ["VariantBertModel", "VariantBertLMHeadModel", "VariantT5Model", "VariantT5ForConditionalGeneration"]
)
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


# Left padding: transformers' common `test_left_padding_compatibility` (tests/generation/test_utils.py), for every
# variant. A causal LM's next-token logits for a batch equal those of the same batch behind 3 masked pad tokens, given
# position ids that count only the real tokens (as `generate` computes them), to transformers' tolerance. ALBERT has
# no causal LM head (nor has transformers' ALBERT): its encoder's masked-LM logits at every real token instead.
LEFT_PADDING_HEADS = ["VariantBertLMHeadModel", "VariantAlbertForMaskedLM"]
PADS = 3


def _sharpen_synthesizer(model):
    """The synthesizer's tables at O(1) (their init, std 0.02, leaves every logit near 0, where a row read at the
    wrong position moves the output by only ~1e-5)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, SynthesizerAttention):
                for name, param in module.named_parameters():
                    if name != "mixture_weights":
                        param.normal_(std=1.0)


def _position_ids(mask):
    """What transformers' test and `generate` give: the running count of real tokens minus one (pads: 1)."""
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)


def _left_pad(ids, mask, pads=PADS):
    zeros = torch.zeros(ids.shape[0], pads, dtype=ids.dtype, device=ids.device)
    return torch.cat([zeros, ids], dim=1), torch.cat([zeros, mask], dim=1)


def _read(head, model, ids, attention_mask, real):
    """The logits the comparison reads, with position ids counting the `real` tokens [b, n]: a causal LM's next-token
    logits, an encoder's at every real token."""
    logits = model(ids, attention_mask=attention_mask, position_ids=_position_ids(real)).logits
    return logits[:, -1] if head_kind(head) == "LMHeadModel" else logits[real.bool()]


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("head", LEFT_PADDING_HEADS)
def test_left_padding_leaves_logits_unchanged(variant, head, implementation, monkeypatch):
    model = build(head, variant, seed=4, attn_implementation=implementation)
    _sharpen_synthesizer(model)
    ids = _decoder_ids("bert", 7, seed=5)
    mask = torch.ones_like(ids)
    mask[0, 2] = 0  # a hole inside a row, as the random masks of transformers' BERT tester have
    padded_ids, padded_mask = _left_pad(ids, mask)
    with torch.no_grad():
        plain = _read(head, model, ids, mask, mask)
        padded = _read(head, model, padded_ids, padded_mask, padded_mask)
        torch.testing.assert_close(padded, plain, atol=1e-5, rtol=1e-5)
        # non-vacuity: the comparison fails (by 10x its tolerance) where the padding is attended to ...
        unmasked = _read(head, model, padded_ids, torch.ones_like(padded_mask), padded_mask)
        assert (unmasked - plain).abs().max() > 1e-4
        if VARIANTS[variant]["attention_type"] == "synthesizer":  # ... and where the tables are read at the index
            # of the padded batch (packed, ALBERT's default, a token's index in its sequence is the count of real
            # tokens before it, which the position ids give: tests/models/test_unpadding.py)
            model.config.unpad = False
            monkeypatch.setattr(
                attention_synthesizer,
                "synthesizer_positions",
                lambda key_positions, n, m: (slice(m - n, m), slice(0, m)),
            )
            misread = _read(head, model, padded_ids, padded_mask, padded_mask)
            assert (misread - plain).abs().max() > 1e-4


@pytest.mark.parametrize("use_cache", [True, False])
def test_left_padded_generate_equals_each_prompt_alone(variant, use_cache):
    """`generate` on a batch of prompts of different lengths, left-padded, continues each prompt as it continues the
    prompt alone, with and without a cache: the same tokens, and each step's logits to 1e-5 (the cached tokens sit
    where `generate` put them, at the mask's count)."""
    model = build("VariantBertLMHeadModel", variant, seed=2)
    _sharpen_lm_head(model)
    _sharpen_synthesizer(model)
    ids = _decoder_ids("bert", 6, seed=11)
    mask = torch.ones_like(ids)
    mask[1, :PADS] = 0  # the second prompt is PADS tokens shorter
    ids = ids.masked_fill(mask == 0, 0)
    kwargs = dict(
        max_new_tokens=6,
        do_sample=False,
        use_cache=use_cache,
        pad_token_id=0,
        eos_token_id=None,
        return_dict_in_generate=True,
        output_logits=True,
    )
    with torch.no_grad():
        batched = model.generate(ids, attention_mask=mask, **kwargs)
        for row in range(2):
            prompt = ids[row : row + 1][mask[row : row + 1].bool()][None]
            alone = model.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)
            assert torch.equal(batched.sequences[row, ids.shape[1] :], alone.sequences[0, prompt.shape[1] :])
            torch.testing.assert_close(
                torch.stack(batched.logits)[:, row], torch.stack(alone.logits)[:, 0], atol=1e-5, rtol=1e-5
            )
