"""The reference point of the T5 span-corruption tables (t5_places.py): the held-out target loss of a model that
ignores every input and predicts each target token from the training targets' token frequencies (the unigram
distribution of the corrupted training blocks' targets, sentinels and </s> included, add-one smoothed), the span-
corruption counterpart of unigram.py's masked-LM point.

The data are exactly the cells': the KJV splits, T5_TOKENIZER (the committed Unigram with T5's sentinels),
examples/run_t5_pretraining.py's own packing (the package's `block_batch`: blocks of the raw length whose corrupted
input fits 128 tokens), the training blocks corrupted as the first epoch of seed 0 corrupts them, and the first 256
held-out blocks corrupted with the script's fixed evaluation seed (`EVAL_SEED`). A run that ends within
report.STALL_MARGIN of this point has learnt nothing beyond the targets' token frequencies. It is an upper reference
more than unigram.py's: the decoder is a language model over the targets, so a run that never reads its encoder
still goes below it (the order of sentinels and span tokens is predictable from the target alone).

    python experiments/t5_unigram.py        # prints the cross-entropy in nats per target token
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

T5_TOKENIZER = ROOT / "examples" / "data" / "kjv-unigram-8000"
# sha256 of T5_TOKENIZER/tokenizer.json: the project's Unigram (tokenizer_training.unigram_tokenizer, 8000 tokens
# with 100 sentinels), trained on the lines of kjv_train.txt, as kjv.write_tokenizer trains the WordPiece (`write`)
T5_TOKENIZER_SHA256 = "174ba3238994a1784a3e91d580240fb8e2254412f99311c810a82045f94abe95"
# What `main` prints (nats per target token); report.py marks a T5 run within STALL_MARGIN of it as stalled.
UNIGRAM_TARGET_LOSS = 5.509


def write(target: str | Path) -> Path:
    """Train the T5 cells' Unigram on the lines of the training chapters into `target`; its tokenizer.json."""
    from hf_attn_variants.training.pretraining_data import read_documents
    from hf_attn_variants.training.tokenizer_training import unigram_tokenizer
    from kjv import kjv_files

    lines = [line for document in read_documents(kjv_files()["train"]) for line in document]
    unigram_tokenizer(lines, 8000).save_pretrained(target)
    return Path(target) / "tokenizer.json"


def target_ids(max_seq_length: int = 128, max_eval_samples: int = 256) -> tuple[list, list, int]:
    """(training targets, held-out targets, vocabulary size) as the T5 cells see them (see the module docstring)."""
    from transformers import AutoTokenizer, HfArgumentParser, TrainingArguments

    from hf_attn_variants.training.data_collators import EVAL_SEED, DataCollatorForT5SpanCorruption, raw_length_for
    from hf_attn_variants.training.data_loading import DataArguments, first_rows, pretraining_splits
    from hf_attn_variants.training.pretraining_data import block_batch
    from kjv import kjv_files

    paths = kjv_files()
    data_args, training_args = HfArgumentParser((DataArguments, TrainingArguments)).parse_args_into_dataclasses(
        [
            "--train_file",
            str(paths["train"]),
            "--validation_file",
            str(paths["validation"]),
            "--output_dir",
            "/tmp/t5-unigram-unused",
            "--report_to",
            "none",
            "--use_cpu",
            "true",
        ]
    )
    raw, _ = pretraining_splits(data_args, training_args)
    tokenizer = AutoTokenizer.from_pretrained(T5_TOKENIZER)
    train = DataCollatorForT5SpanCorruption(tokenizer, seed=0)  # the T5 script's default noise
    held = DataCollatorForT5SpanCorruption(tokenizer, seed=EVAL_SEED)
    raw_length = raw_length_for(max_seq_length, train.noise_density, train.mean_noise_span_length)
    blocks = {
        split: raw[split].map(
            block_batch,
            batched=True,
            remove_columns=raw[split].column_names,
            fn_kwargs={"tokenizer": tokenizer, "column": "text", "raw_length": raw_length},
        )
        for split in ("train", "validation")
    }
    train_targets = [train.corrupt({"input_ids": ids})["labels"] for ids in blocks["train"]["input_ids"]]
    eval_targets = [
        held.corrupt({"input_ids": ids})["labels"]
        for ids in first_rows(blocks["validation"], max_eval_samples)["input_ids"]
    ]
    return train_targets, eval_targets, len(tokenizer)


def main() -> float:
    import math

    from unigram import unigram_cross_entropy

    train, held, vocab = target_ids()
    loss = unigram_cross_entropy(train, held, vocab)
    print(
        f"unigram cross-entropy of the held-out targets: {loss:.3f} nats per target token (perplexity "
        f"{math.exp(loss):.0f}; vocabulary {vocab}; {sum(map(len, held))} target tokens in {len(held)} blocks)"
    )
    return loss


if __name__ == "__main__":
    main()
