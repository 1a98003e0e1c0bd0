"""Apertus and Apertus 1.5's language model (transformers modeling_apertus.py; modeling_apertus1p5.py's
Apertus1p5TextForCausalLM is Apertus's): the LLaMA layout (layout.py) with a plain MLP, down(act(up(x))), whose
activation is xIELU by default (hidden_act xielu: two learned scalars per MLP, LEARNED_ACTIVATIONS), unbiased MLP,
q/k RMSNorms per head, norms named attention_layernorm and feedforward_layernorm, an LM head untied by default."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout, Paths

APERTUS = DecoderLayout(mlp="plain", qk_norm="head", mlp_bias=False, task_heads=("tokcls",),
                        paths=Paths(attn_in="attention_layernorm", mlp_in="feedforward_layernorm", tokcls="score"))
LAYOUTS = {"apertus": APERTUS, "apertus1p5_text": APERTUS}


_SIZES = dict(layout.TINY, pad_token_id=0)

FAMILY = Family(
    name="apertus",
    # without config.json: xIELU where the MLPs hold its alpha_p, else silu, said (layout.spec_from_tensors)
    **layout.family_fields(LAYOUTS, "attn_norm"),
    samples=(
        Sample("ApertusConfig", _SIZES, ("ApertusModel", "ApertusForCausalLM")),
        Sample("ApertusConfig", dict(_SIZES, attention_bias=True, hidden_act="relu2", tie_word_embeddings=True),
               ("ApertusForCausalLM",)),
        Sample("Apertus1p5TextConfig", _SIZES, ("Apertus1p5TextModel", "Apertus1p5TextForCausalLM")),
        Sample("ApertusConfig", dict(_SIZES, num_labels=3), ("ApertusForTokenClassification",)),
    ),
)
