"""Table 4 in miniature: the shapes demo with BN, GN, EvoNorm-B0, EvoNorm-S0 and a no-normalization control.

    python detection/miniature.py                       # the whole grid, resumable
    python detection/miniature.py --report-only         # tables, JSON and the loss plot from finished runs

Every layer is trained on the generated shapes (``detection/shapes.py``) in two settings, with
five seeds each: ``batch8``, the demo configs' 8 images per step (the paper's 8 images per
worker) for ``--iterations`` steps (1800; the demo configs stop at 300, before BN-ReLU has left
its initial plateau, and at 900 every layer was still far from its plateau), and ``batch2``, 2
images per step, where batch statistics come from two images only, the paper's reason for
batch-independent layers in detection. Both settings see
the same images: a setting with ``n`` images per step runs ``--iterations * 8 / n`` steps, and
its learning rate (linear scaling), warmup and LR decays (at 80 % and 93 % of its steps) follow
the same rule, so batch 2 trains 4x the steps at a quarter of the learning rate. The control,
``no_norm_relu``, is the whole detector with ``max(x * gamma + beta, 0)`` in place of every
norm-act (the paper has no such row; it tells how much normalization matters here).

Each run is ``tools/train_net.py`` in its own process (one thread, ``--jobs`` at once) writing
``RUNS/<images>_images/<setting>/<layer>/seed<k>`` (``<images>``: the images every run sees, so runs
of another length never mix) and its output to the same path plus ``.log``; finished runs
(``final_results.json``) are not rerun, started ones resume, and a run that fails is named at the
end (no summary is written then) while the others go on. Every run is evaluated on the validation
images 10 times (``EVALUATIONS``), evenly over its steps, the last at its end: its validation curve,
whose last fifth shows whether it was still improving. The box and mask AP of every run, its
validation curve and the curve's last-fifth range and slope, its training loss as detectron2
logged it, and their mean and spread per layer and setting go to ``--out/miniature.json``; the
losses and the validation curves against images seen go to ``--out/miniature_loss.png`` and
``--out/miniature_validation.png``.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evonorm_core.experiment.arguments import DistinctValues, output_folder
from evonorm_core.experiment.arguments import seed as seed_value
from evonorm_core.experiment.config import command_line
from evonorm_core.experiment.convergence import last_fifth_flatness
from evonorm_core.experiment.files import CorruptFileError, atomic_write_json
from evonorm_core.experiment.grid import Cell, run_grid
from evonorm_core.experiment.rundir import RunDirError, holds_run
from evonorm_core.experiment.tables import Series, format_mean_std, markdown_table, mean_and_std, plot_series
from evonorm_suite.detection.report import RESULTS_FILE, logged_metrics, read_results, training_curve

CONFIGS = Path(__file__).resolve().parent / "configs"
LAYERS = {"bn": "BN-ReLU", "gn": "GN-ReLU", "evonorm_b0": "EvoNorm-B0", "evonorm_s0": "EvoNorm-S0",
          "no_norm_relu": "ReLU (no norm)"}
BASE_BATCH, BASE_LR, BASE_WARMUP = 8, 0.02, 50  # Base-Demo-Shapes.yaml
LOSS_PLOT, VALIDATION_PLOT = "miniature_loss.png", "miniature_validation.png"
EVALUATIONS = 10  # validation AP evaluations per run, evenly spaced, the last at its end
# Steps of 8 images per run, chosen by measurement (docs/detection.md, "How long the miniature trains"):
# 300 stopped BN-ReLU on its initial plateau (box AP 1.8); at 900 its training loss ends level with GN-ReLU's
# but its RPN is under-trained (box AP 39.7, seed 0); at 1800 the same seed reaches 70.8.
ITERATIONS = 1800
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
    """One training run of the grid; ``overrides``: config ``KEY VALUE`` pairs appended to its command, after the
    grid's own (a probe's change to the demo config, such as a deeper backbone; the grid itself has none)."""

    setting: Setting
    layer: str
    seed: int
    overrides: tuple[str, ...] = ()

    def output_dir(self, runs: Path, base_iterations: int) -> Path:
        return length_dir(runs, base_iterations) / self.setting.name / self.layer / f"seed{self.seed}"

    def command(self, runs: Path, base_iterations: int) -> list[str]:
        """The ``train_net`` command of this run (with ``--resume`` once the run has started):
        ``base_iterations`` steps' worth of images at this setting's images per step, evaluated
        ``EVALUATIONS`` times and checkpointed as often (an interrupted run loses at most a tenth)."""
        output_dir = self.output_dir(runs, base_iterations)
        resume = ["--resume"] if holds_run(output_dir) else []
        iterations = self.setting.iterations(base_iterations)
        steps = tuple(int(iterations * fraction) for fraction in DECAYS)
        period = max(1, iterations // EVALUATIONS)  # an evaluation and a checkpoint (the last one kept)
        return [
            sys.executable, "-m", "evonorm_suite.detection.train_net", "--threads", "1", *resume,
            "--config", str(CONFIGS / f"demo_shapes_{self.layer}.yaml"),
            "SEED", str(self.seed), "SOLVER.IMS_PER_BATCH", str(self.setting.images_per_step),
            "SOLVER.BASE_LR", str(self.setting.lr), "SOLVER.MAX_ITER", str(iterations),
            "SOLVER.STEPS", f"({steps[0]}, {steps[1]})", "SOLVER.WARMUP_ITERS", str(self.setting.warmup()),
            "TEST.EVAL_PERIOD", str(period), "SOLVER.CHECKPOINT_PERIOD", str(period), "SOLVER.CHECKPOINTS_KEPT", "1",
            "DATALOADER.NUM_WORKERS", "0", "OUTPUT_DIR", str(output_dir), *self.overrides,
        ]

    def cell(self, runs: Path, base_iterations: int) -> Cell:
        """This run as a cell of the grid: finished when its COCO results exist."""
        output_dir = self.output_dir(runs, base_iterations)
        return Cell(str(output_dir.relative_to(runs)), done=output_dir / RESULTS_FILE,
                    commands=(tuple(self.command(runs, base_iterations)),))


def length_dir(runs: Path, base_iterations: int) -> Path:
    """The folder of the runs that see ``base_iterations`` steps of ``BASE_BATCH`` images."""
    return runs / f"{base_iterations * BASE_BATCH}_images"


def loss_curve(output_dir: Path, images_per_step: int) -> list[list[float]]:
    """``[images seen, total loss]`` as detectron2 logged it (every 20 steps, the median of the last 20);
    a step logged twice (a resumed run) counts once, its last value."""
    iterations, losses = training_curve(output_dir)
    by_iteration = dict(zip(iterations, losses))
    return [[(iteration + 1) * images_per_step, round(loss, 4)] for iteration, loss in sorted(by_iteration.items())]


def validation_curve(output_dir: Path, images_per_step: int, iterations: int) -> list[list[float]]:
    """``[images seen, box AP, mask AP]`` of each evaluation detectron2 logged during the run (after step
    ``iteration``, logged as ``iteration``; the one after training as ``iterations``); an evaluation logged
    twice (a resumed run) counts once, its last value."""
    by_iteration = {e["iteration"]: (e["bbox/AP"], e["segm/AP"]) for e in logged_metrics(output_dir) if "bbox/AP" in e}
    return [[min(iteration + 1, iterations) * images_per_step, round(box, 2), round(mask, 2)]
            for iteration, (box, mask) in sorted(by_iteration.items())]


def summarize(runs_dir: Path, seeds: tuple[int, ...], base_iterations: int) -> dict:
    """Per setting and layer: every seed's box/mask AP, validation curve (with the last fifth's range and
    slope of its box AP, None for fewer than two evaluations) and training loss; the APs' mean and sample std
    and the largest last-fifth range over the seeds."""
    cells = []
    for setting in SETTINGS:
        for layer, label in LAYERS.items():
            per_seed = []
            for seed in seeds:
                folder = Run(setting, layer, seed).output_dir(runs_dir, base_iterations)
                if (folder / RESULTS_FILE).exists():
                    results = read_results(folder / RESULTS_FILE, tasks=("bbox", "segm"))
                    validation = validation_curve(folder, setting.images_per_step,
                                                  setting.iterations(base_iterations))
                    per_seed.append({"seed": seed, "box_ap": results["bbox"]["AP"], "mask_ap": results["segm"]["AP"],
                                     "box_ap50": results["bbox"]["AP50"], "mask_ap50": results["segm"]["AP50"],
                                     "validation": validation,
                                     "flatness": last_fifth_flatness([box for _, box, _ in validation]),
                                     "loss": loss_curve(folder, setting.images_per_step)})
            cell = {"setting": setting.name, "images_per_step": setting.images_per_step, "lr": setting.lr,
                    "iterations": setting.iterations(base_iterations),
                    "images_seen": setting.iterations(base_iterations) * setting.images_per_step,
                    "layer": layer, "label": label, "runs": per_seed}
            for key in ("box_ap", "mask_ap"):
                cell[f"{key}_mean"], cell[f"{key}_std"] = mean_and_std([r[key] for r in per_seed])
            cell["last_fifth_range_max"] = max((r["flatness"]["range"] for r in per_seed if r["flatness"]), default=None)
            cells.append(cell)
    return {"experiment": "detection miniature (Table 4)", "seeds": list(seeds), "evaluations_per_run": EVALUATIONS,
            "cells": cells}


def markdown(summary: dict) -> str:
    rows = [[c["setting"], c["label"], format_mean_std([r["box_ap"] for r in c["runs"]]),
             format_mean_std([r["mask_ap"] for r in c["runs"]]),
             "-" if c.get("last_fifth_range_max") is None else f"{c['last_fifth_range_max']:.1f}"]
            for c in summary["cells"]]
    return markdown_table(["setting", "layer", "box AP (mean ± std, n seeds)", "mask AP (mean ± std, n seeds)",
                           "box AP range, last fifth (largest over seeds)"], rows)


def mean_series(cell: dict, curve_of: Callable[[dict], dict[float, float]]) -> Series | None:
    """``curve_of(run)`` (images seen -> value) averaged over the cell's seeds at the images seen that all of
    them logged (error bars: the sample std over seeds), labelled with the cell's box AP and coloured by its
    layer (the same colour in every setting's panel); None without such curves."""
    curves = [curve for curve in map(curve_of, cell["runs"]) if curve]
    if not curves:
        return None
    seen = sorted(set.intersection(*(set(curve) for curve in curves)))
    means = [mean_and_std([curve[x] for curve in curves]) for x in seen]
    err = [std or 0.0 for _, std in means] if len(curves) > 1 else None
    label = f"{cell['label']}: box AP {format_mean_std([run['box_ap'] for run in cell['runs']])}"
    return Series(label, seen, [m for m, _ in means], err, color_key=cell["label"])


def plot_curves(summary: dict, path: Path, curve_of: Callable[[dict], dict[float, float]], ylabel: str) -> Path:
    """One panel per setting with runs (every setting if none has): each layer's ``curve_of(run)``
    against images seen, mean over seeds."""
    panels = {}
    for setting in SETTINGS:
        series = [mean_series(c, curve_of) for c in summary["cells"] if c["setting"] == setting.name]
        panels[f"{setting.name} ({setting.images_per_step} images per step)"] = [s for s in series if s]
    measured = {title: curves for title, curves in panels.items() if curves}
    return plot_series(path, measured or panels, xlabel="training images seen", ylabel=ylabel)


def plot_losses(summary: dict, path: Path) -> Path:
    return plot_curves(summary, path, lambda run: dict(map(tuple, run["loss"])), "total loss (median of 20 steps)")


def plot_validation(summary: dict, path: Path) -> Path:
    return plot_curves(summary, path, lambda run: {seen: box for seen, box, _ in run.get("validation", [])},
                       "validation box AP")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python detection/miniature.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", type=output_folder, default=Path("runs/detection_miniature"),
                        help="root of the runs: RUNS_DIR/<images>_images/<setting>/<layer>/seed<k> (default "
                             "%(default)s)")
    parser.add_argument("--out", type=output_folder, default=Path("docs/results/detection"),
                        help="where miniature.json, .md and the PNGs go (default %(default)s)")
    parser.add_argument("--iterations", type=int, default=ITERATIONS,
                        help=f"SGD steps of {BASE_BATCH} images per run (default {ITERATIONS}); a setting with fewer "
                             "images per step runs proportionally more steps, so that every setting sees the same images")
    parser.add_argument("--seeds", type=seed_value, nargs="+", action=DistinctValues, default=[0, 1, 2, 3, 4],
                        help="seeds per layer and setting (default 0-4)")
    parser.add_argument("--layers", nargs="+", choices=sorted(LAYERS), action=DistinctValues, default=list(LAYERS),
                        help=f"layers to run (default: all, {' '.join(LAYERS)})")
    parser.add_argument("--settings", nargs="+", choices=[s.name for s in SETTINGS], action=DistinctValues,
                        default=[s.name for s in SETTINGS],
                        help=f"settings to run (default: all, {' '.join(s.name for s in SETTINGS)})")
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at once, one thread each (default %(default)s)")
    parser.add_argument("--report-only", action="store_true", help="only summarize the finished runs")
    args = parser.parse_args(argv)
    for flag, value in (("--iterations", args.iterations), ("--jobs", args.jobs)):
        if value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    try:
        return run_and_summarize(args, argv)
    except CorruptFileError as error:  # a damaged result or log of a finished run: named, with what to do
        raise SystemExit(f"error: {error}") from None


