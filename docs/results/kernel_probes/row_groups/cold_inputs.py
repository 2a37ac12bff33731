"""The channels_last B forward with its input in cache and out of it: what the operator timings (op_ab.py, the
layer benchmark) leave out, since they call an operator on the same tensor over and over.

    python docs/results/kernel_probes/row_groups/cold_inputs.py [SHAPES]

Per shape (default: MobileNetV2's two largest B0 layers at batch 4, 128 x 128), b_forward in training on a
channels_last input: 20 calls on one input (in cache after the first, as the operator timings have it) and 20
calls on twelve inputs in turn (together 72 MB at 4x96x64x64, more than the machine's caches: each call reads its
input from memory, as a model's layer does), the two interleaved; medians after 4 of each, 2 threads, in
microseconds. Run it with PYTHONPATH at another tree to time that tree's operators.
"""
from __future__ import annotations

import argparse
import runpy
import statistics
import time
from pathlib import Path

import torch

import evonorm_core.ops

OP_AB = Path(__file__).resolve().parents[1] / "op_ab.py"  # the operator timer, whose setup this shares


def time_shape(shape: tuple[int, ...]) -> tuple[float, float]:
    """Median microseconds of b_forward on one input called repeatedly and on inputs taken in turn."""
    c = shape[1]
    w, b, v = torch.randn(c), torch.randn(c), torch.randn(c)
    inputs = [torch.randn(shape).contiguous(memory_format=torch.channels_last) for _ in range(12)]
    times: dict[str, list[float]] = {"same": [], "in turn": []}
    for call in range(24):
        for kind, x in (("same", inputs[0]), ("in turn", inputs[call % 11 + 1])):
            start = time.perf_counter()
            torch.ops.evonorm.b_forward(x, w, b, v, None, 0, 1e-5)
            if call >= 4:
                times[kind].append(time.perf_counter() - start)
    return statistics.median(times["same"]) * 1e6, statistics.median(times["in turn"]) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="*", default=["4x96x64x64", "4x144x32x32"], help="NxCxHxW (default: %(default)s)")
    args = parser.parse_args()
    op_ab = runpy.run_path(str(OP_AB), run_name="kernel_probes_op_ab")
    op_ab["ready_to_time"]()
    print(f"# evonorm_core from {Path(evonorm_core.__file__).parent}")
    for shape in args.shapes:
        same, in_turn = time_shape(op_ab["shape_of"](shape))
        print(f"{shape} b_forward channels_last: one input {same:.0f} us, inputs in turn {in_turn:.0f} us")


if __name__ == "__main__":
    main()
