"""Wrappers that read fixed-size tiles (--images counts tiles) or images, their towers stated as matmuls
(ImagePath.matmuls).

- InternVL (modeling_internvl.py, the transformers-native InternVL 2.5 / 3 / 3.5 "-hf" releases; Qianfan-OCR's, its
  modular_qianfan_ocr.py: InternVL's modules, drop paths aside): each image one tile
  at the vision config's image_size (its processor splits a picture into up to max_patches tiles and a thumbnail: each
  tile is one of N images here), its InternViT tower (class token, the layers' q/k/v, attention, projection_layer,
  fc1 / fc2), the patch grid pixel-shuffled by downsample_ratio, the projector's linear_1 and linear_2.
- Idefics3 and SmolVLM (modeling_idefics3.py, modeling_smolvlm.py) likewise: tiles of the vision config's image_size
  (the processor's splits and its global image), a SigLIP-like tower (biased patch conv, q/k/v/out_proj, fc1 / fc2),
  the grid pixel-shuffled by scale_factor and the connector's bias-free modality_projection.
- Llama 4 (modeling_llama4.py: Scout, Maverick) likewise: tiles of the vision config's image_size (the processor's
  tiles and its global tile), the unfolded patches' bias-free linear, a class token, the layers' biased q/k/v/o and
  fc1 / fc2, the patches pixel-shuffled by pixel_shuffle_ratio, the vision adapter's fc1 / fc2 and linear_1.
- Janus (modeling_janus.py: Janus-Pro's understanding path) reads one image at the vision config's image_size: its
  SigLIP-like tower (biased patch conv, q/k/v (attention_bias), projection_layer, fc1 / fc2 of mlp_ratio), every patch
  a token through the aligner's fc1 and depth - 1 hidden layers (its image generation path is not run on text).
- Ovis2 (modeling_ovis2.py): tiles of the vision config's image_size (its processor's tiles and global image), its
  AIMv2-like tower (patch conv, q/k/v/out_proj, a SwiGLU MLP), each hidden_stride x hidden_stride block of patches
  through head_linear onto the visual vocabulary, softmax, and the probabilities times the visual embedding table (a
  matmul): a token a block.
- BLIP-2 (modeling_blip_2.py) reads one image at the vision config's image_size: its ViT (biased patch conv, a class
  token, a fused qkv, projection, fc1 / fc2), then num_query_tokens learned queries through the Q-Former (self-attention
  on every layer, cross-attention over the image's states on every cross_attention_frequency-th, the query MLP) and
  language_projection: a token a query.
- GOT-OCR2 (modeling_got_ocr2.py) reads one image (or crop) at the vision config's image_size: its SAM ViT (the patch
  conv; per layer a fused qkv over the patches, or over the grid padded to whole windows on the windowed layers,
  attention within each window or over the whole grid on global_attn_indexes, the decomposed relative positions' two
  einsums, proj, lin1 / lin2), the neck's 1x1 and 3x3 convolutions, the projector's two stride-2 3x3 convolutions and
  multimodal_projector: a token a pixel of the last convolution.
- Aria (modeling_aria.py): every image resized and padded to its processor's default max_image_size (980), an
  Idefics3-like tower over its patches, then projector_patch_to_query_dict's learned queries cross-attending over them
  (q/k/v_proj, nn.MultiheadAttention's in_proj and out_proj, linear) and the feed-forward: a token a query.
- Gemma 4 (modeling_gemma4.py) pads every image's patches to its processor's max_soft_tokens x pooling_kernel_size^2
  (the default 280 x 9: a setting config.json does not hold) and runs them all (padding masked, computed): the bias-free
  input_proj, layers of q/k/v/o (grouped keys and values, head_dim), a gated MLP, the pooler's one-hot average over
  kernel x kernel patches (a matmul of the max soft tokens by the padded patches), embed_vision over the image's soft
  tokens; a square image is scaled to fill the patch budget (get_aspect_ratio_preserving_size), so its side does not
  change its tokens.
- Llama 3.2 Vision (modeling_mllama.py) counts images, not tiles: every image padded to max_num_tiles tiles through the
  local and gated global layers as one sequence, the projector; the language model's cross-attention layers read its
  states (ImagePath.cross), one <|image|> token in the sequence."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...errors import UsageError
from ..framework.base import config_value
from .path import ImagePath, Matmul, attention, encoder, fixed_side, pair, sam, sizes, stride2


def internvl(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    native, patch = tile(cfg, side)
    width, heads, inter, layers, channels = sizes(vision, "hidden_size", "num_attention_heads", "intermediate_size",
                                                   "num_hidden_layers", "num_channels")
    (hidden,) = sizes(text, "hidden_size")
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
          *encoder("vision_tower.encoder.layer", n, width, heads, d, inter, layers, bias, "attention.projection_layer",
                   attn="attention"),
          Matmul("multi_modal_projector.linear_1", tokens, width * scale * scale, hidden, True),
          Matmul("multi_modal_projector.linear_2", tokens, hidden, hidden, True))
    return ImagePath(None, native, tokens, ms,
                     f"one {native}x{native} tile an image (its processor's tiles and thumbnail: count them), "
                     f"{grid}x{grid} patches and a class token through {layers} layers, the patches pixel-shuffled "
                     f"{scale}x{scale} into {tokens} tokens, linear_1, {config_value(cfg, 'projector_hidden_act')}, linear_2")


TILES = "tiles (its processor splits every picture into them: count tiles with --images)"


def tile(cfg: Mapping[str, Any], side: int | None, reads: str = TILES) -> tuple[int, int]:
    """A tiled wrapper's (tile side, patch side): its vision config's square image_size and patch_size; a usage error for
    another --image-size, saying what the tower `reads` at that side."""
    vision, mt = cfg["vision_config"], cfg["model_type"]
    native, patch = pair(config_value(vision, "image_size")), pair(config_value(vision, "patch_size"))
    if native is None or patch is None or patch > native:
        raise UsageError(f"--images: {mt}'s vision image_size {config_value(vision, 'image_size')!r} and patch_size "
                         f"{config_value(vision, 'patch_size')!r} are no square tile")
    fixed_side(mt, side, native, reads)
    return native, patch


def idefics3(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text, mt = cfg["vision_config"], cfg["text_config"], cfg["model_type"]
    native, patch = tile(cfg, side)
    width, heads, inter, layers, channels = sizes(vision, "hidden_size", "num_attention_heads", "intermediate_size",
                                                   "num_hidden_layers", "num_channels")
    (hidden,) = sizes(text, "hidden_size")
    scale, grid = config_value(cfg, "scale_factor"), native // patch
    if type(scale) is not int or scale <= 0 or grid % scale:
        raise UsageError(f"--images: {mt}'s scale_factor {scale!r} does not divide its {grid}x{grid} patch grid")
    n, d, tokens = grid * grid, width // heads, (grid // scale) ** 2
    ms = (Matmul("vision_model.embeddings.patch_embedding", n, channels * patch * patch, width, True),
          *encoder("vision_model.encoder.layers", n, width, heads, d, inter, layers),
          Matmul("connector.modality_projection.proj", tokens, width * scale * scale, hidden, False))
    return ImagePath(None, native, tokens, ms,
                     f"one {native}x{native} tile an image (its processor's tiles and global image: count them), "
                     f"{grid}x{grid} patches through {layers} layers, pixel-shuffled {scale}x{scale} into {tokens} "
                     "tokens, modality_projection")


def llama4(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    native, patch = tile(cfg, side)
    width, heads, inter, layers, channels, adapter_in, adapter_out, out = sizes(
        vision, "hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers", "num_channels",
        "projector_input_dim", "projector_output_dim", "vision_output_dim")
    (hidden,) = sizes(text, "hidden_size")
    ratio, grid = config_value(vision, "pixel_shuffle_ratio"), native // patch
    scale = round(1 / ratio) if isinstance(ratio, (int, float)) and 0 < ratio <= 1 else 0
    if not scale or scale * ratio != 1 or grid % scale:
        raise UsageError(f"--images: llama4's pixel_shuffle_ratio {ratio!r} does not divide its {grid}x{grid} patch grid")
    n, d, tokens = grid * grid + 1, width // heads, (grid // scale) ** 2   # the patches and a class token
    ms = (Matmul("vision_model.patch_embedding.linear", grid * grid, channels * patch * patch, width, False),
          *encoder("vision_model.model.layers", n, width, heads, d, inter, layers, out="self_attn.o_proj"),
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


def mllama(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    tiles, width, heads, inter, layers, glob, channels, out = sizes(
        vision, "max_num_tiles", "hidden_size", "attention_heads", "intermediate_size", "num_hidden_layers",
        "num_global_layers", "num_channels", "vision_output_dim")
    native, patch = tile(cfg, side, f"tiles, {tiles} an image (its processor pads every image to them and the tower "
                         "runs all, whatever the side)")
    (hidden,) = sizes(text, "hidden_size")
    grid = native // patch
    per = grid * grid + 1                  # a tile's patches and its class token
    padded = per + (8 - per % 8) % 8       # (the tower pads each tile's to a multiple of 8)
    n, d = tiles * padded, width // heads  # one sequence of every tile
    ms = [Matmul("vision_model.patch_embedding", tiles * grid * grid, channels * patch * patch, width, False),
          # (_prepare_aspect_ratio_attention_mask: the tiles' [n, 1] mask times its transpose, a matmul)
          Matmul("vision_model.attention_mask (mask @ mask^T)", n, 1, n, False, 1, False)]
    for stack, count in (("transformer", layers), ("global_transformer", glob)):
        ms += encoder(f"vision_model.{stack}.layers", n, width, heads, d, inter, count, False, "self_attn.o_proj", False)
    ms.append(Matmul("multi_modal_projector", tiles * per, out, hidden, True))
    return ImagePath(None, native, 1, tuple(ms),
                     f"every image padded to {tiles} tiles of {native} px (the processor's; masked tiles are computed), "
                     f"{tiles} x {per} patches and class tokens (padded to {padded} a tile) through {layers} layers and "
                     f"{glob} gated global layers as one sequence, the projector over {tiles * per} states that the "
                     "language model's cross-attention layers read; one <|image|> token in the sequence",
                     cross=tiles * per)


def janus(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision = cfg["vision_config"]
    native, patch = tile(cfg, side, "images (its processor resizes every image to that)")
    width, heads, layers, channels, out, depth = sizes(vision, "hidden_size", "num_attention_heads", "num_hidden_layers",
                                                       "num_channels", "projection_dim", "depth")
    ratio = config_value(vision, "mlp_ratio")
    if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or ratio <= 0:
        raise UsageError(f"--images: janus's vision mlp_ratio {ratio!r} is not a positive number")
    grid, bias = native // patch, bool(config_value(vision, "attention_bias"))
    n, d, inter = grid * grid, width // heads, int(width * ratio)
    ms = (Matmul("vision_model.embeddings.patch_embedding", n, channels * patch * patch, width, True),
          *encoder("vision_model.encoder.layers", n, width, heads, d, inter, layers, bias, "self_attn.projection_layer"),
          Matmul("aligner.fc1", n, width, out, True),
          Matmul("aligner.hidden_layers", n, out, out, True, depth - 1))
    return ImagePath(None, native, n, ms,
                     f"{grid}x{grid} patches through {layers} layers, the aligner's fc1 and {depth - 1} hidden "
                     f"layer(s) of projection_dim {out}, one token a patch")


def ovis2(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision = cfg["vision_config"]
    native, patch = tile(cfg, side)
    width, heads, inter, layers, channels, stride, vocab, indicators = sizes(
        vision, "hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers", "num_channels",
        "hidden_stride", "vocab_size", "num_visual_indicator_tokens")
    (hidden,) = sizes(cfg, "hidden_size")   # (the visual embedding table's width: the wrapper's own hidden_size)
    if indicators >= vocab:
        raise UsageError(f"--images: ovis2's {indicators} visual indicator tokens leave no visual vocabulary of {vocab}")
    grid = native // patch
    n, tokens = grid * grid, (-(-grid // stride)) ** 2   # (the grid padded to a multiple of hidden_stride)
    qkv_bias, mlp_bias = bool(config_value(vision, "qkv_bias")), bool(config_value(vision, "mlp_bias"))
    ms = (Matmul("vision_tower.transformer.embeddings.patch_embedding", n, channels * patch * patch, width, True),
          *encoder("vision_tower.transformer.encoder.layers", n, width, heads, width // heads, inter, layers, qkv_bias,
                   out_bias=qkv_bias, mlp=("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"), mlp_bias=mlp_bias),
          Matmul("vision_tower.head_linear", tokens, width * stride * stride, vocab - indicators, False),
          Matmul("visual_embeddings_table (the visual-token probabilities times the table)", tokens, vocab, hidden,
                 False))
    return ImagePath(None, native, tokens, ms,
                     f"one {native}x{native} tile an image (its processor's tiles and global image: count them), "
                     f"{grid}x{grid} patches through {layers} layers, {stride}x{stride} blocks into {tokens} visual "
                     f"tokens, head_linear onto {vocab - indicators} visual words, softmax, their embeddings")


def blip2(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    qformer = {"model_type": "blip_2_qformer", **(cfg.get("qformer_config") or {})}
    native, patch = tile(cfg, side, "images (its processor resizes every image to that)")
    width, heads, inter, layers = sizes(vision, "hidden_size", "num_attention_heads", "intermediate_size",
                                        "num_hidden_layers")
    qw, qheads, qinter, qlayers, every, encoded = sizes(
        qformer, "hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers",
        "cross_attention_frequency", "encoder_hidden_size")
    (hidden,) = sizes(text, "hidden_size")
    (queries,) = sizes(cfg, "num_query_tokens")
    grid = native // patch
    n, crossed = grid * grid + 1, len(range(0, qlayers, every))   # (the patches and a class token; cross-attention
    at = "qformer.encoder.layer"                                     # on every layer_idx % frequency == 0)
    ms = (Matmul("vision_model.embeddings.patch_embedding", grid * grid, 3 * patch * patch, width, True),   # (RGB)
          Matmul("vision_model.encoder.layers.self_attn.qkv", n, width, 3 * width, True, layers),
          *attention("vision_model.encoder.layers.self_attn", heads, n, n, width // heads, layers),
          Matmul("vision_model.encoder.layers.self_attn.projection", n, width, width, True, layers),
          Matmul("vision_model.encoder.layers.mlp.fc1", n, width, inter, True, layers),
          Matmul("vision_model.encoder.layers.mlp.fc2", n, inter, width, True, layers),
          *(Matmul(f"{at}.attention.attention.{p}", queries, qw, qw, True, qlayers) for p in ("query", "key", "value")),
          *attention(f"{at}.attention.attention", qheads, queries, queries, qw // qheads, qlayers),
          Matmul(f"{at}.attention.output.dense", queries, qw, qw, True, qlayers),
          Matmul(f"{at}.crossattention.attention.query", queries, qw, qw, True, crossed),
          *(Matmul(f"{at}.crossattention.attention.{p} (over the image's {n} states)", n, encoded, qw, True, crossed)
            for p in ("key", "value")),
          *attention(f"{at}.crossattention.attention", qheads, queries, n, qw // qheads, crossed),
          Matmul(f"{at}.crossattention.output.dense", queries, qw, qw, True, crossed),
          Matmul(f"{at}.intermediate_query.dense", queries, qw, qinter, True, qlayers),
          Matmul(f"{at}.output_query.dense", queries, qinter, qw, True, qlayers),
          Matmul("language_projection", queries, qw, hidden, True))
    return ImagePath(None, native, queries, ms,
                     f"{grid}x{grid} patches and a class token through {layers} layers, {queries} query tokens through "
                     f"the Q-Former's {qlayers} layers (cross-attention over the image on {crossed}), "
                     "language_projection: a token a query")


def got_ocr2(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    native, patch = tile(cfg, side, "images (its processor resizes every image, or each crop, to that)")
    (out,) = sizes(vision, "output_channels")
    (hidden,) = sizes(text, "hidden_size")
    ms, grid = sam("vision_tower", vision, native, patch)
    half = stride2(grid)
    quarter = stride2(half)
    ms += [Matmul("multi_modal_projector.conv_upsampler1 (3x3, stride 2)", half * half, out * 9, 2 * out, False),
           Matmul("multi_modal_projector.conv_upsampler2 (3x3, stride 2)", quarter * quarter, 2 * out * 9, hidden,
                  False),
           Matmul("multi_modal_projector.multimodal_projector", quarter * quarter, hidden, hidden, True)]
    return ImagePath(None, native, quarter * quarter, tuple(ms),
                     f"one {native}x{native} image (or crop), {grid}x{grid} patches through the SAM encoder (global and "
                     f"windowed layers) and its neck, two stride-2 convolutions into {quarter}x{quarter} tokens, "
                     "multimodal_projector")


# AriaImageProcessor's default max_image_size (490 or 980; a processor setting config.json does not hold): every image
# resized and padded to it; AriaConfig's projector_patch_to_query_dict where config.json leaves it out (its
# __post_init__'s: a dict, which config_defaults.json does not hold)
ARIA_IMAGE_SIZE = 980
ARIA_PATCH_QUERIES = {1225: 128, 4900: 256}


def aria(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    width, heads, inter, layers, channels, patch = sizes(vision, "hidden_size", "num_attention_heads",
                                                         "intermediate_size", "num_hidden_layers", "num_channels",
                                                         "patch_size")
    (hidden,) = sizes(text, "hidden_size")
    fixed_side("aria", side, ARIA_IMAGE_SIZE, "images (its processor pads every image to that: its default "
               "max_image_size)")
    grid = ARIA_IMAGE_SIZE // patch
    n = grid * grid
    table = config_value(cfg, "projector_patch_to_query_dict") or ARIA_PATCH_QUERIES
    queries = {int(k): v for k, v in table.items()}.get(n) if isinstance(table, Mapping) else None
    if type(queries) is not int or queries <= 0:
        raise UsageError(f"--images: aria's projector_patch_to_query_dict {table!r} has no queries for {n} patches")
    at = "multi_modal_projector.cross_attn"
    ms = (Matmul("vision_tower.embeddings.patch_embedding", n, channels * patch * patch, width, True),
          *encoder("vision_tower.encoder.layers", n, width, heads, width // heads, inter, layers),
          Matmul(f"{at}.q_proj", queries, width, width, False),
          *(Matmul(f"{at}.{p}_proj (over the {n} patches)", n, width, width, False) for p in "kv"),
          Matmul(f"{at}.multihead_attn.in_proj (queries)", queries, width, width, True),
          Matmul(f"{at}.multihead_attn.in_proj (keys and values)", n, width, 2 * width, True),
          *attention(f"{at}.multihead_attn", heads, queries, n, width // heads, 1),
          Matmul(f"{at}.multihead_attn.out_proj", queries, width, width, True),
          Matmul(f"{at}.linear", queries, width, width, True),
          Matmul("multi_modal_projector.feed_forward.linear_in", queries, width, hidden, False),
          Matmul("multi_modal_projector.feed_forward.linear_out", queries, hidden, hidden, False))
    return ImagePath(None, ARIA_IMAGE_SIZE, queries, ms,
                     f"every image resized and padded to {ARIA_IMAGE_SIZE} px (its processor's default max_image_size): "
                     f"{grid}x{grid} patches through {layers} layers, {queries} learned queries cross-attending over them "
                     "(q/k/v_proj, nn.MultiheadAttention, linear), the feed-forward into the text width")


# Gemma4ImageProcessor's default max_soft_tokens (one of 70, 140, 280, 560, 1120; a processor setting config.json does
# not hold): every image's patches padded to max_soft_tokens x pooling_kernel_size^2
GEMMA4_SOFT_TOKENS = 280


def gemma4(cfg: Mapping[str, Any], side: int | None) -> ImagePath:
    vision, text = cfg["vision_config"], cfg["text_config"]
    patch, k, width, inter, layers, heads, kv, d = sizes(
        vision, "patch_size", "pooling_kernel_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim")
    (hidden,) = sizes(text, "hidden_size")
    n, unit = GEMMA4_SOFT_TOKENS * k * k, k * patch   # the padded patches; a side a multiple of k patches
    target_px = n * patch * patch   # (get_aspect_ratio_preserving_size: a square image scaled to the patch budget)
    ideal = math.sqrt(target_px / (side * side)) * side if side else math.sqrt(target_px)
    resized = max(unit, math.floor(ideal / unit) * unit)
    tokens = (resized // unit) ** 2
    at = "vision_tower.encoder.layers"
    ms = (Matmul("vision_tower.patch_embedder.input_proj", n, 3 * patch * patch, width, False),
          Matmul(f"{at}.self_attn.q_proj", n, width, heads * d, False, layers),
          *(Matmul(f"{at}.self_attn.{p}_proj", n, width, kv * d, False, layers) for p in "kv"),
          *attention(f"{at}.self_attn", heads, n, n, d, layers, "the padding patches' too"),
          Matmul(f"{at}.self_attn.o_proj", n, heads * d, width, False, layers),
          *(Matmul(f"{at}.mlp.{p}_proj", n, width, inter, False, layers) for p in ("gate", "up")),
          Matmul(f"{at}.mlp.down_proj", n, inter, width, False, layers),
          Matmul("vision_tower.pooler (its one-hot average, a matmul)", GEMMA4_SOFT_TOKENS, n, width, False, 1, False),
          Matmul("embed_vision.embedding_projection", tokens, width, hidden, False))
    return ImagePath(None, resized, tokens, ms,
                     f"every image's patches padded to {n} (its processor's max_soft_tokens {GEMMA4_SOFT_TOKENS}, the "
                     f"default, x {k}x{k}; the padding computed), a square image resized to {resized} px: "
                     f"{(resized // patch) ** 2} patches through {layers} layers, average-pooled {k}x{k} into {tokens} "
                     "soft tokens, embed_vision")
