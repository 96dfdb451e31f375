"""Small-scale reproduction of "Multi-head or Single-head?" (Liu et al. 2021): a shallow multi-head Post-LN BERT
against its deep single-head twin, with default initialization and with Admin.

    python examples/single_head_admin.py --output_dir outputs/single_head_admin     # about 5 minutes on 2 CPU cores

Every run trains a masked language model on the same data, with the same steps, learning rate schedule and seed:
  multi-head   L x h   (default init)
  single-head  L*h x 1 (default init)          same total number of heads, about the same size
  single-head  L*h x 1 + Admin (profiled on the first batch)
The data is real text that ships with Python itself: the pydoc topic pages (`pydoc_data.topics`, ~465k
characters of the Python documentation), split into words and punctuation; the most frequent words form the
vocabulary. It prints a table (final eval MLM loss, perplexity, whether the run diverged, seconds per step) and
writes `eval_loss.png` with the eval curves.
"""

import math
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import torch
from transformers import HfArgumentParser

import hf_attn_variants as hav
from hf_attn_variants.admin import admin_profile
from hf_attn_variants.presets import single_head_twin

SPECIAL = ["[PAD]", "[UNK]", "[MASK]"]


@dataclass
class Arguments:
    output_dir: str = field(default="outputs/single_head_admin", metadata={"help": "Where the table and PNG go."})
    layers: int = field(default=4, metadata={"help": "L, the layers of the multi-head model."})
    heads: int = field(default=8, metadata={"help": "h, its heads; the twin has L*h layers of one head."})
    hidden_size: int = field(default=256, metadata={"help": "Model width (head size = width / h)."})
    vocab_size: int = field(default=4000, metadata={"help": "Words kept in the vocabulary (+3 special tokens)."})
    seq_len: int = field(default=64, metadata={"help": "Tokens per training sequence."})
    batch_size: int = field(default=32, metadata={"help": "Sequences per step."})
    steps: int = field(default=400, metadata={"help": "Training steps per run."})
    learning_rate: float = field(default=1e-3, metadata={"help": "Peak learning rate (AdamW)."})
    warmup_steps: int = field(default=40, metadata={"help": "Linear warm-up steps, then linear decay."})
    eval_every: int = field(default=50, metadata={"help": "Steps between evaluations."})
    seed: int = field(default=0, metadata={"help": "Seed of data order, masking and init (the same for every run)."})


def corpus_ids(vocab_size: int):
    """The pydoc topics as word/punctuation ids; the most frequent `vocab_size` words form the vocabulary."""
    from pydoc_data.topics import topics

    words = re.findall(r"\w+|[^\w\s]", " ".join(topics[k] for k in sorted(topics)).lower())
    vocab = SPECIAL + [w for w, _ in Counter(words).most_common(vocab_size)]
    index = {w: i for i, w in enumerate(vocab)}
    return torch.tensor([index.get(w, 1) for w in words]), len(vocab)


def mask_tokens(ids: torch.Tensor, vocab: int, generator: torch.Generator):
    """BERT's masking: 15% of tokens are predicted; of those 80% become [MASK], 10% a random word, 10% stay."""
    labels = ids.clone()
    chosen = torch.rand(ids.shape, generator=generator) < 0.15
    labels[~chosen] = -100
    inputs = ids.clone()
    roll = torch.rand(ids.shape, generator=generator)
    inputs[chosen & (roll < 0.8)] = SPECIAL.index("[MASK]")
    random_words = torch.randint(len(SPECIAL), vocab, ids.shape, generator=generator)
    swap = chosen & (roll >= 0.8) & (roll < 0.9)
    inputs[swap] = random_words[swap]
    return inputs, labels


