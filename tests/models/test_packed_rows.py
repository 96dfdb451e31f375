"""Packed rows, transformers' padding-free input: several sequences in one row, with position ids that restart at
each sequence (`DataCollatorWithFlattening`) or with the flash-attention keyword arguments (`cu_seq_lens_q/k`,
`max_length_q/k`), and no attention mask. BERT and ALBERT keep the sequences apart for every attention type of the
test table and a single-head Admin twin: each sequence's outputs and gradients are those of the sequence alone; the
dot-product variant equals transformers' own model on the same row; the masked-LM and token-classification losses of
a flattened batch are the losses of its labelled tokens sequence by sequence; the sequence-level heads answer once
per sequence. docs/unpadding.md describes the layout."""

import pytest
import torch
import transformers
from transformers import DataCollatorWithFlattening

import hf_attn_variants as hav
from conftest import TINY, TINY_ALBERT, VARIANTS, build, on_device
from hf_attn_variants.models import attention_base

pytestmark = pytest.mark.device

LENGTHS = (5, 9, 3, 9)  # two sequences of one length: the layout keeps its collator's order
TOLERANCE = dict(atol=1e-5, rtol=1e-5)
FAMILY_HEADS = {"bert": "VariantBert", "albert": "VariantAlbert"}
CASES = [*VARIANTS, "single_head_admin"]


def _build(head: str, case: str, **overrides):
    """`build`, and the single-head Admin twin: one head, Admin's omega moved off 1 so that it counts."""
    if case != "single_head_admin":
        return build(head, case, **overrides)
    model = build(head, "dot_product", num_attention_heads=1, admin=True, **overrides)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("admin_omega"):
                p.uniform_(0.5, 1.5)
    return model


def _sequences(seed: int = 0) -> list[dict]:
    """The features of four sequences, with token type ids (a second segment from the middle on)."""
    g = torch.Generator().manual_seed(seed)
    features = []
    for length in LENGTHS:
        ids = torch.randint(1, TINY["vocab_size"], (length,), generator=g)
        features.append(dict(input_ids=ids, token_type_ids=(torch.arange(length) >= length // 2).long()))
    return features


def _row(features: list[dict], how: str) -> dict:
    """The features packed into one row [1, total] the way `how` names: "position_ids" (restarting) or
    "cu_seq_lens" (the flash-attention keyword arguments, no position ids)."""
    row = {key: torch.cat([f[key] for f in features])[None] for key in features[0]}
    lengths = [len(f["input_ids"]) for f in features]
    if how == "position_ids":
        row["position_ids"] = torch.cat([torch.arange(n) for n in lengths])[None]
    else:
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        row.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max(lengths), max_length_k=max(lengths))
    return on_device(row)


@pytest.fixture
def packed_calls(monkeypatch) -> list:
    """The cumulative lengths of every per-sequence attention call made while the test runs."""
    calls, attend = [], attention_base.attend_per_sequence

    def spy(*args, **kwargs):
        calls.append(kwargs["cu_seq_lens_q"].tolist())
        return attend(*args, **kwargs)

    monkeypatch.setattr(attention_base, "attend_per_sequence", spy)
    return calls


def _alone(model, features: list[dict]) -> torch.Tensor:
    """The last hidden states of each sequence run alone, concatenated on the token axis [total, d]."""
    return torch.cat([model(**on_device({k: v[None] for k, v in f.items()})).last_hidden_state[0] for f in features])


@pytest.mark.parametrize("how", ["position_ids", "cu_seq_lens"])
@pytest.mark.parametrize("fam", list(FAMILY_HEADS))
@pytest.mark.parametrize("case", CASES)
def test_a_packed_row_gives_each_sequence_its_output_alone(case, fam, how, packed_calls):
    """Per-sequence attention (the packed path) and the block-diagonal mask (`unpad=False`) both give each sequence
    its output alone; without the restarts (one sequence of the whole row) the outputs move."""
    model = _build(f"{FAMILY_HEADS[fam]}Model", case)
    features = _sequences()
    row = _row(features, how)
    with torch.no_grad():
        alone = _alone(model, features)
        packed = model(**row).last_hidden_state[0]
        assert packed_calls == [[0, 5, 14, 17, 26]] * len(packed_calls) and packed_calls  # the packed path ran
        model.config.unpad = False
        masked = model(**row).last_hidden_state[0]
        model.config.unpad = True
        one_sequence = model(input_ids=row["input_ids"], token_type_ids=row["token_type_ids"]).last_hidden_state[0]
    torch.testing.assert_close(packed, alone, **TOLERANCE)
    torch.testing.assert_close(masked, alone, **TOLERANCE)
    assert (one_sequence - alone).abs().max() > 1e-3  # non-vacuity: the sequences would see each other


@pytest.mark.parametrize("fam", list(FAMILY_HEADS))
@pytest.mark.parametrize("case", CASES)
def test_packed_gradients_equal_the_sequences_alone(case, fam, packed_calls):
    """A training step (dropout off): the masked-LM loss summed over the packed row's tokens and every parameter's
    gradient equal the sums over the sequences run one by one."""
    model = _build(f"{FAMILY_HEADS[fam]}ForMaskedLM", case).train()
    features = _sequences(1)

    def step(batches):
        model.zero_grad(set_to_none=True)
        total = 0
        for batch in batches:
            logits = model(**batch).logits
            loss = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), batch["input_ids"].flatten(), reduction="sum"
            )
            loss.backward()
            total += loss.detach()
        return total, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    loss, grads = step([_row(features, "position_ids")])
    assert packed_calls
    alone_loss, alone_grads = step([on_device({k: v[None] for k, v in f.items()}) for f in features])
    torch.testing.assert_close(loss, alone_loss, atol=1e-4, rtol=1e-5)
    assert grads.keys() == alone_grads.keys() == {n for n, p in model.named_parameters() if p.requires_grad}
    for name, grad in alone_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


