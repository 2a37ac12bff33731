"""b_backward on a channels_last x with the gradient in either layout, the tensors read from memory as a model's
layer reads them: the cost of the transposed-tile path that an NCHW gradient of a channels_last x takes (the
compiled MobileNetV2-B0 step hands the operator such gradients before its depthwise convolutions).

    python docs/results/kernel_probes/grad_prefetch/grad_from_memory.py [SHAPES]

Per shape, 16 calls of b_backward (training, B0, the instance mean taken from x) with the gradient channels_last
and 16 with it NCHW, interleaved, each call on the next of five (x, gradient) pairs so that its tensors come from
memory, not cache; medians after 3 of each, 2 threads, in microseconds. Run it with PYTHONPATH at another tree to
time that tree's operators.
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
SHAPES = ["4x96x64x64", "4x144x32x32", "4x384x8x8", "16x256x56x56", "16x2048x7x7"]
PAIRS = 5


def time_shape(shape: tuple[int, ...]) -> dict[str, float]:
    """Median microseconds of b_backward with a channels_last and with an NCHW gradient."""
    c, ops = shape[1], torch.ops.evonorm
    w, b, v = torch.randn(c), torch.randn(c), torch.randn(c)
    xs = [torch.randn(shape).contiguous(memory_format=torch.channels_last) for _ in range(PAIRS)]
    grads = {"NCHW": [torch.randn(shape) for _ in range(PAIRS)]}
    grads["channels_last"] = [g.contiguous(memory_format=torch.channels_last) for g in grads["NCHW"]]
    stats = [ops.b_forward(x, w, b, v, None, 0, 1e-5) for x in xs]
    times: dict[str, list[float]] = {layout: [] for layout in grads}
    for call in range(19):
        for layout, gs in grads.items():
            i = call % PAIRS
            _, mean, q, batch_mean, batch_var = stats[i]
            start = time.perf_counter()
            ops.b_backward(gs[i], xs[i], w, b, v, mean.new_empty(0), q, batch_mean, batch_var, 0, 1e-5, True,
                           [True] * 4)
            if call >= 3:
                times[layout].append(time.perf_counter() - start)
    return {layout: statistics.median(t) * 1e6 for layout, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="*", default=SHAPES, help="NxCxHxW (default: %(default)s)")
    args = parser.parse_args()
    op_ab = runpy.run_path(str(OP_AB), run_name="kernel_probes_op_ab")
    op_ab["ready_to_time"]()
    print(f"# evonorm_core from {Path(evonorm_core.__file__).parent}")
    for shape in args.shapes:
        t = time_shape(op_ab["shape_of"](shape))
        print(f"{shape} b_backward, x channels_last: gradient channels_last {t['channels_last']:.0f} us, "
              f"NCHW {t['NCHW']:.0f} us")


if __name__ == "__main__":
    main()
