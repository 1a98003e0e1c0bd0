"""`ckptstat scan` of joblib files as joblib.load reads them (analysis/scan/joblib_arrays.py): the arrays joblib writes
inline after each wrapper are read past, so the rest of the pickle is walked; object arrays' nested pickles are
walked; joblib < 0.10's wrappers, whose arrays joblib.load reads with np.load(allow_pickle=True) from the file they
name, judged by that name. The files and the oracle come from joblib 1.6 and scikit-learn themselves
(fixtures/make_joblib.py, fixtures/expected_joblib.json: whether joblib.load returned, whether it ran the payload,
and every global its unpickler's find_class was asked for)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURES

from ckptstat.analysis.scan import scan_path
from ckptstat.analysis.scan.joblib_arrays import JOBLIB_OWN, walk_joblib
from ckptstat.analysis.scan.loaders import NUMPY_OWN
from ckptstat.formats.torch.allowlist import allowed_name
from ckptstat.formats.torch.streams import BytesSource

with open(os.path.join(FIXTURES, "expected_joblib.json")) as _f:
    ORACLE = json.load(_f)["files"]
JOBLIB = os.path.join(FIXTURES, "joblib")
OWN = JOBLIB_OWN | NUMPY_OWN


def _names(r: dict) -> set[str]:
    return {g["name"] for g in r["globals"]}


@pytest.mark.parametrize("name", sorted(ORACLE))
def test_each_file_as_joblib_load_runs_it(name):
    o, r = ORACLE[name], scan_path(os.path.join(JOBLIB, name))
    assert o["loads"], name
    outside = sorted(n for n in o["imports"] if n not in OWN and not allowed_name(n))
    if o["executes"]:
        assert r["status"] != "safe", (name, r["verdict"])
    if name.startswith("crafted-frame"):     # the frame runs past the wrapper: what joblib reads next is not told;
        # torch.load (whose C unpickler reads on within the frame) would run the payload itself
        assert r["unsafe_globals"] == ["builtins.open"] and "a FRAME runs past" in " ".join(r["notes"]), r
        return
    if name == "compat-outside.joblib":     # np.load(allow_pickle=True) of the planted file, which ran the payload
        assert r["status"] == "unsafe" and r["unsafe_globals"] == ["<joblib array file '../joblib-planted/planted.npy'>"]
    elif name == "compat-beside.joblib":
        assert r["status"] == "unknown" and "compat-beside.joblib_01.npy" in r["verdict"], r["verdict"]
    else:
        # every global joblib's find_class was asked for, in the walk (the object arrays' nested pickles too), and
        # nothing else: the walk read each array's bytes as joblib does, then the rest of the pickle
        assert _names(r) == set(o["imports"]), name
        assert r["unsafe_globals"] == outside and r["status"] == ("unsafe" if outside else "safe"), r["verdict"]
        assert not r["unknown"] and not any("joblib.load raises" in n for n in r["notes"]), (r["unknown"], r["notes"])
    c = o["compressor"]
    assert r["format"] == ("joblib pickle" if c == "plain" else "compressed pickle (joblib < 0.10 zfile)"
                           if c == "zfile" else f"compressed pickle ({c})")


def test_sklearn_models_name_their_classes_and_a_payload_after_them():
    """scikit-learn's estimators are classes outside torch's allowlist (joblib.load imports and sets their state):
    named, as any such class is; a payload after a forest's trees (structured arrays) named beside them."""
    r = scan_path(os.path.join(JOBLIB, "sklearn-forest-payload-zlib.joblib"))
    assert "io.open" in r["unsafe_globals"] and "sklearn.tree._tree.Tree" in r["unsafe_globals"]
    assert "array(s) joblib wrote inline" in " ".join(r["notes"])


def test_the_cli_exit_codes_and_a_folder(tmp_path, cli):
    for name in ("arrays-plain.joblib", "dtypes-plain.joblib", "payload-after-array-plain.joblib",
                 "compat-beside.joblib", "compat-beside.joblib_01.npy", "compat-outside.joblib"):
        shutil.copy(os.path.join(JOBLIB, name), tmp_path / name)
    rc, out, _ = cli("scan", str(tmp_path / "arrays-plain.joblib"), "--json")
    assert rc == 0 and json.loads(out)["status"] == "safe"
    rc, out, _ = cli("scan", str(tmp_path / "payload-after-array-plain.joblib"), "--json")
    assert rc == 1 and json.loads(out)["unsafe_globals"] == ["io.open"]
    rc, out, _ = cli("scan", str(tmp_path), "--json")
    assert rc == 1
    assert {f["path"]: f["status"] for f in json.loads(out)["files"]} == {
        "arrays-plain.joblib": "safe", "dtypes-plain.joblib": "safe", "payload-after-array-plain.joblib": "unsafe",
        "compat-beside.joblib": "unknown", "compat-beside.joblib_01.npy": "safe", "compat-outside.joblib": "unsafe"}


