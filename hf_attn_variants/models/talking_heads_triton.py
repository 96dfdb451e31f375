"""Talking-heads attention as a Triton kernel: forward and backward in O(n) memory, nothing of size n x m stored.

Copied next to saved checkpoints (remote code): imports torch, triton and the standard library only. The modeling
code imports this module lazily, only when the Triton algorithm is asked for.

The function is the one `talking_heads_blockwise` specifies (its module docstring and `talking_heads_reference`):

    J[k, i, j] = q[k, i] . key[k, j]
    L[h, i, j] = s sum_k J[k, i, j] C_l[k, h, i, j] + bias[h, i, j]    C_l = P_l[k, h] + x2l[i, k, h] + m2l[j, k, h]
    W[h, i, j] = softmax_j L[h, i, j]                                    (causal: keys j > m - n + i get weight 0)
    U[v, i, j] = sum_h W[h, i, j] C_w[h, v, i, j]                        C_w = P_w[h, v] + x2w[i, h, v] + m2w[j, h, v]
    out[v, i]  = sum_j Z[v, i, j] U[v, i, j] value[v, j]                 Z: dropout keep-mask / (1 - p), else 1

Without a pre-softmax map (pre_proj None) P_l is the identity (h = h_k), without a post-softmax map P_w is (h_v = h).

Layout. One program owns one batch row and one block of BLOCK_N queries, with ALL heads: the head maps mix heads,
so every head of a (query block, key block) tile must be in registers at once. Head counts are small constexprs,
padded to powers of two (HKP, HP, HVP) and masked; head sizes are padded to at least 16 (tl.dot's minimum).

Forward (`_fwd_kernel`, grid (query blocks, batch)), two passes over the key blocks:
  pass 1: per key block, J = Q K^T for all h_k heads in one batched dot [HKP, BN, BM]; per softmax head h the
          pre-mapped logits L_h [BN, BM] (static + dynamic map, bias, causal and length masks), and the online row
          max and sum of exp. Result: lse[h, i] = max + log(sum), stored ([b, h, n] float32, saved for backward).
  pass 2: per key block, recompute L_h, W_h = exp(L_h - lse_h), mix into U [HVP, BN, BM] with the post map, apply
          dropout (Philox keep-mask from a seed and the element's global index), and accumulate U @ V into the output
          [HVP, BN, DV] (one batched dot).
Saved for backward: the inputs (q, k, v, bias, maps), lse and the dropout seed. Nothing of size n x m.

Backward, flash-attention style: every kernel recomputes J, L, W and U per tile from the saved inputs and lse.
  dU[v, i, j] = Z[v, i, j] dO[v, i] . value[v, j]          dW[h] = sum_v C_w[h, v] dU[v]
  dL[h] = W[h] (dW[h] - Delta[h])                          Delta[h, i] = sum_j W[h, i, j] dW[h, i, j]
  dJ[k] = s sum_h C_l[k, h] dL[h]                          dq = dJ key, dkey = dJ^T q, dvalue = (Z U)^T dO
  dbias = dL (summed to bias' broadcast shape)
  map gradients: per row i (sum over j) for x2l / x2w, per key j (sum over i) for m2l / m2w; the static maps' are the
  key-side sums summed over keys and batch (dP_l = sum_{b,j} G_l, dP_w = sum_{b,j} G_w), so no atomics anywhere.
Delta is NOT dO . O as in flash attention (the post map sits between W and V), so it needs its own walk:
  `_bwd_rows_kernel`  (grid (query blocks, batch)): Delta [b, h, n], and dx2w.
  `_bwd_dq_kernel`    (grid (query blocks, batch)): dq, dx2l, dbias.
  `_bwd_dkdv_kernel`  (grid (key blocks, batch)):   dkey, dvalue, G_l (-> dm2l, dP_l), G_w (-> dm2w, dP_w).
Every sum is a fixed-order loop in one program (or a torch sum of per-key partials): the gradients are
deterministic. The bias gradient, when asked for, is an n x m tensor by nature: it is written per batch row
([b, h or 1, n, m] float32) and summed to the bias' shape in torch.

Precision: logits, softmax, mixing and all accumulators are float32; the dots take the inputs' dtype (float32 dots
are exact "ieee" unless torch.backends.cuda.matmul.allow_tf32 is set). On a machine without a GPU the kernels run
through Triton's interpreter when TRITON_INTERPRET=1 is set before triton is first imported in the process (triton
reads it when it decorates a function: triton.language's own at its import, these at this module's); the
interpreter computes bfloat16 dots wrongly (triton 3.9), so bfloat16 is refused there.
"""

import torch

try:
    import triton
    import triton.language as tl
except ImportError as error:
    raise ImportError(
        "The Triton attention algorithm needs triton: pip install triton (or the package's [triton] extra), "
        "or choose another attention algorithm."
    ) from error

# The oldest triton the kernels have been tested with (the `triton` extra's lower bound says the same; a test checks).
TESTED_TRITON = (3, 9)


def _release(version: str) -> tuple[int, ...]:
    """(major, minor) of a version string such as "3.9.0" or "3.10.0+git1a2b3c"."""
    return tuple(int(part) for part in version.split("+")[0].split(".")[:2])


if _release(triton.__version__) < TESTED_TRITON:
    raise ImportError(
        f'attention_algorithm="triton" needs triton >= {".".join(map(str, TESTED_TRITON))} (the release its kernels '
        f"are tested with); this environment has triton {triton.__version__}. Upgrade it (pip install "
        f"'triton>={'.'.join(map(str, TESTED_TRITON))}'), or choose attention_algorithm=\"blockwise\" (the same "
        'algorithm in PyTorch, O(n) memory) or "auto".'
    )


# True when the kernels below were decorated under TRITON_INTERPRET=1 (they then run on CPU tensors, slowly).
def _interpreted() -> bool:
    return not isinstance(_fwd_kernel, triton.JITFunction)


# ----------------------------------------------------------------------------------------------------------------
# Small helpers (inlined into the kernels)
# ----------------------------------------------------------------------------------------------------------------


@triton.jit
def _row(x, h, HP: tl.constexpr):
    """Row h of a [HP, BN] register tile, as [BN] (register tiles cannot be indexed: select and sum)."""
    return tl.sum(tl.where(tl.arange(0, HP)[:, None] == h, x, 0.0), axis=0)


@triton.jit
def _put_row(x, h, row, HP: tl.constexpr):
    """x [HP, BN] with row h replaced by `row` [BN]."""
    return tl.where(tl.arange(0, HP)[:, None] == h, row[None, :], x)


@triton.jit
def _add_slab(acc, h, slab, HP: tl.constexpr):
    """acc [HP, A, B] with `slab` [A, B] added to acc[h]."""
    return acc + tl.where(tl.arange(0, HP)[:, None, None] == h, slab[None, :, :], 0.0)


