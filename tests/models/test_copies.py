"""Code kept as a copy of other code stays equal to it, as transformers checks its "# Copied from" comments.

The families keep their embeddings, layers and heads readable top to bottom; what they share beyond that lives once
in `modeling_variant_utils.py`. A class or function repeated in another family is marked on the line above it (above
its decorators):

    # Copied from modeling_variant_bert.VariantBertEmbeddings with Bert->Albert, hidden_size->embedding_size

and must equal the source text of the named class or method (`Class.method`) of the sibling module, with the replacements
made together (plain text, case-sensitive, the longest match first; replaced text is not replaced again, so
`Bert->Albert, bert->albert` gives `VariantAlbertModel` and `self.albert`). An edit to either copy fails here until the
other follows.

A piece of transformers' own models kept unchanged (T5's relative position bucket, its layer norm, BERT's pooler)
names its original by its full dotted path:

    # Copied from transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket

and is checked against the installed transformers (`inspect.getsource` of the named object, the same replacements).
The project supports a range of transformers releases whose source text may differ (a reworded comment, a reformat):
where the text differs, the copy must behave as the original on the inputs `BEHAVIOUR` gives it (the bucket: every
relative position of a grid, for both directions and several bucket counts and distances, exactly, since the result is
integer arithmetic; the modules: the same outputs from the same weights), and the test warns that it compared
behaviour. A named object with no behaviour check fails on any text difference.
"""

import ast
import difflib
import importlib
import inspect
import re
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from transformers import BertConfig

PACKAGE = Path(__file__).resolve().parents[2] / "hf_attn_variants" / "models"
MARKER = re.compile(r"^\s*# Copied from ([\w.]+)(?: with (.+))?$")


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


def blocks(text: str) -> dict[int, tuple[ast.AST, str]]:
    """{first line (its first decorator's): (node, qualified name)} of every class and function of the module `text`."""
    found = {}

    def visit(body, prefix):
        for node in body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                found[min([node.lineno] + [d.lineno for d in node.decorator_list])] = (node, prefix + node.name)
                visit(node.body, f"{prefix}{node.name}.")

    visit(ast.parse(text).body, "")
    return found


def marked_copies(sources: dict[str, str]) -> list[dict]:
    """Every "# Copied from" marker in the modules `sources` ({module name: text}), with the block it stands above."""
    found = []
    for module, text in sources.items():
        starts = blocks(text)
        for lineno, line in enumerate(text.splitlines(), start=1):
            match = MARKER.match(line)
            if match is None:
                continue
            if lineno + 1 not in starts:
                raise ValueError(f"{module}.py:{lineno}: a 'Copied from' marker stands above no class or function")
            source, replacements = match.groups()
            node, name = starts[lineno + 1]
            pairs = [tuple(p.strip().split("->")) for p in replacements.split(",")] if replacements else []
            copy_text = textwrap.dedent("\n".join(text.splitlines()[lineno : node.end_lineno]))
            found.append(
                {
                    "where": f"{module}.py:{lineno}",
                    "module": module,
                    "name": name,
                    "text": copy_text,
                    "source": source,
                    "replacements": pairs,
                }
            )
    return found


def replace_all(text: str, pairs: list[tuple[str, str]]) -> str:
    """`text` with every `old` of `pairs` replaced by its `new` in one pass (the longest `old` first where two match)."""
    if not pairs:
        return text
    mapping = dict(pairs)
    pattern = re.compile("|".join(re.escape(old) for old in sorted(mapping, key=len, reverse=True)))
    return pattern.sub(lambda match: mapping[match.group(0)], text)


