"""Quantised weights in safetensors/.bin checkpoints (docs/quantized.md): which stored tensors make up
each quantised weight, the role of each, and the weight's logical shape, the one the unquantised model
holds. Recognised per module from the tensor layout (names, dtypes, shapes); config.json's
`quantization_config` names the method and its bits, and is checked against the layout.

`logical(ckpt)` is the checkpoint as the unquantised model would store it: every quantised weight is one
tensor of its logical shape (dtype: the compute dtype), whose `extra` carries the stored bytes of all
its members; everything else is unchanged. Resolution, ties, FLOPs and memory read that view, so a GPTQ
llama resolves, ties and counts as its fp16 original does.

Headers and config only, except for four tiny value reads where the format keeps the logical shape
nowhere else: bitsandbytes' packed quant_state JSON, compressed-tensors' `weight_shape` / sparse
`shape` and HQQ's `shape` (each bounded to MAX_SHAPE_READ bytes and checked against the packed tensor's
size). optimum-quanto, HQQ and torchao layouts: census/quant/quanto_hqq_torchao.py; Apple MLX's: census/quant/mlx.py.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ...core import Checkpoint, TensorInfo, dtypes
from ...errors import CkptstatError
from ...families.framework.base import config_dtype as base_config_dtype
from ...naming import name_forms, quant_member_role
from . import fp8_experts, keras, mlx, onnx_qdq, quanto_hqq_torchao

MAX_SHAPE_READ = 4096      # bytes: a quant_state JSON is ~170, a weight_shape 16
_LAYOUT = "quant:layout"    # Checkpoint.derived keys; a logical view holds its source's layout and is its own view
_LOGICAL = "quant:logical"


@dataclass(frozen=True)
class QuantWeight:
    name: str                       # the logical parameter's name (`...q_proj.weight`; gpt-oss `...experts.down_proj`)
    shape: tuple[int, ...]          # logical shape, as the unquantised model holds it
    method: str                     # gptq, awq, bitsandbytes-nf4, fp8, mxfp4, compressed-tensors pack-quantized ...
    bits: float | None              # bits of one quantised element (4, 8...), when the layout tells
    members: tuple[str, ...]        # the stored tensors it is made of
    stored_bytes: int               # bytes of all members
    state: Mapping[str, Any] | None = field(default=None, compare=False)   # bitsandbytes' quant_state JSON, as read

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class QuantLayout:
    method: str                     # what the checkpoint uses overall ("gptq", or "a, b" when mixed)
    source: str                     # "config.json quantization_config" or "tensor layout"
    config: dict[str, Any]          # the quantization_config fields that matter (bits, group_size ...)
    roles: dict[str, str]           # stored tensor name -> role (naming.QUANT_ROLES)
    weights: dict[str, QuantWeight]  # logical name -> weight
    notes: tuple[str, ...] = field(default=())

    @property
    def member_of(self) -> dict[str, str]:
        return {m: w.name for w in self.weights.values() for m in w.members}


def layout(ckpt: Checkpoint) -> QuantLayout | None:
    """The checkpoint's quantised weights, or None when it holds none (derived once per checkpoint)."""
    return ckpt.derived(_LAYOUT, _layout)


def logical(ckpt: Checkpoint) -> Checkpoint:
    """The checkpoint with each quantised weight as one tensor of its logical shape (module docstring);
    the checkpoint itself when nothing is quantised, or when it is already a view."""
    q = layout(ckpt)
    return ckpt if q is None else ckpt.derived(_LOGICAL, lambda c: _view(c, q))


def pin_rest(ckpt: Checkpoint, view: Checkpoint, read: set[str]) -> None:
    """Give `view` (ckpt with the weights `read` replaced by their values) ckpt's layout less those weights, where the
    view's own tensors would not show the rest (Keras' variables, recognised by their index in a layer's group)."""
    q = layout(ckpt)
    if q is not None:
        gone = {m for n in read for m in q.weights[n].members}
        rest = replace(q, weights={n: w for n, w in q.weights.items() if n not in read},
                       roles={n: r for n, r in q.roles.items() if n not in gone})
        view.derived(_LAYOUT, lambda _: rest)


def roles(ckpt: Checkpoint) -> dict[str, str]:
    """Stored tensor name -> quantisation role for the tensors of `ckpt` that are pieces of a quantised
    weight (or standalone activation/KV scales); a logical view's own weights keep role parameter."""
    q = layout(ckpt)
    if q is None:
        return {}
    return {n: r for n, r in q.roles.items() if n in ckpt.tensors and "quantized" not in ckpt.tensors[n].extra}


