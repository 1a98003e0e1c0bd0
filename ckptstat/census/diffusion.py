"""A diffusion model saved as one file in its original layout, as AUTOMATIC1111, ComfyUI and model sites distribute it,
and as diffusers' `from_single_file` reads it (docs/adapters.md, "Single-file diffusion checkpoints"):

- Stable Diffusion 1.x, 2.x (CompVis' LDM) and XL (Stability's SGM): the pipeline's models side by side under fixed
  prefixes, the UNet under `model.diffusion_model.`, the VAE under `first_stage_model.`, the text encoders under
  `cond_stage_model.` or `conditioner.embedders.N.`, and, in a trainer's save, the UNet's EMA copy (`model_ema.`:
  LitEma's buffers) and the noise schedule's buffers;
- Stable Diffusion 3 and 3.5 (Stability's MMDiT layout): the transformer alone (`joint_blocks.`...), or under
  `model.diffusion_model.` beside the VAE (`first_stage_model.`) and the text encoders (`text_encoders.clip_l.`,
  `text_encoders.clip_g.`, `text_encoders.t5xxl.`);
- FLUX.1 (Black Forest Labs' layout): the transformer alone (`double_blocks.`, `single_blocks.`...), or, in ComfyUI's
  all-in-one files, under `model.diffusion_model.` beside the VAE (`vae.`) and the text encoders
  (`text_encoders.clip_l.`, `text_encoders.t5xxl.`);
- a ControlNet alone: LDM's under `control_model.` (the ControlNet 1.1 releases, as ControlLDM holds it) or diffusers'
  (`controlnet_cond_embedding`), SDXL's by diffusers' keys;
- AnimateDiff's motion modules in their original names (`motion_modules.N.temporal_transformer`), their saved
  positional encodings buffers;
- a UNet alone in LDM's names (openaimodel.py's UNetModel), bare or under `model.diffusion_model.`;
- a VAE alone in LDM's names (`vae-ft-mse-840000-ema-pruned.safetensors`, SDXL's `sdxl_vae`, FLUX's `ae.safetensors`):
  `encoder.` / `decoder.` with LDM's block names (`mid.attn_1.q`), `quant_conv` / `post_quant_conv` where it has them.

`layout` says whether a checkpoint is one, and which model diffusers would load it as: its model type, by the rules of
diffusers' `infer_diffusers_model_type` (diffusers/loaders/single_file_utils.py: the key names of CHECKPOINT_KEY_NAMES
and the shapes it checks), for the UNet models, SD 3 / 3.5 and FLUX.1. `component` names the part a tensor belongs to
by its prefix, as `from_single_file` hands them to each model (LDM_UNET_KEY, LDM_VAE_KEYS, the text encoders').
tests/test_single_file.py checks both against diffusers 0.42.1.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

UNET = "model.diffusion_model."
# diffusers' CHECKPOINT_KEY_NAMES for the UNet models (single_file_utils.py)
KEYS = {
    "v2": UNET + "input_blocks.2.1.transformer_blocks.0.attn2.to_k.weight",   # its width: OpenCLIP ViT-H's 1024
    "xl_base": "conditioner.embedders.1.model.transformer.resblocks.9.mlp.c_proj.bias",
    "xl_refiner": "conditioner.embedders.0.model.transformer.resblocks.9.mlp.c_proj.bias",
    "upscale": UNET + "input_blocks.10.0.skip_connection.bias",
    "playground-v2-5": "edm_mean",
    "inpainting": UNET + "input_blocks.0.0.weight",   # its input channels: 9 inpainting, 8 instruct-pix2pix
    "controlnet": "control_model.time_embed.0.weight",
    "sd3": "joint_blocks.0.context_block.adaLN_modulation.1.bias",   # its width: 6 x 1536 in 3 medium and 3.5 medium
    "sd3-pos": "pos_embed",                                          # its positions: 192^2 in 3, 384^2 in 3.5 medium
    "sd35_large": "joint_blocks.37.x_block.mlp.fc1.weight",
    "flux": "double_blocks.0.img_attn.norm.key_norm.scale",
    "flux-guidance": "guidance_in.in_layer.bias",   # flux-dev, -fill, -depth: guidance-distilled
    "flux-img-in": "img_in.weight",                   # its input width: 384 fill, 128 depth
}
# A ControlNet alone (diffusers' "controlnet" keys: LDM's ControlNet under `control_model.`, as ControlLDM holds it and
# the ControlNet 1.1 releases carry it, or diffusers' own names), and its SDXL kinds by diffusers' keys
CONTROLNET = ("control_model.time_embed.0.weight", "controlnet_cond_embedding.conv_in.weight")
CONTROLNET_XL = "add_embedding.linear_1.weight"
CONTROLNET_XL_LARGE = "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_k.weight"
CONTROLNET_XL_MID = "down_blocks.1.attentions.0.norm.weight"
# The ControlNets of the transformers, alone in diffusers' names: FLUX.1's and Qwen-Image's (`controlnet_x_embedder`:
# InstantX's and Shakker-Labs' unions), SD 3's (`pos_embed_input`), which diffusers' single-file rules do not type; and
# Z-Image's (alibaba-pai's Fun ControlNets, diffusers' keys: 2.x's fifteenth control layer, 1.0's patch embedding)
DIT_CONTROLNETS = ("controlnet_x_embedder.weight", "pos_embed_input.proj.weight")
# XLabs' FLUX.1 ControlNets in their own names (x-flux's ControlNetFlux: FLUX.1's double-stream blocks, which
# diffusers' rules take for FLUX.1's transformer, and its hint encoder)
XLABS_CONTROLNET = "input_hint_block.0.weight"
Z_CONTROLNET_2 = "control_layers.14.adaLN_modulation.0.weight"
Z_CONTROLNET = "control_all_x_embedder.2-1.weight"
Z_CONTROLNET_REFINER = "control_noise_refiner.0.before_proj.weight"   # (2.0 holds it zero, 2.1 trained: by its values)
# Stable Cascade's UNets in Stability AI's names (diffusers' keys): stage C's (the prior) text mapper, stage B's (the
# decoder) second level's first block
CASCADE_C = "clip_txt_mapper.weight"
CASCADE_B = "down_blocks.1.0.channelwise.0.weight"
CONTROLNET_CONTEXT = ("control_model.middle_block.1.transformer_blocks.0.attn2.to_k.weight",   # its text width
                      "mid_block.attentions.0.transformer_blocks.0.attn2.to_k.weight")
# AnimateDiff's motion modules (guoyww/AnimateDiff's mm_*.ckpt, in its original names): diffusers' keys, the positional
# encodings' (`pos_encoder.pe`, a buffer the original code registered and saved, which diffusers' converter drops)
ANIMATEDIFF = "down_blocks.0.motion_modules.0.temporal_transformer.transformer_blocks.0.attention_blocks.0.pos_encoder.pe"
ANIMATEDIFF_KEYS = {"scribble": "controlnet_cond_embedding.conv_in.weight", "rgb": "controlnet_cond_embedding.weight",
                    "v2": "mid_block.motion_modules.0.temporal_transformer.norm.bias",
                    "sdxl_beta": "up_blocks.2.motion_modules.0.temporal_transformer.norm.weight"}
# Keys of diffusers' models tried before FLUX.1 whose files also hold `double_blocks` (FLUX.2, FLUX.3, Chroma): a file
# with one of them is not claimed
NOT_FLUX1 = ("single_stream_modulation.lin.weight", "early_stream_modulations.image.lin.weight",
             "distilled_guidance_layer.in_proj.bias")
# The pipeline diffusers fetches the config of, for each model type (DIFFUSERS_DEFAULT_PIPELINE_PATHS): a table
# fixtures/make_diffusers_pipelines.py writes from diffusers (census/diffusers_pipelines.json), read on a layout's first use
PIPELINES_TABLE = Path(__file__).with_name("diffusers_pipelines.json")


@functools.cache
def _pipelines() -> dict[str, str]:
    return dict(json.loads(PIPELINES_TABLE.read_text(encoding="utf-8"))["pipelines"])


def pipeline(model_type: str | None) -> str | None:
    """The Hub repository whose config diffusers' `from_single_file` reads for a model type (None: none)."""
    return _pipelines().get(model_type) if model_type else None
