"""A checkpoint's quantised weights read as their values, as the library that wrote them dequantises them: what `stats`
reads (docs/quantized.md "Statistics of quantised weights").

`view(ckpt)` is the checkpoint with each quantised weight ckptstat dequantises as one tensor of its logical shape in
place of its stored pieces, its values those its library's dequantiser returns, bit for bit, in its dtype: Apple
MLX's (census/quant/mlx.py; modes affine, mxfp4, nvfp4 and mxfp8, a module without a `global_scale`) as mx.dequantize
returns them (the scales' dtype in mode affine, bfloat16 in the others), and the gpt-oss release's MXFP4 experts as
transformers' convert_moe_packed_tensors does (bfloat16); conversion_mlx.Packed decodes both. Every other tensor is
unchanged, the pieces of any other method's quantised weights among them (stats leaves them out by role:
packed-weight, scale, zero-point)."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from ..census.quant import QuantWeight, layout, logical
from ..core import Checkpoint, TensorInfo
from .conversion_mlx import Packed, as_packed

RULE = ("a quantised weight is read as one tensor of its logical shape, its values those the library that wrote it "
        "dequantises it to, in that library's dtype, its bytes its stored pieces': Apple MLX's (modes affine, mxfp4, "
        "nvfp4, mxfp8) as mx.dequantize returns them (in the scales' dtype in mode affine: scale x code rounded, then "
        "+ bias rounded; bfloat16 in the other modes), the gpt-oss release's MXFP4 experts (_blocks, _scales) as "
        "transformers' convert_moe_packed_tensors does (bfloat16); the pieces of other methods' quantised weights "
        "(packed codes, scales, zero points) are left out by role")
_VIEW = "dequantized:view"


@dataclass(frozen=True)
class Dequantized:
    """A quantised weight as its values: `packed` decodes them."""
    packed: Packed
    method: str   # the census's method label ("mlx affine", "mlx mxfp4"...)

    def pieces(self, values: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        """The weight as stored, about `values` at a time (whole rows, at least one): each read's codes (groups,
        group) uint8 and its groups' scales and biases (Packed.pieces)."""
        p = self.packed
        step = max(1, values // p.cols)
        for r0 in range(0, p.rows, step):
            yield p.pieces(r0, min(r0 + step, p.rows))

    def patterns(self, codes: np.ndarray, scales: np.ndarray, biases: np.ndarray | None) -> np.ndarray:
        """The 16-bit patterns (uint16) of the values mx.dequantize gives codes under scales and biases (broadcast
        together), in its dtype (Packed.patterns)."""
        return self.packed.patterns(codes, scales, biases)


def _gpt_oss(ckpt: Checkpoint, w: QuantWeight) -> Packed | None:
    """The gpt-oss release's MXFP4 experts (census/quant `_mxfp4`): `<p>_blocks` uint8 [..., G, 16], two E2M1 codes a
    byte, low nibble first, and `<p>_scales` uint8 [..., G], each 32 values' E8M0 exponent, read as
    convert_moe_packed_tensors dequantises them (in bfloat16) but in the stored order (rows of G x 32 values, not
    transposed: the statistics are the same); None where the pieces are not that."""
    blocks, scales = ckpt.tensors.get(w.name + "_blocks"), ckpt.tensors.get(w.name + "_scales")
    if (blocks is None or scales is None or blocks.dtype != "U8" or scales.dtype != "U8" or len(blocks.shape) < 2
            or blocks.shape[-1] != 16 or scales.shape != blocks.shape[:-1]):
        return None
    return Packed(ckpt, blocks.name, scales.name, None, "mxfp4", 4, 32, blocks.shape[-2] * 32, 0, "BF16")


def view(ckpt: Checkpoint) -> Checkpoint:
    """The checkpoint with its dequantisable weights as their values (the module docstring); itself when it has
    none. A view is its own view."""
    return ckpt.derived(_VIEW, _view)


def _view(ckpt: Checkpoint) -> Checkpoint:
    q = layout(ckpt)
    if q is None:
        return ckpt
    shown = logical(ckpt).tensors
    readable = {w.name: Dequantized(p, w.method) for w in q.weights.values()
                if (p := as_packed(ckpt, w.members, w.method, w.bits, w.shape, shown[w.name].dtype)
                    if w.method.startswith("mlx ") else _gpt_oss(ckpt, w) if w.method == "mxfp4" else None) is not None}
    if not readable:
        return ckpt
    member_of = {m: name for name in readable for m in q.weights[name].members}
    out: dict[str, TensorInfo] = {}
    for name, t in ckpt.tensors.items():
        logical_name = member_of.get(name)
        if logical_name is None:
            out[name] = t
        elif logical_name not in out:
            d, w = readable[logical_name], q.weights[logical_name]
            codes = ckpt.tensors[d.packed.codes]
            out[logical_name] = TensorInfo(logical_name, d.packed.out_dtype, w.shape, codes.file, None, w.stored_bytes,
                                           storage=f"dequantized:{logical_name}",
                                           extra={"dequantized": d, "at": codes.offset or 0})
    v = replace(ckpt, tensors=out)
    v.derived(_VIEW, lambda x: x)
    return v
