"""The base every attention type stands on: `VariantAttentionCore` (the part of a layer after the projections and
before the output projection: the mask, dropout, recomputation and the memory as it is cached), the masks and the
helpers the types' functions share, and `attend_per_sequence`, a type's attention within each of packed sequences.

This file is copied next to every saved checkpoint (remote code), so it imports only torch, public transformers API
and its siblings. The types themselves are in `attention_variants` (dot product, talking heads, general bilinear
attention, and the registry that picks a type's class) and `attention_synthesizer` (the Synthesizer).

Every attention function has transformers' attention interface, as ``eager_attention_forward`` in transformers'
BERT: ``fn(module, query, key, value, attention_mask, scaling=..., dropout=..., **kwargs)`` with the keyword extras
`position_bias` (T5), `hidden_states` (the query input [b, n, d], read by dense synthesizers and talking heads'
dynamic maps), `key_positions` (BERT and ALBERT: the position of every key, read by synthesizers) and
`output_attentions`, returning (attn_output [b, n, heads, d], attn_weights or None). One contract for every type, as
transformers' ``eager_attention_forward``: the attn_weights a function returns are the ones that multiply V, after
dropout (an eager function drops only while `module.training`, as transformers' own), and half-precision logits go
through one softmax, in float32 (`talking_heads_blockwise.softmax_keys`).

Packed sequences (`packed_sequences.PackedSequences`: a padded batch's real tokens, or a packed row) reach a core as
transformers' flash-attention keyword arguments, `cu_seq_lens_q`/`cu_seq_lens_k` and `max_length_q`/`max_length_k`,
with no mask: the core runs its type's function within each sequence (`attend_per_sequence`). Shapes: b batch, n query
length, m key length, h_k/h/h_v key, softmax and value heads, d_k/d_v head sizes.
"""

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .attention_types import AttentionSpec
from .talking_heads_blockwise import (
    causal_bias,
)

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


def weighted_values(module, weights: torch.Tensor, value: torch.Tensor, dropout: float):
    """dropout(weights) [b, h, n, m] times value [b, h, m, d_v], heads-last, with the dropped weights."""
    weights = F.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights  # [b, n, h, d_v]


def sequence_runs(cu_seq_lens: torch.Tensor) -> list[tuple[int, int]]:
    """(count, length) of each run of equal-length sequences side by side in a packing's cumulative lengths."""
    runs = []
    for length in torch.diff(cu_seq_lens).tolist():
        if runs and runs[-1][1] == length:
            runs[-1] = (runs[-1][0] + 1, length)
        else:
            runs.append((1, length))
    return runs


def attend_per_sequence(
    attention_forward: AttentionFunction,
    module,
    query,
    key,
    value,
    hidden_states,
    *,
    cu_seq_lens_q,
    cu_seq_lens_k,
    max_length_q=None,
    max_length_k=None,
    key_positions=None,
    position_bias=None,
    output_attentions=False,
    **kwargs,
):
    """`attention_forward` (a type's attention function) within each of the packed sequences that the flash-attention
    keyword arguments describe: query [1, h_k, total, d_k], key and value as `prepare_memory` makes them from the
    packed memory, hidden_states [1, total, d], `key_positions` [1, total] (None: each sequence counts from 0).

    One unmasked call per run of equal-length sequences side by side, on [count, heads, length, d] blocks (views of
    the packed heads, no copy), so a type runs on a sequence exactly as on that sequence alone. A `position_bias`
    [1, heads, m, m] (T5's relative bias of m >= every length positions) is read at each block's top-left corner, the
    bias of a sequence of that length. Returns [1, total, h_v, d_v] and no weights."""
    if output_attentions:
        raise ValueError("Packed sequences return no attention weights: run the padded batch (`unpad=False`).")
    if cu_seq_lens_k is not cu_seq_lens_q and not torch.equal(cu_seq_lens_q, cu_seq_lens_k):
        raise ValueError("Packed self-attention needs cu_seq_lens_q == cu_seq_lens_k.")
    outputs, start = [], 0
    for count, length in sequence_runs(cu_seq_lens_q):
        tokens = slice(start, start + count * length)
        start = tokens.stop

        def block(t):  # [1, heads, total, d] -> [count, heads, length, d], a view
            return None if t is None else t[0, :, tokens].unflatten(1, (count, length)).transpose(0, 1)

        positions = None if key_positions is None else key_positions[0, tokens].view(count, length)
        bias = None if position_bias is None else position_bias[:, :, :length, :length]
        module.check_lengths(length, length, positions)
        out, _ = attention_forward(
            module,
            block(query),
            block(key),
            block(value),
            None,
            position_bias=bias,
            hidden_states=hidden_states[0, tokens].view(count, length, -1),
            key_positions=positions,
            output_attentions=False,
            **kwargs,
        )
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
        attention_mask: torch.Tensor | None,
        hidden_states: torch.Tensor,
        *,
        position_bias: torch.Tensor | None = None,
        attn_implementation: str | None = "eager",
        output_attentions: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden_states [b, n, d] is the query input (dense synthesizers and dynamic x2l/x2w read it). A
        self-attention's `key_positions` [b or 1, m] (in kwargs; None: 0..m-1) are the keys' positions, cached keys
        first and the n queries last (synthesizers read them). Packed sequences come as `cu_seq_lens_q`/`cu_seq_lens_k`
        (in kwargs) with no mask: the type's attention then runs within each (`attend_per_sequence`)."""
        dropout = self.spec.dropout if self.training else 0.0
        attention_forward = self.attention_function(attn_implementation, output_attentions, dropout, value.device)
        if kwargs.get("cu_seq_lens_q") is not None:  # packed sequences: attend within each
            return attend_per_sequence(
                attention_forward,
                self,
                query,
                key,
                value,
                hidden_states,
                scaling=self.scaling,
                dropout=dropout,
                position_bias=position_bias,
                output_attentions=output_attentions,
                **kwargs,
            )
        self.check_lengths(hidden_states.shape[1], value.shape[2], kwargs.get("key_positions"))
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
