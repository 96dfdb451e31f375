"""Export for serving: `torch.export.export` and `torch.onnx.export` (the dynamo exporter, run by onnxruntime) of
talking-heads and Synthesizer models, with dynamic batch and length, padding masks included.

Exported in eval mode under `torch.no_grad()`: there `attention_algorithm="auto"` runs talking heads' eager core,
which traces to plain aten ops (the in-place path that loops over the batch is left to eager runs, see
`talking_heads_blockwise.talking_heads_eager`). A training graph (gradients on) needs `attention_algorithm="eager"`:
"auto" takes the blockwise core there, whose Python loop over query blocks fixes the length (the last test).
"""

import pytest
import torch
from torch.export import Dim

from conftest import TINY, at_real_tokens, build, encoder_inputs, head_inputs

# name -> (head, VARIANTS entry)
CASES = {
    "bert_talking_heads": ("VariantBertModel", "talking_heads"),
    "bert_talking_heads_dynamic": ("VariantBertModel", "talking_heads_dynamic"),
    "bert_synth_mixture": ("VariantBertModel", "synth_mixture"),
    "bert_synth_dense": ("VariantBertModel", "synth_dense"),
    "albert_talking_heads_hk_hv": ("VariantAlbertModel", "talking_heads_hk_hv"),
    "t5_encoder_talking_heads": ("VariantT5EncoderModel", "talking_heads"),
    "t5_encoder_synth_mixture": ("VariantT5EncoderModel", "synth_mixture"),
}
ONNX_CASES = ["bert_talking_heads_dynamic", "bert_synth_mixture", "t5_encoder_talking_heads"]
TOLERANCE = dict(atol=1e-5, rtol=1e-4)  # float32; a graph with one wrong weight moves outputs by ~1e-2
# Lengths up to the tiny configs' 64 positions, less one: a synthesizer slices its [.., 64] weights to the length,
# and torch's shape checks guard "length != 64" on that slice (a slice of the whole axis is contiguous, a shorter one
# is not), so a range that includes 64 fails export with "Not all values of seq ... satisfy the generated guard".
MAX_LEN = TINY["max_position_embeddings"] - 1
BATCH, LENGTH = Dim("batch", min=1, max=16), Dim("length", min=2, max=MAX_LEN)


def _model(head, variant, **overrides):
    """The model in eval mode, every weight moved off its initial value: identity talking-heads maps or a uniform
    mixture would let an export that dropped the variant's own computation still match."""
    model = build(head, variant, **overrides)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


def _inputs(head, batch, seq, seed):
    """input_ids and attention_mask, the second row right-padded (and, T5, one <eos> per row)."""
    if head.startswith("VariantT5"):
        ids, mask = encoder_inputs(batch, seq, seed)
    else:
        inputs = head_inputs(head, batch=batch, seq=seq, seed=seed)
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
    return dict(input_ids=ids, attention_mask=mask)


EXAMPLE, OTHER = dict(batch=2, seq=7, seed=0), dict(batch=3, seq=12, seed=1)  # another batch size and length


def _export(model, inputs):
    with torch.no_grad():
        return torch.export.export(model, (), dict(inputs), dynamic_shapes={k: {0: BATCH, 1: LENGTH} for k in inputs})


def _tensors(output) -> list[torch.Tensor]:
    """An output's tensors in order (a ModelOutput or the flat tuple ONNX gives)."""
    values = output.values() if hasattr(output, "values") else output
    return [torch.as_tensor(v) for v in values if v is not None]


@pytest.mark.parametrize("case", list(CASES))
def test_torch_export_equals_eager(case):
    head, variant = CASES[case]
    model = _model(head, variant)
    program = _export(model, _inputs(head, **EXAMPLE))
    exported = program.module()
    for shape in (EXAMPLE, OTHER):
        inputs = _inputs(head, **shape)
        with torch.no_grad():
            expected, got = _tensors(model(**inputs)), _tensors(exported(**inputs))
        assert len(got) == len(expected) >= 1
        for g, e in zip(got, expected):  # an exported graph runs the padded batch, the eager BERT the real tokens
            real = inputs["attention_mask"]
            torch.testing.assert_close(at_real_tokens(g, real), at_real_tokens(e, real), **TOLERANCE)
    # the graph reads every parameter of the variant (a graph that skipped them could still match by accident)
    core = {name for name, _ in model.named_parameters() if ".core." in name}
    assert core and core <= set(program.graph_signature.inputs_to_parameters.values())


