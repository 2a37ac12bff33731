"""Paper Table 4 (Mask R-CNN on COCO val2017), keyed by this project's config names.

Numbers are copied from Liu et al., "Evolving Normalization-Activation Layers", Table 4.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class Table4Row(NamedTuple):
    backbone: str
    layer: str
    box_ap: tuple[float, float, float]  # AP, AP50, AP75
    mask_ap: tuple[float, float, float]
    madds_b: float  # MAdds, billions
    params_m: float  # parameters, millions


TABLE4 = {
    "mask_rcnn_R50_bn": Table4Row("R-50-FPN", "BN-ReLU", (42.1, 62.9, 46.2), (37.8, 60.0, 40.6), 332.0, 46.37),
    "mask_rcnn_R50_evonorm_b0": Table4Row("R-50-FPN", "EvoNorm-B0", (44.0, 65.2, 48.1), (39.5, 62.7, 42.4), 332.3, 46.38),
    "mask_rcnn_R50_gn": Table4Row("R-50-FPN", "GN-ReLU", (42.7, 63.8, 46.6), (38.4, 61.2, 41.2), 332.3, 46.37),
    "mask_rcnn_R50_evonorm_s0": Table4Row("R-50-FPN", "EvoNorm-S0", (43.6, 64.9, 47.9), (39.4, 62.3, 42.7), 331.9, 46.38),
    "mask_rcnn_R101_bn": Table4Row("R-101-FPN", "BN-ReLU", (43.8, 64.2, 48.2), (39.2, 61.3, 42.5), 409.8, 65.36),
    "mask_rcnn_R101_evonorm_b0": Table4Row("R-101-FPN", "EvoNorm-B0", (45.1, 66.2, 49.0), (40.1, 63.3, 43.1), 410.1, 65.38),
    "mask_rcnn_R101_gn": Table4Row("R-101-FPN", "GN-ReLU", (44.0, 64.7, 48.3), (39.4, 62.1, 42.7), 410.3, 65.36),
    "mask_rcnn_R101_evonorm_s0": Table4Row("R-101-FPN", "EvoNorm-S0", (44.5, 65.3, 48.7), (39.6, 62.3, 42.6), 409.7, 65.38),
}


def paper_row(config_file: str | Path) -> Table4Row | None:
    """The Table 4 row of a config file (by its name), or None for configs not in the paper (the demo)."""
    return TABLE4.get(Path(config_file).stem)
