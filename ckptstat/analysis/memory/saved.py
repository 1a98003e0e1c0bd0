"""Training activations of transformers' text models: the bytes autograd saves for backward, op by op of the family's
op template (families/<name>.py build), as transformers 5.25 runs the layer under torch 2.x; what one layer keeps, and
what the head and the loss hold at their peak. The planner (planner.activations) reads it for text models.

Measured with torch.autograd.graph.saved_tensors_hooks on CPU forwards (each storage once; parameters not counted) of
Llama, Qwen2, Qwen3, Mistral, Gemma2, GPT-2, Mixtral, OLMoE and Qwen3-MoE (tests/test_memory_planner.py
test_training_layers_are_what_autograd_saves, test_training_loss_line_is_the_loss_peak), and against
torch.cuda.max_memory_allocated on an H200 (bench/results/gpu_memory.md).
What each activation and each decoder model type's norm and attention keep is not written here: fixtures/make_saved_table.py
measures it from transformers and torch with saved_tensors_hooks into families/saved_table.json (`facts`, `act_saves`),
which tests/test_saved_table.py measures again.
What each op keeps (ab: the activation's bytes, T: tokens b*s):
 - RMSNorm (LlamaRMSNorm and its copies): its input upcast to float32 (pow), the normalised tensor cast back (ab; in
   float32 the mul's own input), and the fp32 rsqrt per row: (4 + ab) x width + 4 per row; Gemma's (1 + weight)
   RMSNorm keeps the normalised tensor in float32, 8 x width + 4 per row (the table's `norm` row for each model
   type); LayerNorm its input and the mean and rstd (float32 on CUDA): ab x width + 8 per row;
 - a linear its input (ab), once for the linears that read one tensor (q/k/v, gate/up, a router beside the experts);
 - rotary: cos and sin, [s, rotary dims] shared by every layer (counted once, with the head);
 - attention, --attention flash (CUDA's flash / memory-efficient SDPA kernels; CPU's flash kernel alike): q, k and v
   (k and v at the key/value heads: transformers 5 passes enable_gqa when no mask is given; where a sliding window needs
   a mask, or Falcon's, k and v repeated to the query heads, a view of one key/value head, and the b x s^2 mask in
   ab), the output and the float32 logsumexp
   [b, a, s]; eager (transformers' eager_attention_forward): q, k and v repeated to the a query heads, the
   output (o_proj's input), and per score the float32 softmax (GPT-2's: in ab) and its cast to ab (none at 4 B), the
   tanh of soft-capped scores (Gemma2);
 - the MLP: its activation's input (silu, gelu, gelu_pytorch_tanh: one tensor; gelu_new four, gelu_fast seven,
   quick_gelu two: transformers/activations.py's formulas; relu, sigmoid and tanh their output, the tensor down_proj
   or the gate's product reads and keeps too: counted once), gated: act(gate) and up too, then the product down_proj
   reads;
 - MoE (transformers 5's grouped_mm experts): the router's float32 softmax and top-k indices (T x (4E + 12k + 4) B),
   the T*k gathered inputs, gate_up, act and product as above over T*k rows, the experts' outputs before their
   routing weights (ab x T*k*h) and the routing's index tensors (36 B per row);
 - dropout: a 1 B mask per element dropped on CUDA (CPU keeps the scaled noise in ab), at the sites the table's
   `dropout` census found for the model type (which config key, in the layer or outside, dropping b*s*h, b*s*i or
   the eager scores; the dropped tensor too where it is kept beside its input: GPT-2's softmax output and its PV
   matmul's input), each whose key's probability is above 0; flash/SDPA kernels keep no mask for the scores;
 - the loss (transformers' ForCausalLMLoss): logits upcast to float32, cross_entropy's log_softmax output (float32)
   saved; backward's first step holds it beside nll_loss's and log_softmax's float32 gradients: 12 B per logit, the
   peak of the head (the forward's ab + 4 + 4 is below it), + ab for Gemma2's soft-capped logits (their tanh)."""
from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ... import families
from ...census.model import Model
from ...errors import NoAnalyticModel, UsageError
from ...families import decoder_layout, get
from ...families.framework.base import ArchSpec, class_default
from ...families.framework.graph import build
from ...families.framework.ops import Op
from .autocast import expert_op, grouped_experts

