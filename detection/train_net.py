"""Train or evaluate Mask R-CNN with EvoNorm (or any registered norm-act layer) in detectron2.

Paper-scale (COCO 2017 under $DETECTRON2_DATASETS/coco, 8 GPUs):
    python tools/train_net.py --config detection/configs/mask_rcnn_R50_evonorm_b0.yaml --num-gpus 8
CPU demo on generated shapes (written to $DETECTRON2_DATASETS/evonorm_shapes on first use):
    python tools/train_net.py --config detection/configs/demo_shapes_evonorm_s0.yaml
Evaluate a checkpoint:
    python tools/train_net.py --config CFG --eval-only MODEL.WEIGHTS output/.../model_final.pth
Trailing ``KEY VALUE`` pairs override the config (e.g. ``SOLVER.MAX_ITER 100``).

``OUTPUT_DIR`` belongs to one run: a folder that already holds files is refused unless
``--resume`` is given, which needs a run of this command there (its ``run.json`` says so);
``--eval-only`` adds its results to the run in ``OUTPUT_DIR`` or starts a new folder. A second
process cannot write into it. The run's settings are detectron2's ``config.yaml`` there.
Installed as the ``evonorm-detect`` command; ``python tools/train_net.py`` runs the same.
"""
from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys

# First, so that its warning filter is in place before detectron2 is imported when this
# file is run as `python detection/<name>.py` (the package is then not imported first).
import evonorm_suite.detection  # noqa: F401

# isort: split

import torch
import yaml
from detectron2.engine import default_argument_parser, default_setup, launch
from detectron2.modeling import build_model
from detectron2.utils import comm

from evonorm_core.experiment.files import CorruptFileError, atomic_write_json
from evonorm_core.experiment.rundir import RunDirError, RunKind, holds_run, open_run
from evonorm_core.experiment.stopping import StopCleanly
from evonorm_suite.detection import load_config
from evonorm_suite.detection.checkpoint import LAST_CHECKPOINT, SafeCheckpointer, check_weights_file
from evonorm_suite.detection.data import DatasetNotFoundError, prepare_datasets
from evonorm_suite.detection.norm import norm_act_maker
from evonorm_suite.detection.report import RESULTS_FILE
from evonorm_suite.detection.trainer import NormActTrainer

logger = logging.getLogger("detection")
RUN_KIND = RunKind("tools/train_net.py")
COMMAND = "python tools/train_net.py"
DIVERGENCE_ADVICE = "a lower SOLVER.BASE_LR, a longer SOLVER.WARMUP_ITERS or another SEED"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    summary, _, details = __doc__.partition("\n\n")
    parser = default_argument_parser(details)  # detectron2's flags; the examples follow the options (its epilog)
    parser.prog, parser.description = "python tools/train_net.py", summary
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--config", dest="config_file", metavar="FILE", help="alias of --config-file")
    parser.add_argument(
        "--threads", type=int, default=0, help="CPU threads per process for torch (default %(default)s: torch's default)"
    )
    args = parser.parse_args(argv)
    if args.threads < 0:
        parser.error(f"--threads must be >= 0 (0: torch's default), got {args.threads}")
    if not args.config_file or not os.path.isfile(args.config_file):
        parser.error(f"--config FILE is required and must exist, got {args.config_file!r} (see detection/configs/)")
    return args


def setup(args: argparse.Namespace):
    """Config from file + overrides, on the CPU when there is no GPU; logging and output dir."""
    cfg = load_config(args.config_file, args.opts)
    cpu_fallback = cfg.MODEL.DEVICE.startswith("cuda") and not torch.cuda.is_available()
    if cpu_fallback:
        cfg.MODEL.DEVICE = "cpu"
    cfg.freeze()
    default_setup(cfg, args)
    if cpu_fallback:
        logger.warning("no CUDA GPU: running on the CPU (MODEL.DEVICE=cpu)")
    return cfg


