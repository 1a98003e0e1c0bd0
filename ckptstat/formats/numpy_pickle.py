"""Plain pickles of numpy arrays: PaddlePaddle's `.pdparams` / `.pdopt` (`paddle.save`), and the `.pkl` parameter
trees JAX/Haiku and other code write with `pickle.dump` (docs/numpy.md, "Pickles of numpy arrays").

What `pickle.dump` writes for an ndarray (numpy/_core/src/multiarray/methods.c `array_reduce` / `array_reduce_ex`):
- protocols 2-4: REDUCE of `numpy._core.multiarray._reconstruct(numpy.ndarray, (0,), b'b')`, then BUILD with the
  state `(1, shape, dtype, is_fortran, data)`: `dtype` itself REDUCE of `numpy.dtype(code, False, True)` and BUILD
  `(3, byteorder, ...)`; `data` the raw bytes (BINBYTES / BINBYTES8; at protocol 2, which has no bytes opcode,
  `_codecs.encode(text, 'latin1')` of a BINUNICODE whose UTF-8 holds each byte as one or two: read by decoding it,
  formats/latin1.py; Python 2's pickle.dump wrote them as a `str`, BINSTRING, the bytes as they are, which Python 3
  reads with `pickle.load(f, encoding='latin1')`, numpy's advice);
- protocols 0 and 1 (no PROTO opcode): the same REDUCE and BUILD, the data `_codecs.encode(text, 'latin1')` of a
  BINUNICODE at 1, of a UNICODE line of raw-unicode-escape at 0 (text: its place recorded, decoded on read); Python
  2's protocol 0 wrote them as its `str`, a STRING line of the repr (decoded on read with `unicode_escape`);
- protocol 5: REDUCE of `numpy._core.numeric._frombuffer(buffer, dtype, shape, order)`, the buffer in-band as
  BYTEARRAY8 (a writable array) or BINBYTES;
- a numpy scalar: `numpy._core.multiarray.scalar(dtype, bytes)`. (numpy < 2 spells the modules `numpy.core.*`.)
The pickle is walked by the restricted unpickler (formats/torch/unpickler.py) with these calls mapped to recorders:
nothing is imported or called; any other global is refused as torch's weights_only loader would refuse it. A large
bytes payload is never read: its offset is recorded and the stream skips it, so the arrays are read by offset, and
opening reads the pickle's structure only.

PaddlePaddle stores a bfloat16 tensor as a numpy uint16 array and `paddle.load` reads it back as bfloat16
(paddle/framework/io.py: paddle.to_tensor of a uint16 array): in a Paddle file (a `.pdparams` / `.pdopt` name, or
the `StructuredToParameterName@@` key paddle.save adds) U16 arrays are read as BF16, and a note says so."""
from __future__ import annotations

import codecs
import io
import math
import pickle
import struct
from dataclasses import dataclass
from typing import Any

from ..core import Checkpoint, TensorInfo, dtypes
from ..core.files import open_regular, size_of
from ..errors import CorruptCheckpointError
from .latin1 import Latin1Reader
from .registry import Format, Probe, register
from .torch.allowlist import Refused
from .torch.containers import is_legacy_head
from .torch.data_classes import NumpyDType
from .torch.unpickler import Record, RecordingUnpickler, guarded, named_leaves, unpickle

NAME = "pickle (numpy arrays)"
PADDLE_SUFFIXES = (".pdparams", ".pdopt")
PADDLE_KEY = "StructuredToParameterName@@"
INLINE = 4096           # bytes payloads up to this size are read (dtype codes, small arrays in a frame)
LINE_BLOCK = 1 << 20    # a protocol-0 text line is read this much at a time, only its length kept when long
MAX_DEPTH = 64          # containers followed when naming arrays
_MODULES = ("numpy._core", "numpy.core")


@dataclass(frozen=True)
class Span:
    """A bytes payload of the pickle: `length` bytes at `offset` of the file."""
    offset: int
    length: int


class _Array(Record):
    """An ndarray the pickle rebuilds: (shape, NumpyDType, fortran order, Span) once BUILD gives its state."""

    def __init__(self, args: tuple[Any, ...] = ()) -> None:
        super().__init__("ndarray")
        if args:   # protocol 5's _frombuffer(buffer, dtype, shape, order)
            buffer, dtype, shape, order = (*args, None, None, None, None)[:4]
            self.state = (1, shape, dtype, order == "F", buffer)


def _reconstruct(*args: object) -> _Array:
    return _Array()


def _frombuffer(*args: object) -> _Array:
    return _Array(tuple(args))


def _scalar(dtype: object, data: object = None) -> _Array:
    a = _Array()
    a.state = (1, (), dtype, False, data)
    return a


