"""The packed layout of BERT and ALBERT (`unpad`, their default): on a padded batch the encoder runs on the real
tokens only and attends within each sequence (`packed_sequences.PackedSequences`). Against the padded batch
(`unpad=False`, transformers' layout) for every attention type of the test table: the logits and the last hidden
state at the real tokens and every gradient are equal within float tolerance, each row's output is the row's alone,
the padded positions of the last hidden state are zeros; a batch without padding and the calls that need the padded
layout (every layer's hidden states or weights, a decoder) run it, a chunked feed-forward runs packed; a saved
checkpoint runs packed as remote code. T5's encoder packs a padded batch too (its outputs, logits, gradients and generated tokens are
the padded batch's). docs/unpadding.md describes the layout."""

import json
import textwrap

import pytest
import torch

from conftest import TINY, VARIANTS, at_real_tokens, build, on_device
from hf_attn_variants.isolation import run_isolated
from hf_attn_variants.models import attention_base
from hf_attn_variants.models.attention_base import sequence_runs
from hf_attn_variants.models.packed_sequences import PackedSequences

pytestmark = pytest.mark.device  # on HAV_TEST_DEVICE (a GPU where there is one): the packed layout runs there too

HEADS = ["VariantBertForMaskedLM", "VariantAlbertForMaskedLM"]
TOLERANCE = dict(atol=1e-5, rtol=1e-5)  # float32: two orders of the same sums


