"""The forward pass of each family as a list of modules, each with its parameters, matmul MACs,
element-wise FLOPs and bytes moved. One list serves the parameter prediction (sum of params) and the
FLOPs table (sum of calls x per-call costs). Pure arithmetic: no torch, no file access.

Counting rules (docs/oracles.md): a matmul of (m x k) by (k x n) is m*k*n MACs = 2*m*k*n FLOPs, which is
what torch.utils.flop_counter.FlopCounterMode counts for mm/addmm/bmm (the bias add of addmm is not
counted there; we put it in the element-wise figure). Embedding lookups are 0 MACs. Eager attention is
two bmm's per layer (Q K^T and P V), each b*a*s_q*s_k*d MACs, not halved for causal masks unless asked.
"""
from __future__ import annotations

from dataclasses import dataclass

from .spec import ArchSpec

# Element-wise cost estimates, FLOPs per output element (labelled as estimates in every output; tools
# disagree on these). A reduction's adds are counted once per input element.
EW_COST = {
    "layernorm": 5,   # mean (1), subtract (1), square+sum for variance (2), normalise*gamma+beta folded (1)
    "rmsnorm": 4,     # square (1), sum (1), scale by rsqrt (1), *gamma (1)
    "softmax": 5,     # max (1), subtract (1), exp (1), sum (1), divide (1)
    "gelu": 8, "gelu_new": 8, "gelu_pytorch_tanh": 8, "gelu_fast": 8,  # tanh approximation
    "silu": 4, "swish": 4, "relu": 1, "tanh": 4,
    "add": 1, "mul": 1,
    "rotary": 3,      # x*cos + rotate(x)*sin per element of q and k
}


def ew_cost(kind: str) -> int:
    return EW_COST.get(kind, 8)


@dataclass(frozen=True)
class Op:
    module: str
    kind: str                     # embedding, linear, attention, norm, activation, ...
    bucket: str                   # embedding, encoder, decoder, pooler, cls
    calls: int                    # times it runs in one forward pass
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    params: int                   # unique parameters this module owns, all its copies together
    macs: int                     # matmul MACs per call
    ew: int                       # element-wise FLOPs per call (estimate)
    read: int                     # bytes read per call (weights + inputs)
    written: int                  # bytes written per call (outputs)


