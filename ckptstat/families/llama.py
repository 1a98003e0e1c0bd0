"""LLaMA-style decoders: Llama, Mistral, Qwen2 (transformers modeling_llama.py, modeling_mistral.py,
modeling_qwen2.py): pre-RMSNorm layers, rotary positions, grouped-query attention, a gated SiLU MLP,
Mistral's sliding window, Qwen2's q/k/v biases, and an LM head untied by default. The decoder pieces
here (decoder, dense_mlp, decoder_tensors, attention_dims, spec_from_tensors) serve mixtral.py too."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import base, decoders, infer
from .base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, TieRule, add_linear, add_norm, decoder_kv_cache
from .ops import Builder, ew_cost


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    g = c.int("num_key_value_heads", default=a)
    d = c.int("head_dim", default=h // a)
    qwen2 = c.model_type == "qwen2"   # Qwen2: q/k/v always biased, o_proj never
    attention_bias = bool(c.get("attention_bias", default=False))
    L = c.int("num_hidden_layers")
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=g, head_dim=d,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    context=c.int("max_position_embeddings", default=0),
                    activation=str(c.get("hidden_act", default="silu")), gated_mlp=True, norm="rmsnorm",
                    qkv_bias=qwen2 or attention_bias, o_bias=not qwen2 and attention_bias,
                    mlp_bias=bool(c.get("mlp_bias", default=False)),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=False)),
                    **decoders.sliding(c, L), **c.common)


def attention_dims(T: Tensors) -> tuple[int, int, int, int, int]:
    """(V, h, q width, k width, d) from embed_tokens and the q/k projections; d is assumed (128 or 64
    when it divides both widths): only the rotary table's tiny product depends on it."""
    V, h = infer.shape(T, r"embed_tokens\.weight$", "embed_tokens")
    q = infer.shape(T, r"self_attn\.q_proj\.weight$", "q_proj")[0]
    kv = infer.shape(T, r"self_attn\.k_proj\.weight$", "k_proj")[0]
    d = 128 if q % 128 == 0 and kv % 128 == 0 else 64 if q % 64 == 0 and kv % 64 == 0 else kv
    return V, h, q, kv, d