def _batch(position_ids: bool = False, seed: int = 0) -> dict:
    """5 rows of 12 tokens: full, right-padded to 7, 7 (one length twice: one attention call) and 3, and left-padded
    to 8; with `position_ids`, the position ids that count each row's real tokens (as `generate` gives them)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, TINY["vocab_size"], (5, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = mask[2, 7:] = mask[3, 3:] = mask[4, :4] = 0
    inputs = dict(input_ids=ids, attention_mask=mask)
    if position_ids:
        inputs["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)
    return on_device(inputs)


@pytest.fixture
def packed_runs(monkeypatch) -> list:
    """The runs of equal-length sequences of every packed attention call (one per layer application) made while the
    test runs."""
    runs, attend = [], attention_base.attend_per_sequence

    def spy(*args, **kwargs):
        runs.append(tuple(sequence_runs(kwargs["cu_seq_lens_q"])))
        return attend(*args, **kwargs)

    monkeypatch.setattr(attention_base, "attend_per_sequence", spy)
    return runs


def _outputs(model, inputs: dict, unpad: bool):
    """Logits and the last hidden state of `model` on `inputs` with `config.unpad` = `unpad`."""
    model.config.unpad = unpad
    try:
        return model(**inputs).logits, model.base_model(**inputs).last_hidden_state
    finally:
        model.config.unpad = True


@pytest.mark.parametrize("position_ids", [False, True], ids=["columns", "position_ids"])
@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_packed_equals_padded_at_the_real_tokens(variant, head, position_ids, packed_runs):
    model = build(head, variant)
    inputs = _batch(position_ids)
    real = inputs["attention_mask"]
    with torch.no_grad():
        packed = _outputs(model, inputs, unpad=True)
        assert packed_runs and packed_runs[0] == ((1, 3), (2, 7), (1, 8), (1, 12))  # it ran packed, lengths grouped
        padded = _outputs(model, inputs, unpad=False)
        # a row's output is its own: the right-padded row of 7 alone, without padding
        alone = _outputs(model, {k: v[1:2, :7] for k, v in inputs.items() if k != "attention_mask"}, unpad=True)
        unmasked = _outputs(model, {"input_ids": inputs["input_ids"]}, unpad=True)  # (position ids that repeat at
        # the pads would be packed sequences of their own, as transformers' masks read them)
    for ours, theirs, single, dropped in zip(packed, padded, alone, unmasked, strict=True):
        torch.testing.assert_close(at_real_tokens(ours, real), at_real_tokens(theirs, real), **TOLERANCE)
        torch.testing.assert_close(ours[1:2, :7], single, **TOLERANCE)
        # non-vacuity: with the mask dropped, the real tokens see the pads and their outputs move
        assert (at_real_tokens(dropped, real) - at_real_tokens(theirs, real)).abs().max() > 1e-3
    assert packed[1][real == 0].abs().max() == 0  # the padded positions of the last hidden state hold zeros


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_packed_gradients_equal_padded(variant, head, packed_runs):
    """A training step (dropout off, so that both layouts compute one function): the loss and every parameter's
    gradient, the variant's own included, equal the padded batch's."""
    model = build(head, variant).train()
    inputs = _batch()
    inputs["labels"] = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    results = []
    for unpad in (True, False):
        model.config.unpad = unpad
        model.zero_grad(set_to_none=True)
        loss = model(**inputs).loss
        loss.backward()
        results.append((loss.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}))
    (loss, grads), (padded_loss, padded_grads) = results
    assert packed_runs  # the first pass ran packed
    torch.testing.assert_close(loss, padded_loss, **TOLERANCE)
    assert grads.keys() == padded_grads.keys() == {name for name, p in model.named_parameters() if p.requires_grad}
    for name, grad in padded_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize(
    "head", [*HEADS, "VariantBertForPreTraining", "VariantAlbertForPreTraining"], ids=lambda h: h[7:]
)
def test_the_masked_lm_head_projects_only_the_real_tokens(head, packed_runs):
    """Packed, the head's vocabulary projection runs on the real tokens and one zero vector (the padded positions'
    hidden state), and the scores equal the head at every position of the returned last hidden state; where the
    padded batch runs (every layer's hidden states asked for), the head runs at every position as transformers'."""
    model = build(head, "talking_heads")
    inputs = _batch()
    rows = []
    hook = model.get_output_embeddings().register_forward_hook(lambda m, args, out: rows.append(args[0].shape[:-1]))
    try:
        with torch.no_grad():
            for extra in ({}, {"output_hidden_states": True}):
                rows.clear()
                out = model(**inputs, **extra)
                scores = out.logits if hasattr(out, "logits") else out.prediction_logits
                projected = sum(torch.Size(r).numel() for r in rows)
                full = _head(model)(model.base_model(**inputs, **extra).last_hidden_state)  # every position
                torch.testing.assert_close(scores, full, **TOLERANCE)
                if extra:
                    assert projected == 5 * 12
                else:
                    assert packed_runs and projected == int(inputs["attention_mask"].sum()) + 1
    finally:
        hook.remove()


def _head(model):
    """The masked-LM prediction head (transform and vocabulary projection) of a BERT or ALBERT model."""
    return model.cls.predictions if hasattr(model, "cls") else model.predictions


@pytest.mark.parametrize("head", HEADS)
def test_sparse_prediction_runs_packed(head, packed_runs):
    """`sparse_prediction=True` scores the labelled rows of the unpacked last hidden state: the padded batch's loss
    and logits rows."""
    model = build(head, "talking_heads")
    inputs = _batch()
    scored = on_device(torch.rand(5, 12, generator=torch.Generator().manual_seed(1)) > 0.5)
    inputs["labels"] = inputs["input_ids"].masked_fill(~scored | (inputs["attention_mask"] == 0), -100)
    with torch.no_grad():
        packed = model(**inputs, sparse_prediction=True)
        assert packed_runs
        model.config.unpad = False
        padded = model(**inputs, sparse_prediction=True)
    assert packed.logits.shape == (int((inputs["labels"] != -100).sum()), TINY["vocab_size"])
    torch.testing.assert_close(packed.logits, padded.logits, **TOLERANCE)
    torch.testing.assert_close(packed.loss, padded.loss, **TOLERANCE)


@pytest.mark.parametrize("head", HEADS)
def test_a_batch_without_padding_runs_as_before(head, packed_runs):
    """An all-ones mask (and no mask) runs the padded batch, whatever `unpad` says."""
    model = build(head, "synth_mixture")
    inputs = _batch()
    inputs["attention_mask"] = torch.ones_like(inputs["attention_mask"])
    with torch.no_grad():
        ones, none = model(**inputs).logits, model(input_ids=inputs["input_ids"]).logits
        model.config.unpad = False
        padded = model(**inputs).logits
    assert packed_runs == []
    torch.testing.assert_close(ones, padded, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(none, padded, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("shape", [(2, 4), (1, 1)], ids=["2x4", "1x1"])
@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_batch_without_a_real_token_runs_the_padded_batch(variant, head, shape, packed_runs):
    """Every row fully masked (or a 1 x 1 batch with mask [[0]]): nothing to pack, so the padded batch runs, as
    transformers' models run it: finite outputs equal to `unpad=False`'s, no crash."""
    model = build(head, variant)
    ids = torch.randint(1, TINY["vocab_size"], shape, generator=torch.Generator().manual_seed(0))
    inputs = on_device(dict(input_ids=ids, attention_mask=torch.zeros_like(ids)))
    with torch.no_grad():
        logits, hidden = _outputs(model, inputs, unpad=True)
        padded_logits, padded_hidden = _outputs(model, inputs, unpad=False)
    assert packed_runs == [] and logits.isfinite().all() and hidden.isfinite().all()
    torch.testing.assert_close(logits, padded_logits, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(hidden, padded_hidden, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("head", HEADS)
def test_calls_that_need_the_padded_batch_run_it(head, packed_runs):
    """Every layer's hidden states or attention weights (argument or config field) and `unpad=False` run the padded
    batch, with transformers' shapes; its real tokens are the packed run's."""
    model = build(head, "talking_heads")
    inputs = _batch()
    real = inputs["attention_mask"]
    with torch.no_grad():
        expected = model.base_model(**inputs).last_hidden_state
        packed_calls = len(packed_runs)
        hidden = model.base_model(**inputs, output_hidden_states=True).hidden_states
        weights = model.base_model(**inputs, output_attentions=True).attentions
        for field, value in (("output_hidden_states", True), ("unpad", False)):
            default = getattr(model.config, field)
            setattr(model.config, field, value)
            padded = model.base_model(**inputs).last_hidden_state
            setattr(model.config, field, default)
            torch.testing.assert_close(at_real_tokens(padded, real), at_real_tokens(expected, real), **TOLERANCE)
    assert len(packed_runs) == packed_calls  # none of these ran packed
    layers = model.config.num_hidden_layers * getattr(model.config, "inner_group_num", 1)
    assert [h.shape for h in hidden] == [(5, 12, TINY["hidden_size"])] * (layers + 1)
    assert [w.shape for w in weights] == [(5, TINY["num_attention_heads"], 12, 12)] * layers
    torch.testing.assert_close(at_real_tokens(hidden[-1], real), at_real_tokens(expected, real), **TOLERANCE)


@pytest.mark.parametrize("head", HEADS)
def test_a_chunked_feed_forward_runs_packed(head, packed_runs):
    """`chunk_size_feed_forward` cuts the packed token axis (the feed-forward is per token): the same outputs,
    packed, as without chunks and as the padded batch at the real tokens."""
    model, chunked_model = build(head, "talking_heads"), build(head, "talking_heads", chunk_size_feed_forward=4)
    inputs = _batch()
    real = inputs["attention_mask"]
    with torch.no_grad():
        whole = model.base_model(**inputs).last_hidden_state
        calls = len(packed_runs)
        chunked = chunked_model.base_model(**inputs).last_hidden_state
        assert len(packed_runs) > calls  # it ran packed
        padded = _outputs(chunked_model, inputs, unpad=False)[1]
    torch.testing.assert_close(chunked, whole, **TOLERANCE)
    torch.testing.assert_close(at_real_tokens(padded, real), at_real_tokens(chunked, real), **TOLERANCE)


def test_a_decoder_runs_the_padded_batch(packed_runs):
    model = build("VariantBertLMHeadModel", "talking_heads")
    with torch.no_grad():
        model(**_batch())
    assert packed_runs == []


def test_the_layout_of_a_mask():
    """Shortest first, equal lengths side by side, an empty row skipped; pack and unpack round trip; positions are
    the columns or the given position ids."""
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 1, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0]])
    layout = PackedSequences.of_padding(mask)
    assert sequence_runs(layout.cu_seq_lens) == [(2, 2), (2, 3)] and layout.lengths == [2, 2, 3, 3]
    assert layout.indices.tolist() == [4, 5, 16, 17, 0, 1, 2, 9, 10, 11]
    assert layout.positions.tolist() == [[0, 1, 0, 1, 0, 1, 2, 1, 2, 3]]
    x = torch.randn(5, 4, 3)
    packed = layout.pack(x)
    assert packed.shape == (1, 10, 3)
    torch.testing.assert_close(layout.unpack(packed), x * mask[..., None])
    positions = torch.arange(20).view(5, 4)
    assert PackedSequences.of_padding(mask, positions).positions.tolist() == [[4, 5, 16, 17, 0, 1, 2, 9, 10, 11]]


# Runs in a fresh interpreter that cannot import the package: each checkpoint through AutoModel, packed (the saved
# default) and with unpad=False, its last hidden states saved for the test to compare.
LOADER = textwrap.dedent(
    """
    import json, sys, torch, transformers
    jobs, inputs = json.load(open(sys.argv[1])), torch.load(sys.argv[2])
    results = {}
    for path in jobs:
        for unpad in (True, False):
            model = transformers.AutoModel.from_pretrained(path, trust_remote_code=True, unpad=unpad).eval()
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            with torch.no_grad():
                results[f"{path}-{unpad}"] = model(**inputs).last_hidden_state
    torch.save(results, sys.argv[3])
    """
)


def test_a_saved_checkpoint_runs_packed_as_remote_code(tmp_path):
    inputs, jobs, expected = {k: v.cpu() for k, v in _batch(position_ids=True).items()}, [], {}
    for head, variant in (("VariantBertModel", "synth_mixture"), ("VariantAlbertModel", "talking_heads_dynamic")):
        model = build(head, variant).cpu()  # as the subprocess runs it
        path = str(tmp_path / head)
        model.save_pretrained(path)
        jobs.append(path)
        with torch.no_grad():
            expected[path] = model(**inputs).last_hidden_state
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    torch.save(inputs, tmp_path / "inputs.pt")
    proc = run_isolated(LOADER, [tmp_path / "jobs.json", tmp_path / "inputs.pt", tmp_path / "out.pt"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results, real = torch.load(tmp_path / "out.pt"), inputs["attention_mask"]
    for path in jobs:
        packed, padded = results[f"{path}-True"], results[f"{path}-False"]
        torch.testing.assert_close(packed, expected[path], atol=1e-6, rtol=1e-5)  # zeros at the pads: packed
        assert packed[real == 0].abs().max() == 0 < padded[real == 0].abs().max()
        torch.testing.assert_close(at_real_tokens(padded, real), at_real_tokens(packed, real), **TOLERANCE)


def _t5_batch() -> dict:
    """4 encoder rows of 11 tokens (full, right-padded to 6 and to 3, left-padded by 2) and 5 decoder tokens."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, 99, (4, 11), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = mask[2, 3:] = mask[3, :2] = 0
    return on_device(
        dict(input_ids=ids, attention_mask=mask, decoder_input_ids=torch.randint(2, 99, (4, 5), generator=g))
    )


def _t5_unpad(model, unpad: bool) -> None:
    """`unpad` for T5's encoder stack (its config is its own copy of the model's)."""
    model.encoder.config.unpad = unpad


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_t5_encoder_runs_a_padded_batch_on_its_real_tokens(variant, packed_runs):
    """T5's encoder packs a padded batch (its relative position bias per sequence: the longest's, read at each
    sequence's top-left corner): the encoder output at the real tokens, the logits and every gradient equal the
    padded batch's; zeros at the padding; the decoder runs as before."""
    model = build("VariantT5ForConditionalGeneration", variant).train()
    inputs = _t5_batch()
    inputs["labels"] = inputs.pop("decoder_input_ids")
    real = inputs["attention_mask"]
    results = []
    for unpad in (True, False):
        _t5_unpad(model, unpad)
        model.zero_grad(set_to_none=True)
        calls = len(packed_runs)
        out = model(**inputs)
        out.loss.backward()
        results.append((out, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
        assert (len(packed_runs) > calls) == unpad  # the encoder's layers ran packed, the decoder's never
    assert set(packed_runs) == {((1, 3), (1, 6), (1, 9), (1, 11))}
    (packed, grads), (padded, padded_grads) = results
    torch.testing.assert_close(
        at_real_tokens(packed.encoder_last_hidden_state, real),
        at_real_tokens(padded.encoder_last_hidden_state, real),
        **TOLERANCE,
    )
    assert packed.encoder_last_hidden_state[real == 0].abs().max() == 0
    torch.testing.assert_close(packed.logits, padded.logits, **TOLERANCE)
    assert grads.keys() == padded_grads.keys()
    for name, grad in padded_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-6, rtol=1e-4, msg=name)


def test_t5_generates_the_same_tokens_packed(packed_runs):
    from conftest import sharpen_t5

    model = build("VariantT5ForConditionalGeneration", "talking_heads")
    sharpen_t5(model)
    inputs = {k: v for k, v in _t5_batch().items() if k != "decoder_input_ids"}
    tokens = {}
    for unpad in (True, False):
        _t5_unpad(model, unpad)
        tokens[unpad] = model.generate(**inputs, max_new_tokens=6, do_sample=False, num_beams=2)
    assert packed_runs and torch.equal(tokens[True], tokens[False])
