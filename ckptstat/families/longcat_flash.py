"""LongCat-Flash (transformers modeling_longcat_flash.py, LongcatFlashModel / LongcatFlashForCausalLM).

Each of num_layers layers holds two sub-blocks and one shortcut-connected MoE (ScMoE): sub-block i (0, 1) is
input_layernorm.i, DeepSeek-V3's multi-head latent attention self_attn.i (always a query LoRA: q_a_proj, its RMSNorm,
q_b_proj; kv_a_proj_with_mqa, the latent's RMSNorm, kv_b_proj; o_proj; the LoRA scalings are element-wise),
post_attention_layernorm.i and a dense gated MLP mlps.i (ffn_hidden_size). The MoE `mlp` reads sub-block 0's
post-attention norm beside mlps.0, and its output is added with the layer's last residual:

    x = x + attn0(ln0 x); y = pln0 x; m = moe(y); x = x + mlp0(y)
    x = x + attn1(ln1 x); x = x + mlp1(pln1 x) + m

The MoE: a router `router.classifier` (h -> E + Z, no bias in the forward) over n_routed_experts (E) gated experts of
expert_ffn_hidden_size and zero_expert_num (Z) zero-computation experts (identity: a token's row, weighted, no
matmul); each token takes its top moe_topk (k) of the E + Z, softmax scores plus e_score_correction_bias (a buffer).
transformers 5.25 holds gate_up_proj [E, 2f, h] and down_proj [E, h, f], and saves them per expert:
experts.{0..E-1}.gate_proj / up_proj / down_proj. (5.24 held gate_up_proj [E + Z, 2f, h], rows for the zero experts
too, never read: 180,388,626,432 more parameters at the config class's defaults; a file it saved holds those rows, and
the census says the config and the weights disagree.)

FLOPs: transformers 5.25 runs every one of a token's k picks through a real expert: a pick of a zero expert is sent
to a real one (LongcatFlashMoE: index (i - E) x E // Z) with weight 0, and the zero experts' identity mix is added
beside. So whatever the router chooses, the experts run k rows a token and the FLOPs are exact (5.24 ran only the
real picks, max(0, k - Z) to min(k, E) of them, and the FLOPs depended on the routing). Active parameters: k experts'
a token. A config without real experts (E = 0) transformers 5.25 cannot run (its grouped experts need one): its FLOPs
are refused by name (Family.flops_refused); `memory` answers its weights and cache from the template.

The cache (DynamicCache(config), 2 x num_layers cache layers, one per attention): each holds the compressed latent
[b, 1, s, kv_lora_rank] as its keys and the rotated rope key [b, 1, s, qk_rope_head_dim] as its values (the
expansion by kv_b_proj runs after the cache update), as transformers 5's DeepSeek-V3."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from .framework import decoders, infer, layout_moe, walk_names
from .framework.archspec import Latent, Variant
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, KVLines, Sample, Tensors, class_default
from .framework.layout import DecoderLayout, Module, Paths, decoder_lm
from .framework.layout_base import Walk, walk_tensors
from .framework.layout_parts import mlp
from .framework.ops import Builder, ew_cost

# the names as save_pretrained writes them; each sub-block's walk swaps in its own attention and MLP paths
LAYOUT = DecoderLayout(latent=True, paths=Paths(router="router.classifier"))


@dataclass(frozen=True)
class LongcatVariant(Variant):
    zero_experts: int   # zero_expert_num: identity experts beside the n_routed_experts real ones

    def routed_choices(self, experts: int) -> int:
        return experts + self.zero_experts   # the classifier scores E + Z experts


def flops_refused(s: ArchSpec) -> str | None:
    """Why no FLOPs (module docstring): a MoE of zero experts alone, which transformers cannot run; else None."""
    if s.experts:
        return None
    return (f"n_routed_experts 0 beside zero_expert_num {s.variant_as(LongcatVariant).zero_experts}: transformers "
            "5.25 cannot run a LongCat-Flash MoE without real experts")


def from_config(c: Cfg) -> ArchSpec:
    # num_layers; a config.json naming only num_hidden_layers (the class's property, 2 x num_layers) sets it to half
    L = c.int("num_hidden_layers") // 2 if "num_layers" not in c.cfg and "num_hidden_layers" in c.cfg else \
        c.int("num_layers", default=FROM_CLASS)
    h, a = c.int("hidden_size", default=FROM_CLASS), c.int("num_attention_heads", default=FROM_CLASS)
    nope, rope, v = (c.int(k, default=FROM_CLASS) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    qk = c.get("qk_head_dim", default=None)
    if qk is not None and qk != nope + rope:
        raise NoAnalyticModel(f"{c.path}: config qk_head_dim {qk} is not qk_nope_head_dim + qk_rope_head_dim "
                              f"({nope + rope}): LongcatFlashMLA's q_b_proj writes the latter, its view the former")
    if c.int("head_dim", default=FROM_CLASS) != rope:
        raise UsageError(f"{c.path}: config head_dim is not qk_rope_head_dim ({rope}): LongCat's rotary table is "
                         "head_dim wide and rotates the qk_rope_head_dim dims")
    if c.get("q_lora_rank", default=FROM_CLASS) is None:
        raise UsageError(f"{c.path}: config q_lora_rank is null: LongcatFlashMLA always runs a query LoRA")
    if c.get("router_bias", default=False):
        raise NoAnalyticModel(f"{c.path}: config router_bias true: the classifier's bias is held but not used by the "
                              "forward, not described by the op template")
    E, Z = c.int("n_routed_experts", default=FROM_CLASS), c.int("zero_expert_num", default=0)
    if not isinstance(Z, int) or Z < 0:
        raise UsageError(f"{c.path}: config zero_expert_num is not a non-negative integer")
    k = c.int("moe_topk", default=FROM_CLASS)
    if not 0 < k <= E + Z:
        raise UsageError(f"{c.path}: config moe_topk {k} is not within 1 and n_routed_experts + zero_expert_num")
    bias = bool(c.get("attention_bias", default=FROM_CLASS))
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=a, head_dim=nope + rope, rope_dim=rope,
                    intermediate=c.int("ffn_hidden_size", default=FROM_CLASS), vocab=c.int("vocab_size", default=FROM_CLASS),
                    context=c.int("max_position_embeddings", default=0), activation=str(c.get("hidden_act", default=FROM_CLASS)),
                    gated_mlp=True, norm="rmsnorm", qkv_bias=bias, o_bias=bias, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    latent=Latent(c.int("q_lora_rank", default=FROM_CLASS), c.int("kv_lora_rank", default=FROM_CLASS), v),
                    experts=E, top_k=k, moe_intermediate=c.int("expert_ffn_hidden_size", default=FROM_CLASS),
                    variant=LongcatVariant(Z), **c.common)


def walk(B: Builder) -> list[Module]:
    """The forward at B.s's sizes: writes its ops to B and returns the modules it met."""
    s = B.s
    assert s.latent is not None, "a LongCat spec has its latent attention's sizes"
    Z = s.variant_as(LongcatVariant).zero_experts
    w = Walk(B, LAYOUT)
    p, h, L, n = w.p, s.hidden, s.layers, B.b * B.seq
    every = tuple(range(L))
    w.record(p.embed, None, (("weight", (s.vocab, h)),), None)
    B.embedding(p.embed, "embedding", s.vocab, h, B.seq)
    decoders.rotary(B, s.rope_dim)
    kvl = s.latent.kv_lora_rank
    for i in (0, 1):
        w.p = replace(p, attn=f"{p.attn}.{i}", mlp=f"mlps.{i}")
        w.norm(f"input_layernorm.{i}", "attn_norm", h, every)
        B.add(w.label(f"self_attn.{i} LoRA scalings (q_pass, q_rot, k_pass)", every), "activation", "encoder", L,
              w.tok + (s.heads * s.head_dim,), w.tok + (s.heads * s.head_dim,), ew=n * (s.heads * s.head_dim + kvl))
        layout_moe.latent(w, every)
        w.norm(f"post_attention_layernorm.{i}", "ffn_norm", h, every)
        if i == 0:
            w.p = p
            _moe(w, every, Z)
            w.p = replace(p, mlp="mlps.0")
        mlp(w, every, "gated", s.intermediate)
    w.p = p
    B.add(w.label("+ shortcut MoE output", every), "activation", "encoder", L, w.tok + (h,), w.tok + (h,), ew=n * h)
    w.norm(p.norm, "output_norm", h, None, residual=False)
    if s.head == "lm":
        w.modules.append(Module(p.lm_head, None, (("weight", (s.vocab, h)),), top=True))
        decoders.lm_head(B, p.lm_head, p.embed)
    return w.modules


