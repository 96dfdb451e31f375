"""VariantBERT: transformers' BERT with dot-product, talking-heads, Synthesizer or general bilinear attention.

What differs from transformers' `modeling_bert.py`:
- the self-attention hands its projected heads to `VariantAttentionCore` (`attention_variants.py`), which owns
  every parameter a variant adds (`...attention.self.core.*`); with talking heads the query/key projections have
  h_k heads and the value projection h_v heads, a pure synthesizer has no query/key projections, and general
  bilinear attention no key/value projections (the memory itself is the keys and the values);
- a synthesizer reads its position-indexed tables at `position_ids` where they are given (the cached tokens at the
  attention mask's count, where `generate` put them), so left padding with position ids leaves the logits unchanged;
- an encoder given a padded batch (a 2D attention mask with padding) runs on its real tokens only (`config.unpad`,
  on by default; `modeling_variant_utils.unpadded`): the projections, feed-forward and LayerNorms on the packed
  tokens, attention within each sequence. The outputs at the real tokens are the padded batch's; the padded positions
  of the last hidden state hold zeros where transformers' BERT computes values no real token reads;
- called with `sparse_prediction=True` and labels (a forward argument, never saved), `ForMaskedLM` and
  `ForPreTraining` run the prediction head only at the labelled positions (`logits` `[n_scored, vocab]`); the loss
  is the same. By default the logits are full `[b, n, vocab]`, as transformers' heads give them;
- `config.auto_map` names every head, so a saved checkpoint loads through any `AutoModel*` class with
  `trust_remote_code=True` without this package installed;
- the LM head adds its output bias (`cls.predictions.bias`) itself and its decoder has none, where transformers'
  `cls.predictions.decoder.bias` is a second name of that tensor (checkpoints hold the same keys); and
  `_no_split_modules` names only the layer. Both let accelerate's FSDP2 preparation shard the model: it wraps each
  `_no_split_modules` module, then the tied word embedding and decoder together (docs/scale-out.md).
Everything BERT already has keeps transformers' parameter names, so a vanilla BERT checkpoint loads into a variant.
"""

# First: the transformers version check runs before anything of transformers is imported.
from .attention_types import resolve_attention

# isort: split
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import CrossEntropyLoss
from transformers import GenerationMixin
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPastAndCrossAttentions,
    BaseModelOutputWithPoolingAndCrossAttentions,
    CausalLMOutputWithCrossAttentions,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    NextSentencePredictorOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import ModelOutput, logging
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .attention_variants import attention_core
from .configuration_variant_bert import VariantBertConfig
from .modeling_variant_utils import (
    CACHE_FIELD,
    VariantPreTrainedModel,
    add_admin_omega,
    add_output_bias,
    admin_residual,
    attention_projections,
    cache_field,
    cache_unless_checkpointing,
    cached_keys_values,
    chunked_feed_forward,
    key_positions,
    legacy_cache,
    masked_lm_scores,
    output_attentions_from_config,
    pooled_choices,
    sequence_classification_loss,
    span_loss,
)
from .packed_sequences import encoder_layout, packed_row

logger = logging.get_logger(__name__)

# Every Auto class a saved checkpoint answers to (save_pretrained alone records only the saved class).
AUTO_MAP = {
    "AutoConfig": "configuration_variant_bert.VariantBertConfig",
    "AutoModel": "modeling_variant_bert.VariantBertModel",
    "AutoModelForPreTraining": "modeling_variant_bert.VariantBertForPreTraining",
    "AutoModelForMaskedLM": "modeling_variant_bert.VariantBertForMaskedLM",
    "AutoModelForCausalLM": "modeling_variant_bert.VariantBertLMHeadModel",
    "AutoModelForNextSentencePrediction": "modeling_variant_bert.VariantBertForNextSentencePrediction",
    "AutoModelForSequenceClassification": "modeling_variant_bert.VariantBertForSequenceClassification",
    "AutoModelForMultipleChoice": "modeling_variant_bert.VariantBertForMultipleChoice",
    "AutoModelForTokenClassification": "modeling_variant_bert.VariantBertForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_variant_bert.VariantBertForQuestionAnswering",
}


