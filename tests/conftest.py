"""Shared tiny configurations: the table of attention variants every test is driven by, and each family's tiny config
and heads (read from `hf_attn_variants.families.FAMILIES` and each modeling file's AUTO_MAP)."""

import atexit
import importlib
import os
import shutil
import subprocess
import tempfile

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The caches of this test session (set before anything imports datasets; subprocesses inherit them): the example
# scripts' preparation lands in a datasets cache of its own, not the user's ~/.cache/huggingface/datasets, and the
# project's (tokenizers trained from text, the KJV files) in one of its own, not ~/.cache/hf_attn_variants, which
# research runs on the same machine read while the suite runs.
for variable, prefix in (("HF_DATASETS_CACHE", "hav-datasets-"), ("HF_ATTN_VARIANTS_CACHE", "hav-cache-")):
    if variable not in os.environ:
        os.environ[variable] = tempfile.mkdtemp(prefix=prefix)
        atexit.register(shutil.rmtree, os.environ[variable], ignore_errors=True)

# The one device switch of the suite: HAV_TEST_DEVICE=cpu, cuda or cuda:N (default: cuda when there is one). Test
# modules marked `pytestmark = pytest.mark.device` run there: `build` puts their models on it, `head_inputs`,
# `encoder_inputs` and `on_device` their inputs. Other modules stay on the CPU. The example scripts go where Trainer
# goes (a GPU when there is one); "cpu" hides every GPU from the tests and the scripts they start, so a CPU run is
# the same on any machine.
if os.environ.get("HAV_TEST_DEVICE", "").strip() == "cpu":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
DEVICE = torch.device(
    os.environ.get("HAV_TEST_DEVICE", "").strip() or ("cuda" if torch.cuda.is_available() else "cpu")
)
if DEVICE.type == "cuda" and not torch.cuda.is_available():
    raise RuntimeError(f"HAV_TEST_DEVICE={DEVICE}, but torch {torch.__version__} sees no CUDA device.")
_current = [torch.device("cpu")]  # the running test's device: DEVICE in marked modules


def pytest_configure(config):
    config.addinivalue_line("markers", "device: the module's tests run on HAV_TEST_DEVICE (see conftest.py)")


@pytest.fixture(autouse=True)
def _test_device(request):
    _current[0] = DEVICE if request.node.get_closest_marker("device") else torch.device("cpu")
    yield
    _current[0] = torch.device("cpu")


def current_device() -> torch.device:
    """Where the running test's models and inputs live."""
    return _current[0]


