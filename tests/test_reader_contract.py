"""The reader contract: every format in the registry (ckptstat.formats.registry.FORMATS) gets the same
treatment, on samples written by the real writers (fixtures/make_*.py):

1. round trip: the values ckptstat reads equal the writing library's, read live where it is installed
   (torch, h5py) and otherwise as the generator recorded them (fixtures/expected_*.json);
2. truncation at every structural boundary (tests/fuzz/layouts.py, plus each tensor's first and last
   byte as the reader located them) raises a CkptstatError, and
3. random bit flips with a fixed seed: opening, summarizing and reading every value either works or
   raises a CkptstatError; in both, never anything else, within bounded memory and time (the fuzz
   worker's checks, tests/fuzz/fuzzlib.py: a separate process with a memory cap and a liveness guard);
4. hostile claims (sizes, counts and offsets far beyond the file, negative or overflowing): refused,
   with exit code 1 and one line naming the file.

A format registered without an entry in SAMPLES fails every test here: give it a sample, an oracle,
a layout and its hostile claims, and it inherits the contract.
"""
from __future__ import annotations

import copy
import hashlib
import io
import json
import math
import os
import pickletools
import random
import struct
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from conftest import FIXTURES, fixture
from fuzz.fuzzlib import Case, check
from fuzz.layouts import (
    Layout,
    gguf_layout,
    h5_layout,
    legacy_layout,
    pickle_fields,
    safetensors_layout,
    tar_layout,
    tf_index_layout,
    zip_layout,
)
from test_tf_bundle import pb, table

from ckptstat import TensorInfo, open_checkpoint
from ckptstat.cli import main
from ckptstat.formats import registry
from ckptstat.formats import tf_bundle as tfb

HANG_S = 60          # the liveness guard per case: a reader that loops on hostile bytes fails here
FLIPS = 20           # bit-flip cases per sample


@dataclass(frozen=True)
class Oracle:
    """One tensor as the writing library sees it; the fields that are set are checked."""
    shape: tuple[int, ...]
    values: np.ndarray | None = None   # exact, as float64 (complex: real and imaginary parts last)
    total: float | None = None         # the sum of the values, as recorded
    sha256: str | None = None          # of the values as little-endian float32


@dataclass(frozen=True)
class Sample:
    path: str                                    # under fixtures/: the file ckptstat opens, and mutates
    oracle: Callable[[str], dict[str, Oracle]]   # path -> tensors by key, as the writing library reads them
    layout: Callable[[bytes], Layout]            # the file's structural boundaries and integer fields
    claims: Callable[[str], dict[str, bytes]]    # path -> the file with one hostile claim, by label
    key: Callable[[TensorInfo], str] = lambda t: t.name   # a tensor's name in the oracle
    companions: tuple[str, ...] = ()             # the checkpoint's other files, beside `path`


def _f64(a: np.ndarray) -> np.ndarray:
    return np.stack([a.real, a.imag], axis=-1).astype(np.float64) if np.iscomplexobj(a) else a.astype(np.float64)


def _expected(name: str) -> dict:
    with open(fixture(f"expected_{name}.json")) as f:
        return json.load(f)


def u64(n: int) -> bytes:
    return struct.pack("<Q", n % (1 << 64))


def patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


# ---------------------------------------------------------------------------------------------- safetensors
def safetensors_oracle(path: str) -> dict[str, Oracle]:
    """Values recorded by fixtures/make_safetensors.py through safetensors.torch."""
    rec = _expected("safetensors")[os.path.relpath(path, FIXTURES)]
    return {k: Oracle(tuple(v["shape"]), values=np.array(v["values"], dtype=np.float64)) for k, v in rec.items()}


def safetensors_claims(path: str) -> dict[str, bytes]:
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", data)
    header, body = json.loads(data[8:8 + n]), data[8 + n:]
    name = next(k for k, v in header.items() if k != "__metadata__" and v["data_offsets"][1] > v["data_offsets"][0])

    def entry(**change: object) -> bytes:
        h = copy.deepcopy(header)
        h[name].update(change)
        raw = json.dumps(h).encode()
        return u64(len(raw)) + raw + body

    return {"header length past the end": u64(len(data) * 1000) + data[8:],
            "header length 2**64 - 1": u64(2**64 - 1) + data[8:],
            "data end at 2**64": entry(data_offsets=[0, 2**64]),
            "negative data start": entry(data_offsets=[-8, 0]),
            "shape overflowing int64": entry(shape=[2**62, 2**62]),
            "shape far beyond the file": entry(shape=[len(data) * 1000])}


# ---------------------------------------------------------------------------------------------- torch
def torch_oracle(path: str) -> dict[str, Oracle]:
    """What torch.load(weights_only=True) holds."""
    torch = pytest.importorskip("torch")
    obj = torch.load(path, map_location="cpu", weights_only=True)
    assert isinstance(obj, dict)
    return {k: Oracle(tuple(t.shape), values=(torch.view_as_real(t) if t.is_complex() else t).double().numpy())
            for k, t in obj.items()}


def torch_training_oracle(path: str) -> dict[str, Oracle]:
    """What torch.load holds of a training checkpoint naming plain-data classes outside its allowlist (argparse, numpy,
    omegaconf: fixtures/make_torch_training_data.py, the repo's own file), every tensor by its dotted path."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("omegaconf")

    def flat(o: object, name: str = "") -> dict[str, object]:
        if isinstance(o, torch.Tensor):
            return {name: o}
        items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, (list, tuple)) else ()
        return {k2: v2 for k, v in items for k2, v2 in flat(v, f"{name}.{k}" if name else str(k)).items()}
    obj = torch.load(path, map_location="cpu", weights_only=False)   # (weights_only refuses its argparse.Namespace)
    return {k: Oracle(tuple(t.shape), values=t.double().numpy()) for k, t in flat(obj).items()}


def _members(data: bytes) -> dict[str, zipfile.ZipInfo]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {i.filename: i for i in z.infolist()}


def _central_entry(data: bytes, member: str) -> int:
    cd = data.find(b"PK\x01\x02")
    while cd != -1:
        n = struct.unpack_from("<H", data, cd + 28)[0]
        if data[cd + 46:cd + 46 + n].decode() == member:
            return cd
        cd = data.find(b"PK\x01\x02", cd + 4)
    raise AssertionError(member)


def _sizes(data: bytes, member: str, size: int) -> bytes:
    """The member's compressed and uncompressed sizes in the central directory set to `size`."""
    at = _central_entry(data, member) + 20
    return patched(patched(data, at, "<I", size), at + 4, "<I", size)


