"""Look at what a model learned: talking heads' head maps and a synthesizer's alignments, drawn to PNG. Package-only.

    from hf_attn_variants.visualize import attention_maps, draw_attention_maps
    maps = attention_maps(model)                                   # the matrices, as numpy arrays
    draw_attention_maps(model, "pictures", tokenizer=tok, text="In the beginning God created the heaven.")

    hf-attn-variants draw outputs/bert-mini-talking-heads --out pictures

What is drawn, per attention layer (BERT: each layer; ALBERT: each shared layer once, and per use where an input is
run; T5: each place, encoder self-attention, decoder self-attention and cross-attention):

- Talking heads: the static maps across heads, `P_l` [h_k, h] (before the softmax) and `P_w` [h, h_v] (after it),
  one figure for the whole model, on a diverging colour scale centred at 0 (identity init shows the identity).
  Dynamic (input-dependent) additions to them are not drawn.
- Synthesizer: each head's alignment logits per component, [n, m]: Random `R[:n, :m]`, Factorized Random
  `R1[:n] R2[:m]^T`, and, for an input text, Dense / Factorized Dense `B(x)` and the scaled dot product; with a text
  also T5's relative position bias and the softmax weights that multiply the values (what `output_attentions`
  returns: softmax of the mixed logits plus the mask and position bias). A mixture's weights alpha_c (after
  normalisation) label the rows and get a figure of their own.

Random components need no input: they are sliced to `length` positions. Input-dependent ones (dense, factorized
dense, dot product) need `text` and the model's tokenizer; a T5 model reads the text as its encoder input and the same
text, shifted right, as its decoder input. matplotlib is needed only to draw (`attention_maps` runs without it).
"""

import dataclasses
import inspect
import json
import re
from pathlib import Path

import numpy as np
import torch

from .attention_tools import attention_types_in
from .families import family_of
from .models.attention_synthesizer import synthesizer_logits
from .models.attention_variants import ATTENTION_CLASSES

DRAWN_TYPES = ("talking_heads", "synthesizer")
DEFAULT_LENGTH = 32  # positions of a Random synthesizer drawn without an input
INPUT_DEPENDENT = frozenset({"dense", "factorized_dense", "dot_product"})  # synthesizer components that read x or k
_LOGITS_PARAMETERS = frozenset(inspect.signature(synthesizer_logits).parameters)


@dataclasses.dataclass
class AttentionMap:
    """One attention layer's matrices, as `draw_attention_maps` draws them.

    place: where in the model ("layer 2", "layers 0-3 (one shared layer)", "encoder layer 0 self-attention").
    attention_type: "talking_heads" or "synthesizer".
    matrices: name -> array. Talking heads: "P_l" [h_k, h] and "P_w" [h, h_v] (those the config has). Synthesizer:
        each component's logits [h, n, m] before mixing ("random", "dense", ...), and with an input, T5's
        "position_bias" [h, n, m] (added to the mixed logits with the mask) and "weights" [h, n, m], the softmax
        weights that multiply the values.
    mixture: component -> its weight alpha_c in the logits' sum (a mixture only).
    """

    place: str
    attention_type: str
    matrices: dict[str, np.ndarray]
    mixture: dict[str, float] | None = None


def _places(path: str, config) -> tuple[str, list[str]]:
    """The name of the attention layer at module `path` and the names of its uses, one per call in a forward pass
    (ALBERT's shared layers run several times)."""
    t5 = re.search(r"(encoder|decoder)\.block\.(\d+)\.layer\.\d+\.(SelfAttention|EncDecAttention)", path)
    if t5:
        stack, index, kind = t5.groups()
        place = f"{stack} layer {index} {'self' if kind == 'SelfAttention' else 'cross'}-attention"
        return place, [place]
    albert = re.search(r"albert_layer_groups\.(\d+)\.albert_layers\.(\d+)", path)
    if albert:
        group, inner = map(int, albert.groups())
        total, groups = config.num_hidden_layers, config.num_hidden_groups
        layers = [i for i in range(total) if int(i / (total / groups)) == group]  # as VariantAlbertTransformer
        sublayer = f" sublayer {inner}" if config.inner_group_num > 1 else ""
        uses = [f"layer {i}{sublayer}" for i in layers]
        if len(layers) == 1:
            return uses[0], uses
        return f"layers {layers[0]}-{layers[-1]}{sublayer} (one shared layer)", uses
    bert = re.search(r"layer\.(\d+)\.(attention|crossattention)\.", path)
    if bert:
        place = f"layer {bert[1]}" + (" cross-attention" if bert[2] == "crossattention" else "")
        return place, [place]
    return path, [path]


