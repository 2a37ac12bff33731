"""Turning the config's ``MODEL.NORM_ACT`` into the suite's norm-act layers.

Every place of the detector that has a normalization (backbone, FPN, RoI heads) builds it
through :func:`norm_act_maker`, so one config key selects the layer of the whole model,
as in the paper ("EvoNorms are applied to both the backbone and the heads").
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from evonorm_core import NormActMaker, norm_act_factory, norm_act_options


def norm_act_maker(cfg) -> NormActMaker:
    """``make(num_channels, nonlinearity)`` for the layer named by ``cfg.MODEL.NORM_ACT``.

    ``NAME`` is any name of :func:`evonorm_core.list_norm_acts` (``bn``/``gn`` are aliases
    of BN-ReLU/GN-ReLU); ``SYNC`` synchronizes batch statistics across processes
    (SyncBN semantics; only layers with batch statistics accept it); ``GROUPS`` (0 = the
    layer's default of 32), ``EPS`` and ``IMPL`` are passed on when set. A bad name or option raises
    a ``ValueError`` that names the config key and the accepted values.
    """
    node = cfg.MODEL.NORM_ACT
    options = norm_act_options(groups=int(node.GROUPS) if node.GROUPS > 0 else None, sync=node.SYNC,
                               eps=float(node.EPS) if node.EPS > 0 else None, impl=node.IMPL or None)
    try:
        return norm_act_factory(node.NAME, **options)
    except ValueError as err:
        raise ValueError(f"bad MODEL.NORM_ACT (NAME={node.NAME!r}, options {options}): {err}") from err


def buffers_finite(module: nn.Module) -> bool:
    """Whether every floating-point buffer of ``module`` (its moving statistics) is finite."""
    return all(torch.isfinite(b).all() for b in module.buffers() if b.is_floating_point())


class EmptyBatchSafe(nn.Module):
    """Wraps a norm-act layer of a RoI head so that a batch of zero RoIs is harmless.

    A head can receive no RoIs: in training an image without foreground proposals reaches
    the mask head with none, in inference an image without detections does. Statistics
    over an empty batch are NaN (batch statistics would write NaN into the moving averages)
    or cannot even be shaped (grouped statistics). For an empty input:

    * a layer with buffers (moving statistics) in training still runs, so a synchronized
      layer takes part in the all-reduce the other processes wait for; its buffers are put
      back if the update made them non-finite (no process had a RoI);
    * otherwise the empty input is returned, tied to the parameters by a zero so every
      parameter still gets a (zero) gradient, as DDP expects.
    """

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[0] > 0:
            return self.layer(x)
        if self.training and any(True for _ in self.layer.buffers()):
            return self.update_skipping_nan(x)
        return x + sum((p.sum() for p in self.layer.parameters()), x.new_zeros(())) * 0

    def update_skipping_nan(self, x: Tensor) -> Tensor:
        saved = [b.clone() for b in self.layer.buffers()]
        out = self.layer(x)
        if not buffers_finite(self.layer):
            with torch.no_grad():
                for buffer, value in zip(self.layer.buffers(), saved):
                    buffer.copy_(value)
        return out


def empty_batch_safe(make: NormActMaker) -> NormActMaker:
    """``make`` whose layers are wrapped in :class:`EmptyBatchSafe`."""

    def make_safe(num_channels: int, nonlinearity: bool = True) -> nn.Module:
        return EmptyBatchSafe(make(num_channels, nonlinearity))

    return make_safe
