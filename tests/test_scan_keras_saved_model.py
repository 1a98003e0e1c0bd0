"""`ckptstat scan` of Keras 2 SavedModels' `keras_metadata.pb` (analysis/scan/keras_metadata.py), against what
tf_keras 2.21 wrote and ran (fixtures/make_keras_saved_model.py, fixtures/expected_keras_saved_model.json: the
metadata's nodes as tf_keras' own proto reads them, and whether `tf_keras.models.load_model(folder)` with its
defaults, then calling the model, ran a Lambda's function, imported a module a config names, or read a file outside,
in a fresh process): unsafe exactly where loading or calling ran code or read a file; the graphs beside it
(saved_model.pb, with the many functions tf_keras traces) stay safe; a folder scan lists both files; a damaged
metadata file is one line."""
from __future__ import annotations

import json
import os

from conftest import FIXTURES

ROOT = os.path.join(FIXTURES, "keras2-saved-model")


def _cases() -> dict:
    with open(os.path.join(FIXTURES, "expected_keras_saved_model.json")) as f:
        return json.load(f)["cases"]


def test_unsafe_exactly_where_loading_ran_code(cli):
    cases = _cases()
    assert {c for c, o in cases.items() if o["ran_at_load"]} == {c for c in cases if c.startswith("lambda")}
    assert {c for c, o in cases.items() if o["reads"]} == {"tfoplambda_read_file"}
    for case, o in cases.items():
        assert o["loaded"], case
        rc, out, _ = cli("scan", os.path.join(ROOT, case, "keras_metadata.pb"), "--json")
        r = json.loads(out)
        touched = o["ran_at_load"] or o["reads"]
        assert (rc, r["status"]) == ((1, "unsafe") if touched else (0, "safe")), (case, r["verdict"])
        assert f"{o['nodes']:,} layers and objects described" in r["notes"], case


def test_folders_list_the_metadata_beside_the_graph(cli):
    rc, out, _ = cli("scan", ROOT, "--json")
    files = {f["path"]: f["status"] for f in json.loads(out)["files"]}
    cases = _cases()
    assert rc == 1
    assert files == {**{os.path.join(c, "keras_metadata.pb"): "unsafe" if o["ran_at_load"] or o["reads"] else "safe"
                        for c, o in cases.items()},
                     **{os.path.join(c, "saved_model.pb"): "safe" for c in cases}}


def test_a_damaged_metadata_file_is_one_line(tmp_path, cli):
    raw = open(os.path.join(ROOT, "lambda_functional", "keras_metadata.pb"), "rb").read()
    for name, data in (("cut", raw[: len(raw) // 2]), ("not json", raw.replace(b'{"', b'{!', 1))):
        bad = tmp_path / name / "keras_metadata.pb"
        bad.parent.mkdir()
        bad.write_bytes(data)
        rc, out, err = cli("scan", str(bad))
        assert rc == 2 and out == "" and err.count("\n") == 1 and "keras_metadata.pb" in err, name
