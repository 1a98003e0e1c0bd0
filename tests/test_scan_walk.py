"""The models scan follows torch.load with, each against the real thing:

- the pickle walk (pickle_machine.py / pickle_walk.py) against CPython's C unpickler, on random opcode
  streams and mutated real pickles: every global the C unpickler asks `find_class` for is one the walk
  reports; where the walk says the unpickler fails, it does; where the unpickler succeeds, the walk
  ends at the same byte; frames read from a stream without `peek` drop their tail as the C code does;
- torch's zip record lookup (containers.TorchZip: miniz's case-blind, heap-sorted binary search)
  against torch's own reader, on random archives with same-named and differently-cased entries.
"""
from __future__ import annotations

import _compat_pickle
import io
import os
import pickle
import random
import struct
import zipfile

import pytest

from ckptstat.formats.torch.containers import TorchZip, is_legacy_head
from ckptstat.formats.torch.pickle_walk import walk
from ckptstat.formats.torch.streams import BytesSource


class _Dummy:
    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __call__(self, *args: object, **kwargs: object) -> _Dummy:
        return _Dummy()


class _Spy(pickle.Unpickler):
    """The C unpickler with every global replaced by a harmless class; records what it asks for."""

    def __init__(self, f, seen: list[tuple[str, str]]):
        super().__init__(f, encoding="utf-8")
        self.seen = seen

    def find_class(self, module, name):
        self.seen.append((module, name))
        return _Dummy


class _PersistentSpy(_Spy):
    def persistent_load(self, pid):
        return _Dummy()


def _c_unpickle(data: bytes, peek: bool, persistent: bool = True) -> tuple[list[str], bool, int, list[tuple[str, str]]]:
    seen: list[tuple[str, str]] = []
    f = io.BufferedReader(io.BytesIO(data)) if peek else io.BytesIO(data)
    try:
        (_PersistentSpy if persistent else _Spy)(f, seen).load()
        ok = True
    except Exception:  # noqa: BLE001 - whatever the C unpickler raises
        ok = False
    return [f"{m}.{n}" for m, n in seen], ok, f.tell(), seen


def _su(s: str) -> bytes:
    b = s.encode()
    return b"\x8c" + bytes([len(b)]) + b


TOKENS = [b"(", b"0", b"1", b"2", b"N", b")", b"]", b"}", b"\x8f", b"t", b"\x85", b"\x86", b"\x87", b"l", b"d", b"a", b"e",
          b"s", b"u", b"\x90", b"\x91", b"R", b"b", b"\x81", b"\x92", b"\x93", b"\x94", b".", b"K\x01", b"J\x00\x00\x00\x00",
          b"\x88", b"\x89", b"I12\n", b"I01\n", _su("m"), _su("n"), _su("os"), _su("system"), b"U\x01m", b"U\x01n",
          b"X\x01\x00\x00\x00n", b"S'm'\n", b"Vn\n", b"cm\nn\n", b"cos\nsystem\n", b"im\nn\n", b"q\x00", b"q\x01", b"h\x00",
          b"h\x01", b"p0\n", b"g0\n", b"g1\n", b"Q", b"Pid\n", b"\x82\x01", b"\xff", b"C\x01x", b"\x80\x02", b"\x80\x04",
          b"G" + struct.pack(">d", 1.0)]


def _random_stream(rng: random.Random) -> bytes:
    body = b"".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 25)))
    if rng.random() < 0.7:
        body += b"."
    if rng.random() < 0.25:
        body = b"\x95" + struct.pack("<Q", rng.randint(0, len(body)) + rng.choice([0, 0, 1])) + body
    return body


class _Reduce:
    def __init__(self, f, args):
        self.f, self.args = f, args

    def __reduce__(self):
        return (self.f, self.args)


