"""Where a torch.save file keeps its pickle and its storages' bytes (docs/formats.md sections 2 and 3).

- zip (torch >= 1.6): `<prefix>/data.pkl` plus one `<prefix>/data/<key>` record per storage; records
  are normally stored uncompressed, so a storage's bytes are addressed by absolute file offset.
- legacy stream (`_use_new_zipfile_serialization=False`): five pickles (magic, protocol 1001,
  sys_info, the object, the storage keys), then per key an int64 LE element count and the raw bytes.

Each reader returns the unpickled object and a StorageRecord per storage key, checked against the file.
"""
from __future__ import annotations

import functools
import io
import struct
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Literal

from ...core import dtypes
from ...core.files import file_size, open_regular
from ...core.io import prefetch
from ...core.limits import limits
from ...errors import CorruptCheckpointError, UnknownFormatError, reading
from .allowlist import StorageRef
from .pickle_walk import walk
from .streams import BytesSource
from .torchscript import ScriptUnpickler, code_records, declarations
from .unpickler import SafeUnpickler, unpickle

MAX_SMALL_RECORD = 1 << 16   # byteorder, version... records
MAX_SMALL_PICKLE = 64 << 20  # data.pkl up to this size is read into memory at once

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001


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
    pickle_bytes: int | None = None   # the object pickle's size: what walk() may name (unpickler.TENSOR_BYTES)
    outside_allowlist: frozenset[str] = frozenset()   # globals outside torch's allowlist it named, none called
    instances: frozenset[str] = frozenset()   # of those, the classes read as inert objects (--pickled-objects)
    script_classes: frozenset[str] | None = None   # a TorchScript archive's classes (torchscript.py); None: not one


# ---------------------------------------------------------------------------------------------
# zip

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # 30 bytes (PKWARE APPNOTE 4.3.7)


def is_data_pkl(name: str) -> bool:
    """`<prefix>/data.pkl` (any case, as torch's record lookup): the object pickle of a torch.save zip."""
    return name.count("/") == 1 and name.lower().endswith("/data.pkl")


# How torch finds a record in a zip: caffe2/serialize/inline_container.cc (PyTorchStreamReader) over
# miniz 3.0.2. The archive's folder is what the FIRST central-directory entry's name holds before its
# first "/"; `getRecord(name)` looks up "<folder>/<name>" with mz_zip_reader_locate_file, which
# binary-searches the entries heap-sorted by ASCII-lowercased name (mz_zip_reader_sort_central_dir_
# offsets_by_filename): the lookup ignores case, and which of several same-named entries it finds
# depends on that sort. `getAllRecords()` (torch.load calls it to spot TorchScript archives) throws
# when an entry's name does not start with "<folder>/" (case-sensitive).
_FILENAME_BUF = 512      # miniz MZ_ZIP_MAX_ARCHIVE_FILENAME_SIZE: getAllRecords reads names into this


def raw_name(info: zipfile.ZipInfo) -> bytes:
    """The entry's name as stored (zipfile decodes it as UTF-8 with flag 0x800, else cp437, losslessly)."""
    return info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437")


def _text(name: bytes) -> str:
    return name[:120].decode("utf-8", "backslashreplace")


def _heap_order(keys: list[bytes]) -> list[int]:
    """miniz's heap sort of entry indices by lowercased name (ties stay where the sort leaves them)."""
    idx = list(range(len(keys)))
    size = len(idx)

    def sift(root: int, end: int) -> None:
        while True:
            child = 2 * root + 1
            if child >= end:
                return
            if child + 1 < end and keys[idx[child]] < keys[idx[child + 1]]:
                child += 1
            if not keys[idx[root]] < keys[idx[child]]:
                return
            idx[root], idx[child] = idx[child], idx[root]
            root = child

    if size <= 1:
        return idx
    for start in range((size - 2) >> 1, -1, -1):
        sift(start, size)
    for end in range(size - 1, 0, -1):
        idx[end], idx[0] = idx[0], idx[end]
        sift(0, end)
    return idx


