"""Datasets and the training data pipeline of the EvoNorm Mask R-CNN configs."""
from __future__ import annotations

import copy
import os
from pathlib import Path

import detectron2.data.transforms as T
import pycocotools.mask as mask_util
from detectron2.data import (
    DatasetCatalog,
    DatasetMapper,
    MetadataCatalog,
    build_detection_train_loader,
    detection_utils,
)

from evonorm_suite.detection.shapes import DATASET_PREFIX, register_shapes_dataset

DEMO_COMMAND = "python tools/train_net.py --config detection/configs/demo_shapes_evonorm_s0.yaml"


class DatasetNotFoundError(FileNotFoundError):
    """A dataset of the config is not on disk; the message says where it must be."""


def missing_dataset_message(name: str, missing: str) -> str:
    root = os.environ.get("DETECTRON2_DATASETS")
    where = f"$DETECTRON2_DATASETS={root}" if root else "./datasets ($DETECTRON2_DATASETS is not set)"
    return (
        f"dataset {name!r} not found: {missing} does not exist.\n"
        f"COCO 2017 must be at $DETECTRON2_DATASETS/coco, i.e. under {where}:\n"
        "  coco/annotations/instances_{train,val}2017.json, coco/train2017/*.jpg, coco/val2017/*.jpg\n"
        "Set DETECTRON2_DATASETS to the folder that contains coco/, or run the CPU demo on generated data "
        f"instead:\n  {DEMO_COMMAND}"
    )


def prepare_datasets(cfg) -> None:
    """Register the generated shapes dataset if the config uses it, and check every dataset is on disk.

    Raises :class:`DatasetNotFoundError` naming the missing file and how to fix it.
    """
    names = [*cfg.DATASETS.TRAIN, *cfg.DATASETS.TEST]
    if any(name.startswith(DATASET_PREFIX) for name in names):
        register_shapes_dataset(size=cfg.INPUT.LSJ.IMAGE_SIZE if cfg.INPUT.LSJ.ENABLED else 128)
    for name in names:
        if name not in DatasetCatalog.list():
            raise ValueError(f"unknown dataset {name!r} in DATASETS; registered: {', '.join(DatasetCatalog.list())}")
        metadata = MetadataCatalog.get(name)
        for path in (metadata.get("json_file"), metadata.get("image_root")):
            if path and not Path(path).exists():
                raise DatasetNotFoundError(missing_dataset_message(name, path))


def train_augmentations(cfg) -> list[T.Augmentation]:
    """Scale jitter + fixed-size crop (``INPUT.LSJ``), or detectron2's default resize and flip."""
    if not cfg.INPUT.LSJ.ENABLED:
        return detection_utils.build_augmentation(cfg, is_train=True)
    lsj, size = cfg.INPUT.LSJ, cfg.INPUT.LSJ.IMAGE_SIZE
    return [
        T.RandomFlip(horizontal=True),
        T.ResizeScale(min_scale=lsj.MIN_SCALE, max_scale=lsj.MAX_SCALE, target_height=size, target_width=size),
        T.FixedSizeCrop(crop_size=(size, size)),
    ]


class BitmaskDatasetMapper(DatasetMapper):
    """``DatasetMapper`` that rasterizes polygon masks (to RLE) before augmenting.

    Cropping polygons needs the ``shapely`` package; a cropped bitmask is exact and needs
    nothing more. Used with ``INPUT.MASK_FORMAT: bitmask``.
    """

    def __call__(self, dataset_dict: dict) -> dict:
        dataset_dict = copy.deepcopy(dataset_dict)
        height, width = dataset_dict["height"], dataset_dict["width"]
        for annotation in dataset_dict.get("annotations", []):
            if isinstance(annotation.get("segmentation"), list):
                rles = mask_util.frPyObjects(annotation["segmentation"], height, width)
                annotation["segmentation"] = mask_util.merge(rles)
        return super().__call__(dataset_dict)


def build_train_loader(cfg):
    """detectron2's train loader with :func:`train_augmentations` (boxes recomputed from cropped masks)."""
    if cfg.INPUT.LSJ.ENABLED and cfg.MODEL.MASK_ON and cfg.INPUT.MASK_FORMAT != "bitmask":
        raise ValueError(f"INPUT.LSJ crops masks: set INPUT.MASK_FORMAT bitmask (got {cfg.INPUT.MASK_FORMAT!r})")
    mapper_class = BitmaskDatasetMapper if cfg.INPUT.MASK_FORMAT == "bitmask" else DatasetMapper
    mapper = mapper_class(cfg, is_train=True, augmentations=train_augmentations(cfg), recompute_boxes=cfg.MODEL.MASK_ON)
    return build_detection_train_loader(cfg, mapper=mapper)
