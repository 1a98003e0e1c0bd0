"""Falcon (transformers modeling_falcon.py, configuration_falcon.py), all three decoder layouts its
FalconConfig builds, as layouts (layout.py) the config picks by name (ArchSpec.layout):

* Falcon-7B: multi_query (one K/V head), parallel_attn (attention and MLP read one input_layernorm);
* Falcon-40B/180B, Falcon2: new_decoder_architecture, num_kv_heads grouped K/V heads, two LayerNorms
  (ln_attn, ln_mlp: DecoderLayout.parallel_mlp_norm) when num_ln_in_parallel_attn is 2 (its default there), one
  otherwise; transformers 5.25 caches the g K/V heads (5.24 cached them broadcast to the a query heads);
* Falcon-RW: multi_query and parallel_attn off (input_layernorm, then post_attention_layernorm), ALiBi.

q, k and v are fused in query_key_value [(a + 2g) d, h] (g = 1 multi-query; a for the old multi-head layout, whose
fused width is 3h), `bias` switches every linear's bias, the MLP is dense_h_to_4h / activation / dense_4h_to_h
(ffn_hidden_size, 4h by default), and the LM head is tied to word_embeddings by default (FalconForCausalLM's
_tied_weights_keys: lm_head.weight). FalconModel computes the rotary table even with ALiBi
(DecoderLayout.unused_rotary). A new-layout layer without parallel_attn, and an old-layout one with
num_ln_in_parallel_attn 2, are refused: transformers 5.24's FalconDecoderLayer fails on them (a norm its forward
reads is never created). llama.cpp names it `falcon` (the parallel layouts only: attn_norm is 40B's ln_mlp,
attn_norm_2 its ln_attn)."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from ..errors import NoAnalyticModel
from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, KVLines, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

# Falcon-7B's: one input_layernorm that attention and MLP both read (from_config reads the sizes and the one `bias`)
FALCON = DecoderLayout(
    norm="layernorm", placement="parallel", fused_qkv=True, mlp="plain", act_key="activation", tied_default=True,
    paths=Paths(body="transformer", embed="word_embeddings", layers="h", attn="self_attention", qkv="query_key_value",
                o="dense", up="dense_h_to_4h", down="dense_4h_to_h", norm="ln_f"), task_heads=("seqcls", "tokcls", "qa"))
# Falcon-40B/180B's ln_attn and ln_mlp (llama.cpp: attn_norm_2 and attn_norm)
TWO_LN = replace(FALCON, parallel_mlp_norm=True, paths=replace(FALCON.paths, attn_in="ln_attn", mlp_in="ln_mlp"),
                 gguf_renames=(("attn_norm", "attn_norm_2"), ("ffn_norm", "attn_norm")))
# Falcon-RW's sequential layers (llama.cpp's falcon has no post_attention_layernorm)
SEQUENTIAL = replace(FALCON, placement="pre", gguf_renames=(("ffn_norm", None),))


def _name(norms: str, alibi: bool) -> str:
    return "falcon" + norms + "_alibi" * alibi


# every layout FalconConfig can run: the norms (one, two, sequential) x ALiBi (new_decoder_architecture changes only the
# K/V head count, the spec's: ArchSpec.kv_heads); 7B's first
_LAYOUTS = layout.Layouts({
    _name(norms, alibi): replace(lay, positions="alibi" if alibi else "rotary", unused_rotary=alibi)
    for norms, lay in (("", FALCON), ("_ln2", TWO_LN), ("_seq", SEQUENTIAL)) for alibi in (False, True)})


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size", "n_embed"), c.int("num_attention_heads", "n_head")
    new = bool(c.get("new_decoder_architecture", default=False))
    mq = bool(c.get("multi_query", default=True))
    g = c.int("num_kv_heads", default=a) if new or not mq else 1
    parallel = bool(c.get("parallel_attn", default=True))
    n_ln = c.int("num_ln_in_parallel_attn", default=2 if new else 1)
    if new and not parallel or not new and parallel and n_ln == 2:   # a norm the forward reads is never created
        raise NoAnalyticModel(f"{c.path}: config new_decoder_architecture {new}, parallel_attn {parallel}, "
                              f"num_ln_in_parallel_attn {n_ln}: transformers' FalconDecoderLayer fails on it")
    bias = bool(c.get("bias", default=False))
    norms = "_ln2" if parallel and n_ln == 2 else "" if parallel else "_seq"
    return ArchSpec(layers=c.int("num_hidden_layers", "n_layer"), hidden=h, heads=a, kv_heads=g, head_dim=h // a,
                    intermediate=c.int("ffn_hidden_size", default=4 * h), vocab=c.int("vocab_size"),
                    context=c.int("max_position_embeddings", default=0),
                    activation=str(c.get("activation", default="gelu")), qkv_bias=bias, o_bias=bias, mlp_bias=bias,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    layout=_name(norms, bool(c.get("alibi", default=False))), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's widths (layout.spec_from_tensors); the layout by its norms (ln_attn: 40B's, post_attention_layernorm:
    RW's sequential layers, else 7B's), the heads from the fused width: multi-query where it is h + 2d, else d 64 as
    every released Falcon (or the largest d for which (a + 2g) d is the width); rotary assumed, never ALiBi."""
    two_ln = infer.has(T, layout.pattern(TWO_LN, "attn_norm_2"))
    norms = "_ln2" if two_ln else "_seq" if infer.has(T, layout.pattern(SEQUENTIAL, "ffn_norm")) else ""
    s = layout.spec_from_tensors(_LAYOUTS.by_type[_name(norms, False)], T, common)
    h, qkv = s.hidden, infer.shape(T, layout.pattern(FALCON, "attn_qkv"), "query_key_value")[0]
    mq = not two_ln and qkv != 3 * h and (qkv - h) % 2 == 0 and h % ((qkv - h) // 2 or 1) == 0 and qkv < 3 * h
    new = two_ln or (qkv != 3 * h and not mq)
    if mq:   # one K and one V head: the fused width is h + 2d, so d is exact
        d = (qkv - h) // 2
    else:    # 64 as every released Falcon, else the largest d for which (a + 2g) d is the fused width
        d = next((x for x in (64, 128, 32, 16, 8, 4, 2, 1) if h % x == 0 and qkv % x == 0 and (qkv // x - h // x) % 2 == 0), 1)
    a = h // d
    g = (qkv // d - a) // 2 if new else a if qkv == 3 * h else 1
    return replace(s, heads=a, kv_heads=g, head_dim=d, layout=_name(norms, False),
                   assumptions=(f"no config: head_dim assumed {d}, rotary positions (not ALiBi)",))


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """transformers 5.25's FalconAttention caches the g K/V heads (1 with multi_query, a in the old multi-head layout)
    and repeats them to the a query heads at the attention (repeat_kv); 5.24 cached them repeated."""
    per_tok = 2 * s.layers * s.kv_heads * s.head_dim * ab
    return [(f"b={b}, s={n}", per_tok * b * n,
             f"2 x L x {s.kv_heads} heads x d x s x b x {ab} B = {per_tok:,} B/token (transformers' cache)")]


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """convert_hf_to_gguf.py FalconModel writes head_count_kv (1 for Falcon-7B's multi-query) and a
    feed_forward_length of 4h whatever ffn_hidden_size is, so the MLP width comes from ffn_up. llama.cpp's
    falcon is the parallel layout only: one LayerNorm (attn_norm: 7B's input_layernorm, Falcon2's) or two
    (40B/180B: attn_norm is ln_mlp, attn_norm_2 ln_attn); a new-layout file shows itself by attn_norm_2 or
    grouped K/V heads."""
    cfg = infer.gguf_config(arch, metadata, tensors, "FalconForCausalLM")
    if cfg is None or arch != "falcon":
        return None
    g = cfg.pop("num_key_value_heads", 1)
    two_ln = any(n.endswith(".attn_norm_2.weight") for n in tensors)
    new = two_ln or g > 1
    cfg.update(num_kv_heads=g, new_decoder_architecture=new, multi_query=not new, parallel_attn=True,
               num_ln_in_parallel_attn=2 if two_ln else 1, bias="blk.0.attn_qkv.bias" in tensors)
    up = tensors.get("blk.0.ffn_up.weight")
    if up is not None and len(up.shape) == 2:
        cfg["ffn_hidden_size"] = up.shape[0]
    return cfg


# llama.cpp's attn_norm is 7B's input_layernorm, or 40B's ln_mlp where attn_norm_2 (ln_attn) shows. The converter
# reorders the fused query_key_value rows of grouped K/V heads (tensor_data_layout "jploski"; 7B's multi-query rows are
# already q, k, v): `ckptstat diff` replays it (gguf_transforms).
_GGUF_ONE_LN, _GGUF_TWO_LN = layout.gguf_tensor_names(FALCON), layout.gguf_tensor_names(TWO_LN)


def gguf_table(arch: str, names: Collection[str]) -> tuple[tuple[str, str], ...]:
    return _GGUF_TWO_LN if any(n.endswith(".attn_norm_2.weight") for n in names) else _GGUF_ONE_LN


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, vocab_size=99, max_position_embeddings=64)

FAMILY = Family(
    name="falcon",
    # BLOOM's files share h.N.self_attention.query_key_value (BLOOM's family is tried before this one)
    **{**layout.family_fields(_LAYOUTS.by_type, "attn_qkv"), "model_types": ("falcon",), "from_config": from_config,
       "from_tensors": from_tensors, "kv_cache": kv_cache, "gguf_tensor_names": _GGUF_ONE_LN},
    gguf_config=gguf_config, gguf_table=gguf_table,
    # FalconModel.modify_tensors: query_key_value's weight rows, kv groups [g, heads / g + 2, d], stored as all q, all k,
    # all v (a bias would not fit its view: the converter writes none)
    gguf_transforms=layout.row_rewrites("falcon", FALCON, "qkv_groups", bias=False),
    samples=(
        Sample("FalconConfig", _SIZES, ("FalconModel", "FalconForCausalLM")),     # 7B: multi-query, parallel
        Sample("FalconConfig", dict(_SIZES, new_decoder_architecture=True, num_kv_heads=2, tie_word_embeddings=False),
               ("FalconForCausalLM",)),                                              # 40B
        Sample("FalconConfig", dict(_SIZES, new_decoder_architecture=True, num_kv_heads=2, num_ln_in_parallel_attn=1),
               ("FalconForCausalLM",)),                                              # Falcon2-11B
        # RW: ALiBi, multi-head, sequential, biased; inference cannot tell ALiBi from rotary (FLOPs only)
        Sample("FalconConfig", dict(_SIZES, alibi=True, multi_query=False, parallel_attn=False, bias=True),
               ("FalconForCausalLM",)),
        # the new layout's two LayerNorms under ALiBi, multi-query in a sequential layer (no released model)
        Sample("FalconConfig", dict(_SIZES, new_decoder_architecture=True, num_kv_heads=1, alibi=True, bias=True),
               ("FalconForCausalLM",)),
        Sample("FalconConfig", dict(_SIZES, parallel_attn=False), ("FalconForCausalLM",)),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("FalconConfig", dict(_SIZES, num_labels=3, pad_token_id=0),
               ("FalconForSequenceClassification", "FalconForTokenClassification", "FalconForQuestionAnswering"),
               device="cpu"),
    ),
)
