"""T5Gemma (transformers modeling_t5gemma.py): an encoder-decoder of Gemma-2 blocks, each stack built from its own
nested config (T5GemmaConfig's `encoder` and `decoder`, T5GemmaModuleConfig: widths, depths and heads may differ, the
decoder's cross-attention reading the encoder's width). A stack is a token lookup scaled by sqrt(hidden), layers of
sandwich-normed (pre and post RMSNorm, weight only) self-attention with GQA and rotary (bidirectional in the encoder,
causal in the decoder; sliding or full by `layer_types`, the window masking but not shortening the eager matmuls),
cross-attention in the decoder (its own pre/post norms, k/v from the encoder's width, no rotary), a GeGLU MLP between
pre/post feed-forward norms, then a final `norm`. The attention scores are tanh soft-capped (attn_logit_softcapping),
the LM head's logits too (final_logit_softcapping); T5GemmaForConditionalGeneration's `lm_head.out_proj` is tied to the
decoder's embed_tokens by tie_word_embeddings. The classifiers' `score.out_proj` (biased) runs on every token of the
decoder, or, with config is_encoder_decoder false, of the encoder alone (T5GemmaEncoderModel under `model`).

The architecture is stated once, in `walk` (framework/recorder.py's Recorder): the op template, the expected tensors
(every head) and the name look-ups come from one walk. The decoder's sizes ride in `T5GemmaVariant.decoder` (an
ArchSpec of its own); the spec's own fields are the encoder's."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..errors import UsageError
from .framework import infer
from .framework.archspec import Variant
from .framework.base import ArchSpec, Cfg, Family, HeadRule, KVLines, Sample, Shapes, Tensors, TieRule, decoder_kv_cache
from .framework.ops import Builder, window_groups
from .framework.recorder import Recorder
from .framework.walk_names import layers, pattern, shape, signature, walked


@dataclass(frozen=True)
class T5GemmaVariant(Variant):
    """The decoder stack's sizes (its own T5GemmaModuleConfig; None: the encoder's, as a tiny name walk has), and
    whether the model runs the decoder at all (config is_encoder_decoder false: the encoder alone)."""
    decoder: ArchSpec | None = None
    encoder_decoder: bool = True


def _variant(s: ArchSpec) -> T5GemmaVariant:
    return s.variant_as(T5GemmaVariant) if s.variant is not None else T5GemmaVariant()


def decoder(s: ArchSpec) -> ArchSpec | None:
    """The decoder stack's spec, None where the model runs the encoder alone."""
    v = _variant(s)
    return (v.decoder or s) if v.encoder_decoder and s.head != "encoder-only" else None


