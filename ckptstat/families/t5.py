"""T5, mT5 and UMT5 (transformers modeling_t5.py, modeling_mt5.py, modeling_umt5.py): an encoder-decoder with one
shared embedding, RMSNorm without biases, relative position buckets (a bias table in each stack's first block; UMT5's
in every block's self-attention), cross-attention in the decoder, and a relu (t5) or gated-gelu (t5 v1.1, mt5, umt5)
feed-forward. Their task heads (the same in the three modeling files): *ForSequenceClassification, T5Model under
`transformer` and a classification_head (dense, tanh, out_proj) on the decoder's state at the last <eos> of each
row; *ForTokenClassification, the encoder alone (T5EncoderModel under `transformer`) and a `classifier` on every
token; *ForQuestionAnswering, the encoder-decoder at the top level and `qa_outputs` (num_labels wide) on every
decoder token.

The architecture is stated once, in `walk` (framework/recorder.py's Recorder): each module recorded with its
llama.cpp name as its op is written, so the op template, the expected tensors (every head) and the GGUF name tables
(plain and gated) come from one walk."""
from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .framework import infer
from .framework.archspec import Variant
from .framework.base import ArchSpec, Cfg, Family, HeadRule, KVLines, Sample, Shapes, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.seq2seq import classification_head
from .framework.walk_names import layers, pattern, signature, walked


@dataclass(frozen=True)
class T5Variant(Variant):
    """UMT5's relative position bias: a table in every block's self-attention (UMT5LayerSelfAttention's
    has_relative_attention_bias), each block adding its own; T5's and mT5's is block 0's alone."""
    bias_every_block: bool = False
    # SwitchTransformers' stacks hold embed_tokens of their own, tied to `shared` by tie_word_embeddings alone (its
    # _tied_weights_keys): untied, the encoder and decoder read tables of their own; T5's stacks are given `shared`
    stack_embeds_follow_tie: bool = False


def _bias_every_block(s: ArchSpec) -> bool:
    return s.variant is not None and s.variant_as(T5Variant).bias_every_block


# SwitchTransformers' and LongT5's ties (stack_embeds_follow_tie): every one follows tie_word_embeddings (their
# _tied_weights_keys); untied, each stack's embed_tokens is a table of its own beside `shared`
TIES_BY_CONFIG = (TieRule("encoder.embed_tokens.weight", "shared.weight", "config", module=True),
                  TieRule("decoder.embed_tokens.weight", "shared.weight", "config", module=True),
                  TieRule("lm_head.weight", "shared.weight", "config", heads=("lm",)))


def untied_by_names(T: Tensors, shared: str, embeds: str, lm_head: str) -> bool:
    """Whether a stack_embeds_follow_tie model's file (patterns of its `shared`, `encoder.embed_tokens`, `lm_head`) is
    untied: it holds lm_head, or encoder.embed_tokens beside `shared` (a save keeps one of a tied pair)."""
    return infer.has(T, lm_head) or infer.has(T, shared) and infer.has(T, embeds)


# heads whose model is the encoder alone (T5EncoderModel, under `transformer` in T5ForTokenClassification)
ENCODER_ALONE = ("encoder-only", "tokcls")
# heads whose body sits under `transformer` (T5PreTrainedModel.base_model_prefix); the others' at the top level
UNDER_TRANSFORMER = ("seqcls", "tokcls")


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
                    relative_buckets=c.int("relative_attention_num_buckets", default=32),
                    variant=T5Variant(bias_every_block=c.model_type == "umt5"), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, pattern(WALKED, "shared") + "|" + pattern(WALKED, "encoder.embed_tokens"), "shared embedding")
    inner = infer.shape(T, pattern(WALKED, SELF_Q.format(stack="encoder")), "SelfAttention.q")[0]
    buckets, a = infer.shape(T, pattern(WALKED, "SelfAttention.relative_attention_bias"), "relative_attention_bias")
    gated = infer.has(T, pattern(WALKED_GATED, "DenseReluDense.wi_0"))
    f = infer.shape(T, pattern(WALKED_GATED, "DenseReluDense.wi_0") if gated else pattern(WALKED, "DenseReluDense.wi"),
                    "DenseReluDense.wi")[0]
    lm = infer.find(T, pattern(WALKED, "lm_head"))
    every = infer.has(T, pattern(WALKED_UMT5, "SelfAttention.relative_attention_bias", layer="[1-9][0-9]*"))
    head = next(filter(None, (infer.find(T, pattern(WALKED_HEADS[h], m)) for h, m in _HEAD_MODULES.items())), None)
    if every:
        common = dict(common, model_type="umt5")
    return ArchSpec(layers=infer.count_layers(T, layers(WALKED, SELF_Q.format(stack="encoder"))), hidden=h, heads=a, kv_heads=a,
                    head_dim=inner // a, intermediate=f, vocab=V, activation="gelu" if gated else "relu",
                    gated_mlp=gated, norm="rmsnorm", qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=lm is None,
                    decoder_layers=infer.count_layers(T, layers(WALKED, SELF_Q.format(stack="decoder"))),
                    relative_buckets=buckets, variant=T5Variant(bias_every_block=every),
                    num_labels=head.shape[0] if head is not None and len(head.shape) == 2 else 2,
                    assumptions=("no config: activation assumed relu (t5) or gelu (gated, t5 v1.1)",), **common)


