"""Config keys the EvoNorm Mask R-CNN adds to detectron2's defaults."""
from __future__ import annotations

import os

import yaml
from detectron2.config import CfgNode as CN
from detectron2.config import get_cfg


def add_evonorm_config(cfg: CN) -> CN:
    """Add ``MODEL.NORM_ACT``, ``INPUT.LSJ`` and ``SOLVER.CHECKPOINTS_KEPT`` to ``cfg`` (in place) and return it.

    ``MODEL.NORM_ACT``: the normalization-activation layer of the whole model.
      ``NAME``: a name of ``evonorm_core.list_norm_acts()`` (``bn_relu``, ``gn_relu``,
      ``evonorm_b0``, ``evonorm_s0`` ...). ``SYNC``: batch statistics over all processes
      (SyncBN semantics; layers with batch statistics only). ``GROUPS``: groups of grouped
      layers, 0 = the layer's default (32, lowered until it divides). ``EPS``: 0 = the
      layer's default (1e-5). ``IMPL``: "" = the layer's default; EvoNorms accept "fused"
      (evonorm_core's hand-written kernels) or "reference" (composed PyTorch ops).
    ``INPUT.LSJ``: scale-jitter training resize (``ResizeScale`` then ``FixedSizeCrop``
      to a square ``IMAGE_SIZE``, padded), replacing ``ResizeShortestEdge`` when
      ``ENABLED``; scales relative to ``IMAGE_SIZE``.
    ``SOLVER.CHECKPOINTS_KEPT``: how many of the periodic checkpoints (every
      ``SOLVER.CHECKPOINT_PERIOD`` steps) stay on disk, the newest; 0 = all, detectron2's
      behaviour. ``model_final.pth`` is always kept.
    """
    cfg.MODEL.NORM_ACT = CN()
    cfg.MODEL.NORM_ACT.NAME = "evonorm_s0"
    cfg.MODEL.NORM_ACT.SYNC = False
    cfg.MODEL.NORM_ACT.GROUPS = 0
    cfg.MODEL.NORM_ACT.EPS = 0.0
    cfg.MODEL.NORM_ACT.IMPL = ""
    cfg.INPUT.LSJ = CN()
    cfg.INPUT.LSJ.ENABLED = False
    cfg.INPUT.LSJ.IMAGE_SIZE = 1024
    cfg.INPUT.LSJ.MIN_SCALE = 0.8
    cfg.INPUT.LSJ.MAX_SCALE = 1.25
    cfg.SOLVER.CHECKPOINTS_KEPT = 0
    return cfg


def load_config(config_file: str, opts: list[str] | None = None) -> CN:
    """detectron2's defaults + :func:`add_evonorm_config`, merged with a YAML file and ``KEY VALUE`` overrides.

    The YAML (and every ``_BASE_`` it names) is read with ``yaml.safe_load``: detectron2's
    ``merge_from_file`` allows Python-object tags by default, which would run code from a
    config file; here such a file is refused with a ``ValueError`` naming it.
    """
    cfg = add_evonorm_config(get_cfg())
    _check_base_chain(config_file)
    try:
        cfg.merge_from_file(config_file, allow_unsafe=False)
    except yaml.constructor.ConstructorError as error:
        raise ValueError(
            f"config {config_file!r} uses a YAML tag that builds Python objects ({error.problem}); "
            "config files may hold only plain values (numbers, strings, lists, mappings)"
        ) from None
    cfg.merge_from_list(list(opts or []))
    return cfg


def _check_base_chain(config_file: str) -> None:
    """Follow the ``_BASE_`` chain of ``config_file``: a file that includes itself (directly or
    through others) or names a missing base is a ``ValueError`` naming the files, instead of
    fvcore's unbounded recursion or a bare assertion."""
    seen: list[str] = []
    path = config_file
    while path:
        real = os.path.realpath(path)
        if real in seen:
            raise ValueError(f"config {config_file!r}: _BASE_ files form a cycle: {' -> '.join([*seen, real])}")
        seen.append(real)
        if not os.path.isfile(path):
            if len(seen) == 1:
                raise ValueError(f"config file {config_file!r} does not exist (see detection/configs/)")
            raise ValueError(f"config {seen[-2]!r} names _BASE_ {path!r}, which does not exist")
        try:
            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f)
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            if isinstance(error, yaml.constructor.ConstructorError):
                raise ValueError(f"config {path!r} uses a YAML tag that builds Python objects ({problem}); "
                                 "config files may hold only plain values (numbers, strings, lists, mappings)") from None
            raise ValueError(f"config {path!r} is not valid YAML ({problem})") from None
        if data is not None and not isinstance(data, dict):
            raise ValueError(f"config {path!r} must be a mapping of keys to values, got a {type(data).__name__}")
        base = (data or {}).get("_BASE_")
        if base is not None and not isinstance(base, str):
            raise ValueError(f"config {path!r}: _BASE_ must be a file name, got {base!r}")
        if base and not base.startswith("/") and "://" not in base:
            base = os.path.join(os.path.dirname(path), base)
        path = base
