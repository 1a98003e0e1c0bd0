"""`ckptstat scan` of files whose zip lies elsewhere than where torch.load and np.load look (byte 0), which other loaders
find by the end record at the tail (docs/security.md, fourteenth pass):

- torch.hub.load_state_dict_from_url takes any download `zipfile.is_zipfile` calls a zip of exactly one file for a
  legacy zipped checkpoint, extracts it and torch.loads it (weights_only=False by default); zipfile finds a zip after
  a benign legacy torch.save or `.npy` (torch.load and np.load read the head and stop), after an HTML page, or through
  an end record whose size field points zipfile at a second directory while miniz (torch.load) reads a benign torch
  archive. Before: `safe` (exit 0) for the first, second and fourth, "torch.load raises at byte 0" (exit 2) for the
  page, which a folder scan did not list (exit 0);
- keras' load_model reads a `.keras` after other bytes (zipfile); torch.export.load a `.pt2` after other bytes (miniz
  for load_pt2, zipfile for its torch < 2.8 fallback); np.load a file starting with an empty zip's end record (numpy's
  `_ZIP_SUFFIX`), zipfile then reading the real one: each "torch.load raises at byte 0" before.

The oracle is the real loaders in a throw-away process: the payload runs (a folder or file created) under the loader
named, not under torch.load(weights_only=False) / np.load of the same bytes. `ckptstat scan` runs as a subprocess on
the file, on a folder holding it under a name without an extension, and (torch.hub) on its URL served over loopback."""
from __future__ import annotations

import io
import json
import os
import pickle
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import library_runner  # noqa: E402
from polyglots import Mkdir, _stored, payload  # noqa: E402
from remote_server import Server  # noqa: E402

HUB = "import sys, torch; torch.hub.load_state_dict_from_url(sys.argv[1], progress=False)"
TORCH = "import sys, torch; torch.load(sys.argv[1], weights_only=False)"
NUMPY = "import sys, numpy; numpy.load(sys.argv[1], allow_pickle=True)"


def _one_zip(marker: str) -> bytes:
    """What torch.hub calls a legacy zipped checkpoint: a zip of one file, here a pickle calling os.mkdir(marker)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("resnet18.pth", pickle.dumps({"w": Mkdir(marker)}, protocol=2))
    return buf.getvalue()


def _legacy(marker: str) -> bytes:
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(3)}, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue() + _one_zip(marker)


def _npy(marker: str) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.zeros(3))
    return buf.getvalue() + _one_zip(marker)


def _page(marker: str) -> bytes:
    return b'<html><body><a href="resnet18.pth">resnet18.pth</a></body></html>\n' + _one_zip(marker)


def _two_directories(marker: str) -> bytes:
    """A benign torch archive at the end record's offset field (miniz's, so torch.load's, reading), and a directory of
    one entry, the payload, where its size field counted back from the end record says (zipfile's: tests/polyglots.py
    `two_directory_zip`)."""
    body, cd_torch, at = b"", b"", 0
    torch_members = [("archive/data.pkl", pickle.dumps({}, protocol=2)), ("archive/byteorder", b"little"),
                     ("archive/version", b"3\n")]
    for name, data in torch_members:
        local, central = _stored(name, data, at)
        body, cd_torch, at = body + local, cd_torch + central, at + len(local)
    name = "m" + "_" * (len(cd_torch) - 46 - len("m.pth")) + ".pth"   # the one entry spans the torch directory
    body += b"\0" * 1024   # room for zipfile's shift (the torch directory's size)
    local, _ = _stored(name, payload(marker), at + 1024)
    cd = _stored(name, payload(marker), at + 1024 - len(cd_torch))[1]
    body += local
    eocd = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 3, 3, len(cd), len(body), 0)
    return body + cd_torch + cd + eocd


# (builder, the file's name, the loader that reads it as harmless)
CASES = {"legacy torch.save + zip": (_legacy, "model.pth", TORCH), "npy + zip": (_npy, "weights.npy", NUMPY),
         "html page + zip": (_page, "resnet18.zip", TORCH), "two directories": (_two_directories, "model.pth", TORCH)}


def _runs(code: str, target: str, marker) -> bool:
    library_runner.python(code, target, env={**os.environ, "TORCH_HOME": str(marker.parent / "torch_home")})
    ran = marker.is_dir()
    if ran:
        marker.rmdir()
    return ran


def _scan(target: str) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", target, "--json"], capture_output=True, text=True,
                       timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout) if p.stdout else {"stderr": p.stderr}


@pytest.mark.parametrize("case", list(CASES))
def test_what_torch_hub_reads_as_a_zip_of_one_pickle_is_unsafe(tmp_path, case):
    build, name, harmless = CASES[case]
    marker = tmp_path / "ran"
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / name).write_bytes(build(str(marker)))
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "weights").write_bytes((tmp_path / "srv" / name).read_bytes())
    assert not _runs(harmless, str(tmp_path / "srv" / name), marker)
    with Server(str(tmp_path / "srv")) as s:
        assert _runs(HUB, f"{s.url}/{name}", marker)
        url_rc, url_report = _scan(f"{s.url}/{name}")
    rc, report = _scan(str(tmp_path / "srv" / name))
    assert rc == 1 and report["status"] == "unsafe" and "torch.hub" in report["verdict"], report
    assert url_rc == 1 and url_report["status"] == "unsafe", url_report
    rc, tree = _scan(str(tmp_path / "dir"))
    assert rc == 1 and [(f["path"], f["status"]) for f in tree["files"]] == [("weights", "unsafe")], tree


def _keras_runs_it_and_scan_says_unsafe(hostile, marker, env) -> None:
    """keras.saving.load_model runs the file's Lambda (the marker made, in a throw-away process), and scan says so."""
    library_runner.python("import sys, keras; keras.saving.load_model(sys.argv[1], safe_mode=False)", str(hostile),
                          env=env)
    assert marker.is_dir()
    rc, report = _scan(str(hostile))
    assert rc == 1 and report["status"] == "unsafe" and "Lambda" in report["verdict"], report