# a feed-forward's modules and ops after its RMSNorm: (w, its path `...layer.N.`, stack, tokens, the stack's L blocks,
# its llama.cpp prefix) -> None; T5's DenseReluDense by default, SwitchTransformers' own (switch_transformers.py)
FeedForward = Callable[[Recorder, str, str, tuple[int, int], int, str], None]


@dataclass(frozen=True)
class EncoderAttention:
    """An encoder self-attention other than T5's (LongT5's local and transient-global, longt5.py): its module's name
    under layer.0, and `scores`, which writes what runs between its q/k/v and o projections and records any module it
    adds: (w, the module's path, L blocks, tokens)."""
    name: str
    scores: Callable[[Recorder, str, int, int], None]


def walk(B: Builder, ff: FeedForward | None = None, attention: EncoderAttention | None = None) -> Recorder:
    """The forward at B.s's sizes (T5Model's, T5ForConditionalGeneration's, T5EncoderModel's, the task heads'): writes
    its ops to B and records the modules it meets, each with its llama.cpp name (convert_hf_to_gguf.py T5Model: the
    shared embedding is token_embd, written once; each stack's relative_attention_bias [buckets, heads] in block 0 is
    attn_rel_b)."""
    s, b = B.s, B.b
    w = Recorder(B, "embedding")
    w.embedding("shared", s.vocab, s.hidden, B.seq, gguf="token_embd")
    own = s.variant is not None and s.variant_as(T5Variant).stack_embeds_follow_tie and not s.tied_embeddings
    if own:   # the stacks' own tables: the encoder's read in place of `shared`'s (read above: the same lookup)
        w.held("encoder.embed_tokens (its own: tie_word_embeddings false)",
               (("encoder.embed_tokens", (("weight", (s.vocab, s.hidden)),)),))
    else:
        w.record("encoder.embed_tokens", (("weight", (s.vocab, s.hidden)),))   # the shared module (TieRule)
    ff = ff or dense_relu_dense
    _stack(w, "encoder", s.layers, B.seq, None, ff, attention)
    if s.head in ENCODER_ALONE:
        if s.head == "tokcls":
            w.linear("classifier", (b, B.seq), s.hidden, s.num_labels, True, bucket="cls", top=True)
        return w
    w.record("decoder.embed_tokens", (("weight", (s.vocab, s.hidden)),))
    B.embedding("decoder.embed_tokens" + ("" if own else " (= shared)"), "embedding", s.vocab, s.hidden, B.dec_seq,
                params=own)
    _stack(w, "decoder", s.decoder_layers, B.dec_seq, B.seq, ff)
    if s.head == "lm":
        w.record("lm_head", (("weight", (s.vocab, s.hidden)),), top=True, gguf="output")
        B.linear("lm_head" + (" (tied to shared)" if s.tied_embeddings else ""), "cls", (b, B.dec_seq), s.hidden, s.vocab,
                 False, tied=s.tied_embeddings)
    elif s.head == "seqcls":
        classification_head(w)
    elif s.head == "qa":   # num_labels wide (T5ForQuestionAnswering splits the first two)
        w.linear("qa_outputs", (b, B.dec_seq), s.hidden, s.num_labels, True, bucket="cls", top=True)
    return w


# each stack's llama.cpp prefix (gguf-py MODEL_TENSOR.ENC_* / DEC_*)
_GGUF_STACK = {"encoder": "enc", "decoder": "dec"}


