"""Pieces the rotary decoder families share (qwen3.py, phi.py, phi3.py, gptneox.py, falcon.py, olmo.py,
generic.py): a family's switches in ArchSpec.extra, the rotary-table matmul transformers runs once per
forward, a LLaMA-shaped stack with the switches newer decoders add (q/k norms, fused projections,
post-norms, non-parametric norms), its expected tensors, and which layers keep a sliding window in the
KV cache as transformers' config classes and DynamicCache decide it (`sliding`, docs/kv_cache.md).

Switches (ArchSpec.extra keys, 0/1 unless said): rotary_dim (rotary dims per head; 0: all of head_dim),
qk_norm (1: RMSNorm over each head's d, Qwen3; 2: over the whole q / k width, OLMo2), fused_qkv and
fused_mlp (Phi3's qkv_proj and gate_up_proj), post_norms (OLMo2: norms after attention and MLP, none
before), plain_norm (OLMo: LayerNorm without weights)."""
from __future__ import annotations

from typing import Any

from ..errors import UsageError
from .base import ArchSpec, Cfg, Shapes, add_linear, add_norm
from .ops import Builder, ew_cost


def flag(s: ArchSpec, key: str) -> int:
    return dict(s.extra).get(key, 0)


def rotary_dim(s: ArchSpec) -> int:
    return flag(s, "rotary_dim") or s.head_dim


def rotary(B: Builder, d_rot: int, name: str = "rotary_emb") -> None:
    """transformers 5's rotary embedding: positions (b x s x 1) times inv_freq (ceil(d_rot/2)), a broadcast
    multiply (no matmul: FlopCounterMode counts nothing), once per forward; inv_freq is arange(0, d_rot, 2) long.
    Qwen2-VL's and Qwen3-VL's M-RoPE (switch `mrope`, families/wrappers.py): 3 position rows (time, height,
    width) per sequence. (transformers 4 ran it as a bmm, inv_freq @ positions.)"""
    half, n = (d_rot + 1) // 2, B.seq
    rows = 3 * B.b if flag(B.s, "mrope") else B.b
    B.add(f"{name} (positions x inv_freq)", "activation", "embedding", 1, (rows, n, 1), (rows, n, half),
          ew=rows * half * n)


def rope_apply(B: Builder, module: str, heads: int, d_rot: int, calls: int) -> None:
    tok = (B.b, B.seq)
    B.add(module, "activation", "encoder", calls, tok + (heads * d_rot,), tok + (heads * d_rot,),
          ew=B.b * B.seq * heads * d_rot * ew_cost("rotary"))


def plain_norm(B: Builder, module: str, tokens: tuple[int, ...], dim: int, calls: int = 1, residual: bool = True) -> None:
    """A LayerNorm without weight or bias (OLMo's elementwise_affine=False)."""
    n = tokens[0] * tokens[1] * dim
    B.add(module + (" (+residual)" if residual else ""), "norm", "encoder", calls, tokens + (dim,), tokens + (dim,),
          ew=n * (ew_cost("layernorm") + (1 if residual else 0)), extra_in=n if residual else 0)


