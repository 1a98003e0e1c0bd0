"""StableLM (transformers modeling_stablelm.py): the LLaMA layout (layout.py) with LayerNorms (weight and bias),
q/k/v biases by use_qkv_bias (false by default), o_proj and the gated MLP never biased, rotary on
partial_rotary_factor of each head (0.25 by default) and an LM head untied by default. Its two options that add
or drop parts, qk_layernorm (a LayerNorm per head, norms.N) and use_parallel_residual (no
post_attention_layernorm), are answered by the meta path."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import BiasKeys, DecoderLayout, Paths

STABLELM = DecoderLayout(
    task_heads=("seqcls", "tokcls"), paths=Paths(tokcls="score"), norm="layernorm", bias_keys=BiasKeys(qkv="use_qkv_bias"),
                         o_bias=False, mlp_bias=False, partial_rotary=0.25,
                         requires=(("qk_layernorm", False), ("use_parallel_residual", False)))

_SIZES = dict(layout.TINY, pad_token_id=0)

FAMILY = Family(
    name="stablelm",
    # its tensor names are LLaMA's with the norms' biases: files without config.json read as llama
    **{**layout.family_fields({"stablelm": STABLELM}, "attn_q"), "signature": r"(?!)"},
    samples=(
        Sample("StableLmConfig", _SIZES, ("StableLmModel", "StableLmForCausalLM"), detected_as="llama"),
        Sample("StableLmConfig", dict(_SIZES, use_qkv_bias=True, partial_rotary_factor=0.5, tie_word_embeddings=True),
               ("StableLmForCausalLM",), detected_as="llama"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("StableLmConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("StableLmForSequenceClassification",),
               device="cpu", detected_as="llama"),
        Sample("StableLmConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("StableLmForTokenClassification",),
               device="cpu", detected_as="llama"),
    ),
)
