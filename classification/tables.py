"""The paper's classification tables as runnable grids, with the paper's numbers beside them.

    python -m classification.tables list
    python -m classification.tables run table3 --dry-run                 # paper-scale commands
    python -m classification.tables run table3 --scale mini --runs-dir runs/t3   # runs here, on digits
    python -m classification.tables report table3 runs/t3               # markdown + PNG

``--scale paper`` is the paper's grid: one ``torchrun`` command per cell (ImageNet, the
paper's workers and images per worker, LR scaled linearly); it executes them one after
another unless ``--dry-run``. ``--scale mini`` maps ResNet-50/MobileNetV2/EfficientNet-B0
to their CIFAR anchors and trains every cell on the embedded digits data in this process,
so the paper's claims can be checked in miniature on a CPU (models without an anchor are
skipped, and said so). Finished cells (``result.json`` present) are skipped, so an
interrupted grid continues where it stopped.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .paper_tables import LAYERS, TABLES, WORKERS, PaperTable
from .train import TrainConfig, train

MINI_MODELS = {"resnet50": "resnet50_cifar", "mobilenetv2": "mobilenetv2_cifar", "efficientnet_b0": "efficientnet_cifar"}
SCALES = ("paper", "mini")
DIVERGED = float("nan")  # a run whose loss became NaN/inf


@dataclass(frozen=True)
class MiniScale:
    """The reduced grid that runs on the embedded digits: anchors, 16x16 images, a few epochs.

    The proxy task's LR rule (0.1 at 128 images, i.e. 0.2 per 256) scaled linearly with
    the batch, cosine schedule, the same number of epochs at every batch size (as Table 3).
    """

    batches: tuple[int, ...] = (128, 16, 2)
    seeds: tuple[int, ...] = (0,)
    epochs: float = 3.0
    image_size: int = 16
    base_lr: float = 0.2


@dataclass(frozen=True)
class Cell:
    """One training run of a grid."""

    model: str  # paper model name (classification.models)
    label: str  # paper row label
    batch: int | None  # images per worker; None: the recipe's
    seed: int = 0

    def run_dir(self, runs_dir: Path) -> Path:
        batch = "recipe" if self.batch is None else f"b{self.batch}"
        return runs_dir / self.model / LAYERS[self.label] / batch / f"seed{self.seed}"


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
    """The ``torchrun`` command of one paper-scale cell (8 GPUs per node)."""
    workers = WORKERS.get(cell.model, 32)
    nodes, per_node = max(1, workers // 8), min(workers, 8)
    cmd = ["torchrun", f"--nnodes={nodes}", f"--nproc_per_node={per_node}", "-m", "classification.train",
           "--model", cell.model, "--norm-act", LAYERS[cell.label], "--data", "imagenet", "--data-dir", data_dir,
           "--seed", str(cell.seed), "--output-dir", str(cell.run_dir(runs_dir)), "--resume", "--no-progress"]
    cmd += ["--table", table.key]  # the table's whole recipe, resolved by classification.train
    if cell.batch is not None:
        cmd += ["--batch-size", str(cell.batch)]
    return cmd


def mini_config(cell: Cell, scale: MiniScale, runs_dir: Path) -> TrainConfig:
    return TrainConfig(
        model=MINI_MODELS[cell.model], norm_act=LAYERS[cell.label], data="digits", image_size=scale.image_size,
        batch_size=cell.batch or 128, epochs=scale.epochs, base_lr=scale.base_lr, schedule="cosine",
        warmup_epochs=0.0, seed=cell.seed, output_dir=str(cell.run_dir(runs_dir)), resume=True, progress=False,
    )


def check_selection(flag: str, chosen: list[str] | None, accepted: list[str]) -> None:
    """Exit with an error naming ``flag`` if ``chosen`` holds a name ``accepted`` lacks."""
    unknown = sorted(set(chosen or ()) - set(accepted))
    if unknown:
        raise SystemExit(f"error: {flag} {' '.join(unknown)}: not in this table; accepted: {', '.join(accepted)}")


def run_table(args: argparse.Namespace) -> None:
    table = TABLES[args.table]
    runs_dir = Path(args.runs_dir)
    check_selection("--models", args.models, table.models)
    check_selection("--layers", args.layers, [LAYERS[label] for label in table.layers if LAYERS[label]])
    if args.scale == "paper":
        grid = cells(table, tuple(args.batches) if args.batches else None, tuple(args.seeds), args.models, args.layers)
        for cell in grid:
            cmd = paper_command(table, cell, runs_dir, args.data_dir)
            print(shlex.join(cmd))
            if not args.dry_run and not (cell.run_dir(runs_dir) / "result.json").exists():
                subprocess.run(cmd, check=True)
        return
    scale = MiniScale(**{k: v for k, v in (("batches", tuple(args.batches or ())), ("seeds", tuple(args.seeds)),
                                           ("epochs", args.epochs), ("image_size", args.image_size)) if v})
    models = [m for m in table.models if m in MINI_MODELS and (not args.models or m in args.models)]
    skipped = [m for m in table.models if m not in MINI_MODELS]
    if skipped:
        print(f"mini scale: no CIFAR anchor for {', '.join(skipped)}; those columns stay paper-only")
    grid = cells(table, scale.batches if table.is_batch_sweep else None, scale.seeds, models, args.layers)
    for i, cell in enumerate(grid, 1):
        config = mini_config(cell, scale, runs_dir)
        done = Path(config.output_dir) / "result.json"
        print(f"[{i}/{len(grid)}] {config.model} {config.norm_act} batch {config.batch_size} seed {cell.seed}"
              + (" (done)" if done.exists() else ""), flush=True)
        if args.dry_run or done.exists():
            continue
        try:
            result = train(config)
        except FloatingPointError as error:  # a diverged layer is a result too (the paper's "1e-3")
            done.write_text(json.dumps({"config": dataclasses.asdict(config), "final_top1": None,
                                        "diverged": str(error)}))
            print(f"    diverged: {error}", flush=True)
            continue
        print(f"    top-1 {result['final_top1']:.1f}% after {result['steps']} steps", flush=True)


def load_results(runs_dir: Path) -> dict[tuple[str, str, int | None], list[float]]:
    """``(paper model, layer name, batch) -> [final top-1 per seed]`` from every result.json under ``runs_dir``."""
    anchors = {v: k for k, v in MINI_MODELS.items()}
    found: dict[tuple[str, str, int | None], list[float]] = {}
    for path in sorted(runs_dir.rglob("result.json")):
        result = json.loads(path.read_text())
        config = result["config"]
        batch_dir = path.parent.parent.name
        batch = None if batch_dir == "recipe" else int(batch_dir[1:])
        key = (anchors.get(config["model"], config["model"]), config["norm_act"], batch)
        found.setdefault(key, []).append(DIVERGED if result["final_top1"] is None else result["final_top1"])
    return found


def format_measured(values: list[float] | None) -> str:
    if not values:
        return "-"
    if any(math.isnan(v) for v in values):
        return f"diverged ({sum(math.isnan(v) for v in values)}/{len(values)})"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f} (n={len(values)})"


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
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            for label in table.layers:
                if (model, label) not in table.accuracy:
                    continue
                paper = [f"{v:g}" for v in table.accuracy[(model, label)]]
                ours = [format_measured(results.get((model, LAYERS[label], b))) for b in batches]
                lines.append("| " + " | ".join([label, *paper, *ours]) + " |")
        else:
            lines += ["| layer | paper | measured |", "|---|---|---|"]
            for label in table.layers:
                paper = table.paper_value(model, label)
                ours = format_measured(results.get((model, LAYERS[label], None))) if LAYERS[label] else "n/a"
                lines.append(f"| {label} | {paper:g} | {ours} |")
        lines.append("")
    return "\n".join(lines)


def plot_batch_sweep(table: PaperTable, results: dict, path: Path) -> None:
    """Accuracy vs images per worker, one line per layer (as Fig. 1 right); paper solid, measured dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    models = table.models
    fig, axes = plt.subplots(len(models), 2, figsize=(11, 4 * len(models)), squeeze=False)
    for row, model in enumerate(models):
        paper_ax, ours_ax = axes[row]
        for i, label in enumerate(table.layers):
            if (model, label) not in table.accuracy:
                continue
            color = f"C{i}"
            paper_ax.plot(table.batches, table.accuracy[(model, label)], "o-", color=color, label=label)
            measured = sorted((b, v) for (m, n, b), v in results.items()
                              if m == model and n == LAYERS[label] and b is not None)
            if measured:
                xs = [b for b, _ in measured]
                means = [statistics.mean(v) for _, v in measured]
                spreads = [statistics.stdev(v) if len(v) > 1 else 0.0 for _, v in measured]
                ours_ax.errorbar(xs, means, yerr=spreads, fmt="s--", color=color, capsize=3, label=label)
        for ax, what in ((paper_ax, "paper (ImageNet)"), (ours_ax, "measured (mean, std over seeds)")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(table.batches if ax is paper_ax else sorted({b for (_, _, b) in results if b}) or [1])
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.invert_xaxis()
            ax.set_xlabel("images per worker")
            ax.set_ylabel("top-1 (%)")
            ax.set_title(f"{model}: {what}")
            ax.grid(alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=7)
            else:
                ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
        print(f"plot: {png}")


def list_tables(_: argparse.Namespace) -> None:
    for table in TABLES.values():
        runnable = sum(LAYERS[label] is not None for label in table.layers)
        grid = f"{len(table.models)} models x {len(table.layers)} layers ({runnable} runnable)"
        if table.is_batch_sweep:
            grid += f" x {len(table.batches)} batch sizes {table.batches}"
        print(f"{table.key:8s} {grid}\n         {table.title}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m classification.tables", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the tables and their grids").set_defaults(func=list_tables)
    run = sub.add_parser("run", help="run (or print) a table's grid")
    run.add_argument("table", choices=sorted(TABLES))
    run.add_argument("--scale", choices=SCALES, default="paper",
                     help="paper: ImageNet torchrun commands; mini: anchors on the embedded digits, runs here")
    run.add_argument("--runs-dir", default="runs/tables", help="one sub-folder per cell with result.json")
    run.add_argument("--data-dir", default=os.environ.get("IMAGENET", "/path/to/imagenet"),
                     help="ImageNet folder for --scale paper (default: $IMAGENET)")
    run.add_argument("--dry-run", action="store_true", help="print the cells/commands without training")
    run.add_argument("--batches", type=int, nargs="+", help="images per worker to run (default: the table's / mini's)")
    run.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds per cell (default: 0)")
    run.add_argument("--models", nargs="+", help="only these paper models (e.g. resnet50 mobilenetv2)")
    run.add_argument("--layers", nargs="+", help="only these layers (registry names)")
    run.add_argument("--epochs", type=float, help=f"mini scale: epochs per run (default {MiniScale.epochs})")
    run.add_argument("--image-size", type=int, help=f"mini scale: digit image size (default {MiniScale.image_size})")
    run.set_defaults(func=run_table)
    rep = sub.add_parser("report", help="paper vs measured as markdown (+ PNG for batch-size tables)")
    rep.add_argument("table", choices=sorted(TABLES))
    rep.add_argument("runs_dir", help="the --runs-dir of `run`")
    rep.add_argument("--png", help="where to write the plot (default: RUNS_DIR/TABLE.png)")
    rep.set_defaults(func=report)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    sys.exit(main())
