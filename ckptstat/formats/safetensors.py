"""safetensors: `[u64 LE N][N bytes of JSON header][byte buffer]` (docs/formats.md section 1).

The header is validated as the reference parser (safetensors/src/tensor.rs `validate`) does: size cap,
tensors contiguous from 0 with no hole or overlap, byte sizes consistent with dtype and shape, and the
last byte of the buffer the last byte of the file.
"""
from __future__ import annotations

import io
import json
import math
import operator
import re
import struct
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice
from typing import IO

from ..core import Checkpoint, TensorInfo, dtypes, urls
from ..core.files import file_size, open_regular
from ..core.tensor import INT64_MAX
from ..core.tensor_table import Repeated, TensorTable
from ..errors import CorruptCheckpointError, quoted
from .registry import Format, Probe, register

MAX_HEADER = 100_000_000
U64_MAX = 2**64 - 1        # the reference parses dims and offsets as usize
_INT_ONLY = frozenset({int})
# The codes safetensors defines; C128, STR, torch's C32, BC32, F4_X2 and the ggml block types are ours, for other
# formats (safetensors writes a torch float4_e2m1fn_x2 tensor as F4, its last dimension doubled).
SAFETENSORS_DTYPES = frozenset(n for n, d in dtypes.DTYPES.items() if not d.is_blocked) - {
    "C128", "STR", "C32", "BC32", "F4_X2"}
_BITS = {d: dtypes.get(d).bits for d in SAFETENSORS_DTYPES}
_DTYPE_NAMES = {d: d for d in SAFETENSORS_DTYPES}


def accept(probe: Probe) -> bool:
    if probe.size < 10 or len(probe.head) < 9:
        return False
    (n,) = struct.unpack_from("<Q", probe.head)
    return n <= MAX_HEADER and 8 + n <= probe.size and probe.head[8:].lstrip(b" \t\r\n")[:1] == b"{"


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out = dict(pairs)   # in C; the Python loop only when a key repeats (to name it)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r} in header")
            seen.add(key)
    return out


def _no_repeats(text: str, header: object) -> bool:
    """True when the JSON text provably repeats no key, by counting colons: the text's colons are its
    objects' members plus the colons inside its strings. The members of the parsed header and of its
    entries and metadata, plus the colons of the header's and the metadata's strings, are a lower bound
    of each; equal counts leave no room for a repeated (dropped) member. A backslash (an escape could
    hide a colon), a value not an object, or unequal counts: the checking parse decides."""
    if type(header) is not dict or "\\" in text:
        return False
    values = header.values()
    if set(map(type, values)) - {dict}:
        return False
    meta = header.get("__metadata__") or {}
    strings = [*header, *meta, *(v for v in meta.values() if type(v) is str)]
    return text.count(":") == len(header) + sum(map(len, values)) + "".join(strings).count(":")


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")

# The header as the safetensors writer (serde_json, compact) spells it: one entry is
# `"name":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}`. `_compact` reads that spelling with one regex
# pass (the JSON parse and a dict per entry were half of a 200k-tensor header's time, docs/performance.md) and
# hands anything else (whitespace, another key order, escapes, a control character, a repeated name) to json.
_NUM = r"(?:0|[1-9][0-9]*)"
_ENTRY = re.compile(rf'"([^"\\\x00-\x1f]*)":\{{"dtype":"([A-Z0-9_]+)","shape":\[((?:{_NUM}(?:,{_NUM})*)?)\],'
                    rf'"data_offsets":\[({_NUM}),({_NUM})\]\}}')
_ENTRY_CHARS = len('"":{"dtype":"","shape":[],"data_offsets":[,]}')
Entry = tuple[str, str, tuple[int, ...], int, int]   # name, dtype, shape, data offsets begin and end: types checked
Found = list[tuple[str, str, str, str, str]]        # a compact header's entries as _compact matches them (text)


