#!/usr/bin/env python3
"""The paper's claims in miniature: run the experiments, then write docs/reproduction.md.

    python tools/reproduce.py                  # classification + detection miniatures (about 2 h on 2 cores), report
    python tools/reproduce.py --report-only    # only re-render docs/reproduction.md from docs/results/
    python tools/reproduce.py --only table3    # one experiment (resumable), then the report

Each experiment is a command of its package, run as a subprocess that dies with this one
(however it ends); every one of them skips the runs it already finished, so an interrupted
reproduction continues where it stopped and a finished one is not rerun. Their summaries
(JSON, with every seed's numbers) go to docs/results/<part>/; the GAN (Table 5) and search
(Fig. 10) experiments are run by their own commands (shown in the report) and collected
from their JSON. For every claim the
report shows the paper's numbers, the miniature's (mean ± std over seeds), the command,
the CPU time, and a verdict by a stated rule:

* "holds": the claimed difference is larger than the spread (the larger of the two sample
  standard deviations over seeds), in the claimed direction;
* "does not hold": it is larger than the spread in the other direction;
* "not resolved at this scale": the difference is within the spread;
* "not measured": the experiment's JSON is missing (the report says which command makes it).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from evonorm_core.experiment.children import run_command
from evonorm_core.experiment.files import atomic_write_json, atomic_write_text, read_json
from evonorm_core.experiment.progress import format_duration
from evonorm_core.experiment.tables import format_mean_std, markdown_table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path("docs/results")
REPORT = Path("docs/reproduction.md")
STEPS_FILE = RESULTS / "reproduction_steps.json"
RUNS = Path("runs/reproduction")
PY = [sys.executable]


@dataclass(frozen=True)
class Step:
    """One experiment: the commands that run it (resumable) and the summary they leave."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    summary: Path


CLASSIFICATION_MODELS = ("resnet50", "mobilenetv2")


def classification_step(table: str, models: Sequence[str] = CLASSIFICATION_MODELS,
                        layers: Sequence[str] = ()) -> Step:
    runs = RUNS / "classification" / table
    out = RESULTS / "classification"
    run = (*PY, "classification/tables.py", "run", table, "--scale", "mini", "--models", *models,
           *(("--layers", *layers) if layers else ()), "--runs-dir", str(runs), "--jobs", "2")
    report = (*PY, "classification/tables.py", "report", table, str(runs), "--json", str(out / f"{table}.json"),
              "--png", str(out / f"{table}.png"), "--curves", str(out / f"{table}_curves.png"))
    return Step(table, (run, report), out / f"{table}.json")


STEPS = {
    "table2": classification_step("table2"),
    "table3": classification_step("table3"),
    "table4": Step("table4", ((*PY, "detection/miniature.py", "--runs-dir", str(RUNS / "detection"),
                               "--out", str(RESULTS / "detection"), "--jobs", "2"),),
                   RESULTS / "detection" / "miniature.json"),
}
COLLECTED = {  # run by their own commands (issues 13 and 14); the report reads their JSON
    "table5": RESULTS / "gan" / "table5.json",
    "fig10": RESULTS / "search" / "fig10.json",
}


def shown(command: tuple[str, ...]) -> str:
    """The command as a user types it (``python`` for this interpreter)."""
    return shlex.join(["python", *command[1:]] if command[0] == sys.executable else command)


def run_step(step: Step, log: dict) -> None:
    started = time.monotonic()
    for command in step.commands:
        print(f"[reproduce] {step.name}: {shown(command)}", flush=True)
        try:
            code = run_command(command, cwd=ROOT)
        except KeyboardInterrupt:
            raise SystemExit(f"[reproduce] {step.name}: interrupted; finished runs are kept, so rerunning "
                             "resumes") from None
        if code:
            raise SystemExit(f"[reproduce] {step.name}: `{shown(command)}` exited with status {code} (its message is "
                             "above); finished runs are kept, so rerunning resumes")
    elapsed = time.monotonic() - started
    entry = log.setdefault(step.name, {"commands": [], "wall_seconds": 0.0})
    entry["commands"] += [shown(c) for c in step.commands if shown(c) not in entry["commands"]]
    entry["wall_seconds"] += elapsed
    entry["cpu_seconds"] = entry["wall_seconds"] * (os.cpu_count() or 1)  # both cores busy (2 jobs)
    atomic_write_json(ROOT / STEPS_FILE, log)