def test_a_benign_zip_appended_stays_safe(tmp_path):
    """torch.hub extracts and loads the appended zip's one file: a real torch.save there is safe."""
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(3)}, buf, _use_new_zipfile_serialization=False)
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("resnet18.pth", buf.getvalue())
    (tmp_path / "model.pth").write_bytes(buf.getvalue() + inner.getvalue())
    rc, report = _scan(str(tmp_path / "model.pth"))
    assert rc == 0 and report["status"] == "safe", report


def test_a_keras_archive_after_other_bytes(tmp_path):
    """keras.saving.load_model opens a `.keras` that zipfile.is_zipfile calls a zip, bytes before it or not, and
    rebuilds its Lambda (safe_mode=False); torch.load and np.load look for the zip at byte 0. Before: "torch.load
    raises at byte 0" (exit 2); now the Keras verdict (analysis/scan/loaders.py `_keras_after_bytes`). The model is
    written by keras itself (tests/test_hostile_keras_and_csv.py)."""
    from test_hostile_keras_and_csv import _LAMBDA_MODEL

    marker = tmp_path / "ran"
    env = {**os.environ, "KERAS_BACKEND": "torch", "KERAS_HOME": str(tmp_path / "home")}
    library_runner.python(_LAMBDA_MODEL, str(tmp_path), str(marker), env=env, check=True)
    hostile = tmp_path / "model.keras"
    hostile.write_bytes(b"<html><body>model card</body></html>\n" + (tmp_path / "saved.keras").read_bytes())
    _keras_runs_it_and_scan_says_unsafe(hostile, marker, env)


