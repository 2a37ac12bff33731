"""timm interoperability: its norm-act modules, its EvoNorms, and a ``norm_layer`` factory for timm models.

timm is an optional dependency and nothing here imports it: a model holding timm's modules was
built (or unpickled) with timm imported, so its classes are looked up in ``sys.modules``. Without
timm loaded, no module is a timm module and :func:`timm_norm_act_layer` still works (it only
returns a function).

* :func:`norm_act_kind` sorts timm's norm-act modules: ``BatchNormAct2d`` and ``SyncBatchNormAct``
  (BatchNorm + its own ``drop`` and ``act``), ``GroupNormAct`` and ``GroupNorm1Act`` (GroupNorm +
  ``drop`` and ``act``), the frozen ``FrozenBatchNormAct2d``, and timm's EvoNorms;
  :func:`evonorm_core.convert_norm_act` reads each one's own ``act``.
* :func:`evonorm_equivalent` maps timm's ``EvoNorm2dB0/B1/B2/S0/S1/S2`` and the ``a`` variants to
  the suite's fused layer with timm's configuration (``eps``, ``groups`` from ``groups`` or
  ``group_size``, ``momentum``) and state (``weight``, ``bias``, ``v`` as ``v1``, ``running_var``),
  or says why there is none (:data:`EVONORM_MAPPING` states the mapping).
* :func:`timm_norm_act_layer` is what timm's ``norm_layer=`` takes in architectures that build
  norm-act layers (``timm.create_model("resnetv2_50", norm_layer=timm_norm_act_layer("evonorm_b0"))``).
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import torch
from torch import nn

from .registry import NormActMaker, build_norm_act, norm_act_factory, options_of, resolve_name

# timm class name -> the suite's layer that computes the same function, and when (timm 1.0.31,
# timm/layers/evo_norm.py; every square root of both has "+ eps" inside it):
EVONORM_MAPPING = {
    "EvoNorm2dB0": ("evonorm_b0", "x / max(sqrt(s2_bwh + eps), v x + sqrt(s2_wh + eps)) w + b; without v "
                                  "(apply_act=False) x w + b"),
    "EvoNorm2dB1": ("evonorm_b1", "x / max(sqrt(s2_bwh + eps), (x + 1) sqrt(mu_wh(x2) + eps)) w + b; "
                                  "apply_act=False: x w + b"),
    "EvoNorm2dB2": ("evonorm_b2", "x / max(sqrt(s2_bwh + eps), sqrt(mu_wh(x2) + eps) - x) w + b; "
                                  "apply_act=False: x w + b"),
    "EvoNorm2dS0": ("evonorm_s0", "x sigmoid(v x) / sqrt(s2_whc/g + eps) w + b; without v x w + b"),
    "EvoNorm2dS0a": ("evonorm_s0", "as EvoNorm2dS0 (default eps 1e-3) with v; without v it still divides by "
                                   "the group std: no equivalent"),
    "EvoNorm2dS1": ("evonorm_s1", "act(x) / sqrt(s2_whc/g + eps) w + b with act SiLU; apply_act=False: x w + b"),
    "EvoNorm2dS1a": ("evonorm_s1", "as EvoNorm2dS1 (default eps 1e-3) with apply_act; without it still divides "
                                   "by the group std: no equivalent"),
    "EvoNorm2dS2": ("evonorm_s2", "act(x) / sqrt(mu_whc/g(x2) + eps) w + b with act SiLU; apply_act=False: x w + b"),
    "EvoNorm2dS2a": ("evonorm_s2", "as EvoNorm2dS2 (default eps 1e-3) with apply_act; without it still divides "
                                   "by the group RMS: no equivalent"),
}

_NORM_ACT = "timm.layers.norm_act"
_BATCH_NORM_ACTS = ("BatchNormAct2d", "SyncBatchNormAct")
_GROUP_NORM_ACTS = ("GroupNormAct", "GroupNorm1Act")
_FROZEN = ("FrozenBatchNormAct2d",)
# timm's activation modules (timm/layers/activations*.py) -> the activation they compute;
# the gates (None) squash rather than rectify and are not what a norm-act layer replaces
TIMM_ACTIVATIONS = {
    "Swish": "silu", "SwishMe": "silu", "Mish": "mish", "MishMe": "mish", "HardSwish": "hardswish",
    "HardSwishMe": "hardswish", "HardMish": "hard_mish", "HardMishMe": "hard_mish", "GELU": "gelu",
    "GELUTanh": "gelu_tanh", "QuickGELU": "quick_gelu", "PReLU": "prelu",
    "Sigmoid": None, "Tanh": None, "HardSigmoid": None, "HardSigmoidMe": None,
}
_TIMM_ACTIVATION_MODULES = ("timm.layers.activations", "timm.layers.activations_me")
# modules that pass their input through, possibly dropping (zeroing) some of it and rescaling the
# rest, in every mode: drop-path (per sample), drop-block (blocks of a map), stochastic depth
PASS_THROUGH_CLASSES = {("timm.layers.drop", "DropPath"), ("timm.layers.drop", "DropBlock2d"),
                        ("torchvision.ops.stochastic_depth", "StochasticDepth")}


def loaded_classes(module_name: str, names: tuple[str, ...]) -> tuple[type, ...]:
    """The classes ``names`` of ``module_name`` if that module is loaded (never imports it)."""
    module = sys.modules.get(module_name)
    return tuple(getattr(module, n) for n in names if hasattr(module, n)) if module is not None else ()


def _defined_in(module: nn.Module, module_names: tuple[str, ...] | str) -> str | None:
    """``type(module).__name__`` if its class is defined in one of ``module_names``, else None."""
    names = (module_names,) if isinstance(module_names, str) else module_names
    return type(module).__name__ if type(module).__module__ in names else None


def norm_act_kind(module: nn.Module) -> str | None:
    """``"batchnorm_act"``, ``"groupnorm_act"``, ``"frozen"``, ``"evonorm"`` for timm's norm-act
    modules of those kinds, None for anything else (also when timm is not loaded)."""
    if isinstance(module, loaded_classes(_NORM_ACT, _BATCH_NORM_ACTS)):
        return "batchnorm_act"
    if isinstance(module, loaded_classes(_NORM_ACT, _GROUP_NORM_ACTS)):
        return "groupnorm_act"
    if isinstance(module, loaded_classes(_NORM_ACT, _FROZEN)):
        return "frozen"
    if _defined_in(module, "timm.layers.evo_norm") in EVONORM_MAPPING:
        return "evonorm"
    return None


def timm_activation(module: nn.Module) -> tuple[bool, str | None]:
    """``(True, name)`` for one of timm's activation modules (name None for a gate), else ``(False, None)``."""
    name = _defined_in(module, _TIMM_ACTIVATION_MODULES)
    if name in TIMM_ACTIVATIONS:
        return True, TIMM_ACTIVATIONS[name]
    return False, None