def llama_like(B: Builder) -> None:
    """The LLaMA stack (llama.py's decoder) with the switches above."""
    s, b, n = B.s, B.b, B.seq
    h, L, a, g, d, f = s.hidden, s.layers, s.heads, s.kv_heads, s.head_dim, s.intermediate
    tok = (b, n)
    plain, post, qkn = flag(s, "plain_norm"), flag(s, "post_norms"), flag(s, "qk_norm")

    def norm(module: str, residual: bool = True, calls: int = L) -> None:
        if plain:
            plain_norm(B, module, tok, h, calls, residual)
        else:
            B.norm(module, "encoder", tok, h, calls, residual=residual)

    B.embedding("embed_tokens", "embedding", s.vocab, h, n)
    rotary(B, rotary_dim(s))
    lay = f"layers[{L}]"
    if not post:
        norm(f"{lay}.input_layernorm")
    if flag(s, "fused_qkv"):
        B.linear(f"{lay}.self_attn.qkv_proj", "encoder", tok, h, (a + 2 * g) * d, s.qkv_bias, L)
    else:
        B.linear(f"{lay}.self_attn.q_proj", "encoder", tok, h, a * d, s.qkv_bias, L)
        B.linear(f"{lay}.self_attn.k_proj", "encoder", tok, h, g * d, s.qkv_bias, L)
        B.linear(f"{lay}.self_attn.v_proj", "encoder", tok, h, g * d, s.qkv_bias, L)
    if qkn == 1:    # Qwen3: RMSNorm over each head's d
        B.norm(f"{lay}.self_attn.q_norm", "encoder", tok + (a,), d, L, residual=False)
        B.norm(f"{lay}.self_attn.k_norm", "encoder", tok + (g,), d, L, residual=False)
    elif qkn == 2:  # OLMo2: over the whole projection
        B.norm(f"{lay}.self_attn.q_norm", "encoder", tok, a * d, L, residual=False)
        B.norm(f"{lay}.self_attn.k_norm", "encoder", tok, g * d, L, residual=False)
    rope_apply(B, f"{lay}.self_attn rotary", a + g, rotary_dim(s), L)
    # GQA: the g K/V heads are repeated to a heads before the bmm, so the bmm's are a-headed; sliding and
    # full layers apart (`sliding` below): only their unmasked pairs differ.
    B.causal_self_attention("layers[{layers}].self_attn", "encoder", a, d)
    B.linear(f"{lay}.self_attn.o_proj", "encoder", tok, a * d, h, s.o_bias, L)
    norm(f"{lay}.post_attention_layernorm")
    if flag(s, "fused_mlp"):
        B.linear(f"{lay}.mlp.gate_up_proj", "encoder", tok, h, 2 * f, s.mlp_bias, L)
    else:
        B.linear(f"{lay}.mlp.gate_proj", "encoder", tok, h, f, s.mlp_bias, L)
        B.linear(f"{lay}.mlp.up_proj", "encoder", tok, h, f, s.mlp_bias, L)
    B.activation(f"{lay}.mlp act*up", "encoder", tok, f, s.activation, L, gated=True)
    B.linear(f"{lay}.mlp.down_proj", "encoder", tok, f, h, s.mlp_bias, L)
    if post:
        norm(f"{lay}.post_feedforward_layernorm")
    norm("norm", residual=False, calls=1)
    lm_head(B, "lm_head", "embed_tokens")


def lm_head(B: Builder, name: str, tied_to: str, bias: bool = False) -> None:
    s = B.s
    if s.head == "lm":
        B.linear(name + (f" (tied to {tied_to})" if s.tied_embeddings else ""), "cls", (B.b, B.seq), s.hidden, s.vocab,
                 bias, tied=s.tied_embeddings)


def llama_like_tensors(s: ArchSpec) -> Shapes:
    h, d, a, g, f = s.hidden, s.head_dim, s.heads, s.kv_heads, s.intermediate
    p = "" if s.head == "base" else "model."
    out: Shapes = {p + "embed_tokens.weight": (s.vocab, h)}
    plain, qkn = flag(s, "plain_norm"), flag(s, "qk_norm")
    for i in range(s.layers):
        q = f"{p}layers.{i}."
        if flag(s, "fused_qkv"):
            add_linear(out, q + "self_attn.qkv_proj", (a + 2 * g) * d, h, s.qkv_bias)
        else:
            add_linear(out, q + "self_attn.q_proj", a * d, h, s.qkv_bias)
            add_linear(out, q + "self_attn.k_proj", g * d, h, s.qkv_bias)
            add_linear(out, q + "self_attn.v_proj", g * d, h, s.qkv_bias)
        add_linear(out, q + "self_attn.o_proj", h, a * d, s.o_bias)
        if qkn:
            add_norm(out, q + "self_attn.q_norm", d if qkn == 1 else a * d, bias=False)
            add_norm(out, q + "self_attn.k_norm", d if qkn == 1 else g * d, bias=False)
        if flag(s, "fused_mlp"):
            add_linear(out, q + "mlp.gate_up_proj", 2 * f, h, s.mlp_bias)
        else:
            add_linear(out, q + "mlp.gate_proj", f, h, s.mlp_bias)
            add_linear(out, q + "mlp.up_proj", f, h, s.mlp_bias)
        add_linear(out, q + "mlp.down_proj", h, f, s.mlp_bias)
        if not plain:
            norms = ("post_attention_layernorm", "post_feedforward_layernorm") if flag(s, "post_norms") else \
                ("input_layernorm", "post_attention_layernorm")
            for nm in norms:
                add_norm(out, q + nm, h, bias=False)
    if not plain:
        add_norm(out, p + "norm", h, bias=False)
    if s.head == "lm":
        add_linear(out, "lm_head", s.vocab, h, bias=False)
    return out



