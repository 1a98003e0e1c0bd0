"""The LLaMA-shaped decoder as one typed description (DecoderLayout) and one walk over it, from which every
view of the architecture is derived: the op template (FLOPs, parameters, memory), the expected tensors (names
and shapes, as save_pretrained writes them), the tensor-name signature, the GGUF tensor-name table and the
shape look-ups of a checkpoint without config.json. A family laid out so is a layout and a few lines
(llama.py, qwen3.py, olmo.py, phi3.py, glm.py, smollm3.py, arcee.py, mixtral.py, qwen_moe.py, gemma.py,
deepseek.py, gpt_oss.py, generic.py).

The walk (`walk`) follows transformers' modeling_llama.py forward in execution order: embed_tokens, the
rotary table, then per layer the attention (norm, q/k/v or fused qkv, q/k norms, rotary, the two bmm's, o)
and the MLP (norm, gate/up or fused gate_up or routed experts, act, down), the final norm and the LM head.
Each parameterised module it meets is recorded once (`Module`: its path under the body with `{bid}` for the
layer, its llama.cpp name, its parameter shapes, the layers that hold it) while the same call writes its op
to the Builder, so a path, a shape or a GGUF name is never spelled twice.

Variants are typed fields, not flags: a misspelt one is a TypeError (and a mypy error), never a silent 0."""
from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from ...errors import NoAnalyticModel, UsageError
from . import decoders, infer
from .archspec import ArchSpec, Latent
from .base import Cfg, Shapes, Tensors, TieRule, decoder_head_rules, decoder_kv_cache
from .ops import Builder, ew_cost

# rmsnorm: RMSNorm with a weight; layernorm: LayerNorm with weight and bias; layernorm_nobias: weight only;
# none: a LayerNorm without parameters (OLMo's elementwise_affine=False)
Norm = Literal["rmsnorm", "layernorm", "layernorm_nobias", "none"]
# pre: a norm before attention and before the MLP (LLaMA); post: after each, none before (OLMo2);
# sandwich: both (GLM-4, Gemma2); parallel: one norm before attention whose output the MLP also reads, both
# added to the residual (Cohere)
Placement = Literal["pre", "post", "sandwich", "parallel"]
# head: RMSNorm over each head's d (Qwen3); width: over the whole q / k projection (OLMo2)
QKNorm = Literal["none", "head", "width"]
# gated: act(gate) x up, down (LLaMA); plain: act(up), down (Arcee); routed: a router over gated experts (Mixtral)
MLP = Literal["gated", "plain", "routed"]
# a routed MLP's shared expert, a gated MLP of ArchSpec.shared_intermediate run on every token: gated, scaled by
# sigmoid(shared_expert_gate(x)) (Qwen2-MoE); summed, added to the experts' output (DeepSeek)
Shared = Literal["none", "gated", "summed"]
# a routed MLP's router: linear, its matmul (Mixtral, Qwen-MoE, DeepSeek); topk_softmax, biased, the top-k of its
# logits and a softmax over those k counted too (gpt-oss's GptOssTopKRouter)
Router = Literal["linear", "topk_softmax"]
# a layer's token mixer: full and sliding softmax attention are walked per layer today (DeepSeek's latent attention,
# on every layer, is DecoderLayout.latent); the others name what the next architectures need (Llama 4's chunked,
# Qwen3-Next's linear, Jamba's state-space)
Attention = Literal["full", "sliding", "chunked", "linear", "state_space", "latent"]
# the layers without rotary (NoPE): none; flags: the config's no_rope_layers, 0 on such a layer (SmolLM3); global:
# the full-attention layers when some layers slide (Exaone 4, Cohere2: rotary only on the sliding ones)
NoPE = Literal["none", "flags", "global"]


# The tiny sizes the layout families' Samples build their models at (each adds its own keys: head_dim, pad_token_id)
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
            vocab_size=99, max_position_embeddings=64)


