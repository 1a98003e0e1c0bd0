"""PoolFormer (transformers modeling_poolformer.py: PoolFormerModel, PoolFormerForImageClassification): num_encoder_blocks
stages, each a biased patch embedding Conv2d (`encoder.patch_embeddings.{i}.projection`: patch_sizes[i], strides[i],
padding[i]) and depths[i] blocks `encoder.block.{i}.{j}`: a GroupNorm of one group (`before_norm`, weight and bias [C]),
the token mixer (a 3x3 average pool, stride 1, minus its input: no parameters), `layer_scale_1` [C] (use_layer_scale),
the residual; `after_norm`, the MLP as 1x1 convs (`output.conv1` to int(C x mlp_ratio), the activation, `output.conv2`),
`layer_scale_2`, the residual. PoolFormerModel has no final norm; the classifier's own `norm` (a GroupNorm), the mean over
the map and `classifier` (an Identity when num_labels is 0).

FLOPs are FlopCounterMode's: the convs' out elements x cin x k x k MACs; the norms, the pool and the scales element-wise.
The side analysed is ArchSpec.image_size (--image-size; default 224: the config has no image size).

The architecture is stated once, in `walk` (framework/recorder.py's Recorder, framework/walk_vision.py's convs): the op
template and the expected tensors derive from it."""
from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .framework import infer
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import numbered, signature, walked
from .framework.walk_pyramid import per_stage
from .framework.walk_vision import conv_strided, positive_lists

DEFAULT_IMAGE = 224
_STRIDES, _PADDING = (4, 2, 2, 2), (2, 1, 1, 1)   # the config's defaults (every released PoolFormer's)


@dataclass(frozen=True)
class PoolFormerVariant(Variant):
    channels: int
    widths: tuple[int, ...]    # hidden_sizes
    depths: tuple[int, ...]
    mlp: tuple[int, ...]       # each stage's int(hidden_size x mlp_ratio)
    patches: tuple[int, ...]   # patch_sizes
    strides: tuple[int, ...]
    padding: tuple[int, ...]
    pool: int                  # pool_size
    layer_scale: bool          # use_layer_scale


def _spec(common: dict[str, Any], v: PoolFormerVariant, act: str) -> ArchSpec:
    return ArchSpec(layers=sum(v.depths), hidden=v.widths[-1], heads=0, kv_heads=0, head_dim=0, intermediate=v.mlp[-1],
                    vocab=0, activation=act, norm="layernorm", image_size=DEFAULT_IMAGE, variant=v, **common)


