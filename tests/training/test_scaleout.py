"""Scale-out on 2 CPU processes (gloo, OMP_NUM_THREADS=1 each): DeepSpeed ZeRO-2 and ZeRO-3 through
`torchrun examples/run_pretraining.py --deepspeed examples/deepspeed/zero{2,3}.json`, and FSDP2 as accelerate's own
`fsdp2_prepare_model` shards a BERT, an ALBERT and a T5 model with the settings of examples/accelerate/fsdp.yaml,
under `accelerate launch --config_file examples/accelerate/fsdp.yaml` (tests/fsdp_worker.py says why not through
Trainer).

For each: the run really has 2 processes, the logged losses and the weights after 3 steps equal one process on the
same global batch, and the saved folder loads through its AutoModel class with trust_remote_code in an interpreter
that cannot import the package, with the same outputs. `--resume_from_checkpoint last` continues a ZeRO-3 run.

DeepSpeed builds its CPU communication op the first time it runs on a machine (about 2.5 minutes on 2 busy cores,
kept in ~/.cache/torch_extensions); later runs load it.
"""

import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import fsdp_worker
import hf_attn_variants as hav
import run_pretraining
from conftest import SAME_WEIGHTS, build, head_inputs
from hf_attn_variants.families import FAMILIES
from remote_loading import auto_class, load_isolated

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

NO_DROPOUT = '{"hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0}'
# 3 steps of 8 sequences (16 training sequences: 2 steps per epoch), every process on the CPU.
COMMON = [
    "--preset",
    "bert-tiny-talking-heads",
    "--max_steps",
    "3",
    "--max_train_samples",
    "16",
    "--max_eval_samples",
    "8",
    "--max_seq_length",
    "32",
    "--use_cpu",
    "--eval_strategy",
    "no",
    "--disable_tqdm",
    "true",
    "--warmup_steps",
    "0",
    "--learning_rate",
    "1e-2",
    "--logging_steps",
    "1",
    "--config_overrides",
    NO_DROPOUT,
    "--report_to",
    "none",
]
TWO_PROCESSES = ["--per_device_train_batch_size", "4", "--ddp_backend", "gloo"]
# Weights after 3 AdamW steps at lr 1e-2 on 2 processes against 1. Adam moves a weight by up to lr per step (exactly
# lr * sign(g) at the first step), so one weight that missed an update or got another process's is off by 1e-3 to
# 1e-2, 10 to 100 times this tolerance. What is left is the order of the gradient sums (one process sums over 8
# sequences, two sum 4 + 4): measured max |difference| 2.1e-6 (ZeRO-2), 1.7e-5 (ZeRO-3), 1.4e-6 / 2.8e-6 / 4.2e-7
# (FSDP2: BERT, ALBERT, T5). The key biases carry most of it: softmax ignores them, their true gradient is 0 and Adam
# normalises the rounding noise.
AFTER_STEPS = dict(atol=1e-4, rtol=1e-4)


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _env() -> dict:
    # CPU processes whatever the machine has: DeepSpeed on its CPU accelerator, no GPU visible.
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "DS_ACCELERATOR": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
        "TOKENIZERS_PARALLELISM": "false",
    }


def _launch(command: list[str]) -> None:
    proc = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]


def _torchrun(*args) -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    _launch(
        [
            str(torchrun),
            "--nproc_per_node",
            "2",
            "--master_port",
            _free_port(),
            str(EXAMPLES / "run_pretraining.py"),
            *COMMON,
            *TWO_PROCESSES,
            *args,
        ]
    )


_BUILD_DEEPSPEED_OPS = (
    "from deepspeed.accelerator import get_accelerator\n"
    "get_accelerator().create_op_builder('ShareMemCommBuilder').load()\n"
)
_deepspeed_ops = []


