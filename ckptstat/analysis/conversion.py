"""`ckptstat diff` of a model and its conversion: the value transforms llama.cpp's convert_hf_to_gguf.py
applies on the way, replayed on the HF side before comparing (docs/diff.md "Conversions"), and whether a
tensor stored in another dtype holds the source's values rounded to that dtype, within the dtype's own
rounding bound.

Transforms are named by the families (`Family.gguf_transforms`: GGUF architecture, a regex on the aligned
HF name, a kind below); the numbers they need (heads) come from the GGUF file's metadata."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import Checkpoint, TensorInfo
from ..core.dtypes import DTYPES
from ..core.io import read_bytes
from ..core.quants import QUANTS

Chunks = Iterator[np.ndarray]


@dataclass(frozen=True)
class Transform:
    """One converter transform of one tensor: `label` says it to the user, `apply` replays it on the HF
    tensor's values, given a function that opens a C-order stream of them (called once per pass over the
    tensor: a regrouping whose output order is not the input's reads it once per part; memory: one head's
    rows at most)."""
    label: str
    apply: Callable[[Callable[[], Chunks]], Chunks]
    shape: tuple[int, ...] | None = None   # the transformed tensor's shape where it is not the HF tensor's
    rtol: float = 0.0   # the replay's own error, relative to the value, where it cannot be the converter's bit for bit


def _regroup(chunks: Chunks, size: int, reorder: Callable[[np.ndarray], np.ndarray]) -> Chunks:
    """The stream cut into groups of `size` elements, each put through `reorder`."""
    buf: list[np.ndarray] = []
    held = 0
    for chunk in chunks:
        buf.append(chunk)
        held += len(chunk)
        if held < size:
            continue
        flat = np.concatenate(buf) if len(buf) > 1 else buf[0]
        whole = len(flat) // size * size
        yield reorder(flat[:whole].reshape(-1, size)).reshape(-1)
        buf, held = [flat[whole:]], len(flat) - whole
    if held:   # a tail shorter than a group: the shape did not split into heads (the caller checks it does)
        yield np.concatenate(buf)


def _slots(chunks: Chunks, size: int, per: int, first: int, last: int) -> Chunks:
    """The stream cut into blocks of `size` elements (a head's rows) numbered 0, 1, ..., per - 1 over and over, keeping
    the blocks numbered first..last - 1, in order: one part of a regrouping, one pass over the tensor."""
    seen = 0

    def keep(blocks: np.ndarray) -> np.ndarray:
        nonlocal seen
        slot = (seen + np.arange(len(blocks))) % per
        seen += len(blocks)
        return blocks[(slot >= first) & (slot < last)]

    return (x for x in _regroup(chunks, size, keep) if len(x))


def rope_permutation(heads: int, shape: tuple[int, ...], what: str) -> Transform | None:
    """llama.cpp's `LlamaModel.permute` (conversion/llama.py): each head's rows, HF's two rotary halves
    [h, 2, d/2], stored interleaved [h, d/2, 2], for its non-NeoX rope. None when the rows do not split."""
    rows = shape[0] if shape else 0
    if heads <= 0 or rows % (2 * heads):
        return None
    half = rows // heads // 2
    cols = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1

    def reorder(groups: np.ndarray) -> np.ndarray:
        return groups.reshape(-1, 2, half, cols).swapaxes(1, 2)

    return Transform(f"llama.cpp's rotary row permutation ({what}, {heads} heads)",
                     lambda source: _regroup(source(), 2 * half * cols, reorder))


def qkv_regrouping(heads: int, kv_heads: int, shape: tuple[int, ...]) -> Transform | None:
    """llama.cpp's regrouping of a fused QKV's rows: HF's kv groups, each its heads / kv_heads query heads
    then one key and one value head, [g, heads / g + 2, d], stored as all query heads, then all keys, then
    all values. FalconModel.modify_tensors (conversion/falcon.py: `view(n_head_kv, n_head // n_head_kv + 2,
    head_dim, ...)`, then q, k, v concatenated); GPTNeoXModel's and BloomModel's (conversion/gptneox.py,
    bloom.py: `reshape((n_head, 3, d, n_embed))`, then [:, 0], [:, 1], [:, 2] concatenated) are the case
    kv_heads = heads, [heads, 3, d] -> [3, heads, d]. Weights and biases alike (a bias: one column). One
    pass over the HF tensor per part (q, k, v), each keeping that part's head blocks. None when the rows do
    not split so, or when the order is unchanged (one kv group: Falcon-7B's multi-query layout)."""
    rows = shape[0] if shape else 0
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads or kv_heads == 1:
        return None
    per = heads // kv_heads + 2                       # head blocks per kv group
    if rows % (kv_heads * per):
        return None
    cols = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    size = rows // (kv_heads * per) * cols            # elements of one head's rows

    def apply(source: Callable[[], Chunks]) -> Chunks:
        for first, last in ((0, per - 2), (per - 2, per - 1), (per - 1, per)):
            yield from _slots(source(), size, per, first, last)

    what = f"{heads} heads" if kv_heads == heads else f"{heads} heads, {kv_heads} kv groups"
    return Transform(f"llama.cpp's fused QKV regrouped into q, k, v ({what})", apply)


def _skip(chunks: Chunks, n: int) -> Chunks:
    """The stream less its first n elements."""
    for x in chunks:
        if n >= len(x):
            n -= len(x)
            continue
        yield x[n:]
        n = 0


def _take(chunks: Chunks, n: int) -> Chunks:
    """The stream's first n elements."""
    for x in chunks:
        if n <= 0:
            return
        yield x[:n]
        n -= len(x)


def v_head_reorder(k_heads: int, v_heads: int, head_dim: int, shape: tuple[int, ...], skip_rows: int = 0,
                   columns: bool = False) -> Transform | None:
    """Qwen3.5's converter (`_LinearAttentionVReorderBase._reorder_v_heads`, conversion/qwen.py): the linear attention's
    V heads, grouped by K head [k, v / k, d], stored tiled [v / k, k, d]; along the rows after the first `skip_rows` (Q
    and K's rows of in_proj_qkv, their channels of conv1d), or along each row's columns (`columns`: out_proj). Rows: one
    pass for the rows skipped, then one per V head of a group, each keeping that head's blocks (memory: one head's
    rows); columns: each row reordered on its own. None when there is nothing to reorder (as many V heads as K heads)
    or the shape does not split so."""
    if k_heads <= 0 or v_heads <= k_heads or v_heads % k_heads or head_dim <= 0 or not shape:
        return None
    per = v_heads // k_heads
    label = f"llama.cpp's V-head reorder ({v_heads} V heads over {k_heads} K heads)"
    if columns:
        if len(shape) != 2 or shape[1] != v_heads * head_dim:
            return None

        def tiled(rows: np.ndarray) -> np.ndarray:
            return rows.reshape(-1, k_heads, per, head_dim).swapaxes(1, 2)

        return Transform(label, lambda source: _regroup(source(), shape[1], tiled))
    cols = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    if shape[0] - skip_rows != v_heads * head_dim or skip_rows < 0:
        return None
    size = head_dim * cols

    def apply(source: Callable[[], Chunks]) -> Chunks:
        if skip_rows:
            yield from _take(source(), skip_rows * cols)
        for j in range(per):
            yield from _slots(_skip(source(), skip_rows * cols), size, per, j, j + 1)

    return Transform(label, apply)


def column_blocks(source: Callable[[], Chunks], rows: int, cols: int, per: int) -> Iterator[np.ndarray]:
    """A [rows, cols] tensor's values (C order; `source()` streams its chunks anew for each pass) as blocks of `per`
    columns, each [rows, <= per]: one pass over the chunks per block, memory the block and one chunk. A transpose
    streamed in bounded memory (llama.cpp's Conv1D transpose here, a TF kernel's [in, out] in diff.py)."""
    for c0 in range(0, cols, per):
        c1 = min(cols, c0 + per)
        block: np.ndarray | None = None
        carry: np.ndarray | None = None
        r = 0
        for chunk in source():
            flat = np.concatenate([carry, chunk]) if carry is not None and len(carry) else chunk
            k = len(flat) // cols
            if block is None:
                block = np.empty((rows, c1 - c0), dtype=chunk.dtype)
            block[r:r + k] = flat[: k * cols].reshape(k, cols)[:, c0:c1]
            carry, r = flat[k * cols:], r + k
        if block is not None:
            yield block


_TRANSPOSE_BLOCK = 1 << 22   # elements of the HF tensor gathered per pass


def transposition(shape: tuple[int, ...]) -> Transform | None:
    """GPT2Model.modify_tensors (conversion/gpt2.py): a Conv1D weight, stored [in, out] by HF, written transposed,
    [out, in] (`data_torch.transpose(1, 0)`). One pass over the HF tensor per block of its columns, memory that
    block (2**22 elements, or one column where a column is longer). None for a tensor that is not 2-D."""
    if len(shape) != 2 or not shape[0] or not shape[1]:
        return None
    rows, cols = shape
    per = max(1, _TRANSPOSE_BLOCK // rows)

    def apply(source: Callable[[], Chunks]) -> Chunks:
        for block in column_blocks(source, rows, cols, per):
            yield np.ascontiguousarray(block.T).reshape(-1)

    return Transform("llama.cpp's Conv1D transpose ([in, out] stored [out, in])", apply, (cols, rows))


def _plus_one(source: Callable[[], Chunks]) -> Chunks:
    # as the converter: `data_torch + 1` in the tensor's own float16, else in float32 (bf16 is widened first)
    for x in source():
        dt = np.float16 if x.dtype == np.float16 else np.float32
        yield x.astype(dt) + dt(1)


# llama.cpp's RMSNorm scales by w, Gemma's by 1 + w
PLUS_ONE = Transform("llama.cpp's norm + 1", _plus_one)


def _neg_exp(source: Callable[[], Chunks]) -> Chunks:
    # as the converter: `-torch.exp(data_torch)` in float16 for a float16 tensor, else in float32 (bf16 widened first);
    # here in float64, rounded to float16 where the converter's result is float16
    for x in source():
        v = -np.exp(x.astype(np.float64))
        yield v.astype(np.float16) if x.dtype == np.float16 else v


# the SSM converters' (MambaModel, Mamba2Model...) A = -exp(A_log). torch's float32 exp is not correctly rounded (up
# to 2 float32 ulps from numpy's, seen on a real conversion): the replay, exact in float64, is allowed 2**-22 of the
# value (two ulps) on top of the comparison's tolerance or rounding bound
NEG_EXP = Transform("llama.cpp's A = -exp(A_log)", _neg_exp, rtol=2.0 ** -22)


def vocab_cut(rows: int, shape: tuple[int, ...]) -> Transform | None:
    """Gemma3Model.modify_tensors (conversion/gemma.py): embed_tokens cut to the tokenizer's vocabulary
    (`data_torch[:n_vocab_real]`, the rows past it dropped; Gemma 3's config counts more rows than its tokenizer has
    tokens). None unless that leaves fewer rows."""
    if len(shape) != 2 or not 0 < rows < shape[0]:
        return None
    cols = shape[1]
    return Transform(f"llama.cpp's vocabulary cut (the {shape[0] - rows} rows past the tokenizer's {rows} dropped)",
                     lambda source: _take(source(), rows * cols), (rows, cols))


def transform_for(kind: str, gguf: Checkpoint, shape: tuple[int, ...]) -> Transform | None:
    """The transform `kind` (a family's gguf_transforms) for one tensor of `shape`, or None when the file
    does not say what it needs or the shape does not fit."""
    arch = gguf.declared_architecture or ""

    def count(key: str) -> int:
        try:
            return int(gguf.metadata.get(f"{arch}.attention.{key}", "0"))
        except ValueError:
            return 0

    if kind == "plus_one":
        return PLUS_ONE
    if kind == "vocab_cut":   # as many rows as the file's tokens, and its token_embd holding them
        from ..formats.gguf import array_length  # (a GGUF's: stats and diff of other files import no GGUF reader)

        n = array_length(gguf.metadata.get("tokenizer.ggml.tokens", "")) or 0
        embd = gguf.tensors.get("token_embd.weight")
        return vocab_cut(n, shape) if embd is not None and embd.shape[:1] == (n,) else None
    if kind == "neg_exp":
        return NEG_EXP
    if kind == "rope_q":
        return rope_permutation(count("head_count"), shape, "q")
    def kv_heads() -> int:
        """head_count_kv; where it is a per-layer array (GraniteHybridModel: 0 on the Mamba layers; a long one is
        not kept in the metadata), the K rows over a head's width (key_length, else an attn_q's rows / heads)."""
        kv, heads = count("head_count_kv"), count("head_count")
        if kv or f"{arch}.attention.head_count_kv" not in gguf.metadata:
            return kv or heads
        d = count("key_length") or next((t.shape[0] // heads for n, t in sorted(gguf.tensors.items())
                                          if heads and n.endswith(".attn_q.weight") and t.shape), 0)
        return shape[0] // d if d and shape and shape[0] % d == 0 else 0

    if kind == "rope_k":
        return rope_permutation(kv_heads(), shape, "k")
    if kind == "transpose":
        return transposition(shape)
    if kind.startswith("v_heads"):   # Qwen3.5's linear attention: K heads ssm.group_count, V heads ssm.time_step_rank
        def ssm(key: str) -> int:
            try:
                return int(gguf.metadata.get(f"{arch}.ssm.{key}", "0"))
            except ValueError:
                return 0
        k, v = ssm("group_count"), ssm("time_step_rank")
        dv = ssm("inner_size") // v if v else 0
        if kind == "v_heads_qkv":   # in_proj_qkv's rows, conv1d's channels: Q's and K's (ssm.state_size each) first
            return v_head_reorder(k, v, dv, shape, skip_rows=2 * k * ssm("state_size"))
        if kind == "v_heads_cols":
            return v_head_reorder(k, v, dv, shape, columns=True)
        return v_head_reorder(k, v, 1 if kind == "v_heads_1" else dv, shape)
    if kind == "qkv_groups":   # GPT-NeoX writes no head_count_kv: as many groups as heads
        return qkv_regrouping(count("head_count"), count("head_count_kv") or count("head_count"), shape)
    raise ValueError(f"unknown converter transform {kind!r}")


def gguf_converter(gguf: Checkpoint) -> tuple[list[tuple[re.Pattern[str], str]], list[re.Pattern[str]]]:
    """What llama.cpp's converter did for this GGUF file's architecture, from its family: (regex on the aligned HF
    name, kind) of each transform (Family.gguf_transforms), and the regexes of the HF tensors it leaves out on
    purpose (Family.gguf_dropped); none where the file's family is unknown."""
    from ..census import architecture
    from ..errors import CkptstatError
    from ..families import get

    try:
        family = get(architecture(gguf)["family"])
    except CkptstatError:
        return [], []
    arch = gguf.declared_architecture or ""
    return ([(re.compile(rx), kind) for a, rx, kind in family.gguf_transforms if a == arch],
            [re.compile(rx) for a, rx in family.gguf_dropped if a == arch])


def _rope_parameters(cfg: dict) -> dict:
    """config.json's rope parameters as the converter reads them (ModelBase: `rope_parameters`, else transformers 4's
    `rope_scaling`, the top-level rope_theta and a `type` mirrored in; a per-layer-type dict's full_attention's)."""
    p = cfg.get("rope_parameters", cfg.get("rope_scaling")) or {}
    p = p.get("full_attention", p) if isinstance(p, dict) else {}
    if not isinstance(p, dict):
        return {}
    return {"rope_theta": cfg.get("rope_theta", 10000.0), "rope_type": p.get("type", ""), **p}


def _llama3_factors(cfg: dict, p: dict) -> np.ndarray | None:
    """LlamaModel.generate_extra_tensors (conversion/llama.py): per rotary frequency of a head, 1 for the short
    wavelengths, `factor` for the long ones, interpolated between (Llama 3.1's rope_type llama3)."""
    dim = cfg.get("head_dim") or (cfg.get("hidden_size", 0) // max(1, cfg.get("num_attention_heads", 1)))
    if not isinstance(dim, int) or dim <= 0:
        return None
    freqs = (1.0 / (np.float32(p.get("rope_theta", 10000.0)) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))))
    factor, low, high = p.get("factor", 8.0), p.get("low_freq_factor", 1.0), p.get("high_freq_factor", 4.0)
    old = p.get("original_max_position_embeddings", 8192)
    out = []
    for freq in freqs.astype(np.float64):
        wavelen = 2 * np.pi / freq
        smooth = (old / wavelen - low) / (high - low) if high != low else 0.0
        out.append(1.0 if wavelen < old / high else factor if wavelen > old / low else 1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float64)


def _generated_values(name: str, cfg: dict) -> tuple[np.ndarray, str] | None:
    """The values llama.cpp's converter writes, from config.json, for a GGUF tensor no HF tensor stands for
    (generate_extra_tensors), and what they are from; None for another name or a config that calls for none."""
    p = _rope_parameters(cfg)
    kind = str(p.get("rope_type", "")).lower()
    if name == "rope_freqs.weight" and kind == "llama3":
        v = _llama3_factors(cfg, p)
        return (v, "rope_parameters (llama3)") if v is not None else None
    key = {"rope_factors_long.weight": "long_factor", "rope_factors_short.weight": "short_factor"}.get(name)
    if key and kind in ("longrope", "su") and isinstance(p.get(key), list):   # Phi3MiniModel (conversion/phi.py)
        try:
            return np.array(p[key], dtype=np.float64), f"rope_parameters' {key}"
        except (TypeError, ValueError):
            return None
    return None


def generated(gguf: Checkpoint, hf: Checkpoint, name: str, read: bool = True) -> str | None:
    """Why GGUF tensor `name`, which no HF tensor stands for, is no difference: llama.cpp's converter computes it from
    config.json (Llama 3's rope_freqs, Phi-3's long-context rope_factors_long / _short), and the file holds the values
    the HF side's config gives (float32 arithmetic: within 2^-20 of each); else None (an added tensor). Not `read`
    (--names-only): the config calls for it and its size is the config's, its values not read."""
    found = _generated_values(name, hf.config or {})
    t = gguf.tensors.get(name)
    if found is None or t is None or t.numel != found[0].size or t.numel > 1 << 20:
        return None
    if not read:
        return f"computed by llama.cpp's converter from config.json's {found[1]} (values not read)"
    got = np.concatenate([np.asarray(c, dtype=np.float64).reshape(-1) for c in gguf.iter_chunks(name)])
    if not np.all(np.abs(got - found[0]) <= np.abs(found[0]) * 2.0 ** -20):
        return None
    return f"computed by llama.cpp's converter from config.json's {found[1]}"


# the buckets of a multimodal model's towers and projectors (naming/): llama.cpp's converter writes them to a separate
# mmproj-*.gguf (convert_hf_to_gguf.py --mmproj), never to the model's file, whose diff lists them `dropped`
MMPROJ_BUCKETS = ("vision", "audio")
# a multimodal wrapper's language model, which the converter writes under the text model's names (transformers 5's
# model.language_model.*, 4's language_model.model.*): the HF side's rule in a GGUF diff
WRAPPED_LM = (re.compile(r"^(model\.)?language_model\.(model\.)?"), "model.")


def gguf_rules(ckpt: Checkpoint) -> tuple[str, list[tuple[re.Pattern[str], str]]] | None:
    """(what, rules) turning a GGUF file's llama.cpp names into HF names, from its family's
    gguf_tensor_names table; None when the family has none."""
    from ..census import architecture
    from ..errors import CkptstatError
    from ..families import get

    name = architecture(ckpt)["family"]
    try:
        table = get(name).gguf_tensor_table(ckpt.declared_architecture or "", ckpt.tensors.keys())
    except CkptstatError:
        return None
    if not table:
        return None
    rules = []
    for hf, gg in table:
        gg_rx = re.escape(gg).replace(re.escape("{bid}"), r"(\d+)")
        if "{xid}" in hf:   # an expert's slice of a stack (_unstacked names it `blk.N.ffn_gate_exps.weight[E]`)
            rules.append((re.compile(f"^{gg_rx}(\\.weight|\\.bias)\\[(\\d+)\\]$"),
                          hf.replace("{bid}", r"\1").replace("{xid}", r"\3") + r"\2"))
            continue
        # the module's name, then .weight / .bias or nothing (Mamba's ssm_a, ssm_d are A_log, D)
        rules.append((re.compile(f"^{gg_rx}(?=\\.|$)"), hf.replace("{bid}", r"\1")))
    return f"GGUF -> HF names ({name} family)", rules


# ------------------------------------------------------------------------------------------ rounding
MAX_EXPERTS = 1 << 16   # a stack with more slices than this stays whole (hostile headers: no loop on a claim)
# half an ulp of a float dtype: relative, and its floor (half the smallest subnormal)
HALF_ULP = {"BF16": 2.0 ** -8, "F16": 2.0 ** -11, "F32": 2.0 ** -24}
_HALF_ULP_FLOOR = {"BF16": 2.0 ** -134, "F16": 2.0 ** -25, "F32": 2.0 ** -150}


def half_ulp(v: np.ndarray, dtype: str) -> np.ndarray:
    """Half an ulp of `dtype` at each of v's magnitudes: the most rounding v to it moves it (bf16 where unknown)."""
    return np.maximum(np.abs(v) * HALF_ULP.get(dtype, HALF_ULP["BF16"]), _HALF_ULP_FLOOR.get(dtype, 0.0))


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even), as float32 values."""
    u = x.astype(np.float32).view(np.uint32)
    r = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


class QuantBound:
    """The rounding bound of a ggml block-quantised tensor, read from its own stored scales: a callable on
    successive whole-block pieces of (source x, stored y), each answered with the allowed |x - y| per
    element (it reads the stored blocks in step, so memory is the piece's).

    A block type stores each element as code q in [qmin, qmax] of its sub-block's grid scale * q + add
    (core/quants.py). Whatever search llama.cpp's quantizer runs for the scales (make_qkx2_quants,
    make_qx_quants, an importance matrix), the last step of every k-quant (quantize_row_q*_K_ref/_impl,
    ggml-quants.c) re-codes each element with the block's *stored* f16 d/dmin and 6/8-bit sub-block scales:
    `nearest_int((x + dm) / d)` clamped to [qmin, qmax]. So y is the grid value nearest x: |x - y| is at
    most half a step when x lies inside the grid's range [lo, hi], and x's distance to the range plus half a
    step outside it (a clamped extreme; the scale search may leave one). Allowed, per element:

        |scale| / 2 + max(0, lo - x, x - hi)                      the nearest grid value
        + (max(|qmin|, qmax) + 1) * u(scale) + u(add)              32-element types only (Q8_0, Q4_0, Q4_1,
                                                                   Q5_0, Q5_1): codes chosen with d = max / -8
                                                                   (... / 15, / 127) and min in float32,
                                                                   before their f16 rounding (u: half an f16
                                                                   ulp, max(|v| 2**-11, 2**-25))
        + |x| 2**-11                                               a source that went through an f16 GGUF
                                                                   first (convert to f16, then quantize)
        + 2**-20 (|x| + |add| + |scale| max(|qmin|, qmax))         float32 arithmetic of the quantizer and of
                                                                   the dequantisation

    The clamp is real: in the files llama-quantize wrote (fixtures/conversions/quantized/) 0.5 to 13% of a
    type's elements lie outside their grid's range, up to 2.4 half-steps from the nearest value, so half a
    step alone would call faithful files changed. A sub-block whose scale is 0 (Q6_K's all-zero block of
    tiny values) holds one value (add): any x is then its nearest. The 32-element types'
    importance-matrix quantizer (quantize_row_q4_0_impl: make_qx_quants) stores a least-squares d after
    coding with another, so such a file may exceed the bound and show `dtype`."""

    def __init__(self, info: TensorInfo):
        self.info, self.quant, self.next_block = info, QUANTS[info.dtype], 0

    def __call__(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        d = self.info.dt
        n = -(-len(y) // d.block)
        assert self.info.offset is not None
        raw = read_bytes(self.info.file, self.info.offset + self.next_block * d.block_bytes, n * d.block_bytes)
        self.next_block += n
        scale, _, add = self.quant.parts(np.frombuffer(raw, dtype=np.uint8).reshape(n, d.block_bytes))
        qmin, qmax = self.quant.qmin, self.quant.qmax
        top = max(-qmin, qmax)
        add = np.zeros_like(scale) if add is None else add
        s, a = scale.astype(np.float64), add.astype(np.float64)
        ends = (s * qmin + a, s * qmax + a)
        per = (np.abs(s) / 2 + 2.0 ** -20 * (np.abs(a) + np.abs(s) * top))
        if self.quant.coded_before_rounding:
            per = per + (top + 1) * half_ulp(s, "F16") + np.where(a == 0, 0.0, half_ulp(a, "F16"))
        size = d.block // scale.shape[1]   # elements per sub-block

        def each(v: np.ndarray) -> np.ndarray:
            return np.repeat(v.reshape(-1), size)[: len(x)]

        lo, hi = each(np.minimum(*ends)), each(np.maximum(*ends))
        outside = np.maximum(0.0, np.maximum(lo - x, x - hi))
        return each(per) + outside + np.abs(x) * (2.0 ** -11 + 2.0 ** -20)


Bound = Callable[[np.ndarray, np.ndarray], np.ndarray]
# dtype -> the allowed |x - y| per element of source x and stored y
ROUNDING: dict[str, Bound] = {
    "F32": lambda x, y: np.abs(x.astype(np.float32).astype(np.float64) - x),
    # float64 -> float16 as torch rounds it: through float32 (the same value, or a farther neighbour near a tie)
    "F16": lambda x, y: np.abs(x.astype(np.float32).astype(np.float16).astype(np.float64) - x),
    "BF16": lambda x, y: np.abs(_bf16(x).astype(np.float64) - x),
}


def rounding_bound(info: TensorInfo) -> tuple[int, Bound] | None:
    """(elements a bound needs together, the bound) of the narrower side's tensor, or None when ckptstat
    knows no bound for its dtype."""
    if info.dtype in ROUNDING:
        return 1, ROUNDING[info.dtype]
    if info.dtype in QUANTS and info.offset is not None:
        return info.dt.block, QuantBound(info)
    return None


def rounding(ta: TensorInfo, tb: TensorInfo) -> tuple[str, bool, int, Bound] | None:
    """(what the narrower side was rounded to, whether that side is B, the elements its bound takes together, the bound)
    of a pair, or None where ckptstat knows no rounding between them. A tensor read from another stored form carries
    its own (`extra["rounded"]`: label, group, bound(); an mlx quantised weight, analysis/conversion_mlx.py); else
    the narrower dtype's (rounding_target, rounding_bound)."""
    for narrow_b, t in ((True, tb), (False, ta)):
        r = t.extra.get("rounded")
        if r is not None:
            return r.label, narrow_b, r.group, r.bound()   # type: ignore[attr-defined]
    target = rounding_target(ta.dtype, tb.dtype)
    if target is None:
        return None
    narrow_b = target == tb.dtype
    found = rounding_bound(tb if narrow_b else ta)
    return None if found is None else (target, narrow_b, *found)


def roundings(ta: TensorInfo, tb: TensorInfo) -> list[tuple[str, bool, int, Bound]]:
    """Each rounding the pair may be (`rounding`'s tuples): float16 facing bfloat16, as wide and neither holding the
    other, may be either one rounded to the other (a bf16 model cast to f16, diffed either way round): B first."""
    found = rounding(ta, tb)
    if found is None:
        return []
    if found[0] in ("F16", "BF16") and {ta.dtype, tb.dtype} == {"F16", "BF16"} and found[1]:
        return [found, (ta.dtype, False, 1, ROUNDING[ta.dtype])]
    return [found]


class RoundingCheck:
    """Whether a pair read in step (whole blocks of `block` elements) is a faithful rounding under one of its
    `roundings`: `feed` each piece (source side, other side, abs difference); `row()` the first that held, or None."""

    def __init__(self, ta: TensorInfo, tb: TensorInfo, slack: float = 0.0) -> None:
        self.found = roundings(ta, tb)
        self.use = [0.0] * len(self.found)
        self.slack = slack   # a replayed transform's own relative error, allowed on top of the bound
        self.block = self.found[0][2] if self.found else 1

    def feed(self, xf: np.ndarray, yf: np.ndarray, d: np.ndarray, failed: bool = False) -> None:
        for i, (_, narrow_b, _, bound_of) in enumerate(self.found):
            if self.use[i] <= 1:   # (a QuantBound reads its blocks in step: fed until it fails)
                self.use[i] = float("inf") if failed else max(self.use[i], self._share(bound_of, narrow_b, xf, yf, d))

    def _share(self, bound_of: Bound, narrow_b: bool, xf: np.ndarray, yf: np.ndarray, d: np.ndarray) -> float:
        """The largest share of its bound an element's difference `d` takes (0 where d is 0: a NaN or inf kept as it
        is, whose bound is not finite)."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            bound = bound_of(xf, yf) if narrow_b else bound_of(yf, xf)
            if self.slack:
                bound = bound + self.slack * np.abs(xf if narrow_b else yf)
            return float(np.max(np.where(d == 0, 0.0, d / bound)))

    def row(self) -> dict[str, Any] | None:
        return next((conversion_row(f[0], u) for f, u in zip(self.found, self.use) if u <= 1), None)


def converts(ta: TensorInfo, tb: TensorInfo) -> bool:
    """Whether the pair's values are stored in different forms (dtypes, or one side's read from another: `rounded`), so
    that equal values are a conversion's rounding, not equality."""
    return ta.dtype != tb.dtype or "rounded" in ta.extra or "rounded" in tb.extra


