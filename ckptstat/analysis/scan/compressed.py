"""`ckptstat scan` of a pickle inside a compressed stream: `joblib.dump(obj, path, compress=...)` (zlib, gzip, bz2,
lzma, xz: joblib/compressor.py; the whole stream, pickle and inline arrays, goes through the compressor), a
`.pkl.gz`-style file that `pickle.load(gzip.open(path))` reads, and a zstd one (pandas' `.pkl.zst`, read through
`zstandard.open`: every frame, one after another), decompressed with the `zstd` extra (`zstandard`; without it
`unknown`). torch.load cannot read one (its first byte is no
pickle opcode: scan said "unreadable"), while joblib.load, and those loaders, decompress it and unpickle what comes
out from its first byte.

The stream is decompressed as the walk reads it (nothing is written), at most `pickle_bytes` (the --limit) of
output, and never more than `pickle_ratio` x the file's bytes + 1 MiB; a pickle longer than that is unknown. lz4
(joblib's lz4 compressor; no decoder in Python's standard library) is unknown. The pickle is judged by torch's
allowlist, with numpy's own reconstruction and joblib's array wrappers allowed, and walked as joblib.load's unpickler
reads it: the arrays joblib writes inline after each wrapper are read past (analysis/scan/joblib_arrays.py). joblib <
0.10's 'ZF' files (a hex length, then a zlib stream; joblib.load still reads them) too.
"""
from __future__ import annotations

import bz2
import lzma
import zlib
from typing import IO, Any

from ...core.archive_magic import codec
from ...core.limits import limits
from ...formats.dcp.extensions import available as zstd_available
from ...formats.torch.streams import FileWindow, Source
from .joblib_arrays import reach, safe_verdict, walk_joblib
from .torch_load import Trace, report

FORMAT = "compressed pickle"
LOADER = "joblib.load (or pickle.load of the decompressed stream)"
LZ4 = b"\x04\x22\x4d\x18"
COMPAT_NAME = "joblib < 0.10 zfile"
ZF_HEADER = 2 + len(hex(2 ** 64))   # b"ZF" and the length in hex, padded (joblib/numpy_pickle_compat.py read_zfile)
_CHUNK = 1 << 16
# What liblzma may allocate to decode a stream: its header names the dictionary (xz -9 needs ~65 MiB), which a
# hostile header sets to 4 GiB; past this the stream is unknown, never decoded (lzma's memlimit).
DECODER_MEMORY = 128 << 20


def kind(head: bytes) -> str | None:
    """The compressor whose stream starts with `head` (joblib/numpy_pickle_utils.py `_detect_compressor` and
    compressor.py's prefixes; zlib by its RFC 1950 header: deflate, and the check bits), or None."""
    if head[:2] == b"ZF":
        return COMPAT_NAME
    common = codec(head)   # gzip, bz2, xz, zstd (core/archive_magic.py)
    if common is not None:
        return common
    if head[:2] == b"\x5d\x00":
        return "lzma"
    if head[:4] == LZ4:
        return "lz4"
    if len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and (head[0] << 8 | head[1]) % 31 == 0:
        return "zlib"
    return None


class _UpTo:
    """A FileWindow read as a file is (`read(n)`: at most n bytes, b"" at its end), for zstandard's stream_reader."""

    def __init__(self, raw: FileWindow):
        self.raw = raw

    def read(self, n: int = -1) -> bytes:
        k = self.raw.left() if n < 0 else min(n, self.raw.left())
        return self.raw.read(k) if k > 0 else b""


