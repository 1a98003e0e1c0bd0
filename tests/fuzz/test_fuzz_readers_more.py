"""The fuzz suite, continued: ONNX, numpy .npy/.npz, pickles of numpy arrays (Paddle's, pickle.dump's), Flax msgpack,
torch.distributed.checkpoint (DCP) folders, Keras 3 `.keras` zips and TF SavedModels, each from fixtures written by the
library that writes the format (fixtures/make_onnx.py, make_numpy.py, make_numpy_pickles.py, make_flax.py, make_dcp.py,
make_keras_zip.py, make_saved_model.py).

Same contract and machinery as test_fuzz_readers.py (fuzzlib.check: only CkptstatError, bounded memory and
work, nothing written); `ckptstat scan` (analysis.scan.scan_path, every loader's rules) is held to it too on
the files it judges: .npy/.npz (object arrays hold pickles), .keras (config.json), DCP `.metadata` pickles.

A failing case prints the hypothesis reproduction blob; add the minimal input to
tests/test_fuzz_regressions.py with a comment naming what escaped."""
from __future__ import annotations

import copy
import functools
import io
import os
import struct
import zipfile
from typing import Any

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from ckptstat.formats import tf_bundle as tfb

from .fuzzlib import FIX, Blob, Case, check, fuzz_settings, mutate, read, zipped
from .layouts import (
    ONNX_SCHEMA,
    SAVED_MODEL_SCHEMA,
    concatenated_zip_layout,
    h5_layout,
    msgpack_layout,
    npy_layout,
    pb_fields,
    pb_varint,
    pickle_fields,
    protobuf_layout,
    tar_layout,
    tf_index_layout,
    zip_layout,
)
from .test_fuzz_readers import EXTREMES, HOSTILE_PICKLES, _table, _varint, tf_entry_mutation


def _files(folder: str) -> dict[str, bytes]:
    """Every file under fixtures/`folder`, by path relative to it."""
    root = os.path.join(FIX, folder)
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = read(p)
    return out


# ================================================================================== protobuf trees
# A message is a list of [number, wire type, value]: an int (varint), bytes (fixed or a length-delimited
# leaf), or a list (a sub-message the schema names). Mutated, then encoded with lengths that fit again,
# so a mutation reaches the reader's checks past the framing.
def _pb_tree(data: bytes, schema: dict[str, dict[int, str]], kind: str, start: int = 0, end: int | None = None) -> list:
    out: list = []
    for _, num, wire, p, after in pb_fields(data, start, end):
        sub = schema[kind].get(num)
        if wire == 0:
            out.append([num, 0, pb_varint(data, p)[0]])
        elif wire == 2 and sub is not None:
            out.append([num, 2, _pb_tree(data, schema, sub, p, after), sub])
        else:
            out.append([num, wire, data[p:after]])
    return out


def _uvarint(v: int) -> bytes:
    """A protobuf varint of v as uint64 (a negative int64 as its two's complement)."""
    return _varint(v % (1 << 64))


def _pb_encode(msg: list) -> bytes:
    out = bytearray()
    for f in msg:
        num, wire, value = f[0], f[1], f[2]
        out += _uvarint(num << 3 | wire)
        if wire == 0:
            out += _uvarint(value)
        elif wire == 2:
            raw = _pb_encode(value) if isinstance(value, list) else value
            out += _uvarint(len(raw)) + raw
        else:
            out += value
    return bytes(out)


def _pb_nodes(msg: list, kind: str, out: list | None = None) -> list[tuple[list, int, str]]:
    """(parent message, index, parent kind) of every field in the tree."""
    out = [] if out is None else out
    for i, f in enumerate(msg):
        out.append((msg, i, kind))
        if isinstance(f[2], list):
            _pb_nodes(f[2], f[3], out)
    return out


