"""The GGUF reader on files written by gguf-py (fixtures/make_gguf.py), checked against what gguf-py's
own reader and `dequantize` recorded in fixtures/expected_gguf.json; and hostile bytes built with
struct.pack, one per validation rule, each ending in one CorruptCheckpointError naming the file."""
from __future__ import annotations

import hashlib
import json
import random
import struct

import numpy as np
import pytest
from conftest import fixture

from ckptstat import open_checkpoint, summarize
from ckptstat.census.ties import find_ties
from ckptstat.errors import CheckpointError, CkptstatError, CorruptCheckpointError
from ckptstat.formats import gguf as gg

FILES = ["llama-tiny-q.gguf", "llama-tiny-tied.gguf"]


@pytest.fixture(scope="module")
def expected() -> dict:
    with open(fixture("expected_gguf.json")) as f:
        return json.load(f)


def path_of(name: str) -> str:
    return fixture("gguf", name)


# ------------------------------------------------------------------------------ headers
@pytest.mark.parametrize("name", FILES)
def test_tensor_infos_match_gguf_py_reader(name, expected):
    e = expected[name]
    ckpt = open_checkpoint(path_of(name))
    assert ckpt.format == "gguf" and list(ckpt.tensors) == e["order"]
    for t in ckpt:
        et = e["tensors"][t.name]
        assert t.dtype == et["ggml_type"]
        assert list(t.shape) == et["numpy_shape"] == et["ggml_shape"][::-1]   # ne[0] fastest: reversed
        assert t.numel == et["n_elements"]
        assert t.nbytes == t.byte_size == et["n_bytes"]
        assert t.offset == et["file_offset"]
        assert (t.offset - e["data_offset"]) % e["alignment"] == 0


@pytest.mark.parametrize("name", FILES)
def test_counts_buckets_dtypes(name, expected):
    e = expected[name]["tensors"]
    r = summarize(open_checkpoint(path_of(name)))
    numel = {n: t["n_elements"] for n, t in e.items()}
    # Parameter count: every element whatever the quantisation; rope_freqs is a buffer, counted apart.
    assert r["parameters"]["unique"] == expected[name]["parameters"] - numel["rope_freqs.weight"]
    assert [(n["role"], n["names"]) for n in r["non_parameters"]] == [("buffer", ["rope_freqs.weight"])]
    buckets = {b["bucket"]: b["params"] for b in r["buckets"]}
    blocks = sum(v for n, v in numel.items() if n.startswith("blk.")) + numel["output_norm.weight"]
    want = {"embedding": numel["token_embd.weight"], "encoder": blocks}
    if "output.weight" in numel:
        want["cls"] = numel["output.weight"]
    assert buckets == want
    assert [(row["bucket"], row["layer"]) for row in r["layers"]] == [("encoder", 0), ("encoder", 1)]
    by_dtype: dict[str, list[int]] = {}
    for n, t in e.items():
        if n != "rope_freqs.weight":
            row = by_dtype.setdefault(t["ggml_type"], [0, 0])
            row[0] += t["n_elements"]
            row[1] += t["n_bytes"]
    assert {d["dtype"]: [d["params"], d["bytes"]] for d in r["dtypes"]} == by_dtype
    assert r["storage"]["file_bytes"] == expected[name]["file_bytes"]
    assert r["architecture"] == {"family": "llama", "source": "gguf general.architecture", "model_type": "llama",
                                 "architectures": []}


