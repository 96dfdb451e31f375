"""Saved checkpoints load through AutoModel* with trust_remote_code in a process that cannot import the package."""

import ast
import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import hf_attn_variants as hav
from conftest import ALL_HEADS, FAMILIES, FAMILY_HEADS, VARIANTS, build, family, head_inputs
from hf_attn_variants.isolation import blocker, run_isolated
from remote_loading import auto_class, load_isolated, save_checkpoint

PACKAGE = Path(hav.__file__).parent
MODELS = PACKAGE / "models"  # exactly what checkpoints carry
MODEL_FILES = sorted(p.name for p in MODELS.glob("*.py") if p.name != "__init__.py")


def sibling_imports(name: str) -> set[str]:
    """The files of models/ that `name` imports as `from .sibling import X` (transformers' remote-code rule, which
    also follows an import inside a function or a `try`)."""
    tree = ast.parse((MODELS / name).read_text())
    return {f"{n.module}.py" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module}


def carried(start: str) -> list[str]:
    """The files a checkpoint whose model class lives in `start` carries: `start` and its sibling imports, closed."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(sibling_imports(name))
    return sorted(seen)


REMOTE_FILES = {fam: carried(f"modeling_variant_{fam}.py") for fam in FAMILIES}  # what each family's checkpoint holds
SCANNED = MODEL_FILES


def test_every_head_and_every_variant_loads_without_the_package(tmp_path):
    """Every head of every family (talking heads) and every variant (masked LMs) in one isolated interpreter."""
    cases = [(head, "talking_heads_dynamic") for head in ALL_HEADS]
    cases += [
        (head, v)
        for v in VARIANTS
        for head in ("VariantBertForMaskedLM", "VariantAlbertForMaskedLM", "VariantT5ForConditionalGeneration")
    ]
    jobs, expected = [], []
    for head, variant in cases:
        job, exp = save_checkpoint(tmp_path, head, variant)
        jobs.append(job)
        expected.append(exp)
    load_isolated(tmp_path, jobs)
    for job, exp in zip(jobs, expected):
        got = torch.load(job["out"])
        assert set(got) == set(exp)
        for key in exp:
            torch.testing.assert_close(got[key], exp[key], atol=1e-6, rtol=1e-6, msg=f"{job['path']}: {key}")


def test_models_folder_is_exactly_what_checkpoints_carry():
    """Every file of models/ travels with some family's checkpoint and reaches only files of models/; the set is
    not empty, and each family carries its own modeling and configuration files and none of another family's."""
    assert sorted({name for files in REMOTE_FILES.values() for name in files}) == MODEL_FILES
    for fam, files in REMOTE_FILES.items():
        assert {f"modeling_variant_{fam}.py", f"configuration_variant_{fam}.py", "attention_variants.py"} <= set(files)
        others = [f for f in files if f.endswith(tuple(f"_{other}.py" for other in FAMILIES if other != fam))]
        assert others == [], f"{fam} carries {others}"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize(
    "head",
    [
        "VariantBertForSequenceClassification",
        "VariantAlbertForSequenceClassification",
        "VariantT5ForConditionalGeneration",
    ],
)
def test_saved_folder_holds_the_code_and_a_full_auto_map(tmp_path, head, variant):
    fam = family(head)
    build(head, variant).save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.py")) == REMOTE_FILES[fam]
    for name in REMOTE_FILES[fam]:  # the package's files, as they are
        assert (tmp_path / name).read_bytes() == (MODELS / name).read_bytes(), name
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == f"variant_{fam}"
    heads = FAMILY_HEADS[fam]
    assert set(config["auto_map"]) == {"AutoConfig", *(auto_class(h) for h in heads)}
    for h in heads:
        assert config["auto_map"][auto_class(h)] == f"modeling_variant_{fam}.{h}"
    assert (tmp_path / "model.safetensors").exists()


def test_in_process_auto_classes_without_trust_remote_code(tmp_path):
    build("VariantBertForMaskedLM", "synth_random").save_pretrained(tmp_path)
    from transformers import AutoConfig, AutoModelForMaskedLM

    assert isinstance(AutoConfig.from_pretrained(tmp_path), hav.VariantBertConfig)
    assert isinstance(AutoModelForMaskedLM.from_pretrained(tmp_path), hav.VariantBertForMaskedLM)


OPTIONAL_IMPORTS = {"triton"}  # imported only inside `try: ... except ImportError`, which transformers' check skips


def _optional_import_nodes(tree) -> set:
    """The import statements inside a `try` whose handler catches ImportError."""
    nodes = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in node.handlers
        ):
            nodes.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return nodes


@pytest.mark.parametrize("name", SCANNED)
def test_remote_files_import_only_stdlib_torch_transformers_and_siblings(name):
    tree = ast.parse((MODELS / name).read_text())
    allowed_top = set(sys.stdlib_module_names) | {"torch", "transformers"}
    optional = _optional_import_nodes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                assert top in allowed_top or (top in OPTIONAL_IMPORTS and id(node) in optional), (
                    f"{name}: import {alias.name}"
                )
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                assert node.module.split(".")[0] in allowed_top, f"{name}: from {node.module}"
            else:  # only `from .sibling import X`: remote code copies single-dot sibling modules
                assert node.level == 1 and node.module, f"{name}: relative import must be `from .sibling import`"
                assert f"{node.module}.py" in SCANNED, f"{name}: imports {node.module}, which is not remote code"


def test_the_isolated_harness_cannot_import_the_package():
    """Non-vacuity of every isolated load: inside the harness the package is refused, though it is installed here;
    torch and transformers import."""
    proc = run_isolated("import torch, transformers\nprint('third-party ok')\nimport hf_attn_variants")
    assert "third-party ok" in proc.stdout
    assert proc.returncode != 0 and "ModuleNotFoundError: hf_attn_variants is blocked" in proc.stderr


def test_a_talking_heads_checkpoint_trains_blockwise_where_triton_is_missing(tmp_path):
    """Remote code in an environment without triton (and without this package): the checkpoint loads, a training
    step runs the blockwise core (the default on a CPU) with the eager core's loss, and asking for the Triton kernel
    is refused with an ImportError that says what to install."""
    model = build("VariantBertForMaskedLM", "talking_heads_dynamic", attention_algorithm="eager")
    model.save_pretrained(tmp_path / "ckpt")
    inputs = head_inputs("VariantBertForMaskedLM")
    torch.save(inputs, tmp_path / "inputs.pt")
    model.train()
    expected = model(**inputs).loss.item()
    code = blocker("triton") + textwrap.dedent(
        """
        import sys, torch
        from transformers import AutoModelForMaskedLM
        path, inputs = sys.argv[1], torch.load(sys.argv[2])
        model = AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=True, attention_algorithm="auto").train()
        loss = model(**inputs).loss
        loss.backward()
        print("loss", loss.item(), "triton" in sys.modules)
        model = AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=True, attention_algorithm="triton")
        try:
            model(**inputs)
        except ImportError as error:
            print("refused:", error)
        """
    )
    proc = run_isolated(code, [tmp_path / "ckpt", tmp_path / "inputs.pt"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    loss_line = next(line for line in proc.stdout.splitlines() if line.startswith("loss"))
    _, loss, imported = loss_line.split()
    assert abs(float(loss) - expected) < 1e-5 and imported == "False"
    assert "refused:" in proc.stdout and "pip install triton" in proc.stdout
