"""Keras 3 layers quantised with `model.quantize(mode)` (docs/quantized.md, "Keras 3 quantised layers"): their members,
method, bits and logical shape, recognised from the variables' dtypes and shapes, so a `.weights.h5` without its
config reads as the `.keras` archive does.

A Keras 3 weights file names a layer's variables by their index, `<layer path>/vars/<i>`, in the order of the layer's
`variable_serialization_spec[mode]` (keras 3.15 keras/src/layers/core/dense.py, einsum_dense.py, embedding.py;
`save_own_variables` skips a missing bias and, for per-channel int4, the zero point and group index):
- Dense / EinsumDense int8: `kernel` int8 (the float kernel's shape), `bias`, `kernel_scale` float;
- Dense / EinsumDense int4: `kernel` int8 [rows, ceil(columns / 2)] (two int4 values a byte along the last axis; an
  EinsumDense kernel reshaped to [reduced, the rest] first), `bias`, `kernel_scale` [columns] or, sub-channel (the
  default block of 128), [groups, columns], then `kernel_zero` int8 of the scale's shape and `g_idx` float [rows];
- Embedding int8: `embeddings` int8 [vocabulary, dim], `embeddings_scale` [vocabulary]; int4: `embeddings` int8
  [vocabulary, ceil(dim / 2)], `embeddings_scale` [vocabulary] or [vocabulary, groups], `embeddings_zero`, `g_idx`
  float [dim];
- Dense / EinsumDense float8: the float `kernel` and `bias` as they were, then `inputs_scale`, `inputs_amax_history`,
  `kernel_scale`, `kernel_amax_history`, `outputs_grad_scale`, `outputs_grad_amax_history` (float32 scalars and
  float32 [amax_history_length]): the kernel is quantised in the forward pass only, so it stays a parameter and the six
  are its quantisation state, each with its role.
The int8 / int4 kernel of a Dense or EinsumDense is one quantised weight of logical shape [rows, columns] (the float
kernel's; an EinsumDense int4 kernel's rank is not stored: its element count is); an Embedding's [vocabulary, dim].
Where the shapes cannot tell int4 from int8 (a per-channel int4 Embedding: the scale one a row either way), the modes
config.json's dtype policies name decide (formats/keras_zip.py records them), else int8 with a note.
GPTQ and AWQ modes (the uint8 `quantized_kernel` after the bias) are not recognised: their variables count as stored.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ...core import TensorInfo

_VAR = re.compile(r"^(?P<layer>(?:.*/)?vars)/(?P<i>\d+)$")
_FLOAT = ("F32", "F16", "BF16")
# float8's state after the kernel and bias, in variable_serialization_spec order, with each one's role
_FLOAT8_STATE = (("inputs_scale", "input-scale"), ("inputs_amax_history", "amax-history"),
                 ("kernel_scale", "scale"), ("kernel_amax_history", "amax-history"),
                 ("outputs_grad_scale", "scale"), ("outputs_grad_amax_history", "amax-history"))
LITERAL = "vars/"   # in the name of every Keras 3 variable (census/quant scans for it before grouping)


@dataclass(frozen=True)
class Found:
    name: str                       # the kernel's (embeddings') variable: `layers/dense/vars/0`
    shape: tuple[int, ...]
    method: str                     # keras int8, keras int4
    bits: int
    members: dict[str, TensorInfo]
    roles: dict[str, str]           # member -> role (the variables' names are indices: the role comes from the spec)


@dataclass(frozen=True)
class KerasLayers:
    weights: list[Found]
    state: dict[str, str]           # float8 layers' scales and amax histories -> role (their kernels stay parameters)
    float8: int                     # layers in float8 mode
    notes: list[str]

    @property
    def roles(self) -> dict[str, str]:
        return {**{n: r for f in self.weights for n, r in f.roles.items()}, **self.state}

    def methods(self) -> set[str]:
        return {f.method for f in self.weights} | ({"keras float8"} if self.float8 else set())


def modes(metadata: Mapping[str, str]) -> frozenset[str]:
    """The quantisation modes config.json's dtype policies name (`int8`, `int4`, `float8`...; int4's block dropped)."""
    return frozenset(m.split("/")[0] for m in metadata.get("keras.quantization", "").split(",") if m.strip())


def computes_float32(metadata: Mapping[str, str]) -> bool:
    """Whether config.json's quantised dtype policies all compute in float32 (`source_name`): a mixed-precision or
    16-bit model's Keras computes its dequantised values in its 16-bit compute dtype (its variables autocast), and a
    bare `.weights.h5` does not say which."""
    return metadata.get("keras.quantization_source") == "float32"


def layers(T: Mapping[str, TensorInfo], config_modes: frozenset[str]) -> KerasLayers:
    groups: dict[str, dict[int, TensorInfo]] = {}
    for name, t in T.items():
        m = _VAR.match(name) if LITERAL in name else None
        if m and not name.startswith("optimizer/"):
            groups.setdefault(m["layer"], {})[int(m["i"])] = t
    weights: list[Found] = []
    state: dict[str, str] = {}
    notes: list[str] = []
    float8 = 0
    for layer, by_index in groups.items():
        v = [by_index[i] for i in sorted(by_index)]
        if sorted(by_index) != list(range(len(v))):
            continue
        if v[0].dtype == "I8":
            weights += _integer_layer(layer, v, config_modes, notes)
        elif _float8(v):
            state.update({t.name: role for t, (_, role) in zip(v[-6:], _FLOAT8_STATE)})
            float8 += 1
    if float8:
        notes.append(f"{float8} Keras layer(s) in float8 mode: the kernel stays float as stored (Keras quantises it in "
                     "the forward pass), a parameter; its scales and amax histories are counted apart")
    out = KerasLayers(weights, state, float8, notes)
    for mode in sorted(config_modes - {m.partition(" ")[2] for m in out.methods()}):
        notes.append(f"config.json's dtype policies name mode {mode!r}, but no layer's variables are laid out as "
                     "keras " + mode + (" (GPTQ / AWQ layers are not read: counted as stored)"
                                        if mode in ("gptq", "awq") else ""))
    return out


def _float8(v: list[TensorInfo]) -> bool:
    if len(v) not in (7, 8) or v[0].dtype not in _FLOAT or len(v[0].shape) < 2:
        return False
    state = v[-6:]
    if any(t.dtype != "F32" for t in state):
        return False
    scalars, histories = state[0::2], state[1::2]
    return (all(t.shape == () for t in scalars) and all(len(t.shape) == 1 for t in histories)
            and len({t.shape for t in histories}) == 1 and (len(v) == 7 or v[1].dtype in _FLOAT))


def _integer_layer(layer: str, v: list[TensorInfo], config_modes: frozenset[str], notes: list[str]) -> list[Found]:
    """A layer's int8 / int4 weights: one, or a ReversibleEmbedding's two when untied (`tie_weights=False`: keras
    3.15 keras/src/layers/core/reversible_embedding.py appends `reverse_embeddings` int8 [dim, vocabulary] (int4:
    [ceil(dim / 2), vocabulary], packed along the first axis), `reverse_embeddings_scale` [vocabulary] (sub-channel
    [1, vocabulary]) and, sub-channel int4, `reverse_embeddings_zero` float32 [1, vocabulary])."""
    f = _integer(layer, v, config_modes, notes)
    if f is not None:
        return [f]
    at = next((j for j in range(2, len(v)) if v[j].dtype == "I8" and len(v[j].shape) == 2
               and v[j].shape[1] == v[0].shape[0]), None) if len(v[0].shape) == 2 else None
    first = _integer(layer, v[:at], config_modes, notes) if at is not None else None
    if first is None or at is None or len(first.shape) != 2 or len(v) - at not in (2, 3):
        return []
    k, scale, zero = v[at], v[at + 1], v[at + 2] if len(v) - at == 3 else None
    dim, vocab = first.shape[1], first.shape[0]
    packed = -(-dim // 2) if first.bits == 4 else dim
    if (k.shape != (packed, vocab) or scale.dtype not in _FLOAT or not scale.shape or scale.shape[-1] != vocab
            or (zero is not None and (zero.shape != scale.shape or zero.dtype not in _FLOAT))):
        return []
    roles = {k.name: "packed-weight" if first.bits == 4 else "quantized-weight", scale.name: "scale"}
    if zero is not None:
        roles[zero.name] = "zero-point"
    members = {t.name: t for t in (k, scale, zero) if t is not None}
    return [first, Found(k.name, (dim, vocab), first.method, first.bits, members, roles)]


def _integer(layer: str, v: list[TensorInfo], config_modes: frozenset[str], notes: list[str]) -> Found | None:
    """An int8 / int4 layer (module docstring) from its variables in order, or None when they are laid out otherwise."""
    k = v[0]
    zi = next((i for i in range(1, len(v)) if v[i].dtype == "I8"), None)
    if zi is None:
        if len(v) not in (2, 3):
            return None
        scale, zero, g_idx, bias = v[-1], None, None, v[1] if len(v) == 3 else None
    else:
        if zi < 2 or len(v) not in (zi + 1, zi + 2) or zi > 3:
            return None
        scale, zero, g_idx = v[zi - 1], v[zi], v[zi + 1] if len(v) == zi + 2 else None
        bias = v[1] if zi == 3 else None
    if scale.dtype not in _FLOAT or (bias is not None and bias.dtype not in _FLOAT):   # (EinsumDense's: any rank)
        return None
    if zero is not None and zero.shape != scale.shape:
        return None
    if g_idx is not None and (g_idx.dtype not in _FLOAT or len(g_idx.shape) != 1):
        return None
    shape: tuple[int, ...] | None = None
    bits = 8
    s = scale.shape
    if len(k.shape) == 2 and s and s[-1] != k.shape[1] and -(-s[-1] // 2) == k.shape[1] and (
            g_idx is None or g_idx.shape[0] == k.shape[0]):   # Dense / EinsumDense int4: packed columns
        shape, bits = (k.shape[0], s[-1]), 4
    elif len(k.shape) == 2 and g_idx is not None and -(-g_idx.shape[0] // 2) == k.shape[1] and s and s[0] == k.shape[0]:
        shape, bits = (k.shape[0], g_idx.shape[0]), 4           # Embedding int4, sub-channel: g_idx [dim]
    elif zero is None and g_idx is None and s and all(d == 1 or d in k.shape for d in s):
        shape = k.shape                                         # int8 (or a per-channel int4 Embedding: below)
        if len(k.shape) == 2 and s == (k.shape[0],) and k.shape[0] != k.shape[1]:   # a scale a row: an Embedding
            if "int4" in config_modes and "int8" not in config_modes:
                shape, bits = (k.shape[0], k.shape[1] * 2), 4
            elif not config_modes:
                notes.append(f"{layer}: an int8 Embedding or a per-channel int4 one (the shapes fit both, and no "
                             "config.json names the mode): read as int8")
    if shape is None:
        return None
    members = {t.name: t for t in (k, scale, zero, g_idx) if t is not None}
    roles = {k.name: "packed-weight" if bits == 4 else "quantized-weight", scale.name: "scale"}
    if zero is not None:
        roles[zero.name] = "zero-point"
    if g_idx is not None:
        roles[g_idx.name] = "group-index"
    return Found(k.name, shape, f"keras int{bits}", bits, members, roles)
