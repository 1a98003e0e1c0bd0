"""ggml block-type decoders (ckptstat/core/quants.py) against gguf-py's `dequantize`: on random blocks of
every type (any bytes: NaN and infinite scales too), on tensors llama.cpp's own `llama-quantize` wrote
(fixtures/make_llama_quantize.py), and element ranges that start and end inside blocks."""
from __future__ import annotations

import json
import subprocess
import sys

import gguf
import numpy as np
import pytest
from conftest import fixture, fixture_script
from gguf.quants import dequantize

from ckptstat import open_checkpoint
from ckptstat.core import dtypes
from ckptstat.core.quants import CODEBOOKS, QUANTS

GRID_IQ = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]   # their grids: core/iq_grids.json


def expected() -> dict:
    with open(fixture("conversions", "quantized", "expected.json")) as f:
        return json.load(f)


def files() -> list[str]:
    return sorted(f for m in expected()["models"].values() for f in m)


def test_every_decoded_block_type_is_a_gguf_type():
    for name in QUANTS:
        qt = gguf.GGMLQuantizationType[name]
        assert (dtypes.get(name).block, dtypes.get(name).block_bytes) == gguf.GGML_QUANT_SIZES[qt]
        assert dtypes.can_decode(name)


@pytest.mark.parametrize("name", sorted(QUANTS))
def test_random_blocks_equal_gguf_py(name):
    d = dtypes.get(name)
    raw = np.random.default_rng(sorted(QUANTS).index(name)).integers(0, 256, (64, d.block_bytes), dtype=np.uint8)
    with np.errstate(invalid="ignore", over="ignore"):
        want = dequantize(raw.reshape(-1), gguf.GGMLQuantizationType[name]).reshape(-1)
        got = dtypes.decode(raw.tobytes(), name, 64 * d.block)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)   # NaN facing NaN is equal
    finite = np.isfinite(want)
    assert np.array_equal(got[finite].view(np.uint32), want[finite].view(np.uint32))   # bit for bit


@pytest.mark.parametrize("name", GRID_IQ)
def test_grid_i_quant_blocks_equal_gguf_py(name):
    """The grid i-quants (a 4- or 8-element point of ggml's grids a code, signs from ksigns or bits, 3- or 4-bit
    sub-block scales) decode as gguf-py's `dequantize` does, bit for bit, for any bytes: 4096 random blocks, whose
    f16 scales include NaN, and two with d = +inf and -inf (NaN where gguf-py says NaN, the same bits elsewhere,
    inf included). They said "not decoded"."""
    assert name in CODEBOOKS and name not in QUANTS and dtypes.can_decode(name)   # uneven grids: no rounding bound
    d = dtypes.get(name)
    assert (d.block, d.block_bytes) == gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]]
    raw = np.random.default_rng(GRID_IQ.index(name)).integers(0, 256, (4096, d.block_bytes), dtype=np.uint8)
    if name == "IQ1_M":   # d's four nibbles in the top nibbles of the last four u16: +inf, -inf
        for row, top in ((0, (0x0, 0x0, 0xC, 0x7)), (1, (0x0, 0x0, 0xC, 0xF))):
            raw[row, 49:56:2] = (raw[row, 49:56:2] & 0x0F) | (np.array(top, dtype=np.uint8) << 4)
    else:
        raw[:2, :2] = np.array([[0x00, 0x7C], [0x00, 0xFC]], dtype=np.uint8)   # d = +inf, -inf
    with np.errstate(invalid="ignore", over="ignore"):
        want = dequantize(raw.reshape(-1), gguf.GGMLQuantizationType[name]).astype(np.float32).reshape(-1)
        got = dtypes.decode(raw.tobytes(), name, 4096 * d.block)
    assert got.dtype == np.float32 and got.shape == want.shape
    nan = np.isnan(want)
    assert nan.any() and np.isinf(want).any() and np.array_equal(np.isnan(got), nan)   # f16 NaN and inf scales
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def test_iq_grid_table_is_what_the_installed_gguf_makes():
    """core/iq_grids.json (the grids and ksigns the i-quants index) is what fixtures/make_iq_grids.py writes from the
    installed gguf-py, and says which gguf wrote it: a gguf upgrade that changes a table fails here until the script
    is run again."""
    import importlib.metadata

    path = fixture("..", "ckptstat", "core", "iq_grids.json")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert json.loads(text)["gguf"] == importlib.metadata.version("gguf")
    assert text == fixture_script("make_iq_grids").text()


