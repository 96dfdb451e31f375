"""The checkpoints hf-attn-variants releases, and their model cards in the repository's top-level `model_cards/`.
Package-only.

    hf-attn-variants cards --out model_cards       # every card and the index, rendered again from the recorded runs
    hf-attn-variants record OUTPUT_DIR NAME --train-command "..." --commit SHA --file examples/data/devils_dictionary.txt
    hf-attn-variants publish OUTPUT_DIR me/NAME --release NAME    # a re-trained checkpoint with its release card

The release set (`RELEASES`) is the README's main job, whose run is kept as a small committed record
(`model_cards/records/<name>.json`, written by `record_run` from the run's output folder: config, metrics, training
record, hashes, command, commit; never the weights), and per attention type the research cell that `RESEARCH_RULE`
picks from experiments/results.jsonl. Every card is rendered by `publish.render_record` from the run's own record and
says how to train the weights again (the command at its commit, the hashes of what it read): no checkpoint is kept.
"""

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .families import FAMILIES
from .publish import CardRecord, identity_fields, parameter_total, read_card_record, render_record
from .presets import preset_config

OWNER = "hf-attn-variants"  # the Hub namespace the cards are addressed to (`--owner`)
RESULTS = "experiments/results.jsonl"
RECORDS = "model_cards/records"
CARDS = "model_cards"
MLM_SCRIPT = "examples/run_pretraining.py"
LONG_STEPS, WIDTH = 1600, 256
RESEARCH_RULE = (f"among the long research cells ({LONG_STEPS} steps) at width {WIDTH} with the release's attention "
                 "setup that did not diverge, were made from committed code and record the hashes of their tokenizer "
                 "and text, the row of lowest final held-out loss (eval MLM loss): of the seeds, the best one")
# run flags that are not hyperparameters (the command keeps them): left out of the card's training table
NOT_HYPERPARAMETERS = ("report_to", "disable_tqdm", "dataloader_num_workers", "logging_steps", "save_strategy",
                       "per_device_eval_batch_size", "eval_strategy")
KJV = "King James Bible (KJV)"


@dataclass(frozen=True)
class Release:
    """One checkpoint of the release set. name: its Hub repository's name (and folder in model_cards/); record:
    the committed run record it is made from (records/<record>.json); setup: for a research release, whether a
    results row's (config, training flags) has the release's attention setup (`RESEARCH_RULE` picks among those);
    pending: why it has no card yet."""

    name: str
    family: str
    attention: str
    record: str | None = None
    setup: Callable[[dict, dict], bool] | None = None
    pending: str = ""


def _heads(config: dict) -> int:
    return config["num_attention_heads"]


RELEASES = (
    Release("bert-mini-talking-heads", "bert", "talking heads", record="bert-mini-talking-heads"),
    Release("bert-mini-kjv-dot-product", "bert", "dot product",
            setup=lambda c, t: c["attention_type"] == "dot_product" and not c["admin"] and _heads(c) > 1),
    Release("bert-mini-kjv-talking-heads", "bert", "talking heads",
            setup=lambda c, t: c["attention_type"] == "talking_heads"),
    Release("bert-mini-kjv-synthesizer-mixture", "bert", "Random Synthesizer + dot product (mixture)",
            setup=lambda c, t: c["attention_type"] == "synthesizer"
            and sorted(c["synthesizer_components"]) == ["dot_product", "random"]),
    Release("bert-mini-kjv-single-head-admin", "bert", "deep single-head, Admin (closed form)",
            setup=lambda c, t: c["attention_type"] == "dot_product" and c["admin"] and _heads(c) == 1
            and t.get("admin_init") == "closed_form"),
    Release("t5-mini-kjv-talking-heads", "t5", "talking heads",
            pending="not yet: the rule picks masked-LM rows only; T5's span rows are docs/research.md (d)'s"),
)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_rows(results) -> list[dict]:
    path = Path(results)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _candidate(row: dict) -> bool:
    """Whether a results row may be released at all (the part of `RESEARCH_RULE` every setup shares)."""
    config = row.get("config") or {}
    return (config.get("script", MLM_SCRIPT) == MLM_SCRIPT and row.get("steps") == LONG_STEPS
            and not row.get("diverged") and bool(row.get("tokenizer_sha256")) and bool(row.get("train_text_sha256"))
            and bool(row.get("git_commit")) and not row["git_commit"].endswith("+dirty"))


