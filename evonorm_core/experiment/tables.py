"""The paper's numbers as typed records, and the one renderer of tables (markdown) and curves (PNG).

A :class:`PaperTable` holds one table of the paper: rows keyed by tuples of names (e.g.
``("resnet50", "EvoNorm-S0")``), named columns (e.g. images per worker, or ``box AP``), and
a value or ``None`` (not reported) per cell. Task packages keep their tables as
``PaperTable`` instances and render them, with measured numbers beside the paper's, through
:meth:`PaperTable.to_markdown`; :func:`markdown_table` renders any table and
:func:`plot_series` draws curves with error bars (accuracy vs batch size, search progress).
"""
from __future__ import annotations

import io
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from .files import atomic_write_bytes

Value = float | None
RowKey = tuple[str, ...]
LEGENDED_PANEL_WIDTH = 8.0  # inches: a 5.5-inch plot and its legend beside it


@dataclass(frozen=True)
class PaperTable:
    """One table of the paper.

    ``row_names`` names the parts of a row key (``("model", "layer")``); ``columns`` are the
    column labels; ``rows`` maps each row key to one value per column (``None``: the paper
    gives no number). ``source`` says where the numbers come from (``"Liu et al. 2020, Table 3"``).
    """

    key: str
    title: str
    source: str
    row_names: tuple[str, ...]
    columns: tuple[str, ...]
    rows: Mapping[RowKey, tuple[Value, ...]]
    note: str = ""
    meta: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, values in self.rows.items():
            if len(key) != len(self.row_names):
                raise ValueError(f"{self.key}: row key {key} does not match row names {self.row_names}")
            if len(values) != len(self.columns):
                raise ValueError(f"{self.key}: row {key} has {len(values)} values for {len(self.columns)} columns")

    def row(self, *key: str) -> tuple[Value, ...]:
        """The values of row ``key``; ``KeyError`` listing the rows if absent."""
        if key not in self.rows:
            raise KeyError(f"{self.key} has no row {key}; rows: {list(self.rows)}")
        return self.rows[key]

    def cell(self, key: RowKey, column: str) -> Value:
        if column not in self.columns:
            raise KeyError(f"{self.key} has no column {column!r}; columns: {list(self.columns)}")
        return self.row(*key)[self.columns.index(column)]

    def values(self, part: str) -> list[str]:
        """The distinct values of one part of the row keys, in table order (e.g. the models)."""
        index = self.row_names.index(part)
        return list(dict.fromkeys(key[index] for key in self.rows))

    def to_markdown(
        self, measured: Mapping[RowKey, Mapping[str, str]] | None = None, measured_columns: Sequence[str] = ()
    ) -> str:
        """The table as markdown; ``measured[row][column]`` strings appear in extra
        ``measured_columns`` after the paper's (``"-"`` where a row has none)."""
        header = [*self.row_names, *(f"paper {c}" if measured_columns else c for c in self.columns), *measured_columns]
        lines = []
        for key, values in self.rows.items():
            ours = (measured or {}).get(key, {})
            lines.append([*key, *(format_number(v) for v in values), *(ours.get(c, "-") for c in measured_columns)])
        text = [f"**{self.title}** ({self.source})", "", markdown_table(header, lines)]
        if self.note:
            text += ["", self.note]
        return "\n".join(text)


def format_number(value: Value, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if abs(value) >= 0.01 or value == 0 else f"{value:g}"


def mean_and_std(values: Sequence[float], ndigits: int | None = None) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n - 1) of results over seeds, rounded to ``ndigits`` if
    given; ``None`` where undefined (no value; one value for the std). Every mean ± spread this
    project reports is this one."""
    mean = statistics.fmean(values) if values else None
    std = statistics.stdev(values) if len(values) > 1 else None
    if ndigits is None:
        return mean, std
    return tuple(None if v is None else round(v, ndigits) for v in (mean, std))


def mean_std_fields(values: Sequence[float], ndigits: int | None = None) -> dict[str, float | None]:
    """``{"mean": ..., "std": ...}`` of :func:`mean_and_std`, the fields of a result file's summary."""
    return dict(zip(("mean", "std"), mean_and_std(values, ndigits)))


