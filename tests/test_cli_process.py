"""The CLI as a process, the way a user runs it: a results file that a killed `audit` left half-written, resumed;
tables on a terminal narrower than their numbers."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from conftest import fixture


def _ckptstat(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ckptstat", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def _lines(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]   # every line one JSON record: what jq and pandas read


def test_audit_resumed_after_a_torn_last_line_writes_whole_lines(tmp_path):
    """A run killed mid-write leaves half a line at the end. The re-run appended its first record right after it, one
    line of two halves that parses as neither: that record lost (audited again on every run) and the file no longer
    JSON Lines. The half line is cut off before appending."""
    zoo = tmp_path / "zoo"
    for name in ("bert-tiny", "gpt2-tiny", "llama-tiny-sharded"):
        shutil.copytree(fixture(name), zoo / name)
    out = tmp_path / "results.jsonl"
    r = _ckptstat("audit", str(zoo), "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr
    first = _lines(out)
    assert len(first) == 3
    data = out.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    out.write_bytes(data[: last + 40])   # the last record's first 40 bytes, no newline: killed while writing it
    r = _ckptstat("audit", str(zoo), "--out", str(out), "--no-progress", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["run"]["audited"] == 1
    again = _lines(out)
    assert sorted(x["path"] for x in again) == sorted(x["path"] for x in first)
    r = _ckptstat("audit", str(zoo), "--out", str(out), "--no-progress", "--json")
    assert json.loads(r.stdout)["run"]["audited"] == 0 and len(_lines(out)) == 3
