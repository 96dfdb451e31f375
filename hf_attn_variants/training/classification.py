"""Sentence(-pair) classification as transformers' run_glue does it: which columns hold the text (`text_columns`,
GLUE's tasks by name), the labels and their names (`find_labels`), the tokenization into features
(`preprocess_function`), and the metrics and prediction files of a run (`metrics_function`, `predictions_writer`).
What the example script run_classification.py runs, for a classification script of your own too; the scores themselves are
`task_metrics`'.
"""

from pathlib import Path
from typing import NamedTuple

from .task_metrics import classification_metrics, glue_metrics, regression_metrics

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
