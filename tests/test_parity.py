"""Function-preserving variants equal transformers' own BERT on the same weights (the strongest test we have).

The reference is transformers' BertModel / BertForMaskedLM / BertLMHeadModel and AlbertModel / AlbertForPreTraining /
AlbertForMaskedLM (3 layers from 2 groups of 2 shared layers), saved as an ordinary checkpoint and
warm-started into a variant with `from_pretrained(..., attention_type=...)`: the checkpoint lacks the variant's
parameters, so this also shows the function-preserving init survives `from_pretrained`. Each test has a perturbed
twin that must fail, so a variant path that was silently skipped would be caught.
"""

import pytest
import torch
import transformers

import hf_attn_variants as hav
from conftest import TINY, TINY_ALBERT, on_device

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

PAIRS = [
    ("BertModel", "VariantBertModel"),
    ("BertForMaskedLM", "VariantBertForMaskedLM"),
    ("BertLMHeadModel", "VariantBertLMHeadModel"),
    ("AlbertModel", "VariantAlbertModel"),
    ("AlbertForPreTraining", "VariantAlbertForPreTraining"),
    ("AlbertForMaskedLM", "VariantAlbertForMaskedLM"),
]


def _inputs():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, TINY["vocab_size"], (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    token_type_ids = (torch.arange(9) > 4).long().expand(3, -1)
    return on_device(dict(input_ids=ids, attention_mask=mask, token_type_ids=token_type_ids))


def _reference(tmp_path, ref_name, attn_implementation):
    torch.manual_seed(0)
    if ref_name.startswith("Albert"):
        config = transformers.AlbertConfig(**TINY_ALBERT)
    else:
        config = transformers.BertConfig(**TINY, is_decoder=ref_name == "BertLMHeadModel")
    ref = getattr(transformers, ref_name)(config)
    # give every bias and LayerNorm a non-trivial value, so a parameter loaded into the wrong place shows
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.02 * torch.randn_like(p))
    ref.save_pretrained(tmp_path / "ref")
    ref = getattr(transformers, ref_name).from_pretrained(tmp_path / "ref", attn_implementation=attn_implementation)
    return on_device(ref.eval())


def _compare(ref_out, out, check_attentions=True):
    """Max |difference| of every output the reference gives (logits, pooled output, each hidden state, ...)."""
    diffs = {}
    for key, ref_value in ref_out.items():
        if key == "attentions" and not check_attentions:
            continue
        if isinstance(ref_value, torch.Tensor):
            diffs[key] = (ref_value - out[key]).abs().max().item()
        elif isinstance(ref_value, tuple):
            for i, (a, b) in enumerate(zip(ref_value, out[key], strict=True)):
                diffs[f"{key}[{i}]"] = (a - b).abs().max().item()
    return diffs


@pytest.mark.parametrize("warm", list(WARM_STARTS))
@pytest.mark.parametrize("ref_name,ours_name", PAIRS)
def test_warm_start_equals_transformers_bert(tmp_path, warm, ref_name, ours_name):
    ref = _reference(tmp_path, ref_name, "eager")
    ours = getattr(hav, ours_name).from_pretrained(tmp_path / "ref", attn_implementation="eager", **WARM_STARTS[warm])
    ours = on_device(ours.eval())
    assert ours.config.attention_type == WARM_STARTS[warm]["attention_type"]
    inputs = _inputs()
    with torch.no_grad():
        ref_out = ref(**inputs, output_hidden_states=True, output_attentions=True)
        out = ours(**inputs, output_hidden_states=True, output_attentions=True)
    layers = ref.config.num_hidden_layers * getattr(ref.config, "inner_group_num", 1)
    assert len(out.hidden_states) == len(ref_out.hidden_states) == layers + 1
    assert len(out.attentions) == layers and out.attentions[0].shape == (3, TINY["num_attention_heads"], 9, 9)
    diffs = _compare(ref_out, out)
    assert max(diffs.values()) < 1e-5, diffs

    # non-vacuity: the same comparison with the variant's own parameters perturbed must fail
    core = next(m for m in ours.modules() if isinstance(m, hav.VariantAttentionCore))
    extra = list(core.parameters())
    if warm == "dot_product":
        assert extra == []
        return
    with torch.no_grad():
        if hasattr(core, "mixture_weights"):
            core.mixture_weights[1:] += 0.3
            if "dense_weight" in dict(core.named_parameters()):
                core.dense_weight.normal_(std=1.0)
        else:
            for p in extra:
                p.add_(0.1 * torch.randn_like(p))
        out = ours(**inputs, output_hidden_states=True, output_attentions=True)
    assert max(_compare(ref_out, out).values()) > 1e-3


