"""FNet (transformers modeling_fnet.py): BERT's embeddings (word, position, token-type tables, LayerNorm) then
`embeddings.projection` (h -> h), and post-LN layers whose token mixing is a Fourier transform with no parameters and no
q/k/v: fourier.self takes the real part of the 2-D FFT over sequence and hidden (torch.fft.fftn), fourier.output.LayerNorm
normalises it over the residual, then BERT's FFN (intermediate.dense, activation, output.dense, output.LayerNorm). The
pooler (dense + tanh on the first token) under every head; BERT's heads: the MLM head (cls.predictions, its decoder tied
to the word embeddings by tie_word_embeddings), *ForPreTraining's cls.seq_relationship beside it, the classifier on the
pooled output for sequence classification and multiple choice, the token classifier, qa_outputs.

FLOPs convention: FlopCounterMode counts no FFT (torch.fft has no flop formula), so the template counts the FFT as no
FLOPs either, and says so in the output's notes (FFT_NOTE). use_tpu_fourier_optimizations (DFT matrices as buffers,
complex matmuls whose use depends on SciPy being installed) is refused by name.
One description: `walk` gives the op template and the expected tensors of every head."""
from __future__ import annotations

from typing import Any

from ..errors import NoAnalyticModel
from .bert import BERT_LM
from .framework import encoder, infer
from .framework.base import CHOICE, FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Recorder, Stack, tensors
from .framework.walk_names import layers, pattern, signature, walked

FFT_NOTE = ("FNet: the Fourier layers' FFTs are counted as no FLOPs (FlopCounterMode counts none); the figures are the "
            "matmuls'")


def from_config(c: Cfg) -> ArchSpec:
    if c.get("use_tpu_fourier_optimizations", default=FROM_CLASS):
        raise NoAnalyticModel(f"{c.path}: FNet's use_tpu_fourier_optimizations (DFT matrices run as complex matmuls when "
                              "SciPy is installed, else FFTs): not described by the op template")
    h = c.int("hidden_size")
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=1, kv_heads=1, head_dim=h,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    positions=c.int("max_position_embeddings"), type_vocab=c.int("type_vocab_size", default=FROM_CLASS),
                    embedding_size=h, activation=str(c.get("hidden_act", default=FROM_CLASS)), pooler=True,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    **dict(c.common, assumptions=(*c.common.get("assumptions", ()), FFT_NOTE)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, pattern(WALKED, "embeddings.word_embeddings"), "word embeddings")
    P = infer.shape(T, pattern(WALKED, "embeddings.position_embeddings"), "position embeddings")[0]
    TV = infer.shape(T, pattern(WALKED, "embeddings.token_type_embeddings"), "token type embeddings")[0]
    f = infer.shape(T, pattern(WALKED, "intermediate.dense"), "intermediate dense")[0]
    return ArchSpec(num_labels=infer.num_labels(T), layers=infer.count_layers(T, layers(WALKED, "intermediate.dense")),
                    heads=1, kv_heads=1, head_dim=h, hidden=h, embedding_size=h, vocab=V, positions=P, type_vocab=TV,
                    intermediate=f, pooler=True, assumptions=(FFT_NOTE,),
                    # a tied decoder is not saved
                    tied_embeddings=not infer.has(T, r"(^|\.)cls\.predictions\.decoder\.weight$"), **common)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets (recorder.Recorder)."""
    r, s = Recorder(B), B.s
    h, f, L, tok = s.hidden, s.intermediate, s.layers, r.tok
    encoder.embeddings(r)
    r.linear("embeddings.projection", tok, h, h, True, bucket="embedding")
    stack = Stack(f"encoder.layer[{L}]", "encoder.layer.{bid}", L, L)
    B.add(stack.name("fourier.self (real part of the 2-D FFT: no FLOPs counted)"), "attention", "encoder", L,
          tok + (h,), tok + (h,))
    r.norm("fourier.output.LayerNorm", tok, h, stack)
    r.linear("intermediate.dense", tok, h, f, True, stack)
    B.activation(stack.name("intermediate act"), "encoder", tok, f, s.activation, L)
    r.linear("output.dense", tok, f, h, True, stack)
    r.norm("output.LayerNorm", tok, h, stack)
    encoder.pooler(r)
    if s.head in ("mlm", "pretraining"):
        encoder.mlm_head(r, BERT_LM, h)
        if s.head == "pretraining":
            r.linear("cls.seq_relationship", r.first, h, 2, True, bucket="cls", top=True)
    elif s.head == "seqcls":
        encoder.sequence_classifier(r, dense=False)
    elif s.head == CHOICE:
        encoder.multiple_choice(r)
    else:
        encoder.token_heads(r)
    return r


def build(B: Builder) -> None:
    walk(B)


# the walk of a tiny FNetModel: the paths of the name signature and from_tensors' look-ups
WALKED = walked(walk, "fnet", type_vocab=2, pooler=True)

_SIZES = dict(hidden_size=32, num_hidden_layers=2, intermediate_size=37, vocab_size=99, max_position_embeddings=64)

FAMILY = Family(
    name="fnet",
    model_types=("fnet",),
    signature=signature(WALKED, "fourier.output.LayerNorm"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=tensors(walk, "fnet"),
    heads=("base", "mlm", "pretraining", "seqcls", "tokcls", "qa", CHOICE),
    head_rules=encoder.HEAD_RULES,
    pooler=lambda model_type, head: True,   # FNetModel(config) under every head: add_pooling_layer
    # FNetForMaskedLM._tied_weights_keys (and *ForPreTraining's)
    tie_rules=(TieRule(f"{BERT_LM.decoder}.weight", "fnet.embeddings.word_embeddings.weight", "config",
                       heads=("mlm", "pretraining")),
               TieRule(f"{BERT_LM.decoder}.bias", str(BERT_LM.bias), "config", heads=("mlm", "pretraining"))),
    # (built on the CPU: a real forward of the FFT)
    samples=(
        Sample("FNetConfig", dict(_SIZES, num_labels=3),
               ("FNetModel", "FNetForPreTraining", "FNetForMaskedLM", "FNetForSequenceClassification"), device="cpu"),
        # the pooler under the token classifier too: its names read as a sequence classifier's, config.json tells it
        Sample("FNetConfig", dict(_SIZES, num_labels=3), ("FNetForTokenClassification",), device="cpu", infer=False),
        Sample("FNetConfig", _SIZES, ("FNetForQuestionAnswering",), device="cpu"),
        # a one-label classifier on the pooler: config.json tells the head
        Sample("FNetConfig", _SIZES, ("FNetForMultipleChoice",), device="cpu", infer=False),
        Sample("FNetConfig", dict(_SIZES, tie_word_embeddings=False, hidden_act="relu"), ("FNetForMaskedLM",), device="cpu"),
    ),
)
