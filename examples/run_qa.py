"""Fine-tune a BERT, ALBERT or T5 variant for extractive question answering (SQuAD v1.1 and v2.0) with `Trainer`.

    python examples/run_qa.py                   # SQuAD paragraphs shipped in examples/data/, bert-tiny-talking-heads
    python examples/run_qa.py --dataset_name rajpurkar/squad --model_name_or_path path/to/bert \
        --attention_type talking_heads --max_seq_length 384 --doc_stride 128 --per_device_train_batch_size 12
    python examples/run_qa.py --dataset_name rajpurkar/squad_v2 --version_2_with_negative ...
    python examples/run_qa.py --train_file train-v1.1.json --validation_file dev-v1.1.json ...

Data (`hf_attn_variants.training.data_loading`): `--dataset_name` (a Hub id such as rajpurkar/squad, or a local dataset
folder) with SQuAD's columns (id, title, context, question, answers {text, answer_start}), or `--train_file` /
`--validation_file` / `--test_file`: SQuAD's own nested JSON ({"data": [{"title", "paragraphs": [{"context",
"qas": [...]}]}]}, flattened once into the cache), or JSON lines / CSV / parquet of flat records. Other column
names: `--question_column`, `--context_column`, `--answer_column`. With no data flags it trains on 83 SQuAD v1.1
questions about one article (University_of_Notre_Dame) and evaluates on 34 about another (Normans).

Contexts longer than --max_seq_length are cut into overlapping windows (--doc_stride tokens of overlap), a batched
`Dataset.map` cached by `datasets`; a window that does not hold the answer (or an unanswerable question, with
`--version_2_with_negative`) points at the first token. Predictions take the best-scoring valid span (start logit +
end logit, start <= end, at most --max_answer_length tokens) over all windows of a question, mapped back to the
context's characters; with `--version_2_with_negative` the answer is empty when the first token's score (least over
the windows) beats the best span by more than --null_score_diff_threshold, as transformers' run_qa decides (both in
hf_attn_variants.training.question_answering). Metrics (hf_attn_variants.training.task_metrics) have the names and values of
evaluate's `squad` (exact_match, f1, in percent) and `squad_v2` (exact, f1, HasAns_*, NoAns_*, best_*);
`--metric_name` (an evaluate module) replaces them. `--do_train`, `--do_eval`, `--do_predict` act as in
transformers' examples (none given: train and evaluate); predictions go to `predict_predictions.json` (and
`predict_null_odds.json` for v2). Without validation data, --validation_split_percentage of the training questions
are held out. Every `TrainingArguments` option passes through; `--resume_from_checkpoint last` resumes. The output
folder (--output_dir; default `outputs/qa-{model}`, see hf_attn_variants.training.output_folders) holds the model, its
metrics and its model card (README.md) and loads with `AutoModelForQuestionAnswering.from_pretrained(path,
trust_remote_code=True)`.
"""

from dataclasses import dataclass, field
from pathlib import Path

