"""Convert an existing model's normalization(+activation) layers into the suite's norm-act layers.

What is converted (:func:`convert_norm_act`):

* every ``nn.BatchNorm2d`` and ``nn.SyncBatchNorm`` (the latter to a layer with ``sync=True`` where
  the layer uses batch statistics), and timm's norm-act modules ``BatchNormAct2d``,
  ``SyncBatchNormAct``, ``GroupNormAct`` and ``GroupNorm1Act``: each becomes the requested layer;
* timm's EvoNorms (``EvoNorm2dB0/B1/B2/S0/S1/S2`` and the ``a`` variants) become the suite's fused
  layer that computes the same function, carrying their parameters, statistics, ``eps``, groups and
  momentum (:mod:`evonorm_core.timm_support`); one with no equivalent is left as it is, with a warning.
  :func:`swap_timm_evonorms` does only this, keeping the model's class.

Where each layer's activation comes from:

* timm's norm-act modules carry their own ``act``: it is read from the module and folded in (its
  ``drop``, if any, then follows the layer);
* for a plain BatchNorm (and a timm norm-act whose ``act`` is ``Identity``) the data flow is read
  from a ``torch.fx`` trace, not from module order: a BatchNorm whose only consumer is an activation
  (ReLU, ReLU6, SiLU, Hardswish, GELU, Mish, LeakyReLU, ELU, CELU, SELU, PReLU; module, function
  or method) becomes the layer with that activation folded in and removed from the graph. Modules
  that pass their input through in every mode (``Identity``, dropout, timm's drop-path and
  drop-block, torchvision's stochastic depth) do not hide the activation: it is folded and they
  stay, now after the layer. Any other BatchNorm gets ``nonlinearity=False`` (paper footnote 3:
  an EvoNorm then is a channel-wise affine); when its output still reaches an activation (a gate
  such as a sigmoid, an activation that shares the output with another consumer, or an activation
  behind an operation the converter does not know to be harmless) a :class:`ConversionWarning`
  names the modules.

The result is a ``torch.fx.GraphModule`` whose submodules keep their qualified names, so a converted
model trains and saves like the original; its ``norm_act_report`` says, per layer, why it has or
lacks its activation (:meth:`ConversionReport.details`).
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import operator
import re
import warnings
from collections import Counter
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import fx, nn

from . import timm_support
from .layers.base import NormAct2d
from .layers.conditional import ConditionalNormAct2d
from .registry import NormActMaker, build_norm_act, norm_act_factory, options_of, resolve_name, uses_batch_statistics

logger = logging.getLogger(__name__)


class ConversionWarning(UserWarning):
    """A layer converted with ``nonlinearity=False`` although its output reaches an activation, or a
    norm layer left as it was; the message names the modules."""


# activation -> the name it is folded as; None: an activation that squashes (a gate), which a
# norm-act layer does not replace. Looked up along the class's MRO (ReLU6 is a Hardtanh).
_ACTIVATION_MODULES = {
    nn.ReLU: "relu", nn.ReLU6: "relu6", nn.SiLU: "silu", nn.Hardswish: "hardswish", nn.GELU: "gelu",
    nn.Mish: "mish", nn.LeakyReLU: "leaky_relu", nn.ELU: "elu", nn.CELU: "celu", nn.SELU: "selu",
    nn.PReLU: "prelu",
    nn.Sigmoid: None, nn.Tanh: None, nn.Hardsigmoid: None, nn.Hardtanh: None, nn.Softplus: None,
    nn.Softsign: None, nn.LogSigmoid: None,
}
_ACTIVATION_FUNCTIONS = {
    F.relu: "relu", torch.relu: "relu", F.relu_: "relu", torch.relu_: "relu", F.relu6: "relu6", F.silu: "silu",
    F.hardswish: "hardswish", F.gelu: "gelu", F.mish: "mish", F.leaky_relu: "leaky_relu", F.elu: "elu",
    F.celu: "celu", F.selu: "selu",
    torch.sigmoid: None, F.sigmoid: None, torch.tanh: None, F.tanh: None, F.hardsigmoid: None,
    F.hardtanh: None, F.softplus: None,
}
_ACTIVATION_METHODS = {"relu": "relu", "relu_": "relu", "sigmoid": None, "sigmoid_": None, "tanh": None,
                       "tanh_": None}
# modules and functions that pass their input through in every mode (dropping and rescaling some of
# it in training at most): an activation after them is still the norm's
_PASS_THROUGH_MODULES = (nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)
_PASS_THROUGH_FUNCTIONS = {F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, torch.dropout}
# operations whose result is a new quantity: an activation after one belongs to it, not to the norm; the
# arithmetic ones only when they combine the norm's output with another tensor (a residual add, a gate),
# not with a constant (x * 2 - 1 before a ReLU is a transform of the norm's output)
_SEPARATING_FUNCTIONS = {
    torch.cat, torch.stack, F.conv1d, F.conv2d, F.conv3d, F.conv_transpose2d, F.linear, F.avg_pool2d, F.max_pool2d,
    F.adaptive_avg_pool2d, F.adaptive_max_pool2d, F.interpolate,
}
_COMBINING_FUNCTIONS = {
    operator.add, operator.iadd, operator.sub, operator.isub, operator.mul, operator.imul, operator.truediv,
    operator.itruediv, operator.matmul, torch.add, torch.sub, torch.mul, torch.div, torch.matmul,
}
# augmented assignment (in place) -> the operator that returns a new tensor
_OUT_OF_PLACE = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv, operator.imod: operator.mod,
    operator.ipow: operator.pow, operator.imatmul: operator.matmul, operator.iand: operator.and_,
    operator.ior: operator.or_, operator.ixor: operator.xor, operator.ilshift: operator.lshift,
    operator.irshift: operator.rshift,
}
_SEPARATING_METHODS = {"mean", "sum", "amax", "max"}
_COMBINING_METHODS = {"add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "matmul"}
_BATCH_NORM_FAMILY = "BatchNorm"
# class names of normalization layers, for messages: LayerNorm, LayerNorm2d, RmsNorm, GroupNorm1Act, LayerNormAct2dFp32
_NORM_CLASS_NAME = re.compile(r"Norm(\d*d?|\d*Act\d*d?)(Fp32)?$")


@dataclasses.dataclass(frozen=True)
class ConvertedNorm:
    """One converted layer: its qualified name, the activation folded in (or None), the class it
    replaced, why it has or lacks its nonlinearity, whether a timm EvoNorm was swapped for its
    equivalent with its parameters (``carried``), and whether a warning was given for it."""

    name: str
    folded_activation: str | None
    source: str = "BatchNorm2d"
    reason: str = ""
    carried: bool = False
    nonlinearity: bool | None = None  # default: whether an activation was folded in
    family: str = _BATCH_NORM_FAMILY
    warned: bool = False

    def __post_init__(self) -> None:
        if self.nonlinearity is None:
            object.__setattr__(self, "nonlinearity", self.folded_activation is not None)


@dataclasses.dataclass(frozen=True)
class KeptNorm:
    """A norm layer left as it was: its qualified name, class and why."""

    name: str
    source: str
    reason: str


@dataclasses.dataclass
class ConversionReport:
    """What :func:`convert_norm_act` (or :func:`swap_timm_evonorms`) did, one entry per converted layer."""

    layer: str
    entries: list[ConvertedNorm]
    kept: list[KeptNorm] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def folded(self) -> list[ConvertedNorm]:
        return [e for e in self.entries if e.folded_activation is not None]

    @property
    def unfolded(self) -> list[ConvertedNorm]:
        return [e for e in self.entries if not e.nonlinearity]

    @property
    def carried(self) -> list[ConvertedNorm]:
        return [e for e in self.entries if e.carried]

    def __str__(self) -> str:
        fresh = [e for e in self.entries if not e.carried]
        families = {e.family for e in self.entries}
        noun = families.pop() if len(families) == 1 else "norm"
        parts = []
        if fresh or not self.carried:
            acts = Counter(e.folded_activation for e in fresh if e.folded_activation is not None)
            folded = ", ".join(f"{name} x{n}" for name, n in sorted(acts.items())) or "none"
            parts.append(f"{sum(acts.values())} with their activation folded in ({folded}), "
                         f"{sum(not e.nonlinearity for e in fresh)} with nonlinearity=False")
        if self.carried:
            sources = ", ".join(f"{name} x{n}" for name, n in sorted(Counter(e.source for e in self.carried).items()))
            parts.append(f"{len(self.carried)} timm EvoNorm layers swapped with their parameters and statistics "
                         f"({sources}), {sum(not e.nonlinearity for e in self.carried)} of them with nonlinearity=False")
        if self.kept:
            sources = ", ".join(f"{name} x{n}" for name, n in sorted(Counter(k.source for k in self.kept).items()))
            parts.append(f"{len(self.kept)} left as they were ({sources})")
        if self.warnings:
            parts.append(f"{len(self.warnings)} warning(s), see .warnings")
        return f"converted {len(self.entries)} {noun} layers to {self.layer}: " + "; ".join(parts)

    def details(self) -> str:
        """One line per converted and per kept layer: name, class replaced, nonlinearity and why."""
        lines = [str(self)]
        for e in self.entries:
            flag = f"activation {e.folded_activation} folded in" if e.folded_activation else (
                f"nonlinearity={e.nonlinearity}")
            lines.append(f"  {e.name} ({e.source}): {flag}{' [WARNING]' if e.warned else ''}: {e.reason}")
        lines += [f"  {k.name} ({k.source}): left as it was [WARNING]: {k.reason}" for k in self.kept]
        return "\n".join(lines)


def _activation(module: nn.Module) -> tuple[bool, str | None]:
    """``(True, name)`` if ``module`` is an activation (name None for a gate), else ``(False, None)``."""
    for cls in type(module).__mro__:
        if cls in _ACTIVATION_MODULES:
            return True, _ACTIVATION_MODULES[cls]
    return timm_support.timm_activation(module)


def _is_pass_through(module: nn.Module) -> bool:
    return type(module) in _PASS_THROUGH_MODULES or timm_support.is_pass_through(module)


class _InPlaceProxy(fx.Proxy):
    """A proxy that records an augmented assignment (``out += identity``) as the in-place operator.

    ``fx.Proxy`` has no ``__iadd__``, so Python falls back to ``out = out + identity`` and the converted model
    would allocate a new tensor where the original adds into an existing one (each ResNet block's residual:
    one more write of the block's output and one more live tensor per block). fx's code generation prints
    ``operator.iadd`` and its kin back as ``out += identity``.
    """


def _record_in_place(op: Callable[[Any, Any], Any]) -> Callable[[fx.Proxy, Any], fx.Proxy]:
    def method(self: fx.Proxy, other: Any) -> fx.Proxy:
        return self.tracer.create_proxy("call_function", op, (self, other), {})

    method.__name__ = f"__{op.__name__}__"
    return method


for _op in _OUT_OF_PLACE:
    setattr(_InPlaceProxy, f"__{_op.__name__}__", _record_in_place(_op))


class _Tracer(fx.Tracer):
    """Keeps opaque, besides torch.nn's modules: the suite's norm-act layers, timm's norm-act and EvoNorm
    modules and the modules timm registers as not traceable, activations and the pass-through modules
    (whose ``if self.training`` must not be fixed at trace time); timm's not-traceable functions are
    recorded as single calls. Augmented assignments are recorded in place (:class:`_InPlaceProxy`)."""

    def __init__(self) -> None:
        super().__init__(autowrap_functions=timm_support.autowrap_functions())
        self._timm_leaves = timm_support.leaf_modules()

    def proxy(self, node: fx.Node) -> fx.Proxy:
        return _InPlaceProxy(node, self)

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return (isinstance(m, (NormAct2d, ConditionalNormAct2d) + self._timm_leaves)
                or timm_support.norm_act_kind(m) is not None or _activation(m)[0] or _is_pass_through(m)
                or super().is_leaf_module(m, qualname))


def _layer_written(node: fx.Node, converted: set[str], modules: dict[str, nn.Module]) -> fx.Node | None:
    """The converted layer's node whose output the augmented assignment ``node`` writes into (directly or through
    pass-through modules, which return their input itself in eval mode), or None."""
    if node.op != "call_function" or node.target not in _OUT_OF_PLACE:
        return None
    target = node.args[0]
    while isinstance(target, fx.Node) and target.op == "call_module":
        if target.target in converted:
            return target
        if not _is_pass_through(modules[target.target]):
            return None
        target = target.args[0]
    return None


def _shares_its_input(layer: fx.Node) -> bool:
    """Whether the layer's input is also read elsewhere: a model input, an attribute or a value with other
    consumers."""
    source = layer.args[0] if layer.args else None
    return not isinstance(source, fx.Node) or source.op in ("placeholder", "get_attr") or len(source.users) > 1


def _in_place_only_where_safe(graph: fx.Graph, converted: set[str], folded: set[str],
                              modules: dict[str, nn.Module]) -> None:
    """Make an augmented assignment into a converted layer's output return a new tensor wherever adding in place
    could differ from the original model, whose BatchNorm returned a tensor of its own: where the layer has an
    activation folded in (it may keep its output for backward, as a ReLU does, which the model's own activation
    need not have done: a SiLU keeps its input; autograd refuses an output changed in place), and where the layer's
    input is read elsewhere too (a layer may return its input itself: an identity, no normalization and no
    affine, whose input the addition would then change)."""
    for node in graph.nodes:
        layer = _layer_written(node, converted, modules)
        if layer is not None and (layer.target in folded or _shares_its_input(layer)):
            node.target = _OUT_OF_PLACE[node.target]


def _describe(node: fx.Node, modules: dict[str, nn.Module]) -> str:
    if node.op == "call_module":
        return f"{node.target!r} ({type(modules[node.target]).__name__})"
    if node.op == "call_function" and node.target in _OUT_OF_PLACE:
        return f"{_OUT_OF_PLACE[node.target].__name__.rstrip('_')} (in place)"
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target))
    if node.op == "call_method":
        return f".{node.target}()"
    if node.op == "output":
        return "the model's output"
    return f"{node.op} {node.target}"


def _only_input(node: fx.Node, source: fx.Node) -> bool:
    """Whether ``source`` is the first argument of ``node`` and no other argument is a graph value."""
    others = [a for a in [*node.args[1:], *node.kwargs.values()] if isinstance(a, fx.Node)]
    return bool(node.args) and node.args[0] is source and not others


def _node_activation(node: fx.Node, source: fx.Node, modules: dict[str, nn.Module]) -> tuple[bool, str | None]:
    """Whether ``node`` applies an activation to ``source`` alone, and its name (None for a gate)."""
    if node.op == "call_module":
        return _activation(modules[node.target]) if _only_input(node, source) else (False, None)
    table = {"call_function": _ACTIVATION_FUNCTIONS, "call_method": _ACTIVATION_METHODS}.get(node.op, {})
    if node.target in table and _only_input(node, source):  # fx's graph hashes every target: no TypeError
        return True, table[node.target]
    return False, None


def _node_passes_through(node: fx.Node, source: fx.Node, modules: dict[str, nn.Module]) -> bool:
    if node.op == "call_module":
        return _is_pass_through(modules[node.target]) and _only_input(node, source)
    return (node.op == "call_function" and node.target in _PASS_THROUGH_FUNCTIONS and bool(node.args)
            and node.args[0] is source)


def _separates(node: fx.Node) -> bool:
    """Whether ``node`` computes a new quantity (an activation after it is its own): torch.nn's and the
    suite's and timm's modules, convolutions, pooling, arithmetic of two tensors; not arithmetic with a
    constant, not unknown functions."""
    if node.op == "call_module":
        return True  # the tracer keeps only torch.nn's, the suite's and timm's known modules as calls
    if node.op not in ("call_function", "call_method"):
        return True  # output, placeholders
    separating, combining = ((_SEPARATING_FUNCTIONS, _COMBINING_FUNCTIONS) if node.op == "call_function"
                             else (_SEPARATING_METHODS, _COMBINING_METHODS))
    if node.target in separating:
        return True
    return node.target in combining and sum(isinstance(a, fx.Node) for a in [*node.args, *node.kwargs.values()]) > 1


def _follow(node: fx.Node, modules: dict[str, nn.Module]) -> tuple[list[fx.Node], fx.Node]:
    """From ``node``, the chain of single-consumer pass-through nodes, and the node whose consumers end it."""
    via = []
    while len(node.users) == 1:
        (user,) = node.users
        if not _node_passes_through(user, node, modules):
            break
        via.append(user)
        node = user
    return via, node


def _unknown_chain(node: fx.Node, modules: dict[str, nn.Module], limit: int = 16) -> tuple[list[fx.Node], fx.Node | None]:
    """From an operation ``node`` not known to separate: the single-consumer chain of such operations (and
    pass-throughs) it starts, and the activation that ends it (None if something else does)."""
    chain = [node]
    while len(chain) <= limit and len(node.users) == 1:
        (user,) = node.users
        if _node_activation(user, node, modules)[0]:
            return chain, user
        if not (_node_passes_through(user, node, modules) or not _separates(user)):
            break
        chain.append(user)
        node = user
    return chain, None


@dataclasses.dataclass
class _FlowDecision:
    activation: fx.Node | None  # the activation node to fold and remove
    name: str | None
    reason: str
    warning: str | None = None


def _decide(node: fx.Node, label: str, modules: dict[str, nn.Module]) -> _FlowDecision:
    """Read from the graph whether the norm ``node``'s output goes to an activation that can be folded."""
    via, last = _follow(node, modules)
    through = (f" through {', '.join(_describe(v, modules) for v in via)} (passing its input through)"
               if via else "")
    users = list(last.users)
    if not users:
        return _FlowDecision(None, None, f"its output is not used{through}")
    if len(users) == 1:
        user = users[0]
        is_act, act = _node_activation(user, last, modules)
        if is_act and act is not None:
            return _FlowDecision(user, act, f"{act} {_describe(user, modules)} follows it{through}")
        if is_act:
            return _FlowDecision(None, None, f"it feeds {_describe(user, modules)}{through}, a gate", (
                f"{label} feeds {_describe(user, modules)}{through}, an activation that a norm-act layer does not "
                "replace: converted with nonlinearity=False and the activation kept after it"))
        if not _separates(user):
            chain, act_node = _unknown_chain(user, modules)
            if act_node is not None:
                named = ", ".join(_describe(c, modules) for c in chain)
                return _FlowDecision(None, None, f"it feeds {named}, then an activation", (
                    f"{label} reaches the activation {_describe(act_node, modules)} through {named}{through}, "
                    "which convert_norm_act cannot prove passes its input through: converted with "
                    "nonlinearity=False and the activation kept; if it does pass its input through, convert a "
                    "model without it or build the model with the norm-act layer"))
        return _FlowDecision(None, None, f"its output goes to {_describe(user, modules)}{through}, not an activation")
    acts = [u for u in users if _node_activation(u, last, modules)[0]]
    described = ", ".join(_describe(u, modules) for u in users)
    if acts:
        return _FlowDecision(None, None, f"its output has {len(users)} consumers ({described})", (
            f"{label} feeds the activation {_describe(acts[0], modules)}{through} and {len(users) - 1} other "
            f"consumer(s) ({described}): an activation applied to only some uses cannot be folded; converted "
            "with nonlinearity=False and the activation kept"))
    return _FlowDecision(None, None, f"its output has {len(users)} consumers ({described}), none an activation")


