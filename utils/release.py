"""The checkpoints hf-attn-variants releases, and their model cards in the repository's top-level `model_cards/`.
Repository tooling, not part of the installed package: it reads this checkout's research results and run records.
It imports the installed package (`pip install -e .`) and reads this checkout's folders wherever it runs.

    python utils/release.py cards               # every card and the index, rendered again from the recorded runs
    python utils/release.py record OUTPUT_DIR NAME --train-command "..." --commit SHA --file examples/data/x.txt
    python utils/release.py publish OUTPUT_DIR me/NAME --release NAME   # a re-trained checkpoint, its release card

The release set (`RELEASES`) is the README's main job, whose run is kept as a small committed record
(`model_cards/records/<name>.json`, written by `record_run` from the run's output folder: config, metrics, training
record, hashes, command, commit; never the weights), per attention type the masked-LM research cell that
`RESEARCH_RULE` picks from experiments/results.jsonl, and the T5 span-corruption cell that `T5_RULE` picks. Every card
is rendered by `hf_attn_variants.hub.cards.render_record` from the run's own record and says how to train the weights
again (the command at its commit, the hashes of what it read): no checkpoint is kept. Each card names its preset and
config overrides, and its quick start uses a sentence of the model's own training text (`Release.example`). `publish`
uploads a checkpoint with its release card through `hf_attn_variants.hub.publish.publish`.
"""

import argparse
import hashlib
import json
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import mean

import torch

import hf_attn_variants
from hf_attn_variants.attention_tools import identity_fields
from hf_attn_variants.families import FAMILIES, family_of
from hf_attn_variants.hub.cards import CardRecord, parameter_total, read_card_record, render_record
from hf_attn_variants.hub.publish import publish
from hf_attn_variants.presets import preset_config

ROOT = Path(__file__).resolve().parents[1]  # the checkout this tool belongs to: its folders are the defaults
OWNER = "hf-attn-variants"  # the Hub namespace the cards are addressed to (`--owner`)
RESULTS = "experiments/results.jsonl"
RECORDS = "model_cards/records"
CARDS = "model_cards"
MLM_SCRIPT = "examples/run_pretraining.py"
T5_SCRIPT = "examples/run_t5_pretraining.py"
LONG_STEPS, WIDTH = 1600, 256
RESEARCH_RULE = (
    f"among the long research cells ({LONG_STEPS} steps) at width {WIDTH} with the release's attention "
    "setup that did not diverge, were made from committed code and record the hashes of their tokenizer "
    "and text, the row of lowest final held-out loss (eval MLM loss): of the seeds, the best one"
)
T5_CLAIM, T5_SIZE = "t5_places", "h16-lr2e-3-steps1600"  # docs/research.md (d): the long cells of the screened rate
T5_RULE = (
    f"among the long span-corruption cells of docs/research.md (d) (experiments/t5_places.py, size {T5_SIZE}: "
    f"{LONG_STEPS} steps at width {WIDTH}, 16 heads) that did not diverge, were made from committed code and "
    "record the hashes of their tokenizer and text, the variant (dot product, or talking heads in the encoder, "
    "the decoder or everywhere) of lowest mean final held-out loss (eval target loss: span corruption's "
    "cross-entropy per target token) over its seeds; of that variant, its best seed"
)
# what each pretraining script's research rows are: the head their card describes, its pipeline task, and the
# metric of the row's eval_loss (experiments/cells.py EVAL_METRICS)
SCRIPT_HEADS = {
    MLM_SCRIPT: ("ForMaskedLM", "fill-mask", "eval_mlm_loss"),
    T5_SCRIPT: ("ForConditionalGeneration", "text2text-generation", "eval_target_loss"),
}
HELD_OUT = {
    MLM_SCRIPT: "the first 256 blocks of 128 tokens",
    T5_SCRIPT: "the first 256 blocks of 141 tokens, span-corrupted into inputs of 128 tokens",
}
T5_TOKEN_ACCURACY_NOTE = (
    "Held-out token accuracy (`target_token_accuracy`, the share of target tokens predicted exactly) is not given: the "
    "research runner keeps each run's final held-out loss and its curve, not the script's other metrics, and the run "
    "kept no checkpoint to measure it on. The command below trains the model again; its output folder's "
    "`all_results.json` has `eval_target_token_accuracy`."
)
# run flags that are not hyperparameters (the command keeps them): left out of the card's training table
NOT_HYPERPARAMETERS = (
    "report_to",
    "disable_tqdm",
    "dataloader_num_workers",
    "logging_steps",
    "save_strategy",
    "per_device_eval_batch_size",
    "eval_strategy",
)
KJV = "King James Bible (KJV)"
# The usage examples of the cards: a sentence of each model's own training text, the masked words in braces (one word
# for fill-mask; T5's span corruption puts a sentinel in each). Genesis 1:1 is in the KJV's training chapters
# (tests/hub/test_model_cards.py checks it), the CYNIC line in The Devil's Dictionary (checked there too) and not among the
# rows the main job's run held out for validation (seed 42: the blocks of 32 rows holding PATIENCE and PEACE are).
KJV_EXAMPLE = "In the beginning God created the heaven and the {earth}."
DEVILS_DICTIONARY_EXAMPLE = (
    "CYNIC, n. A blackguard whose faulty {vision} sees things as they are, not as they ought to be."
)


