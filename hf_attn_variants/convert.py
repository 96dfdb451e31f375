"""Convert transformers checkpoints into variant checkpoints, and Admin variants back to plain transformers.
Package-only.

    from hf_attn_variants.convert import convert, export_admin

    convert("bert-base-uncased-local", "bert-th")                      # talking heads, identity head maps
    convert("t5-small-local", "t5-mix", attention_type="synthesizer")  # a mixture that starts as the dot product
    export_admin("my-admin-bert", "my-admin-bert-plain")               # omega folded into the weights

Both are function-preserving and prove it before writing: the new model and the original run on the same probe
batch (`probe_inputs`) and every output tensor must agree, or nothing is written. The output is built in a temporary
folder next to `output` and moved into place only when complete, so a failure never leaves a partial checkpoint.
Tokenizer files found in the source folder are copied along. transformers' load warnings (a `bert` checkpoint into
a `variant_bert` model; the variant's new parameters "MISSING" from the checkpoint) are silenced: the new
parameters start at their function-preserving values, and the verification proves it.
"""

import contextlib
import copy
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch
import transformers

import hf_attn_variants as hav

from .admin import admin_residuals
from .families import FAMILIES, family_of
from .models.attention_types import ATTENTION_REGISTRY, BASELINE_ATTENTION, resolve_attention

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "chat_template.jinja",
)
# attention_type -> the config fields that make the variant start as the original model (the types with a warm start)
FUNCTION_PRESERVING = {
    name: entry.warm_start for name, entry in ATTENTION_REGISTRY.items() if entry.warm_start is not None
}


def _either(families: dict, attribute: str) -> str:
    """ "BERT, ALBERT or T5" from a families table."""
    names = [getattr(f, attribute) for f in families.values()]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def probe_inputs(config, architecture: str) -> dict:
    """A fixed batch for `architecture` (a class name): 2 rows of 8 tokens, the second right-padded; T5 models that
    decode get 5 decoder tokens, multiple-choice heads 2 choices. Uses only torch (`publish.check_loads` runs this
    function's source where the package cannot be imported)."""
    import torch

    ids = torch.arange(3, 19).reshape(2, 8) % config.vocab_size
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if architecture.endswith(("T5Model", "ForConditionalGeneration")):
        inputs["decoder_input_ids"] = ids[:, :5]
    if architecture.endswith("ForMultipleChoice"):
        inputs = {k: v[:, None].expand(-1, 2, -1).contiguous() for k, v in inputs.items()}
    return inputs


def _mismatch(reference, candidate, inputs, atol: float, rtol: float) -> str | None:
    """None if every tensor output of `candidate` equals `reference`'s within atol + rtol * |reference|; else why
    not. Outputs per token of the probe batch are compared at its real tokens: at the padded ones a model that runs
    the encoder on the real tokens only (`unpad`) leaves zeros where transformers' computes what nothing reads."""
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        expected, got = reference(**inputs), candidate(**inputs)
    for key, value in expected.items():
        if not isinstance(value, torch.Tensor):
            continue
        if key not in got or got[key].shape != value.shape:
            return f"output {key!r} is missing or has another shape"
        candidate_value = got[key]
        if value.shape[: real.dim()] == real.shape:
            value, candidate_value = value[real], candidate_value[real]
        error = (candidate_value - value).abs()
        if not torch.all(error <= atol + rtol * value.abs()):
            return f"output {key!r} differs by up to {error.max().item():.3g}"
    return None


def _read_config(source: Path) -> dict:
    if not source.is_dir():
        raise FileNotFoundError(f"{source} is not a folder: pass a checkpoint folder (config.json + weights).")
    path = source / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{source} has no config.json: pass a folder written by `save_pretrained`.")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error}).") from error


def _check_output(output: Path) -> None:
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise FileExistsError(f"{output} exists and is not an empty folder: choose a new output folder.")