def _replace_submodule(root: nn.Module, qualname: str, new: nn.Module) -> None:
    parent, _, child = qualname.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, child, new)


def _frozen_classes() -> tuple[type, ...]:
    return timm_support.loaded_classes("torchvision.ops.misc", ("FrozenBatchNorm2d",))


def _unconvertible(module: nn.Module) -> str | None:
    """Why ``module`` (a norm) cannot become a 2-d norm-act layer, or None if it can."""
    if timm_support.norm_act_kind(module) == "frozen" or isinstance(module, _frozen_classes()):
        return ("is a frozen BatchNorm (fixed statistics and affine); convert the model before freezing it, or "
                "unfreeze it first (timm.layers.unfreeze_batch_norm_2d)")
    if not isinstance(module, nn.modules.batchnorm._BatchNorm):
        return None
    if isinstance(module, nn.modules.lazy.LazyModuleMixin):
        return "is a lazy BatchNorm whose number of channels is not known yet; run the model once first"
    if not isinstance(module, (nn.BatchNorm2d, nn.SyncBatchNorm)):
        return f"is a {type(module).__name__}; the norm-act layers are 2-d (NCHW), only nn.BatchNorm2d is converted"
    return None


def _kind(module: nn.Module) -> str | None:
    """``"batchnorm"`` (nn.BatchNorm2d, nn.SyncBatchNorm, timm's BatchNormAct2d/SyncBatchNormAct),
    ``"groupnorm_act"``, ``"evonorm"`` (timm's), or None: what convert_norm_act converts."""
    timm_kind = timm_support.norm_act_kind(module)
    if timm_kind in ("groupnorm_act", "evonorm"):
        return timm_kind
    if timm_kind == "batchnorm_act" or isinstance(module, (nn.BatchNorm2d, nn.SyncBatchNorm)):
        return "batchnorm"
    return None


