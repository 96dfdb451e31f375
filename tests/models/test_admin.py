"""Admin residuals and deep single-head twins: BERT and ALBERT are Post-LN, T5 refuses."""

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

import hf_attn_variants as hav
from conftest import SAME_WEIGHTS, TINY, TINY_ALBERT, TinyBatches, at_real_tokens, build, head_inputs
from hf_attn_variants.admin import admin_closed_form, admin_profile, residual_count
from hf_attn_variants.presets import PRESETS, preset_config, single_head_twin
from remote_loading import load_isolated, save_checkpoint


def _omegas(model):
    return [m.admin_omega for m in model.modules() if getattr(m, "admin_omega", None) is not None]


@pytest.mark.parametrize("head", ["VariantBertForMaskedLM", "VariantAlbertForMaskedLM"])
def test_omega_one_is_the_ordinary_model_exactly(head):
    plain = build(head, "talking_heads")
    admin = build(head, "talking_heads", admin=True)
    missing, unexpected = admin.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and missing and all("admin_omega" in k for k in missing)
    assert all(torch.equal(w, torch.ones_like(w)) for w in _omegas(admin))
    inputs = head_inputs(head)
    with torch.no_grad():
        torch.testing.assert_close(admin(**inputs).logits, plain(**inputs).logits, **SAME_WEIGHTS)


def test_admin_warm_start_equals_transformers_bert(tmp_path):
    torch.manual_seed(0)
    ref = transformers.BertForMaskedLM(transformers.BertConfig(**TINY)).eval()
    ref.save_pretrained(tmp_path)
    ours = hav.VariantBertForMaskedLM.from_pretrained(tmp_path, admin=True).eval()
    assert len(_omegas(ours)) == 2 * TINY["num_hidden_layers"]
    inputs = head_inputs("VariantBertForMaskedLM")
    inputs.pop("labels")
    with torch.no_grad():
        ours_logits, ref_logits = ours(**inputs).logits, ref(**inputs).logits
    real = inputs["attention_mask"]
    torch.testing.assert_close(
        at_real_tokens(ours_logits, real), at_real_tokens(ref_logits, real), atol=1e-6, rtol=1e-6
    )


