"""What an image costs a vision-language wrapper before its language model reads it (`flops --images N`, `memory
--images N`): the vision tower run whole on it, the projector, and the tokens it puts into the language model's
sequence (or, Llama 3.2 Vision, the states its cross-attention layers read), as transformers' wrapper's
get_image_features computes them. By how the wrapper reads an image:

- fixed.py: over a CLIP or SigLIP tower its family's template counts (LLaVA, Video-LLaVA, VipLLaVA, LLaVA-NeXT,
  LLaVA-NeXT-Video, LLaVA-OneVision, PaliGemma, Gemma 3, ShieldGemma 2, Aya Vision, Command A Vision, DeepSeek-VL and
  DeepSeek-VL-Hybrid);
- tiled.py: fixed-size tiles or images through a tower stated as matmuls (InternVL, Idefics3, SmolVLM, Ovis2, Llama 4,
  Llama 3.2 Vision, Janus, BLIP-2, GOT-OCR2, Gemma 4);
- native.py: images at their own size (Mistral 3's Pixtral, GLM-4.xV, the Qwen-VL towers and their kin, Idefics2,
  PaddleOCR-VL, HunYuan-VL, HY-V4-VL, MiniMax-M3-VL, Kimi K2.5).

Any other wrapper: None (`--images` refuses it with one line)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ...errors import UsageError
from ..framework.archspec import ArchSpec
from . import native, tiled
from .fixed import FIXED, PINPOINTS, TOWERS, fixed
from .native import GLM, QWEN
from .path import ImagePath, Matmul

__all__ = ["ANY_SIZE", "MODELLED", "ImagePath", "Matmul", "any_size", "image_path", "modelled", "reading"]

TILED = {"internvl": tiled.internvl, "qianfan_ocr": tiled.internvl, "idefics3": tiled.idefics3,
         "smolvlm": tiled.idefics3, "llama4": tiled.llama4, "mllama": tiled.mllama, "janus": tiled.janus,
         "gemma4": tiled.gemma4, "ovis2": tiled.ovis2, "blip-2": tiled.blip2, "got_ocr2": tiled.got_ocr2,
         "aria": tiled.aria}
NATIVE = {**dict.fromkeys(QWEN, native.qwen), **dict.fromkeys(GLM, native.glm4v), "kimi_k25": native.kimi,
          "paddleocr_vl": native.paddleocr, "hunyuan_vl": native.hunyuan, "hy_v4_vl": native.hunyuan,
          "minimax_m3_vl": native.minimax, "idefics2": native.idefics2, "video_llama_3": native.videollama3}
PIXTRAL = ("mistral3", "lighton_ocr")   # Pixtral's tower, over the batch's images together
STATED = {**TILED, **NATIVE}
ANY_SIZE = (*NATIVE, *PIXTRAL, *PINPOINTS)   # read images at their own size: --image-size
# what the lines above cover, said to users
MODELLED = ("LLaVA, Video-LLaVA, VipLLaVA, LLaVA-NeXT, LLaVA-NeXT-Video, LLaVA-OneVision, PaliGemma, Gemma 3, "
            "ShieldGemma 2, Aya Vision, Command A Vision, DeepSeek-VL and DeepSeek-VL-Hybrid over a CLIP or SigLIP "
            "tower, InternVL, Qianfan-OCR, Idefics2, Idefics3, SmolVLM, Ovis2, Llama 4, Llama 3.2 Vision, Janus, BLIP-2, "
            "GOT-OCR2, Aria, Gemma 4, Mistral 3, LightOnOCR, GLM-4.1V / 4.5V / 4.6V, GLM-GA, Qwen2-VL, Qwen2.5-VL, "
            "Qwen3-VL, Qwen3.5 (dense and MoE), Qwen4-Exp, EXAONE 4.5, HyperCLOVAX-Vision-V2, LLaVA-OneVision-1.5, the "
            "Qwen2.5-Omni / Qwen3-Omni thinkers, Cosmos3-Omni, PaddleOCR-VL, HunYuan-VL, HY-V4-VL, MiniMax-M3-VL, "
            "VideoLLaMA3 and Kimi K2.5 / K2.6")


def reading(spec: ArchSpec, path: ImagePath | None, count: int) -> ArchSpec:
    """The language model's spec when each sequence holds `count` images of `path`: Mllama's cross-attention layers run
    over their states (ArchSpec.cross_states); any other is unchanged (its images are tokens in the sequence)."""
    return replace(spec, cross_states=count * path.cross) if path is not None and path.cross else spec


def modelled(cfg: Mapping[str, Any]) -> bool:
    """Whether `--images` is modelled for this wrapper's config.json."""
    vision = cfg.get("vision_config")
    return isinstance(vision, Mapping) and isinstance(cfg.get("text_config"), Mapping) and (
        (cfg.get("model_type") in FIXED and vision.get("model_type") in TOWERS) or cfg.get("model_type") in STATED
        or cfg.get("model_type") in PIXTRAL)


def any_size(cfg: Mapping[str, Any]) -> bool:
    """Whether the wrapper reads images at their own size (--image-size needed), not at one its tower fixes."""
    return modelled(cfg) and cfg.get("model_type") in ANY_SIZE


def image_path(cfg: Mapping[str, Any], side: int | None = None, per_sequence: int = 1,
               batch: int = 1) -> ImagePath | None:
    """The image path of a wrapper `modelled` covers (None for any other), for images of `side` pixels (None: the
    tower's own size; a Qwen or Pixtral tower has none: UsageError), `per_sequence` in each of `batch` sequences
    (OneVision tiles a sequence's one image only; Pixtral attends over all the batch's images at once). UsageError
    for a side the wrapper cannot read."""
    if not modelled(cfg):
        return None
    mt = cfg["model_type"]
    if side is None and mt in ANY_SIZE:
        raise UsageError(f"--images: {mt} reads images at their own size; give --image-size N (the side in pixels)")
    if mt in PIXTRAL:
        return native.mistral3(cfg, side, per_sequence * batch)
    if mt in STATED:
        return STATED[mt](cfg, side)
    return fixed(cfg, side, per_sequence)
