"""ONNX models (ckptstat/formats/onnx_model.py, docs/onnx.md): fixtures from torch.onnx.export and
onnx.helper (fixtures/make_onnx.py); the oracles are torch's own parameter count of the model the
file was exported from and onnx's numpy_helper. Round trip, truncation, bit flips and hostile claims
are in tests/test_reader_contract.py."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from conftest import fixture

from ckptstat import open_checkpoint, summarize
from ckptstat.errors import CorruptCheckpointError, ExternalReferenceError
from ckptstat.formats import registry

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _torch_params(folder: str) -> int:
    """sum(p.numel()) of the BertModel the exported model came from, built on the meta device."""
    import torch
    from transformers import BertConfig, BertModel

    with torch.device("meta"):
        model = BertModel(BertConfig.from_json_file(os.path.join(folder, "config.json")))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("folder", ["bert-tiny", "bert-tiny-external"])
def test_exported_bert_counts_as_torch_does(folder, tmp_path):
    path = fixture("onnx", folder)
    if folder == "bert-tiny-external":   # the config lives beside the inline export
        path = str(tmp_path / "m")
        shutil.copytree(fixture("onnx", folder), path)
        shutil.copy(fixture("onnx", "bert-tiny", "config.json"), path)
    report = summarize(path)
    assert report["format"] == "onnx"
    assert report["parameters"]["unique"] == _torch_params(fixture("onnx", "bert-tiny"))
    assert report["unplaced"] == []                       # exporter names keep module paths
    assert {b["bucket"] for b in report["buckets"]} == {"embedding", "encoder", "pooler"}
    constants = [r for r in report["non_parameters"] if r["role"] == "buffer"]
    model = onnx.load(os.path.join(path, "model.onnx"), load_external_data=False)
    assert constants and constants[0]["tensors"] == sum(n.op_type == "Constant" for n in model.graph.node)
    assert report["analytic"] is not None


def test_detected_by_content_not_name(tmp_path):
    p = tmp_path / "weights.bin"
    shutil.copy(fixture("onnx", "dtypes.onnx"), p)
    assert registry.detect(str(p)).name == "onnx"
    # and other formats' files are not taken for ONNX
    for other in ("dtypes.safetensors", "torch/dtypes.pt", "gguf/llama-tiny-q.gguf", "keras3/bf16.weights.h5"):
        assert registry.detect(fixture(other)).name != "onnx", other


def test_dtype_table_matches_onnx():
    """Every ONNX data type the reader maps has the bit width onnx itself gives it."""
    from ckptstat.core import dtypes
    from ckptstat.formats.onnx_model import ONNX_TYPES

    for code, name in ONNX_TYPES.items():
        if name == "STR":
            continue
        np_dtype = helper.tensor_dtype_to_np_dtype(code)
        bits = {TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.FLOAT4E2M1: 4, TensorProto.INT2: 2,
                TensorProto.UINT2: 2, TensorProto.FLOAT6E2M3: 6, TensorProto.FLOAT6E3M2: 6}.get(code, np_dtype.itemsize * 8)
        assert dtypes.get(name).bits == bits, (code, name)
    # every data type the installed onnx defines is mapped (a model holding one was refused whole:
    # 'unknown ONNX data type 26')
    assert set(TensorProto.DataType.values()) - {TensorProto.UNDEFINED} <= set(ONNX_TYPES)


def _external_model(folder, offset: int, shape: tuple[int, ...], location: str = "big.bin") -> str:
    t = TensorProto(name="big.weight", data_type=TensorProto.FLOAT, dims=list(shape), data_location=TensorProto.EXTERNAL)
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(4 * int(np.prod(shape))))):
        t.external_data.add(key=k, value=v)
    graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("big.weight", TensorProto.FLOAT, shape)],
                              initializer=[t])
    path = os.path.join(folder, "model.onnx")
    onnx.save_model(helper.make_model(graph), path)   # the proto only: its external data is written below
    return path


def test_external_data_past_2_gib_by_offset(tmp_path):
    """A model over 2 GB keeps its weights in external data; values are read by offset (a sparse file)."""
    values = np.arange(6, dtype=np.float32) - 2.5
    offset = (5 << 30) + 12                       # past 2^32: no 32-bit offset survives this
    with open(tmp_path / "big.bin", "wb") as f:
        f.seek(offset)
        f.write(values.tobytes())
    ckpt = open_checkpoint(_external_model(str(tmp_path), offset, (2, 3)))
    t = ckpt["big.weight"]
    assert (t.offset, t.nbytes, os.path.basename(t.file)) == (offset, 24, "big.bin")
    ref = numpy_helper.to_array(onnx.load(str(tmp_path / "model.onnx")).graph.initializer[0], base_dir=str(tmp_path))
    np.testing.assert_array_equal(ckpt.read("big.weight"), ref)


def test_a_3_gib_tensor_opens_from_headers(tmp_path):
    n = 3 << 28                                   # 3 GiB of float32, in a sparse file
    with open(tmp_path / "big.bin", "wb") as f:
        f.truncate(4 * n)
    ckpt = open_checkpoint(_external_model(str(tmp_path), 0, (n,)))
    assert ckpt["big.weight"].byte_size == 3 << 30
    assert summarize(str(tmp_path))["parameters"]["unique"] == n
    first = next(ckpt.iter_chunks("big.weight", chunk_bytes=1 << 16))
    assert first.size == 1 << 14 and not first.any()


def test_external_data_outside_the_folder_is_refused(tmp_path):
    (tmp_path / "outside.bin").write_bytes(b"\0" * 24)
    inner = tmp_path / "model"
    inner.mkdir()
    (inner / "big.bin").symlink_to(tmp_path / "outside.bin")
    with pytest.raises(ExternalReferenceError):
        open_checkpoint(_external_model(str(inner), 0, (2, 3)))
    with pytest.raises(CorruptCheckpointError, match="not a relative path"):
        open_checkpoint(_external_model(str(inner), 0, (2, 3), location="../outside.bin"))


def test_cli_tensors_lists_every_storage_path(cli):
    rc, out, err = cli("tensors", fixture("onnx", "dtypes.onnx"), "--json")
    assert rc == 0, err
    got = {t["name"]: t for t in json.loads(out)["tensors"]}
    with open(fixture("expected_onnx.json")) as f:
        want = json.load(f)["onnx/dtypes.onnx"]
    assert sorted(got) == sorted(want)
    assert {got[k]["dtype"] for k in ("raw.i4", "raw.u4", "raw.bf16", "raw.f8e4m3fn")} == {"I4", "U4", "BF16", "F8_E4M3"}


def test_values_in_typed_fields_are_no_aliases(cli):
    """Initializers held in typed fields (int32_data, float_data...) have no byte offset: each is its own tensor,
    never a tie of another of the same shape; `ties` counts them all (onnx's own initializer list)."""
    import onnx

    model = onnx.load(fixture("onnx", "dtypes.onnx"), load_external_data=False)
    rc, out, err = cli("tensors", fixture("onnx", "dtypes.onnx"), "--json")
    rows = json.loads(out)["tensors"]
    assert rc == 0 and not [r for r in rows if r["alias_of"]], err
    assert {i.name for i in model.graph.initializer} <= {r["name"] for r in rows}
    rc, out, err = cli("ties", fixture("onnx", "dtypes.onnx"), "--json")
    assert rc == 0 and err == "", err


def test_reading_needs_no_onnx_package():
    """The reader walks the protobuf itself: neither onnx nor protobuf is imported to read a model."""
    import subprocess
    import sys

    code = ("import sys, ckptstat; c = ckptstat.open_checkpoint(sys.argv[1]); [c.read(t.name) for t in c]; "
            "print(sorted(m for m in ('onnx', 'google.protobuf') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, fixture("onnx", "bert-tiny-external")], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


def test_4_bit_types_in_int32_data_read_as_onnx_reads_them(tmp_path):
    """helper.make_tensor(raw=False), its default, writes INT4 / UINT4 / FLOAT4E2M1 two per int32_data value, low
    nibble first (onnx.proto): the whole model was refused ('11 bytes of varints cannot hold 15 values', or 'I4 values
    in a varint field'). Odd and even lengths, read whole and in chunks, against numpy_helper.to_array; a value
    that is not a byte is refused."""
    rng = np.random.default_rng(0)
    inits = [helper.make_tensor("i4", TensorProto.INT4, (3, 5), rng.integers(-8, 8, 15).tolist()),
             helper.make_tensor("u4", TensorProto.UINT4, (4, 4), rng.integers(0, 16, 16).tolist()),
             helper.make_tensor("f4", TensorProto.FLOAT4E2M1, (7,), [0.5, -1.0, 6.0, -0.0, 3.0, 1.5, -4.0])]
    graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("i4", TensorProto.INT4, (3, 5))],
                              initializer=inits)
    path = str(tmp_path / "m.onnx")
    onnx.save_model(helper.make_model(graph), path)
    ckpt = open_checkpoint(path)
    for t in onnx.load(path).graph.initializer:
        assert t.int32_data and not t.raw_data, t.name   # the form under test
        want = numpy_helper.to_array(t).astype(np.float32)
        assert ckpt[t.name].shape == want.shape
        np.testing.assert_array_equal(ckpt.read(t.name), want, err_msg=t.name)
        chunks = np.concatenate(list(ckpt.iter_chunks(t.name, chunk_bytes=2)))
        np.testing.assert_array_equal(chunks, want.reshape(-1), err_msg=t.name)
    bad = TensorProto(name="bad", data_type=TensorProto.INT4, dims=[2], int32_data=[300])
    onnx.save_model(helper.make_model(helper.make_graph([], "g", [], [], initializer=[bad])), path)
    with pytest.raises(CorruptCheckpointError, match="not a byte"):
        open_checkpoint(path).read("bad")


