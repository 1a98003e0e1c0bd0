"""torchvision and timm saves (issue 15): BatchNorm running statistics, num_batches_tracked, optimizer state.

The saves and their oracle are written offline by fixtures/make_vision_corpus.py with torch 2.14.1,
torchvision 0.29.1 and timm (neither imports beside the torch 2.13 the test extra pins; docs/ties.md):
each model after one optimizer step in train mode, as torch.save(state_dict), safetensors (timm's
save_for_hf for the timm models) and a training checkpoint {"model", "optimizer", "epoch"}. The oracle
(fixtures/expected_vision_corpus.json) is what torch counted on the built model: parameters(), the
state_dict's non-parameter entries (persistent buffers), num_batches_tracked, the optimizer's
state_dict(). Here ckptstat alone reads them, and torch 2.13's own torch.load(weights_only=True) is the
oracle for `ckptstat scan`.
"""
from __future__ import annotations

import json
import os

import pytest

from ckptstat import open_checkpoint, summarize
from ckptstat.analysis.scan.torch_load import scan
from ckptstat.analysis.summary import tensors as tensor_list
from ckptstat.analysis.ties import audit
from ckptstat.census.ties import find_ties
from ckptstat.cli import main

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "fixtures", "vision-corpus")
with open(os.path.join(HERE, "..", "fixtures", "expected_vision_corpus.json")) as _f:
    ORACLE = json.load(_f)
MODELS = sorted(k for k in ORACLE if k != "versions")
SAVES = [(case, kind) for case in MODELS for kind in ("state_dict", "safetensors", "train")]
PTH = [(case, kind) for case in MODELS for kind in ("state_dict", "train")]


def _path(case: str, kind: str) -> str:
    return os.path.join(CORPUS, ORACLE[case]["files"][kind])


def _prefix(kind: str) -> str:
    return "model." if kind == "train" else ""   # the training checkpoint nests the state_dict under "model"


def test_corpus_breadth():
    assert {ORACLE[c]["library"] for c in MODELS} == {"timm", "torchvision"}
    assert len(MODELS) >= 10 and len(SAVES) >= 30
    bn = [c for c in MODELS if ORACLE[c]["num_batches_tracked"]]
    assert len(bn) >= 8 and all(ORACLE[c]["num_batches_tracked_values"] == [1] for c in bn)   # one train step
    assert any(ORACLE[c]["non_persistent_buffers"] for c in MODELS)   # timm's relative-position indices
    assert {ORACLE[c]["optimizer"] for c in MODELS} >= {"SGD", "Adam"}


@pytest.mark.parametrize("case,kind", SAVES)
def test_parameters_buffers_optimizer(case, kind):
    """Unique parameters = model.parameters(); role buffer = the persistent buffers (running_mean,
    running_var, num_batches_tracked; non-persistent ones are not in the file); optimizer state apart."""
    o = ORACLE[case]
    r = summarize(_path(case, kind))
    roles: dict[str, int] = {}
    for row in r["non_parameters"]:
        roles[row["role"]] = roles.get(row["role"], 0) + row["elements"]
    assert r["parameters"]["unique"] == o["parameters"]
    assert roles.pop("buffer", 0) == o["buffers"]
    assert roles.pop("optimizer", 0) == (o["optimizer_state"] if kind == "train" else 0)
    assert not roles, roles   # nothing counted as non-trainable, metric or counter


@pytest.mark.parametrize("case,kind", SAVES)
def test_buffer_names_and_num_batches_tracked(case, kind):
    o = ORACLE[case]
    rows = tensor_list(open_checkpoint(_path(case, kind)))["tensors"]
    pre = _prefix(kind)
    buffers = sorted(t["name"].removeprefix(pre) for t in rows if t["role"] == "buffer")
    assert buffers == o["buffer_names"]
    tracked = [t for t in rows if t["name"].endswith("num_batches_tracked")]
    assert len(tracked) == o["num_batches_tracked"] and all(t["role"] == "buffer" for t in tracked)
    params = [t for t in rows if t["role"] == "parameter"]
    assert len(params) == o["parameter_tensors"]
    assert not set(o["non_persistent_buffers"]) & {t["name"].removeprefix(pre) for t in rows}


@pytest.mark.parametrize("case,kind", SAVES)
def test_no_false_ties(case, kind):
    """None of these models ties a parameter (the oracle's tie groups are empty): no tie reported, and
    every counting row that counts parameters equals model.parameters()."""
    o = ORACLE[case]
    path = _path(case, kind)
    assert [sorted([t.alias, t.target]) for t in find_ties(open_checkpoint(path))] == o["ties"] == []
    report = audit(open_checkpoint(path))
    assert report["ties"] == []
    rows = {row["convention"].split(" of ")[0]: row["params"] for row in report["counting"]["rows"]}
    for convention in ("unique parameters", "model.parameters()", "every name counted", "stored parameter elements"):
        assert rows[convention] == o["parameters"], convention
    assert "Keras count_params()" not in rows   # torch buffers, not Keras non-trainable variables


@pytest.mark.parametrize("case,kind", PTH)
def test_scan_safe_as_torch_weights_only_loads(case, kind):
    """`ckptstat scan` says safe and weights_only-loadable on every .pth; torch 2.13's own
    torch.load(weights_only=True) loads it (the oracle), and holds the elements the writer counted."""
    torch = pytest.importorskip("torch")
    path = _path(case, kind)
    report = scan(path)
    assert report["status"] == "safe" and report["weights_only_loadable"] is True, report["verdict"]
    assert ORACLE[case]["weights_only"][ORACLE[case]["files"][kind]] is True   # torch 2.14 (the writer) too
    loaded = torch.load(path, weights_only=True)
    sd = loaded["model"] if kind == "train" else loaded
    assert sum(v.numel() for v in sd.values()) == ORACLE[case]["parameters"] + ORACLE[case]["buffers"]
    if kind == "train":
        assert loaded["epoch"] == 1
        state = loaded["optimizer"]["state"].values()
        assert sum(v.numel() for s in state for v in s.values() if isinstance(v, torch.Tensor)) \
            == ORACLE[case]["optimizer_state"]


def test_scan_command_on_the_folder(capsys):
    """The CLI over the whole folder: every .pth scanned, all safe, exit code 0."""
    assert main(["scan", CORPUS, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["totals"]["safe"] == len(PTH)
    assert not report["totals"]["unsafe"] and not report["totals"]["unknown"] and not report["totals"]["unreadable"]


def test_mixed_resnet_blocks_resolve_without_a_crash():
    """timm's test_resnet mixes BasicBlock and Bottleneck stages (and a deep stem): the ResNet family's
    shape inference refuses it with a note instead of failing on a missing conv (families/resnet.py)."""
    r = summarize(_path("timm-test_resnet", "state_dict"))
    assert r["resolved"]["family"] == "resnet"
    assert r["parameters"]["unique"] == ORACLE["timm-test_resnet"]["parameters"]
