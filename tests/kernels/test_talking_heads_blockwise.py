"""The blockwise talking-heads core (`attention_algorithm="blockwise"`): the same function and gradients as the eager
formula, no n x m tensor kept for backward, chosen through the config, and long sequences that train.

Function level: `talking_heads_blockwise` against `talking_heads_reference` (einsum, term by term) in float64 and
float32, every input's gradient. Model level: each family's model with the blockwise core against the same model with
the eager core (transformers-style masks, T5's position bias, causal decoders, cross-attention).
"""

import pytest
import torch

import hf_attn_variants as hav
from conftest import build, head_inputs, make_config
from hf_attn_variants.models import talking_heads_blockwise as talking_heads_blockwise_module
from hf_attn_variants.models.talking_heads_blockwise import (
    BlockwiseTalkingHeads,
    _dropout_keep,
    block_rows,
    runs_inference_core,
    talking_heads_blockwise,
    talking_heads_inference,
    talking_heads_reference,
)

# name -> the formula's arguments: heads (h_k, h, h_v), lengths (n, m), maps, bias, causal
CASES = {
    "both_maps": {},
    "pre_only": dict(heads=(4, 4, 4), post=False),
    "post_only": dict(heads=(4, 4, 3), pre=False),
    "no_maps": dict(heads=(3, 3, 3), pre=False, post=False),
    "hk_h_hv_differ": dict(heads=(2, 4, 3)),
    "x2l": dict(dynamic=("x2l",)),
    "m2l": dict(dynamic=("m2l",)),
    "x2w": dict(dynamic=("x2w",)),
    "m2w": dict(dynamic=("m2w",)),
    "all_dynamic": dict(heads=(2, 4, 3), dynamic=("x2l", "m2l", "x2w", "m2w")),
    "padding_mask": dict(bias="padding"),
    "causal": dict(lengths=(23, 23), causal=True),
    "causal_last_rows": dict(lengths=(5, 23), causal=True, bias="position"),  # a decoder with a cache
    "one_query": dict(lengths=(1, 23), causal=True),
    "position_bias": dict(bias="position"),
    "cross_attention": dict(lengths=(11, 29), bias="padding", dynamic=("m2l", "x2w")),
    "odd_lengths": dict(lengths=(17, 13), bias="position", dynamic=("x2l", "m2w")),
}


def formula_inputs(case: dict, dtype=torch.float64, seed=0) -> dict:
    """Random arguments of the formula for one CASES row, each a leaf that requires a gradient (masks excepted)."""
    g = torch.Generator().manual_seed(seed)
    h_k, h, h_v = case.get("heads", (3, 4, 2))
    n, m = case.get("lengths", (19, 23))
    b, d_k, d_v = 2, 5, 6

    def leaf(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, dtype=dtype) * scale).requires_grad_()

    args = dict(query=leaf(b, h_k, n, d_k), key=leaf(b, h_k, m, d_k), value=leaf(b, h_v, m, d_v))
    args["pre_proj"] = leaf(h_k, h) if case.get("pre", True) else None
    args["post_proj"] = leaf(h, h_v) if case.get("post", True) else None
    shapes = dict(x2l=(b, n, h_k, h), m2l=(b, m, h_k, h), x2w=(b, n, h, h_v), m2w=(b, m, h, h_v))
    for name, shape in shapes.items():
        args[name] = leaf(*shape, scale=0.3) if name in case.get("dynamic", ()) else None
    if case.get("bias") == "padding":  # row 0 ignores its last 5 keys, as transformers' additive masks do
        mask = torch.zeros(b, 1, 1, m, dtype=dtype)
        mask[0, ..., -5:] = torch.finfo(dtype).min
        args["bias"] = mask
    elif case.get("bias") == "position":  # T5's learned bias, shared by the batch
        args["bias"] = leaf(1, h, n, m)
    else:
        args["bias"] = None
    return args


