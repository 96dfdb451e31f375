"""Extractive question answering on SQuAD-shaped data (id, question, context, answers {text, answer_start}), as
transformers' run_qa.py and its utils_qa.py do it, for any script: `flat_squad_file` (SQuAD's own nested JSON as
flat records for datasets' json builder), `features_function` (a batched `Dataset.map` function cutting long
contexts into overlapping windows, with the answers' token positions for training and the offsets that map tokens
back to characters), `postprocess_predictions` (start and end logits of every window to each question's answer,
n-best list and, for SQuAD v2.0, no-answer odds) and `write_predictions` (run_qa's prediction files). Scoring the
answers: `hf_attn_variants.training.task_metrics.squad_metrics` / `squad_v2_metrics`, given `references_of(examples)`.
"""

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from .tokenizer_training import cache_dir


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
    without an answer, which only `negatives` (SQuAD v2.0 data) allows."""
    if not answers["text"]:
        if not negatives:
            raise ValueError(
                f"{where}: question {example_id} has no answer; pass --version_2_with_negative "
                "(version_2_with_negative=True) for SQuAD v2.0 data with unanswerable questions (or drop them)."
            )
        return None
    for text, start in zip(answers["text"], answers["answer_start"]):
        if context[start : start + len(text)] != text:
            raise ValueError(
                f"{where}: question {example_id}: the answer {text!r} is not at character {start} of "
                "its context; fix `answer_start`."
            )
    return answers["answer_start"][0], answers["answer_start"][0] + len(answers["text"][0])


def features_function(
    tokenizer,
    *,
    max_seq_length: int,
    doc_stride: int,
    positions: bool,
    windows: bool,
    version_2_with_negative: bool = False,
    question_column: str = "question",
    context_column: str = "context",
    answer_column: str = "answers",
    where: str = "the data",
):
    """A batched `Dataset.map` function over SQuAD-shaped rows (id, question, context, answers): windows of
    (question, context) of `max_seq_length` tokens, `doc_stride` tokens of context shared by neighbours; with
    `positions` the first answer's token positions (the first token when the window does not hold it, or the question
    has none, which only `version_2_with_negative` allows), for training; with `windows` each window's question id and
    the context character span of every context token (None elsewhere), which `postprocess_predictions` needs.
    `where` names the data in errors."""

    def prepare(batch):
        encoded = tokenizer(
            [q.lstrip() for q in batch[question_column]],
            batch[context_column],
            truncation="only_second",
            max_length=max_seq_length,
            stride=doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        sample = encoded.pop("overflow_to_sample_mapping")
        offsets_batch = encoded.pop("offset_mapping")
        if positions:
            spans = [
                answer_positions(a, c, i, where, version_2_with_negative)
                for a, c, i in zip(batch[answer_column], batch[context_column], batch["id"])
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


def references_of(examples, answer_column: str = "answers") -> list[dict]:
    """The gold answers of a dataset (or list of rows) of SQuAD-shaped questions, as `task_metrics.squad_metrics` and
    evaluate's squad metrics take them: [{"id", "answers": {"text", "answer_start"}}]."""
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
