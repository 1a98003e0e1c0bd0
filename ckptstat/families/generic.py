"""The generic decoder fallback: a config.json whose model_type no family module claims, but which has
the standard fields of a LLaMA-shaped decoder (STANDARD_FIELDS, plus num_key_value_heads, head_dim and
the MoE fields num_local_experts / num_experts_per_tok when present), gets FLOPs and memory from the
LLaMA template (transformers modeling_llama.py; modeling_mixtral.py for the routed MLP): pre-RMSNorm
layers, rotary q/k, grouped-query attention, a gated MLP, an LM head.

Every spec it makes says so in its assumptions ("generic (config fields): ..." with the fields it
read), and Family.strict_params is set: when the checkpoint's parameter count differs from the
template's, the template does not describe the model and no FLOPs are given (census/model.py).
It is consulted last (families/__init__.py by_model_type / detect), and never from tensor names."""
from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from . import mixtral
from .framework import layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, architectures, head_of
from .framework.layout import DecoderLayout
from .framework.ops import Builder

STANDARD_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
OPTIONAL_FIELDS = ("num_key_value_heads", "head_dim", "num_local_experts", "num_experts_per_tok", "attention_bias",
                   "mlp_bias", "hidden_act", "tie_word_embeddings", "max_position_embeddings", "sliding_window")
LABEL = "generic (config fields)"


# Every field a config.json may hold for the template to describe it: LlamaConfig's and MixtralConfig's
# (transformers configuration_llama.py, configuration_mixtral.py), PretrainedConfig's own, Granite's scale
# factors (they scale, they shape nothing), Qwen2's windowing and SmolLM3-style NoPE switches (no matmul changes),
# and what tools write beside them. Any other field may change the model (a shared expert, sub-norms, q/k norms,
# a linear-attention or state-space layer, parallel blocks...): such a config is not claimed, since with no
# weights nothing would catch a wrong template (tests/test_families.py builds every transformers model type
# this claims and compares parameters and FLOPs).
KNOWN_FIELDS = frozenset((
    # LlamaConfig, MixtralConfig
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps", "use_cache", "pretraining_tp",
    "rope_theta", "rope_scaling", "rope_parameters", "attention_bias", "attention_dropout", "mlp_bias", "head_dim",
    "num_experts_per_tok", "num_local_experts", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise",
    "sliding_window",
    # PretrainedConfig
    "_name_or_path", "add_cross_attention", "architectures", "bad_words_ids", "begin_suppress_tokens", "bos_token_id",
    "chunk_size_feed_forward", "cross_attention_hidden_size", "decoder_start_token_id", "diversity_penalty", "do_sample",
    "dtype", "early_stopping", "encoder_no_repeat_ngram_size", "eos_token_id", "exponential_decay_length_penalty",
    "finetuning_task", "forced_bos_token_id", "forced_eos_token_id", "id2label", "is_decoder", "is_encoder_decoder",
    "label2id", "length_penalty", "max_length", "min_length", "model_type", "no_repeat_ngram_size", "num_beam_groups",
    "num_beams", "num_return_sequences", "output_attentions", "output_hidden_states", "output_scores", "pad_token_id",
    "prefix", "problem_type", "pruned_heads", "remove_invalid_values", "repetition_penalty", "return_dict",
    "return_dict_in_generate", "sep_token_id", "suppress_tokens", "task_specific_params", "temperature",
    "tf_legacy_loss", "tie_encoder_decoder", "tie_word_embeddings", "tokenizer_class", "top_k", "top_p", "torchscript",
    "transformers_version", "typical_p", "use_bfloat16", "torch_dtype", "_attn_implementation_autoset",
    # Granite's scale factors; Qwen2's windowing; SmolLM3's NoPE layers; tools' additions
    "embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling",
    "layer_types", "use_sliding_window", "max_window_layers", "no_rope_layers", "no_rope_layer_interval",
    "auto_map", "quantization_config", "compression_config", "use_flash_attn",
    "quantization",   # mlx_lm's (census/quant/mlx.py)
))
_ATTENTION_KINDS = {"full_attention", "sliding_attention"}
# transformers model types whose config holds only LLaMA's fields but whose model is not LLaMA's (found by
# tests/test_generic_claims.py, which builds every model type `claims` takes): RMSNorms on q and k (and OLMo3's
# norms after each block) that no config field announces.
NOT_LLAMA_SHAPED = frozenset({"olmo3", "hunyuan_v1_dense",
                              "minimax_m2"})   # q/k RMSNorms over all heads, which its config has no field for
# rope_parameters keys that change no shape and no matmul (transformers 5 moved the rotary fields there); any other
# (partial_rotary_factor: GLM, GLM-4 rotate part of each head) is a field LLaMA's template does not follow
KNOWN_ROPE = frozenset(("rope_type", "rope_theta", "factor", "original_max_position_embeddings", "low_freq_factor",
                        "high_freq_factor", "beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim",
                        "long_factor", "short_factor", "truncate"))


