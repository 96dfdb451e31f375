"""The release cards and their index: each release's card rendered from its record
(`hf_attn_variants.hub.cards.render_record`) into model_cards/<name>/README.md, and model_cards/README.md listing
them. Repository tooling, not part of the installed package.
"""

from pathlib import Path

from hf_attn_variants.families import FAMILIES
from hf_attn_variants.hub.cards import CardRecord, render_record
from release_set import CARDS, OWNER, RESEARCH_RULE, ROOT, T5_RULE
from run_records import Released, release_set


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
