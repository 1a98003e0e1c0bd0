"""Keras 3 non-trainable variables beyond a default BatchNormalization's vars 2 and 3, written by keras itself (torch
backend) at test time: a BatchNormalization built with scale=False or center=False (its moving statistics are then
its last two vars, 1 and 2 or 0 and 1), a Normalization layer's adapt() state (mean, variance and an int32 count,
all trainable=False), and, in a `.keras` archive whose config.json says so, the weights of layers frozen with
`layer.trainable = False` (a layer of a nested model, a Bidirectional, the whole model). Every expected number comes
from keras: the elements of model.trainable_weights and model.non_trainable_weights, and model.count_params()."""
from __future__ import annotations

import os

import numpy as np
import pytest

from ckptstat import open_checkpoint, summarize
from ckptstat.analysis.ties import audit


def _models(keras) -> dict:
    L = keras.layers

    def seq(*layers):
        return keras.Sequential([keras.Input((3,)), L.Dense(4), *layers])

    norm = L.Normalization()
    norm.adapt(np.arange(30, dtype="float32").reshape(10, 3))
    frozen = seq(L.Dense(2))
    frozen.layers[0].trainable = False
    whole = seq(L.BatchNormalization(), L.Dense(2))
    whole.trainable = False
    # a frozen layer of a model nested in a functional one, a frozen Dense named dense_2 after an unfrozen dense and
    # dense_1, ops between layers, and a frozen Bidirectional
    inner = keras.Sequential([keras.Input((4,)), L.Dense(4), L.BatchNormalization(), L.Dense(4)])
    inner.layers[2].trainable = False
    i = keras.Input((4,))
    x = L.Dense(4)(keras.ops.add(L.Dense(4)(i), 1.0))
    frozen_dense = L.Dense(4)
    x = inner(frozen_dense(x))
    frozen_dense.trainable = False
    birnn = L.Bidirectional(L.GRU(2))
    out = L.Dense(1)(birnn(L.Reshape((2, 2))(x)))
    birnn.trainable = False
    return {"bn-no-scale": seq(L.BatchNormalization(scale=False)), "bn-no-center": seq(L.BatchNormalization(center=False)),
            "bn-neither": seq(L.BatchNormalization(center=False, scale=False), L.Dense(2)),
            "normalization": keras.Sequential([keras.Input((3,)), norm, L.Dense(2)]),
            "frozen-layer": frozen, "frozen-model": whole, "frozen-nested": keras.Model(i, out)}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, dict]:
    d = tmp_path_factory.mktemp("keras-non-trainable")
    os.environ.setdefault("KERAS_BACKEND", "torch")   # read when keras is first imported; TF is not installed
    os.environ.setdefault("KERAS_HOME", str(d / "home"))
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    out = {}
    for name, model in _models(keras).items():
        model.compile(optimizer="adam", loss="mse")
        x = np.ones((4, *model.inputs[0].shape[1:]), dtype="float32")
        model.fit(x, model.predict(x, verbose=0), verbose=0)   # moving statistics updated, optimizer state written
        model.save(d / f"{name}.keras")
        model.save_weights(d / f"{name}.weights.h5")
        out[name] = {"dir": d, "count_params": model.count_params(),
                     "trainable": sum(int(np.prod(v.shape)) for v in model.trainable_weights),
                     "non_trainable": sum(int(np.prod(v.shape)) for v in model.non_trainable_weights)}
    return out


# a .weights.h5 file does not record layer.trainable: frozen layers are read from a .keras archive's config.json
CASES = [(name, ext) for name in ("bn-no-scale", "bn-no-center", "bn-neither", "normalization") for ext in
         ("keras", "weights.h5")] + [(name, "keras") for name in ("frozen-layer", "frozen-model", "frozen-nested")]


@pytest.mark.parametrize("name,ext", CASES)
def test_non_trainable_as_keras_counts(saved, name, ext):
    oracle = saved[name]
    path = str(oracle["dir"] / f"{name}.{ext}")
    r = summarize(path)
    roles = {row["role"]: row["elements"] for row in r["non_parameters"]}
    assert r["parameters"]["unique"] == oracle["trainable"]
    assert roles.get("non-trainable", 0) == oracle["non_trainable"] > 0
    assert "buffer" not in roles
    rows = {row["convention"]: row for row in audit(open_checkpoint(path))["counting"]["rows"]}
    assert rows["Keras count_params()"]["params"] == oracle["count_params"]
