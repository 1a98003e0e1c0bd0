"""`ckptstat diff` of a model and its Apple MLX conversion (`mlx_lm.convert`, docs/diff.md "MLX conversions"): the
MLX side is read as the model it stands for, then compared as any conversion.

- A quantised module (census/quant/mlx.py: `weight` codes, `scales`, `biases`) reads as its logical weight,
  dequantised as `mx.dequantize` does: mode affine `scales x q + biases`; mxfp4, nvfp4, mxfp8 the code's value
  (E2M1, E4M3) x its group's scale (E8M0 `2^(e - 127)`, nvfp4's E4M3). The values are the grid's exact ones (float64),
  not mx.dequantize's output rounded to the compute dtype. A module with a `global_scale` is left as stored.
- A MoE block's stack, `P.switch_mlp.{gate,up,down}_proj.weight` [experts, out, in] (mlx_lm's sanitize), reads as one
  tensor per expert, `...weight[E]`, named as the other side names the expert (`P.experts.E.gate_proj.weight`;
  Mixtral's `w1`, `w3`, `w2`).
- A norm weight mlx_lm stored as w + 1 (Qwen3-Next, Qwen3.5: PLUS_ONE) reads as w.
- What mlx_lm splits along rows reads joined back (Joined): MLA's `kv_b_proj` (per head into `embed_q` and
  `unembed_out`), a MoE block's fused gate and up experts (into `switch_mlp.gate_proj` and `up_proj`); where
  transformers keeps them [experts, in, out] (Llama 4, Qwen3-VL-MoE), mlx_lm also swapped each expert's axes, and
  the down projection's alone (Swapped): read in transformers' order.
- A conv1d weight mlx keeps [out, kernel, in] (census/quant/mlx.py channels_last) reads in torch's [out, in, kernel]
  where the other side holds that shape.

Whether each dequantised element is within the rounding its group's stored scale allows: MlxBound; a norm + 1, within
the compute dtype's rounding of w + 1: PlusOne.bound."""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from ..census.quant import layout, logical
from ..census.quant.mlx import channels_last, is_mlx_file
from ..core import Checkpoint, TensorInfo
from ..core.dtypes import bits16, decode, lut, unpack_bits
from ..core.tensor import read_flat_file
from .conversion import HALF_ULP, MAX_EXPERTS, half_ulp

MAP = "mlx_lm's conversion undone"
_STACK = re.compile(r"^(?P<block>.+)\.switch_mlp\.(?P<proj>gate|up|down)_proj\.weight$")
_MIXTRAL = {"gate": "w1", "up": "w3", "down": "w2"}   # mlx_lm's mixtral sanitize: w1 -> gate, w3 -> up, w2 -> down
def _fp_interval(v: np.ndarray, mode: str) -> np.ndarray:
    """The distance between the two grid values around |v| (in units of the group's scale): E2M1's 0 .5 1 1.5 2 3 4 6,
    or E4M3's 3 mantissa bits (subnormal below 2^-6)."""
    if mode == "mxfp8":
        e = np.floor(np.log2(np.maximum(v, 2.0 ** -6)))
        return 2.0 ** (e - 3)
    return np.where(v < 2, 0.5, np.where(v < 4, 1.0, 2.0))