def run_and_summarize(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Train the grid's missing runs (unless --report-only), then write the summary, table and plots."""
    if not args.report_only:
        runs = [Run(s, layer, seed) for s in SETTINGS if s.name in args.settings for layer in args.layers
                for seed in args.seeds]
        steps = ", ".join(f"{s.name}: {s.iterations(args.iterations)} steps" for s in SETTINGS if s.name in args.settings)
        print(f"detection miniature: {args.iterations * BASE_BATCH} images per run ({steps}), into "
              f"{length_dir(args.runs_dir, args.iterations)}", flush=True)
        try:
            result = run_grid([run.cell(args.runs_dir, args.iterations) for run in runs], args.runs_dir,
                              jobs=args.jobs, name="detection miniature")
        except RunDirError as error:  # another grid holds the folder
            raise SystemExit(f"error: {error}") from None
        if result.exit_status:
            return result.exit_status
    summary = {**summarize(args.runs_dir, tuple(args.seeds), args.iterations), "iterations": args.iterations,
               "command": command_line("python detection/miniature.py", argv)}
    if not any(cell["runs"] for cell in summary["cells"]):  # --report-only on a folder without runs of this length
        raise SystemExit(f"error: no finished run under {length_dir(args.runs_dir, args.iterations)} (no "
                         f"{RESULTS_FILE}), so nothing in {args.out} is replaced: train the grid there first "
                         f"(python detection/miniature.py --runs-dir {args.runs_dir}) or name the folder that holds "
                         "one (python tools/reproduce.py --only table4 keeps its grid in runs/reproduction/detection)")
    atomic_write_json(args.out / "miniature.json", summary)
    print(markdown(summary))
    logged = any(len(run["validation"]) > 1 for cell in summary["cells"] for run in cell["runs"])  # a curve
    validation = plot_validation(summary, args.out / VALIDATION_PLOT) if logged else "fewer than 2 evaluations a run (no plot)"
    print(f"summary: {args.out / 'miniature.json'}, training losses: {plot_losses(summary, args.out / LOSS_PLOT)}, "
          f"validation curves: {validation}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
