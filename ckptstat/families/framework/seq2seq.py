"""The BART-shaped transformer stack, described once (`Stack`): the bart family's model types (transformers
modeling_bart.py and its copies: mbart, plbart, mvp, marian, pegasus, blenderbot, blenderbot_small, trocr, m2m_100) and
Whisper's decoder (modeling_whisper.py) differ only in what a `Stack` says. A stack is a token lookup, positions,
an optional `layernorm_embedding`, layers of self-attention (q/k/v/out_proj), cross-attention in a decoder
(encoder_attn, same projections), fc1 -> activation -> fc2, each sublayer's LayerNorm after it (post-LN, BART) or
before it (pre-LN, mBART), and for pre-LN stacks one `layer_norm` after the last layer. The stack is walked once
(`embeddings`, `layer_ops`) with recorder.Recorder: each parameterised module recorded (its path, `{bid}` the layer,
its parameters' shapes) in the same call that writes its op, so a family's op template and its expected tensors (every
head's: Recorder.shapes) come from one walk; the KV cache (`kv_cache`) from the spec.

An encoder-decoder's *ForCausalLM is the decoder alone (BartDecoderWrapper under `model.`, its own lm_head): its
spec has 0 encoder layers (`decoder_alone`). Its layers still hold encoder_attn's weights, which it never runs
without encoder_hidden_states: they count as parameters, not as FLOPs, and the cache holds self-attention only."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .base import ArchSpec, Cfg, KVLines
from .recorder import Recorder


@dataclass(frozen=True)
class AttnNames:
    """An attention's projections, as its module names them under the attention's path: BART's q_proj, k_proj, v_proj,
    out_proj."""
    q: str = "q_proj"
    k: str = "k_proj"
    v: str = "v_proj"
    o: str = "out_proj"


# BigBird-Pegasus' encoder self-attention (BigBirdPegasusEncoderAttention: its `self` holds query, key, value; its
# `output` the out projection)
BIGBIRD_ENCODER = AttnNames("self.query", "self.key", "self.value", "output")


@dataclass(frozen=True)
class Stack:
    pre_ln: bool = False            # LayerNorm before each sublayer (mBART, Pegasus, Blenderbot, Whisper)
    embedding_norm: bool = True     # a LayerNorm after the embeddings, `layernorm_embedding` (BART)
    # the final LayerNorm's name after the last layer (None: none); pre-LN stacks have one
    final_norm: str | None = None
    offset: int = 2                 # positions are looked up at position + offset (BartLearnedPositionalEmbedding)
    proj_bias: bool = True          # q/v/out_proj biases (BigBird-Pegasus' use_bias false: none)
    k_bias: bool = True             # k_proj's bias (Whisper's k_proj has none)
    encoder_self: AttnNames = AttnNames()   # the encoder's self-attention projections' names (BigBird-Pegasus' own)
    # the sinusoidal position table is a non-persistent buffer, no parameter (M2M100's, XGLM's
    # *SinusoidalPositionalEmbedding; Marian's and Pegasus' are frozen nn.Embedding weights: parameters)
    positions_buffer: bool = False


def decoder_alone(s: ArchSpec) -> bool:
    """An encoder-decoder family's *ForCausalLM: the decoder stack alone (no encoder layers)."""
    return s.layers == 0 and s.decoder_layers > 0


def causal_lm_alone(c: Cfg) -> bool:
    """The config's class is a *ForCausalLM: the decoder alone."""
    return c.head == "lm" and str(c.common.get("architecture") or "").endswith("ForCausalLM")


def layer_ops(w: Recorder, st: Stack, name: str, bucket: str, L: int, q: int, a: int, f: int, cross: int | None,
              unused_cross: bool = False, causal: bool | None = None,
              attend: Callable[[Recorder, int], None] | None = None) -> None:
    """L layers over q tokens (a heads, FFN width f), each module recorded as its op is written, then the stack's
    final norm; cross: the encoder tokens cross-attention reads, None for none; unused_cross: the layers hold
    encoder_attn but never run it (the decoder alone); causal: the self-attention's mask (default: a `decoder`'s is
    causal); attend: the self-attention between its projections and its output where not the full square (LED's
    encoder: Longformer's sliding chunks, led.py). No layers (L 0): no layer modules (a Recorder's L 0 is a module
    outside the layers)."""
    if L:
        _layers(w, st, name, bucket, L, q, a, f, cross, unused_cross, name.endswith("decoder") if causal is None else causal,
                attend)
    if st.final_norm:
        w.norm(f"{name}.{st.final_norm}", (w.B.b, q), w.B.s.hidden, residual=False, bucket=bucket)


