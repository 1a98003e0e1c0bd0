"""Ernie 4.5 dense (transformers modeling_ernie4_5.py): the LLaMA layout (layout.py) with one use_bias switch
for q, k, v, o and the MLP (false by default), rotary on interleaved pairs (no matmul of its own), head_dim 128
by default and the LM head tied by default."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import BiasKeys, DecoderLayout

ERNIE4_5 = DecoderLayout(bias_keys=BiasKeys("use_bias", "use_bias", "use_bias"), tied_default=True)

_SIZES = dict(layout.TINY, head_dim=8, pad_token_id=0)

FAMILY = Family(
    name="ernie4_5",
    **{**layout.family_fields({"ernie4_5": ERNIE4_5}, "attn_q"),
       "signature": r"(?!)"},   # its tensor names are LLaMA's: files without config.json read as llama
    samples=(
        Sample("Ernie4_5Config", _SIZES, ("Ernie4_5Model", "Ernie4_5ForCausalLM"), detected_as="llama"),
        Sample("Ernie4_5Config", dict(_SIZES, use_bias=True, tie_word_embeddings=False), ("Ernie4_5ForCausalLM",),
               detected_as="llama"),
    ),
)
