"""The reference point of the research tables: the eval loss of a model that ignores the context and predicts every
masked token from the training chapters' token frequencies (the unigram distribution, add-one smoothed).

A cell whose loss sits at this value has learnt nothing beyond token frequencies (e.g. a run whose learning rate is
too high stalls there). The tokenizer is the one every cell uses: `run_pretraining`'s own (the package's
`load_tokenizer`), built the same way from the same training file (it is cached, so this reads it rather than
training it again).

    python experiments/unigram.py        # prints the cross-entropy in nats per token (comparable to eval MLM loss)
"""

import collections
import math

# What `main` prints for the KJV split and the project's 8000-token WordPiece tokenizer (the cells' data): the
# report counts a run that ends within report.STALL_MARGIN of it as stalled.
UNIGRAM_LOSS = 5.857


def unigram_cross_entropy(train_ids: list[list[int]], eval_ids: list[list[int]], vocab_size: int) -> float:
    """Mean negative log-probability of the eval tokens under the add-one smoothed unigram distribution of the
    training tokens."""
    counts = collections.Counter(token for ids in train_ids for token in ids)
    total = sum(counts.values()) + vocab_size
    tokens = [token for ids in eval_ids for token in ids]
    if not tokens:
        raise ValueError("No evaluation tokens.")
    return -sum(math.log((counts[token] + 1) / total) for token in tokens) / len(tokens)


def main() -> float:
    from transformers import HfArgumentParser, TrainingArguments

    from hf_attn_variants.training.data_loading import DataArguments, pretraining_splits
    from hf_attn_variants.training.model_setup import ModelArguments, load_tokenizer
    from kjv import kjv_files

    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    paths = kjv_files()
    args = parser.parse_args_into_dataclasses(
        [
            "--preset",
            "bert-mini-dot-product",
            "--train_file",
            str(paths["train"]),
            "--validation_file",
            str(paths["validation"]),
            "--output_dir",
            "/tmp/unigram-unused",
            "--report_to",
            "none",
        ]
    )
    model_args, data_args, training_args = args
    raw, _ = pretraining_splits(data_args, training_args)
    column = "text"
    tokenizer = load_tokenizer(model_args, "bert", data_args, training_args, raw["train"], [column])

    def encode(split):
        texts = [t for t in raw[split][column] if t and t.strip()]
        return tokenizer(texts, add_special_tokens=False)["input_ids"]

    loss = unigram_cross_entropy(encode("train"), encode("validation"), len(tokenizer))
    print(
        f"unigram cross-entropy of the held-out chapters: {loss:.3f} nats per token "
        f"(perplexity {math.exp(loss):.0f}; vocabulary {len(tokenizer)})"
    )
    return loss


if __name__ == "__main__":
    main()
