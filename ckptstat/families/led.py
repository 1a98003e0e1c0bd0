"""LED, the Longformer Encoder-Decoder (transformers modeling_led.py, configuration_led.py): BART's post-LN stacks
(framework/seq2seq.py: `shared` token table, learned positions without an offset, layernorm_embedding, fc1/fc2),
whose encoder self-attention is Longformer's (LEDEncoderSelfAttention, a copy of LongformerSelfAttention, under
`self_attn.longformer_self_attn`, its output projection `self_attn.output`): longformer.local_global, with
longformer.py's window rule. The encoder pads its input to a multiple of attention_window (the largest) and runs its
embeddings and layers on that padded length, then returns the s tokens the decoder's cross-attention reads; no head
marks a global token by default (LEDForConditionalGeneration's and LEDForQuestionAnswering's forwards leave
global_attention_mask unset), so none is counted. The encoder's and the decoder's position tables have their own
rows (max_encoder_position_embeddings, max_decoder_position_embeddings). LEDForConditionalGeneration: lm_head over
every decoder token (tied to `shared` by tie_word_embeddings; + final_logits_bias, a buffer);
LEDForQuestionAnswering: qa_outputs over every decoder token.

The architecture is stated once, in `walk` (framework/recorder.py): the op template and the expected tensors derive
from it; the KV cache is BART's (seq2seq.kv_cache)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import longformer
from .framework import infer
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, KVLines, Sample, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Recorder, tensors
from .framework.seq2seq import AttnNames, Stack, embeddings, layer_ops
from .framework.seq2seq import kv_cache as stack_cache
from .framework.walk_names import layers, pattern, signature, walked
from .longformer import Windows

ATTN = "longformer_self_attn"
STACK = Stack(offset=0, encoder_self=AttnNames(f"{ATTN}.query", f"{ATTN}.key", f"{ATTN}.value", "output"))


@dataclass(frozen=True)
class LEDVariant(Windows):
    """Longformer's windows (the encoder's layers') and the decoder's position rows."""
    decoder_positions: int = 0


def from_config(c: Cfg) -> ArchSpec:
    h, a, L = c.int("d_model"), c.int("encoder_attention_heads"), c.int("encoder_layers")
    return ArchSpec(decoder_heads=c.int("decoder_attention_heads"), decoder_ffn=c.int("decoder_ffn_dim"),
                    layers=L, hidden=h, heads=a, kv_heads=a, head_dim=h // a, intermediate=c.int("encoder_ffn_dim"),
                    vocab=c.int("vocab_size"), positions=c.int("max_encoder_position_embeddings", default=FROM_CLASS),
                    activation=str(c.get("activation_function", default="gelu")),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    decoder_layers=c.int("decoder_layers"),
                    variant=LEDVariant(longformer.windows(c, L),
                                       decoder_positions=c.int("max_decoder_position_embeddings", default=FROM_CLASS)),
                    **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, pattern(WALKED, "shared"), "shared")
    a, note = infer.heads_for(h, 64)
    L = infer.count_layers(T, layers(WALKED, "encoder.layers.{bid}.fc1"))
    lm = infer.find(T, pattern(WALKED_LM, "lm_head"))
    shared = infer.find(T, pattern(WALKED, "shared"))
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=a, head_dim=h // a, vocab=V,
                    intermediate=infer.shape(T, pattern(WALKED, "encoder.layers.{bid}.fc1"), "encoder fc1")[0],
                    positions=infer.shape(T, pattern(WALKED, "encoder.embed_positions"), "encoder positions")[0],
                    decoder_layers=infer.count_layers(T, layers(WALKED, "decoder.layers.{bid}.fc1")), decoder_heads=a,
                    decoder_ffn=infer.shape(T, pattern(WALKED, "decoder.layers.{bid}.fc1"), "decoder fc1")[0],
                    tied_embeddings=lm is None or shared is None or lm.alias_key == shared.alias_key,
                    variant=LEDVariant((1024,) * L, decoder_positions=infer.shape(
                        T, pattern(WALKED, "decoder.embed_positions"), "decoder positions")[0]),
                    assumptions=(note, "no config: activation gelu and attention_window 1024 on every layer assumed (the "
                                 "released LED's: the encoder's padded length and local attention depend on it)"),
                    **common)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: the encoder over the padded length (its ops written to a Builder of that length),
    the decoder over B.dec_seq reading the B.seq encoder tokens, then the head."""
    s, b = B.s, B.b
    v = s.variant_as(LEDVariant)
    h, tied, N = s.hidden, s.tied_embeddings, v.padded(B.seq)
    enc = Recorder(Builder(s, b, N, N, B.wb, B.ab, B.halve), "cls")
    enc.record("shared", (("weight", (s.vocab, h)),))
    if not tied:   # a parameter the forward never reads: each stack looks up its own embed_tokens (bart.py)
        enc.B.add("shared (unused: tie_word_embeddings false)", "embedding", "embedding", 1, (0,), (0,), params=s.vocab * h)
    embeddings(enc, "encoder", s.vocab, s.positions, N, " (= shared)" if tied else "", norm=True)
    layer_ops(enc, STACK, "encoder", "encoder", s.layers, N, s.heads, s.intermediate, None, attend=lambda r, L:
              longformer.local_global(r, L, f"encoder.layers.{{bid}}.self_attn.{ATTN}", s.heads, s.head_dim, v.windows, 0))
    B.add(f"padding: {B.seq} encoder tokens to {N} (a multiple of attention_window {max(v.windows)}); the encoder "
          f"below runs {N}", "embedding", "embedding", 1, (b, B.seq), (b, N))
    B.ops += enc.B.ops
    w = Recorder(B, "cls")
    w.modules = enc.modules
    embeddings(w, "decoder", s.vocab, v.decoder_positions, B.dec_seq, " (= shared)" if tied else "", params=not tied,
               norm=True)
    layer_ops(w, STACK, "decoder", "decoder", s.decoder_layers, B.dec_seq, s.decoder_heads, s.decoder_ffn, B.seq)
    if s.head == "qa":
        w.linear("qa_outputs", (b, B.dec_seq), h, 2, True, top=True)
    elif s.head == "lm":   # + final_logits_bias, a buffer: its add is element-wise
        w.linear("lm_head", (b, B.dec_seq), h, s.vocab, False, top=True, tied=tied, note=" (tied to shared)" if tied else "")
    return w


