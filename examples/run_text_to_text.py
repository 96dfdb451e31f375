"""Fine-tune a T5 variant on a text-to-text task with `Seq2SeqTrainer`, evaluating on generated text.

    python examples/run_text_to_text.py         # movie-review sentiment as text, t5-tiny-talking-heads
    python examples/run_text_to_text.py --model_name_or_path path/to/t5 --attention_type talking_heads \
        --dataset_name rajpurkar/squad --source_column question --target_column title --source_prefix "topic: "
    python examples/run_text_to_text.py --train_file train.csv --validation_file dev.csv --test_file test.csv \
        --source_column question --target_column answer --source_prefix "question: " --do_train --do_eval --do_predict

Data (`hf_attn_variants.training.data_loading`): `--dataset_name` (a Hub id or a local dataset folder, with
`--dataset_config_name`) or `--train_file`/`--validation_file`/`--test_file` (CSV, TSV, JSON lines, parquet), with
a source and a target column (`--source_column`, `--target_column`: text; a target that is a class label is
written as its name); `--source_prefix` is put before every source. With no data flags it learns
"sst2 sentence: <review sentence>" -> "positive" / "negative" on the 436 movie-review sentences shipped in
examples/data/ (the T5 paper's SST-2 format) and evaluates on 108 others. Without validation data,
--validation_split_percentage of the training rows are held out. Tokenization is a batched `Dataset.map` cached by
`datasets`. Without `--model_name_or_path` the model is built from a t5-* `--preset` with the project's Unigram
tokenizer. Evaluation generates (`--predict_with_generate`, greedy or `--generation_num_beams`) and reports
`accuracy`, the share of generated texts equal to their target (surrounding spaces ignored): exact match of the
whole output, which is the classification accuracy for label words; `--metric_name` (an evaluate module, e.g. a
local rouge or sacrebleu script) replaces it, given the generated and target texts. `--do_train`, `--do_eval`,
`--do_predict` act as in transformers' examples (none given: train and evaluate); predictions go to
`generated_predictions.txt`. Every `Seq2SeqTrainingArguments` option passes through; `--resume_from_checkpoint
last` resumes. The output folder (--output_dir; default `outputs/text-to-text-{model}`, see
hf_attn_variants.training.output_folders) holds the model, its metrics and its model card (README.md) and loads with
`AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True)`.
"""

import copy
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from transformers import (
    DataCollatorForSeq2Seq,
    HfArgumentParser,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    set_seed,
)

from hf_attn_variants.families import FAMILIES
from hf_attn_variants.training.classification import require_columns
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
from run_classification import RT_POLARITY, RT_POLARITY_INFO, TOKENIZER_CORPUS
from script_utils import (
    Evaluation,
    Prediction,
    choose_stages,
    load_metric,
    run_script,
    run_stages,
    script_defaults,
)

SST2_PREFIX = "sst2 sentence: "  # the T5 paper's input format for SST-2
DEFAULTS = dict(
    preset="t5-tiny-talking-heads",
    output_dir=NAMED_AFTER_THE_RUN,
    num_train_epochs=10,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=64,
    learning_rate=1e-3,
    warmup_steps=0.1,
    weight_decay=0.01,
    eval_strategy="epoch",
    logging_steps=10,
    save_strategy="epoch",
    save_total_limit=1,
    predict_with_generate=True,
    report_to="none",
    seed=42,
)


@dataclass
class TextToTextDataArguments(DataArguments):
    source_column: str = field(default="sentence", metadata={"help": "Column of the input text."})
    target_column: str = field(
        default="label",
        metadata={"help": "Column of the output text (a class-label column is written as its class names)."},
    )
    source_prefix: str | None = field(
        default=None,
        metadata={
            "help": f"Text put before every source. Default: {SST2_PREFIX!r} on the embedded data, none otherwise."
        },
    )
    max_source_length: int = field(
        default=128, metadata={"help": "Source tokens after truncation, </s> included; at most the model's limit."}
    )
    max_target_length: int = field(
        default=16,
        metadata={
            "help": "Target tokens after truncation, </s> included; also the generation length unless "
            "--generation_max_length is given."
        },
    )
    metric_name: str | None = field(
        default=None,
        metadata={
            "help": "An evaluate module (Hub id or local script path) given the generated and the target texts, in "
            "place of the default (accuracy: exact match of the whole output)."
        },
    )


