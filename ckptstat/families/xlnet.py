"""XLNet (transformers modeling_xlnet.py: XLNetModel, XLNetLMHeadModel, XLNetForTokenClassification): post-LN
layers of relative attention whose projections are [d_model, n_head, d_head] parameters run by einsum (q, k, v,
o and the position projection r, each one matmul over the tokens), and a two-layer FFN. Without `mems`,
`perm_mask` or `target_mapping` (a plain forward) the query stream runs alone: per layer Q K^T over the qlen
tokens (ac), Q R^T over the relative position encoding's klen + qlen rows (bd, attn_type "bi"), the sinusoidal
encoding itself computed element-wise, the position rows projected by r for every batch row, and P V; the segment
term (ef) only with token_type_ids, which a forward of input_ids alone leaves out. `mask_emb`, `seg_embed` and the
r_s bias are held and not run. The LM head (`lm_loss`, biased) is tied to the word embedding unless
tie_word_embeddings is false. The model returns its `mems`, no cache object: no KV cache is counted
(tests/coverage_walk.py's oracle reads a cache or past_key_values). Refused (meta path): attn_type "uni" (klen + 1
position rows; transformers 5 cannot run it on a batch over 1 with an attention mask, so no test checks it) and
bi_data."""
from __future__ import annotations

from typing import Any

from ..errors import NoAnalyticModel
from .framework import encoder, infer
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors, TieRule, add_linear, add_norm
from .framework.ops import Builder


def from_config(c: Cfg) -> ArchSpec:
    kind = c.get("attn_type", default=FROM_CLASS)
    if kind != "bi":
        raise NoAnalyticModel(f"{c.path}: XLNet attn_type {kind!r}: the op template describes 'bi' alone")
    if c.get("bi_data", default=FROM_CLASS):
        raise NoAnalyticModel(f"{c.path}: XLNet with bi_data (forward and backward position encodings per half batch)")
    h, a = c.int("d_model"), c.int("n_head")
    act = c.get("ff_activation", default=FROM_CLASS)
    return ArchSpec(layers=c.int("n_layer"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("d_inner"), vocab=c.int("vocab_size"), activation=str(act),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"(^|\.)word_embedding\.weight$", "word embedding")
    _, a, d = infer.shape(T, r"rel_attn\.q$", "rel_attn.q")
    f = infer.shape(T, r"ff\.layer[._]1\.weight$", "ff.layer_1")[0]   # (canonical names spell it layer.1)
    return ArchSpec(num_labels=infer.num_labels(T), layers=infer.count_layers(T, r"layer\.(\d+)\.rel_attn\.q$"),
                    hidden=h, heads=a, kv_heads=a, head_dim=d, intermediate=f, vocab=V,
                    tied_embeddings=not infer.has(T, r"(^|\.)lm_loss\.weight$"),
                    assumptions=("no config: attn_type 'bi' assumed (klen + qlen relative positions)",), **common)


def build(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, a, d, L = s.hidden, s.heads, s.head_dim, s.layers
    R = 2 * n   # relative positions klen + qlen (no mems: klen = qlen)
    tok, p = (b, n), f"transformer.layer[{L}]"
    B.embedding("transformer.word_embedding", "embedding", s.vocab, h, n)
    B.add("transformer.mask_emb (held: run only with target_mapping)", "embedding", "embedding", 0, tok, tok, params=h)
    for m in ("q", "k", "v"):
        B.linear(f"{p}.rel_attn.{m}", "encoder", tok, h, a * d, False, L)
    B.linear(f"{p}.rel_attn.r (the relative position rows, per batch row)", "encoder", (b, R), h, a * d, False, L)
    B.attention(f"{p}.rel_attn (ac, P V)", "encoder", a, n, n, d, L, causal=False)
    B.add(f"{p}.rel_attn (bd: Q R^T)", "attention", "encoder", L, (b, a, n, d), (b, a, n, R), macs=b * a * n * R * d)
    # r_w_bias, r_r_bias (added to the queries), r_s_bias and seg_embed (the segment term, not run): held
    B.add(f"{p}.rel_attn biases, seg_embed", "activation", "encoder", L, (b, a, n, d), (b, a, n, d),
          params=5 * a * d * L, ew=2 * b * a * n * d)
    B.linear(f"{p}.rel_attn.o", "encoder", tok, a * d, h, False, L)
    B.norm(f"{p}.rel_attn.layer_norm", "encoder", tok, h, L)
    B.linear(f"{p}.ff.layer_1", "encoder", tok, h, s.intermediate, True, L)
    B.activation(f"{p}.ff act", "encoder", tok, s.intermediate, s.activation, L)
    B.linear(f"{p}.ff.layer_2", "encoder", tok, s.intermediate, h, True, L)
    B.norm(f"{p}.ff.layer_norm", "encoder", tok, h, L)
    if s.head == "lm":
        B.linear("lm_loss" + (" (tied to word_embedding)" if s.tied_embeddings else ""), "cls", tok, h, s.vocab, True,
                 tied=s.tied_embeddings)
    encoder.token_heads(B)


def expected_tensors(s: ArchSpec) -> Shapes:
    h, a, d, f = s.hidden, s.heads, s.head_dim, s.intermediate
    p = "" if s.head == "base" else "transformer."
    out: Shapes = {f"{p}word_embedding.weight": (s.vocab, h), f"{p}mask_emb": (1, 1, h)}
    for i in range(s.layers):
        q = f"{p}layer.{i}."
        for m in ("q", "k", "v", "o", "r"):
            out[f"{q}rel_attn.{m}"] = (h, a, d)
        for m in ("r_r_bias", "r_s_bias", "r_w_bias"):
            out[f"{q}rel_attn.{m}"] = (a, d)
        out[f"{q}rel_attn.seg_embed"] = (2, a, d)
        add_norm(out, f"{q}rel_attn.layer_norm", h)
        add_norm(out, f"{q}ff.layer_norm", h)
        add_linear(out, f"{q}ff.layer_1", f, h)
        add_linear(out, f"{q}ff.layer_2", h, f)
    if s.head == "lm":
        add_linear(out, "lm_loss", s.vocab, h)
    encoder.token_head_tensors(out, s)
    return out


_SIZES = dict(vocab_size=99, d_model=32, n_layer=2, n_head=4, d_inner=37)

FAMILY = Family(
    name="xlnet",
    model_types=("xlnet",),
    signature=r"(^|[./])rel_attn[./]r_w_bias$",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm", "tokcls"),
    head_rules=(HeadRule(r"(^|\.)lm_loss\.", "lm"), HeadRule(r"(^|\.)classifier\.weight$", "tokcls")),
    tie_rules=(TieRule("lm_loss.weight", "transformer.word_embedding.weight", "config", heads=("lm",)),),
    samples=(
        # CPU: XLNetModel builds its position encoding on the device of its inputs
        Sample("XLNetConfig", _SIZES, ("XLNetModel", "XLNetLMHeadModel", "XLNetForTokenClassification"), device="cpu"),
        Sample("XLNetConfig", dict(_SIZES, ff_activation="relu", tie_word_embeddings=False), ("XLNetLMHeadModel",),
               device="cpu"),
    ),
)
