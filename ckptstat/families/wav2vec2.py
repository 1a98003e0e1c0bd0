"""Wav2Vec2-shaped speech encoders read from raw waveforms: transformers' modeling_wav2vec2.py (Wav2Vec2Model,
Wav2Vec2ForCTC) and its copies modeling_hubert.py, modeling_unispeech.py, modeling_unispeech_sat.py and
modeling_data2vec_audio.py (a LayerNorm after every conv, its positional embedding a stack of plain convs) and
modeling_wavlm.py (a gated relative position bias: the first layer's rel_attn_embed table of num_buckets x heads,
and in every layer gru_rel_pos_linear, head_dim -> 8 on each head's slice of every frame, FlopCounterMode's addmm, and
gru_rel_pos_const; its attention runs through F.multi_head_attention_forward: the same q/k/v/out matmuls, QK^T as
a baddbmm with the bias, PV as a bmm), and modeling_sew.py (squeeze_factor: the positional conv strides by it, the
frames are average-pooled by it before post-LN layers and upsampled after them by encoder.upsample, Linear
h -> h x squeeze and gelu, padded back to the conv features' frames; a LayerNorm on the conv features, `layer_norm`,
and `feature_projection` only where conv_dim[-1] != hidden_size).

The forward over b x n raw samples (input_values; ArchSpec.seq_unit "samples": --seq counts samples, 16,000 a
second at 16 kHz):
- the feature encoder, conv_layers.i: Conv1d(conv_dim[i-1] -> conv_dim[i], kernel conv_kernel[i], stride
  conv_stride[i], no padding, conv_bias), gelu; feat_extract_norm "group": a GroupNorm (one group per channel) after
  the first conv only, "layer": a LayerNorm after every conv. Each conv turns L samples / frames into
  floor((L - k) / s) + 1 frames; the last conv's frames are the sequence the encoder runs over;
- the feature projection: LayerNorm(conv_dim[-1]) (HuBERT: only with feat_proj_layer_norm), Linear to hidden_size;
- the positional conv embedding: a grouped Conv1d (hidden -> hidden, kernel num_conv_pos_embeddings, padding k // 2,
  groups num_conv_pos_embedding_groups) under weight norm (torch's parametrizations.weight_norm, dim 2: the stored
  `parametrizations.weight.original0` [1, 1, k] (g) and `original1` [h, h / groups, k] (v); older files name them
  weight_g / weight_v), the frame an even kernel adds cut off, gelu, added to the frames; Data2VecAudio's:
  num_conv_pos_embeddings plain grouped convs of kernel conv_pos_kernel_size, each cut, LayerNorm without parameters,
  gelu;
- the encoder: post-LN layers and a LayerNorm before them, or (do_stable_layer_norm) pre-LN layers and the LayerNorm
  after them: the same parameters and matmuls, the norms elsewhere; each layer q/k/v/out projections with biases,
  eager attention over every frame pair, a LayerNorm, the feed-forward (intermediate_dense, hidden_act,
  output_dense), final_layer_norm;
- Wav2Vec2ForCTC: lm_head, Linear(hidden -> vocab_size) on every frame;
- the task heads on the last hidden state, or (use_weighted_layer_sum) on the sum of the L + 1 hidden states weighted by
  softmax(layer_weights) (SEW's: the pooled frames the layers run over, not the upsampled ones):
  *ForSequenceClassification: projector, Linear(hidden -> classifier_proj_size) on every frame, the mean over the
  frames (no attention mask), classifier, Linear(classifier_proj_size -> num_labels), on the mean;
  *ForAudioFrameClassification: classifier, Linear(hidden -> num_labels) on every frame;
  *ForXVector: projector, Linear(hidden -> tdnn_dim[0]), the TDNN layers (tdnn.i.kernel: a Linear(tdnn_dim[i-1] x
  tdnn_kernel[i] -> tdnn_dim[i]) whose weight runs as a Conv1d of dilation tdnn_dilation[i], no padding: n - d(k - 1)
  frames, relu), the mean and standard deviation over the frames concatenated, feature_extractor, Linear(2 x
  tdnn_dim[-1] -> xvector_output_dim), classifier, Linear(xvector_output_dim -> xvector_output_dim); the AM-softmax
  loss's objective.weight [xvector_output_dim, num_labels] is held, run only with labels;
- Wav2Vec2ForPreTraining (without mask_time_indices and negatives: no loss): project_hid, Linear(hidden ->
  proj_codevector_dim) on every frame; the Gumbel quantizer: weight_proj, Linear(conv_dim[-1] -> G x V) on the
  normed conv features (G num_codevector_groups, V num_codevectors_per_group), each group's argmax as a one-hot row
  times `codevectors` [1, G x V, codevector_dim / G] and summed (element-wise: no matmul); project_q,
  Linear(codevector_dim -> proj_codevector_dim). UniSpeech's and UniSpeech-SAT's pretraining heads differ: not described.
masked_spec_embed (h parameters) exists when mask_time_prob or mask_feature_prob > 0 (UniSpeechSat: always);
SpecAugment only runs in training. A convolution's FLOPs are what FlopCounterMode counts for aten.convolution:
2 x b x out_frames x c_out x (c_in / groups) x k (the positional conv over the n + 1 frames an even kernel gives before
the cut).
Not described (NoAnalyticModel, the meta path answers): the adapter (add_adapter), the attention adapters
(adapter_attn_dim), HuBERT's batch-normed positional conv (conv_pos_batch_norm).
Described once, as a walk (`walk`: framework/recorder.py's recorder and encoder.py's post-LN layer, each module recorded where its
op is written, the convs' weights beside their ops): the op template and the expected tensors both derive from it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from .framework import encoder, infer
from .framework.archspec import Variant
from .framework.base import (
    FROM_CLASS,
    ArchSpec,
    Cfg,
    Family,
    HeadRule,
    Sample,
    Shapes,
    Tensors,
    architectures,
    head_of,
)
from .framework.ops import Builder
from .framework.recorder import Recorder, Stack
from .framework.walk_names import layers, pattern, signature, walked

# a conv of the feature encoder; the positional convs of a stack of them (Data2VecAudio's)
CONV, POS_STACK = "feature_extractor.conv_layers.{bid}.conv", "encoder.pos_conv_embed.layers.{bid}.conv"
# the heads on the hidden states (task_head): a sequence's, a frame's, an x-vector's
TASK_HEADS = ("seqcls", "framecls", "xvector")
# a layer's modules in encoder.LayerNames' order
LAYER: encoder.LayerNames = (
    "attention.q_proj", "attention.k_proj", "attention.v_proj", "attention", "attention.out_proj", "layer_norm",
    "feed_forward.intermediate_dense", "feed_forward act", "feed_forward.output_dense", "final_layer_norm")


@dataclass(frozen=True)
class Quantizer:
    """Wav2Vec2ForPreTraining's Gumbel quantizer and projections."""
    groups: int                  # num_codevector_groups
    per_group: int               # num_codevectors_per_group
    dim: int                     # codevector_dim (each group's codevectors dim / groups wide)
    proj: int                    # proj_codevector_dim


