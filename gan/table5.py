"""Table 5 in miniature: six generator layers x three seeds on the digits, digits-classifier IS/FID.

    python gan/table5.py                        # the whole grid (about 2 h on 2 cores), resumable
    python gan/table5.py --report-only          # re-aggregate finished runs

Every (layer, seed) trains the digits preset of ``gan/train_biggan.py`` for ``--steps`` in its
own process (one thread, ``--jobs`` at once), keeping four snapshots, and is then evaluated by
``gan/evaluate.py --all-snapshots`` (standing statistics, digits-classifier IS/FID against the
training digits with as many samples as there are held-out digits); the paper reports each
run at its peak, so each run's result is its best-FID snapshot. Each run's output goes to
``RUNS_DIR/<layer>/seed<k>.log``. Finished runs (``metrics.json``) are not rerun, started ones
resume; a run that fails is named at the end (no summary is written then) and the others go
on. The per-layer median and best over seeds, the FID floor (held-out real digits)
and ceiling (noise), the command and the CPU time go to ``--out/table5.json``; the markdown
table to ``--out/table5.md``; seed 0's final sample grid of each layer to ``--out/<layer>.png``.
Installed as ``evonorm-gan-table5``.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from evonorm_core.experiment.config import command_line
from evonorm_core.experiment.files import atomic_write_json, atomic_write_text, read_json
from evonorm_core.experiment.grid import Cell, run_grid
from evonorm_core.experiment.rundir import holds_run
from evonorm_suite.gan.config import PRESETS
from evonorm_suite.gan.metrics import digits_calibration
from evonorm_suite.gan.report import LABELS, aggregate, find_metrics, layer_name, markdown

DEFAULT_STEPS = PRESETS["digits"].total_steps


def run_cell(layer: str, seed: int, runs_dir: Path, steps: int) -> Cell:
    """The grid cell that trains one (layer, seed) (resuming a started run) and evaluates its snapshots."""
    run_dir = runs_dir / layer / f"seed{seed}"
    train = (sys.executable, "-m", "evonorm_suite.gan.train_biggan", "--norm", layer, "--seed", str(seed), "--run-dir",
             str(runs_dir / layer), "--total-steps", str(steps), "--keep-every", str(max(1, steps // 4)),
             "--eval-every", "0", "--threads", "1", *(["--resume"] if holds_run(run_dir) else []))
    evaluate = (sys.executable, "-m", "evonorm_suite.gan.evaluate", str(run_dir), "--all-snapshots")
    return Cell(f"{layer}/seed{seed}", done=run_dir / "metrics.json", commands=(train, evaluate))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python gan/table5.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", nargs="+", choices=sorted(LABELS), default=list(LABELS), help="generator layers")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds per layer (Table 5: 3)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"G steps per run (default {DEFAULT_STEPS})")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one thread each (default 2)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/gan_table5"), help="one folder per layer and seed")
    parser.add_argument("--out", type=Path, default=Path("docs/results/gan"), help="where table5.json/.md and grids go")
    parser.add_argument("--report-only", action="store_true", help="only aggregate the finished runs")
    args = parser.parse_args(argv)
    if args.steps < 4 or args.jobs < 1 or min(args.seeds) < 0:
        parser.error(f"--steps must be >= 4, --jobs >= 1 and --seeds >= 0, got {args.steps}, {args.jobs}, {args.seeds}")
    summary_path = args.out / "table5.json"
    previous = read_json(summary_path, what="Table 5 summary") if summary_path.exists() else {}
    cpu_seconds = previous.get("cpu_seconds", 0.0)
    if not args.report_only:
        cells = [run_cell(layer, seed, args.runs_dir, args.steps) for layer in args.layers for seed in args.seeds]
        print(f"Table 5 miniature: runs of {args.steps} steps into {args.runs_dir}", flush=True)
        result = run_grid(cells, args.runs_dir, jobs=args.jobs, name="table5")
        if result.exit_status:
            return result.exit_status
        cpu_seconds += sum(result.seconds.values())  # one thread per run
    layers = aggregate([read_json(p, what="run metrics") for p in find_metrics([args.runs_dir])])
    resolution = PRESETS["digits"].resolution
    summary = {
        "experiment": "Table 5 miniature", "command": command_line("python gan/table5.py", argv),
        "cpu_seconds": cpu_seconds, "steps": args.steps, "feature_extractor": "digits-classifier",
        "description": f"class-conditional BigGAN-deep (digits preset, {resolution}x{resolution} greyscale) on the "
                       f"embedded digits, {args.steps} steps per run",
        **digits_calibration(resolution), "layers": layers,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    for layer in args.layers:
        grids = sorted((args.runs_dir / layer / "seed0" / "samples").glob("step_*.png"))
        if grids:
            shutil.copyfile(grids[-1], args.out / f"{layer}.png")
            for key in (key for key in summary["layers"] if layer_name(key) == layer):
                summary["layers"][key]["grid_png"] = str(args.out / f"{layer}.png")
    atomic_write_json(summary_path, summary)
    table = markdown(layers)
    atomic_write_text(args.out / "table5.md", table + "\n")
    print(table)
    print(f"FID floor (held-out digits) {summary['fid_floor']:.2f}, noise {summary['fid_noise']:.2f}; "
          f"summary: {summary_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
