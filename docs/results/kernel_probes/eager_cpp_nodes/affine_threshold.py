"""Whether the affine operator, now entered through its C++ autograd node, pays below
``functional.EAGER_AFFINE_OPERATOR_MIN_NUMEL`` (524,288 elements, set on 2026-11-30 when its Python autograd
function's fixed cost made it 1.01-1.16x the eval-mode batch norm at MobileNetV2's batch-4 shapes): the fused-affine
probe's measurements (kernel_probes/fused_affine/probe.py: layers alone, fused over the batch norm; whole steps, the
fused-affine model over the same model with its affine layers on the batch norm, and over a copy of itself) with
the threshold at 0, at the batch-4 shapes that are below it (MobileNetV2's projections, ResNet-50's two last stages).
One JSON line per shape, then per model and series. Two runs on 2026-12-01 (08:01-08:06 UTC, nothing else running:
affine_threshold.jsonl); after them the threshold was removed (the operator at every size), so on later code the
assignment below changes nothing and the script measures the same comparison.

    python docs/results/kernel_probes/eager_cpp_nodes/affine_threshold.py [ROUNDS] >> affine_threshold.jsonl
"""
import json
import runpy
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from evonorm_core import functional

probe = SimpleNamespace(**runpy.run_path(str(Path(__file__).resolve().parents[1] / "fused_affine" / "probe.py"),
                                         run_name="fused_affine_probe"))
SHAPES = [(4, 16, 64, 64), (4, 24, 32, 32), (4, 32, 16, 16), (4, 64, 8, 8), (4, 96, 8, 8), (4, 160, 4, 4),
          (4, 320, 4, 4), (4, 1024, 8, 8), (4, 2048, 4, 4)]


def main(rounds: int) -> None:
    probe.bl.keep_freed_memory()
    torch.set_num_threads(2)
    functional.EAGER_AFFINE_OPERATOR_MIN_NUMEL = 0
    for shape in SHAPES:
        print(json.dumps(probe.measure_layer(shape, rounds)), flush=True)
    for arch in ("resnet50", "mobilenet_v2"):
        for series in ("s", "b"):
            print(json.dumps(probe.measure(arch, series, rounds)), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 41)
