"""The paper's classification tables as runnable grids, with the paper's numbers beside them.

    python classification/tables.py list
    python classification/tables.py run table3 --dry-run                 # paper-scale commands
    python classification/tables.py run table3 --scale mini --runs-dir runs/t3   # runs here, on MNIST
    python classification/tables.py report table3 runs/t3               # markdown + PNG

``--scale paper`` is the paper's grid: one ``torchrun`` command per cell (ImageNet, the
paper's workers and images per worker, LR scaled linearly); it executes them one after
another unless ``--dry-run``. ``--scale mini`` maps ResNet-50/MobileNetV2/EfficientNet-B0
to their CIFAR anchors and trains every cell, with the no-normalization controls, on the
embedded MNIST digits here, ``--jobs`` at a time (each in a child process of one thread), so
the paper's claims can be checked in miniature on a CPU (models without an anchor are
skipped, and said so). Each cell's output goes to ``RUNS_DIR/<cell>.log``. Finished cells
(``result.json`` present) are skipped and started ones resume, so an interrupted grid
continues where it stopped; a finished cell trained with other settings (:data:`SETTING_KEYS`)
is refused, not reused; a cell that fails is named at the end and the others go on.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import re
import shlex
import statistics
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from evonorm_core.classifiers.data import MNIST_DATASETS
from evonorm_core.experiment import data
from evonorm_core.experiment.arguments import DistinctValues, output_file, positive_int
from evonorm_core.experiment.arguments import seed as seed_value
from evonorm_core.experiment.children import check_autograd_survives_fork
from evonorm_core.experiment.config import ConfigError, config_to_dict
from evonorm_core.experiment.convergence import last_fifth_flatness
from evonorm_core.experiment.distributed import describe_device, training_device
from evonorm_core.experiment.files import CorruptFileError, atomic_write_json
from evonorm_core.experiment.grid import Cell as GridCell
from evonorm_core.experiment.grid import run_grid
from evonorm_core.experiment.rundir import RunDirError, holds_run
from evonorm_core.experiment.tables import (
    Series,
    format_mean_std,
    markdown_table,
    mean_std_fields,
    plot_series,
    pyplot,
    save_figure,
)
from evonorm_suite.classification.paper_tables import CONTROLS, LAYERS, TABLES, WORKERS, PaperTable
from evonorm_suite.classification.recipes import scaled_lr
from evonorm_suite.classification.train import TrainConfig, build_datasets, read_result, resolve_recipe, train

MINI_MODELS = {"resnet50": "resnet50_cifar", "mobilenetv2": "mobilenetv2_cifar", "efficientnet_b0": "efficientnet_cifar"}
SCALES = ("paper", "mini")
MINI_DATA = (*MNIST_DATASETS, "cifar10")
DIVERGED = float("nan")  # a run whose loss became NaN/inf
DIVERGED_TOP1 = 0.0  # what a diverged run scores in means and verdicts (the paper's "1e-3" for a layer that does not train)
CHANCE_TOP1 = 10.0  # top-1 (%) of guessing among the 10 classes of both mini-scale datasets
# --data cifar10 at mini scale: the proxy task's framing (24 px crops of the 32 px images, validated whole)
CIFAR10_FRAMING = {"image_size": 32, "crop_size": 24, "validation": "full"}
# The settings of a mini-scale run that make its result comparable with another cell's (TrainConfig fields)
SETTING_KEYS = ("data", "image_size", "crop_size", "validation", "anchor_depth", "batch_size", "workers", "epochs",
                "base_lr", "schedule", "warmup_epochs")


@dataclass(frozen=True)
class MiniScale:
    """The reduced grid that runs here on the embedded MNIST digits, set by measurement so that BN-ReLU
    is separated from the no-normalization control (docs/classification.md, "How the miniature's
    difficulty was chosen": at ``anchor_depth`` 0.34 without warmup a ResNet without normalization
    reached 90-97 % on 4 of 5 seeds; at full depth with the warmup it failed on 3 of 3).

    The CIFAR anchors at the paper's depth (``anchor_depth`` 1.0: ResNet50-CIFAR's 3-4-6-3
    bottlenecks) on the 4,000 training digits, trained on 24 px random crops of the 28 px images
    and validated on the centre 24 px crop of the 1,000 validation digits (the crops' framing:
    MNIST's digits sit in a black frame, so validating the whole image changes per-sample
    statistics and breaks GN and EvoNorm-S); SGD with Nesterov momentum at the paper's base LR per
    256 images scaled linearly with the total batch (Table 3's MobileNetV2 block at the paper's
    0.03, every row), ``warmup_epochs`` of linear warmup (the paper's schedules "come with a linear
    warmup phase") then cosine, ``epochs`` at every batch size.

    Table 3 trains ``workers`` simulated workers (ghost batches, ``classification/train.py --workers``)
    of ``batches`` images each: the total batch is ``workers`` x images per worker, as the paper
    keeps its workers fixed and varies the images per worker from 128 to 4. The paper has 8 workers
    for ResNet-50 and 32 for MobileNetV2; the miniature keeps 8 for both (32 x 32 images would be a
    quarter of the 4,000 training digits in one step).

    The paper's Table 2 is its Table 3's setting at the original 128 images per worker (R-50 BN-ReLU
    76.1 in both). The anchors of ``table2_on_workers`` train it as the miniature's Table 3 column of
    the most images per worker (``workers`` of ``max(batches)``); the others as one worker of
    ``table2_batch`` images (the paper's 128 per worker). ResNet50-CIFAR is the first kind since
    2026-11-30: as one worker of 128 its no-normalization control trained on 2 of 5 seeds, so BN-ReLU
    was not separated from it, while at 8 x 32 it diverged on 4 of 5 and reached 11.7 % on the fifth.
    MobileNetV2-CIFAR's control fails as one worker of 128 on every seed, and the anchor keeps that
    setting.
    """

    batches: tuple[int, ...] = (32, 16, 8, 4)
    workers: int = 8
    table2_batch: int = 128
    table2_on_workers: tuple[str, ...] = ("resnet50",)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    epochs: float = 15.0
    data: str = "mnist"  # or a variation of it ("mnist-rot", ...), or "cifar10" (with data_dir and CIFAR10_FRAMING)
    data_dir: str | None = None
    image_size: int = 28
    crop_size: int | None = 24
    validation: str = "centre"
    base_lr: float = 0.1
    anchor_depth: float = 1.0
    warmup_epochs: float = 1.0

    def step_of(self, table: PaperTable, model: str, batch: int | None) -> tuple[int, int]:
        """``(workers, images per worker)`` of ``model``'s cells of ``table`` at ``batch`` images per worker
        (None: Table 2's, by ``table2_on_workers``)."""
        if table.is_batch_sweep:
            return self.workers, batch
        return (self.workers, max(self.batches)) if model in self.table2_on_workers else (1, self.table2_batch)

    def base_lr_of(self, table: PaperTable, model: str) -> float:
        """LR per 256 images of ``model``'s cells: the paper table's where it sets one (Table 3's
        MobileNetV2: 0.03 for every row), else ``base_lr``."""
        return table.recipe.get(model, {}).get("base_lr", self.base_lr)

    def grid(self, table: PaperTable, models: list[str] | None = None, layers: list[str] | None = None) -> list[Cell]:
        """Every run of ``table``'s mini-scale grid, its controls included (only ``models``, ``layers`` if given)."""
        return cells(table, self.batches if table.is_batch_sweep else None, self.seeds, models, layers,
                     with_controls=True)

    def setting(self, table: PaperTable, model: str, batch: int | None) -> dict[str, str | int | float | None]:
        """The :data:`SETTING_KEYS` (and ``data_dir``) of ``model``'s cells of ``table`` at ``batch`` images
        per worker (None: Table 2's, :meth:`step_of`), as TrainConfig fields."""
        workers, images = self.step_of(table, model, batch)
        return {"data": self.data, "data_dir": self.data_dir, "image_size": self.image_size,
                "crop_size": self.crop_size, "validation": self.validation, "anchor_depth": self.anchor_depth,
                "batch_size": images, "workers": workers, "epochs": self.epochs,
                "base_lr": self.base_lr_of(table, model), "schedule": "cosine",
                "warmup_epochs": self.warmup_epochs}


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
          models: list[str] | None = None, layers: list[str] | None = None, with_controls: bool = False) -> list[Cell]:
    """Every cell of ``table`` (its rows, and the miniature's controls ``with_controls``), filtered,
    model by model."""
    out = []
    for model in table.models:
        if models and model not in models:
            continue
        for label in table.row_labels(model, with_controls):
            if layers and LAYERS[label] not in layers:
                continue
            for batch in (batches or table.batches or (None,)):
                out.extend(Cell(model, label, batch, seed) for seed in seeds)
    return out


GPUS_PER_NODE = 8
# the first node's address, left for the shell of every node to expand (see shell_line)
RENDEZVOUS_ENDPOINT = "--rdzv-endpoint=$MASTER_ADDR:29400"


def torchrun(workers: int, run_id: str) -> list[str]:
    """``torchrun`` launching ``workers`` processes, 8 a node. Several nodes meet at ``$MASTER_ADDR`` by c10d
    rendezvous, so the same command runs on every node; without a rendezvous they would wait forever."""
    nodes, per_node = max(1, workers // GPUS_PER_NODE), min(workers, GPUS_PER_NODE)
    launch = ["torchrun", f"--nnodes={nodes}", f"--nproc_per_node={per_node}"]
    return launch if nodes == 1 else launch + ["--rdzv-backend=c10d", RENDEZVOUS_ENDPOINT, f"--rdzv-id={run_id}"]


def shell_line(command: list[str]) -> str:
    """``command`` as one shell line, every word quoted but the rendezvous endpoint (its ``$MASTER_ADDR``)."""
    return " ".join(word if word == RENDEZVOUS_ENDPOINT else shlex.quote(word) for word in command)


def paper_command(table: PaperTable, cell: Cell, runs_dir: Path, data_dir: str) -> list[str]:
    """The ``torchrun`` command of one paper-scale cell (8 GPUs per node); a started cell resumes."""
    folder = cell.run_dir(runs_dir)
    run_id = f"{table.key}-{cell.name}".replace("/", "-").replace(" ", "_")
    cmd = [*torchrun(WORKERS.get(cell.model, 32), run_id), "-m", "evonorm_suite.classification.train",
           "--model", cell.model, "--norm-act", LAYERS[cell.label], "--data", "imagenet", "--data-dir", data_dir,
           "--seed", str(cell.seed), "--output-dir", str(folder), *(["--resume"] if holds_run(folder) else []),
           "--no-progress"]
    cmd += ["--table", table.key]  # the table's whole recipe, resolved by classification/train.py
    if cell.batch is not None:
        cmd += ["--batch-size", str(cell.batch)]
    return cmd


def mini_config(table: PaperTable, cell: Cell, scale: MiniScale, runs_dir: Path) -> TrainConfig:
    """The training run of one mini-scale cell of ``table``; a started cell resumes."""
    return TrainConfig(
        model=MINI_MODELS[cell.model], norm_act=LAYERS[cell.label], **scale.setting(table, cell.model, cell.batch),
        seed=cell.seed, output_dir=str(cell.run_dir(runs_dir)), resume=holds_run(cell.run_dir(runs_dir)),
        progress=False,
    )


def setting_of(config: dict) -> dict:
    """The :data:`SETTING_KEYS` of a run's saved config (None where the run did not record one)."""
    return {key: config.get(key) for key in SETTING_KEYS}


def check_finished_setting(config: TrainConfig) -> None:
    """Exit with an error if ``config``'s folder holds a finished run of other settings (it would be skipped
    as done and reported as if it had these)."""
    path = Path(config.output_dir) / "result.json"
    if not path.exists():
        return
    saved = read_result(path, advice="delete it (the cell then trains again) or give another --runs-dir")
    found = setting_of(saved["config"])
    wanted = setting_of(config_to_dict(config))
    if differing := [f"{key} {found[key]!r} (wanted {wanted[key]!r})" for key in SETTING_KEYS
                     if found[key] != wanted[key]]:
        raise SystemExit(f"error: {path} is a finished run of other settings: {', '.join(differing)}; give another "
                         "--runs-dir (or remove that folder) so that it is not reused as this setting's result")


def step_settings(config: TrainConfig) -> dict[str, int | float]:
    """What one optimizer step of ``config`` trains on: workers, images per worker, their product (the
    total batch) and the peak LR, linear in the total batch."""
    total = config.workers * config.batch_size
    return {"workers": config.workers, "images_per_worker": config.batch_size, "total_batch": total,
            "peak_lr": scaled_lr(config.base_lr, total)}


def check_selection(flag: str, chosen: list[str] | None, accepted: list[str]) -> None:
    """Exit with an error naming ``flag`` if ``chosen`` holds a name ``accepted`` lacks."""
    unknown = sorted(set(chosen or ()) - set(accepted))
    if unknown:
        raise SystemExit(f"error: {flag} {' '.join(unknown)}: not in this table; accepted: {', '.join(accepted)}")


def run_table(args: argparse.Namespace) -> int:
    table = TABLES[args.table]
    check_selection("--models", args.models, table.models)
    labels = table.layers + list(table.controls if args.scale == "mini" else ())
    check_selection("--layers", args.layers, list(dict.fromkeys(LAYERS[label] for label in labels)))
    run = run_paper_scale if args.scale == "paper" else run_mini_scale
    return run(table, args, Path(args.runs_dir))


def run_paper_scale(table: PaperTable, args: argparse.Namespace, runs_dir: Path) -> int:
    """Print the grid's ``torchrun`` commands; unless ``--dry-run``, run the unfinished ones one at a
    time (each takes the whole machine)."""
    grid = cells(table, tuple(args.batches) if args.batches else None, tuple(args.seeds or (0,)), args.models,
                 args.layers)
    commands = {cell: paper_command(table, cell, runs_dir, args.data_dir) for cell in grid}
    for command in commands.values():
        print(shell_line(command))
    if args.dry_run:
        return 0
    if several_nodes := sorted({c.model for c in grid if WORKERS.get(c.model, 32) > GPUS_PER_NODE}):
        raise SystemExit(f"error: {', '.join(several_nodes)} train on several nodes of {GPUS_PER_NODE} GPUs, which "
                         "this command does not start: run each printed command on every node, with MASTER_ADDR "
                         "the first node's address (or choose those models out with --models)")
    data.check_imagenet(args.data_dir)  # one clear error here, not one per cell
    jobs = [GridCell(cell.name, done=cell.run_dir(runs_dir) / "result.json", commands=(tuple(command),))
            for cell, command in commands.items()]
    return run_grid(jobs, runs_dir, jobs=1, name=f"{table.key} paper").exit_status


def mini_scale(args: argparse.Namespace) -> MiniScale:
    """The :class:`MiniScale` of ``run --scale mini``: the defaults, CIFAR-10's framing with ``--data cifar10``,
    and the flags given."""
    given = {"batches": tuple(args.batches or ()), "seeds": tuple(args.seeds or ()), "epochs": args.epochs,
             "workers": args.workers, "anchor_depth": args.anchor_depth}
    framing = {"data": "cifar10", "data_dir": args.data_dir, **CIFAR10_FRAMING} if args.data == "cifar10" else {
        "data": args.data}
    return MiniScale(**framing, **{k: v for k, v in given.items() if v})


def run_mini_scale(table: PaperTable, args: argparse.Namespace, runs_dir: Path) -> int:
    """Train the mini-scale grid here, ``--jobs`` cells at a time (``--dry-run``: list the cells)."""
    scale = mini_scale(args)
    if scale.data == "cifar10":
        data.cifar10(scale.data_dir)  # a missing folder is one clear error here, not one per cell
    models = [m for m in table.models if m in MINI_MODELS and (not args.models or m in args.models)]
    skipped = [m for m in table.models if m not in MINI_MODELS and (not args.models or m in args.models)]
    if skipped:
        print(f"mini scale: no CIFAR anchor for {', '.join(skipped)}; those columns stay paper-only")
    grid = scale.grid(table, models, args.layers)
    configs = {cell: mini_config(table, cell, scale, runs_dir) for cell in grid}
    for config in configs.values():
        check_finished_setting(config)
    if configs:
        check_batches_fit(list(configs.values()))
    jobs = [GridCell(cell.name, done=Path(config.output_dir) / "result.json",
                     function=functools.partial(run_mini_cell, config)) for cell, config in configs.items()]
    if args.dry_run:
        finished = [job.finished() for job in jobs]
        print(f"{table.key} mini: {len(jobs)} runs, {sum(finished)} done, {len(jobs) - sum(finished)} to train")
        for i, (c, done) in enumerate(zip(configs.values(), finished), 1):
            print(f"[{i}/{len(jobs)}] {describe(c)}{' (done)' * done}")
        return 0
    check_autograd_survives_fork("the mini-scale grid's training runs")  # its cells are forked children
    return run_grid(jobs, runs_dir, jobs=args.jobs, name=f"{table.key} mini").exit_status


def check_batches_fit(configs: list[TrainConfig]) -> None:
    """Exit with one error line, before the grid starts, if a cell's total batch (workers x images per worker)
    is more than the training images: every such cell would fail alone, each with a traceback in its log."""
    step, largest = max(((step_settings(c), c) for c in configs), key=lambda pair: pair[0]["total_batch"])
    images = len(build_datasets(largest, resolve_recipe(largest))[0])
    if largest.train_subset is not None:
        images = min(images, largest.train_subset)
    if step["total_batch"] > images:
        raise SystemExit(f"error: --batches {step['images_per_worker']}: {step['workers']} workers x "
                         f"{step['images_per_worker']} images = {step['total_batch']} is more than the {images} "
                         f"training images of --data {largest.data}")


def describe(config: TrainConfig) -> str:
    """``model layer W workers x B images = T, LR x, seed k``: one cell in a line."""
    step = step_settings(config)
    return (f"{config.model} {config.norm_act} {step['workers']} x {step['images_per_worker']} images = "
            f"{step['total_batch']}, LR {step['peak_lr']:.4g}, seed {config.seed}")


def run_mini_cell(config: TrainConfig) -> None:
    """Train one mini-scale cell on one thread; a diverged run is recorded as such (the paper's "1e-3")."""
    torch.set_num_threads(1)
    name = describe(config)
    try:
        result = train(config)
    except FloatingPointError as error:
        atomic_write_json(Path(config.output_dir) / "result.json",
                          {"config": config_to_dict(config), "final_top1": None, "diverged": str(error),
                           "device": describe_device(training_device())})
        print(f"{name}: diverged ({error})")
        return
    print(f"{name}: top-1 {result['final_top1']:.1f}% after {result['steps']} steps")


def load_runs(runs_dir: Path) -> dict[tuple[str, str, int | None], list[dict]]:
    """``(paper model, layer name, batch) -> [result.json of each seed]`` under ``runs_dir``."""
    anchors = {v: k for k, v in MINI_MODELS.items()}
    found: dict[tuple[str, str, int | None], list[dict]] = {}
    for path in sorted(runs_dir.rglob("result.json")):
        result = read_result(path, advice="delete it and run the cell again")
        config = result["config"]
        batch_dir = path.parent.parent.name
        if batch_dir != "recipe" and not re.fullmatch(r"b\d+", batch_dir):
            raise CorruptFileError(f"run result {str(path)!r} is not in a grid's layout (<model>/<layer>/b<N> or "
                                   "recipe/seed<k>/result.json): give the folder of one grid (classification/tables.py "
                                   "run --runs-dir)")
        batch = None if batch_dir == "recipe" else int(batch_dir[1:])
        found.setdefault((anchors.get(config["model"], config["model"]), config["norm_act"], batch), []).append(result)
    return found


def load_results(runs_dir: Path) -> dict[tuple[str, str, int | None], list[float]]:
    """``(paper model, layer name, batch) -> [final top-1 per seed]`` (NaN: the run diverged)."""
    return {key: [DIVERGED if r["final_top1"] is None else r["final_top1"] for r in runs]
            for key, runs in load_runs(runs_dir).items()}


def label_of(layer: str) -> str:
    """The paper's row label of registry name ``layer`` (the name itself if the paper has none)."""
    return next((label for label, name in LAYERS.items() if name == layer), layer)


def curve_of(run: dict) -> list[float]:
    """The per-epoch validation top-1 of one ``result.json``."""
    return [h["top1"] for h in run.get("history", [])]


def summary(table: PaperTable, runs_dir: Path) -> dict:
    """Every measured cell of ``table`` with per-seed final top-1, mean, spread, learning curves and their
    flatness over the last fifth of training, its step settings and :data:`SETTING_KEYS` (``setting``), and
    whether it is a control (JSON-ready)."""
    cells_out = []
    for (model, layer, batch), runs in sorted(load_runs(runs_dir).items(), key=lambda kv: (kv[0][0], kv[0][1], -(kv[0][2] or 0))):
        finals = [r["final_top1"] for r in runs if r["final_top1"] is not None]
        label = label_of(layer)
        curves = [curve_of(r) for r in runs]
        flatness = [last_fifth_flatness(curve) for curve in curves]
        ranges = [f["range"] for f in flatness if f is not None]
        cells_out.append({
            "model": model, "layer": layer, "label": label, "control": label in CONTROLS, "batch": batch,
            "workers": runs[0]["config"].get("workers", 1), "total_batch": first_of(runs, "total_batch"),
            "peak_lr": first_of(runs, "peak_lr"), "epochs": runs[0]["config"].get("epochs"),
            "setting": cell_setting(runs, f"{runs_dir}: {model} {layer} batch {batch}"),
            "seeds": [r["config"]["seed"] for r in runs], "final_top1": [r["final_top1"] for r in runs],
            **mean_std_fields(finals),
            "diverged": sum(r["final_top1"] is None for r in runs), "devices": devices_of(runs),
            "paper": table.paper_value(model, label, batch) if label in LAYERS else None,
            "curves": curves, "flatness": flatness, "last_fifth_range_max": max(ranges, default=None),
        })
    return {"table": table.key, "title": table.title, "runs_dir": str(runs_dir), "flatness": FLATNESS_MEANING,
            "cells": cells_out}


def devices_of(runs: list[dict]) -> dict[str, int]:
    """How many of ``runs`` trained on each device (``"not recorded"``: a result file from before
    classification/train.py recorded it)."""
    names = [run.get("device", "not recorded") for run in runs]
    return {name: names.count(name) for name in sorted(set(names))}


def format_devices(counts: Mapping[str, int]) -> str:
    """``"name (k runs), ..."`` of :func:`devices_of`'s counts, by name."""
    return ", ".join(f"{name} ({count} runs)" for name, count in sorted(counts.items()))


def first_of(runs: list[dict], key: str) -> float | int | None:
    """``key`` of the first run that recorded it (a diverged run records only its config)."""
    return next((run[key] for run in runs if key in run), None)


def cell_setting(runs: list[dict], where: str) -> dict:
    """The :data:`SETTING_KEYS` the seeds of one cell share (an error names the cell if they differ)."""
    settings = [setting_of(run["config"]) for run in runs]
    if any(other != settings[0] for other in settings[1:]):
        raise CorruptFileError(f"{where}: its seeds were trained with different settings ({settings}); "
                               "rerun the cell in one setting")
    return settings[0]


FLATNESS_MEANING = ("per seed, the last fifth of the per-epoch validation top-1 curve (at least 2 epochs): "
                    "range = max - min and slope = least-squares points per epoch; None for a diverged run; "
                    "last_fifth_range_max is the largest range over the cell's seeds")


def _seeds_note(ran: int, trained: int, seeds: int | None) -> str:
    """What a curve's label says of its seeds: how many ran when fewer than ``seeds``, how many diverged."""
    diverged = ran - trained
    if seeds and ran < seeds:
        return f"{ran} of {seeds} seeds run" + (f"; {diverged} diverged" if diverged else "")
    if not trained:
        return f"{ran} of {ran} seeds diverged"
    return f"{trained} of {ran} seeds; {diverged} diverged" if diverged else ""


def mean_curve(runs: list[dict], label: str, seeds: int | None = None) -> Series | None:
    """Validation top-1 per epoch, mean and std over the seeds of ``runs`` (None without runs); runs
    without a history (diverged) are not drawn, and the label says how many seeds the curve is, and how
    many ran when that is fewer than ``seeds`` (a cell still running). When every seed diverged the series
    is empty, so the legend still names the layer and says so."""
    if not runs:
        return None
    histories = [curve for curve in map(curve_of, runs) if curve]
    note = _seeds_note(len(runs), len(histories), seeds)
    shown = f"{label} ({note})" if note else label
    if not histories:
        return Series(shown, [], [], [], dashed=label in CONTROLS, color_key=label)
    length = min(map(len, histories))
    points = [[h[e] for h in histories] for e in range(length)]
    return Series(shown, list(range(1, length + 1)), [statistics.mean(p) for p in points],
                  [statistics.stdev(p) if len(p) > 1 else 0.0 for p in points], dashed=label in CONTROLS, color_key=label)


def step_words(cells: Mapping[str, list[dict]]) -> str:
    """``W x B images`` (W workers of B images) of a panel's runs, from the first run's config: Table 2's cells are
    named by no batch, and its anchors train with different steps (MiniScale.step_of). "recipe batch" where the
    runs record no batch size (paper-scale runs take their recipe's)."""
    config = next((run["config"] for runs in cells.values() for run in runs), {})
    if config.get("batch_size") is None:
        return "recipe batch"
    return f"{config.get('workers', 1)} x {config['batch_size']} images"


def plot_curves(table: PaperTable, results: dict[tuple[str, str, int | None], list[dict]], path: Path) -> Path:
    """Validation top-1 per epoch (mean and std over seeds) of every layer, controls dashed: one panel per
    model at the largest batch measured and, for a batch sweep, one at the smallest. A curve of fewer seeds
    than the panel's fullest says how many ran."""
    panels = {}
    for model in table.models:
        batches = sorted({b for (m, _, b) in results if m == model}, key=lambda b: b or 0, reverse=True)
        for batch in dict.fromkeys([batches[0], batches[-1]] if batches else []):
            cells = {label: results.get((model, LAYERS[label], batch), [])
                     for label in table.row_labels(model, with_controls=True)}
            seeds = max(map(len, cells.values()), default=0)
            curves = [mean_curve(runs, label, seeds) for label, runs in cells.items()]
            where = f"{batch} images per worker" if batch else step_words(cells)
            panels[f"{MINI_MODELS.get(model, model)}, {where}"] = [c for c in curves if c is not None]
    return plot_series(path, panels, xlabel="epoch", ylabel="validation top-1 (%)")


def diverged_as_zero(values: list[float]) -> list[float]:
    """``values`` with each diverged run (NaN) scored :data:`DIVERGED_TOP1`, as the verdicts score it."""
    return [DIVERGED_TOP1 if math.isnan(v) else v for v in values]


def format_measured(values: list[float] | None) -> str:
    if not values:
        return "-"
    diverged = sum(math.isnan(v) for v in values)
    shown = format_mean_std(diverged_as_zero(values))
    return f"{shown}, diverged ({diverged}/{len(values)}) counted as 0" if diverged else shown


def row_name(label: str) -> str:
    return f"{label} (control)" if label in CONTROLS else label


def report_markdown(table: PaperTable, results: dict) -> str:
    """Paper and measured top-1 side by side, one markdown table per model; the controls' rows marked."""
    lines = [f"## {table.title}", ""]
    if table.note:
        lines += [table.note, ""]
    batches = sorted({b for (_, _, b) in results if b is not None}, reverse=True) or list(table.batches)
    for model in table.models:
        measured_any = any(m == model for (m, _, _) in results)
        lines.append(f"### {model}" + ("" if measured_any else " (not measured)"))
        labels = shown_rows(table, model, results)
        if table.is_batch_sweep:
            header = ["layer"] + [f"{b} paper" for b in table.batches] + [f"{b} measured" for b in batches]
            rows = [[row_name(label), *(format_paper(table.paper_value(model, label, b)) for b in table.batches),
                     *(format_measured(results.get((model, LAYERS[label], b))) for b in batches)]
                    for label in labels]
        else:
            header = ["layer", "paper", "measured"]
            rows = [[row_name(label), format_paper(table.paper_value(model, label)),
                     format_measured(results.get((model, LAYERS[label], None)))]
                    for label in labels]
        lines += [markdown_table(header, rows), ""]
    return "\n".join(lines)


def shown_rows(table: PaperTable, model: str, results: dict) -> list[str]:
    """``model``'s row labels in table order, then the controls that were measured."""
    measured = {layer for (m, layer, _) in results if m == model}
    return [label for label in table.row_labels(model, with_controls=True)
            if (model, label) in table.accuracy or LAYERS[label] in measured]


def format_paper(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def flatness_markdown(table: PaperTable, runs: dict[tuple[str, str, int | None], list[dict]]) -> str:
    """Per model, the largest range (max - min, points) of validation top-1 over the last fifth of
    training among each cell's seeds: how flat the curves ended."""
    lines = ["### Convergence: range of validation top-1 over the last fifth of training (max over seeds)", ""]
    for model in table.models:
        batches = sorted({b for (m, _, b) in runs if m == model}, key=lambda b: b or 0, reverse=True)
        if not batches:
            continue
        rows = []
        for label in table.row_labels(model, with_controls=True):
            cell_runs = [runs.get((model, LAYERS[label], b), []) for b in batches]
            if any(cell_runs):
                rows.append([row_name(label), *(format_range(r) for r in cell_runs)])
        header = [model, *(f"{b} images/worker" if b else "range" for b in batches)]
        lines += [markdown_table(header, rows), ""]
    return "\n".join(lines)


def format_range(runs: list[dict]) -> str:
    ranges = [f["range"] for f in map(last_fifth_flatness, map(curve_of, runs)) if f is not None]
    return f"{max(ranges):.2f}" if ranges else "-"


def plot_batch_sweep(table: PaperTable, results: dict, path: Path) -> Path:
    """Accuracy vs images per worker, one curve per layer (as the paper's Fig. 1/2 right): the
    paper's ImageNet numbers and the measured ones (mean and std over seeds) side by side."""
    panels = {}
    for model in table.models:
        paper, ours = [], []
        for label in table.row_labels(model, with_controls=True):
            if (model, label) in table.accuracy:
                paper.append(Series(label, list(table.batches), list(table.accuracy[(model, label)])))
            measured = sorted((b, diverged_as_zero(v), any(map(math.isnan, v)))
                              for (m, n, b), v in results.items() if m == model and n == LAYERS[label] and b and v)
            if measured:
                name = f"{label} (diverged runs at 0 %)" if any(d for _, _, d in measured) else label
                ours.append(Series(name, [b for b, _, _ in measured], [statistics.mean(v) for _, v, _ in measured],
                                   [statistics.stdev(v) if len(v) > 1 else 0.0 for _, v, _ in measured], dashed=True))
        panels[f"{model}: paper (ImageNet)"] = paper
        panels[f"{MINI_MODELS.get(model, model)}: measured (mean, std over seeds)"] = ours
    return plot_series(path, panels, xlabel="images per worker", ylabel="top-1 (%)", log2_x=True, invert_x=True)


def plot_seeds(table: PaperTable, results: dict, path: Path) -> Path:
    """Final top-1 of every run of a one-setting table (Table 2): one panel per measured model, one row per
    layer (the paper's ImageNet number in its label), a dot per seed, a cross at 0 % per diverged run (as the
    verdicts score it) and a bar at the mean; the dotted line is chance (10 classes)."""
    plt = pyplot()
    models = [model for model in table.models if any(m == model for (m, _, _) in results)] or table.models[:1]
    rows = max(len(table.row_labels(model, with_controls=True)) for model in models)
    fig, axes = plt.subplots(1, len(models), figsize=(5.0 * len(models), 1.5 + 0.38 * rows), squeeze=False)
    for ax, model in zip(axes.flat, models):
        labels = table.row_labels(model, with_controls=True)
        for row, label in enumerate(labels):
            values = results.get((model, LAYERS[label], None), [])
            trained = [v for v in values if not math.isnan(v)]
            diverged = len(values) - len(trained)
            ax.scatter(trained, [row] * len(trained), s=14, color="C3" if label in CONTROLS else "C0", zorder=3)
            ax.scatter([DIVERGED_TOP1] * diverged, [row] * diverged, marker="x", color="C3", zorder=3)
            if values:
                ax.plot([statistics.mean(diverged_as_zero(values))] * 2, [row - 0.35, row + 0.35], color="black")
            else:
                ax.text(50, row, "not run", ha="center", va="center", fontsize=7, color="gray")
        paper = [table.paper_value(model, label) for label in labels]
        ax.set_yticks(range(len(labels)), [row_name(label) + ("" if value is None else f", paper {value:g}")
                                           for label, value in zip(labels, paper)], fontsize=8)
        ax.axvline(CHANCE_TOP1, linestyle=":", color="gray", linewidth=1)
        ax.set(xlim=(-3, 103), ylim=(len(labels) - 0.5, -0.5))
        ax.set(xlabel="final validation top-1 (%)", title=f"{MINI_MODELS.get(model, model)}: seeds, mean (bar)")
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


def report(args: argparse.Namespace) -> None:
    table = TABLES[args.table]
    runs_dir = Path(args.runs_dir)
    if not runs_dir.is_dir():
        raise SystemExit(f"error: runs directory {str(runs_dir)!r} does not exist")
    results, runs = load_results(runs_dir), load_runs(runs_dir)
    print(report_markdown(table, results))
    print(flatness_markdown(table, runs))
    print(f"measured: final top-1 of the runs under {runs_dir} (mean ± std over seeds); mini-scale runs are the "
          "CIFAR anchors trained on the embedded MNIST digits, not ImageNet, so compare trends, not values; rows "
          "marked (control) have no normalization.")
    print("trained on: " + format_devices(devices_of([run for cell in runs.values() for run in cell])))
    png = Path(args.png or runs_dir / f"{table.key}.png")
    if table.is_batch_sweep:
        print(f"accuracy vs batch size: {plot_batch_sweep(table, results, png)}")
    else:
        print(f"final top-1 per seed: {plot_seeds(table, results, png)}")
    curves = plot_curves(table, runs, Path(args.curves or runs_dir / f"{table.key}_curves.png"))
    print(f"learning curves: {curves}")
    if args.json:
        atomic_write_json(args.json, summary(table, runs_dir))
        print(f"summary: {args.json}")


def list_tables(_: argparse.Namespace) -> None:
    for table in TABLES.values():
        grid = f"{len(table.models)} models x {len(table.layers)} layers"
        if table.is_batch_sweep:
            grid += f" x {len(table.batches)} batch sizes {table.batches}"
        if table.controls:
            grid += f"; miniature controls: {', '.join(table.controls)}"
        print(f"{table.key:8s} {grid}\n         {table.title}")


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def depth_multiplier(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python classification/tables.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the tables and their grids").set_defaults(func=list_tables)
    run = sub.add_parser("run", help="run (or print) a table's grid")
    run.add_argument("table", choices=sorted(TABLES), help="the paper table (`list` shows them)")
    run.add_argument("--scale", choices=SCALES, default="paper",
                     help="paper (default): ImageNet torchrun commands; mini: anchors on the embedded MNIST digits, "
                          "runs here (with the no-normalization controls)")
    run.add_argument("--runs-dir", default="runs/tables",
                     help="one sub-folder per cell with result.json (default %(default)s)")
    run.add_argument("--data-dir", default=os.environ.get("IMAGENET", "/path/to/imagenet"),
                     help="ImageNet folder for --scale paper (default: $IMAGENET, else the placeholder "
                          "/path/to/imagenet in printed commands; a run checks it first); CIFAR-10's parent folder "
                          "for --scale mini --data cifar10")
    run.add_argument("--data", choices=MINI_DATA, default="mnist",
                     help="mini scale: the embedded MNIST digits (default: 24 px crops of 28, validated on the centre "
                          "24), the same digits rotated (mnist-rot), on noise (mnist-back-rand) or both "
                          "(mnist-rot-back-rand) in the same framing, or CIFAR-10 from --data-dir (24 px crops of "
                          "32, validated whole)")
    run.add_argument("--dry-run", action="store_true", help="print the cells/commands without training")
    run.add_argument("--batches", type=positive_int, nargs="+",
                     help=f"images per worker to run (default: the table's at paper scale, "
                          f"{' '.join(map(str, MiniScale.batches))} at mini scale)")
    run.add_argument("--seeds", type=seed_value, nargs="+", action=DistinctValues,
                     help=f"seeds per cell (default: 0 at paper scale, {' '.join(map(str, MiniScale.seeds))} at mini scale)")
    run.add_argument("--jobs", type=positive_int, default=2,
                     help="mini scale: cells trained at once, one thread each (default %(default)s; paper scale "
                          "runs one cell at a time)")
    run.add_argument("--models", nargs="+", help="only these paper models (e.g. resnet50 mobilenetv2)")
    run.add_argument("--layers", nargs="+", help="only these layers (registry names)")
    run.add_argument("--epochs", type=positive_float, help=f"mini scale: epochs per run (default {MiniScale.epochs:g})")
    run.add_argument("--workers", type=positive_int,
                     help=f"mini scale: simulated workers of a batch-sweep cell (ghost batches; default "
                          f"{MiniScale.workers}); the total batch is this x the images per worker")
    run.add_argument("--anchor-depth", type=depth_multiplier,
                     help=f"mini scale: the anchors' blocks per stage scaled by this, rounded up (default "
                          f"{MiniScale.anchor_depth:g}; 1: the paper's depth)")
    run.set_defaults(func=run_table)
    rep = sub.add_parser("report", help="paper vs measured as markdown (+ PNG for batch-size tables)")
    rep.add_argument("table", choices=sorted(TABLES), help="the paper table")
    rep.add_argument("runs_dir", help="the --runs-dir of `run`")
    rep.add_argument("--png", type=output_file, help="where to write the accuracy plot: top-1 vs images per worker for a batch sweep, "
                     "every seed's final top-1 per layer otherwise (default: RUNS_DIR/TABLE.png)")
    rep.add_argument("--curves", type=output_file, help="where to write the learning curves (default: RUNS_DIR/TABLE_curves.png)")
    rep.add_argument("--json", type=output_file, help="also write every measured cell (seeds, mean, std, curves) as JSON here")
    rep.set_defaults(func=report)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return args.func(args) or 0
    except (FileNotFoundError, ConfigError, CorruptFileError, RunDirError) as error:
        raise SystemExit(f"error: {error}") from None


if __name__ == "__main__":
    sys.exit(main())
