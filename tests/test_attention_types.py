"""An attention type is complete in every file it touches (docs/computation.md, "Adding an attention type"): the
model half (`ATTENTION_REGISTRY`, remote code), its class, its tooling entry (`ATTENTION_TOOLS`, package-only), its
presets and card text, its docs row and its rows in the test table. A type forgotten in one of them fails here."""

import importlib.util
import re
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

import hf_attn_variants as hav
from hf_attn_variants import attention_types, configuration_variant_attention, presets
from hf_attn_variants.families import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
TYPES = hav.ATTENTION_TYPES
# the files a new attention type touches, as docs/computation.md lists them
TOUCHED = {
    "hf_attn_variants/configuration_variant_attention.py",
    "hf_attn_variants/attention_variants.py",
    "hf_attn_variants/attention_types.py",
    "hf_attn_variants/model_cards/attention.yaml",
    "docs/configuration.md",
    "tests/conftest.py",
}
CARDS = yaml.safe_load((ROOT / "hf_attn_variants" / "model_cards" / "attention.yaml").read_text())


def test_the_docs_list_the_files_a_new_type_touches():
    page = (ROOT / "docs" / "computation.md").read_text()
    section = page.split("## Adding an attention type", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\d+\. `([^`]+)`", section, re.MULTILINE)
    assert set(listed) == TOUCHED and len(listed) == len(TOUCHED)
    assert all((ROOT / path).is_file() for path in listed)


def test_both_halves_list_the_same_types_in_the_same_order():
    assert TYPES == tuple(hav.ATTENTION_REGISTRY) == tuple(hav.ATTENTION_TOOLS) == tuple(hav.ATTENTION_CLASSES)
    assert TYPES[0] == configuration_variant_attention.BASELINE_ATTENTION


@pytest.mark.parametrize("name", TYPES)
def test_every_type_has_a_class_that_its_layers_get(name):
    from conftest import TINY

    spec = hav.resolve_attention(hav.VariantBertConfig(**TINY, attention_type=name))
    assert type(spec) is hav.ATTENTION_REGISTRY[name].spec and spec.attention_type == name
    assert type(hav.attention_core(spec)) is hav.ATTENTION_CLASSES[name]


@pytest.mark.parametrize("name", TYPES)
def test_every_type_has_a_tooling_entry_that_fits_its_model_half(name):
    entry, tools = hav.ATTENTION_REGISTRY[name], hav.ATTENTION_TOOLS[name]
    assert tools.name == entry.name == name and tools.model is entry and entry.help
    assert bool(tools.warm_start_help) == (entry.warm_start is not None)  # the command line describes every start
    config_fields = {f.name for f in fields(hav.VariantAttentionFields)}
    assert set(entry.exclusive_fields) <= set(tools.config_fields) <= config_fields
    assert tools.length_field is None or tools.length_field in tools.config_fields
    assert f"{name}: {entry.help}" in hav.describe_attention_types()


@pytest.mark.parametrize("name", TYPES)
def test_every_type_has_presets_in_every_family_and_card_text(name):
    tools = hav.ATTENTION_TOOLS[name]
    assert tools.presets, f"{name} has no preset setup"
    for setup, setup_fields in tools.presets.items():
        assert setup in CARDS, f"model_cards/attention.yaml has no section {setup!r}"
        assert tools.card_section({"attention_type": name, **setup_fields}) in CARDS
        for family in FAMILIES:
            config = presets.preset_config(f"{family}-tiny-{setup}")
            assert config.attention_type == name
    assert tools.card_section({"attention_type": name}) in CARDS


def test_every_type_has_its_docs_row():
    page = (ROOT / "docs" / "configuration.md").read_text()
    row = re.search(r"^\| `attention_type` \| `[^`]*` \| (.*) \|$", page, re.MULTILINE).group(1)
    assert set(re.findall(r'`"(\w+)"`', row)) == set(TYPES)


def test_every_type_runs_in_the_test_table():
    from conftest import VARIANTS

    assert {fields["attention_type"] for fields in VARIANTS.values()} == set(TYPES)


def test_importing_the_tools_refuses_a_type_without_its_entry(monkeypatch):
    """The check at import: the tooling module, loaded again while the registry has one more type, refuses it."""
    monkeypatch.setattr(configuration_variant_attention, "ATTENTION_TYPES", (*TYPES, "new_type"))
    name = "hf_attn_variants._attention_types_check"
    spec = importlib.util.spec_from_file_location(name, attention_types.__file__)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    with pytest.raises(ImportError, match="new_type"):
        spec.loader.exec_module(module)