@pytest.mark.parametrize("name", sorted(QUANTS) + GRID_IQ)
def test_short_buffers_are_refused(name):
    d = dtypes.get(name)
    raw = bytes(2 * d.block_bytes - 1)
    with pytest.raises(ValueError, match=f"{name}: need {2 * d.block_bytes} little-endian bytes, got {len(raw)}"):
        dtypes.decode(raw, name, d.block + 1)   # the second block is cut short
    assert dtypes.decode(raw, name, d.block).shape == (d.block,)   # one whole block is there
    with pytest.raises(ValueError, match="little-endian"):
        dtypes.decode(bytes(d.block_bytes), name, d.block, byteorder="big")


@pytest.mark.parametrize("file", files())
def test_llama_quantize_tensors_equal_gguf_py(file):
    """Every tensor of a file llama-quantize wrote, whole and by ranges that straddle blocks, bit for bit
    gguf-py's dequantize; the type ckptstat reports is the file's own per-tensor type."""
    path = fixture("conversions", "quantized", file)
    reader = gguf.GGUFReader(path)
    ckpt = open_checkpoint(path)
    types = set()
    for t in reader.tensors:
        want = dequantize(t.data, t.tensor_type).reshape(-1)
        info = ckpt[t.name]
        assert info.dtype == t.tensor_type.name
        types.add(info.dtype)
        whole = ckpt.read(t.name).reshape(-1)
        assert np.array_equal(whole.view(np.uint32), want.astype(np.float32).view(np.uint32)), t.name
        block = info.dt.block
        for start, count in [(1, block), (block - 3, 7), (block + 5, 2 * block + 1), (info.numel - block - 1, block)]:
            if 0 <= start and count > 0 and start + count <= info.numel:
                assert np.array_equal(ckpt._read(info, start, count), want[start:start + count]), (t.name, start)
    assert types & set(QUANTS), types   # the file holds block-quantised tensors


