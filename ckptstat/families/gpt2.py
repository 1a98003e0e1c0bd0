"""GPT-2 (transformers modeling_gpt2.py): a pre-LayerNorm decoder with learned positions, fused c_attn,
Conv1D weights stored [in, out], and an LM head tied to wte unless the config says otherwise."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .framework import base, decoder_heads, decoders, infer
from .framework.base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, TieRule, add_linear, add_norm, decoder_kv_cache
from .framework.ops import Builder


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("n_embd"), c.int("n_head")
    return ArchSpec(layers=c.int("n_layer"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("n_inner", default=4 * h), vocab=c.int("vocab_size"),
                    positions=c.int("n_positions"), activation=str(c.get("activation_function", default="gelu_new")),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"wte\.weight$", "wte")
    P = infer.shape(T, r"wpe\.weight$", "wpe")[0]
    f = infer.shape(T, r"mlp\.c_fc\.weight$", "mlp.c_fc")[1]    # GPT-2 Conv1D stores (in, out)
    a, note = infer.heads_for(h, 64)
    lm = infer.find(T, r"lm_head\.weight$")
    wte = infer.find(T, r"wte\.weight$")
    tied = lm is None or (wte is not None and lm.alias_key == wte.alias_key)
    return ArchSpec(layers=infer.count_layers(T, r"(?:^|\.)h\.(\d+)\."), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=f, vocab=V, positions=P, tied_embeddings=tied, assumptions=(note,), **common)


def linear_layout_build(B: Builder, attention: Callable[[Builder, str], None]) -> None:
    """GPT-2's decoder with nn.Linear weights (GPTBigCode, GPT-Neo): embeddings and positions, per layer ln_1,
    `attention(B, layer prefix)` (the family's projections and scores), ln_2, the MLP and its residual; ln_f, the
    LM head and the task heads (decoder_heads)."""
    s, b, n = B.s, B.b, B.seq
    h, L, f = s.hidden, s.layers, s.intermediate
    tok = (b, n)
    B.embedding("wte", "embedding", s.vocab, h, n)
    B.embedding("wpe", "embedding", s.positions, h, n)
    lay = f"h[{L}]"
    B.norm(f"{lay}.ln_1", "encoder", tok, h, L, residual=False)
    attention(B, lay)
    B.norm(f"{lay}.ln_2", "encoder", tok, h, L)
    B.linear(f"{lay}.mlp.c_fc", "encoder", tok, h, f, True, L)
    B.activation(f"{lay}.mlp act", "encoder", tok, f, s.activation, L)
    B.linear(f"{lay}.mlp.c_proj", "encoder", tok, f, h, True, L)
    B.add(f"{lay} + residual", "activation", "encoder", L, tok + (h,), tok + (h,), ew=b * n * h)
    B.norm("ln_f", "encoder", tok, h, residual=False)
    decoders.lm_head(B, "lm_head", "wte")
    decoder_heads.build(B, h)


def linear_layout_tensors(s: ArchSpec, attention: Callable[[Shapes, str], None]) -> Shapes:
    """The tensors linear_layout_build's model holds; `attention(out, layer prefix)` adds the family's."""
    h, f = s.hidden, s.intermediate
    p = "" if s.head == "base" else "transformer."
    out: Shapes = {p + "wte.weight": (s.vocab, h), p + "wpe.weight": (s.positions, h)}
    for i in range(s.layers):
        q = f"{p}h.{i}."
        add_norm(out, q + "ln_1", h)
        attention(out, q)
        add_norm(out, q + "ln_2", h)
        add_linear(out, q + "mlp.c_fc", f, h)
        add_linear(out, q + "mlp.c_proj", h, f)
    add_norm(out, p + "ln_f", h)
    if s.head == "lm":
        add_linear(out, "lm_head", s.vocab, h, bias=False)
    decoder_heads.tensors(out, s, h)
    return out


def build(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, L, f, a, d = s.hidden, s.layers, s.intermediate, s.heads, s.head_dim
    tok = (b, n)
    B.embedding("wte", "embedding", s.vocab, h, n)
    B.embedding("wpe", "embedding", s.positions, h, n)
    lay = f"h[{L}]"
    B.norm(f"{lay}.ln_1", "encoder", tok, h, L)
    B.linear(f"{lay}.attn.c_attn", "encoder", tok, h, 3 * h, True, L)
    B.attention(f"{lay}.attn", "encoder", a, n, n, d, L, causal=True)
    B.linear(f"{lay}.attn.c_proj", "encoder", tok, h, h, True, L)
    B.norm(f"{lay}.ln_2", "encoder", tok, h, L)
    B.linear(f"{lay}.mlp.c_fc", "encoder", tok, h, f, True, L)
    B.activation(f"{lay}.mlp act", "encoder", tok, f, s.activation, L)
    B.linear(f"{lay}.mlp.c_proj", "encoder", tok, f, h, True, L)
    B.norm("ln_f", "encoder", tok, h, residual=False)
    decoders.lm_head(B, "lm_head", "wte")


def expected_tensors(s: ArchSpec) -> Shapes:
    h, f = s.hidden, s.intermediate
    p = "" if s.head == "base" else "transformer."
    out: Shapes = {p + "wte.weight": (s.vocab, h), p + "wpe.weight": (s.positions, h)}
    for i in range(s.layers):
        q = f"{p}h.{i}."
        add_norm(out, q + "ln_1", h)
        # GPT-2's Conv1D stores weights as [in, out].
        out.update({q + "attn.c_attn.weight": (h, 3 * h), q + "attn.c_attn.bias": (3 * h,),
                    q + "attn.c_proj.weight": (h, h), q + "attn.c_proj.bias": (h,),
                    q + "mlp.c_fc.weight": (h, f), q + "mlp.c_fc.bias": (f,),
                    q + "mlp.c_proj.weight": (f, h), q + "mlp.c_proj.bias": (h,)})
        add_norm(out, q + "ln_2", h)
    add_norm(out, p + "ln_f", h)
    if s.head == "lm":
        add_linear(out, "lm_head", s.vocab, h, bias=False)
    return out


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """GGUF gpt2 metadata under GPT-2's own config names (n_layer, n_embd, ...)."""
    cfg = infer.gguf_config(arch, metadata, tensors, "GPT2LMHeadModel")
    if cfg is None:
        return None
    out = {"n_layer": cfg["num_hidden_layers"], "n_embd": cfg["hidden_size"], "n_head": cfg["num_attention_heads"],
           "n_inner": cfg.get("intermediate_size"), "n_positions": cfg.get("max_position_embeddings", 1024)}
    out.update({k: cfg[k] for k in ("model_type", "architectures", "vocab_size", "tie_word_embeddings")})
    return out


_SIZES = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=64)

