"""The F32 kernel of `ckptstat stats` (issue 22): a float32 tensor's statistics in one read of its bytes.

A plain tensor is read straight into one reused buffer, READ_BYTES (512 KiB) at a time whatever the
chunk size asked (smaller if asked), so that each read stays in the L2 cache for the passes after it (a URL's a
chunk at a time, one request each, then taken READ_BYTES at a time); a
tensor a format's own reader serves (a zip record, a strided view) comes decoded through iter_chunks.
Each read is counted once into the tensor's 65,536-bin histogram keyed by each float32's top 16 bits (its
bfloat16 key, stats.py's QUANTILE_RULE), taken through a strided view of the high halves. The counts then
answer two questions that would otherwise cost a pass over every read:
- non-finite values: NaN and +-Inf are exactly the keys 0x7F80-0x7FFF and 0xFF80-0xFFFF (exponent all
  ones; a NaN whose payload is in the low half shares +-Inf's key), so only a read that put counts there
  is searched for them, and those counts are dropped (the histogram counts finite values);
- zeros: +0 and -0 have the keys 0x0000 and 0x8000, shared with denormals below 2^-133, so exact zeros
  are counted (count_nonzero) only in a read that added counts there.
min and max are float32 reductions (exact). The moments run over sub-reads of F32_SUB values widened into
one reused float64 buffer (512 KiB: in L2, so each pass over it costs a fraction of a pass over memory):
the sum (pairwise, np.add.reduce), the sum of |x| and the sum of squares (np.einsum's SIMD loop, a
single pass for the squares; its running partial sums give a relative error below (n / lanes) * 2^-53,
~5e-13 for F32_SUB values, acceptable only for sums of non-negative terms, hence the pairwise plain sum).
No BLAS: its threads cost more CPU than these sums on a busy machine (docs/performance.md). Every square of
a float32 is exact in float64. The squares are summed about the sub-read's own mean (two passes) for a
tensor's first sub-read and whenever the values so far have mean^2 > _ONE_PASS * variance; otherwise about
zero, M2 = sum(x^2) - sum(x)^2 / n, whose cancellation multiplies the rounding error by at most ~(1 +
_ONE_PASS) for values like those before (a sub-read far from them adds more to the merged M2, as the
spread between groups, than it loses). The sub-reads merge with Chan et al.'s update (Acc.add_moments). The result equals
Acc.update's on the same values (tests/test_stats_kernel.py): the histogram, counts, min and max exactly,
the moments to float64 rounding.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from functools import partial

import numpy as np

from ...core import Checkpoint, TensorInfo, urls
from .accumulate import NBINS, Acc, centred, new_acc, scratch
from .kernel16 import plain, plain_chunks

F32_SUB = 1 << 16   # values per moment sub-read: 512 KiB of float64, which stays in a 1-2 MiB L2 cache
READ_BYTES = 512 << 10   # bytes per read: the chunk stays in L2 for the passes after the count
_ONE_PASS = 64.0     # sum of squares about zero while mean^2 <= this * variance (|mean| <= 8 std)
_LITTLE = sys.byteorder == "little"
_FAST_AT = np.lib.NumpyVersion(np.__version__) >= "1.25.0"   # ufunc.at got its fast path in 1.25
_INDEX, _WIDE, _CENTRED = "index", "wide", "centred"


def f32_chunks(ckpt: Checkpoint, info: TensorInfo, chunk_bytes: int) -> Iterator[np.ndarray]:
    """The tensor's values as native float32 arrays of about chunk_bytes bytes (a plain tensor's read into
    one reused buffer, any other's decoded by its reader through Checkpoint.iter_chunks)."""
    if not plain(ckpt, info):
        for x in ckpt.iter_chunks(info.name, chunk_bytes):
            yield np.ascontiguousarray(x, dtype=np.float32)
        return
    order = np.dtype("<f4" if info.byteorder == "little" else ">f4")
    for raw in plain_chunks(info, chunk_bytes, 4):
        x = raw.view(order)
        yield x if order.isnative else x.astype(np.float32)


