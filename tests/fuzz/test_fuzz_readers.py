"""Fuzz every reader from valid fixtures (written by the real writers, see fixtures/make_*.py):
truncations at every structural boundary, bit flips, length fields set to extremes, shifted ranges,
and structured mutations (header JSON, zip members compressed / missing / duplicated, pickle ints,
hostile pickles, protobuf fields, LevelDB blocks). Each case must open, summarize and read every
tensor's values, or raise a CkptstatError; see fuzzlib for the rest of the contract.

A failing case prints the hypothesis reproduction blob; add the minimal input to
tests/test_fuzz_regressions.py with a comment naming what escaped."""
from __future__ import annotations

import io
import json
import os
import struct
import zipfile

import h5py
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from ckptstat.formats import tf_bundle as tfb

from .fuzzlib import FIX, Blob, Case, check, fuzz_settings, mutate, read, u64, zipped
from .layouts import gguf_layout, h5_layout, legacy_layout, pickle_fields, safetensors_layout, tf_index_layout, zip_layout

# ================================================================================== safetensors
ST_FIXTURES = ["dtypes.safetensors", "bert-tiny/model.safetensors"]


BAD_SHAPES = [[-1], [2**64], [2**31, 2**31, 2**31], [1.5], ["2"], [None], [True], [0, 2**63], [10**30]]
BAD_OFFSETS = [[0, 2**64], [0, 2**63 - 1], [-8, 0], [2**40, 2**40 + 4], [4, 2], [0], [0, 1, 2], ["0", "4"], [0.0, 4.0]]
BAD_VALUES = [None, 0, "", [], {}, -1, 2**70, "F12", {"a": [1] * 3}, "[bold]x[/bold]\x1b[31m"]


@st.composite
def st_structured(draw: st.DrawFn, data: bytes) -> tuple[str, bytes]:
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    names = [k for k in header if k != "__metadata__"]
    name = draw(st.sampled_from(names))
    what = draw(st.sampled_from(["shape", "data_offsets", "dtype", "drop", "metadata", "rename", "nest", "length"]))
    if what in ("shape", "data_offsets", "dtype"):
        pool = {"shape": BAD_SHAPES, "data_offsets": BAD_OFFSETS, "dtype": BAD_VALUES}[what]
        header[name][what] = draw(st.sampled_from(pool + BAD_VALUES))
    elif what == "drop":
        del header[name][draw(st.sampled_from(sorted(header[name])))]
    elif what == "metadata":
        header["__metadata__"] = draw(st.sampled_from(BAD_VALUES + [{"k": "v" * 10}, {"k": 1}]))
    elif what == "rename":
        header[draw(st.sampled_from(["", "\x1b[2J", "[red]x", "a" * 5000, "__metadata__"]))] = header.pop(name)
    raw = json.dumps(header).encode()
    if what == "nest":   # deep JSON: the parser's recursion, not ours
        raw = raw[:-1] + b', "deep": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    length = len(raw)
    if what == "length":
        length = draw(st.sampled_from([0, 1, length - 1, length + 1, len(data), 2**63, 2**64 - 1, 100_000_000]))
    return what, Blob(u64(length) + raw + body)


@fuzz_settings(300)
@given(st.data())
def test_fuzz_safetensors(data):
    fixture = data.draw(st.sampled_from(ST_FIXTURES))
    base = read(fixture)
    if data.draw(st.integers(0, 2)) == 0:
        kind, raw = data.draw(st_structured(base))
    else:
        kind, raw = data.draw(mutate(base, *safetensors_layout(base)))
    with Case() as c:
        check("safetensors", c.write("model.safetensors", raw))


