"""What the families share beyond the attention mathematics: the `PreTrainedModel` base (full `auto_map`, the variant
init, fixed synthesizers, the LM head's own bias under `resize_token_embeddings`), the q/k/v projections an attention
type has and its keys/values through a cache, the keys' positions, Admin's residual, the masked-LM head's scored
positions (the `sparse_prediction` argument), and the losses of the classification and span-QA heads.

What a family keeps readable top to bottom (embeddings, heads) and repeats from another family is marked
`# Copied from modeling_variant_<family>.<name> with A->B`; tests/models/test_copies.py keeps each copy equal to its original.

Copied next to every saved checkpoint (remote code): imports only torch, public transformers API and siblings.
"""

import contextlib
import functools
import logging as std_logging
import re
import warnings

import torch
from torch import nn
from torch.nn import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss
from transformers import PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils import logging

from .attention_base import VariantAttentionCore
from .attention_types import ATTENTION_REGISTRY
from .configuration_variant_attention import VARIANT_CONFIG_DEFAULTS
from .packed_sequences import runs_packed

logger = logging.get_logger(__name__)

# from_pretrained's arguments that say where a checkpoint's config.json is (passed on to read it)
_HUB_KWARGS = ("cache_dir", "force_download", "proxies", "token", "revision", "local_files_only", "subfolder")
# the fields that choose an attention type (T5 chooses it per place)
_TYPE_FIELDS = ("attention_type", "encoder_attention_type", "decoder_attention_type", "cross_attention_type")
# the parameters a variant adds to the upstream model (an attention type's own, Admin's omegas): a vanilla checkpoint
# never holds them, and a warm start initialises them (`_init_weights`) instead of reporting them missing
VARIANT_PARAMETERS = (r"\.core\.", r"admin_omega")


@contextlib.contextmanager
def _warm_start_loading(cls, source_type: str):
    """`from_pretrained` of a vanilla `source_type` checkpoint into `cls`, said once by the caller: transformers'
    warning that a `bert` config instantiates a `variant_bert` one (what a warm start is) is dropped, and the
    parameters the variant adds are not reported missing."""
    ours = cls.config_class.model_type

    def not_the_type_warning(record) -> bool:
        text = record.getMessage()
        return not ("model of type" in text and f"`{source_type}`" in text and f"`{ours}`" in text)

    config_logger = std_logging.getLogger("transformers.configuration_utils")
    config_logger.addFilter(not_the_type_warning)
    own = cls.__dict__.get("_keys_to_ignore_on_load_missing")
    cls._keys_to_ignore_on_load_missing = {*(cls._keys_to_ignore_on_load_missing or ()), *VARIANT_PARAMETERS}
    try:
        yield
    finally:
        config_logger.removeFilter(not_the_type_warning)
        if own is None:
            del cls._keys_to_ignore_on_load_missing
        else:
            cls._keys_to_ignore_on_load_missing = own


# The one compatibility shim: transformers 5.24 renamed `past_key_values` to `cache` (model outputs, mask helpers,
# `generate`); older 5.x releases know only the old name. Every cache handed to transformers goes through
# `cache_field`; the forwards take `cache=` and also accept `past_key_values=` (what older `generate` passes).
CACHE_FIELD = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"


def cache_field(cache) -> dict:
    """`{name: cache}` under the name this transformers uses, for `**` into an output class or a mask helper."""
    return {CACHE_FIELD: cache}


def legacy_cache(cache, kwargs: dict, owner):
    """The cache a forward was given: `cache=`, or the old `past_key_values=` popped from `kwargs`.

    Under transformers >= 5.24 the old name is deprecated: it warns as transformers' own `deprecate_kwarg` does
    (a `FutureWarning` naming `{owner class}.forward`). Older releases pass the old name themselves (`generate`), so
    there it is accepted silently. Both names at once is an error rather than one silently ignored.
    """
    if "past_key_values" not in kwargs:
        return cache
    legacy = kwargs.pop("past_key_values")
    if cache is not None and legacy is not None:
        raise ValueError("Both `cache` and `past_key_values` were passed; pass the cache once, as `cache`.")
    if CACHE_FIELD == "cache":
        warnings.warn(
            f"`past_key_values` is deprecated and will be removed in version 5.40.0 for "
            f"`{type(owner).__name__}.forward`. Use `cache` instead.",
            FutureWarning,
            stacklevel=3,
        )
    return legacy if cache is None else cache


