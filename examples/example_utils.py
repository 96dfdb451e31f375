"""What the example scripts share: the embedded corpus, the project's tokenizers, model construction from a preset or
a checkpoint, masking, length checks and the `training_info.json` the model cards read.

Nothing here downloads anything: the corpus ships in `examples/data/`, the tokenizers are trained on it once and
cached (`$HF_ATTN_VARIANTS_CACHE`, default `~/.cache/hf_attn_variants`).
"""

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerFast, TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

import hf_attn_variants as hav
from hf_attn_variants.presets import PRESETS, preset_config
from hf_attn_variants.publish import upload_card

DATA = Path(__file__).resolve().parent / "data"
CORPUS = DATA / "devils_dictionary.txt"
CORPUS_INFO = {
    "name": "The Devil's Dictionary (Ambrose Bierce, 1911)",
    "source": "examples/data/devils_dictionary.txt, from Debian's dict-devil 1.0 (Internet Wiretap edition, 1993)",
    "license": "public domain",
}
FAMILIES = {"bert": "Bert", "albert": "Albert", "t5": "T5"}
# transformers' model types and ours: a vanilla checkpoint warm-starts the variant of its family.
MODEL_TYPES = {"bert": "bert", "variant_bert": "bert", "albert": "albert", "variant_albert": "albert",
               "t5": "t5", "variant_t5": "t5"}


# ----------------------------------------------------------------------------------------------------------- data
def read_documents(path: str | os.PathLike = CORPUS) -> list[list[str]]:
    """A text file as documents: blank lines separate documents, each line of a document is one paragraph."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such data file: {path}. Pass an existing text file (documents separated by "
                                "blank lines).")
    text = path.read_text(encoding="utf-8")
    documents = [[line.strip() for line in block.splitlines() if line.strip()] for block in re.split(r"\n\s*\n", text)]
    documents = [d for d in documents if d]
    if not documents:
        raise ValueError(f"{path} holds no text.")
    return documents


@dataclass
class CorpusArguments:
    """The text the pretraining scripts read; each script's DataArguments adds its own fields."""

    train_file: str | None = field(default=None, metadata={
        "help": "A text file: documents separated by blank lines, one paragraph per line. Default: the embedded "
                "corpus."})
    validation_file: str | None = field(default=None, metadata={
        "help": "Same format. Default: --validation_split_percentage of the training documents."})
    validation_split_percentage: float = field(default=5.0, metadata={
        "help": "Held-out share of the documents when there is no --validation_file."})
    max_train_samples: int | None = field(default=None, metadata={
        "help": "Keep only the first N training sequences (quick runs, tests)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only the first N eval sequences."})


def corpus_documents(args: CorpusArguments, seed: int) -> tuple[list, list]:
    """(training documents, eval documents): the given files, or the embedded corpus split by document."""
    train = read_documents(args.train_file or CORPUS)
    if args.validation_file:
        return train, read_documents(args.validation_file)
    return split_documents(train, args.validation_split_percentage, seed)


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')_]*\s+(?=[\"'(_]*[A-Z0-9])")


def split_sentences(paragraph: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(paragraph) if s.strip()]


def split_documents(documents: list, validation_percentage: float, seed: int) -> tuple[list, list]:
    """A deterministic split by whole documents (no document is in both)."""
    if not 0 < validation_percentage < 100:
        raise ValueError(f"`validation_split_percentage` must be in (0, 100), got {validation_percentage}.")
    order = torch.randperm(len(documents), generator=torch.Generator().manual_seed(seed)).tolist()
    n_eval = max(1, round(len(documents) * validation_percentage / 100))
    held_out = set(order[:n_eval])
    return ([d for i, d in enumerate(documents) if i not in held_out],
            [d for i, d in enumerate(documents) if i in held_out])


# ----------------------------------------------------------------------------------------------------- tokenizers
def cache_dir() -> Path:
    return Path(os.environ.get("HF_ATTN_VARIANTS_CACHE", Path.home() / ".cache" / "hf_attn_variants"))


