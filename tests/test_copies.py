"""Code one family keeps as a copy of another's stays equal to it, as transformers checks its "# Copied from" comments.

The families keep their embeddings, layers and heads readable top to bottom (DESIGN.md §5); what they share beyond that
lives once in `modeling_variant_utils.py`. A class or function repeated in another family is marked on the line above it
(above its decorators):

    # Copied from modeling_variant_bert.VariantBertEmbeddings with Bert->Albert, hidden_size->embedding_size

and must equal the source text of the named class or method (`Class.method`) of the sibling module, with the replacements
made together (plain text, case-sensitive, the longest match first; replaced text is not replaced again, so
`Bert->Albert, bert->albert` gives `VariantAlbertModel` and `self.albert`). An edit to either copy fails here until the
other follows.
"""

import ast
import difflib
import re
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "hf_attn_variants"
MARKER = re.compile(r"^\s*# Copied from (\w+)\.([\w.]+)(?: with (.+))?$")


def block_source(text: str, qualname: str) -> str:
    """The dedented source of the class or function `qualname` ("Name" or "Class.method") in the module `text`, from
    its first decorator to its last line."""
    body = ast.parse(text).body
    node = None
    for part in qualname.split("."):
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part), None)
        if node is None:
            raise LookupError(f"no class or function {qualname!r}")
        body = node.body
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return textwrap.dedent("\n".join(text.splitlines()[start - 1 : node.end_lineno]))


def marked_copies(sources: dict[str, str]) -> list[dict]:
    """Every "# Copied from" marker in the modules `sources` ({module name: text}), with the block it stands above."""
    found = []
    for module, text in sources.items():
        tree = ast.parse(text)
        starts = {min([n.lineno] + [d.lineno for d in n.decorator_list]): n for n in ast.walk(tree)
                  if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        for lineno, line in enumerate(text.splitlines(), start=1):
            match = MARKER.match(line)
            if match is None:
                continue
            if lineno + 1 not in starts:
                raise ValueError(f"{module}.py:{lineno}: a 'Copied from' marker stands above no class or function")
            source_module, qualname, replacements = match.groups()
            pairs = [tuple(p.strip().split("->")) for p in replacements.split(",")] if replacements else []
            found.append({"where": f"{module}.py:{lineno}", "module": module, "node": starts[lineno + 1],
                          "source_module": source_module, "qualname": qualname, "replacements": pairs})
    return found


def replace_all(text: str, pairs: list[tuple[str, str]]) -> str:
    """`text` with every `old` of `pairs` replaced by its `new` in one pass (the longest `old` first where two match)."""
    if not pairs:
        return text
    mapping = dict(pairs)
    pattern = re.compile("|".join(re.escape(old) for old in sorted(mapping, key=len, reverse=True)))
    return pattern.sub(lambda match: mapping[match.group(0)], text)


def copy_differences(sources: dict[str, str]) -> list[str]:
    """One entry for each marked copy that differs from its original (after the replacements), with a diff."""
    problems = []
    for copy in marked_copies(sources):
        expected = replace_all(block_source(sources[copy["source_module"]], copy["qualname"]), copy["replacements"])
        node = copy["node"]
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        got = textwrap.dedent("\n".join(sources[copy["module"]].splitlines()[start - 1 : node.end_lineno]))
        if got != expected:
            diff = "\n".join(difflib.unified_diff(expected.splitlines(), got.splitlines(), "expected", "copy",
                                                  lineterm=""))
            problems.append(f"{copy['where']} differs from {copy['source_module']}.{copy['qualname']}:\n{diff}")
    return problems


def modeling_sources() -> dict[str, str]:
    return {path.stem: path.read_text() for path in sorted(PACKAGE.glob("modeling_*.py"))}


def test_every_marked_copy_equals_its_original():
    assert copy_differences(modeling_sources()) == []


def test_the_families_mark_their_copies():
    """The check has something to check: ALBERT's copies of BERT's embeddings, init and heads are marked."""
    marked = {(c["module"], c["qualname"]) for c in marked_copies(modeling_sources())}
    assert {
        ("modeling_variant_albert", "VariantBertEmbeddings"),
        ("modeling_variant_albert", "VariantBertPreTrainedModel._init_weights"),
        ("modeling_variant_albert", "VariantBertForTokenClassification"),
        ("modeling_variant_albert", "VariantBertForQuestionAnswering"),
        ("modeling_variant_albert", "VariantBertForSequenceClassification.forward"),
        ("modeling_variant_albert", "VariantBertForMultipleChoice.forward"),
    } <= marked


@pytest.mark.parametrize("edited", ["original", "copy"])
def test_an_edit_to_either_side_of_a_copy_fails_the_check(edited):
    sources = modeling_sources()
    module = "modeling_variant_bert" if edited == "original" else "modeling_variant_albert"
    line = "cache_length + seq_length > self.position_ids.shape[1]"
    assert sources[module].count(line) == 1
    sources[module] = sources[module].replace(line, "cache_length + seq_length >= self.position_ids.shape[1]")
    problems = copy_differences(sources)
    assert len(problems) == 1 and "VariantBertEmbeddings" in problems[0] and ">=" in problems[0]


def test_replacements_are_made_together():
    assert replace_all("VariantBertModel(self.bert)", [("Bert", "Albert"), ("bert", "albert")]) == (
        "VariantAlbertModel(self.albert)"
    )
    assert replace_all("config.hidden_size, config.classifier_dropout", [("classifier_dropout", "classifier_dropout_prob")]
                       ) == "config.hidden_size, config.classifier_dropout_prob"


def test_a_marker_must_name_an_existing_block_and_stand_above_one():
    sources = modeling_sources()
    renamed = dict(sources, modeling_variant_albert=sources["modeling_variant_albert"].replace(
        "# Copied from modeling_variant_bert.VariantBertEmbeddings ", "# Copied from modeling_variant_bert.NoSuchClass "))
    with pytest.raises(LookupError, match="NoSuchClass"):
        copy_differences(renamed)
    stray = dict(sources, modeling_variant_albert=sources["modeling_variant_albert"].replace(
        "class VariantAlbertEmbeddings(nn.Module):", "\nclass VariantAlbertEmbeddings(nn.Module):"))
    with pytest.raises(ValueError, match="stands above no class or function"):
        copy_differences(stray)
