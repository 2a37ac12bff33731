"""Two builds of the CPU kernels in one process, their calls interleaved: an A/B that a noisy machine cannot bias.

    python interleaved_ab.py BEFORE --json out.json [SHAPES]

BEFORE is a git revision (or a copy of ``csrc/evonorm_ops.cpp``): its ``csrc/evonorm_ops.cpp`` is compiled (this tree's build flags) with its operators
registered under the namespace ``evonorm_before`` (the schemas of this tree's ``library.SCHEMAS``, so the two must
agree), next to this tree's installed ``evonorm`` operators. op_ab.py's timing alternates whole processes, one per
tree; on a machine whose other tenants stall calls for milliseconds at a time (2026-12-01: steal time, medians of
17 calls at 8 ms for a 60 us operator) the two sides then see different machines. Here every repetition calls
BEFORE's operator and this tree's back to back, in alternating order, so a stall hits one pair; the result per
shape and operator is the median over the repetitions of the pair's time ratio (this tree over BEFORE), with the
fastest call of each side beside it. Inputs, parameters and operators as op_ab.py's (``inputs``, ``calls``), the
two sides on the same tensors (docs/benchmarks.md, "What moves a layer between the states": an operator's time
moves with where its buffers are), 2 threads.
"""
from __future__ import annotations

import argparse
import json
import runpy
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

from evonorm_core.ops import build
from evonorm_core.ops.library import SCHEMAS

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parents[2]
OP_AB = runpy.run_path(str(HERE / "op_ab.py"), run_name="op_ab")
NAMESPACE = "evonorm_before"
SOURCE = "evonorm_core/ops/csrc/evonorm_ops.cpp"


def load_before(revision: str, folder: Path) -> torch.library.Library:
    """BEFORE's kernels (a revision's, or a source file's) as the operators of NAMESPACE (the returned library must
    stay alive)."""
    if Path(revision).is_file():
        text = Path(revision).read_text()
    else:
        text = subprocess.run(["git", "show", f"{revision}:{SOURCE}"], cwd=REPOSITORY, check=True,
                              capture_output=True, text=True).stdout
    impl = "TORCH_LIBRARY_IMPL(evonorm, CPU, m)"
    assert text.count(impl) == 1, f"{revision}'s kernels register their operators otherwise"
    source = folder / "evonorm_before.cpp"
    source.write_text(text.replace(impl, f"TORCH_LIBRARY_IMPL({NAMESPACE}, CPU, m)"))
    lib = torch.library.Library(NAMESPACE, "DEF")
    for schema in SCHEMAS:
        lib.define(schema)
    load(name="evonorm_before_C", sources=[str(source)], extra_cflags=build.CFLAGS, extra_ldflags=build.LDFLAGS,
         build_directory=str(folder))
    return lib


def time_pair(before, after, reps: int) -> dict[str, float]:
    """Median of after/before over ``reps`` back-to-back pairs (order alternating), and each side's fastest call."""
    times = {"before": [], "after": []}
    for rep in range(reps + 3):
        order = [("before", before), ("after", after)][:: 1 if rep % 2 else -1]
        for side, fn in order:
            start = time.perf_counter()
            fn()
            if rep >= 3:
                times[side].append(time.perf_counter() - start)
    ratios = [a / b for a, b in zip(times["after"], times["before"])]
    return {"ratio": statistics.median(ratios), "before_us": min(times["before"]) * 1e6,
            "after_us": min(times["after"]) * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", help="git revision (or source file) whose evonorm_ops.cpp is the 'before' side")
    # Not %(default)s: parse_intermixed_args hides the positionals' defaults while it parses, so --help would fail.
    parser.add_argument("shapes", nargs="*", default=OP_AB["SHAPES"],
                        help=f"NxCxHxW shapes (default: {' '.join(OP_AB['SHAPES'])})")
    parser.add_argument("--json", type=Path, required=True, help="write the results to this file")
    parser.add_argument("--ops", default=",".join(OP_AB["OPS"]), help="operators, comma-separated (default: all)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "float64"],
                        help="dtype of x, the gradient and the output (default: %(default)s)")
    parser.add_argument("--channels-last", action="store_true", help="x and the gradient channels_last")
    parser.add_argument("--reps", type=int, default=41, help="timed pairs per shape and operator (default: %(default)s)")
    args = parser.parse_intermixed_args()
    names = args.ops.split(",")
    unknown = sorted(set(names) - set(OP_AB["OPS"]))
    if unknown:
        parser.error(f"--ops: unknown {unknown}; accepted: {', '.join(OP_AB['OPS'])}")
    OP_AB["ready_to_time"]()
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    with tempfile.TemporaryDirectory() as folder:
        lib = load_before(args.before, Path(folder))  # noqa: F841 (keeps NAMESPACE's definitions alive)
        result = {}
        for shape in args.shapes:
            dims, dtype = OP_AB["shape_of"](shape), getattr(torch, args.dtype)
            tensors = OP_AB["inputs"](dims, dtype, layout)  # one set for both sides: where buffers land moves times
            before, after = OP_AB["calls"](tensors, NAMESPACE), OP_AB["calls"](tensors)
            with torch.inference_mode():  # both straight to the CPU kernels (this tree's also have a Python autograd)
                result[shape] = {name: time_pair(before[name], after[name], args.reps) for name in names}
            print(shape, "  ".join(f"{name} {r['ratio']:.3f} ({r['before_us']:.1f} -> {r['after_us']:.1f} us)"
                                   for name, r in result[shape].items()), flush=True)
    config = {"before": args.before, "dtype": args.dtype, "channels_last": args.channels_last, "reps": args.reps,
              "cpu": Path("/proc/cpuinfo").read_text().split("model name")[1].split("\n")[0].strip(" :\t")}
    args.json.write_text(json.dumps({"config": config, "shapes": result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
