"""`ckptstat diff --map`: the rules are applied to the names as stored (docs/diff.md, "Name alignment", step 1),
before the built-in TF -> PyTorch rename. Was: the rename ran first (`layers/dense/vars/0` became
`layers.dense.vars.0`), so a rule written against a Keras 3 file's stored names, as h5py lists them, matched
nothing and every tensor read `added` / `removed`, exit 1.

Oracle: a Keras 3 Dense (KERAS_BACKEND=torch) saved by keras, a torch.nn.Linear given its kernel transposed and
saved by safetensors; h5py lists the stored variable names."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import pytest
import torch
from safetensors.torch import save_file

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")


def _diff(*args: str) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "-m", "ckptstat", "diff", *args, "--json"], capture_output=True, text=True)
    return p.returncode, json.loads(p.stdout)


def test_map_rules_see_the_stored_names(tmp_path) -> None:
    inp = keras.Input((8,))
    model = keras.Model(inp, keras.layers.Dense(4, name="dense")(inp))
    model.save_weights(str(tmp_path / "k.weights.h5"))
    kernel, bias = model.get_layer("dense").get_weights()
    stored: list[str] = []
    with h5py.File(tmp_path / "k.weights.h5") as f:
        f.visititems(lambda n, o: stored.append(n) if isinstance(o, h5py.Dataset) else None)
    assert sorted(stored) == ["layers/dense/vars/0", "layers/dense/vars/1"]
    lin = torch.nn.Linear(8, 4)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(kernel.T))
        lin.bias.copy_(torch.from_numpy(bias))
    w = lin.weight.detach().clone()
    save_file({"dense.weight": w, "dense.bias": lin.bias.detach()}, str(tmp_path / "t.safetensors"))
    w2 = w.clone()
    w2[1, 3] += 0.5
    save_file({"dense.weight": w2, "dense.bias": lin.bias.detach()}, str(tmp_path / "t2.safetensors"))
    rules = tmp_path / "map.txt"
    rules.write_text("^layers/(\\w+)/vars/0$ -> \\1.weight\n^layers/(\\w+)/vars/1$ -> \\1.bias\n")

    rc, r = _diff(str(tmp_path / "k.weights.h5"), str(tmp_path / "t.safetensors"), "--map", str(rules))
    by = {t["name"]: t for t in r["tensors"]}
    assert rc == 0 and sorted(by) == ["dense.bias", "dense.weight"]
    assert by["dense.weight"]["a_name"] == "layers/dense/vars/0" and by["dense.weight"]["transposed"] == "a"
    assert {t["status"] for t in by.values()} == {"equal"}

    rc, r = _diff(str(tmp_path / "k.weights.h5"), str(tmp_path / "t2.safetensors"), "--map", str(rules))
    by = {t["name"]: t for t in r["tensors"]}
    assert rc == 1 and by["dense.weight"]["status"] == "values" and by["dense.bias"]["status"] == "equal"
    assert by["dense.weight"]["max_abs"] == (w2.double() - torch.from_numpy(kernel.T).double()).abs().max().item()
