"""A URL's stats: units read ahead, a large 16- or 8-bit tensor as its chunks at once (issue 35).

`unit_results` hands a URL's units here. They are read up to REMOTE_AHEAD at a time within REMOTE_BUDGET bytes
(kernel16.py; each unit weighs what `held` says it holds), so the round trips overlap and memory stays bounded; a
pool worker reads its share of both (`share`: `_worker_init`). A link's bytes in flight are its rate times the round
trip: 64 MiB is 1.3 GB/s at 50 ms (48 MiB and 16 units held 10-14 requests in flight, 0.6 GB/s:
bench/results/remote_latency.md, 2026-12-03 thirteenth session).

A sharded checkpoint's values are read ahead while its headers are still being read (`ShardsAhead`: each shard, as its
header comes in, has its first value reads started, in the order the plan will make them, within REMOTE_PREFETCH
bytes in all): the link carries values from the first shard's header on, not from the last's.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple, TypeVar

import numpy as np

from ...core import Checkpoint, TensorInfo, urls
from ...core.files import open_regular
from ...core.io import read_ahead
from ...errors import CkptstatError
from .accumulate import Acc
from .kernel16 import BYTES, DOMAINS, REMOTE_BUDGET, acc_from_hist16, chunk_ranges, hist16, parts, plain
from .kernel32 import url_read
from .tiny import units

REMOTE_AHEAD = 32
# A 16- or 8-bit tensor of several chunks of at least this many bytes is read as its chunks at once (kernel16.parts):
# a read this large is one range request straight into its buffer (sources/remote.py DIRECT), whatever the order.
REMOTE_PART = 1 << 20
# The bytes of values a sharded URL's stats reads ahead while the shards' headers are still coming in (ShardsAhead),
# held beside the plan's REMOTE_BUDGET until its reads take them. 163 shards at 50 ms a round trip, a 100 or 250 MB/s
# link: 32 MiB left it idle least; 64 and 96 MiB no less, their replies slowing the headers' own on the link
# (bench/results/remote_latency.md, 2026-12-04 eighteenth session).
REMOTE_PREFETCH = 32 << 20

R = TypeVar("R")


class Part(NamedTuple):
    """One chunk of a large 16- or 8-bit tensor of a URL (kernel16.parts): the tensor's index and bytes [start, stop)."""
    item: int
    start: int
    stop: int
    last: bool


def planned_reads(ckpt: Checkpoint, info: TensorInfo, chunk_bytes: int) -> list[tuple[int, int]]:
    """The byte ranges of a tensor read alone (a unit of its own) that its kernel reads one request each, in order:
    a plain 16- or 8-bit tensor's parts or chunks (hist16, byte_hist), a plain F32 tensor's chunks (kernel32); none
    for any other (decoded through its reader)."""
    if not plain(ckpt, info):
        return []
    if info.dtype in DOMAINS:
        return parts(ckpt, info, chunk_bytes, REMOTE_PART) or chunk_ranges(info.nbytes, chunk_bytes,
                                                                            1 if info.dtype in BYTES else 2)
    return chunk_ranges(info.nbytes, url_read(chunk_bytes), 4) if info.dtype == "F32" else []


class ShardsAhead:
    """Called with each shard of a sharded URL as it is opened, in order (formats/registry.py `open_checkpoint`'s
    `opened`), with `select(shard)` the names a stats run reads of it (file order): the value reads remote_units will
    make first are started (core/io.py read_ahead: the same range requests, made while later shards' headers are
    still coming in, which the plan's reads then take), in the plan's order, until the next would pass
    REMOTE_PREFETCH bytes: which ones depends on the headers alone, never on timing. A read the census of the whole
    checkpoint then leaves out (a role its config decides) is not taken, and let go at the run's end."""

    def __init__(self, select: Callable[[Checkpoint], list[str]], chunk_bytes: int):
        self.select, self.chunk_bytes, self.left = select, chunk_bytes, REMOTE_PREFETCH

    def __call__(self, shard: Checkpoint) -> None:
        try:
            self._start(shard)
        except CkptstatError:   # (a shard the plan cannot read: its reads say so, where they did)
            self.left = 0

    def _start(self, shard: Checkpoint) -> None:
        if self.left <= 0:
            return
        names = self.select(shard)
        for a, b in units(shard, names, self.chunk_bytes):
            info = shard[names[a]]
            reads = planned_reads(shard, info, self.chunk_bytes) if b - a == 1 else []   # (a run: cache windows)
            if not reads:
                continue
            assert info.offset is not None
            with open_regular(info.file) as f:
                for start, stop in reads:
                    if stop - start > self.left:
                        self.left = 0
                        return
                    self.left -= read_ahead(f, info.offset + start, stop - start)


def remote_units(ckpt: Checkpoint, names: list[str], spans: list[tuple[int, int]], chunk_bytes: int,
                 one: Callable[[tuple[int, int]], R], single: Callable[[int, Acc], R],
                 held: Callable[[tuple[int, int]], int], progress: Callable[[int], None] | None,
                 share: int = 1) -> Iterator[R]:
    """Each span's result, in order: `one(span)` read up to REMOTE_AHEAD // share at a time within REMOTE_BUDGET //
    share bytes, and a tensor of several chunks read as its chunks, each a unit of its own for `concurrently` (a 62.5
    MiB embedding was 16 range requests one after another). A part holds one chunk's buffer, as the tensor's read did,
    and its histogram; the tensor's result, `single(index, acc)`, is built when its last part is handed back, from the
    parts' counts summed (integers: the same counts, the same report, in the same order)."""
    work: list[tuple[int, int] | Part] = []
    for span in spans:
        cut = parts(ckpt, ckpt[names[span[0]]], chunk_bytes, REMOTE_PART) if span[1] - span[0] == 1 else None
        if cut is None:
            work.append(span)
        else:
            work += [Part(span[0], a, b, k == len(cut) - 1) for k, (a, b) in enumerate(cut)]

    def run(w: tuple[int, int] | Part) -> R | np.ndarray:
        if isinstance(w, Part):
            return hist16(ckpt, ckpt[names[w.item]], chunk_bytes, progress, (w.start, w.stop))
        return one(w)

    def weight(w: tuple[int, int] | Part) -> int:
        return w.stop - w.start if isinstance(w, Part) else held(w)

    hist: np.ndarray | None = None
    for w, res in zip(work, urls.concurrently(run, work, max(1, REMOTE_AHEAD // share), weight, REMOTE_BUDGET // share)):
        if not isinstance(w, Part):
            yield res   # type: ignore[misc]   # (a span's result: `one`'s)
            continue
        assert isinstance(res, np.ndarray)
        if hist is None:
            hist = res
        else:
            hist += res
        if w.last:
            acc = acc_from_hist16(hist, ckpt[names[w.item]].dtype)
            acc.tensors = 1
            hist = None
            yield single(w.item, acc)
