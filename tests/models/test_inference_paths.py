"""The inference paths of talking heads and the Synthesizer (`eval()`, no gradients, the default
`attn_implementation="sdpa"` and `attention_algorithm="auto"`), each against the eager reference on the same weights.

Talking heads runs the blockwise algorithm's inference core on the CPU (`talking_heads_inference`, padded keys
skipped); a synthesizer runs `synthesizer_sdpa_forward` (one SDPA call, one softmax for a mixture without a
dot-product form, or one batch row at a time over its real keys for a large attention: `SDPA_PER_ROW_ELEMENTS`,
lowered here so a tiny model takes that path too). Each test checks that the fast path ran and that a small change of
the variant's own parameters moves the output past the tolerance. `padding_lengths`, which finds the padded keys,
against masks with and without right padding.
"""

import pytest
import torch

import hf_attn_variants as hav
from conftest import TINY_CONFIGS, VARIANTS
from hf_attn_variants.families import FAMILIES
from hf_attn_variants.models import attention_synthesizer
from hf_attn_variants.models import talking_heads_blockwise as blockwise
from hf_attn_variants.models.attention_base import padding_lengths

EVERY_COMPONENT = ["dot_product", "dense", "random", "factorized_dense", "factorized_random"]
# variant -> its fields: talking heads' static maps (the dynamic ones take the autograd core), every synthesizer
TYPES = {
    name: VARIANTS[name]
    for name in VARIANTS
    if name.startswith("synth") or name in ("talking_heads", "talking_heads_hk_hv", "talking_heads_pre_only")
}
TYPES["synth_every_component"] = dict(attention_type="synthesizer", synthesizer_components=EVERY_COMPONENT)
CASES = [(name, per_row) for name in TYPES for per_row in ((False, True) if name.startswith("synth") else (False,))]
CLOSE = dict(atol=1e-5, rtol=1e-5)


def fast_and_eager(head: str, variant: str, family: str = "bert", **overrides):
    """Our `head` with `variant` in its default implementation, every attention parameter moved off its init (so
    identity maps and warm starts hide nothing), and the same weights with `attn_implementation="eager"` (talking
    heads: also `attention_algorithm="eager"`). BERT's weights are drawn 10x wider than its default initialisation
    (T5's already are about that wide), so the attention is not drowned by the residual stream: a 1e-3 change of
    one entry moves the logits by 1e-4 or more."""
    torch.manual_seed(0)
    # the padded layout: the packed one (unpad) is checked against it in tests/models/test_unpadding.py
    overrides = dict(unpad=False, **overrides)
    if family != "t5":
        overrides = dict(initializer_range=0.2, **overrides)

    def config(**fields):
        return FAMILIES[family].config_class(**{**TINY_CONFIGS[family], **TYPES[variant], **overrides, **fields})

    fast = getattr(hav, head)(config()).eval()
    with torch.no_grad():
        for name, p in fast.named_parameters():
            if ".core." in name:
                p.add_(0.3 * torch.randn_like(p))
    algorithm = dict(attention_algorithm="eager") if variant.startswith("talking_heads") else {}
    eager = getattr(hav, head)(config(attn_implementation="eager", **algorithm))
    eager.load_state_dict(fast.state_dict())
    assert fast.config._attn_implementation == "sdpa"  # the default
    return fast, eager.eval()


def spy(monkeypatch, module, name: str) -> list:
    """Count the calls of `module.name` (looked up by name where it is called)."""
    calls, original = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs))
    return calls


def inputs(padded: bool, batch: int = 3, seq: int = 11) -> dict:
    ids = torch.randint(1, 99, (batch, seq), generator=torch.Generator().manual_seed(1))
    mask = None
    if padded:  # right padding, one row unpadded
        mask = (torch.arange(seq)[None] < torch.tensor([seq, 6, 9])[:batch, None]).long()
    return dict(input_ids=ids, attention_mask=mask)


def fast_paths(monkeypatch, variant: str, per_row: bool) -> dict:
    """Spies on the paths an inference call of `variant` should take; with `per_row`, every attention is large."""
    if per_row:
        monkeypatch.setattr(attention_synthesizer, "SDPA_PER_ROW_ELEMENTS", 1)
    if variant.startswith("talking_heads"):
        return {"core": spy(monkeypatch, blockwise, "talking_heads_inference")}
    paths = {"core": spy(monkeypatch, attention_synthesizer, "synthesizer_sdpa_forward")}
    paths["rows"] = spy(monkeypatch, attention_synthesizer, "_synthesizer_rows")
    return paths


