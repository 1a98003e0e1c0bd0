"""Range GETs on the calling threads, with the standard library's http.client (issue 35).

`stats` of a URL reads values in ranges of 1-16 MiB from several threads at once (core/urls.py `concurrently`,
sources/remote.py `Blob.read_into`). Through aiohttp every byte of them crossed fsspec's one event-loop thread (a
bytes object per socket read, the stream's buffers, then a copy into the chunk buffer), which bounded the wall time
(docs/performance.md, "Remote: a network's latency"). Here the calling thread makes the request itself and receives
the body with `recv_into` straight into the caller's buffer: no bytes object per read, no copy, no hop to another
thread (the GIL is released while it waits on the socket). Every other range GET (headers, windows, configs) goes
the same way, so a command that reads only ranges never imports aiohttp (sources/http.py `HttpTransport`).

The rules are sources/http.py's, called from there, none written twice: `decide` (status: redirect, retry, error),
`examine` (the headers checked before the body), `hop_headers`, `_Attempts` (retries, backoff, Retry-After, counts,
deadline), `keep_up_by` (the minimum rate), `overlong` / `short`, the origin's `Slots` (shared with aiohttp's
requests: SETTINGS.concurrency in flight to an origin across both clients), sources/redirects.py `check` (run on an
event loop of its own: `check_blocking`). What is this client's own:

- connections: a pool of idle keep-alive connections per origin (scheme, host, port), at most SETTINGS.concurrency
  kept; a connection goes back only after its reply was read to its end (a reply not read, refused, cut or failed:
  closed). A kept connection the server had closed meanwhile fails on its first use: the request is sent once more
  on a new connection (aiohttp does the same), not counted as an attempt;
- timeouts: SETTINGS.connect_timeout to connect (and the TLS handshake); the status line and headers all within
  SETTINGS.read_timeout of the request; every receive (each piece of the body) waits at most SETTINGS.read_timeout
  and never past the attempt's deadline:
  Meter.time_left when the attempt starts, brought forward to `keep_up_by` once the headers say the body's length
  (a trickling server is a timeout, as `_keep_up` makes it over aiohttp);
- TLS: `ssl.create_default_context()` (aiohttp's default: certificates verified, the host name checked), ALPN
  http/1.1 as aiohttp sets it; no proxies (aiohttp's session has trust_env=False: it reads none from the
  environment; http.client never does); no cookies (aiohttp's session keeps a server's Set-Cookie for its next
  requests; value reads send none);
- the URL encoded as aiohttp encodes it (yarl, aiohttp's URL type); `Host` from the URL; a User-Agent naming ckptstat
  and http.client (aiohttp's session names ckptstat and aiohttp: `user_agent`);
- connections go to the addresses sources/redirects.py `connect` resolves and checks (aiohttp's through the same
  resolution: a host a public one redirected to is reached at public addresses only);
- errors: a connection or TLS error, a malformed reply (http.client's HTTPException) or a timeout is a dropped
  connection (retried); anything else unexpected is one line naming the URL, never a traceback.
"""
from __future__ import annotations

import asyncio
import functools
import http.client
import io
import ssl
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core.urls import redact, redact_text
from ..errors import CheckpointError
from . import redirects
from .http import (
    _PIECE,
    Reply,
    Slots,
    _Ask,
    _Attempts,
    _Retry,
    decide,
    examine,
    hop_headers,
    keep_up_by,
    overlong,
    spooled,
    user_agent,
)
from .meter import METER, SETTINGS
from .pages import page_too_long

_BUFFER = 1 << 16   # a response's read buffer: the status line and headers; a body's pieces larger than it bypass it
_DRAIN = 1 << 16    # a reply not read (a redirect, a 429) with at most this Content-Length is read to its end, kept
_AGENT = user_agent("python-http.client/{}.{}".format(*sys.version_info[:2]))


class _Socket(io.RawIOBase):
    """A response's socket, each receive within the attempt's deadline: waits at most SETTINGS.read_timeout, never
    past `deadline` (time.monotonic()), which the reader may bring forward."""

    def __init__(self, sockio: Any, sock: Any, deadline: float):
        super().__init__()
        self.sockio, self.sock, self.deadline, self.limit = sockio, sock, deadline, deadline   # (limit: the attempt's)

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the reply did not arrive in time")
        self.sock.settimeout(min(SETTINGS.read_timeout, left))
        n: int = self.sockio.readinto(b)
        return n

    def close(self) -> None:
        if not self.closed:
            self.sockio.close()   # (socket.makefile's reference to the socket, which a response may own)
        super().close()


