"""Paths the user may not read, and links that lead nowhere, each said in one line naming the file and the OS's
words, as a user (not root) meets them: run in a subprocess, as root without the capabilities that bypass file
permissions (setpriv). A folder the user may not list was an internal error (PermissionError from os.listdir); a
shard it may not read was reported under the index's name; a file in a folder it may not enter, and a loop of
links, were "no such file or folder" / "a symlink to a missing file"."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys

import pytest
from conftest import fixture

SHARDED = fixture("llama-tiny-sharded")   # transformers' save_pretrained(max_shard_size=...)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DENIED = os.strerror(errno.EACCES)
LOOP = os.strerror(errno.ELOOP)


def _as_a_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root reads every file, and setpriv (to drop that) is not installed")
    return [setpriv, "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]


def _ckptstat(*args: str, cwd) -> tuple[int, str, str]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([*_as_a_user(), sys.executable, "-m", "ckptstat", *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=None)
    return r.returncode, r.stdout, r.stderr


@pytest.fixture
def paths(tmp_path):
    """A folder the user may not list, a file inside a folder it may not enter, a sharded checkpoint one of whose
    shards it may not read, a loop of links."""
    shutil.copytree(SHARDED, tmp_path / "locked")
    shutil.copytree(SHARDED, tmp_path / "sharded")
    (tmp_path / "sharded" / "model-00003-of-00007.safetensors").chmod(0)
    os.symlink("loop.b", tmp_path / "loop.a")
    os.symlink("loop.a", tmp_path / "loop.b")
    (tmp_path / "locked").chmod(0)
    yield tmp_path
    (tmp_path / "locked").chmod(0o755)


@pytest.mark.parametrize("command", [["summary"], ["tensors"], ["stats"], ["diff", "OTHER"], ["trend", "OTHER"]])
def test_what_cannot_be_read_is_said_in_one_line(paths, command) -> None:
    cases = {"locked": f"locked: cannot list the folder: {DENIED}",
             "locked/model.safetensors.index.json": f"locked/model.safetensors.index.json: {DENIED}",
             "sharded": f"sharded/model-00003-of-00007.safetensors: {DENIED}",
             "loop.a": f"loop.a: {LOOP}"}
    for path, said in cases.items():
        args = [a.replace("OTHER", SHARDED) for a in command]
        rc, out, err = _ckptstat(args[0], path, *args[1:], "--json", cwd=paths)
        assert rc == (2 if command[0] == "diff" else 1) and out == "", (path, rc, err)
        assert err == f"ckptstat: error: {said}\n", (path, err)


def test_scan_says_the_same(paths) -> None:
    """`scan` (exit 2: unreadable) of a file in a folder the user may not enter said "no such file or folder", and of
    a loop of links "no such file"."""
    for path, said in {"locked/model-00001-of-00007.safetensors": DENIED, "loop.a": LOOP}.items():
        rc, out, err = _ckptstat("scan", path, "--json", cwd=paths)
        assert rc == 2 and out == "" and err == f"ckptstat: error: {path}: {said}\n", (path, rc, err)
