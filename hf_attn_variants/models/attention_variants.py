"""The attention mathematics shared by every family: one class per attention type on a small shared base.

This file is copied next to every saved checkpoint (remote code), so it imports only torch, public transformers API
and its siblings `configuration_variant_attention` (the fields, their validation and the `AttentionSpec` it resolves),
`talking_heads_blockwise` (the heads map, talking heads' formula and its eager and blockwise algorithms) and, only when
that algorithm is asked for, `talking_heads_triton`.

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

Every one of these functions has transformers' attention interface, as ``eager_attention_forward`` in
transformers' BERT: ``fn(module, query, key, value, attention_mask, scaling=..., dropout=..., **kwargs)`` with the
keyword extras `position_bias` (T5), `hidden_states` (the query input [b, n, d], read by dense synthesizers and
talking heads' dynamic maps), `key_positions` (BERT and ALBERT: the position of every key, read by synthesizers) and
`output_attentions`, returning (attn_output [b, n, heads, d], attn_weights or None).
One contract for every type, as transformers' ``eager_attention_forward``: the attn_weights a function returns are
the ones that multiply V, after dropout (an eager function drops only while `module.training`, as transformers' own),
and half-precision logits go through one softmax, in float32 (`talking_heads_blockwise.softmax_keys`).

The base, `VariantAttentionCore`, holds what they share: the mask (padding, causal, position bias), dropout,
recomputation and the memory as it is cached. `PackedSequences` is the layout of a padded batch's real tokens, packed
on the token axis: an encoder hands it to a core in place of the mask, and the core runs its type's function within
each sequence. Shapes: b batch, n query length, m key length, h_k/h/h_v key, softmax and value heads, d_k/d_v head
sizes.
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

from .configuration_variant_attention import ATTENTION_REGISTRY, AttentionSpec
from .talking_heads_blockwise import (
    causal_bias,
    runs_inference_core,
    softmax_keys,
    talking_heads_blockwise,
    talking_heads_eager,
)

logger = logging.get_logger(__name__)

# transformers' attention interface: fn(module, query, key, value, attention_mask, scaling=..., dropout=..., **kwargs)
# -> (attn_output [b, n, heads, d], attn_weights [b, heads, n, m] or None)
AttentionFunction = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]


def additive_mask(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A transformers mask (float additive, or boolean with True = attend) as a float additive mask."""
    if attention_mask is None or attention_mask.dtype != torch.bool:
        return attention_mask
    return torch.zeros((), dtype=dtype, device=attention_mask.device).masked_fill(
        ~attention_mask, torch.finfo(dtype).min
    )


