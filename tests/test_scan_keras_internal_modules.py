"""A Keras non-modeling API named in a `.keras` config by the internal module that defines it
(`keras.src.utils.file_utils.get_file` for keras.utils.get_file): keras before 3.11 imports any module of its own
package and takes the named attribute (the KerasSaveable check came with keras PR 21429), so the internal path
calls the same function as the public one (CVE-2025-8747 get_file, CVE-2025-9906 enable_unsafe_deserialization).
scan must say UNSAFE, as it does for the public name. The list and each function's defining module come from keras
3.15 itself (serialization_lib.NON_MODELING_APIS, the function's __module__), never from ckptstat's copy."""
from __future__ import annotations

import importlib
import json
import os
import zipfile

import pytest

from ckptstat.analysis.scan import scan_path


def _internal_names() -> list[tuple[str, str, str]]:
    os.environ.setdefault("KERAS_BACKEND", "torch")   # read when keras is first imported; TF is not installed
    pytest.importorskip("keras")
    from keras.src.saving import serialization_lib

    out = []
    for api in sorted(serialization_lib.NON_MODELING_APIS):
        public, _, name = api.rpartition(".")
        fn = getattr(importlib.import_module(public), name)
        assert getattr(importlib.import_module(fn.__module__), name) is fn   # the same function, by its own module
        out.append((api, fn.__module__, name))
    return out


def test_non_modeling_apis_by_their_internal_module_are_unsafe(tmp_path):
    for api, module, name in _internal_names():
        assert module.startswith("keras.src."), (api, module)
        layer = {"module": "keras.layers", "class_name": "Dense", "registered_name": None,
                 "config": {"name": "dense", "units": 2, "activation": {"module": module, "class_name": "function",
                                                                        "config": name, "registered_name": "function"}}}
        config = {"module": "keras", "class_name": "Sequential", "registered_name": None,
                  "config": {"name": "sequential", "layers": [layer]}}
        path = tmp_path / f"{name}.keras"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
            z.writestr("config.json", json.dumps(config))
            z.writestr("model.weights.h5", b"")
        r = scan_path(str(path))
        assert r["status"] == "unsafe" and f"{module}.{name}" in r["verdict"], (api, r["verdict"])