class _Decompressed(Source):
    """The decompressed bytes of the stream at `f`'s start, at most `bound` of them; `cut` when there were more. A
    gzip, bz2, xz or lzma file may hold several streams one after another, which gzip.open, bz2.open and lzma.open
    (joblib's LZMA files too) read as one: so is it here (a pickle split across two members is still one pickle)."""

    def __init__(self, f: IO[bytes], size: int, name: str, bound: int):
        super().__init__(bound)
        self.raw, self.name = FileWindow(f, 0, size), name
        if name == COMPAT_NAME:   # the zlib stream after the header (and a space joblib <= 0.8.4 wrote)
            start = ZF_HEADER + (self.raw.read(min(ZF_HEADER + 1, size))[ZF_HEADER:] == b" ")
            self.raw = FileWindow(f, start, max(size - start, 0))
        self.d: Any = self._decoder()
        self.pending = b""            # input a finished stream left over, for the next one
        self.produced, self.cut = 0, False
        self.error: str | None = None

    def read(self, n: int) -> bytes:
        self.cut = self.cut or n > self.left()   # past the bound: whether the stream holds that much is not known
        return super().read(n)

    def skip(self, n: int) -> None:
        self.cut = self.cut or n > self.left()
        super().skip(n)

    def _decoder(self) -> Any:
        if self.name == "zstd":   # a reader, whose read(n) hands back at most n bytes (decompressobj has no bound)
            import zstandard

            source: Any = _UpTo(self.raw)   # (a file as zstandard reads one: read(n) only)
            return zstandard.ZstdDecompressor(max_window_size=DECODER_MEMORY).stream_reader(source, read_across_frames=True)
        if self.name in ("zlib", "gzip", COMPAT_NAME):
            return zlib.decompressobj(16 + zlib.MAX_WBITS if self.name == "gzip" else zlib.MAX_WBITS)
        if self.name == "bz2":
            return bz2.BZ2Decompressor()
        return lzma.LZMADecompressor(lzma.FORMAT_XZ if self.name == "xz" else lzma.FORMAT_ALONE, memlimit=DECODER_MEMORY)

    def _input(self) -> bytes:
        if self.pending:
            data, self.pending = self.pending, b""
            return data
        return self.raw.read(min(_CHUNK, self.raw.left())) if self.raw.left() > 0 else b""

    def _fill(self, n: int) -> bytes:
        out = self._unzstd(n) if self.name == "zstd" else self._inflate(n)
        room = self.length - self.produced
        if len(out) > room:
            self.cut, out = True, out[:room]
        self.produced += len(out)
        return out

    def _unzstd(self, n: int) -> bytes:
        import zstandard

        if self.error is None:
            try:
                return bytes(self.d.read(max(n, _CHUNK)))
            except zstandard.ZstdError as e:
                self.error = str(e)
        return b""

    def _inflate(self, n: int) -> bytes:
        out = b""
        while not out and self.error is None:
            if self.d.eof:   # the next stream of a multi-stream file (not zlib's: joblib's zlib reader reads one)
                self.pending += self.d.unused_data
                if self.name in ("zlib", COMPAT_NAME) or not (self.pending or self.raw.left() > 0):
                    break
                self.d = self._decoder()
            # zlib hands back the input it did not use; bz2 and lzma keep it, and say when they need more
            zl = self.name in ("zlib", "gzip", COMPAT_NAME)
            data = (self.d.unconsumed_tail or self._input()) if zl else self._input() if self.d.needs_input else b""
            try:
                out = self.d.decompress(data, max(n, _CHUNK))
            except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError) as e:
                self.error = str(e)
            if not out and not data and not self.d.eof:
                break
        return out


def judge_compressed(path: str, f: IO[bytes], size: int, head: bytes, numpy_own: frozenset[str]) -> dict[str, Any] | None:
    """The scan report of a compressed pickle stream (see the module doc), or None when `head` starts no stream;
    `numpy_own`: the globals numpy's own reconstruction imports (allowed, as for an .npy object array)."""
    name = kind(head)
    if name is None:
        return None
    t = Trace(path, format=f"{FORMAT} ({name})")
    t.reads = f"{LOADER} decompresses the {name} stream and unpickles it from its first byte"
    if name == "lz4":
        t.unknown.append("an lz4 frame (joblib's lz4 compressor), which scan does not decompress")
    elif name == "zstd" and not zstd_available():
        t.unknown.append("a zstd stream (pandas' .pkl.zst), which scan decompresses with the 'zstd' extra (zstandard is "
                         "not installed): pip install 'ckptstat[zstd]'")
    else:
        bound = limits().inflated_pickle(size)
        src = _Decompressed(f, size, name, bound)
        w, arrays = walk_joblib(src, f"the decompressed {name} stream", None, numpy_own, inline=name != COMPAT_NAME)
        if src.error and "memory" in src.error.lower():
            t.unknown.append(f"the {name} stream's header asks for more than the {DECODER_MEMORY:,} bytes of decoder "
                             "memory scan allows")
        elif not w.globals and w.failure is not None and w.opcodes <= 1:
            return None   # not a pickle inside: another file that happens to start like a compressed stream
        reach(t, w, arrays, numpy_own)
        if w.failure and src.cut:
            t.unknown.append(f"the stream decompresses past the {bound:,} bytes scan reads (--limit pickle_bytes=N)")
        elif w.failure:
            t.notes.append(f"the unpickler raises at offset {w.fail_at}: {w.failure}")
    return report(t, safe_verdict(LOADER), loader=LOADER)
