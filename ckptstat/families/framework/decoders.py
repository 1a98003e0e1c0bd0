"""Pieces the rotary decoder families share (layout.py, gptneox.py,
gpt_oss.py): the rotary-table op transformers runs once per forward and its application to q and k,
the weightless LayerNorm, the LM head op, which layers keep a sliding window in the KV cache as transformers'
config classes and DynamicCache decide it (`sliding`, docs/kv_cache.md) and the partial rotary fraction.

The families not on a layout keep their own switches in a typed ArchSpec.variant (mamba.py's)."""
from __future__ import annotations

from typing import Any

from ...errors import NoAnalyticModel, UsageError
from . import infer
from .base import ArchSpec, Cfg, Tensors
from .ops import Builder, ew_cost

# Per-layer and per-expert tables (dense_layers, sliding_layers, the expected-tensor template) are built
# one entry each: refuse counts no model has (the largest have ~100 layers and 256 experts) before looping.
MAX_COUNT = 1 << 16


def count(c: Cfg, *keys: str, default: object = KeyError) -> int:
    """c.int, bounded by MAX_COUNT (a one-line UsageError naming the key)."""
    v = c.int(*keys, default=default)
    if v > MAX_COUNT:
        raise UsageError(f"{c.path}: config {keys[0]} = {v} is beyond any model (at most {MAX_COUNT:,} here)")
    return v


def rotary_dim(s: ArchSpec) -> int:
    return s.rope_dim or s.head_dim


def rotary(B: Builder, d_rot: int, name: str = "rotary_emb") -> None:
    """transformers 5's rotary embedding: positions (b x s x 1) times inv_freq (ceil(d_rot/2)), a broadcast
    multiply (no matmul: FlopCounterMode counts nothing), once per forward; inv_freq is arange(0, d_rot, 2) long.
    Qwen2-VL's and Qwen3-VL's M-RoPE (ArchSpec.mrope, families/wrappers.py): 3 position rows (time, height,
    width) per sequence. (transformers 4 ran it as a bmm, inv_freq @ positions.)"""
    half, n = (d_rot + 1) // 2, B.seq
    rows = 3 * B.b if B.s.mrope else B.b
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


def lm_head(B: Builder, name: str, tied_to: str, bias: bool = False, head: str = "lm", width: int = 0) -> None:
    """The LM head on the `head` (an encoder's *ForMaskedLM: "mlm"), over `width` (0: hidden)."""
    s = B.s
    if s.head == head:
        B.linear(name + (f" (tied to {tied_to})" if s.tied_embeddings else ""), "cls", (B.b, B.seq), width or s.hidden,
                 s.vocab, bias, tied=s.tied_embeddings)


# Which layers keep a window in transformers' cache (cache_utils.py DynamicCache(config=...), 4.57): a
# DynamicSlidingWindowLayer for each "sliding_attention" / "chunked_attention" entry of config.layer_types,
# or for every layer when the config has no layer_types and a sliding_window. The config classes decide
# what those attributes hold:
#  - MistralConfig defaults sliding_window to 4096 (Mistral-7B-v0.1; later Mistrals save null);
#  - Qwen2/Qwen3/Qwen2-MoE/Qwen3-MoE/SmolLM3 set sliding_window to None unless use_sliding_window (default False);
#  - Qwen2Config/Qwen3Config derive layer_types when absent: full attention for the first max_window_layers
#    (default 28) layers, sliding after; Qwen2-MoE/Qwen3-MoE derive none, so all of their layers slide;
#  - Cohere2, EXAONE 4, EXAONE-MoE, OLMo 3 and CWM derive layer_types when absent (config.json written before
#    transformers 4.53: Command R7B's, which gives the period as sliding_window_pattern): full attention on every
#    period-th layer, counted from 1 (CWM's from layer 0), sliding on the others;
#  - Phi3, Mixtral and the rest take sliding_window as saved (default None): every layer slides.
_WINDOW_DEFAULT = {"mistral": 4096}
# model_type -> (the key holding the period, or None: the class's fixed one; the default period; the offset)
_PERIODIC = {"cohere2": ("sliding_window_pattern", 4, 1), "exaone4": ("sliding_window_pattern", 4, 1),
             "exaone_moe": ("sliding_window_pattern", 4, 1), "olmo3": (None, 4, 1), "cwm": (None, 4, 0)}
_USE_FLAG = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "smollm3")
_MAX_WINDOW_LAYERS = ("qwen2", "qwen3")
_SLIDING_TYPES = ("sliding_attention", "chunked_attention")
# configuration_utils.ALLOWED_LAYER_TYPES (conv: LFM3's short-convolution layers beside its sliding ones)
_LAYER_TYPES = ("full_attention", "linear_attention", "conv") + _SLIDING_TYPES


