"""The attention mathematics shared by every family: one class per attention type on a small shared base
(`attention_base`), and the registry that picks a type's class.

This file is copied next to every saved checkpoint (remote code), so it imports only torch, public transformers API
and its siblings: `attention_base` (the base and the helpers every type shares), `attention_synthesizer` (the
Synthesizer, a module of its own), `attention_types` (the registrations and the `AttentionSpec` a config resolves
to), `talking_heads_blockwise` (the heads map, talking heads' formula and its eager and
blockwise algorithms) and, only when that algorithm is asked for, `talking_heads_triton`.

A family's attention module keeps its own projections, named as in the upstream transformers model (so vanilla
checkpoints load), builds those the spec asks for (`spec.has_query/has_key/has_value`), and hands the projected heads
to the attention class of its type (its registration's `core`: `ATTENTION_CLASSES[spec.attention_type]`), which owns
every parameter the type adds and its initialisation, and picks the function that computes it:

    DotProductAttention      softmax(q k^T * s + mask) v: transformers' ``ALL_ATTENTION_FUNCTIONS[attn_implementation]``
                             (SDPA) when nothing needs the weights, else `dot_product_eager_forward`.
    TalkingHeadsAttention    J = q k^T * s over h_k heads; L = J P_l (+ dynamic terms) over h heads; + mask (+ position
                             bias); W = softmax(L); U = W P_w (+ dynamic terms) over h_v heads; dropout(U) v.
                             (Shazeer et al. 2020) `talking_heads_attention_forward`: eager, blockwise or Triton
                             (`attention_algorithm`, `TALKING_HEADS_ALGORITHMS`).
    SynthesizerAttention     logits = sum_c alpha_c S_c over components (dense, random, factorized_dense,
                             factorized_random, dot_product) + mask; softmax; dropout; v.  (Tay et al. 2020)
                             `synthesizer_sdpa_forward` (one SDPA call) or `synthesizer_eager_forward`.
    GeneralBilinearAttention h heads, each a full d x d bilinear form: logits[h, i, j] = q_i[h] . m_j * s + mask with
                             q = x W_q + b_q [h, d]; the memory m is the keys and the values.  (Shazeer et al. 2020,
                             mesh-tensorflow's GeneralBilinearSelfAttention) `general_bilinear_eager_forward`.

Every one of these functions has transformers' attention interface and one contract for the weights it returns
(`attention_base` says both); shapes: b batch, n query length, m key length, h_k/h/h_v key, softmax and value heads,
d_k/d_v head sizes.
"""

import functools
import importlib.util
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import initialization as init
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import logging

from .attention_base import (
    VariantAttentionCore,
    attention_bias,
    padding_lengths,
    recomputed_while_training,
    recomputing,
    weighted_values,
)
from .attention_synthesizer import SynthesizerAttention
from .attention_types import ATTENTION_REGISTRY, AttentionSpec
from .talking_heads_blockwise import (
    runs_inference_core,
    softmax_keys,
    talking_heads_blockwise,
    talking_heads_eager,
)

logger = logging.get_logger(__name__)


def talking_heads_triton(query, *args, **kwargs) -> torch.Tensor:
    """`talking_heads_triton.talking_heads_triton`, imported on first use: triton is needed only by this algorithm
    (the import refuses a triton older than the tested release, naming it and the alternatives). On a GPU where
    the kernel has not been verified it warns once: the algorithm is experimental there."""
    from .talking_heads_triton import talking_heads_triton as kernel

    if query.device.type == "cuda" and not triton_verified_on(query.device):
        logger.warning_once(
            f'attention_algorithm="triton" is experimental: its kernels have not been verified on '
            f"{torch.cuda.get_device_name(query.device)} (benchmarks/gpu_check.py --kernel verifies them). "
            'attention_algorithm="blockwise" computes the same function in PyTorch with the same O(n) memory.'
        )
    return kernel(query, *args, **kwargs)


# attention_algorithm -> the function computing talking heads' formula from its arguments (talking_heads_blockwise's
# docstring; `TalkingHeadsAttention.formula_arguments` makes them): out [b, h_v, n, d_v]. Only the eager one keeps the
# weights, returned with `return_weights=True`.
TALKING_HEADS_ALGORITHMS: dict[str, Callable[..., torch.Tensor]] = {
    "eager": talking_heads_eager,
    "blockwise": talking_heads_blockwise,
    "triton": talking_heads_triton,
}


