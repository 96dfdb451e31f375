"""Fine-tune a BERT, ALBERT or T5 variant for extractive question answering (SQuAD format) with `Trainer`.

    python examples/run_qa.py                   # SQuAD paragraphs shipped in examples/data/, bert-tiny-talking-heads
    python examples/run_qa.py --model_name_or_path path/to/bert --attention_type talking_heads \
        --train_file train-v1.1.json --validation_file dev-v1.1.json --max_seq_length 384 --doc_stride 128

With no data arguments it trains on 83 SQuAD v1.1 questions about one article (University_of_Notre_Dame) and
evaluates on 34 about another (Normans). `--train_file`/`--validation_file` take SQuAD-format JSON
({"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question", "answers": [{"text",
"answer_start"}]}]}]}]}) or JSON lines of flat records with `--question_column`, `--context_column` and
`--answer_column` ({"text": [...], "answer_start": [...]}). Contexts longer than --max_seq_length are cut into
overlapping windows (--doc_stride tokens of overlap); a window that does not hold the answer is trained to point at
the first token. Predictions take the best-scoring valid span (start logit + end logit, start <= end, at most
--max_answer_length tokens) over all windows of a question, mapped back to the context's characters, and are
scored with SQuAD's exact match and F1 (answers lower-cased, punctuation and articles removed; best over the gold
answers), computed here: nothing is fetched. Every `TrainingArguments` option passes through (--bf16,
--torch_compile, --gradient_checkpointing, --push_to_hub, ...); `--resume_from_checkpoint last` resumes. The output
folder loads with `AutoModelForQuestionAnswering.from_pretrained(path, trust_remote_code=True)`.
"""

import collections
import json
import re
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from transformers import DataCollatorWithPadding, HfArgumentParser, Trainer, TrainingArguments, set_seed

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

SQUAD = {"train": DATA / "squad_train.json", "validation": DATA / "squad_validation.json"}
SQUAD_INFO = {
    "name": "SQuAD (Rajpurkar et al., 2016, 2018), 31 paragraphs / 117 answerable questions",
    "source": "examples/data/squad_*.json (University_of_Notre_Dame from train-v1.1, Normans from dev-v2.0)",
    "license": "CC BY-SA 4.0",
}
DEFAULTS = dict(
    preset="bert-tiny-talking-heads", output_dir="outputs/qa", num_train_epochs=10, per_device_train_batch_size=16,
    per_device_eval_batch_size=64,
    learning_rate=5e-4, warmup_steps=0.1, weight_decay=0.01, eval_strategy="epoch", logging_steps=10,
    save_strategy="epoch", save_total_limit=1, report_to="none", seed=42,
)


@dataclass
class DataArguments:
    train_file: str | None = field(default=None, metadata={
        "help": "SQuAD-format JSON, or JSON lines of flat records. Default: the embedded SQuAD paragraphs."})
    validation_file: str | None = field(default=None, metadata={
        "help": "Same format. Required with --train_file; default: the embedded validation paragraphs."})
    question_column: str = field(default="question", metadata={"help": "Field of the question (flat records)."})
    context_column: str = field(default="context", metadata={"help": "Field of the context (flat records)."})
    answer_column: str = field(default="answers", metadata={
        "help": "Field of the answers (flat records): {\"text\": [...], \"answer_start\": [...]}."})
    max_seq_length: int = field(default=128, metadata={
        "help": "Tokens per window (question, context and special tokens); at most the model's limit."})
    doc_stride: int = field(default=32, metadata={"help": "Tokens of overlap between the windows of a context."})
    n_best_size: int = field(default=20, metadata={"help": "Start and end candidates considered per window."})
    max_answer_length: int = field(default=30, metadata={"help": "Longest answer predicted, in tokens."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training questions."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation questions."})