def test_metadata_every_value_type(expected):
    meta = open_checkpoint(path_of("llama-tiny-q.gguf")).metadata
    fields = expected["llama-tiny-q.gguf"]["fields"]
    assert set(meta) == set(fields)
    for key, f in fields.items():
        if f["type"] == "array":
            if f["count"] > gg.SHOWN_ARRAY_ITEMS:
                short = {"STRING": "str", "FLOAT32": "f32", "INT32": "i32"}[f["elem"]]
                assert meta[key] == f"<array of {f['count']} {short}>", key
        elif f["type"] == "BOOL":
            assert meta[key] == ("true" if f["value"] else "false")
        elif f["type"] in ("FLOAT32", "FLOAT64"):
            assert float(meta[key]) == pytest.approx(f["value"], rel=1e-7), key
        else:
            assert meta[key] == str(f["value"]), key
    assert meta["tokenizer.ggml.tokens"] == "<array of 40 str>"   # summarised, never dumped
    assert meta["ckptstat.short_array"] == "[16, 24, 24, 0]"
    assert meta["ckptstat.f32"] == "0.1" and meta["llama.attention.layer_norm_rms_epsilon"] == "1e-05"
    assert meta["ckptstat.str"] == "héllo" and meta["ckptstat.u64"] == str(2**63 + 5)
    assert "general.alignment" not in meta
    assert open_checkpoint(path_of("llama-tiny-tied.gguf")).metadata["general.alignment"] == "64"


# ------------------------------------------------------------------------------- values
def sha(values: np.ndarray) -> str:
    return hashlib.sha256(np.asarray(values, dtype="<f4").tobytes()).hexdigest()


@pytest.mark.parametrize("name", FILES)
def test_values_equal_gguf_py_dequantize(name, expected):
    ckpt = open_checkpoint(path_of(name))
    for t in ckpt:
        et = expected[name]["tensors"][t.name]
        v = ckpt.read(t.name)
        assert v.shape == t.shape
        assert v.reshape(-1)[:8].astype(np.float32).tolist() == et["first"], t.name
        assert sha(v) == et["sha256_f32"], t.name   # bit-identical to gguf-py's dequantize


@pytest.mark.parametrize("chunk_bytes", [1, 50, 100, 777, 4096])
def test_chunks_equal_whole(chunk_bytes):
    ckpt = open_checkpoint(path_of("llama-tiny-q.gguf"))
    for t in ckpt:
        whole = ckpt.read(t.name).reshape(-1)
        chunks = list(ckpt.iter_chunks(t.name, chunk_bytes))
        assert np.array_equal(np.concatenate(chunks), whole), (t.name, chunk_bytes)


def test_ranges_straddling_blocks():
    """A range that starts and ends inside blocks decodes its covering blocks and cuts them."""
    ckpt = open_checkpoint(path_of("llama-tiny-q.gguf"))
    for t in ckpt:
        whole = ckpt.read(t.name).reshape(-1)
        for start, count in [(0, 1), (5, 30), (31, 2), (33, 64), (t.numel - 7, 7), (17, t.numel - 17)]:
            if count > 0 and start + count <= t.numel:
                assert np.array_equal(ckpt._read(t, start, count), whole[start:start + count]), (t.name, start)


# --------------------------------------------------------------------------------- ties
def test_missing_output_weight_is_tied_to_token_embd():
    ties = find_ties(open_checkpoint(path_of("llama-tiny-tied.gguf")))
    assert [(t.alias, t.target, t.evidence, t.status) for t in ties] == [
        ("output.weight", "token_embd.weight", "structural", "absent from file")]
    assert find_ties(open_checkpoint(path_of("llama-tiny-q.gguf"))) == []


def test_metadata_values_are_not_tie_evidence(tmp_path):
    """A GGUF key whose value names a tensor is not safetensors' dropped -> kept record."""
    p = tmp_path / "m.gguf"
    p.write_bytes(gguf_bytes(kvs=[kv_str("lm_head.weight", "a")]))
    assert find_ties(open_checkpoint(str(p))) == []