def test_profiling_matches_an_independent_implementation(tmp_path):
    """The paper's procedure computed without our code: transformers' own BertForMaskedLM on the same weights (an
    Admin model at omega = 1 is exactly it) in eval mode, each branch's output taken by hooks on BertSelfOutput.dense
    and BertOutput.dense, and omega_i = sqrt(1 + sum_{j<i} Var[f_j]) as one cumulative sum."""
    torch.manual_seed(0)
    config = dict(TINY, initializer_range=0.2, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    reference = transformers.BertForMaskedLM(transformers.BertConfig(**config)).eval()
    reference.save_pretrained(tmp_path)
    model = hav.VariantBertForMaskedLM.from_pretrained(tmp_path, admin=True).train()
    inputs = {k: v for k, v in head_inputs("VariantBertForMaskedLM").items() if k != "labels"}
    variances = []
    hooks = [
        dense.register_forward_hook(lambda module, args, out: variances.append(out.double().var()))
        for layer in reference.bert.encoder.layer
        for dense in (layer.attention.output.dense, layer.output.dense)
    ]
    with torch.no_grad():
        reference(**inputs)
    for hook in hooks:
        hook.remove()
    expected = torch.sqrt(1 + torch.cumsum(torch.stack([torch.zeros((), dtype=torch.float64), *variances[:-1]]), 0))
    assert expected[-1] > 1.05  # branch variances large enough that a wrong rule shows

    omegas = admin_profile(model, inputs)
    assert omegas == pytest.approx(expected.tolist(), rel=1e-5)
    assert [w[0].item() for w in _omegas(model)] == pytest.approx(expected.tolist(), rel=1e-5)
    assert all(torch.all(w == w[0]) for w in _omegas(model))
    assert model.training  # the pass ran in eval mode (no dropout noise), the mode is given back
    assert admin_profile(model, inputs) == pytest.approx(omegas, rel=1e-12)  # omega is reset to 1 before profiling


_DDP_PROFILE = """
import json, os, sys
import torch
from transformers import Trainer, TrainingArguments
import hf_attn_variants as hav
import hf_attn_variants.admin as admin

seen = {}
profile = admin.admin_profile
def spy(model, batch):  # record the batch this rank profiles
    seen["input_ids"] = batch["input_ids"].tolist()
    return profile(model, batch)
admin.admin_profile = spy

class Data(torch.utils.data.Dataset):
    ids = torch.randint(1, 99, (16, 8), generator=torch.Generator().manual_seed(0))
    def __len__(self):
        return len(self.ids)
    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}

torch.manual_seed(0)
model = hav.VariantBertForMaskedLM(hav.VariantBertConfig(**json.loads(sys.argv[2])))
callback = admin.AdminInitCallback()
args = TrainingArguments(output_dir=sys.argv[1], max_steps=1, per_device_train_batch_size=4, learning_rate=0.0,
                         report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True, ddp_backend="gloo")
Trainer(model=model, args=args, train_dataset=Data(), callbacks=[callback]).train()
rank = int(os.environ["RANK"])
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump({"omegas": callback.omegas, "input_ids": seen["input_ids"],
               "model": [m.admin_omega.tolist() for m in model.modules() if getattr(m, "admin_omega", None) is not None]}, f)
# Leave together and take the process group down before the interpreter does: a rank that exits while the other
# still holds its gloo connections can make that one abort in its teardown ("terminate called without an active
# exception"), after its work is done. That abort was seen once more even so (torch 2.13, a loaded 2-core machine),
# from C++ destructors at interpreter exit: with the results written and closed, leave without running them.
torch.distributed.barrier()
torch.distributed.destroy_process_group()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def test_profiling_under_data_parallelism_gives_every_rank_the_global_batch_omegas(tmp_path):
    """torchrun, 2 CPU processes, Trainer + AdminInitCallback: each rank profiles its own first batch, and both
    end with the same omegas, equal to profiling the two batches together in one process."""
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun is not installed")
    config = dict(TINY, initializer_range=0.2, admin=True)
    script = tmp_path / "admin_ddp_profile.py"  # not profile.py: it would shadow the standard library module
    script.write_text(_DDP_PROFILE)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [
            str(torchrun),
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            str(script),
            str(tmp_path),
            json.dumps(config),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["input_ids"] != ranks[1]["input_ids"]  # different batches: the ranks had to agree
    assert ranks[0]["omegas"] == ranks[1]["omegas"] and ranks[0]["model"] == ranks[1]["model"]
    assert ranks[0]["omegas"][-1] > 1.05

    torch.manual_seed(0)
    model = hav.VariantBertForMaskedLM(hav.VariantBertConfig(**config))
    both = torch.tensor(ranks[0]["input_ids"] + ranks[1]["input_ids"])
    assert admin_profile(model, {"input_ids": both}) == pytest.approx(ranks[0]["omegas"], rel=1e-6)


def test_profiled_omega_survives_save_load_and_remote_code(tmp_path):
    model = build("VariantBertForSequenceClassification", "talking_heads", admin=True)
    inputs = {k: v for k, v in head_inputs("VariantBertForSequenceClassification").items() if k != "labels"}
    admin_profile(model, inputs)
    model.save_pretrained(tmp_path / "m")
    loaded = hav.VariantBertForSequenceClassification.from_pretrained(tmp_path / "m")
    for a, b in zip(_omegas(model), _omegas(loaded), strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert _omegas(loaded)[-1][0] > 1
    # and a process that cannot import the package loads it and gives the same outputs
    job, expected = save_checkpoint(tmp_path, "VariantBertForSequenceClassification", "talking_heads", model=model)
    load_isolated(tmp_path, [job])
    got = torch.load(job["out"])
    torch.testing.assert_close(got["logits"], expected["logits"], atol=1e-6, rtol=1e-6)


def test_shared_albert_layers_take_the_closed_form():
    model = build("VariantAlbertForMaskedLM", "dot_product", admin=True)
    inputs = {k: v for k, v in head_inputs("VariantAlbertForMaskedLM").items() if k != "labels"}
    with pytest.raises(ValueError, match="use `admin_closed_form"):
        admin_profile(model, inputs)
    omega = admin_closed_form(model)
    n = 2 * model.config.num_hidden_layers * model.config.inner_group_num  # every run of a shared layer counts
    assert residual_count(model) == n == 12
    assert omega == pytest.approx(math.sqrt((n + 1) / math.log(n + 1) - 1))
    assert all(torch.allclose(w, torch.full_like(w, omega)) for w in _omegas(model))


@pytest.mark.parametrize("cross_attention", [False, True])
def test_closed_form_counts_the_residuals_that_carry_omega(cross_attention):
    """N counts the residuals that carry omega: three per layer in a BERT decoder with cross-attention."""
    model = build("VariantBertLMHeadModel", "dot_product", admin=True, add_cross_attention=cross_attention)
    per_layer = 3 if cross_attention else 2
    n = per_layer * TINY["num_hidden_layers"]
    assert residual_count(model) == n == len(_omegas(model))
    assert admin_closed_form(model) == pytest.approx(math.sqrt((n + 1) / math.log(n + 1) - 1))
    encoder_states = torch.randn(2, 4, TINY["hidden_size"])
    runs = []  # and that is how many run in a forward pass that uses the cross-attention
    for module in model.modules():
        if getattr(module, "admin_omega", None) is not None:
            module.register_forward_hook(lambda *args: runs.append(1))
    model(torch.randint(1, 99, (2, 5)), encoder_hidden_states=encoder_states if cross_attention else None)
    assert len(runs) == n


def test_admin_needs_admin_residuals_and_t5_refuses():
    with pytest.raises(ValueError, match="build it with `admin=True`"):
        admin_closed_form(build("VariantBertModel", "dot_product"))
    with pytest.raises(ValueError, match="T5 is Pre-LN"):
        build("VariantT5Model", "dot_product", admin=True)


@pytest.mark.parametrize("layers,heads,hidden,ffn", [(12, 12, 768, 3072), (24, 16, 1024, 4096)])
def test_single_head_twin_of_bert_base_and_large(layers, heads, hidden, ffn):
    config = hav.VariantBertConfig(
        num_hidden_layers=layers, num_attention_heads=heads, hidden_size=hidden, intermediate_size=ffn
    )
    twin, counts = single_head_twin(config)
    assert (twin.num_hidden_layers, twin.num_attention_heads) == (layers * heads, 1)
    assert twin.attention_head_size == hidden // heads and twin.intermediate_size == ffn // heads
    assert abs(counts["ratio"] - 1) < 0.05, counts
    with torch.device("meta"):  # the same architecture in transformers' own BertModel has the same size
        reference = transformers.BertModel(
            transformers.BertConfig(
                num_hidden_layers=layers, num_attention_heads=heads, hidden_size=hidden, intermediate_size=ffn
            )
        )
    assert counts["multi_head"] == sum(p.numel() for p in reference.parameters())


def _layer_parameters(model_class, config) -> int:
    """Parameters outside the embeddings (what the twin reshapes), counted on the meta device."""
    with torch.device("meta"):
        model = model_class(config)
    return sum(
        p.numel()
        for n, p in model.named_parameters()
        if not any(part in n for part in ("embeddings.", "shared.", "embed_tokens."))
    )


TWIN_PRESETS = [name for name, preset in PRESETS.items() if preset.attention.startswith("single-head")]


@pytest.mark.parametrize("name", TWIN_PRESETS)
def test_every_twin_preset_keeps_the_parameter_count(name):
    """Every family's twin (ALBERT's with one group of one-head layers per head, each shared as the original group
    was) has the size of its multi-head original, in all and outside the embeddings, within 1%."""
    preset = PRESETS[name]
    original = preset_config(name.replace(preset.attention, "dot-product"), vocab_size=1000)
    twin = preset_config(name, vocab_size=1000)
    model_class = getattr(
        hav, {"bert": "VariantBertModel", "albert": "VariantAlbertModel", "t5": "VariantT5Model"}[preset.family]
    )
    heads = original.num_attention_heads if preset.family != "t5" else original.num_heads
    depth = (lambda c: c.num_layers) if preset.family == "t5" else (lambda c: c.num_hidden_layers)
    assert depth(twin) == depth(original) * heads
    _, counts = single_head_twin(original, model_class)
    assert counts["ratio"] == pytest.approx(1, abs=0.01), counts
    layers = _layer_parameters(model_class, original), _layer_parameters(model_class, twin)
    assert layers[1] / layers[0] == pytest.approx(1, abs=0.01), layers


def test_albert_twin_shares_one_head_groups_across_the_depth():
    config = hav.VariantAlbertConfig(
        **{
            **TINY_ALBERT,
            "num_hidden_groups": 1,
            "inner_group_num": 1,
            "intermediate_size": 64,
            "num_hidden_layers": 3,
        }
    )
    twin, counts = single_head_twin(config)
    assert (twin.num_hidden_layers, twin.num_hidden_groups, twin.inner_group_num) == (12, 4, 1)
    model = hav.VariantAlbertModel(twin)
    assert len(model.encoder.albert_layer_groups) == 4
    out = model(torch.randint(1, 99, (2, 5)), output_hidden_states=True)
    assert len(out.hidden_states) == 13  # 12 single-head layers run
    assert counts["ratio"] == pytest.approx(1, abs=0.05), counts  # width 32: the twin's extra LayerNorms show


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("admin", [False, True])
def test_48_layer_single_head_trains_without_nan(dtype, admin):
    config = hav.VariantBertConfig(
        **{**TINY, "num_hidden_layers": 4, "num_attention_heads": 12, "hidden_size": 48, "intermediate_size": 96},
        admin=admin,
    )
    twin, _ = single_head_twin(config)
    assert twin.num_hidden_layers == 48
    torch.manual_seed(0)
    model = hav.VariantBertForMaskedLM(twin).to(dtype).train()
    if admin:
        admin_closed_form(model)
    inputs = head_inputs("VariantBertForMaskedLM")
    loss = model(**inputs).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize(
    "head,method", [("VariantBertForMaskedLM", "profile"), ("VariantAlbertForMaskedLM", "closed_form")]
)
def test_export_to_plain_transformers(tmp_path, head, method):
    """A profiled Admin model written as a plain transformers checkpoint: same outputs without remote code."""
    from hf_attn_variants.convert import export_to_transformers

    model = build(head, "dot_product", admin=True)
    with torch.no_grad():  # branches of a trained size: at init (std 0.02) their variance is ~1e-4, omega ~1
        for name, p in model.named_parameters():
            if name.endswith(("dense.weight", "ffn_output.weight")):
                p.mul_(40.0)
    inputs = {k: v for k, v in head_inputs(head).items() if k != "labels"}
    admin_profile(model, inputs) if method == "profile" else admin_closed_form(model)
    assert max(w[0].item() for w in _omegas(model)) > 1.2  # the fold has something to do
    export_to_transformers(model, tmp_path)
    plain = getattr(transformers, head.replace("Variant", "")).from_pretrained(tmp_path).eval()
    assert "auto_map" not in plain.config.to_dict()
    with torch.no_grad():
        plain_logits, logits = plain(**inputs).logits, model(**inputs).logits
    real = inputs["attention_mask"]
    torch.testing.assert_close(at_real_tokens(plain_logits, real), at_real_tokens(logits, real), atol=1e-5, rtol=1e-5)


def test_export_refuses_what_transformers_cannot_represent(tmp_path):
    from hf_attn_variants.convert import export_to_transformers

    with pytest.raises(ValueError, match="Only dot-product"):
        export_to_transformers(build("VariantBertModel", "talking_heads", admin=True), tmp_path)
    twin, _ = single_head_twin(hav.VariantBertConfig(**{**TINY, "intermediate_size": 40}, admin=True))
    with pytest.raises(ValueError, match="deep single-head twin"):
        export_to_transformers(hav.VariantBertModel(twin), tmp_path)
    assert not any(tmp_path.iterdir())


def test_trainer_callback_profiles_before_the_first_step(tmp_path):
    from transformers import Trainer, TrainingArguments

    from hf_attn_variants.admin import AdminInitCallback

    model = build("VariantBertForMaskedLM", "talking_heads", admin=True)
    callback = AdminInitCallback()
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=4,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        learning_rate=1e-3,
    )
    Trainer(model=model, args=args, train_dataset=TinyBatches(), callbacks=[callback]).train()
    assert callback.omegas is not None and callback.omegas[0] == 1.0 and callback.omegas[-1] > 1.0
    assert _omegas(model)[-1].mean().item() == pytest.approx(callback.omegas[-1], rel=0.05)  # trained 2 steps


def test_t5_single_head_twin_runs():
    """T5 is Pre-LN: its deep single-head twin trains as it is (no Admin), encoder and decoder both deepened."""
    config = hav.VariantT5Config(
        vocab_size=99,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        dropout_rate=0.0,
        relative_attention_num_buckets=8,
    )
    twin, counts = single_head_twin(config)
    assert (twin.num_layers, twin.num_decoder_layers, twin.num_heads, twin.d_ff, twin.d_kv) == (8, 8, 1, 16, 8)
    assert 0.8 < counts["ratio"] < 1.05
    model = hav.VariantT5ForConditionalGeneration(twin).train()
    inputs = head_inputs("VariantT5ForConditionalGeneration")
    loss = model(**inputs).loss
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
