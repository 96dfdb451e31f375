"""VariantT5: transformers' T5 with dot-product, talking-heads, Synthesizer or general bilinear attention, per place.

What differs from transformers' `modeling_t5.py`:
- every attention (encoder self, decoder self, cross) hands its projected heads to `VariantAttentionCore`
  (`attention_variants.py`), which owns every parameter a variant adds (`...SelfAttention.core.*`); the type is
  chosen per place (`config.attention_type_of`); a synthesizer's cross-attention is dot-product;
- the relative position bias has h heads (the softmax heads) and is added after the pre-softmax map;
- the LM head is tied to the shared embedding or not (`tie_lm_head`, v1.1), independently of the encoder/decoder
  embeddings, which are always the shared one: the stacks hold the `shared` module itself (transformers gives each
  stack an embedding of its own, tied to it), so accelerate's FSDP2 preparation keeps that embedding in one unit;
- `config.auto_map` names every head, so a checkpoint loads through `AutoModel*` with `trust_remote_code=True`.
Everything T5 already has keeps transformers' parameter names, so a vanilla T5 checkpoint loads into a variant.
"""

# First: the transformers version check runs before anything of transformers is imported.
from .attention_types import resolve_attention

# isort: split
import copy
import math

import torch
from torch import nn
from torch.nn import CrossEntropyLoss
from transformers import GenerationMixin
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.loss.loss_utils import ForMaskedLMLoss
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    Seq2SeqQuestionAnsweringModelOutput,
    Seq2SeqSequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .attention_variants import attention_core
from .configuration_variant_t5 import VariantT5Config
from .modeling_variant_utils import (
    CACHE_FIELD,
    VariantPreTrainedModel,
    attention_projections,
    cache_field,
    cache_unless_checkpointing,
    cached_keys_values,
    legacy_cache,
    output_attentions_from_config,
    sequence_classification_loss,
    span_loss,
)
from .packed_sequences import encoder_layout

AUTO_MAP = {
    "AutoConfig": "configuration_variant_t5.VariantT5Config",
    "AutoModel": "modeling_variant_t5.VariantT5Model",
    "AutoModelForSeq2SeqLM": "modeling_variant_t5.VariantT5ForConditionalGeneration",
    "AutoModelForTextEncoding": "modeling_variant_t5.VariantT5EncoderModel",
    "AutoModelForSequenceClassification": "modeling_variant_t5.VariantT5ForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_variant_t5.VariantT5ForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_variant_t5.VariantT5ForQuestionAnswering",
}
# older checkpoints store the shared embedding three times; the cross-attention never has a position bias
_IGNORE_ON_LOAD = [r"(en|de)coder\.embed_tokens\.weight", r"decoder\.block\.0\.layer\.1\.EncDecAttention\.relative"]


def _with_t5_init_std(module: nn.Module | None, std: float) -> nn.Module | None:
    """Record T5's init std on the module that owns the weight (None: a projection the type lacks); `_init_weights`
    applies it.

    The std lives on the weight's own module, not on its parent: for remote code, transformers skips
    `_init_weights` on modules without parameters of their own, so a parent-level branch would never run.
    """
    if module is not None:
        module.t5_init_std = std
    return module


# Copied from transformers.models.t5.modeling_t5.T5LayerNorm with T5LayerNorm->VariantT5LayerNorm
class VariantT5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        """
        Construct a layernorm module in the T5 style. No bias and no subtraction of mean.
        """
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        # T5 uses a layer_norm which only scales and doesn't shift, which is also known as Root Mean
        # Square Layer Normalization https://huggingface.co/papers/1910.07467 thus variance is calculated
        # w/o mean and there is no bias. Additionally we want to make sure that the accumulation for
        # half-precision inputs is done in fp32

        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)

        # convert into half-precision if necessary
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)

        return self.weight * hidden_states


