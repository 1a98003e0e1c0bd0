"""The file-shaped cases of the third and fourth red-team passes (tests/test_hostile_formats.py,
tests/test_hostile_keras_and_csv.py), added to the memory-capped subprocess corpus (tests/test_hostile_corpus.py):
every command on each, under its RLIMIT_AS and CPU caps. Not collected by pytest (no test_ prefix)."""
from __future__ import annotations

import json
import os
import shutil
import zipfile
from typing import Any

import h5py
import numpy as np
import onnx
from conftest import fixture
from onnx import TensorProto, helper
from safetensors.numpy import save_file
from test_hostile_formats import DEEP, EVIL, NAME_CASES, _Canary, _keras

# `flops` of tensors no family matches, without a config: a usage error (test_hostile_corpus.NO_FAMILY)
NO_FAMILY = 2

WAVE_CASE_NAMES = [
    "names with control characters", "name of 5,000 parts", "name with a superscript part", "name of 20,000 digits",
    "layer index of 5,000 digits", "npy object array calling os.system", "npz object array calling os.system",
    "keras Lambda layer", "keras config importing os.system", "keras h5 model_config importing os.system",
    "keras config nested 100,000 deep", "safetensors header nested 100,000 deep", "keras deflated weights, 40 datasets",
    "keras weights with external storage", "onnx 1M float16 varints", "onnx unterminated varint",
    "onnx external data symlinked out", "keras sharded index naming a shard outside",
    "keras sharded shard symlinked out", "kerashub config of 10^12 layers",
]


def _st(path, tensors: dict[str, np.ndarray]) -> str:
    save_file(tensors, str(path))
    return str(path)


