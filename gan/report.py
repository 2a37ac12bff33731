"""Aggregate evaluated runs into the form of the paper's Table 5.

    python gan/report.py runs/gan/imagenet128_*          # every seed<k>/metrics.json below
    python gan/report.py runs/gan_table5 --json docs/results/gan/table5.json --plot docs/results/gan/table5.png

Runs are grouped by generator norm-act (and its options); each group gets the median and
best (highest IS, lowest FID) over its seeds, as the paper reports them, next to the
paper's numbers for BigGAN-deep on ImageNet 128 (3 seeds; one number where the paper gives
one). The table also says how the runs were measured (data, samples, feature extractor,
sampling mode): numbers from another dataset, sample count or feature extractor are not
comparable. Installed as the ``evonorm-gan-report`` command.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from evonorm_core.experiment.arguments import output_file
from evonorm_core.experiment.files import atomic_write_json, atomic_write_text, read_json_object
from evonorm_core.experiment.rundir import is_run_of
from evonorm_core.experiment.tables import PaperTable, Series, markdown_table, plot_series
from evonorm_suite.gan.checkpoint import RUN_KIND

LABELS = {"bn_relu": "BN-ReLU", "evonorm_b0": "EvoNorm-B0", "gn_relu": "GN-ReLU", "ln_relu": "LayerNorm-ReLU",
          "pixelnorm_relu": "PixelNorm-ReLU", "evonorm_s0": "EvoNorm-S0", "no_norm_relu": "ReLU (no norm)"}
TABLE5 = PaperTable(
    key="table5",
    title="Table 5: BigGAN-deep 128x128 on ImageNet with different generator layers",
    source="Liu et al. 2020, Table 5 (median and best over 3 seeds; one number where the paper gives one)",
    row_names=("layer",),
    columns=("IS median", "IS best", "FID median", "FID best"),
    rows={
        ("bn_relu",): (118.77, 124.01, 7.85, 7.29),
        ("evonorm_b0",): (101.13, 113.63, 6.91, 5.87),
        ("gn_relu",): (99.09, None, 8.14, None),
        ("ln_relu",): (91.56, None, 8.35, None),
        ("pixelnorm_relu",): (88.58, None, 10.41, None),
        ("evonorm_s0",): (104.64, 113.96, 6.86, 6.26),
    },
)


def find_metrics(paths: list[str | Path]) -> list[Path]:
    """``metrics.json`` files of the given run directories, or of any GAN run below them (detectron2's
    ``metrics.json`` log in a detection run beside them is not one)."""
    found: list[Path] = []
    for path in map(Path, paths):
        if (path / "metrics.json").is_file():
            found.append(path / "metrics.json")
        else:
            found += [p for p in sorted(path.rglob("metrics.json")) if is_run_of(p.parent, RUN_KIND)]
    if not found:
        raise FileNotFoundError(f"no metrics.json under {[str(p) for p in paths]}; run gan/evaluate.py on the runs first")
    return found


# what every table row reads: the layer, seed, step and scores, and how they were measured
METRICS_KEYS = ("norm", "seed", "step", "is_mean", "fid", "dataset", "resolution", "num_samples", "feature_extractor",
                "sampling")


def read_run_metrics(path: Path, what: str = "run metrics") -> dict:
    """A metrics file of gan/evaluate.py: a run's ``metrics.json`` (its peak) or a snapshot's ``metrics/*.json``;
    :class:`CorruptFileError` naming it if it is not JSON or lacks a key of :data:`METRICS_KEYS`."""
    return read_json_object(path, what=what, keys=METRICS_KEYS,
                            advice="it is not a metrics file of gan/evaluate.py; delete it and evaluate the run again "
                                   "(python gan/evaluate.py RUN_DIR --all-snapshots)")


def layer_key(metrics: dict) -> str:
    options = ",".join(f"{k}={v}" for k, v in sorted((metrics.get("norm_options") or {}).items()))
    return f"{metrics['norm']}({options})" if options else metrics["norm"]


def layer_name(key: str) -> str:
    """The registry name in a :func:`layer_key`: ``"gn_relu(groups=16)"`` -> ``"gn_relu"``."""
    return key.split("(")[0]


def measurement(metrics: dict) -> str:
    return (f"{metrics['dataset']} {metrics['resolution']}px, {metrics['num_samples']} samples, "
            f"{metrics.get('metric', metrics['feature_extractor'])}, {metrics['sampling']}")


def aggregate(runs: list[dict]) -> dict[str, dict]:
    """Per layer: the seeds, every seed's IS and FID, their median and best (highest IS, lowest FID), and the step
    of each seed's reported snapshot (``steps``). Runs that name their last evaluated snapshot (``last_step``, as
    gan/table5.py adds it) also give ``last_steps`` and ``best_at_last`` (the reported snapshot is the last: the run
    was still improving when it stopped), and ``snapshots`` (each seed's evaluated steps with their FID and IS); runs
    that say whether the grid's schedule is done with them (``finished``) give ``unfinished``, the seeds it is not."""
    groups: dict[str, list[dict]] = {}
    for run in runs:
        groups.setdefault(layer_key(run), []).append(run)
    results = {}
    for key, group in sorted(groups.items()):
        group = sorted(group, key=lambda r: r["seed"])
        scores, fids = [r["is_mean"] for r in group], [r["fid"] for r in group]
        results[key] = {"seeds": [r["seed"] for r in group], "is": scores, "fid": fids, "steps": [r["step"] for r in group],
                        "is_median": statistics.median(scores), "is_best": max(scores),
                        "fid_median": statistics.median(fids), "fid_best": min(fids),
                        "class_accuracy": [r.get("class_accuracy") for r in group],
                        "measured_as": "; ".join(sorted({measurement(r) for r in group}))}
        if all("last_step" in r for r in group):
            results[key].update(last_steps=[r["last_step"] for r in group],
                                best_at_last=[r["step"] >= r["last_step"] for r in group],
                                snapshots=[r.get("snapshots", []) for r in group])
        if all("finished" in r for r in group):
            results[key]["unfinished"] = [r["seed"] for r in group if not r["finished"]]
    return results


def _pair(median: float | None, best: float | None) -> str:
    if median is None:
        return "-"
    return f"{median:.2f}" if best is None else f"{median:.2f} / {best:.2f}"


def markdown(results: dict[str, dict]) -> str:
    rows = []
    for key, r in results.items():
        name = layer_name(key)
        paper = TABLE5.rows.get((name,))
        rows.append([LABELS.get(name, name) + key[len(name):], str(len(r["seeds"])), _pair(r["is_median"], r["is_best"]),
                     _pair(r["fid_median"], r["fid_best"]), _pair(*paper[:2]) if paper else "-",
                     _pair(*paper[2:]) if paper else "-", r["measured_as"]])
    header = ["layer", "seeds", "IS median / best", "FID median / best", "paper IS", "paper FID", "measured as"]
    return markdown_table(header, rows) + f"\n\nPaper: {TABLE5.source}; BigGAN-deep, ImageNet 128x128, Inception features."


def plot(runs: list[dict], path: str | Path) -> Path:
    """IS against FID, one point per run (seed), per layer."""
    series = {}
    for run in sorted(runs, key=lambda r: (layer_key(r), r["fid"])):
        key = layer_key(run)
        s = series.setdefault(key, ([], []))
        s[0].append(run["fid"])
        s[1].append(run["is_mean"])
    curves = [Series(LABELS.get(layer_name(k), k), xs, ys) for k, (xs, ys) in series.items()]
    return plot_series(path, {"every seed (lower FID and higher IS are better)": curves}, xlabel="FID", ylabel="IS",
                       columns=1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python gan/report.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", help="run directories, or folders containing them")
    parser.add_argument("--out", type=output_file, help="also write the markdown table to this file")
    parser.add_argument("--json", type=output_file, help="also write the per-layer numbers (every seed, median, best) as JSON here")
    parser.add_argument("--plot", type=output_file, help="also write IS vs FID of every run as a PNG")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        runs = [read_run_metrics(path) for path in find_metrics(args.run_dirs)]
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"error: {error}") from None
    results = aggregate(runs)
    table = markdown(results)
    print(table)
    if args.out:
        atomic_write_text(args.out, table + "\n")
    if args.json:
        atomic_write_json(args.json, {"layers": results})
    if args.plot:
        print(f"IS vs FID: {plot(runs, args.plot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
