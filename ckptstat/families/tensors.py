"""The tensors an architecture should have, with their shapes, from its ArchSpec (transformers' naming,
PyTorch layout [out, in]). Used to cross-check a checkpoint against its config: missing tensors (a
dropped tied head, an absent pooler), unexpected ones (adapters, EMA copies) and shape mismatches.
Families with a template: BERT / RoBERTa / ELECTRA-style encoders, ALBERT, DistilBERT, GPT-2, LLaMA-style
decoders, Mixtral, T5."""
from __future__ import annotations

from .spec import ArchSpec

Shapes = dict[str, tuple[int, ...]]
BASE_PREFIX = {"bert": "bert", "roberta": "roberta", "xlm-roberta": "roberta", "camembert": "roberta",
               "electra": "electra", "gpt2": "transformer", "llama": "model", "mistral": "model", "qwen2": "model"}


def _linear(out: Shapes, name: str, fout: int, fin: int, bias: bool = True) -> None:
    out[name + ".weight"] = (fout, fin)
    if bias:
        out[name + ".bias"] = (fout,)


def _norm(out: Shapes, name: str, dim: int, bias: bool = True) -> None:
    out[name + ".weight"] = (dim,)
    if bias:
        out[name + ".bias"] = (dim,)


# The post-LayerNorm encoder layer every BERT-like family has, by each family's module names:
# four h x h attention projections, attention norm, FFN in (f x h) and out (h x f), output norm.
BERT_LAYER = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
              "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm")
ALBERT_LAYER = ("attention.query", "attention.key", "attention.value", "attention.dense", "attention.LayerNorm",
                "ffn", "ffn_output", "full_layer_layer_norm")
DISTILBERT_LAYER = ("attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin", "sa_layer_norm",
                    "ffn.lin1", "ffn.lin2", "output_layer_norm")


def _encoder_layer(out: Shapes, q: str, names: tuple[str, ...], h: int, f: int) -> None:
    *attention, attention_norm, ffn_in, ffn_out, norm = names
    for m in attention:
        _linear(out, q + m, h, h)
    _norm(out, q + attention_norm, h)
    _linear(out, q + ffn_in, f, h)
    _linear(out, q + ffn_out, h, f)
    _norm(out, q + norm, h)


def _embeddings(out: Shapes, p: str, s: ArchSpec, dim: int) -> None:
    out[p + "embeddings.word_embeddings.weight"] = (s.vocab, dim)
    out[p + "embeddings.position_embeddings.weight"] = (s.positions, dim)
    if s.type_vocab:
        out[p + "embeddings.token_type_embeddings.weight"] = (s.type_vocab, dim)
    _norm(out, p + "embeddings.LayerNorm", dim)


def _bert(s: ArchSpec) -> Shapes:
    h, f, V, E = s.hidden, s.intermediate, s.vocab, s.emb
    base = BASE_PREFIX.get(s.model_type, s.model_type)
    p = "" if s.head == "base" else base + "."
    out: Shapes = {}
    _embeddings(out, p, s, E)
    if E != h:
        _linear(out, p + "embeddings_project", h, E)
    for i in range(s.layers):
        _encoder_layer(out, f"{p}encoder.layer.{i}.", BERT_LAYER, h, f)
    if s.pooler:
        _linear(out, p + "pooler.dense", h, h)
    roberta = base == "roberta"
    if s.head in ("mlm", "pretraining"):
        c = "lm_head." if roberta else "cls.predictions."
        _linear(out, c + ("dense" if roberta else "transform.dense"), h, h)
        _norm(out, c + ("layer_norm" if roberta else "transform.LayerNorm"), h)
        out[c + "bias"] = (V,)
        _linear(out, c + "decoder", V, h)
    if s.head == "pretraining":
        _linear(out, "cls.seq_relationship", 2, h)
    if s.head == "seqcls":
        if roberta:
            _linear(out, "classifier.dense", h, h)
            _linear(out, "classifier.out_proj", s.num_labels, h)
        else:
            _linear(out, "classifier", s.num_labels, h)
    return out


def _gpt2(s: ArchSpec) -> Shapes:
    h, f = s.hidden, s.intermediate
    p = "" if s.head == "base" else "transformer."
    out: Shapes = {p + "wte.weight": (s.vocab, h), p + "wpe.weight": (s.positions, h)}
    for i in range(s.layers):
        q = f"{p}h.{i}."
        _norm(out, q + "ln_1", h)
        # GPT-2's Conv1D stores weights as [in, out].
        out.update({q + "attn.c_attn.weight": (h, 3 * h), q + "attn.c_attn.bias": (3 * h,),
                    q + "attn.c_proj.weight": (h, h), q + "attn.c_proj.bias": (h,),
                    q + "mlp.c_fc.weight": (h, f), q + "mlp.c_fc.bias": (f,),
                    q + "mlp.c_proj.weight": (f, h), q + "mlp.c_proj.bias": (h,)})
        _norm(out, q + "ln_2", h)
    _norm(out, p + "ln_f", h)
    if s.head == "lm":
        _linear(out, "lm_head", s.vocab, h, bias=False)
    return out