def stack_fields(c: Cfg, every: int = 2) -> dict[str, Any]:
    """One stack's ArchSpec fields from its T5GemmaModuleConfig (Gemma2's: a global layer every 2nd by default;
    `every`: another period, T5Gemma2's Gemma-3 stacks' 6)."""
    L, h, a = c.int("num_hidden_layers"), c.int("hidden_size"), c.int("num_attention_heads")
    types = c.get("layer_types", default=None)
    if types is None:
        types = ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(L)]
    if not isinstance(types, list) or len(types) != L:
        raise UsageError(f"{c.path}: config layer_types = {types!r} is not a list of {L} layer types")
    window, bias = c.int("sliding_window", default=0), bool(c.get("attention_bias", default=False))
    sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention") if window else ()
    return dict(layers=L, hidden=h, heads=a, kv_heads=c.int("num_key_value_heads"),
                head_dim=c.int("head_dim", default=h // a), intermediate=c.int("intermediate_size"),
                vocab=c.int("vocab_size"), activation=str(c.get("hidden_activation", default="gelu_pytorch_tanh")),
                gated_mlp=True, norm="rmsnorm",
                qkv_bias=bias, o_bias=bias, mlp_bias=False,
                sliding_window=(window or None) if sliding else None,
                sliding_layers=sliding if len(sliding) < L else (),
                attn_softcap=c.get("attn_logit_softcapping", default=None) is not None,
                logit_softcap=c.get("final_logit_softcapping", default=None) is not None,
                context=c.int("max_position_embeddings", default=0))


def from_config(c: Cfg) -> ArchSpec:
    enc = stack_fields(c.sub("encoder", "t5_gemma_module"))
    dec = ArchSpec(**stack_fields(c.sub("decoder", "t5_gemma_module")), **c.common)
    # T5GemmaForConditionalGeneration and T5GemmaModel always run both stacks (they set or require it)
    both = c.head in ("lm", "base") or bool(c.get("is_encoder_decoder", default=True))
    return ArchSpec(**bidirectional(enc), **c.common, tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    decoder_layers=dec.layers if both else 0, variant=T5GemmaVariant(dec, both))


def bidirectional(enc: dict[str, Any]) -> dict[str, Any]:
    """The encoder's fields less its window: it masks bidirectional attention, which no cache keeps and whose eager
    matmuls span every key; the spec's sliding_window speaks of causal layers (flops' windowed-kernel estimate)."""
    return dict(enc, sliding_window=None, sliding_layers=())


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Each stack's sizes from its embed_tokens, q/k projections and gate_proj; head_dim 256 where it divides both
    projections' widths (the released models'), and Gemma-2's window (4096 on every other layer) and soft-capping."""
    notes = ["no config: head_dim assumed 256 where it divides the projections (else their gcd); sliding window 4096 "
             "on every other layer and soft-capping assumed as in the released models (only the KV cache depends on them)"]

    def stack(name: str) -> dict[str, Any]:
        V, h = shape(T, WALKED, f"{name}.embed_tokens")
        q, k = (shape(T, WALKED, f"{name}.layers.{{bid}}.self_attn.{m}_proj")[0] for m in "qk")
        d = 256 if q % 256 == 0 and k % 256 == 0 else math.gcd(q, k)
        L = infer.count_layers(T, layers(WALKED, f"{name}.layers.{{bid}}.self_attn.q_proj"))
        return dict(layers=L, hidden=h, heads=q // d, kv_heads=k // d, head_dim=d, vocab=V,
                    intermediate=shape(T, WALKED, f"{name}.layers.{{bid}}.mlp.gate_proj")[0],
                    activation="gelu_pytorch_tanh", gated_mlp=True, norm="rmsnorm", mlp_bias=False,
                    qkv_bias=infer.has(T, pattern(WALKED, f"{name}.layers.{{bid}}.self_attn.q_proj", "bias")),
                    o_bias=infer.has(T, pattern(WALKED, f"{name}.layers.{{bid}}.self_attn.o_proj", "bias")),
                    sliding_window=4096, sliding_layers=tuple(range(0, L, 2)), attn_softcap=True, logit_softcap=True)

    enc = stack("encoder")
    both = infer.has(T, pattern(WALKED, "decoder.layers.{bid}.self_attn.q_proj"))
    dec = ArchSpec(**stack("decoder"), **common) if both else None
    score = infer.find(T, pattern(WALKED_SEQCLS, "score.out_proj"))
    lm = infer.find(T, pattern(WALKED_LM, "lm_head.out_proj"))
    return ArchSpec(**bidirectional(enc), **common, decoder_layers=dec.layers if dec else 0,
                    variant=T5GemmaVariant(dec, both),
                    tied_embeddings=lm is None, num_labels=score.shape[0] if score is not None else 2,
                    assumptions=tuple(notes))