@dataclass(frozen=True)
class Release:
    """One checkpoint of the release set. name: its Hub repository's name (and folder in model_cards/); record:
    the committed run record it is made from (records/<record>.json); setup: for a research release, whether a
    results row's (config, training flags) has the release's attention setup (the rule picks among those); script:
    the pretraining script of its rows; claim and size: the research cells it is picked from (None: any);
    mean_of_seeds: the rule is `T5_RULE` (the variant of lowest mean loss over its seeds, then its best seed), not
    `RESEARCH_RULE` (the row of lowest loss); example: the card's usage example, a sentence of the model's training
    text with the masked words in braces."""

    name: str
    family: str
    attention: str
    record: str | None = None
    setup: Callable[[dict, dict], bool] | None = None
    script: str = MLM_SCRIPT
    claim: str | None = None
    size: str | None = None
    mean_of_seeds: bool = False
    example: str = KJV_EXAMPLE

    @property
    def rule(self) -> str:
        return T5_RULE if self.mean_of_seeds else RESEARCH_RULE


def _heads(config: dict) -> int:
    return config["num_attention_heads"]


RELEASES = (
    Release(
        "bert-mini-talking-heads",
        "bert",
        "talking heads",
        record="bert-mini-talking-heads",
        example=DEVILS_DICTIONARY_EXAMPLE,
    ),
    Release(
        "bert-mini-kjv-dot-product",
        "bert",
        "dot product",
        setup=lambda c, t: c["attention_type"] == "dot_product" and not c["admin"] and _heads(c) > 1,
    ),
    Release(
        "bert-mini-kjv-talking-heads",
        "bert",
        "talking heads",
        setup=lambda c, t: c["attention_type"] == "talking_heads",
    ),
    Release(
        "bert-mini-kjv-synthesizer-mixture",
        "bert",
        "Random Synthesizer + dot product (mixture)",
        setup=lambda c, t: (
            c["attention_type"] == "synthesizer" and sorted(c["synthesizer_components"]) == ["dot_product", "random"]
        ),
    ),
    Release(
        "bert-mini-kjv-single-head-admin",
        "bert",
        "deep single-head, Admin (closed form)",
        setup=lambda c, t: (
            c["attention_type"] == "dot_product"
            and c["admin"]
            and _heads(c) == 1
            and t.get("admin_init") == "closed_form"
        ),
    ),
    Release(
        "t5-mini-kjv-talking-heads",
        "t5",
        "talking heads",
        setup=lambda c, t: c["num_heads"] == 16,
        script=T5_SCRIPT,
        claim=T5_CLAIM,
        size=T5_SIZE,
        mean_of_seeds=True,
        example="In the beginning God {created} the heaven and the {earth}.",
    ),
)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_rows(results) -> list[dict]:
    path = Path(results)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _candidate(row: dict, release: Release) -> bool:
    """Whether a results row may be released as `release` at all (the part of its rule every setup shares)."""
    config = row.get("config") or {}
    return (
        config.get("script", MLM_SCRIPT) == release.script
        and row.get("steps") == LONG_STEPS
        and release.claim in (None, row.get("claim"))
        and release.size in (None, row.get("size"))
        and not row.get("diverged")
        and bool(row.get("tokenizer_sha256"))
        and bool(row.get("train_text_sha256"))
        and bool(row.get("git_commit"))
        and not row["git_commit"].endswith("+dirty")
    )