def _messages(msg: list, kind: str, want: str, out: list | None = None) -> list[list]:
    out = [] if out is None else out
    if kind == want:
        out.append(msg)
    for f in msg:
        if isinstance(f[2], list):
            _messages(f[2], f[3], want, out)
    return out


LEAF_BYTES = [b"", b"\x00", b"\xff" * 9, b"\x80" * 12, b"x" * 70_000, b"\x1b[31m[red]n", b"\xc3\x28"]


@st.composite
def pb_mutation(draw: st.DrawFn, tree: list, root: str, extra_ops: Any = None) -> tuple[str, bytes]:
    """One field of the tree changed (varint to an extreme, leaf bytes cut / grown / replaced, dropped,
    doubled, wire type changed), or a format-specific op (`extra_ops(draw, tree)`), then re-encoded."""
    tree = copy.deepcopy(tree)
    ops = ["varint", "bytes", "drop", "duplicate", "wire"] + (["extra"] * 3 if extra_ops else [])
    op = draw(st.sampled_from(ops))
    if op == "extra":
        assert extra_ops is not None
        what = extra_ops(draw, tree)
        return what, Blob(_pb_encode(tree))
    nodes = _pb_nodes(tree, root)
    if op == "varint":
        nodes = [n for n in nodes if n[0][n[1]][1] == 0] or nodes
    elif op == "bytes":
        nodes = [n for n in nodes if isinstance(n[0][n[1]][2], bytes)] or nodes
    msg, i, _ = draw(st.sampled_from(nodes))
    f = msg[i]
    if op == "varint" and f[1] == 0:
        f[2] = draw(st.sampled_from(EXTREMES + [2**64 - 2, 3, 0x7FFFFFFF, 24, 25, 8]))
    elif op == "bytes" and isinstance(f[2], bytes):
        how = draw(st.sampled_from(["cut", "grow", "replace"]))
        if how == "cut":
            f[2] = f[2][: draw(st.integers(0, max(len(f[2]) - 1, 0)))]
        elif how == "grow":
            f[2] = f[2] + f[2][:draw(st.integers(1, 64))] if f[2] else b"\x01"
        else:
            f[2] = draw(st.sampled_from(LEAF_BYTES))
    elif op == "drop":
        del msg[i]
    elif op == "duplicate":
        msg.insert(i, copy.deepcopy(f))
    else:   # wire type changed, value kept as it would be encoded
        new = draw(st.sampled_from([w for w in (0, 1, 2, 5) if w != f[1]]))
        raw = _pb_encode([f])
        msg[i] = [f[0], new, 7 if new == 0 else raw[:8].ljust(8 if new == 1 else 4, b"\0")[:8 if new == 1 else 4]
                  if new != 2 else raw]
    return op, Blob(_pb_encode(tree))


# ================================================================================== ONNX
ONNX_FIXTURES = [("onnx/dtypes.onnx", None), ("onnx/bert-tiny/model.onnx", None),
                 ("onnx/bert-tiny-external/model.onnx", "onnx/bert-tiny-external/model.onnx.data")]


@functools.cache
def _onnx_tree(path: str) -> list:
    return _pb_tree(read(path), ONNX_SCHEMA, "model")


def _packed(values: list[int]) -> bytes:
    return b"".join(_uvarint(v) for v in values)


