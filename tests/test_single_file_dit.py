"""The video and image diffusion transformers after FLUX.1, and their VAEs, saved as one file (census/diffusion_dit.py,
docs/adapters.md "Single-file diffusion checkpoints"): Wan 2.1 and 2.2, HunyuanVideo, FLUX.2.

Oracles:
- fixtures/single_file/dit_headers.json (fixtures/make_dit_headers.py): each model's tensor names and shapes as its
  authors' own code writes them (Wan-Video's WanModel, VaceWanModel and VAEs, Tencent's HYVideoDiffusionTransformer,
  Black Forest Labs' Flux2 and AutoEncoder, built at their released sizes on the meta device), with the model's
  `parameters()` and buffers.
- fixtures/single_file/dit_headers_diffusers.json (fixtures/make_diffusers_named_headers.py): FLUX.3, Krea 2,
  MiniMax H3, AuraFlow, Sana, Cosmos 2.0, HiDream and Stable Cascade, diffusers' own classes at their defaults
  (Cosmos' and Stable Cascade's: their conversion scripts' configurations; HiDream's: its model card's sizes) written
  under their released files' names by reversing diffusers' single-file converters (each reversal checked by running
  the converter: it gives back the model exactly).
- diffusers (the test install's 0.42.1): `infer_diffusers_model_type` on the same names and shapes, and the config
  repository DIFFUSERS_DEFAULT_PIPELINE_PATHS names for it.
- gguf-py: a ComfyUI-GGUF file of the same names (its rules: vectors, modulations and the 5-D patch embedding in F32,
  the rest quantised), its tensors as the gguf library's reader counts them.
"""
from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
single_file_utils = pytest.importorskip("diffusers.loaders.single_file_utils")

from conftest import fixture, sparse_safetensors  # noqa: E402

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.summary import summarize  # noqa: E402
from ckptstat.errors import CorruptCheckpointError  # noqa: E402

HEADERS = json.loads(open(fixture("single_file/dit_headers.json"), encoding="utf-8").read())
DIFFUSERS_NAMED = json.loads(open(fixture("single_file/dit_headers_diffusers.json"), encoding="utf-8").read())
MODELS = {**HEADERS["models"], **DIFFUSERS_NAMED["models"]}
FAMILIES = {"wan2.1-vae": "vae", "wan2.2-vae": "vae", "flux2-ae": "vae", "hunyuanvideo-t2v": "hunyuan_video",
            "flux2-dev": "flux2", "chroma": "chroma", "lumina2": "lumina2", "z-image-turbo": "z_image",
            "ltx-video-2b-0.9": "ltx_video", "controlnet-sd15": "controlnet", "controlnet-sd21": "controlnet",
            "mochi-1-preview": "mochi", "ltx-2-19b": "ltx2", "ltx-2.3-22b": "ltx2", "flux-3-image": "flux3",
            "flux-3-image-distilled": "flux3", "krea2": "krea2", "minimax-h3": "minimax_h3", "auraflow": "auraflow",
            "sana": "sana", "hidream": "hidream", "xlabs-flux-controlnet": "controlnet",
            **{f"stable_cascade_stage_{s}": "stable_cascade" for s in ("b", "b_lite", "c", "c_lite")},
            **{f"cosmos-2.0-{t}-{b}": "cosmos" for t in ("t2i", "v2w") for b in ("2B", "14B")},
            "cosmos-2.5-predict-2B": "cosmos", "cosmos-2.5-predict-14B": "cosmos"}
UNET = "model.diffusion_model."


def _family(label: str) -> str:
    return "hunyuan_video" if label.startswith("hunyuanvideo") else FAMILIES.get(label, "wan")


def _sparse_safetensors(path, tensors: dict, prefix: str = "") -> None:
    """A bf16 safetensors file of these names and shapes over a hole (conftest.sparse_safetensors)."""
    sparse_safetensors(path, {n: ("BF16", s) for n, s in tensors.items()}, prefix)


def _diffusers_type(tensors: dict, prefix: str = "") -> str | None:
    meta = {prefix + n: torch.empty(s, device="meta") for n, s in tensors.items()}
    try:
        return single_file_utils.infer_diffusers_model_type(meta)
    except UnboundLocalError:   # (a branch of diffusers' that names no type)
        return None


def test_the_headers_say_what_wrote_them():
    by = HEADERS["written_by"]   # (and the script that checked LTX-2's: test_ltx2_releases_are_what_diffusers_loads)
    assert by["script"] == "fixtures/make_dit_headers.py"
    assert {m["source"].split("@")[0] for m in HEADERS["models"].values()} == set(by["repositories"])
    by = DIFFUSERS_NAMED["written_by"]
    assert by["script"] == "fixtures/make_diffusers_named_headers.py" and by["diffusers"] == diffusers_version()