def _needs_deepspeed():
    """Skip without DeepSpeed; else build its CPU communication op once, in one process, before any run needs it.

    A first run that builds the op inside both ranks at once was seen to abort at exit ("terminate called without
    an active exception") after finishing its work; built beforehand (as a later run finds it cached), it does not.

    Installed means a `deepspeed` distribution: `import deepspeed` alone would find examples/deepspeed/ (on sys.path
    here) as a namespace package."""
    try:
        importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("DeepSpeed is not installed: pip install -e '.[test,deepspeed]'")
    if not _deepspeed_ops:
        proc = subprocess.run(
            [sys.executable, "-c", _BUILD_DEEPSPEED_OPS],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=900,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        _deepspeed_ops.append(True)


def _state(folder) -> dict:
    return json.loads((Path(folder) / "trainer_state.json").read_text())


def _logged(folder, key) -> list[float]:
    return [entry[key] for entry in _state(folder)["log_history"] if key in entry and "loss" in entry]


def _assert_same_weights(expected_folder, folder, tolerance=AFTER_STEPS):
    a, b = load_file(Path(expected_folder) / "model.safetensors"), load_file(Path(folder) / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert b[key].dtype == a[key].dtype == torch.float32, key
        torch.testing.assert_close(b[key], a[key], **tolerance, msg=key)


def _assert_same_run(one, two):
    """2 processes x 4 sequences (epoch 1.5 after 3 steps: with 1 process x 4 it would be 0.75) equal 1 x 8."""
    assert _state(two)["epoch"] == _state(one)["epoch"] == 1.5
    assert _logged(two, "loss") == pytest.approx(_logged(one, "loss"), rel=1e-5)
    # Adam and clipping hide a gradient scaled by the number of processes; its norm shows it (2x). DeepSpeed reports
    # its own norm computation: 2.5e-4 relative from the first step (same weights, same loss) was measured.
    assert _logged(two, "grad_norm") == pytest.approx(_logged(one, "grad_norm"), rel=1e-3)
    _assert_same_weights(one, two)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    run_pretraining.main(
        COMMON + ["--per_device_train_batch_size", "8", "--save_strategy", "no", "--output_dir", str(out)]
    )
    return out


@pytest.fixture(scope="module")
def zero2(tmp_path_factory):
    _needs_deepspeed()
    out = tmp_path_factory.mktemp("zero2")
    _torchrun(
        "--deepspeed", str(EXAMPLES / "deepspeed" / "zero2.json"), "--save_strategy", "no", "--output_dir", str(out)
    )
    return out


@pytest.fixture(scope="module")
def zero3(tmp_path_factory):
    """ZeRO-3, saving a checkpoint at step 2 (and Trainer's last one at step 3)."""
    _needs_deepspeed()
    out = tmp_path_factory.mktemp("zero3")
    _torchrun(
        "--deepspeed",
        str(EXAMPLES / "deepspeed" / "zero3.json"),
        "--save_strategy",
        "steps",
        "--save_steps",
        "2",
        "--save_total_limit",
        "2",
        "--output_dir",
        str(out),
    )
    return out


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory):
    """(one process, two processes under FSDP2) folders of tests/fsdp_worker.py, a sub-folder per model."""
    one, two = tmp_path_factory.mktemp("fsdp_one"), tmp_path_factory.mktemp("fsdp_two")
    fsdp_worker.main(str(one))
    accelerate = Path(sys.executable).parent / "accelerate"
    _launch(
        [
            str(accelerate),
            "launch",
            "--config_file",
            str(EXAMPLES / "accelerate" / "fsdp.yaml"),
            "--num_processes",
            "2",
            "--mixed_precision",
            "no",
            "--main_process_port",
            _free_port(),
            str(Path(__file__).resolve().parents[1] / "fsdp_worker.py"),
            str(two),
        ]
    )
    return one, two


def test_torchrun_on_cpu_trains_data_parallel_as_documented(one_process, tmp_path):
    """`torchrun --nproc_per_node 2 examples/run_pretraining.py` on a machine without a GPU, with neither --use_cpu
    nor --ddp_backend (the scripts choose the CPU and gloo themselves): DDP over 2 processes, equal to one process
    on the same global batch (without the scripts' choice each rank would train alone: epoch 0.75, other weights)."""
    torchrun = Path(sys.executable).parent / "torchrun"
    _launch(
        [
            str(torchrun),
            "--nproc_per_node",
            "2",
            "--master_port",
            _free_port(),
            str(EXAMPLES / "run_pretraining.py"),
            *[arg for arg in COMMON if arg != "--use_cpu"],
            "--per_device_train_batch_size",
            "4",
            "--save_strategy",
            "no",
            "--output_dir",
            str(tmp_path),
        ]
    )
    _assert_same_run(one_process, tmp_path)


def test_zero2_equals_one_process(one_process, zero2):
    _assert_same_run(one_process, zero2)
    # the tied LM head is saved once, as by one process (ZeRO-2 used to add cls.predictions.decoder.*)
    size = (one_process / "model.safetensors").stat().st_size
    assert (zero2 / "model.safetensors").stat().st_size == pytest.approx(size, rel=0.01)


def test_zero3_equals_one_process(one_process, zero3):
    _assert_same_run(one_process, zero3)
    # every process holds a shard: the parameter count is still the model's
    results = json.loads((zero3 / "all_results.json").read_text())
    assert results["num_parameters"] == json.loads((one_process / "all_results.json").read_text())["num_parameters"]


def test_zero3_resumes_from_the_last_checkpoint(tmp_path, zero3):
    """A copy of the run stopped after step 2 continues with `--resume_from_checkpoint last` to the same step 3."""
    shutil.copytree(zero3 / "checkpoint-2", tmp_path / "checkpoint-2")
    _torchrun(
        "--deepspeed",
        str(EXAMPLES / "deepspeed" / "zero3.json"),
        "--save_strategy",
        "no",
        "--output_dir",
        str(tmp_path),
        "--resume_from_checkpoint",
        "last",
    )
    assert _state(tmp_path)["global_step"] == 3
    assert _logged(tmp_path, "loss") == pytest.approx(_logged(zero3, "loss"), rel=1e-5)
    _assert_same_weights(zero3, tmp_path)
    # non-vacuity: the resumed step moves the weights far beyond the tolerance (a resume that skipped it would fail)
    before, after = load_file(zero3 / "checkpoint-2" / "model.safetensors"), load_file(zero3 / "model.safetensors")
    moved = sorted((after[k] - before[k]).abs().max().item() for k in after)
    assert moved[len(moved) // 2] > 10 * AFTER_STEPS["atol"], moved


# what accelerate's fsdp2_prepare_model makes a shard unit of, per model: each layer (`_no_split_modules`), the tied
# input embedding and LM head decoder together (FSDPEmbedding, FSDPLinear), and the root with the rest
FSDP_UNITS = {
    name: sorted(["FSDPEmbedding", "FSDPLinear", f"FSDP{layer}", f"FSDP{fsdp_worker.MODELS[name][0]}"])
    for name, layer in [("bert", "VariantBertLayer"), ("albert", "VariantAlbertLayer"), ("t5", "VariantT5Block")]
}


@pytest.mark.parametrize("name", list(fsdp_worker.MODELS))
def test_accelerate_fsdp2_equals_one_process(fsdp, name):
    """accelerate's FSDP2 preparation with fsdp.yaml's settings: 2 ranks x 4 sequences train as 1 x 8, tied weights
    and all (BERT and ALBERT: word embedding and decoder; T5: the shared embedding, both stacks' and the LM head)."""
    one, two = (folder / name for folder in fsdp)
    info = json.loads((two / "run.json").read_text())
    assert info["world_size"] == 2 and info["units"] == FSDP_UNITS[name], info
    assert info["losses"] == pytest.approx(json.loads((one / "run.json").read_text())["losses"], rel=1e-5)
    _assert_same_weights(one, two)
    # non-vacuity: the 3 steps move the weights far beyond the tolerance (a rank that skipped an update would fail)
    start, end = fsdp_worker.build(name).state_dict(), load_file(two / "model.safetensors")
    moved = sorted((end[k] - start[k]).abs().max().item() for k in end)
    assert moved[len(moved) // 2] > 10 * AFTER_STEPS["atol"], moved


def test_accelerate_fsdp2_folders_load_as_remote_code(tmp_path, fsdp):
    """What Trainer's save_model writes under FSDP2 (the gathered full state dict, saved by the prepared model) loads
    through its AutoModel class with trust_remote_code=True, package blocked, with the same outputs and ties."""
    jobs, expected = [], {}
    for name, (head, family, _) in fsdp_worker.MODELS.items():
        folder = fsdp[1] / name
        inputs = head_inputs(head, seq=12)
        torch.save(inputs, tmp_path / f"{name}-inputs.pt")
        jobs.append(
            dict(
                path=str(folder),
                auto=auto_class(head),
                cls=head,
                config=FAMILIES[family].config_class.__name__,
                inputs=str(tmp_path / f"{name}-inputs.pt"),
                out=str(tmp_path / f"{name}.pt"),
            )
        )
        model = getattr(hav, head).from_pretrained(folder).eval()
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight, name
        if family == "t5":  # both stacks read the shared embedding module itself
            assert model.encoder.embed_tokens is model.decoder.embed_tokens is model.shared
        with torch.no_grad():
            expected[name] = model(**inputs)
    load_isolated(tmp_path, jobs)
    for job, (name, out) in zip(jobs, expected.items()):
        got = torch.load(job["out"])
        torch.testing.assert_close(got["logits"], out.logits, **SAME_WEIGHTS, msg=name)
        torch.testing.assert_close(got["loss"], out.loss, **SAME_WEIGHTS, msg=name)


def test_zero_folders_load_as_remote_code(tmp_path, zero2, zero3):
    """ZeRO-2 and ZeRO-3 folders through AutoModelForMaskedLM(trust_remote_code=True), package blocked."""
    inputs = head_inputs("VariantBertForMaskedLM", seq=12)
    inputs["input_ids"] = inputs["input_ids"] * 5 + 4  # spread over the tiny preset's vocabulary
    torch.save(inputs, tmp_path / "inputs.pt")
    folders = {"zero2": zero2, "zero3": zero3}
    jobs = [
        dict(
            path=str(folder),
            auto="AutoModelForMaskedLM",
            cls="VariantBertForMaskedLM",
            config="VariantBertConfig",
            inputs=str(tmp_path / "inputs.pt"),
            out=str(tmp_path / f"{name}.pt"),
        )
        for name, folder in folders.items()
    ]
    load_isolated(tmp_path, jobs)
    for job in jobs:
        model = hav.VariantBertForMaskedLM.from_pretrained(job["path"]).eval()
        with torch.no_grad():
            expected = model(**inputs)
        got = torch.load(job["out"])
        torch.testing.assert_close(got["logits"], expected.logits, **SAME_WEIGHTS, msg=job["path"])
        torch.testing.assert_close(got["loss"], expected.loss, **SAME_WEIGHTS, msg=job["path"])


TIED_HEADS = [
    "VariantBertForMaskedLM",
    "VariantBertForPreTraining",
    "VariantBertLMHeadModel",
    "VariantAlbertForMaskedLM",
    "VariantAlbertForPreTraining",
    "VariantT5ForConditionalGeneration",
]


@pytest.mark.parametrize("head", TIED_HEADS)
def test_a_state_dict_of_copies_saves_tied_weights_once(tmp_path, head):
    """Trainer under ZeRO-1/2 passes `save_pretrained` a state dict of cloned tensors (accelerate's get_state_dict):
    the folder holds the same keys as an ordinary save, and loads back with its weights tied."""
    model = build(head, "talking_heads")
    model.save_pretrained(tmp_path / "plain")
    model.save_pretrained(tmp_path / "copies", state_dict={k: v.clone() for k, v in model.state_dict().items()})
    plain = load_file(tmp_path / "plain" / "model.safetensors")
    copies = load_file(tmp_path / "copies" / "model.safetensors")
    assert copies.keys() == plain.keys()
    assert len(model.state_dict()) > len(plain)  # there were tied copies to drop
    for key in plain:
        assert torch.equal(copies[key], plain[key]), key
    loaded = getattr(hav, head).from_pretrained(tmp_path / "copies")
    assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight
