"""ONNX models (docs/onnx.md; the schema is onnx/onnx.proto, the external data layout
onnx/docs/ExternalData.md).

An `.onnx` file is one serialized ModelProto. Its tensors are the graph's initializers
(GraphProto.initializer, field 5), its sparse initializers (field 15) and the tensors of its Constant
nodes (NodeProto attribute `value` / `sparse_value`). A TensorProto holds its values in `raw_data`
(little-endian, packed; 4-bit types two per byte, low nibble first, 2-bit four, 6-bit a bit stream), in a typed repeated field
(float_data, int32_data, int64_data, double_data, uint64_data), or, with data_location EXTERNAL, in
another file named by its `external_data` entries (location, offset, length).

The protobuf is walked here, field by field, with positioned reads: a value field is never read at
open, only its byte range recorded, so a 2 GB model costs its graph structure, not its weights, and
external data is never loaded (onnx.load would pull every byte into memory). Only the fields listed
below are read; everything else is skipped by its length.
"""
from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any

from ..core import Checkpoint, TensorInfo, dtypes
from ..core.files import check_inside, open_regular, regular
from ..core.io import read_bytes
from ..core.tensor import read_flat_file
from ..errors import CorruptCheckpointError
from .registry import Format, Probe, register

if TYPE_CHECKING:
    from numpy.typing import NDArray

# TensorProto.DataType (onnx.proto) -> canonical dtype in core/dtypes.py.
ONNX_TYPES = {
    1: "F32", 2: "U8", 3: "I8", 4: "U16", 5: "I16", 6: "I32", 7: "I64", 8: "STR", 9: "BOOL", 10: "F16",
    11: "F64", 12: "U32", 13: "U64", 14: "C64", 15: "C128", 16: "BF16", 17: "F8_E4M3", 18: "F8_E4M3FNUZ",
    19: "F8_E5M2", 20: "F8_E5M2FNUZ", 21: "U4", 22: "I4", 23: "F4", 24: "F8_E8M0", 25: "U2", 26: "I2",
    27: "F6_E2M3", 28: "F6_E3M2",
}
# Field numbers (onnx.proto).
M_GRAPH, M_OPSET = 7, 8                                      # ModelProto.graph, opset_import
G_NODE, G_INITIALIZER, G_SPARSE = 1, 5, 15                    # GraphProto
N_INPUT, N_OUTPUT, N_NAME, N_OP_TYPE, N_ATTRIBUTE = 1, 2, 3, 4, 5   # NodeProto
A_NAME, A_T, A_G, A_GRAPHS, A_SPARSE = 1, 5, 6, 11, 22        # AttributeProto
T_DIMS, T_TYPE, T_STRINGS, T_NAME, T_RAW, T_EXTERNAL, T_LOCATION = 1, 2, 6, 8, 9, 13, 14   # TensorProto
S_VALUES, S_INDICES, S_DIMS = 1, 2, 3                         # SparseTensorProto
# Typed value fields: field -> (encoding, bytes per element when fixed).
T_FIELDS = {4: ("fixed", 4), 5: ("varint", 0), 6: ("strings", 0), 7: ("varint", 0), 10: ("fixed", 8), 11: ("varint", 0)}
T_FIELD_NAMES = {4: "float_data", 5: "int32_data", 6: "string_data", 7: "int64_data", 10: "double_data", 11: "uint64_data"}
# The one typed field each data type's values are read from (onnx.helper.tensor_dtype_to_field; numpy_helper.to_array
# reads raw_data when the tensor has it, else that field, and ignores the others): int32_data for the rest.
T_FIELD_OF = {1: 4, 14: 4, 8: 6, 7: 7, 11: 10, 15: 10, 12: 11, 13: 11}
_MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2}   # ModelProto: field -> wire type
# Quantised operators' (onnx/defs; onnxruntime's QLinearAdd/Mul, QGemm) operands: (input, scale, zero point) indices, -1: none
# (MatMulInteger's scale is a Mul after it; QuantizeLinear's input a float); a DequantizeLinear of a Gather's: its table.
_QLINEAR = ((0, 1, 2), (3, 4, 5), (-1, 6, 7))
QUANT_OPERANDS = {
    "DequantizeLinear": ((0, 1, 2),), "QuantizeLinear": ((-1, 1, 2),), "MatMulInteger": ((0, -1, 2), (1, -1, 3)),
    "ConvInteger": ((0, -1, 2), (1, -1, 3)), "QLinearMatMul": _QLINEAR, "QLinearAdd": _QLINEAR, "QLinearMul": _QLINEAR,
    "QLinearConv": (*_QLINEAR, (8, -1, -1)), "QGemm": ((0, 1, 2), (3, 4, 5), (6, -1, -1), (-1, 7, 8)), "Gather": (),
}
MAX_SMALL = 1 << 20      # a name, a dims list, an external_data entry: read into memory only below this
MAX_SUBGRAPHS = 64       # If / Loop / Scan bodies nested in one another (exporters' deepest: a few)
BLOCK = 1 << 16


