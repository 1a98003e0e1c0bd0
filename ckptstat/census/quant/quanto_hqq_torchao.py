"""optimum-quanto, HQQ and torchao weights (docs/quantized.md): their members, method, bits and logical shape.

census/quant/ finds the candidates (quanto: `<m>.weight._data...` names; HQQ: a module holding `W_q`;
torchao: a module holding `_weight_qdata`) and wraps what these functions return into its QuantWeight;
nothing here reads values itself: HQQ's `shape` tensor is read through the callable quant.py passes
(bounded, MAX_SHAPE_READ).

optimum-quanto (`optimum/quanto/nn/qmodule.py` QModuleMixin._save_to_state_dict, `tensor/qtensor.py`
QTensor.save_to_state_dict) flattens the quantised weight into its inner tensors:
  - qint8 / qfloat8 (WeightQBytesTensor): `weight._data` int8 / float8 [out, in], `weight._scale` [out, 1];
  - qint4 / qint2 (WeightQBitsTensor): `weight._data._data` uint8 (a PackedTensor: 8 / bits values per byte
    along dim 0, `tensor/packed.py` pack_weights, ceil(rows / per) rows), `weight._scale` and `weight._shift`
    [rows, 1]. rows x columns is the weight's size, but the split is not stored: QModuleMixin.__init__ groups
    a Linear's `in` features when in > 128 (group 128, else 96, 64 or 32, the first that divides in), and then
    the data are [out x in / group, group] (`tensor/grouped.py` group, axis 0); ungrouped they are [out, in].
    quanto's loader takes the shape from the model it builds from config.json, and so does this module (the
    family's expected tensors); without a config, from a bias, or from the sizes the checkpoint's other
    tensors show, checked against quanto's group rule.
  - every QModuleMixin also saves `input_scale` and `output_scale` (scalars).

HQQ (`hqq/core/quantize.py` HQQLinear.state_dict / state_dict_keys, as transformers' HqqConfig
save_pretrained writes it): per module `W_q` (packed: `hqq/core/bitpack.py` 8/4/2/1-bit in uint8, 3-bit ten
values per int32 over ceil(rows / 10) rows), `scale`, `zero` [rows, 1], `shape` int64 [out, in], and scalar or
string metadata (`nbits`, `group_size`, `axis`, `packing`, `compute_dtype`, ...).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...core import TensorInfo
from ...errors import CkptstatError

QUANTO_MODULE = ("input_scale", "output_scale")   # QModuleMixin's own buffers, after `<m>.` (its weight's: quant._QUANTO)
_F8 = {"F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ"}


@dataclass(frozen=True)
class Found:
    name: str
    shape: tuple[int, ...]
    method: str
    bits: float | None
    members: dict[str, TensorInfo]


# ------------------------------------------------------------------------------------------------- quanto
def quanto_group(n_in: int) -> int | None:
    """The group size optimum-quanto's QModuleMixin.__init__ picks for a qint4/qint2 Linear with n_in inputs."""
    if n_in <= 128:
        return None
    g = 128
    while n_in % g != 0 and g > 32:
        g -= 32
    return g if n_in % g == 0 else None


def _fits(out: int, n_in: int, rows: int, cols: int) -> bool:
    """(out, n_in) is a weight quanto stores as unpacked data [rows, cols]."""
    if out <= 0 or n_in <= 0:
        return False
    g = quanto_group(n_in)
    return (out, n_in) == (rows, cols) if g is None else cols == g and out * n_in == rows * cols


