"""Files that another loader, or Python's zipfile, reads as something harmless and torch.load as a pickle it runs
(issue 31, fifth red-team pass; docs/security.md). Each is built in tests/polyglots.py; the real
`torch.load(weights_only=False)`, in a throw-away process, proves its payload runs (it creates a folder); then
`scan FILE` and `scan DIR` must say UNSAFE, and `audit` too."""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest
from polyglots import flax_pickle, truncated_head_pickle, two_directory_zip, zip_version_64

from ckptstat.analysis.scan import exit_code, scan_path
from ckptstat.cli import main

pytest.importorskip("torch")

# file name -> (builder, what it looked like before: the escape the issue reported)
CASES = {
    "weights.npz": (lambda m: two_directory_zip(m, "npz"), "an .npz of two float arrays: safe"),
    "model.keras": (lambda m: two_directory_zip(m, "keras"), "a Keras archive: safe"),
    "flax_model.msgpack": (flax_pickle, "no pickle to scan: a Flax msgpack checkpoint"),
    "model_best.pth.tar": (truncated_head_pickle, "a folder scan skipped it"),
    "checkpoint_last": (zip_version_64, "unknown; a folder scan skipped it"),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("polyglots")
    for name, (build, _) in CASES.items():
        (folder / name).write_bytes(build(str(folder / f"RAN-{name}")))
    return folder


@pytest.mark.parametrize("name", sorted(CASES))
def test_torch_load_runs_it_and_scan_says_unsafe(files, name):
    from polyglots import torch_load_runs

    assert torch_load_runs(str(files / name), str(files / f"RAN-{name}")), "the payload must run under torch.load"
    r = scan_path(str(files / name))
    assert r["status"] == "unsafe" and r["unsafe_globals"] == ["os.mkdir"], r["verdict"]
    assert r["torch_load"].startswith("torch.load"), r["torch_load"]


def test_the_other_readers_see_harmless_files(files):
    """What made scan say safe before: Python's zipfile (np.load, keras) lists another archive."""
    with np.load(files / "weights.npz") as z:
        assert sorted(z.files)[0] == "a" and z["a"].tolist() == [0, 1, 2, 3]
    assert "config.json" in zipfile.ZipFile(files / "model.keras").namelist()
    with pytest.raises(NotImplementedError, match="zip file version 6.4"):
        zipfile.ZipFile(files / "checkpoint_last")


def test_folder_scan_lists_every_one(files, capsys):
    r = scan_path(str(files))
    assert {f["path"]: f["status"] for f in r["files"]} == {n: "unsafe" for n in CASES}
    assert exit_code(r) == 1 and main(["scan", str(files)]) == 1
    capsys.readouterr()


def test_audit_says_unsafe(files, tmp_path, capsys):
    out = tmp_path / "audit.jsonl"
    assert main(["audit", str(files), "--out", str(out), "--json"]) == 1
    capsys.readouterr()
    recs = {os.path.basename(r["path"]): r for r in map(json.loads, out.read_text().splitlines())}
    assert {n: r["scan"]["verdict"] for n, r in recs.items()} == {n: "unsafe" for n in CASES}


def test_a_benign_npz_keras_and_flax_keep_their_own_verdicts(tmp_path, capsys):
    """The torch trace goes first, but a file torch.load cannot read keeps its own loader's verdict."""
    np.savez(tmp_path / "a.npz", x=np.ones(3))
    assert scan_path(str(tmp_path / "a.npz"))["format"] == "numpy (npz)"
    from conftest import fixture

    assert main(["scan", fixture("flax", "bart", "flax_model.msgpack")]) == 2
    assert "Flax msgpack" in capsys.readouterr().err


def test_a_folder_url_lists_them_as_the_local_folder_scan_does(files, tmp_path, capsys):
    """Served over loopback HTTP beside benign files (a Flax checkpoint, a config, a README), a folder URL's files
    are judged by their bytes as the local folder's are: every polyglot listed UNSAFE, nothing benign listed."""
    import shutil
    import sys

    from conftest import fixture

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from remote_server import Server

    from ckptstat import sources

    folder = tmp_path / "served"
    shutil.copytree(files, folder, ignore=shutil.ignore_patterns("RAN-*"))
    shutil.copy(fixture("flax", "bart", "flax_model.msgpack"), folder / "flax_model_benign.msgpack")
    (folder / "config.json").write_text('{"model_type": "bert"}')
    (folder / "README").write_text("# a model\n")
    local = scan_path(str(folder))
    sources.reset()
    with Server(str(folder)) as s:
        remote = scan_path(s.url + "/")
        sources.reset()
        assert main(["scan", s.url + "/"]) == 1
    capsys.readouterr()
    assert {f["path"]: f["status"] for f in remote["files"]} == {n: "unsafe" for n in CASES}
    assert remote["files"] == local["files"] and remote["totals"] == local["totals"]


def test_a_tar_whose_first_name_is_a_pickle(tmp_path):
    """pickle.load (and np.load(allow_pickle=True): neither .npy nor zip) unpickle a file from byte 0, where a tar
    holds its first member's name; torch.load reads a tar as torch < 0.4's format and raises (no `storages`). scan
    followed torch.load only: "the tar has no 'storages' member", exit 2 (sixth red-team pass). Oracle: the real
    pickle.load and np.load create the payload's folder; torch.load does not."""
    import io
    import subprocess
    import sys
    import tarfile

    from polyglots import payload, torch_load_runs

    marker = str(tmp_path / "RAN")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        member = tarfile.TarInfo(payload(marker).decode())
        member.size = 5
        tar.addfile(member, io.BytesIO(b"hello"))
    d = tmp_path / "run"
    d.mkdir()
    path = str(d / "model.pkl")
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    for load in ("import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))",
                 "import numpy, sys; numpy.load(sys.argv[1], allow_pickle=True)"):
        subprocess.run([sys.executable, "-c", load, path], capture_output=True, timeout=120)
        assert os.path.isdir(marker), load
        os.rmdir(marker)
    assert not torch_load_runs(path, marker)
    r = scan_path(path)
    assert r["status"] == "unsafe" and r["unsafe_globals"] == ["os.mkdir"] and "pickle.load" in r["verdict"], r
    tree = scan_path(str(d))
    assert [(f["path"], f["status"]) for f in tree["files"]] == [("model.pkl", "unsafe")] and exit_code(tree) == 1
    assert not os.path.exists(marker)