class VariantT5DenseActDense(nn.Module):
    def __init__(self, config):
        super().__init__()
        factor = config.initializer_factor
        self.wi = _with_t5_init_std(nn.Linear(config.d_model, config.d_ff, bias=False), factor * config.d_model**-0.5)
        self.wo = _with_t5_init_std(nn.Linear(config.d_ff, config.d_model, bias=False), factor * config.d_ff**-0.5)
        self.dropout = nn.Dropout(config.dropout_rate)
        self.act = ACT2FN[config.dense_act_fn]

    def forward(self, hidden_states):
        hidden_states = self.dropout(self.act(self.wi(hidden_states)))
        return self.wo(hidden_states.to(self.wo.weight.dtype))


class VariantT5DenseGatedActDense(nn.Module):
    def __init__(self, config):
        super().__init__()
        factor = config.initializer_factor
        self.wi_0 = _with_t5_init_std(
            nn.Linear(config.d_model, config.d_ff, bias=False), factor * config.d_model**-0.5
        )
        self.wi_1 = _with_t5_init_std(
            nn.Linear(config.d_model, config.d_ff, bias=False), factor * config.d_model**-0.5
        )
        self.wo = _with_t5_init_std(nn.Linear(config.d_ff, config.d_model, bias=False), factor * config.d_ff**-0.5)
        self.dropout = nn.Dropout(config.dropout_rate)
        self.act = ACT2FN[config.dense_act_fn]

    def forward(self, hidden_states):
        hidden_states = self.dropout(self.act(self.wi_0(hidden_states)) * self.wi_1(hidden_states))
        return self.wo(hidden_states.to(self.wo.weight.dtype))


class VariantT5LayerFF(nn.Module):
    def __init__(self, config):
        super().__init__()
        dense_class = VariantT5DenseGatedActDense if config.is_gated_act else VariantT5DenseActDense
        self.DenseReluDense = dense_class(config)
        self.layer_norm = VariantT5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, hidden_states):
        return hidden_states + self.dropout(self.DenseReluDense(self.layer_norm(hidden_states)))


