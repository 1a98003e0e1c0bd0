"""Where each format's structure lies in a valid file: the byte offsets where one part ends and the
next begins (cut points for truncation), and the little-endian integer fields that hold a length,
count or offset (targets for hostile values). Shared by the fuzz suite and tests/test_reader_contract.py.
Computed with the standard library from the format's spec (docs/formats.md), not by ckptstat's
readers, except the TF table walk (tf_index_layout), which reuses the reader's block decoding."""
from __future__ import annotations

import io
import json
import pickletools
import struct
import zipfile

# (cut points, [(offset, width) of each integer field])
Layout = tuple[list[int], list[tuple[int, int]]]


def safetensors_layout(data: bytes) -> Layout:
    """The u64 header length, the JSON header, every tensor's data start and end (section 1)."""
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8:8 + n])
    cuts = [8, 8 + n]
    for k, v in header.items():
        if k != "__metadata__":
            cuts += [8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1]]
    return cuts, [(0, 8)]


def zip_layout(data: bytes) -> Layout:
    """Local headers, member data, central directory entries and end records (PKWARE APPNOTE 4.3)."""
    cuts, fields = [], []
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for info in z.infolist():
            h = info.header_offset
            name_len, extra_len = struct.unpack_from("<HH", data, h + 26)
            start = h + 30 + name_len + extra_len
            cuts += [h, h + 30, start, start + info.compress_size]
            fields += [(h + 18, 4), (h + 22, 4), (h + 26, 2), (h + 28, 2)]
    eocd = data.rfind(b"PK\x05\x06")
    cd = data.find(b"PK\x01\x02")
    while cd != -1:
        cuts.append(cd)
        fields += [(cd + 20, 4), (cd + 24, 4), (cd + 28, 2), (cd + 30, 2), (cd + 42, 4)]
        cd = data.find(b"PK\x01\x02", cd + 4)
    cuts += [eocd, eocd + 22]
    fields += [(eocd + 8, 2), (eocd + 10, 2), (eocd + 12, 4), (eocd + 16, 4), (eocd + 20, 2)]
    # zip64 end records, if the writer used them
    for sig, offs in ((b"PK\x06\x06", (24, 32, 40, 48)), (b"PK\x06\x07", (8,))):
        p = data.rfind(sig)
        if p != -1:
            cuts.append(p)
            fields += [(p + o, 8) for o in offs]
    return cuts, fields


_PICKLE_WIDTHS = {"BININT": 4, "BININT1": 1, "BININT2": 2, "BINPUT": 1, "LONG_BINPUT": 4, "BINGET": 1,
                  "LONG_BINGET": 4, "SHORT_BINUNICODE": 1, "BINUNICODE": 4, "SHORT_BINBYTES": 1, "BINBYTES": 4,
                  "LONG1": 1, "FRAME": 8, "BINUNICODE8": 8, "BINBYTES8": 8, "SHORT_BINSTRING": 1, "BINSTRING": 4}


def pickle_fields(pkl: bytes) -> Layout:
    """Opcode boundaries, and the ints / lengths a pickle carries (where, how wide)."""
    cuts, fields = [], []
    try:
        for op, _arg, pos in pickletools.genops(pkl):
            assert pos is not None
            cuts.append(pos)
            if op.name in _PICKLE_WIDTHS:
                fields.append((pos + 1, _PICKLE_WIDTHS[op.name]))
            if op.name == "LONG1":
                fields.append((pos + 2, pkl[pos + 1] or 1))
    except Exception:  # noqa: BLE001 - a fixture pickle parses; only the tail may be odd
        pass
    return cuts, fields


def legacy_layout(data: bytes) -> Layout:
    """The five pickles of a legacy torch file, opcode by opcode, then the first storage's int64
    element count (section 3; later storages need the dtypes to find)."""
    f = io.BytesIO(data)
    cuts, fields = [0], []
    for _ in range(5):
        start = f.tell()
        for _op in pickletools.genops(f):   # step over one pickle
            pass
        c, fl = pickle_fields(data[start:f.tell()])
        cuts += [start + x for x in c] + [f.tell()]
        fields += [(start + o, w) for o, w in fl]
    pos = f.tell()
    if pos + 8 <= len(data):
        fields.append((pos, 8))
        cuts += [pos, pos + 8]
    return cuts, fields


