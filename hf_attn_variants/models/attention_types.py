"""The attention types: each one's registration (`AttentionType`, `register_attention_type`: the package's own four
below their resolvers), the spec of a layer of it (`AttentionSpec` and its subclasses) and how a config's fields
resolve to that spec (`resolve_attention`), with the rules for which type each place of an encoder-decoder has.

This file is copied next to every saved checkpoint (remote code): it imports only the standard library, transformers
and its sibling `configuration_variant_attention` (the fields' schema, whose docstring it completes with the
registered types). A registration holds what a model of the type needs: its spec class and resolver, its warm start,
whether it serves as cross-attention, the fields and algorithms only it takes, its one-phrase help for the config
docstring, the name of its class in `attention_variants`. What only the package's tools read of a type (presets,
card text, paper) lives in the package, not here, so a checkpoint does not carry it.
"""

import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, fields

from .configuration_variant_attention import (
    ATTENTION_ALGORITHMS,
    DYNAMIC_PROJECTIONS,
    MIXTURE_INITS,
    PLACES,
    SYNTHESIZER_COMPONENTS,
    TALKING_HEADS_INITS,
    VARIANT_CONFIG_DEFAULTS,
    VariantAttentionFields,
)


# ----------------------------------------------------------------------------------------------- per-layer resolution
@dataclass(frozen=True)
class AttentionSpec:
    """What one attention layer needs to know, resolved and validated from a config (dot product uses it as is).

    `num_heads` h: logits/softmax heads; `num_key_heads` h_k and `num_value_heads` h_v; `key_head_size` d_k and
    `value_head_size` d_v; `scaling` the logits scale (None: d_k^-0.5; T5 uses 1.0); `hidden_size` the width of the
    query input and of the memory input.
    """

    attention_type: str
    hidden_size: int
    num_heads: int
    num_key_heads: int
    num_value_heads: int
    key_head_size: int
    value_head_size: int
    dropout: float
    is_causal: bool
    scaling: float | None = None
    recompute: bool = False
    algorithm: str = "auto"

    # which projections the family's attention module builds (transformers' names: query/key/value, T5's q/k/v)
    has_query = True
    has_key = True
    has_value = True

    @property
    def query_size(self) -> int:
        return self.num_key_heads * self.key_head_size

    @property
    def value_size(self) -> int:
        """Width of the attention output, the input of the output projection."""
        return self.num_value_heads * self.value_head_size


@dataclass(frozen=True)
class TalkingHeadsSpec(AttentionSpec):
    pre_softmax: bool = True
    post_softmax: bool = True
    talking_heads_init: str = "paper"
    dynamic: tuple[str, ...] = ()


@dataclass(frozen=True)
class SynthesizerSpec(AttentionSpec):
    components: tuple[str, ...] = ("dense",)
    max_position: int = 512
    random_trainable: bool = True
    random_offset: bool = False
    factorized_rank: int = 8
    dense_factors: tuple[int, int] = (16, 32)
    mixture_normalize: bool = True
    mixture_init: str = "uniform"

    @property
    def has_query(self) -> bool:  # a pure synthesizer has neither queries nor keys
        return "dot_product" in self.components

    has_key = has_query


@dataclass(frozen=True)
class GeneralBilinearSpec(AttentionSpec):
    """h full-width heads; the memory is the keys and the values (no key or value projection)."""

    has_key = False
    has_value = False


def _choice(field: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"`{field}`={value!r} is not supported; allowed values: {', '.join(map(repr, allowed))}.")


def _balanced_factors(n: int) -> tuple[int, int]:
    """The factor pair (a, b), a <= b, a * b = n, with a as close to sqrt(n) as possible."""
    a = int(math.isqrt(n))
    while n % a:
        a -= 1
    return a, n // a


def _head_width(config, field_name: str, heads: int) -> int:
    head_size = _field(config, "attention_head_size")
    if head_size is not None:
        return head_size
    if config.hidden_size % heads != 0:
        raise ValueError(
            f"The hidden size ({config.hidden_size}) is not a multiple of `{field_name}` ({heads}); choose a head "
            f"count that divides it or set `attention_head_size` explicitly."
        )
    return config.hidden_size // heads


def _heads_field(config, name: str) -> str:
    """The field that gave a head count: `name` where the user set it, else `num_attention_heads` (its default)."""
    return name if _field(config, name) else "num_attention_heads"


def _field(config, name):
    return getattr(config, name, VARIANT_CONFIG_DEFAULTS[name])


