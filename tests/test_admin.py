"""Admin residuals and deep single-head twins (issue 8, first part): BERT and ALBERT are Post-LN, T5 refuses."""

import math

import pytest
import torch
import transformers

import hf_attn_variants as hav
from conftest import SAME_WEIGHTS, TINY, build, head_inputs
from hf_attn_variants.admin import admin_closed_form, admin_profile, single_head_twin
from test_remote_code import _run_isolated, _save


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
        torch.testing.assert_close(ours(**inputs).logits, ref(**inputs).logits, atol=1e-6, rtol=1e-6)


def test_profiling_matches_a_hand_computation():
    """omega_1 = 1, omega_{i+1}^2 = omega_i^2 + Var[f_i(x_i)], the variances taken independently here with torch
    hooks on each branch's output projection (in eval mode the branch is that projection's output)."""
    model = build("VariantBertForMaskedLM", "dot_product", admin=True, hidden_dropout_prob=0.1)
    inputs = {k: v for k, v in head_inputs("VariantBertForMaskedLM").items() if k != "labels"}
    branches = []
    hooks = []
    for layer in model.bert.encoder.layer:
        for dense in (layer.attention.output.dense, layer.output.dense):
            hooks.append(dense.register_forward_hook(lambda m, i, out: branches.append(out.var().item())))
    model.eval()
    with torch.no_grad():
        model(**inputs)
    for hook in hooks:
        hook.remove()
    expected, omega_sq = [], 1.0
    for variance in branches:
        expected.append(math.sqrt(omega_sq))
        omega_sq += variance
    omegas = admin_profile(model, inputs)
    assert omegas == pytest.approx(expected, rel=1e-6)
    assert omegas[0] == 1.0 and all(a < b for a, b in zip(omegas, omegas[1:]))
    assert [w[0].item() for w in _omegas(model)] == pytest.approx(expected, rel=1e-6)
    assert admin_profile(model, inputs) == omegas  # deterministic: profiling resets omega to 1 first
    assert model.training is False


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
    job, expected = _save(tmp_path, "VariantBertForSequenceClassification", "talking_heads", model=model)
    _run_isolated(tmp_path, [job])
    got = torch.load(job["out"])
    torch.testing.assert_close(got["logits"], expected["logits"], atol=1e-6, rtol=1e-6)


def test_shared_albert_layers_take_the_closed_form():
    model = build("VariantAlbertForMaskedLM", "dot_product", admin=True)
    inputs = {k: v for k, v in head_inputs("VariantAlbertForMaskedLM").items() if k != "labels"}
    with pytest.raises(ValueError, match="use `admin_closed_form"):
        admin_profile(model, inputs)
    omega = admin_closed_form(model)
    n = 2 * model.config.num_hidden_layers * model.config.inner_group_num
    assert omega == pytest.approx(math.sqrt((n + 1) / math.log(n + 1) - 1))
    assert all(torch.allclose(w, torch.full_like(w, omega)) for w in _omegas(model))


def test_admin_needs_admin_residuals_and_t5_refuses():
    with pytest.raises(ValueError, match="build it with `admin=True`"):
        admin_closed_form(build("VariantBertModel", "dot_product"))
    with pytest.raises(ValueError, match="T5 is Pre-LN"):
        build("VariantT5Model", "dot_product", admin=True)


@pytest.mark.parametrize("layers,heads,hidden,ffn", [(12, 12, 768, 3072), (24, 16, 1024, 4096)])
def test_single_head_twin_of_bert_base_and_large(layers, heads, hidden, ffn):
    config = hav.VariantBertConfig(num_hidden_layers=layers, num_attention_heads=heads, hidden_size=hidden,
                                   intermediate_size=ffn)
    twin, counts = single_head_twin(config)
    assert (twin.num_hidden_layers, twin.num_attention_heads) == (layers * heads, 1)
    assert twin.attention_head_size == hidden // heads and twin.intermediate_size == ffn // heads
    assert abs(counts["ratio"] - 1) < 0.05, counts
    with torch.device("meta"):  # the same architecture in transformers' own BertModel has the same size
        reference = transformers.BertModel(transformers.BertConfig(
            num_hidden_layers=layers, num_attention_heads=heads, hidden_size=hidden, intermediate_size=ffn))
    assert counts["multi_head"] == sum(p.numel() for p in reference.parameters())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("admin", [False, True])
def test_48_layer_single_head_trains_without_nan(dtype, admin):
    config = hav.VariantBertConfig(**{**TINY, "num_hidden_layers": 4, "num_attention_heads": 12, "hidden_size": 48,
                                      "intermediate_size": 96}, admin=admin)
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


@pytest.mark.parametrize("head,method", [("VariantBertForMaskedLM", "profile"),
                                         ("VariantAlbertForMaskedLM", "closed_form")])
def test_export_to_plain_transformers(tmp_path, head, method):
    """A profiled Admin model written as a plain transformers checkpoint: same outputs without remote code."""
    from hf_attn_variants.admin import export_to_transformers

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
        torch.testing.assert_close(plain(**inputs).logits, model(**inputs).logits, atol=1e-5, rtol=1e-5)


def test_export_refuses_what_transformers_cannot_represent(tmp_path):
    from hf_attn_variants.admin import export_to_transformers

    with pytest.raises(ValueError, match="Only dot-product"):
        export_to_transformers(build("VariantBertModel", "talking_heads", admin=True), tmp_path)
    twin, _ = single_head_twin(hav.VariantBertConfig(**{**TINY, "intermediate_size": 40}, admin=True))
    with pytest.raises(ValueError, match="deep single-head twin"):
        export_to_transformers(hav.VariantBertModel(twin), tmp_path)
    assert not any(tmp_path.iterdir())


def test_trainer_callback_profiles_before_the_first_step(tmp_path):
    from transformers import Trainer, TrainingArguments

    from hf_attn_variants.admin import AdminProfilingCallback
    from test_trainer import _Batches

    model = build("VariantBertForMaskedLM", "talking_heads", admin=True)
    callback = AdminProfilingCallback()
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, report_to=[],
                             save_strategy="no", use_cpu=True, disable_tqdm=True, learning_rate=1e-3)
    Trainer(model=model, args=args, train_dataset=_Batches(), callbacks=[callback]).train()
    assert callback.omegas is not None and callback.omegas[0] == 1.0 and callback.omegas[-1] > 1.0
    assert _omegas(model)[-1].mean().item() == pytest.approx(callback.omegas[-1], rel=0.05)  # trained 2 steps


def test_t5_single_head_twin_runs():
    """T5 is Pre-LN: its deep single-head twin trains as it is (no Admin), encoder and decoder both deepened."""
    config = hav.VariantT5Config(vocab_size=99, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                 dropout_rate=0.0, relative_attention_num_buckets=8)
    twin, counts = single_head_twin(config)
    assert (twin.num_layers, twin.num_decoder_layers, twin.num_heads, twin.d_ff, twin.d_kv) == (8, 8, 1, 16, 8)
    assert 0.8 < counts["ratio"] < 1.05
    model = hav.VariantT5ForConditionalGeneration(twin).train()
    inputs = head_inputs("VariantT5ForConditionalGeneration")
    loss = model(**inputs).loss
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
