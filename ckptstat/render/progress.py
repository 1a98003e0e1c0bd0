"""The progress bar the CLI draws for the library's `progress(done, total)` callbacks (bytes).

The library only reports numbers (analysis never prints); this draws them on stderr, so stdout stays
the report, and the bar is erased when the work ends.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .fmt import human_bytes

ProgressCallback = Callable[[int, int], None]


@contextmanager
def progress_bar(enabled: bool, label: str = "reading") -> Iterator[ProgressCallback | None]:
    """A `progress(done, total)` callback drawing a bar (bytes, throughput, time left) on stderr,
    or None when not `enabled`."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    # binary units, as the tables (fmt.human_bytes: GiB); rich's own speed column has decimal ones only
    bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(binary_units=True),
                   TextColumn("{task.fields[speed]}"), TimeRemainingColumn(), console=Console(stderr=True),
                   transient=True)
    task = bar.add_task(label, total=None, speed="")

    def update(done: int, total: int) -> None:
        # A URL's values come over the network: the bytes fetched so far beside the bytes read (docs/remote.md).
        src = sys.modules.get("ckptstat.sources")
        net = src.fetched() if src is not None else None
        text = f"{label} ({net['bytes'] / 2**20:,.1f} MiB over the network)" if net else label
        bar.update(task, completed=done, total=total, description=text)
        speed = bar.tasks[0].speed
        bar.update(task, speed=f"{human_bytes(speed)}/s" if speed else "")

    with bar:
        yield update