def _state_of(module: nn.Module) -> dict:
    """``{"device": ..., "dtype": ...}`` of ``module``'s first floating-point tensor (empty if none)."""
    for tensor in [*module.parameters(), *module.buffers()]:
        if tensor.is_floating_point():
            return {"device": tensor.device, "dtype": tensor.dtype}
    return {}


def _layer_name(norm_act: str | NormActMaker) -> str:
    return norm_act if isinstance(norm_act, str) else getattr(norm_act, "__name__", repr(norm_act))


def _sync_options(norm_act, make, nonlinearity: bool, options: dict, name: str, bn: nn.Module) -> dict:
    """Options that keep a SyncBatchNorm's cross-process statistics in the new layer: ``sync=True`` and its
    process group where the layer uses batch statistics; ``ValueError`` where such a layer cannot sync."""
    if not isinstance(bn, nn.SyncBatchNorm) or "sync" in options:
        return {}
    try:
        batch = uses_batch_statistics(norm_act if isinstance(norm_act, str) else make, nonlinearity)
    except (TypeError, ValueError):
        batch = None  # undeclared
    if batch is False:
        return {}
    if isinstance(norm_act, str) and "sync" in options_of(norm_act):
        return {"sync": True, "process_group": bn.process_group}
    raise ValueError(
        f"convert_norm_act cannot convert {name!r}: it is a SyncBatchNorm and {_layer_name(norm_act)} "
        f"{'uses' if batch else 'may use'} batch statistics without a sync option; convert the model before "
        "nn.SyncBatchNorm.convert_sync_batchnorm, or pass a registered layer name (its sync=True is set)")


