"""The BART-shaped transformer stack, described once (`Stack`): the bart family's model types (transformers
modeling_bart.py and its copies: mbart, plbart, mvp, marian, pegasus, blenderbot, blenderbot_small, trocr) and
Whisper's decoder (modeling_whisper.py) differ only in what a `Stack` says. A stack is a token lookup, positions,
an optional `layernorm_embedding`, layers of self-attention (q/k/v/out_proj), cross-attention in a decoder
(encoder_attn, same projections), fc1 -> activation -> fc2, each sublayer's LayerNorm after it (post-LN, BART) or
before it (pre-LN, mBART), and for pre-LN stacks one `layer_norm` after the last layer. The op template
(`layer_ops`), the expected tensors (`layer_tensors`) and the KV cache (`kv_cache`) are walked from it.

An encoder-decoder's *ForCausalLM is the decoder alone (BartDecoderWrapper under `model.`, its own lm_head): its
spec has 0 encoder layers (`decoder_alone`). Its layers still hold encoder_attn's weights, which it never runs
without encoder_hidden_states: they count as parameters, not as FLOPs, and the cache holds self-attention only."""
from __future__ import annotations

from dataclasses import dataclass

from .base import ArchSpec, Cfg, KVLines, Shapes, add_linear, add_norm
from .ops import Builder


@dataclass(frozen=True)
class Stack:
    pre_ln: bool = False            # LayerNorm before each sublayer (mBART, Pegasus, Blenderbot, Whisper)
    embedding_norm: bool = True     # a LayerNorm after the embeddings, `layernorm_embedding` (BART)
    # the final LayerNorm's name after the last layer (None: none); pre-LN stacks have one
    final_norm: str | None = None
    offset: int = 2                 # positions are looked up at position + offset (BartLearnedPositionalEmbedding)
    proj_bias: bool = True          # q/v/out_proj biases (BigBird-Pegasus' use_bias false: none)
    k_bias: bool = True             # k_proj's bias (Whisper's k_proj has none)


def decoder_alone(s: ArchSpec) -> bool:
    """An encoder-decoder family's *ForCausalLM: the decoder stack alone (no encoder layers)."""
    return s.layers == 0 and s.decoder_layers > 0


def causal_lm_alone(c: Cfg) -> bool:
    """The config's class is a *ForCausalLM: the decoder alone."""
    return c.head == "lm" and str(c.common.get("architecture") or "").endswith("ForCausalLM")


def layer_ops(B: Builder, st: Stack, name: str, bucket: str, L: int, q: int, a: int, f: int, cross: int | None,
              unused_cross: bool = False, causal: bool | None = None) -> None:
    """L layers over q tokens (a heads, FFN width f); cross: the encoder tokens cross-attention reads, None for
    none; unused_cross: the layers hold encoder_attn but never run it (the decoder alone); causal: the
    self-attention's mask (default: a `decoder`'s is causal)."""
    s, b, h = B.s, B.b, B.s.hidden
    tok = (b, q)
    lay = f"{name}.layers[{L}]"
    attn = [("self_attn", q, name.endswith("decoder") if causal is None else causal)]
    attn += [("encoder_attn", cross, False)] if cross is not None else []
    for att, k_len, causal in attn:
        if st.pre_ln:
            B.norm(f"{lay}.{att}_layer_norm", bucket, tok, h, L)
        B.linear(f"{lay}.{att}.q_proj", bucket, tok, h, h, st.proj_bias, L)
        B.linear(f"{lay}.{att}.k_proj", bucket, (b, k_len), h, h, st.proj_bias and st.k_bias, L)
        B.linear(f"{lay}.{att}.v_proj", bucket, (b, k_len), h, h, st.proj_bias, L)
        B.attention(f"{lay}.{att}", bucket, a, q, k_len, h // a, L, causal=causal)
        B.linear(f"{lay}.{att}.out_proj", bucket, tok, h, h, st.proj_bias, L)
        if not st.pre_ln:
            B.norm(f"{lay}.{att}_layer_norm", bucket, tok, h, L)
    if unused_cross:   # stored, never called: L copies, 0 calls
        for m in ("q_proj", "k_proj", "v_proj", "out_proj"):
            B.linear(f"{lay}.encoder_attn.{m} (not run: no encoder)", bucket, tok, h, h,
                     st.proj_bias and (m != "k_proj" or st.k_bias), 0, L)
        B.norm(f"{lay}.encoder_attn_layer_norm (not run)", bucket, tok, h, 0, L, residual=False)
    if st.pre_ln:
        B.norm(f"{lay}.final_layer_norm", bucket, tok, h, L)
    B.linear(f"{lay}.fc1", bucket, tok, h, f, True, L)
    B.activation(f"{lay}.act", bucket, tok, f, s.activation, L)
    B.linear(f"{lay}.fc2", bucket, tok, f, h, True, L)
    if not st.pre_ln:
        B.norm(f"{lay}.final_layer_norm", bucket, tok, h, L)
    if st.final_norm:
        B.norm(f"{name}.{st.final_norm}", bucket, tok, h, residual=False)


def layer_tensors(out: Shapes, st: Stack, name: str, L: int, h: int, f: int, cross: bool) -> None:
    """The tensors of `name`'s L layers and its final LayerNorm."""
    for i in range(L):
        p = f"{name}.layers.{i}."
        for att in ("self_attn",) + (("encoder_attn",) if cross else ()):
            for m in ("q_proj", "k_proj", "v_proj", "out_proj"):
                add_linear(out, f"{p}{att}.{m}", h, h, bias=st.proj_bias and (m != "k_proj" or st.k_bias))
            add_norm(out, f"{p}{att}_layer_norm", h)
        add_linear(out, p + "fc1", f, h)
        add_linear(out, p + "fc2", h, f)
        add_norm(out, p + "final_layer_norm", h)
    if st.final_norm:
        add_norm(out, f"{name}.{st.final_norm}", h)


def kv_cache(s: ArchSpec, b: int, nd: int, enc_tokens: int | None, ab: int, enc_label: str, enc_rule: str) -> KVLines:
    """The decoder's self-attention K/V over s_dec tokens, and (an encoder-decoder; EncoderDecoderCache) the
    cross-attention K/V over the encoder's tokens; the decoder alone (enc_tokens None) holds self-attention only
    (DynamicCache)."""
    per_tok = 2 * s.decoder_layers * s.hidden * ab
    if enc_tokens is None:
        return [(f"b={b}, s={nd}", per_tok * b * nd, f"2 x L_dec x h x s x b x {ab} B = {per_tok:,} B/token")]
    return [(f"decoder self-attention, b={b}, s_dec={nd}", per_tok * b * nd, f"2 x L_dec x h x s_dec x b x {ab} B"),
            (enc_label, per_tok * b * enc_tokens, enc_rule.format(ab=ab))]