def build(B: Builder) -> None:
    walk(B)




def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """EncoderDecoderCache: the decoder's self-attention K/V over s_dec tokens, cross-attention K/V over the s encoder
    tokens the encoder returns (unpadded)."""
    return stack_cache(s, b, nd, n, ab, f"cross-attention, b={b}, s_enc={n}", "2 x L_dec x h x s_enc x b x {ab} B")


WALKED, WALKED_LM = (walked(walk, "led", head=h, decoder_layers=1, decoder_heads=1, decoder_ffn=4,
                            variant=LEDVariant((2,), decoder_positions=4)) for h in ("base", "lm"))

_SIZES = dict(d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=2,
              encoder_ffn_dim=37, decoder_ffn_dim=41, vocab_size=99, max_encoder_position_embeddings=64,
              max_decoder_position_embeddings=40, attention_window=4)

FAMILY = Family(
    name="led",
    model_types=("led",),
    before=("bart",),   # its decoder's names are BART's
    signature=signature(WALKED, f"encoder.layers.{{bid}}.self_attn.{ATTN}.query_global"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=tensors(walk, "led"),
    heads=("base", "lm", "qa"),
    head_rules=(HeadRule(r"(^|\.)lm_head\.weight$", "lm"), HeadRule(r"(^|\.)final_logits_bias$", "lm"),
                HeadRule(r"(^|\.)qa_outputs\.weight$", "qa"), HeadRule(r"^led\.", "lm")),
    default_head="lm",
    # LEDModel._tied_weights_keys (the stacks' embed_tokens are `shared`), LEDForConditionalGeneration's (lm_head), with
    # tie_word_embeddings
    tie_rules=(TieRule("encoder.embed_tokens.weight", "shared.weight", "config", module=True),
               TieRule("decoder.embed_tokens.weight", "shared.weight", "config", module=True),
               TieRule("lm_head.weight", "led.shared.weight", "config", heads=("lm",))),
    encoder_decoder=True,
    kv_cache=kv_cache,
    # on the CPU: the encoder asks whether any token is global (.item(), no meta kernel); windows of 12 and 4 pad the
    # tests' 8 and 16 encoder tokens to 12 and 24
    samples=(
        Sample("LEDConfig", _SIZES, ("LEDModel", "LEDForConditionalGeneration", "LEDForQuestionAnswering"), device="cpu"),
        Sample("LEDConfig", dict(_SIZES, attention_window=[12, 4], tie_word_embeddings=False),
               ("LEDForConditionalGeneration",), device="cpu", infer=False),
    ),
)
