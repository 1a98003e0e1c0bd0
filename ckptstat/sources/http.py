"""HTTP(S) byte-range requests: their rules, and the aiohttp client on fsspec's HTTPFileSystem (docs/remote.md).

fsspec's own range fetch (`HTTPFile.async_fetch_range`) reads the start of a file a server sends whole
and cannot tell the caller the server ignored `Range`; ckptstat must refuse that case, stating the
size, unless --allow-full-download. So the GET is made here (or by sources/threaded.py), under these rules:

- `Range: bytes=a-b` with `Accept-Encoding: identity` (a compressed reply's length says nothing of
  the file's); 206 carries `Content-Range: bytes a-b/TOTAL`, which gives the file's size with the
  first request (no HEAD needed);
- 200 to a range request: the server ignored it. Accepted when the whole file is no more than the
  range asked from byte 0 (a small config.json); otherwise refused, or, with --allow-full-download,
  the body is spooled to a temporary file (counted against --limit remote_bytes as it arrives);
- 416 from a range past the end: the size from `Content-Range: bytes */TOTAL` (an empty file); a 416 whose TOTAL
  holds the range's start is an error, never read as a file ending there;
- 401/403/404: one line naming the URL; 429 and 5xx: retried with exponential backoff (Retry-After
  honoured, capped); timeouts and dropped connections: retried twice; each attempt counted, every
  attempt and wait within the command's deadline (`--limit remote_seconds`), a reply's status line and headers
  must all arrive within SETTINGS.read_timeout of the request, and its body must keep up SETTINGS.min_rate (a
  server trickling a byte at a time, in the headers or the body, is a timeout);
- redirects are followed here, one hop at a time, as far as sources/redirects.py's policy allows
  (same origin, the Hub's CDN, never file:// nor from a public host to an internal one);
  Authorization is dropped when a redirect leaves the origin;
- a reply longer than the range asked, or whose Content-Range or Content-Length claims more, is an
  error, read no further (a hostile server cannot make ckptstat buffer more than it asked for).
- a 206 shorter than the range asked although its Content-Range says the file goes on is an error, never
  taken for the file's end (a server sending one byte a reply made summary say "file is 83872 bytes, too
  short for a safetensors header");
- a reply with a Content-Encoding (gzip, br, ...) although identity was asked is an error before a byte
  of its body is read: aiohttp would inflate it (a 1 MB gzip body is 1 GiB of zeros, spooled to disk
  under --allow-full-download before this check existed).

A folder's listing page (`ls`) is one such GET, read whole up to PAGE_BYTES (a 200 without Content-Length, as a
server making the page sends it, included), its links read as fsspec's HTTPFileSystem read them (sources/pages.py `page_links`).

Two clients apply these rules. Every range GET is made by the calling thread with the standard library's http.client
(sources/threaded.py): a value read (`get` with `into`, sources/remote.py `Blob.read_into`) receives the body straight
into the caller's buffer (aiohttp's receive path on one thread bounded `stats` of a URL: docs/performance.md, "Remote:
a network's latency"), and a command that reads only ranges never imports aiohttp (~0.2-0.4 s of its start).
aiohttp, on fsspec's one event-loop thread, makes every GET with SETTINGS.threaded off.
The rules are written once, here, as plain functions both clients call: `decide` (what a status says: a redirect, a
retry, an error, a reply to read), `examine` (a reply's headers checked before its body: Content-Range,
Content-Length, Content-Encoding, 200, 416), `hop_headers` (Authorization dropped off the origin), `_Attempts`
(retries, backoff, Retry-After, the deadline, the counts), `_keep_up` (the minimum rate), `overlong` / `short` (a body
longer or shorter than announced), and `Slots` (at most SETTINGS.concurrency requests in flight to an origin, shared
by both clients); sources/redirects.py `check` decides every hop of a redirect for both.
"""
from __future__ import annotations

import asyncio
import functools
import math
import re
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urljoin

