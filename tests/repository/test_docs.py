"""The README is a front page: at most 250 lines, linking every page of docs/; every relative link resolves; no doc,
test or source file names a file outside the repository; the README's first example, the training page's own
Trainer script and the unpadding page's packed one run as pasted."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#:]+)(?:#[^)]*)?\)")
# What names a file outside the repository: the design guide the project was once written from (its content is in
# docs/design.md and docs/computation.md now), a folder shared beside the checkout, a home or workspace folder of the
# machine it was written on.
OUTSIDE = re.compile(r"\bDESIGN\.md|(?<![\w/.-])shared(?=/)|(?<![\w.])/(?:work|home|Users|root)/")
CLIMB = re.compile(r"(?:\.\./)+[\w.-]*")  # a relative path that climbs: it must stay inside the repository
# the project's own text: docs, tests, source, scripts, configuration (not data, not recorded results)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".cfg", ".sh", ".txt"}


def test_readme_is_a_front_page_that_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    linked = {Path(target).as_posix() for target in LINK.findall(readme)}
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    assert pages <= linked, sorted(pages - linked)


def test_every_relative_link_of_the_readme_and_docs_resolves():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in LINK.findall(page.read_text()):
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links {target}, which does not exist"


def test_the_readme_first_example_runs_and_its_checkpoint_loads_without_the_package(tmp_path):
    """The first screen's example, as a user pastes it: config -> model -> one training step -> save -> load as
    remote code. Then the saved folder loads in an interpreter that cannot import the package."""
    import os
    import subprocess
    import sys

    from hf_attn_variants.isolation import run_isolated

    readme = (ROOT / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", readme, re.DOTALL).group(1)
    assert "save_pretrained" in example and "trust_remote_code=True" in example
    proc = subprocess.run(
        [sys.executable, "-c", example],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = tmp_path / "my-talking-heads-bert"
    check = run_isolated(
        "import sys, torch\nfrom transformers import AutoModelForMaskedLM\n"
        "model = AutoModelForMaskedLM.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "print(type(model).__module__, model.config.attention_type, model(torch.tensor([[5, 6, 7]])).logits.shape)",
        [saved],
    )
    assert check.returncode == 0, check.stderr[-3000:]
    module, attention_type, *_ = check.stdout.split()
    assert module.startswith("transformers_modules.") and attention_type == "talking_heads"


def test_the_training_pages_own_trainer_script_pretrains_a_talking_heads_t5(tmp_path):
    """docs/training.md's Trainer script of one's own, as pasted, in a folder holding only its text file (what a
    wheel user has: the tokenizer is trained by the package): the package's span-corruption collator feeds a
    talking-heads T5 whose loss falls over its 20 steps, and the saved folder loads as remote code where the package
    cannot be imported."""
    import json
    import os
    import shutil
    import sys

    from hf_attn_variants.isolation import run_isolated

    page = (ROOT / "docs" / "training.md").read_text()
    [script] = [
        block
        for block in re.findall(r"```python\n(.*?)```", page, re.DOTALL)
        if "DataCollatorForT5SpanCorruption(" in block
    ]
    assert "Trainer(" in script and len(script.splitlines()) <= 30
    shutil.copy(ROOT / "examples" / "data" / "devils_dictionary.txt", tmp_path / "my_corpus.txt")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "datasets")}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = tmp_path / "my-talking-heads-t5"
    history = json.loads((saved / "checkpoint-20" / "trainer_state.json").read_text())["log_history"]
    losses = [entry["loss"] for entry in history if "loss" in entry]
    assert len(losses) == 4 and losses[-1] < losses[0] - 0.3, losses
    check = run_isolated(
        "import sys, torch\nfrom transformers import AutoModelForSeq2SeqLM\n"
        "model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "print(type(model).__module__, model.config.attention_type)",
        [saved],
    )
    assert check.returncode == 0, check.stderr[-3000:]
    module, attention_type = check.stdout.split()
    assert module.startswith("transformers_modules.") and attention_type == "talking_heads"


def test_the_unpadding_pages_packed_trainer_script_trains_on_packed_rows(tmp_path):
    """docs/unpadding.md's Trainer script, as pasted, beside only its text file: every batch reaches the model as one
    packed row (restarting position ids, no mask) and the loss falls over its 20 steps."""
    import json
    import os
    import shutil
    import sys

    page = (ROOT / "docs" / "unpadding.md").read_text()
    [script] = [b for b in re.findall(r"```python\n(.*?)```", page, re.DOTALL) if "padding_free=True" in b]
    assert "Trainer(" in script and len(script.splitlines()) <= 30
    shutil.copy(ROOT / "examples" / "data" / "devils_dictionary.txt", tmp_path / "my_corpus.txt")
    spy = (  # every batch the model is called with: no mask, one row, several sequences
        "import hf_attn_variants as hav\n"
        "forward = hav.VariantBertForMaskedLM.forward\n"
        "def checked(self, input_ids=None, attention_mask=None, position_ids=None, **kwargs):\n"
        "    assert attention_mask is None and input_ids.shape[0] == 1 and int((position_ids == 0).sum()) > 1\n"
        "    return forward(self, input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs)\n"
        "hav.VariantBertForMaskedLM.forward = checked\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "datasets")}
    proc = subprocess.run(
        [sys.executable, "-c", spy + script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    history = json.loads((tmp_path / "my-packed-bert" / "checkpoint-20" / "trainer_state.json").read_text())
    losses = [entry["loss"] for entry in history["log_history"] if "loss" in entry]
    assert len(losses) == 4 and losses[-1] < losses[0] - 0.3, losses


def test_every_python_snippet_of_the_readme_and_docs_is_valid_python():
    """Every ```python block of README.md and docs/ (dedented where it sits in a list item) parses: a snippet a user
    pastes is at least Python. The ones that need nothing but this checkout run as pasted in the tests above."""
    import ast
    import textwrap

    blocks = 0
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL):
            blocks += 1
            try:
                ast.parse(textwrap.dedent(block))
            except SyntaxError as error:
                pytest.fail(f"{page.relative_to(ROOT)}: a snippet is not Python ({error.msg}):\n{block[:300]}")
    assert blocks >= 20


def test_every_folder_a_snippet_loads_is_made_by_it_or_by_a_command_just_before():
    """A literal folder a snippet of README.md or docs/ loads (`from_pretrained("...")`) is a placeholder the reader
    fills (`path/to/...`), saved earlier in the same snippet, or named by a command (`python examples/...`) in the
    15 lines before where it is loaded: a reader who pastes the snippets in order knows what to run first."""
    checked = 0
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        for block in re.finditer(r"```python\n(.*?)```", text, re.DOTALL):
            code = block.group(1)
            for load in re.finditer(r"from_pretrained\(\s*[\"']([^\"']+)[\"']", code):
                folder, checked = load.group(1), checked + 1
                saved = re.search(r"save_(?:pretrained|model)\(\s*[\"']" + re.escape(folder), code[: load.start()])
                line = text[: block.start(1) + load.start()].count("\n")
                before = "\n".join(text.splitlines()[max(0, line - 15) : line + 1])
                assert folder.startswith("path/to/") or saved or "python examples/" in before, (
                    f"{page.relative_to(ROOT)}:{line + 1} loads {folder!r}: say which command makes it"
                )
    assert checked >= 8


def project_text_files() -> list[Path]:
    """Every file of the project's own text that git knows of (tracked, or new and not ignored): ignored outputs
    (research runs, virtual environments) are not the project's, nor are data (examples/data) and recorded results."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True
    )
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    paths = [ROOT / name for name in listed.stdout.splitlines()]
    return [
        p
        for p in paths
        if p.is_file()
        and (p.suffix in TEXT_SUFFIXES or p.parent == ROOT / ".ci")
        and not p.is_relative_to(ROOT / "examples" / "data")
    ]


def outside_references(path: Path, text: str) -> list[str]:
    """`path:line: what` for each name of a file outside the repository in `text` (the file `path`'s)."""
    found = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        found += [f"{path.relative_to(ROOT)}:{lineno}: {m.group(0)}" for m in OUTSIDE.finditer(line)]
        for climb in CLIMB.findall(line):
            if not (path.parent / climb).resolve().is_relative_to(ROOT):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {climb} (leaves the repository)")
    return found


def test_no_doc_test_or_source_file_names_a_file_outside_the_repository():
    files = [f for f in project_text_files() if f != Path(__file__).resolve()]  # this file names them, as examples
    assert {
        "README.md",
        "docs/design.md",
        "tests/models/test_copies.py",
        "hf_attn_variants/models/modeling_variant_t5.py",
        ".ci/run",
        "pyproject.toml",
        ".pre-commit-config.yaml",
    } <= {f.relative_to(ROOT).as_posix() for f in files}
    found = [ref for f in files for ref in outside_references(f, f.read_text(errors="replace"))]
    assert found == [], "say it in the project's own words (docs/design.md):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "the layout (DESIGN.md §3)",
        "see ../shared/DESIGN.md",
        "read /work/shared/notes.txt",
        "[guide](../../guide.md)",
        "sys.path.insert(0, '/home/me/hf')",
    ],
)
def test_a_reference_outside_the_repository_is_found(line):
    assert outside_references(ROOT / "docs" / "design.md", f"text\n{line}\n") != []


@pytest.mark.parametrize("line", ["[cards](../model_cards/README.md)", "--output_dir /tmp/out", "shared weights"])
def test_a_reference_inside_the_repository_is_not(line):
    assert outside_references(ROOT / "docs" / "design.md", line) == []
