"""Fine-tune a BERT, ALBERT or T5 variant for text classification (GLUE-style: single sentences or sentence pairs)
with `Trainer`.

    python examples/run_classification.py           # movie-review sentiment, bert-tiny-talking-heads, about a minute
    python examples/run_classification.py --preset albert-mini-synthesizer-dense
    python examples/run_classification.py --model_name_or_path path/to/bert --attention_type talking_heads \
        --train_file train.csv --validation_file dev.csv --text_column premise --text_pair_column hypothesis

With no data arguments it trains on 436 labelled movie-review sentences and evaluates on 108 others (the sentence
polarity dataset of Pang and Lee, shipped in examples/data/). `--train_file`/`--validation_file` take CSV, TSV,
JSON (a list of objects) or JSON lines; the text columns are found as transformers' run_glue finds them
(sentence1/sentence2, question/sentence, premise/hypothesis, sentence, text) or named with `--text_column` and
`--text_pair_column`; labels (`--label_column`, default `label`) are class names or integers. Without
`--model_name_or_path` the model is built from `--preset` with the project's tokenizer (WordPiece for BERT/ALBERT,
Unigram for T5). Reports accuracy and F1 (of the second class in sorted order for two classes, macro-averaged
otherwise). Every `TrainingArguments` option passes through (--bf16, --torch_compile, --gradient_checkpointing,
--push_to_hub, ...); `--resume_from_checkpoint last` resumes from the newest checkpoint in --output_dir. The output
folder loads with `AutoModelForSequenceClassification.from_pretrained(path, trust_remote_code=True)`.
"""

