"""MiniCPM3 (transformers modeling_minicpm3.py): DeepSeek-V2's multi-head latent attention (deepseek.py: q_a_proj,
q_a_layernorm, q_b_proj or one q_proj without a query LoRA; kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj; o_proj,
biased by attention_bias where DeepSeek's are) with the standard cos/sin rotary on the qk_rope_head_dim dims, in a
LLaMA layer with a gated MLP (biases by mlp_bias) on every layer, and the LM head tied by default. Its embedding
(scale_emb), residual (scale_depth / sqrt(layers)) and logit (logits_scaling) scales are element-wise, not counted.
The KV cache is DeepSeek's under transformers 5: the normalised latent and the rope key, one head per layer.
v_head_dim defaults to hidden_size / num_attention_heads."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import deepseek
from .framework import layout
from .framework.archspec import Latent
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout

# llama.cpp's minicpm3 architecture has no attn_q (it converts only a query LoRA)
MINICPM3 = DecoderLayout(latent=True, tied_default=True, gguf_renames=(("attn_q", None),), task_heads=("seqcls",))


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(MINICPM3, c)
    nope, rope = c.int("qk_nope_head_dim", default=FROM_CLASS), c.int("qk_rope_head_dim", default=FROM_CLASS)
    v = c.int("v_head_dim", default=spec.hidden // spec.heads)   # MiniCPM3Config's rule for a null one
    # q_lora_rank null: one q_proj, no query LoRA; absent: the config class's rank
    q_lora = 0 if "q_lora_rank" in c.cfg and c.cfg["q_lora_rank"] is None else c.int("q_lora_rank", default=FROM_CLASS)
    return replace(spec, kv_heads=spec.heads, head_dim=nope + rope, rope_dim=rope,
                   latent=Latent(q_lora, c.int("kv_lora_rank", default=FROM_CLASS), v))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """DeepSeek's reading of the MLA shapes (every size follows from them), with no router: a gated MLP everywhere."""
    return deepseek.from_tensors(T, dict(common, model_type="minicpm3"))


_SIZES = dict(layout.TINY, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8,
              qk_rope_head_dim=4, v_head_dim=6)

FAMILY = Family(
    name="minicpm3",
    before=("deepseek", "llama"),   # tried before them: DeepSeek's attention names, LLaMA's MLP names
    **{**layout.family_fields({"minicpm3": MINICPM3}, "attn_kv_a_mqa"), "from_config": from_config,
       "from_tensors": from_tensors, "kv_cache": deepseek.kv_cache},
    # DeepSeek's routers and experts, V3.2's and GLM-5's indexer, A.X-K1's MoE output norm (a file all of whose layers
    # are dense, as a tiny one can be, still holds them)
    signature_without=r"(^|[./])(mlp[./](gate|experts)|self_attn[./]indexer|post_mlp_layernorm)[./]",
    cache_heads=lambda s: 1,      # the latent: one head, whole on every tensor-parallel device
    samples=(
        Sample("MiniCPM3Config", _SIZES, ("MiniCPM3Model", "MiniCPM3ForCausalLM")),
        # no query LoRA (q_proj), v_head_dim from the class's rule, biases, untied
        Sample("MiniCPM3Config", dict(_SIZES, q_lora_rank=None, v_head_dim=None, attention_bias=True, mlp_bias=True,
                                      tie_word_embeddings=False), ("MiniCPM3ForCausalLM",)),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("MiniCPM3Config", dict(_SIZES, num_labels=3, pad_token_id=0), ("MiniCPM3ForSequenceClassification",),
               device="cpu"),
    ),
)
