"""bertviz's `head_view` and `model_view` on our models, as a bertviz user calls them (docs/visualize.md): the
attentions of `output_attentions=True` (BERT and ALBERT: `attention=`; T5: `encoder_attention=`,
`decoder_attention=`, `cross_attention=`) with `html_action="return"`. The page bertviz returns embeds, as its
parameters, exactly the weights our model returned: every layer and head of every place."""

import json
import re

import pytest

bertviz = pytest.importorskip("bertviz")

import torch  # noqa: E402

from conftest import build, encoder_inputs, head_inputs  # noqa: E402

LAYERS = {"VariantAlbertForMaskedLM": 6}  # the tiny configs: 2 layers (per stack); ALBERT: one per use of a layer
VIEWS = {"head_view": bertviz.head_view, "model_view": bertviz.model_view}
# (head, variant): a talking-heads (h_v = 8 value heads: the weights that multiply V) and a synthesizer model of every
# family; ALBERT's attentions are one per use of a shared layer (3 layers of 2 sublayers from 2 groups)
CASES = [
    ("VariantBertForMaskedLM", "talking_heads_hk_hv"),
    ("VariantBertForMaskedLM", "synth_mixture"),
    ("VariantAlbertForMaskedLM", "talking_heads"),
    ("VariantAlbertForMaskedLM", "synth_random"),
    ("VariantT5ForConditionalGeneration", "talking_heads"),
    ("VariantT5ForConditionalGeneration", "synth_mixture"),
]


def _embedded(html) -> dict[str, list]:
    """The attention bertviz's page draws: its parameters (the JSON its script is given), by view name."""
    params = json.loads(re.search(r"const params = (\{.*?\}); // HACK", html.data).group(1))
    return {entry["name"]: entry for entry in params["attention"]}


def _tokens(ids) -> list[str]:
    return [f"tok{i}" for i in ids[0].tolist()]


def _bertviz_arguments(head, variant):
    """The model's attentions for one unpadded row, as bertviz's keyword arguments, and what each view must embed
    (name -> the stacked [layers, heads, n, m] weights)."""
    model = build(head, variant)
    if head.startswith("VariantT5"):
        ids, _ = encoder_inputs()
        ids, decoder_ids = ids[:1], model._shift_right(ids[:1])
        with torch.no_grad():
            out = model(input_ids=ids, decoder_input_ids=decoder_ids, output_attentions=True)
        kwargs = dict(
            encoder_attention=out.encoder_attentions,
            decoder_attention=out.decoder_attentions,
            cross_attention=out.cross_attentions,
            encoder_tokens=_tokens(ids),
            decoder_tokens=_tokens(decoder_ids),
        )
        expected = {
            "Encoder": out.encoder_attentions,
            "Decoder": out.decoder_attentions,
            "Cross": out.cross_attentions,
        }
    else:
        ids = head_inputs(head)["input_ids"][:1]
        with torch.no_grad():
            out = model(input_ids=ids, output_attentions=True)
        kwargs = dict(attention=out.attentions, tokens=_tokens(ids))
        expected = {None: out.attentions}
    return kwargs, {name: torch.cat(attentions) for name, attentions in expected.items()}


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize(("head", "variant"), CASES, ids=[f"{h}-{v}" for h, v in CASES])
def test_bertviz_page_embeds_our_attention(head, variant, view):
    kwargs, expected = _bertviz_arguments(head, variant)
    html = VIEWS[view](**kwargs, html_action="return")
    embedded = _embedded(html)
    assert list(embedded) == list(expected)
    for name, weights in expected.items():
        assert weights.shape[0] == LAYERS.get(head, 2)  # one entry per layer
        torch.testing.assert_close(torch.tensor(embedded[name]["attn"]), weights)
        assert weights.std(dim=1).max() > 1e-3  # the heads differ: a view of one head repeated would not pass
    assert "require.min.js" in html.data  # the page loads require.js, d3 and jQuery from a CDN (docs/visualize.md)
