"""LongT5 (transformers modeling_longt5.py): T5 (t5.py's walk: decoder, cross-attention, feed-forward, heads) whose
encoder attends locally. `encoder_attention_type` "local" (LongT5LocalAttention, `LocalSelfAttention`): q/k/v/o on
every token, the sequence cut into blocks of block_len = local_radius + 1 (the last padded), each block's queries
against its own and its two neighbours' keys (3 x block_len, padded at the ends), einsum'd; "transient-global"
(LongT5TransientGlobalAttention, `TransientGlobalSelfAttention`): besides, g = tokens // global_block_size global
tokens, each the sum of its block's hidden states (an einsum of the states with a one-hot [tokens, g]: tokens x g x
d_model MACs a row), `global_input_layer_norm`'d and put through the same k and v, every block's queries attending
to them too (3 x block_len + g keys); block 0 holds `global_relative_attention_bias` beside `relative_attention_bias`
(lookups). The decoder is T5's. Heads: LongT5Model, LongT5ForConditionalGeneration, LongT5EncoderModel."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import UsageError
from . import t5
from .framework import infer
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Shapes, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import layers, pattern, signature, walked

_TYPES = ("local", "transient-global")


@dataclass(frozen=True)
class LongT5Variant(t5.T5Variant):
    """The encoder's attention: transient-global (else local), its block (local_radius + 1) and global block sizes."""
    transient_global: bool = False
    block_len: int = 128
    global_block: int = 16


def _v(s: ArchSpec) -> LongT5Variant:
    return s.variant_as(LongT5Variant)


def from_config(c: Cfg) -> ArchSpec:
    kind = c.get("encoder_attention_type", default=FROM_CLASS)
    if kind not in _TYPES:   # LongT5Block raises the same
        raise UsageError(f"{c.path}: config encoder_attention_type = {kind!r} is neither 'local' nor 'transient-global'")
    v = LongT5Variant(stack_embeds_follow_tie=True, transient_global=kind == "transient-global",
                      block_len=c.int("local_radius", default=FROM_CLASS) + 1,
                      global_block=c.int("global_block_size", default=FROM_CLASS))
    if v.transient_global and v.global_block == 0:
        raise UsageError(f"{c.path}: config global_block_size = 0 (transient-global attention divides by it)")
    return replace(t5.from_config(c), variant=v)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    tg = infer.has(T, pattern(WALKED_TG, "TransientGlobalSelfAttention.q"))
    w = WALKED_TG if tg else WALKED
    V, h = infer.shape(T, pattern(w, "shared") + "|" + pattern(w, "encoder.embed_tokens"), "shared embedding")
    q = f"encoder.block.{{bid}}.layer.0.{ATTENTION[tg].name}.q"
    inner = infer.shape(T, pattern(w, q), "encoder self-attention q")[0]
    buckets, a = infer.shape(T, pattern(w, "relative_attention_bias"), "relative_attention_bias")
    gated = infer.has(T, pattern(t5.WALKED_GATED, "DenseReluDense.wi_0"))
    f = infer.shape(T, pattern(t5.WALKED_GATED, "DenseReluDense.wi_0") if gated else pattern(t5.WALKED, "DenseReluDense.wi"),
                    "DenseReluDense.wi")[0]
    return ArchSpec(layers=infer.count_layers(T, layers(w, q)), hidden=h, heads=a, kv_heads=a, head_dim=inner // a,
                    intermediate=f, vocab=V, activation="gelu" if gated else "relu", gated_mlp=gated, norm="rmsnorm",
                    qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=not t5.untied_by_names(T, pattern(w, "shared"), pattern(w, "encoder.embed_tokens"),
                                                           pattern(w, "lm_head")),
                    decoder_layers=infer.count_layers(T, layers(t5.WALKED, t5.SELF_Q.format(stack="decoder"))),
                    relative_buckets=buckets, variant=LongT5Variant(stack_embeds_follow_tie=True, transient_global=tg),
                    assumptions=("no config: local_radius 127, global_block_size 16 (the config class's defaults), "
                                 "activation relu (gelu where gated)",), **common)


def _local(w: Recorder, path: str, L: int, n: int) -> None:
    """Each block's queries against its own and its neighbours' keys (einsum), in every one of L layers."""
    _blocks(w, path, L, n, 0)