# transformers' model; whether it keeps a packed row's sequences apart itself (5.25's AlbertModel builds its mask
# without the position ids, so its sequences attend to each other there: ours is compared with each sequence alone)
REFERENCES = [("BertModel", TINY, True), ("AlbertModel", TINY_ALBERT, False)]


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize(("ref_name", "fields", "keeps_apart"), REFERENCES, ids=[r[0] for r in REFERENCES])
def test_dot_product_equals_transformers_on_a_packed_row(tmp_path, ref_name, fields, keeps_apart, attn_implementation):
    """transformers' model, warm-started into the dot-product variant, on a packed row (restarting position ids, no
    mask): the last hidden state is transformers' model on each sequence alone (and on the same row, where
    transformers keeps the sequences apart); the pooled output is transformers' for each sequence alone, where
    transformers pools the row once."""
    torch.manual_seed(0)
    ref = getattr(transformers, ref_name)(getattr(transformers, f"{ref_name[:-5]}Config")(**fields))
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.02 * torch.randn_like(p))
    ref.save_pretrained(tmp_path)
    ref = getattr(transformers, ref_name).from_pretrained(tmp_path, attn_implementation=attn_implementation)
    ours = getattr(hav, f"Variant{ref_name}").from_pretrained(tmp_path, attn_implementation=attn_implementation)
    ours, ref = on_device(ours.eval()), on_device(ref.eval())
    features = _sequences()
    row = _row(features, "position_ids")
    with torch.no_grad():
        got, theirs = ours(**row), ref(**row)
        alone = [ref(**on_device({k: v[None] for k, v in f.items()})) for f in features]
    expected = torch.cat([out.last_hidden_state for out in alone], dim=1)
    torch.testing.assert_close(got.last_hidden_state, expected, **TOLERANCE)
    if keeps_apart:
        torch.testing.assert_close(got.last_hidden_state, theirs.last_hidden_state, **TOLERANCE)
    assert theirs.pooler_output.shape[0] == 1
    torch.testing.assert_close(got.pooler_output, torch.cat([out.pooler_output for out in alone]), **TOLERANCE)


@pytest.mark.parametrize("head", ["ForMaskedLM", "ForTokenClassification"])
@pytest.mark.parametrize("fam", list(FAMILY_HEADS))
@pytest.mark.parametrize("case", ["dot_product", "talking_heads", "synth_mixture"])
def test_the_loss_of_a_flattened_batch_is_the_loss_of_its_labelled_tokens(case, fam, head):
    """transformers' `DataCollatorWithFlattening` (its separator label -100 at each sequence's first token): the
    loss equals the mean over the same labelled tokens, each sequence run alone."""
    model = _build(f"{FAMILY_HEADS[fam]}{head}", case, num_labels=3)
    g = torch.Generator().manual_seed(2)
    features = []
    for f in _sequences():
        n = len(f["input_ids"])
        labels = torch.randint(0, 3 if head == "ForTokenClassification" else TINY["vocab_size"], (n,), generator=g)
        labels[torch.rand(n, generator=g) < 0.4] = -100
        features.append(dict(input_ids=f["input_ids"].tolist(), labels=labels.tolist()))
    batch = on_device(DataCollatorWithFlattening(return_tensors="pt")(features))
    assert "attention_mask" not in batch and batch["input_ids"].shape[0] == 1
    with torch.no_grad():
        loss = model(**batch).loss
        total, count = 0.0, 0
        for f in features:
            labels = torch.tensor([-100, *f["labels"][1:]])  # the collator's separator at the first token
            logits = model(input_ids=on_device(torch.tensor([f["input_ids"]]))).logits[0]
            total += torch.nn.functional.cross_entropy(logits, on_device(labels), reduction="sum")
            count += int((labels != -100).sum())
    torch.testing.assert_close(loss, total / count, **TOLERANCE)


