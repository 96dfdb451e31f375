"""The model and tokenizer of a training script (the example scripts'; package-only, for scripts of your own too):
`ModelArguments` (a preset or a checkpoint, attention overrides, the tokenizer), the family a run belongs to,
building or loading the model for a task head (`load_or_build_model`: a vanilla transformers checkpoint warm-starts
its variant function-preservingly), the length checks that keep the tokenizer and the model agreeing, and the run's
tokenizer (`load_tokenizer`).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from transformers import AutoTokenizer

from ..families import FAMILIES, family_of
from ..models.attention_types import ATTENTION_REGISTRY, ATTENTION_TYPES, describe_attention_types
from ..presets import ATTENTION, PRESETS, SIZES, preset_config
from .tokenizer_training import train_tokenizer


@dataclass
class ModelArguments:
    """Where the model and tokenizer come from; each script sets its own default `--preset`."""

    preset: str | None = field(
        default=None,
        metadata={
            "help": "A preset from hf_attn_variants.presets: {family}-{size}-{setup}, family one of "
            f"{', '.join(SIZES)}, size one of {', '.join(SIZES['bert'])}, setup one of {', '.join(ATTENTION)} "
            "(Post-LN BERT/ALBERT have single-head-admin, Pre-LN T5 single-head); the family picks the model "
            "class. Ignored with --model_name_or_path."
        },
    )
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "A checkpoint folder to start from: one of ours, or a transformers BERT/ALBERT/T5 one (with "
            "--attention_type for a function-preserving warm start)."
        },
    )
    attention_type: str | None = field(
        default=None,
        metadata={
            "help": f"Override the attention type. {describe_attention_types()}.",
            "choices": list(ATTENTION_TYPES),
        },
    )
    config_overrides: str | None = field(
        default=None,
        metadata={"help": 'JSON object of config fields, e.g. \'{"synthesizer_components": ["dense", "random"]}\'.'},
    )
    tokenizer_name: str | None = field(
        default=None,
        metadata={
            "help": "A tokenizer folder or Hub id. Default: the checkpoint's own, or the project's tokenizer of the family "
            "(WordPiece for BERT/ALBERT, Unigram with sentinels for T5) trained on the run's training text: "
            "the embedded corpus, or the first 20M characters of the training split of --train_file/"
            "--dataset_name (of the stream with --streaming); trained once per text (cached by its hash)."
        },
    )
    vocab_size: int = field(default=8000, metadata={"help": "Vocabulary of the project's tokenizer."})


def checkpoint_model_type(model_name_or_path: str) -> str:
    """The `model_type` of a checkpoint: a local folder saved with `save_pretrained` or a Hub model id (its
    config.json is fetched, as `from_pretrained` would), one of transformers' BERT/ALBERT/T5 or ours."""
    from transformers import PretrainedConfig

    try:
        config, _ = PretrainedConfig.get_config_dict(model_name_or_path)
    except OSError as err:
        where = "folder" if Path(model_name_or_path).exists() else "folder nor a Hub model that can be reached"
        raise FileNotFoundError(
            f"--model_name_or_path {model_name_or_path}: no config.json there (not a checkpoint "
            f"{where}). Pass a folder saved with `save_pretrained` or a Hub model id of a "
            f"transformers BERT/ALBERT/T5 or one of ours. ({err})"
        ) from None
    model_type = config.get("model_type")
    try:
        family_of(model_type)  # transformers' model types and ours: a vanilla checkpoint warm-starts its variant
    except ValueError as err:
        raise ValueError(f"{model_name_or_path}: {err} These scripts take checkpoints of those families.") from None
    return model_type


def run_family(model_name_or_path: str | None, preset: str | None) -> str:
    """The family name ('bert', 'albert', 't5': a key of `FAMILIES`), from a checkpoint's config.json or a preset."""
    if model_name_or_path:
        return family_of(checkpoint_model_type(model_name_or_path)).name
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}. Choose one of: {', '.join(PRESETS)}.")
    return PRESETS[preset].family


def parse_config_overrides(text: str | None) -> dict:
    if not text:
        return {}
    try:
        overrides = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"--config_overrides must be a JSON object, e.g. '{{\"num_hidden_layers\": 6}}': {err}"
        ) from None
    if not isinstance(overrides, dict):
        raise ValueError("--config_overrides must be a JSON object, e.g. '{\"num_hidden_layers\": 6}'.")
    return overrides


def load_or_build_model(
    head: str,
    model_name_or_path: str | None,
    preset: str | None,
    tokenizer,
    attention_type: str | None = None,
    config_overrides: dict | None = None,
    **extra,
):
    """The model for task `head` (e.g. "ForMaskedLM"): from a checkpoint (ours, or a transformers BERT/ALBERT/T5 one
    warm-started as a variant: `attention_type` given, talking heads start as the identity and mixtures as the dot
    product, so the model starts as the checkpoint), or built from `preset` with the tokenizer's vocabulary.
    `extra` holds task fields (num_labels, id2label, ...)."""
    family = run_family(model_name_or_path, preset)
    model_class = FAMILIES[family].model_class(head)
    overrides = {**(config_overrides or {}), **extra}
    if attention_type:
        overrides["attention_type"] = attention_type
    if model_name_or_path:  # a vanilla checkpoint with an attention type starts as it (`from_pretrained` does it)
        model = model_class.from_pretrained(model_name_or_path, **overrides)
    else:
        config = preset_config(preset, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **overrides)
        if FAMILIES[family].encoder_decoder:
            config.eos_token_id = tokenizer.eos_token_id
            config.decoder_start_token_id = tokenizer.pad_token_id
        model = model_class(config)
    if model.config.vocab_size < len(tokenizer):
        raise ValueError(
            f"The tokenizer has {len(tokenizer)} tokens but the model only {model.config.vocab_size}: "
            "use the checkpoint's own tokenizer (--tokenizer_name) or a smaller --vocab_size."
        )
    return model