class VariantT5Attention(nn.Module):
    """q/k/v/o projections (T5's names, no biases) and the relative position bias around a `VariantAttentionCore`.

    `place` is "encoder", "decoder" (causal self-attention) or "cross". T5 does not scale the logits.
    """

    def __init__(self, config, place, has_relative_attention_bias=False, layer_idx=None):
        super().__init__()
        self.config = config
        self.place = place
        self.layer_idx = layer_idx
        self.is_cross_attention = place == "cross"
        self.has_relative_attention_bias = has_relative_attention_bias
        self.relative_attention_num_buckets = config.relative_attention_num_buckets
        self.relative_attention_max_distance = config.relative_attention_max_distance
        self.spec = spec = resolve_attention(
            config,
            is_causal=place == "decoder",
            is_cross_attention=self.is_cross_attention,
            attention_type=config.attention_type_of(place),
            scaling=1.0,
        )
        factor, d_model = config.initializer_factor, config.d_model
        # the projections the attention type has (general bilinear: no k or v, pure synthesizers: no q or k); T5 has
        # no 1/sqrt(d_k) in the logits: the query's init carries it
        self.q, self.k, self.v = attention_projections(spec, d_model, bias=False)
        _with_t5_init_std(self.q, factor * (d_model * spec.key_head_size) ** -0.5)
        _with_t5_init_std(self.k, factor * d_model**-0.5)
        _with_t5_init_std(self.v, factor * d_model**-0.5)
        self.o = _with_t5_init_std(nn.Linear(spec.value_size, d_model, bias=False), factor * spec.value_size**-0.5)
        if has_relative_attention_bias:  # one bias per softmax head
            self.relative_attention_bias = _with_t5_init_std(
                nn.Embedding(self.relative_attention_num_buckets, spec.num_heads), factor * d_model**-0.5
            )
        self.core = attention_core(spec)

    # Copied from transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket
    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        """
        Adapted from Mesh Tensorflow:
        https://github.com/tensorflow/mesh/blob/0cb87fe07da627bf0b7e60475d59f95ed6b5be3d/mesh_tensorflow/transformer/transformer_layers.py#L593

        Translate relative position to a bucket number for relative attention. The relative position is defined as
        memory_position - query_position, i.e. the distance in tokens from the attending position to the attended-to
        position. If bidirectional=False, then positive relative positions are invalid. We use smaller buckets for
        small absolute relative_position and larger buckets for larger absolute relative_positions. All relative
        positions >=max_distance map to the same bucket. All relative positions <=-max_distance map to the same bucket.
        This should allow for more graceful generalization to longer sequences than the model has been trained on

        Args:
            relative_position: an int32 Tensor
            bidirectional: a boolean - whether the attention is bidirectional
            num_buckets: an integer
            max_distance: an integer

        Returns:
            a Tensor with the same shape as relative_position, containing int32 values in the range [0, num_buckets)
        """
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        # now relative_position is in the range [0, inf)

        # half of the buckets are for exact increments in positions
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact

        # The other half of the buckets are for logarithmically bigger bins in positions up to max_distance
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
        )

        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length, device=None, past_seen_tokens=0):
        """Relative position bias [1, h, n, m] for queries at positions past_seen_tokens.. ."""
        device = device or self.relative_attention_bias.weight.device
        context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None] + past_seen_tokens
        memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        buckets = self._relative_position_bucket(
            memory_position - context_position,
            bidirectional=self.place == "encoder",
            num_buckets=self.relative_attention_num_buckets,
            max_distance=self.relative_attention_max_distance,
        )
        return self.relative_attention_bias(buckets).permute([2, 0, 1]).unsqueeze(0)

    def forward(self, hidden_states, mask=None, key_value_states=None, position_bias=None, cache=None, **kwargs):
        b, n = hidden_states.shape[:2]
        past_seen_tokens = cache.get_seq_length(self.layer_idx) if cache is not None else 0
        query = self.core.project_query(hidden_states, self.q)  # [b, h_k, n, d_k]
        memory = key_value_states if self.is_cross_attention else hidden_states
        key, value = cached_keys_values(
            self.core, self.k, self.v, memory, cache, self.layer_idx, self.is_cross_attention
        )
        if position_bias is None and self.has_relative_attention_bias:
            if kwargs.get("cu_seq_lens_q") is not None:  # packed sequences: the bias of the longest, which each
                # shorter one reads at its top-left corner (it depends on the offset alone)
                length = kwargs["max_length_q"]
                position_bias = self.compute_bias(length, length, hidden_states.device)
            else:
                position_bias = self.compute_bias(n, value.shape[2], hidden_states.device, past_seen_tokens)
        attn_output, attn_weights = self.core(
            query,
            key,
            value,
            mask,
            hidden_states,
            position_bias=position_bias,
            attn_implementation=self.config._attn_implementation,
            **kwargs,
        )
        return self.o(attn_output.reshape(b, n, -1)), position_bias, attn_weights


class VariantT5LayerSelfAttention(nn.Module):
    def __init__(self, config, place, has_relative_attention_bias=False, layer_idx=None):
        super().__init__()
        self.SelfAttention = VariantT5Attention(config, place, has_relative_attention_bias, layer_idx)
        self.layer_norm = VariantT5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, hidden_states, attention_mask=None, position_bias=None, cache=None, **kwargs):
        attention_output, position_bias, attn_weights = self.SelfAttention(
            self.layer_norm(hidden_states), mask=attention_mask, position_bias=position_bias, cache=cache, **kwargs
        )
        return hidden_states + self.dropout(attention_output), position_bias, attn_weights


class VariantT5LayerCrossAttention(nn.Module):
    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.EncDecAttention = VariantT5Attention(config, "cross", layer_idx=layer_idx)
        self.layer_norm = VariantT5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, hidden_states, key_value_states, attention_mask=None, position_bias=None, cache=None, **kwargs):
        attention_output, position_bias, attn_weights = self.EncDecAttention(
            self.layer_norm(hidden_states),
            mask=attention_mask,
            key_value_states=key_value_states,
            position_bias=position_bias,
            cache=cache,
            **kwargs,
        )
        return hidden_states + self.dropout(attention_output), position_bias, attn_weights


