"""The package's metadata, without building it: one version (`hf_attn_variants.__version__`, which pyproject.toml and
the installed distribution read), project URLs and classifiers, a changelog section for the version, and CI's wheel
check (`.ci/wheel`: the build, its contents and a fresh install, too slow for the suite) called by `.ci/run`."""

import ast
import importlib.metadata
import re
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

import hf_attn_variants

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the test extra installs tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_has_one_source_that_pyproject_and_the_installed_metadata_read():
    project, setuptools = PYPROJECT["project"], PYPROJECT["tool"]["setuptools"]
    assert "version" not in project and "version" in project["dynamic"]
    assert setuptools["dynamic"]["version"] == {"attr": "hf_attn_variants.__version__"}
    # a string literal at the top level of __init__.py: setuptools reads it without importing the package (so building
    # needs neither torch nor transformers)
    init = ast.parse((ROOT / "hf_attn_variants" / "__init__.py").read_text())
    literals = [
        node.value.value
        for node in init.body
        if isinstance(node, ast.Assign)
        and any(getattr(target, "id", None) == "__version__" for target in node.targets)
        and isinstance(node.value, ast.Constant)
    ]
    assert literals == [hf_attn_variants.__version__]
    assert str(Version(hf_attn_variants.__version__)) == hf_attn_variants.__version__  # canonical PEP 440
    assert importlib.metadata.version("hf-attn-variants") == hf_attn_variants.__version__, (
        "the installed distribution has another version than the checkout: reinstall (pip install -e .)"
    )


def test_pyproject_has_project_urls_classifiers_and_a_license_expression():
    project = PYPROJECT["project"]
    assert set(project["urls"]) == {"Homepage", "Documentation", "Repository", "Changelog", "Issues"}
    assert all(url.startswith("https://") for url in project["urls"].values())
    assert project["urls"]["Changelog"].endswith("/CHANGELOG.md")
    classifiers = project["classifiers"]
    for prefix in (
        "Development Status :: ",
        "Intended Audience :: ",
        "Operating System :: ",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ):
        assert any(c.startswith(prefix) for c in classifiers), prefix
    # the Python versions listed are the ones requires-python admits, from its floor up
    listed = sorted(
        Version(c.rsplit(" ", 1)[1])
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert [str(v) for v in listed] == ["3.10", "3.11", "3.12", "3.13"]
    assert all(v in SpecifierSet(project["requires-python"]) for v in listed)
    assert Version("3.9") not in SpecifierSet(project["requires-python"])
    # the license is an SPDX expression (PEP 639); setuptools refuses a "License ::" classifier beside it
    assert project["license"] == "Apache-2.0" and "Apache License" in (ROOT / "LICENSE").read_text()
    assert not any(c.startswith("License ::") for c in classifiers)


def test_changelog_has_an_unreleased_section_then_the_current_version():
    headings = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[0] == "Unreleased"
    assert hf_attn_variants.__version__ in headings
    releases = [Version(v) for v in headings[1:]]
    assert releases == sorted(releases, reverse=True)  # newest first


def test_ci_runs_the_wheel_check_after_the_install_and_before_the_suite():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    install = next(i for i, line in enumerate(lines) if line.startswith("python -m pip install -q -e "))
    suite = next(i for i, line in enumerate(lines) if "pytest tests" in line)
    assert install < lines.index(".ci/wheel") < suite
    script = ROOT / ".ci" / "wheel"
    assert script.stat().st_mode & 0o111 and "set -euo pipefail" in script.read_text()
