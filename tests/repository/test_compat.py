"""Version compatibility: the supported transformers range is declared once, refused below, and really works at its
lowest release.

The round trip needs a second virtual environment with the lowest supported transformers: `.ci/compat` builds it and
names its interpreter in `HAV_COMPAT_PYTHON` (and a directory holding a release just below the range in
`HAV_COMPAT_BELOW`). Without them those tests are skipped; the refusal logic is also checked here in-process with a
patched `transformers.__version__`.
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import hf_attn_variants as hav
from conftest import VARIANTS, build, encoder_inputs
from hf_attn_variants.models.configuration_variant_attention import SUPPORTED_TRANSFORMERS
from remote_loading import load_isolated, save_checkpoint

ROOT = Path(hav.__file__).parent.parent
LOWEST = re.fullmatch(r"transformers>=([\d.]+),<6", SUPPORTED_TRANSFORMERS).group(1)
COMPAT_PYTHON = os.environ.get("HAV_COMPAT_PYTHON")
BELOW = os.environ.get("HAV_COMPAT_BELOW")
needs_compat = pytest.mark.skipif(
    not COMPAT_PYTHON, reason="no lowest-version environment: run .ci/compat (sets HAV_COMPAT_PYTHON)"
)
needs_below = pytest.mark.skipif(
    not (COMPAT_PYTHON and BELOW),
    reason="no transformers release below the range: run .ci/compat (sets HAV_COMPAT_PYTHON and HAV_COMPAT_BELOW)",
)
# one checkpoint per family and attention type (BERT: an encoder and a decoder); the decoders also generate
COMPAT_HEADS = [
    "VariantBertForMaskedLM",
    "VariantBertLMHeadModel",
    "VariantAlbertForMaskedLM",
    "VariantT5ForConditionalGeneration",
]

# The isolated loader of test_remote_code, plus greedy generation and the transformers version it ran under.
LOADER = textwrap.dedent(
    """
    import json, sys, torch, transformers
    try:
        import hf_attn_variants
    except ImportError:
        pass
    else:
        raise SystemExit("hf_attn_variants is importable: the test would prove nothing")
    jobs = json.load(open(sys.argv[1]))
    for job in jobs:
        model = getattr(transformers, job["auto"]).from_pretrained(job["path"], trust_remote_code=True).eval()
        assert type(model).__name__ == job["cls"], (type(model).__name__, job["cls"])
        with torch.no_grad():
            out = {k: v for k, v in model(**torch.load(job["inputs"])).items() if isinstance(v, torch.Tensor)}
            if "generate" in job:
                out["generated"] = model.generate(**torch.load(job["generate"]), **job["generate_kwargs"])
        out["transformers_version"] = transformers.__version__
        torch.save(out, job["out"])
    print("loaded", len(jobs))
    """
)
# greedy for the BERT decoder, beam search (cache reordering) for T5
GENERATE_KWARGS = {
    "VariantBertLMHeadModel": dict(max_new_tokens=6, do_sample=False, num_beams=1, use_cache=True),
    "VariantT5ForConditionalGeneration": dict(max_new_tokens=6, do_sample=False, num_beams=2, use_cache=True),
}


def _pyproject_transformers() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    return re.search(r'"(transformers[<>=!~][^"]*)"', text).group(1)  # the requirement, not the keyword


def test_one_declared_range():
    """pyproject.toml, the import-time check and .ci/compat name the same range and lowest release."""
    assert _pyproject_transformers() == SUPPORTED_TRANSFORMERS
    assert re.search(rf"^LOWEST={re.escape(LOWEST)}(\.0)?\s", (ROOT / ".ci/compat").read_text(), re.MULTILINE)


# One fresh interpreter tries every case in turn (a refused import leaves nothing behind in sys.modules):
# transformers claims each `version`, then the package is imported, or a saved checkpoint is loaded through remote
# code with the package blocked. Prints one line per case: "<case> ok" or "<case> <exception type>: <message>".
PATCHED_VERSIONS = textwrap.dedent(
    """
    import sys, warnings, transformers
    class Block:
        active = False
        def find_spec(self, name, path=None, target=None):
            if self.active and name.split('.')[0] == 'hf_attn_variants':
                raise ModuleNotFoundError(name)
    block = Block()
    sys.meta_path.insert(0, block)
    warnings.simplefilter("always")
    for case, version, remote in [("package-4.57.6", "4.57.6", False), ("package-5.13.1", "5.13.1", False),
                                  ("remote-5.13.1", "5.13.1", True), ("package-6.0.0", "6.0.0", False)]:
        transformers.__version__ = version
        block.active = remote
        try:
            with warnings.catch_warnings(record=True) as caught:
                if remote:
                    transformers.AutoModelForMaskedLM.from_pretrained(sys.argv[1], trust_remote_code=True)
                else:
                    import hf_attn_variants
            print(case, "ok", *(str(w.message) for w in caught if "hf-attn-variants" in str(w.message)))
        except Exception as err:
            print(case, f"{type(err).__name__}: {err}")
    """
)


@pytest.fixture(scope="module")
def patched_versions(tmp_path_factory) -> dict[str, str]:
    path = tmp_path_factory.mktemp("checkpoint")
    build("VariantBertForMaskedLM", "talking_heads").save_pretrained(path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(path / "modules")}
    proc = subprocess.run(
        [sys.executable, "-c", PATCHED_VERSIONS, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines())


@pytest.mark.parametrize("case", ["package-4.57.6", "package-5.13.1", "remote-5.13.1"])
def test_version_below_the_range_is_refused_at_import(patched_versions, case):
    """The package and remote code alone (package blocked: the check sits in the module every remote file imports)."""
    version = case.split("-")[1]
    assert patched_versions[case] == (
        f"ImportError: hf-attn-variants models need {SUPPORTED_TRANSFORMERS}, found transformers {version}. "
        f"Upgrade with: pip install '{SUPPORTED_TRANSFORMERS}'. (transformers 4.x cannot load these models: they are "
        "built on the v5 model API.)"
    )


def test_version_above_the_range_warns_but_loads(patched_versions):
    assert patched_versions["package-6.0.0"].startswith("ok hf-attn-variants models are tested with ")
    assert f"{SUPPORTED_TRANSFORMERS}, found transformers 6.0.0" in patched_versions["package-6.0.0"]


@needs_compat
def test_saved_with_newest_loads_with_lowest(tmp_path):
    """Checkpoints saved here (newest transformers) load through trust_remote_code under the lowest supported release
    without the package, with the same outputs and generated tokens: every family, every attention type."""
    jobs, expected = [], []
    for head in COMPAT_HEADS:
        for variant in VARIANTS:
            model = build(head, variant)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.01 * torch.randn_like(p))
            job, exp = save_checkpoint(tmp_path, head, variant, model)
            if head in GENERATE_KWARGS:
                ids, mask = encoder_inputs(seed=1)
                if head == "VariantBertLMHeadModel":  # a prompt without padding
                    ids, mask = ids[:, :4], mask[:, :4]
                torch.save(dict(input_ids=ids, attention_mask=mask), Path(job["path"]) / "generate.pt")
                job.update(generate=str(Path(job["path"]) / "generate.pt"), generate_kwargs=GENERATE_KWARGS[head])
                with torch.no_grad():
                    exp["generated"] = model.generate(input_ids=ids, attention_mask=mask, **GENERATE_KWARGS[head])
            jobs.append(job)
            expected.append(exp)
    load_isolated(tmp_path, jobs, python=COMPAT_PYTHON, loader=LOADER)
    for job, exp in zip(jobs, expected):
        got = torch.load(job["out"])
        assert got.pop("transformers_version").startswith(LOWEST), "the compat environment is not the lowest release"
        assert set(got) == set(exp), job["path"]
        for key in exp:
            if key == "generated":
                assert torch.equal(got[key], exp[key]), f"{job['path']}: generated tokens differ"
            else:
                torch.testing.assert_close(got[key], exp[key], atol=1e-5, rtol=1e-5, msg=f"{job['path']}: {key}")


@needs_below
def test_real_release_below_the_range_is_refused(tmp_path):
    """A real transformers just below the range: the package and a remote-code checkpoint are refused at import."""
    build("VariantT5ForConditionalGeneration", "synth_mixture").save_pretrained(tmp_path)
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {BELOW!r})
        import transformers
        print("transformers", transformers.__version__)
        for attempt in ("package", "remote"):
            try:
                if attempt == "package":
                    import hf_attn_variants
                else:
                    transformers.AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)
            except ImportError as err:
                print(attempt, "refused:", err)
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    proc = subprocess.run([COMPAT_PYTHON, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    version = lines[0].split()[1]
    assert tuple(int(p) for p in version.split(".")[:2]) < tuple(int(p) for p in LOWEST.split(".")[:2]), version
    for attempt in ("package", "remote"):
        assert any(
            line.startswith(
                f"{attempt} refused: hf-attn-variants models need {SUPPORTED_TRANSFORMERS}, "
                f"found transformers {version}"
            )
            for line in lines
        ), proc.stdout