# ---------------------------------------------------------------------------------- CLI
def test_cli_json(cli, expected):
    path = path_of("llama-tiny-tied.gguf")
    rc, out, err = cli("summary", path, "--json")
    r = json.loads(out)
    assert rc == 0 and err == "" and r["format"] == "gguf"
    assert r["ties"]["count"] == 1 and r["ties"]["pairs"][0]["alias"] == "output.weight"
    assert r["metadata"]["tokenizer.ggml.tokens"] == "<array of 40 str>"
    rc, out, _ = cli("tensors", path, "--json")
    rows = {row["name"]: row for row in json.loads(out)["tensors"]}
    assert rc == 0 and rows["blk.1.attn_q.weight"]["dtype"] == "Q4_0"
    assert rows["blk.1.attn_q.weight"]["bytes"] == expected["llama-tiny-tied.gguf"]["tensors"]["blk.1.attn_q.weight"]["n_bytes"]
    assert rows["rope_freqs.weight"]["role"] == "buffer" and rows["blk.0.ffn_up.weight"]["layer"] == 0
    rc, out, _ = cli("ties", path, "--json")
    t = json.loads(out)
    assert rc == 0 and [(x["alias"], x["evidence"]) for x in t["ties"]] == [("output.weight", "structural")]
    counts = {row["convention"]: row["params"] for row in t["counting"]["rows"]}
    n = expected["llama-tiny-tied.gguf"]["tensors"]["token_embd.weight"]["n_elements"]
    assert counts["every name counted"] == counts["unique parameters"] + n


def test_cli_human_and_folder(cli, tmp_path):
    rc, out, err = cli(path_of("llama-tiny-q.gguf"))
    assert rc == 0 and err == "" and "gguf" in out and "Q4_0" in out
    assert max(len(line) for line in out.splitlines() if path_of("llama-tiny-q.gguf") not in line) <= 80  # but the path
    (tmp_path / "m.gguf").write_bytes(open(path_of("llama-tiny-q.gguf"), "rb").read())
    assert cli(str(tmp_path), "--json")[0] == 0   # a folder holding one .gguf file


# -------------------------------------------------------------------- hostile bytes
def gstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    return gstr(key) + struct.pack("<I", vtype) + payload


def kv_str(key: str, value: str) -> bytes:
    return kv(key, 8, gstr(value))


def ti(name: str | bytes, dims: tuple[int, ...], ggml_type: int = 0, offset: int = 0, n_dims: int | None = None) -> bytes:
    n = len(dims) if n_dims is None else n_dims
    return gstr(name) + struct.pack("<I", n) + struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", ggml_type, offset)


GOOD_TIS = [ti("a", (4,), 0, 0), ti("b", (2,), 0, 32)]
GOOD_DATA = b"\x00" * 16 + b"\x00" * 16 + b"\x00" * 8


def gguf_bytes(kvs=(), tis=GOOD_TIS, data=GOOD_DATA, version=3, n_tensors=None, n_kv=None, align=32) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, len(tis) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(tis)
    return head + b"\x00" * (-len(head) % align) + data


def test_hand_built_file_opens(tmp_path):
    p = tmp_path / "ok.gguf"
    p.write_bytes(gguf_bytes(kvs=[kv("x", 4, struct.pack("<I", 7)), kv_str("general.architecture", "gpt2")]))
    ckpt = open_checkpoint(str(p))
    assert {t.name: t.shape for t in ckpt} == {"a": (4,), "b": (2,)} and ckpt.metadata["x"] == "7"
    assert summarize(ckpt)["architecture"]["family"] == "gpt2"
    assert ckpt.read("b").tolist() == [0.0, 0.0]


Q8_1 = 9  # a block type ckptstat does not decode (llama.cpp's dot-product intermediate: 32 elements in 40 bytes)


