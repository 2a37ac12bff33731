"""The EvoNorm operators alone, timed, and two trees' operators against each other.

    python op_ab.py --json out.json [SHAPES]                 # time the operators of the evonorm_core on the path
    python op_ab.py --ab BEFORE OUT_DIR [SHAPES]             # BEFORE's tree (built in place) against this one
    python op_ab.py --summary OUT_DIR                        # the table of OUT_DIR/{before,after}_*.json

SHAPES are NxCxHxW (default: planes of one value, (N, C, 1, 1)), NCHW-contiguous (with --channels-last, x and the
gradient channels_last), 2 threads. Per shape and operator: the median of 17 calls after 3 (with --fastest the
fastest of them, for a machine whose other tenants stall some calls), the operators interleaved, with glibc's malloc keeping freed memory as tools/benchmark_layers.py does (its default allocator);
parameters per channel; s_forward/s_backward S0's (gcd(32, C) groups: 32 where they divide C), b_forward and
b_backward in training (batch statistics from x), b_inference b_forward in eval (a moving variance given). --ab
alternates the two trees --rounds times (every other job of the machine should be stopped), writes
{before,after}_{round}.json into OUT_DIR and prints the summary: the range of the rounds' medians in microseconds.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import runpy
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import evonorm_core.ops

BENCHMARK = Path(__file__).resolve().parents[3] / "tools" / "benchmark_layers.py"
REPOSITORY = BENCHMARK.parents[1]
SHAPES = ["4x960x1x1", "16x512x1x1", "2x2048x1x1", "64x2048x1x1"]
OPS = ["s_forward", "s_backward", "b_forward", "b_backward", "b_inference"]


def inputs(shape: tuple[int, ...], dtype: torch.dtype, layout: torch.memory_format) -> dict[str, torch.Tensor]:
    """x and the upstream gradient (dtype, layout), parameters per channel and a moving variance (float32)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen).to(dtype).contiguous(memory_format=layout)
    g, c = torch.randn(shape, generator=gen).to(dtype).contiguous(memory_format=layout), shape[1]
    return {"x": x, "g": g, "w": torch.randn(c), "b": torch.randn(c), "v": torch.randn(c),
            "moving_var": torch.rand(c, generator=gen) + 0.5}


def calls(tensors: dict[str, torch.Tensor], namespace: str = "evonorm") -> dict:
    """The operators of ``namespace`` on ``tensors`` (``inputs``), each a function of no arguments."""
    x, g, w, b, v, moving_var = (tensors[k] for k in ("x", "g", "w", "b", "v", "moving_var"))
    groups, ops = math.gcd(32, x.shape[1]), getattr(torch.ops, namespace)
    _, mean, rstd = ops.s_forward(x, w, b, v, groups, 1e-5, False)
    _, b_mean, q, batch_mean, batch_var = ops.b_forward(x, w, b, v, None, 0, 1e-5)
    return {
        "s_forward": lambda: ops.s_forward(x, w, b, v, groups, 1e-5, False),
        "s_backward": lambda: ops.s_backward(g, x, w, b, v, mean, rstd, groups, False, [True] * 3),
        "b_forward": lambda: ops.b_forward(x, w, b, v, None, 0, 1e-5),
        "b_backward": lambda: ops.b_backward(g, x, w, b, v, b_mean, q, batch_mean, batch_var, 0, 1e-5, True, [True] * 4),
        "b_inference": lambda: ops.b_forward(x, w, b, v, moving_var, 0, 1e-5),
    }


def time_calls(fns: dict, reps: int, warmup: int, statistic=statistics.median) -> dict[str, float]:
    """Microseconds per call of each function of no arguments in ``fns``, called in turn ``reps`` rounds:
    ``statistic`` of the calls after the first ``warmup`` rounds."""
    times = {name: [] for name in fns}
    for rep in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            if rep >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: statistic(t) * 1e6 for name, t in times.items()}


def time_shape(shape: tuple[int, ...], dtype: torch.dtype, layout: torch.memory_format,
               names: list[str], statistic=statistics.median) -> dict[str, float]:
    """Microseconds per call of each operator in ``names``: ``statistic`` of the timed calls."""
    every = calls(inputs(shape, dtype, layout))
    return time_calls({name: every[name] for name in names}, 20, 3, statistic)


