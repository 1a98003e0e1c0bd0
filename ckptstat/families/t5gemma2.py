"""T5Gemma2 (transformers modeling_t5gemma2.py, configuration_t5gemma2.py): T5Gemma's encoder-decoder (t5gemma.py)
of Gemma-3 stacks. The encoder (T5Gemma2EncoderConfig) holds its text stack's sizes in `text_config` beside a SigLIP
vision tower's `vision_config`; the decoder's sizes are the `decoder` config's (its width and vocabulary must equal the
encoder's). What differs from T5Gemma:

- q and k are RMS-normed per head (q_norm, k_norm over head_dim) before the rotary;
- the decoder has no cross-attention module: its self-attention is merged with it (T5Gemma2MergedAttention). The
  same k_proj / v_proj (and k_norm) run on the encoder's tokens, their keys and values are appended to the decoder's,
  and one softmax runs over both (a causal, or sliding, mask on the decoder's keys, none on the encoder's);
- the encoder's table has a learned end-of-image row (`eoi_embedding`), and the decoder's table (with its row) is the
  encoder's, as is the LM head's weight, by tie_word_embeddings (T5Gemma2Model._tied_weights_keys);
- the attention scores are never soft-capped (the attention modules pass no softcap to the attention function,
  whatever attn_logit_softcapping says); the LM head's logits are, by the decoder's final_logit_softcapping;
- the encoder holds a SigLIP vision tower and the projector of its pooled patches into the text width
  (multi_modal_projector: an RMSNorm and a bare [vision hidden, hidden] matrix), which a text-only forward never
  runs: their parameters are predicted (siglip.py's vision walk, from vision_config), their FLOPs are not in the
  figures (no image input).

T5Gemma2ForConditionalGeneration runs the LM head on every decoder token; the sequence and token classifiers
(`score.out_proj`, biased) on every decoder token (the sequence classifier then picks each row's last non-pad one),
their decoder input the encoder's ids shifted right (as many tokens). The sliding layers' windows mask but do not
shorten the eager matmuls (the encoder's bidirectional window included). The cache (EncoderDecoderCache) is
t5gemma.kv_cache's: the decoder's DynamicCache (its sliding layers keep sliding_window - 1 tokens), and every layer's
keys and values of the encoder's tokens.

The architecture is stated once, in `walk` (t5gemma.side with `merged`, siglip.vision_walk for the tower's
parameters): the op template, the expected tensors and the name look-ups derive from it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import UsageError
from . import clip, siglip, t5gemma
from .clip import VisionTower
from .framework import infer
from .framework.base import ArchSpec, Cfg, Family, HeadRule, Sample, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Recorder, tensors
from .framework.walk_names import layers, pattern, signature, walked
from .t5gemma import T5GemmaVariant


@dataclass(frozen=True)
class T5Gemma2Variant(T5GemmaVariant):
    """T5Gemma's (the decoder's sizes) and the encoder's vision tower (None: a tiny name walk's, without one)."""
    vision: VisionTower | None = None


def _variant(s: ArchSpec) -> T5Gemma2Variant:
    return s.variant_as(T5Gemma2Variant) if s.variant is not None else T5Gemma2Variant()


def _text(fields: dict[str, Any]) -> dict[str, Any]:
    """A stack's fields as T5Gemma2 runs them: no attention soft-capping (module docstring)."""
    return dict(fields, attn_softcap=False)


def from_config(c: Cfg) -> ArchSpec:
    enc_c = c.sub("encoder", "t5gemma2_encoder")
    # Gemma 3's default layer pattern: a full-attention layer every 6th
    enc = _text(t5gemma.stack_fields(enc_c.sub("text_config", "t5gemma2_text"), every=6))
    dec = ArchSpec(**_text(t5gemma.stack_fields(c.sub("decoder", "t5gemma2_decoder"), every=6)), **c.common)
    if (enc["hidden"], enc["vocab"]) != (dec.hidden, dec.vocab):   # T5Gemma2Config.validate_architecture
        raise UsageError(f"{c.path}: the encoder's hidden_size and vocab_size ({enc['hidden']}, {enc['vocab']}) differ "
                         f"from the decoder's ({dec.hidden}, {dec.vocab}): T5Gemma2 ties the two")
    vision = siglip.vision_tower(enc_c.sub("vision_config", "siglip_vision_model"))
    return ArchSpec(**t5gemma.bidirectional(enc), **c.common, tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    decoder_layers=dec.layers, variant=T5Gemma2Variant(dec, True, vision))


