"""experiments/pretrain_research.py's --t5_adafactor and --dynamic_lr_scale (run_pretraining with the research
cells' optimizers): the optimizer they build on a tiny model (no training): transformers' Adafactor with T5's
settings, the parameter groups the flags say, the parameter-scaled first step, and clear errors for values that would
do nothing or something else; run as a command, it trains through run_pretraining with that optimizer, and
run_pretraining itself no longer takes the flags."""

import dataclasses

import pytest
import torch
from transformers import HfArgumentParser, Trainer, TrainingArguments
from transformers.optimization import Adafactor

import pretrain_research
import run_pretraining
from hf_attn_variants import VariantBertForMaskedLM
from hf_attn_variants.presets import preset_config

DYNAMIC = ["x2l", "m2l", "x2w", "m2w"]


def tiny_model(dynamic=DYNAMIC):
    torch.manual_seed(0)
    config = preset_config(
        "bert-tiny-dot-product",
        attention_type="talking_heads",
        num_attention_heads=4,
        talking_heads_dynamic=dynamic,
        vocab_size=120,
    )
    return VariantBertForMaskedLM(config)


def optimizer_for(model, tmp_path, *flags):
    parser = HfArgumentParser((pretrain_research.ResearchOptimizerArguments, TrainingArguments))
    known = {f.name for f in dataclasses.fields(TrainingArguments)}
    parser.set_defaults(**{k: v for k, v in run_pretraining.DEFAULTS.items() if k in known})  # the script's
    options, training_args = parser.parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--eval_strategy", "no", *flags]
    )
    trainer = Trainer(model=model, args=training_args)
    return pretrain_research.build_optimizer(options, model, training_args, trainer.get_decay_parameter_names(model))


def group_of(optimizer):
    return {id(p): group for group in optimizer.param_groups for p in group["params"]}


def test_no_flag_leaves_the_optimizer_to_trainer(tmp_path):
    assert optimizer_for(tiny_model(), tmp_path) is None


def test_t5_adafactor_settings_and_dynamic_group(tmp_path):
    model = tiny_model()
    optimizer = optimizer_for(
        model,
        tmp_path,
        "--t5_adafactor",
        "--weight_decay",
        "0",
        "--learning_rate",
        "1e-2",
        "--dynamic_lr_scale",
        "0.1",
    )
    assert type(optimizer) is Adafactor
    for group in optimizer.param_groups:  # T5 / mesh-tensorflow: parameter-scaled steps, epsilon2 1e-3, no decay
        assert (group["scale_parameter"], group["relative_step"], group["warmup_init"]) == (True, False, False)
        assert group["eps"] == (1e-30, 1e-3) and group["clip_threshold"] == 1.0 and group["decay_rate"] == -0.8
        assert group["beta1"] is None and group["weight_decay"] == 0.0
    groups = group_of(optimizer)
    trainable = dict(model.named_parameters())
    assert len(groups) == len(trainable)  # every parameter in exactly one group
    dynamic = [n for n in trainable if n.rsplit(".", 1)[-1] in {f"dynamic_{k}" for k in DYNAMIC}]
    assert len(dynamic) == len(DYNAMIC) * model.config.num_hidden_layers
    for name, param in trainable.items():
        assert groups[id(param)]["lr"] == pytest.approx(1e-3 if name in dynamic else 1e-2), name

    # one step: each weight moves by about lr * max(1e-3, RMS(weight)) (the first update has RMS <= 1 after the
    # clip): the dynamic weights (RMS ~1e-3) about 1e-6, a dense weight (RMS ~0.02) about 2e-4
    before = {n: p.detach().clone() for n, p in trainable.items()}
    model(input_ids=torch.randint(5, 120, (2, 12)), labels=torch.randint(5, 120, (2, 12))).loss.backward()
    optimizer.step()
    for name in (dynamic[0], "bert.encoder.layer.0.attention.self.query.weight"):
        rms = lambda t: (t.pow(2).mean() ** 0.5).item()  # noqa: E731
        moved = rms(trainable[name].detach() - before[name])
        bound = groups[id(trainable[name])]["lr"] * max(1e-3, rms(before[name]))
        assert 0.3 * bound < moved <= bound * (1 + 1e-4), (name, moved, bound)


def test_dynamic_scale_with_trainers_own_optimizer(tmp_path):
    model = tiny_model()
    optimizer = optimizer_for(model, tmp_path, "--dynamic_lr_scale", "0.25", "--learning_rate", "1e-3")
    expected_cls, _ = Trainer.get_optimizer_cls_and_kwargs(TrainingArguments(str(tmp_path)), model)
    assert type(optimizer) is expected_cls
    groups = group_of(optimizer)
    for name, param in model.named_parameters():
        lr = groups[id(param)]["lr"]
        assert lr == pytest.approx(2.5e-4 if ".dynamic_" in name else 1e-3), name
        bias_or_norm = name.endswith("bias") or "LayerNorm" in name
        assert groups[id(param)]["weight_decay"] == (0.0 if bias_or_norm else 0.01), name


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--dynamic_lr_scale", "0"], "positive number"),
        (["--dynamic_lr_scale", "-1"], "positive number"),
        (["--dynamic_lr_scale", "nan"], "positive number"),
        (["--t5_adafactor"], "--weight_decay 0"),
    ],
)
def test_bad_values_are_refused(tmp_path, flags, message):
    with pytest.raises(ValueError, match=message):
        optimizer_for(tiny_model(), tmp_path, *flags)


def test_dynamic_scale_without_dynamic_weights_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no dynamic talking-heads weights"):
        optimizer_for(tiny_model(dynamic=[]), tmp_path, "--dynamic_lr_scale", "0.5")


def test_the_command_trains_with_t5s_adafactor_and_run_pretraining_refuses_the_flags(tmp_path):
    """As the runner launches it (a fresh interpreter, from the repository root): two steps under T5's Adafactor
    through run_pretraining, whose own parser does not know the research flags."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    common = ["--preset", "bert-tiny-talking-heads", "--max_steps", "2", "--per_device_train_batch_size", "4"]
    common += ["--eval_strategy", "no", "--save_strategy", "no", "--max_seq_length", "32", "--do_train"]
    research = ["--t5_adafactor", "--weight_decay", "0", "--learning_rate", "1e-2", "--lr_scheduler_type", "constant"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}

    def run(script, *flags):
        command = [sys.executable, script, *common, *flags, "--output_dir", str(tmp_path / Path(script).stem)]
        return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)

    trained = run("experiments/pretrain_research.py", *research)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert (tmp_path / "pretrain_research" / "model.safetensors").is_file()
    refused = run("examples/run_pretraining.py", *research)
    assert refused.returncode != 0 and "--t5_adafactor" in refused.stderr
