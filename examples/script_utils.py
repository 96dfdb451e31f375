"""What the example scripts share at run time, beside them as transformers keeps utils_qa.py beside run_qa.py (a
script of your own takes the package's pieces instead: docs/training.md): the stages (`--do_train`, `--do_eval`,
`--do_predict` as in transformers' examples, read from the parsed arguments), the defaults for this machine, the
training arguments settled before anything runs, the stages run on a `Trainer` (`run_stages`: train, evaluate each
evaluation set, predict each prediction set, then the run's record and model card), and a user error shown as one
line (`run_script`).
"""

import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub
import torch
from transformers.trainer_utils import IntervalStrategy, get_last_checkpoint

import hf_attn_variants
from hf_attn_variants.hub.cards import write_model_card
from hf_attn_variants.hub.publish import push_with_card
from hf_attn_variants.training.data_loading import check_streaming
from hf_attn_variants.training.learning_checks import StopOnNonFinite
from hf_attn_variants.training.run_record import write_training_info

STAGES = ("do_train", "do_eval", "do_predict")  # TrainingArguments' stage flags


def choose_stages(training_args, has_test_data: bool = False, default_eval_strategy: str = "no") -> None:
    """--do_train / --do_eval / --do_predict as in transformers' examples, with one default: a command line that
    names none of them trains and evaluates (and predicts when --test_file is given), so the bare script is the
    offline quick start. A command line that names some runs exactly those; without --do_eval nothing is evaluated,
    also not during training (an --eval_strategy other than the script's `default_eval_strategy` then needs
    --do_eval). The parser tells which were named: `script_defaults()` gives the three flags the default None.
    Then `settle_training_args`."""
    settle_training_args(training_args)
    given = {stage: getattr(training_args, stage) for stage in STAGES}  # None: not on the command line
    if all(value is None for value in given.values()):
        training_args.do_train, training_args.do_eval, training_args.do_predict = True, True, has_test_data
        return
    training_args.do_train, training_args.do_eval, training_args.do_predict = (bool(given[s]) for s in STAGES)
    strategy = IntervalStrategy(training_args.eval_strategy)
    if not training_args.do_eval and strategy != IntervalStrategy.NO:
        if strategy != IntervalStrategy(default_eval_strategy):
            raise ValueError(
                f"--eval_strategy {strategy.value} evaluates during training, and --do_eval is not given: add "
                "--do_eval, or leave out --eval_strategy."
            )
        training_args.eval_strategy = IntervalStrategy.NO
    if has_test_data and not training_args.do_predict:
        raise ValueError("--test_file is given but --do_predict is not: add --do_predict, or leave out --test_file.")
    if not any((training_args.do_train, training_args.do_eval, training_args.do_predict)):
        raise ValueError("--do_train, --do_eval and --do_predict are all false: nothing to do.")


def script_defaults() -> dict:
    """`TrainingArguments` defaults for a script on this machine, set before parsing (so the command line still
    wins): --do_train, --do_eval and --do_predict default to None, so `choose_stages` sees which the command line
    named; with no accelerator (CUDA, MPS, XPU, ...), `use_cpu=True`. Without it transformers sees no device to
    train on: under torchrun or accelerate launch each process trains alone into the same folder instead of
    data-parallel, and --bf16 is refused; with it the processes train data-parallel over gloo and --bf16 runs on the
    CPU."""
    stages = dict.fromkeys(STAGES)
    accelerator = getattr(torch, "accelerator", None)
    available = accelerator.is_available() if hasattr(accelerator, "is_available") else torch.cuda.is_available()
    return stages if available else {**stages, "use_cpu": True}


def check_pretraining_args(training_args, data_args, default_eval_strategy: str) -> None:
    """The stages of a pretraining script (`choose_stages`; pretraining has no prediction step) and its streaming
    flags, checked before anything runs."""
    choose_stages(training_args, default_eval_strategy=default_eval_strategy)
    if training_args.do_predict or data_args.test_file or data_args.max_predict_samples is not None:
        raise ValueError(
            "Pretraining has no prediction step (--do_predict, --test_file, --max_predict_samples): "
            "use --do_train and/or --do_eval."
        )
    check_streaming(training_args, data_args)


