"""Swin, Swin V2 and Donut's Swin: transformers' modeling_swin.py (SwinModel, SwinForImageClassification,
SwinForMaskedImageModeling), modeling_swinv2.py (the Swinv2 trio) and modeling_donut_swin.py (DonutSwinModel,
DonutSwinForImageClassification: Swin without the final LayerNorm). The *Backbone classes are not described.

A Conv2d patch embedding (k = stride = patch_size; the image padded to a multiple of it), its LayerNorm (`embeddings.norm`),
learned absolute positions where use_absolute_embeddings (interpolated, no matmul, off the config's image_size) and
the mask token of *ForMaskedImageModeling; then stages (`depths`, `num_heads`), stage i at width embed_dim x 2^i on a
side x side grid of patches, each block windowed attention: the grid padded to a multiple of the window (ws x ws
tokens a window), q/k/v and the output dense on every padded token, Q K^T and P V per window (b x windows x heads
bmm's of ws^2 x ws^2), a relative position bias per head added to the scores (a shifted block's mask too: no matmul);
then the MLP (int(mlp_ratio x width)). Between stages a patch merging: 2 x 2 neighbours concatenated (the grid padded
to even), a LayerNorm of 4 x width and a bias-free Linear(4 x width, 2 x width). A final LayerNorm (not Donut's), the
pooler an average over the tokens (no parameters), the classifier on it; *ForMaskedImageModeling (no pooler) decodes
the last grid with a 1x1 Conv2d to encoder_stride^2 x num_channels and a PixelShuffle (no FLOPs).

The window: Swin and Donut shrink it to the grid at run time where min(grid) <= window_size (set_shift_and_window_size;
their bias table stays sized by window_size, (2 window_size - 1)^2 x heads). Swin V2 fixes it per stage when it
builds the model, from the config's image_size (min(window_size, grid at the config's size // 2^i)), whatever the
input, and differs besides: cosine attention (q and k normalised, x exp(logit_scale), a [heads, 1, 1] parameter), key
without bias, the bias from a continuous position bias MLP (Linear(2, 512), ReLU, Linear(512, heads) without bias, run
once a block per forward on the (2 ws - 1)^2 relative coordinates, whatever the batch), post-norm blocks (the norms on
the attention's and the MLP's outputs before each residual add) and patch merging's reduction before its LayerNorm of
2 x width.

The side analysed is ArchSpec.image_size (--image-size), the rest a SwinVariant. The architecture is stated once, in
`walk` (framework/recorder.py's Recorder; each stage's blocks one `{bid}` run): the op template and the expected
tensors (save_pretrained's names: attention.self.query... for all three) derive from it."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..errors import UsageError
from .framework import infer
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import numbered, pattern, signature, walked
from .framework.walk_vision import conv

Version = Literal["swin", "swinv2", "donut"]
BODY = {"swin": "swin", "swinv2": "swinv2", "donut": "donut"}   # the base model's attribute in a head model
MODEL_TYPES: dict[str, Version] = {"swin": "swin", "swinv2": "swinv2", "donut-swin": "donut"}
CPB = 512   # Swin V2's continuous position bias MLP width (fixed in Swinv2SelfAttention)
DEFAULT_WINDOW = 7   # SwinConfig's / Swinv2Config's window_size, assumed where a file without config.json does not show it
DEFAULT_IMAGE = 224


@dataclass(frozen=True)
class SwinVariant(Variant):
    version: Version
    native_image_size: int   # the config's image_size: the position table, Swin V2's windows
    patch_size: int
    channels: int
    embed_dim: int
    depths: tuple[int, ...]
    heads: tuple[int, ...]    # each stage's num_heads
    widths: tuple[int, ...]   # each stage's MLP width, int(mlp_ratio x embed_dim x 2^i)
    window: int               # window_size
    absolute: bool            # use_absolute_embeddings: embeddings.position_embeddings
    mask_token: bool          # *ForMaskedImageModeling's embeddings.mask_token
    encoder_stride: int = 0   # the *ForMaskedImageModeling decoder's upscale (0: no decoder)


def _ints(c: Cfg, key: str, default: list[int]) -> tuple[int, ...]:
    v = c.get(key, default=default)
    if not (isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= 4096 for x in v)):
        raise UsageError(f"{c.path}: config {key} = {v!r} is not a list of positive integers")
    return tuple(v)


def from_config(c: Cfg) -> ArchSpec:
    version = MODEL_TYPES[c.model_type]
    C = c.int("embed_dim", default=FROM_CLASS)
    depths, heads = _ints(c, "depths", [2, 2, 6, 2]), _ints(c, "num_heads", [3, 6, 12, 24])   # the config classes' lists
    img, p = c.int("image_size", default=DEFAULT_IMAGE), c.int("patch_size", default=FROM_CLASS)
    ratio = c.get("mlp_ratio", default=4.0)
    if len(heads) != len(depths) or any(C * 2 ** i % a for i, a in enumerate(heads)) or not 0 < p <= img \
            or isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1024:
        raise UsageError(f"{c.path}: config needs num_heads as long as depths ({heads}, {depths}), each stage's width "
                         f"embed_dim x 2^i a multiple of its heads, 0 < patch_size <= image_size and 0 < mlp_ratio <= 1024")
    mim = c.head == "mim"
    v = SwinVariant(version=version, native_image_size=img, patch_size=p, channels=c.int("num_channels", default=3),
                    embed_dim=C, depths=depths, heads=heads, widths=tuple(int(ratio * C * 2 ** i) for i in range(len(depths))),
                    window=c.int("window_size", default=FROM_CLASS),
                    absolute=bool(c.get("use_absolute_embeddings", default=False)),
                    mask_token=mim, encoder_stride=c.int("encoder_stride", default=FROM_CLASS) if mim else 0)
    return _spec(v, c.common, activation=str(c.get("hidden_act", default="gelu")),
                 qkv_bias=bool(c.get("qkv_bias", default=True)), image_size=img)


def pooler(model_type: str, head: str) -> bool:
    """The average pool (no parameters) of SwinModel and its classifier; *ForMaskedImageModeling builds it without."""
    return head != "mim"


def _spec(v: SwinVariant, common: dict[str, Any], **fields: Any) -> ArchSpec:
    """The ArchSpec: its layers every block, its width, heads and MLP the last stage's."""
    h = v.embed_dim * 2 ** (len(v.depths) - 1)
    return ArchSpec(layers=sum(v.depths), hidden=h, heads=v.heads[-1], kv_heads=v.heads[-1], head_dim=h // v.heads[-1],
                    intermediate=v.widths[-1], vocab=0, pooler=pooler(common["model_type"], common["head"]), variant=v,
                    **fields, **common)


