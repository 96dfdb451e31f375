"""VariantALBERT: transformers' ALBERT with dot-product, talking-heads, Synthesizer or general bilinear attention.

What differs from transformers' `modeling_albert.py`:
- the attention hands its projected heads to `VariantAttentionCore` (`attention_variants.py`), which owns every
  parameter a variant adds (`...attention.core.*`); they live inside the shared layer, so ALBERT's cross-layer
  sharing covers them and the parameter count does not grow with `num_hidden_layers`;
- a synthesizer reads its position-indexed tables at `position_ids` where they are given, as the position embeddings
  do, so left padding with position ids leaves the outputs at the real tokens unchanged;
- on a padded batch the encoder runs on the real tokens only (`config.unpad`, on by default), as VariantBERT's: the
  outputs at the real tokens are the padded batch's, the padded positions of the last hidden state hold zeros;
- called with `sparse_prediction=True` and labels (a forward argument, never saved), `ForMaskedLM` and
  `ForPreTraining` run the prediction head only at the labelled positions (`logits` `[n_scored, vocab]`); the loss
  is the same. By default the logits are full `[b, n, vocab]`, as transformers' heads give them;
- layers are `GradientCheckpointingLayer`s: activation checkpointing works (transformers' ALBERT has none);
- the embeddings, `_init_weights` and the token-classification, QA, classification and multiple-choice heads are
  VariantBERT's, marked `# Copied from` (tests/models/test_copies.py keeps them equal): the embeddings accept BERT's
  `cache_length` (always 0 here);
- `config.auto_map` names every head, so a saved checkpoint loads through any `AutoModel*` class with
  `trust_remote_code=True` without this package installed;
- the MLM head adds its output bias (`predictions.bias`) itself and its decoder has none, and `_no_split_modules`
  names only the layer, as in VariantBERT, so that accelerate's FSDP2 preparation can shard the model.
Everything ALBERT already has keeps transformers' parameter names, so a vanilla ALBERT checkpoint loads.
"""

# First: the transformers version check runs before anything of transformers is imported.
from .attention_types import resolve_attention

# isort: split
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import CrossEntropyLoss
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import ModelOutput
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .attention_variants import attention_core
from .configuration_variant_albert import VariantAlbertConfig
from .modeling_variant_utils import (
    VariantPreTrainedModel,
    add_admin_omega,
    add_output_bias,
    admin_residual,
    attention_projections,
    chunked_feed_forward,
    masked_lm_scores,
    output_attentions_from_config,
    pooled_choices,
    sequence_classification_loss,
    span_loss,
)
from .packed_sequences import encoder_layout, packed_row

AUTO_MAP = {
    "AutoConfig": "configuration_variant_albert.VariantAlbertConfig",
    "AutoModel": "modeling_variant_albert.VariantAlbertModel",
    "AutoModelForPreTraining": "modeling_variant_albert.VariantAlbertForPreTraining",
    "AutoModelForMaskedLM": "modeling_variant_albert.VariantAlbertForMaskedLM",
    "AutoModelForSequenceClassification": "modeling_variant_albert.VariantAlbertForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_variant_albert.VariantAlbertForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_variant_albert.VariantAlbertForQuestionAnswering",
    "AutoModelForMultipleChoice": "modeling_variant_albert.VariantAlbertForMultipleChoice",
}


