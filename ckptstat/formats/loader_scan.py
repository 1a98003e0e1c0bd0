"""`ckptstat scan` of files that other loaders than torch.load unpickle or execute (docs/security.md):

- numpy `.npy`, and `.npz` members: an array whose dtype holds Python objects (`|O`, or a structured
  dtype with an object field) stores its values as a pickle after the header, which
  `np.load(allow_pickle=True)` hands to pickle.load (numpy/lib/format.py `read_array`). The pickle is
  walked as torch's are (formats/torch/pickle_walk.py, nothing unpickled); the globals numpy's own
  `ndarray.__reduce__` writes (`numpy.core.multiarray._reconstruct`, `numpy.ndarray`, `numpy.dtype`) are
  allowed, every other one is a finding. Arrays of plain dtypes hold no pickle.
- Keras `.keras` archives: a `Lambda` layer (or any `__lambda__` object) in `config.json` carries its
  function as marshalled Python bytecode, which `keras.saving.load_model(..., safe_mode=False)` rebuilds
  and runs (keras/src/saving/serialization_lib.py `deserialize_keras_object`, `__lambda__`;
  keras/src/utils/python_utils.py `func_load`). Each one is a finding.

The report is `ckptstat.scan/1`, as for a torch file; `torch_load` says which loader was followed.
"""
from __future__ import annotations

import json
import os
import zipfile
from typing import IO, Any

from ..core.files import open_regular
from ..errors import CorruptCheckpointError, reading
from .numpy_npy import MAX_HEADER, MAX_MEMBERS, _header
from .torch.containers import data_offset, zip_open
from .torch.pickle_walk import walk
from .torch.scan import SCAN_SCHEMA, Trace, report
from .torch.streams import FileWindow, InflateSource

# What np.save's pickle of an object array imports (ndarray.__reduce__, numpy 1.x and 2.x module names).
NUMPY_OWN = frozenset({"numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct", "numpy.ndarray",
                       "numpy.dtype", "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar"})
MAX_CONFIG = 16 << 20
MAX_NODES = 1_000_000   # JSON values looked at in a Keras config


def _has_objects(descr: object) -> bool:
    """Whether an .npy descr makes numpy pickle the values (numpy's own dtype.hasobject)."""
    import numpy as np

    try:
        return bool(np.lib.format.descr_to_dtype(descr).hasobject)  # type: ignore[arg-type]
    except Exception:   # noqa: BLE001 - a descr numpy cannot read: np.load raises before any pickle
        return False


def _walk_array(t: Trace, f: IO[bytes], member: str, head: bytes, start: int | None, src_of: Any) -> bool:
    """Walk the pickle of one .npy stream's object array; False when its dtype holds no objects (no pickle)."""
    at, header = _header(t.path, head, member)
    if not _has_objects(header["descr"]):
        return False
    w = walk(src_of(at), member, None if start is None else start + at)
    t.reach(w)
    if w.failure:
        t.notes.append(f"{member}: np.load(allow_pickle=True) raises at offset {w.fail_at}: {w.failure}")
    return True


def _npy(t: Trace, f: IO[bytes], size: int) -> None:
    t.format = "numpy (npy)"
    f.seek(0)
    head = f.read(12 + MAX_HEADER)
    if not _walk_array(t, f, os.path.basename(t.path), head, 0, lambda at: FileWindow(f, at, size - at)):
        t.notes.append("its dtype holds no Python objects: np.load reads no pickle")


def _npz(t: Trace, f: IO[bytes], size: int, zf: zipfile.ZipFile) -> None:
    t.format = "numpy (npz)"
    members = [i for i in zf.infolist() if i.filename.endswith(".npy")]
    if len(members) > MAX_MEMBERS:   # the reader's own bound (formats/numpy_npy.py): never walked one by one
        t.unknown.append(f"the archive lists {len(members):,} .npy members; scan walks at most {MAX_MEMBERS:,}")
        return
    plain = 0
    for info in members:
        start = data_offset(t.path, f, info, size)
        if info.compress_type == zipfile.ZIP_STORED:
            f.seek(start)
            head = f.read(min(info.file_size, 12 + MAX_HEADER))
            plain += not _walk_array(t, f, info.filename, head, start,
                                     lambda at, s=start, n=info.file_size: FileWindow(f, s + at, n - at))
            continue
        if info.compress_type != zipfile.ZIP_DEFLATED:
            t.unknown.append(f"{info.filename}: compression method {info.compress_type}, which scan does not follow")
            continue
        src = InflateSource(f, start, info.compress_size, info.file_size)
        head = src.read(min(info.file_size, 12 + MAX_HEADER))

        def inflated(at: int, s: int = start, i: zipfile.ZipInfo = info) -> InflateSource:
            out = InflateSource(f, s, i.compress_size, i.file_size)
            out.read(at)
            return out
        plain += not _walk_array(t, f, info.filename, head, None, inflated)
    if plain:
        t.notes.append(f"{plain} member(s) of dtypes without Python objects: np.load reads no pickle for them")


