"""One minimal crafted input per escape the fuzz suite (tests/fuzz) found, each with what escaped.
Each must fail on the code before its fix and pass after."""
from __future__ import annotations

import io
import os
import pickle
import struct
import tracemalloc
import zipfile

import h5py
import numpy as np
import pytest
from conftest import fixture

from ckptstat import CheckpointError, CorruptCheckpointError, open_checkpoint
from ckptstat.analysis.scan.torch_load import scan
from ckptstat.formats import torch as tr

LEGACY_HEAD = b"".join(pickle.dumps(x, protocol=2) for x in (tr.LEGACY_MAGIC, tr.LEGACY_PROTOCOL))


def _peak(fn) -> tuple[object, int]:
    """(fn's result or exception, bytes traced at peak while it ran)."""
    tracemalloc.start()
    try:
        try:
            result: object = fn()
        except Exception as e:  # noqa: BLE001
            result = e
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _legacy_with_huge_string(tmp_path) -> str:
    # the sys_info pickle: PROTO 2, BINUNICODE claiming 2 GiB, then 3 bytes and the end of the file
    p = tmp_path / "legacy.pt"
    p.write_bytes(LEGACY_HEAD + b"\x80\x02X\xff\xff\xff\x7fabc")
    return str(p)


def test_legacy_pickle_length_field_allocates_nothing(tmp_path):
    """Escaped: the legacy reader unpickled straight from the file, and BufferedReader.read(n) allocates
    n bytes before reading: a 2 KB file with a BINUNICODE length of 2 GiB made it allocate 2 GiB
    (a MemoryError under a memory cap, hidden as 'malformed pickle (MemoryError)')."""
    path = _legacy_with_huge_string(tmp_path)
    result, peak = _peak(lambda: open_checkpoint(path))
    assert isinstance(result, CorruptCheckpointError) and "sys_info pickle" in str(result), result
    assert "MemoryError" not in str(result)
    assert peak < 16 << 20, f"peak {peak:,} B for a {os.path.getsize(path)}-byte file"


def test_scan_pickle_length_field_allocates_nothing(tmp_path):
    """Escaped: `ckptstat scan` walked the same file with pickletools.genops, which reads a string's
    claimed length from the file the same way (2 GiB traced for a tiny file)."""
    path = _legacy_with_huge_string(tmp_path)
    result, peak = _peak(lambda: scan(path))
    assert isinstance(result, CorruptCheckpointError), result
    assert peak < 16 << 20, f"peak {peak:,} B"


def test_bytearray8_length_is_checked_before_allocating(tmp_path):
    """Escaped: pickle's BYTEARRAY8 runs bytearray(length) before reading; a length of 2**40 (under
    sys.maxsize, so pickle does not refuse it) ended in MemoryError."""
    p = tmp_path / "ba8.pt"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x05\x96" + struct.pack("<Q", 1 << 40) + b"x.")
    with pytest.raises(CorruptCheckpointError, match="BYTEARRAY8 of 1,099,511,627,776 bytes") as e:
        open_checkpoint(p)
    assert "MemoryError" not in str(e.value)


def test_h5_bad_local_heap_is_corrupt(tmp_path):
    """Escaped: h5py's RuntimeError ('Unable to synchronously check link existence (bad local heap
    signature)') came out of open_checkpoint as itself; h5py errors are now converted at the reader."""
    data = bytearray(open(fixture("keras3", "bf16.weights.h5"), "rb").read())
    at = data.index(b"HEAP")
    data[at:at + 4] = b"HEAX"
    p = tmp_path / "heap.weights.h5"
    p.write_bytes(bytes(data))
    with pytest.raises(Exception) as raw:      # what h5py itself says about this file
        with h5py.File(p, "r") as f:
            list(f.keys())
    assert not isinstance(raw.value, CheckpointError)
    with pytest.raises(CorruptCheckpointError, match="damaged HDF5 file"):
        open_checkpoint(p)


