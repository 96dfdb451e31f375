"""T5 span-corruption pretraining of the T5 variants (the T5 paper's objective), from a preset or a checkpoint.

    python examples/run_t5_pretraining.py                                  # t5-mini-talking-heads on the embedded text
    python examples/run_t5_pretraining.py --preset t5-mini-synthesizer-random --max_steps 1000
    torchrun --nproc_per_node 2 examples/run_t5_pretraining.py ...        # or: accelerate launch ...

Span corruption (Raffel et al. 2020, section 3.1.4): 15% of the tokens of each sequence (`--noise_density`) are
dropped in spans of mean length 3 (`--mean_noise_span_length`); each span is replaced in the input by one sentinel
(<extra_id_0>, <extra_id_1>, ...) and the target lists the sentinels, each followed by the tokens it replaced.

Data, as examples/run_pretraining.py: with no data arguments The Devil's Dictionary (examples/data/); else
`--dataset_name` (+ `--dataset_config_name`), `--train_file`/`--validation_file`, `--text_column_name`, `--streaming`
(with --max_steps). The token stream is packed into raw blocks by a batched `Dataset.map` into the datasets cache;
the noise is drawn per example when a batch is made (seeded by the example's tokens, the seed and the epoch), and
the evaluation set is corrupted once with a fixed seed. The tokenizer: a Unigram one with sentinels trained on the
run's text (see --tokenizer_name). The output folder (--output_dir; default `outputs/{preset}`, see
hf_attn_variants.training.output_folders) loads with `AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True)`.

    python examples/run_t5_pretraining.py --dataset_name wikitext --dataset_config_name wikitext-103-raw-v1 \
        --preprocessing_num_workers 8
"""

import logging
from dataclasses import dataclass, field

from transformers import HfArgumentParser, Trainer, TrainingArguments, set_seed

from hf_attn_variants.families import FAMILIES
from hf_attn_variants.training.data_collators import (
    EVAL_SEED,
    DataCollatorForT5SpanCorruption,
    corrupted_lengths,
    raw_length_for,
)
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
from hf_attn_variants.training.pretraining_data import block_batch
from hf_attn_variants.training.trainer import EpochCallback, StepTimer, span_corruption_metrics, span_corruption_sums
from run_pretraining import CORPUS, CORPUS_INFO
from script_utils import Evaluation, check_pretraining_args, run_script, run_stages, script_defaults

logger = logging.getLogger(__name__)

