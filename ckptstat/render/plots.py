"""Figures from streamed statistics: a weight histogram per bucket (norm gains, near 1.0, in a panel of their
own: naming.is_norm_gain), box plots per layer and per bucket.

Nothing here sees tensor values: histograms are rebinned from the 65536-bin accumulators of
`stats.collect`, and box plots are drawn with matplotlib's `Axes.bxp` from the streamed quantiles
(box p25..p75, line at the median, whiskers p1..p99, a marker at the mean). matplotlib is imported
only here, through its object API with the Agg canvas: no pyplot, no global backend change.
"""
from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import numpy as np

from ..analysis.stats import Acc, StatsRun, hist_quantiles, tables
from ..analysis.stats.accumulate import FLT_MAX
from ..core.files import atomic_output, check_output
from ..errors import CkptstatError, MissingDependencyError, UsageError
from .report_common import plot_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOT_SCHEMA = "ckptstat.plot/1"
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
HIST_BINS = 120   # plot bins over the range: coarser than bfloat16 bins (2^-7 relative), so no aliasing
BOX_NOTE = "boxes p25-p75, line median, whiskers p1-p99, triangle mean (streamed quantiles)"


def parse_size(text: str) -> tuple[float, float]:
    try:
        w, h = (float(v) for v in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--size must be WxH in inches, e.g. 12x9, got {text!r}") from None
    if not (0 < w <= 100 and 0 <= h <= 200):
        raise UsageError(f"--size out of range: {text!r}")
    return w, h


def check_plot_args(output: str | os.PathLike[str], clip: float, dpi: int) -> str:
    """The figure format for `output`; UsageError for a bad extension, --clip or --dpi."""
    output = os.fspath(output)
    fmt = FORMATS.get(os.path.splitext(output)[1].lower())
    if fmt is None:
        raise UsageError(f"{output}: the plot file must end in .png, .svg or .pdf")
    if not 0 <= clip < 50:
        raise UsageError(f"--clip must be in [0, 50), got {clip}")
    if dpi < 10 or dpi > 1000:
        raise UsageError(f"--dpi must be in [10, 1000], got {dpi}")
    return fmt


def nothing_to_plot(run: StatsRun) -> str | None:
    """Why a stats run has nothing to draw (no tensor, or not one finite value), or None."""
    r = run.report
    if not r["tensors"]:
        return "no tensor selected"
    if not r["total"] or not r["total"]["finite"]:
        n = len(r["tensors"])
        return f"the {n} selected tensor{'s' if n > 1 else ''} hold{'' if n > 1 else 's'} no finite value"
    return None


def rebin(acc: Acc, clip: float, bins: int = HIST_BINS) -> tuple[np.ndarray, np.ndarray, int]:
    """(counts, edges, values outside the range) on a uniform grid over [clip%, 100-clip%] (or min..max)."""
    value, mid, finite, _ = tables(acc.domain)
    rep = value if acc.exact else mid
    q = hist_quantiles(acc.hist, acc.domain, acc.exact, (clip / 100, 1 - clip / 100), acc.min, acc.max) if clip > 0 else []
    lo, hi = (q[0] if q and q[0] is not None else acc.min), (q[-1] if q and q[-1] is not None else acc.max)
    # the bins' values never leave float32's range (float64 beyond it is binned at +-3.4e38: QUANTILE_RULE), nor
    # then the range drawn, whose width min..max could overflow (+-1e308)
    lo, hi = max(lo, -FLT_MAX), min(hi, FLT_MAX)
    if hi <= lo:
        pad = abs(lo) * 0.01 or 0.5
        lo, hi = lo - pad, hi + pad
    keys = np.flatnonzero(acc.hist * finite)
    x = np.clip(rep[keys], acc.min, acc.max)
    counts, edges = np.histogram(x, bins=bins, range=(lo, hi), weights=acc.hist[keys].astype(np.float64))
    return counts, edges, int(acc.n - counts.sum())


def _box(row: dict, label: str) -> dict | None:
    q = row["quantiles"]
    if any(q.get(k) is None for k in ("p1", "p25", "p50", "p75", "p99")):   # no finite value, or one beyond float32's range
        return None
    return {"label": label, "med": q["p50"], "q1": q["p25"], "q3": q["p75"], "whislo": q["p1"],
            "whishi": q["p99"], "mean": row["mean"], "fliers": []}


def _draw_boxes(ax, boxes: list[dict], title: str, rotate: bool) -> None:  # noqa: ANN001
    ax.bxp(boxes, showfliers=False, showmeans=True, patch_artist=True,
           boxprops={"facecolor": "#c6dbef", "edgecolor": "#08519c"},
           medianprops={"color": "#08519c"},
           meanprops={"marker": "^", "markerfacecolor": "#d94801", "markeredgecolor": "#d94801", "markersize": 4})
    n = len(boxes)
    step = max(1, math.ceil(n / 24))   # an 80-layer stack: label every 4th box
    ticks = list(range(1, n + 1))
    ax.set_xticks(ticks[::step], [plot_text(b["label"]) for b in boxes][::step], rotation=45 if rotate else 0,
                  ha="right" if rotate else "center", fontsize=8)
    ax.set_title(plot_text(title), fontsize=10, loc="left")
    ax.set_ylabel("weight value", fontsize=8)
    ax.axhline(0, color="0.7", lw=0.6, zorder=0)
    ax.grid(axis="y", color="0.9")


def plot_stats(run: StatsRun, output: str | os.PathLike[str], log_count: bool = False, clip: float = 0.1,
               figsize: tuple[float, float] = (12.0, 0.0), dpi: int = 100) -> dict:
    """Draw the figure for a stats run and save it; the format comes from the file extension.
    A run with nothing to draw (`nothing_to_plot`) raises CkptstatError and writes no file."""
    output = os.fspath(output)
    fmt = check_plot_args(output, clip, dpi)
    empty = nothing_to_plot(run)
    if empty:
        raise CkptstatError(f"{empty}: nothing to plot, {output} not written")
    fig, panels = stats_figure(run, log_count, clip, figsize, dpi)
    w, h = (float(x) for x in fig.get_size_inches())
    r = run.report
    # never over an input; written to a temporary file beside the target, then renamed over it (a
    # symlink there is replaced, not written through; a failed save leaves nothing)
    check_output(output, [r.get("path"), r.get("config")])
    with atomic_output(output) as tmp:
        fig.savefig(tmp, format=fmt, dpi=dpi)
    return {"schema": PLOT_SCHEMA, "output": output, "format": fmt, "width_in": w, "height_in": h, "dpi": dpi,
            "width_px": round(w * dpi), "height_px": round(h * dpi), "panels": panels,
            "log_count": log_count, "clip_percent": clip}


def stats_figure(run: StatsRun, log_count: bool = False, clip: float = 0.1,
                 figsize: tuple[float, float] = (12.0, 0.0), dpi: int = 100) -> tuple[Figure, list[str]]:
    """The figure (not saved) and its panels' names: histograms per bucket, box plots per layer of each
    stack and per bucket. The caller checks `nothing_to_plot(run)` first."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import EngFormatter, MaxNLocator
    except ImportError:
        raise MissingDependencyError("plots need matplotlib: pip install matplotlib") from None

    r = run.report
    # each bucket without its norm gains, the gains in a panel of their own (their 1.0s would squash the rest)
    hist_buckets = [b for b in [*(row["bucket"] for row in r["buckets"]), "norm gains"]
                    if b in run.plot_acc and run.plot_acc[b].n > 0]
    stacks = sorted({row["bucket"] for row in r["layers"]}, key=lambda b: [x["bucket"] for x in r["buckets"]].index(b))
    ncols = min(3, max(1, len(hist_buckets)))
    hist_rows = math.ceil(len(hist_buckets) / ncols)
    nrows = hist_rows + len(stacks) + 1
    w, h = figsize
    if h == 0:
        h = 1.0 + 2.8 * hist_rows + 3.0 * (len(stacks) + 1)
    fig = Figure(figsize=(w, h), dpi=dpi, layout="constrained")
    grid = fig.add_gridspec(nrows, ncols)
    fig.suptitle(f"{plot_text(os.path.basename(r['path'].rstrip(os.sep)))}: weights of {len(r['tensors'])} tensors "
                 f"({r['selection']['roles']} roles)", fontsize=12)
    panels: list[str] = []

    for i, b in enumerate(hist_buckets):
        acc = run.plot_acc[b]
        counts, edges, outside = rebin(acc, clip)
        ax = fig.add_subplot(grid[i // ncols, i % ncols])
        ax.stairs(counts, edges, fill=True, color="#6baed6")
        if log_count:
            ax.set_yscale("log")
        rng = f"p{clip:g}-p{100 - clip:g}" if clip else "min-max"
        # two lines, so that a title never runs into its neighbour's in a row of three
        ax.set_title(f"{plot_text(b)}\n{acc.n:,} values ({rng}" + (f", {outside:,} outside" if outside else "") + ")",
                     fontsize=9, loc="left")
        ax.set_ylabel("count" + (" (log)" if log_count else ""), fontsize=8)
        ax.set_xlabel("weight value", fontsize=8)
        # at most 5 value ticks (a narrow range of gains packed a dozen long labels), counts as 1.5M: no
        # offset text (1e6) above the axes, where it ran into the title
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.yaxis.set_major_formatter(EngFormatter(sep=""))
        ax.tick_params(labelsize=8)
        panels.append(f"histogram:{b}")

    row = hist_rows
    for stack in stacks:
        layer_rows = [x for x in r["layers"] if x["bucket"] == stack]
        boxes = [bx for bx in (_box(x, str(x["layer"])) for x in layer_rows) if bx]
        if boxes:
            ax = fig.add_subplot(grid[row, :])
            _draw_boxes(ax, boxes, f"{stack}: per layer ({BOX_NOTE})", rotate=False)
            ax.set_xlabel("layer", fontsize=8)
            panels.append(f"boxplot:layers:{stack}")
        row += 1
    boxes = [bx for bx in (_box(x, x["bucket"]) for x in r["buckets"]) if bx]
    if boxes:
        ax = fig.add_subplot(grid[row, :])
        _draw_boxes(ax, boxes, f"per bucket ({BOX_NOTE})", rotate=False)
        ax.set_xlabel("bucket", fontsize=8)
        panels.append("boxplot:buckets")
    return fig, panels