class VariantBertEmbeddings(nn.Module):
    """Word, position and token-type embeddings of width `hidden_size` (as transformers' BERT)."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer(
            "position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)), persistent=False
        )
        self.register_buffer(
            "token_type_ids", torch.zeros(self.position_ids.size(), dtype=torch.long), persistent=False
        )

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, cache_length=0):
        batch_size, seq_length = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
        if position_ids is None:
            if cache_length + seq_length > self.position_ids.shape[1]:
                raise ValueError(
                    f"The sequence ({cache_length + seq_length} positions) is longer than `max_position_embeddings`"
                    f"={self.position_ids.shape[1]}; shorten or truncate the input."
                )
            position_ids = self.position_ids[:, cache_length : cache_length + seq_length]
        if token_type_ids is None:
            token_type_ids = self.token_type_ids.expand(position_ids.shape[0], -1)
            token_type_ids = torch.gather(token_type_ids, 1, position_ids).expand(batch_size, seq_length)
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)


class _VariantBertAttentionProjections(nn.Module):
    """Query/key/value projections (BERT's names) around a `VariantAttentionCore`."""

    is_cross_attention = False

    def __init__(self, config, is_causal=False, layer_idx=None):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_causal = is_causal
        self.spec = spec = resolve_attention(config, is_causal=is_causal, is_cross_attention=self.is_cross_attention)
        # the projections the attention type has (general bilinear: no key or value, pure synthesizers: no query/key)
        self.query, self.key, self.value = attention_projections(spec, config.hidden_size)
        self.core = attention_core(spec)

    def forward(self, hidden_states, attention_mask=None, encoder_hidden_states=None, cache=None, **kwargs):
        b, n = hidden_states.shape[:2]
        query = self.core.project_query(hidden_states, self.query)  # [b, h_k, n, d_k]
        memory = encoder_hidden_states if self.is_cross_attention else hidden_states
        key, value = cached_keys_values(
            self.core, self.key, self.value, memory, cache, self.layer_idx, self.is_cross_attention
        )
        attn_output, attn_weights = self.core(
            query,
            key,
            value,
            attention_mask,
            hidden_states,
            attn_implementation=self.config._attn_implementation,
            **kwargs,
        )
        return attn_output.reshape(b, n, -1), attn_weights


class VariantBertSelfAttention(_VariantBertAttentionProjections):
    is_cross_attention = False


class VariantBertCrossAttention(_VariantBertAttentionProjections):
    is_cross_attention = True


class VariantBertSelfOutput(nn.Module):
    def __init__(self, config, input_size):
        super().__init__()
        self.dense = nn.Linear(input_size, config.hidden_size)  # h_v * d_v -> hidden
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        add_admin_omega(self, config, config.hidden_size)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(admin_residual(self, input_tensor, hidden_states))


class VariantBertAttention(nn.Module):
    def __init__(self, config, is_causal=False, layer_idx=None, is_cross_attention=False):
        super().__init__()
        self.is_cross_attention = is_cross_attention
        attention_class = VariantBertCrossAttention if is_cross_attention else VariantBertSelfAttention
        self.self = attention_class(config, is_causal=is_causal, layer_idx=layer_idx)
        self.output = VariantBertSelfOutput(config, self.self.spec.value_size)

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        cache=None,
        **kwargs,
    ):
        attention_mask = encoder_attention_mask if self.is_cross_attention else attention_mask
        attention_output, attn_weights = self.self(
            hidden_states,
            attention_mask=attention_mask,
            encoder_hidden_states=encoder_hidden_states,
            cache=cache,
            **kwargs,
        )
        return self.output(attention_output, hidden_states), attn_weights


class VariantBertIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = (
            ACT2FN[config.hidden_act] if isinstance(config.hidden_act, str) else config.hidden_act
        )

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class VariantBertOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        add_admin_omega(self, config, config.hidden_size)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(admin_residual(self, input_tensor, hidden_states))


