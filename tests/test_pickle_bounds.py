"""Work and memory bounds on what a file can make ckptstat build (issue 31; docs/security.md, "Limits"): the
unpickler's memory accounting (millions of empty or memoised sets) against real torch saves of many tiny tensors,
and deflated members that inflate far past what real weights do (.npz, .keras)."""
from __future__ import annotations

import io
import zipfile

import h5py
import numpy as np
import pytest
import torch
from hostile_corpus_bounds import empty_sets, pickle_zip

from ckptstat import open_checkpoint
from ckptstat.core.limits import limits
from ckptstat.errors import CorruptCheckpointError
from ckptstat.formats.torch.unpickler import BUILD_FLOOR, MEMO_ENTRY_BYTES, unpickle


def test_a_real_save_of_many_tiny_tensors_builds_well_within_the_budget(tmp_path):
    # What a save builds per byte of pickle does not grow with the tensor count (8 memo entries, 2 strings and
    # 2 tuples a tensor); 20,000 keep the test quick, and the ratio holds for 130,000 (8.6-9.4 measured).
    sd = {f"model.layers.{i // 10}.block.w{i % 10}.weight": torch.zeros(1) for i in range(20_000)}
    path = tmp_path / "many.pt"
    torch.save(sd, path)
    with zipfile.ZipFile(path) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    _, u = unpickle(io.BytesIO(pkl), str(path), "data.pkl")
    assert u.built / len(pkl) < limits().pickle_build_ratio / 1.5
    ckpt = open_checkpoint(str(path))
    assert sorted(ckpt.tensors) == sorted(torch.load(path, weights_only=True))


@pytest.mark.parametrize("memoised", [False, True])
def test_millions_of_sets_are_refused(tmp_path, memoised):
    path = pickle_zip(tmp_path / "sets.pt", empty_sets(400_000, memoised))
    with pytest.raises(CorruptCheckpointError, match="build more than"):
        open_checkpoint(path)


def test_scan_stops_a_memo_of_an_entry_a_byte_and_scans_real_saves(tmp_path, cli):
    # MEMOIZE after MEMOIZE: one memo entry a byte of pickle, which scan's walk keeps (8 MB of them took 700 MB).
    # Past what pickle_build_ratio allows the walk stops: unknown, exit 1, nothing ran.
    n = 400_000
    path = pickle_zip(tmp_path / "memo.pt", b"\x80\x04N" + b"\x94" * n + b".")
    rc, out, err = cli("scan", path)
    budget = (limits().pickle_build_ratio * (n + 4) + BUILD_FLOOR) // MEMO_ENTRY_BYTES
    assert rc == 1 and "UNKNOWN" in out and f"a memo of more than {budget:,} entries" in " ".join(out.split())
    # a real save's memo (8 entries a tensor) stays well inside it
    sd = {f"model.layers.{i // 10}.block.w{i % 10}.weight": torch.zeros(1) for i in range(20_000)}
    torch.save(sd, tmp_path / "many.pt")
    rc, out, err = cli("scan", str(tmp_path / "many.pt"))
    assert rc == 0 and "safe: every global" in out, out + err


def _npy_header(n: int) -> bytes:
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(b, {"descr": "|u1", "fortran_order": False, "shape": (n,)})
    return b.getvalue()


def test_an_npz_of_zeros_inflating_1000_to_1_is_refused_before_decompression(tmp_path, cli):
    path = tmp_path / "bomb.npz"
    n = 256 << 20
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z, z.open("a.npy", "w") as m:
        m.write(_npy_header(n))
        for _ in range(n >> 24):
            m.write(bytes(1 << 24))
    assert np.load(path)["a"].shape == (n,)   # numpy reads it: a valid file, a bomb only in its ratio
    rc, out, err = cli("stats", "--all-roles", str(path))
    assert rc == 1 and "inflates from" in err and "--limit inflate_ratio" in err and err.count("\n") == 1
    rc, out, err = cli("summary", str(path))   # headers are read as before
    assert rc == 0, err


def test_keras_weights_inflating_past_the_ratio_are_never_spilled(tmp_path, cli, monkeypatch):
    h5 = tmp_path / "model.weights.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("layers/dense/vars/0", data=np.zeros((2, 2), np.float32))
        f.create_dataset("layers/dense/vars/1", data=np.zeros(256 << 20, np.uint8))
    path = tmp_path / "bomb.keras"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("metadata.json", "{}")
        z.writestr("config.json", '{"class_name": "Sequential"}')
        z.write(h5, "model.weights.h5")
    import tempfile
    spilled: list[object] = []
    real = tempfile.TemporaryFile
    monkeypatch.setattr(tempfile, "TemporaryFile", lambda *a, **k: spilled.append(1) or real(*a, **k))
    for command in ("summary", "stats"):
        rc, out, err = cli(command, str(path))
        assert rc == 1 and "model.weights.h5 inflates from" in err and err.count("\n") == 1, err
    assert not spilled


def test_scan_bounds_a_deflated_pickle_and_the_walks_stack(tmp_path, cli):
    """(A red team of scan, 2026-12-07.) A torch archive's data.pkl deflated 1000:1, 4 MB of NONE, POP from a 4 KB
    record: the walk ran an opcode a byte of whatever the entry claimed (a 195 KB file of 200 MB: minutes; 4 GiB
    claimed: hours), where the reader refuses past pickle_ratio. And 400,000 EMPTY_LISTs, one stack entry each (30 MB
    of them, deflated to 30 KB, took 2.1 GB): the stack is charged as the memo is. Both unknown, exit 1."""
    path = tmp_path / "deflated.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02" + b"N0" * 2_000_000 + b"N.")
        z.writestr("archive/byteorder", b"little")
    rc, out, err = cli("scan", str(path))
    assert rc == 1 and "UNKNOWN" in out and "bytes scan decompresses of it" in " ".join(out.split()), out + err
    # an .npz object member alike (np.load streams it), and one whose header alone inflates past the bound
    header = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
    for name, pad, body in (("nops.npz", 0, b"N0" * 2_000_000), ("header.npz", 3_000_000, b"")):
        text = (header + " " * pad + "\n").encode()
        with zipfile.ZipFile(tmp_path / name, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("a.npy", b"\x93NUMPY\x02\x00" + len(text).to_bytes(4, "little") + text + b"\x80\x02" + body
                       + b"]N\x85b.")
        rc, out, err = cli("scan", str(tmp_path / name))
        assert rc == 1 and "UNKNOWN" in out and "bytes scan decompresses of it" in " ".join(out.split()), out + err
    n = 400_000
    rc, out, err = cli("scan", pickle_zip(tmp_path / "lists.pt", b"\x80\x02" + b"]" * n + b"."))
    budget = (limits().pickle_build_ratio * (n + 3) + BUILD_FLOOR) // MEMO_ENTRY_BYTES
    assert rc == 1 and "UNKNOWN" in out and f"a stack of more than {budget:,} entries" in " ".join(out.split())
    # a real save recompressed (its data.pkl deflated ~5:1) scans as before
    sd = {f"model.layers.{i // 10}.block.w{i % 10}.weight": torch.zeros(1) for i in range(2_000)}
    torch.save(sd, tmp_path / "many.pt")
    with zipfile.ZipFile(tmp_path / "many.pt") as src, \
            zipfile.ZipFile(tmp_path / "recompressed.pt", "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    rc, out, err = cli("scan", str(tmp_path / "recompressed.pt"))
    assert rc == 0 and "safe: every global" in out, out + err
