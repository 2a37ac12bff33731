"""Table 4 in miniature: the shapes demo with BN (synchronized), GN, EvoNorm-B0 and EvoNorm-S0.

    python detection/miniature.py                       # the whole grid, resumable
    python detection/miniature.py --report-only         # tables and JSON from finished runs

Every layer is trained on the generated shapes (``detection/shapes.py``) in two settings, with
three seeds each: ``batch8``, the demo configs as they are (8 images per step), and
``batch2``, 2 images per step with the learning rate scaled linearly and the same number of
iterations (a quarter of the images), where batch statistics come from two images only, the
paper's reason for batch-independent layers in detection. Each run is ``tools/train_net.py``
in its own process (one thread, ``--jobs`` at once) writing ``RUNS/<setting>/<layer>/seed<k>``
and its output to ``RUNS/<setting>/<layer>/seed<k>.log``; finished runs (``final_results.json``)
are not rerun, started ones resume, and a run that fails is named at the end (no summary is
written then) while the others go on. The box and mask AP of every run, their mean and spread
per layer and setting go to ``--out/miniature.json`` and a markdown table.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from evonorm_core.experiment.config import command_line
from evonorm_core.experiment.files import atomic_write_json, read_json
from evonorm_core.experiment.grid import Cell, run_grid
from evonorm_core.experiment.rundir import holds_run
from evonorm_core.experiment.tables import format_mean_std, markdown_table, mean_and_std
from evonorm_suite.detection.report import RESULTS_FILE

CONFIGS = Path(__file__).resolve().parent / "configs"
LAYERS = {"bn": "BN-ReLU (sync)", "gn": "GN-ReLU", "evonorm_b0": "EvoNorm-B0", "evonorm_s0": "EvoNorm-S0"}
BASE_BATCH, BASE_LR = 8, 0.02  # Base-Demo-Shapes.yaml


@dataclass(frozen=True)
class Setting:
    name: str
    images_per_step: int

    @property
    def lr(self) -> float:
        return BASE_LR * self.images_per_step / BASE_BATCH


SETTINGS = (Setting("batch8", 8), Setting("batch2", 2))


@dataclass(frozen=True)
class Run:
    setting: Setting
    layer: str
    seed: int

    def output_dir(self, runs: Path) -> Path:
        return runs / self.setting.name / self.layer / f"seed{self.seed}"

    def command(self, runs: Path, iterations: int) -> list[str]:
        """The ``train_net`` command of this run (with ``--resume`` once the run has started)."""
        resume = ["--resume"] if holds_run(self.output_dir(runs)) else []
        return [
            sys.executable, "-m", "evonorm_suite.detection.train_net", "--threads", "1", *resume,
            "--config", str(CONFIGS / f"demo_shapes_{self.layer}.yaml"),
            "SEED", str(self.seed), "SOLVER.IMS_PER_BATCH", str(self.setting.images_per_step),
            "SOLVER.BASE_LR", str(self.setting.lr), "SOLVER.MAX_ITER", str(iterations),
            "SOLVER.STEPS", f"({int(iterations * 0.8)}, {int(iterations * 0.93)})",
            "SOLVER.CHECKPOINT_PERIOD", str(iterations), "DATALOADER.NUM_WORKERS", "0",
            "OUTPUT_DIR", str(self.output_dir(runs)),
        ]

    def cell(self, runs: Path, iterations: int) -> Cell:
        """This run as a cell of the grid: finished when its COCO results exist."""
        return Cell(f"{self.setting.name}/{self.layer}/seed{self.seed}", done=self.output_dir(runs) / RESULTS_FILE,
                    commands=(tuple(self.command(runs, iterations)),))


def summarize(runs_dir: Path, seeds: tuple[int, ...]) -> dict:
    """Per setting and layer: every seed's box/mask AP, mean and sample std."""
    cells = []
    for setting in SETTINGS:
        for layer, label in LAYERS.items():
            per_seed = []
            for seed in seeds:
                path = Run(setting, layer, seed).output_dir(runs_dir) / RESULTS_FILE
                if path.exists():
                    results = read_json(path, what="COCO results")
                    per_seed.append({"seed": seed, "box_ap": results["bbox"]["AP"], "mask_ap": results["segm"]["AP"],
                                     "box_ap50": results["bbox"]["AP50"], "mask_ap50": results["segm"]["AP50"]})
            cell = {"setting": setting.name, "images_per_step": setting.images_per_step, "lr": setting.lr,
                    "layer": layer, "label": label, "runs": per_seed}
            for key in ("box_ap", "mask_ap"):
                cell[f"{key}_mean"], cell[f"{key}_std"] = mean_and_std([r[key] for r in per_seed])
            cells.append(cell)
    return {"experiment": "detection miniature (Table 4)", "seeds": list(seeds), "cells": cells}


def markdown(summary: dict) -> str:
    rows = [[c["setting"], c["label"], format_mean_std([r["box_ap"] for r in c["runs"]]),
             format_mean_std([r["mask_ap"] for r in c["runs"]])] for c in summary["cells"]]
    return markdown_table(["setting", "layer", "box AP (mean ± std, n seeds)", "mask AP (mean ± std, n seeds)"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python detection/miniature.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/detection_miniature"), help="one folder per run")
    parser.add_argument("--out", type=Path, default=Path("docs/results/detection"), help="where miniature.json goes")
    parser.add_argument("--iterations", type=int, default=300, help="SGD steps per run in both settings (default 300)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds per layer and setting")
    parser.add_argument("--layers", nargs="+", choices=sorted(LAYERS), default=list(LAYERS), help="layers to run")
    parser.add_argument("--settings", nargs="+", choices=[s.name for s in SETTINGS], default=[s.name for s in SETTINGS],
                        help="settings to run")
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at once, one thread each (default 2)")
    parser.add_argument("--report-only", action="store_true", help="only summarize the finished runs")
    args = parser.parse_args(argv)
    for flag, value in (("--iterations", args.iterations), ("--jobs", args.jobs)):
        if value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    if any(seed < 0 for seed in args.seeds):
        parser.error(f"--seeds must be >= 0, got {args.seeds}")
    if not args.report_only:
        runs = [Run(s, layer, seed) for s in SETTINGS if s.name in args.settings for layer in args.layers
                for seed in args.seeds]
        print(f"detection miniature: {args.iterations} iterations per run, into {args.runs_dir}", flush=True)
        result = run_grid([run.cell(args.runs_dir, args.iterations) for run in runs], args.runs_dir, jobs=args.jobs,
                          name="detection miniature")
        if result.exit_status:
            return result.exit_status
    summary = {**summarize(args.runs_dir, tuple(args.seeds)), "iterations": args.iterations,
               "command": command_line("python detection/miniature.py", argv)}
    atomic_write_json(args.out / "miniature.json", summary)
    print(markdown(summary))
    print(f"summary: {args.out / 'miniature.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
