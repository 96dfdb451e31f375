"""VariantT5 configuration: every ``T5Config`` field, the attention fields (dot product, talking heads, Synthesizer,
general bilinear), and the attention per place."""

# First: the transformers version check runs before anything of transformers is imported.
from .configuration_variant_attention import UNPAD_DOCSTRING, VariantAttentionFields

# isort: split
from .attention_types import VARIANT_CONFIG_DOCSTRING, place_attention_type

# isort: split
from transformers import PretrainedConfig


class VariantT5Config(PretrainedConfig):
    r"""
    Configuration of a T5 encoder-decoder whose attentions are dot-product, talking-heads or Synthesizer attention.

    The T5 fields mean what they mean in transformers' `T5Config` (a `T5Config` dict loads as is), including the
    v1.1 style (`feed_forward_proj="gated-gelu"`, `tie_word_embeddings=False`). The config always builds; a
    combination the model cannot be built from raises a `ValueError` naming the field when the model is built.

    Args:
        vocab_size, d_model, d_kv, d_ff, num_layers, num_decoder_layers, num_heads, relative_attention_num_buckets,
        relative_attention_max_distance, dropout_rate, layer_norm_epsilon, initializer_factor, feed_forward_proj,
        is_encoder_decoder, use_cache, pad_token_id, eos_token_id, decoder_start_token_id, classifier_dropout:
            As in `T5Config`. `num_heads` is h, the logits/softmax heads (the relative position bias has h heads);
            `d_kv` is the head size (`attention_head_size` is another name for it).
        tie_word_embeddings (`bool`, defaults to `True`):
            As a constructor argument: whether the LM head is the shared embedding (original T5) or a separate
            matrix (`False`, v1.1); it sets `tie_lm_head`. The encoder and decoder always read the shared embedding,
            so the stored `tie_word_embeddings` is always `True` (as in transformers' own `T5Config` since v5).
        tie_lm_head (`bool`, *optional*):
            Whether the LM head is tied to the shared embedding. Defaults to `tie_word_embeddings`.
        scale_decoder_outputs (`bool`, *optional*):
            Multiply the decoder output by `d_model**-0.5` before the LM head. Defaults to `tie_lm_head` (original
            T5 scales, v1.1 does not); configs saved by transformers v5 state it explicitly.
        encoder_attention_type, decoder_attention_type, cross_attention_type (`str`, *optional*):
            The attention of each place; each defaults to `attention_type`, except that a synthesizer model's
            cross-attention is dot-product (a synthetic alignment between two sequences of unrelated lengths has no
            meaning): a self-attention-only type is refused as `cross_attention_type` (`cross_attention_type()`).
        attention_type, attention_recompute, attention_algorithm, talking_heads_*, synthesizer_*:
            The attention variant: see below. T5 has no length limit of its own, so `synthesizer_max_position`
            defaults to 512 here.
    """

    __doc__ += UNPAD_DOCSTRING + VARIANT_CONFIG_DOCSTRING

    model_type = "variant_t5"
    keys_to_ignore_at_inference = ["cache"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "num_hidden_layers": "num_layers",
        "head_dim": "d_kv",
        "attention_head_size": "d_kv",
        "attention_probs_dropout_prob": "dropout_rate",
    }

    def __init__(
        self,
        vocab_size=32128,
        d_model=512,
        d_kv=64,
        d_ff=2048,
        num_layers=6,
        num_decoder_layers=None,
        num_heads=8,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        dropout_rate=0.1,
        layer_norm_epsilon=1e-6,
        initializer_factor=1.0,
        feed_forward_proj="relu",
        is_encoder_decoder=True,
        use_cache=True,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        classifier_dropout=0.0,
        tie_word_embeddings=True,
        tie_lm_head=None,
        scale_decoder_outputs=None,
        encoder_attention_type=None,
        decoder_attention_type=None,
        cross_attention_type=None,
        unpad=True,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.d_kv = d_kv
        self.d_ff = d_ff
        self.num_layers = num_layers
        self.num_decoder_layers = num_decoder_layers if num_decoder_layers is not None else num_layers
        self.num_heads = num_heads
        self.relative_attention_num_buckets = relative_attention_num_buckets
        self.relative_attention_max_distance = relative_attention_max_distance
        self.dropout_rate = dropout_rate
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_factor = initializer_factor
        self.feed_forward_proj = feed_forward_proj
        self.use_cache = use_cache
        self.classifier_dropout = classifier_dropout
        self.tie_lm_head = tie_word_embeddings if tie_lm_head is None else tie_lm_head
        self.tie_word_embeddings = True  # the encoder/decoder embeddings are the shared one, always
        self.scale_decoder_outputs = self.tie_lm_head if scale_decoder_outputs is None else scale_decoder_outputs
        act_info = feed_forward_proj.split("-")
        self.dense_act_fn = "gelu_new" if feed_forward_proj == "gated-gelu" else act_info[-1]
        self.is_gated_act = act_info[0] == "gated"
        kwargs.pop("dense_act_fn", None)
        kwargs.pop("is_gated_act", None)
        fields = VariantAttentionFields.pop_from(kwargs)  # the attention fields: configuration_variant_attention
        if fields.attention_head_size is not None:  # another name of d_kv
            self.d_kv = fields.attention_head_size
        if fields.synthesizer_max_position is None:
            fields.synthesizer_max_position = 512
        for name, value in vars(fields).items():
            if name != "attention_head_size":  # an attribute_map alias of d_kv, not a field of its own
                setattr(self, name, value)
        self.encoder_attention_type = encoder_attention_type
        self.decoder_attention_type = decoder_attention_type
        self.cross_attention_type = cross_attention_type
        self.unpad = unpad
        super().__init__(
            pad_token_id=pad_token_id,
            eos_token_id=eos_token_id,
            decoder_start_token_id=decoder_start_token_id,
            is_encoder_decoder=is_encoder_decoder,
            **kwargs,
        )

    def attention_type_of(self, place: str) -> str:
        """The attention type of `place` ("encoder", "decoder" or "cross"); see the class docstring."""
        return place_attention_type(self, place)


__all__ = ["VariantT5Config"]