@pytest.mark.parametrize("label", sorted(MODELS))
def test_a_released_model_is_what_its_authors_wrote(tmp_path, label):
    """At its real size, in its authors' names: diffusers' model type and config repository, the authors' model's
    parameters, its buffers apart."""
    m = MODELS[label]
    path = tmp_path / "model.safetensors"
    _sparse_safetensors(path, m["tensors"])
    r = summarize(open_checkpoint(str(path)))
    one = r["single_file"]
    kind = _diffusers_type(m["tensors"])
    if label == "flux2-ae":   # an LDM-named VAE alone: diffusers' rules fall through to "v1" (no type of its own)
        assert kind == "v1" and one["model_type"] is None
    elif label.startswith("hunyuanvideo-1.5"):   # diffusers' rules take it for HunyuanVideo's, whose config does not fit
        assert kind == "hunyuan-video" and one["model_type"] is None
    elif label.startswith("cosmos-2.5"):   # and Cosmos 2.5 for 2.0's video-to-world model
        assert kind == f"cosmos-2.0-v2w-{label.rsplit('-', 1)[1]}" and one["model_type"] is None
    elif label == "xlabs-flux-controlnet":   # and XLabs' ControlNet for FLUX.1-dev's transformer
        assert kind == "flux-dev" and one["model_type"] is None
    elif label == "wan2.2-s2v-14B":   # and Wan's speech-to-video model for its text-to-video 14B
        assert kind == "wan-t2v-14B" and one["model_type"] is None
    elif label.startswith("ltx-2"):   # (see test_ltx2_is_what_diffusers_ltx2_models_load)
        assert kind == "ltx-video-0.9.7" and _ltx2_branch(m["tensors"])
        kind = "ltx2-dev"
        assert one["model_type"] == kind
    else:
        assert one["model_type"] == kind
    assert r["architecture"]["family"] == _family(label)
    assert one["pipeline"] == (single_file_utils.DIFFUSERS_DEFAULT_PIPELINE_PATHS[kind]["pretrained_model_name_or_path"]
                               if one["model_type"] else None)
    assert r["parameters"]["unique"] == m["parameters"]
    assert sum(c["buffers"] for c in one["components"]) == len(m["buffers"])
    family = _family(label)
    part = {"vae": "vae", "controlnet": "controlnet"}.get(family, "transformer")
    if family == "stable_cascade":   # (diffusers' StableCascadePriorPipeline's and DecoderPipeline's components)
        part = "prior" if "stage_c" in label else "decoder"
    whole = {part: m["parameters"]}
    assert {c["component"]: c["params"] for c in one["components"]} == m.get("components", whole)