def stored(t: TensorInfo, numel: int | None = None) -> tuple[str, int]:
    """(label, bytes) of a parameter as stored: a quantised weight of the logical view reports its
    method and the bytes of all its members; any other tensor its dtype and packed bytes (a GGUF
    Q4_K tensor's byte_size is already its blocks' bytes). numel: t.numel, when the caller has it."""
    q = t.extra.get("quantized") if t.extra else None
    if isinstance(q, QuantWeight):
        return q.method, q.stored_bytes
    return t.dtype, dtypes.get(t.dtype).nbytes(t.numel if numel is None else numel)


def bits_per_weight(stored_bytes: int, numel: int) -> float | None:
    return round(stored_bytes * 8 / numel, 4) if numel else None


# ---------------------------------------------------------------------------------------- detection
_BNB4 = re.compile(r"^(?P<m>.+)\.weight\.(absmax|quant_map|nested_absmax|nested_quant_map|quant_state\.bitsandbytes__(nf4|fp4))$")
_MXFP4 = re.compile(r"^(?P<m>.+)_(blocks|scales)$")
_QUANTO = re.compile(r"^(?P<w>.+\.weight)\.(_data|_data\._data|_scale|_shift)$")   # optimum-quanto's flattened QTensor
# Tensors beside a quantised weight in its module, by method (the writers' own lists: auto-gptq/AutoAWQ
# QuantLinear buffers; compressed-tensors' compressors' compression_param_names; bitsandbytes
# Linear8bitLt._save_to_state_dict; transformers' FP8Linear): the weight's members.
_MEMBERS = {
    "gptq": ("qweight", "qzeros", "scales", "g_idx"),
    "compressed-tensors": ("weight_packed", "weight", "weight_scale", "weight_zero_point", "weight_g_idx", "weight_shape",
                           "weight_global_scale", "input_scale", "input_zero_point", "input_global_scale"),
    "sparse": ("compressed", "bitmask", "shape", "row_offsets", "weight_scale", "weight_zero_point", "weight_g_idx",
               "input_scale", "input_zero_point"),
    "bitsandbytes-int8": ("weight", "SCB", "weight_format"),
    "fp8": ("weight", "weight_scale", "weight_scale_inv", "weight_zero_point", "input_scale", "input_scale_ub",
            "input_zero_point", "activation_scale"),
    "modelopt nvfp4": ("weight", "weight_scale", "weight_scale_2", "input_scale"),   # export_hf_checkpoint's
    # ComfyUI's quantised Linear (comfy/ops.py MixedPrecisionOps.Linear.state_dict: its format as JSON bytes beside
    # the weight and its scales; the older scaled-fp8 files' `scale_weight` / `scale_input`, which ComfyUI converts)
    "comfyui": ("weight", "weight_scale", "weight_scale_2", "input_scale", "comfy_quant", "scale_weight", "scale_input"),
}
_BITS = (2, 3, 4, 8)   # what GPTQ/AWQ kernels pack
# quantization_config.quant_method -> how the layouts it writes are labelled here (the labels' start; modelopt's FP8
# is fbgemm's and transformers' per-tensor `fp8`)
_CONFIG_METHODS: dict[str, str | tuple[str, ...]] = {
    "fbgemm_fp8": "fp8", "fp8": "fp8", "bitsandbytes": "bitsandbytes", "compressed-tensors": "compressed-tensors",
    "compressed_tensors": "compressed-tensors", "gptq": "gptq", "awq": "awq", "mxfp4": "mxfp4", "hqq": "hqq", "bitnet": "bitnet",
    "gemma": "gemma",
    "quanto": "quanto", "torchao": "torchao", "modelopt": ("modelopt", "fp8")}
_F8 = {"F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ"}
# Module-level scales with no weight of their own: FP8 KV-cache / attention scales (compressed-tensors
# kv_cache_scheme, modelopt) -> role, when the checkpoint is quantised.
_STANDALONE = re.compile(r"(^|\.)(k_scale|v_scale|q_scale|prob_scale|input_scale|output_scale|kv_scale|scaled_fp8)$")


# A literal in the name of every tensor _layout can make a member or a standalone scale: the suffixes
# _module looks for (qweight, weight_packed, compressed, SCB, weight_scale[_inv], HQQ's W_q: its other
# members, `scale`, `zero`, `shape`, `nbits`..., count only beside a W_q; torchao's `_weight_qdata`, whose
# `_weight_*` siblings count only beside it), _BNB4's, _MXFP4's, _QUANTO's (`._data`, `_scale`, `_shift`;
# quanto's input_scale / output_scale hold `_scale`), _STANDALONE's, and MLX's `scales` (beside its uint32 `weight`).
# A checkpoint whose names hold none skips the per-name scan (docs/performance.md).
_LAYOUT_LITERALS = ("qweight", "weight_packed", "compressed", "SCB", "weight_scale", "absmax", "quant_map",
                    "quant_state", "_blocks", "_scale", "W_q", "._data", "_shift", "_weight_qdata", "scales",
                    "embedding_quantized", "scale_weight", "scaled_fp")   # (no digit: the names' digit forms are scanned)


