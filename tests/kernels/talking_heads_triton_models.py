"""Models with `attention_algorithm="triton"` against the same models with the eager core, loss and every gradient;
run by tests/kernels/test_talking_heads_triton.py in a process of its own (TRITON_INTERPRET must be set before transformers
imports triton; see talking_heads_triton_worker.py), not collected by pytest.

    python tests/kernels/talking_heads_triton_models.py      # one JSON line per model: the largest differences
"""

import json
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before transformers (and so triton) is imported

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for conftest
from conftest import build, head_inputs

MODELS = [
    ("VariantBertForMaskedLM", "talking_heads_dynamic"),
    ("VariantBertLMHeadModel", "talking_heads_hk_hv"),
    ("VariantT5ForConditionalGeneration", "talking_heads"),
]


def loss_and_grads(model, inputs):
    model.train()
    loss = model(**inputs).loss
    loss.backward()
    return loss.item(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for head, variant in MODELS:
        inputs = {k: v.to(device) for k, v in head_inputs(head, seq=9).items()}
        results = {}
        for algorithm in ("eager", "triton"):
            model = build(head, variant, attention_algorithm=algorithm).to(device)
            with torch.no_grad():  # off the init, so the head maps matter (see test_talking_heads_blockwise)
                g = torch.Generator().manual_seed(1)
                for p in model.parameters():
                    p.add_(0.2 * torch.randn(p.shape, generator=g).to(device))
            results[algorithm] = loss_and_grads(model, inputs)
        (loss_e, grads_e), (loss_t, grads_t) = results["eager"], results["triton"]
        worst = max(
            (grads_t[name] - g).abs().max().item() / max(1.0, g.abs().max().item()) for name, g in grads_e.items()
        )
        print(
            json.dumps(
                dict(
                    head=head,
                    variant=variant,
                    loss_difference=abs(loss_t - loss_e),
                    worst_gradient_difference=worst,
                    gradients=sorted(grads_e) == sorted(grads_t),
                )
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
