#!/usr/bin/env python3
"""The paper's claims in miniature: run the experiments, then write docs/reproduction.md and
docs/results/verdicts.json.

    python tools/reproduce.py                  # every experiment (Tables 2-5, Fig. 10), then the report
    python tools/reproduce.py --report-only    # only re-render the report from docs/results/
    python tools/reproduce.py --only table3    # one experiment (resumable), then the report

Each experiment is a command of its package, run as a subprocess that dies with this one
(however it ends); every one of them skips the runs it already finished, so an interrupted
reproduction continues where it stopped and a finished one is not rerun. The CPU time of each
step (user + system time of all its processes) is measured and kept in
docs/results/reproduction_steps.json. Their summaries (JSON, with every seed's numbers) go to
docs/results/<part>/. The paper's claims are data, in
tools/paper_claims.json; the report judges each by the rule below (needs scipy: the search and
gan extras install it).

Cost
----
CPU time on this project's 2-core machine. The report shows each step's measured time: that of the
invocations of this tool, so runs trained elsewhere (on a GPU, or by the package's own command) are
not in it. Every grid commits its finished runs (runs/reproduction/**), so it continues on any clone.

* table2, table3 (the MNIST miniatures of classification/tables.py's MiniScale, with their
  no-normalization rows; 5 seeds): table3's 360 runs finished (145 of them trained on GPUs);
  table2's 165 finished: MobileNetV2-CIFAR's 55 at 1 x 128, ResNet50-CIFAR's 55 in the 8 x 32 setting
  of 2026-11-30 and EfficientNet-CIFAR's 55 at 1 x 128 (since 2026-11-30).
  A run of 15 epochs on one thread costs 4.5-7.5 CPU-minutes (ResNet50-CIFAR at 8 x 32; Random +
  rej, a composed op, 11), 5-16 (MobileNetV2-CIFAR at 1 x 128) or 7.5-16.5 (EfficientNet-CIFAR at
  1 x 128; Random + rej 16.5) (docs/classification.md); table3's smaller ghost batches cost more per image. The step runs 2
  one-thread runs at a time, so its wall time is about half.
* table4 (detection/miniature.py, 5 layers x 2 settings x 5 seeds, each run 1800 steps of 8 images or
  7200 of 2, evaluated 10 times, one thread): an 8-image run takes 0.42-0.55 s a step (the control
  0.7-1.2; medians of the committed runs' logs), about 15 CPU-minutes with its evaluations, a 2-image
  run 0.23-0.30 s a step, about 30, so about 20 CPU-hours for the 50 runs.
* table5 (gan/table5.py, 7 generators, the paper's six and the no-normalization one, x 3 seeds; 8
  groups in grouped layers; each run 10000 steps, the same for all, then 1000 more at a time until
  two evaluated snapshots, every 500 steps, follow its best, at most 16000): about 0.22 s a step
  and 30 s an evaluation on one thread, 47 to 75 min a run, 16 to 26 CPU-hours for the 21.
* fig10 (search/compare.py, 2 strategies x 3 seeds, 2,000 candidates a search): not run by this tool yet;
  on the MNIST proxy roughly a CPU-day a search (docs/search.md). The committed JSON is the
  800-candidate comparison on the earlier 16 px digits proxy, 3 h 28 min CPU as it records; the
  report says so beside it.

The verdict rule
----------------
Every claim the paper's text makes about Tables 2-5, and its Fig. 10 claim, is listed in
tools/paper_claims.json: the words, the layers said to be better and worse, the metric, the kind
and the paper's cells. Each paper cell with a counterpart in the miniature (its anchor model,
images per worker, detection setting or GAN) gives one comparison per pair of better and worse
layers; the other cells are named "outside the miniature". Images per worker are matched as
numbers, except the paper's "original batch size" (128 per worker), which is the miniature's
largest. Nothing is chosen after the fact:
the comparisons follow from the claim and from which cells the miniature ran, not from results.
A classification cell counts only if it was trained with the settings this tool's grid trains
now (MiniScale in classification/tables.py; each cell of the summary records its `setting`):
cells of an earlier setting are shown apart, labelled so, and count as not measured. An anchor's
column counts once its grid is complete (every row of the table and its controls, at every images
per worker, on every seed); until then its runs are shown and the paper's column is named outside
the miniature, "grid incomplete", so that no verdict reads a column part-way.

* Test: one-sided t-test (scipy.stats) in the claimed direction (lower is better for FID):
  paired on the per-seed differences (ttest_rel) when both sides were run with the same seeds,
  Welch's (ttest_ind, equal_var=False) otherwise, one-sample (ttest_1samp) against chance
  accuracy, 10 % (10 digit classes). A classification run that diverged counts as 0 % (the
  paper prints 1e-3 for a layer that does not train); a search seed that accepted no layer has
  no top-10 value and is left out. Values without spread (standard error below 1e-9 of their
  size, or below 1e-9 if their size is under 1) leave t undefined: p = 1 both ways. A side with
  fewer than two values is not measured.
* Kinds: superiority (H1: A - B > 0) for "improves", "outperforms", "surpass", "strongest",
  "worse", "works"; non-inferiority (H1: A - B > -margin) only where the paper says there is
  no difference: "no worse", "comparable", GN-ReLU improving "only" at small batches (BN-ReLU
  no worse than GN-ReLU elsewhere), "near-zero" and 1e-3 accuracy (chance no worse than the
  layer: at most the margin above chance). Margins, fixed before the runs with controls: 1
  point of top-1 accuracy (the miniatures' seed-to-seed spread is 0.2 to 1 point; the paper's
  own tolerance is tighter: it calls B0's 0.2-point drop an exception, so "holds" here is the
  weaker statement "at most 1 point worse"); 1.0 IS on the digits classifier (real digits 8.4,
  noise 2.1), about the 15 % shortfall the paper calls comparable (101.1 against 118.8).
* A claim holds only if each of its comparisons does: its p is the largest of theirs
  (intersection-union test). Its opposite, "some comparison goes the other way" (A - B < 0,
  for non-inferiority A - B < -margin), has p = the smallest opposite p times the number of
  comparisons (Bonferroni).
* Correction: Holm-Bonferroni at family-wise alpha = 0.05 over one family: two hypotheses for
  each claim with data (the claim and its opposite) and one for each gate with data, counted
  whatever the gates decide. The chance that any "holds", "contradicted" or "separated" in the
  report is false is then at most 5 % (if the t-tests' normal model holds).
* Gates: before a claim counts, its reference layers must beat the no-normalization control
  (no_norm_relu, a per-channel affine then ReLU) by the same test and correction, on the
  claim's metric, in each miniature cell of the claim (for Table 3 at every images per worker
  the control ran at). The references: BN-ReLU for Table 2, GN-ReLU for Table 3 (the S table,
  whose BN-ReLU is expected to fail at small batches); in Tables 4 and 5 BN-ReLU if a layer
  compared uses batch statistics and GN-ReLU if one does not (both where a claim compares the
  two kinds, so that no claim is won against a comparator that does not train). Fig. 10 is
  not a table and has no gate.
* Peaks (Table 5): the paper reports each GAN run at its peak, and gan/table5.py reports each run
  at its best-FID snapshot, IS taken at the same snapshot. A run whose best snapshot is its last
  was still improving when it stopped: its peak was not measured. A run the grid's schedule is not
  done with (not yet trained to the length every run trains) is not comparable with the others. A
  Table 5 claim that reads such a run (a layer it compares, or its gate's reference or control, on
  any seed), or a summary that does not record where each run peaked, "cannot resolve". Runs of
  different layers share their seeds, so the Table 5 tests are paired by seed; the report prints
  every per-seed difference.
* Outcome, the first that applies: "not measured" (a comparison without data, or a gate with a
  comparison without data: its reference's or its control's); "cannot resolve" (a gate's
  reference is not separated from the control in this miniature: the gate's p, the largest over
  its cells and images per worker, is above alpha after Holm; or, in Table 5, still improving at
  the last snapshot or not trained to the grid's length, above; such claims stay in Holm's
  family); "holds" (Holm-adjusted p <= 0.05); "contradicted" (Holm-adjusted opposite p <= 0.05);
  "not resolved".
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shlex
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from scipy import stats

from evonorm_core import list_norm_acts, uses_batch_statistics
from evonorm_core.experiment.arguments import positive_int
from evonorm_core.experiment.children import run_command
from evonorm_core.experiment.config import config_to_dict
from evonorm_core.experiment.files import (
    CorruptFileError,
    atomic_write_json,
    atomic_write_text,
    read_json,
    read_json_object,
)
from evonorm_core.experiment.progress import format_duration
from evonorm_core.experiment.rundir import file_lock
from evonorm_core.experiment.stopping import stop_signals_interrupt
from evonorm_core.experiment.tables import format_mean_std, markdown_table
from evonorm_core.experiment.verdicts import (
    ALPHA,
    CANNOT_RESOLVE,
    CONTRADICTED,
    HOLDS,
    NOT_MEASURED,
    NOT_RESOLVED,
    Comparison,
    Constant,
    Question,
    Sample,
    TTest,
    Verdict,
    judge,
)
from evonorm_suite.classification.paper_tables import LAYERS as CLASSIFICATION_LAYERS
from evonorm_suite.classification.paper_tables import TABLES as PAPER_TABLES
from evonorm_suite.classification.tables import (
    CHANCE_TOP1,
    DIVERGED_TOP1,
    MINI_MODELS,
    SETTING_KEYS,
    MiniScale,
    format_devices,
)
from evonorm_suite.gan.report import LABELS as GAN_LABELS
from evonorm_suite.gan.report import TABLE5, layer_name

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path("docs/results")
REPORT = Path("docs/reproduction.md")
VERDICTS = RESULTS / "verdicts.json"
STEPS_FILE = RESULTS / "reproduction_steps.json"
STEPS_LOCK = RESULTS / ".reproduction_steps.lock"  # two invocations (e.g. --only table2, --only table4) share the log
CLAIMS_FILE = Path(__file__).resolve().with_name("paper_claims.json")
RUNS = Path("runs/reproduction")
PY = [sys.executable]
RULE_HEADING = "The verdict rule\n----------------\n"


# ------------------------------------------------------------------------------ running the experiments
@dataclass(frozen=True)
class Step:
    """One experiment: the commands that run it (resumable) and the summary they leave."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    summary: Path
    setting: dict | None = None  # the settings its runs are made with, where they can change (classification)


