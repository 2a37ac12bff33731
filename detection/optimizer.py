"""SGD whose norm-act parameters follow ``SOLVER.WEIGHT_DECAY_NORM``.

detectron2's ``get_default_optimizer_params`` recognizes norm layers by type (BatchNorm,
GroupNorm, ...), so EvoNorm's gamma, beta and v would get the ordinary weight decay. Every
norm of this project's models sits in a detectron2 ``Conv2d``'s ``norm`` slot, whatever the
layer is (a registered name or a searched layer), so that slot is how they are found here.
"""
from __future__ import annotations

import torch
from detectron2.layers import Conv2d
from detectron2.solver.build import get_default_optimizer_params, maybe_add_gradient_clipping, reduce_param_groups
from torch import nn


def norm_parameters(model: nn.Module) -> set[nn.Parameter]:
    """Parameters of every module in a ``Conv2d.norm`` slot."""
    return {
        param
        for module in model.modules()
        if isinstance(module, Conv2d) and module.norm is not None
        for param in module.norm.parameters()
    }


def optimizer_param_groups(cfg, model: nn.Module) -> list[dict]:
    """detectron2's parameter groups, with ``weight_decay = WEIGHT_DECAY_NORM`` for all norm parameters."""
    groups = get_default_optimizer_params(
        model,
        base_lr=cfg.SOLVER.BASE_LR,
        weight_decay=cfg.SOLVER.WEIGHT_DECAY,
        weight_decay_norm=cfg.SOLVER.WEIGHT_DECAY_NORM,
        bias_lr_factor=cfg.SOLVER.BIAS_LR_FACTOR,
        weight_decay_bias=cfg.SOLVER.WEIGHT_DECAY_BIAS,
    )
    norms = norm_parameters(model)
    per_param = [
        {**group, "params": [param], **({"weight_decay": cfg.SOLVER.WEIGHT_DECAY_NORM} if param in norms else {})}
        for group in groups
        for param in group["params"]
    ]
    return reduce_param_groups(per_param)


def build_optimizer(cfg, model: nn.Module) -> torch.optim.Optimizer:
    """SGD as detectron2's ``build_optimizer``, over :func:`optimizer_param_groups`."""
    sgd = torch.optim.SGD(
        optimizer_param_groups(cfg, model),
        lr=cfg.SOLVER.BASE_LR,
        momentum=cfg.SOLVER.MOMENTUM,
        nesterov=cfg.SOLVER.NESTEROV,
        weight_decay=cfg.SOLVER.WEIGHT_DECAY,
        foreach=True,
    )
    return maybe_add_gradient_clipping(cfg, sgd)
