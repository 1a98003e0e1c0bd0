"""safetensors: `[u64 LE N][N bytes of JSON header][byte buffer]` (docs/formats.md section 1).

The header is validated as the reference parser (safetensors/src/tensor.rs `validate`) does: size cap,
tensors contiguous from 0 with no hole or overlap, byte sizes consistent with dtype and shape, and the
last byte of the buffer the last byte of the file.
"""
from __future__ import annotations

import json
import math
import re
import struct

from ..core import Checkpoint, TensorInfo, dtypes
from ..core.files import file_size, open_regular
from ..core.tensor import INT64_MAX
from ..errors import CorruptCheckpointError, quoted
from .registry import Format, Probe, register

MAX_HEADER = 100_000_000
U64_MAX = 2**64 - 1        # the reference parses dims and offsets as usize
_INT_ONLY = frozenset({int})
# The codes safetensors defines; C128, STR and the ggml block types are ours, for other formats.
SAFETENSORS_DTYPES = frozenset(n for n, d in dtypes.DTYPES.items() if not d.is_blocked) - {"C128", "STR"}


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


def read_header(path: str) -> tuple[int, dict[str, object]]:
    size = file_size(path)
    with open_regular(path) as f:   # a URL: the 8 bytes and the header are range requests (docs/remote.md)
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
    return n, header


def open_safetensors(path: str) -> Checkpoint:
    n, header = read_header(path)
    size = file_size(path)
    base = 8 + n

    def bad(msg: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(path, msg)

    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise bad("__metadata__ must map strings to strings")
    spans = []
    tensors: dict[str, TensorInfo] = {}
    keys = {"dtype", "shape", "data_offsets"}
    bits_of = {d: dtypes.get(d).bits for d in SAFETENSORS_DTYPES}
    validated = TensorInfo.validated
    # One pass per tensor with plain `type(x) is` tests and C-level checks of the shape (map, min, max):
    # this loop runs a million times on a million-tensor header (docs/performance.md). bool is not int
    # here, as in _int.
    for name, e in header.items():
        if type(e) is not dict or e.keys() != keys:
            raise bad(f"tensor {name!r}: entry must have exactly dtype, shape and data_offsets")
        dtype, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        bits = type(dtype) is str and bits_of.get(dtype)
        if not bits:
            raise bad(f"tensor {name!r}: unknown dtype {quoted(dtype)}")
        if type(shape) is not list or (shape and not (_INT_ONLY.issuperset(map(type, shape)) and min(shape) >= 0
                                                      and max(shape) <= U64_MAX)):
            if not isinstance(shape, list) or not all(_int(d) and 0 <= d <= U64_MAX for d in shape):
                raise bad(f"tensor {name!r}: shape must be a list of non-negative integers, got {quoted(shape)}")
        if type(offs) is list and len(offs) == 2:
            begin, end = offs
        if not (type(offs) is list and len(offs) == 2 and type(begin) is int and type(end) is int and 0 <= begin <= end):
            raise bad(f"tensor {name!r}: data_offsets must be [begin, end] with 0 <= begin <= end, got {quoted(offs)}")
        numel = math.prod(shape)   # exact (a Python int): past 2^64 is the reference's checked_mul error
        if numel > U64_MAX:
            raise bad(f"tensor {name!r}: a shape of rank {len(shape)} whose element count overflows")
        nbits = numel * bits
        if nbits & 7:
            raise bad(f"tensor {name!r}: {numel} elements of {dtype} do not fill whole bytes")
        if end - begin != nbits >> 3:
            raise bad(f"tensor {name!r}: data_offsets span {end - begin} bytes but {dtype}{quoted(shape)} "
                      f"needs {nbits >> 3}")
        spans.append((begin, end, name))
        # Keep the header's order (writers sort by name); data offsets are absolute from here on. A shape
        # with no element or past int64 takes the checking constructor (its own error, or a 0 dimension).
        tensors[name] = (validated if 0 < numel <= INT64_MAX else TensorInfo)(name, dtype, tuple(shape), path,
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

    # safetensors.torch.save_model drops one of two names over one storage and records
    # `__metadata__[dropped] = kept`; other metadata may hold a tensor name by chance, so only an
    # absent key naming a stored tensor counts.
    dropped = {k: v for k, v in metadata.items() if k not in tensors and v in tensors}
    return Checkpoint(path=path, format="safetensors", tensors=tensors, files=(path,), metadata=metadata,
                      dropped=dropped, distinct=True)


register(Format("safetensors", accept, open_safetensors, (".safetensors",)))
