"""Bad inputs at every entry point, as a careful new user would try them: each is refused with
an error that names the bad value (and, where there is a choice, what is accepted), with no
traceback, nothing of an earlier run changed and no code from a data file run; or, where
PyTorch's own layers accept the input, it gets their result.

The entry points: the layer API and the formula parser (an error worded by the suite's own
checks, not one from deep inside torch), and every command-line program through its
``main(argv)`` in this process (a real process where what the terminal shows is the point). Run
folders that a case damages are copies of one tiny run made per module.

Tested elsewhere, not repeated: layers' dtypes, eps, momentum, channel counts, empty batches and
the registry's override (test_layers_bad_inputs.py); the expression parser's errors, deep
nesting and shared subexpressions (test_search_genome.py); run folders, locks and JSONL readers
(test_experiment.py); kill -9 then ``--resume`` of the search (test_search_e2e.py), its pool
workers dying with it (test_search_runs.py) and the GAN's (test_gan_training.py).
"""
import importlib
import json
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import evonorm_core
from evonorm_core import functional as F
from evonorm_core.experiment.files import CorruptFileError, load_checkpoint, save_checkpoint
from evonorm_core.experiment.rundir import RunDir
from evonorm_core.search.expression import parse
from evonorm_core.search.genome import Genome, Node
from evonorm_suite.classification import tables, tradeoff, train
from evonorm_suite.gan import digits_classifier, evaluate
from evonorm_suite.search import compare

from .tool_scripts import load

ROOT = Path(__file__).resolve().parents[1]
NAMES_ACCEPTED = "valid names: bn_prelu, bn_relu"  # the start of every unknown-layer message's list
SEARCH_TINY = ["--anchors", "resnet50_cifar", "--image-size", "8", "--crop-size", "8", "--batch-size", "8",
               "--train-steps", "2", "--quality-steps", "1", "--quality-threshold", "0", "--stability-steps", "1",
               "--stability-batch-size", "4", "--initial-population", "1", "--mode", "S", "--threads", "1",
               "--references", "none"]
CLS_TINY = ["--model", "mobilenetv2_cifar", "--norm-act", "evonorm_s0", "--image-size", "8", "--train-subset", "16",
            "--batch-size", "16", "--warmup-epochs", "0", "--no-progress"]
GAN_TINY = ["--norm", "evonorm_b0", "--channels", "8", "--dim-z", "8", "--shared-dim", "8", "--depth", "1",
            "--batch-size", "8", "--micro-batch", "8", "--total-steps", "1", "--eval-every", "0",
            "--sample-every", "1000", "--threads", "1"]
DETECTION_DEMO = ROOT / "detection" / "configs" / "demo_shapes_evonorm_s0.yaml"


# ----------------------------------------------------------------------------- helpers
def entry(module: str):
    """The ``main`` of an entry module, ``evonorm_suite.gan.evaluate``, or of a tool, ``tools/reproduce.py``."""
    if module.startswith("tools/"):
        return load(Path(module).stem).main
    if module.startswith("evonorm_suite.detection"):
        pytest.importorskip("detectron2", reason="detectron2 is not installed (tools/install.sh installs it)")
    return importlib.import_module(module).main


def refusal(main, argv: list[str], capsys) -> str:
    """What ``main(argv)`` tells the user when it refuses: it must end with a non-zero exit
    status and a message, and print no traceback (an exception escaping ``main`` fails the test
    with that traceback). The message: the exit's text, then stderr, then stdout."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    message = (code if isinstance(code, str) else "") + "\n" + err + out
    assert code not in (0, None), f"accepted: {message[-1000:]}"
    assert "Traceback" not in message, message
    return message


def says(message: str, *fragments: str) -> None:
    missing = [f for f in fragments if f not in message]
    assert not missing, f"the message does not say {missing}: {message[-1500:]}"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of ``folder`` (the run lock aside) and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def evil_checkpoint(path: Path, marker: Path) -> None:
    """A checkpoint that creates ``marker`` if it is ever unpickled with ``weights_only=False``."""
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"model": Evil(), "step": 1, "config": Evil()}, path)


def narrowed(path: Path, key: str) -> None:
    """The checkpoint at ``path`` with the weights under ``key`` cut to width 1 (another model)."""
    state = torch.load(path, weights_only=True)
    state[key] = {k: v[:1] if v.dim() else v for k, v in state[key].items()}
    torch.save(state, path)


def truncate(path: Path, keep: int = 200) -> None:
    path.write_bytes(path.read_bytes()[:keep])


@pytest.fixture(autouse=True)
def _datasets_in_tmp(tmp_path, monkeypatch):
    """Detectron2's dataset root in the test's folder: nothing is registered or written elsewhere."""
    monkeypatch.setenv("DETECTRON2_DATASETS", str(tmp_path / "datasets"))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One tiny run of each program per module, made when first asked for: ``made("search")``."""
    runs = {}
    makers = {
        "search": lambda path: importlib.import_module("evonorm_suite.search.evolve").main(
            [*SEARCH_TINY, "--workers", "1", "--max-candidates", "3", "--seed", "1", "--output-dir", str(path)]),
        "classification": lambda path: importlib.import_module("evonorm_suite.classification.train").main(
            [*CLS_TINY, "--epochs", "2", "--max-steps", "1", "--output-dir", str(path)]),
        "gan": lambda path: importlib.import_module("evonorm_suite.gan.train_biggan").main(
            [*GAN_TINY, "--run-dir", str(path)]),
    }

    def get(kind: str) -> Path:
        if kind not in runs:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                path = tmp_path_factory.mktemp("made") / kind
                assert makers[kind](path) == 0
            finally:
                torch.set_num_threads(threads)
            runs[kind] = path
        return runs[kind]

    return get


@pytest.fixture
def run_copy(made, tmp_path, capsys):
    """A fresh copy of a made run, in this test's folder: ``run_copy("gan")``."""
    def copy(kind: str) -> Path:
        target = tmp_path / f"{kind}_copy"
        shutil.copytree(made(kind), target)
        capsys.readouterr()  # what making the run printed is not this test's output
        return target

    return copy