def _make_layer(norm_act, make, options: dict, channels: int, nonlinearity: bool, like: nn.Module,
                extra: dict) -> nn.Module:
    state = _state_of(like)
    if isinstance(norm_act, str) and {"device", "dtype"} <= set(options_of(norm_act)):
        return build_norm_act(norm_act, channels, nonlinearity, **{**state, **options, **extra})
    if isinstance(norm_act, str):  # a third-party layer without device/dtype arguments
        return build_norm_act(norm_act, channels, nonlinearity, **{**options, **extra}).to(**state)
    return make(channels, nonlinearity).to(**state)  # a callable


def _insert_after(graph: fx.Graph, node: fx.Node, target: str) -> fx.Node:
    """A call of submodule ``target`` on ``node``'s output, taking over every other use of ``node``."""
    with graph.inserting_after(node):
        new = graph.call_module(target, (node,))
    node.replace_all_uses_with(new, delete_user_cb=lambda user: user is not new)
    return new


def _norm_summary(model: nn.Module) -> str:
    norms = Counter(type(m).__name__ for m in model.modules() if _NORM_CLASS_NAME.search(type(m).__name__))
    if not norms:
        return "it has no normalization layer"
    listed = ", ".join(f"{name} x{n}" for name, n in sorted(norms.items()))
    return f"its normalization layers are {listed}, which it does not replace"


