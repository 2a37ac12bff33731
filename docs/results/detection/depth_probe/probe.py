"""Depth probe for the Table 4 miniature (docs/detection.md): detection/miniature.py's runs at 8 images per step,
seed 0, with a half-width ResNet-50 backbone (stem 32, res2 128, bottleneck width 32) in place of the half-width
ResNet-18. One seed each: a probe, not a result.

    python docs/results/detection/depth_probe/probe.py                       # 1800 steps: bn no_norm_relu gn
    python docs/results/detection/depth_probe/probe.py --iterations 3600 --layers bn no_norm_relu

Runs go to runs/det_probe_r50/<images>_images/batch8/<layer>/seed0, two at a time, one thread each; finished runs
are skipped and started ones resume. Summarize them with ``python detection/miniature.py --report-only
--runs-dir runs/det_probe_r50 --seeds 0 --settings batch8 --iterations N --out ...``.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from evonorm_core.experiment.grid import run_grid
from evonorm_core.experiment.rundir import RunDirError
from evonorm_suite.detection.miniature import ITERATIONS, LAYERS, SETTINGS, Run

HALF_WIDTH_RESNET50 = ("MODEL.RESNETS.DEPTH", "50", "MODEL.RESNETS.RES2_OUT_CHANNELS", "128",
                       "MODEL.RESNETS.WIDTH_PER_GROUP", "32")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=ITERATIONS, help="steps of 8 images per run (default %(default)s)")
    parser.add_argument("--layers", nargs="+", choices=sorted(LAYERS), default=["bn", "no_norm_relu", "gn"],
                        help="layers to run (default: bn no_norm_relu gn)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/det_probe_r50"), help="root of the runs")
    args = parser.parse_args(argv)
    if args.iterations < 1:
        parser.error(f"--iterations must be >= 1, got {args.iterations}")
    batch8 = next(setting for setting in SETTINGS if setting.name == "batch8")
    runs = [Run(batch8, layer, 0, overrides=HALF_WIDTH_RESNET50) for layer in args.layers]
    try:
        result = run_grid([run.cell(args.runs_dir, args.iterations) for run in runs], args.runs_dir, jobs=2,
                          name="depth probe")
    except RunDirError as error:  # another grid holds the folder
        raise SystemExit(f"error: {error}") from None
    return result.exit_status


if __name__ == "__main__":
    raise SystemExit(main())
