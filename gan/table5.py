"""Table 5 in miniature: the paper's six generator layers and a no-normalization control x three seeds on the
digits, digits-classifier IS/FID, each run trained to a peak.

    python gan/table5.py                        # the whole grid, resumable (CPU cost: docs/gan.md)
    python gan/table5.py --report-only          # re-aggregate finished runs

Every (layer, seed) trains the digits preset of ``gan/train_biggan.py`` (G's layers 64 and 16 channels wide,
grouped layers with 8 groups: 2 or more channels per group) in its own process (one thread, ``--jobs`` at once),
keeping a snapshot every ``--snapshot-every`` steps, and is then evaluated by ``gan/evaluate.py --all-snapshots``
(standing statistics, digits-classifier IS/FID against the training digits with as many samples as there are
held-out digits). The paper reports each run at its peak, so each run's result is its best-FID snapshot, and a
run is trained until that snapshot is behind it: every run trains ``--steps`` first, the same length for all (a
run's best FID depends on how long it trained: docs/gan.md); while fewer than ``--patience``
of its evaluated snapshots come after its best one, it is resumed for ``--extend-by`` more steps and evaluated
again (kept snapshots evaluated before are read back), up to ``--max-steps``. The grid works on ``--jobs`` runs
at a time, each until it is past its peak or at the cap, then takes the next, so finished runs accumulate in
grid order. A run still best at its last snapshot (at the cap) was still improving when it stopped; the summary
records, per run,
the step of the best snapshot, the last one and every evaluated snapshot's FID and IS, and the report
(tools/reproduce.py) reads such runs as "cannot resolve".

Digits-classifier FIDs are comparable only when measured by the same classifier, and the classifier trained on
first use differs between CPUs and thread counts. So the grid pins one: ``RUNS_DIR/digits_classifier_16px.pt``
(copied from the cache when the folder has none; keep it with the runs). Every run is evaluated with it, the
summary's FID floor and noise ceiling are measured with it, and runs whose numbers carry another classifier's
SHA-256 are refused by name.

Each run's output goes to ``RUNS_DIR/<layer>/seed<k>.log``. Finished runs are not rerun, started ones resume
(with ``--groups`` for grouped layers, so that a run started with other groups is refused, not mixed in); a run
that fails is named at the end (no summary is written then) and the others go on. The per-layer median and best
over seeds, the FID floor (held-out real digits) and ceiling (noise), the command and the CPU time (the sum of
the runs' ``cost.json``: each grid's wall-clock and CPU seconds on the run, recorded in its folder as the run
finishes or is stopped, so the cost of a grid spread over machines and sessions adds up) go to
``--out/table5.json``; the markdown table to ``--out/table5.md``; each layer's seed-0 sample grid at its reported
(best) step to ``--out/<layer>.png`` (kept where this machine has no samples of that run: they are not committed).
Installed as ``evonorm-gan-table5``.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from evonorm_core.experiment.arguments import DistinctValues, output_folder
from evonorm_core.experiment.arguments import seed as seed_value
from evonorm_core.experiment.config import command_line
from evonorm_core.experiment.files import (
    CorruptFileError,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    read_json_object,
)
from evonorm_core.experiment.grid import Cell, run_grid
from evonorm_core.experiment.rundir import RunDirError, holds_run
from evonorm_core.registry import options_of
from evonorm_suite.gan import digits_classifier
from evonorm_suite.gan.checkpoint import LAST, checkpoint_dir
from evonorm_suite.gan.config import PRESETS
from evonorm_suite.gan.metrics import digits_calibration
from evonorm_suite.gan.reference_statistics import weights_digest
from evonorm_suite.gan.report import LABELS, aggregate, find_metrics, layer_name, markdown, read_run_metrics

PRESET = PRESETS["digits"]
COST_FILE = "cost.json"
# Every run trains this long first, the same for all: under a 2000-step start a run's best FID tracked how long the
# stopping rule let it train more than its layer (docs/gan.md, "Equal lengths").
DEFAULT_STEPS = 10000


@dataclass(frozen=True)
class Schedule:
    """How long each run trains: ``steps`` first, then ``extend_by`` more while fewer than ``patience`` evaluated
    snapshots follow its best-FID one, up to ``max_steps``; a snapshot every ``snapshot_every`` steps."""

    steps: int = DEFAULT_STEPS
    extend_by: int = 1000
    max_steps: int = 16000
    snapshot_every: int = 500
    patience: int = 2

    def check(self) -> str | None:
        """What is wrong with the schedule, or None."""
        if self.snapshot_every < 1 or self.steps < self.snapshot_every:
            return f"--snapshot-every must be >= 1 and <= --steps, got {self.snapshot_every} and {self.steps}"
        if self.extend_by < self.snapshot_every or self.max_steps < self.steps:
            return (f"--extend-by must be >= --snapshot-every and --max-steps >= --steps, got {self.extend_by}, "
                    f"{self.snapshot_every}, {self.max_steps} and {self.steps}")
        if self.patience < 1:
            return f"--patience must be >= 1, got {self.patience}"
        return None


@dataclass(frozen=True)
class RunState:
    """Where one run stands: the steps it is set to train (``config.json``; None: not started) and its evaluated
    snapshots (``metrics/*.json``, one per step, in step order)."""

    target: int | None
    snapshots: tuple[dict, ...]

    @classmethod
    def read(cls, run_dir: Path) -> RunState:
        config = run_dir / "config.json"
        target = None
        if config.is_file():
            target = read_json_object(config, what="run configuration", keys=("total_steps",))["total_steps"]
        by_step: dict[int, dict] = {}
        for path in sorted((run_dir / "metrics").glob("*.json")):
            record = read_run_metrics(path, what="snapshot metrics")
            by_step.setdefault(record["step"], record)  # last.pt repeats the step of the last kept snapshot
        return cls(target, tuple(by_step[step] for step in sorted(by_step)))

    @property
    def last_step(self) -> int | None:
        """The step of the last evaluated snapshot."""
        return self.snapshots[-1]["step"] if self.snapshots else None

    @property
    def peak(self) -> dict | None:
        """The evaluated snapshot with the lowest FID (the earliest of equals), as gan/evaluate.py picks it."""
        return min(self.snapshots, key=lambda record: record["fid"]) if self.snapshots else None

    @property
    def after_peak(self) -> int:
        """How many evaluated snapshots come after the best one."""
        if not self.snapshots:
            return 0
        peak_step = self.peak["step"]
        return sum(record["step"] > peak_step for record in self.snapshots)

    def next_target(self, schedule: Schedule) -> int | None:
        """The steps the run must train to next (then be evaluated), or None when it is done: evaluated at its
        target and either ``patience`` snapshots past its peak or at ``max_steps``."""
        if self.target is None:
            return schedule.steps
        if self.target < schedule.steps:  # started by a shorter grid: the schedule's first length first
            return schedule.steps
        if self.last_step != self.target:  # not trained to its target yet, or not evaluated there
            return self.target
        if self.after_peak >= schedule.patience or self.target >= schedule.max_steps:
            return None
        return min(schedule.max_steps, self.target + schedule.extend_by)


def run_dir_of(runs_dir: Path, layer: str, seed: int) -> Path:
    return runs_dir / layer / f"seed{seed}"


def run_name(run_dir: Path) -> str:
    """``layer/seed<k>``: the run's cell id in the grid."""
    return f"{run_dir.parent.name}/{run_dir.name}"


def pinned_classifier(runs_dir: Path) -> Path:
    """The grid's digits classifier, ``RUNS_DIR/digits_classifier_<R>px.pt``: checked if there, else copied from
    the cache (trained there on first use)."""
    path = runs_dir / f"digits_classifier_{PRESET.resolution}px.pt"
    if not path.exists():
        runs_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, digits_classifier.weights_file(PRESET.resolution).read_bytes())
        print(f"Table 5 miniature: pinned the digits classifier {path} (SHA-256 {weights_digest(str(path))[:12]}); "
              "keep it with the runs", flush=True)
    return digits_classifier.checked_weights_file(path, PRESET.resolution)


def measured_by_another_classifier(metrics_paths: list[Path], digest: str) -> list[str]:
    """The runs (``layer/seed<k>``) with a snapshot not measured by the classifier whose SHA-256 is ``digest``."""
    runs = []
    for path in metrics_paths:
        state = RunState.read(path.parent)
        if any(record.get("feature_extractor_sha256") != digest for record in state.snapshots):
            runs.append(run_name(path.parent))
    return runs


@dataclass
class TrainToPeak:
    """The stages of one (layer, seed) run in the grid (:class:`Cell` ``stages``): train it to its next target
    (resuming a started run), then evaluate every snapshot with the grid's ``classifier``, until the schedule is
    done with it."""

    layer: str
    seed: int
    runs_dir: Path
    schedule: Schedule
    classifier: Path
    planned: int | None = None  # the target of the last stage

    @property
    def run_dir(self) -> Path:
        return run_dir_of(self.runs_dir, self.layer, self.seed)

    def __call__(self) -> tuple[tuple[str, ...], ...]:
        state = RunState.read(self.run_dir)
        target = state.next_target(self.schedule)
        if target is not None and target == self.planned:
            raise RuntimeError(f"{run_name(self.run_dir)} did not reach step {target} or has no evaluation there "
                               "after its commands succeeded")
        self.planned = target
        if target is None:
            return ()
        print(f"[table5] {run_name(self.run_dir)}: {stage_reason(state, target, self.run_dir)}", flush=True)
        return self.train_command(target), self.evaluate_command()

    def train_command(self, target: int) -> tuple[str, ...]:
        groups = ("--groups", str(PRESET.groups)) if PRESET.groups and "groups" in options_of(self.layer) else ()
        every = str(self.schedule.snapshot_every)
        return (sys.executable, "-m", "evonorm_suite.gan.train_biggan", "--norm", self.layer, "--seed", str(self.seed),
                "--run-dir", str(self.runs_dir / self.layer), "--total-steps", str(target), "--keep-every", every,
                "--save-every", every, "--eval-every", "0", "--threads", "1", *groups,
                *(["--resume"] if holds_run(self.run_dir) else []))

    def evaluate_command(self) -> tuple[str, ...]:
        return (sys.executable, "-m", "evonorm_suite.gan.evaluate", str(self.run_dir), "--all-snapshots",
                "--digits-classifier", str(self.classifier))


def stage_reason(state: RunState, target: int, run_dir: Path) -> str:
    """Why a run trains to ``target`` next, and from where, for the grid's progress lines."""
    if state.target is not None and not (checkpoint_dir(run_dir) / LAST).is_file():
        return f"training to step {target} from step 0 (no checkpoint of the run on this machine to resume from)"
    if state.last_step is not None and state.last_step == state.target and target > state.target:
        return (f"best FID {state.peak['fid']:.2f} at step {state.peak['step']} of {state.last_step}: training on "
                f"to step {target}")
    return f"training to step {target}"


def run_cell(layer: str, seed: int, runs_dir: Path, schedule: Schedule, classifier: Path) -> Cell:
    """The grid cell that trains one (layer, seed) run in stages until the schedule is done with it."""
    stages = TrainToPeak(layer, seed, runs_dir, schedule, classifier)
    return Cell(run_name(stages.run_dir), done=lambda: RunState.read(stages.run_dir).next_target(schedule) is None,
                stages=stages)


def add_cost(run_dir: Path, seconds: float, cpu_seconds: float) -> None:
    """Add one grid's wall-clock and CPU seconds on a run (its training and evaluations) to the run's ``cost.json``;
    a record of wall time only (written before CPU time was measured) stays one, not a CPU time of some cells."""
    cost = run_cost(run_dir) or {"seconds": 0.0, "cpu_seconds": 0.0, "cells": 0}
    updated = {"seconds": cost["seconds"] + seconds, "cells": cost["cells"] + 1}
    if "cpu_seconds" in cost:
        updated["cpu_seconds"] = cost["cpu_seconds"] + cpu_seconds
    atomic_write_json(run_dir / COST_FILE, updated)


def run_cost(run_dir: Path) -> dict | None:
    """The run's ``cost.json`` (its cells' seconds; ``cpu_seconds`` absent in records of wall time only), or None."""
    path = run_dir / COST_FILE
    return read_json_object(path, what="run cost", keys=("seconds", "cells")) if path.is_file() else None


def cost_summary(run_dirs: list[Path]) -> dict:
    """The grid's CPU seconds: its runs' CPU time where their records have it, else their wall time (one thread)."""
    costs = {run_name(run_dir): run_cost(run_dir) for run_dir in run_dirs}
    wall_only = [name for name, cost in costs.items() if cost is not None and "cpu_seconds" not in cost]
    missing = [name for name, cost in costs.items() if cost is None]
    return {
        "cpu_seconds": sum(cost.get("cpu_seconds", cost["seconds"]) for cost in costs.values() if cost is not None),
        "cpu_seconds_counts": "the user + system time of each run's processes (training and evaluation) as its "
                              "cost.json records it; wall time of one thread where the record has none: "
                              f"{', '.join(wall_only) or 'none'}; runs without a record: {', '.join(missing) or 'none'}",
    }


def train_to_peaks(layers: list[str], seeds: list[int], runs_dir: Path, schedule: Schedule, jobs: int,
                   classifier: Path) -> int:
    """Train every (layer, seed) run until the schedule is done with it (past its peak or at the cap), ``jobs``
    runs at a time, each slot on one run until it is done; the wall-clock and CPU seconds each run took in this
    grid go to its ``cost.json`` as it ends (finished, failed or stopped). Returns the exit status."""
    cells = [run_cell(layer, seed, runs_dir, schedule, classifier) for layer in layers for seed in seeds]
    done = sum(cell.finished() for cell in cells)
    print(f"Table 5 miniature on the built-in digits (scikit-learn's 8x8 digits at {PRESET.resolution}x"
          f"{PRESET.resolution}; the paper's ImageNet runs: python gan/train_biggan.py --dataset imagenet --data-root "
          f"PATH): {done} of {len(cells)} runs done; training the others into {runs_dir}", flush=True)

    def record_cost(cell_id: str, seconds: float, cpu_seconds: float) -> None:
        if (runs_dir / cell_id).is_dir():  # a run stopped before it started has none
            add_cost(runs_dir / cell_id, seconds, cpu_seconds)

    return run_grid(cells, runs_dir, jobs=jobs, name="table5", on_cell_end=record_cost).exit_status


def finished_runs(runs_dir: Path) -> list[Path]:
    """The ``metrics.json`` of every evaluated run under ``runs_dir``; exits with an error naming it where there is
    none."""
    try:
        return find_metrics([runs_dir])
    except FileNotFoundError:
        raise SystemExit(f"error: no evaluated run under {runs_dir} (no metrics.json): train the grid there first "
                         f"(python gan/table5.py --runs-dir {runs_dir}) or name the folder that holds one "
                         "(python tools/reproduce.py --only table5 keeps its grid in runs/reproduction/gan)") from None


def run_record(metrics_path: Path, schedule: Schedule) -> dict:
    """A run's ``metrics.json`` (its best-FID snapshot) with its last evaluated step, every evaluated snapshot and
    whether it is done under ``schedule`` (``finished``: trained and evaluated as far as the schedule asks)."""
    metrics = read_run_metrics(metrics_path)
    state = RunState.read(metrics_path.parent)
    if not state.snapshots:
        return metrics
    snapshots = [{"step": r["step"], "fid": r["fid"], "is": r["is_mean"]} for r in state.snapshots]
    return {**metrics, "last_step": state.last_step, "snapshots": snapshots,
            "finished": state.next_target(schedule) is None}


def reported_samples(runs_dir: Path, layer: str, result: dict) -> Path | None:
    """Seed 0's sample grid at its reported (best-FID) step, where this machine has it and the grid is done with
    the run (a run training again draws new samples over the reported ones)."""
    if 0 not in result["seeds"] or 0 in result.get("unfinished", ()):
        return None
    step = result["steps"][result["seeds"].index(0)]
    path = run_dir_of(runs_dir, layer, 0) / "samples" / f"step_{step:07d}.png"
    return path if path.is_file() else None


def still_improving(layers: dict[str, dict]) -> list[str]:
    """``layer/seed<k>`` of every run whose reported (best) snapshot is its last."""
    return [f"{key}/seed{seed}" for key, result in layers.items()
            for seed, at_last in zip(result["seeds"], result.get("best_at_last", [])) if at_last]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python gan/table5.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = Schedule()
    parser.add_argument("--layers", nargs="+", choices=sorted(LABELS), default=list(LABELS),
                        help="generator layers (default: the paper's six and no_norm_relu, the control)")
    parser.add_argument("--seeds", type=seed_value, nargs="+", action=DistinctValues, default=[0, 1, 2],
                        help="the seeds each layer trains with (default: 0 1 2; Table 5 has 3 a layer)")
    parser.add_argument("--steps", type=int, default=defaults.steps,
                        help="G steps every run trains first, >= 4 (default %(default)s)")
    parser.add_argument("--extend-by", type=int, default=defaults.extend_by,
                        help="G steps a run not yet past its peak trains further (default %(default)s)")
    parser.add_argument("--max-steps", type=int, default=defaults.max_steps,
                        help="no run trains beyond this (default %(default)s)")
    parser.add_argument("--snapshot-every", type=int, default=defaults.snapshot_every,
                        help="steps between kept, evaluated snapshots (default %(default)s)")
    parser.add_argument("--patience", type=int, default=defaults.patience,
                        help="evaluated snapshots after the best one that end a run (default %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one thread each (default %(default)s)")
    parser.add_argument("--runs-dir", type=output_folder, default=Path("runs/gan_table5"),
                        help="one folder per layer and seed (default %(default)s)")
    parser.add_argument("--out", type=output_folder, default=Path("docs/results/gan"),
                        help="where table5.json/.md and grids go (default %(default)s)")
    parser.add_argument("--report-only", action="store_true", help="only aggregate the finished runs")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    schedule = Schedule(args.steps, args.extend_by, args.max_steps, args.snapshot_every, args.patience)
    for flag, value, minimum in (("--steps", args.steps, 4), ("--jobs", args.jobs, 1)):
        if value < minimum:
            parser.error(f"{flag} must be >= {minimum}, got {value}")
    if problem := schedule.check():
        parser.error(problem)
    try:
        return train_and_report(args, schedule, argv)
    except CorruptFileError as error:  # a damaged classifier or run file: named, with what to do
        raise SystemExit(f"error: {error}") from None


def train_and_report(args: argparse.Namespace, schedule: Schedule, argv: list[str] | None) -> int:
    """Train the grid's runs to their peaks (unless ``--report-only``), then write and print the summary."""
    summary_path = args.out / "table5.json"
    if args.report_only:  # refused before a classifier is pinned into a folder with nothing to report
        metrics_paths = finished_runs(args.runs_dir)
    classifier = pinned_classifier(args.runs_dir)
    if not args.report_only:
        try:
            if status := train_to_peaks(args.layers, args.seeds, args.runs_dir, schedule, args.jobs, classifier):
                return status
        except RunDirError as error:  # another grid holds the folder
            raise SystemExit(f"error: {error}") from None
        metrics_paths = finished_runs(args.runs_dir)
    digest = weights_digest(str(classifier))
    if foreign := measured_by_another_classifier(metrics_paths, digest):
        raise SystemExit(f"error: {', '.join(foreign)} in {args.runs_dir} were evaluated with another digits "
                         f"classifier than the grid's {classifier}: their FIDs are on another scale. Evaluate them "
                         f"again with it (python gan/evaluate.py RUN --all-snapshots --reevaluate --digits-classifier "
                         f"{classifier}) or remove them to retrain")
    layers = aggregate([run_record(p, schedule) for p in metrics_paths])
    resolution = PRESET.resolution
    summary = {
        "experiment": "Table 5 miniature", "command": command_line("python gan/table5.py", argv),
        **cost_summary([p.parent for p in metrics_paths]), "steps": args.steps,
        "schedule": asdict(schedule),
        "feature_extractor": "digits-classifier", "feature_extractor_sha256": digest,
        "description": f"class-conditional BigGAN-deep (digits preset, {resolution}x{resolution} greyscale, "
                       f"{PRESET.groups} groups in grouped layers) on the embedded digits, each run {args.steps} "
                       f"steps, then {schedule.extend_by} more at a time until {schedule.patience} evaluated "
                       f"snapshots (every {schedule.snapshot_every} steps) follow its best-FID one, at most "
                       f"{schedule.max_steps}",
        **digits_calibration(resolution, weights=classifier), "layers": layers,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    for key, result in summary["layers"].items():
        grid_png = args.out / f"{layer_name(key)}.png"
        if samples := reported_samples(args.runs_dir, layer_name(key), result):
            atomic_write_bytes(grid_png, Path(samples).read_bytes())
        if grid_png.is_file():  # samples are not committed: a clone keeps the grid its seed-0 run drew
            result["grid_png"] = str(grid_png)
    atomic_write_json(summary_path, summary)
    table = markdown(layers)
    atomic_write_text(args.out / "table5.md", table + "\n")
    print(table)
    improving = still_improving(layers)
    print(f"Runs best at their last snapshot (still improving: claims that read them cannot be resolved): "
          f"{', '.join(improving) if improving else 'none'}")
    unfinished = [f"{key}/seed{seed}" for key, result in layers.items() for seed in result.get("unfinished", [])]
    print(f"Runs not yet trained as far as the schedule asks (not comparable yet; the same command without "
          f"--report-only trains them): {', '.join(unfinished) if unfinished else 'none'}")
    print(f"FID floor (held-out digits) {summary['fid_floor']:.2f}, noise {summary['fid_noise']:.2f}; "
          f"summary: {summary_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
