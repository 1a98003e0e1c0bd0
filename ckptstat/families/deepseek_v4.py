"""DeepSeek-V4 (transformers modeling_deepseek_v4.py, configuration_deepseek_v4.py: DeepseekV4Model /
DeepseekV4ForCausalLM). Nothing of V3's latent attention: every layer attends with one shared K = V head over a sliding
window, and by config layer_types some add compressed entries to it:

* attention: q_a_proj (h -> q_lora_rank), q_a_norm, q_b_proj (-> a x d), a weightless norm per head; kv_proj (h -> d, the
  one head read as key and value), kv_norm; partial interleaved rotary on q and kv (and undone on the output); eager
  attention of all a heads over the one head with a learned sink per head (sinks [a]); the grouped output projection,
  o_a_proj (o_groups blocks of a x d / o_groups -> o_lora_rank, one bmm) then o_b_proj (o_groups x o_lora_rank -> h);
* "heavily_compressed_attention" (HCA, compress_rates' 128): compressor.kv_proj and gate_proj (h -> d), position_bias
  [rate, d], kv_norm: each closed window of rate tokens one entry (a softmax-gated sum), appended to the window's keys;
* "compressed_sparse_attention" (CSA, compress_rates' 4): the same at 2 x d (two overlapping series), plus the lightning
  indexer: its own compressor at 2 x index_head_dim, q_b_proj (q_lora_rank -> index_n_heads x index_head_dim) and
  scorer.weights_proj (h -> index_n_heads), its scores a matmul of every query head against every compressed key; the
  top index_topk only mask (a block bias): the attention still multiplies every compressed entry;
* the MoE on every layer: a router (gate.weight, E x h; the first mlp_layer_types "hash_moe" layers pick their experts
  from tid2eid[input_ids], a buffer), E fused experts (transformers 5's grouped_mm: each token's top-k rows) and one
  shared expert of moe_intermediate_size (n_shared_experts is not read);
* hyper-connections: the stream held as hc_mult copies; before each layer's attention and MLP an fp32 linear of the
  copies flattened (attn_hc / ffn_hc.fn: N x h -> (2 + N) x N) mixes them into the sublayer's input, after it the output
  is spread back and the copies mixed by an N x N matrix (a bmm); hc_head (N x h -> N) collapses them before the norm.

Eager attention multiplies each query by every key it is handed: the layer's s tokens and, on a compressed layer, its
floor(s / rate) entries (the window and the compressed entries' causality only mask). The cache (DynamicCache(config):
DynamicSlidingWindowLayer, DeepseekV4HCACache, DeepseekV4CSACache) after a forward of s tokens: the last
sliding_window - 1 keys (a sliding layer its values apart, a compressed layer one tensor for both), the compressed
entries, the tokens of an unclosed window (projected kv and gate) and on CSA layers the last window's first series
(overlap_kv, and overlap_gate in float32: position_bias's dtype), for the compressor and the indexer (deepseek_v4_cache).
llama.cpp has no architecture for it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from .framework import decoders, layout, walk_names
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, SLIDING_HELD, STATE_BYTES, ArchSpec, Cfg, Family, KVLines, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import Walk, walk_tensors
from .framework.ops import Builder, causal_pairs, ew_cost

# the module names as save_pretrained writes them (transformers' conversion_mapping.py "deepseek_v4" reverted: DeepSeek's
# own names, each routed expert apart); the base model's file names its embedding embed, its head connection hc_head_*
LAYOUT = DecoderLayout(paths=Paths(attn="attn", mlp="ffn", lm_head="head", attn_in="attn_norm", mlp_in="ffn_norm"))
KINDS = {"sliding_attention": "sliding", "compressed_sparse_attention": "csa", "heavily_compressed_attention": "hca"}
# configuration_deepseek_v4.py _COMPRESS_RATIO_TO_LAYER_TYPE: a legacy compress_ratios entry's layer type
_LEGACY = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}


@dataclass(frozen=True)
class V4Variant(Variant):
    kinds: tuple[str, ...]      # per layer: sliding, csa, hca (config layer_types)
    hashed: tuple[int, ...]     # the mlp_layer_types "hash_moe" layers (tid2eid routing: no parameter of their own)
    q_rank: int                 # q_lora_rank
    o_groups: int
    o_rank: int                 # o_lora_rank
    csa: int                    # compress_rates' compressed_sparse_attention
    hca: int                    # compress_rates' heavily_compressed_attention
    index_heads: int
    index_dim: int
    topk: int                   # index_topk: the compressed entries a CSA query keeps (a mask: FLOPs count them all)
    hc: int                     # hc_mult

    def layers(self, kind: str) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.kinds) if k == kind)

    def rate(self, kind: str) -> int:
        return self.csa if kind == "csa" else self.hca


def from_config(c: Cfg) -> ArchSpec:
    L = c.int("num_hidden_layers")
    types = c.get("layer_types", default=None)
    legacy = c.get("compress_ratios", default=None)
    if types is None and isinstance(legacy, list):
        types = [_LEGACY.get(r, str(r)) for r in legacy]
    if types is None:   # DeepseekV4Config.__post_init__: 2 x HCA, then CSA / HCA interleaved
        types = ["heavily_compressed_attention"] * min(L, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention" for i in range(max(L - 2, 0))]
    mlp = c.get("mlp_layer_types", default=None)
    if mlp is None:
        n_hash = c.get("num_hash_layers", default=3)   # the class's default_num_hash_layers
        mlp = ["hash_moe"] * min(L, int(n_hash)) + ["moe"] * max(0, L - int(n_hash))
    if (not isinstance(types, list) or len(types) < L or any(t not in KINDS for t in types[:L])
            or not isinstance(mlp, list) or len(mlp) < L or any(t not in ("hash_moe", "moe") for t in mlp[:L])):
        raise UsageError(f"{c.path}: config layer_types / mlp_layer_types are not {L} DeepSeek-V4 layer types")
    rates = dict(c.get("compress_rates", default=None) or {"compressed_sparse_attention": 4,
                                                            "heavily_compressed_attention": 128})
    for key, legacy_key in (("compressed_sparse_attention", "compress_rate_csa"),
                            ("heavily_compressed_attention", "compress_rate_hca")):
        if (value := c.get(legacy_key, default=None)) is not None:
            rates[key] = value
    if c.get("attention_bias", default=FROM_CLASS) or c.get("mlp_bias", default=FROM_CLASS):
        raise NoAnalyticModel(f"{c.path}: config attention_bias / mlp_bias true: the deepseek_v4 op template describes "
                              "unbiased projections only (the modeling file builds them unbiased but the shared expert)")
    d, h = c.int("head_dim", default=FROM_CLASS), c.int("hidden_size")
    rope = c.get("partial_rotary_factor", default=None)
    legacy_rope = c.get("qk_rope_head_dim", default=None)
    rope_dim = int(d * rope) if rope is not None else int(legacy_rope) if legacy_rope is not None else d // 8
    F = c.int("moe_intermediate_size", default=FROM_CLASS)
    return ArchSpec(layers=L, hidden=h, heads=c.int("num_attention_heads", default=FROM_CLASS), kv_heads=1, head_dim=d,
                    intermediate=F, moe_intermediate=F, shared_intermediate=F, vocab=c.int("vocab_size"),
                    context=c.int("max_position_embeddings", default=0),
                    activation=str(c.get("hidden_act", default=FROM_CLASS)), gated_mlp=True, norm="rmsnorm",
                    qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    sliding_window=c.int("sliding_window", default=FROM_CLASS), sliding_layers=tuple(range(L)),
                    experts=c.int("n_routed_experts", default=FROM_CLASS),
                    top_k=c.int("num_experts_per_tok", default=FROM_CLASS), rope_dim=rope_dim,
                    variant=V4Variant(kinds=tuple(KINDS[t] for t in types[:L]),
                                      hashed=tuple(i for i, t in enumerate(mlp[:L]) if t == "hash_moe"),
                                      q_rank=c.int("q_lora_rank", default=FROM_CLASS),
                                      o_groups=c.int("o_groups", default=FROM_CLASS),
                                      o_rank=c.int("o_lora_rank", default=FROM_CLASS),
                                      csa=int(rates["compressed_sparse_attention"]),
                                      hca=int(rates["heavily_compressed_attention"]),
                                      index_heads=c.int("index_n_heads", default=FROM_CLASS),
                                      index_dim=c.int("index_head_dim", default=FROM_CLASS),
                                      topk=c.int("index_topk", default=FROM_CLASS),
                                      hc=c.int("hc_mult", default=FROM_CLASS)),
                    **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    raise NoAnalyticModel("DeepSeek-V4 without config.json: its layer kinds and compression rates are config-only")


def hyper(w: Walk, sub: str, layers: tuple[int, ...] | None) -> None:
    """DeepseekV4HyperConnection at {sub} (or DeepseekV4HyperHead, layers None): the N copies flattened, a weightless
    RMSNorm, an fp32 linear (N x h -> (2 + N) x N, or N for the head), sigmoid / softmax mixes and Sinkhorn-Knopp
    iterations over N x N (element-wise), the copies' weighted sum."""
    B, s, h, tok = w.B, w.s, w.s.hidden, w.tok
    N, L = s.variant_as(V4Variant).hc, len(layers) if layers is not None else 1
    out, scales = ((2 + N) * N, 3) if layers is not None else (N, 1)
    sep = ".hc_" if layers is None and s.head != "base" else "_"   # hc_head.hc_fn in a head model's file, else hc_head_fn
    fn, base, scale = (f"{sub}{sep}{x}" for x in ("fn", "base", "scale"))
    w.record(fn, None, (("", (out, N * h)),), layers)
    w.record(base, None, (("", (out,)),), layers)
    w.record(scale, None, (("", (scales,)),), layers)
    label = sub if layers is None else w.label(sub, layers)
    B.linear(f"{fn} (fp32)" if layers is None else w.label(f"{fn} (fp32)", layers), "encoder", tok, N * h, out, False, L)
    B.add(f"{label} (norm, mixes, collapse)", "activation", "encoder", L, tok + (N * h,), tok + (h,),
          params=(out + scales) * L, ew=B.b * B.seq * (N * h * (ew_cost("rmsnorm") + 2) + out * ew_cost("sigmoid")),
          weights_per_call=out + scales)