def test_2_and_6_bit_types_read_as_onnx_reads_them(tmp_path):
    """INT2 / UINT2 (four a byte, lowest bits first) and FLOAT6E2M3 / FLOAT6E3M2 (a 6-bit stream in raw_data, one code
    an int32_data value), onnx 1.20's types: a model holding one was refused whole ('unknown ONNX data type 26',
    found by the formats red-team pass). Raw and typed, lengths not a multiple of 4, read whole and in chunks, against
    numpy_helper.to_array."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    inits = []
    for name, code, np_dtype, lo, hi in [("i2", TensorProto.INT2, ml_dtypes.int2, -2, 1),
                                         ("u2", TensorProto.UINT2, ml_dtypes.uint2, 0, 3),
                                         ("f6a", TensorProto.FLOAT6E2M3, ml_dtypes.float6_e2m3fn, -7.5, 7.5),
                                         ("f6b", TensorProto.FLOAT6E3M2, ml_dtypes.float6_e3m2fn, -28, 28)]:
        x = rng.uniform(lo, hi, (3, 7))
        a = (np.round(x) if code in (TensorProto.INT2, TensorProto.UINT2) else x).astype(np_dtype)
        inits.append(numpy_helper.from_array(a, f"raw_{name}"))
        typed = a.astype(np.float32) if a.dtype.kind == "V" or "float" in a.dtype.name else a.astype(np.int8).ravel().tolist()
        inits.append(helper.make_tensor(f"typed_{name}", code, a.shape, typed))
    graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("raw_i2", TensorProto.INT2, (3, 7))],
                              initializer=inits)
    path = str(tmp_path / "m.onnx")
    onnx.save_model(helper.make_model(graph), path)
    ckpt = open_checkpoint(path)
    for t in onnx.load(path).graph.initializer:
        assert bool(t.raw_data) == t.name.startswith("raw_"), t.name   # the form under test
        want = numpy_helper.to_array(t).astype(np.float32)
        assert ckpt[t.name].shape == want.shape
        np.testing.assert_array_equal(ckpt.read(t.name), want, err_msg=t.name)
        chunks = np.concatenate(list(ckpt.iter_chunks(t.name, chunk_bytes=2)))
        np.testing.assert_array_equal(chunks, want.reshape(-1), err_msg=t.name)


@pytest.mark.parametrize("coordinates", [False, True])
def test_a_sparse_tensor_is_scattered_once_not_per_chunk(tmp_path, monkeypatch, coordinates):
    """A sparse initializer's values and indices were read, checked and scattered again for every chunk: `stats` of a
    4.8 MB file (400k non-zeros in 1.6G float32 elements, dims within the `expansion` limit) took 226 s, quadratic in
    the file (seventh red-team pass). Now sorted once per tensor and sliced by bisection per chunk. Oracle: onnx's own
    numpy_helper arrays of the values and indices, scattered by numpy."""
    from ckptstat.formats import onnx_model

    rng = np.random.default_rng(0)
    shape, nnz = (300, 700), 5000
    flat = rng.choice(shape[0] * shape[1], nnz, replace=False)   # unsorted, as a writer may store them
    idx = np.stack(np.unravel_index(flat, shape), axis=1) if coordinates else flat
    sp = helper.make_sparse_tensor(numpy_helper.from_array(rng.standard_normal(nnz).astype(np.float32), "w"),
                                   numpy_helper.from_array(idx.astype(np.int64), "w_idx"), list(shape))
    g = helper.make_graph([], "g", [], [helper.make_tensor_value_info("w", TensorProto.FLOAT, list(shape))],
                          sparse_initializer=[sp])
    path = str(tmp_path / "sparse.onnx")
    import onnx

    onnx.save(helper.make_model(g), path)
    m = onnx.load(path)
    dense = np.zeros(shape[0] * shape[1], np.float32)
    dense[np.ravel_multi_index(tuple(numpy_helper.to_array(m.graph.sparse_initializer[0].indices).reshape(-1, 2).T),
                               shape) if coordinates else numpy_helper.to_array(m.graph.sparse_initializer[0].indices)] \
        = numpy_helper.to_array(m.graph.sparse_initializer[0].values)
    calls = []
    scatter = onnx_model._Reader._scatter
    monkeypatch.setattr(onnx_model._Reader, "_scatter", lambda self, info: calls.append(1) or scatter(self, info))
    ckpt = open_checkpoint(path)
    chunks = list(ckpt.iter_chunks("w", chunk_bytes=4096))
    assert len(chunks) > 50 and len(calls) == 1
    np.testing.assert_array_equal(np.concatenate(chunks), dense)


def test_initializers_of_subgraphs_are_the_models(tmp_path):
    """An If's branches hold initializers of their own (exporters put a branch's weights there), an If inside a branch
    too: counted with the main graph's, each value as onnx's numpy_helper reads it, the model passing onnx's checker."""
    import onnx

    rng = np.random.default_rng(0)

    def out(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["a", "b"])

    def branch(name: str, shape: tuple, deeper: onnx.GraphProto | None = None) -> onnx.GraphProto:
        if deeper is not None:   # an If inside this branch, its branches' weights its own
            node = helper.make_node("If", ["cond"], [f"{name}_out"], then_branch=deeper, else_branch=deeper)
            return helper.make_graph([node], name, [], [out(f"{name}_out")])
        w = numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), f"{name}_w")
        return helper.make_graph([helper.make_node("Identity", [f"{name}_w"], [f"{name}_out"])], name, [],
                                 [out(f"{name}_out")], [w])
    main_w = numpy_helper.from_array(rng.standard_normal((3, 5)).astype(np.float32), "main_w")
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", (4, 4)), else_branch=branch("else", (4, 4))),
         helper.make_node("If", ["cond"], ["z"], then_branch=branch("outer", (1, 1), branch("inner", (2, 2))),
                          else_branch=branch("other", (6, 1)))],
        "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])], [out("y"), out("z")], [main_w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    path = tmp_path / "branches.onnx"
    onnx.save(model, str(path))

    def initializers(g: onnx.GraphProto) -> list:
        found = [(t.name, numpy_helper.to_array(t)) for t in g.initializer]
        for node in g.node:
            for a in node.attribute:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    found += initializers(sub)
        return found
    theirs = initializers(onnx.load(str(path)).graph)   # (the inner If's two branches: one graph, so inner_w twice)
    assert sorted(n for n, _ in theirs) == ["else_w", "inner_w", "inner_w", "main_w", "other_w", "then_w"]
    ckpt = open_checkpoint(str(path))
    assert sorted(n.split(" (")[0] for n in ckpt.tensors) == sorted(n for n, _ in theirs)
    # (the second copy named with where it sits: the If of output z's then branch, the If inside it)
    assert any(n.startswith("inner_w (If 'z' then_branch/If 'outer_out' ") for n in ckpt.tensors)
    for name, value in theirs:
        assert any(np.array_equal(ckpt.read(n), value) for n in ckpt.tensors if n.split(" (")[0] == name)
    assert summarize(ckpt)["parameters"]["unique"] == sum(v.size for _, v in theirs)


