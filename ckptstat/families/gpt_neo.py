"""GPT-Neo (transformers modeling_gpt_neo.py, configuration_gpt_neo.py): GPT-2's layout (gpt2.py: wte, learned
positions wpe, ln_1 / ln_2, mlp.c_fc / gelu_new / c_proj with biases, intermediate_size wide (null: 4 x hidden), ln_f)
with nn.Linear weights, attention under `attn.attention` (q_proj, k_proj, v_proj without bias, out_proj with one, and
no 1/sqrt(d) scaling) and the task heads score, classifier and qa_outputs (DecoderLayout.task_heads). Layers are
"global" (full causal) or "local": a causal mask that also hides keys `window_size` (default 256) or more
positions back, so query i sees min(i + 1, w) keys (the `bias` buffer: tril XOR tril(-w)); eager attention
computes every score and masks, as FlopCounterMode counts (ArchSpec.sliding_layers: the layout's sliding layers).
Which layer is which: config `attention_layers`, or `attention_types` ([[["global", "local"], 12]]: the pattern
repeated) expanded. The LM head is tied to wte by default (GPTNeoForCausalLM._tied_weights_keys). llama.cpp has no
architecture for it.

The cache: transformers' DynamicCache keeps every token in every layer (GPTNeoConfig has no sliding_window);
a cache that honours the local window keeps w tokens there (the second kv line)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import UsageError
from . import gpt2
from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, KVLines, Sample, Tensors, decoder_kv_cache
from .framework.layout_base import FFNWidth

_DEFAULT_TYPES = [[["global", "local"], 12]]   # GPTNeoConfig's attention_types default
_WINDOW = 256

NEO = replace(gpt2.GPT2, conv1d=False, fused_qkv=False, qkv_bias=False, ffn_width=FFNWidth(else_times=4),
              task_heads=("seqcls", "tokcls", "qa"), paths=replace(gpt2.GPT2.paths, attn="attn.attention", o="out_proj"))
_LAYOUTS = layout.Layouts({"gpt_neo": NEO})


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
    s = _LAYOUTS.from_config(c)
    local = tuple(i for i, k in enumerate(_layer_kinds(c, s.layers)) if k == "local")
    return replace(s, sliding_window=c.int("window_size", default=_WINDOW) if local else None,
                   sliding_layers=() if len(local) == s.layers else local)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's widths; heads (GPT-Neo 125M: head_dim 64; 1.3B, 2.7B: 128) and the layers' kinds (global and local
    alternating, window 256: GPTNeoConfig's defaults) assumed: neither shows in a tensor."""
    s = _LAYOUTS.from_tensors(T, common)
    a, note = infer.heads_for(s.hidden, 128 if s.hidden >= 2048 else 64)
    local = tuple(range(1, s.layers, 2))
    return replace(s, heads=a, kv_heads=a, head_dim=s.hidden // a,
                   sliding_window=_WINDOW if local else None, sliding_layers=() if len(local) == s.layers else local,
                   assumptions=(note, f"no config: global and local layers alternating, window {_WINDOW}"))


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
    # llama.cpp has no architecture for it: no GGUF names either
    **{**layout.family_fields(_LAYOUTS.by_type, "attn_q"), "from_config": from_config, "from_tensors": from_tensors,
       "kv_cache": kv_cache, "gguf_tensor_names": ()},
    gguf_architectures=(),
    samples=(
        # window 4 < the test's sequences (8, 16): the local layer's mask is a real window
        Sample("GPTNeoConfig", _SIZES, ("GPTNeoModel", "GPTNeoForCausalLM", "GPTNeoForQuestionAnswering")),
        Sample("GPTNeoConfig", dict(_SIZES, num_layers=3, attention_types=[[["local"], 2], [["global"], 1]],
                                    intermediate_size=48, tie_word_embeddings=False, num_labels=3, pad_token_id=0),
               ("GPTNeoForCausalLM", "GPTNeoForSequenceClassification", "GPTNeoForTokenClassification")),
    ),
)
