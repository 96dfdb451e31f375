"""The run record of each release: made from its research row (`row_record`) or from a run's output folder
(`record_run`, kept in model_cards/records/), checked against a re-trained checkpoint (`check_matches`), and the
release set with its records (`release_set`). No weights are kept: a record holds config, metrics, training record,
hashes, command and commit. Repository tooling, not part of the installed package.
"""

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

import torch

import hf_attn_variants
from hf_attn_variants.attention_tools import identity_fields
from hf_attn_variants.families import family_of
from hf_attn_variants.hub.cards import CardRecord, parameter_total, read_card_record
from hf_attn_variants.presets import preset_config
from release_set import (
    HELD_OUT,
    KJV,
    MLM_SCRIPT,
    NOT_HYPERPARAMETERS,
    RECORDS,
    RELEASES,
    RESULTS,
    ROOT,
    SCRIPT_HEADS,
    T5_SCRIPT,
    T5_TOKEN_ACCURACY_NOTE,
    Release,
    load_rows,
    pick,
)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tokenizer(row: dict, root: Path):
    """The tokenizer a row trained with (its command's --tokenizer_name), checked against the row's hash."""
    from transformers import AutoTokenizer

    found = re.search(r"--tokenizer_name (\S+)", row.get("train_command", ""))
    if not found:
        raise ValueError(f"Row {row['id']!r}: its train_command names no --tokenizer_name to rebuild the card from.")
    folder = root / found.group(1)
    digest = _sha256(folder / "tokenizer.json")
    if digest != row["tokenizer_sha256"]:
        raise ValueError(
            f"Row {row['id']!r} trained with a tokenizer.json of sha256 {row['tokenizer_sha256']}; "
            f"{folder} has {digest}."
        )
    return found.group(1), AutoTokenizer.from_pretrained(folder)


def _row_config(row: dict, tokenizer):
    """The config a row's command builds (`hf_attn_variants.training.model_setup`'s preset path) and the class of its card."""
    preset, overrides = row["config"]["preset"], row["config"].get("overrides", {})
    config = preset_config(preset, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **overrides)
    family = family_of(config)
    if family.encoder_decoder:
        config.eos_token_id, config.decoder_start_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    head = SCRIPT_HEADS[row["config"].get("script", MLM_SCRIPT)][0]
    return config, getattr(hf_attn_variants, f"Variant{family.prefix}{head}")


def _command_overrides(command: str) -> dict:
    """The config overrides a script's command line passes (`--config_overrides` JSON, `--attention_type`)."""
    words = shlex.split(command)
    flags = dict(zip(words, words[1:]))
    overrides = json.loads(flags.get("--config_overrides", "{}"))
    return {**overrides, "attention_type": flags["--attention_type"]} if "--attention_type" in flags else overrides


def row_record(row: dict, root) -> CardRecord:
    """The `CardRecord` of a pretraining research row (masked LM or span corruption): the config its command builds
    (checked against the row's parameter count), its metrics and training setting, and how to train it again."""
    root = Path(root)
    tokenizer_path, tokenizer = _tokenizer(row, root)
    config, model_class = _row_config(row, tokenizer)
    with torch.device("meta"):
        model = model_class(config)
    total = sum(p.numel() for p in model.parameters())
    if total != row["num_parameters"]:
        raise ValueError(
            f"Row {row['id']!r} trained {row['num_parameters']} parameters, but its preset and overrides "
            f"build {total} today: the card would describe another model."
        )
    model.config.architectures = [model_class.__name__]
    config_dict = json.loads(model.config.to_json_string(use_diff=True))
    config_dict.pop("transformers_version", None)
    script = row["config"].get("script", MLM_SCRIPT)
    _, task, loss_metric = SCRIPT_HEADS[script]
    preset, overrides = row["config"]["preset"], row["config"].get("overrides", {})
    training = row["config"].get("training", {})
    info = {
        "script": script,
        "task": task,
        "preset": preset,
        "overrides": overrides,
        "base_model": None,
        "started_from": None,
        "dataset": {
            "name": f"{KJV}, training chapters",
            "license": "public domain",
            "split": "train",
            "source": "examples/data/kjv.txt.gz, all chapters but every 20th (experiments/kjv.py --split train)",
            "sha256": row["train_text_sha256"],
        },
        "evaluation": [
            {
                "metric_prefix": "eval_",
                "metric_suffix": "",
                "split": "validation",
                "name": f"{KJV}, held-out chapters (every 20th), {HELD_OUT[script]}",
                "sha256": row.get("validation_text_sha256"),
            }
        ],
        "training": {
            **{k: v for k, v in training.items() if k not in NOT_HYPERPARAMETERS},
            "seed": row["seed"],
            "steps": row["steps"],
            "config_overrides": json.dumps(overrides),
        },
    }
    if script == T5_SCRIPT:
        info["evaluation_note"] = T5_TOKEN_ACCURACY_NOTE
    metrics = {
        "train_loss": row["train_loss"],
        "train_runtime": row["train_runtime"],
        loss_metric: row["eval_loss"],
        "eval_perplexity": row["eval_perplexity"],
    }
    files = {
        f"{tokenizer_path}/tokenizer.json": row["tokenizer_sha256"],
        "kjv_train.txt (experiments/kjv.py --split train)": row["train_text_sha256"],
        "kjv_validation.txt (experiments/kjv.py --split validation)": row.get("validation_text_sha256"),
    }
    reproduce = {
        "command": _in_checkout(row),
        "git_commit": row["git_commit"],
        "files": {k: v for k, v in files.items() if v},
        "hardware": row["hardware"]["cpu"],
        "minutes": row["train_runtime"] / 60,
        "run": f"results row `{row['id']}` ({RESULTS})",
        "rerun": f"python experiments/reproduce.py {row['id']} --at_row_commit",
    }
    # a tokenizer without a mask token (T5's) gets read_card_record's "[MASK]": the card shows a quick start with it
    return CardRecord(config_dict, info, metrics, RESULTS, total, tokenizer.mask_token or "[MASK]", reproduce)


