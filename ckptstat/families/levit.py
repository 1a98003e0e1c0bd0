"""LeViT (transformers modeling_levit.py: LevitModel, LevitForImageClassification,
LevitForImageClassificationWithTeacher): a conv stem (`patch_embeddings.embedding_layer_{1..4}`: four bias-free
kernel_size / stride / padding Conv2d, each with a BatchNorm2d, Hardswish between them) to hidden_sizes[0] channels,
then stages of layers `encoder.stages.{i}.layers.{j}` in one list (a residual one's under `.module`): depths[i] x
(attention, and an MLP where mlp_ratio[i] > 0), then (down_ops[i], "Subsample") an attention-subsample layer to the
next stage's width and its MLP. Every Linear is bias-free and followed by a BatchNorm1d (MLPLayerWithBN: `.linear`,
`.batch_norm`). Attention: one qkv Linear to heads x (2 key_dim + attention_ratio x key_dim), Q K^T with a learned bias
per head and offset (`attention_biases`, gathered: no matmul), softmax, P V, Hardswish, the projection. The subsample's
keys and values come from every token, its queries from every stride-th token of each row and column (no residual). The
classifiers read the tokens' mean: a BatchNorm1d and a Linear (`classifier`; with the teacher also
`classifier_distill`, the logits averaged; an Identity when num_labels is 0).

The bias tables index the config's grid (image_size // patch_size), and transformers adds them to the scores, so only
sides whose stem output is that grid run (223 and 224 px for LeViT-128S): the walk refuses other sides (UsageError).

The architecture is stated once, in `walk`: the op template and the expected tensors derive from it."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .framework import infer
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import signature, walked
from .framework.walk_vision import batchnorm, conv_strided, positive_lists

TEACHER = "imgcls+distillation"
STEM = 4   # LevitPatchEmbeddings' conv layers, to hidden_sizes[0] // 8, // 4, // 2, // 1
LAYER = "encoder.stages.{i}.layers.{j}"   # a residual layer's module under `.module`; a subsample's not


@dataclass(frozen=True)
class Down:
    """One attention-subsample layer (a down_ops entry): key_dim, heads, attention_ratio, the MLP's ratio, stride."""
    key_dim: int
    heads: int
    ratio: int
    mlp: int
    stride: int


@dataclass(frozen=True)
class LevitVariant(Variant):
    channels: int
    widths: tuple[int, ...]      # hidden_sizes
    depths: tuple[int, ...]
    heads: tuple[int, ...]
    key_dim: tuple[int, ...]
    ratio: tuple[int, ...]       # attention_ratio: the value width over key_dim
    mlp: tuple[int, ...]         # mlp_ratio
    down: tuple[Down, ...]       # after stage i, where there is one
    grid: int                    # image_size // patch_size: the bias tables' side
    kernel: int = 3
    stride: int = 2
    padding: int = 1


def _spec(common: dict[str, Any], v: LevitVariant, image: int) -> ArchSpec:
    return ArchSpec(layers=sum(v.depths), hidden=v.widths[-1], heads=v.heads[-1], kv_heads=v.heads[-1],
                    head_dim=v.key_dim[-1], intermediate=v.widths[-1] * v.mlp[-1], vocab=0, activation="hardswish",
                    norm="batchnorm", image_size=image, variant=v, **common)


def _side(c: Cfg, key: str) -> int:
    v = c.get(key, default=FROM_CLASS)   # an int or [height, width]
    v = v[0] if isinstance(v, (list, tuple)) and v else v
    if not isinstance(v, int) or v < 1:
        raise UsageError(f"{c.path}: config {key} = {v!r} is not a positive side")
    return v


