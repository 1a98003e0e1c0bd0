"""LLaMA-style decoders: Llama, Mistral, Ministral, Ministral 3, Qwen2, Helium, Emu3's text model, dense Granite
(transformers modeling_llama.py, modeling_mistral.py, modeling_ministral.py, modeling_ministral3.py, modeling_qwen2.py,
modeling_helium.py, modeling_emu3.py, modeling_granite.py; Granite's embedding, attention, residual and logit multipliers
are config scalars, not tensors): pre-RMSNorm layers, rotary positions, grouped-query attention, a gated SiLU MLP,
Mistral's sliding window (Ministral's on the sliding layers of layer_types), Qwen2's q/k/v biases, Helium's unbiased
o_proj, and an LM head untied by default. The layout (layout.py) is the whole description; its LLaMA names are the
default Paths."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .framework import infer, layout
from .framework.base import Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

# the task heads of modeling_layers.py (GenericForSequenceClassification, GenericForTokenClassification's `score`,
# GenericForQuestionAnswering), LlamaForQuestionAnswering's body under `transformer`
LLAMA = DecoderLayout(task_heads=("seqcls", "tokcls", "qa"), paths=Paths(tokcls="score", qa_body="transformer"))
MISTRAL = replace(LLAMA, paths=replace(LLAMA.paths, qa_body=""))   # MistralForQuestionAnswering's under `model`
QWEN2 = replace(LLAMA, qkv_bias=True, o_bias=False, mlp_bias=False)   # Qwen2: q/k/v always biased, o_proj never
# Helium: attention_bias on q/k/v only, no *ForQuestionAnswering
HELIUM = replace(LLAMA, o_bias=False, task_heads=("seqcls", "tokcls"))
# Emu3's language model (Emu3ForCausalLM, Emu3TextConfig): LLaMA's layers and names
# MinistralForQuestionAnswering's body is under `transformer`, as Llama's
# Granite (GraniteModel, GraniteForCausalLM; no task heads): LLaMA's layers and names
GRANITE = replace(LLAMA, task_heads=())
LAYOUTS = {"llama": LLAMA, "mistral": MISTRAL, "ministral": LLAMA, "ministral3": MISTRAL, "qwen2": QWEN2,
           "helium": HELIUM, "emu3_text_model": LLAMA, "granite": GRANITE}

# The classes llama.cpp's GGUF architectures stand for (its converter writes Mistral as "llama"; GraniteModel,
# a LlamaModel, writes "granite").
GGUF_CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "granite": "GraniteForCausalLM"}
# Granite's multipliers as GraniteModel.set_gguf_parameters writes them (f32 keys; no tensor, no parameter)
GRANITE_SCALES = {"embedding_scale": "embedding_multiplier", "attention.scale": "attention_multiplier",
                  "residual_scale": "residual_multiplier", "logit_scale": "logits_scaling"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    if arch not in GGUF_CLASSES:
        return None
    cfg = infer.gguf_config(arch, metadata, tensors, GGUF_CLASSES[arch])
    if cfg is not None and arch == "granite":
        cfg.update({k: v for g, k in GRANITE_SCALES.items() if (v := infer.gguf_float(metadata, f"{arch}.{g}")) is not None})
    return cfg


# llama.cpp's names (gguf-py tensor_mapping.py, MODEL_ARCH.LLAMA / QWEN2), from the layout's walk
GGUF_TENSOR_NAMES = layout.gguf_tensor_names(LLAMA)
# convert_hf_to_gguf.py's LlamaModel (LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM: architecture
# `llama`; its subclass GraniteModel: `granite`) permutes the rows of q_proj and k_proj, weights and biases, per head
# (GQA: k by its own heads) for llama.cpp's non-NeoX rope; Qwen2Model (`qwen2`, NeoX rope) stores them as they are.
GGUF_ROPE_PERMUTED = layout.row_rewrites("llama", LLAMA, "rope")
GGUF_TRANSFORMS = GGUF_ROPE_PERMUTED + layout.row_rewrites("granite", GRANITE, "rope")
# LlamaModel / LlamaForCausalLM: `model.` + lm_head, tied only if tie_word_embeddings, GQA cache. The decoder
# LMs not on a layout (Gemma, Qwen-MoE, DeepSeek, gpt-oss) spread this into their Family.
DECODER_LM = layout.decoder_lm(LLAMA)
HEAD_RULES = DECODER_LM["head_rules"]
_SIZES = dict(layout.TINY)
_TASK = dict(_SIZES, num_labels=3, pad_token_id=0, head_dim=8)

FAMILY = Family(
    name="llama",
    **layout.family_fields(LAYOUTS, "attn_q"),
    gguf_config=gguf_config,
    gguf_transforms=GGUF_TRANSFORMS,
    samples=(
        Sample("LlamaConfig", _SIZES, ("LlamaModel", "LlamaForCausalLM")),
        Sample("LlamaConfig", dict(_SIZES, head_dim=16, attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
               ("LlamaForCausalLM",)),
        Sample("MistralConfig", dict(_SIZES, sliding_window=8), ("MistralModel", "MistralForCausalLM")),
        # Ministral 3: Mistral's layers (its Llama-4 query scaling is elementwise)
        Sample("Ministral3Config", dict(_SIZES, head_dim=8, sliding_window=8), ("Ministral3Model", "Ministral3ForCausalLM")),
        Sample("Qwen2Config", dict(_SIZES, tie_word_embeddings=True), ("Qwen2Model", "Qwen2ForCausalLM")),
        Sample("GraniteConfig", dict(_SIZES, embedding_multiplier=12.0, attention_multiplier=0.125, residual_multiplier=0.22,
                                     logits_scaling=4.0), ("GraniteModel", "GraniteForCausalLM")),
        Sample("Emu3TextConfig", dict(_SIZES, attention_bias=True, mlp_bias=True, pad_token_id=0),
               ("Emu3TextModel", "Emu3ForCausalLM")),
        # a window on the layers after max_window_layers only (Qwen2Config's layer_types)
        Sample("Qwen2Config", dict(_SIZES, num_hidden_layers=3, use_sliding_window=True, sliding_window=4, max_window_layers=1),
               ("Qwen2ForCausalLM",)),
        # Ministral: a window on the sliding layers of layer_types; Helium: q/k/v biased, o_proj not (head_dim 8: the
        # configs' defaults, Ministral's None and Helium's 128, do not fit the tiny sizes)
        Sample("MinistralConfig", dict(_SIZES, head_dim=8, num_hidden_layers=3, sliding_window=4,
                                       layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
               ("MinistralModel", "MinistralForCausalLM")),
        Sample("HeliumConfig", dict(_SIZES, head_dim=8, attention_bias=True, mlp_bias=True),
               ("HeliumModel", "HeliumForCausalLM")),
        # its sequence classifier tests `pad_token_id in input_ids`: values
        *(Sample(c, _TASK, (f"{c.removesuffix('Config')}ForSequenceClassification",), device="cpu")
          for c in ("LlamaConfig", "MistralConfig", "MinistralConfig", "Ministral3Config", "Qwen2Config", "HeliumConfig")),
        *(Sample(c, _TASK, tuple(c.removesuffix("Config") + h for h in ("ForTokenClassification", "ForQuestionAnswering")))
          for c in ("LlamaConfig", "MistralConfig", "MinistralConfig", "Ministral3Config", "Qwen2Config")),
        Sample("HeliumConfig", _TASK, ("HeliumForTokenClassification",)),
    ),
)