# Prefix -> the pipeline component from_single_file loads from it (first match wins)
UNET_PARTS = (
    (UNET, "unet"),
    ("first_stage_model.", "vae"), ("vae.", "vae"),                         # LDM_VAE_KEYS
    ("cond_stage_model.transformer.", "text_encoder"),                      # 1.x: CLIP ViT-L
    ("cond_stage_model.model.", "text_encoder"),                            # 2.x: OpenCLIP ViT-H
    ("conditioner.embedders.0.transformer.", "text_encoder"),               # XL: CLIP ViT-L
    ("conditioner.embedders.1.model.", "text_encoder_2"),                   # XL: OpenCLIP ViT-bigG
    ("conditioner.embedders.0.model.", "text_encoder_2"),                   # XL refiner: OpenCLIP ViT-bigG alone
    ("model_ema.", "unet EMA copy"),                                        # ldm/modules/ema.py LitEma
    ("control_model.", "controlnet"),                                       # ControlLDM's ControlNet beside the UNet
)
# OpenCLIP text encoders (2.x's ViT-H, XL's bigG): diffusers loads `transformer.*` and the names its
# DIFFUSERS_TO_LDM_MAPPING["openclip"]["layers"] maps, but for 2.x not the last block nor text_projection
# (SD_2_TEXT_ENCODER_KEYS_TO_IGNORE: 2.x reads the penultimate layer); the rest (`logit_scale`) it leaves in the file
OPENCLIP = ("cond_stage_model.model.", "conditioner.embedders.1.model.", "conditioner.embedders.0.model.")
OPENCLIP_LOADED = frozenset(("positional_embedding", "token_embedding.weight", "ln_final.weight", "ln_final.bias",
                             "text_projection"))