def side(w: Recorder, st: ArchSpec, name: str, n: int, cross: tuple[int, int] | None, merged: bool = False,
         tied: bool = False) -> None:
    """One stack over n tokens (`st` its sizes): the scaled lookup, st.layers Gemma-2 layers (self-attention causal in
    the decoder, cross-attention over cross = (encoder tokens, encoder width) where given), the final norm. `merged`
    (T5Gemma2's Gemma-3 stacks, t5gemma2.py): q/k RMSNorms per head, and the decoder's cross-attention merged into its
    self-attention (the same q/k/v/o projections and norms; keys and values of the encoder's tokens appended to the
    decoder's, one softmax over both: counted as the causal square and the full rectangle it holds), and the table's
    learned end-of-image row (`eoi_embedding`, written over the eoi token's rows); `tied`: the table is the encoder's."""
    B, b, h, L = w.B, w.B.b, st.hidden, st.layers
    tok, lay, bucket = (b, n), f"{name}.layers.{{bid}}", name
    w.embedding(f"{name}.embed_tokens", st.vocab, h, n, bucket="embedding", params=not tied)
    if merged:
        w.record(f"{name}.embed_tokens", (("eoi_embedding", (h,)),))
        B.add(f"{name}.embed_tokens.eoi_embedding", "embedding", "embedding", 1, tok, tok + (h,), params=0 if tied else h,
              ew=b * n * h)
    B.add(f"{name}.embed_tokens x sqrt(hidden)", "embedding", "embedding", 1, tok + (h,), tok + (h,), ew=b * n * h)
    B.add(w.label(f"{lay}.rotary", L), "attention", bucket, L, tok, tok, ew=3 * b * n * (st.heads + st.kv_heads) * st.head_dim)

    def norm(path: str, residual: bool, layers: int = L) -> None:
        w.record(path, (("weight", (h,)),), layers)
        B.norm(w.label(path, layers), bucket, tok, h, max(layers, 1), residual=residual)

    def head_norm(path: str, rows: int, heads: int, record: bool = True) -> None:
        if record:
            w.record(path, (("weight", (st.head_dim,)),), L)
        B.norm(w.label(path, L), bucket, (b, rows, heads), st.head_dim, L, copies=L if record else 0, residual=False)

    def attention(att: str, k_len: int, k_width: int, causal: bool) -> None:
        a, g, d = st.heads, st.kv_heads, st.head_dim
        norm(f"{lay}.pre_{att}_layernorm", False)
        w.linear(f"{lay}.{att}.q_proj", tok, h, a * d, st.qkv_bias, L, bucket=bucket)
        for m in "kv":
            w.linear(f"{lay}.{att}.{m}_proj", (b, k_len), k_width, g * d, st.qkv_bias, L, bucket=bucket)
        if merged:
            head_norm(f"{lay}.{att}.q_norm", n, a)
            head_norm(f"{lay}.{att}.k_norm", k_len, g)
        if merged and cross is not None:   # the encoder's keys and values through the same k/v_proj and k_norm
            for m in "kv":
                B.linear(w.label(f"{lay}.{att}.{m}_proj", L) + " (encoder tokens)", bucket, (b, cross[0]), cross[1],
                         g * d, st.qkv_bias, L, copies=0)
            head_norm(f"{lay}.{att}.k_norm", cross[0], g, record=False)
        extra = 2 + (3 if st.attn_softcap else 0)   # scale, mask; soft-capping's divide, tanh, multiply
        # eager attention repeats the K/V heads: a heads' products; each window group apart (causal halving's pairs)
        groups = window_groups(st) if causal else [(str(L), L, None)]
        for label, calls, window in groups:
            B.attention(w.label(f"{lay}.{att}", L) + ("" if len(groups) == 1 else f" ({label})"), bucket, a, n, k_len,
                        d, calls, causal, extra, window)
        if merged and cross is not None:
            B.attention(w.label(f"{lay}.{att}", L) + " (encoder keys)", bucket, a, n, cross[0], d, L, False, extra)
        w.linear(f"{lay}.{att}.o_proj", tok, a * d, h, st.o_bias, L, bucket=bucket)
        norm(f"{lay}.post_{att}_layernorm", True)

    if L:
        attention("self_attn", n, h, name == "decoder")
        if cross is not None and not merged:
            attention("cross_attn", cross[0], cross[1], False)
        norm(f"{lay}.pre_feedforward_layernorm", False)
        for m in ("gate_proj", "up_proj"):
            w.linear(f"{lay}.mlp.{m}", tok, h, st.intermediate, False, L, bucket=bucket)
        B.activation(w.label(f"{lay}.mlp act", L), bucket, tok, st.intermediate, st.activation, L, gated=True)
        w.linear(f"{lay}.mlp.down_proj", tok, st.intermediate, h, False, L, bucket=bucket)
        norm(f"{lay}.post_feedforward_layernorm", True)
    norm(f"{name}.norm", False, 0)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes, every head's: the encoder over B.seq tokens, the decoder (where the model runs it)
    over B.dec_seq, then the head on the last stack's every token."""
    s = B.s
    w = Recorder(B, "encoder")
    side(w, s, "encoder", B.seq, None)
    dec = decoder(s)
    if dec is not None:
        side(w, dec, "decoder", B.dec_seq, (B.seq, s.hidden))
    head(w, s, dec)
    return w


