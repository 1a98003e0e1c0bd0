"""Kimi Linear (transformers modeling_kimi_linear.py, KimiLinearModel / KimiLinearForCausalLM): DeepSeek-V3's decoder
(deepseek.py: a router over gated experts of moe_intermediate_size with n_shared_experts summed shared experts, the
dense layers by mlp_layer_types, else the first first_k_dense_replace, 1 unless given) whose layer_types
"full_attention" layers (by default every 4th from layer 4) run multi-head latent attention without rotary (NoPE: its
rope key is still cached) and whose others run Kimi Delta Attention with low-rank gates (mixers_kda.py,
DecoderLayout.linear "kda": f_a_proj / f_b_proj, g_a_proj / g_b_proj through the head width) of linear_num_heads heads
of linear_head_dim and a linear_conv_kernel_dim conv. A config's linear_attn_config (the released checkpoints': head_dim,
num_heads, short_conv_kernel_size, the 1-indexed kda_layers and full_attn_layers) is read as KimiLinearConfig reads it.

Saved as its checkpoints are (transformers' conversion_mapping for kimi_linear): every MLP under block_sparse_moe, the
routed experts one per expert as w1 (gate), w3 (up), w2 (down), the forget gate's projections, dt_bias and A_log at the
mixer, the conv1d split into q_conv1d, k_conv1d, v_conv1d. The LM head never ties (_tied_weights_keys empty). The
cache: the latent and rope key per token of each attention layer, a conv state and a float32 recurrent state per KDA
layer (mixers_kda.latent_hybrid_cache). llama.cpp's kimi-linear names: not described (no GGUF table)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import UsageError
from . import deepseek
from .framework import infer, layout, mixers_kda
from .framework.archspec import ArchSpec
from .framework.base import FROM_CLASS, Cfg, Family, Sample, Tensors
from .framework.decoders import count
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import LinearKeys

_KEYS = LinearKeys(key_heads=("linear_num_heads",), key_dim=("linear_head_dim",), value_heads=("linear_num_heads",),
                   value_dim=("linear_head_dim",), conv_kernel=("linear_conv_kernel_dim",))
KIMI_LINEAR = DecoderLayout(latent=True, nope="all", linear="kda", linear_keys=_KEYS, mlp="routed", shared="summed",
                            dense_layers=True, ties=False,
                            paths=Paths(linear_attn="self_attn", mlp="block_sparse_moe", gated_norm="o_norm",
                                        shared="shared_experts", expert_names=("w1", "w3", "w2")))
# as transformers holds it (a torch.save of the model): the MLPs under mlp, the experts fused
_HELD = replace(KIMI_LINEAR, paths=replace(KIMI_LINEAR.paths, mlp="mlp"))


def _flattened(c: Cfg, L: int) -> Cfg:
    """The config with KimiLinearConfig.__post_init__'s reading of linear_attn_config (its sizes under their own
    names, layer_types from its 1-indexed layer lists) and, where none is given, its default layer_types."""
    extra: dict[str, Any] = {}
    nested = c.cfg.get("linear_attn_config") or {}
    if not isinstance(nested, dict):
        raise UsageError(f"{c.path}: config linear_attn_config is not an object")
    for key, name in (("head_dim", "linear_head_dim"), ("num_heads", "linear_num_heads"),
                      ("short_conv_kernel_size", "linear_conv_kernel_dim")):
        if key in nested:
            extra[name] = nested[key]
    if c.get("layer_types", default=None) is None:
        full, kda = nested.get("full_attn_layers"), nested.get("kda_layers")
        if isinstance(full, list) and isinstance(kda, list):
            types: list[Any] = [None] * L
            for kind, ids in (("full_attention", full), ("linear_attention", kda)):
                for i in ids:
                    if type(i) is not int or not 1 <= i <= L:
                        raise UsageError(f"{c.path}: config linear_attn_config lists layer {i!r} of {L} (1-indexed)")
                    types[i - 1] = kind
            extra["layer_types"] = types
        else:
            extra["layer_types"] = ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(L)]
    return Cfg(dict(c.cfg, **extra), c.path, c.model_type, c.head, c.common) if extra else c


def from_config(c: Cfg) -> ArchSpec:
    c = _flattened(c, c.int("num_hidden_layers"))
    return deepseek.latent_spec(KIMI_LINEAR, c, count(c, "num_local_experts", default=FROM_CLASS),
                                c.int("first_k_dense_replace", default=1))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """deepseek.hybrid_from_tensors, as saved or as held."""
    lay = KIMI_LINEAR if infer.has(T, r"(^|\.)block_sparse_moe\.") else _HELD
    return deepseek.hybrid_from_tensors(lay, T, common, "kimi_linear")


_SIZES = dict(vocab_size=99, pad_token_id=0, bos_token_id=1, eos_token_id=2, hidden_size=32, num_hidden_layers=5,
              num_attention_heads=4, num_key_value_heads=4, linear_num_heads=4, linear_head_dim=8, num_local_experts=4,
              num_experts_per_tok=2, moe_intermediate_size=16, intermediate_size=48, kv_lora_rank=8, qk_nope_head_dim=8,
              qk_rope_head_dim=4, v_head_dim=8, n_group=1, topk_group=1)

FAMILY = Family(
    name="kimi_linear",
    # tried before them: its latent attention's names are DeepSeek's, its q_proj LLaMA's
    before=("deepseek", "llama"),
    **{**layout.family_fields({"kimi_linear": KIMI_LINEAR}, "attn_kv_a_mqa"), "from_config": from_config,
       "from_tensors": from_tensors, "kv_cache": mixers_kda.latent_hybrid_cache, "gguf_tensor_names": (),
       # the MLA latent: one head, whole on every tensor-parallel device (vLLM's MLA cache, as deepseek's)
       "cache_heads": lambda s: 1,
       # the forget gate's low-rank projection as saved (self_attn.f_a_proj) and as held (self_attn.forget_gate.f_a_proj)
       "signature": r"(^|[./])layers[./]\d+[./]self_attn[./](forget_gate[./])?f_a_proj[./]"},
    gguf_architectures=(),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("KimiLinearConfig", _SIZES, ("KimiLinearModel", "KimiLinearForCausalLM"), device="cpu"),
        Sample("KimiLinearConfig", dict(_SIZES, num_hidden_layers=3, linear_conv_kernel_dim=3, q_lora_rank=8,
                                        layer_types=["full_attention", "linear_attention", "linear_attention"],
                                        mlp_layer_types=["sparse", "dense", "sparse"], tie_word_embeddings=True),
               ("KimiLinearForCausalLM",), device="cpu"),
    ),
)