@triton.jit
def _load_heads(
    ptr, s_h, s_r, s_d, rows, n_rows, NH: tl.constexpr, NHP: tl.constexpr, D: tl.constexpr, DP: tl.constexpr
):
    """[NHP, len(rows), DP] tile of a [heads, rows, d] tensor (ptr at the batch row), zero outside it."""
    hh = tl.arange(0, NHP)[:, None, None]
    rr = rows[None, :, None]
    dd = tl.arange(0, DP)[None, None, :]
    mask = (hh < NH) & (rr < n_rows) & (dd < D)
    return tl.load(ptr + hh * s_h + rr * s_r + dd * s_d, mask=mask, other=0.0)


@triton.jit
def _store_heads(
    ptr, value, s_h, s_r, s_d, rows, n_rows, NH: tl.constexpr, NHP: tl.constexpr, D: tl.constexpr, DP: tl.constexpr
):
    """Store a [NHP, len(rows), DP] tile into a [heads, rows, d] tensor (ptr at the batch row), inside it only."""
    hh = tl.arange(0, NHP)[:, None, None]
    rr = rows[None, :, None]
    dd = tl.arange(0, DP)[None, None, :]
    mask = (hh < NH) & (rr < n_rows) & (dd < D)
    tl.store(ptr + hh * s_h + rr * s_r + dd * s_d, value.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _load_lse_like(ptr, bid, n, rows, H: tl.constexpr, HP: tl.constexpr):
    """[HP, BN] tile of a [b, h, n] float32 tensor (lse, Delta)."""
    hh = tl.arange(0, HP)[:, None]
    mask = (hh < H) & (rows[None, :] < n)
    return tl.load(ptr + (bid * H + hh) * n + rows[None, :], mask=mask, other=0.0)


@triton.jit
def _map_coef(
    p_ptr,
    xmap_ptr,
    mmap_ptr,
    bid,
    h,
    rows,
    cols,
    n,
    m,
    NI: tl.constexpr,
    NO: tl.constexpr,
    NIP: tl.constexpr,
    HAS_X: tl.constexpr,
    HAS_M: tl.constexpr,
):
    """The map coefficient C[a, i, j] = P[a, h] + xmap[i, a, h] + mmap[j, a, h] for a fixed output head h of a head
    map with NI input and NO output heads (P [NI, NO], xmap [b, n, NI, NO], mmap [b, m, NI, NO], contiguous).
    Returned broadcastable, float32: [NIP, 1, 1] static only, [NIP, BN, 1] / [NIP, 1, BM] / [NIP, BN, BM] with the
    dynamic parts."""
    aa = tl.arange(0, NIP)
    coef = tl.load(p_ptr + aa * NO + h, mask=aa < NI, other=0.0).to(tl.float32)[:, None, None]
    if HAS_X:  # + xmap[b, i, a, h]
        offs = ((bid * n + rows[None, :]) * NI + aa[:, None]) * NO + h
        x = tl.load(xmap_ptr + offs, mask=(aa[:, None] < NI) & (rows[None, :] < n), other=0.0)
        coef = coef + x.to(tl.float32)[:, :, None]
    if HAS_M:  # + mmap[b, j, a, h]
        offs = ((bid * m + cols[None, :]) * NI + aa[:, None]) * NO + h
        y = tl.load(mmap_ptr + offs, mask=(aa[:, None] < NI) & (cols[None, :] < m), other=0.0)
        coef = coef + y.to(tl.float32)[:, None, :]
    return coef


@triton.jit
def _post_coef(
    p_ptr,
    xmap_ptr,
    mmap_ptr,
    bid,
    h,
    rows,
    cols,
    n,
    m,
    H: tl.constexpr,
    HV: tl.constexpr,
    HVP: tl.constexpr,
    HAS_X: tl.constexpr,
    HAS_M: tl.constexpr,
):
    """C_w[v, i, j] = P_w[h, v] + x2w[i, h, v] + m2w[j, h, v] for softmax head h (P_w [H, HV], x2w [b, n, H, HV],
    m2w [b, m, H, HV]); broadcastable [HVP, BN or 1, BM or 1], float32."""
    vv = tl.arange(0, HVP)
    coef = tl.load(p_ptr + h * HV + vv, mask=vv < HV, other=0.0).to(tl.float32)[:, None, None]
    if HAS_X:  # + x2w[b, i, h, v]
        offs = ((bid * n + rows[None, :]) * H + h) * HV + vv[:, None]
        x = tl.load(xmap_ptr + offs, mask=(vv[:, None] < HV) & (rows[None, :] < n), other=0.0)
        coef = coef + x.to(tl.float32)[:, :, None]
    if HAS_M:  # + m2w[b, j, h, v]
        offs = ((bid * m + cols[None, :]) * H + h) * HV + vv[:, None]
        y = tl.load(mmap_ptr + offs, mask=(vv[:, None] < HV) & (cols[None, :] < m), other=0.0)
        coef = coef + y.to(tl.float32)[:, None, :]
    return coef


@triton.jit
def _logits(
    dots, coef, bias_ptr, sb_h, sb_n, sb_m, h, rows, cols, n, m, scaling, HAS_BIAS: tl.constexpr, CAUSAL: tl.constexpr
):
    """L_h [BN, BM] = s sum_k J[k] C_l[k] + bias[h], -inf where there is no key (j >= m) or the causal mask hides it.
    dots: J [HKP, BN, BM] float32; coef: C_l for head h, broadcastable to it; bias_ptr at the batch row."""
    logits = tl.sum(dots * coef, axis=0) * scaling
    inside = (rows[:, None] < n) & (cols[None, :] < m)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + h * sb_h + rows[:, None] * sb_n + cols[None, :] * sb_m, mask=inside, other=0.0)
        logits = logits + bias.to(tl.float32)
    visible = cols[None, :] < m
    if CAUSAL:  # the n queries are the last n of m positions: row i sees keys j <= m - n + i
        visible = visible & (cols[None, :] <= rows[:, None] + (m - n))
    return tl.where(visible, logits, float("-inf"))


@triton.jit
def _dropout_scale(seed, p_drop, bid, rows, cols, n, m, HV: tl.constexpr, HVP: tl.constexpr):
    """Z [HVP, BN, BM]: 1 / (1 - p) where element (b, v, i, j) of U is kept, 0 where it is dropped. The keep-mask is
    Philox(seed, global index ((b * h_v + v) * n + i) * m + j) >= p: the same in every kernel and block layout."""
    vv = tl.arange(0, HVP)[:, None, None]
    offs = ((bid * HV + vv) * n + rows[None, :, None]) * m + cols[None, None, :]  # int64 (bid is)
    keep = tl.rand(seed, offs) >= p_drop
    return tl.where(keep, 1.0 / (1.0 - p_drop), 0.0)