# ------------------------------------------------------------------------------ verdicts
def mean(values: list[float]) -> float:
    return statistics.mean(values) if values else math.nan


def spread(*groups: list[float]) -> float:
    """The larger sample standard deviation of the groups (0 for single values)."""
    return max((statistics.stdev(g) for g in groups if len(g) > 1), default=0.0)


def verdict(better: list[float], worse: list[float], *, no_worse: bool = False) -> str:
    """Whether ``better`` beats ``worse`` (``no_worse``: is not beaten by) beyond the spread."""
    if not better or not worse:
        return "not measured"
    difference, noise = mean(better) - mean(worse), spread(better, worse)
    if no_worse:
        return "holds" if difference >= -noise else "does not hold"
    if difference > noise:
        return "holds"
    return "does not hold" if difference < -noise else "not resolved at this scale"


def gap(better: list[float], worse: list[float]) -> str:
    if not better or not worse:
        return "-"
    return f"{mean(better) - mean(worse):+.1f} (spread {spread(better, worse):.1f})"


# ------------------------------------------------------------------------------ sections
def load(path: Path) -> dict | None:
    full = ROOT / path
    return read_json(full, what="experiment summary") if full.exists() else None


def cell_values(summary: dict, model: str, layer: str, batch: int | None) -> list[float]:
    for cell in summary["cells"]:
        if (cell["model"], cell["layer"], cell["batch"]) == (model, layer, batch):
            return [v for v in cell["final_top1"] if v is not None]
    return []


def provenance(step: str, steps_log: dict, summary_path: Path, fallback: str) -> list[str]:
    entry = steps_log.get(step)
    commands = entry["commands"] if entry else [fallback]
    cpu = f"{format_duration(entry['cpu_seconds'])} CPU ({format_duration(entry['wall_seconds'])} on "\
          f"{os.cpu_count()} cores)" if entry else "not recorded"
    return ["Command: " + "; ".join(f"`{c}`" for c in commands) + f". CPU time: {cpu}.",
            f"Numbers: [{summary_path}]({Path('results') / summary_path.relative_to(RESULTS)})."]


def not_measured(title: str, command: str) -> list[str]:
    return [f"## {title}", "", f"**Not measured yet**: run `{command}` (then `python tools/reproduce.py --report-only`).", ""]


def table2_section(steps_log: dict) -> list[str]:
    step = STEPS["table2"]
    summary = load(step.summary)
    title = "Table 2: layers with batch statistics (EvoNorm-B series vs BN-ReLU and friends)"
    if summary is None:
        return not_measured(title, "python tools/reproduce.py --only table2")
    from evonorm_suite.classification.paper_tables import LAYERS, TABLES

    paper = TABLES["table2"]
    lines = [f"## {title}", "", "Paper: ImageNet top-1 (%). Miniature: CIFAR anchors (one block per stage) on the "
             "embedded digits, final validation top-1 (%), mean ± std over seeds.", ""]
    rows, verdicts = [], []
    for model in ("resnet50", "mobilenetv2"):
        for label in paper.layers:
            if LAYERS[label] is None:
                continue
            values = cell_values(summary, model, LAYERS[label], None)
            rows.append([model, label, f"{paper.paper_value(model, label):g}", format_mean_std(values) if values else "-"])
        b0, bn = (cell_values(summary, model, name, None) for name in ("evonorm_b0", "bn_relu"))
        verdicts.append([f"EvoNorm-B0 no worse than BN-ReLU ({model})", gap(b0, bn), verdict(b0, bn, no_worse=True)])
    lines += [markdown_table(["model", "layer", "paper", "miniature"], rows), "",
              markdown_table(["claim (section 5.2)", "B0 - BN", "verdict"], verdicts), ""]
    return lines + provenance("table2", steps_log, step.summary, shown(step.commands[0])) + [""]


