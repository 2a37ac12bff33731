"""Property-based tests of the configuration round trips: command line -> configuration, and
configuration -> JSON -> configuration, for every run configuration with a command line
(``search/evolve.py``'s ``SearchConfig`` with its nested proxy and evolution settings,
``classification/train.py``'s ``TrainConfig``, ``gan/train_biggan.py``'s ``GanConfig``).

The reference is written here from the documented conventions, not from
``evonorm_core.experiment.config``: one ``--field-name`` flag per setting, ``--flag``/``--no-flag``
for booleans, several values or one comma-separated value for tuples, ``none`` (any case) for an
unset optional setting or an empty tuple, numbers as Python prints them. A random valid
configuration (random settings drawn from each option's declared type, range and choices, the
rest the program's default) is written as such a command line, parsed by the program's own parser
and resolution function, and must come back equal; saved and loaded as JSON, likewise.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
import typing

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from evonorm_core import list_norm_acts
from evonorm_core.experiment.config import (
    ConfigError,
    command_line,
    config_from_dict,
    config_to_dict,
    explicit_values,
    replace_config,
)
from evonorm_suite.classification import train as classification_train
from evonorm_suite.classification.train import TrainConfig
from evonorm_suite.gan import train_biggan
from evonorm_suite.gan.config import PRESET_OF_DATASET, GanConfig
from evonorm_suite.gan.config import preset as gan_preset
from evonorm_suite.search import evolve
from evonorm_suite.search.config import SearchConfig
from evonorm_suite.search.presets import DEFAULT_PRESET
from evonorm_suite.search.presets import preset as search_preset

SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
LAYER_NAMES = {"norm_act", "norm"}  # free-text settings that name a registered layer
NOT_DRAWN = {"resume"}  # turns the command into another one (continue the run in --output-dir)
FREE_TEXT = st.text("abcxyz019_./-", min_size=1, max_size=10).filter(
    lambda s: not s.startswith("-") and s.lower() != "none")


def leaves(cls: type, prefix: str = ""):
    """``(dotted path, field, type)`` of every command-line setting of ``cls``, nested ones included."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from leaves(tp, f"{prefix}{f.name}.")
        elif f.metadata.get("cli", True) and f.name not in NOT_DRAWN:
            yield prefix + f.name, f, tp


def optional_inner(tp):
    args = typing.get_args(tp)
    if type(None) in args:
        return next(a for a in args if a is not type(None)), True
    return tp, False


def scalars(f: dataclasses.Field, tp) -> st.SearchStrategy:
    m = f.metadata
    if m.get("choices"):
        return st.sampled_from(m["choices"])
    if tp is bool:
        return st.booleans()
    if tp is int:
        low = 0 if m.get("min") is None else int(m["min"]) + bool(m.get("min_open"))
        high = low + 10_000 if m.get("max") is None else int(m["max"]) - bool(m.get("max_open"))
        return st.integers(low, high)
    if tp is float:
        low = -1e6 if m.get("min") is None else m["min"]
        high = 1e6 if m.get("max") is None else m["max"]
        return st.floats(low, high, exclude_min=bool(m.get("min_open")), exclude_max=bool(m.get("max_open")),
                         allow_nan=False, allow_infinity=False)
    if f.name in LAYER_NAMES:
        return st.sampled_from(list_norm_acts())
    return FREE_TEXT


def values(f: dataclasses.Field, tp) -> st.SearchStrategy:
    inner, optional = optional_inner(tp)
    if typing.get_origin(inner) is tuple:
        item = typing.get_args(inner)[0]
        # an empty tuple is written 'none': for an optional tuple, or one whose choices include 'none', that is
        # another value (None, the item 'none'), so those draw at least one item
        empty_ok = not optional and "none" not in (f.metadata.get("choices") or ())
        strategy = st.lists(scalars(f, item), min_size=0 if empty_ok else 1, max_size=4).map(tuple)
    else:
        strategy = scalars(f, inner)
    return st.one_of(st.none(), strategy) if optional else strategy


def with_settings(config, chosen: dict):
    """``config`` with the dotted-path settings ``chosen`` (nested dataclasses rebuilt), by hand."""
    direct = {k: v for k, v in chosen.items() if "." not in k}
    for head in {k.split(".", 1)[0] for k in chosen if "." in k}:
        sub = {k.split(".", 1)[1]: v for k, v in chosen.items() if k.startswith(head + ".")}
        direct[head] = with_settings(getattr(config, head), sub)
    return dataclasses.replace(config, **direct)


