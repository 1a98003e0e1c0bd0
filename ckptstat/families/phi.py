"""Phi-1/1.5/2 (transformers modeling_phi.py): one LayerNorm per layer feeding attention and the MLP in
parallel (x + attn(ln(x)) + mlp(ln(x))), q, k, v and dense projections with biases, grouped-query heads,
rotary on the first partial_rotary_factor of each head (0.5 by default), optional LayerNorms over each
head's d on q and k (qk_layernorm), a dense fc1/gelu_new/fc2 MLP with biases, a final LayerNorm and an
LM head with a bias, its weight untied by default (PhiForCausalLM's _tied_weights_keys: lm_head.weight).

Switches: ArchSpec.rope_dim (the rotated dims), ArchSpec.qk_norm (qk_layernorm)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .framework import base, decoders, infer
from .framework.base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, TieRule, add_linear, add_norm, decoder_kv_cache
from .framework.ops import Builder


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    d = h // a
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=c.int("num_key_value_heads", default=a),
                    head_dim=d, intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    context=c.int("max_position_embeddings", default=0),
                    activation=str(c.get("hidden_act", default="gelu_new")),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=False)),
                    rope_dim=decoders.partial_rotary(c, d), qk_norm=bool(c.get("qk_layernorm", default=False)),
                    **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"embed_tokens\.weight$", "embed_tokens")
    kv = infer.shape(T, r"self_attn\.k_proj\.weight$", "k_proj")[0]
    qn = infer.find(T, r"self_attn\.q_layernorm\.weight$")
    d = qn.shape[0] if qn is not None else 64 if h % 64 == 0 and kv % 64 == 0 else kv
    lm = infer.find(T, r"lm_head\.weight$")
    return ArchSpec(layers=infer.count_layers(T, r"layers\.(\d+)\."), hidden=h, heads=h // d, kv_heads=kv // d, head_dim=d,
                    intermediate=infer.shape(T, r"mlp\.fc1\.weight$", "fc1")[0], vocab=V, activation="gelu_new",
                    tied_embeddings=lm is None, rope_dim=d // 2, qk_norm=qn is not None,
                    assumptions=(f"no config: head_dim assumed {d}, rotary on half of it (partial_rotary_factor 0.5)",),
                    **common)


def build(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, L, a, g, d, f = s.hidden, s.layers, s.heads, s.kv_heads, s.head_dim, s.intermediate
    tok, r = (b, n), decoders.rotary_dim(s)
    B.embedding("embed_tokens", "embedding", s.vocab, h, n)
    decoders.rotary(B, r)
    lay = f"layers[{L}]"
    B.norm(f"{lay}.input_layernorm", "encoder", tok, h, L, residual=False)   # the one add below holds both
    B.linear(f"{lay}.self_attn.q_proj", "encoder", tok, h, a * d, True, L)
    B.linear(f"{lay}.self_attn.k_proj", "encoder", tok, h, g * d, True, L)
    B.linear(f"{lay}.self_attn.v_proj", "encoder", tok, h, g * d, True, L)
    if s.qk_norm:
        B.norm(f"{lay}.self_attn.q_layernorm", "encoder", tok + (a,), d, L, residual=False)
        B.norm(f"{lay}.self_attn.k_layernorm", "encoder", tok + (g,), d, L, residual=False)
    decoders.rope_apply(B, f"{lay}.self_attn rotary", a + g, r, L)
    B.attention(f"{lay}.self_attn", "encoder", a, n, n, d, L, causal=True)
    B.linear(f"{lay}.self_attn.dense", "encoder", tok, a * d, h, True, L)
    # parallel: the MLP reads the same normed input; attn + mlp + residual
    B.linear(f"{lay}.mlp.fc1", "encoder", tok, h, f, True, L)
    B.activation(f"{lay}.mlp act", "encoder", tok, f, s.activation, L)
    B.linear(f"{lay}.mlp.fc2", "encoder", tok, f, h, True, L)
    B.add(f"{lay} attn + mlp + residual", "activation", "encoder", L, tok + (h,), tok + (h,), ew=2 * b * n * h)
    B.norm("final_layernorm", "encoder", tok, h, residual=False)
    if s.head == "lm":   # the bias is the head's own even when the weight is tied
        B.linear("lm_head" + (" (weight tied to embed_tokens)" if s.tied_embeddings else ""), "cls", tok, h, s.vocab, True,
                 tied=s.tied_embeddings)


def expected_tensors(s: ArchSpec) -> Shapes:
    h, a, g, d, f = s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate
    p = "" if s.head == "base" else "model."
    out: Shapes = {p + "embed_tokens.weight": (s.vocab, h)}
    for i in range(s.layers):
        q = f"{p}layers.{i}."
        for m, fo, fi in (("q_proj", a * d, h), ("k_proj", g * d, h), ("v_proj", g * d, h), ("dense", h, a * d)):
            add_linear(out, q + "self_attn." + m, fo, fi)
        if s.qk_norm:
            add_norm(out, q + "self_attn.q_layernorm", d)
            add_norm(out, q + "self_attn.k_layernorm", d)
        add_linear(out, q + "mlp.fc1", f, h)
        add_linear(out, q + "mlp.fc2", h, f)
        add_norm(out, q + "input_layernorm", h)
    add_norm(out, p + "final_layernorm", h)
    if s.head == "lm":
        add_linear(out, "lm_head", s.vocab, h)
    return out


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64)

# HF module -> llama.cpp GGUF tensor name, as convert_hf_to_gguf.py maps them (gguf-py tensor_mapping.py
# TensorNameMap, the oracle in tests/test_gguf_names.py); `ckptstat diff` aligns a GGUF file with HF through it.
GGUF_TENSOR_NAMES = (
    ("model.embed_tokens", "token_embd"), ("model.final_layernorm", "output_norm"), ("lm_head", "output"),
    ("model.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm"),
    ("model.layers.{bid}.self_attn.q_proj", "blk.{bid}.attn_q"),
    ("model.layers.{bid}.self_attn.k_proj", "blk.{bid}.attn_k"),
    ("model.layers.{bid}.self_attn.v_proj", "blk.{bid}.attn_v"),
    ("model.layers.{bid}.self_attn.dense", "blk.{bid}.attn_output"),
    ("model.layers.{bid}.mlp.fc1", "blk.{bid}.ffn_up"),
    ("model.layers.{bid}.mlp.fc2", "blk.{bid}.ffn_down"),
)


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """llama.cpp's `phi2` files: LLaMA's keys, but the MLP width from `ffn_up` (the converter writes
    feed_forward_length = 4 h whatever intermediate_size is) and the K/V heads from `attn_k` (it writes
    head_count_kv = head_count); partial_rotary_factor from `rope.dimension_count`."""
    cfg = infer.gguf_config(arch, metadata, tensors, "PhiForCausalLM")
    up, k = tensors.get("blk.0.ffn_up.weight"), tensors.get("blk.0.attn_k.weight")
    h, a = (cfg or {}).get("hidden_size"), (cfg or {}).get("num_attention_heads")
    if cfg is None or up is None or k is None or not h or not a or h % a:
        return cfg
    d = h // a
    cfg.update(model_type="phi", intermediate_size=up.shape[0], num_key_value_heads=k.shape[0] // d)
    infer.gguf_rotary(arch, metadata, cfg, "partial_rotary_factor")
    return cfg


FAMILY = Family(
    name="phi",
    before=("llama",),   # tried before them: its q_proj names match llama's signature
    model_types=("phi",),
    signature=r"(^|[./])layers[./]\d+[./]self_attn[./]dense[./]",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm"),
    head_rules=base.decoder_head_rules(r"(^|\.)lm_head\.(weight|bias)$", r"^model\."),
    default_head="lm",
    tie_rules=(TieRule("lm_head.weight", "model.embed_tokens.weight", "config"),),
    tied_by_default=False,
    kv_cache=decoder_kv_cache,
    gguf_architectures=("phi2",), gguf_config=gguf_config,
    gguf_tensor_names=GGUF_TENSOR_NAMES,
    samples=(
        Sample("PhiConfig", _SIZES, ("PhiModel", "PhiForCausalLM")),
        Sample("PhiConfig", dict(_SIZES, num_key_value_heads=2, qk_layernorm=True, partial_rotary_factor=0.75,
                                 tie_word_embeddings=True), ("PhiForCausalLM",), infer=False),
    ),
)
