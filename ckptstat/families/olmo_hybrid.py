"""OLMo-Hybrid (transformers modeling_olmo_hybrid.py, OlmoHybridModel / OlmoHybridForCausalLM): OLMo 3's attention
layers (norms after attention and after the MLP, q/k RMSNorms over the whole projections) between gated DeltaNet
layers on the config layer_types "linear_attention" layers (layout_linear.py, DecoderLayout.linear "separate": q_proj,
k_proj, v_proj, b_proj, a_proj and the gate's g_proj, the short causal conv1d, the chunked gated delta rule with beta
doubled where linear_allow_neg_eigval, the gated RMSNorm o_norm, o_proj), whose norms come before the mixer and the
MLP (input_layernorm, post_attention_layernorm: DecoderLayout.linear_placement "pre"). A dense gated MLP on every layer.
Its files hold the names before transformers' conversion_mapping: input_layernorm as attention_layer_norm, every
post_attention_layernorm as feedforward_layer_norm, the conv1d as q_conv1d, k_conv1d and v_conv1d.
Released checkpoints apply no rotary (rope_parameters without rope_theta): element-wise only, the matmuls alike.

OlmoHybridConfig derives what a file leaves out: layer_types (every fourth layer, i % 4 == 3, attends; the last one
when none would), linear_num_key_heads and linear_num_value_heads (num_attention_heads), linear_key_head_dim
(int(0.75 x hidden_size / key heads)), linear_value_head_dim (2 x the key head's): `from_config` fills them so."""
from __future__ import annotations

from .framework import layout
from .framework.archspec import ArchSpec
from .framework.base import Cfg, Family, Sample
from .framework.layout import DecoderLayout, Paths
from .framework.layout_linear import hybrid_kv_cache

OLMO_HYBRID = DecoderLayout(placement="post", qk_norm="width", linear="separate", linear_placement="pre",
                            # the names save_pretrained writes (transformers' conversion_mapping renames them on load:
                            # attention_layer_norm is input_layernorm, every feedforward_layer_norm post_attention_layernorm)
                            paths=Paths(gated_norm="o_norm", attn_in="attention_layer_norm", attn_out="feedforward_layer_norm",
                                        mlp_in="feedforward_layer_norm"))
LAYOUTS = {"olmo_hybrid": OLMO_HYBRID}


def from_config(c: Cfg) -> ArchSpec:
    """The layout's spec from the config with OlmoHybridConfig's derived fields filled (the module docstring)."""
    filled = dict(c.cfg)
    a, h = c.int("num_attention_heads"), c.int("hidden_size")
    if c.get("layer_types", default=None) is None:
        L = c.int("num_hidden_layers")
        types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(L)]
        if "full_attention" not in types and types:
            types[-1] = "full_attention"
        filled["layer_types"] = types
    hk = filled["linear_num_key_heads"] = c.int("linear_num_key_heads", default=a)
    filled["linear_num_value_heads"] = c.int("linear_num_value_heads", default=a)
    dk = filled["linear_key_head_dim"] = c.int("linear_key_head_dim", default=int(0.75 * h / hk) if hk else 0)
    filled["linear_value_head_dim"] = c.int("linear_value_head_dim", default=2 * dk)
    return layout.spec_from_config(OLMO_HYBRID, Cfg(filled, c.path, c.model_type, c.head, c.common))


# the DeltaNet's key width Hk x dk equal to its value width Hv x dv: transformers 5.24's save_pretrained splits the
# in-memory conv1d back into three equal thirds (its Concatenate's reverse), which are the released files' q / k / v
# convs only then
_SIZES = dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=8,
              linear_value_head_dim=8, linear_conv_kernel_dim=4, max_position_embeddings=64, pad_token_id=0, eos_token_id=0)

FAMILY = Family(
    name="olmo_hybrid",
    before=("olmo",),   # tried before it: its attention layers' post-norms and q/k norms are OLMo 2's signature
    **{**layout.family_fields(LAYOUTS, "ssm_a"), "from_config": from_config, "kv_cache": hybrid_kv_cache,
       # its DeltaNet's own gate projection (Qwen3-Next's and Qwen3.5's have none of that name)
       "signature": r"(^|[./])layers[./]\d+[./]linear_attn[./]g_proj[./]",
       "gguf_tensor_names": ()},   # llama.cpp has no OLMo-Hybrid architecture
    samples=(
        Sample("OlmoHybridConfig", _SIZES, ("OlmoHybridModel", "OlmoHybridForCausalLM")),
        Sample("OlmoHybridConfig", dict(_SIZES, linear_num_key_heads=1, linear_key_head_dim=16, tie_word_embeddings=True,
                                        layer_types=["linear_attention", "full_attention"] * 2,
                                        rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
               ("OlmoHybridForCausalLM",)),
    ),
)