def sliding(c: Cfg, layers: int) -> dict[str, Any]:
    """ArchSpec's sliding_window and sliding_layers (() with a window: every layer slides) as the model's
    cache allocates them (the rules above)."""
    window = c.cfg.get("sliding_window", _WINDOW_DEFAULT.get(c.model_type))
    if not c.cfg.get("use_sliding_window", c.model_type not in _USE_FLAG):
        window = None
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        return dict(sliding_window=None, sliding_layers=())
    if window > 1 << 31:
        raise UsageError(f"{c.path}: config sliding_window = {str(window)[:40]} is more than {1 << 31:,} tokens")
    types = c.cfg.get("layer_types")
    if types is None and c.model_type in _MAX_WINDOW_LAYERS:
        first = c.int("max_window_layers", default=28)
        types = ["full_attention" if i < first else "sliding_attention" for i in range(layers)]
    if types is None and c.model_type in _PERIODIC:
        key, period, offset = _PERIODIC[c.model_type]
        period = c.int(key, default=period) if key else period
        if period <= 0:
            raise UsageError(f"{c.path}: config {key} = {period} is not a positive period of layers")
        types = ["full_attention" if (i + offset) % period == 0 else "sliding_attention" for i in range(layers)]
    if types is None:
        return dict(sliding_window=window, sliding_layers=())
    if isinstance(types, list) and len(types) == layers and all(isinstance(t, str) for t in types) \
            and (other := sorted(set(types) - set(_LAYER_TYPES))):   # Dory's "mlp" blocks, DeepSeek-V3.2's indexed
        raise NoAnalyticModel(f"{c.path}: config layer_types names {', '.join(other)}: layers the op template does not "
                              "describe")
    if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) and t in _LAYER_TYPES for t in types):
        raise UsageError(f"{c.path}: config layer_types is not a list of {layers} layer types (one per layer, each one of "
                         f"{', '.join(_LAYER_TYPES)})")
    slide = tuple(i for i, t in enumerate(types) if t in _SLIDING_TYPES)
    if not slide:
        return dict(sliding_window=None, sliding_layers=())
    return dict(sliding_window=window, sliding_layers=() if len(slide) == layers else slide)


def rotary_factor(c: Cfg, *keys: str, default: float = 1.0) -> float:
    """The rotated fraction of each head: the config's value under `keys` (GPT-NeoX's rotary_pct, which
    transformers 5 saves as partial_rotary_factor), `default` when absent."""
    keys = (*keys, "partial_rotary_factor")
    factor = c.get(*keys, default=default)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise UsageError(f"{c.path}: config {keys[0]} = {factor!r} is not in (0, 1]")
    return float(factor)


def partial_rotary(c: Cfg, d: int, *keys: str) -> int:
    """Rotary dims per head: int(head_dim x factor), as transformers' rope init and attention compute it."""
    return int(d * rotary_factor(c, *keys))


def attention_dims(T: Tensors) -> tuple[int, int, int, int, int]:
    """(V, h, q width, k width, d) from embed_tokens and the q/k projections of a LLaMA-named decoder (gpt-oss's
    shape inference); d is assumed (128 or 64 when it divides both widths): only the rotary table's product depends on it."""
    V, h = infer.shape(T, r"embed_tokens\.weight$", "embed_tokens")
    q = infer.shape(T, r"self_attn\.q_proj\.weight$", "q_proj")[0]
    kv = infer.shape(T, r"self_attn\.k_proj\.weight$", "k_proj")[0]
    d = 128 if q % 128 == 0 and kv % 128 == 0 else 64 if q % 64 == 0 and kv % 64 == 0 else kv
    return V, h, q, kv, d


def nope_global(sliding: dict[str, Any], layers: int) -> tuple[int, ...]:
    """The full-attention layers of a model some of whose layers slide (none when none or all do)."""
    slide = sliding["sliding_layers"]
    return tuple(i for i in range(layers) if i not in slide) if slide else ()


def nope_zero_theta(c: Cfg, layers: int) -> tuple[int, ...]:
    """The layers GraniteSWAConfig's layer_rope_theta sets to 0 (no rotary); none when it is absent."""
    thetas = c.get("layer_rope_theta", default=None)
    if thetas is None:
        return ()
    if not isinstance(thetas, list) or len(thetas) != layers or any(not isinstance(t, (int, float)) for t in thetas):
        raise UsageError(f"{c.path}: config layer_rope_theta is not a list of {layers} numbers (0: no rotary)")
    return tuple(i for i, t in enumerate(thetas) if t == 0)


def nope_by_type(c: Cfg, layers: int) -> tuple[int, ...]:
    """Every layer unless config position_embedding_type is "rope" (GraniteMoeHybridConfig: None by default, no
    rotary module at all)."""
    return () if c.get("position_embedding_type", default=None) == "rope" else tuple(range(layers))


def nope_flags(c: Cfg, layers: int) -> tuple[int, ...]:
    """SmolLM3Config's no_rope_layers (1: rotary, 0: none, per layer; by default none on every
    no_rope_layer_interval-th layer) as the layers without rotary."""
    flags = c.get("no_rope_layers", default=None)
    if flags is None:
        every = c.int("no_rope_layer_interval", default=4)
        flags = [int(every == 0 or (i + 1) % every != 0) for i in range(layers)]
    if not isinstance(flags, list) or len(flags) != layers or any(type(v) is not int or v not in (0, 1) for v in flags):
        raise UsageError(f"{c.path}: config no_rope_layers is not a list of {layers} flags (1: rotary, 0: none)")
    return tuple(i for i, v in enumerate(flags) if not v)


def nope_types(c: Cfg, layers: int) -> tuple[int, ...]:
    """The layers whose config layer_types entry rope_parameters maps to None (Cohere Compass's rotary parameters per
    layer type, None for a type without rotary). The model reads rope_parameters[type] for each layer's type, so a
    config that names no such entry for some type is one it cannot run; one without layer_types is its config class's
    default (every layer full), which the op template does not read: the meta path answers it."""
    types, params = c.cfg.get("layer_types"), c.cfg.get("rope_parameters")
    if types is None:
        raise NoAnalyticModel(f"{c.path}: config has no layer_types: the {c.model_type} op template reads rotary per layer "
                              "type from them")
    if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) for t in types):
        raise UsageError(f"{c.path}: config layer_types is not a list of {layers} layer types")
    if not isinstance(params, dict) or any(t not in params or (params[t] is not None and not isinstance(params[t], dict))
                                           for t in types):
        raise UsageError(f"{c.path}: config rope_parameters does not give each layer type its rotary parameters (or "
                         "null: none)")
    return tuple(i for i, t in enumerate(types) if params[t] is None)