@dataclass(frozen=True)
class FeatureEncoder(Variant):
    """The conv feature encoder, the feature projection and the positional conv of a wav2vec2-shaped model."""
    conv_dims: tuple[int, ...]
    conv_kernels: tuple[int, ...]
    conv_strides: tuple[int, ...]
    conv_bias: bool
    layer_norms: bool            # feat_extract_norm "layer": a LayerNorm after every conv; "group": one GroupNorm
    projection_norm: bool        # the feature projection's LayerNorm
    pos_kernel: int              # num_conv_pos_embeddings (Data2VecAudio: conv_pos_kernel_size)
    pos_groups: int              # num_conv_pos_embedding_groups
    # Data2VecAudio's positional embedding: this many plain grouped convs, each followed by a LayerNorm without
    # parameters and gelu (its num_conv_pos_embeddings); 0: wav2vec2's one weight-normed conv
    pos_stack: int
    stable_layer_norm: bool      # do_stable_layer_norm: pre-LN layers
    # WavLM's gated relative position bias: the first layer's rel_attn_embed rows (num_buckets; 0: no bias), and in
    # every layer gru_rel_pos_linear (head_dim -> 8 on each head's slice of every frame) and gru_rel_pos_const
    relative_buckets: int
    # SEW's squeeze_factor: the positional conv strides by it, the frames are average-pooled by it before the layers
    # and upsampled after them (encoder.upsample, Linear h -> h x squeeze, gelu, padded back); its conv features get a
    # LayerNorm at the top (`layer_norm`) and a projection (`feature_projection`) only where conv_dim[-1] != hidden;
    # 0: not SEW
    squeeze: int
    masked_spec_embed: bool
    body: str                    # the base model's attribute in the heads (wav2vec2, hubert, unispeech_sat...)
    # the task heads (seqcls, framecls, xvector): use_weighted_layer_sum (layer_weights, L + 1 of them); seqcls's
    # classifier_proj_size; xvector's TDNN layers (tdnn_dim, tdnn_kernel, tdnn_dilation each) and xvector_output_dim
    weighted_sum: bool = False
    projector: int = 0
    tdnn: tuple[tuple[int, int, int], ...] = ()
    xvector: int = 0
    quantizer: Quantizer | None = None   # the pretraining head's


