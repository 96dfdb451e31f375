"""What a checkpoint's model card says, rendered from the folder's training record. Package-only (a published
checkpoint does not need it).

    from hf_attn_variants.hub.cards import render_card

    render_card("out/bert-mini-talking-heads", "me/bert-mini-talking-heads", None).save("README.md")

The card's numbers come only from the folder's `all_results.json` (or `eval_results.json` / `train_results.json`),
written by `Trainer.save_metrics`, and its `training_info.json`; its quick start pins the commit that holds the
model's code once the folder is on the Hub (`hf_attn_variants.hub.publish` uploads it).

The template and the per-attention text live in `hf_attn_variants/hub/model_cards/` (package data: shipped in the wheel,
read from the source tree in an editable install).
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..attention_tools import STRUCTURE_FIELDS, attention_setups, attention_types_in, tools_of, variant_fields
from ..convert import TOKENIZER_FILES, checkpoint_shapes
from ..families import FAMILIES, family_of
from ..training.run_record import is_hub_id

CARD_DIR = Path(__file__).parent / "model_cards"
# architecture suffix -> Hub pipeline tag (None: no pipeline fits)
PIPELINE_TAGS = {
    "ForMaskedLM": "fill-mask",
    "ForPreTraining": "fill-mask",
    "LMHeadModel": "text-generation",
    "ForSequenceClassification": "text-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
    "ForConditionalGeneration": "text2text-generation",
    "ForMultipleChoice": None,
    "ForNextSentencePrediction": None,
    "EncoderModel": "feature-extraction",
    "Model": "feature-extraction",
}
# pipeline tag -> how the card's quick start uses the model with transformers v5 (which has no question-answering
# or text2text-generation pipeline): ("pipeline", example input) or ("generate" / "span", input)
USAGE = {
    "fill-mask": ("pipeline", None),
    "text-classification": ("pipeline", '"A gem of a film."'),
    "token-classification": ("pipeline", '"Ambrose Bierce wrote it in San Francisco."'),
    "feature-extraction": ("pipeline", '"A sentence to embed."'),
    "text-generation": ("pipeline", '"The dictionary defines"'),
    "question-answering": ("span", None),
    "text2text-generation": ("generate", "sst2 sentence: a gem of a film ."),
}
# Trainer.save_metrics keys that describe the run's speed, not the model's quality
NOT_QUALITY = ("_runtime", "_samples_per_second", "_steps_per_second", "_flos", "epoch")


def _load_yaml(name: str) -> dict:
    return yaml.safe_load((CARD_DIR / name).read_text())


def _registered_text(entry, section: str) -> dict:
    """Card text made from an attention type's registration (its name, `help` and `paper`), for a section that
    `model_cards/attention.yaml` does not have."""
    words = entry.name.replace("_", " ")
    paper = tools_of(entry.name).paper
    paper = f" It comes from {paper}." if paper else ""
    return dict(
        title=words if words.endswith("attention") else f"{words} attention",
        tags=[section],
        papers=[],
        description=f"{entry.help[0].upper()}{entry.help[1:]}.{paper}",
        limitations=[],
    )


def attention_texts(config: dict) -> list[dict]:
    """The card text of each of a checkpoint's `attention_setups`: its section of `model_cards/attention.yaml`, or,
    for an attention type without one, the text its registration gives, so a new type needs no card text of its
    own."""
    texts = _load_yaml("attention.yaml")
    made = {tools_of(entry.name).card_section(config): entry for entry in attention_types_in(config)}
    return [texts[key] if key in texts else _registered_text(made[key], key) for key in attention_setups(config)]


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def read_run(folder) -> tuple[dict, dict, str | None]:
    """(training_info, metrics, the metrics' file name) of a checkpoint folder; empty when not recorded."""
    folder = Path(folder)
    for name in ("all_results.json", "eval_results.json"):
        if (folder / name).is_file():
            metrics = _read_json(folder / name)
            if name == "eval_results.json":
                metrics = {**_read_json(folder / "train_results.json"), **metrics}
            return _read_json(folder / "training_info.json"), metrics, name
    metrics = _read_json(folder / "train_results.json")
    return _read_json(folder / "training_info.json"), metrics, "train_results.json" if metrics else None


def _quality_metrics(metrics: dict, info: dict | None = None) -> list[tuple[str, str, float, dict | None]]:
    """(name, metric, value, data) of each quality metric: eval_* (and predict_* with a record of its data) and
    perplexity; `metric` is the name without prefix and suffix, `name` keeps the suffix (and predict_), e.g.
    ("accuracy_mm", "accuracy", 0.8, {...}). `data` is the entry of training_info.json's
    `evaluation` the metric was measured on (matched by `metric_prefix` and the longest `metric_suffix`), None when
    the run did not record it."""
    records = sorted((info or {}).get("evaluation") or [], key=lambda r: -len(r.get("metric_suffix", "")))
    out = []
    for key, value in metrics.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        lookup = "eval_perplexity" if key == "perplexity" else key
        record = next(
            (
                r
                for r in records
                if lookup.startswith(r["metric_prefix"]) and lookup.endswith(r.get("metric_suffix", ""))
            ),
            None,
        )
        if record is not None:
            prefix, suffix = record["metric_prefix"], record.get("metric_suffix", "")
        elif lookup.startswith("eval_"):
            prefix, suffix = "eval_", ""
        else:
            continue
        base = lookup[len(prefix) : len(lookup) - len(suffix)]
        if ("_" + base).endswith(NOT_QUALITY + ("_samples",)):
            continue
        out.append((("predict_" if prefix == "predict_" else "") + base + suffix, base, value, record))
    return out


def _data_text(record: dict | None) -> str:
    if record is None:
        return "not recorded"
    split = f", split {record['split']}" if record.get("split") else ""
    return f"{record.get('name', 'unnamed data')}{split}"


def _hub_datasets(info: dict) -> list[str]:
    """The Hub dataset ids the run trained and evaluated on (local files and the embedded data are not Hub ids)."""
    records = [info.get("dataset") or {}, *(info.get("evaluation") or [])]
    return list(dict.fromkeys(r["hub_id"] for r in records if r.get("hub_id") and is_hub_id(r["hub_id"])))


def _table(rows, header=("", "")) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in rows]
    return "\n".join(lines)