# How a string's bytes are written: BINUNICODE's UTF-8, protocol 0's UNICODE line (raw-unicode-escape: a character
# below 256 as its latin-1 byte, `\` and newline as `\u005c` and `\u000a`), and the most bytes each writes a char.
TEXT_CODECS = {"utf-8": 2, "raw_unicode_escape": 6, "unicode_escape": 4}   # (the last: Python 2's repr, `\\xff`)


class _Text(str):
    """A string the pickle holds and where its bytes are: a Python 2 `str` (BINSTRING: the bytes as they are, `codec`
    None), a BINUNICODE or a protocol-0 UNICODE line (text in `codec`, which `_codecs.encode(text, 'latin1')` turns
    back into bytes at protocols 0 to 2). A long one is not read: its value is empty, its span says where it is."""
    span: Span
    codec: str | None


def _text(value: str, span: Span, codec: str | None) -> _Text:
    t = _Text(value)
    t.span, t.codec = span, codec
    return t


@dataclass(frozen=True)
class Latin1:
    """An array's bytes stored as their latin-1 text (`_codecs.encode(text, 'latin1')`, protocols 0 to 2): `length`
    bytes of that text in `codec` at `offset` (formats/latin1.py decodes them)."""
    offset: int
    length: int
    codec: str = "utf-8"


def _latin1(text: object, encoding: object = "utf-8", *args: object) -> object:
    """`_codecs.encode(text, 'latin1')`, the bytes of a protocol 0-2 pickle: where its text is, to decode on read."""
    if not isinstance(text, _Text) or text.codec is None or \
            str(encoding).lower().replace("-", "") not in ("latin1", "l1", "iso88591"):
        raise Refused(f"_codecs.encode of {type(text).__name__} with encoding {str(encoding)[:32]!r}: not a protocol "
                      "0-2 pickle's bytes")
    return Latin1(text.span.offset, text.span.length, text.codec)


class _NumpyUnpickler(RecordingUnpickler):
    CALLS = {**{f"{m}.multiarray._reconstruct": _reconstruct for m in _MODULES},
             **{f"{m}.numeric._frombuffer": _frombuffer for m in _MODULES},
             **{f"{m}.multiarray.scalar": _scalar for m in _MODULES},
             "numpy.ndarray": _reconstruct, "numpy.dtype": NumpyDType, "_codecs.encode": _latin1}
    WHAT = "a numpy array's reconstruction"

    def _payload(self, n: int) -> tuple[Span, bytes | None]:
        """The next n bytes' span in the file, and the bytes when they are small or in a frame already read."""
        frame = getattr(getattr(self, "_unframer", None), "current_frame", None)   # a protocol-4 frame being read
        if frame is not None or n <= INLINE:
            at = self.stream.tell() - (len(frame.getbuffer()) - frame.tell() if frame is not None else 0)
            data = self.read(n)
            if len(data) != n:
                raise Refused(f"a payload of {n:,} bytes where the pickle ends")
            return Span(at, n), data
        if n > self.stream.left:
            raise Refused(f"a bytes payload of {n:,} bytes where {self.stream.left:,} remain")
        at = self.stream.tell()
        self.stream.f.seek(n, io.SEEK_CUR)
        self.stream.left -= n
        return Span(at, n), None

    def _span(self, n: int) -> None:
        self.append(self._payload(n)[0])

    python2 = False   # a BINSTRING seen: Python 3 never writes one (its str is BINUNICODE, its bytes BINBYTES or
                      # _codecs.encode), Python 2's pickle.dump writes its str so

    def _string(self, n: int, utf8: bool) -> None:
        self.python2 = self.python2 or not utf8
        span, data = self._payload(n)
        self.append(_text("" if data is None else data.decode("utf-8", "surrogatepass") if utf8 else
                          data.decode("latin-1"), span, "utf-8" if utf8 else None))

    def _line(self) -> tuple[int, int, bytes | None, bytes]:
        """The next text line (protocol 0's UNICODE and STRING arguments): where it starts, its length without the
        newline, the line itself when short (else None: read a block at a time, never held whole), and its last byte
        and first (quotes, for STRING)."""
        frame = getattr(getattr(self, "_unframer", None), "current_frame", None)
        if frame is not None:   # (inside a protocol-4 frame: the line is in memory already)
            at = self.stream.tell() - (len(frame.getbuffer()) - frame.tell())
            line = self.readline()
            if not line.endswith(b"\n"):
                raise Refused("a text line the pickle ends in")
            return at, len(line) - 1, line[:-1], line[:1] + line[-2:-1]
        at, parts, size, first, last = self.stream.tell(), [], 0, b"", b""
        while True:
            block = self.stream.readline(LINE_BLOCK)
            if not block:
                raise Refused("a text line the pickle ends in")
            first, size = first or block[:1], size + len(block)
            if size <= INLINE + 1:
                parts.append(block)
            if block.endswith(b"\n"):
                last = block[-2:-1] or last   # (a block of the newline alone: the byte before ended the last one)
                break
            last = block[-1:]
        return at, size - 1, b"".join(parts)[:-1] if size <= INLINE + 1 else None, first + last

    def load_unicode(self) -> None:
        """Protocol 0's UNICODE: a line of raw-unicode-escape text, kept only when short (an array's bytes, at
        protocol 0, are `_codecs.encode` of one)."""
        at, length, line, _ = self._line()
        try:
            value = "" if line is None else line.decode("raw_unicode_escape")
        except UnicodeDecodeError as e:
            raise Refused(f"a UNICODE line that is not raw-unicode-escape ({e.reason})") from None
        self.append(_text(value, Span(at, length), "raw_unicode_escape"))

    def load_string(self) -> None:
        """Python 2's protocol-0 `str`: STRING, a quoted line of its repr (`\\x..` escapes), which Python 3 reads
        with `pickle.load(f, encoding='latin1')`; an array's bytes as it wrote them."""
        self.python2 = True
        at, length, line, ends = self._line()
        if length < 2 or ends[:1] != ends[1:] or ends[:1] not in (b"'", b'"'):
            raise Refused("a STRING line that is not quoted")
        try:
            value = "" if line is None else codecs.escape_decode(line[1:-1])[0].decode("latin-1")
        except ValueError as e:
            raise Refused(f"a STRING line that is not a str's repr ({e})") from None
        self.append(_text(value, Span(at + 1, length - 2), "unicode_escape"))

    def load_short_binstring(self) -> None:
        self._string(self.read(1)[0], False)

    def load_binstring(self) -> None:
        n = struct.unpack("<i", self.read(4))[0]
        if n < 0:
            raise Refused("BINSTRING of a negative length")
        self._string(n, False)

    def load_binunicode(self) -> None:
        self._string(struct.unpack("<I", self.read(4))[0], True)

    def load_short_binbytes(self) -> None:
        self._span(self.read(1)[0])

    def load_binbytes(self) -> None:
        self._span(struct.unpack("<I", self.read(4))[0])

    def load_binbytes8(self) -> None:
        self._span(struct.unpack("<Q", self.read(8))[0])

    def load_bytearray8(self) -> None:
        self._span(struct.unpack("<Q", self.read(8))[0])


