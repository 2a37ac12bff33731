"""A registry of normalization-activation layers, built by name.

Names are case- and separator-insensitive: ``evonorm_s0``, ``EvoNormS0`` and
``evonorm-s0`` are one layer. Third-party code registers its own layers::

    @register_norm_act("my_norm")
    class MyNorm(nn.Module):
        def __init__(self, num_channels, nonlinearity=True, **options): ...
"""
from __future__ import annotations

import functools
import inspect
import re
from typing import Callable

from torch import nn

NormActFactory = Callable[..., nn.Module]

_FACTORIES: dict[str, NormActFactory] = {}  # canonical name -> factory
_KEYS: dict[str, str] = {}  # normalized name or alias -> canonical name


class UnknownNormActError(KeyError, ValueError):
    """Raised for a layer name that is not registered; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def normalize_name(name: str) -> str:
    """The lookup key of ``name``: lower case with every non-alphanumeric character removed."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def register_norm_act(name: str, *aliases: str, **defaults) -> Callable[[NormActFactory], NormActFactory]:
    """Register ``factory(num_channels, nonlinearity=True, **options)`` under ``name``.

    Used as a decorator; ``defaults`` are options bound for this name (e.g. the same class
    registered as ``bn_relu`` and ``bn_swish`` with different ``activation``).
    Raises ``ValueError`` if a name is already taken by another layer.
    """

    def decorator(factory: NormActFactory) -> NormActFactory:
        bound = functools.partial(factory, **defaults) if defaults else factory
        for key in {normalize_name(n) for n in (name, *aliases)}:
            if key in _KEYS and _KEYS[key] != name:
                raise ValueError(f"norm-act name {key!r} is already registered for {_KEYS[key]!r}")
            _KEYS[key] = name
        _FACTORIES[name] = bound
        return factory

    return decorator


def list_norm_acts() -> list[str]:
    """Every registered layer's canonical name, sorted."""
    return sorted(_FACTORIES)


def resolve_name(name: str) -> str:
    """The canonical name for ``name``; :class:`UnknownNormActError` listing the valid names if unknown."""
    if not isinstance(name, str) or normalize_name(name) not in _KEYS:
        raise UnknownNormActError(f"unknown norm-act layer {name!r}; valid names: {', '.join(list_norm_acts())}")
    return _KEYS[normalize_name(name)]


def accepted_options(factory: NormActFactory) -> list[str]:
    """Keyword options a factory accepts, following ``**kwargs`` up a class's base classes."""
    bound = set(factory.keywords) if isinstance(factory, functools.partial) else set()
    target = factory.func if isinstance(factory, functools.partial) else factory
    chain = [c.__init__ for c in target.__mro__ if "__init__" in vars(c)] if inspect.isclass(target) else [target]
    names: list[str] = []
    for fn in chain:
        params = list(inspect.signature(fn).parameters.values())
        names += [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return sorted(set(names) - {"self", "num_channels", "nonlinearity"} - bound)


def build_norm_act(name: str, num_channels: int, nonlinearity: bool = True, **options) -> nn.Module:
    """Build the layer registered as ``name`` for ``num_channels`` channels.

    ``options`` go to the layer (``eps``, ``groups``, ``momentum``, ``sync`` ...); an
    option the layer does not take raises ``ValueError`` naming the accepted ones.
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


def norm_act_factory(spec: str | Callable[[int, bool], nn.Module], **options) -> Callable[[int, bool], nn.Module]:
    """Turn a layer spec into ``make(num_channels, nonlinearity) -> nn.Module``.

    ``spec`` is a registered name (``options`` are bound to it and checked now, so a bad
    name or option fails before any model is built) or already such a callable, e.g. one
    that builds a searched layer from a genome. Models take this so one argument selects
    any layer.
    """
    if callable(spec):
        if options:
            raise ValueError(f"options {sorted(options)} can only be given with a layer name, not a callable")
        return spec
    canonical = _checked_name(spec, options)

    def make(num_channels: int, nonlinearity: bool = True) -> nn.Module:
        return build_norm_act(canonical, num_channels, nonlinearity, **options)

    make.__name__ = make.__qualname__ = f"make_{canonical}"
    return make
