"""The attention mathematics shared by every family: dot product, talking heads, Synthesizer.

This file is copied next to every saved checkpoint (remote code), so it imports only torch and public
transformers API, never a sibling of ours.

A family's attention module keeps its own query/key/value/output projections, named as in the upstream
transformers model (so vanilla checkpoints load), and hands the projected heads to :class:`VariantAttentionCore`,
which owns every parameter that a variant adds and does the rest:

    dot_product    softmax(q k^T * s + mask) v, dispatched to ``ALL_ATTENTION_FUNCTIONS`` (SDPA) when nothing needs
                   the weights, else computed eagerly exactly as transformers' ``eager_attention_forward``.
    talking_heads  J = q k^T * s over h_k heads; L = J P_l (+ dynamic terms) over h heads; + mask (+ position bias);
                   W = softmax(L); U = W P_w (+ dynamic terms) over h_v heads; dropout(U) v.  (Shazeer et al. 2020)
    synthesizer    logits = sum_c alpha_c S_c over components (dense, random, factorized_dense, factorized_random,
                   dot_product) + mask; softmax; dropout; v.  (Tay et al. 2020)

Shapes: b batch, n query length, m key length, h_k/h/h_v key, softmax and value heads, d_k/d_v head sizes.
"""

import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import transformers
from torch import nn
from torch.utils.checkpoint import checkpoint

# The transformers releases this code is tested with (pyproject.toml declares the same range). Every modeling and
# configuration file, and the package, imports this module first, and the check runs before any other transformers
# import: an older release is refused here with what to install, not with an ImportError deep inside loading (or,
# worse, wrong outputs: before 5.14 transformers' SDPA silently drops T5's relative position bias).
SUPPORTED_TRANSFORMERS = "transformers>=5.14,<6"
_TRANSFORMERS_VERSION = tuple(int(part) for part in re.match(r"(\d+)\.(\d+)", transformers.__version__).groups())
if _TRANSFORMERS_VERSION < (5, 14):
    raise ImportError(
        f"hf-attn-variants models need {SUPPORTED_TRANSFORMERS}, found transformers {transformers.__version__}. "
        f"Upgrade with: pip install '{SUPPORTED_TRANSFORMERS}'. (transformers 4.x cannot load these models: they are "
        "built on the v5 model API.)"
    )
if _TRANSFORMERS_VERSION >= (6, 0):
    warnings.warn(
        f"hf-attn-variants models are tested with {SUPPORTED_TRANSFORMERS}, found transformers "
        f"{transformers.__version__}; if loading or outputs fail, install '{SUPPORTED_TRANSFORMERS}'.",
        stacklevel=2,
    )

from transformers import initialization as init  # noqa: E402  (after the version check, on purpose)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # noqa: E402

ATTENTION_TYPES = ("dot_product", "talking_heads", "synthesizer")
SYNTHESIZER_COMPONENTS = ("dot_product", "dense", "random", "factorized_dense", "factorized_random")
DYNAMIC_PROJECTIONS = ("x2l", "m2l", "x2w", "m2w")
TALKING_HEADS_INITS = ("identity", "paper")
MIXTURE_INITS = ("uniform", "dot_product")
PLACES = ("encoder", "decoder", "cross")  # where an encoder-decoder family may choose the attention per place
# synthesizer components that fold into one SDPA call (see VariantAttentionCore._synthesizer_sdpa)
_SDPA_FOLDABLE = frozenset({"dot_product", "dense", "factorized_random", "random"})


# The config fields every family adds, with their defaults (the families' configs take them as keyword arguments).
VARIANT_CONFIG_DEFAULTS = {
    "attention_type": "dot_product",
    "attention_head_size": None,
    "attention_recompute": False,
    "talking_heads_num_key_heads": None,
    "talking_heads_num_value_heads": None,
    "talking_heads_pre_softmax": True,
    "talking_heads_post_softmax": True,
    "talking_heads_init": "paper",
    "talking_heads_dynamic": [],
    "synthesizer_components": ["dense"],
    "synthesizer_max_position": None,
    "synthesizer_random_trainable": True,
    "synthesizer_factorized_rank": 8,
    "synthesizer_dense_factors": None,
    "synthesizer_mixture_normalize": True,
    "synthesizer_mixture_init": "uniform",
    "admin": False,
}

