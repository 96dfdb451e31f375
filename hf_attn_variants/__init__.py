"""hf-attn-variants: talking-heads, Synthesizer and deep single-head attention for Hugging Face Transformers.

Importing the package registers every class with transformers' Auto classes, so `AutoModel.from_pretrained(path)`
works in-process without `trust_remote_code`; saved checkpoints carry their code and load anywhere with
`trust_remote_code=True`.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForNextSentencePrediction,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .attention_variants import ATTENTION_TYPES, SYNTHESIZER_COMPONENTS, AttentionSpec, VariantAttentionCore
from .configuration_variant_bert import VariantBertConfig
from .modeling_variant_bert import (
    VariantBertForMaskedLM,
    VariantBertForMultipleChoice,
    VariantBertForNextSentencePrediction,
    VariantBertForPreTraining,
    VariantBertForQuestionAnswering,
    VariantBertForSequenceClassification,
    VariantBertForTokenClassification,
    VariantBertLMHeadModel,
    VariantBertModel,
    VariantBertPreTrainedModel,
)

__version__ = "0.1.0"

AutoConfig.register(VariantBertConfig.model_type, VariantBertConfig, exist_ok=True)
for _auto, _cls in (
    (AutoModel, VariantBertModel),
    (AutoModelForPreTraining, VariantBertForPreTraining),
    (AutoModelForMaskedLM, VariantBertForMaskedLM),
    (AutoModelForCausalLM, VariantBertLMHeadModel),
    (AutoModelForNextSentencePrediction, VariantBertForNextSentencePrediction),
    (AutoModelForSequenceClassification, VariantBertForSequenceClassification),
    (AutoModelForMultipleChoice, VariantBertForMultipleChoice),
    (AutoModelForTokenClassification, VariantBertForTokenClassification),
    (AutoModelForQuestionAnswering, VariantBertForQuestionAnswering),
):
    _auto.register(VariantBertConfig, _cls, exist_ok=True)

__all__ = [
    "ATTENTION_TYPES",
    "SYNTHESIZER_COMPONENTS",
    "AttentionSpec",
    "VariantAttentionCore",
    "VariantBertConfig",
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