def check_config_values(cfg, processes: int) -> None:
    """What the workers would find wrong only after starting, with a traceback, raised here as a ``ValueError``
    naming the key: the solver's length and batch, the LSJ crop size, and the model built once on the CPU (the
    norm-act's name and options against every layer's channels)."""
    for key, value in (("SOLVER.MAX_ITER", cfg.SOLVER.MAX_ITER), ("SOLVER.IMS_PER_BATCH", cfg.SOLVER.IMS_PER_BATCH),
                       ("INPUT.LSJ.IMAGE_SIZE", cfg.INPUT.LSJ.IMAGE_SIZE),
                       ("SOLVER.CHECKPOINT_PERIOD", cfg.SOLVER.CHECKPOINT_PERIOD)):
        if value < 1:
            raise ValueError(f"{key} must be >= 1, got {value}")
    if not cfg.SOLVER.BASE_LR > 0:
        raise ValueError(f"SOLVER.BASE_LR must be > 0, got {cfg.SOLVER.BASE_LR}")
    if not -1 <= cfg.SEED < 2**32:  # -1: a random seed (detectron2); numpy takes seeds below 2**32
        raise ValueError(f"SEED must be -1 (random) or in 0..{2**32 - 1}, got {cfg.SEED}")
    steps = list(cfg.SOLVER.STEPS)  # steps past SOLVER.MAX_ITER are ignored (detectron2 warns)
    if steps != sorted(set(steps)) or any(step < 1 for step in steps):
        raise ValueError(f"SOLVER.STEPS must be positive and increase strictly, got {tuple(steps)}")
    if cfg.SOLVER.IMS_PER_BATCH % processes:
        raise ValueError(f"SOLVER.IMS_PER_BATCH {cfg.SOLVER.IMS_PER_BATCH} must be a multiple of the {processes} "
                         "processes (--num-gpus x --num-machines)")
    norm_act_maker(cfg)  # a bad name or option: its error names MODEL.NORM_ACT
    on_cpu = cfg.clone()
    on_cpu.MODEL.DEVICE = "cpu"
    try:
        build_model(on_cpu)
    except ValueError as err:
        raise ValueError(f"MODEL.NORM_ACT {dict(cfg.MODEL.NORM_ACT)} does not fit the model's layers: {err}") from None


# what a --resume may change: how long the run goes, how often it saves and evaluates, where it runs and writes
RESUMABLE_KEYS = ("SOLVER.MAX_ITER", "SOLVER.CHECKPOINT_PERIOD", "SOLVER.CHECKPOINTS_KEPT", "TEST.EVAL_PERIOD",
                  "DATALOADER.NUM_WORKERS", "MODEL.DEVICE", "MODEL.WEIGHTS", "OUTPUT_DIR")


def flat_config(node, prefix: str = "") -> dict:
    """``{"SOLVER.MAX_ITER": 90000, ...}`` of a yacs config, tuples as lists (as its YAML dump reads back)."""
    def as_read_back(value):
        return [as_read_back(v) for v in value] if isinstance(value, (tuple, list)) else value

    items = {}
    for key, value in node.items():
        if isinstance(value, dict):
            items.update(flat_config(value, f"{prefix}{key}."))
        else:
            items[f"{prefix}{key}"] = as_read_back(value)
    return items


def check_resumed_config(cfg) -> None:
    """Raise ``ValueError`` naming every key whose value differs from the run's own ``OUTPUT_DIR/config.yaml``
    (what detectron2 saved at its start) outside :data:`RESUMABLE_KEYS`: a resumed run continues the run's
    experiment (another layer would load the checkpoint's matching weights and train on as if nothing changed)."""
    saved_file = os.path.join(cfg.OUTPUT_DIR, "config.yaml")
    if not os.path.isfile(saved_file):
        return  # stopped before detectron2 wrote it: nothing trained
    try:
        saved = flat_config(load_config(saved_file))
    except (AssertionError, KeyError, ValueError, yaml.YAMLError) as error:  # yacs: unknown keys, other types
        raise ValueError(f"--resume: the run's own config {saved_file} cannot be read by this version ({error}); "
                         "resume it with the version that started it, or start a new run in another "
                         "OUTPUT_DIR") from None
    changed = [f"{key}: the run has {saved.get(key)!r}, given {value!r}" for key, value in flat_config(cfg).items()
               if key not in RESUMABLE_KEYS and saved.get(key) != value]
    if changed:
        raise ValueError(f"--resume cannot change the run in {cfg.OUTPUT_DIR} ({'; '.join(changed)}); only "
                         f"{', '.join(RESUMABLE_KEYS)} may change: give the run's config, or another OUTPUT_DIR")