# the text stacks' paths, not the vision tower's `encoder.vision_tower.encoder.layers`: a component's start not after it
_UNDER = r"(?:^|(?<!vision_tower)\.)"


def _shape(T: Tensors, key: str) -> tuple[int, ...]:
    return infer.shape(T, pattern(WALKED, key, under=_UNDER), key.replace("{bid}", "N"))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Each stack's sizes from its embed_tokens, q/k projections, q_norm (head_dim) and gate_proj; the vision tower's
    from its tensors (siglip.vision_shapes); a full-attention layer every 6th with transformers' default window."""
    notes = ["no config: a full-attention layer every 6th, the others a 4096-token window (T5Gemma2's config class "
             "defaults), assumed (only the KV cache depends on them); no soft-capping of the logits"]

    def stack(name: str) -> dict[str, Any]:
        # the decoder's table is the encoder's where tied (not in the file): the two share their sizes
        V, h = _shape(T, "encoder.embed_tokens")
        lay = f"{name}.layers.{{bid}}.self_attn"
        q, k = (_shape(T, f"{lay}.{m}_proj")[0] for m in "qk")
        d = _shape(T, f"{lay}.q_norm")[0]
        L = infer.count_layers(T, layers(WALKED, f"{lay}.q_proj", under=_UNDER))
        return _text(dict(layers=L, hidden=h, heads=q // d, kv_heads=k // d, head_dim=d, vocab=V,
                          intermediate=_shape(T, f"{name}.layers.{{bid}}.mlp.gate_proj")[0],
                          activation="gelu_pytorch_tanh", gated_mlp=True, norm="rmsnorm", mlp_bias=False,
                          qkv_bias=infer.has(T, pattern(WALKED, f"{lay}.q_proj", "bias", under=_UNDER)),
                          o_bias=infer.has(T, pattern(WALKED, f"{lay}.o_proj", "bias", under=_UNDER)),
                          sliding_window=4096, sliding_layers=tuple(i for i in range(L) if (i + 1) % 6),
                          logit_softcap=False))

    enc, dec = stack("encoder"), ArchSpec(**stack("decoder"), **common)
    pre = clip.tower_prefix(T, "vision")
    if pre is None:
        raise UsageError("cannot infer T5Gemma2 from tensor names: no vision tower (encoder.vision_tower); pass --config")
    score = infer.find(T, pattern(WALKED_SEQCLS, "score.out_proj"))
    lm = infer.find(T, pattern(WALKED_LM, "lm_head.out_proj"))
    tied = not infer.has(T, pattern(WALKED, "decoder.embed_tokens")) and lm is None
    return ArchSpec(**t5gemma.bidirectional(enc), **common, decoder_layers=dec.layers,
                    variant=T5Gemma2Variant(dec, True, siglip.vision_shapes(T, pre)), tied_embeddings=tied,
                    num_labels=score.shape[0] if score is not None else 2, assumptions=tuple(notes))


def _images(w: Recorder, v: VisionTower, h: int) -> None:
    """The encoder's vision tower and projector: recorded, their parameters counted, never run on text (0 calls)."""
    B = w.B
    tower = Builder(B.s, B.b, 1, 1, B.wb, B.ab)   # the tower's ops, for their parameters only
    wv = Recorder(tower, "encoder", "encoder.vision_tower.")
    siglip.vision_walk(wv, v, v.native_image_size)
    w.modules += wv.modules
    B.add("encoder.vision_tower (images only; not run on text)", "embedding", "encoder", 0, w.tok, w.tok,
          params=sum(op.params for op in tower.ops))
    w.held("encoder.multi_modal_projector (images only; not run on text)",
           (("encoder.multi_modal_projector", (("mm_input_projection_weight", (v.hidden, h)),
                                               ("mm_soft_emb_norm.weight", (v.hidden,)))),))


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes, every head's: the encoder over B.seq tokens (its vision tower held), the decoder
    over B.dec_seq (keys and values of both), then the head on the decoder's every token."""
    s, v = B.s, _variant(B.s)
    w = Recorder(B, "encoder")
    t5gemma.side(w, s, "encoder", B.seq, None, merged=True)
    if v.vision is not None:
        _images(w, v.vision, s.hidden)
    dec = v.decoder or s
    t5gemma.side(w, dec, "decoder", B.dec_seq, (B.seq, s.hidden), merged=True, tied=s.tied_embeddings)
    t5gemma.head(w, s, dec)
    return w


