"""Bounded reads of part of a tensor: elements [start, start + count) of its C-order flattening,
fetched without touching the rest of it.

Two readers need this: a torch view saved non-contiguous (a transposed weight, a column, an
`expand`: shape and element strides over a storage) and a TF partitioned variable (rectangular
slices, each a C-contiguous array). Both split the requested flat range into rectangles
(`rectangles`) and read each rectangle of a strided layout with `gather`, which visits storage in
address order and fetches runs of bytes, each read at most twice the bytes it needs (plus SLACK
bytes, so that small gaps cost no extra syscall). So the memory a chunk takes is a small multiple
of the chunk, and the bytes read over a whole tensor about its size (at most about twice), whatever
the view's strides: a transposed tensor becomes a contiguous read, not one pass over its whole
storage per chunk.
"""
from __future__ import annotations

import io
import math
import os
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from ..errors import CorruptCheckpointError
from .files import open_regular

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray


    Bytes = NDArray[np.uint8]   # raw bytes on their way to dtypes.decode

SLACK = 512  # bytes a read may fetch beyond twice what it needs, to save a syscall on small gaps


def rectangles(shape: tuple[int, ...], start: int, count: int) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Elements [start, start + count) of the C-order flattening of an array of `shape`, as at most
    2 x rank - 1 rectangles (first index, size per dimension), in order: the C-order elements of each
    rectangle are consecutive in the flat range (keras_h5._hyperslab splits h5 reads the same way)."""
    if count <= 0:
        return
    if len(shape) <= 1:
        yield (start,) * len(shape), (count,) * len(shape)
        return
    row = math.prod(shape[1:])
    pos, end = start, start + count
    while pos < end:
        r, off = divmod(pos, row)
        if off == 0 and end - pos >= row:
            n = (end - pos) // row
            yield (r,) + (0,) * (len(shape) - 1), (n,) + tuple(shape[1:])
            pos += n * row
        else:
            take = min(row - off, end - pos)
            for lo, size in rectangles(shape[1:], off, take):
                yield (r,) + lo, (1,) + size
            pos += take


def pread(f: IO[bytes], n: int, offset: int) -> bytes:
    """Up to n bytes at `offset` of a file open_regular returned (a remote file: one range request, or
    none when its cache holds them); short only at the end of the file."""
    remote = getattr(f, "pread", None)
    if remote is not None:
        data: bytes = remote(n, offset)
        return data
    return os.pread(f.fileno(), n, offset)


def prefetch(f: IO[bytes], ranges: list[tuple[int, int]]) -> None:
    """Say which (offset, size) ranges of `f` are about to be read: a remote file fetches them at once,
    concurrently and coalesced, into its cache (a torch zip's local headers, one per storage record,
    spread over the file); a local file does nothing."""
    remote = getattr(f, "prefetch", None)
    if remote is not None:
        remote(ranges)


def read_ahead(f: IO[bytes], offset: int, n: int) -> int:
    """Say that a `readinto` of exactly n bytes at `offset` of `f` is to come (a URL's values, read while its other
    files' headers are still being read: analysis/stats/readahead.py): a remote file starts the range request that
    read would make, into a buffer of its own the read then takes its bytes from; a local file does nothing. The
    bytes now held (0: nothing started); what no read takes is let go at the command's end (`urls.forget_ahead`)."""
    remote = getattr(f, "read_ahead", None)
    return int(remote(offset, n)) if remote is not None else 0


class SeekableReader(io.RawIOBase):
    """A read-only, seekable file of `size` bytes whose subclass supplies the reading: position-keeping
    (tell, seek from any whence, never before 0) shared by the remote file, a window of a zip member and
    the budgeted remote scan."""

    size: int
    pos: int = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self.pos = base + offset
        return self.pos


class Window(SeekableReader):
    """Bytes [start, start + size) of an open file, as a seekable read-only file of their own (a stored member of a
    .keras zip for h5py; one item of a DCP .distcp file for the torch zip reader)."""

    def __init__(self, f: IO[bytes], start: int, size: int):
        super().__init__()
        self.f, self.start, self.size, self.pos = f, start, size, 0

    def readinto(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        n = max(0, min(len(mv), self.size - self.pos))
        if not n:
            return 0
        data = pread(self.f, n, self.start + self.pos)
        mv[:len(data)] = data
        self.pos += len(data)
        return len(data)


class RawFile:
    """Positioned reads of exact byte ranges from one open file (pread: no shared file position)."""

    def __init__(self, f: IO[bytes], name: str):
        self.f, self.name = f, name
        self.remote = hasattr(f, "pread")   # a URL (sources/remote.py): range requests, no descriptor
        self.fd = -1 if self.remote else f.fileno()

    def readinto(self, offset: int, buf: Bytes | memoryview) -> None:
        mv = (buf if isinstance(buf, memoryview) else buf.data).cast("B")
        done = 0
        while done < len(mv):
            if self.remote:
                data = pread(self.f, len(mv) - done, offset + done)
                n = len(data)
                mv[done:done + n] = data
            elif hasattr(os, "preadv"):
                n = os.preadv(self.fd, [mv[done:]], offset + done)
            else:  # pragma: no cover - Windows
                self.f.seek(offset + done)
                data = self.f.read(len(mv) - done)
                n = len(data)
                mv[done:done + n] = data
            if not n:
                raise CorruptCheckpointError(self.name, f"expected {len(mv)} bytes at offset {offset}, the file ends first")
            done += n

    def read_runs(self, offset: int, step: int, runs: int, run_bytes: int, out: Bytes) -> None:
        """`runs` runs of run_bytes each, `step` bytes apart in the file, packed into out."""
        mv = out.data.cast("B")
        preadv = None if self.remote else getattr(os, "preadv", None)
        for r in range(runs):
            piece = mv[r * run_bytes:(r + 1) * run_bytes]
            at = offset + r * step
            if preadv is None or preadv(self.fd, [piece], at) != run_bytes:
                self.readinto(at, piece)   # a short read: finish it, or say where the file ends


def extent(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Elements of storage a view touches, from its first element to its last."""
    if math.prod(shape) == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


def _fits(span: int, need: int, itemsize: int) -> bool:
    return span * itemsize <= 2 * need * itemsize + SLACK


def void_dtype(itemsize: int) -> np.dtype[Any]:
    """An opaque element of itemsize bytes, for moving raw elements (unsigned ints copy faster)."""
    import numpy as np

    return np.dtype(f"<u{itemsize}") if itemsize in (1, 2, 4, 8) else np.dtype((np.void, itemsize))


def gather(f: RawFile, base: int, itemsize: int, shape: tuple[int, ...], strides: tuple[int, ...],
           out: Bytes) -> None:
    """Fill `out` (uint8, numel * itemsize) with the raw elements, in C order, of the view of `shape`
    and element `strides` (>= 0) whose element 0 lies at byte `base` of `f`."""
    import numpy as np

    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    if any(n == 0 for n, _ in dims):
        return
    real = [i for i, (_, s) in enumerate(dims) if s != 0]
    # Storage order: dimensions by decreasing stride (a transposed view becomes a contiguous one);
    # stride-0 dimensions (expand) are read once and broadcast.
    order = sorted(real, key=lambda i: -dims[i][1])
    pshape = tuple(dims[i][0] for i in order)
    pstrides = tuple(dims[i][1] for i in order)
    if order == list(range(len(dims))):
        _gather_sorted(f, base, itemsize, pshape, pstrides, out)
        return
    tmp = np.empty(math.prod(pshape) * itemsize, dtype=np.uint8)
    _gather_sorted(f, base, itemsize, pshape, pstrides, tmp)
    v = void_dtype(itemsize)
    arr = tmp.view(v).reshape(pshape).transpose([order.index(i) for i in real])
    arr = np.expand_dims(arr, tuple(i for i, (_, s) in enumerate(dims) if s == 0))
    out.view(v).reshape([n for n, _ in dims])[...] = arr


def _gather_sorted(f: RawFile, base: int, isz: int, shape: tuple[int, ...], strides: tuple[int, ...],
                   out: Bytes) -> None:
    """gather() for strides > 0 in decreasing order (storage is visited in increasing address);
    base is in bytes, strides in elements."""
    import numpy as np

    need, span = math.prod(shape), extent(shape, strides)
    if _fits(span, need, isz):  # one read of the span: at most 2x the bytes needed, + SLACK
        if strides == contiguous_strides(shape):
            f.readinto(base, out)
        else:
            buf = np.empty(span * isz, dtype=np.uint8)
            f.readinto(base, buf)
            v = void_dtype(isz)
            src = np.lib.stride_tricks.as_strided(buf.view(v), shape, tuple(s * isz for s in strides))
            out.view(v).reshape(shape)[...] = src
        return
    s0 = strides[0]
    if len(shape) == 1:   # sparse elements (s0 > 2): groups of m whose span fits
        m = (SLACK + (s0 - 1) * isz) // ((s0 - 2) * isz)
        if m == 1:   # elements far apart (a column of a wide matrix): one read each
            f.read_runs(base, s0 * isz, shape[0], isz, out)
            return
        for i in range(0, shape[0], m):
            k = min(m, shape[0] - i)
            _gather_sorted(f, base + i * s0 * isz, isz, (k,), strides, out[i * isz:(i + k) * isz])
        return
    inner, istrides = shape[1:], strides[1:]
    n_in, e_in = math.prod(inner), extent(inner, istrides)
    rowb = n_in * isz
    if _fits(e_in, n_in, isz):
        # rows that fit one by one but not all together (s0 > 2 * n_in): m at a time
        m = (SLACK + (s0 - e_in) * isz) // ((s0 - 2 * n_in) * isz)
        if m == 1 and e_in <= 2 * n_in:  # one run per row (a transposed view): read them all, gather once
            if istrides == contiguous_strides(inner):
                f.read_runs(base, s0 * isz, shape[0], rowb, out)
                return
            runs = np.empty(shape[0] * e_in * isz, dtype=np.uint8)
            f.read_runs(base, s0 * isz, shape[0], e_in * isz, runs)
            v = void_dtype(isz)
            src = np.lib.stride_tricks.as_strided(runs.view(v), shape, (e_in * isz,) + tuple(s * isz for s in istrides))
            out.view(v).reshape(shape)[...] = src
            return
    else:
        m = 1
    for r in range(0, shape[0], m):
        k = min(m, shape[0] - r)
        if k == 1:
            _gather_sorted(f, base + r * s0 * isz, isz, inner, istrides, out[r * rowb:(r + 1) * rowb])
        else:
            _gather_sorted(f, base + r * s0 * isz, isz, (k,) + inner, strides, out[r * rowb:(r + k) * rowb])


def read_view(f: RawFile, base: int, itemsize: int, shape: tuple[int, ...], strides: tuple[int, ...],
              start: int, count: int) -> Bytes:
    """Raw bytes (uint8) of elements [start, start + count) of the C-order flattening of the view
    (shape, element strides) whose element 0 lies at byte `base` of `f`."""
    import numpy as np

    if itemsize < 1:
        raise ValueError("strided views of sub-byte dtypes are not supported")
    out = np.empty(count * itemsize, dtype=np.uint8)
    pos = 0
    for lo, size in rectangles(shape, start, count):
        n = math.prod(size)
        at = base + sum(i * s for i, s in zip(lo, strides)) * itemsize
        gather(f, at, itemsize, size, strides, out[pos * itemsize:(pos + n) * itemsize])
        pos += n
    return out


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for dim in reversed(shape):
        strides.append(acc)
        acc *= dim
    return tuple(reversed(strides))


def read_bytes(path: str, offset: int, size: int) -> bytes:
    with open_regular(path) as f:   # (a file swapped for a FIFO since it was opened must not block)
        f.seek(offset)
        data = f.read(size)
    if len(data) != size:
        raise CorruptCheckpointError(path, f"expected {size} bytes at offset {offset}, the file ends first")
    return data