def _rounded(v: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values rounded to a 16-bit dtype, as float64."""
    return decode(bits16(v, dtype), dtype, v.size).astype(np.float64).reshape(v.shape)


@dataclass(frozen=True)
class Packed:
    """An mlx quantised weight, or the rows of one expert of a stack: its members in `src`, how they decode."""
    src: Checkpoint
    codes: str
    scales: str
    biases: str | None
    mode: str            # affine, mxfp4, nvfp4, mxfp8
    bits: int
    group: int
    cols: int            # the logical inputs of a row
    row0: int            # the slice's first row (rows over every leading dimension)
    dtype: str           # the compute dtype (the scales' in mode affine)

    @property
    def label(self) -> str:
        return f"mlx {self.mode}" + (f" {self.bits}-bit, group {self.group}" if self.mode == "affine" else "")

    def _groups(self, name: str | None, first: int, n: int) -> np.ndarray:
        """n of a member's per-group values (scales; affine's biases, which as_packed checked it has) from the slice's
        group `first` on, in float64 (the floating-point modes' scales as their uint8 codes)."""
        assert name is not None
        per_row = self.cols // self.group
        v = np.asarray(self.src.read_elements(name, self.row0 * per_row + first, n))
        return v if v.dtype == np.uint8 else v.astype(np.float64)

    @property
    def block_rows(self) -> int:
        """The rows a read must take together (whole rows of scale blocks): one."""
        return 1

    @property
    def _word(self) -> int:
        """The bits of one stored element of the codes: mlx's uint32 words, or bytes (gpt-oss's MXFP4 blocks)."""
        return self.src.tensors[self.codes].dt.bits

    @property
    def rows(self) -> int:
        """The rows of the whole quantised tensor from row0 on (its codes' rows, over every leading dimension)."""
        return self.src.tensors[self.codes].numel * self._word // (self.cols * self.bits) - self.row0

    @property
    def out_dtype(self) -> str:
        """The dtype mx.dequantize returns: the scales' in mode affine, bfloat16 in the floating-point modes."""
        return self.dtype if self.mode == "affine" else "BF16"

    def pieces(self, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Rows [r0, r1) of the slice as stored: the codes (groups, group) uint8, each group's scale (float64; the
        floating-point modes' as their uint8 codes) and affine's bias (float64; else None)."""
        words = self.cols * self.bits // self._word
        raw = np.asarray(self.src.read_elements(self.codes, (self.row0 + r0) * words, (r1 - r0) * words))
        packed = raw.astype("<u4").view(np.uint8) if self._word == 32 else raw.astype(np.uint8, copy=False)
        q = unpack_bits(packed, self.bits, (r1 - r0) * self.cols).reshape(-1, self.group)
        per_row = self.cols // self.group
        s = self._groups(self.scales, r0 * per_row, (r1 - r0) * per_row)
        b = self._groups(self.biases, r0 * per_row, (r1 - r0) * per_row) if self.mode == "affine" else None
        return q, s, b

    def values(self, q: np.ndarray, s: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        """The exact grid values of codes q under scales s (and biases b), broadcast together, float64."""
        if b is None:
            return lut("F8_E4M3" if self.mode == "mxfp8" else "F4").astype(np.float64)[q] * self._fp_scales(s)
        return s * q + b

    def patterns(self, q: np.ndarray, s: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        """The 16-bit patterns (uint16) of the values mx.dequantize gives codes q under scales s (and biases b),
        broadcast together, in out_dtype: affine's scale x q rounded, then + bias rounded; the floating-point modes'
        code value x scale rounded once."""
        dtype = self.out_dtype
        if b is None:
            return bits16(self.values(q, s, None), dtype)
        return bits16(_rounded(s * q, dtype) + b, dtype)

    def read(self, start: int, count: int) -> np.ndarray:
        """Elements [start, start + count) of the dequantised slice, C order, float64."""
        r0, r1 = start // self.cols, -(-(start + count) // self.cols)
        lo = start - r0 * self.cols
        q, s, b = self.pieces(r0, r1)
        return self.values(q, s[:, None], None if b is None else b[:, None]).reshape(-1)[lo: lo + count]

    def _fp_scales(self, s: np.ndarray) -> np.ndarray:
        """The floating-point modes' group scales: nvfp4's E4M3, mxfp4's and mxfp8's E8M0 (2^(e - 127))."""
        return lut("F8_E4M3" if self.mode == "nvfp4" else "F8_E8M0").astype(np.float64)[s.astype(np.uint8)]

    def bound(self) -> MlxBound:
        return MlxBound(self)

    def allowed(self, x: np.ndarray, start: int) -> np.ndarray:
        """The allowed |x - y| of source values x for the slice's elements [start, start + len(x)), start a group's
        first (MlxBound's rule)."""
        n = -(-len(x) // self.group)
        first = start // self.group
        s = self._groups(self.scales, first, n)

        def each(v: np.ndarray) -> np.ndarray:
            return np.repeat(v, self.group)[: len(x)]

        ax = np.abs(x)
        if self.mode == "affine":
            sf, bf = s, self._groups(self.biases, first, n)
            top = (1 << self.bits) - 1
            ends = (bf, bf + sf * top)
            lo, hi = each(np.minimum(*ends)), each(np.maximum(*ends))
            per = (np.abs(sf) / 2 + (2 * top + 1) * half_ulp(sf, self.dtype) + 2 * half_ulp(bf, self.dtype)
                   + 2.0 ** -20 * (np.abs(bf) + top * np.abs(sf)))
            outside = np.maximum(0.0, np.maximum(lo - x, x - hi))
            return each(per) + outside + half_ulp(x, self.dtype) + ax * 2.0 ** -20
        scale = each(self._fp_scales(s))
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.where(scale > 0, ax / scale, 0.0)
        largest = 448.0 if self.mode == "mxfp8" else 6.0
        return (_fp_interval(v, self.mode) / 2 * scale + np.maximum(0.0, ax - largest * scale)
                + 2 * half_ulp(x, self.dtype) + ax * 2.0 ** -20)


class MlxBound:
    """The allowed |x - y| per element of a source x and its dequantised y, on successive whole groups
    (Packed.allowed, which reads the groups' stored scales in step).

    Affine (mx.quantize's affine_quantize): each group's scale s and bias b are computed in float32, every code
    q = clip(round((x - b) / s), 0, 2^bits - 1), and then s and b are rounded to the compute dtype (u: half its ulp).
    With the stored s, b and n = 2^bits - 1:

        |s| / 2 + max(0, lo - x, x - hi)        the nearest grid value, or the clamp outside the grid [lo, hi]
        + (2n + 1) u(s) + 2 u(b)                 codes chosen before s and b were rounded
        + |x| u_rel + 2^-20 (|x| + |b| + n|s|)   a source rounded to the compute dtype first; float32 arithmetic

    mxfp4 / nvfp4 / mxfp8 (fp_quantize): x / scale rounded to the nearest E2M1 (E4M3) value, clamped at 6 (448):
    half the grid's interval around |x| / scale, times the scale, plus the clamp, plus 2 |x| u_rel (the division in
    the compute dtype, a source rounded to it)."""

    def __init__(self, p: Packed | Joined | Swapped):
        self.p, self.next = p, 0

    def __call__(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        out = self.p.allowed(x, self.next)
        self.next += len(x)
        return out


@dataclass(frozen=True)
class Stored:
    """A tensor of the mlx file as stored (one half of a Joined where it is not quantised)."""
    src: Checkpoint
    name: str
    dtype: str

    def read(self, start: int, count: int) -> np.ndarray:
        return np.asarray(self.src.read_elements(self.name, start, count)).astype(np.float64)

    def allowed(self, x: np.ndarray, start: int) -> np.ndarray:
        """A wider source rounded to the dtype."""
        return half_ulp(x, self.dtype)


@dataclass(frozen=True)
class Joined:
    """A tensor transformers keeps whole, [blocks x (a + b), cols], which mlx_lm's sanitize splits along its rows block
    by block: each block's first a rows from `first` ([blocks, cols, a], transposed, where `transposed`; else
    [blocks, a, cols]), its next b rows from `second` [blocks, b, cols]. Read joined back, a block at a time:
    - MLA's `kv_b_proj`, split per head into `embed_q` (transposed) and `unembed_out` (DeepSeek-V3, Kimi, GLM-4 MoE Lite);
    - a MoE block's fused gate and up projections [experts, 2 x inter, hidden], split into `switch_mlp.gate_proj` and
      `up_proj` (GraniteMoE's `input_linear`, Qwen3.5-MoE's and Mistral 4's `experts.gate_up_proj`);
    - `in_out`: the whole is kept [blocks, cols, a + b], each block the transpose of the joined rows (Llama 4's and
      Qwen3-VL-MoE's `experts.gate_up_proj` [experts, hidden, 2 x inter], which mlx_lm splits along its last axis and
      swaps into `gate_proj` / `up_proj` [experts, inter, hidden])."""
    first: Packed | Stored
    second: Packed | Stored
    a: int
    b: int
    cols: int
    transposed: bool
    transform: str
    in_out: bool = False

    @property
    def group(self) -> int:   # a block's elements: what a bound takes at once
        return (self.a + self.b) * self.cols

    @property
    def label(self) -> str:
        labels = dict.fromkeys(p.label if isinstance(p, Packed) else p.dtype for p in (self.first, self.second))
        return " and ".join(labels)

    def _blocks(self, n: int, f: np.ndarray, s: np.ndarray) -> np.ndarray:
        """n blocks of the whole from `first`'s and `second`'s values (or bounds) for them."""
        fb = f.reshape(n, self.cols, self.a).transpose(0, 2, 1) if self.transposed else f.reshape(n, self.a, self.cols)
        rows = np.concatenate([fb, s.reshape(n, self.b, self.cols)], axis=1)
        return (rows.transpose(0, 2, 1) if self.in_out else rows).reshape(-1)

    def read(self, start: int, count: int) -> np.ndarray:
        k0, k1 = start // self.group, -(-(start + count) // self.group)
        nf, ns = self.a * self.cols, self.b * self.cols
        v = self._blocks(k1 - k0, self.first.read(k0 * nf, (k1 - k0) * nf), self.second.read(k0 * ns, (k1 - k0) * ns))
        lo = start - k0 * self.group
        return v[lo: lo + count]

    def bound(self) -> MlxBound:
        return MlxBound(self)

    def allowed(self, x: np.ndarray, start: int) -> np.ndarray:
        k0, n = start // self.group, len(x) // self.group
        blocks = (x.reshape(n, self.cols, self.a + self.b).transpose(0, 2, 1) if self.in_out
                  else x.reshape(n, self.a + self.b, self.cols))
        xf = blocks[:, : self.a]
        xf = (xf.transpose(0, 2, 1) if self.transposed else xf).reshape(-1)   # in `first`'s order
        return self._blocks(n, self.first.allowed(xf, k0 * self.a * self.cols),
                            self.second.allowed(blocks[:, self.a:].reshape(-1), k0 * self.b * self.cols))


@dataclass(frozen=True)
class Swapped:
    """A stack [blocks, rows, cols] (`part`: Packed or Stored) whose blocks mlx_lm transposed from transformers'
    [blocks, cols, rows], read in transformers' order a block at a time (Llama 4's and Qwen3-VL-MoE's
    `experts.down_proj` [experts, inter, hidden], which mlx_lm keeps [experts, hidden, inter])."""
    part: Packed | Stored
    rows: int
    cols: int
    transform: str

    @property
    def group(self) -> int:   # a block's elements: what a bound takes at once
        return self.rows * self.cols

    @property
    def label(self) -> str:
        return self.part.label if isinstance(self.part, Packed) else self.part.dtype

    def _swap(self, v: np.ndarray, rows: int, cols: int) -> np.ndarray:
        return v.reshape(-1, rows, cols).transpose(0, 2, 1).reshape(-1)

    def read(self, start: int, count: int) -> np.ndarray:
        k0, k1 = start // self.group, -(-(start + count) // self.group)
        v = self._swap(self.part.read(k0 * self.group, (k1 - k0) * self.group), self.rows, self.cols)
        lo = start - k0 * self.group
        return v[lo: lo + count]

    def bound(self) -> MlxBound:
        return MlxBound(self)

    def allowed(self, x: np.ndarray, start: int) -> np.ndarray:
        mine = self.part.allowed(self._swap(x, self.cols, self.rows), start)   # x in transformers' order: mlx's first
        return self._swap(mine, self.rows, self.cols)


# mlx_lm's sanitize stores these RMSNorm weights as w + 1 in the compute dtype (its RMSNorm scales by w, the model's by
# 1 + w): model_type -> the name endings, 1-D weights only (mlx_lm 0.32.2 models/qwen3_next.py, qwen3_5.py sanitize;
# qwen3_5_moe hands its weights to qwen3_5's)
_NORMS = (".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight", ".q_norm.weight",
          ".k_norm.weight")
PLUS_ONE = {"qwen3_next": _NORMS, "qwen3_5": _NORMS, "qwen3_5_moe": _NORMS}


@dataclass(frozen=True)
class PlusOne:
    """A norm weight mlx_lm stored as w + 1 (PLUS_ONE), read back as w: y - 1, exact in float64."""
    src: Checkpoint
    name: str
    dtype: str
    group = 1

    @property
    def label(self) -> str:
        return f"mlx_lm's norm + 1 in {self.dtype}"

    def read(self, start: int, count: int) -> np.ndarray:
        return np.asarray(self.src.read_elements(self.name, start, count)).astype(np.float64) - 1.0

    def bound(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """|x - (y - 1)| = |x + 1 - y|: y is x + 1 rounded to the dtype (x first rounded to it, from a wider source)."""
        return lambda x, y: half_ulp(x + 1.0, self.dtype) + half_ulp(x, self.dtype) + 2.0 ** -40


@dataclass(frozen=True)
class Relaid:
    """An mlx conv1d weight [out, kernel, in] read as torch's [out, in, kernel]."""
    src: Checkpoint
    name: str
    kernel: int
    inputs: int
    transform = "mlx's conv1d axes [out, kernel, in] read as torch's [out, in, kernel]"

    def read(self, start: int, count: int) -> np.ndarray:
        row = self.kernel * self.inputs
        r0, r1 = start // row, -(-(start + count) // row)
        v = np.asarray(self.src.read_elements(self.name, r0 * row, (r1 - r0) * row))
        v = v.reshape(-1, self.kernel, self.inputs).transpose(0, 2, 1).reshape(-1)
        lo = start - r0 * row
        return v[lo: lo + count]


def _extra(source: Packed | PlusOne | Joined | Swapped | Relaid) -> dict[str, object]:
    """A view tensor's extra: its reader (`mlx`), what it was rounded from where it was (`rounded`: conversion.rounding
    reads its label, group and bound; a Joined where a half is quantised, a Swapped where its stack is), the layout
    change undone (`transform`)."""
    extra: dict[str, object] = {"mlx": source}
    if isinstance(source, (Packed, PlusOne)) or isinstance(source, Joined) and (
            isinstance(source.first, Packed) or isinstance(source.second, Packed)) or isinstance(
            source, Swapped) and isinstance(source.part, Packed):
        extra["rounded"] = source
    if isinstance(source, (Joined, Swapped, Relaid)):
        extra["transform"] = source.transform
    return extra


def mlx_side(a: Checkpoint, b: Checkpoint) -> str | None:
    """"a" or "b": the side to read as the model mlx converted. The one holding mlx's quantised weights where the other
    holds none (a model, or mlx's unquantised conversion of it); else the one mlx wrote where the other is not mlx's."""
    def quantised(c: Checkpoint) -> bool:
        q = layout(c)
        return q is not None and any(w.method.startswith("mlx ") for w in q.weights.values())

    qa, qb = quantised(a), quantised(b)
    if qa != qb:
        return "a" if qa else "b"
    fa, fb = is_mlx_file(a.metadata), is_mlx_file(b.metadata)
    return None if qa or fa == fb else "a" if fa else "b"


Rules = list[tuple[re.Pattern[str], str]]


def view(ckpt: Checkpoint, other: Mapping[str, tuple[int, ...]], key: Callable[[str], str],
         other_mlx: bool = False) -> tuple[Checkpoint, Rules]:
    """The mlx checkpoint as the model it converts (module docstring), and the rules naming its experts' slices as the
    other side does. `other`: the other side's aligned names -> shapes; `key`: a name of this side, aligned;
    `other_mlx`: the other side is mlx's own unquantised conversion (its norms already + 1: left as stored)."""
    q = layout(ckpt)
    shown = logical(ckpt).tensors
    packed = {w.name: p for w in (q.weights.values() if q is not None else ())
              if (p := as_packed(ckpt, w.members, w.method, w.bits, w.shape, shown[w.name].dtype)) is not None}
    member_of = {n: w.name for w in (q.weights.values() if q is not None else ()) if w.name in packed for n in w.members}
    out: dict[str, TensorInfo] = {}
    rules: Rules = []
    done: set[str] = set()
    for name, t in ckpt.tensors.items():
        logical_name = member_of.get(name)
        if logical_name is None:
            out.update(_plain(ckpt, t, other, key, rules, other_mlx))
            continue
        if logical_name in done:
            continue
        done.add(logical_name)
        p = packed[logical_name]
        w = q.weights[logical_name]  # type: ignore[union-attr]
        stored = sum(ckpt.tensors[n].nbytes for n in w.members)
        whole = TensorInfo(logical_name, p.dtype, w.shape, ckpt.tensors[p.codes].file, None, stored,
                           storage=f"mlx:{logical_name}", extra=_extra(p))
        out.update(_slices(whole, other, key, rules, partial(_expert, p)))
    _join(ckpt, out, other, key, rules)
    tensors_view = replace(ckpt, tensors=out, readers={f: _dispatch(ckpt.readers.get(f, read_flat_file))
                                                        for f in ckpt.files})
    return tensors_view, rules


def as_packed(ckpt: Checkpoint, members: tuple[str, ...], method: str, bits: float | None, shape: tuple[int, ...],
              dtype: str) -> Packed | None:
    """An mlx quantised weight (census/quant/mlx.py) as Packed, where its members are the packing its mode, bits and
    group make: uint32 codes of `bits` over the logical inputs, one scale (and bias, affine) per group; else None (a
    module with a global scale, or a layout that does not add up, is compared as stored)."""
    m = {n.rpartition(".")[2]: n for n in members}
    if not method.startswith("mlx ") or "global_scale" in m or not {"weight", "scales"} <= set(m) or not shape:
        return None
    codes, scales = ckpt.tensors[m["weight"]], ckpt.tensors[m["scales"]]
    biases = ckpt.tensors.get(m.get("biases", ""))
    mode, width, cols = method.split()[1], int(bits or 0), shape[-1]
    groups = scales.shape[-1] if scales.shape else 0
    group = cols // groups if groups else 0
    affine = mode == "affine"
    fits = (codes.dtype == "U32" and codes.shape and 0 < width <= 8 and group and groups * group == cols
            and cols * width == codes.shape[-1] * 32 and scales.shape[:-1] == codes.shape[:-1]
            and (scales.dtype in HALF_ULP if affine else scales.dtype == "U8" and mode in ("mxfp4", "nvfp4", "mxfp8"))
            and (biases is not None and biases.shape == scales.shape and biases.dtype == scales.dtype) == affine)
    if not fits:
        return None
    return Packed(ckpt, m["weight"], m["scales"], m.get("biases"), mode, width, group, cols, 0,
                  scales.dtype if affine else dtype)


# The names of what view() reads joined or sliced, spelled as transformers': one rule per spelling, whatever the layer
_JOINED_RULE = (re.compile(r"^(.+)\.embed_q\.weight \+ \1\.unembed_out\.weight$"), r"\1.kv_b_proj.weight")
_SLICE_RULES = [   # by spelling, as _slices tries them: P.experts.E.gate_proj.weight, Mixtral's P.experts.E.w1.weight
    [(re.compile(r"^(.+)\.switch_mlp\.(gate|up|down)_proj\.weight\[(\d+)\]$"), r"\1.experts.\3.\2_proj.weight")],
    [(re.compile(rf"^(.+)\.switch_mlp\.{p}_proj\.weight\[(\d+)\]$"), rf"\1.experts.\2.{w}.weight")
     for p, w in _MIXTRAL.items()]]


def _rule(rules: Rules, rule: list[tuple[re.Pattern[str], str]]) -> None:
    for r in rule:
        if r not in rules:
            rules.append(r)


_MLA = "mlx_lm's per-head split of kv_b_proj (embed_q transposed, unembed_out) joined"
_FUSED = "mlx_lm's split of the experts' fused gate and up projections joined"
_FUSED_IN_OUT = "mlx_lm's split of the experts' fused gate and up projections joined, each expert [in, out] again"
_SWAPPED = "mlx_lm's [experts, out, in] read as transformers' [experts, in, out]"
# a MoE block's stacked gate projection as mlx_lm names it: P.switch_mlp.gate_proj.weight (Llama 4's P.experts...)
_STACKED_GATE = re.compile(r"^(?P<block>.+)\.(?P<stack>switch_mlp|experts)\.gate_proj\.weight$")
# a MoE block B's fused gate and up projections and its down projection as transformers names them, by spelling:
# Qwen3.5-MoE's, Mistral 4's, Llama 4's and Qwen3-VL-MoE's experts.gate_up_proj / experts.down_proj; GraniteMoE's
# input_linear / output_linear
_FUSED_NAMES = (("experts.gate_up_proj", "experts.down_proj"), ("input_linear.weight", "output_linear.weight"))
# the model types whose fused experts transformers keeps [experts, in, out] (its Llama4TextExperts, Qwen3VLMoeTextExperts):
# what decides where the shapes cannot (hidden = 2 x inter)
_IN_OUT = {"llama4", "qwen3_vl_moe"}
_FUSED_RULES = [
    [(re.compile(r"^(.+)\.(switch_mlp|experts)\.gate_proj\.weight \+ \1\.\2\.up_proj\.weight$"), rf"\1.{up}"),
     (re.compile(r"^(.+)\.(?:switch_mlp|experts)\.down_proj\.weight$"), rf"\1.{down}")] for up, down in _FUSED_NAMES]


def _part(ckpt: Checkpoint, t: TensorInfo) -> Packed | Stored:
    p = t.extra.get("mlx")
    return p if isinstance(p, Packed) else Stored(ckpt, t.name, t.dtype)


def _join(ckpt: Checkpoint, out: dict[str, TensorInfo], other: Mapping[str, tuple[int, ...]],
          key: Callable[[str], str], rules: Rules) -> None:
    """What mlx_lm split along rows, joined back (Joined) where the halves rebuild the other side's tensor, under the
    name `FIRST + SECOND` with the rule naming it as transformers does:
    - each `P.embed_q` / `P.unembed_out` pair whose shapes rebuild `P.kv_b_proj.weight`;
    - each `B.switch_mlp.gate_proj` / `up_proj` pair whose shapes rebuild a fused `B.experts.gate_up_proj` (or
      `B.input_linear.weight`), its `down_proj` then named `B.experts.down_proj` (`B.output_linear.weight`); where the
      other side keeps them [experts, in, out] (B.experts.gate_up_proj [experts, hidden, 2 x inter]: Llama 4, whose
      stacks mlx_lm names `B.experts.gate_proj`, and Qwen3-VL-MoE), each expert transposed back, the down projection
      too (Swapped), by that convention even where its shape is square."""
    for qn in [n for n in out if n.endswith(".embed_q.weight")]:
        block = qn[: -len(".embed_q.weight")]
        on, kv = block + ".unembed_out.weight", block + ".kv_b_proj.weight"
        tq, to, want = out[qn], out.get(on), tuple(other.get(key(kv), ()))
        if to is None or len(tq.shape) != 3 or len(to.shape) != 3 or len(want) != 2:
            continue
        (heads, rank, nope), (_, v, _) = tq.shape, to.shape
        if to.shape != (heads, v, rank) or want != (heads * (nope + v), rank):
            continue
        name = f"{qn} + {on}"
        out[name] = TensorInfo(name, tq.dtype, want, tq.file, None, tq.nbytes + to.nbytes, storage=f"mlx:{name}",
                               extra=_extra(Joined(_part(ckpt, tq), _part(ckpt, to), nope, v, rank, True, _MLA)))
        del out[qn], out[on]
        _rule(rules, [_JOINED_RULE])
    for gn, m in [(n, m) for n in out if (m := _STACKED_GATE.match(n))]:
        block, stack = m.group("block"), m.group("stack")
        un, dn = f"{block}.{stack}.up_proj.weight", f"{block}.{stack}.down_proj.weight"
        tg, tu = out[gn], out.get(un)
        if tu is None or len(tg.shape) != 3 or tg.shape != tu.shape:
            continue
        experts, inter, hidden = tg.shape
        fused = [tuple(other.get(key(f"{block}.{up}"), ())) for up, _ in _FUSED_NAMES]
        in_out = fused[0] == (experts, hidden, 2 * inter) and (
            hidden != 2 * inter or (ckpt.config or {}).get("model_type") in _IN_OUT)
        spelling = None if in_out else next((i for i, shape in enumerate(fused) if shape == (experts, 2 * inter, hidden)),
                                            None)
        if spelling is None and not in_out:
            continue
        name = f"{gn} + {un}"
        joined = Joined(_part(ckpt, tg), _part(ckpt, tu), inter, inter, hidden, False,
                        _FUSED_IN_OUT if in_out else _FUSED, in_out)
        out[name] = TensorInfo(name, tg.dtype, fused[0] if in_out else (experts, 2 * inter, hidden), tg.file, None,
                               tg.nbytes + tu.nbytes, storage=f"mlx:{name}", extra=_extra(joined))
        del out[gn], out[un]
        _rule(rules, _FUSED_RULES[spelling or 0])
        td = out.get(dn)
        if in_out and td is not None and len(td.shape) == 3:
            e, rows, cols = td.shape
            out[dn] = replace(td, shape=(e, cols, rows), offset=None, storage=f"mlx:{dn}",
                              extra=_extra(Swapped(_part(ckpt, td), rows, cols, _SWAPPED)))


def undone(ckpt: Checkpoint, rules: Rules) -> str:
    """What view() undid, for the report's map line."""
    kinds: set[object] = set()
    for t in ckpt:
        v = t.extra.get("mlx")
        kinds.update({v.transform, type(v.first), type(v.second)} if isinstance(v, Joined)
                     else {type(v), type(v.part)} if isinstance(v, Swapped) else {type(v)})
    done = [what for kind, what in ((Packed, "quantised weights dequantised"), (PlusOne, "norm + 1 taken off"),
                                    (Relaid, "conv1d axes as torch's"), (_MLA, "MLA's kv_b_proj joined"),
                                    (_FUSED, "fused gate and up projections joined"),
                                    (_FUSED_IN_OUT, "fused gate and up projections joined [experts, in, out]"),
                                    (Swapped, "down projections [experts, in, out]")) if kind in kinds]
    stacks = any(r in rules for spelling in _SLICE_RULES for r in spelling)
    return MAP + ": " + (", ".join(done + ["experts unstacked"] * stacks) or "nothing to undo")


def _expert(p: Packed, _: Any, rows: int, e: int) -> Packed:
    return replace(p, row0=e * rows)


def _dispatch(base: Callable[[TensorInfo, int, int], Any]) -> Callable[[TensorInfo, int, int], Any]:
    def read(info: TensorInfo, start: int, count: int) -> Any:
        source = info.extra.get("mlx")
        return source.read(start, count) if source is not None else base(info, start, count)  # type: ignore[attr-defined]
    return read


def _plain(ckpt: Checkpoint, t: TensorInfo, other: Mapping[str, tuple[int, ...]], key: Callable[[str], str],
           rules: Rules, other_mlx: bool) -> dict[str, TensorInfo]:
    """A tensor mlx stores as it is: a stack unquantised (sliced by offset), a relaid conv1d weight, a norm + 1, or
    itself."""
    expected = other.get(key(t.name))
    ends = () if other_mlx else PLUS_ONE.get(str((ckpt.config or {}).get("model_type")), ())
    if len(t.shape) == 1 and any(t.name.endswith(e) for e in ends):
        return {t.name: replace(t, offset=None, storage=f"mlx:{t.name}", extra=_extra(PlusOne(ckpt, t.name, t.dtype)))}
    if expected is not None and channels_last(t.shape, tuple(expected)) and t.shape[1] != t.shape[2]:
        r = Relaid(ckpt, t.name, t.shape[1], t.shape[2])
        return {t.name: replace(t, shape=tuple(expected), offset=None, storage=f"mlx:{t.name}", extra=_extra(r))}
    if t.offset is None or t.stride is not None:
        return {t.name: t}
    offset, size = t.offset, t.nbytes // t.shape[0] if t.shape and t.shape[0] else 0
    return _slices(t, other, key, rules, lambda i, rows, e: replace(i, offset=offset + e * size, nbytes=size))


def _slices(t: TensorInfo, other: Mapping[str, tuple[int, ...]], key: Callable[[str], str], rules: Rules,
            part: Callable[[Any, int, int], Any]) -> dict[str, TensorInfo]:
    """A `switch_mlp` stack the other side holds expert by expert, as its slices `name[E]` (`part(source, rows an
    expert, E)` each slice's reader), with the rule naming them; else the tensor whole."""
    m = _STACK.match(t.name)
    n = t.shape[0] if len(t.shape) == 3 else 0
    if m is None or not 0 < n <= MAX_EXPERTS:
        return {t.name: t}
    block, proj = m.group("block"), m.group("proj")
    names = [f"{block}.experts.{{}}.{proj}_proj.weight", f"{block}.experts.{{}}.{_MIXTRAL[proj]}.weight"]
    spelling = next((i for i, x in enumerate(names) if tuple(other.get(key(x.format(0)), ())) == t.shape[1:]), None)
    if spelling is None:
        return {t.name: t}
    _rule(rules, _SLICE_RULES[spelling])
    rows = math.prod(t.shape[1:-1])
    source = t.extra.get("mlx")
    out = {}
    for e in range(n):
        piece = part(source if source is not None else t, rows, e)
        info = piece if isinstance(piece, TensorInfo) else replace(t, extra=_extra(piece))
        out[f"{t.name}[{e}]"] = replace(info, name=f"{t.name}[{e}]", shape=t.shape[1:],
                                        nbytes=t.nbytes // n, storage=f"{info.storage or t.name}[{e}]")
    return out
