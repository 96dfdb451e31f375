"""The README is a front page: at most 250 lines, linking every page of docs/; every relative link resolves."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#:]+)(?:#[^)]*)?\)")


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
    proc = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
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
