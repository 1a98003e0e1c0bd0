"""TF tensor bundles: fixtures written by TensorFlow (fixtures/make_tf.py), compared with what
TensorFlow read back from them (fixtures/expected_tf.json); hostile index files built byte by byte."""
from __future__ import annotations

import json
import math
import os
import shutil
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptstat import CkptstatError, CorruptCheckpointError, FileNotFound, open_checkpoint, summarize
from ckptstat.formats import crc32c
from ckptstat.formats.tf_bundle import MAGIC_BYTES, slice_key
from ckptstat.naming.layout_ties import kernel_layout, out_in_shape

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "fixtures")
with open(os.path.join(FIX, "expected_tf.json")) as f:
    EXPECTED = json.load(f)
BUNDLES = ["tf1-bert", "tf1-bert-adam", "tf1-partitioned", "tf2-keras", "tf2-keras3"]
TF_TO_CANON = {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16", "int32": "I32",
               "int64": "I64", "string": "STR", "bool": "BOOL"}


def prefix_of(name: str) -> str:
    return os.path.join(FIX, EXPECTED[name]["prefix"])


def by_tf_key(ckpt) -> dict:
    """TF's key -> TensorInfo (a few Keras 3 variables are shown under their model path)."""
    return {str(t.extra.get("checkpoint_key", t.name)): t for t in ckpt}


@pytest.mark.parametrize("name", BUNDLES)
def test_matches_tensorflow(name):
    exp = EXPECTED[name]
    ckpt = open_checkpoint(prefix_of(name))   # a prefix: not a file itself
    tensors = by_tf_key(ckpt)
    assert set(tensors) == set(exp["variables"])
    for key, v in exp["variables"].items():
        t = tensors[key]
        assert list(t.shape) == v["shape"], key
        assert t.dtype == TF_TO_CANON[v["dtype"]], key
        if v["sum"] is not None:
            total = sum(float(c.astype(np.float64).sum()) for c in ckpt.iter_chunks(t.name, chunk_bytes=64))
            assert total == pytest.approx(v["sum"], rel=1e-5, abs=1e-5), key
    assert sum(t.numel for t in ckpt) == exp["list_variables_elements"]
    r = summarize(ckpt)
    assert r["parameters"]["unique"] == exp["trainable_parameters"]
    assert r["parameters"]["unique"] + sum(n["elements"] for n in r["non_parameters"]) == exp["list_variables_elements"]


@pytest.mark.parametrize("name", BUNDLES)
def test_every_way_to_name_it(name):
    prefix = prefix_of(name)
    folder = os.path.dirname(prefix)
    paths = [prefix, prefix + ".index", folder, os.path.join(folder, "checkpoint"),
             prefix + ".data-00000-of-0000" + EXPECTED[name].get("shards", "1")]
    if name == "tf1-partitioned":
        paths[-1] = prefix + ".data-00001-of-00002"
    opened = [open_checkpoint(p) for p in paths]
    assert all(o.tensors.keys() == opened[0].tensors.keys() for o in opened)
    assert all(o.format == "tf-bundle" for o in opened)


@pytest.mark.parametrize("name", BUNDLES)
def test_verify_passes(name):
    ckpt = open_checkpoint(prefix_of(name), verify=True)
    assert any(n.startswith("verified:") for n in ckpt.notes)


def test_partitioned_and_sharded():
    ckpt = open_checkpoint(prefix_of("tf1-partitioned"))
    table = ckpt["embeddings/table"]
    assert table.shape == (10, 6) and table.offset is None
    # fixed_size_partitioner(3) splits 10 rows as 4 + 3 + 3
    assert [p["extent"] for p in table.extra["partitions"]] == [[[0, 4], [0, 6]], [[4, 3], [0, 6]], [[7, 3], [0, 6]]]
    assert len(ckpt.files) == 3 and ckpt.files[1].endswith("-00000-of-00002") and ckpt.files[2].endswith("-00001-of-00002")
    assert ckpt["dense/bias"].file.endswith("data-00001-of-00002")   # the second device's shard
    whole = ckpt.read("embeddings/table")
    assert whole.shape == (10, 6)
    # chunked reading across slice boundaries gives the same values
    chunks = np.concatenate(list(ckpt.iter_chunks("embeddings/table", chunk_bytes=28)))
    np.testing.assert_array_equal(chunks, whole.reshape(-1))
    np.testing.assert_allclose(ckpt.read("extra/bf16"), np.linspace(-2, 2, 12).reshape(3, 4), atol=0.02)
    assert ckpt.read("extra/counts").tolist() == [0, 1, 2, 3, 4]