# ------------------------------------------------------------------------------------------------------------ data
def read_squad(path: str | Path, argument: str, data_args) -> list[dict]:
    """Questions as flat records {id, question, context, answers: {text: [...], answer_start: [...]}}."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{argument} {path}: no such file.")
    if path.suffix.lower() not in (".json", ".jsonl"):
        raise ValueError(f"{argument} {path}: use a SQuAD-format .json file or a .jsonl file of flat records.")
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None  # JSON lines
    if isinstance(data, dict) and "data" in data:  # SQuAD's nesting: articles > paragraphs > questions
        return [{"id": str(qa["id"]), "question": qa["question"], "context": paragraph["context"],
                 "answers": {"text": [a["text"] for a in qa["answers"]],
                             "answer_start": [a["answer_start"] for a in qa["answers"]]}}
                for article in data["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    rows = data if isinstance(data, list) else [json.loads(line) for line in text.splitlines() if line.strip()]
    columns = [data_args.question_column, data_args.context_column, data_args.answer_column]
    missing = [c for c in columns if not rows or c not in rows[0]]
    if missing:
        raise ValueError(f"{path} has no field {', '.join(map(repr, missing))} (its fields: "
                         f"{', '.join(rows[0]) if rows else 'none'}): pass --question_column, --context_column "
                         "and --answer_column, or use SQuAD's format.")
    return [{"id": str(r.get("id", i)), "question": r[columns[0]], "context": r[columns[1]], "answers": r[columns[2]]}
            for i, r in enumerate(rows)]


def check_answers(examples: list[dict], path) -> None:
    for e in examples:
        answers = e["answers"]
        if not answers["text"]:
            raise ValueError(f"{path}: question {e['id']} has no answer; this script trains extractive QA with an "
                             "answer in every context (SQuAD v1.1), so drop unanswerable questions.")
        for text, start in zip(answers["text"], answers["answer_start"]):
            if e["context"][start : start + len(text)] != text:
                raise ValueError(f"{path}: question {e['id']}: the answer {text!r} is not at character {start} of "
                                 "its context; fix `answer_start`.")


def prepare_features(examples: list[dict], tokenizer, max_seq_length: int, doc_stride: int):
    """Windows of (question, context) with the first answer's token positions (the first token when the window
    does not hold it), and for each window its question's id and the context character span of every context token
    (None elsewhere), which post-processing needs."""
    encoded = tokenizer([e["question"].lstrip() for e in examples], [e["context"] for e in examples],
                        truncation="only_second", max_length=max_seq_length, stride=doc_stride,
                        return_overflowing_tokens=True, return_offsets_mapping=True)
    features, windows = [], []
    for i, offsets in enumerate(encoded["offset_mapping"]):
        example = examples[encoded["overflow_to_sample_mapping"][i]]
        sequence_ids = encoded.sequence_ids(i)
        context_offsets = [o if s == 1 else None for o, s in zip(offsets, sequence_ids)]
        first = sequence_ids.index(1)
        last = len(sequence_ids) - 1 - sequence_ids[::-1].index(1)
        answer_start = example["answers"]["answer_start"][0]
        answer_end = answer_start + len(example["answers"]["text"][0])
        start_position = end_position = 0
        if offsets[first][0] <= answer_start and offsets[last][1] >= answer_end:
            start_position = next(t for t in range(first, last + 1) if offsets[t][1] > answer_start)
            end_position = next(t for t in range(last, first - 1, -1) if offsets[t][0] < answer_end)
        inputs = {k: encoded[k][i] for k in encoded if k not in ("offset_mapping", "overflow_to_sample_mapping")}
        features.append({**inputs, "start_positions": start_position, "end_positions": end_position})
        windows.append({"example_id": example["id"], "offsets": context_offsets})
    return features, windows


# ------------------------------------------------------------------------------------------------- post-processing
def postprocess_predictions(examples, windows, start_logits, end_logits, n_best_size=20, max_answer_length=30):
    """{question id: answer text}: the best valid span over all windows of each question."""
    by_example = collections.defaultdict(list)
    for index, window in enumerate(windows):
        by_example[window["example_id"]].append(index)
    answers = {}
    for example in examples:
        best_score, best_text = -np.inf, ""
        for index in by_example[example["id"]]:
            offsets = windows[index]["offsets"]
            starts = np.argsort(start_logits[index][: len(offsets)])[::-1][:n_best_size]
            ends = np.argsort(end_logits[index][: len(offsets)])[::-1][:n_best_size]
            for s in starts:
                for e in ends:
                    if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                        continue
                    score = start_logits[index][s] + end_logits[index][e]
                    if score > best_score:
                        best_score, best_text = score, example["context"][offsets[s][0] : offsets[e][1]]
        answers[example["id"]] = best_text
    return answers


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles (a, an, the), single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def exact_match(prediction: str, truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(truth))


def f1_score(prediction: str, truth: str) -> float:
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    common = sum((collections.Counter(predicted) & collections.Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(predictions: dict, examples: list[dict]) -> dict:
    """SQuAD v1.1's exact match and F1 in percent: per question the best over its gold answers, then the mean."""
    em = [max(exact_match(predictions[e["id"]], t) for t in e["answers"]["text"]) for e in examples]
    f1 = [max(f1_score(predictions[e["id"]], t) for t in e["answers"]["text"]) for e in examples]
    return {"exact_match": 100.0 * float(np.mean(em)), "f1": 100.0 * float(np.mean(f1))}