def _lambdas(config: object) -> list[str]:
    """Where a Keras config holds a function as bytecode: every `Lambda` layer and `__lambda__` object,
    walked without recursion (a config nested thousands deep is only deep, not a crash)."""
    found: list[str] = []
    stack: list[tuple[object, str]] = [(config, "config")]
    seen = 0
    while stack:
        node, where = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise CorruptCheckpointError("config.json", f"more than {MAX_NODES:,} values")
        if isinstance(node, dict):
            cls = node.get("class_name")
            inner = node.get("config")
            name = inner.get("name") if isinstance(inner, dict) else None
            if cls == "Lambda":
                found.append(f"{where}: Lambda layer {str(name)[:80]!r}")
            elif cls == "__lambda__":
                found.append(f"{where}: a __lambda__ function (marshalled bytecode)")
            stack.extend((v, f"{where}.{str(k)[:40]}") for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
    return found


def _keras(path: str, zf: zipfile.ZipFile) -> dict[str, Any]:
    info = zf.getinfo("config.json")
    if info.file_size > MAX_CONFIG:
        raise CorruptCheckpointError(path, f"config.json in the archive is {info.file_size:,} bytes")
    with zf.open(info) as member:
        config = json.loads(member.read(MAX_CONFIG + 1).decode("utf-8"))
    found = sorted(set(_lambdas(config)))
    unsafe = ["keras Lambda (marshalled bytecode)"] if found else []
    verdict = ("UNSAFE: keras.saving.load_model(safe_mode=False) would run the Python bytecode of: " + "; ".join(found[:4])
               + (f" ... ({len(found)} in all)" if len(found) > 4 else "")) if found else \
        "safe: config.json holds no Lambda layer or __lambda__ function (no bytecode for load_model to run)"
    return {
        "schema": SCAN_SCHEMA, "path": path, "format": "keras (zip)", "status": "unsafe" if found else "safe",
        "torch_load": "not torch.load's: keras.saving.load_model reads config.json (safe_mode=True, the default, refuses "
                      "lambdas)",
        "pickles": [], "globals": [], "unsafe_globals": unsafe, "unreached_unsafe_globals": [],
        "findings": [{"record": "config.json", "offset": 0, "file_offset": None, "opcode": "Lambda", "global": where,
                      "why": "its function is marshalled Python bytecode"} for where in found],
        "unknown": [], "notes": [], "weights_only_loadable": False, "weights_only_refusal": None,
        "would_run_code": bool(found), "verdict": verdict,
    }


def _numpy_report(t: Trace) -> dict[str, Any]:
    for w, _ in t.walks:   # numpy's own reconstruction globals are what every object array imports
        w.findings = [fd for fd in w.findings if fd.name not in NUMPY_OWN]
        w.globals = {n: ok or n in NUMPY_OWN for n, ok in w.globals.items()}
    r = report(t)
    why = "np.load(allow_pickle=True) imports it (and may call it)"
    for f in [*r["findings"], *(f for p in r["pickles"] for f in p["findings"])]:
        f["why"] = why
    r["torch_load"] = "not torch.load's: np.load(allow_pickle=True) unpickles object arrays (allow_pickle=False refuses)"
    r["weights_only_loadable"] = False
    if r["status"] == "unsafe":
        r["verdict"] = "UNSAFE: np.load(allow_pickle=True) would import and may call: " + ", ".join(r["unsafe_globals"])
    elif r["status"] == "safe":
        objects = sum(1 for _ in t.walks)
        r["verdict"] = (f"safe: {objects} object array(s), whose pickles import only numpy's own reconstruction"
                        if objects else "safe: no object array (np.load reads no pickle)")
    return r


def scan_other(path: str) -> dict[str, Any] | None:
    """The scan report of a numpy or Keras file, or None when `path` is neither (torch.load's path then)."""
    with reading(path), open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(4)
        if head[:4] == b"\x93NUM":
            t = Trace(path)
            _npy(t, f, size)
            return _numpy_report(t)
        if head != b"PK\x03\x04":
            return None
        try:
            zf = zip_open(path, f)
        except CorruptCheckpointError:   # a damaged zip: what torch.load makes of it (and the remote scan says the same)
            return None
        names = zf.namelist()
        if "config.json" in names and "model.weights.h5" in names:
            return _keras(path, zf)
        if names and all(n.endswith(".npy") for n in names):
            t = Trace(path)
            _npz(t, f, size, zf)
            return _numpy_report(t)
    return None
