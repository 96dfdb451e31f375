"""What the package's tools know about each model family, in one table. Package-only (a checkpoint never needs it).

convert, publish, presets, admin and the example scripts read `FAMILIES` (and `family_of`) instead of keeping
tables or `model_type` branches of their own, so a fourth family is one more row here plus its modeling files.
"""

import importlib
from dataclasses import dataclass

from .models.configuration_variant_albert import VariantAlbertConfig
from .models.configuration_variant_bert import VariantBertConfig
from .models.configuration_variant_t5 import VariantT5Config


@dataclass(frozen=True)
class Family:
    """One family: its names, its config class and the facts the tools branch on.

    name: the short name ("bert"), also transformers' model_type of the upstream model.
    display: how cards and messages write it ("BERT").
    prefix: the class-name prefix of transformers' classes ("Bert": BertModel); ours add "Variant".
    config_class: our config class; its `model_type` is the checkpoint's ("variant_bert").
    tokenizer: the kind of project tokenizer the examples train ("wordpiece" or "unigram", with sentinels).
    post_ln: Post-LN residuals, where Admin applies (T5 is Pre-LN).
    shares_layers: layers shared across the depth (ALBERT): a residual runs several times per forward pass.
    depth_fields: the config fields that count layers (or layer groups), all multiplied by h in a single-head twin.
    heads_field, ffn_field: the config fields of the head count and the feed-forward width.
    encoder_decoder: an encoder-decoder (T5: span-corruption pretraining, text-to-text, attention per place).
    sentence_objective: the sentence-pair pretraining task of its ForPreTraining head ("nsp", "sop"; None: none).
    """

    name: str
    display: str
    prefix: str
    config_class: type
    tokenizer: str
    post_ln: bool
    shares_layers: bool
    depth_fields: tuple[str, ...]
    heads_field: str
    ffn_field: str
    encoder_decoder: bool = False
    sentence_objective: str | None = None

    @property
    def model_type(self) -> str:
        return self.config_class.model_type

    @property
    def base_model(self) -> str:
        """Our base model's class name ("VariantBertModel")."""
        return f"Variant{self.prefix}Model"

    def model_class(self, head: str) -> type:
        """Our class of `head`, a class-name suffix ("ForMaskedLM": `VariantBertForMaskedLM`)."""
        module = importlib.import_module(f"{__package__}.models.modeling_{self.model_type}")
        return getattr(module, f"Variant{self.prefix}{head}")

    @property
    def upstream_config(self) -> str:
        """transformers' config class name ("BertConfig")."""
        return f"{self.prefix}Config"


FAMILIES = {
    family.name: family
    for family in (
        Family(
            "bert",
            "BERT",
            "Bert",
            VariantBertConfig,
            tokenizer="wordpiece",
            post_ln=True,
            shares_layers=False,
            depth_fields=("num_hidden_layers",),
            heads_field="num_attention_heads",
            ffn_field="intermediate_size",
            sentence_objective="nsp",
        ),
        Family(
            "albert",
            "ALBERT",
            "Albert",
            VariantAlbertConfig,
            tokenizer="wordpiece",
            post_ln=True,
            shares_layers=True,
            depth_fields=("num_hidden_layers", "num_hidden_groups"),
            heads_field="num_attention_heads",
            ffn_field="intermediate_size",
            sentence_objective="sop",
        ),
        Family(
            "t5",
            "T5",
            "T5",
            VariantT5Config,
            tokenizer="unigram",
            post_ln=False,
            shares_layers=False,
            depth_fields=("num_layers", "num_decoder_layers"),
            heads_field="num_heads",
            ffn_field="d_ff",
            encoder_decoder=True,
        ),
    )
}


def family_of(model_type_or_config) -> Family:
    """The family of a model_type (ours, "variant_bert", or transformers', "bert") or of a config (object or dict).

    Raises a ValueError naming the supported model types for anything else.
    """
    model_type = model_type_or_config
    if isinstance(model_type_or_config, dict):
        model_type = model_type_or_config.get("model_type")
    elif not isinstance(model_type_or_config, str):
        model_type = getattr(model_type_or_config, "model_type", None)
    for family in FAMILIES.values():
        if model_type in (family.name, family.model_type):
            return family
    supported = ", ".join(t for f in FAMILIES.values() for t in (f.name, f.model_type))
    raise ValueError(f"{model_type!r} is not a model type of a supported family; supported: {supported}.")


__all__ = ["FAMILIES", "Family", "family_of"]
