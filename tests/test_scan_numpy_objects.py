"""`ckptstat scan` of np.save / np.savez object arrays: the safe verdict names what the pickles import beyond numpy's
own reconstruction (an OrderedDict inside the array imports collections.OrderedDict), and says "only numpy's own"
only when that is all. Oracle: the globals pickle's own unpickler imports from the pickle np.save wrote."""
from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

from ckptstat.analysis.scan import scan_path


class _Recording(pickle.Unpickler):
    """pickle's own unpickler, noting each global it imports (the pickles are this test's own, benign)."""

    def __init__(self, f: io.BytesIO):
        super().__init__(f)
        self.names: set[str] = set()

    def find_class(self, module: str, name: str) -> object:
        self.names.add(f"{module}.{name}")
        return super().find_class(module, name)


def _pickle_globals(data: bytes) -> set[str]:
    u = _Recording(io.BytesIO(data))
    u.load()
    return u.names


def _npy_globals(raw: bytes) -> set[str]:
    """What the pickle of one .npy (an object array's values) imports; nothing for a plain array."""
    f = io.BytesIO(raw)
    major, _ = np.lib.format.read_magic(f)
    read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    _, _, dtype = read_header(f)
    return _pickle_globals(f.read()) if dtype.hasobject else set()


def _objects(*values: object) -> np.ndarray:
    a = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        a[i] = v
    return a


CASES = {
    "ordered_dict.npy": _objects(OrderedDict(a=1, b=[2.0]), [3, 4]),
    "lists.npy": _objects([1, 2], [3.5, "x"]),
    "mixed.npz": {"od": _objects(OrderedDict(k="v")), "lists": _objects([1], [2]), "plain": np.arange(3)},
    "lists.npz": {"lists": _objects([1], ["a", None])},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_verdict_names_what_the_pickles_import(tmp_path, name):
    path = tmp_path / name
    value = CASES[name]
    if isinstance(value, dict):
        np.savez(path, **value)
        with zipfile.ZipFile(path) as z:
            imported = set().union(*(_npy_globals(z.read(m)) for m in z.namelist()))
            objects = sum(np.load(path, allow_pickle=True)[k].dtype.hasobject for k in value)
    else:
        np.save(path, value, allow_pickle=True)
        imported = _npy_globals(path.read_bytes())
        objects = 1
    others = sorted(n for n in imported if n.split(".")[0] != "numpy")
    r = scan_path(str(path))
    assert r["status"] == "safe" and {g["name"] for g in r["globals"]} == imported, r
    assert r["verdict"].startswith(f"safe: {objects} object array(s)"), r["verdict"]
    if others:
        assert "only numpy's own" not in r["verdict"] and all(n in r["verdict"] for n in others), r["verdict"]
    else:
        assert "import only numpy's own reconstruction" in r["verdict"], r["verdict"]
    assert ("collections.OrderedDict" in others) == ("ordered_dict" in name or "mixed" in name)
