"""PEFT (LoRA) on our models, as a peft user does it: `LoraConfig` + `get_peft_model`, a few optimizer steps, the
adapter saved with `save_pretrained` and loaded with `PeftModel.from_pretrained` onto the base checkpoint loaded as
remote code in a process that cannot import this package. What docs/clients.md documents is tested here:

- peft has no default `target_modules` for our model types: `TARGET_MODULES` names them per family, as peft's own
  table does for transformers' BERT, ALBERT and T5 (a projection an attention type lacks is simply not wrapped);
- the variant's own parameters (`...core.*`: talking-heads maps, synthesizer logits and mixture weights) train beside
  LoRA with `modules_to_save=["core"]`, are saved in the adapter and come back on reload;
- `merge_and_unload()` + `save_pretrained` gives an ordinary checkpoint of ours, loadable as remote code;
- peft's limitations with our models, with their exact errors.
"""

import pytest

pytest.importorskip("peft")

import copy
import json
import textwrap

import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from peft.tuners.lora import LoraLayer
from safetensors.torch import load_file

from conftest import FAMILIES, build, family, head_inputs, head_kind
from hf_attn_variants.isolation import run_isolated

# The LoRA targets of each family (docs/clients.md): the upstream names of the query and value projections.
TARGET_MODULES = {"bert": ["query", "value"], "albert": ["query", "value"], "t5": ["q", "v"]}
assert set(TARGET_MODULES) == set(FAMILIES), "one row per family"
# head kind -> (peft task type, the Auto class that loads the base checkpoint as remote code)
TASKS = {
    "ForSequenceClassification": ("SEQ_CLS", "AutoModelForSequenceClassification"),
    "ForConditionalGeneration": ("SEQ_2_SEQ_LM", "AutoModelForSeq2SeqLM"),
}
# (head, variant): talking heads and a synthesizer mixture (random logits, dense, dot product) in every family, and a
# pure synthesizer (no query or key projection: LoRA on the value only)
CASES = [
    (head, variant)
    for head in (
        "VariantBertForSequenceClassification",
        "VariantAlbertForSequenceClassification",
        "VariantT5ForConditionalGeneration",
    )
    for variant in ("talking_heads", "synth_mixture")
] + [("VariantBertForSequenceClassification", "synth_random")]
CASE_IDS = [f"{head}-{variant}" for head, variant in CASES]
STEPS = 6


def lora_config(head: str) -> LoraConfig:
    """The documented call: LoRA on the family's query/value projections, the attention cores trained in full."""
    return LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=TARGET_MODULES[family(head)],
        modules_to_save=["core"],
        task_type=TASKS[head_kind(head)][0],
    )


def _saved_name(name: str) -> str:
    """The key under which `PeftModel.save_pretrained` writes one of the PEFT model's trainable parameters (the
    adapter's name dropped)."""
    return name.replace(".modules_to_save.default.", ".").replace(".default.", ".")


def _is_core(name: str) -> bool:
    return ".core.modules_to_save." in name