def test_slice_key_encoding_matches_tensorflow():
    ckpt = open_checkpoint(prefix_of("tf1-partitioned"))
    assert len(ckpt["embeddings/table"].extra["partitions"]) == 3   # every key was found
    # OrderedCode WriteSignedNumIncreasing: -1 is 0x7f, 0 is 0x80, 64 needs two bytes
    assert slice_key("a", ((0, -1),))[-2:] == b"\x80\x7f"
    assert slice_key("a", ((64, 1),))[-3:] == b"\xc0\x40\x81"


def test_bert_tf1_classified_and_tied():
    ckpt = open_checkpoint(prefix_of("tf1-bert-adam"))
    r = summarize(ckpt)
    buckets = {b["bucket"]: b["params"] for b in r["buckets"]}
    assert set(buckets) == {"embedding", "encoder", "pooler", "cls"}
    h, L, f, V, P, T = 32, 2, 37, 99, 64, 2
    assert buckets["embedding"] == (V + P + T) * h + 2 * h
    assert buckets["encoder"] == L * (4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h)
    assert buckets["pooler"] == h * h + h
    assert buckets["cls"] == h * h + h + 2 * h + V + 2 * h + 2
    roles = {n["role"]: n for n in r["non_parameters"]}
    assert roles["optimizer"]["tensors"] == 2 * 46 and roles["optimizer"]["elements"] == 2 * r["parameters"]["unique"]
    assert roles["counter"]["names"] == ["global_step"]
    assert any("cls/predictions/output_weights is not stored" in n and "bert/embeddings/word_embeddings" in n
               for n in r["notes"])
    layers = {(x["bucket"], x["layer"]) for x in r["layers"]}
    assert layers == {("encoder", 0), ("encoder", 1)}


def test_tf2_training_state_apart():
    r = summarize(open_checkpoint(prefix_of("tf2-keras")))
    roles = {n["role"]: n for n in r["non_parameters"]}
    assert r["parameters"]["unique"] == EXPECTED["tf2-keras"]["trainable_parameters"]
    assert any(".OPTIMIZER_SLOT" in n for n in roles["optimizer"]["names"])
    assert set(roles["counter"]["names"]) == {"_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter/.ATTRIBUTES/VARIABLE_VALUE"}


def test_keras3_object_graph_adoption():
    ckpt = open_checkpoint(prefix_of("tf2-keras3"))
    adopted = [t for t in ckpt if "checkpoint_key" in t.extra]
    assert len(adopted) == 4
    assert all(t.name.startswith("model/") and str(t.extra["checkpoint_key"]).startswith("optimizer/_trainable_variables/")
               for t in adopted)
    assert any("object graph" in n for n in ckpt.notes)


def test_kernel_layout_against_safetensors():
    """TF kernels are [in, out]; the same weights in safetensors are [out, in]."""
    tf = open_checkpoint(prefix_of("tf1-bert"))
    stf = open_checkpoint(os.path.join(FIX, "bert-tiny-pretraining", "model.safetensors"))
    k = tf["bert/encoder/layer_1/intermediate/dense/kernel"]
    assert k.extra["layout"] == "in_out" and k.shape == (32, 37)
    w = stf["bert.encoder.layer.1.intermediate.dense.weight"]
    assert out_in_shape(k.shape, k.extra["layout"]) == w.shape == (37, 32)
    np.testing.assert_array_equal(tf.read(k.name).T, stf.read(w.name))
    # google-research's NSP weights are [out, in] by its model code (transpose_b=True), not by anything
    # the file says: the reader leaves the layout unset and the naming rules supply it.
    nsp = tf["cls/seq_relationship/output_weights"]
    assert "layout" not in nsp.extra and kernel_layout(nsp.name, nsp.shape) == "out_in"
    np.testing.assert_array_equal(tf.read("cls/seq_relationship/output_weights"), stf.read("cls.seq_relationship.weight"))
    assert "layout" not in tf["bert/embeddings/word_embeddings"].extra


def test_checkpoint_file_from_another_machine(tmp_path):
    src = os.path.dirname(prefix_of("tf1-bert"))
    dst = tmp_path / "moved"
    shutil.copytree(src, dst)
    (dst / "checkpoint").write_text('model_checkpoint_path: "/somewhere/else/model.ckpt-0"\n')
    assert len(open_checkpoint(dst)) == 46


def test_cli_verify(capsys):
    from ckptstat.cli import main

    rc = main(["summary", prefix_of("tf1-bert"), "--verify"])
    out = capsys.readouterr().out
    assert rc == 0 and "verified: 46 tensor crc32c" in out and "21,263" in out


