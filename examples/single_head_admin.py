"""Small-scale reproduction of "Multi-head or Single-head?" (Liu et al. 2021): a shallow multi-head Post-LN BERT
against its deep single-head twin, with default initialization and with Admin, each trained by
examples/run_pretraining.py (the one training path) on the same data, steps, schedule, masks and seed.

    python examples/single_head_admin.py        # into outputs/single-head-admin-4x8-d256 (L x h, width d)

The runs:
  multi-head         L x h   (default init)
  single-head        L*h x 1 (default init): the same number of heads, about the same size (`single_head_twin`)
  + Admin (profile)  the twin with Admin residuals, omegas profiled on the first batch (the paper's rule)
  + Admin (closed form)  the twin with admin-torch's closed-form omega, sqrt((N+1)/ln(N+1) - 1)
The data is run_pretraining's: The Devil's Dictionary by default, or any --train_file / --dataset_name (every
argument this script does not define goes to run_pretraining unchanged). It prints a table (final eval MLM loss,
perplexity, parameters, seconds per step) and writes `results.md`, `results.json` and `eval_loss.png` (eval curves)
into --output_dir.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

from compare_attention import run_setup, write_results
from hf_attn_variants.training.output_folders import output_folder
from script_utils import run_script


@dataclass
class SingleHeadArguments:
    output_dir: str | None = field(
        default=None,
        metadata={
            "help": "One sub-folder per run, plus the results. Default: outputs/single-head-admin-{layers}x{heads}-"
            "d{hidden_size}."
        },
    )
    layers: int = field(default=4, metadata={"help": "L, the layers of the multi-head model."})
    heads: int = field(default=8, metadata={"help": "h, its heads; the twin has L*h layers of one head."})
    hidden_size: int = field(default=256, metadata={"help": "Model width (head size = width / h); FFN 4x."})
    max_steps: int = field(default=400, metadata={"help": "Training steps of every run."})
    eval_steps: int = field(default=50, metadata={"help": "Steps between evaluations (the curve's points)."})
    max_seq_length: int = field(default=64, metadata={"help": "Tokens per sequence."})
    per_device_train_batch_size: int = field(default=32, metadata={"help": "Sequences per step."})
    learning_rate: float = field(default=1e-3, metadata={"help": "Peak learning rate (linear warm-up and decay)."})
    seed: int = field(default=42, metadata={"help": "The same seed for every run (init, data order, masks)."})


def main(argv=None) -> list[dict]:
    args, passthrough = HfArgumentParser(SingleHeadArguments).parse_known_args(argv)
    args.output_dir = args.output_dir or output_folder(
        "single-head-admin", f"{args.layers}x{args.heads}-d{args.hidden_size}"
    )
    shape = {
        "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads,
        "hidden_size": args.hidden_size,
        "intermediate_size": 4 * args.hidden_size,
        "max_position_embeddings": max(128, args.max_seq_length),
    }
    deep = f"single-head {args.layers * args.heads}x1"
    # the *-single-head-admin preset is the twin of the config it is given (`presets.single_head_twin`)
    setups = [  # (name, preset, run folder, config fields, run_pretraining flags)
        (f"multi-head {args.layers}x{args.heads}", "bert-mini-dot-product", "multi-head", shape, []),
        (deep, "bert-mini-single-head-admin", "single-head", {**shape, "admin": False}, []),
        (
            f"{deep} + Admin (profile)",
            "bert-mini-single-head-admin",
            "single-head-admin-profile",
            shape,
            ["--admin_init", "profile"],
        ),
        (
            f"{deep} + Admin (closed form)",
            "bert-mini-single-head-admin",
            "single-head-admin-closed-form",
            shape,
            ["--admin_init", "closed_form"],
        ),
    ]
    rows = [
        run_setup(name, preset, folder, args, ["--config_overrides", json.dumps(fields), *flags, *passthrough])
        for name, preset, folder, fields, flags in setups
    ]
    write_results(
        rows,
        Path(args.output_dir),
        f"Post-LN BERT, {args.layers}x{args.heads} and its twin: {args.max_steps} steps, lr {args.learning_rate}",
    )
    return rows


if __name__ == "__main__":
    run_script(main)
