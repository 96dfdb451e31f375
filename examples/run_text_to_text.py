"""Fine-tune a T5 variant on a text-to-text task with `Seq2SeqTrainer`, evaluating on generated text.

    python examples/run_text_to_text.py         # movie-review sentiment as text, t5-tiny-talking-heads
    python examples/run_text_to_text.py --model_name_or_path path/to/t5 --attention_type talking_heads \
        --train_file train.csv --validation_file dev.csv --source_column question --target_column answer \
        --source_prefix "question: "

With no data arguments it learns "sst2 sentence: <review sentence>" -> "positive" / "negative" on the 436 movie-review
sentences shipped in examples/data/ (the T5 paper's SST-2 format) and evaluates on 108 others. `--train_file`/
`--validation_file` take CSV, TSV, JSON (a list of objects) or JSON lines with a source and a target column
(`--source_column`, `--target_column`); `--source_prefix` is put before every source. Without
`--model_name_or_path` the model is built from a t5-* `--preset` with the project's Unigram tokenizer. Evaluation
generates (`--predict_with_generate`, greedy or `--generation_num_beams`) and reports `accuracy`, the share of
generated texts equal to their target (surrounding spaces ignored): exact match of the whole output, which is the
classification accuracy for label words. Every `Seq2SeqTrainingArguments` option passes through (--bf16,
--torch_compile, --gradient_checkpointing, --push_to_hub, ...); `--resume_from_checkpoint last` resumes. The output
folder loads with `AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True)`.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from transformers import (
    DataCollatorForSeq2Seq,
    HfArgumentParser,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    set_seed,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from example_utils import (  # noqa: E402
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
from run_classification import (  # noqa: E402
    RT_POLARITY,
    RT_POLARITY_INFO,
    read_table,
    require_columns,
)

SST2_PREFIX = "sst2 sentence: "  # the T5 paper's input format for SST-2
DEFAULTS = dict(
    preset="t5-tiny-talking-heads", output_dir="outputs/text_to_text", num_train_epochs=10,
    per_device_train_batch_size=32, per_device_eval_batch_size=64, learning_rate=1e-3, warmup_steps=0.1,
    weight_decay=0.01, eval_strategy="epoch", logging_steps=10, save_strategy="epoch", save_total_limit=1,
    predict_with_generate=True, report_to="none", seed=42,
)


@dataclass
class DataArguments:
    train_file: str | None = field(default=None, metadata={
        "help": "CSV, TSV, JSON or JSON-lines file of source/target pairs. Default: the embedded movie reviews."})
    validation_file: str | None = field(default=None, metadata={
        "help": "Same format and columns. Required with --train_file; default: the embedded validation sentences."})
    source_column: str = field(default="sentence", metadata={"help": "Column of the input text."})
    target_column: str = field(default="label", metadata={"help": "Column of the output text."})
    source_prefix: str | None = field(default=None, metadata={
        "help": f"Text put before every source. Default: {SST2_PREFIX!r} on the embedded data, none on files."})
    max_source_length: int = field(default=128, metadata={
        "help": "Source tokens after truncation, </s> included; at most the model's limit."})
    max_target_length: int = field(default=16, metadata={
        "help": "Target tokens after truncation, </s> included; also the generation length unless "
                "--generation_max_length is given."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation examples."})


def encode(rows, data_args, prefix: str, tokenizer) -> list[dict]:
    sources = tokenizer([prefix + str(r[data_args.source_column]) for r in rows], truncation=True,
                        max_length=data_args.max_source_length)
    targets = tokenizer(text_target=[str(r[data_args.target_column]) for r in rows], truncation=True,
                        max_length=data_args.max_target_length)
    return [{"input_ids": sources["input_ids"][i], "attention_mask": sources["attention_mask"][i],
             "labels": targets["input_ids"][i]} for i in range(len(rows))]


def text_accuracy(predicted: list[str], targets: list[str]) -> float:
    """The share of outputs equal to their target, surrounding spaces ignored."""
    return float(np.mean([p.strip() == t.strip() for p, t in zip(predicted, targets)]))


def main(argv=None) -> dict:
    parser = HfArgumentParser((ModelArguments, DataArguments, Seq2SeqTrainingArguments))
    parser.set_defaults(**DEFAULTS)
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(argv)

    # Everything that can be wrong with the input is checked before any training starts.
    family = family_of(model_args.model_name_or_path, model_args.preset)
    if family != "t5":
        raise ValueError(f"run_text_to_text.py fine-tunes T5 variants, not {family}: pass a t5-* --preset or a T5 "
                         "checkpoint (for BERT/ALBERT classification use run_classification.py).")
    if bool(data_args.train_file) != bool(data_args.validation_file):
        raise ValueError("Pass both --train_file and --validation_file (or neither, for the embedded data).")
    train_path = data_args.train_file or RT_POLARITY["train"]
    eval_path = data_args.validation_file or RT_POLARITY["validation"]
    train_rows = read_table(train_path, "--train_file")[: data_args.max_train_samples]
    eval_rows = read_table(eval_path, "--validation_file")[: data_args.max_eval_samples]
    for rows, path in ((train_rows, train_path), (eval_rows, eval_path)):
        require_columns(rows, [data_args.source_column, data_args.target_column], path,
                        "pass --source_column and --target_column")
    prefix = data_args.source_prefix
    if prefix is None:
        prefix = "" if data_args.train_file else SST2_PREFIX
    if not training_args.predict_with_generate:
        raise ValueError("Evaluation scores generated text: keep --predict_with_generate (the default).")
    training_args.generation_max_length = training_args.generation_max_length or data_args.max_target_length

    tokenizer = load_tokenizer(model_args, family)
    set_seed(training_args.seed)  # the same initial weights on every process and every run
    model = load_or_build_model("ForConditionalGeneration", model_args.model_name_or_path, model_args.preset,
                                tokenizer, model_args.attention_type,
                                parse_config_overrides(model_args.config_overrides))
    check_max_length(model.config, data_args.max_source_length, "--max_source_length")
    check_max_length(model.config, training_args.generation_max_length, "--generation_max_length")
    check_max_length(model.config, data_args.max_target_length, "--max_target_length")
    train_set = encode(train_rows, data_args, prefix, tokenizer)
    eval_set = encode(eval_rows, data_args, prefix, tokenizer)

    def compute_metrics(prediction):
        # Generated ids are padded with -100 across batches, labels wherever they are not predicted.
        predicted = np.where(prediction.predictions == -100, tokenizer.pad_token_id, prediction.predictions)
        targets = np.where(prediction.label_ids == -100, tokenizer.pad_token_id, prediction.label_ids)
        return {"accuracy": text_accuracy(tokenizer.batch_decode(predicted, skip_special_tokens=True),
                                          tokenizer.batch_decode(targets, skip_special_tokens=True))}

    trainer = Seq2SeqTrainer(
        model=model, args=training_args, train_dataset=train_set, eval_dataset=eval_set,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model), processing_class=tokenizer,
        compute_metrics=compute_metrics,
    )
    train_result = trainer.train(resume_from_checkpoint=resume_checkpoint(training_args))
    return finish(trainer, train_result, model_args, __file__, "text2text-generation",
                  data_file_info(data_args.train_file, RT_POLARITY_INFO),
                  max_source_length=data_args.max_source_length, max_target_length=data_args.max_target_length,
                  source_prefix=prefix)

if __name__ == "__main__":
    main()
