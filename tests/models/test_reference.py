"""Independent references: each paper's formulas transcribed directly, as float64 einsums over weights read from the
model, against a BERT attention layer computed by the model (eager and SDPA implementations, padding and causal masks;
the synthesizers also left-padded with position ids, their tables read at those positions).

The transcriptions follow the papers, not our code paths: talking heads materialise the full per-pair
maps `P_l + D_x(x_i) + D_m(m_j)` (our code never does), mask after the pre-softmax map; the factorized dense
Synthesizer tiles with `repeat_interleave` / `repeat`; the mixture weights are `alpha = w + (1 - sum(w)) / C`;
general bilinear attention contracts the full-width query heads with the memory itself.
Every variant parameter is re-drawn at a scale where it matters, and each case checks that the reference itself moves
when those parameters move, so agreement to 1e-10 is not agreement between two things that ignore them.
"""

import pytest
import torch

import hf_attn_variants as hav
from conftest import TINY

TALKING_HEADS = dict(attention_type="talking_heads", talking_heads_num_key_heads=2, talking_heads_num_value_heads=8)
CASES = {
    "talking_heads": TALKING_HEADS,
    "talking_heads_square": dict(attention_type="talking_heads"),
    "talking_heads_pre_only": dict(
        TALKING_HEADS, talking_heads_num_value_heads=None, talking_heads_post_softmax=False
    ),
    "talking_heads_post_only": dict(TALKING_HEADS, talking_heads_num_key_heads=None, talking_heads_pre_softmax=False),
    **{f"talking_heads_{d}": dict(TALKING_HEADS, talking_heads_dynamic=[d]) for d in ("x2l", "m2l", "x2w", "m2w")},
    "talking_heads_dynamic": dict(TALKING_HEADS, talking_heads_dynamic=["x2l", "m2l", "x2w", "m2w"]),
    # projections narrower than the input (8 + 8 + 8 <= 32), as in the deep single-head twins
    "talking_heads_narrow": dict(TALKING_HEADS, talking_heads_num_value_heads=2, attention_head_size=4),
    "talking_heads_dynamic_post_only": dict(
        TALKING_HEADS,
        talking_heads_num_key_heads=None,
        talking_heads_pre_softmax=False,
        talking_heads_dynamic=["x2w", "m2w"],
    ),
    "synth_dense": dict(attention_type="synthesizer", synthesizer_components=["dense"]),
    "synth_random": dict(attention_type="synthesizer", synthesizer_components=["random"]),
    "synth_factorized_dense": dict(
        attention_type="synthesizer", synthesizer_components=["factorized_dense"], synthesizer_dense_factors=[4, 16]
    ),
    "synth_factorized_random": dict(
        attention_type="synthesizer", synthesizer_components=["factorized_random"], synthesizer_factorized_rank=3
    ),
    "synth_mixture": dict(
        attention_type="synthesizer",
        synthesizer_dense_factors=[4, 16],
        synthesizer_components=["dot_product", "dense", "random", "factorized_random", "factorized_dense"],
    ),
    "synth_mixture_unnormalized": dict(
        attention_type="synthesizer",
        synthesizer_mixture_normalize=False,
        synthesizer_components=["dot_product", "dense", "random"],
    ),
    "general_bilinear": dict(attention_type="general_bilinear"),
}
BATCH, SEQ = 3, 9


def _heads(x, weight, bias, heads):
    """x W^T + b split into heads: [b, n, heads, size]."""
    out = torch.einsum("bnd,od->bno", x, weight) + bias
    return out.view(*x.shape[:2], heads, -1)


def _dynamic(x, weight, rows, cols):
    """A dynamic projection D(x_i)[r, c] = (x_i W)[r * cols + c]: [b, n, rows, cols]."""
    return torch.einsum("bnd,de->bne", x, weight).view(*x.shape[:2], rows, cols)


