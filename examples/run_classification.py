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
from typing import NamedTuple

import pyarrow.compute
from transformers import (
    DataCollatorWithPadding,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    set_seed,
)

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
from hf_attn_variants.training.task_metrics import classification_metrics, glue_metrics, regression_metrics
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
KNOWN_TEXT_COLUMNS = [
    ("sentence1", "sentence2"),
    ("question", "sentence"),
    ("premise", "hypothesis"),
    ("sentence", None),
    ("text", None),
]
GLUE_DATASET = "nyu-mll/glue"


class GlueTask(NamedTuple):
    text: str
    pair: str | None
    labels: tuple[str, ...] | None  # the Hub dataset's label names, in id order; None: regression


# the tasks' metrics: hf_attn_variants.training.task_metrics.GLUE_METRICS
GLUE_TASKS = {
    "cola": GlueTask("sentence", None, ("unacceptable", "acceptable")),
    "sst2": GlueTask("sentence", None, ("negative", "positive")),
    "mrpc": GlueTask("sentence1", "sentence2", ("not_equivalent", "equivalent")),
    "qqp": GlueTask("question1", "question2", ("not_duplicate", "duplicate")),
    "stsb": GlueTask("sentence1", "sentence2", None),
    "mnli": GlueTask("premise", "hypothesis", ("entailment", "neutral", "contradiction")),
    "qnli": GlueTask("question", "sentence", ("entailment", "not_entailment")),
    "rte": GlueTask("sentence1", "sentence2", ("entailment", "not_entailment")),
    "wnli": GlueTask("sentence1", "sentence2", ("not_entailment", "entailment")),
}
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
    metric_name: str | None = field(
        default=None,
        metadata={
            "help": "An evaluate module (Hub id or local script path) computed on the predicted and true labels, in "
            "place of the default (GLUE's metric of the task; accuracy and F1 otherwise)."
        },
    )


# ------------------------------------------------------------------------------------------------------------ data
def text_columns(columns: list[str], data_args, where: str) -> tuple[str, str | None]:
    """The (text, text pair) columns: named on the command line, else the GLUE task's, else run_glue's known
    names."""
    if data_args.text_column:
        found = (data_args.text_column, data_args.text_pair_column)
    elif data_args.task_name:
        task = GLUE_TASKS[data_args.task_name]
        found = (task.text, data_args.text_pair_column or task.pair)
    else:
        known = [pair for pair in KNOWN_TEXT_COLUMNS if all(c in columns for c in pair if c)]
        if not known:
            raise ValueError(
                f"{where}: no known text column (its columns: {', '.join(columns)}): pass "
                "--text_column (and --text_pair_column for pairs)."
            )
        found = (known[0][0], data_args.text_pair_column or known[0][1])
    require_columns(columns, [c for c in found if c], where, "pass --text_column/--text_pair_column")
    return found


def require_columns(columns: list[str], needed: list[str], where: str, hint: str) -> None:
    missing = [c for c in needed if c not in columns]
    if missing:
        raise ValueError(
            f"{where} has no column {', '.join(map(repr, missing))} (its columns: {', '.join(columns)}): {hint}."
        )


def label_names(values) -> list[str]:
    """Class names in a stable order: numerically when every label is an integer, else alphabetically."""
    names = sorted({str(v) for v in values})
    if all(n.lstrip("-").isdigit() for n in names):
        names.sort(key=int)
    return names


class Labels(NamedTuple):
    names: list[str] | None  # class names in id order; None: regression
    encoded: bool  # whether the column already holds class ids (ClassLabel, or integers of a GLUE task)


def find_labels(train, data_args, where: str) -> Labels:
    """The classes (or regression) of the training split: a GLUE task's, a ClassLabel column's names, or the sorted
    distinct values of the label column; float labels are regression."""
    from datasets import ClassLabel, Value

    feature = train.features[data_args.label_column]
    task = GLUE_TASKS.get(data_args.task_name)
    if isinstance(feature, ClassLabel):
        if task and task.labels and feature.num_classes != len(task.labels):
            raise ValueError(
                f"{where}: the label column has {feature.num_classes} classes, GLUE's "
                f"{data_args.task_name} has {len(task.labels)}: check --task_name and the data."
            )
        return Labels(list(feature.names), True)
    is_float = isinstance(feature, Value) and feature.dtype.startswith("float")
    if task:
        if task.labels is None or is_float:
            if task.labels is not None:
                raise ValueError(f"{where}: float labels, but {data_args.task_name} is a classification task.")
            return Labels(None, False)
        if isinstance(feature, Value) and feature.dtype.startswith("int"):
            return Labels(list(task.labels), True)
        return Labels(list(task.labels), False)  # class names as strings
    if is_float:
        return Labels(None, False)
    names = label_names(train.unique(data_args.label_column))
    if len(names) < 2:
        raise ValueError(
            f"{where}: the training labels hold one class only ({names}); classification needs two or more."
        )
    return Labels(names, False)


def preprocess_function(tokenizer, columns, label_column: str, labels: Labels, max_seq_length: int, where: str):
    """A batched `Dataset.map` function: the tokenized text (pairs), and `labels` as class ids (or floats)."""
    first, second = columns
    label2id = {name: i for i, name in enumerate(labels.names or [])}

    def to_label(value):
        if labels.names is None:
            return float(value)
        if labels.encoded:
            if not -1 <= int(value) < len(labels.names):  # -1: GLUE's unlabelled test rows
                raise ValueError(f"{where}: label {value} is not a class id of {labels.names}.")
            return int(value)
        if str(value) not in label2id:
            raise ValueError(f"{where}: label {value!r} is not among the training labels {list(label2id)}.")
        return label2id[str(value)]

    def preprocess(batch):
        encoded = tokenizer(
            batch[first], batch[second] if second else None, truncation=True, max_length=max_seq_length
        )
        if label_column in batch:
            encoded["labels"] = [to_label(v) for v in batch[label_column]]
        return encoded

    return preprocess


# --------------------------------------------------------------------------------------------------------- metrics
def predictions_of(logits, labels):
    """Keep the argmax (or the regression output), not the logits nor T5's other outputs, for `compute_metrics`."""
    logits = logits[0] if isinstance(logits, tuple) else logits
    return logits[..., 0] if logits.shape[-1] == 1 else logits.argmax(-1)


def metrics_function(data_args, labels: Labels, metric):
    """`compute_metrics` for Trainer: `--metric_name`'s module, GLUE's metric of the task, or the default."""

    def compute_metrics(prediction):
        predictions, references = prediction.predictions, prediction.label_ids
        if metric is not None:
            return metric.compute(predictions=predictions, references=references)
        if data_args.task_name:
            return glue_metrics(data_args.task_name, predictions, references)
        if labels.names is None:
            return regression_metrics(predictions, references)
        return classification_metrics(predictions, references, len(labels.names))

    return compute_metrics


def predictions_writer(path_name: str, labels: Labels):
    """`Prediction.write`: run_glue's predict_results file, "index<TAB>prediction" (class names, or %3.3f)."""

    def write(output, output_dir) -> dict:
        with open(Path(output_dir) / path_name, "w", encoding="utf-8") as f:
            f.write("index\tprediction\n")
            f.writelines(
                f"{index}\t{value:3.3f}\n" if labels.names is None else f"{index}\t{labels.names[value]}\n"
                for index, value in enumerate(output.predictions)
            )
        return {}

    return write


# ------------------------------------------------------------------------------------------------------------ main
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
        data_collator=DataCollatorWithPadding(tokenizer),
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
