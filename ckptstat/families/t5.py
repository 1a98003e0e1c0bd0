"""T5 and mT5 (transformers modeling_t5.py, modeling_mt5.py): an encoder-decoder with one shared
embedding, RMSNorm without biases, relative position buckets (a bias table in each stack's first
block), cross-attention in the decoder, and a relu (t5) or gated-gelu (t5 v1.1, mt5) feed-forward."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from .framework import infer
from .framework.base import ArchSpec, Cfg, Family, HeadRule, KVLines, Sample, Shapes, Tensors, TieRule
from .framework.ops import Builder


def from_config(c: Cfg) -> ArchSpec:
    ffp = str(c.get("feed_forward_proj", default="relu"))   # "relu", "gated-gelu"
    gated = ffp.startswith("gated-")
    layers = c.int("num_layers")
    return ArchSpec(layers=layers, hidden=c.int("d_model"), heads=c.int("num_heads"),
                    kv_heads=c.int("num_heads"), head_dim=c.int("d_kv"), intermediate=c.int("d_ff"),
                    vocab=c.int("vocab_size"), activation=ffp.split("-")[-1], gated_mlp=gated, norm="rmsnorm",
                    qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    decoder_layers=c.int("num_decoder_layers", default=layers),
                    relative_buckets=c.int("relative_attention_num_buckets", default=32), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"(^|\.)shared\.weight$|encoder\.embed_tokens\.weight$", "shared embedding")
    inner = infer.shape(T, r"encoder\.block\.0\.layer\.0\.SelfAttention\.q\.weight$", "SelfAttention.q")[0]
    buckets, a = infer.shape(T, r"relative_attention_bias\.weight$", "relative_attention_bias")
    gated = infer.has(T, r"DenseReluDense\.wi_0\.weight$")
    f = infer.shape(T, r"DenseReluDense\.wi(_0)?\.weight$", "DenseReluDense.wi")[0]
    lm = infer.find(T, r"lm_head\.weight$")
    return ArchSpec(layers=infer.count_layers(T, r"encoder\.block\.(\d+)\."), hidden=h, heads=a, kv_heads=a,
                    head_dim=inner // a, intermediate=f, vocab=V, activation="gelu" if gated else "relu",
                    gated_mlp=gated, norm="rmsnorm", qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=lm is None, decoder_layers=infer.count_layers(T, r"decoder\.block\.(\d+)\."),
                    relative_buckets=buckets,
                    assumptions=("no config: activation assumed relu (t5) or gelu (gated, t5 v1.1)",), **common)


def build(B: Builder) -> None:
    s, b = B.s, B.b
    h, f, a, d = s.hidden, s.intermediate, s.heads, s.head_dim
    inner = a * d
    B.embedding("shared", "embedding", s.vocab, h, B.seq)

    def block(stack: str, bucket: str, L: int, n: int, cross: int | None) -> None:
        tok = (b, n)
        lay = f"{stack}.block[{L}]"
        B.add(f"{stack}.block.0.relative_attention_bias", "embedding", bucket, 1, (n, n), (1, a, n, n),
              params=s.relative_buckets * a)
        attn = [("layer.0.SelfAttention", n, stack == "decoder")]
        if cross is not None:
            attn.append(("layer.1.EncDecAttention", cross, False))
        for name, k_len, causal in attn:
            B.norm(f"{lay}.{name} layer_norm", bucket, tok, h, L)
            B.linear(f"{lay}.{name}.q", bucket, tok, h, inner, False, L)
            kv_tok = (b, k_len)
            B.linear(f"{lay}.{name}.k", bucket, kv_tok, h, inner, False, L)
            B.linear(f"{lay}.{name}.v", bucket, kv_tok, h, inner, False, L)
            B.attention(f"{lay}.{name}", bucket, a, n, k_len, d, L, causal=causal, extra_ew=1)  # + position bias
            B.linear(f"{lay}.{name}.o", bucket, tok, inner, h, False, L)
        ff = f"layer.{2 if cross is not None else 1}.DenseReluDense"
        B.norm(f"{lay}.{ff} layer_norm", bucket, tok, h, L)
        if s.gated_mlp:
            B.linear(f"{lay}.{ff}.wi_0", bucket, tok, h, f, False, L)
            B.linear(f"{lay}.{ff}.wi_1", bucket, tok, h, f, False, L)
        else:
            B.linear(f"{lay}.{ff}.wi", bucket, tok, h, f, False, L)
        B.activation(f"{lay}.{ff} act", bucket, tok, f, s.activation, L, gated=s.gated_mlp)
        B.linear(f"{lay}.{ff}.wo", bucket, tok, f, h, False, L)
        B.norm(f"{stack}.final_layer_norm", bucket, tok, h, residual=False)

    block("encoder", "encoder", s.layers, B.seq, None)
    if s.head == "encoder-only":
        return
    B.embedding("decoder.embed_tokens (= shared)", "embedding", s.vocab, h, B.dec_seq, params=False)
    block("decoder", "decoder", s.decoder_layers, B.dec_seq, B.seq)
    if s.head == "lm":
        B.linear("lm_head" + (" (tied to shared)" if s.tied_embeddings else ""), "cls", (b, B.dec_seq), h, s.vocab,
                 False, tied=s.tied_embeddings)


def expected_tensors(s: ArchSpec) -> Shapes:
    h, f, inner = s.hidden, s.intermediate, s.heads * s.head_dim
    out: Shapes = {"shared.weight": (s.vocab, h), "encoder.embed_tokens.weight": (s.vocab, h)}
    ff = ("wi_0", "wi_1", "wo") if s.gated_mlp else ("wi", "wo")

    def block(stack: str, i: int, cross: bool) -> None:
        q = f"{stack}.block.{i}.layer."
        for m in ("q", "k", "v"):
            out[f"{q}0.SelfAttention.{m}.weight"] = (inner, h)
        out[f"{q}0.SelfAttention.o.weight"] = (h, inner)
        if i == 0:
            out[f"{q}0.SelfAttention.relative_attention_bias.weight"] = (s.relative_buckets, s.heads)
        out[f"{q}0.layer_norm.weight"] = (h,)
        n = 1
        if cross:
            for m in ("q", "k", "v"):
                out[f"{q}1.EncDecAttention.{m}.weight"] = (inner, h)
            out[f"{q}1.EncDecAttention.o.weight"] = (h, inner)
            out[f"{q}1.layer_norm.weight"] = (h,)
            n = 2
        for m in ff:
            out[f"{q}{n}.DenseReluDense.{m}.weight"] = (h, f) if m == "wo" else (f, h)
        out[f"{q}{n}.layer_norm.weight"] = (h,)

    for i in range(s.layers):
        block("encoder", i, False)
    out["encoder.final_layer_norm.weight"] = (h,)
    if s.head != "encoder-only":
        out["decoder.embed_tokens.weight"] = (s.vocab, h)
        for i in range(s.decoder_layers):
            block("decoder", i, True)
        out["decoder.final_layer_norm.weight"] = (h,)
    if s.head == "lm":
        out["lm_head.weight"] = (s.vocab, h)
    return out


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """The decoder's self-attention cache over s_dec tokens and its cross-attention cache over the
    encoder's s tokens."""
    if s.head == "encoder-only":
        return []
    per_tok = 2 * s.decoder_layers * s.kv_heads * s.head_dim * ab
    return [(f"decoder self-attention, b={b}, s_dec={nd}", per_tok * b * nd, f"2 x L_dec x a x d x s_dec x b x {ab} B"),
            (f"cross-attention, b={b}, s_enc={n}", per_tok * b * n, f"2 x L_dec x a x d x s_enc x b x {ab} B")]