VARIANT_CONFIG_DOCSTRING = """
        attention_type (`str`, defaults to `"dot_product"`):
            `"dot_product"`, `"talking_heads"` or `"synthesizer"`.
        attention_head_size (`int`, *optional*):
            Size of each query/key/value head. Defaults to `hidden_size // heads` (for talking heads, `hidden_size //
            h_k` for queries/keys and `hidden_size // h_v` for values), so the projections keep the upstream shapes.
        attention_recompute (`bool`, defaults to `False`):
            Recompute the attention core (logits, softmax, head maps) in the backward pass instead of storing it:
            less activation memory for some extra compute. Talking heads and eager synthesizers.
        talking_heads_num_key_heads (`int`, *optional*):
            h_k, the query/key heads. Defaults to `num_attention_heads` (h, the logits/softmax heads).
        talking_heads_num_value_heads (`int`, *optional*):
            h_v, the value heads. Defaults to `num_attention_heads`.
        talking_heads_pre_softmax (`bool`, defaults to `True`):
            Learn the map P_l[h_k, h] across heads applied to the logits before the softmax.
        talking_heads_post_softmax (`bool`, defaults to `True`):
            Learn the map P_w[h, h_v] across heads applied to the weights after the softmax.
        talking_heads_init (`str`, defaults to `"paper"`):
            `"paper"`: truncated normal with std 1/sqrt(h_in), as the original code. `"identity"`: the model equals
            ordinary multi-head attention at init (needs h_k = h = h_v); use it to warm-start from a vanilla checkpoint.
        talking_heads_dynamic (`list[str]`, defaults to `[]`):
            Input-dependent projections added to the static maps, any subset of `"x2l"`, `"m2l"` (logits, from the
            query input and the memory input) and `"x2w"`, `"m2w"` (weights).
        synthesizer_components (`list[str]`, defaults to `["dense"]`):
            The synthetic attention(s): `"dense"`, `"random"`, `"factorized_dense"`, `"factorized_random"`, and
            `"dot_product"` to mix with ordinary attention. Two or more components form a learned mixture.
        synthesizer_max_position (`int`, *optional*):
            The longest sequence a synthesizer attends over. Defaults to `max_position_embeddings`.
        synthesizer_random_trainable (`bool`, defaults to `True`):
            Train the random (and factorized random) matrices; `False` keeps them fixed (still saved).
        synthesizer_factorized_rank (`int`, defaults to 8):
            Rank k of the factorized random synthesizer R = R1 R2^T.
        synthesizer_dense_factors (`list[int]`, *optional*):
            (a, b) with a * b = `synthesizer_max_position` for the factorized dense synthesizer. Defaults to the
            most balanced pair.
        synthesizer_mixture_normalize (`bool`, defaults to `True`):
            Mixture weights that sum to one (the paper's form), as `alpha = w + (1 - sum(w)) / C` for the C learned
            weights `w` (no division: every value of `w` is valid); `False` uses `w` as it is.
        synthesizer_mixture_init (`str`, defaults to `"uniform"`):
            `"uniform"`: every component starts at the same weight. `"dot_product"`: the dot product starts at 1 and
            the synthetic components at 0, so a model warm-started from a vanilla checkpoint equals it at init and
            the synthetic weights still learn.
        admin (`bool`, defaults to `False`):
            Admin residuals (Liu et al. 2020) in a Post-LN family: each residual becomes `LN(omega * x + f(x))` with a
            per-width parameter `omega` that starts at 1 (the ordinary model, exactly); `hf_attn_variants.admin`
            profiles a batch to set it. T5 is Pre-LN and refuses it.
"""


def pop_variant_config(kwargs: dict) -> dict:
    """Take the variant fields out of a config's keyword arguments, defaults filled in, lists copied."""
    fields = {name: kwargs.pop(name, default) for name, default in VARIANT_CONFIG_DEFAULTS.items()}
    for name in ("talking_heads_dynamic", "synthesizer_components", "synthesizer_dense_factors"):
        value = fields[name]
        fields[name] = list(value) if value is not None else None
    if fields["talking_heads_dynamic"] is None:
        fields["talking_heads_dynamic"] = []
    if fields["synthesizer_components"] is None:  # an empty list stays empty: the model refuses it when built
        fields["synthesizer_components"] = list(VARIANT_CONFIG_DEFAULTS["synthesizer_components"])
    return fields


def _choice(field: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"`{field}`={value!r} is not supported; allowed values: {', '.join(map(repr, allowed))}.")


def _balanced_factors(n: int) -> tuple[int, int]:
    """The factor pair (a, b), a <= b, a * b = n, with a as close to sqrt(n) as possible."""
    a = int(math.isqrt(n))
    while n % a:
        a -= 1
    return a, n // a


