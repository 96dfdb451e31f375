"""The T5 family: parity with transformers' T5, generation with and without cache, every variant x every head."""

import pytest
import torch
import transformers

import hf_attn_variants as hav
from conftest import SAME_WEIGHTS, T5_HEADS, TINY_T5, VARIANTS, build, encoder_inputs as _encoder_inputs, head_inputs
from conftest import on_device

pytestmark = pytest.mark.device

WARM_STARTS = {
    "talking_heads_identity": dict(attention_type="talking_heads", talking_heads_init="identity"),
    "mixture_zero_start": dict(
        attention_type="synthesizer",
        synthesizer_components=["dot_product", "dense", "random", "factorized_dense", "factorized_random"],
        synthesizer_mixture_init="dot_product",
    ),
    "per_place": dict(  # identity talking heads in the encoder and across, a zero-start mixture in the decoder
        attention_type="talking_heads",
        talking_heads_init="identity",
        decoder_attention_type="synthesizer",
        synthesizer_components=["random", "dot_product"],
        synthesizer_mixture_init="dot_product",
    ),
}
STYLES = {
    "t5": dict(feed_forward_proj="relu"),
    "t5_v1_1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}


def _sharpen(model):
    """Move every weight off its init and strengthen the residual branches, so that a random model does not just
    repeat its start token and greedy/beam choices are not decided by rounding."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(0.05 * torch.randn_like(p))
            if name.endswith(("wo.weight", ".o.weight")):
                p.mul_(3.0)


def _reference(tmp_path, cls_name, style):
    torch.manual_seed(0)
    ref = getattr(transformers, cls_name)(transformers.T5Config(**TINY_T5, **STYLES[style]))
    _sharpen(ref)
    ref.save_pretrained(tmp_path / "ref")
    ref = getattr(transformers, cls_name).from_pretrained(tmp_path / "ref", attn_implementation="eager")
    return on_device(ref.eval())


def _max_diffs(ref_out, out):
    diffs = {}
    for key, value in ref_out.items():
        if isinstance(value, torch.Tensor):
            diffs[key] = (value - out[key]).abs().max().item()
        elif isinstance(value, tuple) and value and isinstance(value[0], torch.Tensor):
            for i, (a, b) in enumerate(zip(value, out[key], strict=True)):
                diffs[f"{key}[{i}]"] = (a - b).abs().max().item()
    return diffs


@pytest.mark.parametrize("style", list(STYLES))
@pytest.mark.parametrize("warm", list(WARM_STARTS))
def test_warm_start_equals_transformers_t5(tmp_path, warm, style):
    ref = _reference(tmp_path, "T5ForConditionalGeneration", style)
    ours = on_device(hav.VariantT5ForConditionalGeneration.from_pretrained(
        tmp_path / "ref", attn_implementation="eager", **WARM_STARTS[warm]
    ).eval())
    ids, mask = _encoder_inputs()
    decoder_ids = on_device(torch.randint(2, TINY_T5["vocab_size"], (2, 6), generator=torch.Generator().manual_seed(4)))
    kwargs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, output_hidden_states=True,
                  output_attentions=True)
    with torch.no_grad():
        ref_out, out = ref(**kwargs), ours(**kwargs)
    diffs = _max_diffs(ref_out, out)
    assert len(diffs) == 1 + 2 * (TINY_T5["num_layers"] + 1) + 1 + 3 * TINY_T5["num_layers"], diffs.keys()
    assert max(diffs.values()) < 1e-5, diffs
    # a random model repeats one token (or pad/<eos>) forever: suppress those and forbid repeats, so that the
    # comparison runs over a varied sequence
    gen = dict(max_new_tokens=8, do_sample=False, decoder_start_token_id=0, suppress_tokens=[0, 1],
               no_repeat_ngram_size=1)
    for beams in (1, 3):
        expected = ref.generate(ids, attention_mask=mask, num_beams=beams, **gen)
        assert len(set(expected[0, 1:].tolist())) == 8
        assert torch.equal(ours.generate(ids, attention_mask=mask, num_beams=beams, **gen), expected)

    # non-vacuity: perturbing the variant's own parameters must break the equality
    with torch.no_grad():
        for module in ours.modules():
            if isinstance(module, hav.VariantAttentionCore):
                for name, p in module.named_parameters():
                    p.add_(0.3 * torch.randn_like(p))
        out = ours(**kwargs)
    assert max(_max_diffs(ref_out, out).values()) > 1e-3


@pytest.mark.parametrize("warm", ["talking_heads_identity", "mixture_zero_start"])
def test_encoder_model_equals_transformers(tmp_path, warm):
    ref = _reference(tmp_path, "T5EncoderModel", "t5")
    ours = on_device(hav.VariantT5EncoderModel.from_pretrained(
        tmp_path / "ref", attn_implementation="eager", **WARM_STARTS[warm]
    ).eval())
    ids, mask = _encoder_inputs()
    with torch.no_grad():
        diffs = _max_diffs(
            ref(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True),
            ours(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True),
        )
    assert max(diffs.values()) < 1e-5, diffs


def test_dot_product_sdpa_equals_transformers_sdpa(tmp_path):
    _reference(tmp_path, "T5ForConditionalGeneration", "t5")
    ref = on_device(transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "ref").eval())
    ours = on_device(hav.VariantT5ForConditionalGeneration.from_pretrained(tmp_path / "ref").eval())
    assert ours.config._attn_implementation == "sdpa"
    inputs = head_inputs("VariantT5Model")  # decoder_input_ids: transformers' T5Config has no start token to shift
    with torch.no_grad():
        diffs = _max_diffs(ref(**inputs, output_hidden_states=True), ours(**inputs, output_hidden_states=True))
    assert max(diffs.values()) < 1e-5, diffs


@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_with_cache_equals_without(variant, num_beams):
    model = build("VariantT5ForConditionalGeneration", variant, seed=2)
    _sharpen(model)
    ids, mask = _encoder_inputs()
    kwargs = dict(max_new_tokens=8, do_sample=False, num_beams=num_beams, attention_mask=mask, suppress_tokens=[0, 1],
                  no_repeat_ngram_size=1)
    with torch.no_grad():
        cached = model.generate(ids, use_cache=True, **kwargs)
        uncached = model.generate(ids, use_cache=False, **kwargs)
    assert cached.shape == (2, 9)
    assert torch.equal(cached, uncached)


def test_cached_decoding_equals_full_decoding(variant):
    """Decoder logits step by step with an EncoderDecoderCache equal one causal pass (synthesizer rows included).

    In float64: T5's unscaled logits amplify float32 rounding of the two summation orders to ~1e-4, while a wrong
    row, mask or cached projection shows at any precision."""
    model = build("VariantT5ForConditionalGeneration", variant, seed=3).double()
    ids, mask = _encoder_inputs()
    g = torch.Generator().manual_seed(5)
    decoder_ids = on_device(torch.randint(2, TINY_T5["vocab_size"], (2, 7), generator=g))
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
        full = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        out = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=decoder_ids[:, :3],
                    use_cache=True)
        steps, cache = [out.logits], out.cache
        for t in range(3, 7):
            out = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=decoder_ids[:, t : t + 1],
                        cache=cache, use_cache=True)
            steps.append(out.logits)
            cache = out.cache
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-10, rtol=1e-10)


def test_encoder_padding_invariance(variant):
    model = build("VariantT5EncoderModel", variant, seed=4)
    ids = on_device(torch.randint(2, TINY_T5["vocab_size"], (1, 6), generator=torch.Generator().manual_seed(6)))
    padded = torch.cat([ids, on_device(torch.zeros(1, 4, dtype=torch.long))], dim=1)
    mask = on_device(torch.cat([torch.ones(1, 6), torch.zeros(1, 4)], dim=1).long())
    with torch.no_grad():
        short = model(ids).last_hidden_state
        long = model(padded, attention_mask=mask).last_hidden_state[:, :6]
    torch.testing.assert_close(short, long, atol=1e-5, rtol=1e-5)


SHAPES = {
    "VariantT5Model": ("last_hidden_state", (2, 5, 32)),
    "VariantT5ForConditionalGeneration": ("logits", (2, 5, 99)),
    "VariantT5EncoderModel": ("last_hidden_state", (2, 7, 32)),
    "VariantT5ForSequenceClassification": ("logits", (2, 2)),
    "VariantT5ForTokenClassification": ("logits", (2, 7, 2)),
    "VariantT5ForQuestionAnswering": ("start_logits", (2, 7)),
}


@pytest.mark.parametrize("head", T5_HEADS)
def test_shapes_loss_gradients_and_round_trip(tmp_path, variant, head):
    model = build(head, variant).train()
    inputs = head_inputs(head)
    out = model(**inputs)
    field, shape = SHAPES[head]
    assert getattr(out, field).shape == shape
    loss = out.loss if getattr(out, "loss", None) is not None else getattr(out, field).pow(2).mean()
    assert torch.isfinite(loss)
    loss.backward()
    frozen = VARIANTS[variant].get("synthesizer_random_trainable") is False
    for name, p in model.named_parameters():
        if not p.requires_grad:
            assert frozen and "random" in name, name
            continue
        if head == "VariantT5ForQuestionAnswering" and name == "qa_outputs.bias":
            continue  # a bias shared by every position cancels in the softmax: its gradient is exactly zero
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reaches {name}"

    model.eval()
    model.save_pretrained(tmp_path)
    loaded = on_device(getattr(hav, head).from_pretrained(tmp_path).eval())
    with torch.no_grad():
        a, b = model(**inputs), loaded(**inputs)
    torch.testing.assert_close(getattr(a, field), getattr(b, field), **SAME_WEIGHTS)
    assert [p.requires_grad for p in model.parameters()] == [p.requires_grad for p in loaded.parameters()]


def test_untied_lm_head_v1_1(tmp_path):
    """tie_word_embeddings=False: a separate LM head (v1.1) that survives save/load; tied by default."""
    tied = build("VariantT5ForConditionalGeneration", "talking_heads")
    assert tied.lm_head.weight is tied.shared.weight
    model = build("VariantT5ForConditionalGeneration", "talking_heads", feed_forward_proj="gated-gelu",
                  tie_word_embeddings=False)
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
