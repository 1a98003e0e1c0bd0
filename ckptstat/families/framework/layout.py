"""The LLaMA-shaped decoder as one typed description (DecoderLayout) and one walk over it, from which every
view of the architecture is derived: the op template (FLOPs, parameters, memory), the expected tensors (names
and shapes, as save_pretrained writes them), the tensor-name signature, the GGUF tensor-name table and the
shape look-ups of a checkpoint without config.json. A family laid out so is a layout and a few lines
(llama.py, qwen3.py, olmo.py, phi3.py, glm.py, smollm3.py, arcee.py, mixtral.py, qwen_moe.py, gemma.py, phi.py,
gptj.py, opt.py, deepseek.py, gpt_oss.py, generic.py; the routed MoEs olmoe.py, flex_olmo.py, glm4_moe.py, minimax_m2.py,
exaone_moe.py, cohere2_moe.py, hy_v3.py, ernie4_5_moe.py, phimoe.py).

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
from typing import Any, Literal

from ...errors import NoAnalyticModel, UsageError
from . import (
    decoders,
    infer,
    layout_kv,
    layout_linear,
    layout_moe,
    layout_ssm,
    layout_tp,
    mixers_conv,
    mixers_kda,
    mixers_lightning,
    mixers_moa,
)
from .archspec import SSM, ArchSpec, DeltaNet, Latent, Lightning, ShortConv
from .base import FROM_CLASS, Cfg, HeadRule, Shapes, Tensors, TieRule, class_default, decoder_head_rules, decoder_kv_cache

# the description (families import DecoderLayout, Paths, BiasKeys and TINY from here)
from .layout_base import (
    LEARNED_ACTIVATIONS,
    TINY,
    TINY_MOE,
    Attention,
    BiasKeys,
    DecoderLayout,
    Module,
    Paths,
    Placement,
    Segments,
    Walk,
    joined,
    module_shapes,
    path_parts,
)
from .layout_parts import attn_gate, body_prefix, cross_layers, mlp, output_heads, residual_scale, sinks, task_labels
from .layout_streams import GatedNorm, Hyper
from .ops import Builder, ew_cost

__all__ = ["TINY", "TINY_MOE", "BiasKeys", "DecoderLayout", "Module", "Paths", "joined"]


def attention_kinds(s: ArchSpec) -> tuple[Attention, ...]:
    """Each layer's token mixer: the Mamba2 state-space mixer on ArchSpec.ssm_layers (layout_ssm.py), a gated DeltaNet
    on ArchSpec.linear_layers (layout_linear.py), LFM2's short convolution and MiniMax's lightning attention on theirs
    (mixers_conv.py, mixers_lightning.py); attention elsewhere, sliding on ArchSpec.sliding_layers (every layer when
    that is empty and a window is set), full otherwise (ops.window_groups splits the attention by them); a layout
    family with another kind adds it here and a branch in `walk`."""
    marked, linear, ssm = set(s.sliding_layers), set(s.linear_layers), set(s.ssm_layers)
    conv, lightning = set(s.short_conv.layers if s.short_conv else ()), set(s.lightning.layers if s.lightning else ())
    return tuple("state_space" if i in ssm else "linear" if i in linear else "short_conv" if i in conv
                 else "lightning" if i in lightning else "none" if i in s.ffn_layers
                 else "sliding" if s.sliding_window and (not marked or i in marked) else "full"
                 for i in range(s.layers))


def walk(B: Builder, lay: DecoderLayout) -> list[Module]:
    """The forward of `lay` at B.s's sizes: writes its ops to B and returns the modules it met."""
    s = B.s
    w, p = Walk(B, lay), lay.paths
    h, a, g, d, f = s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate
    rot = s.rope_dim or d
    every = tuple(i for i in range(s.layers) if i not in s.cross_layers)   # the layers a text-only forward runs
    L = len(every)
    seq, segments = B.seq, s.variant_as(Segments) if lay.positions == "segments" else None
    B.seq += s.prefix_tokens   # the layers run over the prepended tokens too; the LM head does not
    w.tok = (B.b, B.seq)
    rows, E = segments.embed_rows if segments else s.vocab + lay.embed_extra, s.emb if lay.embed_proj else h
    w.record(p.base_embed if s.head == "base" and p.base_embed else p.embed, "token_embd", (("weight", (rows, E)),), None)
    B.embedding(p.embed, "embedding", rows, E, B.seq)
    if E != h:
        w.linear(p.project_in, None, E, h, False, None)
    if segments:
        w.record(p.segment, None, (("weight", (segments.segments, h)),), None)
        B.embedding(p.segment, "embedding", segments.segments, h, B.seq)
        B.add(f"{p.embed} + {p.segment} (a [b, s, h] add, as a residual's)", "activation", "embedding", 1, w.tok + (h,),
              w.tok + (h,), ew=B.b * B.seq * h)
        w.record(p.segment_bias, None, (("", (segments.segments ** 2 + segments.buckets, a)),), None)
        B.add(p.segment_bias, "embedding", "embedding", 1, (B.b, B.seq, B.seq), (B.b, a, B.seq, B.seq),
              params=(segments.segments ** 2 + segments.buckets) * a, ew=B.b * a * B.seq * B.seq)
    if lay.embeddings != "tokens":   # + the token types (bert), then a norm
        if s.type_vocab:
            w.record(p.token_types, "token_types", (("weight", (s.type_vocab, h)),), None)
            B.embedding(p.token_types, "embedding", s.type_vocab, h, B.seq)
        w.norm(p.embed_norm, "token_embd_norm", h, None, residual=False)
    if lay.embed_scale:
        B.add(f"{p.embed} x sqrt(hidden_size)", "activation", "embedding", 1, w.tok + (h,), w.tok + (h,), ew=B.b * B.seq * h)
    if lay.positions == "learned":
        w.record(p.pos, "position_embd", (("weight", (s.positions, h)),), None)
        B.embedding(p.pos, "embedding", s.positions, h, B.seq)
    if lay.positions in ("learned", "sinusoidal"):
        B.add(f"{p.embed} + positions", "activation", "embedding", 1, w.tok + (h,), w.tok + (h,), ew=B.b * B.seq * h)
    if lay.patch_embed:   # beside the language model; stored, never called on text: 1 copy, 0 calls
        w.modules.append(Module(p.patch, None, (("weight", (h, s.patch_dim)), ("bias", (h,))), top=True))
        B.linear(f"{p.patch} (not run: no image)", "embedding", w.tok, s.patch_dim, h, True, 0, 1)
    kinds = attention_kinds(s)
    beside = s.ssm is not None and s.ssm.beside   # FalconH1: attention on the state-space layers too
    attn = tuple(i for i in every if kinds[i] in ("full", "sliding") or (beside and kinds[i] == "state_space"))
    rotary = lay.positions in ("rotary", "rotary_table")
    tables = ("rotary_emb", "rotary_emb_local") if lay.local_rope else ("rotary_emb",)
    no_table = lay.nope == "all" or (lay.nope == "embedding_type" and bool(s.nope_layers))   # no rotary module
    for table in tables if attn and not no_table and lay.positions == "rotary" else ():
        decoders.rotary(B, rot, table)
    if attn and lay.unused_rotary:   # computed, never applied (DecoderLayout.unused_rotary)
        decoders.rotary(B, rot)
    at = f"{p.attn}."
    # the layers of each norm placement (a linear layer's may differ: DecoderLayout.linear_placement)
    placed: dict[Placement, tuple[int, ...]] = {}
    for i in every:
        pl = lay.linear_placement if kinds[i] == "linear" and lay.linear_placement else lay.placement
        placed[pl] = placed.get(pl, ()) + (i,)
    before = {pl: ls for pl, ls in placed.items() if pl in ("pre", "sandwich", "parallel")}
    after = {pl: ls for pl, ls in placed.items() if pl in ("post", "sandwich")}
    for pl, ls in before.items():
        # ModernBERT-decoder's first layer has no attention norm (an Identity); its residual add stays
        normed = ls if lay.first_attn_norm else tuple(i for i in ls if i != every[0])
        if normed:
            w.norm(p.attn_in, "attn_norm", h, normed, residual=pl in ("pre", "parallel"))
        if len(normed) < len(ls) and pl in ("pre", "parallel"):
            B.add(w.label("+ residual (no attn_norm)", every[:1]), "activation", "encoder", 1, w.tok + (h,), w.tok + (h,),
                  ew=B.b * B.seq * h)
    if linear := tuple(i for i in every if kinds[i] == "linear"):
        (mixers_kda.kda if lay.linear in ("kda", "kda_full") else layout_linear.gated_deltanet)(w, linear)
    if ssm := tuple(i for i in every if kinds[i] == "state_space"):
        layout_ssm.mixer(w, ssm)
    if conv := tuple(i for i in every if kinds[i] == "short_conv"):
        mixers_conv.short_conv(w, conv)
    if lightning := tuple(i for i in every if kinds[i] == "lightning"):
        mixers_lightning.lightning(w, lightning)
    if lay.latent:
        layout_moe.latent(w, attn)
    elif lay.moa:   # JetMoE's mixture of attention heads
        mixers_moa.moa(w, attn)
    elif attn:
        # gated attention: q_proj's output is each head's query and its gate, side by side
        q_width = a * d * (2 if lay.gated_attention else 1)
        if lay.fused_qkv:
            w.linear(at + p.qkv, "attn_qkv", h, q_width + 2 * g * d, s.qkv_bias, attn)
        elif s.sliding_kv_heads or s.v_head_dim:   # K/V heads by layer kind, the values' own width (MiMo-V2-Flash)
            layout_kv.projections(w, attn, q_width, kinds)
        else:
            for sub, gguf, width in ((p.q, "attn_q", q_width), (p.k, "attn_k", g * d), (p.v, "attn_v", g * d)):
                w.linear(at + sub, gguf, h, width, s.qkv_bias, attn)
        for sub, gguf, heads in ((p.q_norm, "attn_q_norm", a), (p.k_norm, "attn_k_norm", g)):
            if not s.qk_norm:
                break
            if lay.qk_norm == "head":      # Qwen3: over each head's d
                w.norm(at + sub, gguf, d, attn, residual=False, tokens=w.tok + (heads,))
            elif lay.qk_norm == "width":   # OLMo2: over the whole projection
                w.norm(at + sub, gguf, heads * d, attn, residual=False)
        if roped := (len(attn) - len(set(s.nope_layers) & set(attn))) * rotary:   # SmolLM3's NoPE layers apply none
            decoders.rope_apply(B, f"{p.layers}[{roped}].{p.attn} rotary", a + g, rot, roped)
        if lay.qk_norm == "l2" and s.qk_norm and roped:   # Llama 4: x rsqrt(mean(x^2) + eps), no weight
            B.add(f"{p.layers}[{roped}].{p.attn} q/k L2 norm", "norm", "encoder", roped, w.tok + ((a + g) * d,),
                  w.tok + ((a + g) * d,), ew=B.b * B.seq * (a + g) * d * (ew_cost("rmsnorm") - 1))
        if lay.dynamic_mask:   # llama.cpp has no names for them
            w.linear(at + p.dt_proj, None, g * d, g, s.qkv_bias, every)
            w.record(at + p.dynamic_a, None, (("", (g,)),), every)
            B.add(w.label(f"{p.attn} exp({p.dynamic_a} x softplus({p.dt_proj})) mask", every), "activation", "encoder", L,
                  w.tok + (g,), w.tok + (g,), params=g * L, ew=B.b * B.seq * g * (ew_cost("softplus") + 2), weights_per_call=g)
        # GQA: the g K/V heads are repeated to a heads before the bmm, so the bmm's are a-headed; sliding and full
        # layers apart (ops.window_groups): only their unmasked pairs differ; scale and mask on every score, and
        # soft-capping, tanh(x / cap) x cap
        # ALiBi's per-head bias and CPM-Ant's segment bias, one more add on every score
        extra = (2 + (ew_cost("tanh") + 2 if s.attn_softcap else 0) + (2 if lay.sinks else 0)
                 + (lay.positions in ("alibi", "segments")))
        if not lay.causal:   # an encoder: every query over every key, nothing to halve
            B.attention(f"{p.layers}[{len(attn)}].{p.attn}", "encoder", a, B.seq, B.seq, d, len(attn), causal=False,
                        extra_ew=extra)
        for second in ((False, True) if lay.differential else (False,)) if lay.causal else ():   # DiffLlama: a call per
            B.causal_self_attention(f"{p.layers}[{{layers}}].{p.attn}" + (" (values' second half)" if second else ""),
                                    "encoder", a, d, extra, layers=attn, v_dim=s.v_head_dim or None)   # half of the values
        if lay.differential:   # out1 - lambda x out2 over head pairs, x (1 - lambda_init), the weightless RMSNorm
            for name in p.lambdas:
                w.record(at + name, None, (("", (d,)),), attn)
            B.add(w.label(f"{p.attn} differential combine ({', '.join(p.lambdas)}), group norm", attn), "attention",
                  "encoder", len(attn), w.tok + (a * d,), w.tok + (a * d,), params=len(p.lambdas) * d * len(attn),
                  ew=B.b * B.seq * a * d * (2 + ew_cost("rmsnorm")), weights_per_call=len(p.lambdas) * d)
        if lay.sinks and (sunk := tuple(i for i in attn if kinds[i] == "sliding" or not lay.sliding_sinks)):
            sinks(w, sunk)   # one more column in each row of every head's scores (cat, max-subtract, softmax), dropped
        if lay.attn_gate != "none":   # act(gate(x)), per element or per head, times the attention's output
            attn_gate(w, attn, d)
        if lay.gated_attention:
            B.add(w.label(f"{p.attn} output x sigmoid(gate)", attn), "activation", "encoder", len(attn), w.tok + (a * d,),
                  w.tok + (a * d,), ew=B.b * B.seq * a * d * (ew_cost("sigmoid") + 1))
        if lay.sub_norms:
            w.norm(at + p.attn_sub, "attn_sub_norm", a * d, attn, residual=False)
        w.linear(at + p.o, "attn_output", a * (s.v_head_dim or d), h, s.o_bias, attn)
        if lay.tp_slices:
            layout_tp.summed(w, at + p.o, attn)
        if lay.last_o_bias:
            last = (s.layers - 1,)
            w.record(at + p.last_bias, None, (("", (h,)),), last)
            B.add(w.label(f"{p.attn}.{p.last_bias} (expanded to the stream, added as a residual)", last), "activation",
                  "encoder", 1, (h,), w.tok + (h,), params=h, ew=B.b * B.seq * h, weights_per_call=h)
    if lay.residual_scales:
        residual_scale(w, p.attn_residual, every)
    for ls in after.values():
        w.norm(p.attn_out, "post_attention_norm", h, ls)
    for pl, ls in before.items():
        if pl != "parallel" and lay.mlp != "none" and not lay.one_mixer:
            w.norm(p.mlp_in, "ffn_norm", h, ls, residual=pl == "pre")
        elif pl == "parallel" and lay.parallel_mlp_norm:   # the MLP's own norm beside the attention's
            w.norm(p.mlp_in, "ffn_norm", h, ls, residual=False)
    routed, ffn = lay.mlp == "routed", tuple(i for i in every if i in s.ffn_layers or not lay.one_mixer)
    dense = (tuple(i for i in ffn if i in s.dense_layers) if routed and lay.dense_layers else () if routed
             else () if lay.mlp == "none" else ffn)
    if sparse := tuple(i for i in ffn if i not in dense and routed):
        layout_moe.routed(w, sparse)
        if lay.moe_out_norm:
            w.norm(p.moe_out_norm, None, h, sparse, residual=False)
    if dense:
        mlp(w, dense, lay.routed_mlp if routed else lay.mlp, f)
        if lay.tp_slices:
            layout_tp.summed(w, f"{p.mlp}.{p.down}", dense)
    if lay.residual_scales:
        residual_scale(w, p.mlp_residual, every)
    for ls in after.values():
        w.norm(p.mlp_out, "post_ffw_norm", h, ls)
    if par := placed.get("parallel"):   # x + attn(ln x) + mlp(ln x): attn_in's residual add, then the MLP's
        B.add(w.label(f"{p.mlp} + residual", par), "activation", "encoder", len(par), w.tok + (h,), w.tok + (h,),
              ew=B.b * B.seq * h)
    if s.cross_layers:
        cross_layers(w, s.cross_layers)
    if lay.final_norm:
        w.norm(p.norm, "output_norm", h, None, residual=False)
    if E != h:
        w.linear(p.project_out, None, h, E, False, None)
    B.seq, w.tok = seq, (B.b, seq)
    output_heads(w, E)
    return w.modules


