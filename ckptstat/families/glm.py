"""GLM and GLM-4 (transformers modeling_glm.py, modeling_glm4.py): LLaMA layouts (layout.py) with gate and up
fused in one gate_up_proj [2f, h], rotary on part of each head (partial_rotary_factor, 0.5 by default: the config
classes' __post_init__), q/k/v biased by attention_bias (true by default), o_proj never, head_dim 128 by default,
and an LM head untied by default. GLM-4 adds sandwich norms: post_self_attn_layernorm on the attention output
and post_mlp_layernorm on the MLP's, beside the pre-norms (input_layernorm, post_attention_layernorm)."""
from __future__ import annotations

from dataclasses import replace

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout, Paths

GLM = DecoderLayout(task_heads=("seqcls", "tokcls"), paths=Paths(tokcls="score"),
                    fused_gate_up=True, o_bias=False, mlp_bias=False, partial_rotary=0.5)
GLM4 = replace(GLM, placement="sandwich",
               paths=replace(GLM.paths, attn_out="post_self_attn_layernorm", mlp_out="post_mlp_layernorm"))

_SIZES = dict(layout.TINY, head_dim=8, pad_token_id=0)

FAMILY = Family(
    name="glm",
    before=("llama",),   # tried before them: its q_proj names match llama's signature
    # gate_up_proj beside q_proj (Phi-3's beside qkv_proj: phi3 comes first); shape inference reads GLM-4 when the
    # file has its sandwich norms, GLM otherwise (layout.Layouts)
    **layout.family_fields({"glm4": GLM4, "glm": GLM}, "ffn_up"),
    gguf_architectures=("glm4",),   # llama.cpp's Glm4Model; it has no architecture for GlmForCausalLM's names
    gguf_config=layout.gguf_reader(GLM4, "Glm4ForCausalLM"),
    samples=(
        Sample("Glm4Config", _SIZES, ("Glm4Model", "Glm4ForCausalLM")),
        Sample("Glm4Config", dict(_SIZES, attention_bias=False, partial_rotary_factor=0.25, tie_word_embeddings=True),
               ("Glm4ForCausalLM",)),
        Sample("GlmConfig", _SIZES, ("GlmModel", "GlmForCausalLM")),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("Glm4Config", dict(_SIZES, num_labels=3, pad_token_id=0), ("Glm4ForSequenceClassification",), device="cpu"),
        Sample("GlmConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("GlmForSequenceClassification",), device="cpu"),
        Sample("Glm4Config", dict(_SIZES, num_labels=3, pad_token_id=0), ("Glm4ForTokenClassification",), device="cpu"),
        Sample("GlmConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("GlmForTokenClassification",), device="cpu"),
    ),
)
