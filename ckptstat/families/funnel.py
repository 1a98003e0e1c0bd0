"""Funnel Transformer (transformers modeling_funnel.py): word embeddings and a LayerNorm, then len(block_sizes) blocks of
post-LN layers (encoder.blocks.{block}.{layer}) with the sequence pooled between blocks (pooling_type, separate_cls,
truncate_seq, pool_q_only), each layer's relative attention (attention_type "relative_shift" or "factorized": r_w_bias,
r_r_bias, r_kernel, r_s_bias, seg_embed beside q_head, k_head, v_head, post_proj) and FFN (ffn.linear_1, linear_2,
layer_norm); FunnelModel's decoder upsamples the last block's output to the full sequence and runs num_decoder_layers
more such layers (decoder.layers.{layer}). FunnelBaseModel has no decoder, and neither have the sequence and
multiple-choice heads (classifier.linear_hidden, tanh, linear_out); the others run FunnelModel: lm_head (tied to the word
embeddings by tie_word_embeddings), discriminator_predictions (ELECTRA's), classifier, qa_outputs.

Parameters are described (every head); the FLOPs are refused by name (FLOPS): the pooled lengths and the relative
position matmuls of either attention type are not written in the op template."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import NoAnalyticModel
from .framework.archspec import Variant
from .framework.base import CHOICE, FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Params, Recorder, Stack, linear_shapes, tensors
from .framework.walk_names import signature, walked

FLOPS = ("Funnel's pooled blocks and relative attention (the sequence pooled between blocks, the position matmuls of "
         "relative_shift / factorized attention, the decoder's upsampling)")


@dataclass(frozen=True)
class Funnel(Variant):
    """The encoder's blocks (block_sizes) and the decoder's layers (0: FunnelBaseModel's and the sequence heads' body)."""
    blocks: tuple[int, ...]
    decoder: int


def from_config(c: Cfg) -> ArchSpec:
    blocks = c.get("block_sizes", default=FROM_CLASS)
    if not isinstance(blocks, (list, tuple)) or not all(isinstance(x, int) for x in blocks):
        raise NoAnalyticModel(f"{c.path}: config block_sizes is not a list of layer counts")
    d, n = c.int("d_model"), c.int("n_head")
    full = c.common.get("architecture") != "FunnelBaseModel" and c.head not in ("seqcls", CHOICE)
    return ArchSpec(layers=sum(blocks), hidden=d, heads=n, kv_heads=n, head_dim=c.int("d_head"),
                    intermediate=c.int("d_inner"), vocab=c.int("vocab_size"),
                    positions=0, embedding_size=d,   # no position table (relative attention)
                    activation=str(c.get("hidden_act", default=FROM_CLASS)),
                    variant=Funnel(tuple(blocks), c.int("num_decoder_layers", default=FROM_CLASS) if full else 0),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    raise NoAnalyticModel("Funnel's shapes are read from config.json only (block_sizes, num_decoder_layers)")


def _held(r: Recorder, label: str, subs: tuple[tuple[str, Params], ...], top: bool = False) -> None:
    """A head's modules recorded (`top`: outside the body), their parameters counted, no op run."""
    for path, shapes in subs:
        r.record(path, shapes, top=top)
    r.B.add(label, "embedding", "cls", 0, r.tok, r.tok, params=sum(math.prod(s) for _, p in subs for _, s in p))


def layer(r: Recorder, stack: Stack) -> None:
    """FunnelLayer's parameters (FunnelRelMultiheadAttention and FunnelPositionwiseFFN) on each layer of `stack`."""
    s = r.s
    d, n, dh, f = s.hidden, s.heads, s.head_dim, s.intermediate
    norm: Params = (("weight", (d,)), ("bias", (d,)))
    r.held(stack.name("layer (parameters only)"), (
        *((f"attention.{p}", (("", (n, dh)),)) for p in ("r_w_bias", "r_r_bias", "r_s_bias")),
        ("attention.r_kernel", (("", (d, n, dh)),)), ("attention.seg_embed", (("", (2, n, dh)),)),
        ("attention.q_head", (("weight", (n * dh, d)),)), ("attention.k_head", linear_shapes(d, n * dh)),
        ("attention.v_head", linear_shapes(d, n * dh)), ("attention.post_proj", linear_shapes(n * dh, d)),
        ("attention.layer_norm", norm), ("ffn.linear_1", linear_shapes(d, f)), ("ffn.linear_2", linear_shapes(f, d)),
        ("ffn.layer_norm", norm)), stack)


