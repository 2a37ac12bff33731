"""Convert an existing model's BatchNorm(+activation) pairs into norm-act layers.

The data flow is read from a ``torch.fx`` trace, not from module order: a BatchNorm whose
only consumer is a ReLU, ReLU6 or SiLU (module, function or method) becomes the norm-act
layer with that activation folded in, and the activation is removed from the graph; any
other BatchNorm becomes the layer with ``nonlinearity=False`` (paper footnote 3: an EvoNorm
then is a channel-wise affine). The result is a ``torch.fx.GraphModule`` whose submodules
keep their qualified names, so a converted model trains and saves like the original.
"""
from __future__ import annotations

import dataclasses
import logging
from collections import Counter

import torch
import torch.nn.functional as F
from torch import fx, nn

from .layers.base import NormAct2d
from .layers.conditional import ConditionalNormAct2d
from .registry import NormActMaker, build_norm_act, norm_act_factory, options_of

logger = logging.getLogger(__name__)

_ACTIVATION_MODULES = (nn.ReLU, nn.ReLU6, nn.SiLU)
_ACTIVATION_FUNCTIONS = {F.relu: "relu", torch.relu: "relu", F.relu6: "relu6", F.silu: "silu"}
_ACTIVATION_METHODS = {"relu": "relu", "relu_": "relu"}


@dataclasses.dataclass(frozen=True)
class ConvertedNorm:
    """One converted BatchNorm: its qualified name, the activation folded in (or None)."""

    name: str
    folded_activation: str | None

    @property
    def nonlinearity(self) -> bool:
        return self.folded_activation is not None


@dataclasses.dataclass
class ConversionReport:
    """What :func:`convert_norm_act` did, one entry per converted BatchNorm."""

    layer: str
    entries: list[ConvertedNorm]

    @property
    def folded(self) -> list[ConvertedNorm]:
        return [e for e in self.entries if e.nonlinearity]

    @property
    def unfolded(self) -> list[ConvertedNorm]:
        return [e for e in self.entries if not e.nonlinearity]

    def __str__(self) -> str:
        acts = Counter(e.folded_activation for e in self.folded)
        folded = ", ".join(f"{name} x{n}" for name, n in sorted(acts.items())) or "none"
        return (
            f"converted {len(self.entries)} BatchNorm layers to {self.layer}: "
            f"{len(self.folded)} with their activation folded in ({folded}), "
            f"{len(self.unfolded)} with nonlinearity=False"
        )


class _Tracer(fx.Tracer):
    """Keeps the suite's own norm-act layers opaque, like torch.nn's modules."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, (NormAct2d, ConditionalNormAct2d)) or super().is_leaf_module(m, qualname)


def _activation_name(node: fx.Node, modules: dict[str, nn.Module]) -> str | None:
    """The activation ``node`` computes, if it is a ReLU, ReLU6 or SiLU of a single tensor."""
    if node.op == "call_module" and isinstance(modules[node.target], _ACTIVATION_MODULES):
        return type(modules[node.target]).__name__.lower()
    if node.op == "call_function" and node.target in _ACTIVATION_FUNCTIONS:
        return _ACTIVATION_FUNCTIONS[node.target]
    if node.op == "call_method" and node.target in _ACTIVATION_METHODS:
        return _ACTIVATION_METHODS[node.target]
    return None


def _replace_submodule(root: nn.Module, qualname: str, new: nn.Module) -> None:
    parent, _, child = qualname.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, child, new)


def _unconvertible(bn: nn.Module) -> str | None:
    """Why ``bn`` (a ``_BatchNorm``) cannot become a 2-d norm-act layer, or None if it can."""
    if isinstance(bn, nn.SyncBatchNorm):
        return ("is a SyncBatchNorm; convert the model before nn.SyncBatchNorm.convert_sync_batchnorm and pass "
                "sync=True to a layer with batch statistics")
    if isinstance(bn, nn.modules.lazy.LazyModuleMixin):
        return "is a lazy BatchNorm whose number of channels is not known yet; run the model once first"
    if not isinstance(bn, nn.BatchNorm2d):
        return f"is a {type(bn).__name__}; the norm-act layers are 2-d (NCHW), only nn.BatchNorm2d is converted"
    return None


def _state_of(module: nn.Module) -> dict:
    """``{"device": ..., "dtype": ...}`` of ``module``'s first floating-point tensor (empty if none)."""
    for tensor in [*module.parameters(), *module.buffers()]:
        if tensor.is_floating_point():
            return {"device": tensor.device, "dtype": tensor.dtype}
    return {}


def convert_norm_act(model: nn.Module, norm_act: str | NormActMaker, **options) -> fx.GraphModule:
    """Replace every ``BatchNorm2d`` of ``model`` (not modified) by the ``norm_act`` layer.

    ``norm_act`` is a registered name (with ``options``, e.g. ``groups=16``; each layer is
    built on its BatchNorm's device and in its dtype unless ``options`` name a ``device`` or
    ``dtype``) or a callable
    ``(num_channels, nonlinearity) -> nn.Module`` (its layers are moved there). Returns a
    ``GraphModule`` in the same train/eval mode, with the report as ``.norm_act_report``
    (a :class:`ConversionReport`). Raises ``ValueError`` if the model cannot be traced,
    calls one BatchNorm twice, or has a BatchNorm that is not a ``BatchNorm2d`` (1-d, 3-d,
    synchronised or lazy ones), naming it.
    """
    make = norm_act_factory(norm_act, **options)
    bad = [f"{name!r} {why}" for name, m in model.named_modules()
           if isinstance(m, nn.modules.batchnorm._BatchNorm) and (why := _unconvertible(m))]
    if bad:
        raise ValueError(f"convert_norm_act cannot convert {len(bad)} BatchNorm layer(s): " + "; ".join(bad))
    try:
        graph = _Tracer().trace(model)
    except Exception as exc:  # fx raises many types; all mean "not symbolically traceable"
        raise ValueError(
            f"convert_norm_act could not trace {type(model).__name__} with torch.fx: {exc}. "
            "Models with data-dependent control flow must be converted by building them with a norm_act argument."
        ) from exc
    gm = fx.GraphModule(model, graph, class_name=type(model).__name__)
    modules = dict(gm.named_modules())
    calls = Counter(n.target for n in graph.nodes if n.op == "call_module")
    entries = []
    for node in list(graph.nodes):
        if node.op != "call_module" or not isinstance(modules[node.target], nn.modules.batchnorm._BatchNorm):
            continue
        bn = modules[node.target]
        if calls[node.target] > 1:
            raise ValueError(f"BatchNorm {node.target!r} is called {calls[node.target]} times; cannot convert it")
        users = list(node.users)
        activation = _activation_name(users[0], modules) if len(users) == 1 else None
        if activation is not None:
            users[0].replace_all_uses_with(node)
            graph.erase_node(users[0])
        state = _state_of(bn)
        if isinstance(norm_act, str) and {"device", "dtype"} <= set(options_of(norm_act)):
            layer = build_norm_act(norm_act, bn.num_features, activation is not None, **{**state, **options})
        else:  # a callable, or a third-party layer without device/dtype arguments
            layer = make(bn.num_features, activation is not None).to(**state)
        _replace_submodule(gm, node.target, layer)
        entries.append(ConvertedNorm(node.target, activation))
    graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    gm.train(model.training)
    layer_name = norm_act if isinstance(norm_act, str) else getattr(norm_act, "__name__", repr(norm_act))
    gm.norm_act_report = ConversionReport(layer_name, entries)
    logger.info("%s", gm.norm_act_report)
    return gm
