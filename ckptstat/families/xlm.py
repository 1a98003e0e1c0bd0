"""XLM (transformers modeling_xlm.py: XLMModel, XLMWithLMHeadModel, XLMForSequenceClassification,
XLMForTokenClassification, XLMForQuestionAnsweringSimple, XLMForMultipleChoice, XLMForQuestionAnswering) and FlauBERT
(modeling_flaubert.py: the same modules and forward; its `pre_norm` refused, below): a post-LayerNorm BERT-style
encoder (encoder.py's layer) whose modules are per-kind lists (`attentions.i.q_lin`, `layer_norm1.i`, `ffns.i.lin1`,
`layer_norm2.i`), the FFN 4 x emb_dim wide (XLMModel's hidden_dim, not a config key), word and learned position
embeddings then `layer_norm_emb`, and a language-embedding table (`lang_embeddings`, n_langs > 1 with use_lang_emb)
held but not run by a forward without `langs`. The LM head (`pred_layer.proj`, biased) is tied to the word embeddings
unless tie_word_embeddings is false; it runs on every token. The sequence classifier and the multiple-choice head are
a SequenceSummary (framework/summary.py: `sequence_summary`, then for multiple choice logits_proj
Linear(num_labels, 1), its FLOPs counting batch x num_choices sequences), the QA head `qa_outputs` Linear(hidden,
num_labels) on every token; XLMForQuestionAnswering's beam-search SQuAD head (in no auto mapping) is head `squad`
(framework/squad.py). The model always attends bidirectionally in FLOPs (`causal` only masks), and returns no cache
(MaskedLMOutput): no KV cache.
Refused (meta path): the adaptive softmax head (asm), is_encoder false (transformers raises) and FlauBERT's pre_norm
(transformers 5.24's FlaubertModel indexes its EncoderDecoderCache there, a TypeError: nothing to check a template
against).
Described once, as a walk (`walk`: framework/recorder.py's recorder and encoder.py's post-LN layer, each module recorded
while its op is written): the op template and the expected tensors both derive from it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NoAnalyticModel
from .framework import infer, squad, summary
from .framework.archspec import Variant
from .framework.base import CHOICE, FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Tensors, TieRule
from .framework.encoder import LayerNames, stack_layers, token_heads
from .framework.ops import Builder
from .framework.recorder import Recorder, lists, tensors
from .framework.summary import PROJ, SUMMARY, SequenceSummary
from .framework.walk_names import layers, pattern, signature, walked

# the modules as XLMModel lists them, one list per kind (`{bid}` the layer), in encoder.LayerNames' order
LAYER: LayerNames = ("attentions.{bid}.q_lin", "attentions.{bid}.k_lin", "attentions.{bid}.v_lin", "attentions.{bid}",
                     "attentions.{bid}.out_lin", "layer_norm1.{bid}", "ffns.{bid}.lin1", "ffns.{bid}.act", "ffns.{bid}.lin2",
                     "layer_norm2.{bid}")
BODY = "transformer"   # the base model's attribute in the head models


@dataclass(frozen=True)
class XLMVariant(Variant):
    langs: int = 0   # rows of lang_embeddings (0: none, n_langs 1 or use_lang_emb false)
    summary: SequenceSummary = SequenceSummary()   # the sequence classifier's and multiple-choice head's
    beams: squad.Beams = squad.Beams()   # XLMForQuestionAnswering's SQuAD head (framework/squad.py)


def from_config(c: Cfg) -> ArchSpec:
    if c.get("asm", default=FROM_CLASS):
        raise NoAnalyticModel(f"{c.path}: XLM's adaptive softmax head (asm) is not in the op template")
    if not c.get("is_encoder", default=FROM_CLASS):
        raise NoAnalyticModel(f"{c.path}: XLM with is_encoder false (transformers raises: only an encoder)")
    if c.get("pre_norm", default=False):
        raise NoAnalyticModel(f"{c.path}: FlauBERT with pre_norm (transformers 5 cannot run it: no template checked)")
    h, a, labels = c.int("emb_dim"), c.int("n_heads"), c.common["num_labels"]
    n_langs = c.int("n_langs", default=FROM_CLASS)
    langs = n_langs if n_langs > 1 and c.get("use_lang_emb", default=FROM_CLASS) else 0
    return ArchSpec(layers=c.int("n_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a, intermediate=4 * h,
                    vocab=c.int("vocab_size"), positions=c.int("max_position_embeddings", default=FROM_CLASS),
                    activation="gelu" if c.get("gelu_activation", default=FROM_CLASS) else "relu",
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    variant=XLMVariant(langs, summary.from_config(c, h, labels, labels if c.head == CHOICE else None),
                                       squad.from_config(c)), **{**c.common, "head": squad.head(c)})


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, pattern(WALKED, "embeddings"), "word embeddings")
    P = infer.shape(T, pattern(WALKED, "position_embeddings"), "position embeddings")[0]
    langs = pattern(WALKED, "lang_embeddings")
    langs_n = infer.shape(T, langs, "language embeddings")[0] if infer.has(T, langs) else 0
    a, note = infer.heads_for(h, 64)
    sm, sm_note = summary.from_tensors(T, "xlm")
    head = common["head"]
    beams, beams_note = squad.from_names("xlm", head)
    # the sequence classifier's summary gives the logits; multiple choice's logits_proj reads num_labels
    labels = (infer.shape(T, pattern(WALKED_MC, PROJ), PROJ)[1] if head == CHOICE
              else sm.outputs or h if head == "seqcls" else infer.num_labels(T))
    return ArchSpec(num_labels=labels, layers=infer.count_layers(T, layers(WALKED, LAYER[0])),
                    hidden=h, heads=a, kv_heads=a, head_dim=h // a, intermediate=4 * h, vocab=V, positions=P,
                    tied_embeddings=not infer.has(T, pattern(WALKED, "pred_layer.proj")), variant=XLMVariant(langs_n, sm, beams),
                    assumptions=(note,) + ((sm_note,) if head in ("seqcls", CHOICE) else ()) + beams_note,
                    **common)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets."""
    s, r = B.s, Recorder(B)
    h = s.hidden
    r.embedding("embeddings", s.vocab, h, B.seq, bucket="embedding")
    r.embedding("position_embeddings", s.positions, h, B.seq, bucket="embedding")
    langs = s.variant_as(XLMVariant).langs
    if langs:
        r.held("lang_embeddings (held: not run without langs)", (("lang_embeddings", (("weight", (langs, h)),)),))
    r.norm("layer_norm_emb", r.tok, h, residual=False, bucket="embedding")
    stack_layers(r, lists(s.layers), LAYER)
    if s.head == "lm":
        r.linear("pred_layer.proj", r.tok, h, s.vocab, True, bucket="cls", top=True, tied=s.tied_embeddings,
                 label="pred_layer.proj" + (" (tied to embeddings)" if s.tied_embeddings else ""))
    if s.head in ("seqcls", CHOICE):   # the summary's logits; multiple choice: logits_proj to 1 a choice
        summary.walk(r, s.variant_as(XLMVariant).summary, (s.num_labels, 1) if s.head == CHOICE else None)
    if s.head == squad.HEAD:
        squad.walk(r, "qa_outputs.", s.variant_as(XLMVariant).beams)
    token_heads(r)
    return r