def dense_relu_dense(w: Recorder, at: str, stack: str, tok: tuple[int, int], L: int, g: str) -> None:
    """T5's feed-forward in each of L blocks: relu's wi, or gelu(wi_0) x wi_1 gated; then wo."""
    B, s = w.B, w.B.s
    for m, gguf in (("wi_0", "ffn_gate"), ("wi_1", "ffn_up")) if s.gated_mlp else (("wi", "ffn_up"),):
        w.linear(f"{at}DenseReluDense.{m}", tok, s.hidden, s.intermediate, False, L, gguf=g + gguf)
    B.activation(w.label(at + "DenseReluDense act", L), stack, tok, s.intermediate, s.activation, L, gated=s.gated_mlp)
    w.linear(at + "DenseReluDense.wo", tok, s.intermediate, s.hidden, False, L, gguf=g + "ffn_down")


def _stack(w: Recorder, stack: str, L: int, n: int, cross: int | None, ff: FeedForward,
           own: EncoderAttention | None = None) -> None:
    """L blocks of `stack` over n tokens (none where L is 0: T5Stack's empty ModuleList, no relative bias either):
    self-attention (causal in the decoder; the first block holds the relative position bias every block adds),
    cross-attention over `cross` encoder tokens (None: none), the feed-forward (relu's wi, or gelu(wi_0) x wi_1 gated),
    each after an RMSNorm (the feed-forward's modules `ff`'s; the self-attention's scores `own`'s, where given); then the
    stack's final RMSNorm."""
    B, s = w.B, w.B.s
    h, a, inner = s.hidden, s.heads, s.heads * s.head_dim
    w.bucket, tok, at, g = stack, (B.b, n), f"{stack}.block.{{bid}}.layer.", f"{_GGUF_STACK[stack]}.blk.{{bid}}."

    def rmsnorm(path: str, label: str, gguf: str, layers: int, residual: bool = True) -> None:
        """An RMSNorm (weight only) in each of `layers` (0: once, outside the blocks)."""
        w.record(path, (("weight", (h,)),), layers, gguf=g + gguf if layers else gguf)
        B.norm(label, stack, tok, h, max(layers, 1), residual=residual)

    def blocks() -> None:
        every = _bias_every_block(s)   # UMT5: each block's own table, each block's own bias
        tables = L if every else 1
        self_attn = own.name if own else "SelfAttention"
        w.record(f"{at}0.{self_attn}.relative_attention_bias", (("weight", (s.relative_buckets, a)),),
                 layers=tuple(range(tables)), gguf=g + "attn_rel_b")
        B.add(w.label(f"{at}0.{self_attn}.relative_attention_bias", L) if every
              else f"{stack}.block.0.relative_attention_bias", "embedding", stack, tables, (n, n),
              (1, a, n, n), params=s.relative_buckets * a * tables)
        attn = [(self_attn, n, stack == "decoder", "attn")] + ([("EncDecAttention", cross, False, "cross_attn")]
                                                             if cross is not None else [])
        for j, (name, k_len, causal, role) in enumerate(attn):
            rmsnorm(f"{at}{j}.layer_norm", w.label(f"{at}{j}.{name} layer_norm", L), f"{role}_norm", L)
            for m in "qkv":
                w.linear(f"{at}{j}.{name}.{m}", tok if m == "q" else (B.b, k_len), h, inner, False, L, gguf=f"{g}{role}_{m}")
            if own and j == 0:
                own.scores(w, f"{at}0.{name}", L, n)
            else:   # + the position bias
                B.attention(w.label(f"{at}{j}.{name}", L), stack, a, n, k_len, s.head_dim, L, causal=causal, extra_ew=1)
            w.linear(f"{at}{j}.{name}.o", tok, inner, h, False, L, gguf=f"{g}{role}_o")
        at_ff = f"{at}{len(attn)}."
        rmsnorm(at_ff + "layer_norm", w.label(at_ff + "DenseReluDense layer_norm", L), "ffn_norm", L)
        ff(w, at_ff, stack, tok, L, g)

    if L:
        blocks()
    rmsnorm(f"{stack}.final_layer_norm", f"{stack}.final_layer_norm", f"{_GGUF_STACK[stack]}.output_norm", 0,
            residual=False)


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes:
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("transformer" if s.head in UNDER_TRANSFORMER else "")


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """The decoder's self-attention cache over s_dec tokens and its cross-attention cache over the
    encoder's s tokens."""
    if s.head in ENCODER_ALONE:
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


