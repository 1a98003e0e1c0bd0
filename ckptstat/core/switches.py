"""The process's reading switches: the CLI's global options `--allow-external`, `--allow-full-download` and
`--pickled-objects`, each off by default. One record, read where each switch is used, set whole by the CLI (and put
back whole for in-process callers), and handed whole to the processes that read for this one (audit's workers, local
or on Dask: analysis/audit `settings`).

Python callers set them as the CLI does: `set_switches(Switches(pickled_objects=True))`, or for a block of code
`with switched(pickled_objects=True): ...`."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Switches:
    allow_external: bool = False       # read what a file points to outside what the user named (core/files.py Scope)
    allow_full_download: bool = False  # download whole a URL whose server ignores range requests (sources/http.py)
    pickled_objects: bool = False      # read whole pickled objects as inert records (formats/torch/pickled_objects.py)


_current = Switches()


def switches() -> Switches:
    return _current


def set_switches(new: Switches) -> None:
    global _current
    _current = new


@contextmanager
def switched(**changes: bool) -> Iterator[Switches]:
    """The switches with `changes` for the block, then as they were."""
    old = _current
    set_switches(replace(old, **changes))
    try:
        yield _current
    finally:
        set_switches(old)
