"""Fuyu (transformers modeling_fuyu.py, configuration_fuyu.py): a Persimmon language model (persimmon.py's layout),
beside it `vision_embed_tokens`, a biased linear embedding of an image's flattened patches (patch_size^2 x
num_channels -> hidden; `patch_embed`), and an LM head untied by default (FuyuForCausalLM._tied_weights_keys, the
wrapper's tie_word_embeddings). Saved as transformers 5 writes it (conversion_mapping.py's "fuyu" renames reverted):
`language_model.model.*` (FuyuModel's too), `language_model.lm_head`, `vision_embed_tokens`; in memory
`model.language_model.*`, `lm_head`, `model.vision_embed_tokens`. The op template is the text-only forward:
the patch embedding's parameters count, it runs on no token. The language model's sizes are text_config's, or the
top level's in a flat config (as the hub's are saved). llama.cpp has no architecture for it."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import layout, walk_names
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .persimmon import PERSIMMON

FUYU = replace(PERSIMMON, patch_embed=True, task_heads=(), paths=replace(
    PERSIMMON.paths, body="language_model.model", base="language_model.model", lm_head="language_model.lm_head"))
_FIELDS = layout.family_fields({"fuyu": FUYU}, "attn_qkv")


def from_config(c: Cfg) -> ArchSpec:
    text = c.sub("text_config", "persimmon") if isinstance(c.cfg.get("text_config"), dict) \
        else Cfg(c.cfg, c.path, "persimmon", c.head, c.common)
    return replace(layout.spec_from_config(FUYU, text), patch_dim=c.int("patch_size") ** 2 * c.int("num_channels"),
                   tied_embeddings=bool(c.get("tie_word_embeddings", default=False)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    spec = _FIELDS["from_tensors"](T, common)
    return replace(spec, patch_dim=walk_names.shape(T, layout.every_module(FUYU), FUYU.paths.patch)[1])


_TEXT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
             max_position_embeddings=64, pad_token_id=0)

FAMILY = Family(
    name="fuyu",
    before=("persimmon",),   # tried before it: the same language_model.layers.N.self_attn.query_key_value
    **{**_FIELDS, "gguf_tensor_names": (), "from_config": from_config, "from_tensors": from_tensors,
       "signature": r"(^|[./])vision_embed_tokens[./]"},
    gguf_architectures=(),   # llama.cpp has no architecture for it: no GGUF names either
    samples=(
        Sample("FuyuConfig", dict(text_config=_TEXT, patch_size=4, num_channels=3), ("FuyuForCausalLM",)),
        # FuyuModel's file and a tied FuyuForCausalLM's hold the same names (language_model.model.*): no name says
        # which head it is (read with no config, as the LM)
        Sample("FuyuConfig", dict(text_config=_TEXT, patch_size=4, num_channels=3), ("FuyuModel",), infer=False),
        Sample("FuyuConfig", dict(text_config=dict(_TEXT, partial_rotary_factor=0.25), patch_size=2, num_channels=3,
                                  tie_word_embeddings=True), ("FuyuForCausalLM",), infer=False),
    ),
)
