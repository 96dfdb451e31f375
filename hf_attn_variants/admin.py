"""Deep single-head models and Admin initialization (Liu et al. 2021; Liu et al. 2020). Package-only.

- `single_head_twin(config)`: the deep single-head twin of a multi-head config (L*h layers, 1 head of the same
  head size, feed-forward f/h), with both parameter counts.
- `admin_profile(model, batch)`: Admin's profiling. Runs the model once with every omega at 1, records the variance
  of each residual branch's output f_i(x_i) over the whole batch tensor, in the order the residuals run, and sets
  omega_1 = 1, omega_{i+1}^2 = omega_i^2 + Var[f_i(x_i)] (the original Admin code).
- `admin_closed_form(model)`: admin-torch's O(log N) alternative, omega = sqrt((N+1)/ln(N+1) - 1) for all N
  residuals.
Both need a model built with `admin=True` (BERT and ALBERT: Post-LN). omega is a parameter, saved with the weights.
"""

import copy
import math

import torch

from .modeling_variant_utils import VariantPreTrainedModel


def _residuals(model):
    modules = [m for m in model.modules() if getattr(m, "admin_omega", None) is not None]
    if not modules:
        raise ValueError("The model has no Admin residuals: build it with `admin=True` (BERT or ALBERT).")
    return modules


@torch.no_grad()
def admin_profile(model: VariantPreTrainedModel, batch: dict) -> list[float]:
    """Set every omega from one forward pass on `batch` (a dict of model inputs); returns the omegas set.

    A shared ALBERT layer runs several times with one omega, for which the profiling rule has no single value:
    use `admin_closed_form` there.
    """
    residuals = _residuals(model)
    variances = []
    runs = {}

    def record(module, branch):
        runs[module] = runs.get(module, 0) + 1
        variances.append((module, branch.float().var().item()))

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
    omega_sq, omegas = 1.0, []
    for module, variance in variances:
        module.admin_omega.fill_(math.sqrt(omega_sq))
        omegas.append(math.sqrt(omega_sq))
        omega_sq += variance
    return omegas


@torch.no_grad()
def admin_closed_form(model: VariantPreTrainedModel) -> float:
    """Set every omega to admin-torch's O(log N) value for the N residuals that run; returns it."""
    residuals = _residuals(model)
    config = model.config
    n = 2 * config.num_hidden_layers * getattr(config, "inner_group_num", 1)  # attention + FFN per layer
    omega = math.sqrt((n + 1) / math.log(n + 1) - 1)
    for module in residuals:
        module.admin_omega.fill_(omega)
    return omega


def _count_parameters(model_class, config) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in model_class(config).parameters())


def single_head_twin(config, model_class=None):
    """The deep single-head twin of a multi-head config and both parameter counts.

    L layers of h heads with head size d_h and feed-forward f become L*h layers of one head of size d_h and
    feed-forward f/h: the same number of attention heads in total and about the same size (Liu et al. 2021:
    BERT-base 12x12 -> 144x1, BERT-large 24x16 -> 384x1). Returns (twin_config, {"multi_head": n, "single_head":
    n_twin, "ratio": n_twin / n}); counts are of `model_class` (default: the family's base model) built on the
    meta device, so nothing is allocated.
    """
    heads = config.num_attention_heads
    head_size = getattr(config, "attention_head_size", None) or config.hidden_size // heads
    if config.intermediate_size % heads:
        raise ValueError(
            f"`intermediate_size` ({config.intermediate_size}) is not a multiple of `num_attention_heads` ({heads}): "
            "the twin's feed-forward width f/h would not be whole."
        )
    twin = copy.deepcopy(config)
    twin.num_hidden_layers = config.num_hidden_layers * heads
    twin.num_attention_heads = 1
    twin.attention_head_size = head_size
    twin.intermediate_size = config.intermediate_size // heads
    twin.talking_heads_num_key_heads = twin.talking_heads_num_value_heads = None  # one head everywhere
    if model_class is None:
        import hf_attn_variants

        model_class = {"variant_bert": hf_attn_variants.VariantBertModel,
                       "variant_albert": hf_attn_variants.VariantAlbertModel}[config.model_type]
    counts = {"multi_head": _count_parameters(model_class, config), "single_head": _count_parameters(model_class, twin)}
    counts["ratio"] = counts["single_head"] / counts["multi_head"]
    return twin, counts
