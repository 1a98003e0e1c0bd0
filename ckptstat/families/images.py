"""What an image costs a vision-language wrapper before its language model reads it (`flops --images N`, `memory
--images N`): the vision tower run whole on it, the projector, and the tokens it puts into the language model's
sequence, as transformers' wrapper's get_image_features computes them.

- LLaVA (modeling_llava.py), PaliGemma (modeling_paligemma.py) and Gemma 3 (modeling_gemma3.py) over a CLIP or SigLIP
  vision tower: the tower as its family's template counts it (families/clip.py, families/siglip.py: ImagePath.tower),
  at the vision config's image_size (the processor resizes every image to it), then the projector's matmuls. LLaVA-NeXT
  and LLaVA-OneVision (modeling_llava_next.py, modeling_llava_onevision.py) the same over their any-resolution tiles
  (ImagePath.crops: --image-size sets the image). Aya Vision (modeling_aya_vision.py): SigLIP tiles (its processor's
  splits and thumbnail: --images counts them), the grid pixel-shuffled by downsample_factor, a SwiGLU projector;
  Command A Vision (modeling_cohere2_vision.py) the same over the tower's last hidden state.
- InternVL (modeling_internvl.py, the transformers-native InternVL 2.5 / 3 / 3.5 "-hf" releases): each image one tile
  at the vision config's image_size (its processor splits a picture into up to max_patches tiles and a thumbnail: each
  tile is one of N images here), its InternViT tower (class token, the layers' q/k/v, attention, projection_layer,
  fc1 / fc2), the patch grid pixel-shuffled by downsample_ratio, the projector's linear_1 and linear_2; stated here as
  matmuls. Idefics3 and SmolVLM (modeling_idefics3.py, modeling_smolvlm.py) likewise: tiles of the vision config's
  image_size (the processor's splits and its global image), a SigLIP-like tower (biased patch conv, q/k/v/out_proj,
  fc1 / fc2), the grid pixel-shuffled by scale_factor and the connector's bias-free modality_projection.
  Llama 4 (modeling_llama4.py: Scout, Maverick) likewise: tiles of the vision config's image_size (the processor's
  tiles and its global tile), the unfolded patches' bias-free linear, a class token, the layers' biased q/k/v/o and
  fc1 / fc2, the patches pixel-shuffled by pixel_shuffle_ratio, the vision adapter's fc1 / fc2 and linear_1.
- Mistral 3 (modeling_mistral3.py over modeling_pixtral.py: Mistral Small 3.1 / 3.2, Magistral, Devstral with vision):
  images at their own size up to the vision config's image_size (--image-size, rounded up to a multiple of patch x
  merge as Pixtral's processor rounds it), the Pixtral tower (bias-free patch conv, q/k/v/o, a SwiGLU MLP) over every
  image of the forward as one sequence (eager and SDPA attention mask the other images' patches: their scores are
  computed, so the attention grows with the square of the batch's patches), the patch merger and linear_1 / linear_2;
  each image's [IMG_BREAK] / [IMG_END] tokens (one a row of merged patches) are among its tokens.
- GLM-4.1V, GLM-4.5V and GLM-4.6V (modeling_glm4v.py, modeling_glm4v_moe.py, modeling_glm46v.py): images at their own
  resolution as Qwen's (--image-size, rounded as their processor's smart_resize rounds it): the biased Conv3d patch
  embedding, full attention over each image (qkv, proj), a SwiGLU MLP of out_hidden_size, the Conv2d downsample over
  each 2 x 2 block of patches, the merger (proj, gate_proj, up_proj of intermediate_size, down_proj); stated here.
- Qwen2-VL, Qwen2.5-VL and Qwen3-VL (dense and MoE: modeling_qwen2_vl.py, modeling_qwen2_5_vl.py, modeling_qwen3_vl.py;
  Qwen2.5-Omni's and Qwen3-Omni's thinkers hold Qwen2.5-VL's and Qwen3-VL's towers):
  images at their own resolution (--image-size, rounded to a multiple of patch x merge as the processor's smart_resize
  rounds it): the Conv3d patch embedding, the blocks (Qwen2-VL: LayerNorm, full attention over each image, fc1 /
  quick_gelu / fc2; Qwen2.5-VL: RMSNorm, attention within windows of window_size pixels but on fullatt_block_indexes, a
  biased SwiGLU MLP; Qwen3-VL: full attention, linear_fc1 / linear_fc2, its learned positions interpolated by look-ups)
  and the patch merger (Qwen3-VL's DeepStack mergers too, after each deepstack_visual_indexes block: their features are
  added to the language model's first layers, no matmul), stated here as matmuls (ImagePath.matmuls).

Any other wrapper: None (`--images` refuses it with one line)."""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import UsageError
from .framework.archspec import ArchSpec
from .framework.base import config_value

# The vision towers whose family describes them: the vision config's model_type -> the class its template counts
# (the whole tower runs, SigLIP's pooling head where the config keeps it), and whether its tokens open with a class token.
TOWERS = {"clip_vision_model": ("CLIPVisionModel", True), "siglip_vision_model": ("SiglipVisionModel", False)}
FIXED = ("llava", "paligemma", "gemma3", "llava_next", "llava_onevision", "aya_vision", "cohere2_vision")   # over TOWERS
# the image_grid_pinpoints when config.json leaves them out (LlavaNextConfig's, LlavaOnevisionConfig's __post_init__)
PINPOINTS = {"llava_next": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]],
             "llava_onevision": [[384 * i, 384 * j] for i in range(1, 7) for j in range(1, 7)]}
# wrappers whose tower reads any size (stated here) -> the Qwen-VL tower they hold (Qwen2.5-Omni's and Qwen3-Omni's
# thinkers: Qwen2.5-VL's and Qwen3-VL's, modeling_qwen2_5_omni.py, modeling_qwen3_omni_moe.py)
QWEN = {"qwen2_vl": "qwen2_vl", "qwen2_5_vl": "qwen2_5_vl", "qwen3_vl": "qwen3_vl", "qwen3_vl_moe": "qwen3_vl",
        "qwen2_5_omni_thinker": "qwen2_5_vl", "qwen3_omni_moe_thinker": "qwen3_vl"}
TILED = ("internvl", "idefics3", "smolvlm", "llama4")   # wrappers that read fixed-size tiles, stated here as matmuls
GLM = ("glm4v", "glm4v_moe", "glm46v")       # GLM-4.1V / 4.5V / 4.6V: Qwen2.5-VL-like, any size (stated here)
STATED = (*QWEN, *TILED, *GLM, "mistral3", "mllama")
ANY_SIZE = (*QWEN, *GLM, "mistral3", "llava_next", "llava_onevision")   # read images at their own size: --image-size
# what the lines above cover, said to users
MODELLED = ("LLaVA, LLaVA-NeXT, LLaVA-OneVision, PaliGemma, Gemma 3, Aya Vision and Command A Vision over a CLIP or "
            "SigLIP tower, InternVL, Idefics3, SmolVLM, Llama 4, Llama 3.2 Vision, Mistral 3, GLM-4.1V / 4.5V / 4.6V, Qwen2-VL, "
            "Qwen2.5-VL, Qwen3-VL and the Qwen2.5-Omni / Qwen3-Omni thinkers")


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
    tower: dict[str, Any] | None     # a TOWERS tower's config, as its family reads it (model_type, architectures)
    side: int                        # the image side the tower reads
    tokens: int                      # the language model's tokens each image becomes
    matmuls: tuple[Matmul, ...]      # the rest of the path: the projector (a Qwen tower: all of it)
    rule: str
    crops: int = 1                   # the tower's forwards an image takes (LLaVA-NeXT: its tiles and the base image)
    cross: int = 0                   # the states an image adds to the language model's cross-attention (Mllama)