def _ints(c: Cfg, key: str) -> tuple[int, ...]:
    """A conv stack list; missing: the class's list (not in config_defaults.json, which holds scalars), on the meta path."""
    v = c.get(key, default=None)
    if v is None:
        raise NoAnalyticModel(f"{c.path}: config has no {key}; its config class's default is a list the template "
                              "does not read")
    if not (isinstance(v, (list, tuple)) and v
            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v)):
        raise UsageError(f"{c.path}: config {key} must be a list of positive integers")
    return tuple(v)


def _heads(c: Cfg) -> dict[str, Any]:
    """FeatureEncoder's task-head fields of the config's head."""
    if c.head == "pretraining":
        if c.model_type != "wav2vec2":
            raise NoAnalyticModel(f"{c.path}: the {c.model_type} op template does not describe its pretraining head "
                                  "(only Wav2Vec2ForPreTraining's)")
        g, dim = c.int("num_codevector_groups", default=FROM_CLASS), c.int("codevector_dim", default=FROM_CLASS)
        if not g or dim % g:
            raise UsageError(f"{c.path}: config codevector_dim {dim} is not a multiple of num_codevector_groups {g}")
        return {"quantizer": Quantizer(g, c.int("num_codevectors_per_group", default=FROM_CLASS), dim,
                                       c.int("proj_codevector_dim", default=FROM_CLASS))}
    if c.head not in TASK_HEADS:
        return {}
    out: dict[str, Any] = {"weighted_sum": bool(c.get("use_weighted_layer_sum", default=FROM_CLASS))}
    if c.head == "seqcls":
        out["projector"] = c.int("classifier_proj_size", default=FROM_CLASS)
    elif c.head == "xvector":
        dims, kernels, dilations = _ints(c, "tdnn_dim"), _ints(c, "tdnn_kernel"), _ints(c, "tdnn_dilation")
        if not len(dims) == len(kernels) == len(dilations):
            raise UsageError(f"{c.path}: config tdnn_dim, tdnn_kernel and tdnn_dilation differ in length")
        tdnn = tuple(zip(dims, kernels, dilations))
        out.update(tdnn=tdnn, projector=tdnn[0][0], xvector=c.int("xvector_output_dim", default=FROM_CLASS))
    return out


