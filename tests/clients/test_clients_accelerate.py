"""Big-model loading as accelerate and transformers do it: `device_map` / `low_cpu_mem_usage` (the model is built on
the meta device and filled from the checkpoint), accelerate's `infer_auto_device_map` with our `_no_split_modules`,
building on the meta device, and transformers' common checks that a model built from nothing initialises every
weight (`test_can_init_all_missing_weights`) and reports every missing one (`test_model_weights_reload_no_missing_tied_
weights`), written again for our families. CPU only: the split is between "cpu" and "disk" offload.
"""

import collections
import contextlib
import copy
import itertools
import json
import re
import textwrap

import pytest
import torch
from safetensors.torch import save_file
from transformers import PreTrainedModel, set_seed

import hf_attn_variants as hav
from conftest import ALL_HEADS, FAMILY_HEADS, SAME_WEIGHTS, VARIANTS, family, head_inputs, make_config
from hf_attn_variants.isolation import run_isolated

accelerate = pytest.importorskip("accelerate")
from accelerate import infer_auto_device_map  # noqa: E402
from accelerate.utils import compute_module_sizes  # noqa: E402

ONE_HEAD = {
    "bert": "VariantBertForMaskedLM",
    "albert": "VariantAlbertForMaskedLM",
    "t5": "VariantT5ForConditionalGeneration",
}
AUTO_CLASS = {"bert": "AutoModelForMaskedLM", "albert": "AutoModelForMaskedLM", "t5": "AutoModelForSeq2SeqLM"}
# a few types for "every head": the dot product, a type with every parameter kind talking heads has, a mixture of
# synthesizers (dense + random + dot product) and the bilinear form
FEW_TYPES = ["dot_product", "talking_heads_dynamic", "synth_mixture", "general_bilinear"]
DEPTH = {"bert": dict(num_hidden_layers=4), "albert": dict(num_hidden_layers=4), "t5": dict(num_layers=4)}
# the unit a family repeats with depth, which accelerate must place whole (`_no_split_modules`)
LAYER = {"bert": "VariantBertLayer", "albert": "VariantAlbertLayer", "t5": "VariantT5Block"}


def _every_tensor(model):
    """(name, tensor) of every parameter and buffer, tied ones under each of their names."""
    return itertools.chain(model.named_parameters(remove_duplicate=False), model.named_buffers(remove_duplicate=False))


def _on_meta(model) -> list[str]:
    return [name for name, t in _every_tensor(model) if t.device.type == "meta"]


def _trained_like(head: str, variant: str, **overrides):
    """A model of `head` whose every weight is off its initial value (identity talking-heads maps, zero biases and
    unit norms would reload "correctly" from a fresh init), in eval mode."""
    torch.manual_seed(0)
    config = make_config(variant, family(head), is_decoder=head.endswith("LMHeadModel"), **overrides)
    model = getattr(hav, head)(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _outputs(model, inputs) -> dict:
    with torch.no_grad():
        out = model(**inputs)
    return {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}


def _assert_same_outputs(got: dict, expected: dict):
    assert got.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], **SAME_WEIGHTS, msg=key)


# ---------------------------------------------------------------------------------------------------------------------
# device_map / low_cpu_mem_usage
# ---------------------------------------------------------------------------------------------------------------------

# every head, each with an attention type of its own (cycling through VARIANTS, so every type is loaded somewhere)
LOAD_CASES = [(head, variant) for head, variant in zip(ALL_HEADS, itertools.cycle(VARIANTS))]


@pytest.mark.parametrize("device_map", ["auto", "cpu"])
@pytest.mark.parametrize("head,variant", LOAD_CASES, ids=[f"{h}-{v}" for h, v in LOAD_CASES])
def test_device_map_loads_the_saved_model(tmp_path, head, variant, device_map):
    model = _trained_like(head, variant)
    inputs = head_inputs(head)
    expected = _outputs(model, inputs)
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path, device_map=device_map, low_cpu_mem_usage=True).eval()
    assert _on_meta(loaded) == []
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    _assert_same_outputs(_outputs(loaded, inputs), expected)