def reading(spec: ArchSpec, path: ImagePath | None, count: int) -> ArchSpec:
    """The language model's spec when each sequence holds `count` images of `path`: Mllama's cross-attention layers run
    over their states (ArchSpec.cross_states); any other is unchanged (its images are tokens in the sequence)."""
    return replace(spec, cross_states=count * path.cross) if path is not None and path.cross else spec


def modelled(cfg: Mapping[str, Any]) -> bool:
    """Whether `--images` is modelled for this wrapper's config.json."""
    vision = cfg.get("vision_config")
    return isinstance(vision, Mapping) and isinstance(cfg.get("text_config"), Mapping) and (
        (cfg.get("model_type") in FIXED and vision.get("model_type") in TOWERS) or cfg.get("model_type") in STATED)


def any_size(cfg: Mapping[str, Any]) -> bool:
    """Whether the wrapper reads images at their own size (--image-size needed), not at one its tower fixes."""
    return modelled(cfg) and cfg.get("model_type") in ANY_SIZE


def _attention(prefix: str, heads: int, rows: int, keys: int, d: int, calls: int, what: str = "") -> list[Matmul]:
    """Eager attention's two matmuls of `rows` queries over `keys` keys a head: Q K^T and P V, `calls` times."""
    what = f", {what}" if what else ""
    return [Matmul(f"{prefix}.scores (QK^T{what})", heads * rows, d, keys, False, calls, False),
            Matmul(f"{prefix}.context (PV{what})", heads * rows, keys, d, False, calls, False)]


def _sizes(sub: Mapping[str, Any], *keys: str) -> list[int]:
    """The sub-config's values of `keys`: positive integers, else a UsageError naming the first that is not."""
    out = []
    for k in keys:
        v = config_value(sub, k)
        if type(v) is not int or v <= 0:
            raise UsageError(f"--images: the {sub.get('model_type')} config's {k} is {v!r}, not a positive integer")
        out.append(v)
    return out


