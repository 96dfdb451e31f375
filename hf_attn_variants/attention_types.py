"""What the package's tools know about each attention type, in one table. Package-only (a checkpoint never needs it).

A model needs of an attention type only what `configuration_variant_attention.ATTENTION_REGISTRY` holds (remote code,
copied into every checkpoint): its spec and resolver, its warm start, whether it serves across. What only the tools
read lives here, under the same names: the preset setups (`presets`), the model card's section and paper (`publish`),
the config fields it owns (`publish`, `convert`), what its warm start gives (the command line's help) and the field
that bounds its length (the example scripts). Importing this module checks that both tables list the same types, in
the same order, as `attention_variants` checks `ATTENTION_CLASSES`.

Adding an attention type: docs/computation.md lists the files it touches; tests/test_attention_types.py fails until
each has its entry.
"""

from collections.abc import Callable
from dataclasses import dataclass, fields

from .configuration_variant_attention import ATTENTION_REGISTRY, ATTENTION_TYPES, AttentionType, VariantAttentionFields


def _synthesizer_card_key(config: dict) -> str:
    """A mixture with the dot product, a lone Dense or Random synthesizer, or any other synthesizer."""
    components = tuple(config.get("synthesizer_components") or ())
    if "dot_product" in components and len(components) > 1:
        return "synthesizer-mixture"
    return {("dense",): "synthesizer-dense", ("random",): "synthesizer-random"}.get(components, "synthesizer")


@dataclass(frozen=True)
class AttentionTools:
    """What the tools know about one attention type (its model half: `model`, the `ATTENTION_REGISTRY` entry).

    name: the value of `attention_type`, the key of both tables.
    presets: its attention setups, preset suffix -> config fields beyond `attention_type` (`presets.PRESETS`:
        "bert-mini-" + suffix); every suffix is also a section of the card text (`model_cards/attention.yaml`).
    card_key: the card section of a checkpoint of this type, or a function choosing it from the config.json (dict).
    paper: the paper it comes from (presets, cards); None for ordinary attention.
    warm_start_help: what its warm start (`model.warm_start`) gives, for the command line's help ("" without one).
    field_prefix: the prefix of the config fields only this type reads (None: it has none).
    length_field: the config field that bounds the sequence length it attends over (None: no bound of its own).
    """

    name: str
    presets: dict[str, dict]
    card_key: str | Callable[[dict], str]
    paper: str | None = None
    warm_start_help: str = ""
    field_prefix: str | None = None
    length_field: str | None = None

    @property
    def model(self) -> AttentionType:
        """The model half: the type's `ATTENTION_REGISTRY` entry."""
        return ATTENTION_REGISTRY[self.name]

    @property
    def config_fields(self) -> tuple[str, ...]:
        """The config fields only this type reads."""
        prefix = self.field_prefix
        return tuple(f.name for f in fields(VariantAttentionFields) if prefix and f.name.startswith(prefix))

    def card_section(self, config: dict) -> str:
        """The section of `model_cards/attention.yaml` that describes a config.json (dict) of this type."""
        return self.card_key(config) if callable(self.card_key) else self.card_key


_TALKING_HEADS_PAPER = "Talking-Heads Attention (Shazeer et al., 2020)"
_SYNTHESIZER_PAPER = "Synthesizer: Rethinking Self-Attention for Transformer Models (Tay et al., 2021)"

ATTENTION_TOOLS: dict[str, AttentionTools] = {
    entry.name: entry
    for entry in (
        AttentionTools(
            "dot_product", presets={"dot-product": {}}, card_key="dot-product",
            warm_start_help="a plain variant checkpoint (e.g. to train with admin=True)",
        ),
        AttentionTools(
            "talking_heads", presets={"talking-heads": {"talking_heads_init": "paper"}}, card_key="talking-heads",
            paper=_TALKING_HEADS_PAPER, warm_start_help="identity head maps", field_prefix="talking_heads_",
        ),
        AttentionTools(
            "synthesizer",
            presets={"synthesizer-dense": {"synthesizer_components": ["dense"]},
                     "synthesizer-random": {"synthesizer_components": ["random"]},
                     "synthesizer-mixture": {"synthesizer_components": ["dot_product", "random"]}},
            card_key=_synthesizer_card_key, paper=_SYNTHESIZER_PAPER,
            warm_start_help="a mixture with the dot product that starts as the dot product",
            field_prefix="synthesizer_", length_field="synthesizer_max_position",
        ),
        AttentionTools(
            "general_bilinear", presets={"general-bilinear": {}}, card_key="general-bilinear",
            paper=_TALKING_HEADS_PAPER,
        ),
    )
}
if tuple(ATTENTION_TOOLS) != ATTENTION_TYPES:  # every registered attention type has its tooling entry, in order
    raise ImportError(f"attention_types.ATTENTION_TOOLS {tuple(ATTENTION_TOOLS)} do not match the attention types of "
                      f"configuration_variant_attention.ATTENTION_REGISTRY {ATTENTION_TYPES}.")


def describe_attention_types(names=None) -> str:
    """"name: help; ..." for the attention types `names` (default: all), for help texts."""
    return "; ".join(f"{name}: {ATTENTION_REGISTRY[name].help}" for name in (names or ATTENTION_TYPES))


__all__ = ["ATTENTION_TOOLS", "AttentionTools", "describe_attention_types"]
