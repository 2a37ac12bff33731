"""EvoNorm normalization-activation layers, their registry, model conversion and layer search.

    >>> import evonorm_core
    >>> layer = evonorm_core.build_norm_act("evonorm_s0", 64)
    >>> evonorm_core.list_norm_acts()[:3]
    ['bn_prelu', 'bn_relu', 'bn_swish']
    >>> evonorm_core.uses_batch_statistics("evonorm_b0"), evonorm_core.uses_batch_statistics("evonorm_s0")
    (True, False)

``import evonorm_core`` needs only torch. The classifier room :mod:`evonorm_core.classifiers`
(the paper's classifiers and anchors, their trainer and in-memory datasets), which also needs
torchvision, is not imported here: import its modules by name.
"""
from . import running_stats
from .convert import ConversionReport, ConversionWarning, convert_norm_act, swap_timm_evonorms
from .layers import *  # noqa: F401,F403  (registers every layer)
from .layers import __all__ as _layer_names
from .registry import (
    NormActMaker,
    build_norm_act,
    list_norm_acts,
    norm_act_factory,
    norm_act_options,
    register_norm_act,
    resolve_name,
    uses_batch_statistics,
)
from .timm_support import timm_norm_act_layer

__version__ = "0.1.0"
__all__ = [
    *_layer_names, "ConversionReport", "ConversionWarning", "NormActMaker", "build_norm_act", "convert_norm_act",
    "list_norm_acts", "norm_act_factory", "norm_act_options", "register_norm_act", "resolve_name", "running_stats",
    "swap_timm_evonorms", "timm_norm_act_layer", "uses_batch_statistics",
]