def image_path(cfg: Mapping[str, Any], side: int | None = None, per_sequence: int = 1,
               batch: int = 1) -> ImagePath | None:
    """The image path of a wrapper `modelled` covers (None for any other), for images of `side` pixels (None: the
    tower's own size; a Qwen or Pixtral tower has none: UsageError), `per_sequence` in each of `batch` sequences
    (OneVision tiles a sequence's one image only; Pixtral attends over all the batch's images at once). UsageError
    for a side the wrapper cannot read."""
    together = per_sequence * batch
    if not modelled(cfg):
        return None
    if side is None and cfg["model_type"] in ANY_SIZE:
        raise UsageError(f"--images: {cfg['model_type']} reads images at their own size; give --image-size N (the side "
                         "in pixels)")
    if cfg["model_type"] == "mistral3":
        return _mistral3(cfg, side, together)
    if cfg["model_type"] in QWEN:
        return _qwen(cfg, side)
    if cfg["model_type"] in GLM:
        return _glm4v(cfg, side)
    if cfg["model_type"] == "internvl":
        return _internvl(cfg, side)
    if cfg["model_type"] == "llama4":
        return _llama4(cfg, side)
    if cfg["model_type"] == "mllama":
        return _mllama(cfg, side)
    if cfg["model_type"] in TILED:
        return _idefics3(cfg, side)
    vision, text, mt = cfg["vision_config"], cfg["text_config"], cfg["model_type"]
    native, patch, width = _sizes(vision, "image_size", "patch_size", "hidden_size")
    (hidden,) = _sizes(text, "hidden_size")
    if side is not None and side != native and mt not in PINPOINTS:
        raise UsageError(f"--image-size {side}: {mt}'s tower reads {native}x{native} images (its processor resizes "
                         "every image to that)")
    arch, cls_token = TOWERS[str(vision["model_type"])]
    patches, tower = (native // patch) ** 2, {**vision, "architectures": [arch]}
    if mt in PINPOINTS:
        return _any_resolution(cfg, side, per_sequence, tower, native, patch, width, hidden, cls_token)
    if mt == "llava":   # the hidden states of vision_feature_layer (a list: concatenated), "default" drops the first
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
    if mt == "paligemma":   # every patch through one biased Linear to projection_dim (PaliGemmaConfig sets it)
        return ImagePath(tower, native, patches, (Matmul("multi_modal_projector.linear", patches, width,
                                                         int(config_value(cfg, "projection_dim")), True),),
                         "the tower's last hidden state, multi_modal_projector.linear")
    # Gemma 3: the patch grid average-pooled to mm_tokens_per_image, RMS-normed, times mm_input_projection_weight
    per_side, grid = int(config_value(cfg, "mm_tokens_per_image") ** 0.5), native // patch
    kernel = grid // per_side if per_side else 0
    if not kernel:
        raise UsageError(f"--images: {mt}'s {grid}x{grid} patch grid cannot pool to mm_tokens_per_image "
                         f"{config_value(cfg, 'mm_tokens_per_image')}")
    tokens = ((grid - kernel) // kernel + 1) ** 2
    return ImagePath(tower, native, tokens, (Matmul("multi_modal_projector.mm_input_projection_weight", tokens, width,
                                                    hidden, False),),
                     f"the tower's last hidden state average-pooled {kernel}x{kernel}, mm_soft_emb_norm, "
                     "mm_input_projection_weight")


def _best_resolution(side: int, pinpoints: list) -> tuple[int, int]:
    """transformers' select_best_resolution for a square image: the (height, width) that keeps the most of its pixels,
    then wastes the fewest."""
    best, most, waste = (0, 0), 0, float("inf")
    for height, width in pinpoints:
        scale = min(width / side, height / side)
        kept = min(int(side * scale) * int(side * scale), side * side)
        if kept > most or (kept == most and width * height - kept < waste):
            best, most, waste = (height, width), kept, width * height - kept
    return best


def _any_resolution(cfg: Mapping[str, Any], side: int | None, per_sequence: int, tower: dict[str, Any], native: int,
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
    height, width_px = _best_resolution(side, pinpoints)
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


def _pair(v: Any) -> int | None:
    """A square side given as an int or a [height, width] pair (InternVL's image_size, patch_size), else None."""
    if isinstance(v, (list, tuple)) and len(v) == 2 and v[0] == v[1]:
        v = v[0]
    return v if type(v) is int and v > 0 else None


def _internvl(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    native, patch = _tile(cfg, side)
    width, heads, inter, layers, channels = _sizes(vision, "hidden_size", "num_attention_heads", "intermediate_size",
                                                   "num_hidden_layers", "num_channels")
    (hidden,) = _sizes(text, "hidden_size")
    grid = native // patch
    n, d = grid * grid + 1, width // heads   # the patches and the class token
    ratio = config_value(cfg, "downsample_ratio")
    scale = int(1 / ratio) if isinstance(ratio, (int, float)) and 0 < ratio <= 1 else 0
    select = config_value(cfg, "vision_feature_select_strategy")
    if not scale or grid % scale or select != "default":
        raise UsageError(f"--images: internvl with downsample_ratio {ratio!r} over a {grid}x{grid} grid, strategy "
                         f"{select!r}, is not modelled")
    tokens, bias = (grid // scale) ** 2, bool(config_value(vision, "attention_bias"))
    ms = (Matmul("vision_tower.embeddings.patch_embeddings.projection", grid * grid, channels * patch * patch, width,
                 True),
          *(Matmul(f"vision_tower.encoder.layer.attention.{p}_proj", n, width, width, bias, layers) for p in "qkv"),
          *_attention("vision_tower.encoder.layer.attention", heads, n, n, d, layers),
          Matmul("vision_tower.encoder.layer.attention.projection_layer", n, width, width, True, layers),
          Matmul("vision_tower.encoder.layer.mlp.fc1", n, width, inter, True, layers),
          Matmul("vision_tower.encoder.layer.mlp.fc2", n, inter, width, True, layers),
          Matmul("multi_modal_projector.linear_1", tokens, width * scale * scale, hidden, True),
          Matmul("multi_modal_projector.linear_2", tokens, hidden, hidden, True))
    return ImagePath(None, native, tokens, ms,
                     f"one {native}x{native} tile an image (its processor's tiles and thumbnail: count them), "
                     f"{grid}x{grid} patches and a class token through {layers} layers, the patches pixel-shuffled "
                     f"{scale}x{scale} into {tokens} tokens, linear_1, {config_value(cfg, 'projector_hidden_act')}, linear_2")


def _tile(cfg: Mapping[str, Any], side: int | None) -> tuple[int, int]:
    """A tiled wrapper's (tile side, patch side): its vision config's square image_size and patch_size; a usage error for
    another --image-size (its processor cuts every picture into tiles of that side: --images counts tiles)."""
    vision, mt = cfg["vision_config"], cfg["model_type"]
    native, patch = _pair(config_value(vision, "image_size")), _pair(config_value(vision, "patch_size"))
    if native is None or patch is None or patch > native:
        raise UsageError(f"--images: {mt}'s vision image_size {config_value(vision, 'image_size')!r} and patch_size "
                         f"{config_value(vision, 'patch_size')!r} are no square tile")
    if side is not None and side != native:
        raise UsageError(f"--image-size {side}: {mt}'s tower reads {native}x{native} tiles (its processor splits "
                         "every picture into them: count tiles with --images)")
    return native, patch


def _idefics3(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text, mt = cfg["vision_config"], cfg["text_config"], cfg["model_type"]
    native, patch = _tile(cfg, side)
    width, heads, inter, layers, channels = _sizes(vision, "hidden_size", "num_attention_heads", "intermediate_size",
                                                   "num_hidden_layers", "num_channels")
    (hidden,) = _sizes(text, "hidden_size")
    scale, grid = config_value(cfg, "scale_factor"), native // patch
    if type(scale) is not int or scale <= 0 or grid % scale:
        raise UsageError(f"--images: {mt}'s scale_factor {scale!r} does not divide its {grid}x{grid} patch grid")
    n, d, tokens = grid * grid, width // heads, (grid // scale) ** 2
    ms = (Matmul("vision_model.embeddings.patch_embedding", n, channels * patch * patch, width, True),
          *(Matmul(f"vision_model.encoder.layers.self_attn.{p}_proj", n, width, width, True, layers) for p in "qkv"),
          *_attention("vision_model.encoder.layers.self_attn", heads, n, n, d, layers),
          Matmul("vision_model.encoder.layers.self_attn.out_proj", n, width, width, True, layers),
          Matmul("vision_model.encoder.layers.mlp.fc1", n, width, inter, True, layers),
          Matmul("vision_model.encoder.layers.mlp.fc2", n, inter, width, True, layers),
          Matmul("connector.modality_projection.proj", tokens, width * scale * scale, hidden, False))
    return ImagePath(None, native, tokens, ms,
                     f"one {native}x{native} tile an image (its processor's tiles and global image: count them), "
                     f"{grid}x{grid} patches through {layers} layers, pixel-shuffled {scale}x{scale} into {tokens} "
                     "tokens, modality_projection")


def _llama4(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    native, patch = _tile(cfg, side)
    width, heads, inter, layers, channels, adapter_in, adapter_out, out = _sizes(
        vision, "hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers", "num_channels",
        "projector_input_dim", "projector_output_dim", "vision_output_dim")
    (hidden,) = _sizes(text, "hidden_size")
    ratio, grid = config_value(vision, "pixel_shuffle_ratio"), native // patch
    scale = round(1 / ratio) if isinstance(ratio, (int, float)) and 0 < ratio <= 1 else 0
    if not scale or scale * ratio != 1 or grid % scale:
        raise UsageError(f"--images: llama4's pixel_shuffle_ratio {ratio!r} does not divide its {grid}x{grid} patch grid")
    n, d, tokens = grid * grid + 1, width // heads, (grid // scale) ** 2   # the patches and a class token
    ms = (Matmul("vision_model.patch_embedding.linear", grid * grid, channels * patch * patch, width, False),
          *(Matmul(f"vision_model.model.layers.self_attn.{p}_proj", n, width, width, True, layers) for p in "qkv"),
          *_attention("vision_model.model.layers.self_attn", heads, n, n, d, layers),
          Matmul("vision_model.model.layers.self_attn.o_proj", n, width, width, True, layers),
          Matmul("vision_model.model.layers.mlp.fc1", n, width, inter, True, layers),
          Matmul("vision_model.model.layers.mlp.fc2", n, inter, width, True, layers),
          # (the adapter's fc1 reads the shuffled width through a Linear of intermediate_size inputs: equal in a model
          # that runs)
          Matmul("vision_model.vision_adapter.mlp.fc1", tokens, inter, adapter_in, False),
          Matmul("vision_model.vision_adapter.mlp.fc2", tokens, adapter_out, adapter_out, False),
          Matmul("multi_modal_projector.linear_1", tokens, out, hidden, False))
    return ImagePath(None, native, tokens, ms,
                     f"one {native}x{native} tile an image (its processor's tiles and global tile: count them; its "
                     f"separator tokens are text), {grid}x{grid} patches and a class token through {layers} layers, "
                     f"the patches pixel-shuffled {scale}x{scale} into {tokens} tokens, the adapter's fc1 / fc2, "
                     "linear_1")


def _mllama(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    native, patch = _pair(config_value(vision, "image_size")), _pair(config_value(vision, "patch_size"))
    if native is None or patch is None or patch > native:
        raise UsageError(f"--images: mllama's vision image_size {config_value(vision, 'image_size')!r} and patch_size "
                         f"{config_value(vision, 'patch_size')!r} are no square tile")
    tiles, width, heads, inter, layers, glob, channels, out = _sizes(
        vision, "max_num_tiles", "hidden_size", "attention_heads", "intermediate_size", "num_hidden_layers",
        "num_global_layers", "num_channels", "vision_output_dim")
    if side is not None and side != native:
        raise UsageError(f"--image-size {side}: mllama's processor fits every image into {tiles} tiles of {native} px "
                         "and the tower runs all of them, whatever the side")
    (hidden,) = _sizes(text, "hidden_size")
    grid = native // patch
    per = grid * grid + 1                  # a tile's patches and its class token
    padded = per + (8 - per % 8) % 8       # (the tower pads each tile's to a multiple of 8)
    n, d = tiles * padded, width // heads  # one sequence of every tile
    ms = [Matmul("vision_model.patch_embedding", tiles * grid * grid, channels * patch * patch, width, False),
          # (_prepare_aspect_ratio_attention_mask: the tiles' [n, 1] mask times its transpose, a matmul)
          Matmul("vision_model.attention_mask (mask @ mask^T)", n, 1, n, False, 1, False)]
    for encoder, count in (("transformer", layers), ("global_transformer", glob)):
        at = f"vision_model.{encoder}.layers"
        ms += [Matmul(f"{at}.self_attn.{p}_proj", n, width, width, False, count) for p in "qkv"]
        ms += [*_attention(f"{at}.self_attn", heads, n, n, d, count),
               Matmul(f"{at}.self_attn.o_proj", n, width, width, False, count),
               Matmul(f"{at}.mlp.fc1", n, width, inter, True, count),
               Matmul(f"{at}.mlp.fc2", n, inter, width, True, count)]
    ms.append(Matmul("multi_modal_projector", tiles * per, out, hidden, True))
    return ImagePath(None, native, 1, tuple(ms),
                     f"every image padded to {tiles} tiles of {native} px (the processor's; masked tiles are computed), "
                     f"{tiles} x {per} patches and class tokens (padded to {padded} a tile) through {layers} layers and "
                     f"{glob} gated global layers as one sequence, the projector over {tiles * per} states that the "
                     "language model's cross-attention layers read; one <|image|> token in the sequence",
                     cross=tiles * per)


def _mistral3(cfg: Mapping[str, Any], side: int | None, together: int) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    assert side is not None   # (image_path: ANY_SIZE)
    width, heads, inter, layers, channels = _sizes(vision, "hidden_size", "num_attention_heads", "intermediate_size",
                                                   "num_hidden_layers", "num_channels")
    longest, patch = _pair(config_value(vision, "image_size")), _pair(config_value(vision, "patch_size"))
    merge, layer = config_value(cfg, "spatial_merge_size"), config_value(cfg, "vision_feature_layer")
    (hidden,) = _sizes(text, "hidden_size")
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
          *_attention("vision_tower.transformer.layers.attention", heads, n, together * n, d, layers,
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


def _resized(side: int, factor: int) -> int:
    """The side the processors' smart_resize gives a square image (rounded to a multiple of `factor`; their min/max
    pixels, processor settings, not applied)."""
    return max(factor, round(side / factor) * factor)


def _glm4v(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision = cfg["vision_config"]
    assert side is not None   # (image_path: ANY_SIZE)
    patch, temporal, merge, channels, depth, heads, width, out, inter = _sizes(
        vision, "patch_size", "temporal_patch_size", "spatial_merge_size", "in_channels", "depth", "num_heads",
        "hidden_size", "out_hidden_size", "intermediate_size")
    resized = _resized(side, patch * merge)
    grid = resized // patch
    n, units, d = grid * grid, (grid // merge) ** 2, width // heads
    bias = bool(config_value(vision, "attention_bias"))
    ms = (Matmul("visual.patch_embed.proj", n, channels * temporal * patch * patch, width, True),
          Matmul("visual.blocks.attn.qkv", n, width, 3 * width, bias, depth),
          *_attention("visual.blocks.attn", heads, n, n, d, depth),
          Matmul("visual.blocks.attn.proj", n, width, width, False, depth),
          *(Matmul(f"visual.blocks.mlp.{p}", n, width, out, False, depth) for p in ("gate_proj", "up_proj")),
          Matmul("visual.blocks.mlp.down_proj", n, out, width, False, depth),
          Matmul("visual.downsample", units, width * merge * merge, out, True),
          Matmul("visual.merger.proj", units, out, out, False),
          *(Matmul(f"visual.merger.{p}", units, out, inter, False) for p in ("gate_proj", "up_proj")),
          Matmul("visual.merger.down_proj", units, inter, out, False))
    note = f" ({side} px rounded to {resized}, as the processor's smart_resize rounds it)" if resized != side else ""
    return ImagePath(None, resized, units, ms,
                     f"{grid}x{grid} patches{note}, {depth} blocks with full attention over each image, downsampled "
                     f"{merge}x{merge} into {units} tokens, the merger (the processor's min/max pixels not applied)")


def _windows(grid: int, size: int) -> list[int]:
    """The sides, in merged units, of the windows a grid of `grid` units splits into along one axis (windows of `size`,
    the last short: transformers' get_vision_window_index pads and drops the empty ones)."""
    return [size] * (grid // size) + ([grid % size] if grid % size else [])


def _qwen(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    mt, vision = cfg["model_type"], cfg["vision_config"]
    assert side is not None   # (image_path: ANY_SIZE)
    v2, v3 = QWEN[mt] == "qwen2_vl", QWEN[mt] == "qwen3_vl"
    width_key, out_key = ("embed_dim", "hidden_size") if v2 else ("hidden_size", "out_hidden_size")
    patch, temporal, merge, channels, depth, heads, width, out = _sizes(
        vision, "patch_size", "temporal_patch_size", "spatial_merge_size", "in_channels", "depth", "num_heads",
        width_key, out_key)
    factor = patch * merge   # the processor's smart_resize: the side rounded to a multiple of patch x merge
    resized = _resized(side, factor)
    grid = resized // patch
    n, units, d = grid * grid, (grid // merge) ** 2, width // heads
    full = [i for i in (config_value(vision, "fullatt_block_indexes") or ()) if 0 <= i < depth] if QWEN[mt] == "qwen2_5_vl" else \
        list(range(depth))
    windowed = depth - len(full)
    ms: list[Matmul] = [Matmul("visual.patch_embed.proj", n, channels * temporal * patch * patch, width, v3)]
    ms += [Matmul("visual.blocks.attn.qkv", n, width, 3 * width, True, depth),
           Matmul("visual.blocks.attn.proj", n, width, width, True, depth)]
    if full:   # one image a chunk: Q K^T and P V per head
        ms += _attention("visual.blocks.attn", heads, n, n, d, len(full), f"full, {len(full)} blocks")
    if windowed:   # each window a chunk: windows of one size a row (calls: blocks x windows)
        unit = (config_value(vision, "window_size") or 0) // merge // patch
        if unit <= 0:
            raise UsageError(f"--images: {mt}'s window_size {config_value(vision, 'window_size')!r} is under a merged patch")
        sides = _windows(grid // merge, unit)
        sizes = Counter(r * c * merge * merge for r in sides for c in sides)
        for w, count in sorted(sizes.items(), reverse=True):
            ms += _attention("visual.blocks.attn", heads, w, w, d, windowed * count,
                             f"{count} windows of {w} patches, {windowed} blocks")
    if v2:
        inter = int(width * (config_value(vision, "mlp_ratio") or 4))
        ms += [Matmul("visual.blocks.mlp.fc1", n, width, inter, True, depth),
               Matmul("visual.blocks.mlp.fc2", n, inter, width, True, depth)]
    elif v3:
        (inter,) = _sizes(vision, "intermediate_size")
        ms += [Matmul("visual.blocks.mlp.linear_fc1", n, width, inter, True, depth),
               Matmul("visual.blocks.mlp.linear_fc2", n, inter, width, True, depth)]
    else:
        (inter,) = _sizes(vision, "intermediate_size")
        ms += [Matmul(f"visual.blocks.mlp.{p}", n, width, inter, True, depth) for p in ("gate_proj", "up_proj")]
        ms += [Matmul("visual.blocks.mlp.down_proj", n, inter, width, True, depth)]
    merged = width * merge * merge
    fc = ("linear_fc1", "linear_fc2") if v3 else ("mlp.0", "mlp.2")
    deepstack = len([i for i in (config_value(vision, "deepstack_visual_indexes") or ()) if 0 <= i < depth]) if v3 else 0
    for name, calls in (("visual.merger", 1), ("visual.deepstack_merger_list", deepstack)):
        if calls:
            ms += [Matmul(f"{name}.{fc[0]}", units, merged, merged, True, calls),
                   Matmul(f"{name}.{fc[1]}", units, merged, out, True, calls)]
    note = f" ({side} px rounded to {resized}, a multiple of {factor}, as the processor's smart_resize rounds it)" \
        if resized != side else ""
    attention = "full attention over each image" if not windowed else (
        f"attention within windows of {config_value(vision, 'window_size')} px, full on blocks {full}")
    stack = f", {deepstack} DeepStack mergers" if deepstack else ""
    return ImagePath(None, resized, units, tuple(ms),
                     f"{grid}x{grid} patches{note}, {depth} blocks with {attention}, merged {merge}x{merge} into "
                     f"{units} tokens{stack} (the processor's min/max pixels not applied)")
