"""What the learned Random synthesizer maps of a trained BERT masked-LM checkpoint carry: the held-out loss of the
checkpoint with its Random maps edited, on the research cells' own evaluation (`examples/run_pretraining.py
--do_eval` with the cells' flags: the first 256 held-out blocks of 128 tokens, the same masks; so the unedited
checkpoint's loss is the one its cell recorded at that step), and the maps' learned logits by offset.

The edits, each on the layers `--layers` (default: every layer with a Random component; the others as trained):
- uniform: the Random logits set to zero, so that component attends uniformly (the mixture's other components and
  its weights alpha untouched);
- offset only: each head's logits R[i, j] replaced by their mean over the diagonal j - i = d, which keeps what
  depends on the relative position and removes what depends on the absolute one;
- offset only, |d| <= k: the same, with every offset beyond k set to their common mean, so that only the k nearest
  offsets on each side keep a logit of their own (one edit per `--bands` value).
An edit whose loss stays near the unedited one removed nothing the model uses.

The offset table prints, per layer and head, the offset-only logits at d = -3 ... +3 minus the mean logit of the
offsets beyond 3 (the softmax sees only differences): how much more a head scores a neighbour than a far token.

    python experiments/random_maps.py path/to/checkpoint-5200
    python experiments/random_maps.py path/to/checkpoint-5200 --layers 2 3 --bands 1 3

A finished research cell keeps its model only with `--keep_models` (experiments/<claim>.py); an unfinished one keeps
its newest checkpoint in its run folder.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from attention_reach import load_masked_lm, offsets
from cells import SCRIPT, TRAINING
from kjv import kjv_files
from provenance import ROOT

NEAR = 3  # the offset table's reach, and what "far" starts beyond


def offset_only(logits: torch.Tensor, band: int | None = None) -> torch.Tensor:
    """Random logits [h, L, L] with each diagonal j - i = d replaced by its mean (per head); with `band`, every
    offset beyond it (|d| > band) by the mean of all of those entries."""
    d = offsets(logits.shape[-1])
    edited = torch.empty_like(logits)
    for offset in d.unique().tolist():
        diagonal = d == offset
        edited[:, diagonal] = logits[:, diagonal].mean(-1, keepdim=True)
    if band is not None:
        far = d.abs() > band
        edited[:, far] = logits[:, far].mean(-1, keepdim=True)
    return edited


def random_cores(model) -> list:
    """The attention cores with a Random component, in layer order."""
    cores = [module for module in model.modules() if hasattr(module, "random_logits")]
    if not cores:
        raise ValueError(
            "The checkpoint has no Random synthesizer component (synthesizer_components without 'random'): "
            "there are no Random maps to edit."
        )
    return cores


def offset_profile(logits: torch.Tensor) -> torch.Tensor:
    """[h, 2 NEAR + 1]: a head's mean logit at each offset -NEAR ... +NEAR minus its mean logit beyond NEAR."""
    d = offsets(logits.shape[-1])
    far = logits[:, d.abs() > NEAR].mean(-1)
    near = torch.stack([logits[:, d == offset].mean(-1) for offset in range(-NEAR, NEAR + 1)], -1)
    return near - far[:, None]


def held_out_loss(model_dir: Path, max_seq_length: int, max_eval_samples: int) -> float:
    """The eval MLM loss of a saved model, from the training script's own evaluation with the cells' flags."""
    with tempfile.TemporaryDirectory() as output_dir:
        command = [
            sys.executable, SCRIPT, "--model_name_or_path", str(model_dir), "--do_eval",
            "--validation_file", str(kjv_files()["validation"]), "--max_seq_length", str(max_seq_length),
            "--per_device_eval_batch_size", str(TRAINING["per_device_eval_batch_size"]),
            "--max_eval_samples", str(max_eval_samples), "--report_to", "none", "--disable_tqdm", "True",
            "--output_dir", output_dir, "--use_cpu", "true",
        ]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(f"The evaluation of {model_dir} failed:\n{done.stderr.decode()[-3000:]}")
        return json.loads((Path(output_dir) / "eval_results.json").read_text())["eval_mlm_loss"]


def edits(bands: list[int]) -> dict:
    """Name -> edit of one layer's Random logits."""
    found = {"uniform": torch.zeros_like, "offset only": offset_only}
    found.update({f"offset only, |d| <= {band}": (lambda r, band=band: offset_only(r, band)) for band in bands})
    return found


def describe(
    path: Path, layers: list[int] | None, bands: list[int], max_seq_length: int, max_eval_samples: int
) -> str:
    model, tokenizer = load_masked_lm(path)
    cores = random_cores(model)
    layers = list(range(len(cores))) if layers is None else layers
    if not set(layers) <= set(range(len(cores))):
        raise ValueError(f"--layers {layers}: the checkpoint's Random components are in layers 0-{len(cores) - 1}.")
    trained = [core.random_logits.detach().clone() for core in cores]
    lines = [f"{path}: held-out MLM loss (the cells' evaluation), Random maps of layers {layers} edited"]
    lines.append(f"  {'as trained':<26}{held_out_loss(path, max_seq_length, max_eval_samples):.4f}")
    with tempfile.TemporaryDirectory() as scratch:
        for name, edit in edits(bands).items():
            with torch.no_grad():
                for layer, core in enumerate(cores):
                    core.random_logits.copy_(edit(trained[layer]) if layer in layers else trained[layer])
            folder = Path(scratch) / "edited"
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            lines.append(f"  {name:<26}{held_out_loss(folder, max_seq_length, max_eval_samples):.4f}")
    lines.append(f"Offset logits minus the mean beyond |d| = {NEAR}, by offset d (key - query):")
    lines.append("  ".join(f"{h:>7}" for h in ["head", *(f"{d:+d}" for d in range(-NEAR, NEAR + 1))]))
    for layer in layers:
        for head, row in enumerate(offset_profile(trained[layer].double()).tolist()):
            lines.append("  ".join([f"{f'{layer}.{head}':>7}"] + [f"{v:>7.2f}" for v in row]))
    return "\n".join(lines)


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path, help="Saved models or Trainer checkpoint folders.")
    parser.add_argument("--layers", type=int, nargs="+", help="The layers to edit (default: all).")
    parser.add_argument("--bands", type=int, nargs="*", default=[1, 3], help="The offset-only edits' bands k.")
    parser.add_argument("--max_seq_length", type=int, default=TRAINING["max_seq_length"])
    parser.add_argument("--max_eval_samples", type=int, default=TRAINING["max_eval_samples"])
    args = parser.parse_args(argv)
    if any(band < 0 for band in args.bands):
        parser.error(f"--bands must be offsets of 0 or more, got {args.bands}.")
    report = "\n\n".join(
        describe(path, args.layers, args.bands, args.max_seq_length, args.max_eval_samples)
        for path in args.checkpoints
    )
    print(report)
    return report


if __name__ == "__main__":
    main()
