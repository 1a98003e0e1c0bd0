"""Qwen2-MoE and Qwen3-MoE (transformers modeling_qwen2_moe.py, modeling_qwen3_moe.py): the LLaMA-style
decoder whose MLP is, in the sparse layers, a router over num_experts gated MLPs of moe_intermediate_size
of which each token visits num_experts_per_tok. Qwen2-MoE adds a shared expert (shared_expert_intermediate_size)
scaled by sigmoid(shared_expert_gate(x)), and biases q/k/v; Qwen3-MoE normalises q and k per head
(q_norm, k_norm over head_dim) and has no shared expert. A layer i is sparse when i is not in
mlp_only_layers and (i + 1) % decoder_sparse_step == 0; the others run a dense MLP of intermediate_size.

FLOPs of the routed experts model transformers 5's default experts implementation, grouped_mm (integrations/moe.py
grouped_mm_experts_forward, over the fused gate_up_proj [E, 2f, h] and down_proj [E, h, f] that save_pretrained
writes back as mlp.experts.N.{gate,up,down}_proj): each token's top-k rows, b x s x k rows in all; the eager loop
(experts_implementation="eager") runs the same matmuls expert by expert. DeepSeek's experts (deepseek.py) are these.

Family-specific sizes (ArchSpec.extra): moe_intermediate, shared_intermediate (0: no shared expert),
qk_norm (1: Qwen3's per-head q/k RMSNorm)."""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import UsageError
from . import llama
from .framework import decoders, infer, layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, add_linear, add_norm
from .framework.ops import Builder, ew_cost, window_groups


def xs(s: ArchSpec, key: str) -> int:
    """A family-specific size from ArchSpec.extra, 0 when absent."""
    return dict(s.extra).get(key, 0)


# Per-layer and per-expert tables (dense_layers, sliding_layers, the expected-tensor template) are built
# one entry each: refuse counts no model has (the largest have ~100 layers and 256 experts) before looping.
MAX_COUNT = 1 << 16


def count(c: Cfg, *keys: str, default: object = KeyError) -> int:
    """c.int, bounded by MAX_COUNT (a one-line UsageError naming the key)."""
    v = c.int(*keys, default=default)
    if v > MAX_COUNT:
        raise UsageError(f"{c.path}: config {keys[0]} = {v} is beyond any model (at most {MAX_COUNT:,} here)")
    return v


def from_config(c: Cfg) -> ArchSpec:
    h, a, L = c.int("hidden_size"), c.int("num_attention_heads"), count(c, "num_hidden_layers")
    g = c.int("num_key_value_heads", default=a)
    E, step = count(c, "num_experts"), c.int("decoder_sparse_step", default=1)
    only = c.get("mlp_only_layers", default=[])
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise UsageError(f"{c.path}: config mlp_only_layers = {only!r} is not a list of layer indices")
    dense = tuple(i for i in range(L) if i in only or not (E > 0 and step > 0 and (i + 1) % step == 0))
    qwen2 = c.model_type == "qwen2_moe"
    bias = bool(c.get("qkv_bias", default=True)) if qwen2 else bool(c.get("attention_bias", default=False))
    extra = (("moe_intermediate", c.int("moe_intermediate_size")),
             ("shared_intermediate", c.int("shared_expert_intermediate_size", default=0) if qwen2 else 0),
             ("qk_norm", 0 if qwen2 else 1))
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=g, head_dim=c.int("head_dim", default=h // a),
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    context=c.int("max_position_embeddings", default=0),
                    activation=str(c.get("hidden_act", default="silu")), gated_mlp=True, norm="rmsnorm",
                    qkv_bias=bias, o_bias=bias and not qwen2, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=False)),
                    experts=E, top_k=c.int("num_experts_per_tok"), extra=extra, dense_layers=dense,
                    **decoders.sliding(c, L), **c.common)


