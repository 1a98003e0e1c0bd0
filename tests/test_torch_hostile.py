"""Hostile PyTorch files, built byte by byte: each must end in one clear CkptstatError, exit code 1
and one line on stderr, and nothing from a pickle may run."""
from __future__ import annotations

import io
import os
import pickle
import struct
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptstat import CkptstatError, CorruptCheckpointError, UnsafeCheckpointError, open_checkpoint
from ckptstat.analysis.scan.torch_load import scan
from ckptstat.cli import main
from ckptstat.formats import torch as tr

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "torch")


def torch_zip(path, pkl: bytes, records: dict[str, bytes] | None = None, prefix: str = "archive") -> str:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{prefix}/data.pkl", pkl)
        z.writestr(f"{prefix}/byteorder", b"little")
        for key, data in (records or {}).items():
            z.writestr(f"{prefix}/data/{key}", data)
    return str(path)


def assert_cli_error(path: str, capsys, *needles: str) -> str:
    rc = main([str(path)])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.count("\n") == 1 and err.startswith("ckptstat: error: ") and "Traceback" not in err
    for n in needles:
        assert n in err, err
    return err


class RunsShell:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [2, 4])
def test_os_system_pickle_is_refused_and_nothing_runs(tmp_path, capsys, protocol):
    marker = tmp_path / "pwned"
    evil = pickle.dumps({"w": RunsShell(str(marker))}, protocol=protocol)
    path = torch_zip(tmp_path / "evil.pt", evil)
    glob = f"{os.system.__module__}.system"
    with pytest.raises(UnsafeCheckpointError, match=glob.replace(".", r"\.")):
        open_checkpoint(path)
    err = assert_cli_error(path, capsys, glob)
    assert "outside torch's weights_only allowlist" in err
    r = scan(path)
    assert r["would_run_code"] and r["unsafe_globals"] == [glob]
    assert main(["scan", path]) == 1 and "UNSAFE" in capsys.readouterr().out   # 1: unsafe
    assert not marker.exists()


def test_legacy_stream_with_evil_object_pickle(tmp_path, capsys):
    marker = tmp_path / "pwned"
    data = b"".join(pickle.dumps(x, protocol=2) for x in (tr.LEGACY_MAGIC, tr.LEGACY_PROTOCOL, {"little_endian": True}))
    data += pickle.dumps(RunsShell(str(marker)), protocol=2) + pickle.dumps([], protocol=2)
    p = tmp_path / "evil.bin"
    p.write_bytes(data)
    with pytest.raises(UnsafeCheckpointError, match="system"):
        open_checkpoint(p)
    assert scan(str(p))["would_run_code"]
    assert not marker.exists()


def test_builtins_eval_and_getattr_are_refused(tmp_path):
    for module, name in (("builtins", "eval"), ("builtins", "getattr"), ("torch", "load"), ("subprocess", "Popen")):
        pkl = b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"X\x01\x00\x00\x001\x85R."
        with pytest.raises(UnsafeCheckpointError, match=f"{module}.{name}"):
            open_checkpoint(torch_zip(tmp_path / f"{name}.pt", pkl))


@pytest.mark.parametrize("cut", [10, 100, 1000, 3000, -200, -22, -1])
def test_truncated_zip(tmp_path, capsys, cut):
    data = open(os.path.join(FIX, "dtypes.pt"), "rb").read()
    p = tmp_path / "cut.pt"
    p.write_bytes(data[:cut])
    with pytest.raises(CkptstatError):
        open_checkpoint(p)
    assert_cli_error(str(p), capsys, str(p))


def test_storage_record_shorter_than_its_tensor(tmp_path, capsys):
    src = os.path.join(FIX, "dtypes.pt")
    p = tmp_path / "short.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(p, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info.filename, data[:-4] if "/data/" in info.filename else data)
    with pytest.raises(CorruptCheckpointError, match="needs .* bytes of dtypes/data/"):
        open_checkpoint(p)
    assert_cli_error(str(p), capsys, "needs")


def test_missing_storage_record(tmp_path):
    src = os.path.join(FIX, "my_weights.v2.pth")
    p = tmp_path / "missing.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(p, "w") as zout:
        for info in zin.infolist():
            if not info.filename.endswith("/data/0"):
                zout.writestr(info.filename, zin.read(info))
    with pytest.raises(CorruptCheckpointError, match="has no record"):
        open_checkpoint(p)


def test_central_directory_pointing_past_the_end(tmp_path, capsys):
    data = bytearray(open(os.path.join(FIX, "my_weights.v2.pth"), "rb").read())
    # central directory entries (PKWARE APPNOTE 4.3.12): give the data/0 record a 1 GB size
    entries = [i for i in range(len(data)) if data[i:i + 4] == b"PK\x01\x02"]
    patched = 0
    for e in entries:
        n = struct.unpack_from("<H", data, e + 28)[0]
        if data[e + 46: e + 46 + n].endswith(b"/data/0"):
            struct.pack_into("<II", data, e + 20, 10**9, 10**9)  # compressed and uncompressed size
            patched += 1
    assert patched == 1
    p = tmp_path / "big.pt"
    p.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="past the end"):
        open_checkpoint(p)
    assert_cli_error(str(p), capsys, "past the end")


