"""The video and image diffusion transformers after FLUX.1 saved as one file in their authors' names, as their
releases, ComfyUI's repackaged copies and model sites distribute them, and as diffusers' `from_single_file` reads them
(docs/adapters.md, "Single-file diffusion checkpoints"):

- Wan 2.1 and 2.2 (Wan-Video's `WanModel`: `patch_embedding`, `blocks.N.self_attn`, `head.modulation`; VACE's
  `vace_blocks`), and the Wan VAEs (`WanVAE_`: `encoder.downsamples`, `decoder.middle`...);
- HunyuanVideo (Tencent's `HYVideoDiffusionTransformer`: `double_blocks`, `single_blocks`, `txt_in.individual_token_refiner`)
  and HunyuanVideo 1.5 (`HunyuanVideo_1_5_DiffusionTransformer`: the same refiner, double-stream blocks only, each
  attention's q, k and v apart: `double_blocks.N.img_attn_q`), which diffusers' rules take for HunyuanVideo's;
- FLUX.2 (Black Forest Labs' `Flux2`: FLUX.1's streams with shared modulations, `single_stream_modulation`) and
  Chroma (lodestone-rock's FLUX.1-schnell without its modulation layers: `distilled_guidance_layer`);
- AuraFlow (fal's: `double_layers`, `single_layers`, `cond_seq_linear`; Pony V7's too) and Sana (NVlabs': PixArt's
  `blocks.N.cross_attn.kv_linear`, its fixed `pos_embed` and null caption `y_embedder.y_embedding` buffers);
- HiDream-I1 (released in diffusers' own names: `double_stream_blocks.N.block`, its image MLP's routed experts);
- Cosmos 2.0 and 2.5 (NVIDIA's Predict2 and Predict2.5, `MiniTrainDIT` under `net.`: `blocks.N.self_attn.q_proj`, 2.5's
  `crossattn_proj`; their rotary tables and training counters are buffers);
- FLUX.3 (Black Forest Labs': per-mode streams, `early_stream_modulations`, `content_mode_blocks`, `single_blocks`; its
  step-distilled release's second timestep embedder, `ref_time_in`), Krea 2 (`txtfusion`, `blocks.N.mod.lin`) and
  MiniMax H3 (audio and video: `token_refiner.blocks.N.attn.qkv_proj`, `blocks`), in the names their released files
  hold (diffusers' converters' inputs: the authors' code is not at hand here);
- Mochi 1 (Genmo's `AsymmDiTJoint`: `blocks.N.attn.qkv_x`), which diffusers tries before HunyuanVideo;
- LTX-Video (Lightricks' `Transformer3DModel`: `patchify_proj`, `transformer_blocks`), in its release's one file beside
  its VAE (`model.diffusion_model.` and `vae.`);
- LTX-2 (Lightricks' `LTXModel`, audio and video: `audio_patchify_proj`, `av_ca_*_adaln_single`), in its release's one
  file beside its text connectors, video VAE, audio VAE and vocoder, each alone, or as ComfyUI splits them;
- Qwen-Image (released in diffusers' names: `txt_norm`, `transformer_blocks.N.img_mod`), which diffusers' rules do not
  type, and Qwen-Image 2.1 (`txt_in.text_norm`: ComfyUI's names, diffusers' but the MLP's fused `gate_up`);
- Lumina 2 (Alpha-VLLM's `NextDiT`: `noise_refiner`, `context_refiner`, `layers`, `cap_embedder`) and Z-Image
  (Tongyi-MAI's `ZImageTransformer2DModel`, the same plan: `all_x_embedder`, `layers.N.adaLN_modulation.0`).

Each is read bare or under ComfyUI's `model.diffusion_model.`; its model type follows diffusers'
`infer_diffusers_model_type` (the key names of CHECKPOINT_KEY_NAMES and the shapes it checks, None where diffusers'
rules name none), and what the file holds is said from its shapes (width, blocks, input channels), which diffusers'
type does not always tell apart (Wan 2.2's 5B and Wan 2.1's image-to-video model are both "wan-i2v-14B" to it).
tests/test_single_file_dit.py checks both against the authors' own models (fixtures/make_dit_headers.py) and diffusers.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from .diffusion import OTHER, UNET, Layout, axis_size

Shape = Callable[[str], tuple[int, ...] | None]

# diffusers' CHECKPOINT_KEY_NAMES for these models (single_file_utils.py), without ComfyUI's prefix
FLUX2 = "single_stream_modulation.lin.weight"
CHROMA = "distilled_guidance_layer.in_proj.bias"
FLUX3 = "early_stream_modulations.image.lin.weight"
FLUX3_DISTILLED = "ref_time_in.in_layer.weight"   # the step-distilled (flow-map) release's target-time embedder
KREA2 = "txtfusion.projector.weight"
MINIMAX_H3 = "token_refiner.blocks.0.attn.qkv_proj.weight"   # (diffusers: bare names only)
AURAFLOW = "double_layers.0.attn.w2q.weight"   # (diffusers: bare names only, all of AURAFLOW and ALSO's)
SANA = "blocks.0.cross_attn.q_linear.weight"   # (diffusers: bare names only)
SANA_BUFFERS = ("pos_embed", "y_embedder.y_embedding")   # Sana's (PixArt's) register_buffer, which diffusers drops
HIDREAM = "double_stream_blocks.0.block.adaLN_modulation.1.bias"   # (diffusers: bare names only)
COSMOS2 = "net.blocks.0.self_attn.q_proj.weight"   # (diffusers: all of COSMOS2 and ALSO's)
COSMOS25 = "net.crossattn_proj.0.weight"   # Cosmos 2.5's projection of its Qwen2.5-VL text features
# MiniTrainDIT's buffers, which diffusers' converter drops: the rotary tables, the training counters, TE's extra state
COSMOS2_BUFFERS = ("net.pos_embedder.", "net.accum_")
HUNYUAN_VIDEO = "txt_in.individual_token_refiner.blocks.0.adaLN_modulation.1.bias"   # (diffusers: bare names only)
HUNYUAN_15 = "double_blocks.0.img_attn_q.weight"   # HunyuanVideo 1.5's (HunyuanVideo's attention: a fused img_attn_qkv)
HUNYUAN_15_MEANFLOW = "time_r_in.mlp.0.weight"   # its step-distilled (MeanFlow) release's second timestep embedder
Z_IMAGE = "layers.0.adaLN_modulation.0.weight"
LUMINA2 = "cap_embedder.0.weight"    # (Z-Image holds one too: tried after it, as diffusers does)
MOCHI = "blocks.0.attn.qkv_x.weight"
LTX = "patchify_proj.weight"   # (diffusers also takes a 28th block's `scale_shift_table`, which any DiT may hold)
LTX_VAE = "vae.decoder.last_scale_shift_table", "vae.decoder.up_blocks.9.res_blocks.0.conv1.conv.weight"
# LTX-2: its transformer's audio-to-video gate (diffusers' key, tried after LTX-Video's, whose `patchify_proj` LTX-2's
# transformer holds too: diffusers' rules call the release's file LTX-Video 0.9.7; tried first here) and its VAEs'
# latent statistics
LTX2 = "av_ca_a2v_gate_adaln_single.emb.timestep_embedder.linear_1.weight"
LTX2_VAES = "audio_vae.per_channel_statistics.mean-of-means", "vae.per_channel_statistics.mean-of-means"
LTX2_GATED = "transformer_blocks.0.attn1.to_gate_logits.weight"   # LTX-2.3's (and later) attention gates
WAN = "head.modulation"
WAN_VACE = "vace_blocks.0.after_proj.bias"
WAN_ANIMATE = "motion_encoder.dec.direction.weight"
WAN_S2V = "casual_audio_encoder.weights"   # Wan 2.2's speech-to-video model (WanModel_S2V; no diffusers type: see _wan)
WAN_VAE = "decoder.middle.0.residual.0.gamma"
# Qwen-Image (1): released in diffusers' own names (QwenImageTransformer2DModel), which ComfyUI's copies keep; diffusers'
# single-file rules name no type for it (its 2.1 has `txt_in.text_norm`)
QWEN_IMAGE_21 = "txt_in.text_norm.weight"   # Qwen-Image 2.1, in ComfyUI's names (its MLP's gate and up fused)
QWEN_IMAGE = "txt_norm.weight"
QWEN_IMAGE_BLOCK = "transformer_blocks.0.img_mod.1.weight"
# the names a layout needs beside its key (diffusers' rule for AuraFlow: all four of its keys)
ALSO = {QWEN_IMAGE: (QWEN_IMAGE_BLOCK,),
        AURAFLOW: ("double_layers.0.attn.w1q.weight", "cond_seq_linear.weight", "t_embedder.mlp.0.weight"),
        COSMOS2: ("net.x_embedder.proj.1.weight", "net.pos_embedder.dim_spatial_range")}
PREFIXES = ("", UNET)
PARTS = ((UNET, "transformer"),)
LTX_PARTS = ((UNET, "transformer"), ("vae.", "vae"))   # LTX-Video's one file: its transformer beside its VAE
# LTX-2's one file: the text connectors (the Gemma features' projection, the connectors under the transformer's prefix:
# LTXModel does not hold them), the transformer, the two VAEs, the vocoder (diffusers' LTX2Pipeline's components)
LTX2_CONNECTORS = tuple(p + c for p in PREFIXES for c in ("video_embeddings_connector.", "audio_embeddings_connector.",
                                                         "embeddings_connector."))
LTX2_PARTS = (*((c, "connectors") for c in (*LTX2_CONNECTORS, "text_embedding_projection.")),
              (UNET, "transformer"), ("vae.", "vae"), ("audio_vae.", "audio_vae"), ("vocoder.", "vocoder"))
# The VAEs' latent statistics: buffers to both LTX's (CausalVideoAutoencoder registers them as it loads; LTX-2's
# PerChannelStatistics from the start); LTX-2.3's vocoder's: its anti-aliased activations' filters and its mel
# transform's bases (BigVGAN v2's Activation1d, MelSTFT)
LATENT_STATISTICS = "per_channel_statistics."
VOCODER_BUFFERS = ".filter", ".mel_basis", ".forward_basis", ".inverse_basis"

Reader = Callable[[Mapping[str, object], Shape, str], tuple[str, str | None]]   # -> (what, diffusers' model type)


def layout(names: Mapping[str, object], shape: Shape) -> Layout | None:
    """The layout of a checkpoint holding one of these transformers or the Wan VAE (None: none of them), in the order
    diffusers tries them."""
    for key, (family, read) in MODELS.items():
        inner = next((p for p in PREFIXES if all(p + k in names for k in (key, *ALSO.get(key, ())))), None)
        if inner is None and key == LTX and any(k in names for k in LTX_VAE):
            inner = UNET   # (its VAE's keys alone: the transformer, if any, under ComfyUI's prefix)
        if inner is None and key == LTX2 and _ltx2_vaes(names):
            inner = UNET   # (its VAEs without the transformer, as ComfyUI splits the release)
        if inner is not None:
            what, kind = read(names, shape, inner)
            parts = LTX2_PARTS if key == LTX2 else LTX_PARTS if key == LTX else PARTS
            return Layout(family, what, kind, "", parts, "transformer" if inner == "" else OTHER,
                          _buffers(key, names, inner))
    if WAN_VAE in names:
        latents = axis_size(shape, "conv2.weight", 0)
        what = "a Wan VAE" + (f" ({latents} latent channels)" if latents else "")
        return Layout("vae", what, "wan-t2v-14B", "", (), "vae")   # diffusers' config for any
    return None


def _buffers(key: str, names: Mapping[str, object], inner: str) -> tuple[str, ...]:
    """What the model of layout `key` registers as buffers under names the rules read as parameters: Wan-Animate's
    motion encoder (LIA's StyleGAN blocks), whose every Blur registers its `kernel`; LTX's VAEs' latent statistics and
    LTX-2.3's vocoder's filters and bases; Sana's positions and null caption; Cosmos' rotary tables, counters and
    TransformerEngine state."""
    def buffer(n: str) -> bool:
        if key in (LTX, LTX2):
            return (n.startswith(("vae.", "audio_vae.")) and LATENT_STATISTICS in n
                    or n.startswith("vocoder.") and n.endswith(VOCODER_BUFFERS))
        if key == SANA:
            return n in {inner + b for b in SANA_BUFFERS}
        if key == COSMOS2:
            return n.startswith(tuple(inner + p for p in COSMOS2_BUFFERS)) or (
                n.startswith(inner + "net.") and n.endswith("._extra_state"))
        return key == WAN and n.startswith(inner + "motion_encoder.") and n.endswith(".kernel")
    return tuple(filter(buffer, names)) if key in (LTX, LTX2, SANA, COSMOS2, WAN) else ()


def _ltx2_vaes(names: Mapping[str, object]) -> bool:
    """LTX-2's VAEs without its transformer: its audio VAE, or a video VAE's statistics without LTX-Video's VAE keys."""
    return LTX2_VAES[0] in names or (LTX2_VAES[1] in names and not any(k in names for k in LTX_VAE))


def _blocks(names: Mapping[str, object], prefix: str) -> int:
    found = re.compile(re.escape(prefix) + r"(\d+)\.")
    return len({m.group(1) for m in map(found.match, names) if m})


def _said(title: str, *parts: str, article: str = "a") -> str:
    """What a file holds, in words: `a {title} transformer (parts)`, the empty parts left out."""
    return f"{article} {title} transformer ({', '.join(p for p in parts if p)})"


def _width(shape: Shape, key: str) -> str:
    """"width W", W the rows of `key` (a patch embedding's: the model's width); "" where the file has no such tensor."""
    width = axis_size(shape, key, 0)
    return f"width {width}" if width else ""


def _wan(names: Mapping[str, object], shape: Shape, inner: str) -> tuple[str, str | None]:
    patch = shape(inner + "patch_embedding.weight") or ()
    dim, channels = (patch[0], patch[1]) if len(patch) > 1 else (None, None)
    if inner + WAN_VACE in names:
        kind = {1536: "wan-vace-1.3B", 5120: "wan-vace-14B"}.get(dim or 0)
    elif inner + WAN_ANIMATE in names:
        kind = "wan-animate-14B"
    elif dim == 1536:
        kind = "wan-t2v-1.3B"
    elif dim == 5120 and channels == 16:
        kind = "wan-t2v-14B"
    else:   # (without a patch embedding diffusers' rules stop: no type)
        kind = "wan-i2v-14B" if dim else None
    speech = inner + WAN_S2V in names   # (diffusers' rules give it the text-to-video 14B's type, whose config does not fit)
    said = ("speech-to-video" if speech else "", f"width {dim}" if dim else "", f"{_blocks(names, inner + 'blocks.')} blocks",
            f"{channels} input channels" if channels else "",
            f"{_blocks(names, inner + 'vace_blocks.')} VACE blocks" if inner + WAN_VACE in names else "",
            "a CLIP image input" if inner + "img_emb.proj.0.weight" in names else "",
            "first and last frames" if inner + "img_emb.emb_pos" in names else "",
            f"{_blocks(names, inner + 'audio_injector.injector.')} audio-injection layers" if speech else "")
    return _said("Wan video", *said), None if speech else kind


def _ltx(names: Mapping[str, object], shape: Shape, inner: str) -> tuple[str, str | None]:
    """LTX-Video's model type by diffusers' rules: 0.9.7 by a 48th block (the 13B model), 0.9.5 by its VAE's encoder
    output (2048 channels), 0.9.1 by its VAE's timestep conditioning."""
    if any(n.endswith("transformer_blocks.47.scale_shift_table") for n in names):
        kind = "ltx-video-0.9.7"
    elif "vae.encoder.conv_in.conv.bias" in names and axis_size(shape, "vae.encoder.conv_out.conv.weight", 1) == 2048:
        kind = "ltx-video-0.9.5"
    elif "vae.decoder.last_time_embedder.timestep_embedder.linear_1.weight" in names:
        kind = "ltx-video-0.9.1"
    else:
        kind = "ltx-video"
    blocks = _blocks(names, inner + "transformer_blocks.")
    if any(n.startswith("vae.") for n in names):
        return f"an LTX-Video pipeline ({blocks} transformer blocks and a VAE)", kind
    return f"an LTX-Video transformer ({blocks} blocks)", kind


def _ltx2(names: Mapping[str, object], shape: Shape, inner: str) -> tuple[str, str | None]:
    """LTX-2's one file or its parts: diffusers' one model type for it (`ltx2-dev`), what each part says."""
    said = []
    if any(n.startswith(inner + "transformer_blocks.") for n in names):
        width = axis_size(shape, inner + "patchify_proj.weight", 0)
        said.append(f"{_blocks(names, inner + 'transformer_blocks.')} transformer blocks"
                    + (f" of width {width}" if width else "")
                    + (" with gated attention" if inner + LTX2_GATED in names else ""))
    said += [what for prefixes, what in ((LTX2_CONNECTORS + ("text_embedding_projection.",), "text connectors"),
                                         (("vae.",), "video VAE"), (("audio_vae.",), "audio VAE"),
                                         (("vocoder.",), "vocoder"))
             if any(n.startswith(prefixes) for n in names)]
    return "an LTX-2 audio-video model" + (f" ({', '.join(said)})" if said else ""), "ltx2-dev"


def _flux3(names: Mapping[str, object], shape: Shape, inner: str) -> tuple[str, str | None]:
    """FLUX.3: each stream's mode blocks (the image's, its conditioning's, the text's), then single-stream blocks."""
    distilled = inner + FLUX3_DISTILLED in names
    return (_said("FLUX.3", f"{_blocks(names, inner + 'content_mode_blocks.image.')} mode and "
                            f"{_blocks(names, inner + 'single_blocks.')} single-stream blocks",
                  _width(shape, inner + "emb_in.image.weight"), "step-distilled" if distilled else ""),
            "flux-3-image-distilled" if distilled else "flux-3-image")


def _auraflow(names: Mapping[str, object], shape: Shape, inner: str) -> tuple[str, str | None]:
    """AuraFlow: joint (MMDiT) layers, then single layers; diffusers' rule reads bare names only."""
    return (_said("AuraFlow", f"{_blocks(names, inner + 'double_layers.')} joint and "
                              f"{_blocks(names, inner + 'single_layers.')} single blocks",
                  _width(shape, inner + "init_x_linear.weight"), article="an"), None if inner else "auraflow")


def _cosmos2(names: Mapping[str, object], shape: Shape, inner: str) -> tuple[str, str | None]:
    """Cosmos 2.0: diffusers' type by its patch embedding (68 inputs: text-to-image, 72: video-to-world; 2048 wide: 2B).
    Cosmos 2.5 (its text features' projection, `crossattn_proj`): no type (diffusers' rules give it 2.0's, whose
    configuration has no projection)."""
    patches = inner + "net.x_embedder.proj.1.weight"
    blocks, width = f"{_blocks(names, inner + 'net.blocks.')} blocks", _width(shape, patches)
    if inner + COSMOS25 in names:
        return _said("Cosmos Predict2.5", blocks, width), None
    task = {68: "t2i", 72: "v2w"}.get(axis_size(shape, patches, 1) or 0)
    return (_said("Cosmos Predict2", blocks, width, {"t2i": "text-to-image", "v2w": "video-to-world"}.get(task or "", "")),
            f"cosmos-2.0-{task}-{'2B' if axis_size(shape, patches, 0) == 2048 else '14B'}" if task and not inner else None)


def _hidream(names: Mapping[str, object], shape: Shape, inner: str) -> tuple[str, str | None]:
    """HiDream-I1: double-stream, then single-stream blocks, each image MLP a mixture of routed experts."""
    experts = _blocks(names, inner + "double_stream_blocks.0.block.ff_i.experts.")
    return (_said("HiDream", f"{_blocks(names, inner + 'double_stream_blocks.')} double- and "
                             f"{_blocks(names, inner + 'single_stream_blocks.')} single-stream blocks",
                  _width(shape, inner + "x_embedder.proj.weight"), f"{experts} routed experts" if experts else ""),
            None if inner else "hidream")


def _two_streams(title: str, guidance: str, kind: str | None, patches: str, bare_only: bool = False) -> Reader:
    """FLUX.1's descendants: double-stream blocks, then single-stream blocks; the input channels of the patch
    embedding `patches` (HunyuanVideo-I2V's latent concatenation: 33 against 16; diffusers' type is the same)."""
    def read(names: Mapping[str, object], shape: Shape, inner: str) -> tuple[str, str | None]:
        channels = axis_size(shape, inner + patches, 1)
        what = (f"a {title} transformer ({_blocks(names, inner + 'double_blocks.')} double- and "
                f"{_blocks(names, inner + 'single_blocks.')} single-stream blocks"
                + (f", {channels} input channels" if channels else "")
                + (", guidance-distilled" if inner + guidance in names else "") + ")")
        return what, None if bare_only and inner else kind
    return read


_HUNYUAN_1 = _two_streams("HunyuanVideo", "guidance_in.mlp.0.weight", "hunyuan-video", "img_in.proj.weight",
                         bare_only=True)


def _hunyuan_video(names: Mapping[str, object], shape: Shape, inner: str) -> tuple[str, str | None]:
    """HunyuanVideo by diffusers' rules; HunyuanVideo 1.5 without a type (diffusers has no single-file type for it: its
    rules answer HunyuanVideo's, whose configuration does not fit it)."""
    if inner + HUNYUAN_15 not in names:
        return _HUNYUAN_1(names, shape, inner)
    channels = axis_size(shape, inner + "img_in.proj.weight", 1)
    return _said("HunyuanVideo 1.5", f"{_blocks(names, inner + 'double_blocks.')} double-stream blocks",
                 _width(shape, inner + "img_in.proj.weight"), f"{channels} input channels" if channels else "",
                 "step-distilled" if inner + HUNYUAN_15_MEANFLOW in names else ""), None


def _stack(title: str, prefix: str, kind: str | None, noun: str = "blocks", patches: str = "",
           bare_only: bool = False) -> Reader:
    """A transformer said by its one stack of blocks (under `prefix`, called `noun`) and, given its patch embedding
    (`patches`), its width; diffusers' type `kind` (under a prefix too unless `bare_only`)."""
    def read(names: Mapping[str, object], shape: Shape, inner: str) -> tuple[str, str | None]:
        return (_said(title, f"{_blocks(names, inner + prefix)} {noun}", _width(shape, inner + patches) if patches else ""),
                None if bare_only and inner else kind)
    return read


def _layers(title: str, kind: str) -> Reader:
    """Lumina 2's and Z-Image's single stream of layers after the refiners, its width the caption projection's."""
    def read(names: Mapping[str, object], shape: Shape, inner: str) -> tuple[str, str | None]:
        dim = axis_size(shape, inner + "cap_embedder.1.weight", 0)
        return f"a {title} transformer ({_blocks(names, inner + 'layers.')} layers" + (
            f", width {dim})" if dim else ")"), kind
    return read


# key -> (family, reader), in diffusers' order
MODELS: dict[str, tuple[str, Reader]] = {
    FLUX2: ("flux2", _two_streams("FLUX.2", "guidance_in.in_layer.weight", "flux-2-dev", "img_in.weight")),
    FLUX3: ("flux3", _flux3),
    CHROMA: ("chroma", _two_streams("Chroma", "guidance_in.in_layer.weight", "chroma", "img_in.weight")),
    LTX2: ("ltx2", _ltx2),   # (before LTX-Video: see LTX2)
    LTX: ("ltx_video", _ltx),
    MOCHI: ("mochi", _stack("Mochi", "blocks.", "mochi-1-preview", "asymmetric blocks")),
    HUNYUAN_VIDEO: ("hunyuan_video", _hunyuan_video),
    AURAFLOW: ("auraflow", _auraflow),
    Z_IMAGE: ("z_image", _layers("Z-Image", "z-image-turbo")),
    LUMINA2: ("lumina2", _layers("Lumina 2", "lumina2")),
    SANA: ("sana", _stack("Sana", "blocks.", "sana", patches="x_embedder.proj.weight", bare_only=True)),
    WAN: ("wan", _wan),
    QWEN_IMAGE_21: ("qwen_image", _stack("Qwen-Image 2.1", "transformer_blocks.", "qwen-image-2.1")),
    KREA2: ("krea2", _stack("Krea 2", "blocks.", "krea2", patches="first.weight")),
    HIDREAM: ("hidream", _hidream),
    COSMOS2: ("cosmos", _cosmos2),
    QWEN_IMAGE: ("qwen_image", _stack("Qwen-Image", "transformer_blocks.", None)),   # (no type: see QWEN_IMAGE)
    MINIMAX_H3: ("minimax_h3", _stack("MiniMax H3 audio-video", "blocks.", "minimax-h3", patches="video_patch_proj.weight",
                                      bare_only=True)),
}
# The names one of which each of these holds (census/diffusion.py GATES)
GATES = frozenset((*(p + key for key in MODELS for p in PREFIXES), *LTX_VAE, *LTX2_VAES, WAN_VAE))