def checkpoint_shapes(folder) -> dict[str, tuple[int, ...]]:
    """The name and shape of every tensor in the checkpoint in `folder` (safetensors or PyTorch, sharded or not),
    read from the files' headers. Uses only the standard library, torch and safetensors (see `probe_inputs`)."""
    import json
    from pathlib import Path

    import torch
    from safetensors import safe_open

    folder = Path(folder)
    for index, single in (
        ("model.safetensors.index.json", "model.safetensors"),
        ("pytorch_model.bin.index.json", "pytorch_model.bin"),
    ):
        if (folder / index).is_file():
            files = sorted(set(json.loads((folder / index).read_text())["weight_map"].values()))
            break
        if (folder / single).is_file():
            files = [single]
            break
    else:
        raise FileNotFoundError(f"{folder} has no weights (model.safetensors, pytorch_model.bin or a sharded index).")
    shapes = {}
    for name in files:
        try:
            if name.endswith(".safetensors"):
                with safe_open(folder / name, "pt") as f:
                    shapes.update({key: tuple(f.get_slice(key).get_shape()) for key in f.keys()})
            else:
                state = torch.load(folder / name, map_location="cpu", weights_only=True, mmap=True)
                shapes.update({key: tuple(value.shape) for key, value in state.items()})
        except Exception as error:  # truncated or corrupted: safetensors and torch raise their own types
            raise ValueError(
                f"{folder / name} is not a readable weights file ({type(error).__name__}: {error})."
            ) from error
    return shapes


def weights_report(model, shapes: dict) -> tuple[list[str], list[str]]:
    """(missing, mismatched): the model's tensors that the checkpoint with these `shapes` does not provide (tied
    copies of a provided tensor excepted), and those whose shape differs from the checkpoint's."""
    state = model.state_dict()
    mismatched = [
        f"{key}: checkpoint {shapes[key]}, config {tuple(value.shape)}"
        for key, value in state.items()
        if key in shapes and tuple(value.shape) != shapes[key]
    ]
    provided = {state[key].data_ptr() for key in shapes if key in state}
    missing = [key for key, value in state.items() if key not in shapes and value.data_ptr() not in provided]
    return sorted(missing), mismatched


@contextlib.contextmanager
def _quiet_loading():
    """transformers' load warnings off: loading a `bert` checkpoint into `variant_bert` warns about the model type,
    and its LOAD REPORT lists the variant's own parameters (head maps, mixture weights) as MISSING. Both are
    expected here: `_check_loaded` accepts exactly those parameters and `_mismatch` proves the outputs equal."""
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    ours = logging.getLogger(__package__)  # the models' "Warm start: ..." line: convert reports for itself
    level = ours.level
    ours.setLevel(logging.ERROR)
    try:
        yield
    finally:
        transformers.logging.set_verbosity(verbosity)
        ours.setLevel(level)


def _load(model_class, source: Path, **kwargs):
    """`model_class.from_pretrained(source)` in eval mode, without transformers' load warnings (see
    `_quiet_loading`); missing weights and shapes that do not fit are reported by `weights_report`."""
    try:
        with _quiet_loading():
            model = model_class.from_pretrained(source, ignore_mismatched_sizes=True, **kwargs)
    except (OSError, RuntimeError, ValueError) as error:  # e.g. unreadable weights
        raise ValueError(f"{source}: the weights do not load into {model_class.__name__}: {error}") from error
    return model.eval()


def _check_loaded(model, source: Path, shapes: dict, allowed_missing=frozenset()) -> None:
    missing, mismatched = weights_report(model, shapes)
    if mismatched:
        raise ValueError(f"{source}: weight shapes do not fit its config.json: {'; '.join(mismatched[:5])}.")
    missing = [key for key in missing if key not in allowed_missing]
    if missing:
        raise ValueError(
            f"{source} lacks {len(missing)} weight(s) of {type(model).__name__}: {', '.join(missing[:5])}"
            f"{', ...' if len(missing) > 5 else ''}."
        )


def _write_atomically(output: Path, write) -> Path:
    """Run `write(tmp_folder)`, then move the folder to `output`; on any failure remove it and re-raise."""
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-", dir=output.parent))
    try:
        write(tmp)
        if output.exists():
            output.rmdir()  # checked empty before any work started
        os.replace(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return output


def _copy_tokenizer(source: Path, target: Path) -> None:
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, target / name)