# What transformers' ops save, measured from transformers and torch by fixtures/make_saved_table.py (saved_tensors_hooks
# on each ACT2FN activation and on the first layer of each decoder model type's tiny model; the file says which
# versions): read on the first plan that walks a text decoder.
_TABLE = os.path.join(os.path.dirname(families.__file__), "saved_table.json")


@functools.cache
def _table() -> Mapping[str, Any]:
    with open(_TABLE, encoding="utf-8") as f:
        table: Mapping[str, Any] = json.load(f)
    return table


def act_saves(name: str) -> tuple[float, float, bool]:
    """(tensors of the activation's width in its dtype, other bytes per element: xIELU's bool mask, whether one of
    those tensors is its output: relu's, which the op after it keeps too) the ACT2FN activation keeps for backward;
    one tensor, its input, for one the table does not know."""
    n, other, out = _table()["activations"].get(name, (1, 0, 0))
    return n, other, bool(out)


def facts(s: ArchSpec) -> Mapping[str, Any]:
    """The measured row of the model type (else of the family's name): `norm` [float32 tensors of the input's size,
    tensors in its dtype, float32 bytes per element of the width] in bfloat16, `norm_fp32` [tensors, bytes per
    width element] in float32, `softmax_fp32` (eager attention upcasts the softmax), `o_proj_copy` (under SDPA the
    linear after the attention reads a copy, not SDPA's output); {} for a model type the table lacks."""
    rows = _table()["model_types"]
    row: Mapping[str, Any] = rows.get(s.model_type) or rows.get(s.family) or {}
    return row


def eager_only(s: ArchSpec) -> str:
    """Why transformers runs the model type's attention with its own eager code whatever is asked (it refuses
    attn_implementation="sdpa" and the class has no flash-attention path: the table's sdpa_path, flash_path), else
    ''."""
    row = facts(s)
    if row.get("sdpa_path", True) is False and not row.get("flash_path"):
        return (f"transformers {_table()['transformers']} runs {s.model_type}'s attention with its eager code only "
                "(no SDPA or flash-attention path)")
    return ""


def _norm_fp32(s: ArchSpec) -> bool:
    """The norm keeps its normalised tensor in float32 (Gemma's x (1 + weight), OLMo-2's weight x hidden before the
    cast, Helium's float32 weight): two float32 tensors of the input's size in bfloat16."""
    return (facts(s).get("norm") or (0,))[0] >= 2


def _softmax_as_input(s: ArchSpec) -> bool:
    """Eager attention's softmax in the scores' dtype (GPT-2's), not float32."""
    return facts(s).get("softmax_fp32") is False


# the dropout sites of a model type without a census (`dropout` null: DiffLlama; no row of its own or of its family):
# GPT-2's names, then BERT's (hidden_dropout_prob: the embeddings' output and, in each layer, the attention's and the
# MLP's outputs); a measured model type's are its row's (ELECTRA's, RoBERTa's: their family's, BERT's)
FALLBACK_DROPOUT: tuple[Mapping[str, Any], ...] = (
    {"key": ("resid_pdrop", "hidden_dropout_prob"), "where": "layer", "per": "hidden", "count": 2, "copy": [False, False]},
    {"key": ("embd_pdrop", "hidden_dropout_prob"), "where": "outside", "per": "hidden", "count": 1, "copy": [False, False]},
    {"key": ("attn_pdrop", "attention_dropout", "attn_config.attn_pdrop", "attention_probs_dropout_prob"), "where": "layer",
     "per": "scores", "count": 1, "copy": [True, True]})
CLIP_QKV = ("clip_qkv", "attn_config.clip_qkv")
QK_NORMS = ("q_norm", "k_norm")   # norms over q and k heads, read off a linear's output   # OLMo's, DBRX's
# the activation ops of a layer the rule knows (module name words); any other makes the layer not covered
KNOWN_ACT = ("rotary", "act*", " act", "combine (x routing weight)", "sigmoid(gate) x shared", "+ residual")