def test_legacy_storage_count_past_the_end(tmp_path, capsys):
    data = bytearray(open(os.path.join(FIX, "dtypes-legacy.pt"), "rb").read())
    f = io.BytesIO(bytes(data))
    for _ in range(5):
        pickle.load(f) if _ != 3 else tr.unpickle(f, "x", "obj")
    struct.pack_into("<q", data, f.tell(), 10**12)
    p = tmp_path / "legacy.pt"
    p.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="past the end"):
        open_checkpoint(p)
    assert_cli_error(str(p), capsys, "claims")


def test_huge_list_is_refused(tmp_path, capsys):
    path = torch_zip(tmp_path / "list.pt", pickle.dumps({"x": [0] * (tr.MAX_ITEMS + 1)}, protocol=2))
    with pytest.raises(CorruptCheckpointError, match="more than 1,000,000 items"):
        open_checkpoint(path)
    assert_cli_error(path, capsys, "items")


def test_deep_stack_nesting_is_refused(tmp_path, capsys):
    n = tr.MAX_STACK + 10
    path = torch_zip(tmp_path / "deep.pt", b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b".")
    with pytest.raises(CorruptCheckpointError, match="stack deeper"):
        open_checkpoint(path)
    assert_cli_error(path, capsys, "stack")


def test_deep_nesting_through_the_memo_is_refused(tmp_path, capsys):
    """Nesting built with constant stack depth: list i+1 appended to list i fetched from the memo."""
    body = b"]r\x00\x00\x00\x00"  # EMPTY_LIST, LONG_BINPUT 0
    for i in range(5000):
        body += b"j" + struct.pack("<I", i) + b"]r" + struct.pack("<I", i + 1) + b"a0"  # GET i, [], PUT, APPEND, POP
    path = torch_zip(tmp_path / "memo.pt", b"\x80\x02" + body + b".")
    with pytest.raises(CorruptCheckpointError, match="levels deep"):
        open_checkpoint(path)
    assert_cli_error(path, capsys, "deep")


def test_shared_containers_do_not_blow_up(tmp_path):
    """A 'billion laughs' pickle (each list holds the previous one twice) is walked once per list."""
    body = b"]r\x00\x00\x00\x00"
    for i in range(60):
        body += b"(j" + struct.pack("<I", i) + b"j" + struct.pack("<I", i) + b"lr" + struct.pack("<I", i + 1)
    path = torch_zip(tmp_path / "laughs.pt", b"\x80\x02" + body + b".")
    assert len(open_checkpoint(path)) == 0


def test_huge_memo_index_allocates_nothing(tmp_path):
    path = torch_zip(tmp_path / "memo.pt", b"\x80\x02Nr\xff\xff\xff\x7f.")  # LONG_BINPUT 2**31-1
    assert len(open_checkpoint(path)) == 0


def test_bytearray_of_a_huge_int_is_refused(tmp_path):
    pkl = b"\x80\x02cbuiltins\nbytearray\n\x8a\x05\x00\x00\x00\x00\x01\x85R."  # bytearray(2**32)
    with pytest.raises(CorruptCheckpointError, match="bytearray"):
        open_checkpoint(torch_zip(tmp_path / "ba.pt", pkl))


def test_persistent_id_with_a_bad_storage_is_refused(tmp_path):
    pkl = pickle.dumps(("storage", "notatype", "0", "cpu", 4), protocol=2)
    pkl = b"\x80\x02" + pkl[2:-1] + b"Q."  # BINPERSID on the tuple
    with pytest.raises(CorruptCheckpointError, match="malformed storage id"):
        open_checkpoint(torch_zip(tmp_path / "pid.pt", pkl))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_data_pkl_raises_only_our_errors(tmp_path, data):
    """Random byte changes in a real data.pkl: ckptstat either reads the file or raises its own error."""
    with zipfile.ZipFile(os.path.join(FIX, "dtypes.pt")) as z:
        pkl = bytearray(z.read("dtypes/data.pkl"))
        records = {n.rsplit("/", 1)[-1]: z.read(n) for n in z.namelist() if "/data/" in n}
    for _ in range(data.draw(st.integers(1, 4))):
        pkl[data.draw(st.integers(0, len(pkl) - 1))] = data.draw(st.integers(0, 255))
    path = torch_zip(tmp_path / "m.pt", bytes(pkl), records)
    try:
        ckpt = open_checkpoint(path)
        for t in ckpt:
            ckpt.read(t.name)
    except CkptstatError:
        pass
