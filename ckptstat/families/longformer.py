"""Longformer (transformers modeling_longformer.py, configuration_longformer.py): RoBERTa's embeddings, post-LN layers
and heads (bert.py's pieces, framework/encoder.py), with Longformer's self-attention: each layer's `attention_window`
(one value, or one a layer) lets a token attend its w = attention_window / 2 neighbours on each side, and the tokens a
`global_attention_mask` marks attend (and are attended by) every token through their own query_global / key_global /
value_global projections.

The window rule, which the config alone does not settle (docs/flops_memory.md):

- LongformerModel pads every sequence to a multiple of attention_window (the largest, for a list) before the
  embeddings: the embeddings and every layer run on N = ceil(s / W) x W tokens, not s (a 8-token input with the
  default 512 runs 512), and the heads on the s tokens the model returns. The figures are those of the padded length.
- The local attention is computed in overlapping chunks (LongformerSelfAttention._sliding_chunks_query_key_matmul and
  _sliding_chunks_matmul_attn_probs_value): with C = N / w - 1 chunks of 2w tokens, Q K^T is b x heads x C x (2w)^2 x d
  MACs (the mask's own pass through the same chunked product, ones against the mask with heads 1 and d 1, is an
  element-wise product for torch's einsum: no matmul), and P V b x heads x (C + 1) x w x 3w x d (each chunk's w
  queries against its 3w padded values): not s^2, and not zero for the masked padding.
- Global tokens: the count the template assumes is the head's default `global_attention_mask`: none for
  LongformerModel, the masked LM and the token classifier, the first token for the sequence classifier (its forward
  sets it). With G global tokens each layer adds query_global over the G tokens and key_global / value_global over all
  N, the G x N scores and their values, and every token's scores against the G global keys and their values (b x heads
  x N x G x d each). A `global_attention_mask` of the user's changes G, which no config says: the question-answering
  and multiple-choice heads mark the question's tokens global (a count of the input's), so they are not described.

The architecture is stated once, in `walk` (framework/recorder.py): the op template and the expected tensors derive
from it; `local_global` is the attention LED's encoder runs too (led.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from . import bert
from .framework import encoder, infer
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors, TieRule
from .framework.ops import Builder, ew_cost
from .framework.recorder import Layers, Recorder, Stack, tensors
from .framework.walk_names import layers, pattern, signature, walked


@dataclass(frozen=True)
class Windows(Variant):
    """Each layer's attention_window (even, > 0) and the global tokens a row the head's forward marks."""
    windows: tuple[int, ...]
    global_tokens: int = 0

    def padded(self, n: int) -> int:
        """The length the model runs: n padded to a multiple of the largest window."""
        w = max(self.windows)
        return -(-n // w) * w


def windows(c: Cfg, L: int) -> tuple[int, ...]:
    """attention_window as one value a layer; UsageError for a value transformers refuses (odd, not positive)."""
    got = c.get("attention_window", default=FROM_CLASS)
    out = tuple(got) if isinstance(got, list) else (got,) * L
    if len(out) != L or not all(isinstance(w, int) and not isinstance(w, bool) and w > 0 and w % 2 == 0 for w in out):
        raise UsageError(f"{c.path}: config attention_window = {got!r} is not an even positive integer (or one a layer, "
                         f"{L} layers)")
    return out


def local_global(r: Recorder, L: Layers, path: str, heads: int, d: int, wins: tuple[int, ...], G: int) -> None:
    """Longformer's self-attention of `L` layers (a Stack, or a count whose paths hold `{bid}`) over the recorder's
    B.seq tokens (already padded), after its query / key / value: the sliding chunks of each layer's window (grouped
    by window), the G global tokens' projections and products (module docstring). `path`: the attention module, whose
    query_global / key_global / value_global it records (run only when G)."""
    B, b, N, h = r.B, r.B.b, r.B.seq, heads * d
    for m, rows in (("query_global", G), ("key_global", N), ("value_global", N)):
        r.linear(f"{path}.{m}", (b, rows), h, h, True, L, runs=G > 0, bucket="encoder")
    for win in dict.fromkeys(wins):
        w, calls = win // 2, wins.count(win)
        C, label = N // w - 1, r.label(path, L) + ("" if len(set(wins)) == 1 else f" (window {win}: {calls} layers)")
        scores = b * heads * N * (2 * w + 1 + G)
        B.add(f"{label}.scores (sliding chunks of {2 * w}, +mask)", "attention", "encoder", calls, (b, heads, N, d),
              (b, N, heads, 2 * w + 1), macs=b * heads * C * (2 * w) ** 2 * d,
              ew=scores * (ew_cost("softmax") + 2), extra_in=b * heads * N * d)
        B.add(f"{label}.context (sliding chunks of {3 * w} values)", "attention", "encoder", calls,
              (b, N, heads, 2 * w + 1), (b, N, heads, d), macs=b * heads * (C + 1) * w * 3 * w * d,
              extra_in=b * heads * N * d)
    if G:
        calls = len(wins)
        B.add(f"{r.label(path, L)}.global keys (every token x {G}, scores and values)", "attention", "encoder", calls,
              (b, N, heads, d), (b, N, heads, d), macs=2 * b * heads * N * G * d)
        B.add(f"{r.label(path, L)}.global queries ({G} x every token, scores and values)", "attention", "encoder", calls,
              (b, heads, G, d), (b, heads, G, d), macs=2 * b * heads * G * N * d,
              ew=b * heads * G * N * (ew_cost("softmax") + 2))


# the sequence classifier marks the first token global (LongformerForSequenceClassification.forward)
GLOBAL_TOKENS = {"seqcls": 1}


def from_config(c: Cfg) -> ArchSpec:
    h, a, L = c.int("hidden_size"), c.int("num_attention_heads"), c.int("num_hidden_layers")
    if h % a:
        raise UsageError(f"{c.path}: hidden_size {h} is not a multiple of num_attention_heads {a}")
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=a, head_dim=h // a, intermediate=c.int("intermediate_size"),
                    vocab=c.int("vocab_size"), positions=c.int("max_position_embeddings"),
                    type_vocab=c.int("type_vocab_size", default=FROM_CLASS), activation=str(c.get("hidden_act", default="gelu")),
                    pooler=c.head == "base", tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    variant=Windows(windows(c, L), GLOBAL_TOKENS.get(c.head, 0)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    d = encoder.dims(T, WALKED, bert.LAYER)
    a, note = infer.heads_for(d["hidden"], 64)
    L = infer.count_layers(T, layers(WALKED, bert.LAYER[0]))
    return ArchSpec(num_labels=infer.num_labels(T), layers=L, heads=a, kv_heads=a, head_dim=d["hidden"] // a,
                    pooler=infer.has(T, pattern(WALKED, "pooler.dense")), variant=Windows((512,) * L,
                                                                                        GLOBAL_TOKENS.get(common["head"], 0)),
                    assumptions=(note, "no config: attention_window 512 on every layer assumed (the config class's "
                                 "default: the padded length and the local attention depend on it)"), **d, **common)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: the embeddings and layers over the padded length (their ops written to a Builder of
    that length), then the pooler and heads over the B.seq tokens the model returns."""
    s, v = B.s, B.s.variant_as(Windows)
    N = v.padded(B.seq)
    body = Recorder(Builder(s, B.b, N, N, B.wb, B.ab, B.halve))
    encoder.embeddings(body)
    stack = Stack(f"encoder.layer[{s.layers}]", "encoder.layer.{bid}", s.layers, s.layers)
    encoder.stack_layers(body, stack, bert.LAYER, attend=lambda r, st: local_global(
        r, st, bert.LAYER[3], s.heads, s.head_dim, v.windows, v.global_tokens))
    B.add(f"padding: {B.seq} tokens to {N} (a multiple of attention_window {max(v.windows)}); the body below runs {N}",
          "embedding", "embedding", 1, (B.b, B.seq), (B.b, N))
    B.ops += body.B.ops
    r = Recorder(B)
    r.modules = body.modules
    if s.pooler:
        encoder.pooler(r)
    if s.head == "mlm":
        encoder.mlm_head(r, bert.ROBERTA_LM, s.hidden)
    elif s.head == "seqcls":
        encoder.sequence_classifier(r, dense=True)
    else:
        encoder.token_heads(r)
    return r


