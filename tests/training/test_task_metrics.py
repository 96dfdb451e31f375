"""hf_attn_variants.training.task_metrics, the example scripts' default metrics, against computations we did not write:
scikit-learn and scipy for GLUE's, the official SQuAD v2.0 evaluation for SQuAD's; and its errors."""

import collections
import re
import string

import numpy as np
import pytest

from hf_attn_variants.training.task_metrics import (
    GLUE_METRICS,
    classification_metrics,
    glue_metrics,
    matthews_correlation,
    normalize_answer,
    regression_metrics,
    squad_metrics,
    squad_v2_metrics,
)
from hf_attn_variants.training.task_metrics import f1_score as squad_f1


def test_glue_metrics_equal_scikit_learn_and_scipy():
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import f1_score, matthews_corrcoef

    rng = np.random.default_rng(0)
    labels, predictions = rng.integers(0, 2, 50), rng.integers(0, 2, 50)
    glue = glue_metrics
    assert glue("cola", predictions, labels) == {
        "matthews_correlation": pytest.approx(matthews_corrcoef(labels, predictions), abs=1e-12)
    }
    accuracy, f1 = np.mean(labels == predictions), f1_score(labels, predictions)
    assert glue("mrpc", predictions, labels) == {
        "accuracy": pytest.approx(accuracy),
        "f1": pytest.approx(f1, abs=1e-12),  # run_glue's combined score:
        "combined_score": pytest.approx((accuracy + f1) / 2, abs=1e-12),
    }
    assert glue("qqp", predictions, labels).keys() == {"accuracy", "f1", "combined_score"}
    assert glue("sst2", predictions, labels).keys() == {"accuracy"}
    three, guess = rng.integers(0, 3, 60), rng.integers(0, 3, 60)  # multi-class Matthews (R_K)
    assert matthews_correlation(guess, three) == pytest.approx(matthews_corrcoef(three, guess), abs=1e-12)
    assert matthews_correlation([1, 1, 1], [0, 1, 0]) == 0.0  # undefined: 0, as scikit-learn
    scores, gold = rng.normal(size=40).round(1), rng.integers(0, 6, 40).astype(float)  # ties in both
    stsb = glue("stsb", scores, gold)
    pearson, spearman = pearsonr(scores, gold)[0], spearmanr(scores, gold)[0]
    assert stsb == {
        "pearson": pytest.approx(pearson, abs=1e-12),
        "spearmanr": pytest.approx(spearman, abs=1e-12),
        "combined_score": pytest.approx((pearson + spearman) / 2, abs=1e-12),
    }
    # the default of non-GLUE data: accuracy and F1 of class 1 (two classes), macro F1 otherwise
    metrics = classification_metrics
    assert metrics(predictions, labels, 2)["f1"] == pytest.approx(f1_score(labels, predictions))
    assert metrics(guess, three, 3)["f1"] == pytest.approx(f1_score(three, guess, average="macro"))


def official_squad_v2(predictions: dict, references: list[dict]) -> dict:
    """A transcription of the official SQuAD v2.0 evaluation script (and so of evaluate's squad_v2), with every
    no-answer probability 0, for checking ours."""

    def normalize(s):
        s = s.lower()
        s = "".join(ch for ch in s if ch not in set(string.punctuation))
        s = re.sub(r"\b(a|an|the)\b", " ", s)
        return " ".join(s.split())

    def f1(gold, pred):
        gold_toks, pred_toks = normalize(gold).split(), normalize(pred).split()
        common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
        num_same = sum(common.values())
        if len(gold_toks) == 0 or len(pred_toks) == 0:
            return int(gold_toks == pred_toks)
        if num_same == 0:
            return 0
        precision, recall = num_same / len(pred_toks), num_same / len(gold_toks)
        return 2 * precision * recall / (precision + recall)

    exact_raw, f1_raw, has_ans = {}, {}, {}
    for ref in references:
        qid = ref["id"]
        has_ans[qid] = bool(ref["answers"]["text"])
        golds = [a for a in ref["answers"]["text"] if normalize(a)] or [""]
        exact_raw[qid] = max(int(normalize(a) == normalize(predictions[qid])) for a in golds)
        f1_raw[qid] = max(f1(a, predictions[qid]) for a in golds)

    def summary(ids):
        return {
            "exact": 100.0 * sum(exact_raw[k] for k in ids) / len(ids),
            "f1": 100.0 * sum(f1_raw[k] for k in ids) / len(ids),
            "total": len(ids),
        }

    out = summary(list(has_ans))
    for prefix, ids in (
        ("HasAns", [k for k in has_ans if has_ans[k]]),
        ("NoAns", [k for k in has_ans if not has_ans[k]]),
    ):
        if ids:
            out.update({f"{prefix}_{k}": v for k, v in summary(ids).items()})
    for name, scores in (("exact", exact_raw), ("f1", f1_raw)):
        cur = best = sum(1 for k in has_ans if not has_ans[k])
        for qid in has_ans:  # all probabilities 0: sorted order is the original order
            cur += scores[qid] if has_ans[qid] else (-1 if predictions[qid] else 0)
            best = max(best, cur)
        out[f"best_{name}"], out[f"best_{name}_thresh"] = 100.0 * best / len(scores), 0.0
    return out