def flag_words(path: str, f: dataclasses.Field, tp, value, draw) -> list[str]:
    """The command-line words that set ``value``, in one of the documented spellings."""
    flag = "--" + path.rsplit(".", 1)[-1].replace("_", "-")
    inner, _ = optional_inner(tp)
    if inner is bool:
        if value is None:  # an optional switch (e.g. --randaugment: the recipe's) is None by being left out
            return []
        return [flag] if value else ["--no-" + flag[2:]]
    if value is None or value == ():
        return [flag, draw(st.sampled_from(["none", "None", "NONE"]))]
    if typing.get_origin(inner) is tuple:
        items = [repr(v) if isinstance(v, float) else str(v) for v in value]
        return [flag, ",".join(items)] if draw(st.booleans()) else [flag, *items]
    if isinstance(value, float):
        return [flag, repr(value) + (draw(st.sampled_from(["", "s"])) if f.metadata.get("parse") else "")]
    return [flag, str(value)]


@st.composite
def command_lines(draw, cls, base_of):
    """``(argv, expected configuration)``: a random subset of ``cls``'s settings set to random valid values."""
    fields = list(leaves(cls))
    chosen, argv = {}, []
    for path, f, tp in fields:
        if draw(st.integers(0, 3)) == 0:  # about a quarter of the settings given
            chosen[path] = draw(values(f, tp), label=path)
    base = base_of(chosen)
    try:
        expected = with_settings(base, chosen)
    except (ConfigError, ValueError):
        assume(False)  # settings that contradict each other (e.g. a crop larger than the image)
    by_path = {path: (f, tp) for path, f, tp in fields}
    for path, value in chosen.items():
        argv += flag_words(path, *by_path[path], value, draw)
    return argv, expected


def differences(got, expected, prefix: str = "") -> list[str]:
    """The settings where two configurations differ, as ``path: got != expected``."""
    found = []
    for f in dataclasses.fields(got):
        a, b = getattr(got, f.name), getattr(expected, f.name)
        if dataclasses.is_dataclass(a):
            found += differences(a, b, f"{prefix}{f.name}.")
        elif a != b:
            found.append(f"{prefix}{f.name}: {a!r} != {b!r}")
    return found


def search_base(chosen):
    return search_preset(DEFAULT_PRESET, chosen.get("evolution.mode", "B"))


def gan_base(chosen):
    dataset = chosen.get("dataset", "digits")
    return dataclasses.replace(gan_preset(PRESET_OF_DATASET[dataset]), dataset=dataset)


def json_round_trip(cls, config):
    return config_from_dict(cls, json.loads(json.dumps(config_to_dict(config))))


@SETTINGS
@given(case=command_lines(SearchConfig, search_base))
def test_search_command_line_and_json_round_trip(case):
    argv, expected = case
    config = evolve.resolve_config(evolve.build_parser().parse_args(argv))
    assert config == expected, (argv, differences(config, expected))
    assert json_round_trip(SearchConfig, config) == config


@SETTINGS
@given(case=command_lines(TrainConfig, lambda chosen: TrainConfig()))
def test_classification_command_line_and_json_round_trip(case):
    argv, expected = case
    config = classification_train.config_from_argv([*argv, "--data", expected.data])
    assert config == expected, (argv, differences(config, expected))
    assert json_round_trip(TrainConfig, expected) == expected


@SETTINGS
@given(case=command_lines(GanConfig, gan_base))
def test_gan_command_line_and_json_round_trip(case):
    argv, expected = case
    given_ = explicit_values(train_biggan.build_parser().parse_args(argv), GanConfig)
    dataset = given_.get("dataset", "digits")
    config = replace_config(gan_preset(PRESET_OF_DATASET[dataset]), {"dataset": dataset, **given_})  # as main() does
    assert config == expected, (argv, differences(config, expected))
    assert json_round_trip(GanConfig, config) == config


@settings(max_examples=200, deadline=None)
@given(argv=st.lists(st.text(min_size=0, max_size=12), max_size=6))
def test_the_recorded_command_line_splits_back_into_its_arguments(argv):
    """``command_line`` (the command saved in result files) quotes every argument: a shell splits it back."""
    assert shlex.split(command_line("python search/compare.py", argv)) == ["python", "search/compare.py", *argv]