def on_device(value):
    """`value` (a tensor, a model, or a dict / list / tuple of tensors) on the running test's device."""
    if isinstance(value, (torch.Tensor, torch.nn.Module)):
        return value.to(_current[0])
    if isinstance(value, dict):
        return {k: on_device(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(on_device(v) for v in value)
    return value


import hf_attn_variants as hav  # noqa: E402
from hf_attn_variants.families import FAMILIES  # noqa: E402
from hub_server import hub  # noqa: E402, F401  (the loopback Hub fixture, for every test module)

# Dataset repositories: `hub.create_dataset_repo("tester/name", {"cfg": {"train": table, "validation": table}})`
# (tables: pyarrow Tables or dicts of columns) serves parquet files and a README `configs:` block, as
# `datasets.load_dataset("tester/name", "cfg")` reads them; run the code that loads it with `run_with_hub`.


def run_with_hub(server, home, command: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    """Run `command` in a fresh interpreter that reaches only the loopback Hub (`Hub.env`: HF_ENDPOINT set, offline
    mode off, its own HF_HOME `home` so the datasets cache starts empty); fails the test with its stderr on error."""
    proc = subprocess.run(command, env=server.env(home), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


# Tolerance for outputs of two computations that share their weights (a model and its reloaded copy, two model
# instances): which GEMM kernel a CPU runs can depend on memory alignment, so such outputs may differ in the last bits
# (1.4e-9 seen on AMD EPYC). Weights themselves are compared bitwise. One wrong weight moves outputs far beyond this:
# test_save_load_round_trip checks that a 1e-3 change of a single embedding entry fails it.
SAME_WEIGHTS = dict(atol=1e-6, rtol=1e-5)


def at_real_tokens(output: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """A per-token output [b, n, ...] at the real tokens of `attention_mask` [b, n]: [n_real, ...]; an output of
    another shape (a decoder's logits, a pooled output) as it is. Where BERT and ALBERT run the encoder on the real
    tokens only (`unpad`, their default on a padded batch), the padded positions hold zeros, and a padded computation
    (transformers' models, a compiled graph) fills them with what no real token reads: per-token outputs of two such
    computations are compared here."""
    if output.shape[: attention_mask.dim()] != attention_mask.shape:
        return output
    return output[attention_mask.bool()]


TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    type_vocab_size=2,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
# ALBERT: factorized embeddings, 3 layers drawn from 2 groups of 2 shared layers
TINY_ALBERT = dict(TINY, embedding_size=16, num_hidden_layers=3, num_hidden_groups=2, inner_group_num=2)
TINY_T5 = dict(
    vocab_size=99,
    d_model=32,
    d_kv=8,
    d_ff=37,
    num_layers=2,
    num_heads=4,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=20,
    dropout_rate=0.0,
)
# family name (`FAMILIES`) -> the tiny config `make_config` builds. TINY, TINY_ALBERT and TINY_T5 hold only fields of
# transformers' own configs, so the parity and conversion tests give them to transformers' models too; T5 has no
# length limit of its own (its synthesizer default is 512 positions), so its row adds the synthesizer's.
TINY_CONFIGS = {"bert": TINY, "albert": TINY_ALBERT, "t5": dict(TINY_T5, synthesizer_max_position=64)}
assert set(TINY_CONFIGS) == set(FAMILIES), "one tiny config per family"

# name -> the variant fields. Every test that says "every variant" runs over this table.
VARIANTS = {
    "dot_product": dict(attention_type="dot_product"),
    "talking_heads": dict(attention_type="talking_heads"),
    "talking_heads_hk_hv": dict(
        attention_type="talking_heads", talking_heads_num_key_heads=2, talking_heads_num_value_heads=8
    ),
    "talking_heads_pre_only": dict(attention_type="talking_heads", talking_heads_post_softmax=False),
    "talking_heads_dynamic": dict(attention_type="talking_heads", talking_heads_dynamic=["x2l", "m2l", "x2w", "m2w"]),
    "talking_heads_recompute": dict(attention_type="talking_heads", attention_recompute=True),
    "synth_dense": dict(attention_type="synthesizer", synthesizer_components=["dense"]),
    "synth_random": dict(attention_type="synthesizer", synthesizer_components=["random"]),
    "synth_random_frozen": dict(
        attention_type="synthesizer", synthesizer_components=["random"], synthesizer_random_trainable=False
    ),
    "synth_random_offset": dict(
        attention_type="synthesizer", synthesizer_components=["dot_product", "random"], synthesizer_random_offset=True
    ),
    "synth_factorized_dense": dict(attention_type="synthesizer", synthesizer_components=["factorized_dense"]),
    "synth_factorized_random": dict(
        attention_type="synthesizer", synthesizer_components=["factorized_random"], synthesizer_factorized_rank=4
    ),
    "synth_mixture": dict(attention_type="synthesizer", synthesizer_components=["dot_product", "dense", "random"]),
    "synth_mixture_unnormalized": dict(
        attention_type="synthesizer",
        synthesizer_components=["random", "factorized_random"],
        synthesizer_mixture_normalize=False,
    ),
    "general_bilinear": dict(attention_type="general_bilinear"),
}


def _heads(fam) -> list[str]:
    """Our head classes of a family, in the order its modeling file's AUTO_MAP lists them (the Auto classes they
    register with)."""
    modeling = importlib.import_module(f"hf_attn_variants.models.modeling_{fam.model_type}")
    return [target.split(".")[-1] for auto, target in modeling.AUTO_MAP.items() if auto != "AutoConfig"]


# family name -> its heads; ALL_HEADS: every head of every family
FAMILY_HEADS = {name: _heads(fam) for name, fam in FAMILIES.items()}
ALL_HEADS = [head for heads in FAMILY_HEADS.values() for head in heads]
# the label argument of each sentence-pair objective (`Family.sentence_objective`), as transformers names it
SENTENCE_LABELS = {"nsp": "next_sentence_label", "sop": "sentence_order_label"}


def family(head: str) -> str:
    """The family name of one of our class names, read from `FAMILIES`' prefixes ("VariantAlbertForMaskedLM" ->
    "albert"; the longest prefix wins, should one family's prefix start another's)."""
    names = [name for name, fam in FAMILIES.items() if head.startswith(f"Variant{fam.prefix}")]
    if not names:
        raise ValueError(f"{head!r} is not a class of a family in FAMILIES ({', '.join(FAMILIES)}).")
    return max(names, key=lambda name: len(FAMILIES[name].prefix))


def head_kind(head: str) -> str:
    """What a head is, whatever its family ("VariantAlbertForMaskedLM" -> "ForMaskedLM", "VariantT5Model" ->
    "Model")."""
    return head.removeprefix(f"Variant{FAMILIES[family(head)].prefix}")


def make_config(variant: str, family: str = "bert", **overrides):
    """The tiny config of `family` with the fields of `variant` (a VARIANTS name), then `overrides`."""
    return FAMILIES[family].config_class(**{**TINY_CONFIGS[family], **VARIANTS[variant], **overrides})


def encoder_inputs(batch=2, seq=7, seed=0):
    """T5 encoder inputs: the second row right-padded, one <eos> per row at the last real token."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, TINY_T5["vocab_size"], (batch, seq), generator=g)
    mask = torch.ones_like(ids)
    mask[1, seq - 2 :] = 0
    ids[0, -1] = ids[1, seq - 3] = 1
    ids[1, seq - 2 :] = 0
    return on_device(ids), on_device(mask)


def _encoder_decoder_head_inputs(kind):
    ids, mask = encoder_inputs()
    inputs = dict(input_ids=ids.cpu(), attention_mask=mask.cpu())
    if kind == "Model":
        inputs["decoder_input_ids"] = torch.randint(2, TINY_T5["vocab_size"], (2, 5))
    elif kind == "ForConditionalGeneration":
        inputs["labels"] = torch.randint(2, TINY_T5["vocab_size"], (2, 5))
    elif kind == "ForSequenceClassification":
        inputs["labels"] = torch.tensor([0, 1])
    elif kind == "ForTokenClassification":
        inputs["labels"] = torch.randint(0, 2, ids.shape)
    elif kind == "ForQuestionAnswering":
        inputs["start_positions"], inputs["end_positions"] = torch.tensor([1, 2]), torch.tensor([3, 4])
    return on_device(inputs)


def head_inputs(head: str, batch: int = 2, seq: int = 7, seed: int = 0) -> dict:
    """Inputs with labels for `head`, the second row right-padded (an encoder-decoder's: `encoder_inputs`, 5 decoder
    positions)."""
    fam = FAMILIES[family(head)]
    if fam.encoder_decoder:
        return _encoder_decoder_head_inputs(head_kind(head))
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, TINY["vocab_size"], (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1, seq - 2 :] = 0
    inputs = dict(input_ids=ids, attention_mask=mask)
    kind = head_kind(head)
    if kind == "ForMultipleChoice":
        inputs = {k: v[:, None].expand(-1, 3, -1).contiguous() for k, v in inputs.items()}
        inputs["labels"] = torch.tensor([0, 2][:batch])
    elif kind in ("ForMaskedLM", "LMHeadModel"):
        inputs["labels"] = ids.masked_fill(mask == 0, -100)
    elif kind == "ForPreTraining":
        inputs["labels"] = ids.masked_fill(mask == 0, -100)
        inputs[SENTENCE_LABELS[fam.sentence_objective]] = torch.tensor([0, 1][:batch])
    elif kind in ("ForNextSentencePrediction", "ForSequenceClassification"):
        inputs["labels"] = torch.tensor([0, 1][:batch])
    elif kind == "ForTokenClassification":
        inputs["labels"] = torch.randint(0, 2, (batch, seq), generator=g)
    elif kind == "ForQuestionAnswering":
        inputs["start_positions"] = torch.tensor([1, 2][:batch])
        inputs["end_positions"] = torch.tensor([3, 4][:batch])
    return on_device(inputs)


def build(head: str, variant: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    if head_kind(head) == "LMHeadModel":  # a causal LM head on an encoder family decodes
        overrides.setdefault("is_decoder", True)
    config = make_config(variant, family(head), **overrides)
    return on_device(getattr(hav, head)(config).eval())


def sharpen_t5(model):
    """Move every weight of a T5 (ours or transformers') off its init and strengthen the residual branches, so that a
    random model does not just repeat its start token and greedy/beam choices are not decided by rounding."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(0.05 * torch.randn_like(p))
            if name.endswith(("wo.weight", ".o.weight")):
                p.mul_(3.0)


@pytest.fixture(params=list(VARIANTS))
def variant(request):
    return request.param


class TinyBatches(torch.utils.data.Dataset):
    """A masked-LM data set of random ids of the tiny configs' vocabulary, the same in every process."""

    def __init__(self, n=16, seq=8):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, TINY["vocab_size"], (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.ids[i]}