@pytest.mark.parametrize("ref_name,ours_name", PAIRS)
def test_dot_product_sdpa_equals_transformers_sdpa(tmp_path, ref_name, ours_name):
    """Our dot-product path through ALL_ATTENTION_FUNCTIONS (SDPA) equals transformers' BERT on SDPA."""
    ref = _reference(tmp_path, ref_name, "sdpa")
    ours = on_device(getattr(hav, ours_name).from_pretrained(tmp_path / "ref").eval())
    assert ours.config._attn_implementation == "sdpa"
    inputs = _inputs()
    with torch.no_grad():
        diffs = _compare(ref(**inputs, output_hidden_states=True), ours(**inputs, output_hidden_states=True), False)
    assert max(diffs.values()) < 1e-5, diffs


def test_identity_talking_heads_grad_equals_transformers(tmp_path):
    """Training step parity: the gradients of the shared parameters equal BERT's (the maps are in the graph)."""
    ref = _reference(tmp_path, "BertForMaskedLM", "eager").train()
    ours = on_device(hav.VariantBertForMaskedLM.from_pretrained(
        tmp_path / "ref", attention_type="talking_heads", talking_heads_init="identity", attn_implementation="eager"
    ).train())
    inputs = _inputs()
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
@pytest.mark.parametrize("ref_name,ours_name", [pair for pair in PAIRS if pair[0].endswith(("MaskedLM", "PreTraining"))])
def test_sparse_prediction_equals_transformers(tmp_path, warm, ref_name, ours_name):
    """With `sparse_prediction`: no labels, the full logits of transformers' head; labels, its loss and its logits at
    the labelled positions (row-major), on the same weights."""
    ref = _reference(tmp_path, ref_name, "eager")
    ours = getattr(hav, ours_name).from_pretrained(
        tmp_path / "ref", attn_implementation="eager", sparse_prediction=True, **WARM_STARTS[warm]
    )
    ours = on_device(ours.eval())
    logits_name = "prediction_logits" if ref_name.endswith("PreTraining") else "logits"
    inputs = _inputs()
    with torch.no_grad():
        ref_out, out = ref(**inputs), ours(**inputs)
    assert out[logits_name].shape == (3, 9, TINY["vocab_size"])
    diffs = _compare(ref_out, out)
    assert max(diffs.values()) < 1e-5, diffs

    labels = inputs["input_ids"].masked_fill(torch.rand(3, 9, generator=torch.Generator().manual_seed(2)) > 0.4, -100)
    inputs["labels"] = labels = on_device(labels.masked_fill(inputs["attention_mask"] == 0, -100))
    if ref_name == "AlbertForPreTraining":
        inputs["sentence_order_label"] = on_device(torch.tensor([0, 1, 1]))
    with torch.no_grad():
        ref_out, out = ref(**inputs), ours(**inputs)
    scored = labels != -100
    assert out[logits_name].shape == (scored.sum().item(), TINY["vocab_size"])
    assert (out[logits_name] - ref_out[logits_name][scored]).abs().max() < 1e-5
    assert (out.loss - ref_out.loss).abs() < 1e-5
    # non-vacuity: the same rows in another order fail the comparison
    assert (out[logits_name].flip(0) - ref_out[logits_name][scored]).abs().max() > 1e-3
