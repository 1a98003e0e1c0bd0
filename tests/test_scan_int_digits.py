"""A pickle whose first INT has more digits than Python's default limit (red-team pass `scan2`, docs/torch.md "ckptstat
scan"): torch.load raises there in a default process, so scan stopped its walk and said "torch.load raises at byte 0"
(exit 2), and a folder's scan passed over the file (exit 0, nothing listed). A process that lifts the limit
(PYTHONINTMAXSTRDIGITS=0, `-X int_max_str_digits=0`, sys.set_int_max_str_digits(0); Python before 3.10.7) reads on
and runs what follows. The walk now reads on too, as for the other lenient loaders: UNSAFE, the finding saying where."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from polyglots import payload

from ckptstat.analysis.scan import exit_code, scan_path

pytest.importorskip("torch")

LOAD = "import sys, torch\ntry: torch.load(sys.argv[1], weights_only=False)\nexcept Exception: pass"


def _runs(path: str, marker: str, *flags: str) -> bool:
    subprocess.run([sys.executable, *flags, "-c", LOAD, path], timeout=300, capture_output=True)
    ran = os.path.isdir(marker)
    if ran:
        os.rmdir(marker)
    return ran


def test_a_pickle_past_the_int_digit_limit_is_unsafe(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    path = folder / "weights.dat"
    marker = str(tmp_path / "RAN")
    path.write_bytes(b"I" + b"9" * (sys.int_info.default_max_str_digits + 1) + b"\n0" + payload(marker))
    assert not _runs(str(path), marker), "a default process raises before the payload"
    assert _runs(str(path), marker, "-X", "int_max_str_digits=0"), "one without the limit runs it"
    r = scan_path(str(path))
    assert r["status"] == "unsafe" and r["unsafe_globals"] == ["os.mkdir"], r["verdict"]
    assert "int digit limit" in r["findings"][0]["why"]
    tree = scan_path(str(folder))
    assert [(f["path"], f["status"]) for f in tree["files"]] == [("weights.dat", "unsafe")]
    assert exit_code(tree) == 1