def reference_talking_heads(layer, p, x, mask):
    """Shazeer et al. (2020), talking heads with dynamic maps: L = sum_k J (P_l + D_x + D_m); + mask; softmax; U = sum_h W (P_w + ...)."""
    cfg = layer.core.spec
    h_k, h, h_v = cfg.num_key_heads, cfg.num_heads, cfg.num_value_heads
    b, n = x.shape[:2]
    q = _heads(x, p["query.weight"], p["query.bias"], h_k)
    k = _heads(x, p["key.weight"], p["key.bias"], h_k)
    v = _heads(x, p["value.weight"], p["value.bias"], h_v)
    J = torch.einsum("bikd,bjkd->bijk", q, k) * cfg.key_head_size**-0.5  # [b, i, j, h_k]
    if cfg.pre_softmax:
        P = p["core.pre_softmax_proj"].expand(b, n, n, h_k, h)  # [b, i, j, h_k, h]: one map per (query, key) pair
        if "x2l" in cfg.dynamic:
            P = P + _dynamic(x, p["core.dynamic_x2l"], h_k, h)[:, :, None]
        if "m2l" in cfg.dynamic:
            P = P + _dynamic(x, p["core.dynamic_m2l"], h_k, h)[:, None, :]
        L = torch.einsum("bijk,bijkh->bijh", J, P)
    else:
        L = J
    L = L + mask[..., None]  # the mask after the map
    W = torch.softmax(L, dim=2)  # over the keys j
    if cfg.post_softmax:
        P = p["core.post_softmax_proj"].expand(b, n, n, h, h_v)
        if "x2w" in cfg.dynamic:
            P = P + _dynamic(x, p["core.dynamic_x2w"], h, h_v)[:, :, None]
        if "m2w" in cfg.dynamic:
            P = P + _dynamic(x, p["core.dynamic_m2w"], h, h_v)[:, None, :]
        U = torch.einsum("bijh,bijhv->bijv", W, P)
    else:
        U = W
    return torch.einsum("bijv,bjvd->bivd", U, v).reshape(b, n, -1)


def reference_synthesizer(layer, p, x, mask, positions=None):
    """Tay et al. (2020): Dense B = relu(x W1 + b1) W2 + b2; Random R; Factorized Dense (tiled A) * (tiled B);
    Factorized Random R1 R2^T; a mixture sum_c alpha_c S_c; + mask; softmax; times V. The tables are indexed by
    position: token i of row b at `positions[b, i]` (default: i)."""
    cfg = layer.core.spec
    h, d_h = cfg.num_heads, cfg.key_head_size
    b, n = x.shape[:2]
    pos = torch.arange(n).expand(b, n) if positions is None else positions  # [b, n]
    v = _heads(x, p["value.weight"], p["value.bias"], h)
    terms = []
    for comp in cfg.components:
        if comp == "dot_product":
            q = _heads(x, p["query.weight"], p["query.bias"], h)
            k = _heads(x, p["key.weight"], p["key.bias"], h)
            terms.append(torch.einsum("bihd,bjhd->bhij", q, k) * d_h**-0.5)
            continue
        if comp in ("dense", "factorized_dense"):
            hidden = torch.relu(_heads(x, p["core.synthesizer_hidden_weight"], p["core.synthesizer_hidden_bias"], h))
        if comp == "dense":
            w2, b2 = p["core.dense_weight"][:, :, pos], p["core.dense_bias"][:, 0, pos]  # [h, e, b, j], [h, b, j]
            terms.append(torch.einsum("bihe,hebj->bhij", hidden, w2) + torch.einsum("hbj->bhj", b2)[:, :, None, :])
        elif comp == "random":
            r = p["core.random_logits"][:, pos[:, :, None], pos[:, None, :]]  # [h, b, i, j]
            terms.append(torch.einsum("hbij->bhij", r))
        elif comp == "factorized_dense":
            a, bb = cfg.dense_factors
            A = torch.einsum("bihe,hea->bhia", hidden, p["core.factorized_dense_a"])
            B = torch.einsum("bihe,hec->bhic", hidden, p["core.factorized_dense_b"])
            tiled = A.repeat_interleave(bb, dim=-1) * B.repeat(1, 1, 1, a)  # [b, h, i, every position]
            terms.append(torch.take_along_dim(tiled, pos[:, None, None, :], dim=-1))
        else:  # factorized_random
            r1, r2 = p["core.factorized_random_r1"][:, pos], p["core.factorized_random_r2"][:, pos]  # [h, b, i, k]
            terms.append(torch.einsum("hbik,hbjk->bhij", r1, r2))
    if len(terms) == 1:
        logits = terms[0]
    else:
        w = p["core.mixture_weights"]
        alpha = w + (1 - w.sum()) / len(w) if cfg.mixture_normalize else w
        logits = sum(a * t for a, t in zip(alpha, terms))
    weights = torch.softmax(logits + mask[:, None], dim=-1)
    return torch.einsum("bhij,bjhd->bihd", weights, v).reshape(b, n, -1)


