"""BART and mBART (transformers modeling_bart.py, modeling_mbart.py): an encoder-decoder with a token embedding
`shared`, learned positions per stack numbered from an offset of 2 (BartLearnedPositionalEmbedding:
max_position_embeddings + 2 rows), a layernorm_embedding after the embeddings, biased projections, and a gelu
feed-forward. BART is post-LN; mBART is pre-LN with one more LayerNorm at the end of each stack. The LM head's
final_logits_bias is a registered buffer, not a parameter. Their copies (modeling_plbart.py, modeling_mvp.py,
modeling_marian.py, modeling_pegasus.py, modeling_blenderbot.py, modeling_blenderbot_small.py,
modeling_bigbird_pegasus.py, modeling_m2m_100.py) are each a `Stack` (STACKS), whole (*Model,
*ForConditionalGeneration or MarianMTModel, *ForSequenceClassification, *ForQuestionAnswering where they exist) or the
decoder alone (*ForCausalLM).

Ties (transformers 5: BartModel._tied_weights_keys ties encoder.embed_tokens and decoder.embed_tokens to `shared`,
BartForConditionalGeneration's lm_head to model.shared, and PreTrainedModel.get_expanded_tied_weights_keys applies
them only when the config's tie_word_embeddings is true): one V x h matrix by default; with tie_word_embeddings
false, each stack's embed_tokens and the lm_head are their own, and `shared` is a parameter the forward never
reads. (transformers 4 tied the stacks' embed_tokens to `shared` whatever the config; its untied files hold
`shared` and lm_head only, and transformers 5 initialises both embed_tokens anew when it loads one.)

The architecture is stated once, in `walk` (framework/seq2seq.py's stack, recorded with recorder.Recorder): the op
template and every head's expected tensors derive from it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import NoAnalyticModel
from .framework import decoder_heads, infer
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, KVLines, Sample, Shapes, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.seq2seq import (
    BIGBIRD_ENCODER,
    AttnNames,
    Stack,
    causal_lm_alone,
    classification_head,
    decoder_alone,
    embeddings,
    layer_ops,
)
from .framework.seq2seq import kv_cache as seq2seq_kv
from .framework.walk_names import layers, pattern, signature, walked

# Each model type's stack (framework/seq2seq.py): what differs from BART's.
STACKS = {
    "bart": Stack(), "plbart": Stack(), "mvp": Stack(), "trocr": Stack(),
    "mbart": Stack(pre_ln=True, final_norm="layer_norm"),
    "blenderbot-small": Stack(offset=0),
    "blenderbot": Stack(pre_ln=True, embedding_norm=False, final_norm="layer_norm", offset=0),
    # Marian's and Pegasus' sinusoidal tables are frozen nn.Embedding weights: parameters all the same
    "marian": Stack(embedding_norm=False, offset=0),
    "pegasus": Stack(pre_ln=True, embedding_norm=False, final_norm="layer_norm", offset=0),
    # its final LayerNorm is named layernorm_embedding; q/k/v/out_proj biased only with use_bias (default false); the
    # encoder's self-attention names its projections its own way
    "bigbird_pegasus": Stack(pre_ln=True, embedding_norm=False, final_norm="layernorm_embedding", offset=0,
                             proj_bias=False, encoder_self=BIGBIRD_ENCODER),
    # M2M100: pre-LN, no layernorm_embedding, a sinusoidal table (a buffer) numbered from 2, the embeddings scaled
    # (element-wise); no *ForCausalLM, sequence classifier or QA head
    "m2m_100": Stack(pre_ln=True, embedding_norm=False, final_norm="layer_norm", positions_buffer=True),
    # decoder-only models of the same stack (modeling_xglm.py, modeling_biogpt.py); XGLM's sinusoidal table is a buffer
    "xglm": Stack(pre_ln=True, embedding_norm=False, final_norm="layer_norm", positions_buffer=True),
    "biogpt": Stack(pre_ln=True, embedding_norm=False, final_norm="layer_norm"),
}


@dataclass(frozen=True)
class Alone:
    """The decoder alone's module paths: its body, its LM head, whether its layers hold encoder_attn."""
    body: str = "model.decoder"
    lm: str = "lm_head"
    cross: bool = True
    ties: bool = True        # the class ties its LM head (BigBirdPegasusForCausalLM has no _tied_weights_keys)


