"""What the installed package holds: no path of the repository (the release tooling that reads experiments/ and
model_cards/ lives in utils/, which is not installed), and a command whose every subcommand runs from any folder."""

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hf_attn_variants
from hf_attn_variants import cli
from hf_attn_variants._moved import MOVED_MODULES

ROOT = Path(__file__).resolve().parents[2]
# the repository's folders that an installed package does not have (a wheel holds hf_attn_variants/ only)
REPOSITORY_PATHS = ("experiments/", "examples/", "model_cards/records", "utils/")


def repository_paths(path: Path) -> list[str]:
    """`file:line: text` for each string literal of the Python file `path` (docstrings and f-strings included) that
    names a repository path."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [f"{path.name}:{node.lineno}: {name}" for name in REPOSITORY_PATHS if name in node.value]
    return found


def test_the_package_names_no_repository_path():
    files = sorted((ROOT / "hf_attn_variants").rglob("*.py"))
    assert {"cli.py", "publish.py", "modeling_variant_bert.py"} <= {f.name for f in files}
    assert [ref for f in files for ref in repository_paths(f)] == []
    # the scan finds them where they are: the release tool reads the research results and the run records
    found = [ref for path in sorted((ROOT / "utils").glob("*.py")) for ref in repository_paths(path)]
    assert any("experiments/" in ref for ref in found) and any("model_cards/records" in ref for ref in found)


def test_the_release_tooling_is_not_in_the_package():
    assert not (Path(hf_attn_variants.__file__).parent / "release.py").exists()
    commands = cli._parser()._subparsers._group_actions[0].choices
    assert "cards" not in commands and "record" not in commands
    assert "--release" not in commands["publish"].format_help()


# Runs in an empty folder: every subcommand's --help, and the exit status of each.
HELP = textwrap.dedent(
    """
    import contextlib, io, json
    from hf_attn_variants import cli

    status = {}
    for command in [None, *cli._parser()._subparsers._group_actions[0].choices]:
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            try:
                cli.main([command, "--help"] if command else ["--help"])
            except SystemExit as done:
                status[command or ""] = (done.code, text.getvalue().startswith("usage: hf-attn-variants"))
    print(json.dumps(status))
    """
)


def test_every_subcommand_answers_help_from_an_empty_folder(tmp_path):
    proc = subprocess.run([sys.executable, "-c", HELP], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"", "publish", "convert", "export"} <= set(status)
    assert all(value == [0, True] for value in status.values()), status
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran


def test_the_wings_import_downwards_only():
    """models/ imports nothing of the package outside itself; training/ imports models/ and the tables it is
    built from (families, presets, attention_tools), never hub/ nor the command line; hub/ imports neither the
    command line nor the scripts' runtime."""
    allowed = {
        "models": {"models"},
        "training": {"models", "training", "families", "presets", "attention_tools"},
        "hub": {"models", "training", "hub", "families", "attention_tools", "convert", "isolation"},
    }
    for wing, may in allowed.items():
        for path in sorted((ROOT / "hf_attn_variants" / wing).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level:
                    target = wing if node.level == 1 else (node.module or "").split(".")[0]
                    assert target in may, f"{wing}/{path.name} imports {'.' * node.level}{node.module}"
                if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
                    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                    assert not any(n.split(".")[0] == "hf_attn_variants" for n in names), f"{wing}/{path.name}"


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_the_0_1_0_module_paths_import_with_a_warning_naming_the_new_one(old):
    """Each module path of 0.1.0 still imports, as the module at its new path (the same object), with a
    FutureWarning that names that path; read as an attribute of the package too. A split module reads every public
    name of the modules it became."""
    import importlib
    import sys

    moved = MOVED_MODULES[old]
    new = [f"hf_attn_variants.{part}" for part in ((moved,) if isinstance(moved, str) else moved)]
    sys.modules.pop(f"hf_attn_variants.{old}", None)
    with pytest.warns(FutureWarning, match=f"`hf_attn_variants.{old}` moved to `{new[0]}`"):
        module = importlib.import_module(f"hf_attn_variants.{old}")
    parts = [importlib.import_module(name) for name in new]
    if len(parts) == 1:
        assert module is parts[0] and module.__name__ == module.__spec__.name == new[0]
    else:
        for part in parts:  # its public names, or what it defines
            defined = [n for n, v in vars(part).items() if getattr(v, "__module__", None) == part.__name__]
            names = getattr(part, "__all__", None) or [n for n in defined if not n.startswith("_")]
            assert names and all(getattr(module, name) is getattr(part, name) for name in names)
        with pytest.raises(AttributeError):
            module.no_such_name
    assert not (ROOT / "hf_attn_variants" / f"{old}.py").exists()  # a path that only the finder answers
    sys.modules.pop(f"hf_attn_variants.{old}", None)
    delattr(hf_attn_variants, old) if old in vars(hf_attn_variants) else None
    with pytest.warns(FutureWarning, match=f"moved to `{new[0]}`"):
        assert getattr(hf_attn_variants, old).__name__ in (new[0], f"hf_attn_variants.{old}")


def test_a_0_1_0_import_in_a_fresh_process_warns_at_the_users_line(tmp_path):
    script = tmp_path / "old_paths.py"
    script.write_text(
        "from hf_attn_variants.data_collators import MaskedLMCollator\nprint(MaskedLMCollator.__module__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "always", str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "hf_attn_variants.training.data_collators"
    assert f"{script}:1: FutureWarning: `hf_attn_variants.data_collators` moved to" in proc.stderr