# A resolver returns the fields of its type's spec beyond `common` (the fields every type shares).
def _resolve_dot_product(config, common: dict) -> dict:
    size = _head_width(config, "num_attention_heads", common["num_heads"])
    return dict(
        num_key_heads=common["num_heads"],
        num_value_heads=common["num_heads"],
        key_head_size=size,
        value_head_size=size,
    )


def _resolve_talking_heads(config, common: dict) -> dict:
    heads = common["num_heads"]
    h_k = _field(config, "talking_heads_num_key_heads") or heads
    h_v = _field(config, "talking_heads_num_value_heads") or heads
    pre = bool(_field(config, "talking_heads_pre_softmax"))
    post = bool(_field(config, "talking_heads_post_softmax"))
    th_init = _field(config, "talking_heads_init")
    dynamic = tuple(_field(config, "talking_heads_dynamic") or ())
    _choice("talking_heads_init", th_init, TALKING_HEADS_INITS)
    if not pre and h_k != heads:
        raise ValueError(
            f"`talking_heads_pre_softmax`=False needs `talking_heads_num_key_heads` ({h_k}) equal to "
            f"`num_attention_heads` ({heads}): without the map the logits keep the key heads."
        )
    if not post and h_v != heads:
        raise ValueError(
            f"`talking_heads_post_softmax`=False needs `talking_heads_num_value_heads` ({h_v}) equal to "
            f"`num_attention_heads` ({heads}): without the map the weights keep the softmax heads."
        )
    if th_init == "identity" and ((pre and h_k != heads) or (post and h_v != heads)):
        raise ValueError(
            f"`talking_heads_init`='identity' needs square maps, i.e. `talking_heads_num_key_heads` ({h_k}) "
            f"and `talking_heads_num_value_heads` ({h_v}) equal to `num_attention_heads` ({heads}); "
            f"use `talking_heads_init`='paper'."
        )
    if any(d in dynamic for d in ("x2l", "m2l")) and not pre:
        raise ValueError("Dynamic logits projections (x2l, m2l) need `talking_heads_pre_softmax`=True.")
    if any(d in dynamic for d in ("x2w", "m2w")) and not post:
        raise ValueError("Dynamic weights projections (x2w, m2w) need `talking_heads_post_softmax`=True.")
    return dict(
        num_key_heads=h_k,
        num_value_heads=h_v,
        key_head_size=_head_width(config, _heads_field(config, "talking_heads_num_key_heads"), h_k),
        value_head_size=_head_width(config, _heads_field(config, "talking_heads_num_value_heads"), h_v),
        pre_softmax=pre,
        post_softmax=post,
        talking_heads_init=th_init,
        dynamic=dynamic,
    )


def _resolve_synthesizer(config, common: dict) -> dict:
    components = tuple(_field(config, "synthesizer_components") or ())
    if not components:
        raise ValueError(f"`synthesizer_components` is empty; name at least one of {SYNTHESIZER_COMPONENTS}.")
    for c in components:
        _choice("synthesizer_components", c, SYNTHESIZER_COMPONENTS)
    if len(set(components)) != len(components):
        raise ValueError(f"`synthesizer_components`={list(components)} names a component twice.")
    if components == ("dot_product",):
        raise ValueError(
            f"`synthesizer_components`=['dot_product'] is plain attention: use `attention_type`="
            f"{BASELINE_ATTENTION!r}, or add a synthetic component to mix with it."
        )
    max_position = _field(config, "synthesizer_max_position") or config.max_position_embeddings
    mixture_init = _field(config, "synthesizer_mixture_init")
    _choice("synthesizer_mixture_init", mixture_init, MIXTURE_INITS)
    if mixture_init == "dot_product" and "dot_product" not in components:
        raise ValueError(
            "`synthesizer_mixture_init`='dot_product' (warm start: the model equals dot-product attention at "
            "init) needs 'dot_product' among `synthesizer_components`."
        )
    factors = _field(config, "synthesizer_dense_factors")
    factors = tuple(factors) if factors else _balanced_factors(max_position)
    if "factorized_dense" in components and (len(factors) != 2 or factors[0] * factors[1] != max_position):
        raise ValueError(
            f"`synthesizer_dense_factors`={list(factors)} must be two integers whose product is the "
            f"synthesizer's maximum position ({max_position})."
        )
    random_offset = bool(_field(config, "synthesizer_random_offset"))
    if random_offset and "random" not in components:
        raise ValueError(
            "`synthesizer_random_offset`=True ties the Random maps to the offset, but `synthesizer_components`="
            f"{list(components)} has no 'random' component: add it, or drop `synthesizer_random_offset`."
        )
    rank = _field(config, "synthesizer_factorized_rank")
    if "factorized_random" in components and (not isinstance(rank, int) or rank < 1):
        raise ValueError(f"`synthesizer_factorized_rank` must be a positive integer, got {rank!r}.")
    size = _head_width(config, "num_attention_heads", common["num_heads"])
    return dict(
        num_key_heads=common["num_heads"],
        num_value_heads=common["num_heads"],
        key_head_size=size,
        value_head_size=size,
        components=components,
        max_position=max_position,
        random_trainable=bool(_field(config, "synthesizer_random_trainable")),
        random_offset=random_offset,
        factorized_rank=rank,
        dense_factors=factors,
        mixture_normalize=bool(_field(config, "synthesizer_mixture_normalize")),
        mixture_init=mixture_init,
    )


