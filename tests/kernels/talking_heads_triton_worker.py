"""The Triton talking-heads kernel against the einsum reference, case by case; run by
tests/kernels/test_talking_heads_triton.py in a process of its own, not collected by pytest.

    python tests/kernels/talking_heads_triton_worker.py [CASE ...]     # one JSON line per case (default: every case)

Why a process of its own: Triton reads TRITON_INTERPRET when a function is decorated with @triton.jit, and
triton.language's own functions (tl.sum, tl.rand, ...) are decorated when triton is first imported, which
transformers.modeling_utils already does in the test session. So on a machine without a GPU this worker sets
TRITON_INTERPRET=1 before anything imports triton; with a CUDA device it runs the compiled kernels.

Each case builds tiny float32 inputs (every tensor requiring grad except padding masks), runs the kernel forward and
backward with 16 x 16 tiles, and reports per tensor (the output and each gradient) the largest difference from the
reference computed in float64, with the reference's largest magnitude (the tests scale their tolerance by it).
"""

import json
import os
import sys
import time
import zlib
from pathlib import Path

CASES = {  # name -> the case's shapes and arguments (defaults in `build`)
    "no_maps": dict(hk=2),
    "one_head": dict(hk=1),
    "pre_only": dict(hk=2, h=4, pre=True),
    "post_only": dict(hk=3, hv=2, post=True),
    "both_maps": dict(pre=True, post=True),
    "x2l": dict(pre=True, post=True, dynamic=("x2l",)),
    "m2l": dict(pre=True, post=True, dynamic=("m2l",)),
    "x2w": dict(pre=True, post=True, dynamic=("x2w",)),
    "m2w": dict(pre=True, post=True, dynamic=("m2w",)),
    "all_dynamic": dict(pre=True, post=True, dynamic=("x2l", "m2l", "x2w", "m2w")),
    "padding_mask": dict(pre=True, post=True, bias="padding"),
    "causal": dict(pre=True, post=True, causal=True, n=40),
    "causal_cross": dict(pre=True, post=True, causal=True, n=20, m=37, bias="padding"),
    "t5_position_bias": dict(pre=True, post=True, bias="position", dynamic=("x2w",)),
    "mask_with_grad": dict(pre=True, post=True, bias="rows"),  # [b, 1, n, m]: its gradient is summed over heads
    "cross_attention": dict(pre=True, post=True, n=24, m=40, dk=16, dv=8),
    "odd_lengths": dict(
        pre=True, post=True, b=2, n=21, m=37, dk=5, dv=11, bias="position", dynamic=("x2l", "m2l", "x2w", "m2w")
    ),
    "views": dict(pre=True, post=True, views=True, b=2, n=17, m=17),
    "dropout": dict(pre=True, post=True, dropout=0.3, dynamic=("x2l", "m2w"), bias="padding"),
    "default_tiles": dict(pre=True, post=True, n=40, tiles="default"),  # forward 64 x 64, backward 32 x 64 here
    "float16": dict(pre=True, post=True, dtype="float16", bias="position"),
    "bfloat16": dict(pre=True, post=True, dtype="bfloat16", bias="position"),  # GPU only (see BFLOAT16_NOTE)
}
# Tiles of 16 x 16 where a case spans several (every kernel loops over blocks, masks partial ones), 32 x 32 elsewhere:
# the interpreter's time grows with the number of tiles.
MULTI_BLOCK = {"causal", "causal_cross", "cross_attention", "views", "dropout"}
# Cases also compared against a reference whose pre_proj / x2w is off by 1e-3 in one entry: that comparison must
# fail, or the test could not tell a map from its absence.
PERTURBED = {"both_maps": "pre_proj", "x2w": "x2w"}


def build(name: str, device):
    """({argument name: float64 tensor or None}, keyword arguments) of case `name`; the tensors that get a
    gradient require one."""
    import torch

    case = CASES[name]
    b, hk, n, m = case.get("b", 1), case.get("hk", 2), case.get("n", 32), case.get("m", case.get("n", 32))
    h = case.get("h", 4 if case.get("pre") else hk)
    hv = case.get("hv", 3 if case.get("post") else h)
    dk, dv = case.get("dk", 8), case.get("dv", 8)
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(device)

    if case.get("views"):  # [b, length, heads, d] transposed, as the modeling code hands them over
        query = rand(b, n, hk, dk).transpose(1, 2)
        key = rand(b, m, hk, dk).transpose(1, 2)
        value = rand(b, m, hv, dv).transpose(1, 2)
    else:
        query, key, value = rand(b, hk, n, dk), rand(b, hk, m, dk), rand(b, hv, m, dv)
    eye = torch.eye(hk, h, dtype=torch.float64, device=device)
    pre = rand(hk, h, scale=h**-0.5) + eye if case.get("pre") else None
    post = rand(h, hv, scale=hv**-0.5) if case.get("post") else None
    dynamic = case.get("dynamic", ())
    x2l = rand(b, n, hk, h, scale=0.3) if "x2l" in dynamic else None
    m2l = rand(b, m, hk, h, scale=0.3) if "m2l" in dynamic else None
    x2w = rand(b, n, h, hv, scale=0.3) if "x2w" in dynamic else None
    m2w = rand(b, m, h, hv, scale=0.3) if "m2w" in dynamic else None
    bias, bias_grad = None, True
    if case.get("bias") == "padding":  # [b, 1, 1, m]: the last keys of row 0 and the first of the last row masked
        keep = torch.ones(b, m, dtype=torch.bool)
        keep[0, -5:] = False
        keep[-1, :3] = False
        bias = (
            torch.zeros(b, 1, 1, m, dtype=torch.float64)
            .masked_fill(~keep[:, None, None, :], torch.finfo(torch.float32).min)
            .to(device)
        )
        bias_grad = False
    elif case.get("bias") == "position":  # T5: one [h, n, m] table shared by the batch, trained
        bias = rand(1, h, n, m)
    elif case.get("bias") == "rows":
        bias = rand(b, 1, n, m)
    tensors = dict(
        query=query, key=key, value=value, bias=bias, pre_proj=pre, post_proj=post, x2l=x2l, m2l=m2l, x2w=x2w, m2w=m2w
    )
    for name, tensor in tensors.items():
        if tensor is not None and (name != "bias" or bias_grad):
            tensor.requires_grad_(True)
    kwargs = dict(scaling=dk**-0.5, causal=case.get("causal", False))
    return tensors, kwargs