@dataclass(frozen=True)
class Paths:
    """Module names as the modeling file names them, written once (the LLaMA names by default). Norms by
    role: attn_in before attention, attn_out after it, mlp_in before the MLP, mlp_out after it."""
    body: str = "model"                   # the base model inside *ForCausalLM
    embed: str = "embed_tokens"
    layers: str = "layers"
    attn: str = "self_attn"
    q: str = "q_proj"
    k: str = "k_proj"
    v: str = "v_proj"
    qkv: str = "qkv_proj"
    o: str = "o_proj"
    q_norm: str = "q_norm"
    q_a: str = "q_a_proj"                 # latent attention: q_a, q_a_norm, q_b (or q), kv_a, kv_a_norm, kv_b, o
    q_a_norm: str = "q_a_layernorm"
    q_b: str = "q_b_proj"
    kv_a: str = "kv_a_proj_with_mqa"
    kv_a_norm: str = "kv_a_layernorm"
    kv_b: str = "kv_b_proj"
    k_norm: str = "k_norm"
    mlp: str = "mlp"
    gate: str = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"
    gate_up: str = "gate_up_proj"
    router: str = "gate"                  # routed: {mlp}.{router} and {mlp}.{experts}.N.{gate,up,down}
    sinks: str = "sinks"                  # {attn}.{sinks}, a parameter without .weight
    experts: str = "experts"
    shared: str = "shared_expert"         # {mlp}.{shared}.{gate,up,down}, {mlp}.{shared_gate}
    shared_gate: str = "shared_expert_gate"
    attn_in: str = "input_layernorm"
    attn_out: str = "post_attention_layernorm"
    mlp_in: str = "post_attention_layernorm"
    mlp_out: str = "post_feedforward_layernorm"
    norm: str = "norm"
    lm_head: str = "lm_head"


@dataclass(frozen=True)
class BiasKeys:
    """The config keys that switch the biases on (LLaMA's by default): q/k/v, o_proj, the MLP."""
    qkv: str = "attention_bias"
    o: str = "attention_bias"
    mlp: str = "mlp_bias"


@dataclass(frozen=True)
class DecoderLayout:
    """What one LLaMA-shaped architecture is. Biases left None follow the config (the keys `bias_keys` names:
    attention_bias on q, k, v and o; mlp_bias); True / False where the model fixes them (Qwen2's biased q/k/v,
    unbiased o)."""
    norm: Norm = "rmsnorm"
    placement: Placement = "pre"
    qk_norm: QKNorm = "none"
    latent: bool = False                  # multi-head latent attention (ArchSpec.latent's sizes) in place of q/k/v
    fused_qkv: bool = False
    fused_gate_up: bool = False
    mlp: MLP = "gated"
    shared: Shared = "none"
    router: Router = "linear"
    # routed: the experts held fused as 3-D parameters without .weight, gate and up interleaved (gpt-oss's
    # GptOssExperts: gate_up_proj [E, h, 2f], down_proj [E, f, h], their biases), their GLU clamped
    fused_experts: bool = False
    sinks: bool = False                   # attention sinks: a learned logit per head, one more softmax column (gpt-oss)
    # routed: the layers ArchSpec.dense_layers lists run a dense gated MLP of `intermediate` (Qwen-MoE's
    # mlp_only_layers and decoder_sparse_step, DeepSeek's first_k_dense_replace)
    dense_layers: bool = False
    qkv_bias: bool | None = None
    o_bias: bool | None = None
    mlp_bias: bool | None = None
    # the config class's partial_rotary_factor default (GLM-4 0.5, Phi-3 1.0); None: no such field, all of head_dim
    partial_rotary: float | None = None
    nope: NoPE = "none"                   # which layers apply no rotary
    local_rope: bool = False              # a second rotary table for the sliding layers (Gemma3's rope_local_base_freq)
    embed_scale: bool = False             # the embedding output times sqrt(hidden_size) (Gemma)
    # the config's attn_logit_softcapping / final_logit_softcapping, when set, soft-cap the scores / logits (Gemma2)
    softcap: bool = False
    tied_default: bool = False            # the config class's tie_word_embeddings default
    bias_keys: BiasKeys = BiasKeys()
    paths: Paths = Paths()
    # llama.cpp names its converter gives this architecture in place of LLaMA's, None where it writes no such
    # tensor (gguf-py MODEL_TENSORS: Seed-OSS's mlp_in norm is post_attention_norm; Command-R has no output)
    gguf_renames: tuple[tuple[str, str | None], ...] = ()
    # (config key, value): the switches whose other values add parts the layout does not describe (Cohere's
    # use_qk_norm false); another value is NoAnalyticModel, so the meta path answers it
    requires: tuple[tuple[str, Any], ...] = ()

    def gguf(self, name: str) -> str | None:
        return dict(self.gguf_renames).get(name, name)

    def __post_init__(self) -> None:
        for name, kind in (("norm", Norm), ("placement", Placement), ("qk_norm", QKNorm), ("mlp", MLP), ("shared", Shared),
                           ("router", Router), ("nope", NoPE)):
            if getattr(self, name) not in get_args(kind):
                raise TypeError(f"DecoderLayout.{name} = {getattr(self, name)!r} is not one of {get_args(kind)}")


@dataclass(frozen=True)
class Module:
    """A parameterised module the walk met: its path (under the body unless top; `{bid}` the layer, `{xid}`
    the routed expert), its llama.cpp name (`{bid}` the layer; experts stacked into one), its parameters (suffix
    "": the path is the parameter's own name, as gpt-oss's sinks and fused experts)."""
    path: str
    gguf: str | None
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    layers: tuple[int, ...] = ()
    experts: int = 0
    top: bool = False                     # outside the body (the LM head)


