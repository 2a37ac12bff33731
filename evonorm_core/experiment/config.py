"""Run configurations: a frozen dataclass per kind of run, presets as instances of it.

A configuration class declares each setting once, as a field made with :func:`option`
(default, help text, accepted range). Everything else is derived from the fields: the
command line (:func:`add_config_arguments`, one ``--field-name`` flag per field), the range
checks (:func:`validate`, called from ``__post_init__`` so an invalid configuration cannot
exist), the JSON saved beside a run's outputs (:func:`save_config` / :func:`load_config`),
explicit overrides (:func:`replace_config`) and what a resumed run may change (the options
declared ``resumable``, :func:`resume_config`)::

    @dataclass(frozen=True)
    class TrainConfig:
        lr: float = option(0.1, "peak learning rate", min=0, min_open=True)
        steps: int = option(100, "training steps", min=1, resumable=True)

        def __post_init__(self) -> None:
            validate(self)

    PRESETS = {"cpu": TrainConfig(steps=100), "paper": TrainConfig(steps=2000)}

    parser = argparse.ArgumentParser()
    add_config_arguments(parser, TrainConfig, defaults=PRESETS["cpu"])
    args = parser.parse_args()
    config = replace_config(PRESETS["cpu"], explicit_values(args, TrainConfig))

Fields may themselves be configuration dataclasses; their fields become flags of the same
command line (flag names must then be unique across the nesting).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import sys
import types
import typing
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .files import atomic_write_text, read_json

MISSING = dataclasses.MISSING


class ConfigError(ValueError):
    """A setting outside its accepted values; the message names the flag, the value and what is accepted."""


def command_line(program: str, argv: Sequence[str] | None = None) -> str:
    """The command a run was started with, for its result files: ``program`` (e.g. ``python
    search/compare.py``) and ``argv`` (default: this process's arguments), shell-quoted."""
    return f"{program} {shlex.join(sys.argv[1:] if argv is None else argv)}"


def option(
    default: Any = MISSING,
    help: str = "",
    *,
    default_factory: Callable[[], Any] | Any = MISSING,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
    choices: tuple | list | None = None,
    parse: Callable[[str], Any] | None = None,
    metavar: str | None = None,
    cli: bool = True,
    resumable: bool = False,
) -> Any:
    """A configuration field: its default, its ``--help`` text and its accepted values.

    ``min``/``max`` bound numbers (inclusive unless ``min_open``/``max_open``); floats must
    also be finite. ``choices`` restricts the value (each item, for tuples); ``parse``
    reads the flag's text (e.g. durations like ``15m``); ``cli=False`` keeps a field off
    the command line. ``resumable=True``: a resumed run may change it (how long it runs,
    where its files lie, how it reports); every other option stays the run's own.
    """
    metadata = {
        "help": help, "min": min, "max": max, "min_open": min_open, "max_open": max_open,
        "choices": tuple(choices) if choices is not None else None, "parse": parse, "metavar": metavar, "cli": cli,
        "resumable": resumable,
    }
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


# ------------------------------------------------------------------------------- types
def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, else ``(tp, False)``."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return rest[0], True
    return tp, False


def _is_config(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _leaf_fields(cls: type, prefix: str = "") -> list[tuple[str, dataclasses.Field, Any]]:
    """``(dotted path, field, type)`` of every non-dataclass field, nested configs flattened."""
    hints = typing.get_type_hints(cls)
    leaves = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if _is_config(tp):
            leaves += _leaf_fields(tp, f"{prefix}{f.name}.")
        else:
            leaves.append((prefix + f.name, f, tp))
    return leaves


def _scalar_parser(tp: Any, f: dataclasses.Field) -> Callable[[str], Any]:
    if f.metadata.get("parse"):
        return f.metadata["parse"]
    if tp in (int, float, str):
        return tp
    raise TypeError(f"field {f.name!r}: type {tp!r} has no command-line form; give option(parse=...) or cli=False")


def _parse_none(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse_optional(text: str) -> Any:
        return None if text.strip().lower() == "none" else parse(text)

    parse_optional.__name__ = getattr(parse, "__name__", "value")
    return parse_optional


def _split_items(parse: Callable[[str], Any], none_is_empty: bool) -> Callable[[str], list | None]:
    """Items of one word of a tuple flag (``a,b``); with ``none_is_empty`` the word ``none`` is None (no items)."""
    def parse_items(text: str) -> list | None:
        if none_is_empty and text.strip().lower() == "none":
            return None
        return [parse(item.strip()) for item in text.split(",") if item.strip()]

    parse_items.__name__ = getattr(parse, "__name__", "value")
    return parse_items


class _ExtendItems(argparse.Action):
    """``--flag a b`` and ``--flag a,b`` both give ``(a, b)``; ``--flag none`` gives ``empty`` (the
    empty tuple, or None for an optional tuple)."""

    def __init__(self, *args: Any, empty: tuple | None = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.empty = empty

    def __call__(self, parser, namespace, values, option_string=None):
        if any(chunk is None for chunk in values):
            if len(values) > 1:
                parser.error(f"argument {option_string}: 'none' (no values) cannot be combined with values")
            setattr(namespace, self.dest, self.empty)
            return
        setattr(namespace, self.dest, tuple(item for chunk in values for item in chunk))


# --------------------------------------------------------------------------- command line
def add_config_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    defaults: Any | None = None,
    *,
    exclude: tuple[str, ...] = (),
    resumes: bool = True,
) -> None:
    """Add one ``--field-name`` flag per field of ``cls`` (nested configs flattened).

    Flags have no argparse default (absent flags are absent from the namespace, see
    :func:`explicit_values`); the help text shows the value of ``defaults`` (an instance,
    e.g. the default preset). Booleans get ``--flag/--no-flag``; tuples take several values
    (or one comma-separated value); optional fields accept ``none``, and so do tuples (no
    values: None for an optional tuple, else the empty tuple) unless ``none`` is one of the
    field's own choices. ``resumes``: the program resumes runs, so the help of each resumable
    option says that a resumed run may change it.
    """
    for path, f, tp in _leaf_fields(cls):
        if not f.metadata.get("cli", True) or f.name in exclude:
            continue
        inner, optional = _unwrap_optional(tp)
        kwargs: dict[str, Any] = {"dest": path, "default": argparse.SUPPRESS,
                                  "help": _help_text(path, f, defaults, resumes)}
        if f.metadata.get("metavar"):
            kwargs["metavar"] = f.metadata["metavar"]
        if inner is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(inner) is tuple:
            item = typing.get_args(inner)[0]
            none_is_item = "none" in (f.metadata.get("choices") or ())  # e.g. search's --references none
            kwargs.update(nargs="+", type=_split_items(_scalar_parser(item, f), none_is_empty=not none_is_item),
                          action=_ExtendItems, empty=None if optional else ())
        else:
            parse = _scalar_parser(inner, f)
            kwargs["type"] = _parse_none(parse) if optional else parse
            if f.metadata.get("choices") and not optional and not f.metadata.get("metavar"):
                kwargs["metavar"] = "{" + ",".join(map(str, f.metadata["choices"])) + "}"
        parser.add_argument(flag_name(f.name), **kwargs)


def _help_text(path: str, f: dataclasses.Field, defaults: Any | None, resumes: bool) -> str:
    text = f.metadata.get("help", "")
    accepted = _rule(f)
    if accepted:
        text += f"; {accepted}"
    if resumes and f.metadata.get("resumable") and f.name != "resume":  # (the flag that resumes needs no such note)
        text += "; may change on --resume"
    if defaults is not None:
        value = get_path(defaults, path)
        text += f" (default: {_show(value)})"
    return text.replace("%", "%%")


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    return str(value)


def explicit_values(namespace: argparse.Namespace, cls: type) -> dict[str, Any]:
    """``{dotted path: value}`` of the flags of ``cls`` that were given on the command line."""
    given = vars(namespace)
    return {path: given[path] for path, _, _ in _leaf_fields(cls) if path in given}


def get_path(config: Any, path: str) -> Any:
    for name in path.split("."):
        config = getattr(config, name)
    return config


def option_values(config: Any) -> dict[str, Any]:
    """``{dotted path: value}`` of every option of ``config`` (nested configs flattened)."""
    return {path: get_path(config, path) for path, _, _ in _leaf_fields(type(config))}


def replace_config(config: Any, overrides: Mapping[str, Any]) -> Any:
    """``config`` with the dotted-path ``overrides`` applied (and validated)."""
    direct = {k: v for k, v in overrides.items() if "." not in k}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        if "." in key:
            head, rest = key.split(".", 1)
            nested.setdefault(head, {})[rest] = value
    for head, sub in nested.items():
        direct[head] = replace_config(getattr(config, head), sub)
    unknown = sorted(set(direct) - {f.name for f in dataclasses.fields(config)})
    if unknown:
        raise ConfigError(f"unknown setting(s) {unknown} for {type(config).__name__}")
    return dataclasses.replace(config, **direct)


# ------------------------------------------------------------------------------ resuming
def resumable_options(cls: type) -> tuple[str, ...]:
    """Dotted paths of the options of ``cls`` declared ``option(..., resumable=True)``."""
    return tuple(path for path, f, _ in _leaf_fields(cls) if f.metadata.get("resumable", False))


def fixed_on_resume(cls: type) -> tuple[str, ...]:
    """Dotted paths of the options of ``cls`` that a resumed run keeps (every non-resumable one)."""
    resumable = set(resumable_options(cls))
    return tuple(path for path, _, _ in _leaf_fields(cls) if path not in resumable)


def resume_config(saved: Any, changes: Mapping[str, Any]) -> Any:
    """The configuration a resumed run continues with: ``saved`` (the run's own) with
    ``changes`` applied, where only :func:`resumable_options` may differ from ``saved``.

    A change to any other option raises :class:`ConfigError` naming each such flag, the
    run's value and the value given, and the flags that may change.
    """
    changed = [path for path in fixed_on_resume(type(saved))
               if path in changes and changes[path] != get_path(saved, path)]
    if changed:
        refused = "; ".join(
            f"{_flag_of(path)} cannot change when resuming: the run was started with {_show(get_path(saved, path))}, "
            f"got {_show(changes[path])}" for path in changed)
        allowed = ", ".join(_flag_of(path) for path in resumable_options(type(saved))) or "none"
        raise ConfigError(f"{refused} (a resumed run keeps its own settings; flags that may change: {allowed})")
    return replace_config(saved, changes)


def _flag_of(path: str) -> str:
    return flag_name(path.rsplit(".", 1)[-1])


# ------------------------------------------------------------------------------ checks
def _rule(f: dataclasses.Field) -> str:
    def shown(bound: float) -> str:  # 2147483647, not 2.14748e+09
        return str(bound) if isinstance(bound, int) else f"{bound:g}"

    m = f.metadata
    parts = []
    if m.get("min") is not None:
        parts.append(f"{'>' if m.get('min_open') else '>='} {shown(m['min'])}")
    if m.get("max") is not None:
        parts.append(f"{'<' if m.get('max_open') else '<='} {shown(m['max'])}")
    if m.get("choices"):
        return "one of " + ", ".join(map(str, m["choices"]))
    return " and ".join(parts)


def _check_value(flag: str, f: dataclasses.Field, tp: Any, value: Any) -> None:
    inner, optional = _unwrap_optional(tp)
    if value is None:
        if optional:
            return
        raise ConfigError(f"{flag} must be set, got None")
    if typing.get_origin(inner) is tuple:
        if not isinstance(value, tuple):
            raise ConfigError(f"{flag} must be a tuple, got {value!r}")
        item_tp = typing.get_args(inner)[0]
        for item in value:
            _check_value(flag, f, item_tp, item)
        return
    if inner is bool and not isinstance(value, bool):
        raise ConfigError(f"{flag} must be true or false, got {value!r}")
    if inner in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ConfigError(f"{flag} must be a number, got {value!r}")
    if inner is int and not isinstance(value, int):
        raise ConfigError(f"{flag} must be an integer, got {value!r}")
    m = f.metadata
    if m.get("choices") and value not in m["choices"]:
        raise ConfigError(f"{flag} must be {_rule(f)}, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{flag} must be a finite number, got {value!r}")
        low, high = m.get("min"), m.get("max")
        too_low = low is not None and (value <= low if m.get("min_open") else value < low)
        too_high = high is not None and (value >= high if m.get("max_open") else value > high)
        if too_low or too_high:
            raise ConfigError(f"{flag} must be {_rule(f)}, got {value!r}")


def validate(config: Any) -> None:
    """Check every field of ``config`` against its type and :func:`option` rules.

    Raises :class:`ConfigError` naming the flag, the value and what is accepted. Nested
    configurations check themselves (call this from every config's ``__post_init__``).
    """
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        if _is_config(hints[f.name]):
            continue
        _check_value(flag_name(f.name), f, hints[f.name], getattr(config, f.name))


# ------------------------------------------------------------------------------- JSON
def config_to_dict(config: Any) -> dict:
    """Plain JSON-ready dict of ``config`` (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


def config_from_dict(cls: type, data: Mapping[str, Any], *, source: str = "") -> Any:
    """Rebuild a ``cls`` instance from :func:`config_to_dict` output (lists back to tuples).

    Settings missing from ``data`` take ``cls``'s defaults; unknown ones raise
    :class:`ConfigError` (naming ``source``, e.g. the file they came from).
    """
    where = f" in {source}" if source else ""
    if not isinstance(data, Mapping):
        raise ConfigError(f"expected a JSON object for {cls.__name__}{where}, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown setting(s) {unknown} for {cls.__name__}{where}")
    values = {}
    for name, value in data.items():
        tp, _ = _unwrap_optional(hints[name])
        if _is_config(tp) and value is not None:
            value = config_from_dict(tp, value, source=source)
        elif typing.get_origin(tp) is tuple and isinstance(value, list):
            value = tuple(value)
        values[name] = value
    try:
        return cls(**values)
    except TypeError as error:
        raise ConfigError(f"cannot build {cls.__name__}{where}: {error}") from None


def save_config(path: str | Path, config: Any) -> None:
    """Write ``config`` as indented JSON, atomically."""
    atomic_write_text(path, json.dumps(config_to_dict(config), indent=2) + "\n")


def load_config(path: str | Path, cls: type) -> Any:
    """The ``cls`` configuration saved at ``path``; errors name the file and what is wrong."""
    return config_from_dict(cls, read_json(path, what=f"{cls.__name__} file"), source=str(path))