def run(name, config, train, evaluation, args, admin):
    torch.manual_seed(args.seed)
    model = hav.VariantBertForMaskedLM(config)
    g = torch.Generator().manual_seed(args.seed)
    if admin:
        admin_profile(model, {"input_ids": train[: args.batch_size]})
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / args.warmup_steps, max(0.0, (args.steps - s) / (args.steps - args.warmup_steps)))
    )
    curve, start, diverged = [], time.perf_counter(), False
    for step in range(1, args.steps + 1):
        model.train()
        batch = train[torch.randint(0, len(train), (args.batch_size,), generator=g)]
        inputs, labels = mask_tokens(batch, config.vocab_size, g)
        loss = model(input_ids=inputs, labels=labels).loss
        if not torch.isfinite(loss):
            diverged = True
            break
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % args.eval_every == 0 or step == args.steps:
            curve.append((step, evaluate(model, evaluation, config.vocab_size, args)))
            print(f"{name:28s} step {step:4d}  train {loss.item():.3f}  eval {curve[-1][1]:.3f}", flush=True)
    seconds = (time.perf_counter() - start) / step
    final = curve[-1][1] if curve and not diverged else float("nan")
    diverged = diverged or not math.isfinite(final) or final > curve[0][1]
    return dict(name=name, params=sum(p.numel() for p in model.parameters()), curve=curve, final=final,
                diverged=diverged, seconds=seconds)


@torch.no_grad()
def evaluate(model, evaluation, vocab, args):
    model.eval()
    g = torch.Generator().manual_seed(1234)  # the same masks at every evaluation and for every model
    losses = []
    for i in range(0, len(evaluation), args.batch_size):
        inputs, labels = mask_tokens(evaluation[i : i + args.batch_size], vocab, g)
        losses.append(model(input_ids=inputs, labels=labels).loss.item())
    return sum(losses) / len(losses)


def main(argv=None) -> list[dict]:
    (args,) = HfArgumentParser(Arguments).parse_args_into_dataclasses(argv)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise SystemExit("This script draws its curves with matplotlib: pip install -e '.[examples]'") from err
    from pathlib import Path

    ids, vocab = corpus_ids(args.vocab_size)
    sequences = ids[: len(ids) // args.seq_len * args.seq_len].view(-1, args.seq_len)
    order = torch.randperm(len(sequences), generator=torch.Generator().manual_seed(args.seed))
    n_eval = max(args.batch_size, len(sequences) // 10)
    evaluation, train = sequences[order[:n_eval]], sequences[order[n_eval:]]
    print(f"{len(ids)} tokens, vocabulary {vocab}, {len(train)} training and {len(evaluation)} eval sequences")

    base = hav.VariantBertConfig(
        vocab_size=vocab, hidden_size=args.hidden_size, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, intermediate_size=4 * args.hidden_size, max_position_embeddings=args.seq_len,
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, pad_token_id=0,
    )
    twin, _ = single_head_twin(base)
    twin_admin = hav.VariantBertConfig(**{**twin.to_dict(), "admin": True})
    runs = [
        run(f"multi-head {args.layers}x{args.heads}", base, train, evaluation, args, admin=False),
        run(f"single-head {twin.num_hidden_layers}x1", twin, train, evaluation, args, admin=False),
        run(f"single-head {twin.num_hidden_layers}x1 + Admin", twin_admin, train, evaluation, args, admin=True),
    ]
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["| model | parameters | final eval MLM loss | perplexity | diverged | s/step |", "|---|---:|---:|---:|---|---:|"]
    for r in runs:
        lines.append(f"| {r['name']} | {r['params'] / 1e6:.2f}M | {r['final']:.3f} | {math.exp(r['final']):.1f} | "
                     f"{'yes' if r['diverged'] else 'no'} | {r['seconds']:.3f} |")
    table = "\n".join(lines)
    print("\n" + table)
    (out / "results.md").write_text(table + "\n")
    for r in runs:
        plt.plot([s for s, _ in r["curve"]], [v for _, v in r["curve"]], marker="o", label=r["name"])
    plt.xlabel("step")
    plt.ylabel("eval MLM loss")
    plt.title(f"MLM on the pydoc topics, {args.steps} steps, lr {args.learning_rate}")
    plt.legend()
    plt.savefig(out / "eval_loss.png", dpi=120, bbox_inches="tight")
    print(f"wrote {out / 'results.md'} and {out / 'eval_loss.png'}")
    return runs


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0)
