"""The sequence-classification and multiple-choice heads of XLM, FlauBERT and XLNet (xlm.py, xlnet.py): their
SequenceSummary (transformers modeling_xlm.py XLMSequenceSummary, which modeling_flaubert.py's classes use;
modeling_xlnet.py XLNetSequenceSummary, the same code), then the class's own `logits_proj`, a biased Linear:

* the summary reads one hidden state per sequence of [sequences, tokens, width], by config summary_type: "first",
  "last", "cls_index" (the last token when no cls_index is passed) or "mean" (the tokens' mean: element-wise); then,
  with summary_use_proj, a biased Linear(width, num_labels if summary_proj_to_labels and num_labels > 0 else width)
  (XLNetConfig declares no summary_proj_to_labels: its summary's hasattr test fails, the projection is width wide);
  then summary_activation (none when unset: XLM's default; XLNet's is tanh). summary_type "attn" raises
  NotImplementedError in transformers, and any other value leaves the output unset: refused;
* ELECTRA's and RoFormer's *ForMultipleChoice (modeling_electra.py ElectraSequenceSummary, RoFormer's a copy: the same
  code) read it in place of a pooler, then their `classifier` (encoder.multiple_choice); RoFormerConfig declares no
  summary_* field: the modeling file's getattr fallbacks (last, no projection);
* XLM's *ForSequenceClassification: the summary's output are the logits (no logits_proj); XLM's
  *ForMultipleChoice: logits_proj Linear(num_labels, 1) over the summary; XLNet's: logits_proj Linear(d_model,
  num_labels) and Linear(d_model, 1). A summary whose width is not what logits_proj reads cannot run (transformers
  raises in the forward): refused.

A *ForMultipleChoice flattens its [batch, num_choices, seq] input to batch x num_choices sequences before the body:
ckptstat's batch counts those sequences (each choice one), one summary each, and the head's ops say so."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ...errors import NoAnalyticModel
from .archspec import Variant
from .base import CHOICE, FROM_CLASS, Cfg, Tensors, class_default
from .infer import find, num_labels
from .recorder import Recorder

KINDS = ("first", "last", "cls_index", "mean")
SUMMARY = "sequence_summary.summary"   # the summary's projection (a Linear; absent without summary_use_proj)
PROJ = "logits_proj"
PER_CHOICE = "; batch counts batch x num_choices sequences"


@dataclass(frozen=True)
class SequenceSummary(Variant):
    """The summary's token (summary_type), its projection's outputs (0: summary_use_proj false, nn.Identity) and the
    activation after it (None: none)."""
    kind: str = "first"
    outputs: int = 0
    activation: str | None = None

    def width(self, hidden: int) -> int:
        return self.outputs or hidden


def from_config(c: Cfg, hidden: int, labels: int, reads: int | None,
                fallback: Mapping[str, object] | None = None) -> SequenceSummary:
    """The config's summary_* fields (their config class's defaults where left out; `fallback`: the modeling file's
    getattr defaults, for a config class that declares none), read whatever the head (a config naming no class can
    hold the head); `reads`: the width what follows the summary reads (None: nothing, no logits_proj)."""
    fb = fallback or {}
    kind = c.get("summary_type", default=fb.get("summary_type", FROM_CLASS))
    if kind not in KINDS and c.head in ("seqcls", CHOICE):
        raise NoAnalyticModel(f"{c.path}: config summary_type = {kind!r}: the sequence summary's op template describes "
                              f"{', '.join(KINDS)} (transformers runs no other)")
    to_labels = bool(c.get("summary_proj_to_labels", default=False))   # XLNetConfig has none: hasattr false
    use_proj = c.get("summary_use_proj", default=fb.get("summary_use_proj", FROM_CLASS))
    outputs = (labels if to_labels and labels > 0 else hidden) if use_proj else 0
    act = c.get("summary_activation", default=None)   # XLMConfig's default is None (no activation)
    sm = SequenceSummary(str(kind), outputs, act if isinstance(act, str) and act else None)
    if reads is not None and sm.width(hidden) != reads and c.head in ("seqcls", CHOICE):
        raise NoAnalyticModel(f"{c.path}: the sequence summary gives {sm.width(hidden)} features and the head reads {reads}"
                              " (summary_use_proj / summary_proj_to_labels / num_labels): transformers cannot run it")
    return sm


def from_tensors(T: Tensors, model_type: str) -> tuple[SequenceSummary, str]:
    """The projection's outputs from its weight's rows (none: no projection); the token and the activation assumed,
    its config class's."""
    t = find(T, rf"(^|\.){SUMMARY}\.weight$")
    rows = t.shape[0] if t is not None and len(t.shape) == 2 else 0
    kind, act = class_default(model_type, "summary_type"), class_default(model_type, "summary_activation")
    return SequenceSummary(str(kind), rows, act), (f"no config: the sequence summary assumed its config class's "
                                                   f"summary_type ({kind}) and summary_activation ({act})")


def labels(T: Tensors) -> int:
    """Rows of logits_proj's weight (2: none)."""
    return num_labels(T, rf"(^|\.){PROJ}\.weight$")


def walk(r: Recorder, sm: SequenceSummary, proj: tuple[int, int] | None) -> None:
    """The summary over one token of each of the B.b sequences (the mean: over every token), then logits_proj
    (fin, fout) where the class has one."""
    B, h = r.B, r.s.hidden
    per = PER_CHOICE if r.s.head == CHOICE else ""
    note = f"{sm.kind}: one row per sequence{per}"
    if sm.kind == "mean":
        B.add(f"sequence_summary (mean over the tokens{per})", "activation", "cls", 1, r.tok + (h,), r.first + (h,),
              ew=B.b * B.seq * h)
    if sm.outputs:
        r.linear(SUMMARY, r.first, h, sm.outputs, True, bucket="cls", top=True, label=f"{SUMMARY} ({note})")
    if sm.activation:
        B.activation(f"sequence_summary act ({sm.activation})", "cls", r.first, sm.width(h), sm.activation)
    if proj is not None:
        r.linear(PROJ, r.first, *proj, True, bucket="cls", top=True, label=f"{PROJ} ({note})")