def _attention_cores(model) -> list[tuple[str, torch.nn.Module]]:
    """(path, core) of every attention core of the model, in module order. Matched by class name, so a model loaded
    as remote code (its own copy of the classes) is found too."""
    names = {cls.__name__ for cls in ATTENTION_CLASSES.values()}
    return [(path, module) for path, module in model.named_modules() if type(module).__name__ in names]


class _OneComponent:
    """A synthesizer core seen as a single-component one, so `synthesizer_logits` gives that component's term."""

    def __init__(self, core, component: str):
        self._core = core
        self.spec = dataclasses.replace(core.spec, components=(component,))

    def __getattr__(self, name):
        return getattr(self._core, name)


@torch.no_grad()
def _component_logits(core, query, key, hidden_states, **call_kwargs) -> dict[str, np.ndarray]:
    """Each component's logits for the first row of the batch, [h, n, m]; `call_kwargs` are the keyword arguments
    the layer passed its core, of which those `synthesizer_logits` takes are passed on."""
    taken = {name: value for name, value in call_kwargs.items() if name in _LOGITS_PARAMETERS}
    return {
        component: synthesizer_logits(
            _OneComponent(core, component), query, key, hidden_states, core.scaling, **taken
        )[0]
        .float()
        .cpu()
        .numpy()
        for component in core.spec.components
    }


def _mixture(core) -> dict[str, float] | None:
    alpha = core.mixture_alpha()
    return None if alpha is None else dict(zip(core.spec.components, alpha.tolist()))


def _talking_heads_map(place: str, core) -> AttentionMap:
    matrices = {
        name: getattr(core, attribute).detach().float().cpu().numpy()
        for name, attribute in (("P_l", "pre_softmax_proj"), ("P_w", "post_softmax_proj"))
        if hasattr(core, attribute)
    }
    return AttentionMap(place, "talking_heads", matrices)


def _random_synthesizer_map(place: str, core, length: int) -> AttentionMap:
    """A synthesizer whose components need no input: its logits over `length` positions."""
    needs = INPUT_DEPENDENT.intersection(core.spec.components)
    if needs:
        raise ValueError(
            f"The synthesizer at {place} has input-dependent components ({', '.join(sorted(needs))}): "
            "pass an input (`text` and `tokenizer`; the command's --text) to draw them."
        )
    core.check_lengths(length, length)
    memory = torch.zeros(1, length, core.spec.hidden_size, device=next(core.parameters()).device)
    key = memory.new_zeros(1, 1, length, 1)  # the pure synthesizer's placeholder keys: only their length is read
    return AttentionMap(place, "synthesizer", _component_logits(core, None, key, memory), _mixture(core))


def _run_synthesizers(model, cores, inputs: dict) -> list[AttentionMap]:
    """Run `inputs` through the model (eval mode, no gradients) and record, at each call of each synthesizer core,
    its components' logits and the softmax weights."""
    maps, handles = [], []

    def recorder(path, core):
        signature = inspect.signature(type(core).forward)
        uses = iter(_places(path, model.config)[1])

        def hook(module, args, kwargs, output):
            bound = signature.bind(module, *args, **kwargs).arguments
            matrices = _component_logits(
                module, bound["query"], bound["key"], bound["hidden_states"], **bound.get("kwargs", {})
            )
            if bound.get("position_bias") is not None:  # T5: added to the logits with the mask
                matrices["position_bias"] = bound["position_bias"][0].float().cpu().numpy()
            matrices["weights"] = output[1][0].float().cpu().numpy()
            maps.append(AttentionMap(next(uses), "synthesizer", matrices, _mixture(module)))

        return hook

    for path, core in cores:
        handles.append(core.register_forward_hook(recorder(path, core), with_kwargs=True))
    inputs = _model_inputs(model, inputs)
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(**inputs, output_attentions=True)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return maps