def modules(lay: DecoderLayout, s: ArchSpec) -> list[Module]:
    return walk(Builder(s, 1, 1, 1, 1, 1), lay)


def expected_tensors(lay: DecoderLayout, s: ArchSpec) -> Shapes:
    """Every parameter name and shape, under the body prefix for a model with a head."""
    return module_shapes(modules(lay, s), body_prefix(lay, s.head))


@functools.cache
def every_module(lay: DecoderLayout) -> tuple[Module, ...]:
    """The modules of a tiny spec whose walk meets every module the layout can have (head, biases, experts)."""
    head = "lm" if lay.causal else "mlm"
    s = ArchSpec(family="", model_type="", source="", head=head, architecture=None, type_vocab=2, hidden=8, heads=2,
                 kv_heads=1, head_dim=4, intermediate=8, vocab=8, experts=2, top_k=1, dense_layers=(1,),
                 shared_intermediate=8, rope_dim=2 if lay.latent else 0, latent=Latent(4, 4, 4), moe_latent=4 * lay.moe_latent,
                 linear_layers=(0,) if lay.linear != "none" else (), deltanet=DeltaNet(1, 4, 2, 4, 2),
                 ssm=SSM(heads=2, head_dim=8, state=2, groups=1, conv_kernel=2, chunk=4, intermediate=16, conv_bias=True,
                         bias=True, dt_rank=2 if lay.ssm_keys.dt_rank else 0) if lay.hybrid != "none" else None,
                 ssm_layers={"none": (), "all": (0, 1)}.get(lay.hybrid, (0,)),
                 variant=Segments(8, 2, 2) if lay.positions == "segments" else GatedNorm(2) if lay.gated_norms
                 else Hyper(2) if lay.hyper else None,
                 short_conv=ShortConv(2, True, (1,)) if lay.short_conv else None, layers=2 + 2 * lay.one_mixer,
                 lightning=Lightning(4, (1,)) if lay.lightning else None, ffn_layers=(1, 2) * lay.one_mixer)
    # a latent layout's walk meets q_proj only without a query LoRA
    extra = modules(lay, replace(s, latent=Latent(0, 4, 4))) if lay.latent else []
    return tuple(modules(lay, s)) + tuple(m for m in extra if m.path.endswith(f".{lay.paths.q}"))


