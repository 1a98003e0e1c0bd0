"""`http://user:password@host/...` on the command line: the password reaches the server it was named for and no output
(docs/remote.md, "Conventions"; docs/security.md). A red-team run found every report printing it: the summary's and
stats' `path` (text and --json), diff's `a` and `b`, an audit record's `path` written to --out, and an error a reader
raised (`cannot read config`). Each command here runs as users start it (a subprocess) against a loopback server
that requires the password, and a query string (a presigned URL's signature) is in no error line either."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_remote_listing import WEIGHTS, Scripted, file_route

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PASSWORD = "s3cret-pw"
AUTH = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()


def ckptstat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckptstat", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT})


def logged_in(s: Scripted) -> str:
    return s.url.replace("http://", f"http://alice:{PASSWORD}@")


def served_with_the_password(s: Scripted, *paths: str) -> None:
    seen = {p: {a for q, _, a in s.httpd.log if q == p} for p in paths}  # type: ignore[attr-defined]
    assert all(v == {AUTH} for v in seen.values()), seen


@pytest.mark.parametrize("args", [("summary", "--json"), ("summary",), ("stats", "--json"), ("tensors", "--json"),
                                  ("ties", "--json"), ("stats", "--json", "--workers", "2")])
def test_a_reports_path_names_no_password(args):
    with Scripted({"/m/model.safetensors": file_route(WEIGHTS, auth=AUTH)}) as s:
        p = ckptstat(*args, logged_in(s) + "/m/model.safetensors")
        assert p.returncode == 0, p.stderr
        assert PASSWORD not in p.stdout + p.stderr
        assert s.url + "/m/model.safetensors" in p.stdout   # (named all the same, without it)
        served_with_the_password(s, "/m/model.safetensors")


def test_diff_names_no_password_and_sends_each_its_own():
    other = "Basic " + base64.b64encode(b"bob:pw-two").decode()
    with Scripted({"/a/model.safetensors": file_route(WEIGHTS, auth=AUTH),
                   "/b/model.safetensors": file_route(WEIGHTS, auth=other)}) as s:
        b = s.url.replace("http://", "http://bob:pw-two@") + "/b/model.safetensors"
        p = ckptstat("diff", "--json", logged_in(s) + "/a/model.safetensors", b)
        assert p.returncode == 0, p.stderr
        assert PASSWORD not in p.stdout + p.stderr and "pw-two" not in p.stdout + p.stderr
        assert json.loads(p.stdout)["b"] == s.url + "/b/model.safetensors"
        served_with_the_password(s, "/a/model.safetensors")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_audit_record_names_no_password(tmp_path, workers):
    """The records of a list of URLs, audited here and in worker processes (which read with the same password)."""
    with Scripted({f"/{m}/model.safetensors": file_route(WEIGHTS, auth=AUTH) for m in "ab"}) as s:
        listing = tmp_path / "urls.txt"
        listing.write_text("".join(f"{logged_in(s)}/{m}/model.safetensors\n" for m in "ab"))
        out = tmp_path / "records.jsonl"
        p = ckptstat("audit", "-o", str(out), "--workers", workers, f"@{listing}")
        assert p.returncode == 0, p.stderr
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert sorted(r["path"] for r in records) == [f"{s.url}/{m}/model.safetensors" for m in "ab"]
        assert all(r["error"] is None and r["parameters"] for r in records), records
        assert PASSWORD not in out.read_text() + p.stdout + p.stderr
        served_with_the_password(s, "/a/model.safetensors", "/b/model.safetensors")


@pytest.mark.parametrize("bad", ["config.json", "model.safetensors"])
def test_an_error_a_reader_raises_names_no_password_nor_signature(tmp_path, bad):
    """A config.json that is no JSON, a weights file of no format: each reader's error named the URL as given."""
    (tmp_path / bad).write_bytes(b"\x90 neither JSON nor weights" * 10)
    files = {"model.safetensors": WEIGHTS, bad: str(tmp_path / bad)}   # (no config.json beside bad weights)
    with Scripted({f"/m/{name}": file_route(local, auth=AUTH) for name, local in files.items()}) as s:
        p = ckptstat("summary", logged_in(s) + "/m/model.safetensors?X-Amz-Signature=SIGSECRET")
        assert p.returncode == 1 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
        assert f"{s.url}/m/{bad}" in p.stderr
        assert PASSWORD not in p.stderr and "SIGSECRET" not in p.stderr
        served_with_the_password(s, f"/m/{bad}")