def _onnx_extra(draw: st.DrawFn, tree: list) -> str:
    """A hostile field added to (or replacing one of) a tensor, or a hostile sparse initializer."""
    tensors = _messages(tree, "model", "tensor")
    t = draw(st.sampled_from(tensors))
    what = draw(st.sampled_from(["dims", "packed dims", "type", "external", "values", "sparse"]))
    if what == "dims":
        t[:] = [f for f in t if f[0] != 1] + [[1, 0, d] for d in draw(st.lists(st.sampled_from(EXTREMES + [2, 3]),
                                                                             max_size=6))]
    elif what == "packed dims":
        t[:] = [f for f in t if f[0] != 1] + [[1, 2, _packed(draw(st.lists(st.sampled_from(EXTREMES + [2, 3]),
                                                                           max_size=6)))]]
    elif what == "type":
        t[:] = [f for f in t if f[0] != 2] + [[2, 0, draw(st.integers(0, 30) | st.sampled_from(EXTREMES))]]
    elif what == "external":
        entries = []
        for key, values in (("location", ["model.onnx.data", "../model.onnx.data", "/etc/passwd", "", "sub/x.data",
                                          "model.onnx", ".", "a\\..\\b", "x\0y"]),
                            ("offset", ["0", "-1", "18446744073709551616", "1e3", " 4", "99999999999", "٣"]),
                            ("length", ["0", "-5", "4", "99999999999", "0x10", "１"])):
            if draw(st.booleans()):
                entries.append([13, 2, [[1, 2, key.encode()], [2, 2, draw(st.sampled_from(values)).encode()]], "entry"])
        t[:] = [f for f in t if f[0] not in (9, 13, 14)] + entries + [[14, 0, draw(st.sampled_from([1, 1, 0, 2]))]]
    elif what == "values":
        field = draw(st.sampled_from([4, 5, 6, 7, 9, 10, 11]))
        raw = draw(st.sampled_from([b"", _packed([1, 2, 3]), _packed([2**64 - 1] * 4), b"\x80" * 11, b"\xff" * 8,
                                    b"\x00" * 64, b"\x81"]))
        t[:] = [f for f in t if f[0] not in (4, 5, 6, 7, 9, 10, 11)] + [[field, 2, raw]]
    else:   # a sparse initializer over this tensor as values, with hostile indices and dims
        graph = _messages(tree, "model", "graph")[0]
        idx_dims = draw(st.lists(st.sampled_from([0, 1, 2, 3, 2**63, 2**64 - 1]), min_size=1, max_size=2))
        idx_vals = draw(st.sampled_from([[0], [0, 1], [2**63 - 1], [2**64 - 1], [5, 5, 5], list(range(8))]))
        indices = [[1, 0, d] for d in idx_dims] + [[2, 0, 7], [8, 2, b"idx"],
                                                   [7, 2, _packed(idx_vals)]]
        dims = [[3, 0, d] for d in draw(st.lists(st.sampled_from(EXTREMES + [2, 4]), max_size=4))]
        sparse = [[1, 2, copy.deepcopy(t), "tensor"], [2, 2, indices, "tensor"]] + dims
        graph.append([15, 2, sparse, "sparse"])
    return what


