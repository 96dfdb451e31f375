"""Masked-LM pretraining of the BERT and ALBERT variants, with optional whole-word masking and next-sentence
(BERT) or sentence-order (ALBERT) prediction, from a preset or a checkpoint (warm start), with `Trainer`.

    python examples/run_pretraining.py                       # the main job: a small talking-heads BERT, a few minutes
    python examples/run_pretraining.py --preset albert-mini-synthesizer-random --sentence_objective sop
    python examples/run_pretraining.py --model_name_or_path path/to/bert --attention_type talking_heads
    torchrun --nproc_per_node 2 examples/run_pretraining.py ...   # or: accelerate launch examples/run_pretraining.py

With no data arguments it trains on The Devil's Dictionary (shipped in examples/data/) with a WordPiece tokenizer
trained on it once and cached. `--train_file` takes any text file: documents separated by blank lines, one paragraph
per line. Every `TrainingArguments` option passes through (--bf16, --torch_compile, --gradient_checkpointing,
--push_to_hub, ...). The output folder loads with `AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=True)`.
"""

import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import HfArgumentParser, Trainer, TrainingArguments, set_seed

from hf_attn_variants.admin import AdminProfilingCallback, admin_closed_form

sys.path.insert(0, str(Path(__file__).resolve().parent))
from example_utils import (  # noqa: E402
    CORPUS_INFO,
    CorpusArguments,
    EpochCallback,
    MaskedLMCollator,
    ModelArguments,
    StepTimer,
    check_max_length,
    corpus_documents,
    data_file_info,
    family_of,
    finish,
    load_or_build_model,
    load_tokenizer,
    parse_config_overrides,
    resume_checkpoint,
    split_sentences,
)

DEFAULTS = dict(  # the main job; every one can be overridden on the command line
    preset="bert-mini-talking-heads", output_dir="outputs/bert-mini-talking-heads", max_steps=300,
    per_device_train_batch_size=16, max_seq_length=64,
    per_device_eval_batch_size=64, learning_rate=1e-3, warmup_steps=30, weight_decay=0.01, lr_scheduler_type="linear",
    eval_strategy="steps", eval_steps=50, logging_steps=10, save_strategy="steps", save_steps=200, save_total_limit=1,
    report_to="none", seed=42,
)


