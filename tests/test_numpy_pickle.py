"""Plain pickles of numpy arrays (formats/numpy_pickle.py): JAX/Haiku-style `pickle.dump` parameter trees and
PaddlePaddle's `paddle.save` files, every array against what its loader reads (pickle.load live; paddle.load as
fixtures/make_numpy_pickles.py recorded it), read by offset without unpickling anything; what is refused."""
from __future__ import annotations

import hashlib
import json
import os
import pickle

import numpy as np
import pytest
from conftest import FIXTURES, fixture
from test_remote import fresh_sources  # noqa: F401  (autouse: empty caches, quick retries, no full downloads)

from ckptstat import open_checkpoint, summarize
from ckptstat.cli import main
from ckptstat.core import dtypes
from ckptstat.errors import CorruptCheckpointError, UnsafeCheckpointError

EXPECTED = json.load(open(os.path.join(FIXTURES, "expected_numpy_pickles.json")))
FILES = sorted(k for k, v in EXPECTED.items() if isinstance(v, dict))
PADDLE_DTYPES = {"float32": "F32", "bfloat16": "BF16"}


@pytest.mark.parametrize("rel", FILES)
def test_every_array_is_what_its_loader_reads(rel):
    rec = EXPECTED[rel]
    with open_checkpoint(fixture(rel)) as ck:
        assert sorted(ck.tensors) == sorted(rec)
        for name, want in rec.items():
            t = ck[name]
            assert list(t.shape) == want["shape"], name
            assert t.dtype == (PADDLE_DTYPES.get(want["dtype"]) or dtypes.NUMPY_NAMES[want["dtype"]]), name
            values = ck.read(name).astype(np.float64).reshape(-1)
            assert hashlib.sha256(values.astype("<f8").tobytes()).hexdigest() == want["sha256"], name
            assert t.offset is not None   # read in place


def test_a_paddle_model_counts_its_parameters_and_its_optimizer_apart():
    report = summarize(open_checkpoint(fixture("paddle", "tiny.pdparams")))
    assert report["parameters"]["unique"] == EXPECTED["paddle/parameters"]
    opt = summarize(open_checkpoint(fixture("paddle", "tiny.pdopt")))
    assert opt["parameters"]["unique"] == 0
    rows = {r["role"]: r for r in opt["non_parameters"]}
    assert rows["optimizer"]["elements"] == sum(int(np.prod(v["shape"])) for v in EXPECTED["paddle/tiny.pdopt"].values())


def test_paddles_bfloat16_is_read_as_bfloat16_and_said(capsys):
    assert main([fixture("paddle", "tiny-bf16.pdparams")]) == 0
    assert "PaddlePaddle stores bfloat16 as numpy uint16" in capsys.readouterr().out


def test_a_plain_pickles_uint16_stays_uint16(tmp_path):
    path = tmp_path / "u16.pkl"
    path.write_bytes(pickle.dumps({"w": np.arange(4, dtype=np.uint16)}, protocol=4))
    assert open_checkpoint(str(path))["w"].dtype == "U16"


def test_stats_and_diff_read_a_pickle(capsys):
    path = fixture("numpy-pickles", "params-p4.pkl")
    assert main(["stats", path, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["tensors"]
    assert main(["diff", path, fixture("numpy-pickles", "params-p5.pkl")]) == 0


def _refused(path, capsys, says: str) -> None:
    assert main([str(path)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and says in err, err


def test_a_protocol_2_pickle_is_refused_naming_why(tmp_path, capsys):
    path = tmp_path / "p2.pkl"
    path.write_bytes(pickle.dumps({"w": np.arange(6, dtype=np.float32)}, protocol=2))
    _refused(path, capsys, "protocol-2")


def test_a_pickle_calling_anything_else_is_refused_and_nothing_runs(tmp_path, capsys):
    marker = tmp_path / "ran"
    payload = pickle.dumps({"w": np.zeros(2, np.float32)}, protocol=4)[:-2]   # (the dict left open)
    evil = payload + b"\x8c\x01x\x8c\x02os\x8c\x06system\x93\x8c" + bytes([len(f"touch {marker}")]) + \
        f"touch {marker}".encode() + b"\x85R\x8c\x01y\x8c\x01z\x86\x94u."
    path = tmp_path / "evil.pkl"
    path.write_bytes(evil)
    with pytest.raises((UnsafeCheckpointError, CorruptCheckpointError)):
        open_checkpoint(str(path))
    assert main([str(path)]) == 1
    assert not marker.exists()
    capsys.readouterr()


def test_files_of_other_pickle_formats_are_not_taken():
    """torch's legacy files (their magic number) and joblib's stay their own readers' (or refused as before)."""
    assert open_checkpoint(fixture("torch", "dtypes-legacy.pt")).format.startswith("pytorch")
    with pytest.raises(Exception, match="not a checkpoint format"):
        open_checkpoint(fixture("joblib", "arrays-plain.joblib"))


def test_scan_judges_a_paddle_save_by_paddle_loads_rules(tmp_path, capsys):
    """paddle.load unpickles with pickle.loads: numpy's own reconstruction is safe under it, anything else is not."""
    assert main(["scan", fixture("paddle", "tiny.pdparams")]) == 0
    assert "safe: a PaddlePaddle save" in capsys.readouterr().out
    evil = tmp_path / "model.pdparams"
    evil.write_bytes(pickle.dumps({"w": np.zeros(2, np.float32)}, protocol=4)[:-2]
                     + b"\x8c\x01x\x8c\x02os\x8c\x06system\x93\x8c\x04true\x85Ru.")
    assert main(["scan", str(evil)]) == 1
    assert "os.system" in capsys.readouterr().out


def test_a_pickle_over_https_reads_as_the_local_file(capsys):
    from remote_server import Server

    local = fixture("numpy-pickles", "params-p4.pkl")
    assert main(["stats", local, "--json"]) == 0
    want = json.loads(capsys.readouterr().out)
    with Server(os.path.dirname(local)) as s:
        assert main(["stats", f"{s.url}/params-p4.pkl", "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
    for r in (want, got):
        for k in ("path", "seconds", "fetched"):
            r.pop(k, None)
    assert got == want