def _strncmp_prefix(name: bytes, prefix: bytes) -> bool:
    """strncmp(name, prefix, len(prefix)) == 0 on C strings (both end at their first NUL)."""
    a, b = name.split(b"\0")[0] + b"\0", prefix + b"\0"
    for i in range(len(prefix)):
        ca, cb = (a[i] if i < len(a) else 0), b[i]
        if ca != cb:
            return False
        if ca == 0:
            return True
    return True


class TorchZip:
    """A zip's entries as torch's reader sees them (see above). `refusal`: why torch.load raises before
    it reads any record (None: it goes on). `records`: getAllRecords()' names, after the folder."""

    def __init__(self, infos: list[zipfile.ZipInfo]):
        self.infos = infos
        self.names = [raw_name(i) for i in infos]
        self.refusal: str | None = None
        self.prefix: bytes = b""
        self.records: list[bytes] = []
        self._index: dict[bytes, int] | None = None
        if not infos:
            self.refusal = "the zip holds no entry"
            return
        slash = self.names[0].find(b"/")
        if slash < 0:
            self.refusal = f"its first entry {_text(self.names[0])!r} is in no folder"
            return
        self.prefix = self.names[0][:slash]
        self._keys = [n.lower() for n in self.names]
        # With distinct keys every sort gives miniz's order, and its binary search finds the one entry a
        # dict finds: both in C (a 500k-entry archive). Repeated keys keep the heap sort and the search,
        # whose ties torch follows.
        distinct = len(set(self._keys)) == len(self._keys)
        self._index = {k: i for i, k in enumerate(self._keys)} if distinct else None
        self._order = sorted(range(len(self._keys)), key=self._keys.__getitem__) if distinct else _heap_order(self._keys)
        folder = self.prefix + b"/"
        plain = b"\0" not in folder
        for name in self.names:
            c_name = name[:_FILENAME_BUF - 1]
            # without NULs, strncmp(name, folder, len(folder)) == 0 is startswith
            if not (c_name.startswith(folder) if plain and b"\0" not in c_name else _strncmp_prefix(c_name, folder)):
                self.refusal = (f"entry {_text(name)!r} lies outside the archive folder {_text(folder)!r} "
                                "(torch's getAllRecords throws)")
                return
            self.records.append(c_name[len(folder):].split(b"\0")[0])

    @property
    def folder(self) -> str:
        return self.prefix.decode("utf-8", "replace")

    @property
    def torchscript(self) -> bool:
        """torch.load hands archives with a constants.pkl record to torch.jit.load."""
        return b"constants.pkl" in self.records

    def locate(self, record: str) -> zipfile.ZipInfo | None:
        """The entry torch's getRecord(record) reads: mz_zip_reader_locate_file's binary search."""
        key = (self.prefix + b"/" + record.encode("utf-8")).split(b"\0")[0].lower()
        if self._index is not None:
            i = self._index.get(key)
            return None if i is None else self.infos[i]
        lo, hi = 0, len(self._order) - 1
        while lo <= hi:
            mid = lo + ((hi - lo) >> 1)
            i = self._order[mid]
            if self._keys[i] == key:
                return self.infos[i]
            if self._keys[i] < key:
                lo = mid + 1
            else:
                hi = mid - 1
        return None


class CheckedZipFile(zipfile.ZipFile):
    """zipfile trusts the end record's central-directory offset: too big a value makes every member's
    local-header offset negative (APPNOTE 4.3.16 arithmetic in zipfile._RealGetContents), and opening
    a member then seeks before the file's start (OSError EINVAL). Refuse such members by name.
    With crc=False a member's CRC-32 is not checked, as torch's reader (miniz built with
    MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS) does not: torch.save with compute_crc32 off stores every CRC as 0."""

    crc = True

    def open(self, name: str | zipfile.ZipInfo, mode: Literal["r", "w"] = "r", pwd: bytes | None = None, *,
             force_zip64: bool = False) -> IO[bytes]:
        info = name if isinstance(name, zipfile.ZipInfo) else self.getinfo(name)
        if info.header_offset < 0:
            raise zipfile.BadZipFile(f"member {info.filename!r} has a local header offset before the file's start")
        member = super().open(name, mode, pwd, force_zip64=force_zip64)
        if not self.crc and isinstance(member, zipfile.ZipExtFile):
            member._expected_crc = None   # type: ignore[attr-defined]   # (ZipExtFile._update_crc then checks nothing)
        return member


