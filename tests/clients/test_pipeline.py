"""A saved checkpoint works in transformers' `pipeline("fill-mask")`, in-process and through remote code."""

import pytest
import torch
from transformers import BertTokenizer, pipeline

from conftest import TINY, build

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "ran", "to", "house"]


def _tokenizer():
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    fillers = [f"w{i}" for i in range(TINY["vocab_size"] - len(specials) - len(WORDS))]
    vocab = {token: i for i, token in enumerate(specials + WORDS + fillers)}
    return BertTokenizer(vocab=vocab)


@pytest.mark.parametrize("head", ["VariantBertForMaskedLM", "VariantAlbertForMaskedLM"])
def test_fill_mask_pipeline(tmp_path, head):
    model = build(head, "talking_heads")
    tokenizer = _tokenizer()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    fill = pipeline("fill-mask", model=str(tmp_path), trust_remote_code=True, top_k=3)
    assert type(fill.model).__name__ == head
    results = fill("the cat [MASK] on the mat")
    assert len(results) == 3
    # the pipeline's scores are the model's own softmax at the masked position
    enc = tokenizer("the cat [MASK] on the mat", return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[0, enc.input_ids[0].tolist().index(tokenizer.mask_token_id)]
    probs = logits.softmax(-1)
    for r in results:
        assert r["score"] == pytest.approx(probs[r["token"]].item(), abs=1e-5)
    assert [r["token"] for r in results] == probs.topk(3).indices.tolist()