@pytest.mark.parametrize("label", sorted(MODELS))
def test_what_the_file_holds_is_said_from_its_shapes(tmp_path, label):
    """The description names the released configuration's sizes (diffusers' type does not: Wan 2.2's 5B is
    "wan-i2v-14B" to it)."""
    m, c = MODELS[label], MODELS[label]["config"]
    path = tmp_path / "model.safetensors"
    _sparse_safetensors(path, m["tensors"])
    what = summarize(open_checkpoint(str(path)))["single_file"]["what"]
    if _family(label) == "wan":
        assert f"width {c['dim']}, {c['num_layers']} blocks, {c['in_dim']} input channels" in what
        kind = c.get("model_type", "animate")   # (WanAnimateModel has none: its own class)
        assert ("VACE" in what) == (kind == "vace")
        assert ("image input" in what) == (  # (Wan 2.1's WanModel builds its image embedding for these; 2.2's none)
            kind in ("i2v", "flf2v") and label.startswith("wan2.1") or c.get("use_img_emb", False))
        assert ("first and last frames" in what) == (kind == "flf2v")
        assert ("speech-to-video" in what) == (kind == "s2v")
        if kind == "s2v":
            assert f"{len(c['audio_inject_layers'])} audio-injection layers" in what
        if kind == "vace":
            assert f"{len(c['vace_layers'])} VACE blocks" in what
    elif label.startswith("hunyuanvideo-1.5"):
        assert what == (f"a HunyuanVideo 1.5 transformer ({c['mm_double_blocks_depth']} double-stream blocks, width "
                        f"{c['hidden_size']}, {2 * c['in_channels'] + 1} input channels"   # (concat_condition's)
                        + (", step-distilled" if c.get("use_meanflow") else "") + ")")
    elif label.startswith("hunyuanvideo"):
        assert f"{c['mm_double_blocks_depth']} double- and {c['mm_single_blocks_depth']} single-stream" in what
        assert f"{c['in_channels']} input channels" in what
        assert "guidance-distilled" in what and c["guidance_embed"]
    elif label in ("flux2-dev", "chroma"):
        assert f"{c['depth']} double- and {c['depth_single_blocks']} single-stream" in what
        assert f"{c['in_channels']} input channels" in what
        assert ("guidance-distilled" in what) == (label == "flux2-dev")   # (Chroma's guidance is its approximator's)
    elif label in ("lumina2", "z-image-turbo"):   # (NextDiT's arguments as its factory passed them; Z-Image's defaults)
        title = "Lumina 2" if label == "lumina2" else "Z-Image"
        assert what == f"a {title} transformer ({c['n_layers']} layers, width {c['dim']})"
    elif label.startswith("wan"):
        assert f"({c['z_dim']} latent channels)" in what
    elif label == "mochi-1-preview":
        assert what == f"a Mochi transformer ({c['depth']} asymmetric blocks)"
    elif label.startswith("controlnet"):
        assert what == f"a ControlNet (text width {c['context_dim']})"
    elif label == "xlabs-flux-controlnet":   # (ControlNetFlux's default depth, as load_controlnet builds it)
        assert what == "a FLUX.1 ControlNet (XLabs', 2 double-stream blocks)"
    elif label.startswith("flux-3"):
        assert what == (f"a FLUX.3 transformer ({c['num_layers']} mode and {c['num_single_layers']} single-stream "
                        f"blocks, width {c['num_attention_heads'] * c['attention_head_dim']}"
                        + (", step-distilled" if c["flow_map"] else "") + ")")
    elif label == "krea2":
        width = c["num_attention_heads"] * c["attention_head_dim"]
        assert what == f"a Krea 2 transformer ({c['num_layers']} blocks, width {width})"
    elif label == "auraflow":
        width = c["num_attention_heads"] * c["attention_head_dim"]
        assert what == (f"an AuraFlow transformer ({c['num_mmdit_layers']} joint and {c['num_single_dit_layers']} "
                        f"single blocks, width {width})")
    elif label == "sana":
        width = c["num_attention_heads"] * c["attention_head_dim"]
        assert what == f"a Sana transformer ({c['num_layers']} blocks, width {width})"
    elif label.startswith("cosmos-2.5"):
        assert what == (f"a Cosmos Predict2.5 transformer ({c['num_layers']} blocks, width "
                        f"{c['num_attention_heads'] * c['attention_head_dim']})")
    elif label.startswith("cosmos-2.0"):
        task = "text-to-image" if "t2i" in label else "video-to-world"
        assert what == (f"a Cosmos Predict2 transformer ({c['num_layers']} blocks, width "
                        f"{c['num_attention_heads'] * c['attention_head_dim']}, {task})")
    elif label.startswith("stable_cascade_stage_c"):
        assert what == f"a Stable Cascade stage C UNet (the prior, width {c['conditioning_dim']})"
    elif label.startswith("stable_cascade_stage_b"):
        widths = ", ".join(str(w) for w in c["block_out_channels"])
        assert what == f"a Stable Cascade stage B UNet (the decoder, widths {widths})"
    elif label == "hidream":
        assert what == (f"a HiDream transformer ({c['num_layers']} double- and {c['num_single_layers']} single-stream "
                        f"blocks, width {c['num_attention_heads'] * c['attention_head_dim']}, "
                        f"{c['num_routed_experts']} routed experts)")
    elif label == "minimax-h3":
        assert what == f"a MiniMax H3 audio-video transformer ({c['num_layers']} blocks, width {c['hidden_size']})"
    elif label.startswith("ltx-2"):
        t = c["transformer"]
        gated = " with gated attention" if t.get("apply_gated_attention") else ""
        assert what == (f"an LTX-2 audio-video model ({t['num_layers']} transformer blocks of width "
                        f"{t['num_attention_heads'] * t['attention_head_dim']}{gated}, text connectors, video VAE, "
                        "audio VAE, vocoder)")
    elif label.startswith("ltx"):
        assert what == f"an LTX-Video pipeline ({c['transformer']['num_layers']} transformer blocks and a VAE)"
    else:
        assert f"{c['z_channels']} latent channels" in what


@pytest.mark.parametrize("label", ["wan2.1-t2v-14B", "wan2.1-vace-1.3B", "hunyuanvideo-t2v", "flux2-dev", "chroma",
                                   "lumina2", "z-image-turbo", "mochi-1-preview", "flux-3-image-distilled", "krea2",
                                   "minimax-h3", "auraflow", "sana", "cosmos-2.0-v2w-2B", "hunyuanvideo-1.5", "hidream"])
def test_under_comfyuis_prefix(tmp_path, label):
    """ComfyUI's checkpoint saves put the transformer under model.diffusion_model.: the same model, the same count;
    the model type where diffusers' rules read that prefix (not HunyuanVideo's)."""
    m = MODELS[label]
    path = tmp_path / "model.safetensors"
    _sparse_safetensors(path, m["tensors"], UNET)
    one = summarize(open_checkpoint(str(path)))["single_file"]
    bare = _diffusers_type(m["tensors"])
    assert one["model_type"] == (bare if _diffusers_type(m["tensors"], UNET) == bare else None)
    assert {c["component"]: c["params"] for c in one["components"]} == {"transformer": m["parameters"]}


def diffusers_version() -> str:
    import diffusers

    return diffusers.__version__


