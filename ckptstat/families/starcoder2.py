"""StarCoder2 (transformers modeling_starcoder2.py): the LLaMA layout (layout.py) with LayerNorms (weight and
bias), a plain MLP c_proj(act(c_fc(x))) (gelu_pytorch_tanh by default), one use_bias switch for q, k, v, o and
the MLP (true by default), an optional sliding window and the LM head tied by default."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import BiasKeys, DecoderLayout, Paths

STARCODER2 = DecoderLayout(
    task_heads=("seqcls", "tokcls"), norm="layernorm", mlp="plain", bias_keys=BiasKeys("use_bias", "use_bias", "use_bias"),
                           tied_default=True, paths=Paths(tokcls="score", up="c_fc", down="c_proj"))

_SIZES = dict(layout.TINY, pad_token_id=0)

FAMILY = Family(
    name="starcoder2",
    # mlp.c_fc under model.layers.N (GPT-2's and StarCoder's c_fc are under h.N)
    **layout.family_fields({"starcoder2": STARCODER2}, "ffn_up"),
    samples=(
        Sample("Starcoder2Config", _SIZES, ("Starcoder2Model", "Starcoder2ForCausalLM")),
        Sample("Starcoder2Config", dict(_SIZES, use_bias=False, sliding_window=4, tie_word_embeddings=False),
               ("Starcoder2ForCausalLM",)),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("Starcoder2Config", dict(_SIZES, num_labels=3, pad_token_id=0), ("Starcoder2ForSequenceClassification",),
               device="cpu"),
        Sample("Starcoder2Config", dict(_SIZES, num_labels=3, pad_token_id=0), ("Starcoder2ForTokenClassification",),
               device="cpu"),
    ),
)