# Without gradients on a GPU, "auto" keeps the eager algorithm (W computed in place of L, no recomputation) up to this
# many elements of [b, heads, n, m] (256 MiB in float32), and goes blockwise beyond. On the CPU the blockwise
# algorithm's inference core is faster at every size (docs/attention-algorithms.md).
EAGER_INFERENCE_ELEMENTS = 1 << 26

# The GPUs (`torch.cuda.get_device_name()`) on which `benchmarks/gpu_check.py --kernel` has passed: only there does
# "auto" take the Triton kernel. None yet: the kernel is tested through Triton's CPU interpreter only, so "auto" never
# runs it and `attention_algorithm="triton"` is an explicit, experimental choice (docs/attention-algorithms.md).
TRITON_VERIFIED_GPUS: tuple[str, ...] = ()


def triton_verified_on(device: torch.device) -> bool:
    """Whether the CUDA `device` is a GPU in `TRITON_VERIFIED_GPUS` and triton is installed."""
    if not TRITON_VERIFIED_GPUS or torch.cuda.get_device_name(device) not in TRITON_VERIFIED_GPUS:
        return False
    return importlib.util.find_spec("triton") is not None


def talking_heads_algorithm(name: str, device: torch.device, elements: int) -> str:
    """The algorithm `attention_algorithm`=name runs on `device` for attention of `elements` = b * heads * n * m.

    "auto" runs only verified code: the Triton kernel on a CUDA device named in `TRITON_VERIFIED_GPUS` where triton is
    installed; else the blockwise algorithm while gradients are recorded (it keeps no n x m tensor for backward) and
    on the CPU (without gradients its inference core: blocks that stay in the cache); on another device, or under
    torch.compile / torch.export (whose graphs the loops over blocks would fix to one shape), the eager algorithm
    without gradients (nothing to recompute) unless its tensors would pass `EAGER_INFERENCE_ELEMENTS`."""
    if name != "auto":
        return name
    if device.type == "cuda" and triton_verified_on(device):
        return "triton"
    if torch.is_grad_enabled() or elements > EAGER_INFERENCE_ELEMENTS:
        return "blockwise"
    return "blockwise" if device.type == "cpu" and not torch.compiler.is_compiling() else "eager"


def talking_heads_attention_forward(
    module,
    query,
    key,
    value,
    attention_mask,
    scaling=None,
    dropout=0.0,
    *,
    hidden_states,
    position_bias=None,
    output_attentions=False,
    **kwargs,
):
    """Talking heads: the formula's arguments (`module.formula_arguments`), computed by the algorithm of
    `TALKING_HEADS_ALGORITHMS` that `attention_algorithm` names ("auto": `talking_heads_algorithm`), the eager one
    where `output_attentions` asks for the weights (which it returns, U after dropout)."""
    spec, (b, n), m = module.spec, hidden_states.shape[:2], value.shape[2]
    elements = b * max(spec.num_key_heads, spec.num_heads, spec.num_value_heads) * n * m
    algorithm = "eager" if output_attentions else talking_heads_algorithm(spec.algorithm, query.device, elements)
    formula = TALKING_HEADS_ALGORITHMS[algorithm]
    if algorithm == "eager" and recomputing(module):
        formula = functools.partial(checkpoint, formula, use_reentrant=False)
    causal = attention_mask is None and spec.is_causal and n > 1  # a causal mask made by the algorithm (per block)
    key, value, maps = module.formula_arguments(key, value, hidden_states)
    dropout = dropout if module.training else 0.0  # as transformers' eager function: dropout while training only
    options = dict(scaling=module.scaling if scaling is None else scaling, causal=causal, dropout=dropout)
    if algorithm == "blockwise" and runs_inference_core(query, key, value, {**maps, "bias": position_bias}, dropout):
        options["key_lengths"] = padding_lengths(attention_mask, b)  # the inference core skips padded keys
        attention_mask = None if options["key_lengths"] is not None else attention_mask
    bias = attention_bias(module, attention_mask, position_bias, n, value, causal=False)
    if output_attentions:
        out, weights = formula(query, key, value, bias, **maps, **options, return_weights=True)
    else:
        out, weights = formula(query, key, value, bias, **maps, **options), None  # [b, h_v, n, d_v]
    return out.transpose(1, 2).contiguous(), weights  # [b, n, h_v, d_v]


class DotProductAttention(VariantAttentionCore):
    """softmax(q k^T * s + mask) v: transformers' attention, through ``ALL_ATTENTION_FUNCTIONS`` where it can."""

    def attention_function(self, attn_implementation, output_attentions, dropout, device):
        if attn_implementation in (None, "eager") or output_attentions:
            return dot_product_eager_forward
        return ALL_ATTENTION_FUNCTIONS[attn_implementation]