def table3_section(steps_log: dict) -> list[str]:
    step = STEPS["table3"]
    summary = load(step.summary)
    title = "Table 3: batch-independent layers as the batch shrinks (EvoNorm-S series)"
    if summary is None:
        return not_measured(title, "python tools/reproduce.py --only table3")
    from evonorm_suite.classification.paper_tables import LAYERS, TABLES

    paper = TABLES["table3"]
    batches = sorted({c["batch"] for c in summary["cells"] if c["batch"]}, reverse=True)
    lines = [f"## {title}", "", "Top-1 (%) at each number of images per batch; the paper's ImageNet numbers (8 or "
             "32 workers) beside the miniature's (mean ± std over seeds). Learning rates scale linearly with the batch.",
             "", f"![accuracy vs batch size](results/classification/table3.png)", ""]
    rows, verdicts = [], []
    for model in paper.models:
        for label in paper.layers:
            values = [format_mean_std(v) if (v := cell_values(summary, model, LAYERS[label], b)) else "-" for b in batches]
            printed = [f"{paper.paper_value(model, label, b):g}" if b in paper.batches else "-" for b in batches]
            rows.append([model, label, *(f"{p} / {m}" for p, m in zip(printed, values))])
        small, large = batches[-1], batches[0]
        bn_small, bn_large = (cell_values(summary, model, "bn_relu", b) for b in (small, large))
        s0_small, s0_large = (cell_values(summary, model, "evonorm_s0", b) for b in (small, large))
        verdicts.append([f"BN-ReLU loses more than EvoNorm-S0 from {large} to {small} images ({model})",
                         gap([a - b for a, b in zip(bn_large, bn_small)], [a - b for a, b in zip(s0_large, s0_small)]),
                         verdict([a - b for a, b in zip(bn_large, bn_small)], [a - b for a, b in zip(s0_large, s0_small)])])
        verdicts.append([f"EvoNorm-S0 beats BN-ReLU at {small} images ({model})", gap(s0_small, bn_small),
                         verdict(s0_small, bn_small)])
        verdicts.append([f"EvoNorm-S0 no worse than BN-ReLU at {large} images ({model})", gap(s0_large, bn_large),
                         verdict(s0_large, bn_large, no_worse=True)])
        for b in batches:
            best_s = max(("evonorm_s0", "evonorm_s1", "evonorm_s2"), key=lambda n: mean(cell_values(summary, model, n, b)))
            others = [n for n in ("bn_relu", "gn_relu", "gn_swish", "frn")]
            best_o = max(others, key=lambda n: mean(cell_values(summary, model, n, b)))
            s_vals, o_vals = cell_values(summary, model, best_s, b), cell_values(summary, model, best_o, b)
            verdicts.append([f"best S layer ({best_s}) no worse than best baseline ({best_o}) at {b} ({model})",
                             gap(s_vals, o_vals), verdict(s_vals, o_vals, no_worse=True)])
    header = ["model", "layer", *(f"{b}: paper / mini" for b in batches)]
    lines += [markdown_table(header, rows), "", markdown_table(["claim (section 5.2)", "difference", "verdict"], verdicts), ""]
    return lines + provenance("table3", steps_log, step.summary, shown(step.commands[0])) + [""]