def _variant_setup(source: Path, attention_type, synthesizer_components, architecture, config_overrides):
    """`convert`'s checks of the source checkpoint and the requested variant, before any weight loads: returns the
    architecture, the variant class, its config (verified buildable) and the fields that config was given."""
    config = _read_config(source)
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        hint = " (it is already a variant checkpoint)" if str(model_type).startswith("variant_") else ""
        raise ValueError(
            f"{source} holds a {model_type!r} checkpoint{hint}; convert takes transformers "
            f"{_either(FAMILIES, 'display')} checkpoints (model_type {', '.join(FAMILIES)})."
        )
    prefix = FAMILIES[model_type].prefix
    architecture = architecture or (config.get("architectures") or [f"{prefix}Model"])[0]
    if not (
        architecture.startswith(prefix)
        and hasattr(transformers, architecture)
        and hasattr(hav, f"Variant{architecture}")
    ):
        options = sorted(
            n[len("Variant") :]
            for n in hav.__all__
            if n.startswith(f"Variant{prefix}") and not n.endswith(("Config", "PreTrainedModel"))
        )
        raise ValueError(f"No variant of {architecture!r} for a {model_type} checkpoint; choose one of {options}.")
    if attention_type not in FUNCTION_PRESERVING:
        raise ValueError(f"attention_type={attention_type!r}; convert supports {', '.join(FUNCTION_PRESERVING)}.")
    fields = {"attention_type": attention_type, **FUNCTION_PRESERVING[attention_type]}
    if "synthesizer_components" in ATTENTION_REGISTRY[attention_type].config_fields:
        fields["synthesizer_components"] = list(synthesizer_components)
    fields.update(config_overrides)
    variant_class = getattr(hav, f"Variant{architecture}")
    with _quiet_loading():
        variant_config = variant_class.config_class.from_pretrained(source, **fields)
    resolve_attention(variant_config)  # settings the variant cannot be built with are refused before any weight loads
    return architecture, variant_class, variant_config, fields


def convert(
    source,
    output,
    attention_type: str = "talking_heads",
    *,
    synthesizer_components=("dot_product", "random"),
    architecture: str | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    **config_overrides,
) -> Path:
    """Turn a transformers BERT, ALBERT or T5 checkpoint folder into a variant checkpoint that computes the same
    function, and write it to `output` (a new or empty folder). Returns `output`.

    Args:
        source: a folder written by transformers' `save_pretrained` (`config.json` with model_type "bert", "albert"
            or "t5", and weights).
        output: where the variant checkpoint goes; created only once the conversion has been verified.
        attention_type: an attention type with a warm start (`FUNCTION_PRESERVING`, from `ATTENTION_REGISTRY`):
            talking heads with identity head maps, a synthesizer mixture that starts as the dot product, or the dot
            product itself (a plain variant checkpoint, e.g. to train with `admin=True`).
        synthesizer_components: the mixture's components, for a type that reads them; must include the dot product.
        architecture: the transformers class to convert (e.g. "BertForMaskedLM"); defaults to
            `config.json`'s first `architectures` entry, else the family's base model.
        atol, rtol: how close every output of the probe batch must be.
        config_overrides: further variant config fields (e.g. `talking_heads_dynamic=["x2l"]`). The result is
            verified like the rest, so a field that changes the function makes the conversion fail.

    Raises:
        FileNotFoundError: `source` is not a folder or lacks config.json or weights.
        FileExistsError: `output` exists and is not empty.
        ValueError: not a BERT/ALBERT/T5 checkpoint, missing weights or shapes that do not fit its config, an
            architecture without a variant, or outputs that differ after conversion.
    """
    source, output = Path(source), Path(output)
    _check_output(output)
    architecture, variant_class, variant_config, fields = _variant_setup(
        source, attention_type, synthesizer_components, architecture, config_overrides
    )
    shapes = checkpoint_shapes(source)
    reference = _load(getattr(transformers, architecture), source)
    _check_loaded(reference, source, shapes)
    variant = _load(variant_class, source, config=variant_config)
    new_parameters = set(variant.state_dict()) - set(reference.state_dict())  # the variant's own, initialised
    _check_loaded(variant, source, shapes, allowed_missing=new_parameters)
    inputs = probe_inputs(reference.config, architecture)
    problem = _mismatch(reference, variant, inputs, atol, rtol)
    if problem:
        raise ValueError(
            f"The converted model does not compute the original's function: {problem}. The settings {fields} are "
            "not function-preserving; nothing was written."
        )

    def write(folder):
        variant.save_pretrained(folder)
        _copy_tokenizer(source, folder)

    return _write_atomically(output, write)


def _check_scalar_omegas(residuals):
    for module in residuals:
        omega = module.admin_omega
        if not torch.all(omega == omega[0]) or omega[0] <= 0:
            raise ValueError(
                "Export folds one positive omega per residual into the branch's output projection; this model has an "
                "omega that varies across the width (trained per-width). Keep it as a VariantBert/VariantAlbert model."
            )


