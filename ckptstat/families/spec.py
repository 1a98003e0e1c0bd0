"""The architecture description the analytic layer works from: derived from config.json, or inferred
from tensor names and shapes when there is none. Pure functions over a dict and TensorInfo shapes.

Notation follows docs/oracles.md: h hidden, a query heads, g key/value heads, d head dim, f intermediate,
V vocab, P positions, T type vocab, L layers, E embedding size (ALBERT/ELECTRA factorised embeddings).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from . import MODEL_TYPES
from ..naming import kernel_layout, normalize, out_in_shape, role_of
from ..errors import UsageError
from ..core import TensorInfo

# Which head an `architectures` class name carries (HF naming), tried in order.
HEAD_SUFFIXES = [
    ("ForMaskedLM", "mlm"), ("LMHeadModel", "lm"), ("ForCausalLM", "lm"), ("ForConditionalGeneration", "lm"),
    ("ForPreTraining", "pretraining"), ("ForSequenceClassification", "seqcls"),
    ("ForTokenClassification", "tokcls"), ("ForQuestionAnswering", "qa"), ("EncoderModel", "encoder-only"),
    ("Model", "base"),
]
DECODERS = ("gpt2", "llama", "mixtral")
# Bytes per element of config `torch_dtype` / `dtype` values.
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8, "int8": 1}


@dataclass(frozen=True)
class ArchSpec:
    family: str                       # bert (also roberta/electra/...), albert, distilbert, gpt2, llama, mixtral, t5
    model_type: str
    source: str                       # "config.json" or "tensor names"
    head: str                         # base, mlm, lm, pretraining, seqcls, tokcls, qa, encoder-only
    architecture: str | None          # the architectures[0] class name the head came from
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    positions: int = 0                # learned absolute positions (0: rotary / relative)
    context: int = 0                  # max_position_embeddings of rotary models (no parameters depend on it)
    type_vocab: int = 0
    embedding_size: int = 0           # ALBERT/ELECTRA factorised embeddings (== hidden when not factorised)
    activation: str = "gelu"
    gated_mlp: bool = False
    norm: str = "layernorm"           # layernorm | rmsnorm
    qkv_bias: bool = True
    o_bias: bool = True
    mlp_bias: bool = True
    tied_embeddings: bool = True
    pooler: bool = False
    num_labels: int = 2
    sliding_window: int | None = None
    experts: int = 0                  # MoE: experts per layer; 0 for dense
    top_k: int = 0
    decoder_layers: int = 0           # T5 decoder stack
    relative_buckets: int = 0         # T5 relative attention buckets
    shared_groups: int = 0            # ALBERT num_hidden_groups
    inner_group: int = 1              # ALBERT inner_group_num
    dtype: str | None = None          # config torch_dtype, when given
    assumptions: tuple[str, ...] = field(default=())

    @property
    def causal(self) -> bool:
        return self.family in DECODERS

    @property
    def emb(self) -> int:
        return self.embedding_size or self.hidden


def _head_of(family: str, model_type: str, archs: Iterable[str]) -> tuple[str, str | None, tuple[str, ...]]:
    for name in archs:
        for suffix, head in HEAD_SUFFIXES:
            if name.endswith(suffix):
                return head, name, ()
    default = "lm" if family in DECODERS + ("t5",) else "base"
    return default, None, (f"config names no known architectures class; assumed the {default!r} head",)


def _pooler(family: str, model_type: str, head: str) -> bool:
    """Which heads keep the pooler (transformers modeling_*.py: add_pooling_layer)."""
    if family not in ("bert", "albert"):
        return False
    if model_type == "electra":
        return False
    if head in ("base", "pretraining"):
        return True
    if head == "seqcls":
        return model_type in ("bert", "albert")   # RoBERTa-style classifiers use their own dense on <s>
    return False


class _Cfg:
    def __init__(self, cfg: Mapping, path: str):
        self.cfg, self.path = cfg, path

    def get(self, *keys: str, default: object = KeyError) -> object:
        for k in keys:
            v = self.cfg.get(k)
            if v is not None:
                return v
        if default is KeyError:
            raise UsageError(f"{self.path}: config has no {' / '.join(keys)}, needed for the analytic model")
        return default

    def int(self, *keys: str, default: object = KeyError) -> int:
        v = self.get(*keys, default=default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (v == 0 and keys[0] in _POSITIVE):
            raise UsageError(f"{self.path}: config {keys[0]} = {v!r} is not a {'positive' if keys[0] in _POSITIVE else 'non-negative'} integer")
        return v


# Sizes that divide others or that a model cannot lack.
_POSITIVE = {"hidden_size", "num_attention_heads", "n_embd", "n_head", "dim", "n_heads", "d_model", "num_heads",
             "d_kv", "head_dim", "num_key_value_heads", "num_local_experts", "num_experts_per_tok"}


def _labels(c: _Cfg) -> int:
    id2label = c.cfg.get("id2label")
    if isinstance(id2label, dict) and id2label:
        return len(id2label)
    return c.int("num_labels", default=2)


def from_config(cfg: Mapping, path: str = "config.json") -> ArchSpec:
    """ArchSpec from a Hugging Face config.json dict. Raises UsageError for an unsupported family."""
    mt = cfg.get("model_type")
    family = MODEL_TYPES.get(mt) if isinstance(mt, str) else None
    if family is None:
        raise UsageError(f"{path}: model_type {mt!r} has no analytic model (supported: {', '.join(sorted(MODEL_TYPES))})")
    archs = [a for a in cfg.get("architectures") or () if isinstance(a, str)]
    head, arch_name, notes = _head_of(family, mt, archs)
    c = _Cfg(cfg, path)
    tdt = cfg.get("torch_dtype") or cfg.get("dtype")
    common = dict(model_type=mt, source="config.json", head=head, architecture=arch_name, assumptions=notes,
                  num_labels=_labels(c), dtype=tdt if isinstance(tdt, str) else None)
    if family in ("bert", "albert"):
        h, a = c.int("hidden_size"), c.int("num_attention_heads")
        e = c.int("embedding_size", default=h) if family == "albert" or mt == "electra" else h
        act = c.get("hidden_act", default="gelu")
        return ArchSpec(family=family, layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a,
                        head_dim=h // a, intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                        positions=c.int("max_position_embeddings"), type_vocab=c.int("type_vocab_size", default=2),
                        embedding_size=e, activation=str(act), pooler=_pooler(family, mt, head),
                        shared_groups=c.int("num_hidden_groups", default=1) if family == "albert" else 0,
                        inner_group=c.int("inner_group_num", default=1) if family == "albert" else 1, **common)
    if family == "distilbert":
        h, a = c.int("dim"), c.int("n_heads")
        return ArchSpec(family=family, layers=c.int("n_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                        intermediate=c.int("hidden_dim"), vocab=c.int("vocab_size"),
                        positions=c.int("max_position_embeddings"), activation=str(c.get("activation", default="gelu")),
                        **common)
    if family == "gpt2":
        h, a = c.int("n_embd"), c.int("n_head")
        return ArchSpec(family=family, layers=c.int("n_layer"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                        intermediate=c.int("n_inner", default=4 * h), vocab=c.int("vocab_size"),
                        positions=c.int("n_positions"), activation=str(c.get("activation_function", default="gelu_new")),
                        tied_embeddings=bool(c.get("tie_word_embeddings", default=True)), **common)
    if family in ("llama", "mixtral"):
        h, a = c.int("hidden_size"), c.int("num_attention_heads")
        g = c.int("num_key_value_heads", default=a)
        d = c.int("head_dim", default=h // a)
        qkv_bias = mt == "qwen2" or bool(c.get("attention_bias", default=False))
        window = cfg.get("sliding_window")
        if mt == "qwen2" and not cfg.get("use_sliding_window"):
            window = None
        return ArchSpec(family=family, layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=g, head_dim=d,
                        intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                        context=c.int("max_position_embeddings", default=0),
                        activation=str(c.get("hidden_act", default="silu")), gated_mlp=True, norm="rmsnorm",
                        qkv_bias=qkv_bias, o_bias=mt != "qwen2" and bool(c.get("attention_bias", default=False)),
                        mlp_bias=bool(c.get("mlp_bias", default=False)),
                        tied_embeddings=bool(c.get("tie_word_embeddings", default=False)),
                        sliding_window=window if isinstance(window, int) and window > 0 else None,
                        experts=c.int("num_local_experts") if family == "mixtral" else 0,
                        top_k=c.int("num_experts_per_tok") if family == "mixtral" else 0, **common)
    # t5 / mt5: feed_forward_proj "relu" (t5) or "gated-gelu" (t5 v1.1, mt5)
    ffp = str(c.get("feed_forward_proj", default="relu"))
    gated = ffp.startswith("gated-")
    layers = c.int("num_layers")
    return ArchSpec(family=family, layers=layers, hidden=c.int("d_model"), heads=c.int("num_heads"),
                    kv_heads=c.int("num_heads"), head_dim=c.int("d_kv"), intermediate=c.int("d_ff"),
                    vocab=c.int("vocab_size"), activation=ffp.split("-")[-1], gated_mlp=gated, norm="rmsnorm",
                    qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    decoder_layers=c.int("num_decoder_layers", default=layers),
                    relative_buckets=c.int("relative_attention_num_buckets", default=32), **common)


# ---- inference from tensor names and shapes (no config) ----

# TF spellings -> transformers' PyTorch spelling, applied after classify.normalize (which has turned
# `/` into `.`, dropped `:0` and `/.ATTRIBUTES/VARIABLE_VALUE`, and made HF TF's `layer_._3` `layer.3`).
_TF_SPELLINGS = [
    (re.compile(r"^tf[a-z0-9_]*\."), ""),                           # HF TF main layer: tf_bert_model/, tf_bert_for_pre_training/
    (re.compile(r"(^|\.)layer_(\d+)(?=\.)"), r"\1layer.\2"),         # google-research BERT: bert/encoder/layer_3/
    (re.compile(r"(^|\.)_?kernel$"), r"\1weight"),                   # Keras Dense kernel (Keras 3: _kernel)
    (re.compile(r"(^|\.)gamma$"), r"\1weight"),                      # Keras / google-research LayerNorm scale
    (re.compile(r"(^|\.)beta$"), r"\1bias"),                         # ... and offset
    (re.compile(r"\.embeddings$"), ".weight"),                       # Keras Embedding; HF TF position/token_type_embeddings
    (re.compile(r"_embeddings$"), "_embeddings.weight"),              # google-research BERT: bert/embeddings/word_embeddings
    (re.compile(r"(^|\.)output_weights$"), r"\1weight"),             # google-research cls/seq_relationship/output_weights
    (re.compile(r"(^|\.)output_bias$"), r"\1bias"),                  # google-research cls/predictions/output_bias
]


def canonical_name(name: str) -> str:
    """The transformers (PyTorch) spelling of a tensor name: google-research TF1 BERT, HF TF (`:0`,
    `tf_bert_model/...`, `mlm___cls`) and Keras names map onto `bert.encoder.layer.0...weight`."""
    n = normalize(name)
    if "___" in n:   # HF TF scopes `$1___$2` read `$2` (modeling_tf_pytorch_utils): mlm___cls/ -> cls.
        parts = n.split(".")
        n = ".".join([p.rsplit("___", 1)[-1] for p in parts[:-1]] + parts[-1:])
    for rx, repl in _TF_SPELLINGS:
        n = rx.sub(repl, n)
    return n


def canonical_tensors(tensors: Mapping[str, TensorInfo], metadata: Mapping[str, str] | None = None) -> dict[str, TensorInfo]:
    """Parameters under their PyTorch names, with 2-D weights in [out, in] shape (TF Dense kernels are
    stored [in, out]: classify.kernel_layout). A name that safetensors.torch.save_model dropped in favour
    of another (`__metadata__[dropped] = kept`) is resolved to the kept tensor. Optimizer slots
    (TF1 `.../adam_m`, which share their variable's shape) and counters are left out."""
    out: dict[str, TensorInfo] = {}
    for name, t in tensors.items():
        if role_of(name, t.dtype, t.shape) in ("optimizer", "counter"):
            continue
        layout = t.extra.get("layout") or kernel_layout(name, t.shape)
        shape = out_in_shape(t.shape, layout if isinstance(layout, str) else None)
        out.setdefault(canonical_name(name), t if shape == t.shape else replace(t, shape=shape))
    for dropped, kept in (metadata or {}).items():
        if dropped not in tensors and kept in tensors:
            k = canonical_name(kept)
            if k in out:
                out.setdefault(canonical_name(dropped), out[k])
    return out


def _find(tensors: Mapping[str, TensorInfo], pattern: str) -> TensorInfo | None:
    rx = re.compile(pattern)
    for name, t in tensors.items():
        if rx.search(name):
            return t
    return None


def _count_layers(tensors: Iterable[str], pattern: str) -> int:
    rx = re.compile(pattern)
    idx = {int(m.group(1)) for n in tensors if (m := rx.search(n))}
    return max(idx) + 1 if idx else 0


def _has(tensors: Mapping[str, TensorInfo], pattern: str) -> bool:
    return _find(tensors, pattern) is not None


def _shape(tensors: Mapping[str, TensorInfo], pattern: str, what: str) -> tuple[int, ...]:
    t = _find(tensors, pattern)
    if t is None:
        raise UsageError(f"cannot infer the architecture from tensor names: no tensor for {what}; pass --config")
    return t.shape


def _heads_for(width: int, preferred: int) -> tuple[int, str]:
    d = preferred if width % preferred == 0 else width
    return width // d, f"no config: head_dim assumed {d} (head count only affects attention-score memory)"


# Which head a checkpoint's (canonical) tensor names show, per family: (pattern, head), first match wins.
_HEAD_RULES = {
    "bert": [
        (r"(^|\.)(cls\.seq_relationship|sop_classifier)\.", "pretraining"),      # BertForPreTraining, AlbertForPreTraining
        (r"(^|\.)(cls\.predictions|predictions\.dense|lm_head\.dense|generator_predictions)\.", "mlm"),
        (r"(^|\.)discriminator_predictions\.", "pretraining"),                    # ElectraForPreTraining
        (r"(^|\.)qa_outputs\.weight$", "qa"),
        # sequence classifiers: on the pooler (BERT/ALBERT) or with their own dense (RoBERTa/ELECTRA)
        (r"(^|\.)classifier\.(dense|out_proj)\.", "seqcls"),
        (r"(^|\.)classifier\.weight$", "tokcls"),   # (seqcls instead when there is a pooler: see infer_head)
    ],
    "distilbert": [(r"(^|\.)vocab_transform\.", "mlm"), (r"(^|\.)qa_outputs\.", "qa"),
                   (r"(^|\.)pre_classifier\.", "seqcls"), (r"(^|\.)classifier\.", "tokcls")],
    # GPT2LMHeadModel saves `transformer.h.N...` (its lm_head tied to wte, usually not stored), GPT2Model
    # `h.N...`; LlamaForCausalLM `model.layers.N...` (+ lm_head unless tied), LlamaModel `layers.N...`.
    "gpt2": [(r"(^|\.)lm_head\.weight$", "lm"), (r"^transformer\.", "lm")],
    "llama": [(r"(^|\.)lm_head\.weight$", "lm"), (r"^model\.", "lm")],
    "t5": [(r"(^|\.)decoder\.block\.\d+\.", "lm")],
}
_HEAD_RULES["albert"] = _HEAD_RULES["bert"]
_HEAD_RULES["mixtral"] = _HEAD_RULES["llama"]
_NO_HEAD = {"t5": "encoder-only"}


def infer_head(family: str, T: Mapping[str, TensorInfo]) -> tuple[str, str]:
    """(head, evidence: the file's name of the tensor that shows it) from canonical_tensors()."""
    if family not in _HEAD_RULES:
        raise UsageError(f"no analytic model for family {family!r}")
    for pattern, head in _HEAD_RULES[family]:
        t = _find(T, pattern)
        if t is None:
            continue
        if head == "pretraining" and not _has(T, r"(^|\.)(cls\.predictions|predictions\.dense|discriminator_predictions)\."):
            continue   # a sentence head without the MLM head is not *ForPreTraining (BertForNextSentencePrediction)
        if head == "tokcls" and family in ("bert", "albert") and _has(T, r"(^|\.)pooler\.dense\.weight$"):
            head = "seqcls"
        return head, t.name
    return _NO_HEAD.get(family, "base"), "no head tensors"


def _num_labels(T: Mapping[str, TensorInfo]) -> int:
    """Classes of a classification head: rows of its last projection ([out, in] after canonical_tensors)."""
    t = _find(T, r"(^|\.)classifier(\.out_proj)?\.weight$")
    return t.shape[0] if t is not None and len(t.shape) == 2 else 2


def from_tensors(family: str, tensors: Mapping[str, TensorInfo], metadata: Mapping[str, str] | None = None) -> ArchSpec:
    """ArchSpec from the shapes of a checkpoint's tensors, for a family already detected from names.
    FLOPs and parameters depend only on shapes; head counts are not recoverable and are assumed.
    Names may be PyTorch, google-research TF1 or HF TF spellings (canonical_tensors)."""
    T = canonical_tensors(tensors, metadata)
    names = list(T)
    base = dict(model_type=family, source="tensor names", architecture=None)
    head, _ = infer_head(family, T)
    if family in ("bert", "albert"):
        V, E = _shape(T, r"word_embeddings\.weight$", "word embeddings")
        P = _shape(T, r"position_embeddings\.weight$", "position embeddings")[0]
        TV = _shape(T, r"token_type_embeddings\.weight$", "token type embeddings")[0] if _has(T, r"token_type_embeddings") else 0
        h = _shape(T, r"attention\.(self\.)?query\.weight$", "attention query")[0]
        f = _shape(T, r"(intermediate\.dense|ffn)\.weight$", "intermediate dense")[0]
        if family == "albert":
            groups = _count_layers(names, r"albert_layer_groups\.(\d+)\.")
            inner = _count_layers(names, r"albert_layers\.(\d+)\.")
            L = 12  # num_hidden_layers is not in the weights (layers are shared): albert-base/xxlarge use 12
            notes = ["no config: ALBERT's num_hidden_layers is not in the weights (shared layers); assumed 12"]
        else:
            L, groups, inner = _count_layers(names, r"layer\.(\d+)\."), 0, 1
            notes = []
        a, note = _heads_for(h, 64)
        pooler = _has(T, r"pooler\.dense\.weight$")
        return ArchSpec(family=family, head=head, num_labels=_num_labels(T), layers=L, hidden=h, heads=a, kv_heads=a,
                        head_dim=h // a, intermediate=f, vocab=V, positions=P, type_vocab=TV, embedding_size=E,
                        pooler=pooler, shared_groups=groups, inner_group=inner or 1, assumptions=tuple(notes + [note]), **base)
    if family == "distilbert":
        V, h = _shape(T, r"word_embeddings\.weight$", "word embeddings")
        P = _shape(T, r"position_embeddings\.weight$", "position embeddings")[0]
        f = _shape(T, r"ffn\.lin1\.weight$", "ffn.lin1")[0]
        a, note = _heads_for(h, 64)
        return ArchSpec(family=family, head=head, num_labels=_num_labels(T), layers=_count_layers(names, r"layer\.(\d+)\."),
                        hidden=h, heads=a, kv_heads=a, head_dim=h // a, intermediate=f, vocab=V, positions=P,
                        assumptions=(note,), **base)
    if family == "gpt2":
        V, h = _shape(T, r"wte\.weight$", "wte")
        P = _shape(T, r"wpe\.weight$", "wpe")[0]
        f = _shape(T, r"mlp\.c_fc\.weight$", "mlp.c_fc")[1]    # GPT-2 Conv1D stores (in, out)
        a, note = _heads_for(h, 64)
        lm = _find(T, r"lm_head\.weight$")
        wte = _find(T, r"wte\.weight$")
        tied = lm is None or (wte is not None and lm.alias_key == wte.alias_key)
        return ArchSpec(family=family, head=head, layers=_count_layers(names, r"(?:^|\.)h\.(\d+)\."), hidden=h,
                        heads=a, kv_heads=a, head_dim=h // a, intermediate=f, vocab=V, positions=P,
                        tied_embeddings=tied, assumptions=(note,), **base)
    if family in ("llama", "mixtral"):
        V, h = _shape(T, r"embed_tokens\.weight$", "embed_tokens")
        q = _shape(T, r"self_attn\.q_proj\.weight$", "q_proj")[0]
        kv = _shape(T, r"self_attn\.k_proj\.weight$", "k_proj")[0]
        d = 128 if q % 128 == 0 and kv % 128 == 0 else 64 if q % 64 == 0 and kv % 64 == 0 else kv
        if family == "mixtral":
            E = _shape(T, r"block_sparse_moe\.gate\.weight$", "router")[0]
            f = _shape(T, r"experts\.0\.w1\.weight$", "experts.0.w1")[0]
        else:
            E, f = 0, _shape(T, r"mlp\.gate_proj\.weight$", "gate_proj")[0]
        lm = _find(T, r"lm_head\.weight$")
        notes = [f"no config: head_dim assumed {d} (KV-cache bytes use the k_proj width, which is exact)"]
        if family == "mixtral":
            notes.append("no config: experts per token (top-k) assumed 2, as in Mixtral-8x7B")
        return ArchSpec(family=family, head=head,
                        layers=_count_layers(names, r"layers\.(\d+)\."), hidden=h, heads=q // d, kv_heads=kv // d,
                        head_dim=d, intermediate=f, vocab=V, gated_mlp=True, norm="rmsnorm",
                        qkv_bias=_has(T, r"q_proj\.bias$"), o_bias=_has(T, r"o_proj\.bias$"),
                        mlp_bias=_has(T, r"(gate_proj|w1)\.bias$"), tied_embeddings=lm is None,
                        experts=E, top_k=2 if E else 0, activation="silu", assumptions=tuple(notes), **base)
    if family == "t5":
        V, h = _shape(T, r"(^|\.)shared\.weight$|encoder\.embed_tokens\.weight$", "shared embedding")
        inner = _shape(T, r"encoder\.block\.0\.layer\.0\.SelfAttention\.q\.weight$", "SelfAttention.q")[0]
        buckets, a = _shape(T, r"relative_attention_bias\.weight$", "relative_attention_bias")
        gated = _has(T, r"DenseReluDense\.wi_0\.weight$")
        f = _shape(T, r"DenseReluDense\.wi(_0)?\.weight$", "DenseReluDense.wi")[0]
        lm = _find(T, r"lm_head\.weight$")
        dec = _count_layers(names, r"decoder\.block\.(\d+)\.")
        return ArchSpec(family=family, head=head, layers=_count_layers(names, r"encoder\.block\.(\d+)\."),
                        hidden=h, heads=a, kv_heads=a, head_dim=inner // a, intermediate=f, vocab=V,
                        activation="gelu" if gated else "relu", gated_mlp=gated, norm="rmsnorm", qkv_bias=False,
                        o_bias=False, mlp_bias=False, tied_embeddings=lm is None, decoder_layers=dec,
                        relative_buckets=buckets,
                        assumptions=("no config: activation assumed relu (t5) or gelu (gated, t5 v1.1)",), **base)
    raise UsageError(f"no analytic model for family {family!r}")


def with_head(spec: ArchSpec, head: str) -> ArchSpec:
    return replace(spec, head=head, pooler=_pooler(spec.family, spec.model_type, head))


# RoBERTa-style embeddings number positions from padding_idx + 1 (pad_token_id 1), so the first two
# rows of the table are never used for a real token: max_position_embeddings 514 gives 512 tokens
# (transformers modeling_roberta.py create_position_ids_from_input_ids).
_POSITION_OFFSET = {"roberta": 2, "xlm-roberta": 2, "camembert": 2}


def max_seq(spec: ArchSpec) -> int | None:
    """Longest sequence the learned absolute position table can index, or None (rotary / relative)."""
    if not spec.positions:
        return None
    return spec.positions - _POSITION_OFFSET.get(spec.model_type, 0)


# GGUF metadata keys (docs/formats.md section 6; llama.cpp LLM_KV_*) -> config.json keys, for the families whose
# GGUF layout is the transformers model's (llama.cpp writes Mistral and Mixtral as "llama").
_GGUF_KEYS = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size",
              "feed_forward_length": "intermediate_size", "attention.head_count": "num_attention_heads",
              "attention.head_count_kv": "num_key_value_heads", "attention.key_length": "head_dim",
              "context_length": "max_position_embeddings", "expert_count": "num_local_experts",
              "expert_used_count": "num_experts_per_tok"}