def run_case(name: str, device) -> dict:
    """{tensor name: [max |kernel - reference|, max |reference|]} for the output ("out") and every gradient, plus
    "perturbed" (the same against a reference with one map entry moved) and "dropout" facts where the case has them."""
    import talking_heads_triton as kernel
    import torch
    from talking_heads_blockwise import talking_heads_reference

    case = CASES[name]
    dtype = getattr(torch, case.get("dtype", "float32"))
    tensors, kwargs = build(name, device)
    names = [k for k, t in tensors.items() if t is not None and t.requires_grad]
    # the kernel's inputs: leaves of the test dtype (views stay views; a padding mask stays float32)
    ins = {}
    for k, t in tensors.items():
        if t is None:
            ins[k] = None
        elif case.get("views") and k in ("query", "key", "value"):
            ins[k] = t.detach().transpose(1, 2).to(dtype).contiguous().transpose(1, 2).requires_grad_(True)
        else:
            ins[k] = t.detach().to(dtype if k != "bias" else torch.float32).requires_grad_(t.requires_grad)
    p = case.get("dropout", 0.0)
    block = 16 if name in MULTI_BLOCK else 32
    if case.get("tiles") == "default":
        block = None  # the kernel's own choice (its forward and backward tiles differ)
    torch.manual_seed(1234)
    out = kernel.talking_heads_triton(*ins.values(), dropout=p, block_n=block, block_m=block, **kwargs)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64).to(device)
    grads = torch.autograd.grad(out, [ins[k] for k in names], grad_out.to(out.dtype))
    facts = {}
    mask = None
    if p:
        torch.manual_seed(1234)
        seed = kernel._draw_seed()  # the seed the call above drew
        b, hv, n, m = out.shape[0], out.shape[1], out.shape[2], tensors["key"].shape[2]
        keep = kernel.dropout_keep_mask(b, hv, n, m, seed, p, device=device)
        mask = keep.double() / (1 - p)
        torch.manual_seed(1234)
        again = kernel.talking_heads_triton(*ins.values(), dropout=p, block_n=block, block_m=block, **kwargs)
        other = kernel.talking_heads_triton(*ins.values(), dropout=p, block_n=block, block_m=block, **kwargs)
        facts["dropout"] = dict(
            kept=keep.double().mean().item(),
            elements=keep.numel(),
            same_seed=(again - out).abs().max().item(),
            other_seed=(other - out).abs().max().item(),
        )

    def reference(tensors):
        ref = talking_heads_reference(*tensors.values(), dropout_mask=mask, **kwargs)
        return ref, torch.autograd.grad(ref, [tensors[k] for k in names], grad_out)

    def errors(ref, ref_grads):
        found = {"out": [(out.double() - ref).abs().max().item(), ref.abs().max().item()]}
        for k, mine, theirs in zip(names, grads, ref_grads):
            found[k] = [(mine.double() - theirs).abs().max().item(), theirs.abs().max().item()]
        return found

    facts["errors"] = errors(*reference(tensors))
    if name in PERTURBED:  # one entry of one map moved by 1e-3
        moved = dict(tensors)
        which = PERTURBED[name]
        with torch.no_grad():
            moved[which] = tensors[which].detach().clone()
            moved[which].view(-1)[1] += 1e-3
        moved[which].requires_grad_(True)
        facts["perturbed"] = errors(*reference(moved))
    return facts


def main(argv) -> int:
    import torch  # before the flag: torch does not import triton

    # The two files as a checkpoint folder holds them (flat, no package): the kernel needs nothing else, and the
    # package's import (transformers, about 10 s) is not paid here.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hf_attn_variants" / "models"))

    wanted = argv or list(CASES)
    cuda = torch.cuda.is_available() and os.environ.get("HAV_TEST_DEVICE", "").strip() != "cpu"
    if not cuda:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported, here or by the kernel module
    device = torch.device("cuda" if cuda else "cpu")
    for name in wanted:
        start = time.perf_counter()
        try:
            facts = run_case(name, device)
        except Exception as err:  # reported per case; the test prints it
            facts = {"error": f"{type(err).__name__}: {err}"}
        seconds = round(time.perf_counter() - start, 2)
        print(json.dumps({"case": name, "device": str(device), "seconds": seconds, **facts}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