def target_texts(rows, column: str):
    """A function giving a batch's target texts: the values as text, class labels by their names."""
    from datasets import ClassLabel

    feature = rows.features.get(column)
    if isinstance(feature, ClassLabel):
        return lambda values: [feature.int2str(v) for v in values]
    return lambda values: [str(v) for v in values]


def has_targets(rows, column: str) -> bool:
    """Whether a split's target column holds targets to score: not when it is missing or has nulls, nor when a class
    label or integer column marks rows unlabelled with -1, as GLUE's test splits do (those are predicted only)."""
    import pyarrow
    import pyarrow.compute

    if column not in rows.column_names or len(rows) == 0:
        return False
    values = rows.data.column(column)
    if values.null_count:
        return False
    return not pyarrow.types.is_integer(values.type) or pyarrow.compute.min(values).as_py() >= 0


def tokenize_function(tokenizer, data_args, prefix: str, to_text):
    """A batched `Dataset.map` function: the prefixed source as input ids, the target (when present) as labels."""

    def tokenize(batch):
        encoded = tokenizer(
            [prefix + str(s) for s in batch[data_args.source_column]],
            truncation=True,
            max_length=data_args.max_source_length,
        )
        if data_args.target_column in batch:
            encoded["labels"] = tokenizer(
                text_target=to_text(batch[data_args.target_column]),
                truncation=True,
                max_length=data_args.max_target_length,
            )["input_ids"]
        return encoded

    return tokenize


def text_accuracy(predicted: list[str], targets: list[str]) -> float:
    """The share of outputs equal to their target, surrounding spaces ignored."""
    return float(np.mean([p.strip() == t.strip() for p, t in zip(predicted, targets)]))


def decode(tokenizer, ids) -> list[str]:
    """Texts of generated ids or labels (padded with -100 across batches, labels wherever they are not predicted)."""
    return tokenizer.batch_decode(np.where(ids == -100, tokenizer.pad_token_id, ids), skip_special_tokens=True)


class Seq2SeqCollator(DataCollatorForSeq2Seq):
    """transformers' collator, less the `labels: None` it puts into a batch without targets (an unlabelled test
    split), which would make Seq2SeqTrainer compute a loss with no decoder input."""

    def __call__(self, features, return_tensors=None):
        batch = super().__call__(features, return_tensors)
        if batch.get("labels", 0) is None:
            del batch["labels"]
        return batch


class KeepGenerationConfig(TrainerCallback):
    """Seq2SeqTrainer's evaluation fills the model's generation config with every default (max_length=20, ...); saved
    so, the checkpoint would make `generate(max_new_tokens=...)` warn that both lengths are set. This puts the model's
    own generation config back after each evaluation and prediction, before anything is saved."""

    def __init__(self, model):
        self.model, self.config = model, copy.deepcopy(model.generation_config)

    def on_evaluate(self, args, state, control, **kwargs):
        self.model.generation_config = copy.deepcopy(self.config)

    on_predict = on_evaluate


def check_t5_and_generation(family: str, training_args) -> None:
    if not FAMILIES[family].encoder_decoder:
        raise ValueError(
            f"run_text_to_text.py fine-tunes T5 variants, not {family}: pass a t5-* --preset or a T5 "
            "checkpoint (for BERT/ALBERT classification use run_classification.py)."
        )
    if not training_args.predict_with_generate:
        raise ValueError("Evaluation scores generated text: keep --predict_with_generate (the default).")


def tokenized(rows, split: str, tested: bool, tokenizer, prefix: str, data_args, training_args):
    """The features of one split, tokenized into the datasets cache; unlabelled test rows are generated for, not
    scored (their target column goes)."""
    if tested and data_args.target_column in rows.column_names and not has_targets(rows, data_args.target_column):
        rows = rows.remove_columns(data_args.target_column)
    function = tokenize_function(tokenizer, data_args, prefix, target_texts(rows, data_args.target_column))
    return map_batched(
        rows, function, training_args, data_args, remove_columns=rows.column_names, desc=f"Tokenizing {split}"
    )