class _Response(http.client.HTTPResponse):
    """http.client's response, its reads through `_Socket` (the deadline) in a buffer of _BUFFER bytes."""

    def __init__(self, sock: Any, debuglevel: int = 0, method: str | None = None, url: str | None = None, *,
                 deadline: float = 0.0):
        super().__init__(sock, debuglevel, method, url)
        self.wire = _Socket(self.fp.detach(), sock, deadline)   # (nothing read yet: nothing buffered is lost)
        self.fp = io.BufferedReader(self.wire, _BUFFER)

    def _read_status(self) -> tuple[str, int, str]:
        """http.client's, an interim reply (1xx: 103 Early Hints, 102) passed over, its headers read, as http.client
        passes over a 100 and aiohttp any 1xx (RFC 9110 15.2): a 103 before the 206 was taken for the reply ("the
        server ignores range requests"; with --allow-full-download, "file is empty")."""
        while True:
            version, status, reason = super()._read_status()  # type: ignore[misc]
            if not 100 < status < 200 or status == 101:
                return version, status, reason
            http.client.parse_headers(self.fp)


class ThreadedClient:
    """Range GETs made by the calling thread (HttpTransport.get), through a pool of keep-alive connections per
    origin; `slot(url)` is the transport's (HttpTransport.slot), shared with its aiohttp requests."""

    def __init__(self, slot: Callable[[str], Slots]):
        self.slot = slot
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None

    def get(self, ask: _Ask) -> Reply:
        """One range GET (ask.headers carry Range and Accept-Encoding: identity), retried as `_Attempts` says."""
        try:
            tries = _Attempts(ask.url)
            while True:
                left = tries.start()
                try:
                    return self._attempt(ask, time.monotonic() + left)
                except (_Retry, OSError, http.client.HTTPException, asyncio.TimeoutError) as e:
                    wait = tries.failed(e)
                time.sleep(wait)
        except CheckpointError:
            raise
        except Exception as e:  # noqa: BLE001 - http.client's, ssl's, yarl's unexpected errors, as one line
            text = " ".join(redact_text(str(e)).split())[:120]
            raise CheckpointError(redact(ask.url), f"cannot read ({type(e).__name__}{': ' + text if text else ''})") \
                from None

    def _attempt(self, ask: _Ask, deadline: float) -> Reply:
        """One attempt: the GET and the redirects the policy allows, one hop at a time (HttpTransport._attempt's
        loop), within `deadline`."""
        here, headers, t0 = ask.url, ask.headers, time.monotonic()
        for _ in range(redirects.MAX_REDIRECTS + 1):
            with self.slot(here).hold(deadline - time.monotonic()):
                try:
                    reply, there = self._exchange(ask, here, headers, t0, deadline)
                except redirects.Rebound as e:
                    raise redirects.rebound(ask.url, here, e) from None
            if there is None:
                assert reply is not None
                reply.final = here if here != ask.url else ""
                return reply
            redirects.check_blocking(ask.url, here, there, ask.hosts, ask.allow_external)
            headers, here = hop_headers(ask.url, there, headers), there
        raise CheckpointError(redact(ask.url), f"more than {redirects.MAX_REDIRECTS} redirects")

    def _exchange(self, ask: _Ask, here: str, headers: dict[str, str], t0: float,
                  deadline: float) -> tuple[Reply | None, str | None]:
        """One request to `here` on a pooled connection: (the reply, None), or (None, the URL a redirect leads to)."""
        import yarl

        u = yarl.URL(here)
        key = redirects.origin(here)
        conn, reused = self._take(key, u)
        try:
            try:
                r = self._request(conn, u, headers, deadline)
            except (ConnectionError, http.client.BadStatusLine):
                if not reused:
                    raise
                conn.close()   # a kept connection the server had closed: once more on a new one (as aiohttp does)
                r = self._request(conn, u, headers, deadline)
        except BaseException:
            conn.close()
            raise
        try:
            there = decide(ask, here, r.status, r.reason, r.headers)
        except BaseException:   # (a retry or an error status: the connection kept if its reply is small)
            self._finish(key, conn, r, t0)
            raise
        if there is not None:
            self._finish(key, conn, r, t0)
            return None, there
        try:
            reply = self._reply(r, ask, t0)
        except BaseException:   # (refused from its headers, cut, past the deadline: its body not read to its end)
            conn.close()
            raise
        self._finish(key, conn, r, t0)
        return reply, None

    def _request(self, conn: http.client.HTTPConnection, u: Any, headers: dict[str, str],
                 deadline: float) -> _Response:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the attempt's deadline passed")
        if conn.sock is None:
            conn.timeout = min(SETTINGS.connect_timeout, left)
            conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(min(SETTINGS.read_timeout, left))   # (sending the request)
        heads_by = min(deadline, time.monotonic() + SETTINGS.read_timeout)   # the status line and headers (http.py)
        conn.response_class = functools.partial(_Response, deadline=heads_by)  # type: ignore[assignment]
        conn.request("GET", u.raw_path_qs or "/", headers={"User-Agent": _AGENT, **headers})
        r = conn.getresponse()
        assert isinstance(r, _Response)
        r.wire.deadline = r.wire.limit = deadline
        return r

    def _reply(self, r: _Response, ask: _Ask, t0: float) -> Reply:
        url, h = ask.url, examine(ask, r.status, r.headers)
        if h.kind == "empty":
            return Reply(b"", h.total, h.ctype, etag=h.etag)
        if h.kind == "spool":
            return self._spool(r, url, h.expected, t0, h.ctype, h.etag)
        if h.kind == "page":
            page = bytearray()
            if self._receive(r, url, t0, page.extend, h.expected) > h.expected:
                raise page_too_long(url)
            return Reply(bytes(page), None, h.ctype, etag=h.etag)
        r.wire.deadline = min(r.wire.deadline, keep_up_by(t0, h.expected))
        if ask.into is not None and h.expected <= len(ask.into):   # (a 206, or the small whole file from byte 0)
            n = self._read_into(r, url, h.expected, ask.into[:h.expected])
            return Reply(b"", h.total, h.ctype, etag=h.etag, filled=n)
        buf = bytearray(h.expected)
        self._read_into(r, url, h.expected, memoryview(buf))
        return Reply(bytes(buf), h.total, h.ctype, etag=h.etag)

    def _read_into(self, r: _Response, url: str, expected: int, into: memoryview) -> int:
        """Exactly the `expected` bytes the reply announced, received into `into` as they arrive (each receive one
        piece, counted), never more: a body that ends short is a dropped connection (retried); one that goes on past
        `expected` (no Content-Length to end it) is refused."""
        n = 0
        framed = r.length is not None and not r.chunked   # (Content-Length: the message ends with the body)
        while n < expected:
            # a Content-Length body: one receive straight into the buffer (readinto1); else http.client unframes it
            got = r.fp.readinto1(into[n:]) if framed else r.readinto(into[n:n + _PIECE])
            if not got:
                break
            METER.received(url, got)
            n += got
        if n < expected:
            raise http.client.IncompleteRead(b"", expected - n)   # (a dropped connection: retried)
        if framed:
            r.length = 0   # (read to its end here, past http.client's count)
        elif r.read(1):   # the body must end here
            raise overlong(url, expected)
        r.close()
        return n

    def _spool(self, r: _Response, url: str, expected: int, t0: float, ctype: str, etag: str | None) -> Reply:
        """A whole download (--allow-full-download), spooled to a temporary file as it arrives."""
        import tempfile

        spool = tempfile.TemporaryFile()
        try:
            n = self._receive(r, url, t0, spool.write, expected)
            spooled(url, n, expected)
        except BaseException:
            spool.close()
            raise
        spool.seek(0)
        return Reply(b"", n, ctype, spool, etag)

    def _receive(self, r: _Response, url: str, t0: float, write: Callable[[memoryview], object], most: int) -> int:
        """A body of unknown length (or one read whole), each piece handed to `write` as it arrives, by the minimum
        rate, to its end or until past `most` bytes (-1: no bound); the bytes read."""
        n, piece = 0, memoryview(bytearray(_PIECE))
        while True:   # (as `_keep_up(t0, n)` after each piece: the piece's end by keep_up_by of the bytes then had)
            r.wire.deadline = min(r.wire.limit, keep_up_by(t0, n + len(piece)))
            got = r.readinto(piece)
            if not got:
                return n
            write(piece[:got])
            n += got
            METER.received(url, got)
            if 0 <= most < n:
                return n

    # -- connections --------------------------------------------------------------------------------

    def _take(self, key: tuple[str, str, int], u: Any) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection to the origin (True: it served a request before), else a new one, not yet connected."""
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                return idle.pop(), True
        host, port = u.raw_host or "", u.port
        conn: http.client.HTTPConnection
        if key[0] == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=SETTINGS.connect_timeout, context=self._context())
        elif key[0] == "http":
            conn = http.client.HTTPConnection(host, port, timeout=SETTINGS.connect_timeout)
        else:
            raise CheckpointError(redact(str(u)), f"not an http(s) URL ({key[0]}://)")
        # (to the addresses the redirect policy resolved and checked; TLS still names and verifies `host`)
        conn._create_connection = lambda address, timeout, source=None: redirects.connect(  # type: ignore[attr-defined]
            host, port or 0, timeout, source)
        return conn, False

    def _finish(self, key: tuple[str, str, int], conn: http.client.HTTPConnection, r: _Response, t0: float) -> None:
        """A reply done with: its connection kept for the next request when the reply was read to its end (or is
        a small one, read now, uncounted, by the minimum rate of a reply sent at t0: a redirect's or a 404's body
        trickled a byte at a time held the command until `--limit remote_seconds`, 4 hours); else closed."""
        try:
            if not r.isclosed() and r.length is not None and r.length <= _DRAIN and not r.chunked:
                r.wire.deadline = min(r.wire.limit, keep_up_by(t0, r.length))
                r.read()
        except (OSError, http.client.HTTPException):
            pass
        if not r.isclosed() or r.will_close or conn.sock is None:
            conn.close()
            return
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < SETTINGS.concurrency:
                idle.append(conn)
                return
        conn.close()

    def _context(self) -> ssl.SSLContext:
        with self._lock:
            if self._tls is None:
                self._tls = ssl.create_default_context()   # aiohttp's default (connector.py _make_ssl_context)
                self._tls.set_alpn_protocols(["http/1.1"])
            return self._tls