def gguf_tensor_names(*layouts: DecoderLayout) -> tuple[tuple[str, str], ...]:
    """HF module (as *ForCausalLM names it) -> llama.cpp name, over the layouts (Family.gguf_tensor_names)."""
    out: dict[str, str] = {}
    for lay in layouts:
        for m in every_module(lay):
            if m.gguf is not None:
                out.setdefault(m.path if m.top else f"{lay.paths.body}.{m.path}", m.gguf)
    return tuple(out.items())


def module(lay: DecoderLayout, gguf: str) -> Module | None:
    """The layout's module whose llama.cpp name (or the walk's, Module.role) is `gguf` ("attn_q", "output"), or None."""
    return next((m for m in every_module(lay) if {m.gguf, m.role} & {gguf, f"blk.{{bid}}.{gguf}"}), None)


def _parts(lay: DecoderLayout, gguf: str, layer: str = r"\d+") -> list[str]:
    if (m := module(lay, gguf)) is None:
        raise ValueError(f"the layout has no module named {gguf} by llama.cpp")
    return path_parts(m.path, layer)


def signature(lay: DecoderLayout, gguf: str) -> str:
    """A regex on normalised tensor names that matches the module llama.cpp names `gguf` (Family.signature)."""
    return r"(^|[./])" + "[./]".join(_parts(lay, gguf))