DEFAULTS = dict(
    preset="t5-mini-talking-heads",
    output_dir=NAMED_AFTER_THE_RUN,
    max_steps=300,
    per_device_train_batch_size=16,
    per_device_eval_batch_size=64,
    learning_rate=1e-3,
    warmup_steps=0.1,
    weight_decay=0.0,
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


@dataclass
class T5DataArguments(DataArguments):
    text_column_name: str | None = field(
        default=None,
        metadata={"help": "The column holding the text. Default: 'text' if the data has it, else its first column."},
    )
    max_seq_length: int = field(
        default=128, metadata={"help": "Encoder input length after corruption (sentinels and </s> included)."}
    )
    noise_density: float = field(default=0.15, metadata={"help": "Share of tokens that are corrupted."})
    mean_noise_span_length: float = field(default=3.0, metadata={"help": "Mean length of a corrupted span."})


def corrupt_batch(batch, collator):
    """The evaluation set corrupted once (a batched map): the same noise at every evaluation and for every model."""
    corrupted = [collator.corrupt({"input_ids": ids}) for ids in batch["input_ids"]]
    return {"input_ids": [c["input_ids"] for c in corrupted], "labels": [c["labels"] for c in corrupted]}


def prepare(dataset, tokenizer, column, raw_length, data_args, training_args, split):
    from datasets import Features, Sequence, Value

    return map_batched(
        dataset,
        block_batch,
        training_args,
        data_args,
        desc=f"Packing the {split} split",
        remove_columns=column_names(dataset),
        features=Features({"input_ids": Sequence(Value("int32"))}),
        fn_kwargs={"tokenizer": tokenizer, "column": column, "raw_length": raw_length},
    )


def training_sets(raw, tokenizer, column: str, raw_length: int, data_args, training_args):
    """The training blocks (corrupted per batch by the collator) and the validation blocks, corrupted once with the
    evaluation seed, of the stages the run has (None for a stage it does not)."""
    train_set = eval_set = None
    if training_args.do_train:
        train_set = prepare(raw["train"], tokenizer, column, raw_length, data_args, training_args, "train")
        if data_args.max_train_samples is not None:
            train_set = first_rows(train_set, data_args.max_train_samples)
    if training_args.do_eval:
        eval_set = prepare(raw["validation"], tokenizer, column, raw_length, data_args, training_args, "validation")
        if data_args.max_eval_samples is not None:
            eval_set = first_rows(eval_set, data_args.max_eval_samples)
        elif data_args.streaming:
            logger.warning(
                "--streaming without --max_eval_samples: every evaluation reads the whole validation stream."
            )
        eval_collator = DataCollatorForT5SpanCorruption(
            tokenizer, data_args.noise_density, data_args.mean_noise_span_length, seed=EVAL_SEED
        )
        eval_set = map_batched(
            eval_set,
            corrupt_batch,
            training_args,
            data_args,
            desc="Corrupting the validation split",
            fn_kwargs={"collator": eval_collator},
        )
    if any(d is not None and is_empty(d) for d in (train_set, eval_set)):
        raise ValueError(
            f"The data gives no block of {raw_length} tokens for training and evaluation: use more text "
            "or a smaller --max_seq_length."
        )
    return train_set, eval_set


def main(argv=None) -> dict:
    parser = HfArgumentParser((ModelArguments, T5DataArguments, TrainingArguments, OutputArguments))
    parser.set_defaults(**DEFAULTS, **script_defaults())
    model_args, data_args, training_args, output_args = parser.parse_args_into_dataclasses(argv)

    check_pretraining_args(training_args, data_args, DEFAULTS["eval_strategy"])
    if not FAMILIES[run_family(model_args.model_name_or_path, model_args.preset)].encoder_decoder:
        raise ValueError("This script pretrains T5 models: for BERT/ALBERT use examples/run_pretraining.py.")
    raw, eval_info = pretraining_splits(data_args, training_args, default_file=CORPUS, default_info=CORPUS_INFO)
    column = pick_column(
        raw["train" if "train" in raw else "validation"],
        data_args.text_column_name,
        "--text_column_name",
        default="text",
    )
    tokenizer = load_tokenizer(model_args, "t5", data_args, training_args, raw.get("train"), [column], corpus=CORPUS)
    collator = DataCollatorForT5SpanCorruption(
        tokenizer, data_args.noise_density, data_args.mean_noise_span_length, training_args.seed
    )
    set_seed(training_args.seed)  # the same initial weights on every process and every run
    model = load_or_build_model(
        "ForConditionalGeneration",
        model_args.model_name_or_path,
        model_args.preset,
        tokenizer,
        model_args.attention_type,
        parse_config_overrides(model_args.config_overrides),
    )
    raw_length = raw_length_for(data_args.max_seq_length, data_args.noise_density, data_args.mean_noise_span_length)
    _, target_length = corrupted_lengths(raw_length, data_args.noise_density, data_args.mean_noise_span_length)
    check_max_length(model.config, data_args.max_seq_length)
    check_max_length(model.config, target_length, argument="the target length of --max_seq_length")
    settle_output_dir(training_args, output_args, model_args, model, __file__)
    align_tokenizer(tokenizer, model.config)

    train_set, eval_set = training_sets(raw, tokenizer, column, raw_length, data_args, training_args)
    if eval_set is None:
        training_args.eval_strategy = "no"
    check_first_batches(train_set, eval_set, collator, training_args.per_device_train_batch_size, tokenizer, "target")
    timer = StepTimer()
    training_args.remove_unused_columns = False
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=span_corruption_metrics,
        preprocess_logits_for_metrics=span_corruption_sums,
        callbacks=[EpochCallback(collator), timer],
    )
    return run_stages(
        trainer,
        model_args,
        __file__,
        "text2text-generation",
        train_info=split_info(data_args, "train", CORPUS_INFO),
        evaluations=[Evaluation(eval_set, eval_info, span_corruption_metrics)],
        train_metrics=lambda: {"train_seconds_per_step": timer.seconds_per_step},
        max_seq_length=data_args.max_seq_length,
        objective="span corruption",
        noise_density=data_args.noise_density,
        mean_noise_span_length=data_args.mean_noise_span_length,
    )


if __name__ == "__main__":
    run_script(main)
