"""LFM3 (transformers modeling_lfm3.py, Lfm3Model / Lfm3ForCausalLM): LFM2's hybrid (lfm2.py, mixers_conv.py: the gated
short convolution on the layer_types "conv" layers) whose other layers are full or sliding attention by layer_types
(Qwen3's attention: per-head q/k norms, o_proj; rotary on each, the full layers' over partial_rotary_factor of each
head) with a sigmoid output gate per head (self_attn.g_proj, saved as gate_proj: transformers' conversion_mapping for
lfm3), sandwich norms (post_operator_norm after the mixer, post_ffn_norm after the feed_forward, use_sandwich_norm), and
a gated feed_forward (w1, w3, w2) of intermediate_size on every layer. The cache: keys and values of the attention
layers (a sliding layer's last sliding_window - 1 tokens), a conv state [b, h, conv_L_cache] per conv layer
(mixers_conv.kv_cache). use_sandwich_norm or use_attention_gate false: the meta path answers. llama.cpp has no lfm3
architecture (no GGUF names)."""
from __future__ import annotations

from dataclasses import replace

from .framework import layout, mixers_conv
from .framework.archspec import ArchSpec
from .framework.base import Cfg, Family, Sample
from .lfm2 import _PATHS, LFM2

LFM3 = replace(LFM2, placement="sandwich", attn_gate="head", local_rope=True, partial_rotary=1.0,
               requires=(("use_sandwich_norm", True), ("use_attention_gate", True)),
               paths=replace(_PATHS, o="o_proj", q_norm="q_norm", k_norm="k_norm", attn_out="post_operator_norm",
                             mlp_out="post_ffn_norm"))


def _layer_types(L: int) -> list[str]:
    """Lfm3Config.__post_init__'s layer_types when the config gives none: full every 4th from 2, sliding every 4th from 4."""
    return ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0 else "conv" for i in range(L)]


def from_config(c: Cfg) -> ArchSpec:
    if c.get("layer_types", default=None) is None:
        c = Cfg(dict(c.cfg, layer_types=_layer_types(c.int("num_hidden_layers"))), c.path, c.model_type, c.head, c.common)
    return layout.spec_from_config(LFM3, c)


_SIZES = dict(layout.TINY, num_hidden_layers=5, head_dim=8, sliding_window=4, pad_token_id=0, bos_token_id=1,
              eos_token_id=2)

FAMILY = Family(
    name="lfm3",
    before=("lfm2", "afmoe"),   # tried before them: LFM2's conv and AFMoE's self_attn.gate_proj signatures match its files
    **{**layout.family_fields({"lfm3": LFM3}, "post_attention_norm"), "from_config": from_config,
       "kv_cache": mixers_conv.kv_cache, "gguf_tensor_names": ()},
    gguf_architectures=(),
    samples=(
        Sample("Lfm3Config", _SIZES, ("Lfm3Model", "Lfm3ForCausalLM")),
        Sample("Lfm3Config", dict(_SIZES, num_hidden_layers=4, conv_bias=True, conv_L_cache=4, tie_word_embeddings=False,
                                  layer_types=["sliding_attention", "conv", "full_attention", "conv"]), ("Lfm3ForCausalLM",)),
    ),
)