def test_h5_chunked_reads_select_only_the_chunk(tmp_path):
    """Escaped (work bound): values of chunked/compressed datasets were read a whole axis-0 row at a
    time, so a 4 KiB chunk of a (2, 1_000_000) dataset read 4 MB; a row can be as large as the
    dataset claims. Now each read selects exactly the elements asked for; values checked vs h5py."""
    p = tmp_path / "wide.weights.h5"
    wide = np.zeros((2, 1_000_000), "f4")
    wide[1, 999_990:] = 7
    cube = np.arange(3 * 5 * 7, dtype=">f8").reshape(3, 5, 7)
    with h5py.File(p, "w") as f:
        f.create_dataset("layers/dense/vars/0", data=wide, chunks=(1, 65536), compression="gzip")
        f.create_dataset("layers/dense/vars/1", data=cube, chunks=(2, 2, 3), compression="gzip")
    ckpt = open_checkpoint(p)
    first, peak = _peak(lambda: next(ckpt.iter_chunks("layers/dense/vars/0", chunk_bytes=4096)))
    assert first.size == 1024 and peak < 1 << 20, f"peak {peak:,} B for a 4 KiB chunk"
    assert np.concatenate(list(ckpt.iter_chunks("layers/dense/vars/0", 1 << 20)))[-10:].tolist() == [7.0] * 10
    for chunk_bytes in (8, 24, 40, 56, 1 << 20):   # chunks that start and end inside rows and planes
        got = np.concatenate(list(ckpt.iter_chunks("layers/dense/vars/1", chunk_bytes)))
        assert got.tolist() == cube.reshape(-1).tolist(), chunk_bytes


def _deflated_torch(tmp_path) -> str:
    p = tmp_path / "deflated.pt"
    with zipfile.ZipFile(fixture("torch", "dtypes.pt")) as zin, zipfile.ZipFile(p, "w") as zout:
        for info in zin.infolist():
            ctype = zipfile.ZIP_DEFLATED if "/data/" in info.filename else zipfile.ZIP_STORED
            zout.writestr(info.filename, zin.read(info), compress_type=ctype)
    return str(p)


def test_broken_deflate_stream_while_reading_values(tmp_path):
    """Escaped: a compressed storage record whose deflate stream is damaged passed open_checkpoint
    (headers are fine) and raised zlib.error from iter_chunks: 'internal error' in `ties --deep`.
    Reading values now converts such errors into CorruptCheckpointError naming the tensor."""
    path = _deflated_torch(tmp_path)
    data = bytearray(open(path, "rb").read())
    with zipfile.ZipFile(path) as z:
        infos = [i for i in z.infolist() if "/data/" in i.filename]
    for info in infos:
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
        data[start:start + info.compress_size] = b"\xff" * info.compress_size
    with open(path, "wb") as f:
        f.write(bytes(data))
    ckpt = open_checkpoint(path)
    for t in ckpt:
        with pytest.raises(CorruptCheckpointError, match=f"tensor {t.name!r}: cannot read its values"):
            list(ckpt.iter_chunks(t.name, 64))


def test_zip_needing_a_newer_version_is_corrupt(tmp_path):
    """Escaped: zipfile raises NotImplementedError ('zip file version 6.4') for a central-directory
    'version needed to extract' it does not support (PKWARE APPNOTE 4.4.3)."""
    data = bytearray(open(fixture("torch", "my_weights.v2.pth"), "rb").read())
    cd = data.find(b"PK\x01\x02")
    while cd != -1:
        struct.pack_into("<H", data, cd + 6, 64)
        cd = data.find(b"PK\x01\x02", cd + 4)
    p = tmp_path / "v64.pt"
    p.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="NotImplementedError"):
        open_checkpoint(p)
    # scan reads the directory as torch's reader (miniz) does, which never looks at the version: torch.load
    # itself loads the file (weights_only=True, equal to the original), and scan follows it to the same verdict
    torch = pytest.importorskip("torch")
    loaded, original = torch.load(p, weights_only=True), torch.load(fixture("torch", "my_weights.v2.pth"), weights_only=True)
    assert loaded.keys() == original.keys() and all(torch.equal(loaded[k], original[k]) for k in original)
    r = scan(str(p))
    assert r["status"] == "safe" and r["weights_only_loadable"]
    assert r["torch_load"] == "torch.load unpickles my_weights.v2/data.pkl"