CLASSIFICATION_MODELS = tuple(MINI_MODELS)  # the paper's models with a CIFAR anchor
CLASSIFICATION_TABLES = ("table2", "table3")
MINI_SCALE = MiniScale()  # what classification/tables.py run --scale mini trains without flags
EARLIER = "earlier settings"  # the steps log's key for the entries of steps run with other settings
RESTORE = "restore it (git checkout) or rerun the step that writes it"
TABLE4_ITERATIONS = 1800  # steps of 8 images per detection run: detection/miniature.py's ITERATIONS, stated here so
# that the step's setting is known without importing detectron2
FIG10_CANDIDATES = 2000  # candidates proposed per search of Fig. 10's step


def table_models(table: str) -> list[str]:
    """The anchor models of the table's miniature: those of its paper columns that have a CIFAR anchor."""
    return [model for model in CLASSIFICATION_MODELS if model in PAPER_TABLES[table].models]


def classification_step(table: str, models: Sequence[str], layers: Sequence[str], jobs: int) -> Step:
    """Train ``table``'s grid for those of ``models`` that it has (none: nothing to train), then summarize it."""
    runs = RUNS / "classification_mnist" / table  # not the folder of the earlier digits grid
    out = RESULTS / "classification"
    models = [model for model in table_models(table) if model in models]
    run = (*PY, "classification/tables.py", "run", table, "--scale", "mini", "--models", *models,
           *(("--layers", *layers) if layers else ()), "--runs-dir", str(runs), "--jobs", str(jobs))
    report = (*PY, "classification/tables.py", "report", table, str(runs), "--json", str(out / f"{table}.json"),
              "--png", str(out / f"{table}.png"), "--curves", str(out / f"{table}_curves.png"))
    return Step(table, (run, report) if models else (report,), out / f"{table}.json", step_setting(table))


def step_setting(table: str) -> dict:
    """The MiniScale fields that ``table``'s cells train with, as its steps-log entry records them: all of them
    but, for Table 3, ``table2_on_workers``, a Table 2 field added after Table 3's entry was made."""
    setting = config_to_dict(MINI_SCALE)
    if PAPER_TABLES[table].is_batch_sweep:
        del setting["table2_on_workers"]
    return setting


def experiment_steps(models: Sequence[str] = CLASSIFICATION_MODELS, layers: Sequence[str] = (),
                     jobs: int = 2) -> dict[str, Step]:
    """Every experiment, in the order they run; ``jobs`` runs at once within a step (Fig. 10's search runs alone)."""
    return {
        **{table: classification_step(table, models, layers, jobs) for table in CLASSIFICATION_TABLES},
        "table4": Step("table4", ((*PY, "detection/miniature.py", "--iterations", str(TABLE4_ITERATIONS),
                                   "--runs-dir", str(RUNS / "detection"), "--out", str(RESULTS / "detection"),
                                   "--jobs", str(jobs)),),
                       RESULTS / "detection" / "miniature.json", {"iterations": TABLE4_ITERATIONS}),
        "table5": Step("table5", ((*PY, "gan/table5.py", "--runs-dir", str(RUNS / "gan"),
                                   "--out", str(RESULTS / "gan"), "--jobs", str(jobs)),),
                       RESULTS / "gan" / "table5.json"),
        "fig10": Step("fig10", ((*PY, "search/compare.py", "--output-dir", str(RUNS / "fig10"),
                                 "--max-candidates", str(FIG10_CANDIDATES),
                                 "--json", str(RESULTS / "search" / "fig10.json"),
                                 "--plot", str(RESULTS / "search" / "fig10.png")),),
                      RESULTS / "search" / "fig10.json", {"max_candidates": FIG10_CANDIDATES}),
    }


STEPS = experiment_steps()
SUMMARIES = {name: step.summary for name, step in STEPS.items()}


def shown(command: tuple[str, ...]) -> str:
    """The command as a user types it (``python`` for this interpreter)."""
    return shlex.join(["python", *command[1:]] if command[0] == sys.executable else command)