# a sparse layer's router (its index in group 1)
_ROUTER = re.compile(r"layers\.(\d+)\.mlp\.gate\.weight$")


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h, q, kv, d = decoders.attention_dims(T)
    qn = infer.find(T, r"self_attn\.q_norm\.weight$")
    if qn is not None:
        d = qn.shape[0]              # Qwen3-MoE: q_norm spans one head, so head_dim is exact
    L = infer.count_layers(T, r"layers\.(\d+)\.")
    sparse = {int(m.group(1)) for n in T if (m := _ROUTER.search(n))}
    E = infer.shape(T, r"mlp\.gate\.weight$", "router")[0]
    fe = infer.expert_width(T, r"mlp\.experts\.0\.gate_proj\.weight$", "experts.0.gate_proj")
    fs = infer.find(T, r"mlp\.shared_expert\.gate_proj\.weight$")
    fd = infer.find(T, r"layers\.\d+\.mlp\.gate_proj\.weight$")
    k = 8 if qn is not None else 4
    notes: tuple[str, ...] = ()
    if qn is None:
        notes = (f"no config: head_dim assumed {d} (KV-cache bytes use the k_proj width, which is exact)",)
    notes += (f"no config: experts per token (top-k) assumed {k}, as in "
              f"{'Qwen3-30B-A3B' if qn is not None else 'Qwen1.5-MoE-A2.7B'}",)
    extra = (("moe_intermediate", fe), ("shared_intermediate", fs.shape[0] if fs is not None else 0),
             ("qk_norm", int(qn is not None)))
    return ArchSpec(layers=L, hidden=h, heads=q // d, kv_heads=kv // d, head_dim=d, vocab=V,
                    intermediate=fd.shape[0] if fd is not None else fe, gated_mlp=True, norm="rmsnorm",
                    qkv_bias=infer.has(T, r"q_proj\.bias$"), o_bias=infer.has(T, r"o_proj\.bias$"), mlp_bias=False,
                    tied_embeddings=infer.find(T, r"lm_head\.weight$") is None, experts=E, top_k=k, activation="silu",
                    extra=extra, dense_layers=tuple(i for i in range(L) if i not in sparse), assumptions=notes, **common)


def attention(B: Builder, lay: str, calls: int, window: int | None = None) -> None:
    """Pre-norm grouped-query attention with rotary positions, and Qwen3's per-head q/k RMSNorm; window:
    the layers' sliding window (None: full causal attention)."""
    s, b, n = B.s, B.b, B.seq
    h, a, g, d = s.hidden, s.heads, s.kv_heads, s.head_dim
    tok = (b, n)
    B.norm(f"{lay}.input_layernorm", "encoder", tok, h, calls)
    B.linear(f"{lay}.self_attn.q_proj", "encoder", tok, h, a * d, s.qkv_bias, calls)
    if xs(s, "qk_norm"):
        B.norm(f"{lay}.self_attn.q_norm", "encoder", (b, n, a), d, calls, residual=False)
    B.linear(f"{lay}.self_attn.k_proj", "encoder", tok, h, g * d, s.qkv_bias, calls)
    if xs(s, "qk_norm"):
        B.norm(f"{lay}.self_attn.k_norm", "encoder", (b, n, g), d, calls, residual=False)
    B.linear(f"{lay}.self_attn.v_proj", "encoder", tok, h, g * d, s.qkv_bias, calls)
    B.add(f"{lay}.self_attn rotary", "activation", "encoder", calls, tok + ((a + g) * d,), tok + ((a + g) * d,),
          ew=b * n * (a + g) * d * ew_cost("rotary"))
    B.attention(f"{lay}.self_attn", "encoder", a, n, n, d, calls, causal=True, window=window)
    B.linear(f"{lay}.self_attn.o_proj", "encoder", tok, a * d, h, s.o_bias, calls)
    B.norm(f"{lay}.post_attention_layernorm", "encoder", tok, h, calls)


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


