"""Talking-heads attention in PyTorch: the reference formula, and its two algorithms, eager (whole n x m tensors) and
the blockwise core (no n x m tensor), both made of one formula for L (`talking_heads_logits`) and one for U
(`talking_heads_mixed`), applied to a whole attention or to a block of query rows.

Copied next to every saved checkpoint (remote code): imports only torch.

Every algorithm here and in `talking_heads_triton` computes the same function of the same arguments:

    query [b, h_k, n, d_k], key [b, h_k, m, d_k], value [b, h_v, m, d_v]
    bias       additive [b or 1, h or 1, n or 1, m] (padding mask, T5's position bias) or None
    pre_proj   P_l [h_k, h] or None (no pre-softmax map: h_k = h)
    post_proj  P_w [h, h_v] or None (no post-softmax map: h = h_v)
    x2l [b, n, h_k, h], m2l [b, m, h_k, h], x2w [b, n, h, h_v], m2w [b, m, h, h_v]: the dynamic maps, or None
    scaling s; causal: the n queries are the last n of the m positions and see no later key

    J[k, i, j] = q[k, i] . key[k, j]
    L[h, i, j] = s sum_k J[k, i, j] (P_l[k, h] + x2l[i, k, h] + m2l[j, k, h]) + bias[h, i, j]   (s J[h] without P_l)
    W[h, i, j] = softmax_j L[h, i, j]
    U[v, i, j] = sum_h W[h, i, j] (P_w[h, v] + x2w[i, h, v] + m2w[j, h, v])                      (W[v] without P_w)
    out[v, i]  = sum_j dropout(U)[v, i, j] value[v, j]                                           -> [b, h_v, n, d_v]
"""

import torch


def causal_bias(n: int, m: int, dtype: torch.dtype, device, rows: slice = slice(None)) -> torch.Tensor:
    """Additive causal mask [rows, m] for n queries that are the last n of m positions (row i sees keys <= m-n+i)."""
    query_pos = torch.arange(m - n, m, device=device)[rows, None]
    blocked = torch.arange(m, device=device)[None, :] > query_pos
    return torch.zeros(blocked.shape, dtype=dtype, device=device).masked_fill(blocked, torch.finfo(dtype).min)


def talking_heads_reference(
    query,
    key,
    value,
    bias=None,
    pre_proj=None,
    post_proj=None,
    x2l=None,
    m2l=None,
    x2w=None,
    m2w=None,
    *,
    scaling: float,
    causal: bool = False,
    dropout_mask=None,
):
    """The formula above, term by term with einsum: the slow, obvious reference the fast algorithms are tested
    against. `dropout_mask` [b, h_v, n, m] (already scaled by 1/(1-p)) multiplies U before V."""
    n, m = query.shape[2], key.shape[2]
    dots = torch.einsum("bkid,bkjd->bkij", query, key)  # J [b, h_k, n, m]
    if pre_proj is None:
        logits = dots * scaling
    else:
        logits = torch.einsum("bkij,kh->bhij", dots, pre_proj) * scaling
        if x2l is not None:
            logits = logits + torch.einsum("bkij,bikh->bhij", dots, x2l) * scaling
        if m2l is not None:
            logits = logits + torch.einsum("bkij,bjkh->bhij", dots, m2l) * scaling
    if bias is not None:
        logits = logits + bias
    if causal:
        logits = logits + causal_bias(n, m, logits.dtype, logits.device)
    weights = torch.softmax(logits, dim=-1)  # W [b, h, n, m]
    if post_proj is None:
        mixed = weights
    else:
        mixed = torch.einsum("bhij,hv->bvij", weights, post_proj)
        if x2w is not None:
            mixed = mixed + torch.einsum("bhij,bihv->bvij", weights, x2w)
        if m2w is not None:
            mixed = mixed + torch.einsum("bhij,bjhv->bvij", weights, m2w)
    if dropout_mask is not None:
        mixed = mixed * dropout_mask
    return torch.einsum("bvij,bvjd->bvid", mixed, value)  # [b, h_v, n, d_v]