@fuzz_settings(100)
@given(st.data())
def test_fuzz_sharded_index(data):
    folder = os.path.join(FIX, "llama-tiny-sharded")
    index = json.loads(read("llama-tiny-sharded", "model.safetensors.index.json"))
    shards = sorted(set(index["weight_map"].values()))
    with Case() as c:
        for s in shards:
            c.write(s, read("llama-tiny-sharded", s))
        what = data.draw(st.sampled_from(["value", "map", "shard bytes", "raw"]))
        raw = json.dumps(index).encode()
        if what == "value":
            key = data.draw(st.sampled_from(sorted(index["weight_map"])))
            index["weight_map"][key] = data.draw(st.sampled_from(
                ["../model-00001-of-00007.safetensors", "/etc/passwd", "", ".", "nope.safetensors", 7, None,
                 "model.safetensors.index.json"]))
            raw = json.dumps(index).encode()
        elif what == "map":
            index["weight_map"] = data.draw(st.sampled_from([[], {}, "x", None, {"a": ["b"]}]))
            raw = json.dumps(index).encode()
        elif what == "shard bytes":
            s = data.draw(st.sampled_from(shards))
            base = read("llama-tiny-sharded", s)
            c.write(s, data.draw(mutate(base, *safetensors_layout(base)))[1])
        else:
            raw = data.draw(mutate(raw, [0, len(raw) // 2]))[1]
        path = c.write("model.safetensors.index.json", raw)
        check("safetensors-sharded", path)
        assert os.listdir(folder)  # the fixture folder is never touched


# ================================================================================== torch zip
ZIP_FIXTURES = ["dtypes.pt", "my_weights.v2.pth", "train.pt"]


# Hand-made hostile pickles (protocol 2 and 4): recursion, self reference, extreme lengths, bad frames.
HOSTILE_PICKLES = [
    b"\x80\x02" + b"(" * 150_000 + b"l" * 150_000 + b".",                     # MARK stack past MAX_STACK
    b"\x80\x02" + b"]" * 50_000 + b"a" * 49_999 + b".",                       # nested lists on the stack
    b"\x80\x02]q\x00h\x00a.",                                                 # a list that holds itself
    b"\x80\x02}q\x00X\x01\x00\x00\x00ah\x00s.",                               # a dict that holds itself
    b"\x80\x02\x8b\xff\xff\xff\x7f\x00\x00.",                                  # LONG4 of 2 GiB, 2 bytes there
    b"\x80\x02X\xff\xff\xff\xffabc.",                                          # BINUNICODE of 4 GiB
    b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7f}.",                         # FRAME of 2**63 bytes
    b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7fab.",                        # BINUNICODE8 huge
    b"\x80\x04\x8e\x00\x00\x00\x00\x00\x00\x00\x80ab.",                        # BINBYTES8 2**63
    b"\x80\x02j\xff\xff\xff\x7f.",                                             # LONG_BINGET of an unset index
    b"\x80\x02r\xff\xff\xff\xff.",                                             # LONG_BINPUT on an empty stack
    b"\x80\x02cbuiltins\neval\nX\x04\x00\x00\x00os()\x85R.",                  # builtins.eval
    b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x94h\x00h\x01\x93.",         # STACK_GLOBAL, names via memo
    b"\x80\x02ccollections\nOrderedDict\n]q\x00(h\x00h\x00\x86a\x85R.",         # OrderedDict over a self-ref list
    b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(K\x00K\x00K\x00K\x00tR.",     # rebuild from ints
    b"\x80\x02ctorch\nSize\n]\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7fa\x85R.",  # torch.Size([2**63-1])
    b"\x80\x02" + b"\x80\x02" * 1000 + b"N.",                                  # PROTO repeated
    b"\x80\x05\x96\x00\x00\x00\x00\x00\x00\x00\x80.",                          # BYTEARRAY8 2**63
    b"",                                                                       # empty
    b"\x80\x02(((((((((((((((((((t.",                                         # unbalanced marks
    b"\x80\x02Q.",                                                             # BINPERSID with nothing on the stack
]


@st.composite
def zip_structured(draw: st.DrawFn, data: bytes) -> tuple[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        members = [(i, z.read(i)) for i in z.infolist()]
    names = [i.filename for i, _ in members]
    pkl_name = next(n for n in names if n.endswith("data.pkl"))
    what = draw(st.sampled_from(["compress", "drop", "duplicate", "rename", "record size", "pickle ints",
                                 "hostile pickle", "pickle bytes"]))
    target = draw(st.sampled_from(names))
    out_members = []
    for info, blob in members:
        name, ctype = info.filename, zipfile.ZIP_STORED
        if info.filename == target:
            if what == "compress":
                ctype = draw(st.sampled_from([zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA]))
            elif what == "drop":
                continue
            elif what == "duplicate":
                out_members.append((name, blob, ctype))
            elif what == "rename":
                name = draw(st.sampled_from([name + "x", name.upper(), "../" + name, name.replace("/data/", "/data/9"),
                                             "data.pkl", name + "/"]))
            elif what == "record size":
                blob = blob[: draw(st.integers(0, max(len(blob) - 1, 0)))] if draw(st.booleans()) else blob + b"\0" * 64
        if info.filename == pkl_name:
            if what == "pickle ints":
                cuts, fields_ = pickle_fields(blob)
                blob = draw(mutate(blob, cuts, fields_))[1]
            elif what == "hostile pickle":
                blob = draw(st.sampled_from(HOSTILE_PICKLES))
            elif what == "pickle bytes":
                blob = draw(mutate(blob, pickle_fields(blob)[0]))[1]
        out_members.append((name, blob, ctype))
    return what, zipped(out_members)


@fuzz_settings(300)
@given(st.data())
def test_fuzz_torch_zip(data):
    base = read("torch", data.draw(st.sampled_from(ZIP_FIXTURES)))
    if data.draw(st.booleans()):
        kind, raw = data.draw(zip_structured(base))
    else:
        kind, raw = data.draw(mutate(base, *zip_layout(base)))
    with Case() as c:
        path = c.write("pytorch_model.bin", raw)
        check("torch-zip", path)
        check("torch-scan", path, action="scan_path")


# ================================================================================== torch legacy
@fuzz_settings(150)
@given(st.data())
def test_fuzz_torch_legacy(data):
    base = read("torch", "dtypes-legacy.pt")
    kind, raw = data.draw(mutate(base, *legacy_layout(base)))
    with Case() as c:
        path = c.write("model.pt", raw)
        check("torch-legacy", path)
        check("torch-scan", path, action="scan_path")


# ================================================================================== TF bundle
TF_FIXTURES = {"tf1-partitioned": "model.ckpt-5", "tf2-keras": "ckpt-1", "tf1-bert": "model.ckpt-0"}


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _pb(fields_: list[tuple[int, int, object]]) -> bytes:
    out = b""
    for num, wire, value in fields_:
        out += _varint(num << 3 | wire)
        if wire == 0:
            out += _varint(int(value) % (1 << 64))  # type: ignore[call-overload]
        elif wire == 1:
            out += struct.pack("<Q", int(value) % (1 << 64))  # type: ignore[call-overload]
        elif wire == 5:
            out += struct.pack("<I", int(value) % (1 << 32))  # type: ignore[call-overload]
        else:
            out += _varint(len(value)) + value  # type: ignore[arg-type,operator]
    return out


def _table(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A LevelDB table (doc/table_format.md) with one data block, as TF's table builder writes it."""
    from ckptstat.formats import crc32c

    def block(items: list[tuple[bytes, bytes]]) -> bytes:
        body = b"".join(_varint(0) + _varint(len(k)) + _varint(len(v)) + k + v for k, v in items)
        return body + struct.pack("<II", 0, 1)

    def trailer(b: bytes) -> bytes:
        return b + b"\x00" + struct.pack("<I", crc32c.mask(crc32c.crc32c(b + b"\x00")))

    data = block(entries)
    out = trailer(data)
    index = block([(entries[-1][0] if entries else b"", _varint(0) + _varint(len(data)))])
    ioff = len(out)
    out += trailer(index)
    meta = block([])
    moff = len(out)
    out += trailer(meta)
    footer = _varint(moff) + _varint(len(meta)) + _varint(ioff) + _varint(len(index))
    return out + footer.ljust(40, b"\x00") + tfb.MAGIC_BYTES


EXTREMES = [0, 1, 2**63 - 1, 2**63, 2**64 - 1, 2**32, 2**31, 100_000, 99]


@st.composite
def tf_entry_mutation(draw: st.DrawFn, entries: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    entries = list(entries)
    i = draw(st.integers(0, len(entries) - 1))
    key, value = entries[i]
    fl = list(tfb.fields(value))
    what = draw(st.sampled_from(["int", "shape", "drop", "slice", "truncate", "key", "remove entry", "garbage"]))
    ints = [j for j, (_, w, _) in enumerate(fl) if w == 0]
    if what == "int" and ints:
        j = draw(st.sampled_from(ints))
        fl[j] = (fl[j][0], 0, draw(st.sampled_from(EXTREMES)))
    elif what == "shape":
        dims = draw(st.lists(st.sampled_from(EXTREMES + [3, 2**64 - 2]), max_size=5))
        shape = _pb([(2, 2, _pb([(1, 0, d)])) for d in dims] + ([(3, 0, 1)] if draw(st.booleans()) else []))
        fl = [f for f in fl if f[0] != 2] + [(2, 2, shape)]
    elif what == "drop" and fl:
        del fl[draw(st.integers(0, len(fl) - 1))]
    elif what == "slice":
        ext = [(1, 2, _pb([(1, 0, draw(st.sampled_from(EXTREMES))), (2, 0, draw(st.sampled_from(EXTREMES)))]))
               for _ in range(draw(st.integers(0, 3)))]
        fl.append((7, 2, _pb(ext)))
    if what == "truncate":
        value = value[: draw(st.integers(0, max(len(value) - 1, 0)))]
    elif what == "garbage":
        value = draw(st.binary(max_size=40))
    else:
        value = _pb(fl)
    if what == "key":
        key = draw(st.sampled_from([b"\xff\xfe", b"\x00\x01", key + b"\x1b[31m", b"", key * 2]))
    if what == "remove entry":
        del entries[i]
    else:
        entries[i] = (key, value)
    entries.sort(key=lambda kv: kv[0])
    return entries


@fuzz_settings(250)
@given(st.data())
def test_fuzz_tf_bundle(data):
    name = data.draw(st.sampled_from(sorted(TF_FIXTURES)))
    prefix = TF_FIXTURES[name]
    folder = os.path.join(FIX, name)
    files = {f: read(name, f) for f in os.listdir(folder) if f.startswith(prefix)}
    index_name = prefix + ".index"
    what = data.draw(st.sampled_from(["index bytes", "entries", "shard bytes"]))
    if what == "index bytes":
        files[index_name] = data.draw(mutate(files[index_name], *tf_index_layout(files[index_name])))[1]
    elif what == "entries":
        table = tfb.read_table(os.path.join(folder, index_name))
        files[index_name] = _table(data.draw(tf_entry_mutation(table)))
    else:
        shard = data.draw(st.sampled_from(sorted(f for f in files if ".data-" in f)))
        files[shard] = data.draw(mutate(files[shard], [len(files[shard]) // 2]))[1]
    with Case() as c:
        for f, blob in files.items():
            c.write(f, blob)
        check("tf-bundle", os.path.join(c.dir, index_name))


# ================================================================================== Keras h5
H5_FIXTURES = [("keras2", "weights.h5"), ("keras3", "bf16.weights.h5"), ("keras2", "full.h5")]


def chunked_h5() -> bytes:
    """A Keras-3-style file with a chunked+gzip dataset and a chunked one, written by h5py."""
    path = os.path.join(Case.base, "chunked.weights.h5")
    if not os.path.exists(path):
        with h5py.File(path, "w") as f:
            g = f.create_group("layers/dense/vars")
            g.create_dataset("0", data=np.arange(64 * 8, dtype="<f4").reshape(64, 8), chunks=(16, 8), compression="gzip")
            g.create_dataset("1", data=np.arange(8, dtype=">f8"), chunks=(4,))
            f.create_dataset("layers/dense/vars/2", data=np.float32(3.0))
    with open(path, "rb") as f:
        return f.read()


@fuzz_settings(250)
@given(st.data())
def test_fuzz_h5(data):
    choice = data.draw(st.integers(0, len(H5_FIXTURES)))
    base = chunked_h5() if choice == len(H5_FIXTURES) else read(*H5_FIXTURES[choice])
    kind, raw = data.draw(mutate(base, *h5_layout(base)))
    with Case() as c:
        check("keras-h5", c.write("model.weights.h5", raw))


# ================================================================================== GGUF
GGUF_FIXTURES = ["llama-tiny-q.gguf", "llama-tiny-tied.gguf"]
# Versions, value types, ranks and ggml types just beside the valid ones.
SMALL_CODES = [1, 2, 4, 5, 9, 13, 31, 42, 99]


@fuzz_settings(200)
@given(st.data())
def test_fuzz_gguf(data):
    base = read("gguf", data.draw(st.sampled_from(GGUF_FIXTURES)))
    cuts, fields_ = gguf_layout(base)
    if data.draw(st.integers(0, 3)) == 0:   # a 4-byte code or count set to a small wrong value
        off, _ = data.draw(st.sampled_from([f for f in fields_ if f[1] == 4]))
        mutated = bytearray(base)
        mutated[off:off + 4] = struct.pack("<I", data.draw(st.sampled_from(SMALL_CODES)))
        raw = Blob(mutated)
    else:
        _, raw = data.draw(mutate(base, cuts, fields_))
    with Case() as c:
        check("gguf", c.write("model.gguf", raw))


# ================================================================================== sanity
def test_unmutated_fixtures_pass_the_contract():
    """The harness itself: every base fixture opens, summarizes and reads, within the bounds."""
    cases = [("safetensors", [("model.safetensors", read(f))]) for f in ST_FIXTURES]
    cases += [("torch-zip", [("pytorch_model.bin", read("torch", f))]) for f in ZIP_FIXTURES]
    cases += [("torch-legacy", [("model.pt", read("torch", "dtypes-legacy.pt"))])]
    cases += [("keras-h5", [("model.weights.h5", read(*f))]) for f in H5_FIXTURES]
    cases += [("keras-h5", [("model.weights.h5", chunked_h5())])]
    cases += [("gguf", [("model.gguf", read("gguf", f))]) for f in GGUF_FIXTURES]
    for name, prefix in TF_FIXTURES.items():
        folder = os.path.join(FIX, name)
        files = [(f, read(name, f)) for f in sorted(os.listdir(folder)) if f.startswith(prefix)]
        cases.append(("tf-bundle", sorted(files, key=lambda x: not x[0].endswith(".index"))))
    for fmt, files in cases:
        with Case() as c:
            path = [c.write(n, b) for n, b in files][0]
            reply = check(fmt + " (valid)", path)
            assert reply["outcome"] == "ok" and reply["read"] > 0, (fmt, reply)


def test_hostile_pickles_are_data_only():
    """Every hand-made hostile pickle is read as data or refused, within the bounds, and nothing runs
    (the worker checks that the case's folder is unchanged)."""
    for blob in HOSTILE_PICKLES:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("archive/data.pkl", blob)
        with Case() as c:
            path = c.write("evil.pt", buf.getvalue())
            check("torch-zip (hostile pickles)", path)
            check("torch-scan", path, action="scan_path")