def _moe(w: Walk, layers: tuple[int, ...], Z: int) -> None:
    """LongcatFlashMoE: the router over E + Z experts, the real experts on every one of a token's k picks (a zero
    expert's pick sent to a real one at weight 0: the module docstring), the weighted combine (the zero experts'
    identity mix beside it)."""
    s, p, B = w.s, w.p, w.B
    h, f, E, k, L = s.hidden, s.moe_intermediate, s.experts, s.top_k, len(layers)
    moe, x, n = p.mlp, f"{p.mlp}.experts", B.b * B.seq
    w.linear(f"{moe}.{p.router}", None, h, E + Z, False, layers, label=w.label(f"{moe}.{p.router} (router, fp32)", layers))
    B.add(w.label(f"{moe}.router softmax, + e_score_correction_bias, top-k, x routed_scaling_factor", layers),
          "activation", "encoder", L, (B.b, B.seq, E + Z), (B.b, B.seq, k), ew=n * ((E + Z) * (ew_cost("softmax") + 1) + 2 * k))
    rows = (n * k,)
    label = f"(top-{k}, a zero expert's pick at weight 0)" if Z else f"(top-{k})"
    if E:
        for sub in (p.gate, p.up):
            w.record(f"{x}.{{xid}}.{sub}", None, (("weight", (f, h)),), layers, experts=E)
            B.linear(w.label(f"{x}[{E}].{sub} {label}", layers), "encoder", rows, h, f, False, L, L * E,
                     active_copies=L * k)
        B.activation(w.label(f"{x} act*{p.up}", layers), "encoder", rows, f, s.activation, L, gated=True)
        w.record(f"{x}.{{xid}}.{p.down}", None, (("weight", (h, f)),), layers, experts=E)
        B.linear(w.label(f"{x}[{E}].{p.down} {label}", layers), "encoder", rows, f, h, False, L, L * E, active_copies=L * k)
    B.add(w.label(f"{moe}.combine (x routing weight, index_add)", layers), "activation", "encoder", L, (n * k, h),
          (B.b, B.seq, h), ew=n * k * h * 2)


