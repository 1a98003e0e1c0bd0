"""The pyramid vision transformers' pieces, walked with framework/recorder.py's `Recorder`: SegFormer's Mix Transformer
(segformer.py, transformers' modeling_segformer.py) and PVT v2 (pvt_v2.py, modeling_pvt_v2.py) share them under their
own module names (`SRPaths`):
- the overlapping patch embedding (`overlap_embedding`): a biased k x k Conv2d of its own stride, padded k // 2 on each
  side, and a LayerNorm over its tokens;
- the spatial-reduction attention block (`sr_blocks`): a LayerNorm, q over every token of the side x side map, k and v
  over the map reduced by a biased sr x sr / sr Conv2d and a LayerNorm (sr 1: no reduction; PVT v2's linear_attention: an
  adaptive average pool to 7 x 7, a biased 1x1 Conv2d, a LayerNorm and GELU), attention of every token over the reduced
  ones, the output projection and the residual; a LayerNorm and the Mix-FFN: fc1, a biased depthwise 3x3 Conv2d
  (padding 1) on the map, the activation, fc2, and the residual; PVT v1's (pvt.py, `ffn` "plain"): fc1, the activation,
  fc2, and a class token before the map's tokens in its last stage (`cls`).
FLOPs are FlopCounterMode's: the convs' out elements x cin / groups x k x k MACs, the Linears', Q K^T and P V of n
query and m key tokens."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from ...errors import UsageError
from .archspec import Variant
from .base import FROM_CLASS, Cfg, Tensors
from .recorder import Recorder
from .walk_names import Walked, numbered
from .walk_vision import conv_strided, positive_lists

POOLED = 7   # PVT v2's linear_attention: nn.AdaptiveAvgPool2d(7)
# a block's MLP: "mix" the Mix-FFN (fc1, a depthwise 3x3 conv on the map, the activation, fc2: SegFormer's, PVT v2's);
# "plain" fc1, the activation, fc2 (PVT v1's PvtFFN)
FFN = Literal["mix", "plain"]


@dataclass(frozen=True)
class SRPaths:
    """One block's module names under its path ({bid} the block), as save_pretrained writes them."""
    norm1: str = "layer_norm_1"
    q: str = "attention.self.query"
    k: str = "attention.self.key"
    v: str = "attention.self.value"
    sr: str = "attention.self.sr"               # the reducing conv
    sr_norm: str = "attention.self.layer_norm"  # its LayerNorm
    o: str = "attention.output.dense"
    norm2: str = "layer_norm_2"
    fc1: str = "mlp.dense1"
    dwconv: str = "mlp.dwconv.dwconv"
    fc2: str = "mlp.dense2"


@dataclass(frozen=True)
class StagePaths:
    """Where a stage's modules sit ({i} the stage): its patch embedding, its blocks ({bid} under them), its norm."""
    embed: str
    blocks: str
    norm: str
    block: SRPaths = SRPaths()
    proj: str = "proj"   # the patch embedding's conv under `embed`


@dataclass(frozen=True)
class PyramidVariant(Variant):
    """The stages' sizes, one entry a stage."""
    channels: int
    widths: tuple[int, ...]    # hidden_sizes
    depths: tuple[int, ...]
    heads: tuple[int, ...]     # num_attention_heads
    sr: tuple[int, ...]        # sr_ratios
    mlp: tuple[int, ...]       # each stage's Mix-FFN width (int(hidden_size x mlp_ratio))
    patches: tuple[int, ...]   # patch_sizes
    strides: tuple[int, ...]
    qkv_bias: bool
    linear: bool               # PVT v2's linear_attention


def encoder(w: Recorder, X: PyramidVariant, P: StagePaths, side: int, act: str) -> list[int]:
    """Every stage: the overlapping patch embedding, the blocks, the stage's LayerNorm; returns each stage's side."""
    sides, cin = [], X.channels
    for i, c in enumerate(X.widths):
        side = overlap_embedding(w, P.embed.format(i=i), cin, c, X.patches[i], X.strides[i], side)
        sr_blocks(w, P.block, P.blocks.format(i=i), X.depths[i], side, c, X.heads[i], X.sr[i], X.mlp[i], act,
                  X.qkv_bias, X.linear)
        w.norm(P.norm.format(i=i), (w.B.b, side * side), c, residual=False)
        cin = c
        sides.append(side)
    return sides


