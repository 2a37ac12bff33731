#!/usr/bin/env python3
"""Probe every entry point of the suite with bad inputs, as a careful new user would.

    python tools/probe_bad_inputs.py                      # every probe, one line each, then a summary
    python tools/probe_bad_inputs.py --only search gan    # the probes of some groups
    python tools/probe_bad_inputs.py --json docs/results/probe_bad_inputs.json

Each probe tries one bad input (a flag out of range, an unknown name, a dtype or shape the
layers cannot take, a corrupt, truncated, mismatched or malicious file, a used or locked
output folder, a kill -9 followed by ``--resume``, ...) against one entry point: the layer
API and the formula parser/printer in this process, the command-line programs through their
``main(argv)`` in this process (output captured, a time limit per probe) or, where a real
process is the point (kill -9, worker processes, what a user sees on the terminal), as a
subprocess. Each prints one line::

    id  entry point  what was tried  ->  OUTCOME  first line of the message

Outcomes: ``clear-error`` (refused with a message, no Python traceback; argparse's
``error:`` lines count), ``correct-result`` (accepted and right, e.g. NaN propagates as in
PyTorch's norms, an empty batch gives an empty output), and the failures ``TRACEBACK`` (an
exception escaped to the user, or the expected error does not say what was wrong),
``SILENT-WRONG`` (accepted although wrong, or a wrong result), ``DATA-LOST`` (an earlier
run's files changed or records lost), ``CODE-RAN`` (code from a data file executed: the
probe's marker file appeared), ``HANG`` (over the probe's time limit) and ``LEAK``
(processes outliving their parent). The summary counts each outcome; the exit status is
non-zero if any probe failed.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from evonorm_core.experiment.config import command_line

ROOT = Path(__file__).resolve().parents[1]

OK = ("clear-error", "correct-result")
OUTCOMES = (*OK, "TRACEBACK", "SILENT-WRONG", "DATA-LOST", "CODE-RAN", "HANG", "LEAK")


class ProbeTimeout(BaseException):
    """Raised by the alarm in an in-process probe that runs past its limit."""


class Outcome(Exception):
    """A probe's verdict, raised from inside its checks."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome, self.message = outcome, message


@dataclass
class Probe:
    group: str
    entry: str
    what: str
    run: Callable[["Context"], tuple[str, str]]
    limit: float = 60.0


@dataclass
class Result:
    id: str
    group: str
    entry: str
    what: str
    outcome: str
    message: str
    seconds: float


PROBES: list[Probe] = []


def probe(group: str, entry: str, what: str, limit: float = 60.0):
    def register(fn):
        PROBES.append(Probe(group, entry, what, fn, limit))
        return fn
    return register


@dataclass
class Context:
    """A scratch folder and lazily made run folders shared by the probes."""

    tmp: Path
    made: dict = field(default_factory=dict)

    def folder(self, name: str) -> Path:
        path = self.tmp / name
        n = 0
        while path.exists():
            n += 1
            path = self.tmp / f"{name}_{n}"
        return path

    def copy_of(self, key: str, maker: Callable[[Path], None]) -> Path:
        """A fresh copy of a run folder made once by ``maker``."""
        if key not in self.made:
            original = self.tmp / f"_{key}"
            with quiet():
                maker(original)
            self.made[key] = original
        target = self.folder(key)
        shutil.copytree(self.made[key], target)
        return target


@contextlib.contextmanager
def quiet():
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def first_line(text: str) -> str:
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def error_line(text: str) -> str:
    """The line of a program's output that states the error (argparse's ``error:`` line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower() or "cannot" in line.lower() or "refused" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else ""


# --------------------------------------------------------------------------- the checkers
def cli(main: Callable, argv: list[str], *, match: str | None = None,
        check: Callable[[], None] | None = None) -> tuple[str, str]:
    """Run ``main(argv)`` in this process; a bad input must end in a non-zero exit with a
    message (containing ``match``, case-insensitive) and no traceback."""
    out, err = io.StringIO(), io.StringIO()
    code, escaped = 0, None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            returned = main(argv)
            code = returned if isinstance(returned, int) else 0
    except SystemExit as exit_:
        code = exit_.code if exit_.code is not None else 0
    except ProbeTimeout:
        raise
    except BaseException as error:  # noqa: BLE001 (what a user would see as a traceback)
        escaped = error
    text = out.getvalue() + "\n" + err.getvalue()
    if check is not None:
        check()  # raises Outcome for DATA-LOST / CODE-RAN / LEAK
    if escaped is not None:
        return "TRACEBACK", f"{type(escaped).__name__}: {first_line(str(escaped))}"
    if "Traceback (most recent call last)" in text:
        return "TRACEBACK", first_line(text.split("Traceback (most recent call last)")[1])
    if code in (0, None):
        return "SILENT-WRONG", f"exit 0: {first_line(out.getvalue()) or 'no message'}"
    message = code if isinstance(code, str) else error_line(err.getvalue() + out.getvalue())
    message = first_line(message)
    if match and match.lower() not in (str(code) + text).lower():
        return "TRACEBACK", f"the error does not say {match!r}: {message}"
    return "clear-error", message


def api(fn: Callable[[], object], *, match: str | None = None, errors=(ValueError, TypeError),
        accept: Callable[[object], str | None] | None = None, ok: str = "") -> tuple[str, str]:
    """Call ``fn``; a bad input must raise one of ``errors`` whose message contains ``match``.
    With ``accept``, a return value is judged by it (``None``: correct; else what is wrong)."""
    try:
        value = fn()
    except ProbeTimeout:
        raise
    except errors as error:
        message = first_line(str(error))
        if match and match.lower() not in str(error).lower():
            return "TRACEBACK", f"{type(error).__name__} does not say {match!r}: {message}"
        return "clear-error", f"{type(error).__name__}: {message}"
    except RecursionError as error:
        return "TRACEBACK", f"RecursionError: {first_line(str(error))}"
    except Exception as error:  # noqa: BLE001
        return "TRACEBACK", f"{type(error).__name__}: {first_line(str(error))}"
    if accept is None:
        return "SILENT-WRONG", f"accepted, returned {type(value).__name__}"
    wrong = accept(value)
    return ("correct-result", ok or describe(value)) if wrong is None else ("SILENT-WRONG", wrong)


def describe(value) -> str:
    import torch
    if isinstance(value, torch.Tensor):
        return f"tensor {tuple(value.shape)} {value.dtype}"
    return first_line(repr(value))[:120]


def unchanged(path: Path, before: dict[str, bytes]) -> Callable[[], None]:
    def check():
        now = snapshot(path)
        if now != before:
            changed = sorted(set(before) ^ set(now) | {k for k in before if k in now and before[k] != now[k]})
            raise Outcome("DATA-LOST", f"the earlier run's files changed: {changed[:4]}")
    return check


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(Path(path).rglob("*"))
            if p.is_file() and p.name != ".lock"}


def no_marker(marker: Path, also: Callable[[], None] | None = None) -> Callable[[], None]:
    def check():
        if marker.exists():
            raise Outcome("CODE-RAN", f"code from the input file ran: {marker} was created")
        if also:
            also()
    return check


def evil_pickle_checkpoint(path: Path, marker: Path) -> None:
    """A torch checkpoint that creates ``marker`` when unpickled with ``weights_only=False``."""
    import torch

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"model": Evil(), "step": 1, "config": Evil()}, path)


def truncate(path: Path, keep: int = 200) -> None:
    path.write_bytes(path.read_bytes()[:keep])


@contextlib.contextmanager
def locked(folder: Path):
    """Hold ``folder``'s run lock as another writer would."""
    from evonorm_core.experiment.rundir import RunDir
    run = RunDir(folder, resume=True)
    try:
        yield
    finally:
        run.close()