def reference_general_bilinear(layer, p, x, mask):
    """The talking-heads paper's general bilinear multihead attention (mesh-tensorflow's GeneralBilinearSelfAttention):
    logits[h, i, j] = (x_i W_q + b_q)[h] . m_j * d^-0.5 + mask, context[i, h] = sum_j softmax(logits)[h, i, j] m_j,
    with the memory m = x (self-attention): no key or value projection."""
    b, n, d = x.shape
    q = _heads(x, p["query.weight"], p["query.bias"], layer.core.spec.num_heads)  # [b, n, h, d]
    logits = torch.einsum("bihd,bjd->bhij", q, x) * d**-0.5 + mask[:, None]
    return torch.einsum("bhij,bjd->bihd", torch.softmax(logits, dim=-1), x).reshape(b, n, -1)


REFERENCES = {
    "talking_heads": reference_talking_heads,
    "synthesizer": reference_synthesizer,
    "general_bilinear": reference_general_bilinear,
}


def _model(case, implementation, causal):
    torch.manual_seed(0)
    # unpad=False: the layer sees the padded batch the transcriptions take (tests/models/test_unpadding.py shows that the
    # real tokens' outputs of the packed layout equal it)
    config = hav.VariantBertConfig(
        **{**TINY, **CASES[case], "num_hidden_layers": 1},
        is_decoder=causal,
        attn_implementation=implementation,
        unpad=False,
    )
    model = hav.VariantBertModel(config).double().eval()
    layer = model.encoder.layer[0].attention.self
    with torch.no_grad():  # every parameter at a scale where it matters: O(1) logits, dynamic maps no longer ~0
        for name, param in layer.named_parameters():
            param.copy_(torch.randn_like(param) * (0.2 if "dynamic" in name or not name.startswith("core.") else 1.0))
    return model


def _layer_input_output(model, layer, ids, keep, **inputs):
    """The input and output of `layer` when the model runs on `ids` with the attention mask `keep`."""
    seen = {}
    hook = layer.register_forward_hook(lambda module, args, out: seen.update(x=args[0], out=out[0]))
    with torch.no_grad():
        model(ids, attention_mask=keep.long(), **inputs)
    hook.remove()
    return seen["x"], seen["out"]


def _additive_mask(keep, causal):
    """-inf where key j is padding (or, `causal`, after query i), [b, i, j]."""
    allowed = keep[:, None, :].expand(BATCH, SEQ, SEQ)  # [b, i, j]
    if causal:
        allowed = allowed & torch.ones(SEQ, SEQ, dtype=torch.bool).tril()
    return torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, float("-inf"))


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("causal", [False, True], ids=["padding", "causal+padding"])
@pytest.mark.parametrize("case", list(CASES))
def test_attention_equals_paper_transcription(case, causal, implementation):
    model = _model(case, implementation, causal)
    layer = model.encoder.layer[0].attention.self
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, TINY["vocab_size"], (BATCH, SEQ), generator=g)
    keep = torch.ones(BATCH, SEQ, dtype=torch.bool)
    keep[1, -3:] = keep[2, -5:] = False  # right padding of two rows
    x, out = _layer_input_output(model, layer, ids, keep)

    mask = _additive_mask(keep, causal)
    reference = REFERENCES[CASES[case]["attention_type"]]
    params = {name: t.detach() for name, t in layer.named_parameters()}
    expected = reference(layer, params, x, mask)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)

    # the reference depends on the variant's own parameters: moving them moves it far beyond the tolerance
    own = "query." if case == "general_bilinear" else "core."  # general bilinear: the full-width query is its own
    moved = {name: t * 1.1 if name.startswith(own) else t for name, t in params.items()}
    assert (reference(layer, moved, x, mask) - expected).abs().max() > 1e-4


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("synth")])
def test_synthesizer_reads_its_tables_at_the_position_ids(case, implementation):
    """Left padding with position ids that count the real tokens (as `generate` gives them), in a causal decoder:
    each real token's row and column of the synthesizer's tables is its position id, not its index."""
    model = _model(case, implementation, causal=True)
    layer = model.encoder.layer[0].attention.self
    ids = torch.randint(1, TINY["vocab_size"], (BATCH, SEQ), generator=torch.Generator().manual_seed(2))
    keep = torch.ones(BATCH, SEQ, dtype=torch.bool)
    keep[1, :3] = keep[2, :5] = False  # left padding of two rows
    positions = (keep.long().cumsum(-1) - 1).clamp(min=0)
    x, out = _layer_input_output(model, layer, ids, keep, position_ids=positions)

    mask = _additive_mask(keep, causal=True)
    params = {name: t.detach() for name, t in layer.named_parameters()}
    expected = reference_synthesizer(layer, params, x, mask, positions)
    torch.testing.assert_close(out[keep], expected[keep], atol=1e-10, rtol=1e-10)  # a pad query sees no key
    # reading the tables at the indices instead moves the left-padded rows far beyond the tolerance
    assert (reference_synthesizer(layer, params, x, mask)[keep] - expected[keep]).abs().max() > 1e-4


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("talking_heads")])
def test_talking_heads_gradients_equal_paper_transcription(case):
    """Training differentiates our fused maps (per-query and per-key GEMMs, in-place accumulation): the gradients of
    the input and of every parameter of the layer equal those of the float64 transcription."""
    model = _model(case, "eager", causal=False).train()
    layer = model.encoder.layer[0].attention.self
    g = torch.Generator().manual_seed(2)
    x = torch.randn(BATCH, SEQ, TINY["hidden_size"], dtype=torch.float64, generator=g, requires_grad=True)
    cotangent = torch.randn(BATCH, SEQ, layer.core.spec.value_size, dtype=torch.float64, generator=g)
    keep = torch.ones(BATCH, SEQ, dtype=torch.bool)
    keep[1, -3:] = False
    additive = torch.zeros(BATCH, 1, 1, SEQ, dtype=torch.float64).masked_fill(~keep[:, None, None], float("-inf"))
    assert layer.core.spec.dropout == 0.0  # TINY: train mode is deterministic
    out = layer(x, attention_mask=additive)[0]
    params = dict(layer.named_parameters())
    ours = torch.autograd.grad((out * cotangent).sum(), [x, *params.values()])
    mask = additive[:, 0].expand(BATCH, SEQ, SEQ)
    expected = reference_talking_heads(layer, params, x, mask)
    reference = torch.autograd.grad((expected * cotangent).sum(), [x, *params.values()])
    for name, a, e in zip(["input", *params], ours, reference):
        torch.testing.assert_close(a, e, atol=1e-10, rtol=1e-10, msg=lambda m, name=name: f"{name}: {m}")
        if name != "key.bias":  # without m2l a key bias shifts every logit of a query alike: softmax ignores it
            assert e.abs().max() > 1e-6, f"{name}: the reference gradient is ~0, the comparison would be vacuous"