# ----------------------------------------------------------------------------- the layer API
LAYER_API = {
    "unknown layer name": (lambda: evonorm_core.build_norm_act("evonorm_s9", 8), KeyError,
                           ["unknown norm-act layer 'evonorm_s9'", NAMES_ACCEPTED]),
    "groups that do not divide the channels": (
        lambda: evonorm_core.build_norm_act("evonorm_s0", 8, groups=3), ValueError,
        ["num_channels=8 is not divisible by groups=3", "use one of [1, 2, 4, 8] or groups=None"]),
    "an option the layer does not take": (
        lambda: evonorm_core.build_norm_act("evonorm_s0", 8, grups=8), ValueError,
        ["does not take option(s) ['grups']", "accepted: ['affine', 'device', 'dtype', 'eps', 'groups', 'impl']"]),
    "int32 input to bn_relu": (
        lambda: evonorm_core.build_norm_act("bn_relu", 8)(torch.ones(2, 8, 4, 4, dtype=torch.int32)), ValueError,
        ["expects a real floating-point input (float16, bfloat16, float32 or float64), got dtype torch.int32"]),
    "3-D input (N, C, L)": (lambda: evonorm_core.build_norm_act("evonorm_s0", 8)(torch.randn(2, 8, 4)), ValueError,
                            ["expects an NCHW tensor (4 dims), got shape (2, 8, 4)"]),
    "functional.evonorm_s: groups=3 for 8 channels": (
        lambda: F.evonorm_s(torch.randn(2, 8, 4, 4), None, None, None, groups=3, eps=1e-5), ValueError,
        ["groups must be a positive int dividing the 8 channels, got 3"]),
    "functional.evonorm_s: eps=nan": (
        lambda: F.evonorm_s(torch.randn(2, 8, 4, 4), None, None, None, groups=4, eps=math.nan), ValueError,
        ["eps must be a finite positive number, got nan"]),
    "functional.evonorm_s: v1 of shape (7,)": (
        lambda: F.evonorm_s(torch.randn(2, 8, 4, 4), None, None, torch.ones(7), groups=4, eps=1e-5), ValueError,
        ["v1 must be None or (8,), got shape (7,)"]),
    "convert_norm_act: a BatchNorm1d": (
        lambda: evonorm_core.convert_norm_act(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)), "evonorm_b0"),
        ValueError, ["'1' is a BatchNorm1d", "only nn.BatchNorm2d is converted"]),
    "convert_norm_act: a BatchNorm3d": (
        lambda: evonorm_core.convert_norm_act(nn.Sequential(nn.Conv3d(3, 8, 1), nn.BatchNorm3d(8)), "evonorm_s0"),
        ValueError, ["'1' is a BatchNorm3d", "only nn.BatchNorm2d is converted"]),
    "convert_norm_act: unknown layer name": (
        lambda: evonorm_core.convert_norm_act(nn.Sequential(nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8)), "nope"),
        KeyError, ["unknown norm-act layer 'nope'", NAMES_ACCEPTED]),
}


@pytest.mark.parametrize("case", LAYER_API)
def test_the_layer_api_refuses_naming_the_bad_value(case):
    call, error, fragments = LAYER_API[case]
    with pytest.raises(error) as info:
        call()
    says(str(info.value), *fragments)


def test_nan_in_the_input_propagates_as_in_pytorchs_norms():
    x = torch.randn(2, 8, 4, 4)
    x[0, 0, 0, 0] = math.nan
    out = evonorm_core.build_norm_act("evonorm_s0", 8)(x)
    reference = nn.GroupNorm(8, 8)(x)
    assert torch.isnan(out[0]).any() and torch.isnan(reference[0]).any()
    assert torch.isfinite(out[1]).all()  # the other sample's groups do not see it


# ----------------------------------------------------------------------------- the formula parser
def test_a_hundred_thousand_nested_parentheses_parse_to_one_node():
    assert parse("(" * 100_000 + "x * v1" + ")" * 100_000) == Genome((Node("mul", (0, 3)),))


PARSER = {
    "deep nesting over max_nodes": (lambda: parse("sigmoid(" * 10_000 + "x" + ")" * 10_000, max_nodes=10),
                                    ["max_nodes=10"]),
    "unbalanced parenthesis": (lambda: parse("sigmoid(x"), ["'sigmoid(x' at column 9: expected ')' to close"]),
    "not a string": (lambda: parse(None), ["a layer expression must be a string, got NoneType"]),
    "a node reading a later node": (lambda: Genome((Node("add", (0, 5)), Node("mul", (0, 4)))),
                                    ["node 4: inputs (0, 5) must be earlier nodes (0..3)"]),
    "an unknown op": (lambda: Genome((Node("relu6", (0,)),)), ["node 4: unknown op 'relu6'; accepted: ['abs', 'add'"]),
}


@pytest.mark.parametrize("case", PARSER)
def test_the_parser_and_genomes_refuse_naming_the_bad_input(case):
    call, fragments = PARSER[case]
    with pytest.raises(ValueError) as info:
        call()
    says(str(info.value), *fragments)