# Runs where the package cannot be imported (`run_isolated`), as a Hub user has our checkpoints: each job loads a
# saved model through its Auto class with a device map, and T5's remote class also builds from nothing.
REMOTE_LOADER = textwrap.dedent(
    """
    import copy, json, sys, torch, transformers
    from transformers import PreTrainedModel, set_seed
    jobs = json.load(open(sys.argv[1]))
    for job in jobs:
        auto = getattr(transformers, job["auto"])
        model = auto.from_pretrained(job["path"], trust_remote_code=True, device_map="auto", low_cpu_mem_usage=True)
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        assert not [n for n, t in model.state_dict().items() if t.device.type == "meta"]
        with torch.no_grad():
            out = model.eval()(**torch.load(job["inputs"]))
        torch.save({k: v for k, v in out.items() if isinstance(v, torch.Tensor)}, job["out"])
        if job["from_nothing"]:  # seeded_initialisation and _assert_init_from_nothing_equals_init, in short
            initialize = PreTrainedModel._initialize_weights
            def seeded(*args, **kwargs):
                set_seed(42)
                return initialize(*args, **kwargs)
            PreTrainedModel._initialize_weights = seeded
            config = transformers.AutoConfig.from_pretrained(job["path"], trust_remote_code=True)
            a = type(model)(copy.deepcopy(config))
            b = type(model).from_pretrained(None, config=copy.deepcopy(config), state_dict={})
            PreTrainedModel._initialize_weights = initialize
            every = list(b.named_parameters(remove_duplicate=False)) + list(b.named_buffers(remove_duplicate=False))
            assert not [n for n, t in every if t.device.type == "meta"], "left on meta"
            sa, sb = a.state_dict(), b.state_dict()
            assert sorted(sa) == sorted(sb)
            assert not [k for k in sa if not torch.equal(sa[k], sb[k])]
    print("loaded", len(jobs))
    """
)


def test_device_map_and_init_through_remote_code(tmp_path):
    """Each family through its Auto class with `trust_remote_code=True`, where only the checkpoint's code exists:
    `device_map="auto"` gives the saved model's outputs; T5's remote class builds from nothing as `cls(config)`
    does (where transformers 5.25 left the tied embedding on the meta device)."""
    jobs, expected = [], {}
    for fam, head in ONE_HEAD.items():
        model = _trained_like(head, "talking_heads_dynamic" if fam != "albert" else "synth_mixture")
        inputs = head_inputs(head)
        expected[fam] = _outputs(model, inputs)
        model.save_pretrained(tmp_path / fam)
        torch.save(inputs, tmp_path / f"{fam}-inputs.pt")
        jobs.append(
            dict(
                auto=AUTO_CLASS[fam],
                path=str(tmp_path / fam),
                inputs=str(tmp_path / f"{fam}-inputs.pt"),
                out=str(tmp_path / f"{fam}-out.pt"),
                from_nothing=fam == "t5",
            )
        )
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    proc = run_isolated(REMOTE_LOADER, [tmp_path / "jobs.json"], cwd=tmp_path)
    assert proc.returncode == 0 and f"loaded {len(jobs)}" in proc.stdout, proc.stderr[-4000:]
    for fam in ONE_HEAD:
        _assert_same_outputs(torch.load(tmp_path / f"{fam}-out.pt"), expected[fam])


def _split_inside(device_map: dict, model, classes) -> list[str]:
    """The keys of `device_map` strictly inside a module of one of `classes` (that module is split across devices)."""
    unsplittable = [name for name, module in model.named_modules() if type(module).__name__ in set(classes)]
    return [key for key in device_map for name in unsplittable if key.startswith(name + ".")]


