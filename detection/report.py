"""Box and mask AP of finished runs next to the paper's Table 4.

    python detection/report.py output/mask_rcnn_R50_bn output/mask_rcnn_R50_evonorm_b0 ...

Reads ``final_results.json`` that ``tools/train_net.py`` writes into each output folder
(COCOEvaluator's results after training or ``--eval-only``), or else the last evaluation
detectron2 logged in the folder's ``metrics.json`` (e.g. of a run still training). A run is matched to its
Table 4 row by the folder's name (the configs' ``OUTPUT_DIR`` is ``output/<config name>``);
runs not in the paper (the demo) show "-" in the paper columns.
Installed as the ``evonorm-detect-report`` command.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evonorm_core.experiment.arguments import output_file
from evonorm_core.experiment.files import CorruptFileError, read_json, read_jsonl
from evonorm_core.experiment.tables import markdown_table, pyplot, save_figure
from evonorm_suite.detection.paper import BOX, MASK, paper_cells

RESULTS_FILE = "final_results.json"
METRICS = ("AP", "AP50", "AP75")
READ_METRICS = ("AP", "AP50")  # what the report and the miniature read of each task (COCOEvaluator writes all)


def logged_metrics(output_dir: Path) -> list[dict]:
    """The entries of a run's ``metrics.json`` (detectron2 writes one JSON object per line); [] if absent."""
    metrics_file = Path(output_dir) / "metrics.json"
    return read_jsonl(metrics_file, what="detectron2 metrics log") if metrics_file.exists() else []


def last_logged_evaluation(output_dir: Path) -> dict[str, dict[str, float]] | None:
    """The last ``bbox/AP``... entry of a run's ``metrics.json`` as nested dicts."""
    evaluations = [e for e in logged_metrics(output_dir) if "bbox/AP" in e]
    if not evaluations:
        return None
    results: dict[str, dict[str, float]] = {}
    for key, value in evaluations[-1].items():
        task, _, metric = key.partition("/")
        if task in ("bbox", "segm"):
            results.setdefault(task, {})[metric] = value
    return results


def training_curve(output_dir: Path) -> tuple[list[int], list[float]]:
    """(iterations, total_loss) logged in a run's ``metrics.json``."""
    entries = [e for e in logged_metrics(output_dir) if "total_loss" in e]
    return [e["iteration"] for e in entries], [e["total_loss"] for e in entries]


def plot_training_curves(output_dirs: list[Path], path: Path) -> None:
    """PNG of each run's total training loss against iterations."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for output_dir in output_dirs:
        ax.plot(*training_curve(output_dir), label=Path(output_dir).name)
    ax.set(xlabel="iteration", ylabel="total loss", title="Mask R-CNN training loss")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def read_results(path: Path, tasks: tuple[str, ...] = ("bbox",)) -> dict[str, dict[str, float]]:
    """The ``{"bbox": {...}, "segm": {...}}`` of a ``final_results.json`` (also when nested under the dataset's
    name); :class:`CorruptFileError` naming it if it lacks :data:`READ_METRICS` of one of ``tasks``."""
    results = read_json(path, what="COCO results")
    if isinstance(results, dict) and "bbox" not in results and len(results) == 1:
        results = next(iter(results.values()))  # {dataset: {...}}
    lacking = [task for task in tasks if not isinstance(results, dict) or not isinstance(results.get(task), dict)
               or not set(READ_METRICS) <= results[task].keys()]
    if lacking:
        raise CorruptFileError(f"COCO results {str(path)!r} hold no {', '.join(map(repr, lacking))} metrics "
                               f"({', '.join(READ_METRICS)}); evaluate the run again "
                               "(python tools/train_net.py --config CONFIG --eval-only OUTPUT_DIR RUN_FOLDER)")
    return results


def load_results(output_dir: Path) -> dict[str, dict[str, float]]:
    """``{"bbox": {...}, "segm": {...}}`` of a run; ``FileNotFoundError`` saying what to run if absent."""
    path = Path(output_dir) / RESULTS_FILE
    if path.exists():
        return read_results(path)
    results = last_logged_evaluation(output_dir)
    if results is None:
        raise FileNotFoundError(
            f"no evaluation in {output_dir}: train with tools/train_net.py (it writes {RESULTS_FILE} after the "
            "final evaluation) or evaluate a checkpoint with --eval-only"
        )
    return results


def format_aps(values) -> str:
    return " / ".join("-" if v is None else f"{v:.1f}" for v in values)


def report_rows(output_dirs: list[Path]) -> list[list[str]]:
    rows = []
    for output_dir in output_dirs:
        results = load_results(output_dir)
        ours = [[results.get(task, {}).get(m) for m in METRICS] for task in ("bbox", "segm")]
        paper_aps = [paper_cells(output_dir, BOX), paper_cells(output_dir, MASK)]
        name = Path(output_dir).name
        rows.append([name, format_aps(ours[0]), format_aps(paper_aps[0]), format_aps(ours[1]), format_aps(paper_aps[1])])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print box/mask AP (AP / AP50 / AP75) of runs next to paper Table 4.")
    parser.add_argument("output_dirs", nargs="+", type=Path, help="OUTPUT_DIR folders of finished runs")
    parser.add_argument("--plot", type=output_file, metavar="PNG", help="also draw the runs' training loss curves into PNG")
    args = parser.parse_args(argv)
    try:
        rows = report_rows(args.output_dirs)
        header = ["run", "box AP/AP50/AP75", "paper box", "mask AP/AP50/AP75", "paper mask"]
        print(markdown_table(header, rows))
        if args.plot:
            plot_training_curves(args.output_dirs, args.plot)
            print(f"training loss curves: {args.plot}")
    except (FileNotFoundError, CorruptFileError) as err:
        parser.exit(2, f"error: {err}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
