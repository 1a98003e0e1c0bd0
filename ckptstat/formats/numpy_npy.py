"""numpy `.npy` arrays and `.npz` archives of them (docs/numpy.md; the layout is numpy's NEP 1,
numpy/lib/format.py).

`.npy`: the magic `\\x93NUMPY`, version major and minor bytes, the header length (u16 little-endian in
version 1.0, u32 in 2.0 and 3.0), then the header, a Python dict literal `{'descr': '<f4',
'fortran_order': False, 'shape': (3, 4), }` padded with spaces to a 64-byte boundary, then the raw
values. `.npz`: a zip archive (numpy.savez: stored; savez_compressed: deflated) whose member `x.npy`
holds the array saved under the key `x`.

The header is parsed with ast.literal_eval (literals only: nothing is ever called), at most
MAX_HEADER bytes as numpy's own reader allows by default. Object arrays (descr `|O`) hold a pickle:
refused, never unpickled. Values of a stored member are read in place by offset; a deflated member
streams through the same reader as a recompressed torch record (formats/torch/zipstream.py).
"""
from __future__ import annotations

import ast
import io
import os
import struct
import tokenize
import zipfile
from typing import IO

from ..core import Checkpoint, TensorInfo, dtypes
from ..core.files import open_regular
from ..errors import CorruptCheckpointError, UnsafeCheckpointError
from .registry import Format, Probe, register
from .torch.containers import data_offset, zip_open
from .torch.zipstream import ZipStreamReader

MAGIC = b"\x93NUMPY"
MAX_HEADER = 10000          # numpy.lib.format._MAX_HEADER_SIZE, np.load's default max_header_size
MAX_MEMBERS = 1 << 16
NUMPY_TYPES = dtypes.NUMPY_CODES   # a descr's kind and item size; its byte order from the descr's prefix


def header_end(data: bytes) -> int:
    """Where the header of a .npy stream starting with `data` (its first 12 bytes at least) ends; 0 when the magic
    or the version is not numpy's (`_header` then says which)."""
    if data[:6] != MAGIC or len(data) < 12 or data[6] not in (1, 2, 3):
        return 0
    return int(10 + struct.unpack_from("<H", data, 8)[0] if data[6] == 1 else 12 + struct.unpack_from("<I", data, 8)[0])


def _py2_longs(text: str) -> str:
    """A Python 2 header's `3L` as `3`: numpy's own `_filter_header` (tokens, never eval), which np.load applies to
    a version 1.0 or 2.0 header that is not a literal as written."""
    tokens, number = [], False
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if not (number and tok.type == tokenize.NAME and tok.string == "L"):
            tokens.append(tok)
        number = tok.type == tokenize.NUMBER
    return tokenize.untokenize(tokens)


def _literal(text: str, major: int) -> object:
    try:
        return ast.literal_eval(text)
    except SyntaxError:
        if major > 2:
            raise
    return ast.literal_eval(_py2_longs(text))


def _header(path: str, data: bytes, what: str, limit: int = MAX_HEADER) -> tuple[int, dict[str, object]]:
    """(offset of the values, the header dict) from the first bytes of a .npy stream; a header longer than `limit`
    is refused (np.load's max_header_size, which allow_pickle=True lifts)."""
    if data[:6] != MAGIC or len(data) < 10:
        raise CorruptCheckpointError(path, f"{what}: no .npy magic (\\x93NUMPY)")
    major = data[6]
    if major == 1:
        (n,), start = struct.unpack_from("<H", data, 8), 10
    elif major in (2, 3):
        if len(data) < 12:
            raise CorruptCheckpointError(path, f"{what}: .npy header ends early")
        (n,), start = struct.unpack_from("<I", data, 8), 12
    else:
        raise CorruptCheckpointError(path, f"{what}: .npy version {major}.{data[7]} (1.0, 2.0 and 3.0 exist)")
    if n > limit:
        raise CorruptCheckpointError(path, f"{what}: .npy header of {n:,} bytes, more than numpy reads ({limit:,})")
    if start + n > len(data):
        raise CorruptCheckpointError(path, f"{what}: .npy header of {n:,} bytes runs past the end")
    text = data[start:start + n].decode("utf-8" if major == 3 else "latin1")
    try:
        header = _literal(text, major)
    except (ValueError, SyntaxError, MemoryError, RecursionError, tokenize.TokenError):
        raise CorruptCheckpointError(path, f"{what}: .npy header is not a Python literal") from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise CorruptCheckpointError(path, f"{what}: .npy header is not a dict of descr, fortran_order and shape")
    return start + n, header