def _clamp_fp16(hidden_states):
    """T5's guard against float16 overflow in the residual stream."""
    if hidden_states.dtype != torch.float16:
        return hidden_states
    clamp_value = torch.where(
        torch.isinf(hidden_states).any(), torch.finfo(torch.float16).max - 1000, torch.finfo(torch.float16).max
    )
    return torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)


class VariantT5Block(GradientCheckpointingLayer):
    def __init__(self, config, has_relative_attention_bias=False, layer_idx=None):
        super().__init__()
        self.is_decoder = config.is_decoder
        place = "decoder" if config.is_decoder else "encoder"
        self.layer = nn.ModuleList(
            [VariantT5LayerSelfAttention(config, place, has_relative_attention_bias, layer_idx)]
        )
        if self.is_decoder:
            self.layer.append(VariantT5LayerCrossAttention(config, layer_idx=layer_idx))
        self.layer.append(VariantT5LayerFF(config))

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        position_bias=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        encoder_decoder_position_bias=None,
        cache=None,
        **kwargs,
    ):
        hidden_states, self_attn_position_bias, _ = self.layer[0](
            hidden_states, attention_mask=attention_mask, position_bias=position_bias, cache=cache, **kwargs
        )
        hidden_states = _clamp_fp16(hidden_states)
        cross_attn_position_bias = None
        if self.is_decoder and encoder_hidden_states is not None:
            hidden_states, cross_attn_position_bias, _ = self.layer[1](
                hidden_states,
                key_value_states=encoder_hidden_states,
                attention_mask=encoder_attention_mask,
                position_bias=encoder_decoder_position_bias,
                cache=cache,
                **kwargs,
            )
            hidden_states = _clamp_fp16(hidden_states)
        hidden_states = _clamp_fp16(self.layer[-1](hidden_states))
        return hidden_states, self_attn_position_bias, cross_attn_position_bias


class VariantT5ClassificationHead(nn.Module):
    """Sentence-level classification on the decoder's last `<eos>` state."""

    def __init__(self, config):
        super().__init__()
        std = config.initializer_factor * config.d_model**-0.5
        self.dense = _with_t5_init_std(nn.Linear(config.d_model, config.d_model), std)
        self.dropout = nn.Dropout(p=config.classifier_dropout)
        self.out_proj = _with_t5_init_std(nn.Linear(config.d_model, config.num_labels), std)

    def forward(self, hidden_states):
        hidden_states = torch.tanh(self.dense(self.dropout(hidden_states)))
        return self.out_proj(self.dropout(hidden_states))


class VariantT5PreTrainedModel(VariantPreTrainedModel):
    config_class = VariantT5Config
    base_model_prefix = "transformer"
    auto_map = AUTO_MAP
    _no_split_modules = ["VariantT5Block"]
    _keep_in_fp32_modules = ["wo"]
    _keys_to_ignore_on_load_unexpected = _IGNORE_ON_LOAD
    _can_record_outputs = {
        "hidden_states": OutputRecorder(VariantT5Block, index=0),
        "attentions": OutputRecorder(VariantT5LayerSelfAttention, index=-1),
        "cross_attentions": OutputRecorder(VariantT5LayerCrossAttention, index=-1),
    }

    def _init_weights(self, module):
        """T5's initialisation (scaled by `initializer_factor`), extended to the variant's shapes: each weight's std
        is recorded on its module at construction (`_with_t5_init_std`); embeddings and the untied LM head get
        `initializer_factor`, norms 1, biases 0."""
        super()._init_weights(module)
        factor = self.config.initializer_factor
        if isinstance(module, VariantT5LayerNorm):
            init.constant_(module.weight, factor)
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            init.normal_(module.weight, std=getattr(module, "t5_init_std", factor))
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)

    def _variant_init_std(self):
        return self.config.initializer_factor * self.config.d_model**-0.5  # as T5's k/v projections

    def _shift_right(self, input_ids):
        start, pad = self.config.decoder_start_token_id, self.config.pad_token_id
        if start is None or pad is None:
            raise ValueError("`decoder_start_token_id` and `pad_token_id` must be set to shift labels right.")
        shifted = input_ids.new_zeros(input_ids.shape)
        shifted[..., 1:] = input_ids[..., :-1].clone()
        shifted[..., 0] = start
        return shifted.masked_fill_(shifted == -100, pad)


