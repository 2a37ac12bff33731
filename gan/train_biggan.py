"""Train BigGAN-deep with a chosen generator norm-act (paper Table 5).

    python gan/train_biggan.py                                # built-in CPU demo: the digits
    python gan/train_biggan.py --norm evonorm_s0
    python gan/train_biggan.py --norm evonorm_s0 --dataset imagenet --data-root /data/imagenet/train
    torchrun --nproc_per_node 8 gan/train_biggan.py --norm evonorm_b0 --dataset array --data-root I128.hdf5 --seeds 3

Without ``--dataset`` it trains a small class-conditional BigGAN-deep (the same model code)
on scikit-learn's digits on the CPU within minutes and says so; the progress line shows the
digits-classifier IS/FID as training goes. ``--dataset imagenet``/``array`` selects the
BigGAN-deep 128 preset of the paper, ``cifar10`` a 32x32 one; every other flag overrides the
preset. Each seed trains in ``RUN_DIR/seed<k>``, a folder it owns: ``run.json``, ``config.json``,
``checkpoints/last.pt``, ``samples/*.png``, ``curves.png``, ``tb/``. A folder that holds files
is refused unless ``--resume``, which continues the run's seeds (every ``seed<k>`` run in
RUN_DIR, or those ``--seed``/``--seeds`` name) from their checkpoints with the run's saved
settings (flags given with it may change only how long it trains and how it reports); a seed
of the job not started yet starts with the settings of its started seeds.
A non-finite loss stops the run with one line naming the step and what to try, recorded in
``seed<k>/diverged.json`` (exit status 3); SIGINT and SIGTERM stop it with one line (exit
status 130 or 143), and ``--resume`` continues from the last checkpoint.
Installed as the ``evonorm-gan`` command.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from evonorm_core.experiment.config import add_config_arguments, explicit_values, replace_config
from evonorm_core.experiment.distributed import DistributedContext, shutdown
from evonorm_core.experiment.rundir import RunDirError, check_run_folder, resumed_config
from evonorm_core.experiment.stopping import StopCleanly
from evonorm_suite.gan.checkpoint import RUN_KIND, seed_runs
from evonorm_suite.gan.config import PRESET_OF_DATASET, PRESETS, GanConfig, preset
from evonorm_suite.gan.data import build_dataset
from evonorm_suite.gan.trainer import Trainer

COMMAND = "python gan/train_biggan.py"
DIVERGENCE_ADVICE = ("lower learning rates (--g-lr, --d-lr), a larger --adam-eps or another --seed (a layer that "
                     "diverges at every setting is a result of its own)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python gan/train_biggan.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), help="base configuration (default: from --dataset)")
    parser.add_argument("--run-dir", help="output folder (default: runs/gan/<preset>_<norm>); seeds go to seed<k>/")
    parser.add_argument("--seeds", type=int, help="train this many seeds, --seed, --seed + 1, ... (Table 5: 3; "
                        "default: 1, with --resume: every seed<k> run in --run-dir unless --seed is given)")
    parser.add_argument("--resume", action="store_true", help="continue each seed's run in its folder with its own "
                        "settings (only flags that 'may change on --resume' may be given with it)")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's)")
    add_config_arguments(parser.add_argument_group("run settings (default: the preset's)"), GanConfig,
                         PRESETS["digits"])
    return parser


@dataclass(frozen=True)
class SeedRun:
    """One seed of the job: its folder, its configuration and whether it continues a run there."""

    run_dir: Path
    config: GanConfig
    resume: bool


def seed_runs_to_train(root: Path, seeds: list[int], base: GanConfig, given: dict, resume: bool) -> list[SeedRun]:
    """Every seed's run, all checked before the first one trains. Without ``resume`` each folder must be
    missing or empty, and a seed runs the preset + flags. With it a started seed continues its saved settings
    + the allowed flags, and a seed not started yet (the job was stopped before it) starts with the settings
    of the job's started seeds."""
    folders = {seed: root / f"seed{seed}" for seed in seeds}
    if not resume:
        for folder in folders.values():
            check_run_folder(folder)
        return [SeedRun(folders[seed], replace_config(base, {**given, "seed": seed}), False) for seed in seeds]
    started = {seed: resumed_config(folder, RUN_KIND, GanConfig, {**given, "seed": seed})
               for seed, folder in folders.items() if check_run_folder(folder, resume=True)}
    if not started:
        raise RunDirError(f"no run of {RUN_KIND.command} in {str(root)!r} to resume: none of "
                          f"{', '.join(folder.name for folder in folders.values())} has started (without --resume a "
                          "new run starts there)")
    first = next(iter(started.values()))
    return [SeedRun(folders[seed], started[seed], True) if seed in started
            else SeedRun(folders[seed], replace_config(first, {"seed": seed}), False) for seed in seeds]