def _number(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# What each metric a run records means, said once in the card below the table that shows it (keys without the
# eval_/predict_/train_ prefix; a key ending in one of RUNTIME_UNITS gets its unit in the name).
METRIC_TEXT = {
    "loss": "the model's own loss on the data (for NSP/SOP pretraining: masked-LM loss plus the sentence task's)",
    "mlm_loss": "masked-LM cross-entropy per predicted token (nats)",
    "perplexity": "exp(mlm_loss) for masked LM, exp(target_loss) for span corruption",
    "sentence_accuracy": "accuracy of the next-sentence (NSP) or sentence-order (SOP) prediction",
    "target_loss": "cross-entropy per target token of T5's span corruption (nats)",
    "target_token_accuracy": "share of target tokens predicted exactly (teacher-forced)",
    "accuracy": "share of examples predicted exactly",
    "combined_score": "the mean of the task's other metrics, as run_glue reports it",
    "exact_match": "SQuAD exact match of the answer text (percent)",
    "f1": "F1 (SQuAD: token overlap of the answer text, percent; classification: of class 1, or macro-averaged)",
}
RUNTIME_UNITS = {"_runtime": " (s)", "_samples_per_second": "", "_steps_per_second": ""}


def _metric_name(key: str) -> str:
    return key + next((unit for end, unit in RUNTIME_UNITS.items() if key.endswith(end)), "")


def _trained(info: dict) -> bool:
    return "train" in info.get("stages", ["train"])


def _training_text(info: dict, metrics: dict, source: str | None) -> str:
    if not info:
        return (
            "No training record (`training_info.json`) was published with this checkpoint, so its training data "
            "and procedure are not documented here."
        )
    where = f"`{info['script']}`" if info.get("script") else "a training script"
    stages = info.get("stages", ["train"])
    start = info.get("started_from") or info.get("base_model")
    origin = (f", preset `{info['preset']}`" if info.get("preset") else "") + (
        f", starting from `{start}`" if start else ""
    )
    if not _trained(info):
        done = " and ".join({"eval": "evaluated", "predict": "predicted"}[stage] for stage in stages)
        return (
            f"Not trained by this run: {done} with {where} for {info.get('task', 'an unrecorded task')}{origin}. "
            "Its training is not documented here."
        )
    parts = [f"Trained with {where} for {info.get('task', 'an unrecorded task')}{origin}."]
    dataset = info.get("dataset") or {}
    if dataset:
        parts.append("**Training data:** " + "; ".join(f"{k}: {v}" for k, v in dataset.items() if v) + ".")
    if info.get("training"):
        parts.append(_table(info["training"].items(), ("hyperparameter", "value")))
    train = [(_metric_name(k), _number(v)) for k, v in metrics.items() if k.startswith("train_") or k == "epoch"]
    if train:
        parts.append(
            f"Recorded by the run on its training data (`{source}`):\n\n" + _table(train, ("training metric", "value"))
        )
    return "\n\n".join(parts)


def _evaluation_text(quality: list, source: str | None, info: dict) -> str:
    if not quality:
        return "No evaluation metrics were recorded for this checkpoint."
    rows = "\n".join(f"| {name} | {_number(value)} | {_data_text(record)} |" for name, _, value, record in quality)
    run = "training run" if _trained(info) else "run"
    meanings = [
        f"`{metric}`: {METRIC_TEXT[metric]}"
        for metric in dict.fromkeys(m for _, m, _, _ in quality)
        if metric in METRIC_TEXT
    ]
    return (
        f"Measured by the {run} and copied from its `{source}`, each on the data named beside it:\n\n"
        "| metric | value | measured on |\n|---|---|---|\n"
        + rows
        + ("\n\n" + "; ".join(meanings) + "." if meanings else "")
        + ("\n\n" + info["evaluation_note"] if info.get("evaluation_note") else "")
    )


def parameter_total(folder) -> int:
    """The number of weights in a checkpoint folder's safetensors files (tied weights stored once)."""
    total = 0
    for shape in checkpoint_shapes(Path(folder)).values():
        count = 1
        for size in shape:
            count *= size
        total += count
    return total


def _parameter_text(total: int) -> str:
    return f"{total / 1e6:.1f}M" if total >= 1e5 else f"{total / 1e3:.1f}k"


@dataclass(frozen=True)
class CardRecord:
    """What a model card is rendered from: the checkpoint's `config` (config.json, as a dict), its training record
    `info` (training_info.json), its `metrics` and the file they were read from (`source`), its parameter count, its
    tokenizer's mask token (None: no tokenizer files), and optionally `reproduce`: how to make the weights again,
    for a checkpoint whose weights are kept nowhere (`command`, `git_commit`, `files` {file: sha256}, `hardware`,
    `minutes`, `run`, `rerun`), and `example`: the quick start's input, a sentence of the training text with the
    masked words in braces (`example_input`; None: a generic one). `read_card_record` reads it from a checkpoint
    folder."""

    config: dict
    info: dict
    metrics: dict
    source: str | None
    num_parameters: int
    mask_token: str | None
    reproduce: dict | None = None
    example: str | None = None


def read_card_record(folder) -> CardRecord:
    """The `CardRecord` of a checkpoint folder: config.json, its run's records (`read_run`), the weights' parameter
    count and the tokenizer's mask token ("[MASK]" when the tokenizer files do not name one)."""
    folder = Path(folder)
    info, metrics, source = read_run(folder)
    mask_token = None
    if any((folder / name).is_file() for name in TOKENIZER_FILES):
        mask = _read_json(folder / "tokenizer_config.json").get("mask_token")
        mask_token = mask if isinstance(mask, str) and mask else "[MASK]"
    return CardRecord(_read_json(folder / "config.json"), info, metrics, source, parameter_total(folder), mask_token)


def render_card(
    folder, repo_id: str, revision: str | None, *, license: str = "apache-2.0", base_model: str | None = None
) -> ModelCard:
    """The model card of the checkpoint in `folder`, as it will read on the Hub at `repo_id`.

    Args:
        folder: a checkpoint folder of this package (config.json with `auto_map`, weights, code files); its
            `training_info.json`, `all_results.json` / `eval_results.json` / `train_results.json` are used when
            present.
        repo_id: the Hub repository ("user/name").
        revision: the commit the quick start pins (the one that holds the code; `publish` passes it); None for a
            card written before the folder is pushed (the quick start then loads `repo_id` unpinned).
        license: the card's license id.
        base_model: the Hub id of the model this one started from; defaults to training_info.json's `base_model`.

    The YAML metadata carries library_name, license, tags, datasets (the Hub dataset ids the run used; never local
    files), base_model, pipeline_tag and a model-index of the evaluation metrics measured on a Hub dataset (each
    with its id, config and split). The text names the data each number comes from.
    """
    return render_record(
        read_card_record(folder), repo_id, revision, license=license, base_model=base_model, where=str(folder)
    )


def render_record(
    record: CardRecord,
    repo_id: str,
    revision: str | None,
    *,
    license: str = "apache-2.0",
    base_model: str | None = None,
    where: str = "the record",
) -> ModelCard:
    """The model card of the checkpoint a `CardRecord` describes (`render_card` reads one from a folder; the
    project's release cards are made from the records of runs whose weights are not kept). With
    `record.reproduce`, the card gains a section saying how to make the weights again."""
    config, info, metrics, source = record.config, record.info, record.metrics, record.source
    if config.get("model_type") not in [f.model_type for f in FAMILIES.values()]:
        raise ValueError(f"{where} is not a hf-attn-variants checkpoint (model_type {config.get('model_type')!r}).")
    architecture, auto_class = _architecture_and_auto_class(config, where)
    quality = _quality_metrics(metrics, info)
    suffix = next(s for s in PIPELINE_TAGS if architecture.endswith(s))
    task = info.get("task") or PIPELINE_TAGS[suffix]
    base_model = _base_model(base_model, info)
    model_name = repo_id.split("/")[-1]

    has_tokenizer = record.mask_token is not None
    usage, example_input = USAGE.get(PIPELINE_TAGS[suffix], (None, None))
    if record.example and has_tokenizer:
        example_input = example_input_of(record.example, PIPELINE_TAGS[suffix], record.mask_token)
    elif PIPELINE_TAGS[suffix] == "fill-mask" and has_tokenizer:
        example_input = json.dumps(f"The dictionary defines a cynic as a {record.mask_token}.")
    papers = _load_yaml("papers.yaml")
    setups = attention_texts(config)
    own = [key for setup in setups for key in setup["papers"]]
    family = family_of(config).display
    eval_results = _eval_results(quality, task)
    card_data = ModelCardData(
        library_name="transformers",
        license=license,
        tags=["hf-attn-variants", "custom_code", family.lower(), *[t for s in setups for t in s["tags"]]],
        datasets=_hub_datasets(info) or None,
        base_model=base_model,
        pipeline_tag=PIPELINE_TAGS[suffix],
        model_name=model_name if eval_results else None,
        eval_results=eval_results or None,
    )
    summary = (
        f"A {family} model (`{architecture}`) with {' and '.join(s['title'] for s in setups)}, "
        f"{_parameter_text(record.num_parameters)} parameters, built with hf-attn-variants"
        + (f" from the preset `{info['preset']}`{_overrides_text(info)}" if info.get("preset") else "")
        + "."
    )
    return ModelCard.from_template(
        card_data,
        template_path=str(CARD_DIR / "template.md"),
        model_name=model_name,
        summary=summary,
        setups=[{**s, "papers": [papers[k] for k in s["papers"]]} for s in setups],
        architecture=[
            (k, json.dumps(config[k])) for k in STRUCTURE_FIELDS + variant_fields(config) if config.get(k) is not None
        ],
        auto_class=auto_class,
        repo_id=repo_id,
        revision=revision,
        has_tokenizer=has_tokenizer,
        usage=usage,
        pipeline_task=PIPELINE_TAGS[suffix],
        example_input=example_input,
        training=_training_text(info, metrics, source),
        evaluation=_evaluation_text(quality, source, info),
        limitations=_limitations(setups, info),
        reproduce=_reproduce_text(record.reproduce, info) if record.reproduce else None,
        own_papers=[papers[k] for k in dict.fromkeys(own)],
        other_papers=[p for k, p in papers.items() if k not in own],
    )


def _overrides_text(info: dict) -> str:
    """What the card's summary says of the config overrides the run gave its preset (nothing where the run's record
    does not keep them)."""
    if "overrides" not in info:
        return ""
    if not info["overrides"]:
        return " as it is (no config overrides)"
    return " with " + ", ".join(
        f"{key}={value if isinstance(value, str) else json.dumps(value)}" for key, value in info["overrides"].items()
    )


MASKED = re.compile(r"\{([^{}]+)\}")


def example_input_of(example: str, pipeline_task: str, mask_token: str) -> str:
    """The quick start's input made from `example`, a sentence of the training text whose masked words stand in
    braces: for fill-mask (one pair of braces) the sentence with the mask token, as a Python string literal; for
    text-to-text generation (T5's span corruption) the sentence with T5's sentinels, <extra_id_0>, <extra_id_1>, ...
    in order."""
    if pipeline_task == "fill-mask":
        if len(MASKED.findall(example)) != 1:
            raise ValueError(f"A fill-mask example masks one word, in braces: {example!r}.")
        return json.dumps(MASKED.sub(mask_token, example))
    if pipeline_task == "text2text-generation" and '"' not in example:
        sentinels = iter(range(100))
        return MASKED.sub(lambda _: f"<extra_id_{next(sentinels)}>", example)
    raise ValueError(f"No usage example of {pipeline_task!r} is made from a sentence ({example!r}).")


def _architecture_and_auto_class(config: dict, where: str) -> tuple[str, str]:
    """The checkpoint's architecture and the Auto class its auto_map loads it with."""
    architecture = (config.get("architectures") or [family_of(config).base_model])[0]
    auto_class = next(
        (auto for auto, target in config.get("auto_map", {}).items() if target.split(".")[-1] == architecture), None
    )
    if auto_class is None:
        raise ValueError(
            f"{where}/config.json's auto_map names no Auto class for {architecture}: re-save the model "
            "with save_pretrained from this package."
        )
    return architecture, auto_class


def _base_model(base_model: str | None, info: dict) -> str | None:
    """The card's base_model: the one passed (a Hub id), else training_info.json's when it is a Hub id."""
    if base_model is not None and not is_hub_id(base_model):
        raise ValueError(
            f"base_model {base_model!r} is not a Hub repository id (a local folder never is): pass the "
            "Hub id the model started from, or none."
        )
    recorded = info.get("base_model")  # a record written before base_model held Hub ids only may hold a path
    return base_model or (recorded if is_hub_id(recorded) else None)


def _eval_results(quality, task) -> list:
    """The model-index entries of a card: the quality metrics measured on a Hub dataset (id, config, split)."""
    if not task:
        return []
    return [
        EvalResult(
            task_type=task,
            dataset_type=record["hub_id"],
            dataset_name=record["name"],
            dataset_config=record.get("config"),
            dataset_split=record.get("split"),
            metric_type=metric,
            metric_name=name,
            metric_value=value,
        )
        for name, metric, value, record in quality
        if record and record.get("hub_id") and is_hub_id(record["hub_id"])
    ]


def _limitations(setups, info: dict) -> list[str]:
    """The card's limitations: remote code, each attention setup's own, and the run's scale."""
    dataset = (info.get("dataset") or {}).get("name")
    limitations = [
        "`trust_remote_code=True` runs this repository's Python files: read them, and pin the revision you read.",
        *[item for setup in setups for item in setup["limitations"]],
    ]
    training = info.get("training") or {}
    steps = training.get("steps") or training.get("max_steps")  # steps taken; max_steps is -1 for epoch-based runs
    if steps and steps > 0:
        limitations.append(
            f"The metrics describe this run only ({steps} training steps"
            + (f" on {dataset}" if dataset else "")
            + "); they are not comparable with the papers' "
            "results at full scale."
        )
    return limitations


def _reproduce_text(reproduce: dict, info: dict) -> str:
    """The card's "Reproducing the weights" text: the command at its commit, the files it read by hash, what it cost,
    and the command that re-runs it and compares (`rerun`), from a `CardRecord.reproduce`."""
    commit = reproduce["git_commit"]
    steps = (info.get("training") or {}).get("steps") or (info.get("training") or {}).get("max_steps")
    cost = (
        f" ({steps} steps: {reproduce['minutes']:.0f} minutes of training on one CPU thread; CPU: "
        f"{reproduce['hardware']})"
        if reproduce.get("minutes") and reproduce.get("hardware")
        else ""
    )
    parts = [
        "The weights are not stored in the hf-attn-variants repository: this card was rendered from the record of "
        f"{reproduce.get('run') or 'the run that trained them'}, and the command below trains them again"
        + cost
        + ". Run it from the root of a "
        f"checkout of hf-attn-variants at commit `{commit}` (the code that ran), installed with `pip install -e .`; "
        "its output folder is the checkpoint, with this card's files (weights, config, code, tokenizer, metrics):",
        f"```bash\ngit checkout {commit}\n{reproduce['command']}\n```",
    ]
    if reproduce.get("files"):
        parts.append(
            "What the run read, by SHA-256 (the command's output folder holds the same tokenizer.json):\n\n"
            + _table(((f"`{name}`", f"`{digest}`") for name, digest in reproduce["files"].items()), ("file", "sha256"))
        )
    if reproduce.get("rerun"):
        parts.append(
            f"`{reproduce['rerun']}` re-runs it in a scratch cache and prints the recorded and the new held-out loss."
        )
    parts.append(
        "Another CPU rounds differently, so a checkpoint trained again ends near, not exactly at, the "
        "numbers above (docs/research.md measures the drift)."
    )
    return "\n\n".join(parts)


def write_model_card(output_dir, repo_id: str | None = None, revision: str | None = None) -> Path:
    """README.md in `output_dir`: the card `render_card` makes of the folder, addressed to
    `repo_id` (default: the folder itself, which loads as it is) without a pinned revision until it is pushed."""
    path = Path(output_dir) / "README.md"
    render_card(output_dir, repo_id or str(output_dir), revision).save(path)
    return path


__all__ = [
    "CardRecord",
    "attention_texts",
    "example_input_of",
    "write_model_card",
    "parameter_total",
    "read_card_record",
    "read_run",
    "render_card",
    "render_record",
]
