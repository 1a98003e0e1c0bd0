"""Whisper (transformers modeling_whisper.py, WhisperModel / WhisperForConditionalGeneration): a speech
encoder-decoder. The encoder reads log-mel features [b, num_mel_bins, frames] (frames = 2 x
max_source_positions: 3000, 30 s at 100 frames/s) through conv1 (mel -> h, kernel 3, padding 1) and conv2
(h -> h, kernel 3, stride 2, padding 1), each followed by gelu, adds sinusoidal positions, and runs pre-LN
layers. The position table is an nn.Embedding whose weight has requires_grad=False (filled with
sinusoids at init): a parameter all the same (model.parameters() lists it, save_pretrained stores it).
The decoder has learned positions (max_target_positions), self- and cross-attention; k_proj has no bias.
proj_out (the LM head) is tied to decoder.embed_tokens (WhisperForConditionalGeneration._tied_weights_keys).

Builder.seq is the encoder's input length in mel frames; the encoder runs over ceil(frames / 2) tokens.
FLOPs of the convolutions are what FlopCounterMode counts for convolution (2 x b x out_length x
out_channels x in_channels x kernel).

The architecture is stated once, in `walk` (the convolutions, then framework/seq2seq.py's stacks, recorded with
recorder.Recorder): the op template and the expected tensors derive from it."""
from __future__ import annotations

from typing import Any

from .framework import infer
from .framework.base import ArchSpec, Cfg, Family, HeadRule, KVLines, Sample, Shapes, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.seq2seq import Stack, causal_lm_alone, decoder_alone, embeddings, layer_ops
from .framework.seq2seq import kv_cache as seq2seq_kv
from .framework.walk_names import layers, pattern, signature, walked

# Both stacks (framework/seq2seq.py): pre-LN, a final layer_norm, no layernorm_embedding, k_proj without a bias.
STACK = Stack(pre_ln=True, embedding_norm=False, final_norm="layer_norm", offset=0, k_bias=False)