# ----------------------------------------------------------------------------------------------------------------
# Forward
# ----------------------------------------------------------------------------------------------------------------


@triton.jit
def _fwd_kernel(
    Q,
    K,
    V,
    BIAS,
    PL,
    PW,
    X2L,
    M2L,
    X2W,
    M2W,
    OUT,
    LSE,
    sq_b,
    sq_h,
    sq_n,
    sq_d,
    sk_b,
    sk_h,
    sk_m,
    sk_d,
    sv_b,
    sv_h,
    sv_m,
    sv_d,
    sb_b,
    sb_h,
    sb_n,
    sb_m,
    so_b,
    so_h,
    so_n,
    so_d,
    n,
    m,
    scaling,
    seed,
    p_drop,
    HK: tl.constexpr,
    H: tl.constexpr,
    HV: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    HKP: tl.constexpr,
    HP: tl.constexpr,
    HVP: tl.constexpr,
    DKP: tl.constexpr,
    DVP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_X2L: tl.constexpr,
    HAS_M2L: tl.constexpr,
    HAS_X2W: tl.constexpr,
    HAS_M2W: tl.constexpr,
    CAUSAL: tl.constexpr,
    DROPOUT: tl.constexpr,
    PRECISION: tl.constexpr,
):
    i_block = tl.program_id(0)
    bid = tl.program_id(1).to(tl.int64)
    rows = i_block * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN] query positions
    Q += bid * sq_b
    K += bid * sk_b
    V += bid * sv_b
    BIAS += bid * sb_b
    q = _load_heads(Q, sq_h, sq_n, sq_d, rows, n, HK, HKP, DK, DKP)  # [HKP, BN, DKP]
    end = m
    if CAUSAL:  # keys up to the last one the block's last row sees
        end = tl.minimum(m, (i_block + 1) * BLOCK_N + (m - n))

    # pass 1: row max and sum of exp of L_h, online, per softmax head
    row_max = tl.full([HP, BLOCK_N], float("-inf"), tl.float32)
    row_sum = tl.zeros([HP, BLOCK_N], tl.float32)
    for start in range(0, end, BLOCK_M):
        cols = start + tl.arange(0, BLOCK_M)  # [BM] key positions
        k = _load_heads(K, sk_h, sk_m, sk_d, cols, m, HK, HKP, DK, DKP)  # [HKP, BM, DKP]
        dots = tl.dot(q, tl.trans(k, (0, 2, 1)), input_precision=PRECISION)  # J [HKP, BN, BM]
        for h in tl.static_range(H):
            coef = _map_coef(PL, X2L, M2L, bid, h, rows, cols, n, m, HK, H, HKP, HAS_X2L, HAS_M2L)
            logits = _logits(dots, coef, BIAS, sb_h, sb_n, sb_m, h, rows, cols, n, m, scaling, HAS_BIAS, CAUSAL)
            old_max = _row(row_max, h, HP)  # [BN]
            new_max = tl.maximum(old_max, tl.max(logits, axis=1))
            shift = tl.where(new_max == float("-inf"), 0.0, new_max)  # a row that has seen only -inf so far
            new_sum = _row(row_sum, h, HP) * tl.exp(old_max - shift) + tl.sum(tl.exp(logits - shift[:, None]), 1)
            row_max = _put_row(row_max, h, new_max, HP)
            row_sum = _put_row(row_sum, h, new_sum, HP)
    hh = tl.arange(0, HP)[:, None]
    lse = row_max + tl.log(tl.where(hh < H, row_sum, 1.0))  # [HP, BN] (padding heads: no log(0))
    tl.store(LSE + (bid * H + hh) * n + rows[None, :], lse, mask=(hh < H) & (rows[None, :] < n))

    # pass 2: normalise, mix across heads with the post map, dropout, multiply by V
    acc = tl.zeros([HVP, BLOCK_N, DVP], tl.float32)
    for start in range(0, end, BLOCK_M):
        cols = start + tl.arange(0, BLOCK_M)
        k = _load_heads(K, sk_h, sk_m, sk_d, cols, m, HK, HKP, DK, DKP)  # [HKP, BM, DKP]
        v = _load_heads(V, sv_h, sv_m, sv_d, cols, m, HV, HVP, DV, DVP)  # [HVP, BM, DVP]
        dots = tl.dot(q, tl.trans(k, (0, 2, 1)), input_precision=PRECISION)  # J [HKP, BN, BM]
        mixed = tl.zeros([HVP, BLOCK_N, BLOCK_M], tl.float32)  # U
        for h in tl.static_range(H):
            coef = _map_coef(PL, X2L, M2L, bid, h, rows, cols, n, m, HK, H, HKP, HAS_X2L, HAS_M2L)
            logits = _logits(dots, coef, BIAS, sb_h, sb_n, sb_m, h, rows, cols, n, m, scaling, HAS_BIAS, CAUSAL)
            weights = tl.exp(logits - _row(lse, h, HP)[:, None])  # W_h [BN, BM]
            mixed += weights[None, :, :] * _post_coef(
                PW, X2W, M2W, bid, h, rows, cols, n, m, H, HV, HVP, HAS_X2W, HAS_M2W
            )
        if DROPOUT:
            mixed = mixed * _dropout_scale(seed, p_drop, bid, rows, cols, n, m, HV, HVP)
        acc = tl.dot(mixed.to(v.dtype), v, acc, input_precision=PRECISION)  # [HVP, BN, DVP]
    _store_heads(OUT + bid * so_b, acc, so_h, so_n, so_d, rows, n, HV, HVP, DV, DVP)


# ----------------------------------------------------------------------------------------------------------------
# Backward
# ----------------------------------------------------------------------------------------------------------------


