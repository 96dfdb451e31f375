"""The Triton talking-heads kernel (hf_attn_variants/models/talking_heads_triton.py): output and the gradient of every input
and map equal `talking_heads_reference` (computed in float64) within 1e-5 in float32, over the table of cases in
tests/kernels/talking_heads_triton_worker.py: each map alone and together, every dynamic map, h_k != h != h_v, padding and
causal masks, T5's trained position bias, cross-attention, lengths that are not a multiple of the tile, strided
views, dropout (the kernel's own keep-mask, materialised by `dropout_keep_mask`), float16 (and bfloat16 on a GPU).

Without a GPU the kernels run through Triton's interpreter, in a process of its own (the worker says why); with one,
compiled on CUDA. A tolerance is relative to the reference's largest magnitude where that exceeds 1 (a summed map
gradient is in the tens). Non-vacuity: the same comparison against a reference whose map is off by 1e-3 in one entry
fails.
"""

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from talking_heads_triton_worker import CASES, PERTURBED

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "kernels" / "talking_heads_triton_worker.py"
KERNEL = ROOT / "hf_attn_variants" / "models" / "talking_heads_triton.py"
TOLERANCE = {"float32": 1e-5, "float16": 5e-3, "bfloat16": 3e-2}


@pytest.fixture(scope="module")
def results():
    """{case: the worker's JSON row}. On a CPU every case in one process (the interpreter: about 25 s of one core);
    on a GPU in 8 processes at once, since compiling each case's four kernels is what takes the time there."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    cuda = torch.cuda.is_available() and os.environ.get("HAV_TEST_DEVICE", "").strip() != "cpu"
    names = list(CASES)
    shares = [names[i::8] for i in range(8)] if cuda else [names]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), *share], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for share in shares
    ]
    rows = {}
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=900)
        for line in stdout.splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                rows[row["case"]] = row
        assert proc.returncode == 0, f"the worker failed:\n{stdout[-2000:]}\n{stderr[-4000:]}"
    assert set(rows) == set(CASES)
    return rows


def expected_gradients(name: str) -> set[str]:
    case = CASES[name]
    names = {"query", "key", "value", *case.get("dynamic", ())}
    names |= {"pre_proj"} if case.get("pre") else set()
    names |= {"post_proj"} if case.get("post") else set()
    names |= {"bias"} if case.get("bias") in ("position", "rows") else set()  # a padding mask needs none
    return names


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_equals_reference(results, name):
    row = results[name]
    dtype = CASES[name].get("dtype", "float32")
    if dtype == "bfloat16" and row["device"] == "cpu":
        assert row.get("error", "").startswith("NotImplementedError") and "interpreter" in row["error"]
        pytest.skip("Triton's interpreter multiplies bfloat16 blocks wrongly: bfloat16 is checked on a GPU")
    assert "error" not in row, row["error"]
    assert set(row["errors"]) == {"out"} | expected_gradients(name)
    tolerance = TOLERANCE[dtype]
    for tensor, (error, scale) in row["errors"].items():
        assert error <= tolerance * max(1.0, scale), f"{name}: {tensor} differs by {error:.2e} (scale {scale:.2f})"


@pytest.mark.parametrize("name", list(PERTURBED))
def test_a_map_off_by_1e_3_fails_the_same_comparison(results, name):
    errors = results[name]["perturbed"]
    worst = max(error / max(1.0, scale) for error, scale in errors.values())
    assert worst > 10 * TOLERANCE["float32"], f"moving {PERTURBED[name]} went unnoticed ({worst:.1e})"


def test_dropout_mask_is_seeded_and_drops_its_share(results):
    facts = results["dropout"]["dropout"]
    p = CASES["dropout"]["dropout"]
    spread = 6 * (p * (1 - p) / facts["elements"]) ** 0.5
    assert abs(facts["kept"] - (1 - p)) < spread
    assert facts["same_seed"] <= 1e-6  # torch.manual_seed reproduces the call
    assert facts["other_seed"] > 1e-2  # the next call draws another seed


def load_kernel_module():
    """The kernel file as a checkpoint folder holds it: a top-level module (imported as the test session has triton,
    so its kernels may be compiled ones; the checks below stop before a launch)."""
    spec = importlib.util.spec_from_file_location("talking_heads_triton_probe", KERNEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bad_arguments_raise_value_errors_naming_them():
    kernel = load_kernel_module()
    q, k, v = torch.zeros(1, 2, 5, 8), torch.zeros(1, 2, 7, 8), torch.zeros(1, 2, 7, 8)
    pre, post = torch.zeros(2, 4), torch.zeros(4, 2)
    cases = [
        (dict(query=q, key=torch.zeros(1, 3, 7, 8), value=v), "do not fit"),
        (dict(query=q, key=k, value=v, x2l=torch.zeros(1, 5, 2, 2)), "need pre_proj"),
        (dict(query=q, key=k, value=v, pre_proj=pre, post_proj=torch.zeros(3, 2)), "post_proj must be"),
        (dict(query=q, key=k, value=v, pre_proj=pre), "value has 2 heads"),
        (dict(query=q, key=k, value=v, pre_proj=pre, post_proj=post, m2w=torch.zeros(1, 5, 4, 2)), "m2w must be"),
        (dict(query=q, key=k, value=v, bias=torch.zeros(1, 3, 5, 7)), "does not broadcast"),
        (dict(query=torch.zeros(1, 2, 9, 8), key=k, value=v, causal=True), "needs n <= m"),
        (dict(query=q, key=k, value=v, dropout=1.0), "dropout must be in"),
        (dict(query=q.double(), key=k.double(), value=v.double()), "float32, float16, bfloat16"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            kernel.talking_heads_triton(**{"scaling": 0.5, **kwargs})
    with pytest.raises(ValueError, match="powers of two"):
        kernel.talking_heads_triton(q, k, v, scaling=0.5, block_n=24)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: CUDA tensors run")
def test_cpu_tensors_without_the_interpreter_raise_a_clear_error():
    kernel = load_kernel_module()
    if kernel._interpreted():
        pytest.skip("TRITON_INTERPRET=1 is set for the whole session")
    q = torch.zeros(1, 2, 5, 8)
    with pytest.raises(RuntimeError, match="CUDA tensors.*TRITON_INTERPRET=1"):
        kernel.talking_heads_triton(q, q, q, scaling=0.5)


def test_without_triton_the_import_error_says_what_to_install(monkeypatch):
    for name in [m for m in sys.modules if m == "triton" or m.startswith("triton.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` now raises ImportError
    with pytest.raises(ImportError, match=r"pip install triton \(or the package's \[triton\] extra\)"):
        load_kernel_module()


def test_the_file_imports_only_torch_triton_and_the_standard_library():
    """It is copied next to checkpoints (remote code): nothing of the package, triton only at the top, guarded."""
    tree = ast.parse(KERNEL.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 1 or node.module.split(".")[0] in sys.stdlib_module_names, ast.dump(node)
            imported.add("." if node.level else node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) <= {"torch", "triton", "."}
    guard = next(node for node in tree.body if isinstance(node, ast.Try))
    assert [alias.name for node in guard.body for alias in node.names] == ["triton", "triton.language"]
    assert guard.handlers[0].type.id == "ImportError"
    top_level_imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert all("triton" not in ast.dump(n) for n in top_level_imports)  # triton only inside the guard


def test_models_with_the_triton_algorithm_train_as_with_the_eager_core():
    """`attention_algorithm="triton"` end to end (tests/kernels/talking_heads_triton_models.py, its own process): a BERT masked
    LM with every dynamic map, a causal BERT LM head with h_k != h != h_v, and a T5 (position bias, causal decoder,
    cross-attention) give the eager core's loss and parameter gradients, to 1e-5 of each gradient's scale."""
    script = ROOT / "tests" / "kernels" / "talking_heads_triton_models.py"
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 3
    for row in rows:
        assert row["gradients"] and row["loss_difference"] < 1e-5 and row["worst_gradient_difference"] < 1e-5, row