def children_cpu_seconds() -> float:
    """User + system CPU time of this process's finished children and their descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_step(step: Step) -> None:
    """Run ``step``'s commands one after another; its wall and CPU time go to the steps log however it ends
    (Ctrl-C and SIGTERM included: the running command's process group is stopped first)."""
    started, cpu_before = time.monotonic(), children_cpu_seconds()
    try:
        for command in step.commands:
            print(f"[reproduce] {step.name}: {shown(command)}", flush=True)
            try:
                with stop_signals_interrupt():
                    code = run_command(command, cwd=ROOT)
            except KeyboardInterrupt:
                raise SystemExit(f"[reproduce] {step.name}: interrupted; finished runs are kept, so rerunning "
                                 "resumes") from None
            if code:
                raise SystemExit(f"[reproduce] {step.name}: `{shown(command)}` exited with status {code} (its message "
                                 "is above); finished runs are kept, so rerunning resumes")
    finally:  # an interrupted or failed invocation's time counts too: a resumed step adds to it
        record_time(step, time.monotonic() - started, children_cpu_seconds() - cpu_before)


def read_steps_log() -> dict:
    """The steps log (empty before the first step ran)."""
    path = ROOT / STEPS_FILE
    return read_json_object(path, what="step log", advice=RESTORE) if path.exists() else {}


def record_time(step: Step, wall_seconds: float, cpu_seconds: float) -> None:
    """Add one invocation's time to ``step``'s entry of the steps log (a new entry when its setting changed).
    The log is read and written under a lock, so invocations running side by side keep each other's entries."""
    (ROOT / STEPS_LOCK).parent.mkdir(parents=True, exist_ok=True)
    with file_lock(ROOT / STEPS_LOCK):
        log = read_steps_log()
        if step.name in log and log[step.name].get("setting") != step.setting:  # run before with other settings
            log.setdefault(EARLIER, {}).setdefault(step.name, []).append(log.pop(step.name))
        entry = log.setdefault(step.name, {"commands": [], "wall_seconds": 0.0, "cpu_seconds": 0.0,
                                           "cpu_measured": True, "setting": step.setting})
        entry["commands"] += [shown(c) for c in step.commands if shown(c) not in entry["commands"]]
        entry["wall_seconds"] += wall_seconds
        entry["cpu_seconds"] += cpu_seconds
        entry["cpu_measured"] = entry.get("cpu_measured", False)  # entries from before the measurement estimated it
        atomic_write_json(ROOT / STEPS_FILE, log)


# ------------------------------------------------------------------------------ the claims, as data
@dataclass(frozen=True)
class Metric:
    name: str
    higher_is_better: bool
    margin: float | None  # the non-inferiority margin, in the metric's units (None: no such claim uses it)


METRICS = {
    "top1": Metric("top-1 (%)", True, 1.0),
    "box_ap": Metric("box AP", True, None),
    "mask_ap": Metric("mask AP", True, None),
    "is": Metric("IS", True, 1.0),
    "fid": Metric("FID", False, None),
    "top10": Metric("top-10 mean accuracy (%)", True, None),
}
KINDS = ("superiority", "non-inferiority")
TABLES = {  # claim table -> its metrics
    "table2": ("top1",), "table3": ("top1",), "table4": ("box_ap", "mask_ap"), "table5": ("is", "fid"),
    "fig10": ("top10",),
}
CHANCE = "chance"  # the claims' name for guessing: CHANCE_TOP1
LARGEST = "largest"  # Table 3: the miniature's largest images per worker (the paper's original 128)
REFERENCES = {"bn_relu": "BN-ReLU", "gn_relu": "GN-ReLU"}  # the gates' reference layers
TABLE_REFERENCE = {"table2": "bn_relu", "table3": "gn_relu"}  # Tables 4 and 5: by the layers compared
# The one place that names the miniatures and their layers:
MINIATURE = {  # the paper's cell -> the miniature's (anchor model, detection setting, the GAN, the proxy)
    "table2": {"R-50": "resnet50", "MobileNetV2": "mobilenetv2", "EfficientNet-B0": "efficientnet_b0"},
    "table3": {"ResNet-50": "resnet50", "MobileNetV2": "mobilenetv2"},
    "table4": {"R-50-FPN": "batch8"},  # half-width ResNet-18-FPN at the paper's 8 images per step
    "table5": {"BigGAN-deep": "digits"},
    "fig10": {"proxy task": "proxy"},
}
CONTROLS = {"table2": "no_norm_relu", "table3": "no_norm_relu", "table4": "no_norm_relu", "table5": "no_norm_relu"}
RENAMED = {"table4": {"bn_relu": "bn", "gn_relu": "gn"}}  # a claim's layer name -> the JSON's, where they differ


@dataclass(frozen=True)
class Cell:
    """A cell of the paper: a model, backbone or setting, and for Table 3 its images per worker."""

    paper: str
    batches: tuple[int | str, ...] = ()  # numbers, or LARGEST


@dataclass(frozen=True)
class Claim:
    """One claim of the paper's text (tools/paper_claims.json; the rule in this tool's docstring)."""

    id: str
    section: str
    quote: str
    table: str
    metric: str
    kind: str
    better: tuple[str, ...]  # layers (``layer@images-per-worker`` or ``layer@largest``), or "chance"
    worse: tuple[str, ...]
    cells: tuple[Cell, ...]
    note: str = ""

    @property
    def margin(self) -> float:
        return METRICS[self.metric].margin if self.kind == "non-inferiority" else 0.0

    @property
    def gates(self) -> tuple[str, ...]:
        """The reference layers that must beat the no-normalization control first (the rule's "Gates")."""
        if self.table not in CONTROLS:
            return ()
        if self.table in TABLE_REFERENCE:
            return (TABLE_REFERENCE[self.table],)
        layers = {side(spec)[0] for spec in (*self.better, *self.worse)} - {CHANCE}
        return tuple(sorted({"bn_relu" if uses_batch_statistics(layer) else "gn_relu" for layer in layers}))

    @classmethod
    def from_dict(cls, data: dict) -> Claim:
        where = f"claim {data.get('id', '?')!r}"
        fields = set(cls.__dataclass_fields__)
        if unknown := set(data) - fields:
            raise ValueError(f"{where}: unknown fields {sorted(unknown)}; accepted: {sorted(fields)}")
        if missing := fields - {"note"} - set(data):
            raise ValueError(f"{where}: missing fields {sorted(missing)}")
        if bad := [c for c in data["cells"] if not isinstance(c, dict) or set(c) - {"paper", "batches"}]:
            raise ValueError(f"{where}: a cell is {{\"paper\": ..., \"batches\": [...]}}, got {bad}")
        cells = tuple(Cell(c["paper"], tuple(c.get("batches", ()))) for c in data["cells"])
        claim = cls(**{**data, "better": tuple(data["better"]), "worse": tuple(data["worse"]), "cells": cells})
        claim.check()
        return claim

    def to_dict(self) -> dict:
        cells = [{"paper": c.paper, **({"batches": list(c.batches)} if c.batches else {})} for c in self.cells]
        return {"id": self.id, "section": self.section, "quote": self.quote, "table": self.table,
                "metric": self.metric, "kind": self.kind, "better": list(self.better), "worse": list(self.worse),
                "cells": cells, "note": self.note}

    def check(self) -> None:
        def require(ok: bool, what: str, got: object) -> None:
            if not ok:
                raise ValueError(f"claim {self.id!r}: {what}, got {got!r}")

        require(self.table in TABLES, f"table must be one of {sorted(TABLES)}", self.table)
        require(self.metric in TABLES[self.table], f"metric must be one of {TABLES[self.table]}", self.metric)
        require(self.kind in KINDS, f"kind must be one of {KINDS}", self.kind)
        require(self.kind == "superiority" or METRICS[self.metric].margin is not None,
                "non-inferiority needs a metric with a margin", self.metric)
        require(bool(self.better and self.worse), "better and worse need a layer each", (self.better, self.worse))
        require(CHANCE not in (*self.better, *self.worse) or self.metric == "top1", "chance is a top-1 level",
                self.metric)
        require(bool(self.cells) and all(c.paper for c in self.cells), "cells need a paper name each", self.cells)
        require(self.table == "table3" or not any(c.batches for c in self.cells), "batches are Table 3's",
                self.cells)
        fixed = [side(s)[1] for s in (*self.better, *self.worse) if "@" in s]
        batches = [b for c in self.cells for b in c.batches] + fixed
        require(all(b == LARGEST or (isinstance(b, int) and b > 0) for b in batches),
                f"images per worker are positive whole numbers or {LARGEST!r}", batches)
        require(not fixed or self.table == "table3", "layer@images-per-worker is Table 3's", fixed)
        if self.table in ("table4", "table5"):
            unknown = {side(s)[0] for s in (*self.better, *self.worse)} - set(list_norm_acts())
            require(not unknown, "Tables 4 and 5 compare registered layers", sorted(unknown))


def load_claims(path: Path = CLAIMS_FILE) -> list[Claim]:
    claims = [Claim.from_dict(entry) for entry in read_json(path, what="claims file")]
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: claim ids must be unique, got {sorted({i for i in ids if ids.count(i) > 1})}")
    return claims


# ------------------------------------------------------------------------------ the miniature's cells
Values = tuple[tuple[float, ...], tuple[int, ...]]  # (values, seeds)


def classification_values(summary: dict, cell: str, layer: str, batch: int | None, metric: str) -> Values:
    for entry in summary["cells"]:
        if (entry["model"], entry["layer"], entry["batch"]) == (cell, layer, batch):
            return tuple(finals(entry)), tuple(entry["seeds"])
    return (), ()


def detection_values(summary: dict, cell: str, layer: str, batch: int | None, metric: str) -> Values:
    for entry in summary["cells"]:
        if (entry["setting"], entry["layer"]) == (cell, layer):
            return tuple(r[metric] for r in entry["runs"]), tuple(r["seed"] for r in entry["runs"])
    return (), ()


def gan_result(summary: dict, layer: str) -> dict | None:
    """Table 5: the summary's result for ``layer`` (whatever its options), None if it has none."""
    keys = [key for key in summary["layers"] if layer_name(key) == layer]
    if len(keys) > 1:
        raise ValueError(f"{STEPS['table5'].summary}: {keys} are all {layer}; the report compares one of them")
    return summary["layers"][keys[0]] if keys else None


def gan_values(summary: dict, cell: str, layer: str, batch: int | None, metric: str) -> Values:
    result = gan_result(summary, layer)
    return (tuple(result[metric]), tuple(result["seeds"])) if result else ((), ())


def gan_still_improving(summary: dict, layer: str) -> tuple[int, ...] | None:
    """Table 5: the seeds of ``layer`` whose reported snapshot is their last (still improving when they stopped);
    None where the summary does not record it, () for a layer it does not hold."""
    result = gan_result(summary, layer)
    if result is None:
        return ()
    if "best_at_last" not in result:
        return None
    return tuple(seed for seed, at_last in zip(result["seeds"], result["best_at_last"]) if at_last)


def gan_unfinished(summary: dict, layer: str) -> tuple[int, ...]:
    """Table 5: the seeds of ``layer`` the grid's schedule is not done with (not yet trained to its length, or not
    yet past its peak below the cap); () where the summary does not record it."""
    result = gan_result(summary, layer)
    return tuple(result.get("unfinished", ())) if result else ()


def search_values(summary: dict, cell: str, layer: str, batch: int | None, metric: str) -> Values:
    result = summary["strategies"].get(layer, {"top10_final": [], "seeds": []})
    kept = [(100 * v, s) for v, s in zip(result["top10_final"], result["seeds"]) if v is not None]
    return tuple(v for v, _ in kept), tuple(s for _, s in kept)


READERS: dict[str, Callable[[dict, str, str, int | None, str], Values]] = {
    "table2": classification_values, "table3": classification_values, "table4": detection_values,
    "table5": gan_values, "fig10": search_values,
}


def in_current_setting(table: str, cell: dict) -> bool:
    """Whether a classification summary's cell was trained with the settings the grid trains now."""
    wanted = MINI_SCALE.setting(PAPER_TABLES[table], cell["model"], cell["batch"])
    return cell.get("setting") == {key: wanted[key] for key in SETTING_KEYS}


def split_setting(table: str, summary: dict | None) -> tuple[dict | None, list[dict]]:
    """A summary as the verdicts read it (classification: its cells in the current setting; None if it has
    none) and the cells set aside (an earlier setting)."""
    if summary is None or table not in CLASSIFICATION_TABLES:
        return summary, []
    current = [c for c in summary["cells"] if in_current_setting(table, c)]
    earlier = [c for c in summary["cells"] if not in_current_setting(table, c)]
    return ({**summary, "cells": current} if current else None), earlier


@dataclass(frozen=True)
class Miniature:
    """The summaries of the experiments (``None``: not run yet, or only in an earlier setting), read cell by
    cell, and the cells set aside as an earlier setting's."""

    summaries: dict[str, dict | None]
    earlier: dict[str, list[dict]]

    @classmethod
    def from_summaries(cls, summaries: dict[str, dict | None]) -> Miniature:
        split = {table: split_setting(table, summary) for table, summary in summaries.items()}
        return cls({t: current for t, (current, _) in split.items()}, {t: old for t, (_, old) in split.items()})

    def sample(self, table: str, cell: str, layer: str, batch: int | str | None, metric: str) -> Sample | Constant:
        if layer == CHANCE:
            return Constant(f"chance ({CHANCE_TOP1:g} %)", CHANCE_TOP1)
        name = RENAMED.get(table, {}).get(layer, layer)
        summary = self.summaries[table]
        values, seeds = READERS[table](summary, cell, name, batch, metric) if summary else ((), ())
        return Sample(f"{name} {cell}" + (f" @{batch}" if batch else ""), values, seeds)

    def runs_missing(self, table: str, model: str) -> tuple[int, int]:
        """A classification anchor's column: ``(runs of its grid the current setting's summary lacks, runs of its
        grid)``, the grid as classification/tables.py trains it (MiniScale.grid); (0, 0) elsewhere."""
        if table not in CLASSIFICATION_TABLES:
            return 0, 0
        ran = {(c["model"], c["layer"], c["batch"], seed)
               for c in (self.summaries[table] or {}).get("cells", []) for seed in c["seeds"]}
        grid = MINI_SCALE.grid(PAPER_TABLES[table], [model])
        return sum((c.model, CLASSIFICATION_LAYERS[c.label], c.batch, c.seed) not in ran for c in grid), len(grid)

    def batches(self, table: str, cell: str, layer: str | None = None) -> list[int] | None:
        """Table 3: the images per worker the miniature ran for a model (a layer's, if named); None: not run."""
        summary = self.summaries[table]
        if summary is None:
            return None
        return sorted({e["batch"] for e in summary["cells"]
                       if e["model"] == cell and layer in (None, e["layer"]) and e["batch"] is not None}, reverse=True)


def side(spec: str) -> tuple[str, int | str | None]:
    """``"bn_relu@128"`` -> ``("bn_relu", 128)``, ``"bn_relu@largest"`` -> ``("bn_relu", "largest")``,
    ``"bn_relu"`` -> ``("bn_relu", None)``."""
    layer, _, batch = spec.partition("@")
    return layer, int(batch) if batch.isdigit() else batch or None


# ------------------------------------------------------------------------------ claims and gates as questions
@dataclass(frozen=True)
class Gate:
    """A reference layer over the no-normalization control, in one miniature cell and metric."""

    table: str
    cell: str
    reference: str
    metric: str

    @property
    def id(self) -> str:
        return f"{self.table} {self.cell}: {REFERENCES[self.reference]} over {CONTROLS[self.table]} ({self.metric})"

    def question(self, miniature: Miniature) -> Question:
        batches: list[int | None] = [None]
        if self.table == "table3":  # every images per worker the control ran at
            batches = miniature.batches(self.table, self.cell, CONTROLS[self.table]) or [None]
        higher = METRICS[self.metric].higher_is_better
        return Question(self.id, tuple(
            Comparison(miniature.sample(self.table, self.cell, self.reference, b, self.metric),
                       miniature.sample(self.table, self.cell, CONTROLS[self.table], b, self.metric), higher)
            for b in batches))


@dataclass(frozen=True)
class Expanded:
    """A claim as the miniature can test it."""

    claim: Claim
    question: Question
    gates: tuple[Gate, ...]
    outside: tuple[str, ...]  # the paper's cells with no counterpart in the miniature


def peak_reason(claim: Claim, miniature: Miniature) -> str:
    """Why a Table 5 claim cannot be resolved at the runs' peaks ("" if it can, or if it is not Table 5's or not
    measured): runs it reads (its layers, its gates' references and control) best at their last snapshot, or not
    yet trained as far as the grid's schedule asks."""
    summary = miniature.summaries.get(claim.table)
    if claim.table != "table5" or summary is None:
        return ""
    layers = {side(spec)[0] for spec in (*claim.better, *claim.worse)} | set(claim.gates)
    layers |= {CONTROLS[claim.table]} if claim.gates else set()
    found = {layer: gan_still_improving(summary, layer) for layer in sorted(layers)}
    improving = named_seeds(found)
    unfinished = named_seeds({layer: gan_unfinished(summary, layer) for layer in sorted(layers)})
    unrecorded = [GAN_LABELS.get(layer, layer) for layer, seeds in found.items() if seeds is None]
    reasons = (["still improving at the last snapshot (best snapshot = last): " + improving] if improving else [])
    if unfinished:
        reasons.append("not yet trained as far as the grid's schedule asks (the same length for every run, then "
                       "past its peak): " + unfinished)
    if unrecorded:
        reasons.append("the summary does not record whether these runs peaked before their last snapshot: "
                       + ", ".join(unrecorded))
    return "; ".join(reasons)


def named_seeds(seeds_of: dict[str, tuple[int, ...] | None]) -> str:
    """``BN-ReLU seeds 0, 2; EvoNorm-B0 seed 1`` for the layers with seeds in ``seeds_of`` (None or (): none)."""
    return "; ".join(f"{GAN_LABELS.get(layer, layer)} seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
                     for layer, seeds in seeds_of.items() if seeds)


def expand(claim: Claim, miniature: Miniature) -> Expanded:
    comparisons, gates, outside = [], [], []
    higher = METRICS[claim.metric].higher_is_better
    for cell in claim.cells:
        mini = MINIATURE[claim.table].get(cell.paper)
        if mini is None:
            outside.append(cell.paper)
            continue
        missing, grid = miniature.runs_missing(claim.table, mini)
        if missing:
            outside.append(f"{cell.paper} (grid incomplete: {grid - missing} of its {grid} runs)")
            continue
        ran = miniature.batches(claim.table, mini) if claim.table == "table3" else None  # largest first

        def resolve(batch: int | str | None) -> int | str | None:  # not run: stays LARGEST, not measured
            return (ran[0] if ran else batch) if batch == LARGEST else batch

        batches: list[int | str | None] = [None]
        if cell.batches:
            batches = [resolve(b) for b in cell.batches if b == LARGEST or not ran or b in ran]
            outside += [f"{cell.paper} at {b} images per worker" for b in cell.batches
                        if b != LARGEST and ran and b not in ran]
        gates += [Gate(claim.table, mini, reference, claim.metric) for reference in claim.gates]
        for batch in batches:
            for better in claim.better:
                for worse in claim.worse:
                    (a, a_batch), (b, b_batch) = side(better), side(worse)
                    comparisons.append(Comparison(
                        miniature.sample(claim.table, mini, a, resolve(a_batch) or batch, claim.metric),
                        miniature.sample(claim.table, mini, b, resolve(b_batch) or batch, claim.metric), higher,
                        claim.margin))
    if not comparisons:  # no cell of the claim is in the miniature: not measured
        comparisons = [Comparison(Sample(f"{claim.better[0]} {c.paper}", (), ()), Sample(f"{claim.worse[0]} {c.paper}",
                                  (), ()), higher, claim.margin) for c in claim.cells]
    question = Question(claim.id, tuple(comparisons), tuple(g.id for g in gates), peak_reason(claim, miniature))
    return Expanded(claim, question, tuple(gates), tuple(outside))


@dataclass(frozen=True)
class Judged:
    """Every claim and gate of the report with its verdict, and the size of Holm's family."""

    miniature: Miniature
    claims: list[Expanded]
    gates: dict[str, Gate]
    claim_verdicts: dict[str, Verdict]
    gate_verdicts: dict[str, Verdict]
    gate_questions: dict[str, Question]
    hypotheses: int


def judge_claims(claims: Sequence[Claim], miniature: Miniature) -> Judged:
    expanded = [expand(claim, miniature) for claim in claims]
    gates = {g.id: g for e in expanded for g in e.gates}
    gate_questions = {gid: gate.question(miniature) for gid, gate in gates.items()}
    gate_verdicts, claim_verdicts, hypotheses = judge(list(gate_questions.values()), [e.question for e in expanded])
    return Judged(miniature, expanded, gates, claim_verdicts, gate_verdicts, gate_questions, hypotheses)


# ------------------------------------------------------------------------------ verdicts.json
def finite(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


def side_json(side_: Sample | Constant) -> dict:
    if isinstance(side_, Constant):
        return {"label": side_.label, "constant": side_.value}
    return {"label": side_.label, "seeds": list(side_.seeds), "values": list(side_.values)}


def comparison_json(comparison: Comparison, test: TTest | None) -> dict:
    result = {"a": side_json(comparison.a), "b": side_json(comparison.b),
              "higher_is_better": comparison.higher_is_better, "margin": comparison.margin}
    if test is not None:
        result.update(test=test.test, paired_seeds=list(test.paired_seeds), difference=test.difference,
                      statistic=finite(test.statistic), df=finite(test.df), p=test.p, p_opposite=test.p_opposite)
    return result


def verdict_json(question: Question, verdict: Verdict) -> dict:
    return {"outcome": verdict.outcome, "reason": verdict.reason, "p": verdict.p, "p_opposite": verdict.p_opposite,
            "p_holm": verdict.p_holm, "p_opposite_holm": verdict.p_opposite_holm,
            "comparisons": [comparison_json(c, t) for c, t in zip(question.comparisons, verdict.tests)]}


def verdicts_document(judged: Judged) -> dict:
    gates = [{"id": gid, "table": g.table, "cell": g.cell, "reference": g.reference, "control": CONTROLS[g.table],
              "metric": g.metric, "needed_by": [e.claim.id for e in judged.claims if gid in e.question.gates],
              **verdict_json(judged.gate_questions[gid], judged.gate_verdicts[gid])}
             for gid, g in judged.gates.items()]
    claims = [{**e.claim.to_dict(), "margin": e.claim.margin, "gates": list(e.claim.gates),
               "gate_ids": list(e.question.gates),
               "outside_miniature": list(e.outside), **verdict_json(e.question, judged.claim_verdicts[e.claim.id])}
              for e in judged.claims]
    rule = {"alpha": ALPHA, "correction": "Holm-Bonferroni", "hypotheses": judged.hypotheses,
            "margins": {m: metric.margin for m, metric in METRICS.items() if metric.margin is not None},
            "chance_top1": CHANCE_TOP1, "diverged_top1": DIVERGED_TOP1}
    return {"format": "evonorm-verdicts/1", "rule": rule, "summaries": summaries_json(judged.miniature),
            "gates": gates, "claims": claims}


def summaries_json(miniature: Miniature) -> dict:
    """Per experiment: its summary file, the cells the verdicts read and the cells set aside (an earlier setting)."""
    def cells_read(table: str) -> int | None:
        if table not in CLASSIFICATION_TABLES:
            return None
        return len(miniature.summaries[table]["cells"]) if miniature.summaries[table] else 0

    return {table: {"path": str(path), "found": (ROOT / path).exists(), "cells_read": cells_read(table),
                    "cells_set_aside": len(miniature.earlier[table])} for table, path in SUMMARIES.items()}


# ------------------------------------------------------------------------------ the report
def load(path: Path) -> dict | None:
    """The experiment summary at ``path`` (None: not measured yet); :class:`CorruptFileError` if it is not
    a JSON object."""
    full = ROOT / path
    return read_json_object(full, what="experiment summary", advice=RESTORE) if full.exists() else None


def rule_text() -> str:
    """The verdict rule as this tool's docstring states it (the report's header)."""
    if not __doc__:
        raise SystemExit("the report's header is this tool's docstring: run it without python -OO")
    return __doc__[__doc__.index(RULE_HEADING) + len(RULE_HEADING):].strip()


def first_holm_t(hypotheses: int, seeds: int) -> float:
    """The t a paired comparison over ``seeds`` seeds needs to pass Holm's first step."""
    return float(stats.t.isf(ALPHA / max(hypotheses, 1), seeds - 1))


OUTCOMES = (HOLDS, CONTRADICTED, NOT_RESOLVED, CANNOT_RESOLVE, NOT_MEASURED)
TABLE_TITLES = {"table2": "Table 2", "table3": "Table 3", "table4": "Table 4", "table5": "Table 5", "fig10": "Fig. 10"}


def outcome_counts(judged: Judged) -> str:
    counts = Counter((e.claim.table, judged.claim_verdicts[e.claim.id].outcome) for e in judged.claims)
    rows = [[title, *(str(counts[table, o]) for o in OUTCOMES)] for table, title in TABLE_TITLES.items()]
    return markdown_table(["claims of", *OUTCOMES], rows)


def header(judged: Judged) -> list[str]:
    m = judged.hypotheses
    tests = sum(t is not None for v in (*judged.claim_verdicts.values(), *judged.gate_verdicts.values()) for t in v.tests)
    return [
        "# The paper's claims in miniature", "",
        "Generated by `python tools/reproduce.py` from the JSON under `docs/results/` (do not edit by hand); the "
        "verdicts, with every number behind them, are in [results/verdicts.json](results/verdicts.json). Every number "
        "is a miniature on this project's 2-core CPU machine with embedded data (digits, MNIST, generated shapes): it tests "
        "the direction of the paper's claims at small scale, not its ImageNet/COCO numbers.", "",
        "## The verdict rule", "", rule_text(), "",
        f"This report: {len(judged.claims)} claims and {len(judged.gates)} gates, {tests} comparisons with data "
        f"(t-tests), {m} hypotheses in Holm's family (alpha = {ALPHA}). The "
        f"hypothesis with the smallest p passes Holm's first step if p <= alpha / {m} = {ALPHA / max(m, 1):.2g}: a "
        f"paired t of at least {first_holm_t(m, 3):.1f} with 3 seeds, {first_holm_t(m, 5):.1f} with 5, "
        f"{first_holm_t(m, 10):.1f} with 10 (later steps need a little less).", "",
        outcome_counts(judged), "", *set_aside_line(judged),
    ]


def set_aside_line(judged: Judged) -> list[str]:
    """Which classification summaries hold cells of an earlier setting, which no verdict reads."""
    earlier = {table: cells for table, cells in judged.miniature.earlier.items() if cells}
    if not earlier:
        return []
    counts = ", ".join(f"{TABLE_TITLES[table]} {len(cells)} cells ({sum(len(c['seeds']) for c in cells)} runs)"
                       for table, cells in earlier.items())
    return [f"Set aside as an earlier setting's, shown in their sections and read by no verdict: {counts}.", ""]


def deciding(verdict: Verdict, question: Question) -> tuple[Comparison, TTest] | None:
    """The comparison that decides a claim: the smallest opposite p if contradicted, else the largest p."""
    pairs = [(c, t) for c, t in zip(question.comparisons, verdict.tests) if t is not None]
    if not pairs:
        return None
    if verdict.outcome == CONTRADICTED:
        return min(pairs, key=lambda pair: pair[1].p_opposite)
    return max(pairs, key=lambda pair: pair[1].p)


def describe(pair: tuple[Comparison, TTest] | None) -> str:
    if pair is None:
        return "-"
    comparison, test = pair
    t = "t undefined (no spread)" if math.isnan(test.statistic) else f"t = {test.statistic:.2f}"
    return f"{comparison.a.label} vs {comparison.b.label}: {test.difference:+.2f} ({test.test}, {t}, p = {test.p:.3g})"


def p_pair(p: float | None, p_holm: float | None) -> str:
    return "-" if p is None else f"{p:.3g} / {p_holm:.3g}"


def only_earlier(judged: Judged, table: str) -> bool:
    """Whether the table's summary holds runs, none of them in the current setting."""
    return judged.miniature.summaries[table] is None and bool(judged.miniature.earlier.get(table))


def reason(judged: Judged, table: str, verdict: Verdict) -> str:
    """The verdict's reason, said plainly where the only runs are an earlier setting's."""
    if verdict.outcome == NOT_MEASURED and only_earlier(judged, table):
        return "not measured under the new settings (the summary holds only an earlier setting's runs)"
    return verdict.reason


def claims_table(judged: Judged, table: str) -> list[str]:
    rows = []
    for e in (e for e in judged.claims if e.claim.table == table):
        claim, verdict = e.claim, judged.claim_verdicts[e.claim.id]
        kind = claim.kind if claim.kind == "superiority" else f"non-inferiority (margin {claim.margin:g})"
        tested = sum(t is not None for t in verdict.tests)
        scope = f"{tested} of {len(e.question.comparisons)}" + (f"; outside: {', '.join(e.outside)}" if e.outside else "")
        outcome = f"**{verdict.outcome}**" + ("" if verdict.outcome in (HOLDS, CONTRADICTED, NOT_RESOLVED)
                                              else f": {reason(judged, table, verdict)}")
        words = (f"{claim.section}: \"{claim.quote}\" ({', '.join(claim.better)} vs {', '.join(claim.worse)}; "
                 f"{METRICS[claim.metric].name}). {claim.note}").replace("|", "\\|")  # a pipe would end the cell
        rows.append([claim.id, words, kind, scope,
                     describe(deciding(verdict, e.question)), p_pair(verdict.p, verdict.p_holm),
                     p_pair(verdict.p_opposite, verdict.p_opposite_holm), outcome])
    header_ = ["claim", "the paper's words (layers; metric) and reading", "kind", "comparisons tested",
               "deciding comparison: mean difference", "p / Holm", "opposite p / Holm", "verdict"]
    return [markdown_table(header_, rows), ""]


def gates_table(judged: Judged, table: str) -> list[str]:
    rows = []
    for gid, gate in judged.gates.items():
        if gate.table != table:
            continue
        verdict = judged.gate_verdicts[gid]
        differences = ", ".join(f"{t.difference:+.2f}" for t in verdict.tests if t is not None) or "-"
        rows.append([gid, differences, p_pair(verdict.p, verdict.p_holm),
                     f"**{verdict.outcome}**: {reason(judged, table, verdict)}"])
    if not rows:
        return []
    return [markdown_table(["gate (reference over the no-normalization control, metric)", "mean difference",
                            "p / Holm", "outcome"], rows), ""]


def provenance(entry: dict | None, summary_path: Path, fallback: str) -> list[str]:
    """The commands of a step's log entry (``fallback`` without one), its CPU time and its numbers' file."""
    commands = entry["commands"] if entry else [fallback]
    if entry is None:
        cpu = "not recorded"
    elif entry.get("cpu_measured"):
        cpu = (f"{format_duration(entry['cpu_seconds'])} (measured: user + system time of its processes over the "
               f"invocations of this tool that ran it, {format_duration(entry['wall_seconds'])} wall; an invocation "
               "killed outright, or ended with its machine, is not counted, so a step resumed after one cost more)")
    else:
        cpu = (f"about {format_duration(entry['cpu_seconds'])} ({format_duration(entry['wall_seconds'])} wall x "
               f"{os.cpu_count()} cores, recorded before CPU time was measured)")
    return ["Command: " + "; ".join(f"`{c}`" for c in commands) + f". CPU time: {cpu}.",
            f"Numbers: [{summary_path}]({Path('results') / summary_path.relative_to(RESULTS)}).", ""]


def current_entry(steps_log: dict, step: Step) -> dict | None:
    """The step's log entry if it was run with the step's settings now."""
    entry = steps_log.get(step.name)
    return entry if entry is not None and entry.get("setting") == step.setting else None


def earlier_entries(steps_log: dict, step: Step) -> list[dict]:
    """The step's log entries of runs with other settings than now, oldest first."""
    entry = steps_log.get(step.name)
    later = [entry] if entry is not None and entry.get("setting") != step.setting else []
    return [*steps_log.get(EARLIER, {}).get(step.name, []), *later]


def not_measured(title: str, command: str) -> list[str]:
    return [f"## {title}", "", f"**Not measured yet**: run `{command}` (then `python tools/reproduce.py --report-only`).",
            ""]


def verdict_lines(judged: Judged, table: str) -> list[str]:
    return gates_table(judged, table) + claims_table(judged, table)


def control_line(table: str, measured: bool, where: str) -> list[str]:
    """Whether the table's no-normalization control row was measured (``where``: in what)."""
    control = CONTROLS[table]
    if measured:
        return [f"No-normalization control (`{control}`): the row marked (control) above.", ""]
    return [f"No-normalization control (`{control}`): **not measured** {where}, so every gate of this table, and "
            "each claim that needs one, reads \"not measured\".", ""]


def classification_rows(summary: dict, batches: list[int | None]) -> list[list[str]]:
    """One row per (model, layer) of the summary, one column per images per worker (paper / miniature)."""
    cells = {(c["model"], c["layer"], c["batch"]): c for c in summary["cells"]}
    models, layers = list(CLASSIFICATION_MODELS), list(CLASSIFICATION_LAYERS.values())  # the paper's order

    def order(key: tuple[str, str]) -> tuple[int, int]:
        model, layer = key
        return (models.index(model) if model in models else len(models),
                layers.index(layer) if layer in layers else len(layers))

    rows = []
    for model, layer in sorted(dict.fromkeys((c["model"], c["layer"]) for c in summary["cells"]), key=order):
        found = [cells.get((model, layer, b)) for b in batches]
        label = next(c["label"] + (" (control)" if c.get("control") else "") for c in found if c)
        rows.append([model, label, *(
            f"{'-' if c['paper'] is None else format(c['paper'], 'g')} / {format_mean_std(finals(c))}" if c else "-"
            for c in found)])
    return rows


def finals(cell: dict) -> list[float]:
    """A summary cell's final top-1 per seed, a diverged run (None) scored :data:`DIVERGED_TOP1`."""
    return [DIVERGED_TOP1 if v is None else v for v in cell["final_top1"]]


def classification_table(summary: dict) -> list[str]:
    """The summary's cells, one column per images per worker (one column for Table 2), and what trained them."""
    batches = sorted({c["batch"] for c in summary["cells"] if c["batch"]}, reverse=True) or [None]
    columns = [f"{b}: paper / miniature" if b else "paper / miniature" for b in batches]
    return [markdown_table(["model", "layer", *columns], classification_rows(summary, batches)), "",
            trained_on(summary), ""]


def trained_on(summary: dict) -> str:
    """How many of the summary's runs trained on each device (cells summarized before the device was
    recorded count as "not recorded")."""
    counts = Counter()
    for cell in summary["cells"]:
        counts.update(cell.get("devices") or {"not recorded": len(cell["final_top1"])})
    return f"Trained on: {format_devices(counts)}."


def setting_words(table: str) -> str:
    """The current miniature's settings in words (MiniScale)."""
    scale = MINI_SCALE
    workers = (f"{scale.workers} simulated workers of {' / '.join(map(str, scale.batches))} images each (ghost "
               f"batches)" if PAPER_TABLES[table].is_batch_sweep else table2_step_words())
    return (f"the CIFAR anchors at depth {scale.anchor_depth:g} on the embedded MNIST digits ({scale.crop_size} px "
            f"random crops of the {scale.image_size} px images, validated on the {scale.validation} "
            f"{scale.crop_size} px), {workers}, {scale.epochs:g} epochs ({scale.warmup_epochs:g} of linear warmup, then "
            f"cosine) at {lr_words(table)} per 256 images "
            f"scaled with the total batch, {len(scale.seeds)} seeds")


def table2_step_words() -> str:
    """Table 2's workers and images per worker in words, per anchor where they differ (MiniScale.step_of)."""
    words = []
    models = table_models("table2")
    for model in models:
        workers, images = MINI_SCALE.step_of(PAPER_TABLES["table2"], model, None)
        words.append(f"{workers} simulated workers of {images} images, ghost batches, as Table 3's column of the "
                     f"most images per worker" if workers > 1 else f"one worker of {images} images")
    if len(set(words)) == 1:
        return words[0]
    return f"per anchor ({'; '.join(f'{model}: {text}' for model, text in zip(models, words))})"


def lr_words(table: str) -> str:
    """The base LR of the table's miniature per model where they differ (Table 3's MobileNetV2: 0.03)."""
    rates = {model: MINI_SCALE.base_lr_of(PAPER_TABLES[table], model) for model in table_models(table)}
    if len(set(rates.values())) == 1:
        return f"{next(iter(rates.values())):g}"
    return " / ".join(f"{rate:g} ({model})" for model, rate in rates.items())


EARLIER_DIGITS = ("recorded without their settings, the digits grid of classification/tables.py before 2026-11-25: "
                  "scikit-learn's 8x8 digits upsampled to 16 px, anchors with one block per stage, 10 epochs, one "
                  "worker of 128 images (Table 3: 128 / 16 / 4 / 2), 3 seeds, LR 0.1 per 256 images for every model")


def earlier_lines(table: str, cells: list[dict], steps_log: dict) -> list[str]:
    """The cells of an earlier setting, labelled as such, with the commands that made them."""
    if not cells:
        return []
    settings = {json.dumps(c.get("setting"), sort_keys=True) for c in cells}
    described = [EARLIER_DIGITS if s == "null" else f"recorded as {s}" for s in sorted(settings)]
    step = STEPS[table]
    entries = earlier_entries(steps_log, step)
    return ["### Earlier setting (not used for any verdict)", "",
            f"These cells were trained with other settings than the grid trains now: {'; '.join(described)}. "
            "They are kept for the record only: no verdict above reads them.", "", *classification_table({"cells": cells}),
            *(line for entry in entries for line in provenance(entry, step.summary, "")[:1]), ""]


def classification_section(judged: Judged, steps_log: dict, table: str, title: str) -> list[str]:
    step, current = STEPS[table], judged.miniature.summaries[table]
    earlier = judged.miniature.earlier[table]
    lines = [f"## {title}", "", f"Paper: ImageNet top-1 (%). Miniature: {setting_words(table)}; final validation "
             "top-1 (%), mean ± std over seeds (a diverged run counts as 0).", ""]
    if current is None:
        status = "Not measured under the new settings" if earlier else "Not measured yet"
        lines += [f"**{status}**: run `python tools/reproduce.py --only {table}` (then `python tools/reproduce.py "
                  "--report-only`)." + (" The numbers below the verdicts are an earlier setting's." if earlier else ""),
                  ""]
    else:
        figure = "accuracy vs images per worker" if PAPER_TABLES[table].is_batch_sweep else "final top-1 per seed"
        lines += [f"![{figure}](results/classification/{table}.png)", "", *classification_table(current)]
    has_control = current is not None and any(c["layer"] == CONTROLS[table] for c in current["cells"])
    lines += control_line(table, has_control, "under the new settings") + verdict_lines(judged, table)
    if current is not None:
        lines += provenance(current_entry(steps_log, step), step.summary, shown(step.commands[0]))
        if not earlier:  # else earlier_lines lists the same entries' commands
            lines += earlier_invocations(steps_log, step)
    return lines + earlier_lines(table, earlier, steps_log)


def earlier_invocations(steps_log: dict, step: Step) -> list[str]:
    """The step's earlier entries that recorded a setting (this grid's, before one of its fields changed): cells
    they trained whose own settings did not change are still read, so their commands stay in the record."""
    entries = [e for e in earlier_entries(steps_log, step) if e.get("setting") is not None]
    if not entries:
        return []
    return ["Earlier invocations of this step, before a setting of its grid changed (their cells whose own settings "
            "did not change are read above, the others are not):",
            *(line for entry in entries for line in provenance(entry, step.summary, "")[:1]), ""]


def table2_section(judged: Judged, steps_log: dict) -> list[str]:
    return classification_section(judged, steps_log, "table2",
                                  "Table 2: layers with batch statistics (EvoNorm-B series vs BN-ReLU and friends)")


def table3_section(judged: Judged, steps_log: dict) -> list[str]:
    return classification_section(judged, steps_log, "table3",
                                  "Table 3: batch-independent layers as the images per worker shrink (EvoNorm-S "
                                  "series)")


def table4_table(summary: dict) -> str:
    """Per setting and layer of a detection summary: the paper's R-50-FPN box / mask AP and the miniature's."""
    # here, not at the top: the detection package imports detectron2 (3.5 s), which only this section needs
    from evonorm_suite.detection.paper import TABLE4

    labels = {"bn": "BN-ReLU", "gn": "GN-ReLU", "evonorm_b0": "EvoNorm-B0", "evonorm_s0": "EvoNorm-S0"}
    rows = []
    for cell in summary["cells"]:
        paper = TABLE4.row("R-50-FPN", labels[cell["layer"]]) if cell["layer"] in labels else None
        control = " (control)" if cell["layer"] == CONTROLS["table4"] else ""
        rows.append([cell["setting"], cell["label"] + control, f"{paper[0]:g} / {paper[3]:g}" if paper else "-",
                     format_mean_std([r["box_ap"] for r in cell["runs"]]),
                     format_mean_std([r["mask_ap"] for r in cell["runs"]])])
    return markdown_table(["setting", "layer", "paper box / mask AP", "box AP", "mask AP"], rows)


def earlier_detection_lines(current: Path) -> list[str]:
    """The summaries of detection grids of other lengths (``<images>_images/miniature.json`` beside the current
    one), shown for the record: no verdict reads them."""
    lines = []
    for path in sorted(p.relative_to(ROOT) for p in (ROOT / current.parent).glob("*_images/miniature.json")):
        summary = load(path)
        images = summary["cells"][0]["images_seen"]  # every cell sees the same images
        lines += [f"### Earlier setting: {summary['iterations']} steps of 8 images ({images} images per run), "
                  "not used for any verdict", "",
                  f"Trained for another length than the grid trains now (docs/detection.md says why it changed); "
                  f"command: `{summary['command']}`. Numbers: [{path}]({Path('results') / path.relative_to(RESULTS)}).", "",
                  table4_table(summary), ""]
    return lines


def table4_section(judged: Judged, steps_log: dict) -> list[str]:
    step, title = STEPS["table4"], "Table 4: Mask R-CNN (box and mask AP)"
    summary = load(step.summary)
    earlier = earlier_detection_lines(step.summary)
    if summary is None:
        return (not_measured(title, "python tools/reproduce.py --only table4")
                + control_line("table4", False, "(no results)") + verdict_lines(judged, "table4") + earlier)
    has_control = any(cell["layer"] == CONTROLS["table4"] for cell in summary["cells"])
    return [f"## {title}", "", "Paper: COCO val2017, R-50-FPN. Miniature: the generated shapes (128 px, 3 classes), "
            f"half-width ResNet-18-FPN trained from scratch for {summary['iterations']} steps of 8 images (or as many "
            "images at 2 per step), AP on the validation images, mean ± std over seeds. The claims are tested in the "
            f"setting {MINIATURE['table4']['R-50-FPN']!r} (the paper's 8 images per worker).",
            "", table4_table(summary),
            "", *control_line("table4", has_control, "in this miniature (it has no such backbone)"),
            *verdict_lines(judged, "table4"),
            *provenance(current_entry(steps_log, step), step.summary, shown(step.commands[0])), *earlier]


def peak_steps(result: dict) -> str:
    """Per seed: the step of the reported (best-FID) snapshot and of the last one, marked where they coincide and
    where the grid's schedule is not done with the run."""
    if "last_steps" not in result:
        return "not recorded"
    unfinished = set(result.get("unfinished", ()))
    marks = [(" (still improving)" if at_last else "") + (" (unfinished)" if seed in unfinished else "")
             for seed, at_last in zip(result["seeds"], result["best_at_last"])]
    return ", ".join(f"{best} / {last}{mark}" for best, last, mark in zip(result["steps"], result["last_steps"], marks))


def paired_differences(judged: Judged, table: str) -> list[str]:
    """Every comparison of the table's gates and claims that is paired by seed, once (either way round): its
    per-seed differences."""
    questions = [(gate.metric, judged.gate_questions[gid]) for gid, gate in judged.gates.items() if gate.table == table]
    questions += [(e.claim.metric, e.question) for e in judged.claims if e.claim.table == table]
    rows, seen = [], set()
    for metric, question in questions:
        for c in question.comparisons:
            key = (frozenset((c.a.label, c.b.label)), metric)
            if key in seen or not (c.measured and c.paired):
                continue
            seen.add(key)
            a, b = dict(zip(c.a.seeds, c.a.values)), dict(zip(c.b.seeds, c.b.values))
            differences = [(seed, a[seed] - b[seed]) for seed in sorted(a)]
            better = sum((d > 0) == c.higher_is_better for _, d in differences if d)
            rows.append([f"{c.a.label} - {c.b.label}", METRICS[metric].name + ("" if c.higher_is_better else
                                                                               " (lower is better)"),
                         ", ".join(f"seed {seed}: {d:+.2f}" for seed, d in differences),
                         f"{sum(d for _, d in differences) / len(differences):+.2f}", f"{better} of {len(differences)}"])
    if not rows:
        return []
    return ["Per-seed paired differences (the runs of every layer share their seeds; each comparison of the gates and "
            "claims below, once):", "",
            markdown_table(["comparison", "metric", "difference per seed", "mean", "seeds where the first is better"],
                           rows), ""]


def table5_section(judged: Judged, _: dict) -> list[str]:
    summary, title = load(STEPS["table5"].summary), "Table 5: BigGAN-deep generator layers (IS / FID)"
    if summary is None:
        return not_measured(title, "python tools/reproduce.py --only table5") + control_line("table5", False, "(no results)") + \
            verdict_lines(judged, "table5")
    rows = []
    for layer, result in summary["layers"].items():
        name = layer_name(layer)
        paper = TABLE5.rows.get((name,))
        accuracy = [100 * a for a in result.get("class_accuracy", []) if a is not None]
        control = " (control)" if name == CONTROLS["table5"] else ""
        rows.append([GAN_LABELS.get(name, name) + layer[len(name):] + control, len(result["seeds"]),
                     f"{result['is_median']:.2f} / {result['is_best']:.2f}",
                     f"{result['fid_median']:.2f} / {result['fid_best']:.2f}",
                     format_mean_std(accuracy) if accuracy else "-", peak_steps(result),
                     f"{paper[0]} / {paper[1] or '-'}" if paper else "-", f"{paper[2]} / {paper[3] or '-'}" if paper else "-"])
    samples = [f"![{GAN_LABELS.get(layer_name(layer), layer)} samples, seed 0, one row per class]"
               f"(results/gan/{Path(r['grid_png']).name})" for layer, r in summary["layers"].items() if r.get("grid_png")]
    cpu = format_duration(summary["cpu_seconds"]) if "cpu_seconds" in summary else "not recorded"
    return [f"## {title}", "", f"Miniature: {summary.get('description', 'class-conditional BigGAN-deep on the digits')}; "
            "digits-classifier IS/FID (not comparable with ImageNet Inception numbers), median and best over seeds "
            f"as the paper reports them. FID floor (held-out real digits) {summary['fid_floor']:.2f}, "
            f"noise {summary['fid_noise']:.2f}.", "",
            markdown_table(["layer", "seeds", "IS median / best", "FID median / best",
                            "samples of the requested class (%)", "best / last snapshot step per seed",
                            "paper IS", "paper FID"], rows), "",
            *control_line("table5", any(layer_name(layer) == CONTROLS["table5"] for layer in summary["layers"]),
                          "in this miniature (it has no such generator)"),
            *paired_differences(judged, "table5"), *verdict_lines(judged, "table5"), *samples, "",
            f"Command: `{summary.get('command', '?')}`. CPU time: {cpu}.",
            f"Numbers: [{STEPS['table5'].summary}](results/gan/table5.json).", ""]


def fig10_row(strategy: str, result: dict) -> list:
    """Top-10 mean, distinct layers accepted per seed and the best layer's accuracy (%)."""
    def percent(values: list) -> str:
        return format_mean_std([100 * v for v in values if v is not None])

    return [strategy, len(result["seeds"]), percent(result["top10_final"]),
            " / ".join(str(n) for n in result.get("distinct_accepted", [])) or "-", percent(result.get("best_final", []))]


def fig10_provenance(summary: dict) -> list[str]:
    """What the searches trained on, and whether the step's command made this result (its budget)."""
    proxies = summary.get("proxies")
    lines = [f"Proxy: {'; '.join(proxies)}." if proxies else
             "Proxy: not recorded in this JSON (written before search/compare.py recorded it; "
             "[search.md](search.md) says which proxy the committed comparison ran on)."]
    for key, name in (("bn_relu_reference", "BN-ReLU"), ("gn_relu_reference", "GN-ReLU")):
        if summary.get(key):
            lines.append(f"{name} on the same proxy: {format_mean_std([100 * v for v in summary[key]])}.")
    if summary.get("candidate_budget") != FIG10_CANDIDATES:
        lines.append(f"Not the result of this report's step: `python tools/reproduce.py --only fig10` runs "
                     f"{FIG10_CANDIDATES:,} candidates a search; this JSON holds {summary.get('candidate_budget')} "
                     "a search, from the command below.")
    return [" ".join(lines), ""]


def fig10_section(judged: Judged, _: dict) -> list[str]:
    summary, title = load(STEPS["fig10"].summary), "Fig. 10: evolution vs random search"
    if summary is None:
        return not_measured(title, "python tools/reproduce.py --only fig10")
    rows = [fig10_row(name, s) for name, s in summary["strategies"].items()]
    cpu = format_duration(summary["cpu_seconds"]) if "cpu_seconds" in summary else "not recorded"
    return [f"## {title}", "", f"Mean accuracy (%) of the top-10 distinct accepted layers after "
            f"{summary.get('candidate_budget', '?')} candidates, over seeds (the mean of all accepted "
            "layers where a seed found fewer than 10: read it beside the count).", "",
            *fig10_provenance(summary),
            "![evolution vs random search](results/search/fig10.png)", "",
            markdown_table(["strategy", "seeds", "top-10 mean accuracy", "distinct layers accepted (per seed)",
                            "best layer's accuracy"], rows), "",
            *verdict_lines(judged, "fig10"),
            f"Command: `{summary.get('command', '?')}`. CPU time: {cpu}.",
            f"Numbers: [{STEPS['fig10'].summary}](results/search/fig10.json).", ""]


FIELDS = [
    ["`rule`", "alpha, the correction, `hypotheses` (the size of Holm's family), the non-inferiority `margins` "
               "per metric, `chance_top1` and `diverged_top1` (the value a diverged classification run counts as)"],
    ["`summaries`", "per experiment: `path` of its summary JSON, `found`, and for the classification tables "
                    "`cells_read` (cells in the current setting, which the verdicts read; null otherwise) and "
                    "`cells_set_aside` (cells of an earlier setting, which no verdict reads)"],
    ["`gates[]`", "`id`, `table`, `cell`, `reference` and `control` (layer names), `metric`, `needed_by` (claim ids), "
                  "then the verdict fields"],
    ["`claims[]`", "the claim as in tools/paper_claims.json (`id`, `section`, `quote`, `table`, `metric`, `kind`, "
                   "`better`, `worse`, `cells`, `note`), its `margin`, `gates` (the reference layers) and `gate_ids`, "
                   "`outside_miniature`, then the verdict fields"],
    ["verdict fields", "`outcome`, `reason`; `p` (largest comparison p) and `p_opposite` (smallest opposite p times "
                       "the number of comparisons), `p_holm`, `p_opposite_holm` (null: not in the family, some "
                       "comparison has no data; gates have no opposite); `comparisons[]`"],
    ["`comparisons[]`", "`a`, `b`: `label`, `seeds` and `values` (or `constant`); `higher_is_better`, `margin`; with "
                        "data: `test` (paired t, Welch t, one-sample t), `paired_seeds`, `difference` (mean a - mean "
                        "b, positive when a is better), `statistic` (t at the margin; null when undefined), `df`, `p` "
                        "(H1: difference > -margin), `p_opposite` (H1: difference < -margin)"],
]


def fields_section() -> list[str]:
    return ["## verdicts.json", "", "Everything needed to recompute each verdict from the experiments' JSON: the "
            "family is every claim whose comparisons all have data (two hypotheses) and every gate with data (one).",
            "", markdown_table(["field", "what it holds"], FIELDS), ""]


SECTIONS = (table2_section, table3_section, table4_section, table5_section, fig10_section)


def render(judged: Judged, steps_log: dict) -> str:
    lines = header(judged)
    for section in SECTIONS:
        lines += section(judged, steps_log)
    return "\n".join(lines + fields_section())


def report(steps_log: dict) -> None:
    miniature = Miniature.from_summaries({table: load(path) for table, path in SUMMARIES.items()})
    judged = judge_claims(load_claims(), miniature)
    text = render(judged, steps_log)
    atomic_write_json(ROOT / VERDICTS, verdicts_document(judged))
    atomic_write_text(ROOT / REPORT, text + "\n")
    print(f"[reproduce] wrote {REPORT} and {VERDICTS}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/reproduce.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=list(STEPS), help="run only these experiments")
    parser.add_argument("--report-only", action="store_true", help="run nothing; re-render the report")
    parser.add_argument("--dry-run", action="store_true", help="print the commands without running them")
    parser.add_argument("--models", nargs="+", choices=CLASSIFICATION_MODELS, default=CLASSIFICATION_MODELS,
                        help="classification experiments: only these anchor models (default all three; Table 3 has no "
                             "EfficientNet column)")
    parser.add_argument("--layers", nargs="+", default=(),
                        help="classification experiments: only these rows' layers (default every row of the table)")
    parser.add_argument("--jobs", type=positive_int, default=2,
                        help="runs at once within an experiment, one thread each (default %(default)s, this machine's cores)")
    args = parser.parse_args(argv)
    rows = dict.fromkeys(CLASSIFICATION_LAYERS[label] for table in CLASSIFICATION_TABLES
                         for label in (*PAPER_TABLES[table].layers, *PAPER_TABLES[table].controls))
    unknown = [layer for layer in args.layers if layer not in rows]
    if unknown:
        parser.error(f"--layers {' '.join(unknown)}: not a row of Table 2 or 3; accepted: {', '.join(rows)}")
    steps = experiment_steps(args.models, args.layers, args.jobs)
    try:
        if not args.report_only:
            for name in args.only or list(STEPS):
                if args.dry_run:
                    print("\n".join(shown(c) for c in steps[name].commands))
                    continue
                run_step(steps[name])
        if not args.dry_run:
            report(read_steps_log())
    except CorruptFileError as error:
        raise SystemExit(f"error: {error}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
