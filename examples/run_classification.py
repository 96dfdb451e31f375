"""Fine-tune a BERT, ALBERT or T5 variant for text classification (GLUE tasks, single sentences or sentence pairs)
with `Trainer`.

    python examples/run_classification.py           # movie-review sentiment, bert-tiny-talking-heads, about a minute
    python examples/run_classification.py --preset albert-mini-synthesizer-dense
    python examples/run_classification.py --task_name mnli --model_name_or_path path/to/bert \
        --attention_type talking_heads --max_seq_length 128 --per_device_train_batch_size 32 --num_train_epochs 3
    python examples/run_classification.py --model_name_or_path path/to/bert --train_file train.csv \
        --validation_file dev.csv --test_file test.csv --do_train --do_eval --do_predict \
        --text_column premise --text_pair_column hypothesis

Data, as transformers' run_glue.py reads it (`hf_attn_variants.training.data_loading`):
- `--task_name {cola,sst2,mrpc,qqp,stsb,mnli,qnli,rte,wnli}`: a GLUE task, from `--dataset_name` (default
  `nyu-mll/glue`, config = the task) or a GLUE-shaped local folder. The task sets the text columns, the label
  count (stsb is regression with one output) and GLUE's metric under GLUE's names: matthews_correlation (cola),
  pearson and spearmanr (stsb), accuracy and f1 (mrpc, qqp), accuracy (the others). mnli is evaluated on
  validation_matched (eval_*) and validation_mismatched (eval_*_mm) and predicted on test_matched and
  test_mismatched, as run_glue does.
- `--dataset_name` (a Hub id or local folder) or `--train_file`/`--validation_file`/`--test_file` (CSV, TSV, JSON
  lines, parquet): the text columns are found as run_glue finds them (sentence1/sentence2, question/sentence,
  premise/hypothesis, sentence, text) or named with `--text_column`/`--text_pair_column`; labels
  (`--label_column`) are class names, integers, or floats (regression). Reports accuracy and F1 (of class 1 for
  two classes, macro-averaged otherwise), or pearson and spearmanr for regression.
- No data flags: 436 labelled movie-review sentences, evaluated on 108 others (the sentence polarity dataset of
  Pang and Lee, shipped in examples/data/).

Without validation data, --validation_split_percentage of the training rows are held out. The metrics are computed
offline (hf_attn_variants.training.task_metrics); `--metric_name` (an evaluate module: Hub id or local script) replaces them.
`--do_train`, `--do_eval`, `--do_predict` act as in transformers' examples (none given: train and evaluate);
predictions go to `predict_results[_task].txt`. Tokenization is a batched `Dataset.map` cached by `datasets`
(`--preprocessing_num_workers`, `--overwrite_cache`). Without `--model_name_or_path` the model is built from
`--preset` with the project's tokenizer. Every `TrainingArguments` option passes through; `--resume_from_checkpoint
last` resumes from the newest checkpoint in --output_dir. The output folder (--output_dir; default
`outputs/classification-{model}`, `outputs/{task_name}-{model}` with --task_name, see
hf_attn_variants.training.output_folders) holds the model, its metrics and its model card (README.md) and loads with
`AutoModelForSequenceClassification.from_pretrained(path, trust_remote_code=True)`.
"""

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute
from transformers import (
    DataCollatorWithPadding,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    set_seed,
)

from hf_attn_variants.families import FAMILIES
from hf_attn_variants.training.classification import (
    GLUE_DATASET,
    GLUE_TASKS,
    find_labels,
    metrics_function,
    predictions_of,
    predictions_writer,
    preprocess_function,
    require_columns,
    text_columns,
)
from hf_attn_variants.training.data_collators import flatten_batch
from hf_attn_variants.training.data_loading import DataArguments, check_stage_data, finetuning_splits, map_batched
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
from script_utils import (
    Evaluation,
    Prediction,
    choose_stages,
    load_metric,
    run_script,
    run_stages,
    script_defaults,
)