def _in_checkout(row: dict) -> str:
    """A row's train_command writing where the runner writes inside a checkout (experiments/runs/<id>): a runner
    whose runs folder lay outside its checkout recorded that folder's absolute path, which means nothing elsewhere
    (where a run writes does not change what it trains)."""
    command = row["train_command"]
    found = re.search(r"--output_dir (\S+)", command)
    if found and found.group(1).startswith("/"):
        command = command.replace(found.group(0), f"--output_dir experiments/runs/{row['id']}")
    return command


# -- the record of a run whose weights are not committed ---------------------------------------------------------------


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    import platform

    return platform.processor() or platform.machine()


def record_run(folder, command: str, git_commit: str, files=(), root=ROOT) -> dict:
    """The committed record of a run (its output `folder`): what its card is rendered from, and how to run it again:
    `command` at `git_commit`, the sha256 of `files` (the data it read, paths as the command sees them: relative to
    the checkout's root `root`, where it runs) and of its tokenizer.json. JSON-ready; `record_from_json` reads it
    back."""
    folder = Path(folder)
    record = read_card_record(folder)
    hashes = {str(name): _sha256(Path(root) / name) for name in files}
    if (folder / "tokenizer.json").is_file():
        hashes["tokenizer.json (written by the run into its output folder)"] = _sha256(folder / "tokenizer.json")
    runtime = record.metrics.get("train_runtime")
    reproduce = {
        "command": command,
        "git_commit": git_commit,
        "files": hashes,
        "hardware": _cpu(),
        "minutes": runtime / 60 if runtime else None,
        "run": "a run of the command below",
    }
    return {
        "config": record.config,
        "training_info": record.info,
        "metrics": record.metrics,
        "metrics_file": record.source,
        "num_parameters": record.num_parameters,
        "mask_token": record.mask_token,
        "reproduce": reproduce,
    }


def record_from_json(data: dict) -> CardRecord:
    return CardRecord(
        data["config"],
        data["training_info"],
        data["metrics"],
        data["metrics_file"],
        data["num_parameters"],
        data["mask_token"],
        data.get("reproduce"),
    )


def check_matches(folder, record: CardRecord, name: str) -> None:
    """A ValueError unless the checkpoint in `folder` is the model `record` describes: the card's config fields
    (sizes, attention fields, model type, architecture) and the parameter count agree."""
    config = json.loads((Path(folder) / "config.json").read_text())
    for key in identity_fields(record.config):
        if config.get(key) != record.config.get(key):
            raise ValueError(
                f"{folder} is not the checkpoint of release {name}: its `{key}` is {config.get(key)!r}, "
                f"the release's {record.config.get(key)!r}."
            )
    total = parameter_total(folder)
    if total != record.num_parameters:
        raise ValueError(
            f"{folder} is not the checkpoint of release {name}: {total} parameters, the release's "
            f"{record.num_parameters}."
        )


@dataclass(frozen=True)
class Released:
    """A release with the record its card is made from (None: pending) and where that record comes from."""

    release: Release
    record: CardRecord | None
    run: str


def release_set(root=ROOT, results: str | None = None, records: str | None = None) -> list[Released]:
    """Every release of `RELEASES` with its record: a committed record from `records` (default RECORDS under
    `root`), or the row `pick` chooses from `results` (default RESULTS under `root`); None where there is none yet."""
    root = Path(root)
    rows = load_rows(Path(results) if results else root / RESULTS)
    records = Path(records) if records else root / RECORDS
    out = []
    for release in RELEASES:
        if release.record is not None:
            path = records / f"{release.record}.json"
            record = _card_record(record_from_json(json.loads(path.read_text())), release) if path.is_file() else None
            out.append(Released(release, record, f"the main job (`{release.record}.json` in {RECORDS})"))
        elif release.setup is not None and (row := pick(release, rows)) is not None:
            out.append(Released(release, _card_record(row_record(row, root), release), f"`{row['id']}`"))
        else:
            out.append(Released(release, None, "no run fits yet"))
    return out


def _card_record(record: CardRecord, release: Release) -> CardRecord:
    """`record` as its release card reads it: with the release's usage example, the config overrides its command
    passed where the record does not keep them (a record of `record_run` keeps the command only), and for a research
    release the rule that picked its row."""
    info, reproduce = record.info, record.reproduce
    if "overrides" not in info and reproduce:
        info = {**info, "overrides": _command_overrides(reproduce["command"])}
    if not release.record:
        reproduce = {**reproduce, "run": f"{reproduce['run']}, the row the release rule picks ({release.rule})"}
    return replace(record, info=info, reproduce=reproduce, example=release.example)