def test_general_bilinear_layout_and_size():
    """No key or value projection (the memory is both), a query of h full-width heads, an output projection from
    h*d: 2 h d^2 weights per layer, in BERT, ALBERT and T5 (without biases)."""
    h, d = TINY["num_attention_heads"], TINY["hidden_size"]
    bert = hav.VariantBertModel(hav.VariantBertConfig(**TINY, attention_type="general_bilinear"))
    attention = bert.encoder.layer[0].attention
    assert attention.self.key is None and attention.self.value is None
    assert attention.self.query.weight.shape == (h * d, d) and attention.output.dense.weight.shape == (d, h * d)
    albert = hav.VariantAlbertModel(hav.VariantAlbertConfig(**TINY, attention_type="general_bilinear"))
    layer = albert.encoder.albert_layer_groups[0].albert_layers[0].attention
    assert layer.key is None and layer.value is None and layer.dense.weight.shape == (d, h * d)
    t5 = hav.VariantT5Model(
        hav.VariantT5Config(
            d_model=d, num_heads=h, d_kv=8, num_layers=1, vocab_size=99, attention_type="general_bilinear"
        )
    )
    for attn in (t5.encoder.block[0].layer[0].SelfAttention, t5.decoder.block[0].layer[1].EncDecAttention):
        assert attn.k is None and attn.v is None
        assert sum(p.numel() for n, p in attn.named_parameters() if n in ("q.weight", "o.weight")) == 2 * h * d * d
    with pytest.raises(ValueError, match="full width"):
        hav.VariantBertModel(hav.VariantBertConfig(**TINY, attention_type="general_bilinear", attention_head_size=8))


def test_registry_matches_the_allowed_attention_types():
    assert tuple(hav.ATTENTION_CLASSES) == hav.ATTENTION_TYPES == tuple(hav.ATTENTION_REGISTRY)
    for name, cls in hav.ATTENTION_CLASSES.items():
        core = hav.VariantBertModel(hav.VariantBertConfig(**TINY, attention_type=name)).encoder.layer[0].attention
        assert type(core.self.core) is cls and issubclass(cls, hav.VariantAttentionCore)
        assert type(core.self.spec) is hav.ATTENTION_REGISTRY[name].spec and core.self.spec.attention_type == name
