"""LLaVA (modeling_llava.py), PaliGemma (modeling_paligemma.py) and Gemma 3 (modeling_gemma3.py) over a CLIP or SigLIP
vision tower: the tower as its family's template counts it (families/clip.py, families/siglip.py: ImagePath.tower), at
the vision config's image_size (the processor resizes every image to it), then the projector's matmuls; Video-LLaVA's
images (modeling_video_llava.py: its image_tower) as LLaVA's. LLaVA-NeXT, LLaVA-NeXT-Video's images and LLaVA-OneVision
(modeling_llava_next.py, modeling_llava_next_video.py, modeling_llava_onevision.py) the same over their any-resolution
tiles (ImagePath.crops: --image-size sets the image). Aya Vision (modeling_aya_vision.py): SigLIP tiles (its processor's
splits and thumbnail: --images counts them), the grid pixel-shuffled by downsample_factor, a SwiGLU projector; Command A
Vision (modeling_cohere2_vision.py) the same over the tower's last hidden state. VipLLaVA (modeling_vipllava.py): several
layers' states concatenated, a LayerNorm and LLaVA's projector. ShieldGemma 2 (its Gemma 3 wrapper) as Gemma 3.
DeepSeek-VL (modeling_deepseek_vl.py): its
SigLIP's last hidden state through the aligner's linear1 and linear2, a token a patch; DeepSeek-VL-Hybrid that and a SAM
tower at high resolution (hybrid)."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...errors import UsageError
from ..framework.base import config_value
from .path import ImagePath, Matmul, fixed_side, neck, pair, sam, sizes, stride2

# The vision towers whose family describes them: the vision config's model_type -> the class its template counts
# (the whole tower runs, SigLIP's pooling head where the config keeps it), and whether its tokens open with a class token.
TOWERS = {"clip_vision_model": ("CLIPVisionModel", True), "siglip_vision_model": ("SiglipVisionModel", False)}
FIXED = ("llava", "video_llava", "vipllava", "paligemma", "gemma3", "shieldgemma2", "llava_next", "llava_next_video",
         "llava_onevision", "aya_vision", "cohere2_vision", "deepseek_vl", "deepseek_vl_hybrid")   # over TOWERS
# the image_grid_pinpoints when config.json leaves them out (LlavaNextConfig's, LlavaOnevisionConfig's __post_init__)
PINPOINTS = {"llava_next": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]],
             "llava_next_video": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]],
             "llava_onevision": [[384 * i, 384 * j] for i in range(1, 7) for j in range(1, 7)]}


def fixed(cfg: Mapping[str, Any], side: int | None, per_sequence: int) -> ImagePath:
    """The image path of a FIXED wrapper over a TOWERS tower (image_path has checked both)."""
    vision, text, mt = cfg["vision_config"], cfg["text_config"], cfg["model_type"]
    native, patch, width = sizes(vision, "image_size", "patch_size", "hidden_size")
    (hidden,) = sizes(text, "hidden_size")
    if mt not in PINPOINTS:
        fixed_side(mt, side, native, "images (its processor resizes every image to that)")
    arch, cls_token = TOWERS[str(vision["model_type"])]
    patches, tower = (native // patch) ** 2, {**vision, "architectures": [arch]}
    if mt in PINPOINTS:
        return any_resolution(cfg, side, per_sequence, tower, native, patch, width, hidden, cls_token)
    if mt in ("llava", "video_llava"):   # vision_feature_layer's hidden states (a list: concatenated); "default" drops
        # the first
        layer, select = config_value(cfg, "vision_feature_layer"), config_value(cfg, "vision_feature_select_strategy")
        layers = len(layer) if isinstance(layer, list) else 1
        tokens = patches + cls_token - (select == "default")
        bias = bool(config_value(cfg, "multimodal_projector_bias"))
        return ImagePath(tower, native, tokens,
                         (Matmul("multi_modal_projector.linear_1", tokens, width * layers, hidden, bias),
                          Matmul("multi_modal_projector.linear_2", tokens, hidden, hidden, bias)),
                         f"the tower's hidden states at layer(s) {layer} ({select}: "
                         f"{'without' if select == 'default' else 'with'} its first token), linear_1, "
                         f"{config_value(cfg, 'projector_hidden_act')}, linear_2")
    if mt in ("aya_vision", "cohere2_vision"):   # every tile's grid pixel-shuffled, (Aya: LayerNorm,) linear_1,
        factor, grid = config_value(cfg, "downsample_factor"), native // patch   # SwiGLU on its two halves, linear_2
        layer, select = (config_value(cfg, "vision_feature_layer"), config_value(cfg, "vision_feature_select_strategy")) \
            if mt == "aya_vision" else (-1, "full")   # (Command A Vision reads the last hidden state)
        if type(factor) is not int or factor <= 0 or grid % factor or not isinstance(layer, int) or select != "full" \
                or cls_token:
            raise UsageError(f"--images: {mt} with downsample_factor {factor!r}, vision_feature_layer {layer!r}, "
                             f"strategy {select!r} over a {grid}x{grid} grid is not modelled")
        align = cfg.get("alignment_intermediate_size") or hidden if mt == "aya_vision" else \
            config_value(cfg, "alignment_intermediate_size")   # (Aya's projector's getattr default; Cohere's class's)
        tokens = (grid // factor) ** 2
        return ImagePath(tower, native, tokens,
                         (Matmul("multi_modal_projector.linear_1", tokens, width * factor * factor, align, True),
                          Matmul("multi_modal_projector.linear_2", tokens, align // 2, hidden, True)),
                         f"one {native}x{native} tile an image (its processor's tiles and thumbnail: count them), the "
                         f"grid pixel-shuffled {factor}x{factor} into {tokens} tokens, linear_1, SwiGLU, linear_2")
    if mt == "vipllava":   # the hidden states of its vision_feature_layer list, each without its first token,
        layer = config_value(cfg, "vision_feature_layer")   # concatenated; LayerNorm, linear_1, act, linear_2
        layers, tokens = len(layer) if isinstance(layer, (list, tuple)) else 1, patches + cls_token - 1
        return ImagePath(tower, native, tokens,
                         (Matmul("multi_modal_projector.linear_1", tokens, width * layers, hidden, True),
                          Matmul("multi_modal_projector.linear_2", tokens, hidden, hidden, True)),
                         f"the tower's hidden states at layers {layer}, each without its first token, concatenated, "
                         f"projector_layernorm, linear_1, {config_value(cfg, 'projector_hidden_act')}, linear_2")
    if mt == "deepseek_vl_hybrid":
        return hybrid(cfg, tower, native, native // patch, width, hidden)
    if mt == "deepseek_vl":   # every patch of the last hidden state through the aligner's linear1, GELU, linear2
        return ImagePath(tower, native, patches, (Matmul("aligner.linear1", patches, width, hidden, True),
                                                  Matmul("aligner.linear2", patches, hidden, hidden, True)),
                         "the tower's last hidden state, the aligner's linear1, GELU, linear2")
    if mt == "paligemma":   # every patch through one biased Linear to projection_dim (PaliGemmaConfig sets it)
        return ImagePath(tower, native, patches, (Matmul("multi_modal_projector.linear", patches, width,
                                                         int(config_value(cfg, "projection_dim")), True),),
                         "the tower's last hidden state, multi_modal_projector.linear")
    # Gemma 3: the patch grid average-pooled to mm_tokens_per_image, RMS-normed, times mm_input_projection_weight
    per_side, grid = int(sizes(cfg, "mm_tokens_per_image")[0] ** 0.5), native // patch
    kernel = grid // per_side if per_side else 0
    if not kernel:
        raise UsageError(f"--images: {mt}'s {grid}x{grid} patch grid cannot pool to mm_tokens_per_image "
                         f"{config_value(cfg, 'mm_tokens_per_image')}")
    tokens = ((grid - kernel) // kernel + 1) ** 2
    return ImagePath(tower, native, tokens, (Matmul("multi_modal_projector.mm_input_projection_weight", tokens, width,
                                                    hidden, False),),
                     f"the tower's last hidden state average-pooled {kernel}x{kernel}, mm_soft_emb_norm, "
                     "mm_input_projection_weight")


def best_resolution(side: int, pinpoints: list) -> tuple[int, int]:
    """transformers' select_best_resolution for a square image: the (height, width) that keeps the most of its pixels,
    then wastes the fewest."""
    best, most, waste = (0, 0), 0, float("inf")
    for height, width in pinpoints:
        scale = min(width / side, height / side)
        kept = min(int(side * scale) * int(side * scale), side * side)
        if kept > most or (kept == most and width * height - kept < waste):
            best, most, waste = (height, width), kept, width * height - kept
    return best


def any_resolution(cfg: Mapping[str, Any], side: int | None, per_sequence: int, tower: dict[str, Any], native: int,
                    patch: int, width: int, hidden: int, cls_token: bool) -> ImagePath:
    """LLaVA-NeXT and LLaVA-OneVision (modeling_llava_next.py, modeling_llava_onevision.py): a square image of `side`
    pixels as their processor tiles it: the pinpoint select_best_resolution picks, cut into tiles of the tower's size,
    and the whole image resized to one more; every tile through the tower and the projector; the tiles' feature grid
    unpadded to the image's aspect (square: the padding the best resolution adds; OneVision: then resized down when it
    holds more than vision_aspect_ratio's anyres_max_N tiles' features by over 1.1x, no matmul), a learned
    image_newline after each of its rows, the base tile's features first. OneVision tiles an image only when it is its
    sequence's one image (batch_num_images): several, each is the base tile and a newline."""
    mt = cfg["model_type"]
    assert side is not None   # (image_path: ANY_SIZE)
    pinpoints = config_value(cfg, "image_grid_pinpoints") or PINPOINTS[mt]
    if not (isinstance(pinpoints, list) and pinpoints and all(
            isinstance(p, list) and len(p) == 2 and all(type(x) is int and x > 0 for x in p) for p in pinpoints)):
        raise UsageError(f"--images: {mt}'s image_grid_pinpoints {pinpoints!r} are no list of [height, width]")
    layer, select = config_value(cfg, "vision_feature_layer"), config_value(cfg, "vision_feature_select_strategy")
    grid = native // patch
    per = grid * grid + cls_token - (select == "default")
    if per != grid * grid:   # (pack_image_features views each tile's features as its patch grid)
        raise UsageError(f"--images: {mt} with vision_feature_select_strategy {select!r} over this tower is not modelled")
    layers = len(layer) if isinstance(layer, list) else 1
    bias, act = bool(config_value(cfg, "multimodal_projector_bias")), config_value(cfg, "projector_hidden_act")
    if mt == "llava_onevision" and per_sequence > 1:
        return ImagePath(tower, native, per + 1,
                         (Matmul("multi_modal_projector.linear_1", per, width * layers, hidden, bias),
                          Matmul("multi_modal_projector.linear_2", per, hidden, hidden, bias)),
                         f"several images a sequence: each resized to one {native} px tile (no tiles), its {per} "
                         f"features and an image_newline; linear_1, {act}, linear_2")
    height, width_px = best_resolution(side, pinpoints)
    rows, cols = -(-height // native), -(-width_px // native)   # (its loops count a partial tile as one)
    cur_h, cur_w = rows * grid, cols * grid
    if 1 > cur_w / cur_h:   # (the square's aspect over the grid's: unpad_image, as it computes it)
        kept_h, kept_w = cur_h - 2 * ((cur_h - int(round(side * (cur_w / side), 7))) // 2), cur_w
    else:
        kept_h, kept_w = cur_h, cur_w - 2 * ((cur_w - int(round(side * (cur_h / side), 7))) // 2)
    shrunk = ""
    if mt == "llava_onevision":
        most = str(config_value(cfg, "vision_aspect_ratio") or "anyres_max_9").removeprefix("anyres_max_")
        ratio = math.sqrt(kept_h * kept_w / (int(most) * grid ** 2)) if most.isdigit() else 0.0
        if ratio > 1.1:
            kept_h, kept_w = int(kept_h // ratio), int(kept_w // ratio)
            shrunk = f", resized to {kept_h}x{kept_w} (over {most} tiles' features)"
    crops = rows * cols + 1
    return ImagePath(tower, side, per + kept_h * (kept_w + 1),
                     (Matmul("multi_modal_projector.linear_1", crops * per, width * layers, hidden, bias),
                      Matmul("multi_modal_projector.linear_2", crops * per, hidden, hidden, bias)),
                     f"tiled as {height}x{width_px} ({rows}x{cols} tiles of {native} px and the whole image: {crops} "
                     f"through the tower), the tiles' {cur_h}x{cur_w} features unpadded{shrunk} to {kept_h}x{kept_w}, "
                     f"an image_newline a row, the base tile's {per} first; linear_1, {act}, linear_2", crops)


def hybrid(cfg: Mapping[str, Any], tower: dict[str, Any], native: int, side: int, width: int,
           hidden: int) -> ImagePath:
    """DeepSeek-VL-Hybrid (modeling_deepseek_vl_hybrid.py): the SigLIP tower at its image_size and a SAM tower at
    high_res_vision_config's; the SAM's last state (after its neck) and its global_attn_indexes[0] layer's state (through
    high_res_vision_neck) each resized to 4 x SigLIP's grid (bilinear, no matmul) and through high_res_vision_proj's two
    stride-2 3x3 convolutions; the aligner's vision_proj and high_res_vision_proj, concatenated, GELU, proj. `side`:
    SigLIP's patch grid (the model's output_size)."""
    high = {"model_type": "sam_vision_model", **(cfg.get("high_res_vision_config") or {})}
    high_side, high_patch = pair(config_value(high, "image_size")), pair(config_value(high, "patch_size"))
    if high_side is None or high_patch is None:
        raise UsageError(f"--images: deepseek_vl_hybrid's high_res_vision_config image_size "
                         f"{config_value(high, 'image_size')!r} and patch_size {config_value(high, 'patch_size')!r} "
                         "are no square image")
    ms, grid = sam("high_res_vision_model", high, high_side, high_patch)
    hwidth, out = sizes(high, "hidden_size", "output_channels")
    patches, half = side * side, stride2(4 * side)
    ms += [*neck("high_res_vision_neck (the global layer's state)", grid, hwidth, out),
           Matmul("high_res_vision_proj.conv1 (3x3, stride 2)", half * half, out * 9, 2 * out, False, 2),
           Matmul("high_res_vision_proj.conv2 (3x3, stride 2)", stride2(half) ** 2, 2 * out * 9, 4 * out, False, 2),
           Matmul("aligner.vision_proj", patches, width, hidden // 2, True),
           Matmul("aligner.high_res_vision_proj", patches, 4 * out, hidden // 2, True),
           Matmul("aligner.proj", patches, hidden, hidden, True)]
    return ImagePath(tower, native, patches, tuple(ms),
                     f"a {native} px image through SigLIP and a {high_side} px one through SAM ({grid}x{grid} patches, "
                     f"its neck, and its global layer's state through another), both SAM states resized to {4 * side}x"
                     f"{4 * side} and through two stride-2 convolutions, the aligner over {patches} tokens")

