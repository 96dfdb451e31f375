"""Shared tiny configurations: the table of attention variants every test is driven by."""

import atexit
import os
import shutil
import subprocess
import tempfile

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The datasets cache of this test session (set before anything imports datasets; subprocesses inherit it): the
# example scripts' preparation lands here, not in the user's ~/.cache/huggingface/datasets.
if "HF_DATASETS_CACHE" not in os.environ:
    os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="hav-datasets-")
    atexit.register(shutil.rmtree, os.environ["HF_DATASETS_CACHE"], ignore_errors=True)

# The one device switch of the suite: HAV_TEST_DEVICE=cpu, cuda or cuda:N (default: cuda when there is one). Test
# modules marked `pytestmark = pytest.mark.device` run there: `build` puts their models on it, `head_inputs`,
# `encoder_inputs` and `on_device` their inputs. Other modules stay on the CPU. The example scripts go where Trainer
# goes (a GPU when there is one); "cpu" hides every GPU from the tests and the scripts they start, so a CPU run is
# the same on any machine.
if os.environ.get("HAV_TEST_DEVICE", "").strip() == "cpu":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
DEVICE = torch.device(os.environ.get("HAV_TEST_DEVICE", "").strip() or ("cuda" if torch.cuda.is_available() else "cpu"))
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
from hub_server import hub  # noqa: E402, F401  (the loopback Hub fixture, for every test module)

# Dataset repositories: `hub.create_dataset_repo("tester/name", {"cfg": {"train": table, "validation": table}})`
# (tables: pyarrow Tables or dicts of columns) serves parquet files and a README `configs:` block, as
# `datasets.load_dataset("tester/name", "cfg")` reads them; run the code that loads it with `run_with_hub`.


def run_with_hub(hub, home, command: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    """Run `command` in a fresh interpreter that reaches only the loopback Hub (`Hub.env`: HF_ENDPOINT set, offline
    mode off, its own HF_HOME `home` so the datasets cache starts empty); fails the test with its stderr on error."""
    proc = subprocess.run(command, env=hub.env(home), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc

# Tolerance for outputs of two computations that share their weights (a model and its reloaded copy, two model
# instances): which GEMM kernel a CPU runs can depend on memory alignment, so such outputs may differ in the last bits
# (1.4e-9 seen on AMD EPYC). Weights themselves are compared bitwise. One wrong weight moves outputs far beyond this:
# test_save_load_round_trip checks that a 1e-3 change of a single embedding entry fails it.
SAME_WEIGHTS = dict(atol=1e-6, rtol=1e-5)

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

BERT_HEADS = [
    "VariantBertModel",
    "VariantBertForPreTraining",
    "VariantBertForMaskedLM",
    "VariantBertLMHeadModel",
    "VariantBertForNextSentencePrediction",
    "VariantBertForSequenceClassification",
    "VariantBertForMultipleChoice",
    "VariantBertForTokenClassification",
    "VariantBertForQuestionAnswering",
]
ALBERT_HEADS = [
    "VariantAlbertModel",
    "VariantAlbertForPreTraining",
    "VariantAlbertForMaskedLM",
    "VariantAlbertForSequenceClassification",
    "VariantAlbertForMultipleChoice",
    "VariantAlbertForTokenClassification",
    "VariantAlbertForQuestionAnswering",
]
HEADS = BERT_HEADS + ALBERT_HEADS  # the encoder families, which share one table of checks

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
T5_HEADS = [
    "VariantT5Model",
    "VariantT5ForConditionalGeneration",
    "VariantT5EncoderModel",
    "VariantT5ForSequenceClassification",
    "VariantT5ForTokenClassification",
    "VariantT5ForQuestionAnswering",
]


def family(head: str) -> str:
    if head.startswith("VariantAlbert"):
        return "albert"
    if head.startswith("VariantT5"):
        return "t5"
    return "bert"


def make_config(variant: str, family: str = "bert", **overrides):
    if family == "t5":
        return hav.VariantT5Config(**{**TINY_T5, "synthesizer_max_position": 64, **VARIANTS[variant], **overrides})
    if family == "albert":
        return hav.VariantAlbertConfig(**{**TINY_ALBERT, **VARIANTS[variant], **overrides})
    return hav.VariantBertConfig(**{**TINY, **VARIANTS[variant], **overrides})


def encoder_inputs(batch=2, seq=7, seed=0):
    """T5 encoder inputs: the second row right-padded, one <eos> per row at the last real token."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, TINY_T5["vocab_size"], (batch, seq), generator=g)
    mask = torch.ones_like(ids)
    mask[1, seq - 2 :] = 0
    ids[0, -1] = ids[1, seq - 3] = 1
    ids[1, seq - 2 :] = 0
    return on_device(ids), on_device(mask)


def _t5_head_inputs(head):
    ids, mask = encoder_inputs()
    inputs = dict(input_ids=ids.cpu(), attention_mask=mask.cpu())
    if head == "VariantT5Model":
        inputs["decoder_input_ids"] = torch.randint(2, TINY_T5["vocab_size"], (2, 5))
    elif head == "VariantT5ForConditionalGeneration":
        inputs["labels"] = torch.randint(2, TINY_T5["vocab_size"], (2, 5))
    elif head == "VariantT5ForSequenceClassification":
        inputs["labels"] = torch.tensor([0, 1])
    elif head == "VariantT5ForTokenClassification":
        inputs["labels"] = torch.randint(0, 2, ids.shape)
    elif head == "VariantT5ForQuestionAnswering":
        inputs["start_positions"], inputs["end_positions"] = torch.tensor([1, 2]), torch.tensor([3, 4])
    return on_device(inputs)


def head_inputs(head: str, batch: int = 2, seq: int = 7, seed: int = 0) -> dict:
    """Inputs with labels for `head`, the second row right-padded."""
    if family(head) == "t5":
        return _t5_head_inputs(head)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, TINY["vocab_size"], (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1, seq - 2 :] = 0
    inputs = dict(input_ids=ids, attention_mask=mask)
    kind = head.replace("VariantAlbert", "").replace("VariantBert", "")
    if kind == "ForMultipleChoice":
        inputs = {k: v[:, None].expand(-1, 3, -1).contiguous() for k, v in inputs.items()}
        inputs["labels"] = torch.tensor([0, 2][:batch])
    elif kind in ("ForMaskedLM", "LMHeadModel"):
        inputs["labels"] = ids.masked_fill(mask == 0, -100)
    elif kind == "ForPreTraining":
        inputs["labels"] = ids.masked_fill(mask == 0, -100)
        sentence_label = "sentence_order_label" if family(head) == "albert" else "next_sentence_label"
        inputs[sentence_label] = torch.tensor([0, 1][:batch])
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
    if head == "VariantBertLMHeadModel":
        overrides.setdefault("is_decoder", True)
    config = make_config(variant, family(head), **overrides)
    return on_device(getattr(hav, head)(config).eval())


@pytest.fixture(params=list(VARIANTS))
def variant(request):
    return request.param
