"""BitNet b1.58 (transformers modeling_bitnet.py): the LLaMA layout (layout.py) with an RMSNorm over the attention's
output before o_proj (attn_sub_norm) and over the MLP's act(gate) x up before down_proj (ffn_sub_norm), ReLU^2 by
default (hidden_act relu2), an unbiased MLP (Gemma's) and an LM head untied by default. Its weights are ternary when
quantised (BitLinear); in transformers' nn.Linear they have LLaMA's shapes and counts."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout

# gguf-py's TensorNameMap gives attn_sub_norm / ffn_sub_norm only from the original checkpoints' names
# (self_attn.inner_attn_ln, mlp.ffn_layernorm), not from transformers': no llama.cpp name for these; and llama.cpp's
# bitnet has no output tensor (it reads the LM head as the embedding)
BITNET = DecoderLayout(sub_norms=True, mlp_bias=False, gguf_renames=(("attn_sub_norm", None), ("ffn_sub_norm", None),
                                                               ("output", None)))

_SIZES = dict(layout.TINY, pad_token_id=0)

FAMILY = Family(
    name="bitnet",
    # its tensor names are LLaMA's and the two sub-norms
    **{**layout.family_fields({"bitnet": BITNET}, "attn_q"), "signature": r"(^|[./])self_attn[./]attn_sub_norm[./]"},
    before=("llama",),   # LLaMA's q_proj signature matches its files too
    samples=(
        Sample("BitNetConfig", _SIZES, ("BitNetModel", "BitNetForCausalLM")),
        Sample("BitNetConfig", dict(_SIZES, attention_bias=True, tie_word_embeddings=True), ("BitNetForCausalLM",)),
    ),
)