# ------------------------------------------------------------ the formula on a whole attention (eager) or one block
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
    """`mix_heads` in place for a square map (else `mix_heads`), without autograd: x [b, h, n, m] is overwritten.

    On the CPU a fresh attention-sized tensor costs more in page faults than the arithmetic that fills it, so the
    eager algorithm's inference mixes each batch item into one reused [h, n*m] scratch buffer and copies it back
    (BERT-base's core at b=8, n=512: 1.3x faster and 50-100 MiB less peak memory than fresh tensors; measured in
    docs/attention-algorithms.md).
    """
    b, h, n, m = x.shape
    if proj.shape[0] != proj.shape[1]:
        return mix_heads(x, proj, bias)
    flat = x.view(b, h, n * m)
    weight = proj.t().to(x.dtype)
    scratch = x.new_empty(h, n * m)
    for i in range(b):
        torch.mm(weight, flat[i], out=scratch)
        flat[i].copy_(scratch)
    return x if bias is None else x.add_(bias)


def _row_maps(t: torch.Tensor) -> torch.Tensor:
    """A per-query dynamic map [b, r, h_in, h_out] as [b, h_in, h_out, r, 1]: map[:, a] broadcasts over the keys."""
    return t.permute(0, 2, 3, 1)[..., None]


def _key_maps(t: torch.Tensor) -> torch.Tensor:
    """A per-key dynamic map [b, k, h_in, h_out] as [b, h_in, h_out, 1, k] (keys contiguous): broadcasts over rows."""
    return t.permute(0, 2, 3, 1).contiguous()[:, :, :, None]


def _add_dynamic(out: torch.Tensor, x: torch.Tensor, maps: list[torch.Tensor]) -> torch.Tensor:
    """out[b, o, i, j] += sum_a x[b, a, i, j] D[b, a, o, i or j] for each map D (`_row_maps` / `_key_maps` layout):
    one broadcast multiply-add per input head over the block, with no [b, r, k, h_in, h_out] tensor and no
    permuted copy of the block (einsum batches over rows or keys: GEMMs of a few heads, a per-key copy)."""
    for a in range(x.shape[1]):
        for dyn in maps:
            out.addcmul_(x[:, a : a + 1], dyn[:, a])
    return out


def talking_heads_logits(query, key, bias, pre_proj, x2l, m2l, scaling: float, causal=None, mix=mix_heads):
    """J [b, h_k, r, k] and L [b, h, r, k] of the formula for r query rows over k keys: a whole attention (the eager
    algorithm) or one block. x2l [b, r, h_k, h] and m2l [b, k, h_k, h] are cut to those rows and keys; `causal` is an
    additive [r, k] causal mask, or None; `mix` maps the heads (`mix_heads_`: L overwrites J)."""
    dots = torch.matmul(query, key.transpose(2, 3))  # J [b, h_k, r, k]
    if pre_proj is None:
        logits = dots * scaling if bias is None else torch.add(bias, dots, alpha=scaling)
    else:
        logits = mix(dots, pre_proj * scaling, bias)  # [b, h, r, k]
        # + s sum_k J[i,j,k] (D(x_i)[k,h] + D(m_j)[k,h])
        dynamic = [_row_maps(x2l * scaling)] if x2l is not None else []
        dynamic += [_key_maps(m2l * scaling)] if m2l is not None else []
        _add_dynamic(logits, dots, dynamic)
    if causal is not None:
        logits += causal
    return dots, logits


def talking_heads_mixed(weights: torch.Tensor, post_proj, x2w, m2w, mix=mix_heads) -> torch.Tensor:
    """U [b, h_v, r, k] from the softmax weights W [b, h, r, k] (a whole attention or one block); x2w [b, r, h, h_v]
    and m2w [b, k, h, h_v] cut to its rows and keys; `mix` maps the heads (`mix_heads_`: U overwrites W)."""
    if post_proj is None:
        return weights
    dynamic = [_row_maps(x2w)] if x2w is not None else []
    dynamic += [_key_maps(m2w)] if m2w is not None else []
    return _add_dynamic(mix(weights, post_proj), weights, dynamic)  # [b, h_v, r, k]