class _Walk:
    """Records each module and writes its op; `layers` the layers the current part runs in."""

    def __init__(self, B: Builder, lay: DecoderLayout):
        self.B, self.s, self.lay, self.p = B, B.s, lay, lay.paths
        self.tok = (B.b, B.seq)
        self.modules: list[Module] = []

    def label(self, sub: str, layers: tuple[int, ...]) -> str:
        return f"{self.p.layers}[{len(layers)}].{sub}"

    def record(self, sub: str, gguf: str | None, shapes: tuple[tuple[str, tuple[int, ...]], ...],
               layers: tuple[int, ...] | None, experts: int = 0) -> None:
        path = sub if layers is None else f"{self.p.layers}.{{bid}}.{sub}"
        gguf = self.lay.gguf(gguf) if gguf is not None else None
        g = gguf if layers is None or gguf is None else f"blk.{{bid}}.{gguf}"
        self.modules.append(Module(path, g, shapes, layers or (), experts))

    def linear(self, sub: str, gguf: str, fin: int, fout: int, bias: bool, layers: tuple[int, ...],
               tokens: tuple[int, ...] | None = None, label: str | None = None, experts: int = 0) -> None:
        shapes = (("weight", (fout, fin)),) + ((("bias", (fout,)),) if bias else ())
        self.record(sub, gguf, shapes, layers, experts)
        L = len(layers)
        self.B.linear(label or self.label(sub, layers), "encoder", tokens or self.tok, fin, fout, bias, L,
                      copies=L * experts if experts else None, active_copies=L * self.s.top_k if experts else None)

    def norm(self, sub: str, gguf: str | None, dim: int, layers: tuple[int, ...] | None, residual: bool = True,
             tokens: tuple[int, ...] | None = None) -> None:
        kind, calls = self.lay.norm, len(layers) if layers is not None else 1
        module = sub if layers is None else self.label(sub, layers)
        if kind == "none":
            decoders.plain_norm(self.B, module, tokens or self.tok, dim, calls, residual)
            return
        bias = kind == "layernorm"
        self.record(sub, gguf, (("weight", (dim,)),) + ((("bias", (dim,)),) if bias else ()), layers)
        self.B.norm(module, "encoder", tokens or self.tok, dim, calls, residual=residual,
                    kind="rmsnorm" if kind == "rmsnorm" else "layernorm", bias=bias)


def joined(name: str, suffix: str) -> str:
    """A module's parameter name (or llama.cpp tensor name): `name.suffix`, or `name` for a suffix ""."""
    return f"{name}.{suffix}" if suffix else name


def attention_kinds(s: ArchSpec) -> tuple[Attention, ...]:
    """Each layer's attention: sliding on ArchSpec.sliding_layers (every layer when that is empty and a
    window is set), full elsewhere: the two kinds the walk has today (ops.window_groups splits its attention
    by them); a layout family with another kind adds it here and a branch in `walk`."""
    marked = set(s.sliding_layers)
    return tuple("sliding" if s.sliding_window and (not marked or i in marked) else "full" for i in range(s.layers))


