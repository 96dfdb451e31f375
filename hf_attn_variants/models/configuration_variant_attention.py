"""The attention fields every family's config adds, in one place: names, defaults, documentation and the values
each may take (the config's schema; how a config resolves to each layer's attention is `attention_types`).

Torch-free. Every configuration file imports this module first, so the transformers version check below runs before
anything else of transformers is imported (an older release is refused with what to install, not with an ImportError
deep inside loading or, worse, wrong outputs: before 5.14 transformers' SDPA silently drops T5's position bias).
This file is copied next to every saved checkpoint (remote code): it imports only the standard library and
transformers.

A config always constructs, with any values; `attention_types.resolve_attention(config, ...)` turns the fields into
the spec of one layer when the layer is built, and raises a `ValueError` naming the field and the allowed values
there, as transformers' own BERT does for `hidden_size % num_attention_heads`.
"""

import re
import warnings

import transformers

SUPPORTED_TRANSFORMERS = "transformers>=5.14,<6"  # pyproject.toml declares the same range (a test checks)
_TRANSFORMERS_VERSION = tuple(int(part) for part in re.match(r"(\d+)\.(\d+)", transformers.__version__).groups())
if _TRANSFORMERS_VERSION < (5, 14):
    raise ImportError(
        f"hf-attn-variants models need {SUPPORTED_TRANSFORMERS}, found transformers {transformers.__version__}. "
        f"Upgrade with: pip install '{SUPPORTED_TRANSFORMERS}'. (transformers 4.x cannot load these models: they are "
        "built on the v5 model API.)"
    )
if _TRANSFORMERS_VERSION >= (6, 0):
    warnings.warn(
        f"hf-attn-variants models are tested with {SUPPORTED_TRANSFORMERS}, found transformers "
        f"{transformers.__version__}; if loading or outputs fail, install '{SUPPORTED_TRANSFORMERS}'.",
        stacklevel=2,
    )

from dataclasses import dataclass, fields  # noqa: E402

SYNTHESIZER_COMPONENTS = ("dot_product", "dense", "random", "factorized_dense", "factorized_random")
DYNAMIC_PROJECTIONS = ("x2l", "m2l", "x2w", "m2w")
TALKING_HEADS_INITS = ("identity", "paper")
ATTENTION_ALGORITHMS = ("auto", "eager", "blockwise", "triton")
MIXTURE_INITS = ("uniform", "dot_product")
PLACES = ("encoder", "decoder", "cross")  # where an encoder-decoder family may choose the attention per place


def pop_retired_sparse_prediction(kwargs: dict) -> None:
    """Remove `sparse_prediction` from a BERT/ALBERT config's `kwargs`: it was a config field until 2026-12 and is now
    a forward argument of the masked-LM heads, so that a published checkpoint keeps transformers' logits contract.
    Checkpoints that saved it keep loading and get full logits; a `True` there (or from old code) warns that it no
    longer applies."""
    if kwargs.pop("sparse_prediction", False):
        warnings.warn(
            "`sparse_prediction` is no longer a config field and is ignored here: masked-LM heads return full "
            "[batch, seq, vocab] logits, as transformers' do. Pass `sparse_prediction=True` to the forward of "
            "`...ForMaskedLM` / `...ForPreTraining` (the project's pretraining script does) for the scored rows only.",
            FutureWarning,
            stacklevel=3,
        )