def _resolve_general_bilinear(config, common: dict) -> dict:
    head_size = _field(config, "attention_head_size")
    alias = "attention_head_size" in getattr(config, "attribute_map", {})  # T5: another name of d_kv, always set
    if head_size is not None and head_size != config.hidden_size and not alias:
        raise ValueError(
            f"`attention_type`={common['attention_type']!r} has heads of the full width ({config.hidden_size}): the "
            f"memory itself is the keys and values. Unset `attention_head_size` (got {head_size})."
        )
    d = config.hidden_size
    return dict(
        num_key_heads=common["num_heads"], num_value_heads=common["num_heads"], key_head_size=d, value_head_size=d
    )


# ------------------------------------------------------------------------------------------------ the attention types
@dataclass(frozen=True)
class AttentionType:
    """One attention type, registered once (`register_attention_type`): what a model of it needs. What only the
    package's tools read of it (presets, model card text, paper, warm-start help) is not here, so checkpoints do not
    carry it: `hf_attn_variants.attention_tools`.

    name: the value of `attention_type`.
    help: what it is, in a phrase (the config docstring, the tools' help texts and model cards).
    core: the class of its layers, a `VariantAttentionCore` subclass: the class's name in `attention_variants` for
        the package's own types (this file cannot import it), or the class itself for a type registered outside the
        package.
    spec: the `AttentionSpec` class of its layers (default: `AttentionSpec`, dot product's).
    resolve: `resolve(config, common)` -> the fields of `spec` beyond `common` (those every type shares); raises a
        `ValueError` naming the config field where the config cannot build the layer. Default: dot product's heads.
    warm_start: the config fields with which a layer of this type starts as ordinary dot-product attention, so a
        model loaded from a vanilla checkpoint computes its function (`from_pretrained`, `convert`); None where no
        such start exists.
    warm_start_needs: {list field: value} the warm start needs among a list field's values (a mixture starts as the
        dot product only when the dot product is one of its components).
    self_attention_only: why it serves as self-attention only ("": it serves as cross-attention too). A model of
        such a type attends across with the baseline, and asking for it there is refused with this reason.
    exclusive_fields: fields whose non-empty value needs this type in some place of the model (refused otherwise).
    algorithms: the values of `attention_algorithm` beyond "auto" that it computes with (empty: the field does not
        apply; dot product follows `attn_implementation`).
    field_prefix: the prefix of the config fields only this type reads (None: it has none).
    length_field: the config field that bounds the sequence length it attends over (None: no bound of its own).
    """

    name: str
    help: str
    core: str | type
    spec: type[AttentionSpec] = AttentionSpec
    resolve: Callable[[object, dict], dict] = _resolve_dot_product
    warm_start: dict | None = None
    warm_start_needs: dict[str, str] | None = None
    self_attention_only: str = ""
    exclusive_fields: tuple[str, ...] = ()
    algorithms: tuple[str, ...] = ()
    field_prefix: str | None = None
    length_field: str | None = None

    @property
    def config_fields(self) -> tuple[str, ...]:
        """The config fields only this type reads (those named with its `field_prefix`)."""
        prefix = self.field_prefix
        return tuple(f.name for f in fields(VariantAttentionFields) if prefix and f.name.startswith(prefix))


# attention_type -> its registration; the package's own types are registered below, the first being the baseline
ATTENTION_REGISTRY: dict[str, AttentionType] = {}


