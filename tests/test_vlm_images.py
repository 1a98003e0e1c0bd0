"""`flops --images N` of a vision-language wrapper (families/images/): the vision tower and projector run on each
image and the language model reads the text tokens plus each image's tokens. The oracle is transformers' own forward
with pixel values, the image tokens in input_ids, under FlopCounterMode (eager attention, as every FLOPs figure here):
LLaVA over CLIP and over SigLIP (several feature layers, the "full" strategy, an unbiased projector), PaliGemma and
Gemma 3 with and without SigLIP's pooling head, Qwen2-VL, Qwen2.5-VL (windows cut short at the grid's edge, a
full-attention block), Qwen3-VL and Qwen3-VL-MoE (a DeepStack merger) at a side the processor would round, InternVL
(with and without q/k/v biases and q/k norms), Idefics3 and SmolVLM, Mistral 3 (Pixtral's tower over every image of the
batch at once), LLaVA-NeXT (2 x 2 tiles, and 1 x 2 unpadded), LLaVA-OneVision (tiled alone, resized past its maximum,
untiled two a sequence), GLM-4.1V / 4.5V / 4.6V, the Qwen2.5-Omni and Qwen3-Omni thinkers, Aya Vision, Command A
Vision, Llama 4, Kimi K2.5, DeepSeek-VL, Janus, Video-LLaVA, LLaVA-NeXT-Video, Llama 3.2 Vision (Mllama: its
cross-attention layers over the images' states, which the cache holds), from the save_pretrained folder and its bare
config.json, one image at batch 1 and 2, two images at batch 2."""
from __future__ import annotations

import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from census_audit import tiny_config  # noqa: E402

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
TEXT = 8   # text tokens a sequence


def _siglip(head: bool):
    from transformers import SiglipVisionConfig

    return SiglipVisionConfig(hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                              image_size=48, patch_size=8, vision_use_head=head)


