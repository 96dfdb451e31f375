"""How far a trained BERT masked-LM checkpoint attends: per layer, where its attention puts its mass on the held-out
chapters, and for a synthesizer mixture the learned mixture weights.

For each checkpoint it reads the first `--sequences` windows of `--length` tokens of the held-out chapters (the
checkpoint's own tokenizer, [CLS] ... [SEP], no masking, no padding), runs the model with `output_attentions=True`
and prints, per layer (heads averaged; each head too with `--per_head`): the attention mass on the token itself
(offset 0), on its neighbours (offset -1, +1), within three tokens (0 < |offset| <= 3), the mean |offset|, the mass
on the window's first token ([CLS]) and the rows' mean entropy in nats (a uniform row of n keys has log n, a row on
one key 0); for a mixture, its weights alpha (the normalised form the model uses). A model whose masked-token
predictions use the neighbouring words puts mass at small non-zero offsets; one that reads mostly itself and the
document at large does not; a layer that parks its attention on [CLS] reads almost nothing from the other tokens.

    python experiments/attention_reach.py path/to/checkpoint-2800 path/to/checkpoint-4800
    python experiments/attention_reach.py outputs/model --sequences 8 --length 128 --per_head

A finished research cell keeps its model only with `--keep_models` (experiments/<claim>.py); an unfinished one keeps
its newest checkpoint in its run folder.
"""

import argparse
from pathlib import Path

import torch

from kjv import kjv_files


def held_out_windows(tokenizer, count: int, length: int) -> torch.Tensor:
    """The first `count` windows of `length` tokens ([CLS] + length - 2 tokens + [SEP]) of the held-out chapters."""
    text = kjv_files()["validation"].read_text()
    ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]  # one long text, windowed below
    body = length - 2
    if len(ids) < count * body:
        raise ValueError(f"The held-out chapters hold {len(ids)} tokens, fewer than {count} windows of {body}.")
    rows = [[tokenizer.cls_token_id, *ids[i * body : (i + 1) * body], tokenizer.sep_token_id] for i in range(count)]
    return torch.tensor(rows)


def offsets(size: int) -> torch.Tensor:
    """[size, size]: the offset j - i of key j from query i."""
    positions = torch.arange(size)
    return positions[None, :] - positions[:, None]


def load_masked_lm(path: Path, **kwargs):
    """(model in eval mode, tokenizer) of a saved masked-LM model or Trainer checkpoint folder; `kwargs` go to
    `from_pretrained`. Quiet: the loading bars would break the tables printed after it."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer
    from transformers.utils import logging

    import hf_attn_variants  # noqa: F401 (registers the variant classes with the Auto classes)

    logging.disable_progress_bar()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: no config.json; pass a saved model or a Trainer checkpoint folder.")
    return AutoModelForMaskedLM.from_pretrained(path, **kwargs).eval(), AutoTokenizer.from_pretrained(path)


def reach(attentions: torch.Tensor) -> dict[str, float]:
    """Mass by offset of attention maps [b, h, n, n] (rows sum to one), averaged over rows, heads and the batch."""
    offset = offsets(attentions.shape[-1])  # [query, key]: key - query
    mass = attentions.double().mean(dim=(0, 1))  # [n, n]

    def at(selected: torch.Tensor) -> float:
        return float((mass * selected).sum(-1).mean())

    rows = attentions.double()
    entropy = -torch.where(rows > 0, rows * rows.log(), 0.0).sum(-1)  # per row: 0 * log 0 counts as 0
    return {
        "self": at(offset == 0),
        "-1": at(offset == -1),
        "+1": at(offset == 1),
        "0<|d|<=3": at((offset != 0) & (offset.abs() <= 3)),
        "mean |d|": float((mass * offset.abs()).sum(-1).mean()),
        "[CLS]": float(mass[:, 0].mean()),
        "entropy": float(entropy.mean()),
    }


def mixture_weights(model) -> list[list[float] | None]:
    """Per layer, the mixture weights alpha of its attention core (None where the layer has no mixture)."""
    found = []
    for module in model.modules():
        if hasattr(module, "mixture_alpha") and hasattr(module, "spec"):
            alpha = module.mixture_alpha()
            found.append(None if alpha is None else alpha.tolist())
    return found


def describe(path: Path, sequences: int, length: int, per_head: bool = False) -> str:
    model, tokenizer = load_masked_lm(path, attn_implementation="eager")
    config = model.config
    components = getattr(config, "synthesizer_components", None) if config.attention_type == "synthesizer" else None
    with torch.no_grad():
        out = model(input_ids=held_out_windows(tokenizer, sequences, length), output_attentions=True)
    alphas = mixture_weights(model)
    lines = [f"{path} ({config.attention_type}{f': {components}' if components else ''})"]
    measured = [reach(attentions) for attentions in out.attentions]
    header = ["layer", *measured[0]] + (["alpha"] if any(alphas) else [])
    lines.append("  ".join(f"{h:>9}" for h in header))
    for layer, attentions in enumerate(out.attentions):
        cells = [f"{layer:>9}"] + [f"{v:>9.3f}" for v in measured[layer].values()]
        if any(alphas):
            cells.append(" ".join(f"{a:.3f}" for a in alphas[layer]))
        lines.append("  ".join(cells))
        if per_head:
            for head in range(attentions.shape[1]):
                values = reach(attentions[:, head : head + 1]).values()
                lines.append("  ".join([f"{f'{layer}.{head}':>9}"] + [f"{v:>9.3f}" for v in values]))
    return "\n".join(lines)


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path, help="Saved models or Trainer checkpoint folders.")
    parser.add_argument("--sequences", type=int, default=16, help="How many held-out windows.")
    parser.add_argument("--length", type=int, default=128, help="Tokens per window, [CLS] and [SEP] included.")
    parser.add_argument("--per_head", action="store_true", help="A row per head under each layer's average.")
    args = parser.parse_args(argv)
    report = "\n\n".join(describe(path, args.sequences, args.length, args.per_head) for path in args.checkpoints)
    print(report)
    return report


if __name__ == "__main__":
    main()
