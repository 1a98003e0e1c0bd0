"""Values of tensors whose storage record some tool recompressed (docs/formats.md section 2: torch
itself stores records uncompressed, so their bytes are read in place by core.io)."""
from __future__ import annotations

import os
import tempfile
import zipfile
from typing import IO, TYPE_CHECKING, Any

from ...core import TensorInfo, dtypes
from ...core.files import open_regular
from ...core.io import RawFile, extent, read_view
from ...core.limits import limits
from ...core.tensor import read_flat_file
from ...errors import CheckpointError, CorruptCheckpointError
from .containers import zip_open

if TYPE_CHECKING:  # numpy is imported where values are read, not on the header-only path
    from numpy.typing import NDArray


class ZipStreamReader:
    """Reads tensors from compressed records by streaming decompression.

    A deflate stream can only be read forwards, so the reader keeps one member open with its
    position: consecutive chunks of a tensor continue where the last ended (linear time), and the
    member is reopened from byte 0 only when a read goes backwards or another record is asked for.
    A strided view visits its storage out of order chunk after chunk, so its record is decompressed
    once into an anonymous temporary file and the view read from there as from a stored record.
    At most one member and one temporary file are open at a time; `close()` releases them."""

    SKIP_BLOCK = 1 << 18  # bytes decompressed at a time when skipping or spilling

    def __init__(self, path: str, crc: bool = True):
        self.path, self.crc = path, crc   # crc: check members' CRC-32s (not torch's: containers.CheckedZipFile)
        self._pid = 0
        self._file: IO[bytes] | None = None
        self._zip: zipfile.ZipFile | None = None
        self._member: IO[bytes] | None = None
        self._record = ""
        self._pos = 0
        self._spill: IO[bytes] | None = None
        self._spill_record = ""
        self._spilled = 0

    def __call__(self, info: TensorInfo, start: int, count: int) -> NDArray[Any]:
        if info.offset is not None:   # a stored record beside compressed ones: read it in place
            return read_flat_file(info, start, count)
        if self._pid != os.getpid():   # forked (stats workers): never share the parent's file positions
            self._close_member()       # (closing our inherited copies leaves the parent's open)
            self._close_spill()
            self._pid = os.getpid()
        record, base = info.extra.get("record"), info.extra.get("storage_byte_offset")
        if not isinstance(record, str) or not isinstance(base, int):
            raise ValueError(f"{info.name}: no zip record noted for it")
        itemsize = info.dt.bits // 8
        if info.stride is None:
            raw = self._read(record, base + start * itemsize, count * itemsize)
            return dtypes.decode(raw, info.dtype, count, info.byteorder)
        spill = self._spilled_to(record, base + extent(info.shape, info.stride) * itemsize)
        view = read_view(RawFile(spill, self.path), base, itemsize, info.shape, info.stride, start, count)
        return dtypes.decode(view, info.dtype, count, info.byteorder)

    def _read(self, record: str, lo: int, n: int) -> bytes:
        """Bytes [lo, lo + n) of the record, decompressed, continuing the open member if it can."""
        member = self._member
        if member is None or record != self._record or lo < self._pos:
            self._close_member()
            self._file = open_regular(self.path)
            self._zip = zip_open(self.path, self._file, self.crc)
            member = self._member = self._zip.open(record)
            self._record, self._pos = record, 0
        try:
            while self._pos < lo:
                skipped = len(member.read(min(lo - self._pos, max(n, 1 << 16), self.SKIP_BLOCK)))
                if not skipped:
                    break
                self._pos += skipped
            raw = member.read(n) if self._pos == lo else b""
        except BaseException:
            self._close_member()
            raise
        self._pos += len(raw)
        if len(raw) != n:
            self._close_member()
            raise CorruptCheckpointError(self.path, f"{record} ends before byte {lo + n:,}")
        return raw

    def _spilled_to(self, record: str, end: int) -> IO[bytes]:
        """An anonymous temporary file holding the record's bytes [0, end) at least."""
        cap = limits().spill_bytes
        if end > cap:
            raise CheckpointError(self.path, f"{record}: a strided view needs {end:,} bytes of it decompressed to a "
                                             f"temporary file, more than {cap:,} (--limit spill_bytes=N)")
        if self._spill is None or record != self._spill_record:
            self._close_spill()
            self._spill = tempfile.TemporaryFile()
            self._spill_record, self._spilled = record, 0
        spill = self._spill
        while self._spilled < end:
            block = self._read(record, self._spilled, min(end - self._spilled, self.SKIP_BLOCK))
            spill.seek(self._spilled)
            spill.write(block)
            self._spilled += len(block)
        spill.flush()
        return spill

    def _close_member(self) -> None:
        for f in (self._member, self._zip, self._file):
            if f is not None:
                f.close()
        self._member = self._zip = self._file = None

    def _close_spill(self) -> None:
        if self._spill is not None:
            self._spill.close()
        self._spill = None

    def close(self) -> None:
        if self._pid == os.getpid():
            self._close_member()
            self._close_spill()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