def pick(release: Release, rows: list[dict]) -> dict | None:
    """The results row `release.rule` picks for a research release (None: no row fits yet); the first of equals."""
    fits = []
    for row in rows:
        if not _candidate(row, release):
            continue
        config = preset_config(row["config"]["preset"], **row["config"].get("overrides", {})).to_dict()
        width = config.get("hidden_size", config.get("d_model"))  # BERT's and T5's name for it
        if width == WIDTH and release.setup(config, row["config"].get("training", {})):
            fits.append(row)
    if release.mean_of_seeds and fits:
        losses = {}
        for row in fits:
            losses.setdefault(row["variant"], []).append(row["eval_loss"])
        variant = min(losses, key=lambda v: mean(losses[v]))
        fits = [row for row in fits if row["variant"] == variant]
    return min(fits, key=lambda row: row["eval_loss"], default=None)


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


# -- the release set and its cards ---------------------------------------------------------------------------------------


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


def held_out_loss(record: CardRecord) -> float | None:
    return record.metrics.get("eval_mlm_loss", record.metrics.get("eval_target_loss"))


def render_cards(released: list[Released], owner: str = OWNER) -> dict[str, str]:
    """{path under model_cards/: text}: each release's README.md (unpinned: the card of a checkpoint not pushed yet)
    and the index."""
    files = {
        f"{r.release.name}/README.md": str(render_record(r.record, f"{owner}/{r.release.name}", None))
        for r in released
        if r.record is not None
    }
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


def release_record(
    name: str,
    root=ROOT,
    results: str | None = None,
    records: str | None = None,
    cards: str | None = None,
    owner: str = OWNER,
) -> CardRecord:
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
        raise ValueError(
            f"{path} is missing or out of date: run `python utils/release.py cards --out "
            f"{path.parent.parent}` and commit the cards first."
        )
    return released[name].record


def _index(released: list[Released], owner: str) -> str:
    rows = []
    for r in released:
        loss = held_out_loss(r.record) if r.record else None
        card = f"[card]({r.release.name}/README.md)" if r.record else "not yet"
        rows.append(
            f"| `{owner}/{r.release.name}` | {FAMILIES[r.release.family].display} | {r.release.attention} | "
            f"{'' if loss is None else f'{loss:.4f}'} | {r.run} | {card} |"
        )
    return INDEX.format(owner=owner, rule=RESEARCH_RULE, t5_rule=T5_RULE, table="\n".join(rows)).strip() + "\n"


INDEX = """
# Model cards

The checkpoints hf-attn-variants publishes, one folder per Hub repository, each with the model card the repository
gets. Every card is rendered by the project's card renderer (`hf_attn_variants.hub.cards.render_record`) from the
record of the run that trained the model; none is written by hand. This folder is generated:

```bash
python utils/release.py cards
```

`tests/hub/test_model_cards.py` fails when a file here differs from what that command renders.

## The release set

- **The main job** (the README's quick start: `examples/run_pretraining.py` with no flags, a talking-heads BERT on
  *The Devil's Dictionary*): its run's record, without the weights, is `records/bert-mini-talking-heads.json`
  (written by `python utils/release.py record` from the run's output folder).
- **Per attention type, the best long research cell** of `experiments/results.jsonl` (masked LM on the King James
  Bible, docs/research.md), chosen by code (`RESEARCH_RULE` of utils/release.py). The best seed, not the
  typical one: docs/research.md gives each setting's mean and spread over its seeds. The rule:

  > {rule}.
- **T5, the best long span-corruption cell** of docs/research.md (d) (experiments/t5_places.py: talking heads in T5 by
  place), chosen by code (`T5_RULE` of utils/release.py). Its rows keep the held-out span loss, not the token
  accuracy (the card says why). The rule:

  > {t5_rule}.

The repositories are named `{owner}/<name>` (`python utils/release.py cards --owner` readdresses the cards).

| Hub repository | family | attention | held-out loss | run | card |
|---|---|---|---|---|---|
{table}

Held-out loss: the final masked-LM loss (nats per masked token) on the run's own held-out text, for T5 the span
corruption's target loss (nats per target token); the main job's is *The Devil's Dictionary* (a 300-step quick
start) and the research cells' the KJV's held-out chapters, so the main job's is comparable with none of the others,
and T5's with no masked-LM loss.

Each card names the preset its model was built from and the config overrides that make it what it is, and its usage
example is a sentence of the model's own training text (`KJV_EXAMPLE` and `DEVILS_DICTIONARY_EXAMPLE`
of utils/release.py, the masked words in braces).

## Weights

No weights are committed. Each card's "Reproducing the weights" section gives the command, the commit of the code
that ran and the SHA-256 of the tokenizer and text it read; the research runs kept no checkpoint, so that command
trains it again, and its output folder is the checkpoint. To publish one with its card from this folder:

```bash
python utils/release.py publish <the command's output folder> <your namespace>/<name> --release <name>
```

`publish --release` checks that the folder is the release's model (config and parameter count), that the card here
is current, uploads the checkpoint and then this card, addressed to the repository and pinned to the model commit.
"""