def softmax_keys(logits: torch.Tensor, *, in_place: bool = False) -> torch.Tensor:
    """W = softmax(L) over the keys, the softmax of every attention type: half-precision logits are normalised in
    float32 and W is returned in their dtype (as transformers' T5 does). `in_place`: W overwrites L where autograd
    does not need L (for a caller that owns L; never a view of a parameter)."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        return torch.softmax(logits, dim=-1, dtype=torch.float32).to(logits.dtype)
    if in_place and not (torch.is_grad_enabled() and logits.requires_grad):
        return torch.softmax(logits, dim=-1, out=logits)
    return torch.softmax(logits, dim=-1)


def talking_heads_eager(
    query,
    key,
    value,
    bias=None,
    pre_proj=None,
    post_proj=None,
    x2l=None,
    m2l=None,
    x2w=None,
    m2w=None,
    *,
    scaling: float,
    causal: bool = False,
    dropout: float = 0.0,
    return_weights: bool = False,
):
    """The formula of this module on whole [b, heads, n, m] tensors: out [b, h_v, n, d_v], and with `return_weights`
    also the weights that multiply V, dropout(U) [b, h_v, n, m]. Differentiable by autograd, which keeps J, W and U
    for backward. Without gradients W overwrites L, and for static maps in float32 one buffer holds J, L, W and U in
    turn (`mix_heads_`; not while torch.compile / torch.export trace, as its loop over the batch would fix its size)."""
    n, m = query.shape[2], key.shape[2]
    in_place = (
        not torch.is_grad_enabled()
        and query.dtype == torch.float32
        and not torch.compiler.is_compiling()
        and all(t is None for t in (x2l, m2l, x2w, m2w))
    )
    mix = mix_heads_ if in_place else mix_heads
    mask = causal_bias(n, m, query.dtype, query.device) if causal else None
    logits = talking_heads_logits(query, key, bias, pre_proj, x2l, m2l, scaling, mask, mix)[1]  # L
    weights = softmax_keys(logits, in_place=True)  # W
    mixed = talking_heads_mixed(weights, post_proj, x2w, m2w, mix)  # U [b, h_v, n, m]
    if dropout > 0.0:
        mixed = torch.nn.functional.dropout(mixed, p=dropout)
    out = torch.matmul(mixed, value)  # [b, h_v, n, d_v]
    return (out, mixed) if return_weights else out


# ---------------------------------------------------------------------------------------------- the blockwise core
# Rows per query block: a block's tensors are [b, heads, rows, m]; about this many elements keeps them in the cache.
BLOCK_ELEMENTS = 1 << 20


def block_rows(b: int, heads: int, n: int, m: int, block_size: int | None = None, budget: int = BLOCK_ELEMENTS) -> int:
    """The query rows of one block: `block_size`, or as many as keep a block's [b, heads, rows, m] tensors near
    `budget` elements (at least 16, at most n)."""
    if block_size is None:
        block_size = max(16, budget // max(1, b * heads * m))
    return max(1, min(n, block_size))


def _rows(t: torch.Tensor | None, rows: slice, dim: int, keys: int | None = None) -> torch.Tensor | None:
    """`t` cut to the block's rows along `dim` (left whole where it broadcasts there) and, where `keys` is given, to
    the first `keys` keys along the last dim."""
    if t is None:
        return None
    if t.shape[dim] != 1:
        t = t.narrow(dim, rows.start, rows.stop - rows.start)
    return t if keys is None else t[..., :keys]


class _Block:
    """One query block: its rows, the keys it sees (all, or under a causal mask those up to its last row) and the
    inputs cut to them."""

    def __init__(self, inputs: dict, rows: slice, causal: bool, n: int, m: int):
        self.rows = rows
        self.keys = m - n + rows.stop if causal else m  # later keys are masked for every row of the block
        self.causal = causal and rows.start + m - n < self.keys - 1  # some key in range is still masked
        self.n, self.m = n, m
        k = self.keys
        self.query = inputs["query"][:, :, rows]  # [b, h_k, r, d_k]
        self.key, self.value = inputs["key"][:, :, :k], inputs["value"][:, :, :k]
        self.bias = _rows(inputs["bias"], rows, 2, k)
        self.x2l, self.x2w = _rows(inputs["x2l"], rows, 1), _rows(inputs["x2w"], rows, 1)
        self.m2l = None if inputs["m2l"] is None else inputs["m2l"][:, :k]
        self.m2w = None if inputs["m2w"] is None else inputs["m2w"][:, :k]


def _block_logits(blk: _Block, pre_proj, scaling: float):
    """`talking_heads_logits` of a block, its causal mask cut to the block's rows and keys."""
    causal = None
    if blk.causal:
        causal = causal_bias(blk.n, blk.m, blk.query.dtype, blk.query.device, blk.rows)[:, : blk.keys]
    return talking_heads_logits(blk.query, blk.key, blk.bias, pre_proj, blk.x2l, blk.m2l, scaling, causal)


