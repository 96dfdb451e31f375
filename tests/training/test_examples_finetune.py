"""The fine-tuning example scripts: classification (GLUE tasks by name), extractive QA (SQuAD v1.1/v2.0) and T5
text-to-text, run in-process on tiny presets for a few steps, on the embedded data, local files and folders, and
(in a subprocess) dataset repositories on the loopback Hub; their metrics against independent computations; the
stages, predictions files, cache reuse and model card; clear errors for bad input before any training."""

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from transformers import (
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

import run_classification
import run_qa
import run_text_to_text
from conftest import run_with_hub
from hf_attn_variants.training import classification
from hf_attn_variants.training.question_answering import (
    answer_positions,
    features_function,
    flat_squad_file,
    postprocess_predictions,
    references_of,
)
from hf_attn_variants.training.task_metrics import squad_v2_metrics
from hf_attn_variants.training.tokenizer_training import train_tokenizer
from run_pretraining import CORPUS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# A few steps, every step logged, nothing saved but the final model.
NO_DROPOUT = '{"hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0}'
FAST = [
    "--logging_steps",
    "1",
    "--eval_strategy",
    "no",
    "--save_strategy",
    "no",
    "--disable_tqdm",
    "true",
    "--per_device_train_batch_size",
    "8",
    "--seed",
    "0",
]


def logged_losses(output_dir) -> list[float]:
    history = json.loads((Path(output_dir) / "trainer_state.json").read_text())["log_history"]
    return [entry["loss"] for entry in history if "loss" in entry]


def assert_learns(output_dir, factor: float) -> None:
    """Every step's loss is finite, and the last four average below `factor` times the first four."""
    losses = logged_losses(output_dir)
    assert len(losses) >= 8 and all(math.isfinite(loss) for loss in losses)
    assert np.mean(losses[-4:]) < factor * np.mean(losses[:4]), losses


def rt_rows(split: str) -> list[dict]:
    import csv

    with open(run_classification.RT_POLARITY[split], newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def squad_rows(split: str) -> list[dict]:
    path = flat_squad_file(run_qa.SQUAD[split])
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def glue_tables(n_train=24, n_eval=8, n_test=6) -> dict:
    """GLUE-shaped tables (rte, stsb, mnli columns and splits) made from the embedded movie-review sentences."""
    rows = rt_rows("train")
    sentences = [r["sentence"] for r in rows]
    positive = [int(r["label"] == "positive") for r in rows]

    def pairs(start, n, label):
        return {
            "sentence1": sentences[start : start + n],
            "sentence2": sentences[start + 1 : start + n + 1],
            "label": [label(i) for i in range(start, start + n)],
            "idx": list(range(n)),
        }

    def mnli(start, n, labelled=True):
        return {
            "premise": sentences[start : start + n],
            "hypothesis": sentences[start + 2 : start + n + 2],
            "label": [(i % 3) if labelled else -1 for i in range(n)],
            "idx": list(range(n)),
        }

    test_start = n_train + n_eval
    return {
        "rte": {
            "train": pairs(0, n_train, lambda i: positive[i]),
            "validation": pairs(n_train, n_eval, lambda i: positive[i]),
            "test": pairs(test_start, n_test, lambda i: -1),
        },
        "stsb": {
            "train": pairs(0, n_train, lambda i: float(i % 6)),
            "validation": pairs(n_train, n_eval, lambda i: float(i % 5) + 0.5),
        },
        "mnli": {
            "train": mnli(0, n_train),
            "validation_matched": mnli(40, n_eval),
            "validation_mismatched": mnli(60, n_eval + 2),
            "test_matched": mnli(80, n_test, False),
            "test_mismatched": mnli(90, n_test, False),
        },
    }


def dataset_folder(path: Path, configs: dict) -> Path:
    """A local dataset folder as a Hub dataset repository lays it out: parquet files and a README `configs:`."""
    card = {"configs": []}
    for config, splits in configs.items():
        (path / config).mkdir(parents=True, exist_ok=True)
        for split, table in splits.items():
            pq.write_table(pa.table(table), path / config / f"{split}-00000-of-00001.parquet")
        card["configs"].append(
            {
                "config_name": config,
                "data_files": [{"split": split, "path": f"{config}/{split}-*"} for split in splits],
            }
        )
    (path / "README.md").write_text(f"---\n{yaml.safe_dump(card, sort_keys=False)}---\n")
    return path


# ---------------------------------------------------------------------------------------------------------- data
def test_embedded_data_is_balanced_and_answers_sit_at_their_offsets():
    for split in ("train", "validation"):
        labels = [r["label"] for r in rt_rows(split)]
        assert labels.count("positive") == labels.count("negative") > 50
        examples = squad_rows(split)
        for e in examples:  # raises if an answer is not at answer_start
            answer_positions(e["answers"], e["context"], e["id"], split, negatives=False)
        assert len(examples) > 30 and len({e["id"] for e in examples}) == len(examples)
        assert set(examples[0]) == {"id", "title", "context", "question", "answers"}  # the Hub's SQuAD columns
    assert not {r["sentence"] for r in rt_rows("train")} & {r["sentence"] for r in rt_rows("validation")}
    assert not {e["context"] for e in squad_rows("train")} & {e["context"] for e in squad_rows("validation")}


def test_text_columns_found_as_run_glue_finds_them():
    from types import SimpleNamespace

    args = SimpleNamespace(text_column=None, text_pair_column=None, task_name=None)
    columns = classification.text_columns
    assert columns(["sentence1", "sentence2", "label"], args, "f") == ("sentence1", "sentence2")
    assert columns(["idx", "sentence", "label"], args, "f") == ("sentence", None)
    assert columns(
        ["question1", "question2", "label"], SimpleNamespace(**{**vars(args), "task_name": "qqp"}), "f"
    ) == ("question1", "question2")
    with pytest.raises(ValueError, match="--text_column"):
        columns(["review", "label"], args, "f")
    assert classification.label_names(["10", "2", "2"]) == ["2", "10"]  # integers sorted numerically


def test_labels_of_class_label_integer_string_and_float_columns():
    """GLUE on the Hub has ClassLabel columns (names in id order); a GLUE-shaped folder may hold integers (the
    task's names), files class names (sorted) or floats (regression); text-to-text writes class labels by name."""
    from types import SimpleNamespace

    from datasets import ClassLabel, Dataset, Features, Value

    def labels(values, feature, task=None):
        data = Dataset.from_dict({"label": values}, features=Features({"label": feature}))
        return classification.find_labels(data, SimpleNamespace(label_column="label", task_name=task), "f")

    mnli = ClassLabel(names=["entailment", "neutral", "contradiction"])
    assert labels([0, 2, 1], mnli, "mnli") == (["entailment", "neutral", "contradiction"], True)
    with pytest.raises(ValueError, match="GLUE's sst2 has 2"):
        labels([0, 2, 1], mnli, "sst2")
    assert labels([1, 0], Value("int64"), "qnli") == (["entailment", "not_entailment"], True)
    assert labels(["pos", "neg", "pos"], Value("string")) == (["neg", "pos"], False)
    assert labels([0.5, 4.0], Value("float32"), "stsb") == (None, False)
    assert labels([0.5, 4.0], Value("float64")) == (None, False)
    data = Dataset.from_dict({"label": [2, 0]}, features=Features({"label": mnli}))
    assert run_text_to_text.target_texts(data, "label")(data["label"]) == ["contradiction", "entailment"]


# ------------------------------------------------------------------------------------------------ QA windows
@pytest.mark.parametrize("max_seq_length,doc_stride", [(128, 32), (48, 16)])
def test_gold_logits_recover_the_gold_answers(max_seq_length, doc_stride):
    """Logits peaked at the windows' gold positions give back every gold answer's exact text, also when contexts
    are cut into many overlapping windows (48 tokens: most answers are in some windows and not in others); a v2
    question without an answer, whose windows all point at the first token, gets the empty answer."""

    from datasets import Dataset

    tokenizer = train_tokenizer("wordpiece", 8000, corpus=CORPUS)
    rows = squad_rows("validation")
    rows[0]["answers"] = {"text": [], "answer_start": []}  # unanswerable (SQuAD v2)
    examples = Dataset.from_list(rows)
    prepare = features_function(
        tokenizer,
        max_seq_length=max_seq_length,
        doc_stride=doc_stride,
        positions=True,
        windows=True,
        version_2_with_negative=True,
    )
    features = examples.map(prepare, batched=True, remove_columns=examples.column_names)
    assert len(features) > len(examples)  # several windows per context
    length = max(len(ids) for ids in features["input_ids"])
    start_logits, end_logits = np.zeros((len(features), length)), np.zeros((len(features), length))
    for i, (start, end) in enumerate(zip(features["start_positions"], features["end_positions"])):
        start_logits[i, start] = end_logits[i, end] = 10.0  # the first token where the window lacks the answer
    answers, null_odds, nbest = postprocess_predictions(
        examples, features, start_logits, end_logits, n_best_size=5, version_2_with_negative=True
    )
    assert answers == {e["id"]: (e["answers"]["text"] or [""])[0] for e in rows}
    assert null_odds[rows[0]["id"]] > 0 > null_odds[rows[1]["id"]]
    for e in rows[
        1:
    ]:  # the n-best of an answered question: the gold span first, scores falling, probabilities summing to 1
        best = nbest[e["id"]]
        assert best[0]["text"] == e["answers"]["text"][0] and best[0]["start_logit"] == best[0]["end_logit"] == 10.0
        assert 1 <= len(best) <= 5 and sum(b["probability"] for b in best) == pytest.approx(1.0)
        assert [b["start_logit"] + b["end_logit"] for b in best] == sorted(
            (b["start_logit"] + b["end_logit"] for b in best), reverse=True
        )
    assert squad_v2_metrics(answers, references_of(examples))["exact"] == 100.0


# -------------------------------------------------------------------------------------------------------- scripts
def card_of(folder):
    text = (Path(folder) / "README.md").read_text()
    return text, ModelCard(text).data


def test_classification_trains_saves_reloads_and_writes_its_card(tmp_path):
    out = tmp_path / "cls"
    metrics = run_classification.main(
        [
            "--output_dir",
            str(out),
            *FAST,
            "--max_steps",
            "24",
            "--learning_rate",
            "3e-3",
            "--warmup_steps",
            "0",
            "--max_train_samples",
            "16",
            "--max_eval_samples",
            "24",
            "--max_seq_length",
            "64",
        ]
    )
    assert_learns(out, 0.5)  # 16 sentences, 12 epochs: the model fits them
    assert 0 <= metrics["eval_accuracy"] <= 1 and 0 <= metrics["eval_f1"] <= 1 and math.isfinite(metrics["eval_loss"])
    assert json.loads((out / "all_results.json").read_text())["eval_accuracy"] == metrics["eval_accuracy"]
    info = json.loads((out / "training_info.json").read_text())
    assert info["task"] == "text-classification" and info["dataset"]["split"] == "train"
    assert [(e["metric_prefix"], e["split"]) for e in info["evaluation"]] == [("eval_", "validation")]

    # The card names the data of each number: the evaluation ran on the validation sentences, not on train.csv;
    # no Hub dataset was used, so the metadata lists none (and no model-index of local data).
    text, data = card_of(out)
    assert data.datasets is None and data.eval_results is None
    assert re.search(r"\| accuracy \| [0-9.]+ \| sentence polarity dataset .*, split validation \|", text)
    assert "train.csv" not in text

    # The saved model is the trained one: reloaded, it scores the validation sentences as the run did, and its
    # tokenizer cuts texts to the model's 128 positions.
    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.model_max_length == model.config.max_position_embeddings == 128
    rows = rt_rows("validation")[:24]
    assert model.config.id2label == {0: "negative", 1: "positive"}
    with torch.no_grad():
        logits = model(**tokenizer([r["sentence"] for r in rows], padding=True, return_tensors="pt")).logits
    predicted = [model.config.id2label[i] for i in logits.argmax(-1).tolist()]
    assert np.mean([p == r["label"] for p, r in zip(predicted, rows)]) == pytest.approx(metrics["eval_accuracy"])


def test_padding_free_classification_trains_as_the_padded_batches(tmp_path):
    """--padding_free: each batch one packed row (one label per example, each classified from its own first token):
    with dropout off, the losses and the evaluation equal the padded batches'; T5 is refused."""
    common = [*FAST, "--max_steps", "4", "--warmup_steps", "0", "--max_train_samples", "16"]
    common += ["--max_eval_samples", "24", "--max_seq_length", "64"]
    bert = ["--preset", "bert-tiny-synthesizer-mixture", "--config_overrides", NO_DROPOUT]
    runs = {}
    for flag in ("--padding_free", None):
        runs[flag] = run_classification.main(
            [*common, *bert, *([flag] if flag else []), "--output_dir", str(tmp_path / str(flag))]
        )
    for key in ("train_loss", "eval_loss", "eval_accuracy"):
        assert runs["--padding_free"][key] == pytest.approx(runs[None][key], rel=1e-5, abs=1e-5), key
    with pytest.raises(ValueError, match="--padding_free packs the examples"):
        run_classification.main(
            [*common, "--padding_free", "--preset", "t5-tiny-dot-product", "--output_dir", str(tmp_path / "t5")]
        )


def test_glue_task_from_a_local_folder_predicts_reuses_the_cache_and_takes_an_evaluate_metric(tmp_path, monkeypatch):
    """--task_name rte on a GLUE-shaped local folder: GLUE's columns and metric, predictions of the unlabelled test
    split in predict_results_rte.txt; an identical rerun reads every tokenized split from the datasets cache; an
    evaluate metric script replaces the default; --do_eval alone evaluates without training."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    folder = dataset_folder(tmp_path / "glue", {"rte": glue_tables()["rte"]})
    argv = [
        *FAST,
        "--task_name",
        "rte",
        "--dataset_name",
        str(folder),
        "--max_steps",
        "2",
        "--max_seq_length",
        "64",
        "--do_train",
        "--do_eval",
        "--do_predict",
    ]
    first = run_classification.main(["--output_dir", str(tmp_path / "a"), *argv])
    assert set(first) >= {"eval_accuracy", "predict_samples"} and "eval_f1" not in first  # rte: accuracy only
    lines = (tmp_path / "a" / "predict_results_rte.txt").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 7
    assert {line.split("\t")[1] for line in lines[1:]} <= {"entailment", "not_entailment"}  # GLUE's label names
    cached = {p: p.stat().st_mtime_ns for p in (tmp_path / "datasets").rglob("cache-*.arrow")}
    assert len(cached) >= 3  # train, validation and test tokenized

    metric = tmp_path / "exact_share.py"
    metric.write_text(EXACT_SHARE)
    run_classification.main(["--output_dir", str(tmp_path / "b"), *argv, "--metric_name", str(metric)])
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "datasets").rglob("cache-*.arrow")} == cached
    second = json.loads((tmp_path / "b" / "all_results.json").read_text())
    assert second["eval_exact_share"] == pytest.approx(first["eval_accuracy"]) and "eval_accuracy" not in second

    evaluated = run_classification.main(
        [
            "--output_dir",
            str(tmp_path / "c"),
            *FAST,
            "--task_name",
            "rte",
            "--dataset_name",
            str(folder),
            "--model_name_or_path",
            str(tmp_path / "a"),
            "--max_seq_length",
            "64",
            "--do_eval",
        ]
    )
    assert evaluated["eval_accuracy"] == pytest.approx(first["eval_accuracy"])
    assert not (tmp_path / "c" / "train_results.json").exists()
    assert not (tmp_path / "c" / "predict_results_rte.txt").exists()
    text, _ = card_of(tmp_path / "c")  # the card of an evaluation-only run does not claim training data
    assert "Not trained by this run: evaluated with" in text and "**Training data:**" not in text
    assert "| hyperparameter |" not in text and "Measured by the run and" in text


EXACT_SHARE = """
import datasets
import evaluate


class ExactShare(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(description="share of equal labels", citation="", inputs_description="",
                                   features=datasets.Features({"predictions": datasets.Value("int64"),
                                                               "references": datasets.Value("int64")}))

    def _compute(self, predictions, references):
        return {"exact_share": sum(p == r for p, r in zip(predictions, references)) / len(references)}
"""


def test_qa_trains_saves_reloads_and_predicts(tmp_path):
    out = tmp_path / "qa"
    metrics = run_qa.main(
        [
            "--output_dir",
            str(out),
            *FAST,
            "--max_steps",
            "12",
            "--learning_rate",
            "1e-3",
            "--warmup_steps",
            "0",
            "--max_train_samples",
            "16",
            "--max_eval_samples",
            "8",
            "--max_seq_length",
            "96",
            "--doc_stride",
            "32",
            "--train_file",
            str(run_qa.SQUAD["train"]),
            "--validation_file",
            str(run_qa.SQUAD["validation"]),
            "--test_file",
            str(run_qa.SQUAD["validation"]),
            "--max_predict_samples",
            "5",
        ]
    )
    assert_learns(out, 0.8)
    assert 0 <= metrics["eval_exact_match"] <= 100 and 0 <= metrics["eval_f1"] <= 100
    assert metrics["eval_exact_match"] <= metrics["eval_f1"] + 1e-9
    predictions = json.loads((out / "predict_predictions.json").read_text())
    assert list(predictions) == [e["id"] for e in squad_rows("validation")[:5]]
    # transformers' run_qa files, for evaluation and prediction: answers and their n-best lists
    nbest = json.loads((out / "predict_nbest_predictions.json").read_text())
    assert {q: n[0]["text"] for q, n in nbest.items()} == predictions
    evaluated = json.loads((out / "eval_predictions.json").read_text())
    assert list(evaluated) == [e["id"] for e in squad_rows("validation")[:8]]
    assert json.loads((out / "eval_nbest_predictions.json").read_text()).keys() == evaluated.keys()
    # prediction alone from a test file (no training or evaluation data), as transformers' run_qa allows
    alone = run_qa.main(
        [
            "--output_dir",
            str(tmp_path / "alone"),
            "--model_name_or_path",
            str(out),
            "--do_predict",
            "--test_file",
            str(run_qa.SQUAD["validation"]),
            "--max_predict_samples",
            "3",
            "--max_seq_length",
            "96",
            "--doc_stride",
            "32",
            "--disable_tqdm",
            "true",
        ]
    )
    assert (
        0 <= alone["predict_f1"] <= 100
        and len(json.loads((tmp_path / "alone" / "predict_predictions.json").read_text())) == 3
    )
    text, _ = card_of(tmp_path / "alone")  # a prediction-only card says what the run did, and nothing else
    assert "Not trained by this run: predicted with `examples/run_qa.py`" in text
    assert "| hyperparameter |" not in text and "training metric" not in text
    assert "`exact_match`: SQuAD exact match" in text  # each metric explained once
    model = AutoModelForQuestionAnswering.from_pretrained(out, trust_remote_code=True)
    assert type(model).__name__ == "VariantBertForQuestionAnswering"
    text, _ = card_of(out)
    assert "| exact_match |" in text and "squad_validation.json, split validation" in text


def test_qa_v2_from_squad_json_with_unanswerable_questions(tmp_path):
    data = json.loads(run_qa.SQUAD["validation"].read_text())
    qas = [qa for article in data["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    for qa in qas[::3]:
        qa["answers"], qa["is_impossible"] = [], True
    (tmp_path / "v2.json").write_text(json.dumps(data))
    argv = [
        "--output_dir",
        str(tmp_path / "out"),
        *FAST,
        "--max_steps",
        "2",
        "--max_seq_length",
        "96",
        "--train_file",
        str(tmp_path / "v2.json"),
        "--validation_split_percentage",
        "25",
    ]
    with pytest.raises(ValueError, match="has no answer; pass --version_2_with_negative"):
        run_qa.main(argv)
    metrics = run_qa.main([*argv, "--version_2_with_negative"])
    assert {"eval_exact", "eval_f1", "eval_HasAns_exact", "eval_NoAns_exact", "eval_best_f1"} <= set(metrics)
    info = json.loads((tmp_path / "out" / "training_info.json").read_text())
    assert info["evaluation"][0]["split"].startswith("validation: 25% of the train rows held out")


def test_text_to_text_on_named_columns_with_a_prefix_predicts(tmp_path):
    rows = [{"question": f"what is {a} plus {b}?", "answer": str(a + b)} for a in range(6) for b in range(6)]
    for name, part in (("train", rows[:24]), ("dev", rows[24:32]), ("test", rows[32:])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    out = tmp_path / "t2t"
    metrics = run_text_to_text.main(
        [
            "--output_dir",
            str(out),
            *FAST,
            "--max_steps",
            "12",
            "--learning_rate",
            "3e-3",
            "--max_source_length",
            "32",
            "--train_file",
            str(tmp_path / "train.jsonl"),
            "--validation_file",
            str(tmp_path / "dev.jsonl"),
            "--test_file",
            str(tmp_path / "test.jsonl"),
            "--source_column",
            "question",
            "--target_column",
            "answer",
            "--source_prefix",
            "add: ",
            "--eval_strategy",
            "steps",
            "--eval_steps",
            "12",
        ]
    )  # one evaluation before saving
    assert_learns(out, 0.6)
    assert 0 <= metrics["eval_accuracy"] <= 1 and math.isfinite(metrics["eval_loss"])
    assert len((out / "generated_predictions.txt").read_text().splitlines()) == 4
    info = json.loads((out / "training_info.json").read_text())
    assert info["training"]["source_prefix"] == "add: " and info["dataset"]["name"] == "train.jsonl"
    # the saved generation config is the model's own, not Seq2SeqTrainer's defaults (max_length 20 would make
    # generate(max_new_tokens=...) warn that both are set)
    assert "max_length" not in json.loads((out / "generation_config.json").read_text())
    model = AutoModelForSeq2SeqLM.from_pretrained(out, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(out)
    generated = model.generate(**tokenizer(["add: what is 1 plus 2?"], return_tensors="pt"), max_new_tokens=4)
    assert generated.shape[0] == 1
    text, _ = card_of(out)
    assert "model.generate(" in text and "pipeline(" not in text  # v5 has no text2text-generation pipeline


@pytest.mark.parametrize("labels", ["class_label", "integer"])
def test_text_to_text_predicts_an_unlabelled_test_split_without_scoring_it(tmp_path, labels):
    """GLUE's test splits mark every row unlabelled with -1 (a ClassLabel on the Hub, integers in a plain file): the
    rows are generated and written, nothing is scored, and the card names no prediction metric."""
    from datasets import ClassLabel, Dataset, Features, Value

    rows = rt_rows("train")
    names = ["negative", "positive"]
    label = ClassLabel(names=names) if labels == "class_label" else Value("int64")
    features = Features({"sentence": Value("string"), "label": label})
    for split, part, labelled in (
        ("train", rows[:24], True),
        ("dev", rows[24:32], True),
        ("test", rows[32:37], False),
    ):
        Dataset.from_dict(
            {
                "sentence": [r["sentence"] for r in part],
                "label": [names.index(r["label"]) if labelled else -1 for r in part],
            },
            features=features,
        ).to_parquet(tmp_path / f"{split}.parquet")
    out = tmp_path / "t2t"
    metrics = run_text_to_text.main(
        [
            "--output_dir",
            str(out),
            *FAST,
            "--max_steps",
            "2",
            "--max_source_length",
            "32",
            "--train_file",
            str(tmp_path / "train.parquet"),
            "--validation_file",
            str(tmp_path / "dev.parquet"),
            "--test_file",
            str(tmp_path / "test.parquet"),
            "--source_column",
            "sentence",
            "--target_column",
            "label",
        ]
    )
    assert len((out / "generated_predictions.txt").read_text().splitlines()) == 5
    assert "predict_accuracy" not in metrics and "predict_loss" not in metrics and "eval_accuracy" in metrics
    text, data = card_of(out)
    assert "predict_accuracy" not in text and "| accuracy |" in text
    assert all(r.metric_name != "predict_accuracy" for r in data.eval_results or [])


# ------------------------------------------------------------------------------------------ the loopback Hub
HUB_RUNS = """
import json, sys
sys.path.insert(0, {examples!r})
import run_classification, run_qa
fast = {fast!r}
runs = {{
    "rte": (run_classification, ["--task_name", "rte", "--dataset_name", "tester/glue", "--dataset_config_name",
                                 "rte", "--do_train", "--do_eval", "--do_predict"]),
    "stsb": (run_classification, ["--task_name", "stsb", "--dataset_name", "tester/glue", "--dataset_config_name",
                                  "stsb"]),
    "mnli": (run_classification, ["--task_name", "mnli", "--dataset_name", "tester/glue", "--do_train", "--do_eval",
                                  "--do_predict"]),
    "squad_v2": (run_qa, ["--dataset_name", "tester/squad_v2", "--version_2_with_negative", "--do_train",
                          "--do_eval", "--do_predict", "--max_predict_samples", "4"]),
    "no config": (run_classification, ["--task_name", "rte", "--dataset_name", "tester/glue",
                                       "--dataset_config_name", "nope"]),
}}
for name, (script, argv) in runs.items():
    try:
        metrics = script.main(["--output_dir", {out!r} + "/" + name.replace(" ", "_"), *fast, *argv])
    except ValueError as error:
        metrics = {{"error": str(error)}}
    print("RESULT " + json.dumps({{name: metrics}}))
"""


def test_glue_and_squad_dataset_repositories_on_the_loopback_hub(hub, tmp_path):
    """`--dataset_name tester/glue --dataset_config_name <task>` for a classification task (rte), stsb (regression)
    and mnli (matched and mismatched), and SQuAD v2 with unanswerable questions, through the loopback Hub."""
    hub.create_dataset_repo("tester/glue", glue_tables())
    rows = squad_rows("train")[:24] + squad_rows("validation")[:8]
    for row in rows[::4]:
        row["answers"] = {"text": [], "answer_start": []}
    columns = lambda part: {k: [r[k] for r in part] for k in rows[0]}  # noqa: E731
    hub.create_dataset_repo(
        "tester/squad_v2",
        {"squad_v2": {"train": columns(rows[:24]), "validation": columns(rows[24:]), "test": columns(rows[24:])}},
    )
    fast = [*FAST, "--max_steps", "2", "--max_seq_length", "64"]
    code = HUB_RUNS.format(examples=str(EXAMPLES), fast=fast, out=str(tmp_path))
    proc = run_with_hub(hub, tmp_path / "hf_home", [sys.executable, "-c", code])
    results = {
        k: v
        for line in proc.stdout.splitlines()
        if line.startswith("RESULT ")
        for k, v in json.loads(line[len("RESULT ") :]).items()
    }

    assert set(results["rte"]) >= {"eval_accuracy", "predict_samples"}
    assert len((tmp_path / "rte" / "predict_results_rte.txt").read_text().splitlines()) == 7
    assert {"eval_pearson", "eval_spearmanr"} <= set(results["stsb"]), results["stsb"]
    config = json.loads((tmp_path / "stsb" / "config.json").read_text())
    assert len(config["id2label"]) == 1 and config["problem_type"] == "regression"
    mnli = results["mnli"]
    assert {"eval_accuracy", "eval_accuracy_mm"} <= set(mnli)
    assert (mnli["eval_samples"], mnli["eval_samples_mm"]) == (8, 10)
    for name in ("predict_results_mnli.txt", "predict_results_mnli-mm.txt"):
        assert len((tmp_path / "mnli" / name).read_text().splitlines()) == 7
    assert {"eval_exact", "eval_HasAns_f1", "eval_NoAns_exact", "eval_best_exact"} <= set(results["squad_v2"])
    assert len(json.loads((tmp_path / "squad_v2" / "predict_predictions.json").read_text())) == 4
    assert results["no config"]["error"].startswith("The dataset tester/glue has no configuration 'nope'")

    # The cards: Hub ids only in `datasets`, a model-index naming each metric's config and split.
    text, data = card_of(tmp_path / "mnli")
    assert data.datasets == ["tester/glue"]
    splits = {(r.metric_type, r.dataset_type, r.dataset_config, r.dataset_split) for r in data.eval_results}
    assert {
        ("accuracy", "tester/glue", "mnli", "validation_matched"),
        ("accuracy", "tester/glue", "mnli", "validation_mismatched"),
    } <= splits
    assert "| accuracy_mm |" in text and "tester/glue (mnli), split validation_mismatched" in text


# ----------------------------------------------------------------------------------------------------- bad input
BAD_INPUT = {
    "missing file": (
        run_classification,
        ["--train_file", "nowhere.csv", "--validation_file", "nowhere.csv"],
        FileNotFoundError,
        "--train_file nowhere.csv: no such file",
    ),
    "missing column": (run_classification, ["--text_column", "review"], ValueError, "no column 'review'"),
    "missing label column": (run_classification, ["--label_column", "stars"], ValueError, "pass --label_column"),
    "unknown task": (
        run_classification,
        ["--task_name", "glue"],
        ValueError,
        "Unknown --task_name 'glue': the GLUE tasks are cola, sst2, mrpc",
    ),
    "too long": (run_classification, ["--max_seq_length", "512"], ValueError, "max_position_embeddings=128"),
    "too long for a synthesizer": (
        run_classification,
        ["--preset", "t5-tiny-synthesizer-dense", "--max_seq_length", "256"],
        ValueError,
        "synthesizer_max_position=128",
    ),
    "unknown preset": (run_classification, ["--preset", "bert-huge-talking-heads"], ValueError, "Unknown preset"),
    "predict without test data": (
        run_classification,
        ["--do_train", "--do_predict"],
        ValueError,
        "--do_predict needs test data",
    ),
    "test file without --do_predict": (
        run_classification,
        ["--do_train", "--test_file", "x.csv"],
        ValueError,
        "add --do_predict",
    ),
    "unknown metric": (
        run_classification,
        ["--metric_name", "/nowhere/metric.py"],
        ValueError,
        "--metric_name /nowhere/metric.py: evaluate.load failed",
    ),
    "streaming": (run_classification, ["--streaming"], ValueError, "leave out --streaming"),
    "split percentage": (
        run_qa,
        ["--validation_split_percentage", "150"],
        ValueError,
        "--validation_split_percentage must be in [0, 100), got 150",
    ),
    "qa missing file": (
        run_qa,
        ["--train_file", "nowhere.json", "--validation_file", "nowhere.json"],
        FileNotFoundError,
        "no such file",
    ),
    "qa missing column": (run_qa, ["--question_column", "query"], ValueError, "no column 'query'"),
    "qa too long": (run_qa, ["--max_seq_length", "384"], ValueError, "max_position_embeddings=128"),
    "qa stride": (run_qa, ["--doc_stride", "128"], ValueError, "--doc_stride"),
    "t2t missing column": (run_text_to_text, ["--target_column", "answer"], ValueError, "no column 'answer'"),
    "t2t too long": (
        run_text_to_text,
        ["--preset", "t5-tiny-synthesizer-random", "--max_source_length", "200"],
        ValueError,
        "--max_source_length=200 is longer than this model takes",
    ),
    "t2t not t5": (run_text_to_text, ["--preset", "bert-tiny-dot-product"], ValueError, "fine-tunes T5 variants"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_fails_clearly_before_training(case, tmp_path):
    script, argv, error, message = BAD_INPUT[case]
    with pytest.raises(error, match=re.escape(message)):
        script.main(["--output_dir", str(tmp_path / "out"), *FAST, "--max_steps", "2", *argv])
    assert not (tmp_path / "out" / "trainer_state.json").exists()


def test_a_config_the_local_dataset_lacks_and_a_task_without_its_columns(tmp_path):
    folder = dataset_folder(tmp_path / "glue", {"rte": glue_tables()["rte"]})
    argv = ["--output_dir", str(tmp_path / "out"), *FAST, "--max_steps", "2", "--dataset_name", str(folder)]
    with pytest.raises(ValueError, match=r"has no configuration 'cola': pass --dataset_config_name one of \['rte'\]"):
        run_classification.main([*argv, "--task_name", "cola"])
    with pytest.raises(ValueError, match="has no column 'question1'.*pass --text_column"):
        run_classification.main([*argv, "--task_name", "qqp", "--dataset_config_name", "rte"])


def test_qa_file_with_a_misplaced_answer_is_refused(tmp_path):
    data = json.loads(run_qa.SQUAD["validation"].read_text())
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 1
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="fix `answer_start`"):
        run_qa.main(
            [
                "--output_dir",
                str(tmp_path / "out"),
                *FAST,
                "--max_steps",
                "2",
                "--train_file",
                str(run_qa.SQUAD["train"]),
                "--validation_file",
                str(tmp_path / "bad.json"),
            ]
        )


def test_warm_start_from_a_vanilla_bert_and_resume(tmp_path):
    """A transformers BERT folder + --attention_type: a function-preserving talking-heads start; then a second run
    with `--resume_from_checkpoint last` continues from the saved checkpoint."""
    from transformers import BertConfig, BertForMaskedLM

    tokenizer = train_tokenizer("wordpiece", 8000, corpus=CORPUS)
    BertForMaskedLM(
        BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
            max_position_embeddings=64,
        )
    ).save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    argv = [
        "--output_dir",
        str(tmp_path / "out"),
        *FAST,
        "--model_name_or_path",
        str(tmp_path / "bert"),
        "--attention_type",
        "talking_heads",
        "--max_train_samples",
        "16",
        "--max_eval_samples",
        "8",
        "--max_seq_length",
        "64",
        "--save_strategy",
        "steps",
        "--save_steps",
        "2",
    ]
    run_classification.main([*argv, "--max_steps", "2"])
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["model_type"], config["attention_type"], config["talking_heads_init"]) == (
        "variant_bert",
        "talking_heads",
        "identity",
    )
    run_classification.main([*argv, "--max_steps", "4", "--resume_from_checkpoint", "last"])
    steps = [
        entry["step"]
        for entry in json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
        if "loss" in entry
    ]
    assert steps == [1, 2, 3, 4]  # steps 1-2 restored from checkpoint-2's state, 3-4 trained after resuming
    # a local folder is never the card's base_model (the Hub cannot resolve it); the text names where it started
    info = json.loads((tmp_path / "out" / "training_info.json").read_text())
    assert info["base_model"] is None and info["started_from"] == str(tmp_path / "bert")
    text, data = card_of(tmp_path / "out")
    assert data.base_model is None and f"starting from `{tmp_path / 'bert'}`" in text
    assert "`train_runtime (s)`" not in text and "| train_runtime (s) |" in text and "| world_size | 1 |" in text