def build(B: Builder) -> None:
    # parameters at one token (graph.predict_params); FLOPs only where transformers can run the MoE
    if (why := flops_refused(B.s)) and B.b * B.seq > 1:
        raise NoAnalyticModel(f"{why}: not described by the op template")
    walk(B)


expected_tensors = walk_tensors(walk, LAYOUT.paths.body)
_NAMES = walk_names.walked(walk, "longcat_flash", **walk_names.LM, rope_dim=2, latent=Latent(4, 4, 4), experts=2, top_k=1,
                           moe_intermediate=4, variant=LongcatVariant(1))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Every MLA size from the shapes as DeepSeek's (deepseek.from_tensors): with X = a(nope + v) (kv_b_proj rows),
    Y = a v (o_proj columns), Z = a(nope + rope) (q_b_proj rows), rope = kv_a_proj_with_mqa rows - kv_lora_rank,
    a = (Z - X + Y) / rope; E + Z experts from the router's rows, E from the down projections (one per real expert,
    or the fused down_proj's first axis); moe_topk, which no tensor shows, the config class's."""
    def shape(key: str) -> tuple[int, ...]:
        return walk_names.shape(T, _NAMES, key)

    V, h = shape("embed_tokens")
    kvl = shape("self_attn.0.kv_a_layernorm")[0]
    rope = shape("self_attn.0.kv_a_proj_with_mqa")[0] - kvl
    X, Y, Zq = shape("self_attn.0.kv_b_proj")[0], shape("self_attn.0.o_proj")[1], shape("self_attn.0.q_b_proj")[0]
    if rope <= 0 or (Zq - X + Y) % rope or (Zq - X + Y) <= 0:
        raise UsageError("cannot infer the MLA head sizes from tensor shapes; pass --config")
    a = (Zq - X + Y) // rope
    nope, v = Zq // a - rope, Y // a
    L = infer.count_layers(T, walk_names.layers(_NAMES, "mlps.0.gate_proj"))
    total = shape("mlp.router.classifier")[0]
    fused = infer.find(T, r"(^|\.)layers\.\d+\.mlp\.experts\.down_proj$")
    if fused is not None:
        E, fe = fused.shape[0], fused.shape[2]
    else:
        rx = re.compile(r"(^|\.)layers\.0\.mlp\.experts\.(\d+)\.down_proj\.weight$")
        ids = {int(m.group(2)) for t in T if (m := rx.search(t))}
        E = max(ids) + 1 if ids else 0
        fe = infer.shape(T, r"(^|\.)layers\.0\.mlp\.experts\.0\.down_proj\.weight$", "mlp.experts.0.down_proj")[1] \
            if E else 0
    k = int(class_default("longcat_flash", "moe_topk"))
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=a, head_dim=nope + rope, rope_dim=rope, vocab=V,
                    intermediate=shape("mlps.0.gate_proj")[0], activation="silu", gated_mlp=True, norm="rmsnorm",
                    qkv_bias=infer.has(T, walk_names.pattern(_NAMES, "self_attn.0.kv_a_proj_with_mqa", "bias")),
                    o_bias=infer.has(T, walk_names.pattern(_NAMES, "self_attn.0.o_proj", "bias")), mlp_bias=False,
                    tied_embeddings=not infer.has(T, walk_names.pattern(_NAMES, "lm_head")),
                    latent=Latent(shape("self_attn.0.q_a_proj")[0], kvl, v), experts=E, top_k=min(k, total),
                    moe_intermediate=fe, variant=LongcatVariant(total - E),
                    assumptions=(f"no config: experts per token (moe_topk) assumed {min(k, total)}, the longcat_flash "
                                 "config class default",), **common)


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """DynamicCache(config) after b x n tokens: 2 x num_layers cache layers (one per attention), each the latent
    [b, 1, n, kv_lora_rank] (keys) and the rope key [b, 1, n, qk_rope_head_dim] (values)."""
    assert s.latent is not None, "a LongCat spec has its latent attention's sizes"
    per = 2 * s.layers * (s.latent.kv_lora_rank + s.rope_dim) * ab
    return [(f"MLA latent b={b} s={n}", per * b * n,
             f"2 attentions per layer x L x (kv_lora_rank + qk_rope_head_dim) x s x b x {ab} B = {per:,} B/token")]


_SIZES = dict(vocab_size=97, hidden_size=32, num_layers=2, num_attention_heads=4, ffn_hidden_size=40, q_lora_rank=16,
              kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, head_dim=4, v_head_dim=6, expert_ffn_hidden_size=20,
              max_position_embeddings=64)

FAMILY = Family(
    name="longcat_flash",
    model_types=("longcat_flash",),
    signature=walk_names.signature(_NAMES, "mlps.0.gate_proj", tf1=False),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    **{**decoder_lm(LAYOUT), "kv_cache": kv_cache},
    flops_refused=flops_refused,
    cache_heads=lambda s: 1,      # the latent: one head, whole on every tensor-parallel device
    gguf_architectures=(),        # llama.cpp has no LongCat-Flash architecture
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU. Zero experts, every one
        # of the E + Z picked
        Sample("LongcatFlashConfig", dict(_SIZES, n_routed_experts=3, zero_expert_num=1, moe_topk=4),
               ("LongcatFlashModel", "LongcatFlashForCausalLM"), device="cpu"),
        # no zero experts, tied, other head counts and widths, biased attention
        Sample("LongcatFlashConfig", dict(_SIZES, num_layers=3, num_attention_heads=2, qk_nope_head_dim=6,
                                          qk_rope_head_dim=2, head_dim=2, v_head_dim=10, n_routed_experts=4,
                                          zero_expert_num=0, moe_topk=2,
                                          tie_word_embeddings=True, attention_bias=True),
               ("LongcatFlashForCausalLM",), device="cpu"),
        # as the released model: real and zero experts, a token's picks on either (each runs a real expert)
        Sample("LongcatFlashConfig", dict(_SIZES, n_routed_experts=3, zero_expert_num=2, moe_topk=2),
               ("LongcatFlashForCausalLM",), device="cpu"),
    ),
)