def walk(B: Builder, lay: DecoderLayout) -> list[Module]:
    """The forward of `lay` at B.s's sizes: writes its ops to B and returns the modules it met."""
    s = B.s
    w, p = _Walk(B, lay), lay.paths
    h, a, g, d, f, L = s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, s.layers
    rot = s.rope_dim or d
    every = tuple(range(L))
    w.record(p.embed, "token_embd", (("weight", (s.vocab, h)),), None)
    B.embedding(p.embed, "embedding", s.vocab, h, B.seq)
    if lay.embed_scale:
        B.add(f"{p.embed} x sqrt(hidden_size)", "activation", "embedding", 1, w.tok + (h,), w.tok + (h,), ew=B.b * B.seq * h)
    for table in ("rotary_emb", "rotary_emb_local") if lay.local_rope else ("rotary_emb",):
        decoders.rotary(B, rot, table)
    at = f"{p.attn}."
    before, after = lay.placement in ("pre", "sandwich", "parallel"), lay.placement in ("post", "sandwich")
    if before:
        w.norm(p.attn_in, "attn_norm", h, every, residual=lay.placement in ("pre", "parallel"))
    if lay.latent:
        _latent(w, every)
    else:
        if lay.fused_qkv:
            w.linear(at + p.qkv, "attn_qkv", h, (a + 2 * g) * d, s.qkv_bias, every)
        else:
            for sub, gguf, width in ((p.q, "attn_q", a), (p.k, "attn_k", g), (p.v, "attn_v", g)):
                w.linear(at + sub, gguf, h, width * d, s.qkv_bias, every)
        for sub, gguf, heads in ((p.q_norm, "attn_q_norm", a), (p.k_norm, "attn_k_norm", g)):
            if lay.qk_norm == "head":      # Qwen3: over each head's d
                w.norm(at + sub, gguf, d, every, residual=False, tokens=w.tok + (heads,))
            elif lay.qk_norm == "width":   # OLMo2: over the whole projection
                w.norm(at + sub, gguf, heads * d, every, residual=False)
        if roped := L - len(s.nope_layers):   # SmolLM3's NoPE layers apply none
            decoders.rope_apply(B, f"{p.layers}[{roped}].{p.attn} rotary", a + g, rot, roped)
        # GQA: the g K/V heads are repeated to a heads before the bmm, so the bmm's are a-headed; sliding and full
        # layers apart (ops.window_groups): only their unmasked pairs differ; scale and mask on every score, and
        # soft-capping, tanh(x / cap) x cap
        B.causal_self_attention(f"{p.layers}[{{layers}}].{p.attn}", "encoder", a, d,
                                2 + (ew_cost("tanh") + 2 if s.attn_softcap else 0) + (2 if lay.sinks else 0))
        if lay.sinks:   # one more column in each row of every head's scores (cat, max-subtract, softmax), dropped after
            w.record(at + p.sinks, "attn_sinks", (("", (a,)),), every)
            B.add(w.label(f"{p.attn}.{p.sinks} (a logit per head, one softmax column)", every), "attention", "encoder", L,
                  (a,), (B.b, a, B.seq, 1), params=a * L, ew=B.b * a * B.seq * (ew_cost("softmax") + 3), weights_per_call=a)
        w.linear(at + p.o, "attn_output", a * d, h, s.o_bias, every)
    if after:
        w.norm(p.attn_out, "post_attention_norm", h, every)
    if before and lay.placement != "parallel":
        w.norm(p.mlp_in, "ffn_norm", h, every, residual=lay.placement == "pre")
    routed = lay.mlp == "routed"
    dense = tuple(i for i in every if i in s.dense_layers) if routed and lay.dense_layers else () if routed else every
    if sparse := tuple(i for i in every if i not in dense):
        _routed(w, sparse)
    if dense:
        _mlp(w, dense, "gated" if routed else lay.mlp, f)
    if after:
        w.norm(p.mlp_out, "post_ffw_norm", h, every)
    if lay.placement == "parallel":   # x + attn(ln x) + mlp(ln x): attn_in's residual add, then the MLP's
        B.add(w.label(f"{p.mlp} + residual", every), "activation", "encoder", L, w.tok + (h,), w.tok + (h,), ew=B.b * B.seq * h)
    w.norm(p.norm, "output_norm", h, None, residual=False)
    if s.head == "lm":
        w.modules.append(Module(p.lm_head, lay.gguf("output"), (("weight", (s.vocab, h)),), top=True))
        decoders.lm_head(B, p.lm_head, p.embed)
        if s.logit_softcap:
            B.add("final logit soft-capping (tanh(x / cap) x cap)", "activation", "cls", 1, w.tok + (s.vocab,),
                  w.tok + (s.vocab,), ew=B.b * B.seq * s.vocab * (ew_cost("tanh") + 2))
    return w.modules


def _latent(w: _Walk, layers: tuple[int, ...]) -> None:
    """DeepSeek's multi-head latent attention (modeling_deepseek_v3.py): queries through q_a_proj, its RMSNorm and
    q_b_proj (one q_proj without a query LoRA); keys and values from kv_a_proj_with_mqa (the latent and one shared
    rope key), the latent's RMSNorm and kv_b_proj (per head k_nope and v); rotary on the a query heads' and the
    shared key's rope dims; eager attention's scores over qk_nope + qk_rope dims, its context over v_head_dim."""
    s, p, B = w.s, w.p, w.B
    assert s.latent is not None, "a latent layout's spec gives its sizes (ArchSpec.latent)"
    h, a, d, rope, L = s.hidden, s.heads, s.head_dim, s.rope_dim, len(layers)
    ql, kvl, v = s.latent.q_lora_rank, s.latent.kv_lora_rank, s.latent.v_head_dim
    at = f"{p.attn}."
    if ql:
        w.linear(at + p.q_a, "attn_q_a", h, ql, s.qkv_bias, layers)
        w.norm(at + p.q_a_norm, "attn_q_a_norm", ql, layers, residual=False)
        w.linear(at + p.q_b, "attn_q_b", ql, a * d, False, layers)
    else:
        w.linear(at + p.q, "attn_q", h, a * d, False, layers)
    w.linear(at + p.kv_a, "attn_kv_a_mqa", h, kvl + rope, s.qkv_bias, layers)
    w.norm(at + p.kv_a_norm, "attn_kv_a_norm", kvl, layers, residual=False)
    w.linear(at + p.kv_b, "attn_kv_b", kvl, a * (d - rope + v), False, layers)
    decoders.rope_apply(B, w.label(f"{p.attn} rotary (q_pe, k_pe)", layers), a + 1, rope, L)
    B.causal_self_attention(f"{p.layers}[{{layers}}].{p.attn}", "encoder", a, d, layers=layers, v_dim=v)
    w.linear(at + p.o, "attn_output", a * v, h, s.o_bias, layers)


