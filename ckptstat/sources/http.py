"""HTTP(S) byte-range requests, on the aiohttp session of fsspec's HTTPFileSystem (docs/remote.md).

fsspec's own range fetch (`HTTPFile.async_fetch_range`) reads the start of a file a server sends whole
and cannot tell the caller the server ignored `Range`; ckptstat must refuse that case, stating the
size, unless --allow-full-download. So the GET is made here, on the same session fsspec manages:

- `Range: bytes=a-b` with `Accept-Encoding: identity` (a compressed reply's length says nothing of
  the file's); 206 carries `Content-Range: bytes a-b/TOTAL`, which gives the file's size with the
  first request (no HEAD needed);
- 200 to a range request: the server ignored it. Accepted when the whole file is no more than the
  range asked from byte 0 (a small config.json); otherwise refused, or, with --allow-full-download,
  the body is spooled to a temporary file (counted against --limit remote_bytes as it arrives);
- 416 from a range past the end: the size from `Content-Range: bytes */TOTAL` (an empty file);
- 401/403/404: one line naming the URL; 429 and 5xx: retried with exponential backoff (Retry-After
  honoured, capped); timeouts and dropped connections: retried twice; each attempt counted, every
  attempt and wait within the command's deadline (`--limit remote_seconds`), and a reply must keep up
  SETTINGS.min_rate (a server trickling a byte at a time is a timeout);
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
"""
from __future__ import annotations

import asyncio
import re
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Any

from ..core.urls import redact
from ..errors import CheckpointError, FileNotFound
from . import redirects
from .meter import METER, SETTINGS

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
        return min(max(float(value), 0.0), SETTINGS.backoff_cap) if value else default
    except ValueError:   # an HTTP date: use our own backoff
        return default


class _Retry(Exception):
    """A status the server means as `try again` (429, 5xx): `last` says it, `wait` is its Retry-After."""

    def __init__(self, last: str, wait: float):
        super().__init__(last)
        self.last, self.wait = last, wait