def _layers(w: Recorder, st: Stack, name: str, bucket: str, L: int, q: int, a: int, f: int, cross: int | None,
            unused_cross: bool, self_causal: bool, attend: Callable[[Recorder, int], None] | None) -> None:
    s, b, h = w.B.s, w.B.b, w.B.s.hidden
    tok = (b, q)
    lay = f"{name}.layers.{{bid}}"
    attn = [("self_attn", q, self_causal)]
    attn += [("encoder_attn", cross, False)] if cross is not None else []
    for att, k_len, causal in attn:
        # the encoder's self-attention (the one that is neither causal nor cross) may name its projections its own way
        names = st.encoder_self if att == "self_attn" and not causal else AttnNames()
        if st.pre_ln:
            w.norm(f"{lay}.{att}_layer_norm", tok, h, L, bucket=bucket)
        _projections(w, st, f"{lay}.{att}", bucket, L, tok, (b, k_len), h, names=names)
        if attend is not None and att == "self_attn":
            attend(w, L)
        else:
            w.B.attention(w.label(f"{lay}.{att}", L), bucket, a, q, k_len, h // a, L, causal=causal)
        w.linear(f"{lay}.{att}.{names.o}", tok, h, h, st.proj_bias, L, bucket=bucket)
        if not st.pre_ln:
            w.norm(f"{lay}.{att}_layer_norm", tok, h, L, bucket=bucket)
    if unused_cross:   # stored, never called: L copies, 0 calls
        _projections(w, st, f"{lay}.encoder_attn", bucket, L, tok, tok, h, runs=False)
        w.linear(f"{lay}.encoder_attn.out_proj", tok, h, h, st.proj_bias, L, " (not run: no encoder)", bucket, runs=False)
        w.norm(f"{lay}.encoder_attn_layer_norm", tok, h, L, False, " (not run)", bucket, runs=False)
    if st.pre_ln:
        w.norm(f"{lay}.final_layer_norm", tok, h, L, bucket=bucket)
    w.linear(f"{lay}.fc1", tok, h, f, True, L, bucket=bucket)
    w.B.activation(w.label(f"{lay}.act", L), bucket, tok, f, s.activation, L)
    w.linear(f"{lay}.fc2", tok, f, h, True, L, bucket=bucket)
    if not st.pre_ln:
        w.norm(f"{lay}.final_layer_norm", tok, h, L, bucket=bucket)


def _projections(w: Recorder, st: Stack, att: str, bucket: str, L: int, tok: tuple[int, ...], kv: tuple[int, ...],
                 h: int, runs: bool = True, names: AttnNames = AttnNames()) -> None:
    """q_proj over the queries, k_proj and v_proj over the keys (k_proj biased unless the stack says not)."""
    note = "" if runs else " (not run: no encoder)"
    for m, tokens, bias in ((names.q, tok, st.proj_bias), (names.k, kv, st.proj_bias and st.k_bias),
                            (names.v, kv, st.proj_bias)):
        w.linear(f"{att}.{m}", tokens, h, h, bias, L, note, bucket, runs=runs)


def classification_head(w: Recorder) -> None:
    """BartClassificationHead (and T5ClassificationHead, its copy) on the decoder's state at the last <eos> of each
    row, one per sequence: dense, tanh, out_proj (num_labels)."""
    B, h = w.B, w.B.s.hidden
    w.linear("classification_head.dense", (B.b,), h, h, True, bucket="cls", top=True)
    B.activation("classification_head act (tanh)", "cls", (B.b,), h, "tanh")
    w.linear("classification_head.out_proj", (B.b,), h, B.s.num_labels, True, bucket="cls", top=True)


def embeddings(w: Recorder, name: str, rows: int, positions: int, n: int, tied_note: str = "", params: bool = True,
               norm: bool = False, positions_note: str = "") -> None:
    """`name`'s token lookup (`params` false: its weight counted at another lookup), its learned positions (0 rows:
    a buffer, sinusoidal: no parameters) and, with `norm`, its layernorm_embedding."""
    B, h = w.B, w.B.s.hidden
    w.embedding(f"{name}.embed_tokens", rows, h, n, tied_note, "embedding", params)
    if positions:
        w.embedding(f"{name}.embed_positions", positions, h, n, positions_note, "embedding")
    else:
        B.embedding(f"{name}.embed_positions", "embedding", 0, h, n)
    if norm:
        w.norm(f"{name}.layernorm_embedding", (B.b, n), h, residual=False, bucket="embedding")


def kv_cache(s: ArchSpec, b: int, nd: int, enc_tokens: int | None, ab: int, enc_label: str, enc_rule: str) -> KVLines:
    """The decoder's self-attention K/V over s_dec tokens, and (an encoder-decoder; EncoderDecoderCache) the
    cross-attention K/V over the encoder's tokens; the decoder alone (enc_tokens None) holds self-attention only
    (DynamicCache)."""
    per_tok = 2 * s.decoder_layers * s.hidden * ab
    if enc_tokens is None:
        return [(f"b={b}, s={nd}", per_tok * b * nd, f"2 x L_dec x h x s x b x {ab} B = {per_tok:,} B/token")]
    return [(f"decoder self-attention, b={b}, s_dec={nd}", per_tok * b * nd, f"2 x L_dec x h x s_dec x b x {ab} B"),
            (enc_label, per_tok * b * enc_tokens, enc_rule.format(ab=ab))]