def outputs_and_grads(fn, args: dict, causal: bool, grad_seed=1, **kwargs):
    out = fn(**args, scaling=0.4, causal=causal, **kwargs)
    leaves = {name: t for name, t in args.items() if t is not None and t.requires_grad}
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed), dtype=out.dtype)
    return out, dict(zip(leaves, torch.autograd.grad(out, list(leaves.values()), grad_out)))


def assert_close_everywhere(expected, actual, atol, rtol):
    (out_e, grads_e), (out_a, grads_a) = expected, actual
    torch.testing.assert_close(out_a, out_e, atol=atol, rtol=rtol)
    assert grads_a.keys() == grads_e.keys()
    for name in grads_e:
        torch.testing.assert_close(grads_a[name], grads_e[name], atol=atol, rtol=rtol, msg=f"gradient of {name}")


@pytest.mark.parametrize("block_size", [1, 4, 7, None])
@pytest.mark.parametrize("case", list(CASES))
def test_blockwise_equals_the_reference_in_float64(case, block_size):
    """To float64 rounding: outputs and the gradient of every input, whatever the block size (1 row, blocks that do
    not divide n, one block)."""
    args, causal = formula_inputs(CASES[case]), CASES[case].get("causal", False)
    expected = outputs_and_grads(talking_heads_reference, args, causal)
    actual = outputs_and_grads(talking_heads_blockwise, args, causal, block_size=block_size)
    assert_close_everywhere(expected, actual, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("case", list(CASES))
def test_blockwise_equals_the_reference_in_float32(case):
    args, causal = formula_inputs(CASES[case], dtype=torch.float32), CASES[case].get("causal", False)
    expected = outputs_and_grads(talking_heads_reference, args, causal)
    actual = outputs_and_grads(talking_heads_blockwise, args, causal, block_size=5)
    assert_close_everywhere(expected, actual, atol=1e-5, rtol=1e-5)


INFERENCE_CASES = [name for name, case in CASES.items() if not case.get("dynamic")]  # the core has no dynamic maps
DYNAMIC = ("x2l", "m2l", "x2w", "m2w")


def _static_arguments(args: dict) -> dict:
    """The formula's arguments without gradients (detached copies) and without the dynamic maps."""
    return {name: None if t is None else t.detach().clone() for name, t in args.items() if name not in DYNAMIC}


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("block_size", [1, 4, 7, None])
@pytest.mark.parametrize("case", INFERENCE_CASES)
def test_the_inference_core_equals_the_reference(case, block_size, dtype, tolerance):
    """`talking_heads_inference` (the blockwise algorithm without gradients) gives the reference's output whatever
    the block size, with its two buffers reused by blocks of different shapes (causal blocks see fewer keys, the
    last block fewer rows)."""
    args, causal = _static_arguments(formula_inputs(CASES[case], dtype=dtype)), CASES[case].get("causal", False)
    expected = talking_heads_reference(**args, scaling=0.4, causal=causal)
    with torch.no_grad():
        actual = talking_heads_inference(**args, scaling=0.4, causal=causal, block_size=block_size)
    torch.testing.assert_close(actual, expected, atol=tolerance, rtol=tolerance)


def test_the_inference_core_runs_only_where_nothing_needs_what_it_leaves_out():
    """No gradient to record, no dropout, no dynamic map, the CPU: anything else takes the autograd core."""
    args = formula_inputs(CASES["all_dynamic"])  # leaves that require gradients
    query, key, value = args["query"], args["key"], args["value"]
    static = {name: args[name] for name in ("bias", "pre_proj", "post_proj")}
    assert not runs_inference_core(query, key, value, static, 0.0)  # gradients are recorded
    with torch.no_grad():
        assert runs_inference_core(query, key, value, static, 0.0)
        assert not runs_inference_core(query, key, value, static, 0.1)
        assert not runs_inference_core(query, key, value, {**static, "m2w": args["m2w"]}, 0.0)
        assert not runs_inference_core(query.to("meta"), key, value, static, 0.0)  # another device
    detached = {name: t.detach() for name, t in static.items() if t is not None}
    assert runs_inference_core(query.detach(), key.detach(), value.detach(), detached, 0.0)  # grad mode, no leaf


@pytest.mark.parametrize("case", ["both_maps", "hk_h_hv_differ", "position_bias"])
def test_key_lengths_give_the_padding_mask_without_reading_the_padded_keys(case):
    """`key_lengths` (row 0 sees its first m - 5 keys) gives what the padding mask gives: in the autograd core with
    every gradient, and in the inference core without reading the padded keys at all (NaN there changes nothing)."""
    args = formula_inputs(CASES[case])
    m = args["key"].shape[2]
    padding = torch.zeros(2, 1, 1, m, dtype=torch.float64)
    padding[0, ..., m - 5 :] = torch.finfo(torch.float64).min

    def padded_reference(bias=None, **kwargs):
        return talking_heads_reference(bias=padding if bias is None else bias + padding, **kwargs)

    expected = outputs_and_grads(padded_reference, args, False)
    actual = outputs_and_grads(talking_heads_blockwise, args, False, key_lengths=[m - 5, m], block_size=4)
    assert_close_everywhere(expected, actual, atol=1e-10, rtol=1e-10)
    poisoned = _static_arguments(args)
    poisoned["key"][0, :, m - 5 :] = poisoned["value"][0, :, m - 5 :] = float("nan")
    with torch.no_grad():
        out = talking_heads_blockwise(**poisoned, scaling=0.4, key_lengths=[m - 5, m], block_size=4)
    torch.testing.assert_close(out, expected[0].detach(), atol=1e-10, rtol=1e-10)


def test_a_wrong_map_entry_fails_the_comparison():
    """Non-vacuity: 1e-3 on one entry of P_w moves the outputs and gradients far past the float64 tolerance."""
    args = formula_inputs(CASES["all_dynamic"])
    expected = outputs_and_grads(talking_heads_reference, args, False)
    with torch.no_grad():
        args["post_proj"][1, 2] += 1e-3
    actual = outputs_and_grads(talking_heads_blockwise, args, False, block_size=4)
    with pytest.raises(AssertionError):
        assert_close_everywhere(expected, actual, atol=1e-10, rtol=1e-10)


def test_dropout_masks_are_reproducible_and_match_the_reference():
    """Each block draws its mask from (seed, block): the reference with those masks gives the same output and
    gradients, the seed comes from torch's generator (manual_seed reproduces a run), and about p of U is dropped."""
    p, block = 0.3, 4
    args = formula_inputs(CASES["all_dynamic"])
    torch.manual_seed(5)
    seed = int(torch.randint(0, 2**62, ()))  # what talking_heads_blockwise draws first after manual_seed(5)
    b, h_v, n, m = args["value"].shape[0], args["value"].shape[1], args["query"].shape[2], args["key"].shape[2]
    keep = torch.cat(
        [
            _dropout_keep((b, h_v, min(block, n - start), m), p, seed, i, "cpu")
            for i, start in enumerate(range(0, n, block))
        ],
        dim=2,
    )
    assert 0.2 < (keep == 0).double().mean() < 0.4 and torch.all((keep == 0) | (keep == 1))
    mask = keep.double() / (1 - p)
    expected = outputs_and_grads(talking_heads_reference, args, False, dropout_mask=mask)
    torch.manual_seed(5)
    actual = outputs_and_grads(talking_heads_blockwise, args, False, dropout=p, block_size=block)
    assert_close_everywhere(expected, actual, atol=1e-10, rtol=1e-10)
    torch.manual_seed(6)
    other = talking_heads_blockwise(**args, scaling=0.4, dropout=p, block_size=block)
    assert not torch.allclose(other, actual[0])  # another seed, another mask


def test_no_n_by_m_tensor_is_saved_for_backward():
    """What autograd keeps of the blockwise core is its inputs: no tensor of even n x m elements (the eager formula
    keeps several of b x h x n x m)."""
    args = formula_inputs(dict(heads=(4, 4, 4), lengths=(64, 64), dynamic=("x2l", "m2w")), dtype=torch.float32)
    n, m = 64, 64
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        talking_heads_blockwise(**args, scaling=0.4, block_size=16)
    assert saved and max(t.numel() for t in saved) < n * m
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        talking_heads_reference(**args, scaling=0.4)
    assert max(t.numel() for t in saved) >= 2 * 4 * n * m  # the check sees them where they are


def test_block_rows_keep_a_block_near_the_budget():
    assert block_rows(8, 12, 512, 512) == max(16, (1 << 20) // (8 * 12 * 512))
    assert block_rows(1, 2, 10, 10) == 10  # never more rows than the queries
    assert block_rows(1, 2, 100, 100, block_size=7) == 7


def test_backward_is_once_differentiable():
    args = formula_inputs(CASES["both_maps"])
    out = BlockwiseTalkingHeads.apply(
        *(args[k] for k in ("query", "key", "value", "bias", "pre_proj", "post_proj", "x2l", "m2l", "x2w", "m2w")),
        0.4,
        False,
        0.0,
        0,
        4,
    )
    (grad,) = torch.autograd.grad(out.sum(), args["query"], create_graph=True)
    with pytest.raises(RuntimeError):
        grad.sum().backward()


# ------------------------------------------------------------------------------------------------------ model level
TH_VARIANTS = ["talking_heads", "talking_heads_hk_hv", "talking_heads_pre_only", "talking_heads_dynamic"]
HEADS = [
    "VariantBertForMaskedLM",
    "VariantBertLMHeadModel",
    "VariantAlbertForMaskedLM",
    "VariantT5ForConditionalGeneration",
]


def sharpened(model):
    """`model` with every weight moved by N(0, 0.2) (the same draw for the same architecture): at init the queries
    and keys are so small that the softmax is near uniform and the logits map hardly matters."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return model


def loss_and_grads(model, inputs):
    model.train()
    model.zero_grad()
    loss = model(**inputs).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("variant", TH_VARIANTS)
@pytest.mark.parametrize("head", HEADS)
def test_models_train_the_same_with_the_blockwise_core(head, variant):
    """Loss and every parameter's gradient, in float64 (in float32, weights moved this far off their init make the
    dynamic maps' logits so large that rounding alone moves ALBERT's shared-layer gradients by 5e-5 of their scale;
    the float32 comparison is the function-level one above): padding masks (BERT, ALBERT, T5's encoder), causal
    decoders (BERT's LM head, T5's decoder), T5's position bias and cross-attention. A 1e-3 change of one map entry
    fails it."""
    inputs = head_inputs(head, seq=9)
    eager = sharpened(build(head, variant, attention_algorithm="eager")).double()
    blockwise = sharpened(build(head, variant, attention_algorithm="blockwise")).double()
    expected, actual = loss_and_grads(eager, inputs), loss_and_grads(blockwise, inputs)
    torch.testing.assert_close(actual[0], expected[0], atol=1e-10, rtol=1e-10)
    assert actual[1].keys() == expected[1].keys()
    tolerance = {
        name: dict(atol=1e-10 * max(1.0, grad.abs().max().item()), rtol=1e-8) for name, grad in expected[1].items()
    }
    for name, grad in expected[1].items():
        torch.testing.assert_close(actual[1][name], grad, **tolerance[name], msg=name)
    proj = next(p for name, p in blockwise.named_parameters() if name.endswith("pre_softmax_proj"))
    with torch.no_grad():
        proj[0, 0] += 1e-3
    perturbed = loss_and_grads(blockwise, inputs)
    assert any(not torch.allclose(perturbed[1][name], grad, **tolerance[name]) for name, grad in expected[1].items())


def test_auto_takes_the_blockwise_core_to_train_and_for_inference_on_the_cpu(monkeypatch):
    from hf_attn_variants.models import attention_variants

    calls, cores = [], []
    monkeypatch.setitem(
        attention_variants.TALKING_HEADS_ALGORITHMS,
        "blockwise",
        lambda *args, **kwargs: calls.append(1) or talking_heads_blockwise(*args, **kwargs),
    )
    monkeypatch.setattr(
        talking_heads_blockwise_module,
        "talking_heads_inference",
        lambda *args, **kwargs: cores.append(1) or talking_heads_inference(*args, **kwargs),
    )
    # attention_algorithm="auto", the default; the padded batch: one attention call per layer (packed, one per length)
    model = build("VariantBertModel", "talking_heads", unpad=False)
    inputs = head_inputs("VariantBertModel")
    model.train()
    model(**inputs)
    assert len(calls) == model.config.num_hidden_layers and not cores
    with torch.no_grad():
        model(**inputs)  # inference on the CPU: the blockwise algorithm's inference core
    assert len(calls) == 2 * len(cores) == 2 * model.config.num_hidden_layers
    model.eval()
    weights = model(**inputs, output_attentions=True).attentions  # the weights need the eager path
    assert len(calls) == 2 * model.config.num_hidden_layers and weights[0].shape[-1] == inputs["input_ids"].shape[1]


def test_an_algorithm_for_a_type_that_has_none_is_refused_by_name():
    with pytest.raises(ValueError, match="attention_algorithm"):
        hav.VariantBertModel(make_config("dot_product", attention_algorithm="blockwise"))
    with pytest.raises(ValueError, match="attention_algorithm.*'fast'"):
        hav.VariantBertModel(make_config("talking_heads", attention_algorithm="fast"))
    # T5 with talking heads in the encoder only: the field applies there
    hav.VariantT5Model(
        make_config("dot_product", "t5", encoder_attention_type="talking_heads", attention_algorithm="blockwise")
    )


def test_t5_with_talking_heads_trains_at_4096_tokens():
    """Item 4 of the kernel issue: a small T5 with talking heads takes training steps on a 4096-token input with the
    blockwise core (the eager core would keep four [1, 4, 4096, 4096] float32 tensors per layer, 1 GiB): the loss is
    finite, the position bias gets its gradient and two steps of SGD lower the loss on the same batch."""
    torch.manual_seed(0)
    config = make_config(
        "talking_heads",
        "t5",
        num_layers=1,
        num_decoder_layers=1,
        d_model=16,
        d_kv=4,
        d_ff=32,
        num_heads=4,
        attention_algorithm="blockwise",
        relative_attention_max_distance=128,
        relative_attention_num_buckets=16,
    )
    model = hav.VariantT5ForConditionalGeneration(config).train()
    ids = torch.randint(2, config.vocab_size, (1, 4096))
    labels = torch.randint(2, config.vocab_size, (1, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        bias = model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight
        assert torch.isfinite(loss) and bias.grad.abs().sum() > 0
        losses.append(loss.item())
        optimizer.step()
    assert losses[2] < losses[0]


@pytest.mark.parametrize("head", ["VariantBertModel", "VariantAlbertModel"])
def test_bert_and_albert_train_at_their_maximum_positions(head):
    """All 512 positions, with every dynamic map: finite outputs and gradients for the variant's parameters."""
    config_overrides = dict(max_position_embeddings=512, attention_algorithm="blockwise")
    model = build(head, "talking_heads_dynamic", **config_overrides).train()
    ids = torch.randint(1, 99, (2, 512))
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    out.pow(2).mean().backward()
    assert torch.isfinite(out).all()
    attention = {name: p for name, p in model.named_parameters() if ".core." in name}
    assert attention and all(p.grad is not None and torch.isfinite(p.grad).all() for p in attention.values())
