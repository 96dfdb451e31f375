"""Fine-tune a BERT, ALBERT or T5 variant for extractive question answering (SQuAD v1.1 and v2.0) with `Trainer`.

    python examples/run_qa.py                   # SQuAD paragraphs shipped in examples/data/, bert-tiny-talking-heads
    python examples/run_qa.py --dataset_name rajpurkar/squad --model_name_or_path path/to/bert \
        --attention_type talking_heads --max_seq_length 384 --doc_stride 128 --per_device_train_batch_size 12
    python examples/run_qa.py --dataset_name rajpurkar/squad_v2 --version_2_with_negative ...
    python examples/run_qa.py --train_file train-v1.1.json --validation_file dev-v1.1.json ...

Data (`hf_attn_variants.data_loading`): `--dataset_name` (a Hub id such as rajpurkar/squad, or a local dataset
folder) with SQuAD's columns (id, title, context, question, answers {text, answer_start}), or `--train_file` /
`--validation_file` / `--test_file`: SQuAD's own nested JSON ({"data": [{"title", "paragraphs": [{"context",
"qas": [...]}]}]}, flattened once into the cache), or JSON lines / CSV / parquet of flat records. Other column
names: `--question_column`, `--context_column`, `--answer_column`. With no data flags it trains on 83 SQuAD v1.1
questions about one article (University_of_Notre_Dame) and evaluates on 34 about another (Normans).

Contexts longer than --max_seq_length are cut into overlapping windows (--doc_stride tokens of overlap), a batched
`Dataset.map` cached by `datasets`; a window that does not hold the answer (or an unanswerable question, with
`--version_2_with_negative`) points at the first token. Predictions take the best-scoring valid span (start logit
+ end logit, start <= end, at most --max_answer_length tokens) over all windows of a question, mapped back to the
context's characters; with `--version_2_with_negative` the answer is empty when the first token's score (least
over the windows) beats the best span by more than --null_score_diff_threshold, as transformers' run_qa decides.
Metrics are computed here, with the names and values of evaluate's `squad` (exact_match, f1, in percent) and
`squad_v2` (exact, f1, HasAns_*, NoAns_*, best_*); `--metric_name` (an evaluate module) replaces them. `--do_train`,
`--do_eval`, `--do_predict` act as in transformers' examples (none given: train and evaluate); predictions go to
`predict_predictions.json` (and `predict_null_odds.json` for v2). Without validation data,
--validation_split_percentage of the training questions are held out. Every `TrainingArguments` option passes
through; `--resume_from_checkpoint last` resumes. The output folder (--output_dir; default `outputs/qa-{model}`, see
hf_attn_variants.output_folders) holds the model, its metrics and its model card (README.md) and loads with
`AutoModelForQuestionAnswering.from_pretrained(path, trust_remote_code=True)`.
"""

import collections
import hashlib
import json
import os
import re
import string
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from transformers import DataCollatorWithPadding, HfArgumentParser, Trainer, TrainingArguments, set_seed

from hf_attn_variants.data_loading import DataArguments, check_stage_data, finetuning_splits, map_batched
from hf_attn_variants.model_setup import (
    ModelArguments,
    align_tokenizer,
    check_max_length,
    load_or_build_model,
    load_tokenizer,
    parse_config_overrides,
    run_family,
)
from hf_attn_variants.output_folders import NAMED_AFTER_THE_RUN, OutputArguments, settle_output_dir
from hf_attn_variants.run_record import (
    Evaluation,
    Prediction,
    choose_stages,
    device_defaults,
    load_metric,
    run_script,
    run_stages,
)
from hf_attn_variants.tokenizer_training import cache_dir

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
            "help": "An evaluate module (Hub id or local script path) given SQuAD-format predictions and references, in "
            "place of the default (evaluate's squad / squad_v2 values, computed here)."
        },
    )