def test_subgraphs_nested_past_the_bound_are_refused(tmp_path, cli):
    """A ModelProto written byte by byte (onnx's protobuf stops at about 30 levels of If) whose Ifs nest 200 deep:
    one line, no traceback; 60 levels still read."""
    def field(num: int, payload: bytes) -> bytes:   # a length-delimited protobuf field
        out, n = bytearray([num << 3 | 2]), len(payload)
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        return bytes(out) + bytes([n]) + payload

    def nested(depth: int) -> bytes:
        graph = b""
        for _ in range(depth):   # GraphProto.node(1) = NodeProto{op_type(4) "If", attribute(5) = {name(1), g(6)}}
            attr = field(1, b"then_branch") + field(6, graph)
            graph = field(1, field(4, b"If") + field(5, attr))
        opset = field(8, b"\x10\x11")   # ModelProto.opset_import { version: 17 }
        return field(7, graph) + opset
    for depth, ok in ((60, True), (200, False)):
        path = tmp_path / f"deep{depth}.onnx"
        path.write_bytes(nested(depth))
        rc, _, err = cli("summary", str(path))
        assert (rc == 0) == ok and "Traceback" not in err
        if not ok:
            assert err.count("\n") == 1 and "subgraphs nest more than 64 deep" in err


def _one_initializer(tmp_path, t: TensorProto) -> str:
    path = str(tmp_path / f"{t.name}.onnx")
    onnx.save_model(helper.make_model(helper.make_graph([], "g", [], [], initializer=[t])), path)
    return path