def claims(cfg: Mapping[str, Any]) -> bool:
    """Has `cfg` the fields the generic template needs (positive integers)? With weights, the checkpoint's
    parameter count then says whether the template describes the model (strict_params); its tie rules apply."""
    return all(isinstance(cfg.get(k), int) and not isinstance(cfg.get(k), bool) and cfg[k] > 0 for k in STANDARD_FIELDS)


def describes(cfg: Mapping[str, Any]) -> bool:
    """Does the template describe `cfg`'s model with no weights to check it against: a LLaMA-shaped decoder's
    config (claims), a gated SiLU MLP (LLaMA's), only full or sliding attention layers, and no field LLaMA's
    config lacks (KNOWN_FIELDS)?"""
    layer_types = cfg.get("layer_types")
    rope = cfg.get("rope_parameters")
    if isinstance(rope, Mapping) and not KNOWN_ROPE.issuperset(rope):
        return False
    return (claims(cfg) and cfg.get("hidden_act", "silu") in ("silu", "swish")
            and (layer_types is None or (isinstance(layer_types, list) and _ATTENTION_KINDS.issuperset(map(str, layer_types))))
            and KNOWN_FIELDS.issuperset(cfg) and cfg.get("model_type") not in NOT_LLAMA_SHAPED)


# the template: LLaMA's layout, or Mixtral's for a config with routed experts (bias switches as the config says)
DENSE = DecoderLayout()
ROUTED = replace(mixtral.MIXTRAL, mlp_bias=None)


def _layout(s: ArchSpec) -> DecoderLayout:
    return ROUTED if s.experts else DENSE


@functools.cache
def not_causal() -> tuple[str, Mapping[str, str]]:
    """(the transformers version that wrote it, model_type -> its class) of the model types transformers has no
    causal language model for (not_causal_lm.json, written by fixtures/make_not_causal.py)."""
    with open(os.path.join(os.path.dirname(__file__), "not_causal_lm.json"), encoding="utf-8") as f:
        table = json.load(f)
    return table["transformers"], table["model_types"]


def not_a_decoder(cfg: Mapping[str, Any]) -> bool:
    """A model_type transformers has no causal LM for (EuroBERT's), in a config that names no causal LM class of
    its own (a text model's type, mllama_text_model, whose config names MllamaForCausalLM, is a decoder)."""
    return cfg.get("model_type") in not_causal()[1] and head_of(architectures(cfg), "base")[0] != "lm"


def from_config(c: Cfg) -> ArchSpec:
    version, encoders = not_causal()
    if c.model_type in encoders and not not_a_decoder(c.cfg):
        raise NoAnalyticModel(f"{c.path}: no op template describes {c.common.get('architecture')} "
                              f"(model_type {c.model_type!r})")
    if c.model_type in encoders:   # EuroBERT's fields are LLaMA's, its model an encoder: no causal mask, no KV cache
        cls = encoders[c.model_type]   # (the meta path may still run it as the encoder it is)
        raise NoAnalyticModel(f"{c.path}: model_type {c.model_type!r} is not a decoder: transformers {version} has no causal "
                         f"language model for it{f' (its class: {cls})' if cls else ''}, so the generic LLaMA-shaped "
                         "decoder template does not describe it")
    spec = layout.spec_from_config(DENSE, c)
    used = [k for k in STANDARD_FIELDS + OPTIONAL_FIELDS if c.cfg.get(k) is not None]
    note = (f"{LABEL}: no family module for model_type {c.model_type!r}; a LLaMA-shaped decoder built from "
            f"{', '.join(used)}")
    if c.cfg.get("num_local_experts"):
        spec = replace(spec, experts=c.int("num_local_experts"), top_k=c.int("num_experts_per_tok"))
    if "tie_word_embeddings" not in c.cfg:
        note += "; tie_word_embeddings absent: LM head assumed untied (as LLaMA's config defaults)"
    return replace(spec, assumptions=spec.assumptions + (note,))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    raise UsageError(f"{LABEL}: the generic template needs a config.json with {', '.join(STANDARD_FIELDS)}")


def build(B: Builder) -> None:
    layout.walk(B, _layout(B.s))


def expected_tensors(s: ArchSpec) -> Shapes:
    return layout.expected_tensors(_layout(s), s)


_SIZES = dict(layout.TINY)

FAMILY = Family(
    name="generic",
    model_types=(),
    signature=r"(?!)",      # never from tensor names: the fallback needs the config's fields
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    **{**layout.decoder_lm(DENSE), "tied_by_default": True},
    strict_params=True,
    config_alone=describes,
    # tests/test_families.py builds these under a model_type no family claims (and real llama-shaped
    # families without a module: Granite, Cohere are not, see the test)
    samples=(
        Sample("LlamaConfig", _SIZES, ("LlamaModel", "LlamaForCausalLM")),
        # intermediate 44, not 37: transformers 5's default experts implementation (grouped_mm) needs each weight
        # row to be a multiple of 16 bytes, as every released size is ("strides should be multiple of 16 bytes")
        Sample("MixtralConfig", dict(_SIZES, intermediate_size=44, num_local_experts=4, num_experts_per_tok=2),
               ("MixtralForCausalLM",), device="cpu"),
    ),
)