# ------------------------------------------------------------------------------------------------------------ data
def flat_squad_file(path: str | os.PathLike) -> str:
    """SQuAD's own nested JSON (articles > paragraphs > questions) as JSON lines of flat records {id, title,
    context, question, answers: {text, answer_start}}, written once into the cache (keyed by the file's content)
    for datasets' json builder; any other file is returned as it is."""
    path = Path(path)
    if path.suffix.lower() != ".json" or not path.is_file():
        return str(path)
    with path.open(encoding="utf-8") as f:
        head = f.read(65536)
    if not head.lstrip().startswith("{") or '"paragraphs"' not in head:
        return str(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    target = cache_dir() / "squad" / f"{path.stem}-{digest}.jsonl"
    if not target.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=target.parent, delete=False, encoding="utf-8") as out:
            for article in data["data"]:
                for paragraph in article["paragraphs"]:
                    for qa in paragraph["qas"]:
                        out.write(
                            json.dumps(
                                {
                                    "id": str(qa["id"]),
                                    "title": article.get("title", ""),
                                    "context": paragraph["context"],
                                    "question": qa["question"],
                                    "answers": {
                                        "text": [a["text"] for a in qa["answers"]],
                                        "answer_start": [a["answer_start"] for a in qa["answers"]],
                                    },
                                }
                            )
                            + "\n"
                        )
        os.replace(out.name, target)  # atomic: concurrent processes never read half a file
    return str(target)


def answer_positions(answers: dict, context: str, example_id, where: str, negatives: bool) -> tuple[int, int] | None:
    """The first answer's character span, after checking every answer sits at its offset; None for a question
    without an answer (SQuAD v2)."""
    if not answers["text"]:
        if not negatives:
            raise ValueError(
                f"{where}: question {example_id} has no answer; pass --version_2_with_negative for "
                "SQuAD v2.0 data with unanswerable questions (or drop them)."
            )
        return None
    for text, start in zip(answers["text"], answers["answer_start"]):
        if context[start : start + len(text)] != text:
            raise ValueError(
                f"{where}: question {example_id}: the answer {text!r} is not at character {start} of "
                "its context; fix `answer_start`."
            )
    return answers["answer_start"][0], answers["answer_start"][0] + len(answers["text"][0])


