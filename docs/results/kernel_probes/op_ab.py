"""The four EvoNorm operators alone, by default at planes of one value, (N, C, 1, 1), NCHW-contiguous (2 threads).

    python op_ab.py out.json                 # time the operators of the evonorm_core on the path
    python op_ab.py out.json 4x1024x8x8 ...  # at these shapes instead
    python op_ab.py --summary DIR            # table of DIR/{before,after}_*.json (ab.sh writes them)

Per shape and operator: the median of 17 calls after 3, the operators interleaved, with glibc's malloc keeping freed
memory as tools/benchmark_layers.py does (its default allocator); float32, parameters per channel,
training (the batch statistics from x), and b_forward in eval (b_inference: a moving variance given).
"""
import json
import runpy
import statistics
import sys
import time
from pathlib import Path

import torch

import evonorm_core.ops

BENCHMARK = Path(__file__).resolve().parents[4] / "tools" / "benchmark_layers.py"
SHAPES = [(4, 960, 1, 1), (16, 512, 1, 1), (2, 2048, 1, 1), (64, 2048, 1, 1)]
OPS = ["s_forward", "s_backward", "b_forward", "b_backward", "b_inference"]


def calls(shape: tuple[int, ...]) -> dict:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen)
    g, w, b, v = torch.randn_like(x), torch.randn(shape[1]), torch.randn(shape[1]), torch.randn(shape[1])
    moving_var = torch.rand(shape[1], generator=gen) + 0.5
    groups, ops = min(32, shape[1]), torch.ops.evonorm
    _, mean, rstd = ops.s_forward(x, w, b, v, groups, 1e-5, False)
    _, b_mean, q, batch_mean, batch_var = ops.b_forward(x, w, b, v, None, 0, 1e-5)
    return {
        "s_forward": lambda: ops.s_forward(x, w, b, v, groups, 1e-5, False),
        "s_backward": lambda: ops.s_backward(g, x, w, b, v, mean, rstd, groups, False, [True] * 3),
        "b_forward": lambda: ops.b_forward(x, w, b, v, None, 0, 1e-5),
        "b_backward": lambda: ops.b_backward(g, x, w, b, v, b_mean, q, batch_mean, batch_var, 0, 1e-5, True, [True] * 4),
        "b_inference": lambda: ops.b_forward(x, w, b, v, moving_var, 0, 1e-5),
    }


def time_shape(shape: tuple[int, ...]) -> dict[str, float]:
    """Median microseconds per call of each operator."""
    fns, times = calls(shape), {name: [] for name in OPS}
    for rep in range(20):
        for name in OPS:
            start = time.perf_counter()
            fns[name]()
            if rep >= 3:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


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
    if sys.argv[1] == "--summary":
        summary(Path(sys.argv[2]))
        return
    assert evonorm_core.ops.load("cpu"), "the C++ kernels are needed"
    # the benchmark's allocator setting: outputs from memory the process keeps, not mmap'd fresh per call
    # (docs/benchmarks.md, "Fresh memory"; tools/ is a folder of scripts, so its function is run from the file)
    assert runpy.run_path(str(BENCHMARK), run_name="tools_benchmark_layers")["keep_freed_memory"]()
    torch.set_num_threads(2)
    shapes = [tuple(int(n) for n in arg.split("x")) for arg in sys.argv[2:]] or SHAPES
    result = {"x".join(map(str, s)): time_shape(s) for s in shapes}
    Path(sys.argv[1]).write_text(json.dumps(result, indent=1) + "\n")
    print(f"# evonorm_core from {Path(evonorm_core.__file__).parent}")
    for key, row in result.items():
        print(key, "  ".join(f"{op} {us:.1f} us" for op, us in row.items()))


if __name__ == "__main__":
    main()