def zip_open(path: str, f: IO[bytes], crc: bool = True) -> zipfile.ZipFile:
    """The zip in `f`; a URL's end records and (most) central directories are fetched in one request first (zipfile
    looks for them in several small reads from the end). crc=False: members' CRC-32s unchecked (CheckedZipFile)."""
    size = f.seek(0, 2)
    prefetch(f, [(max(0, size - (1 << 16)), 1 << 16)])
    with reading(path, "damaged or truncated zip"):
        zf = CheckedZipFile(f)
    zf.crc = crc
    return zf


def data_offset(path: str, f: IO[bytes], info: zipfile.ZipInfo, size: int, ratio: int | None = None,
                sizes: bool = True) -> int:
    """Where a member's bytes start, from its LOCAL header (its extra field differs from the central
    directory's: torch pads it to align data to 64 bytes), checked to lie inside the file; with `sizes`, a stored
    member's two sizes equal and a deflated one's within `ratio` (what a reader of the whole member needs; a scan
    walking the bytes zipfile hands a loader as it streams them passes False)."""
    if info.header_offset < 0:   # (a central-directory offset too big: CheckedZipFile)
        raise CorruptCheckpointError(path, f"zip entry {info.filename!r}: local header offset before the file's start "
                                           f"({info.header_offset:,})")
    if info.header_offset + 30 > size:
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
    if not sizes:
        return start
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        raise CorruptCheckpointError(path, f"zip entry {info.filename!r}: stored entry with differing sizes")
    # a decompression bomb: deflate peaks near 1032:1, a pickle compresses far less (limits.py)
    ratio, name = (limits().zip_ratio, "zip_ratio") if ratio is None else (ratio, "pickle_ratio")
    if info.compress_type != zipfile.ZIP_STORED and info.file_size > ratio * info.compress_size + (1 << 20):
        raise CorruptCheckpointError(path, f"zip entry {info.filename!r} claims {info.file_size:,} bytes from "
                                           f"{info.compress_size:,} compressed, more than {ratio}:1 (--limit {name}=N)")
    return start


def torch_zip(path: str, zf: zipfile.ZipFile) -> TorchZip:
    """The archive as torch reads it, or the error torch.load would raise before reading a record."""
    tz = TorchZip(zf.infolist())
    if tz.refusal:
        raise UnknownFormatError(path, f"not a zip torch.load reads: {tz.refusal}")
    if tz.locate("data.pkl") is None:
        raise UnknownFormatError(path, f"a zip without {tz.folder}/data.pkl: not a torch.save file")
    return tz


def _read_small(path: str, zf: zipfile.ZipFile, f: IO[bytes], size: int, info: zipfile.ZipInfo) -> bytes:
    if info.file_size > MAX_SMALL_RECORD:
        raise CorruptCheckpointError(path, f"zip entry {info.filename!r} is {info.file_size:,} bytes, expected a few")
    # its extent checked against the file first: zipfile's read() asks the file for min(2 GiB, the compressed
    # size claimed) bytes at once, and BufferedReader.read(n) allocates n before reading
    data_offset(path, f, info, size)
    return zf.read(info)


def read_zip(path: str, unpickler: type[SafeUnpickler] = SafeUnpickler) -> Contents:
    size = file_size(path)
    with open_regular(path) as f:   # a URL: the central directory, then data.pkl, by range requests
        return zip_contents(path, f, size, unpickler)