def add_wave_cases(tmp, cases: dict[str, Any], Case: type, outside) -> None:
    """Adds WAVE_CASE_NAMES to `cases` (tmp: the corpus folder; outside: a folder nothing may read)."""
    w = np.ones((4, 4), np.float32)
    cases["names with control characters"] = Case(_st(tmp / "evil-names.safetensors", {EVIL: np.ones(4, np.float32),
                                                                                       "model.layers.0.mlp.w": w}), "ok")
    for label, key in (("name of 5,000 parts", "5,000 parts"), ("name with a superscript part", "superscript part"),
                       ("name of 20,000 digits", "20,000 digits"), ("layer index of 5,000 digits", "5,000-digit layer")):
        name, refused = NAME_CASES[key]
        p = _st(tmp / f"name-{len(cases)}.safetensors", {name: w, "model.layers.0.mlp.up_proj.weight": w})
        cases[label] = Case(p, "open", "digits") if refused else Case(p, "ok")

    evil = np.empty(2, dtype=object)
    evil[0], evil[1] = _Canary(str(outside / "PWNED")), "x"
    np.save(tmp / "evil.npy", evil, allow_pickle=True)
    cases["npy object array calling os.system"] = Case(str(tmp / "evil.npy"), "open", "Python objects")
    np.savez_compressed(tmp / "evil.npz", x=evil, y=np.ones(3))
    cases["npz object array calling os.system"] = Case(str(tmp / "evil.npz"), "open", "Python objects")

    lam = {"class_name": "Lambda", "config": {"name": "l", "function": {
        "class_name": "__lambda__", "config": {"code": "4wEAAAAAAAAA", "defaults": None, "closure": None}}}}
    cases["keras Lambda layer"] = Case(_keras(tmp / "lambda.keras", {"class_name": "Sequential",
                                                                     "config": {"layers": [lam]}}), "ok")
    system = {"module": "os", "class_name": "function", "config": "system", "registered_name": None}
    dense = {"module": "keras.layers", "class_name": "Dense", "config": {"units": 3, "activation": system}}
    cases["keras config importing os.system"] = Case(_keras(tmp / "os.keras", {"class_name": "Sequential",
                                                                               "config": {"layers": [dense]}}), "ok")
    p = tmp / "os.h5"
    with h5py.File(p, "w") as f:   # Keras 2's layout (legacy_h5_format.py): model_config beside model_weights
        f.attrs["model_config"] = json.dumps({"class_name": "Sequential", "config": {"layers": [dense]}})
        g = f.create_group("model_weights")
        g.attrs["layer_names"] = [b"dense"]
        g.create_group("dense").attrs["weight_names"] = [b"dense/kernel:0"]
        g["dense"].create_dataset("dense/kernel:0", data=np.ones((4, 3), np.float32))
    cases["keras h5 model_config importing os.system"] = Case(str(p), "ok")

    p = _keras(tmp / "deep.keras", {})
    with zipfile.ZipFile(p) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    with zipfile.ZipFile(p, "w") as z:
        for name, data in members.items():
            z.writestr(name, DEEP if name == "config.json" else data)
    cases["keras config nested 100,000 deep"] = Case(p, "open", "deep.keras")
    header = ('{"__metadata__": {"a": ' + DEEP + "}}").encode()
    (tmp / "deep.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    cases["safetensors header nested 100,000 deep"] = Case(str(tmp / "deep.safetensors"), "open")
    cases["keras deflated weights, 40 datasets"] = Case(_keras(tmp / "deflated.keras", {"class_name": "Sequential"},
                                                               datasets=40, compress=zipfile.ZIP_DEFLATED), "ok")
    (outside / "data.bin").write_bytes(b"TOPSECRET-5b2e" * 4)
    h5 = tmp / "external.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("layers/dense/vars/0", data=np.ones((2, 2), np.float32))
        f.create_dataset("layers/dense/vars/1", shape=(16,), dtype="u1", external=[(str(outside / "data.bin"), 0, 16)])
    with zipfile.ZipFile(tmp / "external.keras", "w") as z:
        z.writestr("metadata.json", "{}")
        z.writestr("config.json", "{}")
        z.write(h5, "model.weights.h5")
    os.unlink(h5)
    cases["keras weights with external storage"] = Case(str(tmp / "external.keras"), "open", "outside the checkpoint")

    # float16 values as 1M varints of int32_data each: decoded once per 1 MiB block (was once per chunk: quadratic)
    values = np.linspace(-2, 2, 1 << 20, dtype=np.float16)
    ts = [helper.make_tensor(n, TensorProto.FLOAT16, [1 << 20], values) for n in ("a.weight", "b.weight")]
    onnx.save_model(helper.make_model(helper.make_graph([], "g", [], [], initializer=ts)), str(tmp / "varints.onnx"))
    cases["onnx 1M float16 varints"] = Case(str(tmp / "varints.onnx"), "ok")
    model = helper.make_model(helper.make_graph([], "g", [], [], initializer=[
        helper.make_tensor(n, TensorProto.FLOAT16, [2], [1.0, 2.0]) for n in ("a.weight", "b.weight")]))   # ties --deep
    # compares same-shape tensors of more than one value
    data = model.SerializeToString()
    field = b"\x2a\x05\x80\x78\x80\x80\x01"   # int32_data (field 5, packed): float16 1.0 and 2.0 as varints
    assert data.count(field) == 2
    (tmp / "cut.onnx").write_bytes(data.replace(field, field[:-1] + b"\x81"))   # its last byte says "more follows"
    cases["onnx unterminated varint"] = Case(str(tmp / "cut.onnx"), "values", "never ends")
    folder = tmp / "onnx-link"
    folder.mkdir()
    os.symlink(outside / "data.bin", folder / "w.bin")
    ext = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2], data_location=TensorProto.EXTERNAL)
    for k, v in (("location", "w.bin"), ("offset", "0"), ("length", "8")):
        ext.external_data.add(key=k, value=v)
    onnx.save_model(helper.make_model(helper.make_graph([], "g", [], [], initializer=[ext])), str(folder / "model.onnx"))
    cases["onnx external data symlinked out"] = Case(str(folder / "model.onnx"), "open", "symlink")

    # Keras 3 sharded weights and KerasHub presets (docs/keras_hub.md)
    for label, edit in (("keras sharded index naming a shard outside", "index"), ("keras sharded shard symlinked out",
                                                                                   "link")):
        folder = tmp / f"keras-sharded-{edit}"
        shutil.copytree(fixture("keras-sharded"), folder)
        if edit == "index":
            index = json.loads((folder / "model.weights.json").read_text())
            index["weight_map"]["/layers/dense/vars"] = ["../../outside/data.bin"]
            (folder / "model.weights.json").write_text(json.dumps(index))
        else:
            shutil.copy(folder / "model_00001.weights.h5", outside / "shard.h5")
            os.unlink(folder / "model_00001.weights.h5")
            os.symlink(outside / "shard.h5", folder / "model_00001.weights.h5")
        cases[label] = Case(str(folder), "open", "not a file name" if edit == "index" else "outside the checkpoint")
    folder = tmp / "kerashub-layers"
    shutil.copytree(fixture("keras-hub", "converted", "llama"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["config"]["num_layers"] = 10**12
    (folder / "config.json").write_text(json.dumps(config))
    cases["kerashub config of 10^12 layers"] = Case(str(folder), "ok", "num_hidden_layers", expect={"flops": 2})
