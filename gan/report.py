"""Aggregate evaluated runs into the form of the paper's Table 5.

    python gan/report.py runs/gan/imagenet128_*          # every seed<k>/metrics.json below
    python gan/report.py runs/gan/*/seed* --out table5.md --plot table5.png

Runs are grouped by generator norm-act (and its options); each group gets the median and
best (highest IS, lowest FID) over its seeds, next to the numbers the paper reports for
BigGAN-deep on ImageNet 128 (3 seeds; one number where the paper gives one). The table
also says how the runs were measured (samples, feature extractor, sampling mode), since
numbers from another dataset, sample count or feature extractor are not comparable.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
from dataclasses import dataclass

# Table 5 of Liu et al. (2020): (IS median, IS best, FID median, FID best); None where one number is given.
PAPER_TABLE5 = {
    "bn_relu": ("BN-ReLU", 118.77, 124.01, 7.85, 7.29),
    "evonorm_b0": ("EvoNorm-B0", 101.13, 113.63, 6.91, 5.87),
    "gn_relu": ("GN-ReLU", 99.09, None, 8.14, None),
    "ln_relu": ("LayerNorm-ReLU", 91.56, None, 8.35, None),
    "pixelnorm_relu": ("PixelNorm-ReLU", 88.58, None, 10.41, None),
    "evonorm_s0": ("EvoNorm-S0", 104.64, 113.96, 6.86, 6.26),
}


@dataclass
class LayerResult:
    layer: str
    seeds: int
    is_median: float
    is_best: float
    fid_median: float
    fid_best: float
    measured_as: str


def find_metrics(paths: list[str]) -> list[str]:
    """``metrics.json`` files of the given run directories, or of any run below them."""
    found = []
    for path in paths:
        if os.path.isfile(os.path.join(path, "metrics.json")):
            found.append(os.path.join(path, "metrics.json"))
        else:
            found += sorted(glob.glob(os.path.join(path, "**", "metrics.json"), recursive=True))
    if not found:
        raise FileNotFoundError(f"no metrics.json under {paths}; run gan/evaluate.py on the runs first")
    return found


def layer_key(metrics: dict) -> str:
    options = ",".join(f"{k}={v}" for k, v in sorted(metrics.get("norm_options", {}).items()))
    return f"{metrics['norm']}({options})" if options else metrics["norm"]


def measurement(metrics: dict) -> str:
    return (f"{metrics['dataset']} {metrics['resolution']}px, {metrics['num_samples']} samples, "
            f"{metrics['feature_extractor']}, {metrics['sampling']}")


def aggregate(runs: list[dict]) -> list[LayerResult]:
    """Median and best IS/FID per layer over its runs (seeds)."""
    groups: dict[str, list[dict]] = {}
    for run in runs:
        groups.setdefault(layer_key(run), []).append(run)
    results = []
    for key, group in sorted(groups.items()):
        scores, fids = [r["is_mean"] for r in group], [r["fid"] for r in group]
        setups = sorted({measurement(r) for r in group})
        results.append(LayerResult(key, len(group), statistics.median(scores), max(scores),
                                   statistics.median(fids), min(fids), "; ".join(setups)))
    return results


def _pair(median: float | None, best: float | None) -> str:
    if median is None:
        return "-"
    return f"{median:.2f}" if best is None else f"{median:.2f}/{best:.2f}"


def markdown_table(results: list[LayerResult]) -> str:
    lines = [
        "| Layer | seeds | IS (median/best) | FID (median/best) | paper IS | paper FID | measured as |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        paper = PAPER_TABLE5.get(r.layer.split("(")[0])
        paper_is, paper_fid = (_pair(paper[1], paper[2]), _pair(paper[3], paper[4])) if paper else ("-", "-")
        lines.append(f"| {r.layer} | {r.seeds} | {r.is_median:.2f}/{r.is_best:.2f} | {r.fid_median:.2f}/{r.fid_best:.2f}"
                     f" | {paper_is} | {paper_fid} | {r.measured_as} |")
    lines.append("")
    lines.append("Paper: BigGAN-deep, ImageNet 128x128, Inception features, 3 seeds, each at peak performance.")
    return "\n".join(lines)


def plot(runs: list[dict], path: str) -> None:
    """IS against FID, one point per run (seed), the paper's medians as hollow markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for index, key in enumerate(sorted({layer_key(r) for r in runs})):
        color = f"C{index % 10}"
        group = [r for r in runs if layer_key(r) == key]
        ax.scatter([r["fid"] for r in group], [r["is_mean"] for r in group], color=color, label=key)
        paper = PAPER_TABLE5.get(key.split("(")[0])
        if paper:
            ax.scatter([paper[3]], [paper[1]], facecolors="none", edgecolors=color, s=90)
    ax.set_xlabel("FID (lower is better)")
    ax.set_ylabel("IS (higher is better)")
    ax.set_title("runs (filled) vs paper Table 5 medians (hollow)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", help="run directories, or folders containing them")
    parser.add_argument("--out", help="also write the markdown table to this file")
    parser.add_argument("--json", help="also write the aggregated numbers as JSON to this file")
    parser.add_argument("--plot", help="also write IS vs FID of every run, with the paper's medians, as a PNG")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        paths = find_metrics(args.run_dirs)
    except FileNotFoundError as error:
        raise SystemExit(f"error: {error}") from None
    runs = []
    for path in paths:
        with open(path) as f:
            runs.append(json.load(f))
    results = aggregate(runs)
    table = markdown_table(results)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.__dict__ for r in results], f, indent=2)
    if args.plot:
        plot(runs, args.plot)


if __name__ == "__main__":
    sys.exit(main())
