"""ONNX QDQ weights (docs/onnx.md): a tensor that a DequantizeLinear node turns into a float weight, with the node's
scale and zero point, is one quantised weight of the input's shape (y = (x - zero_point) x scale, element by element:
the ONNX operator's definition), whatever the scale's granularity: one value (per tensor), one per slice along
`axis` (per axis) or one per block of `block_size` along it (blocked, opset 21). formats/onnx_model.py marks the
members from the graph; the logical weight is named as onnxruntime.quantization's weight was before it appended
`_quantized` (quant_utils TENSOR_NAME_QUANT_SUFFIX), else by the node's output."""
from __future__ import annotations

from collections.abc import Mapping

from ...core import TensorInfo, dtypes
from .keras import Found

QUANTIZED_SUFFIX = "_quantized"


def layout(T: Mapping[str, TensorInfo]) -> tuple[list[Found], dict[str, str]]:
    """The quantised weights, and the role of every tensor a (De)QuantizeLinear node names (activations' scales and zero
    points: input-scale)."""
    groups: dict[str, dict[str, TensorInfo]] = {}
    roles: dict[str, str] = {}
    kinds: dict[str, str] = {}   # weight -> onnx qdq / onnx qoperator
    for t in T.values():
        dq = t.extra.get("dequantized") if t.extra else None
        if isinstance(dq, tuple):
            groups.setdefault(dq[0], {})[dq[1]] = t
            roles[t.name] = dq[1]
            kinds[dq[0]] = str(dq[2])
    found = []
    for output, by_role in groups.items():
        x, scale = by_role.get("quantized-weight"), by_role.get("scale")
        if x is None:
            continue
        base = x.name[:-len(QUANTIZED_SUFFIX)] if x.name.endswith(QUANTIZED_SUFFIX) else ""
        name = base if base and base not in T else output
        s = T.get(base + "_scale")   # MatMulInteger / ConvInteger: the scale a Mul applies after, by onnxruntime's name
        if scale is None and base and s is not None and "dequantized" not in s.extra:
            by_role["scale"] = scale = s
            roles[s.name] = "scale"
        members = {t.name: t for t in by_role.values()}
        if name in T and name not in members:
            for t in members.values():
                roles.pop(t.name)
            continue
        granularity = ("" if scale is None else " per-tensor" if scale.numel == 1 else
                       " blocked" if len(scale.shape) == len(x.shape) and (len(x.shape) > 1 or scale.numel != x.numel)
                       else " per-axis")
        method = f"{kinds[output]} {x.dtype}{granularity}"   # onnx qdq I8 per-axis, onnx qoperator I8 ...
        found.append(Found(name, x.shape, method, dtypes.get(x.dtype).bits, members, {t.name: r for r, t in by_role.items()}))
    return found, roles
