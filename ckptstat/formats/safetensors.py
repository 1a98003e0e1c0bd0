"""safetensors: `[u64 LE N][N bytes of JSON header][byte buffer]` (docs/formats.md section 1).

The header is validated as the reference parser (safetensors/src/tensor.rs `validate`) does: size cap,
tensors contiguous from 0 with no hole or overlap, byte sizes consistent with dtype and shape, and the
last byte of the buffer the last byte of the file.
"""
from __future__ import annotations

import json
import math
import operator
import re
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping

from ..core import Checkpoint, TensorInfo, dtypes
from ..core.files import file_size, open_regular
from ..core.tensor import INT64_MAX
from ..core.tensor_table import TensorTable
from ..errors import CorruptCheckpointError, quoted
from .registry import Format, Probe, register

MAX_HEADER = 100_000_000
U64_MAX = 2**64 - 1        # the reference parses dims and offsets as usize
_INT_ONLY = frozenset({int})
# The codes safetensors defines; C128, STR and the ggml block types are ours, for other formats.
SAFETENSORS_DTYPES = frozenset(n for n, d in dtypes.DTYPES.items() if not d.is_blocked) - {"C128", "STR"}
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


def _compact(text: str) -> tuple[dict[str, object] | None, Found] | None:
    """(metadata, entries as (name, dtype, shape text, begin, end)) when `text` is a compact header, else None."""
    # The writer pads the header to 8 bytes with spaces: where they start, found without a copy of the text (which
    # rstrip and slicing the body would make: 19 MB at 200k tensors, the peak RSS of the parse).
    tail = text[-8:]
    end = len(text) - (len(tail) - len(tail.rstrip(" "))) if tail.strip(" ") else len(text.rstrip(" "))
    if "\\" in text or not text.startswith("{") or text[end - 1:end] != "}":
        return None
    pos, metadata = 1, None
    if text.startswith('{"__metadata__":'):
        try:
            metadata, pos = json.JSONDecoder().raw_decode(text, len('{"__metadata__":'))
        except ValueError:
            return None
        if text[pos:pos + 1] == ",":
            pos += 1
    stop = max(pos, end - 1)   # the body: text[pos:stop]
    entries = _ENTRY.findall(text, pos, stop)
    # findall's matches do not overlap: when their lengths and the commas between them add up to the body's,
    # they tile it, and nothing else is in the header.
    covered = sum(len(a) + len(b) + len(c) + len(d) + len(e) for a, b, c, d, e in entries)
    if covered + len(entries) * (_ENTRY_CHARS + 1) - 1 != stop - pos or text.count('"', pos, stop) != 10 * len(entries):
        return None
    return metadata, entries