@triton.jit
def _bwd_rows_kernel(
    Q,
    K,
    V,
    DO,
    BIAS,
    PL,
    PW,
    X2L,
    M2L,
    X2W,
    M2W,
    LSE,
    DELTA,
    DX2W,
    sq_b,
    sq_h,
    sq_n,
    sq_d,
    sk_b,
    sk_h,
    sk_m,
    sk_d,
    sv_b,
    sv_h,
    sv_m,
    sv_d,
    sb_b,
    sb_h,
    sb_n,
    sb_m,
    sd_b,
    sd_h,
    sd_n,
    sd_d,
    n,
    m,
    scaling,
    seed,
    p_drop,
    HK: tl.constexpr,
    H: tl.constexpr,
    HV: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    HKP: tl.constexpr,
    HP: tl.constexpr,
    HVP: tl.constexpr,
    DKP: tl.constexpr,
    DVP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_X2L: tl.constexpr,
    HAS_M2L: tl.constexpr,
    HAS_X2W: tl.constexpr,
    HAS_M2W: tl.constexpr,
    CAUSAL: tl.constexpr,
    DROPOUT: tl.constexpr,
    PRECISION: tl.constexpr,
    NEED_DX2W: tl.constexpr,
):
    """Delta[h, i] = sum_j W[h, i, j] dW[h, i, j] ([b, h, n] float32) and dx2w[i, h, v] = sum_j W[h] dU[v]."""
    i_block = tl.program_id(0)
    bid = tl.program_id(1).to(tl.int64)
    rows = i_block * BLOCK_N + tl.arange(0, BLOCK_N)
    Q += bid * sq_b
    K += bid * sk_b
    V += bid * sv_b
    BIAS += bid * sb_b
    q = _load_heads(Q, sq_h, sq_n, sq_d, rows, n, HK, HKP, DK, DKP)  # [HKP, BN, DKP]
    d_out = _load_heads(DO + bid * sd_b, sd_h, sd_n, sd_d, rows, n, HV, HVP, DV, DVP)  # [HVP, BN, DVP]
    lse = _load_lse_like(LSE, bid, n, rows, H, HP)  # [HP, BN]
    end = m
    if CAUSAL:  # keys up to the last one the block's last row sees
        end = tl.minimum(m, (i_block + 1) * BLOCK_N + (m - n))

    delta = tl.zeros([HP, BLOCK_N], tl.float32)
    dx2w = tl.zeros([HP, HVP, BLOCK_N], tl.float32)
    for start in range(0, end, BLOCK_M):
        cols = start + tl.arange(0, BLOCK_M)
        k = _load_heads(K, sk_h, sk_m, sk_d, cols, m, HK, HKP, DK, DKP)  # [HKP, BM, DKP]
        v = _load_heads(V, sv_h, sv_m, sv_d, cols, m, HV, HVP, DV, DVP)  # [HVP, BM, DVP]
        dots = tl.dot(q, tl.trans(k, (0, 2, 1)), input_precision=PRECISION)  # J [HKP, BN, BM]
        d_mixed = tl.dot(d_out, tl.trans(v, (0, 2, 1)), input_precision=PRECISION)  # dU [HVP, BN, BM]
        if DROPOUT:
            d_mixed = d_mixed * _dropout_scale(seed, p_drop, bid, rows, cols, n, m, HV, HVP)
        for h in tl.static_range(H):
            coef = _map_coef(PL, X2L, M2L, bid, h, rows, cols, n, m, HK, H, HKP, HAS_X2L, HAS_M2L)
            logits = _logits(dots, coef, BIAS, sb_h, sb_n, sb_m, h, rows, cols, n, m, scaling, HAS_BIAS, CAUSAL)
            weights = tl.exp(logits - _row(lse, h, HP)[:, None])  # W_h [BN, BM]
            post = _post_coef(PW, X2W, M2W, bid, h, rows, cols, n, m, H, HV, HVP, HAS_X2W, HAS_M2W)
            d_weights = tl.sum(post * d_mixed, axis=0)  # dW_h [BN, BM]
            delta = _put_row(delta, h, _row(delta, h, HP) + tl.sum(weights * d_weights, axis=1), HP)
            if NEED_DX2W:
                dx2w = _add_slab(dx2w, h, tl.sum(weights[None, :, :] * d_mixed, axis=2), HP)  # [HVP, BN] at h
    hh = tl.arange(0, HP)[:, None]
    tl.store(DELTA + (bid * H + hh) * n + rows[None, :], delta, mask=(hh < H) & (rows[None, :] < n))
    if NEED_DX2W:  # dx2w [b, n, H, HV]
        h3 = tl.arange(0, HP)[:, None, None]
        v3 = tl.arange(0, HVP)[None, :, None]
        r3 = rows[None, None, :]
        tl.store(DX2W + ((bid * n + r3) * H + h3) * HV + v3, dx2w, mask=(h3 < H) & (v3 < HV) & (r3 < n))