def metrics_function(tokenizer, metric):
    """`compute_metrics` of generated text: `metric` (an evaluate module) on the decoded texts, else exact-match
    accuracy."""

    def compute_metrics(prediction):
        predicted, targets = decode(tokenizer, prediction.predictions), decode(tokenizer, prediction.label_ids)
        if metric is not None:
            return metric.compute(predictions=predicted, references=targets)
        return {"accuracy": text_accuracy(predicted, targets)}

    return compute_metrics


def predictions_writer(tokenizer):
    """`Prediction.write`: the generated texts, one a line, in generated_predictions.txt."""

    def write_predictions(output, output_dir) -> dict:
        texts = decode(tokenizer, output.predictions)
        (Path(output_dir) / "generated_predictions.txt").write_text(
            "".join(t.strip().replace("\n", " ") + "\n" for t in texts), encoding="utf-8"
        )
        return {}

    return write_predictions


def main(argv=None) -> dict:
    parser = HfArgumentParser((ModelArguments, TextToTextDataArguments, Seq2SeqTrainingArguments, OutputArguments))
    parser.set_defaults(**DEFAULTS, **script_defaults())
    model_args, data_args, training_args, output_args = parser.parse_args_into_dataclasses(argv)

    # Everything that can be wrong with the input is checked before any training starts.
    choose_stages(training_args, bool(data_args.test_file), DEFAULTS["eval_strategy"])
    family = run_family(model_args.model_name_or_path, model_args.preset)
    check_t5_and_generation(family, training_args)
    training_args.generation_max_length = training_args.generation_max_length or data_args.max_target_length
    metric = load_metric(data_args.metric_name) if data_args.metric_name else None
    splits, info = finetuning_splits(
        data_args, default_files=RT_POLARITY, default_info=RT_POLARITY_INFO, seed=training_args.seed
    )
    evaluated, tested = check_stage_data(training_args, splits, ["validation"], ["test"])
    for split, rows in splits.items():
        needed = [data_args.source_column] + ([data_args.target_column] if split != "test" else [])
        where = f"The {split} data ({info[split]['name']})"
        require_columns(rows.column_names, needed, where, "pass --source_column and --target_column")
    embedded = not (data_args.dataset_name or data_args.train_file or data_args.validation_file)
    prefix = data_args.source_prefix if data_args.source_prefix is not None else SST2_PREFIX if embedded else ""

    tokenizer = load_tokenizer(
        model_args,
        family,
        data_args,
        training_args,
        splits.get("train"),
        [data_args.source_column, data_args.target_column],
        corpus=TOKENIZER_CORPUS,
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
    check_max_length(model.config, data_args.max_source_length, "--max_source_length")
    check_max_length(model.config, training_args.generation_max_length, "--generation_max_length")
    check_max_length(model.config, data_args.max_target_length, "--max_target_length")
    settle_output_dir(training_args, output_args, model_args, model, __file__, task="text-to-text")
    align_tokenizer(tokenizer, model.config)

    stages = (["train"] if training_args.do_train else []) + evaluated + tested
    features = {s: tokenized(splits[s], s, s in tested, tokenizer, prefix, data_args, training_args) for s in stages}

    compute_metrics, write_predictions = metrics_function(tokenizer, metric), predictions_writer(tokenizer)
    evaluations = [Evaluation(features[s], info[s], compute_metrics) for s in evaluated]
    predictions = [
        Prediction(
            features[s], info[s], write_predictions, compute_metrics if "labels" in features[s].column_names else None
        )
        for s in tested
    ]
    trainer = Seq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=features.get("train"),
        eval_dataset=evaluations[0].dataset if evaluations else None,
        data_collator=Seq2SeqCollator(tokenizer, model=model),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        callbacks=[KeepGenerationConfig(model)],
    )
    return run_stages(
        trainer,
        model_args,
        __file__,
        "text2text-generation",
        train_info=info.get("train"),
        evaluations=evaluations,
        predictions=predictions,
        max_source_length=data_args.max_source_length,
        max_target_length=data_args.max_target_length,
        source_prefix=prefix,
        source_column=data_args.source_column,
        target_column=data_args.target_column,
    )


if __name__ == "__main__":
    run_script(main)
