"""A checkpoint's quantised weights read as their values, as the library that wrote them dequantises them: what `stats`
reads (docs/quantized.md "Statistics of quantised weights").

`view(ckpt)` is the checkpoint with each quantised weight ckptstat dequantises as one tensor of its logical shape in
place of its stored pieces, its values those its library's dequantiser returns, bit for bit, in its dtype:
- Apple MLX's (census/quant/mlx.py; modes affine, mxfp4, nvfp4 and mxfp8, a module without a `global_scale`) as
  mx.dequantize returns them (the scales' dtype in mode affine, bfloat16 in the others), and the gpt-oss release's
  MXFP4 experts as transformers' convert_moe_packed_tensors does (bfloat16): conversion_mlx.Packed decodes both;
- compressed-tensors' pack-quantized, int-quantized and float-quantized weights with 16-bit scales per group, row,
  tensor or block, as its compressors' decompress returns them (the scales' dtype), its nvfp4-, mxfp4- and
  mxfp6-pack-quantized and mxfp8-quantized ones likewise (bfloat16), and transformers' block-scaled FP8
  (DeepSeek-V3's `weight_scale_inv`) as its Fp8Dequantize does (in the model's dtype): Scaled;
- NVIDIA modelopt's NVFP4 and FP8 weights as its NVFP4QTensor and FP8QTensor dequantize them (in the model's
  dtype): Scaled;
- bitsandbytes' 4-bit weights (nf4, fp4, nested or not) as its dequantize_4bit returns them: Codebook; its LLM.int8
  ones as transformers' dequantize returns them in the model's dtype: Scaled;
- optimum-quanto's qint8 and qfloat8 weights and torchao's float8 ones as their dequantize returns them: Scaled;
- GPTQ (formats gptq and gptq_v2; 2, 3, 4 or 8 bits) and AWQ GEMM weights (2, 4, 8 bits) as gptqmodel, which
  transformers 5 loads them with, dequantises them (in the scales' dtype): InputGrouped (analysis/dequantized_gptq.py).
- Keras 3's int8 / int4 Dense, EinsumDense (int4) and Embedding kernels as Keras dequantises them, in float32:
  KerasValues (analysis/dequantized_keras.py), read through the view's readers by the statistics too.
Every other tensor is unchanged, the pieces of any other method's quantised weights among them (stats leaves them out
by role: packed-weight, scale, zero-point). Scaled and Codebook live in analysis/dequantized_codes.py; this module
picks each weight's decoder from its stored pieces."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from ..census.quant import CONFIG_DTYPES, QuantWeight, collapsed, config_dtype, fp8_experts, layout, logical, pin_rest
from ..core import Checkpoint, TensorInfo
from ..core.dtypes import decode
from ..core.tensor import Reader, read_flat_file
from .conversion_mlx import Packed, as_packed
from .dequantized_codes import Codebook, Scaled
from .dequantized_gptq import InputGrouped, awq, gptq
from .dequantized_keras import RULE as KERAS_RULE
from .dequantized_keras import KerasValues, keras_values

RULE = ("a quantised weight is read as one tensor of its logical shape, its values those the library that wrote it "
        "dequantises it to, in that library's dtype, its bytes its stored pieces': Apple MLX's (modes affine, mxfp4, "
        "nvfp4, mxfp8) as mx.dequantize returns them (in the scales' dtype in mode affine: scale x code rounded, then "
        "+ bias rounded; bfloat16 in the other modes), the gpt-oss release's MXFP4 experts (_blocks, _scales) as "
        "transformers' convert_moe_packed_tensors does (bfloat16), compressed-tensors' pack-quantized, int-quantized "
        "and float-quantized ones (16-bit scales per group, row, tensor or block) as its decompress does ((code - zero point) "
        "x scale, rounded once in the scales' dtype), its nvfp4-, mxfp4- and mxfp6-pack-quantized and mxfp8-quantized "
        "ones as its decompress does (bfloat16: E2M1 code x the group's E4M3 scale / the global scale in float32, then "
        "rounded; E2M1, E2M3 or E4M3 code x E8M0 scale, rounded once), NVIDIA modelopt's NVFP4 ones as its "
        "NVFP4QTensor.dequantize does (code x (scale x weight_scale_2 "
        "in float32) in float32, then the model's dtype) and FP8 ones as its FP8QTensor.dequantize does (code x the scale "
        "cast to the model's dtype, rounded to it), transformers' block-scaled FP8 (weight_scale_inv) as its "
        "Fp8Dequantize does (code x scale in float32, then the model's dtype), bitsandbytes' 4-bit ones as its "
        "dequantize_4bit does (code value x absmax in float32, then the weight's dtype), its LLM.int8 ones as "
        "transformers' dequantize(dtype=the model's) does (code x SCB, then x 1/127, each in float32, then the model's "
        "dtype), optimum-quanto's qint8 and "
        "qfloat8 as its dequantize does (code x scale, rounded once), torchao's float8 as its dequantize does (code x "
        "scale in float32, then the model's dtype), GPTQ's (2, 3, 4, 8 bits) and AWQ GEMM's (2, 4, 8) as gptqmodel's "
        "dequantize_weight and dequantize_gemm do (scale x (code - zero point), rounded once in the scales' dtype; "
        "GPTQ v1's zero points as gptqmodel reads them, one added to each stored word, at 3 bits to each code); the "
        "pieces of other quantised weights (AWQ GEMV, HQQ...) are left out by role; " + KERAS_RULE)
_VIEW = "dequantized:view"


@dataclass(frozen=True)
class Dequantized:
    """A quantised weight as its values: `decoder` (Packed, Scaled, Codebook, InputGrouped) decodes them. `read`
    gives its elements in its logical shape's C order (diff): its stored order, or a stored transpose (GPTQ's and
    AWQ's [in, out]; gpt-oss's experts, which transformers transposes after dequantising: `transposed`) read a block
    of logical rows at a time. The statistics read it as stored (`pieces`): they do not depend on the order."""
    decoder: Packed | Scaled | Codebook | InputGrouped
    method: str   # the census's method label ("mlx affine", "mlx mxfp4"...)
    transposed: tuple[int, int, int] | None = None   # gpt-oss's experts: [E, in, out] stored [E, out, in]

    def read(self, start: int, count: int) -> np.ndarray:
        """Elements [start, start + count) of the values, C order, decoded as a stored tensor of the dtype is (F16:
        float16; BF16: float32): every value decoded (a reader's read, not the statistics' pairs)."""
        d = self.decoder
        if isinstance(d, InputGrouped):
            return decode(d.logical_patterns(start, count), d.out_dtype, count)
        if self.transposed is not None:
            assert isinstance(d, Packed)
            return decode(_transposed_patterns(d, self.transposed, start, count), d.out_dtype, count)
        r0, r1 = start // d.cols, -(-(start + count) // d.cols)
        q, s, z = d.pieces(r0, r1, blocks=False) if isinstance(d, Scaled) else d.pieces(r0, r1)
        bits = d.patterns(q, s[:, None], None if z is None else z[:, None]).reshape(-1)
        lo = start - r0 * d.cols
        return decode(bits[lo: lo + count], d.out_dtype, count)

    @property
    def bits(self) -> int:
        return self.decoder.bits

    @property
    def out_dtype(self) -> str:
        return self.decoder.out_dtype

    def pieces(self, values: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        """The weight as stored, about `values` at a time (whole rows, at least one): each read's codes (groups,
        group) uint8 and its groups' scales and biases or zero points."""
        d = self.decoder
        if isinstance(d, InputGrouped):   # (its own reads: a group's codes are columns of the stored words)
            yield from d.reads(values)
            return
        # block-scaled: whole rows of blocks, a group a block (a few pairs a block), unless a row of blocks is many
        # reads' worth: then rows, each with its block's scales
        unit = d.block_rows if d.block_rows * d.cols <= 4 * values else 1
        step, rows = max(1, values // (d.cols * unit)) * unit, d.rows
        for r0 in range(0, rows, step):
            yield d.pieces(r0, min(r0 + step, rows))

    def patterns(self, codes: np.ndarray, scales: np.ndarray, biases: np.ndarray | None) -> np.ndarray:
        """The 16-bit patterns (uint16) of the values the weight's library gives codes under scales and biases
        (broadcast together), in its dtype."""
        return self.decoder.patterns(codes, scales, biases)


def _transposed_patterns(d: Packed, shape: tuple[int, int, int], start: int, count: int) -> np.ndarray:
    """The 16-bit patterns of elements [start, start + count) of gpt-oss's experts in their logical [E, in, out]
    C order (convert_moe_packed_tensors' transpose of the stored [E, out, in]): for each expert they fall in, the
    stored columns of their logical rows over all its stored rows, a block of rows at a time."""
    experts, cols, rows = shape
    per_expert, out = cols * rows, []
    step = max(1, (1 << 20) // cols)
    at, end = start, start + count
    while at < end:
        e, first = divmod(at, per_expert)
        stop = min(end, (e + 1) * per_expert)
        i0, i1 = first // rows, -(-(stop - e * per_expert) // rows)   # the logical rows: stored columns [i0, i1)
        block = np.empty((i1 - i0, rows), dtype=np.uint16)
        for r0 in range(0, rows, step):
            r1 = min(r0 + step, rows)
            q, s, _ = d.pieces(e * rows + r0, e * rows + r1)
            q = q.reshape(r1 - r0, cols)[:, i0:i1]
            s = s.reshape(r1 - r0, cols // d.group)[:, np.arange(i0, i1) // d.group]
            block[:, r0:r1] = d.patterns(q, s, None).T
        lo = first - i0 * rows
        out.append(block.reshape(-1)[lo: lo + stop - at])
        at = stop
    return np.concatenate(out)


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


def _sixteen(dtype: str | None) -> str | None:
    """F16 or BF16 (the dtypes dequantised values are counted in: a 16-bit histogram), else None."""
    return dtype if dtype in ("F16", "BF16") else None


def _model_dtype(ckpt: Checkpoint) -> str | None:
    """config.json's model dtype (census.quant.config_dtype) where it is F16 or BF16, else None."""
    return _sixteen(config_dtype(ckpt))


def _by_last_part(ckpt: Checkpoint, w: QuantWeight) -> dict[str, TensorInfo]:
    """The weight's stored tensors by the last part of their names (`weight_scale`, `weight_packed`...)."""
    return {n.rpartition(".")[2]: ckpt.tensors[n] for n in w.members}


_COMPRESSED = {f"compressed-tensors {f}" for f in ("pack-quantized", "int-quantized", "float-quantized")}
_MX = {f"compressed-tensors {f}": d for f, d in (("nvfp4-pack-quantized", ("F4", 4, 16)), ("mxfp4-pack-quantized", ("F4", 4, 32)),
                                                 ("mxfp6-pack-quantized", ("F6_E2M3", 6, 32)),
                                                 ("mxfp8-quantized", ("F8_E4M3", 8, 32)))}   # method -> code, bits, group


def _compressed(ckpt: Checkpoint, w: QuantWeight) -> Scaled | None:
    """A compressed-tensors weight as Scaled, where its pieces are what Scaled reads: a 2-D `weight_packed` (int32,
    whole words a row) or `weight` (int8, float8) of the logical shape, a 16-bit `weight_scale` of one value, one a row,
    one a group of the row (of a size a config group states) or one a block of the config's one `block_structure`
    (blocks that divide the weight), and no zero point, one of the scale's shape, or pack-quantized's packed along the
    rows. Else None (partial blocks, float32 scales, a layout its config does not state: left out by role)."""
    m = _by_last_part(ckpt, w)
    codes, scale, zero = m.get("weight_packed") or m.get("weight"), m.get("weight_scale"), m.get("weight_zero_point")
    if codes is None or scale is None or len(w.shape) != 2 or scale.dtype not in ("F16", "BF16"):
        return None
    rows, cols = w.shape
    if codes.dtype == "I32":
        bits, kind = int(w.bits or 0), "offset"
        if not 0 < bits <= 8 or len(codes.shape) != 2 or codes.shape != (rows, cols * bits // 32) or cols * bits % 32:
            return None
    elif codes.dtype in ("I8", "F8_E4M3", "F8_E5M2") and codes.shape == w.shape:
        bits, kind = 8, "int8" if codes.dtype == "I8" else codes.dtype
    else:
        return None
    block_rows, groups = 1, 1 if scale.numel == 1 else scale.shape[-1] if len(scale.shape) == 2 else 0
    if scale.numel > 1 and len(scale.shape) == 2 and scale.shape[0] != rows:   # strategy block: the config's block
        b0, b1 = _block_structure(ckpt.config) or (0, 0)
        if not b0 or rows % b0 or cols % b1 or scale.shape != (rows // b0, cols // b1):
            return None
        block_rows = b0
    if not groups or cols % groups or (scale.numel == 1 and zero is not None):
        return None
    if 1 < groups and block_rows == 1 and cols // groups not in {a.get("group_size") for a in _weight_args(ckpt.config)}:
        return None   # (a group size no config group states: the file and its config disagree)
    packed_zeros = (zero is not None and codes.dtype == "I32" and zero.dtype == "I32" and 32 % bits == 0
                    and len(scale.shape) == 2 and zero.shape == (-(-rows * bits // 32), scale.shape[-1]))
    if zero is not None and ((zero.shape != scale.shape and not packed_zeros) or zero.dt.kind not in ("int", "uint")
                             or block_rows > 1):
        return None
    return Scaled(ckpt, codes.name, scale.name, None if zero is None else zero.name, kind, bits,
                  cols if scale.numel == 1 else cols // groups, cols, scale.dtype, block_rows)


def _mx(ckpt: Checkpoint, w: QuantWeight) -> Scaled | None:
    """compressed-tensors' nvfp4-, mxfp4- and mxfp6-pack-quantized and mxfp8-quantized weights as Scaled: E2M1 codes
    two a byte, the first in the low nibble (`weight_packed` uint8 [rows, cols / 2]), E2M3 codes four in three bytes,
    least significant bits first (mxfp6: [rows, cols x 3 / 4]) or float8 E4M3 ones (mxfp8: `weight` [rows, cols]);
    `weight_scale` one a group of 16 (nvfp4: float8 E4M3, divided by the float32 `weight_global_scale` in float32) or
    32 (E8M0 bytes), read as its decompress returns them (bfloat16: nvfp4's code x scale in float32 first, the others'
    rounded once). Else None (left out by role)."""
    m = _by_last_part(ckpt, w)
    kind, bits, group = _MX[w.method]
    codes, scale, glob = m.get("weight_packed") or m.get("weight"), m.get("weight_scale"), m.get("weight_global_scale")
    nv = group == 16
    if (codes is None or scale is None or len(w.shape) != 2 or codes.dtype != ("F8_E4M3" if bits == 8 else "U8")
            or "weight_zero_point" in m or scale.dtype != ("F8_E4M3" if nv else "U8") or (glob is None) == nv):
        return None
    rows, cols = w.shape
    if (cols % group or codes.shape != (rows, cols * bits // 8) or scale.shape != (rows, cols // group)
            or (glob is not None and (glob.dtype != "F32" or glob.shape != (1,)))):
        return None
    return Scaled(ckpt, codes.name, scale.name, None, kind, bits, group, cols, "BF16", 1, nv,
                  None if glob is None else glob.name)


def _modelopt_nvfp4(ckpt: Checkpoint, w: QuantWeight) -> Scaled | None:
    """NVIDIA modelopt's NVFP4 weights (export_hf_checkpoint): `weight` uint8 [rows, cols / 2] (two E2M1 codes a byte,
    the first in the low nibble), `weight_scale` float8 E4M3 [rows, cols / 16], `weight_scale_2` one float32, read as
    NVFP4QTensor.dequantize returns them: code x (scale x weight_scale_2 in float32) in float32, then the model's dtype
    (config.json's, F16 or BF16). Else None."""
    m = _by_last_part(ckpt, w)
    codes, scale, glob, dtype = m.get("weight"), m.get("weight_scale"), m.get("weight_scale_2"), _model_dtype(ckpt)
    if codes is None or scale is None or glob is None or dtype is None or len(w.shape) != 2:
        return None
    rows, cols = w.shape
    if (codes.dtype != "U8" or scale.dtype != "F8_E4M3" or glob.dtype != "F32" or glob.numel != 1 or cols % 16
            or codes.shape != (rows, cols // 2) or scale.shape != (rows, cols // 16)):
        return None
    return Scaled(ckpt, codes.name, scale.name, None, "F4", 4, 16, cols, dtype, 1, True, glob.name, False)


COMFYUI_DTYPE = "BF16"   # the compute dtype ComfyUI picks for these models where the device has bfloat16


def _comfyui_fp8(ckpt: Checkpoint, w: QuantWeight) -> Scaled | None:
    """ComfyUI's FP8 weights (comfy/quant_ops.py TensorCoreFP8Layout.dequantize: the code cast to the compute dtype,
    times the float32 scale): `weight` float8 E4M3 of the logical 2-D shape and one float32 `weight_scale` (older
    files: `scale_weight`), each value the code times the scale in float32, rounded to bfloat16 (COMFYUI_DTYPE: the
    compute dtype is ComfyUI's choice at load, bfloat16 on the GPUs that have it). Else None."""
    m = _by_last_part(ckpt, w)
    return _per_tensor_fp8(ckpt, w, m.get("weight_scale") or m.get("scale_weight"), COMFYUI_DTYPE, float32=True)


def _per_tensor_fp8(ckpt: Checkpoint, w: QuantWeight, scale: TensorInfo | None, dtype: str | None,
                    float32: bool = False, scale_rounded: bool = False) -> Scaled | None:
    """A 2-D float8 E4M3 `weight` of the logical shape times one float32 scale, as Scaled in `dtype`, rounded as
    Scaled's `float32` / `scale_rounded` say. Else None."""
    codes = _by_last_part(ckpt, w).get("weight")
    if (codes is None or scale is None or dtype is None or len(w.shape) != 2 or codes.dtype != "F8_E4M3"
            or codes.shape != w.shape or scale.dtype != "F32" or scale.numel != 1):
        return None
    cols = w.shape[1]
    return Scaled(ckpt, codes.name, scale.name, None, "F8_E4M3", 8, cols, cols, dtype, float32=float32,
                  scale_rounded=scale_rounded)


def _gemma(ckpt: Checkpoint, w: QuantWeight) -> Scaled | None:
    """transformers' Gemma quantisation (integrations/gemma_quant.py): QuantizedLinear's `weight` (int8, or int4 / int2
    packed in uint8) and `weight_scale` [out, 1], QuantizedEmbedding's `embedding_quantized` and `embedding_scale`
    [rows, blocks], as their _dequantize_weights returns them in the model's dtype (config.json's, F16 or BF16): code
    and scale each cast to it, their product rounded to it. Else None (a float32 model: not a 16-bit value)."""
    m = _by_last_part(ckpt, w)
    codes = m.get("weight") or m.get("embedding_quantized")
    scale = m.get("weight_scale") or m.get("embedding_scale")
    dtype, bits = _model_dtype(ckpt), int(w.bits or 0)
    if codes is None or scale is None or dtype is None or len(w.shape) != 2 or scale.dtype != "F32" or bits not in (2, 4, 8):
        return None
    rows, cols = w.shape
    if (len(scale.shape) != 2 or scale.shape[0] != rows or not scale.shape[1] or cols % scale.shape[1]
            or codes.shape != (rows, cols * bits // 8) or codes.dtype != ("I8" if bits == 8 else "U8")):
        return None
    return Scaled(ckpt, codes.name, scale.name, None, "int8" if bits == 8 else "offset", bits, cols // scale.shape[1],
                  cols, dtype, scale_rounded=True)


def _modelopt_fp8(ckpt: Checkpoint, w: QuantWeight) -> Scaled | None:
    """NVIDIA modelopt's FP8 weights (export_hf_checkpoint): `weight` float8 E4M3 of the logical 2-D shape and one
    float32 `weight_scale`, read as FP8QTensor.dequantize returns them: code and scale each cast to the model's dtype
    (config.json's, F16 or BF16), their product rounded to it. Else None."""
    return _per_tensor_fp8(ckpt, w, _by_last_part(ckpt, w).get("weight_scale"), _model_dtype(ckpt), scale_rounded=True)


def _weight_args(cfg: dict | None) -> list[dict]:
    """compressed-tensors' weight quantisation args of each config group (config.json's quantization_config)."""
    q = (cfg or {}).get("quantization_config")
    groups = q.get("config_groups") if isinstance(q, dict) else None
    return [g["weights"] for g in (groups.values() if isinstance(groups, dict) else ())
            if isinstance(g, dict) and isinstance(g.get("weights"), dict)]


def _block_structure(cfg: dict | None) -> tuple[int, int] | None:
    """compressed-tensors' one weight block_structure among its config groups ([rows, columns]), or None."""
    found: set[tuple[int, int]] = set()
    for args in _weight_args(cfg):
        b = args.get("block_structure")
        if isinstance(b, list) and len(b) == 2 and all(type(x) is int and x > 0 for x in b):
            found.add((b[0], b[1]))
    return found.pop() if len(found) == 1 else None


def _fp8_blocks(ckpt: Checkpoint, w: QuantWeight) -> Scaled | None:
    """transformers' block-scaled FP8 (FineGrainedFP8: DeepSeek-V3's layout): a 2-D float8 `weight` and its
    `weight_scale_inv` grid (float32, bfloat16, float16, or E8M0 bytes) whose blocks divide the weight (Fp8Dequantize
    derives the block from the grid), read in the model's dtype (config.json's, F16 or BF16). A MoE expert's weight
    whose scales its block keeps fused (census/quant/fp8_experts.py): its part of that grid. Else None."""
    m = _by_last_part(ckpt, w)
    codes, scale = m.get("weight"), m.get("weight_scale_inv")
    fused = fp8_experts.scale_of(w.name, ckpt.tensors) if scale is None else None
    scale = ckpt.tensors[fused[0]] if fused else scale
    dtype = _model_dtype(ckpt)
    if (codes is None or scale is None or dtype is None or codes.dtype not in ("F8_E4M3", "F8_E5M2")
            or len(codes.shape) != 2 or len(scale.shape) != (3 if fused else 2)
            or scale.dtype not in ("F32", "BF16", "F16", "U8")):
        return None
    (rows, cols), (srows, scols) = codes.shape, fused[2:] if fused else scale.shape
    if not srows or not scols or rows % srows or cols % scols:
        return None
    return Scaled(ckpt, codes.name, scale.name, None, codes.dtype, 8, cols // scols, cols, dtype, rows // srows, True,
                  scale_at=fused[1] if fused else 0)


def _bnb4(ckpt: Checkpoint, w: QuantWeight) -> Codebook | None:
    """A bitsandbytes 4-bit weight as Codebook, where its quant_state JSON (as the census read it: QuantWeight.state)
    names a 16-bit dtype, a block size dividing the weight, and its pieces are what Codebook reads; else None."""
    m = {n[len(w.name) + 1:]: ckpt.tensors[n] for n in w.members if n.startswith(w.name + ".")}
    codes, absmax, qmap, d = ckpt.tensors.get(w.name), m.get("absmax"), m.get("quant_map"), w.state
    if codes is None or absmax is None or qmap is None or d is None or qmap.numel != 16:
        return None
    block, dtype, values = d.get("blocksize"), _sixteen(CONFIG_DTYPES.get(str(d.get("dtype")))), w.numel
    if (type(block) is not int or block <= 0 or block % 2 or dtype is None or values % block
            or codes.dtype != "U8" or codes.numel * 2 != values or absmax.numel != values // block):
        return None
    nested = None
    if absmax.dtype == "U8":
        na, nm = m.get("nested_absmax"), m.get("nested_quant_map")
        nb, offset = d.get("nested_blocksize"), d.get("nested_offset")
        if (na is None or nm is None or nm.numel != 256 or type(nb) is not int or nb <= 0
                or not isinstance(offset, (int, float)) or na.numel != -(-absmax.numel // nb)):
            return None
        nested = (na.name, nm.name, float(offset), nb)
    elif absmax.dtype != "F32":
        return None
    return Codebook(ckpt, codes.name, absmax.name, qmap.name, nested, block, values, dtype)


# bitsandbytes' 1/127 in float32 (int8_vectorwise_dequant's `A * stats.view(-1, 1) * 7.874015718698502e-3`)
_INT8_RECIPROCAL = 7.874015718698502e-3


def _bnb8(ckpt: Checkpoint, w: QuantWeight) -> Scaled | None:
    """A bitsandbytes LLM.int8 weight (Linear8bitLt): `weight` int8 of the logical 2-D shape and `SCB` float32, one
    absmax a row, read as transformers' dequantize(dtype=the model's) returns them: bitsandbytes' int8_vectorwise_dequant
    (code x SCB in float32, then x 1/127 in float32) rounded to the model's dtype (config.json's, F16 or BF16: the dtype
    the weights were quantised from; dequantize() without a dtype keeps float32). Else None (left out by role)."""
    m = _by_last_part(ckpt, w)
    codes, scb, dtype = m.get("weight"), m.get("SCB"), _model_dtype(ckpt)
    if (codes is None or scb is None or dtype is None or codes.dtype != "I8" or len(w.shape) != 2
            or codes.shape != w.shape or scb.dtype != "F32" or scb.shape != (w.shape[0],)):
        return None
    cols = w.shape[1]
    return Scaled(ckpt, codes.name, scb.name, None, "int8", 8, cols, cols, dtype, float32=True, factor=_INT8_RECIPROCAL)


def _quanto(ckpt: Checkpoint, w: QuantWeight) -> Scaled | None:
    """optimum-quanto's qint8 and qfloat8 weights (WeightQBytesTensor): `weight._data` int8 or float8 of the logical
    2-D shape and `weight._scale` [rows, 1] in the compute dtype (F16 or BF16), each value code x scale rounded once in
    it, as quanto's dequantize computes it. Else None."""
    codes, scale = ckpt.tensors.get(w.name + "._data"), ckpt.tensors.get(w.name + "._scale")
    if (codes is None or scale is None or codes.dtype not in ("I8", "F8_E4M3", "F8_E5M2") or len(w.shape) != 2
            or codes.shape != w.shape or scale.shape != (w.shape[0], 1) or scale.dtype not in ("F16", "BF16")):
        return None
    return Scaled(ckpt, codes.name, scale.name, None, "int8" if codes.dtype == "I8" else codes.dtype, 8, w.shape[1],
                  w.shape[1], scale.dtype)


def _torchao(ckpt: Checkpoint, w: QuantWeight) -> Scaled | None:
    """torchao's float8 weights (Float8Tensor, safetensors as transformers saves them): `_weight_qdata` float8 of the
    logical 2-D shape and `_weight_scale` float32 [rows, 1], read in the model's dtype (config.json's, F16 or BF16) as
    torchao's dequantize computes them: code x scale in float32, then rounded to it. Else None."""
    base = w.name.rpartition(".")[0]
    codes, scale = ckpt.tensors.get(base + "._weight_qdata"), ckpt.tensors.get(base + "._weight_scale")
    dtype = _model_dtype(ckpt)
    if (codes is None or scale is None or dtype is None or codes.dtype not in ("F8_E4M3", "F8_E5M2")
            or len(w.shape) != 2 or codes.shape != w.shape or scale.shape != (w.shape[0], 1) or scale.dtype != "F32"):
        return None
    return Scaled(ckpt, codes.name, scale.name, None, codes.dtype, 8, w.shape[1], w.shape[1], dtype, 1, True)


def _decoder(ckpt: Checkpoint, w: QuantWeight, dtype: str) -> Packed | Scaled | Codebook | InputGrouped | None:
    """The weight's decoder by its method (`dtype`: its logical view's compute dtype, mlx's floating-point modes'),
    or None where ckptstat does not dequantise it."""
    if w.method.startswith("mlx "):
        return as_packed(ckpt, w.members, w.method, w.bits, w.shape, dtype)
    if w.method == "mxfp4":
        return _gpt_oss(ckpt, w)
    if w.method in _COMPRESSED:
        return _compressed(ckpt, w)
    if w.method in _MX:
        return _mx(ckpt, w)
    if w.method == "modelopt nvfp4":
        return _modelopt_nvfp4(ckpt, w)
    if w.method == "fp8" and _quant_config(ckpt).get("quant_method") == "modelopt":
        return _modelopt_fp8(ckpt, w)
    if w.method in ("comfyui fp8", "comfyui scaled fp8"):
        return _comfyui_fp8(ckpt, w)
    if w.method.startswith("gemma int"):
        return _gemma(ckpt, w)
    if w.method in ("bitsandbytes-nf4", "bitsandbytes-fp4"):
        return _bnb4(ckpt, w)
    if w.method == "bitsandbytes-int8":
        return _bnb8(ckpt, w)
    if w.method in ("quanto qint8", "quanto qfloat8"):
        return _quanto(ckpt, w)
    if w.method == "torchao float8":
        return _torchao(ckpt, w)
    if w.method in ("gptq", "awq"):
        return (gptq if w.method == "gptq" else awq)(ckpt, _by_last_part(ckpt, w), w.shape, w.bits, _quant_config(ckpt))
    return _fp8_blocks(ckpt, w) if w.method == "fp8 block-scaled" else None


def _quant_config(ckpt: Checkpoint) -> dict:
    """The quantization_config fields the census keeps (QuantLayout.config), or {}."""
    q = layout(ckpt)
    return q.config if q is not None else {}


def view(ckpt: Checkpoint, readers: bool = False) -> Checkpoint:
    """The checkpoint with its dequantisable weights as their values (the module docstring); itself when it has
    none. A view is its own view. With `readers`, each such weight is also read as its values, in its logical order,
    by the checkpoint's readers (diff): the statistics' view has no readers of its own, so its plain tensors keep
    stats' direct reads."""
    return ckpt.derived((_VIEW, readers), lambda c: _view(c, readers))


def read_as_values(ckpt: Checkpoint, names: Iterable[str]) -> dict | None:
    """The quantised weights among `names` read as their values (stats' `dequantized`): how many by method, and the
    rule; None when none is."""
    methods: dict[str, int] = {}
    for name in names:
        source = ckpt.tensors[name].extra.get("dequantized") if name in ckpt.tensors else None
        if isinstance(source, (Dequantized, KerasValues)):
            methods[source.method] = methods.get(source.method, 0) + 1
    return {"weights": sum(methods.values()), "methods": dict(sorted(methods.items())), "rule": RULE} if methods else None


def left_as_stored(ckpt: Checkpoint) -> dict[str, int]:
    """Quantised weights no decoder reads (a float32 scale, a partial block...: docs/quantized.md), by method: their
    pieces are counted apart by role, their values nowhere."""
    q = layout(ckpt)
    if q is None:
        return {}
    shown = logical(ckpt).tensors
    out: dict[str, int] = {}
    for w in q.weights.values():
        if (keras_values(ckpt, w) if w.method.startswith("keras ") else _decoder(ckpt, w, shown[w.name].dtype)) is None:
            out[w.method] = out.get(w.method, 0) + 1
    return dict(sorted(out.items()))


def dequantisable(ckpt: Checkpoint) -> bool:
    """Whether any quantised weight of the checkpoint is read as its values (view's readers)."""
    return view(ckpt, True) is not ckpt


def _view(ckpt: Checkpoint, readers: bool) -> Checkpoint:
    q = layout(ckpt)
    if q is None:
        return ckpt
    shown = logical(ckpt).tensors
    readable: dict[str, Dequantized | KerasValues] = {
        w.name: Dequantized(dec, w.method, _experts_shape(w)) for w in q.weights.values()
        if not w.method.startswith("keras ") and (dec := _decoder(ckpt, w, shown[w.name].dtype)) is not None}
    keras = {w.name: kv for w in q.weights.values() if (kv := keras_values(ckpt, w)) is not None}
    readable.update(keras)
    if not readable:
        return ckpt

    def tensor(w: QuantWeight) -> TensorInfo:
        d = readable[w.name]
        codes = ckpt.tensors[d.codes if isinstance(d, KerasValues) else d.decoder.codes]
        return TensorInfo(w.name, d.out_dtype, w.shape, codes.file, None, w.stored_bytes,
                          storage=f"dequantized:{w.name}", extra={"dequantized": d, "at": codes.offset or 0})

    v = replace(ckpt, tensors=collapsed(ckpt, {n: q.weights[n] for n in readable}, tensor))
    if readers or keras:   # Keras' float32 values are read by their files' readers, in the statistics too
        v = replace(v, readers={f: _values_of(ckpt.readers.get(f, read_flat_file)) for f in ckpt.files})
    if keras:
        pin_rest(ckpt, v, set(readable))   # (a Keras group without its kernel is no layout: the rest keep their roles)
    v.derived((_VIEW, readers), lambda x: x)
    return v


def _experts_shape(w: QuantWeight) -> tuple[int, int, int] | None:
    """gpt-oss's MXFP4 experts' logical [E, in, out] (stored [E, out, in]: convert_moe_packed_tensors transposes
    them after dequantising), else None."""
    return (w.shape[0], w.shape[1], w.shape[2]) if w.method == "mxfp4" and len(w.shape) == 3 else None


def _values_of(base: Reader) -> Reader:
    """A file's reader that reads a dequantised weight as its values, and any other tensor as `base` does."""
    def read(info: TensorInfo, start: int, count: int) -> np.ndarray:
        source = info.extra.get("dequantized")
        return source.read(start, count) if isinstance(source, (Dequantized, KerasValues)) else base(info, start, count)
    return read