def project_tokenizer(kind: str, vocab_size: int = 8000, corpus: str | os.PathLike = CORPUS) -> PreTrainedTokenizerFast:
    """A tokenizer trained on `corpus`: `"wordpiece"` (BERT/ALBERT: [PAD]=0, [UNK], [CLS], [SEP], [MASK]) or
    `"unigram"` (T5: <pad>=0, </s>=1, <unk>=2, <extra_id_0> the last id). Trained once, then read from the cache."""
    if kind not in ("wordpiece", "unigram"):
        raise ValueError(f"Unknown tokenizer kind {kind!r}: use 'wordpiece' or 'unigram'.")
    corpus = Path(corpus)
    key = hashlib.sha256(corpus.read_bytes() + f"{kind}/{vocab_size}/1".encode()).hexdigest()[:16]
    target = cache_dir() / "tokenizers" / f"{kind}-{vocab_size}-{key}"
    if not (target / "tokenizer.json").is_file():
        lines = [line for document in read_documents(corpus) for line in document]
        tokenizer = _train_wordpiece(lines, vocab_size) if kind == "wordpiece" else _train_unigram(lines, vocab_size)
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=target.parent))
        tokenizer.save_pretrained(scratch)
        try:
            os.replace(scratch, target)  # atomic: concurrent processes (torchrun) never see half a tokenizer
        except OSError:  # another process finished first
            shutil.rmtree(scratch, ignore_errors=True)
    return PreTrainedTokenizerFast.from_pretrained(target)


def _train_wordpiece(lines, vocab_size):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(lines, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=special))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=512)


def _train_unigram(lines, vocab_size):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size - 100, special_tokens=["<pad>", "</s>", "<unk>"],
                                      unk_token="<unk>")
    tok.train_from_iterator(lines, trainer)
    sentinels = [f"<extra_id_{i}>" for i in reversed(range(100))]  # T5: <extra_id_0> is the last id
    tok.add_special_tokens([AddedToken(s, special=True) for s in sentinels])
    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", eos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                                   additional_special_tokens=list(reversed(sentinels)), model_max_length=512)


def sentinel_ids(tokenizer) -> list[int]:
    """The ids of <extra_id_0>, <extra_id_1>, ... (T5's span-corruption sentinels)."""
    ids = tokenizer.convert_tokens_to_ids([f"<extra_id_{i}>" for i in range(100)])
    if tokenizer.unk_token_id in ids:
        raise ValueError("The tokenizer has no <extra_id_N> sentinel tokens, which span corruption needs.")
    return ids


# --------------------------------------------------------------------------------------------------------- models
@dataclass
class ModelArguments:
    """Where the model and tokenizer come from; each script sets its own default `--preset`."""

    preset: str | None = field(default=None, metadata={
        "help": "A preset from hf_attn_variants.presets, {bert,albert,t5}-{tiny,mini,small,base}-{dot-product, "
                "talking-heads, synthesizer-dense, synthesizer-random, synthesizer-mixture, single-head-admin (T5: "
                "single-head)}; the family picks the model class. Ignored with --model_name_or_path."})
    model_name_or_path: str | None = field(default=None, metadata={
        "help": "A checkpoint folder to start from: one of ours, or a transformers BERT/ALBERT/T5 one (with "
                "--attention_type for a function-preserving warm start)."})
    attention_type: str | None = field(default=None, metadata={
        "help": "Override the attention: dot_product, talking_heads or synthesizer."})
    config_overrides: str | None = field(default=None, metadata={
        "help": "JSON object of config fields, e.g. '{\"synthesizer_components\": [\"dense\", \"random\"]}'."})
    tokenizer_name: str | None = field(default=None, metadata={
        "help": "A tokenizer folder. Default: the checkpoint's own, or the project's tokenizer of the family "
                "(WordPiece for BERT/ALBERT, Unigram with sentinels for T5), trained on the corpus once and cached."})
    vocab_size: int = field(default=8000, metadata={"help": "Vocabulary of the project's tokenizer."})