# Copied from modeling_variant_bert.VariantBertEmbeddings with Bert->Albert, BERT->ALBERT, hidden_size->embedding_size
class VariantAlbertEmbeddings(nn.Module):
    """Word, position and token-type embeddings of width `embedding_size` (as transformers' ALBERT)."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.embedding_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.embedding_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.embedding_size)
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
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


class VariantAlbertAttention(nn.Module):
    """ALBERT's attention block: q/k/v, the variant core, output projection, dropout, residual, LayerNorm."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.spec = spec = resolve_attention(config)
        # the projections the attention type has (general bilinear: no key or value, pure synthesizers: no query/key)
        self.query, self.key, self.value = attention_projections(spec, config.hidden_size)
        self.core = attention_core(spec)
        self.dense = nn.Linear(spec.value_size, config.hidden_size)  # h_v * d_v -> hidden
        self.output_dropout = nn.Dropout(config.hidden_dropout_prob)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        add_admin_omega(self, config, config.hidden_size)

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        b, n = hidden_states.shape[:2]
        query = self.core.project_query(hidden_states, self.query)  # [b, h_k, n, d_k]
        key, value = self.core.project_memory(hidden_states, self.key, self.value)  # no cache: ALBERT is an encoder
        attn_output, attn_weights = self.core(
            query,
            key,
            value,
            attention_mask,
            hidden_states,
            attn_implementation=self.config._attn_implementation,
            **kwargs,
        )
        attn_output = self.output_dropout(self.dense(attn_output.reshape(b, n, -1)))
        return self.LayerNorm(admin_residual(self, hidden_states, attn_output)), attn_weights


class VariantAlbertLayer(GradientCheckpointingLayer):
    def __init__(self, config):
        super().__init__()
        self.chunk_size_feed_forward = config.chunk_size_feed_forward
        self.full_layer_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention = VariantAlbertAttention(config)
        self.ffn = nn.Linear(config.hidden_size, config.intermediate_size)
        self.ffn_output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.activation = ACT2FN[config.hidden_act]
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        add_admin_omega(self, config, config.hidden_size)

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        attention_output, _ = self.attention(hidden_states, attention_mask, **kwargs)
        ffn_output = chunked_feed_forward(self.ff_chunk, self.chunk_size_feed_forward, attention_output)
        return self.full_layer_layer_norm(admin_residual(self, attention_output, ffn_output))

    def ff_chunk(self, attention_output):
        return self.ffn_output(self.activation(self.ffn(attention_output)))