# ----------------------------------------------------------------------------- command-line flags
EVOLVE, REPORT, RERANK = "evonorm_suite.search.evolve", "evonorm_suite.search.report", "evonorm_suite.search.rerank"
COMPARE, CALIBRATE = "evonorm_suite.search.compare", "evonorm_suite.search.calibrate"
TRAIN, TABLES = "evonorm_suite.classification.train", "evonorm_suite.classification.tables"
TRADEOFF = "evonorm_suite.classification.tradeoff"
BIGGAN, GAN_REPORT, TABLE5 = "evonorm_suite.gan.train_biggan", "evonorm_suite.gan.report", "evonorm_suite.gan.table5"
TRAIN_NET, MINIATURE = "evonorm_suite.detection.train_net", "evonorm_suite.detection.miniature"
COST, SHAPES, DET_REPORT = "evonorm_suite.detection.cost", "evonorm_suite.detection.shapes", "evonorm_suite.detection.report"
GAN_EVALUATE = "evonorm_suite.gan.evaluate"
# (program, flags, what the error must say); an output folder of the test's own is added where the
# program takes one ({out}: the flag's value)
FLAGS = [
    (EVOLVE, ["--workers", "0"], ["--workers must be >= 1, got 0"]),
    (EVOLVE, ["--time-budget", "nan"], ["--time-budget must be a finite number, got nan"]),
    (EVOLVE, ["--time-budget=-5m"], ["--time-budget must be > 0, got -300.0"]),
    (EVOLVE, ["--max-candidates", "-1"], ["--max-candidates must be >= 0, got -1"]),
    (EVOLVE, ["--quality-threshold", "5"], ["--quality-threshold must be >= 0 and <= 1, got 5.0"]),
    (EVOLVE, ["--lr", "-1"], ["--lr must be > 0, got -1.0"]),
    (EVOLVE, ["--anchors", "vgg"],
     ["--anchors must be one of resnet50_cifar, mobilenetv2_cifar, efficientnet_cifar, got 'vgg'"]),
    (EVOLVE, ["--mode", "Q"], ["unknown search mode 'Q'; accepted: B, S"]),
    (EVOLVE, ["--batch-size", "abc"], ["argument --batch-size: invalid int value: 'abc'"]),
    (EVOLVE, ["--references", "bn"], ["--references must be one of bn_relu, evonorm_b0", "none, got 'bn'"]),
    (EVOLVE, ["--data", "cifar10"], ["--data cifar10 (the paper's proxy) needs --data-dir", "cifar-10-python.tar.gz",
                                     "--data mnist"]),
    (EVOLVE, ["--backend", "ray", "--workers", "-2"], ["--workers must be >= 1, got -2"]),
    (REPORT, ["--top", "0", "{tmp}"], ["--top must be >= 1, got 0"]),
    (REPORT, ["{tmp}/nothing"], ["no search checkpoint checkpoint.json in", "nothing'"]),
    (RERANK, ["--top", "0", "{tmp}/r"], ["--top must be >= 1, got 0"]),
    (RERANK, ["{tmp}/r", "--seeds", "-1"], ["seeds must be in 0..2147483647, got -1"]),
    (RERANK, ["{tmp}/r", "--seeds", "1", "1"], ["--seeds repeats 1: each value counts once"]),
    (RERANK, ["{tmp}/r_none"], ["no search checkpoint checkpoint.json in", "r_none'"]),
    (COMPARE, ["--max-candidates", "0", "--output-dir", "{tmp}/cmp"], ["--max-candidates must be >= 1, got 0"]),
    (COMPARE, ["--max-candidates", "1", "--lr", "-1", "--output-dir", "{tmp}/out"], ["--lr must be > 0, got -1.0"]),
    (COMPARE, ["--max-candidates", "1", "--seeds", "0", "0", "--output-dir", "{tmp}/out"],
     ["--seeds repeats 0: each value counts once"]),
    (CALIBRATE, ["--json", "{tmp}/cal.json", "--random", "-1"], ["--random must be in 0..1000, got -1"]),
    (CALIBRATE, ["--json", "{tmp}/cal.json", "--margin", "nan"], ["--margin must be in [0, 1], got nan"]),
    (CALIBRATE, ["--json", "{tmp}/cal.json", "--curve", "0"], ["--curve must be steps >= 1, got [0]"]),
    (EVOLVE, ["--image-size", "4", "--crop-size", "4"], ["--image-size must be >= 8, got 4"]),
    (EVOLVE, ["--data", "mnist", "--batch-size", "4001"],
     ["--batch-size must be <= the 4,000 training images of --data mnist, got 4001"]),
    (CALIBRATE, ["--json", "{tmp}/cal.json", "--data", "mnist", "--stability-batch-size", "4001"],
     ["--stability-batch-size must be <= the 4,000 training images of --data mnist, got 4001"]),
    (EVOLVE, ["--ray-address", "auto"], ["--ray-address auto joins a Ray cluster: it needs --backend ray, got --backend "
                                         "local"]),
    (CALIBRATE, ["--json", "{tmp}/cal.json", "--workers", "8"], ["unrecognized arguments: --workers 8"]),
    (CALIBRATE, ["--json", "{tmp}/cal.json", "--seeds", str(2**70)], ["seeds must be in 0..2147483647"]),
    (CALIBRATE, ["--json", "{tmp}"], ["is a folder; give a file path"]),
    (CALIBRATE, ["--json", "{tmp}/cal.json", "--batch-size", "0"], ["--batch-size must be >= 1, got 0"]),
    (TRAIN, ["--epochs", "-1"], ["--epochs must be > 0, got -1.0"]),
    (TRAIN, ["--base-lr", "-1"], ["--base-lr must be > 0, got -1.0"]),
    (TRAIN, ["--batch-size", "0"], ["--batch-size must be >= 1, got 0"]),
    (TRAIN, ["--norm-act", "nope"], ["--norm-act: unknown norm-act layer 'nope'", NAMES_ACCEPTED]),
    (TRAIN, ["--model", "nope"], ["--model must be one of resnet50, resnet101, mobilenetv2", "got 'nope'"]),
    (TRAIN, ["--holdout-fraction", "1.5"], ["--holdout-fraction must be >= 0 and < 1, got 1.5"]),
    (TRAIN, ["--width-multiplier", "nan"], ["--width-multiplier must be a finite number, got nan"]),
    (TRAIN, ["--table", "table99"], ["--table must be one of table2, table3", "got 'table99'"]),
    (TRAIN, ["--max-steps", "-3"], ["--max-steps must be >= 1, got -3"]),
    (TRAIN, ["--randaugment"], ["--holdout-fraction and --randaugment are ImageNet's (--data imagenet); --data digits"]),
    (TRAIN, ["--batch-size", "5000"], ["batch size 5000 x 1 workers exceeds the 1438 training images"]),
    (TABLES, ["run", "table3", "--scale", "mini", "--models", "nope", "--runs-dir", "{tmp}/t", "--dry-run"],
     ["--models nope: not in this table; accepted: resnet50, mobilenetv2"]),
    (TABLES, ["run", "table3", "--scale", "mini", "--layers", "nope", "--runs-dir", "{tmp}/t", "--dry-run"],
     ["--layers nope: not in this table; accepted: bn_relu, gn_relu"]),
    (TABLES, ["run", "table99", "--dry-run"], ["argument table: invalid choice: 'table99' (choose from"]),
    (TABLES, ["run", "table3", "--scale", "mini", "--dry-run", "--seeds", "-1", "--runs-dir", "{tmp}/out"],
     ["seeds must be in 0..2147483647, got -1"]),
    (TABLES, ["run", "table3", "--models", "resnet50", "--layers", "bn_relu", "--batches", "4", "--data-dir",
              "{tmp}/none", "--runs-dir", "{tmp}/out"], ["ImageNet not found: missing", "none/train"]),
    (TABLES, ["run", "table3", "--layers", "bn_relu", "--batches", "4", "--data-dir", "{tmp}", "--runs-dir", "{tmp}/out"],
     ["mobilenetv2 train on several nodes of 8 GPUs", "run each printed command on every node"]),
    (TABLES, ["report", "table3", "{tmp}/none"], ["runs directory", "none' does not exist"]),
    (TRADEOFF, ["plot", "{tmp}/none"], ["runs directory", "none' does not exist"]),
    (TRADEOFF, ["plot", "{tmp}"], ["no finished run in", "<layer>/w<width>/result.json"]),
    (BIGGAN, ["--total-steps", "-5"], ["--total-steps must be >= 1, got -5"]),
    (BIGGAN, ["--norm", "nope"], ["--norm: unknown norm-act layer 'nope'", NAMES_ACCEPTED]),
    (BIGGAN, ["--channels", "12"], ["--channels must be a multiple of 8 (self-attention uses channels / 8), got 12"]),
    (BIGGAN, ["--ema-decay", "1"], ["--ema-decay must be >= 0 and < 1, got 1.0"]),
    (BIGGAN, ["--g-lr", "nan"], ["--g-lr must be a finite number, got nan"]),
    (TABLES, ["run", "table3", "--scale", "mini", "--models", "resnet50", "--layers", "bn_relu", "--seeds", "0",
              "--batches", "1000", "--runs-dir", "{tmp}/g"],
     ["--batches 1000: 8 workers x 1000 images = 8000 is more than the 4000 training images of --data mnist"]),
    (BIGGAN, ["--attention", "64"], ["--attention 64: not the resolution of a stage at 16 px; accepted: 8 16 (none: no "
                                     "attention)"]),
    (BIGGAN, ["--seed", "4294967296"], ["--seed must be >= 0 and <= 2147483647, got 4294967296"]),
    (TRAIN, ["--seed", "99999999999999999999999"], ["--seed must be >= 0 and <= 2147483647, got 99999999999999999999999"]),
    (EVOLVE, ["--seed", "4294967296"], ["--seed must be >= 0 and <= 2147483647, got 4294967296"]),
    (BIGGAN, ["--batch-size", "2000", "--micro-batch", "2000", "--threads", "1"],
     ["--micro-batch 2000 is more than the dataset (1438 images of digits): give a smaller --micro-batch"]),
    (BIGGAN, ["--seeds", "0"], ["--seeds must be >= 1, got 0"]),
    (BIGGAN, ["--batch-size", "8", "--micro-batch", "3"],
     ["--batch-size 8 is not a multiple of --micro-batch x processes = 3 x 1"]),
    (BIGGAN, ["--betas", "0.5"], ["--betas takes two values, got (0.5,)"]),
    (GAN_REPORT, ["{tmp}/none"], ["no metrics.json under", "run gan/evaluate.py on the runs first"]),
    (TABLE5, ["--steps", "-1", "--report-only"], ["--steps must be >= 4, got -1"]),
    (TABLE5, ["--jobs", "0", "--report-only"], ["--jobs must be >= 1, got 0"]),
    (TABLE5, ["--seeds", "1", "1", "--report-only"], ["--seeds repeats 1: each value counts once"]),
    (TABLE5, ["--layers", "nope"], ["argument --layers: invalid choice: 'nope' (choose from 'bn_relu'"]),
    (TRAIN_NET, ["--config", "{tmp}/none.yaml"], ["--config FILE is required and must exist, got", "none.yaml'"]),
    (TRAIN_NET, ["--config", str(DETECTION_DEMO), "SOLVER.MAX_ITER", "abc"],
     ["Type mismatch", "(300 vs. abc) for config key: SOLVER.MAX_ITER"]),
    (TRAIN_NET, ["--config", str(DETECTION_DEMO), "MODEL.NORM_ACT.GROUPS", "5", "OUTPUT_DIR", "{tmp}/out"],
     ["MODEL.NORM_ACT", "does not fit the model's layers: num_channels=32 is not divisible by groups=5"]),
    (TRAIN_NET, ["--config", str(DETECTION_DEMO), "MODEL.NORM_ACT.NAME", "nope", "OUTPUT_DIR", "{tmp}/out"],
     ["bad MODEL.NORM_ACT (NAME='nope'", NAMES_ACCEPTED]),
    (TRAIN_NET, ["--config", str(DETECTION_DEMO), "SOLVER.MAX_ITER", "0", "OUTPUT_DIR", "{tmp}/out"],
     ["SOLVER.MAX_ITER must be >= 1, got 0"]),
    (TRAIN_NET, ["--config", str(DETECTION_DEMO), "--threads", "-1"], ["--threads must be >= 0 (0: torch's default)"]),
    (TRAIN_NET, ["--config", str(DETECTION_DEMO), "--eval-only", "OUTPUT_DIR", "{tmp}/out"],
     ["--eval-only needs weights: MODEL.WEIGHTS is not set and OUTPUT_DIR {tmp}/out holds no checkpoint"]),
    (TRAIN_NET, ["--config", str(DETECTION_DEMO), "SEED", "4294967296", "OUTPUT_DIR", "{tmp}/out"],
     ["SEED must be -1 (random) or in 0..4294967295, got 4294967296"]),
    (TRAIN_NET, ["--config", str(DETECTION_DEMO), "SOLVER.CHECKPOINT_PERIOD", "0", "OUTPUT_DIR", "{tmp}/out"],
     ["SOLVER.CHECKPOINT_PERIOD must be >= 1, got 0"]),
    (TRAIN_NET, ["--config", str(DETECTION_DEMO), "SOLVER.BASE_LR", "-0.1", "OUTPUT_DIR", "{tmp}/out"],
     ["SOLVER.BASE_LR must be > 0, got -0.1"]),
    (TRAIN_NET, ["--config", str(DETECTION_DEMO), "SOLVER.STEPS", "(4, 4)", "OUTPUT_DIR", "{tmp}/out"],
     ["SOLVER.STEPS must be positive and increase strictly, got (4, 4)"]),
    (COST, ["--config", str(DETECTION_DEMO), "MODEL.BAR", "1"], ["Non-existent key: MODEL.BAR"]),
    (COST, ["--config", "{tmp}/none.yaml"], ["config file", "none.yaml' does not exist"]),
    (COST, ["--config", str(DETECTION_DEMO), "--threads", "-1"], ["--threads must be >= 0, got -1"]),
    (SHAPES, ["--size", "0", "--root", "{tmp}/out"], ["--size must be >= 32, got 0"]),
    (GAN_EVALUATE, ["{tmp}", "--num-samples", "9"], ["argument --num-samples: must be >= 10, got 9"]),
    (GAN_EVALUATE, ["{tmp}", "--cache-root", str(ROOT / "README.md" / "cache")], ["argument --cache-root:", "is a file"]),
    (GAN_EVALUATE, ["{tmp}", "--seed", "-1"], ["argument --seed: seeds must be in 0..2147483647, got -1"]),
    (BIGGAN, ["--norm", "gn_relu", "--groups", "3"], ["not divisible by groups=3"]),
    (MINIATURE, ["--iterations", "0", "--runs-dir", "{tmp}/m"], ["--iterations must be >= 1, got 0"]),
    (MINIATURE, ["--seeds", "-1", "--runs-dir", "{tmp}/m"], ["argument --seeds: seeds must be in 0..2147483647, got -1"]),
    (MINIATURE, ["--seeds", "0", "0", "--runs-dir", "{tmp}/m"], ["--seeds repeats 0: each value counts once"]),
    (MINIATURE, ["--layers", "bn", "bn", "--runs-dir", "{tmp}/m"], ["--layers repeats bn: each value counts once"]),
    (MINIATURE, ["--layers", "nope", "--runs-dir", "{tmp}/m"],
     ["argument --layers: invalid choice: 'nope' (choose from 'bn'"]),
    ("tools/reproduce.py", ["--only", "table3", "--layers", "foo", "--dry-run"],
     ["--layers foo: not a row of Table 2 or 3; accepted: bn_relu"]),
    ("tools/reproduce.py", ["--only", "table9", "--dry-run"],
     ["argument --only: invalid choice: 'table9' (choose from 'table2', 'table3', 'table4', 'table5', 'fig10')"]),
    ("tools/benchmark_layers.py", ["--shapes", "2x8x4", "--no-model", "--no-timm"],
     ["shape '2x8x4' is not NxCxHxW with positive integers"]),
    ("tools/benchmark_layers.py", ["--reps", "0", "--no-model"], ["--reps must be at least 1, got 0"]),
    ("tools/benchmark_layers.py", ["--dtype", "int8"], ["argument --dtype: invalid choice: 'int8' (choose from"]),
    ("tools/benchmark_layers.py", ["--threads", "-1", "--no-model"], ["--threads must be at least 1, got -1"]),
    ("tools/benchmark_layers.py", ["--device", "nonsense", "--no-model"], ["--device 'nonsense' is not a torch device"]),
    ("tools/check_capture.py", ["--layers", "nope", "--checks", "fx"],
     ["--layers: 'nope' is not a registered layer; accepted: bn_prelu, bn_relu"]),
    ("tools/check_capture.py", ["--batch", "0", "--checks", "fx"], ["--batch must be at least 1, got 0"]),
    # output files that cannot be written are refused before the measuring, not after it
    ("tools/benchmark_layers.py", ["--json", "{tmp}/none/b.json", "--no-model"],
     ["argument --json: folder '{tmp}/none' of '{tmp}/none/b.json' does not exist"]),
    ("tools/benchmark_layers.py", ["--plot", "{tmp}", "--no-model"], ["argument --plot: '{tmp}' is a folder; give a file"]),
    ("tools/check_capture.py", ["--json", "{tmp}/none/c.json", "--checks", "fx"],
     ["argument --json: folder '{tmp}/none' of '{tmp}/none/c.json' does not exist"]),
    ("tools/benchmark_timm.py", ["--json", "{tmp}"], ["argument --json: '{tmp}' is a folder; give a file path"]),
    ("tools/benchmark_layers.py", ["--model-batch", "0"], ["argument --model-batch: must be >= 1, got 0"]),
    ("tools/check_capture.py", ["--backend", "foo", "--checks", "fx"], ["argument --backend: invalid choice: 'foo'"]),
]
OUTPUT_FLAG = {EVOLVE: "--output-dir", TRAIN: "--output-dir", BIGGAN: "--run-dir"}