def _model_inputs(model, inputs: dict) -> dict:
    """The forward's inputs: an encoder-decoder reads the text, shifted right, as its decoder input too."""
    inputs = dict(inputs)
    if model.config.is_encoder_decoder and "decoder_input_ids" not in inputs:
        inputs["decoder_input_ids"] = model._shift_right(inputs["input_ids"])
    return inputs


def attention_maps(model, inputs: dict | None = None, length: int = DEFAULT_LENGTH) -> list[AttentionMap]:
    """The matrices of every talking-heads and synthesizer attention layer of `model`, as `AttentionMap`s.

    Talking heads come first (their static `P_l`/`P_w`, in module order), then the synthesizers: with `inputs` (a
    tokenizer's output, batch of one) the model runs on them and each synthesizer call is recorded (its components'
    logits and its softmax weights); without, each synthesizer's input-free components over `length` positions.
    Raises a ValueError for a model with neither attention type (nothing to draw), and for input-dependent
    synthesizer components without `inputs`.
    """
    cores = [(path, core) for path, core in _attention_cores(model) if core.spec.attention_type in DRAWN_TYPES]
    if not cores:
        types = sorted({core.spec.attention_type for _, core in _attention_cores(model)}) or ["none found"]
        raise ValueError(
            f"Nothing to draw: the model's attention is {', '.join(types)}; only talking heads (P_l, P_w) and "
            "synthesizers (their alignments) have learned matrices of their own to draw. For the attention weights "
            "of any model, run it with output_attentions=True (bertviz draws those)."
        )
    maps = [
        _talking_heads_map(_places(path, model.config)[0], core)
        for path, core in cores
        if core.spec.attention_type == "talking_heads"
    ]
    synthesizers = [(path, core) for path, core in cores if core.spec.attention_type == "synthesizer"]
    if synthesizers and inputs is not None:
        return maps + _run_synthesizers(model, synthesizers, inputs)
    return maps + [
        _random_synthesizer_map(_places(path, model.config)[0], core, length) for path, core in synthesizers
    ]


