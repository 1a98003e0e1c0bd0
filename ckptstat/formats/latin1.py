"""Values stored as latin-1 text: a protocol-2 pickle has no bytes opcode, so `pickle.dump(array, f, protocol=2)`
writes an array's bytes as `_codecs.encode(text, 'latin1')` of a BINUNICODE string, UTF-8 that holds each byte below
0x80 as itself and each other as two (formats/numpy_pickle.py). The bytes are not in the file as they are: a tensor's
`extra["latin1"]` says where its UTF-8 is, and this reader decodes it, once, into an anonymous temporary file (at
most `spill_bytes`), checking it as `_codecs.encode` would (every character below 256, the UTF-8 whole, the count the
array's), then reads the tensor from there as from a stored one. One temporary file is kept, for the last tensor read
(a `stats` pass reads a tensor's chunks one after another: core/spill.py); `close()` releases it."""
from __future__ import annotations

import codecs
from functools import partial
from typing import IO, TYPE_CHECKING, Any, cast

from ..core import TensorInfo, dtypes
from ..core.files import open_regular
from ..core.io import RawFile, contiguous_strides, read_view
from ..core.limits import limits
from ..core.spill import KeptSpill
from ..core.tensor import read_flat_file
from ..errors import CheckpointError, CorruptCheckpointError

if TYPE_CHECKING:
    from numpy.typing import NDArray

BLOCK = 1 << 20   # UTF-8 bytes decoded at a time


class Latin1Reader:
    def __init__(self, path: str):
        self.path = path
        self.spill = KeptSpill()

    def __call__(self, info: TensorInfo, start: int, count: int) -> NDArray[Any]:
        if info.offset is not None:   # an array stored as bytes beside the latin-1 ones
            return read_flat_file(info, start, count)
        at, length, codec = cast("tuple[int, int, str]", info.extra["latin1"])
        cap = limits().spill_bytes
        if info.nbytes > cap:
            raise CheckpointError(self.path, f"array {info.name!r}: its {info.nbytes:,} bytes, stored as latin-1 text, "
                                             f"are decoded to a temporary file, more than {cap:,} (--limit spill_bytes=N)")
        spill = self.spill.get((at, length), partial(self._decode, info, at, length, codec))
        itemsize = info.dt.bits // 8
        view = read_view(RawFile(spill, self.path), 0, itemsize, info.shape, info.stride or contiguous_strides(info.shape),
                         start, count)
        return dtypes.decode(view, info.dtype, count, info.byteorder)

    def _decode(self, info: TensorInfo, at: int, length: int, codec: str, spill: IO[bytes]) -> None:
        """The array's bytes from its text at `at` (UTF-8, or protocol 0's raw-unicode-escape), checked as
        _codecs.encode(text, 'latin1') checks them."""
        decoder = codecs.getincrementaldecoder(codec)()
        written, done = 0, 0
        try:
            with open_regular(self.path) as f:
                f.seek(at)
                while done < length:
                    block = f.read(min(BLOCK, length - done))
                    if not block:
                        raise CorruptCheckpointError(self.path, f"array {info.name!r}: its text ends at byte "
                                                                f"{at + done:,}, before its {length:,} bytes")
                    done += len(block)
                    out = decoder.decode(block, final=done == length).encode("latin-1")
                    written += len(out)
                    if written > info.nbytes:
                        break
                    spill.write(out)
        except (UnicodeDecodeError, UnicodeEncodeError) as e:
            raise CorruptCheckpointError(self.path, f"array {info.name!r}: its text is not latin-1 in {codec} "
                                                    f"({e.reason}), which _codecs.encode(text, 'latin1') raises on") from None
        if written != info.nbytes:
            raise CorruptCheckpointError(self.path, f"array {info.name!r}: its text holds {written:,}+ bytes for "
                                                    f"{list(info.shape)} {info.dtype} ({info.nbytes:,} bytes)")

    def close(self) -> None:
        self.spill.close()