def test_decoder_oserror_is_corrupt(tmp_path):
    """Escaped (wrong class): a bzip2-compressed data.pkl with a damaged stream raised OSError('Invalid
    data stream', errno None), reported as a plain CheckpointError like a permission problem."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_BZIP2) as z:
        z.writestr("archive/data.pkl", pickle.dumps({}, protocol=2) * 50)
    data = bytearray(buf.getvalue())
    at = data.index(b"BZh") + 10
    data[at:at + 20] = b"\x00" * 20
    p = tmp_path / "bz.pt"
    p.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError):
        open_checkpoint(p)
    with pytest.raises(CorruptCheckpointError):
        scan(str(p))


def test_central_directory_offset_too_big(tmp_path):
    """Escaped (unhelpful message): an end record whose central-directory offset is too big makes
    zipfile compute negative local-header offsets; reading the small `byteorder` record then seeked
    before the start of the file and ckptstat said only 'Invalid argument' (OSError EINVAL)."""
    data = bytearray(open(fixture("torch", "my_weights.v2.pth"), "rb").read())
    eocd64 = data.rfind(b"PK\x06\x06")           # torch writes zip64 end records: offset at +48
    (offset,) = struct.unpack_from("<Q", data, eocd64 + 48)
    struct.pack_into("<Q", data, eocd64 + 48, offset + 100_000)
    p = tmp_path / "cd.pt"
    p.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="local header offset before the file's start"):
        open_checkpoint(p)
    with pytest.raises(CorruptCheckpointError):
        scan(str(p))


DCP_METADATA_HEAD = b"\x80\x04\x8c%torch.distributed.checkpoint.metadata\x8c\x08Metadata\x93"


@pytest.mark.parametrize("tail", [b"", b"h\x07.", b"}]Ns."], ids=["ends", "unset memo", "unhashable key"])
def test_scan_of_a_broken_dcp_metadata_is_a_one_line_answer(tmp_path, tail):
    """Escaped from `ckptstat scan`: a DCP `.metadata` whose pickle names DCP's Metadata class and then breaks
    (ends early, reads an unset memo slot, a dict keyed by a list) passed scan's check of its first bytes, and the
    folder's non-tensor items were looked up by unpickling it (formats/dcp `object_items`) outside the reader's
    error boundary: pickle's own EOFError / KeyError / TypeError came out of scan as themselves."""
    (tmp_path / ".metadata").write_bytes(DCP_METADATA_HEAD + tail)
    try:
        r = scan(str(tmp_path / ".metadata"))   # torch.load's trace alone: a one-line error or a verdict
    except CheckpointError:
        pass
    else:
        assert r["status"] in ("safe", "unsafe", "unknown")
    from ckptstat.analysis.scan import scan_path
    try:
        r = scan_path(tmp_path / ".metadata")   # what `ckptstat scan` runs: DCP's own loader's rules too
    except CheckpointError as e:
        assert ".metadata" in str(e)
    else:
        assert r["status"] in ("safe", "unsafe", "unknown")
    with pytest.raises(CorruptCheckpointError, match=r"\.metadata pickle"):
        open_checkpoint(tmp_path)


