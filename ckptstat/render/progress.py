"""The progress bar the CLI draws for the library's `progress(done, total)` callbacks (bytes).

The library only reports numbers (analysis never prints); this draws them on stderr, so stdout stays
the report, and the bar is erased when the work ends.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

ProgressCallback = Callable[[int, int], None]


@contextmanager
def progress_bar(enabled: bool, label: str = "reading") -> Iterator[ProgressCallback | None]:
    """A `progress(done, total)` callback drawing a bar (bytes, throughput, time left) on stderr,
    or None when not `enabled`."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    bar = Progress(TextColumn(label), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task(label, total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    with bar:
        yield update