def register_attention_type(entry: AttentionType) -> AttentionType:
    """Register an attention type: from then on `attention_type=entry.name` builds layers of `entry.core` in every
    family (`hf_attn_variants.register_attention_type` also registers what the tools read of it). A checkpoint of a type registered outside the package
    loads only where the registration runs (its remote code holds the package's types).

    Raises a `ValueError` for a name already registered and for an entry that names what does not exist."""
    name, known = entry.name, {f.name for f in fields(VariantAttentionFields)}
    if name in ATTENTION_REGISTRY:
        raise ValueError(f"The attention type {name!r} is already registered; choose another name.")
    if not (isinstance(entry.spec, type) and issubclass(entry.spec, AttentionSpec)) or not entry.help:
        raise ValueError(
            f"Attention type {name!r}: give a one-phrase `help` and an `AttentionSpec` subclass as "
            f"`spec` (got {entry.spec!r})."
        )
    named = {*(entry.warm_start or {}), *(entry.warm_start_needs or {}), *entry.exclusive_fields, entry.length_field}
    if named - known - {None}:
        raise ValueError(
            f"Attention type {name!r} names {sorted(named - known - {None})}, which are not attention "
            "config fields (`VariantAttentionFields`)."
        )
    own = {*entry.exclusive_fields, entry.length_field} - {None}
    if not own <= set(entry.config_fields):
        raise ValueError(
            f"Attention type {name!r}: {sorted(own - set(entry.config_fields))} must be fields of its "
            f"own, named with its `field_prefix` ({entry.field_prefix!r})."
        )
    if not set(entry.algorithms) <= set(ATTENTION_ALGORITHMS[1:]):
        raise ValueError(f"Attention type {name!r}: `algorithms` must be among {ATTENTION_ALGORITHMS[1:]}.")
    ATTENTION_REGISTRY[name] = entry
    return entry


register_attention_type(
    AttentionType(
        "dot_product",
        "ordinary scaled dot-product multi-head attention, as in the upstream model",
        core="DotProductAttention",
        warm_start={},
    )
)
register_attention_type(
    AttentionType(
        "talking_heads",
        "talking-heads attention, learned maps across the heads before and after the softmax",
        core="TalkingHeadsAttention",
        spec=TalkingHeadsSpec,
        resolve=_resolve_talking_heads,
        warm_start={"talking_heads_init": "identity"},  # P_l = P_w = I: plain multi-head attention
        exclusive_fields=("talking_heads_dynamic",),
        algorithms=ATTENTION_ALGORITHMS[1:],
        field_prefix="talking_heads_",
    )
)
register_attention_type(
    AttentionType(
        "synthesizer",
        "Synthesizer attention, weights synthesized without query-key dot products or mixed with them "
        "(self-attention only)",
        core="SynthesizerAttention",
        spec=SynthesizerSpec,
        resolve=_resolve_synthesizer,
        warm_start={"synthesizer_mixture_init": "dot_product"},  # dot product weight 1, synthetic weights 0
        warm_start_needs={"synthesizer_components": "dot_product"},
        self_attention_only="a synthetic alignment between the decoder and an encoder sequence of unrelated length has "
        "no meaning",
        field_prefix="synthesizer_",
        length_field="synthesizer_max_position",
    )
)
register_attention_type(
    AttentionType(
        "general_bilinear",
        "general bilinear attention, h heads each a full d x d bilinear form (no key or value "
        "projection, the memory itself is the keys and the values)",
        core="GeneralBilinearAttention",
        spec=GeneralBilinearSpec,
        resolve=_resolve_general_bilinear,
    )
)
ATTENTION_TYPES = tuple(ATTENTION_REGISTRY)  # the package's own types, in order (a later registration is not here)
# ordinary attention, the default: what a self-attention-only type's model attends across with, what convert starts
# from and what an Admin model exports to
BASELINE_ATTENTION = VARIANT_CONFIG_DEFAULTS["attention_type"]


def describe_attention_types() -> str:
    """ "name: help; ..." for every registered attention type, for help texts."""
    return "; ".join(f"{name}: {entry.help}" for name, entry in ATTENTION_REGISTRY.items())


VariantAttentionFields.__doc__ = VariantAttentionFields.__doc__.replace(
    "ATTENTION_TYPES_HELP",
    "One of:"
    + "".join(
        "\n"
        + textwrap.fill(
            f'`"{name}"`: {entry.help}.', width=120, initial_indent=" " * 12 + "- ", subsequent_indent=" " * 14
        )
        for name, entry in ATTENTION_REGISTRY.items()
    ),
)
VARIANT_CONFIG_DOCSTRING = VariantAttentionFields.__doc__