def mean_classifier(w: Recorder, side: int, c: int, labels: int) -> None:
    """The image classifier: the last stage's side x side tokens of c averaged, a biased Linear (an Identity, no op,
    where labels is 0: PVT v2's)."""
    B = w.B
    B.add("mean over the tokens", "pool", "pooler", 1, (B.b, side * side, c), (B.b, c), ew=B.b * c * side * side)
    if labels:
        w.linear("classifier", (B.b,), c, labels, True, bucket="cls", top=True)


def config_stages(c: Cfg, sr_key: str = "sr_ratios") -> dict[str, Any]:
    """PyramidVariant's per-stage fields from the config (hidden_sizes, depths, ... of num_encoder_blocks entries;
    `sr_key` the reduction ratios' key: PVT v1's sequence_reduction_ratios)."""
    lists = positive_lists(c, "hidden_sizes", "depths", "num_attention_heads", sr_key, "patch_sizes", "strides")
    stages = c.int("num_encoder_blocks", default=FROM_CLASS)
    ratios = c.get("mlp_ratios", default=FROM_CLASS)
    if stages != len(lists[0]) or not isinstance(ratios, (list, tuple)) or len(ratios) != stages:
        raise UsageError(f"{c.path}: config num_encoder_blocks = {stages} is not the length of hidden_sizes / mlp_ratios")
    widths = tuple(lists[0])
    return dict(channels=c.int("num_channels", default=FROM_CLASS), widths=widths, depths=tuple(lists[1]),
                heads=tuple(lists[2]), sr=tuple(lists[3]), mlp=tuple(int(w * r) for w, r in zip(widths, ratios)),
                patches=tuple(lists[4]), strides=tuple(lists[5]))


# the MiT / PVT v2 b0..b5 strides and heads, which the names cannot tell: the first stage's stride 4, then 2; heads 1, 2, 5, 8
_STRIDE0, _HEADS = 4, (1, 2, 5, 8)
STAGES_ASSUMED = "strides 4, 2, 2...; heads 1, 2, 5, 8 where they divide the width (else 1)"


def tensor_stages(T: Tensors, W: Walked, P: StagePaths) -> dict[str, Any]:
    """PyramidVariant's per-stage fields (and linear: the pooled reduction, a 1x1 conv) from the names and shapes of
    the file's tensors, W the family's walk; strides and heads assumed (STAGES_ASSUMED)."""
    embed = per_stage(T, numbered(W, P.embed.format(i=0) + "." + P.proj))
    q = numbered(W, P.block.q)
    blocks, srs = per_stage(T, q), per_stage(T, numbered(W, P.block.sr))
    # the MLP's fc1 [f, c] at the query's numbers (numbered would read dense1's digit as a number: dense2 too)
    mlp = per_stage(T, q.replace(re.escape(P.block.q), re.escape(P.block.fc1)))
    stages = sorted(blocks)
    if not stages or any(i not in embed or i not in mlp for i in stages):
        raise UsageError("cannot infer the architecture from tensor names: a stage without its patch embedding or "
                         "MLP; pass --config")
    widths = tuple(embed[i][1][0] for i in stages)
    sr = tuple(srs[i][1][2] if i in srs else 1 for i in stages)
    return dict(channels=embed[stages[0]][1][1], widths=widths, depths=tuple(blocks[i][0] for i in stages),
                heads=tuple(_HEADS[i] if i < len(_HEADS) and w % _HEADS[i] == 0 else 1 for i, w in enumerate(widths)),
                sr=sr, mlp=tuple(mlp[i][1][0] for i in stages), patches=tuple(embed[i][1][2] for i in stages),
                strides=tuple(_STRIDE0 if i == 0 else 2 for i in stages),
                linear=len(srs) == len(stages) and all(r == 1 for r in sr))