from ..core.switches import switches
from ..core.urls import credentials, redact
from ..errors import CheckpointError, FileNotFound
from ..version import __version__
from . import redirects
from .meter import METER, SETTINGS
from .pages import PAGE_BYTES, page_links, page_too_long

RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)")
_PIECE = 1 << 20


@dataclass
class Reply:
    body: bytes                      # bytes [start, start + len(body)) of the file
    total: int | None                # the file's size, when the server said it
    content_type: str = ""
    spooled: IO[bytes] | None = None  # the whole file, when the server ignored Range and that was allowed
    etag: str | None = None          # the file's version: its ETag, else its Last-Modified date (audit's resume key)
    filled: int = -1                 # a read into the caller's buffer: the bytes written there (body is then empty)
    final: str = ""                  # the URL that answered, when a redirect led elsewhere
    commit: str | None = None        # the Hub's X-Repo-Commit, said by a reply on the way (its resolve route's 302)


def status_error(url: str, status: int, reason: str, hint: str = "") -> CheckpointError:
    shown = redact(url)
    if status in (404, 410):
        return FileNotFound(shown, f"not found (HTTP {status})")
    if status in (401, 403):
        return CheckpointError(shown, f"access denied (HTTP {status} {reason}){hint}")
    return CheckpointError(shown, f"HTTP {status} {reason}".rstrip())


def version(headers: Any) -> str | None:
    """A reply's version of the file (RFC 9110 8.8): the ETag, else the Last-Modified date, else None."""
    etag, modified = headers.get("ETag"), headers.get("Last-Modified")
    return str(etag) if etag else f"last-modified: {modified}" if modified else None


def _retry_after(value: str | None, default: float) -> float:
    try:
        wait = float(value) if value else default
    except ValueError:   # an HTTP date: use our own backoff
        return default
    return min(max(wait, 0.0), SETTINGS.backoff_cap) if math.isfinite(wait) else default   # (`nan`: time.sleep refuses it)


class _Retry(Exception):
    """A status the server means as `try again` (429, 5xx): `last` says it, `wait` is its Retry-After."""

    def __init__(self, last: str, wait: float):
        super().__init__(last)
        self.last, self.wait = last, wait


# -- the policy both clients follow (aiohttp here, http.client in sources/threaded.py) ----------------------

def decide(ask: _Ask, here: str, status: int, reason: str, headers: Any) -> str | None:
    """What a reply's status says, before its body: the URL a redirect leads to (absolute; redirects.check decides
    whether it is followed), or None for a reply to read (2xx, 416); raises _Retry for 429 and 5xx, and the one-line
    error of any other status."""
    ask.commit = headers.get("X-Repo-Commit") or ask.commit   # (the Hub's resolve redirect says it: Blob._http)
    if 300 <= status < 400 and headers.get("Location"):
        there = str(headers["Location"]).strip()
        try:
            return urljoin(here, there)
        except ValueError:   # (an unclosed [IPv6 literal): redirects.check refuses it, naming it
            return there
    if status in RETRY_STATUS:
        raise _Retry(f"HTTP {status} {reason or ''}".rstrip(), _retry_after(headers.get("Retry-After"), SETTINGS.backoff))
    if status >= 300 and status != 416:
        raise status_error(ask.url, status, reason or "", ask.hint)
    return None


def hop_headers(first: str, there: str, headers: dict[str, str]) -> dict[str, str]:
    """The headers sent to `there`, a redirect's target while reading `first`: a token never leaves its origin."""
    if redirects.origin(there) != redirects.origin(first):
        return {k: v for k, v in headers.items() if k.lower() != "authorization"}
    return headers


@dataclass
class Head:
    """What a reply's headers say, checked (`examine`) before a byte of its body is read."""

    kind: str            # "empty" (416), "range" (206), "whole" (200: the small file from byte 0), "spool" (200, allowed),
                         # "page" (200: a listing page of unknown length)
    total: int | None    # the file's size, when the server said it
    ctype: str
    etag: str | None
    expected: int        # the body's bytes to read ("range", "whole"); "spool": Content-Length, or -1 when unknown;
                         # "page": the most it may hold


