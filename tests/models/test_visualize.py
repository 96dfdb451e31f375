"""`hf_attn_variants.visualize` and `hf-attn-variants draw`: the matrices it reads are the model's (talking heads'
P_l/P_w, each synthesizer component's logits, the mixture weights, the softmax weights of `output_attentions`), the
figures show them, and PNGs are written for every family and attention type."""

import sys

import matplotlib
import numpy as np
import pytest
import torch
from transformers import BertTokenizer

from conftest import TINY, build, encoder_inputs
from hf_attn_variants import cli
from hf_attn_variants.visualize import (
    attention_maps,
    draw_attention_maps,
    plot_mixture,
    plot_synthesizer,
    plot_talking_heads,
)

matplotlib.use("Agg")

HEADS = {
    "bert": "VariantBertForMaskedLM",
    "albert": "VariantAlbertForMaskedLM",
    "t5": "VariantT5ForConditionalGeneration",
}
# family -> the places of its talking-heads maps: TINY_ALBERT runs 3 layers on 2 groups of 2 shared sublayers
TALKING_HEADS_PLACES = {
    "bert": ["layer 0", "layer 1"],
    "albert": [
        "layers 0-1 sublayer 0 (one shared layer)",
        "layers 0-1 sublayer 1 (one shared layer)",
        "layer 2 sublayer 0",
        "layer 2 sublayer 1",
    ],
    "t5": ["encoder layer 0 self-attention", "encoder layer 1 self-attention"]
    + [f"decoder layer {i} {kind}-attention" for i in (0, 1) for kind in ("self", "cross")],
}
PNG = b"\x89PNG\r\n\x1a\n"


def _cores(model, attention_type):
    return [m for m in model.modules() if type(m).__name__ == attention_type]


def _drawn_arrays(figure):
    """The arrays of a figure's heatmaps, in axes order (axes without one are skipped)."""
    return [np.asarray(ax.images[0].get_array()) for ax in figure.axes if ax.images]


def _inputs(family, seq=7):
    """One row, unpadded (a T5 one ends in <eos>)."""
    if family == "t5":
        ids, _ = encoder_inputs(seq=seq)
        return {"input_ids": ids[:1]}
    return {"input_ids": torch.randint(5, TINY["vocab_size"], (1, seq), generator=torch.Generator().manual_seed(0))}


def _tokenizer():
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = ["in", "the", "beginning", "god", "created", "heaven", "and", "earth", "."]
    fillers = [f"w{i}" for i in range(TINY["vocab_size"] - len(specials) - len(words))]
    return BertTokenizer(vocab={token: i for i, token in enumerate(specials + words + fillers)})


@pytest.mark.parametrize("family", list(HEADS))
def test_identity_talking_heads_are_drawn_as_the_identity(family):
    model = build(HEADS[family], "talking_heads", talking_heads_init="identity")
    maps = attention_maps(model)
    assert [m.place for m in maps] == TALKING_HEADS_PLACES[family]
    figure = plot_talking_heads(maps)
    drawn = _drawn_arrays(figure)
    assert len(drawn) == 2 * len(maps)  # P_l and P_w of every layer
    for array in drawn:
        np.testing.assert_array_equal(array, np.eye(4))


def test_talking_heads_maps_are_the_models_parameters():
    """Set maps (h_k=2, h=4, h_v=8, so P_l and P_w are told apart by shape) come back and are drawn as set; the
    colour scale is symmetric about 0."""
    model = build("VariantBertForMaskedLM", "talking_heads_hk_hv")
    layer = _cores(model, "TalkingHeadsAttention")[1]
    with torch.no_grad():
        layer.pre_softmax_proj.copy_(torch.arange(8.0).view(2, 4) - 3.0)
        layer.post_softmax_proj.copy_(torch.linspace(-2, 1, 32).view(4, 8))
    maps = attention_maps(model)
    np.testing.assert_array_equal(maps[1].matrices["P_l"], layer.pre_softmax_proj.detach().numpy())
    np.testing.assert_array_equal(maps[1].matrices["P_w"], layer.post_softmax_proj.detach().numpy())
    figure = plot_talking_heads(maps)
    drawn = _drawn_arrays(figure)
    np.testing.assert_array_equal(drawn[2], layer.pre_softmax_proj.detach().numpy())
    np.testing.assert_array_equal(drawn[3], layer.post_softmax_proj.detach().numpy())
    assert figure.axes[0].images[0].get_clim() == (-4.0, 4.0)  # max |value| of the figure, centred at 0


def test_pre_softmax_only_draws_no_P_w():
    maps = attention_maps(build("VariantBertForMaskedLM", "talking_heads_pre_only"))
    assert all(list(m.matrices) == ["P_l"] for m in maps)
    assert len(_drawn_arrays(plot_talking_heads(maps))) == len(maps)


