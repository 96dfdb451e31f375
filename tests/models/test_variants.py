"""Every attention variant x every head of every family: shapes, loss, gradients, save/load, padding, init, tuple
outputs."""

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import PreTrainedModel

import hf_attn_variants as hav
from conftest import (
    ALL_HEADS,
    FAMILIES,
    SAME_WEIGHTS,
    TINY,
    VARIANTS,
    build,
    family,
    head_inputs,
    head_kind,
    make_config,
    on_device,
)

pytestmark = pytest.mark.device

# (output field, expected shape) per kind of head for `head_inputs` (batch 2, seq 7; multiple choice: 3 choices;
# an encoder-decoder: 5 decoder positions)
SHAPES = {
    "Model": ("last_hidden_state", (2, 7, TINY["hidden_size"])),
    "ForPreTraining": ("prediction_logits", (2, 7, TINY["vocab_size"])),
    "ForMaskedLM": ("logits", (2, 7, TINY["vocab_size"])),
    "LMHeadModel": ("logits", (2, 7, TINY["vocab_size"])),
    "ForNextSentencePrediction": ("logits", (2, 2)),
    "ForSequenceClassification": ("logits", (2, 2)),
    "ForMultipleChoice": ("logits", (2, 3)),
    "ForTokenClassification": ("logits", (2, 7, 2)),
    "ForQuestionAnswering": ("start_logits", (2, 7)),
    "ForConditionalGeneration": ("logits", (2, 5, TINY["vocab_size"])),
    "EncoderModel": ("last_hidden_state", (2, 7, TINY["hidden_size"])),
}
# each family's model that encodes a sequence (an encoder-decoder's encoder alone), and its language-model head
ENCODERS = [f"Variant{fam.prefix}EncoderModel" if fam.encoder_decoder else fam.base_model for fam in FAMILIES.values()]
MASKED_LMS = ["VariantBertForMaskedLM", "VariantAlbertForMaskedLM"]
LM_HEADS = MASKED_LMS + ["VariantT5ForConditionalGeneration"]


def _output(head):
    """(output field, expected shape) of `head` on `head_inputs`: an encoder-decoder's base model gives the decoder's
    states."""
    field, shape = SHAPES[head_kind(head)]
    if head_kind(head) == "Model" and FAMILIES[family(head)].encoder_decoder:
        shape = SHAPES["ForConditionalGeneration"][1][:2] + shape[2:]
    return field, shape


# A bias added to every candidate of a softmax cross-entropy (every position for QA, every choice for multiple
# choice) has an exactly zero gradient: it cancels in the softmax. Any nonzero value there is rounding noise.
SOFTMAX_INVARIANT = {"qa_outputs.bias", "classifier.bias"}


def _should_get_gradient(head, name):
    return not (head_kind(head) in ("ForQuestionAnswering", "ForMultipleChoice") and name in SOFTMAX_INVARIANT)


def test_every_public_head_is_in_its_families_auto_map():
    """The heads the tests run over (read from each modeling file's AUTO_MAP) are every model class the package
    exports, so no head escapes the tables below or the Auto classes."""
    exported = {
        name
        for name in hav.__all__
        if isinstance(getattr(hav, name), type)
        and issubclass(getattr(hav, name), PreTrainedModel)
        and not name.endswith("PreTrainedModel")
    }
    assert len(ALL_HEADS) == len(set(ALL_HEADS))
    assert set(ALL_HEADS) == exported
    assert {head_kind(head) for head in ALL_HEADS} == set(SHAPES)