def from_config(c: Cfg) -> ArchSpec:
    other = [a for a in architectures(c.cfg) if head_of((a,), "")[1] is None]
    if other:   # a class no head suffix names
        raise NoAnalyticModel(f"{c.path}: the {c.model_type} op template describes the base model and the "
                              f"{', '.join(FAMILY.heads[1:])} heads, not {other[0]}")
    for key, off in (("add_adapter", False), ("adapter_attn_dim", None), ("conv_pos_batch_norm", False)):
        if c.get(key, default=off) not in (off, None):
            raise NoAnalyticModel(f"{c.path}: {key} = {c.get(key)!r} adds modules the {c.model_type} template "
                                  "does not describe")
    dims, kernels, strides = _ints(c, "conv_dim"), _ints(c, "conv_kernel"), _ints(c, "conv_stride")
    if not len(dims) == len(kernels) == len(strides):
        raise UsageError(f"{c.path}: config conv_dim, conv_kernel and conv_stride differ in length")
    d2v = c.model_type == "data2vec-audio"   # a LayerNorm after every conv, a stack of positional convs, post-LN
    sew = c.model_type == "sew"               # squeeze_factor; post-LN
    norm = "layer" if d2v else c.get("feat_extract_norm", default=FROM_CLASS)
    if norm not in ("group", "layer"):
        raise UsageError(f"{c.path}: config feat_extract_norm = {norm!r} is not group or layer")
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    groups = c.int("num_conv_pos_embedding_groups")
    if h % a or h % groups:
        raise UsageError(f"{c.path}: hidden_size {h} is not a multiple of num_attention_heads ({a}) and "
                         f"num_conv_pos_embedding_groups ({groups})")
    # UniSpeechSatModel holds masked_spec_embed whatever the probabilities; the others only where one is > 0
    masked = c.model_type == "unispeech-sat" or any(float(c.get(k, default=FROM_CLASS)) > 0
                                                    for k in ("mask_time_prob", "mask_feature_prob"))
    v = FeatureEncoder(conv_dims=dims, conv_kernels=kernels, conv_strides=strides,
                       conv_bias=bool(c.get("conv_bias", default=FROM_CLASS)), layer_norms=norm == "layer",
                       # HuBERT's switch; the other classes always have the norm
                       projection_norm=not sew and bool(c.get("feat_proj_layer_norm", default=True)),
                       pos_kernel=c.int("conv_pos_kernel_size" if d2v else "num_conv_pos_embeddings"), pos_groups=groups,
                       pos_stack=c.int("num_conv_pos_embeddings") if d2v else 0,
                       stable_layer_norm=not (d2v or sew) and bool(c.get("do_stable_layer_norm", default=FROM_CLASS)),
                       squeeze=c.int("squeeze_factor", default=FROM_CLASS) if sew else 0,
                       relative_buckets=c.int("num_buckets") if c.model_type == "wavlm" else 0,
                       masked_spec_embed=masked,
                       body=c.model_type.replace("-", "_"), **_heads(c))
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    activation=str(c.get("hidden_act", default=FROM_CLASS)), tied_embeddings=False, seq_unit="samples",
                    variant=v, **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Widths and kernels from the conv weights; the strides are not in the weights: wav2vec2's (5, 2, 2, ...)
    assumed when the kernels are wav2vec2's (10, 3, 3, 3, 3, 2, 2), else config.json is needed."""
    W = WALKED
    convs = []
    for i in range(infer.count_layers(T, layers(W, CONV))):
        convs.append(infer.shape(T, pattern(W, CONV, layer=str(i)), f"conv layer {i}"))
    kernels = tuple(w[2] for w in convs)
    if kernels != (10, 3, 3, 3, 3, 2, 2):
        raise UsageError(f"cannot infer the conv strides of kernels {kernels} from tensor names; pass --config")
    up = infer.find(T, pattern(WALKED_SEW, "encoder.upsample.projection"))   # SEW
    h = infer.shape(T, pattern(W, LAYER[0]), "the first layer's q_proj")[0]
    # its weight-normed weight as torch's parametrizations, or the older weight_norm (weight_v), or a plain weight;
    # Data2VecAudio's stack of plain convs
    pos = infer.shape(T, pattern(W, "encoder.pos_conv_embed.conv", r"(parametrizations\.weight\.original1|weight_v|weight)")
                      + "|" + pattern(WALKED_STACK, POS_STACK), "the positional conv")
    f = infer.shape(T, pattern(W, LAYER[6]), "the feed-forward")[0]
    lm = infer.find(T, pattern(W, "lm_head"))
    const = infer.find(T, pattern(W, "attention.gru_rel_pos_const"))   # WavLM's gate holds one value a head
    a, note = (const.shape[1], "") if const is not None and len(const.shape) == 4 else infer.heads_for(h, 64)
    body = (common["model_type"] or "wav2vec2").replace("-", "_")
    heads, labels, notes = _heads_from(T, common["head"])
    v = FeatureEncoder(conv_dims=tuple(w[0] for w in convs), conv_kernels=kernels, conv_strides=(5, 2, 2, 2, 2, 2, 2),
                       conv_bias=infer.has(T, pattern(W, CONV, "bias", layer="0")),
                       layer_norms=infer.has(T, pattern(W, "feature_extractor.conv_layers.1.layer_norm")),
                       projection_norm=infer.has(T, pattern(W, "feature_projection.layer_norm")), pos_kernel=pos[2],
                       pos_groups=h // pos[1], stable_layer_norm=False,
                       pos_stack=infer.count_layers(T, layers(WALKED_STACK, POS_STACK)),
                       relative_buckets=rel.shape[0] if (rel := infer.find(T, pattern(W, "attention.rel_attn_embed")))
                       is not None else 0,
                       masked_spec_embed=infer.has(T, pattern(W, "masked_spec_embed")), body=body,
                       squeeze=up.shape[0] // h if up is not None else 0, **heads)
    return ArchSpec(layers=infer.count_layers(T, layers(W, LAYER[0])), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=f, vocab=lm.shape[0] if lm is not None else 0, tied_embeddings=False, seq_unit="samples",
                    num_labels=labels, variant=v,
                    assumptions=tuple(x for x in (note, "no config: wav2vec2's conv strides (5, 2, 2, 2, 2, 2, 2), post-LN "
                                                  "layers (do_stable_layer_norm reorders norms only), gelu", *notes) if x),
                    **common)


def _heads_from(T: Tensors, head: str) -> tuple[dict[str, Any], int, tuple[str, ...]]:
    """FeatureEncoder's task-head fields from the head's weights, the classes (the classifier's rows; an x-vector's:
    its loss weight's columns) and the guesses made (the TDNN dilations)."""
    if head == "pretraining":
        cv = infer.shape(T, pattern(WALKED_PT, "quantizer.codevectors", under="^"), "the codevectors")
        proj, dim = infer.shape(T, pattern(WALKED_PT, "project_q", under="^"), "project_q")
        return {"quantizer": Quantizer(dim // cv[2], cv[1] // (dim // cv[2]), dim, proj)}, 2, ()
    if head not in TASK_HEADS:
        return {}, 2, ()
    out: dict[str, Any] = {"weighted_sum": infer.has(T, pattern(WALKED_XV, "layer_weights", under="^"))}
    if head == "framecls":
        return out, infer.num_labels(T), ()
    width = out["projector"] = infer.shape(T, pattern(WALKED_XV, "projector", under="^"), "the projector")[0]
    if head == "seqcls":
        return out, infer.num_labels(T), ()
    tdnn = []
    for i in range(infer.count_layers(T, layers(WALKED_XV, "tdnn.{bid}.kernel", under="^"))):
        cout, fin = infer.shape(T, pattern(WALKED_XV, "tdnn.{bid}.kernel", layer=str(i), under="^"), f"TDNN layer {i}")
        tdnn.append((cout, fin // width, 1))
        width = cout
    out.update(tdnn=tuple(tdnn), xvector=infer.shape(T, pattern(WALKED_XV, "feature_extractor", under="^"),
                                                      "the x-vector projection")[0])
    labels = infer.shape(T, pattern(WALKED_XV, "objective.weight", under="^"), "the loss weight")[1]
    return out, labels, ("no config: the TDNN layers' dilations (tdnn_dilation) are not in the weights, 1 assumed (their "
                 "FLOPs depend on it); pass --config",)


def min_samples(s: ArchSpec) -> int:
    """The conv stack's receptive field: the fewest raw samples that leave one frame (Conv1d refuses fewer); SEW's
    pooling needs squeeze_factor frames; an x-vector's TDNN layers 1 + d(k - 1) each (of SEW's pooled frames where the
    head reads the weighted sum of the hidden states)."""
    X = s.variant_as(FeatureEncoder)
    tdnn = 1 + sum(d * (k - 1) for _, k, d in X.tdnn)
    n = (X.squeeze * tdnn if X.weighted_sum else max(X.squeeze, tdnn)) if X.squeeze else tdnn
    for k, st in zip(reversed(X.conv_kernels), reversed(X.conv_strides)):
        n = (n - 1) * st + k
    return n


def walk(B: Builder) -> Recorder:
    """The forward over B.seq raw samples: writes its ops to B and records the modules it meets (recorder.Recorder)."""
    s, b, r = B.s, B.b, Recorder(B)
    X = s.variant_as(FeatureEncoder)
    h, L = s.hidden, s.layers
    n, cin = B.seq, 1
    for i, (cout, k, st) in enumerate(zip(X.conv_dims, X.conv_kernels, X.conv_strides)):
        out = max((n - k) // st + 1, 0)   # 0: fewer samples than the receptive field (min_samples; check_seq refuses)
        per = cout * cin * k + (cout if X.conv_bias else 0)
        m = f"feature_extractor.conv_layers.{i}"
        r.record(CONV, (("weight", (cout, cin, k)),) + ((("bias", (cout,)),) if X.conv_bias else ()), layers=(i,))
        B.add(f"{m}.conv ({k}/{st})", "conv", "embedding", 1, (b, cin, n), (b, cout, out), params=per,
              macs=b * out * cout * cin * k, ew=b * out * cout if X.conv_bias else 0, weights_per_call=per)
        if X.layer_norms or i == 0:   # a GroupNorm of one group a channel: a LayerNorm's parameters and cost
            r.norm(f"{m}.layer_norm", (b, out), cout, residual=False, bucket="embedding",
                   label=f"{m}.layer_norm" + ("" if X.layer_norms else " (GroupNorm)"))
        B.activation(f"{m} act", "embedding", (b, out), cout, "gelu")
        n, cin = out, cout
    r.tok = tok = (b, n)   # the conv features' frames
    if X.squeeze:
        r.norm("layer_norm", tok, cin, residual=False, bucket="embedding")
        if cin != h:
            r.linear("feature_projection", tok, cin, h, True, bucket="embedding")
    else:
        if X.projection_norm:
            r.norm("feature_projection.layer_norm", tok, cin, residual=False, bucket="embedding")
        r.linear("feature_projection.projection", tok, cin, h, True, bucket="embedding")
    if X.masked_spec_embed:
        r.record("masked_spec_embed", (("", (h,)),))
        B.add("masked_spec_embed (SpecAugment, training only)", "embedding", "embedding", 1, (b, n, h), (b, n, h), params=h)
    k, g = X.pos_kernel, X.pos_groups
    sq = X.squeeze or 1
    conv_out = (n + 2 * (k // 2) - k) // sq + 1   # an even kernel's extra frame, cut after the conv
    # the frames the layers run over: SEW's pooled ones, as many as both the pool and the cut conv give
    frames = min(conv_out - (1 - k % 2), n // sq) if X.squeeze else n
    calls = X.pos_stack or 1
    per = h * (h // g) * k + h + (0 if X.pos_stack else k)   # weight (v), bias; weight norm's g over dim 2
    if X.pos_stack:
        pos = Stack(f"encoder.pos_conv_embed.layers[{calls}]", "encoder.pos_conv_embed.layers.{bid}", calls, calls)
        r.record("conv", (("weight", (h, h // g, k)), ("bias", (h,))), pos)
    else:   # torch's parametrizations.weight_norm over dim 2: g [1, 1, k], v
        r.record("encoder.pos_conv_embed.conv", (("bias", (h,)), ("parametrizations.weight.original0", (1, 1, k)),
                                                 ("parametrizations.weight.original1", (h, h // g, k))))
    m = f"encoder.pos_conv_embed.layers[{calls}].conv" if X.pos_stack else "encoder.pos_conv_embed.conv (weight norm)"
    B.add(f"{m} ({g} groups)", "conv", "embedding", calls, (b, h, n), (b, h, n), params=per * calls,
          macs=b * conv_out * h * (h // g) * k, ew=b * n * h, weights_per_call=per)
    if X.pos_stack:
        B.norm(f"encoder.pos_conv_embed.layers[{calls}].layer_norm (no parameters)", "embedding", tok, h, calls, 0,
               residual=False, kind="layernorm")
    B.activation("encoder.pos_conv_embed act (+residual)", "embedding", tok, h, "gelu", calls)
    r.norm("encoder.layer_norm", tok, h, residual=False,
           label="encoder.layer_norm" + (" (after the layers)" if X.stable_layer_norm else ""))
    if X.squeeze:
        B.add(f"encoder.pool (average, {sq})", "pool", "encoder", 1, (b, h, n), (b, h, frames), ew=b * h * n)
    B.seq = frames   # the layers run over the frames
    n_all, n = n, frames
    r.tok = (b, n)
    layers = Stack(f"encoder.layers[{L}]", "encoder.layers.{bid}", L, L)
    if X.relative_buckets:   # WavLM: the first layer's bias table, each layer's gate over it
        a = s.heads
        r.record("encoder.layers.0.attention.rel_attn_embed", (("weight", (X.relative_buckets, a)),))
        B.embedding("encoder.layers.0.attention.rel_attn_embed (relative position bias)", "encoder", X.relative_buckets,
                    a, n * n)
        r.linear("attention.gru_rel_pos_linear", (b, a, n), s.head_dim, 8, True, layers)
        r.record("attention.gru_rel_pos_const", (("", (1, a, 1, 1)),), layers)
        B.add(layers.name("attention.gru_rel_pos_const (gate x bias)"), "activation", "encoder", L, (b, a, n, n),
              (b, a, n, n), params=a * L, ew=b * a * n * n, weights_per_call=a)
    encoder.stack_layers(r, layers, LAYER)
    if X.squeeze:   # back to the conv features' frames (padded where the pooling dropped some)
        r.linear("encoder.upsample.projection", r.tok, h, h * sq, True)
        B.activation("encoder.upsample act", "encoder", (b, n), h * sq, "gelu")
    if s.head == "ctc":
        r.linear("lm_head", (b, n_all), h, s.vocab, True, bucket="cls", top=True)
    elif s.head in TASK_HEADS:   # SEW's hidden states are the pooled frames; its last one is upsampled
        task_head(r, X, n if X.weighted_sum else n_all)
    elif s.head == "pretraining" and X.quantizer is not None:
        Q, codes = X.quantizer, X.quantizer.groups * X.quantizer.per_group
        book = codes * Q.dim // Q.groups
        r.linear("project_hid", (b, n_all), h, Q.proj, True, bucket="cls", top=True)
        r.linear("quantizer.weight_proj", (b, n_all), X.conv_dims[-1], codes, True, bucket="cls", top=True)
        r.record("quantizer.codevectors", (("", (1, codes, Q.dim // Q.groups)),), top=True)
        B.add("quantizer.codevectors (each group's argmax code: one-hot x codebook, summed)", "embedding", "cls", 1,
              (b, n_all, codes), (b, n_all, Q.dim), params=book, ew=2 * b * n_all * book, weights_per_call=book)
        r.linear("project_q", (b, n_all), Q.dim, Q.proj, True, bucket="cls", top=True)
    return r


def task_head(r: Recorder, X: FeatureEncoder, n: int) -> None:
    """A sequence, frame or x-vector head over the n frames of the last hidden state or the weighted sum of them all."""
    s, B, b, h = r.s, r.B, r.B.b, r.s.hidden
    if X.weighted_sum:
        r.record("layer_weights", (("", (s.layers + 1,)),), top=True)
        B.add(f"layer_weights (softmax; the {s.layers + 1} hidden states weighted and summed)", "activation", "cls", 1,
              (b, s.layers + 1, n, h), (b, n, h), params=s.layers + 1, ew=2 * b * (s.layers + 1) * n * h,
              weights_per_call=s.layers + 1)
    if s.head == "framecls":
        r.linear("classifier", (b, n), h, s.num_labels, True, bucket="cls", top=True)
        return
    r.linear("projector", (b, n), h, X.projector, True, bucket="cls", top=True)
    width = X.projector
    for i, (cout, k, d) in enumerate(X.tdnn):   # x-vector: Linear weights run as dilated convs
        out = max(n - d * (k - 1), 0)
        r.record("tdnn.{bid}.kernel", (("weight", (cout, width * k)), ("bias", (cout,))), top=True, layers=(i,))
        B.add(f"tdnn.{i}.kernel (conv {k}, dilation {d})", "conv", "cls", 1, (b, width, n), (b, cout, out),
              params=cout * width * k + cout, macs=b * out * cout * width * k, ew=b * out * cout,
              weights_per_call=cout * width * k + cout)
        B.activation(f"tdnn.{i} act", "cls", (b, out), cout, "relu")
        n, width = out, cout
    pooled = 2 * width if X.tdnn else width
    B.add("mean" + (" and std" if X.tdnn else "") + " over the frames", "pool", "cls", 1, (b, n, width), (b, pooled),
          ew=b * n * width * (3 if X.tdnn else 1))
    if X.tdnn:
        r.linear("feature_extractor", (b,), pooled, X.xvector, True, bucket="cls", top=True)
        r.linear("classifier", (b,), X.xvector, X.xvector, True, bucket="cls", top=True)
        r.record("objective.weight", (("", (X.xvector, s.num_labels)),), top=True)
        B.add("objective.weight (AM-softmax loss: held, run only with labels)", "embedding", "cls", 0, (b,), (b,),
              params=X.xvector * s.num_labels)
    else:
        r.linear("classifier", (b,), X.projector, s.num_labels, True, bucket="cls", top=True)


def build(B: Builder) -> None:
    walk(B)


def _walked(**fields: Any) -> Recorder:
    """The walk of a tiny Wav2Vec2ForCTC of two biased convs with a LayerNorm each, its feature projection's LayerNorm,
    masked_spec_embed and WavLM's gated relative bias, and `fields`."""
    v = FeatureEncoder(conv_dims=(1, 1), conv_kernels=(1, 1), conv_strides=(1, 1), conv_bias=True, layer_norms=True,
                       projection_norm=True, pos_kernel=1, pos_groups=1, pos_stack=0, stable_layer_norm=False,
                       relative_buckets=1, squeeze=0, masked_spec_embed=True, body="wav2vec2")
    return walked(walk, "wav2vec2", head="ctc", variant=replace(v, **fields))


# the walks of tiny models (_walked; Data2VecAudio's stack of positional convs; SEW's squeeze): the paths of the name
# signature and from_tensors' look-ups
WALKED, WALKED_STACK, WALKED_SEW = _walked(), _walked(pos_stack=1), _walked(squeeze=1)
# an x-vector head's (a weighted sum, one TDNN layer): the task heads' paths
WALKED_XV = walked(walk, "wav2vec2", head="xvector", variant=replace(
    WALKED.s.variant_as(FeatureEncoder), weighted_sum=True, projector=1, tdnn=((1, 1, 1),), xvector=1))
WALKED_PT = walked(walk, "wav2vec2", head="pretraining", variant=replace(WALKED.s.variant_as(FeatureEncoder),
                                                                          quantizer=Quantizer(1, 1, 1, 1)))


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """The walk's modules, the base model's under its attribute (FeatureEncoder.body) in a head's file."""
    if s.head not in FAMILY.heads:
        return None
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" else s.variant_as(FeatureEncoder).body)


# wav2vec2's kernels and strides (from_tensors can assume them), narrow channels
_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=21,
              conv_dim=(8, 8, 12, 12, 16, 16, 20), conv_kernel=(10, 3, 3, 3, 3, 2, 2), conv_stride=(5, 2, 2, 2, 2, 2, 2),
              num_conv_pos_embeddings=6, num_conv_pos_embedding_groups=4)
# three convs of another shape, layer norms after every conv, conv biases, pre-LN layers, an odd positional kernel,
# no masked_spec_embed: the strides are config-only (from_tensors assumes wav2vec2's)
_ODD = dict(_SIZES, conv_dim=(8, 12, 16), conv_kernel=(9, 4, 2), conv_stride=(4, 3, 2), feat_extract_norm="layer",
            conv_bias=True, do_stable_layer_norm=True, num_conv_pos_embeddings=5, num_conv_pos_embedding_groups=2,
            mask_time_prob=0.0)
# the task heads' sizes: an x-vector's three TDNN layers, one dilated
_HEADS = dict(classifier_proj_size=10, num_labels=3, tdnn_dim=(8, 8, 12), tdnn_kernel=(5, 3, 1), tdnn_dilation=(1, 2, 1),
              xvector_output_dim=10)

FAMILY = Family(
    name="wav2vec2",
    model_types=("wav2vec2", "hubert", "unispeech", "unispeech-sat", "data2vec-audio", "wavlm", "sew"),
    signature=signature(WALKED, CONV),
    # the same feature encoder under other encoders, not described: SEW-D's DeBERTa layers, the Conformer's conv modules
    signature_without=r"(^|[./])(encoder[./]encoder|conv_module)[./]",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "ctc", *TASK_HEADS, "pretraining"),
    # an x-vector's TDNN layers, then a projector (seqcls), then a classifier alone (a frame classifier)
    head_rules=(HeadRule(r"^lm_head\.weight$", "ctc"),
                HeadRule(pattern(WALKED_XV, "tdnn.{bid}.kernel", under="^"), "xvector"),
                HeadRule(pattern(WALKED_XV, "projector", under="^"), "seqcls"),
                HeadRule(pattern(WALKED_XV, "classifier", under="^"), "framecls"),
                HeadRule(pattern(WALKED_PT, "quantizer.codevectors", under="^"), "pretraining")),
    main_input="input_values",
    min_seq=min_samples,
    samples=(
        Sample("Wav2Vec2Config", _SIZES, ("Wav2Vec2Model", "Wav2Vec2ForCTC")),
        Sample("Wav2Vec2Config", _ODD, ("Wav2Vec2ForCTC",), infer=False),
        Sample("HubertConfig", _SIZES, ("HubertModel", "HubertForCTC")),
        Sample("HubertConfig", dict(_SIZES, feat_proj_layer_norm=False), ("HubertForCTC",), infer=False),
        Sample("UniSpeechConfig", _SIZES, ("UniSpeechForCTC",)),
        Sample("UniSpeechSatConfig", _ODD, ("UniSpeechSatForCTC",), infer=False),
        Sample("WavLMConfig", dict(_SIZES, num_buckets=24), ("WavLMModel", "WavLMForCTC")),
        Sample("WavLMConfig", dict(_ODD, num_buckets=16, max_bucket_distance=40), ("WavLMForCTC",), infer=False),
        Sample("SEWConfig", _SIZES, ("SEWModel", "SEWForCTC")),
        # conv_dim[-1] == hidden: no feature_projection; an odd positional kernel; squeeze 3
        Sample("SEWConfig", dict(_SIZES, conv_dim=(8, 8, 12, 12, 16, 16, 32), squeeze_factor=3, num_conv_pos_embeddings=5,
                                 feat_extract_norm="layer"), ("SEWForCTC",)),
        # three positional convs of an odd kernel; an even one
        Sample("Data2VecAudioConfig", dict(_SIZES, num_conv_pos_embeddings=3, conv_pos_kernel_size=7),
               ("Data2VecAudioModel", "Data2VecAudioForCTC")),
        Sample("Data2VecAudioConfig", dict(_SIZES, num_conv_pos_embeddings=2, conv_pos_kernel_size=6, mask_time_prob=0.0),
               ("Data2VecAudioForCTC",)),
        # the task heads, on the last hidden state and on the weighted sum of them all (SEW's: the pooled frames)
        Sample("Wav2Vec2Config", dict(_SIZES, **_HEADS), ("Wav2Vec2ForSequenceClassification",
                                                           "Wav2Vec2ForAudioFrameClassification", "Wav2Vec2ForXVector")),
        Sample("Wav2Vec2Config", dict(_SIZES, num_codevector_groups=2, num_codevectors_per_group=5, codevector_dim=12,
                                      proj_codevector_dim=7), ("Wav2Vec2ForPreTraining",),
               device="cpu"),   # the quantizer's one-hot scatter cannot run on meta
        Sample("HubertConfig", dict(_SIZES, **_HEADS, use_weighted_layer_sum=True), ("HubertForSequenceClassification",)),
        Sample("UniSpeechConfig", dict(_SIZES, **_HEADS), ("UniSpeechForSequenceClassification",)),
        Sample("UniSpeechSatConfig", dict(_ODD, **_HEADS, use_weighted_layer_sum=True),
               ("UniSpeechSatForSequenceClassification", "UniSpeechSatForAudioFrameClassification",
                "UniSpeechSatForXVector"), infer=False),
        Sample("WavLMConfig", dict(_SIZES, **_HEADS, num_buckets=24, use_weighted_layer_sum=True),
               ("WavLMForSequenceClassification", "WavLMForAudioFrameClassification", "WavLMForXVector")),
        Sample("SEWConfig", dict(_SIZES, **_HEADS), ("SEWForSequenceClassification",)),
        Sample("SEWConfig", dict(_SIZES, **_HEADS, squeeze_factor=3, use_weighted_layer_sum=True),
               ("SEWForSequenceClassification",)),
        Sample("Data2VecAudioConfig", dict(_SIZES, **_HEADS, num_conv_pos_embeddings=3, conv_pos_kernel_size=7),
               ("Data2VecAudioForSequenceClassification", "Data2VecAudioForAudioFrameClassification",
                "Data2VecAudioForXVector")),
    ),
)