def zip_contents(path: str, f: IO[bytes], size: int, unpickler: type[SafeUnpickler] = SafeUnpickler) -> Contents:
    """A torch.save zip read from `f` (`size` bytes: a whole file, or one item of a DCP `.distcp` file seen
    through a window whose offsets start at 0); record offsets are `f`'s. CRC-32s are not checked: torch.load does not
    check them (CheckedZipFile)."""
    zf = zip_open(path, f, crc=False)
    tz = torch_zip(path, zf)
    prefix = tz.folder + "/"
    byteorder = "little"
    order = tz.locate("byteorder")
    if order is not None:
        byteorder = _read_small(path, zf, f, size, order).decode("ascii", "replace").strip()
        if byteorder not in ("little", "big"):
            raise CorruptCheckpointError(path, f"byteorder record says {byteorder[:20]!r}")
    pkl = tz.locate("data.pkl")
    assert pkl is not None
    make: Callable[..., SafeUnpickler] = unpickler
    if tz.torchscript:   # its classes as its code/ records declare them (torchscript.py)
        if unpickler is not SafeUnpickler:
            raise UnknownFormatError(path, "a TorchScript archive where a torch.save file was expected")

        def read(info: zipfile.ZipInfo) -> bytes:
            data_offset(path, f, info, size)
            return zf.read(info)

        code = code_records(path, zf.infolist(), tz.folder)
        # a URL's code records fetched together (each local header, its name, torch's 64-byte padding, the bytes)
        prefetch(f, [(i.header_offset, 30 + len(i.orig_filename.encode()) + 64 + i.compress_size)
                     for i in code if i.header_offset >= 0])
        make = functools.partial(ScriptUnpickler, declared=declarations(path, code, tz.folder, read))
    data_offset(path, f, pkl, size, limits().pickle_ratio)
    if pkl.file_size > limits().pickle_bytes:
        raise CorruptCheckpointError(path, f"{pkl.filename!r} is {pkl.file_size:,} bytes, more than the "
                                           f"{limits().pickle_bytes:,} ckptstat unpickles (--limit pickle_bytes=N)")
    with zf.open(pkl) as member:
        # small pickles (sizes already checked against the file) are read at once: the unpickler
        # makes thousands of tiny reads; a big or compressed one is streamed.
        stream = io.BytesIO(member.read()) if pkl.file_size <= MAX_SMALL_PICKLE else member
        obj, u = unpickle(stream, path, pkl.filename, limit=pkl.file_size, unpickler=make)
    records: dict[str, StorageRecord] = {}
    compressed = False
    # the records' local headers (data_offset), fetched together when f is a URL (docs/remote.md)
    prefetch(f, [(i.header_offset, 30) for i in map(tz.locate, (f"data/{k}" for k in u.storages)) if i is not None])
    for key in u.storages:
        info = tz.locate(f"data/{key}")
        if info is None:
            raise CorruptCheckpointError(path, f"storage {key!r} has no record {prefix}data/{key}")
        start = data_offset(path, f, info, size)
        _check_declared(path, u.storages[key], info.file_size, info.filename)
        stored = info.compress_type == zipfile.ZIP_STORED
        compressed |= not stored
        records[key] = StorageRecord(key, info.file_size, start if stored else None, info.filename)
    return Contents(obj, records, byteorder, {"torch.archive": tz.folder, "torch.byteorder": byteorder},
                    compressed, pkl.file_size, frozenset(u.outside), frozenset(u.instances),
                    frozenset(u.script_classes) if isinstance(u, ScriptUnpickler) else None)


# ---------------------------------------------------------------------------------------------
# legacy stream

def is_legacy_head(head: bytes) -> bool:
    """The first pickle in `head` is the legacy magic number, however it is pickled: LONG1 as torch.save
    writes it with protocol 2, text LONG (protocol 0), inside a FRAME (protocol 4 and 5)..."""
    w = walk(BytesSource(head), "magic number pickle", 0)
    return w.failure is None and type(w.value) is int and w.value == LEGACY_MAGIC


def _predicted_counts(pos: int, refs: list[StorageRef | None], size: int) -> Iterator[tuple[int, int]]:
    for ref in refs:
        if ref is None or pos + 8 > size:   # (a hostile count: the loop below says what is wrong)
            return
        yield pos, 8
        pos += 8 + ref.numel * _itemsize(ref)


