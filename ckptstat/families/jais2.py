"""Jais 2 (transformers modeling_jais2.py): the LLaMA layout (layout.py) with LayerNorms (weight and bias), a
plain MLP down(act(up(x))) (relu2 by default), attention_bias and mlp_bias true by default and an LM head untied
by default."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout

JAIS2 = DecoderLayout(norm="layernorm", mlp="plain")

_SIZES = dict(layout.TINY, pad_token_id=0)

FAMILY = Family(
    name="jais2",
    # its tensor names are Arcee's (up_proj without gate_proj) with the norms' biases: files without config.json read
    # as arcee
    **{**layout.family_fields({"jais2": JAIS2}, "ffn_up"), "signature": r"(?!)"},
    samples=(
        Sample("Jais2Config", _SIZES, ("Jais2Model", "Jais2ForCausalLM"), detected_as="arcee"),
        Sample("Jais2Config", dict(_SIZES, attention_bias=False, mlp_bias=False, tie_word_embeddings=True),
               ("Jais2ForCausalLM",), detected_as="arcee"),
    ),
)