@triton.jit
def _bwd_dq_kernel(
    Q,
    K,
    V,
    DO,
    BIAS,
    PL,
    PW,
    X2L,
    M2L,
    X2W,
    M2W,
    LSE,
    DELTA,
    DQ,
    DX2L,
    DBIAS,
    sq_b,
    sq_h,
    sq_n,
    sq_d,
    sk_b,
    sk_h,
    sk_m,
    sk_d,
    sv_b,
    sv_h,
    sv_m,
    sv_d,
    sb_b,
    sb_h,
    sb_n,
    sb_m,
    sd_b,
    sd_h,
    sd_n,
    sd_d,
    sdq_b,
    sdq_h,
    sdq_n,
    sdq_d,
    n,
    m,
    scaling,
    seed,
    p_drop,
    HK: tl.constexpr,
    H: tl.constexpr,
    HV: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    HKP: tl.constexpr,
    HP: tl.constexpr,
    HVP: tl.constexpr,
    DKP: tl.constexpr,
    DVP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_X2L: tl.constexpr,
    HAS_M2L: tl.constexpr,
    HAS_X2W: tl.constexpr,
    HAS_M2W: tl.constexpr,
    CAUSAL: tl.constexpr,
    DROPOUT: tl.constexpr,
    PRECISION: tl.constexpr,
    NEED_DX2L: tl.constexpr,
    DBIAS_HEADS: tl.constexpr,
):
    """dq, dx2l[i, k, h] = s sum_j J[k] dL[h], and dbias (DBIAS_HEADS: 0 none, 1 summed over heads, H per head;
    written to a [b, DBIAS_HEADS, n, m] float32 buffer)."""
    i_block = tl.program_id(0)
    bid = tl.program_id(1).to(tl.int64)
    rows = i_block * BLOCK_N + tl.arange(0, BLOCK_N)
    Q += bid * sq_b
    K += bid * sk_b
    V += bid * sv_b
    BIAS += bid * sb_b
    q = _load_heads(Q, sq_h, sq_n, sq_d, rows, n, HK, HKP, DK, DKP)  # [HKP, BN, DKP]
    d_out = _load_heads(DO + bid * sd_b, sd_h, sd_n, sd_d, rows, n, HV, HVP, DV, DVP)  # [HVP, BN, DVP]
    lse = _load_lse_like(LSE, bid, n, rows, H, HP)  # [HP, BN]
    delta = _load_lse_like(DELTA, bid, n, rows, H, HP)  # [HP, BN]
    end = m
    if CAUSAL:  # keys up to the last one the block's last row sees
        end = tl.minimum(m, (i_block + 1) * BLOCK_N + (m - n))

    dq = tl.zeros([HKP, BLOCK_N, DKP], tl.float32)
    dx2l = tl.zeros([HP, HKP, BLOCK_N], tl.float32)
    for start in range(0, end, BLOCK_M):
        cols = start + tl.arange(0, BLOCK_M)
        k = _load_heads(K, sk_h, sk_m, sk_d, cols, m, HK, HKP, DK, DKP)  # [HKP, BM, DKP]
        v = _load_heads(V, sv_h, sv_m, sv_d, cols, m, HV, HVP, DV, DVP)  # [HVP, BM, DVP]
        dots = tl.dot(q, tl.trans(k, (0, 2, 1)), input_precision=PRECISION)  # J [HKP, BN, BM]
        d_mixed = tl.dot(d_out, tl.trans(v, (0, 2, 1)), input_precision=PRECISION)  # dU [HVP, BN, BM]
        if DROPOUT:
            d_mixed = d_mixed * _dropout_scale(seed, p_drop, bid, rows, cols, n, m, HV, HVP)
        d_dots = tl.zeros([HKP, BLOCK_N, BLOCK_M], tl.float32)  # dJ
        d_bias = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)  # dL summed over heads (a bias without a head axis)
        for h in tl.static_range(H):
            coef = _map_coef(PL, X2L, M2L, bid, h, rows, cols, n, m, HK, H, HKP, HAS_X2L, HAS_M2L)
            logits = _logits(dots, coef, BIAS, sb_h, sb_n, sb_m, h, rows, cols, n, m, scaling, HAS_BIAS, CAUSAL)
            weights = tl.exp(logits - _row(lse, h, HP)[:, None])  # W_h [BN, BM]
            post = _post_coef(PW, X2W, M2W, bid, h, rows, cols, n, m, H, HV, HVP, HAS_X2W, HAS_M2W)
            d_weights = tl.sum(post * d_mixed, axis=0)  # dW_h [BN, BM]
            d_logits = weights * (d_weights - _row(delta, h, HP)[:, None])  # dL_h [BN, BM]
            d_dots += (coef * scaling) * d_logits[None, :, :]
            if NEED_DX2L:
                dx2l = _add_slab(dx2l, h, tl.sum(dots * d_logits[None, :, :], axis=2) * scaling, HP)  # [HKP, BN]
            if DBIAS_HEADS == H:
                offs = ((bid * H + h) * n + rows[:, None]) * m + cols[None, :]
                tl.store(DBIAS + offs, d_logits, mask=(rows[:, None] < n) & (cols[None, :] < m))
            elif DBIAS_HEADS == 1:
                d_bias += d_logits
        if DBIAS_HEADS == 1 and H != 1:
            offs = (bid * n + rows[:, None]) * m + cols[None, :]
            tl.store(DBIAS + offs, d_bias, mask=(rows[:, None] < n) & (cols[None, :] < m))
        dq = tl.dot(d_dots.to(k.dtype), k, dq, input_precision=PRECISION)  # [HKP, BN, DKP]
    _store_heads(DQ + bid * sdq_b, dq, sdq_h, sdq_n, sdq_d, rows, n, HK, HKP, DK, DKP)
    if NEED_DX2L:  # dx2l [b, n, HK, H]
        h3 = tl.arange(0, HP)[:, None, None]
        k3 = tl.arange(0, HKP)[None, :, None]
        r3 = rows[None, None, :]
        tl.store(DX2L + ((bid * n + r3) * HK + k3) * H + h3, dx2l, mask=(h3 < H) & (k3 < HK) & (r3 < n))


