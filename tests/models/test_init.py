"""Initialisation matches transformers' own models (for remote code, transformers skips `_init_weights` on modules
without parameters of their own: an init written on a parent module silently never runs)."""

import pytest
import torch
import transformers

import hf_attn_variants as hav

WIDE = dict(
    vocab_size=300, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, max_position_embeddings=64
)
PAIRS = [
    (
        "BertForMaskedLM",
        "VariantBertForMaskedLM",
        transformers.BertConfig,
        hav.VariantBertConfig,
        dict(WIDE, hidden_size=128),
    ),
    (
        "BertForQuestionAnswering",
        "VariantBertForQuestionAnswering",
        transformers.BertConfig,
        hav.VariantBertConfig,
        dict(WIDE, hidden_size=128),
    ),
    (
        "AlbertForPreTraining",
        "VariantAlbertForPreTraining",
        transformers.AlbertConfig,
        hav.VariantAlbertConfig,
        dict(WIDE, hidden_size=128, embedding_size=32),
    ),
    (
        "T5ForConditionalGeneration",
        "VariantT5ForConditionalGeneration",
        transformers.T5Config,
        hav.VariantT5Config,
        dict(vocab_size=300, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4),
    ),
    (
        "T5ForQuestionAnswering",
        "VariantT5ForQuestionAnswering",
        transformers.T5Config,
        hav.VariantT5Config,
        dict(vocab_size=300, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4),
    ),
    (
        "T5ForSequenceClassification",
        "VariantT5ForSequenceClassification",
        transformers.T5Config,
        hav.VariantT5Config,
        dict(vocab_size=300, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4),
    ),
]


@pytest.mark.parametrize("ref_name,ours_name,ref_config,our_config,fields", PAIRS, ids=[p[1] for p in PAIRS])
def test_initialisation_matches_transformers(ref_name, ours_name, ref_config, our_config, fields):
    torch.manual_seed(0)
    ref = getattr(transformers, ref_name)(ref_config(**fields))
    torch.manual_seed(1)
    ours = getattr(hav, ours_name)(our_config(**fields))
    ref_params = dict(ref.named_parameters())
    checked = 0
    for name, p in ours.named_parameters():
        if name not in ref_params:
            continue
        expected = ref_params[name].detach()
        got = p.detach()
        if expected.std() == 0:  # constants (norms, biases): exactly the same
            torch.testing.assert_close(got, expected, msg=name)
        else:
            rel = max(0.1, 4 / (2 * expected.numel()) ** 0.5)  # 4 sigma of a std estimated from numel values
            assert got.std() == pytest.approx(expected.std().item(), rel=rel), name
            assert got.mean().abs() < 6 * expected.std() / expected.numel() ** 0.5 + 1e-6, name  # centred
        checked += 1
    assert checked >= len(ref_params) - 2  # every shared parameter name was compared
