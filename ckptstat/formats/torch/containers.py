"""Where a torch.save file keeps its pickle and its storages' bytes (docs/formats.md sections 2 and 3).

- zip (torch >= 1.6): `<prefix>/data.pkl` plus one `<prefix>/data/<key>` record per storage; records
  are normally stored uncompressed, so a storage's bytes are addressed by absolute file offset.
- legacy stream (`_use_new_zipfile_serialization=False`): five pickles (magic, protocol 1001,
  sys_info, the object, the storage keys), then per key an int64 LE element count and the raw bytes.

Each reader returns the unpickled object and a StorageRecord per storage key, checked against the file.
"""
from __future__ import annotations

import io
import os
import struct
import zipfile
from dataclasses import dataclass, field
from typing import IO, Literal

from ...core import dtypes
from ...errors import CorruptCheckpointError, UnknownFormatError, reading
from .unpickler import unpickle

MAX_SMALL_RECORD = 1 << 16   # byteorder, version... records
MAX_SMALL_PICKLE = 64 << 20  # data.pkl up to this size is read into memory at once

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001
# A pickle of the magic int: PROTO n, then LONG1 of 10 bytes (docs/formats.md section 0).
LEGACY_MAGIC_BYTES = b"\x8a\x0a" + LEGACY_MAGIC.to_bytes(10, "little")


@dataclass(frozen=True)
class StorageRecord:
    key: str
    nbytes: int
    offset: int | None         # absolute file offset of the record's bytes (None: compressed)
    record: str                # zip member name, or "legacy storage <key>"


@dataclass
class Contents:
    """What a container holds: the unpickled object and where each storage's bytes lie."""
    obj: object
    records: dict[str, StorageRecord]
    byteorder: str
    metadata: dict[str, str] = field(default_factory=dict)
    compressed: bool = False   # some storage record is compressed: values need a streaming reader


# ---------------------------------------------------------------------------------------------
# zip

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # 30 bytes (PKWARE APPNOTE 4.3.7)


def is_data_pkl(name: str) -> bool:
    """`data.pkl` or `<prefix>/data.pkl`: the object pickle of a torch.save zip."""
    return name == "data.pkl" or (name.endswith("/data.pkl") and name.count("/") == 1)


class CheckedZipFile(zipfile.ZipFile):
    """zipfile trusts the end record's central-directory offset: too big a value makes every member's
    local-header offset negative (APPNOTE 4.3.16 arithmetic in zipfile._RealGetContents), and opening
    a member then seeks before the file's start (OSError EINVAL). Refuse such members by name."""

    def open(self, name: str | zipfile.ZipInfo, mode: Literal["r", "w"] = "r", pwd: bytes | None = None, *,
             force_zip64: bool = False) -> IO[bytes]:
        info = name if isinstance(name, zipfile.ZipInfo) else self.getinfo(name)
        if info.header_offset < 0:
            raise zipfile.BadZipFile(f"member {info.filename!r} has a local header offset before the file's start")
        return super().open(name, mode, pwd, force_zip64=force_zip64)


def zip_open(path: str, f: IO[bytes]) -> zipfile.ZipFile:
    with reading(path, "damaged or truncated zip"):
        return CheckedZipFile(f)


def data_offset(path: str, f: IO[bytes], info: zipfile.ZipInfo, size: int) -> int:
    """Where a member's bytes start, from its LOCAL header (its extra field differs from the central
    directory's: torch pads it to align data to 64 bytes), checked to lie inside the file."""
    if info.header_offset < 0 or info.header_offset + 30 > size:
        raise CorruptCheckpointError(path, f"zip entry {info.filename!r}: local header offset {info.header_offset} "
                                           "is past the end of the file")
    f.seek(info.header_offset)
    fields = _LOCAL_HEADER.unpack(f.read(30))
    if fields[0] != b"PK\x03\x04":
        raise CorruptCheckpointError(path, f"zip entry {info.filename!r}: no local header at offset {info.header_offset}")
    start: int = info.header_offset + 30 + fields[-2] + fields[-1]
    if start + info.compress_size > size:
        raise CorruptCheckpointError(path, f"zip entry {info.filename!r} claims {info.compress_size:,} bytes at offset "
                                           f"{start:,}, past the end of the {size:,}-byte file")
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        raise CorruptCheckpointError(path, f"zip entry {info.filename!r}: stored entry with differing sizes")
    return start


def _archive_prefix(path: str, names: list[str]) -> str:
    pkls = [n for n in names if is_data_pkl(n)]
    if not pkls:
        raise UnknownFormatError(path, "a zip without <prefix>/data.pkl: not a torch.save file")
    if len(pkls) > 1:
        raise CorruptCheckpointError(path, f"zip holds {len(pkls)} data.pkl records")
    prefix = pkls[0][: -len("data.pkl")]
    if prefix + "constants.pkl" in names:
        raise UnknownFormatError(path, "a TorchScript archive (torch.jit.save): ckptstat reads torch.save files "
                                 "(`ckptstat scan` lists its globals)")
    return prefix