SD2_IGNORED = ("transformer.resblocks.23.", "text_projection")
NOT_LOADED = "not loaded by diffusers"
SD3_PARTS = (
    (UNET, "transformer"), ("first_stage_model.", "vae"), ("text_encoders.clip_l.", "text_encoder"),
    ("text_encoders.clip_g.", "text_encoder_2"), ("text_encoders.t5xxl.", "text_encoder_3"),   # SD3 pipeline's names
)
FLUX_PARTS = (
    (UNET, "transformer"), ("vae.", "vae"), ("first_stage_model.", "vae"),
    ("text_encoders.clip_l.", "text_encoder"), ("text_encoders.t5xxl.", "text_encoder_2"),   # FluxPipeline's names
)
# The noise schedule's buffers: ldm/models/diffusion/ddpm.py register_schedule's, LatentDiffusion's scale_factor, SGM's
# (XL) DiscreteDenoiser `sigmas` (a learned `logvar`, with learn_logvar, is a parameter: "other")
SCHEDULE = frozenset((
    "denoiser.sigmas", "betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod", "sqrt_one_minus_alphas_cumprod",
    "log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod", "posterior_variance",
    "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2", "scale_factor"))
OTHER = "other"
SCHEDULE_COMPONENT = "noise schedule"


WRAPPERS = ("", "state_dict.")   # the pipeline's names at the top, or under Lightning's `state_dict` (LDM's trainer)


