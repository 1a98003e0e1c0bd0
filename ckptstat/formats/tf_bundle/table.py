"""The `.index` file: a LevelDB-style table (docs/formats.md section 4; google/leveldb
doc/table_format.md): footer -> index block -> data blocks -> (key, value) entries."""
from __future__ import annotations

import os
import struct
from collections.abc import Iterator

from ...core.files import open_regular
from .wire import Bad, varint

MAGIC = 0xDB4775248B80FB57
MAGIC_BYTES = struct.pack("<Q", MAGIC)
FOOTER = 48
MAX_INDEX_BYTES = 1 << 31


def block_handle(buf: bytes, pos: int, limit: int) -> tuple[int, int, int]:
    """(offset, size, next position) of the BlockHandle at buf[pos]."""
    offset, pos = varint(buf, pos, limit)
    size, pos = varint(buf, pos, limit)
    return offset, size, pos


def _block(data: bytes, offset: int, size: int, what: str, verify: bool) -> bytes:
    """A block's contents; its 5-byte trailer is a compression byte and a masked crc32c of
    contents + that byte."""
    if offset + size + 5 > len(data):
        raise Bad(f"{what} block handle (offset {offset}, size {size}) points past the end of the {len(data)}-byte index")
    contents = data[offset:offset + size]
    ctype = data[offset + size]
    if ctype != 0:
        raise Bad(f"{what} block is compressed (type {ctype}); TF bundles are written uncompressed")
    if verify:
        from .. import crc32c

        (stored,) = struct.unpack_from("<I", data, offset + size + 1)
        actual = crc32c.mask(crc32c.crc32c(data[offset:offset + size + 1]))
        if stored != actual:
            raise Bad(f"{what} block at offset {offset}: crc32c mismatch (stored {stored:#010x}, computed {actual:#010x})")
    return contents


def block_entries(block: bytes, what: str) -> Iterator[tuple[bytes, bytes]]:
    """The (key, value) entries of a block: `varint32 shared, varint32 unshared, varint32 value_len,
    key suffix, value`, then the restart array, which a full scan does not need."""
    if len(block) < 4:
        raise Bad(f"{what} block of {len(block)} bytes is too short for its restart count")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 - 4 * num_restarts
    if limit < 0:
        raise Bad(f"{what} block claims {num_restarts} restart points, more than its {len(block)} bytes hold")
    pos, key = 0, b""
    while pos < limit:
        shared, pos = varint(block, pos, limit, 5)
        unshared, pos = varint(block, pos, limit, 5)
        vlen, pos = varint(block, pos, limit, 5)
        if shared > len(key) or pos + unshared + vlen > limit:
            raise Bad(f"{what} block entry at byte {pos} overruns its block")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + vlen]
        pos += vlen


def read_table(path: str, verify: bool = False) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of a `.index` table, in key order; verify=True also checks each block's crc32c.

    A table is written once, front to back (leveldb table_builder.cc): data blocks follow one another
    and hold keys in increasing order. A hostile index could list one data block many times, or
    rebuild long keys from prefix-shared entries of a few bytes each (quadratic in the block): both are
    refused, so the work and the memory stay proportional to the file's size."""
    with open_regular(path, "index") as f:
        size = os.fstat(f.fileno()).st_size
        if size < FOOTER:
            raise Bad(f"file is {size} bytes, too short for a table footer ({FOOTER} bytes)")
        if size > MAX_INDEX_BYTES:
            raise Bad(f"index file of {size} bytes is larger than any tensor-bundle index ckptstat accepts")
        data = f.read(size)
    if len(data) < FOOTER:
        raise Bad(f"file shrank to {len(data)} bytes while it was read")
    footer = data[-FOOTER:]
    if footer[-8:] != MAGIC_BYTES:
        raise Bad(f"not a tensor-bundle index: bad table magic {footer[-8:].hex()} (expected {MAGIC_BYTES.hex()})")
    _, _, pos = block_handle(footer, 0, 40)              # metaindex handle (TF writes an empty one)
    ioff, isize, _ = block_handle(footer, pos, 40)
    index = _block(data, ioff, isize, "index", verify)
    out: list[tuple[bytes, bytes]] = []
    next_block, key_bytes, max_key_bytes = 0, 0, 8 * len(data) + (1 << 20)
    for _, handle in block_entries(index, "index"):
        boff, bsize, _ = block_handle(handle, 0, len(handle))
        if boff < next_block:
            raise Bad(f"data block at offset {boff} overlaps or repeats the block before it (which ends at {next_block})")
        next_block = boff + bsize + 5
        for key, value in block_entries(_block(data, boff, bsize, "data", verify), "data"):
            if out and key <= out[-1][0]:
                raise Bad(f"index entries out of order: key {key[:40]!r} after {out[-1][0][:40]!r}")
            key_bytes += len(key)
            if key_bytes > max_key_bytes:
                raise Bad(f"index keys add up to more than {max_key_bytes:,} bytes in a {len(data):,}-byte file")
            out.append((key, value))
    return out