def pick(release: Release, rows: list[dict]) -> dict | None:
    """The results row `RESEARCH_RULE` picks for a research release (None: no row fits yet); the first of equals."""
    best = None
    for row in filter(_candidate, rows):
        config = preset_config(row["config"]["preset"], **row["config"].get("overrides", {})).to_dict()
        if config["hidden_size"] == WIDTH and release.setup(config, row["config"].get("training", {})):
            if best is None or row["eval_loss"] < best["eval_loss"]:
                best = row
    return best


def _tokenizer(row: dict, root: Path):
    """The tokenizer a row trained with (its command's --tokenizer_name), checked against the row's hash."""
    from transformers import AutoTokenizer

    found = re.search(r"--tokenizer_name (\S+)", row.get("train_command", ""))
    if not found:
        raise ValueError(f"Row {row['id']!r}: its train_command names no --tokenizer_name to rebuild the card from.")
    folder = root / found.group(1)
    digest = _sha256(folder / "tokenizer.json")
    if digest != row["tokenizer_sha256"]:
        raise ValueError(f"Row {row['id']!r} trained with a tokenizer.json of sha256 {row['tokenizer_sha256']}; "
                         f"{folder} has {digest}.")
    return found.group(1), AutoTokenizer.from_pretrained(folder)


def row_record(row: dict, root) -> CardRecord:
    """The `CardRecord` of a masked-LM research row: the config its command builds (checked against the row's
    parameter count), its metrics and training setting, and how to train it again."""
    root = Path(root)
    tokenizer_path, tokenizer = _tokenizer(row, root)
    preset, overrides = row["config"]["preset"], row["config"].get("overrides", {})
    config = preset_config(preset, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **overrides)
    import hf_attn_variants

    model_class = getattr(hf_attn_variants, f"Variant{FAMILIES['bert'].prefix}ForMaskedLM")
    with torch.device("meta"):
        model = model_class(config)
    total = sum(p.numel() for p in model.parameters())
    if total != row["num_parameters"]:
        raise ValueError(f"Row {row['id']!r} trained {row['num_parameters']} parameters, but its preset and overrides "
                         f"build {total} today: the card would describe another model.")
    model.config.architectures = [model_class.__name__]
    config_dict = json.loads(model.config.to_json_string(use_diff=True))
    config_dict.pop("transformers_version", None)
    training = row["config"].get("training", {})
    info = {
        "script": MLM_SCRIPT, "task": "fill-mask", "preset": preset, "base_model": None, "started_from": None,
        "dataset": {"name": f"{KJV}, training chapters", "license": "public domain", "split": "train",
                    "source": "examples/data/kjv.txt.gz, all chapters but every 20th (experiments/kjv.py --split "
                              "train)", "sha256": row["train_text_sha256"]},
        "evaluation": [{"metric_prefix": "eval_", "metric_suffix": "", "split": "validation",
                        "name": f"{KJV}, held-out chapters (every 20th), the first 256 blocks of 128 tokens",
                        "sha256": row.get("validation_text_sha256")}],
        "training": {**{k: v for k, v in training.items() if k not in NOT_HYPERPARAMETERS}, "seed": row["seed"],
                     "steps": row["steps"], "config_overrides": json.dumps(overrides)},
    }
    metrics = {"train_loss": row["train_loss"], "train_runtime": row["train_runtime"],
               "eval_mlm_loss": row["eval_loss"], "eval_perplexity": row["eval_perplexity"]}
    files = {f"{tokenizer_path}/tokenizer.json": row["tokenizer_sha256"],
             "kjv_train.txt (experiments/kjv.py --split train)": row["train_text_sha256"],
             "kjv_validation.txt (experiments/kjv.py --split validation)": row.get("validation_text_sha256")}
    reproduce = {"command": row["train_command"], "git_commit": row["git_commit"],
                 "files": {k: v for k, v in files.items() if v}, "hardware": row["hardware"]["cpu"],
                 "minutes": row["train_runtime"] / 60, "run": f"results row `{row['id']}` ({RESULTS})",
                 "rerun": f"python experiments/reproduce.py {row['id']} --at_row_commit"}
    return CardRecord(config_dict, info, metrics, RESULTS, total, tokenizer.mask_token, reproduce)


