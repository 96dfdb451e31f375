"""Synthesizer attention (Tay et al. 2020): attention weights synthesized without query-key products, or mixed with
them. `SynthesizerAttention` holds the components' parameters (Dense, Random, Factorized Dense, Factorized Random)
and the mixture's weights; `synthesizer_sdpa_forward` computes a call in one `scaled_dot_product_attention` (the
synthesized logits folded into the mask) and `synthesizer_eager_forward` materialises the weights.

This file is copied next to every saved checkpoint (remote code): it imports only torch, public transformers API and
its siblings (`attention_base`, the base and the helpers every type shares).
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init

from .attention_base import (
    VariantAttentionCore,
    additive_mask,
    attention_bias,
    causal_mask,
    padding_lengths,
    recomputed_while_training,
    weighted_values,
)
from .talking_heads_blockwise import softmax_keys


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
        if "random" in comps:  # R [h, L, L], or tied to the offset: r [h, 2L - 1], R[i, j] = r[j - i]
            shape = (h, 2 * L - 1) if spec.random_offset else (h, L, L)
            self.random_logits = nn.Parameter(torch.empty(shape), requires_grad=spec.random_trainable)
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

    def random_map(self) -> torch.Tensor:
        """The Random maps R [h, L, L]: the parameter itself, or (`random_offset`) its offsets laid out as a
        Toeplitz map, R[i, j] = r[j - i]."""
        if not self.spec.random_offset:
            return self.random_logits
        positions = torch.arange(self.spec.max_position, device=self.random_logits.device)
        return self.random_logits[:, positions[None, :] - positions[:, None] + self.spec.max_position - 1]

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
            terms.append(_pairs(core.random_map(), rows, cols))
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
    return weighted_values(module, softmax_keys(logits if bias is None else logits + bias), value, dropout)


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
            bias = _add(bias, (_pairs(module.random_map(), rows, cols) * weight).to(x.dtype))
        else:  # factorized dense
            factorized = factorized_dense_heads(module, hidden, weight)
    if not qs:
        return None, None, bias, factorized
    if len(qs) == 1:
        return qs[0], ks[0].contiguous(), bias, factorized
    k = torch.cat([t.expand(max(t.shape[0] for t in ks), -1, -1, -1) for t in ks], dim=-1)
    return torch.cat(qs, dim=-1), k, bias, factorized