def test_values_come_from_the_field_onnx_reads(tmp_path):
    """numpy_helper.to_array reads raw_data when a tensor has it, else the one typed field of its data type
    (helper.tensor_dtype_to_field), and ignores the rest. The reader took whichever field came last: a DOUBLE with
    raw_data and double_data read double_data's [7, 8] where onnx reads raw's [1, 2]; a FLOAT in int32_data read
    int32_data's varints as bytes (a ValueError at stats time), an INT32 in int64_data read [1, 2] where onnx finds
    no values."""
    both = TensorProto(name="both", data_type=TensorProto.DOUBLE, dims=[2], raw_data=np.array([1.0, 2.0]).tobytes(),
                       double_data=[7.0, 8.0])
    np.testing.assert_array_equal(open_checkpoint(_one_initializer(tmp_path, both)).read("both"), numpy_helper.to_array(both))
    for t in (TensorProto(name="f32", data_type=TensorProto.FLOAT, dims=[3], int32_data=[1, 2, 3]),
              TensorProto(name="i32", data_type=TensorProto.INT32, dims=[2], int64_data=[1, 2]),
              TensorProto(name="i64", data_type=TensorProto.INT64, dims=[2], float_data=[1.0, 2.0])):
        with pytest.raises(ValueError):
            numpy_helper.to_array(t)   # onnx finds no values either
        with pytest.raises(CorruptCheckpointError, match=f"stores no values .*{helper.tensor_dtype_to_field(t.data_type)}"):
            open_checkpoint(_one_initializer(tmp_path, t))

    from ckptstat.formats.onnx_model import T_FIELD_NAMES, T_FIELD_OF  # the table, beside onnx's

    for code in set(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}:
        assert T_FIELD_NAMES[T_FIELD_OF.get(code, 5)] == helper.tensor_dtype_to_field(code), code