class Layout(NamedTuple):
    family: str            # stable_diffusion, stable_diffusion_3, flux
    what: str              # what the file holds, in words
    model_type: str | None   # diffusers' infer_diffusers_model_type (None: a VAE alone, which it does not name)
    wrapper: str           # what the pipeline's names sit under in the file ("" or "state_dict.")
    parts: tuple[tuple[str, str], ...]   # prefix -> component, first match wins
    rest: str              # the component of a name no prefix matches (a bare FLUX.1 file's: its transformer)
    buffers: tuple[str, ...] = ()   # names the model registers as buffers that the name rules cannot tell


def axis_size(shape: Callable[[str], tuple[int, ...] | None], key: str, axis: int) -> int | None:
    s = shape(key)
    return s[axis] if s is not None and len(s) > max(axis, -axis - 1) else None


def layout(names: Mapping[str, object], shape: Callable[[str], tuple[int, ...] | None]) -> Layout | None:
    """The single-file layout of a checkpoint with these tensor names (None: not one): a UNet under
    `model.diffusion_model.input_blocks.` and a VAE or a text encoder beside it, or a FLUX.1 transformer. Its model
    type follows infer_diffusers_model_type's branches, in its order."""
    wrapper = next((w for w in WRAPPERS if w + UNET + "input_blocks.0.0.weight" in names), None)
    if wrapper is None:   # (diffusers tries a ControlNet, then SD 3, then FLUX.1)
        return (_controlnet(names, shape) or _dit_controlnet(names) or _stable_cascade(names, shape) or _sd3(names, shape)
                or _animatediff(names, shape) or _flux(names, shape) or _vae(names, shape) or _unet_alone(names, shape, ""))
    beside = tuple(wrapper + p for p in ("first_stage_model.", "cond_stage_model.", "conditioner."))
    if not any(n.startswith(beside) for n in names):   # a UNet alone: no pipeline's layout
        return _unet_alone(names, shape, wrapper + UNET)

    def has(key: str) -> bool:
        return wrapper + key in names

    def width(key: str, axis: int) -> int | None:
        return axis_size(shape, wrapper + key, axis)

    channels = width(KEYS["inpainting"], 1)
    v2 = has(KEYS["v2"]) and width(KEYS["v2"], -1) == 1024
    if has(KEYS["inpainting"]) and channels == 9:
        kind = "inpainting_v2" if v2 else "xl_inpaint" if has(KEYS["xl_base"]) else "inpainting"
    elif v2:
        kind = "v2"
    elif has(KEYS["playground-v2-5"]):
        kind = "playground-v2-5"
    elif has(KEYS["xl_base"]):
        kind = "xl_base"
    elif has(KEYS["xl_refiner"]):
        kind = "xl_refiner"
    elif has(KEYS["upscale"]):
        kind = "upscale"
    elif has(KEYS["controlnet"]):
        kind = "controlnet"
    elif has(KEYS["inpainting"]) and channels == 8:
        kind = "instruct-pix2pix"
    else:
        kind = "v1"
    return Layout("stable_diffusion", "a Stable Diffusion pipeline", kind, wrapper, UNET_PARTS,
                  OTHER)


UNET_KEYS = ("input_blocks.0.0.weight", "time_embed.0.weight", "out.2.weight")   # openaimodel.py's UNetModel


def _unet_alone(names: Mapping[str, object], shape: Callable[[str], tuple[int, ...] | None], prefix: str) -> Layout | None:
    """A UNet in LDM's names alone (openaimodel.py UNetModel: Stable Diffusion's, as "UNet only" files and ComfyUI-GGUF's
    quantised SD 1.x / XL hold it, bare or under `model.diffusion_model.`; ADM's). diffusers' rules type no UNet
    without the pipeline beside it: no model type. Said: its text width (the first cross-attention's keys' input),
    and XL's size conditioning (`label_emb`)."""
    if not all(prefix + k in names for k in UNET_KEYS) or (prefix and not all(n.startswith(prefix) for n in names)):
        return None
    context = next((axis_size(shape, n, 1) for n in names if n.startswith(prefix + "input_blocks.")
                    and n.endswith(".transformer_blocks.0.attn2.to_k.weight")), None)
    said = [f"text width {context}" if context else "no cross-attention"]
    if prefix + "label_emb.0.0.weight" in names:
        said.append("XL's size conditioning")
    return Layout("unet", f"a UNet alone (LDM's names, {', '.join(said)})", None, "", ((prefix, "unet"),), "unet")