def test_small_zip_record_compressed_size_is_checked_against_the_file(tmp_path):
    """Escaped (a random 3000-example torch zip campaign, a `field` mutation of train.pt): the central-directory
    entry of the `byteorder` record claiming a compressed size of 2**31 - 1 (its uncompressed size still 6, under
    the small-record cap). The record was read with zipfile's read(), which asks the file for min(2 GiB,
    compressed size left) bytes at once (BufferedReader.read(n) allocates n first): 1 GiB traced for a 6 KB
    file, a MemoryError under the fuzz worker's cap. Now the record's extent is checked against the file first
    (containers.data_offset, as for data.pkl and the storages). 64 MiB here: enough to see, cheap to fail."""
    data = bytearray(open(fixture("torch", "train.pt"), "rb").read())
    cd = data.find(b"PK\x01\x02")
    while data[cd + 46:cd + 46 + struct.unpack_from("<H", data, cd + 28)[0]] != b"train/byteorder":
        cd = data.find(b"PK\x01\x02", cd + 4)
    struct.pack_into("<I", data, cd + 20, 64 << 20)   # compressed size
    p = tmp_path / "train.pt"
    p.write_bytes(bytes(data))
    result, peak = _peak(lambda: open_checkpoint(p))
    assert isinstance(result, CorruptCheckpointError) and "byteorder" in str(result), result
    assert peak < 16 << 20, f"peak {peak:,} B for a {len(data):,}-byte file"


def _npy_v2(header: str, data: bytes = b"") -> bytes:
    h = header.encode("latin1")
    h += b" " * (-(12 + len(h) + 1) % 16) + b"\n"
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(h)) + h + data


def test_scan_of_an_npy_header_with_many_items_is_bounded(tmp_path):
    """Escaped (crafted, beyond the mutator): `ckptstat scan` of an .npy parses its header with ast.literal_eval up to
    16 MiB (np.load(allow_pickle=True) lifts max_header_size), and the parser takes about 1 KiB per item: a 200 KB
    header of 100,000 shape items peaked at 94 MiB traced, a 4 MB one at 2 GB of memory and 16 s. A header whose
    literal holds more items than scan parses is now unknown, not parsed."""
    from ckptstat.analysis.scan import scan_path

    p = tmp_path / "many.npy"
    p.write_bytes(_npy_v2("{'descr': '<f4', 'fortran_order': False, 'shape': (" + "1," * 100_000 + "), }", b"\0" * 4))
    result, peak = _peak(lambda: scan_path(str(p)))
    assert isinstance(result, dict), result
    assert result["status"] == "unknown" and "items" in result["unknown"][0], result
    assert peak < 16 << 20, f"peak {peak:,} B for a {os.path.getsize(p):,}-byte file"
    # an object array's ordinary header is still parsed (and its pickle walked)
    q = tmp_path / "small.npy"
    q.write_bytes(_npy_v2("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", pickle.dumps([1], protocol=2)))
    assert scan_path(str(q))["status"] == "safe"


def test_scan_of_a_keras_zip_with_a_deflated_config_of_millions_of_values_is_bounded(tmp_path):
    """Escaped (crafted): `ckptstat scan` of a .keras zip json.loads its config.json whole (up to 16 MiB inflated) and
    only then counted its values against the 1,000,000 it walks: a 20 KB archive whose config.json inflates to 16 MiB
    of `{},` (5.6 million dicts) took 1.3 GB (a MemoryError under the fuzz worker's cap). The values a config can hold
    are now bounded from its bytes before it is parsed; past the bound the file is `unknown`, the bound named (an error
    until the twelfth red-team pass: keras reads such a config whole, docs/security.md)."""
    from ckptstat.analysis.scan import scan_path

    src = zipfile.ZipFile(fixture("keras3-zip", "mlp.keras"))
    p = tmp_path / "bomb.keras"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z:
        for name in src.namelist():
            z.writestr(name, b"[" + b"{}," * 2_000_000 + b"{}]" if name == "config.json" else src.read(name))
    assert os.path.getsize(p) < 64 << 10
    result, peak = _peak(lambda: scan_path(str(p)))
    assert isinstance(result, dict) and result["status"] == "unknown", result
    assert result["unknown"][0].startswith("config.json: more than 1,000,000 values"), result
    assert peak < 32 << 20, f"peak {peak:,} B"