def settle_training_args(training_args) -> None:
    """Settings that make a correct run look broken, or do less than asked: pinned memory without CUDA (a warning
    at every evaluation) is turned off, and a NaN training loss is logged as it is (this changes `training_args`);
    warm-up that lasts the whole run gets a warning."""
    if not torch.cuda.is_available():
        training_args.dataloader_pin_memory = False
    training_args.logging_nan_inf_filter = False  # a NaN loss is logged as NaN, and stops the run (StopOnNonFinite)
    warmup = training_args.warmup_steps
    if training_args.max_steps > 0 and warmup >= 1 and warmup >= training_args.max_steps:
        warnings.warn(
            f"--warmup_steps {int(warmup)} reaches --max_steps {training_args.max_steps}: the learning "
            "rate never leaves warm-up. Pass a ratio instead, e.g. --warmup_steps 0.1.",
            stacklevel=2,
        )


def resume_checkpoint(training_args) -> str | None:
    """`--resume_from_checkpoint PATH`, or `last` for the newest checkpoint in --output_dir; None starts afresh."""
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint == "last":
        checkpoint = get_last_checkpoint(training_args.output_dir) if Path(training_args.output_dir).is_dir() else None
        if checkpoint is None:
            raise ValueError(
                f"--resume_from_checkpoint last: {training_args.output_dir} holds no checkpoint-N folder."
            )
    elif checkpoint is not None and not Path(checkpoint).is_dir():
        raise FileNotFoundError(f"--resume_from_checkpoint {checkpoint}: no such folder.")
    return checkpoint


def load_metric(metric_name: str, config_name: str | None = None):
    """An evaluate module (Hub id or local path), loaded once before training so that a wrong name fails early."""
    import evaluate

    try:
        return evaluate.load(metric_name, config_name) if config_name else evaluate.load(metric_name)
    except Exception as error:  # evaluate raises FileNotFoundError, ConnectionError, ValueError, ...
        raise ValueError(
            f"--metric_name {metric_name}: evaluate.load failed ({type(error).__name__}: {error}). "
            "Pass a local metric script path, or an evaluate module id reachable from here."
        ) from error


@dataclass
class Evaluation:
    """One evaluation set: its features, what they are (`split_info`), the metrics' function and the suffix its
    metric names get (run_glue's "_mm" for mnli's mismatched validation; "" for the main one)."""

    dataset: object
    info: dict | None
    compute_metrics: object
    suffix: str = ""


@dataclass
class Prediction:
    """One prediction set: its features, what they are, and `write(PredictionOutput, output_dir) -> metrics` that
    writes the predictions file(s) and returns any metrics to record (e.g. when the test data has labels)."""

    dataset: object
    info: dict
    write: object
    compute_metrics: object = None
    suffix: str = ""


def _size(dataset) -> dict:
    """{"samples": N} for a dataset with a length (a stream has none)."""
    try:
        return {"samples": len(dataset)}
    except TypeError:
        return {}


def run_stages(
    trainer,
    model_args,
    script: str,
    task: str,
    *,
    train_info: dict | None,
    evaluations=(),
    predictions=(),
    train_metrics=None,
    **training,
) -> dict:
    """The stages of a script, as transformers' examples run them: --do_train (train, resuming with
    --resume_from_checkpoint; train metrics with `train_metrics()`'s extra ones, e.g. seconds per step; trainer
    state), --do_eval (each `Evaluation`, its metrics suffixed), --do_predict (each `Prediction`, its files written);
    then `training_info.json` (`training` holds the task's hyperparameters), the model card (README.md) and with
    --push_to_hub the push and the same card on the Hub. The model is saved in every run, so the output folder is
    the checkpoint its card and metrics describe. Returns all metrics."""
    args = trainer.args
    results = {}
    trainer.add_callback(StopOnNonFinite())  # a NaN or infinite loss stops the run before it is recorded
    if args.do_train:
        train_result = trainer.train(resume_from_checkpoint=resume_checkpoint(args))
        metrics = {
            **train_result.metrics,
            **(train_metrics() if train_metrics else {}),
            **{f"train_{k}": v for k, v in _size(trainer.train_dataset).items()},
            # ZeRO-3 leaves each process an empty placeholder per parameter; ds_numel is its real size
            "num_parameters": sum(getattr(p, "ds_numel", p.numel()) for p in trainer.model.parameters()),
        }
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()
        results.update(metrics)
        training["steps"] = trainer.state.global_step
    trainer.save_model()  # every run leaves a complete folder: the model it measured, its code, tokenizer and card
    stages = [("eval", args.do_eval, evaluations), ("predict", args.do_predict, predictions)]
    for stage, chosen, sets in stages:
        if chosen:
            results.update(_measure(trainer, stage, sets))
    if trainer.is_world_process_zero():  # every run records itself and gets its card, an evaluation-only one too
        measured = [
            {"metric_prefix": f"{stage}_", "metric_suffix": s.suffix, **(s.info or {})}
            for stage, chosen, sets in stages
            if chosen
            for s in sets
        ]
        done = [
            name
            for name, flag in (("train", args.do_train), ("eval", args.do_eval), ("predict", args.do_predict))
            if flag
        ]
        write_training_info(
            args.output_dir,
            script,
            task,
            model_args.preset,
            model_args.model_name_or_path,
            (train_info or {}) if args.do_train else {},
            args,
            evaluation=measured,
            stages=done,
            **training,
        )
        if not args.push_to_hub:
            write_model_card(args.output_dir, args.hub_model_id)
    if args.push_to_hub:
        push_with_card(trainer)  # the card, rendered once with the pushed commit pinned
    return results