def sub(argv: list[str], timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, **kwargs)


def sub_outcome(done: subprocess.CompletedProcess, match: str | None = None) -> tuple[str, str]:
    text = done.stdout + done.stderr
    if "Traceback (most recent call last)" in text:
        return "TRACEBACK", first_line(text.split("Traceback (most recent call last)")[-1].splitlines()[-1])
    if done.returncode == 0:
        return "SILENT-WRONG", "exit 0"
    message = error_line(done.stderr or done.stdout)
    if match and match.lower() not in text.lower():
        return "TRACEBACK", f"the error does not say {match!r}: {message}"
    return "clear-error", message


# ============================================================================ layer API
def _layer_probes():
    import torch
    from torch import nn

    import evonorm_core
    from evonorm_core import functional as F

    x = torch.randn(2, 8, 4, 4)

    def layer_call(name, tensor, train=True, **options):
        layer = evonorm_core.build_norm_act(name, tensor.shape[1] if tensor.dim() == 4 else 8, **options)
        layer.train(train)
        return layer(tensor)

    probe("layers", "build_norm_act", "unknown layer name 'evonorm_s9'")(
        lambda c: api(lambda: evonorm_core.build_norm_act("evonorm_s9", 8), match="evonorm_s9", errors=(ValueError, KeyError)))
    probe("layers", "build_norm_act", "groups=3 does not divide 8 channels")(
        lambda c: api(lambda: evonorm_core.build_norm_act("evonorm_s0", 8, groups=3), match="3"))
    probe("layers", "build_norm_act", "num_channels=0")(
        lambda c: api(lambda: evonorm_core.build_norm_act("evonorm_b0", 0), match="0"))
    probe("layers", "build_norm_act", "num_channels=8.5 (float)")(
        lambda c: api(lambda: evonorm_core.build_norm_act("evonorm_s0", 8.5), match="8.5"))
    probe("layers", "build_norm_act", "unknown option grups=8")(
        lambda c: api(lambda: evonorm_core.build_norm_act("evonorm_s0", 8, grups=8), match="grups"))
    for eps in ("nan", "inf", "-1e-5", "0"):
        probe("layers", "build_norm_act", f"evonorm_s0 eps={eps}")(
            lambda c, eps=eps: api(lambda: evonorm_core.build_norm_act("evonorm_s0", 8, eps=float(eps)), match="eps"))
    probe("layers", "build_norm_act", "evonorm_b0 momentum=2")(
        lambda c: api(lambda: evonorm_core.build_norm_act("evonorm_b0", 8, momentum=2.0), match="momentum"))
    for name, dtype in (("evonorm_b0", torch.uint8), ("evonorm_s0", torch.int64), ("evonorm_s0", torch.complex64),
                        ("evonorm_b1", torch.bool), ("bn_relu", torch.int32)):
        probe("layers", name, f"{str(dtype).replace('torch.', '')} input")(
            lambda c, name=name, dtype=dtype: api(
                lambda: layer_call(name, (torch.rand(2, 8, 4, 4) * 10).to(dtype)), match="dtype"))

    def nan_propagates(out):
        return None if torch.isnan(out).any() else "a NaN input gave no NaN (hidden)"
    probe("layers", "evonorm_s0", "NaN in the input (propagates like nn.GroupNorm)")(
        lambda c: api(lambda: layer_call("evonorm_s0", x.clone().index_put_((torch.tensor([0]),), torch.tensor(math.nan))),
                      accept=nan_propagates, ok="NaN propagates to the output, as in nn.GroupNorm"))

    def empty_ok(shape):
        def accept(out):
            return None if tuple(out.shape) == shape else f"output shape {tuple(out.shape)}, expected {shape}"
        return accept
    for name, shape in (("evonorm_s0", (0, 8, 4, 4)), ("evonorm_s0", (2, 8, 0, 0)), ("evonorm_b0", (0, 8, 4, 4))):
        probe("layers", name, f"empty input {shape} in training")(
            lambda c, name=name, shape=shape: api(lambda: layer_call(name, torch.randn(shape)), accept=empty_ok(shape), ok=f"empty output {shape}, as nn.GroupNorm/BatchNorm2d give"))

    def b0_running_var_after_empty():
        layer = evonorm_core.build_norm_act("evonorm_b0", 8)
        layer(torch.randn(0, 8, 4, 4))
        return layer.running_var.clone()
    probe("layers", "evonorm_b0", "empty batch leaves running_var finite and unchanged")(
        lambda c: api(b0_running_var_after_empty,
                      accept=lambda v: None if torch.equal(v, torch.ones(8)) else f"running_var became {v[:3].tolist()}",
                      ok="running_var unchanged (ones), as nn.BatchNorm2d keeps it"))
    probe("layers", "evonorm_s0", "3-D input (N, C, L)")(
        lambda c: api(lambda: layer_call("evonorm_s0", torch.randn(2, 8, 4)), match="4"))
    probe("layers", "evonorm_b0", "input with 6 channels into an 8-channel layer")(
        lambda c: api(lambda: evonorm_core.build_norm_act("evonorm_b0", 8)(torch.randn(2, 6, 4, 4)), match="6"))
    probe("layers", "functional.evonorm_s", "groups=3 for 8 channels")(
        lambda c: api(lambda: F.evonorm_s(x, None, None, None, groups=3, eps=1e-5), match="3"))
    probe("layers", "functional.evonorm_s", "eps=nan")(
        lambda c: api(lambda: F.evonorm_s(x, None, None, None, groups=4, eps=math.nan), match="eps"))
    probe("layers", "functional.evonorm_s", "v1 of the wrong shape (7,)")(
        lambda c: api(lambda: F.evonorm_s(x, None, None, torch.ones(7), groups=4, eps=1e-5), match="v1"))
    probe("layers", "convert_norm_act", "a model with BatchNorm1d")(
        lambda c: api(lambda: evonorm_core.convert_norm_act(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)), "evonorm_b0"),
                      match="BatchNorm1d"))
    probe("layers", "convert_norm_act", "a model with BatchNorm3d")(
        lambda c: api(lambda: evonorm_core.convert_norm_act(nn.Sequential(nn.Conv3d(3, 8, 1), nn.BatchNorm3d(8)), "evonorm_s0"),
                      match="BatchNorm3d"))
    probe("layers", "convert_norm_act", "unknown layer name")(
        lambda c: api(lambda: evonorm_core.convert_norm_act(nn.Sequential(nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8)), "nope"),
                      match="nope", errors=(ValueError, KeyError)))

    def reregister():
        evonorm_core.register_norm_act("evonorm_s0")(lambda num_channels, nonlinearity=True: nn.Identity())
    probe("layers", "register_norm_act", "registering the built-in name 'evonorm_s0' again")(
        lambda c: api(reregister, match="override"))