def _itemsize(ref: StorageRef) -> int:
    return dtypes.get(ref.dtype).bits // 8 if ref.dtype else 1


def _check_declared(path: str, ref: StorageRef, nbytes: int, record: str) -> None:
    """A storage's record holds exactly the elements its (first) persistent id declares, as torch.load checks
    (a zip record: "record size ... does not match expected size"; a legacy storage's count: "storage has wrong byte
    size"): a record cut short or run over other members is refused, never read as a smaller or larger storage."""
    need = ref.numel * _itemsize(ref)
    if nbytes != need:
        raise CorruptCheckpointError(path, f"storage {ref.key!r} is declared as {ref.numel:,} elements of "
                                           f"{ref.dtype or 'U8'}, which needs {need:,} bytes of {record}; the record "
                                           f"holds {nbytes:,} (torch.load refuses it)")


def read_legacy(path: str) -> Contents:
    size = file_size(path)
    with open_regular(path) as f:
        magic, _ = unpickle(f, path, "magic number pickle", storages=False)
        if magic != LEGACY_MAGIC:
            raise CorruptCheckpointError(path, "legacy torch file with a wrong magic number")
        proto, _ = unpickle(f, path, "protocol pickle", storages=False)
        if proto != LEGACY_PROTOCOL:
            raise CorruptCheckpointError(path, f"legacy torch protocol {proto!r}, expected {LEGACY_PROTOCOL}")
        sys_info, _ = unpickle(f, path, "sys_info pickle", storages=False)
        if not isinstance(sys_info, dict):
            raise CorruptCheckpointError(path, "legacy sys_info is not a dict")
        start = f.tell()
        obj, u = unpickle(f, path, "object pickle")
        pickle_bytes = f.tell() - start
        keys, _ = unpickle(f, path, "storage key pickle", storages=False)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys) or len(set(keys)) != len(keys):
            raise CorruptCheckpointError(path, "legacy storage key list is malformed")
        # Storages follow in key order: int64 LE element count, then count * element_size bytes.
        # The writer (THPStorage_writeFileRaw) emits both in little-endian whatever the machine, so
        # sys_info["little_endian"] only tells what the writing machine was (recorded in metadata).
        records: dict[str, StorageRecord] = {}
        pos = f.tell()
        # where each count lies if every storage holds the elements its tensors' pickle says: a URL fetches those
        # 8-byte ranges at once (core/io.py prefetch), not one round trip per storage; the loop checks each count
        prefetch(f, list(_predicted_counts(pos, [u.storages.get(k) for k in keys], size)))
        for key in keys:
            ref = u.storages.get(key)
            if ref is None:
                raise CorruptCheckpointError(path, f"storage {key!r} is listed but no tensor uses it")
            if pos + 8 > size:
                raise CorruptCheckpointError(path, f"file ends before storage {key!r} (offset {pos:,})")
            f.seek(pos)
            (count,) = struct.unpack("<q", f.read(8))
            nbytes = count * _itemsize(ref)
            if count < 0 or pos + 8 + nbytes > size:
                raise CorruptCheckpointError(
                    path, f"storage {key!r} claims {count:,} elements ({nbytes:,} bytes) at offset {pos + 8:,}, "
                    f"past the end of the {size:,}-byte file")
            _check_declared(path, ref, nbytes, f"legacy storage {key}")
            records[key] = StorageRecord(key, nbytes, pos + 8, f"legacy storage {key}")
            pos += 8 + nbytes
        missing = set(u.storages) - set(records)
        if missing:
            raise CorruptCheckpointError(path, f"storage {sorted(missing)[0]!r} has no data in the file")
    return Contents(obj, records, "little", {"torch.legacy_little_endian": str(sys_info.get("little_endian"))},
                    pickle_bytes=pickle_bytes, outside_allowlist=frozenset(u.outside),
                    instances=frozenset(u.instances))