def _animatediff(names: Mapping[str, object], shape: Callable[[str], tuple[int, ...] | None]) -> Layout | None:
    """AnimateDiff's motion modules in their original names; the type by diffusers' rules (SparseCtrl's, v2 by its mid
    block, XL's beta by its last up block's width, v1 by its 24 frames, else v3); the positional encodings buffers."""
    if ANIMATEDIFF not in names:
        return None
    frames = axis_size(shape, ANIMATEDIFF, 1)
    kind = next((f"animatediff_{k}" for k in ("scribble", "rgb", "v2") if ANIMATEDIFF_KEYS[k] in names), None)
    if kind is None:
        kind = ("animatediff_sdxl_beta" if axis_size(shape, ANIMATEDIFF_KEYS["sdxl_beta"], -1) == 320
                else "animatediff_v1" if frames == 24 else "animatediff_v3")
    modules = sum(1 for n in names if n.endswith(".temporal_transformer.norm.weight"))
    what = f"AnimateDiff motion modules ({modules} modules" + (f", {frames} frames)" if frames else ")")
    encodings = tuple(n for n in names if n.endswith(".pos_encoder.pe"))
    return Layout("animatediff", what, kind, "", (), "motion_adapter", encodings)


def _controlnet(names: Mapping[str, object], shape: Callable[[str], tuple[int, ...] | None]) -> Layout | None:
    """A ControlNet alone, in LDM's names or diffusers'; its model type by diffusers' rules."""
    if not any(k in names for k in CONTROLNET):
        return None
    if CONTROLNET_XL in names:
        kind = ("controlnet_xl_large" if CONTROLNET_XL_LARGE in names else "controlnet_xl_mid" if CONTROLNET_XL_MID in names
                else "controlnet_xl_small")
    else:
        kind = "controlnet"
    context = next((axis_size(shape, k, 1) for k in CONTROLNET_CONTEXT if k in names), None)
    what = "a ControlNet" + (f" (text width {context})" if context else "")
    return Layout("controlnet", what, kind, "", (("control_model.", "controlnet"),), "controlnet")


def _dit_controlnet(names: Mapping[str, object]) -> Layout | None:
    """A transformer's ControlNet alone (DIT_CONTROLNETS, XLabs', Z-Image's): its blocks; Z-Image's type by diffusers'
    rules."""
    def blocks(prefix: str) -> int:
        return len({n[len(prefix):].partition(".")[0] for n in names if n.startswith(prefix)})
    if any(k in names for k in DIT_CONTROLNETS):
        title = ("Qwen-Image" if "img_in.weight" in names else "FLUX.1" if "x_embedder.weight" in names
                 else "Stable Diffusion 3" if DIT_CONTROLNETS[1] in names else None)
        if title is None:
            return None
        double = blocks("transformer_blocks.")
        stack = (f"{double} double- and {blocks('single_transformer_blocks.')} single-stream blocks" if title == "FLUX.1"
                 else f"{double} blocks")
        what = f"a {title} ControlNet ({stack}" + (", control modes)" if "controlnet_mode_embedder.weight" in names else ")")
        # SD 3's PatchEmbed positions: a buffer, as SD3Transformer2DModel's (see _sd3)
        return Layout("controlnet", what, None, "", (), "controlnet", tuple(k for k in ("pos_embed.pos_embed",) if k in names))
    if XLABS_CONTROLNET in names and KEYS["flux"] in names:
        return Layout("controlnet", f"a FLUX.1 ControlNet (XLabs', {blocks('double_blocks.')} double-stream blocks)", None,
                      "", (), "controlnet")
    if Z_CONTROLNET_2 in names:
        kind = None if Z_CONTROLNET_REFINER in names else "z-image-turbo-controlnet-2.0"
    elif Z_CONTROLNET in names:
        kind = "z-image-turbo-controlnet"
    else:
        return None
    refiner = blocks("control_noise_refiner.")
    what = (f"a Z-Image ControlNet ({blocks('control_layers.')} control layers"
            + (f", {refiner} noise-refiner layers" if refiner else "") + ")")
    return Layout("controlnet", what, kind, "", (), "controlnet")


