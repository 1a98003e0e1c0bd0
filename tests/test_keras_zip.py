"""Keras 3 `.keras` archives (ckptstat/formats/keras_zip.py, docs/keras_zip.md): fixtures saved by keras
3 itself (fixtures/make_keras_zip.py), whose recorded oracle is keras' own count_params() and
optimizer variables of the reloaded model. Round trip, truncation, bit flips and hostile claims are in
tests/test_reader_contract.py."""
from __future__ import annotations

import json
import shutil
import zipfile

import numpy as np
import pytest
from conftest import fixture

from ckptstat import open_checkpoint, summarize
from ckptstat.errors import CheckpointError
from ckptstat.formats import registry


def _keras() -> dict:
    with open(fixture("expected_keras_zip.json")) as f:
        return json.load(f)["keras"]


@pytest.mark.parametrize("name", ["mlp.keras", "mlp-deflated.keras"])
def test_counts_as_keras_does(name):
    report = summarize(fixture("keras3-zip", name))
    assert report["format"] == "keras (zip)"
    assert report["parameters"]["unique"] == _keras()["count_params"]
    assert report["parameters"]["tensors"] == len(_keras()["weights"])
    optimizer = [r for r in report["non_parameters"] if r["role"] == "optimizer"]
    assert optimizer and optimizer[0]["tensors"] == _keras()["optimizer_variables"]


def test_stored_member_is_read_in_place_and_deflated_one_agrees():
    stored = open_checkpoint(fixture("keras3-zip", "mlp.keras"))
    deflated = open_checkpoint(fixture("keras3-zip", "mlp-deflated.keras"))
    assert all(t.offset is not None for t in stored)       # values straight from the archive, by offset
    assert sorted(stored.tensors) == sorted(deflated.tensors)
    for name in stored.tensors:
        np.testing.assert_array_equal(stored.read(name), deflated.read(name))


def test_detected_by_content_not_name(tmp_path):
    p = tmp_path / "model.zip"
    shutil.copy(fixture("keras3-zip", "mlp.keras"), p)
    assert registry.detect(str(p)).name == "keras (zip)"
    q = tmp_path / "other.zip"     # the same first member, but no model.weights.h5: not a .keras archive
    with zipfile.ZipFile(q, "w") as z:
        z.writestr("metadata.json", "{}")
        z.writestr("config.json", "{}")
    assert all(f.name != "keras (zip)" for f in registry.FORMATS if f.accept(registry.Probe.of(str(q))))
    with pytest.raises(CheckpointError):
        open_checkpoint(q)
