"""Hostile bytes: every validation rule of the safetensors header, built with struct.pack.
Each must end in one clear error naming the file, never a traceback or an allocation."""
import json
import struct

import pytest

from ckptstat import open_checkpoint
from ckptstat.errors import CkptstatError, CorruptCheckpointError, UnknownFormatError


def st_bytes(header: dict | bytes, data: bytes = b"", pad: bool = True) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad:
        raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def entry(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


GOOD = {"a": entry(), "b": entry("F16", (4,), (8, 16))}

CASES = {
    "too short": (b"\x01\x00", "too short"),
    "absurd header length": (struct.pack("<Q", 2**63) + b"{}", "exceeds"),
    "header past end": (struct.pack("<Q", 1000) + b"{}", "runs past the end"),
    "not utf-8": (st_bytes(b'{"a\xff": 1}'), "UTF-8"),
    "not json": (st_bytes(b"{not json"), "not valid JSON"),
    "not an object": (st_bytes(b"[1, 2]   "), None),
    "duplicate key": (st_bytes(b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
                               b'"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4), "duplicate"),
    # the reader counts colons to skip the duplicate-key hook (formats/safetensors.py _no_repeats): a repeat
    # behind a non-object value, inside an entry, in the metadata, or beside an escaped colon still counts
    "duplicate behind a number": (st_bytes(b'{"a": 5, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
                                           b"\0" * 4), "duplicate"),
    "duplicate entry key": (st_bytes(b'{"a": {"dtype": "F16", "dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
                                     b"\0" * 4), "duplicate"),
    "duplicate metadata key": (st_bytes(b'{"__metadata__": {"k": "v", "k": "w"}, '
                                        b'"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4),
                               "duplicate"),
    "duplicate metadata": (st_bytes(b'{"__metadata__": {"k": "v"}, "__metadata__": {"k": "v"}, '
                                    b'"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4), "duplicate"),
    "duplicate beside an escaped colon": (st_bytes(b'{"x\\u003ay": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}, '
                                                   b'"a": 5, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
                                                   b"\0" * 8), "duplicate"),
    "bad metadata": (st_bytes({"__metadata__": {"k": 1}, **GOOD}, b"\0" * 16), "__metadata__"),
    "unknown dtype": (st_bytes({"a": entry("F12")}, b"\0" * 8), "unknown dtype"),
    "negative dim": (st_bytes({"a": entry(shape=(-2,))}, b"\0" * 8), "non-negative"),
    "float dim": (st_bytes({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, b"\0" * 8), "non-negative"),
    "bool dim": (st_bytes({"a": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, b"\0" * 4), "non-negative"),
    "begin after end": (st_bytes({"a": entry(offsets=(8, 0))}, b"\0" * 8), "begin <= end"),
    "span vs shape": (st_bytes({"a": entry(shape=(3,))}, b"\0" * 8), "needs 12"),
    "huge shape": (st_bytes({"a": entry(shape=(2**40, 2**40))}, b"\0" * 8), "overflows"),
    "hole": (st_bytes({"a": entry(), "b": entry("F16", (4,), (16, 24))}, b"\0" * 24), "hole"),
    "overlap": (st_bytes({"a": entry(), "b": entry("F16", (4,), (4, 12))}, b"\0" * 12), "overlaps"),
    "not from zero": (st_bytes({"a": entry(offsets=(8, 16))}, b"\0" * 16), "hole"),
    "truncated data": (st_bytes(GOOD, b"\0" * 10), "truncated"),
    "trailing bytes": (st_bytes(GOOD, b"\0" * 20), "the file has"),
    "sub-byte misfit": (st_bytes({"a": entry("F4", (3,), (0, 2))}, b"\0" * 2), "whole bytes"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_header(tmp_path, case, cli):
    data, message = CASES[case]
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    with pytest.raises(CkptstatError) as info:
        open_checkpoint(path)
    assert isinstance(info.value, (CorruptCheckpointError, UnknownFormatError))
    assert str(path) in str(info.value)
    if message:
        assert message in str(info.value)
    rc, out, err = cli(str(path))
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("ckptstat: error: ") and "Traceback" not in err


def test_colon_count_proves_no_repeat():
    # names and metadata with colons (TF's `w:0`) take the fast parse; any repeat, or an escape, does not
    from ckptstat.formats.safetensors import _no_repeats
    good = json.dumps({"__metadata__": {"k:1": "v:2", "n": "3"}, "w:0": entry(), "a::b": entry("F16", (4,), (8, 16))})
    assert _no_repeats(good, json.loads(good))
    for data, _ in (CASES["duplicate key"], CASES["duplicate behind a number"], CASES["duplicate entry key"],
                    CASES["duplicate metadata key"], CASES["duplicate beside an escaped colon"]):
        text = data[8:8 + struct.unpack_from("<Q", data)[0]].decode()
        assert not _no_repeats(text, json.loads(text))


def test_good_case_is_good(tmp_path):
    path = tmp_path / "ok.safetensors"
    path.write_bytes(st_bytes({"__metadata__": {"k": "v"}, **GOOD}, b"\0" * 16))
    ckpt = open_checkpoint(path)
    assert [t.name for t in ckpt] == ["a", "b"] and ckpt.metadata == {"k": "v"}
    assert ckpt["b"].offset == ckpt["a"].offset + 8


def test_zero_size_and_scalar_are_legal(tmp_path):
    path = tmp_path / "edge.safetensors"
    path.write_bytes(st_bytes({"s": entry("F32", (), (0, 4)), "z": entry("F32", (0, 5), (4, 4))}, b"\0" * 4))
    ckpt = open_checkpoint(path)
    assert ckpt["s"].numel == 1 and ckpt["z"].numel == 0 and ckpt.read("z").shape == (0, 5)


def test_missing_shard(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-1.safetensors"}}))
    with pytest.raises(CkptstatError, match="missing"):
        open_checkpoint(tmp_path)


def test_index_names_tensor_the_shard_lacks(tmp_path):
    (tmp_path / "s.safetensors").write_bytes(st_bytes(GOOD, b"\0" * 16))
    (tmp_path / "m.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "s.safetensors", "zz": "s.safetensors"}}))
    with pytest.raises(CorruptCheckpointError, match="lacks"):
        open_checkpoint(tmp_path / "m.safetensors.index.json")


def test_index_shard_outside_folder(tmp_path):
    (tmp_path / "m.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../../etc/passwd"}}))
    with pytest.raises(CorruptCheckpointError, match="not a file name"):
        open_checkpoint(tmp_path / "m.safetensors.index.json")


def test_index_shard_written_dot_slash(tmp_path):
    """An index naming `./model-00001-of-00003.safetensors` (transformers joins it to the folder and loads it) is
    read; `./../` is still a name outside the folder."""
    torch = pytest.importorskip("torch")
    T = pytest.importorskip("transformers")
    T.logging.set_verbosity_error()
    cfg = T.LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                        num_key_value_heads=1, vocab_size=64)
    T.LlamaForCausalLM(cfg).save_pretrained(tmp_path, max_shard_size="10KB")
    index = tmp_path / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"] = {k: "./" + v for k, v in data["weight_map"].items()}
    index.write_text(json.dumps(data))
    loaded = T.LlamaForCausalLM.from_pretrained(tmp_path)
    ckpt = open_checkpoint(tmp_path)
    assert len(ckpt.files) == 3 and sum(t.numel for t in ckpt.tensors.values()) == \
        sum(v.numel() for v in loaded.state_dict().values())
    with torch.no_grad():
        assert all(torch.equal(torch.from_numpy(ckpt.read(n).copy()), v) for n, v in loaded.state_dict().items())
    data["weight_map"] = {k: "./../" + v[2:] for k, v in data["weight_map"].items()}
    index.write_text(json.dumps(data))
    with pytest.raises(CorruptCheckpointError, match="not a file name"):
        open_checkpoint(tmp_path)


def test_corrupt_index_json(tmp_path):
    (tmp_path / "m.safetensors.index.json").write_text("{oops")
    with pytest.raises(CorruptCheckpointError, match="m.safetensors.index.json"):
        open_checkpoint(tmp_path / "m.safetensors.index.json")