# llama.cpp architectures (convert_hf_to_gguf.py T5Model, T5EncoderModel; mT5 converts as t5).
GGUF_CLASSES = {"t5": "T5ForConditionalGeneration", "t5encoder": "T5EncoderModel"}
_GGUF_KEYS = {"block_count": "num_layers", "decoder_block_count": "num_decoder_layers", "embedding_length": "d_model",
              "feed_forward_length": "d_ff", "attention.head_count": "num_heads", "attention.key_length": "d_kv",
              "attention.relative_buckets_count": "relative_attention_num_buckets", "context_length": "n_positions"}


def _gated(names: Collection[str]) -> bool:
    """T5 v1.1 / mT5 / Flan-T5's gated feed-forward: wi_0 is ffn_gate (and wi_1 ffn_up, T5's wi)."""
    return any(n.startswith("enc.blk.") and ".ffn_gate." in n for n in names)


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """T5's own config names from `{arch}.*`. The activation is not in the file: relu for a plain feed-forward
    (T5), gelu for a gated one (T5 v1.1, mT5, Flan-T5: gated-gelu); decoder layers from decoder_block_count, else
    counted from dec.blk.N (the converter of an equal-depth model does not always write the key)."""
    if arch not in GGUF_CLASSES:
        return None
    cfg = infer.gguf_config(arch, metadata, tensors, GGUF_CLASSES[arch], keys=_GGUF_KEYS)
    if cfg is None:
        return None
    cfg.update(model_type="t5", feed_forward_proj="gated-gelu" if _gated(tensors) else "relu")
    if arch == "t5" and "num_decoder_layers" not in cfg:
        cfg["num_decoder_layers"] = infer.count_layers(tensors, r"^dec\.blk\.(\d+)\.")
    return cfg


