"""One schema for the attention fields: the dataclass, its docstring, docs/configuration.md and every family's
config agree; configs round-trip through JSON."""

import dataclasses
import re
from pathlib import Path

import pytest
import torch

import hf_attn_variants as hav
from hf_attn_variants.models import attention_types
from hf_attn_variants.models.configuration_variant_attention import VARIANT_CONFIG_DEFAULTS, VariantAttentionFields

FIELDS = [f.name for f in dataclasses.fields(VariantAttentionFields)]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
CONFIGS = [hav.VariantBertConfig, hav.VariantAlbertConfig, hav.VariantT5Config]


def test_every_field_is_documented_once_in_the_docstring():
    documented = re.findall(r"^\s{8}(\w+) \(`", VariantAttentionFields.__doc__, re.MULTILINE)
    assert documented == FIELDS
    for config_class in CONFIGS:  # the family configs carry the same text
        assert VariantAttentionFields.__doc__ in config_class.__doc__


def test_docs_table_matches_the_schema():
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", DOCS.read_text(), re.MULTILINE)
    assert [name for name, _ in rows] == FIELDS
    for name, default in rows:
        assert default == repr(VARIANT_CONFIG_DEFAULTS[name]).replace("'", '"'), name


@pytest.mark.parametrize("config_class", CONFIGS)
def test_every_config_has_every_field_with_its_default_and_round_trips(config_class, tmp_path):
    config = config_class()
    for name in FIELDS:
        expected = VARIANT_CONFIG_DEFAULTS[name]
        if config_class is hav.VariantT5Config and name in ("attention_head_size", "synthesizer_max_position"):
            expected = {"attention_head_size": config.d_kv, "synthesizer_max_position": 512}[name]
        assert getattr(config, name) == expected, name
    changed = config_class(
        attention_type="talking_heads",
        talking_heads_dynamic=["x2l"],
        admin=False,
        synthesizer_components=["random", "dot_product"],
    )
    changed.save_pretrained(tmp_path)
    loaded = config_class.from_pretrained(tmp_path)
    for name in FIELDS:
        assert getattr(loaded, name) == getattr(changed, name), name
    components = ["random", "dot_product"]
    first, second = config_class(synthesizer_components=components), config_class()
    first.synthesizer_components.append("dense")
    assert components == ["random", "dot_product"] and second.synthesizer_components == ["dense"]  # no shared lists


# ------------------------------------------------------------------------------- the attention types, registered once
REGISTRY = hav.ATTENTION_REGISTRY
# what a cross-attention layer of a model of each type is (a new type must say: the test fails until it is here)
CROSS = {
    "dot_product": "dot_product",
    "talking_heads": "talking_heads",
    "synthesizer": "dot_product",
    "general_bilinear": "general_bilinear",
}


def test_the_tools_read_every_attention_type_from_the_registry():
    from hf_attn_variants import attention_tools, cli, convert, presets
    from hf_attn_variants.hub import cards

    card_texts = cards._load_yaml("attention.yaml")
    assert set(attention_tools.ATTENTION_TOOLS) == set(REGISTRY)  # the package's own types say what the tools need
    for name, entry in REGISTRY.items():  # the package's own types have curated card text for every setup
        assert entry.name == name and issubclass(entry.spec, hav.AttentionSpec) and entry.help
        tools = attention_tools.tools_of(name)
        for setup, fields in tools.presets.items():  # each setup is a preset of every family and a card section
            assert presets.ATTENTION[setup][0] == {"attention_type": name, **fields}
            assert f"bert-tiny-{setup}" in presets.PRESETS and f"t5-tiny-{setup}" in presets.PRESETS
            assert attention_tools.attention_setups({"attention_type": name, **fields}) in ([setup], ["dot-product"])
            assert setup in card_texts
        assert tools.card_section({"attention_type": name}) in card_texts
        assert set(entry.config_fields) <= set(FIELDS) and set(entry.exclusive_fields) <= set(entry.config_fields)
    assert convert.FUNCTION_PRESERVING == {n: e.warm_start for n, e in REGISTRY.items() if e.warm_start is not None}
    choices = next(
        a for a in cli._parser()._subparsers._group_actions[0].choices["convert"]._actions if a.dest == "attention"
    ).choices
    assert set(choices) == set(convert.FUNCTION_PRESERVING) == {"dot_product", "talking_heads", "synthesizer"}
    assert hav.describe_attention_types().count(": ") == len(REGISTRY)
    assert all(
        f'`"{name}"`: {entry.help}' in VariantAttentionFields.__doc__.replace("\n              ", " ")
        for name, entry in REGISTRY.items()
    )


@pytest.mark.parametrize("name", [n for n, e in REGISTRY.items() if e.warm_start is not None])
def test_a_warm_start_equals_transformers_bert(name, tmp_path):
    """The fields `convert` reads make a vanilla BERT checkpoint load as the same function; without them (the types'
    own default init) it is another function, so the fields are what makes it equal."""
    import transformers

    from conftest import TINY

    torch.manual_seed(0)
    reference = transformers.BertModel(transformers.BertConfig(**TINY)).eval()
    with torch.no_grad():  # logits far from zero, so that attention other than the dot product shows
        for p in reference.parameters():
            p.add_(0.2 * torch.randn_like(p))
    reference.save_pretrained(tmp_path)
    mixture = {"synthesizer_components": ["dot_product", "random"]}  # a warm-started synthesizer mixes with it
    ids = torch.randint(0, TINY["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(input_ids=ids).last_hidden_state
        outputs = {}
        for warm in (True, False):
            fields = {"attention_type": name, **mixture, **(REGISTRY[name].warm_start if warm else {})}
            if not warm:
                fields.update({k: VARIANT_CONFIG_DEFAULTS[k] for k in REGISTRY[name].warm_start})
            torch.manual_seed(1)
            model = hav.VariantBertModel.from_pretrained(tmp_path, **fields).eval()
            outputs[warm] = model(input_ids=ids).last_hidden_state
    torch.testing.assert_close(outputs[True], expected, atol=1e-5, rtol=1e-4)
    if REGISTRY[name].warm_start:
        assert (outputs[False] - expected).abs().max() > 1e-3


def test_cross_attention_follows_the_registry_in_bert_and_t5():
    from conftest import TINY, TINY_T5

    assert set(CROSS) == set(REGISTRY)
    for name, across in CROSS.items():
        assert attention_types.cross_attention_type(name) == across
        bert = hav.VariantBertLMHeadModel(
            hav.VariantBertConfig(**TINY, attention_type=name, is_decoder=True, add_cross_attention=True)
        )
        layer = bert.bert.encoder.layer[0]
        assert (layer.attention.self.spec.attention_type, layer.crossattention.self.spec.attention_type) == (
            name,
            across,
        )
        t5 = hav.VariantT5Model(hav.VariantT5Config(**TINY_T5, attention_type=name))
        assert t5.decoder.block[0].layer[1].EncDecAttention.spec.attention_type == across
        assert t5.config.attention_type_of("cross") == across
        if across != name:  # asked for by name across, a self-attention-only type is refused with its reason
            with pytest.raises(ValueError, match=f"`cross_attention_type`='{name}' is not supported: .*; use "):
                hav.VariantT5Model(hav.VariantT5Config(**TINY_T5, cross_attention_type=name))