class VariantAlbertLayerGroup(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.albert_layers = nn.ModuleList([VariantAlbertLayer(config) for _ in range(config.inner_group_num)])

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        for albert_layer in self.albert_layers:
            hidden_states = albert_layer(hidden_states, attention_mask, **kwargs)
        return hidden_states


class VariantAlbertTransformer(nn.Module):
    """`num_hidden_layers` applications of `num_hidden_groups` shared layer groups."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embedding_hidden_mapping_in = nn.Linear(config.embedding_size, config.hidden_size)
        self.albert_layer_groups = nn.ModuleList(
            [VariantAlbertLayerGroup(config) for _ in range(config.num_hidden_groups)]
        )

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        hidden_states = self.embedding_hidden_mapping_in(hidden_states)
        layers, groups = self.config.num_hidden_layers, self.config.num_hidden_groups
        for i in range(layers):
            group = self.albert_layer_groups[int(i / (layers / groups))]
            hidden_states = group(hidden_states, attention_mask, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


class VariantAlbertPreTrainedModel(VariantPreTrainedModel):
    config_class = VariantAlbertConfig
    base_model_prefix = "albert"
    auto_map = AUTO_MAP
    _can_record_outputs = {"hidden_states": VariantAlbertLayer, "attentions": VariantAlbertAttention}

    # Copied from modeling_variant_bert.VariantBertPreTrainedModel._init_weights with Bert->Albert, LMPredictionHead->MLMHead
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, VariantAlbertMLMHead):
            init.zeros_(module.bias)
        elif isinstance(module, VariantAlbertEmbeddings):
            init.copy_(module.position_ids, torch.arange(module.position_ids.shape[-1]).expand((1, -1)))
            init.zeros_(module.token_type_ids)


@dataclass
class VariantAlbertForPreTrainingOutput(ModelOutput):
    """Output of `VariantAlbertForPreTraining`: MLM + sentence-order-prediction loss and logits."""

    loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    sop_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor] | None = None
    attentions: tuple[torch.Tensor] | None = None


class VariantAlbertModel(VariantAlbertPreTrainedModel):
    """The bare ALBERT encoder, with a tanh pooler on the first token."""

    _no_split_modules = ["VariantAlbertLayer"]

    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config)
        self.embeddings = VariantAlbertEmbeddings(config)
        self.encoder = VariantAlbertTransformer(config)
        if add_pooling_layer:
            self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
            self.pooler_activation = nn.Tanh()
        else:
            self.pooler = self.pooler_activation = None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    @merge_with_config_defaults
    @output_attentions_from_config
    @capture_outputs
    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, inputs_embeds=None, **kwargs
    ):
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        input_shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
        row, position_ids = packed_row(attention_mask, position_ids, input_shape, kwargs)  # a packed row's sequences
        embedding_output = self.embeddings(
            input_ids, position_ids=position_ids, token_type_ids=token_type_ids, inputs_embeds=inputs_embeds
        )
        kwargs["key_positions"] = position_ids  # where the synthesizers read their tables (None: 0..n-1)
        layout = encoder_layout(self.config, attention_mask, position_ids, row, kwargs)  # None: the mask path
        if layout is not None:  # packed sequences, each attending within itself
            embedding_output, attention_mask = layout.pack(embedding_output), None
            kwargs.update(layout.attention_kwargs())
        elif row is not None:  # a packed row on the mask path: its block-diagonal mask
            attention_mask = row.block_mask()
        else:
            attention_mask = create_bidirectional_mask(
                config=self.config, inputs_embeds=embedding_output, attention_mask=attention_mask
            )
        sequence_output = self.encoder(embedding_output, attention_mask, **kwargs).last_hidden_state
        if layout is not None:
            sequence_output = layout.unpack(sequence_output)  # [b, n, d], zeros at a padded batch's padding
        pooled_output = None
        if self.pooler is not None:  # a packed row: one pooled vector per sequence, from its first token
            first = sequence_output[:, 0] if row is None else row.first_tokens(sequence_output)
            pooled_output = self.pooler_activation(self.pooler(first))
        return BaseModelOutputWithPooling(last_hidden_state=sequence_output, pooler_output=pooled_output)


class VariantAlbertMLMHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        # the head owns the output bias and adds it itself (see VariantBertLMPredictionHead): the decoder, tied to the
        # word embeddings, has none
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.dense = nn.Linear(config.hidden_size, config.embedding_size)
        self.decoder = nn.Linear(config.embedding_size, config.vocab_size, bias=False)
        self.activation = ACT2FN[config.hidden_act]

    def forward(self, hidden_states):
        logits = self.decoder(self.LayerNorm(self.activation(self.dense(hidden_states))))
        return add_output_bias(logits, self.bias)  # [b, n, vocab]


class VariantAlbertSOPHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, pooled_output):
        return self.classifier(self.dropout(pooled_output))


class _VariantAlbertWithMLMHead(VariantAlbertPreTrainedModel):
    """Shared accessors of the heads whose decoder is tied to the word embeddings."""

    _tied_weights_keys = {"predictions.decoder.weight": "albert.embeddings.word_embeddings.weight"}
    _keys_to_ignore_on_load_unexpected = [r"predictions\.decoder\.bias"]  # transformers' second name of the bias
    _output_bias_name = "predictions.bias"  # the head's own bias: `resize_token_embeddings` pads it

    def get_output_embeddings(self):
        return self.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.predictions.decoder = new_embeddings


class VariantAlbertForPreTraining(_VariantAlbertWithMLMHead):
    """Masked-LM and sentence-order-prediction heads, as ALBERT's pretraining."""

    def __init__(self, config):
        super().__init__(config)
        self.albert = VariantAlbertModel(config)
        self.predictions = VariantAlbertMLMHead(config)
        self.sop_classifier = VariantAlbertSOPHead(config)
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
        sentence_order_label=None,
        sparse_prediction=False,
        **kwargs,
    ):
        outputs = self.albert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        prediction_scores, labels = masked_lm_scores(  # [b, n, vocab], or [n_scored, vocab] (sparse_prediction)
            self.predictions, outputs.last_hidden_state, labels, sparse_prediction, self.config, attention_mask, kwargs
        )
        sop_scores = self.sop_classifier(outputs.pooler_output)
        total_loss = None
        if labels is not None and sentence_order_label is not None:
            loss_fct = CrossEntropyLoss()
            masked_lm_loss = loss_fct(prediction_scores.view(-1, self.config.vocab_size), labels.view(-1))
            sentence_order_loss = loss_fct(sop_scores.view(-1, 2), sentence_order_label.view(-1))
            total_loss = masked_lm_loss + sentence_order_loss
        return VariantAlbertForPreTrainingOutput(
            loss=total_loss,
            prediction_logits=prediction_scores,
            sop_logits=sop_scores,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class VariantAlbertForMaskedLM(_VariantAlbertWithMLMHead):
    """Masked language modelling head (tied to the word embeddings)."""

    accepts_loss_kwargs = True  # `self.loss_function` (ForMaskedLMLoss) uses `num_items_in_batch`

    def __init__(self, config):
        super().__init__(config)
        self.albert = VariantAlbertModel(config, add_pooling_layer=False)
        self.predictions = VariantAlbertMLMHead(config)
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
        num_items_in_batch=None,
        sparse_prediction=False,
        **kwargs,
    ):
        outputs = self.albert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        prediction_scores, labels = masked_lm_scores(  # [b, n, vocab], or [n_scored, vocab] (sparse_prediction)
            self.predictions, outputs.last_hidden_state, labels, sparse_prediction, self.config, attention_mask, kwargs
        )
        loss = None
        if labels is not None:
            loss = self.loss_function(
                prediction_scores, labels, self.config.vocab_size, num_items_in_batch=num_items_in_batch
            )
        return MaskedLMOutput(
            loss=loss, logits=prediction_scores, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class VariantAlbertForSequenceClassification(VariantAlbertPreTrainedModel):
    """Classification/regression head on the pooled output (`problem_type` chooses the loss)."""

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.albert = VariantAlbertModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    # Copied from modeling_variant_bert.VariantBertForSequenceClassification.forward with bert->albert
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
        outputs = self.albert(
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


# Copied from modeling_variant_bert.VariantBertForTokenClassification with Bert->Albert, bert->albert, classifier_dropout->classifier_dropout_prob
class VariantAlbertForTokenClassification(VariantAlbertPreTrainedModel):
    """Per-token classification head."""

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.albert = VariantAlbertModel(config, add_pooling_layer=False)
        dropout = (
            config.classifier_dropout_prob
            if config.classifier_dropout_prob is not None
            else config.hidden_dropout_prob
        )
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
        outputs = self.albert(
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


# Copied from modeling_variant_bert.VariantBertForQuestionAnswering with Bert->Albert, bert->albert
class VariantAlbertForQuestionAnswering(VariantAlbertPreTrainedModel):
    """Extractive QA head: start and end logits per token."""

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.albert = VariantAlbertModel(config, add_pooling_layer=False)
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
        outputs = self.albert(
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


class VariantAlbertForMultipleChoice(VariantAlbertPreTrainedModel):
    """Multiple-choice head: inputs are [batch, num_choices, seq]; one score per choice."""

    def __init__(self, config):
        super().__init__(config)
        self.albert = VariantAlbertModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    # Copied from modeling_variant_bert.VariantBertForMultipleChoice.forward with bert->albert
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

        outputs = self.albert(
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


VariantAlbertPreTrainedModel.register_for_auto_classes(globals())  # so save_pretrained copies this code

__all__ = [
    "VariantAlbertForMaskedLM",
    "VariantAlbertForMultipleChoice",
    "VariantAlbertForPreTraining",
    "VariantAlbertForQuestionAnswering",
    "VariantAlbertForSequenceClassification",
    "VariantAlbertForTokenClassification",
    "VariantAlbertModel",
    "VariantAlbertPreTrainedModel",
]
