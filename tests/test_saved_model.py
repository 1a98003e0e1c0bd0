"""TensorFlow SavedModel folders (ckptstat/formats/saved_model.py): a fixture written by
tf.saved_model.save (fixtures/make_saved_model.py), whose recorded oracle is tf.train.load_checkpoint
on its variables bundle and the saved module's trainable_variables. The bundle itself gets the reader
contract as a TF bundle (tests/test_reader_contract.py)."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from conftest import fixture

from ckptstat import open_checkpoint, summarize
from ckptstat.errors import CheckpointError


def _tf() -> dict:
    with open(fixture("expected_saved_model.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("target", ["tf-saved-model", "tf-saved-model/saved_model.pb"])
def test_saved_model_reads_its_variables_as_tensorflow_does(target):
    ckpt = open_checkpoint(fixture(target))
    assert ckpt.format == "tf-bundle (SavedModel)"
    assert os.path.basename(ckpt.files[0]) == "saved_model.pb"
    want = _tf()["tensors"]
    got = {str(t.extra.get("checkpoint_key", t.name)): t for t in ckpt if t.dtype != "STR"}
    assert sorted(got) == sorted(want)
    for key, w in want.items():
        assert list(got[key].shape) == w["shape"]
        np.testing.assert_array_equal(ckpt.read(got[key].name).astype(np.float64).reshape(-1), w["values"])


def test_trainable_flags_from_the_object_graph():
    ckpt = open_checkpoint(fixture("tf-saved-model"))
    trainable = [t.name for t in ckpt if t.extra.get("trainable") is True]
    assert len(trainable) == _tf()["trainable_variables"]
    report = summarize(fixture("tf-saved-model"))
    assert report["parameters"]["unique"] == _tf()["trainable_parameters"]
    assert report["parameters"]["tensors"] == len(trainable)
    assert any("not trainable" in n for n in report["notes"])


def test_saved_model_without_variables_is_one_error(tmp_path):
    shutil.copy(fixture("tf-saved-model", "saved_model.pb"), tmp_path / "saved_model.pb")
    with pytest.raises(CheckpointError, match="variables"):
        open_checkpoint(tmp_path)
