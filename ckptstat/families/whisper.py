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
out_channels x in_channels x kernel)."""
from __future__ import annotations

from typing import Any

from .framework import infer
from .framework.base import ArchSpec, Cfg, Family, HeadRule, KVLines, Sample, Shapes, Tensors, TieRule
from .framework.ops import Builder
from .framework.seq2seq import Stack, causal_lm_alone, decoder_alone, layer_ops, layer_tensors
from .framework.seq2seq import kv_cache as seq2seq_kv

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
    h, mel = infer.shape(T, r"encoder\.conv1\.weight$", "encoder.conv1")[:2]
    src = infer.shape(T, r"encoder\.embed_positions\.weight$", "encoder.embed_positions")[0]
    tgt = infer.shape(T, r"decoder\.embed_positions\.weight$", "decoder.embed_positions")[0]
    V = infer.shape(T, r"decoder\.embed_tokens\.weight$", "decoder.embed_tokens")[0]
    f = infer.shape(T, r"encoder\.layers\.0\.fc1\.weight$", "encoder fc1")[0]
    fd = infer.shape(T, r"decoder\.layers\.0\.fc1\.weight$", "decoder fc1")[0]
    a, note = infer.heads_for(h, 64)
    return ArchSpec(layers=infer.count_layers(T, r"encoder\.layers\.(\d+)\."), hidden=h, heads=a, kv_heads=a,
                    head_dim=h // a, intermediate=f, vocab=V, tied_embeddings=infer.find(T, r"proj_out\.weight$") is None,
                    decoder_layers=infer.count_layers(T, r"decoder\.layers\.(\d+)\."),
                    decoder_heads=a, decoder_ffn=fd, mel_bins=mel, source_positions=src, target_positions=tgt,
                    assumptions=(note, "no config: activation assumed gelu"), **common)


def encoder_tokens(frames: int) -> int:
    """conv2 (kernel 3, stride 2, padding 1) output length."""
    return (frames + 1) // 2


def build(B: Builder) -> None:
    s, b = B.s, B.b
    h, mel = s.hidden, s.mel_bins
    if decoder_alone(s):   # WhisperForCausalLM: the decoder alone over B.seq tokens
        _decoder(B, "model.decoder", B.seq, None)
        _proj_out(B, B.seq)
        return
    frames, n, nd = B.seq, encoder_tokens(B.seq), B.dec_seq
    B.add("encoder.conv1", "conv", "embedding", 1, (b, mel, frames), (b, h, frames), params=h * mel * 3 + h,
          macs=b * frames * h * mel * 3, ew=b * frames * h, weights_per_call=h * mel * 3 + h)
    B.activation("encoder.conv1 gelu", "embedding", (b, frames), h, "gelu")
    B.add("encoder.conv2", "conv", "embedding", 1, (b, h, frames), (b, h, n), params=h * h * 3 + h,
          macs=b * n * h * h * 3, ew=b * n * h, weights_per_call=h * h * 3 + h)
    B.activation("encoder.conv2 gelu", "embedding", (b, n), h, "gelu")
    B.embedding("encoder.embed_positions (sinusoidal, requires_grad=False)", "embedding", s.source_positions, h, n)
    layer_ops(B, STACK, "encoder", "encoder", s.layers, n, s.heads, s.intermediate, None)
    _decoder(B, "decoder", nd, n)
    _proj_out(B, nd)


def _decoder(B: Builder, name: str, nd: int, cross: int | None) -> None:
    s = B.s
    B.embedding(f"{name}.embed_tokens", "embedding", s.vocab, s.hidden, nd)
    B.embedding(f"{name}.embed_positions", "embedding", s.target_positions, s.hidden, nd)
    layer_ops(B, STACK, name, "decoder", s.decoder_layers, nd, s.decoder_heads, s.decoder_ffn, cross,
              unused_cross=cross is None)


def _proj_out(B: Builder, nd: int) -> None:
    s = B.s
    if s.head == "lm":
        B.linear("proj_out" + (" (tied to decoder.embed_tokens)" if s.tied_embeddings else ""), "cls", (B.b, nd), s.hidden,
                 s.vocab, False, tied=s.tied_embeddings)


def expected_tensors(s: ArchSpec) -> Shapes:
    h, mel = s.hidden, s.mel_bins
    top = "" if s.head == "base" else "model."   # WhisperForConditionalGeneration wraps WhisperModel as `model`
    out: Shapes = {top + "decoder.embed_tokens.weight": (s.vocab, h),
                   top + "decoder.embed_positions.weight": (s.target_positions, h)}
    if not decoder_alone(s):
        out.update({top + "encoder.conv1.weight": (h, mel, 3), top + "encoder.conv1.bias": (h,),
                    top + "encoder.conv2.weight": (h, h, 3), top + "encoder.conv2.bias": (h,),
                    top + "encoder.embed_positions.weight": (s.source_positions, h)})
        layer_tensors(out, STACK, top + "encoder", s.layers, h, s.intermediate, False)
    layer_tensors(out, STACK, top + "decoder", s.decoder_layers, h, s.decoder_ffn, True)
    if s.head == "lm":
        out["proj_out.weight"] = (s.vocab, h)
    return out


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
    signature=r"(^|[./])encoder[./]conv1[./]weight$",
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
