"""ConvBERT (transformers modeling_convbert.py): ELECTRA's embeddings (embedding_size tables and LayerNorm,
embeddings_project to hidden where they differ) and heads (generator_predictions + the tied generator_lm_head, the
classification head's dense + out_proj, the sequence summary before a multiple-choice classifier), with post-LN layers
whose self-attention is mixed with span-based dynamic convolution. Of num_attention_heads / head_ratio heads (at least
one) of (hidden / heads) // 2 wide (A = heads x that), query, key and value (h -> A) run attention; key_conv_attn_layer
(a depthwise Conv1d of conv_kernel_size k over hidden, a pointwise one to A, a bias) times the query gives, through
conv_kernel_layer (A -> heads x k) and a softmax, each token's kernel of k, which weighs the k neighbours of
conv_out_layer's (h -> A) output (one matmul, A x k a token); both halves concatenated are the attention output.
num_groups > 1: the FFN's two projections are GroupedLinearLayers (a [groups, in / groups, out / groups] weight).
One description: `walk` gives the op template and the expected tensors of every head."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NoAnalyticModel
from .bert import SUMMARY_FALLBACK
from .framework import encoder, infer, summary
from .framework.archspec import Variant
from .framework.base import CHOICE, FROM_CLASS, ArchSpec, Cfg, Family, Sample, Shapes, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Recorder, Stack
from .framework.walk_names import layers, pattern, signature, walked

GENERATOR = encoder.LMHead("generator_lm_head", "generator_predictions.dense", "generator_predictions.LayerNorm")


@dataclass(frozen=True)
class ConvBert(Variant):
    """The dynamic convolution's kernel (conv_kernel_size), the FFN's groups (num_groups) and a multiple-choice head's
    sequence summary."""
    kernel: int
    groups: int = 1
    summary: summary.SequenceSummary | None = None


def heads_of(a: int, ratio: int) -> int:
    """ConvBertSelfAttention's heads: num_attention_heads // head_ratio, at least one."""
    return max(a // ratio, 1)


def from_config(c: Cfg) -> ArchSpec:
    h, a0 = c.int("hidden_size"), c.int("num_attention_heads")
    a, k, g = heads_of(a0, c.int("head_ratio", default=FROM_CLASS)), c.int("conv_kernel_size", default=FROM_CLASS), \
        c.int("num_groups", default=FROM_CLASS)
    f = c.int("intermediate_size")
    if h % (2 * a) or k % 2 == 0 or h % g or f % g:
        # (an odd width leaves the halves' concatenation short of hidden; an even kernel pads one more frame than the
        # query holds; groups must divide both widths: transformers' forward fails)
        raise NoAnalyticModel(f"{c.path}: ConvBERT with hidden {h}, {a} heads, conv_kernel_size {k}, num_groups {g} and "
                              f"intermediate {f} does not run in transformers")
    if c.get("add_cross_attention", default=FROM_CLASS):
        raise NoAnalyticModel(f"{c.path}: add_cross_attention: ConvBERT's cross-attention is not described")
    sm = summary.from_config(c, h, c.common.get("num_labels", 2), h, SUMMARY_FALLBACK["roformer"]) if c.head == CHOICE else None
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a // 2,
                    intermediate=f, vocab=c.int("vocab_size"), positions=c.int("max_position_embeddings"),
                    type_vocab=c.int("type_vocab_size", default=FROM_CLASS),
                    embedding_size=c.int("embedding_size", default=FROM_CLASS),
                    activation=str(c.get("hidden_act", default=FROM_CLASS)), variant=ConvBert(k, g, sm),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    d = encoder.dims(T, WALKED, LAYER)
    A = infer.shape(T, pattern(WALKED, "attention.self.query"), "attention query")[0]
    k = infer.shape(T, pattern(WALKED, "attention.self.key_conv_attn_layer.depthwise"), "depthwise conv")[2]
    a = infer.shape(T, pattern(WALKED, "attention.self.conv_kernel_layer"), "conv kernel layer")[0] // k
    ffn = infer.shape(T, pattern(WALKED, "intermediate.dense"), "intermediate dense")
    g = ffn[0] if len(ffn) == 3 else 1   # a GroupedLinearLayer's [groups, in / groups, out / groups]
    h = infer.shape(T, pattern(WALKED, "attention.output.dense"), "attention output")[0]   # (the query's rows are A)
    return ArchSpec(num_labels=infer.num_labels(T), layers=infer.count_layers(T, layers(WALKED, LAYER[0])), heads=a,
                    kv_heads=a, head_dim=A // a, variant=ConvBert(k, g),
                    # a tied generator_lm_head is not saved
                    tied_embeddings=not infer.has(T, rf"(^|\.){GENERATOR.decoder}\.weight$"),
                    **dict(d, hidden=h, intermediate=ffn[0] if g == 1 else g * ffn[2]), **common)


LAYER: encoder.LayerNames = (
    "attention.self.query", "attention.self.key", "attention.self.value", "attention.self", "attention.output.dense",
    "attention.output.LayerNorm", "intermediate.dense", "intermediate act", "output.dense", "output.LayerNorm")


def _ffn_linear(r: Recorder, path: str, stack: Stack, fin: int, fout: int, g: int) -> None:
    """nn.Linear, or (g > 1) a GroupedLinearLayer: g matmuls of fin / g -> fout / g, its bias fout."""
    if g == 1:
        r.linear(path, r.tok, fin, fout, True, stack)
        return
    r.record(path, (("weight", (g, fin // g, fout // g)), ("bias", (fout,))), stack)
    r.B.linear(stack.name(path) + f" (grouped: {g} groups)", "encoder", r.tok, fin // g, fout, True, stack.calls)


def attention(r: Recorder, stack: Stack) -> None:
    """ConvBertSelfAttention (module docstring): attention on half the width, span-based dynamic convolution on the
    other."""
    s, B = r.s, r.B
    h, a, d, L = s.hidden, s.heads, s.head_dim, s.layers
    k, A, tok = s.variant_as(ConvBert).kernel, s.heads * s.head_dim, r.tok
    for name in ("query", "key", "value"):
        r.linear(f"attention.self.{name}", tok, h, A, True, stack)
    sep = "attention.self.key_conv_attn_layer"
    r.record(f"{sep}.depthwise", (("weight", (h, 1, k)),), stack)
    B.add(stack.name(f"{sep}.depthwise (k {k}, groups {h})"), "conv", "encoder", L, (B.b, h, B.seq), (B.b, h, B.seq),
          params=h * k * L, macs=B.b * B.seq * h * k, weights_per_call=h * k)
    r.record(f"{sep}.pointwise", (("weight", (A, h, 1)),), stack)
    r.record(f"{sep}.bias", (("", (A, 1)),), stack)
    B.linear(stack.name(f"{sep}.pointwise (+bias)"), "encoder", tok, h, A, True, L)
    B.add(stack.name("attention.self conv_attn (key_conv x query)"), "activation", "encoder", L, tok + (A,), tok + (A,),
          ew=B.b * B.seq * A)
    r.linear("attention.self.conv_kernel_layer", tok, A, a * k, True, stack)
    B.activation(stack.name("attention.self conv kernel softmax"), "encoder", tok, a * k, "softmax", L)
    r.linear("attention.self.conv_out_layer", tok, h, A, True, stack)
    B.add(stack.name(f"attention.self dynamic conv (each token's {k} neighbours x its kernel)"), "attention", "encoder",
          L, tok + (A, k), tok + (A,), macs=B.b * B.seq * A * k)
    B.attention(stack.name("attention.self"), "encoder", a, B.seq, B.seq, d, L, causal=False)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets (recorder.Recorder)."""
    r, s = Recorder(B), B.s
    h, E, L, g = s.hidden, s.emb, s.layers, s.variant_as(ConvBert).groups
    encoder.embeddings(r)
    if E != h:
        r.linear("embeddings_project", r.tok, E, h, True, bucket="embedding")
    stack = Stack(f"encoder.layer[{L}]", "encoder.layer.{bid}", L, L)
    attention(r, stack)
    r.linear("attention.output.dense", r.tok, h, h, True, stack)
    r.norm("attention.output.LayerNorm", r.tok, h, stack)
    _ffn_linear(r, "intermediate.dense", stack, h, s.intermediate, g)
    B.activation(stack.name("intermediate act"), "encoder", r.tok, s.intermediate, s.activation, L)
    _ffn_linear(r, "output.dense", stack, s.intermediate, h, g)
    r.norm("output.LayerNorm", r.tok, h, stack)
    if s.head == "mlm":   # ConvBertGeneratorPredictions: dense to E, gelu whatever hidden_act, LayerNorm, the decoder
        encoder.mlm_head(r, GENERATOR, E)
    elif s.head == "seqcls":   # ConvBertClassificationHead: dense, hidden_act, out_proj on the first token
        r.linear("classifier.dense", r.first, h, h, True, bucket="cls", top=True)
        B.activation("classifier act", "cls", r.first, h, s.activation)
        r.linear("classifier.out_proj", r.first, h, s.num_labels, True, bucket="cls", top=True)
    elif s.head == CHOICE:
        encoder.multiple_choice(r, s.variant_as(ConvBert).summary)
    else:
        encoder.token_heads(r)
    return r


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes:
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" else "convbert")


# a tiny ConvBertModel: the paths of the name signature and from_tensors' look-ups
WALKED = walked(walk, "convbert", type_vocab=2, variant=ConvBert(3))

_SIZES = dict(hidden_size=32, num_attention_heads=4, intermediate_size=36, vocab_size=99, max_position_embeddings=64,
              embedding_size=16, num_hidden_layers=2)

FAMILY = Family(
    name="convbert",
    model_types=("convbert",),
    signature=signature(WALKED, "attention.self.conv_kernel_layer"),
    before=("bert",),   # its layers' attention.self.query is BERT's signature too
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "mlm", "seqcls", "tokcls", "qa", CHOICE),
    head_rules=encoder.HEAD_RULES,
    tie_rules=(TieRule("generator_lm_head.weight", "convbert.embeddings.word_embeddings.weight", "config",
                       heads=("mlm",)),),
    # (on the CPU: ConvBertModel.forward's warn_if_padding_and_no_attention_mask reads input_ids, which a meta tensor
    # cannot give)
    samples=(
        Sample("ConvBertConfig", dict(_SIZES, num_labels=3),
               ("ConvBertModel", "ConvBertForMaskedLM", "ConvBertForSequenceClassification",
                "ConvBertForTokenClassification"), device="cpu"),
        Sample("ConvBertConfig", _SIZES, ("ConvBertForQuestionAnswering",), device="cpu"),
        # the summary before the classifier: its names a one-label classifier's, config.json tells the head
        Sample("ConvBertConfig", _SIZES, ("ConvBertForMultipleChoice",), device="cpu", infer=False),
        Sample("ConvBertConfig", dict(_SIZES, summary_type="first", summary_use_proj=True, summary_activation="tanh"),
               ("ConvBertForMultipleChoice",), device="cpu", infer=False),
        # grouped FFN, one head of the whole width (head_ratio past the heads), a wider kernel, E = hidden, untied
        Sample("ConvBertConfig", dict(_SIZES, num_groups=2, head_ratio=8, conv_kernel_size=5, embedding_size=32,
                                      tie_word_embeddings=False),
               ("ConvBertForMaskedLM", "ConvBertForTokenClassification"), device="cpu"),
    ),
)