def length_limit(config) -> tuple[int | None, str]:
    """The longest input the model takes and the field that sets it (None: no limit, T5's relative positions): the
    smallest of the position embeddings (BERT/ALBERT) and the bound of each attention type in use (its
    `length_field` in `ATTENTION_REGISTRY`, e.g. a synthesizer's `synthesizer_max_position`)."""
    encoder_decoder = family_of(config).encoder_decoder
    types = (
        {config.attention_type_of(place) for place in ("encoder", "decoder")}
        if encoder_decoder
        else {config.attention_type}
    )
    fields = {ATTENTION_REGISTRY[t].length_field for t in types} - {None}
    limits = [(getattr(config, f), f) for f in sorted(fields) if getattr(config, f) is not None]
    if not encoder_decoder:
        limits.append((config.max_position_embeddings, "max_position_embeddings"))
    return min(limits, default=(None, ""))


def align_tokenizer(tokenizer, config) -> None:
    """The tokenizer's `model_max_length` set to the longest input the model takes, so that the saved pair agrees
    (`pipeline(..., truncation=True)` truncates to what the model can read)."""
    limit, _ = length_limit(config)
    if limit is not None:
        tokenizer.model_max_length = limit


def check_max_length(config, max_seq_length: int, argument: str = "--max_seq_length") -> None:
    limit, field = length_limit(config)
    if limit is not None and max_seq_length > limit:
        raise ValueError(
            f"{argument}={max_seq_length} is longer than this model takes ({field}={limit}): pass "
            f"{argument} {limit} or less, or build a model with a larger {field}."
        )


# ---------------------------------------------------------------------------------------------------- tokenizer
# The project tokenizer of a run on other data than the embedded corpus is trained on the first this many characters
# of its training split (all of it when smaller); said in --tokenizer_name's help.
TOKENIZER_SAMPLE_CHARS = 20_000_000


def training_lines(dataset, column: str, max_chars: int = TOKENIZER_SAMPLE_CHARS) -> list[str]:
    """The non-empty lines of the first `max_chars` characters of `dataset[column]` (map-style or streamed): the
    text a project tokenizer is trained on."""
    lines, chars = [], 0
    batches = dataset.iter(batch_size=1000)
    for batch in batches:
        for text in batch[column]:
            for line in (text or "").splitlines():
                line = line.strip()
                if line:
                    lines.append(line)
                    chars += len(line)
            if chars >= max_chars:
                return lines
    return lines


def _holds_text(dataset, column: str) -> bool:
    """Whether a column holds strings (a streamed dataset whose features are unknown is taken at its word)."""
    from datasets import Value

    if dataset.features is None:
        return True
    feature = dataset.features.get(column)
    return isinstance(feature, Value) and feature.dtype in ("string", "large_string")


# the files a saved tokenizer leaves in a folder (any one of them: a fast tokenizer's, a WordPiece or SentencePiece one's)
TOKENIZER_FILE_NAMES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def check_holds_tokenizer(model_name_or_path: str) -> None:
    """A local model folder a run takes its tokenizer from holds one: without, transformers hands back an empty
    tokenizer of a few special tokens, every word becomes [UNK] and the run learns nothing."""
    folder = Path(model_name_or_path)
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILE_NAMES):
        raise ValueError(
            f"--model_name_or_path {model_name_or_path} holds a model and no tokenizer: pass --tokenizer_name "
            "with the tokenizer the model was trained with (or save it into the folder: "
            "tokenizer.save_pretrained(folder))."
        )


def load_tokenizer(model_args, family: str, data_args, training_args, train=None, columns=(), corpus=None):
    """The run's tokenizer: --tokenizer_name's, else the checkpoint's (--model_name_or_path), else the project's
    tokenizer of the family (`FAMILIES[family].tokenizer`, --vocab_size; `train_tokenizer`), trained on the run's
    training text: the text `columns` of the `train` split when the user gave data (the first
    `TOKENIZER_SAMPLE_CHARS` characters of each; columns that hold no text are skipped), else the text file `corpus`
    (the script's embedded corpus). Under torchrun the main process trains it first and the others read its
    cache."""
    with training_args.main_process_first(desc="the tokenizer"):
        if not model_args.tokenizer_name and model_args.model_name_or_path:
            check_holds_tokenizer(model_args.model_name_or_path)
        if model_args.tokenizer_name or model_args.model_name_or_path:
            # trust_remote_code: our checkpoints' config names their code; without it transformers asks on the terminal
            return AutoTokenizer.from_pretrained(
                model_args.tokenizer_name or model_args.model_name_or_path, trust_remote_code=True
            )
        user_data = bool(data_args.dataset_name or data_args.train_file) and train is not None
        text = [column for column in columns if _holds_text(train, column)] if user_data else []
        lines = [line for column in text for line in training_lines(train, column)] if text else None
        if lines is None:
            return train_tokenizer(FAMILIES[family].tokenizer, model_args.vocab_size, corpus=corpus)
        return train_tokenizer(FAMILIES[family].tokenizer, model_args.vocab_size, lines=lines)
