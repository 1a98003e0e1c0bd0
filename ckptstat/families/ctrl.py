"""CTRL (transformers modeling_ctrl.py, configuration_ctrl.py): the LLaMA layout (layout.py) with token embeddings
`w` times sqrt(n_embd) plus a fixed sinusoidal position table (a buffer, no parameters), pre-LayerNorm layers
(layernorm1, layernorm2) of biased Wq, Wk, Wv and dense, a plain biased MLP ffn.0 / ReLU / ffn.2 of dff, a final
`layernorm`, and an LM head with its own bias whose weight is tied to `w` (CTRLLMHeadModel._tied_weights_keys).
CTRLForSequenceClassification: `classifier`, an unbiased Linear(n_embd, num_labels) over every token (Paths.seqcls).
llama.cpp has no architecture for it."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, HeadRule, Sample
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import FFNWidth

CTRL = DecoderLayout(
    norm="layernorm", mlp="plain", qkv_bias=True, o_bias=True, mlp_bias=True, embed_scale=True, positions="sinusoidal",
    lm_head_bias="always", ffn_width=FFNWidth("dff"), activation="relu", tied_default=True, task_heads=("seqcls",),
    paths=Paths(seqcls="classifier", body="transformer", embed="w", layers="h", attn="multi_head_attention", q="Wq", k="Wk",
                v="Wv", o="dense", mlp="ffn", up="0", down="2", attn_in="layernorm1", mlp_in="layernorm2", norm="layernorm"))

_FIELDS = layout.family_fields({"ctrl": CTRL}, "attn_q")
_SIZES = dict(n_embd=32, n_layer=2, n_head=4, dff=37, vocab_size=99, n_positions=64)

FAMILY = Family(
    name="ctrl",
    # h.N.multi_head_attention.Wq: no other family's
    # its sequence classifier is `classifier` without a bias (a token classifier's elsewhere; CTRL has none)
    **{**_FIELDS, "gguf_tensor_names": (),
       "head_rules": (HeadRule(r"^classifier\.weight$", "seqcls"),) + tuple(_FIELDS["head_rules"])},
    gguf_architectures=(),   # llama.cpp has no architecture for it: no GGUF names either
    samples=(
        Sample("CTRLConfig", _SIZES, ("CTRLModel", "CTRLLMHeadModel")),
        Sample("CTRLConfig", dict(_SIZES, tie_word_embeddings=False), ("CTRLLMHeadModel",)),
        # the sequence classifier picks the last non-pad token's logits: values
        Sample("CTRLConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("CTRLForSequenceClassification",), device="cpu"),
    ),
)