def _mlp(w: _Walk, layers: tuple[int, ...], kind: MLP, f: int, sub: str = "", gguf: str = "") -> None:
    """A dense MLP at {mlp}.{sub} (sub: "" or the shared expert's "shared_expert."), llama.cpp's ffn_*{gguf}."""
    s, p, B = w.s, w.p, w.B
    h, pre = s.hidden, f"{p.mlp}.{sub}"
    if kind == "plain":
        w.linear(pre + p.up, "ffn_up" + gguf, h, f, s.mlp_bias, layers)
    elif w.lay.fused_gate_up:      # [gate; up] in one weight, kept fused by llama.cpp as ffn_up
        w.linear(pre + p.gate_up, "ffn_up" + gguf, h, 2 * f, s.mlp_bias, layers)
    else:
        w.linear(pre + p.gate, "ffn_gate" + gguf, h, f, s.mlp_bias, layers)
        w.linear(pre + p.up, "ffn_up" + gguf, h, f, s.mlp_bias, layers)
    gated = kind != "plain"
    B.activation(w.label(f"{pre.rstrip('.')} act" + ("*up" if gated else ""), layers), "encoder", w.tok, f, s.activation,
                 len(layers), gated=gated)
    w.linear(pre + p.down, "ffn_down" + gguf, f, h, s.mlp_bias, layers)


def _routed(w: _Walk, layers: tuple[int, ...]) -> None:
    """A router over E gated experts of which each token visits k (Mixtral): k rows per token through each
    expert projection (transformers 5's grouped_mm and the eager loop alike), then the weighted combine.
    llama.cpp stacks each projection's experts into one 3-D blk.N.ffn_{gate,up,down}_exps [E, out, in]."""
    s, p, B = w.s, w.p, w.B
    h, f, E, k, L = s.hidden, s.moe_intermediate or s.intermediate, s.experts, s.top_k, len(layers)
    moe, rows = p.mlp, (B.b * B.seq * k,)
    topk = w.lay.router == "topk_softmax"
    w.linear(f"{moe}.{p.router}", "ffn_gate_inp", h, E, topk, layers, label=w.label(f"{moe}.{p.router} (router)", layers))
    if topk:
        B.add(w.label(f"{moe}.{p.router} top-k, softmax", layers), "activation", "encoder", L, (B.b, B.seq, E),
              (B.b, B.seq, k), ew=B.b * B.seq * (E + k * ew_cost("softmax")))
    x = f"{moe}.{p.experts}"
    if w.lay.fused_experts:      # llama.cpp's converter splits gate_up_proj: no name of its own
        for sub, gguf, shape in ((p.gate_up, None, (E, h, 2 * f)), (p.down, "ffn_down_exps", (E, f, h))):
            w.record(f"{x}.{sub}", gguf, (("", shape),), layers)
        if s.mlp_bias:
            w.record(f"{x}.{p.gate_up}_bias", None, (("", (E, 2 * f)),), layers)
            w.record(f"{x}.{p.down}_bias", None, (("", (E, h)),), layers)
        for sub, fin, fout in ((p.gate_up, h, 2 * f), (p.down, f, h)):
            B.linear(w.label(f"{x}[{E}].{sub} (top-{k})", layers), "encoder", rows, fin, fout, s.mlp_bias, L, L * E,
                     active_copies=L * k)
            if sub == p.gate_up:
                B.activation(w.label(f"{x} clamp, gate x sigmoid(1.702 gate) x (up + 1)", layers), "encoder", rows, f,
                             "clamped_swiglu", L, gated=True)
    else:
        for sub, gguf, fin, fout in ((p.gate, "ffn_gate_exps", h, f), (p.up, "ffn_up_exps", h, f)):
            w.linear(f"{x}.{{xid}}.{sub}", gguf, fin, fout, s.mlp_bias, layers, rows,
                     w.label(f"{x}[{E}].{sub} (top-{k})", layers), experts=E)
        B.activation(w.label(f"{x} act*{p.up}", layers), "encoder", rows, f, s.activation, L, gated=True)
        w.linear(f"{x}.{{xid}}.{p.down}", "ffn_down_exps", f, h, s.mlp_bias, layers, rows,
                 w.label(f"{x}[{E}].{p.down} (top-{k})", layers), experts=E)
    B.add(w.label(f"{moe}.combine (x routing weight)", layers), "activation", "encoder", L, rows + (h,),
          (B.b, B.seq, h), ew=B.b * B.seq * k * h * 2)
    if w.lay.shared == "none" or not s.shared_intermediate:
        return
    _mlp(w, layers, "gated", s.shared_intermediate, p.shared + ".", "_shexp")
    tok = (B.b, B.seq, h)
    if w.lay.shared == "gated":
        w.linear(f"{moe}.{p.shared_gate}", "ffn_gate_inp_shexp", h, 1, False, layers)
        B.add(w.label(f"{moe} sigmoid(gate) x shared + routed", layers), "activation", "encoder", L, tok, tok,
              ew=B.b * B.seq * (ew_cost("silu") + 2 * h))
    else:
        B.add(w.label(f"{moe} shared + routed", layers), "activation", "encoder", L, tok, tok, ew=B.b * B.seq * h)