def sparse_mlp(B: Builder, lay: str, calls: int) -> None:
    s, b, n = B.s, B.b, B.seq
    h, fs = s.hidden, xs(s, "shared_intermediate")
    routed_experts(B, lay, calls)
    if fs:
        gated_mlp(B, f"{lay}.mlp.shared_expert", fs, calls)
        B.linear(f"{lay}.mlp.shared_expert_gate", "encoder", (b, n), h, 1, False, calls)
        B.add(f"{lay}.mlp sigmoid(gate) x shared + routed", "activation", "encoder", calls, (b, n, h), (b, n, h),
              ew=b * n * (ew_cost("silu") + 2 * h))


def decoder(B: Builder, mlp: Callable[[Builder, str, int], None],
            attn: Callable[[Builder, str, int, int | None], None] = attention, rotary: int = 0) -> None:
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


def build(B: Builder) -> None:
    decoder(B, sparse_mlp)


def _mlp(out: Shapes, q: str, h: int, f: int) -> None:
    for m, fo, fi in (("gate_proj", f, h), ("up_proj", f, h), ("down_proj", h, f)):
        add_linear(out, q + m, fo, fi, bias=False)


def moe_tensors(out: Shapes, q: str, s: ArchSpec) -> None:
    layer = int(q.rstrip(".").rsplit(".", 1)[-1])
    h = s.hidden
    if xs(s, "qk_norm"):
        add_norm(out, q + "self_attn.q_norm", s.head_dim, bias=False)
        add_norm(out, q + "self_attn.k_norm", s.head_dim, bias=False)
    if layer in s.dense_layers:
        _mlp(out, q + "mlp.", h, s.intermediate)
        return
    add_linear(out, q + "mlp.gate", s.experts, h, bias=False)
    for e in range(s.experts):
        _mlp(out, f"{q}mlp.experts.{e}.", h, xs(s, "moe_intermediate"))
    if xs(s, "shared_intermediate"):
        _mlp(out, q + "mlp.shared_expert.", h, xs(s, "shared_intermediate"))
        add_linear(out, q + "mlp.shared_expert_gate", 1, h, bias=False)


def expected_tensors(s: ArchSpec) -> Shapes:
    return decoders.decoder_tensors(s, moe_tensors)


# llama.cpp architecture -> (model_type, class) (convert_hf_to_gguf.py Qwen2MoeModel, Qwen3MoeModel).
GGUF_CLASSES = {"qwen2moe": ("qwen2_moe", "Qwen2MoeForCausalLM"), "qwen3moe": ("qwen3_moe", "Qwen3MoeForCausalLM")}
_GGUF_KEYS = {**{g: k for g, k in infer.GGUF_KEYS.items() if g != "expert_count"}, "expert_count": "num_experts",
              "expert_feed_forward_length": "moe_intermediate_size",
              "expert_shared_feed_forward_length": "shared_expert_intermediate_size"}
_GGUF_ROUTER = re.compile(r"^blk\.(\d+)\.ffn_gate_inp\.weight$")


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """`{arch}.*` keys plus expert_count, expert_feed_forward_length (moe_intermediate_size) and Qwen2-MoE's
    expert_shared_feed_forward_length. llama.cpp makes every layer sparse; a layer without a router
    (ffn_gate_inp) in the file is listed in mlp_only_layers. q/k/v biases: from attn_q.bias."""
    if arch not in GGUF_CLASSES:
        return None
    model_type, cls = GGUF_CLASSES[arch]
    cfg = infer.gguf_config(arch, metadata, tensors, cls, keys=_GGUF_KEYS)
    if cfg is None:
        return None
    sparse = {int(m.group(1)) for n in tensors if (m := _GGUF_ROUTER.match(n))}
    L = cfg.get("num_hidden_layers", 0)
    bias = "blk.0.attn_q.bias" in tensors
    cfg.update(model_type=model_type, mlp_only_layers=[i for i in range(min(L, MAX_COUNT)) if i not in sparse],
               decoder_sparse_step=1, qkv_bias=bias, attention_bias=bias)
    if "shared_expert_intermediate_size" not in cfg and (t := tensors.get("blk.0.ffn_gate_shexp.weight")) is not None:
        cfg["shared_expert_intermediate_size"] = t.shape[0]
    return cfg