# HF module -> llama.cpp GGUF tensor name, as convert_hf_to_gguf.py maps them (gguf-py tensor_mapping.py
# TensorNameMap, the oracle in tests/test_gguf_names.py); `ckptstat diff` aligns a GGUF file with HF through it.
GGUF_TENSOR_NAMES = (
    ("transformer.wte", "token_embd"), ("transformer.wpe", "position_embd"), ("transformer.ln_f", "output_norm"),
    ("lm_head", "output"),
    ("transformer.h.{bid}.ln_1", "blk.{bid}.attn_norm"),
    ("transformer.h.{bid}.attn.c_attn", "blk.{bid}.attn_qkv"),   # Conv1D [in, out]: the converter transposes it
    ("transformer.h.{bid}.attn.c_proj", "blk.{bid}.attn_output"),
    ("transformer.h.{bid}.ln_2", "blk.{bid}.ffn_norm"),
    ("transformer.h.{bid}.mlp.c_fc", "blk.{bid}.ffn_up"),
    ("transformer.h.{bid}.mlp.c_proj", "blk.{bid}.ffn_down"),
)

FAMILY = Family(
    name="gpt2",
    before=("gpt_bigcode",),   # tried before them: the same tensor names: a file without config.json reads as GPT-2
    model_types=("gpt2",),
    signature=r"(^|[./])h[./]\d+[./]attn[./]c_attn",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm"),
    # GPT2LMHeadModel saves `transformer.h.N...` (its lm_head tied to wte, usually not stored), GPT2Model `h.N...`
    head_rules=base.decoder_head_rules(r"(^|\.)lm_head\.weight$", r"^transformer\."),
    default_head="lm",
    tie_rules=(TieRule("lm_head.weight", "transformer.wte.weight", "config", heads=("lm",)),),
    kv_cache=decoder_kv_cache,
    gguf_config=gguf_config,
    gguf_tensor_names=GGUF_TENSOR_NAMES,
    samples=(
        Sample("GPT2Config", _SIZES, ("GPT2Model", "GPT2LMHeadModel")),
        Sample("GPT2Config", dict(_SIZES, tie_word_embeddings=False), ("GPT2LMHeadModel",)),
    ),
)
