"""The fine-tuning example scripts: classification, extractive QA and T5 text-to-text, run in-process on tiny presets
for a few steps; their data, metrics and QA post-processing; clear errors for bad input before any training."""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import (
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import run_classification  # noqa: E402
import run_qa  # noqa: E402
import run_text_to_text  # noqa: E402
from example_utils import project_tokenizer  # noqa: E402

# A few steps, every step logged, nothing saved but the final model.
FAST = ["--logging_steps", "1", "--eval_strategy", "no", "--save_strategy", "no", "--disable_tqdm", "true",
        "--per_device_train_batch_size", "8", "--seed", "0"]


def logged_losses(output_dir) -> list[float]:
    history = json.loads((Path(output_dir) / "trainer_state.json").read_text())["log_history"]
    return [entry["loss"] for entry in history if "loss" in entry]


def assert_learns(output_dir, factor: float) -> None:
    """Every step's loss is finite, and the last four average below `factor` times the first four."""
    losses = logged_losses(output_dir)
    assert len(losses) >= 8 and all(math.isfinite(loss) for loss in losses)
    assert np.mean(losses[-4:]) < factor * np.mean(losses[:4]), losses


# ---------------------------------------------------------------------------------------------------------- data
def test_embedded_data_is_balanced_and_answers_sit_at_their_offsets():
    for split in ("train", "validation"):
        rows = run_classification.read_table(run_classification.RT_POLARITY[split], "--train_file")
        labels = [r["label"] for r in rows]
        assert labels.count("positive") == labels.count("negative") > 50
        assert all(r["sentence"].strip() for r in rows)
        examples = run_qa.read_squad(run_qa.SQUAD[split], "--train_file", None)
        run_qa.check_answers(examples, split)  # raises if an answer is not at answer_start
        assert len(examples) > 30 and len({e["id"] for e in examples}) == len(examples)
    train = {r["sentence"] for r in run_classification.read_table(run_classification.RT_POLARITY["train"], "x")}
    validation = run_classification.read_table(run_classification.RT_POLARITY["validation"], "x")
    assert not train & {r["sentence"] for r in validation}
    contexts = {e["context"] for e in run_qa.read_squad(run_qa.SQUAD["train"], "x", None)}
    assert not contexts & {e["context"] for e in run_qa.read_squad(run_qa.SQUAD["validation"], "x", None)}


def test_text_columns_found_as_run_glue_finds_them(tmp_path):
    from types import SimpleNamespace

    args = SimpleNamespace(text_column=None, text_pair_column=None)
    assert run_classification.text_columns([{"sentence1": "a", "sentence2": "b", "label": 0}], args, "f") == (
        "sentence1", "sentence2")
    assert run_classification.text_columns([{"idx": 1, "sentence": "a", "label": 0}], args, "f") == ("sentence", None)
    with pytest.raises(ValueError, match="--text_column"):
        run_classification.text_columns([{"review": "a", "label": 0}], args, "f")
    path = tmp_path / "pairs.jsonl"  # JSON lines, integer labels sorted numerically
    path.write_text("\n".join(json.dumps({"premise": p, "hypothesis": h, "label": y})
                              for p, h, y in [("a cat", "an animal", 10), ("a cat", "a dog", 2)]))
    rows = run_classification.read_table(path, "--train_file")
    assert run_classification.text_columns(rows, args, path) == ("premise", "hypothesis")
    assert run_classification.label_names(r["label"] for r in rows) == ["2", "10"]


def test_classification_metrics_known_cases():
    metrics = run_classification.classification_metrics
    assert metrics([1, 1, 0, 0], [1, 0, 0, 0], 2) == {"accuracy": 0.75, "f1": pytest.approx(2 / 3)}
    assert metrics([0, 0], [1, 1], 2) == {"accuracy": 0.0, "f1": 0.0}
    # three classes: per-class F1 1, 4/5 and 0, macro-averaged
    assert metrics([0, 1, 1, 1], [0, 1, 1, 2], 3) == {"accuracy": 0.75, "f1": pytest.approx((1 + 0.8 + 0) / 3)}


# -------------------------------------------------------------------------------------------------------- scripts
def test_classification_trains_saves_and_reloads(tmp_path):
    out = tmp_path / "cls"
    metrics = run_classification.main(
        ["--output_dir", str(out), *FAST, "--max_steps", "24", "--learning_rate", "3e-3", "--warmup_steps", "0",
         "--max_train_samples", "16", "--max_eval_samples", "24", "--max_seq_length", "64"])
    assert_learns(out, 0.5)  # 16 sentences, 12 epochs: the model fits them
    assert 0 <= metrics["eval_accuracy"] <= 1 and 0 <= metrics["eval_f1"] <= 1 and math.isfinite(metrics["eval_loss"])
    assert json.loads((out / "all_results.json").read_text())["eval_accuracy"] == metrics["eval_accuracy"]
    assert json.loads((out / "training_info.json").read_text())["task"] == "text-classification"

    # The saved model is the trained one: reloaded, it scores the validation sentences as the run did.
    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    rows = run_classification.read_table(run_classification.RT_POLARITY["validation"], "x")[:24]
    assert model.config.id2label == {0: "negative", 1: "positive"}
    with torch.no_grad():
        logits = model(**tokenizer([r["sentence"] for r in rows], padding=True, return_tensors="pt")).logits
    predicted = [model.config.id2label[i] for i in logits.argmax(-1).tolist()]
    assert np.mean([p == r["label"] for p, r in zip(predicted, rows)]) == pytest.approx(metrics["eval_accuracy"])


def test_qa_trains_saves_and_reloads(tmp_path):
    out = tmp_path / "qa"
    metrics = run_qa.main(
        ["--output_dir", str(out), *FAST, "--max_steps", "12", "--learning_rate", "1e-3", "--warmup_steps", "0",
         "--max_train_samples", "16", "--max_eval_samples", "8", "--max_seq_length", "96", "--doc_stride", "32"])
    assert_learns(out, 0.8)
    assert 0 <= metrics["eval_exact_match"] <= 100 and 0 <= metrics["eval_f1"] <= 100
    assert metrics["eval_exact_match"] <= metrics["eval_f1"] + 1e-9
    model = AutoModelForQuestionAnswering.from_pretrained(out, trust_remote_code=True)
    assert type(model).__name__ == "VariantBertForQuestionAnswering"


def test_text_to_text_trains_saves_reloads_and_generates(tmp_path):
    out = tmp_path / "t2t"
    metrics = run_text_to_text.main(
        ["--output_dir", str(out), *FAST, "--max_steps", "12", "--max_train_samples", "16", "--max_eval_samples", "8",
         "--max_source_length", "64"])
    assert_learns(out, 0.6)
    assert 0 <= metrics["eval_accuracy"] <= 1 and math.isfinite(metrics["eval_loss"])
    model = AutoModelForSeq2SeqLM.from_pretrained(out, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(out)
    generated = model.generate(**tokenizer(["sst2 sentence: a gem ."], return_tensors="pt"), max_new_tokens=4)
    assert generated.shape[0] == 1
    assert json.loads((out / "training_info.json").read_text())["training"]["source_prefix"] == "sst2 sentence: "


# ----------------------------------------------------------------------------------------------------- bad input
BAD_INPUT = {
    "missing file": (run_classification, ["--train_file", "nowhere.csv", "--validation_file", "nowhere.csv"],
                     FileNotFoundError, "--train_file nowhere.csv: no such file"),
    "missing column": (run_classification, ["--text_column", "review"], ValueError, "no column 'review'"),
    "missing label column": (run_classification, ["--label_column", "stars"], ValueError, "pass --label_column"),
    "too long": (run_classification, ["--max_seq_length", "512"], ValueError, "max_position_embeddings=128"),
    "too long for a synthesizer": (run_classification, ["--preset", "t5-tiny-synthesizer-dense", "--max_seq_length",
                                   "256"], ValueError, "synthesizer_max_position=128"),
    "unknown preset": (run_classification, ["--preset", "bert-huge-talking-heads"], ValueError, "Unknown preset"),
    "qa missing file": (run_qa, ["--train_file", "nowhere.json", "--validation_file", "nowhere.json"],
                        FileNotFoundError, "no such file"),
    "qa too long": (run_qa, ["--max_seq_length", "384"], ValueError, "max_position_embeddings=128"),
    "qa stride": (run_qa, ["--doc_stride", "128"], ValueError, "--doc_stride"),
    "t2t missing column": (run_text_to_text, ["--target_column", "answer"], ValueError, "no column 'answer'"),
    "t2t too long": (run_text_to_text, ["--preset", "t5-tiny-synthesizer-random", "--max_source_length", "200"],
                     ValueError, "--max_source_length=200 is longer than this model takes"),
    "t2t not t5": (run_text_to_text, ["--preset", "bert-tiny-dot-product"], ValueError, "fine-tunes T5 variants"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_fails_clearly_before_training(case, tmp_path):
    script, argv, error, message = BAD_INPUT[case]
    with pytest.raises(error, match=message):
        script.main(["--output_dir", str(tmp_path / "out"), *FAST, "--max_steps", "2", *argv])
    assert not (tmp_path / "out" / "trainer_state.json").exists()


def test_qa_file_with_a_misplaced_answer_is_refused(tmp_path):
    data = json.loads(run_qa.SQUAD["validation"].read_text())
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 1
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="fix `answer_start`"):
        run_qa.main(["--output_dir", str(tmp_path / "out"), *FAST, "--max_steps", "2", "--train_file",
                     str(run_qa.SQUAD["train"]), "--validation_file", str(tmp_path / "bad.json")])


# ------------------------------------------------------------------------------------------ QA post-processing/EM/F1
@pytest.mark.parametrize("max_seq_length,doc_stride", [(128, 32), (48, 16)])
def test_gold_logits_recover_the_gold_answers(max_seq_length, doc_stride):
    """Logits peaked at the windows' gold positions give back every gold answer's exact text, also when contexts
    are cut into many overlapping windows (48 tokens: most answers are in some windows and not in others)."""
    tokenizer = project_tokenizer("wordpiece", 8000)
    examples = run_qa.read_squad(run_qa.SQUAD["validation"], "x", None)
    features, windows = run_qa.prepare_features(examples, tokenizer, max_seq_length, doc_stride)
    assert len(features) > len(examples)  # several windows per context
    length = max(len(f["input_ids"]) for f in features)
    start_logits, end_logits = np.zeros((len(features), length)), np.zeros((len(features), length))
    for i, feature in enumerate(features):
        if feature["start_positions"]:  # the window holds the answer
            start_logits[i, feature["start_positions"]] = end_logits[i, feature["end_positions"]] = 10.0
    answers = run_qa.postprocess_predictions(examples, windows, start_logits, end_logits)
    assert answers == {e["id"]: e["answers"]["text"][0] for e in examples}
    assert run_qa.squad_metrics(answers, examples) == {"exact_match": 100.0, "f1": 100.0}


def test_squad_exact_match_and_f1_known_cases():
    assert run_qa.normalize_answer("The  Seine, river!") == "seine river"
    assert run_qa.exact_match("An apple.", "apple") == 1.0
    assert run_qa.exact_match("apples", "apple") == 0.0
    assert run_qa.f1_score("the cat sat", "cat sat down") == pytest.approx(0.8)  # P = 2/2, R = 2/3
    assert run_qa.f1_score("dog", "cat") == 0.0
    examples = [{"id": "a", "answers": {"text": ["Seine", "Epte"]}},
                {"id": "b", "answers": {"text": ["King Charles III"]}}]
    predictions = {"a": "the river Seine", "b": "Charles III"}  # a: best gold Seine, P 1/2 R 1 -> 2/3; b: 4/5
    assert run_qa.squad_metrics(predictions, examples) == {
        "exact_match": 0.0, "f1": pytest.approx(100 * (2 / 3 + 0.8) / 2)}
    assert run_qa.squad_metrics({"a": "Epte", "b": "king charles iii"}, examples) == {"exact_match": 100.0,
                                                                                     "f1": 100.0}


def test_warm_start_from_a_vanilla_bert_and_resume(tmp_path):
    """A transformers BERT folder + --attention_type: a function-preserving talking-heads start; then a second run
    with `--resume_from_checkpoint last` continues from the saved checkpoint."""
    from transformers import BertConfig, BertForMaskedLM

    tokenizer = project_tokenizer("wordpiece", 8000)
    BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=37, max_position_embeddings=64)).save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    argv = ["--output_dir", str(tmp_path / "out"), *FAST, "--model_name_or_path", str(tmp_path / "bert"),
            "--attention_type", "talking_heads", "--max_train_samples", "16", "--max_eval_samples", "8",
            "--max_seq_length", "64", "--save_strategy", "steps", "--save_steps", "2"]
    run_classification.main([*argv, "--max_steps", "2"])
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["model_type"], config["attention_type"], config["talking_heads_init"]) == (
        "variant_bert", "talking_heads", "identity")
    run_classification.main([*argv, "--max_steps", "4", "--resume_from_checkpoint", "last"])
    steps = [entry["step"] for entry in json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
             if "loss" in entry]
    assert steps == [1, 2, 3, 4]  # steps 1-2 restored from checkpoint-2's state, 3-4 trained after resuming
