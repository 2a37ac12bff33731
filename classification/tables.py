"""The paper's classification tables as runnable grids, with the paper's numbers beside them.

    python classification/tables.py list
    python classification/tables.py run table3 --dry-run                 # paper-scale commands
    python classification/tables.py run table3 --scale mini --runs-dir runs/t3   # runs here, on digits
    python classification/tables.py report table3 runs/t3               # markdown + PNG

``--scale paper`` is the paper's grid: one ``torchrun`` command per cell (ImageNet, the
paper's workers and images per worker, LR scaled linearly); it executes them one after
another unless ``--dry-run``. ``--scale mini`` maps ResNet-50/MobileNetV2/EfficientNet-B0
to their CIFAR anchors and trains every cell on the embedded digits data here, ``--jobs``
at a time (each in a child process of one thread), so the paper's claims can be checked in
miniature on a CPU (models without an anchor are skipped, and said so). Each cell's output
goes to ``RUNS_DIR/<cell>.log``. Finished cells (``result.json`` present) are skipped and
started ones resume, so an interrupted grid continues where it stopped; a cell that fails is
named at the end and the others go on.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import shlex
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from evonorm_core.experiment import data
from evonorm_core.experiment.config import config_to_dict
from evonorm_core.experiment.files import CorruptFileError, atomic_write_json, read_json
from evonorm_core.experiment.grid import Cell as GridCell
from evonorm_core.experiment.grid import run_grid
from evonorm_core.experiment.rundir import holds_run
from evonorm_core.experiment.tables import Series, format_mean_std, markdown_table, mean_std_fields, plot_series
from evonorm_suite.classification.paper_tables import LAYERS, TABLES, WORKERS, PaperTable
from evonorm_suite.classification.train import TrainConfig, train

MINI_MODELS = {"resnet50": "resnet50_cifar", "mobilenetv2": "mobilenetv2_cifar", "efficientnet_b0": "efficientnet_cifar"}
SCALES = ("paper", "mini")
DIVERGED = float("nan")  # a run whose loss became NaN/inf


@dataclass(frozen=True)
class MiniScale:
    """The reduced grid that runs on the embedded digits, chosen by measurement (docs/classification.md).

    CIFAR anchors with one block per stage (``anchor_depth``), 16x16 images (MobileNetV2-CIFAR
    ends at 2x2, not 1x1), 10 epochs at every batch size (BN-ReLU reaches 96-99% at batch 128
    by epoch 7-10), the paper's ImageNet base LR of 0.1 per 256 images scaled linearly with the
    batch (Table 3's rule; at 0.2 per 256, the search proxy's rate, EvoNorm-B0 diverged within
    20 steps), cosine schedule without warmup, three seeds.
    """

    batches: tuple[int, ...] = (128, 16, 4, 2)
    seeds: tuple[int, ...] = (0, 1, 2)
    epochs: float = 10.0
    data: str = "digits"  # or "cifar10" (with data_dir)
    data_dir: str | None = None
    image_size: int = 16
    base_lr: float = 0.1
    anchor_depth: float = 0.01


@dataclass(frozen=True)
class Cell:
    """One training run of a grid."""

    model: str  # paper model name (evonorm_core.classifiers.models)
    label: str  # paper row label
    batch: int | None  # images per worker; None: the recipe's
    seed: int = 0

    @property
    def name(self) -> str:
        """``model/layer/b<batch>/seed<k>``: the cell's folder under the runs folder, and its id in the grid."""
        batch = "recipe" if self.batch is None else f"b{self.batch}"
        return f"{self.model}/{LAYERS[self.label]}/{batch}/seed{self.seed}"

    def run_dir(self, runs_dir: Path) -> Path:
        return runs_dir / self.name


def cells(table: PaperTable, batches: tuple[int, ...] | None, seeds: tuple[int, ...],
          models: list[str] | None = None, layers: list[str] | None = None) -> list[Cell]:
    """Every runnable cell of ``table`` (rows with a registered layer), filtered."""
    out = []
    for model, label in table.accuracy:
        if LAYERS[label] is None or (models and model not in models) or (layers and LAYERS[label] not in layers):
            continue
        for batch in (batches or table.batches or (None,)):
            out.extend(Cell(model, label, batch, seed) for seed in seeds)
    return out


