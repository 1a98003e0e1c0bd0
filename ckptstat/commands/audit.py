"""`audit`: every checkpoint under a root (or in a list), one record each, into a resumable results file."""
from __future__ import annotations

import sys
import time
from typing import Optional

import typer

from .common import console, emit_json


def audit(
    root: str = typer.Argument(..., help="A folder to walk, one checkpoint, a URL (https folder, hf://org/model[@rev], "
                               "hf://org, s3://bucket/prefix), or @list.txt (one path or URL per line)."),
    out: str = typer.Option(..., "--out", "-o", help="Results: JSON Lines, or Parquet when it ends .parquet (pyarrow)."),
    workers: int = typer.Option(1, "--workers", "-w", help="Local worker processes (0: one per CPU)."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Dask scheduler address (tcp://host:8786): "
                                            "run the tasks on that cluster (the `dask` extra)."),
    fresh: bool = typer.Option(False, "--fresh", help="Start over: ignore and replace the records already in --out."),
    values: bool = typer.Option(True, "--values/--headers-only", help="Compare the two stored copies of a declared tie "
                                "(bounded chunked reads); --headers-only leaves them 'unchecked'."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Progress bar on stderr "
                                            "(default: when a TTY)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of the table."),
) -> None:
    """Audit a fleet: per checkpoint its format, bytes, parameters, dtypes, buckets, ties verdict, scan
    verdict and config cross-check, one JSON line each; a re-run skips what is done (path, size, and mtime, or a
    URL's etag).

    Exit 0; 1 when any checkpoint is unsafe or of unknown safety, holds a file scan could not read, has broken ties,
    or could not be read, or the walk refused a path (a link out of the root or to a folder, a FIFO), as scan does."""
    import os

    from ..analysis.audit import run, summarize_records
    from ..analysis.audit.find import discover
    from ..analysis.audit.store import Writer, check_inputs, check_out, load
    from ..core.urls import is_url
    from ..errors import UsageError
    from ..formats.configs import find_config
    from ..render.audit import audit_progress, render_audit_summary

    if workers < 0:
        raise UsageError(f"--workers must be >= 0, got {workers}")
    if scheduler is not None and "://" not in scheduler:
        raise UsageError(f"--scheduler takes a scheduler address such as tcp://host:8786, got {scheduler!r}")
    check_out(out)
    t0 = time.perf_counter()
    units, skipped = discover(root)
    local = [u for u in units if not is_url(u.path)]   # (and the config.json each is read with: never overwritten)
    check_inputs(out, [root[1:] if root.startswith("@") else root, *(f for u in local for f in u.files),
                       *(find_config(u.path) for u in local)])
    done = {} if fresh else load(out)
    kept = {u.path: done[u.key] for u in units if u.key in done}
    todo = [u for u in units if u.key not in done]
    records = dict(kept)
    writer = Writer(out, fresh=fresh)
    try:
        show = sys.stderr.isatty() if progress is None else progress
        with audit_progress(show, len(todo), sum(u.bytes for u in todo)) as bar:
            cluster = None
            if scheduler:   # dask is imported only here (tests/test_layering.py)
                from ..analysis.audit.cluster import runner

                cluster = runner(scheduler)
            for rec in run(todo, workers or (os.cpu_count() or 1), values, bar, cluster):
                writer.write(rec)
                records[rec["path"]] = rec
    except BaseException:   # interrupted: what finished is in the JSON lines; a re-run resumes from them
        writer.close()
        raise
    order = [u.path for u in units if u.path in records]
    writer.close([records[p] for p in order])
    s = summarize_records([records[p] for p in order])
    info = {"audited": len(todo), "resumed": len(kept), "skipped": len(skipped), "refused": skipped.refused,
            "seconds": time.perf_counter() - t0}
    if as_json:
        emit_json({**s, "run": info})
    else:
        render_audit_summary(s, console(), info)
    if s["errors"] or s["unsafe"] or s["unknown"] or s["unreadable"] or s["broken_ties"] or skipped.refused:
        raise typer.Exit(1)
