"""Paper Table 4 (Mask R-CNN on COCO val2017) as an :class:`~evonorm_core.experiment.tables.PaperTable`.

Rows are keyed by (backbone, layer); :data:`CONFIG_ROWS` maps this project's config names to them.
Numbers are copied from Liu et al., "Evolving Normalization-Activation Layers", Table 4.
"""
from __future__ import annotations

from pathlib import Path

from evonorm_core.experiment.tables import PaperTable, Value

BOX, MASK = ("box AP", "box AP50", "box AP75"), ("mask AP", "mask AP50", "mask AP75")
TABLE4 = PaperTable(
    key="table4",
    title="Table 4: Mask R-CNN object detection and instance segmentation on COCO val2017",
    source="Liu et al. 2020, Table 4",
    row_names=("backbone", "layer"),
    columns=(*BOX, *MASK, "MAdds (B)", "params (M)"),
    rows={
        ("R-50-FPN", "BN-ReLU"): (42.1, 62.9, 46.2, 37.8, 60.0, 40.6, 332.0, 46.37),
        ("R-50-FPN", "EvoNorm-B0"): (44.0, 65.2, 48.1, 39.5, 62.7, 42.4, 332.3, 46.38),
        ("R-50-FPN", "GN-ReLU"): (42.7, 63.8, 46.6, 38.4, 61.2, 41.2, 332.3, 46.37),
        ("R-50-FPN", "EvoNorm-S0"): (43.6, 64.9, 47.9, 39.4, 62.3, 42.7, 331.9, 46.38),
        ("R-101-FPN", "BN-ReLU"): (43.8, 64.2, 48.2, 39.2, 61.3, 42.5, 409.8, 65.36),
        ("R-101-FPN", "EvoNorm-B0"): (45.1, 66.2, 49.0, 40.1, 63.3, 43.1, 410.1, 65.38),
        ("R-101-FPN", "GN-ReLU"): (44.0, 64.7, 48.3, 39.4, 62.1, 42.7, 410.3, 65.36),
        ("R-101-FPN", "EvoNorm-S0"): (44.5, 65.3, 48.7, 39.6, 62.3, 42.6, 409.7, 65.38),
    },
)
_LAYERS = {"bn": "BN-ReLU", "evonorm_b0": "EvoNorm-B0", "gn": "GN-ReLU", "evonorm_s0": "EvoNorm-S0"}
CONFIG_ROWS = {
    f"mask_rcnn_{depth}_{layer}": (f"R-{depth[1:]}-FPN", label)
    for depth in ("R50", "R101") for layer, label in _LAYERS.items()
}


def paper_cells(config_file: str | Path, columns: tuple[str, ...]) -> tuple[Value, ...]:
    """The Table 4 values of ``columns`` for a config (by file or folder name); ``None`` each for
    configs not in the paper (the demo)."""
    key = CONFIG_ROWS.get(Path(config_file).stem if str(config_file).endswith(".yaml") else Path(config_file).name)
    return tuple(TABLE4.cell(key, c) for c in columns) if key else (None,) * len(columns)