def _train(head: str, variant: str, root):
    """Build a base model (weights moved off their init), save it, wrap it in LoRA, take STEPS Adam steps on one fixed
    batch, save the adapter. Returns what the tests check."""
    model = build(head, variant)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    base_dir, adapter_dir = root / "base", root / "adapter"
    model.save_pretrained(base_dir)
    inputs = head_inputs(head)
    torch.save(inputs, root / "inputs.pt")

    base_before = {n: p.detach().clone() for n, p in model.named_parameters()}
    pm = get_peft_model(model, lora_config(head))
    trainable_before = {n: p.detach().clone() for n, p in pm.named_parameters() if p.requires_grad}
    # every parameter goes to the optimizer, as a user's loop might: only peft's requires_grad keeps the base fixed
    optimizer = torch.optim.Adam(pm.parameters(), lr=1e-2)
    pm.train()
    losses = []
    for _ in range(STEPS):
        loss = pm(**inputs).loss
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    pm.eval()
    with torch.no_grad():
        losses.append(pm(**inputs).loss.item())
        logits = pm(**inputs).logits
        with pm.disable_adapter():
            base_logits = pm(**inputs).logits
    pm.save_pretrained(adapter_dir)
    # a standalone checkpoint: LoRA merged into the base, the trained cores in place of the originals
    merged = copy.deepcopy(pm).merge_and_unload()
    assert type(merged) is type(model)
    merged.save_pretrained(root / "merged")
    return dict(
        pm=pm,
        base_before=base_before,
        trainable_before=trainable_before,
        losses=losses,
        logits=logits,
        base_logits=base_logits,
        base_dir=base_dir,
        adapter_dir=adapter_dir,
        merged_dir=root / "merged",
        inputs=root / "inputs.pt",
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("peft")
    runs = {}
    for case_id, (head, variant) in zip(CASE_IDS, CASES):
        (root / case_id).mkdir()
        runs[case_id] = _train(head, variant, root / case_id)
    return runs


# A Hub user's process: transformers and peft, not this package (checked), the base checkpoint as remote code.
RELOADER = textwrap.dedent(
    """
    import json, sys, torch, transformers
    from peft import PeftModel
    try:
        import hf_attn_variants
    except ImportError:
        pass
    else:
        raise SystemExit("hf_attn_variants is importable: the test would prove nothing")
    for job in json.load(open(sys.argv[1])):
        base = getattr(transformers, job["auto"]).from_pretrained(job["base"], trust_remote_code=True)
        assert type(base).__name__ == job["cls"], type(base)
        assert type(base).__module__.startswith("transformers_modules"), type(base).__module__
        model = PeftModel.from_pretrained(base, job["adapter"]).eval()
        with torch.no_grad():
            logits = model(**torch.load(job["inputs"])).logits
        core = {n: p.detach() for n, p in model.named_parameters() if ".core.modules_to_save." in n}
        merged = getattr(transformers, job["auto"]).from_pretrained(job["merged"], trust_remote_code=True).eval()
        with torch.no_grad():
            merged_logits = merged(**torch.load(job["inputs"])).logits
        torch.save({"logits": logits, "core": core, "merged_logits": merged_logits}, job["out"])
        print("reloaded", job["cls"])
    """
)


@pytest.fixture(scope="module")
def reloaded(trained, tmp_path_factory):
    root = tmp_path_factory.mktemp("peft-reload")
    jobs = []
    for case_id, (head, _) in zip(CASE_IDS, CASES):
        run = trained[case_id]
        jobs.append(
            dict(
                auto=TASKS[head_kind(head)][1],
                cls=head,
                base=str(run["base_dir"]),
                adapter=str(run["adapter_dir"]),
                merged=str(run["merged_dir"]),
                inputs=str(run["inputs"]),
                out=str(root / f"{case_id}.pt"),
            )
        )
    (root / "jobs.json").write_text(json.dumps(jobs))
    proc = run_isolated(RELOADER, [root / "jobs.json"], cwd=root)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count("reloaded") == len(jobs), proc.stdout
    return {case_id: torch.load(job["out"]) for case_id, job in zip(CASE_IDS, jobs)}


@pytest.mark.parametrize("fam", list(FAMILIES))
def test_peft_asks_for_target_modules(fam):
    """peft knows target modules only for the model types of its own table; ours (variant_bert, ...) are not in it."""
    head = f"Variant{FAMILIES[fam].prefix}Model"
    with pytest.raises(ValueError, match=r"Please specify `target_modules` or `target_parameters`\s*in `peft_config`"):
        get_peft_model(build(head, "talking_heads"), LoraConfig(r=4))


@pytest.mark.parametrize(
    "variant", ["dot_product", "talking_heads", "synth_random", "synth_mixture", "general_bilinear"]
)
@pytest.mark.parametrize("fam", list(FAMILIES))
def test_target_modules_reach_every_attention_layer(fam, variant):
    """The documented targets wrap, in every attention module (self- and cross-attention), each of the family's
    query/value projections the module has: in self-attention both with talking heads, the value only in a pure
    synthesizer, the query only in general bilinear attention (its keys and values are the memory itself)."""
    head = f"Variant{FAMILIES[fam].prefix}Model"
    pm = get_peft_model(build(head, variant), LoraConfig(r=4, target_modules=TARGET_MODULES[fam]))
    attentions = {n: m for n, m in pm.named_modules() if isinstance(getattr(m, "core", None), torch.nn.Module)}
    assert attentions
    query, value = TARGET_MODULES[fam]
    expected = {"synth_random": {value}, "general_bilinear": {query}}.get(variant, {query, value})
    for name, attention in attentions.items():
        wrapped = {child for child, module in attention.named_children() if isinstance(module, LoraLayer)}
        present = {n for n in (query, value) if isinstance(getattr(attention, n, None), torch.nn.Module)}
        assert wrapped and wrapped == present, name
        # T5's cross-attention is dot product where the variant serves as self-attention only (a synthesizer)
        if not name.endswith("EncDecAttention"):
            assert wrapped == expected, name


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_lora_trains_and_base_stays_frozen(trained, case_id):
    """A few Adam steps on a fixed batch: the loss goes down, every LoRA weight and every parameter of the variant's
    attention cores moves, and no base weight does (they were all handed to the optimizer)."""
    run = trained[case_id]
    assert run["losses"][-1] < run["losses"][0] - 1e-3, run["losses"]
    after = dict(run["pm"].named_parameters())
    lora = [n for n in run["trainable_before"] if ".lora_" in n]
    core = [n for n in run["trainable_before"] if _is_core(n)]
    assert lora and core
    variant = CASES[CASE_IDS.index(case_id)][1]
    maps = {
        "talking_heads": ("pre_softmax_proj", "post_softmax_proj"),
        "synth_mixture": ("random_logits", "mixture_weights"),
        "synth_random": ("random_logits",),
    }[variant]
    assert {n.rsplit(".", 1)[-1] for n in core} >= set(maps)
    for n in lora + core:
        assert not torch.equal(after[n], run["trainable_before"][n]), f"{n} did not train"
    # the base model's own parameters: frozen and unchanged (the cores' originals included)
    base = run["pm"].get_base_model()
    for n, p in base.named_parameters():
        if ".lora_" in n or ".modules_to_save." in n:
            continue
        original = n.replace(".original_module.", ".").replace(".base_layer.", ".")
        assert not p.requires_grad, n
        assert torch.equal(p, run["base_before"][original]), f"base weight {n} changed"


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_adapter_holds_the_variant_maps(trained, case_id):
    """The saved adapter holds every trainable parameter, the attention cores' included, with the trained values."""
    run = trained[case_id]
    saved = load_file(run["adapter_dir"] / "adapter_model.safetensors")
    trainable = {n: p for n, p in run["pm"].named_parameters() if p.requires_grad}
    assert {_saved_name(n) for n in trainable} == set(saved)
    assert any(_is_core(n) for n in trainable)
    for n, p in trainable.items():
        assert torch.equal(saved[_saved_name(n)], p.detach()), n


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_adapter_reloads_onto_remote_code(trained, reloaded, case_id):
    """`PeftModel.from_pretrained` on the base loaded as remote code, without this package, gives the trained model:
    its outputs (which the training moved away from the base's) and its attention cores' parameters."""
    run, back = trained[case_id], reloaded[case_id]
    assert (run["logits"] - run["base_logits"]).abs().max() > 1e-3  # the adapter matters
    torch.testing.assert_close(back["logits"], run["logits"], atol=1e-5, rtol=1e-5)
    trained_core = {n: p.detach() for n, p in run["pm"].named_parameters() if _is_core(n)}
    assert set(back["core"]) == set(trained_core)
    for n, p in trained_core.items():
        assert torch.equal(back["core"][n], p), n


def test_modules_to_save_unfreezes_a_frozen_random_synthesizer():
    """peft's `modules_to_save` makes every parameter of its copy trainable, a fixed random synthesizer's logits
    (`synthesizer_random_trainable=False`) included; turning them off again keeps them fixed, and still saved."""
    head = "VariantBertForSequenceClassification"
    pm = get_peft_model(build(head, "synth_random_frozen"), lora_config(head))
    copies = [p for n, p in pm.named_parameters() if _is_core(n) and n.endswith("random_logits")]
    assert copies and all(p.requires_grad for p in copies)  # peft's behaviour: docs/clients.md says so
    for n, p in pm.named_parameters():  # the documented fix
        if ".core." in n and n.endswith("random_logits"):
            p.requires_grad_(False)
    before = [p.detach().clone() for p in copies]
    optimizer = torch.optim.Adam([p for p in pm.parameters() if p.requires_grad], lr=1e-2)
    pm.train()
    pm(**head_inputs(head)).loss.backward()
    optimizer.step()
    assert all(torch.equal(p, b) for p, b in zip(copies, before))
    saved = [v for k, v in get_peft_model_state_dict(pm).items() if k.endswith("core.random_logits")]
    assert len(saved) == len(copies) and all(torch.equal(s, b) for s, b in zip(saved, before))


def test_target_parameters_cannot_wrap_a_core():
    """peft's `target_parameters` wraps the module that holds the parameter; the attention module then calls the
    core's own methods (`project_query`, ...), which peft's wrapper does not pass on. Use `modules_to_save`."""
    head = "VariantBertForSequenceClassification"
    pm = get_peft_model(
        build(head, "talking_heads"),
        LoraConfig(r=2, target_modules=TARGET_MODULES["bert"], target_parameters=["core.pre_softmax_proj"]),
    )
    with pytest.raises(AttributeError, match="'ParamWrapper' object has no attribute 'project_query'"):
        pm(**head_inputs(head))


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_merged_model_loads_as_remote_code(trained, reloaded, case_id):
    """`merge_and_unload()` + `save_pretrained` gives an ordinary checkpoint of ours (LoRA folded into the weights, the
    trained cores in place of the originals) that loads as remote code without peft's help and gives the trained
    model's outputs."""
    torch.testing.assert_close(reloaded[case_id]["merged_logits"], trained[case_id]["logits"], atol=1e-5, rtol=1e-5)