ALONE = {"bigbird_pegasus": Alone(ties=False), "trocr": Alone(lm="output_projection"), "xglm": Alone(body="model", cross=False),
         "biogpt": Alone(body="biogpt", lm="output_projection", cross=False)}
DECODERS = ("xglm", "biogpt")   # decoder-only model types: their LM head is the decoder alone whatever the class
# model types with an encoder-decoder (their *Model, *ForConditionalGeneration / MarianMTModel and task heads); TrOCR's
# is a VisionEncoderDecoderModel's decoder, its *ForCausalLM alone here
WHOLE = tuple(mt for mt in STACKS if mt not in DECODERS + ("trocr",))


@dataclass(frozen=True)
class BartVariant(Variant):
    """A decoder alone's LM head rows (Marian's decoder_vocab_size, a file's lm_head), and what its config or names
    switch in the model type's stack (None: the stack's own)."""
    lm_vocab: int = 0
    # Marian's share_encoder_decoder_embeddings false: no `shared`, each stack its own embed_tokens (the decoder's
    # lm_vocab rows, decoder_vocab_size), the LM head lm_vocab wide and tied to the decoder's (MarianMTModel)
    own_embeddings: bool = False
    embedding_norm: bool | None = None
    k_bias: bool | None = None
    proj_bias: bool | None = None
    # BigBird-Pegasus' attention_type "block_sparse": its encoder runs full attention (original_full) while the input
    # is at most (5 + 2 x num_random_blocks) x block_size tokens (BigBirdPegasusEncoder.forward), block-sparse
    # attention, which the template does not describe, beyond (Family.longest_seq); 0: no limit
    longest: int = 0


def _variant(s: ArchSpec) -> BartVariant:
    return s.variant_as(BartVariant) if s.variant is not None else BartVariant()


def stack(s: ArchSpec) -> Stack:
    """The model type's stack, less what the spec switches off: TrOCR's config its layernorm_embedding, a file's
    names (no config) the layernorm_embedding and k_proj's bias they lack."""
    st, v = STACKS.get(s.model_type, STACKS["bart"]), _variant(s)
    return replace(st, embedding_norm=st.embedding_norm if v.embedding_norm is None else v.embedding_norm,
                   k_bias=st.k_bias if v.k_bias is None else v.k_bias,
                   proj_bias=st.proj_bias if v.proj_bias is None else v.proj_bias)