class VariantT5Stack(VariantT5PreTrainedModel):
    """The encoder (or, with `config.is_decoder`, the decoder) stack; reads `embed_tokens`, the model's `shared`
    embedding module itself (or, built alone, an embedding of its own)."""

    def __init__(self, config, embed_tokens: nn.Embedding | None = None):
        super().__init__(config)
        if getattr(config, "admin", False):
            raise ValueError(
                "`admin`=True is not supported for T5: Admin rescales the residual that a Post-LN layer normalises, "
                "and T5 is Pre-LN (x + f(LN(x)), the residual stream is never normalised). Set `admin`=False."
            )
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model) if embed_tokens is None else embed_tokens
        self.is_decoder = config.is_decoder
        self.block = nn.ModuleList(
            [VariantT5Block(config, has_relative_attention_bias=i == 0, layer_idx=i) for i in range(config.num_layers)]
        )
        self.final_layer_norm = VariantT5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)
        self.post_init()

    def set_input_embeddings(self, new_embeddings):
        self.embed_tokens = new_embeddings

    @merge_with_config_defaults
    @output_attentions_from_config
    @capture_outputs
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        inputs_embeds=None,
        cache=None,
        use_cache=None,
        **kwargs,
    ):
        cache = legacy_cache(cache, kwargs, self)
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        if use_cache and not self.is_decoder:
            raise ValueError("`use_cache=True` is only possible in the decoder stack")
        use_cache = cache_unless_checkpointing(self, use_cache, self.block)
        if not self.is_decoder:
            cache = None
        elif use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        if self.is_decoder:
            self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
            attention_mask = create_causal_mask(
                config=self.config,
                inputs_embeds=inputs_embeds,
                attention_mask=attention_mask,
                **cache_field(self_cache),
            )
        layout = None if self.is_decoder else encoder_layout(self.config, attention_mask, None, None, kwargs)
        if layout is not None:  # a padded batch's real tokens, each sequence attending within itself
            inputs_embeds, attention_mask = layout.pack(inputs_embeds), None
            kwargs.update(layout.attention_kwargs())
        elif not self.is_decoder:
            attention_mask = create_bidirectional_mask(
                config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask
            )
        if self.is_decoder and encoder_hidden_states is not None:
            encoder_attention_mask = create_bidirectional_mask(
                config=self.config,
                inputs_embeds=inputs_embeds,
                attention_mask=encoder_attention_mask,
                encoder_hidden_states=encoder_hidden_states,
            )
        position_bias = encoder_decoder_position_bias = None
        hidden_states = self.dropout(inputs_embeds)
        for layer_module in self.block:
            hidden_states, position_bias, cross_bias = layer_module(
                hidden_states,
                attention_mask,
                position_bias,
                encoder_hidden_states,
                encoder_attention_mask,
                encoder_decoder_position_bias,  # positional, for gradient checkpointing
                cache=cache,
                **kwargs,
            )
            if self.is_decoder and encoder_hidden_states is not None:
                encoder_decoder_position_bias = cross_bias
        hidden_states = self.dropout(self.final_layer_norm(hidden_states))
        if layout is not None:
            hidden_states = layout.unpack(hidden_states)  # [b, n, d], zeros at the padding
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states, **cache_field(cache))


def _stacks(config, shared):
    """The encoder and decoder of an encoder-decoder, both reading the `shared` embedding module."""
    encoder_config = copy.deepcopy(config)
    encoder_config.is_decoder = False
    encoder_config.use_cache = False
    decoder_config = copy.deepcopy(config)
    decoder_config.is_decoder = True
    decoder_config.num_layers = config.num_decoder_layers
    return VariantT5Stack(encoder_config, shared), VariantT5Stack(decoder_config, shared)


_TIED_EMBEDDINGS = {"encoder.embed_tokens.weight": "shared.weight", "decoder.embed_tokens.weight": "shared.weight"}