def case_id(program: str, flags: list[str]) -> str:
    name = Path(program).stem if program.endswith(".py") else program.rsplit(".", 1)[-1]
    return " ".join([name, *flags]).replace("{tmp}", "DIR").replace(f"{ROOT}/", "")


@pytest.mark.parametrize("program,flags,fragments", FLAGS, ids=[case_id(p, f) for p, f, _ in FLAGS])
def test_a_bad_flag_is_refused_naming_it_and_what_is_accepted(program, flags, fragments, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in flags]
    if program in OUTPUT_FLAG:
        argv += [OUTPUT_FLAG[program], str(tmp_path / "out")]
    says(refusal(entry(program), argv, capsys), *(f.replace("{tmp}", str(tmp_path)) for f in fragments))
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.parametrize("program,flags", [
    (TRAIN, ["--output-dir", "{file}/run", "--max-steps", "1"]),
    (EVOLVE, ["--output-dir", "{file}/run"]),
    (COMPARE, ["--max-candidates", "1", "--output-dir", "{file}/run"]),
    (TABLES, ["run", "table3", "--scale", "mini", "--models", "resnet50", "--layers", "bn_relu", "--batches", "4",
              "--seeds", "0", "--runs-dir", "{file}/run"]),
    (TABLES, ["report", "table3", "{tmp}", "--png", "{file}/t.png"]),
    (TRADEOFF, ["plot", "{tmp}", "--png", "{file}/f.png"]),
    (REPORT, ["{tmp}", "--plot", "{file}/p.png"]),
    (BIGGAN, ["--run-dir", "{file}/run", *GAN_TINY]),
    (GAN_REPORT, ["{tmp}", "--plot", "{file}/p.png"]),
    (TABLE5, ["--report-only", "--out", "{file}/out"]),
    (TABLE5, ["--report-only", "--runs-dir", "{file}/runs"]),
    (MINIATURE, ["--report-only", "--runs-dir", "{tmp}", "--out", "{file}/out"]),
    (MINIATURE, ["--report-only", "--runs-dir", "{file}/runs"]),
    (DET_REPORT, ["{tmp}", "--plot", "{file}/p.png"]),
    (SHAPES, ["--root", "{file}/shapes"]),
], ids=lambda v: v.rsplit(".", 1)[-1] if isinstance(v, str) else " ".join(v[:2]))
def test_an_output_path_under_a_file_is_refused_naming_it(program, flags, tmp_path, capsys):
    file = tmp_path / "file"
    file.write_text("")
    argv = [a.replace("{file}", str(file)).replace("{tmp}", str(tmp_path)) for a in flags]
    says(refusal(entry(program), argv, capsys), f"{file}")