def _torch_pickle_zip(p, body: bytes) -> str:
    """A torch.save zip of one 4-float storage whose data.pkl is: PROTO 2, a tensor of that storage memoised at slot
    250, then `body` (which ends the pickle)."""
    import pickletools

    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save({"w": torch.arange(4.0)}, buf)
    src = zipfile.ZipFile(buf)
    pkl_name = next(n for n in src.namelist() if n.endswith("data.pkl"))
    pkl = src.read(pkl_name)
    ops = list(pickletools.genops(pkl))
    i = next(k for k, (op, arg, _) in enumerate(ops) if op.name == "BINUNICODE" and arg == "w")
    start = ops[i + 2][2] if ops[i + 1][0].name.endswith("PUT") else ops[i + 1][2]
    end = [pos for op, _, pos in ops if op.name in ("SETITEM", "SETITEMS")][-1]
    with zipfile.ZipFile(p, "w") as z:
        for name in src.namelist():
            z.writestr(name, b"\x80\x02" + pkl[start:end] + b"q\xfa0" + body if name == pkl_name else src.read(name))
    return str(p)


def test_torch_pickle_naming_one_tensor_many_times_is_bounded(tmp_path):
    """Escaped (crafted): a pickle names a memoised tensor again for 2 bytes (BINGET), and each name costs ~1 KiB once
    opened (its TensorInfo): a 5 MB data.pkl naming one tensor 1,000,000 times took 1.2 GB and 45 s of `ckptstat`.
    The names a pickle yields are now charged against its build budget (pickle_build_ratio x its bytes)."""
    path = _torch_pickle_zip(tmp_path / "alias.pt", b"](" + b"h\xfa" * 40_000 + b"e.")
    with pytest.raises(CorruptCheckpointError, match="pickle_build_ratio") as e:
        open_checkpoint(path)
    assert str(e.value).startswith(path) and "\n" not in str(e.value)
    few = _torch_pickle_zip(tmp_path / "tied.pt", b"](" + b"h\xfa" * 3 + b"e.")   # tied weights still open
    assert len(open_checkpoint(few).tensors) == 3


def test_torch_names_that_collide_stay_short(tmp_path):
    """Escaped (crafted): names of keys that are not str/int are their repr cut at 80 characters, so tuple keys
    sharing a long first item all join to one name, and each collision appended a prime until the name was free:
    N colliding keys made names N characters long with ~N^3/6 character operations (a 321 KB file of 20,000 such keys
    ran past 5 minutes). Collisions are now numbered from a counter per name."""
    key = b"X\x64\x00\x00\x00" + b"A" * 100 + b"q\xfb0"          # a 100-char string at memo slot 251
    entries = b"".join(b"h\xfbJ" + struct.pack("<i", k) + b"\x86h\xfa" for k in range(1500))
    path = _torch_pickle_zip(tmp_path / "collide.pt", key + b"}(" + entries + b"u.")
    names = list(open_checkpoint(path).tensors)
    assert len(names) == 1500 and len(set(names)) == 1500
    assert max(len(n) for n in names) < 100, max(names, key=len)[:120]


def _keras2_listing(p, layers: list[bytes], weights: list[bytes]) -> str:
    """A Keras 2 weights file: `layers` as layer_names; one group `dense` with one dataset `dense/kernel:0`, whose
    weight_names attribute is `weights` (dense attribute storage: libver latest)."""
    with h5py.File(p, "w", libver="latest") as f:
        f.attrs.create("layer_names", np.array(layers), dtype=f"S{max(map(len, layers))}")
        g = f.create_group("dense")
        g.create_dataset("dense/kernel:0", data=np.ones((2, 2), "f4"))
        g.attrs.create("weight_names", np.array(weights), dtype=f"S{max(map(len, weights))}")
    return str(p)