import csv
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from transformers import (
    DataCollatorWithPadding,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    set_seed,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from example_utils import (  # noqa: E402
    DATA,
    ModelArguments,
    check_max_length,
    data_file_info,
    family_of,
    finish,
    load_or_build_model,
    load_tokenizer,
    parse_config_overrides,
    resume_checkpoint,
)

RT_POLARITY = {"train": DATA / "rt_polarity_train.csv", "validation": DATA / "rt_polarity_validation.csv"}
RT_POLARITY_INFO = {
    "name": "sentence polarity dataset v1.0 (Pang and Lee, 2005), 544-sentence subset",
    "source": "examples/data/rt_polarity_*.csv, from rt-polarity.pos/.neg (yoonkim/CNN_sentence)",
    "license": "research use (no explicit licence); cite Pang and Lee, ACL 2005",
}
# run_glue's column names, in the order they are tried: (text, text pair)
KNOWN_TEXT_COLUMNS = [("sentence1", "sentence2"), ("question", "sentence"), ("premise", "hypothesis"),
                      ("sentence", None), ("text", None)]
DEFAULTS = dict(
    preset="bert-tiny-talking-heads", output_dir="outputs/classification", num_train_epochs=10,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=64, learning_rate=5e-4, warmup_steps=0.1, weight_decay=0.01, eval_strategy="epoch",
    logging_steps=10, save_strategy="epoch", save_total_limit=1, report_to="none", seed=42,
)


@dataclass
class DataArguments:
    train_file: str | None = field(default=None, metadata={
        "help": "CSV, TSV, JSON or JSON-lines file of labelled texts. Default: the embedded movie-review sentences."})
    validation_file: str | None = field(default=None, metadata={
        "help": "Same format and columns. Required with --train_file; default: the embedded validation sentences."})
    text_column: str | None = field(default=None, metadata={
        "help": "Column of the (first) text. Default: found as run_glue finds it (sentence1, question, premise, "
                "sentence, text)."})
    text_pair_column: str | None = field(default=None, metadata={
        "help": "Column of the second text of a pair task; default: the partner of the found text column, if any."})
    label_column: str = field(default="label", metadata={"help": "Column of the labels (class names or integers)."})
    max_seq_length: int = field(default=128, metadata={
        "help": "Tokens per example after truncation, special tokens included; at most the model's limit."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation examples."})


# ------------------------------------------------------------------------------------------------------------ data
def read_table(path: str | Path, argument: str) -> list[dict]:
    """The rows of a CSV/TSV file or a JSON file (a list of objects, {"data": [...]}, or one object per line)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{argument} {path}: no such file.")
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f, delimiter="\t" if suffix == ".tsv" else ","))
    elif suffix in (".json", ".jsonl"):
        text = path.read_text(encoding="utf-8")
        try:
            data = json.loads(text) if suffix == ".json" else None
        except json.JSONDecodeError:
            data = None  # JSON lines in a .json file
        if data is None:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        rows = data.get("data") if isinstance(data, dict) else data
    else:
        raise ValueError(f"{argument} {path}: use a .csv, .tsv, .json or .jsonl file.")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{argument} {path}: expected a non-empty table (rows of named columns).")
    return rows


def require_columns(rows: list[dict], columns: list[str], path, hint: str) -> None:
    missing = [c for c in columns if c not in rows[0]]
    if missing:
        raise ValueError(f"{path} has no column {', '.join(map(repr, missing))} (its columns: "
                         f"{', '.join(rows[0])}): {hint}.")


def text_columns(rows: list[dict], data_args, path) -> tuple[str, str | None]:
    """The (text, text pair) columns: the ones named on the command line, else run_glue's known names."""
    if data_args.text_column:
        columns = (data_args.text_column, data_args.text_pair_column)
    else:
        found = [pair for pair in KNOWN_TEXT_COLUMNS if all(c in rows[0] for c in pair if c)]
        if not found:
            raise ValueError(f"{path}: no known text column (its columns: {', '.join(rows[0])}): pass "
                             "--text_column (and --text_pair_column for pairs).")
        columns = (found[0][0], data_args.text_pair_column or found[0][1])
    require_columns(rows, [c for c in columns if c], path, "pass --text_column/--text_pair_column")
    return columns


def label_names(values) -> list[str]:
    """Class names in a stable order: numerically when every label is an integer, else alphabetically."""
    names = sorted({str(v) for v in values})
    if all(n.lstrip("-").isdigit() for n in names):
        names.sort(key=int)
    return names


def encode(rows, columns, label_column, label2id, tokenizer, max_seq_length, path) -> list[dict]:
    first, second = columns
    for i, row in enumerate(rows):
        if str(row[label_column]) not in label2id:
            raise ValueError(f"{path}, row {i + 1}: label {row[label_column]!r} is not among the training labels "
                             f"{list(label2id)}.")
    pairs = [str(r[second]) for r in rows] if second else None
    encoded = tokenizer([str(r[first]) for r in rows], pairs, truncation=True, max_length=max_seq_length)
    return [{**{k: v[i] for k, v in encoded.items()}, "labels": label2id[str(r[label_column])]}
            for i, r in enumerate(rows)]


# --------------------------------------------------------------------------------------------------------- metrics
def classification_metrics(predictions, labels, num_labels: int) -> dict:
    """Accuracy, and F1: of class 1 with two classes (as GLUE reports it), macro-averaged over classes otherwise."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    f1s = []
    for c in ([1] if num_labels == 2 else range(num_labels)):
        true_positive = np.sum((predictions == c) & (labels == c))
        predicted, actual = np.sum(predictions == c), np.sum(labels == c)
        f1s.append(0.0 if true_positive == 0 else 2 * true_positive / (predicted + actual))
    return {"accuracy": float(np.mean(predictions == labels)), "f1": float(np.mean(f1s))}


def predicted_classes(logits, labels):
    """Keep the argmax, not the logits (nor T5's other outputs), for `compute_metrics`."""
    return (logits[0] if isinstance(logits, tuple) else logits).argmax(-1)


def main(argv=None) -> dict:
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    parser.set_defaults(**DEFAULTS)
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(argv)

    # Everything that can be wrong with the input is checked before any training starts.
    if bool(data_args.train_file) != bool(data_args.validation_file):
        raise ValueError("Pass both --train_file and --validation_file (or neither, for the embedded data).")
    train_path = data_args.train_file or RT_POLARITY["train"]
    eval_path = data_args.validation_file or RT_POLARITY["validation"]
    train_rows = read_table(train_path, "--train_file")[: data_args.max_train_samples]
    eval_rows = read_table(eval_path, "--validation_file")[: data_args.max_eval_samples]
    columns = text_columns(train_rows, data_args, train_path)
    require_columns(eval_rows, [c for c in columns if c], eval_path, "give both files the same columns")
    for rows, path in ((train_rows, train_path), (eval_rows, eval_path)):
        require_columns(rows, [data_args.label_column], path, "pass --label_column")
    labels = label_names(r[data_args.label_column] for r in train_rows)
    if len(labels) < 2:
        raise ValueError(f"{train_path}: the training labels hold one class only ({labels}); classification needs two "
                         "or more.")
    label2id = {name: i for i, name in enumerate(labels)}

    family = family_of(model_args.model_name_or_path, model_args.preset)
    tokenizer = load_tokenizer(model_args, family)
    set_seed(training_args.seed)  # the same initial weights on every process and every run
    model = load_or_build_model(
        "ForSequenceClassification", model_args.model_name_or_path, model_args.preset, tokenizer,
        model_args.attention_type, parse_config_overrides(model_args.config_overrides),
        id2label=dict(enumerate(labels)), label2id=label2id,  # num_labels follows from id2label
    )
    check_max_length(model.config, data_args.max_seq_length)
    train_set = encode(train_rows, columns, data_args.label_column, label2id, tokenizer, data_args.max_seq_length,
                       train_path)
    eval_set = encode(eval_rows, columns, data_args.label_column, label2id, tokenizer, data_args.max_seq_length,
                      eval_path)

    trainer = Trainer(
        model=model, args=training_args, train_dataset=train_set, eval_dataset=eval_set,
        data_collator=DataCollatorWithPadding(tokenizer), processing_class=tokenizer,
        compute_metrics=lambda p: classification_metrics(p.predictions, p.label_ids, len(labels)),
        preprocess_logits_for_metrics=predicted_classes,
    )
    train_result = trainer.train(resume_from_checkpoint=resume_checkpoint(training_args))
    return finish(trainer, train_result, model_args, __file__, "text-classification",
                  data_file_info(data_args.train_file, RT_POLARITY_INFO), max_seq_length=data_args.max_seq_length,
                  labels=labels, text_columns=[c for c in columns if c])

if __name__ == "__main__":
    main()
