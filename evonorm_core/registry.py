"""A registry of normalization-activation layers, built by name.

Names are case- and separator-insensitive: ``evonorm_s0``, ``EvoNormS0`` and
``evonorm-s0`` are one layer. Third-party code registers its own layers::

    @register_norm_act("my_norm")
    class MyNorm(nn.Module):
        uses_batch_statistics = False
        def __init__(self, num_channels, nonlinearity=True, **options): ...

Models take a :data:`NormActMaker`, ``make(num_channels, nonlinearity) -> nn.Module``, made
from a name by :func:`norm_act_factory`.
"""
from __future__ import annotations

import functools
import inspect
import re
from typing import Any, Callable

from torch import nn

from . import running_stats

NormActMaker = Callable[[int, bool], nn.Module]
"""The layer contract of every model of the suite: ``make(num_channels, nonlinearity) -> nn.Module``
(``nonlinearity=False`` where the replaced BatchNorm had no activation after it)."""

_Constructor = Callable[..., nn.Module]  # ``(num_channels, nonlinearity=True, **options) -> nn.Module``

_FACTORIES: dict[str, _Constructor] = {}  # canonical name -> constructor (options bound)
_BATCH_STATISTICS: dict[str, Callable[[bool], bool] | None] = {}  # canonical name -> nonlinearity -> bool
_KEYS: dict[str, str] = {}  # normalized name or alias -> canonical name


class UnknownNormActError(KeyError, ValueError):
    """Raised for a layer name that is not registered; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def normalize_name(name: str) -> str:
    """The lookup key of ``name``: lower case with every non-alphanumeric character removed."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _declared_batch_statistics(constructor: _Constructor) -> Callable[[bool], bool] | None:
    """``nonlinearity -> uses batch statistics`` from a layer class's metadata, if it declares it:
    a classmethod ``uses_batch_statistics_for(nonlinearity)`` or a class attribute ``uses_batch_statistics``."""
    target = constructor.func if isinstance(constructor, functools.partial) else constructor
    if not inspect.isclass(target):
        return None
    if callable(getattr(target, "uses_batch_statistics_for", None)):
        return target.uses_batch_statistics_for
    declared = inspect.getattr_static(target, "uses_batch_statistics", None)
    if isinstance(declared, bool):
        return lambda nonlinearity: declared
    return None


def register_norm_act(
    name: str, *aliases: str, override: bool = False, batch_statistics: bool | None = None, **defaults
) -> Callable[[_Constructor], _Constructor]:
    """Register ``constructor(num_channels, nonlinearity=True, **options)`` under ``name``.

    Used as a decorator; ``defaults`` are options bound for this name (e.g. the same class
    registered as ``bn_relu`` and ``bn_swish`` with different ``activation``). A name or
    alias that is already taken raises ``ValueError`` unless ``override=True`` (then it
    points to the new layer for every caller). ``batch_statistics`` declares whether the
    layer uses batch statistics, for a constructor that is not a class declaring it itself
    (``uses_batch_statistics_for(nonlinearity)`` or ``uses_batch_statistics``), see :func:`uses_batch_statistics`.
    """
    keys = {normalize_name(n) for n in (name, *aliases)}

    def decorator(constructor: _Constructor) -> _Constructor:
        taken = sorted(k for k in keys if k in _KEYS)
        if taken and not override:
            owners = ", ".join(f"{k!r} by {_KEYS[k]!r}" for k in taken)
            raise ValueError(
                f"cannot register norm-act {name!r}: name(s) already taken ({owners}); "
                "pick another name or pass override=True to replace it for every caller"
            )
        bound = functools.partial(constructor, **defaults) if defaults else constructor
        for key in keys:
            _KEYS[key] = name
        _FACTORIES[name] = bound
        declared = _declared_batch_statistics(constructor)
        if batch_statistics is not None:
            declared = lambda nonlinearity: bool(batch_statistics)  # noqa: E731
        _BATCH_STATISTICS[name] = declared
        return constructor

    return decorator


def list_norm_acts() -> list[str]:
    """Every registered layer's canonical name, sorted."""
    return sorted(_FACTORIES)


def resolve_name(name: str) -> str:
    """The canonical name for ``name``; :class:`UnknownNormActError` listing the valid names if unknown."""
    if not isinstance(name, str) or normalize_name(name) not in _KEYS:
        raise UnknownNormActError(f"unknown norm-act layer {name!r}; valid names: {', '.join(list_norm_acts())}")
    return _KEYS[normalize_name(name)]