def load_tokenizer(model_args: ModelArguments, family: str):
    """The checkpoint's (or --tokenizer_name's) tokenizer, else the project's tokenizer of the family."""
    if model_args.tokenizer_name or model_args.model_name_or_path:
        # trust_remote_code: our checkpoints' config names their code; without it transformers asks on the terminal
        return AutoTokenizer.from_pretrained(model_args.tokenizer_name or model_args.model_name_or_path,
                                             trust_remote_code=True)
    return project_tokenizer("unigram" if family == "t5" else "wordpiece", model_args.vocab_size)


def checkpoint_model_type(model_name_or_path: str) -> str:
    """The `model_type` of a checkpoint folder: one of transformers' BERT/ALBERT/T5 or ours."""
    config_file = Path(model_name_or_path) / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{model_name_or_path} has no config.json: pass a folder saved with "
                                "`save_pretrained` (a transformers BERT/ALBERT/T5 or one of ours).")
    model_type = json.loads(config_file.read_text()).get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"{model_name_or_path} is a {model_type!r} checkpoint; these scripts take BERT, ALBERT "
                         f"or T5 ones (model_type one of {sorted(MODEL_TYPES)}).")
    return model_type


def family_of(model_name_or_path: str | None, preset: str | None) -> str:
    """'bert', 'albert' or 't5', from a checkpoint's config.json or a preset name."""
    if model_name_or_path:
        return MODEL_TYPES[checkpoint_model_type(model_name_or_path)]
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


def load_or_build_model(head: str, model_name_or_path: str | None, preset: str | None, tokenizer,
                        attention_type: str | None = None, config_overrides: dict | None = None, **extra):
    """The model for task `head` (e.g. "ForMaskedLM"): from a checkpoint (ours, or a transformers BERT/ALBERT/T5 one
    warm-started as a variant: `attention_type` given, talking heads start as the identity and mixtures as the dot
    product, so the model starts as the checkpoint), or built from `preset` with the tokenizer's vocabulary.
    `extra` holds task fields (num_labels, id2label, ...)."""
    family = family_of(model_name_or_path, preset)
    model_class = getattr(hav, f"Variant{FAMILIES[family]}{head}")
    overrides = {**(config_overrides or {}), **extra}
    if attention_type:
        overrides["attention_type"] = attention_type
    if model_name_or_path:
        vanilla = not checkpoint_model_type(model_name_or_path).startswith("variant_")
        if vanilla and attention_type:  # function-preserving warm start, unless the user chose otherwise
            overrides.setdefault("talking_heads_init", "identity")
            overrides.setdefault("synthesizer_mixture_init", "dot_product")
        model = model_class.from_pretrained(model_name_or_path, **overrides)
    else:
        config = preset_config(preset, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **overrides)
        if family == "t5":
            config.eos_token_id = tokenizer.eos_token_id
            config.decoder_start_token_id = tokenizer.pad_token_id
        model = model_class(config)
    if model.config.vocab_size < len(tokenizer):
        raise ValueError(f"The tokenizer has {len(tokenizer)} tokens but the model only {model.config.vocab_size}: "
                         "use the checkpoint's own tokenizer (--tokenizer_name) or a smaller --vocab_size.")
    return model


def length_limit(config) -> tuple[int | None, str]:
    """The longest input the model takes and the field that sets it (None: no limit, T5's relative positions)."""
    if config.model_type == "variant_t5":
        types = {config.attention_type_of(place) for place in ("encoder", "decoder")}
        if "synthesizer" in types:
            return config.synthesizer_max_position, "synthesizer_max_position"
        return None, ""
    if config.attention_type == "synthesizer" and config.synthesizer_max_position is not None:
        limit = min(config.synthesizer_max_position, config.max_position_embeddings)
        field_name = "synthesizer_max_position" if limit < config.max_position_embeddings else "max_position_embeddings"
        return limit, field_name
    return config.max_position_embeddings, "max_position_embeddings"


def check_max_length(config, max_seq_length: int, argument: str = "--max_seq_length") -> None:
    limit, field = length_limit(config)
    if limit is not None and max_seq_length > limit:
        raise ValueError(f"{argument}={max_seq_length} is longer than this model takes ({field}={limit}): pass "
                         f"{argument} {limit} or less, or build a model with a larger {field}.")


