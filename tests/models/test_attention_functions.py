"""Every attention type is computed by functions with transformers' attention interface, as transformers' BERT calls
`eager_attention_forward` / `sdpa_attention_forward`: `fn(module, query, key, value, attention_mask, scaling=...,
dropout=..., **kwargs)` -> (attn_output [b, n, heads, d], attn_weights or None), with the keyword extras
`position_bias`, `hidden_states` (the query input) and `output_attentions`.

Called directly, the function a core picks (`attention_function`) gives the core's own output; and each agrees with
something we did not write where the mathematics is the same (transformers' own eager and SDPA functions for dot
product), or with an independent reference (talking heads' einsum `talking_heads_reference`, a per-head loop for
general bilinear attention). One contract for every type, as transformers' `eager_attention_forward`: the weights a
function returns are the ones that multiply V, after dropout, and half-precision logits share one float32 softmax.
"""

import inspect

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.bert.modeling_bert import eager_attention_forward

import hf_attn_variants as hav
from conftest import VARIANTS, make_config
from hf_attn_variants.models import attention_synthesizer as synthesizer
from hf_attn_variants.models import attention_variants as av
from hf_attn_variants.models.talking_heads_blockwise import softmax_keys, talking_heads_reference

CLOSE = dict(atol=1e-5, rtol=1e-5)  # float32, two different computations
CLOSE64 = dict(atol=1e-10, rtol=1e-10)  # float64


def layer_and_inputs(variant: str, dtype=torch.float32, causal: bool = False, seed: int = 0, **overrides):
    """Layer 0's self-attention of a tiny BERT with `variant` (every core parameter moved off its init, so identity
    maps and warm starts hide nothing) and its inputs: hidden states x [2, 7, 32], q/k/v projected by the layer, and
    a padding mask in transformers' additive 4D form (None for a causal decoder, which masks by itself)."""
    torch.manual_seed(seed)
    config = make_config(variant, is_decoder=causal, **overrides)
    attn = hav.VariantBertModel(config).to(dtype).eval().encoder.layer[0].attention.self
    with torch.no_grad():
        for p in attn.core.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(2, 7, config.hidden_size, dtype=dtype)
    query = attn.core.project_query(x, attn.query)
    key, value = attn.core.project_memory(x, attn.key, attn.value)
    mask = None
    if not causal:
        mask = torch.zeros(2, 1, 1, 7, dtype=dtype)
        mask[1, ..., -2:] = torch.finfo(dtype).min
    return attn.core, x, query, key, value, mask


def call(fn, core, x, query, key, value, mask, dropout=0.0, **kwargs):
    """`fn` called as transformers' models call an attention function."""
    return fn(core, query, key, value, mask, scaling=core.scaling, dropout=dropout, hidden_states=x, **kwargs)


@pytest.mark.parametrize("output_attentions", [False, True])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_function_a_core_picks_gives_its_output(variant, attn_implementation, output_attentions):
    core, x, query, key, value, mask = layer_and_inputs(variant)
    fn = core.attention_function(attn_implementation, output_attentions, 0.0, x.device)
    with torch.no_grad():
        out, weights = call(fn, core, x, query, key, value, mask, output_attentions=output_attentions)
        expected, expected_weights = core(
            query, key, value, mask, x, attn_implementation=attn_implementation, output_attentions=output_attentions
        )
    assert out.shape == (2, 7, core.spec.num_value_heads, expected.shape[-1])
    torch.testing.assert_close(out, expected, **CLOSE)
    if output_attentions:  # the weights multiply V (general bilinear: the memory, shared by the heads)
        torch.testing.assert_close(weights, expected_weights, **CLOSE)
        values = value[..., : expected.shape[-1]]
        torch.testing.assert_close(torch.matmul(weights, values).transpose(1, 2), out, **CLOSE)


def test_every_function_has_transformers_signature():
    """module, query, key, value, attention_mask, then scaling and dropout, then keyword extras: as transformers' own
    eager function, so a function can be handed to (or taken from) transformers' `ALL_ATTENTION_FUNCTIONS`."""
    upstream = list(inspect.signature(eager_attention_forward).parameters)[:7]
    functions = [
        av.dot_product_eager_forward,
        av.talking_heads_attention_forward,
        synthesizer.synthesizer_eager_forward,
        synthesizer.synthesizer_sdpa_forward,
        av.general_bilinear_eager_forward,
    ]
    for fn in functions:
        params = inspect.signature(fn).parameters
        assert list(params)[:7] == upstream, fn.__name__
        assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), fn.__name__


