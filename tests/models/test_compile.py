"""`torch.compile(model, fullgraph=True)` runs every attention type forward and backward, equal to eager.

One tiny masked-LM per attention type (the families alternate), T5 once. `fullgraph=True` makes a graph break an
error; a counting backend shows the model really ran as one compiled graph (so an equality with eager cannot come
from eager running twice). Most cases use the `aot_eager` backend: it traces forward and backward through AOTAutograd
as inductor does, at a fraction of the compile time; one case (the training configuration of the example scripts,
talking heads with `sparse_prediction`) compiles with inductor, the default backend.
"""

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from conftest import at_real_tokens, build, head_inputs

pytestmark = pytest.mark.device

# One layer (ALBERT: one shared layer run twice, T5: one encoder and one decoder layer): compile time grows with the
# number of layers traced, and one layer exercises every op of a variant.
BERT, ALBERT, T5 = (
    dict(num_hidden_layers=1),
    dict(num_hidden_layers=2, num_hidden_groups=1, inner_group_num=1),
    dict(num_layers=1),
)
CASES = {  # name -> (head, variant, backend, config overrides)
    "dot_product": ("VariantBertForMaskedLM", "dot_product", "aot_eager", BERT),
    "talking_heads": ("VariantAlbertForMaskedLM", "talking_heads", "aot_eager", ALBERT),
    "talking_heads_dynamic": ("VariantBertForMaskedLM", "talking_heads_dynamic", "aot_eager", BERT),
    "synth_dense": ("VariantAlbertForMaskedLM", "synth_dense", "aot_eager", ALBERT),
    "synth_random": ("VariantBertForMaskedLM", "synth_random", "aot_eager", BERT),
    "synth_mixture": ("VariantAlbertForMaskedLM", "synth_mixture", "aot_eager", ALBERT),
    "general_bilinear": ("VariantBertForMaskedLM", "general_bilinear", "aot_eager", BERT),
    "t5_talking_heads": ("VariantT5ForConditionalGeneration", "talking_heads", "aot_eager", T5),
    "talking_heads_sparse_inductor": ("VariantBertForMaskedLM", "talking_heads", "inductor", BERT),
}
CALL_KWARGS = {"talking_heads_sparse_inductor": dict(sparse_prediction=True)}  # forward arguments beside the inputs
TOLERANCE = dict(atol=1e-5, rtol=1e-4)  # inductor fuses and reorders float32 sums; one wrong weight moves far more


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()  # every case compiles the same forward code objects: no cache entries carried over
    yield
    torch._dynamo.reset()


def _loss_logits_grads(model, inputs, run=None):
    """Loss, logits and every parameter's gradient of `run` (default: `model` itself) on `inputs`."""
    model.zero_grad()
    output = (model if run is None else run)(**inputs)
    output.loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return output.loss.detach(), output.logits.detach(), grads


def _assert_equals_eager(compiled, model, inputs):
    """The compiled step's loss, logits and every gradient equal the uncompiled model's on `inputs` (logits per
    token at the real tokens: a compiled graph runs the padded batch, the uncompiled BERT the real tokens only);
    returns the uncompiled logits."""
    loss, logits, grads = compiled
    eager_loss, eager_logits, eager_grads = _loss_logits_grads(model, inputs)
    torch.testing.assert_close(loss, eager_loss, **TOLERANCE)
    real = inputs["attention_mask"]
    torch.testing.assert_close(at_real_tokens(logits, real), at_real_tokens(eager_logits, real), **TOLERANCE)
    assert grads.keys() == eager_grads.keys() and len(grads) > 0
    for name, grad in eager_grads.items():
        torch.testing.assert_close(grads[name], grad, **TOLERANCE, msg=name)
    return eager_logits


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_forward_and_backward_equal_eager(case):
    head, variant, backend, overrides = CASES[case]
    model = build(head, variant, **overrides).train()
    inputs = {**head_inputs(head), **CALL_KWARGS.get(case, {})}
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(model, fullgraph=True, backend=counter)

    loss, logits, grads = _loss_logits_grads(model, inputs, run=compiled)
    assert counter.frame_count == 1 and counter.op_count > 0  # one graph, compiled: not eager in disguise
    _assert_equals_eager((loss, logits, grads), model, inputs)


def test_sparse_prediction_compiles_without_fullgraph_as_one_graph():
    """What Trainer's `--torch_compile` does (no fullgraph). The labelled-row gather has a data-dependent shape: with
    `capture_dynamic_output_shape_ops` dynamo keeps it in the one graph (without it, torch 2.13 breaks the graph
    there; docs/training.md)."""
    model = build("VariantBertForMaskedLM", "talking_heads", num_hidden_layers=1).train()
    inputs = {**head_inputs("VariantBertForMaskedLM"), "sparse_prediction": True}
    counter = CompileCounterWithBackend("aot_eager")
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        loss, logits, grads = _loss_logits_grads(model, inputs, run=torch.compile(model, backend=counter))
    assert counter.frame_count == 1 and counter.op_count > 0
    _assert_equals_eager((loss, logits, grads), model, inputs)


def test_talking_heads_with_attention_dropout_trains_compiled_with_inductor(monkeypatch):
    """Training with attention dropout runs the blockwise core, whose per-block dropout generators inductor cannot
    compile (torch 2.13: `InductorError: KeyError: 'buf1'`); that core runs outside the graph, so the compiled step
    works. With the core's dropout seed fixed (compiled graphs draw from torch's generator in another order than eager
    code), the compiled step equals the uncompiled one."""
    from hf_attn_variants.models import talking_heads_blockwise as blockwise

    real, fixed = blockwise._blockwise_with_dropout, [12345]
    monkeypatch.setattr(
        blockwise,
        "_blockwise_with_dropout",
        torch.compiler.disable(lambda *args: real(*args[:13], fixed[0], *args[14:])),
    )
    model = build(
        "VariantBertForMaskedLM",
        "talking_heads",
        num_hidden_layers=1,  # padded, as the compiled graph
        attention_probs_dropout_prob=0.1,
        unpad=False,
    ).train()  # runs it: the same blocks draw the masks
    inputs = head_inputs("VariantBertForMaskedLM")
    loss, logits, grads = _loss_logits_grads(model, inputs, run=torch.compile(model))
    eager_logits = _assert_equals_eager((loss, logits, grads), model, inputs)
    fixed[0] = 54321  # non-vacuity: another seed drops other weights
    assert not torch.allclose(_loss_logits_grads(model, inputs)[1], eager_logits, **TOLERANCE)
