"""Inference on a padded batch, packed (`unpad=True`, the default) and padded, against transformers' SDPA BERT.

    OMP_NUM_THREADS=1 python benchmarks/bench_unpadding.py [--repeats 7] [--batch-size 8] [--seq-len 512] [--train]

A bert-mini `BertForMaskedLM` (4 layers, width 256, 4 heads, FFN 1024, vocab 8000) with SDPA attention, and
`VariantBertForMaskedLM` of each attention type loaded from its weights, in `eval()` under `torch.inference_mode()`,
on `--batch-size` rows of `--seq-len` positions whose real lengths are drawn uniformly from `--min-len`..`--seq-len`
(fixed by `--seed`; `--min-len` equal to `--seq-len`: no padding). Per repeat every model runs once in turn
(interleaved); each row prints the fastest time, its ratio to the fastest transformers time, and the median and range
of the per-repeat ratios (time / that repeat's transformers time), which show how much a loaded machine moved them.
`--train` times a training step instead (docs/unpadding.md).

`--packed-row` adds transformers' padding-free input: the same sequences as one row [1, total] with position ids that
restart at each (as `DataCollatorWithFlattening` gives them, no mask), run by transformers' model (which attends over
the whole row and masks) and by ours (each sequence within itself); ratios stay against transformers' padded batch.

    OMP_NUM_THREADS=1 python benchmarks/bench_unpadding.py --train --packed-row --batch-size 16 --seq-len 256 --min-len 16

`--t5` runs T5's encoder instead (`T5EncoderModel` of the same shape: d_model 256, 4 layers, 4 heads of 64, FFN
1024, vocab 8000, SDPA, against `VariantT5EncoderModel` from its weights; a training step's loss is the mean square
of the last hidden state at the real tokens).
"""

import argparse
import tempfile
import time

import torch
from transformers import BertConfig, BertForMaskedLM, T5Config, T5EncoderModel
from transformers.utils import logging

from hf_attn_variants import VariantBertForMaskedLM, VariantT5EncoderModel

ROWS = {  # name -> (VariantBert fields, None: transformers' model; the input: "padded" batch or "packed row")
    "transformers sdpa": (None, "padded"),
    "dot product, packed": (dict(attention_type="dot_product"), "padded"),
    "dot product, padded": (dict(attention_type="dot_product", unpad=False), "padded"),
    "talking heads, packed": (dict(attention_type="talking_heads"), "padded"),
    "talking heads, padded": (dict(attention_type="talking_heads", unpad=False), "padded"),
}
PACKED_ROWS = {
    "transformers sdpa, row": (None, "packed row"),
    "dot product, row": (dict(attention_type="dot_product"), "packed row"),
    "talking heads, row": (dict(attention_type="talking_heads"), "packed row"),
}

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--seq-len", type=int, default=512)
p.add_argument("--min-len", type=int, default=64)
p.add_argument("--repeats", type=int, default=7)
p.add_argument("--seed", type=int, default=0)
p.add_argument(
    "--train",
    action="store_true",
    help="time a training step instead: train() (dropout 0.1), labels at 15%% of the real tokens, backward",
)
p.add_argument("--packed-row", action="store_true", help="add the rows of the same sequences packed into one row")
p.add_argument("--t5", action="store_true", help="T5's encoder instead of BERT's masked LM")
p.add_argument("--device", default="cpu", help="where the models run (cuda: each time waits for the GPU)")
args = p.parse_args()
if args.t5 and args.packed_row:
    p.error("--packed-row is BERT's: T5's encoder takes no position ids")
rows = {**ROWS, **(PACKED_ROWS if args.packed_row else {})}

logging.set_verbosity_error()  # the variants' own parameters are new: no loading report
torch.manual_seed(args.seed)
if args.t5:
    config = T5Config(vocab_size=8000, d_model=256, d_kv=64, d_ff=1024, num_layers=4, num_heads=4)
    reference, ours = T5EncoderModel, VariantT5EncoderModel
else:
    config = BertConfig(
        vocab_size=8000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024
    )
    reference, ours = BertForMaskedLM, VariantBertForMaskedLM
models = {}
with tempfile.TemporaryDirectory() as folder:
    reference(config).save_pretrained(folder)
    for name, (fields, _) in rows.items():
        cls = reference if fields is None else ours
        model = cls.from_pretrained(folder, attn_implementation="sdpa", **(fields or {}))
        models[name] = model.to(args.device).train(args.train)
lengths = torch.randint(args.min_len, args.seq_len + 1, (args.batch_size,))
ids = torch.randint(1, config.vocab_size, (args.batch_size, args.seq_len))
mask = (torch.arange(args.seq_len) < lengths[:, None]).long()
labels = ids.masked_fill((mask == 0) | (torch.rand(ids.shape) > 0.15), -100)
real = mask.bool()
inputs = {
    "padded": dict(input_ids=ids, attention_mask=mask),
    "packed row": dict(
        input_ids=ids[real][None], position_ids=torch.cat([torch.arange(n) for n in lengths.tolist()])[None]
    ),
}
targets = {"padded": labels, "packed row": labels[real][None]}
ids, mask, labels, real = (t.to(args.device) for t in (ids, mask, labels, real))
inputs = {kind: {k: v.to(args.device) for k, v in given.items()} for kind, given in inputs.items()}
targets = {kind: t.to(args.device) for kind, t in targets.items()}


def synchronize():
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()


def step(name):
    model, (_, kind) = models[name], rows[name]
    if args.train and args.t5:
        model(**inputs[kind]).last_hidden_state[real].pow(2).mean().backward()
        return
    if args.train:
        model(**inputs[kind], labels=targets[kind]).loss.backward()
        return
    with torch.inference_mode():
        model(**inputs[kind])


times = {name: [] for name in models}
for repeat in range(args.repeats + 1):  # the first round warms up
    for name in models:
        synchronize()
        start = time.perf_counter()
        step(name)
        synchronize()
        if repeat:
            times[name].append(time.perf_counter() - start)
print(
    f"{'T5 encoder ' if args.t5 else ''}{'training step' if args.train else 'inference'}, {args.batch_size} x "
    f"{args.seq_len}, lengths "
    f"{sorted(lengths.tolist())} ({int(mask.sum())} real tokens), {torch.get_num_threads()} thread(s), fastest of "
    f"{args.repeats}"
)
base = times["transformers sdpa"]
for name, t in times.items():
    ratios = sorted(a / b for a, b in zip(t, base))
    print(
        f"{name:24s} {1000 * min(t):8.1f} ms  {min(t) / min(base):5.2f}x  (per repeat: median "
        f"{ratios[len(ratios) // 2]:.2f}, {ratios[0]:.2f}-{ratios[-1]:.2f})"
    )