@dataclass
class DataArguments(CorpusArguments):
    max_seq_length: int = field(default=64, metadata={"help": "Tokens per sequence, [CLS] and [SEP] included."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens to predict."})
    whole_word_masking: bool = field(default=False, metadata={
        "help": "Mask whole words (a word's WordPiece continuations with it)."})
    sentence_objective: str = field(default="none", metadata={
        "help": "none (masked LM only), nsp (BERT's next-sentence prediction) or sop (ALBERT's sentence-order "
                "prediction); nsp/sop train the ForPreTraining head."})


def tokenize_sentences(documents, tokenizer):
    """Every document as a list of sentences, each a list of token ids (no special tokens)."""
    return [[tokenizer(s, add_special_tokens=False)["input_ids"] for p in doc for s in split_sentences(p)]
            for doc in documents]


def packed_examples(documents, tokenizer, max_seq_length):
    """Masked-LM only: the token stream of all documents cut into [CLS] x [SEP] blocks of max_seq_length."""
    stream = [t for doc in documents for sentence in doc for t in sentence]
    size = max_seq_length - 2
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    return [{"input_ids": [cls, *stream[i : i + size], sep]} for i in range(0, len(stream) - size + 1, size)]


def pair_examples(documents, tokenizer, max_seq_length, objective, seed):
    """Segment pairs [CLS] A [SEP] B [SEP] cut from consecutive sentences (BERT's create_pretraining_data).

    nsp: label 1 when B is a random span from elsewhere in the corpus (half of the pairs), 0 when it follows A.
    sop: label 1 when A and B are swapped (half of the pairs), 0 in their original order.
    """
    rng = random.Random(seed)
    sentences = [s for doc in documents for s in doc if s]
    budget = max_seq_length - 3
    examples, chunk, length = [], [], 0
    for index, sentence in enumerate(sentences):
        chunk.append(sentence)
        length += len(sentence)
        if length < budget and index < len(sentences) - 1:
            continue
        tokens = [t for s in chunk for t in s]
        if len(chunk) > 1:
            cut = sum(len(s) for s in chunk[: rng.randint(1, len(chunk) - 1)])
        else:
            cut = len(tokens) // 2
        first, second = tokens[:cut], tokens[cut:]
        label = int(rng.random() < 0.5)
        if objective == "nsp" and label:
            start = (index + rng.randint(len(sentences) // 4, 3 * len(sentences) // 4)) % len(sentences)
            second = [t for s in sentences[start : start + len(chunk)] for t in s]
        elif objective == "sop" and label:
            first, second = second, first
        while len(first) + len(second) > budget:  # trim the longer side, from a random end
            side = first if len(first) > len(second) else second
            del side[0 if rng.random() < 0.5 else -1]
        if first and second:
            ids = [tokenizer.cls_token_id, *first, tokenizer.sep_token_id, *second, tokenizer.sep_token_id]
            types = [0] * (len(first) + 2) + [1] * (len(second) + 1)
            key = "next_sentence_label" if objective == "nsp" else "sentence_order_label"
            examples.append({"input_ids": ids, "token_type_ids": types, key: label})
        chunk, length = [], 0
    return examples


def build_examples(documents, tokenizer, data_args, seed):
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise ValueError("The tokenizer has no [CLS]/[SEP] tokens: BERT-style pretraining needs a BERT-style "
                         "tokenizer (pass --tokenizer_name, or leave it out for the project's WordPiece tokenizer).")
    documents = tokenize_sentences(documents, tokenizer)
    if data_args.sentence_objective == "none":
        examples = packed_examples(documents, tokenizer, data_args.max_seq_length)
    else:
        examples = pair_examples(documents, tokenizer, data_args.max_seq_length, data_args.sentence_objective, seed)
    if not examples:
        raise ValueError(f"The data gives no sequence of {data_args.max_seq_length} tokens: use more text or a "
                         "smaller --max_seq_length.")
    return examples


def compute_metrics(prediction):
    """Masked-LM loss and perplexity (and the sentence task's accuracy) from the per-batch sums below."""
    (nll, count, *sentence), _ = prediction.predictions, prediction.label_ids
    metrics = {"mlm_loss": float(nll.sum() / count.sum())}
    metrics["perplexity"] = math.exp(min(metrics["mlm_loss"], 50.0))
    if sentence:
        metrics["sentence_accuracy"] = float(sentence[0].sum() / sentence[1].sum())
    return metrics


def reduce_logits(logits, labels):
    """Keep per-batch sums, not [batch, seq, vocab] logits, for `compute_metrics`."""
    if isinstance(labels, (tuple, list)):
        mlm_labels, sentence_labels = labels
    else:
        mlm_labels, sentence_labels = labels, None
    mlm_logits = logits[0] if isinstance(logits, (tuple, list)) else logits
    nll = torch.nn.functional.cross_entropy(mlm_logits.flatten(0, 1).float(), mlm_labels.flatten(), reduction="sum")
    outputs = [nll.reshape(1), mlm_labels.ne(-100).sum().reshape(1)]
    if sentence_labels is not None:
        correct = (logits[1].argmax(-1) == sentence_labels).sum()
        outputs += [correct.reshape(1), torch.tensor([sentence_labels.numel()], device=correct.device)]
    return tuple(outputs)


def main(argv=None) -> dict:
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    parser.set_defaults(**DEFAULTS)
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(argv)

    # Everything that can be wrong with the input is checked before any training starts.
    family = family_of(model_args.model_name_or_path, model_args.preset)
    if family == "t5":
        raise ValueError("T5 pretrains with span corruption: use examples/run_t5_pretraining.py.")
    objective = data_args.sentence_objective
    if objective not in ("none", "nsp", "sop"):
        raise ValueError(f"--sentence_objective must be none, nsp or sop, got {objective!r}.")
    if (objective, family) in (("nsp", "albert"), ("sop", "bert")):
        raise ValueError(f"--sentence_objective {objective} is not {family}'s pretraining task: use "
                         f"{'sop' if family == 'albert' else 'nsp'} (or none).")
    train_docs, eval_docs = corpus_documents(data_args, training_args.seed)
    tokenizer = load_tokenizer(model_args, family)
    set_seed(training_args.seed)  # the same initial weights on every process and every run
    head = "ForMaskedLM" if objective == "none" else "ForPreTraining"
    model = load_or_build_model(head, model_args.model_name_or_path, model_args.preset, tokenizer,
                                model_args.attention_type, parse_config_overrides(model_args.config_overrides))
    check_max_length(model.config, data_args.max_seq_length)

    train_set = build_examples(train_docs, tokenizer, data_args, training_args.seed)[: data_args.max_train_samples]
    collator = MaskedLMCollator(tokenizer, data_args.mlm_probability, data_args.whole_word_masking,
                                training_args.seed)
    eval_collator = MaskedLMCollator(tokenizer, data_args.mlm_probability, data_args.whole_word_masking, seed=1234)
    # The eval set is masked once: every evaluation, and every model trained on the same data, sees the same masks.
    eval_set = [eval_collator.mask(e)
                for e in build_examples(eval_docs, tokenizer, data_args, 1234)[: data_args.max_eval_samples]]

    timer = StepTimer()
    callbacks = [EpochCallback(collator), timer]
    if getattr(model.config, "admin", False) and not model_args.model_name_or_path:
        if family == "albert":  # shared layers run several times with one omega: the closed form applies
            admin_closed_form(model)
        else:
            callbacks.append(AdminProfilingCallback())

    training_args.remove_unused_columns = False  # the collator needs every field; the model takes them all
    trainer = Trainer(
        model=model, args=training_args, train_dataset=train_set, eval_dataset=eval_set, data_collator=collator,
        processing_class=tokenizer, compute_metrics=compute_metrics, preprocess_logits_for_metrics=reduce_logits,
        callbacks=callbacks,
    )
    train_result = trainer.train(resume_from_checkpoint=resume_checkpoint(training_args))
    return finish(trainer, train_result, model_args, __file__, "fill-mask",
                  data_file_info(data_args.train_file, CORPUS_INFO),
                  extra_metrics={"train_seconds_per_step": timer.seconds_per_step},
                  max_seq_length=data_args.max_seq_length, mlm_probability=data_args.mlm_probability,
                  whole_word_masking=data_args.whole_word_masking, sentence_objective=objective)


if __name__ == "__main__":
    main()