class Builder:
    def __init__(self, spec: ArchSpec, batch: int, seq: int, dec_seq: int, w_bytes: float, a_bytes: int,
                 causal_halving: bool = False):
        self.s, self.b, self.seq, self.dec_seq = spec, batch, seq, dec_seq
        self.wb, self.ab, self.halve = w_bytes, a_bytes, causal_halving
        self.ops: list[Op] = []

    def add(self, module: str, kind: str, bucket: str, calls: int, in_shape: tuple[int, ...], out_shape: tuple[int, ...],
            params: int = 0, macs: int = 0, ew: int = 0, weights_per_call: int = 0, extra_in: int = 0) -> None:
        n_in = _prod(in_shape) + extra_in
        read = int(weights_per_call * self.wb) + n_in * self.ab
        self.ops.append(Op(module, kind, bucket, calls, in_shape, out_shape, params, macs, ew, read,
                           _prod(out_shape) * self.ab))

    def embedding(self, module: str, bucket: str, rows: int, dim: int, seq: int, params: bool = True) -> None:
        # A lookup: 0 MACs; reads one row per token.
        n = self.b * seq
        self.ops.append(Op(module, "embedding", bucket, 1, (self.b, seq), (self.b, seq, dim),
                           rows * dim if params else 0, 0, 0, int(n * dim * self.wb) + n * 8, n * dim * self.ab))

    def linear(self, module: str, bucket: str, tokens: tuple[int, ...], fin: int, fout: int, bias: bool,
               calls: int = 1, copies: int | None = None, tied: bool = False) -> None:
        n = _prod(tokens)
        per = (0 if tied else fin * fout) + (fout if bias else 0)
        self.add(module, "linear", bucket, calls, tokens + (fin,), tokens + (fout,),
                 params=per * (calls if copies is None else copies), macs=n * fin * fout, ew=n * fout if bias else 0,
                 weights_per_call=fin * fout + (fout if bias else 0))

    def norm(self, module: str, bucket: str, tokens: tuple[int, ...], dim: int, calls: int = 1,
             copies: int | None = None, residual: bool = True, kind: str | None = None) -> None:
        kind = kind or self.s.norm
        per = 2 * dim if kind == "layernorm" else dim
        n = _prod(tokens) * dim
        self.add(module + (" (+residual)" if residual else ""), "norm", bucket, calls, tokens + (dim,), tokens + (dim,),
                 params=per * (calls if copies is None else copies), ew=n * (ew_cost(kind) + (1 if residual else 0)),
                 weights_per_call=per, extra_in=n if residual else 0)

    def activation(self, module: str, bucket: str, tokens: tuple[int, ...], dim: int, kind: str, calls: int = 1,
                   gated: bool = False) -> None:
        n = _prod(tokens) * dim
        self.add(module, "activation", bucket, calls, tokens + (dim * (2 if gated else 1),), tokens + (dim,),
                 ew=n * (ew_cost(kind) + (1 if gated else 0)))

    def attention(self, prefix: str, bucket: str, heads: int, q_len: int, k_len: int, d: int, calls: int,
                  causal: bool, extra_ew: int = 2) -> None:
        """Q K^T, softmax, P V. extra_ew: element-wise ops per score besides softmax (scale, mask/bias)."""
        b = self.b
        pairs = q_len * k_len
        if causal and self.halve:
            pairs = q_len * (q_len + 1) // 2   # the unmasked (q, k) pairs of a causal square
        scores = b * heads * pairs
        self.add(prefix + ".scores (QK^T)", "attention", bucket, calls, (b, heads, q_len, d), (b, heads, q_len, k_len),
                 macs=scores * d, ew=b * heads * q_len * k_len * (ew_cost("softmax") + extra_ew),
                 extra_in=b * heads * k_len * d)
        self.add(prefix + ".context (PV)", "attention", bucket, calls, (b, heads, q_len, k_len), (b, heads, q_len, d),
                 macs=scores * d, extra_in=b * heads * k_len * d)


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for x in shape:
        out *= x
    return out


# ---- families ----

