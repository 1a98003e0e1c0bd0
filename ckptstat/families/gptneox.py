"""GPT-NeoX / Pythia (transformers modeling_gpt_neox.py): pre-LayerNorm layers with a fused
query_key_value [3h, h] (heads interleaved: per head q, k, v), rotary on the first rotary_pct of each
head, a dense dense_h_to_4h / gelu / dense_4h_to_h MLP with biases, the parallel residual by default
(x + attn(ln1(x)) + mlp(ln2(x)); use_parallel_residual false runs them one after the other, same FLOPs),
final_layer_norm, and an LM head `embed_out` (transformers 5's `lm_head` in memory) untied by default
(GPTNeoXForCausalLM's _tied_weights_keys: lm_head.weight)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .framework import base, decoders, infer
from .framework.base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, TieRule, add_linear, add_norm, decoder_kv_cache
from .framework.ops import Builder


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    bias = bool(c.get("attention_bias", default=True))
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    context=c.int("max_position_embeddings", default=0),
                    activation=str(c.get("hidden_act", default="gelu")), qkv_bias=bias, o_bias=bias,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=False)),
                    rope_dim=decoders.partial_rotary(c, h // a, "rotary_pct"), **c.common)

# The LM head as save_pretrained writes it (`embed_out`), and as transformers 5 names it in memory (`lm_head`,
# conversion_mapping.py renames it on load and back on save): a torch.save(state_dict) holds the latter.
_LM_HEAD = r"(^|\.)(embed_out|lm_head)\.weight$"


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"embed_in\.weight$", "embed_in")
    a, note = infer.heads_for(h, 128 if h >= 2048 else 64)   # Pythia: 128 from 1.4B on (head count)
    d = h // a
    return ArchSpec(layers=infer.count_layers(T, r"layers\.(\d+)\."), hidden=h, heads=a, kv_heads=a, head_dim=d,
                    intermediate=infer.shape(T, r"mlp\.dense_h_to_4h\.weight$", "dense_h_to_4h")[0], vocab=V,
                    qkv_bias=infer.has(T, r"query_key_value\.bias$"), o_bias=infer.has(T, r"attention\.dense\.bias$"),
                    tied_embeddings=infer.find(T, _LM_HEAD) is None, rope_dim=d // 4,
                    assumptions=(note, "no config: rotary_pct assumed 0.25"), **common)


def build(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, L, a, d, f = s.hidden, s.layers, s.heads, s.head_dim, s.intermediate
    tok, r = (b, n), decoders.rotary_dim(s)
    B.embedding("embed_in", "embedding", s.vocab, h, n)
    decoders.rotary(B, r)
    lay = f"layers[{L}]"
    B.norm(f"{lay}.input_layernorm", "encoder", tok, h, L, residual=False)
    B.linear(f"{lay}.attention.query_key_value", "encoder", tok, h, 3 * h, s.qkv_bias, L)
    decoders.rope_apply(B, f"{lay}.attention rotary", 2 * a, r, L)
    B.attention(f"{lay}.attention", "encoder", a, n, n, d, L, causal=True)
    B.linear(f"{lay}.attention.dense", "encoder", tok, h, h, s.o_bias, L)
    B.norm(f"{lay}.post_attention_layernorm", "encoder", tok, h, L)
    B.linear(f"{lay}.mlp.dense_h_to_4h", "encoder", tok, h, f, True, L)
    B.activation(f"{lay}.mlp act", "encoder", tok, f, s.activation, L)
    B.linear(f"{lay}.mlp.dense_4h_to_h", "encoder", tok, f, h, True, L)
    B.norm("final_layer_norm", "encoder", tok, h, residual=False)
    decoders.lm_head(B, "embed_out", "embed_in")


def expected_tensors(s: ArchSpec) -> Shapes:
    h, f = s.hidden, s.intermediate
    p = "" if s.head == "base" else "gpt_neox."
    out: Shapes = {p + "embed_in.weight": (s.vocab, h)}
    for i in range(s.layers):
        q = f"{p}layers.{i}."
        add_norm(out, q + "input_layernorm", h)
        add_norm(out, q + "post_attention_layernorm", h)
        add_linear(out, q + "attention.query_key_value", 3 * h, h, s.qkv_bias)
        add_linear(out, q + "attention.dense", h, h, s.o_bias)
        add_linear(out, q + "mlp.dense_h_to_4h", f, h)
        add_linear(out, q + "mlp.dense_4h_to_h", h, f)
    add_norm(out, p + "final_layer_norm", h)
    if s.head == "lm":
        add_linear(out, "embed_out", s.vocab, h, bias=False)
    return out


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64)

# HF module -> llama.cpp GGUF tensor name, as convert_hf_to_gguf.py maps them (gguf-py tensor_mapping.py
# TensorNameMap, the oracle in tests/test_gguf_names.py); `ckptstat diff` aligns a GGUF file with HF through it.
GGUF_TENSOR_NAMES = (
    ("gpt_neox.embed_in", "token_embd"), ("gpt_neox.final_layer_norm", "output_norm"), ("embed_out", "output"),
    ("gpt_neox.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm"),
    ("gpt_neox.layers.{bid}.attention.query_key_value", "blk.{bid}.attn_qkv"),
    ("gpt_neox.layers.{bid}.attention.dense", "blk.{bid}.attn_output"),
    ("gpt_neox.layers.{bid}.post_attention_layernorm", "blk.{bid}.ffn_norm"),
    ("gpt_neox.layers.{bid}.mlp.dense_h_to_4h", "blk.{bid}.ffn_up"),
    ("gpt_neox.layers.{bid}.mlp.dense_4h_to_h", "blk.{bid}.ffn_down"),
)

def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """llama.cpp's `gptneox` files (Pythia, GPT-NeoX-20B): LLaMA's keys, `rope.dimension_count` as rotary_pct,
    `use_parallel_residual`, biases from `attn_qkv.bias`."""
    cfg = infer.gguf_config(arch, metadata, tensors, "GPTNeoXForCausalLM")
    if cfg is None:
        return None
    cfg.update(model_type="gpt_neox", attention_bias="blk.0.attn_qkv.bias" in tensors)
    infer.gguf_rotary(arch, metadata, cfg, "rotary_pct")
    parallel = str(metadata.get(f"{arch}.use_parallel_residual")).lower()   # a GGUF bool reads "true" / "false"
    if parallel in ("true", "false"):
        cfg["use_parallel_residual"] = parallel == "true"
    return cfg


FAMILY = Family(
    name="gptneox",
    model_types=("gpt_neox",),
    signature=r"(^|[./])layers[./]\d+[./]attention[./]query_key_value",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm"),
    head_rules=base.decoder_head_rules(_LM_HEAD, r"^gpt_neox\."),
    default_head="lm",
    tie_rules=(TieRule("embed_out.weight", "gpt_neox.embed_in.weight", "config"),),
    tied_by_default=False,
    kv_cache=decoder_kv_cache,
    gguf_architectures=("gptneox",), gguf_config=gguf_config,
    gguf_tensor_names=GGUF_TENSOR_NAMES,
    samples=(
        Sample("GPTNeoXConfig", _SIZES, ("GPTNeoXModel", "GPTNeoXForCausalLM")),
        Sample("GPTNeoXConfig", dict(_SIZES, use_parallel_residual=False, attention_bias=False, rotary_pct=0.5,
                                     tie_word_embeddings=True), ("GPTNeoXForCausalLM",), infer=False),
    ),
)