@pytest.mark.parametrize("with_position_bias", [False, True])
def test_dot_product_equals_transformers_own_functions(with_position_bias):
    """Ours against transformers' `eager_attention_forward` (output and weights) and `sdpa_attention_forward`, with a
    padding mask and T5's position bias (transformers' eager function takes it folded into the mask)."""
    core, x, query, key, value, mask = layer_and_inputs("dot_product")
    bias = torch.randn(1, 4, 7, 7) if with_position_bias else None
    fn = core.attention_function("sdpa", False, 0.0, x.device)
    assert fn is sdpa_attention_forward
    out, weights = call(av.dot_product_eager_forward, core, x, query, key, value, mask, position_bias=bias)
    upstream_mask = mask if bias is None else mask + bias
    expected, expected_weights = eager_attention_forward(
        core, query, key, value, upstream_mask, scaling=core.scaling, dropout=0.0
    )
    torch.testing.assert_close(out, expected, **CLOSE)
    torch.testing.assert_close(weights, expected_weights, **CLOSE)
    fused, none = call(sdpa_attention_forward, core, x, query, key, value, mask, position_bias=bias)
    assert none is None
    torch.testing.assert_close(fused, expected, **CLOSE)


def _reference_inputs(core, x, key, value):
    """talking_heads_reference's maps, read from the core's parameters here (not through `formula_arguments`)."""
    spec = core.spec
    b, n, m = x.shape[0], x.shape[1], key.shape[2]
    h_k, h, h_v = spec.num_key_heads, spec.num_heads, spec.num_value_heads
    maps = dict(pre_proj=getattr(core, "pre_softmax_proj", None), post_proj=getattr(core, "post_softmax_proj", None))
    shapes = dict(x2l=(h_k, h), m2l=(h_k, h), x2w=(h, h_v), m2w=(h, h_v))
    for name in spec.dynamic:
        length = n if name.startswith("x") else m
        maps[name] = (x @ getattr(core, f"dynamic_{name}")).view(b, length, *shapes[name])
    return key[..., : spec.key_head_size], value[..., : spec.value_head_size], maps


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("algorithm", ["eager", "blockwise"])
@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.startswith("talking_heads")])
def test_talking_heads_function_equals_the_einsum_reference(variant, algorithm, causal):
    """`talking_heads_attention_forward` with each PyTorch algorithm against `talking_heads_reference` in float64
    (padding mask, or a causal decoder without one); with output_attentions, its weights U are those that multiply V.
    A 1e-3 change of one P_l entry moves the reference past the tolerance."""
    core, x, query, key, value, mask = layer_and_inputs(variant, torch.float64, causal, attention_algorithm=algorithm)
    ref_key, ref_value, maps = _reference_inputs(core, x, key, value)
    with torch.no_grad():
        expected = talking_heads_reference(
            query, ref_key, ref_value, mask, **maps, scaling=core.scaling, causal=causal
        ).transpose(1, 2)
        out, none = call(av.talking_heads_attention_forward, core, x, query, key, value, mask)
        with_weights, weights = call(
            av.talking_heads_attention_forward, core, x, query, key, value, mask, output_attentions=True
        )
        assert none is None and weights.shape == (2, core.spec.num_value_heads, 7, 7)
        torch.testing.assert_close(out, expected, **CLOSE64)
        torch.testing.assert_close(with_weights, expected, **CLOSE64)
        torch.testing.assert_close(torch.matmul(weights, ref_value).transpose(1, 2), expected, **CLOSE64)
        maps["pre_proj"] = maps["pre_proj"].clone()
        maps["pre_proj"][0, 0] += 1e-3
        moved = talking_heads_reference(query, ref_key, ref_value, mask, **maps, scaling=core.scaling, causal=causal)
    assert not torch.allclose(moved.transpose(1, 2), out, **CLOSE64)


@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.startswith("synth")])
def test_synthesizer_sdpa_fold_equals_its_eager_function(monkeypatch, variant, per_row):
    """Every mixture folds: `synthesizer_sdpa_forward` gives what the eager function gives (with T5's position bias
    too), in one call and, for a large attention (here every one), one batch row at a time over its real keys."""
    if per_row:
        monkeypatch.setattr(synthesizer, "SDPA_PER_ROW_ELEMENTS", 1)
    core, x, query, key, value, mask = layer_and_inputs(variant)
    assert core.attention_function("sdpa", False, 0.0, x.device) is synthesizer.synthesizer_sdpa_forward
    bias = torch.randn(1, 4, 7, 7)
    with torch.no_grad():
        expected, weights = call(
            synthesizer.synthesizer_eager_forward, core, x, query, key, value, mask, position_bias=bias
        )
        fused, none = call(synthesizer.synthesizer_sdpa_forward, core, x, query, key, value, mask, position_bias=bias)
    assert none is None and weights.shape == (2, 4, 7, 7)
    torch.testing.assert_close(fused, expected, **CLOSE)