def pattern(lay: DecoderLayout, gguf: str, suffix: str = "weight", layer: str = r"\d+") -> str:
    """A regex on canonical tensor names: the `gguf` module's `suffix` parameter ("": its path), `{bid}` as `layer`."""
    return r"(^|\.)" + r"\.".join(_parts(lay, gguf, layer)) + (rf"\.{suffix}" if suffix else "") + "$"


def row_rewrites(arch: str, lay: DecoderLayout, kind: Literal["rope", "qkv_groups"], bias: bool = True
                 ) -> tuple[tuple[str, str, str], ...]:
    """Family.gguf_transforms of llama.cpp converters that rewrite a projection's rows (analysis/conversion.py), weights
    and biases when `bias`: "rope", q_proj's and k_proj's rows permuted per head (LlamaModel's non-NeoX rope);
    "qkv_groups", a fused QKV's rows regrouped into q, k and v blocks (GPTNeoXModel, BloomModel, FalconModel)."""
    parts = (("attn_q", "rope_q"), ("attn_k", "rope_k")) if kind == "rope" else (("attn_qkv", "qkv_groups"),)
    return tuple((arch, pattern(lay, g, "(weight|bias)" if bias else "weight").removeprefix(r"(^|\.)"), k) for g, k in parts)


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
    linear, deltanet = layout_linear.from_config(c, L, lay.linear_keys) if lay.linear != "none" else ((), None)
    if deltanet and sliding["sliding_window"] and not sliding["sliding_layers"]:   # LaraMini names its sliding layers
        raise NoAnalyticModel(f"{c.path}: a {c.model_type} whose every layer slides: the op template describes none")
    learned = lay.positions == "learned"
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=c.int("num_key_value_heads", default=a), head_dim=d,
                    intermediate=_intermediate(lay, c), vocab=c.int("vocab_size"),
                    context=0 if learned else c.int("max_position_embeddings", default=0),
                    positions=c.int("max_position_embeddings") if learned else 0,
                    activation=lay.activation or str(c.get(lay.act_key, default="silu")),
                    gated_mlp=lay.mlp != "plain", norm="rmsnorm" if lay.norm == "rmsnorm" else "layernorm",
                    qkv_bias=bias if lay.qkv_bias is None else lay.qkv_bias,
                    o_bias=bool(c.get(keys.o, default=False)) if lay.o_bias is None else lay.o_bias,
                    mlp_bias=bool(c.get(keys.mlp, default=False)) if lay.mlp_bias is None else lay.mlp_bias,
                    tied_embeddings=lay.ties and bool(c.get("tie_word_embeddings", default=lay.tied_default)),
                    rope_dim=0 if lay.partial_rotary is None else int(d * decoders.rotary_factor(c, default=lay.partial_rotary)),
                    nope_layers=decoders.nope_flags(c, L) if lay.nope == "flags"
                    else decoders.nope_global(sliding, L) if lay.nope == "global"
                    else decoders.nope_zero_theta(c, L) if lay.nope == "theta" else tuple(range(L)) if lay.nope == "all"
                    else decoders.nope_types(c, L) if lay.nope == "types"
                    else decoders.nope_by_type(c, L) if lay.nope == "embedding_type" else (),
                    qk_norm=bool(c.get(lay.qk_norm_key, default=False)) if lay.qk_norm_key else True,
                    attn_softcap=lay.softcap and c.get("attn_logit_softcapping", default=None) is not None,
                    logit_softcap=lay.softcap and c.get("final_logit_softcapping", default=None) is not None,
                    linear_layers=linear, deltanet=deltanet,
                    type_vocab=c.int("type_vocab_size", default=FROM_CLASS) if lay.embeddings == "bert" else 0,
                    short_conv=mixers_conv.from_config(c, L) if lay.short_conv else None,
                    lightning=mixers_lightning.from_config(c, L) if lay.lightning else None,
                    **layout_ssm.layers_from_config(lay, c, L), **sliding, **c.common)