@dataclass
class VariantAttentionFields:
    # fmt: off
    r"""
        attention_type (`str`, defaults to `"dot_product"`):
            ATTENTION_TYPES_HELP
        attention_head_size (`int`, *optional*):
            Size of each query/key/value head. Defaults to `hidden_size // heads` (for talking heads, `hidden_size //
            h_k` for queries/keys and `hidden_size // h_v` for values), so the projections keep the upstream shapes.
            General bilinear heads are always `hidden_size` wide.
        attention_recompute (`bool`, defaults to `False`):
            Recompute the attention core (logits, softmax, head maps) in the backward pass instead of storing it:
            less activation memory for some extra compute. Talking heads and eager synthesizers (the blockwise and
            Triton talking-heads algorithms, see `attention_algorithm`, recompute their blocks in any case).
        attention_algorithm (`str`, defaults to `"auto"`):
            How talking-heads attention is computed (the same function, to float rounding): `"eager"` materialises
            the [batch, heads, n, m] logits and weights, as the other types do; `"blockwise"` runs one block of
            queries at a time in forward and again in backward, so no n x m tensor outlives its block (PyTorch, any
            device; O(n) activation memory; without gradients on the CPU, an inference core whose blocks stay in the
            cache and skip padded keys); `"triton"` is the same algorithm as a fused Triton kernel, experimental
            (needs triton >= 3.9 and a GPU, or `TRITON_INTERPRET=1`; not yet verified on a GPU); `"auto"` runs only
            verified code: `"blockwise"` while training (or where the eager core's [batch, heads, n, m] buffer would
            pass 2^26 elements) and for inference on the CPU, `"eager"` for inference elsewhere (and under
            torch.compile or torch.export), and `"triton"` only on a GPU where `benchmarks/gpu_check.py --kernel`
            has passed (`attention_variants.TRITON_VERIFIED_GPUS`). Returning the
            attention weights (`output_attentions=True`) always runs the eager path. A value other than `"auto"`
            needs talking heads in some place of the model.
        talking_heads_num_key_heads (`int`, *optional*):
            h_k, the query/key heads. Defaults to `num_attention_heads` (h, the logits/softmax heads).
        talking_heads_num_value_heads (`int`, *optional*):
            h_v, the value heads. Defaults to `num_attention_heads`.
        talking_heads_pre_softmax (`bool`, defaults to `True`):
            Learn the map P_l[h_k, h] across heads applied to the logits before the softmax.
        talking_heads_post_softmax (`bool`, defaults to `True`):
            Learn the map P_w[h, h_v] across heads applied to the weights after the softmax.
        talking_heads_init (`str`, defaults to `"paper"`):
            `"paper"`: truncated normal with std 1/sqrt(h_in), as the original code. `"identity"`: the model equals
            ordinary multi-head attention at init (needs h_k = h = h_v); use it to warm-start from a vanilla checkpoint.
        talking_heads_dynamic (`list[str]`, defaults to `[]`):
            Input-dependent projections added to the static maps, any subset of `"x2l"`, `"m2l"` (logits, from the
            query input and the memory input) and `"x2w"`, `"m2w"` (weights).
        synthesizer_components (`list[str]`, defaults to `["dense"]`):
            The synthetic attention(s): `"dense"`, `"random"`, `"factorized_dense"`, `"factorized_random"`, and
            `"dot_product"` to mix with ordinary attention. Two or more components form a learned mixture.
        synthesizer_max_position (`int`, *optional*):
            The longest sequence a synthesizer attends over. Defaults to `max_position_embeddings` (512 in T5).
        synthesizer_random_trainable (`bool`, defaults to `True`):
            Train the random (and factorized random) matrices; `False` keeps them fixed (still saved).
        synthesizer_random_offset (`bool`, defaults to `False`):
            Tie each head's Random map to the offset between key and query: R[i, j] = r[j - i], 2L - 1 numbers per
            head (a Toeplitz map, a learned relative position bias) instead of L * L. Needs the `"random"`
            component.
        synthesizer_factorized_rank (`int`, defaults to 8):
            Rank k of the factorized random synthesizer R = R1 R2^T.
        synthesizer_dense_factors (`list[int]`, *optional*):
            (a, b) with a * b = `synthesizer_max_position` for the factorized dense synthesizer. Defaults to the
            most balanced pair.
        synthesizer_mixture_normalize (`bool`, defaults to `True`):
            Mixture weights that sum to one (the paper's form), as `alpha = w + (1 - sum(w)) / C` for the C learned
            weights `w` (no division: every value of `w` is valid); `False` uses `w` as it is.
        synthesizer_mixture_init (`str`, defaults to `"uniform"`):
            `"uniform"`: every component starts at the same weight. `"dot_product"`: the dot product starts at 1 and
            the synthetic components at 0, so a model warm-started from a vanilla checkpoint equals it at init and
            the synthetic weights still learn.
        admin (`bool`, defaults to `False`):
            Admin residuals (Liu et al. 2020) in a Post-LN family: each residual becomes `LN(omega * x + f(x))` with a
            per-width parameter `omega` that starts at 1 (the ordinary model, exactly); `hf_attn_variants.admin`
            profiles a batch to set it. T5 is Pre-LN and refuses it.
    """
    # fmt: on

    attention_type: str = "dot_product"
    attention_head_size: int | None = None
    attention_recompute: bool = False
    attention_algorithm: str = "auto"
    talking_heads_num_key_heads: int | None = None
    talking_heads_num_value_heads: int | None = None
    talking_heads_pre_softmax: bool = True
    talking_heads_post_softmax: bool = True
    talking_heads_init: str = "paper"
    talking_heads_dynamic: list[str] | None = None
    synthesizer_components: list[str] | None = None
    synthesizer_max_position: int | None = None
    synthesizer_random_trainable: bool = True
    synthesizer_random_offset: bool = False
    synthesizer_factorized_rank: int = 8
    synthesizer_dense_factors: list[int] | None = None
    synthesizer_mixture_normalize: bool = True
    synthesizer_mixture_init: str = "uniform"
    admin: bool = False

    def __post_init__(self):  # lists are copied (a config never shares them), the list defaults filled in
        self.talking_heads_dynamic = list(self.talking_heads_dynamic or [])
        # an empty list stays empty: the model refuses it when built
        components = self.synthesizer_components
        self.synthesizer_components = ["dense"] if components is None else list(components)
        if self.synthesizer_dense_factors is not None:
            self.synthesizer_dense_factors = list(self.synthesizer_dense_factors)

    @classmethod
    def pop_from(cls, kwargs: dict) -> "VariantAttentionFields":
        """Take the attention fields out of a config's keyword arguments (the rest go to `PretrainedConfig`)."""
        return cls(**{f.name: kwargs.pop(f.name) for f in fields(cls) if f.name in kwargs})

    def set_on(self, config) -> None:
        """Store every field on `config` under its own name (configs keep flat attributes, as transformers' do)."""
        for f in fields(self):
            setattr(config, f.name, getattr(self, f.name))


