"""`ckptstat scan` of torch.package archives (analysis/scan/package.py) against what torch.package's PackageImporter
really runs: archives written by PackageExporter, then rewritten so that the pickle a user loads carries a payload
(through a module whose source the archive holds, or a builtin), each loaded with `load_pickle` in a subprocess to
see whether the payload's marker file appears. Every one that runs is `unsafe` (exit 1), alone and in a folder;
a benign package, whose pickle imports torch's own Linear through the importer, is never called safe."""
from __future__ import annotations

import json
import zipfile

import library_runner
import pytest

torch = pytest.importorskip("torch")

from ckptstat.analysis.scan import scan_path  # noqa: E402

LOAD = """
import sys, warnings
warnings.simplefilter("ignore")
from torch.package import PackageImporter
try:
    PackageImporter(sys.argv[1]).load_pickle("model", "model.pkl")
except Exception:
    pass
"""


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    d = tmp_path_factory.mktemp("package")
    marker = d / "ran"
    from torch.package import PackageExporter

    benign = d / "benign.pt"
    with PackageExporter(str(benign)) as pe:
        pe.extern("torch.**")
        pe.intern("**")
        pe.save_pickle("model", "model.pkl", torch.nn.Linear(3, 2))

    def rewritten(name: str, pickle: bytes, add: dict[str, str] | None = None):
        out = d / name
        with zipfile.ZipFile(benign) as src, zipfile.ZipFile(out, "w") as z:
            root = src.namelist()[0].split("/")[0]
            for i in src.infolist():
                z.writestr(i.filename, pickle if i.filename.endswith("model/model.pkl") else src.read(i))
            for record, text in (add or {}).items():
                z.writestr(f"{root}/{record}", text)
        return out

    hostile = {
        # a global of a module whose source the archive holds: PackageImporter runs that source to import it
        "source": rewritten("source.pt", b"\x80\x02cevilmod\nX\nq\x00.",
                            {"evilmod.py": f"open({str(marker)!r}, 'w').close()\nX = 1\n"}),
        # a builtin, called (protocol 0: the importer resolves builtins from the environment)
        "builtin": rewritten("builtin.pt", b"cbuiltins\nopen\n(S'" + str(marker).encode() + b"'\nS'w'\ntR."),
    }
    ran = {}
    for name, path in hostile.items():
        marker.unlink(missing_ok=True)
        library_runner.python(LOAD, str(path))
        ran[name] = marker.exists()
    marker.unlink(missing_ok=True)
    return benign, hostile, ran


def test_every_payload_that_runs_is_unsafe(packages, cli):
    _, hostile, ran = packages
    assert ran == {"source": True, "builtin": True}
    for name, path in hostile.items():
        rc, out, _ = cli("scan", str(path), "--json")
        r = json.loads(out)
        assert rc == 1 and r["status"] == "unsafe", (name, r["verdict"])
        assert r["verdict"].startswith("UNSAFE: PackageImporter.load_pickle would"), r["verdict"]
    r = scan_path(str(hostile["source"]))
    assert any("evilmod.py" in u for u in r["unknown"]) and r["unsafe_globals"] == ["evilmod.X"]


def test_a_benign_package_is_never_safe_and_a_folder_lists_them(packages, tmp_path, cli):
    benign, hostile, _ = packages
    r = scan_path(str(benign))
    assert r["status"] == "unsafe" and r["unsafe_globals"] == [f"{torch.nn.Linear.__module__}.{torch.nn.Linear.__qualname__}"], \
        r["verdict"]
    import shutil
    for p in (benign, *hostile.values()):
        shutil.copy(p, tmp_path / p.name)
    rc, out, _ = cli("scan", str(tmp_path), "--json")
    assert rc == 1
    assert {f["path"]: f["status"] for f in json.loads(out)["files"]} == {
        "benign.pt": "unsafe", "builtin.pt": "unsafe", "source.pt": "unsafe"}