# HF module -> llama.cpp GGUF tensor name (gguf-py tensor_mapping.py, MODEL_ARCH.QWEN2MOE / QWEN3MOE). The converter
# stacks each layer's routed experts into one 3-D tensor per projection, blk.N.ffn_{gate,up,down}_exps
# [experts, out, in]: expert {xid} is a slice of it (diff compares them slice by slice).
# Routed experts under `mlp.experts.{xid}` (Qwen-MoE, DeepSeek), stacked by llama.cpp's converter into one 3-D
# blk.N.ffn_{gate,up,down}_exps [experts, out, in] per projection: expert {xid} is its slice (ckptstat diff).
GGUF_EXPERT_STACKS = tuple(p for p in layout.gguf_tensor_names(layout.DecoderLayout(mlp="routed")) if "{xid}" in p[0])
GGUF_TENSOR_NAMES = llama.GGUF_TENSOR_NAMES + GGUF_EXPERT_STACKS + (
    ("model.layers.{bid}.self_attn.q_norm", "blk.{bid}.attn_q_norm"),
    ("model.layers.{bid}.self_attn.k_norm", "blk.{bid}.attn_k_norm"),
    ("model.layers.{bid}.mlp.gate", "blk.{bid}.ffn_gate_inp"),
    ("model.layers.{bid}.mlp.shared_expert.gate_proj", "blk.{bid}.ffn_gate_shexp"),
    ("model.layers.{bid}.mlp.shared_expert.up_proj", "blk.{bid}.ffn_up_shexp"),
    ("model.layers.{bid}.mlp.shared_expert.down_proj", "blk.{bid}.ffn_down_shexp"),
    ("model.layers.{bid}.mlp.shared_expert_gate", "blk.{bid}.ffn_gate_inp_shexp"),
)

_SIZES = dict(vocab_size=97, hidden_size=32, intermediate_size=48, moe_intermediate_size=24, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
              max_position_embeddings=64)

FAMILY = Family(
    name="qwen_moe",
    before=("llama", "mixtral", "qwen3"),   # tried before them: its q_proj, experts and (Qwen3-MoE) q_norm names match theirs
    model_types=("qwen2_moe", "qwen3_moe"),
    # the routed experts' gated MLPs under `mlp.experts.N` (DeepSeek's too, so deepseek is tried first), or Qwen2-MoE's
    # shared_expert_gate; transformers 5's fused experts (a torch.save of its state_dict) beside Qwen3's q_norm
    signature=r"(^|[./])layers[./]\d+[./]mlp[./](experts[./]\d+[./]gate_proj|shared_expert_gate[./])",
    signature_together=(infer.FUSED_EXPERTS, r"(^|[./])layers[./]\d+[./]self_attn[./]q_norm[./]"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    **llama.DECODER_LM,
    gguf_architectures=tuple(GGUF_CLASSES), gguf_config=gguf_config, gguf_tensor_names=GGUF_TENSOR_NAMES,
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("Qwen2MoeConfig", dict(_SIZES, shared_expert_intermediate_size=40, mlp_only_layers=[1]),
               ("Qwen2MoeModel", "Qwen2MoeForCausalLM"), device="cpu"),
        Sample("Qwen2MoeConfig", dict(_SIZES, shared_expert_intermediate_size=40, decoder_sparse_step=2,
                                      tie_word_embeddings=True), ("Qwen2MoeForCausalLM",), device="cpu"),
        Sample("Qwen3MoeConfig", dict(_SIZES, head_dim=16, mlp_only_layers=[0]), ("Qwen3MoeModel", "Qwen3MoeForCausalLM"),
               device="cpu"),
    ),
)