def examine(ask: _Ask, status: int, headers: Any) -> Head:
    """A 2xx or 416 reply's headers against the request (the module's rules): raises the one-line error of a reply
    refused from its headers (Content-Encoding, a Content-Range or Content-Length claiming more than asked, a range
    cut short, a server ignoring Range without --allow-full-download); else what the body holds."""
    url, start, end = ask.url, ask.start, ask.end
    ctype = str(headers.get("Content-Type", "")).partition(";")[0].strip()
    m = _CONTENT_RANGE.fullmatch(str(headers.get("Content-Range", "")).strip())
    total = int(m[3]) if m and m[3] != "*" else None
    etag = version(headers)
    if status == 416:
        if total is not None and start < total:   # (a range inside the file: no empty file's answer)
            raise CheckpointError(redact(url), f"the server answered a range request for bytes {start}-{end - 1} of "
                                               f"the {total:,}-byte file with 416 (range not satisfiable)")
        return Head("empty", total, ctype, etag, 0)
    coding = str(headers.get("Content-Encoding", "identity")).strip().lower()
    if coding not in ("", "identity"):   # asked for identity: a compressed body says nothing of the file's bytes
        raise CheckpointError(redact(url), f"the server answered a range request with Content-Encoding "
                                           f"{_quoted(headers.get('Content-Encoding'))} (identity was asked): its "
                                           "body is not the file's bytes")
    length = headers.get("Content-Length")
    length = int(length) if length is not None and str(length).isdigit() else None
    if status == 206:
        # The reply must be the range asked, or its head (the file ends sooner): a Content-Range or a
        # Content-Length claiming more is refused before a byte of the body is read.
        last = int(m[2]) if m is not None and m[1] is not None else -1
        if m is None or m[1] is None or int(m[1]) != start or not start <= last < end \
                or (total is not None and last >= total) or (length is not None and length != last - start + 1):
            raise CheckpointError(redact(url), f"the server answered a range request for bytes {start}-{end - 1} "
                                               f"with Content-Range {_quoted(headers.get('Content-Range'))} and "
                                               f"Content-Length {_quoted(headers.get('Content-Length'))}")
        if total is not None and last + 1 < min(end, total):   # not the file's end: the server cut the range
            raise CheckpointError(redact(url), f"the server answered a range request for bytes {start}-{end - 1} of "
                                               f"the {total:,}-byte file with bytes {start}-{last} only")
        return Head("range", total, ctype, etag, last - start + 1)
    # 200: the server sent the whole file.
    if start == 0 and length is not None and length <= end:
        return Head("whole", length, ctype, etag, length)
    if ask.page:   # (a listing made as it is sent: no Content-Length; a longer one is refused before its body)
        if length is not None:
            raise page_too_long(url)
        return Head("page", None, ctype, etag, end)
    if not switches().allow_full_download:
        size = f"{length:,} bytes" if length is not None else "of unknown size"
        raise CheckpointError(redact(url), f"the server ignores range requests: reading this file means downloading "
                                           f"all of it ({size}); pass --allow-full-download to do so")
    METER.count("full_downloads")
    return Head("spool", None, ctype, etag, length if length is not None else -1)


def overlong(url: str, expected: int) -> CheckpointError:
    """A body longer than the bytes asked for (read no further)."""
    return CheckpointError(redact(url), f"the server sent more than the {expected:,} bytes asked for")


def short(n: int, expected: int) -> str:
    """A body that ended before the bytes it announced: a dropped connection (retried)."""
    return f"the reply ended after {n:,} of {expected:,} bytes"