def is_pass_through(module: nn.Module) -> bool:
    """Whether ``module`` is timm's DropPath/DropBlock2d or torchvision's StochasticDepth."""
    return (type(module).__module__, type(module).__name__) in PASS_THROUGH_CLASSES


def leaf_modules() -> tuple[type, ...]:
    """timm's own "do not trace" modules (``timm.layers.register_notrace_module``) and its norm-act
    classes: torch.fx keeps each as one call, as timm's feature extraction does."""
    fx_module = sys.modules.get("timm.layers._fx")
    registered = tuple(fx_module.get_notrace_modules()) if fx_module is not None else ()
    return registered + loaded_classes(_NORM_ACT, _BATCH_NORM_ACTS + _GROUP_NORM_ACTS + _FROZEN)


def autowrap_functions() -> tuple[Callable, ...]:
    """timm's "do not trace" functions (``register_notrace_function``), recorded as single calls."""
    fx_module = sys.modules.get("timm.layers._fx")
    return tuple(f for f in fx_module.get_notrace_functions() if callable(f)) if fx_module is not None else ()


def _is_silu(act: nn.Module) -> bool:
    return isinstance(act, nn.SiLU) or timm_activation(act) == (True, "silu")


def evonorm_equivalent(module: nn.Module) -> tuple[str | None, dict[str, Any], bool, str]:
    """``(name, options, nonlinearity, why)`` of the suite's layer computing what timm's EvoNorm
    ``module`` computes: build it with ``build_norm_act(name, C, nonlinearity, **options)`` and
    load :func:`evonorm_state`. ``name`` None when there is none; ``why`` says which it is or why not."""
    cls = type(module).__name__
    name = EVONORM_MAPPING[cls][0]
    if name.startswith("evonorm_b"):
        options = {"eps": float(module.eps), "momentum": module.momentum}
        nonlinearity = module.v is not None if cls == "EvoNorm2dB0" else bool(module.apply_act)
        config = f"eps={module.eps}, momentum={module.momentum}"
    else:
        options = {"eps": float(module.eps), "groups": int(module.groups)}
        config = f"groups={module.groups} ({module.weight.numel() // module.groups} channels each), eps={module.eps}"
        if cls in ("EvoNorm2dS0", "EvoNorm2dS0a"):
            nonlinearity = module.v is not None
            if cls == "EvoNorm2dS0a" and not nonlinearity:
                return None, {}, False, (
                    f"timm's {cls} without v (apply_act=False) computes x / sqrt(s2_whc/g(x) + eps) * weight + bias, "
                    "a division by the group std; the suite's EvoNorm-S0 with nonlinearity=False is the affine "
                    "x * weight + bias: no equivalent, left as it is")
        else:
            nonlinearity = bool(module.apply_act)
            always = cls.endswith("a")  # the a variants apply act (Identity without apply_act) and divide always
            stat = "group RMS" if cls.startswith("EvoNorm2dS2") else "group std"
            if always and not nonlinearity:
                return None, {}, False, (
                    f"timm's {cls} with apply_act=False still divides by the {stat} (act(x) / {stat} * weight + bias "
                    f"with act Identity); the suite's {name} with nonlinearity=False is the affine x * weight + bias: "
                    "no equivalent, left as it is")
            if nonlinearity and not _is_silu(module.act):
                return None, {}, False, (
                    f"timm's {cls} applies act={type(module.act).__name__}; the suite's {name} is x * sigmoid(x) / "
                    f"{stat} (act SiLU): no equivalent, left as it is")
    why = (f"timm's {cls}({config}{'' if nonlinearity else ', apply_act=False'}) swapped for {name} with the "
           f"same configuration{'' if nonlinearity else ' and nonlinearity=False (both the affine x * weight + bias)'}")
    return name, options, nonlinearity, why


