"""Deep single-head models and Admin initialization (Liu et al. 2021; Liu et al. 2020). Package-only.

- `single_head_twin(config)`: the deep single-head twin of a multi-head config (L*h layers, 1 head of the same
  head size, feed-forward f/h), with both parameter counts.
- `admin_profile(model, batch)`: Admin's profiling as the paper states it: one forward pass in eval mode with every
  omega at 1 records the variance of each residual branch's output f_i, then omega_i = sqrt(1 + sum_{j<i} Var[f_j]);
  under data parallelism the statistics are combined over the ranks, so every rank sets the same omegas.
- `admin_closed_form(model)`: admin-torch's O(log N) alternative, omega = sqrt((N+1)/ln(N+1) - 1) for the N
  residuals that carry an omega.
Both need a model built with `admin=True` (BERT and ALBERT: Post-LN). omega is a parameter, saved with the weights.
"""

import copy
import math

import torch
import transformers
from transformers import TrainerCallback

from .modeling_variant_utils import VariantPreTrainedModel


def _residuals(model):
    modules = [m for m in model.modules() if getattr(m, "admin_omega", None) is not None]
    if not modules:
        raise ValueError("The model has no Admin residuals: build it with `admin=True` (BERT or ALBERT).")
    return modules


def _branch_statistics(records: list[torch.Tensor]) -> torch.Tensor:
    """Per residual branch [count, mean, M2] (M2: the sum of squared deviations), combined over every rank of a
    `torch.distributed` group when one is running (Chan et al.'s parallel variance), so that all ranks see the
    statistics of the whole global batch and set the same omegas."""
    stats = torch.stack(records)  # [branches, 3], float64
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return stats
    world = torch.distributed.get_world_size()
    if world == 1:
        return stats
    gathered = [torch.empty_like(stats) for _ in range(world)]
    torch.distributed.all_gather(gathered, stats)
    counts = torch.stack([g[:, 0] for g in gathered])  # [ranks, branches]
    means = torch.stack([g[:, 1] for g in gathered])
    m2s = torch.stack([g[:, 2] for g in gathered])
    count = counts.sum(0)
    mean = (counts * means).sum(0) / count
    m2 = m2s.sum(0) + (counts * (means - mean) ** 2).sum(0)
    return torch.stack([count, mean, m2], dim=1)


@torch.no_grad()
def admin_profile(model: VariantPreTrainedModel, batch: dict) -> list[float]:
    """Set every omega from one forward pass on `batch` (a dict of model inputs); returns the omegas set.

    The procedure is the Admin paper's initialization as the paper states it (Liu et al. 2020): with every omega_i = 1, run one
    forward pass without updating parameters and record Var[f_i(x_{i-1})], the output variance of each residual
    branch (over the whole batch tensor, padding included, unbiased), in the order the residuals run; then set

        omega_i = sqrt(1 + sum_{j < i} Var[f_j(x_{j-1})])

    (the 1 is Var[x_0] of the LayerNorm'd embeddings; recursively omega_1 = 1, omega_{i+1}^2 = omega_i^2 + Var[f_i]).
    The pass runs in eval mode, so the statistics carry no dropout noise. The released Admin code differs: it
    profiles on the first training batch in training mode (dropout on), layer by layer, setting each omega before it
    takes the next branch's statistics; an audit measured the two up to ~5% apart on a 4-layer model.

    Under data parallelism (a running `torch.distributed` group, e.g. Trainer under torchrun) every rank profiles
    its own batch and the statistics are combined over the ranks: every rank sets the same omegas, those of the
    global batch.

    A shared ALBERT layer runs several times with one omega, for which this rule has no single value: use
    `admin_closed_form` there.
    """
    residuals = _residuals(model)
    records, order = [], []
    runs = {}

    def record(module, branch):
        runs[module] = runs.get(module, 0) + 1
        values = branch.detach().double()
        mean = values.mean()
        records.append(torch.stack([values.new_tensor(values.numel()), mean, ((values - mean) ** 2).sum()]))
        order.append(module)

    was_training = model.training
    model.eval()
    try:
        for module in residuals:
            module.admin_omega.fill_(1.0)
            module.admin_recorder = record
        model(**batch)
    finally:
        for module in residuals:
            del module.admin_recorder
        model.train(was_training)
    if any(count > 1 for count in runs.values()):
        raise ValueError(
            "A residual ran more than once (shared ALBERT layers): variance profiling gives it no single omega; "
            "use `admin_closed_form(model)`."
        )
    stats = _branch_statistics(records).cpu()
    variances = (stats[:, 2] / (stats[:, 0] - 1)).tolist()
    omega_sq, omegas = 1.0, []
    for module, variance in zip(order, variances):
        module.admin_omega.fill_(math.sqrt(omega_sq))
        omegas.append(math.sqrt(omega_sq))
        omega_sq += variance
    return omegas


def residual_count(model: VariantPreTrainedModel) -> int:
    """N, the residual applications that carry an omega in one forward pass: two per layer, three in a BERT decoder
    layer with cross-attention, and a shared ALBERT layer counted once for every time it runs."""
    residuals = _residuals(model)
    config = model.config
    if config.model_type == "variant_albert":  # num_hidden_layers applications of a group of inner_group_num layers
        return 2 * config.num_hidden_layers * config.inner_group_num
    return len(residuals)


@torch.no_grad()
def admin_closed_form(model: VariantPreTrainedModel) -> float:
    """Set every omega to admin-torch's O(log N) value for the N residuals that run (`residual_count`); returns it."""
    residuals = _residuals(model)
    n = residual_count(model)
    omega = math.sqrt((n + 1) / math.log(n + 1) - 1)
    for module in residuals:
        module.admin_omega.fill_(omega)
    return omega