@recomputed_while_training
def dot_product_eager_forward(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, *, position_bias=None, **kwargs
):
    """softmax(q k^T * s + mask (+ position bias)) v with the weights, as transformers' `eager_attention_forward`
    (plus T5's position bias, a causal mask where none is given, half-precision softmax in float32)."""
    scaling = module.scaling if scaling is None else scaling
    bias = attention_bias(module, attention_mask, position_bias, query.shape[2], value)
    logits = torch.matmul(query, key.transpose(2, 3)) * scaling  # [b, h, n, m]
    return weighted_values(module, softmax_keys(logits if bias is None else logits + bias), value, dropout)


class TalkingHeadsAttention(VariantAttentionCore):
    """Talking heads (Shazeer et al. 2020): learned maps across the heads axis before (P_l[h_k, h]) and after
    (P_w[h, h_v]) the softmax, optionally plus input-dependent ("dynamic") maps.

    The dynamic projections of the memory are carried as extra channels of the cached keys and values (see
    :meth:`prepare_memory`), so ordinary transformers caches work for incremental decoding.
    """

    def __init__(self, spec):
        super().__init__(spec)
        h_k, h, h_v, d = spec.num_key_heads, spec.num_heads, spec.num_value_heads, spec.hidden_size
        if spec.pre_softmax:
            self.pre_softmax_proj = nn.Parameter(torch.empty(h_k, h))  # P_l[h_k, h]
        if spec.post_softmax:
            self.post_softmax_proj = nn.Parameter(torch.empty(h, h_v))  # P_w[h, h_v]
        dyn_shape = {"x2l": (h_k, h), "m2l": (h_k, h), "x2w": (h, h_v), "m2w": (h, h_v)}
        for name in spec.dynamic:  # D(x)[k, o] = x @ W[d, k*o]
            rows, cols = dyn_shape[name]
            setattr(self, f"dynamic_{name}", nn.Parameter(torch.empty(d, rows * cols)))

    @torch.no_grad()
    def init_variant_weights(self, std: float) -> None:
        spec = self.spec
        for name in ("pre_softmax_proj", "post_softmax_proj"):
            proj = getattr(self, name, None)
            if proj is None:
                continue
            if spec.talking_heads_init == "identity":
                init.eye_(proj)
            else:  # the original code: truncated normal, std 1/sqrt(h_in)
                bound = 2 * proj.shape[0] ** -0.5
                init.trunc_normal_(proj, std=proj.shape[0] ** -0.5, a=-bound, b=bound)
        for name in spec.dynamic:  # small: variance 1e-2 / (h_in * d), the original code warns large trains badly
            h_in = spec.num_key_heads if name.endswith("l") else spec.num_heads
            init.normal_(getattr(self, f"dynamic_{name}"), std=(1e-2 / (h_in * spec.hidden_size)) ** 0.5)

    def prepare_memory(self, key, value, memory):
        """The dynamic memory projections m2l (D[j, k, h] for h_k key heads) and m2w (D[j, h, v] for h_v value heads)
        ride along as extra channels: key [b, h_k, m, d_k (+ h)], value [b, h_v, m, d_v (+ h)]."""
        b, m = value.shape[0], value.shape[2]
        if "m2l" in self.spec.dynamic:
            dyn = (memory @ self.dynamic_m2l.to(memory.dtype)).view(b, m, self.spec.num_key_heads, -1)
            key = torch.cat([key, dyn.transpose(1, 2)], dim=-1)  # [b, h_k, m, d_k + h]
        if "m2w" in self.spec.dynamic:
            dyn = (memory @ self.dynamic_m2w.to(memory.dtype)).view(b, m, self.spec.num_heads, -1)
            value = torch.cat([value, dyn.permute(0, 3, 1, 2)], dim=-1)  # [b, h_v, m, d_v + h]
        return key, value

    def attention_function(self, attn_implementation, output_attentions, dropout, device):
        """Every algorithm (`attention_algorithm`), whatever `attn_implementation` says."""
        return talking_heads_attention_forward

    def formula_arguments(self, key, value, x):
        """key, value, and the maps of `talking_heads_blockwise`'s formula: P_l, P_w and the dynamic maps as
        [b, n or m, h_in, h_out]."""
        spec = self.spec
        b, n = x.shape[:2]
        d_k, d_v = spec.key_head_size, spec.value_head_size
        h_k, h, h_v = spec.num_key_heads, spec.num_heads, spec.num_value_heads
        maps = dict(
            pre_proj=getattr(self, "pre_softmax_proj", None), post_proj=getattr(self, "post_softmax_proj", None)
        )
        if "x2l" in spec.dynamic:
            maps["x2l"] = (x @ self.dynamic_x2l.to(x.dtype)).view(b, n, h_k, h)
        if "m2l" in spec.dynamic:
            maps["m2l"] = key[..., d_k:].transpose(1, 2)  # [b, m, h_k, h]
        if "x2w" in spec.dynamic:
            maps["x2w"] = (x @ self.dynamic_x2w.to(x.dtype)).view(b, n, h, h_v)
        if "m2w" in spec.dynamic:
            maps["m2w"] = value[..., d_v:].permute(0, 2, 3, 1)  # [b, m, h, h_v]
        maps = {name: t if t is None or t.dtype == value.dtype else t.to(value.dtype) for name, t in maps.items()}
        return key[..., :d_k], value[..., :d_v], maps