def _ternary_gguf(path, values: np.ndarray, qtype) -> np.ndarray:
    """A GGUF whose one tensor (llama's ffn_up of layer 0) is `values` quantised by gguf-py to `qtype`; returns the
    values gguf-py dequantises it to."""
    from gguf import quants

    w = gguf.GGUFWriter(str(path), "llama")
    q = quants.quantize(values, qtype)
    w.add_tensor("blk.0.ffn_up.weight", q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dequantize(gguf.GGUFReader(str(path)).tensors[0].data, qtype).reshape(values.shape)


@pytest.mark.parametrize("qtype", ["TQ1_0", "TQ2_0"])
def test_ternary_tensors_are_compared_and_counted(qtype, tmp_path, cli):
    """llama.cpp's ternary types (BitNet b1.58, TriLM): `diff` passed two files whose TQ tensors differ as 'no
    differences', exit 0 (their values not decoded, only said so). Now decoded as gguf-py dequantises them: a faithful
    quantisation of a float model is `converted`, an element moved is a difference, two different files differ, and
    stats' moments are numpy's over gguf-py's values."""
    from safetensors.numpy import save_file

    qt = gguf.GGMLQuantizationType[qtype]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    save_file({"model.layers.0.mlp.up_proj.weight": x}, str(tmp_path / "hf.safetensors"))
    a = _ternary_gguf(tmp_path / "a.gguf", x, qt)
    moved = x.copy()
    moved[3, 5] += 3.0
    _ternary_gguf(tmp_path / "moved.gguf", moved, qt)
    b = _ternary_gguf(tmp_path / "b.gguf", rng.standard_normal((64, 256)).astype(np.float32), qt)

    rc, out, _ = cli("diff", str(tmp_path / "hf.safetensors"), str(tmp_path / "a.gguf"), "--json")
    row = json.loads(out)["tensors"][0]
    assert rc == 0 and row["status"] == "converted" and row["rounded_to"] == qtype
    assert row["max_abs"] == np.max(np.abs(x.astype(np.float64) - a))
    rc, out, _ = cli("diff", str(tmp_path / "hf.safetensors"), str(tmp_path / "moved.gguf"), "--json")
    assert rc == 1 and json.loads(out)["tensors"][0]["status"] == "dtype"
    rc, out, _ = cli("diff", str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf"), "--json")
    r = json.loads(out)
    assert rc == 1 and r["same"] is False
    row = r["tensors"][0]
    assert row["status"] == "values" and row["max_abs"] == np.max(np.abs(a.astype(np.float64) - b))
    rc, out, _ = cli("stats", str(tmp_path / "a.gguf"), "--json", "--no-progress")
    t = json.loads(out)["tensors"][0]
    assert rc == 0 and t["count"] == a.size
    np.testing.assert_allclose([t["mean"], t["std"]], [a.astype(np.float64).mean(), a.astype(np.float64).std()],
                               rtol=1e-12)


def _q1_0_ggml() -> dict:
    """Q1_0 blocks and llama.cpp's own decode of them (fixtures/make_q1_0.py: ggml-quants.c compiled and called)."""
    with np.load(fixture("gguf", "q1_0_ggml.npz")) as z:
        return {k: z[k] for k in z.files}


def test_q1_0_blocks_equal_llama_cpp():
    """Q1_0 (llama.cpp's 1-bit type: a sign a bit and one f16 scale per 128) decodes as ggml's dequantize_row_q1_0,
    bit for bit (-0.0 where d is 0 and the bit clear, NaN and inf scales included): its values were "not decoded"
    (gguf-py 0.19 has the type but no dequantize for it)."""
    ggml = _q1_0_ggml()
    blocks, want = ggml["blocks"], ggml["values"].reshape(-1)
    assert "Q1_0" in CODEBOOKS and dtypes.can_decode("Q1_0")   # codes never 0: no rounding bound
    d = dtypes.get("Q1_0")
    assert (d.block, d.block_bytes) == gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q1_0] == (128, blocks.shape[1])
    got = dtypes.decode(blocks.tobytes(), "Q1_0", want.size)
    nan = np.isnan(want)
    assert nan.any() and np.isinf(want).any() and np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def test_q1_0_tensors_are_compared_and_counted(tmp_path, cli):
    """A Q1_0 GGUF (blocks ggml's reference quantizer wrote): `stats` reads ggml's values, and `diff` of two files
    differing in one Q1_0 block differs (it said no differences, exit 0, the tensor not compared)."""
    ggml = _q1_0_ggml()
    quantized, rows = ggml["quantized"], ggml["rows"]
    want = ggml["values"][: len(quantized)]

    def write(path, blocks):
        w = gguf.GGUFWriter(str(path), "llama")
        w.add_tensor("blk.0.ffn_up.weight", blocks, raw_dtype=gguf.GGMLQuantizationType.Q1_0)   # (n, 18) bytes: (n, 128)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    write(tmp_path / "a.gguf", quantized)
    flipped = quantized.copy()
    flipped[0, 2] ^= 1   # element 0 of row 0 changes sign
    write(tmp_path / "b.gguf", flipped)
    rc, out, _ = cli("stats", str(tmp_path / "a.gguf"), "--json", "--no-progress")
    t = json.loads(out)["tensors"][0]
    w64 = want.astype(np.float64)
    assert rc == 0 and t["count"] == rows.size and (t["min"], t["max"]) == (w64.min(), w64.max())
    np.testing.assert_allclose([t["mean"], t["std"]], [w64.mean(), w64.std()], rtol=1e-12)
    rc, out, _ = cli("diff", str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf"), "--json")
    row = json.loads(out)["tensors"][0]
    assert rc == 1 and row["status"] == "values" and row["max_abs"] == 2 * abs(float(want[0, 0]))


def test_stats_of_blocks_with_infinite_scales_print_no_warning(tmp_path):
    """The bug: an f16 d of +-inf (or a signalling NaN) times a sub-block scale of 0, inside the K- and i-quant decoders
    (Q2_K..Q5_K, IQ3_XXS, IQ3_S), made numpy print 'RuntimeWarning: invalid value encountered in multiply' on stderr of
    `ckptstat stats` (dequantize muted only its last product). gguf-py's dequantize gives NaN there too: now counted as
    NaN, quietly. A GGUF gguf-py's GGUFWriter wrote with random blocks of every decoded type gguf-py dequantises (not
    Q1_0: test_q1_0_tensors_are_compared_and_counted), whose random f16 scales hold infinities and signalling NaNs."""
    path = tmp_path / "random.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    names = [n for n in sorted(QUANTS) + sorted(CODEBOOKS) if n != "Q1_0"]
    for i, name in enumerate(names):
        d = dtypes.get(name)
        raw = np.random.default_rng(i).integers(0, 256, (256, d.block_bytes), dtype=np.uint8)
        w.add_tensor(f"blk.{i}.ffn_up.weight", raw, raw_dtype=gguf.GGMLQuantizationType[name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = subprocess.run([sys.executable, "-m", "ckptstat", "stats", str(path), "--json", "--no-progress"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "", r.stderr[-2000:]
    rows = {t["name"]: t for t in json.loads(r.stdout)["tensors"]}
    for t in gguf.GGUFReader(str(path)).tensors:
        with np.errstate(invalid="ignore", over="ignore"):
            want = dequantize(t.data, t.tensor_type).reshape(-1).astype(np.float64)
        row = rows[t.name]
        assert (row["count"], row["nan"], row["posinf"], row["neginf"]) == (
            want.size, int(np.isnan(want).sum()), int((want == np.inf).sum()), int((want == -np.inf).sum())), t.name
    assert sum(rows[t]["nan"] for t in rows) > 0