@pytest.mark.parametrize("script,flags,message", [
    ("search/evolve.py", ["--workers", "0"], "--workers must be >= 1, got 0"),
    ("classification/train.py", ["--epochs", "-1"], "--epochs must be > 0, got -1.0"),
])
def test_a_bad_flag_on_a_real_terminal_is_one_error_line(script, flags, message, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, script, *flags, "--output-dir", str(tmp_path / "out")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert message in done.stderr and "Traceback" not in done.stderr + done.stdout


# ----------------------------------------------------------------------------- output folders
PROGRAM_FOLDERS = {  # program, the arguments that start a run in a folder
    "search": (EVOLVE, [*SEARCH_TINY, "--max-candidates", "1", "--output-dir"]),
    "classification": (TRAIN, [*CLS_TINY, "--epochs", "2", "--max-steps", "1", "--output-dir"]),
    "gan": (BIGGAN, [*GAN_TINY, "--run-dir"]),
    "detection": (TRAIN_NET, ["--config", str(DETECTION_DEMO), "OUTPUT_DIR"]),
}


@pytest.mark.parametrize("kind", PROGRAM_FOLDERS)
def test_a_folder_holding_an_earlier_run_is_refused_and_left_as_it_was(kind, tmp_path, capsys):
    program, argv = PROGRAM_FOLDERS[kind]
    folder = tmp_path / "earlier"
    run_folder = folder / "seed0" if kind == "gan" else folder
    run_folder.mkdir(parents=True)
    (run_folder / "candidates.jsonl").write_text('{"id": 0}\n')
    before = snapshot(folder)
    message = refusal(entry(program), [*argv, str(folder)], capsys)
    says(message, f"output folder '{run_folder}' is not empty (candidates.jsonl); pass --resume")
    assert snapshot(folder) == before


@pytest.mark.parametrize("kind", PROGRAM_FOLDERS)
def test_a_folder_another_process_holds_is_refused(kind, tmp_path, capsys):
    program, argv = PROGRAM_FOLDERS[kind]
    folder = tmp_path / "held"
    held = RunDir(folder / "seed0" if kind == "gan" else folder, resume=True)
    try:
        resume = ["--resume"] if kind == "detection" else []
        message = refusal(entry(program), [*resume, *argv, str(folder)], capsys)
    finally:
        held.close()
    says(message, f"is in use by process {os.getpid()}; two runs cannot write one folder")


GRID_FOLDERS = {  # grid, the arguments that start it in a folder (one small cell each)
    "table5": (TABLE5, ["--seeds", "0", "--layers", "bn_relu", "--runs-dir"]),
    "detection miniature": (MINIATURE, ["--seeds", "0", "--layers", "gn", "--settings", "batch8",
                                        "--iterations", "1", "--runs-dir"]),
    "fig10": (COMPARE, ["--max-candidates", "1", "--seeds", "0", "--output-dir"]),
    "table3 mini": (TABLES, ["run", "table3", "--scale", "mini", "--seeds", "0", "--batches", "4", "--layers",
                             "bn_relu", "--runs-dir"]),
}


@pytest.mark.parametrize("grid", GRID_FOLDERS)
def test_a_grid_folder_another_grid_holds_is_refused(grid, tmp_path, capsys, monkeypatch):
    """Two grids started on one folder: the second says which process holds it, with no traceback."""
    classifier = tmp_path / "classifier.pt"  # table5 pins one first; an untrained one spares the training
    save_checkpoint(classifier, {"model": digits_classifier.DigitsClassifier().state_dict(), "resolution": 16})
    monkeypatch.setattr(digits_classifier, "weights_file", lambda resolution: classifier)
    program, argv = GRID_FOLDERS[grid]
    folder = tmp_path / "held"
    held = RunDir(folder, resume=True)
    try:
        message = refusal(entry(program), [*argv, str(folder)], capsys)
    finally:
        held.close()
    says(message, f"is in use by process {os.getpid()}; two runs cannot write one folder")


# ----------------------------------------------------------------------------- resuming damaged runs
def search_resume(folder: Path, *extra: str) -> list[str]:
    return ["--resume", "--output-dir", str(folder), "--max-candidates", "4", *extra]


SEARCH_DAMAGE = {
    "checkpoint.json truncated": (lambda f: truncate(f / "checkpoint.json", 30), [],
                                  ["checkpoint.json' is not valid JSON", "Restore it or delete the run folder"]),
    "candidates.jsonl cut mid-line": (lambda f: (f / "candidates.jsonl").write_text(
        (f / "candidates.jsonl").read_text()[:-40]), [], ["candidates.jsonl', line 3: not valid JSON",
                                                          "Delete that line and what follows it, then resume"]),
    "config.json of another program": (lambda f: (f / "config.json").write_text('{"model": "resnet50"}'), [],
                                       ["unknown setting(s) ['model'] for SearchConfig in", "config.json"]),
    "a setting fixed by the run": (lambda f: None, ["--mode", "B"],
                                   ["--mode cannot change when resuming: the run was started with S, got B"]),
    "checkpoint.json with a population id never proposed": (
        lambda f: edit_json(f / "checkpoint.json", population=[999]), [],
        ["checkpoint.json' does not hold a search's state (KeyError: 999)", "delete the run folder"]),
    "checkpoint.json with a count that is no integer": (
        lambda f: edit_json(f / "checkpoint.json", logged="2"), [],
        ["checkpoint.json'", "must be integers >= 0"]),
}


def edit_json(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


@pytest.mark.parametrize("case", SEARCH_DAMAGE)
def test_search_resume_of_a_damaged_or_other_run_names_the_file_or_setting(case, run_copy, capsys):
    damage, extra, fragments = SEARCH_DAMAGE[case]
    folder = run_copy("search")
    damage(folder)
    says(refusal(entry(EVOLVE), search_resume(folder, *extra), capsys), *fragments)


def test_search_resume_of_a_folder_with_no_run(tmp_path, capsys):
    message = refusal(entry(EVOLVE), ["--resume", "--output-dir", str(tmp_path / "none")], capsys)
    says(message, f"no run of search/evolve.py in '{tmp_path / 'none'}': the folder does not exist")
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("kind", PROGRAM_FOLDERS)
def test_resume_into_another_commands_run_folder_is_refused_saying_what_it_is(kind, run_copy, tmp_path, capsys):
    """--resume needs a run of the same command there: another command's run folder is refused, named, untouched."""
    program, _ = PROGRAM_FOLDERS[kind]
    other, made_by = ("search", "search/evolve.py") if kind == "classification" else \
        ("classification", "classification/train.py")
    root = tmp_path / "root"
    target = root / "seed0" if kind == "gan" else root  # the GAN resumes the seed<k> runs in its folder
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(run_copy(other), target)
    before = snapshot(root)
    flags = {"search": ["--output-dir", str(root)], "classification": ["--output-dir", str(root)],
             "gan": ["--run-dir", str(root)], "detection": ["--config", str(DETECTION_DEMO), "OUTPUT_DIR", str(root)]}
    message = refusal(entry(program), ["--resume", *flags[kind]], capsys)
    says(message, f"in '{target}': it is a run folder of {made_by}")
    assert snapshot(root) == before


def test_search_report_names_the_line_a_cut_log_ends_on(run_copy, tmp_path, capsys):
    folder = run_copy("search")
    log = folder / "candidates.jsonl"
    log.write_text(log.read_text()[:-25])
    message = refusal(entry(REPORT), [str(folder), "--plot", str(tmp_path / "p.png")], capsys)
    says(message, f"search log '{log}', line 3: not valid JSON")


CLASSIFICATION_DAMAGE = {
    "checkpoint.pt truncated": (lambda f: truncate(f / "checkpoint.pt"), [],
                                ["checkpoint.pt' is truncated or not a PyTorch checkpoint"]),
    "checkpoint.pt of another width": (lambda f: narrowed(f / "checkpoint.pt", "model"), [],
                                       ["checkpoint.pt' does not fit this run", "use another --output-dir or delete"]),
    "config.json not JSON": (lambda f: (f / "config.json").write_text("{model: "), [],
                             ["config.json' is not valid JSON", "Restore it or delete the run folder"]),
    "a setting fixed by the run": (lambda f: None, ["--norm-act", "bn_relu"],
                                   ["--norm-act cannot change when resuming: the run was started with evonorm_s0",
                                    "got bn_relu"]),
}


@pytest.mark.parametrize("case", CLASSIFICATION_DAMAGE)
def test_classification_resume_of_a_damaged_or_other_run_names_the_file_or_setting(case, run_copy, capsys):
    damage, extra, fragments = CLASSIFICATION_DAMAGE[case]
    folder = run_copy("classification")
    damage(folder)
    argv = ["--resume", "--output-dir", str(folder), "--max-steps", "2", *extra]
    says(refusal(entry(TRAIN), argv, capsys), *fragments)


def test_a_moved_classification_run_resumes_where_it_lies(run_copy, tmp_path):
    moved = tmp_path / "moved"
    shutil.move(run_copy("classification"), moved)
    assert train.main(["--resume", "--output-dir", str(moved), "--max-steps", "2"]) == 0
    assert load_checkpoint(moved / "checkpoint.pt")["step"] == 2
    assert json.loads((moved / "config.json").read_text())["output_dir"] == str(moved)


def test_classification_names_a_checkpoint_whose_rng_state_is_not_one(run_copy):
    folder = run_copy("classification")
    state = load_checkpoint(folder / "checkpoint.pt")
    save_checkpoint(folder / "checkpoint.pt", {**state, "rng": [1, 2, 3]})
    with pytest.raises(SystemExit, match=r"checkpoint.pt' does not fit this run \(.*\); it was written by another"):
        train.main(["--resume", "--output-dir", str(folder), "--max-steps", "2"])


def test_classification_refuses_a_checkpoint_that_would_run_code(run_copy, tmp_path):
    folder, marker = run_copy("classification"), tmp_path / "pwned"
    evil_checkpoint(folder / "checkpoint.pt", marker)
    with pytest.raises(SystemExit, match=r"checkpoint.pt' holds Python objects .* refused"):
        train.main(["--resume", "--output-dir", str(folder), "--max-steps", "2"])
    assert not marker.exists()


GAN_DAMAGE = {
    "last.pt truncated": (truncate, ["last.pt' is truncated or not a PyTorch checkpoint"]),
    "last.pt of another width": (lambda p: narrowed(p, "G"),
                                 ["last.pt' does not fit this run", "written with another layer, width or resolution"]),
}


@pytest.mark.parametrize("case", GAN_DAMAGE)
def test_gan_resume_of_a_damaged_checkpoint_names_it(case, run_copy, capsys):
    damage, fragments = GAN_DAMAGE[case]
    folder = run_copy("gan")
    damage(folder / "seed0" / "checkpoints" / "last.pt")
    argv = ["--resume", "--run-dir", str(folder), "--total-steps", "2"]
    says(refusal(entry(BIGGAN), argv, capsys), *fragments)


@pytest.mark.parametrize("line", ['{"loss_d": 1.0}', "[1]", '{"step": "7"}'])
def test_gan_resume_names_a_training_log_line_without_a_step(line, run_copy, capsys):
    folder = run_copy("gan")
    log = folder / "seed0" / "log.jsonl"
    log.write_text(log.read_text() + line + "\n")
    argv = ["--resume", "--run-dir", str(folder), "--total-steps", "2"]
    says(refusal(entry(BIGGAN), argv, capsys), f"training log '{log}', line 2: not a record with an integer step")


def test_gan_names_a_prepared_array_file_it_cannot_read(tmp_path, capsys):
    (tmp_path / "junk.npz").write_bytes(bytes(range(256)) * 2)
    np.savez(tmp_path / "no_imgs.npz", x=np.zeros(3))
    for name, reason in (("junk.npz", "Cannot load file containing pickled data"),
                         ("no_imgs.npz", "imgs is not a file in the archive")):
        argv = ["--dataset", "array", "--data-root", str(tmp_path / name), "--run-dir", str(tmp_path / "out")]
        says(refusal(entry(BIGGAN), argv, capsys),
             f"array dataset '{tmp_path / name}' is not a prepared file with arrays 'imgs' and 'labels'", reason)
    assert not (tmp_path / "out").exists()


def test_gan_resume_with_fewer_total_steps_than_done_is_refused(tmp_path, capsys):
    """A run at step 2 resumed with --total-steps 1 would train nothing and say nothing."""
    assert entry(BIGGAN)([*GAN_TINY, "--total-steps", "2", "--run-dir", str(tmp_path / "run")]) == 0
    says(refusal(entry(BIGGAN), ["--resume", "--run-dir", str(tmp_path / "run"), "--total-steps", "1"], capsys),
         "--total-steps 1 is below step 2", "give --total-steps 2 or more")


def test_gan_resume_refuses_a_checkpoint_that_would_run_code(run_copy, tmp_path, capsys):
    folder, marker = run_copy("gan"), tmp_path / "pwned"
    evil_checkpoint(folder / "seed0" / "checkpoints" / "last.pt", marker)
    message = refusal(entry(BIGGAN), ["--resume", "--run-dir", str(folder), "--total-steps", "2"], capsys)
    says(message, "last.pt' holds Python objects other than tensors and plain data; it is refused")
    assert not marker.exists()


# ----------------------------------------------------------------------------- GAN evaluation and report
def test_gan_evaluate_refuses_foreign_inception_weights_and_a_checkpoint_that_would_run_code(run_copy, tmp_path,
                                                                                             capsys):
    evaluate = entry("evonorm_suite.gan.evaluate")
    seed, marker = run_copy("gan") / "seed0", tmp_path / "pwned"
    weights = tmp_path / "weights-inception-2015-12-05-6726825d.pth"
    evil_checkpoint(weights, marker)
    message = refusal(evaluate, [str(seed), "--num-samples", "16", "--standing-stats", "0",
                                 "--inception-weights", str(weights)], capsys)
    says(message, f"'{weights}' is not torch-fidelity's weights-inception-2015-12-05-6726825d.pth", "refused")
    evil_checkpoint(seed / "checkpoints" / "evil.pt", marker)
    message = refusal(evaluate, [str(seed), "--num-samples", "16", "--standing-stats", "0",
                                 "--checkpoint", str(seed / "checkpoints" / "evil.pt")], capsys)
    says(message, "evil.pt' holds Python objects other than tensors and plain data; it is refused")
    assert not marker.exists()
    other = tmp_path / "other.pt"  # another run's checkpoint: its numbers would be filed under this run
    other.write_bytes((seed / "checkpoints" / "last.pt").read_bytes())
    says(refusal(evaluate, [str(seed), "--num-samples", "16", "--checkpoint", str(other)], capsys),
         f"checkpoint '{other}' is not one of '{seed / 'checkpoints'}'", "evaluate it with the run folder it belongs to")


def test_gan_evaluate_flags_and_folders(run_copy, tmp_path, capsys):
    evaluate = entry("evonorm_suite.gan.evaluate")
    seed = run_copy("gan") / "seed0"
    for flags, message in ((["--num-samples", "0"], "argument --num-samples: must be >= 10, got 0"),
                           (["--batch-size", "0"], "argument --batch-size: must be >= 1, got 0"),
                           (["--data-root", str(tmp_path)], f"--data-root {tmp_path}: {seed} trained on the built-in "
                                                            "digits, which have no location to give")):
        says(refusal(evaluate, [str(seed), *flags], capsys), message)
    says(refusal(evaluate, [str(seed.parent)], capsys),  # train_biggan.py's --run-dir, not one of its runs
         f"'{seed.parent}' holds the runs {seed}: evaluate each of them (python gan/evaluate.py {seed} --all-snapshots)")
    says(refusal(evaluate, [str(tmp_path / "none")], capsys),
         f"no run of gan/train_biggan.py in '{tmp_path / 'none'}': the folder does not exist")


def test_gan_evaluate_names_a_checkpoint_whose_weights_do_not_fit(run_copy):
    seed = run_copy("gan") / "seed0"
    narrowed(seed / "checkpoints" / "last.pt", "G_ema")
    with pytest.raises(SystemExit, match=r"last.pt' does not fit its own configuration"):
        evaluate.main([str(seed), "--num-samples", "16", "--standing-stats", "0"])


def test_gan_report_names_a_truncated_metrics_file(tmp_path, capsys):
    metrics = tmp_path / "runs" / "seed0" / "metrics.json"
    metrics.parent.mkdir(parents=True)
    (metrics.parent / "run.json").write_text(json.dumps({"command": "gan/train_biggan.py", "format": 1}))
    metrics.write_text('{"fid": 1')
    says(refusal(entry(GAN_REPORT), [str(tmp_path / "runs")], capsys), f"run metrics '{metrics}' is not valid JSON")


# ----------------------------------------------------------------------------- classification
@pytest.mark.slow
def test_classification_kill_and_resume_is_the_uninterrupted_run(tmp_path, one_thread):
    """kill -9 mid-run, then --resume: the resumed run ends with the weights of a run never
    interrupted (checkpoints are atomic, so the last one is whole)."""
    args = [*CLS_TINY, "--epochs", "300", "--schedule", "constant"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    killed = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "evonorm_suite.classification.train", *args, "--output-dir", str(killed)],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = killed / "checkpoint.pt"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if load_checkpoint(checkpoint)["step"] >= 3:
                break
        except (FileNotFoundError, CorruptFileError):
            pass
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    killed_at = load_checkpoint(checkpoint)["step"]
    assert 3 <= killed_at < 300
    steps = str(killed_at + 2)
    done = subprocess.run([sys.executable, "-m", "evonorm_suite.classification.train", "--resume", "--output-dir", str(killed),
                           "--max-steps", steps], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"resumed {checkpoint} at epoch {killed_at}, step {killed_at}" in done.stdout
    assert train.main([*args, "--max-steps", steps, "--output-dir", str(tmp_path / "whole")]) == 0
    resumed, whole = load_checkpoint(checkpoint), load_checkpoint(tmp_path / "whole" / "checkpoint.pt")
    assert resumed["step"] == whole["step"] == killed_at + 2
    for name, tensor in whole["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name


def test_a_layer_option_that_does_not_fit_the_model_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit, match=r"--groups 3: num_channels=16 is not divisible by groups=3"):
        train.main([*CLS_TINY, "--groups", "3", "--output-dir", str(tmp_path / "run")])


@pytest.mark.parametrize("content", ['{"final_top1": ', '{"final_top1": 50.0}', "[1, 2]",
                                     '{"final_top1": 50.0, "config": [1]}',
                                     '{"final_top1": 50.0, "config": {"model": "resnet50_cifar", "seed": 0}}',
                                     '{"final_top1": 50.0, "config": {"model": "resnet50_cifar", "norm_act": "gn_relu", '
                                     '"seed": 0, "width_multiplier": 1.0}, "history": [{"step": 1}]}'])
def test_tables_and_tradeoff_name_a_damaged_result_json(tmp_path, content):
    cell = tmp_path / "t3" / "resnet50" / "bn_relu" / "seed0"
    cell.mkdir(parents=True)
    (cell / "result.json").write_text(content)
    with pytest.raises(SystemExit, match=r"error: run result '.*result.json'"):
        tables.main(["report", "table3", str(tmp_path / "t3")])
    point = tmp_path / "fig11" / "bn_relu" / "w1.0"
    point.mkdir(parents=True)
    (point / "result.json").write_text(content)
    with pytest.raises(SystemExit, match=r"error: run result '.*result.json'"):
        tradeoff.main(["plot", str(tmp_path / "fig11"), "--resolution", "32"])
    cell = tmp_path / "grid" / "resnet50" / "gn_relu" / "b32" / "seed0"  # a cell `run` would skip as finished
    cell.mkdir(parents=True)
    (cell / "result.json").write_text(content)
    with pytest.raises(SystemExit, match=r"error: run result '.*result.json'.*(truncated|delete it \(the cell then "
                                         r"trains again\) or give another --runs-dir)"):
        tables.main(["run", "table3", "--scale", "mini", "--models", "resnet50", "--layers", "gn_relu", "--dry-run",
                     "--runs-dir", str(tmp_path / "grid")])


# ----------------------------------------------------------------------------- search
def test_compare_does_not_read_seed_as_seeds(tmp_path, capsys):
    with pytest.raises(SystemExit):
        compare.main(["--max-candidates", "2", "--seed", "3", "--output-dir", str(tmp_path)])
    assert "--seed is set by this program for each run" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------------------------------- detection
@pytest.fixture
def detection_env():
    pytest.importorskip("detectron2")
    return ROOT / "detection" / "configs" / "demo_shapes_gn.yaml"


def detection_config(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


DETECTION_CONFIGS = {  # what the config says -> (its text; {demo}, {marker}, {here}: filled in), the error
    "a !!python/object/apply tag": (
        '_BASE_: "{demo}"\nOUTPUT_DIR: !!python/object/apply:os.system ["touch {marker}"]\n',
        ["uses a YAML tag that builds Python objects"]),
    "a list, not a mapping": ("- 1\n- 2\n", ["must be a mapping of keys to values, got a list"]),
    "an unknown key": ('_BASE_: "{demo}"\nSOLVER:\n  NOPE: 1\n', ["Non-existent config key: SOLVER.NOPE"]),
    "itself as its _BASE_": ('_BASE_: "{here}"\n', ["_BASE_ files form a cycle"]),
}


@pytest.mark.parametrize("case", DETECTION_CONFIGS)
def test_detection_refuses_a_bad_config_naming_it(case, tmp_path, detection_env, capsys):
    text, fragments = DETECTION_CONFIGS[case]
    marker, path = tmp_path / "pwned", tmp_path / "config.yaml"
    path.write_text(text.format(demo=DETECTION_DEMO, marker=marker, here=path))
    says(refusal(entry(TRAIN_NET), ["--config", str(path)], capsys), f"config {path} with overrides []", *fragments)
    assert not marker.exists()


def test_detection_refuses_a_tag_in_a_base_config(tmp_path, detection_env, capsys):
    marker = tmp_path / "pwned"
    base = detection_config(tmp_path, f'MODEL: !!python/object/apply:os.system ["touch {marker}"]\n', "base.yaml")
    path = detection_config(tmp_path, f'_BASE_: "{base}"\n')
    says(refusal(entry(TRAIN_NET), ["--config", str(path)], capsys),
         f"config '{base}' uses a YAML tag that builds Python objects")
    assert not marker.exists()


def test_detection_refuses_pickled_weights_before_loading_them(tmp_path, detection_env):
    # here, not at the top: needs detectron2, and detection_env skips this test without it
    from evonorm_suite.detection import train_net

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    marker = tmp_path / "pwned"
    pkl, pth = tmp_path / "zoo.pkl", tmp_path / "weights.pth"
    pkl.write_bytes(pickle.dumps({"model": Evil(), "__author__": "zoo"}))
    evil_checkpoint(pth, marker)
    truncated = tmp_path / "cut.pth"
    truncated.write_bytes(b"PK\x03\x04")
    for path, message in ((pkl, "is a Python pickle"), (pth, "holds Python objects"), (truncated, "is truncated")):
        with pytest.raises(SystemExit) as exit_info:
            train_net.main(["--config", str(detection_env), "--eval-only", "OUTPUT_DIR", str(tmp_path / "out"),
                            "MODEL.WEIGHTS", str(path)])
        assert message in str(exit_info.value.code) and str(path) in str(exit_info.value.code)
    assert not marker.exists() and not (tmp_path / "out").exists()
    with pytest.raises(SystemExit, match="--num-gpus"):
        train_net.main(["--config", str(detection_env), "--num-gpus", "0"])


def test_detection_checkpoints_are_written_atomically_and_read_safely(tmp_path, detection_env):
    from evonorm_suite.detection.checkpoint import SafeCheckpointer, UnsafeWeightsError  # needs detectron2, as above
    model = nn.Linear(3, 2)
    SafeCheckpointer(model, save_dir=str(tmp_path)).save("model_0000001", iteration=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last_checkpoint", "model_0000001.pth"]
    assert (tmp_path / "last_checkpoint").read_text() == "model_0000001.pth"
    other = nn.Linear(3, 2)
    extra = SafeCheckpointer(other, save_dir=str(tmp_path)).resume_or_load("", resume=True)
    assert extra["iteration"] == 1 and torch.equal(other.weight, model.weight)
    (tmp_path / "zoo.pkl").write_bytes(pickle.dumps({"model": {}}))
    with pytest.raises(UnsafeWeightsError, match="zoo.pkl"):
        SafeCheckpointer(other).load(str(tmp_path / "zoo.pkl"))
