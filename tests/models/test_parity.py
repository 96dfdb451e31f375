"""Function-preserving variants equal transformers' own models on the same weights (the strongest test we have).

The references are transformers' BertModel / BertForMaskedLM / BertLMHeadModel, AlbertModel / AlbertForPreTraining /
AlbertForMaskedLM (3 layers from 2 groups of 2 shared layers), T5ForConditionalGeneration (original and v1.1) and
T5EncoderModel, each saved as an ordinary checkpoint and warm-started into a variant with
`from_pretrained(..., attention_type=...)`: the checkpoint lacks the variant's parameters, so this also shows the
function-preserving init survives `from_pretrained`. Every output is compared (logits, pooled output, each hidden
state and attention), T5's greedy and beam `generate` tokens too; each comparison has a perturbed twin that must fail,
so a variant path that was silently skipped would be caught.
"""

import pytest
import torch
import transformers

import hf_attn_variants as hav
from conftest import FAMILIES, TINY, TINY_ALBERT, TINY_T5, encoder_inputs, family, on_device, sharpen_t5

pytestmark = pytest.mark.device

WARM_STARTS = {
    "dot_product": dict(attention_type="dot_product"),
    "talking_heads_identity": dict(attention_type="talking_heads", talking_heads_init="identity"),
    "talking_heads_identity_pre_only": dict(
        attention_type="talking_heads", talking_heads_init="identity", talking_heads_post_softmax=False
    ),
    "talking_heads_identity_post_only": dict(
        attention_type="talking_heads", talking_heads_init="identity", talking_heads_pre_softmax=False
    ),
    "mixture_zero_start": dict(
        attention_type="synthesizer",
        synthesizer_components=["dot_product", "dense", "random", "factorized_dense", "factorized_random"],
        synthesizer_mixture_init="dot_product",
    ),
    "mixture_zero_start_unnormalized": dict(
        attention_type="synthesizer",
        synthesizer_components=["random", "dot_product"],
        synthesizer_mixture_init="dot_product",
        synthesizer_mixture_normalize=False,
    ),
}
# an encoder-decoder's attention chosen per place: identity talking heads in the encoder and across, a zero-start
# mixture in the decoder
PER_PLACE = dict(
    attention_type="talking_heads",
    talking_heads_init="identity",
    decoder_attention_type="synthesizer",
    synthesizer_components=["random", "dot_product"],
    synthesizer_mixture_init="dot_product",
)

# transformers' class and its config's fields (one reference each); ours is "Variant" + the class name
REFERENCES = [
    pytest.param("BertModel", TINY, id="BertModel"),
    pytest.param("BertForMaskedLM", TINY, id="BertForMaskedLM"),
    pytest.param("BertLMHeadModel", dict(TINY, is_decoder=True), id="BertLMHeadModel"),
    pytest.param("AlbertModel", TINY_ALBERT, id="AlbertModel"),
    pytest.param("AlbertForPreTraining", TINY_ALBERT, id="AlbertForPreTraining"),
    pytest.param("AlbertForMaskedLM", TINY_ALBERT, id="AlbertForMaskedLM"),
    pytest.param(
        "T5ForConditionalGeneration", dict(TINY_T5, feed_forward_proj="relu"), id="T5ForConditionalGeneration"
    ),
    pytest.param(
        "T5ForConditionalGeneration",
        dict(TINY_T5, feed_forward_proj="gated-gelu", tie_word_embeddings=False),
        id="T5v1_1ForConditionalGeneration",
    ),
    pytest.param("T5EncoderModel", dict(TINY_T5, feed_forward_proj="relu"), id="T5EncoderModel"),
]
WARM_START_CASES = [
    pytest.param(ref.values[0], ref.values[1], fields, id=f"{ref.id}-{name}")
    for ref in REFERENCES
    for name, fields in [*WARM_STARTS.items(), *([("per_place", PER_PLACE)] if ref.id.startswith("T5") else [])]
]


def _family(ref_name):
    return FAMILIES[family(f"Variant{ref_name}")]


