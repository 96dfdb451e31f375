"""Publish a checkpoint folder to the Hugging Face Hub with its model card (`hf_attn_variants.hub.cards`): the
checks that it loads where this package is not installed, and the upload. Package-only.

    from hf_attn_variants.hub.publish import publish, upload_card

    publish("out/bert-mini-talking-heads", "me/bert-mini-talking-heads", private=True)

    # in a Trainer script, after the Trainer pushed its output folder (with Trainer's default README):
    trainer.push_to_hub()
    upload_card(training_args.output_dir, trainer.hub_model_id)

Both paths leave the same repository: the files `is_published` accepts (weights, config, the model's code, tokenizer
files, the run's metrics and `training_info.json`) and a README.md rendered by `render_card`, whose quick start pins
the commit that holds the code.
"""

import inspect
import json
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

from ..convert import TOKENIZER_FILES, checkpoint_shapes, probe_inputs, weights_report
from ..isolation import run_isolated
from .cards import CardRecord, read_card_record, render_record

RUN_FILES = ("all_results.json", "train_results.json", "eval_results.json", "training_info.json")
CHECKPOINT_FILES = ("config.json", "generation_config.json", "model.safetensors.index.json", "README.md")


def is_published(path: str) -> bool:
    """Whether the file at `path` (relative to a checkpoint folder) belongs in the published repository: the
    weights (`*.safetensors`), config, generation config, the model's code (`*.py`), tokenizer files, the run's
    metrics and `training_info.json`, and README.md. Not: `training_args.bin` (a pickle), `trainer_state.json`,
    TensorBoard `runs/`, `checkpoint-*/` or anything else in a sub-folder."""
    return "/" not in path and (
        path.endswith((".safetensors", ".py")) or path in CHECKPOINT_FILES + TOKENIZER_FILES + RUN_FILES
    )


_CHECK_SCRIPT = """
import json, sys
import torch, transformers
try:
    import hf_attn_variants
except ImportError:
    pass
else:
    raise SystemExit("hf_attn_variants is importable: the check would prove nothing")
{helpers}
folder = sys.argv[1]
config = transformers.AutoConfig.from_pretrained(folder, trust_remote_code=True)
architecture = config.architectures[0]
auto = next(a for a, target in config.auto_map.items() if target.split(".")[-1] == architecture)
model = getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True).eval()
missing, mismatched = weights_report(model, checkpoint_shapes(folder))
if missing or mismatched:
    raise SystemExit(f"weights missing from the checkpoint: {{missing}}; shapes that do not fit: {{mismatched}}")
with torch.no_grad():
    out = model(**probe_inputs(config, architecture))
shapes = {{k: list(v.shape) for k, v in out.items() if isinstance(v, torch.Tensor)}}
bad = [k for k, v in out.items() if isinstance(v, torch.Tensor) and not torch.isfinite(v).all()]
if bad:
    raise SystemExit(f"non-finite outputs: {{bad}}")
print(json.dumps({{"class": type(model).__name__, "auto_class": auto, "outputs": shapes}}))
"""


def check_loads(folder, timeout: float = 600) -> dict:
    """Load the checkpoint in `folder` the way a Hub user will: in a fresh interpreter where `hf_attn_variants`
    cannot be imported, through the Auto class its `auto_map` names, with `trust_remote_code=True`; every weight
    must come from the checkpoint with its shape, and a forward pass on a probe batch must give finite outputs.

    Returns {"class", "auto_class", "outputs": {name: shape}}; raises RuntimeError with the subprocess's error.
    """
    helpers = "\n".join(
        textwrap.dedent(inspect.getsource(f)) for f in (checkpoint_shapes, weights_report, probe_inputs)
    )
    proc = run_isolated(
        _CHECK_SCRIPT.format(helpers=helpers),
        [Path(folder).resolve()],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{folder} does not load with trust_remote_code=True where hf_attn_variants is not "
            f"installed:\n{proc.stderr[-3000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check_folder(folder: Path) -> dict:
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} has no config.json: pass a folder written by save_pretrained.")
    config = json.loads((folder / "config.json").read_text())
    code = {target.split(".")[0] + ".py" for target in config.get("auto_map", {}).values()}
    absent = sorted(name for name in code if not (folder / name).is_file())
    if not code or absent:
        raise FileNotFoundError(
            f"{folder} lacks the model's code ({', '.join(absent) or 'no auto_map'}): save it "
            "with save_pretrained from hf_attn_variants, which copies the .py files."
        )
    return config