# -------------------------------------------------------------------------------------------------------- masking
def example_generator(input_ids, seed: int, epoch: int) -> torch.Generator:
    """A generator seeded by the example's content, the seed and the epoch: an example is masked the same way
    whichever process, batch or position it lands in (so 1 process and N processes see the same masks)."""
    digest = zlib.crc32(torch.as_tensor(input_ids, dtype=torch.int64).numpy().tobytes())
    return torch.Generator().manual_seed((seed * 1_000_003 + epoch * 7_919 + digest) % (2**63))


def word_continuation(tokenizer):
    """Whether a token continues the word before it: WordPiece marks continuations with '##', SentencePiece-style
    (metaspace) vocabularies mark word starts with '▁' instead."""
    if any(token.startswith("▁") for token in tokenizer.get_vocab()):
        return lambda token: not token.startswith("▁")
    return lambda token: token.startswith("##")


def mask_example(input_ids, tokenizer, probability: float, continues, generator: torch.Generator):
    """BERT's masking of one example: `probability` of the tokens are predicted, or whole words with `continues`
    (see `word_continuation`: a word's continuation tokens go with it); of those 80% become [MASK], 10% a random
    token, 10% stay. Returns (inputs, labels) with -100 where nothing is predicted."""
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    special = torch.tensor(tokenizer.get_special_tokens_mask(ids.tolist(), already_has_special_tokens=True),
                           dtype=torch.bool)
    tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
    words, current = [], []  # groups of positions predicted together
    for position, (token, is_special) in enumerate(zip(tokens, special.tolist())):
        if is_special:  # a word never continues across [CLS]/[SEP]
            current = []
            continue
        if continues is not None and current and continues(token):
            current.append(position)
        else:
            current = [position]
            words.append(current)
    budget = max(1, round((~special).sum().item() * probability))
    chosen = torch.zeros_like(special)
    for index in torch.randperm(len(words), generator=generator).tolist():
        if chosen.sum() >= budget:
            break
        if chosen.sum() + len(words[index]) <= budget or not chosen.any():
            chosen[words[index]] = True
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    roll = torch.rand(ids.shape, generator=generator)
    inputs = ids.clone()
    inputs[chosen & (roll < 0.8)] = tokenizer.mask_token_id
    swap = chosen & (roll >= 0.8) & (roll < 0.9)
    inputs[swap] = torch.randint(len(tokenizer), ids.shape, generator=generator)[swap]
    return inputs, labels


class MaskedLMCollator:
    """Pads a list of examples and masks those without labels (per-example generators, see `example_generator`).

    Examples that already carry `labels` (a pre-masked eval set: the same masks at every evaluation and for every
    model) are only padded. `epoch` is advanced by `EpochCallback`, so each epoch masks differently.
    """

    def __init__(self, tokenizer, probability: float = 0.15, whole_word: bool = False, seed: int = 0):
        if not 0 < probability < 1:
            raise ValueError(f"`mlm_probability` must be in (0, 1), got {probability}.")
        if tokenizer.mask_token_id is None:
            raise ValueError("The tokenizer has no mask token, which masked-LM pretraining needs.")
        self.tokenizer, self.probability, self.seed, self.epoch = tokenizer, probability, seed, 0
        self.continues = word_continuation(tokenizer) if whole_word else None

    def mask(self, example: dict) -> dict:
        generator = example_generator(example["input_ids"], self.seed, self.epoch)
        inputs, labels = mask_example(example["input_ids"], self.tokenizer, self.probability, self.continues,
                                      generator)
        return {**example, "input_ids": inputs, "labels": labels}

    def __call__(self, examples: list[dict]) -> dict:
        examples = [e if "labels" in e else self.mask(e) for e in examples]
        return pad_batch(examples, self.tokenizer.pad_token_id)


