"""What the package's tools know of each attention type beyond what its models need: its presets, the section of
the model cards that describes it, the paper it comes from and the help text of its warm start. Package-only: a
checkpoint carries its models' registration (`models/attention_types.py`), not this.

Also the questions the tools ask of a checkpoint's `config.json` through these: which card sections describe it
(`attention_setups`, which also names the default output folders) and which of its fields say which model it is
(`identity_fields`).

A type registered with `register_attention_type` alone gets the defaults: one preset setup and one card section
named after it ("general-bilinear"), card text made from its help and paper.
"""

from collections.abc import Callable
from dataclasses import dataclass

from .models.attention_types import ATTENTION_REGISTRY, BASELINE_ATTENTION, AttentionType
from .models.attention_types import register_attention_type as register_model_attention_type
from .models.configuration_variant_attention import PLACES


@dataclass(frozen=True)
class AttentionTools:
    """What the tools read of one attention type.

    name: the attention type (`AttentionType.name`).
    presets: its attention setups, preset suffix -> config fields beyond `attention_type` (`presets.PRESETS`:
        "bert-mini-" + suffix). Default: one setup named after the type, with no fields.
    card_key: the section of `model_cards/attention.yaml` that describes a checkpoint of this type, or a function
        choosing it from the config.json (dict). Default: named after the type. A section the file does not have is
        made from the type's help and `paper`.
    paper: the paper it comes from (presets, cards); None for ordinary attention.
    warm_start_help: what its warm start (`AttentionType.warm_start`) gives, for the command line's help.
    """

    name: str
    presets: dict[str, dict] | None = None
    card_key: str | Callable[[dict], str] | None = None
    paper: str | None = None
    warm_start_help: str = ""

    def __post_init__(self):  # the defaults, named after the type
        slug = self.name.replace("_", "-")
        if self.presets is None:
            object.__setattr__(self, "presets", {slug: {}})
        if self.card_key is None:
            object.__setattr__(self, "card_key", slug)

    def card_section(self, config: dict) -> str:
        """The section of `model_cards/attention.yaml` that describes a config.json (dict) of this type."""
        return self.card_key(config) if callable(self.card_key) else self.card_key


# attention_type -> what the tools read of it, for every type registered with `register_attention_type`
ATTENTION_TOOLS: dict[str, AttentionTools] = {}
DEFAULT_WARM_START_HELP = "starts as dot-product attention"


def register_attention_type(entry: AttentionType, tools: AttentionTools | None = None) -> AttentionType:
    """Register an attention type: what its models need (`entry`, see `AttentionType`) and what the tools read of it
    (`tools`; default: `AttentionTools(entry.name)`). Raises a `ValueError` for a name already registered and for a
    registration that names what does not exist, registering nothing then."""
    tools = tools or AttentionTools(entry.name)
    if tools.name != entry.name:
        raise ValueError(f"Attention type {entry.name!r}: its `AttentionTools` are named {tools.name!r}.")
    if tools.warm_start_help and entry.warm_start is None:
        raise ValueError(
            f"Attention type {entry.name!r}: `warm_start_help` describes a warm start, and the type has none "
            "(`warm_start`=None); give both or neither."
        )
    register_model_attention_type(entry)
    ATTENTION_TOOLS[entry.name] = tools
    return entry


def tools_of(name: str) -> AttentionTools:
    """What the tools read of the registered type `name` (the defaults for a type registered in the models alone)."""
    return ATTENTION_TOOLS.get(name) or AttentionTools(name)


def warm_start_help(name: str) -> str:
    return tools_of(name).warm_start_help or DEFAULT_WARM_START_HELP


def _synthesizer_card_key(config: dict) -> str:
    """A mixture with the dot product, a lone Dense or Random synthesizer, or any other synthesizer."""
    components = tuple(config.get("synthesizer_components") or ())
    if "dot_product" in components and len(components) > 1:
        return "synthesizer-mixture"
    return {("dense",): "synthesizer-dense", ("random",): "synthesizer-random"}.get(components, "synthesizer")