from transformers import DataCollatorWithPadding, HfArgumentParser, Trainer, TrainingArguments, set_seed

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
from hf_attn_variants.training.question_answering import (
    features_function,
    flat_squad_file,
    postprocess_predictions,
    references_of,
    write_predictions,
)
from hf_attn_variants.training.task_metrics import squad_metrics, squad_v2_metrics
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
SQUAD = {"train": DATA / "squad_train.json", "validation": DATA / "squad_validation.json"}
SQUAD_INFO = {
    "name": "SQuAD (Rajpurkar et al., 2016, 2018), 31 paragraphs / 117 answerable questions",
    "source": "examples/data/squad_*.json (University_of_Notre_Dame from train-v1.1, Normans from dev-v2.0)",
    "license": "CC BY-SA 4.0",
}
DEFAULTS = dict(
    preset="bert-tiny-talking-heads",
    output_dir=NAMED_AFTER_THE_RUN,
    num_train_epochs=10,
    per_device_train_batch_size=16,
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
class QADataArguments(DataArguments):
    question_column: str = field(default="question", metadata={"help": "Column of the question."})
    context_column: str = field(default="context", metadata={"help": "Column of the context."})
    answer_column: str = field(
        default="answers",
        metadata={"help": 'Column of the answers: {"text": [...], "answer_start": [...]} (character offsets).'},
    )
    max_seq_length: int = field(
        default=128,
        metadata={"help": "Tokens per window (question, context and special tokens); at most the model's limit."},
    )
    doc_stride: int = field(default=32, metadata={"help": "Tokens of overlap between the windows of a context."})
    n_best_size: int = field(default=20, metadata={"help": "Start and end candidates considered per window."})
    max_answer_length: int = field(default=30, metadata={"help": "Longest answer predicted, in tokens."})
    version_2_with_negative: bool = field(
        default=False,
        metadata={
            "help": "SQuAD v2.0: some questions have no answer (empty `answers`); the model may answer with nothing."
        },
    )
    null_score_diff_threshold: float = field(
        default=0.0,
        metadata={
            "help": "With --version_2_with_negative: answer nothing when the no-answer score beats the best span's by "
            "more than this."
        },
    )
    metric_name: str | None = field(
        default=None,
        metadata={
            "help": "An evaluate module (Hub id or local script path) given SQuAD-format predictions and references, "
            "in place of the default (evaluate's squad / squad_v2 values, computed offline)."
        },
    )


# ------------------------------------------------------------------------------------------------- post-processing
def qa_metrics_function(examples, features, data_args, metric, write_to=None):
    """`compute_metrics` for one set of questions: post-process the windows' logits into answers, write them as
    eval_*.json into `write_to` (the main process's output folder; None: not written), then score them
    (`--metric_name`'s module, else SQuAD v1.1 or v2.0)."""

    def compute_metrics(prediction):
        answers, null_odds, nbest = postprocess(prediction, examples, features, data_args)
        if write_to is not None:
            write_predictions(write_to, "eval", answers, null_odds, nbest)
        references = references_of(examples, data_args.answer_column)
        if metric is not None:
            formatted = [
                {
                    "id": q,
                    "prediction_text": a,
                    **({"no_answer_probability": 0.0} if data_args.version_2_with_negative else {}),
                }
                for q, a in answers.items()
            ]
            return metric.compute(predictions=formatted, references=references)
        if data_args.version_2_with_negative:
            return squad_v2_metrics(answers, references)
        return squad_metrics(answers, references)

    return compute_metrics


def postprocess(prediction, examples, features, data_args):
    start_logits, end_logits = prediction.predictions[:2]
    return postprocess_predictions(
        examples,
        features,
        start_logits,
        end_logits,
        data_args.n_best_size,
        data_args.max_answer_length,
        data_args.version_2_with_negative,
        data_args.null_score_diff_threshold,
        data_args.context_column,
    )


def predictions_writer(examples, features, data_args, main_process: bool):
    """`Prediction.write`: predict_predictions.json, predict_nbest_predictions.json and, for v2,
    predict_null_odds.json (`write_predictions`), by the main process."""

    def write(output, output_dir) -> dict:
        if main_process:
            write_predictions(output_dir, "predict", *postprocess(output, examples, features, data_args))
        return {}

    return write


# ------------------------------------------------------------------------------------------------------------ main
def check_fast(tokenizer) -> None:
    if not tokenizer.is_fast:
        raise ValueError(
            "Extractive QA maps tokens back to characters, which needs a fast tokenizer "
            "(tokenizer.json): pass --tokenizer_name with one."
        )


def check_columns(splits, info, data_args) -> None:
    """Every split has the question and context columns, and all but test the answers; a split without ids gets
    them (post-processing groups a question's windows by its id). Changes `splits` in place."""
    columns = [data_args.question_column, data_args.context_column]
    for split, rows in splits.items():
        needed = columns + ([data_args.answer_column] if split != "test" else [])
        missing = [c for c in needed if c not in rows.column_names]
        if missing:
            raise ValueError(
                f"The {split} data ({info[split]['name']}) has no column {', '.join(map(repr, missing))} "
                f"(its columns: {', '.join(rows.column_names)}): pass --question_column, "
                "--context_column and --answer_column, or use SQuAD's format."
            )
        if "id" not in rows.column_names:  # post-processing groups windows by question id
            splits[split] = rows.map(
                lambda batch, indices: {"id": [str(i) for i in indices]}, batched=True, with_indices=True
            )


def windows(rows, split: str, info, tokenizer, data_args, training_args):
    """The features of one split: each context cut into overlapping windows of --max_seq_length tokens (answer
    positions where the split has answers; offsets and question ids where predictions are read back)."""
    labelled = data_args.answer_column in rows.column_names
    function = features_function(
        tokenizer,
        max_seq_length=data_args.max_seq_length,
        doc_stride=data_args.doc_stride,
        positions=labelled,
        windows=split != "train",
        version_2_with_negative=data_args.version_2_with_negative,
        question_column=data_args.question_column,
        context_column=data_args.context_column,
        answer_column=data_args.answer_column,
        where=f"The {split} data ({info[split]['name']})",
    )
    return map_batched(
        rows,
        function,
        training_args,
        data_args,
        remove_columns=rows.column_names,
        desc=f"Windows of the {split} contexts",
    )


def main(argv=None) -> dict:
    parser = HfArgumentParser((ModelArguments, QADataArguments, TrainingArguments, OutputArguments))
    parser.set_defaults(**DEFAULTS, **script_defaults())
    model_args, data_args, training_args, output_args = parser.parse_args_into_dataclasses(argv)

    # Everything that can be wrong with the input is checked before any training starts.
    choose_stages(training_args, bool(data_args.test_file), DEFAULTS["eval_strategy"])
    if not 0 < data_args.doc_stride < data_args.max_seq_length:
        raise ValueError(
            f"--doc_stride ({data_args.doc_stride}) must be positive and below --max_seq_length "
            f"({data_args.max_seq_length})."
        )
    metric = load_metric(data_args.metric_name) if data_args.metric_name else None
    splits, info = finetuning_splits(
        data_args, default_files=SQUAD, default_info=SQUAD_INFO, seed=training_args.seed, convert_file=flat_squad_file
    )
    evaluated, tested = check_stage_data(training_args, splits, ["validation"], ["test"])
    check_columns(splits, info, data_args)

    family = run_family(model_args.model_name_or_path, model_args.preset)
    tokenizer = load_tokenizer(
        model_args,
        family,
        data_args,
        training_args,
        splits.get("train"),
        [data_args.question_column, data_args.context_column],
        corpus=TOKENIZER_CORPUS,
    )
    check_fast(tokenizer)
    set_seed(training_args.seed)  # the same initial weights on every process and every run
    model = load_or_build_model(
        "ForQuestionAnswering",
        model_args.model_name_or_path,
        model_args.preset,
        tokenizer,
        model_args.attention_type,
        parse_config_overrides(model_args.config_overrides),
    )
    check_max_length(model.config, data_args.max_seq_length)
    settle_output_dir(training_args, output_args, model_args, model, __file__, task="qa")
    align_tokenizer(tokenizer, model.config)

    stages = (["train"] if training_args.do_train else []) + evaluated + tested
    features = {split: windows(splits[split], split, info, tokenizer, data_args, training_args) for split in stages}
    main_process = training_args.process_index == 0
    evaluations = [
        Evaluation(
            features[s],
            info[s],
            qa_metrics_function(
                splits[s], features[s], data_args, metric, write_to=training_args.output_dir if main_process else None
            ),
        )
        for s in evaluated
    ]
    predictions = [
        Prediction(
            features[s],
            info[s],
            predictions_writer(splits[s], features[s], data_args, main_process),
            qa_metrics_function(splits[s], features[s], data_args, metric)
            if data_args.answer_column in splits[s].column_names
            else None,
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
        compute_metrics=evaluations[0].compute_metrics if evaluations else None,
    )
    return run_stages(
        trainer,
        model_args,
        __file__,
        "question-answering",
        train_info=info.get("train"),
        evaluations=evaluations,
        predictions=predictions,
        max_seq_length=data_args.max_seq_length,
        doc_stride=data_args.doc_stride,
        version_2_with_negative=data_args.version_2_with_negative,
    )


if __name__ == "__main__":
    run_script(main)
