"""`ckptstat scan INDEX` (a sharded checkpoint's `*.index.json`) scans the shards the index names, as a folder's scan
judges its files; `ckptstat scan` of an ONNX model or a TensorFlow checkpoint bundle says it holds no pickle to scan
(docs/torch.md, "ckptstat scan"). The oracle for a shard's verdict is torch.load itself, run in a throw-away
subprocess: its payload runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from remote_server import Server  # noqa: E402
from test_scan_differential import LOADER  # noqa: E402

from ckptstat import sources  # noqa: E402
from ckptstat.cli import main  # noqa: E402

torch = pytest.importorskip("torch")
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures")


class _Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _sharded(folder, marker: str, index_name: str = "pytorch_model.bin.index.json", weight_map=None) -> str:
    """Two torch.save shards (the second carrying a payload that creates `marker`) and their index."""
    os.makedirs(folder, exist_ok=True)
    torch.save({"a": torch.zeros(3)}, os.path.join(folder, "pytorch_model-00001-of-00002.bin"))
    torch.save({"b": torch.ones(2), "x": _Payload(marker)}, os.path.join(folder, "pytorch_model-00002-of-00002.bin"))
    weight_map = weight_map or {"a": "pytorch_model-00001-of-00002.bin", "b": "pytorch_model-00002-of-00002.bin"}
    path = os.path.join(folder, index_name)
    with open(path, "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return path


def _scan(capsys, path: str) -> tuple[int, dict, str]:
    rc = main(["scan", path, "--json"])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out else {}), err


def test_an_index_scans_the_shards_it_names(tmp_path, capsys):
    marker = str(tmp_path / "ran")
    index = _sharded(tmp_path / "m", marker)
    shards = sorted(str(p) for p in (tmp_path / "m").glob("*.bin"))
    subprocess.run([sys.executable, "-c", LOADER, *shards], check=True, capture_output=True, timeout=300)
    assert os.path.exists(marker)   # torch.load runs the second shard's payload
    os.remove(marker)
    rc, r, err = _scan(capsys, index)
    assert rc == 1 and err == ""
    statuses = {f["path"]: f["status"] for f in r["files"]}
    assert statuses == {"pytorch_model-00001-of-00002.bin": "safe", "pytorch_model-00002-of-00002.bin": "unsafe"}
    assert r["path"] == index and r["totals"]["unsafe"] == 1
    assert not os.path.exists(marker)


def test_a_shard_missing_or_linked_outside_is_skipped(tmp_path, capsys):
    outside = tmp_path / "outside.bin"
    torch.save({"c": torch.zeros(1)}, outside)
    folder = tmp_path / "m"
    os.makedirs(folder)
    os.symlink(outside, folder / "linked.bin")
    index = _sharded(folder, str(tmp_path / "ran"), "idx.index.json", {
        "a": "pytorch_model-00001-of-00002.bin", "b": "gone.bin", "c": "linked.bin"})
    rc, r, _ = _scan(capsys, index)
    assert rc == 1
    assert [f["path"] for f in r["files"]] == ["pytorch_model-00001-of-00002.bin"]
    assert {s["path"]: s["why"] for s in r["skipped"]} == {
        "gone.bin": "named in the index: no such file", "linked.bin": "a link to outside the folder: not followed"}


def test_a_shard_path_out_of_the_folder_is_one_line(tmp_path, capsys):
    index = _sharded(tmp_path / "m", str(tmp_path / "ran"), weight_map={"a": "../outside.bin"})
    rc = main(["scan", index])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "'../outside.bin' is not a file name in the index's folder" in err


def test_an_index_url_scans_its_shards(tmp_path, capsys):
    marker = str(tmp_path / "ran")
    _sharded(tmp_path / "m", marker)
    sources.reset()
    try:
        with Server(str(tmp_path / "m")) as s:
            rc, r, err = _scan(capsys, s.url + "/pytorch_model.bin.index.json")
    finally:
        sources.reset()
    assert rc == 1 and err == ""
    assert {f["path"]: f["status"] for f in r["files"]} == {
        "pytorch_model-00001-of-00002.bin": "safe", "pytorch_model-00002-of-00002.bin": "unsafe"}
    assert not os.path.exists(marker)


def test_an_onnx_model_holds_no_pickle_to_scan(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    np = pytest.importorskip("numpy")
    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], [w])
    path = str(tmp_path / "model.onnx")
    onnx.save(helper.make_model(graph), path)
    onnx.checker.check_model(onnx.load(path))
    rc = main(["scan", path])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "no pickle to scan: an ONNX model" in err
    rc = main(["scan", str(tmp_path)])   # in a folder: not listed, as before
    assert rc == 0 and "0 file(s) scanned" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["tf1-bert/model.ckpt-0.index", "tf-saved-model/variables/variables.data-00000-of-00001"])
def test_a_tensorflow_bundle_holds_no_pickle_to_scan(name, capsys):
    rc = main(["scan", os.path.join(FIXTURES, name)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "no pickle to scan: a TensorFlow checkpoint bundle's file" in err


FILE_OBJECT_LOADER = """
import sys, warnings, torch
warnings.simplefilter("ignore")
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as f:
            torch.load(f, weights_only=False)
    except BaseException:
        pass
"""


def test_a_pickle_named_safetensors_is_judged_as_a_pickle(tmp_path, capsys):
    """A torch.save zip or a plain pickle named `model.safetensors`: torch 2.13's torch.load(path) hands the name to
    safetensors (which refuses the bytes), so scan said 'no pickle to scan' (exit 2) and a folder's scan passed over
    the zip (exit 0); torch.load of the open file (Lightning's fsspec path), or any torch before 2.13, runs it. A
    real safetensors file still holds no pickle to scan."""
    import pickle

    from safetensors.numpy import save_file

    np = pytest.importorskip("numpy")
    marker = str(tmp_path / "ran")
    folder = tmp_path / "m"
    os.makedirs(folder)
    torch.save({"w": torch.zeros(2), "x": _Payload(marker)}, folder / "model.safetensors")
    with open(folder / "plain.safetensors", "wb") as f:
        pickle.dump({"x": _Payload(marker)}, f, protocol=0)
    save_file({"w": np.zeros(2, np.float32)}, str(folder / "real.safetensors"))
    for name in ("model.safetensors", "plain.safetensors"):
        subprocess.run([sys.executable, "-c", FILE_OBJECT_LOADER, str(folder / name)], check=True, timeout=300)
        assert os.path.exists(marker), name
        os.remove(marker)
        rc, r, err = _scan(capsys, str(folder / name))
        assert rc == 1 and r["status"] == "unsafe" and err == "", name
        assert any("hands a path named *.safetensors" in n for n in r["notes"])
    rc, r, _ = _scan(capsys, str(folder))
    assert rc == 1 and {f["path"]: f["status"] for f in r["files"]} == {"model.safetensors": "unsafe",
                                                                         "plain.safetensors": "unsafe"}
    rc = main(["scan", str(folder / "real.safetensors")])
    assert rc == 2 and "no pickle to scan" in capsys.readouterr().err
    assert not os.path.exists(marker)
