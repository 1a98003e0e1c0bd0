"""OCDBT, tensorstore's key-value store in files: the keys and where each value lies (docs/orbax.md).

The format, as tensorstore 0.1.86 writes it (tensorstore/kvstore/ocdbt/index.rst, format/*.cc): a folder holds
`manifest.ocdbt` and data files (`d/<32 hex>`, any relative path). Every encoded manifest, version tree node and B+tree
node is: magic (uint32 big-endian: 0x0cdb3a2a, 0x0cdb1234, 0x0cdb20de), its whole length (uint64 little-endian),
version (varint, 0), compression (varint: 0 none, 1 zstd), the body (zstd-compressed when 1), a crc32c (uint32
little-endian) of everything before it. Integers in a body are unsigned LEB128 varints unless said; arrays are stored
column by column (every entry's first field, then every entry's second...).

- Manifest body: the configuration (uuid[16], manifest_kind, max_inline_value_bytes, max_decoded_node_bytes,
  version_tree_arity_log2 uint8, compression_method, and for zstd its level int32le), then, for manifest_kind 0, a
  data file table, the newest versions (leaf version entries) and the older ones' version tree nodes. manifest_kind 1
  keeps the versions in `manifest.<16 hex>` files, the highest number the newest.
- Data file table: num_files, path_prefix_length[n-1], path_suffix_length[n], base_path_length[n], the suffixes;
  path[i] is path[i-1]'s first prefix_length bytes + suffix[i]. A node read through path[i] resolves its own table's
  paths after base_path[i] (the "transitive" prefix): orbax's merged manifest points at `ocdbt.process_N/d/...`.
- Version entries: generation_number[n], root_height uint8[n], data_file_id[n], offset[n], length[n], num_keys[n],
  num_tree_bytes[n], num_indirect_value_bytes[n], commit_time uint64le[n]. The last is the newest version: its
  B+tree root is read (length 0: an empty database).
- B+tree node body: height uint8, a data file table, num_entries, key_prefix_length[n-1], key_suffix_length[n],
  (interior nodes: subtree_common_prefix_length[n]), the key suffixes; a leaf then has value_length[n],
  value_kind uint8[n] (0 inline, 1 in a data file), data_file_id and offset of each out-of-line value, the inline
  values; an interior node data_file_id[n], offset[n], length[n] of each child and three statistics columns. A leaf's
  keys are its relative keys after the prefix its path gives; an interior entry's child adds its key's first
  subtree_common_prefix_length bytes to that prefix.

Everything read is checked against the file it comes from before it is used: a node's offset and length against
the data file's size, its length field against the bytes read, its crc32c, its decompressed size against
max_decoded_node_bytes (and limits().inflate_ratio), every count against the bytes left, each child's height one
less than its parent's, every node read once (a tree that points at a node twice is refused: no walk multiplies)."""
from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass
from typing import Any

from ...core import files as fs
from ...core.files import check_inside, file_size, open_regular, size_of
from ...core.io import pread
from ...core.tensor import check_inflation
from ...errors import CorruptCheckpointError, missing_extra

MANIFEST = "manifest.ocdbt"
NUMBERED = re.compile(r"^manifest\.[0-9a-f]{16}$")
MAGIC_MANIFEST, MAGIC_BTREE_NODE = 0x0CDB3A2A, 0x0CDB20DE   # (version tree nodes, 0x0cdb1234, hold older versions: unread)
MAX_MANIFEST = 64 << 20          # bytes of a manifest read
MAX_NODE = 256 << 20             # bytes of an encoded or decoded node (tensorstore's default decoded bound: 8 MiB)
MAX_PATH = 65535                 # a data file path's bytes (the format's own limit)


@dataclass(frozen=True)
class Value:
    """Where a key's value lies: `inline` bytes, or `length` bytes at `offset` of `file`."""
    file: str | None
    offset: int
    length: int
    inline: bytes | None = None


