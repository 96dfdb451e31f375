"""Admin initialization (Liu et al. 2020) for Post-LN models built with `admin=True`. Package-only.

- `admin_profile(model, batch)`: Admin's profiling as the paper states it: one forward pass in eval mode with every
  omega at 1 records the variance of each residual branch's output f_i, then omega_i = sqrt(1 + sum_{j<i} Var[f_j]);
  under data parallelism the statistics are combined over the ranks, so every rank sets the same omegas.
- `admin_closed_form(model)`: admin-torch's O(log N) alternative, omega = sqrt((N+1)/ln(N+1) - 1) for the N
  residuals that carry an omega.
- `AdminInitCallback`: either one, from a `Trainer`, before the first step.
Both need a model built with `admin=True` (BERT and ALBERT: Post-LN). omega is a parameter, saved with the weights.
Deep single-head twins live beside the presets (`hf_attn_variants.presets.single_head_twin`); the export of an Admin
model to plain transformers is a conversion (`hf_attn_variants.convert.export_to_transformers`).
"""

import math

import torch
from transformers import TrainerCallback

from .families import family_of
from .models.modeling_variant_utils import VariantPreTrainedModel


def admin_residuals(model) -> list:
    """The modules that carry an Admin omega (ValueError if the model was built without `admin=True`)."""
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
    residuals = admin_residuals(model)
    records, order = [], []
    runs = {}

    def record(module, branch):
        runs[module] = runs.get(module, 0) + 1
        values = branch.detach().double()
        mean = values.mean()
        records.append(torch.stack([values.new_tensor(values.numel()), mean, ((values - mean) ** 2).sum()]))
        order.append(module)

    was_training, unpad = model.training, model.config.unpad
    model.eval()
    model.config.unpad = False  # the padded batch: its statistics are the whole batch tensor's, padding included
    try:
        for module in residuals:
            module.admin_omega.fill_(1.0)
            module.admin_recorder = record
        model(**batch)
    finally:
        for module in residuals:
            del module.admin_recorder
        model.train(was_training)
        model.config.unpad = unpad
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
    residuals = admin_residuals(model)
    config = model.config
    if family_of(config).shares_layers:  # ALBERT: num_hidden_layers runs of a group of inner_group_num layers
        return 2 * config.num_hidden_layers * config.inner_group_num
    return len(residuals)


@torch.no_grad()
def admin_closed_form(model: VariantPreTrainedModel) -> float:
    """Set every omega to admin-torch's O(log N) value for the N residuals that run (`residual_count`); returns it."""
    residuals = admin_residuals(model)
    n = residual_count(model)
    omega = math.sqrt((n + 1) / math.log(n + 1) - 1)
    for module in residuals:
        module.admin_omega.fill_(omega)
    return omega


ADMIN_INIT_METHODS = ("profile", "closed_form")  # how `AdminInitCallback` sets the omegas


class AdminInitCallback(TrainerCallback):
    """A `transformers.TrainerCallback` that sets Admin's omegas before the first step.

    `method="profile"` runs `admin_profile` on the first training batch (labels removed); `"closed_form"` uses
    `admin_closed_form` (shared ALBERT layers need it). Pass it as `Trainer(..., callbacks=[AdminInitCallback()])`.
    """

    def __init__(self, method: str = "profile"):
        if method not in ADMIN_INIT_METHODS:
            raise ValueError(f"`method`={method!r}; allowed: {', '.join(map(repr, ADMIN_INIT_METHODS))}.")
        self.method = method
        self.omegas = None

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        if self.method == "closed_form":
            self.omegas = [admin_closed_form(model)]
            return
        batch = next(iter(train_dataloader))
        device = next(model.parameters()).device
        batch = {
            k: v.to(device)
            for k, v in batch.items()
            if k not in ("labels", "next_sentence_label", "sentence_order_label")
        }
        self.omegas = admin_profile(model, batch)


# The name this callback had when it only profiled; kept so that code written for it still runs.
AdminProfilingCallback = AdminInitCallback