# ============================================================================ formula parser / printer
def _parser_probes():
    from evonorm_core.search.expression import parse, to_infix, to_latex
    from evonorm_core.search.genome import Genome, Node

    def roundtrip(text):
        genome = parse(text)
        return genome, to_infix(genome)

    probe("parser", "parse", "10,000 nested sigmoid(...) calls")(
        lambda c: api(lambda: roundtrip("sigmoid(" * 10000 + "x" + ")" * 10000),
                      accept=lambda r: None if len(r[0].nodes) == 10000 and parse(r[1]) == r[0] else "round trip differs",
                      ok="parsed iteratively to 10,000 nodes; to_infix reads back to the same genome"))
    probe("parser", "parse", "100,000 nested parentheses")(
        lambda c: api(lambda: parse("(" * 100000 + "x * v1" + ")" * 100000),
                      accept=lambda g: None if len(g.nodes) == 1 else f"{len(g.nodes)} nodes",
                      ok="parsed iteratively to one node"))
    probe("parser", "parse", "10,000 nested calls with max_nodes=10")(
        lambda c: api(lambda: parse("sigmoid(" * 10000 + "x" + ")" * 10000, max_nodes=10), match="10"))
    probe("parser", "parse", "unbalanced parenthesis 'sigmoid(x'")(lambda c: api(lambda: parse("sigmoid(x"), match="')'"))
    probe("parser", "parse", "unknown function 'foo(x)'")(lambda c: api(lambda: parse("foo(x)"), match="foo"))
    probe("parser", "parse", "empty formula")(lambda c: api(lambda: parse("   "), match="empty"))
    probe("parser", "parse", "a non-string (None)")(lambda c: api(lambda: parse(None), match="string"))
    probe("parser", "parse", "stray characters 'x $ v1'")(lambda c: api(lambda: parse("x $ v1"), match="$"))

    def doubling(n):  # node k = add(k-1, k-1): the printed tree would have 2**n leaves
        return Genome(tuple(Node("add", (4 + k - 1, 4 + k - 1)) if k else Node("mul", (0, 3)) for k in range(n)))

    def printed(n, latex=False):
        genome = doubling(n)
        text = (to_latex if latex else to_infix)(genome)
        return genome, text

    def linear(r):
        genome, text = r
        if len(text) > 100 * len(genome.nodes):
            return f"{len(text)} characters for {len(genome.nodes)} nodes"
        return None if parse(text) == genome else "parse(to_infix(g)) is another genome"
    probe("parser", "to_infix", "genome of 200 nodes each reusing the previous twice", 20)(
        lambda c: api(lambda: printed(200), accept=linear,
                                ok="each shared node printed once (linear size); parse reads it back to the same genome"))
    probe("parser", "to_latex", "genome of 200 nodes each reusing the previous twice", 20)(
        lambda c: api(lambda: printed(200, latex=True),
                      accept=lambda r: None if len(r[1]) < 200 * len(r[0].nodes) else f"{len(r[1])} characters",
                      ok="each shared node printed once as t_K (linear size)"))
    probe("parser", "Genome", "a node reading a later node")(
        lambda c: api(lambda: Genome((Node("add", (0, 5)), Node("mul", (0, 4)))), match="earlier"))
    probe("parser", "Genome", "an unknown op")(lambda c: api(lambda: Genome((Node("relu6", (0,)),)), match="relu6"))


# ============================================================================ search
SEARCH_TINY = ["--anchors", "resnet50_cifar", "--image-size", "8", "--crop-size", "8", "--batch-size", "8",
               "--train-steps", "2", "--quality-steps", "1", "--quality-threshold", "0", "--stability-steps", "1",
               "--stability-batch-size", "4", "--initial-population", "1", "--mode", "S", "--threads", "1",
               "--references", "none"]


def make_search_run(path: Path) -> None:
    from evonorm_suite.search import evolve
    assert evolve.main([*SEARCH_TINY, "--workers", "1", "--max-candidates", "3", "--seed", "1",
                        "--output-dir", str(path)]) == 0