@pytest.mark.parametrize("head", ALL_HEADS)
def test_shapes_loss_and_gradients(variant, head):
    model = build(head, variant).train()
    inputs = head_inputs(head)
    out = model(**inputs)
    field, shape = _output(head)
    assert getattr(out, field).shape == shape
    if head_kind(head) in ("Model", "EncoderModel"):  # no labels: a loss on every output
        loss = sum(out[key].pow(2).mean() for key in ("last_hidden_state", "pooler_output") if key in out)
    else:
        assert out.loss is not None
        loss = out.loss
    assert torch.isfinite(loss)
    loss.backward()
    frozen = VARIANTS[variant].get("synthesizer_random_trainable") is False
    for name, p in model.named_parameters():
        if not p.requires_grad:
            assert frozen and ("random" in name), f"{name} is frozen but should train"
            assert p.grad is None
            continue
        if _should_get_gradient(head, name):
            assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reaches {name}"
    if frozen:
        assert any(not p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("head", ALL_HEADS)
def test_save_load_round_trip(tmp_path, variant, head):
    model = build(head, variant)
    with torch.no_grad():  # move every parameter off its init, so a re-initialised one would show
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    inputs = head_inputs(head)
    model.save_pretrained(tmp_path)
    loaded = on_device(getattr(hav, head).from_pretrained(tmp_path).eval())
    assert loaded.config.attention_type == model.config.attention_type
    for (n1, p1), (n2, p2) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert n1 == n2
        torch.testing.assert_close(p1, p2, atol=0, rtol=0, msg=n1)  # weights: bitwise
    with torch.no_grad():
        a, b = model(**inputs), loaded(**inputs)
    keys = [key for key in a.keys() if isinstance(a[key], torch.Tensor)]
    for key in keys:  # outputs: two computations, which may round differently (SAME_WEIGHTS)
        torch.testing.assert_close(a[key], b[key], **SAME_WEIGHTS, msg=key)
    # non-vacuity: one wrong weight (a single embedding entry off by 1e-3) fails that tolerance
    with torch.no_grad():
        loaded.get_input_embeddings().weight[inputs["input_ids"].flatten()[0], 0] += 1e-3
        wrong = loaded(**inputs)
    field = _output(head)[0]
    with pytest.raises(AssertionError):
        torch.testing.assert_close(a[field], wrong[field], **SAME_WEIGHTS)
    assert [p.requires_grad for p in model.parameters()] == [p.requires_grad for p in loaded.parameters()]
    again, info = getattr(hav, head).from_pretrained(tmp_path, output_loading_info=True)  # (model, info) too
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert [p.requires_grad for p in model.parameters()] == [p.requires_grad for p in again.parameters()]


@pytest.mark.parametrize("head", ENCODERS)
def test_padding_invariance(variant, head):
    """Masked padding never changes the outputs at the real positions, pure synthesizers included."""
    model = build(head, variant)
    g = torch.Generator().manual_seed(3)
    ids = on_device(torch.randint(1, TINY["vocab_size"], (1, 6), generator=g))
    padded = torch.cat([ids, on_device(torch.randint(1, TINY["vocab_size"], (1, 5), generator=g))], dim=1)
    mask = on_device(torch.cat([torch.ones(1, 6), torch.zeros(1, 5)], dim=1).long())
    with torch.no_grad():
        short = model(ids).last_hidden_state
        long = model(padded, attention_mask=mask).last_hidden_state[:, :6]
    torch.testing.assert_close(short, long, atol=1e-5, rtol=1e-5)
    # and a row never depends on the other rows of the batch
    other = on_device(torch.randint(1, TINY["vocab_size"], (1, 11), generator=g))
    with torch.no_grad():
        batched = model(torch.cat([padded, other]), attention_mask=torch.cat([mask, torch.ones_like(mask)]))
    torch.testing.assert_close(batched.last_hidden_state[:1, :6], long, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("head", LM_HEADS)
def test_init_weights_alone_reproduces_construction(variant, head):
    """`_init_weights` has a branch for every parameter a variant adds: re-running it on the same seed gives the
    same model, and a checkpoint missing the variant parameters gets the configured init, never zeros."""
    model = build(head, variant, seed=5)
    torch.manual_seed(5)
    fresh = on_device(getattr(hav, head)(make_config(variant, family(head))))
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=name)
    for name, p in model.named_parameters():
        if ".core." in name and "bias" not in name:
            assert p.abs().sum() > 0, f"{name} is all zeros after init"


@pytest.mark.parametrize("head", LM_HEADS)
@pytest.mark.parametrize("init", ["identity", "paper"])
def test_talking_heads_init_survives_from_pretrained(tmp_path, init, head):
    """A checkpoint that lacks the maps (a vanilla model) gets the configured init, not zeros or normal(0.02)."""
    build(head, "dot_product").save_pretrained(tmp_path)
    model = on_device(
        getattr(hav, head).from_pretrained(tmp_path, attention_type="talking_heads", talking_heads_init=init)
    )
    cores = [m for m in model.modules() if isinstance(m, hav.VariantAttentionCore)]
    assert cores
    for core in cores:
        for proj in (core.pre_softmax_proj, core.post_softmax_proj):
            if init == "identity":
                torch.testing.assert_close(proj.detach(), on_device(torch.eye(TINY["num_attention_heads"])))
            else:
                std = TINY["num_attention_heads"] ** -0.5
                assert proj.abs().max() <= 2 * std + 1e-6 and proj.std() > 0.2 * std
                assert not torch.allclose(proj, on_device(torch.eye(TINY["num_attention_heads"])))


def test_warm_start_mixture_learns():
    """The zero-start mixture equals dot-product attention at init, and its synthetic weights get gradients."""
    model = on_device(
        hav.VariantBertForMaskedLM(make_config("synth_mixture", synthesizer_mixture_init="dot_product")).train()
    )
    core = model.bert.encoder.layer[0].attention.self.core
    torch.testing.assert_close(core.mixture_weights.detach(), on_device(torch.tensor([1.0, 0.0, 0.0])))
    inputs = head_inputs("VariantBertForMaskedLM")
    model(**inputs).loss.backward()
    assert (core.mixture_weights.grad[1:].abs() > 0).all()


def _mixture_cores(model):
    return [m for m in model.modules() if isinstance(m, hav.VariantAttentionCore) and hasattr(m, "mixture_weights")]


def test_normalised_mixture_sums_to_one_and_keeps_its_starts():
    """alpha sums to one for any learned w; the uniform and the warm start are exact and keep the meaning of
    checkpoints saved with w / sum(w) (a uniform w of any value means alpha = 1/C in both forms)."""
    core = _mixture_cores(build("VariantBertModel", "synth_mixture"))[0]
    with torch.no_grad():
        for w in (torch.randn(3), torch.tensor([0.7, 0.7, 0.7]), torch.tensor([1.0, 0.0, 0.0])):
            w = on_device(w)
            core.mixture_weights.copy_(w)
            alpha = core.mixture_alpha()
            torch.testing.assert_close(alpha.sum(), on_device(torch.tensor(1.0)))
            if torch.all(w == w[0]):  # uniform: 1/C, as w / sum(w) gave
                torch.testing.assert_close(alpha, on_device(torch.full((3,), 1 / 3)))
            if w.sum() == 1:  # a w that already sums to one is used exactly as it is (the warm start)
                assert torch.equal(alpha, w)


@pytest.mark.parametrize("weights", [[0.0, 0.0], [1e-8, -1e-8], [0.5, -0.49]])
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_normalised_mixture_has_no_singularity(weights, implementation):
    """Weights that sum to zero (or nearly) give bounded alpha and finite outputs: no division by a learned sum."""
    torch.manual_seed(0)
    config = make_config(
        "synth_mixture", synthesizer_components=["dot_product", "random"], attn_implementation=implementation
    )
    model = on_device(hav.VariantBertModel(config).eval())
    w = on_device(torch.tensor(weights))
    with torch.no_grad():
        for core in _mixture_cores(model):
            core.mixture_weights.copy_(w)
        alpha = _mixture_cores(model)[0].mixture_alpha()
        out = model(**head_inputs("VariantBertModel")).last_hidden_state
    torch.testing.assert_close(alpha.sum(), on_device(torch.tensor(1.0)))
    assert alpha.abs().max() <= w.abs().max() + 1  # w / sum(w) gave [50, -49] for [0.5, -0.49]
    assert torch.isfinite(out).all()


@pytest.mark.parametrize(
    "head", ["VariantBertModel", "VariantBertForSequenceClassification", "VariantAlbertForPreTraining"]
)
def test_return_dict_false_gives_the_same_tensors(head):
    model = build(head, "talking_heads")
    inputs = head_inputs(head)
    with torch.no_grad():
        as_dict = model(**inputs)
        as_tuple = model(**inputs, return_dict=False)
    assert isinstance(as_tuple, tuple)
    for a, b in zip(as_dict.to_tuple(), as_tuple, strict=True):
        torch.testing.assert_close(a, b)


def test_output_attentions_are_the_weights_that_multiply_v():
    """For talking heads the returned weights are after the post-softmax map: h_v heads, rows not normalised."""
    model = build("VariantBertModel", "talking_heads_hk_hv")
    with torch.no_grad():
        out = model(**head_inputs("VariantBertModel"), output_attentions=True, output_hidden_states=True)
    assert len(out.attentions) == TINY["num_hidden_layers"]
    assert out.attentions[0].shape == (2, 8, 7, 7)  # h_v = 8
    # recompute layer 0 by hand: U @ V through the output projection equals the layer's attention output
    layer = model.encoder.layer[0].attention
    x = out.hidden_states[0]
    v = layer.self.value(x).view(2, 7, 8, 4).transpose(1, 2)
    manual = (out.attentions[0] @ v).transpose(1, 2).reshape(2, 7, 32)
    expected = layer.output(manual, x)
    mask = on_device(torch.ones(2, 7))
    mask[1, 5:] = 0
    with torch.no_grad():
        got = layer(x, attention_mask=(1 - mask[:, None, None, :]) * torch.finfo(torch.float32).min)[0]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("head", LM_HEADS)
def test_resize_token_embeddings_keeps_the_head_tied(head):
    model = build(head, "talking_heads")
    model.resize_token_embeddings(120)
    assert model.get_input_embeddings().weight.shape[0] == 120
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert model(**head_inputs(head)).logits.shape[-1] == 120


@pytest.mark.parametrize("head", MASKED_LMS)
@pytest.mark.parametrize("size, mean_resizing", [(80, True), (120, True), (120, False)])
def test_resize_token_embeddings_resizes_the_output_bias_as_transformers(head, size, mean_resizing):
    """Our heads hold the output bias alone (transformers' decoder bias is a second name of it): resizing keeps its
    first entries and starts added tokens at 0, as transformers resizes its own tied heads (whatever mean_resizing)."""
    model = build(head, "dot_product")
    with torch.no_grad():
        model.get_output_embeddings().weight.normal_()
        bias = model.cls.predictions.bias if family(head) == "bert" else model.predictions.bias
        bias.normal_()
    ref_class = getattr(transformers, head.replace("Variant", "", 1))
    config_class = getattr(transformers, type(model.config).__name__.replace("Variant", "", 1))
    ref = on_device(ref_class(config_class(**{k: v for k, v in model.config.to_dict().items() if k != "model_type"})))
    missing, unexpected = ref.load_state_dict(model.state_dict(), strict=False)
    assert not unexpected and [k for k in missing if "decoder.bias" not in k] == [], (missing, unexpected)
    for m in (model, ref):
        m.resize_token_embeddings(size, mean_resizing=mean_resizing)
    got = model.cls.predictions.bias if family(head) == "bert" else model.predictions.bias
    expected = ref.cls.predictions.bias if family(head) == "bert" else ref.predictions.bias
    assert got.shape == (size,) and got.requires_grad
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    assert got[:80].count_nonzero() == 80  # the old entries were kept, not reset


@pytest.mark.parametrize("head", MASKED_LMS)
def test_a_checkpoint_with_the_decoder_bias_alias_loads_quietly(tmp_path, head):
    """A checkpoint that also stores transformers' second name of the output bias (`...predictions.decoder.bias`)
    loads with nothing unexpected, and the head's own bias is the stored one."""
    model = build(head, "talking_heads")
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    bias_key = next(k for k in weights if k.endswith("predictions.bias"))
    weights[bias_key] = torch.randn(TINY["vocab_size"])
    weights[bias_key.replace("predictions.bias", "predictions.decoder.bias")] = weights[bias_key].clone()
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    loaded, info = getattr(hav, head).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["unexpected_keys"] and not info["missing_keys"], info
    assert torch.equal(loaded.state_dict()[bias_key], weights[bias_key])


@pytest.mark.parametrize("head", LM_HEADS)
def test_activation_checkpointing_gives_the_same_gradients(head):
    """Checkpointed layers (ALBERT's shared ones too) give the gradients of the plain run."""
    model = build(head, "talking_heads_dynamic").train()
    inputs = head_inputs(head)
    model(**inputs).loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    # transformers < 5.23 names it gradient_checkpointing_enable (from 5.23 on, a deprecated alias)
    getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    model(**inputs).loss.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], atol=1e-6, rtol=1e-5, msg=n)