def torch_zip_claims(path: str) -> dict[str, bytes]:
    data = open(path, "rb").read()
    members = _members(data)
    pkl = next(n for n in members if n.endswith("/data.pkl"))
    record = next(n for n in members if "/data/" in n)
    shorter = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as zin, zipfile.ZipFile(shorter, "w") as zout:
        for info in zin.infolist():
            blob = zin.read(info)
            zout.writestr(info.filename, blob[:-4] if "/data/" in info.filename else blob)
    eocd64 = data.rfind(b"PK\x06\x06")    # torch writes zip64 end records: central directory offset at +48
    cd_offset = (eocd64 + 48, "<Q") if eocd64 != -1 else (data.rfind(b"PK\x05\x06") + 16, "<I")
    return {"central directory past the end": patched(data, cd_offset[0], cd_offset[1], len(data) * 1000),
            "storage record of 10**9 bytes": _sizes(data, record, 10**9),
            "data.pkl of 10**9 bytes": _sizes(data, pkl, 10**9),
            "local header name length 65535": patched(data, members[pkl].header_offset + 26, "<H", 0xFFFF),
            "tensor views past their storage records": shorter.getvalue()}


def _pickle_end(f: io.BytesIO) -> int:
    for _ in pickletools.genops(f):
        pass
    return f.tell()


def torch_legacy_claims(path: str) -> dict[str, bytes]:
    data = open(path, "rb").read()
    f = io.BytesIO(data)
    head = [_pickle_end(f) for _ in range(5)]    # magic, protocol, sys_info, object, storage keys
    return {"first storage of 10**12 elements": patched(data, head[4], "<q", 10**12),
            "first storage of -1 elements": patched(data, head[4], "<q", -1),
            "sys_info string of 2 GiB": data[:head[1]] + b"\x80\x02X\xff\xff\xff\x7fabc"}


# ---------------------------------------------------------------------------------------------- TF bundle
def tf_oracle(path: str) -> dict[str, Oracle]:
    """Shapes and sums recorded by fixtures/make_tf.py from TensorFlow's own reader (not installed here)."""
    rec = _expected("tf")[os.path.basename(os.path.dirname(path))]["variables"]
    return {k: Oracle(tuple(v["shape"]), total=v["sum"]) for k, v in rec.items()}


def tf_claims(path: str) -> dict[str, bytes]:
    """One real entry re-encoded with a varint claim set to a hostile value (2**64 - 1 reads as -1)."""
    entries = tfb.read_table(path)
    # a numeric tensor whose bytes are in a shard: not the header, a partition slice, a partitioned
    # variable (field 7, slices) or a string tensor (dtype 7)
    i = next(i for i, (k, v) in enumerate(entries) if k and k[:1] != b"\x00" and not _has(v, 7)
             and tfb.parse_entry(v).dtype != 7)

    def with_field(num: int, value: int, at: int = i) -> bytes:
        fields = [(n, w, v) for n, w, v in tfb.fields(entries[at][1]) if n != num] + [(num, 0, value)]
        out = list(entries)
        out[at] = (out[at][0], b"".join(pb(n, w, v) for n, w, v in fields))
        return table(out)

    dims = tfb.parse_entry(entries[i][1]).shape or (1,)
    shape = b"".join(pb(2, 2, pb(1, 0, d)) for d in (2**62, *dims[1:]))   # TensorShapeProto: 2 repeated dim
    out = list(entries)
    out[i] = (out[i][0], b"".join(pb(n, w, v) for n, w, v in tfb.fields(out[i][1]) if n != 2) + pb(2, 2, shape))
    claims = {"offset -1": with_field(4, 2**64 - 1), "offset 2**63 - 1": with_field(4, 2**63 - 1),
              "size 2**63 - 1": with_field(5, 2**63 - 1), "shard 10**6": with_field(3, 10**6),
              "header: 2**31 shards": with_field(1, 2**31, at=0), "dimension 2**62": table(out)}
    strings = [j for j, (k, v) in enumerate(entries) if k and tfb.parse_entry(v).dtype == 7]
    if strings:   # each string takes a length byte at least: 2**62 of them cannot fit in a small entry
        out = list(entries)
        j = strings[0]
        out[j] = (out[j][0], b"".join(pb(n, w, v) for n, w, v in tfb.fields(out[j][1]) if n != 2)
                  + pb(2, 2, pb(2, 2, pb(1, 0, 2**62))))
        claims["2**62 strings"] = table(out)
    return claims


def _has(value: bytes, num: int) -> bool:
    return any(n == num for n, _, _ in tfb.fields(value))