def modules(lay: DecoderLayout, s: ArchSpec) -> list[Module]:
    return walk(Builder(s, 1, 1, 1, 1, 1), lay)


def expected_tensors(lay: DecoderLayout, s: ArchSpec) -> Shapes:
    """Every parameter name and shape, under the body prefix for a model with a head."""
    body = "" if s.head == "base" else lay.paths.body + "."
    out: Shapes = {}
    for m in modules(lay, s):
        for i in m.layers or (0,):
            for x in range(m.experts or 1):
                path = m.path.format(bid=i, xid=x)
                for suffix, shape in m.shapes:
                    out[("" if m.top else body) + joined(path, suffix)] = shape
    return out


@functools.cache
def _every_module(lay: DecoderLayout) -> tuple[Module, ...]:
    """The modules of a tiny spec whose walk meets every module the layout can have (head, biases, experts)."""
    s = ArchSpec(family="", model_type="", source="", head="lm", architecture=None, layers=2, hidden=8, heads=2,
                 kv_heads=1, head_dim=4, intermediate=8, vocab=8, experts=2, top_k=1, dense_layers=(1,),
                 shared_intermediate=8, rope_dim=2 if lay.latent else 0, latent=Latent(4, 4, 4))
    # a latent layout's walk meets q_proj only without a query LoRA
    extra = modules(lay, replace(s, latent=Latent(0, 4, 4))) if lay.latent else []
    return tuple(modules(lay, s)) + tuple(m for m in extra if m.path.endswith(f".{lay.paths.q}"))


def gguf_tensor_names(*layouts: DecoderLayout) -> tuple[tuple[str, str], ...]:
    """HF module (as *ForCausalLM names it) -> llama.cpp name, over the layouts (Family.gguf_tensor_names)."""
    out: dict[str, str] = {}
    for lay in layouts:
        for m in _every_module(lay):
            if m.gguf is not None:
                out.setdefault(m.path if m.top else f"{lay.paths.body}.{m.path}", m.gguf)
    return tuple(out.items())


def module(lay: DecoderLayout, gguf: str) -> Module | None:
    """The layout's module whose llama.cpp name is `gguf` ("attn_q", "output"), or None."""
    return next((m for m in _every_module(lay) if m.gguf in (gguf, f"blk.{{bid}}.{gguf}")), None)


def _parts(lay: DecoderLayout, gguf: str) -> list[str]:
    m = module(lay, gguf)
    if m is None:
        raise ValueError(f"the layout has no module named {gguf} by llama.cpp")
    return [r"\d+" if c in ("{bid}", "{xid}") else re.escape(c) for c in m.path.split(".")]


def signature(lay: DecoderLayout, gguf: str) -> str:
    """A regex on normalised tensor names that matches the module llama.cpp names `gguf` (Family.signature)."""
    return r"(^|[./])" + "[./]".join(_parts(lay, gguf))


def pattern(lay: DecoderLayout, gguf: str, suffix: str = "weight") -> str:
    """A regex on canonical tensor names that matches the `gguf` module's `suffix` parameter."""
    return r"(^|\.)" + r"\.".join(_parts(lay, gguf)) + rf"\.{suffix}$"


def rope_permuted(arch: str, lay: DecoderLayout, bias: bool = True) -> tuple[tuple[str, str, str], ...]:
    """Family.gguf_transforms of llama.cpp's LlamaModel-style converters, which permute the rows of q_proj and
    k_proj per head for its non-NeoX rope (weights, and biases when `bias`)."""
    suffix = "(weight|bias)" if bias else "weight"
    return tuple((arch, pattern(lay, g, suffix).removeprefix(r"(^|\.)"), kind)
                 for g, kind in (("attn_q", "rope_q"), ("attn_k", "rope_k")))