def output_attentions_from_config(forward):
    """Decorate a base model's `forward` (between `merge_with_config_defaults` and `capture_outputs`): the config's
    `output_attentions` becomes the argument's default, handed down to every attention core.

    transformers' `capture_outputs` records the attention modules' weights when either the argument or the config
    asks, but hands the config's choice to no layer; a core that computes attention without materialising the weights
    (SDPA, blockwise talking heads, a folded synthesizer) must be told to return them. So `from_pretrained(path,
    output_attentions=True)` gives the weights, as the forward argument does."""

    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        if kwargs.get("output_attentions") is None:
            kwargs["output_attentions"] = bool(getattr(self.config, "output_attentions", False))
        return forward(self, *args, **kwargs)

    return wrapper


def cache_unless_checkpointing(module, use_cache, layers) -> bool:
    """`use_cache`, turned off while `module` trains with checkpointed `layers`: a recomputed layer would add its keys
    and values to the cache a second time (transformers' releases before 5.23 pass the cache on to the recompute
    under our `cache` name). transformers' own models turn it off too, with the same warning."""
    if use_cache and module.training and any(getattr(layer, "gradient_checkpointing", False) for layer in layers):
        logger.warning_once(
            "`use_cache=True` is incompatible with activation checkpointing. Setting `use_cache=False`."
        )
        return False
    return bool(use_cache)


def attention_projections(spec, width: int, bias: bool = True):
    """The query, key and value projections `width -> heads * head size` that the attention type of `spec` has, None
    where it has none (general bilinear: no key or value, pure synthesizers: no query or key). The family names them
    (BERT's `query`/`key`/`value`, T5's `q`/`k`/`v`) and builds the core with `attention_core(spec)`."""
    query = nn.Linear(width, spec.query_size, bias=bias) if spec.has_query else None
    key = nn.Linear(width, spec.query_size, bias=bias) if spec.has_key else None
    value = nn.Linear(width, spec.value_size, bias=bias) if spec.has_value else None
    return query, key, value


def cached_keys_values(core, key_proj, value_proj, memory, cache, layer_idx, is_cross_attention):
    """Keys and values of the memory input [b, m, d] as `core.project_memory` gives them (heads-first), through the
    decoder's cache when there is one.

    Self-attention appends this step's keys/values to the layer's cache (`cache.self_attention_cache` of an
    `EncoderDecoderCache`, or the cache itself) and attends to all of them. Cross-attention projects the encoder
    output once, on the first step, into `cache.cross_attention_cache`, and reads it back on later steps.
    """
    if cache is None:
        return core.project_memory(memory, key_proj, value_proj)
    if not is_cross_attention:
        self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        return self_cache.update(*core.project_memory(memory, key_proj, value_proj), layer_idx)
    if cache.is_updated.get(layer_idx):
        layer = cache.cross_attention_cache.layers[layer_idx]
        return layer.keys, layer.values
    key, value = cache.cross_attention_cache.update(*core.project_memory(memory, key_proj, value_proj), layer_idx)
    cache.is_updated[layer_idx] = True
    return key, value


def key_positions(position_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, cache_length: int):
    """The position of every key a self-attention layer attends over, [b or 1, cache_length + n] (cached tokens
    first), for attention that indexes its weights by position (the Synthesizer); None where no `position_ids` are
    given: the keys then sit at 0..m-1, as the position embeddings count them.

    This call's n tokens are at `position_ids`, where their position embeddings put them. Cached tokens are where
    `generate` put them when they were new: the running count of real tokens in the 2D `attention_mask`, minus one
    (0..cache_length-1 without one). So a left-padded prompt decodes as the same prompt unpadded.
    """
    if position_ids is None or cache_length == 0:
        return position_ids
    if attention_mask is not None and attention_mask.dim() == 2:
        cached = (attention_mask[:, :cache_length].long().cumsum(-1) - 1).clamp(min=0)  # [b, cache_length]
    else:
        cached = torch.arange(cache_length, device=position_ids.device)[None]  # [1, cache_length]
    b = max(cached.shape[0], position_ids.shape[0])
    return torch.cat([cached.expand(b, -1), position_ids.expand(b, -1)], dim=-1)


