"""Named model presets: a family, a size and an attention setup, e.g. ``"bert-mini-talking-heads"``. Package-only.

    from hf_attn_variants.presets import preset_config, PRESETS
    config = preset_config("bert-mini-talking-heads", vocab_size=8000)

Sizes follow the miniature BERTs of Turc et al. (2019) and the T5 paper (tiny/mini are CPU smoke-test sizes); the
attention setups are the ones the three papers compare. ``PRESETS`` maps every valid name to its `Preset`, which
also says which paper the attention comes from (used by the example scripts and the model cards).
"""

from dataclasses import dataclass

from .admin import single_head_twin
from .configuration_variant_albert import VariantAlbertConfig
from .configuration_variant_bert import VariantBertConfig
from .configuration_variant_t5 import VariantT5Config

CONFIG_CLASSES = {"bert": VariantBertConfig, "albert": VariantAlbertConfig, "t5": VariantT5Config}

# (layers, width, heads): the Turc et al. grid for BERT/ALBERT; t5-small/t5-base widths for T5 small/base.
SIZES = {
    "bert": {
        "tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512,
                     max_position_embeddings=128),
        "mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024,
                     max_position_embeddings=128),
        "small": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8, intermediate_size=2048),
        "base": dict(),
    },
    "albert": {
        "tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512,
                     embedding_size=64, max_position_embeddings=128),
        "mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024,
                     embedding_size=128, max_position_embeddings=128),
        "small": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8, intermediate_size=2048,
                      embedding_size=128),
        "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                     embedding_size=128),
    },
    "t5": {
        "tiny": dict(num_layers=2, num_decoder_layers=2, d_model=128, num_heads=2, d_kv=64, d_ff=512,
                     synthesizer_max_position=128),
        "mini": dict(num_layers=4, num_decoder_layers=4, d_model=256, num_heads=4, d_kv=64, d_ff=1024,
                     synthesizer_max_position=128),
        "small": dict(num_layers=6, num_decoder_layers=6, d_model=512, num_heads=8, d_kv=64, d_ff=2048),
        "base": dict(num_layers=12, num_decoder_layers=12, d_model=768, num_heads=12, d_kv=64, d_ff=3072),
    },
}

TALKING_HEADS = "Talking-Heads Attention (Shazeer et al., 2020)"
SYNTHESIZER = "Synthesizer: Rethinking Self-Attention for Transformer Models (Tay et al., 2021)"
SINGLE_HEAD = "Multi-head or Single-head? An Empirical Comparison for Transformer Training (Liu et al., 2021)"
ADMIN = "Understanding the Difficulty of Training Transformers (Admin; Liu et al., 2020)"

# name -> (config fields, papers). "single-head" is resolved per family below (deep twin; + Admin where Post-LN).
ATTENTION = {
    "dot-product": (dict(attention_type="dot_product"), ()),
    "talking-heads": (dict(attention_type="talking_heads", talking_heads_init="paper"), (TALKING_HEADS,)),
    "synthesizer-dense": (dict(attention_type="synthesizer", synthesizer_components=["dense"]), (SYNTHESIZER,)),
    "synthesizer-random": (dict(attention_type="synthesizer", synthesizer_components=["random"]), (SYNTHESIZER,)),
    "synthesizer-mixture": (
        dict(attention_type="synthesizer", synthesizer_components=["dot_product", "random"]), (SYNTHESIZER,)
    ),
    "general-bilinear": (dict(attention_type="general_bilinear"), (TALKING_HEADS,)),
    "single-head-admin": (dict(admin=True), (SINGLE_HEAD, ADMIN)),
    "single-head": (dict(), (SINGLE_HEAD,)),
}


@dataclass(frozen=True)
class Preset:
    name: str
    family: str
    size: str
    attention: str
    papers: tuple[str, ...]


def _presets() -> dict[str, Preset]:
    presets = {}
    for family, sizes in SIZES.items():
        for size in sizes:
            for attention, (_, papers) in ATTENTION.items():
                # Admin is for Post-LN residuals: T5 (Pre-LN) gets its plain deep single-head twin instead.
                if attention == ("single-head-admin" if family == "t5" else "single-head"):
                    continue
                name = f"{family}-{size}-{attention}"
                presets[name] = Preset(name, family, size, attention, papers)
    return presets


PRESETS = _presets()


def preset_config(name: str, **overrides):
    """The config of preset `name` (see `PRESETS`), with `overrides` (any config field) applied last."""
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}. Choose one of: {', '.join(PRESETS)}.")
    preset = PRESETS[name]
    config_class = CONFIG_CLASSES[preset.family]
    fields, _ = ATTENTION[preset.attention]
    known = set(config_class().to_dict()) | set(config_class.attribute_map)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"{name}: {config_class.__name__} has no field(s) {', '.join(unknown)}.")
    config = config_class(**{**SIZES[preset.family][preset.size], **fields, **overrides})
    if preset.attention.startswith("single-head"):
        config, _ = single_head_twin(config)
    return config


__all__ = ["ATTENTION", "PRESETS", "Preset", "SIZES", "preset_config"]
