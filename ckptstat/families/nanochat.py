"""NanoChat (transformers modeling_nanochat.py): the LLaMA layout (layout.py) whose norms have no weights (an RMS
L2-norm: the layer norms, the final norm, one more on the embeddings before the first layer, and q/k norms over
each head's d after the rotary), a plain MLP fc2(act(fc1(x))) (relu2 by default) without biases, attention_bias on
q, k, v and o, and an LM head untied by default. llama.cpp has no architecture for it."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout, Paths

NANOCHAT = DecoderLayout(norm="none", qk_norm="head", mlp="plain", mlp_bias=False, paths=Paths(up="fc1", down="fc2"))

_SIZES = dict(layout.TINY, pad_token_id=0)

FAMILY = Family(
    name="nanochat",
    # its tensor names are LLaMA's attention with mlp.fc1/fc2 and no norms: files without config.json read as llama
    **{**layout.family_fields({"nanochat": NANOCHAT}, "ffn_up"), "signature": r"(?!)", "gguf_tensor_names": ()},
    gguf_architectures=(),   # llama.cpp has no architecture for it: no GGUF names either
    samples=(
        Sample("NanoChatConfig", _SIZES, ("NanoChatModel", "NanoChatForCausalLM"), detected_as="llama"),
        Sample("NanoChatConfig", dict(_SIZES, attention_bias=True, tie_word_embeddings=True), ("NanoChatForCausalLM",),
               detected_as="llama"),
    ),
)