class VariantBertLayer(GradientCheckpointingLayer):
    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.chunk_size_feed_forward = config.chunk_size_feed_forward
        self.attention = VariantBertAttention(config, is_causal=config.is_decoder, layer_idx=layer_idx)
        self.is_decoder = config.is_decoder
        self.add_cross_attention = config.add_cross_attention
        if self.add_cross_attention:
            if not self.is_decoder:
                raise ValueError(
                    "`add_cross_attention`=True needs `is_decoder`=True: cross-attention only exists in a decoder."
                )
            self.crossattention = VariantBertAttention(
                config, is_causal=False, layer_idx=layer_idx, is_cross_attention=True
            )
        self.intermediate = VariantBertIntermediate(config)
        self.output = VariantBertOutput(config)

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        cache=None,
        **kwargs,
    ):
        attention_output, _ = self.attention(hidden_states, attention_mask, cache=cache, **kwargs)
        if self.is_decoder and encoder_hidden_states is not None:
            if not hasattr(self, "crossattention"):
                raise ValueError(
                    "`encoder_hidden_states` were passed but the model has no cross-attention layers: build it with "
                    "`add_cross_attention`=True."
                )
            attention_output, _ = self.crossattention(
                attention_output, None, encoder_hidden_states, encoder_attention_mask, cache=cache, **kwargs
            )
        return chunked_feed_forward(self.feed_forward_chunk, self.chunk_size_feed_forward, attention_output)

    def feed_forward_chunk(self, attention_output):
        return self.output(self.intermediate(attention_output), attention_output)


class VariantBertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([VariantBertLayer(config, layer_idx=i) for i in range(config.num_hidden_layers)])

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        cache=None,
        use_cache=None,
        **kwargs,
    ):
        for layer_module in self.layer:
            hidden_states = layer_module(
                hidden_states,
                attention_mask,
                encoder_hidden_states,  # positional, for gradient checkpointing
                encoder_attention_mask=encoder_attention_mask,
                cache=cache,
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, **cache_field(cache if use_cache else None)
        )


# Copied from transformers.models.bert.modeling_bert.BertPooler with BertPooler->VariantBertPooler
class VariantBertPooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # We "pool" the model by simply taking the hidden state corresponding
        # to the first token.
        first_token_tensor = hidden_states[:, 0]
        pooled_output = self.dense(first_token_tensor)
        pooled_output = self.activation(pooled_output)
        return pooled_output


class VariantBertPredictionHeadTransform(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = ACT2FN[config.hidden_act] if isinstance(config.hidden_act, str) else config.hidden_act
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states):
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class VariantBertLMPredictionHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.transform = VariantBertPredictionHeadTransform(config)
        # The output weights are the input embeddings (tied), with an output-only bias per token that this head owns
        # and adds itself (as the original BERT's `output_bias`): the decoder has none, so no parameter lives in two
        # modules and FSDP can shard the tied pair as one unit (docs/scale-out.md).
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states):
        return add_output_bias(self.decoder(self.transform(hidden_states)), self.bias)  # [b, n, vocab]


class VariantBertOnlyMLMHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.predictions = VariantBertLMPredictionHead(config)

    def forward(self, sequence_output):
        return self.predictions(sequence_output)


class VariantBertOnlyNSPHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(self, pooled_output):
        return self.seq_relationship(pooled_output)


class VariantBertPreTrainingHeads(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.predictions = VariantBertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(self, sequence_output, pooled_output):
        return self.predictions(sequence_output), self.seq_relationship(pooled_output)


class VariantBertPreTrainedModel(VariantPreTrainedModel):
    config_class = VariantBertConfig
    base_model_prefix = "bert"
    auto_map = AUTO_MAP
    _can_record_outputs = {
        "hidden_states": VariantBertLayer,
        "attentions": VariantBertSelfAttention,
        "cross_attentions": VariantBertCrossAttention,
    }

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, VariantBertLMPredictionHead):
            init.zeros_(module.bias)
        elif isinstance(module, VariantBertEmbeddings):
            init.copy_(module.position_ids, torch.arange(module.position_ids.shape[-1]).expand((1, -1)))
            init.zeros_(module.token_type_ids)


