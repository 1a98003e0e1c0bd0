"""`ckptstat scan` of TensorFlow SavedModels (analysis/scan/saved_model.py), against what TensorFlow 2.21 wrote and
did (fixtures/make_saved_model_ops.py, fixtures/expected_saved_model_ops.json: the ops TensorFlow's own proto
parser finds in each saved_model.pb, and whether loading it and calling `serve` created the marker file): the op
set read without TensorFlow is TensorFlow's, every file-system op is a finding, a plain model and the committed
tf-saved-model fixture are safe, a damaged saved_model.pb is one line."""
from __future__ import annotations

import json
import os
import shutil

from conftest import FIXTURES

from ckptstat.analysis.scan.saved_model import FILE_OPS, _nodes
from ckptstat.formats.tf_bundle.wire import fields

ROOT = os.path.join(FIXTURES, "tf-saved-model-ops")


def _oracle() -> dict:
    with open(os.path.join(FIXTURES, "expected_saved_model_ops.json")) as f:
        return json.load(f)["cases"]


def test_the_ops_are_tensorflows():
    for case, o in _oracle().items():
        raw = open(os.path.join(ROOT, case, "saved_model.pb"), "rb").read()
        ops = set()
        for num, _, meta in fields(raw):
            if num == 2:
                for n2, _, graph in fields(meta):
                    if n2 == 2:
                        ops.update(op for op, _ in _nodes(graph))
        assert sorted(ops) == o["ops"], case


def test_file_system_ops_are_findings(cli):
    for case, o in _oracle().items():
        rc, out, _ = cli("scan", os.path.join(ROOT, case, "saved_model.pb"), "--json")
        r = json.loads(out)
        want = sorted(f"tf op {op}" for op in o["ops"] if op in FILE_OPS) + (["tf op PrintV2"] if case == "print_to_file" else [])
        assert r["unsafe_globals"] == want, case
        assert (rc, r["status"]) == ((1, "unsafe") if want else (0, "safe")), case
        if o["marker_after_call"]:
            assert r["status"] == "unsafe", case


def test_folders_list_saved_models(tmp_path, cli):
    for case in ("write_file", "plain"):
        shutil.copytree(os.path.join(ROOT, case), tmp_path / case)
    shutil.copytree(os.path.join(FIXTURES, "tf-saved-model"), tmp_path / "fixture")
    rc, out, _ = cli("scan", str(tmp_path), "--json")
    assert rc == 1
    assert {f["path"]: f["status"] for f in json.loads(out)["files"]} == {
        os.path.join("write_file", "saved_model.pb"): "unsafe", os.path.join("plain", "saved_model.pb"): "safe",
        os.path.join("fixture", "saved_model.pb"): "safe"}


def test_a_damaged_saved_model_is_one_line(tmp_path, cli):
    raw = open(os.path.join(ROOT, "write_file", "saved_model.pb"), "rb").read()
    bad = tmp_path / "saved_model.pb"
    bad.write_bytes(raw[: len(raw) // 2])
    rc, out, err = cli("scan", str(bad))
    assert rc == 2 and out == "" and err.count("\n") == 1 and "not a SavedModel" in err