def _stack(s: str, p: str, ff: int, gated: bool) -> tuple[tuple[str, str], ...]:
    """One stack's names: s the HF stack (encoder/decoder), p llama.cpp's (enc/dec), ff the feed-forward's layer."""
    b, g = f"{s}.block.{{bid}}.layer.", f"{p}.blk.{{bid}}."
    out = [(f"{b}0.layer_norm", g + "attn_norm"), (f"{b}0.SelfAttention.relative_attention_bias", g + "attn_rel_b")]
    out += [(f"{b}0.SelfAttention.{m}", g + f"attn_{m}") for m in "qkvo"]
    if ff == 2:
        out.append((f"{b}1.layer_norm", g + "cross_attn_norm"))
        out += [(f"{b}1.EncDecAttention.{m}", g + f"cross_attn_{m}") for m in "qkvo"]
    out += [(f"{b}{ff}.layer_norm", g + "ffn_norm"), (f"{b}{ff}.DenseReluDense.wo", g + "ffn_down"),
            (f"{b}{ff}.DenseReluDense.{'wi_1' if gated else 'wi'}", g + "ffn_up")]
    if gated:
        out.append((f"{b}{ff}.DenseReluDense.wi_0", g + "ffn_gate"))
    return (*out, (f"{s}.final_layer_norm", f"{p}.output_norm"))


# HF module -> llama.cpp GGUF tensor name (gguf-py tensor_mapping.py, MODEL_ARCH.T5 / T5ENCODER). The converter
# writes the shared embedding once (shared, encoder.embed_tokens or decoder.embed_tokens: the first it meets) as
# token_embd; each stack's relative_attention_bias ([buckets, heads], block 0) is attn_rel_b, unchanged.
GGUF_TENSOR_NAMES = (("shared", "token_embd"), ("lm_head", "output")) + _stack("encoder", "enc", 1, False) + \
    _stack("decoder", "dec", 2, False)
GGUF_TENSOR_NAMES_GATED = GGUF_TENSOR_NAMES[:2] + _stack("encoder", "enc", 1, True) + _stack("decoder", "dec", 2, True)


def gguf_table(arch: str, names: Collection[str]) -> tuple[tuple[str, str], ...]:
    return GGUF_TENSOR_NAMES_GATED if _gated(names) else GGUF_TENSOR_NAMES


_SIZES = dict(d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, vocab_size=99)

FAMILY = Family(
    name="t5",
    model_types=("t5", "mt5"),
    signature=r"(^|[./])(encoder|decoder)[./]block[./]\d+[./]layer[./]\d+[./](SelfAttention|EncDecAttention)",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm", "encoder-only"),
    # T5ForConditionalGeneration's torch.save state_dict keeps lm_head (tied or not); a safetensors save drops
    # the tied lm_head and decoder.embed_tokens, so decoder blocks show the LM head unless the file keeps
    # decoder.embed_tokens without lm_head: then it is T5Model's state_dict. Task heads: T5ForSequence-
    # Classification `classification_head`, T5ForTokenClassification `classifier`, T5ForQuestionAnswering `qa_outputs`.
    head_rules=(HeadRule(r"(^|\.)lm_head\.weight$", "lm"),
                HeadRule(r"(^|\.)classification_head\.out_proj\.weight$", "seqcls"),
                HeadRule(r"^classifier\.weight$", "tokcls"), HeadRule(r"^qa_outputs\.weight$", "qa"),
                HeadRule(r"(^|\.)decoder\.block\.\d+\.", "lm", unless=r"(^|\.)decoder\.embed_tokens\.weight$", otherwise="base")),
    no_head="encoder-only",
    default_head="lm",
    # every head ties the embed_tokens of the stacks it has (T5EncoderModel and T5ForTokenClassification only
    # the encoder's: `heads=()` asks the file for the stack's module); only T5ForConditionalGeneration has lm_head
    tie_rules=(TieRule("encoder.embed_tokens.weight", "shared.weight", "always", module=True),
               TieRule("decoder.embed_tokens.weight", "shared.weight", "always", module=True),
               TieRule("lm_head.weight", "shared.weight", "config", heads=("lm",))),
    encoder_decoder=True,
    kv_cache=kv_cache,
    gguf_architectures=tuple(GGUF_CLASSES), gguf_config=gguf_config, gguf_tensor_names=GGUF_TENSOR_NAMES, gguf_table=gguf_table,
    samples=(
        Sample("T5Config", _SIZES, ("T5ForConditionalGeneration", "T5EncoderModel")),
        # T5Model stores what a tied T5ForConditionalGeneration does (lm_head is shared): names show an LM
        Sample("T5Config", _SIZES, ("T5Model",), infer=False),
        Sample("T5Config", dict(_SIZES, feed_forward_proj="gated-gelu", tie_word_embeddings=False, num_decoder_layers=3),
               ("T5ForConditionalGeneration", "T5EncoderModel")),
        Sample("MT5Config", _SIZES, ("MT5ForConditionalGeneration",)),
    ),
)
