"""DCP stream extensions (`FileSystemWriter(_extensions=[...])`, each item's `_StorageInfo.transform_descriptors`),
and items written through torch's ZStandard stream extension (`stream.zstd/1`, torch/distributed/checkpoint/
_extension.py): the item's bytes are one zstd frame (RFC 8878) of what DCP would otherwise store, a torch.save zip
(a tensor chunk or a non-tensor object). Decoded with the `zstandard` package (the `zstd` extra), bounded:

- the frame is walked first without decompressing (RFC 8878 3.1.1: its header, then each block's 3-byte header:
  Last_Block, Block_Type, Block_Size), so a frame cut short or running past its item is refused before any work;
- the Frame_Content_Size the header may declare (torch's writer, `zstandard`'s stream_writer, declares none) must not
  pass the item's bound: a tensor chunk's bytes + ZIP_ALLOWANCE (a torch.save zip's records beside the data), and for
  any item limits().inflate_ratio x its compressed bytes + expansion_floor (core/tensor.py `check_inflation`);
- decompression streams into a temporary file, 1 MiB at a time, and stops past the bound; what a frame declares
  must be what it holds.

Each failure is one line naming the `.distcp` file."""
from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from ...core.archive_magic import ZSTD_MAGIC
from ...core.io import Window, pread
from ...core.limits import limits
from ...core.tensor import check_inflation
from ...errors import CorruptCheckpointError, missing_extra

# _extension.py: the extensions torch registers (ExtensionRegistry), by registry name
KNOWN_EXTENSIONS = {"stream.zstd": "zstd compression, torch's ZStandard extension"}
DESCRIPTOR = "stream.zstd/1"           # ZStandard.get_descriptor(): registry name / version
ZIP_ALLOWANCE = 64 << 10               # a torch.save zip's bytes beside its one storage: data.pkl, byteorder, version,
                                       # serialization_id, local headers, the central directory, 64-byte alignment
_BLOCK = 3                             # a block header's bytes (RFC 8878 3.1.1.2)
_OUT = 1 << 20                         # bytes decompressed at a time


@dataclass(frozen=True)
class Item:
    """Where one item's bytes lie (a `_StorageInfo`), and the stream extensions it was written through."""
    file: str
    offset: int
    length: int
    extensions: tuple[str, ...] = ()


def extensions_text(descriptors: list[str] | tuple[str, ...]) -> str:
    """`stream.zstd/1 (zstd compression, torch's ZStandard extension)`: each descriptor, with what it is if known."""
    def one(d: str) -> str:
        known = KNOWN_EXTENSIONS.get(d.partition("/")[0])
        return f"{d} ({known})" if known else f"{d} (not one torch registers)"
    return ", ".join(one(d) for d in descriptors)


def decodable(item: Item) -> bool:
    """Whether the item went through exactly the ZStandard extension (an extension torch does not register, or a
    chain of several, is not decoded)."""
    return item.extensions == (DESCRIPTOR,)


def available() -> bool:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True


def _zstandard(what: str) -> Any:
    try:
        import zstandard
    except ImportError:
        raise missing_extra(f"{what}, stored through DCP stream extension {extensions_text([DESCRIPTOR])},", "zstandard",
                            "zstd") from None
    return zstandard


def _frame(zstd: Any, f: IO[bytes], item: Item, what: str) -> int | None:
    """Walk the item's frame (see the module doc): its declared content size, or None when it declares none."""
    def bad(why: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(item.file, f"{what} at offset {item.offset:,}: {why}")

    head = pread(f, 18, item.offset)   # Magic, Frame_Header_Descriptor, at most 13 more header bytes
    if head[:4] != ZSTD_MAGIC:
        raise bad("not a zstd frame (stream.zstd/1 items are one)")
    try:
        size = zstd.frame_header_size(head)
        params = zstd.get_frame_parameters(head)
    except zstd.ZstdError as e:
        raise bad(f"a damaged zstd frame header ({e})") from None
    if params.dict_id:
        raise bad(f"the zstd frame needs dictionary {params.dict_id} (torch's writer uses none)")
    at = item.offset + size
    end = item.offset + item.length
    while True:
        raw = pread(f, _BLOCK, at)
        if len(raw) < _BLOCK or at + _BLOCK > end:
            raise bad(f"the zstd frame is cut short at byte {at - item.offset:,} of {item.length:,} (no last block)")
        h = int.from_bytes(raw, "little")
        kind, n = (h >> 1) & 3, h >> 3
        if kind == 3:
            raise bad(f"zstd block at byte {at - item.offset:,} has the reserved type 3")
        at += _BLOCK + (1 if kind == 1 else n)   # an RLE block stores one byte, repeated n times
        if at > end:
            raise bad(f"the zstd frame is cut short: a block runs to byte {at - item.offset:,} of {item.length:,}")
        if h & 1:
            break
    if params.has_checksum and at + 4 > end:
        raise bad("the zstd frame is cut short before its checksum")
    declared: int = params.content_size
    return None if declared == zstd.CONTENTSIZE_UNKNOWN else declared


def decompressed(f: IO[bytes], item: Item, what: str, tensor_bytes: int | None = None) -> tuple[IO[bytes], int]:
    """The item's frame decompressed into a temporary file (the caller closes it) and its size; `tensor_bytes`: the
    bytes of the tensor chunk the item holds, None for a non-tensor item (see the module doc for the bounds)."""
    zstd = _zstandard(what)
    declared = _frame(zstd, f, item, what)
    lim = limits()
    bound = lim.inflate_ratio * item.length + lim.expansion_floor
    if tensor_bytes is not None:
        bound = min(bound, tensor_bytes + ZIP_ALLOWANCE)
    where = f"{what} at offset {item.offset:,}"
    if declared is not None:
        if tensor_bytes is not None and declared > bound:
            raise CorruptCheckpointError(item.file, f"{where}: its zstd frame declares {declared:,} bytes, more than the "
                                                    f"{tensor_bytes:,}-byte chunk's zip can take; not decompressed")
        check_inflation(item.file, where + " (zstd)", declared, item.length)
    out = tempfile.TemporaryFile()
    try:
        done = 0
        reader = zstd.ZstdDecompressor().stream_reader(Window(f, item.offset, item.length), read_across_frames=False)
        try:
            while block := reader.read(_OUT):
                done += len(block)
                if done > bound:
                    what_bound = (f"the {tensor_bytes:,}-byte chunk's zip can take" if tensor_bytes is not None
                                  else f"{lim.inflate_ratio}x its {item.length:,} bytes (--limit inflate_ratio=N)")
                    raise CorruptCheckpointError(item.file, f"{where}: its zstd frame inflates past {bound:,} bytes, "
                                                            f"more than {what_bound}; not decompressed further")
                out.write(block)
        except zstd.ZstdError as e:
            raise CorruptCheckpointError(item.file, f"{where}: zstd: {e}") from None
        if declared is not None and done != declared:
            raise CorruptCheckpointError(item.file, f"{where}: its zstd frame declares {declared:,} bytes but holds "
                                                    f"{done:,}")
        out.seek(0)
        return out, done
    except BaseException:
        out.close()
        raise


@contextmanager
def item_stream(f: IO[bytes], item: Item, what: str) -> Iterator[tuple[IO[bytes], int]]:
    """The bytes DCP's load hands to torch.load for `item`: its window of the `.distcp` file, or its frame
    decompressed (bounded as a non-tensor item), and their size."""
    if not item.extensions:
        yield Window(f, item.offset, item.length), item.length  # type: ignore[misc]
        return
    out, size = decompressed(f, item, what)
    try:
        yield out, size
    finally:
        out.close()
