"""Named model presets: a family, a size and an attention setup, e.g. ``"bert-mini-talking-heads"``. Package-only.

    from hf_attn_variants.presets import preset_config, PRESETS
    config = preset_config("bert-mini-talking-heads", vocab_size=8000)

Sizes follow the miniature BERTs of Turc et al. (2019) and the T5 paper (tiny/mini are CPU smoke-test sizes); the
attention setups are the ones the three papers compare. ``PRESETS`` maps every valid name to its `Preset`, which
also says which paper the attention comes from (used by the example scripts and the model cards).
"""

import copy
from dataclasses import dataclass

import torch

from .attention_tools import tools_of
from .families import FAMILIES, family_of
from .models.attention_types import ATTENTION_REGISTRY

# (layers, width, heads): the Turc et al. grid for BERT/ALBERT; t5-small/t5-base widths for T5 small/base.
SIZES = {
    "bert": {
        "tiny": dict(
            num_hidden_layers=2,
            hidden_size=128,
            num_attention_heads=2,
            intermediate_size=512,
            max_position_embeddings=128,
        ),
        "mini": dict(
            num_hidden_layers=4,
            hidden_size=256,
            num_attention_heads=4,
            intermediate_size=1024,
            max_position_embeddings=128,
        ),
        "small": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8, intermediate_size=2048),
        "base": {},
    },
    "albert": {
        "tiny": dict(
            num_hidden_layers=2,
            hidden_size=128,
            num_attention_heads=2,
            intermediate_size=512,
            embedding_size=64,
            max_position_embeddings=128,
        ),
        "mini": dict(
            num_hidden_layers=4,
            hidden_size=256,
            num_attention_heads=4,
            intermediate_size=1024,
            embedding_size=128,
            max_position_embeddings=128,
        ),
        "small": dict(
            num_hidden_layers=4, hidden_size=512, num_attention_heads=8, intermediate_size=2048, embedding_size=128
        ),
        "base": dict(
            num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072, embedding_size=128
        ),
    },
    "t5": {
        "tiny": dict(
            num_layers=2,
            num_decoder_layers=2,
            d_model=128,
            num_heads=2,
            d_kv=64,
            d_ff=512,
            synthesizer_max_position=128,
        ),
        "mini": dict(
            num_layers=4,
            num_decoder_layers=4,
            d_model=256,
            num_heads=4,
            d_kv=64,
            d_ff=1024,
            synthesizer_max_position=128,
        ),
        "small": dict(num_layers=6, num_decoder_layers=6, d_model=512, num_heads=8, d_kv=64, d_ff=2048),
        "base": dict(num_layers=12, num_decoder_layers=12, d_model=768, num_heads=12, d_kv=64, d_ff=3072),
    },
}

SINGLE_HEAD = "Multi-head or Single-head? An Empirical Comparison for Transformer Training (Liu et al., 2021)"
ADMIN = "Understanding the Difficulty of Training Transformers (Admin; Liu et al., 2020)"

# name -> (config fields, papers): each attention type's setups (its `AttentionTools.presets`), then the deep
# single-head twins, resolved per family below (+ Admin where Post-LN).
ATTENTION = {
    **{
        setup: ({"attention_type": name, **copy.deepcopy(fields)}, (tools.paper,) if tools.paper else ())
        for name, tools in ((name, tools_of(name)) for name in ATTENTION_REGISTRY)
        for setup, fields in tools.presets.items()
    },
    "single-head-admin": (dict(admin=True), (SINGLE_HEAD, ADMIN)),
    "single-head": ({}, (SINGLE_HEAD,)),
}


@dataclass(frozen=True)
class Preset:
    name: str
    family: str
    size: str
    attention: str
    papers: tuple[str, ...]


def attention_setups_of(family: str) -> tuple[str, ...]:
    """The attention setups (keys of `ATTENTION`) with a preset in `family`: all but one single-head twin, since
    Admin is for Post-LN residuals and a Pre-LN family (T5) gets its plain deep single-head twin instead."""
    skipped = "single-head" if FAMILIES[family].post_ln else "single-head-admin"
    return tuple(setup for setup in ATTENTION if setup != skipped)


def _presets() -> dict[str, Preset]:
    presets = {}
    for family, sizes in SIZES.items():
        for size in sizes:
            for attention in attention_setups_of(family):
                name = f"{family}-{size}-{attention}"
                presets[name] = Preset(name, family, size, attention, ATTENTION[attention][1])
    return presets


PRESETS = _presets()


def _count_parameters(model_class, config) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in model_class(config).parameters())


def single_head_twin(config, model_class=None):
    """The deep single-head twin of a multi-head config (BERT, ALBERT or T5) and both parameter counts.

    L layers of h heads with head size d_h and feed-forward f become L*h layers of one head of size d_h and
    feed-forward f/h: the same number of attention heads in total and about the same size (Liu et al. 2021:
    BERT-base 12x12 -> 144x1, BERT-large 24x16 -> 384x1). ALBERT shares G layer groups across its depth, so its twin
    has G*h groups of one-head layers, each shared across L/G consecutive layers as before (one shared layer would
    shrink the model h-fold). T5 deepens its encoder and decoder alike. Returns (twin_config, {"multi_head": n, "single_head":
    n_twin, "ratio": n_twin / n}); counts are of `model_class` (default: the family's base model) built on the
    meta device, so nothing is allocated.
    """
    family = family_of(config)
    heads, ffn = getattr(config, family.heads_field), getattr(config, family.ffn_field)
    if ffn % heads:
        raise ValueError(
            f"`{family.ffn_field}` ({ffn}) is not a multiple of `{family.heads_field}` ({heads}): the twin's "
            "feed-forward width f/h would not be whole."
        )
    twin = copy.deepcopy(config)
    twin.talking_heads_num_key_heads = twin.talking_heads_num_value_heads = None  # one head everywhere
    # the head size stays (explicit, since width / 1 head would be the whole width; T5's is d_kv already)
    twin.attention_head_size = getattr(config, "attention_head_size", None) or config.hidden_size // heads
    setattr(twin, family.heads_field, 1)
    setattr(twin, family.ffn_field, ffn // heads)
    for name in family.depth_fields:  # layers (ALBERT: and layer groups, so the shared layers keep the size)
        setattr(twin, name, getattr(config, name) * heads)
    if model_class is None:
        import hf_attn_variants

        model_class = getattr(hf_attn_variants, family.base_model)
    counts = {
        "multi_head": _count_parameters(model_class, config),
        "single_head": _count_parameters(model_class, twin),
    }
    counts["ratio"] = counts["single_head"] / counts["multi_head"]
    return twin, counts


def preset_config(name: str, **overrides):
    """The config of preset `name` (see `PRESETS`), with `overrides` (any config field) applied last."""
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}. Choose one of: {', '.join(PRESETS)}.")
    preset = PRESETS[name]
    config_class = FAMILIES[preset.family].config_class
    fields, _ = ATTENTION[preset.attention]
    known = set(config_class().to_dict()) | set(config_class.attribute_map)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"{name}: {config_class.__name__} has no field(s) {', '.join(unknown)}.")
    config = config_class(**{**SIZES[preset.family][preset.size], **fields, **overrides})
    if preset.attention.startswith("single-head"):
        config, _ = single_head_twin(config)
    return config


__all__ = ["ATTENTION", "PRESETS", "Preset", "SIZES", "attention_setups_of", "preset_config", "single_head_twin"]
