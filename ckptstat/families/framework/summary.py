"""transformers' SequenceSummary, described once for every class that holds one. The sequence-classification and
multiple-choice heads of XLM, FlauBERT and XLNet (xlm.py, xlnet.py): their SequenceSummary (transformers
modeling_xlm.py XLMSequenceSummary, which modeling_flaubert.py's classes use; modeling_xlnet.py XLNetSequenceSummary,
the same code), then the class's own `logits_proj`, a biased Linear:

* the summary reads one hidden state per sequence of [sequences, tokens, width], by config summary_type: "first",
  "last", "cls_index" (the last token when no cls_index is passed) or "mean" (the tokens' mean: element-wise); then,
  with summary_use_proj, a biased Linear(width, num_labels if summary_proj_to_labels and num_labels > 0 else width)
  (XLNetConfig declares no summary_proj_to_labels: its summary's hasattr test fails, the projection is width wide);
  then summary_activation (left out of config.json: below). summary_type "attn" raises NotImplementedError in
  transformers, and any other value leaves the output unset: refused;
* ELECTRA's and RoFormer's *ForMultipleChoice (modeling_electra.py ElectraSequenceSummary, RoFormer's a copy: the same
  code) read it in place of a pooler, then their `classifier` (encoder.multiple_choice); RoFormerConfig declares no
  summary_* field: the modeling file's getattr fallbacks (last, no projection);
* XLM's *ForSequenceClassification: the summary's output are the logits (no logits_proj); XLM's
  *ForMultipleChoice: logits_proj Linear(num_labels, 1) over the summary; XLNet's: logits_proj Linear(d_model,
  num_labels) and Linear(d_model, 1). A summary whose width is not what logits_proj reads cannot run (transformers
  raises in the forward): refused;
* GPT-2's and OpenAI GPT's *DoubleHeadsModel (head "lm+mc", decoder_heads.double_heads; modeling_gpt2.py
  GPT2SequenceSummary, modeling_openai.py OpenAIGPTSequenceSummary, the same code) read it as `multiple_choice_head`
  beside the LM head: "cls_index" takes the token at mc_token_ids of each choice (the last without them), and the
  class sets num_labels = 1 whatever the config says (summary_proj_to_labels: one output). Its input is
  [batch, num_choices, seq]: the other summary types index dim 1 of the hidden states, the choices, not the tokens
  ("last": the last choice's every token): refused (MC_KINDS). Without config.json, the projection's width is its
  weight's rows, the summary type and activation its config class's (from_tensors).

A *ForMultipleChoice flattens its [batch, num_choices, seq] input to batch x num_choices sequences before the body:
ckptstat's batch counts those sequences (each choice one), one summary each, and the head's ops say so.

summary_activation left out of config.json is its config class's default (Cfg.get: config_defaults.json, generated
from transformers: ELECTRA's gelu, XLNet's tanh); where that table holds null, none: XLM's, FlauBERT's, GPT-2's and
OpenAI GPT's default is None, and RoFormerConfig declares no summary field (the modeling file's getattr fallback, None;
bert.SUMMARY_FALLBACK). tests/test_summary_defaults.py checks each against its config class."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ...errors import NoAnalyticModel
from .archspec import ArchSpec, Variant
from .base import CHOICE, FROM_CLASS, MC, Cfg, Tensors, class_default
from .infer import find, num_labels
from .ops import Builder

KINDS = ("first", "last", "cls_index", "mean")
MC_KINDS = ("cls_index",)   # a *DoubleHeadsModel's: the others index the choices of [batch, num_choices, seq]
SUMMARY = "sequence_summary.summary"   # the summary's projection (a Linear; absent without summary_use_proj)
MC_SUMMARY = "multiple_choice_head.summary"   # a *DoubleHeadsModel's
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
    kinds = MC_KINDS if c.head == MC else KINDS
    if kind not in kinds and c.head in ("seqcls", CHOICE, MC):
        raise NoAnalyticModel(f"{c.path}: config summary_type = {kind!r}: the sequence summary's op template describes "
                              f"{', '.join(kinds)} " + ("(the others index the choices of [batch, num_choices, seq], "
                                                        "not the tokens)" if c.head == MC else "(transformers runs no other)"))
    to_labels = bool(c.get("summary_proj_to_labels", default=False))   # XLNetConfig has none: hasattr false
    use_proj = c.get("summary_use_proj", default=fb.get("summary_use_proj", FROM_CLASS))
    outputs = (labels if to_labels and labels > 0 else hidden) if use_proj else 0
    # the class's default where config_defaults.json holds one; else None (the module docstring)
    act = c.get("summary_activation", default=fb.get("summary_activation"))
    sm = SequenceSummary(str(kind), outputs, act if isinstance(act, str) and act else None)
    if reads is not None and sm.width(hidden) != reads and c.head in ("seqcls", CHOICE):
        raise NoAnalyticModel(f"{c.path}: the sequence summary gives {sm.width(hidden)} features and the head reads {reads}"
                              " (summary_use_proj / summary_proj_to_labels / num_labels): transformers cannot run it")
    return sm


def from_tensors(T: Tensors, model_type: str, path: str = SUMMARY) -> tuple[SequenceSummary, str]:
    """The projection's outputs from the rows of its weight at `path` (none: no projection); the token and the
    activation assumed, its config class's."""
    t = find(T, rf"(^|\.){path}\.weight$")
    rows = t.shape[0] if t is not None and len(t.shape) == 2 else 0
    kind, act = class_default(model_type, "summary_type"), class_default(model_type, "summary_activation")
    return SequenceSummary(str(kind), rows, act), (f"no config: the sequence summary assumed its config class's "
                                                   f"summary_type ({kind}) and summary_activation ({act})")


def labels(T: Tensors) -> int:
    """Rows of logits_proj's weight (2: none)."""
    return num_labels(T, rf"(^|\.){PROJ}\.weight$")


class Recorder(Protocol):
    """What walk uses of recorder.Recorder (which imports layout_base, which imports decoder_heads, which imports
    this module: named structurally, no import back)."""
    @property
    def B(self) -> Builder: ...

    @property
    def s(self) -> ArchSpec: ...

    @property
    def tok(self) -> tuple[int, ...]: ...

    @property
    def first(self) -> tuple[int, ...]: ...

    def linear(self, path: str, tokens: tuple[int, ...], fin: int, fout: int, bias: bool, *, bucket: str | None = None,
               top: bool = False, label: str | None = None) -> None: ...


def walk(r: Recorder, sm: SequenceSummary, proj: tuple[int, int] | None, path: str = SUMMARY) -> None:
    """The summary over one token of each of the B.b sequences (the mean: over every token), its projection at `path`,
    then logits_proj (fin, fout) where the class has one."""
    B, h, module = r.B, r.s.hidden, path.rsplit(".", 1)[0]
    per = PER_CHOICE if r.s.head in (CHOICE, MC) else ""
    note = f"{sm.kind}: one row per sequence{per}"
    if sm.kind == "mean":
        B.add(f"{module} (mean over the tokens{per})", "activation", "cls", 1, r.tok + (h,), r.first + (h,),
              ew=B.b * B.seq * h)
    if sm.outputs:
        r.linear(path, r.first, h, sm.outputs, True, bucket="cls", top=True, label=f"{path} ({note})")
    if sm.activation:
        B.activation(f"{module} act ({sm.activation})", "cls", r.first, sm.width(h), sm.activation)
    if proj is not None:
        r.linear(PROJ, r.first, *proj, True, bucket="cls", top=True, label=f"{PROJ} ({note})")