class _File:
    """Positioned reads through a one-block cache (no memory map: a file truncated while it is parsed
    ends in an error, never SIGBUS)."""

    def __init__(self, f: IO[bytes], path: str, size: int):
        self.f, self.path, self.size = f, path, size
        self.start, self.block = 0, b""

    def bytes(self, pos: int, n: int) -> bytes:
        if pos < 0 or n < 0 or pos + n > self.size:
            raise CorruptCheckpointError(self.path, f"a field of {n} bytes at offset {pos} runs past the end of the file")
        if self.start <= pos and pos + n <= self.start + len(self.block):
            return self.block[pos - self.start:pos - self.start + n]
        if n > BLOCK:
            return read_bytes(self.path, pos, n)
        self.start, self.block = pos, os.pread(self.f.fileno(), min(BLOCK, self.size - pos), pos)
        if len(self.block) < n:
            raise CorruptCheckpointError(self.path, f"expected {n} bytes at offset {pos}, the file ends first")
        return self.block[:n]

    def varint(self, pos: int, end: int) -> tuple[int, int]:
        result = shift = 0
        chunk = self.bytes(pos, min(10, end - pos)) if end > pos else b""
        for i, b in enumerate(chunk):
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result, pos + i + 1
            shift += 7
        raise CorruptCheckpointError(self.path, f"varint at byte {pos} runs past its message or never ends")

    def fields(self, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
        """(field number, wire type, value or payload offset, payload length) of each field in [start, end)."""
        pos = start
        while pos < end:
            key, pos = self.varint(pos, end)
            num, wire = key >> 3, key & 7
            if wire == 0:
                value, pos = self.varint(pos, end)
                yield num, wire, value, 0
                continue
            size = {1: 8, 5: 4}.get(wire)
            if wire == 2:
                size, pos = self.varint(pos, end)
            if size is None or num == 0:
                raise CorruptCheckpointError(self.path, f"protobuf field {num} at byte {pos} has wire type {wire}, "
                                                        "which ONNX does not use")
            if pos + size > end:
                raise CorruptCheckpointError(self.path, f"field {num} of {size:,} bytes at byte {pos} runs past the end "
                                                        "of its message")
            yield num, wire, pos, size
            pos += size

    def text(self, pos: int, size: int, what: str, lenient: bool = True) -> str:
        """A string field; one not UTF-8 (onnx.load takes it: proto2) escaped, unless `lenient` is False (a path)."""
        if size > MAX_SMALL:
            raise CorruptCheckpointError(self.path, f"{what} of {size:,} bytes at byte {pos}")
        raw = self.bytes(pos, size)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            if not lenient:
                raise CorruptCheckpointError(self.path, f"{what} at byte {pos} is not UTF-8: {raw[:64]!r}") from None
            return raw.decode("utf-8", "backslashreplace")

    def packed(self, pos: int, size: int) -> list[int]:
        if size > MAX_SMALL:
            raise CorruptCheckpointError(self.path, f"packed list of {size:,} bytes at byte {pos}")
        out, p = [], pos
        while p < pos + size:
            v, p = self.varint(p, pos + size)
            out.append(v)
        return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


class _Reader:
    """Values of the tensors one .onnx file describes: raw bytes by offset (here or in an external data
    file), varint-packed typed fields decoded from their span, sparse tensors scattered into zeros."""

    def __call__(self, info: TensorInfo, start: int, count: int) -> NDArray[Any]:
        import numpy as np

        enc = info.extra.get("encoding")
        if enc == "sparse":
            return self.sparse(info, start, count)
        if enc == "varint":
            span = info.extra["span"]
            assert isinstance(span, tuple)
            d = info.dt
            per = _per_value(d.bits)
            if per > 1:   # 4- and 2-bit elements packed in a byte a value, lowest bits first: raw_data's bytes
                if start % per:
                    raise ValueError(f"chunk start {start} is not byte-aligned for {info.dtype}")
                packed = self.varints(info, span, start // per, d.nbytes(count))
                if packed.size and not 0 <= packed.min() <= packed.max() <= 0xFF:
                    raise CorruptCheckpointError(info.file, f"tensor {info.name!r}: a value of {per} {d.bits}-bit "
                                                            "elements is not a byte")
                return dtypes.decode(packed.astype(np.uint8), info.dtype, count)
            values = self.varints(info, span, start, count)
            if info.dtype in ("I64", "U64", "I32", "U32", "I16", "U16", "I8", "U8"):
                return values.astype(d.numpy)
            if info.dtype == "BOOL":
                return np.asarray(values != 0)
            if d.bits == 6:   # one 6-bit code a value, its low 6 bits (numpy_helper.to_array masks the rest)
                return np.take(dtypes.lut(info.dtype), values & 0x3F)
            # 16- and 8-bit floats: int32_data holds each value's bit pattern
            raw = values.astype("<u2" if d.bits == 16 else "|u1")
            return dtypes.decode(raw.view(np.uint8), info.dtype, count)
        return read_flat_file(info, start, count)

    def __init__(self) -> None:
        # (file, span) -> (byte offset, values before it) of each VARINT_BLOCK of a varint field, cut after
        # a varint's last byte: a chunk decodes from the block holding its first value, never the field's
        # start (decoding the whole field per chunk made stats quadratic: a 20 MB field, ~10 CPU minutes)
        self.blocks: dict[tuple[str, tuple[int, int]], tuple[list[int], list[int]]] = {}
        self.block: tuple[object, NDArray[Any] | None] = (None, None)   # ((field, block index), its values)
        self.scattered: tuple[object, tuple[NDArray[Any], NDArray[Any]] | None] = (None, None)   # (tensor, _scatter's)

    def varints(self, info: TensorInfo, span: tuple[int, int], start: int, count: int) -> NDArray[Any]:
        """Values [start, start + count) of a varint-packed field, as int64 (two's complement, as
        protobuf's int64 fields are)."""
        import numpy as np

        if count <= 0:
            return np.zeros(0, np.int64)
        key = (info.file, span)
        if key not in self.blocks:
            self.blocks = {key: _varint_blocks(info, *span)}   # one field's index kept at a time
        offsets, before = self.blocks[key]
        pos, end = span
        end += pos
        i = max(0, bisect.bisect_right(before, start) - 1)
        parts, have, skip = [], 0, start - before[i]
        while have < count and i < len(offsets):
            at, cached = self.block
            if at != (key, i) or cached is None:   # chunks in order reuse the block they share
                stop = offsets[i + 1] if i + 1 < len(offsets) else end
                cached = _decode_varints(info, read_bytes(info.file, offsets[i], stop - offsets[i]))
                self.block = ((key, i), cached)
            vals = cached[skip:]
            parts.append(vals[:count - have])
            have += len(parts[-1])
            skip, i = 0, i + 1
        if have != count:
            raise CorruptCheckpointError(info.file, f"tensor {info.name!r} holds {before[-1] if before else 0:,}+ values "
                                                    f"for {info.numel:,} elements")
        return np.concatenate(parts) if len(parts) != 1 else parts[0]

    def sparse(self, info: TensorInfo, start: int, count: int) -> NDArray[Any]:
        """Values [start, start + count) of a sparse tensor: its values and flat indices are read, checked and sorted
        once per tensor (the last one kept), each chunk then takes its slice by bisection. Reading them per chunk made
        stats quadratic: a 4.8 MB file of 400k non-zeros in 6.4 GB of dense values, 226 s."""
        import numpy as np

        if self.scattered[0] is not info:
            self.scattered = (info, self._scatter(info))
        assert self.scattered[1] is not None
        idx, v = self.scattered[1]
        lo, hi = np.searchsorted(idx, [start, start + count])
        out = np.zeros(count, dtype=v.dtype)
        out[idx[lo:hi] - start] = v[lo:hi]   # (a stable sort: of repeated indices the last stored wins, as before)
        return out

    def _scatter(self, info: TensorInfo) -> tuple[NDArray[Any], NDArray[Any]]:
        """The sparse tensor's flat indices, sorted, and its values in the same order (bounds checked)."""
        import numpy as np

        values, indices = info.extra["values"], info.extra["indices"]
        assert isinstance(values, TensorInfo) and isinstance(indices, TensorInfo)
        v = self(values, 0, values.numel)
        idx = self(indices, 0, indices.numel).astype(np.int64)
        if indices.shape != (values.numel,):   # [nnz, rank] coordinates
            idx = idx.reshape(values.numel, len(info.shape))
            if (idx < 0).any() or (idx >= np.array(info.shape)).any():
                raise CorruptCheckpointError(info.file, f"sparse tensor {info.name!r}: an index lies outside {info.shape}")
            idx = np.ravel_multi_index(tuple(idx.T), info.shape) if idx.size else idx.reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= info.numel):
            raise CorruptCheckpointError(info.file, f"sparse tensor {info.name!r}: an index lies outside {info.shape}")
        order = np.argsort(idx, kind="stable")
        return idx[order], v[order]


VARINT_BLOCK = 1 << 20   # bytes of a varint field decoded at once (~40 bytes of numpy scratch per byte)


def _decode_varints(info: TensorInfo, raw: bytes) -> NDArray[Any]:
    """The varints `raw` holds whole (vectorised: each value's bytes, low 7 bits first, the last one
    below 0x80; bits past 64 dropped as protobuf drops them), as int64."""
    import numpy as np

    b = np.frombuffer(raw, np.uint8)
    ends = np.flatnonzero(b < 0x80)
    if b.size and (not ends.size or ends[-1] != b.size - 1):
        raise CorruptCheckpointError(info.file, f"tensor {info.name!r}: its last varint never ends")
    starts = np.concatenate(([0], ends[:-1] + 1)) if ends.size else ends
    lengths = ends - starts + 1
    if lengths.size and lengths.max() > 10:
        raise CorruptCheckpointError(info.file, f"tensor {info.name!r}: a varint longer than 10 bytes")
    low = (b & 0x7F).astype(np.uint64)
    out = np.zeros(ends.size, np.uint64)
    for k in range(int(lengths.max()) if lengths.size else 0):
        sel = np.flatnonzero(lengths > k)
        out[sel] |= low[starts[sel] + k] << np.uint64(7 * k)
    return out.view(np.int64)


def _varint_blocks(info: TensorInfo, pos: int, size: int) -> tuple[list[int], list[int]]:
    """(byte offset, values before it) of the VARINT_BLOCK-sized pieces of the field [pos, pos + size),
    each cut after a varint's last byte; the values' total is checked against the tensor's elements."""
    import numpy as np

    offsets, before, n, at, end = [], [], 0, pos, pos + size
    while at < end:
        raw = np.frombuffer(read_bytes(info.file, at, min(VARINT_BLOCK, end - at)), np.uint8)
        last = np.flatnonzero(raw < 0x80)
        if not last.size or (at + raw.size == end and last[-1] != raw.size - 1):
            raise CorruptCheckpointError(info.file, f"tensor {info.name!r}: a varint at byte {at:,} never ends")
        offsets.append(at)
        before.append(n)
        n += int(last.size)
        at += int(last[-1]) + 1
    if n != _varint_count(info):
        raise CorruptCheckpointError(info.file, f"tensor {info.name!r} holds {n:,} values for {info.numel:,} elements")
    return offsets, before


def _per_value(bits: int) -> int:
    """Elements one int32_data value holds: 4-bit types two, 2-bit types four (a byte each), others one (FLOAT6: one
    code a value, as onnx.helper.make_tensor writes them)."""
    return 8 // bits if bits in (2, 4) else 1


def _varint_count(info: TensorInfo) -> int:
    """Values a tensor's int32_data holds (onnx.proto; _per_value)."""
    return info.dt.nbytes(info.numel) if _per_value(info.dt.bits) > 1 else info.numel


class _Model:
    def __init__(self, path: str, f: IO[bytes], size: int):
        self.path, self.folder = path, os.path.dirname(path)
        self.io = _File(f, path, size)
        self.tensors: dict[str, TensorInfo] = {}
        self.external: dict[str, int] = {}    # external data file -> its size
        self.reader = _Reader()
        self.constants = self.sparse = 0
        self.quantizers: list[tuple[str, str, list[str]]] = []   # QUANT_OPERANDS' nodes: (op, output, inputs)

    def add(self, info: TensorInfo, scope: str = "") -> None:
        """A tensor of the model; in a subgraph (`scope`: where it sits), one whose name a sibling branch's holds too
        (each branch its own scope, which onnx's checker allows) is named with its scope."""
        if info.name in self.tensors and scope:
            info = replace(info, name=f"{info.name} ({scope})")
        if info.name in self.tensors:
            raise CorruptCheckpointError(self.path, f"two tensors are named {info.name!r}")
        self.tensors[info.name] = info

    def mark_dequantized(self) -> None:
        """A QUANT_OPERANDS node's stored integer operand, scale, zero point: extra `dequantized` = (weight name, role,
        method), one weight to census/quant/onnx_qdq.py; an activation's scale and zero point: input-scale. First wins."""
        gathered = {out: inputs[0] for op, out, inputs in self.quantizers if op == "Gather"}
        for op, out, inputs in self.quantizers:
            for operand in QUANT_OPERANDS[op]:
                names = [inputs[i] if 0 <= i < len(inputs) else "" for i in operand]
                names[0] = gathered.get(names[0], names[0]) if op == "DequantizeLinear" else names[0]
                x = self.tensors.get(names[0])
                d = x.dt if x is not None else None
                codes = d is not None and (0 < d.bits <= 8 and d.kind != "bool" or d.kind in ("int", "uint") and d.bits <= 32)
                if x is not None and (not codes or "dequantized" in x.extra):
                    continue   # not DequantizeLinear's codes (a float is quantised as the model runs), or already claimed
                roles = ("quantized-weight", "scale", "zero-point") if x is not None else ("", "input-scale", "input-scale")
                key = out if op == "DequantizeLinear" and names[0] == inputs[0] or x is None else names[0]
                for name, role in zip(names, roles):
                    t = self.tensors.get(name)
                    if t is not None and role and "dequantized" not in t.extra:
                        method = "onnx qdq" if op == "DequantizeLinear" else "onnx qoperator"
                        self.tensors[name] = replace(t, extra={**t.extra, "dequantized": (key, role, method)})

    def model(self) -> None:
        graphs = opsets = 0
        for num, wire, pos, size in self.io.fields(0, self.io.size):
            if _MODEL_FIELDS.get(num, wire) != wire:
                raise CorruptCheckpointError(self.path, f"ModelProto field {num} has wire type {wire}")
            if num == M_GRAPH:
                graphs += 1
                self.graph(pos, pos + size, "")
            opsets += num == M_OPSET
        # onnx's checker requires both (onnx/checker.cc check_model); a file cut short between two
        # top-level fields is still a well-formed protobuf, and this is what tells it apart
        if graphs != 1:
            raise CorruptCheckpointError(self.path, f"the model has {graphs} graphs (one expected): not a whole ModelProto")
        if not opsets:
            raise CorruptCheckpointError(self.path, "the model has no opset_import: not a whole ModelProto")

    def graph(self, start: int, end: int, scope: str) -> None:
        """A graph's initializers and Constants, and those of the subgraphs its nodes hold (an If's branches, a Loop's
        or Scan's body; `scope`: the nodes and attributes a subgraph sits under, "" for the main graph)."""
        if scope.count("/") >= MAX_SUBGRAPHS:
            raise CorruptCheckpointError(self.path, f"subgraphs nest more than {MAX_SUBGRAPHS} deep")
        for num, wire, pos, size in self.io.fields(start, end):
            if wire != 2:
                continue
            if num == G_INITIALIZER:
                self.add(self.tensor(pos, pos + size, "initializer"), scope)
            elif num == G_SPARSE:
                self.add(self.sparse_tensor(pos, pos + size, None), scope)
            elif num == G_NODE:
                self.node(pos, pos + size, scope)

    def node(self, start: int, end: int, scope: str) -> None:
        op, node_name, inputs, outputs, attrs = "", "", [], [], []
        for num, wire, pos, size in self.io.fields(start, end):
            if wire != 2:
                continue
            if num == N_OP_TYPE:
                op = self.io.text(pos, size, "op_type")
            elif num == N_NAME:
                node_name = self.io.text(pos, size, "node name")
            elif num == N_OUTPUT:
                outputs.append(self.io.text(pos, size, "node output"))
            elif num == N_INPUT:
                inputs.append(self.io.text(pos, size, "node input"))
            elif num == N_ATTRIBUTE:
                attrs.append((pos, size))
        if op in QUANT_OPERANDS and outputs and inputs:
            self.quantizers.append((op, outputs[0], inputs))
        if op != "Constant":   # Constant's outputs hold its value; other nodes compute, some over subgraphs
            for pos, size in attrs:
                fields = list(self.io.fields(pos, pos + size))
                attr = next((self.io.text(p, n, "attribute name") for num, w, p, n in fields if num == A_NAME and w == 2),
                            "")
                for k, (num, _, p, n) in enumerate(f for f in fields if f[0] in (A_G, A_GRAPHS) and f[1] == 2):
                    where = (f"{op} {node_name or (outputs[0] if outputs else '?')!r} {attr}"
                             + (f" {k}" if num == A_GRAPHS else ""))
                    self.graph(p, p + n, f"{scope}/{where}" if scope else where)
            return
        if not outputs:
            return
        for pos, size in attrs:
            name, t, sparse = "", None, None
            for num, wire, p, n in self.io.fields(pos, pos + size):
                if num == A_NAME and wire == 2:
                    name = self.io.text(p, n, "attribute name")
                elif num == A_T and wire == 2:
                    t = (p, n)
                elif num == A_SPARSE and wire == 2:
                    sparse = (p, n)
            if name == "value" and t is not None:
                self.constants += 1
                self.add(self.tensor(t[0], t[0] + t[1], "Constant", outputs[0]), scope)
            elif name == "sparse_value" and sparse is not None:
                self.constants += 1
                self.add(self.sparse_tensor(sparse[0], sparse[0] + sparse[1], outputs[0]), scope)

    def sparse_tensor(self, start: int, end: int, name: str | None) -> TensorInfo:
        values = indices = None
        dims: list[int] = []
        for num, wire, pos, size in self.io.fields(start, end):
            if num == S_VALUES and wire == 2:
                values = self.tensor(pos, pos + size, "sparse values")
            elif num == S_INDICES and wire == 2:
                indices = self.tensor(pos, pos + size, "sparse indices")
            elif num == S_DIMS:
                dims += [_signed(pos)] if wire == 0 else [_signed(v) for v in self.io.packed(pos, size)]
        if values is None or indices is None:
            raise CorruptCheckpointError(self.path, f"sparse tensor at byte {start} lacks its values or indices")
        label = name or values.name
        nnz = values.numel
        if len(values.shape) != 1 or indices.dtype != "I64" or indices.shape not in ((nnz,), (nnz, len(dims))):
            raise CorruptCheckpointError(self.path, f"sparse tensor {label!r}: values {values.shape} and int64 indices "
                                                    f"{indices.shape} ({indices.dtype}) do not match")
        self.sparse += 1
        return TensorInfo(label, values.dtype, tuple(dims), self.path, None, values.nbytes + indices.nbytes,
                          extra={"encoding": "sparse", "values": values, "indices": indices, "onnx": "sparse",
                                 "nnz": nnz})

    def tensor(self, start: int, end: int, kind: str, name: str | None = None) -> TensorInfo:
        dims: list[int] = []
        code, tname, external = 1, "", False
        raw: tuple[int, int] | None = None                # raw_data's (offset, length)
        typed: dict[int, tuple[int, int]] = {}           # typed value field -> its (offset, length)
        n_str = str_bytes = 0                            # string_data: values, their bytes (one field each)
        entries: dict[str, str] = {}
        for num, wire, pos, size in self.io.fields(start, end):
            if num == T_DIMS:
                dims += [_signed(pos)] if wire == 0 else [_signed(v) for v in self.io.packed(pos, size)]
            elif num == T_TYPE and wire == 0:
                code = pos
            elif num == T_NAME and wire == 2:
                tname = self.io.text(pos, size, "tensor name")
            elif num == T_LOCATION and wire == 0:
                external = pos == 1
            elif num == T_RAW and wire == 2:
                raw = (pos, size)
            elif num == T_STRINGS and wire == 2:
                n_str, str_bytes = n_str + 1, str_bytes + size
            elif num in T_FIELDS and wire == 2:
                typed[num] = (pos, size)
            elif num == T_EXTERNAL and wire == 2:
                k = v = ""
                for n2, w2, p2, s2 in self.io.fields(pos, pos + size):
                    if w2 == 2 and n2 in (1, 2):
                        text = self.io.text(p2, s2, "external_data entry", lenient=False)
                        k, v = (text, v) if n2 == 1 else (k, text)
                entries[k] = v
        label = name or tname
        if code not in ONNX_TYPES:
            raise CorruptCheckpointError(self.path, f"tensor {label!r}: unknown ONNX data type {code}")
        dtype = ONNX_TYPES[code]
        if any(d < 0 for d in dims):
            raise CorruptCheckpointError(self.path, f"tensor {label!r}: negative dimension in {dims}")
        d = dtypes.get(dtype)
        probe = TensorInfo(label, dtype, tuple(dims), self.path, None, 0)   # checks the shape's size
        need = d.nbytes(probe.numel)
        extra: dict[str, object] = {"onnx": kind}
        if external:
            return self.external_tensor(probe, entries, need, extra)
        if dtype == "STR":   # one string_data field a value (numpy_helper reads nothing else of a STRING tensor)
            if n_str != probe.numel:
                raise CorruptCheckpointError(self.path, f"tensor {label!r} of {probe.numel:,} strings holds {n_str:,}")
            return TensorInfo(label, dtype, tuple(dims), self.path, None, str_bytes, extra=extra)
        field = T_FIELD_OF.get(code, 5)
        if raw is None and field not in typed:
            if probe.numel:
                raise CorruptCheckpointError(self.path, f"tensor {label!r} of {probe.numel:,} elements stores no values "
                                                        f"(onnx reads {dtype} from raw_data or {T_FIELD_NAMES[field]})")
            raw = (start, 0)
        pos, size, enc, width = (*raw, "raw", 0) if raw is not None else (*typed[field], *T_FIELDS[field])
        # float_data holds FLOAT and COMPLEX64 as fixed32s, double_data DOUBLE and COMPLEX128 as fixed64s:
        # both are the raw little-endian bytes, addressable by offset like raw_data
        fixed = enc == "fixed" and d.kind in ("float", "complex") and width * 8 * (2 if d.kind == "complex" else 1) == d.bits
        if enc == "raw" or fixed:
            if size != need:
                raise CorruptCheckpointError(self.path, f"tensor {label!r} ({dtype}, shape {tuple(dims)}) needs {need:,} "
                                                        f"bytes, its data holds {size:,}")
            return TensorInfo(label, dtype, tuple(dims), self.path, pos, size, extra=extra)
        if enc == "varint":
            n = _varint_count(probe)
            if not n <= size <= 10 * n:
                raise CorruptCheckpointError(self.path, f"tensor {label!r}: {size:,} bytes of varints cannot hold "
                                                        f"{n:,} values")
            if (d.numpy is None and d.bits not in (2, 4, 6)) or d.kind == "complex" or d.bits > 64:
                raise CorruptCheckpointError(self.path, f"tensor {label!r}: {dtype} values in a varint field")
            return TensorInfo(label, dtype, tuple(dims), self.path, None, size,
                              extra={**extra, "encoding": "varint", "span": (pos, size)})
        raise CorruptCheckpointError(self.path, f"tensor {label!r}: {dtype} values in a {width}-byte field")

    def external_tensor(self, probe: TensorInfo, entries: dict[str, str], need: int, extra: dict[str, object]) -> TensorInfo:
        loc = entries.get("location", "")
        parts = loc.replace("\\", "/").split("/")
        if not loc or os.path.isabs(loc) or ".." in parts or "\0" in loc:
            # onnx's checker refuses the same (onnx/checker.cc resolve_external_data_location)
            raise CorruptCheckpointError(self.path, f"tensor {probe.name!r}: external data location {loc!r} is not a "
                                                    "relative path inside the model's folder")
        try:
            offset = int(entries.get("offset", "0"))
            length = int(entries.get("length", str(need)))
        except ValueError:
            raise CorruptCheckpointError(self.path, f"tensor {probe.name!r}: external data offset or length is not "
                                                    "an integer") from None
        if offset < 0 or length != need:
            raise CorruptCheckpointError(self.path, f"tensor {probe.name!r} needs {need:,} bytes, its external data says "
                                                    f"offset {offset:,}, length {length:,}")
        file = os.path.join(self.folder, *parts)
        check_inside(file, "external data", self.path)
        if file not in self.external:
            self.external[file] = regular(file, f"external data of {probe.name!r}").st_size
        if offset + need > self.external[file]:
            raise CorruptCheckpointError(file, f"tensor {probe.name!r}: bytes {offset:,}-{offset + need:,} lie past the "
                                               f"end of the file ({self.external[file]:,} bytes)")
        return TensorInfo(probe.name, probe.dtype, probe.shape, file, offset, need, extra={**extra, "external": loc})


def accept(probe: Probe) -> bool:
    """A ModelProto begins with its fields in number order as every writer emits them: ir_version
    (field 1, a varint: key byte 0x08), then producer_name, ..., graph. The first few fields of the
    head must all be ModelProto fields of the right wire type."""
    head = probe.head
    if len(head) < 4 or head[0] != 0x08 or not 1 <= head[1] <= 64:
        return False
    pos, seen = 2, 0
    while pos < len(head) and seen < 4:
        key = head[pos]
        num, wire = key >> 3, key & 7
        if _MODEL_FIELDS.get(num) != wire or key & 0x80:
            return False
        pos += 1
        if wire == 0:
            while pos < len(head) and head[pos] & 0x80:
                pos += 1
            pos += 1
        else:
            n = shift = 0
            while pos < len(head):
                b = head[pos]
                n |= (b & 0x7F) << shift
                shift += 7
                pos += 1
                if not b & 0x80:
                    break
            if pos + n > probe.size:
                return False
            if num == M_GRAPH:
                return True
            # producer_name, producer_version, domain are short names (a TF SavedModel, also starting
            # `08 01 12`, has its whole meta graph in field 2)
            if num in (2, 3, 4) and (n > 1024 or pos + n > len(head)):
                return False
            pos += n
        seen += 1
    return seen > 0


def open_onnx(path: str) -> Checkpoint:
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        m = _Model(path, f, size)
        m.model()
        m.mark_dequantized()
    ckpt = Checkpoint(path=path, format="onnx", tensors=m.tensors, files=(path, *sorted(m.external)))
    for file in ckpt.files:
        ckpt.readers[file] = m.reader
    if m.constants:
        ckpt.notes.append(f"{m.constants} tensor(s) are Constant nodes' values, named by the node's output")
    if m.sparse:
        ckpt.notes.append(f"{m.sparse} sparse tensor(s): counted at their dense shape; bytes are the stored values "
                          "and indices")
    return ckpt


register(Format("onnx", accept, open_onnx, (".onnx",)))