@pytest.mark.parametrize("head", ["VariantBertLMHeadModel", "VariantT5ForConditionalGeneration"])
def test_checkpointed_decoders_train_without_a_cache(head):
    """A decoder that trains with checkpointed layers turns its cache off (a recomputed layer would add to it again;
    transformers' releases before 5.23 hand the recompute our `cache`): the gradients of the plain run, no cache
    returned, and the cache back in evaluation."""
    from hf_attn_variants.models.modeling_variant_utils import CACHE_FIELD

    model = build(head, "talking_heads").train()
    inputs = head_inputs(head)
    model(**inputs, use_cache=True).loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    out = model(**inputs, use_cache=True)
    out.loss.backward()
    assert getattr(out, CACHE_FIELD) is None
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], atol=1e-6, rtol=1e-5, msg=n)
    unlabelled = {k: v for k, v in inputs.items() if k != "labels"}  # a labelled call never caches (as transformers)
    if "decoder_input_ids" not in unlabelled and head == "VariantT5ForConditionalGeneration":
        unlabelled["decoder_input_ids"] = inputs["labels"]
    with torch.no_grad():
        assert getattr(model.eval()(**unlabelled, use_cache=True), CACHE_FIELD) is not None


def test_inference_path_equals_the_autograd_path(variant):
    """Without autograd the talking-heads core works in place; it must give what the autograd path gives."""
    model = build("VariantBertModel", variant, seed=9)
    inputs = head_inputs("VariantBertModel")
    with torch.no_grad():
        fast = model(**inputs, output_attentions=True)
    slow = model(**inputs, output_attentions=True)
    torch.testing.assert_close(fast.last_hidden_state, slow.last_hidden_state.detach(), atol=1e-6, rtol=1e-5)
    for a, b in zip(fast.attentions, slow.attentions, strict=True):
        torch.testing.assert_close(a, b.detach(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("head", ["VariantBertForMaskedLM", "VariantBertLMHeadModel", "VariantAlbertForMaskedLM"])
def test_fused_sdpa_path_equals_eager_path(variant, head):
    """`attn_implementation="sdpa"` (dot product, and synthesizers folded into one SDPA call) gives what the
    eager reference computation gives: outputs and every gradient, with padding, encoder and causal decoder."""
    fused = build(head, variant, seed=12, attn_implementation="sdpa").train()
    eager = build(head, variant, seed=12, attn_implementation="eager").train()
    assert fused.config._attn_implementation == "sdpa" and eager.config._attn_implementation == "eager"
    inputs = head_inputs(head)
    out_f, out_e = fused(**inputs), eager(**inputs)
    torch.testing.assert_close(out_f.logits, out_e.logits, atol=1e-5, rtol=1e-5)
    out_f.loss.backward()
    out_e.loss.backward()
    grads = dict(eager.named_parameters())
    for name, p in fused.named_parameters():
        if p.grad is None:
            assert grads[name].grad is None, name
        else:
            torch.testing.assert_close(p.grad, grads[name].grad, atol=1e-5, rtol=1e-4, msg=name)


def test_albert_sharing_covers_the_variant_parameters(variant):
    """Doubling the number of layers of a one-group ALBERT leaves the parameter count unchanged."""
    counts = [
        sum(
            p.numel()
            for p in build("VariantAlbertModel", variant, num_hidden_layers=n, num_hidden_groups=1).parameters()
        )
        for n in (3, 6)
    ]
    assert counts[0] == counts[1]
    # and the variant adds its parameters once per shared layer, not once per application
    model = build("VariantAlbertModel", variant, num_hidden_layers=6, num_hidden_groups=1)
    cores = [m for m in model.modules() if isinstance(m, hav.VariantAttentionCore)]
    assert len(cores) == model.config.inner_group_num


@pytest.mark.parametrize(
    "head",
    [
        "VariantBertForSequenceClassification",
        "VariantAlbertForSequenceClassification",
        "VariantT5ForSequenceClassification",
    ],
)
@pytest.mark.parametrize("problem", ["regression", "multi_label_classification"])
def test_sequence_classification_problem_types(head, problem):
    """`problem_type` is inferred from the labels as transformers' heads do, and picks MSE or BCE."""
    num_labels = 1 if problem == "regression" else 3
    model = build(head, "talking_heads", num_labels=num_labels)
    inputs = head_inputs(head)
    labels = torch.tensor([[0.5], [-1.0]]) if problem == "regression" else torch.tensor([[1.0, 0, 1], [0, 1, 0]])
    labels = on_device(labels)
    inputs["labels"] = labels
    out = model(**inputs)
    assert model.config.problem_type == problem
    if problem == "regression":
        expected = torch.nn.functional.mse_loss(out.logits.squeeze(), labels.squeeze())
    else:
        expected = torch.nn.functional.binary_cross_entropy_with_logits(out.logits, labels)
    torch.testing.assert_close(out.loss, expected)


def test_random_maps_tied_to_the_offset_are_toeplitz():
    """`synthesizer_random_offset`: 2L - 1 numbers per head, read as R[i, j] = r[j - i]; a trained offset table
    moves every pair of one offset together. Without the random component it is refused."""
    model = build("VariantBertModel", "synth_random_offset")
    core = model.encoder.layer[0].attention.self.core
    L, h = core.spec.max_position, core.spec.num_heads
    assert core.random_logits.shape == (h, 2 * L - 1)
    table = core.random_map()
    assert table.shape == (h, L, L)
    assert torch.equal(table[:, 1:, 1:], table[:, :-1, :-1])  # constant along every diagonal
    assert torch.equal(table[:, 0, :], core.random_logits[:, L - 1 :])  # row 0: offsets 0..L-1
    assert torch.equal(table[:, :, 0], core.random_logits[:, :L].flip(-1))  # column 0: offsets 0..-(L-1)
    with pytest.raises(ValueError, match="has no 'random' component"):
        build("VariantBertModel", "synth_dense", synthesizer_random_offset=True)