def _qconfig(ckpt: Checkpoint) -> dict[str, Any]:
    cfg = ckpt.config or {}
    q = cfg.get("quantization_config") or cfg.get("compression_config") or mlx.config(cfg) or _sidecar(ckpt.quant_sidecar)
    return q if isinstance(q, dict) else {}


def _sidecar(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A quantisation record beside config.json (formats/folders.py) as the quantization_config newer writers put into
    config.json: modelopt's hf_quant_config.json (quant_method modelopt, its quant_algo); AutoGPTQ's quantize_config.json,
    whose fields are a quantization_config's (quant_method gptq where it names none: AutoGPTQ's); None for another."""
    if not isinstance(record, Mapping):
        return None
    producer, q = record.get("producer"), record.get("quantization")
    if isinstance(producer, Mapping) and producer.get("name") == "modelopt" and isinstance(q, Mapping):
        return {"quant_method": "modelopt", "quant_algo": q.get("quant_algo"), "from": "hf_quant_config.json"}
    if _bits_of(record.get("bits")) is not None:
        return {"quant_method": "gptq", **record, "from": "quantize_config.json"}
    return None


def _source(record: str) -> str:
    """QuantLayout.source of a method the config names: config.json's quantization_config, or the record beside it."""
    return "config.json quantization_config" if record == "config.json" else record


