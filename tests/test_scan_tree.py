"""`ckptstat scan DIR`: every pickle-bearing file under a folder (by extension, or by its first bytes),
one line each and a total; `--json` per-file findings; symlinks never followed out of the folder; FIFOs
skipped unopened; exit 0 clean, 1 unsafe or unknown, 2 unreadable."""
from __future__ import annotations

import io
import json
import os
import pickle
import time
import zipfile

import pytest

from ckptstat.analysis.scan import exit_code, scan_path
from ckptstat.cli import main

EVIL = b"\x80\x02cbuiltins\nprint\nX\x02\x00\x00\x00hi\x85R."      # never run: scan unpickles nothing


def _torch_zip(data_pkl: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", data_pkl)
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "models"
    (root / "sub").mkdir(parents=True)
    (root / "benign.pt").write_bytes(_torch_zip(pickle.dumps({"epoch": 3}, protocol=2)))
    (root / "sub" / "evil.pkl").write_bytes(EVIL)
    (root / "sub" / "noext").write_bytes(EVIL)                           # found by its PROTO opcode
    (root / "sub" / "proto0").write_bytes(b"cbuiltins\nprint\n(S'hi'\ntR.")  # found by walking it
    (root / "archive.zip").write_bytes(_torch_zip(EVIL))                 # found by its *.pkl entry
    (root / "notes.txt").write_text("not a pickle")
    (root / "config.json").write_text("{}")
    (root / "broken.bin").write_bytes(b"\x00\x01garbage")                # by extension; torch.load cannot read it
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.pt").write_bytes(_torch_zip(EVIL))
    os.symlink(root / "benign.pt", root / "link-in.pt")                # inside: scanned once, as benign.pt
    os.symlink(outside / "evil.pt", root / "link-out.pt")              # outside: never followed
    os.symlink(outside, root / "linkdir")                              # a folder link: never followed
    os.mkfifo(root / "fifo.pt")                                        # would block an open(): skipped unopened
    return root


def test_folder_scan_lists_each_pickle_bearing_file_once(tree):
    t0 = time.monotonic()
    r = scan_path(str(tree))
    assert time.monotonic() - t0 < 10
    status = {f["path"]: f["status"] for f in r["files"]}
    assert status == {"archive.zip": "unsafe", "benign.pt": "safe", "broken.bin": "unreadable",
                      os.path.join("sub", "evil.pkl"): "unsafe", os.path.join("sub", "noext"): "unsafe",
                      os.path.join("sub", "proto0"): "unsafe"}, status
    skipped = {s["path"]: s["why"] for s in r["skipped"]}
    assert set(skipped) == {"link-out.pt", "linkdir", "fifo.pt"}, skipped
    assert "outside the folder" in skipped["link-out.pt"] and "regular file" in skipped["fifo.pt"]
    assert r["totals"] == {"files": 6, "unsafe": 4, "unknown": 0, "unreadable": 1, "safe": 1, "skipped": 3}
    assert exit_code(r) == 1
    evil = next(f for f in r["files"] if f["path"] == os.path.join("sub", "evil.pkl"))
    assert evil["findings"] == [{"record": "magic number pickle", "offset": 2, "file_offset": 2, "opcode": "GLOBAL",
                                 "global": "builtins.print", "why": evil["findings"][0]["why"]}]


def test_folder_scan_cli(tree, capsys):
    assert main(["scan", str(tree)]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "6 file(s) scanned: 1 safe, 4 unsafe, 0 unknown, 1 unreadable; 3 skipped"
    assert any(line.startswith("UNSAFE") and "archive.zip" in line and "builtins.print" in line for line in lines)
    assert main(["scan", str(tree), "--json"]) == 1
    r = json.loads(capsys.readouterr().out)
    assert r["schema"] == "ckptstat.scan_tree/1" and len(r["files"]) == 6


def test_folder_exit_codes(tmp_path, capsys):
    (tmp_path / "a.pt").write_bytes(_torch_zip(pickle.dumps([1, 2], protocol=2)))
    assert main(["scan", str(tmp_path)]) == 0
    (tmp_path / "b.bin").write_bytes(b"\xff")
    assert main(["scan", str(tmp_path)]) == 2          # a file torch.load cannot read, nothing unsafe
    (tmp_path / "c.pkl").write_bytes(EVIL)
    assert main(["scan", str(tmp_path)]) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["scan", str(empty)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("0 file(s) scanned")


def test_file_exit_codes(tmp_path, capsys):
    p = tmp_path / "x.pt"
    p.write_bytes(_torch_zip(pickle.dumps({"a": 1}, protocol=2)))
    assert main(["scan", str(p)]) == 0
    p.write_bytes(_torch_zip(EVIL))
    assert main(["scan", str(p)]) == 1
    p.write_bytes(b"\x80\x02(X\x01\x00\x00")                          # truncated: a read error
    assert main(["scan", str(p)]) == 2
    assert main(["scan", str(tmp_path / "missing.pt")]) == 2
    capsys.readouterr()


def test_scan_reads_only_the_pickles(tmp_path):
    """A legacy file's storages follow its pickles: scan stops at the storage keys and never reads
    the 1 GiB after them (a sparse file: reading it would take seconds)."""
    torch = pytest.importorskip("torch")
    p = tmp_path / "big.pt"
    torch.save({"w": torch.zeros(4)}, str(p), _use_new_zipfile_serialization=False)
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) + (1 << 30))
    t0 = time.monotonic()
    r = scan_path(str(p))
    assert r["status"] == "safe" and time.monotonic() - t0 < 2