def main(argv=None) -> dict:
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    parser.set_defaults(**DEFAULTS)
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(argv)

    # Everything that can be wrong with the input is checked before any training starts.
    if bool(data_args.train_file) != bool(data_args.validation_file):
        raise ValueError("Pass both --train_file and --validation_file (or neither, for the embedded data).")
    if not 0 < data_args.doc_stride < data_args.max_seq_length:
        raise ValueError(f"--doc_stride ({data_args.doc_stride}) must be positive and below --max_seq_length "
                         f"({data_args.max_seq_length}).")
    train_path = data_args.train_file or SQUAD["train"]
    eval_path = data_args.validation_file or SQUAD["validation"]
    train_examples = read_squad(train_path, "--train_file", data_args)[: data_args.max_train_samples]
    eval_examples = read_squad(eval_path, "--validation_file", data_args)[: data_args.max_eval_samples]
    check_answers(train_examples, train_path)
    check_answers(eval_examples, eval_path)

    family = family_of(model_args.model_name_or_path, model_args.preset)
    tokenizer = load_tokenizer(model_args, family)
    if not tokenizer.is_fast:
        raise ValueError("Extractive QA maps tokens back to characters, which needs a fast tokenizer "
                         "(tokenizer.json): pass --tokenizer_name with one.")
    set_seed(training_args.seed)  # the same initial weights on every process and every run
    model = load_or_build_model("ForQuestionAnswering", model_args.model_name_or_path, model_args.preset, tokenizer,
                                model_args.attention_type, parse_config_overrides(model_args.config_overrides))
    check_max_length(model.config, data_args.max_seq_length)
    train_set, _ = prepare_features(train_examples, tokenizer, data_args.max_seq_length, data_args.doc_stride)
    eval_set, eval_windows = prepare_features(eval_examples, tokenizer, data_args.max_seq_length, data_args.doc_stride)

    def compute_metrics(prediction):
        start_logits, end_logits = prediction.predictions[:2]
        answers = postprocess_predictions(eval_examples, eval_windows, start_logits, end_logits,
                                          data_args.n_best_size, data_args.max_answer_length)
        return squad_metrics(answers, eval_examples)

    trainer = Trainer(
        model=model, args=training_args, train_dataset=train_set, eval_dataset=eval_set,
        data_collator=DataCollatorWithPadding(tokenizer), processing_class=tokenizer, compute_metrics=compute_metrics,
    )
    train_result = trainer.train(resume_from_checkpoint=resume_checkpoint(training_args))
    return finish(trainer, train_result, model_args, __file__, "question-answering",
                  data_file_info(data_args.train_file, SQUAD_INFO), max_seq_length=data_args.max_seq_length,
                  doc_stride=data_args.doc_stride)

if __name__ == "__main__":
    main()
