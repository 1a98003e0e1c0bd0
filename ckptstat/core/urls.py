"""Paths that are URLs (`https://`, `hf://`, `s3://`, ...): how the core I/O entry points hand them to
the remote source (`ckptstat/sources/`, docs/remote.md) without importing it.

The core sits below the sources layer, so it cannot import them: `ckptstat.sources` installs its
`Backend` here when it is imported (formats/registry.py imports it the first time a URL is opened),
and `open_regular`, `file_size`, `read_bytes` and the folder helpers ask `backend()` for a URL.
"""
from __future__ import annotations

import base64
import contextvars
import os
import posixpath
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Protocol, TypeVar
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from ..errors import UsageError

# A scheme of two or more letters (a Windows drive `C:\` is a path, not a URL) then `://`.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
T = TypeVar("T")
R = TypeVar("R")


def is_url(path: object) -> bool:
    return isinstance(path, str) and bool(_URL.match(path))


def scheme(url: str) -> str:
    return url.split("://", 1)[0].lower()


def parent(url: str) -> str:
    """The URL's folder (no trailing slash): `https://h/a/b.json` -> `https://h/a`."""
    head, _, rest = url.partition("://")
    rest = rest.split("?", 1)[0].rstrip("/")
    folder = posixpath.dirname(rest)
    return f"{head}://{folder or rest}"


def join(folder: str, name: str) -> str:
    return folder.rstrip("/") + "/" + name


# Characters no part of a file's URL may hold: the C0 controls and DEL. URL parsers drop a tab, CR or LF wherever it
# stands (the WHATWG URL standard; yarl, which both clients encode with), so a link `.<TAB>.` was requested as `..`.
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def under(url: str, folder: str) -> bool:
    """Whether `url` names a file under the folder URL `folder` as a server reads it: every part of the rest, once
    percent-decoded, a plain name (never `.` or `..`, no `/` or `\\`: a server decodes an index's shard `..%2Fb%2Fx`,
    the client itself resolves `%2E%2E`; no control character: a client drops a tab or a newline, `.%09.` is `..`),
    and no query or fragment (a shard `x?y` is not the file a loader reads)."""
    prefix = folder.rstrip("/") + "/"
    rest = url[len(prefix):]
    if not url.startswith(prefix) or "?" in rest or "#" in rest or _CONTROL.search(rest):
        return False
    parts = [unquote(p) for p in rest.split("/")]
    return all(p not in ("", ".", "..") and not any(c in p for c in "/\\") and not _CONTROL.search(p) for p in parts)


def basename(url: str) -> str:
    return posixpath.basename(url.split("://", 1)[-1].split("?", 1)[0].rstrip("/"))


def download_name(url: str) -> str:
    """The name a download of `url` is saved and loaded under: its basename, and for http(s) without its fragment,
    which no client sends (torch.hub's load_state_dict_from_url names the file by the URL's path alone)."""
    return basename(url.split("#", 1)[0] if scheme(url) in ("http", "https") else url)


def file_name(path: str) -> str:
    """The last part of a local path or a URL (its query left out): the name a loader goes by."""
    return basename(path) if is_url(path) else os.path.basename(path)


def redact(url: str) -> str:
    """The URL as printed: user:password@ and the query string (a presigned URL's signature) removed."""
    head, sep, rest = url.partition("://")
    if not sep:
        return url
    host, slash, path = rest.partition("/")
    host = host.rpartition("@")[2]
    return f"{head}://{host}{slash}{path.split('?', 1)[0]}" + ("?..." if "?" in path else "")


def _basic(parts: SplitResult) -> str:
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


def _bare(parts: SplitResult) -> str:
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


# The folder URLs (each ending in `/`) whose `user:password@` a URL the user named carried (`named`) -> the Basic
# Authorization of every request under the folder (`credentials`).
_LOGINS: dict[str, str] = {}


def named(url: str) -> str:
    """An http(s) URL the user named (a command's argument, a line of audit's `@list.txt`) as ckptstat names it from
    then on: without its `user:password@`, which is kept as the Basic Authorization of the requests under the URL's
    folder (`credentials`). A report's path, an audit record and an error line name the URL as given: with the
    password in them they printed it (docs/remote.md, "Conventions")."""
    try:
        parts = urlsplit(url) if scheme(url) in ("http", "https") else None
    except ValueError:   # (a port that is no number: the request says so)
        return url
    if parts is None or parts.username is None:
        return url
    bare = _bare(parts)
    path = bare.split("?", 1)[0]
    _LOGINS[path if path.endswith("/") else parent(path) + "/"] = _basic(parts)
    return bare


