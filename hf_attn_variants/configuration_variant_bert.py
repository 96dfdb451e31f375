"""VariantBERT configuration: every ``BertConfig`` field plus the attention variant fields."""

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
        attention_type (`str`, defaults to `"dot_product"`):
            `"dot_product"`, `"talking_heads"` or `"synthesizer"`.
        attention_head_size (`int`, *optional*):
            Size of each query/key/value head. Defaults to `hidden_size // heads` (for talking heads, `hidden_size //
            h_k` for queries/keys and `hidden_size // h_v` for values), so the projections keep BERT's shapes.
        attention_recompute (`bool`, defaults to `False`):
            Recompute the attention core (logits, softmax, head maps) in the backward pass instead of storing it:
            less activation memory for some extra compute. Talking heads and synthesizers only.
        talking_heads_num_key_heads (`int`, *optional*):
            h_k, the query/key heads. Defaults to `num_attention_heads`.
        talking_heads_num_value_heads (`int`, *optional*):
            h_v, the value heads. Defaults to `num_attention_heads`.
        talking_heads_pre_softmax (`bool`, defaults to `True`):
            Learn the map P_l[h_k, h] across heads applied to the logits before the softmax.
        talking_heads_post_softmax (`bool`, defaults to `True`):
            Learn the map P_w[h, h_v] across heads applied to the weights after the softmax.
        talking_heads_init (`str`, defaults to `"paper"`):
            `"paper"`: truncated normal with std 1/sqrt(h_in), as the original code. `"identity"`: the model equals
            ordinary multi-head attention at init (needs h_k = h = h_v); use it to warm-start from a BERT checkpoint.
        talking_heads_dynamic (`list[str]`, defaults to `[]`):
            Input-dependent projections added to the static maps, any subset of `"x2l"`, `"m2l"` (logits, from the
            query input and the memory input) and `"x2w"`, `"m2w"` (weights).
        synthesizer_components (`list[str]`, defaults to `["dense"]`):
            The synthetic attention(s): `"dense"`, `"random"`, `"factorized_dense"`, `"factorized_random"`, and
            `"dot_product"` to mix with ordinary attention. Two or more components form a learned mixture.
        synthesizer_max_position (`int`, *optional*):
            The longest sequence a synthesizer attends over. Defaults to `max_position_embeddings`.
        synthesizer_random_trainable (`bool`, defaults to `True`):
            Train the random (and factorized random) matrices; `False` keeps them fixed (still saved).
        synthesizer_factorized_rank (`int`, defaults to 8):
            Rank k of the factorized random synthesizer R = R1 R2^T.
        synthesizer_dense_factors (`list[int]`, *optional*):
            (a, b) with a * b = `synthesizer_max_position` for the factorized dense synthesizer. Defaults to the
            most balanced pair.
        synthesizer_mixture_normalize (`bool`, defaults to `True`):
            Normalise the mixture weights to sum to one (the paper's form); `False` uses them as they are.
        synthesizer_mixture_init (`str`, defaults to `"uniform"`):
            `"uniform"`: every component starts at the same weight. `"dot_product"`: the dot product starts at 1 and
            the synthetic components at 0, so a model warm-started from a BERT checkpoint equals it at init and the
            synthetic weights still learn.
    """

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
        attention_type="dot_product",
        attention_head_size=None,
        attention_recompute=False,
        talking_heads_num_key_heads=None,
        talking_heads_num_value_heads=None,
        talking_heads_pre_softmax=True,
        talking_heads_post_softmax=True,
        talking_heads_init="paper",
        talking_heads_dynamic=None,
        synthesizer_components=None,
        synthesizer_max_position=None,
        synthesizer_random_trainable=True,
        synthesizer_factorized_rank=8,
        synthesizer_dense_factors=None,
        synthesizer_mixture_normalize=True,
        synthesizer_mixture_init="uniform",
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
        self.attention_type = attention_type
        self.attention_head_size = attention_head_size
        self.attention_recompute = attention_recompute
        self.talking_heads_num_key_heads = talking_heads_num_key_heads
        self.talking_heads_num_value_heads = talking_heads_num_value_heads
        self.talking_heads_pre_softmax = talking_heads_pre_softmax
        self.talking_heads_post_softmax = talking_heads_post_softmax
        self.talking_heads_init = talking_heads_init
        self.talking_heads_dynamic = list(talking_heads_dynamic or [])
        self.synthesizer_components = list(synthesizer_components or ["dense"])
        self.synthesizer_max_position = synthesizer_max_position
        self.synthesizer_random_trainable = synthesizer_random_trainable
        self.synthesizer_factorized_rank = synthesizer_factorized_rank
        self.synthesizer_dense_factors = list(synthesizer_dense_factors) if synthesizer_dense_factors else None
        self.synthesizer_mixture_normalize = synthesizer_mixture_normalize
        self.synthesizer_mixture_init = synthesizer_mixture_init
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)


__all__ = ["VariantBertConfig"]
