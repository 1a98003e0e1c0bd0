"""The LLaMA-shaped decoder as one typed description (DecoderLayout) and one walk over it, from which every
view of the architecture is derived: the op template (FLOPs, parameters, memory), the expected tensors (names
and shapes, as save_pretrained writes them), the tensor-name signature, the GGUF tensor-name table and the
shape look-ups of a checkpoint without config.json. A family laid out so is a layout and a few lines
(llama.py, qwen3.py, olmo.py, phi3.py, glm.py, smollm3.py, arcee.py, mixtral.py, qwen_moe.py, gemma.py,
deepseek.py, gpt_oss.py, generic.py; the routed MoEs olmoe.py, flex_olmo.py, glm4_moe.py, minimax_m2.py,
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
from typing import Any

from ...errors import NoAnalyticModel, UsageError
from . import decoders, infer, layout_moe, mixers_conv, mixers_lightning
from .archspec import ArchSpec, Latent, Lightning, ShortConv
from .base import FROM_CLASS, Cfg, Shapes, Tensors, TieRule, class_default, decoder_head_rules, decoder_kv_cache

# the description (families import DecoderLayout, Paths, BiasKeys and TINY from here)
from .layout_base import TINY, TINY_MOE, Attention, BiasKeys, DecoderLayout, Module, Paths, Walk, joined, mlp
from .ops import Builder, ew_cost

__all__ = ["TINY", "TINY_MOE", "BiasKeys", "DecoderLayout", "Module", "Paths", "joined"]


def attention_kinds(s: ArchSpec) -> tuple[Attention, ...]:
    """Each layer's attention: sliding on ArchSpec.sliding_layers (every layer when that is empty and a
    window is set), full elsewhere: the two kinds the walk has today (ops.window_groups splits its attention
    by them); a layout family with another kind adds it here and a branch in `walk`."""
    marked, conv = set(s.sliding_layers), set(s.short_conv.layers if s.short_conv else ())
    lightning = set(s.lightning.layers if s.lightning else ())
    return tuple("short_conv" if i in conv else "lightning" if i in lightning
                 else "sliding" if s.sliding_window and (not marked or i in marked) else "full" for i in range(s.layers))


def walk(B: Builder, lay: DecoderLayout) -> list[Module]:
    """The forward of `lay` at B.s's sizes: writes its ops to B and returns the modules it met."""
    s = B.s
    w, p = Walk(B, lay), lay.paths
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
    kinds = attention_kinds(s)   # each layer's token mixer: attention, or another kind's module (mixers_*.py)
    attn = tuple(i for i in every if kinds[i] in ("full", "sliding"))
    if conv := tuple(i for i in every if kinds[i] == "short_conv"):
        mixers_conv.short_conv(w, conv)
    if lightning := tuple(i for i in every if kinds[i] == "lightning"):
        mixers_lightning.lightning(w, lightning)
    if not attn:
        pass
    elif lay.latent:
        layout_moe.latent(w, attn)
    else:
        if lay.fused_qkv:
            w.linear(at + p.qkv, "attn_qkv", h, (a + 2 * g) * d, s.qkv_bias, attn)
        else:
            for sub, gguf, width in ((p.q, "attn_q", a), (p.k, "attn_k", g), (p.v, "attn_v", g)):
                w.linear(at + sub, gguf, h, width * d, s.qkv_bias, attn)
        for sub, gguf, heads in ((p.q_norm, "attn_q_norm", a), (p.k_norm, "attn_k_norm", g)):
            if not s.qk_norm:
                break
            if lay.qk_norm == "head":      # Qwen3: over each head's d
                w.norm(at + sub, gguf, d, attn, residual=False, tokens=w.tok + (heads,))
            elif lay.qk_norm == "width":   # OLMo2: over the whole projection
                w.norm(at + sub, gguf, heads * d, attn, residual=False)
        if roped := len(attn) - len(set(s.nope_layers) & set(attn)):   # SmolLM3's NoPE layers apply none
            decoders.rope_apply(B, f"{p.layers}[{roped}].{p.attn} rotary", a + g, rot, roped)
        if lay.qk_norm == "l2" and s.qk_norm and roped:   # Llama 4: x rsqrt(mean(x^2) + eps), no weight
            B.add(f"{p.layers}[{roped}].{p.attn} q/k L2 norm", "norm", "encoder", roped, w.tok + ((a + g) * d,),
                  w.tok + ((a + g) * d,), ew=B.b * B.seq * (a + g) * d * (ew_cost("rmsnorm") - 1))
        # GQA: the g K/V heads are repeated to a heads before the bmm, so the bmm's are a-headed; sliding and full
        # layers apart (ops.window_groups): only their unmasked pairs differ; scale and mask on every score, and
        # soft-capping, tanh(x / cap) x cap
        B.causal_self_attention(f"{p.layers}[{{layers}}].{p.attn}", "encoder", a, d,
                                2 + (ew_cost("tanh") + 2 if s.attn_softcap else 0) + (2 if lay.sinks else 0), layers=attn)
        if lay.sinks:   # one more column in each row of every head's scores (cat, max-subtract, softmax), dropped after
            w.record(at + p.sinks, "attn_sinks", (("", (a,)),), attn)
            B.add(w.label(f"{p.attn}.{p.sinks} (a logit per head, one softmax column)", attn), "attention", "encoder",
                  len(attn), (a,), (B.b, a, B.seq, 1), params=a * len(attn), ew=B.b * a * B.seq * (ew_cost("softmax") + 3),
                  weights_per_call=a)
        if lay.sub_norms:
            w.norm(at + p.attn_sub, "attn_sub_norm", a * d, attn, residual=False)
        w.linear(at + p.o, "attn_output", a * d, h, s.o_bias, attn)
    if after:
        w.norm(p.attn_out, "post_attention_norm", h, every)
    if before and lay.placement != "parallel":
        w.norm(p.mlp_in, "ffn_norm", h, every, residual=lay.placement == "pre")
    routed = lay.mlp == "routed"
    dense = tuple(i for i in every if i in s.dense_layers) if routed and lay.dense_layers else () if routed else every
    if sparse := tuple(i for i in every if i not in dense):
        layout_moe.routed(w, sparse)
    if dense:
        mlp(w, dense, "gated" if routed else lay.mlp, f)
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
                 shared_intermediate=8, rope_dim=2 if lay.latent else 0, latent=Latent(4, 4, 4),
                 short_conv=ShortConv(2, True, (1,)) if lay.short_conv else None,
                 lightning=Lightning(4, (1,)) if lay.lightning else None)
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