def _search_probes():
    from evonorm_suite.search import calibrate, compare, evolve, report, rerank

    for flags, match in ((["--workers", "0"], "--workers"), (["--time-budget", "nan"], "--time-budget"),
                         (["--time-budget=-5m"], "--time-budget"), (["--max-candidates", "-1"], "--max-candidates"),
                         (["--quality-threshold", "5"], "--quality-threshold"), (["--lr", "-1"], "--lr"),
                         (["--anchors", "vgg"], "vgg"), (["--mode", "Q"], "--mode"), (["--batch-size", "abc"], "abc"),
                         (["--references", "bn"], "bn"), (["--data", "cifar10"], "--data-dir"),
                         (["--backend", "ray", "--workers", "-2"], "--workers")):
        probe("search", "search/evolve.py", " ".join(flags))(
            lambda c, flags=flags, match=match: cli(evolve.main, [*flags, "--output-dir", str(c.folder("s"))], match=match))

    def used_folder(c):
        folder = c.folder("s_used")
        folder.mkdir()
        (folder / "candidates.jsonl").write_text('{"id": 0}\n')
        before = snapshot(folder)
        return cli(evolve.main, [*SEARCH_TINY, "--max-candidates", "1", "--output-dir", str(folder)],
                   match="not empty", check=unchanged(folder, before))
    probe("search", "search/evolve.py", "an output folder holding an earlier run, no --resume")(used_folder)

    def two_writers(c):
        folder = c.folder("s_locked")
        with locked(folder):
            return cli(evolve.main, [*SEARCH_TINY, "--max-candidates", "1", "--output-dir", str(folder)], match="in use")
    probe("search", "search/evolve.py", "a second writer of a folder another process holds")(two_writers)
    probe("search", "search/evolve.py", "--resume of a folder with no run")(
        lambda c: cli(evolve.main, ["--resume", "--output-dir", str(c.folder("s_none"))], match="checkpoint"))

    def damaged(name, damage, match):
        def run(c):
            folder = c.copy_of("search", make_search_run)
            damage(folder)
            return cli(evolve.main, ["--resume", "--output-dir", str(folder), "--max-candidates", "4"], match=match)
        probe("search", "search/evolve.py --resume", name, limit=120)(run)
    damaged("checkpoint.json truncated", lambda f: truncate(f / "checkpoint.json", 30), "checkpoint.json")
    damaged("candidates.jsonl cut mid-line", lambda f: (f / "candidates.jsonl").write_text(
        (f / "candidates.jsonl").read_text()[:-40]), "candidates.jsonl")
    damaged("config.json of another program", lambda f: (f / "config.json").write_text('{"model": "resnet50"}'),
            "config.json")
    damaged("with --mode B (a setting fixed by the run)", lambda f: None, "cannot change")

    def resume_mode(c):
        folder = c.copy_of("search", make_search_run)
        return cli(evolve.main, ["--resume", "--output-dir", str(folder), "--mode", "B"], match="--mode")
    PROBES[-1].run = resume_mode

    probe("search", "search.report", "a folder that does not exist")(
        lambda c: cli(report.main, [str(c.folder("nothing"))], match="nothing"))
    probe("search", "search.report", "--top 0")(lambda c: cli(report.main, ["--top", "0", str(c.tmp)], match="--top"))

    def report_truncated(c):
        folder = c.copy_of("search", make_search_run)
        log = folder / "candidates.jsonl"
        log.write_text(log.read_text()[:-25])
        return cli(report.main, [str(folder), "--plot", str(c.tmp / "p.png")], match="line")
    probe("search", "search.report", "candidates.jsonl cut mid-line", limit=120)(report_truncated)
    probe("search", "search.rerank", "--top 0")(
        lambda c: cli(rerank.main, ["--top", "0", str(c.folder("r"))], match="--top"))
    probe("search", "search.rerank", "--seeds -1")(
        lambda c: cli(rerank.main, [str(c.folder("r")), "--seeds", "-1"], match="--seeds"))
    probe("search", "search.rerank", "a folder with no search run")(
        lambda c: cli(rerank.main, [str(c.folder("r_none"))], match="r_none"))
    probe("search", "search.compare", "--max-candidates 0")(
        lambda c: cli(compare.main, ["--max-candidates", "0", "--output-dir", str(c.folder("cmp"))], match="--max-candidates"))
    probe("search", "search.compare", "--seed 3 (set per run by compare)")(
        lambda c: cli(compare.main, ["--max-candidates", "2", "--seed", "3", "--output-dir", str(c.folder("cmp"))],
                      match="--seed"))
    probe("search", "search.calibrate", "--random -1")(
        lambda c: cli(calibrate.main, ["--json", str(c.tmp / "cal.json"), "--random", "-1"], match="--random"))
    probe("search", "search.calibrate", "--batch-size 0")(
        lambda c: cli(calibrate.main, ["--json", str(c.tmp / "cal.json"), "--batch-size", "0"], match="--batch-size"))


# ============================================================================ classification
CLS_TINY = ["--model", "mobilenetv2_cifar", "--norm-act", "evonorm_s0", "--image-size", "8", "--train-subset", "16",
            "--batch-size", "16", "--epochs", "2", "--warmup-epochs", "0", "--no-progress"]


def make_classification_run(path: Path) -> None:
    from evonorm_suite.classification import train
    assert train.main([*CLS_TINY, "--max-steps", "1", "--output-dir", str(path)]) == 0