# ---------------------------------------------------------------- hostile files, built byte by byte
def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def pb(field: int, wire: int, value) -> bytes:
    key = varint(field << 3 | wire)
    if wire == 0:
        return key + varint(value)
    if wire == 5:
        return key + struct.pack("<I", value)
    return key + varint(len(value)) + value


def entry(dtype: int, shape: list[int], offset: int, size: int, crc: int | None = None, shard: int = 0) -> bytes:
    dims = b"".join(pb(2, 2, pb(1, 0, d)) for d in shape)
    out = pb(1, 0, dtype) + pb(2, 2, dims) + (pb(3, 0, shard) if shard else b"") + pb(4, 0, offset) + pb(5, 0, size)
    return out + (pb(6, 5, crc) if crc is not None else b"")


def block(entries: list[tuple[bytes, bytes]]) -> bytes:
    body = b"".join(varint(0) + varint(len(k)) + varint(len(v)) + k + v for k, v in entries)
    return body + struct.pack("<II", 0, 1)   # one restart point at 0


def trailer(contents: bytes) -> bytes:
    return contents + b"\x00" + struct.pack("<I", crc32c.mask(crc32c.crc32c(contents + b"\x00")))


def table(entries: list[tuple[bytes, bytes]]) -> bytes:
    data = block(entries)
    out = trailer(data)
    index = block([(entries[-1][0], varint(0) + varint(len(data)))])
    ioff = len(out)
    out += trailer(index)
    meta = block([])
    moff = len(out)
    out += trailer(meta)
    footer = varint(moff) + varint(len(meta)) + varint(ioff) + varint(len(index))
    return out + footer.ljust(40, b"\x00") + MAGIC_BYTES


def write_bundle(tmp_path, entries=None, data: bytes | None = None, index: bytes | None = None) -> str:
    values = np.arange(6, dtype="<f4").tobytes()
    data = values if data is None else data
    if entries is None:
        crc = crc32c.mask(crc32c.crc32c(values))
        entries = [(b"", pb(1, 0, 1)), (b"w", entry(1, [2, 3], 0, 24, crc))]
    prefix = str(tmp_path / "model.ckpt-1")
    with open(prefix + ".index", "wb") as f:
        f.write(table(entries) if index is None else index)
    with open(prefix + ".data-00000-of-00001", "wb") as f:
        f.write(data)
    return prefix


def test_hand_built_bundle_is_valid(tmp_path):
    prefix = write_bundle(tmp_path)
    ckpt = open_checkpoint(prefix, verify=True)
    assert ckpt.read("w").tolist() == [[0, 1, 2], [3, 4, 5]]


def corrupt(tmp_path, **kw):
    with pytest.raises(CorruptCheckpointError) as e:
        open_checkpoint(write_bundle(tmp_path, **kw), verify=kw.pop("verify", False))
    return str(e.value)


def test_bad_magic(tmp_path):
    idx = bytearray(table([(b"", pb(1, 0, 1))]))
    idx[-1] ^= 0xFF
    msg = corrupt(tmp_path, index=bytes(idx))
    assert "magic" in msg and "model.ckpt-1.index" in msg


def test_too_short(tmp_path):
    assert "too short" in corrupt(tmp_path, index=b"\x00" * 10)


def test_bad_index_handle(tmp_path):
    good = table([(b"", pb(1, 0, 1))])
    footer = (varint(0) + varint(1) + varint(10_000) + varint(50)).ljust(40, b"\x00") + MAGIC_BYTES
    assert "points past the end" in corrupt(tmp_path, index=good[:-48] + footer)


def test_bad_data_block_handle(tmp_path):
    # a valid index block whose only entry points its data block past the end
    idx_block = block([(b"w", varint(5000) + varint(100))])
    body = trailer(idx_block)
    footer = (varint(0) + varint(0) + varint(0) + varint(len(idx_block))).ljust(40, b"\x00") + MAGIC_BYTES
    assert "data block handle" in corrupt(tmp_path, index=body + footer)


def test_block_crc_mismatch_only_with_verify(tmp_path):
    idx = bytearray(table([(b"", pb(1, 0, 1)), (b"w", entry(1, [2, 3], 0, 24))]))
    assert idx[8:9] == b"w"   # block: [0 0 2 "" 08 01] [0 1 len "w" ...]
    idx[8] ^= 0x01            # the key becomes "v": still a well-formed table
    prefix = write_bundle(tmp_path, index=bytes(idx))
    assert list(open_checkpoint(prefix).tensors) == ["v"]
    with pytest.raises(CorruptCheckpointError, match="crc32c mismatch"):
        open_checkpoint(prefix, verify=True)