def walk(B: Builder) -> Recorder:
    """The parameters at B.s's sizes (no FLOPs: FLOPS), recorded with their modules (recorder.Recorder)."""
    r, s = Recorder(B), B.s
    d, fn = s.hidden, s.variant_as(Funnel)
    r.embedding("embeddings.word_embeddings", s.vocab, d, B.seq, bucket="embedding")
    r.norm("embeddings.layer_norm", r.tok, d, residual=False, bucket="embedding")
    for b, n in enumerate(fn.blocks):
        layer(r, Stack(f"encoder.blocks.{b}[{n}]", f"encoder.blocks.{b}." + "{bid}", n, n))
    if fn.decoder:
        layer(r, Stack(f"decoder.layers[{fn.decoder}]", "decoder.layers.{bid}", fn.decoder, fn.decoder))
    if s.head == "mlm":
        r.record("lm_head", linear_shapes(d, s.vocab), top=True)
        B.add("lm_head" + (" (tied to word_embeddings)" if s.tied_embeddings else ""), "embedding", "cls", 0, r.tok,
              r.tok, params=s.vocab * (1 if s.tied_embeddings else d + 1))
    elif s.head == "pretraining":
        _held(r, "discriminator_predictions", (("discriminator_predictions.dense", linear_shapes(d, d)),
                                               ("discriminator_predictions.dense_prediction", linear_shapes(d, 1))), True)
    elif s.head in ("seqcls", CHOICE):
        _held(r, "classifier", (("classifier.linear_hidden", linear_shapes(d, d)),
                                ("classifier.linear_out", linear_shapes(d, 1 if s.head == CHOICE else s.num_labels))), True)
    elif s.head in ("tokcls", "qa"):
        path = "classifier" if s.head == "tokcls" else "qa_outputs"
        _held(r, path, ((path, linear_shapes(d, s.num_labels)),), True)
    return r


def flops_refused(s: ArchSpec) -> str | None:
    return FLOPS


def build(B: Builder) -> None:
    # the parameters at one token (graph.predict_params), no FLOPs beyond
    if B.seq > 1:
        raise NoAnalyticModel(f"{FLOPS}: not described by the op template")
    walk(B)


# the walk of a tiny FunnelModel: the paths of the name signature
WALKED = walked(walk, "funnel", variant=Funnel((1,), 1))

_SIZES = dict(d_model=32, n_head=4, d_head=8, d_inner=37, vocab_size=99, block_sizes=[1, 2], num_decoder_layers=2)

FAMILY = Family(
    name="funnel",
    model_types=("funnel",),
    signature=signature(WALKED, "attention.r_kernel"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=tensors(walk, "funnel"),
    heads=("base", "mlm", "pretraining", "seqcls", "tokcls", "qa", CHOICE),
    head_rules=(HeadRule(r"^lm_head\.", "mlm"), HeadRule(r"^discriminator_predictions\.", "pretraining"),
                HeadRule(r"^classifier\.linear_out\.", "seqcls"), HeadRule(r"^classifier\.weight$", "tokcls"),
                HeadRule(r"^qa_outputs\.", "qa")),
    flops_refused=flops_refused,
    tie_rules=(TieRule("lm_head.weight", "funnel.embeddings.word_embeddings.weight", "config", heads=("mlm",)),),
    # (from config.json only: infer=False)
    samples=(
        Sample("FunnelConfig", dict(_SIZES, num_labels=3),
               ("FunnelModel", "FunnelForMaskedLM", "FunnelForPreTraining", "FunnelForSequenceClassification",
                "FunnelForTokenClassification"), infer=False),
        Sample("FunnelConfig", _SIZES, ("FunnelBaseModel", "FunnelForQuestionAnswering", "FunnelForMultipleChoice"),
               infer=False),
        Sample("FunnelConfig", dict(_SIZES, tie_word_embeddings=False, block_sizes=[2, 1, 1], num_decoder_layers=1),
               ("FunnelForMaskedLM",), infer=False),
    ),
)