def per_stage(T: Tensors, numbered: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    """stage -> (its blocks, the shape of its first block's tensor) of the tensors `numbered` matches (walk_names.numbered
    of a block's module: groups 2 and 3 the stage and the block; of a stage's: group 2)."""
    rx, got = re.compile(numbered), dict[int, tuple[int, tuple[int, ...]]]()
    for name, t in T.items():
        if m := rx.search(name):
            st, b = int(m.group(2)), int(m.group(3)) if rx.groups > 2 else 0
            blocks, shape = got.get(st, (0, t.shape))
            got[st] = (max(blocks, b + 1), t.shape if b == 0 else shape)
    return got


def overlap_embedding(w: Recorder, path: str, cin: int, c: int, k: int, stride: int, side: int,
                      proj: str = "proj") -> int:
    """`path`.proj (a biased k x k / stride Conv2d padded k // 2) and `path`.layer_norm; returns the output side."""
    side = conv_strided(w, f"{path}.{proj}", w.label(f"{path}.{proj}"), cin, c, k, stride, side, k // 2, bias=True)
    w.norm(f"{path}.layer_norm", (w.B.b, side * side), c, residual=False)
    return side


def sr_blocks(w: Recorder, P: SRPaths, at: str, L: int, side: int, c: int, heads: int, sr: int, f: int, act: str,
              qkv_bias: bool = True, linear: bool = False, ffn: FFN = "mix", cls: bool = False) -> None:
    """L blocks stored at `at` ({bid} each) on a side x side map of c channels (`cls`: and a class token before it):
    spatial-reduction attention (ratio sr; `linear`: PVT v2's pooled reduction) and the MLP (`ffn`) of width f."""
    if ffn not in ("mix", "plain"):
        raise TypeError(f"sr_blocks ffn = {ffn!r} is not 'mix' or 'plain'")
    if cls and (linear or sr > 1):   # transformers reshapes the side x side + 1 tokens into the map: it raises
        raise UsageError(f"{at}: a class token with a spatial reduction ({sr}) cannot be reshaped into the map")
    B, layer = w.B, at + ".{bid}."
    n = side * side + int(cls)
    tok = (w.B.b, n)
    w.norm(layer + P.norm1, tok, c, L, residual=False)
    w.linear(layer + P.q, tok, c, c, qkv_bias, L)
    m, blocks = n, tuple(range(L))
    if linear or sr > 1:
        label = w.label(layer + P.sr, L)
        if linear:   # adaptive average pool to 7 x 7 (each output a mean of its window: about one add per input)
            B.add(label + " pool", "pool", w.bucket, L, (B.b, c, side, side), (B.b, c, POOLED, POOLED), ew=B.b * c * n)
        r = conv_strided(w, layer + P.sr, label, c, c, 1 if linear else sr, 1 if linear else sr,
                         POOLED if linear else side, 0, blocks, bias=True)
        m = r * r
        w.norm(layer + P.sr_norm, (B.b, m), c, L, residual=False)
        if linear:
            B.activation(label + " gelu", w.bucket, (B.b, m), c, "gelu", L)
    w.linear(layer + P.k, (B.b, m), c, c, qkv_bias, L)
    w.linear(layer + P.v, (B.b, m), c, c, qkv_bias, L)
    B.attention(w.label(layer.rstrip(".") + " attention", L), w.bucket, heads, n, m, c // heads, L, causal=False)
    w.linear(layer + P.o, tok, c, c, True, L)
    w.norm(layer + P.norm2, tok, c, L)   # the attention's residual add counted here
    w.linear(layer + P.fc1, tok, c, f, True, L)
    if linear:   # PVT v2's ReLU after fc1
        B.activation(w.label(layer + P.fc1, L) + " relu", w.bucket, tok, f, "relu", L)
    if ffn == "mix":
        conv_strided(w, layer + P.dwconv, w.label(layer + P.dwconv, L), f, f, 3, 1, side, 1, blocks, groups=f, bias=True)
    B.activation(w.label(layer + "mlp act", L), w.bucket, tok, f, act, L)
    w.linear(layer + P.fc2, tok, f, c, True, L)
    n_c = math.prod(tok) * c
    B.add(w.label(layer.rstrip("."), L) + " MLP output + residual", "activation", w.bucket, L, tok + (c,), tok + (c,),
          ew=n_c, extra_in=n_c)
