"""`--verify` for TF bundles: the masked crc32c of every `.index` block and of every tensor's bytes
(docs/formats.md section 4; tensorflow/core/util/tensor_bundle/tensor_bundle.cc)."""
from __future__ import annotations

import struct

from ...core import Checkpoint, TensorInfo
from ...core.files import open_regular
from ...core.io import read_bytes
from ...errors import CorruptCheckpointError
from .partitions import parts_of
from .table import read_table
from .wire import Bad, varint

VERIFY_CHUNK = 16 << 20


def _stream_crc(file: str, name: str, offset: int, size: int, crc: int) -> int:
    """crc32c extended over bytes [offset, offset + size) of `file`, read in VERIFY_CHUNK pieces."""
    from .. import crc32c

    with open_regular(file) as f:
        f.seek(offset)
        left = size
        while left:
            block = f.read(min(VERIFY_CHUNK, left))
            if not block:
                raise CorruptCheckpointError(file, f"tensor {name!r}: file ends before its {size} bytes")
            crc = crc32c.crc32c(block, crc)
            left -= len(block)
    return crc


def _string_crc(file: str, name: str, offset: int, size: int, numel: int) -> int:
    """tensor_bundle.cc WriteStringTensor: the crc covers each length as a little-endian uint32
    (uint64 when it does not fit; not the varints on disk), then the 4-byte masked length
    checksum, then the string bytes."""
    from .. import crc32c

    head = read_bytes(file, offset, min(size, 10 * numel + 4))
    pos, crc, total = 0, 0, 0
    for _ in range(numel):
        try:
            n, pos = varint(head, pos)
        except Bad as e:
            raise CorruptCheckpointError(file, f"tensor {name!r}: {e}") from None
        crc = crc32c.crc32c(struct.pack("<I" if n <= 0xFFFFFFFF else "<Q", n), crc)
        total += n
    if pos + 4 + total != size:
        raise CorruptCheckpointError(file, f"tensor {name!r}: string lengths add up to {pos + 4 + total} bytes, "
                                           f"the entry holds {size}")
    (stored_len,) = struct.unpack_from("<I", head, pos)
    if stored_len != crc32c.mask(crc):
        raise CorruptCheckpointError(file, f"tensor {name!r}: crc32c mismatch in its string lengths")
    crc = crc32c.crc32c(head[pos:pos + 4], crc)
    return _stream_crc(file, name, offset + pos + 4, total, crc)


def _check(t: TensorInfo, file: str, offset: int, size: int, stored: int) -> None:
    from .. import crc32c

    crc = _string_crc(file, t.name, offset, size, t.numel) if t.dtype == "STR" else _stream_crc(file, t.name, offset, size, 0)
    if crc32c.mask(crc) != stored:
        raise CorruptCheckpointError(file, f"tensor {t.name!r}: crc32c mismatch (stored {stored:#010x}, "
                                           f"computed {crc32c.mask(crc):#010x})")


def verify(ckpt: Checkpoint) -> list[str]:
    """Check the index blocks' and every tensor's masked crc32c; raise CorruptCheckpointError on a
    mismatch. Tensor bytes are streamed in chunks."""
    index = ckpt.files[0]
    try:
        read_table(index, verify=True)
    except Bad as e:
        raise CorruptCheckpointError(index, str(e)) from None
    checked = 0
    for t in ckpt:
        parts = parts_of(t)
        if parts is not None:
            ranges = [(p.file, p.offset, p.nbytes, p.crc32c) for p in parts]
        else:
            crc = t.extra.get("crc32c")
            ranges = [(t.file, t.offset or 0, t.nbytes, crc if isinstance(crc, int) else None)]
        for file, offset, size, stored in ranges:
            if stored is not None:
                _check(t, file, offset, size, stored)
                checked += 1
    return [f"verified: {checked} tensor crc32c checksums and the index block checksums match"]