def save_results(cfg, results: dict) -> None:
    """Write COCOEvaluator's final results to ``OUTPUT_DIR/final_results.json`` (read by ``detection/report.py``)."""
    if comm.is_main_process() and results:
        atomic_write_json(os.path.join(cfg.OUTPUT_DIR, RESULTS_FILE), results)


def run(args: argparse.Namespace) -> dict:
    """One worker process: train (or evaluate) and save the final COCO results."""
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cfg = setup(args)
    prepare_datasets(cfg)  # registers the shapes demo in this (worker) process
    if args.eval_only:  # MODEL.WEIGHTS, else (main checked there is one) OUTPUT_DIR's last checkpoint
        model = NormActTrainer.build_model(cfg)
        SafeCheckpointer(model, save_dir=cfg.OUTPUT_DIR).resume_or_load(
            cfg.MODEL.WEIGHTS, resume=args.resume or not cfg.MODEL.WEIGHTS)
        results = NormActTrainer.test(cfg, model)
    else:
        trainer = NormActTrainer(cfg)
        trainer.resume_or_load(resume=args.resume)
        trainer.train()
        results = getattr(trainer, "_last_eval_results", {})  # set by DefaultTrainer's final evaluation
    save_results(cfg, results)
    return results


def resume_command(args: argparse.Namespace) -> str:
    """This command with ``--resume`` (the line a stopped run prints)."""
    processes = ["--num-gpus", str(args.num_gpus)] if args.num_gpus > 1 else []
    return shlex.join([*COMMAND.split(), "--config", args.config_file, *processes, "--resume", *args.opts])


def main(argv: list[str] | None = None) -> int:
    """The command line: check config, data and output folder, then train (or evaluate) in
    ``--num-gpus`` processes per machine with detectron2's ``launch``."""
    args = parse_args(argv)
    if args.num_gpus < 1 or args.num_machines < 1 or not 0 <= args.machine_rank < args.num_machines:
        sys.exit(f"error: --num-gpus and --num-machines must be >= 1 and --machine-rank in 0..num_machines-1, "
                 f"got {args.num_gpus}, {args.num_machines}, {args.machine_rank}")
    if args.num_gpus > max(torch.cuda.device_count(), 1):
        sys.exit(f"--num-gpus {args.num_gpus} but this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    try:  # fail before spawning workers: bad config keys or values (yacs asserts), missing data
        cfg = load_config(args.config_file, args.opts)
        check_config_values(cfg, args.num_gpus * args.num_machines)
        if cfg.MODEL.WEIGHTS:
            check_weights_file(cfg.MODEL.WEIGHTS)
        prepare_datasets(cfg)
    except (CorruptFileError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
    except (AssertionError, KeyError, ValueError) as err:
        sys.exit(f"error: config {args.config_file} with overrides {args.opts}: {err}")
    except DatasetNotFoundError as err:
        sys.exit(f"error: {err}")
    if args.eval_only and not cfg.MODEL.WEIGHTS and not os.path.isfile(os.path.join(cfg.OUTPUT_DIR, LAST_CHECKPOINT)):
        sys.exit(f"error: --eval-only needs weights: MODEL.WEIGHTS is not set and OUTPUT_DIR {cfg.OUTPUT_DIR} holds no "
                 f"checkpoint ({LAST_CHECKPOINT}); give MODEL.WEIGHTS path/to/model_final.pth or the OUTPUT_DIR of a "
                 "trained run (a model with random weights would be scored)")
    try:  # the launching process owns OUTPUT_DIR while the workers run
        resume = args.resume or (args.eval_only and holds_run(cfg.OUTPUT_DIR))
        output = open_run(cfg.OUTPUT_DIR, RUN_KIND, resume=resume) if args.machine_rank == 0 else None
    except RunDirError as err:
        sys.exit(f"error: OUTPUT_DIR: {err}")
    try:
        if args.resume and not args.eval_only:
            check_resumed_config(cfg)
    except ValueError as err:
        if output is not None:
            output.close()
        sys.exit(f"error: {err}")
    try:
        with StopCleanly(COMMAND, DIVERGENCE_ADVICE, resume_command(args)):
            launch(
                run,
                args.num_gpus,
                num_machines=args.num_machines,
                machine_rank=args.machine_rank,
                dist_url=args.dist_url,
                args=(args,),
            )
    except CorruptFileError as err:  # a damaged checkpoint in OUTPUT_DIR (one process: raised here)
        sys.exit(f"error: {err}")
    finally:
        if output is not None:
            output.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