def _check_timm_evonorms(model: nn.Module, norm_act: str | NormActMaker) -> None:
    """timm's EvoNorms are swapped only for their own equivalent (carrying their parameters): refuse a
    different requested layer, naming the way to build the architecture with it."""
    found = Counter()
    example = {}
    for name, m in model.named_modules():
        if _kind(m) == "evonorm":
            target = timm_support.EVONORM_MAPPING[type(m).__name__][0]
            found[target] += 1
            example.setdefault(target, (name, type(m).__name__))
    requested = resolve_name(norm_act) if isinstance(norm_act, str) else None
    other = {t: n for t, n in found.items() if t != requested}
    if other:
        listed = "; ".join(f"{n} whose equivalent is {t} (e.g. {example[t][0]!r}, timm's {example[t][1]})"
                           for t, n in sorted(other.items()))
        raise ValueError(
            f"{type(model).__name__} holds timm EvoNorm layers: {listed}. convert_norm_act swaps a timm EvoNorm only "
            f"for its own equivalent, carrying its trained parameters, not for {_layer_name(norm_act)}; to build this "
            f"architecture with {_layer_name(norm_act)}, pass norm_layer=evonorm_core.timm_norm_act_layer(...) to "
            "timm.create_model, or use swap_timm_evonorms(model) for the equivalents")


