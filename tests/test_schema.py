"""One schema for the attention fields: the dataclass, its docstring, docs/configuration.md and every family's
config agree; configs round-trip through JSON."""

import dataclasses
import re
from pathlib import Path

import pytest

import hf_attn_variants as hav
from hf_attn_variants.configuration_variant_attention import VARIANT_CONFIG_DEFAULTS, VariantAttentionFields

FIELDS = [f.name for f in dataclasses.fields(VariantAttentionFields)]
DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
CONFIGS = [hav.VariantBertConfig, hav.VariantAlbertConfig, hav.VariantT5Config]


def test_every_field_is_documented_once_in_the_docstring():
    documented = re.findall(r"^\s{8}(\w+) \(`", VariantAttentionFields.__doc__, re.M)
    assert documented == FIELDS
    for config_class in CONFIGS:  # the family configs carry the same text
        assert VariantAttentionFields.__doc__ in config_class.__doc__


def test_docs_table_matches_the_schema():
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", DOCS.read_text(), re.M)
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
    changed = config_class(attention_type="talking_heads", talking_heads_dynamic=["x2l"], admin=False,
                           synthesizer_components=["random", "dot_product"])
    changed.save_pretrained(tmp_path)
    loaded = config_class.from_pretrained(tmp_path)
    for name in FIELDS:
        assert getattr(loaded, name) == getattr(changed, name), name
    components = ["random", "dot_product"]
    first, second = config_class(synthesizer_components=components), config_class()
    first.synthesizer_components.append("dense")
    assert components == ["random", "dot_product"] and second.synthesizer_components == ["dense"]  # no shared lists
