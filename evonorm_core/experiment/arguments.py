"""Command-line value types shared by the suite's programs, checked before any work starts.

    parser.add_argument("--seeds", type=seed, nargs="+", action=DistinctValues, default=[0, 1, 2])
    parser.add_argument("--json", type=output_file, required=True)
    parser.add_argument("--out", type=output_folder, default="results")

A bad value is an argparse error naming the flag, the value and what is accepted.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

MAX_SEED = 2**31 - 1  # torch.manual_seed takes up to 2**64 - 1, numpy's legacy seeding 2**32 - 1: one bound for both


def seed(text: str) -> int:
    """A seed: an integer in 0..2**31 - 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer seed: {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"seeds must be in 0..{MAX_SEED}, got {value}")
    return value


def at_least(minimum: int) -> Callable[[str], int]:
    """An integer >= ``minimum``: ``type=at_least(2)``."""
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    return parse


positive_int = at_least(1)


class DistinctValues(argparse.Action):
    """``nargs="+"`` whose values must all differ (``--seeds 0 0`` would count one seed twice)."""

    def __call__(self, parser, namespace, values, option_string=None):
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            parser.error(f"{option_string} repeats {', '.join(map(str, repeated))}: each value counts once")
        setattr(namespace, self.dest, list(values))


def output_folder(text: str) -> Path:
    """A folder the program may make or write into: not a file, and under no file."""
    path = Path(text).expanduser()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} cannot be a folder: {str(existing)!r} is a file")
    return path


def output_file(text: str) -> Path:
    """A file the program may write: not a folder, in an existing folder it can write to."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file path")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        problem = "is not a folder" if folder.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"folder {str(folder)!r} of {text!r} {problem}")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{text!r} is not writable")
    return path


def check_output_paths(parser: argparse.ArgumentParser, args: argparse.Namespace, *flags: str) -> None:
    """Refuse, before any work, each of ``flags`` (``"--json"``) whose path is no :func:`output_file`;
    '' or None is no file. For flags whose defaults are resolved after parsing, or where '' means none."""
    for flag in flags:
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value:
            try:
                output_file(str(value))
            except argparse.ArgumentTypeError as error:
                parser.error(f"argument {flag}: {error}")