# Which layers keep a window in transformers' cache (cache_utils.py DynamicCache(config=...), 4.57): a
# DynamicSlidingWindowLayer for each "sliding_attention" / "chunked_attention" entry of config.layer_types,
# or for every layer when the config has no layer_types and a sliding_window. The config classes decide
# what those attributes hold:
#  - MistralConfig defaults sliding_window to 4096 (Mistral-7B-v0.1; later Mistrals save null);
#  - Qwen2/Qwen3/Qwen2-MoE/Qwen3-MoE set sliding_window to None unless use_sliding_window (default False);
#  - Qwen2Config/Qwen3Config derive layer_types when absent: full attention for the first max_window_layers
#    (default 28) layers, sliding after; Qwen2-MoE/Qwen3-MoE derive none, so all of their layers slide;
#  - Phi3, Mixtral and the rest take sliding_window as saved (default None): every layer slides.
_WINDOW_DEFAULT = {"mistral": 4096}
_USE_FLAG = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")
_MAX_WINDOW_LAYERS = ("qwen2", "qwen3")
_SLIDING_TYPES = ("sliding_attention", "chunked_attention")
_LAYER_TYPES = ("full_attention", "linear_attention") + _SLIDING_TYPES   # configuration_utils.ALLOWED_LAYER_TYPES


def sliding(c: Cfg, layers: int) -> dict[str, Any]:
    """ArchSpec's sliding_window and sliding_layers (() with a window: every layer slides) as the model's
    cache allocates them (the rules above)."""
    window = c.cfg.get("sliding_window", _WINDOW_DEFAULT.get(c.model_type))
    if not c.cfg.get("use_sliding_window", c.model_type not in _USE_FLAG):
        window = None
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        return dict(sliding_window=None, sliding_layers=())
    types = c.cfg.get("layer_types")
    if types is None and c.model_type in _MAX_WINDOW_LAYERS:
        first = c.int("max_window_layers", default=28)
        types = ["full_attention" if i < first else "sliding_attention" for i in range(layers)]
    if types is None:
        return dict(sliding_window=window, sliding_layers=())
    if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) and t in _LAYER_TYPES for t in types):
        raise UsageError(f"{c.path}: config layer_types is not a list of {layers} layer types (one per layer, each one of "
                         f"{', '.join(_LAYER_TYPES)})")
    slide = tuple(i for i, t in enumerate(types) if t in _SLIDING_TYPES)
    if not slide:
        return dict(sliding_window=None, sliding_layers=())
    return dict(sliding_window=window, sliding_layers=() if len(slide) == layers else slide)


def llama_like_spec(c: Cfg, extra: tuple[tuple[str, int], ...] = (), tied_default: bool = False,
                    mlp_bias_key: str | None = "mlp_bias") -> ArchSpec:
    """ArchSpec from the config fields LLaMA-shaped models share (attention_bias on q, k, v and o)."""
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    g = c.int("num_key_value_heads", default=a)
    d = c.int("head_dim", default=h // a)
    bias = bool(c.get("attention_bias", default=False))
    L = c.int("num_hidden_layers")
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=g, head_dim=d,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    context=c.int("max_position_embeddings", default=0),
                    activation=str(c.get("hidden_act", default="silu")), gated_mlp=True, norm="rmsnorm",
                    qkv_bias=bias, o_bias=bias,
                    mlp_bias=bool(c.get(mlp_bias_key, default=False)) if mlp_bias_key else False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=tied_default)),
                    extra=extra, **sliding(c, L), **c.common)


def partial_rotary(c: Cfg, d: int, *keys: str) -> int:
    """Rotary dims per head: int(head_dim x factor), as transformers' rope init and attention compute it; the
    factor under `keys` (GPT-NeoX's rotary_pct, which transformers 5 saves as partial_rotary_factor)."""
    keys = (*keys, "partial_rotary_factor")
    factor = c.get(*keys, default=1.0)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise UsageError(f"{c.path}: config {keys[0]} = {factor!r} is not in (0, 1]")
    return int(d * factor)