def spec_from_tensors(T: Tensors, common: dict[str, Any], dims: tuple[int, int, int, int, int], f: int,
                      experts: int = 0, top_k: int = 0, notes: tuple[str, ...] = ()) -> ArchSpec:
    V, h, q, kv, d = dims
    lm = infer.find(T, r"lm_head\.weight$")
    notes = (f"no config: head_dim assumed {d} (KV-cache bytes use the k_proj width, which is exact)",) + notes
    return ArchSpec(layers=infer.count_layers(T, r"layers\.(\d+)\."), hidden=h, heads=q // d, kv_heads=kv // d,
                    head_dim=d, intermediate=f, vocab=V, gated_mlp=True, norm="rmsnorm",
                    qkv_bias=infer.has(T, r"q_proj\.bias$"), o_bias=infer.has(T, r"o_proj\.bias$"),
                    mlp_bias=infer.has(T, r"(gate_proj|w1)\.bias$"), tied_embeddings=lm is None,
                    experts=experts, top_k=top_k, activation="silu", assumptions=notes, **common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    dims = attention_dims(T)
    return spec_from_tensors(T, common, dims, infer.shape(T, r"mlp\.gate_proj\.weight$", "gate_proj")[0])


def dense_mlp(B: Builder, lay: str) -> None:
    s, tok = B.s, (B.b, B.seq)
    h, L, f = s.hidden, s.layers, s.intermediate
    B.linear(f"{lay}.mlp.gate_proj", "encoder", tok, h, f, s.mlp_bias, L)
    B.linear(f"{lay}.mlp.up_proj", "encoder", tok, h, f, s.mlp_bias, L)
    B.activation(f"{lay}.mlp act*up", "encoder", tok, f, s.activation, L, gated=True)
    B.linear(f"{lay}.mlp.down_proj", "encoder", tok, f, h, s.mlp_bias, L)


def decoder(B: Builder, mlp: Callable[[Builder, str], None]) -> None:
    """The decoder stack with `mlp(B, layer prefix)` writing each layer's feed-forward part."""
    s, b, n = B.s, B.b, B.seq
    h, L, a, g, d = s.hidden, s.layers, s.heads, s.kv_heads, s.head_dim
    tok = (b, n)
    B.embedding("embed_tokens", "embedding", s.vocab, h, n)
    decoders.rotary(B, d)
    lay = f"layers[{L}]"
    B.norm(f"{lay}.input_layernorm", "encoder", tok, h, L)
    B.linear(f"{lay}.self_attn.q_proj", "encoder", tok, h, a * d, s.qkv_bias, L)
    B.linear(f"{lay}.self_attn.k_proj", "encoder", tok, h, g * d, s.qkv_bias, L)
    B.linear(f"{lay}.self_attn.v_proj", "encoder", tok, h, g * d, s.qkv_bias, L)
    B.add(f"{lay}.self_attn rotary", "activation", "encoder", L, tok + ((a + g) * d,), tok + ((a + g) * d,),
          ew=b * n * (a + g) * d * ew_cost("rotary"))
    # GQA: the g K/V heads are repeated to a heads before the bmm, so the bmm's are a-headed. Sliding and full
    # layers apart (Mistral's window, Qwen2's max_window_layers): only their unmasked pairs differ.
    B.causal_self_attention("layers[{layers}].self_attn", "encoder", a, d)
    B.linear(f"{lay}.self_attn.o_proj", "encoder", tok, a * d, h, s.o_bias, L)
    B.norm(f"{lay}.post_attention_layernorm", "encoder", tok, h, L)
    mlp(B, lay)
    B.norm("norm", "encoder", tok, h, residual=False)
    if s.head == "lm":
        B.linear("lm_head" + (" (tied to embed_tokens)" if s.tied_embeddings else ""), "cls", tok, h, s.vocab, False,
                 tied=s.tied_embeddings)


def build(B: Builder) -> None:
    decoder(B, dense_mlp)


def dense_mlp_tensors(out: Shapes, q: str, s: ArchSpec) -> None:
    h, f = s.hidden, s.intermediate
    for m, fo, fi in (("gate_proj", f, h), ("up_proj", f, h), ("down_proj", h, f)):
        add_linear(out, q + "mlp." + m, fo, fi, s.mlp_bias)


def decoder_tensors(s: ArchSpec, mlp: Callable[[Shapes, str, ArchSpec], None]) -> Shapes:
    h, d = s.hidden, s.head_dim
    p = "" if s.head == "base" else "model."
    out: Shapes = {p + "embed_tokens.weight": (s.vocab, h)}
    for i in range(s.layers):
        q = f"{p}layers.{i}."
        add_linear(out, q + "self_attn.q_proj", s.heads * d, h, s.qkv_bias)
        add_linear(out, q + "self_attn.k_proj", s.kv_heads * d, h, s.qkv_bias)
        add_linear(out, q + "self_attn.v_proj", s.kv_heads * d, h, s.qkv_bias)
        add_linear(out, q + "self_attn.o_proj", h, s.heads * d, s.o_bias)
        mlp(out, q, s)
        add_norm(out, q + "input_layernorm", h, bias=False)
        add_norm(out, q + "post_attention_layernorm", h, bias=False)
    add_norm(out, p + "norm", h, bias=False)
    if s.head == "lm":
        add_linear(out, "lm_head", s.vocab, h, bias=False)
    return out


def expected_tensors(s: ArchSpec) -> Shapes:
    return decoder_tensors(s, dense_mlp_tensors)


# The classes llama.cpp's GGUF architectures stand for (its converter writes Mistral as "llama").
GGUF_CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    if arch not in GGUF_CLASSES:
        return None
    return infer.gguf_config(arch, metadata, tensors, GGUF_CLASSES[arch])


# llama.cpp's names (gguf-py tensor_mapping.py, MODEL_ARCH.LLAMA / QWEN2). Its converter also permutes the
# rows of q_proj / k_proj (rotary layout), so those values differ after a conversion even when aligned.
GGUF_TENSOR_NAMES = (
    ("model.embed_tokens", "token_embd"), ("model.norm", "output_norm"), ("lm_head", "output"),
    ("model.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm"),
    ("model.layers.{bid}.self_attn.q_proj", "blk.{bid}.attn_q"),
    ("model.layers.{bid}.self_attn.k_proj", "blk.{bid}.attn_k"),
    ("model.layers.{bid}.self_attn.v_proj", "blk.{bid}.attn_v"),
    ("model.layers.{bid}.self_attn.o_proj", "blk.{bid}.attn_output"),
    ("model.layers.{bid}.post_attention_layernorm", "blk.{bid}.ffn_norm"),
    ("model.layers.{bid}.mlp.gate_proj", "blk.{bid}.ffn_gate"),
    ("model.layers.{bid}.mlp.up_proj", "blk.{bid}.ffn_up"),
    ("model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down"),
)

# Routed experts under `mlp.experts.{xid}` (Qwen-MoE, DeepSeek), stacked by llama.cpp's converter into one 3-D
# blk.N.ffn_{gate,up,down}_exps [experts, out, in] per projection: expert {xid} is its slice (ckptstat diff).
GGUF_EXPERT_STACKS = (
    ("model.layers.{bid}.mlp.experts.{xid}.gate_proj", "blk.{bid}.ffn_gate_exps"),
    ("model.layers.{bid}.mlp.experts.{xid}.up_proj", "blk.{bid}.ffn_up_exps"),
    ("model.layers.{bid}.mlp.experts.{xid}.down_proj", "blk.{bid}.ffn_down_exps"),
)

# convert_hf_to_gguf.py's LlamaModel (LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM: architecture
# `llama`) permutes the rows of q_proj and k_proj, weights and biases, per head (GQA: k by its own heads) for
# llama.cpp's non-NeoX rope; Qwen2Model (`qwen2`, NeoX rope) stores them as they are.
GGUF_ROPE_PERMUTED = (("llama", r"self_attn\.q_proj\.(weight|bias)$", "rope_q"),
                      ("llama", r"self_attn\.k_proj\.(weight|bias)$", "rope_k"))

HEAD_RULES = base.decoder_head_rules(r"(^|\.)lm_head\.weight$", r"^model\.")
TIE_RULES = (TieRule("lm_head.weight", "model.embed_tokens.weight", "config", heads=("lm",)),)
# LlamaModel / LlamaForCausalLM: `model.` + lm_head, tied only if tie_word_embeddings, GQA cache. The decoder
# LMs laid out as LLaMA (Mixtral, Qwen3, Phi3, OLMo, Qwen-MoE) spread this into their Family.
DECODER_LM: dict[str, Any] = dict(heads=("base", "lm"), head_rules=HEAD_RULES, default_head="lm", tie_rules=TIE_RULES,
                                  tied_by_default=False, kv_cache=decoder_kv_cache)
_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
              vocab_size=99, max_position_embeddings=64)