def _budget_that_splits_a_layer(model, total: int) -> dict:
    """The largest "cpu" budget (a fraction of the model's size, the rest on "disk") at which accelerate, told nothing
    about the layers, cuts one of them in two: the budget at which `_no_split_modules` has to matter.

    Large budgets first: below the size of the embeddings and the MLM head, accelerate also cuts that head, a module
    with a parameter of its own (the output bias) beside its children, and `dispatch_model` then leaves the bias on
    the meta device ("device_map keys do not match any submodules"); transformers' own BertForMaskedLM fails there
    too (an IndexError in accelerate's `get_module_size_with_ties`). That is accelerate's limit, not the layers'."""
    for percent in range(70, 25, -5):
        max_memory = {"cpu": total * percent // 100, "disk": 10 * total}
        control = infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=[])
        if _split_inside(control, model, model._no_split_modules):
            return max_memory
    raise AssertionError("no budget made accelerate split a layer: the control proves nothing")


@pytest.mark.parametrize("fam", list(ONE_HEAD))
def test_no_split_modules_keep_each_layer_on_one_device(tmp_path, fam):
    head = ONE_HEAD[fam]
    model = _trained_like(head, "talking_heads", **DEPTH[fam])
    layer_class = list(model._no_split_modules)
    assert layer_class == [LAYER[fam]]
    layers = [name for name, m in model.named_modules() if type(m).__name__ in layer_class]
    assert len(layers) >= 4  # the family's repeated unit, found in the model
    max_memory = _budget_that_splits_a_layer(model, compute_module_sizes(model)[""])
    device_map = infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=layer_class)
    assert set(device_map.values()) == {"cpu", "disk"}  # the model does not fit: it is split ...
    assert _split_inside(device_map, model, layer_class) == []  # ... between layers, never inside one
    # and loads so: the disk part offloaded (accelerate's hooks bring each layer in), the outputs unchanged
    inputs = head_inputs(head)
    expected = _outputs(model, inputs)
    model.save_pretrained(tmp_path / "saved")
    loaded = (
        type(model)
        .from_pretrained(tmp_path / "saved", device_map=device_map, offload_folder=tmp_path / "offload")
        .eval()
    )
    assert loaded.hf_device_map == device_map
    _assert_same_outputs(_outputs(loaded, inputs), expected)


# ---------------------------------------------------------------------------------------------------------------------
# the meta device
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fam", list(FAMILY_HEADS))
def test_every_head_and_type_builds_on_meta(fam):
    """Every head of the family, with every attention type, builds under `torch.device("meta")` with nothing
    materialised, and with the parameters and buffers (names and shapes) of the same model built on the CPU."""
    for variant, head in itertools.product(VARIANTS, FAMILY_HEADS[fam]):
        config = make_config(variant, fam, is_decoder=head.endswith("LMHeadModel"))
        with torch.device("meta"):
            model = getattr(hav, head)(copy.deepcopy(config))
        on_cpu = getattr(hav, head)(copy.deepcopy(config))
        assert _on_meta(model) == [name for name, _ in _every_tensor(model)], (head, variant)
        assert {n: t.shape for n, t in _every_tensor(model)} == {n: t.shape for n, t in _every_tensor(on_cpu)}, (
            head,
            variant,
        )


# ---------------------------------------------------------------------------------------------------------------------
# transformers' common tests, ours: a model from nothing initialises every weight, and says what is missing
# ---------------------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def seeded_initialisation(seed: int = 42):
    """Every initialisation pass (`PreTrainedModel._initialize_weights`, which `post_init` and `from_pretrained` both
    run on the whole model) starts from the same seed, so two models initialised alike are equal bit for bit."""
    initialize = PreTrainedModel._initialize_weights

    def seeded(*args, **kwargs):
        set_seed(seed)
        return initialize(*args, **kwargs)

    PreTrainedModel._initialize_weights = seeded
    try:
        yield
    finally:
        PreTrainedModel._initialize_weights = initialize


