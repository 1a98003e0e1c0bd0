"""`ckptstat trend`: what changed across the checkpoints of a training run (analysis/trend/, docs/training.md)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .common import JsonOpt, console, emit_json
from .values import ChunkOpt, ProgressOpt, WorkersOpt


def trend(
    paths: list[str] = typer.Argument(..., help="A run folder (checkpoint-N/, global_stepN/, *step=N.ckpt, step_N...), "
                                      "or two or more checkpoints."),
    as_json: bool = JsonOpt,
    fmt: str = typer.Option("text", "--format", help="text (tables), md (a markdown report, figures beside it) or html "
                            "(one page, figures inside)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report (md, html or --json) here."),
    chunk_bytes: int = ChunkOpt,
    workers: int = WorkersOpt,
    progress: Optional[bool] = ProgressOpt,
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Dask scheduler address (tcp://host:8786): read "
                                            "the steps on that cluster; same report (the `dask` extra)."),
) -> None:
    """Per step, bucket, layer and tensor: weight norm, change since the previous and the first checkpoint (relative
    L2, max abs), update-to-weight ratio, Adam's second moments; frozen, dead and jumping layers. Streamed in bounded
    memory, one step per worker process or Dask task."""
    from ..analysis.trend import trend as trend_report
    from ..analysis.trend.find import discover
    from ..errors import UsageError
    from ..render.progress import progress_bar

    if fmt not in ("text", "md", "html"):
        raise UsageError(f"--format must be text, md or html, not {fmt!r}")
    if output is not None and fmt == "text" and not as_json:   # -o alone: the format from the suffix
        fmt = "html" if output.suffix.lower() in (".html", ".htm") else "md"
    if output is not None:   # never an input: a step's files, its index and config.json (headers only, before any value)
        from .. import open_checkpoint
        from ..core.files import check_output
        from ..core.urls import is_url

        inputs = [*paths]
        for s in discover(paths)[0]:
            if not is_url(s.path):
                with open_checkpoint(s.path) as c:
                    inputs += c.inputs
        check_output(output, inputs)
    with progress_bar(sys.stderr.isatty() if progress is None else progress, "steps") as bar:
        r = trend_report(paths, chunk_bytes, workers, bar, scheduler)
    if as_json:
        if output is None:
            emit_json(r)
            return
        from ..core.files import atomic_output
        from ..core.jsontext import write

        with atomic_output(output) as tmp, open(tmp, "w", encoding="utf-8") as f:
            write(r, f.write)
    elif fmt == "text":
        from ..render.trend import render_trend

        render_trend(r, console())
    else:
        from ..commands.common import write_out
        from ..render.trend import figures, trend_html, trend_markdown, write_trend

        if output is None:   # on stdout: HTML with its figures inside, markdown without figures (no file to link)
            write_out(trend_html(r, figures(r)) if fmt == "html" else trend_markdown(r, {}))
        else:
            for p in write_trend(r, str(output), fmt):
                print(f"wrote {p}", file=sys.stderr)