TALKING_HEADS_PAPER = "Talking-Heads Attention (Shazeer et al., 2020)"
SYNTHESIZER_PAPER = "Synthesizer: Rethinking Self-Attention for Transformer Models (Tay et al., 2021)"

# the package's own types (their models' registrations are in models/attention_types.py)
for _tools in (
    AttentionTools("dot_product", warm_start_help="a plain variant checkpoint (e.g. to train with admin=True)"),
    AttentionTools(
        "talking_heads",
        presets={"talking-heads": {"talking_heads_init": "paper"}},
        paper=TALKING_HEADS_PAPER,
        warm_start_help="identity head maps",
    ),
    AttentionTools(
        "synthesizer",
        presets={
            "synthesizer-dense": {"synthesizer_components": ["dense"]},
            "synthesizer-random": {"synthesizer_components": ["random"]},
            "synthesizer-mixture": {"synthesizer_components": ["dot_product", "random"]},
        },
        card_key=_synthesizer_card_key,
        paper=SYNTHESIZER_PAPER,
        warm_start_help="a mixture with the dot product that starts as the dot product",
    ),
    AttentionTools("general_bilinear", paper=TALKING_HEADS_PAPER),
):
    ATTENTION_TOOLS[_tools.name] = _tools


# ------------------------------------------------------------------------------------ what a config.json is
# the config.json fields that give a model's shape (any family's names for them), and Admin
STRUCTURE_FIELDS = (
    "num_hidden_layers",
    "num_layers",
    "num_decoder_layers",
    "hidden_size",
    "d_model",
    "embedding_size",
    "num_attention_heads",
    "num_heads",
    "attention_head_size",
    "d_kv",
    "intermediate_size",
    "d_ff",
    "vocab_size",
    "admin",
)


def attention_types_in(config: dict) -> list[AttentionType]:
    """The registered attention types a `config.json` (dict) uses, in any place, as their registrations."""
    used = {config.get(key) for key in ("attention_type", *(f"{place}_attention_type" for place in PLACES))}
    return [entry for name, entry in ATTENTION_REGISTRY.items() if name in used]


def attention_setups(config: dict) -> list[str]:
    """The card sections (keys of `model_cards/attention.yaml`) that describe a checkpoint's `config.json`: its
    attention variant(s) (`AttentionTools.card_section`), "single-head" for one head per layer, "admin" for Admin
    residuals; the baseline's section if none."""
    setups = [
        tools_of(entry.name).card_section(config)
        for entry in attention_types_in(config)
        if entry.name != BASELINE_ATTENTION
    ]
    if config.get("num_attention_heads", config.get("num_heads")) == 1:
        setups.append("single-head")
    if config.get("admin"):
        setups.append("admin")
    return setups or [tools_of(BASELINE_ATTENTION).card_section(config)]


def variant_fields(config: dict) -> tuple[str, ...]:
    """The config fields of the attention variants the checkpoint uses."""
    own = {name for entry in attention_types_in(config) for name in entry.config_fields}
    return tuple(k for k in config if k.endswith("attention_type") or k in own)


def identity_fields(*configs: dict) -> tuple[str, ...]:
    """The `config.json` fields that say which model a checkpoint is: model type, architecture, sizes
    (`STRUCTURE_FIELDS`) and the fields of the attention variants any of `configs` uses."""
    variant = dict.fromkeys(key for config in configs for key in variant_fields(config))
    return ("model_type", "architectures", *STRUCTURE_FIELDS, *variant)


__all__ = [
    "ATTENTION_TOOLS",
    "AttentionTools",
    "STRUCTURE_FIELDS",
    "attention_setups",
    "attention_types_in",
    "identity_fields",
    "register_attention_type",
    "tools_of",
    "variant_fields",
    "warm_start_help",
]