def _llama(s: ArchSpec) -> Shapes:
    h, f, d = s.hidden, s.intermediate, s.head_dim
    p = "" if s.head == "base" else "model."
    out: Shapes = {p + "embed_tokens.weight": (s.vocab, h)}
    for i in range(s.layers):
        q = f"{p}layers.{i}."
        _linear(out, q + "self_attn.q_proj", s.heads * d, h, s.qkv_bias)
        _linear(out, q + "self_attn.k_proj", s.kv_heads * d, h, s.qkv_bias)
        _linear(out, q + "self_attn.v_proj", s.kv_heads * d, h, s.qkv_bias)
        _linear(out, q + "self_attn.o_proj", h, s.heads * d, s.o_bias)
        if s.experts:  # Mixtral: a router and per-expert gated MLPs
            _linear(out, q + "block_sparse_moe.gate", s.experts, h, bias=False)
            for e in range(s.experts):
                for m, fo, fi in (("w1", f, h), ("w2", h, f), ("w3", f, h)):
                    _linear(out, f"{q}block_sparse_moe.experts.{e}.{m}", fo, fi, bias=False)
        else:
            for m, fo, fi in (("gate_proj", f, h), ("up_proj", f, h), ("down_proj", h, f)):
                _linear(out, q + "mlp." + m, fo, fi, s.mlp_bias)
        _norm(out, q + "input_layernorm", h, bias=False)
        _norm(out, q + "post_attention_layernorm", h, bias=False)
    _norm(out, p + "norm", h, bias=False)
    if s.head == "lm":
        _linear(out, "lm_head", s.vocab, h, bias=False)
    return out


def _t5(s: ArchSpec) -> Shapes:
    h, f, inner = s.hidden, s.intermediate, s.heads * s.head_dim
    out: Shapes = {"shared.weight": (s.vocab, h), "encoder.embed_tokens.weight": (s.vocab, h)}
    ff = ("wi_0", "wi_1", "wo") if s.gated_mlp else ("wi", "wo")

    def block(stack: str, i: int, cross: bool) -> None:
        q = f"{stack}.block.{i}.layer."
        for m in ("q", "k", "v"):
            out[f"{q}0.SelfAttention.{m}.weight"] = (inner, h)
        out[f"{q}0.SelfAttention.o.weight"] = (h, inner)
        if i == 0:
            out[f"{q}0.SelfAttention.relative_attention_bias.weight"] = (s.relative_buckets, s.heads)
        out[f"{q}0.layer_norm.weight"] = (h,)
        n = 1
        if cross:
            for m in ("q", "k", "v"):
                out[f"{q}1.EncDecAttention.{m}.weight"] = (inner, h)
            out[f"{q}1.EncDecAttention.o.weight"] = (h, inner)
            out[f"{q}1.layer_norm.weight"] = (h,)
            n = 2
        for m in ff:
            out[f"{q}{n}.DenseReluDense.{m}.weight"] = (h, f) if m == "wo" else (f, h)
        out[f"{q}{n}.layer_norm.weight"] = (h,)

    for i in range(s.layers):
        block("encoder", i, False)
    out["encoder.final_layer_norm.weight"] = (h,)
    if s.head != "encoder-only":
        out["decoder.embed_tokens.weight"] = (s.vocab, h)
        for i in range(s.decoder_layers):
            block("decoder", i, True)
        out["decoder.final_layer_norm.weight"] = (h,)
    if s.head == "lm":
        out["lm_head.weight"] = (s.vocab, h)
    return out


def _albert(s: ArchSpec) -> Shapes:
    h, f, V, E = s.hidden, s.intermediate, s.vocab, s.emb
    p = "" if s.head == "base" else "albert."
    out: Shapes = {}
    _embeddings(out, p, s, E)
    _linear(out, p + "encoder.embedding_hidden_mapping_in", h, E)
    for g in range(s.shared_groups or 1):   # shared layers: groups x inner layers, reused across depth
        for k in range(s.inner_group):
            _encoder_layer(out, f"{p}encoder.albert_layer_groups.{g}.albert_layers.{k}.", ALBERT_LAYER, h, f)
    if s.pooler:
        _linear(out, p + "pooler", h, h)
    if s.head in ("mlm", "pretraining"):
        out["predictions.bias"] = (V,)
        _linear(out, "predictions.dense", E, h)
        _norm(out, "predictions.LayerNorm", E)
        _linear(out, "predictions.decoder", V, E)
    if s.head == "pretraining":
        _linear(out, "sop_classifier.classifier", 2, h)
    if s.head == "seqcls":
        _linear(out, "classifier", s.num_labels, h)
    return out


def _distilbert(s: ArchSpec) -> Shapes:
    h, f, V = s.hidden, s.intermediate, s.vocab
    p = "" if s.head == "base" else "distilbert."
    out: Shapes = {}
    _embeddings(out, p, s, h)
    for i in range(s.layers):
        _encoder_layer(out, f"{p}transformer.layer.{i}.", DISTILBERT_LAYER, h, f)
    if s.head == "mlm":
        _linear(out, "vocab_transform", h, h)
        _norm(out, "vocab_layer_norm", h)
        _linear(out, "vocab_projector", V, h)
    if s.head == "seqcls":
        _linear(out, "pre_classifier", h, h)
        _linear(out, "classifier", s.num_labels, h)
    return out


TEMPLATES = {"bert": _bert, "albert": _albert, "distilbert": _distilbert, "gpt2": _gpt2, "llama": _llama,
             "mixtral": _llama, "t5": _t5}


def expected_tensors(spec: ArchSpec) -> Shapes | None:
    """name -> shape of every parameter the architecture has, or None when there is no template."""
    fn = TEMPLATES.get(spec.family)
    if fn is None or (spec.family == "bert" and spec.model_type not in BASE_PREFIX):
        return None
    if spec.model_type == "electra" and spec.head != "base":  # ELECTRA's generator/discriminator heads: no template
        return None
    return fn(spec)