def test_string_tensors_count_every_string(tmp_path, cli):
    """A STRING tensor keeps one string_data field per value: its bytes were the last string's alone (3 for
    ['hello', 'a', 'xyz']), and a count that does not match its dims (numpy_helper.to_array cannot reshape it) passed."""
    t = helper.make_tensor("s", TensorProto.STRING, [3], [b"hello", b"a", b"xyz"])
    assert open_checkpoint(_one_initializer(tmp_path, t))["s"].nbytes == sum(len(s) for s in t.string_data)
    short = TensorProto(name="short", data_type=TensorProto.STRING, dims=[3], string_data=[b"a", b"b"])
    with pytest.raises(ValueError):
        numpy_helper.to_array(short)
    rc, out, err = cli("summary", _one_initializer(tmp_path, short))
    assert rc != 0 and "3 strings holds 2" in err and "Traceback" not in err


def _qdq(model_path: str, out: str) -> None:
    """model_path's float weights quantised as onnxruntime.quantization's QDQ format lays them out (`W_quantized`,
    `W_scale`, `W_zero_point` into a DequantizeLinear whose output `W_DequantizeLinear_Output` the consumers read):
    the first Linear weight int8 per output row (axis 0), the second int4 in blocks of 8 inputs (opset 21), biases int8
    per tensor; and the input through a QuantizeLinear / DequantizeLinear pair with calibration's scalar scale."""
    m = onnx.load(model_path)
    g = m.graph
    inits, nodes = [], []
    for k, t in enumerate(list(g.initializer)):
        w = numpy_helper.to_array(t)
        blocked = t.name.endswith("weight") and k > 1
        if t.name.endswith("weight") and not blocked:
            scale = (np.abs(w).max(axis=1) / 127).astype(np.float32)
            q, zp, attrs = np.round(w / scale[:, None]).astype(np.int8), np.zeros(len(scale), np.int8), {"axis": 0}
            zp_t = numpy_helper.from_array(zp, t.name + "_zero_point")
        elif blocked:
            scale = (np.abs(w).reshape(w.shape[0], -1, 8).max(axis=2) / 7).astype(np.float32)
            q = np.clip(np.round(w / np.repeat(scale, 8, axis=1)), -8, 7).astype(np.int8)
            attrs = {"axis": 1, "block_size": 8}
            zp_t = helper.make_tensor(t.name + "_zero_point", TensorProto.INT4, scale.shape, np.zeros(scale.size, np.int8))
        else:
            scale = np.float32(np.abs(w).max() / 127)
            q, attrs = np.round(w / scale).astype(np.int8), {}
            zp_t = numpy_helper.from_array(np.int8(0), t.name + "_zero_point")
        qt = (helper.make_tensor(t.name + "_quantized", TensorProto.INT4, q.shape, q.reshape(-1)) if blocked
              else numpy_helper.from_array(q, t.name + "_quantized"))
        inits += [qt, numpy_helper.from_array(np.asarray(scale), t.name + "_scale"), zp_t]
        nodes.append(helper.make_node("DequantizeLinear", [qt.name, t.name + "_scale", zp_t.name],
                                      [t.name + "_DequantizeLinear_Output"], **attrs))
    x = g.input[0].name
    inits += [numpy_helper.from_array(np.float32(0.02), x + "_scale"), numpy_helper.from_array(np.uint8(128), x + "_zero_point")]
    nodes += [helper.make_node("QuantizeLinear", [x, x + "_scale", x + "_zero_point"], [x + "_QuantizeLinear_Output"]),
              helper.make_node("DequantizeLinear", [x + "_QuantizeLinear_Output", x + "_scale", x + "_zero_point"],
                               [x + "_DequantizeLinear_Output"])]
    rename = {t.name: t.name + "_DequantizeLinear_Output" for t in g.initializer} | {x: x + "_DequantizeLinear_Output"}
    for n in g.node:
        n.input[:] = [rename.get(i, i) for i in n.input]
    nodes += list(g.node)
    del g.node[:], g.initializer[:]
    g.node.extend(nodes)
    g.initializer.extend(inits)
    m.opset_import[0].version = 21
    onnx.checker.check_model(m, full_check=True)
    onnx.save_model(m, out)