def spooled(url: str, n: int, expected: int) -> None:
    """A whole download (--allow-full-download) that ended other than its Content-Length said."""
    if expected >= 0 and n != expected:
        raise CheckpointError(redact(url), f"the download ended after {n:,} of {expected:,} bytes")


class _Attempts:
    """The retries of one range GET, for either client: 429/5xx up to SETTINGS.retries times, timeouts and dropped
    or refused connections up to SETTINGS.drop_retries times (a server that hangs up fails fast), each attempt counted
    (METER.request) and every attempt and every wait within the command's deadline (Meter.time_left)."""

    def __init__(self, url: str):
        self.url, self.delay, self.last, self.server, self.dropped = url, SETTINGS.backoff, "", 0, 0

    def start(self) -> float:
        """Count an attempt about to be made; the seconds it may take."""
        METER.request(self.url)
        return METER.time_left(self.url)

    def failed(self, e: BaseException) -> float:
        """After an attempt failed with e (a _Retry, a timeout, a connection error): the seconds to wait before the
        next, or the one-line error when none is left."""
        if isinstance(e, _Retry):
            self.last, wait, self.server = e.last, e.wait, self.server + 1
            over = self.server > SETTINGS.retries
        else:
            timed_out = isinstance(e, (TimeoutError, asyncio.TimeoutError))
            self.last = "timed out" if timed_out else f"connection failed ({type(e).__name__})"
            wait, self.dropped = self.delay, self.dropped + 1
            over = self.dropped > SETTINGS.drop_retries
        if over:
            raise CheckpointError(redact(self.url), f"{self.last}, after {self.server + self.dropped} attempts") from None
        METER.count("retries")
        wait = min(wait, METER.time_left(self.url))
        self.delay = min(self.delay * 2, SETTINGS.backoff_cap)
        return wait


class _Waiter:
    __slots__ = ("handed", "wake")

    def __init__(self, wake: Callable[[], object]):
        self.wake, self.handed = wake, False


class Slots:
    """At most n holders at once, first come first served, from threads (`hold`) and from coroutines on an event loop
    (`async with`): one origin's requests in flight, counted across both clients. A released slot is handed to the
    first waiter (never free while one waits)."""

    def __init__(self, n: int):
        self._lock = threading.Lock()
        self._free = n
        self._queue: deque[_Waiter] = deque()

    def release(self) -> None:
        with self._lock:
            if not self._queue:
                self._free += 1
                return
            w = self._queue.popleft()
            w.handed = True
        w.wake()

    def _take(self, wake: Callable[[], object]) -> _Waiter | None:
        """A slot now (None), or the waiter queued for the next."""
        with self._lock:
            if self._free > 0 and not self._queue:
                self._free -= 1
                return None
            w = _Waiter(wake)
            self._queue.append(w)
            return w

    def _give_up(self, w: _Waiter) -> bool:
        """A waiter stops waiting: False when it was still queued (now removed), True when a slot was handed to it."""
        with self._lock:
            if not w.handed:
                self._queue.remove(w)
            return w.handed

    @contextmanager
    def hold(self, timeout: float) -> Iterator[None]:
        """A slot for the `with` block, from a thread; TimeoutError when none comes within timeout seconds."""
        event = threading.Event()
        w = self._take(event.set)
        if w is not None and not event.wait(max(timeout, 0.0)) and not self._give_up(w):
            raise TimeoutError("no request slot within the deadline")
        try:
            yield
        finally:
            self.release()

    async def __aenter__(self) -> None:
        loop = asyncio.get_running_loop()
        got: asyncio.Future[None] = loop.create_future()
        w = self._take(functools.partial(loop.call_soon_threadsafe, _resolve, got))
        if w is None:
            return
        try:
            await got
        except BaseException:   # cancelled (the attempt's deadline): a slot handed meanwhile goes to the next
            if self._give_up(w):
                self.release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self.release()


def _resolve(f: asyncio.Future[None]) -> None:
    if not f.done():
        f.set_result(None)


