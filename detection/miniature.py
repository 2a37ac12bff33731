"""Table 4 in miniature: the shapes demo with BN, GN, EvoNorm-B0, EvoNorm-S0 and a no-normalization control.

    python detection/miniature.py                       # the whole grid, resumable
    python detection/miniature.py --report-only         # tables, JSON and the loss plot from finished runs

Every layer is trained on the generated shapes (``detection/shapes.py``) in two settings, with
three seeds each: ``batch8``, the demo configs' 8 images per step (the paper's 8 images per
worker) for ``--iterations`` steps (900; the demo configs stop at 300, before BN-ReLU has left its
initial plateau), and ``batch2``, 2 images per step, where batch statistics come from two
images only, the paper's reason for batch-independent layers in detection. Both settings see
the same images: a setting with ``n`` images per step runs ``--iterations * 8 / n`` steps, and
its learning rate (linear scaling), warmup and LR decays (at 80 % and 93 % of its steps) follow
the same rule, so batch 2 trains 4x the steps at a quarter of the learning rate. The control,
``no_norm_relu``, is the whole detector with ``max(x * gamma + beta, 0)`` in place of every
norm-act (the paper has no such row; it tells how much normalization matters here).

Each run is ``tools/train_net.py`` in its own process (one thread, ``--jobs`` at once) writing
``RUNS/<setting>/<layer>/seed<k>`` and its output to ``RUNS/<setting>/<layer>/seed<k>.log``;
finished runs (``final_results.json``) are not rerun, started ones resume, and a run that fails
is named at the end (no summary is written then) while the others go on. The box and mask AP of
every run, its training loss as detectron2 logged it, and their mean and spread per layer and
setting go to ``--out/miniature.json``; the losses against images seen go to ``--out/miniature_loss.png``.
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
from evonorm_core.experiment.tables import Series, format_mean_std, markdown_table, mean_and_std, plot_series
from evonorm_suite.detection.report import RESULTS_FILE, training_curve

CONFIGS = Path(__file__).resolve().parent / "configs"
LAYERS = {"bn": "BN-ReLU", "gn": "GN-ReLU", "evonorm_b0": "EvoNorm-B0", "evonorm_s0": "EvoNorm-S0",
          "no_norm_relu": "ReLU (no norm)"}
BASE_BATCH, BASE_LR, BASE_WARMUP = 8, 0.02, 50  # Base-Demo-Shapes.yaml
LOSS_PLOT = "miniature_loss.png"
# Steps of 8 images per run. BN-ReLU's training loss stays on a plateau (about 1.3) to step 200 and falls
# from about 250 (one seed, docs/results/detection/smoke_900_steps); 300 steps, with the LR cut 10x at 240,
# stopped it there. At 900 it ends level with GN-ReLU's.
ITERATIONS = 900
DECAYS = (0.8, 0.93)  # the LR's 10x decays, as fractions of a run's steps (the demo's 240 and 280 of 300)


@dataclass(frozen=True)
class Setting:
    """Images per SGD step; steps, learning rate and warmup follow from it so that every setting
    sees the same images (``base_iterations`` steps of ``BASE_BATCH`` images)."""

    name: str
    images_per_step: int

    def __post_init__(self) -> None:
        if BASE_BATCH % self.images_per_step:
            raise ValueError(f"images per step must divide {BASE_BATCH}, got {self.images_per_step}")

    @property
    def scale(self) -> int:
        """Steps of this setting per step of ``BASE_BATCH`` images."""
        return BASE_BATCH // self.images_per_step

    @property
    def lr(self) -> float:
        return BASE_LR * self.images_per_step / BASE_BATCH

    def iterations(self, base_iterations: int) -> int:
        return base_iterations * self.scale

    def warmup(self) -> int:
        return BASE_WARMUP * self.scale


SETTINGS = (Setting("batch8", 8), Setting("batch2", 2))


@dataclass(frozen=True)
class Run:
    setting: Setting
    layer: str
    seed: int

    def output_dir(self, runs: Path) -> Path:
        return runs / self.setting.name / self.layer / f"seed{self.seed}"

    def command(self, runs: Path, base_iterations: int) -> list[str]:
        """The ``train_net`` command of this run (with ``--resume`` once the run has started):
        ``base_iterations`` steps' worth of images at this setting's images per step."""
        resume = ["--resume"] if holds_run(self.output_dir(runs)) else []
        iterations = self.setting.iterations(base_iterations)
        steps = tuple(int(iterations * fraction) for fraction in DECAYS)
        return [
            sys.executable, "-m", "evonorm_suite.detection.train_net", "--threads", "1", *resume,
            "--config", str(CONFIGS / f"demo_shapes_{self.layer}.yaml"),
            "SEED", str(self.seed), "SOLVER.IMS_PER_BATCH", str(self.setting.images_per_step),
            "SOLVER.BASE_LR", str(self.setting.lr), "SOLVER.MAX_ITER", str(iterations),
            "SOLVER.STEPS", f"({steps[0]}, {steps[1]})", "SOLVER.WARMUP_ITERS", str(self.setting.warmup()),
            "SOLVER.CHECKPOINT_PERIOD", str(iterations), "DATALOADER.NUM_WORKERS", "0",
            "OUTPUT_DIR", str(self.output_dir(runs)),
        ]

    def cell(self, runs: Path, base_iterations: int) -> Cell:
        """This run as a cell of the grid: finished when its COCO results exist."""
        return Cell(f"{self.setting.name}/{self.layer}/seed{self.seed}", done=self.output_dir(runs) / RESULTS_FILE,
                    commands=(tuple(self.command(runs, base_iterations)),))


def loss_curve(output_dir: Path, images_per_step: int) -> list[list[float]]:
    """``[images seen, total loss]`` as detectron2 logged it (every 20 steps, the median of the last 20);
    a step logged twice (a resumed run) counts once, its last value."""
    iterations, losses = training_curve(output_dir)
    by_iteration = dict(zip(iterations, losses))
    return [[(iteration + 1) * images_per_step, round(loss, 4)] for iteration, loss in sorted(by_iteration.items())]


def summarize(runs_dir: Path, seeds: tuple[int, ...], base_iterations: int) -> dict:
    """Per setting and layer: every seed's box/mask AP and training loss, the APs' mean and sample std."""
    cells = []
    for setting in SETTINGS:
        for layer, label in LAYERS.items():
            per_seed = []
            for seed in seeds:
                folder = Run(setting, layer, seed).output_dir(runs_dir)
                if (folder / RESULTS_FILE).exists():
                    results = read_json(folder / RESULTS_FILE, what="COCO results")
                    per_seed.append({"seed": seed, "box_ap": results["bbox"]["AP"], "mask_ap": results["segm"]["AP"],
                                     "box_ap50": results["bbox"]["AP50"], "mask_ap50": results["segm"]["AP50"],
                                     "loss": loss_curve(folder, setting.images_per_step)})
            cell = {"setting": setting.name, "images_per_step": setting.images_per_step, "lr": setting.lr,
                    "iterations": setting.iterations(base_iterations),
                    "images_seen": setting.iterations(base_iterations) * setting.images_per_step,
                    "layer": layer, "label": label, "runs": per_seed}
            for key in ("box_ap", "mask_ap"):
                cell[f"{key}_mean"], cell[f"{key}_std"] = mean_and_std([r[key] for r in per_seed])
            cells.append(cell)
    return {"experiment": "detection miniature (Table 4)", "seeds": list(seeds), "cells": cells}


def markdown(summary: dict) -> str:
    rows = [[c["setting"], c["label"], format_mean_std([r["box_ap"] for r in c["runs"]]),
             format_mean_std([r["mask_ap"] for r in c["runs"]])] for c in summary["cells"]]
    return markdown_table(["setting", "layer", "box AP (mean ± std, n seeds)", "mask AP (mean ± std, n seeds)"], rows)


def mean_loss_series(cell: dict) -> Series | None:
    """The cell's training loss averaged over its seeds at the images seen that all of them logged
    (error bars: the sample std over seeds), labelled with the cell's box AP and coloured by its layer
    (the same colour in every setting's panel); None without runs."""
    curves = [dict(map(tuple, run["loss"])) for run in cell["runs"] if run["loss"]]
    if not curves:
        return None
    seen = sorted(set.intersection(*(set(curve) for curve in curves)))
    means = [mean_and_std([curve[x] for curve in curves]) for x in seen]
    err = [std or 0.0 for _, std in means] if len(curves) > 1 else None
    label = f"{cell['label']}: box AP {format_mean_std([run['box_ap'] for run in cell['runs']])}"
    return Series(label, seen, [m for m, _ in means], err, color_key=cell["label"])


def plot_losses(summary: dict, path: Path) -> Path:
    """One panel per setting with runs (every setting if none has): each layer's training loss
    against images seen, mean over seeds."""
    panels = {}
    for setting in SETTINGS:
        series = [mean_loss_series(c) for c in summary["cells"] if c["setting"] == setting.name]
        panels[f"{setting.name} ({setting.images_per_step} images per step)"] = [s for s in series if s]
    measured = {title: curves for title, curves in panels.items() if curves}
    return plot_series(path, measured or panels, xlabel="training images seen",
                       ylabel="total loss (median of 20 steps)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python detection/miniature.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/detection_miniature"), help="one folder per run")
    parser.add_argument("--out", type=Path, default=Path("docs/results/detection"), help="where miniature.json goes")
    parser.add_argument("--iterations", type=int, default=ITERATIONS,
                        help=f"SGD steps of {BASE_BATCH} images per run (default {ITERATIONS}); a setting with fewer "
                             "images per step runs proportionally more steps, so that every setting sees the same images")
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
        steps = ", ".join(f"{s.name}: {s.iterations(args.iterations)} steps" for s in SETTINGS if s.name in args.settings)
        print(f"detection miniature: {args.iterations * BASE_BATCH} images per run ({steps}), into {args.runs_dir}",
              flush=True)
        result = run_grid([run.cell(args.runs_dir, args.iterations) for run in runs], args.runs_dir, jobs=args.jobs,
                          name="detection miniature")
        if result.exit_status:
            return result.exit_status
    summary = {**summarize(args.runs_dir, tuple(args.seeds), args.iterations), "iterations": args.iterations,
               "command": command_line("python detection/miniature.py", argv)}
    atomic_write_json(args.out / "miniature.json", summary)
    print(markdown(summary))
    print(f"summary: {args.out / 'miniature.json'}, training losses: {plot_losses(summary, args.out / LOSS_PLOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
