"""GPT-Neo (transformers modeling_gpt_neo.py, configuration_gpt_neo.py): GPT-2's layer (wte, learned positions
wpe, ln_1 / ln_2, mlp.c_fc / gelu_new / c_proj with biases, ln_f) with nn.Linear weights and attention under
`attn.attention`: q_proj, k_proj, v_proj without bias, out_proj with one, and no 1/sqrt(d) scaling. Layers are
"global" (full causal) or "local": a causal mask that also hides keys `window_size` (default 256) or more
positions back, so query i sees min(i + 1, w) keys (the `bias` buffer: tril XOR tril(-w)); eager attention
computes every score and masks, as FlopCounterMode counts. Which layer is which: config `attention_layers`, or
`attention_types` ([[["global", "local"], 12]]: the pattern repeated) expanded. The LM head is tied to wte by
default (GPTNeoForCausalLM._tied_weights_keys).

The cache: transformers' DynamicCache keeps every token in every layer (GPTNeoConfig has no sliding_window);
a cache that honours the local window keeps w tokens there (the second kv line)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import UsageError
from . import gpt2
from .framework import base, decoder_heads, infer
from .framework.base import ArchSpec, Cfg, Family, KVLines, Sample, Shapes, Tensors, TieRule, add_linear, decoder_kv_cache
from .framework.ops import Builder

_DEFAULT_TYPES = [[["global", "local"], 12]]   # GPTNeoConfig's attention_types default
_WINDOW = 256


def _layer_kinds(c: Cfg, layers: int) -> list[str]:
    """Each layer's attention kind, as GPTNeoConfig resolves it (a saved attention_layers wins)."""
    kinds = c.cfg.get("attention_layers")
    if kinds is None:
        types = c.cfg.get("attention_types", _DEFAULT_TYPES)
        try:
            kinds = [k for pattern, repeat in types for _ in range(min(int(repeat), layers + 1)) for k in pattern]
        except (TypeError, ValueError, OverflowError):
            kinds = None
    if not isinstance(kinds, list) or len(kinds) != layers or not all(k in ("global", "local") for k in kinds):
        raise UsageError(f"{c.path}: config attention_layers / attention_types do not give {layers} layers of "
                         "'global' or 'local' attention")
    return kinds


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size"), c.int("num_heads", "num_attention_heads")
    L = c.int("num_layers", "num_hidden_layers")
    local = tuple(i for i, k in enumerate(_layer_kinds(c, L)) if k == "local")
    window = c.int("window_size", default=_WINDOW)
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("intermediate_size", default=4 * h), vocab=c.int("vocab_size"),
                    positions=c.int("max_position_embeddings"), activation=str(c.get("activation_function", default="gelu_new")),
                    qkv_bias=False, tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    sliding_window=window if local else None, sliding_layers=() if len(local) == L else local, **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"wte\.weight$", "wte")
    a, note = infer.heads_for(h, 128 if h >= 2048 else 64)   # GPT-Neo 125M: 64; 1.3B, 2.7B: 128
    L = infer.count_layers(T, r"(?:^|\.)h\.(\d+)\.")
    local = tuple(range(1, L, 2))
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=infer.shape(T, r"mlp\.c_fc\.weight$", "mlp.c_fc")[0], vocab=V,
                    positions=infer.shape(T, r"wpe\.weight$", "wpe")[0], activation="gelu_new", qkv_bias=False,
                    tied_embeddings=infer.find(T, r"(^|\.)lm_head\.weight$") is None, num_labels=decoder_heads.labels(T),
                    sliding_window=_WINDOW if local else None, sliding_layers=() if len(local) == L else local,
                    assumptions=(note, f"no config: global and local layers alternating, window {_WINDOW}"), **common)


def _attention(B: Builder, lay: str) -> None:
    s, tok, h = B.s, (B.b, B.seq), B.s.hidden
    for proj in ("q_proj", "k_proj", "v_proj"):
        B.linear(f"{lay}.attn.attention.{proj}", "encoder", tok, h, h, False, s.layers)
    # no scaling: the mask (torch.where) and the padding mask add are the per-score ops besides softmax
    B.causal_self_attention("h[{layers}].attn.attention", "encoder", s.heads, s.head_dim)
    B.linear(f"{lay}.attn.attention.out_proj", "encoder", tok, h, h, True, s.layers)


def build(B: Builder) -> None:
    gpt2.linear_layout_build(B, _attention)


def _attention_tensors(h: int, out: Shapes, q: str) -> None:
    for proj in ("k_proj", "v_proj", "q_proj"):
        add_linear(out, q + "attn.attention." + proj, h, h, bias=False)
    add_linear(out, q + "attn.attention.out_proj", h, h)


def expected_tensors(s: ArchSpec) -> Shapes:
    return gpt2.linear_layout_tensors(s, lambda out, q: _attention_tensors(s.hidden, out, q))


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """transformers' cache (every token, every layer), then what a cache keeping only the local layers'
    window would hold (decoder_kv_cache's lines for a sliding window)."""
    lines = decoder_kv_cache(replace(s, sliding_window=None, sliding_layers=()), b, n, nd, ab)
    lines = [(item, v, rule + " (transformers' DynamicCache keeps every token in local layers too)") for item, v, rule in lines]
    if s.sliding_window and n > s.sliding_window - 1:
        w, local = s.sliding_window, len(s.sliding_layers) or s.layers
        per = 2 * s.kv_heads * s.head_dim * ab
        kept = per * b * ((s.layers - local) * n + local * min(n, w))
        lines.append((f"windowed cache, window {w}", kept,
                      f"a cache keeping the last window_size = {w} tokens in the {local} local layers: "
                      f"2 x g x d x {ab} B = {per:,} B per token and layer, x b"))
    return lines


_SIZES = dict(hidden_size=32, num_layers=2, num_heads=4, vocab_size=99, max_position_embeddings=64,
              attention_types=[[["global", "local"], 1]], window_size=4)

FAMILY = Family(
    name="gpt_neo",
    model_types=("gpt_neo",),
    signature=r"(^|[./])h[./]\d+[./]attn[./]attention[./]q_proj[./]",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm", "seqcls", "tokcls", "qa"),
    head_rules=base.decoder_head_rules(r"(^|\.)lm_head\.weight$", r"^transformer\."),
    default_head="lm",
    tie_rules=(TieRule("lm_head.weight", "transformer.wte.weight", "config", heads=("lm",)),),
    kv_cache=kv_cache,
    gguf_architectures=(),
    samples=(
        # window 4 < the test's sequences (8, 16): the local layer's mask is a real window
        Sample("GPTNeoConfig", _SIZES, ("GPTNeoModel", "GPTNeoForCausalLM", "GPTNeoForQuestionAnswering")),
        Sample("GPTNeoConfig", dict(_SIZES, num_layers=3, attention_types=[[["local"], 2], [["global"], 1]],
                                    intermediate_size=48, tie_word_embeddings=False, num_labels=3, pad_token_id=0),
               ("GPTNeoForCausalLM", "GPTNeoForSequenceClassification", "GPTNeoForTokenClassification")),
    ),
)