def _body(text: str, first: bool = True, last: bool = True) -> tuple[dict[str, object] | None, int, int] | None:
    """(metadata, start, stop of the entries' text) when `text`, the header or the piece of it _pieces cut (the
    `first`, the `last`, or both), is spelled as the writer spells it, else None."""
    end = len(text)
    if last:
        # The writer pads the header to 8 bytes with spaces: where they start, found without a copy of the text
        # (which rstrip and slicing the body would make: 19 MB at 200k tensors).
        tail = text[-8:]
        end = end - (len(tail) - len(tail.rstrip(" "))) if tail.strip(" ") else len(text.rstrip(" "))
        if text[end - 1:end] != "}":
            return None
        end -= 1
    if "\\" in text or first and not text.startswith("{"):
        return None
    pos, metadata = (1, None) if first else (0, None)
    if first and text.startswith('{"__metadata__":'):
        try:
            metadata, pos = json.JSONDecoder().raw_decode(text, len('{"__metadata__":'))
        except ValueError:
            return None
        if text[pos:pos + 1] == ",":
            pos += 1
    return metadata, pos, max(pos, end)


def _tiled(text: str, start: int, stop: int, found: Found) -> bool:
    """Whether _ENTRY's matches `found` in text[start:stop] are all of it: findall's matches do not overlap, so when
    their lengths and the commas between them add up to the span's, they tile it, and nothing else is in it."""
    covered = sum(sum(map(len, column)) for column in zip(*found))
    n = len(found)
    return covered + n * (_ENTRY_CHARS + 1) - 1 == stop - start and text.count('"', start, stop) == 10 * n


def _compact(text: str) -> tuple[dict[str, object] | None, Found] | None:
    """(metadata, entries as (name, dtype, shape text, begin, end)) when `text` is a compact header, else None."""
    body = _body(text)
    if body is None:
        return None
    metadata, pos, stop = body
    entries = _ENTRY.findall(text, pos, stop)
    return (metadata, entries) if _tiled(text, pos, stop, entries) else None


def _header_length(f: IO[bytes], path: str, start: int, size: int) -> int:
    """The header length N of the safetensors bytes at `start` of f (`size` bytes from there to the file's end),
    checked against the cap and the size; f is left at the header's first byte."""
    f.seek(start)
    head = f.read(8)
    if len(head) < 8:
        raise CorruptCheckpointError(path, f"file is {size} bytes, too short for a safetensors header")
    n: int = struct.unpack("<Q", head)[0]
    if n > MAX_HEADER:
        raise CorruptCheckpointError(path, f"header length {n} exceeds the {MAX_HEADER}-byte limit")
    if 8 + n > size:
        raise CorruptCheckpointError(path, f"header length {n} runs past the end of the {size}-byte file")
    return n


def _header_text(path: str, start: int) -> tuple[int, str]:
    """(header length, header text) of the safetensors bytes that start at `start` and end at the file's end."""
    with open_regular(path) as f:   # a URL: the 8 bytes and the header are range requests (docs/remote.md)
        n = _header_length(f, path, start, file_size(path) - start)
        return n, _decoded(f.read(n), path)


