"""A compact safetensors header's tensors are a TensorTable (core/tensor_table.py, issue 35): columns, a TensorInfo
made for a name when asked for. It must read exactly as the dict of TensorInfo the entry loop builds (same names,
order, dtypes, shapes, offsets), every shape and dtype as safetensors' own safe_open reads it, and a summary must not
make a TensorInfo per tensor."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ckptstat.core import TensorInfo
from ckptstat.core.tensor_table import TensorTable, columns
from ckptstat.errors import CorruptCheckpointError
from ckptstat.formats import safetensors as st
from ckptstat.formats.registry import open_checkpoint

safetensors_numpy = pytest.importorskip("safetensors.numpy")
safe_open = pytest.importorskip("safetensors").safe_open


def _arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    dtypes = (np.float16, np.float32, np.float64, np.int8, np.uint8, np.int32, np.int64, np.bool_, np.uint16)
    out = {}
    for i in range(60):
        shape = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(0, 4))))
        out[f"model.layers.{i % 7}.block.{i}.{'weight' if i % 2 else 'bias'}"] = \
            rng.standard_normal(shape).astype(dtypes[i % len(dtypes)])
    return out


def _loop_tensors(path: str) -> dict[str, TensorInfo]:
    """The same header through the entry loop (what a header the columns refuse takes)."""
    n, _, found = st.read_header(path)
    assert isinstance(found, list)
    size = os.path.getsize(path)
    return st._checked(st._entries(found, path), path, 8 + n, size, lambda m: CorruptCheckpointError(path, m))


def test_table_reads_as_the_entry_loops_dict_and_as_safe_open(tmp_path):
    path = str(tmp_path / "m.safetensors")
    safetensors_numpy.save_file(_arrays(), path)
    ckpt = open_checkpoint(path)
    table = ckpt.tensors
    assert isinstance(table, TensorTable)
    assert not table._made   # nothing asked yet: no TensorInfo made
    loop = _loop_tensors(path)
    assert list(table) == list(loop) and len(table) == len(loop)
    assert {n: table[n] for n in table} == loop   # one at a time
    assert dict(table.items()) == loop            # and all at once
    with safe_open(path, framework="np") as f:   # the library that wrote the file
        for name in f.keys():
            arr = f.get_tensor(name)
            assert table[name].shape == arr.shape
            assert table[name].nbytes == arr.nbytes
            np.testing.assert_array_equal(ckpt.read(name), arr)
    c = columns(table)
    assert c.names == list(loop) and c.shapes == [t.shape for t in loop.values()]
    assert c.numels == [t.numel for t in loop.values()] and c.nbytes == [t.nbytes for t in loop.values()]
    assert columns(loop) == c   # a dict's columns are read from its TensorInfo objects


def test_a_name_reads_one_object_made_once(tmp_path):
    path = str(tmp_path / "m.safetensors")
    safetensors_numpy.save_file(_arrays(1), path)
    table = open_checkpoint(path).tensors
    name = next(iter(table))
    first = table[name]
    assert table[name] is first
    assert next(t for t in table.values() if t.name == name) is first   # values() keeps what was handed out
    assert "missing" not in table and table.get("missing") is None
    with pytest.raises(KeyError):
        table["missing"]


def test_names_are_found_by_scanning_then_by_the_index(tmp_path, monkeypatch):
    """A name is looked up by scanning the names column for the first SCANS look-ups (a summary asks a few dozen:
    no index of 1M names, ~70 MB), then by an index made once; both answer as the dict of the entry loop does."""
    from ckptstat.core import tensor_table

    monkeypatch.setattr(tensor_table, "SCANS", 3)
    path = str(tmp_path / "m.safetensors")
    safetensors_numpy.save_file(_arrays(4), path)
    table, loop = open_checkpoint(path).tensors, _loop_tensors(path)
    asked = [*list(loop)[::7], "missing", "", "model.layers.0"]
    for name in asked:
        assert (name in table) == (name in loop)
        assert table.get(name) == loop.get(name)
    assert table._index is not None and 3 not in table and None not in table   # (not a str: not a name)
    assert list(table) == list(loop) and list(table.keys()) == list(loop) and table.keys() == loop.keys()


def test_a_summary_makes_no_name_index(tmp_path):
    tensors = {f"model.layers.{i // 64}.mlp.experts.{i % 64}.w1.weight": np.zeros(2, np.float16) for i in range(2000)}
    path = str(tmp_path / "moe.safetensors")
    safetensors_numpy.save_file(tensors, path, metadata={"format": "pt"})
    from ckptstat.analysis.summary import summarize

    ckpt = open_checkpoint(path)
    summarize(ckpt)
    assert isinstance(ckpt.tensors, TensorTable) and ckpt.tensors._index is None


def test_summary_makes_no_tensorinfo_per_tensor(tmp_path):
    tensors = {f"model.layers.{i // 64}.mlp.experts.{i % 64}.w1.weight": np.zeros(2, np.float16) for i in range(640)}
    path = str(tmp_path / "moe.safetensors")
    safetensors_numpy.save_file(tensors, path)
    from ckptstat.analysis.summary import summarize

    ckpt = open_checkpoint(path)
    summarize(ckpt)
    assert isinstance(ckpt.tensors, TensorTable) and len(ckpt.tensors._made) < 20


def _shards(tmp_path, parts: list[dict[str, np.ndarray]]) -> str:
    weight_map = {}
    for i, part in enumerate(parts):
        shard = f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"
        safetensors_numpy.save_file(part, str(tmp_path / shard))
        weight_map.update({n: shard for n in part})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return str(index)


def test_a_sharded_index_joins_its_shards_tables(tmp_path):
    arrays = _arrays(2)
    names = list(arrays)
    parts = [{n: arrays[n] for n in names[i::3]} for i in range(3)]
    ckpt = open_checkpoint(_shards(tmp_path, parts))
    assert isinstance(ckpt.tensors, TensorTable)
    expected: dict[str, TensorInfo] = {}
    for i in range(3):
        expected.update(_loop_tensors(str(tmp_path / f"model-{i + 1:05d}-of-00003.safetensors")))
    assert list(ckpt.tensors) == list(expected) and dict(ckpt.tensors.items()) == expected


def test_a_name_in_two_shards_is_refused_naming_the_second(tmp_path):
    a = {"x.weight": np.zeros(2, np.float32), "y.weight": np.zeros(2, np.float32)}
    index = _shards(tmp_path, [a, {"y.weight": np.ones(2, np.float32), "z.weight": np.zeros(1, np.float32)}])
    with pytest.raises(CorruptCheckpointError, match=r"model-00002-of-00002.*'y.weight' also appears in another shard"):
        open_checkpoint(index)


def test_editable_turns_a_table_into_the_dict_a_reader_changes(tmp_path):
    path = str(tmp_path / "m.safetensors")
    safetensors_numpy.save_file(_arrays(3), path)
    ckpt = open_checkpoint(path)
    before = dict(ckpt.tensors.items())
    tensors = ckpt.editable()
    assert type(tensors) is dict and ckpt.tensors is tensors and tensors == before