def _dropout_keep(shape, p: float, seed: int, block: int, device) -> torch.Tensor:
    """The block's dropout keep-mask (1 keeps, 0 drops; the 1/(1-p) scale is applied to the block's output and to
    its incoming gradient, tensors n/m times smaller), drawn from a generator seeded with (seed, block): the same mask
    in forward and backward, and for a given seed whatever the rest of the program draws."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed + 1_000_003 * block)
    return torch.rand(shape, generator=generator, device=device).ge_(p)  # float32 0 / 1


_INPUTS = ("query", "key", "value", "bias", "pre_proj", "post_proj", "x2l", "m2l", "x2w", "m2w")


class BlockwiseTalkingHeads(torch.autograd.Function):
    """The formula of this module one block of queries at a time, in forward and again in backward.

    A block holds every key its rows see, so its softmax is complete: forward keeps only the output rows, backward
    recomputes the block's J, L, W and U from the saved inputs (no softmax statistics are saved: recomputing the
    softmax of a block costs one fused pass, and is exact even for a row whose every key is masked) and runs the chain
    rule through them. Peak memory is a few [b, heads, rows, keys] block tensors instead of four [b, heads, n, m].
    """

    @staticmethod
    def forward(
        ctx,
        query,
        key,
        value,
        bias,
        pre_proj,
        post_proj,
        x2l,
        m2l,
        x2w,
        m2w,
        scaling,
        causal,
        dropout,
        seed,
        block_size,
    ):
        # heads-first views of [b, n, heads, d] projections: contiguous once, not copied by every block's matmul
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
        inputs = dict(zip(_INPUTS, (query, key, value, bias, pre_proj, post_proj, x2l, m2l, x2w, m2w)))
        b, h_v, n, d_v = query.shape[0], value.shape[1], query.shape[2], value.shape[3]
        m = key.shape[2]
        h = query.shape[1] if pre_proj is None else pre_proj.shape[1]
        step = block_rows(b, max(query.shape[1], h, h_v), n, m, block_size)
        out = value.new_empty(b, h_v, n, d_v)
        for index, start in enumerate(range(0, n, step)):
            blk = _Block(inputs, slice(start, min(n, start + step)), causal, n, m)
            weights = softmax_keys(_block_logits(blk, pre_proj, scaling)[1], in_place=True)  # W [b, h, r, k]
            mixed = talking_heads_mixed(weights, post_proj, blk.x2w, blk.m2w)  # U [b, h_v, r, k]
            if dropout > 0.0:  # U * keep / (1 - p), the scale on the small product
                mixed.mul_(_dropout_keep(mixed.shape, dropout, seed, index, mixed.device))
            out[:, :, blk.rows] = torch.matmul(mixed, blk.value).div_(1.0 - dropout)  # [b, h_v, r, d_v]
        ctx.save_for_backward(*inputs.values())
        ctx.options = (scaling, causal, dropout, seed, step)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        inputs = dict(zip(_INPUTS, ctx.saved_tensors))
        scaling, causal, dropout, seed, step = ctx.options
        n, m = inputs["query"].shape[2], inputs["key"].shape[2]
        grads = {
            name: torch.zeros_like(t, dtype=_accumulation_dtype(t))
            if t is not None and ctx.needs_input_grad[i]
            else None
            for i, (name, t) in enumerate(inputs.items())
        }
        grad_out = grad_out.contiguous() if dropout == 0.0 else grad_out / (1.0 - dropout)  # the keep-mask's scale
        for index, start in enumerate(range(0, n, step)):
            blk = _Block(inputs, slice(start, min(n, start + step)), causal, n, m)
            keep = None
            if dropout > 0.0:
                shape = (grad_out.shape[0], grad_out.shape[1], blk.rows.stop - blk.rows.start, blk.keys)
                keep = _dropout_keep(shape, dropout, seed, index, grad_out.device)
            _block_backward(blk, inputs, grads, grad_out[:, :, blk.rows], keep, scaling)
        result = [None if g is None else g.to(inputs[name].dtype) for name, g in grads.items()]
        return (*result, None, None, None, None, None)


def _accumulation_dtype(t: torch.Tensor) -> torch.dtype:
    """Gradients summed over blocks in float32 for half-precision inputs, else in the input's dtype."""
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def _heads_outer(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """sum over batch, rows and keys of a[b, i, r, k] c[b, o, r, k]: [i, o] (the gradient of a heads map)."""
    b, h_in = a.shape[:2]
    return torch.bmm(a.reshape(b, h_in, -1), c.reshape(b, c.shape[1], -1).transpose(1, 2)).sum(0)


def _add_rows(grad: torch.Tensor | None, rows: slice, dim: int, value: torch.Tensor, keys: int | None = None):
    """grad (cut as `_rows` cuts its tensor) += value, summed over the axes where grad broadcasts."""
    if grad is None:
        return
    target = _rows(grad, rows, dim, keys)
    axes = [i for i, size in enumerate(target.shape) if size == 1 and value.shape[i] != 1]
    target += value.sum(axes, keepdim=True) if axes else value


def _transposed_maps(row_map, key_map) -> list[torch.Tensor]:
    """The dynamic maps [b, r or k, h_in, h_out] of a block, transposed to map h_out back to h_in (for `_add_dynamic`)."""
    maps = [] if row_map is None else [_row_maps(row_map.transpose(2, 3))]
    return maps + ([] if key_map is None else [_key_maps(key_map.transpose(2, 3))])


def _dynamic_grads(grads: dict, row_name: str, key_name: str, blk: _Block, x, grad_out, scaling: float) -> None:
    """The gradients of a per-query and a per-key map D[., a, o] whose term is out[o] += x[a] D[a, o]: the sums of
    x[a] dout[o] over the keys (per query, one GEMM per row through einsum) and over the rows (per key: a broadcast
    multiply and a row sum per input head, no per-key GEMMs)."""
    if grads[row_name] is not None and getattr(blk, row_name) is not None:
        _add_rows(grads[row_name], blk.rows, 1, torch.einsum("baij,boij->biao", x, grad_out).mul_(scaling))
    if grads[key_name] is not None and getattr(blk, key_name) is not None:
        target = grads[key_name][:, : blk.keys]  # [b, k, h_in, h_out]
        for a in range(x.shape[1]):
            target[:, :, a] += (grad_out * x[:, a : a + 1]).sum(2).transpose(1, 2).mul_(scaling)  # [b, k, h_out]


def _block_backward(blk: _Block, inputs: dict, grads: dict, grad_out, keep, scaling: float) -> None:
    """Add one block's share of every gradient to `grads`; grad_out [b, h_v, r, d_v], keep the dropout multiplier."""
    pre, post, k, rows = inputs["pre_proj"], inputs["post_proj"], blk.keys, blk.rows
    dots, logits = _block_logits(blk, pre, scaling)
    weights = softmax_keys(logits, in_place=True)  # W [b, h, r, k]
    mixed = talking_heads_mixed(weights, post, blk.x2w, blk.m2w)  # U [b, h_v, r, k]
    grad_mixed = torch.matmul(grad_out, blk.value.transpose(2, 3))  # dU [b, h_v, r, k]
    if keep is not None:
        mixed = mixed * keep if post is None else mixed.mul_(keep)  # W itself is needed below
        grad_mixed.mul_(keep)
    _add_rows(grads["value"], slice(0, k), 2, torch.matmul(mixed.transpose(2, 3), grad_out))
    if post is None:
        grad_weights = grad_mixed
    else:  # dW[h] = sum_v dU[v] (P_w[h, v] + D(x_i)[h, v] + D(m_j)[h, v])
        grad_weights = mix_heads(grad_mixed, post.t())  # dW [b, h, r, k]
        if grads["post_proj"] is not None:
            grads["post_proj"] += _heads_outer(weights, grad_mixed)
        _add_dynamic(grad_weights, grad_mixed, _transposed_maps(blk.x2w, blk.m2w))
        _dynamic_grads(grads, "x2w", "m2w", blk, weights, grad_mixed, 1.0)
    grad_logits = torch._softmax_backward_data(grad_weights, weights, -1, weights.dtype)  # W (dW - sum_j W dW)
    _add_rows(grads["bias"], rows, 2, grad_logits, k)
    if pre is None:
        grad_dots = grad_logits.mul_(scaling)
    else:  # dJ[k] = s sum_h dL[h] (P_l[k, h] + D(x_i)[k, h] + D(m_j)[k, h])
        grad_dots = mix_heads(grad_logits, pre.t() * scaling)  # dJ [b, h_k, r, k]
        if grads["pre_proj"] is not None:
            grads["pre_proj"] += _heads_outer(dots, grad_logits).mul_(scaling)
        scaled = [None if t is None else t * scaling for t in (blk.x2l, blk.m2l)]
        _add_dynamic(grad_dots, grad_logits, _transposed_maps(*scaled))
        _dynamic_grads(grads, "x2l", "m2l", blk, dots, grad_logits, scaling)
    _add_rows(grads["query"], rows, 2, torch.matmul(grad_dots, blk.key))
    _add_rows(grads["key"], slice(0, k), 2, torch.matmul(grad_dots.transpose(2, 3), blk.query))


def talking_heads_blockwise(
    query,
    key,
    value,
    bias=None,
    pre_proj=None,
    post_proj=None,
    x2l=None,
    m2l=None,
    x2w=None,
    m2w=None,
    *,
    scaling: float,
    causal: bool = False,
    dropout: float = 0.0,
    block_size: int | None = None,
    key_lengths: list[int] | None = None,
) -> torch.Tensor:
    """The formula of this module, blockwise: out [b, h_v, n, d_v]. Where `runs_inference_core` says so (no gradient
    to record, the CPU) `talking_heads_inference`, else `BlockwiseTalkingHeads`. `key_lengths`: batch row i attends
    to its first key_lengths[i] keys only (right padding; the bias covers the rest). `dropout` draws its seed from
    torch's generator, so `torch.manual_seed` makes a run reproducible."""
    maps = dict(bias=bias, pre_proj=pre_proj, post_proj=post_proj, x2l=x2l, m2l=m2l, x2w=x2w, m2w=m2w)
    if runs_inference_core(query, key, value, maps, dropout):
        return talking_heads_inference(
            query,
            key,
            value,
            bias,
            pre_proj,
            post_proj,
            scaling=scaling,
            causal=causal,
            key_lengths=key_lengths,
            block_size=block_size,
        )
    if key_lengths is not None:
        padding = padding_bias(key_lengths, key.shape[2], query.dtype, query.device)  # [b, 1, 1, m]
        bias = padding if bias is None else bias + padding
    if dropout > 0.0:
        seed = int(torch.randint(0, 2**62, (), device="cpu"))
        return _blockwise_with_dropout(
            query,
            key,
            value,
            bias,
            pre_proj,
            post_proj,
            x2l,
            m2l,
            x2w,
            m2w,
            scaling,
            causal,
            dropout,
            seed,
            block_size,
        )
    return BlockwiseTalkingHeads.apply(
        query, key, value, bias, pre_proj, post_proj, x2l, m2l, x2w, m2w, scaling, causal, 0.0, 0, block_size
    )


@torch.compiler.disable
def _blockwise_with_dropout(*args) -> torch.Tensor:
    """`BlockwiseTalkingHeads` with dropout, run outside torch.compile's graph. Inductor (torch 2.13) fails to compile
    the per-block dropout generators (`InductorError: KeyError: 'buf1'` in its CPU code generation), and the seed
    drawn just before already breaks the graph, so nothing is lost: the core runs as it does uncompiled."""
    return BlockwiseTalkingHeads.apply(*args)


# ---------------------------------------------------------------------------------------------- the inference core
# Elements of one block of the inference core, [heads, rows, keys] of one batch row (1 MiB in float32): J, L, W and U
# of a block take two such buffers, reused by every block, so they stay in the cache from the logits to U.
INFERENCE_BLOCK_ELEMENTS = 1 << 18


def runs_inference_core(query, key, value, maps: dict, dropout: float) -> bool:
    """Whether `talking_heads_blockwise` computes the formula with `talking_heads_inference`: on the CPU (where its
    blocks stay in the cache; a GPU would launch kernels per block and batch row), no gradient to record, no
    dropout, no dynamic map (`maps`: the formula's other tensor arguments by name), not under torch.compile (whose
    graph would unroll the loops over the batch)."""
    tensors = [query, key, value, *(t for t in maps.values() if t is not None)]
    return (
        query.device.type == "cpu"
        and dropout == 0.0
        and not torch.compiler.is_compiling()
        and all(maps.get(name) is None for name in ("x2l", "m2l", "x2w", "m2w"))
        and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
    )


def padding_bias(key_lengths: list[int], m: int, dtype: torch.dtype, device) -> torch.Tensor:
    """The additive mask [b, 1, 1, m] that hides from batch row i its keys from key_lengths[i] on."""
    hidden = torch.arange(m, device=device)[None] >= torch.tensor(key_lengths, device=device)[:, None]
    return torch.zeros(hidden.shape, dtype=dtype, device=device).masked_fill(hidden, torch.finfo(dtype).min)[
        :, None, None
    ]


def talking_heads_inference(
    query,
    key,
    value,
    bias=None,
    pre_proj=None,
    post_proj=None,
    *,
    scaling: float,
    causal: bool = False,
    key_lengths: list[int] | None = None,
    block_size: int | None = None,
) -> torch.Tensor:
    """The formula of this module without gradients, dropout or dynamic maps, one batch row and one block of query
    rows at a time (`block_size` rows, or `INFERENCE_BLOCK_ELEMENTS` worth): `_inference_block` computes a block in
    two reused buffers, so it stays in the cache as SDPA's fused kernel keeps its tiles. Batch row i sees its first
    key_lengths[i] keys (all where None; right padding: the later keys are not computed at all, the bias covers the
    rest), under `causal` the keys up to its block's last row. Returns out [b, h_v, n, d_v] as a view of a
    heads-last [b, n, h_v, d_v] tensor (the layout the layer's output projection reads)."""
    b, h_k, n, _ = query.shape
    m, h_v, d_v = key.shape[2], value.shape[1], value.shape[3]
    h = h_k if pre_proj is None else pre_proj.shape[1]
    step = block_rows(1, max(h_k, h, h_v), n, m, block_size, INFERENCE_BLOCK_ELEMENTS)
    pre = None if pre_proj is None else (pre_proj * scaling).t().to(query.dtype)  # s P_l^T [h, h_k]
    post = None if post_proj is None else post_proj.t().to(query.dtype)  # P_w^T [h_v, h]
    buffers = query.new_empty(2, max(h_k, h, h_v) * step * m)
    out = value.new_empty(b, n, h_v, d_v)
    for i in range(b):
        row_bias = None if bias is None else bias[i if bias.shape[0] > 1 else 0]  # [h or 1, n or 1, m]
        for start in range(0, n, step):
            rows = slice(start, min(n, start + step))
            keys = m if key_lengths is None else key_lengths[i]
            if causal:  # the block's last row sees the keys up to m - n + rows.stop - 1
                keys = min(keys, m - n + rows.stop)
            block_bias = _rows(row_bias, rows, 1, keys)
            if causal and rows.start + m - n < keys - 1:  # a key the block sees is still hidden from its first row
                mask = causal_bias(n, m, query.dtype, query.device, rows)[:, :keys]
                block_bias = mask if block_bias is None else block_bias + mask
            block = (query[i, :, rows], key[i, :, :keys], value[i, :, :keys], block_bias)
            out[i, rows] = _inference_block(*block, pre, post, scaling, buffers).transpose(0, 1)
    return out.transpose(1, 2)


def _inference_block(query, key, value, bias, pre, post, scaling: float, buffers) -> torch.Tensor:
    """One block of `talking_heads_inference`, out [h_v, r, d_v] from query [h_k, r, d_k], key [h_k, k, d_k], value
    [h_v, k, d_v] and a bias broadcastable to [h, r, k] (or None), with pre = s P_l^T and post = P_w^T (or None).
    J goes to the first buffer, L (the heads mixed by one GEMM) to the second, W overwrites L, U the buffer W is not
    in: no tensor of the block is allocated."""
    h_k, r, k = query.shape[0], query.shape[1], key.shape[1]
    dots = torch.bmm(query, key.transpose(1, 2), out=buffers[0, : h_k * r * k].view(h_k, r, k))  # J [h_k, r, k]
    if pre is None:
        logits = dots.mul_(scaling)
    else:
        h = pre.shape[0]
        logits = torch.mm(pre, dots.view(h_k, r * k), out=buffers[1, : h * r * k].view(h, r * k)).view(h, r, k)
    if bias is not None:
        logits += bias
    weights = softmax_keys(logits, in_place=True)  # W [h, r, k]
    if post is not None:
        h, h_v = weights.shape[0], post.shape[0]
        free = buffers[0 if pre is not None else 1, : h_v * r * k]
        weights = torch.mm(post, weights.reshape(h, r * k), out=free.view(h_v, r * k)).view(h_v, r, k)  # U
    return torch.bmm(weights, value)  # [h_v, r, d_v]