def assert_moves(model, reference: torch.Tensor, **batch):
    """Non-vacuity: 1e-3 on one entry of each parameter of the attention cores moves the output past the
    tolerance."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".core." in name:
                p.view(-1)[0] += 1e-3
    with torch.inference_mode():
        moved = model(**batch)[0]
    assert not torch.allclose(moved, reference, **CLOSE)


def assert_equal_paths(monkeypatch, fast, eager, variant: str, batch: dict, per_row: bool) -> dict:
    """The first output (logits, hidden states; padded positions too) of `fast` under `torch.inference_mode()`
    against `eager`'s to 1e-5, then non-vacuity (`assert_moves`); returns the counts of the paths taken."""
    paths = fast_paths(monkeypatch, variant, per_row)
    with torch.inference_mode():
        out = fast(**batch)[0]
    with torch.no_grad():
        expected = eager(**batch)[0]
    torch.testing.assert_close(out, expected, **CLOSE)
    assert_moves(fast, expected, **batch)
    return paths


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("variant, per_row", CASES)
def test_the_inference_path_equals_the_eager_reference(monkeypatch, variant, per_row, padded):
    """BERT's masked-LM logits."""
    fast, eager = fast_and_eager("VariantBertForMaskedLM", variant)
    paths = assert_equal_paths(monkeypatch, fast, eager, variant, inputs(padded), per_row)
    layers = fast.config.num_hidden_layers
    assert len(paths["core"]) == 2 * layers  # the unperturbed and the perturbed model
    if "rows" in paths:  # per batch row where the attention is large and has padded keys or factorized dense logits
        rows = per_row and (padded or "factorized_dense" in fast.config.synthesizer_components)
        assert len(paths["rows"]) == 2 * layers * rows


@pytest.mark.parametrize("variant", ["talking_heads", "synth_factorized_dense", "synth_mixture"])
def test_a_causal_decoder_takes_its_inference_path_too(monkeypatch, variant):
    """BERT's causal LM head, padded (the mask then is causal, not only padding: no key is skipped), per batch row."""
    fast, eager = fast_and_eager("VariantBertLMHeadModel", variant, is_decoder=True)
    paths = assert_equal_paths(monkeypatch, fast, eager, variant, inputs(padded=True), per_row=True)
    assert len(paths["core"]) == 2 * fast.config.num_hidden_layers


@pytest.mark.parametrize("variant", ["talking_heads", "synth_mixture"])
def test_t5_encoders_skip_padded_keys_under_their_position_bias(monkeypatch, variant):
    """T5's encoder: the position bias is cut to each row's real keys."""
    fast, eager = fast_and_eager("VariantT5EncoderModel", variant, family="t5")
    paths = assert_equal_paths(monkeypatch, fast, eager, variant, inputs(padded=True), per_row=True)
    assert len(paths["core"]) == 2 * fast.config.num_layers


def test_padding_lengths_finds_right_padding_and_nothing_else():
    lengths = torch.tensor([6, 2, 4])
    attend = torch.arange(6)[None] < lengths[:, None]  # [3, 6]
    boolean = attend[:, None, None].expand(3, 1, 5, 6).contiguous()  # as transformers' SDPA masks are
    minimum = torch.finfo(torch.float32).min
    assert padding_lengths(boolean, 3) == [6, 2, 4]
    assert padding_lengths(torch.zeros(3, 1, 5, 6).masked_fill(~boolean, minimum), 3) == [6, 2, 4]  # additive
    assert padding_lengths(torch.zeros(3, 1, 1, 6).masked_fill(~attend[:, None, None], -torch.inf), 3) == [6, 2, 4]
    assert padding_lengths(boolean[:1], 3) == [6, 6, 6]  # one mask for the batch
    assert padding_lengths(None, 3) is None
    assert padding_lengths(boolean.flip(-1), 3) is None  # left padding
    assert padding_lengths(boolean & torch.ones(5, 6, dtype=torch.bool).tril(), 3) is None  # causal
    assert padding_lengths(boolean & (torch.arange(3) != 1)[:, None, None, None], 3) is None  # a row with no key
    assert padding_lengths(torch.zeros(3, 1, 5, 6).masked_fill(~boolean, -1.0), 3) is None  # a bias, not a mask