@dataclass
class Saved:
    """What one layer keeps on average over the layers run (replicated and tp-sharded parts), what the model keeps
    outside them, and the rule's words."""
    replicated: float
    sharded: float
    outside: float          # final norm, lm_head input, rotary table, ids, embedding dropout mask
    logits: float           # the loss's peak, b*s*V x 12 (+ab soft-capped): vocab-parallel under tp
    rule: str
    head_rule: str


@dataclass
class Drops:
    """The dropout masks (CUDA's native_dropout: 1 B per dropped element) and the dropped tensors kept beside their
    inputs, in bytes per element of what they drop: the layer's b*s*h outputs (replicated), its b*s*i MLP
    intermediates (tp-sharded), its eager scores (tp-sharded; flash/SDPA kernels keep no mask), b*s*h outside the
    layers; the keys counted (with p > 0) in the layer and outside, and a site of a size the rule does not know."""
    hidden: float = 0.0
    intermediate: float = 0.0
    scores: float = 0.0
    outside: float = 0.0
    layer_keys: tuple[str, ...] = ()
    outside_keys: tuple[str, ...] = ()
    unknown: str = ""


def _prod(shape: Sequence[int]) -> int:
    return math.prod(shape)


def _number(s: ArchSpec, cfg: Mapping[str, Any], key: str) -> float | None:
    """The config's number under `key` ("attn_config.clip_qkv": inside a nested config, DBRX's; its class's default
    under "dbrx.attn_config"), else its class's default; None without."""
    *outer, last = key.split(".")
    sub: Any = cfg
    for o in outer:
        sub = sub.get(o) if isinstance(sub, dict) else None
    v = sub.get(last) if isinstance(sub, dict) else None
    if v is None:
        v = class_default(".".join([s.model_type, *outer]), last)
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    if not -1e300 < v < 1e300:   # a 400-digit integer, inf, nan
        raise UsageError(f"config {key} = {str(v)[:40]} is not a number the planner can use")
    return float(v)


def _flag(s: ArchSpec, cfg: Mapping[str, Any], key: str) -> bool:
    """The config's boolean under `key`, else its class's default; False without."""
    v = cfg.get(key)
    return (class_default(s.model_type, key) if v is None else v) is True


def _first(s: ArchSpec, cfg: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, float]:
    """The first of `keys` the config sets (else its class's default), with its number (a dropout probability,
    clip_qkv); (the first key, 0) without."""
    return next(((k, v) for k in keys if (v := _number(s, cfg, k)) is not None), (keys[0], 0.0))


def drops(s: ArchSpec, cfg: Mapping[str, Any], ab: float, eager: bool) -> Drops:
    """The dropout masks of the model type's measured dropout sites (the table's `dropout`: key, where, what one
    call drops, calls, the dropped tensor kept beside its input in bfloat16 and float32), each where its key's
    probability (the config's, else its class's default) is above 0; FALLBACK_DROPOUT's where the table has none."""
    d = Drops()
    sites = facts(s).get("dropout")
    for site in FALLBACK_DROPOUT if sites is None else sites:
        keys = site["key"] if isinstance(site["key"], tuple) else (site["key"],)
        if site["key"] is None:   # a probability the model fixes (no key holds it): above 0, the census saw it
            key, p = "a fixed probability", 1.0
        else:
            key, p = _first(s, cfg, keys)
        # SDPA's dropout_p, the scores' under flash/SDPA: CUDA's kernels keep the RNG state, no mask
        if p <= 0 or site["per"] == "sdpa" or (site["per"] == "scores" and not eager):
            continue
        per = site["count"] * (1 + (ab if site["copy"][ab >= 4] else 0))
        name = f"{key} ({site['count']} x {site['per']}{', and the dropped tensor' if site['copy'][ab >= 4] else ''})"
        if site["where"] == "outside" and site["per"] == "hidden":
            d.outside += per
            d.outside_keys += (name,)
        elif site["where"] == "layer" and site["per"] in ("hidden", "intermediate", "scores"):
            setattr(d, site["per"], getattr(d, site["per"]) + per)
            d.layer_keys += (name,)
        else:
            d.unknown = f"{key}'s dropout of {site['per']} ({'in' if site['where'] == 'layer' else 'outside'} the layers)"
    return d