def spread(w: Walk, what: str, layers: tuple[int, ...]) -> None:
    """After a sublayer: post x output onto the N copies plus comb^T @ the copies (a bmm of N x N by N x h per token)."""
    B, h, N = w.B, w.s.hidden, w.s.variant_as(V4Variant).hc
    n = B.b * B.seq
    B.add(w.label(f"{what} residual (comb^T x copies + post x output)", layers), "linear", "encoder", len(layers),
          w.tok + (N, h), w.tok + (N, h), macs=n * N * N * h, ew=n * N * h * 3)


def compressor(w: Walk, sub: str, kind: str, width: int, layers: tuple[int, ...]) -> int:
    """A compressor at {sub} (HCA: width d, one series; CSA and the indexer: two series of width each): kv_proj and
    gate_proj of every token, position_bias, the softmax-gated sum of each closed window, kv_norm, rotary. Returns the
    entries the forward's s tokens close."""
    B, s, v, tok = w.B, w.s, w.s.variant_as(V4Variant), w.tok
    series, rate = (2 if kind == "csa" else 1), v.rate(kind)
    w.linear(f"{sub}.wkv", None, s.hidden, series * width, False, layers)
    w.linear(f"{sub}.wgate", None, s.hidden, series * width, False, layers)
    w.record(f"{sub}.ape", None, (("", (rate, series * width)),), layers)
    w.norm(f"{sub}.norm", None, width, layers, residual=False, tokens=(B.b, B.seq // rate))
    T = B.seq // rate
    B.add(w.label(f"{sub} (+ position_bias, softmax over each window, weighted sum)", layers), "activation", "encoder",
          len(layers), tok + (2 * series * width,), (B.b, T, width), params=rate * series * width * len(layers),
          ew=B.b * T * rate * series * width * (ew_cost("softmax") + 3), weights_per_call=rate * series * width)
    return T


def attention(w: Walk, kind: str, layers: tuple[int, ...], T: int) -> None:
    """Eager attention of every head over the s keys and T compressed entries (QK^T, the sinks' softmax, PV); with
    causal halving, the pairs the masks let through: the window's, and per query the entries its position has closed
    (CSA: at most index_topk of them, the indexer's picks)."""
    B, s, v = w.B, w.s, w.s.variant_as(V4Variant)
    a, d, n = s.heads, s.head_dim, B.seq
    if B.halve:
        rate = v.rate(kind)
        cap = v.topk if kind == "csa" else n
        closed = [min((t + 1) // rate, cap) for t in range(n)] if kind != "sliding" else []
        pairs = causal_pairs(n, s.sliding_window) + sum(closed)
    else:
        pairs = n * (n + T)
    scores, prefix = B.b * a * pairs, w.label(f"{w.p.attn} ({kind})", layers)
    w.record(f"{w.p.attn}.attn_sink", None, (("", (a,)),), layers)
    B.add(prefix + ".scores (QK^T, + sinks)", "attention", "encoder", len(layers), (B.b, a, n, d), (B.b, a, n, n + T),
          params=a * len(layers), macs=scores * d, ew=scores * (ew_cost("softmax") + 2), extra_in=B.b * (n + T) * d,
          weights_per_call=a)
    B.add(prefix + ".context (PV)", "attention", "encoder", len(layers), (B.b, a, n, n + T), (B.b, a, n, d),
          macs=scores * d, extra_in=B.b * (n + T) * d)


def walk(B: Builder) -> list[layout.Module]:
    """The forward at B.s's sizes: writes its ops to B and returns the modules it met."""
    s = B.s
    v = s.variant_as(V4Variant)
    w = Walk(B, LAYOUT)
    p, h, a, d, L, n, tok = w.p, s.hidden, s.heads, s.head_dim, s.layers, B.b * B.seq, w.tok
    every = tuple(range(L))
    at = f"{p.attn}."
    embed = p.embed if s.head != "base" else "embed"
    w.record(embed, None, (("weight", (s.vocab, h)),), None)
    B.embedding(embed, "embedding", s.vocab, h, B.seq)
    for kind in ("main", "compress"):
        decoders.rotary(B, s.rope_dim, f"rotary_emb ({kind})")
    hyper(w, "hc_attn", every)
    w.norm(p.attn_in, None, h, every, residual=False)
    w.linear(at + "wq_a", None, h, v.q_rank, False, every)
    w.norm(at + "q_norm", None, v.q_rank, every, residual=False)
    w.linear(at + "wq_b", None, v.q_rank, a * d, False, every)
    decoders.plain_norm(B, w.label(at + "q_b_norm (weightless, per head)", every), tok + (a,), d, L, False)
    w.linear(at + "wkv", None, h, d, False, every)
    w.norm(at + "norm", None, d, every, residual=False)
    decoders.rope_apply(B, w.label(f"{p.attn} rotary (q, kv, the output undone)", every), 2 * a + 1, s.rope_dim, L)
    for kind in ("sliding", "hca", "csa"):
        if not (ls := v.layers(kind)):
            continue
        T = 0
        if kind != "sliding":
            T = compressor(w, at + "compressor", kind, d, ls)
        if kind == "csa":
            ix = at + "indexer"
            compressor(w, ix + ".compressor", kind, v.index_dim, ls)
            w.linear(ix + ".wq_b", None, v.q_rank, v.index_heads * v.index_dim, False, ls)
            w.linear(ix + ".weights_proj", None, h, v.index_heads, False, ls)
            B.add(w.label(ix + " scores (q x compressed keys, relu, x weights, top-k)", ls), "attention", "encoder",
                  len(ls), tok + (v.index_heads, v.index_dim), tok + (T,), macs=n * v.index_heads * v.index_dim * T,
                  ew=n * v.index_heads * T * 4)
        attention(w, kind, ls, T)
    w.linear(at + "wo_a", None, a * d // v.o_groups, v.o_groups * v.o_rank, False, every,
             label=w.label(at + "wo_a (grouped: a bmm over o_groups)", every))
    w.linear(at + "wo_b", None, v.o_groups * v.o_rank, h, False, every)
    spread(w, p.attn, every)
    hyper(w, "hc_ffn", every)
    w.norm(p.mlp_in, None, h, every, residual=False)
    _moe(w, every)
    spread(w, p.mlp, every)
    hyper(w, "hc_head", None)
    w.norm(p.norm, None, h, None, residual=False)
    if s.head == "lm":
        w.modules.append(layout.Module(p.lm_head, None, (("weight", (s.vocab, h)),), top=True))
        decoders.lm_head(B, p.lm_head, embed)
    return w.modules


def _moe(w: Walk, layers: tuple[int, ...]) -> None:
    """DeepseekV4SparseMoeBlock: the router's logits (E x h; a hash layer's picks from tid2eid), k rows per token
    through the experts (held fused, gate_up_proj and down_proj; saved apart, w1 / w3 and w2 each), clamped SwiGLU,
    every token through the shared expert (w1, w3, w2)."""
    s, B = w.s, w.B
    h, E, k, F, L, n, tok = s.hidden, s.experts, s.top_k, s.moe_intermediate, len(layers), B.b * B.seq, w.tok
    m = f"{w.p.mlp}."
    w.record(m + "gate", None, (("weight", (E, h)),), layers)
    B.linear(w.label(m + "gate (router)", layers), "encoder", tok, h, E, False, L)
    B.add(w.label(m + "gate scores, top-k, normalised x routed_scaling_factor", layers), "activation", "encoder", L,
          tok + (E,), tok + (k,), ew=n * E * (ew_cost("softplus") + 1) + n * k * 4)
    rows = (n * k,)
    for sub, shape in (("w1", (F, h)), ("w3", (F, h)), ("w2", (h, F))):
        w.record(m + f"experts.{{xid}}.{sub}", None, (("weight", shape),), layers, experts=E)
    B.linear(w.label(m + "experts gate_up_proj (w1, w3)", layers), "encoder", rows, h, 2 * F, False, L, copies=L * E,
             active_copies=L * k)
    B.activation(w.label(m + "experts clamp, act x up", layers), "encoder", rows, F, s.activation, L, gated=True)
    B.linear(w.label(m + "experts down_proj (w2)", layers), "encoder", rows, F, h, False, L, copies=L * E,
             active_copies=L * k)
    for sub, fin, fout in (("w1", h, F), ("w3", h, F)):
        w.linear(m + f"shared_experts.{sub}", None, fin, fout, False, layers)
    B.activation(w.label(m + "shared_experts clamp, act x up", layers), "encoder", tok, F, s.activation, L, gated=True)
    w.linear(m + "shared_experts.w2", None, F, h, False, layers)
    B.add(w.label(m + "experts + shared expert", layers), "activation", "encoder", L, tok + (h,), tok + (h,), ew=n * h)


def build(B: Builder) -> None:
    walk(B)


expected_tensors = walk_tensors(walk, LAYOUT.paths.body)


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """What DynamicCache(config) holds after a forward of b x n tokens (tests/test_families.py reads every tensor of
    it): per layer its window's keys x d, all s tokens' storage after the forward (SLIDING_HELD; a sliding layer's
    values apart, a compressed layer's are its keys); an HCA layer's floor(n / rate) entries x d and its unclosed
    window, n mod rate tokens of kv and gate x d but a view of all n tokens' (their storage held); a CSA layer's the
    same for the compressor (2 x d per buffered token) and the indexer (index_head_dim, 2 x that), and once a window
    closed, the last window's first series, rate x (d + index_head_dim) of kv and of gate, the gate in float32
    (position_bias's)."""
    v = s.variant_as(V4Variant)
    d, di = s.head_dim, v.index_dim
    parts = {"window keys and values": 0, "compressed entries": 0, "unclosed windows": 0, "overlap states": 0}
    for kind in v.kinds:
        parts["window keys and values"] += (2 if kind == "sliding" else 1) * n * d * ab
        if kind == "sliding":
            continue
        rate, width = v.rate(kind), d + (di if kind == "csa" else 0)
        series = 2 if kind == "csa" else 1
        parts["compressed entries"] += n // rate * width * ab
        parts["unclosed windows"] += 2 * n * series * width * ab   # a view of the forward's n tokens: their storage
        if kind == "csa" and n >= rate:
            parts["overlap states"] += rate * width * (ab + max(ab, STATE_BYTES))
    rule = "; ".join(f"{k} {x:,} B" for k, x in parts.items() if x)
    return [(f"b={b}, s={n}", b * sum(parts.values()),
             f"per sequence: {rule} (s = {n} window tokens: {SLIDING_HELD}; {len(v.layers('csa'))} CSA "
             f"layers at rate {v.csa}, {len(v.layers('hca'))} HCA at rate {v.hca}), x b")]


_SIZES = dict(vocab_size=97, hidden_size=16, moe_intermediate_size=16, num_hidden_layers=4, num_attention_heads=4,
              head_dim=8, q_lora_rank=12, partial_rotary_factor=0.5, n_routed_experts=4, num_experts_per_tok=2,
              sliding_window=4, o_groups=2, o_lora_rank=6, index_n_heads=2, index_head_dim=4, index_topk=2, hc_mult=2,
              compress_rates={"compressed_sparse_attention": 2, "heavily_compressed_attention": 8},
              layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                           "compressed_sparse_attention"], max_position_embeddings=64)

# the grouped output projection as saved (the walk's attn.wo_a) or as transformers holds it, what a torch.save of the
# model's state_dict keeps (conversion_mapping.py's target, self_attn.o_a_proj)
SIGNATURE = (walk_names.signature(walk_names.walked(walk, "deepseek_v4", **walk_names.LM, experts=2, top_k=1,
                                                    moe_intermediate=4, rope_dim=2, variant=V4Variant(
                                                        kinds=("csa", "hca"), hashed=(0,), q_rank=4, o_groups=2,
                                                        o_rank=2, csa=2, hca=4, index_heads=1, index_dim=4, topk=2, hc=2)),
                                  "attn.wo_a", tf1=False)
             + r"|(^|[./])layers[./]\d+[./]self_attn[./]o_a_proj[./]")

FAMILY = Family(
    name="deepseek_v4",
    model_types=("deepseek_v4",),
    # tried before hy_v4, whose signature reads the attn_hc its layers share
    before=("hy_v4",),
    signature=SIGNATURE,
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    **{**layout.decoder_lm(LAYOUT), "kv_cache": kv_cache},
    cache_heads=lambda s: 1,      # one K = V head: whole on every tensor-parallel device
    windowed_kernel="every layer each query's window and the compressed entries its position has closed (CSA: the "
                    "indexer's index_topk of them), the pairs the masks keep, as --causal-halving counts them",
    gguf_architectures=(),        # llama.cpp has no DeepSeek-V4 architecture
    samples=(
        # the first three layers hash-routed (the class's default); CPU: the experts route by real values
        Sample("DeepseekV4Config", _SIZES, ("DeepseekV4Model", "DeepseekV4ForCausalLM"), device="cpu", infer=False),
        # the class's default schedule (2 x HCA, then CSA / HCA), a hash layer only first, tied embeddings
        Sample("DeepseekV4Config", dict(_SIZES, layer_types=None, num_hidden_layers=3, tie_word_embeddings=True,
                                        mlp_layer_types=["hash_moe", "moe", "moe"]),
               ("DeepseekV4ForCausalLM",), device="cpu", infer=False),
    ),
)