def transformers_object(dotted: str):
    """The object the dotted path `dotted` names in the installed transformers: its longest importable module, then
    attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                raise LookupError(f"transformers {transformers.__version__} has no {dotted!r}")
            found = getattr(found, attribute)
        return found
    raise LookupError(f"no module of {dotted!r} imports")


# ------------------------------------------------------------------ behaviour, where transformers' text differs
def same_buckets(ours, theirs):
    """Integer arithmetic: the same bucket for every relative position in [-600, 600], both directions, exactly."""
    relative = torch.arange(-600, 601)[None, :]
    for bidirectional in (True, False):
        for num_buckets, max_distance in ((32, 128), (8, 16), (64, 256), (16, 512), (128, 1000)):
            got, expected = (f(relative, bidirectional, num_buckets, max_distance) for f in (ours, theirs))
            differ = (got != expected).nonzero()
            assert differ.numel() == 0, (
                f"bidirectional={bidirectional}, num_buckets={num_buckets}, max_distance={max_distance}: relative "
                f"position {relative[tuple(differ[0])].item()} gives bucket {got[tuple(differ[0])].item()}, "
                f"transformers' {expected[tuple(differ[0])].item()}"
            )


def same_module_outputs(*args, dtypes=(torch.float32,)):
    """Both classes built from `args`, transformers' weights moved off their init and loaded into ours (the copy
    keeps the parameter names), give the same outputs for a [2, 5, 16] input, in each parameter dtype of `dtypes`."""

    def check(ours, theirs):
        torch.manual_seed(0)
        original, copy = theirs(*args).eval(), ours(*args).eval()
        with torch.no_grad():
            for parameter in original.parameters():
                parameter.normal_()
        copy.load_state_dict(original.state_dict())
        inputs = torch.randn(2, 5, 16)
        for dtype in dtypes:
            with torch.no_grad():
                torch.testing.assert_close(copy.to(dtype)(inputs), original.to(dtype)(inputs))

    return check


BEHAVIOUR = {  # transformers' object -> check(our copy, transformers' original), raising AssertionError
    "transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket": same_buckets,
    "transformers.models.t5.modeling_t5.T5LayerNorm": same_module_outputs(16, dtypes=(torch.float32, torch.bfloat16)),
    "transformers.models.bert.modeling_bert.BertPooler": same_module_outputs(BertConfig(hidden_size=16)),
}


def copy_object(module: str, text: str, name: str):
    """What the copy's text `text` defines as `name`, run in the namespace of the package's `module` (so its imports
    resolve as in the file): the text under test, not the imported module's."""
    namespace = dict(vars(importlib.import_module(f"hf_attn_variants.models.{module}")))
    exec(compile(text, f"<copy in {module}>", "exec"), namespace)
    return namespace[name]


def original_text(copy: dict, sources: dict[str, str]) -> tuple[str, object]:
    """(the text the copy must equal, after its replacements; the original object where it is transformers')."""
    if copy["source"].startswith("transformers."):
        original = transformers_object(copy["source"])
        text = textwrap.dedent(inspect.getsource(original)).rstrip("\n")
    else:
        module, qualname = copy["source"].split(".", 1)
        original, text = None, block_source(sources[module], qualname)
    return replace_all(text, copy["replacements"]), original


def same_code(text: str, expected: str) -> bool:
    """The same code laid out otherwise: a replacement can lengthen a line past the formatter's limit, which then
    wraps the copy where the original fits on one line (transformers formats the replaced original before comparing;
    here a sibling family's copy is compared as a syntax tree, comments aside). Copies of transformers' own code
    are compared as text, else by behaviour."""
    try:
        return ast.dump(ast.parse(textwrap.dedent(text))) == ast.dump(ast.parse(textwrap.dedent(expected)))
    except SyntaxError:
        return False


def copy_differences(sources: dict[str, str]) -> list[str]:
    """One entry for each marked copy that differs from its original (after the replacements), with a diff; a copy of
    transformers whose text differs passes where it behaves as the original (`BEHAVIOUR`), with a warning."""
    problems = []
    for copy in marked_copies(sources):
        expected, original = original_text(copy, sources)
        sibling = not copy["source"].startswith("transformers.")
        if copy["text"] == expected or (sibling and same_code(copy["text"], expected)):
            continue
        check = BEHAVIOUR.get(copy["source"])
        if check is None:
            diff = "\n".join(
                difflib.unified_diff(expected.splitlines(), copy["text"].splitlines(), "expected", "copy", lineterm="")
            )
            problems.append(f"{copy['where']} differs from {copy['source']}:\n{diff}")
            continue
        try:
            check(copy_object(copy["module"], copy["text"], copy["name"].rsplit(".", 1)[-1]), original)
        except AssertionError as error:
            problems.append(f"{copy['where']} behaves unlike {copy['source']}: {error}")
        else:
            warnings.warn(
                f"{copy['where']}: text differs from transformers {transformers.__version__}'s "
                f"{copy['source']}; compared behaviour instead (the same)",
                stacklevel=2,
            )
    return problems


def modeling_sources() -> dict[str, str]:
    return {path.stem: path.read_text() for path in sorted(PACKAGE.glob("modeling_*.py"))}


def test_every_marked_copy_equals_its_original():
    assert copy_differences(modeling_sources()) == []