@fuzz_settings(100)
@given(st.data())
def test_fuzz_onnx(data):
    model_path, data_path = data.draw(st.sampled_from(ONNX_FIXTURES + ONNX_FIXTURES[:1]))   # (the small one twice)
    base = read(model_path)
    files = {"model.onnx": base}
    if data_path:
        files["model.onnx.data"] = read(data_path)
    what = data.draw(st.sampled_from(["bytes", "tree", "tree"] + (["external bytes"] if data_path else [])))
    if what == "bytes":
        files["model.onnx"] = data.draw(mutate(base, *protobuf_layout(base, ONNX_SCHEMA, "model")))[1]
    elif what == "tree":
        files["model.onnx"] = data.draw(pb_mutation(_onnx_tree(model_path), "model", _onnx_extra))[1]
    else:
        ext = files["model.onnx.data"]
        files["model.onnx.data"] = data.draw(mutate(ext, [len(ext) // 2, len(ext) - 4096]))[1]
    with Case() as c:
        for name, blob in files.items():
            c.write(name, blob)
        check("onnx", os.path.join(c.dir, "model.onnx"))


# ================================================================================== numpy
NPY_FIXTURES = ["embedding.npy", "fortran.npy"]
NPZ_FIXTURES = ["bert-layer.npz", "bert-layer-compressed.npz"]
NPY_HEADERS = [
    "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551616,), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2147483648, 2147483648, 2147483648), }",
    "{'descr': '<f4', 'fortran_order': True, 'shape': (0, 9223372036854775807), }",
    "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 1.5), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': ('2',), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': ((1,),), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (True, None), }",
    "{'descr': '<f4', 'fortran_order': 1, 'shape': (4,), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': [4], }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}",
    "{'descr': '<f4', 'fortran_order': False}",
    "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }",
    "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }",
    "{'descr': '<U4', 'fortran_order': False, 'shape': (4,), }",
    "{'descr': 'f4', 'fortran_order': False, 'shape': (4,), }",
    "{'descr': '=f4', 'fortran_order': False, 'shape': (4,), }",
    "{'descr': '', 'fortran_order': False, 'shape': (4,), }",
    "{'descr': 7, 'fortran_order': False, 'shape': (4,), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (" + "9" * 5000 + ",), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1e999,), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (3L, 4L), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (__import__('os'),), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), " + "(" * 5000 + ")" * 5000 + "}",
    "[" * 9000 + "]" * 9000,
    "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)",
    "{'descr': '<f4\x1b[31m', 'fortran_order': False, 'shape': (4,), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\x00\x00",
    "{'descr': b'<f4', 'fortran_order': False, 'shape': (4,), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), '\udcff': 1}",
    "",
]


def _npy_with_header(base: bytes, text: str, version: int) -> bytes:
    width = 2 if base[6] == 1 else 4
    body = base[8 + width + int.from_bytes(base[8:8 + width], "little"):]
    raw = text.encode("utf-8" if version == 3 else "latin1", "surrogatepass" if version == 3 else "replace")
    raw += b" " * (-(len(raw) + 11) % 64) + b"\n"
    length = struct.pack("<H", len(raw) % 65536) if version == 1 else struct.pack("<I", len(raw))
    return b"\x93NUMPY" + bytes([version, 0]) + length + raw + body


@st.composite
def npy_mutation(draw: st.DrawFn, base: bytes) -> tuple[str, bytes]:
    if draw(st.booleans()):
        return draw(mutate(base, *npy_layout(base)))
    text = draw(st.sampled_from(NPY_HEADERS))
    raw = _npy_with_header(base, text, draw(st.sampled_from([1, 1, 2, 3])))
    if "|O" in text:   # an object array: its values are a pickle (np.save's), here a hostile one
        raw = raw[:raw.index(b"\n") + 1] + draw(st.sampled_from(HOSTILE_PICKLES))
    return "header", Blob(raw)


@st.composite
def zip_members_mutation(draw: st.DrawFn, data: bytes, inner: Any) -> tuple[str, bytes]:
    """The archive rewritten with one member compressed differently, dropped, doubled, renamed, cut or grown,
    or its bytes mutated by `inner(draw, name, blob)` (None: no structured mutation for that member)."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        members = [(i, z.read(i)) for i in z.infolist()]
    target = draw(st.sampled_from([i.filename for i, _ in members]))
    what = draw(st.sampled_from(["compress", "drop", "duplicate", "rename", "record size", "inner", "inner"]))
    out = []
    for info, blob in members:
        name, ctype = info.filename, info.compress_type
        if name == target:
            if what == "compress":
                ctype = draw(st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2,
                                              zipfile.ZIP_LZMA]))
            elif what == "drop":
                continue
            elif what == "duplicate":
                out.append((name, blob, ctype))
            elif what == "rename":
                name = draw(st.sampled_from([name + "x", name.upper(), "../" + name, "/" + name, name + "/",
                                             name.replace(".", "\x1b[31m."), ""]))
            elif what == "record size":
                blob = blob[: draw(st.integers(0, max(len(blob) - 1, 0)))] if draw(st.booleans()) else blob + b"\0" * 64
            else:
                blob = inner(draw, name, blob)
        out.append((name, blob, ctype))
    return what, zipped(out)


def _npz_inner(draw: st.DrawFn, name: str, blob: bytes) -> bytes:
    return bytes(draw(npy_mutation(blob))[1]) if blob[:6] == b"\x93NUMPY" else bytes(draw(mutate(blob, [len(blob) // 2]))[1])


@fuzz_settings(150)
@given(st.data())
def test_fuzz_numpy(data):
    if data.draw(st.booleans()):
        name = data.draw(st.sampled_from(NPY_FIXTURES))
        kind, raw = data.draw(npy_mutation(read("numpy", name)))
        file = "array.npy"
    else:
        base = read("numpy", data.draw(st.sampled_from(NPZ_FIXTURES)))
        if data.draw(st.booleans()):
            kind, raw = data.draw(zip_members_mutation(base, _npz_inner))
        else:
            kind, raw = data.draw(mutate(base, *zip_layout(base)))
        file = "arrays.npz"
    with Case() as c:
        path = c.write(file, raw)
        check("numpy", path)
        check("numpy-scan", path, action="scan_path")


# ================================================================================== Flax msgpack
FLAX_FIXTURES = ["dtypes.msgpack", "bert-train.msgpack", "t5/flax_model.msgpack", "vit/flax_model.msgpack"]
FLAX_SHAPES = [[-1], [2**64 - 1], [2**31, 2**31, 2**31], [0, 2**63 - 1], [1.5], ["2"], [None], [True], [[2]],
               list(range(1, 70)), []]   # (msgpack packs integers up to 2**64 - 1)
# ext payloads that are not a (shape, dtype, bytes) triple, or whose bin claims 4 GiB after a 2**64 - 1 dim
BAD_PAYLOADS = [b"", b"\x93", b"\x93\x90", b"\xc1", b"\x93\x91\xcf" + b"\xff" * 8 + b"\xa7float32\xc6\xff\xff\xff\xff",
                msgpack.packb([[2], "float32"]), b"\x94" + b"\x90" * 4]
FLAX_DTYPES = ["object", "int4", "float4_e2m1fn", "float32\x1b[31m", "", "f4", "<f4", 7, None, "V8", "str"]


def _unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False, ext_hook=lambda code, b: msgpack.ExtType(code, b))


def _leaves(obj: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    out = [(path, obj)]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _leaves(v, path + (k,))
    return out


def _set(obj: dict, path: tuple, value: Any) -> None:
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


@st.composite
def flax_structured(draw: st.DrawFn, base: bytes) -> tuple[str, bytes]:
    """The state dict decoded with msgpack, one array's (shape, dtype, bytes) payload or one subtree made hostile
    (a chunked array with wild shape and chunks, deep nesting, keys that are not strings), and packed again."""
    state = _unpack(base)
    nodes = [(p, v) for p, v in _leaves(state) if p]
    arrays = [(p, v) for p, v in nodes if isinstance(v, msgpack.ExtType) and v.code in (1, 3)]
    path, ext = draw(st.sampled_from(arrays or nodes))
    what = draw(st.sampled_from(["shape", "dtype", "bytes", "payload", "chunked", "nest", "key", "ext code"]))
    if what in ("shape", "dtype", "bytes") and isinstance(ext, msgpack.ExtType):
        shape, dtype, blob = msgpack.unpackb(ext.data, raw=False)
        if what == "shape":
            shape = draw(st.sampled_from(FLAX_SHAPES))
        elif what == "dtype":
            dtype = draw(st.sampled_from(FLAX_DTYPES))
        else:
            blob = blob[: draw(st.integers(0, max(len(blob) - 1, 0)))] if draw(st.booleans()) else blob + b"\0" * 8
        _set(state, path, msgpack.ExtType(ext.code, msgpack.packb([shape, dtype, blob], use_bin_type=True)))
    elif what == "payload":
        _set(state, path, msgpack.ExtType(1, draw(st.sampled_from(BAD_PAYLOADS))))
    elif what == "chunked":
        chunk = msgpack.ExtType(1, msgpack.packb([[2], "float32", b"\0" * 8], use_bin_type=True))
        shape = {str(i): d for i, d in enumerate(draw(st.sampled_from(FLAX_SHAPES[:4] + [[2], [1, 2], [4]])))}
        chunks = {str(i): chunk for i in range(draw(st.integers(0, 3)))}
        if draw(st.booleans()):
            chunks["0"] = msgpack.ExtType(1, msgpack.packb([[1], "int8", b"\0"], use_bin_type=True))
        _set(state, path, {"__msgpack_chunked_array__": draw(st.sampled_from([True, 1, "yes"])), "shape": shape,
                           "chunks": chunks})
    elif what == "nest":
        deep: Any = ext
        for _ in range(draw(st.sampled_from([63, 64, 65, 200]))):
            deep = {"n": deep}
        _set(state, path, deep)
    elif what == "key":
        parent = state
        for k in path[:-1]:
            parent = parent[k]
        parent[draw(st.sampled_from([7, b"bytes", None, 1.5, "", "a.b", "\x1b[2J", "x" * 70_000]))] = parent.pop(path[-1])
    else:
        if isinstance(ext, msgpack.ExtType):
            _set(state, path, msgpack.ExtType(draw(st.sampled_from([0, 2, 4, 127])), ext.data))
    return what, Blob(msgpack.packb(state, use_bin_type=True))


@fuzz_settings(150)
@given(st.data())
def test_fuzz_flax(data):
    base = read("flax", data.draw(st.sampled_from(FLAX_FIXTURES)))
    if data.draw(st.booleans()):
        kind, raw = data.draw(flax_structured(base))
    else:
        cuts, fields_ = msgpack_layout(base)
        kind, raw = data.draw(mutate(base, cuts, fields_, byteorder="big"))
    with Case() as c:
        check("flax", c.write("flax_model.msgpack", raw))


# ================================================================================== DCP
DCP_FIXTURES = ["single", "sharded", "zstd", "safetensors", "rank_local"]


@fuzz_settings(120)
@given(st.data())
def test_fuzz_dcp(data):
    name = data.draw(st.sampled_from(DCP_FIXTURES))
    files = _files(os.path.join("dcp", name))
    metas = sorted(f for f in files if f.endswith(".metadata"))
    shards = sorted(f for f in files if f.endswith(".distcp"))
    what = data.draw(st.sampled_from(["pickle ints", "pickle ints", "pickle bytes", "hostile pickle", "shard bytes",
                                      "shard bytes", "drop shard"]))
    meta = data.draw(st.sampled_from(metas))
    if what == "pickle ints":
        files[meta] = data.draw(mutate(files[meta], *pickle_fields(files[meta])))[1]
    elif what == "pickle bytes":
        files[meta] = data.draw(mutate(files[meta], pickle_fields(files[meta])[0]))[1]
    elif what == "hostile pickle":
        files[meta] = data.draw(st.sampled_from(HOSTILE_PICKLES))
    elif what == "shard bytes":
        shard = data.draw(st.sampled_from(shards))
        files[shard] = data.draw(mutate(files[shard], *concatenated_zip_layout(files[shard])))[1]
    else:
        del files[data.draw(st.sampled_from(shards))]
    with Case() as c:
        for f, blob in files.items():
            c.write(f, blob)
        check("dcp", c.dir)
        check("dcp-scan", os.path.join(c.dir, meta), action="scan_path")


# ================================================================================== Keras 3 zip
KERAS_ZIP_FIXTURES = ["mlp.keras", "mlp-deflated.keras"]
HOSTILE_JSON = [b"", b"{", b"[]", b"null", b"7", b'"x"', b"[" * 100_000 + b"]" * 100_000, b'{"a": ' * 5000 + b"1" + b"}" * 5000,
                b'{"class_name": "Lambda", "config": {"function": {"class_name": "__lambda__", "config": {"code": "4wA="}}}}',
                b'{"module": "os", "class_name": "system", "config": "id"}', b"\xff\xfe{}", b'{"k": 1e999999}',
                b'{"k": ' + b"9" * 10_000 + b"}"]


def _keras_inner(draw: st.DrawFn, name: str, blob: bytes) -> bytes:
    if name.endswith(".h5"):
        return bytes(draw(mutate(blob, *h5_layout(blob)))[1])
    if draw(st.booleans()):
        return draw(st.sampled_from(HOSTILE_JSON))
    return bytes(draw(mutate(blob, [len(blob) // 2]))[1])


@fuzz_settings(120)
@given(st.data())
def test_fuzz_keras_zip(data):
    base = read("keras3-zip", data.draw(st.sampled_from(KERAS_ZIP_FIXTURES)))
    if data.draw(st.integers(0, 2)):
        kind, raw = data.draw(zip_members_mutation(base, _keras_inner))
    else:
        kind, raw = data.draw(mutate(base, *zip_layout(base)))
    with Case() as c:
        path = c.write("model.keras", raw)
        check("keras-zip", path)
        check("keras-zip-scan", path, action="scan_path")


# ================================================================================== TF SavedModel
@functools.cache
def _saved_model_tree() -> list:
    return _pb_tree(read("tf-saved-model", "saved_model.pb"), SAVED_MODEL_SCHEMA, "saved_model")


def _saved_model_extra(draw: st.DrawFn, tree: list) -> str:
    """A SavedObject's variable (trainable flag, name) made hostile, or nodes added / removed."""
    graphs = _messages(tree, "saved_model", "object_graph")
    variables = _messages(tree, "saved_model", "saved_variable")
    what = draw(st.sampled_from(["variable", "nodes"]))
    if what == "variable" and variables:
        v = draw(st.sampled_from(variables))
        v[:] = [f for f in v if f[0] not in (3, 6)] + [[3, 0, draw(st.sampled_from(EXTREMES))],
                                                       [6, 2, draw(st.sampled_from(LEAF_BYTES))]]
    elif graphs:
        g = graphs[0]
        if draw(st.booleans()):
            g[:] = [f for f in g if f[0] != 1]
        else:
            g.extend([[1, 2, [[7, 2, [[3, 0, 1], [6, 2, b"v"]], "saved_variable"]], "saved_object"]]
                     * draw(st.integers(1, 40)))
    return what


@fuzz_settings(120)
@given(st.data())
def test_fuzz_saved_model(data):
    files = _files("tf-saved-model")
    index = os.path.join("variables", "variables.index")
    what = data.draw(st.sampled_from(["pb bytes", "pb tree", "pb tree", "index bytes", "entries", "shard bytes"]))
    pb = files["saved_model.pb"]
    if what == "pb bytes":
        files["saved_model.pb"] = data.draw(mutate(pb, *protobuf_layout(pb, SAVED_MODEL_SCHEMA, "saved_model")))[1]
    elif what == "pb tree":
        files["saved_model.pb"] = data.draw(pb_mutation(_saved_model_tree(), "saved_model", _saved_model_extra))[1]
    elif what == "index bytes":
        files[index] = data.draw(mutate(files[index], *tf_index_layout(files[index])))[1]
    elif what == "entries":
        table = tfb.read_table(os.path.join(FIX, "tf-saved-model", index))
        files[index] = _table(data.draw(tf_entry_mutation(table)))
    else:
        shard = next(f for f in files if ".data-" in f)
        files[shard] = data.draw(mutate(files[shard], [len(files[shard]) // 2]))[1]
    with Case() as c:
        for f, blob in files.items():
            c.write(f, blob)
        check("saved-model", c.dir if data.draw(st.booleans()) else os.path.join(c.dir, "saved_model.pb"))


# ================================================================================== NeMo archives
@fuzz_settings(120)
@given(st.data())
def test_fuzz_nemo(data):
    """A .nemo (fixtures/make_nemo.py: a tar as NeMo writes it, model_weights.ckpt a torch.save zip) mutated at its tar
    headers, member data and the weights' zip structure; read (formats/nemo.py) and scanned."""
    base = read("nemo", "benign-fastpitch.nemo")
    kind, raw = data.draw(mutate(base, *tar_layout(base)))
    with Case() as c:
        path = c.write("model.nemo", raw)
        check("nemo", path)
        check("nemo-scan", path, action="scan_path")


# ================================================================================== pickles of numpy arrays
NUMPY_PICKLES = [("numpy-pickles", "params-p4.pkl"), ("numpy-pickles", "params-p5.pkl"), ("paddle", "tiny.pdparams"),
                 ("paddle", "tiny-bf16.pdparams"), ("paddle", "tiny.pdopt")]


@fuzz_settings(150)
@given(st.data())
def test_fuzz_numpy_pickles(data):
    """formats/numpy_pickle.py: the pickle's ints and lengths set to extremes (the payloads' lengths among them),
    truncated at every opcode, bit-flipped, or replaced by the suite's hostile pickles."""
    folder, name = data.draw(st.sampled_from(NUMPY_PICKLES))
    base = read(folder, name)
    if data.draw(st.booleans()):
        blob = data.draw(mutate(base, *pickle_fields(base)))[1]
    else:
        blob = data.draw(st.sampled_from(HOSTILE_PICKLES))
    with Case() as c:
        check("numpy-pickle", c.write(name, blob))


# ================================================================================== sanity
def test_unmutated_new_fixtures_pass_the_contract():
    """The harness itself on every base fixture of this module: opens, summarizes and reads, within bounds."""
    cases: list[tuple[str, dict[str, bytes], str]] = []
    for model, ext in ONNX_FIXTURES:
        files = {"model.onnx": read(model), **({"model.onnx.data": read(ext)} if ext else {})}
        cases.append(("onnx", files, "model.onnx"))
    cases += [("numpy", {"array.npy": read("numpy", f)}, "array.npy") for f in NPY_FIXTURES]
    cases += [("numpy", {"arrays.npz": read("numpy", f)}, "arrays.npz") for f in NPZ_FIXTURES]
    cases += [("flax", {"flax_model.msgpack": read("flax", f)}, "flax_model.msgpack") for f in FLAX_FIXTURES]
    cases += [("dcp", _files(os.path.join("dcp", f)), "") for f in DCP_FIXTURES]
    cases += [("keras-zip", {"model.keras": read("keras3-zip", f)}, "model.keras") for f in KERAS_ZIP_FIXTURES]
    cases += [("saved-model", _files("tf-saved-model"), "saved_model.pb")]
    cases += [("nemo", {"model.nemo": read("nemo", "benign-fastpitch.nemo")}, "model.nemo")]
    for fmt, files, target in cases:
        with Case() as c:
            for n, b in files.items():
                c.write(n, b)
            reply = check(fmt + " (valid)", os.path.join(c.dir, target) if target else c.dir)
            assert reply["outcome"] == "ok" and reply["read"] > 0, (fmt, target, reply)


def test_flax_structured_round_trip():
    """The structured Flax mutation's decode / encode is exact on the fixtures (a mutation changes only what it
    says)."""
    for f in FLAX_FIXTURES:
        base = read("flax", f)
        assert msgpack.packb(_unpack(base), use_bin_type=True) == base, f


def test_protobuf_tree_round_trip():
    for path in [m for m, _ in ONNX_FIXTURES]:
        assert _pb_encode(_onnx_tree(path)) == read(path), path
    assert _pb_encode(_saved_model_tree()) == read("tf-saved-model", "saved_model.pb")