# the walks of a tiny T5ForConditionalGeneration, plain and gated: the paths of the name signature and from_tensors'
# look-ups, and its HF module -> llama.cpp names (Family.gguf_tensor_names); llama.cpp's ffn_up is T5's wi, or T5
# v1.1's wi_1 beside ffn_gate (wi_0): two tables, the file's names pick one
WALKED, WALKED_GATED = (walked(walk, "t5", head="lm", gated_mlp=gated, decoder_layers=1, relative_buckets=1)
                        for gated in (False, True))
GGUF_TENSOR_NAMES, GGUF_TENSOR_NAMES_GATED = WALKED.gguf_names(), WALKED_GATED.gguf_names()
# UMT5's (a relative bias in every block: from_tensors' look-up of block 1's), and each task head's
WALKED_UMT5 = walked(walk, "t5", head="lm", layers=2, decoder_layers=1, relative_buckets=1,
                     variant=T5Variant(bias_every_block=True))
_HEAD_MODULES = {"seqcls": "classification_head.out_proj", "tokcls": "classifier", "qa": "qa_outputs"}
WALKED_HEADS = {h: walked(walk, "t5", head=h, decoder_layers=1, relative_buckets=1) for h in _HEAD_MODULES}
SELF_Q = "{stack}.block.{{bid}}.layer.0.SelfAttention.q"


def gguf_table(arch: str, names: Collection[str]) -> tuple[tuple[str, str], ...]:
    return GGUF_TENSOR_NAMES_GATED if _gated(names) else GGUF_TENSOR_NAMES


_SIZES = dict(d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, vocab_size=99)

# lm_head marks the LM; decoder blocks without lm_head or decoder.embed_tokens are a tied LM's safetensors (both
# dropped), with decoder.embed_tokens the *Model's state_dict (T5's, and its variants': longt5.py, switch_transformers.py)
LM_HEAD_RULES = (HeadRule(r"(^|\.)lm_head\.weight$", "lm"),
                 HeadRule(r"(^|\.)decoder\.block\.\d+\.", "lm", unless=r"(^|\.)decoder\.embed_tokens\.weight$",
                          otherwise="base"))

FAMILY = Family(
    name="t5",
    model_types=("t5", "mt5", "umt5"),
    signature=signature(WALKED, SELF_Q.format(stack="encoder")),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm", "encoder-only", "seqcls", "tokcls", "qa"),
    # T5ForConditionalGeneration's torch.save state_dict keeps lm_head (tied or not); a safetensors save drops
    # the tied lm_head and decoder.embed_tokens, so decoder blocks show the LM head unless the file keeps
    # decoder.embed_tokens without lm_head: then it is T5Model's state_dict. Task heads: T5ForSequence-
    # Classification `classification_head`, T5ForTokenClassification `classifier`, T5ForQuestionAnswering `qa_outputs`.
    head_rules=(LM_HEAD_RULES[0], HeadRule(r"(^|\.)classification_head\.out_proj\.weight$", "seqcls"),
                HeadRule(r"^classifier\.weight$", "tokcls"), HeadRule(r"^qa_outputs\.weight$", "qa"), LM_HEAD_RULES[1]),
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
        # task heads; the sequence classifiers on the CPU: they pick each row's last <eos> with ops the meta device
        # lacks, and need as many <eos> in every row (a vocabulary of 8 makes the test's ids arange % vocab repeat)
        # (QA's forward splits qa_outputs in two: num_labels 2)
        *(Sample(f"{p}Config", dict(_SIZES, num_labels=3), (f"{p}ForTokenClassification",)) for p in ("T5", "MT5", "UMT5")),
        *(Sample(f"{p}Config", _SIZES, (f"{p}ForQuestionAnswering",)) for p in ("T5", "MT5", "UMT5")),
        *(Sample(f"{p}Config", dict(_SIZES, num_labels=3, vocab_size=8), (f"{p}ForSequenceClassification",), device="cpu")
          for p in ("T5", "MT5", "UMT5")),
        Sample("UMT5Config", dict(_SIZES, num_decoder_layers=3), ("UMT5ForConditionalGeneration", "UMT5EncoderModel")),
    ),
)
