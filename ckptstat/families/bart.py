"""BART and mBART (transformers modeling_bart.py, modeling_mbart.py): an encoder-decoder with a token embedding
`shared`, learned positions per stack numbered from an offset of 2 (BartLearnedPositionalEmbedding:
max_position_embeddings + 2 rows), a layernorm_embedding after the embeddings, biased projections, and a gelu
feed-forward. BART is post-LN; mBART is pre-LN with one more LayerNorm at the end of each stack. The LM head's
final_logits_bias is a registered buffer, not a parameter.

Ties (transformers 5: BartModel._tied_weights_keys ties encoder.embed_tokens and decoder.embed_tokens to `shared`,
BartForConditionalGeneration's lm_head to model.shared, and PreTrainedModel.get_expanded_tied_weights_keys applies
them only when the config's tie_word_embeddings is true): one V x h matrix by default; with tie_word_embeddings
false, each stack's embed_tokens and the lm_head are their own, and `shared` is a parameter the forward never
reads. (transformers 4 tied the stacks' embed_tokens to `shared` whatever the config; its untied files hold
`shared` and lm_head only, and transformers 5 initialises both embed_tokens anew when it loads one.)"""
from __future__ import annotations

from typing import Any

from .framework import infer
from .framework.base import ArchSpec, Cfg, Family, HeadRule, KVLines, Sample, Shapes, Tensors, TieRule, add_linear, add_norm
from .framework.ops import Builder

OFFSET = 2   # BartLearnedPositionalEmbedding: positions are looked up at position + 2