def _count_parameters(model_class, config) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in model_class(config).parameters())


def single_head_twin(config, model_class=None):
    """The deep single-head twin of a multi-head config (BERT, ALBERT or T5) and both parameter counts.

    L layers of h heads with head size d_h and feed-forward f become L*h layers of one head of size d_h and
    feed-forward f/h: the same number of attention heads in total and about the same size (Liu et al. 2021:
    BERT-base 12x12 -> 144x1, BERT-large 24x16 -> 384x1). ALBERT shares G layer groups across its depth, so its twin
    has G*h groups of one-head layers, each shared across L/G consecutive layers as before (one shared layer would
    shrink the model h-fold). Returns (twin_config, {"multi_head": n, "single_head":
    n_twin, "ratio": n_twin / n}); counts are of `model_class` (default: the family's base model) built on the
    meta device, so nothing is allocated.
    """
    heads = config.num_attention_heads
    twin = copy.deepcopy(config)
    twin.talking_heads_num_key_heads = twin.talking_heads_num_value_heads = None  # one head everywhere
    if config.model_type == "variant_t5":  # T5 names its fields differently; its head size d_kv is explicit
        if config.d_ff % heads:
            raise ValueError(f"`d_ff` ({config.d_ff}) is not a multiple of `num_heads` ({heads}).")
        twin.num_layers = config.num_layers * heads
        twin.num_decoder_layers = config.num_decoder_layers * heads
        twin.num_heads = 1
        twin.d_ff = config.d_ff // heads
    else:
        if config.intermediate_size % heads:
            raise ValueError(
                f"`intermediate_size` ({config.intermediate_size}) is not a multiple of `num_attention_heads` "
                f"({heads}): the twin's feed-forward width f/h would not be whole."
            )
        twin.num_hidden_layers = config.num_hidden_layers * heads
        if config.model_type == "variant_albert":  # h groups of one-head layers for each group, each shared across
            twin.num_hidden_groups = config.num_hidden_groups * heads  # the depth as the group was: the same size
        twin.num_attention_heads = 1
        twin.attention_head_size = getattr(config, "attention_head_size", None) or config.hidden_size // heads
        twin.intermediate_size = config.intermediate_size // heads
    if model_class is None:
        import hf_attn_variants

        model_class = {"variant_bert": hf_attn_variants.VariantBertModel,
                       "variant_albert": hf_attn_variants.VariantAlbertModel,
                       "variant_t5": hf_attn_variants.VariantT5Model}[config.model_type]
    counts = {"multi_head": _count_parameters(model_class, config), "single_head": _count_parameters(model_class, twin)}
    counts["ratio"] = counts["single_head"] / counts["multi_head"]
    return twin, counts


def _check_scalar_omegas(residuals):
    for module in residuals:
        omega = module.admin_omega
        if not torch.all(omega == omega[0]) or omega[0] <= 0:
            raise ValueError(
                "Export folds one positive omega per residual into the branch's output projection; this model has an "
                "omega that varies across the width (trained per-width). Keep it as a VariantBert/VariantAlbert model."
            )


@torch.no_grad()
def export_to_transformers(model: VariantPreTrainedModel, save_directory) -> None:
    """Write an Admin model as a plain transformers `Bert*`/`Albert*` checkpoint that loads without remote code.

    LN(omega * x + f(x)) = LN(x + f(x) / omega) for a scalar omega > 0 (LayerNorm ignores a positive scale, up to
    its epsilon), so each branch's output projection is divided by its omega. Possible when the attention is plain
    dot-product with transformers' head size (hidden_size / num_attention_heads) and every omega is one scalar.
    """
    config = model.config
    if config.attention_type != "dot_product":
        raise ValueError(f"Only dot-product models export to plain transformers, not {config.attention_type!r}.")
    head_size = getattr(config, "attention_head_size", None)
    if head_size is not None and head_size * config.num_attention_heads != config.hidden_size:
        raise ValueError(
            f"transformers' {config.model_type.replace('variant_', '')} uses heads of hidden_size / num_attention_heads; "
            f"this model has {config.num_attention_heads} head(s) of size {head_size} in width {config.hidden_size} "
            "(a deep single-head twin), which it cannot represent."
        )
    residuals = _residuals(model)
    _check_scalar_omegas(residuals)
    reference_name = type(model).__name__.replace("Variant", "", 1)
    reference_class = getattr(transformers, reference_name)
    config_class = {"variant_bert": transformers.BertConfig, "variant_albert": transformers.AlbertConfig}[
        config.model_type
    ]
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
    if unexpected or any(not k.endswith(("position_ids", "token_type_ids")) for k in missing):
        raise ValueError(f"Export mismatch: missing {missing}, unexpected {unexpected}.")
    plain.save_pretrained(save_directory)


class AdminProfilingCallback(TrainerCallback):
    """A `transformers.TrainerCallback` that sets Admin's omegas before the first step.

    `method="profile"` runs `admin_profile` on the first training batch (labels removed); `"closed_form"` uses
    `admin_closed_form` (shared ALBERT layers need it). Pass it as `Trainer(..., callbacks=[AdminProfilingCallback()])`.
    """

    def __init__(self, method: str = "profile"):
        if method not in ("profile", "closed_form"):
            raise ValueError(f"`method`={method!r}; allowed: 'profile', 'closed_form'.")
        self.method = method
        self.omegas = None

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        if self.method == "closed_form":
            self.omegas = [admin_closed_form(model)]
            return
        batch = next(iter(train_dataloader))
        device = next(model.parameters()).device
        batch = {k: v.to(device) for k, v in batch.items() if k not in ("labels", "next_sentence_label",
                                                                          "sentence_order_label")}
        self.omegas = admin_profile(model, batch)
