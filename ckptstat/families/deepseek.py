"""DeepSeek-V2 and DeepSeek-V3 (transformers modeling_deepseek_v2.py, modeling_deepseek_v3.py).

Multi-head latent attention (MLA): queries through a low-rank pair q_a_proj (h -> q_lora_rank), RMSNorm,
q_b_proj (-> a x (qk_nope_head_dim + qk_rope_head_dim)), or one q_proj when q_lora_rank is null
(V2-Lite); keys and values from kv_a_proj_with_mqa (h -> kv_lora_rank + qk_rope_head_dim: the latent
and one shared rope key), RMSNorm on the latent, kv_b_proj (kv_lora_rank -> a x (qk_nope_head_dim +
v_head_dim)); scores over qk_nope + qk_rope dims, context over v_head_dim, o_proj (a x v_head_dim -> h).
The first first_k_dense_replace layers run a dense gated MLP (intermediate_size); the others a router
over n_routed_experts MLPs of moe_intermediate_size (top num_experts_per_tok per token) plus
n_shared_experts fused into one MLP of n_shared_experts x moe_intermediate_size. V3's noaux_tc router
scores by sigmoid and adds e_score_correction_bias (a buffer, not a parameter) when choosing experts;
its matmuls are V2's. The routed experts' FLOPs are Qwen-MoE's (routed_experts: transformers 5's default
grouped_mm experts implementation, the top-k rows of each token).

KV cache: transformers 5, like an absorbed MLA kernel (DeepSeek's inference code, vLLM, SGLang), caches only the
normalised latent (kv_lora_rank) and the rope key (qk_rope_head_dim) per token and layer, one head that tensor
parallelism cannot split: the first line, what memory and the planner count. transformers 4's eager attention cached
the expanded per-head K (qk_nope + qk_rope) and V (v_head_dim) of every head: the second line, labelled.

ArchSpec: heads = key heads = num_attention_heads, head_dim = qk_nope + qk_rope; family-specific sizes
(ArchSpec.extra): q_lora_rank (0: no q LoRA), kv_lora_rank, qk_nope, qk_rope, v_head_dim,
moe_intermediate, shared_intermediate."""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import UsageError
from . import decoders, infer, layout, llama
from .base import FROM_CLASS, ArchSpec, Cfg, Family, KVLines, Sample, Shapes, Tensors, add_linear, add_norm
from .decoders import count
from .ops import Builder, ew_cost, window_groups


def xs(s: ArchSpec, key: str) -> int:
    """A family-specific size from ArchSpec.extra, 0 when absent."""
    return dict(s.extra).get(key, 0)


def gated_mlp(B: Builder, pre: str, f: int, calls: int, tokens: tuple[int, ...] | None = None,
              copies: int | None = None, active: int | None = None) -> None:
    """gate_proj, up_proj, act(gate) * up, down_proj; routed experts pass their rows and copies."""
    s = B.s
    tok = tokens or (B.b, B.seq)
    B.linear(f"{pre}.gate_proj", "encoder", tok, s.hidden, f, s.mlp_bias, calls, copies, active_copies=active)
    B.linear(f"{pre}.up_proj", "encoder", tok, s.hidden, f, s.mlp_bias, calls, copies, active_copies=active)
    B.activation(f"{pre} act*up", "encoder", tok, f, s.activation, calls, gated=True)
    B.linear(f"{pre}.down_proj", "encoder", tok, f, s.hidden, s.mlp_bias, calls, copies, active_copies=active)


def routed_experts(B: Builder, lay: str, calls: int) -> None:
    """The router and the routed experts (Qwen-MoE, DeepSeek): each token visits its top-k experts, so k
    rows in all pass through the experts' projections, however the router spreads them (grouped_mm, transformers
    5's default, runs each expert's group of rows; the eager loop, each expert on the rows it got); then the
    weighted combine."""
    s, b, n = B.s, B.b, B.seq
    h, E, k = s.hidden, s.experts, s.top_k
    B.linear(f"{lay}.mlp.gate (router)", "encoder", (b, n), h, E, False, calls)
    gated_mlp(B, f"{lay}.mlp.experts[{E}] (top-{k})", xs(s, "moe_intermediate"), calls, (b * n * k,),
              copies=calls * E, active=calls * k)
    B.add(f"{lay}.mlp.experts combine (x routing weight)", "activation", "encoder", calls, (b * n * k, h), (b, n, h),
          ew=b * n * k * h * 2)