def require_matplotlib():
    """matplotlib's `Figure` class, or an ImportError that names what to install (raised before any model loads
    where `draw_checkpoint` draws)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "Drawing attention maps needs matplotlib, which is not installed: pip install matplotlib (or "
            '"hf-attn-variants[examples]"). `attention_maps` gives the matrices without it.'
        ) from error
    return Figure


def _figure(**kwargs):
    """A matplotlib Figure (no pyplot: nothing global, any backend); matplotlib is imported only here."""
    return require_matplotlib()(layout="constrained", **kwargs)


def _heatmap(ax, matrix: np.ndarray, scale: float, digits: int = 2):
    """matrix on ax (row 0 at the top) on a diverging scale from -scale to scale; each cell's value written in it
    when the matrix is small (white on the dark ends of the scale)."""
    image = ax.imshow(matrix, cmap="RdBu_r", vmin=-scale, vmax=scale, interpolation="nearest")
    if max(matrix.shape) <= 12:
        ax.set_xticks(range(matrix.shape[1]))
        ax.set_yticks(range(matrix.shape[0]))
        for (row, col), value in np.ndenumerate(matrix):
            color = "white" if abs(value) > 0.6 * scale else "black"
            ax.text(col, row, f"{value:.{digits}f}", ha="center", va="center", fontsize=6, color=color)
    return image


# talking heads' maps: (name, row axis, column axis)
_HEAD_MAPS = (("P_l", "key head (h_k)", "softmax head (h)"), ("P_w", "softmax head (h)", "value head (h_v)"))


def plot_talking_heads(
    maps: list[AttentionMap],
    title: str = "Talking heads: the maps across heads (identity = plain multi-head attention)",
):
    """One figure of every talking-heads layer's `P_l` and `P_w` (a row per layer), on one diverging colour scale
    centred at 0, so layers compare; returns the matplotlib Figure."""
    scale = max(float(np.abs(m).max()) for amap in maps for m in amap.matrices.values()) or 1.0
    figure = _figure(figsize=(6.0, 2.4 * len(maps) + 0.4))
    axes = figure.subplots(len(maps), len(_HEAD_MAPS), squeeze=False)
    for row, amap in zip(axes, maps):
        for ax, (name, rows, columns) in zip(row, _HEAD_MAPS):
            if name not in amap.matrices:
                ax.set_axis_off()
                continue
            image = _heatmap(ax, amap.matrices[name], scale)
            ax.set_title(f"{amap.place}: {name}", fontsize=8)
            ax.set_ylabel(rows, fontsize=7)
            ax.set_xlabel(columns, fontsize=7)
    figure.colorbar(image, ax=axes, shrink=0.6)
    figure.suptitle(title, fontsize=9)
    return figure


def _row_title(amap: AttentionMap, name: str) -> str:
    if name in ("weights", "position_bias"):
        return {"weights": "softmax weights", "position_bias": "position bias"}[name]
    alpha = f" (alpha {amap.mixture[name]:.3f})" if amap.mixture else ""
    return f"{name} logits{alpha}"


def _token_ticks(ax, query_tokens, key_tokens, shape) -> None:
    """Token labels on the axes where they match the matrix and fit."""
    if query_tokens is not None and len(query_tokens) == shape[0] <= 40:
        ax.set_yticks(range(shape[0]), query_tokens, fontsize=5)
    if key_tokens is not None and len(key_tokens) == shape[1] <= 40:
        ax.set_xticks(range(shape[1]), key_tokens, fontsize=5, rotation=90)


def plot_synthesizer(amap: AttentionMap, tokens: list[str] | None = None):
    """One synthesizer layer: a row per component's logits (diverging scale centred at 0) and, where recorded, the
    softmax weights (0 to max), a column per head; queries down, keys across, labelled with `tokens` where given.
    Returns the matplotlib Figure."""
    names = list(amap.matrices)
    heads = amap.matrices[names[0]].shape[0]
    figure = _figure(figsize=(2.4 * heads + 1.0, 2.5 * len(names) + 0.4))
    axes = figure.subplots(len(names), heads, squeeze=False)
    for row, name in zip(axes, names):
        matrix = amap.matrices[name]
        scale = float(np.abs(matrix).max()) or 1.0
        low, cmap = (0.0, "viridis") if name == "weights" else (-scale, "RdBu_r")
        for head, ax in enumerate(row):
            image = ax.imshow(matrix[head], cmap=cmap, vmin=low, vmax=scale, interpolation="nearest")
            ax.set_title(f"{_row_title(amap, name)}, head {head}", fontsize=7)
            _token_ticks(ax, tokens, tokens, matrix.shape[1:])
        figure.colorbar(image, ax=list(row), shrink=0.8)
    figure.suptitle(f"Synthesizer, {amap.place}: queries down, keys across", fontsize=9)
    return figure


def plot_mixture(maps: list[AttentionMap]):
    """The mixture weights alpha_c of every synthesizer layer (a row per layer, a column per component); returns
    the matplotlib Figure."""
    components = list(maps[0].mixture)
    table = np.array([[amap.mixture[c] for c in components] for amap in maps])
    scale = float(np.abs(table).max()) or 1.0
    figure = _figure(figsize=(1.2 * len(components) + 2.5, 0.45 * len(maps) + 1.2))
    ax = figure.subplots()
    image = _heatmap(ax, table, scale, digits=3)
    ax.set_aspect("auto")
    ax.set_xticks(range(len(components)), components, fontsize=7)
    ax.set_yticks(range(len(maps)), [amap.place for amap in maps], fontsize=7)
    figure.colorbar(image, ax=ax)
    ax.set_title("Synthesizer mixture weights alpha (logits = sum_c alpha_c S_c)", fontsize=9)
    return figure


def _slug(place: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", place.lower()).strip("-")


def draw_attention_maps(
    model, out_dir, *, tokenizer=None, text: str | None = None, length: int = DEFAULT_LENGTH, dpi: int = 100
) -> list[Path]:
    """Draw `attention_maps(model, ...)` to PNG files in `out_dir` (created) and return their paths.

    Files: `talking-heads.png` (every talking-heads layer's P_l and P_w), `synthesizer-<place>.png` per synthesizer
    layer (per use with a text, so each of ALBERT's shared-layer runs), `mixture-weights.png` for mixtures. With
    `text` (which needs the model's `tokenizer`), input-dependent synthesizer components and the softmax weights are
    drawn for that input, labelled with its tokens.
    """
    inputs = encoder_tokens = decoder_tokens = None
    if text is not None:
        if tokenizer is None:
            raise ValueError("`text` needs the model's `tokenizer` to make the input.")
        inputs = _model_inputs(model, tokenizer(text, return_tensors="pt"))
        encoder_tokens = tokenizer.convert_ids_to_tokens(inputs["input_ids"][0])
        if "decoder_input_ids" in inputs:
            decoder_tokens = tokenizer.convert_ids_to_tokens(inputs["decoder_input_ids"][0])
    maps = attention_maps(model, inputs, length)
    figures = []
    talking = [amap for amap in maps if amap.attention_type == "talking_heads"]
    if talking:
        figures.append(("talking-heads.png", plot_talking_heads(talking)))
    synthesizers = [amap for amap in maps if amap.attention_type == "synthesizer"]
    for amap in synthesizers:
        tokens = decoder_tokens if amap.place.startswith("decoder") else encoder_tokens
        figures.append((f"synthesizer-{_slug(amap.place)}.png", plot_synthesizer(amap, tokens)))
    mixtures = [amap for amap in synthesizers if amap.mixture]
    if mixtures:
        figures.append(("mixture-weights.png", plot_mixture(mixtures)))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, figure in figures:
        figure.savefig(out / name, dpi=dpi)
    return [out / name for name, _ in figures]


def draw_checkpoint(
    folder, out_dir, *, text: str | None = None, length: int = DEFAULT_LENGTH, dpi: int = 100
) -> list[Path]:
    """`draw_attention_maps` of the checkpoint in `folder` (loaded as config.json's first architecture; its tokenizer
    only with `text`): what `hf-attn-variants draw` runs."""
    import hf_attn_variants

    require_matplotlib()  # before the model loads
    config_file = Path(folder) / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{folder} has no config.json: pass a folder written by save_pretrained.")
    config = json.loads(config_file.read_text())
    family = family_of(config)  # refuses a checkpoint of another library, naming the model types it takes
    if text is not None and "synthesizer" not in {entry.name for entry in attention_types_in(config)}:
        raise ValueError(
            "--text changes nothing of what is drawn for this model: only a synthesizer's maps and weights depend "
            "on the input (talking heads' P_l and P_w do not); leave out --text."
        )
    architecture = (config.get("architectures") or [family.base_model])[0]
    model = getattr(hf_attn_variants, architecture).from_pretrained(folder)
    tokenizer = None
    if text is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
    return draw_attention_maps(model, out_dir, tokenizer=tokenizer, text=text, length=length, dpi=dpi)


__all__ = [
    "AttentionMap",
    "require_matplotlib",
    "attention_maps",
    "draw_attention_maps",
    "draw_checkpoint",
    "plot_mixture",
    "plot_synthesizer",
    "plot_talking_heads",
]
