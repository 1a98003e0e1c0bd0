"""OPT (transformers modeling_opt.py, configuration_opt.py). The decoder (`decoder.` in OPTModel,
`model.decoder.` under a head):

* embed_tokens [V, E], E = word_embed_proj_dim (default hidden_size); when E != h (OPT-350m) project_in [h, E]
  after the lookup and project_out [E, h] after the last layer, both without bias;
* learned positions embed_positions [P + 2, h]: OPTLearnedPositionalEmbedding adds an offset of 2 to every
  position id, so the first two rows are never read and the model runs at most P tokens;
* layers of q/k/v/out_proj and fc1 / ReLU / fc2 (biased unless enable_bias is false) with
  self_attn_layer_norm and final_layer_norm, before the sublayer (do_layer_norm_before, default true) or after
  it (OPT-350m); LayerNorms without weights when layer_norm_elementwise_affine is false;
* a final LayerNorm only when do_layer_norm_before and not _remove_final_layer_norm;
* heads over E: lm_head tied to embed_tokens by default (OPTForCausalLM._tied_weights_keys), score, qa_outputs.

Switches: OPTVariant."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .framework import base, decoder_heads, decoders, infer
from .framework.archspec import Variant
from .framework.base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, TieRule, add_linear, add_norm, decoder_kv_cache
from .framework.ops import Builder

OFFSET = 2   # OPTLearnedPositionalEmbedding.offset


@dataclass(frozen=True)
class OPTVariant(Variant):
    final_norm: bool   # decoder.final_layer_norm (do_layer_norm_before and not _remove_final_layer_norm)
    plain_norm: bool   # LayerNorms without weights (layer_norm_elementwise_affine false)


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    before = bool(c.get("do_layer_norm_before", default=True))
    final = before and not bool(c.get("_remove_final_layer_norm", default=False))
    bias = bool(c.get("enable_bias", default=True))
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("ffn_dim"), vocab=c.int("vocab_size"),
                    positions=c.int("max_position_embeddings") + OFFSET, embedding_size=c.int("word_embed_proj_dim", default=h),
                    activation=str(c.get("activation_function", default="relu")), qkv_bias=bias, o_bias=bias, mlp_bias=bias,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    variant=OPTVariant(final_norm=final,
                                       plain_norm=not c.get("layer_norm_elementwise_affine", default=True)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, E = infer.shape(T, r"decoder\.embed_tokens\.weight$", "decoder.embed_tokens")
    P, h = infer.shape(T, r"decoder\.embed_positions\.weight$", "decoder.embed_positions")
    a, note = infer.heads_for(h, 64 if h <= 2048 else 128)   # OPT-125m..1.3b: 64; 6.7b..66b: 128 (2.7b: 80)
    plain = not infer.has(T, r"self_attn_layer_norm\.weight$")
    return ArchSpec(layers=infer.count_layers(T, r"layers\.(\d+)\."), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=infer.shape(T, r"fc1\.weight$", "fc1")[0], vocab=V, positions=P, embedding_size=E,
                    activation="relu", qkv_bias=infer.has(T, r"self_attn\.q_proj\.bias$"),
                    o_bias=infer.has(T, r"self_attn\.out_proj\.bias$"), mlp_bias=infer.has(T, r"fc1\.bias$"),
                    tied_embeddings=infer.find(T, r"(^|\.)lm_head\.weight$") is None, num_labels=decoder_heads.labels(T),
                    variant=OPTVariant(final_norm=infer.has(T, r"(^|\.)decoder\.final_layer_norm\.weight$"),
                                       plain_norm=plain),
                    assumptions=(note,), **common)


def build(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, E, L, f = s.hidden, s.emb, s.layers, s.intermediate
    tok, v = (b, n), s.variant_as(OPTVariant)

    def norm(module: str, calls: int, residual: bool) -> None:
        if v.plain_norm:
            decoders.plain_norm(B, module, tok, h, calls, residual)
        else:
            B.norm(module, "encoder", tok, h, calls, residual=residual)

    B.embedding("decoder.embed_tokens", "embedding", s.vocab, E, n)
    if E != h:
        B.linear("decoder.project_in", "embedding", tok, E, h, False)
    B.embedding("decoder.embed_positions", "embedding", s.positions, h, n)
    lay = f"decoder.layers[{L}]"
    norm(f"{lay}.self_attn_layer_norm", L, False)
    for proj in ("q_proj", "k_proj", "v_proj"):
        B.linear(f"{lay}.self_attn.{proj}", "encoder", tok, h, h, s.qkv_bias, L)
    B.attention(f"{lay}.self_attn", "encoder", s.heads, n, n, s.head_dim, L, causal=True)
    B.linear(f"{lay}.self_attn.out_proj", "encoder", tok, h, h, s.o_bias, L)
    norm(f"{lay}.final_layer_norm", L, True)
    B.linear(f"{lay}.fc1", "encoder", tok, h, f, s.mlp_bias, L)
    B.activation(f"{lay} act", "encoder", tok, f, s.activation, L)
    B.linear(f"{lay}.fc2", "encoder", tok, f, h, s.mlp_bias, L)
    B.add(f"{lay} + residual", "activation", "encoder", L, tok + (h,), tok + (h,), ew=b * n * h)
    if v.final_norm:
        norm("decoder.final_layer_norm", 1, False)
    if E != h:
        B.linear("decoder.project_out", "encoder", tok, h, E, False)
    if s.head == "lm":
        B.linear("lm_head" + (" (tied to embed_tokens)" if s.tied_embeddings else ""), "cls", tok, E, s.vocab, False,
                 tied=s.tied_embeddings)
    decoder_heads.build(B, E)


def expected_tensors(s: ArchSpec) -> Shapes:
    h, E, f = s.hidden, s.emb, s.intermediate
    v = s.variant_as(OPTVariant)
    affine = not v.plain_norm
    p = "decoder." if s.head == "base" else "model.decoder."
    out: Shapes = {p + "embed_tokens.weight": (s.vocab, E), p + "embed_positions.weight": (s.positions, h)}
    if E != h:
        add_linear(out, p + "project_out", E, h, bias=False)
        add_linear(out, p + "project_in", h, E, bias=False)
    if affine and v.final_norm:
        add_norm(out, p + "final_layer_norm", h)
    for i in range(s.layers):
        q = f"{p}layers.{i}."
        for proj in ("k_proj", "v_proj", "q_proj"):
            add_linear(out, q + "self_attn." + proj, h, h, s.qkv_bias)
        add_linear(out, q + "self_attn.out_proj", h, h, s.o_bias)
        add_linear(out, q + "fc1", f, h, s.mlp_bias)
        add_linear(out, q + "fc2", h, f, s.mlp_bias)
        if affine:
            add_norm(out, q + "self_attn_layer_norm", h)
            add_norm(out, q + "final_layer_norm", h)
    if s.head == "lm":
        add_linear(out, "lm_head", s.vocab, E, bias=False)
    decoder_heads.tensors(out, s, E)
    return out


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=37, vocab_size=99,
              max_position_embeddings=64)

FAMILY = Family(
    name="opt",
    before=("llama",),   # tried before them: its layers.N.self_attn.q_proj names match llama's signature
    model_types=("opt",),
    # before llama (its layers.N.self_attn.q_proj); an encoder-decoder without BART's layernorm_embedding (FSMT,
    # Marian, Pegasus) shares this name, but has encoder layers, and its *ForCausalLM (the decoder alone) cross-attention
    signature=r"(^|[./])decoder[./]layers[./]\d+[./]self_attn_layer_norm[./]",
    signature_without=r"(^|[./])(encoder[./]layers[./]\d+|decoder[./]layers[./]\d+[./]encoder_attn)[./]",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm", "seqcls", "qa"),
    head_rules=base.decoder_head_rules(r"(^|\.)lm_head\.weight$", r"^model\.decoder\."),
    default_head="lm",
    tie_rules=(TieRule("lm_head.weight", "model.decoder.embed_tokens.weight", "config", heads=("lm",)),),
    position_offset={"opt": OFFSET},
    kv_cache=decoder_kv_cache,
    gguf_architectures=(),
    samples=(
        Sample("OPTConfig", _SIZES, ("OPTModel", "OPTForCausalLM", "OPTForQuestionAnswering")),
        # OPT-350m's layout: post-LayerNorm, no final norm, project_in / project_out
        Sample("OPTConfig", dict(_SIZES, word_embed_proj_dim=16, do_layer_norm_before=False, num_labels=3),
               ("OPTModel", "OPTForCausalLM", "OPTForSequenceClassification")),
        # (layer_norm_elementwise_affine=False is modelled but not sampled: OPT's _init_weights fails on it in 4.57)
        Sample("OPTConfig", dict(_SIZES, enable_bias=False, tie_word_embeddings=False), ("OPTForCausalLM",)),
    ),
)
