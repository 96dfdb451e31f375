"""VariantALBERT configuration: every ``AlbertConfig`` field plus the attention fields (dot product, talking heads,
Synthesizer, general bilinear)."""

# First: the transformers version check runs before anything of transformers is imported.
from .configuration_variant_attention import UNPAD_DOCSTRING, VariantAttentionFields, pop_retired_sparse_prediction

# isort: split
from .attention_types import VARIANT_CONFIG_DOCSTRING

# isort: split
from transformers import PretrainedConfig


class VariantAlbertConfig(PretrainedConfig):
    r"""
    Configuration of an ALBERT model whose self-attention is dot-product, talking-heads or Synthesizer attention.

    The ALBERT fields mean what they mean in transformers' `AlbertConfig` (an `AlbertConfig` dict loads as is): a
    factorized embedding (`embedding_size`), `num_hidden_layers` layers drawn from `num_hidden_groups` groups of
    `inner_group_num` layers whose parameters are shared. The variant's parameters are shared the same way, so the
    parameter count does not grow with `num_hidden_layers`. The config always builds; a combination the model
    cannot be built from raises a `ValueError` naming the field when the model is built.

    Args:
        vocab_size, embedding_size, hidden_size, num_hidden_layers, num_hidden_groups, num_attention_heads,
        intermediate_size, inner_group_num, hidden_act, hidden_dropout_prob, attention_probs_dropout_prob,
        max_position_embeddings, type_vocab_size, initializer_range, layer_norm_eps, classifier_dropout_prob,
        pad_token_id, bos_token_id, eos_token_id, tie_word_embeddings:
            As in `AlbertConfig`. `num_attention_heads` is h, the number of logits/softmax heads.
        attention_type, attention_head_size, attention_recompute, attention_algorithm, talking_heads_*, synthesizer_*:
            The attention variant: see below.
    """

    __doc__ += UNPAD_DOCSTRING + VARIANT_CONFIG_DOCSTRING

    model_type = "variant_albert"

    def __init__(
        self,
        vocab_size=30000,
        embedding_size=128,
        hidden_size=4096,
        num_hidden_layers=12,
        num_hidden_groups=1,
        num_attention_heads=64,
        intermediate_size=16384,
        inner_group_num=1,
        hidden_act="gelu_new",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=512,
        type_vocab_size=2,
        initializer_range=0.02,
        layer_norm_eps=1e-12,
        classifier_dropout_prob=0.1,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        tie_word_embeddings=True,
        unpad=True,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_hidden_groups = num_hidden_groups
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.inner_group_num = inner_group_num
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.classifier_dropout_prob = classifier_dropout_prob
        self.tie_word_embeddings = tie_word_embeddings
        self.unpad = unpad
        pop_retired_sparse_prediction(kwargs)  # a forward argument of the masked-LM heads now
        VariantAttentionFields.pop_from(kwargs).set_on(self)  # the attention fields: configuration_variant_attention
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)


__all__ = ["VariantAlbertConfig"]
