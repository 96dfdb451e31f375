"""A few masked-LM steps of a preset under FSDP2 as accelerate shards it, on CPU processes (gloo); run by
tests/test_scaleout.py, not collected by pytest.

    accelerate launch --config_file examples/accelerate/fsdp.yaml --num_processes 2 --mixed_precision no \
        tests/fsdp_worker.py OUTPUT_DIR         # FSDP: every rank trains its half of each global batch
    python tests/fsdp_worker.py OUTPUT_DIR      # the reference: one process, the whole batch, no sharding

Why not `run_pretraining.py` itself: accelerate turns FSDP on only for accelerator devices (CUDA, XPU, NPU, ...).
On CPU processes its state is MULTI_CPU and Trainer wraps the model in plain DDP, whatever the config says
(`accelerate launch --cpu` runs a single process). So this worker runs under `accelerate launch` with the
project's config (2 real ranks, the config's FSDP_* variables) and shards the model itself with torch's FSDP2
`fully_shard` as the config asks: every transformer layer its own unit (TRANSFORMER_BASED_WRAP), reshard after
forward, then the root, which holds the embeddings and the LM head tied to them. The training step is Trainer's:
AdamW, the loss over the step's labelled tokens (`num_items_in_batch`) times the number of processes, gradient
clipping at 1.0. It writes the gathered full state dict with `save_pretrained` (what `fsdp_state_dict_type:
FULL_STATE_DICT` makes Trainer do), the per-step losses and the world size.

It also tries accelerate's own `fsdp2_prepare_model` (what `accelerator.prepare` calls on a GPU) on a fresh model
and records the outcome: with accelerate 1.15 and torch 2.13 it fails for every BERT, ALBERT and T5 model,
transformers' own included (it shards the input embedding a second time after its `_no_split_modules` parent, and
puts a tied weight in a different FSDP group from its source).
"""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from hf_attn_variants import VariantBertForMaskedLM
from hf_attn_variants.presets import preset_config

PRESET, STEPS, GLOBAL_BATCH, SEQ, VOCAB = "bert-tiny-talking-heads", 3, 8, 32, 512
LAYERS = ("VariantBertLayer", "VariantAlbertLayer", "VariantT5Block")


def batches():
    """STEPS global batches of masked-LM inputs: about 15% of the tokens labelled, a padded tail in some rows."""
    g = torch.Generator().manual_seed(0)
    for _ in range(STEPS):
        ids = torch.randint(5, VOCAB, (GLOBAL_BATCH, SEQ), generator=g)
        mask = torch.ones_like(ids)
        mask[1::3, SEQ - 6 :] = 0
        labels = ids.masked_fill((torch.rand(ids.shape, generator=g) > 0.15) | (mask == 0), -100)
        yield dict(input_ids=ids.masked_fill(labels != -100, 4), attention_mask=mask, labels=labels)


def try_accelerate_prepare(config, rank) -> str:
    """'ok', or the error of accelerate's fsdp2_prepare_model on a fresh model with the launcher's FSDP plugin."""
    import types

    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model

    # the few fields of an Accelerator that fsdp2_prepare_model reads
    accelerator = types.SimpleNamespace(state=types.SimpleNamespace(fsdp_plugin=FullyShardedDataParallelPlugin()),
                                        mixed_precision="no", is_main_process=rank == 0, device=torch.device("cpu"))
    try:
        model = fsdp2_prepare_model(accelerator, VariantBertForMaskedLM(config))
        ids = torch.randint(5, VOCAB, (2, 8))
        model(input_ids=ids, labels=ids).loss.backward()
        return "ok"
    except Exception as err:  # noqa: BLE001  (recorded, not raised: the test reads it)
        return f"{type(err).__name__}: {err}"


def main(output_dir: str) -> None:
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    torch.manual_seed(42)
    config = preset_config(PRESET, vocab_size=VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = VariantBertForMaskedLM(config)
    if distributed:
        if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() != "true":
            raise SystemExit("Run under `accelerate launch --config_file examples/accelerate/fsdp.yaml`.")
        from torch.distributed.fsdp import FSDPModule, fully_shard

        accelerate_prepare = try_accelerate_prepare(config, rank)

        if os.environ.get("FSDP_VERSION") != "2" or os.environ.get("FSDP_AUTO_WRAP_POLICY") != "TRANSFORMER_BASED_WRAP":
            raise SystemExit("This worker follows examples/accelerate/fsdp.yaml: FSDP2, TRANSFORMER_BASED_WRAP.")
        reshard = os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower() == "true"
        for module in model.modules():  # every transformer layer its own unit; the root keeps the tied embeddings
            if type(module).__name__ in LAYERS:
                fully_shard(module, reshard_after_forward=reshard)
        fully_shard(model)
        sharded = sorted({type(m).__name__ for m in model.modules() if isinstance(m, FSDPModule)})
    else:
        sharded, accelerate_prepare = [], None
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    losses = []
    for batch in batches():
        items = (batch["labels"] != -100).sum()
        local = {k: v.chunk(world)[rank] for k, v in batch.items()}
        loss = model(**local, num_items_in_batch=items).loss * world  # Trainer: gradients are averaged
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        total = loss.detach() / world
        if distributed:
            dist.all_reduce(total)
        losses.append(total.item())
    if distributed:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state_dict = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        unwrapped = VariantBertForMaskedLM(config)  # a plain model of the same class saves the gathered weights
    else:
        state_dict, unwrapped = model.state_dict(), model
    if rank == 0:
        unwrapped.save_pretrained(output_dir, state_dict=state_dict)
        info = dict(world_size=world, losses=losses, sharded=sharded, accelerate_prepare=accelerate_prepare)
        (Path(output_dir) / "run.json").write_text(json.dumps(info))
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