def read_header(path: str, start: int = 0) -> tuple[int, dict[str, object] | None, Found | dict[str, object]]:
    """(header length, metadata, the tensors' entries): _compact's matches of a compact header (names distinct),
    else the parsed JSON object (metadata still in it, None returned for it). The safetensors bytes start at
    `start` and end at the file's end (a whole file, or the tail of a DCP `.distcp` file written with
    SerializationFormat.SAFETENSORS: formats/dcp/)."""
    size = file_size(path) - start
    with open_regular(path) as f:   # a URL: the 8 bytes and the header are range requests (docs/remote.md)
        f.seek(start)
        head = f.read(8)
        if len(head) < 8:
            raise CorruptCheckpointError(path, f"file is {size} bytes, too short for a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER:
            raise CorruptCheckpointError(path, f"header length {n} exceeds the {MAX_HEADER}-byte limit")
        if 8 + n > size:
            raise CorruptCheckpointError(path, f"header length {n} runs past the end of the {size}-byte file")
        raw = f.read(n)
    try:
        text = raw.decode("utf-8")
        del raw   # (the header's bytes held beside its text and entries were a fifth of the parse's peak memory)
        compact = _compact(text)
        if compact is not None:
            metadata, found = compact
            names = set(map(operator.itemgetter(0), found))
            if len(names) == len(found) and "__metadata__" not in names:   # else json names the repeat
                return n, metadata or {}, found
        header = json.loads(text)
        if not _no_repeats(text, header):   # the per-object hook costs ~0.05 s at 200k tensors: only when needed
            header = json.loads(text, object_pairs_hook=_no_duplicates)
        if _SURROGATE_ESCAPE.search(text):   # json takes "\ud800" alone; serde_json (the reference) does not
            json.dumps(header, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise CorruptCheckpointError(path, "header is not valid JSON (a lone surrogate escape such as \\ud800: "
                                           "not Unicode, which the safetensors library refuses too)") from None
    except UnicodeDecodeError:
        raise CorruptCheckpointError(path, "header is not valid UTF-8") from None
    except ValueError as e:
        raise CorruptCheckpointError(path, f"header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise CorruptCheckpointError(path, "header is not a JSON object")
    return n, None, header


def _typed(header: dict[str, object], bad: Callable[[str], CorruptCheckpointError]) -> Iterator[Entry]:
    """The JSON header's entries as Entry, each value's type checked (bool is not int here, as in _int): plain
    `type(x) is` tests and C-level checks of the shape (map, min)."""
    keys = {"dtype", "shape", "data_offsets"}
    for name, e in header.items():
        if type(e) is not dict or e.keys() != keys:
            raise bad(f"tensor {name!r}: entry must have exactly dtype, shape and data_offsets")
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


def _columns(found: Found, path: str, base: int, size: int) -> TensorTable | None:
    """The tensors of a compact header when every check of the entry loop (open_safetensors) passes, made over
    whole columns in C (zip, map, set, sorted, list equality) and once per distinct (dtype, shape): the loop's
    Python per entry was most of a 200k-tensor header's time (docs/performance.md). None when a check fails, and
    for a tensor of no bytes (it shares its neighbour's offset) or a number of more than 20 digits: the loop then
    gives the answer, or names the entry at fault, as it always did."""
    if not found:
        return None
    names, dts, shape_texts, begin_texts, end_texts = zip(*found)
    if max(map(len, begin_texts)) > 20 or max(map(len, end_texts)) > 20:   # past U64_MAX: the loop's error
        return None
    shape_of: dict[str, tuple[int, ...]] = {}
    nbytes_of: dict[tuple[str, str], int] = {}
    for dtype, text in set(zip(dts, shape_texts)):
        if text not in shape_of:
            dims = text.split(",") if text else []
            if dims and max(map(len, dims)) > 20:
                return None
            shape_of[text] = tuple(map(int, dims))
        bits, numel = _BITS.get(dtype), math.prod(shape_of[text])
        if not bits or not 0 < numel <= INT64_MAX or numel * bits & 7:
            return None
        nbytes_of[dtype, text] = numel * bits >> 3
    begins, ends = list(map(int, begin_texts)), list(map(int, end_texts))
    nbytes = list(map(nbytes_of.__getitem__, zip(dts, shape_texts)))
    if list(map(operator.sub, ends, begins)) != nbytes:
        return None
    # Contiguous from 0 to the file's end: every tensor holds a byte, so distinct begins, sorted, each the end of
    # the one before.
    end_of = dict(zip(begins, ends))
    order = sorted(end_of)
    if len(order) != len(begins) or order[0] != 0:
        return None
    after = list(map(end_of.__getitem__, order))
    if order[1:] != after[:-1] or base + after[-1] != size:
        return None
    numel_of = {text: math.prod(shape) for text, shape in shape_of.items()}
    # one tuple per distinct shape, and one string per dtype (not one per tensor: 50 MB at 1M tensors)
    return TensorTable(list(names), list(map(_DTYPE_NAMES.__getitem__, dts)), list(map(shape_of.__getitem__, shape_texts)),
                       list(map(numel_of.__getitem__, shape_texts)), [path] * len(names),
                       list(map(base.__add__, begins)), nbytes)


def _entries(found: Found, path: str) -> list[Entry]:
    """A compact header's entries typed, for the entry loop."""
    try:
        return [(name, dtype, tuple(map(int, shape.split(","))) if shape else (), int(b), int(e))
                for name, dtype, shape, b, e in found]
    except ValueError as e:   # a number of more than sys.get_int_max_str_digits() digits
        raise CorruptCheckpointError(path, f"header is not valid JSON ({e})") from None


def open_safetensors(path: str, start: int = 0) -> Checkpoint:
    n, metadata, header = read_header(path, start)
    size = file_size(path)
    base = start + 8 + n

    def bad(msg: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(path, msg)

    found: object = metadata
    tensors: Mapping[str, TensorInfo] | None = None
    if isinstance(header, dict):
        found = header.pop("__metadata__", None) or {}
        entries: list[Entry] | Iterator[Entry] = _typed(header, bad)
    else:
        tensors = _columns(header, path, base, size)
        entries = [] if tensors is not None else _entries(header, path)
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