def _random_object(rng: random.Random, depth: int = 0) -> object:
    k = rng.randint(0, 9 if depth < 3 else 4)
    if k == 0:
        return rng.randint(-5, 300)
    if k == 1:
        return rng.choice(["a", "os", "system", "\u00fc", "x" * 300])
    if k == 2:
        return b"xy"
    if k == 3:
        return None
    if k == 4:
        return 1.5
    if k == 5:
        return [_random_object(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if k == 6:
        return {str(i): _random_object(rng, depth + 1) for i in range(rng.randint(0, 3))}
    if k == 7:
        return tuple(_random_object(rng, depth + 1) for _ in range(rng.randint(0, 4)))
    if k == 8:
        return _Reduce(rng.choice([os.getcwd, len, print, dict]), ())
    shared = _random_object(rng, depth + 1)
    return [shared, shared]


def _mutated_pickle(rng: random.Random) -> bytes:
    data = bytearray(pickle.dumps(_random_object(rng), protocol=rng.randint(0, 5)))
    for _ in range(rng.randint(0, 3)):
        k = rng.random()
        if k < 0.3 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif k < 0.6:
            i = rng.randint(0, len(data))
            data[i:i] = rng.choice(TOKENS)
        elif k < 0.8 and data:
            i = rng.randrange(len(data))
            del data[i:i + rng.randint(1, 3)]
        else:
            del data[rng.randint(0, len(data)):]
    return bytes(data)


def _mapped(module: str, attr: str) -> str:
    """A global as the C unpickler imports it when fix_imports applies (protocol < 3)."""
    if (module, attr) in _compat_pickle.NAME_MAPPING:
        module, attr = _compat_pickle.NAME_MAPPING[(module, attr)]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    return f"{module}.{attr}"


@pytest.mark.parametrize("make", [_random_stream, _mutated_pickle], ids=["opcode-streams", "mutated-pickles"])
def test_walk_agrees_with_the_c_unpickler(make):
    rng = random.Random(20260514)
    succeeded = 0
    for _ in range(1200):
        data = make(rng)
        for peek in (False, True):
            w = walk(BytesSource(data), "x", 0, persistent=True, buffering="peek" if peek else "drop")
            seen, ok, end, pairs = _c_unpickle(data, peek)
            names = set(w.counts)
            if any(n.startswith("<") for n in names):
                continue           # the walk gave up naming a global: conservatively unsafe, nothing to compare
            # `find_class` overridden sees Python 2 names unmapped; the walk reports them as imported
            c = {f"{m}.{n}" if f"{m}.{n}" in names else _mapped(m, n) for m, n in pairs}
            assert c <= names, (data, seen, names)
            if w.failure:
                assert not ok, (data, w.failure)
            if ok and not w.ambiguous:
                assert w.end == end and names == c, (data, w.end, end, names, seen)
                succeeded += 1
    assert succeeded > 50


def test_a_frame_s_tail_is_dropped_without_peek():
    """C unpickler, stream without peek (io.BytesIO: a zip's data.pkl): a line that does not end inside
    the FRAME is read again from after the frame. Here the frame holds `cbuil`, then `posix\\nsystem\\n`
    follows: the C unpickler imports posix.system, a sequential reader would see `builposix`."""
    data = b"\x80\x04\x95" + struct.pack("<Q", 5) + b"cbuil" + b"posix\nsystem\n."
    seen, ok, _, _ = _c_unpickle(data, peek=False)
    assert seen == ["posix.system"]
    w = walk(BytesSource(data), "x", 0, buffering="drop")
    assert set(w.counts) == {"posix.system"} and w.findings
    # with peek (a buffered file) it depends on the buffer: scan says it cannot tell
    assert walk(BytesSource(data), "x", 0, buffering="peek").ambiguous


def test_stop_inside_a_frame():
    """The next pickle of a stream starts after the frame without peek, and is ambiguous with peek."""
    data = b"\x80\x04\x95" + struct.pack("<Q", 6) + b"K\x01.cos" + b"\nsystem\n."
    w = walk(BytesSource(data), "x", 0, buffering="drop")
    f = io.BytesIO(data)
    pickle.load(f)
    assert w.end == f.tell() == 3 + 8 + 6
    assert walk(BytesSource(data), "x", 0, buffering="peek").ambiguous


@pytest.mark.parametrize("data, why", [
    (b"(cos\nsystem\n" * 0 + b"ios\nsystem\n.", "could not find MARK"),       # INST looks for its MARK first
    (b"\x80\x04C\x02osC\x06system\x93.", "STACK_GLOBAL requires str"),           # bytes are no names
    (b"\x80\x06.", "unsupported pickle protocol"),
    (b"\x80\x02h\x05.", "memo value not found"),
    (b"\x80\x05\x97.", "out-of-band"),
    (b"\x80\x02K\x01Q.", "persistent id"),
])
def test_certain_failures_import_nothing(data, why):
    w = walk(BytesSource(data), "x", 0)
    assert w.failure and why in w.failure and not w.findings
    seen, ok, _, _ = _c_unpickle(data, peek=False, persistent=False)
    assert not ok and not seen


def test_stack_global_names_however_pushed():
    cases = {
        b"\x80\x04U\x08builtinsU\x04exec\x93.": "builtins.exec",                  # SHORT_BINSTRING (Python 2 str)
        b"S'built\\x69ns'\nS'exec'\n\x93.": "builtins.exec",                      # text STRING with an escape
        b"\x80\x04\x8c\x08builtins2\x93.": "builtins.builtins",                    # DUP
        b"\x80\x04\x8c\x08builtinsp3\n0g3\n\x8c\x04exec\x93.": "builtins.exec",   # text PUT / GET
        b"Vbuiltins\nVexec\n\x93.": "builtins.exec",                              # UNICODE, no PROTO
    }
    for data, name in cases.items():
        seen, _, _, _ = _c_unpickle(data, peek=False)
        w = walk(BytesSource(data), "x", 0)
        assert seen == [name] and set(w.counts) == {name}, (data, seen, w.counts)


def test_legacy_magic_however_pickled():
    magic = 0x1950A86A20F9469CFC6C
    for proto in range(6):
        assert is_legacy_head(pickle.dumps(magic, protocol=proto)), proto
    assert not is_legacy_head(pickle.dumps(magic + 1, protocol=2))
    assert not is_legacy_head(b"\x80\x02ctorch\nFloatStorage\n.")


# ---------------------------------------------------------------------------------------------
# torch's zip record lookup

def _zip(entries: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in entries:
            z.writestr(name, data)
    return buf.getvalue()


def test_record_lookup_matches_torch():
    torch = pytest.importorskip("torch")
    import warnings

    warnings.simplefilter("ignore")
    rng = random.Random(7)
    names = ["data.pkl", "DATA.PKL", "Data.pkl", "data.pkL", "data.pk", "data.pkl0", "byteorder", "data/0", "DATA/0",
             "a", "z", "DATA.pkl"]
    compared = 0
    for i in range(400):
        entries = [("archive/" + rng.choice(names), f"{i}-{j}".encode()) for j in range(rng.randint(1, 14))]
        entries.append(("archive/version", b"3\n"))
        rng.shuffle(entries)
        if not entries[0][0].startswith("archive/"):
            continue
        data = _zip(entries)
        tz = TorchZip(zipfile.ZipFile(io.BytesIO(data)).infolist())
        reader = torch._C.PyTorchFileReader(io.BytesIO(data))
        for record in ("data.pkl", "byteorder", "data/0"):
            info = tz.locate(record)
            try:
                theirs = bytes(reader.get_record(record))
            except RuntimeError:
                theirs = None
            mine = None if info is None else zipfile.ZipFile(io.BytesIO(data)).read(info)
            assert mine == theirs, (entries, record)
            compared += 1
    assert compared > 1000


def test_archive_refusals_match_torch():
    torch = pytest.importorskip("torch")
    cases = [
        [("archive/data.pkl", b""), ("other/version", b"3\n")],      # an entry outside the folder
        [("data.pkl", b""), ("archive/version", b"3\n")],            # the first entry in no folder
        [("archive/data.pkl", b""), ("ARCHIVE/version", b"3\n")],    # the folder check is case-sensitive
        [("archive/data.pkl", b""), ("archive/version", b"3\n")],
    ]
    for entries in cases:
        data = _zip(entries)
        tz = TorchZip(zipfile.ZipFile(io.BytesIO(data)).infolist())
        try:
            torch._C.PyTorchFileReader(io.BytesIO(data)).get_all_records()
            theirs = True
        except RuntimeError:
            theirs = False
        assert (tz.refusal is None) == theirs, (entries, tz.refusal)
