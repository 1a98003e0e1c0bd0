"""Megatron-Core distributed checkpoints (torch_dist backend; formats/dcp/megatron.py, docs/dcp.md "Megatron-Core"),
on the folders fixtures/make_megatron.py wrote with megatron-core's own `dist_checkpointing.save` (a GPTModel with
its optimizer state, Megatron-LM's `iter_0000001/`; the same model tensor-parallel over 2 gloo ranks, NeMo 2.0's
`<ckpt>/weights/`). The expected names, shapes, dtypes, values, parameter count and common state are what
megatron-core read back (fixtures/expected_megatron.json); megatron-core is not needed here. torch's own
FileSystemReader is a second oracle where torch is installed."""
from __future__ import annotations

import json
import math
import os
import pickle
import shutil

import numpy as np
import pytest
from conftest import fixture

from ckptstat import open_checkpoint
from ckptstat.cli import main
from ckptstat.naming import classify_all, is_norm_gain

with open(fixture("expected_megatron.json")) as _f:
    EXPECTED = json.load(_f)
# (key in expected_megatron.json, the folder a user points at)
FOLDERS = [("iter_0000001", fixture("megatron", "iter_0000001")),
           ("nemo2_tp2/weights", fixture("megatron", "nemo2_tp2")),
           ("nemo2_tp2/weights", fixture("megatron", "nemo2_tp2", "weights"))]
DTYPES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16", "int64": "I64"}


@pytest.mark.parametrize("key,folder", FOLDERS)
def test_tensors_shapes_dtypes_and_values_equal_megatrons_load(key, folder):
    """Every ShardedTensor under its checkpoint key and global shape (load_plain_tensors), its values gathered from
    the chunks the ranks wrote; the .metadata Megatron pickles (with every rank's SavePlan) is read, not refused."""
    e = EXPECTED[key]
    ckpt = open_checkpoint(folder)
    assert ckpt.format == "dcp" and sorted(ckpt.tensors) == e["keys"]
    for name, t in e["tensors"].items():
        info = ckpt.tensors[name]
        assert list(info.shape) == t["shape"] and info.dtype == DTYPES[t["dtype"]], name
        v = np.asarray(ckpt.read(name), dtype=np.float64).reshape(-1)
        assert math.isclose(float(v.sum()), t["sum"], rel_tol=1e-12, abs_tol=1e-12), name
        assert v[:4].tolist() == t["first"] and float(v[-1]) == t["last"], name


def test_tensor_parallel_weights_are_gathered_from_both_ranks():
    """With tensor parallel 2 the column-parallel linear_qkv / linear_fc1 and the row-parallel linear_proj / linear_fc2
    are stored in one chunk per rank and layer (2 x 2 chunks), read as one global tensor."""
    ckpt = open_checkpoint(fixture("megatron", "nemo2_tp2"))
    for name in ("decoder.layers.self_attention.linear_qkv.weight", "decoder.layers.mlp.linear_fc2.weight"):
        assert ckpt.tensors[name].extra["dcp_chunks"] == 4
    assert ckpt.tensors["embedding.word_embeddings.weight"].extra["dcp_chunks"] == 2   # vocab-parallel


