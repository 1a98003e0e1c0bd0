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
  SequenceSummary described by framework/summary.py (its config reading, its ops): the summary_type "cls_index" token
  (mc_token_ids) of each of the batch x num_choices sequences, then its projection and activation."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from . import summary
from .base import MC, ArchSpec, Cfg, HeadRule, Tensors
from .infer import num_labels
from .ops import Builder

TASK_HEADS = ("seqcls", "tokcls", "qa", MC)
_MODULE = {"seqcls": "score", "tokcls": "classifier", "qa": "qa_outputs"}


def double_heads(fields: dict[str, Any]) -> dict[str, Any]:
    """The Family fields of a decoder LM (layout.family_fields) whose layout declares the MC head: the spec carries
    the summary.SequenceSummary (from the config, where the class's num_labels is 1; or the file's rows),
    multiple_choice_head's weight shows the head, and the LM head's tie holds on it too (the *DoubleHeadsModel's
    _tied_weights_keys). layout_parts.output_heads walks it (summary.walk)."""
    from_config: Callable[[Cfg], ArchSpec] = fields["from_config"]
    from_tensors: Callable[[Tensors, dict[str, Any]], ArchSpec] = fields["from_tensors"]

    def config(c: Cfg) -> ArchSpec:
        s = from_config(c)
        if s.head != MC and s.architecture is not None:
            return s
        # MC, or a head guessed that the file's names may settle as MC (census _head_from_weights): its summary, where
        # the template describes it (else layout_parts.output_heads refuses the head)
        sm = summary.from_config(c, s.hidden, 1, None)
        return replace(s, variant=sm) if s.head == MC or sm.kind in summary.MC_KINDS else s

    def names(T: Tensors, common: dict[str, Any]) -> ArchSpec:
        s = from_tensors(T, common)
        if s.head != MC:
            return s
        sm, note = summary.from_tensors(T, s.model_type, summary.MC_SUMMARY)
        return replace(s, variant=sm, assumptions=s.assumptions + (note,))

    ties = tuple(replace(r, heads=r.heads + (MC,)) if "lm" in r.heads else r for r in fields["tie_rules"])
    return dict(fields, from_config=config, from_tensors=names, tie_rules=ties,
                head_rules=(HeadRule(rf"^{summary.MC_SUMMARY}\.weight$", MC),) + tuple(fields["head_rules"]))


def outputs(s: ArchSpec) -> int:
    """Output width of the spec's per-token task head (QA: start and end logits, whatever num_labels says)."""
    return 2 if s.head == "qa" else s.num_labels


def shapes(s: ArchSpec, width: int, tokcls: str = _MODULE["tokcls"],
           seqcls: str = _MODULE["seqcls"]) -> tuple[str, tuple[tuple[str, tuple[int, ...]], ...]]:
    """The spec's per-token task head module (the token and sequence classifiers' named `tokcls`, `seqcls`:
    Paths.tokcls, Paths.seqcls) and its parameters (suffix, shape): a weight [outputs, width], and a bias except on the
    sequence classifier."""
    out = outputs(s)
    name = {**_MODULE, "tokcls": tokcls, "seqcls": seqcls}[s.head]
    return name, (("weight", (out, width)),) + ((("bias", (out,)),) if s.head != "seqcls" else ())


def build(B: Builder, width: int, tokcls: str = _MODULE["tokcls"], seqcls: str = _MODULE["seqcls"]) -> None:
    """The spec's per-token task head over the B.b x B.seq tokens of `width` (not the MC summary: summary.walk)."""
    name, params = shapes(B.s, width, tokcls, seqcls)
    B.linear(name, "cls", (B.b, B.seq), width, outputs(B.s), len(params) > 1)


def labels(T: Tensors) -> int:
    """Classes of a score / classifier / qa_outputs head at the top level: rows of its weight; 2 without one."""
    return num_labels(T, r"^(score|classifier|qa_outputs)\.weight$")
