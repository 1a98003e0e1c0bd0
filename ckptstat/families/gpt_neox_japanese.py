"""GPT-NeoX-Japanese (transformers modeling_gpt_neox_japanese.py, configuration_gpt_neox_japanese.py): the LLaMA
layout (layout.py) with LayerNorms (weight and bias), an unbiased fused attention.query_key_value [3h, h] and dense,
the last layer's attention alone holding a bias `dense_bias` [h] added after dense (`last_o_bias`), rotary on
partial_rotary_factor of each head (1.0 by default), a plain unbiased MLP dense_h_to_4h / act / dense_4h_to_h of
hidden_size x intermediate_multiple_size, final_layer_norm, and an LM head `embed_out` tied to embed_in by default
(GPTNeoXJapaneseForCausalLM._tied_weights_keys). llama.cpp has no architecture for it."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import FFNWidth

GPT_NEOX_JAPANESE = DecoderLayout(
    norm="layernorm", fused_qkv=True, mlp="plain", qkv_bias=False, o_bias=False, mlp_bias=False, partial_rotary=1.0,
    last_o_bias=True, ffn_width=FFNWidth(times_key="intermediate_multiple_size"), tied_default=True,
    paths=Paths(body="gpt_neox_japanese", embed="embed_in", attn="attention", qkv="query_key_value", o="dense",
                up="dense_h_to_4h", down="dense_4h_to_h", norm="final_layer_norm", lm_head="embed_out"))

_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_multiple_size=2, vocab_size=99,
              max_position_embeddings=64)

FAMILY = Family(
    name="gpt_neox_japanese",
    **{**layout.family_fields({"gpt_neox_japanese": GPT_NEOX_JAPANESE}, "attn_qkv"), "gguf_tensor_names": (),
       # the last layer's attention.dense_bias: GPT-NeoX's files share layers.N.attention.query_key_value but have none
       "signature": r"(^|[./])layers[./]\d+[./]attention[./]dense_bias$"},
    gguf_architectures=(),   # llama.cpp has no architecture for it: no GGUF names either
    samples=(
        Sample("GPTNeoXJapaneseConfig", _SIZES, ("GPTNeoXJapaneseModel", "GPTNeoXJapaneseForCausalLM")),
        Sample("GPTNeoXJapaneseConfig", dict(_SIZES, tie_word_embeddings=False, partial_rotary_factor=0.5),
               ("GPTNeoXJapaneseForCausalLM",)),
    ),
)