def test_over_http_the_same():
    """`ckptstat scan URL` (a subprocess, a loopback server): the same report as the local file's."""
    from remote_server import Server

    with Server(JOBLIB) as s:
        for name in ("dtypes-plain.joblib", "payload-in-object-array-plain.joblib", "payload-after-array-gzip.joblib"):
            p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", f"{s.url}/{name}", "--json"],
                               capture_output=True, text=True, timeout=300)
            remote, local = json.loads(p.stdout), scan_path(os.path.join(JOBLIB, name))
            assert p.returncode == (0 if local["status"] == "safe" else 1), (name, p.stderr)
            for k in ("status", "findings", "unknown", "globals", "format"):
                assert remote[k] == local[k], (name, k)


def test_a_cut_array_is_where_joblib_load_raises(tmp_path):
    """joblib reads each array's bytes whole (`_read_bytes` raises at the end of the file): nothing after runs."""
    data = open(os.path.join(JOBLIB, "payload-after-array-plain.joblib"), "rb").read()
    p = tmp_path / "cut.joblib"
    first = 11 + int.from_bytes(data[3:11], "little")     # the first FRAME's end: the wrapper's BUILD
    p.write_bytes(data[:first + 1 + data[first] + 4])      # the padding, then 4 of the array's 32 bytes
    r = scan_path(str(p))
    assert r["status"] == "safe" and "joblib.load raises" in " ".join(r["notes"]), r["verdict"]


def test_a_build_of_an_object_that_may_be_a_wrapper_is_unknown():
    """An object an allowed call made from a global (it could hand one back) is built after a wrapper class was
    imported: joblib reads an array there if it is one, so what follows is not told."""
    p = (b"\x80\x02cjoblib.numpy_pickle\nNumpyArrayWrapper\n0"                          # the class imported, popped
         b"ccollections\nOrderedDict\ncnumpy\nndarray\n\x85R}b.")                     # OrderedDict(ndarray), BUILD
    w, _ = walk_joblib(BytesSource(p), "p", 0, NUMPY_OWN)
    assert w.incomplete and "cannot tell from a joblib array wrapper" in w.incomplete
    assert not walk_joblib(BytesSource(p.replace(b"joblib.numpy_pickle\nNumpyArrayWrapper", b"numpy\nndarray")),
                           "p", 0, NUMPY_OWN)[0].incomplete


@pytest.mark.parametrize("state, why", [
    (b"}(X\x05\x00\x00\x00shapecnumpy\nndarray\nX\x05\x00\x00\x00dtypeNu", "shape"),    # a shape that is a global
    (b"}(X\x05\x00\x00\x00shape)X\x05\x00\x00\x00dtypeNu", "dtype"),                    # no dtype it can rebuild
])
def test_a_wrapper_scan_cannot_size_is_unknown(state, why):
    p = b"\x80\x02cjoblib.numpy_pickle\nNumpyArrayWrapper\n)\x81" + state + b"b."
    w, _ = walk_joblib(BytesSource(p), "p", 0, NUMPY_OWN)
    assert w.incomplete and why in w.incomplete, w.incomplete


def test_a_slot_state_that_may_set_the_class_is_unknown():
    """pickle's load_build sets a (dict, slots) state's slots with setattr: `__class__` among them makes another
    object of a wrapper (or a wrapper of another object), so whether joblib reads an array there is not told."""
    p = (b"\x80\x02cjoblib.numpy_pickle_compat\nNDArrayWrapper\n)\x81"
         b"}}X\t\x00\x00\x00__class__cjoblib.numpy_pickle\nNumpyArrayWrapper\ns\x86b.")
    w, _ = walk_joblib(BytesSource(p), "p", 0, NUMPY_OWN)
    assert w.incomplete and "__class__" in w.incomplete, w.incomplete


def test_torch_loads_own_reading_is_kept_beside_joblibs():
    """torch.load raises in a joblib file (the array bytes are no opcodes) after reading what comes before them: a
    payload there runs under both loaders. The file's report is joblib.load's; torch.load's is in its notes."""
    r = scan_path(os.path.join(JOBLIB, "payload-plain.joblib"))
    assert r["format"] == "joblib pickle" and r["unsafe_globals"] == ["io.open"]
    assert any(n.startswith("torch.load (which raises in the file) reads it too: UNSAFE") for n in r["notes"])
    r = scan_path(os.path.join(JOBLIB, "payload-after-array-plain.joblib"))   # torch.load raises before it
    assert not any(n.startswith("torch.load") for n in r["notes"])
