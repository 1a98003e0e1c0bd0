"""The image path's parts (families/images): the matmuls an image runs, the path a wrapper's image takes, and the
readers of the vision config the wrappers' modules share."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import UsageError
from ..framework.base import config_value


@dataclass(frozen=True)
class Matmul:
    """A matmul each image runs `calls` times: `rows` x [d_in, d_out] (+ a bias); `weight` False: of two activations
    (attention's Q K^T and P V, no parameters)."""
    module: str
    rows: int
    d_in: int
    d_out: int
    bias: bool
    calls: int = 1
    weight: bool = True


@dataclass(frozen=True)
class ImagePath:
    """What one image costs a wrapper (images/__init__.py image_path) and what it puts into its language model."""
    tower: dict[str, Any] | None     # a TOWERS tower's config, as its family reads it (model_type, architectures)
    side: int                        # the image side the tower reads
    tokens: int                      # the language model's tokens each image becomes
    matmuls: tuple[Matmul, ...]      # the rest of the path: the projector (a tower stated here: all of it)
    rule: str
    crops: int = 1                   # the tower's forwards an image takes (LLaVA-NeXT: its tiles and the base image)
    cross: int = 0                   # the states an image adds to the language model's cross-attention (Mllama)


def attention(prefix: str, heads: int, rows: int, keys: int, d: int, calls: int, what: str = "") -> list[Matmul]:
    """Eager attention's two matmuls of `rows` queries over `keys` keys a head: Q K^T and P V, `calls` times."""
    what = f", {what}" if what else ""
    return [Matmul(f"{prefix}.scores (QK^T{what})", heads * rows, d, keys, False, calls, False),
            Matmul(f"{prefix}.context (PV{what})", heads * rows, keys, d, False, calls, False)]


def encoder(at: str, rows: int, width: int, heads: int, d: int, inter: int, layers: int, qkv_bias: bool = True,
            out: str = "self_attn.out_proj", out_bias: bool = True, attn: str = "self_attn",
            mlp: tuple[str, ...] = ("mlp.fc1", "mlp.fc2"), mlp_bias: bool = True) -> list[Matmul]:
    """A ViT encoder's `layers` layers under `at` over `rows` tokens an image: q/k/v_proj of `heads` x `d`, eager
    attention over the same rows, the output projection `out`, an MLP of `inter`: two layers, or gated given three
    names (gate, up, down)."""
    *into, back = mlp
    return [*(Matmul(f"{at}.{attn}.{p}_proj", rows, width, heads * d, qkv_bias, layers) for p in "qkv"),
            *attention(f"{at}.{attn}", heads, rows, rows, d, layers),
            Matmul(f"{at}.{out}", rows, heads * d, width, out_bias, layers),
            *(Matmul(f"{at}.{m}", rows, width, inter, mlp_bias, layers) for m in into),
            Matmul(f"{at}.{back}", rows, inter, width, mlp_bias, layers)]


def sizes(sub: Mapping[str, Any], *keys: str) -> list[int]:
    """The sub-config's values of `keys`: positive integers, else a UsageError naming the first that is not."""
    out = []
    for k in keys:
        v = config_value(sub, k)
        if type(v) is not int or not 0 < v <= 1 << 31:
            raise UsageError(f"--images: the {sub.get('model_type')} config's {k} is {str(v)[:40]}, not a positive "
                             "integer up to 2^31")
        out.append(v)
    return out


def fixed_side(mt: str, side: int | None, native: int, reads: str) -> None:
    """--image-size given to a wrapper that reads one side (`native`): a usage error unless it is that side, saying
    what the wrapper `reads` there."""
    if side is not None and side != native:
        raise UsageError(f"--image-size {side}: {mt}'s tower reads {native}x{native} {reads}")


def pair(v: Any) -> int | None:
    """A square side given as an int or a [height, width] pair (InternVL's image_size, patch_size), else None."""
    if isinstance(v, (list, tuple)) and len(v) == 2 and v[0] == v[1]:
        v = v[0]
    return v if type(v) is int and v > 0 else None


def sam(at: str, vision: Mapping[str, Any], native: int, patch: int) -> tuple[list[Matmul], int]:
    """A SAM ViT-det encoder under `at` over a `native`-pixel image, with its neck (transformers' SamVisionEncoder and
    its copies: GOT-OCR2's, DeepSeek-VL-Hybrid's high-resolution tower), and its grid side: the patch conv; per layer a
    fused qkv and proj over the patches, or over the grid padded to whole windows on the windowed layers; attention
    within each window or over the whole grid on global_attn_indexes; the decomposed relative positions' two einsums
    (each query against its row's and its column's positions); lin1 / lin2; the neck's 1x1 and 3x3 convolutions."""
    width, heads, mlp, layers, channels, out, window = sizes(
        vision, "hidden_size", "num_attention_heads", "mlp_dim", "num_hidden_layers", "num_channels", "output_channels",
        "window_size")
    full = len({i for i in (config_value(vision, "global_attn_indexes") or ()) if 0 <= i < layers})
    grid, d, rel = native // patch, width // heads, bool(config_value(vision, "use_rel_pos"))
    padded = -(-grid // window) * window   # (window_partition pads the grid to whole windows)
    ms = [Matmul(f"{at}.patch_embed.projection", grid * grid, channels * patch * patch, width, True)]
    # (rows, one attention's side, attentions an image) of the global and the windowed layers
    for count, rows, a_side, each in ((full, grid * grid, grid, 1), (layers - full, padded * padded, window,
                                                                       (padded // window) ** 2)):
        if not count:
            continue
        t, kind = a_side * a_side, "global" if a_side == grid else f"{each} windows of {a_side}x{a_side}"
        ms += [Matmul(f"{at}.layers.attn.qkv ({kind})", rows, width, 3 * width, bool(config_value(vision, "qkv_bias")),
                      count),
               *attention(f"{at}.layers.attn", heads, t, t, d, count * each, kind)]
        if rel:
            ms.append(Matmul(f"{at}.layers.attn.rel_pos (height and width, {kind})", heads * t, d, a_side, False,
                             2 * count * each, False))
        ms.append(Matmul(f"{at}.layers.attn.proj ({kind})", rows, width, width, True, count))
    ms += [Matmul(f"{at}.layers.mlp.lin1", grid * grid, width, mlp, True, layers),
           Matmul(f"{at}.layers.mlp.lin2", grid * grid, mlp, width, True, layers),
           *neck(f"{at}.neck", grid, width, out)]
    return ms, grid


def neck(at: str, grid: int, width: int, out: int) -> list[Matmul]:
    """SAM's neck over a grid of `grid` x `grid`: a bias-free 1x1 convolution to `out` channels, then a 3x3 one."""
    return [Matmul(f"{at}.conv1", grid * grid, width, out, False),
            Matmul(f"{at}.conv2 (3x3)", grid * grid, out * 9, out, False)]


def stride2(side: int) -> int:
    """The side a 3x3 convolution of stride 2 and padding 1 leaves."""
    return (side - 1) // 2 + 1

