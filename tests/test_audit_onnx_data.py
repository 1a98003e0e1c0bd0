"""`ckptstat audit`'s ONNX units: the external data files a model's tensors name (TensorProto.external_data
`location`), whatever they are called, are the unit's (its bytes, its resume key, its scan), never skipped or
audited apart. The oracle is onnx itself: the locations its own helper reads from the saved model."""
from __future__ import annotations

import os

import numpy as np
import pytest

from ckptstat.analysis.audit import audit_record
from ckptstat.analysis.audit.find import discover

onnx = pytest.importorskip("onnx")
from onnx import external_data_helper as edh  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), f"w{i}") for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"w{i}"], [f"h{i + 1}"]) for i in range(3)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("h3", onnx.TensorProto.FLOAT, [1, 64])], w)
    return helper.make_model(graph)


def _locations(path: str) -> set[str]:
    """The files onnx says the saved model's tensors live in, relative to its folder."""
    m = onnx.load(path, load_external_data=False)
    return {edh.ExternalDataInfo(t).location for t in edh._get_all_tensors(m) if edh.uses_external_data(t)}


def _save_location(folder: str) -> str:
    path = os.path.join(folder, "m.onnx")
    onnx.save_model(_model(), path, save_as_external_data=True, all_tensors_to_one_file=True, location="m_ext.data",
                    size_threshold=0)
    return path


def _convert_per_tensor(folder: str) -> str:
    """convert_model_to_external_data, one file per tensor, in a subfolder of the model's."""
    os.makedirs(os.path.join(folder, "weights"))
    m = _model()
    edh.convert_model_to_external_data(m, all_tensors_to_one_file=False, size_threshold=0)
    for t in edh._get_all_tensors(m):
        if edh.uses_external_data(t):
            edh.set_external_data(t, location=f"weights/{t.name}.bin")
    path = os.path.join(folder, "model.onnx")
    onnx.save_model(m, path)
    return path


@pytest.mark.parametrize("write", [_save_location, _convert_per_tensor])
def test_units_claim_the_files_the_model_names(tmp_path, write):
    path = write(str(tmp_path))
    names = _locations(path)
    assert names and not any(n.endswith((".onnx.data", ".onnx_data")) for n in names)
    units, skipped = discover(str(tmp_path))
    assert [u.path for u in units] == [path] and skipped == []
    unit = units[0]
    files = {os.path.basename(path), *names}
    assert {os.path.relpath(f, tmp_path) for f in unit.files} == files
    assert unit.bytes == sum(os.path.getsize(os.path.join(tmp_path, f)) for f in files)
    rec = audit_record(unit)
    assert rec["error"] is None and set(rec["files"]) == files and rec["bytes"] == unit.bytes
    assert rec["parameters"] == sum(numpy_helper.to_array(t, str(tmp_path)).size
                                    for t in onnx.load(path).graph.initializer)


def test_a_rewritten_data_file_changes_the_resume_key(tmp_path):
    path = _save_location(str(tmp_path))
    (loc,) = _locations(path)
    before = discover(str(tmp_path))[0][0].key
    data = os.path.join(tmp_path, loc)
    with open(data, "ab") as f:
        f.write(b"\0" * 16)
    assert discover(str(tmp_path))[0][0].key != before


def test_a_reference_out_of_the_folder_claims_nothing(tmp_path):
    """A location the reader refuses (a symlink out of the model's folder) is not claimed: the record says why."""
    outside = tmp_path / "outside"
    zoo = tmp_path / "zoo"
    outside.mkdir()
    zoo.mkdir()
    path = _save_location(str(outside))
    (loc,) = _locations(path)
    os.rename(path, zoo / "m.onnx")
    os.symlink(outside / loc, zoo / loc)
    units, skipped = discover(str(zoo))
    assert [u.files for u in units] == [(str(zoo / "m.onnx"),)]
    assert skipped == [str(zoo / loc)]
    assert "outside" in audit_record(units[0])["error"] or "symlink" in audit_record(units[0])["error"]