FAMILY = Family(
    name="llama",
    model_types=("llama", "mistral", "qwen2"),
    signature=r"(^|[./])layers[./]\d+[./]self_attn[./]q_proj",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm"),
    # LlamaForCausalLM saves `model.layers.N...` (+ lm_head unless tied), LlamaModel `layers.N...`
    head_rules=HEAD_RULES,
    default_head="lm",
    tie_rules=TIE_RULES,
    tied_by_default=False,
    kv_cache=decoder_kv_cache,
    gguf_config=gguf_config,
    gguf_tensor_names=GGUF_TENSOR_NAMES,
    gguf_transforms=GGUF_ROPE_PERMUTED,
    samples=(
        Sample("LlamaConfig", _SIZES, ("LlamaModel", "LlamaForCausalLM")),
        Sample("LlamaConfig", dict(_SIZES, head_dim=16, attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
               ("LlamaForCausalLM",)),
        Sample("MistralConfig", dict(_SIZES, sliding_window=8), ("MistralModel", "MistralForCausalLM")),
        Sample("Qwen2Config", dict(_SIZES, tie_word_embeddings=True), ("Qwen2Model", "Qwen2ForCausalLM")),
        # a window on the layers after max_window_layers only (Qwen2Config's layer_types)
        Sample("Qwen2Config", dict(_SIZES, num_hidden_layers=3, use_sliding_window=True, sliding_window=4, max_window_layers=1),
               ("Qwen2ForCausalLM",)),
    ),
)
