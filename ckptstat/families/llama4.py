"""Llama 4's language model (transformers modeling_llama4.py: Llama4ForCausalLM, the text model of Llama4ForConditionalGeneration,
whose vision tower families/wrappers.py leaves outside): the LLaMA layout (layout.py) with

- NoPE layers: no rotary where no_rope_layers says 0 (by default every no_rope_layer_interval-th = 4th layer);
- chunked attention: the layers with rotary attend only their chunk of attention_chunk_size tokens
  (layer_types "chunked_attention"; ArchSpec.chunked_attention, sliding_window the chunk: DynamicCache keeps
  chunk - 1 tokens of them, as of a sliding layer), the NoPE layers all tokens;
- q and k L2-normalised per head without a weight on the layers with rotary, where use_qk_norm (Scout; not Maverick);
- feed_forward: in the moe_layers (every interleave_moe_layer_step-th layer) a router (feed_forward.router, top
  num_experts_per_tok of num_local_experts by logit, sigmoid of those scores) whose scores scale the input of every
  expert, the fused experts gate_up_proj [E, h, 2f] and down_proj [E, f, h] run on every token (DecoderLayout.
  every_expert: FlopCounterMode counts E x b x s rows), plus a shared expert of intermediate_size summed in; the
  other layers a dense gated MLP of intermediate_size_mlp.

Active parameters (the `active` figure): those one token uses by its routing, the router's top-k experts (plus the
shared expert and every dense part), as for every MoE here (Llama-4-Scout-17B-16E: 17B of 109B), although the eager
forward multiplies every expert (by a score of 0 outside the top-k). The NoPE layers' attention-temperature scaling
(attn_temperature_tuning: q times a per-position factor) is element-wise and not counted."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .framework import infer, layout, walk_names
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors, class_default
from .framework.decoders import MAX_COUNT
from .framework.layout import DecoderLayout, Paths

LLAMA4 = DecoderLayout(qk_norm="l2", qk_norm_key="use_qk_norm", nope="flags", mlp="routed", router="topk_sigmoid",
                       every_expert=True, shared="summed", dense_layers=True, mlp_bias=False,
                       paths=Paths(mlp="feed_forward", router="router"))


def _layers(c: Cfg, key: str, L: int) -> list[int] | None:
    v = c.get(key, default=None)
    if v is not None and (not isinstance(v, list) or any(type(i) is not int or not 0 <= i < min(L, MAX_COUNT) for i in v)):
        raise UsageError(f"{c.path}: config {key} is not a list of layer indices below {L}")
    return v


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(LLAMA4, c)   # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    L = spec.layers
    spec = layout.with_experts(spec, c, "num_local_experts")
    spec = replace(spec, intermediate=c.int("intermediate_size_mlp", default=FROM_CLASS))
    fe = c.int("intermediate_size", default=FROM_CLASS)
    step = c.int("interleave_moe_layer_step", default=FROM_CLASS)
    moe = _layers(c, "moe_layers", L)
    moe = list(range(step - 1, L, step)) if moe is None and step else moe or []
    # Llama4TextConfig: layer_types chunked where rotary applies and attention_chunk_size is set, full elsewhere
    chunk = c.get("attention_chunk_size", default=FROM_CLASS)
    types = c.get("layer_types", default=None)
    if types is None:
        types = ["full_attention" if i in spec.nope_layers or chunk is None else "chunked_attention" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(t not in ("full_attention", "chunked_attention") for t in types):
        raise UsageError(f"{c.path}: config layer_types is not a list of {L} 'full_attention' / 'chunked_attention'")
    chunked = tuple(i for i, t in enumerate(types) if t == "chunked_attention")
    if chunked and chunk is None:   # transformers 5.25's forward raises a TypeError on it too
        raise UsageError(f"{c.path}: config attention_chunk_size is null, but layer_types has chunked_attention layers")
    if chunked and (isinstance(chunk, bool) or not isinstance(chunk, int) or not 0 < chunk <= 1 << 31):
        raise UsageError(f"{c.path}: config attention_chunk_size = {str(chunk)[:40]} is not a positive integer up to "
                         f"{1 << 31:,}")
    return replace(spec, moe_intermediate=fe, shared_intermediate=fe, dense_layers=tuple(i for i in range(L) if i not in moe),
                   sliding_window=chunk if chunked else None, sliding_layers=chunked if len(chunked) < L else (),
                   chunked_attention=bool(chunked))


_ROUTER = re.compile(layout.pattern(LLAMA4, "ffn_gate_inp", layer=r"(\d+)"))   # group 2: the layer


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Widths from the shapes; head_dim, the NoPE layers, the chunk, q/k norms and top-k as Llama4TextConfig
    defaults them (said in the assumptions)."""
    lay = LLAMA4
    V, h = walk_names.layout_shape(T, lay, "token_embd")
    q, kv = walk_names.layout_shape(T, lay, "attn_q")[0], walk_names.layout_shape(T, lay, "attn_k")[0]
    E, _, f2 = walk_names.shape(T, layout.every_module(lay), "experts.gate_up_proj")
    d, k, chunk, every = (int(class_default("llama4_text", key)) for key in
                          ("head_dim", "num_experts_per_tok", "attention_chunk_size", "no_rope_layer_interval"))
    d = d if q % d == 0 and kv % d == 0 else kv      # else one key/value head (KV-cache bytes use k_proj: exact)
    L = infer.count_layers(T, lay.paths.numbered())
    sparse = {int(m.group(2)) for n in T if (m := _ROUTER.search(n))}
    dense = infer.find(T, layout.pattern(lay, "ffn_gate"))
    nope = tuple(i for i in range(L) if (i + 1) % every == 0)
    notes = (f"no config: head_dim {d} (KV-cache bytes use the k_proj width, which is exact), experts per token "
             f"(top-k) {k}, no rotary on every {every}th layer, chunked "
             f"attention ({chunk} tokens) on the others and q/k L2 norms assumed, Llama4TextConfig's defaults",)
    chunked = tuple(i for i in range(L) if i not in nope)
    return ArchSpec(layers=L, hidden=h, heads=q // d, kv_heads=kv // d, head_dim=d, vocab=V,
                    intermediate=dense.shape[0] if dense is not None else f2 // 2, gated_mlp=True, norm="rmsnorm",
                    qkv_bias=walk_names.layout_has(T, lay, "attn_q", "bias"),
                    o_bias=walk_names.layout_has(T, lay, "attn_output", "bias"), mlp_bias=False,
                    tied_embeddings=not walk_names.layout_has(T, lay, "output"), experts=E, top_k=k,
                    activation="silu", moe_intermediate=f2 // 2, shared_intermediate=f2 // 2,
                    dense_layers=tuple(i for i in range(L) if i not in sparse), nope_layers=nope,
                    sliding_window=chunk, sliding_layers=chunked if len(chunked) < L else (), chunked_attention=True,
                    assumptions=notes, **dict(common, model_type="llama4_text"))