def test_minimax_h3s_saved_rotary_frequencies_are_a_buffer(tmp_path):
    """MiniMax H3's files may keep the rotary embedding's `rope.inv_freq`, which diffusers' converter drops (its model
    recomputes it): a buffer, not a parameter."""
    m = MODELS["minimax-h3"]
    t = {**m["tensors"], "rope.inv_freq": [8]}
    back = single_file_utils.convert_minimax_h3_transformer_checkpoint_to_diffusers(
        {n: torch.empty(s, device="meta") for n, s in t.items()}, config=m["config"])
    assert "rope.inv_freq" not in back and len(back) == len(m["tensors"]) + 2 * sum(".qkv_proj." in n for n in t)
    path = tmp_path / "model.safetensors"
    _sparse_safetensors(path, t)
    r = summarize(open_checkpoint(str(path)))
    assert r["parameters"]["unique"] == m["parameters"]
    assert [c["buffers"] for c in r["single_file"]["components"]] == [1]


def _ltx_variant(edit: str) -> dict:
    """LTX-Video 2B 0.9's one file as the later releases differ where diffusers' rules look: 0.9.7's 48 blocks (13B),
    0.9.5's VAE (a 2048-channel encoder output), 0.9.1's VAE (timestep-conditioned decoder); its transformer alone
    (bare names, no VAE)."""
    t = dict(MODELS["ltx-video-2b-0.9"]["tensors"])
    if edit == "0.9.7":
        t.update({f"model.diffusion_model.transformer_blocks.{i}.scale_shift_table": [6, 2048] for i in range(28, 48)})
    elif edit == "0.9.5":
        t["vae.encoder.conv_out.conv.weight"] = [129, 2048, 3, 3, 3]
    elif edit == "0.9.1":
        t["vae.decoder.last_time_embedder.timestep_embedder.linear_1.weight"] = [256, 256]
    elif edit == "transformer":
        t = {n[len(UNET):]: s for n, s in t.items() if n.startswith(UNET)}
    return t


@pytest.mark.parametrize("edit", ["0.9.7", "0.9.5", "0.9.1", "transformer"])
def test_every_ltx_video_type_is_diffusers_own(tmp_path, edit):
    t = _ltx_variant(edit)
    path = tmp_path / "ltx.safetensors"
    _sparse_safetensors(path, t)
    r = summarize(open_checkpoint(str(path)))
    assert r["architecture"]["family"] == "ltx_video"
    assert r["single_file"]["model_type"] == _diffusers_type(t)
    assert r["parameters"]["unique"] == sum(math.prod(s) for s in t.values())


def test_ltx_videos_latent_statistics_are_buffers(tmp_path):
    """LTX-Video's files since 0.9.1 keep the VAE's latent statistics beside it (`vae.per_channel_statistics.*`), which
    CausalVideoAutoencoder registers as buffers as it loads and diffusers' converter reads into AutoencoderKLLTXVideo's
    buffers or drops: the count is the model's, the statistics buffers."""
    from diffusers import AutoencoderKLLTXVideo

    statistics = {"vae.per_channel_statistics." + k: [128] for k in ("channel", "mean-of-means", "mean-of-stds",
                                                                      "std-of-means")}
    t = {**_ltx_variant("0.9.1"), **statistics}

    def converted(names: dict) -> set:
        return set(single_file_utils.convert_ltx_vae_checkpoint_to_diffusers(
            {k: torch.empty(s, device="meta") for k, s in names.items() if k.startswith("vae.")}))
    kept = converted(t) - converted(_ltx_variant("0.9.1"))   # what diffusers makes of the statistics
    with torch.device("meta"):
        assert kept and kept <= {n for n, _ in AutoencoderKLLTXVideo().named_buffers()}
    path = tmp_path / "ltx.safetensors"
    _sparse_safetensors(path, t)
    r = summarize(open_checkpoint(str(path)))
    assert r["parameters"]["unique"] == sum(math.prod(s) for n, s in t.items() if n not in statistics)
    assert {c["component"]: c["buffers"] for c in r["single_file"]["components"]} == {"transformer": 0, "vae": 4}


def _ltx2_branch(tensors: dict) -> bool:
    """Whether diffusers' LTX-2 rule holds for these names (any of its keys: the transformer's audio-to-video gate under
    ComfyUI's prefix, either VAE's latent statistics); its rules try LTX-Video's first, whose `patchify_proj` LTX-2's
    transformer holds too."""
    return any(k in tensors for k in single_file_utils.CHECKPOINT_KEY_NAMES["ltx2"])


LTX2_PARTS = {"transformer": ("model.diffusion_model.", "LTX2VideoTransformer3DModel",
                              "convert_ltx2_transformer_to_diffusers"),
              "vae": ("vae.", "AutoencoderKLLTX2Video", "convert_ltx2_vae_to_diffusers"),
              "audio_vae": ("audio_vae.", "AutoencoderKLLTX2Audio", "convert_ltx2_audio_vae_to_diffusers")}