class _Body:
    """A decoded body, read field by field; running past its end is a CorruptCheckpointError naming `where`."""

    def __init__(self, data: bytes, file: str, where: str):
        self.data, self.pos, self.file, self.where = data, 0, file, where

    def bad(self, why: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(self.file, f"{self.where}: {why}")

    def left(self) -> int:
        return len(self.data) - self.pos

    def varint(self) -> int:
        out, shift = 0, 0
        while True:
            if self.pos >= len(self.data):
                raise self.bad("ends inside a varint")
            b = self.data[self.pos]
            self.pos += 1
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 63:
                raise self.bad("a varint longer than 64 bits")

    def varints(self, n: int) -> list[int]:
        self.count(n, 1)
        return [self.varint() for _ in range(n)]

    def take(self, n: int) -> bytes:
        if n > self.left():
            raise self.bad(f"claims {n:,} bytes where {self.left():,} remain")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def count(self, n: int, each: int) -> int:
        """A count the body claims, checked against its bytes left (every entry takes at least `each`)."""
        if n * each > self.left():
            raise self.bad(f"claims {n:,} entries in {self.left():,} bytes")
        return n


def zstandard_module(needs: str) -> Any:
    """The zstandard module (the `zstd` extra), or the one line saying what `needs` it."""
    try:
        import zstandard
    except ImportError:
        raise missing_extra(needs, "zstandard", "zstd") from None
    return zstandard


def _zstd_decompress(file: str, where: str, data: bytes, bound: int) -> bytes:
    zstandard = zstandard_module(f"{file}: an orbax / tensorstore OCDBT checkpoint (zstd-compressed)")
    out = bytearray()
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
        while block := reader.read(1 << 20):
            out += block
            if len(out) > bound:
                raise CorruptCheckpointError(file, f"{where}: decompresses past {bound:,} bytes; not read further")
    except zstandard.ZstdError as e:
        raise CorruptCheckpointError(file, f"{where}: zstd: {e}") from None
    check_inflation(file, where, len(out), len(data))
    return bytes(out)


def _decode(data: bytes, magic: int, file: str, where: str, bound: int) -> _Body:
    """The body of an encoded manifest or node (header, crc32c and compression checked)."""
    if len(data) < 18:
        raise CorruptCheckpointError(file, f"{where}: {len(data)} bytes, too short for its header and checksum")
    got, length = struct.unpack_from(">I", data)[0], struct.unpack_from("<Q", data, 4)[0]
    if got != magic:
        raise CorruptCheckpointError(file, f"{where}: magic {got:#010x}, not {magic:#010x}")
    if length != len(data):
        raise CorruptCheckpointError(file, f"{where}: says it is {length:,} bytes long; {len(data):,} were read")
    from ..crc32c import crc32c  # (numpy: imported where a node is read, not by a folder that holds none)

    if crc32c(memoryview(data)[:-4]) != struct.unpack_from("<I", data, len(data) - 4)[0]:
        raise CorruptCheckpointError(file, f"{where}: crc32c mismatch")
    head = _Body(data[:-4], file, where)
    head.pos = 12
    if (version := head.varint()) != 0:
        raise CorruptCheckpointError(file, f"{where}: format version {version}, not 0")
    compression = head.varint()
    body = data[head.pos:-4]
    if compression == 1:
        body = _zstd_decompress(file, where, body, bound)
    elif compression != 0:
        raise CorruptCheckpointError(file, f"{where}: compression format {compression} (0 none, 1 zstd)")
    if len(body) > bound:
        raise CorruptCheckpointError(file, f"{where}: {len(body):,} bytes decoded, more than {bound:,}")
    return _Body(body, file, where)


def _file_table(b: _Body, transitive: str) -> list[tuple[str, str]]:
    """The data file table: (full path, the transitive prefix its nodes' own tables resolve after) per file."""
    n = b.varint()
    b.count(n, 2)
    prefix = [0] + b.varints(max(n - 1, 0))
    suffix, base = b.varints(n), b.varints(n)
    out, prev = [], b""
    for i in range(n):
        if prefix[i] > len(prev):
            raise b.bad(f"data file {i}: a common prefix of {prefix[i]} bytes with a {len(prev)}-byte path")
        path = prev[:prefix[i]] + b.take(suffix[i])
        if base[i] > len(path) or len(path) > MAX_PATH:
            raise b.bad(f"data file {i}: a base path of {base[i]} bytes in a {len(path)}-byte path")
        try:
            text, base_text = path.decode(), path[:base[i]].decode()
        except UnicodeDecodeError:
            raise b.bad(f"data file {i}: its path is not UTF-8") from None
        out.append((transitive + text, transitive + base_text))
        prev = path
    return out


@dataclass(frozen=True)
class _Ref:
    file: str
    transitive: str
    offset: int
    length: int


def _ref(b: _Body, table: list[tuple[str, str]], file_id: int, offset: int, length: int) -> _Ref:
    if file_id >= len(table):
        raise b.bad(f"data file id {file_id} in a table of {len(table)}")
    return _Ref(table[file_id][0], table[file_id][1], offset, length)


class Store:
    """One OCDBT database (a folder with manifest.ocdbt): its newest version's keys, each with where its value lies."""

    def __init__(self, folder: str, root: str):
        self.folder, self.root = folder, root
        self.files: set[str] = set()     # every file read (inside the folder; the caller checks)
        self._seen: set[tuple[str, int]] = set()
        self._sizes: dict[str, int] = {}      # each value data file's size
        self.values: dict[bytes, Value] = {}
        b, kind = self._open_manifest(self._manifest())
        if kind == 1:                 # numbered: the versions are in the newest manifest.<16 hex>, itself kind 0
            b, kind = self._open_manifest(self._numbered())
        if kind != 0:
            raise b.bad(f"manifest kind {kind} (0 single, 1 numbered)")
        newest = self._newest_root(b)
        if newest is not None:
            self._walk(newest[0], newest[1], b"")

    def _open_manifest(self, path: str) -> tuple[_Body, int]:
        """The manifest's body past its configuration, and its manifest_kind."""
        b = _decode(self._read_whole(path, MAX_MANIFEST), MAGIC_MANIFEST, path, "manifest", MAX_MANIFEST)
        b.take(16)                                         # uuid
        kind, _inline, self.max_node = b.varint(), b.varint(), b.varint()
        arity_log2, method = b.u8(), b.varint()
        if method == 1:
            b.take(4)                                      # zstd level (writing only)
        elif method != 0:
            raise b.bad(f"compression method {method} (0 none, 1 zstd)")
        if not 0 < arity_log2 < 64:
            raise b.bad(f"version_tree_arity_log2 {arity_log2}")
        return b, kind

    # -- files ---------------------------------------------------------------------------------------------------
    def _manifest(self) -> str:
        return fs.join(self.folder, MANIFEST)

    def _numbered(self) -> str:
        names = sorted(n for n in fs.listdir(self.folder) if NUMBERED.match(n))
        if not names:
            raise CorruptCheckpointError(self._manifest(), "a numbered manifest, and no manifest.<16 hex> file beside it")
        return fs.join(self.folder, names[-1])

    def _read_whole(self, path: str, bound: int) -> bytes:
        check_inside(path, "file", self.root)
        self.files.add(path)
        with open_regular(path) as f:
            size = size_of(f)
            if size > bound:
                raise CorruptCheckpointError(path, f"{size:,} bytes, more than {bound:,}; not an OCDBT manifest "
                                                   "ckptstat reads")
            return f.read(size)

    def data_file(self, relative: str, where: str) -> str:
        """The data file a table names, inside the database's folder (never an absolute path or `..`)."""
        parts = relative.split("/")
        if not relative or relative.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in relative:
            raise CorruptCheckpointError(self._manifest(), f"{where}: data file path {relative!r} is not a path "
                                                           "inside the database's folder")
        return functools.reduce(fs.join, parts, self.folder)

    def _node(self, ref: _Ref, magic: int, where: str) -> _Body:
        path = self.data_file(ref.file, where)
        if (path, ref.offset) in self._seen:
            raise CorruptCheckpointError(path, f"{where}: the node at offset {ref.offset:,} is referenced twice")
        self._seen.add((path, ref.offset))
        check_inside(path, "data file", self.root)
        self.files.add(path)
        if not fs.isfile(path):
            raise CorruptCheckpointError(self._manifest(), f"{where}: data file {ref.file!r} is not in the folder")
        size = file_size(path)
        if ref.length > min(size, MAX_NODE) or ref.offset > size - ref.length:
            raise CorruptCheckpointError(path, f"{where}: {ref.length:,} bytes at offset {ref.offset:,} of a "
                                               f"{size:,}-byte file")
        with open_regular(path) as f:
            data = pread(f, ref.length, ref.offset)
        return _decode(data, magic, path, f"{where} at offset {ref.offset:,}",
                       min(MAX_NODE, max(self.max_node, 1 << 20)))

    # -- versions ------------------------------------------------------------------------------------------------
    def _newest_root(self, b: _Body) -> tuple[_Ref, int] | None:
        table = _file_table(b, "")
        n = b.count(b.varint(), 12)
        if n == 0:
            raise b.bad("no version")
        generations = b.varints(n)
        heights = list(b.take(n))
        ids, offsets, lengths = b.varints(n), b.varints(n), b.varints(n)
        if any(a >= c for a, c in zip(generations, generations[1:])):
            raise b.bad("generation numbers not increasing")
        if lengths[-1] == 0:
            return None                                    # the newest version is an empty tree
        return _ref(b, table, ids[-1], offsets[-1], lengths[-1]), heights[-1]

    # -- the B+tree ----------------------------------------------------------------------------------------------
    def _walk(self, ref: _Ref, height: int, prefix: bytes) -> None:
        b = self._node(ref, MAGIC_BTREE_NODE, "B+tree node")
        if (got := b.u8()) != height:
            raise b.bad(f"height {got}, where its parent says {height}")
        table = _file_table(b, ref.transitive)
        n = b.count(b.varint(), 3)
        keys, sub = self._keys(b, n, interior=height > 0)
        if height == 0:
            self._leaf(b, n, table, prefix, keys)
            return
        ids, offsets, lengths = b.varints(n), b.varints(n), b.varints(n)
        for i, key in enumerate(keys):
            self._walk(_ref(b, table, ids[i], offsets[i], lengths[i]), height - 1, prefix + key[:sub[i]])

    @staticmethod
    def _keys(b: _Body, n: int, interior: bool) -> tuple[list[bytes], list[int]]:
        prefix = [0] + b.varints(max(n - 1, 0))
        suffix = b.varints(n)
        common = b.varints(n) if interior else []
        keys: list[bytes] = []
        prev = b""
        for i in range(n):
            if prefix[i] > len(prev):
                raise b.bad(f"key {i}: a common prefix of {prefix[i]} bytes with a {len(prev)}-byte key")
            key = prev[:prefix[i]] + b.take(suffix[i])
            if keys and key <= prev:
                raise b.bad(f"key {i}: keys not in increasing order")
            if interior and common[i] > len(key):
                raise b.bad(f"key {i}: a subtree prefix of {common[i]} bytes in a {len(key)}-byte key")
            keys.append(key)
            prev = key
        return keys, common

    def _leaf(self, b: _Body, n: int, table: list[tuple[str, str]], prefix: bytes, keys: list[bytes]) -> None:
        lengths = b.varints(n)
        kinds = b.take(n)
        if any(k > 1 for k in kinds):
            raise b.bad("a value kind other than 0 (inline) or 1 (in a data file)")
        out = [i for i in range(n) if kinds[i] == 1]
        ids, offsets = b.varints(len(out)), b.varints(len(out))
        for j, i in enumerate(out):
            r = _ref(b, table, ids[j], offsets[j], lengths[i])
            path = self.data_file(r.file, "a value")
            if path not in self._sizes:
                check_inside(path, "data file", self.root)
                if not fs.isfile(path):
                    raise b.bad(f"a value in data file {r.file!r}, which is not in the folder")
                self._sizes[path] = file_size(path)
            if r.offset > self._sizes[path] or r.length > self._sizes[path] - r.offset:
                raise b.bad(f"a value of {r.length:,} bytes at offset {r.offset:,} of {r.file!r}, a "
                            f"{self._sizes[path]:,}-byte file")
            self.values[prefix + keys[i]] = Value(path, r.offset, r.length)
        for i in range(n):
            if kinds[i] == 0:
                self.values[prefix + keys[i]] = Value(None, 0, lengths[i], b.take(lengths[i]))
        if b.left():
            raise b.bad(f"{b.left():,} bytes after its last value")


def read_value(v: Value, what: str) -> bytes:
    """A value's bytes (the caller bounds `v.length` first: an out-of-line value is checked against its file)."""
    if v.inline is not None:
        return v.inline
    assert v.file is not None
    size = file_size(v.file)
    if v.offset > size or v.length > size - v.offset:
        raise CorruptCheckpointError(v.file, f"{what}: {v.length:,} bytes at offset {v.offset:,} of a {size:,}-byte file")
    with open_regular(v.file) as f:
        return pread(f, v.length, v.offset)
