"""Mllama's text model alone (transformers modeling_mllama.py MllamaTextModel, MllamaForCausalLM; Llama 3.2 Vision's
decoder): LLaMA's layers, but those cross_attention_layers names (by default 3, 8, ..., 38) are cross-attention layers
(cross_attn q/k/v/o with per-head q/k RMSNorms, tanh gates, a gated MLP) that a forward without cross-attention states
skips: as *ForCausalLM runs, they hold parameters, run nothing and cache nothing (ArchSpec.cross_layers). The embedding
holds vocab_size + 8 rows (DecoderLayout.embed_extra), the LM head vocab_size; nothing is tied (no
_tied_weights_keys, whatever tie_word_embeddings says). With images (`--images`: families/images/) the cross-attention
layers run over the image states and cache their keys and values (ArchSpec.cross_states). llama.cpp has no architecture
for it."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, KVLines, Sample, Tensors, decoder_kv_cache
from .framework.layout import DecoderLayout

MLLAMA = DecoderLayout(embed_extra=8, qkv_bias=False, o_bias=False, mlp_bias=False)
_CROSS = [3, 8, 13, 18, 23, 28, 33, 38]   # MllamaTextConfig.__post_init__'s default
_CROSS_NAME = re.compile(r"(?:^|\.)layers\.(\d+)\.cross_attn\.")


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(MLLAMA, c)
    cross = c.get("cross_attention_layers", default=_CROSS)
    if not isinstance(cross, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in cross):
        raise UsageError(f"{c.path}: config cross_attention_layers is not a list of layer indices")
    return replace(spec, tied_embeddings=False, cross_layers=tuple(sorted({i for i in cross if 0 <= i < spec.layers})))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """LLaMA's shapes, the vocabulary from the embedding (8 rows more), the cross-attention layers from their cross_attn
    names and head_dim exact from their per-head q_norm (assumed without one)."""
    spec = layout.spec_from_tensors(MLLAMA, T, dict(common, model_type="mllama_text_model"))
    cross = tuple(sorted({int(m.group(1)) for n in T if (m := _CROSS_NAME.search(n))}))
    norm = infer.find(T, r"(^|\.)cross_attn\.q_norm\.weight$")
    if norm is not None and len(norm.shape) == 1 and 0 < norm.shape[0] and (spec.heads * spec.head_dim) % norm.shape[0] == 0:
        d, notes = norm.shape[0], tuple(a for a in spec.assumptions if "head_dim" not in a)
        spec = replace(spec, head_dim=d, heads=spec.heads * spec.head_dim // d, kv_heads=spec.kv_heads * spec.head_dim // d,
                       assumptions=notes)
    return replace(spec, vocab=spec.vocab - MLLAMA.embed_extra, tied_embeddings=False, cross_layers=cross)


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """LLaMA's cache of the self-attention layers; the cross-attention layers cache nothing when skipped (no image),
    else the keys and values of the image states they read (ArchSpec.cross_states), whatever s."""
    lines = decoder_kv_cache(replace(s, layers=s.layers - len(s.cross_layers)), b, n, nd, ab)
    if not s.cross_states:
        return lines
    C, S = len(s.cross_layers), s.cross_states
    cross = b * C * 2 * s.kv_heads * s.head_dim * ab * S
    return [(f"{label}, {S} image states", held + cross,
             f"{rule}; + {C} cross-attention layers x 2 x g x d x {S} image states x {ab} B x b (any s)")
            for label, held, rule in lines]


_SIZES = dict(layout.TINY, num_hidden_layers=4, cross_attention_layers=[1, 3], pad_token_id=0, bos_token_id=1,
              eos_token_id=2)

FAMILY = Family(
    name="mllama",
    before=("llama",),   # tried before it: its self-attention layers are LLaMA's
    **{**layout.family_fields({"mllama_text_model": MLLAMA}, "attn_q"),
       "signature": r"(^|[./])layers[./]\d+[./]cross_attn_attn_gate$", "from_config": from_config,
       "from_tensors": from_tensors, "kv_cache": kv_cache, "tie_rules": (), "tied_by_default": False,
       "gguf_tensor_names": ()},   # llama.cpp has no architecture for it
    gguf_architectures=(),
    samples=(
        Sample("MllamaTextConfig", _SIZES, ("MllamaTextModel", "MllamaForCausalLM")),
        Sample("MllamaTextConfig", dict(_SIZES, cross_attention_layers=[0, 9], tie_word_embeddings=True),
               ("MllamaForCausalLM",)),
    ),
)
