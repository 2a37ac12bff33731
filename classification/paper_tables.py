"""The paper's classification tables as data: grids of (model, layer, images per worker).

Numbers are ImageNet top-1 (%) copied from "Evolving Normalization-Activation Layers"
(Table 2 and Table 3 of the full paper) and its NeurIPS appendix (Tables 9-13). "1e-3" in
Table 2 (a layer that does not train) is stored as 0.001.

Controls: the miniatures also run rows the paper does not have, negative controls without
normalization (:data:`CONTROLS`), so that a miniature shows whether it can tell a normalization
layer from none at all. They carry no paper number and are not part of the paper-scale grids.

Which appendix table is which: the appendix text lays Tables 9 and 10 side by side. Table 9
("90 training epochs, original learning rate schedule") is the one whose EvoNorm-S0 row reads
76.2 ... 76.4; Table 10 ("90 training epochs with RandAugment") repeats the ResNet-50 rows of
Table 3 (EvoNorm-S0 77.4 ... 77.5), so Table 3's ResNet-50 runs use RandAugment. Table 13 is
Table 3's MobileNetV2 block without GN-Swish.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from evonorm_suite.classification.recipes import Recipe, recipe_for

BATCHES = (128, 64, 32, 16, 8, 4)  # images per worker, Tables 3 and 9-13
# paper row label -> registry name
LAYERS = {
    "BN-ReLU": "bn_relu", "BN-PReLU": "bn_prelu", "BN-Swish-1": "bn_swish1", "BN-Swish": "bn_swish",
    "Random": "random_sample", "Random + rej": "random_rej", "RS + rej": "rs_rej",
    "EvoNorm-B0": "evonorm_b0", "EvoNorm-B1": "evonorm_b1", "EvoNorm-B2": "evonorm_b2",
    "GN-ReLU": "gn_relu", "GN-Swish": "gn_swish", "FRN": "frn",
    "EvoNorm-S0": "evonorm_s0", "EvoNorm-S1": "evonorm_s1", "EvoNorm-S2": "evonorm_s2",
    "ReLU (no norm)": "no_norm_relu",
}
# The negative controls (layers without normalization): Table 2's "Random + rej" (a paper row) and a
# BN-ReLU without its normalization (no paper number).
CONTROLS = ("ReLU (no norm)", "Random + rej")
# paper column label -> model name in evonorm_core.classifiers.models
MODELS = {
    "R-50": "resnet50", "R-101": "resnet101", "MobileNetV2": "mobilenetv2", "MnasNet-B1": "mnasnet_b1",
    "EfficientNet-B0": "efficientnet_b0", "EfficientNet-B5": "efficientnet_b5",
}
WORKERS = {"resnet50": 8, "resnet101": 8}  # everything else: 32 (section 5.1)


@dataclass(frozen=True)
class PaperTable:
    """One table: ``accuracy[(model, layer label)]`` is a row over ``batches`` (or one value);
    ``controls`` are the labels of rows the miniature adds for every model (no paper number)."""

    key: str
    title: str
    batches: tuple[int, ...]  # images per worker; () for Table 2 (the recipe's batch)
    accuracy: dict[tuple[str, str], tuple[float, ...]]
    recipe: dict[str, dict] = field(default_factory=dict)  # model -> recipe overrides
    note: str = ""
    controls: tuple[str, ...] = ()

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(m for m, _ in self.accuracy))

    @property
    def layers(self) -> list[str]:
        return list(dict.fromkeys(label for _, label in self.accuracy))

    def row_labels(self, model: str, with_controls: bool = False) -> list[str]:
        """The layer labels of ``model``'s rows in table order, then (``with_controls``) the miniature's
        controls that the table does not have already."""
        rows = [label for m, label in self.accuracy if m == model]
        return rows + [label for label in self.controls if with_controls and label not in rows]

    @property
    def is_batch_sweep(self) -> bool:
        return bool(self.batches)

    def paper_value(self, model: str, label: str, batch: int | None = None) -> float | None:
        row = self.accuracy.get((model, label))
        if row is None:
            return None
        return row[0] if batch is None else row[self.batches.index(batch)] if batch in self.batches else None


def _rows(model: str, rows: dict[str, tuple[float, ...]]) -> dict[tuple[str, str], tuple[float, ...]]:
    return {(model, label): values for label, values in rows.items()}


def _table2() -> dict[tuple[str, str], tuple[float, ...]]:
    columns = list(MODELS.values())
    rows = {
        "BN-ReLU": (76.1, 77.9, 73.1, 74.5, 76.4, 83.6),
        "BN-PReLU": (76.1, 77.4, 74.0, 75.0, 76.3, 83.6),
        "BN-Swish-1": (77.2, 78.7, 74.4, 75.1, 77.0, 83.4),
        "BN-Swish": (77.0, 78.6, 74.5, 75.3, 77.0, 83.5),
        "Random": (1e-3,) * 6,
        "Random + rej": (70.2, 71.6, 1e-3, 1e-3, 1e-3, 1e-3),
        "RS + rej": (76.3, 78.1, 73.4, 74.7, 76.4, 83.2),
        "EvoNorm-B0": (77.8, 79.1, 75.1, 75.3, 76.8, 83.6),
        "EvoNorm-B1": (77.5, 78.7, 74.5, 75.1, 76.5, 83.6),
        "EvoNorm-B2": (77.8, 79.0, 74.7, 74.9, 76.6, 83.4),
    }
    return {(model, label): (values[i],) for label, values in rows.items() for i, model in enumerate(columns)}


TABLE3_RESNET50 = {
    "BN-ReLU": (76.1, 76.2, 76.1, 75.6, 74.3, 70.7),
    "GN-ReLU": (75.4, 75.7, 75.9, 75.8, 75.8, 75.7),
    "GN-Swish": (77.2, 77.3, 77.2, 77.3, 77.0, 77.3),
    "FRN": (75.3, 75.8, 75.9, 75.9, 75.8, 76.0),
    "EvoNorm-S0": (77.4, 77.4, 77.6, 77.3, 77.3, 77.5),
    "EvoNorm-S1": (77.5, 77.3, 77.4, 77.4, 77.3, 77.4),
    "EvoNorm-S2": (76.9, 77.3, 77.1, 77.2, 77.1, 77.1),
}
TABLE3_MOBILENETV2 = {
    "BN-ReLU": (73.3, 73.2, 72.7, 70.0, 64.5, 60.4),
    "GN-ReLU": (71.5, 72.6, 72.9, 72.5, 72.7, 72.6),
    "GN-Swish": (73.4, 73.7, 73.7, 73.6, 74.0, 73.5),
    "FRN": (73.3, 73.4, 73.5, 73.6, 73.5, 73.5),
    "EvoNorm-S0": (74.0, 74.0, 73.9, 73.9, 73.9, 73.8),
    "EvoNorm-S1": (73.7, 74.0, 73.6, 73.7, 73.7, 73.8),
    "EvoNorm-S2": (73.8, 73.4, 73.7, 73.9, 73.9, 73.8),
}
_NO_GN_SWISH = lambda rows: {k: v for k, v in rows.items() if k != "GN-Swish"}  # noqa: E731
_RANDAUGMENT = {"randaugment": True}
_180_EPOCHS = {"randaugment": True, "epochs": 180, "milestones": (60, 120, 160)}
# Section 5.1: "For results presented in Table 3 (layers without batch statistics), the base learning
# rate for MobileNetV2 is lowered to 0.03"; "results for the same architecture are obtained ... with
# identical training setup" (Table 3 caption), so every row of the MobileNetV2 block, BN-ReLU included.
_MOBILENETV2_TABLE3 = {"base_lr": 0.03}

TABLES = {
    "table2": PaperTable(
        "table2", "Table 2: ImageNet top-1 of batch-statistics layers across six models", (), _table2(),
        controls=CONTROLS,
    ),
    "table3": PaperTable(
        "table3", "Table 3: batch-independent layers as images/worker shrink (R-50 x8, MobileNetV2 x32 workers)",
        BATCHES, {**_rows("resnet50", TABLE3_RESNET50), **_rows("mobilenetv2", TABLE3_MOBILENETV2)},
        recipe={"resnet50": _RANDAUGMENT, "mobilenetv2": _MOBILENETV2_TABLE3},
        note="LR scaled linearly with the total batch; MobileNetV2 base LR 0.03 for every row.",
        controls=CONTROLS,
    ),
    "table9": PaperTable(
        "table9", "Table 9: ResNet-50 vs images/worker (90 epochs, original LR schedule)", BATCHES,
        _rows("resnet50", {
            "BN-ReLU": (76.1, 76.4, 76.3, 76.0, 74.5, 70.4),
            "GN-ReLU": (75.1, 75.8, 75.9, 75.8, 75.7, 75.8),
            "FRN": (75.5, 75.8, 75.9, 75.8, 75.8, 75.8),
            "EvoNorm-S0": (76.2, 76.2, 76.3, 76.3, 76.1, 76.4),
            "EvoNorm-S1": (76.3, 76.1, 76.2, 76.2, 76.1, 76.4),
            "EvoNorm-S2": (76.1, 76.3, 76.4, 76.3, 76.3, 76.4),
        }),
    ),
    "table10": PaperTable(
        "table10", "Table 10: ResNet-50 vs images/worker (90 epochs with RandAugment, original LR schedule)",
        BATCHES, _rows("resnet50", _NO_GN_SWISH(TABLE3_RESNET50)), recipe={"resnet50": _RANDAUGMENT},
    ),
    "table11": PaperTable(
        "table11", "Table 11: ResNet-50 vs images/worker (180 epochs with RandAugment, original LR schedule)",
        BATCHES, _rows("resnet50", {
            "BN-ReLU": (77.6, 77.6, 77.1, 76.7, 74.8, 72.0),
            "GN-ReLU": (76.9, 77.1, 77.0, 77.0, 77.0, 77.2),
            "FRN": (77.2, 77.1, 77.2, 77.1, 76.8, 77.2),
            "EvoNorm-S0": (78.0, 77.8, 77.9, 78.1, 78.1, 77.8),
            "EvoNorm-S1": (77.9, 77.8, 78.0, 77.8, 77.8, 78.0),
            "EvoNorm-S2": (77.5, 77.7, 77.7, 77.6, 77.6, 77.6),
        }),
        recipe={"resnet50": _180_EPOCHS},
        note="Stage boundaries for 180 epochs (60/120/160) are not in the paper: the 90-epoch ones doubled.",
    ),
    "table12": PaperTable(
        "table12", "Table 12: ResNet-50 vs images/worker (180 epochs with RandAugment, cosine LR schedule)",
        BATCHES, _rows("resnet50", {
            "BN-ReLU": (77.7, 77.6, 77.2, 76.3, 74.5, 70.6),
            "GN-ReLU": (77.1, 77.2, 77.3, 77.3, 77.3, 77.3),
            "FRN": (77.2, 77.4, 77.4, 77.2, 77.4, 77.4),
            "EvoNorm-S0": (78.3, 78.3, 78.4, 78.3, 78.2, 78.2),
            "EvoNorm-S1": (78.2, 78.2, 78.3, 78.1, 78.1, 78.2),
            "EvoNorm-S2": (78.2, 78.1, 78.0, 77.9, 77.9, 78.0),
        }),
        recipe={"resnet50": {"randaugment": True, "epochs": 180, "schedule": "cosine"}},
    ),
    "table13": PaperTable(
        "table13", "Table 13: MobileNetV2 vs images/worker (32 workers)", BATCHES,
        _rows("mobilenetv2", _NO_GN_SWISH(TABLE3_MOBILENETV2)), recipe={"mobilenetv2": _MOBILENETV2_TABLE3},
    ),
}


def table_recipe(table: str, model: str) -> Recipe:
    """The whole recipe of ``model``'s cells in paper table ``table``: the model's paper recipe
    with the table's setup (RandAugment, 180 epochs and their milestones, cosine, MobileNetV2's
    LR 0.03 ...). Every layer of a table shares it (the tables compare layers in one setup)."""
    if table not in TABLES:
        raise ValueError(f"unknown paper table {table!r}; accepted: {', '.join(TABLES)}")
    if model not in TABLES[table].models:
        raise ValueError(f"{table} has no {model!r} column; it has {', '.join(TABLES[table].models)}")
    return recipe_for(model, **TABLES[table].recipe.get(model, {}))