def causal_mask(n: int, m: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Additive causal mask [1, 1, n, m] for n queries that are the last n of m positions."""
    return causal_bias(n, m, dtype, device)[None, None]


def padding_lengths(attention_mask: torch.Tensor | None, batch: int) -> list[int] | None:
    """How many keys each of the `batch` rows attends to, where a 4D mask (transformers' boolean, True = attend, or
    additive, 0 = attend and the dtype's minimum or -inf = hidden) hides exactly the keys after those from every
    query (right padding) and leaves each row at least one key; None for any other mask, and for none. One pass over
    the mask, so an attention can skip the padded keys instead of adding the mask."""
    if attention_mask is None or attention_mask.dim() != 4 or torch.compiler.is_compiling():
        return None
    attend = attention_mask
    if attention_mask.dtype != torch.bool:
        attend = attention_mask == 0
        if not (attend | (attention_mask <= torch.finfo(attention_mask.dtype).min)).all():
            return None  # a bias of other values
    lengths = attend[:, 0, 0].sum(-1)  # [b or 1]
    expected = torch.arange(attend.shape[-1], device=attend.device) < lengths[:, None]  # [b or 1, m]
    if int(lengths.min()) == 0 or not torch.equal(attend, expected[:, None, None].expand_as(attend)):
        return None
    return lengths.expand(batch).tolist()


def attention_bias(module, attention_mask, position_bias, n: int, value: torch.Tensor, causal: bool = True):
    """The additive bias of n queries over value's m keys: the mask (with `causal`, a causal mask where the layer is
    causal and no mask is given), plus the position bias; None where there is neither."""
    if causal and attention_mask is None and module.is_causal and n > 1:
        attention_mask = causal_mask(n, value.shape[2], value.dtype, value.device)
    bias = additive_mask(attention_mask, value.dtype)
    if position_bias is not None:
        bias = position_bias if bias is None else bias + position_bias
    return bias


def recomputing(module) -> bool:
    """Whether an eager path recomputes its weights in backward: `attention_recompute` while training with
    gradients."""
    return module.spec.recompute and module.training and torch.is_grad_enabled()


def recomputed_while_training(forward: AttentionFunction) -> AttentionFunction:
    """An eager attention function run under activation checkpointing where `recomputing(module)`: backward
    recomputes the [b, heads, n, m] weights instead of keeping them."""

    @functools.wraps(forward)
    def wrapper(module, *args, **kwargs):
        if recomputing(module):
            return checkpoint(forward, module, *args, use_reentrant=False, **kwargs)
        return forward(module, *args, **kwargs)

    return wrapper


def _weighted_values(module, weights: torch.Tensor, value: torch.Tensor, dropout: float):
    """dropout(weights) [b, h, n, m] times value [b, h, m, d_v], heads-last, with the dropped weights."""
    weights = F.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights  # [b, n, h, d_v]


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


class PackedSequences:
    """The real tokens of a padded batch, packed one sequence after another on the token axis: the layout an encoder
    runs in where its 2D attention mask has padding (BERT and ALBERT, `unpad`; `modeling_variant_utils.unpadded`).

    Every per-token step (projections, feed-forward, LayerNorms) runs on `[1, total, d]`, the `total` real tokens
    only. Attention runs per sequence: handed to a core as its attention mask, the layout makes it attend within each
    run of equal-length sequences, unmasked (`attend`). The sequences are packed shortest first, so sequences of one
    length sit together and share one call ([count, heads, length, d] blocks of the packed heads, views without
    copies); on a CPU a call per length costs less than the padded keys it skips (docs/unpadding.md).

    `indices` [total]: where each packed token sits in the padded batch flattened to [b * n]; `positions` [1, total]:
    its position (id), where the position embeddings put it and the synthesizers read their tables; `runs`: (count,
    length) of each run of equal-length sequences, in packed order; `shape`: (b, n) of the padded batch.
    """

    def __init__(self, attention_mask: torch.Tensor, position_ids: torch.Tensor | None = None):
        """The layout of a 2D mask [b, n] (1 or True: a real token) and the batch's position ids [b or 1, n] (None:
        each token's column, as the position embeddings count them)."""
        b, n = self.shape = tuple(attention_mask.shape)
        real = attention_mask.bool()
        lengths = real.sum(-1)  # [b]
        order = torch.argsort(lengths, stable=True)  # shortest first: equal lengths side by side
        rows, columns = real[order].nonzero(as_tuple=True)  # row-major: each sequence's tokens in order
        self.indices = order[rows] * n + columns  # [total]
        if position_ids is None:
            self.positions = columns[None]  # [1, total]
        else:
            self.positions = position_ids.expand(b, n).reshape(-1)[self.indices][None]
        runs = {}
        for length in lengths[order].tolist():
            runs[length] = runs.get(length, 0) + 1
        self.runs = tuple((count, length) for length, count in runs.items() if length > 0)

    def pack(self, padded: torch.Tensor) -> torch.Tensor:
        """[b, n, ...] -> the real tokens [1, total, ...]."""
        return padded.flatten(0, 1).index_select(0, self.indices)[None]

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """[1, total, ...] -> [b, n, ...], the tokens back where they were and zeros at the padded positions."""
        flat = packed.new_zeros(self.shape[0] * self.shape[1], *packed.shape[2:])
        return flat.index_copy(0, self.indices, packed[0]).view(*self.shape, *packed.shape[2:])

    def attend(self, core: "VariantAttentionCore", query, key, value, hidden_states, **kwargs):
        """`core`'s attention of the packed heads (query [1, h_k, total, d_k], key and value as `prepare_memory`
        makes them from the packed memory, hidden_states [1, total, d]) within each sequence: one unmasked call of
        the core per run of equal-length sequences, at the tokens' `positions`. Returns [1, total, h_v, d_v] and no
        weights (the encoders run the padded batch where the weights are asked for)."""
        if kwargs.pop("position_bias", None) is not None or kwargs.pop("output_attentions", False):
            raise ValueError(
                "Packed sequences attend without a position bias and without returning the weights: "
                "run the padded batch (`unpad=False`) for those."
            )
        kwargs.pop("key_positions", None)  # the padded batch's: the packed tokens' are `positions`
        outputs, start = [], 0
        for count, length in self.runs:
            tokens = slice(start, start + count * length)
            start = tokens.stop

            def block(t):  # [1, heads, total, d] -> [count, heads, length, d], a view
                return None if t is None else t[0, :, tokens].unflatten(1, (count, length)).transpose(0, 1)

            x = hidden_states[0, tokens].view(count, length, -1)
            positions = self.positions[0, tokens].view(count, length)
            out, _ = core(block(query), block(key), block(value), None, x, key_positions=positions, **kwargs)
            outputs.append(out.flatten(0, 1))  # [count * length, h_v, d_v]
        return torch.cat(outputs)[None], None


class VariantAttentionCore(nn.Module):
    """The part of an attention layer after the projections and before the output projection; the base of every
    attention type. `ATTENTION_CLASSES[spec.attention_type](spec)` (or `attention_core(spec)`) builds the right one.

    Inputs are heads-first: query [b, h_k, n, d_k] (None without queries), key and value as `prepare_memory` returns
    them; the output is heads-last [b, n, h_v, d_v] (as transformers' attention functions return it), together with
    the attention weights [b, h_v, n, m] that multiply V (None where the function does not materialise them).

    A subclass gives `attention_function` (its functions, with transformers' attention interface) and, where it has
    them, its own parameters (`init_variant_weights`), cached memory layout (`prepare_memory`) and input checks
    (`check_lengths`).
    """

    def __init__(self, spec: AttentionSpec):
        super().__init__()
        self.spec = spec
        self.is_causal = spec.is_causal
        if spec.scaling is not None:
            self.scaling = spec.scaling
        else:
            self.scaling = spec.key_head_size**-0.5 if spec.has_query else 1.0

    def project_query(self, x: torch.Tensor, query_proj: nn.Module | None) -> torch.Tensor | None:
        """The family's query projection of x [b, n, d] split into heads, [b, h_k, n, d_k] (None without queries)."""
        if query_proj is None:
            return None
        b, n = x.shape[:2]
        return query_proj(x).view(b, n, self.spec.num_key_heads, self.spec.key_head_size).transpose(1, 2)

    def project_memory(self, memory: torch.Tensor, key_proj: nn.Module | None, value_proj: nn.Module | None):
        """Keys and values of the memory [b, m, d] as they are cached: the family's projections (None where the type
        has none) split into heads, then `prepare_memory`."""
        spec = self.spec
        b, m = memory.shape[:2]
        key = value = None
        if key_proj is not None:
            key = key_proj(memory).view(b, m, spec.num_key_heads, spec.key_head_size).transpose(1, 2)
        if value_proj is not None:
            value = value_proj(memory).view(b, m, spec.num_value_heads, spec.value_head_size).transpose(1, 2)
        return self.prepare_memory(key, value, memory)

    @torch.no_grad()
    def init_variant_weights(self, std: float) -> None:
        """Initialise every parameter the type adds; called by each family's ``_init_weights``, through
        ``transformers.initialization`` so a parameter loaded from a checkpoint is left alone and one missing from it
        (a vanilla checkpoint) gets the configured init instead of zeros."""

    def freeze_fixed_parameters(self) -> None:
        """Re-apply parameters the config keeps fixed (checkpoint loading hands back trainable parameters)."""

    def prepare_memory(self, key: torch.Tensor | None, value: torch.Tensor | None, memory: torch.Tensor):
        """Keys and values as they are stored in a cache, from the projected key [b, h_k, m, d_k] and value
        [b, h_v, m, d_v] (None where the type has no such projection) and the memory input [b, m, d]."""
        return key, value

    def check_lengths(self, n: int, m: int, key_positions: torch.Tensor | None = None) -> None:
        """Raise a ValueError for n queries over m keys (at `key_positions`, where given) that the type cannot attend
        over."""

    def attention_function(
        self, attn_implementation: str | None, output_attentions: bool, dropout: float, device: torch.device
    ) -> AttentionFunction:
        """The function that computes this type's attention for a call (transformers' attention interface)."""
        raise NotImplementedError

    def forward(
        self,
        query: torch.Tensor | None,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | PackedSequences | None,
        hidden_states: torch.Tensor,
        *,
        position_bias: torch.Tensor | None = None,
        attn_implementation: str | None = "eager",
        output_attentions: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden_states [b, n, d] is the query input (dense synthesizers and dynamic x2l/x2w read it). A
        self-attention's `key_positions` [b or 1, m] (in kwargs; None: 0..m-1) are the keys' positions, cached keys
        first and the n queries last (synthesizers read them). An encoder running the packed real tokens of a padded
        batch passes their layout, a `PackedSequences`, as `attention_mask`: the type's attention then runs within
        each sequence (`PackedSequences.attend`)."""
        if isinstance(attention_mask, PackedSequences):  # the real tokens of a padded batch: attend per sequence
            return attention_mask.attend(
                self,
                query,
                key,
                value,
                hidden_states,
                position_bias=position_bias,
                attn_implementation=attn_implementation,
                output_attentions=output_attentions,
                **kwargs,
            )
        dropout = self.spec.dropout if self.training else 0.0
        self.check_lengths(hidden_states.shape[1], value.shape[2], kwargs.get("key_positions"))
        attention_forward = self.attention_function(attn_implementation, output_attentions, dropout, value.device)
        return attention_forward(
            self,
            query,
            key,
            value,
            attention_mask,
            scaling=self.scaling,
            dropout=dropout,
            position_bias=position_bias,
            hidden_states=hidden_states,
            output_attentions=output_attentions,
            **kwargs,
        )


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
    return _weighted_values(module, softmax_keys(logits if bias is None else logits + bias), value, dropout)


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


class SynthesizerAttention(VariantAttentionCore):
    """Synthesizer (Tay et al. 2020): attention weights synthesized without (or mixed with) query-key products.

    Dense B = relu(x W1 + b1) W2 + b2 per head, Random R[h, L, L] (trainable or fixed), Factorized Dense (two small
    heads, tiled and multiplied), Factorized Random R1 R2^T, and learned mixtures of these with each other and with the
    scaled dot product. Masks are added after synthesis.

    The tables are indexed by absolute position (a row of R per query, a column of R and of the dense logits per key),
    read where each token is: at `key_positions` [b, m] when the family gives them (the position ids its position
    embeddings used, so left padding with position ids leaves the real tokens' logits unchanged), else at 0..m-1 with
    the queries the last n (decoding with a cache uses row t for the query at position t).
    """

    def __init__(self, spec):
        super().__init__(spec)
        h, d, L, d_h = spec.num_heads, spec.hidden_size, spec.max_position, spec.key_head_size
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

    @torch.no_grad()
    def init_variant_weights(self, std: float) -> None:
        spec = self.spec
        for name in (
            "synthesizer_hidden_weight",
            "dense_weight",
            "factorized_dense_a",
            "factorized_dense_b",
            "random_logits",
            "factorized_random_r1",
            "factorized_random_r2",
        ):
            if hasattr(self, name):
                init.normal_(getattr(self, name), std=std)
        for name in ("synthesizer_hidden_bias", "dense_bias"):
            if hasattr(self, name):
                init.zeros_(getattr(self, name))
        if hasattr(self, "mixture_weights"):
            if spec.mixture_init == "dot_product":  # warm start: equals dot-product attention, still learns
                init.copy_(
                    self.mixture_weights, torch.tensor([1.0 if c == "dot_product" else 0.0 for c in spec.components])
                )
            else:
                init.constant_(self.mixture_weights, 1.0 / len(spec.components))

    def freeze_fixed_parameters(self) -> None:
        """Re-apply `synthesizer_random_trainable=False`."""
        if not self.spec.random_trainable:
            for name in ("random_logits", "factorized_random_r1", "factorized_random_r2"):
                if hasattr(self, name):
                    getattr(self, name).requires_grad_(False)

    def prepare_memory(self, key, value, memory):
        """A pure synthesizer has no keys: a [b, 1, m, 1] placeholder, since transformers' caches read their length
        from the keys and take an empty tensor for an empty cache."""
        if key is None:
            key = value.new_zeros(value.shape[0], 1, value.shape[2], 1)
        return key, value

    def check_lengths(self, n, m, key_positions=None):
        limit = self.spec.max_position
        if m > limit:
            raise ValueError(
                f"The synthesizer attends over at most `synthesizer_max_position`={limit} positions, got {m}; raise "
                "`synthesizer_max_position` (and retrain) or shorten the input."
            )
        if key_positions is None or torch.compiler.is_compiling():  # a compiled graph cannot read the positions
            return
        if not 0 <= int(key_positions.min()) <= int(key_positions.max()) < limit:
            raise ValueError(
                f"The synthesizer reads its tables at positions 0..{limit - 1} (`synthesizer_max_position`={limit}), "
                f"got position ids {int(key_positions.min())}..{int(key_positions.max())}; pass position ids in that "
                "range or raise `synthesizer_max_position` (and retrain)."
            )

    def attention_function(self, attn_implementation, output_attentions, dropout, device):
        """Every mixture folds into SDPA (`synthesizer_sdpa_forward`); the fold pays only where a fused kernel can
        run: on the CPU, SDPA has none with dropout."""
        if (
            attn_implementation == "sdpa"
            and (dropout == 0.0 or device.type != "cpu")
            and not output_attentions
            and not self.spec.recompute
        ):
            return synthesizer_sdpa_forward
        return synthesizer_eager_forward

    def dense_hidden(self, x):
        """relu(x W1^T + b1) per head: [b, n, d] -> [b, h, n, d_h]."""
        hidden = F.relu(
            F.linear(x, self.synthesizer_hidden_weight.to(x.dtype), self.synthesizer_hidden_bias.to(x.dtype))
        )
        return hidden.view(x.shape[0], x.shape[1], self.spec.num_heads, -1).transpose(1, 2)

    def dense_keys(self, cols):
        """[W2; b2] at the keys' positions `cols` (see `synthesizer_positions`), one row per key,
        [1 or b, h, m, d_h + 1]: the dense logits are [relu(W1 x + b1), 1] times it."""
        return _at(torch.cat([self.dense_weight, self.dense_bias], dim=1).transpose(1, 2), cols)

    def mixture_alpha(self):
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


def synthesizer_positions(key_positions: torch.Tensor | None, n: int, m: int):
    """Where the n queries and m keys sit in the synthesizer's position-indexed tables (rows of R, columns of the
    dense logits): `slice`s of 0..m-1, the queries the last n, where `key_positions` is None; else index tensors
    [b or 1, n] and [b or 1, m]: the queries are the last n of the keys (self-attention, cached keys first)."""
    if key_positions is None:
        return slice(m - n, m), slice(0, m)
    return key_positions[:, m - n :], key_positions


def _at(table: torch.Tensor, index) -> torch.Tensor:
    """A per-head table [h, L, k] at the positions `index` (a slice, or [b, count]): [1 or b, h, count, k]."""
    if isinstance(index, slice):
        return table[None, :, index]
    return table[:, index].movedim(1, 0)


def _pairs(table: torch.Tensor, rows, cols) -> torch.Tensor:
    """A per-head table [h, L, L] at every (query, key) pair of positions: [1 or b, h, n, m]."""
    if isinstance(rows, slice):
        return table[None, :, rows, cols]
    return table[:, rows[:, :, None], cols[:, None, :]].movedim(1, 0)


def synthesizer_logits(
    core: "SynthesizerAttention", query, key, x, scaling: float, key_positions: torch.Tensor | None = None
) -> torch.Tensor:
    """sum_c alpha_c S_c over the components, [b or 1, h, n, m] (masks are added by the caller); the synthetic ones
    read their tables at the positions of `synthesizer_positions`."""
    spec = core.spec
    n, m = x.shape[1], key.shape[2]
    rows, cols = synthesizer_positions(key_positions, n, m)
    terms = []
    hidden = None
    if "dense" in spec.components or "factorized_dense" in spec.components:
        hidden = core.dense_hidden(x)
    for comp in spec.components:
        if comp == "dot_product":
            terms.append(torch.matmul(query, key.transpose(2, 3)) * scaling)
        elif comp == "dense":  # B = relu(W1 x + b1) W2 + b2 at the keys' positions; b2 rides in the GEMM
            ones = hidden.new_ones(*hidden.shape[:-1], 1)
            w2 = core.dense_keys(cols).transpose(2, 3).to(x.dtype)  # [b or 1, h, d_h + 1, m]
            terms.append(torch.matmul(torch.cat([hidden, ones], dim=-1), w2))
        elif comp == "factorized_dense":  # A[j // b] * B[j % b] for the key at position j
            terms.append(_factorized_dense_logits(factorized_dense_heads(core, hidden), cols, m))
        elif comp == "random":
            terms.append(_pairs(core.random_logits, rows, cols))
        else:  # factorized_random: R1 R2^T, rank k
            terms.append(
                torch.matmul(
                    _at(core.factorized_random_r1, rows), _at(core.factorized_random_r2, cols).transpose(2, 3)
                )
            )
    if len(terms) == 1:
        return terms[0].to(x.dtype)
    alpha = core.mixture_alpha()
    logits = alpha[0] * terms[0]
    for a, t in zip(alpha[1:], terms[1:]):
        logits = logits + a * t
    return logits.to(x.dtype)


def factorized_dense_heads(core: "SynthesizerAttention", hidden: torch.Tensor, weight=1.0):
    """The factorized dense synthesizer's two per-query heads of relu(W1 x + b1) [b, h, n, d_h]: A [b, h, n, na]
    (times `weight`, a mixture weight) and B [b, h, n, nb]."""
    a, b = (getattr(core, name).to(hidden.dtype) for name in ("factorized_dense_a", "factorized_dense_b"))
    return torch.matmul(hidden, a) * weight, torch.matmul(hidden, b)


def _factorized_dense_logits(heads, cols, m: int) -> torch.Tensor:
    """Factorized dense logits [b, h, n, m]: `A[j // nb] * B[j % nb]` for the key at position j (every pair of an A
    and a B entry once over the na * nb positions), (A, B) = `factorized_dense_heads`."""
    fa, fb = heads
    positions = torch.arange(m, device=fa.device)[None] if isinstance(cols, slice) else cols  # [b or 1, m]
    index = positions[:, None, None, :].expand(*fa.shape[:-1], m)  # [b, h, n, m]
    nb = fb.shape[-1]
    return fa.gather(-1, index // nb) * fb.gather(-1, index % nb)


@recomputed_while_training
def synthesizer_eager_forward(
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
    key_positions=None,
    **kwargs,
):
    """The synthesizer with its weights: softmax(`synthesizer_logits` + mask (+ position bias)) v."""
    scaling = module.scaling if scaling is None else scaling
    logits = synthesizer_logits(module, query, key, hidden_states, scaling, key_positions)  # [b or 1, h, n, m]
    bias = attention_bias(module, attention_mask, position_bias, hidden_states.shape[1], value)
    return _weighted_values(module, softmax_keys(logits if bias is None else logits + bias), value, dropout)


# An attention of at least this many elements of [b, heads, n, m] runs the synthesizer's fused path one batch row at
# a time where that saves work (padded keys skipped, factorized dense logits made per row in a reused buffer); below
# it the calls' overhead would cost more than they save.
SDPA_PER_ROW_ELEMENTS = 1 << 20


def synthesizer_sdpa_forward(
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
    key_positions=None,
    **kwargs,
):
    """The synthesizer without its weights in memory where it can avoid them (SDPA's fused kernel); returns none.

    `synthesizer_sdpa_terms` writes the mixture as a dot product q' . k' (dot product, dense) plus an additive bias
    (random, factorized random, dense's b2) and factorized dense logits. Without gradients, a large attention
    (`SDPA_PER_ROW_ELEMENTS`) with a right-padding mask (`padding_lengths`) or factorized dense terms runs one batch
    row at a time over its real keys only (`_synthesizer_rows`); otherwise one SDPA call takes the mask and the bias
    together, and a mixture with no dot-product form takes one softmax of its logits (one for the batch where they
    are the same for every row: random and factorized random), no q . k to compute.
    """
    x = hidden_states
    b, n, m = x.shape[0], x.shape[1], value.shape[2]
    rows, cols = synthesizer_positions(key_positions, n, m)
    q, k, bias, factorized = synthesizer_sdpa_terms(
        module, query, key, x, module.scaling if scaling is None else scaling, rows, cols
    )
    per_row = (
        not torch.is_grad_enabled()
        and dropout == 0.0
        and not torch.compiler.is_compiling()
        and isinstance(cols, slice)
        and b * value.shape[1] * n * m >= SDPA_PER_ROW_ELEMENTS
    )
    lengths = padding_lengths(attention_mask, b) if per_row else None
    per_row = per_row and (lengths is not None or factorized is not None)
    if factorized is not None and not per_row:
        bias, factorized = _add(bias, _factorized_dense_logits(factorized, cols, m)), None  # [b, h, n, m]
    mask = None if lengths is not None else additive_mask(attention_mask, x.dtype)
    is_causal = module.is_causal and attention_mask is None and n > 1
    if is_causal and (q is None or bias is not None or position_bias is not None or n != m or per_row):
        mask, is_causal = _add(mask, causal_mask(n, m, x.dtype, x.device)), False
    mask = _add(_add(mask, bias), position_bias)
    if q is None and not per_row:
        return _weights_times_values(F.dropout(softmax_keys(mask), p=dropout, training=module.training), value), None
    d_v = value.shape[-1]
    width = d_v if q is None else -(-max(q.shape[-1], d_v) // 8) * 8  # one head size for q', k' and v (fused kernel)
    q, k, v = (t if t is None or t.shape[-1] == width else F.pad(t, (0, width - t.shape[-1])) for t in (q, k, value))
    if per_row:
        return _synthesizer_rows(q, k, v, mask, factorized, cols, lengths, n)[..., :d_v], None
    out = F.scaled_dot_product_attention(
        q, k.expand(b, -1, -1, -1), v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal, scale=1.0
    )  # a k' of batch 1 expanded: fused
    return out[..., :d_v].transpose(1, 2).contiguous(), None


def _weights_times_values(weights: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """weights [1 or b, h, n, m] times value [b, h, m, d], heads-last [b, n, h, d]. Weights shared by the batch
    take one GEMM per head over every row's values (matmul would first copy them out to [b, h, n, m]: 2.5x the
    time at 8 x 512)."""
    b, h, m, d = value.shape
    if weights.shape[0] > 1 or b == 1:
        return torch.matmul(weights, value).transpose(1, 2).contiguous()
    out = torch.bmm(weights[0], value.permute(1, 2, 0, 3).reshape(h, m, b * d))  # [h, n, b * d]
    return out.view(h, -1, b, d).permute(2, 1, 0, 3).contiguous()


def _add(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    """a + b, where either may be None (no term)."""
    return b if a is None else a if b is None else a + b


def _synthesizer_rows(q, k, v, mask, factorized, cols: slice, lengths: list[int] | None, n: int) -> torch.Tensor:
    """softmax(q' k'^T + mask (+ factorized dense logits)) v one batch row at a time, row i over its first
    lengths[i] keys (all where None): q' [b, h, n, w] or None (no dot-product form: no SDPA, the softmax of the
    row's logits in a reused buffer), k' [b or 1, h, m, w], v [b, h, m, w], mask broadcastable to [b, h, n, m] or
    None, `factorized` the factorized dense heads (`factorized_dense_heads`) or None. Returns [b, n, h, w]."""
    b, h, m, w = v.shape
    out = v.new_empty(b, n, h, w)
    buffer = None
    if q is None or factorized is not None:
        buffer = v.new_empty(h * n * (m if factorized is None else factorized[0].shape[-1] * factorized[1].shape[-1]))
    for i in range(b):
        keys = m if lengths is None else lengths[i]
        row_mask = None if mask is None else mask[i if mask.shape[0] > 1 else 0, ..., :keys]  # [h or 1, ., keys]
        if buffer is not None:
            row_mask = _row_logits(factorized, i, cols, keys, row_mask, buffer, (h, n))  # [h, n, keys]
        if q is None:
            row = torch.matmul(softmax_keys(row_mask, in_place=True), v[i, :, :keys])  # [h, n, w]
        else:
            j = i if k.shape[0] > 1 else 0
            row = F.scaled_dot_product_attention(
                q[i : i + 1],
                k[j : j + 1, :, :keys],
                v[i : i + 1, :, :keys],
                attn_mask=None if row_mask is None else row_mask[None],
                scale=1.0,
            )[0]
        out[i] = row.transpose(0, 1)
    return out


def _row_logits(
    factorized, i: int, cols: slice, keys: int, row_mask, buffer: torch.Tensor, heads_rows
) -> torch.Tensor:
    """Batch row i's logits over its first `keys` keys, [h, n, keys] (`heads_rows` = (h, n)), in the flat `buffer`:
    its factorized dense logits A[i, j // nb] B[i, j % nb] at the keys' positions `cols` plus `row_mask`, or
    `row_mask` alone."""
    h, n = heads_rows
    if factorized is None:
        return buffer[: h * n * keys].view(h, n, keys).copy_(row_mask)
    fa, fb = factorized
    logits = torch.mul(fa[i, :, :, :, None], fb[i, :, :, None, :], out=buffer.view(h, n, fa.shape[-1], -1))
    logits = logits.view(h, n, -1)[..., cols][..., :keys]
    return logits if row_mask is None else logits.add_(row_mask)


def synthesizer_sdpa_terms(module, query, key, x, scaling: float, rows, cols):
    """The synthesizer's logits sum_c alpha_c S_c as q' [b, h, n, w] and k' [b or 1, h, m, w] whose dot product
    carries the components of that form (None, None where there is none), an additive bias [1 or b, h, n or 1, m]
    (or None), and the factorized dense heads (alpha A, B) (or None), made into logits by the caller.

    dot product: a_dp s q . k; dense: a_d relu(W1 x + b1) . W2[:, j], b2[j] in the bias; random: a_r R[i, j] and
    factorized random: a_fr R1[i] . R2[j] in the bias, one [h, n, m] table for the batch (its rank-k product costs
    less than k more columns in q', k' and v); factorized dense: a_fd A[i, j // nb] B[i, j % nb]. Tables are read at
    the positions `rows` and `cols` (`synthesizer_positions`).
    """
    spec = module.spec
    alpha = module.mixture_alpha()
    hidden = module.dense_hidden(x) if {"dense", "factorized_dense"} & set(spec.components) else None
    qs, ks, bias, factorized = [], [], None, None
    for i, comp in enumerate(spec.components):
        weight = 1.0 if alpha is None else alpha[i]
        if comp == "dot_product":
            qs.append(query * (weight * scaling))
            ks.append(key)
        elif comp == "dense":  # [b, h, n, d_h] . [1 or b, h, m, d_h], + b2 [1 or b, h, 1, m]
            qs.append(hidden if alpha is None else hidden * weight)
            ks.append(_at(module.dense_weight.transpose(1, 2), cols).to(x.dtype))
            bias = _add(bias, _at(module.dense_bias.transpose(1, 2), cols).transpose(2, 3).to(x.dtype) * weight)
        elif comp == "factorized_random":
            table = torch.matmul(_at(module.factorized_random_r1, rows), _at(module.factorized_random_r2, cols).mT)
            bias = _add(bias, (table * weight).to(x.dtype))
        elif comp == "random":
            bias = _add(bias, (_pairs(module.random_logits, rows, cols) * weight).to(x.dtype))
        else:  # factorized dense
            factorized = factorized_dense_heads(module, hidden, weight)
    if not qs:
        return None, None, bias, factorized
    if len(qs) == 1:
        return qs[0], ks[0].contiguous(), bias, factorized
    k = torch.cat([t.expand(max(t.shape[0] for t in ks), -1, -1, -1) for t in ks], dim=-1)
    return torch.cat(qs, dim=-1), k, bias, factorized


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


class _AttentionClasses(Mapping):
    """`ATTENTION_CLASSES`: attention type -> the class of its layers, read from its registration's `core` (the class,
    or its name in this module). A read-only view of `ATTENTION_REGISTRY`, so a type registered later is in it."""

    def __getitem__(self, attention_type: str) -> type[VariantAttentionCore]:
        core = ATTENTION_REGISTRY[attention_type].core
        cls = globals().get(core) if isinstance(core, str) else core
        if not (isinstance(cls, type) and issubclass(cls, VariantAttentionCore)):
            raise ValueError(
                f"The attention type {attention_type!r} is registered with core={core!r}, which is not a "
                "`VariantAttentionCore` subclass: give the class itself, or the name of one in attention_variants."
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