@pytest.mark.parametrize("label", ["ltx-2-19b", "ltx-2.3-22b", "hunyuanvideo-1.5", "hunyuanvideo-1.5-step-distilled"])
def test_releases_checked_by_diffusers_scripts(label):
    """Each LTX-2 and HunyuanVideo 1.5 release's header, as its authors' code writes it, went through diffusers' own
    conversion script (scripts/convert_ltx2_to_diffusers.py, convert_hunyuan_video1_5_to_diffusers.py: strict loads
    into each part's diffusers model of that release's configuration, fixtures/make_dit_headers.py), whose models'
    parameters are the authors' component for component."""
    m = MODELS[label]
    assert all(f"convert_{s}_to_diffusers.py" in HEADERS["written_by"]["checked_by"] for s in ("ltx2", "hunyuan_video1_5"))
    assert {part: d["parameters"] for part, d in m["diffusers"].items()} == m.get("components",
                                                                               {"transformer": m["parameters"]})
    assert all(d["class"].startswith(("LTX2", "AutoencoderKLLTX2", "HunyuanVideo15")) for d in m["diffusers"].values())


def test_ltx2_is_what_diffusers_ltx2_models_load():
    """LTX-2 19B's one file, as its authors' code writes it, is what the installed diffusers' LTX-2 classes at their
    defaults (the release's configuration: diffusers' type `ltx2-dev` reads Lightricks/LTX-2's) hold: diffusers' own
    single-file converters turn the transformer and the VAEs into exactly their state dicts, and the text connectors
    and the vocoder (which diffusers reads only from its folders) count what LTX2TextConnectors and LTX2Vocoder do. The
    header's buffers are what the VAEs' converters turn into the diffusers models' buffers."""
    import diffusers
    from diffusers.pipelines.ltx2 import LTX2TextConnectors, LTX2Vocoder

    m = MODELS["ltx-2-19b"]
    meta = {n: torch.empty(s, device="meta") for n, s in m["tensors"].items()}
    for part, (prefix, cls, convert) in LTX2_PARTS.items():
        with torch.device("meta"):
            model = getattr(diffusers, cls)()
        converted = getattr(single_file_utils, convert)({n: t for n, t in meta.items() if n.startswith(prefix)
                                                         and not n.startswith(("model.diffusion_model.video_embeddings",
                                                                               "model.diffusion_model.audio_embeddings"))})
        state = model.state_dict()
        assert {n: tuple(t.shape) for n, t in converted.items()} == {n: tuple(t.shape) for n, t in state.items()}
        assert m["components"][part] == sum(p.numel() for p in model.parameters())
        assert set(converted) - {n for n, _ in model.named_parameters()} == {n for n, _ in model.named_buffers()}
        assert sum(n.startswith(prefix) for n in m["buffers"]) == len(dict(model.named_buffers()))
    with torch.device("meta"):
        assert m["components"]["connectors"] == sum(p.numel() for p in LTX2TextConnectors().parameters())
        assert m["components"]["vocoder"] == sum(p.numel() for p in LTX2Vocoder().parameters())
    assert len(m["buffers"]) == 4 and all("per_channel_statistics." in n for n in m["buffers"])


@pytest.mark.parametrize("label", ["ltx-2-19b", "ltx-2.3-22b"])
@pytest.mark.parametrize("parts", [("vae.",), ("audio_vae.", "vocoder."), ("model.diffusion_model.",),
                                   ("model.diffusion_model.", "text_embedding_projection."), ("bare transformer",)])
def test_ltx2_in_parts(tmp_path, parts, label):
    """LTX-2's release split as ComfyUI's repackaged files hold it (the transformer with or without its connectors, the
    video VAE, the audio VAE beside the vocoder) and its transformer in bare names: still LTX-2, each component's count
    the authors' model's, the latent statistics buffers."""
    m = MODELS[label]
    if parts == ("bare transformer",):
        t = {n[len(UNET):]: s for n, s in m["tensors"].items() if n.startswith(UNET) and "embeddings_connector" not in n}
        expected = {"transformer": m["components"]["transformer"]}
    else:
        t = {n: s for n, s in m["tensors"].items() if n.startswith(parts)}
        named = {"vae.": "vae", "audio_vae.": "audio_vae", "vocoder.": "vocoder"}
        expected = {named[p]: m["components"][named[p]] for p in parts if p in named}
        if UNET in parts:   # (the connectors under its prefix, and the projection if the file holds it)
            expected["transformer"] = m["components"]["transformer"]
            expected["connectors"] = sum(math.prod(s) for n, s in t.items()
                                         if not n.startswith(UNET) or "embeddings_connector" in n)
    path = tmp_path / "part.safetensors"
    _sparse_safetensors(path, t)
    r = summarize(open_checkpoint(str(path)))
    assert r["architecture"]["family"] == "ltx2" and r["single_file"]["model_type"] == "ltx2-dev"
    assert {c["component"]: c["params"] for c in r["single_file"]["components"]} == expected
    assert sum(c["buffers"] for c in r["single_file"]["components"]) == sum(n in t for n in m["buffers"])
    if parts[0].startswith(("vae.", "audio_vae.")):   # (diffusers' own rule names these alone)
        assert _diffusers_type(t) == "ltx2-dev"