VARIANT_CONFIG_DEFAULTS = {f.name: f.default for f in fields(VariantAttentionFields)}
VARIANT_CONFIG_DEFAULTS.update(talking_heads_dynamic=[], synthesizer_components=["dense"])


# The field of every family's config, documented once for the docstrings: how an encoder runs a padded batch or a
# packed row (`packed_sequences.runs_packed`, docs/unpadding.md).
UNPAD_DOCSTRING = r"""
        unpad (`bool`, defaults to `True`):
            Run the encoder on packed sequences, each attending only within itself: a padded batch's real tokens
            (where the 2D attention mask has padding) or the sequences of a packed row (BERT and ALBERT: position ids
            that restart, or `cu_seq_lens_q`/`cu_seq_lens_k`). The projections, feed-forward and LayerNorms run on
            those tokens only. The outputs at the real tokens are the padded batch's (to float rounding); the padded
            positions of the last hidden state hold zeros. A call that asks for the attention weights, a padded
            batch's every layer's hidden states, a decoder and a traced graph (`torch.compile`, `torch.export`) run
            with a mask instead. `False`: always with a mask, as transformers' models."""


__all__ = [
    "ATTENTION_ALGORITHMS",
    "DYNAMIC_PROJECTIONS",
    "MIXTURE_INITS",
    "PLACES",
    "SUPPORTED_TRANSFORMERS",
    "SYNTHESIZER_COMPONENTS",
    "TALKING_HEADS_INITS",
    "UNPAD_DOCSTRING",
    "VARIANT_CONFIG_DEFAULTS",
    "VariantAttentionFields",
    "pop_retired_sparse_prediction",
]