@triton.jit
def _bwd_dkdv_kernel(
    Q,
    K,
    V,
    DO,
    BIAS,
    PL,
    PW,
    X2L,
    M2L,
    X2W,
    M2W,
    LSE,
    DELTA,
    DK_,
    DV_,
    GL,
    GW,
    sq_b,
    sq_h,
    sq_n,
    sq_d,
    sk_b,
    sk_h,
    sk_m,
    sk_d,
    sv_b,
    sv_h,
    sv_m,
    sv_d,
    sb_b,
    sb_h,
    sb_n,
    sb_m,
    sd_b,
    sd_h,
    sd_n,
    sd_d,
    sdk_b,
    sdk_h,
    sdk_m,
    sdk_d,
    sdv_b,
    sdv_h,
    sdv_m,
    sdv_d,
    n,
    m,
    scaling,
    seed,
    p_drop,
    HK: tl.constexpr,
    H: tl.constexpr,
    HV: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    HKP: tl.constexpr,
    HP: tl.constexpr,
    HVP: tl.constexpr,
    DKP: tl.constexpr,
    DVP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_X2L: tl.constexpr,
    HAS_M2L: tl.constexpr,
    HAS_X2W: tl.constexpr,
    HAS_M2W: tl.constexpr,
    CAUSAL: tl.constexpr,
    DROPOUT: tl.constexpr,
    PRECISION: tl.constexpr,
    NEED_GL: tl.constexpr,
    NEED_GW: tl.constexpr,
):
    """dkey, dvalue, and the key-side map gradients G_l[j, k, h] = s sum_i J[k] dL[h] ([b, m, HK, H] float32),
    G_w[j, h, v] = sum_i W[h] dU[v] ([b, m, H, HV] float32)."""
    j_block = tl.program_id(0)
    bid = tl.program_id(1).to(tl.int64)
    cols = j_block * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM] key positions
    Q += bid * sq_b
    DO += bid * sd_b
    BIAS += bid * sb_b
    k = _load_heads(K + bid * sk_b, sk_h, sk_m, sk_d, cols, m, HK, HKP, DK, DKP)  # [HKP, BM, DKP]
    v = _load_heads(V + bid * sv_b, sv_h, sv_m, sv_d, cols, m, HV, HVP, DV, DVP)  # [HVP, BM, DVP]
    # the first query block with a row that sees one of these keys (row i sees j <= m - n + i)
    begin = 0
    if CAUSAL:
        begin = tl.maximum(j_block * BLOCK_M - (m - n), 0) // BLOCK_N * BLOCK_N

    d_key = tl.zeros([HKP, BLOCK_M, DKP], tl.float32)
    d_value = tl.zeros([HVP, BLOCK_M, DVP], tl.float32)
    g_pre = tl.zeros([HP, HKP, BLOCK_M], tl.float32)
    g_post = tl.zeros([HP, HVP, BLOCK_M], tl.float32)
    for start in range(begin, n, BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        q = _load_heads(Q, sq_h, sq_n, sq_d, rows, n, HK, HKP, DK, DKP)  # [HKP, BN, DKP]
        d_out = _load_heads(DO, sd_h, sd_n, sd_d, rows, n, HV, HVP, DV, DVP)  # [HVP, BN, DVP]
        lse = _load_lse_like(LSE, bid, n, rows, H, HP)  # [HP, BN]
        delta = _load_lse_like(DELTA, bid, n, rows, H, HP)  # [HP, BN]
        dots = tl.dot(q, tl.trans(k, (0, 2, 1)), input_precision=PRECISION)  # J [HKP, BN, BM]
        d_mixed = tl.dot(d_out, tl.trans(v, (0, 2, 1)), input_precision=PRECISION)  # dU before dropout
        if DROPOUT:
            keep = _dropout_scale(seed, p_drop, bid, rows, cols, n, m, HV, HVP)  # Z [HVP, BN, BM]
            d_mixed = d_mixed * keep
        mixed = tl.zeros([HVP, BLOCK_N, BLOCK_M], tl.float32)  # U
        d_dots = tl.zeros([HKP, BLOCK_N, BLOCK_M], tl.float32)  # dJ
        for h in tl.static_range(H):
            coef = _map_coef(PL, X2L, M2L, bid, h, rows, cols, n, m, HK, H, HKP, HAS_X2L, HAS_M2L)
            logits = _logits(dots, coef, BIAS, sb_h, sb_n, sb_m, h, rows, cols, n, m, scaling, HAS_BIAS, CAUSAL)
            weights = tl.exp(logits - _row(lse, h, HP)[:, None])  # W_h [BN, BM]
            post = _post_coef(PW, X2W, M2W, bid, h, rows, cols, n, m, H, HV, HVP, HAS_X2W, HAS_M2W)
            mixed += weights[None, :, :] * post
            d_weights = tl.sum(post * d_mixed, axis=0)  # dW_h [BN, BM]
            d_logits = weights * (d_weights - _row(delta, h, HP)[:, None])  # dL_h [BN, BM]
            d_dots += (coef * scaling) * d_logits[None, :, :]
            if NEED_GL:
                g_pre = _add_slab(g_pre, h, tl.sum(dots * d_logits[None, :, :], axis=1) * scaling, HP)  # [HKP, BM]
            if NEED_GW:
                g_post = _add_slab(g_post, h, tl.sum(weights[None, :, :] * d_mixed, axis=1), HP)  # [HVP, BM]
        if DROPOUT:
            mixed = mixed * keep
        d_value = tl.dot(tl.trans(mixed, (0, 2, 1)).to(d_out.dtype), d_out, d_value, input_precision=PRECISION)
        d_key = tl.dot(tl.trans(d_dots, (0, 2, 1)).to(q.dtype), q, d_key, input_precision=PRECISION)
    _store_heads(DK_ + bid * sdk_b, d_key, sdk_h, sdk_m, sdk_d, cols, m, HK, HKP, DK, DKP)
    _store_heads(DV_ + bid * sdv_b, d_value, sdv_h, sdv_m, sdv_d, cols, m, HV, HVP, DV, DVP)
    h3 = tl.arange(0, HP)[:, None, None]
    c3 = cols[None, None, :]
    if NEED_GL:  # G_l [b, m, HK, H]
        k3 = tl.arange(0, HKP)[None, :, None]
        tl.store(GL + ((bid * m + c3) * HK + k3) * H + h3, g_pre, mask=(h3 < H) & (k3 < HK) & (c3 < m))
    if NEED_GW:  # G_w [b, m, H, HV]
        v3 = tl.arange(0, HVP)[None, :, None]
        tl.store(GW + ((bid * m + c3) * H + h3) * HV + v3, g_post, mask=(h3 < H) & (v3 < HV) & (c3 < m))


@triton.jit
def _dropout_mask_kernel(
    OUT, seed, p_drop, n, m, HV: tl.constexpr, HVP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr
):
    """The keep-mask the kernels use, materialised ([b, h_v, n, m] int8), for tests."""
    i_block = tl.program_id(0)
    bid = tl.program_id(1).to(tl.int64)
    rows = i_block * BLOCK_N + tl.arange(0, BLOCK_N)
    vv = tl.arange(0, HVP)[:, None, None]
    for start in range(0, m, BLOCK_M):
        cols = start + tl.arange(0, BLOCK_M)
        keep = _dropout_scale(seed, p_drop, bid, rows, cols, n, m, HV, HVP) != 0.0
        offs = ((bid * HV + vv) * n + rows[None, :, None]) * m + cols[None, None, :]
        mask = (vv < HV) & (rows[None, :, None] < n) & (cols[None, None, :] < m)
        tl.store(OUT + offs, keep.to(tl.int8), mask=mask)


# ----------------------------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------------------------


# No software pipelining of the key/query loops: its prefetch buffers hold whole [heads, block, d] tiles in shared
# memory (768 KB at h = 12, d = 64: more than any GPU has); the loads are few against the per-tile arithmetic.
_STAGES = 1


def _pow2(x: int, least: int = 1) -> int:
    return max(least, triton.next_power_of_2(x))


def _blocks(hk: int, h: int, hv: int, dk: int, dv: int, backward: bool = False) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_M, num_warps). Every head of a tile sits in registers, so the tile shrinks as heads grow: the
    largest tile whose register tensors hold about 40k floats (forward: J and U [heads, BN, BM], the output
    accumulator and the query tile; backward: J, dJ, U, dU and the two tiles and accumulators of its side), 8 warps
    from 16k. A guess checked only against the compiler (sm_90, h = 12, d = 64, bfloat16: forward 16 x 32, 255
    registers, 100 KB shared memory; backward 16 x 32 needs 200 KB of shared memory, hence 16 x 16), to be tuned on
    a GPU with benchmarks/bench_kernel.py."""
    hkp, hvp, dkp, dvp = _pow2(hk), _pow2(hv), _pow2(dk, 16), _pow2(dv, 16)
    for bn, bm in ((64, 64), (32, 64), (32, 32), (16, 32), (16, 16)):
        if backward:
            floats = 2 * (hkp + hvp) * bn * bm + (hkp * dkp + hvp * dvp) * (bn + bm)
        else:
            floats = (hkp + hvp) * bn * bm + hvp * bn * dvp + hkp * bn * dkp
        if floats <= 40960:
            break
    return bn, bm, 8 if floats > 16384 else 4


def _draw_seed() -> int:
    """The dropout seed, drawn from torch's default (CPU) generator: torch.manual_seed makes it reproducible, and
    activation checkpointing (which restores the RNG state) redraws the same one."""
    return int(torch.randint(0, 2**31 - 1, (1,), dtype=torch.int64).item())


def dropout_keep_mask(batch: int, heads_v: int, n: int, m: int, seed: int, p: float, device="cpu") -> torch.Tensor:
    """The keep-mask [batch, h_v, n, m] (bool) that a call with this seed and dropout p applies to U."""
    out = torch.empty(batch, heads_v, n, m, dtype=torch.int8, device=device)
    block = 16
    grid = (triton.cdiv(n, block), batch)
    _dropout_mask_kernel[grid](out, seed, p, n, m, HV=heads_v, HVP=_pow2(heads_v), BLOCK_N=block, BLOCK_M=block)
    return out.bool()


def _sum_to_shape(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """A [b, H', n, m] gradient summed to the (broadcastable) shape of the bias it belongs to."""
    lead = grad.dim() - len(shape)
    if lead:
        grad = grad.sum(dim=tuple(range(lead)))
    dims = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
    return grad.sum(dim=dims, keepdim=True) if dims else grad


def _check(query, key, value, bias, pre_proj, post_proj, x2l, m2l, x2w, m2w, causal, dropout):
    """(b, h_k, h, h_v, n, m, d_k, d_v), or a ValueError naming what does not fit."""
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError("talking_heads_triton: query, key and value must be 4-D [batch, heads, length, head_size]")
    b, hk, n, dk = query.shape
    m, hv, dv = key.shape[2], value.shape[1], value.shape[3]
    if key.shape != (b, hk, m, dk) or value.shape[0] != b or value.shape[2] != m:
        raise ValueError(
            f"talking_heads_triton: query {tuple(query.shape)}, key {tuple(key.shape)} and value "
            f"{tuple(value.shape)} do not fit [b, h_k, n, d_k], [b, h_k, m, d_k], [b, h_v, m, d_v]"
        )
    if pre_proj is None and (x2l is not None or m2l is not None):
        raise ValueError("talking_heads_triton: the dynamic pre-softmax maps (x2l, m2l) need pre_proj")
    if post_proj is None and (x2w is not None or m2w is not None):
        raise ValueError("talking_heads_triton: the dynamic post-softmax maps (x2w, m2w) need post_proj")
    h = pre_proj.shape[1] if pre_proj is not None else hk
    if pre_proj is not None and tuple(pre_proj.shape) != (hk, h):
        raise ValueError(f"talking_heads_triton: pre_proj must be [h_k={hk}, h], got {tuple(pre_proj.shape)}")
    expect_hv = post_proj.shape[1] if post_proj is not None else h
    if post_proj is not None and post_proj.shape[0] != h:
        raise ValueError(f"talking_heads_triton: post_proj must be [h={h}, h_v], got {tuple(post_proj.shape)}")
    if hv != expect_hv:
        raise ValueError(f"talking_heads_triton: value has {hv} heads, the post map gives {expect_hv}")
    for name, tensor, shape in (
        ("x2l", x2l, (b, n, hk, h)),
        ("m2l", m2l, (b, m, hk, h)),
        ("x2w", x2w, (b, n, h, hv)),
        ("m2w", m2w, (b, m, h, hv)),
    ):
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(f"talking_heads_triton: {name} must be {list(shape)}, got {list(tensor.shape)}")
    if bias is not None:
        try:
            if torch.broadcast_shapes(bias.shape, (b, h, n, m)) != (b, h, n, m):
                raise RuntimeError
        except RuntimeError:
            raise ValueError(
                f"talking_heads_triton: bias {tuple(bias.shape)} does not broadcast to [b, h, n, m] = {[b, h, n, m]}"
            ) from None
    if causal and n > m:
        raise ValueError(
            f"talking_heads_triton: causal attention needs n <= m (the queries are the last n of the m "
            f"positions), got n={n}, m={m}"
        )
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"talking_heads_triton: dropout must be in [0, 1), got {dropout}")
    if (
        query.dtype not in (torch.float32, torch.float16, torch.bfloat16)
        or key.dtype != query.dtype
        or value.dtype != query.dtype
    ):
        raise ValueError(
            f"talking_heads_triton: query, key, value must share one of float32, float16, bfloat16; "
            f"got {query.dtype}, {key.dtype}, {value.dtype}"
        )
    if query.dtype == torch.bfloat16 and _interpreted():
        raise NotImplementedError(
            "talking_heads_triton: Triton's interpreter multiplies bfloat16 blocks wrongly "
            f"(tl.dot, triton {triton.__version__}); use float32 or float16 on a CPU"
        )
    if query.device.type != "cuda" and not _interpreted():
        raise RuntimeError(
            "talking_heads_triton: the Triton kernel runs on CUDA tensors (on a CPU only through "
            "Triton's interpreter: TRITON_INTERPRET=1 set before triton is first imported)"
        )
    return b, hk, h, hv, n, m, dk, dv