HOSTILE = {
    "too short": (b"GGUF\x03\x00\x00\x00", "too short"),
    "version 1": (gguf_bytes(version=1), "version 1 is not supported"),
    "version 99": (gguf_bytes(version=99), "version 99"),
    "big-endian": (gguf_bytes(version=0x03000000), "big-endian"),
    "kv_count huge": (gguf_bytes(n_kv=2**63), "kv_count"),
    "tensor_count huge": (gguf_bytes(n_tensors=2**64 - 1), "tensor_count"),
    "tensor_count a bit off": (gguf_bytes(n_tensors=3, data=b"\xff" * 20, align=1), "name of tensor 2"),
    "key length huge": (gguf_bytes(kvs=[struct.pack("<Q", 2**62) + b"k" + struct.pack("<I", 4) + b"\0" * 4]), "key 0"),
    "key not utf-8": (gguf_bytes(kvs=[kv(b"k\xff", 4, b"\0" * 4)]), "not valid UTF-8"),
    "duplicate key": (gguf_bytes(kvs=[kv("k", 4, b"\0" * 4), kv("k", 4, b"\0" * 4)]), "duplicate key"),
    "unknown value type": (gguf_bytes(kvs=[kv("k", 13, b"\0" * 4)]), "unknown value type 13"),
    "string value length huge": (gguf_bytes(kvs=[kv("k", 8, struct.pack("<Q", 2**40))]), "value of 'k'"),
    "array count huge": (gguf_bytes(kvs=[kv("k", 9, struct.pack("<IQ", 4, 2**61))]), "claims 2305843009213693952 u32"),
    "string array count huge": (gguf_bytes(kvs=[kv("k", 9, struct.pack("<IQ", 8, 2**40))]), "claims"),
    "string array item huge": (gguf_bytes(kvs=[kv("k", 9, struct.pack("<IQQ", 8, 1, 2**50))]), "array 'k' item 0"),
    "nested array": (gguf_bytes(kvs=[kv("k", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 4, 0))]), "arrays of arrays"),
    "array elem unknown": (gguf_bytes(kvs=[kv("k", 9, struct.pack("<IQ", 77, 1))]), "unknown element type 77"),
    "alignment not u32": (gguf_bytes(kvs=[kv("general.alignment", 10, struct.pack("<Q", 32))]), "must be a u32"),
    "alignment not power of two": (gguf_bytes(kvs=[kv("general.alignment", 4, struct.pack("<I", 48))], align=48),
                                   "not a power of two"),
    "alignment zero": (gguf_bytes(kvs=[kv("general.alignment", 4, struct.pack("<I", 0))]), "not a power of two"),
    "n_dims 9": (gguf_bytes(tis=[ti("a", (1, 1, 1, 1, 1, 1, 1, 1, 4))]), "n_dims 9 exceeds 8"),
    "n_dims huge": (gguf_bytes(tis=[ti("a", (), n_dims=2**31)]), "n_dims"),
    "dim past int64": (gguf_bytes(tis=[ti("a", (2**63,))]), "overflow int64"),
    "dims product past int64": (gguf_bytes(tis=[ti("a", (2**40, 2**40))]), "overflow int64"),
    "unknown ggml type": (gguf_bytes(tis=[ti("a", (4,), 31)]), "unknown ggml type 31"),
    "row not whole blocks": (gguf_bytes(tis=[ti("a", (16, 2), 8)]), "not a multiple of the Q8_0 block size 32"),
    "duplicate tensor": (gguf_bytes(tis=[ti("a", (4,)), ti("a", (2,), 0, 32)]), "duplicate tensor name"),
    "name not utf-8": (gguf_bytes(tis=[ti(b"\xc3(", (4,))]), "not valid UTF-8"),
    "offset not aligned": (gguf_bytes(tis=[ti("a", (4,)), ti("b", (2,), 0, 16)]), "not a multiple of the alignment"),
    "tensor past end": (gguf_bytes(tis=[ti("a", (4,)), ti("b", (2,), 0, 64)]), "run past the end"),
    "huge tensor": (gguf_bytes(tis=[ti("a", (2**31, 2**31))]), "run past the end"),
    "overlap": (gguf_bytes(tis=[ti("a", (16,)), ti("b", (2,), 0, 32)], data=b"\0" * 64), "overlaps 'a'"),
    "truncated data": (gguf_bytes()[:-4], "run past the end"),
    "data section past end": (gguf_bytes(data=b"", align=1), "data section"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile(tmp_path, case):
    raw, fragment = HOSTILE[case]
    p = tmp_path / "bad.gguf"
    p.write_bytes(raw)
    with pytest.raises(CorruptCheckpointError) as info:
        open_checkpoint(str(p))
    msg = str(info.value)
    assert msg.startswith(str(p) + ": ") and "\n" not in msg
    assert fragment in msg, msg


def test_hostile_cli_one_line(cli, tmp_path):
    p = tmp_path / "bad.gguf"
    p.write_bytes(HOSTILE["array count huge"][0])
    rc, out, err = cli(str(p))
    assert rc == 1 and out == "" and err.count("\n") == 1 and "Traceback" not in err and str(p) in err


def test_undecoded_block_type_is_a_clear_error(tmp_path):
    """Headers of a Q8_1 tensor are read (count, bytes); its values are refused in one line."""
    p = tmp_path / "k.gguf"
    p.write_bytes(gguf_bytes(tis=[ti("blk.0.attn_q.weight", (256, 2), Q8_1)], data=b"\0" * 640))
    ckpt = open_checkpoint(str(p))
    t = ckpt["blk.0.attn_q.weight"]
    assert (t.dtype, t.shape, t.numel, t.nbytes) == ("Q8_1", (2, 256), 512, 640)
    assert summarize(ckpt)["parameters"]["unique"] == 512
    with pytest.raises(CheckpointError) as info:
        ckpt.read(t.name)
    assert not isinstance(info.value, CorruptCheckpointError)
    assert str(info.value) == f"{p}: tensor 'blk.0.attn_q.weight': values of Q8_1 tensors are not decoded yet"
    # stats reads what it can and lists the rest, with the reason.
    from ckptstat.analysis.stats import select

    items, skipped = select(ckpt)
    assert items == [] and skipped == [{"name": t.name, "reason": "values of Q8_1 tensors are not decoded yet"}]


@pytest.mark.parametrize("name", FILES)
def test_analytic_model_from_gguf_metadata(name, cli):
    """No config.json: the GGUF metadata (block_count, embedding_length, ...) stands in for it, and the
    architecture's predicted parameter count equals the file's."""
    r = summarize(path_of(name))
    assert r["analytic"]["agree"] is True and r["analytic"]["predicted_params"] == r["parameters"]["unique"]
    rc, out, _ = cli("flops", path_of(name), "--json")
    f = json.loads(out)
    assert rc == 0 and f["parameters"]["agree"] is True
    assert f["runs"][0]["seq"] == 128  # rotary: context_length is no hard limit, so the default 128
    rc, out, _ = cli("memory", path_of(name), "--json")
    assert rc == 0 and json.loads(out)["parameters"]["agree"] is True


def test_mutations_raise_only_our_errors(tmp_path):
    """Truncations and byte flips of a real file: open, summarize and read every tensor, or raise
    a CkptstatError (never a traceback from struct, numpy or mmap)."""
    base = open(path_of("llama-tiny-tied.gguf"), "rb").read()
    rng = random.Random(0)
    p = tmp_path / "m.gguf"
    cases = [base[:n] for n in sorted({rng.randrange(len(base)) for _ in range(40)} | {4, 8, 23, 24, 40})]
    for _ in range(150):
        b = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(min(len(b), 3000))   # mostly the header
            b[i] = rng.randrange(256) if rng.random() < 0.7 else 0xFF
        cases.append(bytes(b))
    for raw in cases:
        p.write_bytes(raw)
        try:
            ckpt = open_checkpoint(str(p))
            summarize(ckpt)
            for t in ckpt:
                ckpt.read(t.name)
        except CkptstatError:
            pass


@pytest.mark.parametrize("arch", ["clip", "rwkv7"])
def test_architecture_without_a_config_says_so(cli, tmp_path, arch):
    """A GGUF whose general.architecture no family reads a config from (llama.cpp's vision projector `clip`, an
    architecture ckptstat has no family for): flops names the architecture in one line; the summary still counts."""
    gguf = pytest.importorskip("gguf")
    path = str(tmp_path / "m.gguf")
    w = gguf.GGUFWriter(path, arch)
    arrays = {"v.blk.0.attn_q.weight": np.ones((4, 4), np.float32), "mm.0.weight": np.ones((8, 4), np.float32)}
    for name, a in arrays.items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    code, out, err = cli("flops", path)
    assert code == 2 and not out and err.count("\n") == 1 and f"general.architecture {arch!r}" in err
    assert summarize(path)["parameters"]["unique"] == sum(a.size for a in arrays.values())


def test_stats_says_which_types_it_left_undecoded(tmp_path, cli):
    """A file of types whose values are not decoded (Q8_1, Q8_K: zero blocks, a valid encoding) said `2 skipped
    (aliases, buffers, strings: see --json)`: now the count per reason, each type named as gguf-py's reader names it."""
    gguf = pytest.importorskip("gguf")
    path = str(tmp_path / "t.gguf")
    w = gguf.GGUFWriter(path, "llama")
    for q in (gguf.GGMLQuantizationType.Q8_1, gguf.GGMLQuantizationType.Q8_K):
        data = np.zeros((2, gguf.GGML_QUANT_SIZES[q][1]), np.uint8)
        w.add_tensor(f"blk.0.{q.name}.weight", data, raw_shape=data.shape, raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    types = [t.tensor_type.name for t in gguf.GGUFReader(path).tensors]
    rc, out, _ = cli("stats", path)
    out = " ".join(out.split())
    assert rc == 1 and f"{len(types)} skipped ({', '.join(f'1 {t} not decoded' for t in types)}: see --json)" in out


@pytest.mark.parametrize("qtype", ["MXFP4", "NVFP4", "IQ4_NL", "IQ4_XS"])
def test_4_bit_float_blocks_equal_gguf_py_dequantize(tmp_path, cli, qtype):
    """MXFP4 (gpt-oss's experts: an E8M0 scale a 32-value block), NVFP4 (four UE4M3 scales a 64-value block) and
    the non-linear i-quants IQ4_NL and IQ4_XS (a code into ggml's table of 16 integers, times d or a 6-bit sub-block
    scale) decode bit for bit as gguf-py's `dequantize` does, for every byte value (random blocks: scales up to 2^127,
    whose products overflow to inf as gguf-py's do) and for what gguf-py's MXFP4 quantizer writes; `stats` of such
    a file reads them (it said "not decoded") and `diff` against its source compares them."""
    gguf = pytest.importorskip("gguf")
    from ckptstat.core import quants
    from ckptstat.core.quants import dequantize

    assert quants._IQ4_NL.tolist() == list(gguf.quants.IQ4_NL.kvalues)   # the table, gguf-py's

    q = getattr(gguf.GGMLQuantizationType, qtype)
    block, nbytes = gguf.GGML_QUANT_SIZES[q]
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, size=(4096, nbytes), dtype=np.uint8)
    with np.errstate(over="ignore", invalid="ignore"):
        want = gguf.quants.dequantize(raw.reshape(-1), q).astype(np.float32)
        got = dequantize(raw, qtype)
    assert np.array_equal(got.reshape(-1).view(np.uint32), want.reshape(-1).view(np.uint32))
    if qtype != "MXFP4":   # gguf-py quantizes MXFP4 only
        return
    x = (rng.standard_normal((6, 256)) * 0.02).astype(np.float32)
    path = str(tmp_path / "m.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_tensor("blk.0.ffn_up.weight", gguf.quants.quantize(x, q), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    values = open_checkpoint(path).read("blk.0.ffn_up.weight")
    assert np.array_equal(values, gguf.quants.dequantize(gguf.GGUFReader(path).tensors[0].data, q).reshape(6, 256))
    rc, out, _ = cli("stats", path, "--json")
    row = json.loads(out)["tensors"][0]
    assert rc == 0 and (row["min"], row["max"]) == (float(values.min()), float(values.max()))


def test_diff_compares_what_it_decodes_and_says_what_it_does_not(tmp_path, cli):
    """Two GGUF files with a Q8_1 tensor (no decoder yet) beside a Q8_0 one: diff compares the Q8_0 values and
    lists the Q8_1 one as not compared, with the reason, exit 0 (it stopped at the first undecoded tensor)."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 256)).astype(np.float32)
    paths = []
    for name, scale in (("a", 1.0), ("b", 2.0)):
        path = str(tmp_path / f"{name}.gguf")
        w = gguf.GGUFWriter(path, "llama")
        q8 = gguf.GGMLQuantizationType.Q8_0
        w.add_tensor("blk.0.ffn_up.weight", gguf.quants.quantize(x * scale, q8), raw_dtype=q8)
        _, nbytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_1]
        w.add_tensor("blk.0.ffn_down.weight", np.zeros((4, 8 * nbytes), np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_1)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        paths.append(path)
    rc, out, err = cli("diff", *paths, "--json")
    r = json.loads(out)
    rows = {t["name"]: t for t in r["tensors"]}
    assert rc == 1 and rows["blk.0.ffn_up.weight"]["status"] == "values", err
    assert rows["blk.0.ffn_down.weight"]["status"] == "unread"
    assert rows["blk.0.ffn_down.weight"]["unread"] == "values of Q8_1 tensors are not decoded yet"
    assert "1 tensor(s) of block types not decoded yet are not compared" in r["compared"]


def _iq2_xxs_gguf(path: str, blocks: np.ndarray) -> np.ndarray:
    """A GGUF whose one tensor (llama's ffn_down of layer 0, 8 x 512) is these IQ2_XXS blocks (16 of 66 bytes),
    beside a Q8_0 tensor equal in every file; returns gguf-py's values of it."""
    gguf = pytest.importorskip("gguf")
    q = gguf.GGMLQuantizationType.IQ2_XXS
    w = gguf.GGUFWriter(path, "llama")
    q8 = gguf.GGMLQuantizationType.Q8_0
    w.add_tensor("blk.0.ffn_up.weight", gguf.quants.quantize(np.ones((4, 256), np.float32), q8), raw_dtype=q8)
    w.add_tensor("blk.0.ffn_down.weight", blocks.reshape(8, -1), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    t = gguf.GGUFReader(path).tensors[1]
    return gguf.quants.dequantize(t.data, q).reshape(8, 512)


def test_files_that_differ_only_in_an_iq2_xxs_tensor_differ(tmp_path, cli):
    """Two GGUF files that differ only in an IQ2_XXS tensor (random blocks, a finite f16 d) were "no differences",
    exit 0 (its values not decoded): now exit 1, max_abs numpy's over gguf-py's values, and stats' moments numpy's."""
    rng = np.random.default_rng(7)
    values = []
    for name in ("a", "b"):
        blocks = rng.integers(0, 256, (16, 66), dtype=np.uint8)
        blocks[:, :2] = rng.uniform(-0.01, 0.01, (16, 1)).astype(np.float16).view(np.uint8)   # d, finite
        values.append(_iq2_xxs_gguf(str(tmp_path / f"{name}.gguf"), blocks))
    a, b = values
    assert np.isfinite(a).all() and np.isfinite(b).all() and not np.array_equal(a, b)
    rc, out, err = cli("diff", str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf"), "--json")
    r = json.loads(out)
    rows = {t["name"]: t for t in r["tensors"]}
    assert rc == 1 and r["same"] is False, err
    assert rows["blk.0.ffn_down.weight"]["status"] == "values"
    assert rows["blk.0.ffn_down.weight"]["max_abs"] == np.max(np.abs(a.astype(np.float64) - b))
    assert rows["blk.0.ffn_up.weight"]["status"] == "equal"
    rc, out, _ = cli("stats", str(tmp_path / "a.gguf"), "--json", "--no-progress")
    t = {t["name"]: t for t in json.loads(out)["tensors"]}["blk.0.ffn_down.weight"]
    assert rc == 0 and t["count"] == a.size
    np.testing.assert_allclose([t["mean"], t["std"]], [a.astype(np.float64).mean(), a.astype(np.float64).std()],
                               rtol=1e-12)