# -- the command line -----------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python utils/release.py", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    cards = commands.add_parser("cards", help="render the cards of the release set and their index (model_cards/)")
    cards.add_argument("--out", default=str(ROOT / CARDS), help=f"output folder (default: this checkout's {CARDS})")
    _sources(cards)

    record = commands.add_parser(
        "record",
        help="write the committed record of a run (its card's data, command, "
        "commit and hashes; no weights) into the records folder",
    )
    record.add_argument("folder", help="the run's output folder")
    record.add_argument("name", help="the record's name (records/<name>.json), e.g. bert-mini-talking-heads")
    record.add_argument("--train-command", required=True, help="the exact command that made the folder")
    record.add_argument("--commit", required=True, help="the git commit of the code that ran")
    record.add_argument(
        "--file",
        action="append",
        default=[],
        help="a data file the run read, as its command names it (relative to the checkout's root): hashed; repeatable",
    )
    record.add_argument(
        "--records", default=str(ROOT / RECORDS), help=f"records folder (default: this checkout's {RECORDS})"
    )

    upload = commands.add_parser(
        "publish",
        help="check that a checkpoint folder is a release's model, upload it to "
        "the Hub with the release's committed card (addressed and pinned)",
    )
    upload.add_argument("folder", help="the checkpoint folder: the output folder of the command its card gives")
    upload.add_argument("repo_id", help="Hub repository, e.g. me/bert-mini-kjv-talking-heads")
    upload.add_argument("--release", required=True, help="the release, e.g. bert-mini-kjv-talking-heads")
    upload.add_argument("--private", action="store_true", help="create the repository private")
    upload.add_argument("--revision", help="branch to publish to (created if missing); default main")
    upload.add_argument("--commit-message", help="message of the model commit")
    upload.add_argument("--token", help="Hub token (default: the logged-in one, or HF_TOKEN)")
    upload.add_argument(
        "--cards", default=str(ROOT / CARDS), help=f"the committed cards (default: this checkout's {CARDS})"
    )
    _sources(upload)
    return parser


def _sources(parser) -> None:
    parser.add_argument(
        "--results", default=str(ROOT / RESULTS), help=f"research results (default: this checkout's {RESULTS})"
    )
    parser.add_argument(
        "--records", default=str(ROOT / RECORDS), help=f"run records (default: this checkout's {RECORDS})"
    )
    parser.add_argument("--owner", default=OWNER, help=f"Hub namespace of the cards (default {OWNER})")


def _publish(args) -> str:
    record = release_record(
        args.release, results=args.results, records=args.records, cards=args.cards, owner=args.owner
    )
    check_matches(args.folder, record, args.release)
    done = publish(
        args.folder,
        args.repo_id,
        private=args.private,
        revision=args.revision,
        commit_message=args.commit_message,
        token=args.token,
        record=record,
    )
    return f"Published {done.url} (model commit {done.model_commit}, card commit {done.card_commit})"


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "cards":
            released = release_set(results=args.results, records=args.records)
            for path in write_cards(args.out, released, owner=args.owner):
                print(f"Wrote {path}")
        elif args.command == "record":
            path = Path(args.records) / f"{args.name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                json.dumps(record_run(args.folder, args.train_command, args.commit, args.file), indent=2) + "\n"
            )
            print(f"Wrote {path}")
        else:
            print(_publish(args))
    except (FileNotFoundError, FileExistsError, ValueError, RuntimeError) as error:
        print(f"release.py {args.command}: error: {error}", file=sys.stderr)
        return 1
    return 0


__all__ = [
    "RELEASES",
    "RESEARCH_RULE",
    "T5_RULE",
    "Release",
    "Released",
    "check_matches",
    "pick",
    "record_from_json",
    "record_run",
    "release_record",
    "release_set",
    "render_cards",
    "row_record",
    "write_cards",
]


if __name__ == "__main__":
    sys.exit(main())
