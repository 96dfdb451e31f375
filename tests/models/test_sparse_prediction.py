"""`sparse_prediction=True`, a forward argument of the masked-LM heads of BERT and ALBERT: they predict only at the
labelled positions. It is never a config field, so a saved checkpoint keeps transformers' full logits.

Against the dense call on the same weights (the same model without the argument): the loss and every gradient
are equal, the logits rows are the dense logits at `labels != -100` in row-major order of the batch. Each case also
shows that a sparse path which dropped or misordered a row would fail these tolerances. Against transformers' own
`BertForMaskedLM` / `AlbertForMaskedLM` / `AlbertForPreTraining`, see `tests/models/test_parity.py`; a checkpoint saved with
a checkpoint trained with it serves `pipeline("fill-mask")`, see `tests/clients/test_pipeline.py`.
"""

import json

import pytest
import torch
import torch.nn.functional as F

from conftest import TINY, build, on_device

pytestmark = pytest.mark.device

HEADS = [
    "VariantBertForMaskedLM",
    "VariantBertForPreTraining",
    "VariantAlbertForMaskedLM",
    "VariantAlbertForPreTraining",
]
VARIANTS = ["dot_product", "talking_heads", "synth_mixture", "general_bilinear"]
CLOSE = dict(atol=1e-6, rtol=1e-5)  # two computations of one function on the same weights (float32)


def _logits(head: str, output):
    return output.prediction_logits if head.endswith("ForPreTraining") else output.logits


def _mlm_inputs(head: str, seed: int = 0) -> dict:
    """3 rows of 9 (two right-padded), labels at about 40% of the real positions, a different count per row."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, TINY["vocab_size"], (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    scored = (torch.rand(3, 9, generator=g) < 0.4) & (mask == 1)
    scored[0, 0] = scored[2, 2] = True  # every row but the padded one has a label at least
    labels = torch.randint(1, TINY["vocab_size"], (3, 9), generator=g).masked_fill(~scored, -100)
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels)
    if head.endswith("ForPreTraining"):
        inputs["sentence_order_label" if "Albert" in head else "next_sentence_label"] = torch.tensor([0, 1, 1])
    return on_device(inputs)


def _loss_and_grads(model, inputs, **kwargs):
    model.zero_grad()
    output = model(**inputs, **kwargs)
    output.loss.backward()
    return output, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("head", HEADS)
def test_sparse_loss_gradients_and_logits_equal_dense(head, variant):
    model = build(head, variant)  # eval mode (no dropout, e.g. ALBERT's SOP head): both passes are deterministic
    with torch.no_grad():  # confident logits (the decoder is tied to them), so a misplaced row moves the loss
        model.get_input_embeddings().weight.normal_(std=1.0)
    inputs = _mlm_inputs(head)
    scored = inputs["labels"] != -100
    dense, dense_grads = _loss_and_grads(model, inputs)  # the default: transformers' full logits
    sparse, sparse_grads = _loss_and_grads(model, inputs, sparse_prediction=True)

    assert _logits(head, dense).shape == (3, 9, TINY["vocab_size"])
    assert _logits(head, sparse).shape == (scored.sum().item(), TINY["vocab_size"])
    torch.testing.assert_close(_logits(head, sparse), _logits(head, dense)[scored], **CLOSE)
    torch.testing.assert_close(sparse.loss, dense.loss, **CLOSE)
    assert sparse_grads.keys() == dense_grads.keys()
    for name, grad in dense_grads.items():
        torch.testing.assert_close(sparse_grads[name], grad, **CLOSE, msg=name)
    # the MLM part of the loss is the cross-entropy of those rows against the labels in the same order
    mlm_loss = F.cross_entropy(_logits(head, sparse), inputs["labels"][scored])
    dense_mlm_loss = F.cross_entropy(_logits(head, dense).flatten(0, 1), inputs["labels"].flatten())
    torch.testing.assert_close(mlm_loss, dense_mlm_loss, **CLOSE)

    # non-vacuity: rows misordered (each scored against its neighbour's label) or one row dropped fail the tolerance
    logits, labels = _logits(head, sparse), inputs["labels"][scored]
    assert not torch.allclose(F.cross_entropy(logits, labels.roll(1)), mlm_loss, **CLOSE)
    assert not torch.allclose(F.cross_entropy(logits[1:], labels[1:]), mlm_loss, **CLOSE)
    assert not torch.allclose(logits.roll(1, dims=0), _logits(head, dense)[scored], **CLOSE)


@pytest.mark.parametrize("head", HEADS)
def test_without_labels_the_logits_are_full(head):
    model = build(head, "talking_heads")
    inputs = _mlm_inputs(head)
    with torch.no_grad():
        dense = _logits(head, model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]))
        sparse = _logits(
            head, model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], sparse_prediction=True)
        )
    assert sparse.shape == (3, 9, TINY["vocab_size"])
    torch.testing.assert_close(sparse, dense, **CLOSE)


@pytest.mark.parametrize("head", HEADS)
def test_return_dict_false_gives_the_sparse_tensors(head):
    model = build(head, "talking_heads")
    inputs = _mlm_inputs(head)
    with torch.no_grad():
        as_dict = model(**inputs, sparse_prediction=True)
        as_tuple = model(**inputs, sparse_prediction=True, return_dict=False)
    loss, logits = as_tuple[:2]
    assert logits.shape == (int((inputs["labels"] != -100).sum()), TINY["vocab_size"])
    torch.testing.assert_close(loss, as_dict.loss, **CLOSE)
    torch.testing.assert_close(logits, _logits(head, as_dict), **CLOSE)


@pytest.mark.parametrize("head", ["VariantBertForMaskedLM", "VariantAlbertForMaskedLM"])
def test_num_items_in_batch_gives_the_dense_loss(head):
    """Trainer's gradient accumulation passes `num_items_in_batch`: the sum over the scored rows divided by it."""
    model = build(head, "dot_product")
    inputs = _mlm_inputs(head)
    with torch.no_grad():
        dense = model(**inputs, num_items_in_batch=torch.tensor(25)).loss
        sparse = model(**inputs, num_items_in_batch=torch.tensor(25), sparse_prediction=True).loss
        mean = model(**inputs).loss
    torch.testing.assert_close(sparse, dense, **CLOSE)
    n_scored = (inputs["labels"] != -100).sum()
    torch.testing.assert_close(sparse, mean * n_scored / 25, **CLOSE)


@pytest.mark.parametrize("head", ["VariantBertForMaskedLM", "VariantAlbertForPreTraining"])
def test_a_checkpoint_that_saved_the_retired_field_loads_with_full_logits(tmp_path, head):
    """Until 2026-12 `sparse_prediction` was a config field and run_pretraining saved it as true. Such a checkpoint
    loads with this package's classes, warns once that the field no longer applies, and gives transformers' contract
    (full logits with labels); saving it again drops the field."""
    model = build(head, "talking_heads")
    model.save_pretrained(tmp_path / "old")
    config_file = tmp_path / "old" / "config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "sparse_prediction": True}))
    with pytest.warns(FutureWarning, match="`sparse_prediction` is no longer a config field"):
        loaded = type(model).from_pretrained(tmp_path / "old")
    inputs = _mlm_inputs(head)
    with torch.no_grad():
        logits = _logits(head, loaded.eval()(**inputs))
        expected = _logits(head, model(**inputs))
    assert logits.shape == (3, 9, TINY["vocab_size"])
    torch.testing.assert_close(logits, expected, **CLOSE)
    loaded.save_pretrained(tmp_path / "new")
    assert "sparse_prediction" not in json.loads((tmp_path / "new" / "config.json").read_text())