def _config(case: str):
    from transformers import AutoConfig, Gemma3Config, LlavaConfig, PaliGemmaConfig

    if case.startswith("llava_next"):   # 32 px tiles of 4 x 4 patches; at 48 px: 2 x 2 tiles, or 1 x 2 unpadded
        cfg = tiny_config(type(AutoConfig.for_model(case.removesuffix("-pad"))))
        cfg.vision_config.image_size, cfg.vision_config.patch_size = 32, 8
        cfg.image_grid_pinpoints = [[32, 64]] if case.endswith("pad") else [[32, 64], [64, 32], [64, 64]]
    elif case in ("llava_onevision", "llava_onevision-max"):   # SigLIP 32 px tiles; at 48 px 2 x 2 (anyres_max_1: resized)
        cfg = tiny_config(type(AutoConfig.for_model("llava_onevision")))
        cfg.vision_config = _siglip(False)
        cfg.vision_config.image_size, cfg.vision_config.patch_size = 32, 8
        cfg.image_grid_pinpoints = [[32, 64], [64, 32], [64, 64]]
        cfg.vision_aspect_ratio = "anyres_max_1" if case.endswith("max") else "anyres_max_9"
    elif case in PIXTRAL:   # Pixtral's tower: images up to 64 px, patches of 8 merged 2 x 2
        cfg = tiny_config(type(AutoConfig.for_model(case)))
        cfg.vision_config.image_size, cfg.vision_config.patch_size = 64, 8
        cfg.multimodal_projector_bias = case == "mistral3"   # (LightOnOCR's projector: bias-free)
    elif case in ("idefics3", "smolvlm"):
        cfg = tiny_config(type(AutoConfig.for_model(case)))
        cfg.vision_config.image_size, cfg.vision_config.patch_size, cfg.scale_factor = 48, 8, 3   # 6 x 6 into 4 tokens
    elif case.startswith(("internvl", "qianfan")):   # (Qianfan-OCR: InternVL's modules)
        cfg = tiny_config(type(AutoConfig.for_model(case.removesuffix("-bias"))))
        cfg.vision_config.image_size, cfg.vision_config.patch_size = [56, 56], [14, 14]   # a 4 x 4 grid, 4 tokens
        cfg.vision_config.attention_bias = cfg.vision_config.use_qk_norm = case.endswith("bias")
    elif case.startswith(("qwen", "glm4", "kimi", "exaone", "llava_onevision1_5", "cosmos3", "hyperclovax")) \
            or case == "glmga":
        cfg = tiny_config(type(AutoConfig.for_model(case)))
        if case in ("qwen2_5_vl", "exaone4_5"):
            cfg.vision_config.fullatt_block_indexes = [1]
        if case == "exaone4_5":   # two heads over one key/value head
            cfg.vision_config.num_heads, cfg.vision_config.num_key_value_heads = 2, 1
        if case.startswith(("qwen3", "cosmos3")):   # a DeepStack merger after block 0 (an index past the tiny depth); Qwen3.5
            # tower has none and ignores the key
            cfg.vision_config.deepstack_visual_indexes = [0, 5]
    elif case == "blip-2":   # 28 px of 14 px patches and a class token, 4 queries, 3 Q-Former layers (2 cross)
        cfg = tiny_config(type(AutoConfig.for_model(case)))
        cfg.vision_config.image_size, cfg.vision_config.patch_size, cfg.num_query_tokens = 28, 14, 4
        cfg.qformer_config.num_hidden_layers = 3
        cfg.qformer_config.encoder_hidden_size = cfg.vision_config.hidden_size
        cfg.image_token_index = 3   # (the processor's image tokens: transformers 5.25 runs no image without them)
    elif case == "got_ocr2":   # a 8 x 8 grid: a global layer, and one in 3 x 3 windows over the grid padded to 9 x 9
        cfg = tiny_config(type(AutoConfig.for_model(case)))
        v = cfg.vision_config
        v.image_size, v.patch_size, v.window_size, v.global_attn_indexes = 64, 8, 3, [1]
    elif case == "aria":   # 70 px patches of its processor's 980 px image: 196, which 4 queries read
        cfg = tiny_config(type(AutoConfig.for_model(case)))
        cfg.vision_config.patch_size, cfg.projector_patch_to_query_dict = 70, {196: 4}
    elif case == "ovis2":   # 56 px tiles of 4 x 4 patches, 2 x 2 blocks: 4 tokens over 32 visual words
        cfg = tiny_config(type(AutoConfig.for_model(case)))
        v = cfg.vision_config
        v.image_size, v.patch_size, v.hidden_stride, v.vocab_size, v.qkv_bias = 56, 14, 2, 32, True
        cfg.hidden_size = cfg.text_config.hidden_size
    elif case == "gemma4":   # a tower of 2 layers, two heads over one key/value head
        from transformers.models.gemma4.configuration_gemma4 import Gemma4VisionConfig

        cfg = tiny_config(type(AutoConfig.for_model(case)))
        cfg.vision_config = Gemma4VisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                               num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    elif case in ("paddleocr_vl", "hunyuan_vl", "hy_v4_vl", "minimax_m3_vl", "idefics2", "video_llama_3"):
        cfg = tiny_config(type(AutoConfig.for_model(case)))
    elif case == "vipllava":   # three layers' states, the default -2 and -5 past the tiny depth: its own list
        cfg = tiny_config(type(AutoConfig.for_model(case)))
        cfg.vision_feature_layer = [-2, -1, 1]
    elif case == "shieldgemma2":   # its classifier over Gemma 3's wrapper, Yes and No in the tiny vocabulary
        cfg = tiny_config(type(AutoConfig.for_model(case)))
        cfg.vision_config = _siglip(False)
        cfg.mm_tokens_per_image, cfg.yes_token_index, cfg.no_token_index = 4, 5, 6
    elif case == "video_llava":   # its image_tower's last-but-one layer without the class token
        cfg = tiny_config(type(AutoConfig.for_model(case)))
    elif case.startswith("llava"):
        cfg = tiny_config(LlavaConfig)
        if case == "llava-siglip":
            cfg.vision_config = _siglip(False)
            cfg.vision_feature_layer, cfg.vision_feature_select_strategy = [-2, -1], "full"
            cfg.multimodal_projector_bias = False
    elif case == "deepseek_vl":   # SigLIP's 36 patches, its pooling head run
        cfg = tiny_config(type(AutoConfig.for_model(case)))
        cfg.vision_config = _siglip(True)
    elif case == "deepseek_vl_hybrid":   # SigLIP's 6 x 6 patches; a 64 px SAM of 8 px patches (a global layer, one in
        cfg = tiny_config(type(AutoConfig.for_model(case)))   # 3 x 3 windows), its states resized to 24 x 24
        cfg.vision_config = _siglip(False)
        h = cfg.high_res_vision_config
        h.image_size, h.patch_size, h.window_size, h.global_attn_indexes = 64, 8, 3, [1]
    elif case == "janus":   # 32 px of 8 px patches: 16 tokens, two aligner layers past fc1 (use_qk_norm: transformers
        cfg = tiny_config(type(AutoConfig.for_model(case)))   # 5.25's LayerNorm over the model width fails on heads)
        v = cfg.vision_config
        v.image_size, v.patch_size, v.depth = 32, 8, 3
        v.projection_dim = cfg.text_config.hidden_size
    elif case in ("aya_vision", "cohere2_vision"):   # a 6 x 6 grid shuffled 2 x 2 into 9 tokens; a SwiGLU of 2 x 20
        cfg = tiny_config(type(AutoConfig.for_model(case)))
        cfg.vision_config = _siglip(case == "cohere2_vision")   # (Command A Vision's tower keeps its head: it runs)
        cfg.alignment_intermediate_size = 40
    elif case == "mllama":   # 2 tiles of 28 px: 2 x 2 patches and a class token, padded to 8; 2 of 4 layers' states
        cfg = tiny_config(type(AutoConfig.for_model(case)))
        v = cfg.vision_config
        v.image_size, v.patch_size, v.max_num_tiles, v.supported_aspect_ratios = 28, 14, 2, [[1, 1], [1, 2], [2, 1]]
        v.num_hidden_layers, v.num_global_layers, v.intermediate_layers_indices = 4, 2, [1, 3]
        v.vision_output_dim = 3 * v.hidden_size   # (the last state and the two intermediate ones)
        cfg.text_config.num_hidden_layers, cfg.text_config.cross_attention_layers = 4, [1, 3]
    elif case == "llama4":   # 56 px tiles of 4 x 4 patches shuffled 2 x 2 into 4 tokens
        cfg = tiny_config(type(AutoConfig.for_model(case)))
        v = cfg.vision_config
        v.image_size, v.patch_size, v.intermediate_size = 56, 14, 4 * v.hidden_size   # (the shuffled width)
    elif case.startswith("paligemma"):
        cfg = tiny_config(PaliGemmaConfig)
        cfg.vision_config = _siglip(case.endswith("head"))
        cfg.projection_dim = cfg.vision_config.projection_dim = cfg.text_config.hidden_size
    else:
        cfg = tiny_config(Gemma3Config)
        cfg.vision_config = _siglip(case.endswith("head"))
        cfg.mm_tokens_per_image = 4   # a 6 x 6 grid pooled 3 x 3
    cfg._attn_implementation = "eager"
    return cfg