def build(B: Builder) -> None:
    walk(B)




WALKED = walked(walk, "longformer", type_vocab=2, pooler=True, variant=Windows((2,)))

_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64, attention_window=4)

FAMILY = Family(
    name="longformer",
    model_types=("longformer",),
    before=("bert",),   # its layers are BERT's names, and the global projections beside them
    signature=signature(WALKED, f"{bert.LAYER[3]}.query_global"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=tensors(walk, "longformer"),
    heads=("base", "mlm", "seqcls", "tokcls"),
    head_rules=encoder.HEAD_RULES,
    # LongformerForMaskedLM._tied_weights_keys
    tie_rules=(TieRule("lm_head.decoder.weight", "longformer.embeddings.word_embeddings.weight", "config", heads=("mlm",)),
               TieRule("lm_head.decoder.bias", "lm_head.bias", "config", heads=("mlm",))),
    # RoBERTa's positions from padding_idx + 1 (bert.py)
    position_offset={"longformer": 2},
    # on the CPU: the forward asks whether any token is global (.item(), no meta kernel); a window of 4 pads the tests' 8
    # and 16 tokens to 8 and 16, windows of 12 and 4 to 12 and 24
    samples=(
        Sample("LongformerConfig", _SIZES, ("LongformerModel", "LongformerForMaskedLM", "LongformerForTokenClassification"),
               device="cpu"),
        Sample("LongformerConfig", dict(_SIZES, num_labels=3), ("LongformerForSequenceClassification",), device="cpu"),
        Sample("LongformerConfig", dict(_SIZES, attention_window=[12, 4], tie_word_embeddings=False),
               ("LongformerModel", "LongformerForMaskedLM"), device="cpu", infer=False),
    ),
)