def test_qdq_weights_count_as_the_model_s_parameters(tmp_path, cli):
    """A QDQ model (onnxruntime.quantization's layout; per-axis int8, blocked int4) counted its scales as the
    parameters and its quantised weights as buffers: 27 parameters for a model of 280. Now each DequantizeLinear of
    a stored tensor is one weight of that tensor's shape under the torch name, its scale and zero point its pieces,
    and an activation's calibration scale is an input-scale: the total is torch's own count."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 16)).eval()
    src, path = str(tmp_path / "f.onnx"), str(tmp_path / "qdq.onnx")
    torch.onnx.export(model, (torch.zeros(1, 16),), src, dynamo=False, do_constant_folding=False)
    _qdq(src, path)
    rc, out, err = cli("summary", path, "--json")
    report = json.loads(out)
    assert rc == 0 and report["parameters"]["unique"] == sum(p.numel() for p in model.parameters()), err
    rc, out, err = cli("tensors", path, "--json")
    rows = {r["name"]: r for r in json.loads(out)["tensors"]}
    for name, _ in model.named_parameters():
        assert rows[name + "_quantized"]["role"] == "quantized-weight", name
        assert rows[name + "_scale"]["role"] == "scale" and rows[name + "_zero_point"]["role"] == "zero-point"
    assert rows["2.weight_quantized"]["dtype"] == "I4"
    assert {rows[n]["role"] for n in rows if n.startswith(("input", "onnx::"))} == {"input-scale"}
    ckpt = open_checkpoint(path)   # the pieces still read as onnx reads them
    for t in onnx.load(path).graph.initializer:
        np.testing.assert_array_equal(ckpt.read(t.name), numpy_helper.to_array(t).astype(np.float64), err_msg=t.name)


def test_names_that_are_not_utf8_open_as_onnx_loads_them(tmp_path, cli):
    """onnx.proto is proto2: onnx.load takes a name that is not UTF-8 and gives it as bytes. Reading the nodes' inputs
    (for DequantizeLinear) must not refuse a model whose node input is such a name; an initializer named so was
    refused whole with a bare "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff". It is shown escaped; an
    external data location that is not UTF-8 (a path) is refused, in one line."""
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "WWWW")
    graph = helper.make_graph([helper.make_node("Identity", ["WWWW"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], initializer=[w])
    data = helper.make_model(graph).SerializeToString()
    path = str(tmp_path / "m.onnx")
    with open(path, "wb") as f:
        f.write(data.replace(b"WWWW", b"\xffW\xfeW"))
    t = onnx.load(path).graph.initializer[0]
    assert t.name == b"\xffW\xfeW" and onnx.load(path).graph.node[0].input[0] == b"\xffW\xfeW"   # onnx's own reading
    ckpt = open_checkpoint(path)
    assert list(ckpt.tensors) == [t.name.decode("utf-8", "backslashreplace")]
    np.testing.assert_array_equal(ckpt.read(list(ckpt.tensors)[0]), numpy_helper.to_array(t))
    ext = _external_model(tmp_path, 0, (4,), location="dataX.bin")
    with open(ext, "rb") as f:
        data = f.read()
    with open(ext, "wb") as f:
        f.write(data.replace(b"dataX.bin", b"data\xff.bin"))
    rc, out, err = cli("summary", ext)
    assert rc == 1 and "external_data entry at byte" in err and "not UTF-8" in err and len(err.splitlines()) == 1


def test_qoperator_weights_count_as_the_model_s_parameters(tmp_path, cli):
    """onnxruntime's QOperator and dynamic layouts keep a weight as the integer operand of the operator that uses it:
    an embedding table Gathered then DequantizeLinear'd (quantize_dynamic's), a MatMulInteger's B with its
    `W_scale` applied by a Mul after (quantize_dynamic's), a QLinearMatMul's b with its scale and zero point, an int32
    bias added by QLinearAdd. Each was a buffer (integer) and its scale a parameter; now each is one weight, and the
    total is torch's own count (before: 16 of 440). Built with onnx.helper from the torch model's parameters, checked
    by onnx.checker full_check."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 16), torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 16))
    p = {k: v.detach().numpy() for k, v in model.named_parameters()}
    f32, one = TensorProto.FLOAT, np.float32(0.05)
    inits = [numpy_helper.from_array(np.round(p["0.weight"] / one).astype(np.uint8), "0.weight_quantized"),
             numpy_helper.from_array(np.round(p["1.weight"].T / one).astype(np.int8), "1.weight_quantized"),
             numpy_helper.from_array(np.round(p["3.weight"].T / one).astype(np.int8), "3.weight_quantized"),
             numpy_helper.from_array(np.round(p["3.bias"] / one).astype(np.int32), "3.bias_quantized"),
             numpy_helper.from_array(p["1.bias"], "1.bias")]
    for name in ("0.weight", "1.weight", "3.weight", "3.bias", "a", "y", "x", "z"):   # scalar scales, zero points
        zp = np.int32(0) if name == "3.bias" else np.uint8(0) if name in ("0.weight", "a", "y", "x", "z") else np.int8(0)
        inits += [numpy_helper.from_array(one, name + "_scale"), numpy_helper.from_array(zp, name + "_zero_point")]
    nodes = [helper.make_node("Gather", ["0.weight_quantized", "ids"], ["g"]),
             helper.make_node("DequantizeLinear", ["g", "0.weight_scale", "0.weight_zero_point"], ["e"]),
             helper.make_node("QuantizeLinear", ["e", "x_scale", "x_zero_point"], ["eq"]),
             helper.make_node("MatMulInteger", ["eq", "1.weight_quantized", "x_zero_point", "1.weight_zero_point"], ["m"]),
             helper.make_node("Cast", ["m"], ["mf"], to=f32),
             helper.make_node("Mul", ["mf", "1.weight_scale"], ["ms"]),
             helper.make_node("Add", ["ms", "1.bias"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "a_scale", "a_zero_point"], ["rq"]),
             helper.make_node("QLinearMatMul", ["rq", "a_scale", "a_zero_point", "3.weight_quantized", "3.weight_scale",
                                                "3.weight_zero_point", "y_scale", "y_zero_point"], ["yq"]),
             helper.make_node("QLinearAdd", ["yq", "y_scale", "y_zero_point", "3.bias_quantized", "3.bias_scale",
                                             "3.bias_zero_point", "z_scale", "z_zero_point"], ["zq"], domain="com.microsoft"),
             helper.make_node("DequantizeLinear", ["zq", "z_scale", "z_zero_point"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])],
                              [helper.make_tensor_value_info("out", f32, [1, 4, 16])], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    onnx.checker.check_model(m)
    path = str(tmp_path / "qop.onnx")
    onnx.save_model(m, path)
    rc, out, err = cli("summary", path, "--json")
    assert rc == 0 and json.loads(out)["parameters"]["unique"] == sum(v.size for v in p.values()), err
    rc, out, err = cli("tensors", path, "--json")
    rows = {r["name"]: r for r in json.loads(out)["tensors"]}
    assert {n for n in rows if rows[n]["role"] == "quantized-weight"} == {n + "_quantized" for n in p if n != "1.bias"}
    assert {rows[n + "_scale"]["role"] for n in ("a", "y", "x", "z")} == {"input-scale"}
    assert rows["1.weight_scale"]["role"] == "scale"   # MatMulInteger's, by onnxruntime's name
