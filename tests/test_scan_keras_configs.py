"""Keras 3 `.keras` configs that load_model(safe_mode=False) turns against the process where scan did not say UNSAFE
(docs/security.md, the twenty-second pass; a helper's cases): a TorchModuleWrapper whose module is a base64 pickle
(torch.load(weights_only=False) of it), and a config.json keras decodes and scan did not (UTF-16, a UTF-8 BOM: keras
parses the member's bytes with json.loads). keras 3.15, torch backend, builds the models and, in a throw-away
process, loads each; scan must say UNSAFE. A lookup layer's `vocabulary` path is flagged from keras' source
(index_lookup.py reads it with safe_mode off): its layers need TensorFlow to load, not in the test install."""
from __future__ import annotations

import base64
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import zipfile

import pytest
from polyglots import loader_runs

if importlib.util.find_spec("keras") is None:   # (imported only in the subprocesses, with the torch backend)
    pytest.skip("keras is not installed", allow_module_level=True)
pytest.importorskip("torch")

from ckptstat.analysis.scan import scan_path  # noqa: E402

ENV = {**os.environ, "KERAS_BACKEND": "torch"}   # (TensorFlow is not in the test install)
BUILD = """
import sys, keras, torch
out, marker = sys.argv[1], sys.argv[2]
inp = keras.Input((4,))
fn = eval(f"lambda t: (__import__('os').makedirs({marker!r}, exist_ok=True), t)[1]")   # the path a constant
x = keras.layers.Lambda(fn)(inp)
keras.Model(inp, keras.layers.Dense(2)(x)).save(out + "/lambda.keras")
keras.Sequential([keras.Input((4,)), keras.layers.TorchModuleWrapper(torch.nn.Linear(4, 2))]).save(
    out + "/wrapper.keras")
"""
LOAD = "import sys, keras\ntry:\n    keras.saving.load_model(sys.argv[1], safe_mode=False)\nexcept Exception as e:\n    print(e)"


class Mkdir:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


def _rewrite(src: str, dst: str, config: bytes) -> str:
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    members["config.json"] = config
    with zipfile.ZipFile(dst, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return dst


def _loads(path: str, marker: str) -> bool:
    return loader_runs(LOAD, path, marker, ENV)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("keras")
    ENV["KERAS_HOME"] = str(out / "home")   # keras writes its keras.json there, not in ~/.keras
    marker = str(out / "RAN")
    subprocess.run([sys.executable, "-c", BUILD, str(out), marker], env=ENV, check=True, capture_output=True,
                   timeout=600)
    if os.path.isdir(marker):   # (building the model ran the Lambda once)
        os.rmdir(marker)
    return out, marker


def test_a_torch_module_wrapper_pickle(saved):
    out, marker = saved
    with zipfile.ZipFile(out / "wrapper.keras") as z:
        config = json.loads(z.read("config.json"))
    layer = next(x for x in config["config"]["layers"] if x["class_name"] == "TorchModuleWrapper")
    assert isinstance(layer["config"]["module"], str)   # keras itself keeps the module as a base64 pickle
    assert scan_path(str(out / "wrapper.keras"))["status"] == "unsafe"
    layer["config"]["module"] = base64.b64encode(pickle.dumps(Mkdir(marker))).decode()
    path = _rewrite(str(out / "wrapper.keras"), str(out / "hostile-wrapper.keras"), json.dumps(config).encode())
    assert _loads(path, marker), "load_model(safe_mode=False) unpickles it"
    r = scan_path(path)
    assert r["status"] == "unsafe" and "keras TorchModuleWrapper (a pickled torch module)" in r["unsafe_globals"]
    assert not r["unknown"], r["unknown"]   # (its base64 was read as a module name)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig", "utf-32"])
def test_a_config_in_another_unicode_encoding(saved, encoding):
    out, marker = saved
    with zipfile.ZipFile(out / "lambda.keras") as z:
        text = z.read("config.json").decode()
    path = _rewrite(str(out / "lambda.keras"), str(out / f"lambda-{encoding}.keras"), text.encode(encoding))
    assert _loads(path, marker), "keras decodes it and runs the Lambda"
    r = scan_path(path)
    assert r["status"] == "unsafe" and "keras Lambda (marshalled bytecode)" in r["unsafe_globals"], r["verdict"]


@pytest.mark.parametrize("cls", ["StringLookup", "IntegerLookup", "TextVectorization"])
def test_a_lookup_layer_naming_a_vocabulary_file(saved, cls):
    out, _ = saved
    with zipfile.ZipFile(out / "lambda.keras") as z:
        config = json.loads(z.read("config.json"))
    config["config"]["layers"][1] = {"module": "keras.layers", "class_name": cls, "registered_name": None,
                                     "config": {"name": "lookup", "vocabulary": "/etc/hostname"}}
    path = _rewrite(str(out / "lambda.keras"), str(out / f"{cls}.keras"), json.dumps(config).encode())
    r = scan_path(path)
    assert r["status"] == "unsafe" and f"{cls} vocabulary = '/etc/hostname'" in r["verdict"], r["verdict"]