def _block(s: int, sub: str) -> str:
    return f"encoder.layers.{s}.blocks.{{bid}}.{sub}"


def _window(v: SwinVariant, s: int, side: int) -> int:
    """Stage s's window on a side x side grid: Swin's and Donut's shrink to the grid at run time, Swin V2's was fixed
    at build time from the config's image_size."""
    grid = side if v.version != "swinv2" else (v.native_image_size // v.patch_size) // 2 ** s
    return min(v.window, grid)


def _kept(b: int, L: int, C: int, side: int, padded: int, ws: int) -> int:
    """Elements a Swin or Donut block keeps live through its MLP beyond the four of a ViT layer (its input, the attention
    output, the residual sum, its norm: analysis/memory/peaks.py), as MemTracker measures the worst block of a stage:
    the windows' copy of the padded grid and the grid the attention output goes back to (un-windowed, rolled back in a
    shifted block); from the second block on the stage's input too, and a shifted block's attention mask, windows x
    ws^2 x ws^2 (shifted: the odd blocks, where the grid is larger than the window)."""
    later = L > 1
    shifted = later and side > ws
    return 2 * b * padded * padded * C + (b * side * side * C if later else 0) \
        + ((padded // ws) ** 2 * ws ** 4 if shifted else 0)


def _stage(w: Recorder, v: SwinVariant, s: int, side: int, act: str, qkv_bias: bool) -> None:
    """Stage s's blocks (each alike in cost: a shift moves tokens, no FLOPs) on a side x side grid."""
    B, L = w.B, v.depths[s]
    C, a, f = v.embed_dim * 2 ** s, v.heads[s], v.widths[s]
    ws = _window(v, s, side)
    padded = -(-side // ws) * ws
    wins = (padded // ws) ** 2
    tok, wtok = (B.b, side * side), (B.b, padded * padded)   # every token; the padded grid's, in windows
    v2 = v.version == "swinv2"
    if not v2:
        w.norm(_block(s, "layernorm_before"), tok, C, L, residual=False)
    for m, bias in (("query", qkv_bias), ("key", qkv_bias and not v2), ("value", qkv_bias)):
        w.linear(_block(s, f"attention.self.{m}"), wtok, C, C, bias, L)
    rel = (2 * ws - 1) ** 2
    if v2:   # the bias MLP on the (2 ws - 1)^2 relative coordinates, once a block; logit_scale x cosine scores
        w.linear(_block(s, "attention.self.continuous_position_bias_mlp.0"), (1, rel), 2, CPB, True, L)
        B.activation(w.label(_block(s, "attention.self.continuous_position_bias_mlp relu"), L), w.bucket, (1, rel), CPB,
                     "relu", L)
        w.linear(_block(s, "attention.self.continuous_position_bias_mlp.2"), (1, rel), CPB, a, False, L)
        w.params(f"encoder.layers.{s}.blocks[{L}].attention.self.logit_scale", ((_block(s, "attention.self.logit_scale"),
                 (a, 1, 1)),), (a, 1, 1), (a, 1, 1), ew=a, kind="activation", L=L)
    else:   # the bias table, (2 window_size - 1)^2 x heads whatever the run's window, gathered (no FLOPs)
        path = _block(s, "attention.self.relative_position_bias_table")
        w.held(w.label(path, L), ((path, (("", ((2 * v.window - 1) ** 2, a)),)),), L)
    # per window: b x windows sequences of ws^2 tokens (heads x windows heads of the batch)
    B.attention(w.label(_block(s, "attention.self"), L) + f" ({wins} windows of {ws}x{ws})", w.bucket, a * wins, ws * ws,
                ws * ws, C // a, L, causal=False, extra_ew=4 if v2 else 3)
    w.linear(_block(s, "attention.output.dense"), wtok, C, C, True, L)
    w.norm(_block(s, "layernorm_before" if v2 else "layernorm_after"), tok, C, L)   # with the residual add before it
    # eager attention's probabilities, at their dtype: the block's own and from the second block on the previous one's
    probs = B.b * a * wins * ws ** 4 * (2 if L > 1 else 1)
    with B.holding(_kept(B.b, L, C, side, padded, ws)), B.holding(probs, eager=True):
        w.linear(_block(s, "intermediate.dense"), tok, C, f, True, L)
        B.activation(w.label(_block(s, "intermediate act"), L), w.bucket, tok, f, act, L)
        w.linear(_block(s, "output.dense"), tok, f, C, True, L)
    if v2:
        w.norm(_block(s, "layernorm_after"), tok, C, L)
    else:
        n = math.prod(tok) * C
        B.add(w.label(_block(s, "MLP output + residual"), L), "activation", w.bucket, L, tok + (C,), tok + (C,), ew=n,
              extra_in=n)


def _cls_row(v: SwinVariant) -> int:
    """Swin V2's and Donut's position tables hold a row more than the patches (a cls position no token reads)."""
    return int(v.version != "swin")


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets."""
    s = B.s
    v = s.variant_as(SwinVariant)
    w = Recorder(B, "encoder")
    p, C = v.patch_size, v.embed_dim
    side = conv(w, "embeddings.patch_embeddings.projection", v.channels, C, p, -(-s.image_size // p) * p, True,
                bucket="embedding")   # the image padded to a multiple of the patch
    w.norm("embeddings.norm", (B.b, side * side), C, residual=False, bucket="embedding")
    tokens = ((("embeddings.mask_token", (1, 1, C)),) if v.mask_token else ()) \
        + ((("embeddings.position_embeddings", (1, (v.native_image_size // p) ** 2 + _cls_row(v), C)),) if v.absolute else ())
    if tokens:
        w.params("embeddings." + " + ".join(path.split(".")[-1] for path, _ in tokens), tokens, (B.b, side * side, C),
                 (B.b, side * side, C), ew=B.b * side * side * C if v.absolute else 0)
    for i in range(len(v.depths)):
        _stage(w, v, i, side, s.activation, s.qkv_bias)
        if i == len(v.depths) - 1:
            break
        C, side = v.embed_dim * 2 ** i, (side + 1) // 2   # 2 x 2 neighbours of the grid padded to even
        merged = (B.b, side * side)
        if v.version == "swinv2":
            w.linear(f"encoder.layers.{i}.downsample.reduction", merged, 4 * C, 2 * C, False)
            w.norm(f"encoder.layers.{i}.downsample.norm", merged, 2 * C, residual=False)
        else:
            w.norm(f"encoder.layers.{i}.downsample.norm", merged, 4 * C, residual=False)
            w.linear(f"encoder.layers.{i}.downsample.reduction", merged, 4 * C, 2 * C, False)
    h, tok = s.hidden, (B.b, side * side)
    if v.version != "donut":
        w.norm("layernorm", tok, h, residual=False)
    if s.pooler:   # AdaptiveAvgPool1d over the tokens
        B.add("pooler (mean of tokens)", "activation", "pooler", 1, tok + (h,), (B.b, h), ew=math.prod(tok) * h)
    if s.head == "imgcls" and s.num_labels:   # an Identity, without parameters, when num_labels is 0
        w.linear("classifier", (B.b,), h, s.num_labels, True, bucket="cls", top=True)
    if v.encoder_stride:   # the last grid (floor(sqrt(tokens)) a side), a 1x1 conv to stride^2 x channels, PixelShuffle
        conv(w, "decoder.0", h, v.encoder_stride ** 2 * v.channels, 1, side, True, bucket="cls", top=True)
    return w


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """The model's parameters as save_pretrained names them (`swin.`, `swinv2.`, `donut.` inside a head model)."""
    if s.head not in FAMILY.heads:
        return None
    v = s.variant_as(SwinVariant)
    body = "" if s.head == "base" else BODY[v.version]
    return walk(Builder(replace(s, image_size=v.native_image_size), 1, 1, 1, 1, 1)).shapes(body)


def _tiny(version: Version) -> SwinVariant:
    return SwinVariant(version=version, native_image_size=8, patch_size=2, channels=1, embed_dim=4, depths=(1, 1),
                       heads=(1, 1), widths=(4, 8), window=2, absolute=True, mask_token=True, encoder_stride=1)


# the walks of a tiny *ForMaskedImageModeling of two stages with positions, v1 and v2: the paths of the name signature
# and from_tensors' look-ups
WALKED, WALKED_V2 = (walked(walk, "swin", head="mim", image_size=8, variant=_tiny(v)) for v in ("swin", "swinv2"))


def _per_stage(T: Tensors, key: str, suffix: str = "weight", W: Recorder = WALKED) -> dict[int, tuple[int, tuple[int, ...]]]:
    """stage -> (its blocks, the shape of its first block's `key` parameter `suffix` ("": a bare parameter))."""
    rx = re.compile(numbered(W, key, suffix))
    out: dict[int, tuple[int, tuple[int, ...]]] = {}
    for name, t in T.items():
        if m := rx.search(name):
            s, b = int(m.group(2)), int(m.group(3))
            blocks, shape = out.get(s, (0, ()))
            out[s] = (max(blocks, b + 1), tuple(t.shape) if b == 0 else shape)
    return out


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    W, notes = WALKED, []
    C, ch, p, _ = infer.shape(T, pattern(W, "embeddings.patch_embeddings.projection"), "the patch embedding conv")
    v2 = infer.has(T, pattern(WALKED_V2, "attention.self.continuous_position_bias_mlp.0"))
    q, mlp = _per_stage(T, "attention.self.query"), _per_stage(T, "intermediate.dense")
    if not q or sorted(q) != list(range(len(q))):
        raise UsageError("no Swin stages (encoder.layers.N.blocks.M.attention.self.query) in the file")
    if v2:
        heads = _per_stage(T, "attention.self.logit_scale", "", WALKED_V2)
        window = DEFAULT_WINDOW
        notes.append(f"no config: window_size {window} (Swin V2's is not in its tensors)")
    else:
        heads = _per_stage(T, "attention.self.relative_position_bias_table", "")
        window = (math.isqrt(heads[0][1][0]) + 1) // 2
    final = infer.has(T, pattern(W, "layernorm"))   # Donut's Swin has no final LayerNorm
    pos = infer.find(T, pattern(W, "embeddings.position_embeddings"))
    img = math.isqrt(pos.shape[1] - int(v2 or not final)) * p if pos is not None and len(pos.shape) == 3 else DEFAULT_IMAGE
    if pos is None:
        notes.append(f"no config: image {img}x{img}")
    decoder = infer.find(T, pattern(W, "decoder.0"))
    version: Version = "swinv2" if v2 else "swin" if final else "donut"
    stages = range(len(q))
    v = SwinVariant(version=version, native_image_size=img, patch_size=p, channels=ch, embed_dim=C,
                    depths=tuple(q[i][0] for i in stages), heads=tuple(heads[i][1][0 if v2 else 1] for i in stages),
                    widths=tuple(mlp[i][1][0] for i in stages), window=window, absolute=pos is not None,
                    mask_token=infer.has(T, pattern(W, "embeddings.mask_token")),
                    encoder_stride=math.isqrt(decoder.shape[0] // ch) if decoder is not None else 0)
    mt = {b: m for m, b in MODEL_TYPES.items()}[version]
    return _spec(v, {**common, "model_type": mt}, num_labels=infer.num_labels(T), activation="gelu",
                 qkv_bias=infer.has(T, pattern(W, "attention.self.query", "bias")), image_size=img, assumptions=tuple(notes))


_SIZES = dict(embed_dim=8, depths=[2, 1, 2], num_heads=[2, 2, 4], image_size=32, patch_size=2, window_size=4,
              num_channels=3, mlp_ratio=2.0)

FAMILY = Family(
    name="swin",
    model_types=tuple(MODEL_TYPES),
    # patch merging's reduction (Swin's, Swin V2's, Donut's; one-stage models have none)
    signature=signature(WALKED, "downsample.reduction"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls", "mim"),
    head_rules=(HeadRule(r"^classifier\.weight$", "imgcls"), HeadRule(r"^decoder\.0\.weight$", "mim")),
    pooler=pooler,
    main_input="pixel_values",
    samples=(
        Sample("SwinConfig", dict(_SIZES, num_labels=5, encoder_stride=4),
               ("SwinModel", "SwinForImageClassification", "SwinForMaskedImageModeling")),
        Sample("SwinConfig", dict(_SIZES, qkv_bias=False, use_absolute_embeddings=True, image_size=30, window_size=2,
                                  mlp_ratio=3.0), ("SwinModel", "SwinForImageClassification")),
        Sample("Swinv2Config", dict(_SIZES, num_labels=5, encoder_stride=4),
               ("Swinv2Model", "Swinv2ForImageClassification", "Swinv2ForMaskedImageModeling")),
        # windows fixed at build from 15 patches a side: 8 (shifted), 7 and 3 (unshifted), whatever the input. Not
        # use_absolute_embeddings: transformers' Swin V2 (and Donut) adds its n + 1 rows to n patches, which raises
        Sample("Swinv2Config", dict(_SIZES, window_size=8, qkv_bias=False, image_size=30),
               ("Swinv2Model", "Swinv2ForImageClassification")),
        Sample("DonutSwinConfig", dict(_SIZES, num_labels=3), ("DonutSwinModel", "DonutSwinForImageClassification")),
    ),
)