@torch.no_grad()
def export_to_transformers(model, save_directory) -> None:
    """Write an Admin model as a plain transformers `Bert*`/`Albert*` checkpoint that loads without remote code.

    LN(omega * x + f(x)) = LN(x + f(x) / omega) for a scalar omega > 0 (LayerNorm ignores a positive scale, up to
    its epsilon), so each branch's output projection is divided by its omega. Possible when the attention is plain
    dot-product with transformers' head size (hidden_size / num_attention_heads) and every omega is one scalar.
    """
    config = model.config
    if config.attention_type != BASELINE_ATTENTION:
        raise ValueError(f"Only dot-product models export to plain transformers, not {config.attention_type!r}.")
    head_size = getattr(config, "attention_head_size", None)
    if head_size is not None and head_size * config.num_attention_heads != config.hidden_size:
        raise ValueError(
            f"transformers' {family_of(config).display} uses heads of hidden_size / num_attention_heads; "
            f"this model has {config.num_attention_heads} head(s) of size {head_size} in width {config.hidden_size} "
            "(a deep single-head twin), which it cannot represent."
        )
    residuals = admin_residuals(model)
    _check_scalar_omegas(residuals)
    reference_class = getattr(transformers, type(model).__name__.replace("Variant", "", 1))
    config_class = getattr(transformers, family_of(config).upstream_config)
    fields = {k: v for k, v in config.to_dict().items() if k in config_class().to_dict() and k != "model_type"}
    fields.pop("architectures", None)
    plain = reference_class(config_class(**fields))
    folded = copy.deepcopy(model)
    for module in [m for m in folded.modules() if getattr(m, "admin_omega", None) is not None]:
        projection = module.dense if hasattr(module, "dense") else module.ffn_output
        projection.weight.div_(module.admin_omega[0])
        projection.bias.div_(module.admin_omega[0])
    state = {k: v for k, v in folded.state_dict().items() if not k.endswith("admin_omega")}
    missing, unexpected = plain.load_state_dict(state, strict=False)
    # transformers' decoder bias is a second name of the head's bias, which our heads alone hold
    every_name = {name for name, _ in plain.named_parameters(remove_duplicate=False)}
    aliases = every_name - dict(plain.named_parameters()).keys()
    if unexpected or any(not k.endswith(("position_ids", "token_type_ids")) for k in set(missing) - aliases):
        raise ValueError(f"Export mismatch: missing {missing}, unexpected {unexpected}.")
    plain.save_pretrained(save_directory)


def export_admin(source, output, *, atol: float = 1e-5, rtol: float = 1e-4) -> Path:
    """Write the Admin variant checkpoint in `source` as a plain transformers `Bert*`/`Albert*` checkpoint in
    `output` (a new or empty folder), with each residual's omega folded into its branch (see
    `export_to_transformers`), after checking both give the same outputs. Returns `output`.

    Raises FileNotFoundError / FileExistsError as `convert` does, and ValueError where the export is not exact
    (a variant attention, single-head layers narrower than the width, omegas that vary across the width).
    """
    source, output = Path(source), Path(output)
    _check_output(output)
    config = _read_config(source)
    post_ln = {f.name: f for f in FAMILIES.values() if f.post_ln}
    if config.get("model_type") not in [f.model_type for f in post_ln.values()]:
        raise ValueError(
            f"{source} holds a {config.get('model_type')!r} checkpoint; export takes hf-attn-variants "
            f"{_either(post_ln, 'display')} checkpoints (model_type {_either(post_ln, 'model_type')}): Admin needs "
            "Post-LN residuals."
        )
    shapes = checkpoint_shapes(source)
    architecture = (config.get("architectures") or ["VariantBertModel"])[0]
    model = _load(getattr(hav, architecture), source)
    _check_loaded(model, source, shapes)

    def write(folder):
        export_to_transformers(model, folder)
        plain = _load(getattr(transformers, architecture.replace("Variant", "", 1)), folder)
        problem = _mismatch(model, plain, probe_inputs(model.config, architecture), atol, rtol)
        if problem:
            raise ValueError(f"The exported model does not compute the Admin model's function: {problem}.")
        _copy_tokenizer(source, folder)

    return _write_atomically(output, write)


__all__ = [
    "FUNCTION_PRESERVING",
    "TOKENIZER_FILES",
    "checkpoint_shapes",
    "convert",
    "export_admin",
    "export_to_transformers",
    "probe_inputs",
    "weights_report",
]