def _classification_probes():
    from evonorm_suite.classification import tables, tradeoff, train

    for flags, match in ((["--epochs", "-1"], "--epochs"), (["--base-lr", "-1"], "--base-lr"),
                         (["--batch-size", "0"], "--batch-size"), (["--norm-act", "nope"], "nope"),
                         (["--model", "nope"], "--model"), (["--holdout-fraction", "1.5"], "--holdout-fraction"),
                         (["--width-multiplier", "nan"], "--width-multiplier"), (["--table", "table99"], "table99"),
                         (["--norm-act", "evonorm_s0", "--groups", "3"], "3"), (["--max-steps", "-3"], "--max-steps")):
        probe("classification", "classification.train", " ".join(flags))(
            lambda c, flags=flags, match=match: cli(train.main, [*flags, "--output-dir", str(c.folder("c"))], match=match))

    def used_folder(c):
        folder = c.copy_of("classification", make_classification_run)
        before = snapshot(folder)
        return cli(train.main, [*CLS_TINY, "--max-steps", "1", "--output-dir", str(folder)], match="not empty",
                   check=unchanged(folder, before))
    probe("classification", "classification.train", "an output folder holding an earlier run, no --resume", 120)(used_folder)

    def two_writers(c):
        folder = c.folder("c_locked")
        with locked(folder):
            return cli(train.main, [*CLS_TINY, "--output-dir", str(folder)], match="in use")
    probe("classification", "classification.train", "a second writer of a folder another process holds")(two_writers)

    def resumed(name, damage, match, limit=120):
        def run(c):
            folder = c.copy_of("classification", make_classification_run)
            marker = c.tmp / f"marker_{folder.name}"
            damage(folder, marker)
            return cli(train.main, ["--resume", "--output-dir", str(folder), "--max-steps", "2"], match=match,
                       check=no_marker(marker))
        probe("classification", "classification.train --resume", name, limit)(run)
    resumed("checkpoint.pt truncated", lambda f, m: truncate(f / "checkpoint.pt"), "checkpoint.pt")
    resumed("checkpoint.pt that runs code when unpickled", lambda f, m: evil_pickle_checkpoint(f / "checkpoint.pt", m),
            "checkpoint.pt")

    def other_width(folder, marker):
        import torch
        state = torch.load(folder / "checkpoint.pt", weights_only=True)
        state["model"] = {k: v[:1] if v.dim() else v for k, v in state["model"].items()}
        torch.save(state, folder / "checkpoint.pt")
    resumed("checkpoint.pt of another width", other_width, "does not fit")
    resumed("config.json not JSON", lambda f, m: (f / "config.json").write_text("{model: "), "config.json")
    resumed("with --norm-act bn_relu (a setting fixed by the run)", lambda f, m: None, "--norm-act")

    def resume_other_layer(c):
        folder = c.copy_of("classification", make_classification_run)
        return cli(train.main, ["--resume", "--output-dir", str(folder), "--norm-act", "bn_relu"], match="--norm-act")
    PROBES[-1].run = resume_other_layer

    probe("classification", "classification.tables", "run table3 --models nope")(
        lambda c: cli(tables.main, ["run", "table3", "--scale", "mini", "--models", "nope", "--runs-dir",
                                    str(c.folder("t")), "--dry-run"], match="nope"))
    probe("classification", "classification.tables", "run table3 --layers nope")(
        lambda c: cli(tables.main, ["run", "table3", "--scale", "mini", "--layers", "nope", "--runs-dir",
                                    str(c.folder("t")), "--dry-run"], match="nope"))
    probe("classification", "classification.tables", "run table99")(
        lambda c: cli(tables.main, ["run", "table99", "--dry-run"], match="table99"))
    probe("classification", "classification.tables", "report of a runs folder that does not exist")(
        lambda c: cli(tables.main, ["report", "table3", str(c.folder("none"))], match="none"))

    def tables_corrupt_result(c):
        runs = c.folder("t_corrupt")
        cell = runs / "resnet50" / "bn_relu" / "seed0"
        cell.mkdir(parents=True)
        (cell / "result.json").write_text('{"top1": ')
        return cli(tables.main, ["report", "table3", str(runs)], match="result.json")
    probe("classification", "classification.tables", "report over a truncated result.json")(tables_corrupt_result)
    probe("classification", "classification.tradeoff", "plot of a runs folder that does not exist")(
        lambda c: cli(tradeoff.main, ["plot", str(c.folder("none"))], match="none"))


# ============================================================================ GAN
GAN_TINY = ["--norm", "evonorm_b0", "--channels", "8", "--dim-z", "8", "--shared-dim", "8", "--depth", "1",
            "--batch-size", "8", "--micro-batch", "8", "--total-steps", "1", "--eval-every", "0", "--sample-every", "1000",
            "--threads", "1"]


def make_gan_run(path: Path) -> None:
    from evonorm_suite.gan import train_biggan
    assert train_biggan.main([*GAN_TINY, "--run-dir", str(path)]) == 0