def format_mean_std(values: Sequence[float], digits: int = 1) -> str:
    """``mean ± std (n=k)`` of ``values`` (:func:`mean_and_std`), or the value itself when there is one."""
    mean, std = mean_and_std(values)
    if mean is None:
        return "-"
    if std is None:
        return f"{mean:.{digits}f} (n=1)"
    return f"{mean:.{digits}f} ± {std:.{digits}f} (n={len(values)})"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub markdown table."""
    widths = len(header)
    for row in rows:
        if len(row) != widths:
            raise ValueError(f"row {list(row)} has {len(row)} cells, the header {widths}")
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + " --- |" * widths]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


@dataclass(frozen=True)
class Series:
    """One curve: ``x``, ``y`` and optional symmetric error bars ``err``; dashed if ``dashed``. Curves of
    the same ``color_key`` (default: the label) share a colour across a figure's panels."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    err: Sequence[float] | None = None
    dashed: bool = False
    color_key: str | None = None

    @property
    def key(self) -> str:
        return self.color_key or self.label


def pyplot():
    """``matplotlib.pyplot`` with the file-only ``Agg`` backend, for every figure of the suite.

    Imported on first use, not at a module top: matplotlib is optional for the core (which
    needs only torch at import), and choosing a backend at import would impose it on every
    program that imports the module."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, dpi: int = 100) -> Path:
    """Write ``fig`` to ``path`` (format from its suffix) atomically, as every run file; close it either way."""
    path = Path(path)
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=path.suffix.lstrip(".") or "png", dpi=dpi)
    finally:
        pyplot().close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def plot_series(
    path: str | Path,
    panels: Mapping[str, Sequence[Series]],
    *,
    xlabel: str,
    ylabel: str,
    log2_x: bool = False,
    invert_x: bool = False,
    columns: int = 2,
    hlines: Mapping[str, Sequence[tuple[str, float]]] | None = None,
) -> Path:
    """A PNG with one panel per entry of ``panels`` (title -> curves); ``hlines[title]`` adds
    labelled horizontal reference lines to a panel. Returns the path written."""
    plt = pyplot()
    count = max(1, len(panels))
    ncols = min(columns, count)
    nrows = (count + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(LEGENDED_PANEL_WIDTH * ncols, 4 * nrows), squeeze=False)
    keys = list(dict.fromkeys(s.key for curves in panels.values() for s in curves))
    palette = [f"C{i}" for i in range(10)] if len(keys) <= 10 else [plt.cm.tab20(i) for i in range(20)]
    colors = {key: palette[i % len(palette)] for i, key in enumerate(keys)}  # one colour per layer in every panel
    for ax, (title, curves) in zip(axes.flat, panels.items()):
        for s in curves:
            style = "s--" if s.dashed else "o-"
            ax.errorbar(list(s.x), list(s.y), yerr=None if s.err is None else list(s.err), fmt=style,
                        color=colors[s.key], capsize=3, label=s.label, markersize=4)
        for label, value in (hlines or {}).get(title, ()):
            ax.axhline(value, linestyle=":", color="gray", linewidth=1)
            ax.annotate(label, (0.01, value), xycoords=("axes fraction", "data"), fontsize=7, color="gray")
        if log2_x:
            ax.set_xscale("log", base=2)
            xs = sorted({x for s in curves for x in s.x})
            if xs:
                ax.set_xticks(xs)
            ax.get_xaxis().set_major_formatter(plt.ScalarFormatter())
        if invert_x:
            ax.invert_xaxis()
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
        ax.grid(alpha=0.3)
        if curves:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # beside: no curve hidden
        else:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
            ax.set(xticks=[], yticks=[])  # an empty panel has no scale to show
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
