"""Multimodal wrappers: a config.json that nests its language model's config as `text_config` beside a
vision tower's `vision_config` (transformers' vision-language *ForConditionalGeneration: Gemma 3, PaliGemma,
LLaVA / LLaVA-NeXT / LLaVA-OneVision, Mistral 3, Qwen2-VL / Qwen2.5-VL, Idefics3, SmolVLM, InternVL...).

The analytic model is the language model's, for text tokens: the text config's own family builds it
(Gemma, LLaMA, Mistral, Qwen2...), under the wrapper's architectures class (its LM head). The vision tower
and the projector are outside it: no FLOPs or activations of an image are in the figures, and their
parameters are counted from the checkpoint (ArchSpec.outside names their modules), never predicted. A
wrapper is recognised only when its text model is a registered family's, so a dual encoder (CLIP, SigLIP:
a text tower that is no decoder) never is; the output says which config the model came from."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .framework.base import _defaults, config_value
from .images import modelled
from .tie_table import class_ties

# Text model_types transformers names after the wrapper whose decoder is a registered family's, and whether
# they rotate by M-RoPE (ArchSpec.mrope): Qwen2-VL's and Qwen2.5-VL's language models are Qwen2, and
# Qwen3-VL's is Qwen3, with multimodal rotary positions (M-RoPE, transformers modeling_qwen2_vl.py
# Qwen2VLTextModel, modeling_qwen3_vl.py: its DeepStack adds visual features to early layers only with an
# image): the same layers, and a rotary table computed from 3 position rows (time, height, width) per
# sequence. GLM-4.1V's, GLM-4.6V's and GLM-GA's (glm4v_text) is GLM-4 and GLM-4.5V's (glm4v_moe_text)
# GLM-4.5 MoE, their rotary likewise on 3 rows (modeling_glm4v.py, modeling_glm4v_moe.py). Qwen3-VL-MoE's is
# Qwen3-MoE (modeling_qwen3_vl_moe.py since transformers 5: a top-k router over fused experts, which 5.x saves
# [experts, out, in] and Qwen's releases hold [experts, in, out]: the same count). PaddleOCR-VL's is ERNIE 4.5
# under M-RoPE (modeling_paddleocr_vl.py), HunYuan-VL's HunYuan dense V1 rotating 4 position rows (its mrope_section:
# modeling_hunyuan_vl.py), HY-V4-VL's HY-V4 (modeling_hy_v4_vl.py: Qwen3-VL's rotary on the latent attention's rope part),
# Qwen3-Omni's thinker's Qwen3-MoE (modeling_qwen3_omni_moe.py: Qwen3-VL-MoE's text model; its audio tower outside),
# Qwen2.5-Omni's thinker's Qwen2 (modeling_qwen2_5_omni.py: Qwen2.5-VL's text model, its audio tower outside), and
# Granite 4 Vision's and Granite-Docling's Granite (modeling_granite4_vision.py: its vision features injected into
# layers only with an image; modeling_granite_docling.py: Idefics3's wrapper around Granite's layers), which no family
# module claims: the generic template's (families/__init__.py language_model).
TEXT_ALIASES = {"qwen2_vl_text": ("qwen2", True), "qwen2_5_vl_text": ("qwen2", True), "qwen3_vl_text": ("qwen3", True),
                "qwen3_vl_moe_text": ("qwen3_moe", True), "glm4v_text": ("glm4", True), "glm4v_moe_text": ("glm4_moe", True),
                "paddleocr_vl_text": ("ernie4_5", True), "hunyuan_vl_text": ("hunyuan_v1_dense", True),
                "hy_v4_vl_text": ("hy_v4", True), "qwen3_omni_moe_text": ("qwen3_moe", True),
                "granite4_vision_text": ("granite", False), "qwen2_5_omni_text": ("qwen2", True),
                "granite_docling_text": ("granite", False)}
# Text models whose attention ignores keys their alias's family reads: GLM-4.1V's (GLM-4.6V's and GLM-GA's too:
# modeling_glm4v.py Glm4vTextAttention) has heads hidden / heads wide and q, k, v biased, whatever the config says.
WIDTH_HEADS = {"glm4v_text"}
# Module names (a name's components) of what is outside the language model in transformers' wrappers: the
# vision tower (`vision_tower`, `vision_model`, Qwen2-VL's `visual`, DeepSeek-VL-Hybrid's high-resolution
# tower, neck and projection, Video-LLaVA's `image_tower` and `video_tower`: CLIPVisionModels, whose own
# `vision_model.` transformers 5 no longer writes, families/clip.py), the projector into the text embedding
# (`multi_modal_projector`, `mm_projector`, Idefics3's `connector`, DeepSeek-VL's `aligner`, PaddleOCR-VL's `projector`,
# which its releases and save_pretrained name `mlp_AR`; HunYuan-VL's and HY-V4-VL's tower and its `perceive` projector,
# saved under `vit`, transformers' `vision_tower`; BLIP-2's Q-Former,
# its query tokens and `language_projection`), Ovis2's visual vocabulary (Ovis 2.5's `vte`, beside its `visual_tokenizer`:
# the SigLIP tower and the head into that vocabulary), and LLaVA-NeXT's learned `image_newline` row;
# Gemma 4's audio tower and its two projectors into the text embedding (`embed_vision`, `embed_audio`), MOSS-Transcribe-
# Diarize's Whisper-like `audio_tower`, and Phi-4-multimodal's image and audio embedding (`embed_tokens_extend`: its
# SigLIP tower, conformer encoder and projectors), which a text-only forward never runs (modeling_phi4_multimodal.py
# Phi4MultimodalFeatureEmbedding: no pixel values, no audio). As the newer wrappers save them: HyperCLOVAX-Vision's
# `vision_projector`, LightOnOCR's `vision_encoder` and `vision_projection`, MiniMax-M3-VL's `patch_merge_mlp`,
# MiniCPM-V's `merger` beside its tower, the InternVL-format projector `mlp1` (Qianfan-OCR, Nemotron-H Omni,
# whose conversion mappings keep their releases' names on save), and Granite 4 Vision's Q-Former projectors
# (`layerwise_projectors`, `spatial_projectors`: vision features injected into language layers only with an image);
# Janus's image generation path (`vqmodel`, the VQ-GAN image tokenizer, and `generation_embeddings`, `generation_aligner`,
# `generation_head`: modeling_janus.py, run only to make images); Inkling's audio tower, saved as `model.audio`;
# Apertus 1.5's image and audio tokenizers (`vision_tokenizer`, `audio_tokenizer`: VQ encoders run only on pixels or
# audio, modeling_apertus1p5.py).
# A name with a leading `^` is one only as a name's first component: Cosmos3-Omni's releases hold Qwen3-VL's vision
# tower flat beside the language model's `layers.*` (`blocks.*`, `merger.*`, `patch_embed.*`, `pos_embed.*`,
# `deepstack_merger_list.*`: its conversion mapping), and `blocks` elsewhere is a text model's (MPT, DBRX).
VISION_MODULES: tuple[str, ...] = (
    "vision_tower", "vision_model", "visual", "multi_modal_projector", "mm_projector", "connector", "image_newline",
    "aligner", "high_res_vision_model", "high_res_vision_neck", "high_res_vision_proj", "high_res_vision_alpha",
    "visual_embeddings_table", "vte", "visual_tokenizer", "qformer", "query_tokens", "language_projection", "image_tower",
    "video_tower", "audio_tower", "embed_vision", "embed_audio", "embed_tokens_extend", "projector", "mlp_AR", "vit",
    "vision_projector", "vision_encoder", "vision_projection", "patch_merge_mlp", "merger", "mlp1",
    "layerwise_projectors", "spatial_projectors", "vqmodel", "generation_embeddings", "generation_aligner",
    "generation_head", "audio", "vision_tokenizer", "audio_tokenizer",
    "^blocks", "^patch_embed", "^pos_embed", "^deepstack_merger_list")
# Wrappers whose config.json is their language model's own (no text_config): model_type -> the text model_type whose
# family describes the text path. Phi-4-multimodal's decoder is Phi-3's (modeling_phi4_multimodal.py: fused qkv_proj
# and gate_up_proj, partial rotary, the same cache), its image and audio towers beside it (embed_tokens_extend).
FLAT = {"phi4_multimodal": "phi3"}
# Audio-language wrappers (text_config beside an audio_config, no vision tower) whose text-only forward is their
# language model's and whose other modules VISION_MODULES names (tests/test_wrappers.py checks each against
# transformers): MOSS-Transcribe-Diarize, and the `audio_tower` + `multi_modal_projector` + `language_model` ones
# (modeling_voxtral.py, modeling_qwen2_audio.py, modeling_audioflamingo3.py, modeling_musicflamingo.py,
# modeling_glmasr.py: without input_features their forward embeds the ids and runs the language model and lm_head
# alone). Not any audio_config: CLAP's and PE-Audio's are dual encoders, Granite Speech's, Fun-ASR's or VibeVoice's
# other modules are not named here, and Qwen3-ASR's token classifier (GenericForTokenClassification: a biased score)
# is no head of its Qwen3 text model's family (the meta path answers it).
AUDIO = ("moss_transcribe_diarize", "voxtral", "qwen2_audio", "audioflamingo3", "musicflamingo", "glmasr")


# Wrappers whose text forward also runs each modality's embedder over every token: Gemma 3n's Gemma3nModel.forward looks
# every id up in embed_vision and embed_audio (an id outside a modality's range as a dummy one) before keeping only the
# rows of that modality's tokens, so each projection (embedding_projection, [tokens, its width] x [width, hidden]) runs
# on text too. model_type -> (the embedder, the sub-config whose hidden_size is its width, that sub-config's model_type
# when the config leaves it out), in forward order.
EMBEDDERS = {"gemma3n": (("embed_vision", "vision_config", "gemma3n_vision"),
                         ("embed_audio", "audio_config", "gemma3n_audio"))}


def language_config(cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """The language model's config of a multimodal wrapper's config.json (its model_type as the family
    registry knows it, the wrapper's architectures and dtype), or None when `cfg` nests none."""
    mt, text = cfg.get("model_type"), _text(cfg)
    # a vision tower beside it (vision_config; null: a wrapper built without one, Gemma 4's default, whose Gemma4Model
    # then holds the language model alone and whose text forward is its language model's), or an audio tower of a
    # wrapper AUDIO lists
    vision = cfg.get("vision_config")
    towers = isinstance(vision, dict) or ("vision_config" in cfg and vision is None) or mt in FLAT or (
        mt in AUDIO and isinstance(cfg.get("audio_config"), dict))
    if not isinstance(text, dict) or not isinstance(text.get("model_type"), str) or not towers:
        return None
    out = dict(text)
    out["model_type"] = TEXT_ALIASES.get(text["model_type"], (text["model_type"],))[0]
    heads, width = text.get("num_attention_heads"), text.get("hidden_size")
    if text["model_type"] in WIDTH_HEADS and isinstance(heads, int) and isinstance(width, int) and heads > 0:
        out.update(head_dim=width // heads, attention_bias=True)
    out["architectures"] = cfg.get("architectures") or []   # (checked where read: base.architectures)
    for key in ("torch_dtype", "dtype"):   # often the wrapper's alone
        if out.get(key) is None and cfg.get(key) is not None:
            out[key] = cfg[key]
    # whether the wrapper's LM head is its embeddings: transformers 5 reads the wrapper's own config for most
    # (Mistral 3, InternVL, Gemma 3: the top `tie_word_embeddings`, whatever text_config says), the text config's
    # for some (BLIP-2), either for others (LLaVA, Qwen2-VL): the class table's switch (families/tie_table.py); a class
    # the table lists with no tie at all (Qwen2-Audio, Voxtral, Mllama: no _tied_weights_keys) never ties its head,
    # whatever text_config says
    own = class_ties(cfg)
    if own is not None and (own.switched or not own.groups):
        out["tie_word_embeddings"] = own.switch and own.switched
    if mt in EMBEDDERS:   # (their weights are outside, counted from the checkpoint: only their FLOPs are the model's)
        out["multimodal_embedders"] = {   # (their widths: the sub-configs', else their classes' defaults)
            name: config_value(s if isinstance(s := cfg.get(key), Mapping) else {}, "hidden_size", sub)
            for name, key, sub in EMBEDDERS[mt]}
    return out


def _text(cfg: Mapping[str, Any]) -> Any:
    """The text model's config a wrapper's config.json holds (text_config, or a FLAT wrapper's own keys)."""
    mt = cfg.get("model_type")
    return flat(cfg) if isinstance(mt, str) and mt in FLAT else cfg.get("text_config")


def flat(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's config of a FLAT wrapper: its own keys, under the text model_type, the keys it leaves
    out at its own config class's defaults (config_defaults.json; where Cfg.get would look: the top level or
    rope_parameters), not the text model_type's."""
    mt = str(cfg.get("model_type"))
    rope = cfg.get("rope_parameters")
    saved = set(cfg) | (set(rope) if isinstance(rope, Mapping) else set())
    out = {k: v for k, v in _defaults().get(mt, {}).items() if k not in saved and v is not None}
    return {**out, **cfg, "model_type": FLAT[mt]}


def mrope(cfg: Mapping[str, Any]) -> bool:
    """Whether the wrapper's text model rotates by M-RoPE (TEXT_ALIASES)."""
    text = _text(cfg)
    alias = TEXT_ALIASES.get(str(text.get("model_type"))) if isinstance(text, dict) else None
    return bool(alias and alias[1])


def note(cfg: Mapping[str, Any], text_type: str) -> str:
    """The assumption a wrapper's spec carries."""
    towers = []
    for kind in ("vision", "audio"):
        sub = cfg.get(f"{kind}_config")
        if isinstance(sub, dict):
            st = sub.get("model_type")
            towers.append(f"the {kind} tower{f' ({st})' if isinstance(st, str) else ''}")
    what = "vision-language" if isinstance(cfg.get("vision_config"), dict) or not towers else "audio-language"
    source = "its own keys" if cfg.get("model_type") in FLAT else "text_config"
    parts = ' and '.join(towers or ['the vision tower'])
    if modelled(cfg):
        return (f"{cfg.get('model_type')} ({what}): the language model from {source} ({text_type}), for text tokens; "
                f"{parts} and the projector counted from the checkpoint, their FLOPs per image with `flops --images N` "
                "(their activations not modelled)")
    return (f"{cfg.get('model_type')} ({what}): the language model from {source} ({text_type}), for text tokens; "
            f"{parts} and the projector are outside the analytic model: no "
            "image or audio FLOPs or activations, their parameters counted from the checkpoint")


def outside_module(name: str, modules: tuple[str, ...]) -> str | None:
    """The outermost of `modules` tensor `name` is in (a whole component of its dotted name, or its first: `^name`;
    Qwen2-VL's `visual`, not the `merger` inside it), else None."""
    parts = name.split(".")
    return parts[0] if "^" + parts[0] in modules else next((m for m in parts if m in modules), None)


def is_outside(name: str, modules: tuple[str, ...]) -> bool:
    """Is tensor `name` one of `modules` or in one (outside_module)?"""
    return outside_module(name, modules) is not None
