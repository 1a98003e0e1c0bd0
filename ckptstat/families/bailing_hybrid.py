"""Ling 3's BailingHybrid (transformers modeling_bailing_hybrid.py, BailingHybridModel / BailingHybridForCausalLM): DeepSeek-V3's
decoder (deepseek.py: multi-head latent attention, a router over gated experts of moe_intermediate_size with
n_shared_experts summed shared experts, the dense layers by mlp_layer_types or first_k_dense_replace) whose latent
attention gates each head's output by sigmoid(g_proj(x)) (DecoderLayout.attn_gate "head"), on the layer_types
"full_attention" layers (by default the last of every layer_group_size); the others run Kimi Delta Attention with
full-rank gates (mixers_kda.py, DecoderLayout.linear "kda_full": f_proj, g_proj) of num_attention_heads heads of
head_dim (as the config class copies them: linear_num_heads, linear_head_dim) and a short_conv_kernel_size conv.
The LM head never ties (_tied_weights_keys empty).

Saved as its checkpoints are (transformers' conversion_mapping for bailing_hybrid): the embeddings word_embeddings,
each layer's mixer `attention` with o_proj as `dense`, the forget gate's f_proj, dt_bias and A_log at the mixer, the
conv1d split into q_conv1d, k_conv1d, v_conv1d, the routed experts one per expert. The cache: the latent and rope key
per token of each attention layer, a conv state and a float32 recurrent state per KDA layer
(mixers_kda.latent_hybrid_cache). llama.cpp has no architecture for it (its bailingmoe2 is Ling 2, no KDA)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import deepseek
from .framework import infer, layout, mixers_kda
from .framework.archspec import ArchSpec
from .framework.base import FROM_CLASS, Cfg, Family, Sample, Tensors
from .framework.decoders import count
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import LinearKeys

_KEYS = LinearKeys(key_heads=("linear_num_heads", "num_attention_heads"), key_dim=("linear_head_dim", "head_dim"),
                   value_heads=("linear_num_heads", "num_attention_heads"), value_dim=("linear_head_dim", "head_dim"),
                   conv_kernel=("linear_conv_kernel_dim", "short_conv_kernel_size"))
BAILING_HYBRID = DecoderLayout(latent=True, linear="kda_full", linear_keys=_KEYS, attn_gate="head", mlp="routed",
                               shared="summed", dense_layers=True, ties=False,
                               paths=Paths(embed="word_embeddings", base_embed="embed_tokens", attn="attention",
                                           linear_attn="attention", o="dense", attn_gate="g_proj", gated_norm="o_norm",
                                           kda_f=("f_proj",), shared="shared_experts"))
# as transformers holds it (a torch.save of the model): LLaMA's names, the conv1d fused, the forget gate's own module
_HELD = replace(BAILING_HYBRID, paths=replace(BAILING_HYBRID.paths, embed="embed_tokens", attn="self_attn",
                                                linear_attn="self_attn", o="o_proj"))
_BASE = replace(BAILING_HYBRID, paths=replace(BAILING_HYBRID.paths, embed="embed_tokens"))   # a base model's file


def from_config(c: Cfg) -> ArchSpec:
    L = c.int("num_hidden_layers")
    if c.get("layer_types", default=None) is None:   # BailingHybridConfig.__post_init__'s rule
        group = c.int("layer_group_size", default=FROM_CLASS)
        c = Cfg(dict(c.cfg, layer_types=["full_attention" if (i + 1) % group == 0 else "linear_attention"
                                         for i in range(L)]), c.path, c.model_type, c.head, c.common)
    return deepseek.latent_spec(BAILING_HYBRID, c, count(c, "num_local_experts", default=FROM_CLASS),
                                c.int("first_k_dense_replace", default=FROM_CLASS))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """deepseek.hybrid_from_tensors, as saved, as a base model saves it or as held."""
    held, base = infer.has(T, r"(^|\.)self_attn\."), infer.has(T, r"(^|\.)embed_tokens\.")
    lay = _HELD if held else _BASE if base else BAILING_HYBRID
    return deepseek.hybrid_from_tensors(lay, T, common, "bailing_hybrid")


_SIZES = dict(vocab_size=99, pad_token_id=0, eos_token_id=1, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=4, head_dim=8, layer_group_size=2, first_k_dense_replace=1, num_local_experts=4,
              num_experts_per_tok=2, moe_intermediate_size=16, intermediate_size=48, kv_lora_rank=8, qk_nope_head_dim=8,
              qk_rope_head_dim=4, v_head_dim=8, n_group=1, topk_group=1, num_mtp_layers=0)

FAMILY = Family(
    name="bailing_hybrid",
    # tried before them: its latent attention's names are DeepSeek's, its q_proj LLaMA's
    before=("deepseek", "llama"),
    **{**layout.family_fields({"bailing_hybrid": BAILING_HYBRID}, "attn_kv_a_mqa"), "from_config": from_config,
       "from_tensors": from_tensors, "kv_cache": mixers_kda.latent_hybrid_cache, "gguf_tensor_names": (),
       "cache_heads": lambda s: 1,   # the latent: one head, whole on every tensor-parallel device (as Kimi-Linear's)
       # the forget gate's projection as saved (attention.f_proj) and as held (self_attn.forget_gate.f_proj)
       "signature": r"(^|[./])layers[./]\d+[./](attention|self_attn)[./](forget_gate[./])?f_proj[./]"},
    gguf_architectures=(),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("BailingHybridConfig", _SIZES, ("BailingHybridModel", "BailingHybridForCausalLM"), device="cpu"),
        Sample("BailingHybridConfig", dict(_SIZES, num_hidden_layers=3, layer_types=["full_attention", "linear_attention",
                                                                                     "linear_attention"],
                                           q_lora_rank=8, short_conv_kernel_size=3), ("BailingHybridForCausalLM",),
               device="cpu"),
    ),
)
