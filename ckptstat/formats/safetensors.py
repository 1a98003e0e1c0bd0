"""safetensors: `[u64 LE N][N bytes of JSON header][byte buffer]` (docs/formats.md section 1).

The header is validated as the reference parser (safetensors/src/tensor.rs `validate`) does: size cap,
tensors contiguous from 0 with no hole or overlap, byte sizes consistent with dtype and shape, and the
last byte of the buffer the last byte of the file.
"""
from __future__ import annotations

import json
import os
import struct

from ..core import Checkpoint, TensorInfo, dtypes
from ..errors import CorruptCheckpointError, quoted
from .registry import Format, Probe, register

MAX_HEADER = 100_000_000
U64_MAX = 2**64 - 1        # the reference parses dims and offsets as usize
# The codes safetensors defines; C128, STR and the ggml block types are ours, for other formats.
SAFETENSORS_DTYPES = frozenset(n for n, d in dtypes.DTYPES.items() if not d.is_blocked) - {"C128", "STR"}


def accept(probe: Probe) -> bool:
    if probe.size < 10 or len(probe.head) < 9:
        return False
    (n,) = struct.unpack_from("<Q", probe.head)
    return n <= MAX_HEADER and 8 + n <= probe.size and probe.head[8:].lstrip(b" \t\r\n")[:1] == b"{"


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} in header")
        out[key] = value
    return out


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_header(path: str) -> tuple[int, dict[str, object]]:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
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
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError:
        raise CorruptCheckpointError(path, "header is not valid UTF-8") from None
    except ValueError as e:
        raise CorruptCheckpointError(path, f"header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise CorruptCheckpointError(path, "header is not a JSON object")
    return n, header


def open_safetensors(path: str) -> Checkpoint:
    n, header = read_header(path)
    size = os.path.getsize(path)
    base = 8 + n

    def bad(msg: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(path, msg)

    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise bad("__metadata__ must map strings to strings")
    entries = []
    for name, e in header.items():
        if not isinstance(e, dict) or set(e) - {"dtype", "shape", "data_offsets"} or len(e) != 3:
            raise bad(f"tensor {name!r}: entry must have exactly dtype, shape and data_offsets")
        dtype, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if dtype not in SAFETENSORS_DTYPES:
            raise bad(f"tensor {name!r}: unknown dtype {quoted(dtype)}")
        if not isinstance(shape, list) or not all(_int(d) and 0 <= d <= U64_MAX for d in shape):
            raise bad(f"tensor {name!r}: shape must be a list of non-negative integers, got {quoted(shape)}")
        if not (isinstance(offs, list) and len(offs) == 2 and all(_int(o) for o in offs) and 0 <= offs[0] <= offs[1]):
            raise bad(f"tensor {name!r}: data_offsets must be [begin, end] with 0 <= begin <= end, got {quoted(offs)}")
        numel = 1
        for d in shape:   # the reference's checked_mul over usize: a product past 2^64 is an error
            numel *= d
            if numel > U64_MAX:
                raise bad(f"tensor {name!r}: a shape of rank {len(shape)} whose element count overflows")
        bits = dtypes.get(dtype).bits
        if (numel * bits) % 8:
            raise bad(f"tensor {name!r}: {numel} elements of {dtype} do not fill whole bytes")
        if offs[1] - offs[0] != numel * bits // 8:
            raise bad(f"tensor {name!r}: data_offsets span {offs[1] - offs[0]} bytes but {dtype}{quoted(shape)} "
                      f"needs {numel * bits // 8}")
        entries.append((offs[0], offs[1], name, dtype, tuple(shape)))

    entries.sort()
    expected = 0
    for begin, end, name, _, _ in entries:
        if begin != expected:
            kind = "overlaps the previous tensor" if begin < expected else f"leaves a hole after byte {expected}"
            raise bad(f"tensor {name!r} at data offset {begin} {kind}")
        expected = end
    if base + expected != size:
        raise bad(f"tensors end at byte {base + expected} but the file has {size} bytes"
                  + (" (truncated)" if base + expected > size else ""))

    # Keep the header's order (writers sort by name); data offsets are absolute from here on.
    by_name = {name: (begin, end, dtype, shape) for begin, end, name, dtype, shape in entries}
    tensors = {
        name: TensorInfo(name, dtype, shape, path, base + begin, end - begin)
        for name, (begin, end, dtype, shape) in ((k, by_name[k]) for k in header)
    }
    # safetensors.torch.save_model drops one of two names over one storage and records
    # `__metadata__[dropped] = kept`; other metadata may hold a tensor name by chance, so only an
    # absent key naming a stored tensor counts.
    dropped = {k: v for k, v in metadata.items() if k not in tensors and v in tensors}
    return Checkpoint(path=path, format="safetensors", tensors=tensors, files=(path,), metadata=metadata,
                      dropped=dropped)


register(Format("safetensors", accept, open_safetensors, (".safetensors",)))
