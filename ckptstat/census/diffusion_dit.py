"""The video and image diffusion transformers after FLUX.1 saved as one file in their authors' names, as their
releases, ComfyUI's repackaged copies and model sites distribute them, and as diffusers' `from_single_file` reads them
(docs/adapters.md, "Single-file diffusion checkpoints"):

- Wan 2.1 and 2.2 (Wan-Video's `WanModel`: `patch_embedding`, `blocks.N.self_attn`, `head.modulation`; VACE's
  `vace_blocks`), and the Wan VAEs (`WanVAE_`: `encoder.downsamples`, `decoder.middle`...);
- HunyuanVideo (Tencent's `HYVideoDiffusionTransformer`: `double_blocks`, `single_blocks`, `txt_in.individual_token_refiner`);
- FLUX.2 (Black Forest Labs' `Flux2`: FLUX.1's streams with shared modulations, `single_stream_modulation`).

Each is read bare or under ComfyUI's `model.diffusion_model.`; its model type follows diffusers'
`infer_diffusers_model_type` (the key names of CHECKPOINT_KEY_NAMES and the shapes it checks, None where diffusers'
rules name none), and what the file holds is said from its shapes (width, blocks, input channels), which diffusers'
type does not always tell apart (Wan 2.2's 5B and Wan 2.1's image-to-video model are both "wan-i2v-14B" to it).
tests/test_single_file.py checks both against the authors' own models (fixtures/make_dit_headers.py) and diffusers.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from .diffusion import OTHER, PIPELINES, UNET, Layout, axis_size

Shape = Callable[[str], tuple[int, ...] | None]

# diffusers' CHECKPOINT_KEY_NAMES for these models (single_file_utils.py), without ComfyUI's prefix
WAN = "head.modulation"
WAN_VACE = "vace_blocks.0.after_proj.bias"
WAN_ANIMATE = "motion_encoder.dec.direction.weight"
WAN_VAE = "decoder.middle.0.residual.0.gamma"
HUNYUAN_VIDEO = "txt_in.individual_token_refiner.blocks.0.adaLN_modulation.1.bias"   # (diffusers: bare names only)
FLUX2 = "single_stream_modulation.lin.weight"
PREFIXES = ("", UNET)
PARTS = ((UNET, "transformer"),)


def layout(names: Mapping[str, object], shape: Shape) -> Layout | None:
    """The layout of a checkpoint holding one of these transformers or the Wan VAE (None: none of them), in the order
    diffusers tries them."""
    for key, read in ((FLUX2, _flux2), (HUNYUAN_VIDEO, _hunyuan_video), (WAN, _wan)):
        inner = next((p for p in PREFIXES if p + key in names), None)
        if inner is not None:
            what, kind = read(names, shape, inner)
            return Layout(FAMILIES[key], what, kind, PIPELINES.get(kind or ""), "", PARTS,
                          "transformer" if inner == "" else OTHER)
    if WAN_VAE in names:
        latents = axis_size(shape, "conv2.weight", 0)
        what = "a Wan VAE" + (f" ({latents} latent channels)" if latents else "")
        return Layout("vae", what, "wan-t2v-14B", PIPELINES["wan-t2v-14B"], "", (), "vae")   # diffusers' config for any
    return None


def _blocks(names: Mapping[str, object], prefix: str) -> int:
    found = re.compile(re.escape(prefix) + r"(\d+)\.")
    return len({m.group(1) for m in map(found.match, names) if m})


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
    else:
        kind = "wan-i2v-14B"
    said = (f"width {dim}" if dim else "", f"{_blocks(names, inner + 'blocks.')} blocks",
            f"{channels} input channels" if channels else "",
            f"{_blocks(names, inner + 'vace_blocks.')} VACE blocks" if inner + WAN_VACE in names else "",
            "a CLIP image input" if inner + "img_emb.proj.0.weight" in names else "",
            "first and last frames" if inner + "img_emb.emb_pos" in names else "")
    return f"a Wan video transformer ({', '.join(x for x in said if x)})", kind


def _hunyuan_video(names: Mapping[str, object], shape: Shape, inner: str) -> tuple[str, str | None]:
    what = (f"a HunyuanVideo transformer ({_blocks(names, inner + 'double_blocks.')} double- and "
            f"{_blocks(names, inner + 'single_blocks.')} single-stream blocks"
            + (", guidance-distilled" if inner + "guidance_in.mlp.0.weight" in names else "") + ")")
    return what, "hunyuan-video" if inner == "" else None


def _flux2(names: Mapping[str, object], shape: Shape, inner: str) -> tuple[str, str | None]:
    what = (f"a FLUX.2 transformer ({_blocks(names, inner + 'double_blocks.')} double- and "
            f"{_blocks(names, inner + 'single_blocks.')} single-stream blocks"
            + (", guidance-distilled" if inner + "guidance_in.in_layer.weight" in names else "") + ")")
    return what, "flux-2-dev"


FAMILIES = {WAN: "wan", HUNYUAN_VIDEO: "hunyuan_video", FLUX2: "flux2"}
