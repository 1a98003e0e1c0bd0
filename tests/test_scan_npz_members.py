"""`ckptstat scan` of zips np.load reads as `.npz`: NpzFile hands any member whose bytes start with the .npy magic to
read_array, whatever its name, and np.load opens every zip so. Escaped before (sixth red-team pass): a hostile object
array beside a README, or stored under a name without `.npy`, was "torch.load raises: ... is in no folder" (exit 2),
and a folder scan skipped it under a name like `weights.bin`. Oracle: the real np.load(allow_pickle=True), in a
throw-away process, reading every key, creates the payload's marker folder."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from ckptstat.analysis.scan import scan_path


class _Mkdir:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def _npy(value: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, value, allow_pickle=True)
    return buf.getvalue()


def _hostile(marker: str) -> bytes:
    a = np.empty(2, dtype=object)
    a[0], a[1] = _Mkdir(marker), "x"
    return _npy(a)


def _zip(path: str, members: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> str:
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def np_load_runs(path: str, marker: str) -> bool:
    """Whether the real np.load(path, allow_pickle=True), every key read, creates `marker` (a throw-away process)."""
    assert not os.path.exists(marker)
    code = "import numpy as np, sys\nz = np.load(sys.argv[1], allow_pickle=True)\nfor k in z.files:\n    z[k]\n"
    subprocess.run([sys.executable, "-c", code, path], capture_output=True, timeout=120)
    ran = os.path.isdir(marker)
    if ran:
        os.rmdir(marker)
    return ran


CASES = {   # name -> (members, compression)
    "beside_readme.npz": (lambda m: {"x.npy": _hostile(m), "README.txt": b"weights"}, zipfile.ZIP_STORED),
    "no_extension.npz": (lambda m: {"weights": _hostile(m)}, zipfile.ZIP_STORED),
    "no_extension_deflated.npz": (lambda m: {"ok.npy": _npy(np.ones(3)), "weights": _hostile(m)}, zipfile.ZIP_DEFLATED),
    "weights.bin": (lambda m: {"arr_0": _hostile(m)}, zipfile.ZIP_STORED),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_members_numpy_reads_by_their_bytes_are_scanned(tmp_path, name):
    marker = str(tmp_path / "RAN")
    members, method = CASES[name]
    path = _zip(str(tmp_path / name), members(marker), method)
    assert np_load_runs(path, marker)
    r = scan_path(path)
    assert r["status"] == "unsafe" and r["unsafe_globals"] == ["posix.mkdir"], r
    assert r["verdict"].startswith("UNSAFE: np.load(allow_pickle=True)"), r["verdict"]
    tree = scan_path(str(tmp_path))
    assert [(f["path"], f["status"]) for f in tree["files"]] == [(name, "unsafe")], tree
    assert not os.path.exists(marker)


def test_cli_flags_it_in_a_folder(cli, tmp_path):
    marker = str(tmp_path / "RAN")
    d = tmp_path / "run"
    d.mkdir()
    _zip(str(d / "weights.bin"), {"arr_0": _hostile(marker)})
    rc, out, _ = cli("scan", str(d), "--json")
    assert rc == 1 and json.loads(out)["totals"]["unsafe"] == 1
    assert np_load_runs(str(d / "weights.bin"), marker) and not os.path.exists(marker)


def test_a_plain_zip_of_arrays_and_text_is_safe(tmp_path):
    """What np.load reads of it runs nothing: safe (it was 'torch.load raises', exit 2), and a zip of no arrays at
    all is no numpy file (a folder scan does not list it)."""
    marker = str(tmp_path / "RAN")
    path = _zip(str(tmp_path / "mixed.npz"), {"a.npy": _npy(np.arange(3)), "b": _npy(np.ones(2)), "notes": b"x"})
    assert not np_load_runs(path, marker)
    r = scan_path(path)
    assert r["status"] == "safe" and r["format"] == "numpy (npz)", r
    _zip(str(tmp_path / "docs.zip"), {"README": b"\x93NUMP", "b/c.txt": b"hello"})
    assert [f["path"] for f in scan_path(str(tmp_path))["files"]] == ["mixed.npz"]


def _npy_with_header(header: str, body: bytes, major: int = 1) -> bytes:
    """An .npy stream as numpy lays it out (magic, version, length, header padded to 64 bytes), `header` as given."""
    fixed = 10 if major == 1 else 12
    text = header.encode("latin1")
    text += b" " * (-(fixed + len(text) + 1) % 64) + b"\n"
    length = len(text).to_bytes(2 if major == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([major, 0]) + length + text + body


def _object_pickle(marker: str) -> bytes:
    """What np.save writes after the header of a one-element object array holding a hostile object."""
    raw = _hostile(marker)
    f = io.BytesIO(raw)
    np.lib.format.read_magic(f)
    np.lib.format.read_array_header_1_0(f)
    return f.read()


HEADERS = {   # name -> (header, major): np.load(allow_pickle=True) reads each; np.load's default refuses the long one
    "python2_long.npy": ("{'descr': '|O', 'fortran_order': False, 'shape': (2L,), }", 1),
    "long_header.npy": ("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }" + " " * 20_000, 2),
}


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_headers_np_load_reads_with_allow_pickle_are_read(tmp_path, name):
    """np.load(allow_pickle=True) lifts max_header_size (read_array) and strips a Python 2 header's `L`s: scan refused
    both headers ("more than numpy reads", "not a Python literal": exit 2) while np.load ran the pickle after them."""
    marker = str(tmp_path / "RAN")
    header, major = HEADERS[name]
    data = _npy_with_header(header, _object_pickle(marker), major)
    path = tmp_path / name
    path.write_bytes(data)
    assert np_load_runs(str(path), marker)
    npz = _zip(str(tmp_path / "in.npz"), {"a.npy": data}, zipfile.ZIP_DEFLATED)
    assert np_load_runs(npz, marker)
    for p in (str(path), npz):
        r = scan_path(p)
        assert r["status"] == "unsafe" and r["unsafe_globals"] == ["posix.mkdir"], r
    assert not os.path.exists(marker)


def test_a_python2_header_reads_as_numpy_reads_it(cli, tmp_path):
    values = np.arange(6, dtype="<f4")
    path = tmp_path / "py2.npy"
    path.write_bytes(_npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }", values.tobytes()))
    want = np.load(path)
    rc, out, _ = cli("tensors", str(path), "--json")
    assert rc == 0 and [t["shape"] for t in json.loads(out)["tensors"]] == [list(want.shape)], out