CASES = ["llava", "llava-siglip", "paligemma", "paligemma-head", "gemma3", "gemma3-head", "qwen2_vl", "qwen2_5_vl",
         "qwen3_vl", "qwen3_vl_moe", "internvl", "internvl-bias", "idefics3", "smolvlm", "mistral3", "llava_next",
         "llava_next-pad", "llava_onevision", "llava_onevision-max", "glm4v", "glm4v_moe", "glm46v",
         "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker", "aya_vision", "cohere2_vision", "llama4", "mllama", "kimi_k25",
         "deepseek_vl", "janus", "video_llava", "llava_next_video", "qwen3_5",
         "qwen3_5_moe", "qwen4_exp", "vipllava", "shieldgemma2", "exaone4_5",
         "llava_onevision1_5", "paddleocr_vl", "hunyuan_vl", "gemma4",
         "hy_v4_vl", "cosmos3_omni", "minimax_m3_vl", "idefics2", "ovis2", "blip-2", "got_ocr2",
         "lighton_ocr", "glmga", "qianfan_ocr", "video_llama_3", "hyperclovax_vision_v2", "aria", "deepseek_vl_hybrid"]
PIXTRAL = ("mistral3", "lighton_ocr")
# Qwen's (and GLM's) side: 150 px, which their processors' smart_resize rounds (to 140, a 10 x 10 patch grid: 5 x 5
# merged units, Qwen2.5-VL's windows of 4 x 4 units cut to 4 x 1, 1 x 4 and 1 x 1 at the edges)
QWEN_SIDE = 150
# Mistral 3's side: 40 px, which Pixtral's processor rounds up (to 48: a 6 x 6 patch grid, 9 image tokens and 3
# [IMG_BREAK] / [IMG_END] tokens)
PIXTRAL_SIDE = 40


def _resized(cfg) -> int:
    """The side the wrapper's own image processor gives a square image of the case's side (transformers' smart_resize,
    Pixtral's get_resize_output_image_size): what the test feeds the model, never ckptstat's rounding."""
    import numpy as np

    v = cfg.vision_config
    if cfg.model_type == "paddleocr_vl":   # (a side past its processor's min_pixels: 400 px to 392)
        from transformers.models.paddleocr_vl.image_processing_pil_paddleocr_vl import smart_resize as paddle_resize

        return paddle_resize(PADDLE_SIDE, PADDLE_SIDE, factor=v.patch_size * v.spatial_merge_size)[0]
    if cfg.model_type in ("hunyuan_vl", "hy_v4_vl"):   # (HY-V4-VL's processor is HunYuan-VL's)
        from transformers.models.hunyuan_vl.image_processing_pil_hunyuan_vl import smart_resize as hunyuan_resize

        return hunyuan_resize(QWEN_SIDE, QWEN_SIDE, factor=v.patch_size * v.spatial_merge_size)[0]
    if cfg.model_type == "kimi_k25":   # (its processor's defaults: 16,384 patches, 512 a side)
        navit_resize = _function("transformers.models.kimi_k25.image_processing_kimi_k25", "navit_resize")
        return navit_resize(QWEN_SIDE, QWEN_SIDE, v.patch_size, v.merge_kernel_size[0], 16384, 512)[1][0]
    if cfg.model_type == "idefics2":   # (a side its processor's default edges raise: 150 px to 378)
        import numpy as np
        from transformers.image_utils import SizeDict
        from transformers.models.idefics2.image_processing_pil_idefics2 import (
            Idefics2ImageProcessorPil,
            get_resize_output_image_size,
        )

        default = Idefics2ImageProcessorPil.size
        return get_resize_output_image_size(np.zeros((3, QWEN_SIDE, QWEN_SIDE)), SizeDict(**default))[0]
    if cfg.model_type == "video_llama_3":   # (at its image processor's default merge_size)
        from transformers.models.video_llama_3.image_processing_pil_video_llama_3 import (
            VideoLlama3ImageProcessorPil,
        )
        from transformers.models.video_llama_3.image_processing_pil_video_llama_3 import smart_resize as vl3_resize

        return vl3_resize(QWEN_SIDE, QWEN_SIDE, factor=v.patch_size * VideoLlama3ImageProcessorPil.merge_size)[0]
    if cfg.model_type == "minimax_m3_vl":
        smart_resize = _function("transformers.models.minimax_m3_vl.image_processing_minimax_m3_vl", "smart_resize")
        return smart_resize(QWEN_SIDE, QWEN_SIDE, factor=v.patch_size * v.spatial_merge_size)[0]
    if cfg.model_type in PIXTRAL:
        from transformers.models.pixtral.image_processing_pil_pixtral import get_resize_output_image_size

        unit = v.patch_size * cfg.spatial_merge_size
        return get_resize_output_image_size(np.zeros((3, PIXTRAL_SIDE, PIXTRAL_SIDE)), size=(v.image_size, v.image_size),
                                            patch_size=(unit, unit))[0]
    factor = v.patch_size * v.spatial_merge_size
    if cfg.model_type.startswith("glm4") or cfg.model_type == "glmga":
        from transformers.models.glm4v.image_processing_pil_glm4v import smart_resize as glm_resize

        return glm_resize(v.temporal_patch_size, QWEN_SIDE, QWEN_SIDE, v.temporal_patch_size, factor)[0]
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    return smart_resize(QWEN_SIDE, QWEN_SIDE, factor=factor)[0]