def pad_batch(examples: list[dict], pad_token_id: int) -> dict:
    """Right-pads every sequence field to its longest example (input_ids with the pad token, labels with -100, the
    rest with 0; labels may be shorter than the inputs, as a seq2seq target) and adds the attention mask."""
    batch = {}
    for key in examples[0]:
        values = [torch.as_tensor(e[key]) for e in examples]
        if values[0].dim() == 0:
            batch[key] = torch.stack(values)
            continue
        length = max(len(v) for v in values)
        fill = -100 if key == "labels" else pad_token_id if key == "input_ids" else 0
        batch[key] = torch.stack([torch.cat([v, v.new_full((length - len(v),), fill)]) for v in values])
    lengths = torch.tensor([len(e["input_ids"]) for e in examples])
    batch["attention_mask"] = (torch.arange(batch["input_ids"].shape[1]) < lengths[:, None]).long()
    return batch


class EpochCallback(TrainerCallback):
    """Tells a collator with an `epoch` attribute which epoch is starting."""

    def __init__(self, collator):
        self.collator = collator

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.collator.epoch = int(state.epoch or 0)


class StepTimer(TrainerCallback):
    """Wall-clock seconds of the optimisation steps alone (evaluation and saving excluded)."""

    def __init__(self):
        self.seconds, self.steps, self._start = 0.0, 0, None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds += time.perf_counter() - self._start
        self.steps += 1

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / max(1, self.steps)


# -------------------------------------------------------------------------------------------------- bookkeeping
def finish(trainer, train_result, model_args: ModelArguments, script: str, task: str, dataset: dict,
           extra_metrics: dict | None = None, **training) -> dict:
    """What every script does after training: save the model and tokenizer, evaluate, write train/eval/all results,
    the trainer state and `training_info.json`, and with --push_to_hub push the folder and then the real model card
    (in place of Trainer's default README). Returns the train and eval metrics."""
    args = trainer.args
    trainer.save_model()
    train_metrics = {**train_result.metrics, **(extra_metrics or {}),
                     # ZeRO-3 leaves each process an empty placeholder per parameter; ds_numel is its real size
                     "num_parameters": sum(getattr(p, "ds_numel", p.numel()) for p in trainer.model.parameters())}
    trainer.log_metrics("train", train_metrics)
    trainer.save_metrics("train", train_metrics)
    eval_metrics = trainer.evaluate()
    trainer.log_metrics("eval", eval_metrics)
    trainer.save_metrics("eval", eval_metrics)  # save_metrics also merges both into all_results.json
    trainer.save_state()
    if trainer.is_world_process_zero():
        write_training_info(args.output_dir, script, task, model_args.preset, model_args.model_name_or_path, dataset,
                            args, **training)
    if args.push_to_hub:
        trainer.push_to_hub()
        if trainer.is_world_process_zero():
            upload_card(args.output_dir, trainer.hub_model_id, token=args.hub_token)
    return {**train_metrics, **eval_metrics}


def resume_checkpoint(training_args) -> str | None:
    """`--resume_from_checkpoint PATH`, or `last` for the newest checkpoint in --output_dir; None starts afresh."""
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint == "last":
        checkpoint = get_last_checkpoint(training_args.output_dir) if Path(training_args.output_dir).is_dir() else None
        if checkpoint is None:
            raise ValueError(f"--resume_from_checkpoint last: {training_args.output_dir} holds no checkpoint-N folder.")
    elif checkpoint is not None and not Path(checkpoint).is_dir():
        raise FileNotFoundError(f"--resume_from_checkpoint {checkpoint}: no such folder.")
    return checkpoint


def write_training_info(output_dir, script: str, task: str, preset: str | None, base_model: str | None,
                        dataset: dict, training_args, **training) -> None:
    """`training_info.json`, read by `hf_attn_variants.publish` for the model card."""
    info = {
        "script": f"examples/{Path(script).name}",
        "task": task,
        "preset": None if base_model else preset,
        "base_model": base_model,
        "dataset": dataset,
        "training": {
            "max_steps": training_args.max_steps,
            "learning_rate": training_args.learning_rate,
            "per_device_train_batch_size": training_args.per_device_train_batch_size,
            "seed": training_args.seed,
            **training,
        },
    }
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    (Path(output_dir) / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")


def data_file_info(train_file: str | None, default: dict) -> dict:
    if train_file:
        return {"name": Path(train_file).name, "source": "user-provided file", "license": "unknown"}
    return default
