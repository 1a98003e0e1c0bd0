"""Doge (transformers modeling_doge.py, SmallDoge): a LLaMA layer with per-head q/k RMSNorms, a dynamic attention mask
(self_attn.dt_proj over the values, g x d -> g, exp(A x softplus(.)) with A a [g] parameter, added to the causal
mask; past keep_window_size keys only the top-k are kept, no matmul: DecoderLayout.dynamic_mask) and the residual
scaled by a learned vector before each add (input_residual, post_attention_residual: DecoderLayout.residual_scales).
dt_proj runs on the values the cache holds after its update: a forward's own tokens, as counted, plus the cached ones
when decoding. A sliding_window applies to every layer. Its cross-domain MoE (is_moe true: a product-key router over
num_experts single-neuron experts beside the MLP) is answered by the meta path. llama.cpp has no architecture for it."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout

DOGE = DecoderLayout(
    task_heads=("seqcls",), qk_norm="head", dynamic_mask=True, residual_scales=True, o_bias=None, requires=(("is_moe", False),))

_SIZES = dict(layout.TINY, head_dim=8)

FAMILY = Family(
    name="doge",
    before=("llama", "qwen3"),   # tried before them: its q_proj and q_norm names are theirs
    **{**layout.family_fields({"doge": DOGE}, "attn_q"),
       "signature": r"(^|[./])layers[./]\d+[./]self_attn[./]dt_proj[./]", "gguf_tensor_names": ()},
    gguf_architectures=(),   # llama.cpp has no doge architecture
    samples=(
        Sample("DogeConfig", _SIZES, ("DogeModel", "DogeForCausalLM")),
        Sample("DogeConfig", dict(_SIZES, attention_bias=True, mlp_bias=True, tie_word_embeddings=True, sliding_window=4,
                                  keep_window_size=4), ("DogeForCausalLM",)),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("DogeConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("DogeForSequenceClassification",),
               device="cpu"),
    ),
)