def rounding_target(a_dtype: str, b_dtype: str) -> str | None:
    """Of two float dtypes, the one a conversion rounds to (fewer bits; B when equal), when ckptstat knows
    its rounding bound; else None."""
    da, db = DTYPES.get(a_dtype), DTYPES.get(b_dtype)
    if da is None or db is None or a_dtype == b_dtype or "float" not in (da.kind, db.kind):
        return None
    target = a_dtype if da.bits < db.bits else b_dtype
    return target if target in ROUNDING or target in QUANTS else None


def whole_blocks(pairs: Iterator[tuple[np.ndarray, np.ndarray]], block: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Equal-length pieces re-cut to whole blocks of `block` elements (the last piece may be short)."""
    if block == 1:
        yield from pairs
        return
    ca: list[np.ndarray] = []
    cb: list[np.ndarray] = []
    held = 0
    for x, y in pairs:
        ca.append(x)
        cb.append(y)
        held += len(x)
        if held >= block:
            fx, fy = np.concatenate(ca), np.concatenate(cb)
            whole = held // block * block
            yield fx[:whole], fy[:whole]
            ca, cb, held = [fx[whole:]], [fy[whole:]], held - whole
    if held:
        yield np.concatenate(ca), np.concatenate(cb)


def conversion_row(target: str, use: float) -> dict[str, Any]:
    """What a row says of a faithful conversion: the dtype rounded to and the largest error's share of
    the rounding bound (<= 1)."""
    return {"rounded_to": target, "bound_used": use}
