"""Masked-LM pretraining of the BERT and ALBERT variants, with optional whole-word masking and next-sentence
(BERT) or sentence-order (ALBERT) prediction, from a preset or a checkpoint (warm start), with `Trainer`.

    python examples/run_pretraining.py                       # the main job: a small talking-heads BERT, a few minutes
    python examples/run_pretraining.py --preset albert-mini-synthesizer-random --sentence_objective sop
    python examples/run_pretraining.py --model_name_or_path path/to/bert --attention_type talking_heads
    torchrun --nproc_per_node 2 examples/run_pretraining.py ...   # or: accelerate launch examples/run_pretraining.py

    python examples/run_pretraining.py --dataset_name wikitext --dataset_config_name wikitext-103-raw-v1 \
        --preprocessing_num_workers 8 --max_seq_length 128      # a Hub dataset, prepared once into the datasets cache
    torchrun --nproc_per_node 8 examples/run_pretraining.py --dataset_name allenai/c4 --dataset_config_name en \
        --streaming --max_steps 100000 --max_eval_samples 5000  # a streamed corpus: nothing downloaded ahead

Data: with no data arguments, The Devil's Dictionary (shipped in examples/data/); `--dataset_name` (a Hub id or a
local dataset folder), `--train_file`/`--validation_file` (.txt, .csv, .tsv, .json/.jsonl, .parquet), the text in
`--text_column_name` (default "text", else the first column). Preparation is a batched `Dataset.map` into the
datasets cache (a second identical run reads it back; `--overwrite_cache` redoes it), by the main process first under
torchrun/accelerate; `--streaming` prepares as it reads. Masked LM packs the token stream into blocks of
`--max_seq_length`; NSP/SOP cut segment pairs from the sentences of each document, where documents are separated by
empty rows (a text file's blank lines) and a row of several lines is a document of its own (see
`hf_attn_variants.training.pretraining_data.rows_to_documents`). Masks are drawn per example when a batch is made (seeded by
the example's tokens, the seed and the epoch), so 1 and N processes mask alike; the evaluation set is masked once,
with a fixed seed. The tokenizer: see --tokenizer_name. `--do_train`/`--do_eval` as in transformers' examples
(neither: both). Every `TrainingArguments` option passes through (--bf16, --torch_compile, --activation_checkpointing,
--push_to_hub, ...). The output folder (--output_dir; default `outputs/{preset}`, named after the run as
`hf_attn_variants.training.output_folders` says, which also refuses a folder holding another model's checkpoint) loads with
`AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=True)`.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import HfArgumentParser, TrainingArguments, set_seed

from hf_attn_variants.admin import ADMIN_INIT_METHODS, AdminInitCallback
from hf_attn_variants.families import FAMILIES
from hf_attn_variants.training.data_collators import EVAL_SEED, MaskedLMCollator
from hf_attn_variants.training.data_loading import (
    DataArguments,
    column_names,
    first_rows,
    is_empty,
    map_batched,
    pick_column,
    pretraining_splits,
    split_info,
)
from hf_attn_variants.training.learning_checks import check_first_batches
from hf_attn_variants.training.model_setup import (
    ModelArguments,
    align_tokenizer,
    check_max_length,
    load_or_build_model,
    load_tokenizer,
    parse_config_overrides,
    run_family,
)
from hf_attn_variants.training.output_folders import NAMED_AFTER_THE_RUN, OutputArguments, settle_output_dir
from hf_attn_variants.training.pretraining_data import line_batch, pack_batch, pair_batch, sentence_label
from hf_attn_variants.training.trainer import (
    EpochCallback,
    MaskedLMTrainer,
    StepTimer,
    masked_lm_metrics,
    masked_lm_sums,
)
from script_utils import Evaluation, check_pretraining_args, run_script, run_stages, script_defaults

logger = logging.getLogger(__name__)

DEFAULTS = dict(  # the main job; every one can be overridden on the command line
    preset="bert-mini-talking-heads",
    output_dir=NAMED_AFTER_THE_RUN,
    max_steps=300,
    per_device_train_batch_size=16,
    max_seq_length=64,
    per_device_eval_batch_size=64,
    learning_rate=1e-3,
    warmup_steps=0.1,
    weight_decay=0.01,
    lr_scheduler_type="linear",
    eval_strategy="steps",
    eval_steps=50,
    logging_steps=10,
    save_strategy="steps",
    save_steps=200,
    save_total_limit=1,
    report_to="none",
    seed=42,
)
# The embedded corpus: the data of a run without data flags (here and in run_t5_pretraining.py), and the text of
# every script's project tokenizer when the run has no data of the user's.
CORPUS = Path(__file__).resolve().parent / "data" / "devils_dictionary.txt"
CORPUS_INFO = {
    "name": "The Devil's Dictionary (Ambrose Bierce, 1911)",
    "source": "examples/data/devils_dictionary.txt, from Debian's dict-devil 1.0 (Internet Wiretap edition, 1993)",
    "license": "public domain",
}


@dataclass
class PretrainingDataArguments(DataArguments):
    text_column_name: str | None = field(
        default=None,
        metadata={"help": "The column holding the text. Default: 'text' if the data has it, else its first column."},
    )
    max_seq_length: int = field(default=64, metadata={"help": "Tokens per sequence, [CLS] and [SEP] included."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens to predict."})
    whole_word_masking: bool = field(
        default=False, metadata={"help": "Mask whole words (a word's WordPiece continuations with it)."}
    )
    line_by_line: bool = field(
        default=False,
        metadata={
            "help": "One sequence per non-empty line of text ([CLS] line [SEP], cut at --max_seq_length), as "
            "transformers' run_mlm --line_by_line; default: the text packed into full blocks of --max_seq_length."
        },
    )
    padding_free: bool = field(
        default=False,
        metadata={
            "help": "Collate each batch into one row with position ids that restart at each sequence and no padding "
            "(transformers' padding-free input, as DataCollatorWithFlattening): BERT and ALBERT attend within each "
            "sequence, so no token is computed for nothing. Pays with --line_by_line or a sentence objective "
            "(sequences of many lengths); full blocks have no padding to drop."
        },
    )
    sentence_objective: str = field(
        default="none",
        metadata={
            "help": "none (masked LM only), nsp (BERT's next-sentence prediction) or sop (ALBERT's sentence-order "
            "prediction); nsp/sop train the ForPreTraining head."
        },
    )


@dataclass
class PretrainingModelArguments(ModelArguments):
    admin_init: str | None = field(
        default=None,
        metadata={
            "help": "How a new model built with admin=True (Post-LN BERT/ALBERT, e.g. the *-single-head-admin presets) "
            "sets Admin's omegas before the first step: profile (the Admin paper's rule, from the residual "
            "branches' output variance on the first batch; at BERT's init std 0.02 the omegas stay near 1) or "
            "closed_form (admin-torch's omega = sqrt((N+1)/ln(N+1) - 1) for the N residuals, whatever the "
            "init). Default: profile, and closed_form for ALBERT's shared layers (profiling has no single "
            "omega for a layer that runs several times). A resumed run keeps its checkpoint's omegas."
        },
    )
    sparse_prediction: bool = field(
        default=True,
        metadata={
            "help": "Run the masked-LM head (transform + vocabulary projection) only at the positions that carry a "
            "label (the heads' forward argument sparse_prediction, passed by hf_attn_variants.MaskedLMTrainer): "
            "the same loss and gradients, a cheaper step. Not saved: the checkpoint gives transformers' full "
            "[batch, seq, vocab] logits to anyone who calls it, with or without labels."
        },
    )


def check_objective(family: str, objective: str, line_by_line: bool = False) -> str:
    """The family pretrains with masked LM (not T5's span corruption) and `objective` is its sentence task or none
    (and none where each line is a sequence: a sentence task builds its own pairs of segments)."""
    if FAMILIES[family].encoder_decoder:
        raise ValueError(
            f"{FAMILIES[family].display} pretrains with span corruption: use examples/run_t5_pretraining.py."
        )
    if objective not in ("none", "nsp", "sop"):
        raise ValueError(f"--sentence_objective must be none, nsp or sop, got {objective!r}.")
    if objective != "none" and objective != FAMILIES[family].sentence_objective:
        raise ValueError(
            f"--sentence_objective {objective} is not {family}'s pretraining task: use "
            f"{FAMILIES[family].sentence_objective} (or none)."
        )
    if line_by_line and objective != "none":
        raise ValueError(
            f"--line_by_line makes each line a sequence, but --sentence_objective {objective} builds pairs of "
            "segments from the text: drop one of them."
        )
    return objective


def check_bert_tokenizer(tokenizer) -> None:
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise ValueError(
            "The tokenizer has no [CLS]/[SEP] tokens: BERT-style pretraining needs a BERT-style "
            "tokenizer (pass --tokenizer_name, or leave it out for the project's WordPiece tokenizer)."
        )


def mask_batch(batch, collator):
    """The evaluation set masked once (a batched map): every evaluation, and every model trained on the same data,
    sees the same masks."""
    masked = [collator.mask({"input_ids": ids}) for ids in batch["input_ids"]]
    return {"input_ids": [m["input_ids"].tolist() for m in masked], "labels": [m["labels"].tolist() for m in masked]}


def admin_init_for(model_args, training_args, config, family: str) -> str | None:
    """How Admin's omegas are set before training (`--admin_init`, see PretrainingModelArguments); None: they are
    not (no Admin residuals, no training, or the omegas come with a checkpoint: a loaded model's, or a resumed
    run's, which Trainer loads before the callback would run). A choice that cannot apply is an error."""
    choice = model_args.admin_init
    if choice is not None and choice not in ADMIN_INIT_METHODS:
        raise ValueError(f"--admin_init must be one of {', '.join(ADMIN_INIT_METHODS)}, got {choice!r}.")
    shared = FAMILIES[family].shares_layers
    admin = getattr(config, "admin", False)
    if choice is None:
        choice = "closed_form" if shared else "profile"
        if not admin or model_args.model_name_or_path or not training_args.do_train:
            return None
    if not admin:
        raise ValueError(
            f"--admin_init {choice}: the model has no Admin residuals. Use a *-single-head-admin preset "
            "or --config_overrides '{\"admin\": true}', or leave --admin_init out."
        )
    if model_args.model_name_or_path:
        raise ValueError(
            f"--admin_init {choice}: a model loaded with --model_name_or_path keeps the omegas saved "
            "in its checkpoint; leave --admin_init out (or build a new model with --preset)."
        )
    if not training_args.do_train:
        raise ValueError(
            f"--admin_init {choice} sets the omegas before training, and this run does not train "
            "(--do_train); leave --admin_init out."
        )
    if choice == "profile" and shared:
        raise ValueError(
            "--admin_init profile: ALBERT's shared layers run several times with one omega, for which "
            "variance profiling has no single value; use --admin_init closed_form."
        )
    return None if training_args.resume_from_checkpoint else choice


def features_for(objective: str):
    from datasets import Features, Sequence, Value

    features = {"input_ids": Sequence(Value("int32"))}
    if objective != "none":
        features.update(token_type_ids=Sequence(Value("int8")), **{sentence_label(objective): Value("int64")})
    return Features(features)


def prepare(dataset, tokenizer, column, data_args, training_args, seed, split):
    """Raw rows -> training examples (packed blocks or segment pairs), a batched map into the datasets cache."""
    objective = data_args.sentence_objective
    if objective == "none":
        function, kwargs = (line_batch if data_args.line_by_line else pack_batch), {}
    else:
        function, kwargs = pair_batch, {"objective": objective, "seed": seed}
    return map_batched(
        dataset,
        function,
        training_args,
        data_args,
        desc=f"Packing the {split} split",
        remove_columns=column_names(dataset),
        features=features_for(objective),
        fn_kwargs={"tokenizer": tokenizer, "column": column, "max_seq_length": data_args.max_seq_length, **kwargs},
    )


def training_collator(tokenizer, data_args, seed: int) -> MaskedLMCollator:
    """Masks each training batch as it is drawn; pads it, or (--padding_free) packs it into one row."""
    return MaskedLMCollator(
        tokenizer, data_args.mlm_probability, data_args.whole_word_masking, seed, padding_free=data_args.padding_free
    )


def training_sets(raw, tokenizer, column, data_args, training_args):
    """(train set, eval set) of the chosen stages (None for a stage not chosen): packed blocks or segment pairs; the
    eval set masked once (`mask_batch`), with its own seed; max_{train,eval}_samples count sequences."""
    train_set = eval_set = None
    if training_args.do_train:
        train_set = prepare(raw["train"], tokenizer, column, data_args, training_args, training_args.seed, "train")
        if data_args.max_train_samples is not None:
            train_set = first_rows(train_set, data_args.max_train_samples)
        if is_empty(train_set):
            raise ValueError(
                f"The training data gives no sequence of {data_args.max_seq_length} tokens: use more "
                "text or a smaller --max_seq_length."
            )
    if training_args.do_eval:
        eval_set = prepare(raw["validation"], tokenizer, column, data_args, training_args, EVAL_SEED, "validation")
        if data_args.max_eval_samples is not None:
            eval_set = first_rows(eval_set, data_args.max_eval_samples)
        elif data_args.streaming:
            logger.warning(
                "--streaming without --max_eval_samples: every evaluation reads the whole validation stream."
            )
        if is_empty(eval_set):
            raise ValueError(
                f"The validation data gives no sequence of {data_args.max_seq_length} tokens: use more "
                "text, a larger --validation_split_percentage or a smaller --max_seq_length."
            )
        eval_collator = MaskedLMCollator(
            tokenizer, data_args.mlm_probability, data_args.whole_word_masking, seed=EVAL_SEED
        )  # labels the set once; the training collator below collates it
        eval_set = map_batched(
            eval_set,
            mask_batch,
            training_args,
            data_args,
            desc="Masking the validation split",
            fn_kwargs={"collator": eval_collator},
        )
    return train_set, eval_set


def main(argv=None, optimizer_factory=None) -> dict:
    """`optimizer_factory(model, training_args, decay_names)`, where given, builds the optimizer in place of --optim's
    (experiments/pretrain_research.py: T5's Adafactor); None from it leaves --optim's."""
    parser = HfArgumentParser(
        (PretrainingModelArguments, PretrainingDataArguments, TrainingArguments, OutputArguments)
    )
    parser.set_defaults(**DEFAULTS, **script_defaults())
    model_args, data_args, training_args, output_args = parser.parse_args_into_dataclasses(argv)

    # Everything that can be wrong with the input is checked before any training starts.
    check_pretraining_args(training_args, data_args, DEFAULTS["eval_strategy"])
    family = run_family(model_args.model_name_or_path, model_args.preset)
    objective = check_objective(family, data_args.sentence_objective, data_args.line_by_line)
    raw, eval_info = pretraining_splits(data_args, training_args, default_file=CORPUS, default_info=CORPUS_INFO)
    column = pick_column(
        raw["train" if "train" in raw else "validation"],
        data_args.text_column_name,
        "--text_column_name",
        default="text",
    )
    tokenizer = load_tokenizer(model_args, family, data_args, training_args, raw.get("train"), [column], corpus=CORPUS)
    check_bert_tokenizer(tokenizer)
    set_seed(training_args.seed)  # the same initial weights on every process and every run
    head = "ForMaskedLM" if objective == "none" else "ForPreTraining"
    model = load_or_build_model(
        head,
        model_args.model_name_or_path,
        model_args.preset,
        tokenizer,
        model_args.attention_type,
        parse_config_overrides(model_args.config_overrides),
    )
    if model_args.sparse_prediction and training_args.torch_compile:
        # the scored rows are a data-dependent shape: without this, compile breaks the graph there (and runs slow)
        torch._dynamo.config.capture_dynamic_output_shape_ops = True
    check_max_length(model.config, data_args.max_seq_length)
    settle_output_dir(training_args, output_args, model_args, model, __file__)
    admin_init = admin_init_for(model_args, training_args, model.config, family)
    align_tokenizer(tokenizer, model.config)

    collator = training_collator(tokenizer, data_args, training_args.seed)
    train_set, eval_set = training_sets(raw, tokenizer, column, data_args, training_args)
    check_first_batches(train_set, eval_set, collator, training_args.per_device_train_batch_size, tokenizer)
    if eval_set is None:
        training_args.eval_strategy = "no"

    timer = StepTimer()
    callbacks = [EpochCallback(collator), timer]
    profiler = None
    if admin_init is not None:
        profiler = AdminInitCallback(method=admin_init)
        callbacks.append(profiler)

    training_args.remove_unused_columns = False  # the collator needs every field; the model takes them all
    trainer = MaskedLMTrainer(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=masked_lm_metrics,
        preprocess_logits_for_metrics=masked_lm_sums,
        callbacks=callbacks,
        sparse_prediction=model_args.sparse_prediction,
    )
    if optimizer_factory is not None:  # (None from it: Trainer builds --optim's)
        trainer.optimizer = optimizer_factory(model, training_args, trainer.get_decay_parameter_names(model))

    def train_metrics():
        metrics = {"train_seconds_per_step": timer.seconds_per_step}
        omegas = profiler.omegas if profiler is not None else None
        if omegas:  # what Admin set: omegas near 1 mean it changed little (small residual branches at init)
            metrics.update(admin_omega_min=min(omegas), admin_omega_max=max(omegas))
            logger.info("Admin omegas: %d residuals, %.4f to %.4f", len(omegas), min(omegas), max(omegas))
        return metrics

    return run_stages(
        trainer,
        model_args,
        __file__,
        "fill-mask",
        train_info=split_info(data_args, "train", CORPUS_INFO),
        evaluations=[Evaluation(eval_set, eval_info, masked_lm_metrics)],
        train_metrics=train_metrics,
        max_seq_length=data_args.max_seq_length,
        mlm_probability=data_args.mlm_probability,
        whole_word_masking=data_args.whole_word_masking,
        sentence_objective=objective,
    )


if __name__ == "__main__":
    run_script(main)