# -- the record of a run whose weights are not committed ---------------------------------------------------------------


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    import platform

    return platform.processor() or platform.machine()


def record_run(folder, command: str, git_commit: str, files=()) -> dict:
    """The committed record of a run (its output `folder`): what its card is rendered from, and how to run it again:
    `command` at `git_commit`, the sha256 of `files` (the data it read, paths as the command sees them) and of its
    tokenizer.json. JSON-ready; `record_from_json` reads it back."""
    folder = Path(folder)
    record = read_card_record(folder)
    hashes = {str(name): _sha256(Path(name)) for name in files}
    if (folder / "tokenizer.json").is_file():
        hashes["tokenizer.json (written by the run into its output folder)"] = _sha256(folder / "tokenizer.json")
    runtime = record.metrics.get("train_runtime")
    reproduce = {"command": command, "git_commit": git_commit, "files": hashes, "hardware": _cpu(),
                 "minutes": runtime / 60 if runtime else None, "run": "a run of the command below"}
    return {"config": record.config, "training_info": record.info, "metrics": record.metrics,
            "metrics_file": record.source, "num_parameters": record.num_parameters, "mask_token": record.mask_token,
            "reproduce": reproduce}


def record_from_json(data: dict) -> CardRecord:
    return CardRecord(data["config"], data["training_info"], data["metrics"], data["metrics_file"],
                      data["num_parameters"], data["mask_token"], data.get("reproduce"))


def check_matches(folder, record: CardRecord, name: str) -> None:
    """A ValueError unless the checkpoint in `folder` is the model `record` describes: the card's config fields
    (sizes, attention fields, model type, architecture) and the parameter count agree."""
    config = json.loads((Path(folder) / "config.json").read_text())
    for key in identity_fields(record.config):
        if config.get(key) != record.config.get(key):
            raise ValueError(f"{folder} is not the checkpoint of release {name}: its `{key}` is {config.get(key)!r}, "
                             f"the release's {record.config.get(key)!r}.")
    total = parameter_total(folder)
    if total != record.num_parameters:
        raise ValueError(f"{folder} is not the checkpoint of release {name}: {total} parameters, the release's "
                         f"{record.num_parameters}.")


# -- the release set and its cards ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Released:
    """A release with the record its card is made from (None: pending) and where that record comes from."""

    release: Release
    record: CardRecord | None
    run: str


def release_set(root=".", results: str | None = None, records: str | None = None) -> list[Released]:
    """Every release of `RELEASES` with its record: a committed record from `records` (default RECORDS under
    `root`), or the row `pick` chooses from `results` (default RESULTS under `root`); None where there is none yet."""
    root = Path(root)
    rows = load_rows(Path(results) if results else root / RESULTS)
    records = Path(records) if records else root / RECORDS
    out = []
    for release in RELEASES:
        if release.record is not None:
            path = records / f"{release.record}.json"
            record = record_from_json(json.loads(path.read_text())) if path.is_file() else None
            out.append(Released(release, record, f"the main job (`{release.record}.json` in {RECORDS})"))
        elif release.setup is not None and (row := pick(release, rows)) is not None:
            out.append(Released(release, row_record(row, root), f"`{row['id']}`"))
        else:
            out.append(Released(release, None, release.pending or "no run fits yet"))
    return out


def held_out_loss(record: CardRecord) -> float | None:
    return record.metrics.get("eval_mlm_loss", record.metrics.get("eval_target_loss"))


def render_cards(released: list[Released], owner: str = OWNER) -> dict[str, str]:
    """{path under model_cards/: text}: each release's README.md (unpinned: the card of a checkpoint not pushed yet)
    and the index."""
    files = {f"{r.release.name}/README.md": str(render_record(r.record, f"{owner}/{r.release.name}", None))
             for r in released if r.record is not None}
    files["README.md"] = _index(released, owner)
    return files


