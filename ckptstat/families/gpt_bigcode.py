"""GPTBigCode: SantaCoder, StarCoder (transformers modeling_gpt_bigcode.py, configuration_gpt_bigcode.py). GPT-2's
layer (learned positions wpe, pre-LayerNorm ln_1 / ln_2, c_attn, c_proj, mlp.c_fc / c_proj, ln_f) with nn.Linear
weights ([out, in], not GPT-2's Conv1D) and multi-query attention by default: `multi_query` (default true)
gives one K/V head, so c_attn is [h + 2d, h]; without it [3h, h]. The single K/V head is repeated to the a
query heads before eager attention's matmuls (repeat_kv), and the cache keeps it unrepeated (g = 1).
The LM head is tied to wte unless tie_word_embeddings is false (GPTBigCodeForCausalLM._tied_weights_keys).

Tensor names are GPT-2's (`transformer.h.N.attn.c_attn`): only the shapes tell them apart, so a file
without config.json is detected as gpt2 (the family signature below never wins over gpt2.py's)."""
from __future__ import annotations

from typing import Any

from . import gpt2
from .framework import base, decoder_heads, infer
from .framework.base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, TieRule, add_linear, decoder_kv_cache
from .framework.ops import Builder


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("n_embd", "hidden_size"), c.int("n_head", "num_attention_heads")
    mq = bool(c.get("multi_query", default=True))
    return ArchSpec(layers=c.int("n_layer", "num_hidden_layers"), hidden=h, heads=a, kv_heads=1 if mq else a,
                    head_dim=h // a, intermediate=c.int("n_inner", default=4 * h), vocab=c.int("vocab_size"),
                    positions=c.int("n_positions", "max_position_embeddings"),
                    activation=str(c.get("activation_function", default="gelu_pytorch_tanh")),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"wte\.weight$", "wte")
    P = infer.shape(T, r"wpe\.weight$", "wpe")[0]
    qkv = infer.shape(T, r"attn\.c_attn\.weight$", "attn.c_attn")[0]
    if qkv == 3 * h:     # multi-head: the head count is not in the shapes
        a, note = infer.heads_for(h, 64)
        g = a
    else:                # multi-query: the fused width h + 2d gives d exactly
        d = (qkv - h) // 2
        a, g, note = h // max(d, 1), 1, ""
    return ArchSpec(layers=infer.count_layers(T, r"(?:^|\.)h\.(\d+)\."), hidden=h, heads=a, kv_heads=g, head_dim=h // a,
                    intermediate=infer.shape(T, r"mlp\.c_fc\.weight$", "mlp.c_fc")[0], vocab=V, positions=P,
                    tied_embeddings=infer.find(T, r"(^|\.)lm_head\.weight$") is None, num_labels=decoder_heads.labels(T),
                    assumptions=(note,) if note else (), **common)


def _qkv(s: ArchSpec) -> int:
    return s.hidden + 2 * s.kv_heads * s.head_dim


def _attention(B: Builder, lay: str) -> None:
    s, tok, h = B.s, (B.b, B.seq), B.s.hidden
    B.linear(f"{lay}.attn.c_attn", "encoder", tok, h, _qkv(s), True, s.layers)
    B.attention(f"{lay}.attn", "encoder", s.heads, B.seq, B.seq, s.head_dim, s.layers, causal=True)
    B.linear(f"{lay}.attn.c_proj", "encoder", tok, h, h, True, s.layers)


def build(B: Builder) -> None:
    gpt2.linear_layout_build(B, _attention)


def _attention_tensors(s: ArchSpec, out: Shapes, q: str) -> None:
    add_linear(out, q + "attn.c_attn", _qkv(s), s.hidden)
    add_linear(out, q + "attn.c_proj", s.hidden, s.hidden)


def expected_tensors(s: ArchSpec) -> Shapes:
    return gpt2.linear_layout_tensors(s, lambda out, q: _attention_tensors(s, out, q))


_SIZES = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=64)

FAMILY = Family(
    name="gpt_bigcode",
    model_types=("gpt_bigcode",),
    # GPT-2's names: listed after gpt2 in the registry, so a file without config is read as GPT-2 (see above)
    signature=r"(^|[./])h[./]\d+[./]attn[./]c_attn",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm", "seqcls", "tokcls"),
    head_rules=base.decoder_head_rules(r"(^|\.)lm_head\.weight$", r"^transformer\."),
    default_head="lm",
    tie_rules=(TieRule("lm_head.weight", "transformer.wte.weight", "config", heads=("lm",)),),
    kv_cache=decoder_kv_cache,
    gguf_architectures=(),
    samples=(
        Sample("GPTBigCodeConfig", _SIZES, ("GPTBigCodeModel", "GPTBigCodeForCausalLM"), detected_as="gpt2"),
        Sample("GPTBigCodeConfig", dict(_SIZES, multi_query=False, tie_word_embeddings=False, num_labels=3, pad_token_id=0),
               ("GPTBigCodeForCausalLM", "GPTBigCodeForSequenceClassification", "GPTBigCodeForTokenClassification"),
               detected_as="gpt2"),
    ),
)
