"""xLSTM (transformers modeling_xlstm.py, xLSTMModel / xLSTMForCausalLM, the native kernels it has without the `xlstm`
package): the embeddings (embedding_dim, which must be hidden_size), then per block an RMSNorm norm_mlstm, the mLSTM
layer, an RMSNorm norm_ffn and a gated FFN; out_norm (an RMSNorm, always there, never biased) and lm_head, never tied
(xLSTMForCausalLM has no _tied_weights_keys), its logits soft-capped.

The mLSTM layer (xLSTMLayer): with weight_mode "single" q, k (h -> qk = int(h x qk_dim_factor)), v and ogate_preact
(h -> v = int(h x v_dim_factor)), igate_preact and fgate_preact (h -> num_heads, always biased); with "fused" one
qkv_opreact (h -> 2 qk + 2 v) and ifgate_preact (h -> 2 num_heads, biased). The recurrence per head (dqk = qk / heads,
dv = v / heads); multihead_norm (a LayerNorm per head over dv, weight [v]); sigmoid(ogate) x it; out_proj v -> h.
The FFN (xLSTMFeedForward): proj_up_gate and proj_up (or one proj_up_gate_z of twice the width) h -> f =
round_up(h x ffn_proj_factor, ffn_round_up_to_multiple_of), silu(gate) x up, proj_down f -> h. use_bias biases every
linear and norm but out_norm.

FLOPs: the eager forward in inference mode (config mode "inference", the default, which generation needs) on a model in
eval mode: each piece of at most max_inference_chunksize tokens runs wrap_chunkwise_arbitrary_sequence_length, whose
floor(piece / chunk_size) whole chunks run the chunkwise kernel (per chunk K^T V [dqk, C] @ [C, dv] for the state;
Q K^T [C, dqk] @ [dqk, C], Q C [C, dqk] @ [dqk, dv], (QK^T . D) V [C, C] @ [C, dv], Q n [C, dqk] @ [dqk, 1] for the
outputs) and the remaining tokens the recurrent step one token at a time (k v^T [dqk, 1] @ [1, dv], q C [1, dqk] @
[dqk, dv], q n [1, dqk] @ [dqk, 1]); a piece of one token the step kernel, the same three. The modes "train" and
"train_with_padding" (a chunkwise kernel over the whole sequence, which fails or pads where it is not whole chunks) are
refused (NoAnalyticModel: the meta path answers them).

The cache: the xLSTMCache the forward returns (`cache`, not past_key_values): its rnn_state, per layer C [b, heads,
qk_head_dim, v_head_dim], n [b, heads, qk_head_dim] and m [b, heads, 1], in the model's dtype (the inputs' embeddings'),
whatever the sequence length. Its head widths are the config's qk_head_dim / v_head_dim, the widths rounded up to
multiples of 64 before the division; where those differ from the layer's (int(h x factor) / heads), transformers'
forward with use_cache fails (the kernels check the initial state's shape), and the state memory is refused.

Described once, by its forward (`walk`): each parameterised module recorded as its op is written (layout_base.Walk,
the names as LAYOUT's paths give them), from which the expected tensors derive; llama.cpp has no xLSTM, so no GGUF
names."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from .framework import decoders, infer, layout, walk_names
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, KVLines, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import Module, Walk, walk_tensors
from .framework.ops import Builder, ew_cost

# the module names as xLSTMForCausalLM saves them; the walk records with them (no llama.cpp names: no xLSTM there)
LAYOUT = DecoderLayout(ties=False, tied_default=False,
                       paths=Paths(body="backbone", embed="embeddings", layers="blocks", attn="mlstm_layer", mlp="ffn",
                                   attn_in="norm_mlstm", mlp_in="norm_ffn", norm="out_norm", lm_head="lm_head"))
_P = LAYOUT.paths


@dataclass(frozen=True)
class XlstmVariant(Variant):
    heads: int          # num_heads
    qk: int             # int(hidden_size x qk_dim_factor): q and k's width
    v: int              # int(hidden_size x v_dim_factor): v's, ogate's and the multi-head norm's
    fused: bool         # weight_mode "fused": qkv_opreact, ifgate_preact and proj_up_gate_z
    bias: bool          # use_bias
    chunk: int          # chunk_size: the chunkwise kernel's
    piece: int          # max_inference_chunksize: the longest piece one pass of the blocks reads
    cache_qk: int       # xLSTMCache's qk_head_dim: round_up(h x qk_dim_factor, 64) // heads
    cache_v: int        # its v_head_dim


def _round_up(x: float, multiple: int) -> int:
    """configuration_xlstm.round_up_to_next_multiple_of."""
    return int(((x + multiple - 1) // multiple) * multiple)


def _factor(c: Cfg, key: str) -> float:
    v = c.get(key, default=None)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise UsageError(f"{c.path}: config {key} = {v!r} is not a positive number")
    return float(v)


def from_config(c: Cfg) -> ArchSpec:
    """xLSTMConfig: hidden_size (else embedding_dim), num_hidden_layers (else num_blocks), the widths its modules
    derive; modes and sizes the template does not describe refused by name."""
    h = c.int("hidden_size", "embedding_dim")
    if c.get("embedding_dim", default=None) not in (None, h):
        raise UsageError(f"{c.path}: config embedding_dim {c.get('embedding_dim')} is not hidden_size {h}: xLSTM's "
                         "embeddings feed its blocks")
    L = c.int("num_hidden_layers", "num_blocks")
    if c.get("num_blocks", default=None) not in (None, L):
        raise NoAnalyticModel(f"{c.path}: config num_blocks {c.get('num_blocks')} is not num_hidden_layers {L} "
                              "(the blocks and xLSTMCache's layers differ)")
    mode = c.get("mode", default=None)
    if mode != "inference":
        raise NoAnalyticModel(f"{c.path}: xLSTM's mode {mode!r}: only \"inference\" (the default) is modelled")
    weight_mode = c.get("weight_mode", default=None)
    if weight_mode not in ("single", "fused"):
        raise UsageError(f"{c.path}: config weight_mode {weight_mode!r} is not \"single\" or \"fused\"")
    heads = c.int("num_heads", default=FROM_CLASS)
    qk_f, v_f = _factor(c, "qk_dim_factor"), _factor(c, "v_dim_factor")
    qk, v = int(h * qk_f), int(h * v_f)
    if not heads or qk % heads or v % heads:
        raise UsageError(f"{c.path}: xLSTM's q/k width {qk} and v width {v} are not multiples of num_heads {heads}")
    for key in ("chunk_size", "max_inference_chunksize"):
        if not c.int(key, default=FROM_CLASS):
            raise UsageError(f"{c.path}: config {key} is 0")
    ffn = _round_up(h * _factor(c, "ffn_proj_factor"), c.int("ffn_round_up_to_multiple_of", default=FROM_CLASS))
    return ArchSpec(layers=L, hidden=h, heads=0, kv_heads=0, head_dim=0, intermediate=ffn, vocab=c.int("vocab_size"),
                    activation="silu", norm="rmsnorm", qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=False,
                    variant=XlstmVariant(heads=heads, qk=qk, v=v, fused=weight_mode == "fused",
                                         bias=bool(c.get("use_bias", default=None)),
                                         chunk=c.int("chunk_size", default=FROM_CLASS),
                                         piece=c.int("max_inference_chunksize", default=FROM_CLASS),
                                         cache_qk=_round_up(h * qk_f, 64) // heads,
                                         cache_v=_round_up(h * v_f, 64) // heads),
                    **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The widths from the modules the walk records; num_heads from the gates' rows (fgate_preact's, or half of
    ifgate_preact's); chunk sizes and the bias assumed as the class's defaults where the file cannot say."""
    V, h = walk_names.shape(T, _NAMES, _P.embed)
    fused = infer.find(T, walk_names.pattern(_FUSED, f"{_P.attn}.ifgate_preact")) is not None
    names = _FUSED if fused else _NAMES
    if fused:
        heads = walk_names.shape(T, names, f"{_P.attn}.ifgate_preact")[0] // 2
        v = walk_names.shape(T, names, f"{_P.attn}.out_proj")[1]
        qk = (walk_names.shape(T, names, f"{_P.attn}.qkv_opreact")[0] - 2 * v) // 2
        f = walk_names.shape(T, names, f"{_P.mlp}.proj_up_gate_z")[0] // 2
    else:
        heads = walk_names.shape(T, names, f"{_P.attn}.fgate_preact")[0]
        qk, v = walk_names.shape(T, names, f"{_P.attn}.q")[0], walk_names.shape(T, names, f"{_P.attn}.v")[0]
        f = walk_names.shape(T, names, f"{_P.mlp}.proj_up")[0]
    bias = infer.find(T, walk_names.pattern(names, f"{_P.attn}.out_proj", "bias")) is not None
    return ArchSpec(layers=infer.count_layers(T, walk_names.pattern(names, f"{_P.attn}.out_proj", layer=r"(\d+)")),
                    hidden=h, heads=0, kv_heads=0, head_dim=0, intermediate=f, vocab=V, activation="silu",
                    norm="rmsnorm", qkv_bias=False, o_bias=False, mlp_bias=False, tied_embeddings=False,
                    variant=XlstmVariant(heads=heads, qk=qk, v=v, fused=fused, bias=bias, chunk=64, piece=16384,
                                         cache_qk=qk // heads, cache_v=v // heads),
                    assumptions=("no config: mode \"inference\", chunk_size 64 and max_inference_chunksize 16384 assumed",),
                    **common)


def _pieces(s: int, piece: int, chunk: int) -> tuple[int, int]:
    """(whole chunks, single steps) the mLSTM kernels run over s tokens: xLSTMModel.forward's pieces of at most
    max_inference_chunksize tokens (when s is longer), each wrap_chunkwise_arbitrary_sequence_length's floor(p / chunk)
    chunks and p mod chunk recurrent steps (a piece of one token: the step kernel, one step)."""
    sizes = [piece] * (s // piece) + ([s % piece] if s % piece else []) if piece < s else [s]
    chunks = sum(p // chunk for p in sizes if p > 1)
    return chunks, sum(p - (p // chunk) * chunk if p > 1 else 1 for p in sizes)


def _norm(w: Walk, sub: str, dim: int, layers: tuple[int, ...] | None, bias: bool, kind: str = "rmsnorm",
          residual: bool = True) -> None:
    """An xLSTM norm: a weight, and a bias where use_bias (xLSTMRMSNorm, xLSTMMultiHeadLayerNorm)."""
    w.record(sub, None, (("weight", (dim,)),) + ((("bias", (dim,)),) if bias else ()), layers)
    w.B.norm(sub if layers is None else w.label(sub, layers), "encoder", w.tok, dim, len(layers) if layers else 1,
             residual=residual, kind=kind, bias=bias)


def walk(B: Builder) -> list[Module]:
    """The forward at B.s's sizes (xLSTMModel.forward, xLSTMBlock, xLSTMLayer, xLSTMFeedForward): writes its ops to B
    and returns the modules it met."""
    s = B.s
    x = s.variant_as(XlstmVariant)
    w = Walk(B, LAYOUT)
    h, f, L, tok, n, b = s.hidden, s.intermediate, s.layers, w.tok, B.b * B.seq, B.b
    every, at, ff = tuple(range(L)), f"{_P.attn}.", f"{_P.mlp}."
    nh, dqk, dv = x.heads, x.qk // x.heads, x.v // x.heads

    w.record(_P.embed, None, (("weight", (s.vocab, h)),), None)
    B.embedding(_P.embed, "embedding", s.vocab, h, B.seq)
    _norm(w, _P.attn_in, h, every, x.bias)
    if x.fused:
        w.linear(at + "qkv_opreact", None, h, 2 * x.qk + 2 * x.v, x.bias, every)
        w.linear(at + "ifgate_preact", None, h, 2 * nh, True, every)
    else:
        for name, width in (("q", x.qk), ("k", x.qk), ("v", x.v), ("ogate_preact", x.v)):
            w.linear(at + name, None, h, width, x.bias, every)
        for name in ("igate_preact", "fgate_preact"):
            w.linear(at + name, None, h, nh, True, every)
    B.activation(w.label(f"{_P.attn} gate soft cap (tanh)", every), "encoder", tok, 2 * nh, "tanh", L)
    chunks, steps = _pieces(B.seq, x.piece, x.chunk)
    C, bh = x.chunk, b * nh
    if chunks:
        # mlstm_chunkwise_recurrent_fw_C (the states after each chunk) and mlstm_chunkwise_parallel_fw_H (the outputs)
        B.add(w.label(f"{_P.attn} mLSTM chunkwise: states (K^T V per chunk)", every), "attention", "encoder", L,
              (b, nh, chunks * C, dqk + dv), (b, nh, dqk, dv), macs=bh * chunks * dqk * C * dv,
              ew=bh * chunks * C * (dqk + 4))
        B.add(w.label(f"{_P.attn} mLSTM chunkwise: outputs (QK^T, QC, (QK^T . D) V, Qn)", every), "attention",
              "encoder", L, (b, nh, chunks * C, 2 * dqk + dv), (b, nh, chunks * C, dv),
              macs=bh * chunks * C * (C * dqk + dqk * dv + C * dv + dqk),
              ew=bh * chunks * C * (C * (ew_cost("exp") + 6) + dv + 4))
    if steps:
        # mlstm_recurrent_step_native per token: C += k v^T, h = q C / max(|q n|, exp(-m))
        B.add(w.label(f"{_P.attn} mLSTM recurrent steps (k v^T, q C, q n)", every), "attention", "encoder", L,
              (b, nh, steps, 2 * dqk + dv), (b, nh, steps, dv), macs=bh * steps * (2 * dqk * dv + dqk),
              ew=bh * steps * (3 * dqk * dv + 2 * dqk + dv + 2 * ew_cost("exp") + 6))
    _norm(w, at + "multihead_norm", x.v, every, x.bias, kind="layernorm", residual=False)
    B.activation(w.label(f"{_P.attn} sigmoid(ogate) x h", every), "encoder", tok, x.v, "sigmoid", L, gated=True)
    w.linear(at + "out_proj", None, x.v, h, x.bias, every)
    _norm(w, _P.mlp_in, h, every, x.bias)
    if x.fused:
        w.linear(ff + "proj_up_gate_z", None, h, 2 * f, x.bias, every)
    else:
        w.linear(ff + "proj_up_gate", None, h, f, x.bias, every)
        w.linear(ff + "proj_up", None, h, f, x.bias, every)
    B.activation(w.label(f"{_P.mlp} silu(gate) x up", every), "encoder", tok, f, "silu", L, gated=True)
    w.linear(ff + "proj_down", None, f, h, x.bias, every)
    B.add(w.label("residual adds", every), "activation", "encoder", L, tok + (h,), tok + (h,), ew=n * h, extra_in=n * h)
    _norm(w, _P.norm, h, None, False, residual=False)
    if s.head == "lm":
        w.modules.append(Module(_P.lm_head, None, (("weight", (s.vocab, h)),), top=True))
        decoders.lm_head(B, _P.lm_head, _P.embed)
        B.activation("lm_head logits soft cap (tanh)", "encoder", tok, s.vocab, "tanh")
    return w.modules


def build(B: Builder) -> None:
    walk(B)


expected_tensors = walk_tensors(walk, _P.body)
# the paths the name regexes read, for each weight_mode
_NAMES = walk_names.walked(walk, **walk_names.LM, variant=XlstmVariant(2, 4, 4, False, True, 64, 16384, 2, 2))
_FUSED = walk_names.walked(walk, **walk_names.LM, variant=XlstmVariant(2, 4, 4, True, True, 64, 16384, 2, 2))


def state_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """xLSTMCache.rnn_state: per layer C [b, heads, qk_head_dim, v_head_dim], n [b, heads, qk_head_dim] and
    m [b, heads, 1] in the model's dtype, whatever s."""
    x = s.variant_as(XlstmVariant)
    if (x.cache_qk, x.cache_v) != (x.qk // x.heads, x.v // x.heads):
        raise NoAnalyticModel(f"xLSTMCache's head widths (qk {x.cache_qk}, v {x.cache_v}: rounded up to multiples of 64 "
                              f"before / num_heads) are not the layer's ({x.qk // x.heads}, {x.v // x.heads}): "
                              "transformers' forward with use_cache fails on them")
    per = s.layers * x.heads * (x.cache_qk * x.cache_v + x.cache_qk + 1) * ab
    return [(f"xLSTM state, b={b}, any s", per * b,
             f"xLSTMCache.rnn_state (no KV cache): per layer C [b, heads, {x.cache_qk}, {x.cache_v}], n [b, heads, "
             f"{x.cache_qk}], m [b, heads, 1] x {ab} B = {per:,} B/sequence, x b")]


# tiny sizes: hidden_size 128 (qk 64 = its multiple of 64, the width the cache rounds to; census_audit.py's too)
_SIZES = dict(hidden_size=128, num_hidden_layers=2, num_heads=4, vocab_size=99)
FUSED = dict(_SIZES, weight_mode="fused", use_bias=True, num_heads=2, qk_dim_factor=1.0, tie_word_embeddings=True,
             ffn_proj_factor=1.5, ffn_round_up_to_multiple_of=32)

FAMILY = Family(
    name="xlstm",
    model_types=("xlstm",),
    signature=walk_names.signature(_NAMES, f"{_P.attn}.multihead_norm", tf1=False),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    # the head rules (`lm_head`, or a name under `backbone.`); no tie (no _tied_weights_keys)
    **{**layout.decoder_lm(LAYOUT), "kv_cache": state_cache},
    gguf_architectures=(),   # llama.cpp has no xLSTM: no GGUF names
    samples=(
        Sample("xLSTMConfig", _SIZES, ("xLSTMForCausalLM", "xLSTMModel")),
        # fused weights, biases, two heads, another qk factor, tie_word_embeddings set (never tied); the base model
        # alone: xLSTMPreTrainedModel._init_weights fails on a fused model's gates off the meta device (a bias of
        # 2 x heads sliced to heads), so tests/test_xlstm.py runs the fused xLSTMForCausalLM from its meta build
        Sample("xLSTMConfig", FUSED, ("xLSTMModel",)),
        # chunk_size 8 and pieces of 12 tokens: the chunkwise kernel and the pieces run at the tests' 8 and 16 tokens
        Sample("xLSTMConfig", dict(_SIZES, num_heads=8, v_dim_factor=0.5, chunk_size=8, max_inference_chunksize=12),
               ("xLSTMForCausalLM",)),
    ),
)
