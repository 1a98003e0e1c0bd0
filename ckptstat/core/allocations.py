"""A bound on what a C library may allocate while it reads a value whose size the file claims and ckptstat cannot check
first: libhdf5 allocates a variable-length string attribute's claimed length (a global heap object's, which h5py does
not expose) before it finds the bytes missing, so a 115 KB Keras `.h5` made it touch 4 GB (docs/security.md).

Within `bounded`, the process's address space may grow by at most `extra` bytes (RLIMIT_AS, its soft limit set for the
call and put back after): an allocation past it fails in the library, which reports it as an error. Where the bound
cannot be set (no RLIMIT_AS or /proc, another thread running that could meet it), the call runs unbounded.
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

try:
    import resource
except ImportError:   # pragma: no cover - not on Windows
    resource = None  # type: ignore[assignment]

STATM = "/proc/self/statm"


def _address_space() -> int | None:
    try:
        with open(STATM, "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def bounded(extra: int) -> Iterator[None]:
    """Run the block with the address space allowed to grow by `extra` bytes, where that can be set."""
    now = _address_space()
    if resource is None or now is None or threading.active_count() > 1:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = now + extra
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft != resource.RLIM_INFINITY and soft <= limit:   # (already as tight: left as it is)
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
