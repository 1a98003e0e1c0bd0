"""HyperCLOVA X (transformers modeling_hyperclovax.py): Granite's LLaMA layer (layout.py; its embedding, residual,
attention and logit multipliers are element-wise) with an RMSNorm after attention (post_norm1) and after the MLP
(post_norm2) beside the pre-norms (use_post_norm, true by default; without them the meta path answers), q/k/v/o
biases by attention_bias, the MLP's by mlp_bias, and an LM head untied by default. llama.cpp has no architecture
for it."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout, Paths

HYPERCLOVAX = DecoderLayout(placement="sandwich", requires=(("use_post_norm", True),),
                            paths=Paths(attn_out="post_norm1", mlp_out="post_norm2"))

_SIZES = dict(layout.TINY, pad_token_id=0)

FAMILY = Family(
    name="hyperclovax",
    # post_norm2 under layers.N (no other family's name)
    **{**layout.family_fields({"hyperclovax": HYPERCLOVAX}, "post_ffw_norm"), "gguf_tensor_names": ()},
    gguf_architectures=(),   # llama.cpp has no architecture for it: no GGUF names either
    samples=(
        Sample("HyperCLOVAXConfig", _SIZES, ("HyperCLOVAXModel", "HyperCLOVAXForCausalLM")),
        Sample("HyperCLOVAXConfig", dict(_SIZES, attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
               ("HyperCLOVAXForCausalLM",)),
    ),
)