def _bert_like(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, E, L, f, a, d = s.hidden, s.emb, s.layers, s.intermediate, s.heads, s.head_dim
    tok = (b, n)
    albert = s.family == "albert"
    distil = s.family == "distilbert"
    emb = "embeddings"
    B.embedding(f"{emb}.word_embeddings", "embedding", s.vocab, E, n)
    B.embedding(f"{emb}.position_embeddings", "embedding", s.positions, E, n)
    if not distil and s.type_vocab:
        B.embedding(f"{emb}.token_type_embeddings", "embedding", s.type_vocab, E, n)
    B.norm(f"{emb}.LayerNorm", "embedding", tok, E, residual=False)
    if albert:
        B.linear("encoder.embedding_hidden_mapping_in", "embedding", tok, E, h, True)
    elif E != h:
        B.linear("embeddings_project", "embedding", tok, E, h, True)   # ELECTRA-small style
    calls = L * s.inner_group if albert else L
    copies = s.shared_groups * s.inner_group if albert else L
    if albert:
        lay = f"encoder.albert_layer_groups[{s.shared_groups} shared x{s.inner_group} layers]"
        names = ("attention.query", "attention.key", "attention.value", "attention", "attention.dense",
                 "attention.LayerNorm", "ffn", "ffn act", "ffn_output", "full_layer_layer_norm")
    elif distil:
        lay = f"transformer.layer[{L}]"
        names = ("attention.q_lin", "attention.k_lin", "attention.v_lin", "attention", "attention.out_lin",
                 "sa_layer_norm", "ffn.lin1", "ffn act", "ffn.lin2", "output_layer_norm")
    else:
        lay = f"encoder.layer[{L}]"
        names = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.self",
                 "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense", "intermediate act",
                 "output.dense", "output.LayerNorm")
    q, k, v, at, o, ln1, up, act, down, ln2 = (f"{lay}.{x}" for x in names)
    for name in (q, k, v):
        B.linear(name, "encoder", tok, h, h, True, calls, copies)
    B.attention(at, "encoder", a, n, n, d, calls, causal=False)
    B.linear(o, "encoder", tok, h, h, True, calls, copies)
    B.norm(ln1, "encoder", tok, h, calls, copies)
    B.linear(up, "encoder", tok, h, f, True, calls, copies)
    B.activation(act, "encoder", tok, f, s.activation, calls)
    B.linear(down, "encoder", tok, f, h, True, calls, copies)
    B.norm(ln2, "encoder", tok, h, calls, copies)
    first = (b,)   # the pooler and sentence-level classifiers read the first token only
    if s.pooler:
        B.linear("pooler.dense", "pooler", first, h, h, True)
        B.activation("pooler act (tanh)", "pooler", first, h, "tanh")
    head = s.head
    if head in ("mlm", "lm") or (head == "pretraining" and s.model_type != "electra"):
        # BERT/RoBERTa/ALBERT/ELECTRA/DistilBERT MLM: transform dense + act + LayerNorm, then the decoder
        # whose weight is tied to the word embeddings and whose bias is its own (cls.predictions.bias).
        t_out = E if (albert or s.model_type == "electra") else h
        pre = "vocab" if distil else "cls.predictions"
        B.linear(f"{pre}.transform.dense", "cls", tok, h, t_out, True)
        B.activation(f"{pre}.transform act", "cls", tok, t_out, s.activation)
        B.norm(f"{pre}.transform.LayerNorm", "cls", tok, t_out, residual=False)
        B.linear(f"{pre}.decoder (tied to word_embeddings)", "cls", tok, t_out, s.vocab, True, tied=True)
        if head == "pretraining":
            B.linear("cls.seq_relationship" if not albert else "sop_classifier", "cls", first, h, 2, True)
    if head == "pretraining" and s.model_type == "electra":
        B.linear("discriminator_predictions.dense", "cls", tok, h, h, True)
        B.activation("discriminator_predictions act", "cls", tok, h, s.activation)
        B.linear("discriminator_predictions.dense_prediction", "cls", tok, h, 1, True)
    elif head == "seqcls":
        if distil:
            B.linear("pre_classifier", "cls", first, h, h, True)
            B.activation("pre_classifier act (relu)", "cls", first, h, "relu")
        elif not s.pooler:   # RoBERTa / ELECTRA classification head: dense + tanh on <s>, then out_proj
            B.linear("classifier.dense", "cls", first, h, h, True)
            B.activation("classifier act (tanh)", "cls", first, h, "tanh")
        B.linear("classifier" if distil or s.pooler else "classifier.out_proj", "cls", first, h, s.num_labels, True)
    elif head == "tokcls":
        B.linear("classifier", "cls", tok, h, s.num_labels, True)
    elif head == "qa":
        B.linear("qa_outputs", "cls", tok, h, 2, True)