class GeneralBilinearAttention(VariantAttentionCore):
    """General bilinear multihead attention (the talking-heads paper's unified view; mesh-tensorflow's
    GeneralBilinearSelfAttention): h heads, each a full d x d bilinear form.

    logits[h, i, j] = q_i[h] . m_j * s + mask with q = x W_q + b_q, W_q [d, h*d]: no key projection, the keys are the
    memory itself; context[i, h] = sum_j softmax(logits)[h, i, j] m_j: no value projection, the values are the memory.
    The family's output projection maps [h*d] -> d, so a layer has 2 h d^2 weights. s = d^-0.5 (T5: 1).

    The memory is cached once for all heads ([b, 1, m, d]); the heads are folded into the query rows, so no key or
    value tensor is repeated per head.
    """

    def prepare_memory(self, key, value, memory):
        shared = memory[:, None]  # [b, 1, m, d]: the keys and the values of every head
        return shared, shared

    def attention_function(self, attn_implementation, output_attentions, dropout, device):
        return general_bilinear_eager_forward


@recomputed_while_training
def general_bilinear_eager_forward(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, *, position_bias=None, **kwargs
):
    """h heads over the memory shared by all ([b, 1, m, d] keys and values), the heads folded into the query rows:
    the output [b, n, h, d] and the weights that multiply the memory, dropout(softmax(q m^T * s + mask))
    [b, h, n, m]."""
    scaling = module.scaling if scaling is None else scaling
    b, h, n, d = query.shape
    bias = attention_bias(module, attention_mask, position_bias, n, value)
    logits = torch.matmul(query.reshape(b, 1, h * n, d), key.transpose(2, 3)).view(b, h, n, -1) * scaling
    weights = softmax_keys(logits if bias is None else logits + bias)  # [b, h, n, m]
    weights = F.dropout(weights, p=dropout, training=module.training)
    out = torch.matmul(weights.reshape(b, 1, h * n, -1), value).view(b, h, n, -1)  # [b, h, n, d]
    return out.transpose(1, 2).contiguous(), weights


# the package's own classes, by the names their registrations give as `core`
PACKAGE_CLASSES = {
    cls.__name__: cls
    for cls in (DotProductAttention, TalkingHeadsAttention, SynthesizerAttention, GeneralBilinearAttention)
}


class _AttentionClasses(Mapping):
    """`ATTENTION_CLASSES`: attention type -> the class of its layers, read from its registration's `core` (the class,
    or the name of one of `PACKAGE_CLASSES`). A read-only view of `ATTENTION_REGISTRY`, so a type registered later is
    in it."""

    def __getitem__(self, attention_type: str) -> type[VariantAttentionCore]:
        core = ATTENTION_REGISTRY[attention_type].core
        cls = PACKAGE_CLASSES.get(core) if isinstance(core, str) else core
        if not (isinstance(cls, type) and issubclass(cls, VariantAttentionCore)):
            raise ValueError(
                f"The attention type {attention_type!r} is registered with core={core!r}, which is not a "
                f"`VariantAttentionCore` subclass: give the class itself, or one of {sorted(PACKAGE_CLASSES)}."
            )
        return cls

    def __iter__(self):
        return iter(ATTENTION_REGISTRY)

    def __len__(self) -> int:
        return len(ATTENTION_REGISTRY)


ATTENTION_CLASSES = _AttentionClasses()
tuple(ATTENTION_CLASSES.values())  # every registration names a class: a misspelt `core` fails here, at import


def attention_core(spec: AttentionSpec) -> VariantAttentionCore:
    """The attention module of `spec.attention_type`."""
    return ATTENTION_CLASSES[spec.attention_type](spec)