def _stable_cascade(names: Mapping[str, object], shape: Callable[[str], tuple[int, ...] | None]) -> Layout | None:
    """Stable Cascade's stage C (its width the text mapper's: 2048, the lite 1536) or stage B (its levels' widths: the
    second 640, the lite 576), the type by diffusers' rules."""
    if CASCADE_C in names:
        width = axis_size(shape, CASCADE_C, 0)
        kind = {2048: "stable_cascade_stage_c", 1536: "stable_cascade_stage_c_lite"}.get(width or 0)
        what = "a Stable Cascade stage C UNet (the prior" + (f", width {width})" if width else ")")
    elif CASCADE_B in names:
        kind = {640: "stable_cascade_stage_b", 576: "stable_cascade_stage_b_lite"}.get(axis_size(shape, CASCADE_B, -1) or 0)
        widths = [axis_size(shape, f"down_blocks.{i}.0.channelwise.0.weight", -1)
                  for i in range(len({n.split(".")[1] for n in names if n.startswith("down_blocks.")}))]
        what = "a Stable Cascade stage B UNet (the decoder, widths " + ", ".join(str(w) for w in widths if w) + ")"
    else:
        return None
    return Layout("stable_cascade", what, kind, "", (), "prior" if CASCADE_C in names else "decoder")


def _sd3(names: Mapping[str, object], shape: Callable[[str], tuple[int, ...] | None]) -> Layout | None:
    """Stable Diffusion 3 / 3.5's MMDiT, bare or under `model.diffusion_model.` beside its VAE and text encoders."""
    inner = next((p for p in ("", UNET) if p + KEYS["sd3"] in names or p + KEYS["sd35_large"] in names), None)
    if inner is None:
        return None
    if axis_size(shape, inner + KEYS["sd3"], -1) == 9216:
        positions = axis_size(shape, inner + KEYS["sd3-pos"], 1)
        kind = "sd3" if positions == 36864 else "sd35_medium" if positions == 147456 else None
    else:
        kind = "sd35_large" if inner + KEYS["sd35_large"] in names else None
    if kind is None:   # (diffusers' own rules name no model for it)
        return None
    what = "a Stable Diffusion 3 transformer" if inner == "" else "a Stable Diffusion 3 pipeline"
    # PatchEmbed's positions: a buffer of SD3Transformer2DModel (diffusers' parameters() leaves it out)
    return Layout("stable_diffusion_3", what, kind, "", SD3_PARTS,
                  "transformer" if inner == "" else OTHER, (inner + KEYS["sd3-pos"],))


def _flux(names: Mapping[str, object], shape: Callable[[str], tuple[int, ...] | None]) -> Layout | None:
    """FLUX.1's transformer, bare or under `model.diffusion_model.` beside its VAE and text encoders (ComfyUI)."""
    inner = next((p for p in ("", UNET) if p + KEYS["flux"] in names), None)
    if inner is None or any(p + k in names for p in ("", UNET) for k in NOT_FLUX1):
        return None
    if inner + KEYS["flux-guidance"] in names:
        width = axis_size(shape, inner + KEYS["flux-img-in"], 1)
        kind = "flux-fill" if width == 384 else "flux-depth" if width == 128 else "flux-dev"
    else:
        kind = "flux-schnell"
    what = "a FLUX.1 transformer" if inner == "" else "a FLUX.1 pipeline"
    return Layout("flux", what, kind, "", FLUX_PARTS, "transformer" if inner == "" else OTHER)