def _measure(trainer, stage: str, sets) -> dict:
    """Evaluate (`stage` "eval") or predict ("predict") each set, its metrics suffixed, saved as {stage}_results."""
    combined = {}
    for data in sets:
        trainer.compute_metrics = data.compute_metrics
        if stage == "eval":
            metrics = trainer.evaluate(eval_dataset=data.dataset)
        else:
            output = trainer.predict(data.dataset, metric_key_prefix="predict")
            metrics = {**(output.metrics or {}), **(data.write(output, trainer.args.output_dir) or {})}
        metrics.update({f"{stage}_{k}": v for k, v in _size(data.dataset).items()})
        metrics = {f"{k}{data.suffix}": v for k, v in metrics.items()}
        trainer.log_metrics(stage, metrics)
        combined.update(metrics)
    trainer.save_metrics(stage, combined)  # save_metrics also merges every stage into all_results.json
    return combined


# Where an error raised on purpose comes from: the script's folder and this package (a check that says what to
# change), and transformers' argument parsing and validation (a bad flag).
_PACKAGE = str(Path(hf_attn_variants.__file__).resolve().parent)
_ARGUMENT_CODE = ("transformers/training_args.py", "transformers/hf_argparser.py")
_HUB_UNREACHABLE = ("ConnectError", "ConnectTimeout", "ConnectionError", "OfflineModeIsEnabled")


def user_error(error: BaseException, script_folder: str) -> str | None:
    """The one line to print for an expected user error, None for anything else (a bug, which keeps its traceback):
    a ValueError/FileNotFoundError that our checks (the package's, or the scripts' in `script_folder`) or
    transformers' argument validation raised, or a Hub that cannot be reached (`--push_to_hub`, a Hub id
    offline)."""
    chain, cause = [], error
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    if any(type(e).__name__ in _HUB_UNREACHABLE for e in chain):
        reason = f"{type(chain[-1]).__name__}: {chain[-1]}"
        if huggingface_hub.constants.HF_HUB_OFFLINE:  # offline by choice: a Hub name was given all the same
            return (
                f"the run needs the Hugging Face Hub, and HF_HUB_OFFLINE is set ({reason}). Give local paths (a "
                "model folder, --train_file) and leave out --push_to_hub, or unset HF_HUB_OFFLINE."
            )
        return (
            f"the Hugging Face Hub cannot be reached ({reason}). Check the network (or HF_ENDPOINT), or work "
            "offline: HF_HUB_OFFLINE=1 with local paths and without --push_to_hub."
        )
    if isinstance(error, (ValueError, FileNotFoundError)) and error.__traceback__ is not None:
        raised_in = traceback.extract_tb(error.__traceback__)[-1].filename
        if raised_in.startswith((script_folder, _PACKAGE)) or raised_in.endswith(_ARGUMENT_CODE):
            return str(error)
    return None


def run_script(main) -> None:
    """`main()` as a command line runs it: an expected user error (`user_error`; the scripts' own checks are those
    raised in the folder of `main`'s file) ends the run with one line on stderr and exit status 1, not a traceback;
    every other exception is raised as it is."""
    try:
        main()
    except Exception as error:
        message = user_error(error, str(Path(main.__code__.co_filename).resolve().parent))
        if message is None:
            raise
        print(f"{Path(sys.argv[0]).name}: error: {' '.join(message.split())}", file=sys.stderr)  # one line
        raise SystemExit(1) from None