def evonorm_state(module: nn.Module, nonlinearity: bool) -> dict[str, torch.Tensor]:
    """timm's EvoNorm parameters and statistics under the suite's names: ``weight``, ``bias``, ``v``
    as ``v1`` (B0, S0), ``running_var`` (B series with nonlinearity; timm counts no batches, so
    ``num_batches_tracked`` stays 0, which only a ``momentum=None`` layer would read)."""
    state = {"weight": module.weight, "bias": module.bias}
    if nonlinearity and getattr(module, "v", None) is not None:
        state["v1"] = module.v
    if nonlinearity and type(module).__name__.startswith("EvoNorm2dB"):
        state["running_var"] = module.running_var
    return {k: v.detach() for k, v in state.items()}


def build_evonorm_equivalent(module: nn.Module, **options) -> tuple[nn.Module | None, str]:
    """The suite's layer for timm's EvoNorm ``module`` with its configuration and state (on its device,
    in its dtype), or ``(None, why not)``. ``options`` (``impl``, ``sync``, ...) go to the layer; timm's
    ``eps``, ``groups`` and ``momentum`` win over theirs (the layer must compute what timm's computed)."""
    name, config, nonlinearity, why = evonorm_equivalent(module)
    if name is None:
        return None, why
    tensor = module.weight
    accepted = options_of(name)
    extra = {k: v for k, v in options.items() if k in accepted and k not in config}
    layer = build_norm_act(name, tensor.numel(), nonlinearity,
                           **{"device": tensor.device, "dtype": tensor.dtype, **extra, **config})
    missing, unexpected = layer.load_state_dict(evonorm_state(module, nonlinearity), strict=False)
    missing = [k for k in missing if k != "num_batches_tracked"]
    if missing or unexpected:  # the mapping and the layers disagree: a bug here, not the user's
        raise RuntimeError(f"{type(module).__name__} -> {name}: missing {missing}, unexpected {unexpected}")
    layer.train(module.training)
    return layer, why