def from_config(c: Cfg) -> ArchSpec:
    widths, depths, patches, strides = positive_lists(c, "hidden_sizes", "depths", "patch_sizes", "strides")
    padding = c.get("padding", default=FROM_CLASS)
    if c.int("num_encoder_blocks", default=FROM_CLASS) != len(widths) or len(padding) != len(widths):
        raise UsageError(f"{c.path}: config num_encoder_blocks / padding disagree with hidden_sizes")
    ratio = float(c.get("mlp_ratio", default=FROM_CLASS))
    v = PoolFormerVariant(channels=c.int("num_channels", default=FROM_CLASS), widths=tuple(widths), depths=tuple(depths),
                          mlp=tuple(int(w * ratio) for w in widths), patches=tuple(patches), strides=tuple(strides),
                          padding=tuple(int(p) for p in padding), pool=c.int("pool_size", default=FROM_CLASS),
                          layer_scale=bool(c.get("use_layer_scale", default=FROM_CLASS)))
    return _spec(c.common, v, str(c.get("hidden_act", default=FROM_CLASS)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Widths, kernels, MLP widths and depths from the names and shapes; strides, padding, the pool and gelu assumed."""
    W = WALKED
    embed = per_stage(T, numbered(W, "projection"))
    # numbered reads conv1's trailing digit as a number (conv2 would match too): pinned back to conv1
    mlp = per_stage(T, numbered(W, "output.conv1").replace(r"conv(\d+)", "conv1"))
    stages = sorted(mlp)
    if not stages or any(i not in embed or i >= len(_STRIDES) for i in stages):
        raise UsageError("cannot infer the architecture from tensor names: a stage without its patch embedding; "
                         "pass --config")
    v = PoolFormerVariant(channels=embed[stages[0]][1][1], widths=tuple(embed[i][1][0] for i in stages),
                          depths=tuple(mlp[i][0] for i in stages), mlp=tuple(mlp[i][1][0] for i in stages),
                          patches=tuple(embed[i][1][2] for i in stages), strides=_STRIDES[:len(stages)],
                          padding=_PADDING[:len(stages)], pool=3,
                          layer_scale=infer.has(T, r"(^|\.)block\.\d+\.\d+\.layer_scale_1$"))
    notes = (f"no config: input {DEFAULT_IMAGE}x{DEFAULT_IMAGE} unless --image-size; strides {list(v.strides)}, padding "
             f"{list(v.padding)}, a 3x3 pool and gelu assumed",)
    cls = infer.find(T, r"^classifier\.weight$")
    common = dict(common, num_labels=cls.shape[0] if cls is not None else 0,
                  assumptions=common.get("assumptions", ()) + notes)
    return _spec(common, v, "gelu")


def _blocks(w: Recorder, X: PoolFormerVariant, i: int, side: int) -> None:
    """Stage i's blocks on a side x side map. For the inference peak each op is beside what MemTracker measures live
    (`held`: k tensors of the block's width): the block keeps its input, the mixer's output, the scaled one and the
    first residual sum until it returns, the MLP its input through it; pool(x) is live beside x and pool(x) - x."""
    B, c, L = w.B, X.widths[i], X.depths[i]
    layer, tok, blocks = f"encoder.block.{i}.{{bid}}.", (B.b, side * side), tuple(range(L))
    n, ls = B.b * side * side * c, int(X.layer_scale)

    def held(k: int) -> AbstractContextManager[None]:
        return B.holding(k * n)

    def scale(name: str) -> None:
        if X.layer_scale:
            w.params(w.label(layer + name, L), ((layer + name, (c,)),), tok + (c,), tok + (c,), ew=n, kind="activation",
                     L=L)

    def residual() -> None:
        B.add(w.label(layer.rstrip("."), L) + " residual add", "activation", w.bucket, L, tok + (c,), tok + (c,), ew=n,
              extra_in=n)

    w.norm(layer + "before_norm", tok, c, L, residual=False,
           label=w.label(layer + "before_norm", L) + " (GroupNorm, 1 group)")
    with held(1):   # the token mixer pool(x) - x
        B.add(w.label(layer + "pooling", L), "pool", w.bucket, L, tok + (c,), tok + (c,), ew=n * (X.pool ** 2 + 1),
              scratch=n * B.ab)
        scale("layer_scale_1")
    with held(1 + ls):
        residual()
    with held(2 + ls):
        w.norm(layer + "after_norm", tok, c, L, residual=False,
               label=w.label(layer + "after_norm", L) + " (GroupNorm, 1 group)")
    with held(3 + ls):
        conv_strided(w, layer + "output.conv1", w.label(layer + "output.conv1", L), c, X.mlp[i], 1, 1, side, 0, blocks,
                     bias=True)
        with held(1):
            B.activation(w.label(layer + "output act", L), w.bucket, tok, X.mlp[i], B.s.activation, L)
            conv_strided(w, layer + "output.conv2", w.label(layer + "output.conv2", L), X.mlp[i], c, 1, 1, side, 0,
                         blocks, bias=True)
        scale("layer_scale_2")
        residual()


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes (PoolFormerModel's and the classifier): writes its ops to B and records the modules."""
    s = B.s
    X = s.variant_as(PoolFormerVariant)
    w = Recorder(B, "encoder")
    side, cin = s.image_size, X.channels
    for i, c in enumerate(X.widths):
        at = f"encoder.patch_embeddings.{i}.projection"
        side = conv_strided(w, at, at, cin, c, X.patches[i], X.strides[i], side, X.padding[i], bias=True)
        _blocks(w, X, i, side)
        cin = c
    if s.head == "imgcls":
        w.norm("norm", (B.b, side * side), cin, residual=False, bucket="pooler", top=True)
        B.add("mean over the map", "pool", "pooler", 1, (B.b, cin, side, side), (B.b, cin), ew=B.b * cin * side * side)
        if s.num_labels:   # an Identity, without parameters, when num_labels is 0
            w.linear("classifier", (B.b,), cin, s.num_labels, True, bucket="cls", top=True)
    return w


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """PoolFormerModel's parameters (`poolformer.` inside the classifier)."""
    if s.head not in FAMILY.heads:
        return None
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" else "poolformer")


# the walk of a tiny two-stage model with its layer scales: the paths of the signature and the look-ups
WALKED = walked(walk, "poolformer", image_size=16, variant=PoolFormerVariant(
    channels=1, widths=(2, 2), depths=(1, 1), mlp=(2, 2), patches=(3, 3), strides=(2, 2), padding=(1, 1), pool=3,
    layer_scale=True))

_SIZES = dict(hidden_sizes=[8, 16, 24], depths=[1, 2, 1], num_encoder_blocks=3, patch_sizes=[7, 3, 3],
              strides=[4, 2, 2], padding=[2, 1, 1], num_labels=5)

FAMILY = Family(
    name="poolformer",
    model_types=("poolformer",),
    signature=signature(WALKED, "before_norm"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls"),
    head_rules=(HeadRule(r"^classifier\.weight$", "imgcls"), HeadRule(r"^norm\.weight$", "imgcls")),
    main_input="pixel_values",
    samples=(
        Sample("PoolFormerConfig", _SIZES, ("PoolFormerModel", "PoolFormerForImageClassification")),
        # no layer scale, a 5x5 pool, mlp_ratio 2.5, relu; odd kernels, strides and padding
        Sample("PoolFormerConfig", dict(_SIZES, use_layer_scale=False, pool_size=5, mlp_ratio=2.5, hidden_act="relu",
                                        patch_sizes=[5, 3, 3], strides=[3, 2, 2], padding=[1, 0, 1]),
               ("PoolFormerModel", "PoolFormerForImageClassification"), infer=False),
    ),
)