def tensor_stats32(ckpt: Checkpoint, info: TensorInfo, chunk_bytes: int,
                   progress: Callable[[int], None] | None = None) -> Acc:
    """The accumulator of one F32 tensor (what Acc.update gives on its values, in fewer passes)."""
    t = F32Tensor()
    step = _step(chunk_bytes)
    read = url_read(chunk_bytes) if urls.is_url(info.file) and plain(ckpt, info) else step
    for chunk in f32_chunks(ckpt, info, read):
        for at in range(0, chunk.size, step // 4):
            x = chunk[at:at + step // 4]
            t.add(x)
            if progress:
                progress(x.size * 4)
    return t.done()


def _step(chunk_bytes: int) -> int:
    """The bytes of a plain tensor added at a time (a local file's reads too)."""
    return max(4, min(chunk_bytes, READ_BYTES) // 4 * 4)


def url_read(chunk_bytes: int) -> int:
    """A URL's plain tensor is read a chunk at a time (one range request straight into the buffer; a read of 512 KiB
    was a round trip each: ~160 MB/s at 50 ms), then added READ_BYTES at a time, as a local file's reads are: the
    same sums in the same order, so the same report."""
    step = _step(chunk_bytes)
    return max(step, chunk_bytes // step * step)


class F32Tensor:
    """One tensor's statistics, fed flat, contiguous, native float32 chunks in order (add), then done()."""

    def __init__(self) -> None:
        self.acc = new_acc("F32")
        self.hist = np.zeros(NBINS, dtype=np.int64)   # counts every key; non-finite keys are emptied
        self.zero_bins = 0       # counts in the keys of +-0 so far

    def done(self) -> Acc:
        self.acc.hist = self.hist
        return self.acc

    def add(self, x: np.ndarray) -> None:
        acc, hist = self.acc, self.hist
        acc.count += x.size
        if x.size == 0:
            return
        keys = x.view(np.uint16)[1::2] if _LITTLE else x.view(np.uint32) >> 16
        if _FAST_AT:   # counted in place, no 512 KiB result per chunk (numpy >= 1.25's ufunc.at fast path),
            index = scratch(_INDEX, x.size, np.intp)   # from intp keys: faster than from the uint16 view
            np.copyto(index, keys)
            np.add.at(hist, index, 1)
        else:
            hist += np.bincount(keys, minlength=NBINS)
        if hist[0x7F80:0x8000].any() or hist[0xFF80:].any():   # exponent all ones: NaN or +-Inf
            acc.nan += int(np.count_nonzero(np.isnan(x)))
            acc.posinf += int(np.count_nonzero(x == np.inf))
            acc.neginf += int(np.count_nonzero(x == -np.inf))
            hist[0x7F80:0x8000] = 0   # the histogram counts finite values only
            hist[0xFF80:] = 0
            x = x[np.isfinite(x)]
            if x.size == 0:
                return
        zero_bins = int(hist[0]) + int(hist[0x8000])
        if zero_bins != self.zero_bins:   # +-0 (or denormals below 2^-133) in this chunk: count the exact zeros
            self.zero_bins = zero_bins
            acc.zeros += x.size - int(np.count_nonzero(x))
        acc.min = min(acc.min, float(x.min()))
        acc.max = max(acc.max, float(x.max()))
        self._moments(x)

    def _moments(self, x: np.ndarray) -> None:
        acc = self.acc
        wide = scratch(_WIDE, min(x.size, F32_SUB), np.float64)
        for at in range(0, x.size, F32_SUB):
            part = x[at:at + F32_SUB]
            n = part.size
            w = wide[:n]
            np.copyto(w, part)
            total = float(np.add.reduce(w))
            mean = total / n
            lo = 0.0
            if acc.n and acc.mean * acc.mean * acc.n <= _ONE_PASS * acc.m2:   # about zero: M2 = sum(x^2) - sum(x)^2 / n
                m2 = max(float(np.einsum("i,i->", w, w)) - total * mean, 0.0)
            else:
                d = scratch(_CENTRED, n, np.float64)
                np.subtract(w, mean, out=d)
                m2, lo = centred(n, mean, float(np.einsum("i,i->", d, d)), partial(np.add.reduce, d))
            acc.sum_abs += float(np.einsum("i->", np.abs(w, out=w)))
            acc.add_moments(n, mean, m2, lo)