def spec_from_config(lay: DecoderLayout, c: Cfg) -> ArchSpec:
    """ArchSpec from the config fields LLaMA-shaped models share, read as the layout says. A key the file
    leaves out is its config class's default (Cfg.get: GLM-4's head_dim 128 and attention_bias true, Arcee's
    relu2), else LLaMA's rule (head_dim = hidden / heads)."""
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    d = c.int("head_dim", default=h // a)
    L = c.int("num_hidden_layers")
    for key, want in lay.requires:
        if (v := c.get(key, default=want)) != want:
            raise NoAnalyticModel(f"{c.path}: config {key} = {v!r}: the {c.model_type} op template describes only {want!r}")
    keys = lay.bias_keys
    bias = bool(c.get(keys.qkv, default=False))
    sliding = decoders.sliding(c, L)
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=c.int("num_key_value_heads", default=a), head_dim=d,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    context=c.int("max_position_embeddings", default=0),
                    activation=str(c.get("hidden_act", default="silu")),
                    gated_mlp=lay.mlp != "plain", norm="rmsnorm" if lay.norm == "rmsnorm" else "layernorm",
                    qkv_bias=bias if lay.qkv_bias is None else lay.qkv_bias,
                    o_bias=bool(c.get(keys.o, default=False)) if lay.o_bias is None else lay.o_bias,
                    mlp_bias=bool(c.get(keys.mlp, default=False)) if lay.mlp_bias is None else lay.mlp_bias,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=lay.tied_default)),
                    rope_dim=0 if lay.partial_rotary is None else int(d * decoders.rotary_factor(c, default=lay.partial_rotary)),
                    nope_layers=_no_rope(c, L) if lay.nope == "flags" else _global(sliding, L) if lay.nope == "global" else (),
                    attn_softcap=lay.softcap and c.get("attn_logit_softcapping", default=None) is not None,
                    logit_softcap=lay.softcap and c.get("final_logit_softcapping", default=None) is not None,
                    **sliding, **c.common)


def _global(sliding: dict[str, Any], layers: int) -> tuple[int, ...]:
    """The full-attention layers of a model some of whose layers slide (none when none or all do)."""
    slide = sliding["sliding_layers"]
    return tuple(i for i in range(layers) if i not in slide) if slide else ()


def _no_rope(c: Cfg, layers: int) -> tuple[int, ...]:
    """SmolLM3Config's no_rope_layers (1: rotary, 0: none, per layer; by default none on every
    no_rope_layer_interval-th layer) as the layers without rotary."""
    flags = c.get("no_rope_layers", default=None)
    if flags is None:
        every = c.int("no_rope_layer_interval", default=4)
        flags = [int(every == 0 or (i + 1) % every != 0) for i in range(layers)]
    if not isinstance(flags, list) or len(flags) != layers or any(type(v) is not int or v not in (0, 1) for v in flags):
        raise UsageError(f"{c.path}: config no_rope_layers is not a list of {layers} flags (1: rotary, 0: none)")
    return tuple(i for i, v in enumerate(flags) if not v)


def matches(lay: DecoderLayout, T: Tensors) -> bool:
    """Does every weight the layout's layers hold (its experts' aside) show in T?"""
    return all(infer.has(T, pattern(lay, m.gguf.removeprefix("blk.{bid}."))) for m in _every_module(lay)
               if m.layers and m.gguf is not None and not m.experts)


