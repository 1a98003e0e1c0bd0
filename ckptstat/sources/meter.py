"""What one command fetched over the network, and the bound on it (docs/remote.md).

Every request a remote source makes is counted here before it is sent (a HEAD, a range GET, a
listing, an object's metadata), and every body byte as it arrives; past `--limit remote_requests`
or `--limit remote_bytes` the command stops with one line naming the URL. `--json` reports the
totals as a `fetched` object; a progress callback sees the byte count grow while values stream.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.limits import limits
from ..core.urls import redact
from ..errors import CheckpointError


@dataclass
class Meter:
    requests: int = 0
    bytes: int = 0
    retries: int = 0
    full_downloads: int = 0
    progress: Callable[[int], None] | None = None   # called with the bytes fetched so far
    started: float | None = None   # time.monotonic() of the command's first request: the deadline counts from it
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def request(self, url: str) -> None:
        """Count one request about to be sent; refuse it past limits().remote_requests or the deadline."""
        cap = limits().remote_requests
        with self._lock:
            if self.requests >= cap:
                raise CheckpointError(redact(url), f"this command has made {self.requests:,} requests, the most "
                                                   f"ckptstat makes (--limit remote_requests={cap} to raise it)")
            self.requests += 1
            if self.started is None:
                self.started = time.monotonic()
        self.time_left(url)

    def time_left(self, url: str) -> float:
        """Seconds left before the command's deadline (limits().remote_seconds from its first request); past
        it, one line naming the URL."""
        cap = limits().remote_seconds
        left = cap - (time.monotonic() - self.started) if self.started is not None else float(cap)
        if left <= 0:
            raise CheckpointError(redact(url), f"gave up: this command has spent {cap:,} s on the network, the most "
                                               "ckptstat spends (--limit remote_seconds=N to raise it)")
        return left

    def received(self, url: str, n: int) -> None:
        """Count n body bytes; refuse more past limits().remote_bytes."""
        cap = limits().remote_bytes
        with self._lock:
            self.bytes += n
            total = self.bytes
        if total > cap:
            raise CheckpointError(redact(url), f"this command has fetched {total:,} bytes, more than the {cap:,} "
                                               "ckptstat fetches (--limit remote_bytes=N to raise it)")
        if self.progress is not None:
            self.progress(total)

    def count(self, name: str) -> None:
        """One more retry or full download (`retries`, `full_downloads`), from any thread."""
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def reset(self) -> None:
        with self._lock:
            self.requests = self.bytes = self.retries = self.full_downloads = 0
            self.started = None

    def merge(self, counts: dict[str, int] | None) -> None:
        """Add what another process fetched (a worker's `since` counts), without the limit checks: the
        worker applied them."""
        with self._lock:
            for k, v in (counts or {}).items():
                if k in ("requests", "bytes", "retries", "full_downloads") and isinstance(v, int):
                    setattr(self, k, getattr(self, k) + v)

    def since(self, before: dict[str, int]) -> dict[str, int]:
        """What was fetched since `before` (an earlier `report()`)."""
        return {k: v - before.get(k, 0) for k, v in self.report().items()}

    def report(self) -> dict[str, int]:
        return {"requests": self.requests, "bytes": self.bytes, "retries": self.retries,
                "full_downloads": self.full_downloads}


METER = Meter()


@dataclass
class Settings:
    """Process-wide options of the remote sources (--allow-full-download is a reading switch: core/switches.py)."""

    connect_timeout: float = 10.0    # seconds to open a connection
    read_timeout: float = 60.0       # seconds without a byte from the server
    min_rate: int = 64 << 10         # bytes a second a reply must keep up: a request may take read_timeout + n / min_rate
    retries: int = 5                 # attempts after the first, on 429 and 5xx (the server asks to try again)
    drop_retries: int = 2            # attempts after the first on a timeout, a dropped or refused connection
    backoff: float = 0.5             # seconds before the first retry, doubling each time (Retry-After wins, capped)
    backoff_cap: float = 30.0
    # requests in flight at once to one host (twice as many files opened at once): 163 shards' headers are 3 round trips
    # one after another, not 6, and a stats run's reads ahead (analysis/stats/readahead.py) go out beside them without
    # lengthening that chain (32: they took its slots, and the link sat idle as long; bench/results/remote_latency.md,
    # 2026-12-04 eighteenth session)
    concurrency: int = 64
    threaded: bool = True            # http(s) range GETs made by the calling threads with http.client
                                     # (sources/threaded.py); False: on aiohttp's one event-loop thread (sources/http.py)


SETTINGS = Settings()