def test_tensor_crc_mismatch(tmp_path):
    values = bytearray(np.arange(6, dtype="<f4").tobytes())
    crc = crc32c.mask(crc32c.crc32c(bytes(values)))
    values[7] ^= 0x40
    entries = [(b"", pb(1, 0, 1)), (b"w", entry(1, [2, 3], 0, 24, crc))]
    prefix = write_bundle(tmp_path, entries=entries, data=bytes(values))
    assert open_checkpoint(prefix).read("w").shape == (2, 3)     # headers alone do not notice
    with pytest.raises(CorruptCheckpointError, match=r"tensor 'w': crc32c mismatch"):
        open_checkpoint(prefix, verify=True)


def test_entry_past_data_file(tmp_path):
    entries = [(b"", pb(1, 0, 1)), (b"w", entry(1, [2, 3], 8, 24))]
    msg = corrupt(tmp_path, entries=entries)
    assert "run past the end" in msg and "data-00000-of-00001" in msg


def test_entry_size_disagrees_with_shape(tmp_path):
    entries = [(b"", pb(1, 0, 1)), (b"w", entry(1, [2, 2], 0, 24))]
    assert "needs 16" in corrupt(tmp_path, entries=entries)


def test_shard_beyond_header(tmp_path):
    entries = [(b"", pb(1, 0, 1)), (b"w", entry(1, [2, 3], 0, 24, shard=3))]
    assert "shard 3" in corrupt(tmp_path, entries=entries)


def test_varint_never_ends(tmp_path):
    # a BundleEntryProto whose offset varint never terminates
    entries = [(b"", pb(1, 0, 1)), (b"w", pb(1, 0, 1) + b"\x20" + b"\xff" * 12)]
    msg = corrupt(tmp_path, entries=entries)
    assert "varint" in msg and ("never ends" in msg or "runs past" in msg)


def test_block_entry_varint_never_ends(tmp_path):
    blk = b"\xff" * 20 + struct.pack("<II", 0, 1)
    body = trailer(blk)
    idx = block([(b"w", varint(0) + varint(len(blk)))])
    ioff = len(body)
    body += trailer(idx)
    footer = (varint(0) + varint(0) + varint(ioff) + varint(len(idx))).ljust(40, b"\x00") + MAGIC_BYTES
    assert "varint" in corrupt(tmp_path, index=body + footer)


def test_unknown_dtype(tmp_path):
    entries = [(b"", pb(1, 0, 1)), (b"w", entry(77, [2, 3], 0, 24))]
    assert "dtype enum 77" in corrupt(tmp_path, entries=entries)


def test_missing_shard(tmp_path):
    prefix = write_bundle(tmp_path)
    os.remove(prefix + ".data-00000-of-00001")
    with pytest.raises(FileNotFound, match="data shard"):
        open_checkpoint(prefix)


def test_partition_listed_without_entry(tmp_path):
    sl = pb(7, 2, pb(1, 2, pb(1, 0, 0) + pb(2, 0, 1)) + pb(1, 2, b""))
    full = pb(1, 0, 1) + pb(2, 2, pb(2, 2, pb(1, 0, 2)) + pb(2, 2, pb(1, 0, 3))) + sl
    assert "has no entry" in corrupt(tmp_path, entries=[(b"", pb(1, 0, 1)), (b"w", full)])


def test_cli_one_line_error(tmp_path, capsys):
    from ckptstat.cli import main

    prefix = write_bundle(tmp_path, entries=[(b"", pb(1, 0, 1)), (b"w", entry(1, [2, 3], 8, 24))])
    rc = main([prefix])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err and "run past the end" in err


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzz_index_bytes(tmp_path, data):
    """Whatever the index bytes, only ckptstat's own errors come out."""
    with open(prefix_of("tf1-bert") + ".index", "rb") as f:
        raw = bytearray(f.read())
    for _ in range(data.draw(st.integers(1, 8))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(0, len(raw)))] if data.draw(st.booleans()) else raw
    src = os.path.dirname(prefix_of("tf1-bert"))
    prefix = str(tmp_path / "model.ckpt-0")
    shutil.copy(os.path.join(src, "model.ckpt-0.data-00000-of-00001"), prefix + ".data-00000-of-00001")
    with open(prefix + ".index", "wb") as f:
        f.write(bytes(raw))
    try:
        ckpt = open_checkpoint(prefix, verify=data.draw(st.booleans()))
        for t in ckpt:
            if t.dtype != "STR" and math.prod(t.shape) < 10_000:
                ckpt.read(t.name)
    except CkptstatError:
        pass
