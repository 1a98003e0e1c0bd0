"""`stats` and `plot`: weight values streamed in bounded chunks."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from .common import ConfigOpt, FilterOpt, JsonOpt, PathArg, console, emit_json, empty, no_match, write_all
from .quick import CHUNK, PROGRESS, STATS_CHUNK, STATS_WORKERS, WORKERS

if TYPE_CHECKING:
    from ..analysis.stats import StatsRun

ChunkOpt = typer.Option(STATS_CHUNK, *CHUNK, help="Stored bytes read per chunk (bounds memory).")
WorkersOpt = typer.Option(STATS_WORKERS, *WORKERS, help="Worker processes (0: one per CPU).")
ProgressOpt = typer.Option(None, "/".join(PROGRESS), help="Progress bar on stderr (default: when a TTY).")
AllRolesOpt = typer.Option(False, "--all-roles", help="Also read buffers, optimizer state and counters (ints too).")
BucketOpt = typer.Option(None, "--bucket", "-B", help="Only this bucket (repeatable).")


def _collect(path: str, config: str | None, filter: str | None, bucket: list[str] | None, all_roles: bool,
             chunk_bytes: int, workers: int, progress: bool | None, output: Path | None = None,
             scheduler: str | None = None) -> StatsRun:
    """The stats run, with the library's progress callback drawn as a bar on stderr (default: on a TTY).
    An `output` that is, or resolves to, an input is refused before any value is read."""
    from ..analysis.stats import collect, open_for_stats
    from ..core.files import check_output
    from ..render.progress import progress_bar

    ckpt = open_for_stats(path, config, filter, tuple(bucket or ()), all_roles, chunk_bytes,
                          workers if not scheduler else 0)
    if output is not None:
        check_output(output, [path, config, *ckpt.inputs])
    with progress_bar(sys.stderr.isatty() if progress is None else progress) as bar:
        if scheduler:   # the same report, the tensors read on a Dask cluster (analysis/stats/cluster.py)
            from ..analysis.stats.cluster import collect_dask

            return collect_dask(ckpt, scheduler, filter, tuple(bucket or ()), all_roles, chunk_bytes, bar)
        return collect(ckpt, filter, tuple(bucket or ()), all_roles, chunk_bytes, workers, bar)


def stats(
    path: str = PathArg,
    filter: Optional[str] = FilterOpt,
    bucket: Optional[list[str]] = BucketOpt,
    all_roles: bool = AllRolesOpt,
    layers: bool = typer.Option(False, "--layers", help="Also show statistics per layer."),
    show_tensors: bool = typer.Option(False, "--tensors", help="Also show statistics per tensor."),
    as_json: bool = JsonOpt,
    as_csv: bool = typer.Option(False, "--csv", help="Print one CSV table (tensor, layer, bucket, total rows)."),
    chunk_bytes: int = ChunkOpt,
    workers: int = WorkersOpt,
    progress: Optional[bool] = ProgressOpt,
    config: Optional[str] = ConfigOpt,
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Dask scheduler address (tcp://host:8786): "
                                            "read the tensors on that cluster; same report (the `dask` extra)."),
) -> None:
    """Weight statistics per tensor, layer and bucket, streamed in bounded chunks: moments, quantiles, anomalies."""
    from ..errors import UsageError

    if as_json and as_csv:
        raise UsageError("--json and --csv are exclusive")
    r = _collect(path, config, filter, bucket, all_roles, chunk_bytes, workers, progress, scheduler=scheduler).report
    if as_json:
        emit_json(r)
    elif as_csv:
        from ..analysis.stats import csv_pieces

        write_all(csv_pieces(r))
    else:
        from ..render.stats import render_stats

        render_stats(r, console(), show_layers=layers, show_tensors=show_tensors)
    if not r["tensors"]:
        raise empty(no_match(filter, bucket, r["skipped"]))


def plot(
    path: str = PathArg,
    output: Path = typer.Option(..., "--output", "-o", help="Image file: .png, .svg or .pdf."),
    log_count: bool = typer.Option(False, "--log-count", help="Log-scale count axis on the histograms."),
    clip: float = typer.Option(0.1, "--clip", help="Histogram x range from the CLIP to 100-CLIP percentile (0: min..max)."),
    size: str = typer.Option("12x0", "--size", help="Figure size in inches WxH (H 0: from the panel count)."),
    dpi: int = typer.Option(100, "--dpi", help="Dots per inch (PNG)."),
    filter: Optional[str] = FilterOpt,
    bucket: Optional[list[str]] = BucketOpt,
    all_roles: bool = AllRolesOpt,
    as_json: bool = typer.Option(False, "--json", help="Print what was drawn (and the stats) as JSON."),
    chunk_bytes: int = ChunkOpt,
    workers: int = WorkersOpt,
    progress: Optional[bool] = ProgressOpt,
    config: Optional[str] = ConfigOpt,
) -> None:
    """Histograms per bucket and box plots per layer and bucket, drawn from streamed statistics.

    Nothing to draw (no tensor selected, or no finite value in them): no file written, exit 1."""
    from ..render.plots import check_plot_args, nothing_to_plot, parse_size, plot_stats

    figsize = parse_size(size)
    check_plot_args(output, clip, dpi)   # before reading any value
    run = _collect(path, config, filter, bucket, all_roles, chunk_bytes, workers, progress, output)
    if not run.report["tensors"]:
        raise empty(f"{no_match(filter, bucket, run.report['skipped'])}: nothing to plot, {output} not written")
    blank = nothing_to_plot(run)
    if blank:
        raise empty(f"{blank}: nothing to plot, {output} not written")
    info = plot_stats(run, output, log_count=log_count, clip=clip, figsize=figsize, dpi=dpi)
    if as_json:
        emit_json({**info, "stats": run.report})
    else:
        print(f"wrote {info['output']} ({info['width_px']}x{info['height_px']} px, {len(info['panels'])} panels)")
