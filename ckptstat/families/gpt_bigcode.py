"""GPTBigCode: SantaCoder, StarCoder (transformers modeling_gpt_bigcode.py, configuration_gpt_bigcode.py). GPT-2's
layout (gpt2.py: learned positions wpe, pre-LayerNorm ln_1 / ln_2, c_attn, c_proj, mlp.c_fc / c_proj, ln_f) with
nn.Linear weights ([out, in], not GPT-2's Conv1D), multi-query attention by default and the task heads score and
classifier (DecoderLayout.task_heads): `multi_query` (default true) gives one K/V head, so c_attn is [h + 2d, h];
without it [3h, h]. The single K/V head is repeated to the a query heads before eager attention's matmuls (repeat_kv),
and the cache keeps it unrepeated (g = 1). The LM head is tied to wte unless tie_word_embeddings is false
(GPTBigCodeForCausalLM._tied_weights_keys). llama.cpp names it `starcoder`.

Tensor names are GPT-2's (`transformer.h.N.attn.c_attn`): only the shapes tell them apart, so a file
without config.json is detected as gpt2 (the family signature below never wins over gpt2.py's)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from . import gpt2
from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors

BIGCODE = replace(gpt2.GPT2, conv1d=False, task_heads=("seqcls", "tokcls"))
_LAYOUTS = layout.Layouts({"gpt_bigcode": BIGCODE})


def from_config(c: Cfg) -> ArchSpec:
    s = _LAYOUTS.from_config(c)
    return replace(s, kv_heads=1 if c.get("multi_query", default=True) else s.heads)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's widths; the K/V width c_attn's rows beyond h give: one head of d (multi-query), else h, whose
    head count is not in the shapes (head_dim assumed 64)."""
    s = _LAYOUTS.from_tensors(T, common)
    h, kv = s.hidden, s.kv_heads * s.head_dim
    notes: tuple[str, ...] = ()
    if kv == h:
        a, note = infer.heads_for(h, 64)
        g, notes = a, (note,)
    else:
        a, g = h // max(kv, 1), 1
    return replace(s, heads=a, kv_heads=g, head_dim=h // a,
                   assumptions=notes + tuple(n for n in s.assumptions if "head_dim" not in n))


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """GGUF starcoder metadata as a GPTBigCodeConfig. llama.cpp's StarCoderModel writes head_count_kv 1 and
    feed_forward_length 4 x n_embd whatever the config says: multi-query and the MLP's width are read from the
    first layer's attn_qkv ([3h, h] without multi-query) and ffn_up."""
    cfg = infer.gguf_config(arch, metadata, tensors, "GPTBigCodeForCausalLM")
    if cfg is None:
        return None
    qkv, up = tensors.get("blk.0.attn_qkv.weight"), tensors.get("blk.0.ffn_up.weight")
    cfg.pop("num_key_value_heads", None)
    return dict(cfg, model_type="gpt_bigcode", n_inner=up.shape[0] if up is not None else cfg.get("intermediate_size"),
                multi_query=qkv is None or qkv.shape[0] != 3 * cfg.get("hidden_size", 0))


_SIZES = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=64)

FAMILY = Family(
    name="gpt_bigcode",
    # GPT-2's names: gpt2 is tried first, so a file without config is read as GPT-2 (see above)
    **{**layout.family_fields(_LAYOUTS.by_type, "attn_qkv"), "from_config": from_config, "from_tensors": from_tensors},
    gguf_architectures=("starcoder",),
    gguf_config=gguf_config,
    samples=(
        Sample("GPTBigCodeConfig", _SIZES, ("GPTBigCodeModel", "GPTBigCodeForCausalLM"), detected_as="gpt2"),
        Sample("GPTBigCodeConfig", dict(_SIZES, multi_query=False, tie_word_embeddings=False, num_labels=3, pad_token_id=0),
               ("GPTBigCodeForCausalLM", "GPTBigCodeForSequenceClassification", "GPTBigCodeForTokenClassification"),
               detected_as="gpt2"),
    ),
)