DATA = Path(__file__).resolve().parent / "data"
# the text of the project tokenizer when the run has no data of the user's (run_pretraining.py's embedded corpus)
TOKENIZER_CORPUS = DATA / "devils_dictionary.txt"
RT_POLARITY = {"train": DATA / "rt_polarity_train.csv", "validation": DATA / "rt_polarity_validation.csv"}
RT_POLARITY_INFO = {
    "name": "sentence polarity dataset v1.0 (Pang and Lee, 2005), 544-sentence subset",
    "source": "examples/data/rt_polarity_*.csv, from rt-polarity.pos/.neg (yoonkim/CNN_sentence)",
    "license": "research use (no explicit licence); cite Pang and Lee, ACL 2005",
}
# run_glue's column names, in the order they are tried: (text, text pair)
# mnli's extra splits, and the suffix run_glue gives their metrics and prediction files
MNLI_EVAL = {"validation_matched": "", "validation_mismatched": "_mm"}
MNLI_TEST = {"test_matched": "", "test_mismatched": "_mm"}
DEFAULTS = dict(
    preset="bert-tiny-talking-heads",
    output_dir=NAMED_AFTER_THE_RUN,
    num_train_epochs=10,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=64,
    learning_rate=5e-4,
    warmup_steps=0.1,
    weight_decay=0.01,
    eval_strategy="epoch",
    logging_steps=10,
    save_strategy="epoch",
    save_total_limit=1,
    report_to="none",
    seed=42,
)


@dataclass
class ClassificationDataArguments(DataArguments):
    task_name: str | None = field(
        default=None,
        metadata={
            "help": f"A GLUE task: {', '.join(GLUE_TASKS)}. Sets the columns, labels and metric; the data defaults to "
            f"--dataset_name {GLUE_DATASET} --dataset_config_name <task>."
        },
    )
    text_column: str | None = field(
        default=None,
        metadata={
            "help": "Column of the (first) text. Default: the GLUE task's, else found as run_glue finds it (sentence1, "
            "question, premise, sentence, text)."
        },
    )
    text_pair_column: str | None = field(
        default=None,
        metadata={
            "help": "Column of the second text of a pair task; default: the partner of the found text column, if any."
        },
    )
    label_column: str = field(
        default="label", metadata={"help": "Column of the labels: class names, integers, or floats (regression)."}
    )
    max_seq_length: int = field(
        default=128,
        metadata={"help": "Tokens per example after truncation, special tokens included; at most the model's limit."},
    )
    padding_free: bool = field(
        default=False,
        metadata={
            "help": "Collate each batch into one row with position ids that restart at each example and no padding "
            "(transformers' padding-free input): BERT and ALBERT attend within each example and classify each from "
            "its own first token, so no token is computed for nothing. Not T5 (its classifier reads the decoder)."
        },
    )
    metric_name: str | None = field(
        default=None,
        metadata={
            "help": "An evaluate module (Hub id or local script path) computed on the predicted and true labels, in "
            "place of the default (GLUE's metric of the task; accuracy and F1 otherwise)."
        },
    )


# ------------------------------------------------------------------------------------------------------------ main
def collator_for(data_args, family: str, tokenizer):
    """Batches padded to their longest example, or (--padding_free) packed into one row without padding."""
    if not data_args.padding_free:
        return DataCollatorWithPadding(tokenizer)
    if FAMILIES[family].encoder_decoder:
        raise ValueError(
            f"--padding_free packs the examples into one row for an encoder (BERT, ALBERT); "
            f"{FAMILIES[family].display}'s classifier reads its decoder: drop --padding_free."
        )
    return flatten_batch


def settle_task(data_args) -> str | None:
    """--task_name checked, and the GLUE dataset and its config as the data where the command line names none."""
    task = data_args.task_name
    if task is not None:
        if task not in GLUE_TASKS:
            raise ValueError(f"Unknown --task_name {task!r}: the GLUE tasks are {', '.join(GLUE_TASKS)}.")
        if not (data_args.dataset_name or data_args.train_file or data_args.validation_file):
            data_args.dataset_name = GLUE_DATASET
        if data_args.dataset_name and not data_args.dataset_config_name:
            data_args.dataset_config_name = task
    return task


def checked_columns(splits, reference: str, evaluated: list[str], data_args, where: str):
    """The text columns (`text_columns` of the `reference` split), which every split has, and the label column,
    which the reference and every evaluated split have."""
    columns = text_columns(splits[reference].column_names, data_args, where)
    for split in splits:
        require_columns(
            splits[split].column_names,
            [c for c in columns if c],
            f"The {split} data",
            "give every split the same columns",
        )
    for split in (reference, *evaluated):
        require_columns(
            splits[split].column_names, [data_args.label_column], f"The {split} data", "pass --label_column"
        )
    return columns


def label_fields(labels) -> dict:
    """The config fields of the labels: their names, or one output for regression."""
    if labels.names is None:
        return dict(id2label={0: "LABEL_0"}, label2id={"LABEL_0": 0}, problem_type="regression")
    return dict(id2label=dict(enumerate(labels.names)), label2id={n: i for i, n in enumerate(labels.names)})