def _inputs(ref_name):
    """An encoder family's: 3 rows of 9 tokens (two padded) in two segments. An encoder-decoder's: `encoder_inputs`
    and, where there is a decoder, 6 decoder tokens (transformers' T5Config has no start token to shift labels to)."""
    if _family(ref_name).encoder_decoder:
        ids, mask = encoder_inputs()
        inputs = dict(input_ids=ids, attention_mask=mask)
        if ref_name != "T5EncoderModel":
            g = torch.Generator().manual_seed(4)
            inputs["decoder_input_ids"] = on_device(torch.randint(2, TINY_T5["vocab_size"], (2, 6), generator=g))
        return inputs
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, TINY["vocab_size"], (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    token_type_ids = (torch.arange(9) > 4).long().expand(3, -1)
    return on_device(dict(input_ids=ids, attention_mask=mask, token_type_ids=token_type_ids))


def _reference(tmp_path, ref_name, fields, attn_implementation):
    torch.manual_seed(0)
    fam = _family(ref_name)
    ref = getattr(transformers, ref_name)(getattr(transformers, fam.upstream_config)(**fields))
    # move every weight (biases and LayerNorms too) off its init, so a parameter loaded into the wrong place shows;
    # a T5 is also sharpened, for the comparison of generated tokens
    if fam.encoder_decoder:
        sharpen_t5(ref)
    else:
        with torch.no_grad():
            for p in ref.parameters():
                p.add_(0.02 * torch.randn_like(p))
    ref.save_pretrained(tmp_path / "ref")
    ref = getattr(transformers, ref_name).from_pretrained(tmp_path / "ref", attn_implementation=attn_implementation)
    return on_device(ref.eval())


def _max_diffs(ref_out, out, skip=(), real=None):
    """Max |difference| of every tensor output the reference gives (logits, pooled output, each hidden state and
    attention, ...), each of the reference's shape. With `real` (the 2D attention mask), per-token outputs are
    compared at the real tokens only: where a call runs the encoder on the packed real tokens (`unpad`), the padded
    positions hold what no real token reads in either model (transformers computes them, ours leaves zeros)."""
    diffs = {}
    for key, ref_value in ref_out.items():
        if key in skip:
            continue
        pairs = [(key, ref_value, out[key])] if isinstance(ref_value, torch.Tensor) else []
        if isinstance(ref_value, tuple) and ref_value and isinstance(ref_value[0], torch.Tensor):
            pairs = [(f"{key}[{i}]", a, b) for i, (a, b) in enumerate(zip(ref_value, out[key], strict=True))]
        for name, a, b in pairs:
            assert a.shape == b.shape, (name, a.shape, b.shape)
            if real is not None and a.shape[:2] == real.shape:
                a, b = a[real.bool()], b[real.bool()]
            diffs[name] = (a - b).abs().max().item()
    return diffs


def _stacks(output):
    """The per-layer outputs given (name -> how many tensors); transformers gives the ones not asked for empty."""
    return {
        key: len(value) for key, value in output.items() if key.endswith(("hidden_states", "attentions")) and value
    }


@pytest.mark.parametrize("ref_name,fields,warm", WARM_START_CASES)
def test_warm_start_equals_transformers(tmp_path, ref_name, fields, warm):
    ref = _reference(tmp_path, ref_name, fields, "eager")
    ours = getattr(hav, f"Variant{ref_name}").from_pretrained(tmp_path / "ref", attn_implementation="eager", **warm)
    ours = on_device(ours.eval())
    assert ours.config.attention_type == warm["attention_type"]
    inputs = _inputs(ref_name)
    with torch.no_grad():
        ref_out = ref(**inputs, output_hidden_states=True, output_attentions=True)
        out = ours(**inputs, output_hidden_states=True, output_attentions=True)
    # one hidden state per layer application and the embeddings', one attention per layer application, for each
    # stack (an encoder-decoder's decoder also gives its cross-attentions); the same as the reference's
    config = ref.config
    layers = (getattr(config, "num_hidden_layers", None) or config.num_layers) * getattr(config, "inner_group_num", 1)
    expected = {"hidden_states", "attentions"}
    if "decoder_input_ids" in inputs:
        expected = {f"{part}_{kind}" for part in ("encoder", "decoder") for kind in expected} | {"cross_attentions"}
    assert _stacks(out) == _stacks(ref_out) == {key: layers + key.endswith("hidden_states") for key in expected}
    diffs = _max_diffs(ref_out, out)
    assert max(diffs.values()) < 1e-5, diffs
    if isinstance(ref, transformers.T5ForConditionalGeneration):
        # a random model repeats one token (or pad/<eos>) forever: suppress those and forbid repeats, so that the
        # comparison runs over a varied sequence
        gen = dict(
            max_new_tokens=8, do_sample=False, decoder_start_token_id=0, suppress_tokens=[0, 1], no_repeat_ngram_size=1
        )
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        for beams in (1, 3):
            expected_ids = ref.generate(ids, attention_mask=mask, num_beams=beams, **gen)
            assert len(set(expected_ids[0, 1:].tolist())) == 8
            assert torch.equal(ours.generate(ids, attention_mask=mask, num_beams=beams, **gen), expected_ids)

    # non-vacuity: the same comparison with the variant's own parameters perturbed must fail
    cores = [m for m in ours.modules() if isinstance(m, hav.VariantAttentionCore)]
    assert cores
    extra = [p for core in cores for p in core.parameters()]
    if warm["attention_type"] == "dot_product":
        assert extra == []
        return
    with torch.no_grad():
        for p in extra:
            p.add_(0.3 * torch.randn_like(p))
        out = ours(**inputs, output_hidden_states=True, output_attentions=True)
    assert max(_max_diffs(ref_out, out).values()) > 1e-3


@pytest.mark.parametrize("ref_name,fields", REFERENCES)
def test_dot_product_sdpa_equals_transformers_sdpa(tmp_path, ref_name, fields):
    """Our dot-product path through ALL_ATTENTION_FUNCTIONS (SDPA) equals transformers' model on SDPA."""
    if not getattr(transformers, ref_name)._supports_sdpa:  # older transformers: T5 without SDPA (5.14)
        pytest.skip(f"transformers {transformers.__version__}'s {ref_name} has no SDPA path to compare with")
    ref = _reference(tmp_path, ref_name, fields, "sdpa")
    ours = on_device(getattr(hav, f"Variant{ref_name}").from_pretrained(tmp_path / "ref").eval())
    assert ours.config._attn_implementation == "sdpa"
    inputs = _inputs(ref_name)
    with torch.no_grad():
        diffs = _max_diffs(
            ref(**inputs, output_hidden_states=True), ours(**inputs, output_hidden_states=True), skip=("attentions",)
        )
    assert max(diffs.values()) < 1e-5, diffs


def test_identity_talking_heads_grad_equals_transformers(tmp_path):
    """Training step parity: the gradients of the shared parameters equal BERT's (the maps are in the graph)."""
    ref = _reference(tmp_path, "BertForMaskedLM", TINY, "eager").train()
    ours = on_device(
        hav.VariantBertForMaskedLM.from_pretrained(
            tmp_path / "ref",
            attention_type="talking_heads",
            talking_heads_init="identity",
            attn_implementation="eager",
        ).train()
    )
    inputs = _inputs("BertForMaskedLM")
    inputs["labels"] = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    ref(**inputs).loss.backward()
    ours(**inputs).loss.backward()
    ref_grads = dict(ref.named_parameters())
    for name, p in ours.named_parameters():
        if ".core." in name:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        elif name in ref_grads:
            torch.testing.assert_close(p.grad, ref_grads[name].grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("warm", ["dot_product", "talking_heads_identity"])
@pytest.mark.parametrize("ref_name,fields", [REFERENCES[1], REFERENCES[4], REFERENCES[5]])
def test_sparse_prediction_equals_transformers(tmp_path, warm, ref_name, fields):
    """Called with `sparse_prediction=True`: no labels, the full logits of transformers' head; labels, its loss and
    its logits at the labelled positions (row-major), on the same weights."""
    ref = _reference(tmp_path, ref_name, fields, "eager")
    ours = getattr(hav, f"Variant{ref_name}").from_pretrained(
        tmp_path / "ref", attn_implementation="eager", **WARM_STARTS[warm]
    )
    ours = on_device(ours.eval())
    logits_name = "prediction_logits" if ref_name.endswith("PreTraining") else "logits"
    inputs = _inputs(ref_name)
    with torch.no_grad():
        ref_out, out = ref(**inputs), ours(**inputs, sparse_prediction=True)
    assert out[logits_name].shape == (3, 9, TINY["vocab_size"])
    diffs = _max_diffs(ref_out, out, real=inputs["attention_mask"])
    assert max(diffs.values()) < 1e-5, diffs

    labels = inputs["input_ids"].masked_fill(
        on_device(torch.rand(3, 9, generator=torch.Generator().manual_seed(2)) > 0.4), -100
    )
    inputs["labels"] = labels = labels.masked_fill(inputs["attention_mask"] == 0, -100)
    if ref_name == "AlbertForPreTraining":
        inputs["sentence_order_label"] = on_device(torch.tensor([0, 1, 1]))
    with torch.no_grad():
        ref_out, out = ref(**inputs), ours(**inputs, sparse_prediction=True)
    scored = labels != -100
    assert out[logits_name].shape == (scored.sum().item(), TINY["vocab_size"])
    assert (out[logits_name] - ref_out[logits_name][scored]).abs().max() < 1e-5
    assert (out.loss - ref_out.loss).abs() < 1e-5
    # non-vacuity: the same rows in another order fail the comparison
    assert (out[logits_name].flip(0) - ref_out[logits_name][scored]).abs().max() > 1e-3


# attention_type alone, as a user writes it first: (fields, starts as the checkpoint, the warning expected)
DEFAULT_WARM_STARTS = {
    "talking_heads": (dict(attention_type="talking_heads"), True, None),
    "mixture": (dict(attention_type="synthesizer", synthesizer_components=["dot_product", "random"]), True, None),
    "talking_heads_paper": (
        dict(attention_type="talking_heads", talking_heads_init="paper"),
        False,
        "with talking_heads_init='paper' (not 'identity') the model's outputs differ",
    ),
    "dense_synthesizer": (
        dict(attention_type="synthesizer"),
        False,
        "cannot start as it without 'dot_product' among synthesizer_components",
    ),
    "general_bilinear": (dict(attention_type="general_bilinear"), False, "cannot start as it"),
}


@pytest.mark.parametrize("ref_name,fields", [REFERENCES[1], REFERENCES[5], REFERENCES[6]])
@pytest.mark.parametrize("case", list(DEFAULT_WARM_STARTS))
def test_a_vanilla_checkpoint_with_an_attention_type_starts_as_the_checkpoint(tmp_path, ref_name, fields, case):
    """`from_pretrained(vanilla, attention_type=...)` with nothing else starts as the checkpoint (the type's
    function-preserving fields are the defaults); asking for another init, or a type that cannot start so, gives one
    warning line saying the outputs differ (and they do). Either way one line says what the warm start converted,
    in place of transformers' model-type warning and its report of the variant's parameters as missing."""
    import logging

    from transformers.testing_utils import CaptureLogger

    from hf_attn_variants.models import modeling_variant_utils

    warm, preserving, warning = DEFAULT_WARM_STARTS[case]
    ref = _reference(tmp_path, ref_name, fields, "eager")
    records, handler = [], logging.Handler()
    handler.emit = records.append
    logging.getLogger("transformers").addHandler(handler)
    try:
        with CaptureLogger(modeling_variant_utils.logger) as captured:
            ours = getattr(hav, f"Variant{ref_name}").from_pretrained(
                tmp_path / "ref", attn_implementation="eager", ignore_mismatched_sizes=True, **warm
            )
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    said = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert not [m for m in said if "model of type" in m or "MISSING" in m], said
    *before, last = captured.out.strip().splitlines()
    assert last.startswith(f"Warm start: {tmp_path / 'ref'} is a ") and f"loaded as Variant{ref_name} (" in last
    ours = on_device(ours.eval())
    inputs = _inputs(ref_name)
    with torch.no_grad():
        diff = max(_max_diffs(ref(**inputs), ours(**inputs), real=inputs.get("attention_mask")).values())
    if preserving:
        assert diff < 1e-5 and before == [], captured.out
    else:
        assert diff > 1e-4 and len(before) == 1 and warning in before[0], captured.out
