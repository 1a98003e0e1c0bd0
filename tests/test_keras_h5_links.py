"""HDF5 links in a Keras 3 weights tree (`.weights.h5`, a `.keras` archive's model.weights.h5), as keras 3 itself
(torch backend, at test time) loads them: a dataset hard-linked under a second variable's path is loaded into both
variables (two names, one storage: an alias, and count_params() counts both); a soft or external link is refused by
keras ("Not allowed: H5 file with SoftLink", keras/src/saving/saving_lib.py) and by ckptstat in one line, never
followed (the external file is never opened)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile

import h5py
import numpy as np
import pytest

from ckptstat import open_checkpoint, summarize
from ckptstat.analysis.ties import audit

KERNEL, LINKED = "layers/dense/vars/0", "layers/dense_1/vars/0"


@pytest.fixture(scope="module")
def keras_env(tmp_path_factory):
    d = tmp_path_factory.mktemp("keras-links")
    os.environ.setdefault("KERAS_BACKEND", "torch")   # read when keras is first imported; TF is not installed
    os.environ.setdefault("KERAS_HOME", str(d / "home"))
    keras = pytest.importorskip("keras")

    def build():
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), keras.layers.Dense(4)])

    build().save(d / "base.keras")
    with zipfile.ZipFile(d / "base.keras") as z:
        (d / "base.weights.h5").write_bytes(z.read("model.weights.h5"))
    return d, keras, build


def _linked(d, kind: str) -> str:
    path = d / f"{kind}.weights.h5"
    shutil.copy(d / "base.weights.h5", path)
    with h5py.File(d / "outside.h5", "w") as g:
        g["k"] = np.full((4, 4), 7, np.float32)
    with h5py.File(path, "a") as f:
        del f[LINKED]
        f[LINKED] = {"hard": lambda: f[KERNEL], "soft": lambda: h5py.SoftLink("/" + KERNEL),
                     "external": lambda: h5py.ExternalLink(str(d / "outside.h5"), "/k")}[kind]()
    return str(path)


def _archive(d, weights: str) -> str:
    path = d / (os.path.basename(weights).replace(".weights.h5", "") + ".keras")
    with zipfile.ZipFile(d / "base.keras") as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            data = open(weights, "rb").read() if info.filename == "model.weights.h5" else zin.read(info)
            zout.writestr(info, data)
    return str(path)


@pytest.mark.parametrize("archive", [False, True])
def test_hard_link_is_two_variables_over_one_storage(keras_env, archive):
    d, keras, build = keras_env
    path = _linked(d, "hard")
    model = build()
    model.load_weights(path)
    kernels = [keras.ops.convert_to_numpy(layer.kernel) for layer in model.layers]
    np.testing.assert_array_equal(kernels[0], kernels[1])   # keras loaded the one dataset into both
    if archive:
        path = _archive(d, path)
    ckpt = open_checkpoint(path)
    for name, kernel in zip((KERNEL, LINKED), kernels):
        np.testing.assert_array_equal(ckpt.read(name), kernel)
    r = summarize(path)
    assert r["parameters"]["unique"] == model.count_params() - kernels[1].size
    rows = {row["convention"]: row["params"] for row in audit(ckpt)["counting"]["rows"]}
    assert rows["every name counted"] == model.count_params()


@pytest.mark.parametrize("kind", ["soft", "external"])
@pytest.mark.parametrize("archive", [False, True])
def test_soft_and_external_links_are_refused_as_keras_refuses_them(keras_env, kind, archive):
    d, keras, build = keras_env
    path = _linked(d, kind)
    with pytest.raises(ValueError, match="Not allowed: H5 file with"):
        build().load_weights(path)
    if archive:
        path = _archive(d, path)
    p = subprocess.run([sys.executable, "-m", "ckptstat", "summary", path], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 1 and p.stdout == "", p
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("ckptstat: error:") and "Traceback" not in p.stderr
    assert f"{LINKED}' is an HDF5 {'SoftLink' if kind == 'soft' else 'ExternalLink'}" in p.stderr, p.stderr


def test_hard_links_to_datasets_already_met_are_bounded(tmp_path):
    """A hard link costs ~100 bytes of file and ~0.5 ms to open: a 4.8 MB file linking one dataset 50,000 times took
    44 s. Links naming a dataset already met are read up to one per dataset + ALIAS_FLOOR, then the file is refused."""
    from ckptstat.errors import CorruptCheckpointError
    from ckptstat.formats.keras_h5 import ALIAS_FLOOR

    for links, refused in ((ALIAS_FLOOR, False), (3 * ALIAS_FLOOR, True)):
        path = tmp_path / f"{links}.weights.h5"
        with h5py.File(path, "w") as f:
            d = f.create_dataset(KERNEL, data=np.ones((2, 2), np.float32))
            for i in range(links):
                f[f"layers/copy/vars/{i}"] = d
        if refused:
            with pytest.raises(CorruptCheckpointError, match="hard links name datasets already met"):
                open_checkpoint(str(path))
        else:
            assert len(open_checkpoint(str(path)).tensors) == links + 1
