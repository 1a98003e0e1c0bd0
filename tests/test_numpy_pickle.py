"""Plain pickles of numpy arrays (formats/numpy_pickle.py): JAX/Haiku-style `pickle.dump` parameter trees and
PaddlePaddle's `paddle.save` files, every array against what its loader reads (pickle.load live; paddle.load as
fixtures/make_numpy_pickles.py recorded it), read by offset without unpickling anything; what is refused."""
from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import struct

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
            assert t.offset is not None or "latin1" in t.extra   # read in place (protocol 2: decoded from its text)


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


class _Python2Pickler(pickle._Pickler):
    """Python 3's pickler writing bytes and str as Python 2's pickle wrote its `str` (SHORT_BINSTRING / BINSTRING, the
    bytes as they are), numpy's module spelled as numpy < 2 did: what `cPickle.dump(params, f, 2)` wrote."""

    def save_bytes(self, obj):
        self.write((pickle.SHORT_BINSTRING + bytes([len(obj)]) if len(obj) < 256 else
                    pickle.BINSTRING + struct.pack("<i", len(obj))) + obj)
        self.memoize(obj)

    def save_str(self, obj):
        data = obj.encode("latin-1")
        self.write((pickle.SHORT_BINSTRING + bytes([len(data)]) if len(data) < 256 else
                    pickle.BINSTRING + struct.pack("<i", len(data))) + data)

    dispatch = {**pickle._Pickler.dispatch, bytes: save_bytes, str: save_str}


def _tree():
    rng = np.random.default_rng(1)
    return {"params": {"w": rng.standard_normal((6, 5)).astype(np.float32),          # bytes >= 0x80: two in UTF-8
                       "big": rng.standard_normal((40, 40)).astype(np.float32),      # 6.4 KB: not read at open
                       "half": rng.standard_normal(9).astype(np.float16), "be": rng.standard_normal(7).astype(">f4"),
                       "fortran": np.asfortranarray(rng.standard_normal((3, 4))), "zeros": np.zeros(3, np.float32)},
            "quant": [rng.integers(-128, 128, (4, 4)).astype(np.int8)], "step": np.int64(7)}


