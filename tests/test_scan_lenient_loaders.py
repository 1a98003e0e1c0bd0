"""Pickles that torch.load (and CPython's C unpickler) refuse partway, after or before a payload that other common
loaders run (pickle_machine.py `lenient`, `text_int`):

- an INT of more than Python's 4,300 digits after the payload: the unpickler runs the payload, then raises ValueError;
- a Python 2 string that is not UTF-8 before it: torch.load raises, pickle.load(encoding='latin1') (numpy's and
  pandas' way to read Python 2 pickles) reads on and runs it;
- a FRAME longer than the data before it: the C unpickler raises, Python's pure-Python unpickler (which joblib's
  NumpyUnpickler subclasses) reads the short frame and runs it.

Each payload only opens a file for writing in the test's folder; the oracle is the loader itself, run here: the file
exists after the loader that runs it, not after the one that refuses. `ckptstat scan` must call each file UNSAFE,
alone and in a folder under a name that says nothing of pickles.
"""
from __future__ import annotations

import io
import json
import pickle
import struct

import pytest

torch = pytest.importorskip("torch")


def _payload(target) -> bytes:
    """Protocol-0 opcodes that call builtins.open(target, "w") and drop the result."""
    return b"cbuiltins\nopen\n(V" + str(target).encode() + b"\nVw\ntR0"


def _scanned(cli, path) -> dict:
    rc, out, err = cli("scan", str(path), "--json")
    assert "Traceback" not in err
    return {"rc": rc, **json.loads(out)}


def _unsafe_alone_and_in_a_folder(cli, tmp_path, data: bytes) -> dict:
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "weights.data").write_bytes(data)
    alone = tmp_path / "alone.pkl"
    alone.write_bytes(data)
    r = _scanned(cli, alone)
    assert r["rc"] == 1 and r["status"] == "unsafe"
    assert r["unsafe_globals"] == ["builtins.open"] and r["would_run_code"]
    rc, out, _ = cli("scan", str(folder))
    assert rc == 1 and "UNSAFE" in out and "weights.data" in out
    return r


def test_a_long_integer_after_the_payload(cli, tmp_path):
    ran = tmp_path / "ran"
    data = _payload(ran) + b"I" + b"1" * 5000 + b"\n."
    with pytest.raises(ValueError):
        torch.load(io.BytesIO(data), weights_only=False)
    assert ran.exists()   # (the payload ran before the unpickler raised)
    ran.unlink()
    r = _unsafe_alone_and_in_a_folder(cli, tmp_path, data)
    assert "5,000 digits" in r["torch_load"]


def _refused_then_run(ran, data: bytes, refused: dict, runs) -> None:
    """Each loader of `refused` ({loader: what it raises}) raises on `data` before the payload; `runs` runs it."""
    for load, error in refused.items():
        with pytest.raises(error):
            load(data)
    assert not ran.exists()
    runs(data)
    assert ran.exists()
    ran.unlink()


def test_a_python2_string_only_latin1_loaders_read(cli, tmp_path):
    ran = tmp_path / "ran"
    data = b"\x80\x02U\x01\xff0" + _payload(ran) + b"N."
    _refused_then_run(ran, data, {lambda d: torch.load(io.BytesIO(d), weights_only=False): UnicodeDecodeError,
                                  pickle.loads: UnicodeDecodeError},   # (pickle's default encoding, ASCII)
                      lambda d: pickle.loads(d, encoding="latin1"))
    r = _unsafe_alone_and_in_a_folder(cli, tmp_path, data)
    (finding,) = r["findings"]
    assert "encoding='latin1'" in finding["why"]


def test_a_frame_longer_than_the_data(cli, tmp_path):
    ran = tmp_path / "ran"
    inner = _payload(ran) + b"N."
    data = b"\x80\x04\x95" + struct.pack("<Q", len(inner) + 1000) + inner
    _refused_then_run(ran, data, {pickle.loads: pickle.UnpicklingError,   # (the C unpickler)
                                  lambda d: torch.load(io.BytesIO(d), weights_only=False): pickle.UnpicklingError},
                      lambda d: pickle._Unpickler(io.BytesIO(d)).load())   # (joblib's NumpyUnpickler is one)
    r = _unsafe_alone_and_in_a_folder(cli, tmp_path, data)
    (finding,) = r["findings"]
    assert "joblib.load" in finding["why"]


def test_a_pickle_shaped_file_no_loader_reads_is_listed(cli, tmp_path):
    """In a folder, a file that opens as a protocol 2+ pickle (PROTO and its number) but that no loader scan follows can
    read is listed unreadable, whatever its name (another loader may read on); a file that opens as no pickle is not
    listed."""
    data = b"\x80\x02\xff"
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(data)
    (tmp_path / "weights.data").write_bytes(data)
    (tmp_path / "notes.data").write_bytes(b"hello")
    rc, out, _ = cli("scan", str(tmp_path))
    assert rc == 2 and "UNREADABLE weights.data" in out and "notes.data" not in out