class HttpTransport:
    """Range GETs through one fsspec HTTPFileSystem (its event loop and aiohttp session)."""

    def __init__(self) -> None:
        import aiohttp
        from fsspec.implementations.http import HTTPFileSystem

        timeout = aiohttp.ClientTimeout(total=None, sock_connect=SETTINGS.connect_timeout, sock_read=SETTINGS.read_timeout)
        # listings (fsspec's ls) follow no redirect either: the policy (sources/redirects.py) is applied here only
        self.fs = HTTPFileSystem(skip_instance_cache=True, client_kwargs={"timeout": timeout}, allow_redirects=False)
        self._slots: dict[tuple[str, str, int], asyncio.Semaphore] = {}   # (touched on fsspec's loop only)

    def _slot(self, url: str) -> asyncio.Semaphore:
        """Held while one request to url's origin is in flight (each hop of a redirect its own): at most
        SETTINGS.concurrency requests at once to a host, however the callers nest. Per host, so that the Hub's
        resolve requests (answered with a redirect) do not hold the CDN's slots: the resolves of the next files
        go out while the CDN answers the last ones."""
        key = redirects.origin(url)
        if key not in self._slots:
            self._slots[key] = asyncio.Semaphore(SETTINGS.concurrency)
        return self._slots[key]

    def get(self, url: str, start: int, end: int, headers: dict[str, str] | None = None, hint: str = "",
            hosts: tuple[str, ...] = (), into: memoryview | None = None) -> Reply:
        """Bytes [start, end) of `url`; `hosts`: other hosts a redirect may lead to (sources/redirects.py). With
        `into` (end - start bytes, a value read), a 206's body is written there as it arrives, not joined into a
        bytes object and copied again: the reply's body is then empty and `filled` says how many bytes came."""
        from fsspec.asyn import sync

        from ..core.files import external_allowed

        ask = _Ask(url, start, end, dict(headers or {}), hint, hosts, external_allowed(), into)
        reply: Reply = sync(self.fs.loop, self._get, ask)
        return reply

    def ls(self, url: str) -> list[str]:
        """The links of a folder URL's listing page (fsspec's HTTPFileSystem.ls), as full URLs."""
        METER.request(url)
        try:
            found = self.fs.ls(url, detail=False)
        except FileNotFoundError:
            raise FileNotFound(redact(url), "not found (no listing)") from None
        except Exception as e:  # noqa: BLE001 - aiohttp's and fsspec's errors, turned into one line
            raise CheckpointError(redact(url), f"cannot list the folder ({type(e).__name__})") from None
        return [str(u) for u in found]

    async def _get(self, ask: _Ask) -> Reply:
        """One range GET, retried: 429/5xx up to SETTINGS.retries times, timeouts and dropped or refused
        connections up to SETTINGS.drop_retries times (a server that hangs up fails fast); every attempt and
        every wait within the command's deadline (Meter.time_left)."""
        import aiohttp

        session = await self.fs.set_session()
        ask.headers.update({"Range": f"bytes={ask.start}-{ask.end - 1}", "Accept-Encoding": "identity"})
        delay, last, server, dropped = SETTINGS.backoff, "", 0, 0
        while True:
            METER.request(ask.url)
            wait = delay
            try:
                return await asyncio.wait_for(self._attempt(session, ask), METER.time_left(ask.url))
            except _Retry as e:
                last, wait, server = e.last, e.wait, server + 1
                if server > SETTINGS.retries:
                    break
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                last = "timed out" if isinstance(e, asyncio.TimeoutError) else f"connection failed ({type(e).__name__})"
                dropped += 1
                if dropped > SETTINGS.drop_retries:
                    break
            METER.retries += 1
            await asyncio.sleep(min(wait, METER.time_left(ask.url)))
            delay = min(delay * 2, SETTINGS.backoff_cap)
        raise CheckpointError(redact(ask.url), f"{last}, after {server + dropped} attempts")

    async def _attempt(self, session: Any, ask: _Ask) -> Reply:
        """One attempt: the GET and the redirects the policy allows, one hop at a time."""
        from urllib.parse import urljoin

        here, headers, t0 = ask.url, ask.headers, time.monotonic()
        for _ in range(redirects.MAX_REDIRECTS + 1):
            async with self._slot(here), session.get(here, headers=headers, allow_redirects=False) as r:
                if 300 <= r.status < 400 and r.headers.get("Location"):
                    there = urljoin(here, str(r.headers["Location"]).strip())
                elif r.status in RETRY_STATUS:
                    raise _Retry(f"HTTP {r.status} {r.reason or ''}".rstrip(), _retry_after(r.headers.get("Retry-After"),
                                                                                          SETTINGS.backoff))
                elif r.status >= 300 and r.status != 416:
                    raise status_error(ask.url, r.status, r.reason or "", ask.hint)
                else:
                    return await self._reply(r, ask, t0)
            await redirects.check(ask.url, here, there, ask.hosts, ask.allow_external)
            if redirects.origin(there) != redirects.origin(ask.url):   # a token never leaves its origin
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            here = there
        raise CheckpointError(redact(ask.url), f"more than {redirects.MAX_REDIRECTS} redirects")

    async def _reply(self, r: Any, ask: _Ask, t0: float) -> Reply:
        url, start, end = ask.url, ask.start, ask.end
        ctype = str(r.headers.get("Content-Type", "")).partition(";")[0].strip()
        m = _CONTENT_RANGE.fullmatch(str(r.headers.get("Content-Range", "")).strip())
        total = int(m[3]) if m and m[3] != "*" else None
        etag = version(r.headers)
        if r.status == 416:
            return Reply(b"", total, ctype, etag=etag)
        coding = str(r.headers.get("Content-Encoding", "identity")).strip().lower()
        if coding not in ("", "identity"):   # asked for identity: a compressed body says nothing of the file's bytes
            raise CheckpointError(redact(url), f"the server answered a range request with Content-Encoding "
                                               f"{_quoted(r.headers.get('Content-Encoding'))} (identity was asked): its "
                                               "body is not the file's bytes")
        length = r.headers.get("Content-Length")
        length = int(length) if length is not None and str(length).isdigit() else None
        if r.status == 206:
            # The reply must be the range asked, or its head (the file ends sooner): a Content-Range or a
            # Content-Length claiming more is refused before a byte of the body is read.
            last = int(m[2]) if m is not None and m[1] is not None else -1
            if m is None or m[1] is None or int(m[1]) != start or not start <= last < end \
                    or (total is not None and last >= total) or (length is not None and length != last - start + 1):
                raise CheckpointError(redact(url), f"the server answered a range request for bytes {start}-{end - 1} "
                                                   f"with Content-Range {_quoted(r.headers.get('Content-Range'))} and "
                                                   f"Content-Length {_quoted(r.headers.get('Content-Length'))}")
            if total is not None and last + 1 < min(end, total):   # not the file's end: the server cut the range
                raise CheckpointError(redact(url), f"the server answered a range request for bytes {start}-{end - 1} of "
                                                   f"the {total:,}-byte file with bytes {start}-{last} only")
            if ask.into is not None:
                n = await self._read_into(r, url, last - start + 1, t0, ask.into)
                return Reply(b"", total, ctype, etag=etag, filled=n)
            body = await self._read(r, url, last - start + 1, t0)
            return Reply(body, total, ctype, etag=etag)
        # 200: the server sent the whole file.
        if start == 0 and length is not None and length <= end:
            return Reply(await self._read(r, url, length, t0), length, ctype, etag=etag)
        if not SETTINGS.allow_full_download:
            size = f"{length:,} bytes" if length is not None else "of unknown size"
            raise CheckpointError(redact(url), f"the server ignores range requests: reading this file means downloading "
                                               f"all of it ({size}); pass --allow-full-download to do so")
        METER.full_downloads += 1
        spool = tempfile.TemporaryFile()
        try:
            n = 0
            while piece := await r.content.read(_PIECE):
                spool.write(piece)
                n += len(piece)
                METER.received(url, len(piece))
                _keep_up(t0, n)
                if length is not None and n > length:
                    break
            if length is not None and n != length:
                raise CheckpointError(redact(url), f"the download ended after {n:,} of {length:,} bytes")
        except BaseException:
            spool.close()
            raise
        spool.seek(0)
        return Reply(b"", n, ctype, spool, etag)

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
                raise CheckpointError(redact(url), f"the server sent more than the {expected:,} bytes asked for")
            _keep_up(t0, expected)
        if n < expected:
            raise aiohttp.ClientPayloadError(f"the reply ended after {n:,} of {expected:,} bytes")
        return b"".join(pieces)   # (one copy: a 16 MiB chunk of values is not grown and copied again)

    async def _read_into(self, r: Any, url: str, expected: int, t0: float, into: memoryview) -> int:
        """_read's checks, the body written into `into` as aiohttp hands it over (its own buffers, one copy)."""
        import aiohttp

        n = 0
        while piece := await r.content.readany():
            METER.received(url, len(piece))
            if n + len(piece) > expected:
                raise CheckpointError(redact(url), f"the server sent more than the {expected:,} bytes asked for")
            into[n:n + len(piece)] = piece
            n += len(piece)
            _keep_up(t0, expected)
        if n < expected:
            raise aiohttp.ClientPayloadError(f"the reply ended after {n:,} of {expected:,} bytes")
        return n


@dataclass
class _Ask:
    """One range request: what to fetch, and where its redirects may lead."""

    url: str
    start: int
    end: int
    headers: dict[str, str]
    hint: str
    hosts: tuple[str, ...]
    allow_external: bool
    into: memoryview | None = None   # where a value read's body goes (HttpTransport.get)


def _keep_up(t0: float, n: int) -> None:
    """A reply of n bytes may take read_timeout + n / min_rate seconds: a server trickling a byte at a time
    (never silent for read_timeout, which is all aiohttp's sock_read sees) is a timeout."""
    if time.monotonic() - t0 > SETTINGS.read_timeout + n / SETTINGS.min_rate:
        raise asyncio.TimeoutError


def _quoted(v: object) -> str:
    return ascii(str(v)[:80]) if v is not None else "(none)"
