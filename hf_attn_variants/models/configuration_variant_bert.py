"""VariantBERT configuration: every ``BertConfig`` field plus the attention fields (dot product, talking heads,
Synthesizer, general bilinear)."""

# First: the transformers version check runs before anything of transformers is imported.
from .configuration_variant_attention import UNPAD_DOCSTRING, VariantAttentionFields, pop_retired_sparse_prediction

# isort: split
from .attention_types import VARIANT_CONFIG_DOCSTRING

# isort: split
from transformers import PretrainedConfig


class VariantBertConfig(PretrainedConfig):
    r"""
    Configuration of a BERT model whose self-attention is dot-product, talking-heads or Synthesizer attention.

    The BERT fields mean what they mean in transformers' `BertConfig` (a `BertConfig` dict loads as is); the fields
    below are added. The config always builds: a combination the model cannot be built from raises a `ValueError`
    naming the field when the model is built, as transformers' BERT does for `hidden_size % num_attention_heads`.

    Args:
        vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, hidden_act,
        hidden_dropout_prob, attention_probs_dropout_prob, max_position_embeddings, type_vocab_size,
        initializer_range, layer_norm_eps, pad_token_id, use_cache, classifier_dropout, is_decoder,
        add_cross_attention, bos_token_id, eos_token_id, tie_word_embeddings:
            As in `BertConfig`. `num_attention_heads` is h, the number of logits/softmax heads.
        attention_type, attention_head_size, attention_recompute, attention_algorithm, talking_heads_*, synthesizer_*:
            The attention variant: see below.
    """

    __doc__ += UNPAD_DOCSTRING + VARIANT_CONFIG_DOCSTRING

    model_type = "variant_bert"

    def __init__(
        self,
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=512,
        type_vocab_size=2,
        initializer_range=0.02,
        layer_norm_eps=1e-12,
        pad_token_id=0,
        use_cache=True,
        classifier_dropout=None,
        is_decoder=False,
        add_cross_attention=False,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=True,
        unpad=True,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.use_cache = use_cache
        self.classifier_dropout = classifier_dropout
        self.is_decoder = is_decoder
        self.add_cross_attention = add_cross_attention
        self.tie_word_embeddings = tie_word_embeddings
        self.unpad = unpad
        pop_retired_sparse_prediction(kwargs)  # a forward argument of the masked-LM heads now
        VariantAttentionFields.pop_from(kwargs).set_on(self)  # the attention fields: configuration_variant_attention
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)


__all__ = ["VariantBertConfig"]