def _function(module: str, name: str):
    """A processor's sizing function (Kimi K2.5's navit_resize, MiniMax-M3-VL's smart_resize) read from transformers'
    own module: the module imports torchvision, which is not installable beside the CPU torch wheel here, so the
    function alone is compiled from its source."""
    import ast
    import importlib.util
    import math

    origin = importlib.util.find_spec(module).origin
    tree = ast.parse(open(origin).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace = {"math": math}
    exec(compile(ast.Module([fn], []), origin, "exec"), namespace)
    return namespace[name]


NEXT_SIDE = 48   # LLaVA-NeXT's
PADDLE_SIDE = 400   # PaddleOCR-VL's: within its processor's min and max pixels


def _side(case: str) -> list[str]:
    """The --image-size a case's images are read at (a tower that reads any size), else none."""
    side = {"qwen": QWEN_SIDE, "glm": QWEN_SIDE, "kimi": QWEN_SIDE, "exaone": QWEN_SIDE, "mistral3": PIXTRAL_SIDE,
            "lighton_ocr": PIXTRAL_SIDE,
            "llava_next": NEXT_SIDE, "llava_onevision1_5": QWEN_SIDE, "llava_onevision": NEXT_SIDE,
            "paddleocr_vl": PADDLE_SIDE, "hunyuan_vl": QWEN_SIDE, "hy_v4_vl": QWEN_SIDE, "cosmos3": QWEN_SIDE,
            "minimax": QWEN_SIDE, "idefics2": QWEN_SIDE, "video_llama_3": QWEN_SIDE, "hyperclovax": QWEN_SIDE}
    return next((["--image-size", str(v)] for k, v in side.items() if case.startswith(k)), [])


def _breaks(cfg, features: int) -> int:
    """The text tokens the processor adds to an image's (Pixtral's: an [IMG_BREAK] or [IMG_END] a row)."""
    return int(round(features ** 0.5)) if cfg.model_type in PIXTRAL else 0


def _pixels(cfg, images: int, per_sequence: int = 1) -> dict:
    """The image inputs of `images` images, `per_sequence` a sequence, as the wrapper's processor would give them."""
    v = cfg.vision_config
    if cfg.model_type == "video_llama_3":   # flat patches, each image's merge size the processor's default
        from transformers.models.video_llama_3.image_processing_pil_video_llama_3 import VideoLlama3ImageProcessorPil

        grid = _resized(cfg) // v.patch_size
        return {"pixel_values": torch.randn(images * grid ** 2, v.num_channels * v.patch_size ** 2),
                "image_grid_thw": torch.tensor([[1, grid, grid]] * images),
                "image_merge_sizes": torch.tensor([VideoLlama3ImageProcessorPil.merge_size] * images)}
    if cfg.model_type in ("paddleocr_vl", "hunyuan_vl", "hy_v4_vl"):   # one [channels, patch, patch] a patch (HunYuan:
        grid = _resized(cfg) // v.patch_size                                 # flat)
        shape = (v.num_channels * v.patch_size ** 2,) if cfg.model_type != "paddleocr_vl" else \
            (v.num_channels, v.patch_size, v.patch_size)
        return {"pixel_values": torch.randn(images * grid ** 2, *shape),
                "image_grid_thw": torch.tensor([[1, grid, grid]] * images)}
    if cfg.model_type == "kimi_k25":   # one [3, patch, patch] a patch
        grid = _resized(cfg) // v.patch_size
        return {"pixel_values": torch.randn(images * grid ** 2, 3, v.patch_size, v.patch_size),
                "image_grid_thw": torch.tensor([[1, grid, grid]] * images)}
    if cfg.model_type.startswith(("qwen", "glm", "exaone", "llava_onevision1_5", "cosmos3", "minimax", "hyperclovax")):
        temporal = 1 if cfg.model_type == "llava_onevision1_5" else v.temporal_patch_size   # (RiceViT: a Conv2d)
        channels = v.num_channels if cfg.model_type == "minimax_m3_vl" else v.in_channels
        values, grid = channels * temporal * v.patch_size ** 2, _resized(cfg) // v.patch_size
        return {"pixel_values": torch.randn(images * grid ** 2, values),
                "image_grid_thw": torch.tensor([[1, grid, grid]] * images)}
    if cfg.model_type == "gemma4":   # its own processor's output (default settings) for square pictures
        import numpy as np
        from PIL import Image
        from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

        out = Gemma4ImageProcessorPil()(images=[Image.fromarray(np.zeros((300, 300, 3), dtype=np.uint8))] * images,
                                        return_tensors="pt")
        return {"pixel_values": out["pixel_values"], "image_position_ids": out["image_position_ids"]}
    if cfg.model_type == "deepseek_vl_hybrid":   # the low- and the high-resolution image
        high = cfg.high_res_vision_config.image_size
        return {"pixel_values": torch.randn(images, v.num_channels, v.image_size, v.image_size),
                "high_res_pixel_values": torch.randn(images, 3, high, high)}
    if cfg.model_type == "aria":   # its processor's default max_image_size
        from transformers.models.aria.image_processing_pil_aria import AriaImageProcessorPil

        side = AriaImageProcessorPil.max_image_size
        return {"pixel_values": torch.randn(images, v.num_channels, side, side)}
    side = v.image_size[0] if isinstance(v.image_size, (list, tuple)) else v.image_size
    if cfg.model_type.startswith("llava_"):   # each image its processor's tiles and base image, by transformers' rule
        from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

        crops = image_size_to_num_patches([NEXT_SIDE, NEXT_SIDE], cfg.image_grid_pinpoints, side)
        out = {"pixel_values": torch.randn(images, crops, v.num_channels, side, side),
               "image_sizes": torch.tensor([[NEXT_SIDE, NEXT_SIDE]] * images)}
        if cfg.model_type == "llava_onevision":   # (OneVision tiles an image only when it is its sequence's one)
            out["batch_num_images"] = torch.tensor([per_sequence] * (images // per_sequence))
        return out
    if cfg.model_type in PIXTRAL:
        resized = _resized(cfg)
        return {"pixel_values": torch.randn(images, v.num_channels, resized, resized),
                "image_sizes": torch.tensor([[resized, resized]] * images)}
    if cfg.model_type == "mllama":   # [sequences, images, tiles, ...]: every image in all of its tiles
        b, tiles = images // per_sequence, v.max_num_tiles
        return {"pixel_values": torch.randn(b, per_sequence, tiles, v.num_channels, side, side),
                "aspect_ratio_ids": torch.full((b, per_sequence), 2),   # (1 x 2 tiles)
                "aspect_ratio_mask": torch.ones(b, per_sequence, tiles, dtype=torch.long)}
    if cfg.model_type == "idefics2":   # [sequences, images, ...] at the side its processor resizes to
        resized = _resized(cfg)
        return {"pixel_values": torch.randn(images // per_sequence, per_sequence, v.num_channels, resized, resized)}
    if cfg.model_type in ("idefics3", "smolvlm"):   # [sequences, tiles, ...]: one sequence of every tile, as forward
        return {"pixel_values": torch.randn(1, images, v.num_channels, side, side)}   # scatters them in order
    return {"pixel_values": torch.randn(images, getattr(v, "num_channels", 3), side, side)}   # (BLIP-2's: RGB)


def _forward_pixels(cfg, images: int, per_sequence: int = 1) -> dict:
    """_pixels under the names the wrapper's forward takes them (Video-LLaVA's: pixel_values_images)."""
    out = _pixels(cfg, images, per_sequence)
    if cfg.model_type == "video_llava":
        out["pixel_values_images"] = out.pop("pixel_values")
    return out


def _ids(cfg, tokens: int, images: int, batch: int):
    """TEXT text tokens and `images` runs of `tokens` image tokens, a text token before each (and after it, the
    processor's _breaks)."""
    each = tokens + _breaks(cfg, tokens)
    ids = torch.full((batch, TEXT + images * each), 5)
    for i in range(images):
        ids[:, 1 + i * (each + 1): 1 + i * (each + 1) + tokens] = cfg.image_token_id
    return ids


def _types(cfg, ids) -> dict:
    """Which tokens are the image's, as the processor marks them for the wrappers that read it (Mllama: which of the
    images' tiles each token attends to, all of them here)."""
    if cfg.model_type == "mllama":
        media = int((ids[0] == cfg.image_token_id).sum())
        return {"cross_attention_mask": torch.ones(*ids.shape, media, cfg.vision_config.max_num_tiles, dtype=torch.long)}
    if cfg.model_type not in MARKED:
        return {}
    kind = "token_type_ids" if cfg.model_type in ("paligemma", "gemma3", "shieldgemma2") else "mm_token_type_ids"
    return {kind: (ids == cfg.image_token_id).long()}


# the wrappers whose forward reads which tokens are the image's (the rest find them by image_token_id alone)
MARKED = ("paligemma", "gemma3", "shieldgemma2", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v",
          "glm4v_moe", "glm46v", "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker", "qwen3_5", "qwen3_5_moe", "qwen4_exp",
          "exaone4_5", "llava_onevision1_5", "paddleocr_vl", "hunyuan_vl", "hy_v4_vl", "cosmos3_omni",
          "minimax_m3_vl", "glmga", "video_llama_3", "hyperclovax_vision_v2")


def _image_path(model, cfg, images: int, per_sequence: int = 1) -> tuple[int, int]:
    """(the tokens each of `images` images puts into the language model's sequence, FlopCounterMode's count of the
    wrapper's image path alone on them: get_image_features, the tower and the projector). Mllama has none: its tower and
    projector as MllamaModel.forward runs them; its processor puts one <|image|> token in the sequence an image."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as path:
        if cfg.model_type == "mllama":
            model.model.multi_modal_projector(model.model.vision_model(**_pixels(cfg, images, per_sequence)).last_hidden_state)
            tokens = 1
        else:
            features = getattr(model, "get_image_features", None) or model.model.get_image_features
            feats = features(**_pixels(cfg, images, per_sequence)).pooler_output
            tokens = sum(f.shape[-2] for f in feats) // images
    return tokens, path.get_total_flops()


def _cross_states(model, cfg) -> int:
    """The states one image adds to Mllama's cross-attention layers: the rows of its projector's output, as
    MllamaModel.forward reshapes it for them."""
    with torch.no_grad():
        states = model.model.multi_modal_projector(model.model.vision_model(**_pixels(cfg, 1)).last_hidden_state)
    return states.reshape(-1, cfg.text_config.hidden_size).shape[0]


def _measured(model, cfg, tokens: int, images: int, batch: int) -> tuple[int, int]:
    """FlopCounterMode's total of the wrapper's forward and of its image path alone (tower and projector)."""
    from torch.utils.flop_counter import FlopCounterMode

    ids = _ids(cfg, tokens, images, batch)
    with torch.no_grad(), FlopCounterMode(display=False) as whole:
        model(input_ids=ids, **_forward_pixels(cfg, batch * images, images), **_types(cfg, ids))
    return whole.get_total_flops(), _image_path(model, cfg, batch * images, images)[1]


# MoE language models whose names do not say so
EXPERTS = ("llama4", "kimi_k25", "qwen4_exp", "hy_v4_vl", "minimax_m3_vl", "aria")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from transformers import AutoModelForImageTextToText, ShieldGemma2ForImageClassification

    out = {}
    for case in CASES:
        cfg = _config(case)
        torch.manual_seed(0)
        # no parameter requires grad: FlopCounterMode's module tracker hooks the grad of a module's inputs, and Qwen3.5's
        # conv1d.weight.squeeze(1), made under no_grad, would be one that requires grad with no grad_fn
        build = ShieldGemma2ForImageClassification if case == "shieldgemma2" else AutoModelForImageTextToText.from_config
        model = build(cfg).eval().requires_grad_(False)
        if "moe" in case or case in EXPERTS:   # one mm per expert hit, which FlopCounterMode counts (grouped_mm it
            model.set_experts_implementation("eager")   # does not)
        path = str(tmp_path_factory.mktemp(case))
        model.save_pretrained(path)
        out[case] = (model, cfg, path)
    return out


@pytest.mark.parametrize("case", CASES)
def test_image_flops_are_the_wrappers_forward_with_pixels(cli, saved, case):
    model, cfg, path = saved[case]
    side = _side(case)
    for images, batch in ((1, 1), (1, 2), (2, 2)):
        per_image = _image_path(model, cfg, images, images)[0]   # the tokens an image becomes, `images` a sequence
        each = per_image + _breaks(cfg, per_image)   # (its tokens in the language model's sequence)
        whole, image_path = _measured(model, cfg, per_image, images, batch)
        for source in (path, os.path.join(path, "config.json")):
            code, out, err = cli("flops", source, "--images", str(images), "-b", str(batch), "-s", str(TEXT), *side,
                                 "--json")
            assert code == 0, err
            run = json.loads(out)["runs"][0]
            assert run["totals"]["flops"] == whole, (source, images, batch)
            assert run["images"]["flops"] == image_path and run["images"]["tokens_each"] == each
            assert run["seq"] == TEXT + images * each and run["images"]["text_tokens"] == TEXT
            assert run["images"].get("states_each") == (_cross_states(model, cfg) if case == "mllama" else None)
    code, out, _ = cli("flops", path, "--images", "2", "-s", str(TEXT), *side)   # the human output says it
    assert code == 0 and f"{each} token{'s' if each != 1 else ''} each" in out


def test_images_on_a_model_without_an_image_path_is_one_line(cli, saved):
    """A text model, and a wrapper whose image path is not modelled (a tower of another kind): exit 2, one line."""
    from transformers import Lfm2VlConfig

    code, out, err = cli("flops", os.path.join(FIX, "gpt2-tiny"), "--images", "1")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--images" in err and "Traceback" not in err
    cfg = tiny_config(Lfm2VlConfig)   # (its SigLIP2 NaFlex tower: not modelled)
    cfg.architectures = ["Lfm2VlForConditionalGeneration"]   # (as save_pretrained writes it)
    path = os.path.join(saved["llava"][2], "..", "lfm2_vl.json")
    with open(path, "w") as f:
        json.dump(cfg.to_dict(), f)
    code, out, err = cli("flops", path, "--images", "1")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Lfm2Vl" in err, err
    code, out, err = cli("flops", saved["llava"][2], "--images", "-1")
    assert code == 2 and "Traceback" not in err
    code, out, err = cli("flops", saved["qwen2_vl"][2], "--images", "1", "--image-size", "-5")
    assert code == 2 and out == "" and "--image-size must be positive" in err
    code, out, err = cli("flops", saved["llava"][2], "--images", "1", "--image-size", "64")   # LLaVA reads one size
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--image-size 64" in err
    code, out, err = cli("flops", saved["qwen2_vl"][2], "--images", "1")   # Qwen reads any: which?
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--image-size" in err


@pytest.mark.parametrize("case", ["llava", "gemma3", "qwen2_5_vl", "mistral3", "llama4", "mllama", "kimi_k25"])
def test_memory_holds_the_image_tokens_in_the_kv_cache(cli, saved, case):
    """`memory --images 2`: the KV cache line is the bytes of the cache transformers' forward with two images returns
    (its language model over the text and image tokens; a chunked layer's view holds the forward's), and a note says
    the tower's activations are not in it."""
    model, cfg, path = saved[case]
    side = _side(case)
    tokens = _image_path(model, cfg, 1)[0]
    ids = _ids(cfg, tokens, 2, 1)
    with torch.no_grad():
        cache = model(input_ids=ids, **_forward_pixels(cfg, 2, 2), use_cache=True, **_types(cfg, ids)).past_key_values
    # the bytes held: a chunked or sliding layer's keys are a view of the whole forward's (Llama 4's at 16 tokens)
    held = sum(t.untyped_storage().nbytes() for layer in cache.layers for t in (layer.keys, layer.values))
    code, out, err = cli("memory", path, "--images", "2", "-s", str(TEXT), *side, "--json")
    assert code == 0, err
    r = json.loads(out)
    kv = [line["bytes"] for line in r["lines"] if line["group"] == "kv cache"]
    assert kv[0] == held   # (the first line: what transformers allocates; an MLA's absorbed latent an alternative after)
    assert any("--images 2" in n and "not in these lines" in n for n in r["notes"])


@pytest.mark.parametrize("case", ["llava", "gemma3", "qwen2_5_vl", "mistral3", "llava_next", "cohere2_vision", "mllama"])
def test_the_summary_says_what_one_image_costs(cli, saved, case):
    """`ckptstat PATH` (and `report`) of a wrapper whose image path is modelled: one image's side, tokens and FLOPs, those of
    its image path on one image under FlopCounterMode (a Qwen tower reads any size: no one figure, the option named)."""

    model, cfg, path = saved[case]
    code, out, err = cli("summary", path, "--json")
    assert code == 0, err
    image = json.loads(out)["analytic"]["image"]
    if _side(case):
        assert image == {"side": None}
        code, out, _ = cli("summary", path)
        assert "--image-size" in out
        return
    tokens, flops = _image_path(model, cfg, 1)
    states = {"states": _cross_states(model, cfg)} if case == "mllama" else {}
    assert image == {"side": cfg.vision_config.image_size, "tokens": tokens, "flops": flops, **states}
    report = os.path.join(path, "..", f"{case}-report.md")   # the report's summary says it too
    code, _, err = cli("report", path, "-o", report, "--no-stats")
    assert code == 0, err
    text = open(report).read()
    assert f"{image['flops']:,} FLOPs through the vision tower" in text
    assert (f"1 token and {image['states']:,} states" if states else f"{image['tokens']:,} tokens,") in text


def test_config_text_in_the_image_rule_is_printed_as_it_is(cli, saved, tmp_path):
    """The image path's rule quotes config values (an activation's name): printed as text, never read as markup."""
    with open(os.path.join(saved["llava"][2], "config.json")) as f:
        cfg = json.load(f)
    cfg["projector_hidden_act"] = "[red]gelu[/red]"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, err = cli("flops", str(path), "--images", "1", "-s", str(TEXT))
    assert code == 0, err
    assert "[red]gelu[/red]" in "".join(out.split())


@pytest.mark.parametrize("tiles,text", [(4, 64), (1, 1024)])
def test_mllama_inference_peak_holds_the_cross_attention_over_the_image_states(tmp_path, cli, tiles, text):
    """`memory --images 1` of Llama 3.2 Vision (eager, float32): the planned activations (peak per layer and logits)
    within 2% of the peak torch's MemTracker records over its language model and LM head reading one image's states,
    those states and the cross mask made as MllamaModel.forward makes them: 1,028 states over 65 tokens (a cross layer's
    scores and repeated keys and values the peak) and 257 states over 1,025 tokens (a self-attention layer's)."""
    mem_tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    from transformers import MllamaConfig, MllamaForConditionalGeneration
    from transformers.models.mllama.modeling_mllama import _prepare_cross_attention_mask

    vision = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_global_layers=1, attention_heads=2,
                  image_size=224, patch_size=14, max_num_tiles=tiles, supported_aspect_ratios=[[1, 1]],
                  intermediate_layers_indices=[1], vision_output_dim=32)   # 257 states a tile
    lm = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8,
              num_key_value_heads=2, cross_attention_layers=[1], pad_token_id=0, bos_token_id=1, eos_token_id=2)
    cfg = MllamaConfig(vision_config=vision, text_config=lm, image_token_id=3)
    torch.manual_seed(0)
    model = MllamaForConditionalGeneration._from_config(cfg, attn_implementation="eager", dtype=torch.float32).eval()
    model.save_pretrained(tmp_path)
    per, n = 16 * 16 + 1, text + 1   # (its one <|image|> token)
    tracker = mem_tracker.MemTracker()
    tracker.track_external(model)
    with torch.no_grad(), tracker:
        states = torch.randn(1, tiles * per, lm["hidden_size"])   # (the projector's output)
        mask, rows = _prepare_cross_attention_mask(torch.ones(1, n, 1, tiles, dtype=torch.long), num_vision_tokens=per,
                                                   dtype=torch.float32)
        hidden = model.model.language_model(input_ids=torch.full((1, n), 5), cross_attention_states=states,
                                            cross_attention_mask=mask, full_text_row_masked_out_mask=rows,
                                            use_cache=False).last_hidden_state
        model.lm_head(hidden)
    peak = next(v for per_device in tracker.get_tracker_snapshot("peak").values() for k, v in per_device.items()
                if getattr(k, "name", k) == "ACT")
    code, out, err = cli("memory", str(tmp_path), "--images", "1", "-s", str(text), "--json")
    assert code == 0, err
    planned = sum(line["bytes"] for line in json.loads(out)["fit"]["lines"] if line["group"] == "activations")
    assert abs(planned - peak) / peak < 0.02, (planned, peak)


def test_processor_settings_assumed_are_the_processors_defaults():
    """Settings config.json does not hold, which ckptstat assumes at their processors' defaults: Gemma 4's
    max_soft_tokens (every image padded to it), Idefics2's shortest and longest edge (a side clamped to them),
    VideoLLaMA3's merge size for images (1: a token a patch), Aria's max_image_size (every image padded to it); and the
    config classes' defaults __post_init__ sets (Aria's patch-to-query table, the LLaVA-NeXT pinpoints)."""
    from transformers import AriaConfig, AutoConfig
    from transformers.models.aria.image_processing_pil_aria import AriaImageProcessorPil
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil
    from transformers.models.idefics2.image_processing_pil_idefics2 import Idefics2ImageProcessorPil
    from transformers.models.video_llama_3.image_processing_pil_video_llama_3 import VideoLlama3ImageProcessorPil

    from ckptstat.families.images.fixed import PINPOINTS
    from ckptstat.families.images.native import IDEFICS2_EDGES, VIDEOLLAMA3_IMAGE_MERGE
    from ckptstat.families.images.tiled import ARIA_IMAGE_SIZE, ARIA_PATCH_QUERIES, GEMMA4_SOFT_TOKENS

    assert Gemma4ImageProcessorPil().max_soft_tokens == GEMMA4_SOFT_TOKENS
    size = Idefics2ImageProcessorPil().size
    assert (size.shortest_edge, size.longest_edge) == IDEFICS2_EDGES
    assert VideoLlama3ImageProcessorPil().merge_size == VIDEOLLAMA3_IMAGE_MERGE
    assert AriaImageProcessorPil().max_image_size == ARIA_IMAGE_SIZE
    # and the config classes' defaults that are no constants config_defaults.json holds (set in __post_init__)
    assert AriaConfig().projector_patch_to_query_dict == ARIA_PATCH_QUERIES
    for model_type, pinpoints in PINPOINTS.items():
        assert AutoConfig.for_model(model_type).image_grid_pinpoints == pinpoints, model_type

