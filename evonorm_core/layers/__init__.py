"""The layer library: EvoNorms, the baselines of the paper and the no-normalization controls, registered by name."""
from ..registry import register_norm_act
from .base import ACTIVATIONS, BatchStatsNormAct2d, ChannelActivation, GroupedNormAct2d, NormAct2d
from .baselines import (
    BatchNormAct2d,
    BatchRMSNormReLU2d,
    FilterResponseNorm2d,
    GroupNormAct2d,
    LayerNormAct2d,
    PixelNormAct2d,
)
from .conditional import ConditionalNormAct2d, conditional_norm_act_factory
from .controls import AffineReLU2d, RandomSample2d, SearchSpaceSample2d, TanhMaxTanh2d
from .evonorm import EvoNormB0, EvoNormB1, EvoNormB2, EvoNormS0, EvoNormS1, EvoNormS2

for _name, _cls in [
    ("evonorm_b0", EvoNormB0),
    ("evonorm_b1", EvoNormB1),
    ("evonorm_b2", EvoNormB2),
    ("evonorm_s0", EvoNormS0),
    ("evonorm_s1", EvoNormS1),
    ("evonorm_s2", EvoNormS2),
]:
    register_norm_act(_name)(_cls)

# (name, aliases, class, activation) for the baselines of Tables 2, 3 and 5.
_BASELINES = [
    ("bn_relu", ("batchnorm_relu", "bn"), BatchNormAct2d, "relu"),
    ("bn_prelu", ("batchnorm_prelu",), BatchNormAct2d, "max_v0"),
    ("bn_swish1", ("batchnorm_swish1",), BatchNormAct2d, "swish1"),
    ("bn_swish", ("batchnorm_swish",), BatchNormAct2d, "swish"),
    ("gn_relu", ("groupnorm_relu", "gn"), GroupNormAct2d, "relu"),
    ("gn_swish", ("groupnorm_swish",), GroupNormAct2d, "swish"),
    ("ln_relu", ("layernorm_relu",), LayerNormAct2d, "relu"),
    ("pixelnorm_relu", ("pn_relu",), PixelNormAct2d, "relu"),
]
for _name, _aliases, _cls, _activation in _BASELINES:
    register_norm_act(_name, *_aliases, activation=_activation)(_cls)
register_norm_act("frn", "frn_tlu", "filter_response_norm")(FilterResponseNorm2d)
register_norm_act("rs_rej", "rs_plus_rej", "batch_rms_relu")(BatchRMSNormReLU2d)
# the negative controls of Tables 2 and 3: no normalization
register_norm_act("no_norm_relu", "affine_relu")(AffineReLU2d)
register_norm_act("random_rej", "random_plus_rej", "tanh_max_tanh")(TanhMaxTanh2d)
register_norm_act("random_sample", "random")(RandomSample2d)

__all__ = [
    "ACTIVATIONS",
    "AffineReLU2d",
    "BatchNormAct2d",
    "BatchRMSNormReLU2d",
    "BatchStatsNormAct2d",
    "ChannelActivation",
    "ConditionalNormAct2d",
    "EvoNormB0",
    "EvoNormB1",
    "EvoNormB2",
    "EvoNormS0",
    "EvoNormS1",
    "EvoNormS2",
    "FilterResponseNorm2d",
    "GroupNormAct2d",
    "GroupedNormAct2d",
    "LayerNormAct2d",
    "NormAct2d",
    "PixelNormAct2d",
    "RandomSample2d",
    "SearchSpaceSample2d",
    "TanhMaxTanh2d",
    "conditional_norm_act_factory",
]
