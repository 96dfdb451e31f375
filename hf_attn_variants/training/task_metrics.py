"""Scores of fine-tuned models, under the names and with the values of evaluate's `glue`, `squad` and `squad_v2`
metrics, in numpy alone (no `evaluate`, scipy or scikit-learn, nothing fetched): the default metrics of the example
scripts (`--metric_name` swaps in an evaluate module), for scripts of your own too.

- `glue_metrics(task_name, predictions, labels)`: GLUE's metric of a task (`GLUE_METRICS`), with run_glue's
  `combined_score` where a task has two; `classification_metrics` (accuracy and F1) and `regression_metrics`
  (Pearson and Spearman) for other data; `matthews_correlation`, `pearson`, `spearman`, the pieces, equal to
  scikit-learn's and scipy's.
- `squad_metrics(predictions, references)` (SQuAD v1.1: exact_match, f1) and `squad_v2_metrics` (the official
  SQuAD v2.0 evaluation: exact, f1, HasAns_*, NoAns_*, best_*), in percent; `normalize_answer`, `exact_match`,
  `f1_score`, SQuAD's per-answer pieces.
"""

import collections
import re
import string

import numpy as np

# GLUE's metric names of each task (evaluate's "glue" metric), in its order
GLUE_METRICS = {
    "cola": ("matthews_correlation",),
    "sst2": ("accuracy",),
    "mrpc": ("accuracy", "f1"),
    "qqp": ("accuracy", "f1"),
    "stsb": ("pearson", "spearmanr"),
    "mnli": ("accuracy",),
    "qnli": ("accuracy",),
    "rte": ("accuracy",),
    "wnli": ("accuracy",),
}


# ------------------------------------------------------------------------------------------------------------ GLUE
def classification_metrics(predictions, labels, num_labels: int) -> dict:
    """Accuracy, and F1: of class 1 with two classes (as GLUE reports it), macro-averaged over classes otherwise."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    f1s = []
    for c in [1] if num_labels == 2 else range(num_labels):
        true_positive = np.sum((predictions == c) & (labels == c))
        predicted, actual = np.sum(predictions == c), np.sum(labels == c)
        f1s.append(0.0 if true_positive == 0 else 2 * true_positive / (predicted + actual))
    return {"accuracy": float(np.mean(predictions == labels)), "f1": float(np.mean(f1s))}


def matthews_correlation(predictions, labels) -> float:
    """Matthews' correlation coefficient of two label sequences (any number of classes; Gorodkin's R_K), 0 when
    it is undefined (one class predicted or present), as scikit-learn and GLUE report it."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    classes = np.union1d(predictions, labels)
    confusion = np.array(
        [[np.sum((labels == t) & (predictions == p)) for p in classes] for t in classes], dtype=np.float64
    )
    true_counts, predicted_counts = confusion.sum(1), confusion.sum(0)
    correct, total = np.trace(confusion), confusion.sum()
    covariance = correct * total - true_counts @ predicted_counts
    denominator = np.sqrt((total**2 - predicted_counts @ predicted_counts) * (total**2 - true_counts @ true_counts))
    return 0.0 if denominator == 0 else float(covariance / denominator)


def average_ranks(values) -> np.ndarray:
    """Ranks 1..n, ties sharing their average rank (as Spearman's correlation ranks)."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values))
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + end + 1) / 2
            start = end
    return ranks


def pearson(x, y) -> float:
    """Pearson's correlation; nan when either input is constant (as scipy gives it)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x @ x) * (y @ y))
    return float("nan") if denominator == 0 else float(np.clip((x @ y) / denominator, -1.0, 1.0))


def spearman(x, y) -> float:
    """Spearman's rank correlation: Pearson's of the average ranks (as scipy's spearmanr)."""
    return pearson(average_ranks(x), average_ranks(y))


def glue_metrics(task_name: str, predictions, labels) -> dict:
    """GLUE's metric of a task, under the names and with the values of evaluate's "glue" metric."""
    if task_name not in GLUE_METRICS:
        raise ValueError(f"Unknown GLUE task {task_name!r}; GLUE's tasks are {', '.join(GLUE_METRICS)}.")
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    values = {
        "accuracy": lambda: float(np.mean(predictions == labels)),
        "f1": lambda: classification_metrics(predictions, labels, 2)["f1"],
        "matthews_correlation": lambda: matthews_correlation(predictions, labels),
        "pearson": lambda: pearson(predictions, labels),
        "spearmanr": lambda: spearman(predictions, labels),
    }
    result = {name: values[name]() for name in GLUE_METRICS[task_name]}
    if len(result) > 1:  # run_glue's combined_score: the mean of a task's metrics (mrpc, qqp, stsb)
        result["combined_score"] = float(np.mean(list(result.values())))
    return result


def regression_metrics(predictions, labels) -> dict:
    """Pearson's and Spearman's correlations, under GLUE's names for stsb."""
    return {
        "pearson": pearson(predictions, labels),
        "spearmanr": spearman(predictions, labels),
    }


# ----------------------------------------------------------------------------------------------------------- SQuAD
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
    `predictions`: {id: answer text}; `references`: [{"id", "answers": {"text": [...]}}]."""
    _check_predictions(predictions, references)
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
    _check_predictions(predictions, references)
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


def _check_predictions(predictions: dict, references: list[dict]) -> None:
    missing = [r["id"] for r in references if r["id"] not in predictions]
    if missing:
        raise ValueError(
            f"No prediction for {len(missing)} of the {len(references)} questions (ids "
            f"{', '.join(map(str, missing[:5]))}{', ...' if len(missing) > 5 else ''}); give every question of the "
            "references a prediction (an empty string for no answer)."
        )


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
