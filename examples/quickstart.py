"""Quick start: warm-start a talking-heads BERT from a vanilla BERT checkpoint, save it, load it anywhere.

    python examples/quickstart.py [--output-dir outputs/quickstart]

1. builds a small transformers `BertForMaskedLM` (random weights: nothing is downloaded) and saves it;
2. loads that checkpoint as `VariantBertForMaskedLM` with identity-initialised talking heads and checks that it
   gives the same logits as the original;
3. takes one training step, so the head maps move away from the identity;
4. saves the variant and loads it back through `AutoModelForMaskedLM.from_pretrained(..., trust_remote_code=True)`,
   the way a user of the Hub would, and checks the outputs again.
"""

import argparse
import sys
from pathlib import Path

import torch
import transformers

import hf_attn_variants as hav


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", default="outputs/quickstart")
    args = parser.parse_args(argv)
    out = Path(args.output_dir)
    torch.manual_seed(0)

    config = transformers.BertConfig(
        vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512
    )
    bert = transformers.BertForMaskedLM(config).eval()
    bert.save_pretrained(out / "vanilla-bert")
    print(f"saved a vanilla BERT to {out / 'vanilla-bert'}")

    model = hav.VariantBertForMaskedLM.from_pretrained(
        out / "vanilla-bert", attention_type="talking_heads", talking_heads_init="identity"
    ).eval()
    ids = torch.randint(5, 1000, (2, 16))
    with torch.no_grad():
        diff = (model(ids).logits - bert(ids).logits).abs().max().item()
    print(f"identity talking heads vs the vanilla checkpoint: max |logit difference| = {diff:.2e}")
    if diff > 1e-5:
        raise SystemExit("warm start is not function-preserving")

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = model(ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    model.eval()
    print(f"one training step, loss {loss.item():.3f}")

    model.save_pretrained(out / "talking-heads-bert")
    reloaded = transformers.AutoModelForMaskedLM.from_pretrained(
        out / "talking-heads-bert", trust_remote_code=True
    ).eval()
    with torch.no_grad():
        diff = (model(ids).logits - reloaded(ids).logits).abs().max().item()
    files = sorted(p.name for p in (out / "talking-heads-bert").iterdir())
    print(f"saved to {out / 'talking-heads-bert'}: {', '.join(files)}")
    print(f"reloaded through AutoModelForMaskedLM (trust_remote_code): max |logit difference| = {diff:.2e}")
    return 0 if diff == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
