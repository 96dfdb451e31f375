"""sentence-transformers on our checkpoints: `SentenceTransformer(path, trust_remote_code=True).encode(...)` on a
saved BERT variant with a tokenizer, in a process that cannot import this package (remote code, as a Hub user has
it) and in this one. sentence-transformers finds no modules.json in a transformers checkpoint and builds its default
pipeline, the model then mean pooling over the attention mask: the tests redo that pooling by hand with our model,
on one batch of sentences of different lengths (padded rows) and on each sentence alone."""

import pytest

pytest.importorskip("sentence_transformers")

import json
import textwrap
from pathlib import Path

import torch
from transformers import AutoTokenizer

from conftest import build
from hf_attn_variants.isolation import run_isolated

# the project's WordPiece tokenizer (8000 tokens); the tiny models get its vocabulary size
TOKENIZER = Path(__file__).resolve().parents[2] / "examples" / "data" / "kjv-wordpiece-8000"
VARIANTS = ["talking_heads", "synth_mixture"]
SENTENCES = [  # of different lengths, so that the batch pads every row but the longest
    "In the beginning God created the heaven and the earth.",
    "Jesus wept.",
    "And God said, Let there be light: and there was light. And God saw the light, that it was good.",
    "Amen.",
]


def mean_pooling(model, tokenizer, sentences) -> torch.Tensor:
    """sentence-transformers' default pooling, by hand: the last hidden states averaged over the attention mask."""
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state  # [b, n, d]
    mask = batch["attention_mask"][..., None].to(hidden.dtype)  # [b, n, 1]
    return (hidden * mask).sum(1) / mask.sum(1)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """variant -> (checkpoint folder with model and tokenizer, the model, the tokenizer)."""
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    root = tmp_path_factory.mktemp("st")
    out = {}
    for variant in VARIANTS:
        model = build("VariantBertModel", variant, vocab_size=len(tokenizer))
        with torch.no_grad():  # off the init: identity maps, zero mixture weights
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        model.save_pretrained(root / variant)
        tokenizer.save_pretrained(root / variant)
        out[variant] = (root / variant, model, tokenizer)
    return out


# A Hub user's process: sentence-transformers and transformers, not this package (checked).
ENCODER = textwrap.dedent(
    """
    import json, sys, torch
    from sentence_transformers import SentenceTransformer
    try:
        import hf_attn_variants
    except ImportError:
        pass
    else:
        raise SystemExit("hf_attn_variants is importable: the test would prove nothing")
    job = json.load(open(sys.argv[1]))
    for path, out in job["models"]:
        st = SentenceTransformer(path, trust_remote_code=True, device="cpu")
        module = type(st[0].auto_model).__module__
        assert module.startswith("transformers_modules"), module
        result = {
            "batch": st.encode(job["sentences"], batch_size=len(job["sentences"]), convert_to_tensor=True),
            "alone": st.encode(job["sentences"], batch_size=1, convert_to_tensor=True),
        }
        st.save(out + "-st")  # a sentence-transformers folder (modules.json), loaded again as remote code
        again = SentenceTransformer(out + "-st", trust_remote_code=True, device="cpu")
        result["resaved"] = again.encode(job["sentences"], convert_to_tensor=True)
        torch.save(result, out)
        print("encoded", path)
    """
)


@pytest.fixture(scope="module")
def encoded(saved, tmp_path_factory):
    root = tmp_path_factory.mktemp("st-encode")
    models = [(str(saved[v][0]), str(root / f"{v}.pt")) for v in VARIANTS]
    (root / "job.json").write_text(json.dumps(dict(models=models, sentences=SENTENCES)))
    proc = run_isolated(ENCODER, [root / "job.json"], cwd=root)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count("encoded") == len(VARIANTS), proc.stdout
    return {v: torch.load(out) for v, (_, out) in zip(VARIANTS, models)}


@pytest.mark.parametrize("variant", VARIANTS)
def test_encode_is_mean_pooling_over_the_mask(saved, encoded, variant):
    """The embeddings of one padded batch are our model's hidden states averaged over the attention mask (and not
    over the padding too, which would differ)."""
    _, model, tokenizer = saved[variant]
    expected = mean_pooling(model, tokenizer, SENTENCES)
    got = encoded[variant]["batch"]
    assert got.shape == (len(SENTENCES), model.config.hidden_size)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any(dim=1).sum() == len(SENTENCES) - 1  # every row but one is padded
    with torch.no_grad():
        unmasked = model(**batch).last_hidden_state.mean(1)
    assert (unmasked - expected).abs().max() > 1e-3  # the mask matters: the comparison would see it ignored


@pytest.mark.parametrize("variant", VARIANTS)
def test_padded_rows_equal_each_sentence_alone(saved, encoded, variant):
    """A padded row's embedding is the sentence's own: sentence-transformers' batch equals its one-by-one encoding
    and our model on each sentence unpadded."""
    _, model, tokenizer = saved[variant]
    got = encoded[variant]
    alone = torch.cat([mean_pooling(model, tokenizer, [s]) for s in SENTENCES])
    torch.testing.assert_close(got["alone"], alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got["batch"], got["alone"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_sentence_transformers_folder_reloads(encoded, variant):
    """`SentenceTransformer.save` writes a folder that loads again as remote code and encodes the same."""
    torch.testing.assert_close(encoded[variant]["resaved"], encoded[variant]["batch"], atol=1e-5, rtol=1e-5)


def test_encode_with_the_package_installed(saved):
    """Where this package is importable, our registered classes serve the checkpoint: the same embeddings."""
    from sentence_transformers import SentenceTransformer

    path, model, tokenizer = saved["talking_heads"]
    st = SentenceTransformer(str(path), trust_remote_code=True, device="cpu")
    got = st.encode(SENTENCES, convert_to_tensor=True)
    torch.testing.assert_close(got, mean_pooling(model, tokenizer, SENTENCES), atol=1e-5, rtol=1e-5)
