"""Header fields the fuzz red-team pass found read differently from the library that reads the format, checked through
the CLI as a subprocess against that library:

- a safetensors entry with members beside dtype, shape and data_offsets: the safetensors library ignores them (its
  serde struct has no deny_unknown_fields) and reads the tensor; ckptstat refused the file ("entry must have exactly
  dtype, shape and data_offsets");
- an .npy header whose shape holds a bool, `(True,)`: np.load refuses it, and so does ckptstat, but its line said
  "dimension 0 is larger than 2^63-1" (True is an int to isinstance); now "is not an integer", as for a float."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
from safetensors import SafetensorError, safe_open
from safetensors.numpy import load_file


def run(*args: str) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "ckptstat", *args], capture_output=True,
                       env={**os.environ, "COLUMNS": "200"})
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def _safetensors(path, header: dict, data: bytes) -> str:
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return str(path)


@pytest.mark.parametrize("extra", [{"x": 1}, {"note": {"nested": [1, "a:b"]}}, {"quant": None, "z": "y"}])
def test_safetensors_entry_with_other_members_reads(tmp_path, extra):
    values = np.array([1.5, -2.0, 3.25, 8.0], np.float32)
    entry = {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16], **extra}
    path = _safetensors(tmp_path / "extra.safetensors", {"__metadata__": {"format": "pt"}, "w": entry},
                        values.tobytes())
    expected = load_file(path)["w"]   # the oracle reads it
    with safe_open(path, "np") as f:
        assert list(f.keys()) == ["w"]
    rc, out, err = run("tensors", "--json", path)
    assert rc == 0 and err == "", err
    (t,) = json.loads(out)["tensors"]
    assert (t["name"], t["dtype"], t["shape"], t["bytes"]) == ("w", "F32", list(expected.shape), expected.nbytes)
    rc, out, err = run("stats", "--json", path)
    assert rc == 0 and err == "", err
    (s,) = json.loads(out)["tensors"]
    assert (s["min"], s["max"], s["mean"]) == (float(expected.min()), float(expected.max()),
                                               float(expected.astype(np.float64).mean()))


@pytest.mark.parametrize("missing", ["dtype", "shape", "data_offsets"])
def test_safetensors_entry_missing_a_member_is_refused(tmp_path, missing):
    entry = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16], "x": 1}
    del entry[missing]
    path = _safetensors(tmp_path / "missing.safetensors", {"w": entry}, bytes(16))
    with pytest.raises(SafetensorError, match="missing field"):   # the oracle refuses it too
        load_file(path)
    rc, out, err = run("summary", path)
    assert rc == 1 and out == "" and err.count("\n") == 1 and path in err and "must have" in err, err


def test_npy_bool_dimension_is_not_an_integer(tmp_path):
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (True,), }"
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    path = tmp_path / "bool.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + bytes(4))
    with pytest.raises(TypeError):   # the oracle refuses it
        np.load(path)
    rc, out, err = run("summary", str(path))
    assert rc == 1 and out == "" and err.count("\n") == 1 and str(path) in err, err
    assert "dimension 0 is not an integer" in err and "2^63" not in err, err