def head(w: Recorder, s: ArchSpec, dec: ArchSpec | None) -> None:
    """The head on the last stack's every token (the decoder's, `dec`, where the model runs it); T5Gemma2's too."""
    B, b = w.B, w.B.b
    last, n = (dec, B.dec_seq) if dec is not None else (s, B.seq)
    if s.head == "lm":
        assert dec is not None
        w.linear("lm_head.out_proj", (b, n), dec.hidden, dec.vocab, False, bucket="cls", top=True, tied=s.tied_embeddings,
                 note=" (tied to decoder.embed_tokens)" if s.tied_embeddings else "")
        if dec.logit_softcap:
            B.add("lm_head soft-capping", "activation", "cls", 1, (b, n, dec.vocab), (b, n, dec.vocab),
                  ew=3 * b * n * dec.vocab)
    elif s.head in ("seqcls", "tokcls"):   # every token's logits (the sequence classifier then picks one per row)
        w.linear("score.out_proj", (b, n), last.hidden, s.num_labels, True, bucket="cls", top=True)


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes:
    """The walk's modules; every head but T5GemmaModel and T5GemmaEncoderModel wraps its body as `model`."""
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head in ("base", "encoder-only") else "model")


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """EncoderDecoderCache: the decoder's self-attention cache (DynamicCache of the decoder's config: its sliding
    layers keep the last sliding_window - 1 tokens, decoder_kv_cache's rule) over s_dec tokens, and the
    cross-attention cache (a DynamicCache without config: every layer full) over the encoder's s tokens."""
    dec = decoder(s)
    if dec is None:
        return []
    label, self_bytes, rule = decoder_kv_cache(dec, b, nd, nd, ab)[0]
    cross = 2 * dec.layers * dec.kv_heads * dec.head_dim * ab
    return [(f"decoder self-attention, {label.replace('s=', 's_dec=')}", self_bytes, rule),
            (f"cross-attention, b={b}, s_enc={n}", cross * b * n, f"2 x L_dec x g x d x s_enc x b x {ab} B")]


# the walks of tiny models (the base model, the LM and sequence-classifier heads): the paths of the name signature and
# from_tensors' look-ups
WALKED, WALKED_LM, WALKED_SEQCLS = (walked(walk, "t5gemma", head=h, decoder_layers=1) for h in ("base", "lm", "seqcls"))

_MODULE = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
               head_dim=16, vocab_size=99, sliding_window=4)
_SIZES = dict(encoder=_MODULE, decoder=dict(_MODULE, hidden_size=24, num_hidden_layers=2, num_attention_heads=2,
                                            num_key_value_heads=1, intermediate_size=40))

FAMILY = Family(
    name="t5gemma",
    model_types=("t5gemma",),
    before=("gemma",),   # tried before it: its stacks' layers.N.pre_feedforward_layernorm are Gemma-2's signature
    # Gemma-2 sandwich norms under an encoder (decoders' and T5's names differ)
    signature=signature(WALKED, "encoder.layers.{bid}.pre_self_attn_layernorm"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm", "seqcls", "tokcls", "encoder-only"),
    head_rules=(HeadRule(r"(^|\.)lm_head\.out_proj\.weight$", "lm"),
                HeadRule(r"^score\.out_proj\.weight$", "seqcls"),
                # a tied LM head is dropped from the file: its body under `model` shows it
                HeadRule(r"^model\.decoder\.", "lm"), HeadRule(r"^decoder\.", "base")),
    no_head="encoder-only",
    default_head="lm",
    # T5GemmaForConditionalGeneration._tied_weights_keys, with tie_word_embeddings; the stacks' tables are their own
    tie_rules=(TieRule("lm_head.out_proj.weight", "model.decoder.embed_tokens.weight", "config", heads=("lm",)),),
    encoder_decoder=True,
    kv_cache=kv_cache,
    # on the CPU: the stacks build their padding mask from the ids (.all(), no meta kernel)
    samples=tuple(replace(s, device="cpu") for s in (
        Sample("T5GemmaConfig", _SIZES, ("T5GemmaForConditionalGeneration", "T5GemmaModel")),
        Sample("T5GemmaConfig", dict(_SIZES, tie_word_embeddings=False), ("T5GemmaForConditionalGeneration",)),
        # the classifiers: a score per token (the sequence classifier picks each row's last non-pad one);
        # a score's names cannot tell the sequence from the token classifier
        Sample("T5GemmaConfig", dict(_SIZES, num_labels=3), ("T5GemmaForSequenceClassification",)),
        Sample("T5GemmaConfig", dict(_SIZES, num_labels=3), ("T5GemmaForTokenClassification",), infer=False),
        # is_encoder_decoder false: the encoder alone (T5GemmaEncoderModel, under `model` in the classifiers)
        Sample("T5GemmaConfig", dict(_SIZES, num_labels=3, is_encoder_decoder=False),
               ("T5GemmaForSequenceClassification",)),
        Sample("T5GemmaConfig", dict(_SIZES, num_labels=3, is_encoder_decoder=False),
               ("T5GemmaForTokenClassification",), infer=False),
        Sample("T5GemmaConfig", dict(_SIZES, is_encoder_decoder=False), ("T5GemmaEncoderModel",)),
    )),
)