@dataclass(frozen=True)
class Published:
    """Where a publish went: the repository URL, the commit holding the model (the card pins it), the card's; and
    the card's text (the README.md uploaded)."""

    url: str
    model_commit: str
    card_commit: str
    card: str = ""


def upload_card(
    folder,
    repo_id: str,
    revision: str | None = None,
    token: str | None = None,
    *,
    license: str = "apache-2.0",
    base_model: str | None = None,
    commit_message: str = "Model card (hf-attn-variants)",
    record: CardRecord | None = None,
) -> Published:
    """Replace the README.md of `repo_id` with the card of `folder`, after the model was pushed there (by
    `Trainer.push_to_hub`, `model.push_to_hub` or `publish`).

    The card pins the repository's current commit on `revision` (default "main"), which must hold config.json and
    the model's code. The same commit removes files that `publish` would not have uploaded (`is_published`: e.g.
    Trainer's `training_args.bin`, `trainer_state.json`, `runs/`), so a Trainer push followed by `upload_card`
    leaves the same files as `publish`. The card's metadata is validated by the Hub (`ModelCard.validate`) first.
    With `record`, the card is rendered from it instead of the folder's files (a release card, see `publish`).
    """
    folder = Path(folder)
    config = _check_folder(folder)
    api = HfApi(token=token)
    info = api.model_info(repo_id, revision=revision or "main")
    remote = {sibling.rfilename for sibling in info.siblings}
    needed = {"config.json"} | {t.split(".")[0] + ".py" for t in config["auto_map"].values()}
    if not needed <= remote:
        raise ValueError(f"{repo_id} at {info.sha} lacks {sorted(needed - remote)}: push the model before its card.")
    card = render_record(
        record or read_card_record(folder),
        repo_id,
        info.sha,
        license=license,
        base_model=base_model,
        where=str(folder),
    )
    card.validate()
    operations = [CommitOperationAdd("README.md", str(card).encode())]
    operations += [CommitOperationDelete(path) for path in sorted(remote) if not is_published(path)]
    commit = api.create_commit(repo_id, operations, commit_message=commit_message, revision=revision)
    return Published(f"{api.endpoint}/{repo_id}", info.sha, commit.oid, str(card))


def publish(
    folder,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    token: str | None = None,
    license: str = "apache-2.0",
    base_model: str | None = None,
    record: CardRecord | None = None,
) -> Published:
    """Check, upload and document the checkpoint in `folder` as the Hub model repository `repo_id`.

    1. `check_loads`: the folder loads with `trust_remote_code=True` where this package is not installed.
    2. The card's metadata is validated by the Hub before anything is uploaded.
    3. One commit uploads the files `is_published` accepts (weights, config, code, tokenizer, run records).
    4. `upload_card` commits the card, which pins the commit of step 3.

    Args:
        private: create the repository private (no effect on an existing repository).
        revision: a branch to publish to (created from main if it does not exist); default main.
        commit_message: the message of the model commit.
        token, license, base_model: the Hub token (default: the logged-in one); see `render_card`.
        record: render the card from this `CardRecord` instead of the folder's files: the record of a run whose
            weights were not kept (the project's release cards), whose card describes that run and how to re-train
            it; the caller checks that the folder holds that model.
    """
    folder = Path(folder)
    _check_folder(folder)
    check_loads(folder)
    render_record(
        record or read_card_record(folder), repo_id, "main", license=license, base_model=base_model
    ).validate()  # metadata only
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    if revision and revision != "main":
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    files = sorted(p.name for p in folder.iterdir() if p.is_file() and is_published(p.name) and p.name != "README.md")
    api.create_commit(
        repo_id,
        [CommitOperationAdd(name, str(folder / name)) for name in files],
        commit_message=commit_message or f"Upload {folder.name} (hf-attn-variants)",
        revision=revision,
    )
    return upload_card(
        folder, repo_id, revision=revision, token=token, license=license, base_model=base_model, record=record
    )


def push_with_card(trainer) -> Published | None:
    """Trainer's push, then our card in place of Trainer's default README, on the Hub and in the output folder (the
    same text: rendered once, pinning the pushed commit). Returns where it went (None on the other processes)."""
    trainer.push_to_hub()
    if not trainer.is_world_process_zero():
        return None
    published = upload_card(trainer.args.output_dir, trainer.hub_model_id, token=trainer.args.hub_token)
    (Path(trainer.args.output_dir) / "README.md").write_text(published.card)
    return published


__all__ = ["Published", "check_loads", "is_published", "publish", "push_with_card", "upload_card"]
