"""Qwen4-Exp's language model (transformers modeling_qwen4_exp.py Qwen4ExpTextModel / Qwen4ExpForCausalLM,
model_type qwen4_exp_text; the composite qwen4_exp config is read through its text_config, wrappers.py).

Qwen3.5-MoE's layers (qwen3_5.py: a gated DeltaNet on layer_types "linear_attention", in_proj_qkv / in_proj_z /
in_proj_b / in_proj_a, its gated RMSNorm's gate by output_gate_type, else hidden_act; gated attention with per-head q/k
RMSNorms on the others; a router over num_experts experts of moe_intermediate_size, top num_experts_per_tok, plus the
shared expert scaled by sigmoid(shared_expert_gate(x)) on every layer) without their norms: the stream is hc_count
copies of the hidden state (the embeddings repeated), and before each mixer and each MoE a gated residual
(Qwen4ExpTextGatedResidual: a grouped RMSNorm hc_norm over the N x h copies, input_mix_weight_down (N h -> hc_lowrank),
SiLU, input_mix_weight_up (-> N h), sigmoid, the copies mixed by those weights and averaged into the block's input;
block_inject_weight (N h -> N) weights the block's output added into each copy). The final hyper_connection_mixer (no
block_inject_weight) makes the LM head's input; there is no final norm.

The attention layers ("indexed_attention"; "full_attention" as the class reads it) run the QSA indexer
(Qwen4ExpTextQSAIndexer): index_qk_proj (h -> (indexer_n_heads + 1) x indexer_head_dim), q_layernorm, then per
sequence and query a [H, D] x [D, blocks] matmul against the query's complete blocks of indexer_compress_ratio visible
keys (pooled, k_layernorm'd): floor((i + 1) / ratio) blocks for query i of a causal forward without a past, whatever
the values; its top-k only masks the attention, whose eager matmuls span every key.

Per-Layer Embeddings (ple_layer_ids, one-indexed, linear layers only: Qwen4ExpTextPLELayer) add to the stream, before
the layer's gated residual, a gated value from the token's hashed n-grams: per PLE layer an n-gram table whose
(ngram_size - 1) x heads_per_ngram heads take consecutive primes >= ngram_vocab_size_base rows (the layer's total padded
to a multiple of make_ngram_vocab_size_divisible_by; saved as split_ngram_parts row shards, torch.chunk's), key_proj
(E -> N h) and value_proj (E -> h) of the looked-up rows, grouped norms, a per-copy gate and a depthwise conv1d (kernel
ple_conv_kernel_size, dilation ngram_size) over the N h channels. The cache (DynamicCache(config)): each attention
layer's K and V and its indexer's raw keys (indexer_head_dim per token), each linear layer's conv and float32 recurrent
state (layout_linear.hybrid_kv_cache), a PLE layer's short-conv state ((kernel - 1) x ngram_size inputs) and its last
ngram_size - 1 token ids (int64); the position ids the first indexed layer keeps for the indexers are not counted
(meta.cache_tensors counts no such tensor either)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from .framework import decoders, layout_linear, layout_moe, walk_names
from .framework.archspec import DeltaNet, Variant
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, KVLines, Sample, Tensors
from .framework.layout import Module, decoder_lm
from .framework.layout_base import Walk, walk_tensors
from .framework.ops import Builder, ew_cost
from .qwen3_5 import QWEN3_5_MOE
from .qwen_moe import moe_spec

# Qwen3.5-MoE's names and switches (the DeltaNet's four projections, the routed MLP with its gated shared expert); the
# rotary over every dim unless rope_parameters' partial_rotary_factor says less (Qwen4's default rope init)
LAYOUT = replace(QWEN3_5_MOE, partial_rotary=1.0, gguf_renames=())
_QSA = ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim", "indexer_budget", "indexer_compress_ratio")


@dataclass(frozen=True)
class Qwen4Variant(Variant):
    hc: int              # hc_count: copies of the stream
    rank: int            # hc_lowrank: the input mixer's rank
    index_heads: int     # indexer_n_heads
    index_dim: int       # indexer_head_dim
    ratio: int           # indexer_compress_ratio: keys pooled per block
    gate_act: str        # the DeltaNet's output gate: output_gate_type, else hidden_act
    # Per-Layer Embeddings (Qwen4ExpTextPLELayer) on these layers (0-indexed; config ple_layer_ids one-indexed)
    ple: tuple[int, ...] = ()
    ple_dim: int = 0                   # ple_embed_dim: the n-gram heads' embeddings concatenated
    ngram: int = 0                     # ngram_size: the 2..ngram-grams, and the short conv's dilation
    ngram_heads: int = 0               # (ngram_size - 1) x heads_per_ngram
    ple_rows: tuple[int, ...] = ()     # each PLE layer's n-gram table rows (padded_vocab_size), in `ple`'s order
    ple_kernel: int = 0                # ple_conv_kernel_size
    ple_parts: int = 1                 # split_ngram_parts: the table saved as this many row shards (torch.chunk)


def _primes_from(start: int, count: int) -> list[int]:
    """The first `count` primes >= start, by trial division (Qwen4ExpTextNGramEmbedding's _find_nth_prime_after)."""
    out: list[int] = []
    n = max(start, 2)
    while len(out) < count:
        if n == 2 or (n % 2 and all(n % q for q in range(3, math.isqrt(n) + 1, 2))):
            out.append(n)
        n += 1
    return out


def _ple(c: Cfg, types: list[str]) -> dict[str, Any]:
    """The Qwen4Variant fields of config ple_layer_ids: each PLE layer's table (n-gram head j of PLE layer i takes the
    (i x heads + j + 1)-th prime >= ngram_vocab_size_base rows, the layer's total padded up to a multiple of
    make_ngram_vocab_size_divisible_by), as Qwen4ExpTextNGramEmbedding builds it."""
    ids = c.get("ple_layer_ids", default=None) or []
    L = len(types)
    if not isinstance(ids, list) or any(not isinstance(i, int) or not 1 <= i <= L for i in ids):
        raise UsageError(f"{c.path}: config ple_layer_ids is not a list of one-indexed layer ids in [1, {L}]")
    layers = tuple(i - 1 for i in sorted(set(ids)))
    if not layers:
        return {}
    if any(types[i] != "linear_attention" for i in layers):
        raise UsageError(f"{c.path}: config ple_layer_ids names a layer that is not linear_attention (transformers "
                         "refuses it)")
    eos = c.get("eos_token_id", default=None)
    if eos is None or eos == []:
        raise UsageError(f"{c.path}: config eos_token_id is not set, which PLE layers need (transformers refuses it)")
    n, per = c.int("ngram_size", default=FROM_CLASS), c.int("heads_per_ngram", default=FROM_CLASS)
    heads = (n - 1) * per
    dim = c.int("ple_embed_dim", default=c.int("hidden_size", default=FROM_CLASS))
    if heads <= 0 or dim <= 0 or dim % heads:
        raise UsageError(f"{c.path}: config ple_embed_dim ({dim}) is not a positive multiple of the n-gram heads, "
                         f"(ngram_size - 1) x heads_per_ngram = {heads}")
    base, div = c.int("ngram_vocab_size_base", default=FROM_CLASS), c.int("make_ngram_vocab_size_divisible_by",
                                                                          default=FROM_CLASS)
    primes = _primes_from(base, heads * len(layers))
    rows = tuple(-(-sum(primes[j * heads:(j + 1) * heads]) // div) * div for j in range(len(layers)))
    return dict(ple=layers, ple_dim=dim, ngram=n, ngram_heads=heads, ple_rows=rows,
                ple_kernel=c.int("ple_conv_kernel_size", default=FROM_CLASS),
                ple_parts=c.int("split_ngram_parts", default=FROM_CLASS))


def _types(c: Cfg, L: int) -> list[str]:
    """layer_types as Qwen4ExpTextConfig.__post_init__ leaves them: "full_attention" read as "indexed_attention"; absent,
    every full_attention_interval-th layer (4 unless given) indexed, the others linear."""
    types = c.get("layer_types", default=None)
    if types is None:
        every = c.int("full_attention_interval", default=4)
        return ["linear_attention" if (i + 1) % every else "indexed_attention" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(
            t not in ("linear_attention", "indexed_attention", "full_attention") for t in types):
        raise UsageError(f"{c.path}: config layer_types is not a list of {L} 'linear_attention' / 'indexed_attention'")
    return ["indexed_attention" if t == "full_attention" else t for t in types]


def from_config(c: Cfg) -> ArchSpec:
    L = c.int("num_hidden_layers", default=FROM_CLASS)
    types = _types(c, L)
    if "indexed_attention" in types and any(c.get(k, default=None) is None for k in _QSA):
        raise UsageError(f"{c.path}: an indexed_attention layer needs the QSA indexer's sizes ({', '.join(_QSA)}): "
                         "transformers cannot build it without them")
    if "indexed_attention" in types and c.int("indexer_kv_heads") != 1:
        raise UsageError(f"{c.path}: config indexer_kv_heads is not 1 (Qwen4-Exp's QSA has one key head)")
    gate = c.get("output_gate_type", default=None) or c.get("hidden_act", default=FROM_CLASS)
    if gate not in ("silu", "sigmoid"):
        raise UsageError(f"{c.path}: config output_gate_type / hidden_act {gate!r} is not silu or sigmoid")
    inner = Cfg({**c.cfg, "layer_types": ["full_attention" if t == "indexed_attention" else t for t in types]},
                c.path, c.model_type, c.head, c.common)
    spec = moe_spec(LAYOUT, inner)
    qsa = "indexed_attention" in types
    v = Qwen4Variant(hc=c.int("hc_count", default=FROM_CLASS), rank=c.int("hc_lowrank", default=FROM_CLASS),
                     index_heads=c.int("indexer_n_heads") if qsa else 0, index_dim=c.int("indexer_head_dim") if qsa else 0,
                     ratio=c.int("indexer_compress_ratio") if qsa else 1, gate_act=str(gate), **_ple(c, types))
    if v.hc <= 1 or v.rank <= 0 or v.ratio <= 0:
        raise UsageError(f"{c.path}: config hc_count must be > 1, hc_lowrank and indexer_compress_ratio positive")
    return replace(spec, variant=v)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    raise NoAnalyticModel("Qwen4-Exp without config.json: its layer kinds, top-k, indexer's compression ratio and "
                          "n-gram sizes are config-only")


def _gated_residual(w: Walk, at: str, layers: tuple[int, ...] | None, combine: bool) -> None:
    """Qwen4ExpTextGatedResidual at `at` (module docstring) on `layers` (None: the final mixer, once)."""
    s, B, v = w.s, w.B, w.s.variant_as(Qwen4Variant)
    N, h, n = v.hc, w.s.hidden, w.B.b * w.B.seq
    L = len(layers) if layers is not None else 1
    w.norm(f"{at}.hc_norm", None, N * h, layers, residual=False)
    w.linear(f"{at}.input_mix_weight_down", None, N * h, v.rank, False, layers)
    w.linear(f"{at}.input_mix_weight_up", None, v.rank, N * h, False, layers)
    label = at if layers is None else w.label(at, layers)
    B.add(f"{label} silu, sigmoid, copies x weights, mean", "activation", "encoder", L, w.tok + (N * h,), w.tok + (h,),
          ew=n * (v.rank * (ew_cost("silu") + 1) + N * h * (ew_cost("sigmoid") + 2)))
    if combine:
        w.linear(f"{at}.block_inject_weight", None, N * h, N, False, layers)
        B.add(f"{label} 2 sigmoid(inject), + output x inject into each copy", "activation", "encoder", L, w.tok + (h,),
              w.tok + (N * h,), ew=n * N * (ew_cost("sigmoid") + 2 + 2 * h))
    del s


def _ple_layers(w: Walk) -> None:
    """Qwen4ExpTextPLELayer on its layers, added to the stream before the layer's gated residual: the hashed n-gram ids'
    rows of ngram_embedding (a lookup; saved as split_ngram_parts row shards), key_proj (E -> N h) and its grouped
    norm, value_proj (E -> h), norm_query over the stream, the per-copy gate, norm_conv and the depthwise conv1d
    (kernel ple_conv_kernel_size, dilation ngram_size: s outputs per channel), SiLU, the add."""
    s, B, v = w.s, w.B, w.s.variant_as(Qwen4Variant)
    N, h, E, n, ple, L = v.hc, s.hidden, v.ple_dim, B.b * B.seq, v.ple, len(v.ple)
    for i, rows in zip(ple, v.ple_rows):
        # torch.chunk's shards: ceil(rows / parts) rows each, the last what is left
        size = -(-rows // v.ple_parts)
        for part in range(-(-rows // size)):
            w.record(f"ple.ple_embedding.ngram_embedding.shard_{part}", None,
                     (("weight", (min(size, rows - part * size), E // v.ngram_heads)),), (i,))
        B.add(w.label(f"ple.ple_embedding ({v.ngram_heads} hashed n-gram heads, {rows:,} rows)", (i,)), "embedding",
              "embedding", 1, (B.b, B.seq), w.tok + (E,), params=rows * (E // v.ngram_heads), ew=0)
    w.linear("ple.key_proj", None, E, N * h, False, ple)
    w.norm("ple.norm_key", None, N * h, ple, residual=False)
    w.linear("ple.value_proj", None, E, h, False, ple)
    w.norm("ple.norm_query", None, N * h, ple, residual=False)
    B.add(w.label("ple gate (key . query per copy, signed sqrt, sigmoid) x value", ple), "activation", "encoder", L,
          w.tok + (N * h,), w.tok + (N * h,), ew=n * N * (3 * h + ew_cost("sigmoid") + 4))
    w.norm("ple.norm_conv", None, N * h, ple, residual=False)
    k = v.ple_kernel
    w.record("ple.conv1d", None, (("weight", (N * h, 1, k)),), ple)
    B.add(w.label(f"ple.conv1d (depthwise, dilation {v.ngram}, +silu) + gated value, + stream", ple), "conv", "encoder",
          L, w.tok + (N * h,), w.tok + (N * h,), params=N * h * k * L, macs=n * N * h * k,
          ew=n * N * h * (ew_cost("silu") + 2), weights_per_call=N * h * k)


def qsa_macs(s: ArchSpec, b: int, n: int) -> int:
    """The QSA indexer's score matmuls in one layer for b x n tokens: query i against floor((i + 1) / ratio) blocks."""
    v = s.variant_as(Qwen4Variant)
    return b * v.index_heads * v.index_dim * sum(j // v.ratio for j in range(1, n + 1))


def _attention(w: Walk, layers: tuple[int, ...]) -> None:
    """The QSA indexer, then the gated attention (q_proj: each head's query and its gate), in execution order."""
    s, p, B, v = w.s, w.p, w.B, w.s.variant_as(Qwen4Variant)
    h, a, g, d, H, D, L = s.hidden, s.heads, s.kv_heads, s.head_dim, v.index_heads, v.index_dim, len(layers)
    at, ix = f"{p.attn}.", f"{p.attn}.indexer."
    w.linear(ix + "index_qk_proj", None, h, (H + 1) * D, False, layers)
    w.norm(ix + "q_layernorm", None, D, layers, residual=False, tokens=w.tok + (H,))
    w.record(ix + "k_layernorm", None, (("weight", (D,)),), layers)
    nb = sum(j // v.ratio for j in range(1, B.seq + 1))   # blocks over every query of a sequence
    B.add(w.label(f"{ix}blocks (mean, k_layernorm, rotary) and scores q . k (ReLU, sum, top-k)", layers), "attention",
          "encoder", L, (B.b, B.seq, H, D), (B.b, B.seq, B.seq), params=D * L, macs=qsa_macs(s, B.b, B.seq),
          ew=B.b * nb * (H + D * (v.ratio + ew_cost("rmsnorm"))), weights_per_call=D)
    for sub, width in ((p.q, 2 * a * d), (p.k, g * d), (p.v, g * d)):
        w.linear(at + sub, None, h, width, s.qkv_bias, layers)
    for sub, heads in ((p.q_norm, a), (p.k_norm, g)):
        w.norm(at + sub, None, d, layers, residual=False, tokens=w.tok + (heads,))
    decoders.rope_apply(B, w.label(f"{p.attn} rotary", layers), a + g, s.rope_dim or d, L)
    B.causal_self_attention(f"{p.layers}[{{layers}}].{p.attn}", "encoder", a, d, layers=layers)
    B.add(w.label(f"{p.attn} output x sigmoid(gate)", layers), "activation", "encoder", L, w.tok + (a * d,),
          w.tok + (a * d,), ew=B.b * B.seq * a * d * (ew_cost("sigmoid") + 1))
    w.linear(at + p.o, None, a * d, h, s.o_bias, layers)


def walk(B: Builder) -> list[Module]:
    """The forward at B.s's sizes: writes its ops to B and returns the modules it met."""
    s = B.s
    v = s.variant_as(Qwen4Variant)
    w = Walk(B, LAYOUT)
    p, h, L, n = w.p, s.hidden, s.layers, B.b * B.seq
    every = tuple(range(L))
    linear = tuple(i for i in every if i in s.linear_layers)
    attn = tuple(i for i in every if i not in s.linear_layers)
    w.record(p.embed, None, (("weight", (s.vocab, h)),), None)
    B.embedding(p.embed, "embedding", s.vocab, h, B.seq)
    B.add(f"{p.embed} repeated hc_count = {v.hc} times", "activation", "embedding", 1, w.tok + (h,), w.tok + (v.hc * h,),
          ew=n * v.hc * h)
    if attn:
        decoders.rotary(B, s.rope_dim or s.head_dim)
    if v.ple:
        _ple_layers(w)
    _gated_residual(w, "attn_hyper_connection", every, True)
    if linear:
        layout_linear.gated_deltanet(w, linear)
    if attn:
        _attention(w, attn)
    _gated_residual(w, "mlp_hyper_connection", every, True)
    layout_moe.routed(w, every)
    _gated_residual(w, "hyper_connection_mixer", None, False)
    if s.head == "lm":
        w.modules.append(Module(p.lm_head, None, (("weight", (s.vocab, h)),), top=True))
        decoders.lm_head(B, p.lm_head, p.embed)
    return w.modules


def build(B: Builder) -> None:
    walk(B)


expected_tensors = walk_tensors(walk, LAYOUT.paths.body)
_NAMES = walk_names.walked(walk, "qwen4_exp_text", **walk_names.LM, linear_layers=(0,), deltanet=DeltaNet(1, 4, 1, 4, 2),
                           experts=2, top_k=1, moe_intermediate=4, shared_intermediate=4,
                           variant=Qwen4Variant(hc=2, rank=2, index_heads=1, index_dim=4, ratio=2, gate_act="silu"))


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """DynamicCache(config) after b x n tokens: layout_linear.hybrid_kv_cache's K/V and states, plus each attention
    layer's QSA keys (indexer_head_dim per token)."""
    (label, total, rule), *rest = layout_linear.hybrid_kv_cache(s, b, n, nd, ab)
    v = s.variant_as(Qwen4Variant)
    index = (s.layers - len(s.linear_layers)) * v.index_dim * ab
    # a PLE layer's states: the short conv's last (kernel - 1) x dilation inputs, N h wide, and the last ngram_size - 1
    # token ids (int64)
    ple = len(v.ple) * (v.hc * s.hidden * (v.ple_kernel - 1) * v.ngram * ab + (v.ngram - 1) * 8)
    return [(label, total + b * n * index + b * ple, f"{rule}; + the QSA indexer's keys, {s.layers - len(s.linear_layers)} "
             f"attention layers x indexer_head_dim x s x b x {ab} B ({index:,} B per token)"
             + (f"; + {len(v.ple)} PLE layers' conv state (N h x (ple_conv_kernel_size - 1) x ngram_size x {ab} B) and "
                f"n-gram context (ngram_size - 1 ids x 8 B), whatever s: {ple:,} B x b" if v.ple else "")), *rest]


_SIZES = dict(vocab_size=97, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
              linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
              linear_conv_kernel_dim=4, moe_intermediate_size=12, shared_expert_intermediate_size=20, num_experts=3,
              num_experts_per_tok=2, hc_count=3, hc_lowrank=6, indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=8,
              indexer_budget=4, indexer_compress_ratio=2, layer_types=["linear_attention", "indexed_attention"],
              max_position_embeddings=64)

FAMILY = Family(
    name="qwen4_exp",
    model_types=("qwen4_exp_text",),
    before=("qwen3_5",),   # tried before it: Qwen3.5's signature (linear_attn.in_proj_b) matches its DeltaNet layers
    signature=walk_names.signature(_NAMES, "attn_hyper_connection.block_inject_weight", tf1=False),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    **{**decoder_lm(LAYOUT), "kv_cache": kv_cache},
    gguf_architectures=(),   # llama.cpp has no Qwen4-Exp architecture
    samples=(
        # routing and the indexer's per-query loop need real values (nonzero() has no meta kernel): CPU builds; the
        # layer kinds and the indexer's sizes are config-only (no inference from the tensors)
        Sample("Qwen4ExpTextConfig", _SIZES, ("Qwen4ExpTextModel", "Qwen4ExpForCausalLM"), device="cpu", infer=False),
        # tied, two attention layers (one linear), other head counts, compression ratio 3, a sigmoid output gate
        Sample("Qwen4ExpTextConfig", dict(_SIZES, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                          hc_count=2, hc_lowrank=5, indexer_n_heads=3, indexer_compress_ratio=3,
                                          indexer_budget=6, output_gate_type="sigmoid", tie_word_embeddings=True,
                                          layer_types=["indexed_attention", "linear_attention", "full_attention"]),
               ("Qwen4ExpForCausalLM",), device="cpu", infer=False),
        # Per-Layer Embeddings on both linear layers (their tables of consecutive primes from 101, saved in 3 uneven row
        # shards)
        Sample("Qwen4ExpTextConfig", dict(_SIZES, num_hidden_layers=3, ple_layer_ids=[1, 3], ple_embed_dim=24,
                                          ngram_size=4, heads_per_ngram=2, ngram_vocab_size_base=101,
                                          make_ngram_vocab_size_divisible_by=16, split_ngram_parts=3,
                                          ple_conv_kernel_size=3, eos_token_id=2,
                                          layer_types=["linear_attention", "indexed_attention", "linear_attention"]),
               ("Qwen4ExpTextModel", "Qwen4ExpForCausalLM"), device="cpu", infer=False),
    ),
)