def resume_command(root: Path, given: dict, count: int | None) -> str:
    """The command that continues this job, naming its seeds when the user named them (on resume
    without them only the started seeds would continue)."""
    seeds = (f" --seed {given['seed']}" if "seed" in given else "") + (f" --seeds {count}" if count else "")
    return f"{COMMAND} --resume --run-dir {root}{seeds}"


def seeds_to_train(root: Path, first: int, count: int | None, resume: bool, seed_given: bool) -> list[int]:
    """``first`` and the ``count - 1`` seeds after it; on resume without ``--seed``/``--seeds``, the
    seeds of every ``seed<k>`` run in ``root`` (the run's own seeds, whatever it was started with)."""
    if resume and not seed_given and count is None:
        found = list(seed_runs(root))
        if not found:
            raise RunDirError(f"no run of {RUN_KIND.command} in {str(root)!r} to resume: it holds no seed<k> run "
                              "folder (without --resume a new run starts there)")
        return found
    return list(range(first, first + (count or 1)))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for flag, value in (("--seeds", args.seeds), ("--threads", args.threads)):
        if value is not None and value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    if args.threads:
        torch.set_num_threads(args.threads)
    given = explicit_values(args, GanConfig)
    dataset = given.get("dataset", "digits")
    name = args.preset or PRESET_OF_DATASET[dataset]
    try:
        base = replace_config(preset(name), {"dataset": dataset, **given})
    except ValueError as error:
        parser.error(str(error))
    if "dataset" not in given and os.environ.get("RANK", "0") == "0":
        print("no --dataset given: training the built-in demo on scikit-learn's digits (real 8x8 digits at "
              f"{base.resolution}x{base.resolution}, greyscale) on the CPU; use --dataset imagenet --data-root PATH "
              "for the paper's setting", flush=True)
    root = Path(args.run_dir or Path("runs", "gan", f"{name}_{base.norm}"))
    with StopCleanly(COMMAND, DIVERGENCE_ADVICE, resume_command(root, given, args.seeds)) as stop:
        return train_seeds(args, given, base, root, stop)


def train_seeds(args: argparse.Namespace, given: dict, base: GanConfig, root: Path, stop: StopCleanly) -> int:
    """Train (or resume) each seed's run in ``root/seed<k>``; ``stop`` learns where each one is."""
    try:
        ctx = DistributedContext.from_env()
        seeds = seeds_to_train(root, given.get("seed", base.seed), args.seeds, args.resume, "seed" in given)
        for run in seed_runs_to_train(root, seeds, base, given, args.resume):
            run_dir = stop.run_dir = run.run_dir
            config = run.config
            trainer = Trainer(config, build_dataset(config.dataset, config.data_root, config.resolution), run_dir, ctx,
                              resume=run.resume)
            trainer.train()
            if ctx.is_main:
                print(f"{run_dir}: samples in {run_dir / 'samples'}, curves {run_dir / 'curves.png'}, TensorBoard "
                      f"{run_dir / 'tb'}; IS/FID at the peak: python gan/evaluate.py {run_dir} --all-snapshots",
                      flush=True)
    except (ValueError, RunDirError, FileNotFoundError) as error:  # ConfigError, CorruptFileError included
        raise SystemExit(f"error: {error}") from None
    finally:
        shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