def _transient_global(w: Recorder, path: str, L: int, n: int) -> None:
    """The global tokens (block sums, normed, through k and v), then _local's scores with them as more keys."""
    B, s = w.B, w.B.s
    g, h, inner = n // _v(s).global_block, s.hidden, s.heads * s.head_dim
    w.record(path + ".global_relative_attention_bias", (("weight", (s.relative_buckets, s.heads)),), layers=(0,))
    B.add("encoder.block.0.global_relative_attention_bias", "embedding", "encoder", 1, (B.b, n, g), (B.b, s.heads, n, g),
          params=s.relative_buckets * s.heads)
    B.add(w.label(path + " global aggregates (einsum)", L), "attention", "encoder", L, (B.b, n, h), (B.b, g, h),
          macs=B.b * g * n * h, extra_in=B.b * n * g)
    w.record(path + ".global_input_layer_norm", (("weight", (h,)),), L)
    B.norm(w.label(path + ".global_input_layer_norm", L), "encoder", (B.b, g), h, L, residual=False)
    for m in "kv":   # the same k and v (counted with the tokens')
        B.linear(w.label(f"{path}.{m} (global tokens)", L), "encoder", (B.b, g), h, inner, False, L, tied=True)
    _blocks(w, path, L, n, g)


def _blocks(w: Recorder, path: str, L: int, n: int, g: int) -> None:
    B, s = w.B, w.B.s
    bl = _v(s).block_len
    blocks = -(-n // bl)
    # per block and layer: block_len queries x (3 block_len + g) keys (+ the position bias and mask)
    B.attention(w.label(path, L) + f" ({blocks} blocks)", "encoder", s.heads, bl, 3 * bl + g, s.head_dim, L * blocks,
                causal=False, extra_ew=1)


ATTENTION = {False: t5.EncoderAttention("LocalSelfAttention", _local),
             True: t5.EncoderAttention("TransientGlobalSelfAttention", _transient_global)}


def walk(B: Builder) -> Recorder:
    return t5.walk(B, attention=ATTENTION[_v(B.s).transient_global])


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes:
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes()


WALKED, WALKED_TG = (walked(walk, "longt5", head="lm", decoder_layers=1, relative_buckets=1,
                            variant=LongT5Variant(stack_embeds_follow_tie=True, transient_global=tg))
                   for tg in (False, True))

_SIZES = dict(d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, vocab_size=99, local_radius=2, global_block_size=3)
_CLASSES = ("LongT5ForConditionalGeneration", "LongT5EncoderModel")

FAMILY = Family(
    name="longt5",
    model_types=("longt5",),
    signature=signature(WALKED, "LocalSelfAttention.q") + "|" + signature(WALKED_TG, "TransientGlobalSelfAttention.q"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm", "encoder-only"),
    head_rules=t5.LM_HEAD_RULES,
    no_head="encoder-only",
    default_head="lm",
    # transformers 5's LongT5Config turns tie_word_embeddings on when built; a config.json saying false (a config
    # changed after) unties every table, the stacks' embed_tokens included
    tie_rules=t5.TIES_BY_CONFIG,
    encoder_decoder=True,
    kv_cache=t5.kv_cache,
    before=("t5",),   # the decoder's names are T5's
    samples=(
        # 8 and 16 tokens: blocks of 3 (the last padded), 2 and 5 global tokens
        Sample("LongT5Config", _SIZES, _CLASSES),
        Sample("LongT5Config", _SIZES, ("LongT5Model",), infer=False),   # names as a tied LM's (T5Model's)
        Sample("LongT5Config", dict(_SIZES, encoder_attention_type="transient-global"), _CLASSES),
        # gated, a decoder deeper than the encoder, blocks of 5 (16 tokens: 4 blocks, the last padded); LongT5Config
        # turns tie_word_embeddings back on (false only drops the decoder's output scaling, an element-wise op)
        Sample("LongT5Config", dict(_SIZES, encoder_attention_type="transient-global", feed_forward_proj="gated-gelu",
                                    tie_word_embeddings=False, num_decoder_layers=3, local_radius=4, global_block_size=5),
               _CLASSES),
    ),
)