def _writes(tmp_path):
    p2 = tmp_path / "params-p2.pkl"
    p2.write_bytes(pickle.dumps(_tree(), protocol=2))
    buf = io.BytesIO()
    _Python2Pickler(buf, protocol=2).dump(_tree())
    py2 = tmp_path / "params-py2.pkl"
    py2.write_bytes(buf.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    out = {"p2": str(p2), "py2": str(py2)}
    numpy_own = os.path.join(os.path.dirname(np.__file__), "_core", "tests", "data", "astype_copy.pkl")
    if os.path.exists(numpy_own):   # numpy's own test file, written by Python 2 (its test loads it with latin1)
        out["numpy's py2"] = numpy_own
    return out


def test_protocol_2_and_python_2_pickles_read_as_pickle_load_reads_them(tmp_path):
    """Protocol 2 has no bytes opcode: an array's bytes are `_codecs.encode(text, 'latin1')` of UTF-8 text; Python 2
    wrote them as a str. The oracle: pickle.load(f, encoding='latin1'), numpy's advice for both."""
    files = _writes(tmp_path)
    assert len(files) == 3, "numpy's own Python 2 pickle is missing from this numpy"
    for what, path in files.items():
        with open(path, "rb") as f:
            back = pickle.load(f, encoding="latin1")
        want = {k: np.asarray(v) for k, v in (flat_tree(back).items() if not isinstance(back, np.ndarray)
                                                else {"array": back}.items())}
        with open_checkpoint(path) as ck:
            assert sorted(ck.tensors) == sorted(want), what
            for name, a in want.items():
                assert list(ck[name].shape) == list(a.shape), (what, name)
                assert ck[name].dtype == dtypes.NUMPY_NAMES[a.dtype.name], (what, name)
                assert np.array_equal(ck.read(name).reshape(-1), a.reshape(-1), equal_nan=True), (what, name)
            assert ("latin1" in ck[next(iter(want))].extra) == (what == "p2")
            assert any("Python 2" in n for n in ck.notes) == (what != "p2"), ck.notes


def flat_tree(tree, prefix=""):
    if isinstance(tree, dict):
        return {k2: v2 for k, v in tree.items() for k2, v2 in flat_tree(v, f"{prefix}.{k}" if prefix else k).items()}
    if isinstance(tree, (list, tuple)):
        return {k2: v2 for i, v in enumerate(tree) for k2, v2 in flat_tree(v, f"{prefix}.{i}" if prefix else str(i)).items()}
    return {prefix: tree}


def test_stats_of_a_protocol_2_pickle_equal_the_protocol_4_ones(tmp_path, capsys):
    files = _writes(tmp_path)
    p4 = tmp_path / "params-p4.pkl"
    p4.write_bytes(pickle.dumps(_tree(), protocol=4))
    runs = {}
    for label, args in (("p4", [str(p4)]), ("p2", [files["p2"]]), ("p2 -w2", [files["p2"], "--workers", "2"]),
                        ("py2", [files["py2"]])):
        assert main(["stats", *args, "--json"]) == 0
        runs[label] = [{k: v for k, v in t.items() if k != "file"} for t in json.loads(capsys.readouterr().out)["tensors"]]
    want = [{k: pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for k, v in t.items()} for t in runs["p4"]]
    for label in ("p2", "p2 -w2", "py2"):   # (moments to the last bits: tensors read apart or in a run of tiny ones)
        assert runs[label] == want, label


def _p2_with_text(text: str) -> bytes:
    """A protocol-2 pickle of one float32 array of 2 values whose latin-1 text is `text` (as written, in UTF-8)."""
    good = pickle.dumps({"w": np.array([1.0, 2.0], np.float32)}, protocol=2)
    real = np.array([1.0, 2.0], np.float32).tobytes().decode("latin-1").encode("utf-8")
    at = good.index(real)
    return good[:at - 4] + struct.pack("<I", len(text.encode("utf-8"))) + text.encode("utf-8") + good[at + len(real):]


def test_a_protocol_2_array_that_is_not_latin1_text_is_one_line(tmp_path, capsys):
    path = tmp_path / "bad.pkl"
    path.write_bytes(_p2_with_text("\u0101" * 8))   # 8 characters over 255: _codecs.encode raises on them
    assert main([str(path)]) == 0   # (the header says nothing wrong)
    capsys.readouterr()
    assert main(["stats", str(path)]) != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not latin-1" in err and "Traceback" not in err, err
    path.write_bytes(_p2_with_text("\x00" * 3))   # 3 bytes for 8
    _refused(path, capsys, "3 bytes of data for [2] F32")


@pytest.mark.parametrize("protocol", [0, 1])
def test_protocol_0_and_1_pickles_read_as_pickle_load_reads_them(tmp_path, capsys, protocol):
    """Protocols 0 and 1 (no PROTO opcode; protocol 0 is text) write an array's bytes as `_codecs.encode(text,
    'latin1')` too: a BINUNICODE at 1, a UNICODE line of raw-unicode-escape at 0 (a newline and a backslash escaped,
    every other byte as it is). Every byte value, a 6.4 KB array not read at open, Fortran and big-endian arrays;
    the oracle pickle.load, and stats equal to the protocol-4 save's."""
    tree = {**_tree(), "every_byte": np.arange(256, dtype=np.uint8).reshape(16, 16)}
    path = tmp_path / f"params-p{protocol}.pkl"
    path.write_bytes(pickle.dumps(tree, protocol=protocol))
    with open_checkpoint(_reads_as_pickle_load(path, tree, tmp_path, capsys)) as ck:
        assert ck.metadata["pickle.protocol"] == "0 or 1"
        assert {t.extra["latin1"][2] for t in ck.tensors.values()} == {"raw_unicode_escape" if protocol == 0 else "utf-8"}


def _reads_as_pickle_load(path, tree, tmp_path, capsys) -> str:
    """Every array of the pickle at `path` is what pickle.load(f, encoding='latin1') gives (shape, dtype, values), and
    `stats` of it equal those of `tree` saved at protocol 4."""
    with open(path, "rb") as f:
        want = {k: np.asarray(v) for k, v in flat_tree(pickle.load(f, encoding="latin1")).items()}
    with open_checkpoint(str(path)) as ck:
        assert sorted(ck.tensors) == sorted(want)
        for name, a in want.items():
            assert list(ck[name].shape) == list(a.shape) and ck[name].dtype == dtypes.NUMPY_NAMES[a.dtype.name], name
            assert np.array_equal(ck.read(name).reshape(-1), a.reshape(-1), equal_nan=True), name
    p4 = tmp_path / "params-p4.pkl"
    p4.write_bytes(pickle.dumps(tree, protocol=4))
    runs = []
    for p in (p4, path):
        assert main(["stats", str(p), "--json"]) == 0
        runs.append([{k: v for k, v in t.items() if k != "file"} for t in json.loads(capsys.readouterr().out)["tensors"]])
    assert runs[1] == [{k: pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for k, v in t.items()}
                       for t in runs[0]]
    return str(path)


class _Python2TextPickler(pickle._Pickler):
    """Python 3's pickler writing str and bytes as Python 2's protocol 0 wrote its `str`: STRING, the repr on one line
    (Python 3's bytes repr is Python 2's str repr: `\\x..` escapes, the quote it needs), numpy's module as numpy < 2
    spelled it: what `pickle.dump(params, f)` wrote in Python 2."""

    def save_bytes(self, obj):
        self.write(pickle.STRING + repr(obj)[1:].encode("ascii") + b"\n")
        self.memoize(obj)

    def save_str(self, obj):
        self.write(pickle.STRING + repr(obj.encode("latin-1"))[1:].encode("ascii") + b"\n")

    dispatch = {**pickle._Pickler.dispatch, bytes: save_bytes, str: save_str}


def _python2_p0(tree) -> bytes:
    buf = io.BytesIO()
    _Python2TextPickler(buf, protocol=0).dump(tree)
    return buf.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


def test_python_2_protocol_0_pickles_read_as_pickle_load_reads_them(tmp_path, capsys):
    """Python 2's default: protocol 0, an array's bytes a STRING line of the str's repr; the oracle
    pickle.load(f, encoding='latin1'), and stats equal to the protocol-4 save's."""
    tree = {**_tree(), "every_byte": np.arange(256, dtype=np.uint8), "quotes": np.frombuffer(b"'\"\\\n", np.uint8)}
    path = tmp_path / "params-py2-p0.pkl"
    path.write_bytes(_python2_p0(tree))
    with open_checkpoint(_reads_as_pickle_load(path, tree, tmp_path, capsys)) as ck:
        assert ck.metadata["pickle.writer"] == "pickle.dump (Python 2)"


def test_a_python_2_string_line_that_is_not_a_repr_is_one_line(tmp_path, capsys):
    good = _python2_p0({"w": np.arange(3000, dtype=np.float32)})
    longest = max(good.split(b"\n"), key=len)   # the data's STRING line (a MARK before it)
    at = good.index(longest)
    path = tmp_path / "bad.pkl"
    path.write_bytes(good[:at] + longest.replace(b"\\x", b"\\x4\\x", 1) + good[at + len(longest):])   # long: on read
    assert main([str(path)]) == 0
    capsys.readouterr()
    assert main(["stats", str(path)]) != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    small = _python2_p0({"w": np.arange(2, dtype=np.float32)})
    path.write_bytes(small.replace(b"S'\\x00", b"S\\x00", 1))   # not quoted
    _refused(path, capsys, "not quoted")
    path.write_bytes(small.replace(b"S'\\x00", b"S'\\x0", 1))   # \x0 then a quote: not a repr
    _refused(path, capsys, "not a str's repr")


def _p0_with_line(line: bytes, values: int = 2000) -> bytes:
    """A protocol-0 pickle of one float32 array of `values` values whose UNICODE line is `line`."""
    good = pickle.dumps({"w": np.arange(values, dtype=np.float32)}, protocol=0)
    longest = max(good.split(b"\n"), key=len)   # the data's line: MARK, then the UNICODE opcode and its text
    assert longest.startswith(b"(V")
    at = good.index(longest + b"\n") + 2
    return good[:at] + line + good[at + len(longest) - 2:]


def test_a_protocol_0_line_that_is_not_latin1_text_is_one_line(tmp_path, capsys):
    path = tmp_path / "bad.pkl"
    path.write_bytes(_p0_with_line(b"\\u0101" * 8000))   # 8,000 characters over 255 (a long line: read on use)
    assert main([str(path)]) == 0
    capsys.readouterr()
    assert main(["stats", str(path)]) != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not latin-1" in err and "Traceback" not in err, err
    path.write_bytes(_p0_with_line(b"\x00" * 3, values=2))   # 3 bytes for 8 (a short line: decoded at open)
    _refused(path, capsys, "3 bytes of data for [2] F32")
    path.write_bytes(_p0_with_line(b"\\u00zz", values=2))   # not raw-unicode-escape
    _refused(path, capsys, "not raw-unicode-escape")
    path.write_bytes(pickle.dumps({"w": np.arange(3000, dtype=np.float32)}, protocol=0)[:9000])   # cut in the line
    assert main(["stats", str(path)]) != 0 and "Traceback" not in capsys.readouterr().err


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