VAE_KEYS = ("encoder.conv_in.weight", "decoder.conv_out.weight", "encoder.mid.attn_1.q.weight")   # LDM's names
# diffusers' AutoencoderKL's attention (and the older names diffusers still reads: madebyollin/sdxl-vae-fp16-fix's and
# stabilityai/sd-vae-ft-mse's files hold one or the other)
DIFFUSERS_VAE_ATTENTION = ("encoder.mid_block.attentions.0.to_q.weight", "encoder.mid_block.attentions.0.query.weight")
VAE_PARTS = ("encoder.", "decoder.", "quant_conv.", "post_quant_conv.", "bn.")   # bn.: FLUX.2's latent BatchNorm


def _vae(names: Mapping[str, object], shape: Callable[[str], tuple[int, ...] | None]) -> Layout | None:
    """A VAE alone in LDM's names (what `AutoencoderKL.from_single_file` reads) or diffusers' (its `vae/` folder's file
    without the config.json beside it): every name under its parts."""
    ldm = VAE_KEYS[2] in names
    if (not all(k in names for k in VAE_KEYS[:2]) or not (ldm or any(k in names for k in DIFFUSERS_VAE_ATTENTION))
            or not all(n.startswith(VAE_PARTS) for n in names)):
        return None
    latents = axis_size(shape, "decoder.conv_in.weight", 1)   # its input: the latent channels (4: SD 1.x-XL, 16: SD 3, FLUX)
    what = ("a VAE (" + ("LDM's autoencoder" if ldm else "diffusers' AutoencoderKL")
            + (f", {latents} latent channels)" if latents else ")"))
    return Layout("vae", what, None, "", (), "vae")


def component(name: str, one: Layout) -> str:
    """The pipeline component a tensor of a single-file checkpoint belongs to (its prefix), the noise schedule's
    buffers, or the layout's rest ("other": a trainer's state beside the pipeline too)."""
    if not name.startswith(one.wrapper):
        return OTHER
    name = name[len(one.wrapper):]
    for prefix, part in one.parts:
        if name.startswith(prefix):
            return _openclip(prefix, name[len(prefix):], part) if prefix in OPENCLIP else part
    return SCHEDULE_COMPONENT if name in SCHEDULE else one.rest


# The components the trainer registers as buffers, whatever their names say: LitEma's copy (its `num_updates` a
# counter by the name rules) and the noise schedule
BUFFER_PARTS = ("unet EMA copy", SCHEDULE_COMPONENT)


def is_buffer(name: str, one: Layout) -> bool:
    """A tensor the layout's models register as a buffer, which the name rules alone would call a parameter: the EMA
    copy, the noise schedule, and a layout's own (SD 3's `pos_embed`)."""
    return name in one.buffers or component(name, one) in BUFFER_PARTS


def _openclip(prefix: str, rest: str, part: str) -> str:
    if prefix == OPENCLIP[0] and rest.startswith(SD2_IGNORED):
        return NOT_LOADED
    return part if rest.startswith("transformer.") or rest in OPENCLIP_LOADED else NOT_LOADED


# A name every layout here holds (each one's first test): census/counts.py tells a checkpoint with none of them in one
# pass over its names, before any look-up (a look-up scans a big header's names: core/tensor_table.py)
GATES = frozenset((*(w + UNET + "input_blocks.0.0.weight" for w in WRAPPERS), *CONTROLNET, VAE_KEYS[0], UNET_KEYS[0], ANIMATEDIFF,
                   *DIT_CONTROLNETS, XLABS_CONTROLNET, Z_CONTROLNET_2, Z_CONTROLNET, CASCADE_C, CASCADE_B,
                   *(p + KEYS[k] for p in ("", UNET) for k in ("sd3", "sd35_large", "flux"))))