@dataclass
class VariantBertForPreTrainingOutput(ModelOutput):
    """Output of `VariantBertForPreTraining`: MLM + next-sentence-prediction loss and logits."""

    loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    seq_relationship_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor] | None = None
    attentions: tuple[torch.Tensor] | None = None


class VariantBertModel(VariantBertPreTrainedModel):
    """The bare encoder (or decoder, with `is_decoder=True`; cross-attention with `add_cross_attention=True`)."""

    _no_split_modules = ["VariantBertLayer"]

    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config)
        self.embeddings = VariantBertEmbeddings(config)
        self.encoder = VariantBertEncoder(config)
        self.pooler = VariantBertPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    @merge_with_config_defaults
    @output_attentions_from_config
    @capture_outputs
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        cache: Cache | None = None,
        use_cache=None,
        **kwargs,
    ):
        cache = legacy_cache(cache, kwargs, self)
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        use_cache = (
            (use_cache if use_cache is not None else self.config.use_cache) if self.config.is_decoder else False
        )
        use_cache = cache_unless_checkpointing(self, use_cache, self.encoder.layer)
        if use_cache and cache is None:
            cache = (
                EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
                if encoder_hidden_states is not None
                else DynamicCache(config=self.config)
            )
        cache_length = cache.get_seq_length() if cache is not None else 0
        input_shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
        row, position_ids = packed_row(attention_mask, position_ids, input_shape, kwargs)  # a packed row's sequences
        kwargs["key_positions"] = key_positions(position_ids, attention_mask, cache_length)  # synthesizers' rows
        embedding_output = self.embeddings(
            input_ids=input_ids,
            position_ids=position_ids,
            token_type_ids=token_type_ids,
            inputs_embeds=inputs_embeds,
            cache_length=cache_length,
        )
        layout = encoder_layout(self.config, attention_mask, position_ids, row, kwargs)  # None: the mask path
        if layout is not None:  # packed sequences, each attending within itself
            embedding_output, attention_mask = layout.pack(embedding_output), None
            kwargs.update(layout.attention_kwargs())
        elif row is not None and cache_length == 0:  # a packed row on the mask path: its block-diagonal mask
            attention_mask = row.block_mask(causal=self.config.is_decoder)
        elif self.config.is_decoder:
            attention_mask = create_causal_mask(
                config=self.config, inputs_embeds=embedding_output, attention_mask=attention_mask, **cache_field(cache)
            )
        else:
            attention_mask = create_bidirectional_mask(
                config=self.config, inputs_embeds=embedding_output, attention_mask=attention_mask
            )
        if encoder_attention_mask is not None:
            encoder_attention_mask = create_bidirectional_mask(
                config=self.config,
                inputs_embeds=embedding_output,
                attention_mask=encoder_attention_mask,
                encoder_hidden_states=encoder_hidden_states,
            )
        encoder_outputs = self.encoder(
            embedding_output,
            attention_mask=attention_mask,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            cache=cache,
            use_cache=use_cache,
            **kwargs,
        )
        sequence_output = encoder_outputs.last_hidden_state
        if layout is not None:
            sequence_output = layout.unpack(sequence_output)  # [b, n, d], zeros at a padded batch's padding
        pooled_output = None
        if self.pooler is not None:  # a packed row: one pooled vector per sequence, from its first token
            pooled_output = self.pooler(sequence_output if row is None else row.first_tokens(sequence_output)[:, None])
        return BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=sequence_output,
            pooler_output=pooled_output,
            **cache_field(getattr(encoder_outputs, CACHE_FIELD)),
        )


_TIED_LM_HEAD = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight"}