def ready_to_time() -> None:
    """How the probes here time operators: the C++ kernels loaded, 2 threads, and the benchmark's allocator
    setting (outputs from memory the process keeps, not mmap'd fresh per call; docs/benchmarks.md, "Fresh memory";
    tools/ is a folder of scripts, so its function is run from the file). The probes in subfolders call it through
    ``runpy.run_path`` of this file."""
    assert evonorm_core.ops.load("cpu"), "the C++ kernels are needed"
    assert runpy.run_path(str(BENCHMARK), run_name="tools_benchmark_layers")["keep_freed_memory"]()
    torch.set_num_threads(2)


def shape_of(text: str) -> tuple[int, ...]:
    """(N, C, H, W) of an NxCxHxW argument."""
    return tuple(int(n) for n in text.split("x"))


def measure(out: Path, shapes: list[str], dtype: str, names: list[str], channels_last: bool, fastest: bool) -> None:
    ready_to_time()
    layout = torch.channels_last if channels_last else torch.contiguous_format
    statistic = min if fastest else statistics.median
    result = {shape: time_shape(shape_of(shape), getattr(torch, dtype), layout, names, statistic) for shape in shapes}
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"# evonorm_core from {Path(evonorm_core.__file__).parent}, {dtype}{', channels_last' * channels_last}")
    for key, row in result.items():
        print(key, "  ".join(f"{op} {us:.1f} us" for op, us in row.items()))


def alternate(before: Path, folder: Path, rounds: int, options: list[str]) -> None:
    """``rounds`` rounds of BEFORE's operators, then this tree's, each in a process of its own."""
    folder = folder.resolve()  # the runs' working directory is their tree
    folder.mkdir(parents=True, exist_ok=True)
    for round_ in range(1, rounds + 1):
        for side, tree in (("before", before.resolve()), ("after", REPOSITORY)):
            env = {**os.environ, "PYTHONPATH": str(tree)}
            subprocess.run([sys.executable, __file__, "--json", str(folder / f"{side}_{round_}.json"), *options],
                           cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    summary(folder)


def summary(folder: Path) -> None:
    runs = {side: [json.loads(p.read_text()) for p in sorted(folder.glob(f"{side}_*.json"))] for side in ("before", "after")}
    ops = [op for op in OPS if op in next(iter(runs["before"][0].values()))]  # earlier runs timed fewer
    print("| shape | " + " | ".join(f"{op} before | after" for op in ops) + " |")
    print("| --- |" + " ---: | ---: |" * len(ops))
    for key in runs["before"][0]:
        cells = []
        for op in ops:
            for side in ("before", "after"):
                values = [run[key][op] for run in runs[side]]
                cells.append(f"{min(values):.1f}-{max(values):.1f}")
        print(f"| {key} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="*", default=SHAPES, help="NxCxHxW shapes (default: %(default)s)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--json", type=Path, help="time this tree's operators, medians into this file")
    what.add_argument("--ab", nargs=2, type=Path, metavar=("BEFORE", "OUT_DIR"), help="BEFORE's tree against this one")
    what.add_argument("--summary", type=Path, metavar="OUT_DIR", help="the table of an --ab run's files")
    parser.add_argument("--rounds", type=int, default=2, help="--ab: alternating rounds (default: %(default)s)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "float64"])
    parser.add_argument("--ops", default=",".join(OPS), help="operators to time, comma-separated (default: all)")
    parser.add_argument("--channels-last", action="store_true", help="x and the gradient channels_last")
    parser.add_argument("--fastest", action="store_true", help="the fastest call instead of the median")
    args = parser.parse_args()
    names = args.ops.split(",")
    unknown = sorted(set(names) - set(OPS))
    if unknown:
        parser.error(f"--ops: unknown {unknown}; accepted: {', '.join(OPS)}")
    if args.summary:
        summary(args.summary)
    elif args.ab:
        flags = ["--channels-last"] * args.channels_last + ["--fastest"] * args.fastest
        alternate(args.ab[0], args.ab[1], args.rounds, ["--dtype", args.dtype, "--ops", args.ops, *flags, *args.shapes])
    else:
        measure(args.json, args.shapes, args.dtype, names, args.channels_last, args.fastest)


if __name__ == "__main__":
    main()