def _norm(s: ArchSpec, op: Op, ab: float) -> float:
    """Bytes a norm op saves: the measured tensors of its input's size (float32 ones, ones in the activation dtype) and
    of its width, with the float32 rsqrt per row of an RMSNorm (LayerNorm's mean and rstd, float32 on CUDA); where
    the model type is not measured, LlamaRMSNorm's (pow's float32 input, the normalised tensor cast back) and
    nn.LayerNorm's (its input)."""
    e = _prod(op.in_shape)
    width = max(op.in_shape[-1], 1)
    rows = e // width
    rms = s.norm == "rmsnorm" or op.module.endswith(QK_NORMS)
    row = facts(s)
    if ab >= 4 and row.get("norm_fp32"):
        n32, nab, per_width = row["norm_fp32"][0], 0, row["norm_fp32"][1]
    elif ab < 4 and row.get("norm"):
        n32, nab, per_width = row["norm"]
    else:
        n32, nab, per_width = (1, 1, 0) if rms else (0, 1, 0)
        if ab >= 4 and rms:
            n32, nab = 2, 0
    return (4 * n32 + ab * nab) * e + (4 if rms else 8) * rows + per_width * width


def covered(s: ArchSpec, layer_ops: list[Op]) -> str:
    """'' when the rule knows every op of the layers, else what it does not know."""
    if s.ssm or s.latent or s.deltanet or s.short_conv or s.lightning or s.linear_layers:
        return "state-space / latent / linear-attention mixers"
    for op in layer_ops:
        if op.kind not in ("norm", "linear", "attention", "activation"):
            return f"{op.kind} ops ({op.module})"
        if op.kind == "activation" and not any(w in op.module for w in KNOWN_ACT):
            return f"the op {op.module!r}"
        if op.kind == "attention" and not ("scores (QK^T)" in op.module or "context (PV)" in op.module):
            return f"the op {op.module!r}"
    return ""