def build(B: Builder) -> None:
    walk(B)


# the walks of tiny models (the base model, the LM and sequence-classifier heads): the paths of the name signature and
# from_tensors' look-ups
WALKED, WALKED_LM, WALKED_SEQCLS = (walked(walk, "t5gemma2", head=h, decoder_layers=1) for h in ("base", "lm", "seqcls"))

_STACK = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, vocab_size=99, sliding_window=4)
_VISION = dict(hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=2, image_size=28,
               patch_size=7)
_SIZES = dict(encoder=dict(text_config=_STACK, vision_config=_VISION, mm_tokens_per_image=4),
              decoder=dict(_STACK, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=40,
                           layer_types=["sliding_attention", "full_attention"]),
              vocab_size=99)

FAMILY = Family(
    name="t5gemma2",
    model_types=("t5gemma2",),
    # tried before them: its stacks' layers.N.pre_self_attn_layernorm are T5Gemma's signature, pre_feedforward_layernorm
    # Gemma's
    before=("t5gemma", "gemma"),
    # q/k norms in an encoder's Gemma sandwich layers (T5Gemma's have none)
    signature=signature(WALKED, "encoder.layers.{bid}.self_attn.q_norm"),
    from_config=from_config, from_tensors=from_tensors, build=build,
    # the walk's modules; every head but T5Gemma2Model wraps its body as `model` (save_pretrained writes the encoder's
    # text stack without its in-memory `text_model.`)
    expected_tensors=tensors(walk, "model"),
    heads=("base", "lm", "seqcls", "tokcls"),
    head_rules=(HeadRule(r"(^|\.)lm_head\.out_proj\.weight$", "lm"),
                HeadRule(r"^score\.out_proj\.weight$", "seqcls"),
                # a tied LM head is dropped from the file: its body under `model` shows it
                HeadRule(r"^model\.decoder\.", "lm")),
    default_head="lm",
    # T5Gemma2ForConditionalGeneration's and T5Gemma2Model's _tied_weights_keys, with tie_word_embeddings: one table
    tie_rules=(TieRule("lm_head.out_proj.weight", "model.encoder.embed_tokens.weight", "config", heads=("lm",)),
               *(TieRule(f"{p}decoder.embed_tokens.{t}", f"{p}encoder.embed_tokens.{t}", "config", heads=heads)
                 for t in ("weight", "eoi_embedding")
                 for p, heads in (("model.", ("lm", "seqcls", "tokcls")), ("", ("base",))))),
    encoder_decoder=True,
    kv_cache=t5gemma.kv_cache,
    # on the CPU: the stacks build their padding mask from the ids (.all(), no meta kernel)
    samples=tuple(replace(s, device="cpu") for s in (
        Sample("T5Gemma2Config", _SIZES, ("T5Gemma2ForConditionalGeneration", "T5Gemma2Model")),
        Sample("T5Gemma2Config", dict(_SIZES, tie_word_embeddings=False), ("T5Gemma2ForConditionalGeneration",)),
        # the classifiers: a score per decoder token; a score's names cannot tell the sequence from the token classifier
        Sample("T5Gemma2Config", dict(_SIZES, num_labels=3), ("T5Gemma2ForSequenceClassification",)),
        Sample("T5Gemma2Config", dict(_SIZES, num_labels=3), ("T5Gemma2ForTokenClassification",), infer=False),
    )),
)