def features_function(tokenizer, data_args, where: str, *, positions: bool, windows: bool):
    """A batched `Dataset.map` function: windows of (question, context); with `positions` the first answer's token
    positions (the first token when the window does not hold it, or the question has none); with `windows` each
    window's question id and the context character span of every context token (None elsewhere), which
    post-processing needs."""
    question, context, answer = data_args.question_column, data_args.context_column, data_args.answer_column

    def prepare(batch):
        encoded = tokenizer(
            [q.lstrip() for q in batch[question]],
            batch[context],
            truncation="only_second",
            max_length=data_args.max_seq_length,
            stride=data_args.doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        sample = encoded.pop("overflow_to_sample_mapping")
        offsets_batch = encoded.pop("offset_mapping")
        if positions:
            spans = [
                answer_positions(a, c, i, where, data_args.version_2_with_negative)
                for a, c, i in zip(batch[answer], batch[context], batch["id"])
            ]
            encoded["start_positions"], encoded["end_positions"] = [], []
        if windows:
            encoded["example_id"], encoded["offset_mapping"] = [], []
        for i, offsets in enumerate(offsets_batch):
            sequence_ids = encoded.sequence_ids(i)
            if positions:
                span = spans[sample[i]]
                first = sequence_ids.index(1)
                last = len(sequence_ids) - 1 - sequence_ids[::-1].index(1)
                start_position = end_position = 0
                if span and offsets[first][0] <= span[0] and offsets[last][1] >= span[1]:
                    start_position = next(t for t in range(first, last + 1) if offsets[t][1] > span[0])
                    end_position = next(t for t in range(last, first - 1, -1) if offsets[t][0] < span[1])
                encoded["start_positions"].append(start_position)
                encoded["end_positions"].append(end_position)
            if windows:
                encoded["example_id"].append(batch["id"][sample[i]])
                encoded["offset_mapping"].append([o if s == 1 else None for o, s in zip(offsets, sequence_ids)])
        return encoded

    return prepare


# ------------------------------------------------------------------------------------------------- post-processing
def postprocess_predictions(
    examples,
    features,
    start_logits,
    end_logits,
    n_best_size=20,
    max_answer_length=30,
    version_2_with_negative=False,
    null_score_diff_threshold=0.0,
    context_column="context",
):
    """(answers, null odds, n-best) of each question, as transformers' run_qa post-processes: the `n_best_size`
    best valid spans over all windows (`nbest[id]`: text, probability (softmax over them), start and end logit, best
    first); the answer is the best one, or, with `version_2_with_negative`, "" when the no-answer score (the first
    token's start + end logits, least over the windows) exceeds the best span's by more than
    `null_score_diff_threshold` (`null_odds[id]`: that difference). `examples` and `features` are datasets (or lists
    of rows); features carry example_id and offset_mapping."""
    spans = {}  # question id -> [(score, start char, end char, start logit, end logit)], the best n kept
    null = {}  # question id -> least no-answer score over its windows
    index = 0
    for batch in _batches(features, ["example_id", "offset_mapping"]):
        for example_id, offsets in zip(batch["example_id"], batch["offset_mapping"]):
            starts, ends = start_logits[index][: len(offsets)], end_logits[index][: len(offsets)]
            index += 1
            null[example_id] = min(null.get(example_id, np.inf), starts[0] + ends[0])
            found = spans.setdefault(example_id, [])
            for s in np.argsort(starts)[::-1][:n_best_size]:
                for e in np.argsort(ends)[::-1][:n_best_size]:
                    if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                        continue
                    found.append(
                        (float(starts[s] + ends[e]), offsets[s][0], offsets[e][1], float(starts[s]), float(ends[e]))
                    )
            found.sort(key=lambda span: -span[0])
            del found[n_best_size:]
    answers, null_odds, nbest = {}, {}, {}
    for batch in _batches(examples, ["id", context_column]):
        for example_id, context in zip(batch["id"], batch[context_column]):
            found = spans.get(example_id) or [(-np.inf, 0, 0, -np.inf, -np.inf)]
            scores = np.array([span[0] for span in found])
            weights = np.exp(scores - scores.max()) if np.isfinite(scores.max()) else np.ones_like(scores)
            nbest[example_id] = [
                {
                    "text": context[start:end],
                    "probability": float(weight / weights.sum()),
                    "start_logit": start_logit,
                    "end_logit": end_logit,
                }
                for (_, start, end, start_logit, end_logit), weight in zip(found, weights)
            ]
            answers[example_id] = nbest[example_id][0]["text"]
            if version_2_with_negative:
                null_odds[example_id] = float(null.get(example_id, np.inf) - found[0][0])
                if null_odds[example_id] > null_score_diff_threshold:
                    answers[example_id] = ""
    return answers, null_odds, nbest


def _batches(rows, columns, size=1000):
    """Column batches of a dataset (Arrow, read a batch at a time), or of a list of row dicts."""
    if isinstance(rows, list):
        yield {c: [r[c] for r in rows] for c in columns}
        return
    yield from rows.select_columns(columns).iter(batch_size=size)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles (a, an, the), single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def exact_match(prediction: str, truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(truth))


def f1_score(prediction: str, truth: str) -> float:
    """SQuAD's token F1; an empty answer scores 1 against an empty answer and 0 against any other (SQuAD v2)."""
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not predicted or not gold:
        return float(predicted == gold)
    common = sum((collections.Counter(predicted) & collections.Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(predictions: dict, references: list[dict]) -> dict:
    """evaluate's `squad` (SQuAD v1.1): exact match and F1 in percent, per question the best over its gold answers.
    `references`: [{"id", "answers": {"text": [...]}}]."""
    em = [max(exact_match(predictions[r["id"]], t) for t in r["answers"]["text"]) for r in references]
    f1 = [max(f1_score(predictions[r["id"]], t) for t in r["answers"]["text"]) for r in references]
    return {"exact_match": 100.0 * float(np.mean(em)), "f1": 100.0 * float(np.mean(f1))}


def squad_v2_metrics(
    predictions: dict,
    references: list[dict],
    no_answer_probability: dict | None = None,
    no_answer_threshold: float = 1.0,
) -> dict:
    """evaluate's `squad_v2` (the official SQuAD v2.0 evaluation): exact and f1 over all questions, over those with
    (HasAns_) and without (NoAns_) an answer, and the best scores over no-answer thresholds (best_*), in percent.
    A question without an answer is right when the prediction is empty. `no_answer_probability` defaults to 0 for
    every question, as transformers' run_qa passes it."""
    probability = no_answer_probability or {r["id"]: 0.0 for r in references}
    has_answer = {r["id"]: bool(r["answers"]["text"]) for r in references}
    exact, f1 = {}, {}
    for r in references:
        golds = [t for t in r["answers"]["text"] if normalize_answer(t)] or [""]
        exact[r["id"]] = max(exact_match(predictions[r["id"]], t) for t in golds)
        f1[r["id"]] = max(f1_score(predictions[r["id"]], t) for t in golds)

    def thresholded(scores):  # a question predicted unanswerable scores 1 if it is, 0 if not
        return {q: float(not has_answer[q]) if probability[q] > no_answer_threshold else s for q, s in scores.items()}

    def summary(exact_scores, f1_scores, ids):
        return {
            "exact": 100.0 * sum(exact_scores[q] for q in ids) / len(ids),
            "f1": 100.0 * sum(f1_scores[q] for q in ids) / len(ids),
            "total": len(ids),
        }

    exact_t, f1_t = thresholded(exact), thresholded(f1)
    out = summary(exact_t, f1_t, list(has_answer))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        ids = [q for q, h in has_answer.items() if h == wanted]
        if ids:
            out.update({f"{prefix}_{k}": v for k, v in summary(exact_t, f1_t, ids).items()})
    for name, raw in (("exact", exact), ("f1", f1)):
        out[f"best_{name}"], out[f"best_{name}_thresh"] = _best_threshold(predictions, raw, probability, has_answer)
    return out


def _best_threshold(predictions, scores, probability, has_answer) -> tuple[float, float]:
    """The best score over no-answer thresholds: questions sorted by no-answer probability, each threshold
    predicting "no answer" for those above it (the official script's find_best_thresh)."""
    score = best = sum(not h for h in has_answer.values())
    threshold = 0.0
    for q in sorted(probability, key=probability.get):
        if has_answer[q]:
            score += scores[q]
        elif predictions[q]:
            score -= 1
        if score > best:
            best, threshold = score, probability[q]
    return 100.0 * best / len(scores), threshold


def references_of(examples, answer_column: str) -> list[dict]:
    return [
        {"id": i, "answers": {"text": list(a["text"]), "answer_start": list(a["answer_start"])}}
        for batch in _batches(examples, ["id", answer_column])
        for i, a in zip(batch["id"], batch[answer_column])
    ]


def write_predictions(output_dir, prefix: str, answers: dict, null_odds: dict, nbest: dict) -> None:
    """transformers' run_qa files: {prefix}_predictions.json ({id: answer}), {prefix}_nbest_predictions.json and,
    for SQuAD v2, {prefix}_null_odds.json."""
    files = {"predictions": answers, "nbest_predictions": nbest, **({"null_odds": null_odds} if null_odds else {})}
    for name, content in files.items():
        (Path(output_dir) / f"{prefix}_{name}.json").write_text(json.dumps(content, indent=2) + "\n")


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
def main(argv=None) -> dict:
    parser = HfArgumentParser((ModelArguments, QADataArguments, TrainingArguments, OutputArguments))
    parser.set_defaults(**DEFAULTS, **device_defaults())
    model_args, data_args, training_args, output_args = parser.parse_args_into_dataclasses(argv)

    # Everything that can be wrong with the input is checked before any training starts.
    choose_stages(training_args, argv, bool(data_args.test_file))
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
    if not tokenizer.is_fast:
        raise ValueError(
            "Extractive QA maps tokens back to characters, which needs a fast tokenizer "
            "(tokenizer.json): pass --tokenizer_name with one."
        )
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

    features = {}
    for split in (["train"] if training_args.do_train else []) + evaluated + tested:
        rows = splits[split]
        labelled = data_args.answer_column in rows.column_names
        function = features_function(
            tokenizer,
            data_args,
            f"The {split} data ({info[split]['name']})",
            positions=labelled,
            windows=split != "train",
        )
        features[split] = map_batched(
            rows,
            function,
            training_args,
            data_args,
            remove_columns=rows.column_names,
            desc=f"Windows of the {split} contexts",
        )
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