def spec_from_tensors(lay: DecoderLayout, T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """ArchSpec from the shapes of a checkpoint without config.json: widths from the layout's modules;
    head_dim exact from a per-head q_norm, else assumed (128 or 64 when it divides both widths)."""
    def shape(gguf: str) -> tuple[int, ...]:
        m = module(lay, gguf)
        return infer.shape(T, pattern(lay, gguf), m.path.format(bid="N", xid="0") if m else gguf)

    def biased(gguf: str) -> bool:
        return module(lay, gguf) is not None and infer.has(T, pattern(lay, gguf, "bias"))

    V, h = shape("token_embd")
    if lay.fused_qkv:
        q = shape("attn_output")[1]                 # o_proj reads the a x d query width
        kv = (shape("attn_qkv")[0] - q) // 2
    else:
        q, kv = shape("attn_q")[0], shape("attn_k")[0]
    notes: list[str] = []
    if lay.qk_norm == "head":
        d = shape("attn_q_norm")[0]
    else:
        d = 128 if q % 128 == 0 and kv % 128 == 0 else 64 if q % 64 == 0 and kv % 64 == 0 else kv
        notes.append(f"no config: head_dim assumed {d} (KV-cache bytes use the k_proj width, which is exact)")
    if lay.partial_rotary is not None:
        notes.append(f"no config: partial_rotary_factor assumed {lay.partial_rotary}, as the config class defaults it")
    if lay.mlp == "routed":
        f, experts = infer.expert_width(T, pattern(lay, "ffn_gate_exps"), "experts.0 gate"), shape("ffn_gate_inp")[0]
    else:
        f, experts = shape("ffn_up")[0] // (2 if lay.fused_gate_up else 1), 0
    return ArchSpec(layers=infer.count_layers(T, rf"{re.escape(lay.paths.layers)}\.(\d+)\."), hidden=h, heads=q // d,
                    kv_heads=kv // d, head_dim=d, intermediate=f, vocab=V, experts=experts, gated_mlp=lay.mlp != "plain",
                    norm="rmsnorm" if lay.norm == "rmsnorm" else "layernorm",
                    qkv_bias=biased("attn_qkv") or biased("attn_q"), o_bias=biased("attn_output"),
                    mlp_bias=biased("ffn_down"),
                    tied_embeddings=not infer.has(T, rf"(^|\.){re.escape(lay.paths.lm_head)}\.weight$"),
                    activation="silu", rope_dim=int(d * lay.partial_rotary) if lay.partial_rotary is not None else 0,
                    assumptions=tuple(notes), **common)


def gguf_reader(lay: DecoderLayout, architecture: str) -> Callable[[str, Mapping[str, str], Tensors], dict[str, Any] | None]:
    """Family.gguf_config of a layout family whose llama.cpp converter writes LLaMA's keys (infer.GGUF_KEYS): the
    biases from whether the first layer's tensors have them, the rotated fraction from rope.dimension_count."""
    def read(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
        cfg = infer.gguf_config(arch, metadata, tensors, architecture)
        if cfg is not None:
            cfg.update(attention_bias=any(f"blk.0.attn_{x}.bias" in tensors for x in ("q", "qkv")),
                       mlp_bias="blk.0.ffn_down.bias" in tensors)
            if lay.partial_rotary is not None:
                infer.gguf_rotary(arch, metadata, cfg, "partial_rotary_factor")
        return cfg
    return read


def decoder_lm(lay: DecoderLayout) -> dict[str, Any]:
    """The Family fields of a *ForCausalLM laid out so: its heads, the head rules (lm_head, the task heads, a
    name under the body), the LM head's tie to the embedding, the KV cache of a decoder."""
    p = lay.paths
    rules = decoder_head_rules(rf"(^|\.){re.escape(p.lm_head)}\.weight$", rf"^{re.escape(p.body)}\.")
    return dict(heads=("base", "lm"), head_rules=rules, default_head="lm",
                tie_rules=(TieRule(f"{p.lm_head}.weight", f"{p.body}.{p.embed}.weight", "config", heads=("lm",)),),
                tied_by_default=lay.tied_default, kv_cache=decoder_kv_cache)


@dataclass(frozen=True)
class Layouts:
    """A family's layouts by model_type, and the Family functions they give. Shape inference reads the first
    layout whose every layer weight the checkpoint holds (the first layout when none does)."""
    by_type: Mapping[str, DecoderLayout]

    def of(self, s: ArchSpec) -> DecoderLayout:
        return self.by_type.get(s.model_type) or next(iter(self.by_type.values()))

    def from_config(self, c: Cfg) -> ArchSpec:
        return spec_from_config(self.by_type[c.model_type], c)

    def from_tensors(self, T: Tensors, common: dict[str, Any]) -> ArchSpec:
        mt, lay = next(((mt, lay) for mt, lay in self.by_type.items() if matches(lay, T)), next(iter(self.by_type.items())))
        return spec_from_tensors(lay, T, dict(common, model_type=mt))

    def build(self, B: Builder) -> None:
        walk(B, self.of(B.s))

    def expected_tensors(self, s: ArchSpec) -> Shapes:
        return expected_tensors(self.of(s), s)


def family_fields(by_type: Mapping[str, DecoderLayout], signature_of: str) -> dict[str, Any]:
    """The Family fields the layouts give: model_types, signature (the module llama.cpp names `signature_of`, in
    the first layout), from_config, from_tensors, build, expected_tensors, the GGUF table, and the decoder
    LM's heads, head and tie rules and KV cache (the first layout's paths)."""
    first, ls = next(iter(by_type.values())), Layouts(dict(by_type))
    return dict(model_types=tuple(by_type), signature=signature(first, signature_of), from_config=ls.from_config,
                from_tensors=ls.from_tensors, build=ls.build, expected_tensors=ls.expected_tensors,
                gguf_tensor_names=gguf_tensor_names(*by_type.values()), **decoder_lm(first))


def layouts_of(f: Any) -> Layouts | None:
    """The Layouts a registered Family was made from by family_fields, or None (tests/test_layout.py)."""
    owner = getattr(f.build, "__self__", None)
    return owner if isinstance(owner, Layouts) else None
