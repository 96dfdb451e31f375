"""The module paths of 0.1.0, kept importing for one release: `hf_attn_variants.data_collators` is now
`hf_attn_variants.training.data_collators`, and so on (the package's three wings: `models/`, what a checkpoint
carries; `training/`, what a training script reuses; `hub/`, model cards and publishing).

Importing an old path gives the module at its new path, with a `FutureWarning` that names it; the module is the
same object, so its classes and functions are the same too. A module that was split (`publish`) gives a module that
reads each name from the new modules in turn. The paths go away in the release after next.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# the 0.1.0 module name -> its path now, under hf_attn_variants (several: the modules it was split into)
MOVED_MODULES = {
    **{
        name: f"models.{name}"
        for name in (
            "configuration_variant_albert",
            "configuration_variant_bert",
            "configuration_variant_t5",
            "modeling_variant_albert",
            "modeling_variant_bert",
            "modeling_variant_t5",
            "modeling_variant_utils",
            "talking_heads_blockwise",
            "talking_heads_triton",
        )
    },
    **{
        name: f"training.{name}"
        for name in (
            "data_collators",
            "data_loading",
            "model_setup",
            "output_folders",
            "pretraining_data",
            "question_answering",
            "task_metrics",
            "tokenizer_training",
            "trainer",
            "vocabularies",
        )
    },
    # split: the fields' schema, the types' registrations and per-layer resolution
    "configuration_variant_attention": ("models.configuration_variant_attention", "models.attention_types"),
    # split: the types and their registry, the Synthesizer, the base they share
    "attention_variants": ("models.attention_variants", "models.attention_synthesizer", "models.attention_base"),
    # publish.py was split: checks and uploads, what a card says, what a config.json is
    "publish": ("hub.publish", "hub.cards", "attention_tools"),
}
_PACKAGE = __name__.rpartition(".")[0]


def _importer_level() -> int:
    """The stack level of the code that imported the old path, so that the warning points at the user's line: past
    the import system's frames (which `warnings` does not count) and this package's attribute access."""
    frame, level = sys._getframe(2), 2
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<frozen importlib"):
            if not name.endswith(("importlib/__init__.py", "hf_attn_variants/__init__.py")):
                return level
            level += 1
        frame = frame.f_back
    return level


class _MovedModuleLoader(importlib.abc.Loader):
    def __init__(self, new_name: str):
        self.new_name = new_name

    def create_module(self, spec):
        module = importlib.import_module(self.new_name)  # the module itself: one object under both names
        self.new_spec = module.__spec__
        return module

    def exec_module(self, module):
        # already executed at its new path; the import system has just set its __spec__ to the old name's
        module.__spec__ = self.new_spec


class _SplitModuleLoader(importlib.abc.Loader):
    """A module that was split: a module of the old name whose names are read from the new modules in turn."""

    def __init__(self, new_names: tuple[str, ...]):
        self.new_names = new_names

    def create_module(self, spec):
        return None  # the default: an empty module of the old name

    def exec_module(self, module):
        parts = [importlib.import_module(name) for name in self.new_names]
        module.__all__ = sorted({name for part in parts for name in getattr(part, "__all__", ())})

        def __getattr__(name: str):
            for part in parts:
                if hasattr(part, name):
                    return getattr(part, name)
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

        module.__getattr__ = __getattr__


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds `hf_attn_variants.<old name>` (after the ordinary finders found nothing there) and warns."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != _PACKAGE or name not in MOVED_MODULES:
            return None
        moved = MOVED_MODULES[name]
        new_names = tuple(f"{_PACKAGE}.{part}" for part in ((moved,) if isinstance(moved, str) else moved))
        new_name = " / ".join(f"`{n}`" for n in new_names)
        warnings.warn(
            f"`{fullname}` moved to {new_name}; the old path is removed in the release after next: import "
            f"{new_name} instead.",
            FutureWarning,
            stacklevel=_importer_level(),
        )
        if len(new_names) > 1:
            return importlib.util.spec_from_loader(fullname, _SplitModuleLoader(new_names))
        return importlib.util.spec_from_loader(fullname, _MovedModuleLoader(new_names[0]))


def install_moved_modules() -> None:
    """Append the finder once (after the ordinary ones, so a real module of that name would win)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
