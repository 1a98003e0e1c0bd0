"""RWKV-4 (transformers modeling_rwkv.py, RwkvModel / RwkvForCausalLM): no attention matrix. Each block: LayerNorm ln1,
the time mixing (RwkvSelfAttention: the input and its one-token shift mixed by time_mix_key / value / receptance
[1, 1, h], key / value / receptance h -> A (attention_hidden_size, default h), the WKV recurrence with time_decay and
time_first [A], sigmoid(receptance) x wkv, output A -> h), LayerNorm ln2, the channel mixing (RwkvFeedForward:
time_mix_key / receptance, key h -> f (intermediate_size, default 4h), relu squared, value f -> h, x sigmoid(receptance
h -> h)); block 0 first runs pre_ln. ln_out at the end; head, tied to the embeddings only with tie_word_embeddings.

FLOPs: the seven projections' matmuls are all FlopCounterMode counts off CUDA (the WKV recurrence,
rwkv_linear_attention_cpu, is an element-wise loop over the tokens). The cache is the `state` the forward returns with
use_cache: five [b, h, L] tensors, the two token shifts in the model's dtype and the WKV numerator, denominator and
maximum in float32, whatever the sequence length."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .framework import infer
from .framework.archspec import Variant
from .framework.base import (
    STATE_BYTES,
    ArchSpec,
    Cfg,
    Family,
    HeadRule,
    KVLines,
    Sample,
    Shapes,
    Tensors,
    TieRule,
    add_linear,
    add_norm,
)
from .framework.ops import Builder, ew_cost


@dataclass(frozen=True)
class RwkvVariant(Variant):
    attention: int   # A, attention_hidden_size: the key / value / receptance width of the time mixing


def from_config(c: Cfg) -> ArchSpec:
    h = c.int("hidden_size")
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=0, kv_heads=0, head_dim=0,
                    intermediate=c.int("intermediate_size", default=4 * h), vocab=c.int("vocab_size"),
                    activation="relu", norm="layernorm", qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=False)),
                    variant=RwkvVariant(attention=c.int("attention_hidden_size", default=h)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"(^|\.)embeddings\.weight$", "rwkv.embeddings")
    A = infer.shape(T, r"blocks\.0\.attention\.key\.weight$", "attention.key")[0]
    f = infer.shape(T, r"blocks\.0\.feed_forward\.key\.weight$", "feed_forward.key")[0]
    return ArchSpec(layers=infer.count_layers(T, r"blocks\.(\d+)\.attention\."), hidden=h, heads=0, kv_heads=0, head_dim=0,
                    intermediate=f, vocab=V, activation="relu", norm="layernorm", qkv_bias=False, o_bias=False,
                    mlp_bias=False, tied_embeddings=infer.find(T, r"(^|\.)head\.weight$") is None,
                    variant=RwkvVariant(attention=A), **common)


def build(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, f, L, A = s.hidden, s.intermediate, s.layers, s.variant_as(RwkvVariant).attention
    tok = (b, n)
    B.embedding("rwkv.embeddings", "embedding", s.vocab, h, n)
    B.norm("rwkv.blocks.0.pre_ln", "encoder", tok, h, residual=False)
    blocks = f"rwkv.blocks[{L}]"
    B.norm(f"{blocks}.ln1", "encoder", tok, h, L)
    B.add(f"{blocks}.attention token shift x time_mix_key / value / receptance", "activation", "encoder", L, tok + (h,),
          tok + (3 * h,), params=3 * h * L, ew=3 * b * n * h * 3, weights_per_call=3 * h)
    for name in ("key", "value", "receptance"):
        B.linear(f"{blocks}.attention.{name}", "encoder", tok, h, A, False, L)
    B.add(f"{blocks}.attention WKV recurrence (time_decay, time_first)", "attention", "encoder", L, tok + (3 * A,),
          tok + (A,), params=2 * A * L, ew=b * n * A * (4 * ew_cost("exp") + 10), weights_per_call=2 * A)
    B.activation(f"{blocks}.attention sigmoid(receptance) x wkv", "encoder", tok, A, "sigmoid", L, gated=True)
    B.linear(f"{blocks}.attention.output", "encoder", tok, A, h, False, L)
    B.norm(f"{blocks}.ln2", "encoder", tok, h, L)
    B.add(f"{blocks}.feed_forward token shift x time_mix_key / receptance", "activation", "encoder", L, tok + (h,),
          tok + (2 * h,), params=2 * h * L, ew=2 * b * n * h * 3, weights_per_call=2 * h)
    B.linear(f"{blocks}.feed_forward.key", "encoder", tok, h, f, False, L)
    B.activation(f"{blocks}.feed_forward relu^2", "encoder", tok, f, "relu", L)
    B.linear(f"{blocks}.feed_forward.value", "encoder", tok, f, h, False, L)
    B.linear(f"{blocks}.feed_forward.receptance", "encoder", tok, h, h, False, L)
    B.activation(f"{blocks}.feed_forward sigmoid(receptance) x value", "encoder", tok, h, "sigmoid", L, gated=True)
    B.norm("rwkv.ln_out", "encoder", tok, h, residual=False)
    if s.head == "lm":
        B.linear("head" + (" (tied to embeddings)" if s.tied_embeddings else ""), "cls", tok, h, s.vocab, False,
                 tied=s.tied_embeddings)


def expected_tensors(s: ArchSpec) -> Shapes:
    h, f, A = s.hidden, s.intermediate, s.variant_as(RwkvVariant).attention
    m = "" if s.head == "base" else "rwkv."
    out: Shapes = {m + "embeddings.weight": (s.vocab, h)}
    for j in range(s.layers):
        p = f"{m}blocks.{j}."
        if j == 0:
            add_norm(out, p + "pre_ln", h)
        add_norm(out, p + "ln1", h)
        add_norm(out, p + "ln2", h)
        out[p + "attention.time_decay"] = (A,)
        out[p + "attention.time_first"] = (A,)
        for mix in ("key", "value", "receptance"):
            out[p + f"attention.time_mix_{mix}"] = (1, 1, h)
        for name in ("key", "value", "receptance"):
            add_linear(out, p + f"attention.{name}", A, h, False)
        add_linear(out, p + "attention.output", h, A, False)
        for mix in ("key", "receptance"):
            out[p + f"feed_forward.time_mix_{mix}"] = (1, 1, h)
        add_linear(out, p + "feed_forward.key", f, h, False)
        add_linear(out, p + "feed_forward.receptance", h, h, False)
        add_linear(out, p + "feed_forward.value", h, f, False)
    add_norm(out, m + "ln_out", h)
    if s.head == "lm":
        out["head.weight"] = (s.vocab, h)
    return out


def state_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """RwkvModel's state: five [b, h, L] tensors, the two token shifts at the model's width, the WKV numerator,
    denominator and maximum in float32 (4 B whatever the dtype)."""
    shifts, wkv = 2 * s.hidden * s.layers * ab, 3 * s.hidden * s.layers * STATE_BYTES
    return [(f"RWKV state (no KV cache), b={b}, any s", (shifts + wkv) * b,
             f"2 x h x L x {ab} B (token shifts) + 3 x h x L x {STATE_BYTES} B (WKV, float32) = {shifts + wkv:,} B/sequence")]


_SIZES = dict(hidden_size=32, num_hidden_layers=2, intermediate_size=40, vocab_size=99, context_length=64)

FAMILY = Family(
    name="rwkv",
    model_types=("rwkv",),
    signature=r"(^|[./])blocks[./]\d+[./]attention[./]time_first",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm"),
    # RwkvForCausalLM nests the model under `rwkv.` (RwkvModel does not): that shows a tied, dropped head
    head_rules=(HeadRule(r"(^|\.)head\.weight$", "lm"), HeadRule(r"^rwkv\.embeddings\.weight$", "lm")),
    default_head="lm",
    # RwkvForCausalLM._tied_weights_keys
    tie_rules=(TieRule("head.weight", "rwkv.embeddings.weight", "config", heads=("lm",)),),
    kv_cache=state_cache,
    gguf_architectures=(),   # llama.cpp has RWKV-6 and -7 (other modules), no RWKV-4: no GGUF names
    samples=(
        Sample("RwkvConfig", _SIZES, ("RwkvForCausalLM", "RwkvModel")),
        Sample("RwkvConfig", dict(_SIZES, intermediate_size=None, tie_word_embeddings=True), ("RwkvForCausalLM",)),
    ),
)
