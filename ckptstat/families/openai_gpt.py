"""OpenAI GPT (transformers modeling_openai.py, configuration_openai.py): the LLaMA layout (layout.py) with
tokens_embed plus a learned positions_embed, post-LayerNorm layers (ln_1 after the attention's residual, ln_2 after
the MLP's) of GPT-2's Conv1D weights (stored [in, out]): a fused, biased attn.c_attn [h, 3h] and attn.c_proj, a plain
biased MLP mlp.c_fc / afn / mlp.c_proj 4 x n_embd wide, no final norm, an LM head tied to tokens_embed
(OpenAIGPTLMHeadModel._tied_weights_keys), and no cache (its forward returns none). llama.cpp has no architecture
for it."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import FFNWidth

OPENAI_GPT = DecoderLayout(
    norm="layernorm", placement="post", fused_qkv=True, mlp="plain", qkv_bias=True, o_bias=True, mlp_bias=True,
    positions="learned", conv1d=True, final_norm=False, ffn_width=FFNWidth(times_hidden=4), act_key="afn",
    tied_default=True,
    paths=Paths(body="transformer", embed="tokens_embed", pos="positions_embed", layers="h", attn="attn", qkv="c_attn",
                o="c_proj", up="c_fc", down="c_proj", attn_out="ln_1", mlp_out="ln_2"))

_SIZES = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=64)

FAMILY = Family(
    name="openai_gpt",
    # h.N.attn.c_attn is GPT-2's too: tokens_embed shows this family's files
    **{**layout.family_fields({"openai-gpt": OPENAI_GPT}, "token_embd"), "gguf_tensor_names": (), "kv_cache": None},
    before=("gpt2",),
    gguf_architectures=(),   # llama.cpp has no architecture for it: no GGUF names either
    samples=(
        Sample("OpenAIGPTConfig", _SIZES, ("OpenAIGPTModel", "OpenAIGPTLMHeadModel")),
        Sample("OpenAIGPTConfig", dict(_SIZES, tie_word_embeddings=False, afn="relu"), ("OpenAIGPTLMHeadModel",)),
    ),
)