@pytest.mark.parametrize("variant", ["talking_heads", "synth_mixture"])
def test_torch_export_t5_seq2seq_equals_eager(variant):
    """The whole encoder-decoder forward (no cache): encoder, causal decoder self-attention and cross-attention."""
    model = _model("VariantT5ForConditionalGeneration", variant)
    target = Dim("target", min=2, max=MAX_LEN)

    def inputs(batch, seq, seed):
        decoder = torch.randint(2, 99, (batch, seq - 2), generator=torch.Generator().manual_seed(seed))
        return dict(_inputs("VariantT5EncoderModel", batch, seq, seed), decoder_input_ids=decoder)

    example = inputs(**EXAMPLE)
    shapes = dict(
        input_ids={0: BATCH, 1: LENGTH},
        attention_mask={0: BATCH, 1: LENGTH},
        decoder_input_ids={0: BATCH, 1: target},
        use_cache=None,
    )
    with torch.no_grad():
        exported = torch.export.export(model, (), dict(example, use_cache=False), dynamic_shapes=shapes).module()
    for shape in (EXAMPLE, OTHER):
        kwargs = dict(inputs(**shape), use_cache=False)
        with torch.no_grad():
            expected, got = model(**kwargs), exported(**kwargs)
        torch.testing.assert_close(got.logits, expected.logits, **TOLERANCE)
        real = kwargs["attention_mask"]  # the eager encoder runs the real tokens only (zeros at the padding)
        torch.testing.assert_close(
            at_real_tokens(got.encoder_last_hidden_state, real),
            at_real_tokens(expected.encoder_last_hidden_state, real),
            **TOLERANCE,
        )


@pytest.mark.parametrize("case", ONNX_CASES)
def test_onnx_export_runs_in_onnxruntime(tmp_path, case):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")
    head, variant = CASES[case]
    model = _model(head, variant)
    program = _export(model, _inputs(head, **EXAMPLE))
    torch.onnx.export(
        program, (), str(tmp_path / "model.onnx"), kwargs=_inputs(head, **EXAMPLE), dynamo=True, verbose=False
    )
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
    for shape in (EXAMPLE, OTHER):
        inputs = _inputs(head, **shape)
        got = session.run(None, {k: v.numpy() for k, v in inputs.items()})
        with torch.no_grad():
            expected = _tensors(model(**inputs))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):  # per token at the real tokens, as in test_torch_export_equals_eager
            real = inputs["attention_mask"]
            torch.testing.assert_close(at_real_tokens(torch.from_numpy(g), real), at_real_tokens(e, real), **TOLERANCE)


def test_onnx_export_t5_seq2seq_runs_in_onnxruntime(tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")
    model = _model("VariantT5ForConditionalGeneration", "talking_heads")
    ids, mask = encoder_inputs()
    decoder = torch.randint(2, 99, (2, 5), generator=torch.Generator().manual_seed(3))
    kwargs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder)
    with torch.no_grad():
        program = torch.export.export(model, (), dict(kwargs, use_cache=False))
        expected = model(**kwargs, use_cache=False)
    torch.onnx.export(program, (), str(tmp_path / "t5.onnx"), kwargs=kwargs, dynamo=True, verbose=False)
    session = ort.InferenceSession(str(tmp_path / "t5.onnx"), providers=["CPUExecutionProvider"])
    logits, encoder_states = session.run(None, {k: v.numpy() for k, v in kwargs.items()})
    torch.testing.assert_close(torch.from_numpy(logits), expected.logits, **TOLERANCE)
    real = kwargs["attention_mask"]  # the eager encoder runs the real tokens only (zeros at the padding)
    torch.testing.assert_close(
        at_real_tokens(torch.from_numpy(encoder_states), real),
        at_real_tokens(expected.encoder_last_hidden_state, real),
        **TOLERANCE,
    )


def test_training_graph_export_needs_the_eager_algorithm():
    """With gradients on, "auto" runs the blockwise core: its loop over query blocks fixes the length, so a dynamic
    length is refused. `attention_algorithm="eager"` exports with dynamic shapes, and the exported program's loss
    and gradients are eager's."""
    head = "VariantBertForMaskedLM"
    inputs = head_inputs(head)
    shapes = {k: {0: BATCH, 1: LENGTH} for k in inputs}
    blockwise = _model(head, "talking_heads").train()
    with pytest.raises(torch._dynamo.exc.UserError, match="specialized it to be a constant"):
        torch.export.export(blockwise, (), inputs, dynamic_shapes=shapes)

    model = _model(head, "talking_heads", attention_algorithm="eager").train()
    exported = torch.export.export(model, (), inputs, dynamic_shapes=shapes).module()
    loss = model(**inputs).loss
    loss.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    exported.zero_grad(set_to_none=True)
    exported_loss = exported(**inputs).loss
    torch.testing.assert_close(exported_loss, loss, **TOLERANCE)
    exported_loss.backward()
    grads = {name: p.grad for name, p in exported.named_parameters() if p.grad is not None}
    assert grads.keys() == expected.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected[name], **TOLERANCE, msg=name)
    other = head_inputs(head, batch=3, seq=12, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(exported(**other).loss, model(**other).loss, **TOLERANCE)