def chunked_feed_forward(forward, chunk_size: int, hidden_states: torch.Tensor) -> torch.Tensor:
    """`forward` (a per-token feed-forward) of hidden_states [b, n, d] in chunks of `chunk_size` tokens along the
    token axis (`chunk_size_feed_forward`; 0: one call), to bound the intermediate activations' memory. Unlike
    transformers' `apply_chunking_to_forward`, the last chunk may be shorter: a packed batch's token count is whatever
    its sequences add up to."""
    if chunk_size <= 0:
        return forward(hidden_states)
    return torch.cat([forward(chunk) for chunk in hidden_states.split(chunk_size, dim=1)], dim=1)


def admin_residual(module, residual: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
    """The LayerNorm input of a Post-LN residual: `omega * residual + branch` under Admin (`module.admin_omega`),
    else `residual + branch`. While `hf_attn_variants.admin` profiles, `module.admin_recorder` sees each branch."""
    recorder = getattr(module, "admin_recorder", None)
    if recorder is not None:
        recorder(module, branch)
    omega = getattr(module, "admin_omega", None)
    return residual + branch if omega is None else omega * residual + branch


def add_admin_omega(module, config, width: int) -> None:
    """Give a residual module its Admin parameter when `config.admin` asks for one (initialised to 1)."""
    if getattr(config, "admin", False):
        module.admin_omega = nn.Parameter(torch.ones(width))


def add_output_bias(logits: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """An LM head's output bias added to its decoder's logits [..., vocab], in place.

    transformers' heads add the bias inside the decoder's GEMM (`addmm`); a head that owns its bias (BERT, ALBERT:
    the decoder is tied and has none) adds it after. `logits + bias` would write a second [b, n, vocab] tensor: at
    8 x 512 tokens and a vocabulary of 8000 that costs 10% of bert-mini's inference on a CPU (a fresh 128 MiB, page
    faults included), where the in-place add costs 1%. The decoder's output is a fresh tensor that its backward does
    not need, so autograd allows it; the logits keep the decoder's dtype, as transformers' (under autocast too).
    """
    return logits.add_(bias)


def scored_positions(hidden_states: torch.Tensor, labels: torch.Tensor | None, sparse_prediction: bool):
    """What a masked-LM head predicts from, and the labels it is scored on.

    With `sparse_prediction` (a forward argument of the masked-LM heads, never a config field) and labels: the
    positions whose label is not -100 only, `[n_scored, d]` and `[n_scored]` in row-major order of the batch, so the
    head (transform + vocabulary projection) runs only where the loss looks. Otherwise both unchanged (`[b, n, d]`,
    `[b, n]` or None): the full logits of transformers' heads.
    """
    if labels is None or not sparse_prediction:
        return hidden_states, labels
    labels = labels.to(hidden_states.device)
    scored = labels != -100  # [b, n]
    return hidden_states[scored], labels[scored]  # [n_scored, d], [n_scored]


def masked_lm_scores(
    predictions: nn.Module,
    hidden_states: torch.Tensor,
    labels: torch.Tensor | None,
    sparse_prediction: bool,
    config,
    attention_mask: torch.Tensor | None,
    kwargs: dict,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A masked-LM head's scores and the labels they are scored on (`scored_positions`), from the encoder's
    `hidden_states` and the call's `attention_mask` and `kwargs`.

    Where the encoder ran a padded batch's real tokens (`packed_sequences.runs_packed`), its hidden states are zero at the padded positions, so the head's
    value there is its value at the zero vector: the head (transform and vocabulary projection) runs on the real
    tokens, once on a zero vector, and the padded positions get that row. The scores are those of the head at every
    position (to float rounding) without the vocabulary projection of the padded positions (half of a batch padded
    to twice its mean length).
    """
    hidden_states, labels = scored_positions(hidden_states, labels, sparse_prediction)
    if hidden_states.dim() != 3 or not runs_packed(config, attention_mask, None, kwargs):
        return predictions(hidden_states), labels
    padded = attention_mask.to(hidden_states.device) == 0  # [b, n]
    real = predictions(hidden_states[~padded])  # [n_real, vocab]
    scores = real.new_empty(*padded.shape, real.shape[-1])
    scores[padded] = predictions(hidden_states.new_zeros(1, hidden_states.shape[-1]))  # one row for every pad
    scores[~padded] = real
    return scores, labels


def sequence_classification_loss(config, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss of a sequence classification head, chosen by `config.problem_type` (inferred and recorded on first
    use, as transformers' heads do): MSE for regression, cross-entropy, or BCE for multi-label."""
    num_labels = config.num_labels
    if config.problem_type is None:
        if num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        return MSELoss()(logits.squeeze(), labels.squeeze()) if num_labels == 1 else MSELoss()(logits, labels)
    if config.problem_type == "single_label_classification":
        return CrossEntropyLoss()(logits.view(-1, num_labels), labels.view(-1))
    return BCEWithLogitsLoss()(logits, labels)


def pooled_choices(pooled_output: torch.Tensor, rows: int) -> torch.Tensor:
    """A multiple-choice head's pooled vectors, one per choice row of the flattened [batch * choices, n] input; a
    packed row (sequences packed by restarting position ids or `cu_seq_lens`) pools once per sequence and cannot say
    which sequences are one question's choices, so it is refused."""
    if pooled_output.shape[0] != rows:
        raise ValueError(
            f"Multiple choice scores each of its {rows} choice rows, but the input packs {pooled_output.shape[0]} "
            "sequences (position ids that restart, or `cu_seq_lens`): pass the choices as [batch, choices, length] "
            "with an attention mask."
        )
    return pooled_output


def span_loss(start_logits, end_logits, start_positions, end_positions) -> torch.Tensor | None:
    """Extractive QA loss: mean of the start and end cross-entropies; positions outside the sequence are ignored."""
    if start_positions is None or end_positions is None:
        return None
    ignored_index = start_logits.size(1)
    loss_fct = CrossEntropyLoss(ignore_index=ignored_index)
    start_loss = loss_fct(start_logits, start_positions.view(-1).clamp(0, ignored_index))
    end_loss = loss_fct(end_logits, end_positions.view(-1).clamp(0, ignored_index))
    return (start_loss + end_loss) / 2


def _warm_start_line(path, source_type: str, model) -> str:
    """What a warm start converted, in one line: the checkpoint, the class and attention it became, and the
    parameters it added with the fields that initialised them (the attention types' warm starts)."""
    config = model.config
    types = {f: getattr(config, f) for f in _TYPE_FIELDS if getattr(config, f, None) is not None}
    starts = {}
    for name in set(types.values()):
        warm_start = getattr(ATTENTION_REGISTRY.get(name), "warm_start", None) or {}
        starts.update({field: getattr(config, field) for field in warm_start})
    pattern = re.compile("|".join(VARIANT_PARAMETERS))
    added = sorted({n.rsplit(".", 1)[-1] for n, _ in model.named_parameters() if pattern.search(n)})
    text = f"Warm start: {path} is a {source_type} checkpoint, loaded as {type(model).__name__} ("
    text += ", ".join(f"{k}={v!r}" for k, v in types.items()) + ")"
    if added:
        text += f"; it adds {', '.join(added)}"
        text += f", starting with {', '.join(f'{k}={v!r}' for k, v in starts.items())}" if starts else ""
    return text + "."


class VariantPreTrainedModel(PreTrainedModel):
    """Base class of `VariantBertPreTrainedModel`, `VariantAlbertPreTrainedModel`, ...

    A family sets `config_class`, `base_model_prefix`, `_can_record_outputs` and `auto_map` (every Auto class a
    saved checkpoint answers to: `save_pretrained` alone records only the saved class), and adds `_init_weights`
    branches for its own modules. A head whose LM head owns its output bias beside a tied decoder names it in
    `_output_bias_name`, so `resize_token_embeddings` resizes it too.
    """

    auto_map: dict[str, str] = {}
    _output_bias_name: str | None = None
    supports_gradient_checkpointing = True
    # The heads average their loss over the batch and ignore `num_items_in_batch`: tell Trainer, so it neither
    # scales the loss by the number of processes nor skips its own gradient-accumulation averaging. A token-level
    # head whose loss uses `num_items_in_batch` (transformers' ForMaskedLMLoss / ForCausalLMLoss) sets it back to True.
    accepts_loss_kwargs = False
    # dot_product dispatches to SDPA when nothing needs the weights, synthesizers fold into one SDPA call where
    # they can; the other variants compute their own attention. Flash/flex kernels cannot express them.
    _supports_sdpa = True
    _supports_flash_attn = False
    _supports_flex_attn = False
    _supports_attention_backend = False

    def __init__(self, config, *inputs, **kwargs):
        super().__init__(config, *inputs, **kwargs)
        self.config.auto_map = dict(self.auto_map)

    @classmethod
    def register_for_auto_classes(cls, module_globals: dict) -> None:
        """Mark every class of `auto_map` for its Auto class, so `save_pretrained` copies the code along."""
        for auto, target in cls.auto_map.items():
            if auto != "AutoConfig":
                module_globals[target.split(".")[1]].register_for_auto_class(auto)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' `from_pretrained`, with one addition: a vanilla checkpoint (transformers' BERT/ALBERT/T5)
        loaded with an attention type (`attention_type="talking_heads"`, ...) starts as that checkpoint: the type's
        function-preserving fields (identity talking heads, a mixture that starts as the dot product) are the
        defaults. A field given otherwise, or a type that cannot start as the checkpoint, gets a one-line warning
        that the outputs differ from the checkpoint's. A warm start says what it converted in one line, in place of
        transformers' warning about the other model type and its report of the variant's parameters as missing."""
        source_type = None
        if not isinstance(kwargs.get("config"), PretrainedConfig):
            hub = {k: kwargs[k] for k in _HUB_KWARGS if k in kwargs}
            try:
                source = PretrainedConfig.get_config_dict(pretrained_model_name_or_path, **hub)[0]
            except (OSError, ValueError):  # no config.json to read: transformers' own loading says what is wrong
                source = {}
            if source.get("model_type") not in (None, cls.config_class.model_type):
                source_type = source["model_type"]
                kwargs = cls._warm_start_defaults(pretrained_model_name_or_path, kwargs, source)
        if source_type is None:
            result = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        else:
            with _warm_start_loading(cls, source_type):
                result = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        model = result[0] if isinstance(result, tuple) else result  # (model, loading_info) with output_loading_info
        for module in model.modules():  # loading hands back trainable parameters: re-apply fixed synthesizers
            if isinstance(module, VariantAttentionCore):
                module.freeze_fixed_parameters()
        if source_type is not None:
            logger.warning(_warm_start_line(pretrained_model_name_or_path, source_type, model))
        return result

    @classmethod
    def _warm_start_defaults(cls, path, kwargs: dict, config: dict) -> dict:
        """`kwargs` with the warm-start fields of each attention type asked for, `path` being a vanilla checkpoint
        whose config.json is `config` (see `from_pretrained`)."""
        kwargs = dict(kwargs)
        for name in dict.fromkeys(kwargs[f] for f in _TYPE_FIELDS if f in kwargs):
            entry = ATTENTION_REGISTRY.get(name)
            if entry is None:
                continue  # an unknown type: the config's validation names it when the model is built
            fields = {**VARIANT_CONFIG_DEFAULTS, **config, **kwargs}
            lacking = [
                f"{value!r} among {field}"
                for field, value in (entry.warm_start_needs or {}).items()
                if value not in fields[field]
            ]
            if entry.warm_start is None or lacking:
                logger.warning(
                    f"{path} is a vanilla {config.get('model_type')} checkpoint and attention_type "
                    f"{name!r} cannot start as it{' without ' + ', '.join(lacking) if lacking else ''}: "
                    "the model's outputs differ from the checkpoint's."
                )
                continue
            for field, value in entry.warm_start.items():
                if kwargs.setdefault(field, value) != value:
                    logger.warning(
                        f"{path} is a vanilla checkpoint; with {field}={kwargs[field]!r} (not {value!r}) "
                        "the model's outputs differ from the checkpoint's until it is trained."
                    )
        return kwargs

    def save_pretrained(self, save_directory, *args, state_dict=None, **kwargs):
        """transformers' `save_pretrained`; a given `state_dict` first loses the copies of tied weights, and a model
        sharded by FSDP2 saves the code of its own class.

        transformers recognises tied weights in a state dict by shared storage. Trainer under DeepSpeed ZeRO-1/2 hands
        over cloned tensors (accelerate's `get_state_dict`), so the LM head's decoder weight would be written a second
        time: as large as the embedding matrix, and unused on loading (the weights are tied again).

        FSDP2's `fully_shard` turns the model's class into a subclass made in torch (`FSDPVariantBertForMaskedLM`), and
        Trainer saves that prepared model: transformers would copy torch's file as the model code and write
        `_fsdp_init.FSDPVariantBertForMaskedLM` into `auto_map`, a folder that does not load as remote code. While
        saving, that subclass carries the name and module of the class it wraps.
        """
        if state_dict is not None:
            declared = {
                f"{prefix}.{key}" if prefix else key
                for prefix, module in self.named_modules()
                for key in (getattr(module, "_tied_weights_keys", None) or {})
            }
            every_name = {name for name, _ in self.named_parameters(remove_duplicate=False)}
            aliases = every_name - dict(self.named_parameters()).keys()  # second names of one tensor
            kwargs["state_dict"] = {key: value for key, value in state_dict.items() if key not in declared & aliases}
        made = type(self)
        own = next(
            c for c in made.__mro__ if issubclass(c, VariantPreTrainedModel) and not c.__module__.startswith("torch.")
        )
        names = made.__module__, made.__name__
        made.__module__, made.__name__ = own.__module__, own.__name__  # a no-op unless torch made the class
        try:
            return super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            made.__module__, made.__name__ = names

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        """transformers' resize; the LM head's own output bias (`_output_bias_name`) follows as transformers'
        `tie_weights` pads a tied decoder's bias (the first entries kept, added tokens at 0)."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        if self._output_bias_name is not None:
            bias = self.get_parameter(self._output_bias_name)
            bias.data = nn.functional.pad(bias.data, (0, embeddings.num_embeddings - bias.shape[0]))  # [vocab]
        return embeddings

    def mark_tied_weights_as_initialized(self, loading_info):
        """transformers' own (>= 5.25), keeping a missing tie source missing.

        transformers flags the parameter behind each tied key as initialised, then, for remote code, drops every flagged
        key from the missing ones. T5's stacks hold the `shared` embedding module itself, so the tied key
        `encoder.embed_tokens.weight` IS `shared.weight`: flagging it would drop the source too, which then stays on the
        meta device (a model built with `state_dict={}`, `low_cpu_mem_usage` or a `device_map`) and is never
        initialised. A source that was missing stays missing, so it is materialised and initialised like any other."""
        sources = {source for source in self.all_tied_weights_keys.values() if source in loading_info.missing_keys}
        super().mark_tied_weights_as_initialized(loading_info)
        loading_info.missing_keys |= sources

    def _variant_init_std(self) -> float:
        """The std of the variant's weight matrices (synthesizers): the family's usual weight init."""
        return self.config.initializer_range

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, VariantAttentionCore):
            module.init_variant_weights(self._variant_init_std())
        if getattr(module, "admin_omega", None) is not None:
            init.ones_(module.admin_omega)