_GGUF_HEADS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "gpt2": "GPT2LMHeadModel"}


def config_from_gguf(metadata: Mapping[str, str], tensors: Mapping[str, TensorInfo]) -> dict | None:
    """A config.json equivalent from a GGUF file's metadata, or None for an architecture without one."""
    arch = metadata.get("general.architecture")
    if arch not in _GGUF_HEADS or "token_embd.weight" not in tensors:
        return None
    cfg: dict = {k: int(metadata[f"{arch}.{g}"]) for g, k in _GGUF_KEYS.items() if f"{arch}.{g}" in metadata}
    model_type = "mixtral" if arch == "llama" and cfg.get("num_local_experts") else arch
    if arch == "gpt2":  # GPT-2's config spells these n_*
        cfg = {"n_layer": cfg["num_hidden_layers"], "n_embd": cfg["hidden_size"], "n_head": cfg["num_attention_heads"],
               "n_inner": cfg.get("intermediate_size"), "n_positions": cfg.get("max_position_embeddings", 1024)}
    cfg.update(model_type=model_type, architectures=[_GGUF_HEADS[arch]], vocab_size=tensors["token_embd.weight"].shape[0],
               tie_word_embeddings="output.weight" not in tensors)
    return cfg


def default_seq(spec: ArchSpec) -> int:
    """The sequence length commands use when none is given: 128, or fewer if the model cannot run 128."""
    limit = max_seq(spec)
    return 128 if limit is None else min(128, limit)


def check_seq(spec: ArchSpec, seq: int, dec_seq: int | None = None) -> None:
    """UsageError when a sequence length exceeds the model's learned positions (the model cannot run it)."""
    limit = max_seq(spec)
    if limit is None:
        return
    # --dec-seq only matters to a model with a decoder stack (T5's has relative positions, no table).
    for flag, n in (("--seq", seq), ("--dec-seq", dec_seq if spec.decoder_layers else None)):
        if n is not None and n > limit:
            extra = f" ({spec.positions} rows, the first {spec.positions - limit} reserved by the padding offset)" \
                if limit != spec.positions else ""
            raise UsageError(f"{flag} {n} exceeds the model's {limit} learned positions{extra}")