def tf_index_layout(data: bytes) -> Layout:
    """A TF bundle `.index` table: footer, magic, the index block and every data block with their
    5-byte trailers (section 4). Its lengths are varints, not fixed fields."""
    from ckptstat.formats import tf_bundle as tfb

    cuts = [len(data) - 48, len(data) - 8]
    _, _, pos = tfb.block_handle(data[-48:], 0, 40)
    ioff, isize, _ = tfb.block_handle(data[-48:], pos, 40)
    cuts += [ioff, ioff + isize, ioff + isize + 5]
    for _, h in tfb.block_entries(data[ioff:ioff + isize], "index"):
        boff, bsize, _ = tfb.block_handle(h, 0, len(h))
        cuts += [boff, boff + bsize, boff + bsize + 5]
    return cuts, []


# HDF5 superblock (HDF5 file format spec II.A): v0 base, free-space, end-of-file and driver addresses;
# v2/v3 base, extension, end-of-file and root addresses; the size-of-offsets and size-of-lengths bytes.
H5_FIELDS = [(24, 8), (32, 8), (40, 8), (48, 8), (12, 8), (20, 8), (28, 8), (36, 8), (13, 1), (14, 1)]


def h5_layout(data: bytes) -> Layout:
    """The superblock and where user blocks may end; the rest of an HDF5 file is a heap of object
    headers and B-trees that only HDF5 itself walks, so quarters of the file stand in for them."""
    n = len(data)
    return [8, 48, 96, 512, 800, 1024, 1400, 2048, 4096, n // 4, n // 2, 3 * n // 4, n - 512], list(H5_FIELDS)


_GGUF_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def gguf_layout(data: bytes) -> Layout:
    """Header counts, every key-value and tensor info with its length, count, dims and offset fields,
    the aligned data section, and every tensor's bytes (section 6). Arrays contribute their element
    type and count and their first element's fields."""
    from ckptstat.core import dtypes
    from ckptstat.formats.gguf import GGML_TYPES

    cuts, fields = [4, 8, 16, 24], [(4, 4), (8, 8), (16, 8)]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    alignment = 32

    def value(code: int, pos: int, record: bool) -> tuple[object, int]:
        if code == _GGUF_STRING:
            if record:
                fields.append((pos, 8))
            (n,) = struct.unpack_from("<Q", data, pos)
            return data[pos + 8:pos + 8 + n], pos + 8 + n
        if code == _GGUF_ARRAY:
            if record:
                fields.extend([(pos, 4), (pos + 4, 8)])
            elem, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            for i in range(count):
                _, pos = value(elem, pos, record and i == 0)
            return None, pos
        size = _GGUF_SCALAR_BYTES[code]
        return int.from_bytes(data[pos:pos + size], "little"), pos + size

    pos = 24
    for _ in range(n_kv):
        cuts.append(pos)
        key, pos = value(_GGUF_STRING, pos, True)
        (code,) = struct.unpack_from("<I", data, pos)
        fields.append((pos, 4))
        if key == b"general.alignment":   # the one scalar that moves the data section
            fields.append((pos + 4, 4))
        v, pos = value(code, pos + 4, True)
        if key == b"general.alignment" and isinstance(v, int):
            alignment = v
    infos = []
    for _ in range(n_tensors):
        cuts.append(pos)
        _, pos = value(_GGUF_STRING, pos, True)
        (n_dims,) = struct.unpack_from("<I", data, pos)
        fields.append((pos, 4))
        dims = struct.unpack_from(f"<{n_dims}Q", data, pos + 4)
        fields += [(pos + 4 + 8 * i, 8) for i in range(n_dims)]
        pos += 4 + 8 * n_dims
        ggml_type, offset = struct.unpack_from("<IQ", data, pos)
        fields += [(pos, 4), (pos + 4, 8)]
        pos += 12
        numel = 1
        for d in dims:
            numel *= d
        infos.append((offset, dtypes.get(GGML_TYPES[ggml_type]).nbytes(numel)))
    data_start = -(-pos // alignment) * alignment
    cuts += [pos, data_start]
    for offset, nbytes in infos:
        cuts += [data_start + offset, data_start + offset + nbytes]
    return cuts, fields


# ---------------------------------------------------------------------------------- protobuf (ONNX, SavedModel)
def pb_varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, position after) of the protobuf varint at `pos` (raises IndexError/ValueError past the end)."""
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def pb_fields(data: bytes, start: int = 0, end: int | None = None) -> list[tuple[int, int, int, int, int]]:
    """(field start, field number, wire type, payload start, payload end) of each field of one message (a
    varint's payload is its bytes; protobuf encoding spec). Fixture messages only: raises on bad bytes."""
    end = len(data) if end is None else end
    out, pos = [], start
    while pos < end:
        at = pos
        key, pos = pb_varint(data, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            _, after = pb_varint(data, pos)
        elif wire == 1:
            after = pos + 8
        elif wire == 5:
            after = pos + 4
        elif wire == 2:
            n, pos = pb_varint(data, pos)
            after = pos + n
        else:
            raise ValueError(f"wire type {wire}")
        if after > end:
            raise ValueError("field past its message")
        out.append((at, num, wire, pos, after))
        pos = after
    return out


# Which length-delimited fields hold a message of which kind (onnx/onnx.proto; tensorflow saved_model.proto,
# meta_graph.proto, saved_object_graph.proto), as far as ckptstat's readers walk them.
ONNX_SCHEMA: dict[str, dict[int, str]] = {
    "model": {7: "graph"},
    "graph": {1: "node", 5: "tensor", 15: "sparse"},
    "node": {5: "attribute"},
    "attribute": {5: "tensor", 22: "sparse"},
    "sparse": {1: "tensor", 2: "tensor"},
    "tensor": {13: "entry"},
    "entry": {},
}
SAVED_MODEL_SCHEMA: dict[str, dict[int, str]] = {
    "saved_model": {2: "meta_graph"},
    "meta_graph": {7: "object_graph"},
    "object_graph": {1: "saved_object"},
    "saved_object": {7: "saved_variable"},
    "saved_variable": {},
}


def protobuf_layout(data: bytes, schema: dict[str, dict[int, str]], root: str) -> Layout:
    """Every field's start, payload start and end, down the messages `schema` names. Its lengths are
    varints, not fixed fields (structured mutations re-encode them)."""
    cuts: list[int] = []

    def walk(kind: str, start: int, end: int) -> None:
        for at, num, wire, p, after in pb_fields(data, start, end):
            cuts.extend([at, p, after])
            sub = schema[kind].get(num)
            if sub is not None and wire == 2:
                walk(sub, p, after)
    walk(root, 0, len(data))
    return sorted(set(cuts)), []


# ---------------------------------------------------------------------------------- msgpack (Flax)
_MP_LEN = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC7: 1, 0xC8: 2, 0xC9: 4,
           0xDC: 2, 0xDD: 4, 0xDE: 2, 0xDF: 4}
_MP_FIXED = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2,
             0xD2: 4, 0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}


def msgpack_layout(data: bytes) -> Layout:
    """Every item's start and end, and the big-endian length, count and integer fields (msgpack spec),
    down into the ext payloads flax writes (each itself msgpack: shape, dtype name, raw bytes)."""
    cuts: list[int] = []
    fields: list[tuple[int, int]] = []

    def item(pos: int) -> int:
        cuts.append(pos)
        m = data[pos]
        pos += 1
        if m <= 0x7F or m >= 0xE0 or m in (0xC0, 0xC2, 0xC3):
            return pos
        if 0x80 <= m <= 0x8F or 0x90 <= m <= 0x9F or m in (0xDC, 0xDD, 0xDE, 0xDF):
            if m <= 0x9F:
                n = m & 0x0F
            else:
                w = _MP_LEN[m]
                fields.append((pos, w))
                n = int.from_bytes(data[pos:pos + w], "big")
                pos += w
            for _ in range(2 * n if m in (0xDE, 0xDF) or 0x80 <= m <= 0x8F else n):
                pos = item(pos)
            return pos
        if 0xA0 <= m <= 0xBF:
            return pos + (m & 0x1F)
        if m in (0xC4, 0xC5, 0xC6, 0xD9, 0xDA, 0xDB):
            w = _MP_LEN[m]
            fields.append((pos, w))
            n = int.from_bytes(data[pos:pos + w], "big")
            return pos + w + n
        if m in (0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8):
            if m in (0xC7, 0xC8, 0xC9):
                w = _MP_LEN[m]
                fields.append((pos, w))
                n = int.from_bytes(data[pos:pos + w], "big")
                pos += w
            else:
                n = _MP_FIXED[m] - 1
            code, pos = data[pos], pos + 1
            cuts.append(pos)
            if code in (1, 3) and n:   # flax's ndarray / npscalar payload: msgpack of (shape, dtype, bytes)
                item(pos)
            return pos + n
        if m in (0xCC, 0xCD, 0xCE, 0xCF, 0xD0, 0xD1, 0xD2, 0xD3):
            fields.append((pos, _MP_FIXED[m]))
        return pos + _MP_FIXED[m]

    end = item(0)
    cuts.append(end)
    return sorted(set(cuts)), fields


# ---------------------------------------------------------------------------------- numpy .npy
def npy_layout(data: bytes) -> Layout:
    """Magic, version, header length (u16 in 1.0, u32 in 2.0/3.0), the header's end and the values (NEP 1)."""
    width = 2 if data[6] == 1 else 4
    start = 8 + width
    n = int.from_bytes(data[8:8 + width], "little")
    return [6, 7, 8, start, start + n - 1, start + n, len(data)], [(8, width), (6, 1), (7, 1)]


# ---------------------------------------------------------------------------------- concatenated zips (DCP)
def concatenated_zip_layout(data: bytes) -> Layout:
    """zip_layout for a file of zips one after another (a DCP `.distcp`: one torch.save zip per item), found by
    their signatures (PKWARE APPNOTE 4.3): local headers, their data, central entries and end records."""
    cuts, fields = [], []
    for sig, fs in ((b"PK\x03\x04", [(18, 4), (22, 4), (26, 2), (28, 2)]),
                    (b"PK\x01\x02", [(20, 4), (24, 4), (28, 2), (30, 2), (42, 4)]),
                    (b"PK\x05\x06", [(8, 2), (10, 2), (12, 4), (16, 4), (20, 2)]),
                    (b"PK\x06\x06", [(24, 8), (32, 8), (40, 8), (48, 8)]),
                    (b"PK\x06\x07", [(8, 8)])):
        p = data.find(sig)
        while p != -1:
            cuts.append(p)
            fields += [(p + o, w) for o, w in fs if p + o + w <= len(data)]
            if sig == b"PK\x03\x04" and p + 30 <= len(data):
                comp, _, name_len, extra_len = struct.unpack_from("<IIHH", data, p + 18)
                start = p + 30 + name_len + extra_len
                cuts += [start, start + comp]
            p = data.find(sig, p + 4)
    return sorted(set(cuts)), fields


def tar_layout(data: bytes) -> Layout:
    """A tar of zips (a NeMo archive: its model_weights.ckpt a torch.save zip): every member's 512-byte header and its
    data (POSIX ustar; the tar's own numbers are octal text, no field here), and the zips inside (concatenated_zip_layout)."""
    import tarfile

    cuts, fields = concatenated_zip_layout(data)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for m in tar.getmembers():
            cuts += [m.offset, m.offset + 512, m.offset_data, m.offset_data + m.size]
    return sorted(set(cuts)), fields


# ---- OCDBT (docs/orbax.md): encoders for hand-built databases and the re-encoding of a mutated body -------------
OCDBT_MANIFEST, OCDBT_BTREE = 0x0CDB3A2A, 0x0CDB20DE


def leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def ocdbt_encoded(magic: int, body: bytes) -> bytes:
    """An encoded manifest or node around `body`: magic, length, version 0, uncompressed, crc32c."""
    from ckptstat.formats.crc32c import crc32c  # (tensorstore's checksum; checked against TF's elsewhere)

    data = bytearray(struct.pack(">I", magic) + b"\0" * 8 + leb128(0) + leb128(0) + body + b"\0" * 4)
    struct.pack_into("<Q", data, 4, len(data))
    struct.pack_into("<I", data, len(data) - 4, crc32c(bytes(data[:-4])))
    return bytes(data)


def ocdbt_body(data: bytes) -> bytes:
    """The body of an encoded manifest or node (zstd-decompressed where it is compressed)."""
    body = data[14:-4]   # (version and compression: one-byte varints in what tensorstore writes)
    if data[13] == 1:
        import zstandard
        body = zstandard.ZstdDecompressor().stream_reader(body, read_across_frames=True).read()
    return body


def ocdbt_table(paths: list[str]) -> bytes:
    """A data file table of whole paths (no shared prefixes, no base paths)."""
    out = leb128(len(paths)) + b"".join(leb128(0) for _ in paths[1:])
    out += b"".join(leb128(len(p)) for p in paths) + b"".join(leb128(0) for _ in paths)
    return out + b"".join(p.encode() for p in paths)


def ocdbt_manifest(root_file: str, offset: int, length: int, height: int = 0) -> bytes:
    """A single-file manifest whose one version's B+tree root is `length` bytes at `offset` of `root_file`."""
    config = b"\x11" * 16 + leb128(0) + leb128(100) + leb128(1 << 20) + bytes([4]) + leb128(0)
    versions = leb128(1) + leb128(1) + bytes([height]) + leb128(0) + leb128(offset) + leb128(length)
    versions += leb128(1) + leb128(length) + leb128(0) + b"\0" * 8
    return ocdbt_encoded(OCDBT_MANIFEST, config + ocdbt_table([root_file]) + versions + leb128(0))