def decoder(B: Builder, mlp: Callable[[Builder, str, int], None],
            attn: Callable[[Builder, str, int, int | None], None], rotary: int = 0) -> None:
    """Embedding, rotary table, the sparse layers then the dense ones (each group's ops once, called
    once per layer of the group; a group whose layers differ in sliding window splits in two, ops.window_groups),
    final norm and LM head. attn(B, label, calls, window); rotary: the rotated dims per head (default head_dim)."""
    s, b, n = B.s, B.b, B.seq
    B.embedding("embed_tokens", "embedding", s.vocab, s.hidden, n)
    decoders.rotary(B, rotary or s.head_dim)
    dense = set(s.dense_layers)
    sparse = [i for i in range(s.layers) if i not in dense]
    for kind, idx, part in (("sparse", sparse, mlp), ("dense", sorted(dense), _dense)):
        groups = window_groups(s, idx) if idx else []
        for _, calls, window in groups:
            label = f"layers[{calls} {kind}" + ("" if len(groups) == 1 else ", sliding" if window else ", full") + "]"
            attn(B, label, calls, window)
            part(B, label, calls)
    B.norm("norm", "encoder", (b, n), s.hidden, residual=False)
    if s.head == "lm":
        B.linear("lm_head" + (" (tied to embed_tokens)" if s.tied_embeddings else ""), "cls", (b, n), s.hidden, s.vocab,
                 False, tied=s.tied_embeddings)


def _dense(B: Builder, lay: str, calls: int) -> None:
    gated_mlp(B, f"{lay}.mlp", B.s.intermediate, calls)


def from_config(c: Cfg) -> ArchSpec:
    h, a, L = c.int("hidden_size"), c.int("num_attention_heads"), count(c, "num_hidden_layers")
    nope, rope, v = c.int("qk_nope_head_dim"), c.int("qk_rope_head_dim"), c.int("v_head_dim")
    E = count(c, "n_routed_experts", default=0)
    first = min(c.int("first_k_dense_replace", default=0), L)
    fe = c.int("moe_intermediate_size")
    # q_lora_rank null (DeepSeek-V2-Lite): one q_proj, no query LoRA; absent: the config class's rank (1536)
    q_lora = 0 if "q_lora_rank" in c.cfg and c.cfg["q_lora_rank"] is None else c.int("q_lora_rank", default=FROM_CLASS)
    extra = (("q_lora_rank", q_lora), ("kv_lora_rank", c.int("kv_lora_rank")),
             ("qk_nope", nope), ("qk_rope", rope), ("v_head_dim", v), ("moe_intermediate", fe),
             ("shared_intermediate", fe * c.int("n_shared_experts", default=0)))
    bias = bool(c.get("attention_bias", default=False))
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=a, head_dim=nope + rope,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    context=c.int("max_position_embeddings", default=0),
                    activation=str(c.get("hidden_act", default="silu")), gated_mlp=True, norm="rmsnorm",
                    qkv_bias=bias, o_bias=bias, mlp_bias=bool(c.get("mlp_bias", default=False)),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=False)),
                    experts=E, top_k=c.int("num_experts_per_tok", default=0) if E else 0, extra=extra,
                    dense_layers=tuple(range(first if E else L)), **c.common)