def table4_section(steps_log: dict) -> list[str]:
    step = STEPS["table4"]
    summary = load(step.summary)
    title = "Table 4: Mask R-CNN (box and mask AP)"
    if summary is None:
        return not_measured(title, "python tools/reproduce.py --only table4")
    from evonorm_suite.detection.paper import TABLE4

    lines = [f"## {title}", "", "Paper: COCO val2017, R-50-FPN. Miniature: the generated shapes (128 px, 3 classes), "
             "half-width ResNet-18-FPN trained from scratch, AP on 50 validation images, mean ± std over seeds.", ""]
    labels = {"bn": "BN-ReLU", "gn": "GN-ReLU", "evonorm_b0": "EvoNorm-B0", "evonorm_s0": "EvoNorm-S0"}
    rows, verdicts = [], []
    for cell in summary["cells"]:
        paper = TABLE4.row("R-50-FPN", labels[cell["layer"]])
        rows.append([cell["setting"], cell["label"], f"{paper[0]:g} / {paper[3]:g}",
                     format_mean_std([r["box_ap"] for r in cell["runs"]]), format_mean_std([r["mask_ap"] for r in cell["runs"]])])

    def aps(setting: str, layer: str, key: str) -> list[float]:
        cell = next(c for c in summary["cells"] if (c["setting"], c["layer"]) == (setting, layer))
        return [r[key] for r in cell["runs"]]

    for setting in dict.fromkeys(c["setting"] for c in summary["cells"]):
        for key in ("box_ap", "mask_ap"):
            for better, worse in (("evonorm_b0", "bn"), ("evonorm_s0", "gn"), ("evonorm_s0", "bn")):
                a, b = aps(setting, better, key), aps(setting, worse, key)
                verdicts.append([f"{labels[better]} beats {labels[worse]}, {key.replace('_', ' ')} ({setting})",
                                 gap(a, b), verdict(a, b)])
    lines += [markdown_table(["setting", "layer", "paper box / mask AP", "box AP", "mask AP"], rows), "",
              markdown_table(["claim (section 5.4)", "difference", "verdict"], verdicts), ""]
    return lines + provenance("table4", steps_log, step.summary, shown(step.commands[0])) + [""]


def table5_section(_: dict) -> list[str]:
    summary = load(COLLECTED["table5"])
    title = "Table 5: BigGAN-deep generator layers (IS / FID)"
    if summary is None:
        return not_measured(title, "python gan/table5.py")
    from evonorm_suite.gan.report import LABELS, TABLE5, layer_name

    lines = [f"## {title}", "", f"Miniature: {summary.get('description', 'class-conditional BigGAN-deep on the digits')}; "
             "digits-classifier IS/FID (not comparable with ImageNet Inception numbers), median and best over seeds "
             f"as the paper reports them. FID floor (held-out real digits) {summary['fid_floor']:.2f}, "
             f"noise {summary['fid_noise']:.2f}.", ""]
    rows = []
    for layer, result in summary["layers"].items():
        name = layer_name(layer)
        paper = TABLE5.rows.get((name,))
        accuracy = [100 * a for a in result.get("class_accuracy", []) if a is not None]
        rows.append([LABELS.get(name, name) + layer[len(name):], len(result["seeds"]),
                     f"{result['is_median']:.2f} / {result['is_best']:.2f}", f"{result['fid_median']:.2f} / {result['fid_best']:.2f}",
                     format_mean_std(accuracy) if accuracy else "-",
                     f"{paper[0]} / {paper[1] or '-'}" if paper else "-", f"{paper[2]} / {paper[3] or '-'}" if paper else "-"])
    fid = {layer_name(layer): result["fid"] for layer, result in summary["layers"].items()}
    pairs = [("evonorm_b0", "bn_relu"), ("evonorm_s0", "bn_relu"),
             *(("evonorm_s0", other) for other in ("gn_relu", "ln_relu", "pixelnorm_relu"))]
    verdicts = [[f"{LABELS[name]} has a lower FID than {LABELS[other]}", gap(fid.get(other, []), fid.get(name, [])),
                 verdict(fid.get(other, []), fid.get(name, []))] for name, other in pairs]
    lines += [markdown_table(["layer", "seeds", "IS median / best", "FID median / best", "samples of the requested "
                              "class (%)", "paper IS", "paper FID"], rows),
              "", markdown_table(["claim (section 5.5)", "FID(other) - FID(EvoNorm)", "verdict"], verdicts), "",
              *[f"![{LABELS.get(layer_name(layer), layer)} samples, seed 0, one row per class]"
                f"(results/gan/{Path(r['grid_png']).name})" for layer, r in summary["layers"].items() if r.get("grid_png")],
              "",
              f"Command: `{summary.get('command', '?')}`. CPU time: "
              f"{format_duration(summary['cpu_seconds']) if 'cpu_seconds' in summary else 'not recorded'}.",
              f"Numbers: [{COLLECTED['table5']}](results/gan/table5.json).", ""]
    return lines


