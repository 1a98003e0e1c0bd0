"""OLMo, OLMo2 and OLMo3 (transformers modeling_olmo.py, modeling_olmo2.py, modeling_olmo3.py): LLaMA layouts (layout.py). OLMo's
LayerNorms have no weights (OlmoLayerNorm: elementwise_affine off), so its files hold only the projections and
embeddings; OLMo2 normalises after attention and after the MLP (post_attention_layernorm,
post_feedforward_layernorm; none before) and RMS-normalises the whole q and k projections (q_norm [a d],
k_norm [g d]). Neither has an MLP bias; both untie the LM head by default."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .framework import infer, layout
from .framework.base import Family, Sample, Tensors
from .framework.layout import DecoderLayout

OLMO2 = DecoderLayout(task_heads=("seqcls",), placement="post", qk_norm="width", mlp_bias=False)
OLMO = DecoderLayout(task_heads=("seqcls",), norm="none", mlp_bias=False)

GGUF_CLASSES = {"olmo": "OlmoForCausalLM", "olmo2": "Olmo2ForCausalLM"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """llama.cpp's `olmo` and `olmo2` files: LLaMA's keys (OLMo's clip_qkv changes no count); attention_bias
    (no metadata key) from whether the first layer's q has a bias."""
    cfg = infer.gguf_config(arch, metadata, tensors, GGUF_CLASSES[arch]) if arch in GGUF_CLASSES else None
    if cfg is not None:
        cfg["attention_bias"] = "blk.0.attn_q.bias" in tensors
    return cfg


_SIZES = dict(layout.TINY, pad_token_id=0)

FAMILY = Family(
    name="olmo",
    before=("llama", "qwen3"),   # tried before them: its q_proj names match llama's, OLMo2's q_norm qwen3's
    # OLMo2's post_feedforward_layernorm (shape inference reads OLMo2: OLMo's names are LLaMA's less the norms);
    # also in Gemma2/3 files, whose family comes before this one in the registry
    **layout.family_fields({"olmo2": OLMO2, "olmo3": OLMO2, "olmo": OLMO}, "post_ffw_norm"),
    gguf_config=gguf_config,
    # convert_hf_to_gguf.py's OlmoModel permutes q_proj / k_proj weights as LlamaModel does (OLMo2: NeoX, as stored)
    gguf_transforms=layout.row_rewrites("olmo", OLMO, "rope", bias=False),
    samples=(
        # OLMo's tensor names are LLaMA's without the (weightless) norms: names alone read as LLaMA
        Sample("OlmoConfig", _SIZES, ("OlmoModel", "OlmoForCausalLM"), detected_as="llama"),
        Sample("OlmoConfig", dict(_SIZES, attention_bias=True, clip_qkv=8.0, tie_word_embeddings=True),
               ("OlmoForCausalLM",), detected_as="llama"),
        Sample("Olmo2Config", _SIZES, ("Olmo2Model", "Olmo2ForCausalLM")),
        # OLMo3: OLMo2's layers, sliding on those layer_types marks (by default all but every 4th)
        Sample("Olmo3Config", dict(_SIZES, num_hidden_layers=4, sliding_window=4), ("Olmo3Model", "Olmo3ForCausalLM")),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("OlmoConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("OlmoForSequenceClassification",), device="cpu",
               detected_as="llama"),
        Sample("Olmo2Config", dict(_SIZES, num_labels=3, pad_token_id=0), ("Olmo2ForSequenceClassification",), device="cpu"),
        Sample("Olmo3Config", dict(_SIZES, num_hidden_layers=4, sliding_window=4, num_labels=3, pad_token_id=0),
               ("Olmo3ForSequenceClassification",), device="cpu"),
    ),
)
