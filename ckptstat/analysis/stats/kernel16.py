"""The per-tensor kernels of `ckptstat stats` (issue 22: statistics at memory speed).

16-bit floats (F16, BF16) have only 65,536 values, so a tensor's whole distribution is one count of its stored bit
patterns into 65,536 bins (count16: the compiled loop of _count16.c, or numpy's `np.add.at` where the install has no
compiled part). A local file's chunks are counted where the page cache holds them (mapped, not copied), a URL's read
once into one reused buffer; nothing is widened to float32 or float64. Every statistic then comes from the 65,536
counts and the table of the values they stand for (stats_acc.tables): counts, NaN, +-Inf and zeros exactly, min and
max exactly, the quantiles exactly (as before), and the moments as float64 sums over the bins, sum(h * v),
sum(h * (v - mean)^2), sum(h * |v|), where every value is exact in float64: more accurate than summing the elements,
and independent of the chunk size. One-byte dtypes (FP8, I8, U8, BOOL: BYTES) are counted the same way, their bytes
two at a time, each byte's count then moved to its value's bfloat16 key (byte_hist).

F32 has its own kernel (kernel32.py, which reads through plain_chunks here); other dtypes go through Acc.update
(accumulate.py), a slice of a chunk at a time.
"""
from __future__ import annotations

import functools
import math
import mmap
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core import Checkpoint, TensorInfo, dtypes, urls
from ...core.files import open_regular
from ...core.io import contiguous_strides
from ...core.tensor import check_expansion
from ...errors import CorruptCheckpointError, reading
from .accumulate import NBINS, Acc, centred, new_acc, tables, value_order

if TYPE_CHECKING:
    from ..dequantized import Dequantized

_compiled_count: Callable[[Any, np.ndarray], None] | None
try:
    from ._count16 import add as _compiled_count
except ImportError:   # (built without a C compiler: setup.py)
    _compiled_count = None

# One-byte dtypes (FP8, I8, U8, BOOL): 256 patterns, each value exact in bfloat16 (accumulate.EXACT_IN_BF16), so a
# tensor's histogram is the count of its bytes, each moved to its value's bfloat16 key (byte_hist).
BYTES = frozenset({"BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0"})
# dtype -> the domain of its 65,536-bin histogram: F16 and BF16 keyed by their own 16 bits, one-byte ones by bfloat16
DOMAINS = {"F16": "f16", "BF16": "bf16", **dict.fromkeys(BYTES, "bf16")}


def plain(ckpt: Checkpoint, info: TensorInfo) -> bool:
    """Whether the tensor's bytes are one contiguous run of a file read by the default reader, its values as stored."""
    return (info.offset is not None and ckpt.readers.get(info.file) is None and not info.math_bits
            and (info.stride is None or info.stride == contiguous_strides(info.shape)))


