"""A URL's stats: units read ahead, a large 16- or 8-bit tensor as its chunks at once (issue 35).

`unit_results` hands a URL's units here. They are read up to REMOTE_AHEAD at a time within REMOTE_BUDGET bytes
(kernel16.py; each unit weighs what `held` says it holds), so the round trips overlap and memory stays bounded; a
pool worker reads its share of both (`share`: `_worker_init`). A link's bytes in flight are its rate times the round
trip: 64 MiB is 1.3 GB/s at 50 ms (48 MiB and 16 units held 10-14 requests in flight, 0.6 GB/s:
bench/results/remote_latency.md, 2026-12-03 thirteenth session).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple, TypeVar

import numpy as np

from ...core import Checkpoint, urls
from .accumulate import Acc
from .kernel16 import REMOTE_BUDGET, acc_from_hist16, hist16, parts

REMOTE_AHEAD = 32
# A 16- or 8-bit tensor of several chunks of at least this many bytes is read as its chunks at once (kernel16.parts):
# a read this large is one range request straight into its buffer (sources/remote.py DIRECT), whatever the order.
REMOTE_PART = 1 << 20

R = TypeVar("R")


class Part(NamedTuple):
    """One chunk of a large 16- or 8-bit tensor of a URL (kernel16.parts): the tensor's index and bytes [start, stop)."""
    item: int
    start: int
    stop: int
    last: bool


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
