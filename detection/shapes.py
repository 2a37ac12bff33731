"""A synthetic instance-segmentation dataset in COCO json: shapes on textured backgrounds.

Each image holds 0-4 non-overlapping circles, squares and triangles (random size, colour
and rotation) on a background of smooth colour noise plus stripes, so a detector has to
learn shape, not colour. Masks are exact polygons. ``python detection/shapes.py --help``
writes the dataset; :func:`ensure_shapes_dataset` writes it once and reuses it.

A split's json is written last and atomically, so a json on disk means its images were
written; one that is damaged, of another image size or seed, or lists a missing image is
written again, under a lock that keeps concurrent runs from writing the same split.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
from pathlib import Path
from typing import Iterator

# First, so that its warning filter is in place before detectron2 is imported when this
# file is run as `python detection/<name>.py` (the package is then not imported first).
import evonorm_suite.detection  # noqa: F401

# isort: split

import numpy as np
from detectron2.data import DatasetCatalog
from detectron2.data.datasets import register_coco_instances
from PIL import Image, ImageDraw

from evonorm_core.experiment.arguments import output_folder
from evonorm_core.experiment.arguments import seed as seed_value
from evonorm_core.experiment.files import CorruptFileError, atomic_write_text, read_json
from evonorm_core.experiment.rundir import file_lock

CLASSES = ("circle", "square", "triangle")
SPLITS = {"train": 400, "val": 50}  # images per split
DATASET_PREFIX = "evonorm_shapes"


def default_root() -> Path:
    """``$DETECTRON2_DATASETS/evonorm_shapes`` (``./datasets/evonorm_shapes`` if unset)."""
    return Path(os.environ.get("DETECTRON2_DATASETS", "datasets")) / DATASET_PREFIX


def textured_background(rng: np.random.Generator, size: int) -> np.ndarray:
    """Smooth colour noise (bicubic-upsampled 6x6 grid), stripes and pixel noise, uint8 HxWx3."""
    coarse = rng.uniform(40, 215, size=(6, 6, 3)).astype(np.uint8)
    image = np.asarray(Image.fromarray(coarse).resize((size, size), Image.BICUBIC), dtype=np.float32)
    angle, period = rng.uniform(0, math.pi), rng.uniform(6, 20)
    yy, xx = np.mgrid[0:size, 0:size]
    stripes = np.sin((xx * math.cos(angle) + yy * math.sin(angle)) * 2 * math.pi / period)
    image += stripes[..., None] * rng.uniform(5, 25) + rng.normal(0, 6, size=image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def shape_polygon(rng: np.random.Generator, kind: str, cx: float, cy: float, radius: float) -> list[float]:
    """Vertices ``[x0, y0, x1, y1, ...]`` of a rotated ``kind`` centred at (cx, cy)."""
    vertices = {"circle": 32, "square": 4, "triangle": 3}[kind]
    start = rng.uniform(0, 2 * math.pi)
    angles = start + np.arange(vertices) * 2 * math.pi / vertices
    return [float(v) for a in angles for v in (cx + radius * math.cos(a), cy + radius * math.sin(a))]


def polygon_area(polygon: list[float]) -> float:
    x, y = np.asarray(polygon[0::2]), np.asarray(polygon[1::2])
    return float(abs(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1))) / 2)


def polygon_bbox(polygon: list[float]) -> list[float]:
    x, y = polygon[0::2], polygon[1::2]
    return [min(x), min(y), max(x) - min(x), max(y) - min(y)]


def place_shapes(rng: np.random.Generator, size: int, count: int) -> list[tuple[str, float, float, float]]:
    """Up to ``count`` (kind, cx, cy, radius) whose circumscribed circles do not overlap."""
    placed: list[tuple[str, float, float, float]] = []
    for _ in range(count * 20):
        if len(placed) == count:
            break
        radius = rng.uniform(0.08, 0.25) * size
        cx, cy = rng.uniform(radius, size - radius, size=2)
        if all(math.hypot(cx - x, cy - y) > radius + r + 2 for _, x, y, r in placed):
            placed.append((CLASSES[rng.integers(len(CLASSES))], cx, cy, radius))
    return placed


def make_image(rng: np.random.Generator, size: int) -> tuple[Image.Image, list[tuple[int, list[float]]]]:
    """One image and its instances as (category id, polygon)."""
    image = Image.fromarray(textured_background(rng, size))
    draw = ImageDraw.Draw(image)
    instances = []
    for kind, cx, cy, radius in place_shapes(rng, size, int(rng.integers(0, 5))):
        polygon = shape_polygon(rng, kind, cx, cy, radius)
        colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
        draw.polygon(polygon, fill=colour, outline=tuple(255 - c for c in colour))
        instances.append((CLASSES.index(kind) + 1, polygon))
    return image, instances


def write_split(root: Path, split: str, num_images: int, size: int, seed: int) -> Path:
    """Write ``root/split/*.png`` and ``root/split.json`` (COCO instances format); return the json path."""
    rng = np.random.default_rng([seed, len(split), num_images])
    (root / split).mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for image_id in range(1, num_images + 1):
        image, instances = make_image(rng, size)
        file_name = f"{image_id:06d}.png"
        image.save(root / split / file_name)
        images.append({"id": image_id, "file_name": file_name, "width": size, "height": size})
        for category_id, polygon in instances:
            annotations.append({
                "id": len(annotations) + 1,
                "image_id": image_id,
                "category_id": category_id,
                "segmentation": [polygon],
                "area": polygon_area(polygon),
                "bbox": polygon_bbox(polygon),
                "iscrowd": 0,
            })
    coco = {
        "info": {"description": f"EvoNorm suite synthetic shapes, {split}", "image_size": size, "seed": seed},
        "images": images,
        "annotations": annotations,
        "categories": [{"id": i + 1, "name": name, "supercategory": "shape"} for i, name in enumerate(CLASSES)],
    }
    json_path = root / f"{split}.json"
    atomic_write_text(json_path, json.dumps(coco))
    return json_path


def unusable_split(json_path: Path, size: int, seed: int) -> str | None:
    """Why the existing split at ``json_path`` cannot be reused for ``size`` px images of ``seed``; None if it can."""
    try:
        coco = read_json(json_path, what="shapes dataset file")
        written = coco["info"]["image_size"], coco["info"]["seed"]
        if written != (size, seed):
            return f"written for {written[0]} px images and seed {written[1]}, not {size} px and seed {seed}"
        images = [json_path.with_suffix("") / image["file_name"] for image in coco["images"]]
    except CorruptFileError:
        return "not valid JSON"
    except (KeyError, TypeError):
        return "not a shapes dataset file"
    missing = [path for path in images if not path.is_file()]
    return f"image {missing[0]} is missing" if missing else None


@contextlib.contextmanager
def dataset_lock(root: Path) -> Iterator[None]:
    """Hold ``root/.lock`` (creating ``root``): one writer at a time, and no check of a split while it is written."""
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / ".lock"):
        yield


def ensure_shapes_dataset(root: Path | None = None, size: int = 128, seed: int = 0) -> dict[str, Path]:
    """Write the train and val splits under ``root`` unless they exist; return split -> json path."""
    root = Path(root) if root else default_root()
    paths = {}
    with dataset_lock(root):
        for split, num_images in SPLITS.items():
            paths[split] = root / f"{split}.json"
            if paths[split].exists():
                if (reason := unusable_split(paths[split], size, seed)) is None:
                    continue
                print(f"{paths[split]}: {reason}; generating the {split} split again", flush=True)
            paths[split] = write_split(root, split, num_images, size, seed)
            print(f"generated the built-in shapes dataset's {split} split ({num_images} images, {size} px): "
                  f"{paths[split]}", flush=True)
    return paths


def register_shapes_dataset(root: Path | None = None, size: int = 128) -> list[str]:
    """Write (if needed) and register ``evonorm_shapes_{train,val}`` with ``register_coco_instances``."""
    names = []
    for split, json_path in ensure_shapes_dataset(root, size).items():
        name = f"{DATASET_PREFIX}_{split}"
        if name not in DatasetCatalog.list():
            register_coco_instances(name, {}, str(json_path), str(json_path.parent / split))
        names.append(name)
    return names


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python detection/shapes.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--root", type=output_folder, default=None, help="output folder (default: $DETECTRON2_DATASETS/evonorm_shapes)"
    )
    parser.add_argument("--size", type=int, default=128, help="image side in pixels, >= 32 (default: 128)")
    parser.add_argument("--seed", type=seed_value, default=0, help="random seed (default: 0)")
    args = parser.parse_args(argv)
    if args.size < 32:
        parser.error(f"--size must be >= 32, got {args.size}")
    root = args.root or default_root()
    with dataset_lock(root):
        for split, num_images in SPLITS.items():
            print(f"wrote {num_images} images: {write_split(root, split, num_images, args.size, args.seed)}")


if __name__ == "__main__":
    main()