def bits16_chunks(ckpt: Checkpoint, info: TensorInfo, chunk_bytes: int,
                  part: tuple[int, int] | None = None) -> Iterator[np.ndarray]:
    """The tensor's 16-bit patterns (uint16 in the file's byte order), about chunk_bytes bytes at a time; with `part`,
    a plain tensor's bytes [start, stop) only (parts()).

    A plain tensor of a local file is mapped a chunk at a time and counted where the page cache holds it (no copy:
    a copy out of the page cache costs about what the compiled count does, and evicts its table from the CPU's
    cache); a URL's is read straight into one reused buffer (each byte read once, no allocation per chunk); any
    other (a zip record, a strided view, a format's own reader) through Checkpoint.iter_chunks, from whose decoded
    values the patterns are taken back without a copy for F16 (a view) and with one uint32 shift for BF16 (decode
    widened it to float32)."""
    if part is None and not plain(ckpt, info):
        for x in ckpt.iter_chunks(info.name, chunk_bytes):
            if x.dtype == np.float16:
                yield x.view(np.uint16)
            else:   # (BF16 and FP8 decode to float32; I8, U8 and BOOL widened to it: exact)
                yield (np.asarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return
    order = "<u2" if info.byteorder == "little" else ">u2"
    if _compiled_count is not None and not urls.is_url(info.file):   # (numpy's count has no guard: see mapped_chunks)
        yield from mapped_chunks(info, chunk_bytes, order)
        return
    for raw in plain_chunks(info, chunk_bytes, 2, *(part or (0, None))):
        yield raw.view(order)


def mapped_chunks(info: TensorInfo, chunk_bytes: int, dtype: str) -> Iterator[np.ndarray]:
    """A plain tensor of a local file (see plain()) as arrays of `dtype` over its stored bytes, about chunk_bytes at
    a time, each a view of the file's mapped window (WINDOWS). A read past the file's end through a mapping is a
    SIGBUS, not an error: a window never reaches past the file's size when it was mapped, a tensor whose end the file
    does not hold is an error first, and a file that shrinks afterwards (truncated by another process while it is
    counted) is caught by the compiled count's guard (_count16.c), an OSError, so only the compiled count reads mapped
    chunks."""
    check_expansion(info)
    width = np.dtype(dtype).itemsize
    step = max(width, chunk_bytes // width * width)
    assert info.offset is not None
    with reading(info.file, f"tensor {info.name!r}: cannot read its values"):
        for at in range(info.offset, info.offset + info.nbytes, step):
            want = min(step, info.offset + info.nbytes - at)
            view, base = WINDOWS.over(info, at, want)
            yield np.frombuffer(view, dtype=dtype, count=want // width, offset=at - base)


class Windows:
    """The window of a local file a thread last mapped (at least WINDOW bytes, up to the file's end when it was
    mapped): consecutive tensors of one file are views of one mapping, where a mapping per tensor cost an open, an
    fstat, an mmap and an munmap each (~0.1 ms: a third of a 1 MiB tensor's count). A window is unmapped once no
    array views it and the thread has moved on, so the pages mapped stay a window or two, whatever the file."""

    WINDOW = 16 << 20

    def __init__(self) -> None:
        self.local = threading.local()

    def over(self, info: TensorInfo, at: int, want: int) -> tuple[mmap.mmap, int]:
        """A mapping of info.file holding the bytes [at, at + want), and the file offset it starts at."""
        last = getattr(self.local, "last", None)
        if last is not None and last[0] == info.file and last[2] <= at and at + want <= last[2] + len(last[1]):
            return last[1], last[2]
        self.local.last = None   # (let the last window go before mapping the next)
        with open_regular(info.file) as f:
            size = os.fstat(f.fileno()).st_size
            if at + want > size:
                raise _ends_first(info, info.nbytes, info.offset or 0)
            base = at - at % mmap.ALLOCATIONGRANULARITY
            view = mmap.mmap(f.fileno(), min(size - base, max(at + want - base, self.WINDOW)), offset=base,
                             access=mmap.ACCESS_READ)
        self.local.last = (info.file, view, base)
        return view, base

    def clear(self) -> None:
        self.local.last = None


WINDOWS = Windows()   # (analysis/stats/ clears the calling thread's when a stats run ends)


def _ends_first(info: TensorInfo, want: int, at: int) -> CorruptCheckpointError:
    """The error of a tensor whose bytes the file does not hold (mapped_chunks checks first, plain_chunks as it reads)."""
    return CorruptCheckpointError(info.file, f"tensor {info.name!r}: expected {want} bytes at offset {at}, the file "
                                             "ends first")


def count16(bits: np.ndarray, hist: np.ndarray) -> None:
    """Add to hist (65,536 int64) the count of each of bits' 16-bit patterns (uint16, either byte order)."""
    if _compiled_count is None:
        np.add.at(hist, bits, 1)
    elif bits.dtype.isnative:
        _compiled_count(np.ascontiguousarray(bits), hist)
    else:   # counted as stored, then each bin moved to its pattern with the two bytes swapped
        swapped = np.zeros(NBINS, dtype=np.int64)
        _compiled_count(np.ascontiguousarray(bits), swapped)
        hist += swapped.reshape(256, 256).T.ravel()


class Buffers:
    """Chunk buffers, mapped anonymously (mmap: given back to the system when freed), handed back for the next
    tensor of the same size class (at most `cap` bytes of them kept: reused, they cost no page faults). A URL's stats
    reads with many threads, and glibc's malloc gives each its own arena, which keeps what its thread freed (its
    dynamic mmap threshold rises to the largest buffer freed, 16 MiB): chunk buffers from np.empty held ~250 MiB
    more at 16 tensors in flight."""

    def __init__(self, cap: int):
        self.cap, self.kept = cap, 0
        self.free: dict[int, list[np.ndarray]] = {}
        self.lock = threading.Lock()

    def take(self, n: int) -> np.ndarray:
        """A buffer of at least n bytes: sizes rounded up to a multiple of 1 MiB (64 KiB below it), so that tensors of
        slightly different sizes share buffers (a sharded checkpoint's reads are a few sizes, give or take a header)."""
        grain = 1 << 20 if n >= 1 << 20 else 1 << 16
        n = -(-max(n, 1) // grain) * grain
        with self.lock:
            if self.free.get(n):
                self.kept -= n
                return self.free[n].pop()
        return np.frombuffer(mmap.mmap(-1, n), dtype=np.uint8)

    def give(self, buf: np.ndarray) -> None:
        with self.lock:
            if self.kept + buf.size <= self.cap:
                self.free.setdefault(buf.size, []).append(buf)
                self.kept += buf.size

    def clear(self) -> None:
        with self.lock:
            self.free.clear()
            self.kept = 0


REMOTE_BUDGET = 64 << 20   # the bytes of buffers a URL's stats holds at once (analysis/stats/ REMOTE_AHEAD), all kept
BUFFERS = Buffers(REMOTE_BUDGET)   # (analysis/stats/ clears it when a stats run ends)


def chunk_ranges(nbytes: int, chunk_bytes: int, width: int, start: int = 0,
                 stop: int | None = None) -> list[tuple[int, int]]:
    """The byte ranges [a, b) of a plain tensor of `nbytes` bytes that plain_chunks reads, one read each."""
    step = max(width, chunk_bytes // width * width)
    end = nbytes if stop is None else min(stop, nbytes)
    return [(a, min(a + step, end)) for a in range(start, end, step)]


def plain_chunks(info: TensorInfo, chunk_bytes: int, width: int, start: int = 0,
                 stop: int | None = None) -> Iterator[np.ndarray]:
    """The stored bytes of a plain tensor (see plain()), a multiple of `width` bytes at a time, read
    into one reused buffer: the array yielded is overwritten by the next read. With `start` / `stop`, only the
    tensor's bytes [start, stop) (a URL's part of a tensor: parts())."""
    check_expansion(info)
    reads = chunk_ranges(info.nbytes, chunk_bytes, width, start, stop)
    buf = BUFFERS.take(reads[0][1] - reads[0][0] if reads else 0)
    assert info.offset is not None
    with reading(info.file, f"tensor {info.name!r}: cannot read its values"), open_regular(info.file) as f:
        f.seek(info.offset + start)
        for a, b in reads:
            raw = buf[:b - a]
            got = f.readinto(raw.data) if hasattr(f, "readinto") else _read_into(f, raw)
            if got != b - a:
                raise _ends_first(info, b - a, info.offset + a)
            yield raw
    BUFFERS.give(buf)   # (the tensor read whole: the caller is done with the last chunk)


def _read_into(f: object, raw: np.ndarray) -> int:
    data = f.read(raw.size)   # type: ignore[attr-defined]   # (a remote file: range requests)
    raw[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    return len(data)


def tensor_stats16(ckpt: Checkpoint, info: TensorInfo, chunk_bytes: int,
                   progress: Callable[[int], None] | None = None) -> Acc:
    """The accumulator of one F16, BF16 or one-byte tensor, from its 65,536-bin histogram (hist16), counted into this
    thread's own table and left zeroed for its next tensor: no 512 KiB table allocated and zeroed a tensor, where a
    MoE's experts are thousands of small tensors (bench/results/stats_moe.md)."""
    hist = zeroed("hist")
    try:
        return acc_from_hist16(hist16(ckpt, info, chunk_bytes, progress, into=hist), info.dtype, clear=True)
    except BaseException:
        hist.fill(0)   # (counts left by a read that failed)
        raise


def dequantized_stats(info: TensorInfo, source: Dequantized, chunk_bytes: int,
                      progress: Callable[[int], None] | None = None) -> Acc:
    """The accumulator of a quantised weight's values (analysis/dequantized.py) from the histogram of their F16 or BF16
    patterns, as a stored tensor's. A value is a function of its group and its code, so the pairs are counted (the
    compiled count of 16-bit keys: 65,536 >> bits groups' codes at a time) and each pair that occurs is dequantised
    once, its count added to its value's pattern: no value is decoded one by one, unless a read's groups are narrower
    than twice the codes there are (act-order GPTQ's runs of a group, 8-bit codes in small groups): fewer than two
    values a possible pair, so each value's pattern is computed and counted instead. About chunk_bytes // 4 codes a
    read; the progress in the weight's stored bytes, in proportion."""
    hist, pairs = zeroed("hist"), zeroed("pairs")
    total, seen, done = max(1, math.prod(info.shape)), 0, 0
    # a NaN or infinite scale (a corrupt save) makes NaN and Inf values, counted as such, quietly: an inf scale times
    # a code of 0 printed numpy's 'invalid value encountered in multiply' on stderr
    with np.errstate(invalid="ignore", over="ignore"):
        try:
            for codes, scales, biases in source.pieces(max(1, chunk_bytes // 4)):
                if codes.shape[1] < 2 << source.bits:   # (narrow groups: the values themselves)
                    count16(source.patterns(codes, scales[:, None], None if biases is None else biases[:, None]).reshape(-1),
                            hist)
                else:
                    _count_pairs(source, codes, scales, biases, pairs, hist)
                seen += codes.size
                if progress:
                    now = info.nbytes * seen // total
                    progress(now - done)
                    done = now
            return acc_from_hist16(hist, info.dtype, clear=True)
        except BaseException:
            hist.fill(0)
            pairs.fill(0)
            raise


def _count_pairs(source: Dequantized, codes: np.ndarray, scales: np.ndarray, biases: np.ndarray | None,
                 pairs: np.ndarray, hist: np.ndarray) -> None:
    """Add to hist the patterns of one read's values (codes (groups, group), a scale and bias a group) by their
    (group, code) pairs: counted as 16-bit keys into `pairs` (left zeroed), 65,536 >> bits groups at a time, each
    pair that occurs dequantised once."""
    bits = source.bits
    span = NBINS >> bits   # groups whose (group, code) keys fit 16 bits
    for g0 in range(0, len(codes), span):
        part = codes[g0:g0 + span]
        keys = part.astype(np.uint16)
        keys |= (np.arange(len(part), dtype=np.uint16) << bits)[:, None]
        count16(keys.reshape(-1), pairs)
        at = np.flatnonzero(pairs[:len(part) << bits])
        counts = pairs[at]
        pairs[at] = 0
        g = g0 + (at >> bits)
        np.add.at(hist, source.patterns(at & ((1 << bits) - 1), scales[g], None if biases is None else biases[g]), counts)


def zeroed(name: str) -> np.ndarray:
    """This thread's own 65,536-bin int64 table under `name`, all zeros: whoever takes it zeroes it again."""
    table = getattr(_LOCAL, name, None)
    if table is None:
        table = np.zeros(NBINS, dtype=np.int64)
        setattr(_LOCAL, name, table)
    return table


_LOCAL = threading.local()   # (Dask runs tensors in a worker's threads)


def hist16(ckpt: Checkpoint, info: TensorInfo, chunk_bytes: int, progress: Callable[[int], None] | None = None,
           part: tuple[int, int] | None = None, into: np.ndarray | None = None) -> np.ndarray:
    """The 65,536-bin histogram of an F16, BF16 or one-byte tensor (DOMAINS: its own bit patterns, or its values'
    bfloat16 keys); with `part` (a plain tensor's bytes [start, stop): parts()), of those bytes only. Integer counts:
    the parts' histograms summed are the whole's. Counted into `into` (zeros) when given, else a new table."""
    hist = np.zeros(NBINS, dtype=np.int64) if into is None else into
    if info.dtype in BYTES and (part is not None or plain(ckpt, info)):
        return byte_hist(info, chunk_bytes, progress, part, hist)
    with reading(info.file, f"tensor {info.name!r}: cannot read its values"):   # (a mapped file that shrank)
        for bits in bits16_chunks(ckpt, info, chunk_bytes, part):
            count16(bits, hist)
            if progress:
                progress(bits.size * 2)
    return hist


def byte_hist(info: TensorInfo, chunk_bytes: int, progress: Callable[[int], None] | None,
              part: tuple[int, int] | None, hist: np.ndarray) -> np.ndarray:
    """hist16 of a plain one-byte tensor (BYTES), added to `hist`: its bytes counted two at a time by count16 (a pair is
    one 16-bit pattern), the 256 x 256 pair counts folded into each byte's count (its row's and its column's sums),
    each byte's count moved to its value's bfloat16 key. Mapped like a 16-bit tensor's; no value decoded or widened."""
    pairs = zeroed("pairs")
    lone = np.zeros(256, dtype=np.int64)
    mapped = part is None and _compiled_count is not None and not urls.is_url(info.file)
    try:
        with reading(info.file, f"tensor {info.name!r}: cannot read its values"):
            for raw in mapped_chunks(info, chunk_bytes, "u1") if mapped else plain_chunks(info, chunk_bytes, 1,
                                                                                             *(part or (0, None))):
                even = raw.size & ~1
                count16(raw[:even].view(np.uint16), pairs)
                if raw.size & 1:
                    lone[raw[-1]] += 1
                if progress:
                    progress(raw.size)
        square = pairs.reshape(256, 256)
        np.add.at(hist, _byte_keys(info.dtype), square.sum(axis=0) + square.sum(axis=1) + lone)
    finally:
        pairs.fill(0)
    return hist


@functools.cache
def _byte_keys(dtype: str) -> np.ndarray:
    """The bfloat16 key (float32's top 16 bits) of the value of each of a one-byte dtype's 256 patterns."""
    values = np.asarray(dtypes.decode(np.arange(256, dtype=np.uint8), dtype, 256), dtype=np.float32)
    return (values.view(np.uint32) >> 16).astype(np.intp)


def parts(ckpt: Checkpoint, info: TensorInfo, chunk_bytes: int, least: int) -> list[tuple[int, int]] | None:
    """A plain 16- or 8-bit tensor (DOMAINS) of more than one chunk, as its chunks' byte ranges: a URL's stats reads them
    concurrently (each its own range request, as the chunks of one read are; the histograms summed give the
    same counts, so the same report), where one read would wait for each chunk's round trip in turn. None for
    any other tensor (F32's kernel merges its reads' float64 moments in order: read one after another), and for
    chunks under `least` bytes (a URL's smaller reads go through its cache's growing windows, which only reads in
    order make few requests of)."""
    step = max(2, chunk_bytes // 2 * 2)
    if info.dtype not in DOMAINS or info.nbytes <= step or step < least or not plain(ckpt, info):
        return None
    return [(at, min(at + step, info.nbytes)) for at in range(0, info.nbytes, step)]


def acc_from_hist16(hist: np.ndarray, dtype: str, clear: bool = False) -> Acc:
    """An Acc equal to feeding every value through Acc.update, built from the counts of the 65,536 bit
    patterns of an F16 or BF16 tensor, or of a one-byte tensor's values' bfloat16 keys (the moments to float64
    rounding, summed by bin, not by chunk). With `clear`, the bins read are zeroed (the table is all zeros again).

    Only the patterns that occur (a few thousand of the 65,536) are read after the one pass that finds them: the
    counts, NaN, +-Inf and zeros, and, kept sparse in value order, the bins the tensor's quantiles and its merges
    into layer, bucket and total read (issue 22)."""
    acc = new_acc(dtype)
    domain = DOMAINS[dtype]
    keys = np.flatnonzero(hist != 0)   # 5x faster than np.flatnonzero(hist) on int64 counts
    counts = hist[keys]
    if clear:
        hist[keys] = 0
    acc.count = int(counts.sum())
    kind = _kinds(domain)[keys]
    if kind.any():
        acc.zeros, acc.nan, acc.posinf, acc.neginf = (int(counts[kind == k].sum()) for k in range(1, 5))
    present, counts = value_order(keys, counts, domain)
    acc.hist_keys, acc.hist_counts = present, counts
    acc.n = n = acc.count - acc.nan - acc.posinf - acc.neginf
    if n == 0:
        return acc
    value = tables(domain)[0]
    acc.min, acc.max = float(value[present[0]]), float(value[present[-1]])
    v = value[present]
    h = counts.astype(np.float64)
    # np.add.reduce, not np.dot: BLAS threads a dot of an F16 tensor's ~20k present patterns, and its
    # spinning threads cost more CPU than the sum
    acc.mean = mean = float(np.add.reduce(h * v)) / n
    d = v - mean
    acc.m2, acc.mean_lo = centred(n, mean, float(np.add.reduce(h * d * d)), lambda: float(np.add.reduce(h * d)))
    acc.sum_abs = float(np.add.reduce(h * np.abs(v)))
    return acc


@functools.cache
def _kinds(domain: str) -> np.ndarray:
    """Each pattern of a 16-bit domain: 0 a nonzero finite value, 1 zero (+0, -0), 2 NaN, 3 +Inf, 4 -Inf."""
    value = tables(domain)[0]
    kind = np.zeros(NBINS, dtype=np.int8)
    with np.errstate(invalid="ignore"):
        kind[value == 0], kind[np.isnan(value)], kind[value == np.inf], kind[value == -np.inf] = 1, 2, 3, 4
    return kind