def _assert_init_from_nothing_equals_init(cls, config):
    """`cls(config)` and `cls.from_pretrained(None, config=config, state_dict={})` (built on meta, every weight
    missing, so materialised and set by `_init_weights` alone) give the same state dict, weight for weight."""
    with seeded_initialisation():
        from_init = cls(copy.deepcopy(config))
        from_nothing = cls.from_pretrained(None, config=copy.deepcopy(config), state_dict={})
    assert _on_meta(from_nothing) == [], "left on the meta device (a tied weight or a buffer nobody initialises)"
    expected, got = from_init.state_dict(), from_nothing.state_dict()
    assert sorted(got) == sorted(expected)
    differ = [name for name, tensor in expected.items() if not torch.equal(got[name], tensor)]
    assert differ == [], f"_init_weights does not reproduce __init__ for {differ}"
    buffers = dict(from_init.named_buffers())  # non-persistent buffers are not in the state dict
    for name, buffer in from_nothing.named_buffers():
        assert torch.equal(buffer, buffers[name]), name


INIT_CASES = sorted(
    {(head, variant) for head in ALL_HEADS for variant in FEW_TYPES}
    | {(ONE_HEAD[fam], variant) for fam in FAMILY_HEADS for variant in VARIANTS},
    key=lambda c: (ALL_HEADS.index(c[0]), list(VARIANTS).index(c[1])),
)


@pytest.mark.parametrize("head,variant", INIT_CASES, ids=[f"{h}-{v}" for h, v in INIT_CASES])
def test_can_init_all_missing_weights(head, variant):
    config = make_config(variant, family(head), is_decoder=head.endswith("LMHeadModel"))
    _assert_init_from_nothing_equals_init(getattr(hav, head), config)


RELOAD_CASES = [
    (head, variant) for head, variant in zip(ALL_HEADS, itertools.cycle(["talking_heads_dynamic", "synth_mixture"]))
]


@pytest.mark.parametrize("head,variant", RELOAD_CASES, ids=[f"{h}-{v}" for h, v in RELOAD_CASES])
def test_reload_without_weights_reports_every_missing_key(tmp_path, head, variant):
    """A checkpoint whose weights file holds none of the model's weights: loading reports every parameter and
    persistent buffer as missing, names nothing that is not one of them, and leaves nothing on the meta device. A
    tied group counts as reported when one of its names is (transformers reports the group under its source or its
    copies)."""
    model = getattr(hav, head)(make_config(variant, family(head), is_decoder=head.endswith("LMHeadModel")))
    model.save_pretrained(tmp_path)
    save_file({"tensor": torch.tensor([1, 2])}, tmp_path / "model.safetensors", metadata={"format": "pt"})
    reloaded, info = type(model).from_pretrained(tmp_path, output_loading_info=True)
    assert _on_meta(reloaded) == []
    assert set(info["unexpected_keys"]) == {"tensor"}
    missing = set(info["missing_keys"])
    state = reloaded.state_dict()
    persistent = {name for name, _ in _every_tensor(reloaded) if name in state}
    by_storage = collections.defaultdict(set)
    for name, tensor in state.items():
        by_storage[(tensor.untyped_storage().data_ptr(), tensor.shape)].add(name)
    groups = [names for names in by_storage.values() if len(names) > 1]
    extra = missing - {name for name, _ in _every_tensor(reloaded)}
    assert extra == set(), f"reported missing but not a weight: {extra}"
    for names in groups:  # tied: any one name stands for all
        if names & missing:
            missing |= names
    ignored = {
        name
        for name in persistent
        for pattern in (reloaded._keys_to_ignore_on_load_missing or [])
        if re.search(pattern, name)
    }
    assert persistent - missing == ignored, f"missing from the file but not reported: {persistent - missing}"