# ---------------------------------------------------------------------------------------------- Keras h5
def h5_oracle(path: str) -> dict[str, Oracle]:
    """Every dataset as h5py reads it (Keras 3 stores bf16 as opaque 2-byte values, attribute dtype)."""
    import h5py

    out: dict[str, Oracle] = {}

    def visit(name: str, obj: object) -> None:
        if isinstance(obj, h5py.Dataset):
            v = np.asarray(obj[()])
            if obj.attrs.get("dtype") in ("bfloat16", b"bfloat16"):
                v = (v.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
            out["/" + name] = Oracle(tuple(obj.shape), values=_f64(v))

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return out


def h5_claims(path: str) -> dict[str, bytes]:
    """Superblock addresses (HDF5 file format spec II.A) beyond the file."""
    data = open(path, "rb").read()
    # version 0: end-of-file address at 40, root symbol table entry at 56 (its object header address at
    # 64); versions 2 and 3: end-of-file address at 28, root object header address at 36
    eof, root = (40, 64) if data[8] == 0 else (28, 36)
    return {"end-of-file address 2**63": patched(data, eof, "<Q", 2**63),
            "end-of-file address past the end": patched(data, eof, "<Q", len(data) * 1000),
            "root group address 2**62": patched(data, root, "<Q", 2**62)}


# ---------------------------------------------------------------------------------------------- GGUF
def gguf_oracle(path: str) -> dict[str, Oracle]:
    """Values gguf-py's reader and `dequantize` gave (fixtures/make_gguf.py), by float32 hash."""
    rec = _expected("gguf")[os.path.basename(path)]["tensors"]
    return {k: Oracle(tuple(v["numpy_shape"]), total=v["sum"], sha256=v["sha256_f32"]) for k, v in rec.items()}


def gguf_py_oracle(path: str) -> dict[str, Oracle]:
    """Values gguf-py's reader and `dequantize` give now (a file llama.cpp's llama-quantize wrote:
    fixtures/make_llama_quantize.py, k-quants included)."""
    import gguf

    return {t.name: Oracle(tuple(int(d) for d in reversed(t.shape)),
                           values=_f64(gguf.quants.dequantize(t.data, t.tensor_type)))
            for t in gguf.GGUFReader(path).tensors}


def gguf_claims(path: str) -> dict[str, bytes]:
    data = open(path, "rb").read()
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    cuts, _ = gguf_layout(data)
    info = cuts[4 + n_kv]                        # the first tensor info: name, n_dims, dims, type, offset
    name_len = struct.unpack_from("<Q", data, info)[0]
    n_dims_at = info + 8 + name_len
    n_dims = struct.unpack_from("<I", data, n_dims_at)[0]
    offset_at = n_dims_at + 4 + 8 * n_dims + 4
    return {"tensor_count 2**64 - 1": patched(data, 8, "<Q", 2**64 - 1),
            "kv_count 2**63": patched(data, 16, "<Q", 2**63),
            "first key of 2**62 bytes": patched(data, 24, "<Q", 2**62),
            "tensor name of 2**63 bytes": patched(data, info, "<Q", 2**63),
            "n_dims 9": patched(data, n_dims_at, "<I", 9),
            "dimension 2**62": patched(data, n_dims_at + 4, "<Q", 2**62),
            "tensor offset 2**63": patched(data, offset_at, "<Q", 2**63)}


# ---------------------------------------------------------------------------------------------- ONNX
def onnx_oracle(path: str) -> dict[str, Oracle]:
    """What onnx.numpy_helper.to_array read back (fixtures/make_onnx.py): values, or sum and float32 hash."""
    rec = _expected("onnx")[os.path.relpath(path, FIXTURES)]
    return {k: Oracle(tuple(v["shape"]), values=np.array(v["values"], dtype=np.float64)) if "values" in v
            else Oracle(tuple(v["shape"]), total=v["sum"], sha256=v["sha256_f32"]) for k, v in rec.items()}


def _pb(data: bytes, start: int, end: int):
    """(field number, wire type, field start, payload start, payload end) per protobuf field
    (protobuf encoding spec: varint keys, wire types 0, 1, 2, 5)."""
    def varint(pos: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            b = data[pos]
            value |= (b & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if not b & 0x80:
                return value, pos

    pos = start
    while pos < end:
        field_start = pos
        key, pos = varint(pos)
        wire = key & 7
        if wire == 0:
            _, after = varint(pos)
        elif wire == 2:
            n, pos = varint(pos)
            after = pos + n
        else:
            after = pos + {1: 8, 5: 4}[wire]
        yield key >> 3, wire, field_start, pos, after
        pos = after


INNER = 8


def onnx_layout(data: bytes) -> Layout:
    """ModelProto top-level fields up to opset_import (a cut after it leaves a whole model), every field
    of the graph (onnx.proto GraphProto), and every field inside the first INNER nodes, initializers and
    value infos (the rest repeat the same message kinds: cut at their edges only)."""
    cuts: list[int] = []
    top = list(_pb(data, 0, len(data)))
    cuts += [f[2] for f in top if f[0] in (7, 8)] + [f[3] for f in top]
    seen: dict[int, int] = {}
    for num, _, _, a, b in top:
        if num != 7:
            continue
        for gnum, gwire, gstart, ga, gb in _pb(data, a, b):
            cuts += [gstart, ga, gb]
            seen[gnum] = seen.get(gnum, 0) + 1
            if gwire == 2 and gnum in (1, 5, 15) and seen[gnum] <= INNER:
                cuts += [f[2] for f in _pb(data, ga, gb)] + [f[3] for f in _pb(data, ga, gb)]
    return sorted(set(cuts)), []


def onnx_claims(path: str) -> dict[str, bytes]:
    """Hostile ModelProtos written by the onnx package itself from the sample."""
    import onnx

    def edit(change) -> bytes:
        m = onnx.load(path, load_external_data=False)
        change(m.graph.initializer[0])
        return m.SerializeToString()

    def dims(*d: int):
        return lambda t: (t.ClearField("dims"), t.dims.extend(d))

    def entry(key: str, value: str):
        def change(t):
            for e in t.external_data:
                if e.key == key:
                    e.value = value
                    return
            t.external_data.add(key=key, value=value)
        return change

    claims = {"dims 2**40 x 2**40": edit(dims(2**40, 2**40)), "dims 2**62 x 4": edit(dims(2**62, 4)),
              "dims one more row than stored": edit(lambda t: t.dims.__setitem__(0, t.dims[0] + 1)),
              "data type 99": edit(lambda t: setattr(t, "data_type", 99))}
    if onnx.load(path, load_external_data=False).graph.initializer[0].data_location == 1:
        claims.update({"external offset 2**62": edit(entry("offset", str(2**62))),
                       "external length 2**40": edit(entry("length", str(2**40))),
                       "external location ../outside.bin": edit(entry("location", "../outside.bin")),
                       "external location /etc/hostname": edit(entry("location", "/etc/hostname"))})
    return claims


# ---------------------------------------------------------------------------------------------- numpy
def numpy_oracle(path: str) -> dict[str, Oracle]:
    """What np.load (allow_pickle=False) reads."""
    if path.endswith(".npy"):
        items = {os.path.basename(path).removesuffix(".npy"): np.load(path, allow_pickle=False)}
    else:
        with np.load(path, allow_pickle=False) as loaded:
            items = dict(loaded.items())
    return {k: Oracle(tuple(v.shape), values=_f64(v)) for k, v in items.items()}


def npy_layout(data: bytes) -> Layout:
    """Magic, version, header length (u16 in 1.0, u32 in 2.0/3.0), header (numpy NEP 1)."""
    width = 2 if data[6] == 1 else 4
    n = int.from_bytes(data[8:8 + width], "little")
    return [6, 8, 8 + width, 8 + width + n], [(8, width)]


def _npy_header(data: bytes, header: str) -> bytes:
    """The .npy bytes with its header dict replaced, padded to the same length."""
    n = int.from_bytes(data[8:10], "little")
    text = header.ljust(n - 1) + "\n"
    assert len(text) == n, header
    return data[:10] + text.encode("latin1") + data[10 + n:]


def npy_claims(path: str) -> dict[str, bytes]:
    data = open(path, "rb").read()
    return {"header length 65535": patched(data, 8, "<H", 0xFFFF),
            "shape 2**62 x 4": _npy_header(data, "{'descr': '<f4', 'fortran_order': False, 'shape': (2**62, 4), }"),
            "shape (4611686018427387904, 4)": _npy_header(data, "{'descr': '<f4', 'fortran_order': False, "
                                                                "'shape': (4611686018427387904, 4), }"),
            "one more row than stored": _npy_header(data, "{'descr': '<f8', 'fortran_order': False, 'shape': (13, 4), }"),
            "object array (a pickle)": _npy_header(data, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }"),
            "version 9": patched(data, 6, "<B", 9)}


def npz_claims(path: str) -> dict[str, bytes]:
    data = open(path, "rb").read()
    members = _members(data)
    first = next(iter(members))
    eocd = data.rfind(b"PK\x05\x06")
    return {"central directory past the end": patched(data, eocd + 16, "<I", len(data) * 1000),
            "member of 10**9 bytes": _sizes(data, first, 10**9),
            "local header name length 65535": patched(data, members[first].header_offset + 26, "<H", 0xFFFF),
            "local header offset past the end": patched(data, _central_entry(data, first) + 42, "<I", len(data) * 10)}


# ---------------------------------------------------------------------------------------------- Keras .keras
def keras_zip_oracle(path: str) -> dict[str, Oracle]:
    """Every dataset of model.weights.h5 as h5py read it (fixtures/make_keras_zip.py), by HDF5 path."""
    rec = _expected("keras_zip")[os.path.relpath(path, FIXTURES)]
    return {k: Oracle(tuple(v["shape"]), values=np.array(v["values"], dtype=np.float64)) for k, v in rec.items()}


def keras_zip_claims(path: str) -> dict[str, bytes]:
    """The zip claims every archive gets, plus HDF5 superblock addresses inside a stored weights member."""
    data = open(path, "rb").read()
    claims = npz_claims(path)
    info = _members(data)["model.weights.h5"]
    if info.compress_type == zipfile.ZIP_STORED:
        name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
        h5 = info.header_offset + 30 + name_len + extra_len
        eof, root = (40, 64) if data[h5 + 8] == 0 else (28, 36)
        claims.update({"h5 end-of-file address 2**63": patched(data, h5 + eof, "<Q", 2**63),
                       "h5 root group address 2**62": patched(data, h5 + root, "<Q", 2**62)})
    return claims


# ---------------------------------------------------------------------------------------------- Flax msgpack
def flax_oracle(path: str) -> dict[str, Oracle]:
    """What flax.serialization.msgpack_restore read back (fixtures/make_flax.py): values, or sum and float64 hash."""
    rec = _expected("flax")["files"][os.path.relpath(path, os.path.join(FIXTURES, "flax"))]
    return {k: Oracle(tuple(v["shape"]), values=np.array(v["values"], dtype=np.float64)) if "values" in v
            else Oracle(tuple(v["shape"]), total=v["sum"]) for k, v in rec.items()}


# msgpack spec (github.com/msgpack/msgpack/blob/master/spec.md): marker -> (bytes of its length or count,
# what it counts: "bytes", "items" (an array), "pairs" (a map), "ext" (bytes after a type byte), "fixed")
_MP = {0xC4: (1, "bytes"), 0xC5: (2, "bytes"), 0xC6: (4, "bytes"), 0xC7: (1, "ext"), 0xC8: (2, "ext"), 0xC9: (4, "ext"),
       0xD9: (1, "bytes"), 0xDA: (2, "bytes"), 0xDB: (4, "bytes"), 0xDC: (2, "items"), 0xDD: (4, "items"),
       0xDE: (2, "pairs"), 0xDF: (4, "pairs")}
_MP_FIXED = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4,
             0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}


def flax_layout(data: bytes) -> Layout:
    """Where every msgpack object starts and ends, ext payloads included (msgpack spec), and the offset
    of each length or count field (big-endian)."""
    cuts: list[int] = []
    fields: list[tuple[int, int]] = []

    def obj(p: int) -> int:
        cuts.append(p)
        b = data[p]
        if b <= 0x7F or b >= 0xE0:
            return p + 1
        if b in _MP_FIXED:
            return p + 1 + _MP_FIXED[b]
        if 0x80 <= b <= 0x9F:
            n, kind, p = b & 0x0F, "pairs" if b <= 0x8F else "items", p + 1
        elif 0xA0 <= b <= 0xBF:
            n, kind, p = b & 0x1F, "bytes", p + 1
        else:
            width, kind = _MP[b]
            fields.append((p + 1, width))
            n, p = int.from_bytes(data[p + 1:p + 1 + width], "big"), p + 1 + width
        if kind == "ext":
            cuts.append(p + 1)
            return p + 1 + n
        if kind == "bytes":
            return p + n
        for _ in range(2 * n if kind == "pairs" else n):
            p = obj(p)
        return p

    assert obj(0) == len(data)
    return sorted(set(cuts)), fields


def flax_claims(path: str) -> dict[str, bytes]:
    """Hostile files written by msgpack from the sample's own tree (ext payloads rewritten by flax's rules)."""
    import msgpack

    data = open(path, "rb").read()
    tree = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=lambda code, b: msgpack.ExtType(code, b))

    def first_array(t: dict) -> tuple[dict, str]:
        for k, v in t.items():
            if isinstance(v, msgpack.ExtType) and v.code == 1:
                return t, k
            if isinstance(v, dict):
                try:
                    return first_array(v)
                except StopIteration:
                    pass
        raise StopIteration

    def with_payload(shape: list[int] | None = None, dtype: str | None = None, raw: bytes | None = None) -> bytes:
        t = copy.deepcopy(tree)
        parent, key = first_array(t)
        s, d, r = msgpack.unpackb(parent[key].data, raw=False)
        parent[key] = msgpack.ExtType(1, msgpack.packb((s if shape is None else shape, d if dtype is None else dtype,
                                                        r if raw is None else raw), use_bin_type=True))
        return msgpack.packb(t, use_bin_type=True)

    ext = next(p for p in flax_layout(data)[0] if data[p] in (0xC7, 0xC8, 0xC9))   # ext 8/16/32: its length field
    width = {0xC7: 1, 0xC8: 2, 0xC9: 4}[data[ext]]
    return {"top-level map of 2**32 - 1 entries": b"\xdf\xff\xff\xff\xff" + data[1:],
            "shape 2**62 x 4": with_payload(shape=[2**62, 4]),
            "shape 2**40 x 2**40": with_payload(shape=[2**40, 2**40]),
            "one more row than stored": with_payload(raw=b""),
            "dtype object": with_payload(dtype="object"),
            "ext length past the end": data[:ext + 1] + (len(data) * 1000).to_bytes(width + 4, "big")[-width:]
                                       + data[ext + 1 + width:],
            "ext32 length 2**32 - 1": data[:1] + b"\xa1a\xc9\xff\xff\xff\xff\x01" + data[1:],
            "nested 10**5 deep": b"\x81\xa1a" * 100_000 + b"\xc0"}


# ---------------------------------------------------------------------------------------------- DCP
def dcp_oracle(path: str) -> dict[str, Oracle]:
    """What torch.distributed.checkpoint.load reads into tensors of the stored shapes (no process group)."""
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    folder = os.path.dirname(path)
    meta = dcp.FileSystemReader(folder).read_metadata()
    sd = {k: torch.empty(m.size, dtype=m.properties.dtype) for k, m in meta.state_dict_metadata.items()
          if isinstance(m, TensorStorageMetadata)}
    dcp.load(sd, checkpoint_id=folder, no_dist=True)
    return {k: Oracle(tuple(t.shape), values=t.double().numpy()) for k, t in sd.items()}


def dcp_rank_local_oracle(path: str) -> dict[str, Oracle]:
    """A folder of rank-local metadata (fixtures/make_dcp.py: the `sharded` folder's model, saved without rank
    coordination in the same run): the model tensors dcp.load reads from the `sharded` folder."""
    return {k: o for k, o in dcp_oracle(fixture("dcp", "sharded", ".metadata")).items() if k.startswith("model.")}


def dcp_layout(data: bytes) -> Layout:
    """The `.metadata` pickle (torch/distributed/checkpoint/filesystem.py pickles Metadata): opcode by opcode over
    its first KiB (the Metadata object, the first tensor's records), every 5th opcode after, where the same
    records repeat per tensor and per chunk."""
    cuts, spans = pickle_fields(data)
    return [c for i, c in enumerate(cuts) if c < 1024 or i % 5 == 0 or c == cuts[-1]], spans


def dcp_claims(path: str) -> dict[str, bytes]:
    """Hostile `.metadata` pickles, written by pickle from torch's own Metadata of the sample (trusted here)."""
    pytest.importorskip("torch")
    import pickle

    data = open(path, "rb").read()

    def edit(change) -> bytes:
        meta = pickle.loads(data)
        change(meta)
        return pickle.dumps(meta)

    def item(**fields: object):
        def change(meta) -> None:
            info = next(iter(meta.storage_data.values()))
            for k, v in fields.items():
                setattr(info, k, v)
        return change

    def tensor(size: tuple[int, ...]):
        def change(meta) -> None:
            md = max((m for m in meta.state_dict_metadata.values() if hasattr(m, "chunks") and len(m.size) == 2),
                     key=lambda m: len(m.chunks))   # a matrix in the most chunks (a rank-local file: one each)
            md.size = size
        return change

    newobj = data.index(b"\x81")    # after Metadata's NEWOBJ: a global outside every allowlist, called
    return {"item offset past the end": edit(item(offset=len(data) * 10**6)),
            "item length 2**62": edit(item(length=2**62)),
            "item in ../outside.distcp": edit(item(relative_path="../outside.distcp")),
            "item in a missing file": edit(item(relative_path="__9_0.distcp")),
            "tensor size 2**62 x 4 over its chunks": edit(tensor((2**62, 4))),
            "tensor size 2**40 x 2**40": edit(tensor((2**40, 2**40))),
            "global posix.system": data[:newobj] + b"cposix\nsystem\n(S'true'\ntR."}


# ---------------------------------------------------------------------------------------------- torch.export
def pt2_oracle(path: str) -> dict[str, Oracle]:
    """What torch.export.load holds: the program's state dict (parameters and buffers) and tensor constants."""
    torch = pytest.importorskip("torch")
    ep = torch.export.load(path)
    return {k: Oracle(tuple(t.shape), values=t.detach().double().numpy())
            for k, t in [*ep.state_dict.items(), *ep.constants.items()]}


def _rewritten(data: bytes, edit: Callable[[str, bytes], bytes]) -> bytes:
    """The zip with each member's bytes passed through `edit(name, bytes)`, its other bytes as zipfile writes them."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, edit(info.filename, zin.read(info)))
    return out.getvalue()


def pt2_claims(path: str) -> dict[str, bytes]:
    data = open(path, "rb").read()
    members = _members(data)
    config = next(n for n in members if n.endswith("_weights_config.json"))
    record = next(n for n in members if "/data/weights/weight_" in n)

    def meta(**change: object) -> bytes:
        def edit(name: str, blob: bytes) -> bytes:
            if name != config:
                return blob
            doc = json.loads(blob)
            first = next(iter(doc["config"].values()))
            first.update(change.pop("entry", {}))   # type: ignore[arg-type]
            first["tensor_meta"].update(change)
            return json.dumps(doc).encode()
        return _rewritten(data, edit)

    return {"weights config of 10**9 bytes": _sizes(data, config, 10**9),
            "weight record of 10**9 bytes": _sizes(data, record, 10**9),
            "sizes far beyond the record": meta(sizes=[{"as_int": len(data) * 1000}], strides=[{"as_int": 1}]),
            "sizes overflowing int64": meta(sizes=[{"as_int": 2**62}, {"as_int": 2**62}],
                                            strides=[{"as_int": 1}, {"as_int": 1}]),
            "storage offset 2**62": meta(storage_offset={"as_int": 2**62}),
            "negative stride": meta(strides=[{"as_int": -1}] * 2),
            "dtype code 99": meta(dtype=99),
            "path_name ../../etc/passwd": meta(entry={"path_name": "../../etc/passwd"}),
            "path_name of a missing record": meta(entry={"path_name": "weight_999"})}


# ---------------------------------------------------------------------------------------------- NeMo archives
def _nemo_weights(data: bytes) -> tarfile.TarInfo:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return next(m for m in tar.getmembers() if m.name.endswith("model_weights.ckpt"))


def nemo_oracle(path: str) -> dict[str, Oracle]:
    """What torch.load(weights_only=True) holds for the model_weights.ckpt NeMo's restore_from extracts."""
    torch = pytest.importorskip("torch")
    data = open(path, "rb").read()
    m = _nemo_weights(data)
    obj = torch.load(io.BytesIO(data[m.offset_data:m.offset_data + m.size]), map_location="cpu", weights_only=True)
    return {k: Oracle(tuple(t.shape), values=t.double().numpy()) for k, t in obj.items()}


def _tar_size(data: bytes, m: tarfile.TarInfo, size: int) -> bytes:
    """The member's header claiming `size` bytes, its checksum made again (tarfile refuses a wrong one)."""
    head = bytearray(data[m.offset:m.offset + 512])
    assert size < 8**11   # (11 octal digits and a NUL: the field's 12 bytes)
    head[124:136] = b"%011o\0" % size
    head[148:156] = b" " * 8
    head[148:156] = b"%06o\0 " % sum(head)
    return data[:m.offset] + bytes(head) + data[m.offset + 512:]


def nemo_claims(path: str) -> dict[str, bytes]:
    data = open(path, "rb").read()
    m = _nemo_weights(data)
    inner = data[m.offset_data:m.offset_data + m.size]

    def spliced(member: bytes) -> bytes:
        return data[:m.offset_data] + member + data[m.offset_data + len(member):]

    members = _members(inner)
    record = next(n for n in members if "/data/" in n)
    pkl = next(n for n in members if n.endswith("/data.pkl"))
    eocd64 = inner.rfind(b"PK\x06\x06")
    return {"weights member of 8 GiB": _tar_size(data, m, 8**11 - 1),
            "weights' central directory past the end": spliced(patched(inner, eocd64 + 48, "<Q", len(data) * 1000)),
            "storage record of 10**9 bytes": spliced(_sizes(inner, record, 10**9)),
            "data.pkl of 10**9 bytes": spliced(_sizes(inner, pkl, 10**9))}


# ---------------------------------------------------------------------------------------------- numpy pickles
def numpy_pickle_oracle(path: str) -> dict[str, Oracle]:
    """What pickle.load (numpy) reads from a plain pickle, live; a Paddle file's sums as paddle.load gave them
    (fixtures/make_numpy_pickles.py: paddle is not installed here)."""
    if path.endswith(".pdparams"):
        rec = _expected("numpy_pickles")[os.path.relpath(path, FIXTURES)]
        return {k: Oracle(tuple(v["shape"]), total=v["sum"]) for k, v in rec.items()}
    import pickle

    def flat(o: object, name: str = "") -> dict[str, np.ndarray]:
        if isinstance(o, dict):
            return {k2: v2 for k, v in o.items() for k2, v2 in flat(v, f"{name}.{k}" if name else str(k)).items()}
        if isinstance(o, (list, tuple)):
            return {k2: v2 for i, v in enumerate(o) for k2, v2 in flat(v, f"{name}.{i}" if name else str(i)).items()}
        return {name: np.asarray(o)}
    with open(path, "rb") as f:
        tree = pickle.load(f)   # (a fixture written by fixtures/make_numpy_pickles.py: numpy arrays only)
    return {k: Oracle(tuple(v.shape), values=_f64(v)) for k, v in flat(tree).items()}


def _fake_array(state: tuple) -> object:
    """An object pickling as numpy's _reconstruct with `state` (shape, dtype, data as given), built by pickle itself."""
    class Fake:
        def __reduce__(self) -> tuple:
            return (np._core.multiarray._reconstruct, (np.ndarray, (0,), b"b"), state)
    return Fake()


def numpy_pickle_claims(path: str) -> dict[str, bytes]:
    import pickle
    data = open(path, "rb").read()
    big = max((pos for op, arg, pos in pickletools.genops(data)
               if op.name in ("BINBYTES", "BYTEARRAY8", "BINBYTES8", "BINUNICODE")), default=None)   # (protocol 2: text)
    out = {"shape 2**62 x 4": pickle.dumps({"w": _fake_array((1, (2**62, 4), np.dtype("f4"), False, b"\0" * 16))}, 4),
           "one more row than stored": pickle.dumps({"w": _fake_array((1, (5, 4), np.dtype("f4"), False, b"\0" * 64))}, 4),
           "object dtype": pickle.dumps({"w": _fake_array((1, (2,), np.dtype("O"), False, b"\0" * 16))}, 4),
           "global posix.system": b"\x80\x04cposix\nsystem\n(S'true'\ntR."}
    if big is not None:
        width = 4 if data[big] in (pickle.BINBYTES[0], pickle.BINUNICODE[0]) else 8
        out["payload of 2**40 bytes"] = patched(data, big + 1, "<I" if width == 4 else "<Q", 2**32 - 1 if width == 4 else 2**40)
    return out


# ---------------------------------------------------------------------------------------------- the table
SAMPLES: dict[str, list[Sample]] = {
    "safetensors": [Sample("dtypes.safetensors", safetensors_oracle, safetensors_layout, safetensors_claims)],
    "pytorch (zip)": [Sample("torch/dtypes.pt", torch_oracle, zip_layout, torch_zip_claims),
                      Sample("torch/training-data.pt", torch_training_oracle, zip_layout, torch_zip_claims)],
    "pytorch (legacy)": [Sample("torch/dtypes-legacy.pt", torch_oracle, legacy_layout, torch_legacy_claims),
                         Sample("torch/training-data-legacy.pt", torch_training_oracle, legacy_layout,
                                torch_legacy_claims)],
    "tf-bundle": [
        Sample("tf1-partitioned/model.ckpt-5.index", tf_oracle, tf_index_layout, tf_claims,
               companions=("model.ckpt-5.data-00000-of-00002", "model.ckpt-5.data-00001-of-00002")),
        Sample("tf2-keras/ckpt-1.index", tf_oracle, tf_index_layout, tf_claims,
               key=lambda t: str(t.extra.get("checkpoint_key", t.name)), companions=("ckpt-1.data-00000-of-00001",)),
    ],
    "keras-h5": [Sample("keras3/bf16.weights.h5", h5_oracle, h5_layout, h5_claims, key=lambda t: str(t.extra["h5_path"])),
                 Sample("keras2/weights.h5", h5_oracle, h5_layout, h5_claims, key=lambda t: str(t.extra["h5_path"]))],
    "gguf": [Sample("gguf/llama-tiny-q.gguf", gguf_oracle, gguf_layout, gguf_claims),
             Sample("conversions/quantized/llama.q2_k.gguf", gguf_py_oracle, gguf_layout, gguf_claims)],
    "onnx": [Sample("onnx/dtypes.onnx", onnx_oracle, onnx_layout, onnx_claims),
             Sample("onnx/bert-tiny-external/model.onnx", onnx_oracle, onnx_layout, onnx_claims,
                    companions=("model.onnx.data",))],
    "numpy (npy)": [Sample("numpy/embedding.npy", numpy_oracle, npy_layout, npy_claims),
                    Sample("numpy/fortran.npy", numpy_oracle, npy_layout, npy_claims)],
    "numpy (npz)": [Sample("numpy/bert-layer.npz", numpy_oracle, zip_layout, npz_claims),
                    Sample("numpy/bert-layer-compressed.npz", numpy_oracle, zip_layout, npz_claims)],
    "keras (zip)": [Sample("keras3-zip/mlp.keras", keras_zip_oracle, zip_layout, keras_zip_claims,
                           key=lambda t: str(t.extra["h5_path"])),
                    Sample("keras3-zip/mlp-deflated.keras", keras_zip_oracle, zip_layout, keras_zip_claims,
                           key=lambda t: str(t.extra["h5_path"]))],
    "dcp": [Sample("dcp/sharded/.metadata", dcp_oracle, dcp_layout, dcp_claims,
                   companions=("__0_0.distcp", "__1_0.distcp")),
            Sample("dcp/rank_local/__0.metadata", dcp_rank_local_oracle, dcp_layout, dcp_claims,
                   companions=("__1.metadata", "__0_0.distcp", "__1_0.distcp"))],
    "pytorch export (.pt2)": [Sample("pt2/mixed.pt2", pt2_oracle, zip_layout, pt2_claims)],
    "nemo (.nemo)": [Sample("nemo/benign-fastpitch.nemo", nemo_oracle, tar_layout, nemo_claims)],
    "pickle (numpy arrays)": [Sample("numpy-pickles/params-p2.pkl", numpy_pickle_oracle, pickle_fields, numpy_pickle_claims),
                     Sample("numpy-pickles/params-p4.pkl", numpy_pickle_oracle, pickle_fields, numpy_pickle_claims),
                     Sample("numpy-pickles/params-p5.pkl", numpy_pickle_oracle, pickle_fields, numpy_pickle_claims),
                     Sample("paddle/tiny.pdparams", numpy_pickle_oracle, pickle_fields, numpy_pickle_claims)],
    "flax (msgpack)": [Sample("flax/dtypes.msgpack", flax_oracle, flax_layout, flax_claims),
                       Sample("flax/bert-mlm/flax_model.msgpack", flax_oracle, flax_layout, flax_claims)],
}

registry._load_all()
REGISTERED = [f.name for f in registry.FORMATS]


def samples_of(fmt: str) -> list[Sample]:
    assert SAMPLES.get(fmt), f"format {fmt!r} is registered but has no sample in tests/test_reader_contract.py SAMPLES"
    return SAMPLES[fmt]


def test_every_registered_format_has_samples():
    assert sorted(set(REGISTERED) - set(SAMPLES)) == [], "registered formats without contract samples"
    assert sorted(set(SAMPLES) - set(REGISTERED)) == [], "samples for formats no longer registered"


def _case(c: Case, s: Sample, primary: bytes, companion: dict[str, bytes] | None = None) -> str:
    """Write one case (the sample's files, `primary` in place of its main file) into c's folder."""
    folder = os.path.dirname(fixture(s.path))
    for name in s.companions:
        c.write(name, (companion or {}).get(name) or open(os.path.join(folder, name), "rb").read())
    return c.write(os.path.basename(s.path), primary)


# ---------------------------------------------------------------------------------------------- 1. round trip
@pytest.mark.parametrize("fmt", REGISTERED)
def test_round_trip_equals_the_writing_library(fmt):
    for s in samples_of(fmt):
        path = fixture(s.path)
        assert registry.detect(path).name == fmt, s.path
        ckpt = open_checkpoint(path)
        got = {s.key(t): t for t in ckpt}
        want = s.oracle(path)
        assert sorted(got) == sorted(want), s.path
        for key, o in want.items():
            t = got[key]
            assert t.shape == o.shape, (s.path, key)
            if o.values is None and o.total is None and o.sha256 is None:
                continue                              # a string tensor: nothing numeric to compare
            values = ckpt.read(t.name)
            assert values.shape == o.shape, (s.path, key)
            if o.values is not None:
                np.testing.assert_array_equal(_f64(values).reshape(-1), o.values.reshape(-1), err_msg=f"{s.path} {key}")
            if o.total is not None:
                assert math.isclose(float(_f64(values).sum()), o.total, rel_tol=1e-6, abs_tol=1e-6), (s.path, key)
            if o.sha256 is not None:
                assert hashlib.sha256(values.astype("<f4").tobytes()).hexdigest() == o.sha256, (s.path, key)


# ---------------------------------------------------------------------------------------------- 2. truncation
def _tensor_edges(path: str) -> dict[str, set[int]]:
    """Per file name: the first and one-past-last byte of every tensor (or partition) the reader located."""
    edges: dict[str, set[int]] = {}
    for t in open_checkpoint(path):
        parts = t.extra.get("partitions")
        spans = [(p["file"], p["offset"], p["bytes"]) for p in parts] if isinstance(parts, list) else []
        if t.offset is not None:
            spans.append((t.file, t.offset, t.nbytes))
        for file, start, size in spans:
            edges.setdefault(os.path.basename(file), set()).update((start, start + size))
    return edges


@pytest.mark.parametrize("fmt", REGISTERED)
def test_truncation_at_every_boundary(fmt):
    for s in samples_of(fmt):
        folder, main_name = os.path.dirname(fixture(s.path)), os.path.basename(s.path)
        files = {n: open(os.path.join(folder, n), "rb").read() for n in (main_name, *s.companions)}
        cuts = _tensor_edges(fixture(s.path))
        cuts.setdefault(main_name, set()).update(s.layout(files[main_name])[0])
        for name, points in sorted(cuts.items()):
            for cut in sorted(p for p in points if 0 < p < len(files[name])):
                with Case() as c:
                    cut_files = {name: files[name][:cut]}
                    path = _case(c, s, cut_files.get(main_name, files[main_name]), cut_files)
                    reply = check(f"{fmt} (contract: truncated)", path, hang_s=HANG_S)
                    # (a cut just past a file the sample embeds whole, a .pt2's sample inputs, leaves that file: a
                    # torch.save zip of its own, read as one)
                    assert reply["outcome"] != "ok" or registry.detect(path).name != fmt, \
                        f"{s.path}: {name} cut at byte {cut} was read as if whole"


# ---------------------------------------------------------------------------------------------- 3. bit flips
@pytest.mark.parametrize("fmt", REGISTERED)
def test_random_bit_flips(fmt):
    rng = random.Random(f"ckptstat contract {fmt}")   # a str seed is hashed with sha512: the same every run
    for s in samples_of(fmt):
        base = open(fixture(s.path), "rb").read()
        for _ in range(FLIPS):
            data = bytearray(base)
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            with Case() as c:
                check(f"{fmt} (contract: flipped)", _case(c, s, bytes(data)), hang_s=HANG_S)


# ---------------------------------------------------------------------------------------------- 4. hostile claims
@pytest.mark.parametrize("fmt", REGISTERED)
def test_hostile_claims_end_in_one_line(fmt, capsys):
    for s in samples_of(fmt):
        claims = s.claims(fixture(s.path))
        assert claims, s.path
        for label, data in claims.items():
            with Case() as c:
                path = _case(c, s, data)
                reply = check(f"{fmt} (contract: hostile)", path, hang_s=HANG_S)
                assert reply["outcome"] != "ok", f"{s.path}: {label} was not refused"
                rc = main([path])
                err = capsys.readouterr().err
                assert rc == 1 and err.count("\n") == 1 and err.startswith("ckptstat: error: "), (label, err)
                assert os.path.basename(path) in err and "Traceback" not in err and "MemoryError" not in err, (label, err)


# ---------------------------------------------------------------------------------------------- the order rule
def test_no_file_is_accepted_by_two_formats(tmp_path):
    """formats/registry.py's order rule: the `accept`s are exclusive, so the order formats are tried in cannot
    change which reads a file; only the fallbacks (no magic bytes) depend on being tried last. Every fixture
    and every polyglot of the hostile corpus (a zip whose two central directories disagree, a msgpack map that
    is a pickle, a zip claiming version 6.4, a pickle whose head is one opcode) is accepted by one format at
    most besides the fallbacks, and by the one detect() names."""
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from polyglots import flax_pickle, truncated_head_pickle, two_directory_zip, zip_version_64

    marker = str(tmp_path / "never" / "PWNED")
    poly = {"two.npz": two_directory_zip(marker, "npz"), "two.keras": two_directory_zip(marker, "keras"),
            "flax_model.msgpack": flax_pickle(marker), "model_best.pth.tar": truncated_head_pickle(marker),
            "checkpoint_last": zip_version_64(marker)}
    for name, data in poly.items():
        (tmp_path / name).write_bytes(data)
    root = os.path.join(os.path.dirname(__file__), "..", "fixtures")
    paths = [str(tmp_path / n) for n in poly] + [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
    assert any(f.fallback for f in registry.FORMATS)
    seen = 0
    for path in paths:
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        probe = registry.Probe.of(path)
        taken = [f.name for f in registry.FORMATS if not f.fallback and f.accept(probe)]
        assert len(taken) <= 1, (path, taken)
        if taken:
            assert registry.detect(path).name == taken[0], path
        seen += 1
    assert seen > 300