def tokenized(splits, info, stages, tested, tokenizer, columns, labels, data_args, training_args) -> dict:
    """The features of each split in `stages`, tokenized into the datasets cache; `tested` splits whose labels are
    GLUE's unlabelled -1 lose them (predicted without labels)."""
    features = {}
    for split in stages:
        rows = splits[split]
        function = preprocess_function(
            tokenizer,
            columns,
            data_args.label_column,
            labels,
            data_args.max_seq_length,
            f"The {split} data ({info[split]['name']})",
        )
        features[split] = map_batched(
            rows, function, training_args, data_args, remove_columns=rows.column_names, desc=f"Tokenizing {split}"
        )
    for split in tested:
        if (
            "labels" in features[split].column_names
            and pyarrow.compute.min(features[split].data.column("labels")).as_py() < 0
        ):
            features[split] = features[split].remove_columns("labels")
    return features


def main(argv=None) -> dict:
    parser = HfArgumentParser((ModelArguments, ClassificationDataArguments, TrainingArguments, OutputArguments))
    parser.set_defaults(**DEFAULTS, **script_defaults())
    model_args, data_args, training_args, output_args = parser.parse_args_into_dataclasses(argv)

    # Everything that can be wrong with the input is checked before any training starts.
    choose_stages(training_args, bool(data_args.test_file), DEFAULTS["eval_strategy"])
    task = settle_task(data_args)
    eval_names, test_names = (list(MNLI_EVAL), list(MNLI_TEST)) if task == "mnli" else (["validation"], ["test"])
    glue_metric = bool(data_args.metric_name) and data_args.metric_name.rstrip("/").endswith("glue")
    metric = load_metric(data_args.metric_name, task if glue_metric else None) if data_args.metric_name else None
    splits, info = finetuning_splits(
        data_args,
        default_files=RT_POLARITY,
        default_info=RT_POLARITY_INFO,
        seed=training_args.seed,
        eval_splits=eval_names,
        test_splits=test_names,
    )
    evaluated, tested = check_stage_data(training_args, splits, eval_names, test_names)
    reference = "train" if "train" in splits else (evaluated or tested)[0]
    where = f"The {reference} data ({info[reference]['name']})"
    columns = checked_columns(splits, reference, evaluated, data_args, where)
    labels = find_labels(splits[reference], data_args, where)

    family = run_family(model_args.model_name_or_path, model_args.preset)
    tokenizer = load_tokenizer(
        model_args,
        family,
        data_args,
        training_args,
        splits.get("train"),
        [c for c in columns if c],
        corpus=TOKENIZER_CORPUS,
    )
    set_seed(training_args.seed)  # the same initial weights on every process and every run
    model = load_or_build_model(
        "ForSequenceClassification",
        model_args.model_name_or_path,
        model_args.preset,
        tokenizer,
        model_args.attention_type,
        parse_config_overrides(model_args.config_overrides),
        **label_fields(labels),
    )
    check_max_length(model.config, data_args.max_seq_length)
    settle_output_dir(training_args, output_args, model_args, model, __file__, task=task or "classification")
    align_tokenizer(tokenizer, model.config)

    stages = (["train"] if training_args.do_train else []) + evaluated + tested
    features = tokenized(splits, info, stages, tested, tokenizer, columns, labels, data_args, training_args)

    compute_metrics = metrics_function(data_args, labels, metric)
    evaluations = [Evaluation(features[s], info[s], compute_metrics, MNLI_EVAL.get(s, "")) for s in evaluated]
    file_task = f"_{task}" if task else ""
    predictions = [
        Prediction(
            features[s],
            info[s],
            predictions_writer(f"predict_results{file_task}{'-mm' if MNLI_TEST.get(s) else ''}.txt", labels),
            compute_metrics,
            MNLI_TEST.get(s, ""),
        )
        for s in tested
    ]
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=features.get("train"),
        eval_dataset=evaluations[0].dataset if evaluations else None,
        data_collator=collator_for(data_args, family, tokenizer),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=predictions_of,
    )
    return run_stages(
        trainer,
        model_args,
        __file__,
        "text-classification",
        train_info=info.get("train"),
        evaluations=evaluations,
        predictions=predictions,
        max_seq_length=data_args.max_seq_length,
        task_name=task,
        labels=labels.names or "regression",
        text_columns=[c for c in columns if c],
    )


if __name__ == "__main__":
    run_script(main)
