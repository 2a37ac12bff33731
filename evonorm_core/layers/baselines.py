"""The hand-designed normalization-activation layers the paper compares EvoNorms against.

Each is ``activation(normalize(x) * gamma + beta)`` (Tables 2, 3 and 5), except the
"RS + rej" layer whose ReLU comes before the affine. With ``nonlinearity=False`` a layer
is its normalization and affine without activation. Activations: ``relu`` = max(z, 0),
``max_v0`` = max(z, v0) with learnable ``v0`` (init 0), ``swish1`` = z sigmoid(z),
``swish`` = z sigmoid(v1 z) with learnable ``v1`` (init 1).

BatchNorm and GroupNorm/LayerNorm call :func:`evonorm_core.functional.batch_norm` and
:func:`~evonorm_core.functional.group_norm` (PyTorch's own kernels); PixelNorm, FRN and
"RS + rej" have none and are composed ops.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .. import formulas, functional
from .. import statistics as stats
from .base import BatchStatsNormAct2d, GroupedNormAct2d, NormAct2d


class BatchNormAct2d(BatchStatsNormAct2d):
    r"""BatchNorm followed by an activation (BN-ReLU, BN-PReLU, BN-Swish-1, BN-Swish):

    .. math::
        \mathrm{act}(z), \quad z = \frac{x - \mu_{b,w,h}(x)}{\sqrt{s^2_{b,w,h}(x) + \epsilon}} \gamma + \beta

    Batch statistics in training (synchronised across processes with ``sync=True``, as
    ``SyncBatchNorm``), moving averages in eval; same update rule as ``nn.BatchNorm2d``.
    Runs on ``F.batch_norm``; synchronised statistics, and buffers in another dtype than
    the computation, take composed ops.
    """

    track_mean = True

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        *,
        activation: str = "relu",
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        sync: bool = False,
        process_group: object | None = None,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            num_channels, nonlinearity, eps=eps, momentum=momentum, sync=sync, process_group=process_group,
            affine=affine, activation=activation, device=device, dtype=dtype,
        )

    def transform(self, x: Tensor) -> Tensor:
        mean, var = self.batch_moments(x)
        return (x - mean) / torch.sqrt(var + self.eps)

    def forward_affine(self, x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
        x = self.check_input(x, weight, bias)
        z = functional.batch_norm(
            formulas.upcast(x), weight, bias, self.running_mean, self.running_var, self.num_batches_tracked,
            self.training, self.momentum, self.eps, self.sync, self.process_group,
        )
        return self.activate(z).to(x.dtype)

    def folded_affine(self) -> tuple[Tensor, Tensor] | None:
        if self.training:
            return None
        gamma, beta = self._gamma_beta()
        scale = gamma / torch.sqrt(self.running_var.to(gamma.dtype) + self.eps)
        return scale, beta - self.running_mean.to(gamma.dtype) * scale


class GroupNormAct2d(GroupedNormAct2d):
    r"""GroupNorm followed by an activation (GN-ReLU, GN-Swish):

    .. math::
        \mathrm{act}(z), \quad z = \frac{x - \mu_{w,h,c/g}(x)}{\sqrt{s^2_{w,h,c/g}(x) + \epsilon}} \gamma + \beta

    Runs on ``F.group_norm``.
    """

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        *,
        activation: str = "relu",
        eps: float = 1e-5,
        groups: int | None = None,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            num_channels, nonlinearity, eps=eps, groups=groups, affine=affine, activation=activation,
            device=device, dtype=dtype,
        )

    def transform(self, x: Tensor) -> Tensor:
        return functional.group_norm(x, self.groups, None, None, self.eps)

    def forward_affine(self, x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
        x = self.check_input(x, weight, bias)
        z = functional.group_norm(formulas.upcast(x), self.groups, weight, bias, self.eps)
        return self.activate(z).to(x.dtype)


class LayerNormAct2d(NormAct2d):
    r"""LayerNorm followed by an activation (LayerNorm-ReLU, Table 5):

    .. math::
        \mathrm{act}(z), \quad z = \frac{x - \mu_{w,h,c}(x)}{\sqrt{s^2_{w,h,c}(x) + \epsilon}} \gamma + \beta

    Statistics over all of a sample's channels and pixels; per-channel ``gamma``/``beta``
    (``GroupNorm`` with one group, on ``F.group_norm``).
    """

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        *,
        activation: str = "relu",
        eps: float = 1e-5,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            num_channels, nonlinearity, eps=eps, affine=affine, activation=activation, device=device, dtype=dtype
        )

    def transform(self, x: Tensor) -> Tensor:
        return functional.group_norm(x, 1, None, None, self.eps)

    def forward_affine(self, x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
        x = self.check_input(x, weight, bias)
        z = functional.group_norm(formulas.upcast(x), 1, weight, bias, self.eps)
        return self.activate(z).to(x.dtype)


class PixelNormAct2d(NormAct2d):
    r"""PixelNorm (Karras et al., 2018) followed by an activation (PixelNorm-ReLU, Table 5):

    .. math::
        \mathrm{act}(z), \quad z = \frac{x}{\sqrt{\mu_c(x^2) + \epsilon}} \gamma + \beta

    Each pixel's feature vector is normalized to unit root mean square across channels.
    As every layer of the suite it ends with a per-channel affine (Karras et al. have none;
    with ``gamma = 1, beta = 0``, the initial values, it is their layer).
    """

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        *,
        activation: str = "relu",
        eps: float = 1e-5,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            num_channels, nonlinearity, eps=eps, affine=affine, activation=activation, device=device, dtype=dtype
        )

    def transform(self, x: Tensor) -> Tensor:
        return x / torch.sqrt(stats.pixel_mean_square(x) + self.eps)


class FilterResponseNorm2d(NormAct2d):
    r"""Filter Response Normalization with its thresholded linear unit (FRN, Table 3):

    .. math::
        \max(z, v_0), \quad z = \frac{x}{\sqrt{\mu_{w,h}(x^2) + \epsilon}} \gamma + \beta

    ``v_0`` is a learnable per-channel threshold initialised to 0 (FRN's ``tau``).
    """

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        *,
        eps: float = 1e-5,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            num_channels, nonlinearity, eps=eps, affine=affine, activation="max_v0", device=device, dtype=dtype
        )

    def transform(self, x: Tensor) -> Tensor:
        return x / torch.sqrt(stats.instance_mean_square(x) + self.eps)


class BatchRMSNormReLU2d(BatchStatsNormAct2d):
    r"""The "RS + rej" layer of Table 2, found by random search with rejection:

    .. math::
        \frac{\max(x, 0)}{\sqrt{\mu_{b,w,h}(x^2) + \epsilon}} \gamma + \beta

    The batch second moment is ``s^2_{b,w,h} + \mu_{b,w,h}^2``, from moving averages of
    the mean and (unbiased) variance in eval. With ``nonlinearity=False`` the ReLU is
    dropped: ``x / sqrt(mu_{b,w,h}(x^2) + eps) * gamma + beta``.
    """

    track_mean = True

    def __init__(
        self,
        num_channels: int,
        nonlinearity: bool = True,
        *,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        sync: bool = False,
        process_group: object | None = None,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            num_channels, nonlinearity, eps=eps, momentum=momentum, sync=sync, process_group=process_group,
            affine=affine, device=device, dtype=dtype,
        )

    def transform(self, x: Tensor) -> Tensor:
        mean, var = self.batch_moments(x)
        numerator = torch.relu(x) if self.nonlinearity else x
        return numerator / torch.sqrt(var + mean.square() + self.eps)

    def folded_affine(self) -> tuple[Tensor, Tensor] | None:
        if self.training or self.nonlinearity:
            return None
        gamma, beta = self._gamma_beta()
        second_moment = self.running_var.to(gamma.dtype) + self.running_mean.to(gamma.dtype).square()
        return gamma / torch.sqrt(second_moment + self.eps), beta