def quanto(groups: Mapping[str, dict[str, TensorInfo]], T: Mapping[str, TensorInfo], expected: ConfigShapes,
           notes: list[str]) -> list[Found]:
    """groups: logical name (`<m>.weight`) -> its `weight.*` tensors; T: the checkpoint's tensors (for the
    module's input/output scales and bias, and the sizes other tensors show); expected: config.json's shapes."""
    found: list[Found] = []
    open_: dict[str, tuple[int, int, dict[str, TensorInfo], str, float]] = {}
    for name, members in groups.items():
        mod = name[: -len(".weight")]
        members = {**members, **{f"{mod}.{k}": T[f"{mod}.{k}"] for k in QUANTO_MODULE if f"{mod}.{k}" in T}}
        data, packed = members.get(name + "._data"), members.get(name + "._data._data")
        if data is not None and packed is None:       # qint8 / qfloat8: one stored element per logical one
            method = "quanto qfloat8" if data.dtype in _F8 else "quanto qint8"
            found.append(Found(name, data.shape, method, 8, members))
            continue
        if packed is None:
            continue
        scale = members.get(name + "._scale")
        p_rows, cols = packed.shape if len(packed.shape) == 2 else (packed.numel, 1)
        rows = scale.shape[0] if scale is not None and len(scale.shape) == 2 and scale.shape[0] > 0 else 0
        bits = next((b for b in (4, 2) if rows and -(-rows // (8 // b)) == p_rows), None)
        if bits is None:
            notes.append(f"{name}._scale does not fit {name}._data._data {list(packed.shape)}: read as 4-bit, shape unknown")
            found.append(Found(name, (packed.numel * 2,), "quanto qint4", 4, members))
            continue
        open_[name] = (rows, cols, members, f"quanto qint{bits}", bits)
    found += _quanto_shapes(open_, T, expected, notes)
    return found


def _quanto_shapes(open_: dict[str, tuple[int, int, dict[str, TensorInfo], str, float]], T: Mapping[str, TensorInfo],
                   expected: ConfigShapes, notes: list[str]) -> list[Found]:
    """The [out, in] of each packed quanto weight: config.json's shape, else the bias's length, else an input
    size the checkpoint's other tensors show (their dims, and the outputs of weights already placed)."""
    done: dict[str, tuple[int, int]] = {}
    for name, (rows, cols, _, _, _) in open_.items():
        e = expected.get(name)
        bias = T.get(name[: -len("weight")] + "bias")
        if e is not None and len(e) == 2 and _fits(e[0], e[1], rows, cols):
            done[name] = (e[0], e[1])
        elif bias is not None and len(bias.shape) == 1 and bias.shape[0] and (rows * cols) % bias.shape[0] == 0 \
                and _fits(bias.shape[0], rows * cols // bias.shape[0], rows, cols):
            done[name] = (bias.shape[0], rows * cols // bias.shape[0])
    members_all = {m for v in open_.values() for m in v[2]}
    dims = {d for n, t in T.items() if n not in members_all for d in t.shape if d > 1}
    for _ in range(3):   # an output placed in one pass is an input size the next can use (up_proj -> down_proj)
        dims |= {d for s in done.values() for d in s}
        for name, (rows, cols, _, _, _) in open_.items():
            if name in done:
                continue
            fits = sorted(d for d in dims if (rows * cols) % d == 0 and _fits(rows * cols // d, d, rows, cols))
            if fits:
                if len(fits) > 1:
                    notes.append(f"{name}: quanto keeps no shape; inputs {fits} all fit its packing, {fits[-1]} used")
                done[name] = (rows * cols // fits[-1], fits[-1])
    out = []
    for name, (rows, cols, members, method, bits) in open_.items():
        shape: tuple[int, ...] | None = done.get(name)
        if shape is None and _fits(rows, cols, rows, cols):
            shape = (rows, cols)
            if cols in (128, 96, 64, 32):
                notes.append(f"{name}: quanto keeps no shape and no other tensor tells it; read ungrouped as {[rows, cols]}")
        if shape is None:
            notes.append(f"{name}: quanto keeps no shape; {rows * cols:,} elements in groups of {cols}, shape unknown")
            shape = (rows * cols,)
        out.append(Found(name, shape, method, bits, members))
    return out


class ConfigShapes:
    """name -> the shape the model config.json describes gives it (the family's expected tensors,
    families/framework/tensors.py), matched by suffix as a file may wrap every name; the template is built on first use,
    and is empty without a config, a known family or a template."""

    def __init__(self, cfg: Mapping[str, Any] | None) -> None:
        self._cfg = cfg
        self._template: dict[str, tuple[int, ...]] | None = None

    def get(self, name: str) -> tuple[int, ...] | None:
        if self._template is None:
            self._template = _template(self._cfg)
        parts = name.split(".")
        return next((self._template[s] for s in (".".join(parts[i:]) for i in range(len(parts))) if s in self._template), None)


def _template(cfg: Mapping[str, Any] | None) -> dict[str, tuple[int, ...]]:
    if not cfg:
        return {}
    from ...families.framework.spec import from_config
    from ...families.framework.tensors import expected_tensors

    try:
        template = expected_tensors(from_config(cfg))
    except (CkptstatError, AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError):
        return {}
    return {k: tuple(v) for k, v in (template or {}).items()}


# ---------------------------------------------------------------------------------------------------- HQQ
def hqq(prefix: str, s: Mapping[str, TensorInfo], read_shape: Callable[[str], tuple[int, ...] | None],
        expected: ConfigShapes, notes: list[str]) -> Found:
    """An HQQLinear's pieces: the logical shape from its `shape` tensor, accepted only when W_q's bytes hold
    exactly that many values at 8, 4, 2 or 1 bits (uint8 packings) or as 3-bit values ten to an int32 over
    ceil(rows / 10) rows; bits from the same check. Without a `shape` tensor (HQQ's own save_quantized pickles
    it as a torch.Size, which no reader keeps), config.json's shape when W_q fits it."""
    wq = s["W_q"]
    # HQQLinear.state_dict: W_q, every entry of its meta dict (scale, zero, shape, nbits, ...; hqq 0.2.8 writes the
    # state_dict_keys() list, older or quant_scale/quant_zero configs more), offload_meta...: all but the bias
    members = {prefix + k: t for k, t in s.items() if k != "bias"}
    shape = read_shape(prefix + "shape") if "shape" in s else expected.get(prefix + "weight")
    bits = _hqq_bits(wq, math.prod(shape)) if shape and min(shape) > 0 else None
    if shape is not None and bits is None:
        where = f"{prefix}shape" if "shape" in s else "config.json's model"
        notes.append(f"{where}: shape {list(shape)} does not fit {prefix}W_q {list(wq.shape)} ({wq.nbytes:,} bytes): "
                     "size from the scales")
    if shape is None or bits is None:
        scale = s.get("scale")
        # axis 1 (what transformers' HqqConfig writes): scale [groups, 1], W_q's columns the group size
        n = scale.shape[0] * wq.shape[-1] if scale is not None and len(scale.shape) == 2 and len(wq.shape) == 2 else 0
        bits = _hqq_bits(wq, n) if n else None
        shape = (n,) if bits else (wq.nbytes * 2,)
        bits = bits or 4
        notes.append(f"{prefix}W_q: no readable HQQ shape; {shape[0]:,} values, shape unknown")
    return Found(prefix + "weight", shape, f"hqq {bits:g}-bit", bits, members)


def _hqq_bits(wq: TensorInfo, n: int) -> float | None:
    if n <= 0:
        return None
    rows = wq.shape[0] if len(wq.shape) == 2 else 0
    three = None
    if rows and wq.nbytes % (4 * rows) == 0:   # 3bit_32: [ceil(R / 10), C] int32 (or viewed as float: same bytes)
        cols = wq.nbytes // (4 * rows)
        three = 3 if n % cols == 0 and -(-(n // cols) // 10) == rows else None
    if wq.dtype == "I32":   # only 3bit_32 packs into int32 (its padded rows can mimic a 4-bit ratio)
        return three
    b = wq.nbytes * 8 / n
    return b if b in (8, 4, 2, 1) else three   # 8bit_u8, 4bit_u8, 2bit_u8, 1bit_u8: exactly n values


# ------------------------------------------------------------------------------------------------ torchao
def torchao(prefix: str, s: Mapping[str, TensorInfo], notes: list[str]) -> Found | None:
    """torchao tensor subclasses as transformers' TorchAoConfig save_pretrained(safe_serialization=True) writes
    them (torchao `prototype/safetensors/safetensors_support.py` flatten_tensor_state_dict): parameter `weight`
    of module m becomes `m._weight_<inner>` for each inner tensor (`qdata`, `scale`, `zero_point`...).
    Float8Tensor / Int8Tensor: qdata float8 / int8 [out, in], one element per logical one. Packed subclasses
    (Int4Tensor uint8, Int4PlainInt32Tensor int32) keep their shape in no tensor: not decoded, a note."""
    q = s["_weight_qdata"]
    members = {prefix + k: t for k, t in s.items() if k.startswith("_weight_")}
    if q.dtype in _F8 or q.dtype == "I8":
        return Found(prefix + "weight", q.shape, f"torchao {'float8' if q.dtype in _F8 else 'int8'}", 8, members)
    notes.append(f"{prefix}_weight_qdata is {q.dtype}: a packed torchao layout ckptstat does not decode; counted as stored")
    return None