class _VariantT5EncoderDecoder(VariantT5PreTrainedModel):
    """Shared embedding, encoder and decoder stacks, and the encoder-then-decoder pass of the seq2seq heads."""

    _tied_weights_keys = dict(_TIED_EMBEDDINGS)

    def __init__(self, config):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder, self.decoder = _stacks(config, self.shared)

    def get_input_embeddings(self):
        return self.shared

    def set_input_embeddings(self, new_embeddings):
        self.shared = new_embeddings
        self.encoder.set_input_embeddings(new_embeddings)
        self.decoder.set_input_embeddings(new_embeddings)

    def _encode_decode(
        self,
        input_ids,
        attention_mask,
        decoder_input_ids,
        decoder_attention_mask,
        encoder_outputs,
        cache,
        inputs_embeds,
        decoder_inputs_embeds,
        use_cache,
        **kwargs,
    ):
        cache = legacy_cache(cache, kwargs, self)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            inputs_embeds=decoder_inputs_embeds,
            cache=cache,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            use_cache=use_cache,
            **kwargs,
        )
        return encoder_outputs, decoder_outputs

    @staticmethod
    def _seq2seq_fields(encoder_outputs, decoder_outputs):
        return dict(
            **cache_field(getattr(decoder_outputs, CACHE_FIELD)),
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class VariantT5Model(_VariantT5EncoderDecoder):
    """The bare encoder-decoder: the decoder's last hidden state."""

    def __init__(self, config):
        super().__init__(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        cache=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        use_cache=None,
        **kwargs,
    ):
        encoder_outputs, decoder_outputs = self._encode_decode(
            input_ids,
            attention_mask,
            decoder_input_ids,
            decoder_attention_mask,
            encoder_outputs,
            cache,
            inputs_embeds,
            decoder_inputs_embeds,
            use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **self._seq2seq_fields(encoder_outputs, decoder_outputs),
        )


class VariantT5ForConditionalGeneration(_VariantT5EncoderDecoder, GenerationMixin):
    """Encoder-decoder with an LM head; `generate` with an `EncoderDecoderCache`."""

    accepts_loss_kwargs = True  # ForMaskedLMLoss uses `num_items_in_batch`

    def __init__(self, config):
        super().__init__(config)
        self.model_dim = config.d_model
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_lm_head:  # per instance: the encoder/decoder embeddings are tied either way
            self._tied_weights_keys = {**_TIED_EMBEDDINGS, "lm_head.weight": "shared.weight"}
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        cache=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        labels=None,
        use_cache=None,
        num_items_in_batch=None,
        **kwargs,
    ):
        if labels is not None and decoder_input_ids is None and decoder_inputs_embeds is None:
            decoder_input_ids = self._shift_right(labels)
        encoder_outputs, decoder_outputs = self._encode_decode(
            input_ids,
            attention_mask,
            decoder_input_ids,
            decoder_attention_mask,
            encoder_outputs,
            cache,
            inputs_embeds,
            decoder_inputs_embeds,
            use_cache,
            **kwargs,
        )
        sequence_output = decoder_outputs.last_hidden_state
        if self.config.scale_decoder_outputs:  # the tied head of the original T5 rescales
            sequence_output = sequence_output * (self.model_dim**-0.5)
        lm_logits = self.lm_head(sequence_output)
        loss = None
        if labels is not None:
            # transformers maps *ForConditionalGeneration to the shifting causal loss; T5's labels are not shifted
            loss = ForMaskedLMLoss(lm_logits, labels, self.config.vocab_size, num_items_in_batch=num_items_in_batch)
        return Seq2SeqLMOutput(loss=loss, logits=lm_logits, **self._seq2seq_fields(encoder_outputs, decoder_outputs))

    def prepare_decoder_input_ids_from_labels(self, labels):
        return self._shift_right(labels)