@pytest.mark.parametrize("variant", ["synth_random", "synth_factorized_random", "synth_mixture_unnormalized"])
def test_random_synthesizer_maps_without_an_input(variant):
    """Input-free components are the parameters sliced to `length` (Factorized Random: R1 R2^T); the mixture
    weights are the model's alphas."""
    model = build("VariantBertForMaskedLM", variant)
    core = _cores(model, "SynthesizerAttention")[0]
    with torch.no_grad():
        expected = {}
        if hasattr(core, "random_logits"):
            expected["random"] = core.random_logits[:, :5, :5]
        if hasattr(core, "factorized_random_r1"):
            expected["factorized_random"] = core.factorized_random_r1[:, :5] @ core.factorized_random_r2[:, :5].mT
    maps = attention_maps(model, length=5)
    assert [m.place for m in maps] == ["layer 0", "layer 1"]
    assert list(maps[0].matrices) == list(expected)
    for name, matrix in expected.items():
        np.testing.assert_allclose(maps[0].matrices[name], matrix.detach().numpy(), atol=1e-6)
    if len(expected) > 1:
        assert list(maps[0].mixture.values()) == pytest.approx(core.mixture_alpha().tolist())
    drawn = _drawn_arrays(plot_synthesizer(maps[0]))  # a row per component, a column per head
    np.testing.assert_array_equal(drawn[1], maps[0].matrices[next(iter(expected))][1])


@pytest.mark.parametrize("family", list(HEADS))
@pytest.mark.parametrize("variant", ["synth_mixture", "synth_dense", "synth_factorized_dense"])
def test_synthesizer_maps_of_an_input_are_the_models_attention(family, variant):
    """With an input: one map per call (ALBERT: per use of a shared layer), whose softmax weights are the model's
    output_attentions, and softmax(sum_c alpha_c S_c) of the drawn components gives them back."""
    model = build(HEADS[family], variant)
    inputs = _inputs(family)
    maps = attention_maps(model, inputs)
    with torch.no_grad():
        if family == "t5":
            out = model(**inputs, decoder_input_ids=model._shift_right(inputs["input_ids"]), output_attentions=True)
            attentions = out.encoder_attentions + out.decoder_attentions  # cross-attention is dot product
        else:
            attentions = model(**inputs, output_attentions=True).attentions
    assert len(maps) == len(attentions)
    for amap, attention in zip(maps, attentions):
        np.testing.assert_allclose(amap.matrices["weights"], attention[0].numpy(), atol=1e-6)
        alpha = amap.mixture or {name: 1.0 for name in amap.matrices if name not in ("weights", "position_bias")}
        logits = sum(a * torch.from_numpy(amap.matrices[name]) for name, a in alpha.items())
        assert ("position_bias" in amap.matrices) == (family == "t5")
        if family == "t5":
            logits = logits + torch.from_numpy(amap.matrices["position_bias"])
        if amap.place.startswith("decoder"):  # causal: the mask is added after synthesis
            logits = logits.masked_fill(torch.ones(7, 7).triu(1).bool(), float("-inf"))
        np.testing.assert_allclose(logits.softmax(-1).numpy(), amap.matrices["weights"], atol=1e-5)
    if family == "albert":
        assert [m.place for m in maps] == [f"layer {i} sublayer {j}" for i in range(3) for j in range(2)]


