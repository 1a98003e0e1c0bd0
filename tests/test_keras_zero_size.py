"""A zero-size Keras 3 variable (a Dense of 0 inputs stores a (0, units) kernel), written by keras itself (torch
backend) at test time: Checkpoint.read gives keras' own empty array, from a `.weights.h5` file and a `.keras`
archive (stored and deflated) alike (an empty dataset has no offset: it is read through h5py)."""
from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest

from ckptstat import open_checkpoint


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("keras-zero-size")
    os.environ.setdefault("KERAS_BACKEND", "torch")   # read when keras is first imported; TF is not installed
    os.environ.setdefault("KERAS_HOME", str(d / "home"))
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((0,)), keras.layers.Dense(2, bias_initializer="ones")])
    model.save(d / "m.keras")
    model.save_weights(d / "m.weights.h5")
    with zipfile.ZipFile(d / "m.keras") as zin, zipfile.ZipFile(d / "deflated.keras", "w", zipfile.ZIP_DEFLATED) as z:
        for info in zin.infolist():
            z.writestr(info.filename, zin.read(info))
    dense = model.layers[0]
    return d, [keras.ops.convert_to_numpy(v) for v in (dense.kernel, dense.bias)]


@pytest.mark.parametrize("name", ["m.keras", "deflated.keras", "m.weights.h5"])
def test_zero_size_variable_reads_as_keras_holds_it(saved, name):
    d, weights = saved
    ckpt = open_checkpoint(str(d / name))
    kernel, bias = (ckpt.read(f"layers/dense/vars/{i}") for i in (0, 1))
    expected_kernel, expected_bias = weights
    assert expected_kernel.size == 0
    assert kernel.shape == expected_kernel.shape and kernel.dtype == expected_kernel.dtype
    np.testing.assert_array_equal(bias, expected_bias)