def _decoded(raw: bytes, path: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptCheckpointError(path, "header is not valid UTF-8") from None


def _pieces(f: IO[bytes], n: int) -> Iterator[tuple[str, bool]]:
    """The n bytes of a header at f's position as (text, last) pieces of about _SLICE bytes, read one by one (a
    header of 1M tensors is 96 MB: its whole text was the parse's peak beside the columns made of it), each but
    the last cut after an entry's `]}` (`]},"`), the comma dropped. UnicodeDecodeError where a piece is not UTF-8
    (cut at ASCII, the pieces are UTF-8 when the whole is)."""
    buf = bytearray()
    left = n
    while left:
        chunk = f.read(min(_SLICE, left))
        if not chunk:   # shorter than its size said (a file that changed): the whole-text route names it
            break
        left -= len(chunk)
        buf += chunk
        if left:
            cut = buf.rfind(b']},"')
            if cut >= 0:
                yield str(memoryview(buf)[:cut + 2], "utf-8"), False
                del buf[:cut + 3]
    yield str(buf, "utf-8"), True


def read_header(path: str, start: int = 0) -> tuple[int, dict[str, object] | None, Found | dict[str, object]]:
    """(header length, metadata, the tensors' entries): _compact's matches of a compact header (names distinct),
    else the parsed JSON object (metadata still in it, None returned for it). The safetensors bytes start at
    `start` and end at the file's end (a whole file, or the tail of a DCP `.distcp` file written with
    SerializationFormat.SAFETENSORS: formats/dcp/)."""
    n, text = _header_text(path, start)
    return (n, *_parsed(path, text))


def _parsed(path: str, text: str) -> tuple[dict[str, object] | None, Found | dict[str, object]]:
    """read_header's (metadata, entries) of the header's text."""
    try:
        compact = _compact(text)
        if compact is not None:
            metadata, found = compact
            names = set(map(operator.itemgetter(0), found))
            if len(names) == len(found) and "__metadata__" not in names:   # else json names the repeat
                return metadata or {}, found
        header = json.loads(text)
        if not _no_repeats(text, header):   # the per-object hook costs ~0.05 s at 200k tensors: only when needed
            header = json.loads(text, object_pairs_hook=_no_duplicates)
        if _SURROGATE_ESCAPE.search(text):   # json takes "\ud800" alone; serde_json (the reference) does not
            json.dumps(header, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise CorruptCheckpointError(path, "header is not valid JSON (a lone surrogate escape such as \\ud800: "
                                           "not Unicode, which the safetensors library refuses too)") from None
    except ValueError as e:
        raise CorruptCheckpointError(path, f"header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise CorruptCheckpointError(path, "header is not a JSON object")
    return None, header


def _typed(header: dict[str, object], bad: Callable[[str], CorruptCheckpointError]) -> Iterator[Entry]:
    """The JSON header's entries as Entry, each value's type checked (bool is not int here, as in _int): plain
    `type(x) is` tests and C-level checks of the shape (map, min)."""
    keys = {"dtype", "shape", "data_offsets"}
    for name, e in header.items():
        # other members are ignored, as the reference's serde struct does (no deny_unknown_fields)
        if type(e) is not dict or not keys <= e.keys():
            raise bad(f"tensor {name!r}: entry must have dtype, shape and data_offsets")
        dtype, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if type(dtype) is not str:
            raise bad(f"tensor {name!r}: unknown dtype {quoted(dtype)}")
        if type(shape) is not list or (shape and not (_INT_ONLY.issuperset(map(type, shape)) and min(shape) >= 0)):
            if not isinstance(shape, list) or not all(_int(d) and 0 <= d <= U64_MAX for d in shape):
                raise bad(f"tensor {name!r}: shape must be a list of non-negative integers, got {quoted(shape)}")
        if not (type(offs) is list and len(offs) == 2 and type(offs[0]) is int and type(offs[1]) is int
                and 0 <= offs[0]):
            raise bad(f"tensor {name!r}: data_offsets must be [begin, end] with 0 <= begin <= end, got {quoted(offs)}")
        yield name, dtype, tuple(shape), offs[0], offs[1]


# A large header is read, matched and checked this many bytes at a time, each piece's matches made into the table's
# columns before the next is read: one piece's bytes, text and match tuples alive at once, not the header's (at 1M
# tensors its text was 96 MB and the matches of 4 MiB slices of it 300 MB, beside the columns).
_SLICE = 1 << 20


def _table(pieces: Iterable[tuple[str, bool]], path: str, base: int,
           size: int) -> tuple[dict[str, object] | None, TensorTable] | None:
    """(metadata, tensors) of a compact header, given as _pieces cuts it, when every check of the entry loop
    (open_safetensors) passes, made over whole columns in C (zip, map, set, sorted, list equality), piece by piece,
    and once per distinct (dtype, shape): the loop's Python per entry was most of a 200k-tensor header's time
    (docs/performance.md). None when the text is not the writer's spelling, a check fails, a name repeats, a tensor
    has no bytes (it shares its neighbour's offset) or a number has more than 18 digits: `_parsed` and the loop
    then give the answer, or name the entry at fault, as they always did."""
    names: list[str] = []
    dtype_col: list[str] = []
    shapes: list[tuple[int, ...]] = []
    numels: list[int] = []
    begins = array("q")
    nbytes: list[int] = []
    shape_of: dict[str, tuple[int, ...]] = {}
    numel_of: dict[str, int] = {}
    nbytes_of: dict[tuple[str, str], int] = {}
    metadata = None
    first = True
    for text, last in pieces:
        body = _body(text, first, last)
        if body is None:
            return None
        if first:
            metadata, first = body[0], False
        _, pos, stop = body
        # (a piece ends where an entry does (`]}` before `,"`); a name holding `]},"` cuts one short, which then
        # fails to tile, and the header takes the whole-text route)
        found = _ENTRY.findall(text, pos, stop)
        if not found or not _tiled(text, pos, stop, found):
            return None
        del text
        chunk_names, dts, shape_texts, begin_texts, end_texts = zip(*found)
        del found
        if max(map(len, begin_texts)) > 18 or max(map(len, end_texts)) > 18:   # near int64: the loop's checks
            return None
        for dtype, shape in set(zip(dts, shape_texts)).difference(nbytes_of):
            if shape not in shape_of:
                dims = shape.split(",") if shape else []
                if dims and max(map(len, dims)) > 20:
                    return None
                shape_of[shape] = tuple(map(int, dims))
                numel_of[shape] = math.prod(shape_of[shape])
            bits, numel = _BITS.get(dtype), numel_of[shape]
            if not bits or not 0 < numel <= INT64_MAX or numel * bits & 7:
                return None
            nbytes_of[dtype, shape] = numel * bits >> 3
        chunk_begins = list(map(int, begin_texts))
        chunk_bytes = list(map(nbytes_of.__getitem__, zip(dts, shape_texts)))
        if list(map(operator.sub, map(int, end_texts), chunk_begins)) != chunk_bytes:
            return None
        names += chunk_names
        dtype_col += map(_DTYPE_NAMES.__getitem__, dts)   # one string per dtype, not one per tensor
        shapes += map(shape_of.__getitem__, shape_texts)   # one tuple per distinct shape
        numels += map(numel_of.__getitem__, shape_texts)
        begins += array("q", chunk_begins)
        nbytes += chunk_bytes
    if not names or "__metadata__" in names or not _distinct(names):   # a repeated name: json names it
        return None
    if not _contiguous(begins, nbytes, size - base):
        return None
    table = TensorTable(names, dtype_col, shapes, numels, Repeated(path, len(names)),
                        array("q", map(base.__add__, begins)), nbytes)
    return metadata, table


def _distinct(names: list[str]) -> bool:
    """Whether no name repeats: in one pass that makes nothing where they are sorted (a writer's, one dtype), else
    by a set (32 MB at 1M names)."""
    return all(map(operator.lt, names, islice(names, 1, None))) or len(set(names)) == len(names)


def _contiguous(begins: array[int], nbytes: list[int], size: int) -> bool:
    """Whether the tensors at `begins` of `nbytes` (each at least one byte) tile [0, size): in the header's order
    (a writer's, one dtype) in one pass that makes no list, else sorted. (That fixes the layout: only the end lies
    past the last begin, so the last tensor ends there; of the rest only the last begin lies past the one before,
    and so on down.)"""
    if begins[0] == 0 and begins[-1] + nbytes[-1] == size and all(
            map(operator.eq, islice(begins, 1, None), map(operator.add, begins, nbytes))):
        return True
    starts = sorted(begins)
    ends = list(map(operator.add, begins, nbytes))
    ends.sort()
    return starts[0] == 0 and ends[-1] == size and starts[1:] == ends[:-1]


def _entries(found: Found, path: str) -> list[Entry]:
    """A compact header's entries typed, for the entry loop."""
    try:
        return [(name, dtype, tuple(map(int, shape.split(","))) if shape else (), int(b), int(e))
                for name, dtype, shape, b, e in found]
    except ValueError as e:   # a number of more than sys.get_int_max_str_digits() digits
        raise CorruptCheckpointError(path, f"header is not valid JSON ({e})") from None


def open_safetensors(path: str, start: int = 0) -> Checkpoint:
    size = file_size(path)
    with open_regular(path) as f:   # a URL: the 8 bytes and the header are range requests (docs/remote.md)
        n = _header_length(f, path, start, size - start)
        base = start + 8 + n
        # A header of one piece, or a URL's (one range request: a round trip a piece would cost more than its bytes'
        # memory), is read whole, its bytes kept for the JSON route; a larger file's piece by piece.
        raw = f.read(n) if n <= _SLICE or urls.is_url(path) else None
        try:
            fast = _table(_pieces(f if raw is None else io.BytesIO(raw), n), path, base, size)
        except UnicodeDecodeError:   # a piece that is not UTF-8: the whole-text route names it
            fast = None

    def bad(msg: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(path, msg)

    found: object
    tensors: Mapping[str, TensorInfo] | None = None
    entries: list[Entry] | Iterator[Entry] = []
    if fast is not None:
        found, tensors = fast[0] or {}, fast[1]
    else:   # JSON's spelling, or an error to name: the header's text whole (a large file's read again)
        text = _decoded(raw, path) if raw is not None else _header_text(path, start)[1]
        del raw
        metadata, header = _parsed(path, text)
        del text
        if isinstance(header, dict):
            found = header.pop("__metadata__", None) or {}
            entries = _typed(header, bad)
        else:
            found, entries = metadata, _entries(header, path)
    if not isinstance(found, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        raise bad("__metadata__ must map strings to strings")
    meta: dict[str, str] = found
    if tensors is None:
        tensors = _checked(entries, path, base, size, bad)
    # safetensors.torch.save_model drops one of two names over one storage and records
    # `__metadata__[dropped] = kept`; other metadata may hold a tensor name by chance, so only an
    # absent key naming a stored tensor counts.
    dropped = {k: v for k, v in meta.items() if k not in tensors and v in tensors}
    return Checkpoint(path=path, format="safetensors", tensors=tensors, files=(path,), metadata=meta,
                      dropped=dropped, distinct=True)


def _checked(entries: Iterable[Entry], path: str, base: int, size: int,
             bad: Callable[[str], CorruptCheckpointError]) -> dict[str, TensorInfo]:
    """The tensors of typed entries, each checked as the reference does, one by one (a JSON header's, and a
    compact header's that _columns did not take); the first entry at fault is the error."""
    spans = []
    tensors: dict[str, TensorInfo] = {}
    bits_of = _BITS
    validated = TensorInfo.validated
    for name, dtype, shape, begin, end in entries:
        bits = bits_of.get(dtype)
        if not bits:
            raise bad(f"tensor {name!r}: unknown dtype {quoted(dtype)}")
        if shape and max(shape) > U64_MAX:
            raise bad(f"tensor {name!r}: shape must be a list of non-negative integers, got {quoted(list(shape))}")
        if begin > end:
            raise bad(f"tensor {name!r}: data_offsets must be [begin, end] with 0 <= begin <= end, got "
                      f"{quoted([begin, end])}")
        numel = math.prod(shape)   # exact (a Python int): past 2^64 is the reference's checked_mul error
        if numel > U64_MAX:
            raise bad(f"tensor {name!r}: a shape of rank {len(shape)} whose element count overflows")
        nbits = numel * bits
        if nbits & 7:
            raise bad(f"tensor {name!r}: {numel} elements of {dtype} do not fill whole bytes")
        if end - begin != nbits >> 3:
            raise bad(f"tensor {name!r}: data_offsets span {end - begin} bytes but {dtype}{quoted(list(shape))} "
                      f"needs {nbits >> 3}")
        spans.append((begin, end, name))
        # Keep the header's order (writers sort by name); data offsets are absolute from here on. A shape
        # with no element or past int64 takes the checking constructor (its own error, or a 0 dimension).
        tensors[name] = (validated if 0 < numel <= INT64_MAX else TensorInfo)(name, dtype, shape, path,
                                                                             base + begin, end - begin)

    expected = 0
    for begin, end, name in sorted(spans):
        if begin != expected:
            kind = "overlaps the previous tensor" if begin < expected else f"leaves a hole after byte {expected}"
            raise bad(f"tensor {name!r} at data offset {begin} {kind}")
        expected = end
    if base + expected != size:
        raise bad(f"tensors end at byte {base + expected} but the file has {size} bytes"
                  + (" (truncated)" if base + expected > size else ""))
    return tensors


register(Format("safetensors", accept, open_safetensors, (".safetensors",)))