def forget_logins() -> None:
    _LOGINS.clear()


def logins() -> dict[str, str]:
    """The logins `named` kept, for tasks run in other processes (analysis/audit `settings`)."""
    return dict(_LOGINS)


def set_logins(kept: dict[str, str]) -> None:
    _LOGINS.clear()
    _LOGINS.update(kept)


def credentials(url: str, headers: dict[str, str]) -> str:
    """`url` without its `user:password@`, which becomes the request's Basic Authorization (as aiohttp and curl send
    it: sources/threaded.py's client sent none) unless the caller set one; a URL without one, the Authorization of
    the nearest folder `named` kept one for. sources/http.py hop_headers drops it off the origin."""
    parts = urlsplit(url)
    if any(k.lower() == "authorization" for k in headers):
        pass
    elif parts.username is not None:
        headers["Authorization"] = _basic(parts)
    else:
        folder = max((f for f in _LOGINS if url.startswith(f)), key=len, default=None)
        if folder is not None:
            headers["Authorization"] = _LOGINS[folder]
    return url if parts.username is None else _bare(parts)


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+://[^\s'\"<>]*")


def redact_text(text: str) -> str:
    """A library's error message with every URL in it redacted (huggingface_hub's and http.client's name the URL
    they were sent to: a redirect's target, its signature in the query)."""
    return _URL_IN_TEXT.sub(lambda m: redact(m[0]), text)


class Backend(Protocol):
    """What the core asks of the remote source."""

    def open(self, url: str, what: str = "") -> IO[bytes]: ...
    def size(self, url: str, what: str = "") -> int: ...
    def kind(self, url: str) -> str | None: ...          # "file", "directory" or None (absent)
    def listdir(self, url: str) -> list[str]: ...        # names of the files in a folder URL
    def why_absent(self, url: str) -> str: ...           # what the store said of a URL `kind` found missing
    def forget_ahead(self) -> None: ...                  # let go of the reads ahead no read took (core/io.py read_ahead)
    @property
    def concurrency(self) -> int: ...                    # requests it lets one command have in flight


_backend: Backend | None = None


def install(b: Backend) -> None:
    global _backend
    _backend = b


def backend() -> Backend:
    if _backend is None:   # formats/registry.py imports ckptstat.sources before it opens a URL
        raise UsageError("reading a URL: the remote source is not loaded (open it with open_checkpoint)")
    return _backend


def forget_ahead() -> None:
    """Let go of the values read ahead that no read took (core/io.py `read_ahead`), once their requests end."""
    if _backend is not None:
        _backend.forget_ahead()


def concurrently(fn: Callable[[T], R], items: Iterable[T], at_once: int | None = None,
                 weight: Callable[[T], int] | None = None, budget: int = 0) -> Iterator[R]:
    """fn(item) for each item, in items' order, with at most `at_once` calls running (default: the remote
    source's concurrency), each in a copy of the caller's context (core/files.py's scope): the round trips of
    URL reads overlap (a sharded checkpoint's shards opened together; `stats` of a URL reading tensors ahead)
    while memory stays bounded by `at_once` calls and, with `weight` (the bytes a call holds while it runs),
    by `budget` bytes: an item is started once the items started and not yet handed back weigh at most `budget`
    with it (or none is). The first error in items' order is raised, as a loop would raise it. When the caller
    stops, the calls already submitted (always the same ones: which items start depends only on how many were
    handed back, never on timing) run to their end, none is cancelled: a failing command makes the same
    requests on every run (an audit record's `fetched` is the same bits locally and on a cluster)."""
    width = at_once or backend().concurrency
    pool = ThreadPoolExecutor(max_workers=width)
    running: deque[tuple[Future[R], int]] = deque()
    held = 0
    try:
        for item in items:
            w = weight(item) if weight is not None else 0
            while running and (len(running) >= width or (budget and held + w > budget)):
                done, dw = running.popleft()
                held -= dw
                yield done.result()
            running.append((pool.submit(contextvars.copy_context().run, fn, item), w))
            held += w
        while running:
            yield running.popleft()[0].result()
    finally:
        pool.shutdown(wait=True)
