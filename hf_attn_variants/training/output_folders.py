"""Where a run of a training script writes (the example scripts'; package-only, for scripts of your own too): the
default `--output_dir`, named after what the run trains, and the check that a run never writes over the checkpoint
of another model or config (`--overwrite_output_dir` lifts it).

The default is `outputs/{task}-{model}` (`outputs/{model}` for pretraining), `{model}` being
- with --preset: the preset's family and size and the attention the built model has, which is the preset's own name
  (`bert-mini-talking-heads`) unless --attention_type or --config_overrides change the attention (a T5 that chooses
  per place names each place it sets: `t5-tiny-dot-product-encoder-synthesizer-dense-decoder-talking-heads`);
- with --model_name_or_path: the checkpoint's folder or Hub name and the attention the run gives it
  (`bert-base-uncased-talking-heads`; not repeated where the name already ends with it), plus `-continued` where that
  would be the folder the run starts from.
"""

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from transformers import AutoConfig
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..attention_tools import attention_setups, identity_fields, tools_of
from ..models.configuration_variant_attention import PLACES
from ..presets import PRESETS

logger = logging.getLogger(__name__)

OUTPUTS = "outputs"
# Each script's `output_dir` default: `settle_output_dir` replaces it with the folder named after the run.
NAMED_AFTER_THE_RUN = f"{OUTPUTS}/<named after the run>"


@dataclass
class OutputArguments:
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Write into --output_dir even when it holds a checkpoint (config.json, or checkpoint-N folders) of "
            "another model or config, or one that another script or preset made; without it such a run stops "
            "before training. Files of the earlier run that this one does not write stay (e.g. its "
            "checkpoint-N folders). (transformers 5 removed its own flag of this name.)"
        },
    )


def output_folder(*parts: str | None) -> str:
    """`outputs/` + the parts that are given, joined by "-": `output_folder("qa", "bert-tiny-talking-heads")`."""
    return str(Path(OUTPUTS) / "-".join(part for part in parts if part))


def attention_name(config: dict) -> str:
    """The attention part of a folder's name: the card sections of the attention a `config.json` (dict) has
    (`attention_setups`), and where it chooses per place (T5's `encoder_attention_type`, ...) each place it sets,
    named with its type's section, so two runs that differ only in which place has which attention get two
    folders ("dot-product-encoder-synthesizer-dense-decoder-talking-heads")."""
    chosen = [(place, config.get(f"{place}_attention_type")) for place in PLACES]
    chosen = [(place, name) for place, name in chosen if name]
    if not chosen:
        return "-".join(attention_setups(config))
    base = {**config, **{f"{place}_attention_type": None for place in PLACES}}
    parts = attention_setups(base)
    for place, name in chosen:
        parts += [place, tools_of(name).card_section({**base, "attention_type": name})]
    return "-".join(parts)


def model_name(model_args, config) -> str:
    """What the run trains, for its folder's name: see the module docstring."""
    attention = attention_name(config.to_dict())
    if not model_args.model_name_or_path:
        preset = PRESETS[model_args.preset]
        return f"{preset.family}-{preset.size}-{attention}"
    stem = Path(model_args.model_name_or_path.rstrip("/")).name  # a folder's name, or a Hub id's
    return stem if stem == attention or stem.endswith(f"-{attention}") else f"{stem}-{attention}"


def default_output_dir(model_args, config, task: str | None = None) -> str:
    """`outputs/{task}-{model}` (see the module docstring), never the folder the run starts from."""
    folder = output_folder(task, model_name(model_args, config))
    source = model_args.model_name_or_path
    if source and Path(source).is_dir() and Path(source).resolve() == Path(folder).resolve():
        folder += "-continued"
    return folder


def _full_config(config) -> dict:
    """A config (object, or a `config.json` dict) as a dict holding every field, at its default where
    `save_pretrained` left it out; a dict of a model type transformers does not know stays as it is."""
    if isinstance(config, dict):
        fields = {key: value for key, value in config.items() if key != "model_type"}
        try:
            config = AutoConfig.for_model(config.get("model_type"), **fields)
        except ValueError:  # an unknown model type
            return config
    return json.loads(config.to_json_string(use_diff=False))


def script_name(script: str) -> str:
    """How `training_info.json` names the script that ran: its folder and file (`__file__` or a recorded name)."""
    return "/".join(Path(script).parts[-2:])


def _made_by(script: str, preset: str | None, started_from: str | None) -> dict:
    """What `training_info.json` says made a checkpoint: the script and the preset or checkpoint it started from."""
    return {
        "script": script_name(script),
        "preset": None if started_from else preset,
        "started_from": os.path.normpath(started_from) if started_from else None,
    }


def _describe(config: dict, made: dict | None) -> str:
    """E.g. "VariantBertForMaskedLM (variant_bert, talking-heads; <scripts folder>/run_pretraining.py, preset ...)"."""
    what = (
        f"{', '.join(config.get('architectures') or ['a model'])} ({config.get('model_type')}, "
        f"{'-'.join(attention_setups(config))}"
    )
    if made:
        origin = f"preset {made['preset']}" if made["preset"] else f"from {made['started_from']}"
        what += f"; {made['script']}, {origin}"
    return what + ")"


def check_output_dir(output_dir: str, model, made: dict, default: str) -> None:
    """A ValueError, before any training, where `output_dir` holds a checkpoint (its config.json, or a checkpoint-N
    folder's) of another model or config than `model` (`identity_fields`), or one that `training_info.json` says
    another script, preset or checkpoint made (`made`, as `_made_by` gives it). A folder without a checkpoint is
    fine."""
    folder = Path(output_dir)
    run = {**_full_config(model.config), "architectures": [type(model).__name__]}
    info_path = folder / "training_info.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else None
    saved_made = _made_by(info["script"], info.get("preset"), info.get("started_from")) if info else None
    configs = [folder / "config.json", *sorted(folder.glob(f"{PREFIX_CHECKPOINT_DIR}-*/config.json"))]
    for path in (p for p in configs if p.is_file()):
        saved = _full_config(json.loads(path.read_text()))
        differ = [key for key in identity_fields(run, saved) if run.get(key) != saved.get(key)]
        differ += [key for key in made if saved_made and saved_made[key] != made[key]]
        if differ:
            found = "" if path.parent == folder else f" in {path.parent.name}"
            keep = f"leave --output_dir out (for {default})" if default != output_dir else "pass another --output_dir"
            raise ValueError(
                f"--output_dir {output_dir} holds a checkpoint{found} of another model or run: "
                f"{_describe(saved, saved_made)}; this run would write {_describe(run, made)}. They differ in "
                f"{', '.join(differ)}. To keep both, {keep}; to write there anyway, pass --overwrite_output_dir."
            )


def settle_output_dir(training_args, output_args, model_args, model, script: str, task: str | None = None) -> None:
    """Every script's one call, once the model is built and before the Trainer: --output_dir, left out, becomes the
    folder named after the run (`default_output_dir`, `task` naming a fine-tuning task); then, without
    --overwrite_output_dir, `check_output_dir` (the same run again in its folder, e.g. with --resume_from_checkpoint
    last, passes)."""
    default = default_output_dir(model_args, model.config, task)
    if training_args.output_dir == NAMED_AFTER_THE_RUN:
        training_args.output_dir = default
        logger.info("--output_dir %s (named after the run)", default)
    if not output_args.overwrite_output_dir:
        made = _made_by(script, model_args.preset, model_args.model_name_or_path)
        check_output_dir(training_args.output_dir, model, made, default)
