"""Wrappers whose towers read images at their own size (--image-size, rounded as their processors round it), stated
as matmuls (ImagePath.matmuls).

- Mistral 3 (modeling_mistral3.py over modeling_pixtral.py: Mistral Small 3.1 / 3.2, Magistral, Devstral with vision;
  LightOnOCR's, modular_lighton_ocr.py, over the tower's last state through a bias-free projector):
  images up to the vision config's image_size (rounded up to a multiple of patch x merge as Pixtral's processor rounds
  it), the Pixtral tower (bias-free patch conv, q/k/v/o, a SwiGLU MLP) over every image of the forward as one sequence
  (eager and SDPA attention mask the other images' patches: their scores are computed, so the attention grows with the
  square of the batch's patches), the patch merger and linear_1 / linear_2; each image's [IMG_BREAK] / [IMG_END]
  tokens (one a row of merged patches) are among its tokens.
- GLM-4.1V, GLM-4.5V and GLM-4.6V (modeling_glm4v.py, modeling_glm4v_moe.py, modeling_glm46v.py): as Qwen's (rounded
  as their processor's smart_resize rounds it): the biased Conv3d patch embedding, full attention over each image (qkv,
  proj), a SwiGLU MLP of out_hidden_size, the Conv2d downsample over each 2 x 2 block of patches, the merger (proj,
  gate_proj, up_proj of intermediate_size, down_proj).
- Qwen2-VL, Qwen2.5-VL and Qwen3-VL (dense and MoE: modeling_qwen2_vl.py, modeling_qwen2_5_vl.py, modeling_qwen3_vl.py;
  Qwen2.5-Omni's and Qwen3-Omni's thinkers hold Qwen2.5-VL's and Qwen3-VL's towers; Qwen3.5, Qwen3.5-MoE and Qwen4-Exp
  Qwen3-VL's without DeepStack; EXAONE 4.5 Qwen2.5-VL's with num_key_value_heads in its qkv; LLaVA-OneVision-1.5's
  RiceViT a bias-free Conv2d, a class token beside each image's patches, full attention, fc1 / fc2, Qwen3-VL's
  merger): rounded to a multiple of patch x merge as the processor's smart_resize rounds it: the Conv3d patch
  embedding, the blocks (Qwen2-VL: LayerNorm, full attention over each image, fc1 / quick_gelu / fc2; Qwen2.5-VL:
  RMSNorm, attention within windows of window_size pixels but on fullatt_block_indexes, a biased SwiGLU MLP; Qwen3-VL:
  full attention, linear_fc1 / linear_fc2, its learned positions interpolated by look-ups) and the patch merger
  (Qwen3-VL's DeepStack mergers too, after each deepstack_visual_indexes block: their features are added to the
  language model's first layers, no matmul).
- PaddleOCR-VL (modeling_paddleocr_vl.py): rounded as Qwen's, a SigLIP-like NaViT (biased patch conv, q/k/v/out_proj,
  full attention over each image, fc1 / fc2), the projector over each 2 x 2 block of patches (linear_1, linear_2).
- HunYuan-VL (modeling_hunyuan_vl.py): rounded as Qwen's, its tower (biased patch conv, q/k/v/o_proj, full attention
  over each image, fc1 / fc2), the merger's 2 x 2 conv and 1x1 conv, an image_newline after each row, its mlp into the
  text width, image_begin and image_end: all of them the image's tokens. HY-V4-VL (modular_hy_v4_vl.py) the same
  tower, its merger's 1x1 conv straight to out_hidden_size and a newline a row (no mlp, begin or end).
- MiniMax-M3-VL (modeling_minimax_m3_vl.py): rounded as Qwen's, a bias-free Conv3d patch embedding, layers of biased
  q/k/v/out_proj with full attention over each image and fc1 / fc2, every patch through the projector's linear_1 /
  linear_2 into the text width, then each 2 x 2 block's through merge_linear_1 / merge_linear_2.
- Idefics2 (modeling_idefics2.py): a square image's side clamped to its processor's default edges (378 to 980 px), a
  SigLIP-like tower (biased patch conv, q/k/v/out_proj, fc1 / fc2) over the patches, the connector's SwiGLU
  modality_projection into the text width, then the perceiver resampler: resampler_depth layers of
  resampler_n_latents latents attending over the patches and themselves (q_proj on the latents, k_proj / v_proj on
  both), o_proj, a SwiGLU MLP of 4 x the width: the latents are the image's tokens.
- VideoLLaMA3 (modeling_video_llama_3.py): images rounded as Qwen's at its processor's default image merge_size 1, a
  SigLIP-like NaViT (biased patch conv, q/k/v/out_proj, full attention over each image, fc1 / fc2), the projector's two
  Linears: a token a patch.
- Kimi K2.5 / K2.6 (modeling_kimi_k25.py: MoonViT over DeepSeek-V3): padded up to a multiple of patch x merge as its
  processor's navit_resize pads it, the biased patch projection, layers of biased q/k/v/proj with full attention over
  each image and fc1 / fc2, each 2 x 2 block of patches pooled (no matmul), the projector's in_proj and out_proj."""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from ...errors import UsageError