def from_config(c: Cfg) -> ArchSpec:
    """The stages; down_ops as LevitConfig derives them (key_dim[0], hidden_sizes[i] // key_dim[0] heads, ratio 4, MLP
    2, stride 2) where the file has none; the trailing [""] LevitEncoder appends is no layer."""
    widths, depths, heads, kd, ratio = positive_lists(c, "hidden_sizes", "depths", "num_attention_heads", "key_dim",
                                                      "attention_ratio")
    mlp = c.get("mlp_ratio")   # 0: a stage without MLPs
    if not (isinstance(mlp, (list, tuple)) and len(mlp) == len(widths) and all(isinstance(x, int) and x >= 0 for x in mlp)):
        raise UsageError(f"{c.path}: config mlp_ratio = {mlp!r} is not one non-negative integer a stage")
    ops = c.get("down_ops", default=[["Subsample", kd[0], widths[i] // kd[0], 4, 2, 2] for i in range(2)])
    down = tuple(Down(*(int(x) for x in op[1:6])) for op in ops if op and op[0] == "Subsample")
    if len(down) > len(widths) - 1:
        raise UsageError(f"{c.path}: config down_ops has {len(down)} subsamples for {len(widths)} stages")
    image = _side(c, "image_size")
    v = LevitVariant(channels=c.int("num_channels", default=FROM_CLASS), widths=tuple(widths), depths=tuple(depths),
                     heads=tuple(heads), key_dim=tuple(kd), ratio=tuple(ratio), mlp=tuple(mlp), down=down,
                     grid=image // _side(c, "patch_size"), kernel=c.int("kernel_size", default=FROM_CLASS),
                     stride=c.int("stride", default=FROM_CLASS), padding=c.int("padding", default=FROM_CLASS))
    return _spec(c.common, v, image)


_MOD = re.compile(r"(?:^|\.)encoder\.stages\.(\d+)\.layers\.(\d+)(?:\.module)?\.(\w+?)(?:\.linear\.weight|)$")


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Each stage's layers from their modules' shapes: an attention's queries_keys_values, projection and bias table
    (heads, key_dim, ratio; the first one's table the grid), an MLP's linear_up, a subsample's queries and keys_values;
    the stem's kernel 3, stride 2, padding 1, a 16 px patch and every subsample's stride 2 assumed."""
    mods: dict[tuple[int, int], dict[str, tuple[int, ...]]] = {}
    for name, t in T.items():
        if m := _MOD.search(name):
            mods.setdefault((int(m.group(1)), int(m.group(2))), {})[m.group(3)] = t.shape
    stem = infer.shape(T, r"(^|\.)patch_embeddings\.embedding_layer_1\.convolution\.weight$", "the stem's first conv")
    stages = sorted({i for i, _ in mods})
    if stages != list(range(len(stages))) or not stages:
        raise UsageError("cannot infer the architecture from tensor names: no LeViT stages; pass --config")
    widths, depths, heads, kd, ratio, mlp, down, grid = [], [], [], [], [], [], [], 0
    for i in stages:
        layers = [mods[k] for k in sorted(k for k in mods if k[0] == i)]
        att = [m for m in layers if "queries_keys_values" in m]
        if not att:
            raise UsageError(f"cannot infer the architecture from tensor names: stage {i} has no attention; pass --config")
        a = att[0]
        h, vd = a["attention_biases"][0], a["projection"][1] // a["attention_biases"][0]
        k = (a["queries_keys_values"][0] // h - vd) // 2
        grid = grid or math.isqrt(a["attention_biases"][1])
        widths.append(a["projection"][0])
        depths.append(len(att))
        heads.append(h)
        kd.append(k)
        ratio.append(vd // k)
        sub = [j for j, m in enumerate(layers) if "keys_values" in m]
        ups = [m["linear_up"][0] // widths[-1] for m in layers[:sub[0] if sub else None] if "linear_up" in m]
        mlp.append(ups[0] if ups else 0)
        if sub:
            s = layers[sub[0]]
            sh = s["attention_biases"][0]
            sk = s["queries"][0] // sh
            after = layers[sub[0] + 1]["linear_up"][0] // s["projection"][0] if sub[0] + 1 < len(layers) else 0
            down.append(Down(sk, sh, s["projection"][1] // sh // sk, after, 2))
    v = LevitVariant(channels=stem[1], widths=tuple(widths), depths=tuple(depths), heads=tuple(heads), key_dim=tuple(kd),
                     ratio=tuple(ratio), mlp=tuple(mlp), down=tuple(down), grid=grid)
    notes = (f"no config: image {grid * 16}x{grid * 16} from the first bias table's {grid}x{grid} grid and a 16 px "
             "patch; the stem's 3x3 / 2 convs padded 1 and every subsample's stride 2",)
    cls = infer.find(T, r"(^|\.)classifier\.linear\.weight$")
    head = infer.has(T, r"^classifier_distill\.linear\.weight$")
    common = dict(common, num_labels=cls.shape[0] if cls is not None else 0,
                  assumptions=common.get("assumptions", ()) + notes)
    return _spec(dict(common, head=TEACHER) if head else common, v, grid * 16)


def _linear_bn(w: Recorder, path: str, n: int, fin: int, fout: int) -> None:
    """MLPLayerWithBN: a bias-free Linear and a BatchNorm1d (inference: scale and shift) over n tokens."""
    w.linear(f"{path}.linear", (w.B.b, n), fin, fout, False)
    w.norm(f"{path}.batch_norm", (w.B.b, n), fout, residual=False, kind="no_norm", note=" (BatchNorm1d)")


def _attention(w: Recorder, at: str, n_q: int, side: int, c: int, cout: int, h: int, kd: int, ratio: int,
               stride: int = 0) -> None:
    """LevitAttention (stride 0) or LevitAttentionSubsample (queries from every stride-th row and column) over side x side
    tokens of c, to cout; the bias table holds one entry a head per distinct offset, row and column apart."""
    B, n, vd = w.B, side * side, ratio * kd
    if stride:
        _linear_bn(w, f"{at}.keys_values", n, c, h * (kd + vd))
        _linear_bn(w, f"{at}.queries", n_q, c, h * kd)
        out = math.isqrt(n_q)
        offsets = len({abs(i * stride - j) for i in range(out) for j in range(side)}) ** 2
    else:
        _linear_bn(w, f"{at}.queries_keys_values", n, c, h * (2 * kd + vd))
        offsets = n
    w.params(f"{at}.attention_biases (gathered, added)", ((f"{at}.attention_biases", (h, offsets)),), (B.b, h, n_q, n),
             (B.b, h, n_q, n), ew=B.b * h * n_q * n, kind="attention")
    B.attention(w.label(at + " attention"), w.bucket, h, n_q, n, kd, 1, causal=False, v_dim=vd)
    B.activation(w.label(at + " hardswish"), w.bucket, (B.b, n_q), h * vd, "hardswish")
    _linear_bn(w, f"{at}.projection", n_q, h * vd, cout)


def _mlp(w: Recorder, at: str, n: int, c: int, f: int) -> None:
    """LevitMLPLayer (up, Hardswish, down, each Linear with its BatchNorm1d) and the residual add."""
    _linear_bn(w, f"{at}.linear_up", n, c, f)
    w.B.activation(w.label(at + " hardswish"), w.bucket, (w.B.b, n), f, "hardswish")
    _linear_bn(w, f"{at}.linear_down", n, f, c)
    _residual(w, at, n, c)


def _residual(w: Recorder, at: str, n: int, c: int) -> None:
    e = w.B.b * n * c
    w.B.add(w.label(at) + " + residual", "activation", w.bucket, 1, (w.B.b, n, c), (w.B.b, n, c), ew=e, extra_in=e)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes (LevitModel's and the classifiers'): writes its ops to B and records the modules."""
    s = B.s
    X = s.variant_as(LevitVariant)
    w = Recorder(B, "encoder")
    side, cin = s.image_size, X.channels
    for k in range(1, STEM + 1):
        at, cout = f"patch_embeddings.embedding_layer_{k}", X.widths[0] // 2 ** (STEM - k)
        side = conv_strided(w, f"{at}.convolution", w.label(f"{at}.convolution"), cin, cout, X.kernel, X.stride, side,
                            X.padding)
        batchnorm(w, f"{at}.batch_norm", w.label(f"{at}.batch_norm"), cout, side, act="hardswish" if k < STEM else None)
        cin = cout
    if side != X.grid:
        raise UsageError(f"image side {s.image_size}: the stem's {side}x{side} grid is not the {X.grid}x{X.grid} the "
                         "attention bias tables index (use the config's image_size)")
    for i, c in enumerate(X.widths):
        j, n = 0, side * side
        for _ in range(X.depths[i]):
            at = LAYER.format(i=i, j=j) + ".module"
            _attention(w, at, n, side, c, c, X.heads[i], X.key_dim[i], X.ratio[i])
            _residual(w, at, n, c)
            j += 1
            if X.mlp[i] > 0:
                _mlp(w, LAYER.format(i=i, j=j) + ".module", n, c, c * X.mlp[i])
                j += 1
        if i < len(X.down):
            d, cout = X.down[i], X.widths[i + 1]
            out = (side - 1) // d.stride + 1
            _attention(w, LAYER.format(i=i, j=j), out * out, side, c, cout, d.heads, d.key_dim, d.ratio, d.stride)
            side = out
            if d.mlp > 0:
                _mlp(w, LAYER.format(i=i, j=j + 1) + ".module", out * out, cout, cout * d.mlp)
    c, n = X.widths[-1], side * side
    B.add("mean over the tokens", "pool", "pooler", 1, (B.b, n, c), (B.b, c), ew=B.b * n * c)
    heads = ("classifier",) if s.head == "imgcls" else ("classifier", "classifier_distill") if s.head == TEACHER else ()
    for path in heads if s.num_labels else ():   # LevitClassificationLayer; an Identity when num_labels is 0
        w.record(f"{path}.batch_norm", (("weight", (c,)), ("bias", (c,))), top=True)
        B.add(f"{path}.batch_norm (BatchNorm1d)", "norm", "cls", 1, (B.b, c), (B.b, c), params=2 * c, ew=2 * B.b * c,
              weights_per_call=2 * c)
        w.linear(f"{path}.linear", (B.b,), c, s.num_labels, True, bucket="cls", top=True)
    if len(heads) == 2 and s.num_labels:
        B.add("logits (cls + distillation) / 2", "activation", "cls", 1, (B.b, s.num_labels), (B.b, s.num_labels),
              ew=2 * B.b * s.num_labels, extra_in=B.b * s.num_labels)
    return w


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """LevitModel's parameters (`levit.` inside the classifiers) and the classifiers'."""
    if s.head not in FAMILY.heads:
        return None
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" else "levit")


# the walk of a tiny two-stage model with its subsample: the paths of the signature
WALKED = walked(walk, "levit", image_size=16, variant=LevitVariant(
    channels=1, widths=(8, 8), depths=(1, 1), heads=(1, 1), key_dim=(2, 2), ratio=(1, 1), mlp=(1, 1),
    down=(Down(2, 1, 1, 1, 2),), grid=1))

_SIZES = dict(image_size=64, patch_size=16, hidden_sizes=[16, 32, 48], num_attention_heads=[1, 2, 3], depths=[2, 1, 1],
              key_dim=[8, 8, 8], mlp_ratio=[2, 2, 2], attention_ratio=[2, 2, 2], num_labels=5)
_MODELS = ("LevitModel", "LevitForImageClassification", "LevitForImageClassificationWithTeacher")

FAMILY = Family(
    name="levit",
    model_types=("levit",),
    signature=signature(WALKED, LAYER.format(i=0, j=0) + ".module.queries_keys_values"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls", TEACHER),
    head_rules=(HeadRule(r"^classifier_distill\.linear\.weight$", TEACHER),
                HeadRule(r"^classifier\.linear\.weight$", "imgcls")),
    main_input="pixel_values",
    samples=(
        Sample("LevitConfig", _SIZES, _MODELS),
        # another side (a 6 x 6 grid, subsampled to 3 and 2), no MLP in the first stage, a ratio-3 value
        Sample("LevitConfig", dict(_SIZES, image_size=96, mlp_ratio=[0, 2, 2], attention_ratio=[3, 2, 2]), _MODELS),
    ),
)
