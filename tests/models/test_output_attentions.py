"""`output_attentions` however it is asked for: the forward argument, the config field, or `from_pretrained`'s keyword
(how attention-visualisation tools load a model), in train and eval mode, with and without gradients, for every
attention type (conftest's VARIANTS) and every family. The weights come back, one tensor per attention module, equal
to those the forward argument gives, and gradients reach them (`retain_grad`), as in transformers' models.

Before the config route handed its choice down to the attention cores, a talking-heads model that recorded gradients
ran the blockwise core (it keeps no weights) and returned an empty tuple: transformers' own common test
`test_retain_grad_hidden_states_attentions` failed with an IndexError on it."""

import pytest
import torch

import hf_attn_variants as hav
from conftest import FAMILIES, head_inputs, make_config

# the weights a base model returns, by family: encoder-decoders give three kinds
ATTENTION_FIELDS = {
    "bert": ("attentions",),
    "albert": ("attentions",),
    "t5": ("encoder_attentions", "decoder_attentions", "cross_attentions"),
}
ROUTES = ("argument", "config", "from_pretrained")
# (training mode, gradients recorded): eval without gradients is inference, eval with them is what saliency tools do
MODES = {"train": (True, True), "eval_grad": (False, True), "eval_no_grad": (False, False)}


def _model(fam: str, variant: str, route: str, tmp_path):
    torch.manual_seed(0)
    base = FAMILIES[fam].base_model
    cls = getattr(hav, base)
    config = make_config(variant, fam, output_attentions=route == "config")
    model = cls(config)
    if route == "from_pretrained":
        model.save_pretrained(tmp_path / "saved")
        model = cls.from_pretrained(tmp_path / "saved", output_attentions=True)
    return model, head_inputs(base)


def _forward(model, inputs, route, training, grad):
    model.train(training)
    kwargs = {k: v for k, v in inputs.items() if k not in ("labels", "start_positions", "end_positions")}
    if route == "argument":
        kwargs["output_attentions"] = True
    with torch.set_grad_enabled(grad):
        return model(**kwargs)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("fam", list(FAMILIES))
def test_attention_weights_come_back_however_asked_for(fam, variant, route, tmp_path):
    model, inputs = _model(fam, variant, route, tmp_path)
    reference = _forward(model, inputs, "argument", training=False, grad=False)
    for mode, (training, grad) in MODES.items():
        out = _forward(model, inputs, route, training, grad)
        for field in ATTENTION_FIELDS[fam]:
            weights, expected = out[field], reference[field]
            assert weights is not None and len(weights) == len(expected) > 0, (mode, field)
            for w, e in zip(weights, expected):
                assert w.shape == e.shape, (mode, field)
                if not training:  # no dropout: the same weights as the forward argument gives
                    torch.testing.assert_close(w.detach(), e, atol=1e-6, rtol=1e-5)
            if grad and variant != "synth_random_frozen":  # fixed random weights depend on no trainable tensor
                assert all(w.requires_grad for w in weights), (mode, field)


@pytest.mark.parametrize("fam", list(FAMILIES))
@pytest.mark.parametrize(
    "variant", ["dot_product", "talking_heads", "talking_heads_dynamic", "synth_mixture", "general_bilinear"]
)
def test_gradients_reach_the_returned_weights_from_the_config_route(fam, variant, tmp_path):
    """transformers' `test_retain_grad_hidden_states_attentions`: the config asks, the model trains, and the loss's
    gradient reaches the first layer's weights (they are the tensors the output was computed from, not a copy)."""
    model, inputs = _model(fam, variant, "config", tmp_path)
    model.config.output_hidden_states = True
    out = _forward(model, inputs, "config", training=True, grad=True)
    field = ATTENTION_FIELDS[fam][0]
    weights = out[field][0]
    weights.retain_grad()
    out[0].flatten()[0].backward(retain_graph=True)
    assert weights.grad is not None and weights.grad.abs().sum() > 0


@pytest.mark.parametrize("fam", list(FAMILIES))
def test_without_a_request_no_weights_are_returned(fam, tmp_path):
    """Non-vacuity of the routes: neither the argument nor the config asks, so nothing is recorded."""
    model, inputs = _model(fam, "talking_heads", "none", tmp_path)
    for mode, (training, grad) in MODES.items():
        out = _forward(model, inputs, "none", training, grad)
        assert all(not out.get(field) for field in ATTENTION_FIELDS[fam]), mode