def test_squad_metrics_equal_the_official_computation():
    assert normalize_answer("The  Seine, river!") == "seine river"
    assert squad_f1("the cat sat", "cat sat down") == pytest.approx(0.8)  # P = 2/2, R = 2/3
    references = [
        {"id": "a", "answers": {"text": ["Seine", "Epte"]}},
        {"id": "b", "answers": {"text": ["King Charles III"]}},
        {"id": "c", "answers": {"text": []}},
        {"id": "d", "answers": {"text": []}},
        {"id": "e", "answers": {"text": ["the Normans", "Normans"]}},
    ]
    for predictions in (
        {"a": "the river Seine", "b": "Charles III", "c": "", "d": "Rollo", "e": "Normans"},
        {"a": "Epte", "b": "", "c": "x", "d": "", "e": "the Vikings"},
    ):
        ours, official = squad_v2_metrics(predictions, references), official_squad_v2(predictions, references)
        assert (
            ours.keys()
            == official.keys()
            == {
                "exact",
                "f1",
                "total",
                "HasAns_exact",
                "HasAns_f1",
                "HasAns_total",
                "NoAns_exact",
                "NoAns_f1",
                "NoAns_total",
                "best_exact",
                "best_exact_thresh",
                "best_f1",
                "best_f1_thresh",
            }
        )
        assert ours == {k: pytest.approx(v, abs=1e-9) for k, v in official.items()}
    # SQuAD v1.1 (evaluate's squad): exact_match and f1 in percent, the best over the gold answers
    answered = [r for r in references if r["answers"]["text"]]
    predictions = {"a": "the river Seine", "b": "Charles III", "e": "Normans"}  # a: 2/3, b: 4/5, e: 1
    assert squad_metrics(predictions, answered) == {
        "exact_match": pytest.approx(100 / 3),
        "f1": pytest.approx(100 * (2 / 3 + 0.8 + 1) / 3),
    }


def test_regression_metrics_equal_scipy_and_name_glue_tasks():
    from scipy.stats import pearsonr, spearmanr

    rng = np.random.default_rng(1)
    scores, gold = rng.normal(size=30), rng.normal(size=30)
    assert regression_metrics(scores, gold) == {
        "pearson": pytest.approx(pearsonr(scores, gold)[0], abs=1e-12),
        "spearmanr": pytest.approx(spearmanr(scores, gold)[0], abs=1e-12),
    }
    # the GLUE tasks the classification script accepts are the tasks scored here
    from hf_attn_variants.training import classification

    assert set(GLUE_METRICS) == set(classification.GLUE_TASKS)
    with pytest.raises(ValueError, match="Unknown GLUE task 'mnli-mm'; GLUE's tasks are cola, sst2"):
        glue_metrics("mnli-mm", [0], [0])


def test_squad_metrics_name_the_questions_without_a_prediction():
    references = [{"id": str(i), "answers": {"text": ["x"]}} for i in range(8)]
    for metrics in (squad_metrics, squad_v2_metrics):
        with pytest.raises(ValueError, match=r"No prediction for 7 of the 8 questions \(ids 1, 2, 3, 4, 5, \.\.\.\)"):
            metrics({"0": "x"}, references)