from ..framework.base import config_value
from .path import ImagePath, Matmul, attention, encoder, pair, sizes

# wrappers -> the Qwen-VL tower they hold (Qwen2.5-Omni's and Qwen3-Omni's thinkers: Qwen2.5-VL's and Qwen3-VL's,
# modeling_qwen2_5_omni.py, modeling_qwen3_omni_moe.py; Qwen3.5, Qwen3.5-MoE and Qwen4-Exp: Qwen3-VL's without its
# DeepStack mergers, modular_qwen3_5.py Qwen3_5VisionModel; EXAONE 4.5: Qwen2.5-VL's with grouped keys and values in
# its qkv, modular_exaone4_5.py; Cosmos3-Omni's reasoner: Qwen3-VL's, modular_cosmos3_omni.py; LLaVA-OneVision-1.5's
# RiceViT: Qwen2.5-VL's attention over each image and a class token, fc1 / fc2, Qwen3-VL's merger,
# modular_llava_onevision1_5.py; HyperCLOVAX-Vision-V2: Qwen2.5-VL's, then its own projector Linear)
QWEN = {"qwen2_vl": "qwen2_vl", "qwen2_5_vl": "qwen2_5_vl", "qwen3_vl": "qwen3_vl", "qwen3_vl_moe": "qwen3_vl",
        "qwen2_5_omni_thinker": "qwen2_5_vl", "qwen3_omni_moe_thinker": "qwen3_vl", "qwen3_5": "qwen3_5",
        "qwen3_5_moe": "qwen3_5", "qwen4_exp": "qwen3_5", "exaone4_5": "qwen2_5_vl", "llava_onevision1_5": "rice",
        "cosmos3_omni": "qwen3_vl", "hyperclovax_vision_v2": "qwen2_5_vl"}
GLM = ("glm4v", "glm4v_moe", "glm46v", "glmga")   # GLM-4.1V / 4.5V / 4.6V and GLM-GA (GLM-4.6V's): Qwen2.5-VL-like


