"""What `attention_algorithm="auto"` (the default) runs, and the guards of the explicit Triton choice.

A default runs only verified code: the Triton kernel has been tested through Triton's CPU interpreter but has never
passed `benchmarks/gpu_check.py --kernel` on a GPU, so "auto" on CUDA takes the blockwise core in training and the
eager or blockwise core in inference (the CPU: the blockwise algorithm's inference core at every size); only a GPU
named in `TRITON_VERIFIED_GPUS` gets the kernel.
CUDA is simulated by the device argument and a patched `torch.cuda.get_device_name`."""

import importlib.util
import re
import sys
import types
from pathlib import Path

import pytest
import torch

from hf_attn_variants.models import attention_variants
from hf_attn_variants.models.attention_variants import TRITON_VERIFIED_GPUS, talking_heads_algorithm

ROOT = Path(__file__).resolve().parents[2]
CUDA = torch.device("cuda", 0)
SMALL, LARGE = 1000, attention_variants.EAGER_INFERENCE_ELEMENTS + 1


@pytest.fixture
def gpu(monkeypatch):
    """A simulated CUDA device named "NVIDIA H200", with triton importable."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: types.SimpleNamespace() if name == "triton" else real_find_spec(name, *a),
    )
    return monkeypatch


def _auto(device, elements, grad):
    with torch.set_grad_enabled(grad):
        return talking_heads_algorithm("auto", device, elements)


def test_no_gpu_is_verified_yet():
    """The README and docs/attention-algorithms.md say the kernel has not run on a GPU: the table agrees."""
    assert TRITON_VERIFIED_GPUS == ()


@pytest.mark.parametrize("device", [torch.device("cpu"), CUDA])
def test_auto_runs_the_verified_pytorch_cores_on_any_unverified_device(gpu, device):
    assert _auto(device, SMALL, grad=True) == "blockwise"  # training: no n x m tensor kept for backward
    # inference: on the CPU the blockwise inference core (blocks in the cache), on a GPU one in-place eager buffer
    assert _auto(device, SMALL, grad=False) == ("blockwise" if device.type == "cpu" else "eager")
    assert _auto(device, LARGE, grad=False) == "blockwise"  # inference past the eager buffer's limit
    gpu.setattr(torch.compiler, "is_compiling", lambda: True)  # torch.compile / torch.export: no loop over blocks
    assert _auto(device, SMALL, grad=False) == "eager"


def test_auto_takes_the_kernel_only_on_a_verified_gpu_with_triton(gpu):
    gpu.setattr(attention_variants, "TRITON_VERIFIED_GPUS", ("NVIDIA H200",))
    assert _auto(CUDA, SMALL, grad=True) == "triton" and _auto(CUDA, SMALL, grad=False) == "triton"
    assert _auto(torch.device("cpu"), SMALL, grad=True) == "blockwise"  # the name of a CPU is never looked up
    gpu.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    assert _auto(CUDA, SMALL, grad=True) == "blockwise"  # another GPU: not verified
    gpu.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    gpu.setattr(importlib.util, "find_spec", lambda name, *a: None)  # verified, but triton is not installed
    assert _auto(CUDA, SMALL, grad=True) == "blockwise"


@pytest.mark.parametrize("name", ["eager", "blockwise", "triton"])
def test_an_explicit_algorithm_is_run_as_asked(gpu, name):
    assert talking_heads_algorithm(name, CUDA, SMALL) == name


def _fake_kernel(monkeypatch):
    """The kernel module replaced by a stand-in that records its calls (no GPU here to run the real one)."""
    calls = []
    module = types.ModuleType("hf_attn_variants.models.talking_heads_triton")
    module.talking_heads_triton = lambda *args, **kwargs: calls.append(args) or "out"
    monkeypatch.setitem(sys.modules, "hf_attn_variants.models.talking_heads_triton", module)
    return calls


def test_the_explicit_kernel_warns_once_on_an_unverified_gpu(gpu, caplog):
    calls = _fake_kernel(gpu)
    query = types.SimpleNamespace(device=CUDA)  # stands in for a CUDA tensor
    attention_variants.logger.warning_once.cache_clear()
    with caplog.at_level("WARNING"):
        assert attention_variants.talking_heads_triton(query, "k") == "out"
        attention_variants.talking_heads_triton(query, "k")
    messages = [r.getMessage() for r in caplog.records if "experimental" in r.getMessage()]
    assert len(messages) == 1 and "NVIDIA H200" in messages[0] and 'attention_algorithm="blockwise"' in messages[0]
    assert len(calls) == 2
    caplog.clear()
    attention_variants.logger.warning_once.cache_clear()
    gpu.setattr(attention_variants, "TRITON_VERIFIED_GPUS", ("NVIDIA H200",))
    with caplog.at_level("WARNING"):
        attention_variants.talking_heads_triton(query, "k")
    assert not [r for r in caplog.records if "experimental" in r.getMessage()]


def _load_kernel_file(name="talking_heads_triton_version_probe"):
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "hf_attn_variants" / "models" / "talking_heads_triton.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_kernel_refuses_a_triton_older_than_the_tested_release(monkeypatch):
    triton = pytest.importorskip("triton")
    kernel = _load_kernel_file()  # the installed triton passes
    assert kernel._release(triton.__version__) >= kernel.TESTED_TRITON
    monkeypatch.setattr(triton, "__version__", "3.8.0")
    with pytest.raises(ImportError, match=r"triton >= 3\.9 .*has triton 3\.8\.0.*attention_algorithm=\"blockwise\""):
        _load_kernel_file()
    monkeypatch.setattr(triton, "__version__", "3.10.0+git1a2b3c")  # a newer release (and a local build) loads
    _load_kernel_file()


def test_the_tested_triton_release_is_the_extras_lower_bound():
    pytest.importorskip("triton")
    pyproject = (ROOT / "pyproject.toml").read_text()
    bound = re.search(r'triton = \["triton>=([\d.]+)"\]', pyproject).group(1)
    assert tuple(int(p) for p in bound.split(".")[:2]) == _load_kernel_file().TESTED_TRITON
