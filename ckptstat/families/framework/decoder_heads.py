"""Task heads of the classic decoder families (bloom.py; opt.py, gptj.py, gpt_neo.py and gpt_bigcode.py through
DecoderLayout.task_heads), as transformers builds them beside the decoder body:

* *ForSequenceClassification: `score`, Linear(width, num_labels, bias=False);
* *ForTokenClassification: `classifier`, Linear(width, num_labels) with bias;
* *ForQuestionAnswering: `qa_outputs`, Linear(width, 2) with bias (GPT-J's: num_labels outputs).

Each runs over every token's hidden state (the sequence classifier then picks the last non-pad token's
logits: an index, no FLOPs), so FlopCounterMode counts tokens x width x outputs for each."""
from __future__ import annotations

from .base import ArchSpec, Shapes, Tensors
from .infer import find
from .ops import Builder

TASK_HEADS = ("seqcls", "tokcls", "qa")
_MODULE = {"seqcls": "score", "tokcls": "classifier", "qa": "qa_outputs"}


def outputs(s: ArchSpec, qa_labels: bool = False) -> int:
    """Output width of the spec's task head (qa_labels: the QA head has num_labels outputs, GPT-J's)."""
    return 2 if s.head == "qa" and not qa_labels else s.num_labels


def shapes(s: ArchSpec, width: int, qa_labels: bool = False) -> tuple[str, tuple[tuple[str, tuple[int, ...]], ...]]:
    """The spec's task head module and its parameters (suffix, shape): a weight [outputs, width], and a bias
    except on the sequence classifier (score)."""
    out = outputs(s, qa_labels)
    return _MODULE[s.head], (("weight", (out, width)),) + ((("bias", (out,)),) if s.head != "seqcls" else ())


def build(B: Builder, width: int, qa_labels: bool = False) -> None:
    """The spec's task head over the B.b x B.seq tokens of `width` (nothing for base and lm)."""
    s = B.s
    if s.head in TASK_HEADS:
        name, params = shapes(s, width, qa_labels)
        B.linear(name, "cls", (B.b, B.seq), width, outputs(s, qa_labels), len(params) > 1)


def tensors(out: Shapes, s: ArchSpec, width: int, qa_labels: bool = False) -> None:
    if s.head in TASK_HEADS:
        name, params = shapes(s, width, qa_labels)
        out.update({f"{name}.{suffix}": shape for suffix, shape in params})


def labels(T: Tensors) -> int:
    """Classes of a score / classifier / qa_outputs head: rows of its weight ([out, in]); 2 without one."""
    t = find(T, r"^(score|classifier|qa_outputs)\.weight$")
    return t.shape[0] if t is not None and len(t.shape) == 2 else 2
