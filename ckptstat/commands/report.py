"""`report`: one checkpoint's summary, ties, FLOPs, memory and weight statistics as a markdown report
(figures in `<name>_files/` beside it) or a self-contained HTML page (docs/report.md)."""
from __future__ import annotations

import sys
from typing import Optional

import typer

from ..render import DEFAULT_SEQ_RULE
from .common import ConfigOpt, JsonOpt, PathArg, emit_json, positive, write_out
from .values import ChunkOpt, ProgressOpt, WorkersOpt


def report(
    path: str = PathArg,
    output: Optional[str] = typer.Option(None, "--output", "-o", help="report.md (figures in report_files/ beside "
                                         "it) or report.html (one self-contained file). Without it: markdown on "
                                         "stdout, no figures."),
    no_stats: bool = typer.Option(False, "--no-stats", help="Header-only: no tensor value read (no statistics, no plots)."),
    batch: int = typer.Option(1, "--batch", "-b", help="Batch size for FLOPs and memory."),
    seq: Optional[int] = typer.Option(None, "--seq", "-s", help=f"Sequence length for every figure that takes "
                                      f"one: the summary's FLOPs per token, FLOPs, memory (default: {DEFAULT_SEQ_RULE})."),
    as_json: bool = JsonOpt,
    chunk_bytes: int = ChunkOpt,
    workers: int = WorkersOpt,
    progress: Optional[bool] = ProgressOpt,
    config: Optional[str] = ConfigOpt,
) -> None:
    """Summary, ties, FLOPs, memory and weight statistics with their plots, in one shareable report
    (markdown for model cards and issues, or one HTML file). A part that cannot apply says why."""
    from .. import open_checkpoint
    from ..analysis.report import build
    from ..render.progress import progress_bar

    positive("--batch", batch)
    positive("--seq", seq)
    ckpt = open_checkpoint(path, config)
    inputs = [path, config, *ckpt.inputs]
    if output is not None:
        from ..render.report import check_report_output

        check_report_output(output, inputs)   # before any value is read
    with progress_bar(sys.stderr.isatty() if progress is None else progress) as bar:
        run = build(ckpt, batch, seq, read_values=not no_stats, chunk_bytes=chunk_bytes, workers=workers,
                    progress=bar)
    if as_json and output is None:
        emit_json(run.report)
        return
    from ..render.report import report_markdown, write_report

    if output is None:
        write_out(report_markdown(run.report, no_plot="figures are written with -o report.md or report.html"
                                         if run.stats is not None else None))
        return
    written = write_report(output, run, inputs)
    if as_json:
        emit_json(run.report)
    else:
        print("wrote " + ", ".join(written))
