"""`ckptstat audit`: the progress bar (files/s and bytes/s, on stderr) and the summary table at the end.
Paths and errors come from the files audited: printed inert."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .fmt import human_bytes
from .names import Name, fit_names, safe

RecordCallback = Callable[[dict[str, Any]], None]


@contextmanager
def audit_progress(enabled: bool, files: int, total_bytes: int) -> Iterator[RecordCallback | None]:
    """A per-record callback drawing files done / to do, files/s and bytes/s on stderr; None when off."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("auditing"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                   TimeRemainingColumn(), console=Console(stderr=True), transient=True)
    task = bar.add_task("", total=files)
    t0 = time.monotonic()
    done = {"files": 0, "bytes": 0}

    def update(rec: dict[str, Any]) -> None:
        done["files"] += 1
        done["bytes"] += rec.get("bytes") or 0
        dt = max(time.monotonic() - t0, 1e-6)
        bar.update(task, completed=done["files"],
                   description=f"{done['files'] / dt:,.1f} files/s  {human_bytes(done['bytes'] / dt)}/s  "
                               f"({human_bytes(done['bytes'])} of {human_bytes(total_bytes)})")

    with bar:
        yield update


_STYLE = {"unsafe": "bold red", "broken": "bold red", "mismatch": "yellow", "error": "red", "unknown": "yellow",
          "unreadable": "yellow"}


def _counts(title: str, counts: dict[str, int]) -> Text:
    t = Text(f"{title:<8}")
    for i, (k, v) in enumerate(counts.items()):
        t.append(", " if i else "")
        t.append(f"{k} {v}", style=_STYLE.get(k, ""))
    return t


def render_audit_summary(s: dict[str, Any], console: Console, run: dict[str, Any] | None = None) -> None:
    head = (f"{s['records']} checkpoint{'' if s['records'] == 1 else 's'}, {human_bytes(s['bytes'])}, "
            f"{s['parameters']:,} parameters; {s['errors']} could not be read")
    if run:
        head += (f"  (this run: {run['audited']} audited, {run['resumed']} already done, {run['skipped']} files skipped; "
                 f"{run['seconds']:.1f} s)")
    console.print(head)
    for title in ("scan", "ties", "config"):
        console.print(_counts(title, s[title]))
    refused = (run or {}).get("refused", [])
    for title, paths in (("unsafe", s["unsafe"]), ("unknown safety", s.get("unknown", [])),
                         ("a file scan could not read", s.get("unreadable", [])), ("broken ties", s["broken_ties"]),
                         ("refused, not read", refused)):
        if paths:
            t = Table(title=f"{title} ({len(paths)})", box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
            t.add_column("path")
            for p in paths[:20]:
                t.add_row(Name(p))
            console.print(fit_names(t, console))
    if s["largest_discrepancies"]:
        t = Table(title="Largest drifts from the config: the model's parameters() - the file's", box=box.SIMPLE_HEAD,
                  title_justify="left", pad_edge=False)
        for c in ("path", "config's model", "missing", "unexpected", "shapes", "delta"):
            t.add_column(c, justify="left" if c in ("path", "config's model") else "right")
        for d in s["largest_discrepancies"]:
            t.add_row(Name(d["path"]), safe(d["what"]), str(d["missing"]), str(d["unexpected"]),
                      str(d["shape_mismatches"]), f"{d['delta']:+,}")
        console.print(fit_names(t, console))
    if s["error_examples"]:
        t = Table(title="Errors", box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
        t.add_column("error")
        for e in s["error_examples"]:
            t.add_row(safe(e["error"]))
        console.print(t)