def user_agent(library: str) -> str:
    """The User-Agent both clients send: ckptstat's name and version, then the HTTP library's (a server that turns
    away requests without one, as some WAFs do, turns away neither the headers' reads nor the values')."""
    return f"ckptstat/{__version__} {library}"


async def _session(**kwargs: Any) -> Any:
    """fsspec's aiohttp session, its connections made to the addresses sources/redirects.py resolves and checks."""
    import aiohttp

    resolver: Any = _Resolver()   # (duck-typed: aiohttp's AbstractResolver is not imported with this module)
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=resolver),
                                 headers={"User-Agent": user_agent(f"aiohttp/{aiohttp.__version__}")}, **kwargs)


class _Resolver:
    """aiohttp's resolver (its AbstractResolver's two methods): `redirects.connectable`, so that a connection goes to
    the addresses the policy checked (a host a public one redirected to: public ones only, whatever DNS says next)."""

    async def resolve(self, host: str, port: int = 0, family: int = 0) -> list[dict[str, Any]]:
        # (asked as aiohttp's own ThreadedResolver asks: this family, addresses of families the machine has)
        found = await asyncio.to_thread(redirects.connectable, host, port, family, socket.AI_ADDRCONFIG)
        flags = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
        return [{"hostname": host, "host": address, "port": port, "family": f, "proto": 0, "flags": flags}
                for f, address in found]

    async def close(self) -> None:
        pass


