"""`ckptstat scan URL` of files numpy and Keras read: a remote `.npy`, `.npz` (also under a name torch.load would
take, `weights.bin`), `.keras` and Keras 2 `.h5` get the rules a local file gets (analysis/scan/loaders.py
`judge_other`, one table for both; analysis/scan/verdict.py `combine`). Escaped before (seventh red-team pass): the
remote scan followed torch.load's path alone, "torch.load raises ..." (exit 2; a folder URL: "unreadable") for files
whose object array or Lambda layer np.load(allow_pickle=True) or keras load_model(safe_mode=False) runs. Oracle: the
real loader, in a throw-away process, run on the bytes the loopback server serves, creates the payload's marker folder;
the CLI runs as a subprocess, as users start it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import zipfile

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import library_runner  # noqa: E402
from remote_server import Server  # noqa: E402
from test_hostile_keras_and_csv import _LAMBDA_MODEL, _USERBLOCK_H5  # noqa: E402
from test_scan_npz_members import _hostile, _npy, _zip  # noqa: E402

ROOT = os.path.dirname(HERE)
_NP_LOAD = ("import numpy as np, sys\nz = np.load(sys.argv[1], allow_pickle=True)\n"
            "[z[k] for k in z.files] if hasattr(z, 'files') else None\n")
_KERAS_LOAD = "import sys, keras\nkeras.saving.load_model(sys.argv[1], safe_mode=False)\n"
# name -> the loader that runs it (None: a benign file, judged safe)
LOADERS = {"hostile.npy": _NP_LOAD, "hostile.npz": _NP_LOAD, "weights.bin": _NP_LOAD, "saved.keras": _KERAS_LOAD,
           "model.h5": _KERAS_LOAD, "plain.npy": None}


def _env(tmp: str) -> dict[str, str]:
    return {**os.environ, "KERAS_BACKEND": "torch", "KERAS_HOME": os.path.join(tmp, "home"), "PYTHONPATH": ROOT}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The folder served: each hostile file written by its own library (np.save, keras' Model.save), the marker path
    its payload creates."""
    tmp = tmp_path_factory.mktemp("remote_np_keras")
    marker = str(tmp / "RAN")
    d = tmp / "models"
    d.mkdir()
    (d / "hostile.npy").write_bytes(_hostile(marker))
    _zip(str(d / "hostile.npz"), {"ok.npy": _npy(np.ones(3)), "weights": _hostile(marker)}, zipfile.ZIP_DEFLATED)
    _zip(str(d / "weights.bin"), {"arr_0": _hostile(marker)})
    (d / "plain.npy").write_bytes(_npy(np.arange(4.0)))
    env = _env(str(tmp))
    library_runner.python(_LAMBDA_MODEL, str(tmp), marker, env=env, check=True)
    os.replace(tmp / "saved.keras", d / "saved.keras")
    # (writes models/model.h5: the Lambda model behind a 512-byte user block)
    library_runner.python(_USERBLOCK_H5, str(tmp), marker, env=env, check=True)
    return str(tmp), str(d), marker


def _scan(*args: str, tmp: str) -> tuple[int, dict | None, str]:
    p = subprocess.run([sys.executable, "-m", "ckptstat", *args, "--json"], capture_output=True, text=True,
                       timeout=300, env=_env(tmp))
    return p.returncode, json.loads(p.stdout) if p.stdout.strip() else None, p.stderr


def _loader_runs(url: str, name: str, tmp: str, marker: str) -> bool:
    """Whether the real loader of `name`, run on the bytes the server sends, creates the marker (then removed)."""
    local = os.path.join(tmp, "downloaded_" + name)
    with urllib.request.urlopen(url, timeout=30) as reply, open(local, "wb") as out:
        out.write(reply.read())
    library_runner.python(LOADERS[name], local, env=_env(tmp))
    ran = os.path.isdir(marker)
    if ran:
        os.rmdir(marker)
    return ran


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_remote_numpy_and_keras_files_get_the_local_rules(served, name):
    tmp, d, marker = served
    with Server(d) as s:
        url = f"{s.url}/{name}"
        hostile = LOADERS[name] is not None
        if hostile:
            assert _loader_runs(url, name, tmp, marker), name
        rc, remote, err = _scan("scan", url, tmp=tmp)
        assert not os.path.exists(marker)
        assert remote is not None and "Traceback" not in err, err
        assert (rc, remote["status"]) == ((1, "unsafe") if hostile else (0, "safe")), remote
        rc_local, local, _ = _scan("scan", os.path.join(d, name), tmp=tmp)
        assert rc_local == rc and local is not None
        remote.pop("path"), local.pop("path"), remote.pop("fetched", None)
        assert remote == local   # the same rules, the same report


def test_a_folder_url_lists_them_as_the_local_folder(served):
    tmp, d, marker = served
    with Server(d) as s:
        rc, remote, err = _scan("scan", s.url + "/", tmp=tmp)
    rc_local, local, _ = _scan("scan", d, tmp=tmp)
    assert remote is not None and local is not None, err
    statuses = {f["path"]: f["status"] for f in remote["files"]}
    assert statuses == {n: "safe" if LOADERS[n] is None else "unsafe" for n in LOADERS}, statuses
    assert rc == rc_local == 1 and remote["files"] == local["files"]


def test_an_object_array_past_the_scan_budget_is_unknown_and_bounded(served, tmp_path):
    """A pickle bigger than `remote_scan_bytes`: never "safe" for bytes not read, and the server's own count of the
    bytes it sent stays far below the file."""
    tmp, _, marker = served
    a = np.empty(3, dtype=object)
    a[0], a[1], a[2] = "x" * 400_000, np.arange(3), None
    from test_scan_npz_members import _Mkdir

    a[2] = _Mkdir(marker)   # the hostile object after 400 KB of pickle
    (tmp_path / "big.npy").write_bytes(_npy(a))
    with Server(str(tmp_path)) as s:
        url = s.url + "/big.npy"
        assert _loader_runs(url, "hostile.npy", tmp, marker)
        sent = s.bytes_sent
        rc, r, err = _scan("--limit", "remote_scan_bytes=65536", "scan", url, tmp=tmp)
        assert rc == 1 and r is not None and r["status"] == "unknown", (r, err)
        assert "remote_scan_bytes" in r["verdict"]
        assert s.bytes_sent - sent < 300_000   # far less than the 400 KB file