@pytest.mark.parametrize("layers, weights", [
    ([b"dense"], [b"dense/kernel:0"] * 20_000),                          # one weight listed 20,000 times
    ([b"dense"] * 10_000, [b"dense/kernel:0"] * 2),                       # one layer listed 10,000 times
    ([b"dense"], [b"dense/" + b"./" * (i % 50) + b"kernel:0" for i in range(20_000)]),   # spelled 50 ways
])
def test_keras2_weight_listed_again_and_again_is_bounded(tmp_path, layers, weights):
    """Escaped (crafted): each entry of layer_names x weight_names was resolved through h5py (~0.5 ms and ~5 KB of
    h5py objects each) whatever it named: a 2.8 MB file listing one dataset 200,000 times ran past 2 minutes at 1.1 GB,
    a 2.5 MB one listing one layer 500,000 times likewise. Entries are resolved once per layer and spelling, and
    entries naming a dataset already listed are bounded by the datasets listed (+ 1,024)."""
    path = _keras2_listing(tmp_path / "w.h5", layers, weights)
    result, peak = _peak(lambda: open_checkpoint(path))
    assert isinstance(result, CorruptCheckpointError) and "already listed" in str(result), result
    assert str(result).startswith(path) and "\n" not in str(result)
    assert peak < 32 << 20, f"peak {peak:,} B"


def test_keras2_weight_listed_twice_still_opens(tmp_path):
    path = _keras2_listing(tmp_path / "w.h5", [b"dense", b"dense"], [b"dense/kernel:0"])
    ckpt = open_checkpoint(path)
    assert list(ckpt.tensors) == ["dense/kernel:0"] and ckpt.metadata["h5.weights_listed_twice"] == "1"


def test_h5_groups_nested_thousands_deep_are_refused(tmp_path):
    """Escaped (crafted): visititems opens every object by its path, so a chain of n nested groups costs n^2: a 1.5 MB
    file of 1,500 nested groups (one dataset at the bottom) took 8 s of `ckptstat`, growing with the square. The walk
    now stops past MAX_GROUP_DEPTH (256) levels."""
    p = tmp_path / "deep.h5"
    with h5py.File(p, "w") as f:
        g = f
        for _ in range(300):
            g = g.create_group("g")
        g.create_dataset("w", data=np.ones(3, "f4"))
    with pytest.raises(CorruptCheckpointError, match="groups nest more than 256 deep") as e:
        open_checkpoint(p)
    assert str(e.value).startswith(str(p)) and "\n" not in str(e.value)


_BIG = b"\x8b" + struct.pack("<I", 2600) + (1 << 20000).to_bytes(2600, "little")   # LONG4: 2**20000 (6,021 digits)


@pytest.mark.parametrize("body, shown", [
    (b"}X\x01\x00\x00\x00wh\xfas" + _BIG + b"h\xfas.", "<int of 20,001 bits>"),                  # a key
    (b"}X\x01\x00\x00\x00wh\xfasX\x04\x00\x00\x00seed" + _BIG + b"s.", "<int of 20,001 bits>"),   # a value
    (b"}X\x01\x00\x00\x00wh\xfas" + _BIG + b"\x85h\xfas.", "<tuple key>"),                       # in a tuple key
])
def test_torch_ints_past_str_limit_do_not_refuse_the_file(tmp_path, body, shown):
    """Found (crafted): an int of more than 4,300 digits (a dict key, a top-level value, inside a tuple key) made
    str()/repr() raise ValueError (Python's int-to-str limit) in the tensor walk, the metadata and the optimizer
    search, so a file torch.load reads was refused as 'ValueError: Exceeds the limit (4300 digits)'. Such an int is
    now shown by its size."""
    path = _torch_pickle_zip(tmp_path / "bigint.pt", body)
    ckpt = open_checkpoint(path)
    assert "w" in ckpt.tensors
    assert any(shown in n for n in list(ckpt.tensors) + list(ckpt.metadata.values())), (ckpt.tensors, ckpt.metadata)
