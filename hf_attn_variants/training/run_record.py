"""A training run's record, `training_info.json`: what the run trained, on which data, with which settings, and
where each recorded metric comes from. Written by the example scripts (`write_training_info`) and by scripts of your
own; the model card (`hf_attn_variants.hub.cards`) is rendered from it.
"""

import json
from pathlib import Path

from huggingface_hub.utils import HFValidationError, validate_repo_id

from .output_folders import script_name


def is_hub_id(name: str | None) -> bool:
    """Whether `name` names a Hub repository: a valid repo id that is not a local file or folder (a dataset folder,
    a checkpoint path). The one test of it that the scripts and the cards use."""
    if not name or Path(name).exists():
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False  # e.g. an absolute local path
    return True


def write_training_info(
    output_dir,
    script: str,
    task: str,
    preset: str | None,
    base_model: str | None,
    dataset: dict,
    training_args,
    evaluation: list[dict] | None = None,
    stages: list[str] | None = None,
    **training,
) -> None:
    """`training_info.json`, read by `hf_attn_variants.hub.publish` for the model card. `dataset` is the training data;
    `evaluation` says which data each recorded metric comes from: one entry per data set, the metrics named
    `metric_prefix` + name + `metric_suffix` (e.g. eval_accuracy_mm), with the data's name, source, split and, for
    a Hub dataset, `hub_id` and config. `stages`: what the run did ("train", "eval", "predict"), when not all
    of a training run."""
    info = {
        "script": script_name(script),
        "task": task,
        "preset": None if base_model else preset,
        "base_model": base_model if is_hub_id(base_model) else None,  # the card's base_model: a Hub id or nothing
        "started_from": base_model,
        "dataset": dataset,
        "training": {
            "max_steps": training_args.max_steps,
            "learning_rate": training_args.learning_rate,
            "per_device_train_batch_size": training_args.per_device_train_batch_size,
            "seed": training_args.seed,
            "world_size": training_args.world_size,
            **training,
        },
    }
    if evaluation is not None:
        info["evaluation"] = evaluation
    if stages is not None:
        info["stages"] = stages
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    (Path(output_dir) / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")


__all__ = ["is_hub_id", "write_training_info"]
