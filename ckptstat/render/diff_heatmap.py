"""The heatmap of `ckptstat diff`'s HTML report: mean relative L2 (||a-b|| / ||a||) per layer (rows) and
module inside the layer (columns), from the report's `summary.grid`, drawn with matplotlib (imported
here, only when an HTML report is written) into a PNG embedded as a data URI: the page stays one file."""
from __future__ import annotations

import math

from .report_common import figure_png, img_tag, plot_text


def _label(bucket: str, layer: int) -> str:
    return f"layer {layer}" if bucket == "encoder" else f"{bucket} {layer}"


def heatmap_matrix(r: dict) -> tuple[list[str], list[str], list[list[float]]]:
    """(row labels, column labels, values): NaN where a module was not compared (added, removed, shape
    changed, --names-only), rows in the report's layer order, columns in order of first appearance."""
    grid = r["summary"].get("grid") or []
    rows: list[tuple[str, int]] = []
    cols: list[str] = []
    for c in grid:
        if (c["bucket"], c["layer"]) not in rows:
            rows.append((c["bucket"], c["layer"]))
        if c["module"] not in cols:
            cols.append(c["module"])
    values = [[math.nan] * len(cols) for _ in rows]
    for c in grid:
        if c["mean_rel_l2"] is not None:
            values[rows.index((c["bucket"], c["layer"]))][cols.index(c["module"])] = float(c["mean_rel_l2"])
    return [_label(b, n) for b, n in rows], cols, values


def heatmap_png(r: dict) -> bytes | None:
    """The PNG, or None when no layered tensor's values were compared."""
    rows, cols, values = heatmap_matrix(r)
    if not any(not math.isnan(v) for row in values for v in row):
        return None
    import matplotlib
    import numpy as np
    from matplotlib.figure import Figure

    data = np.ma.masked_invalid(np.array(values, dtype=float))
    width = min(4 + 0.45 * len(cols), 24)
    height = min(1.8 + 0.28 * len(rows), 40)
    fig = Figure(figsize=(width, height), dpi=100)
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["Reds"].with_extremes(bad="#d9d9d9")
    vmax = max(float(data.max()), 1e-12)
    im = ax.imshow(data, aspect="auto", cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest")
    ax.set_xticks(range(len(cols)), labels=[plot_text(c[:40]) for c in cols], rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), labels=[plot_text(r) for r in rows], fontsize=8)
    ax.set_title("relative change per layer and module (grey: not compared)", fontsize=9)
    fig.colorbar(im, ax=ax).set_label("mean relative L2, ||a-b|| / ||a||", fontsize=8)
    fig.tight_layout()
    return figure_png(fig, tight=True)


def heatmap_img(r: dict) -> str | None:
    """An <img> element holding the PNG as a data URI, or None."""
    png = heatmap_png(r)
    if png is None:
        return None
    return img_tag(png, "heatmap: mean relative L2 per layer and module", "heatmap")