def mistral3(cfg: Mapping[str, Any], side: int | None, together: int) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    assert side is not None   # (image_path: ANY_SIZE)
    width, heads, inter, layers, channels = sizes(vision, "hidden_size", "num_attention_heads", "intermediate_size",
                                                   "num_hidden_layers", "num_channels")
    longest, patch = pair(config_value(vision, "image_size")), pair(config_value(vision, "patch_size"))
    merge = config_value(cfg, "spatial_merge_size")
    layer = -1 if cfg["model_type"] == "lighton_ocr" else config_value(cfg, "vision_feature_layer")   # (its last state)
    (hidden,) = sizes(text, "hidden_size")
    if longest is None or patch is None or type(merge) is not int or merge <= 0 or not isinstance(layer, int):
        raise UsageError(f"--images: mistral3 with image_size {config_value(vision, 'image_size')!r}, patch_size "
                         f"{config_value(vision, 'patch_size')!r}, spatial_merge_size {merge!r}, vision_feature_layer {layer!r} "
                         "is not modelled")
    unit = patch * merge   # the processor: the longest edge at most image_size, each side rounded up to patch x merge
    resized = -(-min(side, longest) // unit) * unit
    grid = resized // patch
    n, d, features = grid * grid, width // heads, (grid // merge) ** 2
    bias = bool(config_value(cfg, "multimodal_projector_bias"))
    ms = (Matmul("vision_tower.patch_conv", n, channels * patch * patch, width, False),
          *(Matmul(f"vision_tower.transformer.layers.attention.{p}_proj", n, width, width, False, layers) for p in "qkvo"),
          *attention("vision_tower.transformer.layers.attention", heads, n, together * n, d, layers,
                      f"over {together} images' patches"),
          *(Matmul(f"vision_tower.transformer.layers.feed_forward.{p}_proj", n, width, inter, False, layers)
            for p in ("gate", "up")),
          Matmul("vision_tower.transformer.layers.feed_forward.down_proj", n, inter, width, False, layers),
          Matmul("multi_modal_projector.patch_merger.merging_layer", features, width * merge * merge, width, False),
          Matmul("multi_modal_projector.linear_1", features, width, hidden, bias),
          Matmul("multi_modal_projector.linear_2", features, hidden, hidden, bias))
    note = f" ({side} px resized to {resized} as Pixtral's processor sizes it)" if resized != side else ""
    return ImagePath(None, resized, features + grid // merge, ms,
                     f"{grid}x{grid} patches{note} through {layers} layers, attending over all {together} images of the "
                     f"forward at once (the other images' scores masked, computed), merged {merge}x{merge} into "
                     f"{features} image tokens and {grid // merge} [IMG_BREAK]/[IMG_END] tokens, linear_1, "
                     f"{config_value(cfg, 'projector_hidden_act')}, linear_2")


def smart_resized(side: int | None, factor: int) -> tuple[int, str]:
    """The side the processors' smart_resize (Qwen's and its copies) gives a square image of `side` pixels, rounded to
    a multiple of `factor` (their min/max pixels, processor settings, not applied), and the rule's note when it
    differs."""
    assert side is not None   # (image_path: ANY_SIZE)
    resized = max(factor, round(side / factor) * factor)
    return resized, (f" ({side} px rounded to {resized}, a multiple of {factor}, as its processor's smart_resize rounds "
                     "it)" if resized != side else "")


def glm4v(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision = cfg["vision_config"]
    patch, temporal, merge, channels, depth, heads, width, out, inter = sizes(
        vision, "patch_size", "temporal_patch_size", "spatial_merge_size", "in_channels", "depth", "num_heads",
        "hidden_size", "out_hidden_size", "intermediate_size")
    resized, note = smart_resized(side, patch * merge)
    grid = resized // patch
    n, units, d = grid * grid, (grid // merge) ** 2, width // heads
    bias = bool(config_value(vision, "attention_bias"))
    ms = (Matmul("visual.patch_embed.proj", n, channels * temporal * patch * patch, width, True),
          Matmul("visual.blocks.attn.qkv", n, width, 3 * width, bias, depth),
          *attention("visual.blocks.attn", heads, n, n, d, depth),
          Matmul("visual.blocks.attn.proj", n, width, width, False, depth),
          *(Matmul(f"visual.blocks.mlp.{p}", n, width, out, False, depth) for p in ("gate_proj", "up_proj")),
          Matmul("visual.blocks.mlp.down_proj", n, out, width, False, depth),
          Matmul("visual.downsample", units, width * merge * merge, out, True),
          Matmul("visual.merger.proj", units, out, out, False),
          *(Matmul(f"visual.merger.{p}", units, out, inter, False) for p in ("gate_proj", "up_proj")),
          Matmul("visual.merger.down_proj", units, inter, out, False))
    return ImagePath(None, resized, units, ms,
                     f"{grid}x{grid} patches{note}, {depth} blocks with full attention over each image, downsampled "
                     f"{merge}x{merge} into {units} tokens, the merger (the processor's min/max pixels not applied)")


def kimi(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    assert side is not None   # (image_path: ANY_SIZE)
    patch, layers, heads, width, inter = sizes(vision, "patch_size", "num_hidden_layers", "num_attention_heads",
                                                "hidden_size", "intermediate_size")
    (hidden,) = sizes(text, "hidden_size")
    kernel = config_value(vision, "merge_kernel_size")
    if not (isinstance(kernel, (list, tuple)) and len(kernel) == 2 and kernel[0] == kernel[1] and type(kernel[0]) is int
            and kernel[0] > 0):
        raise UsageError(f"--images: kimi_k25's merge_kernel_size {kernel!r} is no square kernel")
    merge, unit = kernel[0], kernel[0] * patch   # its processor's navit_resize pads each side up to patch x merge
    padded = -(-side // unit) * unit
    grid = padded // patch
    n, units, d, merged = grid * grid, (grid // merge) ** 2, width // heads, width * merge * merge
    ms = (Matmul("vision_tower.patch_embed.proj", n, 3 * patch * patch, width, True),
          *encoder("vision_tower.layers", n, width, heads, d, inter, layers, out="attn.proj", attn="attn"),
          Matmul("mm_projector.in_proj", units, merged, merged, True),
          Matmul("mm_projector.out_proj", units, merged, hidden, True))
    note = f" ({side} px padded to {padded}, as its processor pads it)" if padded != side else ""
    return ImagePath(None, padded, units, ms,
                     f"{grid}x{grid} patches{note}, {layers} layers with full attention over each image, merged "
                     f"{merge}x{merge} into {units} tokens, in_proj, GELU, out_proj (the processor's max_patches not "
                     "applied)")


def paddleocr(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    patch, merge, channels, layers, heads, width, inter = sizes(
        vision, "patch_size", "spatial_merge_size", "num_channels", "num_hidden_layers", "num_attention_heads",
        "hidden_size", "intermediate_size")
    (hidden,) = sizes(text, "hidden_size")
    resized, note = smart_resized(side, patch * merge)   # (its processor's smart_resize, as Qwen's)
    grid = resized // patch
    n, units, d, merged = grid * grid, (grid // merge) ** 2, width // heads, width * merge * merge
    ms = (Matmul("visual.embeddings.patch_embedding", n, channels * patch * patch, width, True),
          *encoder("visual.encoder.layers", n, width, heads, d, inter, layers),
          Matmul("projector.linear_1", units, merged, merged, True),
          Matmul("projector.linear_2", units, merged, hidden, True))
    return ImagePath(None, resized, units, ms,
                     f"{grid}x{grid} patches{note} through {layers} layers with full attention over each image, "
                     f"merged {merge}x{merge} into {units} tokens by the projector's linear_1, GELU, linear_2 (the "
                     "processor's min/max pixels not applied)")


def hunyuan(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, v4 = cfg["vision_config"], cfg["model_type"] == "hy_v4_vl"
    patch, merge, channels, layers, heads, width, inter, hidden = sizes(
        vision, "patch_size", "spatial_merge_size", "num_channels", "num_hidden_layers", "num_attention_heads",
        "hidden_size", "intermediate_size", "out_hidden_size" if v4 else "text_hidden_size")
    d = config_value(vision, "head_dim") or width // heads   # (the attention's getattr default)
    resized, note = smart_resized(side, patch * merge)   # (its processor's smart_resize, as Qwen's)
    grid = resized // patch
    n, rows = grid * grid, grid // merge
    units, conv = rows * rows, width * merge * merge if v4 else 2 * width   # (HY-V4-VL's proj_conv: m^2 x wider)
    ms = [Matmul("vision_tower.embeddings.patch_embedding", n, channels * patch * patch, width, True),
          *encoder("vision_tower.layers", n, width, heads, d, inter, layers, out="self_attn.o_proj"),
          Matmul("vision_tower.patch_merger.proj_conv", units, width * merge * merge, conv, True)]
    if v4:   # proj_out straight to the text width, a newline a row: no mlp, begin or end
        ms.append(Matmul("vision_tower.patch_merger.proj_out", units, conv, hidden, True))
    else:
        ms += [Matmul("vision_tower.patch_merger.proj_out", units, conv, 4 * width, True),
               Matmul("vision_tower.patch_merger.mlp (and each row's image_newline)", units + rows, 4 * width, hidden,
                      True)]
    ends = "" if v4 else ", its mlp, image_begin and image_end"
    return ImagePath(None, resized, units + rows + (0 if v4 else 2), tuple(ms),
                     f"{grid}x{grid} patches{note} through {layers} layers with full attention over each image, the "
                     f"merger's {merge}x{merge} conv and 1x1 conv into {units} features, an image_newline a row{ends} "
                     "(the processor's min/max pixels not applied)")


def minimax(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    patch, temporal, merge, channels, layers, heads, width, inter = sizes(
        vision, "patch_size", "temporal_patch_size", "spatial_merge_size", "num_channels", "num_hidden_layers",
        "num_attention_heads", "hidden_size", "intermediate_size")
    (hidden,) = sizes(text, "hidden_size")
    (mid,) = sizes(cfg, "projector_hidden_size")
    resized, note = smart_resized(side, patch * merge)   # (its processor's smart_resize, as Qwen's)
    grid = resized // patch
    n, units, d = grid * grid, (grid // merge) ** 2, width // heads
    ms = (Matmul("vision_tower.embeddings.proj", n, channels * temporal * patch * patch, width, False),
          *encoder("vision_tower.layers", n, width, heads, d, inter, layers),
          Matmul("multi_modal_projector.linear_1", n, width, mid, True),
          Matmul("multi_modal_projector.linear_2", n, mid, hidden, True),
          Matmul("multi_modal_projector.merge_linear_1", units, hidden * merge * merge, mid, True),
          Matmul("multi_modal_projector.merge_linear_2", units, mid, hidden, True))
    return ImagePath(None, resized, units, ms,
                     f"{grid}x{grid} patches{note} through {layers} layers with full attention over each image, every "
                     f"patch through linear_1 / linear_2 into the text width, then each {merge}x{merge} block through "
                     f"merge_linear_1 / merge_linear_2 into {units} tokens (the processor's min/max pixels not applied)")


# Idefics2ImageProcessor's default size: a square image's side clamped to [shortest_edge, longest_edge] (processor
# settings config.json does not hold)
IDEFICS2_EDGES = (378, 980)


def idefics2(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text, perceiver = cfg["vision_config"], cfg["text_config"], cfg.get("perceiver_config") or {}
    assert side is not None   # (image_path: ANY_SIZE)
    patch, channels, layers, heads, width, inter = sizes(
        vision, "patch_size", "num_channels", "num_hidden_layers", "num_attention_heads", "hidden_size",
        "intermediate_size")
    hidden, text_inter = sizes(text, "hidden_size", "intermediate_size")
    latents, depth, rheads, rd, rkv = sizes({"model_type": "idefics2_perceiver", **perceiver}, "resampler_n_latents",
                                            "resampler_depth", "resampler_n_heads", "resampler_head_dim",
                                            "num_key_value_heads")
    resized = min(max(side, IDEFICS2_EDGES[0]), IDEFICS2_EDGES[1])
    grid = resized // patch
    n, keys, at = grid * grid, grid * grid + latents, "connector.perceiver_resampler.layers"
    ms = (Matmul("vision_model.embeddings.patch_embedding", n, channels * patch * patch, width, True),
          *encoder("vision_model.encoder.layers", n, width, heads, width // heads, inter, layers),
          *(Matmul(f"connector.modality_projection.{p}_proj", n, width, text_inter, False) for p in ("gate", "up")),
          Matmul("connector.modality_projection.down_proj", n, text_inter, hidden, False),
          Matmul(f"{at}.self_attn.q_proj", latents, hidden, rheads * rd, False, depth),
          *(Matmul(f"{at}.self_attn.{p}_proj (the patches and the latents)", keys, hidden, rkv * rd, False, depth)
            for p in "kv"),
          *attention(f"{at}.self_attn", rheads, latents, keys, rd, depth),
          Matmul(f"{at}.self_attn.o_proj", latents, rheads * rd, hidden, False, depth),
          *(Matmul(f"{at}.mlp.{p}_proj", latents, hidden, 4 * hidden, False, depth) for p in ("gate", "up")),
          Matmul(f"{at}.mlp.down_proj", latents, 4 * hidden, hidden, False, depth))
    note = f" ({side} px resized to {resized}: its processor's edges {IDEFICS2_EDGES[0]} to {IDEFICS2_EDGES[1]})" \
        if resized != side else ""
    return ImagePath(None, resized, latents, ms,
                     f"{grid}x{grid} patches{note} through {layers} layers, the connector's SwiGLU into the text "
                     f"width, {depth} perceiver layers of {latents} latents over the patches and themselves: "
                     f"{latents} tokens")


# VideoLlama3ImageProcessor's default merge_size for images (a processor setting config.json does not hold): 1, each
# patch a token (its videos' is 2)
VIDEOLLAMA3_IMAGE_MERGE = 1


def videollama3(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    patch, channels, layers, heads, width, inter = sizes(
        vision, "patch_size", "num_channels", "num_hidden_layers", "num_attention_heads", "hidden_size",
        "intermediate_size")
    (hidden,) = sizes(text, "hidden_size")
    merge = VIDEOLLAMA3_IMAGE_MERGE
    resized, note = smart_resized(side, patch * merge)   # (its processor's smart_resize, as Qwen's)
    grid = resized // patch
    n, tokens = grid * grid, (grid // merge) ** 2   # (pixel_unshuffle: a bilinear resize, no matmul)
    ms = (Matmul("vision_model.embeddings.patch_embedding", n, channels * patch * patch, width, True),
          *encoder("vision_model.encoder.layers", n, width, heads, width // heads, inter, layers),
          Matmul("projector.readout.0", tokens, width, hidden, True),
          Matmul("projector.readout.2", tokens, hidden, hidden, True))
    return ImagePath(None, resized, tokens, ms,
                     f"{grid}x{grid} patches{note} through {layers} layers with full attention over each image, an "
                     f"image's merge_size {merge} (its processor's default for images: a token a patch), the projector's "
                     "two Linears (the processor's min/max pixels not applied)")


def windows(grid: int, size: int) -> list[int]:
    """The sides, in merged units, of the windows a grid of `grid` units splits into along one axis (windows of `size`,
    the last short: transformers' get_vision_window_index pads and drops the empty ones)."""
    return [size] * (grid // size) + ([grid % size] if grid % size else [])


def qwen(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    mt, vision = cfg["model_type"], cfg["vision_config"]
    tower = QWEN[mt]
    v2, v3, rice = tower == "qwen2_vl", tower in ("qwen3_vl", "qwen3_5"), tower == "rice"
    width_key, out_key = ("embed_dim", "hidden_size") if v2 else ("hidden_size", "out_hidden_size")
    patch, merge, channels, depth, heads, width, out = sizes(
        vision, "patch_size", "spatial_merge_size", "in_channels", "depth", "num_heads", width_key, out_key)
    (temporal,) = (1,) if rice else sizes(vision, "temporal_patch_size")   # (RiceViT's Conv2d: no frames)
    resized, note = smart_resized(side, patch * merge)
    grid = resized // patch
    n, units, d = grid * grid + rice, (grid // merge) ** 2, width // heads   # (RiceViT: a class token an image)
    full = [i for i in (config_value(vision, "fullatt_block_indexes") or ()) if 0 <= i < depth] if tower == "qwen2_5_vl" \
        else list(range(depth))
    windowed = depth - len(full)
    kv = config_value(vision, "num_key_value_heads") or heads   # (EXAONE 4.5's grouped keys and values)
    if type(kv) is not int or kv <= 0 or heads % kv:
        raise UsageError(f"--images: {mt}'s vision num_key_value_heads {kv!r} does not divide its {heads} heads")
    ms: list[Matmul] = [Matmul("visual.patch_embed.proj", grid * grid, channels * temporal * patch * patch, width, v3)]
    ms += [Matmul("visual.blocks.attn.qkv", n, width, width + 2 * kv * d, True, depth),
           Matmul("visual.blocks.attn.proj", n, width, width, True, depth)]
    if full:   # one image a chunk: Q K^T and P V per head
        ms += attention("visual.blocks.attn", heads, n, n, d, len(full), f"full, {len(full)} blocks")
    if windowed:   # each window a chunk: windows of one size a row (calls: blocks x windows)
        unit = (config_value(vision, "window_size") or 0) // merge // patch
        if unit <= 0:
            raise UsageError(f"--images: {mt}'s window_size {config_value(vision, 'window_size')!r} is under a merged patch")
        sides = windows(grid // merge, unit)
        by_size = Counter(r * c * merge * merge for r in sides for c in sides)
        for w, count in sorted(by_size.items(), reverse=True):
            ms += attention("visual.blocks.attn", heads, w, w, d, windowed * count,
                             f"{count} windows of {w} patches, {windowed} blocks")
    if v2 or rice:
        inter = int(width * (config_value(vision, "mlp_ratio") or 4)) if v2 else sizes(vision, "intermediate_size")[0]
        ms += [Matmul("visual.blocks.mlp.fc1", n, width, inter, True, depth),
               Matmul("visual.blocks.mlp.fc2", n, inter, width, True, depth)]
    elif v3:
        (inter,) = sizes(vision, "intermediate_size")
        ms += [Matmul("visual.blocks.mlp.linear_fc1", n, width, inter, True, depth),
               Matmul("visual.blocks.mlp.linear_fc2", n, inter, width, True, depth)]
    else:
        (inter,) = sizes(vision, "intermediate_size")
        ms += [Matmul(f"visual.blocks.mlp.{p}", n, width, inter, True, depth) for p in ("gate_proj", "up_proj")]
        ms += [Matmul("visual.blocks.mlp.down_proj", n, inter, width, True, depth)]
    merged = width * merge * merge
    fc = ("linear_fc1", "linear_fc2") if v3 or rice else ("mlp.0", "mlp.2")
    deepstack = len([i for i in (config_value(vision, "deepstack_visual_indexes") or ()) if 0 <= i < depth]) \
        if tower == "qwen3_vl" else 0
    for name, calls in (("visual.merger", 1), ("visual.deepstack_merger_list", deepstack)):
        if calls:
            ms += [Matmul(f"{name}.{fc[0]}", units, merged, merged, True, calls),
                   Matmul(f"{name}.{fc[1]}", units, merged, out, True, calls)]
    if mt == "hyperclovax_vision_v2":   # (the merger's features into the text width)
        ms.append(Matmul("projector", units, out, sizes(cfg["text_config"], "hidden_size")[0], True))
    kind = "full attention over each image" if not windowed else (
        f"attention within windows of {config_value(vision, 'window_size')} px, full on blocks {full}")
    stack = f", {deepstack} DeepStack mergers" if deepstack else ""
    return ImagePath(None, resized, units, tuple(ms),
                     f"{grid}x{grid} patches{note}, {depth} blocks with {kind}, merged {merge}x{merge} into "
                     f"{units} tokens{stack} (the processor's min/max pixels not applied)")