def accepted_options(constructor: _Constructor) -> list[str]:
    """Keyword options a constructor accepts, following ``**kwargs`` up a class's base classes."""
    bound = set(constructor.keywords) if isinstance(constructor, functools.partial) else set()
    target = constructor.func if isinstance(constructor, functools.partial) else constructor
    chain = [c.__init__ for c in target.__mro__ if "__init__" in vars(c)] if inspect.isclass(target) else [target]
    names: list[str] = []
    for fn in chain:
        params = list(inspect.signature(fn).parameters.values())
        names += [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return sorted(set(names) - {"self", "num_channels", "nonlinearity"} - bound)


def options_of(name: str) -> list[str]:
    """The options the layer registered as ``name`` accepts (bound defaults excluded)."""
    return accepted_options(_FACTORIES[resolve_name(name)])


def build_norm_act(name: str, num_channels: int, nonlinearity: bool = True, **options) -> nn.Module:
    """Build the layer registered as ``name`` for ``num_channels`` channels.

    ``options`` go to the layer (``eps``, ``groups``, ``momentum``, ``sync``, ``affine``,
    ``device``, ``dtype`` ...); an option the layer does not take raises ``ValueError``
    naming the accepted ones.
    """
    canonical = _checked_name(name, options)
    return _FACTORIES[canonical](num_channels, nonlinearity=nonlinearity, **options)


def _checked_name(name: str, options: dict) -> str:
    """The canonical name, after checking that its layer takes every key of ``options``."""
    canonical = resolve_name(name)
    accepted = accepted_options(_FACTORIES[canonical])
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"norm-act layer {canonical!r} does not take option(s) {unknown}; accepted: {accepted}")
    return canonical


def norm_act_factory(spec: str | NormActMaker, **options) -> NormActMaker:
    """Turn a layer spec into ``make(num_channels, nonlinearity) -> nn.Module``.

    ``spec`` is a registered name (``options`` are bound to it and checked now, so a bad
    name or option fails before any model is built) or already such a callable, e.g. one
    that builds a searched layer from a genome. Models take this so one argument selects
    any layer. The maker of a name carries ``uses_batch_statistics`` (see
    :func:`uses_batch_statistics`).
    """
    if callable(spec):
        if options:
            raise ValueError(f"options {sorted(options)} can only be given with a layer name, not a callable")
        return spec
    canonical = _checked_name(spec, options)

    def make(num_channels: int, nonlinearity: bool = True) -> nn.Module:
        return build_norm_act(canonical, num_channels, nonlinearity, **options)

    make.__name__ = make.__qualname__ = f"make_{canonical}"
    declared = _BATCH_STATISTICS[canonical]
    if declared is not None:
        make.uses_batch_statistics = bool(declared(True))
    return make


def norm_act_options(*, groups: int | None = None, sync: bool = False, eps: float | None = None,
                     impl: str | None = None) -> dict[str, Any]:
    """The :func:`norm_act_factory` options that a run's settings ask for.

    ``groups``, ``eps`` and ``impl`` are passed when set (``None``: the layer's default);
    ``sync`` when true (a layer without batch statistics refuses it, naming the option). Every
    launcher turns its configuration into layer options with this, so that an unset setting
    means the same everywhere.
    """
    options: dict[str, Any] = {name: value for name, value in (("groups", groups), ("eps", eps), ("impl", impl))
                               if value is not None}
    if sync:
        options["sync"] = True
    return options


def uses_batch_statistics(spec: str | NormActMaker | nn.Module, nonlinearity: bool = True) -> bool:
    """Whether a layer normalizes with batch statistics (keeps moving averages for eval).

    ``spec`` is a registered name (answered from the layer's declared metadata, for the
    layer built with ``nonlinearity``; nothing is built), a :data:`NormActMaker` carrying a
    ``uses_batch_statistics`` attribute (those of :func:`norm_act_factory` and of the search's
    ``genome_norm_act`` do), or a module: a layer, or a whole model (True if any of its
    layers does, native ``nn.BatchNorm*`` included).
    """
    if isinstance(spec, nn.Module):
        return bool(running_stats.batch_statistics_layers(spec))
    if isinstance(spec, str):
        canonical = resolve_name(spec)
        declared = _BATCH_STATISTICS[canonical]
        if declared is None:
            raise ValueError(
                f"norm-act layer {canonical!r} does not declare whether it uses batch statistics; register it "
                "with batch_statistics=True/False or give its class a uses_batch_statistics attribute"
            )
        return bool(declared(nonlinearity))
    if callable(spec) and isinstance(getattr(spec, "uses_batch_statistics", None), bool):
        return spec.uses_batch_statistics
    raise TypeError(
        f"cannot tell whether {spec!r} uses batch statistics without building a layer: pass a registered "
        "name, a layer or model, or a maker with a boolean uses_batch_statistics attribute"
    )