def cross_attention_type(attention_type: str, *, explicit: bool = False) -> str:
    """The attention type of a cross-attention layer in a model of `attention_type`: the type itself, or the
    baseline for a self-attention-only type (a synthesizer). `explicit` (the type was asked for by name, e.g. as
    `cross_attention_type`): a self-attention-only type is refused instead."""
    entry = ATTENTION_REGISTRY.get(attention_type)
    if entry is None or not entry.self_attention_only:  # an unknown name is refused where the layer is resolved
        return attention_type
    if explicit:
        allowed = [name for name, other in ATTENTION_REGISTRY.items() if not other.self_attention_only]
        raise ValueError(
            f"`cross_attention_type`={attention_type!r} is not supported: {entry.self_attention_only}; use "
            f"{', '.join(map(repr, allowed))}."
        )
    return BASELINE_ATTENTION


def place_attention_type(config, place: str) -> str:
    """The attention type of `place` ("encoder", "decoder" or "cross") in a family that chooses per place: its
    `{place}_attention_type`, else `attention_type`; across, as `cross_attention_type` rules."""
    _choice("place", place, PLACES)
    explicit = getattr(config, f"{place}_attention_type", None)
    attention_type = config.attention_type if explicit is None else explicit
    if place == "cross":
        return cross_attention_type(attention_type, explicit=explicit is not None)
    return attention_type


def resolve_attention(
    config,
    *,
    is_causal: bool = False,
    is_cross_attention: bool = False,
    attention_type=None,
    scaling: float | None = None,
) -> AttentionSpec:
    """The `AttentionSpec` of one layer (`attention_type` overrides the config's, for a family that chooses per
    place). A cross-attention layer's type is `cross_attention_type`'s (a synthesizer model attends across with dot
    product). `scaling` replaces d_k^-0.5 (T5 uses 1.0)."""
    attention_type = attention_type or _field(config, "attention_type")
    _choice("attention_type", attention_type, ATTENTION_REGISTRY)
    if is_cross_attention:
        attention_type = cross_attention_type(attention_type)
    used = {_field(config, "attention_type"), *(getattr(config, f"{p}_attention_type", None) for p in PLACES)}
    for entry in ATTENTION_REGISTRY.values():
        for name in entry.exclusive_fields:
            value = _field(config, name)
            if value and entry.name not in used:
                raise ValueError(
                    f"`{name}`={value!r} needs `attention_type`={entry.name!r} (got "
                    f"{_field(config, 'attention_type')!r}); set `{name}`={VARIANT_CONFIG_DEFAULTS[name]!r} or switch "
                    "the attention type."
                )
    algorithm = _field(config, "attention_algorithm")
    _choice("attention_algorithm", algorithm, ATTENTION_ALGORITHMS)
    if algorithm != "auto" and not any(
        algorithm in getattr(ATTENTION_REGISTRY.get(t), "algorithms", ()) for t in used
    ):
        takers = [name for name, entry in ATTENTION_REGISTRY.items() if algorithm in entry.algorithms]
        raise ValueError(
            f"`attention_algorithm`={algorithm!r} applies to attention_type {', '.join(map(repr, takers))}, which no "
            f"place of this model uses (got {_field(config, 'attention_type')!r}); set `attention_algorithm`='auto' "
            "(dot product chooses its kernel by `attn_implementation`)."
        )
    dynamic = tuple(_field(config, "talking_heads_dynamic") or ())
    for name in dynamic:
        _choice("talking_heads_dynamic", name, DYNAMIC_PROJECTIONS)
    if len(set(dynamic)) != len(dynamic):
        raise ValueError(f"`talking_heads_dynamic`={list(dynamic)} names a projection twice.")
    heads = config.num_attention_heads
    if not isinstance(heads, int) or heads < 1:
        raise ValueError(f"`num_attention_heads` must be a positive integer, got {heads!r}.")
    head_size = _field(config, "attention_head_size")
    if head_size is not None and (not isinstance(head_size, int) or head_size < 1):
        raise ValueError(f"`attention_head_size` must be a positive integer or None, got {head_size!r}.")
    common = dict(
        attention_type=attention_type,
        hidden_size=config.hidden_size,
        num_heads=heads,
        dropout=config.attention_probs_dropout_prob,
        is_causal=is_causal,
        scaling=scaling,
        recompute=bool(_field(config, "attention_recompute")),
        algorithm=algorithm,
    )
    entry = ATTENTION_REGISTRY[attention_type]
    return entry.spec(**common, **entry.resolve(config, common))


__all__ = [
    "ATTENTION_REGISTRY",
    "ATTENTION_TYPES",
    "AttentionSpec",
    "AttentionType",
    "BASELINE_ATTENTION",
    "VARIANT_CONFIG_DOCSTRING",
    "cross_attention_type",
    "describe_attention_types",
    "place_attention_type",
    "register_attention_type",
    "resolve_attention",
]