def layer_saved(s: ArchSpec, layer_ops: list[Op], ab: float, eager: bool, drop: Drops,
                parallel_residual: bool = False, rb: float | None = None) -> tuple[float, float]:
    """(replicated, sharded) bytes the layer ops save, summed over their calls, with the eager attention dropout's
    bytes per score (Drops.scores); `parallel_residual`: the MLP's norm reads the layer's input, not the attention's
    sum (GPT-NeoX's use_parallel_residual, whose op template is the sequential one); `rb`: the residual stream's and
    the norms' bytes under autocast (the float32 weights'; autocast.py), where each linear keeps its own ab cast of
    the norm's output and the softmax is float32."""
    amp = rb is not None
    rb = ab if rb is None else rb
    float32_experts = amp and grouped_experts(s)   # under autocast grouped_mm's experts run in float32
    rep = shard = 0.0
    n_ab, other, keeps_out = act_saves(s.activation)
    # the activation's output where it keeps it (relu): down_proj's input, one storage with it unless an
    # intermediate dropout comes between them
    act_out: tuple[int, ...] | None = None
    norm_out: tuple[int, ...] | None = None
    norm_read = False
    prev: Op | None = None
    d = s.head_dim
    dv = s.v_head_dim or d
    row = facts(s)
    lay = decoder_layout(s)
    positions = lay.positions if lay is not None else None
    alibi, rotary = positions == "alibi", positions == "rotary"
    # q a view into the fused q/k/v output where no rotary makes it anew (ALiBi's Falcon-RW): SDPA keeps q, so the
    # whole output stays (k and v reach it as the cache's copies)
    fused_view = lay is not None and lay.fused_qkv and not rotary
    # a parallel layer (GPT-J, CodeGen, Phi: x + attn(ln x) + mlp(ln x)): the MLP's first linear reads the norm's
    # output too, which the attention's linears already keep
    parallel = parallel_residual or lay is not None and lay.placement == "parallel"
    beside: tuple[int, ...] | None = None   # the norm's output while the attention runs beside the MLP
    for op in layer_ops:
        c = op.calls
        xb = rb if float32_experts and expert_op(op) else ab
        if op.kind == "norm":
            # (q and k norms read a linear's output, in ab under autocast too)
            rep += c * _norm(s, op, ab if op.module.endswith(QK_NORMS) else rb)
            if beside is not None and s.norm == "layernorm":   # a parallel MLP's own LayerNorm (GPT-NeoX's
                rep -= c * rb * _prod(op.in_shape)   # post_attention_layernorm, Falcon's ln_mlp) keeps the layer's
                # input, which the attention's norm keeps
            norm_out, norm_read = op.out_shape, False
        elif op.kind == "linear":
            parent = op.module.rsplit(".", 1)[0]
            after_attn = prev is not None and prev.kind == "attention"
            same = (prev is not None and prev.kind == "linear" and prev.in_shape == op.in_shape
                    and prev.module.rsplit(".", 1)[0] == parent)
            if "(router)" in op.module or (norm_out is not None and op.in_shape == norm_out):
                if not norm_read or amp:   # (under autocast each linear casts the float32 output anew)
                    rep += c * ab * _prod(op.in_shape)
                    norm_read = True
                if "(router)" in op.module:
                    t = _prod(op.in_shape[:-1])
                    shard += c * t * (4 * (s.experts or 1) + 12 * (s.top_k or 1) + 4)
            elif same:
                pass
            elif after_attn and not eager and not row.get("o_proj_copy"):
                # o_proj reads the SDPA output, which SDPA keeps (a partial rotary's cat: a transposed copy)
                norm_out = beside
            elif act_out is not None and op.in_shape == act_out and not drop.intermediate:
                pass   # the activation's output, which it keeps
            else:
                shard += c * xb * _prod(op.in_shape)
                if after_attn:
                    norm_out = beside
        elif op.kind == "activation":
            m = op.module
            out = _prod(op.out_shape)
            if "rotary" in m or "+ residual" in m:   # (an add keeps nothing)
                pass
            elif "act*" in m:   # and the product's two inputs: act(gate), the activation's output where it keeps it
                shard += c * out * (xb * (n_ab + 2 - keeps_out) + other)
            elif "combine (x routing weight)" in m:
                rows = op.in_shape[0]
                shard += c * (xb * _prod(op.in_shape) + 36 * rows)
            elif "sigmoid(gate) x shared" in m:
                shard += c * (ab * out + 4 * _prod(op.out_shape[:-1]))
            else:
                shard += c * out * (ab * n_ab + other)
                act_out = op.out_shape if keeps_out else None
        elif op.kind == "attention":
            if parallel and norm_out is not None:
                beside = norm_out
            norm_out = None   # what follows reads the attention's output, not the norm's (a parallel MLP's: after o_proj)
            b, a, n = op.in_shape[0], op.in_shape[1], op.in_shape[2]
            # SDPA gets a mask where a sliding window cuts the keys (or head_dim > 256; Falcon's always: the table's
            # sdpa_mask): transformers then repeats k and v to the query heads (sdpa_attention.py use_gqa_in_sdpa,
            # repeat_kv) and the kernel keeps the repeated ones, copies where there are several key/value heads (one
            # head's repeat is a view of it)
            window = s.sliding_window if "sliding" in op.module or (s.sliding_window and not s.sliding_layers) else None
            kv = s.kv_heads or s.heads
            repeated = (window and window <= n) or d > 256 or row.get("sdpa_mask")
            g = (a if kv > 1 else 1) if repeated else kv
            # under autocast the rotary leaves k in float32 (16-bit k times float32 cos and sin): repeated, its cast
            # to ab is a copy at every query head, even of one key/value head (Falcon's multi-query)
            gk = a if amp and repeated and rotary else g
            if "scores (QK^T)" in op.module:
                nk = op.out_shape[-1]
                if eager:   # q and k as the scores' matmul reads them (GPT-Neo, GPT-J, CodeGen: upcast to float32)
                    qk = 4 if row.get("qk_fp32") and not amp else ab
                    per = (ab if _softmax_as_input(s) and not amp else 4 + (ab if ab < 4 else 0))
                    per += ab if s.attn_softcap else 0
                    per += drop.scores
                    shard += c * (qk * b * a * (n + nk) * d + per * b * a * n * nk)
                else:   # with a mask (a window's, Falcon's always), SDPA keeps it too, in the scores' dtype (autocast
                    # casts it to ab, a copy in each layer); ALiBi's bias is that mask, one per head (Falcon-RW), which
                    # the model builds once for every layer: in the layer only as autocast's cast (else `saved`)
                    masked = ab * b * n * nk if (window and window <= nk) or row.get("sdpa_mask") or alibi else 0
                    masked *= (a if amp else 0) if alibi else 1
                    fused = 2 * kv * nk if fused_view else 0
                    shard += c * (ab * b * (a * n + gk * nk + fused) * d + 4 * b * a * n + masked)
            else:
                nk = op.in_shape[-1]
                if eager:
                    shard += c * ab * b * a * nk * dv
                else:
                    shard += c * ab * b * (g * nk + a * n) * dv
        if op.kind != "activation":
            act_out = None
        prev = op
    return rep, shard