def _parts(lay: DecoderLayout, gguf: str, layer: str = r"\d+") -> list[str]:
    m = module(lay, gguf)
    if m is None:
        raise ValueError(f"the layout has no module named {gguf} by llama.cpp")
    return [layer if c == "{bid}" else r"\d+" if c == "{xid}" else re.escape(c) for c in m.path.split(".")]


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
                    nope_layers=_no_rope(c, L) if lay.nope == "flags" else _global(sliding, L) if lay.nope == "global"
                    else _zero_theta(c, L) if lay.nope == "theta" else (),
                    qk_norm=bool(c.get(lay.qk_norm_key, default=False)) if lay.qk_norm_key else True,
                    attn_softcap=lay.softcap and c.get("attn_logit_softcapping", default=None) is not None,
                    logit_softcap=lay.softcap and c.get("final_logit_softcapping", default=None) is not None,
                    short_conv=mixers_conv.from_config(c, L) if lay.short_conv else None,
                    lightning=mixers_lightning.from_config(c, L) if lay.lightning else None, **sliding, **c.common)


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


def _global(sliding: dict[str, Any], layers: int) -> tuple[int, ...]:
    """The full-attention layers of a model some of whose layers slide (none when none or all do)."""
    slide = sliding["sliding_layers"]
    return tuple(i for i in range(layers) if i not in slide) if slide else ()