def _strides(t: torch.Tensor | None) -> tuple[int, ...]:
    return tuple(t.stride()) if t is not None else (0, 0, 0, 0)


class _TalkingHeadsTriton(torch.autograd.Function):
    """Forward saves the inputs, lse [b, h, n] and the dropout seed; backward recomputes the rest per tile."""

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
        block_n,
        block_m,
    ):
        b, hk, h, hv, n, m, dk, dv = _check(
            query, key, value, bias, pre_proj, post_proj, x2l, m2l, x2w, m2w, causal, dropout
        )
        device = query.device
        default_n, default_m, warps = _blocks(hk, h, hv, dk, dv)
        block_overridden = block_n is not None or block_m is not None
        block_n, block_m = block_n or default_n, block_m or default_m
        # identities stand in for absent static maps; the dynamic maps are read as contiguous [.., in, out] arrays
        pl = pre_proj.contiguous() if pre_proj is not None else torch.eye(hk, device=device, dtype=torch.float32)
        pw = post_proj.contiguous() if post_proj is not None else torch.eye(h, device=device, dtype=torch.float32)
        maps = [t.contiguous() if t is not None else None for t in (x2l, m2l, x2w, m2w)]
        bias_view = bias.expand(b, h, n, m) if bias is not None else None  # stride 0 on broadcast axes, no copy
        seed = _draw_seed() if dropout > 0.0 else 0
        precision = "tf32" if torch.backends.cuda.matmul.allow_tf32 and query.dtype == torch.float32 else "ieee"

        out = torch.empty(b, hv, n, dv, device=device, dtype=value.dtype)
        lse = torch.empty(b, h, n, device=device, dtype=torch.float32)
        meta = dict(
            HK=hk,
            H=h,
            HV=hv,
            DK=dk,
            DV=dv,
            HKP=_pow2(hk),
            HP=_pow2(h),
            HVP=_pow2(hv),
            DKP=_pow2(dk, 16),
            DVP=_pow2(dv, 16),
            BLOCK_N=block_n,
            BLOCK_M=block_m,
            HAS_BIAS=bias is not None,
            HAS_X2L=x2l is not None,
            HAS_M2L=m2l is not None,
            HAS_X2W=x2w is not None,
            HAS_M2W=m2w is not None,
            CAUSAL=bool(causal),
            DROPOUT=dropout > 0.0,
            PRECISION=precision,
        )
        dummy = torch.zeros(1, device=device, dtype=torch.float32)  # stands in for absent tensors (flags off)
        ptrs = [bias_view if bias is not None else dummy, pl, pw, *[t if t is not None else dummy for t in maps]]
        grid = (triton.cdiv(n, block_n), b)
        _fwd_kernel[grid](
            query,
            key,
            value,
            *ptrs,
            out,
            lse,
            *query.stride(),
            *key.stride(),
            *value.stride(),
            *_strides(bias_view),
            *out.stride(),
            n,
            m,
            scaling,
            seed,
            dropout,
            **meta,
            num_warps=warps,
            num_stages=_STAGES,
        )

        ctx.save_for_backward(query, key, value, bias, pre_proj, post_proj, x2l, m2l, x2w, m2w, lse)
        if block_overridden:
            backward_blocks = (block_n, block_m, warps)
        else:
            backward_blocks = _blocks(hk, h, hv, dk, dv, backward=True)
        ctx.config = (scaling, seed, dropout, meta, backward_blocks)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, bias, pre_proj, post_proj, x2l, m2l, x2w, m2w, lse = ctx.saved_tensors
        scaling, seed, dropout, meta, (block_n, block_m, warps) = ctx.config
        meta = {**meta, "BLOCK_N": block_n, "BLOCK_M": block_m}
        need = ctx.needs_input_grad  # query, key, value, bias, pre_proj, post_proj, x2l, m2l, x2w, m2w, ...
        b, n, m, device = query.shape[0], query.shape[2], key.shape[2], query.device
        hk, h, hv = meta["HK"], meta["H"], meta["HV"]
        pl = pre_proj.contiguous() if pre_proj is not None else torch.eye(hk, device=device, dtype=torch.float32)
        pw = post_proj.contiguous() if post_proj is not None else torch.eye(h, device=device, dtype=torch.float32)
        maps = [t.contiguous() if t is not None else None for t in (x2l, m2l, x2w, m2w)]
        bias_view = bias.expand(b, h, n, m) if bias is not None else None
        f32 = dict(device=device, dtype=torch.float32)
        dummy = torch.zeros(1, **f32)  # stands in for absent tensors and unneeded outputs (flags off)
        ptrs = [bias_view if bias is not None else dummy, pl, pw, *[t if t is not None else dummy for t in maps]]
        strides = (*query.stride(), *key.stride(), *value.stride(), *_strides(bias_view), *grad_out.stride())
        runtime = (n, m, scaling, seed, dropout)
        rows_grid, keys_grid = (triton.cdiv(n, meta["BLOCK_N"]), b), (triton.cdiv(m, meta["BLOCK_M"]), b)

        # 1. Delta (and dx2w), one walk over the keys per query block
        delta = torch.empty(b, h, n, **f32)
        need_dx2w = x2w is not None and need[8]
        dx2w = torch.empty(b, n, h, hv, **f32) if need_dx2w else dummy
        _bwd_rows_kernel[rows_grid](
            query,
            key,
            value,
            grad_out,
            *ptrs,
            lse,
            delta,
            dx2w,
            *strides,
            *runtime,
            **meta,
            NEED_DX2W=need_dx2w,
            num_warps=warps,
            num_stages=_STAGES,
        )

        # 2. dq, dx2l, dbias
        dq = torch.empty_like(query)
        need_dx2l = x2l is not None and need[6]
        dx2l = torch.empty(b, n, hk, h, **f32) if need_dx2l else dummy
        bias_heads = 0
        if bias is not None and need[3]:
            bias_heads = h if bias.dim() >= 3 and bias.shape[-3] == h else 1
        dbias = torch.zeros(b, bias_heads, n, m, **f32) if bias_heads else dummy
        _bwd_dq_kernel[rows_grid](
            query,
            key,
            value,
            grad_out,
            *ptrs,
            lse,
            delta,
            dq,
            dx2l,
            dbias,
            *strides,
            *dq.stride(),
            *runtime,
            **meta,
            NEED_DX2L=need_dx2l,
            DBIAS_HEADS=bias_heads,
            num_warps=warps,
            num_stages=_STAGES,
        )

        # 3. dkey, dvalue, key-side map gradients (dm2l, dm2w and, summed, the static maps')
        dk, dv = torch.empty_like(key), torch.empty_like(value)
        need_gl = (pre_proj is not None and need[4]) or (m2l is not None and need[7])
        need_gw = (post_proj is not None and need[5]) or (m2w is not None and need[9])
        g_pre = torch.empty(b, m, hk, h, **f32) if need_gl else dummy
        g_post = torch.empty(b, m, h, hv, **f32) if need_gw else dummy
        _bwd_dkdv_kernel[keys_grid](
            query,
            key,
            value,
            grad_out,
            *ptrs,
            lse,
            delta,
            dk,
            dv,
            g_pre,
            g_post,
            *strides,
            *dk.stride(),
            *dv.stride(),
            *runtime,
            **meta,
            NEED_GL=need_gl,
            NEED_GW=need_gw,
            num_warps=warps,
            num_stages=_STAGES,
        )

        def cast(grad, like):
            return grad.to(like.dtype) if grad is not None else None

        grads = [
            dq if need[0] else None,
            dk if need[1] else None,
            dv if need[2] else None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
        ]
        if bias_heads:
            grads[3] = cast(_sum_to_shape(dbias, bias.shape), bias)
        if need_gl and pre_proj is not None and need[4]:
            grads[4] = cast(g_pre.sum(dim=(0, 1)), pre_proj)
        if need_gw and post_proj is not None and need[5]:
            grads[5] = cast(g_post.sum(dim=(0, 1)), post_proj)
        if need_dx2l:
            grads[6] = cast(dx2l, x2l)
        if m2l is not None and need[7]:
            grads[7] = cast(g_pre, m2l)
        if need_dx2w:
            grads[8] = cast(dx2w, x2w)
        if m2w is not None and need[9]:
            grads[9] = cast(g_post, m2w)
        return (*grads, None, None, None, None, None)


def talking_heads_triton(
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
    block_n: int | None = None,
    block_m: int | None = None,
) -> torch.Tensor:
    """Talking-heads attention (the function `talking_heads_blockwise.talking_heads_reference` computes), in Triton.

    query [b, h_k, n, d_k], key [b, h_k, m, d_k], value [b, h_v, m, d_v]; bias additive, broadcastable to
    [b, h, n, m], or None; pre_proj [h_k, h], post_proj [h, h_v] or None; the dynamic maps x2l [b, n, h_k, h],
    m2l [b, m, h_k, h], x2w [b, n, h, h_v], m2w [b, m, h, h_v] or None (each needs its static map); `dropout` is
    the probability of dropping an element of the mixed weights U (the seed comes from torch's generator).
    Returns [b, h_v, n, d_v] in value's dtype; differentiable in every tensor argument. block_n / block_m override
    the tile sizes (powers of two, at least 16).
    """
    for block in (block_n, block_m):
        if block is not None and (block < 16 or block & (block - 1)):
            raise ValueError(f"talking_heads_triton: block sizes must be powers of two >= 16, got {block}")
    return _TalkingHeadsTriton.apply(
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
        float(scaling),
        bool(causal),
        float(dropout),
        block_n,
        block_m,
    )