def from_config(c: Cfg) -> ArchSpec:
    h = c.int("d_model")
    a, ad = c.int("encoder_attention_heads"), c.int("decoder_attention_heads")
    return ArchSpec(layers=c.int("encoder_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("encoder_ffn_dim"), vocab=c.int("vocab_size"),
                    positions=c.int("max_position_embeddings") + OFFSET,
                    activation=str(c.get("activation_function", default="gelu")),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    decoder_layers=c.int("decoder_layers"), decoder_heads=ad,
                    decoder_ffn=c.int("decoder_ffn_dim"), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"(^|\.)shared\.weight$|encoder\.embed_tokens\.weight$", "shared embedding")
    P = infer.shape(T, r"encoder\.embed_positions\.weight$", "encoder.embed_positions")[0]
    f = infer.shape(T, r"encoder\.layers\.0\.fc1\.weight$", "encoder fc1")[0]
    fd = infer.shape(T, r"decoder\.layers\.0\.fc1\.weight$", "decoder fc1")[0] if infer.has(
        T, r"decoder\.layers\.0\.fc1\.weight$") else f
    a, note = infer.heads_for(h, 64)
    mbart = infer.has(T, r"encoder\.layer_norm\.weight$")
    cls = infer.find(T, r"classification_head\.out_proj\.weight$")
    # untied: lm_head or a stack's embed_tokens stored apart from `shared` (not absent, not an alias of it)
    shared = infer.find(T, r"(^|\.)shared\.weight$")
    lm, enc = infer.find(T, r"lm_head\.weight$"), infer.find(T, r"encoder\.embed_tokens\.weight$")
    apart = [t for t in (lm, enc if shared is not None else None)
             if t is not None and (shared is None or t.alias_key != shared.alias_key)]
    notes: tuple[str, ...] = (note, "no config: activation assumed gelu")
    if apart and shared is not None and enc is None:
        notes += ("lm_head stored apart and no encoder.embed_tokens (a transformers 4 untied file): transformers 5 builds "
                  "each stack's embed_tokens apart from `shared` (tie_word_embeddings false)",)
    return ArchSpec(num_labels=cls.shape[0] if cls is not None and len(cls.shape) == 2 else 2,
                    layers=infer.count_layers(T, r"encoder\.layers\.(\d+)\."), hidden=h, heads=a, kv_heads=a,
                    head_dim=h // a, intermediate=f, vocab=V, positions=P, tied_embeddings=not apart,
                    decoder_layers=infer.count_layers(T, r"decoder\.layers\.(\d+)\."),
                    decoder_heads=a, decoder_ffn=fd, assumptions=notes,
                    **dict(common, model_type="mbart" if mbart else "bart"))


def _pre_ln(s: ArchSpec) -> bool:
    return s.model_type == "mbart"


def build(B: Builder) -> None:
    s, b = B.s, B.b
    h, tied = s.hidden, s.tied_embeddings
    if not tied:   # a parameter the forward never reads: each stack looks up its own embed_tokens
        B.add("shared (unused: tie_word_embeddings false)", "embedding", "embedding", 1, (0,), (0,), params=s.vocab * h)

    def stack(name: str, bucket: str, L: int, n: int, a: int, f: int, cross: int | None) -> None:
        tok = (b, n)
        d = h // a
        # the encoder's lookup holds `shared` when tied; the decoder's reads it again
        B.embedding(f"{name}.embed_tokens" + (" (= shared)" if tied else ""), "embedding", s.vocab, h, n,
                    params=not tied or name == "encoder")
        B.embedding(f"{name}.embed_positions", "embedding", s.positions, h, n)
        B.norm(f"{name}.layernorm_embedding", "embedding", tok, h, residual=False)
        lay = f"{name}.layers[{L}]"
        attn = [("self_attn", n, name == "decoder")] + ([("encoder_attn", cross, False)] if cross is not None else [])
        for att, k_len, causal in attn:
            B.linear(f"{lay}.{att}.q_proj", bucket, tok, h, h, True, L)
            B.linear(f"{lay}.{att}.k_proj", bucket, (b, k_len), h, h, True, L)
            B.linear(f"{lay}.{att}.v_proj", bucket, (b, k_len), h, h, True, L)
            B.attention(f"{lay}.{att}", bucket, a, n, k_len, d, L, causal=causal)
            B.linear(f"{lay}.{att}.out_proj", bucket, tok, h, h, True, L)
            B.norm(f"{lay}.{att}_layer_norm", bucket, tok, h, L)
        B.linear(f"{lay}.fc1", bucket, tok, h, f, True, L)
        B.activation(f"{lay}.act", bucket, tok, f, s.activation, L)
        B.linear(f"{lay}.fc2", bucket, tok, f, h, True, L)
        B.norm(f"{lay}.final_layer_norm", bucket, tok, h, L)
        if _pre_ln(s):
            B.norm(f"{name}.layer_norm", bucket, tok, h, residual=False)

    stack("encoder", "encoder", s.layers, B.seq, s.heads, s.intermediate, None)
    stack("decoder", "decoder", s.decoder_layers, B.dec_seq, s.decoder_heads, s.decoder_ffn, B.seq)
    if s.head == "seqcls":
        # BartClassificationHead on the decoder's last <eos> state, one per sequence: dense, tanh, out_proj
        B.linear("classification_head.dense", "cls", (b,), h, h, True)
        B.activation("classification_head act (tanh)", "cls", (b,), h, "tanh")
        B.linear("classification_head.out_proj", "cls", (b,), h, s.num_labels, True)
    elif s.head == "qa":
        B.linear("qa_outputs", "cls", (b, B.dec_seq), h, 2, True)
    elif s.head == "lm":
        # + final_logits_bias, a buffer: its add is element-wise, not a parameter
        B.linear("lm_head" + (" (tied to shared)" if s.tied_embeddings else ""), "cls", (b, B.dec_seq), h, s.vocab,
                 False, tied=s.tied_embeddings)


def expected_tensors(s: ArchSpec) -> Shapes:
    h = s.hidden
    top = "" if s.head == "base" else "model."   # BartForConditionalGeneration wraps BartModel as `model`
    out: Shapes = {top + "shared.weight": (s.vocab, h)}

    def stack(stack_name: str, L: int, f: int, cross: bool) -> None:
        name = top + stack_name
        out[f"{name}.embed_tokens.weight"] = (s.vocab, h)
        out[f"{name}.embed_positions.weight"] = (s.positions, h)
        add_norm(out, f"{name}.layernorm_embedding", h)
        for i in range(L):
            p = f"{name}.layers.{i}."
            for att in ("self_attn",) + (("encoder_attn",) if cross else ()):
                for m in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    add_linear(out, f"{p}{att}.{m}", h, h)
                add_norm(out, f"{p}{att}_layer_norm", h)
            add_linear(out, p + "fc1", f, h)
            add_linear(out, p + "fc2", h, f)
            add_norm(out, p + "final_layer_norm", h)
        if _pre_ln(s):
            add_norm(out, f"{name}.layer_norm", h)

    stack("encoder", s.layers, s.intermediate, False)
    stack("decoder", s.decoder_layers, s.decoder_ffn, True)
    if s.head == "lm":
        out["lm_head.weight"] = (s.vocab, h)
    elif s.head == "seqcls":
        add_linear(out, "classification_head.dense", h, h)
        add_linear(out, "classification_head.out_proj", s.num_labels, h)
    elif s.head == "qa":
        add_linear(out, "qa_outputs", 2, h)
    return out


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """EncoderDecoderCache: the decoder's self-attention K/V over s_dec tokens, cross-attention K/V over s."""
    per_tok = 2 * s.decoder_layers * s.hidden * ab
    return [(f"decoder self-attention, b={b}, s_dec={nd}", per_tok * b * nd, f"2 x L_dec x h x s_dec x b x {ab} B"),
            (f"cross-attention, b={b}, s_enc={n}", per_tok * b * n, f"2 x L_dec x h x s_enc x b x {ab} B")]


_SIZES = dict(d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=2,
              encoder_ffn_dim=37, decoder_ffn_dim=41, vocab_size=99, max_position_embeddings=64)

FAMILY = Family(
    name="bart",
    before=("llama",),   # tried before them: its layers.N.self_attn.q_proj names match llama's signature
    model_types=("bart", "mbart"),
    signature=r"(^|[./])(encoder|decoder)[./]layernorm_embedding[./]",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm", "seqcls", "qa"),   # BartForCausalLM (the decoder alone) is not modelled
    # BartForConditionalGeneration's final_logits_bias (a buffer) shows the LM head when a tied lm_head was dropped
    head_rules=(HeadRule(r"(^|\.)lm_head\.weight$", "lm"), HeadRule(r"(^|\.)final_logits_bias$", "lm"),
                HeadRule(r"(^|\.)classification_head\.out_proj\.weight$", "seqcls"),
                HeadRule(r"(^|\.)qa_outputs\.weight$", "qa")),
    no_head="base",
    default_head="lm",
    # BartModel._tied_weights_keys: encoder/decoder embed_tokens are `shared`; BartForConditionalGeneration's:
    # lm_head.weight is model.shared; each only with tie_word_embeddings (transformers 5)
    tie_rules=(TieRule("encoder.embed_tokens.weight", "shared.weight", "config", module=True),
               TieRule("decoder.embed_tokens.weight", "shared.weight", "config", module=True),
               TieRule("lm_head.weight", "model.shared.weight", "config", heads=("lm",)),
               # BartForCausalLM / MBartForCausalLM: the decoder alone (BartDecoderWrapper), no `shared`
               TieRule("lm_head.weight", "model.decoder.embed_tokens.weight", "config", heads=("lm",))),
    position_offset={"bart": OFFSET, "mbart": OFFSET},
    encoder_decoder=True,
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
    ),
)