_NumpyUnpickler.dispatch = {**RecordingUnpickler.dispatch,
                            pickle.SHORT_BINBYTES[0]: guarded(_NumpyUnpickler.load_short_binbytes, False),
                            pickle.BINBYTES[0]: guarded(_NumpyUnpickler.load_binbytes, False),
                            pickle.BINBYTES8[0]: guarded(_NumpyUnpickler.load_binbytes8, False),
                            pickle.BYTEARRAY8[0]: guarded(_NumpyUnpickler.load_bytearray8, False),
                            pickle.SHORT_BINSTRING[0]: guarded(_NumpyUnpickler.load_short_binstring, False),
                            pickle.BINSTRING[0]: guarded(_NumpyUnpickler.load_binstring, False),
                            pickle.BINUNICODE[0]: guarded(_NumpyUnpickler.load_binunicode, False),
                            pickle.UNICODE[0]: guarded(_NumpyUnpickler.load_unicode, False),
                            pickle.STRING[0]: guarded(_NumpyUnpickler.load_string, False)}


def _dtype_of(path: str, name: str, d: object) -> tuple[str, str]:
    """(canonical dtype, byte order) of an array's numpy.dtype."""
    known = d.known() if isinstance(d, NumpyDType) else None
    if not isinstance(d, NumpyDType) or known is None:
        raise CorruptCheckpointError(path, f"array {name!r}: dtype {str(getattr(d, 'code', d))[:32]!r} is not one "
                                           "ckptstat reads")
    return known, "big" if d.order == ">" else "little"