def test_an_npz_behind_an_empty_zips_end_record(tmp_path):
    """np.load takes a file starting with an empty zip's end record (`PK\\x05\\x06`, numpy's _ZIP_SUFFIX) for an .npz,
    and zipfile then reads the real end record at the tail: its object array's pickle runs. torch.load reads a pickle
    from byte 0 and raises. Before: "torch.load raises at byte 0" (exit 2), and a folder scan did not list the file
    under a name without an extension (exit 0); now np.load's verdict (analysis/scan/loaders.py `NPZ_STARTS`)."""
    from test_scan_npz_members import _hostile, _npy, np_load_runs

    marker = str(tmp_path / "ran")
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("ok.npy", _npy(np.ones(3)))
        z.writestr("w.npy", _hostile(marker))
    (tmp_path / "dir").mkdir()
    hostile = tmp_path / "dir" / "arrays"
    hostile.write_bytes(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0, 0, 0, 0, 0) + inner.getvalue())
    assert np_load_runs(str(hostile), marker)
    assert not _runs(TORCH, str(hostile), tmp_path / "ran")
    rc, report = _scan(str(hostile))
    assert rc == 1 and report["status"] == "unsafe" and "np.load" in report["verdict"], report
    rc, tree = _scan(str(tmp_path / "dir"))
    assert rc == 1 and [(f["path"], f["status"]) for f in tree["files"]] == [("arrays", "unsafe")], tree


def _shifted(data: bytes, prefix: bytes) -> bytes:
    """`prefix`, then the zip `data` with every offset its central directory and end record hold moved past the prefix
    (APPNOTE 4.3.12, 4.3.16: miniz takes them as offsets in the file; zipfile's shift is then 0)."""
    end = data.rfind(b"PK\x05\x06")
    cd_size, cd_offset = struct.unpack_from("<LL", data, end + 12)
    out, at = bytearray(data), cd_offset
    while at < cd_offset + cd_size:
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", out, at + 28)
        struct.pack_into("<L", out, at + 42, struct.unpack_from("<L", out, at + 42)[0] + len(prefix))
        at += 46 + name_len + extra_len + comment_len
    struct.pack_into("<L", out, end + 16, cd_offset + len(prefix))
    return prefix + bytes(out)


@pytest.mark.parametrize("case", ["legacy_constants", "v27_zip"])
def test_a_torch_export_archive_after_other_bytes(tmp_path, case):
    """torch.export.load opens the archive with miniz (load_pt2's PyTorchFileReader), which looks for no local header
    at byte 0, or, for torch < 2.8's layout, with zipfile: a `.pt2` whose unpickled member carries a payload runs it
    (measured) with bytes before the zip. Before: "torch.load raises at byte 0" (exit 2), not listed in a folder under a
    name without an extension (exit 0). The archives are torch.export.save's, made hostile by tests/pt2_corpus.py."""
    import pt2_corpus

    marker = tmp_path / "ran"
    mlp = pt2_corpus.benign(tmp_path / "bases", ("mlp",))["mlp"]
    evil = pt2_corpus.torch_zip(pt2_corpus.payload_pickle(marker))
    plain = tmp_path / "plain.pt2"
    if case == "v27_zip":
        pt2_corpus._v27_zip(plain, mlp, evil)
    else:
        pt2_corpus.rewrite(mlp, plain, add={"data/constants/model.pt": evil})
    (tmp_path / "dir").mkdir()
    hostile = tmp_path / "dir" / "exported"
    hostile.write_bytes(_shifted(plain.read_bytes(), b"<html><body>model card</body></html>\n"))
    assert pt2_corpus.measure([hostile], marker) == [True]
    rc, report = _scan(str(hostile))
    assert rc == 1 and report["status"] == "unsafe" and "torch.export.load" in report["verdict"], report
    rc, tree = _scan(str(tmp_path / "dir"))
    assert rc == 1 and [(f["path"], f["status"]) for f in tree["files"]] == [("exported", "unsafe")], tree