def paper_command(table: PaperTable, cell: Cell, runs_dir: Path, data_dir: str) -> list[str]:
    """The ``torchrun`` command of one paper-scale cell (8 GPUs per node); a started cell resumes."""
    workers = WORKERS.get(cell.model, 32)
    nodes, per_node = max(1, workers // 8), min(workers, 8)
    folder = cell.run_dir(runs_dir)
    cmd = ["torchrun", f"--nnodes={nodes}", f"--nproc_per_node={per_node}", "-m", "evonorm_suite.classification.train",
           "--model", cell.model, "--norm-act", LAYERS[cell.label], "--data", "imagenet", "--data-dir", data_dir,
           "--seed", str(cell.seed), "--output-dir", str(folder), *(["--resume"] if holds_run(folder) else []),
           "--no-progress"]
    cmd += ["--table", table.key]  # the table's whole recipe, resolved by classification/train.py
    if cell.batch is not None:
        cmd += ["--batch-size", str(cell.batch)]
    return cmd


def mini_config(cell: Cell, scale: MiniScale, runs_dir: Path) -> TrainConfig:
    """The training run of one mini-scale cell; a started cell resumes."""
    return TrainConfig(
        model=MINI_MODELS[cell.model], norm_act=LAYERS[cell.label], data=scale.data, data_dir=scale.data_dir,
        image_size=scale.image_size,
        anchor_depth=scale.anchor_depth,
        batch_size=cell.batch or 128, epochs=scale.epochs, base_lr=scale.base_lr, schedule="cosine",
        warmup_epochs=0.0, seed=cell.seed, output_dir=str(cell.run_dir(runs_dir)),
        resume=holds_run(cell.run_dir(runs_dir)), progress=False,
    )


def check_selection(flag: str, chosen: list[str] | None, accepted: list[str]) -> None:
    """Exit with an error naming ``flag`` if ``chosen`` holds a name ``accepted`` lacks."""
    unknown = sorted(set(chosen or ()) - set(accepted))
    if unknown:
        raise SystemExit(f"error: {flag} {' '.join(unknown)}: not in this table; accepted: {', '.join(accepted)}")


def run_table(args: argparse.Namespace) -> int:
    table = TABLES[args.table]
    check_selection("--models", args.models, table.models)
    check_selection("--layers", args.layers, [LAYERS[label] for label in table.layers if LAYERS[label]])
    run = run_paper_scale if args.scale == "paper" else run_mini_scale
    return run(table, args, Path(args.runs_dir))


def run_paper_scale(table: PaperTable, args: argparse.Namespace, runs_dir: Path) -> int:
    """Print the grid's ``torchrun`` commands; unless ``--dry-run``, run the unfinished ones one at a
    time (each takes the whole machine)."""
    grid = cells(table, tuple(args.batches) if args.batches else None, tuple(args.seeds or (0,)), args.models,
                 args.layers)
    commands = {cell: paper_command(table, cell, runs_dir, args.data_dir) for cell in grid}
    for command in commands.values():
        print(shlex.join(command))
    if args.dry_run:
        return 0
    jobs = [GridCell(cell.name, done=cell.run_dir(runs_dir) / "result.json", commands=(tuple(command),))
            for cell, command in commands.items()]
    return run_grid(jobs, runs_dir, jobs=1, name=f"{table.key} paper").exit_status


def run_mini_scale(table: PaperTable, args: argparse.Namespace, runs_dir: Path) -> int:
    """Train the mini-scale grid here, ``--jobs`` cells at a time (``--dry-run``: list the cells)."""
    scale = MiniScale(**{k: v for k, v in (("batches", tuple(args.batches or ())), ("seeds", tuple(args.seeds or ())),
                                           ("epochs", args.epochs), ("image_size", args.image_size),
                                           ("data", args.data), ("data_dir", args.data_dir if args.data != "digits" else None))
                          if v})
    if scale.data == "cifar10":
        data.cifar10(scale.data_dir)  # a missing folder is one clear error here, not one per cell
    models = [m for m in table.models if m in MINI_MODELS and (not args.models or m in args.models)]
    skipped = [m for m in table.models if m not in MINI_MODELS]
    if skipped:
        print(f"mini scale: no CIFAR anchor for {', '.join(skipped)}; those columns stay paper-only")
    grid = cells(table, scale.batches if table.is_batch_sweep else None, scale.seeds, models, args.layers)
    configs = {cell: mini_config(cell, scale, runs_dir) for cell in grid}
    jobs = [GridCell(cell.name, done=Path(config.output_dir) / "result.json",
                     function=functools.partial(run_mini_cell, config)) for cell, config in configs.items()]
    if args.dry_run:
        finished = [job.finished() for job in jobs]
        print(f"{table.key} mini: {len(jobs)} runs, {sum(finished)} done, {len(jobs) - sum(finished)} to train")
        for i, (c, done) in enumerate(zip(configs.values(), finished), 1):
            print(f"[{i}/{len(jobs)}] {c.model} {c.norm_act} batch {c.batch_size} seed {c.seed}{' (done)' * done}")
        return 0
    return run_grid(jobs, runs_dir, jobs=args.jobs, name=f"{table.key} mini").exit_status


def run_mini_cell(config: TrainConfig) -> None:
    """Train one mini-scale cell on one thread; a diverged run is recorded as such (the paper's "1e-3")."""
    torch.set_num_threads(1)
    name = f"{config.model} {config.norm_act} batch {config.batch_size} seed {config.seed}"
    try:
        result = train(config)
    except FloatingPointError as error:
        atomic_write_json(Path(config.output_dir) / "result.json",
                          {"config": config_to_dict(config), "final_top1": None, "diverged": str(error)})
        print(f"{name}: diverged ({error})")
        return
    print(f"{name}: top-1 {result['final_top1']:.1f}% after {result['steps']} steps")


def load_runs(runs_dir: Path) -> dict[tuple[str, str, int | None], list[dict]]:
    """``(paper model, layer name, batch) -> [result.json of each seed]`` under ``runs_dir``."""
    anchors = {v: k for k, v in MINI_MODELS.items()}
    found: dict[tuple[str, str, int | None], list[dict]] = {}
    for path in sorted(runs_dir.rglob("result.json")):
        result = read_json(path, what="run result")
        if not isinstance(result, dict) or not isinstance(result.get("config"), dict) or "final_top1" not in result:
            raise CorruptFileError(f"run result {str(path)!r} is not a result.json of classification/train.py "
                                   "(no config or final_top1); delete it and run the cell again")
        config = result["config"]
        batch_dir = path.parent.parent.name
        batch = None if batch_dir == "recipe" else int(batch_dir[1:])
        found.setdefault((anchors.get(config["model"], config["model"]), config["norm_act"], batch), []).append(result)
    return found


def load_results(runs_dir: Path) -> dict[tuple[str, str, int | None], list[float]]:
    """``(paper model, layer name, batch) -> [final top-1 per seed]`` (NaN: the run diverged)."""
    return {key: [DIVERGED if r["final_top1"] is None else r["final_top1"] for r in runs]
            for key, runs in load_runs(runs_dir).items()}


def summary(table: PaperTable, runs_dir: Path) -> dict:
    """Every measured cell of ``table`` with per-seed final top-1, mean, spread and learning curves (JSON-ready)."""
    cells_out = []
    for (model, layer, batch), runs in sorted(load_runs(runs_dir).items(), key=lambda kv: (kv[0][0], kv[0][1], -(kv[0][2] or 0))):
        finals = [r["final_top1"] for r in runs if r["final_top1"] is not None]
        label = next((lbl for lbl, name in LAYERS.items() if name == layer), layer)
        cells_out.append({
            "model": model, "layer": layer, "label": label, "batch": batch,
            "seeds": [r["config"]["seed"] for r in runs], "final_top1": [r["final_top1"] for r in runs],
            **mean_std_fields(finals),
            "diverged": sum(r["final_top1"] is None for r in runs),
            "paper": table.paper_value(model, label, batch) if label in LAYERS else None,
            "curves": [[h["top1"] for h in r.get("history", [])] for r in runs],
        })
    return {"table": table.key, "title": table.title, "runs_dir": str(runs_dir), "cells": cells_out}


def plot_curves(table: PaperTable, results: dict[tuple[str, str, int | None], list[dict]], path: Path) -> Path:
    """Validation top-1 per epoch (mean and std over seeds) of every layer at the largest batch measured."""
    panels = {}
    for model in table.models:
        batches = [b for (m, _, b) in results if m == model]
        if not batches:
            continue
        batch = max(batches, key=lambda b: b or 0)
        curves = []
        for label in table.layers:
            runs = results.get((model, LAYERS[label], batch), [])
            histories = [[h["top1"] for h in r.get("history", [])] for r in runs if r.get("history")]
            if not histories:
                continue
            length = min(map(len, histories))
            points = [[h[e] for h in histories] for e in range(length)]
            curves.append(Series(label, list(range(1, length + 1)), [statistics.mean(p) for p in points],
                                 [statistics.stdev(p) if len(p) > 1 else 0.0 for p in points]))
        panels[f"{MINI_MODELS.get(model, model)}, batch {batch}"] = curves
    return plot_series(path, panels, xlabel="epoch", ylabel="validation top-1 (%)")


def format_measured(values: list[float] | None) -> str:
    if not values:
        return "-"
    if any(math.isnan(v) for v in values):
        return f"diverged ({sum(math.isnan(v) for v in values)}/{len(values)})"
    return format_mean_std(values)


def report_markdown(table: PaperTable, results: dict) -> str:
    """Paper and measured top-1 side by side, one markdown table per model."""
    lines = [f"## {table.title}", ""]
    if table.note:
        lines += [table.note, ""]
    batches = sorted({b for (_, _, b) in results if b is not None}, reverse=True) or list(table.batches)
    for model in table.models:
        measured_any = any(m == model for (m, _, _) in results)
        lines.append(f"### {model}" + ("" if measured_any else " (not measured)"))
        if table.is_batch_sweep:
            header = ["layer"] + [f"{b} paper" for b in table.batches] + [f"{b} measured" for b in batches]
            rows = [[label, *(f"{v:g}" for v in table.accuracy[(model, label)]),
                     *(format_measured(results.get((model, LAYERS[label], b))) for b in batches)]
                    for label in table.layers if (model, label) in table.accuracy]
        else:
            header = ["layer", "paper", "measured"]
            rows = [[label, f"{table.paper_value(model, label):g}",
                     format_measured(results.get((model, LAYERS[label], None))) if LAYERS[label] else "n/a"]
                    for label in table.layers]
        lines += [markdown_table(header, rows), ""]
    return "\n".join(lines)


def plot_batch_sweep(table: PaperTable, results: dict, path: Path) -> Path:
    """Accuracy vs images per worker, one curve per layer (as the paper's Fig. 1/2 right): the
    paper's ImageNet numbers and the measured ones (mean and std over seeds) side by side."""
    panels = {}
    for model in table.models:
        paper, ours = [], []
        for label in table.layers:
            if (model, label) not in table.accuracy:
                continue
            paper.append(Series(label, list(table.batches), list(table.accuracy[(model, label)])))
            measured = sorted((b, v) for (m, n, b), v in results.items() if m == model and n == LAYERS[label] and b)
            finite = [(b, [x for x in v if not math.isnan(x)]) for b, v in measured]
            finite = [(b, v) for b, v in finite if v]
            if finite:
                ours.append(Series(label, [b for b, _ in finite], [statistics.mean(v) for _, v in finite],
                                   [statistics.stdev(v) if len(v) > 1 else 0.0 for _, v in finite], dashed=True))
        panels[f"{model}: paper (ImageNet)"] = paper
        panels[f"{MINI_MODELS.get(model, model)}: measured (mean, std over seeds)"] = ours
    return plot_series(path, panels, xlabel="images per worker", ylabel="top-1 (%)", log2_x=True, invert_x=True)


def report(args: argparse.Namespace) -> None:
    table = TABLES[args.table]
    runs_dir = Path(args.runs_dir)
    if not runs_dir.is_dir():
        raise SystemExit(f"error: runs directory {str(runs_dir)!r} does not exist")
    results = load_results(runs_dir)
    print(report_markdown(table, results))
    print(f"measured: final top-1 of the runs under {runs_dir} (mean ± std over seeds); mini-scale runs are the "
          "CIFAR anchors trained on the embedded digits, not ImageNet, so compare trends, not values.")
    if table.is_batch_sweep:
        png = Path(args.png or runs_dir / f"{table.key}.png")
        plot_batch_sweep(table, results, png)
        print(f"accuracy vs batch size: {png}")
    curves = plot_curves(table, load_runs(runs_dir), Path(args.curves or runs_dir / f"{table.key}_curves.png"))
    print(f"learning curves: {curves}")
    if args.json:
        atomic_write_json(args.json, summary(table, runs_dir))
        print(f"summary: {args.json}")


def list_tables(_: argparse.Namespace) -> None:
    for table in TABLES.values():
        runnable = sum(LAYERS[label] is not None for label in table.layers)
        grid = f"{len(table.models)} models x {len(table.layers)} layers ({runnable} runnable)"
        if table.is_batch_sweep:
            grid += f" x {len(table.batches)} batch sizes {table.batches}"
        print(f"{table.key:8s} {grid}\n         {table.title}")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python classification/tables.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the tables and their grids").set_defaults(func=list_tables)
    run = sub.add_parser("run", help="run (or print) a table's grid")
    run.add_argument("table", choices=sorted(TABLES))
    run.add_argument("--scale", choices=SCALES, default="paper",
                     help="paper: ImageNet torchrun commands; mini: anchors on the embedded digits, runs here")
    run.add_argument("--runs-dir", default="runs/tables", help="one sub-folder per cell with result.json")
    run.add_argument("--data-dir", default=os.environ.get("IMAGENET", "/path/to/imagenet"),
                     help="ImageNet folder for --scale paper (default: $IMAGENET); CIFAR-10's parent folder for "
                          "--scale mini --data cifar10")
    run.add_argument("--data", choices=("digits", "cifar10"), default="digits",
                     help="mini scale: the embedded digits (default) or CIFAR-10 from --data-dir")
    run.add_argument("--dry-run", action="store_true", help="print the cells/commands without training")
    run.add_argument("--batches", type=int, nargs="+", help="images per worker to run (default: the table's / mini's)")
    run.add_argument("--seeds", type=int, nargs="+",
                     help=f"seeds per cell (default: 0 at paper scale, {' '.join(map(str, MiniScale.seeds))} at mini scale)")
    run.add_argument("--jobs", type=positive_int, default=2,
                     help="mini scale: cells trained at once, one thread each (paper scale runs one cell at a time)")
    run.add_argument("--models", nargs="+", help="only these paper models (e.g. resnet50 mobilenetv2)")
    run.add_argument("--layers", nargs="+", help="only these layers (registry names)")
    run.add_argument("--epochs", type=float, help=f"mini scale: epochs per run (default {MiniScale.epochs})")
    run.add_argument("--image-size", type=int, help=f"mini scale: digit image size (default {MiniScale.image_size})")
    run.set_defaults(func=run_table)
    rep = sub.add_parser("report", help="paper vs measured as markdown (+ PNG for batch-size tables)")
    rep.add_argument("table", choices=sorted(TABLES))
    rep.add_argument("runs_dir", help="the --runs-dir of `run`")
    rep.add_argument("--png", help="where to write the accuracy-vs-batch plot (default: RUNS_DIR/TABLE.png)")
    rep.add_argument("--curves", help="where to write the learning curves (default: RUNS_DIR/TABLE_curves.png)")
    rep.add_argument("--json", help="also write every measured cell (seeds, mean, std, curves) as JSON here")
    rep.set_defaults(func=report)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return args.func(args) or 0
    except (FileNotFoundError, CorruptFileError) as error:
        raise SystemExit(f"error: {error}") from None


if __name__ == "__main__":
    sys.exit(main())