def _tensor(path: str, name: str, header: dict[str, object], file: str, offset: int | None, stored: int,
            extra: dict[str, object]) -> TensorInfo:
    descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
    if not isinstance(descr, str):
        raise CorruptCheckpointError(path, f"array {name!r}: descr {descr!r} is a structured dtype; not read")
    if descr.endswith("O"):
        raise UnsafeCheckpointError(path, f"array {name!r} holds Python objects (a pickle); not unpickled")
    order, code = (descr[0], descr[1:]) if descr[:1] in "<>|=" else ("=", descr)
    if code[:1] == "V" and code[1:].isdigit():
        raise CorruptCheckpointError(path, f"array {name!r}: dtype {descr!r} is untyped bytes (numpy void), as np.save "
                                           "writes ml_dtypes' bfloat16 (V2) and float8 (V1) arrays and np.load gives "
                                           "them back; not read")
    if code not in NUMPY_TYPES or order == "=":
        raise CorruptCheckpointError(path, f"array {name!r}: dtype {descr!r} is not one ckptstat reads")
    if not isinstance(shape, tuple) or not isinstance(fortran, bool):
        raise CorruptCheckpointError(path, f"array {name!r}: shape {shape!r} / fortran_order {fortran!r} malformed")
    dims = tuple(shape)
    stride = None
    if fortran and len(dims) > 1:   # column-major: element strides of the transposed layout
        acc, strides = 1, []
        for d in dims:
            strides.append(acc)
            acc *= d if isinstance(d, int) else 1
        stride = tuple(strides)
    probe = TensorInfo(name, NUMPY_TYPES[code], dims, file, offset, 0)   # validates the shape
    need = dtypes.get(probe.dtype).nbytes(probe.numel)
    if stored != need:
        raise CorruptCheckpointError(path, f"array {name!r} ({descr}, shape {dims}) needs {need:,} bytes, "
                                           f"the file holds {stored:,}")
    return TensorInfo(name, probe.dtype, dims, file, offset, need, byteorder="big" if order == ">" else "little",
                      stride=stride, extra=extra)


def _open_npy(path: str) -> Checkpoint:
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(12 + MAX_HEADER)
    offset, header = _header(path, head, os.path.basename(path))
    name = os.path.basename(path).removesuffix(".npy")
    t = _tensor(path, name, header, path, offset, size - offset, {})
    return Checkpoint(path=path, format="numpy (npy)", tensors={name: t}, files=(path,))


def _open_npz(path: str) -> Checkpoint:
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        zf = zip_open(path, f)
        members = zf.infolist()
        if len(members) > MAX_MEMBERS:
            raise CorruptCheckpointError(path, f"archive lists {len(members):,} members (at most {MAX_MEMBERS:,} read)")
        tensors: dict[str, TensorInfo] = {}
        compressed, others = 0, 0
        for info in members:
            # np.load (NpzFile.__getitem__) offers every member: `x.npy` as key `x`, any other by its whole name,
            # as an array when its bytes open with the .npy magic, else as the raw bytes (no tensor)
            name = info.filename.removesuffix(".npy")
            start = data_offset(path, f, info, size)
            if info.compress_type == zipfile.ZIP_STORED:
                f.seek(start)
                head = f.read(min(info.file_size, 12 + MAX_HEADER))
            else:
                with zf.open(info) as member:
                    head = _bounded(member, min(info.file_size, 12 + MAX_HEADER))
            if not info.filename.endswith(".npy") and head[:6] != MAGIC:
                others += 1
                continue
            at, header = _header(path, head, f"member {info.filename!r}")
            stored = info.file_size - at
            if info.compress_type == zipfile.ZIP_STORED:
                t = _tensor(path, name, header, path, start + at, stored, {"member": info.filename})
            else:
                compressed += 1
                t = _tensor(path, name, header, path, None, stored, {"member": info.filename, "record": info.filename,
                                                                     "storage_byte_offset": at,
                                                                     "deflated": info.compress_size})
            if name in tensors:
                raise CorruptCheckpointError(path, f"two members hold array {name!r}")
            tensors[name] = t
    if not tensors:
        raise CorruptCheckpointError(path, "the archive holds no .npy member")
    ckpt = Checkpoint(path=path, format="numpy (npz)", tensors=tensors, files=(path,))
    if others:
        ckpt.notes.append(f"{others} member(s) hold no .npy array (np.load gives their raw bytes): not tensors")
    if compressed:
        ckpt.readers[path] = ZipStreamReader(path)
        ckpt.notes.append(f"{compressed} member(s) are deflated (savez_compressed): values are read by streaming "
                          "decompression")
    return ckpt


def _bounded(member: IO[bytes], n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = member.read(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def accept_npy(probe: Probe) -> bool:
    return probe.head[:6] == MAGIC


def accept_npz(probe: Probe) -> bool:
    """A zip whose first local header (PKWARE APPNOTE 4.3.7) names a `.npy` member, as numpy.savez writes."""
    head = probe.head
    if head[:4] != b"PK\x03\x04" or len(head) < 30:
        return False
    n = struct.unpack_from("<H", head, 26)[0]
    return head[30:30 + n].endswith(b".npy")


register(Format("numpy (npy)", accept_npy, _open_npy, (".npy",)))
register(Format("numpy (npz)", accept_npz, _open_npz, (".npz",)))