def _zero_theta(c: Cfg, layers: int) -> tuple[int, ...]:
    """The layers GraniteSWAConfig's layer_rope_theta sets to 0 (no rotary); none when it is absent."""
    thetas = c.get("layer_rope_theta", default=None)
    if thetas is None:
        return ()
    if not isinstance(thetas, list) or len(thetas) != layers or any(not isinstance(t, (int, float)) for t in thetas):
        raise UsageError(f"{c.path}: config layer_rope_theta is not a list of {layers} numbers (0: no rotary)")
    return tuple(i for i, t in enumerate(thetas) if t == 0)


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
    qk_norm = lay.qk_norm != "none" and infer.has(T, pattern(lay, "attn_q_norm"))
    sinks = infer.find(T, r"(^|\.)" + r"\.".join(_parts(lay, "attn_sinks")) + "$") if lay.sinks else None
    if lay.qk_norm == "head" and qk_norm:
        d = shape("attn_q_norm")[0]
    elif sinks is not None and len(sinks.shape) == 1 and 0 < sinks.shape[0] <= q and q % sinks.shape[0] == 0:
        d = q // sinks.shape[0]                     # one sink per query head
    else:
        d = 128 if q % 128 == 0 and kv % 128 == 0 else 64 if q % 64 == 0 and kv % 64 == 0 else kv
        notes.append(f"no config: head_dim assumed {d} (KV-cache bytes use the k_proj width, which is exact)")
    if lay.partial_rotary is not None:
        notes.append(f"no config: partial_rotary_factor assumed {lay.partial_rotary}, as the config class defaults it")
    L, moe = infer.count_layers(T, rf"{re.escape(lay.paths.layers)}\.(\d+)\."), dict[str, Any]()
    if lay.mlp == "routed":
        f, experts = infer.expert_width(T, pattern(lay, "ffn_gate_exps"), "experts.0 gate"), shape("ffn_gate_inp")[0]
        if lay.dense_layers or lay.shared != "none":   # the dense layers: those without a router; each MLP's width
            router = re.compile(r"(^|\.)" + r"\.".join(_parts(lay, "ffn_gate_inp", r"(\d+)")) + r"\.weight$")
            sparse = {int(m.group(2)) for n in T if (m := router.search(n))}
            fd = infer.find(T, pattern(lay, "ffn_gate")) if lay.dense_layers and module(lay, "ffn_gate") else None
            fs = infer.find(T, pattern(lay, "ffn_gate_shexp")) if lay.shared != "none" else None
            moe = dict(moe_intermediate=f, shared_intermediate=fs.shape[0] if fs is not None else 0,
                       dense_layers=tuple(i for i in range(L) if i not in sparse) if lay.dense_layers else ())
            f = fd.shape[0] if fd is not None else f
    else:
        f, experts = shape("ffn_up")[0] // (2 if lay.fused_gate_up else 1), 0
    return ArchSpec(layers=L, hidden=h, heads=q // d,
                    kv_heads=kv // d, head_dim=d, intermediate=f, vocab=V, experts=experts, gated_mlp=lay.mlp != "plain",
                    norm="rmsnorm" if lay.norm == "rmsnorm" else "layernorm",
                    qkv_bias=biased("attn_qkv") or biased("attn_q"), o_bias=biased("attn_output"),
                    mlp_bias=biased("ffn_down"),
                    tied_embeddings=not infer.has(T, rf"(^|\.){re.escape(lay.paths.lm_head)}\.weight$"),
                    qk_norm=qk_norm or lay.qk_norm == "none", activation="silu",
                    rope_dim=int(d * lay.partial_rotary) if lay.partial_rotary is not None else 0,
                    short_conv=mixers_conv.from_tensors(T, lay.paths.layers) if lay.short_conv else None,
                    lightning=mixers_lightning.from_tensors(T, lay.paths, common) if lay.lightning else None,
                    assumptions=tuple(notes), **moe, **common)


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