@pytest.mark.parametrize("prefix", ["", UNET])
def test_qwen_image_in_diffusers_names(tmp_path, prefix):
    """Qwen-Image was released in diffusers' own names, which ComfyUI's copies keep, bare or under its prefix: the
    model at QwenImageTransformer2DModel's defaults (the release's configuration); diffusers' single-file rules name no
    type for it, and none is given."""
    from diffusers import QwenImageTransformer2DModel

    with torch.device("meta"):
        model = QwenImageTransformer2DModel()
    tensors = {n: list(t.shape) for n, t in model.state_dict().items()}
    path = tmp_path / "qwen_image_bf16.safetensors"
    _sparse_safetensors(path, tensors, prefix)
    r = summarize(open_checkpoint(str(path)))
    assert r["architecture"]["family"] == "qwen_image" and _diffusers_type(tensors, prefix) == "v1"   # (its fallback)
    one = r["single_file"]
    assert one["model_type"] is None and one["pipeline"] is None
    assert one["what"] == f"a Qwen-Image transformer ({model.config.num_layers} blocks)"
    assert {c["component"]: c["params"] for c in one["components"]} == {
        "transformer": sum(p.numel() for p in model.parameters())}


SDXL_CONTROLNET = dict(   # diffusers/controlnet-canny-sdxl-1.0's config (its ControlNetModel arguments)
    addition_embed_type="text_time", addition_time_embed_dim=256, projection_class_embeddings_input_dim=2816,
    block_out_channels=(320, 640, 1280), cross_attention_dim=2048, transformer_layers_per_block=(1, 2, 10),
    attention_head_dim=(5, 10, 20), use_linear_projection=True,
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"))


@pytest.mark.parametrize("change", [{}, SDXL_CONTROLNET], ids=["sd15", "sdxl"])
def test_a_controlnet_in_diffusers_names(tmp_path, change):
    """A ControlNet saved by diffusers (ControlNetModel, SD 1.5's layout and SDXL's): diffusers' model type on its names,
    its parameters()."""
    from diffusers import ControlNetModel

    with torch.device("meta"):
        model = ControlNetModel(**change)
    tensors = {n: list(t.shape) for n, t in model.state_dict().items()}
    path = tmp_path / "diffusion_pytorch_model.safetensors"
    _sparse_safetensors(path, tensors)
    r = summarize(open_checkpoint(str(path)))
    one = r["single_file"]
    assert r["architecture"]["family"] == "controlnet" and one["model_type"] == _diffusers_type(tensors)
    assert one["what"] == f"a ControlNet (text width {model.config.cross_attention_dim})"
    assert {c["component"]: c["params"] for c in one["components"]} == {
        "controlnet": sum(p.numel() for p in model.parameters())}


@pytest.mark.parametrize("prefix", ["", UNET])
def test_qwen_image_21_in_comfyuis_names(tmp_path, prefix):
    """Qwen-Image 2.1 as ComfyUI's files hold it: diffusers' names but each block's MLP gate and up fused as `gate_up`
    (gate rows first), which diffusers' own converter splits back into QwenImage21Transformer2DModel's (built at its
    defaults); diffusers' model type, the model's parameters()."""
    from diffusers import QwenImage21Transformer2DModel

    with torch.device("meta"):
        model = QwenImage21Transformer2DModel()
    state = model.state_dict()
    original = {}
    for name, t in state.items():
        if name.endswith("img_mlp.gate_layer.weight"):
            up = state[name.replace("gate_layer", "proj")]
            original[prefix + name.replace("gate_layer", "gate_up")] = torch.empty(
                (t.shape[0] + up.shape[0], t.shape[1]), device="meta")
        elif not name.endswith("img_mlp.proj.weight"):
            original[prefix + name] = t
    back = single_file_utils.convert_qwen_image21_transformer_checkpoint_to_diffusers(dict(original))
    assert {k: tuple(v.shape) for k, v in back.items()} == {k: tuple(v.shape) for k, v in state.items()}
    kind = single_file_utils.infer_diffusers_model_type(original)
    path = tmp_path / "qwen_image_2.1.safetensors"
    _sparse_safetensors(path, {n: list(t.shape) for n, t in original.items()})
    r = summarize(open_checkpoint(str(path)))
    one = r["single_file"]
    assert r["architecture"]["family"] == "qwen_image" and one["model_type"] == kind == "qwen-image-2.1"
    assert one["what"] == f"a Qwen-Image 2.1 transformer ({model.config.num_layers} blocks)"
    assert {c["component"]: c["params"] for c in one["components"]} == {
        "transformer": sum(p.numel() for p in model.parameters())}


# --------------------------------------------------------------------------------------------------- ComfyUI-GGUF

def _comfy_gguf(path: str, arch: str, tensors: dict, orig_shapes: dict | None = None) -> None:
    """A GGUF header as ComfyUI-GGUF's tools/convert.py (and fix_5d_tensors.py) lay one out, over a sparse data
    region: vectors, small tensors, `.modulation` and the 5-D tensors in F32, others Q8_0 where rows are whole blocks,
    else F16; `orig_shapes` ({name: stored 2-D shape}) as its `shape_fix` flattens tensors, recorded in metadata."""
    import gguf
    import numpy as np

    q8 = gguf.GGMLQuantizationType.Q8_0
    block, block_bytes = gguf.GGML_QUANT_SIZES[q8]
    w = gguf.GGUFWriter(path, arch)
    end = 0
    for name, shape in tensors.items():
        stored = (orig_shapes or {}).get(name, shape)
        n = math.prod(shape)
        if name in (orig_shapes or {}):
            w.add_array(f"comfy.gguf.orig_shape.{name}", list(shape))
        if len(stored) == 1 or n <= 1024 or ".modulation" in name or len(stored) > 4:
            w.add_tensor_info(name, stored, np.dtype(np.float32), 4 * n)
            nbytes = 4 * n
        elif stored[-1] % block == 0:
            nbytes = n // block * block_bytes
            w.add_tensor_info(name, stored, np.dtype(np.float32), nbytes, raw_dtype=q8)
        else:
            w.add_tensor_info(name, stored, np.dtype(np.float16), 2 * n)
            nbytes = 2 * n
        end += -(-nbytes // 32) * 32
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with open(path, "r+b") as f:
        f.seek(0, 2)
        f.truncate(-(-f.tell() // 32) * 32 + end)


@pytest.mark.parametrize("label, arch", [("wan2.1-t2v-1.3B", "wan"), ("wan2.2-ti2v-5B", "wan"),
                                         ("hunyuanvideo-t2v", "hyvid")])
def test_a_comfyui_gguf_video_model(tmp_path, label, arch):
    """city96's quantised Wan and HunyuanVideo files keep the 5-D patch embedding (n_dims 5, which llama.cpp's reader
    refuses and gguf-py reads): the model, its type and the parameters the gguf library's reader counts."""
    import gguf

    m = MODELS[label]
    path = str(tmp_path / "model-Q8_0.gguf")
    _comfy_gguf(path, arch, m["tensors"])
    reader = gguf.GGUFReader(path)
    assert any(len(t.shape) == 5 for t in reader.tensors)
    shapes = {t.name: [int(d) for d in reversed(t.shape)] for t in reader.tensors}
    assert shapes == m["tensors"]
    r = summarize(open_checkpoint(path))
    assert r["architecture"]["family"] == _family(label)
    assert r["single_file"]["model_type"] == _diffusers_type(shapes)
    assert r["parameters"]["unique"] == sum(int(t.n_elements) for t in reader.tensors) == m["parameters"]


def test_comfyui_gguf_flattened_shapes_are_read_back(tmp_path):
    """ComfyUI-GGUF's `shape_fix` (SD 1.x, XL) stores a conv weight as rows of 256 and records its shape in
    `comfy.gguf.orig_shape.<name>`, which its loader reads back: ckptstat gives the recorded shape, the values in the
    same order; a record that does not hold the tensor's elements is refused, naming the file and the key."""
    import gguf
    import numpy as np

    values = np.arange(320 * 4 * 3 * 3, dtype=np.float32).reshape(320, 4, 3, 3)
    path = str(tmp_path / "sd15-F32.gguf")
    w = gguf.GGUFWriter(path, "sd1")
    w.add_array("comfy.gguf.orig_shape.input_blocks.0.0.weight", list(values.shape))
    w.add_tensor("input_blocks.0.0.weight", values.reshape(-1, 256))
    w.add_tensor("input_blocks.0.0.bias", np.ones(320, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ckpt = open_checkpoint(path)
    assert ckpt.tensors["input_blocks.0.0.weight"].shape == (320, 4, 3, 3)
    assert ckpt.tensors["input_blocks.0.0.bias"].shape == (320,)
    assert np.array_equal(ckpt.read("input_blocks.0.0.weight"), values)

    bad = str(tmp_path / "bad.gguf")
    w = gguf.GGUFWriter(bad, "sd1")
    w.add_array("comfy.gguf.orig_shape.w", [320, 4, 3, 4])
    w.add_tensor("w", values.reshape(-1, 256))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(CorruptCheckpointError, match=r"bad\.gguf.*comfy\.gguf\.orig_shape\.w \[320, 4, 3, 4\] does not "
                                                     r"hold the tensor's 11520 elements"):
        open_checkpoint(bad)


# ------------------------------------------------------------------------------------------ ComfyUI's quantised files

def _comfy_quantised(tensors: dict, fmt: str) -> dict:
    """{name: (dtype, shape)} of a model as ComfyUI saves it quantised (comfy/ops.py MixedPrecisionOps.Linear.
    state_dict: each Linear's weight as the format stores it, its scales, and `comfy_quant`, the format as JSON bytes;
    the older scaled-fp8 files: `scale_weight` and `scale_input` beside an FP8 weight, and an empty `scaled_fp8` tensor
    of the FP8 dtype); every other tensor bf16."""
    out: dict = {}
    for name, shape in tensors.items():
        if not (name.endswith(".weight") and len(shape) == 2):   # (the Linear weights: 2-D `.weight`)
            out[name] = ("BF16", shape)
            continue
        module = name[:-len("weight")]
        config = json.dumps({"format": "nvfp4" if fmt == "nvfp4" else "float8_e4m3fn"}).encode()
        if fmt == "nvfp4":
            out[name] = ("U8", [shape[0], shape[1] // 2])
            out[module + "weight_scale"] = ("F8_E4M3", [shape[0], shape[1] // 16])
            out[module + "weight_scale_2"] = ("F32", [])
        else:
            out[name] = ("F8_E4M3", shape)
            out[module + ("scale_weight" if fmt == "scaled" else "weight_scale")] = ("F32", [])
            if fmt == "scaled":
                out[module + "scale_input"] = ("F32", [])
        if fmt != "scaled":
            out[module + "comfy_quant"] = ("U8", [len(config)])
    if fmt == "scaled":
        out["scaled_fp8"] = ("F8_E4M3", [0])
    return out


@pytest.mark.parametrize("fmt, method", [("fp8", "comfyui fp8"), ("nvfp4", "comfyui nvfp4"),
                                         ("scaled", "comfyui scaled fp8")])
def test_comfyuis_quantised_files_count_the_model(tmp_path, fmt, method):
    """wan2.1_t2v_1.3B_fp8_scaled.safetensors and ComfyUI's FP8 / NVFP4 saves: the weights' logical elements (an NVFP4
    byte holds two), their scales and format records apart; the count is the authors' model's `parameters()`."""
    m = MODELS["wan2.1-t2v-1.3B"]
    stored = _comfy_quantised(m["tensors"], fmt)
    path = tmp_path / "model.safetensors"
    sparse_safetensors(path, stored)
    r = summarize(open_checkpoint(str(path)))
    assert r["architecture"]["family"] == "wan" and r["single_file"]["model_type"] == _diffusers_type(m["tensors"])
    assert r["parameters"]["unique"] == m["parameters"]
    assert r["quantization"]["method"] == method
    linears = sum(1 for n, s in m["tensors"].items() if n.endswith(".weight") and len(s) == 2)
    assert [(x["method"], x["weights"]) for x in r["quantization"]["methods"]] == [(method, linears)]


@pytest.mark.parametrize("name, arch", [("sd15.safetensors", "sd1"), ("sdxl.safetensors", "sdxl")])
def test_a_comfyui_gguf_unet(tmp_path, name, arch):
    """ComfyUI-GGUF's SD 1.x / XL files: the UNet alone in LDM's bare names, each tensor of at least 512 elements whose
    rows are not whole 256s flattened to rows of 256 with its shape recorded (tools/convert.py `shape_fix`, its
    REARRANGE_THRESHOLD), F32 here: read back at the recorded shapes, values in order, the UNet as diffusers loads it
    from the pipeline's file (fixtures/single_file/expected.json)."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    unet = {n[len(UNET):]: v for n, v in load_file(fixture(f"single_file/{name}")).items() if n.startswith(UNET)}
    path = str(tmp_path / "unet-F32.gguf")
    w = gguf.GGUFWriter(path, arch)
    flattened = 0
    for key, data in unet.items():
        data = data.astype(np.float32)
        if data.ndim > 1 and data.size >= 512 and data.size % 256 == 0 and data.shape[-1] % 256:
            w.add_array(f"comfy.gguf.orig_shape.{key}", [int(d) for d in data.shape])
            data = data.reshape(-1, 256)
            flattened += 1
        w.add_tensor(key, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert flattened
    ckpt = open_checkpoint(path)
    assert {n: tuple(t.shape) for n, t in ckpt.tensors.items()} == {n: v.shape for n, v in unet.items()}
    some = next(n for n, v in unet.items() if v.ndim == 4 and v.size % 256 == 0 and v.shape[-1] % 256)
    assert np.array_equal(ckpt.read(some), unet[some].astype(np.float32))
    r = summarize(ckpt)
    assert r["architecture"]["family"] == "unet"
    assert {c["component"]: c["params"] for c in r["single_file"]["components"]} == {
        "unet": json.loads(open(fixture("single_file/expected.json")).read())[name]["components"]["unet"]}
