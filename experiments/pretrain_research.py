"""examples/run_pretraining.py with the optimizer flags only the research cells use: every run_pretraining flag,
plus `--t5_adafactor` (T5's Adafactor) and `--dynamic_lr_scale` (a learning rate of their own for the dynamic
talking-heads weights). The research runner launches it for a cell that sets either (`cells.launched_script`).

    python experiments/pretrain_research.py --preset bert-mini-talking-heads --t5_adafactor --learning_rate 1e-2 \\
        --lr_scheduler_type constant --warmup_steps 0 --weight_decay 0
"""

import importlib.util
import math
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from transformers import HfArgumentParser, Trainer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@dataclass
class ResearchOptimizerArguments:
    t5_adafactor: bool = field(
        default=False,
        metadata={
            "help": "Train with T5's Adafactor (mesh-tensorflow's, as T5 pretrained) instead of --optim: transformers' "
            "Adafactor with parameter-scaled steps (scale_parameter=True: each step is --learning_rate on the "
            "--lr_scheduler_type schedule times the parameter's RMS, at least 1e-3; eps=(1e-30, 1e-3)), "
            "relative_step=False, warmup_init=False, clip_threshold=1.0, decay_rate=-0.8, no first moment "
            "(beta1=None), no weight decay (pass --weight_decay 0). T5's own step, min(1e-2, 1/sqrt(step)), is "
            "--learning_rate 1e-2 --lr_scheduler_type constant --warmup_steps 0 for runs under 10k steps. "
            "(--optim adafactor is not this: transformers sets scale_parameter=False there.)"
        },
    )
    dynamic_lr_scale: float = field(
        default=1.0,
        metadata={
            "help": "Multiply the learning rate of the dynamic talking-heads weights (the dynamic_x2l/m2l/x2w/m2w "
            "parameters of talking_heads_dynamic) by this, with --optim's optimizer or --t5_adafactor (a "
            "parameter group of their own). 1: no group of their own."
        },
    )


def example_module(name: str):
    """examples/<name>.py as the module `name` (the one imported already, if any). The scripts import their helper
    `script_utils` by name from their own folder, so it is loaded the same way first; sys.path is left alone."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def build_optimizer(options: ResearchOptimizerArguments, model, training_args, decay_names: list[str]):
    """The optimizer of --t5_adafactor / --dynamic_lr_scale (None: neither is set, Trainer builds --optim's). Its
    parameter groups are Trainer's (weight decay on `decay_names`, none on biases and norms), each split once more
    when --dynamic_lr_scale is not 1: the dynamic talking-heads weights at that multiple of --learning_rate."""
    from transformers.optimization import Adafactor

    scale = options.dynamic_lr_scale
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"--dynamic_lr_scale must be a positive number, got {scale}.")
    if not options.t5_adafactor and scale == 1.0:
        return None
    if training_args.deepspeed or training_args.fsdp:
        raise ValueError(
            "--t5_adafactor and --dynamic_lr_scale build the optimizer here; DeepSpeed and FSDP build "
            "their own: leave them out, or drop --deepspeed/--fsdp."
        )
    if options.t5_adafactor and training_args.weight_decay != 0:
        raise ValueError(
            f"--t5_adafactor: T5's Adafactor has no weight decay; pass --weight_decay 0 (got "
            f"{training_args.weight_decay})."
        )
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    dynamic = {n for n, _ in named if n.rsplit(".", 1)[-1].startswith("dynamic_")}
    if scale != 1.0 and not dynamic:
        raise ValueError(
            f"--dynamic_lr_scale {scale}: the model has no dynamic talking-heads weights (config "
            "talking_heads_dynamic); leave it out."
        )
    groups = []
    for decay in (True, False):
        for is_dynamic in (False, True):
            params = [p for n, p in named if (n in decay_names) == decay and (n in dynamic) == is_dynamic]
            if params:
                groups.append(
                    {
                        "params": params,
                        "weight_decay": training_args.weight_decay if decay else 0.0,
                        "lr": training_args.learning_rate * (scale if is_dynamic else 1.0),
                    }
                )
    if options.t5_adafactor:
        return Adafactor(
            groups,
            lr=training_args.learning_rate,
            eps=(1e-30, 1e-3),
            clip_threshold=1.0,
            decay_rate=-0.8,
            beta1=None,
            weight_decay=0.0,
            scale_parameter=True,
            relative_step=False,
            warmup_init=False,
        )
    optimizer_cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(training_args, model)
    return optimizer_cls(groups, **kwargs)


def main(argv=None) -> dict:
    """run_pretraining's main on every flag but the two of ResearchOptimizerArguments, with their optimizer."""
    namespace, rest = HfArgumentParser(ResearchOptimizerArguments).parse_known_args(argv)
    options = ResearchOptimizerArguments(**vars(namespace))
    example_module("script_utils")
    run_pretraining = example_module("run_pretraining")
    return run_pretraining.main(rest, optimizer_factory=partial(build_optimizer, options))


if __name__ == "__main__":
    example_module("script_utils").run_script(main)
