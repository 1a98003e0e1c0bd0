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
        if type(v) is not int or v <= 0:
            raise UsageError(f"--images: the {sub.get('model_type')} config's {k} is {v!r}, not a positive integer")
        out.append(v)
    return out


def pair(v: Any) -> int | None:
    """A square side given as an int or a [height, width] pair (InternVL's image_size, patch_size), else None."""
    if isinstance(v, (list, tuple)) and len(v) == 2 and v[0] == v[1]:
        v = v[0]
    return v if type(v) is int and v > 0 else None
