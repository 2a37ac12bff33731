"""Run folders, model construction from a configuration, and reading checkpoints back.

A run folder (:data:`RUN_KIND`) holds ``run.json`` and ``config.json`` (the resolved
:class:`~evonorm_suite.gan.config.GanConfig`),
``checkpoints/last.pt`` (everything needed to resume; plain data, read with
``weights_only=True``), snapshots named by step (``checkpoints/step_0005000.pt``),
``samples/*.png``, ``log.jsonl`` and ``curves.png``, ``tb/`` (TensorBoard) and, after
evaluation, ``metrics.json``.
"""
from __future__ import annotations

from pathlib import Path

from evonorm_core.experiment.config import config_from_dict
from evonorm_core.experiment.files import CorruptFileError, load_checkpoint, require_keys
from evonorm_core.experiment.rundir import RunKind, holds_run
from evonorm_suite.gan.biggan_deep import Discriminator, Generator, GeneratorSpec
from evonorm_suite.gan.config import GanConfig

LAST = "last.pt"
RUN_KIND = RunKind("gan/train_biggan.py")


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def seed_runs(root: str | Path) -> dict[int, Path]:
    """The ``seed<k>`` run folders in a ``--run-dir`` of gan/train_biggan.py, by ``k``."""
    folders = (p for p in Path(root).glob("seed*") if p.name[4:].isdigit() and holds_run(p))
    return dict(sorted((int(p.name[4:]), p) for p in folders))


def build_generator(config: GanConfig, num_classes: int) -> Generator:
    spec = GeneratorSpec(
        resolution=config.resolution,
        channels=config.channels,
        num_classes=num_classes,
        dim_z=config.dim_z,
        shared_dim=config.shared_dim,
        depth=config.depth,
        attention=tuple(config.attention),
        image_channels=config.image_channels,
    )
    return Generator(spec, config.norm, **config.norm_options)


def build_discriminator(config: GanConfig, num_classes: int) -> Discriminator:
    return Discriminator(config.resolution, config.channels, num_classes, config.depth, tuple(config.attention),
                         config.image_channels)


def resume_point(run_dir: str | Path) -> Path | None:
    """The checkpoint a resumed run continues from: ``last.pt``, else (deleted because it was damaged) the
    newest kept snapshot ``step_N.pt``; None if the run has neither."""
    folder = checkpoint_dir(run_dir)
    if (folder / LAST).is_file():
        return folder / LAST
    snapshots = [p for p in folder.glob("step_*.pt") if p.stem[5:].isdigit() and p.is_file()]
    return max(snapshots, key=lambda p: int(p.stem[5:]), default=None)


def resolve_checkpoint(run_dir: str | Path, checkpoint: str | Path | None = None) -> Path:
    """``checkpoint`` if given, else the run's ``last.pt``; ``FileNotFoundError`` naming what is missing,
    ``ValueError`` for a checkpoint of another folder (its numbers would be filed under this run)."""
    path = Path(checkpoint) if checkpoint else checkpoint_dir(run_dir) / LAST
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {str(path)!r} (train first, or pass an existing checkpoint)")
    if path.resolve().parent != checkpoint_dir(run_dir).resolve():
        raise ValueError(f"checkpoint {str(path)!r} is not one of {str(checkpoint_dir(run_dir))!r}: its numbers would "
                         f"be recorded as this run's; evaluate it with the run folder it belongs to")
    return path


def load_ema_generator(run_dir: str | Path, checkpoint: str | Path | None = None) -> tuple[Generator, GanConfig, dict]:
    """The EMA generator of a run (eval mode), its configuration and the checkpoint's metadata."""
    path = resolve_checkpoint(run_dir, checkpoint)
    state = load_checkpoint(path, what="GAN checkpoint")
    require_keys(state, ("config", "num_classes", "step", "G_ema"), path, what="GAN checkpoint")
    config = config_from_dict(GanConfig, state["config"], source=str(path))
    generator = build_generator(config, state["num_classes"])
    try:
        generator.load_state_dict(state["G_ema"])
    except (RuntimeError, TypeError) as error:
        raise CorruptFileError(
            f"GAN checkpoint {str(path)!r} does not fit its own configuration ({str(error).splitlines()[0].strip()}): "
            "its G_ema weights were written for another generator; it is damaged or was edited"
        ) from None
    meta = {"step": state["step"], "num_classes": state["num_classes"]}
    return generator.eval(), config, meta
