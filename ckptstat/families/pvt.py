"""PVT v1 (transformers modeling_pvt.py: PvtModel, PvtForImageClassification): num_encoder_blocks stages, each a patch
embedding (`encoder.patch_embeddings.{i}`: a biased Conv2d of kernel strides[i] and stride patch_sizes[i], unpadded,
a LayerNorm, learned positions added; the last stage's a class token before its tokens), depths[i] spatial-reduction
attention blocks (`encoder.block.{i}.{j}`: framework/walk_pyramid.py's sr_blocks with the plain MLP, PvtFFN, and
sequence_reduction_ratios[i]), and one final LayerNorm (`encoder.layer_norm`). The classifier: a Linear on the class
token (an Identity when num_labels is 0).

Positions: PvtPatchEmbeddings.interpolate_pos_encoding reshapes the stored table into the stage's grid before
interpolating it to that same grid, so transformers runs only where each stage's grid holds as many tokens as its table
(the config's image_size, and the sides that floor to its grids: 224 to 227 for PVT-tiny); at another side the walk
refuses (UsageError), as the library raises.

The side analysed is ArchSpec.image_size (--image-size; default the config's image_size, 224). The architecture is
stated once, in `walk`: the op template and the expected tensors derive from it."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .framework import infer
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import numbered, signature, walked
from .framework.walk_pyramid import (
    STAGES_ASSUMED,
    PyramidVariant,
    SRPaths,
    StagePaths,
    config_stages,
    per_stage,
    sr_blocks,
    tensor_stages,
)
from .framework.walk_vision import conv_strided

DEFAULT_IMAGE = 224
PATHS = StagePaths("encoder.patch_embeddings.{i}", "encoder.block.{i}", "encoder.layer_norm",
                   SRPaths(sr="attention.self.sequence_reduction"), proj="projection")
POSITIONS = PATHS.embed.format(i=0) + ".position_embeddings"   # stage 0's: walk_names reads every number


@dataclass(frozen=True)
class PvtVariant(PyramidVariant):
    """PyramidVariant's stages (`strides` each patch embedding's kernel, `patches` its stride, as PvtPatchEmbeddings
    swaps them; `mlp` PvtFFN's width; `linear` always false) and each stage's stored position rows (the class token's
    excluded)."""
    positions: tuple[int, ...]


def _spec(common: dict[str, Any], v: PvtVariant, act: str, image: int) -> ArchSpec:
    return ArchSpec(layers=sum(v.depths), hidden=v.widths[-1], heads=v.heads[-1], kv_heads=v.heads[-1],
                    head_dim=v.widths[-1] // v.heads[-1], intermediate=v.mlp[-1], vocab=0, activation=act,
                    norm="layernorm", image_size=image, variant=v, **common)


def from_config(c: Cfg) -> ArchSpec:
    """The stages (sequence_reduction_ratios the reduction); each stage's table of PvtEncoder's sizes: the image_size
    over patch_sizes[0] in the first stage, image_size // 2^(i+1) over patch_sizes[i] after."""
    stages = config_stages(c, "sequence_reduction_ratios")
    img = c.get("image_size", default=FROM_CLASS)   # an int or [height, width]
    side = img[0] if isinstance(img, (list, tuple)) and img else img
    if not isinstance(side, int) or side < 1:
        raise UsageError(f"{c.path}: config image_size = {img!r} is not a positive side")
    positions = tuple(((side if i == 0 else side // 2 ** (i + 1)) // p) ** 2 for i, p in enumerate(stages["patches"]))
    v = PvtVariant(**stages, qkv_bias=bool(c.get("qkv_bias", default=FROM_CLASS)), linear=False, positions=positions)
    return _spec(c.common, v, str(c.get("hidden_act", default=FROM_CLASS)), side)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The stages from the names and shapes (walk_pyramid.tensor_stages; each patch embedding's stride its kernel), the
    position rows from the tables, the image side from the first stage's; qkv_bias from the query's bias."""
    st = tensor_stages(T, WALKED, PATHS)
    rows = per_stage(T, numbered(WALKED, POSITIONS, suffix=""))
    last = len(st["widths"]) - 1
    if sorted(rows) != list(range(last + 1)):
        raise UsageError("cannot infer the architecture from tensor names: a stage without its position table; pass "
                         "--config")
    positions = tuple(rows[i][1][1] - (i == last) for i in range(last + 1))
    v = PvtVariant(**dict(st, strides=st["patches"], linear=False), positions=positions,
                   qkv_bias=infer.has(T, r"(^|\.)attention\.self\.query\.bias$"))
    image = math.isqrt(positions[0]) * v.patches[0]
    notes = (f"no config: image {image}x{image} from the first stage's {positions[0]} positions; heads "
             f"{STAGES_ASSUMED.split('; ')[1]}; each patch embedding's stride its kernel; the activation gelu",)
    cls = infer.find(T, r"(^|\.)classifier\.weight$")
    common = dict(common, num_labels=cls.shape[0] if cls is not None else 0,
                  assumptions=common.get("assumptions", ()) + notes)
    return _spec(common, v, "gelu", image)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes (PvtModel's and the classifier's): writes its ops to B and records the modules."""
    s = B.s
    X = s.variant_as(PvtVariant)
    w = Recorder(B, "encoder")
    side, cin, last = s.image_size, X.channels, len(X.widths) - 1
    for i, c in enumerate(X.widths):
        at, cls = PATHS.embed.format(i=i), i == last
        side = conv_strided(w, f"{at}.{PATHS.proj}", w.label(f"{at}.{PATHS.proj}"), cin, c, X.strides[i], X.patches[i],
                            side, 0, bias=True)
        n = side * side
        if n != X.positions[i]:
            raise UsageError(f"image side {s.image_size}: stage {i}'s {side}x{side} grid is not its {X.positions[i]} "
                             "stored positions, which transformers' PVT reshapes into the grid (use the config's "
                             "image_size)")
        w.norm(f"{at}.layer_norm", (B.b, n), c, residual=False)
        tokens = (((f"{at}.cls_token", (1, 1, c)),) if cls else ()) + ((f"{at}.position_embeddings", (1, n + cls, c)),)
        w.params(f"{at}." + " + ".join(p.split(".")[-1] for p, _ in tokens), tokens, (B.b, n, c), (B.b, n + cls, c),
                 ew=B.b * (n + cls) * c, bucket="embedding")
        sr_blocks(w, PATHS.block, PATHS.blocks.format(i=i), X.depths[i], side, c, X.heads[i], X.sr[i], X.mlp[i],
                  s.activation, X.qkv_bias, ffn="plain", cls=cls)
        cin = c
    w.norm(PATHS.norm, (B.b, side * side + 1), cin, residual=False)
    if s.head == "imgcls" and s.num_labels:   # on the class token; an Identity when num_labels is 0
        w.linear("classifier", (B.b,), cin, s.num_labels, True, bucket="cls", top=True)
    return w


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """PvtModel's parameters (`pvt.` inside the classifier)."""
    if s.head not in FAMILY.heads:
        return None
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" else "pvt")


_TINY = PvtVariant(channels=1, widths=(2, 2), depths=(1, 1), heads=(1, 1), sr=(2, 1), mlp=(2, 2), patches=(2, 2),
                   strides=(2, 2), qkv_bias=True, linear=False, positions=(16, 4))
# the walk of a tiny two-stage model, its first stage reduced: the paths of the signature and the look-ups
WALKED = walked(walk, "pvt", image_size=8, variant=_TINY)

# the 1.5x + 1 side tests/test_families.py also tries crashes in transformers (other grids): the walk refuses it too
_SIZES = dict(hidden_sizes=[8, 16, 24], depths=[1, 2, 1], num_encoder_blocks=3, num_attention_heads=[1, 2, 4],
              sequence_reduction_ratios=[4, 2, 1], mlp_ratios=[4, 2, 3], patch_sizes=[4, 2, 2], strides=[4, 2, 2],
              image_size=64, num_labels=5)

FAMILY = Family(
    name="pvt",
    model_types=("pvt",),
    signature=signature(WALKED, PATHS.block.sr, POSITIONS),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls"),
    head_rules=(HeadRule(r"^classifier\.weight$", "imgcls"),),
    main_input="pixel_values",
    samples=(
        Sample("PvtConfig", _SIZES, ("PvtModel", "PvtForImageClassification")),
        # another side (96), no q/k/v bias, relu; the first patch embedding's kernel 3 under its stride 4 (the names
        # cannot tell the stride)
        Sample("PvtConfig", dict(_SIZES, image_size=96, qkv_bias=False, hidden_act="relu", strides=[3, 2, 2]),
               ("PvtModel", "PvtForImageClassification"), infer=False),
    ),
)
