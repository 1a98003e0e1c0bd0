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

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import UsageError
from . import decoders, llama, mixtral
from .base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, decoder_kv_cache
from .ops import Builder

STANDARD_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
OPTIONAL_FIELDS = ("num_key_value_heads", "head_dim", "num_local_experts", "num_experts_per_tok", "attention_bias",
                   "mlp_bias", "hidden_act", "tie_word_embeddings", "max_position_embeddings", "sliding_window")
LABEL = "generic (config fields)"


def claims(cfg: Mapping[str, Any]) -> bool:
    """Has `cfg` the fields the generic template needs (positive integers)?"""
    return all(isinstance(cfg.get(k), int) and not isinstance(cfg.get(k), bool) and cfg[k] > 0 for k in STANDARD_FIELDS)


def from_config(c: Cfg) -> ArchSpec:
    spec = decoders.llama_like_spec(c)
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
    if B.s.experts:
        llama.decoder(B, mixtral.moe_mlp)
    else:
        decoders.llama_like(B)


def expected_tensors(s: ArchSpec) -> Shapes:
    return mixtral.expected_tensors(s) if s.experts else decoders.llama_like_tensors(s)


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
              vocab_size=99, max_position_embeddings=64)

FAMILY = Family(
    name="generic",
    model_types=(),
    signature=r"(?!)",      # never from tensor names: the fallback needs the config's fields
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm"),
    head_rules=llama.HEAD_RULES,
    default_head="lm",
    tie_rules=llama.TIE_RULES,
    kv_cache=decoder_kv_cache,
    strict_params=True,
    # tests/test_families.py builds these under a model_type no family claims (and real llama-shaped
    # families without a module: Granite, Cohere are not, see the test)
    samples=(
        Sample("LlamaConfig", _SIZES, ("LlamaModel", "LlamaForCausalLM")),
        Sample("MixtralConfig", dict(_SIZES, num_local_experts=4, num_experts_per_tok=2), ("MixtralForCausalLM",),
               device="cpu"),
    ),
)