def test_general_bilinear_function_equals_a_per_head_loop():
    """Head by head: softmax(q_h x^T * s + mask) x, the memory x being the keys and the values of every head."""
    core, x, query, key, value, mask = layer_and_inputs("general_bilinear")
    with torch.no_grad():
        out, weights = call(av.general_bilinear_eager_forward, core, x, query, key, value, mask)
        for h in range(query.shape[1]):
            w = torch.softmax(query[:, h] @ x.transpose(1, 2) * core.scaling + mask[:, 0], dim=-1)  # [b, n, m]
            torch.testing.assert_close(weights[:, h], w, **CLOSE)
            torch.testing.assert_close(out[:, :, h], w @ x, **CLOSE)


def _dropout_contract(core, x, query, key, value, mask, fn, p: float, seed: int):
    """`fn` in training mode with dropout `p` under `seed`: its output and weights, checked to be the weights that
    multiply V (the value path of the type: general bilinear's memory, talking heads' value channels) and to hold
    dropout's zeros and 1/(1-p) scaling of the weights the same function gives in eval mode."""
    with torch.no_grad():
        core.eval()
        _, undropped = call(fn, core, x, query, key, value, mask, dropout=p, output_attentions=True)
        core.train()
        torch.manual_seed(seed)
        out, weights = call(fn, core, x, query, key, value, mask, dropout=p, output_attentions=True)
    values = value[..., : out.shape[-1]]
    torch.testing.assert_close(torch.matmul(weights, values).transpose(1, 2), out, **CLOSE)
    dropped = weights == 0
    assert (dropped & (undropped != 0)).any() and (~dropped).any()  # dropout zeroed some weights, kept others
    torch.testing.assert_close(weights[~dropped], undropped[~dropped] / (1 - p), **CLOSE)
    assert not torch.allclose(weights.sum(-1), undropped.sum(-1), **CLOSE)  # rows no longer sum as the softmax's
    return out


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_type_returns_the_weights_that_multiply_v_after_dropout(variant):
    """Each type's eager function (the one `output_attentions` picks), in training mode with dropout 0.3: the weights
    it returns multiply V to its output and carry dropout's zeros and scaling (in eval mode the same call drops
    nothing, as transformers' eager function). Where the type has another function that takes dropout (SDPA:
    transformers' for dot product, the synthesizer's fold where it would run on a GPU), that function under the same
    seed gives the same output: on the CPU, SDPA with dropout runs PyTorch's math path, which draws its mask as
    `F.dropout` does."""
    core, x, query, key, value, mask = layer_and_inputs(variant)
    p, seed = 0.3, 5
    eager = core.attention_function("eager", True, p, x.device)
    out = _dropout_contract(core, x, query, key, value, mask, eager, p, seed)
    fused = core.attention_function("sdpa", False, p, torch.device("cuda"))  # what a GPU runs without the weights
    if fused is eager:  # talking heads and general bilinear: one function
        return
    torch.manual_seed(seed)
    with torch.no_grad():
        fused_out, none = call(fused, core, x, query, key, value, mask, dropout=p)
    assert none is None
    torch.testing.assert_close(fused_out, out, **CLOSE)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_softmax_agrees_with_float32(dtype):
    """The one softmax of every type: half-precision logits normalised in float32, returned in their dtype, within
    the half type's rounding of the float32 softmax of the same logits; float32 logits are overwritten only where
    asked (`in_place`) and autograd does not need them."""
    logits = torch.randn(2, 4, 7, 9, generator=torch.Generator().manual_seed(0)) * 8
    half = logits.to(dtype)
    weights = softmax_keys(half)
    assert weights.dtype == dtype
    eps = torch.finfo(dtype).eps  # one rounding of a weight <= 1 to the half type
    torch.testing.assert_close(weights.float(), torch.softmax(half.float(), dim=-1), atol=eps, rtol=eps)
    kept = logits.clone()
    torch.testing.assert_close(softmax_keys(kept), torch.softmax(logits, dim=-1), **CLOSE)
    torch.testing.assert_close(kept, logits, atol=0, rtol=0)  # not in place unless asked
    with torch.no_grad():
        softmax_keys(kept, in_place=True)
    torch.testing.assert_close(kept, torch.softmax(logits, dim=-1), **CLOSE)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("variant", ["dot_product", "talking_heads", "synth_mixture", "general_bilinear"])
def test_every_type_in_half_precision_agrees_with_float32(variant, dtype):
    """Each type's eager function on half-precision inputs: its weights (through the float32 softmax) within the
    half type's rounding of the same layer's float32 weights."""
    core, x, query, key, value, mask = layer_and_inputs(variant)
    fn = core.attention_function("eager", True, 0.0, x.device)
    with torch.no_grad():
        _, reference = call(fn, core, x, query, key, value, mask, output_attentions=True)
        half = [t if t is None else t.to(dtype) for t in (x, query, key, value, mask)]
        _, weights = call(fn, core.to(dtype), half[0], *half[1:], output_attentions=True)
    assert weights.dtype == dtype
    torch.testing.assert_close(weights.float(), reference, atol=2e-2, rtol=2e-2)
