"""Where bytes come from: local files (core/files.py) and URLs read through fsspec (docs/remote.md).

Importing this package installs the remote source in core.urls, so that the core I/O entry points
(open_regular, file_size, read_bytes, ...) read https://, hf:// and s3:// URLs with range requests.
fsspec, aiohttp and huggingface_hub are imported only when a URL is opened (the `remote` extra).
"""
from __future__ import annotations

import os

from ..core import urls
from .meter import METER, SETTINGS, Meter
from .remote import BACKEND, Backend, RemoteFile

urls.install(BACKEND)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=BACKEND.after_fork)

__all__ = ["BACKEND", "METER", "SETTINGS", "Backend", "Meter", "RemoteFile", "fetched", "forget_files", "reset"]


def fetched() -> dict[str, int] | None:
    """What this process has fetched over the network (None: nothing), for --json's `fetched` object."""
    return METER.report() if METER.requests else None


def forget_files() -> None:
    """Forget the remote files' sizes and cached ranges and the hub's listings, keeping the counts: what
    follows is read cold (one audit task, docs/audit.md)."""
    import sys

    BACKEND.forget_files()
    hub = sys.modules.get(f"{__name__}.hub")
    if hub is not None:
        hub.forget()


def reset() -> None:
    """Forget every remote file's size and cached ranges, the hub's listings and the counts (a new command
    in the same process; tests)."""
    from . import hub

    BACKEND.forget()
    hub.forget()
    METER.reset()