def _tensor(path: str, name: str, a: _Array, paddle: bool) -> TensorInfo:
    s = a.state
    if not (isinstance(s, tuple) and len(s) == 5):
        raise CorruptCheckpointError(path, f"array {name!r}: its state is not numpy's (version, shape, dtype, "
                                           "fortran, data)")
    _, shape, dt, fortran, data = s
    if not (isinstance(shape, tuple) and all(type(d) is int for d in shape)) or len(shape) > 64:
        raise CorruptCheckpointError(path, f"array {name!r}: shape {str(shape)[:64]} is not a tuple of integers")
    dtype, order = _dtype_of(path, name, dt)
    if paddle and dtype == "U16":
        dtype = "BF16"
    if isinstance(data, _Text) and data.codec is None:   # a Python 2 str: the bytes as they are
        data = data.span
    elif isinstance(data, _Text) and data.codec == "unicode_escape":   # a Python 2 str's repr (protocol 0)
        data = Latin1(data.span.offset, data.span.length, data.codec)
    if not isinstance(data, (Span, Latin1)):
        raise CorruptCheckpointError(path, f"array {name!r}: its data is not a bytes payload")
    n = math.prod(shape) if shape else 1
    want = dtypes.get(dtype).nbytes(n)
    most = TEXT_CODECS[data.codec] if isinstance(data, Latin1) else 1
    if data.length != want if isinstance(data, Span) else not want <= data.length <= most * want:
        raise CorruptCheckpointError(path, f"array {name!r}: {data.length:,} bytes of data for {list(shape)} "
                                           f"{dtype} ({want:,} bytes" + (f", as latin-1 text in {data.codec}: 1 to "
                                                                          f"{most} a byte)" if isinstance(data, Latin1)
                                                                          else ")"))
    stride = None
    if fortran is True and len(shape) > 1:
        stride = tuple(math.prod(shape[:i]) for i in range(len(shape)))
    if isinstance(data, Latin1):   # decoded as read (formats/latin1.py)
        return TensorInfo(name, dtype, tuple(shape), path, None, want, byteorder=order, stride=stride,
                          extra={"latin1": (data.offset, data.length, data.codec)})
    return TensorInfo(name, dtype, tuple(shape), path, data.offset, data.length, byteorder=order, stride=stride)


def _walk(path: str, obj: object, paddle: bool) -> dict[str, TensorInfo]:
    def too_deep(name: str) -> None:
        raise CorruptCheckpointError(path, f"containers nest deeper than {MAX_DEPTH} at {name!r}")
    return {name or "array": _tensor(path, name or "array", a, paddle)
            for name, a in named_leaves(obj, (_Array,), MAX_DEPTH, too_deep, lambda key: key == PADDLE_KEY)}


# What a protocol 0 or 1 pickle of numpy arrays starts with (they have no PROTO): a dict, a list, a tuple's MARK, the
# _reconstruct GLOBAL of a lone array.
_OLD_STARTS = b"(}]c"


def accept(probe: Probe) -> bool:
    """A pickle (PROTO 2-5, or protocol 0 or 1: no PROTO) that is not torch's legacy file (its magic number) nor
    joblib's, and rebuilds a numpy array within its first bytes."""
    h = probe.head
    new = len(h) >= 3 and h[0] == 0x80 and 2 <= h[1] <= 5
    if len(h) < 3 or not (new or h[0] in _OLD_STARTS) or is_legacy_head(h):   # (torch's magic number, pickled)
        return False
    return b"numpy" in h and (b"_reconstruct" in h or b"_frombuffer" in h) and b"joblib" not in h


def open_numpy_pickle(path: str) -> Checkpoint:
    with open_regular(path) as f:
        head = f.read(2)
        protocol = str(head[1]) if head[:1] == b"\x80" else "0 or 1"   # (PROTO's argument; none before protocol 2)
        f.seek(0)
        obj, u = unpickle(f, path, "pickle", storages=False, limit=size_of(f), unpickler=_NumpyUnpickler)
    paddle = path.endswith(PADDLE_SUFFIXES) or (isinstance(obj, dict) and PADDLE_KEY in obj)
    tensors = _walk(path, obj, paddle)
    py2 = isinstance(u, _NumpyUnpickler) and u.python2
    if not tensors:
        raise CorruptCheckpointError(path, "a pickle that holds no numpy array")
    notes = ["written by PaddlePaddle's paddle.save (a .pdparams / .pdopt name, or its StructuredToParameterName@@ "
             "key): read as paddle.load reads it"] if paddle else []
    if paddle and any(t.dtype == "BF16" for t in tensors.values()):
        notes.append("PaddlePaddle stores bfloat16 as numpy uint16 (paddle.load reads it back as bfloat16): read as BF16")
    latin1 = sum("latin1" in t.extra for t in tensors.values())
    if latin1:
        notes.append(f"{latin1:,} array(s) stored as text (protocols 0 to 2 have no bytes opcode: "
                     "_codecs.encode(text, 'latin1'), or at protocol 0 a str's repr): values decoded from "
                     "the file's text as they are read")
    if py2:
        notes.append("written by Python 2 (arrays' bytes as str): read as pickle.load(f, encoding='latin1') reads it")
    ckpt = Checkpoint(path=path, format=NAME, tensors=tensors, files=(path,), notes=notes, ordered=True,
                      metadata={"pickle.protocol": protocol,
                                "pickle.writer": "paddle.save" if paddle else "pickle.dump" + (" (Python 2)" if py2
                                                                                                else "")})
    if latin1:
        ckpt.readers[path] = Latin1Reader(path)
    return ckpt


register(Format(NAME, accept, open_numpy_pickle, (".pdparams", ".pdopt", ".pkl", ".pickle")))