def convert_norm_act(model: nn.Module, norm_act: str | NormActMaker, **options) -> fx.GraphModule:
    """Replace every BatchNorm of ``model`` (not modified) by the ``norm_act`` layer.

    ``norm_act`` is a registered name (with ``options``, e.g. ``groups=16``; each layer is built on
    its BatchNorm's device and in its dtype unless ``options`` name a ``device`` or ``dtype``) or a
    callable ``(num_channels, nonlinearity) -> nn.Module`` (its layers are moved there). Converted:
    ``nn.BatchNorm2d``, ``nn.SyncBatchNorm`` (``sync=True`` and its process group for a layer with
    batch statistics), timm's ``BatchNormAct2d``, ``SyncBatchNormAct``, ``GroupNormAct`` and
    ``GroupNorm1Act`` (their own ``act`` folded in), and timm's EvoNorms when ``norm_act`` is their
    equivalent (swapped with their parameters, statistics, ``eps``, groups and momentum, whatever
    ``options`` say of those; see the module docstring). Returns a ``GraphModule`` in the same
    train/eval mode, with the report as ``.norm_act_report`` (a :class:`ConversionReport`; its
    ``details()`` give each layer's reason). Raises ``ValueError`` if the model cannot be traced,
    calls one BatchNorm twice, has nothing to convert, has a BatchNorm that is not 2-d (1-d, 3-d,
    lazy or frozen ones) or timm EvoNorms whose equivalent is another layer, naming them. Emits a
    :class:`ConversionWarning` for each layer whose output reaches an activation that could not be
    folded and each norm left as it was.
    """
    make = norm_act_factory(norm_act, **options)
    bad = [f"{name!r} {why}" for name, m in model.named_modules() if (why := _unconvertible(m))]
    if bad:
        raise ValueError(f"convert_norm_act cannot convert {len(bad)} BatchNorm layer(s): " + "; ".join(bad))
    convertible = {name for name, m in model.named_modules() if _kind(m) is not None}
    if not convertible:
        kinds = "BatchNorm2d, SyncBatchNorm, timm's BatchNormAct2d/SyncBatchNormAct/GroupNormAct/GroupNorm1Act or EvoNorms"
        raise ValueError(f"convert_norm_act found nothing to convert in {type(model).__name__}: no {kinds}; "
                         f"{_norm_summary(model)}")
    _check_timm_evonorms(model, norm_act)
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
    entries, kept, warned = [], [], []

    def warn(message: str) -> None:
        warned.append(message)
        warnings.warn(message, ConversionWarning, stacklevel=3)

    for node in list(graph.nodes):
        if node.op != "call_module" or _kind(modules[node.target]) is None:
            continue
        norm, name = modules[node.target], node.target
        if calls[name] > 1:
            raise ValueError(f"BatchNorm {name!r} is called {calls[name]} times; cannot convert it")
        kind, source = _kind(norm), type(norm).__name__
        if kind == "evonorm":
            layer, why = timm_support.build_evonorm_equivalent(norm, **options)
            if layer is None:
                kept.append(KeptNorm(name, source, why))
                warn(f"{name!r}: {why}")
                continue
            _replace_submodule(gm, name, layer)
            entries.append(ConvertedNorm(name, None, source, why, carried=True, nonlinearity=layer.nonlinearity,
                                         family="EvoNorm"))
            continue
        family = "GroupNorm" if kind == "groupnorm_act" else _BATCH_NORM_FAMILY
        label = f"{source} {name!r}"
        decision = None
        act_module, drop = getattr(norm, "act", None), getattr(norm, "drop", None)
        last = node  # timm's norm-act: its drop, then its act, follow the norm
        if drop is not None and not isinstance(drop, nn.Identity):
            gm.add_submodule(f"{name}_drop", drop)
            last = _insert_after(graph, node, f"{name}_drop")
            modules[f"{name}_drop"] = drop
        if act_module is not None and not isinstance(act_module, nn.Identity):
            is_act, act = _activation(act_module)
            dropped = f" (its drop {type(drop).__name__} now follows the layer)" if last is not node else ""
            if is_act and act is not None:
                decision = _FlowDecision(None, act, f"its own act ({type(act_module).__name__}) folded in{dropped}")
            else:
                gm.add_submodule(f"{name}_act", act_module)
                _insert_after(graph, last, f"{name}_act")
                modules[f"{name}_act"] = act_module
                decision = _FlowDecision(None, None, f"its own act {type(act_module).__name__} is kept after it", (
                    f"{label}'s own act {type(act_module).__name__} is not an activation that a norm-act layer "
                    f"replaces: converted with nonlinearity=False and {name + '_act'!r} kept after it"))
        if decision is None:
            decision = _decide(node, label, modules)
            if source != "BatchNorm2d" and act_module is not None:
                decision.reason = f"its act is Identity (apply_act=False); {decision.reason}"
        nonlinearity = decision.name is not None
        if decision.activation is not None:
            decision.activation.replace_all_uses_with(decision.activation.args[0])
            graph.erase_node(decision.activation)
        extra = _sync_options(norm_act, make, nonlinearity, options, name, norm)
        channels = norm.num_features if kind == "batchnorm" else norm.num_channels
        _replace_submodule(gm, name, _make_layer(norm_act, make, options, channels, nonlinearity, norm, extra))
        if decision.warning:
            warn(decision.warning)
        entries.append(ConvertedNorm(name, decision.name, source, decision.reason, family=family,
                                     warned=decision.warning is not None))
    for name in sorted(convertible - set(calls)):  # inside a module that fx keeps as one call
        holder = max((c for c in calls if name.startswith(c + ".")), key=len, default=None)
        if holder is not None:
            source = type(model.get_submodule(name)).__name__
            why = (f"inside {holder!r} ({type(modules[holder]).__name__}), which torch.fx keeps as one call "
                   "(timm registers it as not traceable): not converted")
            kept.append(KeptNorm(name, source, why))
            warn(f"{source} {name!r} is {why}")
    _in_place_only_where_safe(graph, {e.name for e in entries}, {e.name for e in entries if e.nonlinearity},
                              dict(gm.named_modules()))
    graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    gm.train(model.training)
    gm.norm_act_report = ConversionReport(_layer_name(norm_act), entries, kept, warned)
    logger.info("%s", gm.norm_act_report)
    return gm