def _gpt2(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, L, f, a, d = s.hidden, s.layers, s.intermediate, s.heads, s.head_dim
    tok = (b, n)
    B.embedding("wte", "embedding", s.vocab, h, n)
    B.embedding("wpe", "embedding", s.positions, h, n)
    lay = f"h[{L}]"
    B.norm(f"{lay}.ln_1", "encoder", tok, h, L)
    B.linear(f"{lay}.attn.c_attn", "encoder", tok, h, 3 * h, True, L)
    B.attention(f"{lay}.attn", "encoder", a, n, n, d, L, causal=True)
    B.linear(f"{lay}.attn.c_proj", "encoder", tok, h, h, True, L)
    B.norm(f"{lay}.ln_2", "encoder", tok, h, L)
    B.linear(f"{lay}.mlp.c_fc", "encoder", tok, h, f, True, L)
    B.activation(f"{lay}.mlp act", "encoder", tok, f, s.activation, L)
    B.linear(f"{lay}.mlp.c_proj", "encoder", tok, f, h, True, L)
    B.norm("ln_f", "encoder", tok, h, residual=False)
    if s.head == "lm":
        B.linear("lm_head" + (" (tied to wte)" if s.tied_embeddings else ""), "cls", tok, h, s.vocab, False,
                 tied=s.tied_embeddings)


def _llama(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, L, f, a, g, d = s.hidden, s.layers, s.intermediate, s.heads, s.kv_heads, s.head_dim
    tok = (b, n)
    B.embedding("embed_tokens", "embedding", s.vocab, h, n)
    # transformers' rotary embedding computes inv_freq (d/2 x 1) @ position_ids (1 x s), a bmm that
    # FlopCounterMode counts (d/2 * s MACs), once per forward; position_ids default to one row for the batch.
    B.add("rotary_emb (inv_freq x positions)", "linear", "embedding", 1, (1, d // 2, 1), (1, d // 2, n), macs=(d // 2) * n)
    lay = f"layers[{L}]"
    B.norm(f"{lay}.input_layernorm", "encoder", tok, h, L)
    B.linear(f"{lay}.self_attn.q_proj", "encoder", tok, h, a * d, s.qkv_bias, L)
    B.linear(f"{lay}.self_attn.k_proj", "encoder", tok, h, g * d, s.qkv_bias, L)
    B.linear(f"{lay}.self_attn.v_proj", "encoder", tok, h, g * d, s.qkv_bias, L)
    B.add(f"{lay}.self_attn rotary", "activation", "encoder", L, tok + ((a + g) * d,), tok + ((a + g) * d,),
          ew=b * n * (a + g) * d * ew_cost("rotary"))
    # GQA: the g K/V heads are repeated to a heads before the bmm, so the bmm's are a-headed.
    B.attention(f"{lay}.self_attn", "encoder", a, n, n, d, L, causal=True)
    B.linear(f"{lay}.self_attn.o_proj", "encoder", tok, a * d, h, s.o_bias, L)
    B.norm(f"{lay}.post_attention_layernorm", "encoder", tok, h, L)
    if s.experts:
        E, k = s.experts, s.top_k
        moe = f"{lay}.block_sparse_moe"
        B.linear(f"{moe}.gate (router)", "encoder", tok, h, E, False, L)
        routed = (b * n * k,)   # each token visits its top-k experts: k rows through w1, w3, w2
        B.linear(f"{moe}.experts[{E}].w1 (top-{k})", "encoder", routed, h, f, s.mlp_bias, L, copies=L * E)
        B.linear(f"{moe}.experts[{E}].w3 (top-{k})", "encoder", routed, h, f, s.mlp_bias, L, copies=L * E)
        B.activation(f"{moe}.experts act*w3", "encoder", routed, f, s.activation, L, gated=True)
        B.linear(f"{moe}.experts[{E}].w2 (top-{k})", "encoder", routed, f, h, s.mlp_bias, L, copies=L * E)
        B.add(f"{moe}.combine (x routing weight)", "activation", "encoder", L, routed + (h,), tok + (h,),
              ew=b * n * k * h * 2)
    else:
        B.linear(f"{lay}.mlp.gate_proj", "encoder", tok, h, f, s.mlp_bias, L)
        B.linear(f"{lay}.mlp.up_proj", "encoder", tok, h, f, s.mlp_bias, L)
        B.activation(f"{lay}.mlp act*up", "encoder", tok, f, s.activation, L, gated=True)
        B.linear(f"{lay}.mlp.down_proj", "encoder", tok, f, h, s.mlp_bias, L)
    B.norm("norm", "encoder", tok, h, residual=False)
    if s.head == "lm":
        B.linear("lm_head" + (" (tied to embed_tokens)" if s.tied_embeddings else ""), "cls", tok, h, s.vocab, False,
                 tied=s.tied_embeddings)


def _t5(B: Builder) -> None:
    s, b = B.s, B.b
    h, f, a, d = s.hidden, s.intermediate, s.heads, s.head_dim
    inner = a * d
    B.embedding("shared", "embedding", s.vocab, h, B.seq)

    def block(stack: str, bucket: str, L: int, n: int, cross: int | None) -> None:
        tok = (b, n)
        lay = f"{stack}.block[{L}]"
        B.add(f"{stack}.block.0.relative_attention_bias", "embedding", bucket, 1, (n, n), (1, a, n, n),
              params=s.relative_buckets * a)
        attn = [("layer.0.SelfAttention", n, stack == "decoder")]
        if cross is not None:
            attn.append(("layer.1.EncDecAttention", cross, False))
        for name, k_len, causal in attn:
            B.norm(f"{lay}.{name} layer_norm", bucket, tok, h, L)
            B.linear(f"{lay}.{name}.q", bucket, tok, h, inner, False, L)
            kv_tok = (b, k_len)
            B.linear(f"{lay}.{name}.k", bucket, kv_tok, h, inner, False, L)
            B.linear(f"{lay}.{name}.v", bucket, kv_tok, h, inner, False, L)
            B.attention(f"{lay}.{name}", bucket, a, n, k_len, d, L, causal=causal, extra_ew=1)  # + position bias
            B.linear(f"{lay}.{name}.o", bucket, tok, inner, h, False, L)
        ff = f"layer.{2 if cross is not None else 1}.DenseReluDense"
        B.norm(f"{lay}.{ff} layer_norm", bucket, tok, h, L)
        if s.gated_mlp:
            B.linear(f"{lay}.{ff}.wi_0", bucket, tok, h, f, False, L)
            B.linear(f"{lay}.{ff}.wi_1", bucket, tok, h, f, False, L)
        else:
            B.linear(f"{lay}.{ff}.wi", bucket, tok, h, f, False, L)
        B.activation(f"{lay}.{ff} act", bucket, tok, f, s.activation, L, gated=s.gated_mlp)
        B.linear(f"{lay}.{ff}.wo", bucket, tok, f, h, False, L)
        B.norm(f"{stack}.final_layer_norm", bucket, tok, h, residual=False)

    block("encoder", "encoder", s.layers, B.seq, None)
    if s.head == "encoder-only":
        return
    B.embedding("decoder.embed_tokens (= shared)", "embedding", s.vocab, h, B.dec_seq, params=False)
    block("decoder", "decoder", s.decoder_layers, B.dec_seq, B.seq)
    if s.head == "lm":
        B.linear("lm_head" + (" (tied to shared)" if s.tied_embeddings else ""), "cls", (b, B.dec_seq), h, s.vocab,
                 False, tied=s.tied_embeddings)


BUILDERS = {"bert": _bert_like, "albert": _bert_like, "distilbert": _bert_like, "gpt2": _gpt2, "llama": _llama,
            "mixtral": _llama, "t5": _t5}


def build(spec: ArchSpec, batch: int = 1, seq: int = 1, dec_seq: int | None = None, w_bytes: float = 4,
          a_bytes: int = 4, causal_halving: bool = False) -> list[Op]:
    B = Builder(spec, batch, seq, seq if dec_seq is None else dec_seq, w_bytes, a_bytes, causal_halving)
    BUILDERS[spec.family](B)
    return B.ops


def predict_params(spec: ArchSpec) -> dict:
    """Unique parameters the config implies (tied weights once), per bucket, and for MoE the active count."""
    ops = build(spec)
    buckets: dict[str, int] = {}
    for op in ops:
        if op.params:
            buckets[op.bucket] = buckets.get(op.bucket, 0) + op.params
    total = sum(buckets.values())
    out = {"total": total, "buckets": buckets}
    if spec.experts:
        per_expert = 3 * spec.hidden * spec.intermediate + (3 * spec.intermediate if spec.mlp_bias else 0)
        out["active"] = total - spec.layers * (spec.experts - spec.top_k) * per_expert
    return out
