"""The release set: which checkpoints hf-attn-variants releases (`RELEASES`), and the rules that pick, for each
research release, the results row it is made from (`RESEARCH_RULE`, `T5_RULE`, `pick`). Repository tooling, not
part of the installed package (utils/release.py is its command line).
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

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
