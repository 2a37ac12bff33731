"""The v1 lookup in the layers' ``_call``: ``self._v1()`` (by ``has_v1``) against the ``getattr(self, "v1", None)`` it
replaced, in one process, the two alternated call by call in rounds. Eval-mode layers under ``torch.inference_mode``
at the host-bound 1x8x2x2 (one thread) and the matrix's 2x2048x7x7 (two threads, the benchmark's setting); the
median over rounds of each round's fastest of ``REPEATS`` timings of ``CALLS`` calls, microseconds per call.

    python docs/results/kernel_probes/layer_host_cost/v1_lookup.py
"""
import json
import statistics
import timeit

import torch

from evonorm_core.layers import EvoNormB0, EvoNormB1, EvoNormB2, EvoNormS1, EvoNormS2

ROUNDS, REPEATS = 15, 3
SHAPES = {(1, 8, 2, 2): (1, 20_000), (2, 2048, 7, 7): (2, 2_000)}  # shape: (threads, calls)


def with_getattr(layer: torch.nn.Module) -> None:
    """``layer`` as before: its v1 read by a getattr with a default (the per-instance ``_v1`` shadows the class's)."""
    layer._v1 = lambda: getattr(layer, "v1", None)


def per_call_us(fn, calls: int) -> float:
    return min(timeit.repeat(fn, number=calls, repeat=REPEATS)) / calls * 1e6


def main() -> None:
    for shape, (threads, calls) in SHAPES.items():
        torch.set_num_threads(threads)
        x = torch.randn(shape)
        for cls in (EvoNormB0, EvoNormB1, EvoNormB2, EvoNormS1, EvoNormS2):
            new, old = cls(shape[1]).eval(), cls(shape[1]).eval()
            with_getattr(old)
            times = {"has_v1": [], "getattr": []}
            with torch.inference_mode():
                assert torch.equal(new(x), old(x))
                for _ in range(ROUNDS):
                    times["has_v1"].append(per_call_us(lambda: new(x), calls))
                    times["getattr"].append(per_call_us(lambda: old(x), calls))
            row = {"layer": cls.__name__, "shape": list(shape), "threads": threads,
                   **{k: statistics.median(v) for k, v in times.items()}}
            row["ratio"] = row["has_v1"] / row["getattr"]
            print(json.dumps(row))


if __name__ == "__main__":
    main()