@dataclass(frozen=True)
class AttentionSpec:
    """Everything one attention layer needs to know, resolved and validated from a config.

    Built by :meth:`from_config` when a layer is built, so an impossible configuration raises a ``ValueError``
    naming the field there (as transformers' own BERT does), while the config itself always constructs.
    """

    attention_type: str
    hidden_size: int  # width of the query input and of the memory input
    num_heads: int  # h: logits / softmax heads
    num_key_heads: int  # h_k: query/key heads
    num_value_heads: int  # h_v: value heads
    key_head_size: int  # d_k
    value_head_size: int  # d_v
    dropout: float
    is_causal: bool
    scaling: float | None = None  # logits scale; None: d_k^-0.5 (T5 uses 1.0)
    recompute: bool = False
    # talking heads
    pre_softmax: bool = True
    post_softmax: bool = True
    talking_heads_init: str = "paper"
    dynamic: tuple[str, ...] = ()
    # synthesizer
    components: tuple[str, ...] = ()
    max_position: int = 512
    random_trainable: bool = True
    factorized_rank: int = 8
    dense_factors: tuple[int, int] = (16, 32)
    mixture_normalize: bool = True
    mixture_init: str = "uniform"

    @property
    def uses_query_key(self) -> bool:
        """Whether the layer has query and key projections (pure synthesizers have none)."""
        return self.attention_type != "synthesizer" or "dot_product" in self.components

    @property
    def query_size(self) -> int:
        return self.num_key_heads * self.key_head_size

    @property
    def value_size(self) -> int:
        return self.num_value_heads * self.value_head_size

    @classmethod
    def from_config(cls, config, *, is_causal: bool = False, is_cross_attention: bool = False, attention_type=None,
                    scaling: float | None = None):
        """Resolve the attention of one layer (`attention_type` overrides the config's, for a family that chooses
        per place). Cross-attention has no synthetic form: a synthesizer model's cross-attention is dot-product
        attention (talking heads stay talking heads there). `scaling` replaces d_k^-0.5 (T5 uses 1.0)."""

        def field(name):
            return getattr(config, name, VARIANT_CONFIG_DEFAULTS[name])

        hidden = config.hidden_size
        heads = config.num_attention_heads
        attention_type = attention_type or field("attention_type")
        _choice("attention_type", attention_type, ATTENTION_TYPES)
        if is_cross_attention and attention_type == "synthesizer":
            attention_type = "dot_product"
        dynamic = tuple(field("talking_heads_dynamic") or ())
        places = {field("attention_type"), *(getattr(config, f"{p}_attention_type", None) for p in PLACES)}
        if dynamic and "talking_heads" not in places:
            raise ValueError(
                f"`talking_heads_dynamic`={list(dynamic)} needs `attention_type`='talking_heads' "
                f"(got {field('attention_type')!r}); set `talking_heads_dynamic`=[] or switch the attention type."
            )
        for name in dynamic:
            _choice("talking_heads_dynamic", name, DYNAMIC_PROJECTIONS)
        if len(set(dynamic)) != len(dynamic):
            raise ValueError(f"`talking_heads_dynamic`={list(dynamic)} names a projection twice.")
        if not isinstance(heads, int) or heads < 1:
            raise ValueError(f"`num_attention_heads` must be a positive integer, got {heads!r}.")

        head_size = field("attention_head_size")

        def width(field, n):
            if head_size is not None:
                return head_size
            if hidden % n != 0:
                raise ValueError(
                    f"The hidden size ({hidden}) is not a multiple of `{field}` ({n}); choose a head count that "
                    f"divides it or set `attention_head_size` explicitly."
                )
            return hidden // n

        if head_size is not None and (not isinstance(head_size, int) or head_size < 1):
            raise ValueError(f"`attention_head_size` must be a positive integer or None, got {head_size!r}.")
        common = dict(
            hidden_size=hidden,
            num_heads=heads,
            dropout=config.attention_probs_dropout_prob,
            is_causal=is_causal,
            scaling=scaling,
            recompute=bool(field("attention_recompute")),
        )
        if attention_type != "talking_heads":
            size = width("num_attention_heads", heads)
            common.update(num_key_heads=heads, num_value_heads=heads, key_head_size=size, value_head_size=size)
        if attention_type == "dot_product":
            return cls(attention_type="dot_product", **common)
        if attention_type == "talking_heads":
            h_k = field("talking_heads_num_key_heads") or heads
            h_v = field("talking_heads_num_value_heads") or heads
            pre = bool(field("talking_heads_pre_softmax"))
            post = bool(field("talking_heads_post_softmax"))
            th_init = field("talking_heads_init")
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
            return cls(
                attention_type="talking_heads",
                **common,
                num_key_heads=h_k,
                num_value_heads=h_v,
                key_head_size=width("talking_heads_num_key_heads", h_k),
                value_head_size=width("talking_heads_num_value_heads", h_v),
                pre_softmax=pre,
                post_softmax=post,
                talking_heads_init=th_init,
                dynamic=dynamic,
            )
        # synthesizer
        components = tuple(field("synthesizer_components") or ())
        if not components:
            raise ValueError("`synthesizer_components` is empty; name at least one of " f"{SYNTHESIZER_COMPONENTS}.")
        for c in components:
            _choice("synthesizer_components", c, SYNTHESIZER_COMPONENTS)
        if len(set(components)) != len(components):
            raise ValueError(f"`synthesizer_components`={list(components)} names a component twice.")
        if components == ("dot_product",):
            raise ValueError(
                "`synthesizer_components`=['dot_product'] is plain attention: use `attention_type`='dot_product', "
                "or add a synthetic component to mix with it."
            )
        max_position = field("synthesizer_max_position") or config.max_position_embeddings
        mixture_init = field("synthesizer_mixture_init")
        _choice("synthesizer_mixture_init", mixture_init, MIXTURE_INITS)
        if mixture_init == "dot_product" and "dot_product" not in components:
            raise ValueError(
                "`synthesizer_mixture_init`='dot_product' (warm start: the model equals dot-product attention at "
                "init) needs 'dot_product' among `synthesizer_components`."
            )
        factors = field("synthesizer_dense_factors")
        factors = tuple(factors) if factors else _balanced_factors(max_position)
        if "factorized_dense" in components and (len(factors) != 2 or factors[0] * factors[1] != max_position):
            raise ValueError(
                f"`synthesizer_dense_factors`={list(factors)} must be two integers whose product is the "
                f"synthesizer's maximum position ({max_position})."
            )
        rank = field("synthesizer_factorized_rank")
        if "factorized_random" in components and (not isinstance(rank, int) or rank < 1):
            raise ValueError(f"`synthesizer_factorized_rank` must be a positive integer, got {rank!r}.")
        return cls(
            attention_type="synthesizer",
            **common,
            components=components,
            max_position=max_position,
            random_trainable=bool(field("synthesizer_random_trainable")),
            factorized_rank=rank,
            dense_factors=factors,
            mixture_normalize=bool(field("synthesizer_mixture_normalize")),
            mixture_init=mixture_init,
        )