def _gan_probes():
    from evonorm_suite.gan import evaluate, report, table5, train_biggan

    for flags, match in ((["--total-steps", "-5"], "--total-steps"), (["--norm", "nope"], "nope"),
                         (["--channels", "12"], "--channels"), (["--ema-decay", "1"], "--ema-decay"),
                         (["--g-lr", "nan"], "--g-lr"), (["--seeds", "0"], "--seeds"),
                         (["--batch-size", "8", "--micro-batch", "3"], "--micro-batch"),
                         (["--betas", "0.5"], "--betas")):
        probe("gan", "gan/train_biggan.py", " ".join(flags))(
            lambda c, flags=flags, match=match: cli(train_biggan.main, [*flags, "--run-dir", str(c.folder("g"))], match=match))

    def used_folder(c):
        folder = c.copy_of("gan", make_gan_run)
        before = snapshot(folder)
        return cli(train_biggan.main, [*GAN_TINY, "--run-dir", str(folder)], match="not empty",
                   check=unchanged(folder, before))
    probe("gan", "gan/train_biggan.py", "a run folder holding an earlier run, no --resume", 120)(used_folder)

    def two_writers(c):
        folder = c.folder("g_locked")
        with locked(folder / "seed0"):
            return cli(train_biggan.main, [*GAN_TINY, "--run-dir", str(folder)], match="in use")
    probe("gan", "gan/train_biggan.py", "a second writer of a folder another process holds")(two_writers)

    def resumed(name, damage, match):
        def run(c):
            folder = c.copy_of("gan", make_gan_run)
            marker = c.tmp / f"marker_{folder.name}"
            damage(folder / "seed0" / "checkpoints" / "last.pt", marker)
            return cli(train_biggan.main, ["--resume", "--run-dir", str(folder), "--total-steps", "2"], match=match,
                       check=no_marker(marker))
        probe("gan", "gan/train_biggan.py --resume", name, 120)(run)
    resumed("last.pt truncated", lambda p, m: truncate(p), "last.pt")
    resumed("last.pt that runs code when unpickled", lambda p, m: evil_pickle_checkpoint(p, m), "last.pt")

    def other_width(path, marker):
        import torch
        state = torch.load(path, weights_only=True)
        state["G"] = {k: v[:1] if v.dim() else v for k, v in state["G"].items()}
        torch.save(state, path)
    resumed("last.pt with generator weights of another width", other_width, "last.pt")

    def eval_run(name, damage, argv, match):
        def run(c):
            folder = c.copy_of("gan", make_gan_run)
            marker = c.tmp / f"marker_{folder.name}"
            extra = damage(folder / "seed0", marker)
            return cli(evaluate.main, [str(folder / "seed0"), "--num-samples", "16", "--standing-stats", "0",
                                       *argv, *(extra or [])], match=match, check=no_marker(marker))
        probe("gan", "gan.evaluate", name, 120)(run)

    def foreign_inception(seed, marker):
        path = seed.parent / "weights-inception-2015-12-05-6726825d.pth"
        evil_pickle_checkpoint(path, marker)
        return ["--inception-weights", str(path)]
    eval_run("--inception-weights a foreign file that runs code", foreign_inception, [], "refused")

    def evil_checkpoint(seed, marker):
        evil_pickle_checkpoint(seed / "evil.pt", marker)
        return ["--checkpoint", str(seed / "evil.pt")]
    eval_run("--checkpoint that runs code when unpickled", evil_checkpoint, [], "evil.pt")
    eval_run("--checkpoint of generator weights of another width",
             lambda seed, marker: other_width(seed / "checkpoints" / "last.pt", marker) or
             [], [], "last.pt")

    def other_width_ema(path, marker):
        import torch
        state = torch.load(path, weights_only=True)
        state["G_ema"] = {k: v[:1] if v.dim() else v for k, v in state["G_ema"].items()}
        torch.save(state, path)
    PROBES[-1].run = (lambda c: (lambda folder: cli(
        evaluate.main, [str(folder / "seed0"), "--num-samples", "16", "--standing-stats", "0"], match="last.pt"))(
        _damaged_gan(c, other_width_ema)))
    eval_run("--num-samples 0", lambda seed, marker: None, ["--num-samples", "0"], "--num-samples")
    eval_run("--batch-size 0", lambda seed, marker: None, ["--batch-size", "0"], "--batch-size")
    probe("gan", "gan.evaluate", "a run folder that does not exist")(
        lambda c: cli(evaluate.main, [str(c.folder("none"))], match="none"))
    probe("gan", "gan.report", "a folder with no evaluated run")(
        lambda c: cli(report.main, [str(c.folder("none"))], match="none"))

    def report_corrupt(c):
        folder = c.folder("g_rep") / "seed0"
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text('{"fid": 1')
        return cli(report.main, [str(folder.parent)], match="metrics.json")
    probe("gan", "gan.report", "a truncated metrics.json")(report_corrupt)
    probe("gan", "gan.table5", "--steps -1")(lambda c: cli(table5.main, ["--steps", "-1", "--report-only"], match="--steps"))
    probe("gan", "gan.table5", "--jobs 0")(lambda c: cli(table5.main, ["--jobs", "0", "--report-only"], match="--jobs"))
    probe("gan", "gan.table5", "--layers nope")(lambda c: cli(table5.main, ["--layers", "nope"], match="nope"))


def _damaged_gan(c: Context, damage) -> Path:
    folder = c.copy_of("gan", make_gan_run)
    damage(folder / "seed0" / "checkpoints" / "last.pt", None)
    return folder


# ============================================================================ detection
DEMO = ROOT / "detection" / "configs" / "demo_shapes_evonorm_s0.yaml"


def _detection_probes():
    def main(argv):
        from evonorm_suite.detection import train_net
        return train_net.main(argv)

    def config_file(c: Context, text: str) -> Path:
        path = c.folder("cfg")
        path.mkdir()
        path = path / "config.yaml"
        path.write_text(text)
        return path

    def malicious_yaml(c):
        marker = c.tmp / "marker_yaml"
        path = config_file(c, f'_BASE_: "{DEMO}"\nOUTPUT_DIR: !!python/object/apply:os.system ["touch {marker}"]\n')
        return cli(main, ["--config", str(path)], match="python", check=no_marker(marker))
    probe("detection", "tools/train_net.py", "config YAML with a !!python/object/apply tag")(malicious_yaml)

    def malicious_base(c):
        marker = c.tmp / "marker_yaml_base"
        base = config_file(c, f'MODEL: !!python/object/apply:os.system ["touch {marker}"]\n')
        path = config_file(c, f'_BASE_: "{base}"\n')
        return cli(main, ["--config", str(path)], match="python", check=no_marker(marker))
    probe("detection", "tools/train_net.py", "a _BASE_ config with a !!python/object/apply tag")(malicious_base)
    def cyclic_base(c):
        path = config_file(c, "")
        path.write_text(f'_BASE_: "{path}"\n')
        return cli(main, ["--config", str(path)], match="cycle")
    probe("detection", "tools/train_net.py", "a config that is its own _BASE_")(cyclic_base)
    probe("detection", "tools/train_net.py", "a config that is a YAML list, not a mapping")(
        lambda c: cli(main, ["--config", str(config_file(c, "- 1\n- 2\n"))], match="mapping"))
    probe("detection", "tools/train_net.py", "config with an unknown key")(
        lambda c: cli(main, ["--config", str(config_file(c, f'_BASE_: "{DEMO}"\nSOLVER:\n  NOPE: 1\n'))], match="NOPE"))
    probe("detection", "tools/train_net.py", "config file that does not exist")(
        lambda c: cli(main, ["--config", str(c.tmp / "none.yaml")], match="none.yaml"))
    probe("detection", "tools/train_net.py", "override SOLVER.MAX_ITER abc")(
        lambda c: cli(main, ["--config", str(DEMO), "SOLVER.MAX_ITER", "abc"], match="MAX_ITER"))
    probe("detection", "tools/train_net.py", "--num-gpus 0")(
        lambda c: cli(main, ["--config", str(DEMO), "--num-gpus", "0"], match="--num-gpus"))

    def used_folder(c):
        folder = c.folder("d_used")
        folder.mkdir()
        (folder / "model_final.pth").write_bytes(b"earlier run")
        before = snapshot(folder)
        return cli(main, ["--config", str(DEMO), "OUTPUT_DIR", str(folder)], match="not empty",
                   check=unchanged(folder, before))
    probe("detection", "tools/train_net.py", "OUTPUT_DIR holding an earlier run, no --resume")(used_folder)

    def two_writers(c):
        folder = c.folder("d_locked")
        with locked(folder):
            return cli(main, ["--resume", "--config", str(DEMO), "OUTPUT_DIR", str(folder)], match="in use")
    probe("detection", "tools/train_net.py", "a second writer of an OUTPUT_DIR another process holds")(two_writers)

    def weights(c, suffix, write, match):
        folder = c.folder("d_weights")
        marker = c.tmp / f"marker_{folder.name}"
        path = c.tmp / f"{folder.name}{suffix}"
        write(path, marker)
        return cli(main, ["--config", str(DEMO), "--eval-only", "OUTPUT_DIR", str(folder), "MODEL.WEIGHTS", str(path)],
                   match=match, check=no_marker(marker))

    def pickle_file(path, marker):
        import pickle

        class Evil:
            def __reduce__(self):
                return (os.system, (f"touch {marker}",))
        path.write_bytes(pickle.dumps({"model": Evil(), "__author__": "x"}))
    probe("detection", "tools/train_net.py --eval-only", "MODEL.WEIGHTS a .pkl that runs code when unpickled", 180)(
        lambda c: weights(c, ".pkl", pickle_file, "pkl"))
    probe("detection", "tools/train_net.py --eval-only", "MODEL.WEIGHTS a .pth that runs code when unpickled", 180)(
        lambda c: weights(c, ".pth", evil_pickle_checkpoint, ".pth"))
    probe("detection", "tools/train_net.py --eval-only", "MODEL.WEIGHTS a truncated .pth", 180)(
        lambda c: weights(c, ".pth", lambda p, m: p.write_bytes(b"PK\x03\x04 cut"), ".pth"))

    def miniature(argv):
        from evonorm_suite.detection import miniature as mini
        return mini.main(argv)
    probe("detection", "detection.miniature", "--iterations 0")(
        lambda c: cli(miniature, ["--iterations", "0", "--runs-dir", str(c.folder("m"))], match="--iterations"))
    probe("detection", "detection.miniature", "--seeds -1")(
        lambda c: cli(miniature, ["--seeds", "-1", "--runs-dir", str(c.folder("m"))], match="--seeds"))
    probe("detection", "detection.miniature", "--layers nope")(
        lambda c: cli(miniature, ["--layers", "nope", "--runs-dir", str(c.folder("m"))], match="nope"))