class _VariantBertWithLMHead(VariantBertPreTrainedModel):
    """Shared accessors of the heads whose decoder is tied to the word embeddings."""

    _tied_weights_keys = dict(_TIED_LM_HEAD)
    _keys_to_ignore_on_load_unexpected = [r"cls\.predictions\.decoder\.bias"]  # transformers' second name of the bias
    _output_bias_name = "cls.predictions.bias"  # the head's own bias: `resize_token_embeddings` pads it

    def _masked_lm_scores(self, outputs, labels, sparse_prediction, attention_mask, kwargs):
        """`masked_lm_scores` of this model's prediction head on the encoder's `outputs`."""
        return masked_lm_scores(
            self.cls.predictions,
            outputs.last_hidden_state,
            labels,
            sparse_prediction,
            self.config,
            attention_mask,
            kwargs,
        )

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings


class VariantBertForPreTraining(_VariantBertWithLMHead):
    """Masked-LM and next-sentence-prediction heads, as BERT's pretraining."""

    def __init__(self, config):
        super().__init__(config)
        self.bert = VariantBertModel(config)
        self.cls = VariantBertPreTrainingHeads(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels=None,
        next_sentence_label=None,
        sparse_prediction=False,
        **kwargs,
    ):
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        prediction_scores, labels = self._masked_lm_scores(outputs, labels, sparse_prediction, attention_mask, kwargs)
        seq_relationship_score = self.cls.seq_relationship(outputs.pooler_output)
        total_loss = None
        if labels is not None and next_sentence_label is not None:
            loss_fct = CrossEntropyLoss()
            masked_lm_loss = loss_fct(prediction_scores.view(-1, self.config.vocab_size), labels.view(-1))
            next_sentence_loss = loss_fct(seq_relationship_score.view(-1, 2), next_sentence_label.view(-1))
            total_loss = masked_lm_loss + next_sentence_loss
        return VariantBertForPreTrainingOutput(
            loss=total_loss,
            prediction_logits=prediction_scores,
            seq_relationship_logits=seq_relationship_score,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class VariantBertLMHeadModel(_VariantBertWithLMHead, GenerationMixin):
    """Causal decoder (`is_decoder=True`) with a tied LM head; supports `generate` with a cache."""

    accepts_loss_kwargs = True  # `self.loss_function` uses `num_items_in_batch`

    def __init__(self, config):
        super().__init__(config)
        if not config.is_decoder:
            logger.warning("If you want to use `VariantBertLMHeadModel` as a standalone, add `is_decoder=True.`")
        self.bert = VariantBertModel(config, add_pooling_layer=False)
        self.cls = VariantBertOnlyMLMHead(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        labels=None,
        cache: Cache | None = None,
        use_cache=None,
        logits_to_keep=0,
        **kwargs,
    ):
        cache = legacy_cache(cache, kwargs, self)
        if labels is not None:
            use_cache = False
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            cache=cache,
            use_cache=use_cache,
            return_dict=True,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        if isinstance(logits_to_keep, int) and logits_to_keep > 0:
            hidden_states = hidden_states[:, -logits_to_keep:]
        elif not isinstance(logits_to_keep, int):
            hidden_states = hidden_states[:, logits_to_keep]
        logits = self.cls(hidden_states)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithCrossAttentions(
            loss=loss,
            logits=logits,
            **cache_field(getattr(outputs, CACHE_FIELD)),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            cross_attentions=outputs.cross_attentions,
        )


class VariantBertForMaskedLM(_VariantBertWithLMHead):
    """Masked language modelling head (tied to the word embeddings)."""

    accepts_loss_kwargs = True  # `self.loss_function` (ForMaskedLMLoss) uses `num_items_in_batch`

    def __init__(self, config):
        super().__init__(config)
        if config.is_decoder:
            logger.warning("`VariantBertForMaskedLM` wants `config.is_decoder=False` for bi-directional attention.")
        self.bert = VariantBertModel(config, add_pooling_layer=False)
        self.cls = VariantBertOnlyMLMHead(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        labels=None,
        num_items_in_batch=None,
        sparse_prediction=False,
        **kwargs,
    ):
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            return_dict=True,
            **kwargs,
        )
        # [b, n, vocab], or [n_scored, vocab] (sparse_prediction)
        prediction_scores, labels = self._masked_lm_scores(outputs, labels, sparse_prediction, attention_mask, kwargs)
        masked_lm_loss = None
        if labels is not None:
            masked_lm_loss = self.loss_function(
                prediction_scores, labels, self.config.vocab_size, num_items_in_batch=num_items_in_batch
            )
        return MaskedLMOutput(
            loss=masked_lm_loss,
            logits=prediction_scores,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class VariantBertForNextSentencePrediction(VariantBertPreTrainedModel):
    """Next-sentence-prediction head on the pooled output."""

    def __init__(self, config):
        super().__init__(config)
        self.bert = VariantBertModel(config)
        self.cls = VariantBertOnlyNSPHead(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels=None,
        **kwargs,
    ):
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        scores = self.cls(outputs.pooler_output)
        loss = CrossEntropyLoss()(scores.view(-1, 2), labels.view(-1)) if labels is not None else None
        return NextSentencePredictorOutput(
            loss=loss, logits=scores, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class VariantBertForSequenceClassification(VariantBertPreTrainedModel):
    """Classification/regression head on the pooled output (`problem_type` chooses the loss)."""

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = VariantBertModel(config)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels=None,
        **kwargs,
    ):
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(self.dropout(outputs.pooler_output))
        loss = sequence_classification_loss(self.config, logits, labels) if labels is not None else None
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class VariantBertForMultipleChoice(VariantBertPreTrainedModel):
    """Multiple-choice head: inputs are [batch, num_choices, seq]; one score per choice."""

    def __init__(self, config):
        super().__init__(config)
        self.bert = VariantBertModel(config)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels=None,
        **kwargs,
    ):
        num_choices = input_ids.shape[1] if input_ids is not None else inputs_embeds.shape[1]

        def flat(t):
            return t.view(-1, *t.shape[2:]) if t is not None else None

        outputs = self.bert(
            flat(input_ids),
            attention_mask=flat(attention_mask),
            token_type_ids=flat(token_type_ids),
            position_ids=flat(position_ids),
            inputs_embeds=flat(inputs_embeds),
            return_dict=True,
            **kwargs,
        )
        pooled_output = pooled_choices(outputs.pooler_output, outputs.last_hidden_state.shape[0])
        logits = self.classifier(self.dropout(pooled_output)).view(-1, num_choices)
        loss = CrossEntropyLoss()(logits, labels) if labels is not None else None
        return MultipleChoiceModelOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class VariantBertForTokenClassification(VariantBertPreTrainedModel):
    """Per-token classification head."""

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = VariantBertModel(config, add_pooling_layer=False)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels=None,
        **kwargs,
    ):
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = CrossEntropyLoss()(logits.view(-1, self.num_labels), labels.view(-1)) if labels is not None else None
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class VariantBertForQuestionAnswering(VariantBertPreTrainedModel):
    """Extractive QA head: start and end logits per token."""

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = VariantBertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        start_positions=None,
        end_positions=None,
        **kwargs,
    ):
        outputs = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.qa_outputs(outputs.last_hidden_state)
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))
        total_loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        return QuestionAnsweringModelOutput(
            loss=total_loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


VariantBertPreTrainedModel.register_for_auto_classes(globals())  # so save_pretrained copies this code

__all__ = [
    "VariantBertForMaskedLM",
    "VariantBertForMultipleChoice",
    "VariantBertForNextSentencePrediction",
    "VariantBertForPreTraining",
    "VariantBertForQuestionAnswering",
    "VariantBertForSequenceClassification",
    "VariantBertForTokenClassification",
    "VariantBertLMHeadModel",
    "VariantBertModel",
    "VariantBertPreTrainedModel",
]
