"""Conversion of transformers checkpoints into variants (and Admin export back) is function-preserving, verified,
and all-or-nothing: a bad input gives a clear error and writes nothing."""

import json
import logging

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import hf_attn_variants as hav
from conftest import TINY, TINY_ALBERT, TINY_T5, at_real_tokens
from hf_attn_variants.cli import main
from hf_attn_variants.convert import convert, export_admin

REFERENCES = {  # transformers class -> its config
    "BertForMaskedLM": lambda: transformers.BertConfig(**TINY),
    "AlbertForMaskedLM": lambda: transformers.AlbertConfig(**TINY_ALBERT),
    "T5ForConditionalGeneration": lambda: transformers.T5Config(**TINY_T5),
}


def _reference(tmp_path, name="BertForMaskedLM"):
    """A randomly initialised transformers checkpoint (biases and norms perturbed too) with a vocab.txt."""
    torch.manual_seed(0)
    model = getattr(transformers, name)(REFERENCES[name]())
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    path = tmp_path / name
    model.save_pretrained(path)
    (path / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    return model.eval(), path


def _inputs(name):
    """Inputs unlike convert's probe batch: 3 rows of 11 tokens, two of them padded."""
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(2, 99, (3, 11), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    inputs = dict(input_ids=ids, attention_mask=mask)
    if name.startswith("T5"):
        inputs["decoder_input_ids"] = torch.randint(2, 99, (3, 6), generator=g)
    return inputs


def _leftovers(tmp_path):
    return [p.name for p in tmp_path.iterdir() if ".partial-" in p.name or p.name.startswith("out")]


@pytest.mark.parametrize("attention", ["talking_heads", "synthesizer"])
@pytest.mark.parametrize("name", list(REFERENCES))
def test_convert_preserves_the_function_of_every_family(tmp_path, name, attention):
    reference, source = _reference(tmp_path, name)
    records, handler = [], logging.Handler()
    handler.emit = records.append
    logging.getLogger("transformers").addHandler(handler)
    try:
        out = convert(source, tmp_path / "out", attention)
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    # no LOAD REPORT of the variant's new parameters as MISSING, no model-type warning: the conversion is exact
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []
    variant = getattr(hav, f"Variant{name}").from_pretrained(out).eval()
    assert variant.config.attention_type == attention
    assert (out / "vocab.txt").read_text() == "[PAD]\n[UNK]\n"
    family = {"Be": "bert", "Al": "albert", "T5": "t5"}[name[:2]]
    assert {"attention_variants.py", f"modeling_variant_{family}.py"} <= {p.name for p in out.glob("*.py")}
    inputs = _inputs(name)
    with torch.no_grad():
        expected, got = reference(**inputs).logits, variant(**inputs).logits
    real = inputs["attention_mask"]
    torch.testing.assert_close(at_real_tokens(got, real), at_real_tokens(expected, real), atol=1e-5, rtol=1e-4)

    # non-vacuity: the variant's own parameters are in play; moving them changes the outputs
    own = [(n, p) for n, p in variant.named_parameters() if ".core." in n]
    assert own
    with torch.no_grad():
        for n, p in own:  # a mixture swaps its weights: all on the synthetic part, none on the dot product
            p.copy_(p.flip(0)) if n.endswith("mixture_weights") else p.add_(0.5 * torch.randn_like(p))
        assert (at_real_tokens(variant(**inputs).logits, real) - at_real_tokens(expected, real)).abs().max() > 1e-3


def _fails(tmp_path, source, message, exception=ValueError, **kwargs):
    with pytest.raises(exception, match=message):
        convert(source, tmp_path / "out", **kwargs)
    assert _leftovers(tmp_path) == []


def test_convert_refuses_a_wrong_family(tmp_path):
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    gpt2.save_pretrained(tmp_path / "gpt2")
    _fails(tmp_path, tmp_path / "gpt2", "holds a 'gpt2' checkpoint.*BERT, ALBERT or T5")
    _, source = _reference(tmp_path)
    convert(source, tmp_path / "variant")
    _fails(tmp_path, tmp_path / "variant", "already a variant checkpoint")


def test_convert_refuses_missing_weights(tmp_path):
    _, source = _reference(tmp_path)
    state = load_file(source / "model.safetensors")
    del state["bert.encoder.layer.1.output.dense.weight"]
    save_file(state, source / "model.safetensors", metadata={"format": "pt"})
    _fails(tmp_path, source, r"lacks 1 weight\(s\) of BertForMaskedLM: bert.encoder.layer.1.output.dense.weight")


def test_convert_refuses_shapes_that_do_not_fit(tmp_path):
    _, source = _reference(tmp_path)
    config = json.loads((source / "config.json").read_text())
    config["intermediate_size"] = 40
    (source / "config.json").write_text(json.dumps(config))
    _fails(tmp_path, source, r"shapes do not fit.*intermediate.dense.weight: checkpoint \(37, 32\), config \(40, 32\)")


def test_convert_refuses_corrupted_and_absent_files(tmp_path):
    _, source = _reference(tmp_path)
    data = (source / "model.safetensors").read_bytes()
    (source / "model.safetensors").write_bytes(data[: len(data) // 2])
    _fails(tmp_path, source, "is not a readable weights file")
    (source / "model.safetensors").unlink()
    _fails(tmp_path, source, "has no weights", FileNotFoundError)
    (source / "config.json").unlink()
    _fails(tmp_path, source, "has no config.json", FileNotFoundError)
    _fails(tmp_path, tmp_path / "absent", "is not a folder", FileNotFoundError)


def test_convert_refuses_settings_that_change_the_function(tmp_path):
    _, source = _reference(tmp_path)
    _fails(tmp_path, source, "not function-preserving", talking_heads_init="paper")
    _fails(
        tmp_path,
        source,
        "needs 'dot_product' among `synthesizer_components`",
        attention_type="synthesizer",
        synthesizer_components=["random"],
    )
    _fails(tmp_path, source, "convert supports", attention_type="linear")


def test_convert_never_writes_into_a_non_empty_folder(tmp_path):
    _, source = _reference(tmp_path)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not an empty folder"):
        convert(source, tmp_path / "taken")
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["keep.txt"]
    (tmp_path / "empty").mkdir()
    assert (convert(source, tmp_path / "empty") / "model.safetensors").is_file()


def test_cli_convert_and_errors(tmp_path, capsys):
    _, source = _reference(tmp_path, "T5ForConditionalGeneration")
    assert (
        main(
            [
                "convert",
                str(source),
                str(tmp_path / "t5-mix"),
                "--attention",
                "synthesizer",
                "--synthesizer-components",
                "dot_product",
                "dense",
            ]
        )
        == 0
    )
    config = json.loads((tmp_path / "t5-mix" / "config.json").read_text())
    assert config["synthesizer_components"] == ["dot_product", "dense"]
    assert main(["convert", str(tmp_path / "missing"), str(tmp_path / "x")]) == 1
    assert "convert: error:" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def _admin_model(**overrides):
    torch.manual_seed(0)
    model = hav.VariantBertForMaskedLM(hav.VariantBertConfig(**{**TINY, "admin": True, **overrides})).eval()
    with torch.no_grad():
        for i, module in enumerate(m for m in model.modules() if getattr(m, "admin_omega", None) is not None):
            module.admin_omega.fill_(1.0 + 0.5 * i)  # distinct omegas, as profiling gives
    return model


def test_export_admin_gives_plain_transformers_with_the_same_outputs(tmp_path):
    model = _admin_model()
    model.save_pretrained(tmp_path / "admin")
    assert main(["export", str(tmp_path / "admin"), str(tmp_path / "plain")]) == 0
    plain = transformers.BertForMaskedLM.from_pretrained(tmp_path / "plain").eval()
    assert "auto_map" not in json.loads((tmp_path / "plain" / "config.json").read_text())
    inputs = _inputs("BertForMaskedLM")
    with torch.no_grad():
        plain_logits, logits = plain(**inputs).logits, model(**inputs).logits
    real = inputs["attention_mask"]
    torch.testing.assert_close(at_real_tokens(plain_logits, real), at_real_tokens(logits, real), atol=1e-5, rtol=1e-4)


def test_export_admin_refuses_what_transformers_cannot_represent(tmp_path):
    _admin_model(attention_type="talking_heads").save_pretrained(tmp_path / "th")
    with pytest.raises(ValueError, match="Only dot-product models export"):
        export_admin(tmp_path / "th", tmp_path / "out")
    _, source = _reference(tmp_path)
    with pytest.raises(ValueError, match="export takes hf-attn-variants BERT or ALBERT"):
        export_admin(source, tmp_path / "out")
    assert _leftovers(tmp_path) == []
