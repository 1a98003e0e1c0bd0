"""Files of the other stores fsspec knows (s3://, gs://, az://, ...; docs/remote.md): read through the store's own file
object, and their errors as one line.

A file is opened once (`opened`: fsspec's `fs.open`, uncached, which asks the store for the file's size and version)
and each range is that file's ranged read (`read_range`: one ranged GetObject on S3). The store's file pins its ranges
to the version it found: s3fs sends each with `If-Match` the ETag, and an object overwritten between two ranges (a
training run saving to one key while `stats` reads it) is refused (`errors`), where `fs.cat_file`, which ckptstat
called before, read the next version's bytes after the last one's: a tensor of two versions' values.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..core.urls import redact
from ..errors import CheckpointError, FileNotFound
from .target import Target


def opened(t: Target) -> Any:
    """The store's file for `t` (its `size` said), for `read_range`."""
    with errors(t.url):
        return t.fs.open(t.path, "rb", cache_type="none")


def read_range(t: Target, f: Any, start: int, end: int) -> bytes:
    """Bytes [start, end) of the file `opened` returned: fsspec's buffered files' ranged read (no file position: safe
    from several threads), else (a filesystem whose files have none) `cat_file`."""
    if end <= start:
        return b""
    fetch = getattr(f, "_fetch_range", None)
    with errors(t.url):
        data: bytes = fetch(start, end) if fetch is not None else t.fs.cat_file(t.path, start=start, end=end)
    return data


@contextmanager
def errors(url: str) -> Iterator[None]:
    """fsspec filesystems' exceptions -> one line naming the URL."""
    try:
        yield
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise FileNotFound(redact(url), "not found") from None
    except PermissionError:
        raise CheckpointError(redact(url), "access denied (check the credentials for this store)") from None
    except Exception as e:  # noqa: BLE001 - botocore's, gcsfs'... errors, as one line
        if type(e).__name__ == "FileExpired":   # (s3fs: a range's If-Match failed, the object was replaced)
            raise CheckpointError(redact(url), "the file changed while it was read (the object is no longer the "
                                               "version its first range came from)") from None
        text = " ".join(str(e).split())[:120]
        raise CheckpointError(redact(url), f"cannot read ({type(e).__name__}{': ' + text if text else ''})") from None
