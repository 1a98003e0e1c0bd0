"""GPT-J and CodeGen (transformers modeling_gptj.py, modeling_codegen.py): one template, GPT-J's parallel layer.
Each layer has one LayerNorm (ln_1) whose output feeds attention and the MLP side by side
(x + attn(ln_1(x)) + mlp(ln_1(x))); q, k, v and out_proj have no bias (GPT-J: q_proj, k_proj, v_proj; CodeGen:
one fused qkv_proj [3h, h], its rows in 4 model-parallel groups, a reshape); rotary positions on the first
`rotary_dim` dims of each head (all of them when null), from a sinusoid table built at init (no matmul in the
forward); MLP fc_in / gelu_new / fc_out with biases, n_inner (default 4h) wide; ln_f; and an LM head with a bias,
untied by default (both configs default tie_word_embeddings to false; _tied_weights_keys: lm_head.weight, the
bias stays its own). No learned positions: n_positions only sizes the sinusoid table.
GPT-J also has score (sequence classification) and qa_outputs, the latter num_labels wide.

The rotated dims are ArchSpec.rope_dim; CodeGen (model_type codegen) has the fused qkv_proj (`fused_qkv`)."""
from __future__ import annotations

from typing import Any

from .framework import base, decoder_heads, decoders, infer
from .framework.base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, TieRule, add_linear, add_norm, decoder_kv_cache
from .framework.ops import Builder


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("n_embd", "hidden_size"), c.int("n_head", "num_attention_heads")
    # null (or absent from a saved config that had it null): every dim of the head rotates
    rot = 0 if "rotary_dim" in c.cfg and c.cfg["rotary_dim"] is None else c.int("rotary_dim", default=64)
    return ArchSpec(layers=c.int("n_layer", "num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("n_inner", default=4 * h), vocab=c.int("vocab_size"),
                    context=c.int("n_positions", "max_position_embeddings", default=0),
                    activation=str(c.get("activation_function", default="gelu_new")), qkv_bias=False, o_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=False)),
                    rope_dim=min(rot, h // a), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"wte\.weight$", "wte")
    # GPT-J-6B, CodeGen-6B/16B: head_dim 256; CodeGen-350M: 64 (CodeGen-2B: 80)
    a, note = infer.heads_for(h, 256 if h >= 4096 else 64)
    fused = infer.has(T, r"attn\.qkv_proj\.weight$")
    return ArchSpec(layers=infer.count_layers(T, r"(?:^|\.)h\.(\d+)\."), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=infer.shape(T, r"mlp\.fc_in\.weight$", "mlp.fc_in")[0], vocab=V, activation="gelu_new",
                    qkv_bias=False, o_bias=False, tied_embeddings=infer.find(T, r"(^|\.)lm_head\.weight$") is None,
                    num_labels=decoder_heads.labels(T), rope_dim=min(64, h // a),
                    assumptions=(note, "no config: rotary_dim assumed 64"),
                    **{**common, "model_type": "codegen" if fused else "gptj"})


def fused_qkv(s: ArchSpec) -> bool:
    """CodeGen's one qkv_proj (GPT-J: q_proj, k_proj, v_proj); from_tensors tells the model_type by it."""
    return s.model_type == "codegen"


def build(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, L, f, a = s.hidden, s.layers, s.intermediate, s.heads
    tok = (b, n)
    B.embedding("wte", "embedding", s.vocab, h, n)
    lay = f"h[{L}]"
    B.norm(f"{lay}.ln_1", "encoder", tok, h, L, residual=False)
    if fused_qkv(s):
        B.linear(f"{lay}.attn.qkv_proj", "encoder", tok, h, 3 * h, False, L)
    else:
        for proj in ("q_proj", "k_proj", "v_proj"):
            B.linear(f"{lay}.attn.{proj}", "encoder", tok, h, h, False, L)
    decoders.rope_apply(B, f"{lay}.attn rotary", 2 * a, decoders.rotary_dim(s), L)
    B.attention(f"{lay}.attn", "encoder", a, n, n, s.head_dim, L, causal=True)
    B.linear(f"{lay}.attn.out_proj", "encoder", tok, h, h, False, L)
    B.linear(f"{lay}.mlp.fc_in", "encoder", tok, h, f, True, L)
    B.activation(f"{lay}.mlp act", "encoder", tok, f, s.activation, L)
    B.linear(f"{lay}.mlp.fc_out", "encoder", tok, f, h, True, L)
    B.add(f"{lay} attn + mlp + residual", "activation", "encoder", L, tok + (h,), tok + (h,), ew=2 * b * n * h)
    B.norm("ln_f", "encoder", tok, h, residual=False)
    decoders.lm_head(B, "lm_head", "wte", bias=True)
    decoder_heads.build(B, h, qa_labels=True)


def expected_tensors(s: ArchSpec) -> Shapes:
    h, f = s.hidden, s.intermediate
    p = "" if s.head == "base" else "transformer."
    out: Shapes = {p + "wte.weight": (s.vocab, h)}
    for i in range(s.layers):
        q = f"{p}h.{i}."
        add_norm(out, q + "ln_1", h)
        if fused_qkv(s):
            add_linear(out, q + "attn.qkv_proj", 3 * h, h, bias=False)
        else:
            for proj in ("k_proj", "v_proj", "q_proj"):
                add_linear(out, q + "attn." + proj, h, h, bias=False)
        add_linear(out, q + "attn.out_proj", h, h, bias=False)
        add_linear(out, q + "mlp.fc_in", f, h)
        add_linear(out, q + "mlp.fc_out", h, f)
    add_norm(out, p + "ln_f", h)
    if s.head == "lm":
        add_linear(out, "lm_head", s.vocab, h)
    decoder_heads.tensors(out, s, h, qa_labels=True)
    return out


_SIZES = dict(n_embd=32, n_layer=2, n_head=4, rotary_dim=4, vocab_size=99, n_positions=64)

FAMILY = Family(
    name="gptj",
    model_types=("gptj", "codegen"),
    signature=r"(^|[./])h[./]\d+[./]mlp[./]fc_in[./]",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm", "seqcls", "qa"),
    head_rules=base.decoder_head_rules(r"(^|\.)lm_head\.(weight|bias)$", r"^transformer\."),
    default_head="lm",
    tie_rules=(TieRule("lm_head.weight", "transformer.wte.weight", "config", heads=("lm",)),),
    tied_by_default=False,
    kv_cache=decoder_kv_cache,
    gguf_architectures=(),
    samples=(
        Sample("GPTJConfig", _SIZES, ("GPTJModel", "GPTJForCausalLM", "GPTJForQuestionAnswering")),
        Sample("GPTJConfig", dict(_SIZES, rotary_dim=8, n_inner=48, tie_word_embeddings=True, num_labels=3, pad_token_id=0),
               ("GPTJForCausalLM", "GPTJForSequenceClassification")),   # (its QA head runs only with 2 labels)
        Sample("CodeGenConfig", dict(_SIZES, n_ctx=64), ("CodeGenModel", "CodeGenForCausalLM")),
        Sample("CodeGenConfig", dict(_SIZES, n_ctx=64, tie_word_embeddings=True), ("CodeGenForCausalLM",)),
    ),
)
