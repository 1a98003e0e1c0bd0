"""Byte sources for the pickle walk (pickle_walk.py): a window of a seekable file, bytes in memory, a raw
deflate zip member decompressed as it is read. Each reads at most its length; a big argument is
skipped (seeked over, or decompressed and dropped), never kept."""
from __future__ import annotations

import zlib
from typing import IO

_CHUNK = 1 << 16


class Truncated(Exception):
    """The stream ended inside an opcode: the C unpickler says 'pickle data was truncated'."""


class PastBound(Exception):
    """A compressed stream goes on past the bytes scan decompresses of it (`cap`): what follows is unknown."""


# ---------------------------------------------------------------------------------------------
# Byte sources: a window of a seekable file, bytes in memory, a deflate stream. Each reads at most
# its length, and skips big arguments without keeping them.

class Source:
    """Sequential reads over `length` bytes; `pos` counts from the source's start."""

    def __init__(self, length: int):
        self.length, self.pos = max(length, 0), 0
        self._buf, self._at = b"", 0        # buffered bytes, and the index of pos in them

    def _fill(self, n: int) -> bytes:     # about n of the bytes after the buffered ones (b"": no more); a
        raise NotImplementedError         # decompressor may give more than asked (a chunk's worth)

    def _drop(self, n: int) -> bytes:     # skip n bytes after the buffered ones; what a fill gave past them
        while n > 0:
            got = self._fill(min(n, _CHUNK))
            if not got:
                return b""
            if len(got) > n:   # kept: dropping it would hide the opcodes after a big argument
                return got[n:]
            n -= len(got)
        return b""

    def left(self) -> int:
        return self.length - self.pos

    def read(self, n: int) -> bytes:
        """Exactly n bytes, or Truncated."""
        if n > self.left():
            raise Truncated
        have = len(self._buf) - self._at
        if have < n:
            parts = [self._buf[self._at:]]
            while have < n:
                got = self._fill(max(n - have, _CHUNK))
                if not got:
                    raise Truncated
                parts.append(got)
                have += len(got)
            self._buf, self._at = b"".join(parts), 0
        out = self._buf[self._at:self._at + n]
        self._at += n
        self.pos += n
        return out

    def byte(self) -> int:
        """read(1)[0]: an opcode, most often already buffered (the walk reads one an opcode)."""
        at = self._at
        if at < len(self._buf) and self.pos < self.length:
            self._at, self.pos = at + 1, self.pos + 1
            return self._buf[at]
        return self.read(1)[0]

    def skip(self, n: int) -> None:
        """Skip exactly n bytes (an argument nobody needs), or Truncated."""
        if n > self.left():
            raise Truncated
        have = len(self._buf) - self._at
        if n <= have:
            self._at += n
        else:
            self._buf, self._at = self._drop(n - have), 0
        self.pos += n

    def readline(self, limit: int, end: int | None = None) -> tuple[bytes, bool, bool]:
        """Bytes up to and including the next newline: (the first `limit` of them, whether there were
        more, whether a newline was found). With `end`, stops there without a newline; without it, a
        stream that ends before a newline is Truncated."""
        stop = self.length if end is None else min(end, self.length)
        kept: list[bytes] = []
        size, long = 0, False
        while self.pos < stop:
            if self._at >= len(self._buf):
                self._buf, self._at = self._fill(min(_CHUNK, self.left())), 0
                if not self._buf:
                    raise Truncated
            lim = min(len(self._buf), self._at + stop - self.pos)
            nl = self._buf.find(b"\n", self._at, lim)
            e = lim if nl < 0 else nl + 1
            piece = self._buf[self._at:e]
            self.pos += len(piece)
            self._at = e
            if size + len(piece) <= limit:
                kept.append(piece)
                size += len(piece)
            else:
                long = True
            if nl >= 0:
                return b"".join(kept), long, True
        if end is None:
            raise Truncated
        return b"".join(kept), long, False


class FileWindow(Source):
    def __init__(self, f: IO[bytes], start: int, length: int):
        super().__init__(length)
        self.f, self.start = f, start
        self._next = start                # file offset of the byte after the buffered ones

    def _fill(self, n: int) -> bytes:
        n = min(n, self.start + self.length - self._next)
        if n <= 0:
            return b""
        self.f.seek(self._next)
        got = self.f.read(n)
        self._next += len(got)
        return got

    def _drop(self, n: int) -> bytes:
        self._next += n
        return b""


class BytesSource(Source):
    def __init__(self, data: bytes):
        super().__init__(len(data))
        self._data = data
        self._next = 0

    def _fill(self, n: int) -> bytes:
        out = self._data[self._next:self._next + n]
        self._next += len(out)
        return out

    def _drop(self, n: int) -> bytes:
        self._next += n
        return b""


class InflateSource(Source):
    """A raw-deflate zip member decompressed as it is read: at most `length` bytes come out, from at
    most `compressed` bytes read at `start`. `error` is set if the stream is damaged. `cap`: past that many
    bytes out, a read raises PastBound (deflate reaches 1032:1: a walk of what a small file inflates to is bounded by
    the file, as the reader's pickle_ratio bounds data.pkl)."""

    def __init__(self, f: IO[bytes], start: int, compressed: int, length: int, cap: int | None = None):
        super().__init__(length)
        self.raw = FileWindow(f, start, compressed)
        self.z = zlib.decompressobj(-15)
        self.produced = 0
        self.error: str | None = None
        self.cap = length if cap is None else cap

    def _fill(self, n: int) -> bytes:
        out = b""
        while not out and self.produced < self.length and self.error is None:
            data = self.z.unconsumed_tail
            if not data:
                if self.raw.left() <= 0 or self.z.eof:
                    break
                data = self.raw.read(min(_CHUNK, self.raw.left()))
            if self.produced >= self.cap:
                raise PastBound(f"it inflates past the {self.cap:,} bytes scan decompresses of it (--limit "
                                "pickle_ratio=N, pickle_bytes=N)")
            try:
                out = self.z.decompress(data, min(max(n, _CHUNK), self.length - self.produced, self.cap - self.produced))
            except zlib.error as e:
                self.error = str(e)
                break
            if not out and self.z.eof:
                break
        self.produced += len(out)
        return out

    def drain(self) -> int:
        """Decompress what is left (up to `length`); the number of bytes the member really holds."""
        while self.produced < self.length and self._fill(_CHUNK):
            pass
        return self.produced