# ============================================================================ tools
def _tool_probes():
    def tool(name):
        import importlib.util
        spec = importlib.util.spec_from_file_location(f"_probe_{name}", ROOT / "tools" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module.main

    probe("tools", "tools/reproduce.py", "--only table9")(
        lambda c: cli(tool("reproduce"), ["--only", "table9", "--dry-run"], match="table9"))
    probe("tools", "tools/benchmark_layers.py", "--shapes 2x8x4 (three dimensions)")(
        lambda c: cli(tool("benchmark_layers"), ["--shapes", "2x8x4", "--no-model", "--no-timm"], match="2x8x4"))
    probe("tools", "tools/benchmark_layers.py", "--reps 0")(
        lambda c: cli(tool("benchmark_layers"), ["--reps", "0", "--no-model"], match="--reps"))
    probe("tools", "tools/benchmark_layers.py", "--dtype int8")(
        lambda c: cli(tool("benchmark_layers"), ["--dtype", "int8"], match="int8"))
    probe("tools", "tools/benchmark_layers.py", "--threads -1")(
        lambda c: cli(tool("benchmark_layers"), ["--threads", "-1", "--no-model"], match="--threads"))
    probe("tools", "tools/benchmark_layers.py", "--device nonsense")(
        lambda c: cli(tool("benchmark_layers"), ["--device", "nonsense", "--no-model"], match="nonsense"))
    probe("tools", "tools/check_capture.py", "--layers nope")(
        lambda c: cli(tool("check_capture"), ["--layers", "nope", "--checks", "fx"], match="nope"))
    probe("tools", "tools/check_capture.py", "--batch 0")(
        lambda c: cli(tool("check_capture"), ["--batch", "0", "--checks", "fx"], match="--batch"))


# ============================================================================ real processes
def _process_probes():
    def search_kill_resume(c):
        folder = c.folder("p_search")
        command = [sys.executable, "search/evolve.py", *SEARCH_TINY, "--workers", "1", "--max-candidates", "6",
                   "--seed", "3", "--output-dir", str(folder)]
        log = folder / "candidates.jsonl"
        kill_when(command, lambda: log.exists() and len(log.read_text().splitlines()) >= 2, 150)
        killed_at = len(log.read_text().splitlines())
        done = sub([*command, "--resume"], timeout=300)
        if done.returncode:
            return sub_outcome(done)
        ids = [json.loads(line)["id"] for line in log.read_text().splitlines()]
        if ids != list(range(6)):
            return "DATA-LOST", f"ids after resume {ids}"
        return "correct-result", f"killed after {killed_at} records; resumed to ids 0..5, contiguous, no duplicates"
    probe("process", "search/evolve.py", "kill -9 mid-run, then --resume", 480)(search_kill_resume)

    def search_workers(c):
        folder = c.folder("p_workers")
        command = [sys.executable, "search/evolve.py", *SEARCH_TINY[:-4], "--workers", "2", "--train-steps", "400",
                   "--quality-steps", "400", "--time-budget", "5m", "--output-dir", str(folder)]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        parent = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline, workers = time.monotonic() + 150, []
            while time.monotonic() < deadline and len(workers) < 2:
                time.sleep(0.3)
                workers = children(parent.pid)
            if len(workers) < 2:
                return "HANG", "the worker pool never started"
            os.kill(parent.pid, signal.SIGKILL)
            parent.wait()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(alive(w) for w in workers):
                time.sleep(0.2)
            left = [w for w in workers if alive(w)]
            for w in left:
                os.kill(w, signal.SIGKILL)
            if left:
                return "LEAK", f"workers {left} outlived the killed search"
            return "correct-result", f"all {len(workers)} pool workers exited with the killed search"
        finally:
            if parent.poll() is None:
                parent.kill()
                parent.wait()
    probe("process", "search/evolve.py", "kill -9 of the search: do its pool workers die?", 240)(search_workers)

    def classification_kill_resume(c):
        from evonorm_core.experiment.files import load_checkpoint
        folder = c.folder("p_cls")
        command = [sys.executable, "-m", "evonorm_suite.classification.train", *CLS_TINY[:10], "--epochs", "500",
                   "--warmup-epochs", "0", "--no-progress", "--output-dir", str(folder)]
        checkpoint = folder / "checkpoint.pt"
        kill_when(command, lambda: checkpoint.exists() and load_checkpoint(checkpoint)["step"] >= 3, 150)
        killed_at = load_checkpoint(checkpoint)["step"]
        done = sub([sys.executable, "-m", "evonorm_suite.classification.train", "--resume", "--output-dir", str(folder),
                    "--max-steps", str(killed_at + 2)], timeout=200)
        if done.returncode:
            return sub_outcome(done)
        state = load_checkpoint(checkpoint)
        if state["step"] != killed_at + 2:
            return "DATA-LOST", f"resumed at step {killed_at}, ended at {state['step']}, expected {killed_at + 2}"
        return "correct-result", f"killed at step {killed_at}; resumed with the run's settings to step {state['step']}"
    probe("process", "classification.train", "kill -9 mid-run, then --resume", 400)(classification_kill_resume)

    def gan_kill_resume(c):
        from evonorm_core.experiment.files import load_checkpoint
        folder = c.folder("p_gan")
        command = [sys.executable, "-m", "evonorm_suite.gan.train_biggan", *GAN_TINY[:10], "--batch-size", "8", "--micro-batch", "8",
                   "--total-steps", "400", "--save-every", "1", "--eval-every", "0", "--sample-every", "1000",
                   "--threads", "1", "--run-dir", str(folder)]
        checkpoint = folder / "seed0" / "checkpoints" / "last.pt"
        kill_when(command, lambda: checkpoint.exists() and load_checkpoint(checkpoint)["step"] >= 3, 150)
        killed_at = load_checkpoint(checkpoint)["step"]
        done = sub([sys.executable, "-m", "evonorm_suite.gan.train_biggan", "--resume", "--run-dir", str(folder), "--total-steps",
                    str(killed_at + 2), "--threads", "1"], timeout=200)
        if done.returncode:
            return sub_outcome(done)
        state = load_checkpoint(checkpoint)
        if state["step"] != killed_at + 2 or state["config"]["channels"] != 8:
            return "DATA-LOST", f"resumed at {killed_at}, ended at {state['step']} with {state['config']['channels']} channels"
        return "correct-result", f"killed at step {killed_at}; resumed with the run's settings to step {state['step']}"
    probe("process", "gan/train_biggan.py", "kill -9 mid-run, then --resume", 400)(gan_kill_resume)

    probe("process", "search/evolve.py", "--workers 0 on a real terminal (no traceback)", 120)(
        lambda c: sub_outcome(sub([sys.executable, "search/evolve.py", "--workers", "0"]), "--workers"))
    probe("process", "python classification/train.py", "--epochs -1 on a real terminal", 120)(
        lambda c: sub_outcome(sub([sys.executable, "-m", "evonorm_suite.classification.train", "--epochs", "-1",
                                   "--output-dir", str(c.folder("x"))]), "--epochs"))


def kill_when(command: list[str], ready: Callable[[], bool], limit: float) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + limit
    try:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if ready():
                    break
            except Exception:  # noqa: BLE001 (a file being replaced right now)
                pass
            time.sleep(0.2)
        else:
            raise Outcome("HANG", f"not ready to kill within {limit:.0f} s (exit {process.poll()})")
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


GROUPS = {"layers": _layer_probes, "parser": _parser_probes, "search": _search_probes,
          "classification": _classification_probes, "gan": _gan_probes, "detection": _detection_probes,
          "tools": _tool_probes, "process": _process_probes}


# ============================================================================ driver
def run_probe(number: int, p: Probe, context: Context) -> Result:
    def alarm(signum, frame):
        raise ProbeTimeout()
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, p.limit)
    started = time.monotonic()
    try:
        outcome, message = p.run(context)
    except ProbeTimeout:
        outcome, message = "HANG", f"no answer within {p.limit:.0f} s"
    except Outcome as verdict:
        outcome, message = verdict.outcome, verdict.message
    except subprocess.TimeoutExpired as error:
        outcome, message = "HANG", f"subprocess over {error.timeout:.0f} s"
    except Exception as error:  # noqa: BLE001 (a probe's own setup failing is reported, not hidden)
        outcome, message = "TRACEBACK", f"probe setup: {type(error).__name__}: {first_line(str(error))}"
        traceback.print_exc(file=sys.stderr)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return Result(f"P{number:03d}", p.group, p.entry, p.what, outcome, message, round(time.monotonic() - started, 2))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/probe_bad_inputs.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=sorted(GROUPS), metavar="GROUP",
                        help=f"run only these groups of probes: {', '.join(GROUPS)} (default: all)")
    parser.add_argument("--json", metavar="PATH", help="also write every probe's result to this JSON file")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the in-process probes (default 1)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads < 1:
        build_parser().error(f"--threads must be >= 1, got {args.threads}")
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(args.threads)
    os.environ.setdefault("DETECTRON2_DATASETS", str(Path(tempfile.gettempdir()) / "evonorm_probe_datasets"))
    groups = args.only or list(GROUPS)
    for group in groups:
        GROUPS[group]()
    started = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="evonorm_probe_") as tmp:
        context = Context(Path(tmp))
        for number, p in enumerate(PROBES, 1):
            result = run_probe(number, p, context)
            results.append(result)
            print(f"{result.id}  {result.entry:32s} {result.what[:70]:70s} -> {result.outcome:14s} {result.message[:160]}",
                  flush=True)
    counts = {outcome: sum(r.outcome == outcome for r in results) for outcome in OUTCOMES}
    failed = len(results) - counts["clear-error"] - counts["correct-result"]
    summary = (f"{len(results)} probes in {time.monotonic() - started:.0f} s: "
               + ", ".join(f"{n} {k}" for k, n in counts.items()) + f" -> {'FAIL' if failed else 'OK'}")
    print(summary)
    if args.json:
        from evonorm_core.experiment.files import atomic_write_json
        atomic_write_json(args.json, {
            "command": command_line("python tools/probe_bad_inputs.py", argv),
            "torch": torch.__version__, "summary": summary, "counts": counts,
            "probes": [r.__dict__ for r in results],
        })
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