def _bits_of(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v in _BITS else None


def _config_summary(q: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("quant_method", "bits", "w_bit", "group_size", "q_group_size", "desc_act", "sym", "zero_point", "version",
            "checkpoint_format", "load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant",
            "weight_block_size", "activation_scheme", "format", "modules_to_not_convert", "mode", "linear_class",
            "quantization_mode")
    out = {k: q[k] for k in keys if k in q}
    per_module = sum(isinstance(v, dict) and "bits" in v or v is False for v in q.values())   # MLX's module entries
    if per_module:
        out["per_module"] = per_module
    groups = q.get("config_groups")
    if isinstance(groups, dict):
        out["config_groups"] = {g: {k: (v.get("weights") or {}).get(k) for k in ("num_bits", "type", "strategy", "group_size")}
                                for g, v in groups.items() if isinstance(v, dict)}
    hqq = q.get("quant_config")     # transformers HqqConfig.to_dict: quant_config.weight_quant_params
    wq = hqq.get("weight_quant_params") if isinstance(hqq, dict) else None
    if isinstance(wq, dict):
        out.update({k: wq[k] for k in ("nbits", "group_size", "axis") if k in wq})
    sp = q.get("sparsity_config")
    if isinstance(sp, dict) and sp.get("format"):
        out["sparsity_format"] = sp["format"]
    return out


def _layout(ckpt: Checkpoint) -> QuantLayout | None:
    q = _qconfig(ckpt)
    method_cfg = str(q.get("quant_method") or "").lower() or None
    record = q.get("from") or "config.json"   # the file that names the method (a record beside config.json: _sidecar)
    T = ckpt.tensors
    modules: dict[str, dict[str, TensorInfo]] = {}
    special: dict[str, tuple[str, dict[str, TensorInfo]]] = {}
    quanto: dict[str, dict[str, TensorInfo]] = {}
    shapes = quanto_hqq_torchao.ConfigShapes(ckpt.config)   # quanto / HQQ / MLX: where the file keeps no shape
    forms = name_forms(ckpt)
    joined = "\n".join(T) if forms is None else forms   # no literal holds a digit: forms say what the names do
    scan = any(lit in joined for lit in _LAYOUT_LITERALS)   # most checkpoints: no name can be a member
    for name, t in T.items() if scan else ():
        m = _BNB4.match(name)
        if m:
            special.setdefault(m["m"] + ".weight", ("bnb4", {}))[1][name] = t
            continue
        m = _MXFP4.match(name)
        if m and all(T.get(m["m"] + k) is not None and T[m["m"] + k].dtype == "U8" for k in ("_blocks", "_scales")):
            special.setdefault(m["m"], ("mxfp4", {}))[1][name] = t
            continue
        m = _QUANTO.match(name) if ".weight._" in name else None
        if m:
            quanto.setdefault(m["w"], {})[name] = t
            continue
        mod, _, suffix = name.rpartition(".")
        modules.setdefault(mod, {})[suffix] = t
    weights: list[QuantWeight] = []
    notes: list[str] = []
    for logical_name, (kind, members) in special.items():
        if kind == "bnb4":
            if (packed := T.get(logical_name)) is None:
                continue
            members[logical_name] = packed
            weights.append(_bnb4(ckpt, logical_name, members, notes))
        else:
            weights.append(_mxfp4(logical_name, members))
    if quanto:
        weights += [_weight(f.name, f.shape, f.method, f.bits, f.members)
                    for f in quanto_hqq_torchao.quanto(quanto, T, shapes, notes)]
    mlx_q, mlx_dims = mlx.config(ckpt.config), None   # the input sizes the checkpoint shows: at its first MLX module
    for mod, s in modules.items():
        if mlx.is_mlx(s):
            mlx_dims = mlx.sizes(T) if mlx_dims is None else mlx_dims
            f = mlx.mlx(mod + "." if mod else "", s, mlx_q, shapes, mlx_dims, notes)
            weights.append(_weight(f.name, f.shape, f.method, f.bits, f.members))
            continue
        w = _module(ckpt, mod, s, q, method_cfg, shapes, notes)
        if w is not None:
            weights.append(w)
    weights += [_weight(n, m[n].shape, "fp8 block-scaled", 8, m) for n, m in fp8_experts.experts(T, modules)]
    kl = keras.layers(T, keras.modes(ckpt.metadata)) if keras.LITERAL in joined else None   # Keras 3 `vars/<i>`
    if kl is not None:
        weights += [_weight(f.name, f.shape, f.method, f.bits, f.members) for f in kl.weights]
        notes += kl.notes
    graph, graph_roles = onnx_qdq.layout(T) if ckpt.format == "onnx" else ([], {})   # ONNX QDQ: named by the graph
    weights += [_weight(f.name, f.shape, f.method, f.bits, f.members) for f in graph]
    fmt = str(q.get("checkpoint_format") or q.get("format") or "")
    if "marlin" in fmt or q.get("is_marlin_format"):
        notes.append(f"quantization_config names the {fmt or 'marlin'} layout, which ckptstat does not decode: "
                     "its tensors are counted as stored")
    if not weights and not (kl and kl.state):
        if method_cfg:
            notes.append(f"{record} names quant_method {method_cfg!r} but no tensor has a quantised layout ckptstat "
                         "knows (docs/quantized.md): counted as stored")
            return QuantLayout(method_cfg, _source(record), _config_summary(q), {}, {}, tuple(notes))
        return None
    roles: dict[str, str] = {}
    for w in weights:
        for n in w.members:
            if n == w.name:
                suffix = "weight"
            elif n.startswith(w.name + ".") or (w.method == "mxfp4" and n.startswith(w.name + "_")):
                suffix = n[len(w.name) + 1:]       # bitsandbytes `weight.absmax`; gpt-oss `gate_up_proj_blocks`
            else:
                suffix = n.rpartition(".")[2]
            roles[n] = quant_member_role(suffix, w.method)
    roles.update({**(kl.roles if kl else {}), **graph_roles})   # Keras: by the layer's spec; ONNX: by the graph
    member = {n for w in weights for n in w.members}
    for name in T if scan else ():
        if name not in member and _STANDALONE.search(name):
            roles[name] = quant_member_role(name.rpartition(".")[2], "")
    methods = sorted({w.method for w in weights} | (kl.methods() if kl else set()))
    expected = _CONFIG_METHODS.get(method_cfg or "", method_cfg or "")
    if method_cfg and not any(m.startswith(expected) for m in methods):
        notes.append(f"{record} names quant_method {method_cfg!r}; the tensor layout is {', '.join(methods)}")
    source = (_source(record) if method_cfg else "config.json quantization (mlx)"
              if mlx_q and mlx_dims is not None else "config.json dtype policies (keras)"
              if kl and keras.modes(ckpt.metadata) else "tensor layout")
    return QuantLayout(", ".join(methods), source,
                       _config_summary(q), roles, {w.name: w for w in weights}, tuple(dict.fromkeys(notes)))


def _weight(name: str, shape: tuple[int, ...], method: str, bits: float | None, members: Mapping[str, TensorInfo],
            state: Mapping[str, Any] | None = None) -> QuantWeight:
    return QuantWeight(name, tuple(int(d) for d in shape), method, bits, tuple(sorted(t.name for t in members.values())),
                       sum(t.nbytes for t in members.values()), state)


def _pick(s: Mapping[str, TensorInfo], names: tuple[str, ...]) -> dict[str, TensorInfo]:
    return {k: s[k] for k in names if k in s}


def _module(ckpt: Checkpoint, mod: str, s: dict[str, TensorInfo], q: Mapping[str, Any], method_cfg: str | None,
            shapes: quanto_hqq_torchao.ConfigShapes, notes: list[str]) -> QuantWeight | None:
    prefix = mod + "." if mod else ""
    if "qweight" in s and s["qweight"].dtype in ("I32", "U32") and len(s["qweight"].shape) == 2:
        return _gptq_awq(prefix, s, q, method_cfg, notes)
    if "weight_packed" in s:
        return _ct_packed(ckpt, prefix, s, q, notes)
    if "compressed" in s and "bitmask" in s:
        return _ct_sparse(ckpt, prefix, s, notes)
    if "W_q" in s:
        f = quanto_hqq_torchao.hqq(prefix, s, lambda n: _shape_values(ckpt, n), shapes, notes)
        return _weight(f.name, f.shape, f.method, f.bits, f.members)
    if "_weight_qdata" in s:
        t = quanto_hqq_torchao.torchao(prefix, s, notes)
        return None if t is None else _weight(t.name, t.shape, t.method, t.bits, t.members)
    if method_cfg == "gemma":
        return _gemma(prefix, s, q)
    w = s.get("weight")
    if w is None:
        return None
    scale = s.get("weight_scale")
    if method_cfg == "bitnet" and scale is not None and scale.numel == 1 and len(w.shape) == 2:
        # transformers' BitLinear (integrations/bitnet.py pack_weights): four ternary rows a uint8 row, the rows of
        # each quarter of the weight in one bit pair; AutoBitLinear's offline weights unpacked ({-1, 0, 1} as floats)
        packed = w.dtype == "U8"
        return _weight(prefix + "weight", (w.shape[0] * 4 if packed else w.shape[0], w.shape[1]),
                       "bitnet" if packed else "bitnet unpacked", 2 if packed else None, _pick(s, ("weight", "weight_scale")))
    comfy = "comfy_quant" in s or "scale_weight" in s   # ComfyUI's own layout (its format recorded beside)
    if (w.dtype == "U8" and "weight_scale_2" in s and scale is not None and scale.dtype == "F8_E4M3"
            and len(w.shape) == 2):   # NVIDIA modelopt NVFP4 (and ComfyUI's): two E2M1 codes a byte, an E4M3 scale a 16 inputs
        return _weight(prefix + "weight", (w.shape[0], w.shape[1] * 2), "comfyui nvfp4" if comfy else "modelopt nvfp4",
                       4, _pick(s, _MEMBERS["comfyui" if comfy else "modelopt nvfp4"]))
    if "SCB" in s and w.dtype == "I8":   # bitsandbytes Linear8bitLt: int8 weight, per-row absmax SCB
        return _weight(prefix + "weight", w.shape, "bitsandbytes-int8", 8, _pick(s, _MEMBERS["bitsandbytes-int8"]))
    if w.dtype in _F8 and comfy:   # ComfyUI's FP8: a per-tensor scale (`weight_scale`; older files: `scale_weight`)
        return _weight(prefix + "weight", w.shape, "comfyui fp8" if "comfy_quant" in s else "comfyui scaled fp8", 8,
                       _pick(s, _MEMBERS["comfyui"]))
    if w.dtype in _F8 | {"I8"} and ("weight_scale" in s or "weight_scale_inv" in s):
        # FP8 (transformers finegrained_fp8 weight_scale_inv blocks; fbgemm_fp8 / compressed-tensors float-quantized
        # weight_scale) and int8 (compressed-tensors int-quantized): one stored element per logical element.
        label = "fp8" if w.dtype in _F8 else "int8"
        if "weight_scale_inv" in s:
            label += " block-scaled"
        if method_cfg == "compressed-tensors":   # (mxfp8-quantized: float8 codes, an E8M0 byte a group of 32)
            mx = w.dtype in _F8 and scale is not None and scale.dtype == "U8"
            label = f"compressed-tensors {'mxfp8' if mx else 'float' if w.dtype in _F8 else 'int'}-quantized"
        return _weight(prefix + "weight", w.shape, label, 8, _pick(s, _MEMBERS["fp8"]))
    return None


def _gemma(prefix: str, s: dict[str, TensorInfo], q: Mapping[str, Any]) -> QuantWeight | None:
    """transformers' Gemma quantisation (integrations/gemma_quant.py, quant_method gemma): QuantizedLinear's `weight`
    int8 [out, in], or two (int4) or four (int2) values a uint8 [out, ceil(in x bits / 8)], its `weight_scale` [out, 1]
    and SRQ activation scales; QuantizedEmbedding's `embedding_quantized` and `embedding_scale` (the logical
    `weight`). The bits of a packed module: the first `module_quant_configs` pattern its name matches (re.search, as
    replace_with_quant_layers does), else `num_bits` (default 4). A width that is not a whole number of bytes cannot
    be told from the shapes: the packed width is counted whole."""
    codes = s.get("embedding_quantized") if "embedding_scale" in s else s.get("weight") if "weight_scale" in s else None
    if codes is None or len(codes.shape) != 2 or codes.dtype not in ("U8", "I8"):
        return None
    if codes.dtype == "I8":
        bits = 8
    else:
        bits = _bits_of(q.get("num_bits")) or 4
        patterns = q.get("module_quant_configs")
        for pattern, override in (patterns.items() if isinstance(patterns, dict) else ()):
            try:
                found = re.search(pattern, prefix[:-1]) is not None
            except (re.error, TypeError):
                continue
            if found:
                bits = _bits_of(override.get("num_bits") if isinstance(override, dict) else None) or bits
                break
    members = _pick(s, ("embedding_quantized", "embedding_scale") if "embedding_scale" in s else
                    ("weight", "weight_scale", "input_activation_scale", "output_activation_scale"))
    rows, width = codes.shape
    return _weight(prefix + "weight", (rows, width * 8 // bits), f"gemma int{bits}", bits, members)


def _gptq_awq(prefix: str, s: dict[str, TensorInfo], q: Mapping[str, Any], method_cfg: str | None,
              notes: list[str]) -> QuantWeight | None:
    """GPTQ (auto-gptq / gptqmodel QuantLinear): qweight int32 [in*bits/32, out], qzeros [groups, out*bits/32],
    scales [groups, out], g_idx [in]. AWQ GEMM (AutoAWQ WQLinear_GEMM): qweight [in, out*bits/32], qzeros
    [in/group, out*bits/32], scales [in/group, out]; AWQ GEMV: qweight [out, in*bits/32]."""
    qw, sc = s["qweight"], s.get("scales")
    members = _pick(s, _MEMBERS["gptq"])
    r0, r1 = qw.shape
    cfg_bits = _bits_of(q.get("bits")) or _bits_of(q.get("w_bit"))
    awq_cfg = method_cfg == "awq"
    version = str(q.get("version") or "").lower()
    bits: float
    if awq_cfg and version == "gemv":
        bits = cfg_bits or 4
        return _weight(prefix + "weight", (r0, r1 * 32 // int(bits)), "awq", bits, members)
    if sc is not None and len(sc.shape) == 2 and r1 > 0:
        out = sc.shape[1]
        if r1 == out:     # GPTQ: output features along qweight's columns
            qz = s.get("qzeros")
            bits = (qz.shape[1] * 32 / out if qz is not None and len(qz.shape) == 2 and out else 0)
            if bits not in _BITS:
                bits = cfg_bits or 4
            g = s.get("g_idx")
            n_in = g.shape[0] if g is not None and len(g.shape) == 1 else r0 * 32 // int(bits)
            if (cfg_bits and bits != cfg_bits) or awq_cfg:
                notes.append(f"config.json says {method_cfg} {cfg_bits}-bit; {prefix}qweight/qzeros are laid out as "
                             f"{bits:g}-bit GPTQ: the layout is used")
            return _weight(prefix + "weight", (out, n_in), "gptq", bits, members)
        if out > r1 and out % r1 == 0 and 32 * r1 / out in _BITS:   # AWQ GEMM: 32/bits outputs per int32 column
            bits = 32 * r1 / out
            if cfg_bits and bits != cfg_bits:
                notes.append(f"config bits {cfg_bits} but {prefix}qweight packs {bits:g}-bit values: the layout is used")
            return _weight(prefix + "weight", (out, r0), "awq", bits, members)
    bits = cfg_bits or 4
    notes.append(f"{prefix}qweight: no scales to tell GPTQ from AWQ; read as GPTQ, {bits}-bit")
    return _weight(prefix + "weight", (r1, r0 * 32 // int(bits)), "gptq", bits, members)


def _read_small(ckpt: Checkpoint, name: str) -> Any:
    """The values of a tiny tensor (<= MAX_SHAPE_READ bytes), or None when it is bigger or unreadable."""
    t = ckpt.tensors[name]
    if t.nbytes > MAX_SHAPE_READ or t.byte_size > MAX_SHAPE_READ:
        return None
    try:
        return ckpt.read(name)
    except (CkptstatError, ValueError, OSError):
        return None


def _shape_values(ckpt: Checkpoint, name: str | None) -> tuple[int, ...] | None:
    if name is None or name not in ckpt.tensors:
        return None
    v = _read_small(ckpt, name)
    if v is None or v.dtype.kind not in "iu":
        return None
    dims = tuple(int(x) for x in v.reshape(-1))
    return dims or None   # checked against the packed tensor by the caller


def _ct_packed(ckpt: Checkpoint, prefix: str, s: dict[str, TensorInfo], q: Mapping[str, Any],
               notes: list[str]) -> QuantWeight:
    """compressed-tensors pack-quantized (int4/int8 packed into int32 along the input dimension,
    weight_shape holds [out, in]); nvfp4/mxfp4-pack-quantized (two fp4 values per uint8); mxfp6-pack-quantized
    (four E2M3 values in three bytes, an E8M0 scale a group of 32: which of the two mx formats, from the packed bytes a
    scale)."""
    p = s["weight_packed"]
    members = _pick(s, _MEMBERS["compressed-tensors"])
    if p.dtype == "U8":      # fp4 two values a byte, fp6 four in three bytes
        sc = s.get("weight_scale")
        if "weight_global_scale" in s:
            fp = "nvfp4"
        elif sc is not None and p.shape and sc.shape:   # 32 inputs a scale: 24 bytes at 6 bits, 16 at 4
            fp = "mxfp6" if p.shape[-1] == 24 * sc.shape[-1] else "mxfp4"
        else:
            fp = "mxfp6" if _ct_bits(q, 4) == 6 and p.shape and p.shape[-1] % 3 == 0 else "mxfp4"
        per, most = (4 / 3, 2) if fp == "mxfp6" else (2, 2)
        method = f"compressed-tensors {fp}-pack-quantized"
    else:                    # int values packed into int32 (pack_to_int32 along the last dimension)
        per, most = 32 // _ct_bits(q, 4), 32
        method = "compressed-tensors pack-quantized"
    guess = (*p.shape[:-1], round(p.shape[-1] * per)) if p.shape else (round(per),)
    shape = _shape_values(ckpt, prefix + "weight_shape") if "weight_shape" in s else None
    if shape is not None and not (len(shape) == len(p.shape) and shape[:-1] == p.shape[:-1]
                                  and p.shape[-1] <= shape[-1] <= p.shape[-1] * most):
        notes.append(f"{prefix}weight_shape {list(shape)} does not fit {prefix}weight_packed {list(p.shape)}: "
                     "shape from the packing")
        shape = None
    shape = shape or guess
    bits = p.dt.bits * p.shape[-1] / shape[-1] if p.shape and shape and shape[-1] else None
    return _weight(prefix + "weight", shape, method, round(bits, 3) if bits else None, members)


def _ct_bits(q: Mapping[str, Any], default: int) -> int:
    groups = q.get("config_groups")
    bits = set()
    if isinstance(groups, dict):
        for g in groups.values():
            w = g.get("weights") if isinstance(g, dict) else None
            if isinstance(w, dict) and _bits_of(w.get("num_bits")):
                bits.add(w["num_bits"])
    return bits.pop() if len(bits) == 1 else default


def _ct_sparse(ckpt: Checkpoint, prefix: str, s: dict[str, TensorInfo], notes: list[str]) -> QuantWeight:
    """compressed-tensors sparse-bitmask (values of the non-zeros, a bitmask [out, ceil(in/8)], row offsets)
    and sparse-24-bitmask (the two kept values of every four [out, in/2], bitmask); `shape` holds [out, in]."""
    c, bm = s["compressed"], s["bitmask"]
    members = _pick(s, _MEMBERS["sparse"])
    method = "compressed-tensors sparse-bitmask" if "row_offsets" in s else "compressed-tensors sparse-24-bitmask"
    guess = (bm.shape[0], bm.shape[1] * 8) if len(bm.shape) == 2 else (bm.numel * 8,)
    shape = _shape_values(ckpt, prefix + "shape") if "shape" in s else None
    if shape is not None and (len(shape) != 2 or len(bm.shape) != 2 or shape[0] != bm.shape[0] or shape[1] < 0
                              or -(-shape[1] // 8) != bm.shape[1]):
        notes.append(f"{prefix}shape {list(shape)} does not fit {prefix}bitmask {list(bm.shape)}: shape from the bitmask")
        shape = None
    if shape is None and "row_offsets" not in s and len(c.shape) == 2:
        guess = (c.shape[0], 2 * c.shape[1])      # 2:4: two of every four values kept
    return _weight(prefix + "weight", shape or guess, method, c.dt.bits, members)


def _bnb4(ckpt: Checkpoint, name: str, members: dict[str, TensorInfo], notes: list[str]) -> QuantWeight:
    """bitsandbytes Params4bit (QuantState.as_dict(packed=True)): `weight` uint8 [ceil(n/2), 1] holds two 4-bit
    codes per byte; absmax per block (uint8 when nested, with nested_absmax/nested_quant_map), quant_map the
    16-value code book, and quant_state.bitsandbytes__<nf4|fp4> a JSON whose `shape` is the logical shape."""
    w = members[name]
    state = next((n for n in members if ".quant_state.bitsandbytes__" in n), None)
    qtype = state.rpartition("__")[2] if state else "nf4"
    packed = w.numel
    shape: tuple[int, ...] | None = None
    raw = _read_small(ckpt, state) if state else None
    d = None
    if raw is not None:
        try:
            d = json.loads(bytes(raw.astype("uint8").tobytes()).decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            d = None
        d = d if isinstance(d, dict) else None
        dims = d.get("shape") if d is not None else None
        if isinstance(dims, list) and dims and all(isinstance(x, int) and not isinstance(x, bool) for x in dims):
            shape = tuple(dims)
    if shape is not None and (min(shape) < 0 or -(-math.prod(shape) // 2) != packed):
        notes.append(f"{state}: shape {list(shape)} does not fit {packed:,} packed bytes; counted from the packing")
        shape = None
    if shape is None:
        shape = (packed * 2,)
        notes.append(f"{name}: no readable bitsandbytes quant_state; logical size from the packing (2 per byte), shape unknown")
    return _weight(name, shape, f"bitsandbytes-{qtype}", 4, members, d)


def _mxfp4(name: str, members: dict[str, TensorInfo]) -> QuantWeight:
    """gpt-oss MXFP4 (transformers integrations/mxfp4.py convert_moe_packed_tensors): `<p>_blocks` uint8
    [*prefix, R, G, 16] (32 fp4 values per block of 16 bytes), `<p>_scales` uint8 [*prefix, R, G] (E8M0 exponents);
    dequantised to [*prefix, R, G*32], then transposed (1, 2): experts' gate_up_proj [E, hidden, 2*inter]."""
    b = members[name + "_blocks"]
    if len(b.shape) < 3:
        return _weight(name, (b.numel * 2,), "mxfp4", 4, members)
    *pre, r, g, nb = b.shape
    shape = (*pre, r, g * nb * 2)
    if len(shape) >= 3:
        shape = (shape[0], shape[2], shape[1], *shape[3:])
    return _weight(name, shape, "mxfp4", 4, members)


# ------------------------------------------------------------------------------------------- the view
CONFIG_DTYPES = {"float16": "F16", "bfloat16": "BF16", "float32": "F32"}   # a torch dtype's name -> ckptstat's


def config_dtype(ckpt: Checkpoint) -> str | None:
    """config.json's model dtype (transformers 5's `dtype`, else 4's `torch_dtype`) as F16, BF16 or F32, or None."""
    d = base_config_dtype(ckpt.config or {})
    return CONFIG_DTYPES.get(d) if d else None


def _compute_dtype(ckpt: Checkpoint, w: QuantWeight) -> str:
    d = config_dtype(ckpt)
    if d is not None:
        return d
    for n in w.members:   # the scales' float type is the compute dtype of GPTQ/AWQ/FP8
        dt = ckpt.tensors[n].dtype
        if dt in ("F16", "BF16", "F32") and ckpt.tensors[n].numel > 1:
            return dt
    return "F16"


def collapsed(ckpt: Checkpoint, weights: Mapping[str, QuantWeight],
              tensor: Callable[[QuantWeight], TensorInfo]) -> dict[str, TensorInfo]:
    """The checkpoint's tensors in order, the members of each of `weights` replaced, at its first member's place, by
    `tensor(weight)`: one tensor of its logical shape."""
    member_of = {m: w.name for w in weights.values() for m in w.members}
    out: dict[str, TensorInfo] = {}
    for name, t in ckpt.tensors.items():
        logical_name = member_of.get(name)
        if logical_name is None:
            out[name] = t
        elif logical_name not in out:
            out[logical_name] = tensor(weights[logical_name])
    return out


def _view(ckpt: Checkpoint, q: QuantLayout) -> Checkpoint:
    def tensor(w: QuantWeight) -> TensorInfo:
        first = ckpt.tensors[w.members[0]]
        layout_ = {"layout": first.extra["layout"]} if first.name == w.name and "layout" in first.extra else {}
        return TensorInfo(w.name, _compute_dtype(ckpt, w), w.shape, first.file, None, w.stored_bytes,
                          storage=f"quantized:{w.name}", extra={"quantized": w, **layout_})

    view = replace(ckpt, tensors=collapsed(ckpt, q.weights, tensor))
    view.derived(_LAYOUT, lambda _: q)          # the source's quantised weights (roles: the view's keep "parameter")
    view.derived(_LOGICAL, lambda v: v)         # already logical
    return view