def test_the_families_mark_their_copies():
    """The check has something to check: ALBERT's copies of BERT's embeddings, init and heads are marked, and so are
    the pieces of transformers' T5 and BERT kept as they are."""
    marked = {(c["module"], c["source"]) for c in marked_copies(modeling_sources())}
    assert {
        ("modeling_variant_albert", "modeling_variant_bert.VariantBertEmbeddings"),
        ("modeling_variant_albert", "modeling_variant_bert.VariantBertPreTrainedModel._init_weights"),
        ("modeling_variant_albert", "modeling_variant_bert.VariantBertForTokenClassification"),
        ("modeling_variant_albert", "modeling_variant_bert.VariantBertForQuestionAnswering"),
        ("modeling_variant_albert", "modeling_variant_bert.VariantBertForSequenceClassification.forward"),
        ("modeling_variant_albert", "modeling_variant_bert.VariantBertForMultipleChoice.forward"),
        ("modeling_variant_t5", "transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket"),
        ("modeling_variant_t5", "transformers.models.t5.modeling_t5.T5LayerNorm"),
        ("modeling_variant_bert", "transformers.models.bert.modeling_bert.BertPooler"),
    } <= marked
    assert {c["source"] for c in marked_copies(modeling_sources()) if c["source"].startswith("transformers.")} <= set(
        BEHAVIOUR
    ), "a copy of transformers without a behaviour check would fail on the first reworded release"


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
    assert (
        replace_all(
            "config.hidden_size, config.classifier_dropout", [("classifier_dropout", "classifier_dropout_prob")]
        )
        == "config.hidden_size, config.classifier_dropout_prob"
    )


def test_a_marker_must_name_an_existing_block_and_stand_above_one():
    sources = modeling_sources()
    renamed = dict(
        sources,
        modeling_variant_albert=sources["modeling_variant_albert"].replace(
            "# Copied from modeling_variant_bert.VariantBertEmbeddings ",
            "# Copied from modeling_variant_bert.NoSuchClass ",
        ),
    )
    with pytest.raises(LookupError, match="NoSuchClass"):
        copy_differences(renamed)
    stray = dict(
        sources,
        modeling_variant_albert=sources["modeling_variant_albert"].replace(
            "class VariantAlbertEmbeddings(nn.Module):", "\nclass VariantAlbertEmbeddings(nn.Module):"
        ),
    )
    with pytest.raises(ValueError, match="stands above no class or function"):
        copy_differences(stray)


# (module, text in our copy, a change of behaviour): T5's bucket, T5's layer norm, BERT's pooler
BEHAVIOUR_EDITS = {
    "T5Attention._relative_position_bucket": (
        "modeling_variant_t5",
        "torch.full_like(relative_position_if_large, num_buckets - 1)",
        "torch.full_like(relative_position_if_large, num_buckets - 2)",
    ),
    "T5LayerNorm": (
        "modeling_variant_t5",
        "hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)",
        "hidden_states.to(torch.float32).pow(2).sum(-1, keepdim=True)",
    ),
    "BertPooler": (
        "modeling_variant_bert",
        "first_token_tensor = hidden_states[:, 0]",
        "first_token_tensor = hidden_states[:, -1]",
    ),
}


@pytest.mark.parametrize("original", list(BEHAVIOUR_EDITS))
def test_a_copy_of_transformers_that_behaves_otherwise_fails(original):
    """The text differs (so the behaviour check runs) and the behaviour differs: the check fails, naming the copy."""
    module, line, edited = BEHAVIOUR_EDITS[original]
    sources = modeling_sources()
    assert sources[module].count(line) == 1
    sources[module] = sources[module].replace(line, edited)
    problems = copy_differences(sources)
    assert len(problems) == 1 and "behaves unlike" in problems[0] and original in problems[0], problems


def test_a_reworded_copy_of_transformers_is_compared_by_behaviour():
    """What a transformers release that rewords the original looks like from here: the texts differ, the behaviour
    does not. The check passes and warns that it compared behaviour."""
    sources = modeling_sources()
    comment = "        # now relative_position is in the range [0, inf)\n"
    assert sources["modeling_variant_t5"].count(comment) == 1
    sources["modeling_variant_t5"] = sources["modeling_variant_t5"].replace(comment, "")
    with pytest.warns(UserWarning, match=r"_relative_position_bucket; compared behaviour instead"):
        assert copy_differences(sources) == []


def test_a_reworded_copy_without_a_behaviour_check_fails(monkeypatch):
    monkeypatch.delitem(BEHAVIOUR, "transformers.models.bert.modeling_bert.BertPooler")
    sources = modeling_sources()
    comment = '        # We "pool" the model by simply taking the hidden state corresponding\n'
    assert sources["modeling_variant_bert"].count(comment) == 1
    sources["modeling_variant_bert"] = sources["modeling_variant_bert"].replace(comment, "")
    problems = copy_differences(sources)
    assert len(problems) == 1 and "differs from transformers.models.bert.modeling_bert.BertPooler" in problems[0]


def test_a_marker_must_name_an_object_of_the_installed_transformers():
    sources = modeling_sources()
    sources["modeling_variant_t5"] = sources["modeling_variant_t5"].replace(
        "T5Attention._relative_position_bucket", "T5Attention._no_such_bucket"
    )
    with pytest.raises(LookupError, match="_no_such_bucket"):
        copy_differences(sources)