@pytest.mark.parametrize("head", ["VariantBertForMaskedLM", "VariantAlbertForMaskedLM"])
def test_synthesizer_maps_of_a_left_padded_input(head):
    """Two pad tokens on the left, position ids counting the real tokens (as `generate` gives them): the recorded
    weights are output_attentions, and the drawn Random and dot-product logits plus the padding mask give them back
    (the logits are read where the layer read them)."""
    model = build(head, "synth_mixture", synthesizer_components=["dot_product", "random"])
    ids = _inputs("bert")["input_ids"]
    mask = torch.ones_like(ids)
    ids[0, :2], mask[0, :2] = 0, 0
    inputs = {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
    maps = attention_maps(model, inputs)
    with torch.no_grad():
        attentions = model(**inputs, output_attentions=True).attentions
    for amap, attention in zip(maps, attentions, strict=True):
        np.testing.assert_allclose(amap.matrices["weights"], attention[0].numpy(), atol=1e-6)
        logits = sum(a * torch.from_numpy(amap.matrices[name]) for name, a in amap.mixture.items())
        logits = logits.masked_fill(mask[0] == 0, float("-inf"))
        np.testing.assert_allclose(logits.softmax(-1).numpy(), amap.matrices["weights"], atol=1e-5)


def test_input_dependent_components_need_an_input():
    with pytest.raises(ValueError, match=r"input-dependent components \(dense, dot_product\).*--text"):
        attention_maps(build("VariantBertForMaskedLM", "synth_mixture"))


@pytest.mark.parametrize("variant", ["dot_product", "general_bilinear"])
def test_nothing_to_draw(variant, tmp_path):
    with pytest.raises(ValueError, match=f"Nothing to draw: the model's attention is {variant}"):
        draw_attention_maps(build("VariantBertForMaskedLM", variant), tmp_path)
    assert not any(tmp_path.iterdir())


# family -> the places of its synthesizer maps without an input, as file names
SYNTHESIZER_FILES = {
    "bert": ["layer-0", "layer-1"],
    "albert": [
        "layers-0-1-sublayer-0-one-shared-layer",
        "layers-0-1-sublayer-1-one-shared-layer",
        "layer-2-sublayer-0",
        "layer-2-sublayer-1",
    ],
    "t5": [f"{stack}-layer-{i}-self-attention" for stack in ("encoder", "decoder") for i in (0, 1)],
}


@pytest.mark.parametrize("family", list(HEADS))
@pytest.mark.parametrize("variant", ["talking_heads", "synth_random"])
def test_pngs_for_every_family_and_type(family, variant, tmp_path):
    names = (
        ["talking-heads.png"]
        if variant == "talking_heads"
        else [f"synthesizer-{place}.png" for place in SYNTHESIZER_FILES[family]]
    )
    paths = draw_attention_maps(build(HEADS[family], variant), tmp_path, dpi=40)
    assert [p.name for p in paths] == names
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    assert all(p.read_bytes().startswith(PNG) for p in paths)


def test_text_maps_are_labelled_with_tokens_and_mixtures_drawn(tmp_path):
    model, tokenizer = build("VariantBertForMaskedLM", "synth_mixture"), _tokenizer()
    text = "in the beginning god created the heaven and the earth ."
    paths = draw_attention_maps(model, tmp_path, tokenizer=tokenizer, text=text, dpi=40)
    assert [p.name for p in paths] == ["synthesizer-layer-0.png", "synthesizer-layer-1.png", "mixture-weights.png"]
    maps = attention_maps(model, tokenizer(text, return_tensors="pt"))
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(text).input_ids)
    figure = plot_synthesizer(maps[0], tokens)
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == tokens
    assert [ax.images[0].get_cmap().name for ax in figure.axes if ax.images][-1] == "viridis"  # the weights row
    mixture = plot_mixture(maps)
    np.testing.assert_allclose(_drawn_arrays(mixture)[0], [list(m.mixture.values()) for m in maps])
    with pytest.raises(ValueError, match="`text` needs the model's `tokenizer`"):
        draw_attention_maps(model, tmp_path, text=text)


def test_draw_command(tmp_path, capsys):
    model = build("VariantBertForMaskedLM", "synth_dense")
    model.save_pretrained(tmp_path / "model")
    _tokenizer().save_pretrained(tmp_path / "model")
    assert cli.main(["draw", str(tmp_path / "model"), "--out", str(tmp_path / "pics"), "--text", "god created"]) == 0
    assert sorted(p.name for p in (tmp_path / "pics").iterdir()) == [
        "synthesizer-layer-0.png",
        "synthesizer-layer-1.png",
    ]
    assert "Wrote" in capsys.readouterr().out
    assert cli.main(["draw", str(tmp_path / "model"), "--out", str(tmp_path / "none")]) == 1
    assert "input-dependent components (dense)" in capsys.readouterr().err


def test_drawing_without_matplotlib_says_what_to_install(monkeypatch, tmp_path, capsys):
    """The matrices need no matplotlib; drawing says what to install, and `hf-attn-variants draw` says it in one
    line before it loads the model (a folder that is not even a checkpoint gets that line, not its own error)."""
    maps = attention_maps(build("VariantBertForMaskedLM", "talking_heads"))
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match="needs matplotlib, which is not installed: pip install matplotlib"):
        plot_talking_heads(maps)
    assert cli.main(["draw", str(tmp_path / "no-model"), "--out", str(tmp_path / "pics")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hf-attn-variants draw: error: Drawing attention maps needs matplotlib")
    assert 'pip install matplotlib (or "hf-attn-variants[examples]")' in err[0]


@pytest.mark.parametrize("variant", ["talking_heads", "talking_heads_dynamic", "dot_product"])
def test_text_on_a_model_whose_drawing_it_cannot_change_is_refused(tmp_path, capsys, variant):
    """--text draws a synthesizer's maps and weights for that text; on a model without a synthesizer it would draw
    the same picture as without it (the same bytes), so it is refused with one line instead."""
    build("VariantBertForMaskedLM", variant).save_pretrained(tmp_path / "model")
    command = ["draw", str(tmp_path / "model"), "--out", str(tmp_path / "pics"), "--text", "god created"]
    assert cli.main(command) == 1
    err = capsys.readouterr().err
    assert "--text changes nothing of what is drawn for this model" in err and not (tmp_path / "pics").exists()
