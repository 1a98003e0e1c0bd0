"""The beam-search SQuAD head of XLMForQuestionAnswering / FlaubertForQuestionAnswering (transformers modeling_xlm.py
XLMSQuADHead, under `qa_outputs`) and XLNetForQuestionAnswering (modeling_xlnet.py: the same modules at the top
level), in no auto mapping (their *ForQuestionAnsweringSimple are), as a forward without start_positions runs it:

* start_logits.dense, Linear(hidden, 1) on every token, softmaxed over the tokens, the top start_n_top kept;
* end_logits over every token x each of the start_n_top start tokens: dense_0 Linear(2 x hidden, hidden) on the
  token's and the start's states concatenated, tanh, LayerNorm, dense_1 Linear(hidden, 1); softmax and the top
  end_n_top (topk over the tokens: the model cannot run fewer tokens than start_n_top or end_n_top, min_seq);
* the start states' probability-weighted sum (einsum "blh,bl->bh": a bmm, tokens x hidden MACs a sequence), then
  answer_class on it and the last token's state: dense_0 Linear(2 x hidden, hidden), tanh, dense_1 Linear(hidden, 1)
  without bias."""
from __future__ import annotations

from dataclasses import dataclass

from .base import FROM_CLASS, Cfg, class_default
from .recorder import Recorder

HEAD = "squad"   # the head of these *ForQuestionAnswering classes (HEAD_SUFFIXES calls every one "qa")
START = "start_logits.dense"   # the head's first module (under the family's prefix)


@dataclass(frozen=True)
class Beams:
    """config start_n_top and end_n_top, read whatever the head (a config naming no class can hold the head)."""
    start: int = 0
    end: int = 0


def head(c: Cfg) -> str:
    """HEAD for a config naming *ForQuestionAnswering (not *ForQuestionAnsweringSimple), else the config's head."""
    arch = c.common["architecture"]
    return HEAD if c.head == "qa" and isinstance(arch, str) and arch.endswith("ForQuestionAnswering") else c.head


def from_config(c: Cfg) -> Beams:
    return Beams(c.int("start_n_top", default=FROM_CLASS), c.int("end_n_top", default=FROM_CLASS))


def from_names(model_type: str, head: str) -> tuple[Beams, tuple[str, ...]]:
    """Without a config: the config class's beams (the weights do not show them), and for the head a note saying so."""
    b = Beams(int(class_default(model_type, "start_n_top")), int(class_default(model_type, "end_n_top")))
    return b, ((f"no config: the SQuAD head's beams assumed start_n_top {b.start}, end_n_top {b.end} (the config "
                "class's)",) if head == HEAD else ())


def min_seq(head: str, beams: Beams) -> int:
    """The fewest tokens the head's topk can run (1: any, for another head)."""
    return max(beams.start, beams.end, 1) if head == HEAD else 1


def walk(r: Recorder, prefix: str, beams: Beams) -> None:
    B, h, k = r.B, r.s.hidden, beams.start
    b, n = B.b, B.seq
    r.linear(prefix + START, r.tok, h, 1, True, bucket="cls", top=True)
    B.activation(prefix + "start_logits softmax", "cls", (b,), n, "softmax")
    ends = (b, n, k)
    r.linear(prefix + "end_logits.dense_0", ends, 2 * h, h, True, bucket="cls", top=True,
             label=f"{prefix}end_logits.dense_0 (every token x start_n_top = {k} start tokens)")
    B.activation(prefix + "end_logits act (tanh)", "cls", ends, h, "tanh")
    r.norm(prefix + "end_logits.LayerNorm", ends, h, residual=False, bucket="cls", top=True)
    r.linear(prefix + "end_logits.dense_1", ends, h, 1, True, bucket="cls", top=True)
    B.activation(prefix + "end_logits softmax", "cls", (b, k), n, "softmax")
    B.add(prefix + "start states (einsum blh,bl->bh: the start probabilities' weighted sum)", "attention", "cls", 1,
          (b, n, h), (b, h), macs=b * n * h, extra_in=b * n)
    r.linear(prefix + "answer_class.dense_0", r.first, 2 * h, h, True, bucket="cls", top=True)
    B.activation(prefix + "answer_class act (tanh)", "cls", r.first, h, "tanh")
    r.linear(prefix + "answer_class.dense_1", r.first, h, 1, False, bucket="cls", top=True)
