"""An attention type touches three places (docs/computation.md, "Adding an attention type"): its class, its one
registration (`register_attention_type`: what a model needs and what the tools read, remote code both) and its rows in
the test table. The package's own types are complete there; a toy type registered here, in-process, with a class and
a registration and nothing else, trains inside a BERT, saves, loads and gets its model card."""

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init

import hf_attn_variants as hav
from hf_attn_variants import attention_tools, presets
from hf_attn_variants.families import FAMILIES
from hf_attn_variants.hub import cards
from hf_attn_variants.models import attention_base, attention_types, attention_variants
from hf_attn_variants.models.talking_heads_blockwise import softmax_keys

ROOT = Path(__file__).resolve().parents[2]
TYPES = hav.ATTENTION_TYPES
# the places a new attention type touches, as docs/computation.md lists them
TOUCHED = {
    "hf_attn_variants/models/attention_variants.py",
    "hf_attn_variants/models/attention_types.py",
    "tests/conftest.py",
}


def test_the_docs_list_the_places_a_new_type_touches():
    page = (ROOT / "docs" / "computation.md").read_text()
    section = page.split("## Adding an attention type", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\d+\. `([^`]+)`", section, re.MULTILINE)
    assert set(listed) == TOUCHED and len(listed) == len(TOUCHED)
    assert all((ROOT / path).is_file() for path in listed)


def test_checkpoints_carry_what_models_need_and_not_what_the_tools_read():
    """The models' registration (remote code) and the tools' (package only) share the name and nothing else, and
    no file of models/ names the tools' fields."""
    model_fields = {f.name for f in dataclasses.fields(hav.AttentionType)}
    tool_fields = {f.name for f in dataclasses.fields(hav.AttentionTools)}
    assert model_fields & tool_fields == {"name"} and {"presets", "card_key", "paper"} <= tool_fields
    for path in sorted((ROOT / "hf_attn_variants" / "models").glob("*.py")):
        text = path.read_text()
        assert not [name for name in ("card_key", "warm_start_help", "card_section") if name in text], path.name


def test_the_registry_holds_the_packages_types_baseline_first():
    assert TYPES == tuple(hav.ATTENTION_REGISTRY) == tuple(hav.ATTENTION_CLASSES)
    assert TYPES[0] == attention_types.BASELINE_ATTENTION


@pytest.mark.parametrize("name", TYPES)
def test_every_type_has_a_class_that_its_layers_get(name):
    from conftest import TINY

    spec = hav.resolve_attention(hav.VariantBertConfig(**TINY, attention_type=name))
    assert type(spec) is hav.ATTENTION_REGISTRY[name].spec and spec.attention_type == name
    core = hav.attention_core(spec)
    assert type(core) is hav.ATTENTION_CLASSES[name] and type(core).__name__ == hav.ATTENTION_REGISTRY[name].core


@pytest.mark.parametrize("name", TYPES)
def test_every_type_has_presets_in_every_family_and_card_text(name):
    tools = attention_tools.tools_of(name)
    assert tools.presets, f"{name} has no preset setup"
    for setup, setup_fields in tools.presets.items():
        for family in FAMILIES:
            assert presets.preset_config(f"{family}-tiny-{setup}").attention_type == name
        config = {"attention_type": name, **setup_fields}
        texts = cards.attention_texts(config)
        assert len(texts) == 1 and texts[0]["title"] and texts[0]["description"]


def test_every_type_runs_in_the_test_table():
    from conftest import VARIANTS

    assert {fields["attention_type"] for fields in VARIANTS.values()} == set(TYPES)


# ----------------------------------------------------------------------------- a new type: a class and a registration
class TemperatureAttention(attention_base.VariantAttentionCore):
    """A toy type: dot-product attention with a learned temperature per head (1 at init: plain dot product)."""

    def __init__(self, spec):
        super().__init__(spec)
        self.temperature = nn.Parameter(torch.empty(spec.num_heads))

    @torch.no_grad()
    def init_variant_weights(self, std: float) -> None:
        init.ones_(self.temperature)

    def attention_function(self, attn_implementation, output_attentions, dropout, device):
        return temperature_forward


def temperature_forward(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, *, position_bias=None, **kwargs
):
    bias = attention_base.attention_bias(module, attention_mask, position_bias, query.shape[2], value)
    logits = torch.matmul(query, key.transpose(2, 3)) * (module.scaling * module.temperature[:, None, None])
    weights = F.dropout(softmax_keys(logits if bias is None else logits + bias), p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


TEMPERATURE = hav.AttentionType(
    "temperature", "dot-product attention with a learned temperature per head", core=TemperatureAttention
)
TEMPERATURE_TOOLS = hav.AttentionTools("temperature", paper="Temperature (a toy of this test)")


def _train_save_and_card(name: str, tmp_path) -> None:
    """A tiny BERT of attention type `name` (the toy): at init it is the dot-product model with the same weights; a
    few AdamW steps lower the loss and move the temperatures; it saves, loads with the same logits and gets a card made
    from its registration."""
    from conftest import TINY

    torch.manual_seed(0)
    model = hav.VariantBertForMaskedLM(hav.VariantBertConfig(**TINY, attention_type=name))
    assert all(type(layer.attention.self.core) is TemperatureAttention for layer in model.bert.encoder.layer)
    baseline = hav.VariantBertForMaskedLM(hav.VariantBertConfig(**TINY))
    baseline.load_state_dict(model.state_dict(), strict=False)  # every weight but the temperatures
    ids = torch.randint(0, TINY["vocab_size"], (4, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(ids).logits, baseline.eval()(ids).logits, atol=1e-5, rtol=1e-5)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(8):
        loss = model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    temperatures = model.bert.encoder.layer[0].attention.self.core.temperature
    assert losses[-1] < losses[0] and not torch.allclose(temperatures, torch.ones_like(temperatures))
    model.eval().save_pretrained(tmp_path)
    loaded = hav.VariantBertForMaskedLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, atol=1e-6, rtol=1e-5)
    card = str(cards.render_card(tmp_path, "me/temperature", None))
    assert (
        "**Temperature attention.** Dot-product attention with a learned temperature per head. It comes from "
        "Temperature (a toy of this test)."
    ) in card


def test_a_type_registered_in_process_trains_saves_and_gets_its_card(tmp_path):
    """The toy type, registered with its class and its paper and nothing else, for this test; unregistered, it is
    refused again. What the tools read of it stays out of the checkpoint's code."""
    from conftest import TINY

    hav.register_attention_type(TEMPERATURE, TEMPERATURE_TOOLS)
    try:
        _train_save_and_card(TEMPERATURE.name, tmp_path)
    finally:
        del hav.ATTENTION_REGISTRY[TEMPERATURE.name]
        del attention_tools.ATTENTION_TOOLS[TEMPERATURE.name]
    with pytest.raises(ValueError, match="`attention_type`='temperature' is not supported"):
        hav.VariantBertForMaskedLM(hav.VariantBertConfig(**TINY, attention_type=TEMPERATURE.name))


@pytest.mark.parametrize(
    "changes,tools,message",
    [
        (dict(name="dot_product"), None, "already registered"),
        (dict(exclusive_fields=("temperature_init",)), None, "not attention config fields"),
        (dict(length_field="synthesizer_max_position"), None, "must be fields of its own"),
        (dict(algorithms=("blockwise", "flash")), None, "`algorithms` must be among"),
        ({}, dict(warm_start_help="identity temperatures"), "give both or neither"),
        ({}, dict(name="temperatures"), "its `AttentionTools` are named 'temperatures'"),
        (dict(spec=dict), None, "`AttentionSpec` subclass"),
    ],
)
def test_a_registration_that_names_what_does_not_exist_is_refused(changes, tools, message):
    tools = dataclasses.replace(TEMPERATURE_TOOLS, **tools) if tools else None
    with pytest.raises(ValueError, match=message):
        hav.register_attention_type(dataclasses.replace(TEMPERATURE, **changes), tools)
    assert "temperature" not in hav.ATTENTION_REGISTRY and "temperature" not in attention_tools.ATTENTION_TOOLS


def test_a_registration_naming_no_class_fails_at_import(monkeypatch):
    """`core` names a class of attention_variants: a misspelt one fails when the module is imported (loaded again
    here while the registry holds it), and a type registered later fails where its layer is built."""
    misspelt = hav.AttentionType("misspelt", "a type whose class name is misspelt", core="DotProductAtention")
    monkeypatch.setitem(hav.ATTENTION_REGISTRY, misspelt.name, misspelt)
    name = "hf_attn_variants.models._attention_variants_check"
    spec = importlib.util.spec_from_file_location(name, attention_variants.__file__)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    with pytest.raises(ValueError, match="'misspelt' is registered with core='DotProductAtention'"):
        spec.loader.exec_module(module)
    with pytest.raises(ValueError, match="not a `VariantAttentionCore` subclass"):
        hav.ATTENTION_CLASSES["misspelt"]