@pytest.mark.parametrize("key,folder", FOLDERS[:2])
def test_parameter_count_layers_and_optimizer_state(key, folder, capsys):
    """The parameter count is Megatron's (model.parameters() over every TP rank); optimizer.state.* is optimizer
    state, counted apart; every parameter is placed (embedding, the stacked decoder layers, the output layer) and
    the per-layer rows split each stacked tensor along its leading dimension."""
    e = EXPECTED[key]
    assert main([folder, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["parameters"]["unique"] == e["parameters"]
    assert not r["unplaced"]
    assert {b["bucket"] for b in r["buckets"]} == {"embedding", "encoder", "cls"}
    opt = {x["role"]: x for x in r["non_parameters"]}.get("optimizer")
    held = sum(math.prod(e["tensors"][k]["shape"]) for k in e["optimizer_keys"])
    assert (opt["elements"] if opt else 0) == held and (opt["tensors"] if opt else 0) == len(e["optimizer_keys"])
    n_layers = 2
    stacked = [k for k in e["keys"] if ".layers." in f".{k}" and not k.startswith("optimizer.")]
    per_layer = sum(math.prod(e["tensors"][k]["shape"]) for k in stacked) // n_layers
    assert [(x["layer"], x["params"], x["tensors"]) for x in r["layers"]] == \
        [(i, per_layer, len(stacked)) for i in range(n_layers)]
    # the model's own per-layer names (what dist_checkpointing.load fills): as many layers as the stacks hold
    assert {n.split(".")[2] for n in e["model_state_dict_names"] if n.startswith("decoder.layers.")} == {"0", "1"}
    assert any("Megatron-Core distributed checkpoint" in n and "2 layers" in n for n in r["notes"])


def test_common_state_iteration_and_learning_rate(capsys):
    """common.pt (torch.load(weights_only=True) reads it, as Megatron's load does) gives the objects and the
    training line: Megatron-LM's `iteration` and the optimizer's param_groups learning rate."""
    e = EXPECTED["iter_0000001"]
    folder = fixture("megatron", "iter_0000001")
    assert main([folder, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["objects"]["iteration"]["value"] == e["common"]["iteration"]
    assert r["objects"]["optimizer.param_groups.0.lr"]["value"] == e["common"]["optimizer"]["param_groups"][0]["lr"]
    assert r["objects"]["optimizer.state.common_step"]["unread"]   # a tensor: not shown
    t = r["training"]
    assert t["global_step"] == e["common"]["iteration"] and t["learning_rate"] == 1e-3
    assert t["library"] == "Megatron-Core dist_checkpointing"
    assert r["metadata"]["megatron.sharded_backend"] == e["metadata_json"]["sharded_backend"] == "torch_dist"


def test_nemo2_folder_reads_its_weights(capsys):
    assert main([fixture("megatron", "nemo2_tp2")]) == 0
    out = capsys.readouterr().out
    assert "NeMo 2.0 checkpoint folder: its weights/ read" in out and "7,040" in out


@pytest.mark.parametrize("folder", [fixture("megatron", "iter_0000001"), fixture("megatron", "nemo2_tp2")])
def test_scan_says_a_folder_megatron_wrote_is_safe(folder, capsys):
    """The .metadata pickle names torch's SavePlan / WriteItem / TensorWriteData / WriteItemType (Megatron keeps the
    plans in it): DCP's own classes, which its reader imports; common.pt loads under weights_only=True."""
    assert main(["scan", folder, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert {os.path.basename(f["path"]): f["status"] for f in r["files"]} == {".metadata": "safe", "common.pt": "safe"}


def test_scan_a_plan_holding_a_payload_is_unsafe(tmp_path, capsys):
    """The plans are walked like the rest of the pickle: a global outside DCP's classes inside one is UNSAFE."""
    torch = pytest.importorskip("torch")
    folder = tmp_path / "iter"
    shutil.copytree(fixture("megatron", "iter_0000001"), folder)
    with open(folder / ".metadata", "rb") as f:
        meta = pickle.load(f)

    class Payload:
        def __reduce__(self):
            return (os.system, ("true",))
    import dataclasses
    meta.all_local_plans[0] = dataclasses.replace(meta.all_local_plans[0], planner_data={"x": Payload()})
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(meta, f)
    assert torch is not None
    assert main(["scan", str(folder), "--json"]) == 1
    r = json.loads(capsys.readouterr().out)
    (md,) = [f for f in r["files"] if f["path"].endswith(".metadata")]
    assert md["status"] == "unsafe" and "system" in json.dumps(md)


def test_torchs_reader_agrees():
    """torch's own FileSystemReader + dcp.load of the same folder (no process group): the same tensors."""
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    folder = fixture("megatron", "nemo2_tp2", "weights")
    meta = dcp.FileSystemReader(folder).read_metadata()
    sd = {k: torch.empty(m.size, dtype=m.properties.dtype) for k, m in meta.state_dict_metadata.items()
          if isinstance(m, TensorStorageMetadata)}
    dcp.load(sd, checkpoint_id=folder, no_dist=True)
    ckpt = open_checkpoint(folder)
    assert sorted(sd) == sorted(ckpt.tensors)
    for k, t in sd.items():
        assert np.array_equal(np.asarray(ckpt.read(k)).reshape(t.shape), t.numpy()), k


def test_megatron_names_are_classified():
    names = EXPECTED["iter_0000001"]["keys"]
    place = classify_all((n, "F32", tuple(EXPECTED["iter_0000001"]["tensors"][n]["shape"])) for n in names)
    assert place["embedding.position_embeddings.weight"].bucket == "embedding"
    assert place["output_layer.weight"].bucket == "cls"
    assert place["decoder.layers.mlp.linear_fc1.weight"].bucket == "encoder"   # decoder-only: the decoder stack
    assert all(p.role == "optimizer" for n, p in place.items() if n.startswith("optimizer."))
    assert is_norm_gain("decoder.layers.self_attention.linear_qkv.layer_norm_weight")
    assert not is_norm_gain("decoder.layers.self_attention.linear_qkv.weight")