def from_config(c: Cfg) -> ArchSpec:
    if c.model_type == "mvp" and c.get("use_prompt", default=False):
        raise NoAnalyticModel(f"{c.path}: MVP's use_prompt adds prompt modules the template does not describe")
    # a decoder-only model's task heads run over the decoder alone too (BioGPT's score and classifier)
    if causal_lm_alone(c) or (c.head in ("lm", "seqcls", "tokcls") and c.model_type in DECODERS):
        return _decoder_alone(c)
    if c.model_type not in WHOLE:
        raise NoAnalyticModel(f"{c.path}: the {c.model_type} encoder-decoder is not modelled (its *ForCausalLM is)")
    v = BartVariant()
    if c.model_type == "marian" and not c.get("share_encoder_decoder_embeddings", default=FROM_CLASS):
        v = BartVariant(lm_vocab=c.int("decoder_vocab_size", default=c.int("vocab_size")), own_embeddings=True)
    if c.model_type == "bigbird_pegasus":
        sparse = c.get("attention_type", default=FROM_CLASS) == "block_sparse"
        longest = (5 + 2 * c.int("num_random_blocks", default=FROM_CLASS)) * c.int("block_size", default=FROM_CLASS) \
            if sparse else 0
        v = BartVariant(proj_bias=bool(c.get("use_bias", default=FROM_CLASS)), longest=longest)
    h = c.int("d_model")
    a, ad = c.int("encoder_attention_heads"), c.int("decoder_attention_heads")
    return ArchSpec(decoder_heads=ad, decoder_ffn=c.int("decoder_ffn_dim"),
                    layers=c.int("encoder_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("encoder_ffn_dim"), vocab=c.int("vocab_size"),
                    positions=_positions(c),
                    activation=str(c.get("activation_function", default="gelu")),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    decoder_layers=c.int("decoder_layers"), variant=v, **c.common)


def _positions(c: Cfg) -> int:
    """The rows of the model type's learned (or frozen) position table, 0 where it is a buffer."""
    st = STACKS[c.model_type]
    return 0 if st.positions_buffer else c.int("max_position_embeddings") + st.offset


def _decoder_alone(c: Cfg) -> ArchSpec:
    """*ForCausalLM: the decoder alone (0 encoder layers). Marian's decoder looks up decoder_vocab_size rows; its
    lm_head has vocab_size outputs, or is the embedding itself when tied."""
    if c.model_type == "xglm" and c.get("add_cross_attention", default=False):
        raise NoAnalyticModel(f"{c.path}: XGLM's add_cross_attention layers are not modelled")
    # BART's names, XGLM's, BioGPT's
    h, a = c.int("d_model", "hidden_size"), c.int("decoder_attention_heads", "attention_heads", "num_attention_heads")
    L, f = c.int("decoder_layers", "num_layers", "num_hidden_layers"), c.int("decoder_ffn_dim", "ffn_dim", "intermediate_size")
    V = c.int("vocab_size")
    Vd = c.int("decoder_vocab_size", default=V) if c.model_type == "marian" else V
    tied = bool(c.get("tie_word_embeddings", default=True)) and ALONE.get(c.model_type, Alone()).ties
    v = BartVariant(lm_vocab=Vd if tied else V)
    if c.model_type == "bigbird_pegasus":
        v = replace(v, proj_bias=bool(c.get("use_bias", default=False)))
    P = _positions(c)
    if c.model_type == "trocr":   # TrOCR's sinusoidal table (use_learned_position_embeddings false) is a buffer
        P = P if c.get("use_learned_position_embeddings", default=True) else 0
        v = replace(v, embedding_norm=bool(c.get("layernorm_embedding", default=True)))
    return ArchSpec(layers=0, hidden=h, heads=a, kv_heads=a, head_dim=h // a, intermediate=f, vocab=Vd, positions=P,
                    activation=str(c.get("activation_function", "hidden_act", default="gelu")), tied_embeddings=tied,
                    decoder_layers=L, decoder_heads=a, decoder_ffn=f, variant=v, **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    if not infer.has(T, pattern(WALKED, ENC_FC1)):
        return _alone_from_tensors(T, common)
    V, h = infer.shape(T, pattern(WALKED, "shared") + "|" + pattern(WALKED, "encoder.embed_tokens"), "shared embedding")
    positions = pattern(WALKED, "encoder.embed_positions")
    # MarianMTModel's save leaves its sinusoidal tables out (_keys_to_ignore_on_save): none to count
    P = infer.shape(T, positions, "encoder.embed_positions")[0] if infer.has(T, positions) else 0
    f = infer.shape(T, pattern(WALKED, ENC_FC1), "encoder fc1")[0]
    dec_fc1 = pattern(WALKED, "decoder.layers.{bid}.fc1")
    fd = infer.shape(T, dec_fc1, "decoder fc1")[0] if infer.has(T, dec_fc1) else f
    a, note = infer.heads_for(h, 64)
    # the stack the names show: BigBird-Pegasus' encoder attention, else a layernorm_embedding or not and a final
    # layer_norm or not (the first model type with both, one without a position table where the file has none:
    # M2M100's; pre- or post-LN and the position offset no name shows)
    shown = (infer.has(T, pattern(WALKED, "encoder.layernorm_embedding")),
             infer.has(T, pattern(WALKED_MBART, "encoder.layer_norm")))
    like = [mt for mt in WHOLE if (STACKS[mt].embedding_norm, STACKS[mt].final_norm == "layer_norm") == shown]
    mt = "bigbird_pegasus" if infer.has(T, pattern(WALKED_BIGBIRD, ENC_Q)) else next(
        (mt for mt in like if STACKS[mt].positions_buffer == (not P)), like[0])
    q_dec = pattern(WALKED, "decoder.layers.{bid}.self_attn.q_proj", "bias")
    cls = infer.find(T, pattern(WALKED_SEQCLS, "classification_head.out_proj"))
    # untied: lm_head or a stack's embed_tokens stored apart from `shared` (not absent, not an alias of it)
    shared = infer.find(T, pattern(WALKED, "shared"))
    lm, enc = infer.find(T, pattern(WALKED, "lm_head")), infer.find(T, pattern(WALKED, "encoder.embed_tokens"))
    dec = infer.find(T, pattern(WALKED, "decoder.embed_tokens"))
    # no `shared`, the stacks' own lookups (Marian's share_encoder_decoder_embeddings false): the LM head is the
    # decoder's when absent or an alias of it
    own = shared is None and enc is not None and dec is not None and dec.alias_key != enc.alias_key
    tied_to = shared if shared is not None else dec if own else None   # what the LM head (and encoder's) would alias
    apart = [t for t in (lm, enc if shared is not None else None)
             if t is not None and (tied_to is None or t.alias_key != tied_to.alias_key)]
    notes: tuple[str, ...] = (note, "no config: activation assumed gelu")
    if mt not in ("bart", "mbart"):
        notes += (f"no config: the names show a {mt}-shaped stack",)
    if not P and not STACKS[mt].positions_buffer:
        notes += ("no embed_positions in the file (MarianMTModel's save leaves its sinusoidal tables out; the class "
                  "recreates them on load): not counted",)
    if apart and shared is not None and enc is None:
        notes += ("lm_head stored apart and no encoder.embed_tokens (a transformers 4 untied file): transformers 5 builds "
                  "each stack's embed_tokens apart from `shared` (tie_word_embeddings false)",)
    return ArchSpec(num_labels=cls.shape[0] if cls is not None and len(cls.shape) == 2 else 2,
                    layers=infer.count_layers(T, layers(WALKED, ENC_FC1)), hidden=h, heads=a, kv_heads=a,
                    head_dim=h // a, intermediate=f, vocab=V, positions=P, tied_embeddings=not apart,
                    decoder_layers=infer.count_layers(T, layers(WALKED, "decoder.layers.{bid}.fc1")),
                    decoder_heads=a, decoder_ffn=fd, assumptions=notes, variant=BartVariant(
                        proj_bias=infer.has(T, q_dec), own_embeddings=own, lm_vocab=dec.shape[0] if own and dec else 0),
                    **dict(common, model_type=mt))


def _alone_from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """A *ForCausalLM's file: the decoder alone, its lm_head stored unless tied. The names show the stack: a
    layernorm_embedding or not, a final layer_norm (pre-LN) or not, k_proj's bias; the model type is the first
    whose stack has that shape (their offsets differ, which no parameter shows)."""
    W, N = WALKED_ALONE, WALKED_ALONE_PRE_LN
    V, h = infer.shape(T, pattern(W, "decoder.embed_tokens"), "decoder.embed_tokens")
    positions = pattern(W, "decoder.embed_positions")
    P = infer.shape(T, positions, "decoder.embed_positions")[0] if infer.has(T, positions) else 0
    fd = infer.shape(T, pattern(W, "fc1"), "decoder fc1")[0]
    a, note = infer.heads_for(h, 64)
    lm = infer.find(T, pattern(W, "lm_head") + "|" + pattern(WALKED_ALONE_TROCR, "output_projection"))
    emb = infer.find(T, pattern(W, "decoder.embed_tokens"))
    tied = lm is None or (emb is not None and lm.alias_key == emb.alias_key)
    pre_ln = infer.has(T, pattern(N, "decoder.layer_norm"))
    shown = Stack(pre_ln=pre_ln, embedding_norm=infer.has(T, pattern(W, "decoder.layernorm_embedding")),
                  final_norm="layer_norm" if pre_ln else None, proj_bias=infer.has(T, pattern(W, "self_attn.q_proj", "bias")))
    k_bias = infer.has(T, pattern(W, "self_attn.k_proj", "bias")) or not shown.proj_bias
    mt = next((mt for mt, st in STACKS.items() if _alone_shape(st) == _alone_shape(shown)), "bart")
    v = BartVariant(lm_vocab=V if lm is None else lm.shape[0], embedding_norm=shown.embedding_norm, k_bias=k_bias,
                    proj_bias=shown.proj_bias)
    return ArchSpec(layers=0, hidden=h, heads=a, kv_heads=a, head_dim=h // a, intermediate=fd, vocab=V, positions=P,
                    tied_embeddings=tied, decoder_layers=infer.count_layers(T, layers(W, "fc1")),
                    decoder_heads=a, decoder_ffn=fd, variant=v,
                    assumptions=(note, "no config: activation assumed gelu", f"no config: the names show "
                                              f"the decoder alone of a {mt}-shaped stack"), **dict(common, model_type=mt))


def _alone_shape(st: Stack) -> Stack:
    """What a decoder alone's names show of a stack: not its position offset, nor its encoder's attention names."""
    return replace(st, offset=0, encoder_self=AttnNames())


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes, every head's: writes its ops to B and records the modules it meets (the expected
    tensors). The decoder alone (*ForCausalLM) runs over B.seq tokens; its layers' encoder_attn never runs."""
    s, b = B.s, B.b
    h, tied, st = s.hidden, s.tied_embeddings, stack(s)
    w = Recorder(B, "cls")
    if decoder_alone(s):
        p = ALONE.get(s.model_type, Alone())
        embeddings(w, p.body, s.vocab, s.positions, B.seq, norm=st.embedding_norm)
        layer_ops(w, st, p.body, "decoder", s.decoder_layers, B.seq, s.decoder_heads, s.decoder_ffn,
                  None, unused_cross=p.cross, causal=True)
        if s.head in ("seqcls", "tokcls"):   # BioGPT's, over every token (decoder_heads.py: score unbiased, classifier)
            name, params = decoder_heads.shapes(s, h)
            w.linear(name, (b, B.seq), h, decoder_heads.outputs(s), len(params) > 1, top=True)
            return w
        w.linear(p.lm, (b, B.seq), h, _variant(s).lm_vocab, False, note=f" (tied to {p.body}.embed_tokens)" if tied else "",
                 top=True, tied=tied)
        return w
    v = _variant(s)
    own, Vd = v.own_embeddings, v.lm_vocab if v.own_embeddings else s.vocab
    shared = tied and not own   # the stacks' lookups are `shared`
    if not own:
        w.record("shared", (("weight", (s.vocab, h)),))
    if not tied and not own:   # a parameter the forward never reads: each stack looks up its own embed_tokens
        B.add("shared (unused: tie_word_embeddings false)", "embedding", "embedding", 1, (0,), (0,), params=s.vocab * h)
    # the encoder's lookup holds `shared` when tied; the decoder's reads it again
    embeddings(w, "encoder", s.vocab, s.positions, B.seq, " (= shared)" if shared else "", norm=st.embedding_norm)
    layer_ops(w, st, "encoder", "encoder", s.layers, B.seq, s.heads, s.intermediate, None)
    embeddings(w, "decoder", Vd, s.positions, B.dec_seq, " (= shared)" if shared else "", params=not shared,
               norm=st.embedding_norm)
    layer_ops(w, st, "decoder", "decoder", s.decoder_layers, B.dec_seq, s.decoder_heads, s.decoder_ffn, B.seq)
    if s.head == "seqcls":
        classification_head(w)
    elif s.head == "qa":
        w.linear("qa_outputs", (b, B.dec_seq), h, 2, True, top=True)
    elif s.head == "lm":
        # + final_logits_bias, a buffer: its add is element-wise, not a parameter
        w.linear("lm_head", (b, B.dec_seq), h, Vd, False, top=True, tied=tied,
                 note=f" (tied to {'decoder.embed_tokens' if own else 'shared'})" if tied else "")
    return w


def build(B: Builder) -> None:
    walk(B)


def _walked(**fields: Any) -> Recorder:
    return walked(walk, "bart", decoder_layers=1, decoder_heads=1, decoder_ffn=4, **fields)


# the walks of tiny models (BART's LM head and sequence classifier, mBART's pre-LN stack; the decoder alone: BART's,
# mBART's, TrOCR's): the paths of the name signature and from_tensors' look-ups
WALKED, WALKED_SEQCLS, WALKED_MBART = _walked(head="lm"), _walked(head="seqcls"), _walked(model_type="mbart")
WALKED_BIGBIRD = _walked(model_type="bigbird_pegasus")
WALKED_ALONE, WALKED_ALONE_PRE_LN, WALKED_ALONE_TROCR = (_walked(layers=0, head="lm", model_type=mt)
                                                         for mt in ("bart", "mbart", "trocr"))
ENC_FC1, ENC_Q = "encoder.layers.{bid}.fc1", f"encoder.layers.{{bid}}.self_attn.{BIGBIRD_ENCODER.q}"


def expected_tensors(s: ArchSpec) -> Shapes:
    """The walk's modules; BartForConditionalGeneration (and the other heads) wrap BartModel as `model`, the decoder
    alone's paths hold its wrapper's."""
    top = "" if s.head == "base" or decoder_alone(s) else "model."
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes(top.rstrip("."))


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """EncoderDecoderCache: the decoder's self-attention K/V over s_dec tokens, cross-attention K/V over s; the
    decoder alone: self-attention over s."""
    if decoder_alone(s):
        return seq2seq_kv(s, b, n, None, ab, "", "")
    return seq2seq_kv(s, b, nd, n, ab, f"cross-attention, b={b}, s_enc={n}", "2 x L_dec x h x s_enc x b x {ab} B")


_SIZES = dict(d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=2,
              encoder_ffn_dim=37, decoder_ffn_dim=41, vocab_size=99, max_position_embeddings=64)

# transformers sizes the decoder alone's DynamicCache by num_hidden_layers, which these configs map to encoder_layers:
# fewer encoder than decoder layers fails its forward, so the samples have more
_ALONE = dict(_SIZES, encoder_layers=4)
_TROCR = dict(d_model=32, decoder_layers=3, decoder_attention_heads=2, decoder_ffn_dim=41, vocab_size=99,
              max_position_embeddings=64)

# the copies' samples (Marian's pad_token_id, 58100 by default, must index the tiny vocabulary), and their LM classes
_COPIES: dict[str, dict[str, Any]] = {p: {} for p in ("PLBart", "Mvp", "BigBirdPegasus", "Blenderbot", "BlenderbotSmall",
                                                      "Pegasus")}
_COPIES["Marian"] = dict(pad_token_id=1)
_LM = {"Marian": "MarianMTModel"}
# BigBird-Pegasus' encoder reads a value (.item()) to choose its attention: on the CPU
_DEVICE = {"BigBirdPegasus": "cpu"}

FAMILY = Family(
    name="bart",
    before=("llama",),   # tried before them: its layers.N.self_attn.q_proj names match llama's signature
    model_types=tuple(STACKS),
    # BART's layernorm_embedding, or an encoder-decoder's cross-attention (a *ForCausalLM's decoder alone holds it)
    signature="|".join(signature(WALKED, m) for m in ("encoder.layernorm_embedding", "decoder.layernorm_embedding",
                                                      "decoder.layers.{bid}.encoder_attn.q_proj")),
    # FSMT's decoder, which shares those names, holds its own output_projection (TrOCR's is at the top)
    signature_without=r"(^|[./])decoder[./]output_projection[./]",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    # *ForCausalLM: "lm" with 0 encoder layers (seq2seq.decoder_alone); BioGPT's token classifier too
    heads=("base", "lm", "seqcls", "qa", "tokcls"),
    # BartForConditionalGeneration's final_logits_bias (a buffer) shows the LM head when a tied lm_head was dropped
    head_rules=(HeadRule(r"(^|\.)lm_head\.weight$", "lm"), HeadRule(r"(^|\.)final_logits_bias$", "lm"),
                HeadRule(r"(^|\.)classification_head\.out_proj\.weight$", "seqcls"),
                HeadRule(r"(^|\.)qa_outputs\.weight$", "qa"),
                # TrOCRForCausalLM's head; a *ForCausalLM's body (`model.decoder`) when a tied head was dropped
                HeadRule(r"^output_projection\.weight$", "lm"), HeadRule(r"^model\.decoder\.", "lm")),
    no_head="base",
    default_head="lm",
    # BartModel._tied_weights_keys: encoder/decoder embed_tokens are `shared`; BartForConditionalGeneration's:
    # lm_head.weight is model.shared; each only with tie_word_embeddings (transformers 5)
    tie_rules=(TieRule("encoder.embed_tokens.weight", "shared.weight", "config", module=True),
               TieRule("decoder.embed_tokens.weight", "shared.weight", "config", module=True),
               TieRule("lm_head.weight", "model.shared.weight", "config", heads=("lm",)),
               # BartForCausalLM / MBartForCausalLM: the decoder alone (BartDecoderWrapper), no `shared`
               # (BigBirdPegasusForCausalLM ties nothing: no _tied_weights_keys)
               TieRule("lm_head.weight", "model.decoder.embed_tokens.weight", "config", heads=("lm",),
                       model_types=tuple(mt for mt in STACKS if ALONE.get(mt, Alone()).ties)),
               *(TieRule(f"{p.lm}.weight", f"{p.body}.embed_tokens.weight", "config", heads=("lm",), model_types=(mt,))
                 for mt, p in ALONE.items() if p.ties and p != Alone(cross=p.cross))),
    position_offset={mt: st.offset for mt, st in STACKS.items() if st.offset},
    longest_seq=lambda s: _variant(s).longest or None,
    encoder_decoder=True,
    decoder_alone=True,
    kv_cache=kv_cache,
    samples=(
        # a tied lm_head is dropped from the file: the head is told apart by the final_logits_bias buffer, which
        # the registry walk's parameter-only name lists lack (tests/test_real_saves.py checks it on real saves)
        Sample("BartConfig", _SIZES, ("BartForConditionalGeneration", "BartModel"), infer=False),
        Sample("BartConfig", dict(_SIZES, tie_word_embeddings=False), ("BartForConditionalGeneration",)),
        # on the CPU: the classification head picks each row's last <eos> with ops the meta device lacks, and
        # needs as many <eos> in every row: a vocabulary of 8 makes the test's ids (arange % vocab) repeat per row
        Sample("BartConfig", dict(_SIZES, num_labels=3, vocab_size=8),
               ("BartForSequenceClassification", "BartForQuestionAnswering"), device="cpu"),
        Sample("MBartConfig", _SIZES, ("MBartForConditionalGeneration", "MBartModel"), infer=False),
        Sample("MBartConfig", dict(_SIZES, tie_word_embeddings=False), ("MBartForConditionalGeneration",)),
        # the copies' encoder-decoders: tied, the LM head is told by final_logits_bias (as BART's above); untied, by lm_head
        *(Sample(f"{p}Config", dict(_SIZES, **kw), (_LM.get(p, f"{p}ForConditionalGeneration"), f"{p}Model"), infer=False,
                 device=_DEVICE.get(p, "meta")) for p, kw in _COPIES.items()),
        *(Sample(f"{p}Config", dict(_SIZES, tie_word_embeddings=False, **kw), (_LM.get(p, f"{p}ForConditionalGeneration"),),
                 device=_DEVICE.get(p, "meta")) for p, kw in _COPIES.items()),
        # their sequence classifiers and QA heads, on the CPU as BART's
        *(Sample(f"{p}Config", dict(_SIZES, num_labels=3, vocab_size=8), tuple(f"{p}For{h}" for h in heads), device="cpu")
          for p, heads in (("PLBart", ("SequenceClassification",)), ("Mvp", ("SequenceClassification", "QuestionAnswering")),
                           ("BigBirdPegasus", ("SequenceClassification", "QuestionAnswering")))),
        # Marian's stacks with their own embeddings (share_encoder_decoder_embeddings false), the LM head the decoder's (tied:
        # told by final_logits_bias, as above)
        Sample("MarianConfig", dict(_SIZES, pad_token_id=1, share_encoder_decoder_embeddings=False, decoder_vocab_size=77),
               ("MarianMTModel", "MarianModel"), infer=False),
        Sample("MarianConfig", dict(_SIZES, pad_token_id=1, share_encoder_decoder_embeddings=False, decoder_vocab_size=77,
                                    tie_word_embeddings=False), ("MarianMTModel",)),
        # M2M100: a tied LM head dropped from the file leaves model.decoder's names (HeadRule), no final_logits_bias
        Sample("M2M100Config", _SIZES, ("M2M100ForConditionalGeneration", "M2M100Model")),
        Sample("M2M100Config", dict(_SIZES, tie_word_embeddings=False), ("M2M100ForConditionalGeneration",)),
        # BigBird-Pegasus' biased projections, full attention at any length
        Sample("BigBirdPegasusConfig", dict(_SIZES, use_bias=True, attention_type="original_full"),
               ("BigBirdPegasusForConditionalGeneration",), infer=False, device="cpu"),
        # *ForCausalLM, the decoder alone, one per model type (names without config.json: the first model type
        # whose stack they show)
        Sample("BartConfig", _ALONE, ("BartForCausalLM",)),
        Sample("BartConfig", dict(_ALONE, tie_word_embeddings=False), ("BartForCausalLM",)),
        Sample("MBartConfig", _ALONE, ("MBartForCausalLM",)),
        Sample("PLBartConfig", _ALONE, ("PLBartForCausalLM",)),
        Sample("MvpConfig", _ALONE, ("MvpForCausalLM",)),
        Sample("BlenderbotSmallConfig", _ALONE, ("BlenderbotSmallForCausalLM",)),
        Sample("TrOCRConfig", _TROCR, ("TrOCRForCausalLM",)),
        Sample("TrOCRConfig", dict(_TROCR, use_learned_position_embeddings=False, layernorm_embedding=False,
                                   tie_word_embeddings=False), ("TrOCRForCausalLM",)),
        Sample("BlenderbotConfig", _ALONE, ("BlenderbotForCausalLM",)),
        Sample("PegasusConfig", _ALONE, ("PegasusForCausalLM",)),
        Sample("MarianConfig", dict(_ALONE, decoder_vocab_size=77, pad_token_id=1), ("MarianForCausalLM",)),
        Sample("BigBirdPegasusConfig", _ALONE, ("BigBirdPegasusForCausalLM",)),
        Sample("BigBirdPegasusConfig", dict(_ALONE, use_bias=True), ("BigBirdPegasusForCausalLM",)),
        # decoder-only models of the stack; without config.json their names read as LLaMA's (layers.N.self_attn.q_proj)
        Sample("XGLMConfig", dict(d_model=32, num_layers=3, attention_heads=2, ffn_dim=41, vocab_size=99,
                                  max_position_embeddings=64), ("XGLMForCausalLM",), detected_as="llama"),
        Sample("BioGptConfig", dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=41,
                                    vocab_size=99, max_position_embeddings=64), ("BioGptForCausalLM",), detected_as="llama"),
        # its task heads (the sequence classifier picks the last non-pad token's logits: values)
        Sample("BioGptConfig", dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=41,
                                    vocab_size=99, max_position_embeddings=64, num_labels=3, pad_token_id=0),
               ("BioGptForCausalLM", "BioGptForSequenceClassification", "BioGptForTokenClassification"),
               device="cpu", detected_as="llama"),
        Sample("MarianConfig", dict(_ALONE, decoder_vocab_size=77, pad_token_id=1, tie_word_embeddings=False),
               ("MarianForCausalLM",)),
    ),
)