_TIMM_CALL_OPTIONS = ("act_layer", "act_kwargs", "inplace", "drop_layer", "eps", "momentum", "device", "dtype")


def timm_norm_act_layer(norm_act: str | NormActMaker, **options) -> Callable[..., nn.Module]:
    """A ``norm_layer`` for ``timm.create_model`` that builds the suite's ``norm_act`` layers.

    For timm architectures that build norm-act layers from a ``norm_layer`` argument (``get_norm_act_layer``:
    ResNetV2, EfficientNet, ByobNet/RegNetZ, RegNet, VoVNet, CSPNet, ...; timm's MobileNetV3 sets its own)::

        model = timm.create_model("resnetv2_50", norm_layer=timm_norm_act_layer("evonorm_b0"))

    Each call ``(num_features, apply_act=True, **timm_kwargs)`` builds the layer with
    ``nonlinearity=apply_act``; its own nonlinearity replaces timm's ``act_layer`` (which is
    accepted and not used). timm's ``eps`` and ``momentum`` reach the layer where it takes them
    unless ``options`` set them; ``device``/``dtype`` too; a ``drop_layer`` (drop-block) follows the
    layer, as it follows timm's norm (``nn.Sequential(layer, drop)``). Any other keyword raises
    ``TypeError`` naming it. Not for architectures that call a plain norm and add their own
    activation after it (timm's ``resnet*``, whose ``bn3`` feeds the residual add): there the layer
    would be built with its nonlinearity everywhere; convert those with :func:`convert_norm_act`.
    """
    make = norm_act_factory(norm_act, **options)
    name = resolve_name(norm_act) if isinstance(norm_act, str) else None
    accepted = set(options_of(name)) if name else set()

    def norm_act_layer(num_features: int, apply_act: bool = True, **timm_kwargs) -> nn.Module:
        unknown = sorted(set(timm_kwargs) - set(_TIMM_CALL_OPTIONS))
        if unknown:
            raise TypeError(f"{norm_act_layer.__name__}: timm passed {unknown}, which the suite's layers do not "
                            f"take; accepted: apply_act, {', '.join(_TIMM_CALL_OPTIONS)}")
        factory = {k: timm_kwargs[k] for k in ("device", "dtype") if timm_kwargs.get(k) is not None}
        if name is not None:
            given = {k: timm_kwargs[k] for k in ("eps", "momentum", "device", "dtype")
                     if timm_kwargs.get(k) is not None and k in accepted}
            layer = build_norm_act(name, num_features, bool(apply_act), **{**given, **options})
        else:
            layer = make(num_features, bool(apply_act)).to(**factory)
        drop = timm_kwargs.get("drop_layer")
        return nn.Sequential(layer, drop()) if drop is not None else layer

    norm_act_layer.__name__ = norm_act_layer.__qualname__ = f"timm_{getattr(make, '__name__', 'norm_act')}"
    norm_act_layer.norm_act = name or make
    return norm_act_layer
