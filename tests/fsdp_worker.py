"""A few training steps of a BERT, an ALBERT and a T5 model under FSDP2 as accelerate prepares it, on CPU processes
(gloo); run by tests/training/test_scaleout.py, not collected by pytest.

    accelerate launch --config_file examples/accelerate/fsdp.yaml --num_processes 2 --mixed_precision no \
        tests/fsdp_worker.py OUTPUT_DIR         # FSDP2: every rank trains its half of each global batch
    python tests/fsdp_worker.py OUTPUT_DIR      # the reference: one process, the whole batch, no sharding

Why not Trainer itself: accelerate turns FSDP on only for accelerator devices (CUDA, XPU, NPU, ...). On CPU
processes its state is MULTI_CPU and Trainer wraps the model in plain DDP, whatever the config says. So this worker
does what `accelerator.prepare` does on a GPU with that config: it builds accelerate's `FullyShardedDataParallelPlugin`
from the launcher's FSDP_* variables (the config's `fsdp_config`, parsed by `accelerate launch`) and hands each model
to accelerate's own `fsdp2_prepare_model`. The training step is Trainer's: AdamW, the loss over the step's labelled
tokens (`num_items_in_batch`) times the number of processes, gradient clipping at 1.0. It writes what Trainer's
`save_model` writes with `fsdp_state_dict_type: FULL_STATE_DICT`: accelerate's gathered state dict
(`get_model_state_dict(full_state_dict=True, broadcast_from_rank0=True, cpu_offload=True)`) handed by the main
process to the prepared model's `save_pretrained`; and, per model, the per-step losses, the world size and the
classes that became FSDP units.
"""

import json
import os
import sys
import types
from pathlib import Path

import torch
import torch.distributed as dist

import hf_attn_variants as hav
from conftest import make_config

STEPS, GLOBAL_BATCH, SEQ, TARGET = 3, 8, 16, 6
# folder name -> (head, family, variant): one tiny model of each family, its LM head tied to the input embedding
MODELS = {
    "bert": ("VariantBertForMaskedLM", "bert", "talking_heads"),
    "albert": ("VariantAlbertForMaskedLM", "albert", "synth_mixture"),
    "t5": ("VariantT5ForConditionalGeneration", "t5", "talking_heads"),
}


def build(name: str):
    head, family, variant = MODELS[name]
    torch.manual_seed(42)
    return getattr(hav, head)(make_config(variant, family))


def batches(name: str, vocab: int):
    """STEPS global batches: masked-LM inputs with about 15% of the tokens labelled (BERT, ALBERT), or encoder inputs
    and target spans (T5); some rows padded."""
    g = torch.Generator().manual_seed(0)
    for _ in range(STEPS):
        ids = torch.randint(5, vocab, (GLOBAL_BATCH, SEQ), generator=g)
        mask = torch.ones_like(ids)
        mask[1::3, SEQ - 6 :] = 0
        if name == "t5":
            labels = torch.randint(5, vocab, (GLOBAL_BATCH, TARGET), generator=g)
            labels[::3, TARGET - 2 :] = -100
            yield dict(input_ids=ids.masked_fill(mask == 0, 0), attention_mask=mask, labels=labels)
        else:
            labels = ids.masked_fill((torch.rand(ids.shape, generator=g) > 0.15) | (mask == 0), -100)
            yield dict(input_ids=ids.masked_fill(labels != -100, 4), attention_mask=mask, labels=labels)


def prepare(model, rank: int):
    """accelerate's FSDP2 preparation, with the plugin the launcher's FSDP_* variables describe."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model

    plugin = FullyShardedDataParallelPlugin()  # reads FSDP_VERSION, FSDP_AUTO_WRAP_POLICY, ... as Accelerator does
    if plugin.fsdp_version != 2:
        raise SystemExit("Run under `accelerate launch --config_file examples/accelerate/fsdp.yaml` (FSDP2).")
    # the fields of an Accelerator that fsdp2_prepare_model reads
    accelerator = types.SimpleNamespace(
        state=types.SimpleNamespace(fsdp_plugin=plugin),
        mixed_precision="no",
        is_main_process=rank == 0,
        device=torch.device("cpu"),
    )
    return fsdp2_prepare_model(accelerator, model)


def train(name: str, output_dir: Path, rank: int, world: int) -> None:
    model = build(name)
    if world > 1:
        from torch.distributed.fsdp import FSDPModule

        model = prepare(model, rank)
        units = sorted({type(m).__name__ for m in model.modules() if isinstance(m, FSDPModule)})
    else:
        units = []
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    losses = []
    for batch in batches(name, model.config.vocab_size):
        items = (batch["labels"] != -100).sum()
        local = {k: v.chunk(world)[rank] for k, v in batch.items()}
        loss = model(**local, num_items_in_batch=items).loss * world  # Trainer: gradients are averaged
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        total = loss.detach() / world
        if world > 1:
            dist.all_reduce(total)
        losses.append(total.item())
    if world > 1:  # accelerator.get_state_dict under FSDP2, as Trainer's save_model calls it on every rank
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, cpu_offload=True)
        state_dict = get_model_state_dict(model, options=options)
    else:
        state_dict = None
    if rank == 0:
        model.save_pretrained(output_dir / name, state_dict=state_dict)
        info = dict(world_size=world, losses=losses, units=units)
        (output_dir / name / "run.json").write_text(json.dumps(info))


def main(output_dir: str) -> None:
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    for name in MODELS:
        train(name, Path(output_dir), rank, world)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