def test_a_torch_package_after_other_bytes(tmp_path):
    """torch.package's PackageImporter opens the archive with miniz too: a package whose pickle calls builtins.open,
    after other bytes, runs it under load_pickle (measured). Before: "torch.load raises at byte 0" (exit 2)."""
    from torch.package import PackageExporter

    marker = tmp_path / "ran"
    with PackageExporter(str(tmp_path / "benign.pt")) as pe:
        pe.extern("torch.**")
        pe.intern("**")
        pe.save_pickle("model", "model.pkl", torch.nn.Linear(3, 2))
    evil = b"cbuiltins\nopen\n(S'" + str(marker).encode() + b"'\nS'w'\ntR."
    buf = io.BytesIO()
    with zipfile.ZipFile(tmp_path / "benign.pt") as src, zipfile.ZipFile(buf, "w") as z:
        for i in src.infolist():
            z.writestr(i.filename, evil if i.filename.endswith("model/model.pkl") else src.read(i))
    (tmp_path / "dir").mkdir()
    hostile = tmp_path / "dir" / "packaged"
    hostile.write_bytes(_shifted(buf.getvalue(), b"<html><body>model card</body></html>\n"))
    load = ("import sys\nfrom torch.package import PackageImporter\n"
            "PackageImporter(sys.argv[1]).load_pickle('model', 'model.pkl')")
    library_runner.python(load, str(hostile))
    assert marker.exists()
    rc, report = _scan(str(hostile))
    assert rc == 1 and report["status"] == "unsafe" and "PackageImporter" in report["verdict"], report
    rc, tree = _scan(str(tmp_path / "dir"))
    assert rc == 1 and [(f["path"], f["status"]) for f in tree["files"]] == [("packaged", "unsafe")], tree


def test_a_keras_archive_after_an_hdf5_file(tmp_path):
    """A `.keras` that is an HDF5 file of weights (h5py's) with the Keras archive appended: load_model takes a `.keras`
    zipfile calls a zip for a Keras archive before it looks at HDF5, and ran the Lambda (safe_mode=False). Before:
    `safe` ("no model_config attribute"), exit 0; now the archive's verdict (loaders.py `_keras_after_bytes`, first)."""
    import h5py
    from test_hostile_keras_and_csv import _LAMBDA_MODEL

    marker = tmp_path / "ran"
    env = {**os.environ, "KERAS_BACKEND": "torch", "KERAS_HOME": str(tmp_path / "home")}
    library_runner.python(_LAMBDA_MODEL, str(tmp_path), str(marker), env=env, check=True)
    with h5py.File(tmp_path / "weights.h5", "w") as h5:
        h5["dense/kernel"] = np.zeros((3, 2), dtype=np.float32)
    hostile = tmp_path / "model.keras"
    hostile.write_bytes((tmp_path / "weights.h5").read_bytes() + (tmp_path / "saved.keras").read_bytes())
    _keras_runs_it_and_scan_says_unsafe(hostile, marker, env)


def test_an_npz_inside_an_hdf5_user_block(tmp_path):
    """An HDF5 file of weights (h5py's, a 4 KiB user block) whose user block holds a zip's members and whose tail its
    directory: h5py reads the weights, np.load (a local header at byte 0) the object array, whose pickle runs. Before:
    `safe` ("no model_config attribute"), exit 0: the HDF5 signature ended the look; now both are judged, the worse
    winning (loaders.py `_worse`)."""
    import h5py
    from test_scan_npz_members import _hostile, np_load_runs

    marker = str(tmp_path / "ran")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("w.npy", _hostile(marker))
    data = buf.getvalue()
    end = data.rfind(b"PK\x05\x06")
    cd_offset = struct.unpack_from("<L", data, end + 16)[0]
    with h5py.File(tmp_path / "ub.h5", "w", userblock_size=4096) as h5:
        h5["dense/kernel"] = np.zeros((3, 2), dtype=np.float32)
    h5_bytes = bytearray((tmp_path / "ub.h5").read_bytes())
    h5_bytes[:cd_offset] = data[:cd_offset]   # the members, in the user block
    eocd = bytearray(data[end:])
    struct.pack_into("<L", eocd, 16, len(h5_bytes))   # the directory, after the HDF5 file
    hostile = tmp_path / "weights.npz"
    hostile.write_bytes(bytes(h5_bytes) + data[cd_offset:end] + bytes(eocd))
    with h5py.File(hostile, "r") as h5:
        assert list(h5) == ["dense"]
    assert np_load_runs(str(hostile), marker)
    rc, report = _scan(str(hostile))
    assert rc == 1 and report["status"] == "unsafe" and "np.load" in report["verdict"], report
