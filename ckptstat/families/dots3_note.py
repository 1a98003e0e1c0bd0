"""Dots3Note's text decoder (transformers modular_dots3_note.py, Dots3NoteForCausalLM; model_type dots3_note_text):
DeepSeek-V3.2's latent attention with its indexer (GLM-5's, GlmMoeDsaIndexer) and DeepSeek-V3's MoE (deepseek.py, its
layout deepseek.V32), plus an RMSNorm over the shared rope key before its rotary (k_rope_only_layernorm,
DecoderLayout.k_rope_norm) and a sigmoid gate per head on the attention's output (g_proj, h -> a: DecoderLayout.attn_gate
"head"); the query and KV latents' rescaling by sqrt(h / rank) is elementwise. Its shared experts are one gated MLP of
n_shared_experts x shared_experts_intermediate_size (not moe_intermediate_size); the routed experts are transformers 5's
grouped_mm (each token's top-k rows), the mlp_layer_types "dense" layers a dense MLP of intermediate_size. KV cache: the
MLA latent + rope key and the indexer's key per layer (deepseek.kv_cache), one head kept whole on every tensor-parallel
rank.

Described: layer_types "indexed_attention" and "full_attention" (use_dsa false's: no indexer, nor its key in the cache:
Latent.index_shared) with the model's own sizes (per_layer_config empty). The released checkpoint's "sliding_attention"
layers (their own heads, ranks and head sizes through per_layer_config, a sliding window over the latent cache) are not:
NoAnalyticModel, answered on the meta device. llama.cpp has no architecture for it (no GGUF names)."""
from __future__ import annotations

from dataclasses import replace

from ..errors import NoAnalyticModel
from . import deepseek
from .framework import layout
from .framework.base import ArchSpec, Cfg, Family, Sample
from .framework.layout import Paths

DOTS3 = replace(deepseek.V32, k_rope_norm=True, attn_gate="head", task_heads=(),
                paths=Paths(shared="shared_experts", attn_gate="g_proj"))


def from_config(c: Cfg) -> ArchSpec:
    kinds = c.get("layer_types", default=None) or ()
    if any(k not in ("indexed_attention", "full_attention") for k in kinds):
        raise NoAnalyticModel(f"{c.path}: config layer_types other than 'indexed_attention' / 'full_attention': not "
                              "described by the op template")
    if c.get("per_layer_config", default=None):
        raise NoAnalyticModel(f"{c.path}: config per_layer_config (layers of their own sizes): not described by the op "
                              "template")
    # no layer slides: full attention to the op template's window rules, the indexer DOTS3's on the indexed layers
    c = Cfg({**c.cfg, "layer_types": None, "sliding_window": None}, c.path, c.model_type, c.head, c.common)
    # Dots3NoteTextConfig: the dense layers by mlp_layer_types, else from first_k_dense_replace (its default 1)
    spec = deepseek.latent_spec(DOTS3, c, first=c.int("first_k_dense_replace", default=1))
    # the released config's name for it, which the class folds into shared_experts_intermediate_size
    key = "moe_shared_expert_intermediate_size" if c.get("moe_shared_expert_intermediate_size", default=None) \
        else "shared_experts_intermediate_size"
    assert spec.latent is not None, "DOTS3 is a latent layout"
    full = tuple(i for i, k in enumerate(kinds) if k == "full_attention")
    return replace(spec, shared_intermediate=c.int(key) * c.int("n_shared_experts") if spec.experts else 0,
                   latent=replace(spec.latent, index_shared=full))


FAMILY = Family(
    name="dots3_note",
    # tried before them: its latent attention is deepseek's, its attention gate (g_proj) bailing_hybrid's
    before=("deepseek", "bailing_hybrid"),
    **{**layout.family_fields({"dots3_note_text": DOTS3}, "attn_kv_a_mqa"),
       "signature": r"(^|[./])self_attn[./]k_rope_only_layernorm[./]", "from_config": from_config,
       "from_tensors": lambda T, common: deepseek.from_tensors(T, dict(common, model_type="dots3_note_text"), DOTS3),
       "kv_cache": deepseek.kv_cache, "gguf_tensor_names": ()},
    cache_heads=lambda s: 1,      # the latent: one head, whole on every tensor-parallel device
    gguf_architectures=(),
    samples=(
        # routing needs real values; the indexer's top-k smaller than the test's sequences (it masks keys)
        Sample("Dots3NoteTextConfig", dict(deepseek._SIZES, n_group=2, topk_group=1, index_n_heads=2, index_head_dim=8,
                                           index_topk=4, shared_experts_intermediate_size=20, pad_token_id=0,
                                           bos_token_id=1, eos_token_id=2, mlp_layer_types=["dense", "sparse", "sparse"],
                                           layer_types=["indexed_attention"] * 3),
               ("Dots3NoteTextModel", "Dots3NoteForCausalLM"), device="cpu"),
        # use_dsa false's full_attention layers: no indexer there
        Sample("Dots3NoteTextConfig", dict(deepseek._SIZES, n_group=1, topk_group=1, index_n_heads=2, index_head_dim=8,
                                           index_topk=4, shared_experts_intermediate_size=20, pad_token_id=0,
                                           bos_token_id=1, eos_token_id=2, mlp_layer_types=["dense", "sparse", "sparse"],
                                           layer_types=["indexed_attention", "full_attention", "indexed_attention"]),
               ("Dots3NoteForCausalLM",), device="cpu"),
    ),
)