def _read_small(path: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    if info.file_size > MAX_SMALL_RECORD:
        raise CorruptCheckpointError(path, f"zip entry {info.filename!r} is {info.file_size:,} bytes, expected a few")
    return zf.read(info)


def read_zip(path: str) -> Contents:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        zf = zip_open(path, f)
        infos = {i.filename: i for i in zf.infolist()}
        prefix = _archive_prefix(path, list(infos))
        byteorder = "little"
        if prefix + "byteorder" in infos:
            byteorder = _read_small(path, zf, infos[prefix + "byteorder"]).decode("ascii", "replace").strip()
            if byteorder not in ("little", "big"):
                raise CorruptCheckpointError(path, f"byteorder record says {byteorder[:20]!r}")
        pkl = infos[prefix + "data.pkl"]
        data_offset(path, f, pkl, size)
        with zf.open(pkl) as member:
            # small pickles (sizes already checked against the file) are read at once: the unpickler
            # makes thousands of tiny reads; a big or compressed one is streamed.
            stream = io.BytesIO(member.read()) if pkl.file_size <= MAX_SMALL_PICKLE else member
            obj, u = unpickle(stream, path, prefix + "data.pkl", limit=pkl.file_size)
        records: dict[str, StorageRecord] = {}
        compressed = False
        for key in u.storages:
            info = infos.get(f"{prefix}data/{key}")
            if info is None:
                raise CorruptCheckpointError(path, f"storage {key!r} has no record {prefix}data/{key}")
            start = data_offset(path, f, info, size)
            stored = info.compress_type == zipfile.ZIP_STORED
            compressed |= not stored
            records[key] = StorageRecord(key, info.file_size, start if stored else None, info.filename)
    return Contents(obj, records, byteorder, {"torch.archive": prefix.rstrip("/"), "torch.byteorder": byteorder},
                    compressed)


# ---------------------------------------------------------------------------------------------
# legacy stream

def read_legacy(path: str) -> Contents:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        magic, _ = unpickle(f, path, "magic number pickle", storages=False)
        if magic != LEGACY_MAGIC:
            raise CorruptCheckpointError(path, "legacy torch file with a wrong magic number")
        proto, _ = unpickle(f, path, "protocol pickle", storages=False)
        if proto != LEGACY_PROTOCOL:
            raise CorruptCheckpointError(path, f"legacy torch protocol {proto!r}, expected {LEGACY_PROTOCOL}")
        sys_info, _ = unpickle(f, path, "sys_info pickle", storages=False)
        if not isinstance(sys_info, dict):
            raise CorruptCheckpointError(path, "legacy sys_info is not a dict")
        obj, u = unpickle(f, path, "object pickle")
        keys, _ = unpickle(f, path, "storage key pickle", storages=False)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys) or len(set(keys)) != len(keys):
            raise CorruptCheckpointError(path, "legacy storage key list is malformed")
        # Storages follow in key order: int64 LE element count, then count * element_size bytes.
        # The writer (THPStorage_writeFileRaw) emits both in little-endian whatever the machine, so
        # sys_info["little_endian"] only tells what the writing machine was (recorded in metadata).
        records: dict[str, StorageRecord] = {}
        pos = f.tell()
        for key in keys:
            ref = u.storages.get(key)
            if ref is None:
                raise CorruptCheckpointError(path, f"storage {key!r} is listed but no tensor uses it")
            if pos + 8 > size:
                raise CorruptCheckpointError(path, f"file ends before storage {key!r} (offset {pos:,})")
            f.seek(pos)
            (count,) = struct.unpack("<q", f.read(8))
            itemsize = dtypes.get(ref.dtype).bits // 8 if ref.dtype else 1
            nbytes = count * itemsize
            if count < 0 or pos + 8 + nbytes > size:
                raise CorruptCheckpointError(
                    path, f"storage {key!r} claims {count:,} elements ({nbytes:,} bytes) at offset {pos + 8:,}, "
                    f"past the end of the {size:,}-byte file")
            records[key] = StorageRecord(key, nbytes, pos + 8, f"legacy storage {key}")
            pos += 8 + nbytes
        missing = set(u.storages) - set(records)
        if missing:
            raise CorruptCheckpointError(path, f"storage {sorted(missing)[0]!r} has no data in the file")
    return Contents(obj, records, "little", {"torch.legacy_little_endian": str(sys_info.get("little_endian"))})