def saved(s: ArchSpec, ops: list[Op], layer_ops: list[Op], last_ops: list[Op], b: int, n: int, ab: float, eager: bool,
          layers_run: int, cfg: Mapping[str, Any], rb: float | None = None) -> Saved | None:
    """The text model's saved bytes, or None where its layers hold ops the rule does not know (Korthikanti's
    rule then); `rb`: under autocast, the float32 residual stream's bytes (layer_saved)."""
    if covered(s, layer_ops):
        return None
    drop = drops(s, cfg, ab, eager)
    if drop.unknown:   # a dropout of a size the rule does not scale (Inkling's attention's, CPM-Ant's)
        return None
    rep, shard = layer_saved(s, layer_ops, ab, eager, drop, _flag(s, cfg, "use_parallel_residual"), rb)
    amp = rb is not None
    rb = ab if rb is None else rb
    L = max(layers_run, 1)
    T = b * n
    _, clip = _first(s, cfg, CLIP_QKV)
    if clip > 0:   # OLMo's and DBRX's clip_qkv: the fused q, k, v clamped, autograd keeps them as they were before
        shard += L * ab * T * (s.heads + 2 * s.kv_heads) * s.head_dim
    # dropout of the layer's outputs (after the attention's and the MLP's output projections) and of its MLP's
    # intermediate: 1 B masks on CUDA
    rep += L * drop.hidden * T * s.hidden
    shard += L * drop.intermediate * T * s.intermediate
    outside = sum(_norm(s, op, rb) * op.calls for op in last_ops if op.kind == "norm")
    outside += ab * T * s.hidden           # lm_head's input, the final norm's output (its cast under autocast)
    outside += 16 * T                      # input ids (embedding) and labels (nll_loss), int64
    rot = next((op for op in ops if op.module.startswith("rotary_emb")), None)
    if rot is not None:
        outside += 2 * rb * n * rot.out_shape[-1] * 2   # cos and sin over the rotated dims, [1, s, dims]
        # cos and sin derived again in every layer (Helium's repeat_interleave), each kept by the layer
        rep += L * (facts(s).get("rotary_copies") or 0) * rb * n * rot.out_shape[-1] * 2
    outside += drop.outside * T * s.hidden
    lay = decoder_layout(s)
    alibi_once = lay is not None and lay.positions == "alibi" and not eager and not amp
    if alibi_once:   # the ALiBi mask SDPA keeps, one storage for every layer
        outside += ab * b * s.heads * n * n
    v_bytes = 12 + (ab if s.logit_softcap else 0)
    as_input = _softmax_as_input(s) and not amp
    attn = ("eager: q, k, v repeated to the heads, the output, per score "
            f"{'the softmax (in ab)' if as_input else 'the float32 softmax'}"
            f"{' and its cast' if ab < 4 and not as_input else ''}"
            f"{', the soft-cap tanh' if s.attn_softcap else ''}"
            if eager else "flash/SDPA: q, k, v (kv heads), the output, float32 logsumexp")
    norm = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}.get(s.norm, s.norm) + (
        ", normalised in float32" if _norm_fp32(s) else "")
    linears = ("each linear its own autocast cast of a float32 input" if amp else "linear inputs once per tensor")
    rule = (f"transformers' saved tensors per layer at {ab:g} B{f' (autocast; norms at {rb:g} B)' if amp else ''} "
            f"({norm}: fp32 input + normalised; {linears}; {attn}; "
            f"the MLP's activation input{', act and up' if s.gated_mlp else ''} and down_proj's input"
            f"{'; MoE: router softmax and indices, T*k gathered rows through the experts' if s.experts else ''}"
            f"{'; 1 B dropout masks of ' + ', '.join(drop.layer_keys) if drop.layer_keys else ''}"
            f"{'; q, k, v before clip_qkv' if clip > 0 else ''}): "
            f"{(rep + shard) / L / T:,.1f} B per token per layer on average")
    head_rule = (f"b x s x V x {v_bytes:g} B / tp: cross_entropy's float32 log_softmax output and, at backward's start, "
                 f"nll_loss's and log_softmax's float32 gradients{' + the soft-capped logits tanh' if s.logit_softcap else ''}; "
                 f"+ {outside:,.0f} B replicated (final norm, lm_head input, ids and labels"
                 f"{', rotary cos/sin' if rot is not None else ''}"
                 f"{', the ALiBi mask every layer reads' if alibi_once else ''}"
                 f"{', 1 B dropout masks of ' + ', '.join(drop.outside_keys) if drop.outside_keys else ''})")
    return Saved(rep / L, shard / L, outside, b * n * s.vocab * v_bytes, rule, head_rule)