def additive_mask(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A transformers mask (float additive, or boolean with True = attend) as a float additive mask."""
    if attention_mask is None or attention_mask.dtype != torch.bool:
        return attention_mask
    return torch.zeros((), dtype=dtype, device=attention_mask.device).masked_fill(
        ~attention_mask, torch.finfo(dtype).min
    )


def causal_mask(n: int, m: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Additive causal mask [1, 1, n, m] for n queries that are the last n of m positions."""
    query_pos = torch.arange(m - n, m, device=device)[:, None]
    blocked = torch.arange(m, device=device)[None, :] > query_pos
    return torch.zeros((n, m), dtype=dtype, device=device).masked_fill(blocked, torch.finfo(dtype).min)[None, None]


def _softmax(logits: torch.Tensor) -> torch.Tensor:
    """Softmax over keys; half-precision logits are normalised in float32 (as transformers' T5 does)."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        return torch.softmax(logits, dim=-1, dtype=torch.float32).to(logits.dtype)
    return torch.softmax(logits, dim=-1)


def mix_heads(x: torch.Tensor, proj: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """out[b, o] = sum_i x[b, i] proj[i, o] (+ bias), over the heads axis of x [b, h_in, n, m] -> [b, h_out, n, m].

    Written as one batched GEMM on the contiguous [h_in, n*m] view of each batch item, with the (tiny) map
    broadcast over the batch: no transpose of the big tensor in forward or backward, and the optional bias (the
    mask) is fused into the GEMM through ``baddbmm``. This measured fastest of the exact formulations
    (einsum over the heads axis copies the big tensor into a heads-last layout).
    """
    b, h_in, n, m = x.shape
    h_out = proj.shape[1]
    weight = proj.t().to(x.dtype).expand(b, h_out, h_in)  # [b, h_out, h_in], a view
    flat = x.reshape(b, h_in, n * m)
    if bias is None:
        out = torch.bmm(weight, flat)
    else:
        out = torch.baddbmm(bias.expand(b, -1, n, m).reshape(b, -1, n * m), weight, flat)
    return out.view(b, h_out, n, m)


def mix_heads_(x: torch.Tensor, proj: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """In-place `mix_heads` for square maps, without autograd: x [b, h, n, m] is overwritten with the result.

    On the CPU a fresh attention-sized tensor costs more in page faults than the arithmetic that fills it (measured
    here at b=8, h=12, n=m=512: ~40 ms to allocate and touch 100 MB, ~7 ms for an in-place pass), so inference
    mixes each batch item into one reused [h, n*m] scratch buffer and copies it back.
    """
    b, h, n, m = x.shape
    flat = x.view(b, h, n * m)
    weight = proj.t().to(x.dtype)
    scratch = x.new_empty(h, n * m)
    for i in range(b):
        torch.mm(weight, flat[i], out=scratch)
        flat[i].copy_(scratch)
    if bias is not None:
        x.add_(bias)
    return x


class VariantAttentionCore(nn.Module):
    """The part of an attention layer after the q/k/v projections and before the output projection.

    Inputs are heads-first: query [b, h_k, n, d_k], key [b, h_k, m, d_k (+ h if m2l)], value [b, h_v, m, d_v
    (+ h if m2w)]; the output is heads-last [b, n, h_v, d_v] (as transformers' attention functions return it),
    together with the attention weights [b, h_v, n, m] that multiply V (None on the fused path).

    Input-dependent ("dynamic") projections of the memory are carried as extra channels of the cached keys and
    values (see :meth:`prepare_memory`), so ordinary transformers caches work for incremental decoding.
    """

    def __init__(self, spec: AttentionSpec):
        super().__init__()
        self.spec = spec
        self.is_causal = spec.is_causal
        if spec.scaling is not None:
            self.scaling = spec.scaling
        else:
            self.scaling = spec.key_head_size**-0.5 if spec.uses_query_key else 1.0
        h_k, h, h_v, d = spec.num_key_heads, spec.num_heads, spec.num_value_heads, spec.hidden_size
        if spec.attention_type == "talking_heads":
            if spec.pre_softmax:
                self.pre_softmax_proj = nn.Parameter(torch.empty(h_k, h))  # P_l[h_k, h]
            if spec.post_softmax:
                self.post_softmax_proj = nn.Parameter(torch.empty(h, h_v))  # P_w[h, h_v]
            dyn_shape = {"x2l": (h_k, h), "m2l": (h_k, h), "x2w": (h, h_v), "m2w": (h, h_v)}
            for name in spec.dynamic:  # D(x)[k, o] = x @ W[d, k*o]
                setattr(self, f"dynamic_{name}", nn.Parameter(torch.empty(d, math.prod(dyn_shape[name]))))
        elif spec.attention_type == "synthesizer":
            L, d_h = spec.max_position, spec.key_head_size
            comps = spec.components
            if "dense" in comps or "factorized_dense" in comps:  # relu(x W1^T + b1), per head d_h wide
                self.synthesizer_hidden_weight = nn.Parameter(torch.empty(h * d_h, d))
                self.synthesizer_hidden_bias = nn.Parameter(torch.empty(h * d_h))
            if "dense" in comps:
                self.dense_weight = nn.Parameter(torch.empty(h, d_h, L))  # W2: B = relu(W1 x + b1) W2 + b2
                self.dense_bias = nn.Parameter(torch.empty(h, 1, L))
            if "factorized_dense" in comps:
                a, b = spec.dense_factors
                self.factorized_dense_a = nn.Parameter(torch.empty(h, d_h, a))
                self.factorized_dense_b = nn.Parameter(torch.empty(h, d_h, b))
            if "random" in comps:
                self.random_logits = nn.Parameter(torch.empty(h, L, L), requires_grad=spec.random_trainable)
            if "factorized_random" in comps:
                k = spec.factorized_rank
                self.factorized_random_r1 = nn.Parameter(torch.empty(h, L, k), requires_grad=spec.random_trainable)
                self.factorized_random_r2 = nn.Parameter(torch.empty(h, L, k), requires_grad=spec.random_trainable)
            if len(comps) > 1:
                self.mixture_weights = nn.Parameter(torch.empty(len(comps)))

    # ------------------------------------------------------------------ initialisation (a visible, named step)
    @torch.no_grad()
    def init_variant_weights(self, std: float) -> None:
        """Initialise every parameter this module adds; called by each family's ``_init_weights``.

        Uses ``transformers.initialization`` so a parameter loaded from a checkpoint is left alone and one missing
        from it (a vanilla checkpoint) gets the configured init instead of zeros.
        """
        spec = self.spec
        if spec.attention_type == "talking_heads":
            for name in ("pre_softmax_proj", "post_softmax_proj"):
                proj = getattr(self, name, None)
                if proj is None:
                    continue
                if spec.talking_heads_init == "identity":
                    init.eye_(proj)
                else:  # the original code: truncated normal, std 1/sqrt(h_in)
                    init.trunc_normal_(proj, std=proj.shape[0] ** -0.5, a=-2 * proj.shape[0] ** -0.5,
                                       b=2 * proj.shape[0] ** -0.5)
            for name in spec.dynamic:  # small: variance 1e-2 / (h_in * d), the original code warns large trains badly
                weight = getattr(self, f"dynamic_{name}")
                h_in = spec.num_key_heads if name.endswith("l") else spec.num_heads
                init.normal_(weight, std=(1e-2 / (h_in * spec.hidden_size)) ** 0.5)
        elif spec.attention_type == "synthesizer":
            for name in ("synthesizer_hidden_weight", "dense_weight", "factorized_dense_a", "factorized_dense_b",
                         "random_logits", "factorized_random_r1", "factorized_random_r2"):
                if hasattr(self, name):
                    init.normal_(getattr(self, name), std=std)
            for name in ("synthesizer_hidden_bias", "dense_bias"):
                if hasattr(self, name):
                    init.zeros_(getattr(self, name))
            if hasattr(self, "mixture_weights"):
                n = len(spec.components)
                if spec.mixture_init == "dot_product":  # warm start: equals dot-product attention, still learns
                    init.copy_(self.mixture_weights, torch.tensor(
                        [1.0 if c == "dot_product" else 0.0 for c in spec.components]))
                else:
                    init.constant_(self.mixture_weights, 1.0 / n)

    def freeze_fixed_parameters(self) -> None:
        """Re-apply `synthesizer_random_trainable=False` (checkpoint loading hands back trainable parameters)."""
        if not self.spec.random_trainable:
            for name in ("random_logits", "factorized_random_r1", "factorized_random_r2"):
                if hasattr(self, name):
                    getattr(self, name).requires_grad_(False)

    # ------------------------------------------------------------------ memory side (cached)
    def prepare_memory(self, key: torch.Tensor | None, value: torch.Tensor, memory: torch.Tensor):
        """Keys and values as they are stored in a cache.

        key [b, h_k, m, d_k] or None (pure synthesizer: a [b, 1, m, 1] placeholder, since transformers' caches read
        their length from the keys and take an empty tensor for an empty cache);
        value [b, h_v, m, d_v]; memory [b, m, d] the memory input. The dynamic memory projections m2l
        (D[j, k, h] for h_k key heads) and m2w (D[j, h, v] for h_v value heads) ride along as extra channels.
        """
        b, m = value.shape[0], value.shape[2]
        if key is None:
            key = value.new_zeros(b, 1, m, 1)
        if "m2l" in self.spec.dynamic:
            dyn = (memory @ self.dynamic_m2l.to(memory.dtype)).view(b, m, self.spec.num_key_heads, -1)
            key = torch.cat([key, dyn.transpose(1, 2)], dim=-1)  # [b, h_k, m, d_k + h]
        if "m2w" in self.spec.dynamic:
            dyn = (memory @ self.dynamic_m2w.to(memory.dtype)).view(b, m, self.spec.num_heads, -1)
            value = torch.cat([value, dyn.permute(0, 3, 1, 2)], dim=-1)  # [b, h_v, m, d_v + h]
        return key, value

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        query: torch.Tensor | None,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        hidden_states: torch.Tensor,
        *,
        position_bias: torch.Tensor | None = None,
        attn_implementation: str | None = "eager",
        output_attentions: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden_states [b, n, d] is the query input (dense synthesizers and dynamic x2l/x2w read it)."""
        spec = self.spec
        dropout = spec.dropout if self.training else 0.0
        n, m = hidden_states.shape[1], value.shape[2]
        if spec.attention_type == "synthesizer" and m > spec.max_position:
            raise ValueError(
                f"The synthesizer attends over at most `synthesizer_max_position`={spec.max_position} positions, "
                f"got {m}; raise `synthesizer_max_position` (and retrain) or shorten the input."
            )
        if spec.attention_type == "dot_product" and attn_implementation not in (None, "eager") and not output_attentions:
            attention_fn: Callable = ALL_ATTENTION_FUNCTIONS[attn_implementation]
            kwargs = {k: v for k, v in kwargs.items() if k != "output_attentions"}
            if position_bias is not None:
                kwargs["position_bias"] = position_bias
            return attention_fn(self, query, key, value, attention_mask, dropout=dropout, scaling=self.scaling,
                                 **kwargs)

        if (  # the fold pays only where a fused kernel can run: on the CPU, SDPA has none with dropout
            spec.attention_type == "synthesizer"
            and attn_implementation == "sdpa"
            and (dropout == 0.0 or value.device.type != "cpu")
            and not output_attentions
            and not spec.recompute
            and _SDPA_FOLDABLE.issuperset(spec.components)
            and spec.components != ("random",)
        ):
            return self._synthesizer_sdpa(query, key, value, attention_mask, hidden_states, position_bias, dropout)

        if attention_mask is None and spec.is_causal and n > 1:
            attention_mask = causal_mask(n, m, value.dtype, value.device)
        bias = additive_mask(attention_mask, value.dtype)
        if position_bias is not None:
            bias = position_bias if bias is None else bias + position_bias
        if spec.recompute and self.training and torch.is_grad_enabled():
            return checkpoint(self._eager, query, key, value, bias, hidden_states, dropout, use_reentrant=False)
        return self._eager(query, key, value, bias, hidden_states, dropout)

    def _eager(self, query, key, value, bias, hidden_states, dropout):
        spec = self.spec
        if spec.attention_type == "talking_heads":
            weights = self._talking_heads_weights(query, key, value, bias, hidden_states)
            value = value[..., : spec.value_head_size]
        else:
            if spec.attention_type == "dot_product":
                logits = torch.matmul(query, key.transpose(2, 3)) * self.scaling
            else:
                logits = self._synthesizer_logits(query, key, hidden_states)
            if bias is not None:
                logits = logits + bias
            weights = _softmax(logits)
        weights = F.dropout(weights, p=dropout, training=self.training)
        out = torch.matmul(weights, value)  # [b, h_v, n, d_v]
        return out.transpose(1, 2).contiguous(), weights

    def _talking_heads_weights(self, query, key, value, bias, x):
        spec = self.spec
        b, n = x.shape[:2]
        d_k, d_v, h = spec.key_head_size, spec.value_head_size, spec.num_heads
        dots = torch.matmul(query, key[..., :d_k].transpose(2, 3))  # J [b, h_k, n, m], unscaled
        # without autograd, square maps overwrite J, L and W in place: one attention-sized allocation in all
        inplace = not torch.is_grad_enabled() and not spec.dynamic and dots.dtype == torch.float32
        if spec.pre_softmax:
            # L = J (s P_l) + bias: the scaling folds into the h_k x h map, the bias into the GEMM
            if inplace and spec.num_key_heads == h:
                logits = mix_heads_(dots, self.pre_softmax_proj * self.scaling, bias)
            else:
                logits = mix_heads(dots, self.pre_softmax_proj * self.scaling, bias)  # [b, h, n, m]
            if "x2l" in spec.dynamic:  # sum_k J[i,j,k] D(x_i)[k,h]
                dyn = (x @ self.dynamic_x2l.to(x.dtype)).view(b, n, spec.num_key_heads, h) * self.scaling
                logits = logits + torch.einsum("bkij,bikh->bhij", dots, dyn)
            if "m2l" in spec.dynamic:  # sum_k J[i,j,k] D(m_j)[k,h]
                dyn = key[..., d_k:] * self.scaling  # [b, h_k, m, h]
                logits = logits + torch.einsum("bkij,bkjh->bhij", dots, dyn)
        else:
            logits = dots.mul_(self.scaling) if inplace else dots * self.scaling
            if bias is not None:
                logits = logits.add_(bias) if inplace else logits + bias
        if inplace and logits is dots:
            weights = torch.softmax(logits, dim=-1, out=logits)  # W [b, h, n, m]
        else:
            weights = _softmax(logits)  # W [b, h, n, m]
        if not spec.post_softmax:
            return weights
        if inplace and spec.num_value_heads == h:
            return mix_heads_(weights, self.post_softmax_proj)  # U [b, h_v, n, m]
        mixed = mix_heads(weights, self.post_softmax_proj)  # U [b, h_v, n, m]
        if "x2w" in spec.dynamic:
            dyn = (x @ self.dynamic_x2w.to(x.dtype)).view(b, n, h, spec.num_value_heads)
            mixed = mixed + torch.einsum("bhij,bihv->bvij", weights, dyn)
        if "m2w" in spec.dynamic:
            mixed = mixed + torch.einsum("bhij,bvjh->bvij", weights, value[..., d_v:])
        return mixed

    def _synthesizer_hidden(self, x):
        """relu(x W1^T + b1) per head: [b, n, d] -> [b, h, n, d_h]."""
        hidden = F.relu(F.linear(x, self.synthesizer_hidden_weight.to(x.dtype), self.synthesizer_hidden_bias.to(x.dtype)))
        return hidden.view(x.shape[0], x.shape[1], self.spec.num_heads, -1).transpose(1, 2)

    def _mixture_alpha(self):
        """The mixture weights alpha_c, or None for a single component.

        Normalised (the paper's form, sum_c alpha_c = 1): alpha = w + (1 - sum_c w_c) / C, the projection of the learned
        w onto the plane sum = 1. It is linear, so no value of w is singular (w / sum(w) divides by a learned sum that
        can reach zero), and it leaves any w that already sums to one unchanged: the uniform start 1/C and the warm
        start [1, 0, ...] are exact, and the synthetic weights get the gradient g_c - mean(g) there.
        """
        if not hasattr(self, "mixture_weights"):
            return None
        weights = self.mixture_weights
        if self.spec.mixture_normalize:
            return weights + (1.0 - weights.sum()) / weights.numel()
        return weights

    def _synthesizer_sdpa(self, query, key, value, attention_mask, x, position_bias, dropout):
        """The synthesizer as one fused SDPA call (no [b, h, n, m] logits in memory when SDPA can avoid them).

        Every foldable component is a dot product of a per-query and a per-key vector, so the mixture is one dot
        product of concatenations: q' = [a_dp s q | a_d relu(W1 x + b1) | a_d | a_fr R1[i]] and
        k' = [k | W2[:, j] | b2[j] | R2[j]]. A random component has no such form and joins the mask as a_r R.
        q'/k' (or v) are zero-padded to one head size, as SDPA's fused CPU/GPU kernels require.
        """
        spec = self.spec
        b, n = x.shape[:2]
        m = value.shape[2]
        start = m - n
        alpha = self._mixture_alpha()
        qs, ks, extra = [], [], None
        for i, comp in enumerate(spec.components):
            weight = 1.0 if alpha is None else alpha[i]
            if comp == "dot_product":
                qs.append(query * (weight * self.scaling))
                ks.append(key)
            elif comp == "dense":
                hidden = self._synthesizer_hidden(x)
                qs.append(torch.cat([hidden, hidden.new_ones(b, spec.num_heads, n, 1)], dim=-1) * weight)
                k_dense = torch.cat([self.dense_weight[:, :, :m], self.dense_bias[:, :, :m]], dim=1)  # [h, d+1, m]
                ks.append(k_dense.transpose(1, 2).to(x.dtype).expand(b, -1, -1, -1))
            elif comp == "factorized_random":
                qs.append(self.factorized_random_r1[:, start : start + n].to(x.dtype).expand(b, -1, -1, -1) * weight)
                ks.append(self.factorized_random_r2[:, :m].to(x.dtype).expand(b, -1, -1, -1))
            else:  # random: no q.k form, an additive term of the mask
                extra = (self.random_logits[None, :, start : start + n, :m] * weight).to(x.dtype)
        q, k = torch.cat(qs, dim=-1), torch.cat(ks, dim=-1)
        mask = additive_mask(attention_mask, x.dtype)
        for term in (extra, position_bias):
            if term is not None:
                mask = term if mask is None else mask + term
        is_causal = False
        if spec.is_causal and attention_mask is None and n > 1:
            if mask is None and n == m:
                is_causal = True
            else:
                causal = causal_mask(n, m, x.dtype, x.device)
                mask = causal if mask is None else mask + causal
        d_v = value.shape[-1]
        width = -(-max(q.shape[-1], d_v) // 8) * 8
        q, k = F.pad(q, (0, width - q.shape[-1])), F.pad(k, (0, width - k.shape[-1]))
        out = F.scaled_dot_product_attention(
            q, k, F.pad(value, (0, width - d_v)), attn_mask=mask, dropout_p=dropout, is_causal=is_causal, scale=1.0
        )[..., :d_v]
        return out.transpose(1, 2).contiguous(), None

    def _synthesizer_logits(self, query, key, x):
        """sum_c alpha_c S_c over the components, [b or 1, h, n, m] (masks are added by the caller)."""
        spec = self.spec
        b, n = x.shape[:2]
        m = key.shape[2]
        start = m - n  # position of the first query: rows start.. of R when decoding with a cache
        terms = []
        hidden = None
        if "dense" in spec.components or "factorized_dense" in spec.components:
            hidden = self._synthesizer_hidden(x)
        for comp in spec.components:
            if comp == "dot_product":
                terms.append(torch.matmul(query, key.transpose(2, 3)) * self.scaling)
            elif comp == "dense":  # B = relu(W1 x + b1) W2 + b2, sliced to the keys; b2 rides in the GEMM
                ones = hidden.new_ones(*hidden.shape[:-1], 1)
                w2 = torch.cat([self.dense_weight[:, :, :m], self.dense_bias[:, :, :m]], dim=1).to(x.dtype)
                terms.append(torch.matmul(torch.cat([hidden, ones], dim=-1), w2))
            elif comp == "factorized_dense":  # A[j // b] * B[j % b]: every (a, b) pair once, sliced to the keys
                fa = torch.matmul(hidden, self.factorized_dense_a)  # [b, h, n, a]
                fb = torch.matmul(hidden, self.factorized_dense_b)  # [b, h, n, b]
                terms.append((fa[..., :, None] * fb[..., None, :]).flatten(-2)[..., :m])
            elif comp == "random":
                terms.append(self.random_logits[None, :, start : start + n, :m])
            else:  # factorized_random: R1 R2^T, rank k
                r1 = self.factorized_random_r1[:, start : start + n]
                terms.append(torch.matmul(r1, self.factorized_random_r2[:, :m].transpose(1, 2))[None])
        if len(terms) == 1:
            return terms[0].to(x.dtype)
        alpha = self._mixture_alpha()
        logits = alpha[0] * terms[0]
        for a, t in zip(alpha[1:], terms[1:]):
            logits = logits + a * t
        return logits.to(x.dtype)