# convert_hf_to_gguf.py Llama4Model: LLaMA's keys with feed_forward_length the dense layers' intermediate_size_mlp,
# expert_feed_forward_length the experts' intermediate_size, and interleave_moe_layer_step; llama.cpp fixes the rest as
# Llama4TextConfig defaults it (llama-model.cpp: NoPE every 4th layer, chunks of 8192)
_GGUF_KEYS = {**infer.GGUF_KEYS, "feed_forward_length": "intermediate_size_mlp",
              "expert_feed_forward_length": "intermediate_size", "interleave_moe_layer_step": "interleave_moe_layer_step"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    cfg = infer.gguf_config(arch, metadata, tensors, "Llama4ForCausalLM", keys=_GGUF_KEYS) if arch == "llama4" else None
    if cfg is not None:
        cfg.update(model_type="llama4_text", attention_bias="blk.0.attn_q.bias" in tensors)
    return cfg


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=4, head_dim=8, intermediate_size_mlp=64, num_local_experts=4,
              num_experts_per_tok=1, attention_chunk_size=4, pad_token_id=0)

FAMILY = Family(
    name="llama4",
    before=("llama",),   # tried before it: its q_proj names match LLaMA's
    # Llama4ForCausalLM: `model.` + lm_head, _tied_weights_keys lm_head, untied by default
    **{**layout.family_fields({"llama4_text": LLAMA4}, "ffn_gate_inp"), "from_config": from_config,
       "from_tensors": from_tensors},
    gguf_architectures=("llama4",), gguf_config=gguf_config,
    samples=(
        # every_expert: the experts' bmm's run on the meta device; interleaved dense and MoE layers, Maverick's
        # pattern (no q/k norms, every other layer routed), one with a bias and two experts per token
        Sample("Llama4TextConfig", dict(_SIZES, interleave_moe_layer_step=2), ("Llama4TextModel", "Llama4ForCausalLM")),
        Sample("Llama4TextConfig", dict(_SIZES, use_qk_norm=False, num_experts_per_tok=2, attention_bias=True,
                                        tie_word_embeddings=True), ("Llama4ForCausalLM",)),
    ),
)