_ROUTER = re.compile(r"layers\.(\d+)\.mlp\.gate\.weight$")


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Every MLA size follows from the shapes: with X = a(nope + v) (kv_b_proj rows), Y = a v (o_proj
    columns), Z = a(nope + rope) (q_b_proj / q_proj rows) and rope = kv_a_proj_with_mqa rows - kv_lora_rank,
    a = (Z - X + Y) / rope."""
    V, h = infer.shape(T, r"embed_tokens\.weight$", "embed_tokens")
    kvl = infer.shape(T, r"self_attn\.kv_a_layernorm\.weight$", "kv_a_layernorm")[0]
    rope = infer.shape(T, r"self_attn\.kv_a_proj_with_mqa\.weight$", "kv_a_proj_with_mqa")[0] - kvl
    X = infer.shape(T, r"self_attn\.kv_b_proj\.weight$", "kv_b_proj")[0]
    Y = infer.shape(T, r"self_attn\.o_proj\.weight$", "o_proj")[1]
    qa = infer.find(T, r"self_attn\.q_a_proj\.weight$")
    Z = infer.shape(T, r"self_attn\.q_(b_)?proj\.weight$", "q_b_proj")[0]
    if rope <= 0 or (Z - X + Y) % rope:
        raise UsageError("cannot infer the MLA head sizes from tensor shapes; pass --config")
    a = (Z - X + Y) // rope
    nope, v = (Z // a) - rope, Y // a
    L = infer.count_layers(T, r"layers\.(\d+)\.")
    sparse = {int(m.group(1)) for n in T if (m := _ROUTER.search(n))}
    E = infer.shape(T, r"mlp\.gate\.weight$", "router")[0] if sparse else 0
    fe = infer.expert_width(T, r"mlp\.experts\.0\.gate_proj\.weight$", "experts.0.gate_proj") if sparse else 0
    fs = infer.find(T, r"mlp\.shared_experts\.gate_proj\.weight$")
    fd = infer.find(T, r"layers\.\d+\.mlp\.gate_proj\.weight$")
    extra = (("q_lora_rank", qa.shape[0] if qa is not None else 0), ("kv_lora_rank", kvl), ("qk_nope", nope),
             ("qk_rope", rope), ("v_head_dim", v), ("moe_intermediate", fe),
             ("shared_intermediate", fs.shape[0] if fs is not None else 0))
    # V3's router stores e_score_correction_bias (a persistent buffer); V2's has none
    v3 = infer.has(T, r"mlp\.gate\.e_score_correction_bias$")
    k = 8 if v3 else 6
    notes = (f"no config: experts per token (top-k) assumed {k}, as in DeepSeek-{'V3' if v3 else 'V2'}",) if sparse else ()
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=a, head_dim=nope + rope, vocab=V,
                    intermediate=fd.shape[0] if fd is not None else fe, gated_mlp=True, norm="rmsnorm",
                    qkv_bias=infer.has(T, r"kv_a_proj_with_mqa\.bias$"), o_bias=infer.has(T, r"o_proj\.bias$"),
                    mlp_bias=infer.has(T, r"gate_proj\.bias$"), tied_embeddings=infer.find(T, r"lm_head\.weight$") is None,
                    experts=E, top_k=k if sparse else 0, activation="silu", extra=extra,
                    dense_layers=tuple(i for i in range(L) if i not in sparse), assumptions=notes, **common)


def mla(B: Builder, lay: str, calls: int, window: int | None = None) -> None:
    s, b, n = B.s, B.b, B.seq
    h, a = s.hidden, s.heads
    ql, kvl, nope, rope, v = (xs(s, k) for k in ("q_lora_rank", "kv_lora_rank", "qk_nope", "qk_rope", "v_head_dim"))
    tok, at = (b, n), f"{lay}.self_attn"
    B.norm(f"{lay}.input_layernorm", "encoder", tok, h, calls)
    if ql:
        B.linear(f"{at}.q_a_proj", "encoder", tok, h, ql, s.qkv_bias, calls)
        B.norm(f"{at}.q_a_layernorm", "encoder", tok, ql, calls, residual=False)
        B.linear(f"{at}.q_b_proj", "encoder", tok, ql, a * (nope + rope), False, calls)
    else:
        B.linear(f"{at}.q_proj", "encoder", tok, h, a * (nope + rope), False, calls)
    B.linear(f"{at}.kv_a_proj_with_mqa (latent + rope key)", "encoder", tok, h, kvl + rope, s.qkv_bias, calls)
    B.norm(f"{at}.kv_a_layernorm", "encoder", tok, kvl, calls, residual=False)
    B.linear(f"{at}.kv_b_proj (latent -> per-head k_nope, v)", "encoder", tok, kvl, a * (nope + v), False, calls)
    B.add(f"{at} rotary (q_pe, k_pe)", "activation", "encoder", calls, tok + ((a + 1) * rope,), tok + ((a + 1) * rope,),
          ew=b * n * (a + 1) * rope * ew_cost("rotary"))
    # eager attention: scores over nope + rope dims, context over v_head_dim (two bmm's of different widths)
    B.attention(at, "encoder", a, n, n, nope + rope, calls, causal=True, window=window, v_dim=v)
    B.linear(f"{at}.o_proj", "encoder", tok, a * v, h, s.o_bias, calls)
    B.norm(f"{lay}.post_attention_layernorm", "encoder", tok, h, calls)


def moe(B: Builder, lay: str, calls: int) -> None:
    s, b, n = B.s, B.b, B.seq
    h, fs = s.hidden, xs(s, "shared_intermediate")
    routed_experts(B, lay, calls)
    if fs:
        gated_mlp(B, f"{lay}.mlp.shared_experts", fs, calls)
        B.add(f"{lay}.mlp shared + routed", "activation", "encoder", calls, (b, n, h), (b, n, h), ew=b * n * h)


def build(B: Builder) -> None:
    decoder(B, moe, mla, rotary=xs(B.s, "qk_rope"))


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """The cache per token. transformers 5 (modeling_deepseek_v3, v2) caches the compressed latent: per layer one
    shared head holding the normalised kv_lora_rank latent as the key and the rotated rope key as the value
    (DynamicCache's keys [b, 1, s, kv_lora_rank], values [b, 1, s, qk_rope_head_dim]); that line comes first and
    is what memory and the planner count. transformers 4's eager forward cached the full per-head K and V: the
    alternative line."""
    lat = s.layers * (xs(s, "kv_lora_rank") + xs(s, "qk_rope")) * ab
    full = s.layers * s.heads * (s.head_dim + xs(s, "v_head_dim")) * ab
    return [(f"MLA latent b={b} s={n}", lat * b * n,
             f"transformers 5, the compressed latent + rope key, one head: L x (kv_lora_rank + qk_rope_head_dim)"
             f" x s x b x {ab} B = {lat:,} B/token"),
            (f"per-head K+V b={b} s={n}", full * b * n,
             f"transformers 4 eager, full K and V: L x a x (qk_nope + qk_rope + v_head_dim) x s x b x {ab} B"
             f" = {full:,} B/token")]


def _mlp(out: Shapes, q: str, h: int, f: int, bias: bool) -> None:
    for m, fo, fi in (("gate_proj", f, h), ("up_proj", f, h), ("down_proj", h, f)):
        add_linear(out, q + m, fo, fi, bias)


def layer_tensors(out: Shapes, q: str, s: ArchSpec) -> None:
    """One layer's MLA and MLP."""
    h, a = s.hidden, s.heads
    ql, kvl, nope, rope, v = (xs(s, k) for k in ("q_lora_rank", "kv_lora_rank", "qk_nope", "qk_rope", "v_head_dim"))
    at = q + "self_attn."
    if ql:
        add_linear(out, at + "q_a_proj", ql, h, s.qkv_bias)
        add_norm(out, at + "q_a_layernorm", ql, bias=False)
        add_linear(out, at + "q_b_proj", a * (nope + rope), ql, bias=False)
    else:
        add_linear(out, at + "q_proj", a * (nope + rope), h, bias=False)
    add_linear(out, at + "kv_a_proj_with_mqa", kvl + rope, h, s.qkv_bias)
    add_norm(out, at + "kv_a_layernorm", kvl, bias=False)
    add_linear(out, at + "kv_b_proj", a * (nope + v), kvl, bias=False)
    add_linear(out, at + "o_proj", h, a * v, s.o_bias)
    if int(q.rstrip(".").rsplit(".", 1)[-1]) in s.dense_layers:
        _mlp(out, q + "mlp.", h, s.intermediate, s.mlp_bias)
        return
    add_linear(out, q + "mlp.gate", s.experts, h, bias=False)
    for e in range(s.experts):
        _mlp(out, f"{q}mlp.experts.{e}.", h, xs(s, "moe_intermediate"), s.mlp_bias)
    if xs(s, "shared_intermediate"):
        _mlp(out, q + "mlp.shared_experts.", h, xs(s, "shared_intermediate"), s.mlp_bias)


def expected_tensors(s: ArchSpec) -> Shapes:
    p = "" if s.head == "base" else "model."
    out: Shapes = {p + "embed_tokens.weight": (s.vocab, s.hidden)}
    for i in range(s.layers):
        layer_tensors(out, f"{p}layers.{i}.", s)
        add_norm(out, f"{p}layers.{i}.input_layernorm", s.hidden, bias=False)
        add_norm(out, f"{p}layers.{i}.post_attention_layernorm", s.hidden, bias=False)
    add_norm(out, p + "norm", s.hidden, bias=False)
    if s.head == "lm":
        add_linear(out, "lm_head", s.vocab, s.hidden, bias=False)
    return out


# convert_hf_to_gguf.py DeepseekV2Model (DeepSeek-V2 and V3 alike, llama.cpp architecture deepseek2): its keys
# under DeepSeek's config names. attention.key_length / value_length are the MLA cache's (kv_lora_rank +
# qk_rope, kv_lora_rank) in files with key_length_mla; older files have no *_mla keys and key_length =
# qk_nope + qk_rope, value_length = v_head_dim.
_GGUF_KEYS = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size",
              "feed_forward_length": "intermediate_size", "attention.head_count": "num_attention_heads",
              "context_length": "max_position_embeddings", "expert_count": "n_routed_experts",
              "expert_used_count": "num_experts_per_tok", "expert_feed_forward_length": "moe_intermediate_size",
              "expert_shared_count": "n_shared_experts", "leading_dense_block_count": "first_k_dense_replace",
              "attention.q_lora_rank": "q_lora_rank", "attention.kv_lora_rank": "kv_lora_rank",
              "rope.dimension_count": "qk_rope_head_dim"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """V3 when the routers carry exp_probs_b (its e_score_correction_bias), else V2."""
    cfg = infer.gguf_config(arch, metadata, tensors, "DeepseekV2ForCausalLM", keys=_GGUF_KEYS) if arch == "deepseek2" else None
    if cfg is None:
        return None
    v3 = any(".exp_probs_b." in n for n in tensors)
    cfg.setdefault("q_lora_rank", None)   # the converter writes it only for a q LoRA (V2-Lite has none): not the class's 1536
    cfg.update(model_type="deepseek_v3" if v3 else "deepseek_v2",
               architectures=["DeepseekV3ForCausalLM" if v3 else "DeepseekV2ForCausalLM"])
    mla = infer.gguf_int(metadata, f"{arch}.attention.key_length_mla") is not None
    k = infer.gguf_int(metadata, f"{arch}.attention.key_length{'_mla' if mla else ''}")
    v = infer.gguf_int(metadata, f"{arch}.attention.value_length{'_mla' if mla else ''}")
    if k is not None and "qk_rope_head_dim" in cfg:
        cfg["qk_nope_head_dim"] = k - cfg["qk_rope_head_dim"]
    if v is not None:
        cfg["v_head_dim"] = v
    return cfg


# Routed experts under `mlp.experts.{xid}`, stacked by llama.cpp's converter into one 3-D
# blk.N.ffn_{gate,up,down}_exps [experts, out, in] per projection: expert {xid} is its slice (ckptstat diff).
GGUF_EXPERT_STACKS = tuple(p for p in layout.gguf_tensor_names(layout.DecoderLayout(mlp="routed")) if "{xid}" in p[0])

# HF module -> llama.cpp GGUF tensor name (gguf-py tensor_mapping.py, MODEL_ARCH.DEEPSEEK2). The converter
# stacks the routed experts into blk.N.ffn_{gate,up,down}_exps [experts, out, in] (expert {xid} a slice of
# it), and (since llama.cpp's MLA rework) splits kv_b_proj per head into attn_k_b (k_nope part, transposed)
# and attn_v_b: no HF name maps to those; older files keep attn_kv_b. V3's e_score_correction_bias (a buffer)
# is exp_probs_b.bias.
GGUF_TENSOR_NAMES = tuple(p for p in llama.GGUF_TENSOR_NAMES if ".self_attn." not in p[0]) + GGUF_EXPERT_STACKS + (
    ("model.layers.{bid}.self_attn.q_proj", "blk.{bid}.attn_q"),
    ("model.layers.{bid}.self_attn.q_a_proj", "blk.{bid}.attn_q_a"),
    ("model.layers.{bid}.self_attn.q_a_layernorm", "blk.{bid}.attn_q_a_norm"),
    ("model.layers.{bid}.self_attn.q_b_proj", "blk.{bid}.attn_q_b"),
    ("model.layers.{bid}.self_attn.kv_a_proj_with_mqa", "blk.{bid}.attn_kv_a_mqa"),
    ("model.layers.{bid}.self_attn.kv_a_layernorm", "blk.{bid}.attn_kv_a_norm"),
    ("model.layers.{bid}.self_attn.kv_b_proj", "blk.{bid}.attn_kv_b"),
    ("model.layers.{bid}.self_attn.o_proj", "blk.{bid}.attn_output"),
    ("model.layers.{bid}.mlp.gate", "blk.{bid}.ffn_gate_inp"),
    ("model.layers.{bid}.mlp.gate.e_score_correction_bias", "blk.{bid}.exp_probs_b.bias"),
    ("model.layers.{bid}.mlp.shared_experts.gate_proj", "blk.{bid}.ffn_gate_shexp"),
    ("model.layers.{bid}.mlp.shared_experts.up_proj", "blk.{bid}.ffn_up_shexp"),
    ("model.layers.{bid}.mlp.shared_experts.down_proj", "blk.{bid}.ffn_down_shexp"),
)

_SIZES = dict(vocab_size=97, hidden_size=32, intermediate_size=48, moe_intermediate_size=24, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, n_shared_experts=2,
              num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8,
              qk_rope_head_dim=4, v_head_dim=6, max_position_embeddings=64)

FAMILY = Family(
    name="deepseek",
    before=("llama", "mixtral"),   # tried before them: its q_proj and mlp.experts.N names match theirs
    model_types=("deepseek_v2", "deepseek_v3"),
    signature=r"(^|[./])self_attn[./]kv_a_proj_with_mqa[./]",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm"),
    head_rules=llama.HEAD_RULES,
    default_head="lm",
    tie_rules=llama.DECODER_LM["tie_rules"],     # DeepseekV2/V3ForCausalLM: _tied_weights_keys ["lm_head.weight"]
    tied_by_default=False,
    kv_cache=kv_cache,
    cache_heads=lambda s: 1,      # the latent: one head, whole on every tensor-parallel device
    gguf_architectures=("deepseek2",), gguf_config=gguf_config, gguf_tensor_names=GGUF_TENSOR_NAMES,
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("DeepseekV2Config", dict(_SIZES, n_group=2, topk_group=1, topk_method="group_limited_greedy"),
               ("DeepseekV2Model", "DeepseekV2ForCausalLM"), device="cpu"),
        # V2-Lite: no q LoRA (q_proj), greedy top-k
        Sample("DeepseekV2Config", dict(_SIZES, q_lora_rank=None, n_shared_experts=1, first_k_dense_replace=2,
                                        tie_word_embeddings=True), ("DeepseekV2ForCausalLM",), device="cpu"),
        Sample("DeepseekV3Config", dict(_SIZES, n_group=2, topk_group=1), ("DeepseekV3Model", "DeepseekV3ForCausalLM"),
               device="cpu"),
        Sample("DeepseekV3Config", dict(_SIZES, q_lora_rank=None, n_shared_experts=1, n_group=1, topk_group=1,
                                        attention_bias=True), ("DeepseekV3ForCausalLM",), device="cpu"),
    ),
)