def _intermediate(lay: DecoderLayout, c: Cfg) -> int:
    """The MLP's width (DecoderLayout.ffn_width: intermediate_size, another key, or a multiple of hidden); a routed
    layout without dense layers runs no MLP of that width, and its config class may have no such field
    (Qwen3.5-MoE's): 0 there when the file leaves it out."""
    width = lay.ffn_width
    if times := width.times_hidden or (c.int(width.times_key) if width.times_key else 0):
        return times * c.int("hidden_size")
    if width.else_times:
        return c.int(width.key, default=width.else_times * c.int("hidden_size"))
    return c.int(width.key, default=0) if lay.mlp == "routed" and not lay.dense_layers else c.int(width.key)


def with_experts(s: ArchSpec, c: Cfg, key: str, top_k: str = "num_experts_per_tok") -> ArchSpec:
    """`s` with a routed layout's experts (config `key`) and top_k, the config class's where the file has none."""
    return replace(s, experts=decoders.count(c, key, default=FROM_CLASS), top_k=c.int(top_k, default=FROM_CLASS))


def mlp_dense_layers(c: Cfg, layers: int, first: int) -> tuple[int, ...]:
    """The layers config mlp_layer_types marks "dense" (EXAONE MoE, Cohere2 MoE, HY-V3), else its class's rule: the
    first `first`."""
    kinds = c.get("mlp_layer_types", default=None)
    if kinds is None:
        return tuple(range(min(first, layers)))
    if not isinstance(kinds, list) or len(kinds) != layers or any(k not in ("dense", "sparse") for k in kinds):
        raise UsageError(f"{c.path}: config mlp_layer_types is not a list of {layers} 'dense' / 'sparse'")
    return tuple(i for i, k in enumerate(kinds) if k == "dense")


