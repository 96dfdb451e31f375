"""hf-attn-variants: talking-heads, Synthesizer, general bilinear and deep single-head attention for transformers.

Importing the package registers every class with transformers' Auto classes, so `AutoModel.from_pretrained(path)`
works in-process without `trust_remote_code`; saved checkpoints carry their code and load anywhere with
`trust_remote_code=True`.

The pieces for training with `Trainer` (`MaskedLMCollator`, `DataCollatorForT5SpanCorruption`, `MaskedLMTrainer`,
`EpochCallback`, `AdminInitCallback`) are imported on first use: they bring in transformers' `Trainer` (and with it
`accelerate` and `datasets`) only for those who train.
"""

import importlib
import os

# The package's version, read by pyproject.toml (`[tool.setuptools.dynamic]`); the modeling and configuration files,
# which checkpoints carry as remote code, never read it.
__version__ = "0.1.0"

import transformers

from .models.attention_types import (
    ATTENTION_REGISTRY,
    ATTENTION_TYPES,
    AttentionSpec,
    AttentionType,
    describe_attention_types,
    resolve_attention,
)
from .models.configuration_variant_attention import SYNTHESIZER_COMPONENTS, VariantAttentionFields

# isort: split
from ._moved import MOVED_MODULES, install_moved_modules
from .attention_tools import AttentionTools, register_attention_type
from .models import modeling_variant_albert, modeling_variant_bert, modeling_variant_t5
from .models.attention_base import VariantAttentionCore
from .models.attention_synthesizer import SynthesizerAttention
from .models.attention_variants import (
    ATTENTION_CLASSES,
    DotProductAttention,
    GeneralBilinearAttention,
    TalkingHeadsAttention,
    attention_core,
)
from .models.configuration_variant_albert import VariantAlbertConfig
from .models.configuration_variant_bert import VariantBertConfig
from .models.configuration_variant_t5 import VariantT5Config
from .models.modeling_variant_albert import (
    VariantAlbertForMaskedLM,
    VariantAlbertForMultipleChoice,
    VariantAlbertForPreTraining,
    VariantAlbertForQuestionAnswering,
    VariantAlbertForSequenceClassification,
    VariantAlbertForTokenClassification,
    VariantAlbertModel,
    VariantAlbertPreTrainedModel,
)
from .models.modeling_variant_bert import (
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
from .models.modeling_variant_t5 import (
    VariantT5EncoderModel,
    VariantT5ForConditionalGeneration,
    VariantT5ForQuestionAnswering,
    VariantT5ForSequenceClassification,
    VariantT5ForTokenClassification,
    VariantT5Model,
    VariantT5PreTrainedModel,
)


def _register(config_class, modeling_module) -> None:
    """Register a family with transformers' Auto classes, from the `AUTO_MAP` its modeling file declares."""
    transformers.AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    for auto, target in modeling_module.AUTO_MAP.items():
        if auto != "AutoConfig":
            getattr(transformers, auto).register(
                config_class, getattr(modeling_module, target.split(".")[1]), exist_ok=True
            )


_register(VariantBertConfig, modeling_variant_bert)
_register(VariantAlbertConfig, modeling_variant_albert)
_register(VariantT5Config, modeling_variant_t5)
install_moved_modules()


def _cpu_for_deepspeed() -> None:
    """DeepSpeed, which transformers and accelerate import wherever it is installed (saving a model does), warns on
    every run without an accelerator that it found none and chose the CPU, also where DeepSpeed is not used. Where
    torch sees no accelerator, it is told the CPU beforehand (a DS_ACCELERATOR of the user's wins)."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    available = accelerator.is_available() if hasattr(accelerator, "is_available") else torch.cuda.is_available()
    if not available:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


_cpu_for_deepspeed()

# name -> the package-only module that defines it, imported on first access (`__getattr__`)
_LAZY = {
    "AdminInitCallback": "admin",
    "DataCollatorForT5SpanCorruption": "training.data_collators",
    "EpochCallback": "training.trainer",
    "MaskedLMCollator": "training.data_collators",
    "MaskedLMTrainer": "training.trainer",
}


def __getattr__(name: str):
    if name in MOVED_MODULES:  # a 0.1.0 module path read as an attribute (`hav.data_collators`): warns, then works
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    *_LAZY,
    "ATTENTION_CLASSES",
    "ATTENTION_REGISTRY",
    "ATTENTION_TYPES",
    "AttentionTools",
    "AttentionType",
    "describe_attention_types",
    "DotProductAttention",
    "GeneralBilinearAttention",
    "SynthesizerAttention",
    "TalkingHeadsAttention",
    "VariantAttentionFields",
    "attention_core",
    "register_attention_type",
    "resolve_attention",
    "SYNTHESIZER_COMPONENTS",
    "AttentionSpec",
    "VariantAlbertConfig",
    "VariantAlbertForMaskedLM",
    "VariantAlbertForMultipleChoice",
    "VariantAlbertForPreTraining",
    "VariantAlbertForQuestionAnswering",
    "VariantAlbertForSequenceClassification",
    "VariantAlbertForTokenClassification",
    "VariantAlbertModel",
    "VariantAlbertPreTrainedModel",
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
    "VariantT5Config",
    "VariantT5EncoderModel",
    "VariantT5ForConditionalGeneration",
    "VariantT5ForQuestionAnswering",
    "VariantT5ForSequenceClassification",
    "VariantT5ForTokenClassification",
    "VariantT5Model",
    "VariantT5PreTrainedModel",
]