SEQUENCE_HEADS = [
    ("VariantBertForSequenceClassification", "logits", dict(labels=torch.tensor([0, 1, 2, 1]))),
    ("VariantAlbertForSequenceClassification", "logits", dict(labels=torch.tensor([0, 1, 2, 1]))),
    ("VariantBertForNextSentencePrediction", "logits", dict(labels=torch.tensor([0, 1, 1, 0]))),
    ("VariantBertForPreTraining", "seq_relationship_logits", {}),
    ("VariantAlbertForPreTraining", "sop_logits", {}),
]


@pytest.mark.parametrize(("head", "field", "labels"), SEQUENCE_HEADS, ids=[h[0][7:] for h in SEQUENCE_HEADS])
@pytest.mark.parametrize("how", ["position_ids", "cu_seq_lens"])
def test_sequence_level_heads_answer_once_per_sequence(head, field, labels, how):
    """Sequence classification, next-sentence and sentence-order prediction on a packed row: one answer per
    sequence, each that sequence's answer alone, and the loss over those answers."""
    model = _build(head, "talking_heads", num_labels=3)
    features = _sequences()
    with torch.no_grad():
        packed = model(**_row(features, how), **on_device(labels))
        alone = torch.cat([getattr(model(**on_device({k: v[None] for k, v in f.items()})), field) for f in features])
    assert getattr(packed, field).shape[0] == len(LENGTHS)
    torch.testing.assert_close(getattr(packed, field), alone, **TOLERANCE)
    if labels:
        loss = torch.nn.functional.cross_entropy(alone, on_device(labels["labels"]))
        torch.testing.assert_close(packed.loss, loss, **TOLERANCE)


@pytest.mark.parametrize("fam", list(FAMILY_HEADS))
def test_multiple_choice_refuses_a_packed_row(fam):
    model = _build(f"{FAMILY_HEADS[fam]}ForMultipleChoice", "dot_product")
    row = _row(_sequences()[:2], "position_ids")
    with pytest.raises(ValueError, match="choices"):
        model(**{k: v[:, None] for k, v in row.items()})


@pytest.mark.parametrize("fam", list(FAMILY_HEADS))
def test_bad_cumulative_lengths_are_refused(fam):
    model = _build(f"{FAMILY_HEADS[fam]}Model", "dot_product")
    row = _row(_sequences(), "cu_seq_lens")
    cu = row["cu_seq_lens_q"]
    with pytest.raises(ValueError, match="rise strictly from 0"):
        model(**{**row, "cu_seq_lens_q": cu[:-1], "cu_seq_lens_k": cu[:-1]})
    with pytest.raises(ValueError, match="cu_seq_lens_q == cu_seq_lens_k"):
        model(**{**row, "cu_seq_lens_k": cu.flip(0)})
    with pytest.raises(ValueError, match="one packed row"):
        model(**{**row, **{k: row[k].expand(2, -1) for k in ("input_ids", "token_type_ids")}})
    with pytest.raises(ValueError, match="padding"):
        model(**row, attention_mask=on_device(torch.ones_like(row["input_ids"]).index_fill(1, torch.tensor([0]), 0)))
    with pytest.raises(ValueError, match="position_ids` restart"):
        model(**row, position_ids=on_device(torch.arange(cu[-1].item())[None]))
    with pytest.raises(ValueError, match="shorter than the longest"):
        model(**{**row, "max_length_q": 3})


@pytest.mark.parametrize("case", ["dot_product", "talking_heads", "synth_mixture"])
def test_a_decoder_keeps_a_packed_rows_sequences_apart_causally(case, packed_calls):
    """`is_decoder` (BERT's causal LM head) on a packed row runs the mask path with a block-causal mask: each
    sequence's logits are its logits alone, as transformers' BertLMHeadModel gives them."""
    model = _build("VariantBertLMHeadModel", case)
    features = _sequences(3)
    with torch.no_grad():
        packed = model(**_row(features, "position_ids"), use_cache=False).logits[0]
        alone = torch.cat([model(**on_device({k: v[None] for k, v in f.items()})).logits[0] for f in features])
    assert packed_calls == []  # a decoder runs with a mask
    torch.testing.assert_close(packed, alone, **TOLERANCE)