def matches(lay: DecoderLayout, T: Tensors) -> bool:
    """Does every weight the layout's layers hold (its experts' aside) show in T?"""
    return all(infer.has(T, pattern(lay, m.gguf.removeprefix("blk.{bid}."))) for m in every_module(lay)
               if m.layers and m.gguf is not None and not m.experts)


def spec_from_tensors(lay: DecoderLayout, T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """ArchSpec from the shapes of a checkpoint without config.json: widths from the layout's modules;
    head_dim exact from a per-head q_norm, else assumed (128 or 64 when it divides both widths)."""
    def shape(gguf: str) -> tuple[int, ...]:
        """A module's weight shape, a linear's as [out, in]."""
        m = module(lay, gguf)
        got = infer.shape(T, pattern(lay, gguf), m.path.format(bid="N", xid="0") if m else gguf)
        return got[::-1] if lay.conv1d and gguf not in ("token_embd", "position_embd") else got

    def biased(gguf: str) -> bool:
        return module(lay, gguf) is not None and infer.has(T, pattern(lay, gguf, "bias"))

    V, h = shape("token_embd")
    hybrid = ssm_from_tensors(lay, T, common["model_type"])
    if lay.fused_qkv:
        q = shape("attn_output")[1]                 # o_proj reads the a x d query width
        kv = (shape("attn_qkv")[0] - q) // 2
    else:
        q, kv = shape("attn_q")[0], shape("attn_k")[0]
    if (q := q // (2 if lay.gated_attention else 1)) <= 0 or kv <= 0:   # a gated query: each head's query and its gate
        raise UsageError(f"the tensors' attention widths ({q} query, {kv} key/value) fit no such layout: pass --config")
    notes: list[str] = []
    linear: tuple[int, ...] = ()
    deltanet = None
    if lay.linear != "none":
        linear, deltanet, note = layout_linear.from_tensors(
            lay, T, int(class_default(common["model_type"], "linear_key_head_dim") or 0))
        notes.append(note)
    qk_norm = lay.qk_norm != "none" and infer.has(T, pattern(lay, "attn_q_norm"))
    sinks = infer.find(T, r"(^|\.)" + r"\.".join(_parts(lay, "attn_sinks")) + "$") if lay.sinks else None
    p = lay.paths   # differential attention: each lambda is one head wide
    lam = infer.find(T, rf"(^|\.){re.escape(p.layers)}\.\d+\.{re.escape(p.attn)}\.{re.escape(p.lambdas[0])}$") \
        if lay.differential else None
    if lay.qk_norm == "head" and qk_norm:
        d = shape("attn_q_norm")[0]
    elif lam is not None and len(lam.shape) == 1 and 0 < lam.shape[0] <= q and q % lam.shape[0] == 0:
        d = lam.shape[0]
    elif sinks is not None and len(sinks.shape) == 1 and 0 < sinks.shape[0] <= q and q % sinks.shape[0] == 0:
        d = q // sinks.shape[0]                     # one sink per query head
    else:
        d = 128 if q % 128 == 0 and kv % 128 == 0 else 64 if q % 64 == 0 and kv % 64 == 0 else kv
        notes.append(f"no config: head_dim assumed {d} (KV-cache bytes use the k_proj width, which is exact)")
    if lay.partial_rotary is not None:
        notes.append(f"no config: partial_rotary_factor assumed {lay.partial_rotary}, as the config class defaults it")
    L, moe = infer.count_layers(T, lay.paths.numbered()), dict[str, Any]()
    if lay.mlp == "routed":
        gates = pattern(lay, "ffn_gate_exps") if module(lay, "ffn_gate_exps") else "(?!)"   # none: stacked (down_proj's)
        f, experts = infer.expert_width(T, gates, "experts.0 gate", lay.paths.mlp), shape("ffn_gate_inp")[0]
        if lay.dense_layers or lay.shared != "none":   # the dense layers: those without a router; each MLP's width
            router = re.compile(pattern(lay, "ffn_gate_inp", layer=r"(\d+)"))   # group 2: the layer
            sparse = {int(m.group(2)) for n in T if (m := router.search(n))}
            # a dense layer's gate_proj (by its path: llama.cpp may have no name for it)
            gate = rf"(^|\.){re.escape(lay.paths.layers)}\.\d+\.{re.escape(lay.paths.mlp)}\.{re.escape(lay.paths.gate)}\.weight$"
            fd = infer.find(T, gate) if lay.dense_layers else None
            fs = infer.find(T, pattern(lay, "ffn_gate_shexp")) if lay.shared != "none" else None
            moe = dict(moe_intermediate=f, shared_intermediate=fs.shape[0] if fs is not None else 0,
                       dense_layers=tuple(i for i in range(L) if i not in sparse) if lay.dense_layers else ())
            f = fd.shape[0] if fd is not None else f
    else:
        f, experts = shape("ffn_up")[0] // (2 if lay.fused_gate_up else 1), 0
    act = lay.activation or str(class_default(common["model_type"], lay.act_key) or "silu")   # the class's default,
    if (learned := LEARNED_ACTIVATIONS.get(act)) and not infer.has(   # unless its parameters are missing (Apertus's)
            T, rf"(^|\.){re.escape(p.mlp)}\.{re.escape(p.act)}\.{learned[0][0]}$"):
        notes.append(f"no config and no {act} parameters: activation assumed silu")
        act = "silu"
    return ArchSpec(layers=L, hidden=h, heads=q // d,
                    kv_heads=kv // d, head_dim=d, intermediate=f, vocab=V, experts=experts, gated_mlp=lay.mlp != "plain",
                    positions=shape("position_embd")[0] if lay.positions == "learned" else 0,
                    norm="rmsnorm" if lay.norm == "rmsnorm" else "layernorm",
                    qkv_bias=biased("attn_qkv") or biased("attn_q"), o_bias=biased("attn_output"),
                    mlp_bias=biased("ffn_up") if lay.down_bias is not None else biased("ffn_down"),
                    type_vocab=shape("token_types")[0] if lay.embeddings == "bert" and infer.has(T, pattern(lay, "token_types"))
                    else 0,
                    tied_embeddings=not infer.has(T, rf"(^|\.){re.escape(lay.paths.lm_head)}\.weight$"),
                    qk_norm=qk_norm or lay.qk_norm == "none", activation=act,
                    rope_dim=int(d * lay.partial_rotary) if lay.partial_rotary is not None else 0,
                    linear_layers=linear, deltanet=deltanet, num_labels=task_labels(lay, T),
                    short_conv=mixers_conv.from_tensors(T, lay.paths.layers) if lay.short_conv else None,
                    lightning=mixers_lightning.from_tensors(T, lay.paths, common) if lay.lightning else None,
                    **dict(hybrid, assumptions=tuple(notes) + hybrid.get("assumptions", ())), **moe, **common)


def ssm_from_tensors(lay: DecoderLayout, T: Tensors, model_type: str) -> dict[str, Any]:
    """The ArchSpec fields of a hybrid layout's state-space layers read from shapes (DecoderLayout.hybrid): heads from
    A_log, the intermediate from out_proj, conv_dim and the kernel from conv1d, the layers those hold; the groups
    of B and C (only their product with the state shows) and the chunk length are `model_type`'s config class defaults,
    said in the assumptions."""
    if lay.hybrid == "none":
        return {}
    def shape(gguf: str, suffix: str = r"\.weight") -> tuple[int, ...]:
        return infer.shape(T, r"(^|\.)" + r"\.".join(_parts(lay, gguf)) + suffix + "$", f"{lay.paths.ssm} {gguf}")

    rx = re.compile(pattern(lay, "ssm_in", layer=r"(\d+)"))
    layers = tuple(sorted({int(x.group(2)) for n in T if (x := rx.search(n))}))
    if lay.ssm_keys.dt_rank is not None:   # Mamba1: A_log [i, N], dt_proj [i, r]
        (i, N), (_, r), (_, _, k) = shape("ssm_a", ""), shape("ssm_dt"), shape("ssm_conv1d")
        return dict(ssm=SSM(heads=i, head_dim=1, state=N, groups=0, conv_kernel=k, chunk=0, intermediate=i,
                            conv_bias=infer.has(T, pattern(lay, "ssm_conv1d", "bias")),
                            bias=infer.has(T, pattern(lay, "ssm_in", "bias")), dt_rank=r), ssm_layers=layers)
    heads, inter = shape("ssm_a", "")[0], shape("ssm_out")[1]   # A_log: no .weight; out_proj [h, intermediate]
    cd, _, k = shape("ssm_conv1d")
    keys = lay.ssm_keys
    groups = int(class_default(model_type, keys.groups))
    groups = groups if (cd - inter) % (2 * groups) == 0 else 1
    chunk = int(class_default(model_type, keys.chunk))
    m = SSM(heads=heads, head_dim=inter // heads, state=(cd - inter) // (2 * groups), groups=groups, conv_kernel=k,
            chunk=chunk, intermediate=inter, conv_bias=infer.has(T, pattern(lay, "ssm_conv1d", "bias")),
            bias=infer.has(T, pattern(lay, "ssm_in", "bias")), out_bias=infer.has(T, pattern(lay, "ssm_out", "bias")),
            gated_norm=infer.has(T, pattern(lay, "ssm_norm")), beside=lay.hybrid == "beside")
    why = f"no config: {keys.groups} assumed {groups} and {keys.chunk} {chunk} ({model_type}'s config class defaults)"
    return dict(ssm=m, ssm_layers=layers, assumptions=(why,))


def routed_from_tensors(lay: DecoderLayout, T: Tensors, common: dict[str, Any], model_type: str,
                        top_k: str = "num_experts_per_tok", note: str = "") -> ArchSpec:
    """spec_from_tensors of a routed layout read without config.json: the experts per token, which no tensor shows,
    are `model_type`'s config class default (config_defaults.json), said in the assumptions with `note`."""
    spec = spec_from_tensors(lay, T, dict(common, model_type=model_type))
    k = int(class_default(model_type, top_k))
    why = f"no config: experts per token (top-k) assumed {k}, {model_type}'s config class default" + (f"; {note}" if note else "")
    return replace(spec, top_k=k, assumptions=spec.assumptions + (why,))


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


def encoder_mlm(lay: DecoderLayout) -> dict[str, Any]:
    """The Family fields of an encoder laid out so (DecoderLayout.causal False): the base model and *ForMaskedLM (its
    lm_head, or a name under the body: tied), the LM head's tie to the embedding, no cache."""
    p = lay.paths
    # a task head's classifier first: a *ForSequenceClassification file also holds the body's names (no LM head, no tie)
    rules = (HeadRule(rf"(^|\.){re.escape(p.lm_head)}\.weight$", "mlm"), HeadRule(r"^classifier\.weight$", "seqcls"),
             HeadRule(rf"^{re.escape(p.body)}\.", "mlm"))
    return dict(heads=("base", "mlm"), head_rules=rules, default_head="base",
                tie_rules=(TieRule(f"{p.lm_head}.weight", f"{p.body}.{p.embed}.weight", "config", heads=("mlm",)),)
                + ((TieRule(f"{p.lm_head}.bias", p.lm_bias, "config", heads=("mlm",)),) if p.lm_bias else ()),
                tied_by_default=lay.tied_default)


def decoder_lm(lay: DecoderLayout) -> dict[str, Any]:
    """The Family fields of a *ForCausalLM laid out so: its heads, the head rules (lm_head, the task heads, a
    name under the body), the LM head's tie to the embedding, the KV cache of a decoder."""
    p = lay.paths
    rules = decoder_head_rules(rf"(^|\.){re.escape(p.lm_head)}\.weight$", rf"^{re.escape(p.body)}\.")
    return dict(heads=("base", "lm") + lay.task_heads, head_rules=rules, default_head="lm",
                tie_rules=(TieRule(f"{p.lm_head}.weight", f"{p.body}.{p.embed}.weight", "config", heads=("lm",)),) * lay.ties,
                tied_by_default=lay.tied_default, kv_cache=decoder_kv_cache)


@dataclass(frozen=True)
class Layouts:
    """A family's layouts by model_type, and the Family functions they give. Shape inference reads the first
    layout whose every layer weight the checkpoint holds (the first layout when none does)."""
    by_type: Mapping[str, DecoderLayout]

    def of(self, s: ArchSpec) -> DecoderLayout:
        return self.by_type.get(s.layout or s.model_type) or next(iter(self.by_type.values()))

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
    LM's heads, head and tie rules and KV cache (the first layout's paths; an encoder's: encoder_mlm)."""
    first, ls = next(iter(by_type.values())), Layouts(dict(by_type))
    return dict(model_types=tuple(by_type), signature=signature(first, signature_of), from_config=ls.from_config,
                from_tensors=ls.from_tensors, build=ls.build, expected_tensors=ls.expected_tensors,
                gguf_tensor_names=gguf_tensor_names(*by_type.values()),
                **(decoder_lm(first) if first.causal else encoder_mlm(first)))


def layouts_of(f: Any) -> Layouts | None:
    """The Layouts a registered Family was made from by family_fields, or None (tests/test_layout.py)."""
    owner = getattr(f.build, "__self__", None)
    return owner if isinstance(owner, Layouts) else None