def swap_timm_evonorms(model: nn.Module, **options) -> nn.Module:
    """A copy of ``model`` (same class, e.g. a timm ``ResNetV2``) with each of timm's EvoNorms replaced
    by the suite's fused layer computing the same function, carrying its parameters (``v`` as ``v1``),
    ``running_var``, ``eps``, groups and momentum (:data:`timm_support.EVONORM_MAPPING`). One without
    an equivalent (an ``a`` variant built with ``apply_act=False``, an S1/S2 with an activation other
    than SiLU) is left as it is, with a :class:`ConversionWarning`. ``options`` (``impl``, ``sync``,
    ``process_group``) go to the new layers. The report is ``.norm_act_report``; ``ValueError`` if the
    model holds none of timm's EvoNorms. No tracing: the activation is part of timm's layer.
    """
    fixed = sorted(set(options) & {"eps", "groups", "momentum", "nonlinearity"})
    if fixed:
        raise ValueError(f"swap_timm_evonorms takes {fixed} from each timm layer; options: impl, sync, process_group")
    found = [name for name, m in model.named_modules() if _kind(m) == "evonorm"]
    if not found:
        raise ValueError(f"swap_timm_evonorms found no timm EvoNorm in {type(model).__name__}; {_norm_summary(model)}")
    new = copy.deepcopy(model)
    entries, kept, warned = [], [], []
    for name in found:
        module = new.get_submodule(name)
        layer, why = timm_support.build_evonorm_equivalent(module, **options)
        if layer is None:
            kept.append(KeptNorm(name, type(module).__name__, why))
            warned.append(f"{name!r}: {why}")
            warnings.warn(warned[-1], ConversionWarning, stacklevel=2)
            continue
        _replace_submodule(new, name, layer)
        entries.append(ConvertedNorm(name, None, type(module).__name__, why, carried=True,
                                     nonlinearity=layer.nonlinearity, family="EvoNorm"))
    new.norm_act_report = ConversionReport("their equivalents", entries, kept, warned)
    logger.info("%s", new.norm_act_report)
    return new
