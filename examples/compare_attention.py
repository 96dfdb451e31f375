"""Every attention type side by side: the same masked-LM pretraining (data, steps, schedule, seed, masks) for dot
product, talking heads, Synthesizer dense / random / mixture and the deep single-head twin with Admin.

    python examples/compare_attention.py                      # bert-mini, 300 steps each: about 11 min on 2 CPU cores
    python examples/compare_attention.py --family albert --size tiny --max_steps 50

Prints a table (final eval MLM loss, perplexity, parameters, seconds per training step) and writes `results.md`,
`results.json` and `eval_loss.png` (eval curves) into --output_dir (default `outputs/compare-{family}-{size}`, one
sub-folder per run). Any other argument goes to examples/run_pretraining.py unchanged (e.g. --learning_rate 1e-3
--bf16). `run_setup` and `write_results` are what examples/single_head_admin.py runs its comparison with.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

import run_pretraining
from hf_attn_variants.presets import attention_setups_of
from hf_attn_variants.training.output_folders import output_folder
from script_utils import run_script

# the attention setups of BERT/ALBERT presets: what follows "{family}-{size}-" in a preset name
ATTENTION = list(attention_setups_of("bert"))


@dataclass
class CompareArguments:
    family: str = field(default="bert", metadata={"help": "bert or albert."})
    size: str = field(default="mini", metadata={"help": "tiny, mini, small or base (see hf_attn_variants.presets)."})
    attention: str = field(default=",".join(ATTENTION), metadata={"help": "Comma-separated attention setups."})
    output_dir: str | None = field(
        default=None,
        metadata={"help": "One sub-folder per run, plus the results. Default: outputs/compare-{family}-{size}."},
    )
    max_steps: int = field(default=300, metadata={"help": "Training steps of every run."})
    eval_steps: int = field(default=25, metadata={"help": "Steps between evaluations (the curve's points)."})
    max_seq_length: int = field(default=64, metadata={"help": "Tokens per sequence."})
    per_device_train_batch_size: int = field(default=16, metadata={"help": "Sequences per step."})
    learning_rate: float = field(default=1e-3, metadata={"help": "Peak learning rate (linear warm-up and decay)."})
    seed: int = field(default=42, metadata={"help": "The same seed for every run."})


def curve(output_dir: Path) -> list[tuple[int, float]]:
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    points = {e["step"]: e["eval_mlm_loss"] for e in history if "eval_mlm_loss" in e}
    return sorted(points.items())


def run_setup(name: str, preset: str, folder: str, args, flags: list[str]) -> dict:
    """One run of examples/run_pretraining.py into `args.output_dir`/`folder`, with the settings every run of a
    comparison shares (`args`: steps, evaluation, length, batch, learning rate, seed) and its own `flags`."""
    run_dir = Path(args.output_dir) / folder
    metrics = run_pretraining.main(
        [
            "--preset",
            preset,
            "--output_dir",
            str(run_dir),
            "--max_steps",
            str(args.max_steps),
            "--eval_steps",
            str(args.eval_steps),
            "--max_seq_length",
            str(args.max_seq_length),
            "--per_device_train_batch_size",
            str(args.per_device_train_batch_size),
            "--learning_rate",
            str(args.learning_rate),
            "--seed",
            str(args.seed),
            "--warmup_steps",
            str(max(1, args.max_steps // 10)),
            "--save_strategy",
            "no",
            *flags,
        ]
    )
    return {
        "name": name,
        "preset": preset,
        "eval_mlm_loss": metrics["eval_mlm_loss"],
        "perplexity": metrics["eval_perplexity"],
        "parameters": metrics["num_parameters"],
        "seconds_per_step": metrics["train_seconds_per_step"],
        "curve": curve(run_dir),
    }


def write_results(rows: list[dict], out: Path, title: str) -> None:
    """`results.md` (printed too), `results.json` and `eval_loss.png` (the eval curves, with matplotlib)."""
    lines = ["| run | preset | eval MLM loss | perplexity | parameters | s/step |", "|---|---|---:|---:|---:|---:|"]
    lines += [
        f"| {r['name']} | `{r['preset']}` | {r['eval_mlm_loss']:.3f} | {r['perplexity']:.1f} | "
        f"{r['parameters'] / 1e6:.2f}M | {r['seconds_per_step']:.3f} |"
        for r in rows
    ]
    table = "\n".join(lines)
    print(table)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(table + "\n")
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[examples]'): no eval_loss.png")
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in rows:
        steps, losses = zip(*r["curve"])
        ax.plot(steps, losses, marker=".", label=r["name"])
    ax.set_xlabel("training step")
    ax.set_ylabel("eval masked-LM loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "eval_loss.png", dpi=120)
    plt.close(fig)


def main(argv=None) -> list[dict]:
    args, passthrough = HfArgumentParser(CompareArguments).parse_known_args(argv)
    args.output_dir = args.output_dir or output_folder("compare", f"{args.family}-{args.size}")
    setups = [a for a in args.attention.split(",") if a]
    unknown = sorted(set(setups) - set(ATTENTION))
    if unknown:
        raise ValueError(f"Unknown attention setup(s) {unknown}: choose from {', '.join(ATTENTION)}.")
    presets = [f"{args.family}-{args.size}-{attention}" for attention in setups]
    rows = [run_setup(attention, preset, preset, args, passthrough) for attention, preset in zip(setups, presets)]
    write_results(rows, Path(args.output_dir), f"{args.family}-{args.size}: same data, steps, schedule and seed")
    return rows


if __name__ == "__main__":
    run_script(main)