class HttpTransport:
    """Range GETs under one policy: made by the calling thread with sources/threaded.py's http.client (the default), or
    on fsspec's HTTPFileSystem (its event loop and aiohttp session) with SETTINGS.threaded off; folder listings
    (`ls`) the same way. aiohttp and fsspec are imported on their first use: a command that only reads ranges never
    imports them (~0.2-0.4 s of every remote command's start, docs/performance.md)."""

    def __init__(self, threaded: Callable[[Callable[[str], Slots]], Any] | None = None) -> None:
        """`threaded`: the threaded client's class, made from `slot` on the first request (sources/remote.py hands
        it sources/threaded.py's ThreadedClient, which imports this module: none here); None, aiohttp for every GET."""
        self._slots: dict[tuple[str, str, int], Slots] = {}
        self._lock = threading.Lock()
        self._threaded = threaded
        self._threads: Any = None   # the threaded client, made on the first request
        self._fs: Any = None        # fsspec's HTTPFileSystem, made on the first aiohttp request

    @property
    def fs(self) -> Any:
        with self._lock:
            if self._fs is None:
                import aiohttp
                from fsspec.implementations.http import HTTPFileSystem

                timeout = aiohttp.ClientTimeout(total=None, sock_connect=SETTINGS.connect_timeout,
                                                sock_read=SETTINGS.read_timeout)
                # aiohttp follows no redirect: the policy (sources/redirects.py) is applied here only. (aiohttp's
                # session does not read proxies from the environment: trust_env is False, fsspec leaves it so; the
                # threaded client uses none either.)
                self._fs = HTTPFileSystem(skip_instance_cache=True, client_kwargs={"timeout": timeout},
                                          allow_redirects=False, get_client=_session)
            return self._fs

    def slot(self, url: str) -> Slots:
        """Held while one request to url's origin is in flight (each hop of a redirect its own), by either client: at
        most SETTINGS.concurrency requests at once to a host, however the callers nest. Per host, so that the Hub's
        resolve requests (answered with a redirect) do not hold the CDN's slots: the resolves of the next files
        go out while the CDN answers the last ones."""
        key = redirects.origin(url)
        with self._lock:
            if key not in self._slots:
                self._slots[key] = Slots(SETTINGS.concurrency)
            return self._slots[key]

    def get(self, url: str, start: int, end: int, headers: dict[str, str] | None = None, hint: str = "",
            hosts: tuple[str, ...] = (), into: memoryview | None = None, page: bool = False) -> Reply:
        """Bytes [start, end) of `url`; `hosts`: other hosts a redirect may lead to (sources/redirects.py). With
        `into` (end - start bytes, a value read), the body is written there as it arrives, not joined into a bytes
        object and copied again: the reply's body is then empty and `filled` says how many bytes came (a spooled
        whole download aside). `page`: a folder's listing page (`ls`). Made on this thread by sources/threaded.py's
        client (SETTINGS.threaded), else on aiohttp's event loop."""
        from ..core.files import external_allowed

        headers = dict(headers or {})
        url = credentials(url, headers)
        ask = _Ask(url, start, end, headers, hint, hosts, external_allowed(), into, page)
        ask.headers.update({"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"})
        if SETTINGS.threaded and self._threaded is not None:
            with self._lock:
                if self._threads is None:
                    self._threads = self._threaded(self.slot)
            reply: Reply = self._threads.get(ask)
        else:
            from fsspec.asyn import sync

            reply = sync(self.fs.loop, self._get, ask)
        reply.commit = ask.commit
        return reply

    def ls(self, url: str) -> list[str]:
        """The links of a folder URL's listing page, as full URLs (`page_links`). The page is fetched as a file's
        bytes are, under the same rules (redirects as the policy allows, retries, the deadline and the minimum rate,
        identity encoding) and read whole up to PAGE_BYTES: fsspec's HTTPFileSystem.ls, which read it before, took a
        body of any length, inflated gzip, followed no deadline, and asked twice when a page held no link."""
        reply = self.get(url, 0, PAGE_BYTES, page=True)
        if reply.total is not None and reply.total > len(reply.body):   # (a 206: the page goes on past PAGE_BYTES)
            raise page_too_long(url)
        if reply.final:   # (its links are another folder's: under none of this one's names)
            raise CheckpointError(redact(url), f"the folder's listing page redirects to {redact(reply.final)}: "
                                               "name that folder")
        return page_links(url, reply.body, reply.content_type)

    async def _get(self, ask: _Ask) -> Reply:
        """One range GET, retried as `_Attempts` says, each attempt within the deadline (asyncio.wait_for)."""
        import aiohttp

        session = await self.fs.set_session()
        tries = _Attempts(ask.url)
        while True:
            left = tries.start()
            try:
                return await asyncio.wait_for(self._attempt(session, ask), left)
            except (_Retry, aiohttp.ClientError, asyncio.TimeoutError) as e:
                wait = tries.failed(e)
            await asyncio.sleep(wait)

    async def _attempt(self, session: Any, ask: _Ask) -> Reply:
        """One attempt: the GET and the redirects the policy allows, one hop at a time."""
        here, headers, t0 = ask.url, ask.headers, time.monotonic()
        for _ in range(redirects.MAX_REDIRECTS + 1):
            try:
                async with self.slot(here):   # the status line and headers within read_timeout (the module doc)
                    r = await asyncio.wait_for(session.get(here, headers=headers, allow_redirects=False),
                                               SETTINGS.read_timeout)
                    async with r:
                        there = decide(ask, here, r.status, r.reason or "", r.headers)
                        if there is None:
                            reply = await self._reply(r, ask, t0)
                            reply.final = here if here != ask.url else ""
                            return reply
            except redirects.Rebound as e:
                raise redirects.rebound(ask.url, here, e) from None
            await redirects.check(ask.url, here, there, ask.hosts, ask.allow_external)
            headers, here = hop_headers(ask.url, there, headers), there
        raise CheckpointError(redact(ask.url), f"more than {redirects.MAX_REDIRECTS} redirects")

    async def _reply(self, r: Any, ask: _Ask, t0: float) -> Reply:
        url, h = ask.url, examine(ask, r.status, r.headers)
        if h.kind == "empty":
            return Reply(b"", h.total, h.ctype, etag=h.etag)
        if h.kind == "range" and ask.into is not None:
            n = await self._read_into(r, url, h.expected, t0, ask.into)
            return Reply(b"", h.total, h.ctype, etag=h.etag, filled=n)
        if h.kind in ("range", "whole"):
            return Reply(await self._read(r, url, h.expected, t0), h.total, h.ctype, etag=h.etag)
        if h.kind == "page":
            page = bytearray()
            if await self._receive(r, url, t0, page.extend, h.expected) > h.expected:
                raise page_too_long(url)
            return Reply(bytes(page), None, h.ctype, etag=h.etag)
        spool = tempfile.TemporaryFile()
        try:
            n = await self._receive(r, url, t0, spool.write, h.expected)
            spooled(url, n, h.expected)
        except BaseException:
            spool.close()
            raise
        spool.seek(0)
        return Reply(b"", n, h.ctype, spool, h.etag)

    async def _receive(self, r: Any, url: str, t0: float, write: Callable[[bytes], object], most: int) -> int:
        """A body of unknown length (or one read whole), each piece handed to `write` as it arrives, by the minimum
        rate, to its end or until past `most` bytes (-1: no bound); the bytes read."""
        n = 0
        while piece := await r.content.read(_PIECE):
            write(piece)
            n += len(piece)
            METER.received(url, len(piece))
            _keep_up(t0, n)
            if 0 <= most < n:
                break
        return n

    async def _read(self, r: Any, url: str, expected: int, t0: float) -> bytes:
        """Exactly the body the reply announced, `expected` bytes (never more), in bounded pieces, at no less
        than SETTINGS.min_rate: a body that ends short is a dropped connection (retried)."""
        import aiohttp

        pieces, n = [], 0
        while piece := await r.content.read(min(_PIECE, expected + 1 - n)):
            pieces.append(piece)
            n += len(piece)
            METER.received(url, len(piece))
            if n > expected:
                raise overlong(url, expected)
            _keep_up(t0, expected)
        if n < expected:
            raise aiohttp.ClientPayloadError(short(n, expected))
        return b"".join(pieces)   # (one copy: a 16 MiB chunk of values is not grown and copied again)

    async def _read_into(self, r: Any, url: str, expected: int, t0: float, into: memoryview) -> int:
        """_read's checks, the body written into `into` as aiohttp hands it over (its own buffers, one copy)."""
        import aiohttp

        n = 0
        while piece := await r.content.readany():
            METER.received(url, len(piece))
            if n + len(piece) > expected:
                raise overlong(url, expected)
            into[n:n + len(piece)] = piece
            n += len(piece)
            _keep_up(t0, expected)
        if n < expected:
            raise aiohttp.ClientPayloadError(short(n, expected))
        return n


@dataclass
class _Ask:
    """One range request: what to fetch, and where its redirects may lead."""

    url: str
    start: int
    end: int
    headers: dict[str, str]   # the caller's, with Range and Accept-Encoding: identity (HttpTransport.get)
    hint: str
    hosts: tuple[str, ...]
    allow_external: bool
    into: memoryview | None = None   # where a value read's body goes (HttpTransport.get)
    page: bool = False               # a listing page: a 200 of unknown length is read to its end, at most `end` bytes
    commit: str | None = None        # the last X-Repo-Commit a reply said (`decide`)


def keep_up_by(t0: float, n: int) -> float:
    """When a reply of n bytes started at t0 must have ended: read_timeout + n / min_rate seconds after (`_keep_up`)."""
    return t0 + SETTINGS.read_timeout + n / SETTINGS.min_rate


def _keep_up(t0: float, n: int) -> None:
    """A reply of n bytes may take read_timeout + n / min_rate seconds: a server trickling a byte at a time
    (never silent for read_timeout, which is all aiohttp's sock_read sees) is a timeout."""
    if time.monotonic() > keep_up_by(t0, n):
        raise asyncio.TimeoutError


def _quoted(v: object) -> str:
    return ascii(str(v)[:80]) if v is not None else "(none)"