def build(B: Builder) -> None:
    walk(B)


# the walk of a tiny XLMWithLMHeadModel with language embeddings, untied: the paths of the name signature and
# from_tensors' look-ups
WALKED = walked(walk, "xlm", head="lm", variant=XLMVariant(langs=1))
# ... and of a tiny XLMForMultipleChoice: its heads' paths
WALKED_MC = walked(walk, "xlm", head=CHOICE, num_labels=4, variant=XLMVariant(summary=SequenceSummary(outputs=4)))
WALKED_BEAMS = walked(walk, "xlm", head=squad.HEAD, variant=XLMVariant(beams=squad.Beams(1, 1)))   # its SQuAD head


_SIZES = dict(emb_dim=32, n_layers=2, n_heads=4, vocab_size=99, max_position_embeddings=64)

FAMILY = Family(
    name="xlm",
    model_types=("xlm", "flaubert"),
    signature=signature(WALKED, LAYER[0]),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=tensors(walk, BODY),
    heads=("base", "lm", "seqcls", "tokcls", "qa", CHOICE, squad.HEAD),
    head_rules=(HeadRule(r"(^|\.)pred_layer\.proj\.", "lm"), HeadRule(r"(^|\.)classifier\.weight$", "tokcls"),
                HeadRule(r"(^|\.)qa_outputs\.weight$", "qa"), HeadRule(pattern(WALKED_BEAMS, squad.START), squad.HEAD),
                HeadRule(pattern(WALKED_MC, PROJ), CHOICE),
                HeadRule(pattern(WALKED_MC, SUMMARY), "seqcls")),
    min_seq=lambda s: squad.min_seq(s.head, s.variant_as(XLMVariant).beams),
    tie_rules=(TieRule("pred_layer.proj.weight", "transformer.embeddings.weight", "config", heads=("lm",)),),
    samples=(
        # CPU: XLMModel's forward checks the lengths with .item() (no meta kernel)
        Sample("XLMConfig", _SIZES, ("XLMModel", "XLMWithLMHeadModel", "XLMForSequenceClassification",
                                     "XLMForTokenClassification", "XLMForQuestionAnsweringSimple", "XLMForMultipleChoice",
                                     "XLMForQuestionAnswering"),
               device="cpu"),
        Sample("XLMConfig", dict(_SIZES, n_langs=3, gelu_activation=False, tie_word_embeddings=False),
               ("XLMWithLMHeadModel",), device="cpu"),
        # the summary's other fields: the tokens' mean, a width-wide projection, tanh
        Sample("XLMConfig", dict(_SIZES, num_labels=3, summary_type="mean", summary_proj_to_labels=False,
                                 summary_activation="tanh"), ("XLMForSequenceClassification",), device="cpu"),
        Sample("FlaubertConfig", _SIZES, ("FlaubertModel", "FlaubertWithLMHeadModel", "FlaubertForSequenceClassification",
                                          "FlaubertForTokenClassification", "FlaubertForQuestionAnsweringSimple",
                                          "FlaubertForMultipleChoice", "FlaubertForQuestionAnswering"), device="cpu"),
        # no projection: logits_proj reads the emb_dim-wide summary (num_labels = emb_dim, else transformers cannot run it)
        Sample("FlaubertConfig", dict(_SIZES, num_labels=32, summary_type="last", summary_use_proj=False),
               ("FlaubertForMultipleChoice",), device="cpu"),
        Sample("FlaubertConfig", dict(_SIZES, n_langs=2, tie_word_embeddings=False), ("FlaubertWithLMHeadModel",),
               device="cpu"),
    ),
)