def write_cards(out, released: list[Released], owner: str = OWNER) -> list[Path]:
    """Write `render_cards` under `out` (the card folders of releases that have none yet are left alone)."""
    written = []
    for name, text in render_cards(released, owner).items():
        path = Path(out) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def release_record(name: str, root=".", results: str | None = None, records: str | None = None,
                   cards: str | None = None, owner: str = OWNER) -> CardRecord:
    """The record of release `name`, refused unless its committed card (`cards`/name/README.md) is what `cards`
    renders today, so that what `publish --release` uploads is that card (addressed and pinned)."""
    released = {r.release.name: r for r in release_set(root, results, records)}
    if name not in released:
        raise ValueError(f"No release {name!r}; the release set: {', '.join(released)}.")
    if released[name].record is None:
        raise ValueError(f"Release {name} has no run yet: {released[name].run}.")
    path = Path(cards or Path(root) / CARDS) / name / "README.md"
    expected = render_cards([released[name]], owner)[f"{name}/README.md"]
    if not path.is_file() or path.read_text() != expected:
        raise ValueError(f"{path} is missing or out of date: run `hf-attn-variants cards --out {path.parent.parent}` "
                         "and commit the cards first.")
    return released[name].record


def _index(released: list[Released], owner: str) -> str:
    rows = []
    for r in released:
        loss = held_out_loss(r.record) if r.record else None
        card = f"[card]({r.release.name}/README.md)" if r.record else "not yet"
        rows.append(f"| `{owner}/{r.release.name}` | {FAMILIES[r.release.family].display} | {r.release.attention} | "
                    f"{'' if loss is None else f'{loss:.4f}'} | {r.run} | {card} |")
    return INDEX.format(owner=owner, rule=RESEARCH_RULE, table="\n".join(rows)).strip() + "\n"


INDEX = """
# Model cards

The checkpoints hf-attn-variants publishes, one folder per Hub repository, each with the model card the repository
gets. Every card is rendered by the project's card renderer (`hf_attn_variants.publish.render_record`) from the
record of the run that trained the model; none is written by hand. This folder is generated:

```bash
hf-attn-variants cards --out model_cards
```

`tests/test_model_cards.py` fails when a file here differs from what that command renders.

## The release set

- **The main job** (the README's quick start: `examples/run_pretraining.py` with no flags, a talking-heads BERT on
  *The Devil's Dictionary*): its run's record, without the weights, is `records/bert-mini-talking-heads.json`
  (written by `hf-attn-variants record` from the run's output folder).
- **Per attention type, the best long research cell** of `experiments/results.jsonl` (masked LM on the King James
  Bible, docs/research.md), chosen by code (`hf_attn_variants.release.RESEARCH_RULE`). The best seed, not the
  typical one: docs/research.md gives each setting's mean and spread over its seeds. The rule:

  > {rule}.
- **T5**: not yet; its research rows (experiments/t5_places.py, docs/research.md (d)) are span corruption, and the
  rule picks masked-LM rows only.

The repositories are named `{owner}/<name>` (`hf-attn-variants cards --owner` readdresses the cards).

| Hub repository | family | attention | held-out loss | run | card |
|---|---|---|---|---|---|
{table}

Held-out loss: the final masked-LM loss (nats per masked token) on the run's own held-out text; the main job's is
*The Devil's Dictionary* (a 300-step quick start) and the research cells' the KJV's held-out chapters, so the two
are not comparable.

## Weights

No weights are committed. Each card's "Reproducing the weights" section gives the command, the commit of the code
that ran and the SHA-256 of the tokenizer and text it read; the research runs kept no checkpoint, so that command
trains it again, and its output folder is the checkpoint. To publish one with its card from this folder:

```bash
hf-attn-variants publish <the command's output folder> <your namespace>/<name> --release <name>
```

`publish --release` checks that the folder is the release's model (config and parameter count), that the card here
is current, uploads the checkpoint and then this card, addressed to the repository and pinned to the model commit.
"""


__all__ = ["RELEASES", "RESEARCH_RULE", "Release", "Released", "check_matches", "pick", "record_from_json",
           "record_run", "release_record", "release_set", "render_cards", "row_record", "write_cards"]