class VariantT5EncoderModel(VariantT5PreTrainedModel):
    """The encoder alone."""

    _tied_weights_keys = {"encoder.embed_tokens.weight": "shared.weight"}
    _keys_to_ignore_on_load_unexpected = [r"decoder", *_IGNORE_ON_LOAD]

    def __init__(self, config):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        encoder_config = copy.deepcopy(config)
        encoder_config.use_cache = False
        encoder_config.is_encoder_decoder = False
        encoder_config.is_decoder = False
        self.encoder = VariantT5Stack(encoder_config, self.shared)
        self.post_init()

    def get_input_embeddings(self):
        return self.shared

    def set_input_embeddings(self, new_embeddings):
        self.shared = new_embeddings
        self.encoder.set_input_embeddings(new_embeddings)

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, **kwargs):
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)


class VariantT5ForSequenceClassification(VariantT5PreTrainedModel):
    """Classification/regression on the decoder state of the last `<eos>` of the input (as transformers' T5)."""

    def __init__(self, config):
        super().__init__(config)
        self.transformer = VariantT5Model(config)
        self.classification_head = VariantT5ClassificationHead(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        labels=None,
        use_cache=None,
        **kwargs,
    ):
        if labels is not None:
            use_cache = False
        if input_ids is None:
            raise ValueError("`input_ids` are needed: the representation is taken at the last `<eos>` token.")
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            decoder_input_ids = self._shift_right(input_ids)
        outputs = self.transformer(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        eos_mask = input_ids.eq(self.config.eos_token_id)
        counts = eos_mask.sum(1)
        if (counts == 0).any() or (counts != counts[0]).any():
            raise ValueError(
                f"Every example needs the same number (>= 1) of `<eos>` tokens (id {self.config.eos_token_id}); "
                f"got {counts.tolist()}."
            )
        batch_size, _, hidden_size = outputs.last_hidden_state.shape
        sentence = outputs.last_hidden_state[eos_mask, :].view(batch_size, -1, hidden_size)[:, -1, :]
        logits = self.classification_head(sentence)
        loss = sequence_classification_loss(self.config, logits, labels) if labels is not None else None
        fields = {k: v for k, v in outputs.items() if k != "last_hidden_state"}
        return Seq2SeqSequenceClassifierOutput(loss=loss, logits=logits, **fields)


class VariantT5ForTokenClassification(VariantT5PreTrainedModel):
    """Per-token classification on the encoder."""

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.transformer = VariantT5EncoderModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, labels=None, **kwargs):
        outputs = self.transformer(input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = CrossEntropyLoss()(logits.view(-1, self.num_labels), labels.view(-1)) if labels is not None else None
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class VariantT5ForQuestionAnswering(_VariantT5EncoderDecoder):
    """Extractive QA: start and end logits on the decoder states."""

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.qa_outputs = _with_t5_init_std(
            nn.Linear(config.d_model, config.num_labels), config.initializer_factor * config.d_model**-0.5
        )
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        start_positions=None,
        end_positions=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        use_cache=None,
        **kwargs,
    ):
        if start_positions is not None and end_positions is not None:
            use_cache = False
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            if input_ids is None:
                raise ValueError("Pass `input_ids`, `decoder_input_ids` or `decoder_inputs_embeds`.")
            decoder_input_ids = self._shift_right(input_ids)
        encoder_outputs, decoder_outputs = self._encode_decode(
            input_ids,
            attention_mask,
            decoder_input_ids,
            decoder_attention_mask,
            encoder_outputs,
            None,
            inputs_embeds,
            decoder_inputs_embeds,
            use_cache,
            **kwargs,
        )
        logits = self.qa_outputs(decoder_outputs.last_hidden_state)
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))
        total_loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        return Seq2SeqQuestionAnsweringModelOutput(
            loss=total_loss,
            start_logits=start_logits,
            end_logits=end_logits,
            **self._seq2seq_fields(encoder_outputs, decoder_outputs),
        )


VariantT5PreTrainedModel.register_for_auto_classes(globals())  # so save_pretrained copies this code

__all__ = [
    "VariantT5EncoderModel",
    "VariantT5ForConditionalGeneration",
    "VariantT5ForQuestionAnswering",
    "VariantT5ForSequenceClassification",
    "VariantT5ForTokenClassification",
    "VariantT5Model",
    "VariantT5PreTrainedModel",
]