# a layer group's label in the op templates (layers[32], layers[1 sliding]): planner.LAYER_GROUP
LAYER_OP = re.compile(r"\[\d+( [a-z][a-z ,]*)?\]")


def text_saved(m: Model, b: int, n: int, ab: float, eager: bool, layers_run: int, rb: float | None = None) -> Saved | None:
    """`saved` for a text decoder of the op templates (one that caches keys and values, not an encoder-decoder), or
    None: an encoder, an encoder-decoder, a model the meta path answers, a layer the rule does not know."""
    s = m.spec
    family = get(s.family)
    if m.oracle is not None or family.seq2seq(s) or not family.kv_cache or s.decoder_layers or not s.heads:
        return None
    try:
        ops = build(s, b, n, a_bytes=int(ab))
    except NoAnalyticModel:   # a model whose forward the op template refuses to describe (LongCat without experts)
        return None
    layer_ops = [op for op in ops if op.bucket not in ("embedding", "cls", "pooler") and LAYER_OP.search(op.module)]
    last_ops = [op for op in ops if op.bucket not in ("embedding", "cls", "pooler") and not LAYER_OP.search(op.module)]
    if not layer_ops:
        return None
    try:
        return saved(s, ops, layer_ops, last_ops, b, n, ab, eager, layers_run, m.config or {}, rb)
    except UsageError as e:   # a config value the activations cannot use (_number): name the file
        raise UsageError(f"{m.config_path or m.path}: {e}") from None


def korthikanti(s: ArchSpec, b: int, n: int, ab: float, t: int, eager: bool, meta: bool) -> tuple[float, str]:
    """Korthikanti et al. 2022's per-layer bytes for Megatron's fused GPT layer (16-bit, scaled to ab), and its rule:
    the planner's figure for the text models saved.py does not walk (encoders, encoder-decoders, state-space,
    latent and linear-attention mixers, models the meta path answers)."""
    h, a = s.hidden, s.heads
    scale = ab / 2
    if eager:
        per_layer = n * b * h * (10 + 24 / t + 5 * a * n / (h * t)) * scale
        formula = "s*b*h*(10 + 24/tp + 5*a*s/(h*tp))"
    else:   # flash attention keeps no s x s scores, softmax output or attention-dropout mask (the 5as/h term)
        per_layer = n * b * h * (10 + 24 / t) * scale
        formula = "s*b*h*(10 + 24/tp), flash attention: no 5*a*s/h score term"
    why = "the model the meta path answers" if meta else "no op-by-op rule for this model's layers"
    return per_layer, (f"Korthikanti et al. 2022 (Megatron's fused GPT layer; {why}) with tp={t}: {formula} B per layer "
                       f"at 16-bit{f', x {scale:g} for {ab:g}-byte activations' if scale != 1 else ''}")
