"""Task heads of the classic decoder families (bloom.py; opt.py, gptj.py, gpt_neo.py and gpt_bigcode.py through
DecoderLayout.task_heads), as transformers builds them beside the decoder body:

* *ForSequenceClassification: `score`, Linear(width, num_labels, bias=False);
* *ForTokenClassification: `classifier`, Linear(width, num_labels) with bias; transformers 5's
  GenericForTokenClassification (modeling_layers.py: LLaMA-likes) names it `score` (Paths.tokcls), biased unless
  config token_classification_bias is false (no decoder config of a family here sets it: not read). A bare file's
  names tell it from the sequence classifier, also `score`, by that bias alone (base.TASK_HEAD_RULES);
* *ForQuestionAnswering whose base_model_prefix is not the *ForCausalLM's body (LlamaForQuestionAnswering's
  `transformer`: Paths.qa_body) hold the body under it;
* *ForQuestionAnswering: `qa_outputs`, Linear(width, 2) with bias, whatever num_labels says (transformers 5's
  GenericForQuestionAnswering, GPT-J's too).

Each runs over every token's hidden state (the sequence classifier then picks the last non-pad token's
logits: an index, no FLOPs), so FlopCounterMode counts tokens x width x outputs for each.

* *DoubleHeadsModel (GPT-2's, OpenAI GPT's; head "lm+mc"): the LM head and `multiple_choice_head`, a
  SequenceSummary (modeling_gpt2.py GPT2SequenceSummary, modeling_openai.py OpenAIGPTSequenceSummary): the hidden
  state of one token per sequence (summary_type "cls_index": the mc_token_ids token, the last one by default), then,
  with summary_use_proj, Linear(width, outputs) with bias: 1 output (the class sets num_labels = 1 whatever the
  config says) with summary_proj_to_labels, else width; then summary_activation. Its inputs are
  [batch, num_choices, seq], which the body runs as batch x num_choices sequences: ckptstat's batch counts those
  sequences, one summary token each. The other summary types index dim 1 of the hidden states, which for that input
  is the choices, not the tokens ("last": the last choice's every token): not described."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ...errors import NoAnalyticModel
from .archspec import Variant
from .base import MC, ArchSpec, Cfg, HeadRule, Tensors
from .infer import find, num_labels
from .ops import Builder

TASK_HEADS = ("seqcls", "tokcls", "qa", MC)
_MODULE = {"seqcls": "score", "tokcls": "classifier", "qa": "qa_outputs", MC: "multiple_choice_head.summary"}


@dataclass(frozen=True)
class Summary(Variant):
    """The multiple-choice head's SequenceSummary (summary_type cls_index): the projection's outputs (0:
    summary_use_proj false, no projection), the activation after it (None: none)."""
    outputs: int = 1
    activation: str | None = None


def summary_from_config(c: Cfg, width: int) -> Summary:
    """The config's summary_* fields as the SequenceSummary reads them (their config class's defaults where left out)."""
    kind = c.get("summary_type", default="cls_index")
    if kind != "cls_index":
        raise NoAnalyticModel(f"{c.path}: config summary_type = {kind!r}: the multiple-choice head's op template "
                              "describes cls_index (the others index the choices of [batch, num_choices, seq], not the tokens)")
    proj = bool(c.get("summary_use_proj", default=True))
    act = c.get("summary_activation", default=None)
    return Summary((1 if c.get("summary_proj_to_labels", default=True) else width) if proj else 0,
                   act if isinstance(act, str) and act else None)


def summary_from_tensors(T: Tensors) -> tuple[Summary, str]:
    """The summary's projection outputs from its weight's rows; its kind and activation assumed (no config)."""
    t = find(T, rf"^{_MODULE[MC]}\.weight$")
    rows = t.shape[0] if t is not None and len(t.shape) == 2 else 0
    return Summary(outputs=rows), ("no config: the multiple-choice summary assumed summary_type cls_index, no "
                                   "summary_activation (the config classes' defaults)")


def double_heads(fields: dict[str, Any]) -> dict[str, Any]:
    """The Family fields of a decoder LM (layout.family_fields) whose layout declares the MC head: the spec carries
    the Summary (from the config, or the file's rows), multiple_choice_head's weight shows the head, and the LM
    head's tie holds on it too (the *DoubleHeadsModel's _tied_weights_keys)."""
    from_config: Callable[[Cfg], ArchSpec] = fields["from_config"]
    from_tensors: Callable[[Tensors, dict[str, Any]], ArchSpec] = fields["from_tensors"]

    def config(c: Cfg) -> ArchSpec:
        s = from_config(c)
        return replace(s, variant=summary_from_config(c, s.hidden)) if s.head == MC else s

    def names(T: Tensors, common: dict[str, Any]) -> ArchSpec:
        s = from_tensors(T, common)
        if s.head != MC:
            return s
        sm, note = summary_from_tensors(T)
        return replace(s, variant=sm, assumptions=s.assumptions + (note,))

    ties = tuple(replace(r, heads=r.heads + (MC,)) if "lm" in r.heads else r for r in fields["tie_rules"])
    return dict(fields, from_config=config, from_tensors=names, tie_rules=ties,
                head_rules=(HeadRule(rf"^{_MODULE[MC]}\.weight$", MC),) + tuple(fields["head_rules"]))


def _summary(s: ArchSpec) -> Summary:
    return s.variant if isinstance(s.variant, Summary) else Summary()


def outputs(s: ArchSpec) -> int:
    """Output width of the spec's task head (QA: start and end logits, whatever num_labels says)."""
    if s.head == MC:
        return _summary(s).outputs
    return 2 if s.head == "qa" else s.num_labels


def shapes(s: ArchSpec, width: int, tokcls: str = _MODULE["tokcls"]) -> tuple[str, tuple[tuple[str, tuple[int, ...]], ...]]:
    """The spec's task head module (the token classifier's named `tokcls`: Paths.tokcls) and its parameters
    (suffix, shape): a weight [outputs, width], and a bias except on the sequence classifier (score); none for a
    summary without its projection."""
    out = outputs(s)
    if s.head == MC and not out:
        return _MODULE[MC], ()
    name = tokcls if s.head == "tokcls" else _MODULE[s.head]
    return name, (("weight", (out, width)),) + ((("bias", (out,)),) if s.head != "seqcls" else ())


def build(B: Builder, width: int, tokcls: str = _MODULE["tokcls"]) -> None:
    """The spec's task head over the B.b x B.seq tokens of `width` (nothing for base and lm); the multiple-choice
    summary over one token of each of the B.b sequences."""
    s = B.s
    if s.head == MC:
        _build_summary(B, width)
    elif s.head in TASK_HEADS:
        name, params = shapes(s, width, tokcls)
        B.linear(name, "cls", (B.b, B.seq), width, outputs(s), len(params) > 1)


def _build_summary(B: Builder, width: int) -> None:
    sm, name = _summary(B.s), _MODULE[MC]
    if sm.outputs:
        B.linear(f"{name} (cls_index: one token per sequence; batch counts batch x num_choices sequences)", "cls",
                 (B.b,), width, sm.outputs, True)
    if sm.activation:
        B.activation(f"{name} act ({sm.activation})", "cls", (B.b,), sm.outputs or width, sm.activation)


def labels(T: Tensors) -> int:
    """Classes of a score / classifier / qa_outputs head at the top level: rows of its weight; 2 without one."""
    return num_labels(T, r"^(score|classifier|qa_outputs)\.weight$")