def fig10_row(strategy: str, result: dict) -> list:
    """Top-10 mean, distinct layers accepted per seed and the best layer's accuracy (%)."""
    def percent(values: list) -> str:
        return format_mean_std([100 * v for v in values if v is not None])

    return [strategy, len(result["seeds"]), percent(result["top10_final"]),
            " / ".join(str(n) for n in result.get("distinct_accepted", [])) or "-", percent(result.get("best_final", []))]


def fig10_section(_: dict) -> list[str]:
    summary = load(COLLECTED["fig10"])
    title = "Fig. 10: evolution vs random search"
    if summary is None:
        return not_measured(title, "python search/compare.py --output-dir runs/fig10 --max-candidates 2000 "
                                  "--json docs/results/search/fig10.json --plot docs/results/search/fig10.png")
    strategies = summary["strategies"]
    evo, rnd = ([100 * v for v in strategies[name]["top10_final"] if v is not None] for name in ("evolution", "random"))
    rows = [fig10_row(name, s) for name, s in strategies.items()]
    lines = [f"## {title}", "", f"Mean accuracy (%) of the top-10 distinct accepted layers after "
             f"{summary.get('candidate_budget', '?')} candidates, over seeds (the mean of all accepted "
             "layers where a seed found fewer than 10: read it beside the count).", "",
             "![evolution vs random search](results/search/fig10.png)", "",
             markdown_table(["strategy", "seeds", "top-10 mean accuracy", "distinct layers accepted (per seed)",
                             "best layer's accuracy"], rows), "",
             markdown_table(["claim (section 6)", "evolution - random", "verdict"],
                            [["evolution finds better layers than random search at equal budget",
                              gap(evo, rnd), verdict(evo, rnd)]]), "",
             f"Command: `{summary.get('command', '?')}`. CPU time: "
             f"{format_duration(summary['cpu_seconds']) if 'cpu_seconds' in summary else 'not recorded'}.",
             f"Numbers: [{COLLECTED['fig10']}](results/search/fig10.json).", ""]
    return lines


def render(steps_log: dict) -> str:
    lines = ["# The paper's claims in miniature", "",
             "Generated by `python tools/reproduce.py` from the JSON under `docs/results/` (do not edit by hand). "
             "Every number is a miniature on this project's 2-core CPU machine with the embedded data (digits, "
             "generated shapes): it tests the direction of the paper's claims at small scale, not its ImageNet/COCO "
             "numbers. Verdict rule: the difference must exceed the spread (the larger sample std over seeds) — see "
             "the tool's docstring.", ""]
    for section in (table2_section, table3_section, table4_section, table5_section, fig10_section):
        lines += section(steps_log)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/reproduce.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=sorted(STEPS), help="run only these experiments")
    parser.add_argument("--report-only", action="store_true", help="run nothing; re-render docs/reproduction.md")
    parser.add_argument("--dry-run", action="store_true", help="print the commands without running them")
    parser.add_argument("--models", nargs="+", choices=CLASSIFICATION_MODELS, default=CLASSIFICATION_MODELS,
                        help="classification experiments: only these anchor models (default both)")
    parser.add_argument("--layers", nargs="+", default=(),
                        help="classification experiments: only these rows' layers (default every row of the table)")
    args = parser.parse_args(argv)
    steps = {**STEPS, **{name: classification_step(name, args.models, args.layers) for name in ("table2", "table3")}}
    steps_log = read_json(ROOT / STEPS_FILE, what="step log") if (ROOT / STEPS_FILE).exists() else {}
    if not args.report_only:
        for name in args.only or list(STEPS):
            if args.dry_run:
                print("\n".join(shown(c) for c in steps[name].commands))
                continue
            run_step(steps[name], steps_log)
    if args.dry_run:
        return 0
    atomic_write_text(ROOT / REPORT, render(steps_log) + "\n")
    print(f"[reproduce] wrote {REPORT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
