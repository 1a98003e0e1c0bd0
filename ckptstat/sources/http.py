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
- 401/403/404: one line naming the URL; 429, 5xx, timeouts and dropped connections: retried with
  exponential backoff (Retry-After honoured, capped), each attempt counted;
- redirects (the Hub's resolve URL -> its CDN) are followed by aiohttp, which drops Authorization
  when the redirect leaves the origin;
- a reply longer than the range asked is an error, read no further (a hostile server cannot make
  ckptstat buffer more than it asked for).
"""
from __future__ import annotations

import asyncio
import re
import tempfile
from dataclasses import dataclass
from typing import IO, Any

from ..core.urls import redact
from ..errors import CheckpointError, FileNotFound
from .meter import METER, SETTINGS

RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)")
_PIECE = 1 << 16


@dataclass
class Reply:
    body: bytes                      # bytes [start, start + len(body)) of the file
    total: int | None                # the file's size, when the server said it
    content_type: str = ""
    spooled: IO[bytes] | None = None  # the whole file, when the server ignored Range and that was allowed
    etag: str | None = None          # the file's version: its ETag, else its Last-Modified date (audit's resume key)


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


class HttpTransport:
    """Range GETs through one fsspec HTTPFileSystem (its event loop and aiohttp session)."""

    def __init__(self) -> None:
        import aiohttp
        from fsspec.implementations.http import HTTPFileSystem

        timeout = aiohttp.ClientTimeout(total=None, sock_connect=SETTINGS.connect_timeout, sock_read=SETTINGS.read_timeout)
        self.fs = HTTPFileSystem(skip_instance_cache=True, client_kwargs={"timeout": timeout})

    def get(self, url: str, start: int, end: int, headers: dict[str, str] | None = None, hint: str = "") -> Reply:
        from fsspec.asyn import sync

        reply: Reply = sync(self.fs.loop, self._get, url, start, end, dict(headers or {}), hint)
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

    async def _get(self, url: str, start: int, end: int, headers: dict[str, str], hint: str) -> Reply:
        import aiohttp

        session = await self.fs.set_session()
        headers.update({"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"})
        delay, last = SETTINGS.backoff, ""
        for attempt in range(SETTINGS.retries + 1):
            METER.request(url)
            wait = delay
            try:
                async with session.get(url, headers=headers, allow_redirects=True) as r:
                    if r.status in RETRY_STATUS:
                        last = f"HTTP {r.status} {r.reason or ''}".rstrip()
                        wait = _retry_after(r.headers.get("Retry-After"), delay)
                    elif r.status >= 400 and r.status != 416:
                        raise status_error(url, r.status, r.reason or "", hint)
                    else:
                        return await self._reply(r, url, start, end)
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                last = "timed out" if isinstance(e, asyncio.TimeoutError) else f"connection failed ({type(e).__name__})"
            if attempt < SETTINGS.retries:
                METER.retries += 1
                await asyncio.sleep(wait)
                delay = min(delay * 2, SETTINGS.backoff_cap)
        raise CheckpointError(redact(url), f"{last}, after {SETTINGS.retries + 1} attempts")

    async def _reply(self, r: Any, url: str, start: int, end: int) -> Reply:
        ctype = str(r.headers.get("Content-Type", "")).partition(";")[0].strip()
        m = _CONTENT_RANGE.fullmatch(str(r.headers.get("Content-Range", "")).strip())
        total = int(m[3]) if m and m[3] != "*" else None
        etag = version(r.headers)
        if r.status == 416:
            return Reply(b"", total, ctype, etag=etag)
        length = r.headers.get("Content-Length")
        length = int(length) if length is not None and str(length).isdigit() else None
        if r.status == 206:
            if m is None or m[1] is None or int(m[1]) != start:
                raise CheckpointError(redact(url), f"the server answered a range request for bytes {start}-{end - 1} "
                                                   f"with Content-Range {r.headers.get('Content-Range')!r}")
            body = await self._read(r, url, int(m[2]) - start + 1)
            return Reply(body, total, ctype, etag=etag)
        # 200: the server sent the whole file.
        if start == 0 and length is not None and length <= end:
            return Reply(await self._read(r, url, length), length, ctype, etag=etag)
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
            if length is not None and n != length:
                raise CheckpointError(redact(url), f"the download ended after {n:,} of {length:,} bytes")
        except BaseException:
            spool.close()
            raise
        spool.seek(0)
        return Reply(b"", n, ctype, spool, etag)

    async def _read(self, r: Any, url: str, expected: int) -> bytes:
        """Exactly the body the reply announced, at most `expected` bytes (never more)."""
        out = bytearray()
        while piece := await r.content.read(min(_PIECE, expected + 1 - len(out))):
            out += piece
            METER.received(url, len(piece))
            if len(out) > expected:
                raise CheckpointError(redact(url), f"the server sent more than the {expected:,} bytes asked for")
        return bytes(out)