def from_config(c: Cfg) -> ArchSpec:
    h = c.int("d_model")
    a, ad = c.int("encoder_attention_heads"), c.int("decoder_attention_heads")
    return ArchSpec(decoder_heads=ad, decoder_ffn=c.int("decoder_ffn_dim"), mel_bins=c.int("num_mel_bins", default=80),
                    source_positions=c.int("max_source_positions"), target_positions=c.int("max_target_positions"),
                    layers=0 if causal_lm_alone(c) else c.int("encoder_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("encoder_ffn_dim"), vocab=c.int("vocab_size"),
                    activation=str(c.get("activation_function", default="gelu")),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    decoder_layers=c.int("decoder_layers"), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    W = WALKED
    h, mel = infer.shape(T, pattern(W, "encoder.conv1"), "encoder.conv1")[:2]
    src = infer.shape(T, pattern(W, "encoder.embed_positions"), "encoder.embed_positions")[0]
    tgt = infer.shape(T, pattern(W, "decoder.embed_positions"), "decoder.embed_positions")[0]
    V = infer.shape(T, pattern(W, "decoder.embed_tokens"), "decoder.embed_tokens")[0]
    f = infer.shape(T, pattern(W, "encoder.layers.{bid}.fc1"), "encoder fc1")[0]
    fd = infer.shape(T, pattern(W, "decoder.layers.{bid}.fc1"), "decoder fc1")[0]
    a, note = infer.heads_for(h, 64)
    return ArchSpec(layers=infer.count_layers(T, layers(W, "encoder.layers.{bid}.fc1")), hidden=h, heads=a, kv_heads=a,
                    head_dim=h // a, intermediate=f, vocab=V, tied_embeddings=infer.find(T, pattern(W, "proj_out")) is None,
                    decoder_layers=infer.count_layers(T, layers(W, "decoder.layers.{bid}.fc1")),
                    decoder_heads=a, decoder_ffn=fd, mel_bins=mel, source_positions=src, target_positions=tgt,
                    assumptions=(note, "no config: activation assumed gelu"), **common)


def encoder_tokens(frames: int) -> int:
    """conv2 (kernel 3, stride 2, padding 1) output length."""
    return (frames + 1) // 2


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets (the expected tensors)."""
    s = B.s
    h, mel = s.hidden, s.mel_bins
    w = Recorder(B, "embedding")
    if decoder_alone(s):   # WhisperForCausalLM: the decoder alone over B.seq tokens
        _decoder(w, "model.decoder", B.seq, None)
        _proj_out(w, B.seq)
        return w
    frames, n, nd = B.seq, encoder_tokens(B.seq), B.dec_seq
    _conv1d(w, "encoder.conv1", mel, frames, frames)
    _conv1d(w, "encoder.conv2", h, frames, n)
    w.embedding("encoder.embed_positions", s.source_positions, h, n, " (sinusoidal, requires_grad=False)")
    layer_ops(w, STACK, "encoder", "encoder", s.layers, n, s.heads, s.intermediate, None)
    _decoder(w, "decoder", nd, n)
    _proj_out(w, nd)
    return w


def _conv1d(w: Recorder, path: str, cin: int, n_in: int, n_out: int) -> None:
    """A biased Conv1d (cin -> h, kernel 3) over n_in frames to n_out, then gelu."""
    B, b, h = w.B, w.B.b, w.B.s.hidden
    w.record(path, (("weight", (h, cin, 3)), ("bias", (h,))))
    B.add(path, "conv", "embedding", 1, (b, cin, n_in), (b, h, n_out), params=h * cin * 3 + h,
          macs=b * n_out * h * cin * 3, ew=b * n_out * h, weights_per_call=h * cin * 3 + h)
    B.activation(f"{path} gelu", "embedding", (b, n_out), h, "gelu")


def _decoder(w: Recorder, name: str, nd: int, cross: int | None) -> None:
    s = w.B.s
    embeddings(w, name, s.vocab, s.target_positions, nd)
    layer_ops(w, STACK, name, "decoder", s.decoder_layers, nd, s.decoder_heads, s.decoder_ffn, cross,
              unused_cross=cross is None)


def _proj_out(w: Recorder, nd: int) -> None:
    s = w.B.s
    if s.head == "lm":
        w.linear("proj_out", (w.B.b, nd), s.hidden, s.vocab, False, note=" (tied to decoder.embed_tokens)" if
                 s.tied_embeddings else "", bucket="cls", top=True, tied=s.tied_embeddings)


def build(B: Builder) -> None:
    walk(B)


# the walk of a tiny, untied WhisperForConditionalGeneration: the paths of the name signature and from_tensors' look-ups
WALKED = walked(walk, "whisper", head="lm", mel_bins=1, source_positions=4, target_positions=4, decoder_layers=1,
                decoder_heads=1, decoder_ffn=4)


def expected_tensors(s: ArchSpec) -> Shapes:
    """The walk's modules; WhisperForConditionalGeneration wraps WhisperModel as `model` (the decoder alone's paths hold
    it)."""
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" or decoder_alone(s) else "model")


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """EncoderDecoderCache: decoder self-attention K/V over s_dec tokens, cross-attention K/V over the
    encoder's ceil(frames / 2) tokens; WhisperForCausalLM (the decoder alone): self-attention over s."""
    if decoder_alone(s):
        return seq2seq_kv(s, b, n, None, ab, "", "")
    enc = encoder_tokens(n)
    return seq2seq_kv(s, b, nd, enc, ab, f"cross-attention, b={b}, {enc} encoder tokens ({n} frames)",
                      "2 x L_dec x h x ceil(frames/2) x b x {ab} B")


_SIZES = dict(d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=2,
              encoder_ffn_dim=37, decoder_ffn_dim=41, vocab_size=99, num_mel_bins=10, max_source_positions=12,
              max_target_positions=40, pad_token_id=1, bos_token_id=2, eos_token_id=2, decoder_start_token_id=3)

FAMILY = Family(
    name="whisper",
    # tried before them: its layers.N.self_attn.q_proj names match llama's signature, its decoder's encoder_attn bart's
    before=("bart", "llama"),
    model_types=("whisper",),
    signature=signature(WALKED, "encoder.conv1"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm"),
    # WhisperForConditionalGeneration (and ForCausalLM) nest the decoder under `model.`; WhisperModel and
    # WhisperForAudioClassification do not: that shows the LM head when a tied proj_out was not stored
    head_rules=(HeadRule(r"(^|\.)proj_out\.weight$", "lm"), HeadRule(r"^model\.decoder\.embed_tokens\.weight$", "lm")),
    default_head="lm",
    # WhisperForConditionalGeneration._tied_weights_keys
    tie_rules=(TieRule("proj_out.weight", "model.decoder.embed_tokens.weight", "config", heads=("lm",)),),
    encoder_decoder=True,
    decoder_alone=True,
    main_input="input_features",
    kv_cache=kv_cache,
    samples=(
        # a tied proj_out is not stored: the `model.` prefix tells WhisperForConditionalGeneration from WhisperModel
        Sample("WhisperConfig", _SIZES, ("WhisperForConditionalGeneration", "WhisperModel")),
        # a second audio length (max_source_positions fixes the frames the encoder accepts: 2 x 20 = 40)
        Sample("WhisperConfig", dict(_SIZES, max_source_positions=20, tie_word_embeddings=False),
               ("WhisperForConditionalGeneration",)),
        # the decoder alone; without config.json its names show a BART-shaped decoder (no conv1): the bart family
        # reads it as pegasus-shaped with k_proj's bias missing (the same parameters, the same FLOPs)
        Sample("WhisperConfig", _SIZES, ("WhisperForCausalLM",), detected_as="bart"),
    ),
)
