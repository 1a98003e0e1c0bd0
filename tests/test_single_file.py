"""A Stable Diffusion pipeline saved as one file (census/diffusion.py, docs/adapters.md "Single-file diffusion
checkpoints"): which model diffusers reads it as, and its parameters by component.

Oracles, diffusers' own (the test install's 0.42.1):
- fixtures/single_file/ (fixtures/make_single_file.py): tiny pipelines with the real block layouts, converted to one file
  by diffusers' conversion scripts; expected.json holds, for each file, `infer_diffusers_model_type` and the parameter
  count of each component as diffusers' `from_single_file` loads it (checked there equal, tensor for tensor, to the
  pipeline's own models), and for the trainer's `.ckpt` the EMA copy diffusers extracts. The model type is also
  recomputed here, live, from the file.
- Every branch of the model type: the fixtures' names and shapes on the meta device, edited as each kind of file
  differs (an inpainting UNet's 9 input channels, SD 2's 1024-wide cross-attention, XL's refiner encoder, Playground's
  `edm_mean`, the x4 upscaler's extra input block, instruct-pix2pix's 8 channels, a ControlNet beside the UNet), each
  given to `infer_diffusers_model_type` and to ckptstat.
- The config repository named for each type: diffusers' DIFFUSERS_DEFAULT_PIPELINE_PATHS.
"""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
single_file_utils = pytest.importorskip("diffusers.loaders.single_file_utils")

from conftest import fixture, fixture_script, ldm_vae, sparse_safetensors  # noqa: E402

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.summary import summarize  # noqa: E402
from ckptstat.census.diffusion import KEYS, PIPELINES_TABLE, layout, pipeline  # noqa: E402

UNET = "model.diffusion_model."
EXPECTED = json.loads(open(fixture("single_file/expected.json"), encoding="utf-8").read())
FILES = sorted(k for k in EXPECTED if k.endswith((".safetensors", ".ckpt")))


def _state(path: str) -> dict:
    """The file's tensors as diffusers' load_single_file_checkpoint gives them (a `.ckpt`'s `state_dict` unwrapped)."""
    return single_file_utils.load_single_file_checkpoint(path)


@pytest.mark.parametrize("name", FILES)
def test_components_are_what_diffusers_loads(name):
    want = EXPECTED[name]
    path = fixture(f"single_file/{name}")
    r = summarize(open_checkpoint(path))
    one = r["single_file"]
    assert one["model_type"] == want["model_type"] == single_file_utils.infer_diffusers_model_type(_state(path))
    assert r["architecture"]["family"] == "stable_diffusion" and r["architecture"]["model_type"] == want["model_type"]
    got = {c["component"]: c["params"] for c in one["components"] if c["params"]}
    assert got == want["components"]
    # the unique count is the pipeline's models', nothing else: the EMA copy and the schedule are buffers
    assert r["parameters"]["unique"] == sum(want["components"].values())
    rows = {c["component"]: c for c in one["components"]}
    if "ema_copy" in want:
        ema = rows["unet EMA copy"]
        assert ema["params"] == 0 and ema["buffers"] == ema["tensors"]
        schedule = len(fixture_script("make_single_file").SCHEDULE)   # (the buffers the fixture's trainer save holds)
        assert rows["noise schedule"]["params"] == 0 and rows["noise schedule"]["buffers"] == schedule
    assert sum(c["tensors"] for c in one["components"]) == r["parameters"]["tensors"] + sum(
        n["tensors"] for n in r["non_parameters"])


def test_the_ema_copy_holds_what_diffusers_extracts():
    """A trainer's `.ckpt`: the UNet diffusers extracts with extract_ema=True has as many parameters as the EMA copy's
    tensors hold elements (their names without LitEma's bookkeeping)."""
    path = fixture("single_file/sd15.ckpt")
    ckpt = open_checkpoint(path)
    shadow = [t for n, t in ckpt.tensors.items() if n.startswith("state_dict.model_ema.diffusion_model")]
    assert sum(t.numel for t in shadow) == EXPECTED["sd15.ckpt"]["ema_copy"]


@pytest.mark.parametrize("name", [f for f in FILES if f.endswith(".safetensors")])
@pytest.mark.parametrize("prefix", ["", "model.diffusion_model."])
def test_a_unet_alone(tmp_path, name, prefix):
    """A UNet in LDM's names alone ("UNet only" files, ComfyUI-GGUF's SD 1.x / XL), bare or under its prefix: the UNet
    as diffusers loads it from the pipeline's file; diffusers' rules type no UNet alone (they answer their fallback,
    "v1", for XL's too), so no model type is given; XL's size conditioning named where the file is XL."""
    from safetensors.torch import load_file, save_file

    state = {n: t for n, t in load_file(fixture(f"single_file/{name}")).items() if n.startswith(UNET)}
    alone = {prefix + n[len(UNET):]: t for n, t in state.items()}
    path = tmp_path / "unet.safetensors"
    save_file(alone, str(path))
    assert single_file_utils.infer_diffusers_model_type(alone) == "v1"
    r = summarize(open_checkpoint(str(path)))
    one = r["single_file"]
    assert r["architecture"]["family"] == "unet" and one["model_type"] is None and one["pipeline"] is None
    assert {c["component"]: c["params"] for c in one["components"]} == {"unet": EXPECTED[name]["components"]["unet"]}
    assert ("XL's size conditioning" in one["what"]) == EXPECTED[name]["model_type"].startswith("xl")


def _meta(path: str) -> dict:
    return {k: torch.empty(tuple(v.shape), device="meta") for k, v in _state(path).items()}


def _reshape(d: dict, key: str, axis: int, size: int) -> None:
    shape = list(d[key].shape)
    shape[axis] = size
    d[key] = torch.empty(shape, device="meta")


def _variant(kind: str) -> dict:
    """A fixture's names and shapes edited as a file of `kind` differs."""
    base = "sdxl" if kind.startswith(("xl", "playground")) else "sd15"
    d = _meta(fixture(f"single_file/{base}.safetensors"))
    if kind in ("inpainting", "xl_inpaint", "inpainting_v2"):
        _reshape(d, KEYS["inpainting"], 1, 9)
    if kind in ("v2", "inpainting_v2"):
        _reshape(d, KEYS["v2"], -1, 1024)
    if kind == "instruct-pix2pix":
        _reshape(d, KEYS["inpainting"], 1, 8)
    if kind == "playground-v2-5":
        d["edm_mean"] = torch.empty((1, 4, 1, 1), device="meta")
    if kind == "xl_refiner":   # the refiner holds bigG alone, as conditioner.embedders.0.model
        d = {k.replace("conditioner.embedders.1.", "conditioner.embedders.0."): v for k, v in d.items()
             if not k.startswith("conditioner.embedders.0.")}
    if kind == "upscale":
        d[KEYS["upscale"]] = torch.empty((32,), device="meta")
    if kind == "controlnet":
        d[KEYS["controlnet"]] = torch.empty((32, 16), device="meta")
    return d


KINDS = ["v1", "v2", "inpainting", "inpainting_v2", "xl_base", "xl_inpaint", "xl_refiner", "playground-v2-5", "upscale",
         "instruct-pix2pix", "controlnet"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("wrapper", ["", "state_dict."])
def test_every_model_type_is_diffusers_own(kind, wrapper):
    d = _variant(kind)
    assert single_file_utils.infer_diffusers_model_type(d) == kind   # (the edit makes what the test says it makes)
    names = {wrapper + k: v for k, v in d.items()}   # a trainer's save holds them under `state_dict` (diffusers unwraps)
    got = layout(names, lambda n: tuple(names[n].shape) if n in names else None)
    assert got is not None and got.model_type == kind and got.wrapper == wrapper


def test_the_config_repositories_are_diffusers_own():
    """census/diffusers_pipelines.json is the test install's diffusers table, and says which diffusers wrote it."""
    import diffusers

    table = json.loads(PIPELINES_TABLE.read_text(encoding="utf-8"))
    assert table["written_by"] == {"script": "fixtures/make_diffusers_pipelines.py", "diffusers": diffusers.__version__}
    live = single_file_utils.DIFFUSERS_DEFAULT_PIPELINE_PATHS
    assert table["pipelines"] == {kind: p["pretrained_model_name_or_path"] for kind, p in live.items()}
    assert all(pipeline(kind) == p["pretrained_model_name_or_path"] for kind, p in live.items())
    assert pipeline(None) is None


def test_not_a_pipeline_in_one_file():
    """A UNet in the original names with no VAE or text encoder beside it is a UNet alone (test_a_unet_alone), no
    pipeline; the VAE under the pipeline's prefix and the text encoder alone are neither."""
    d = _meta(fixture("single_file/sd15.safetensors"))
    for keep in ("model.diffusion_model.", "first_stage_model.", "cond_stage_model."):
        part = {k: v for k, v in d.items() if k.startswith(keep)}
        found = layout(part, lambda n, part=part: tuple(part[n].shape))
        assert (found and found.family) == ("unet" if keep == UNET else None), keep


def test_the_cli_shows_the_components(cli):
    path = fixture("single_file/sdxl.safetensors")
    rc, out, _ = cli("summary", path)
    text = " ".join(out.split())
    assert rc == 0 and "stable_diffusion (xl_base)" in text and "Components" in text
    for component, n in EXPECTED["sdxl.safetensors"]["components"].items():
        assert f"{component} {n:,}" in text
    assert "no rule placed" not in text
    rc, out, err = cli("flops", path)
    assert rc == 2 and "a Stable Diffusion pipeline in one file (xl_base)" in " ".join((out + err).split())


def test_the_fixtures_say_what_wrote_them():
    assert EXPECTED["generated_by"] == "fixtures/make_single_file.py"
    assert set(EXPECTED) >= {"diffusers", "transformers", "torch"}
    assert all(os.path.exists(fixture(f"single_file/{name}")) for name in FILES)


def test_the_report_shows_the_components(cli, tmp_path):
    out = tmp_path / "r.md"
    rc, _, _ = cli("report", fixture("single_file/sd15.ckpt"), "-o", str(out))
    text = out.read_text()
    assert rc == 0 and "Components (as diffusers' from\\_single\\_file splits the file)" in text
    assert "Parameters by bucket" not in text
    for component, n in EXPECTED["sd15.ckpt"]["components"].items():
        assert f"| {component.replace('_', chr(92) + '_')}" in text and f"{n:,}" in text


# ------------------------------------------------------------------------------------------------------- FLUX.1

FLUX_DEV = dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
                num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
                axes_dims_rope=(16, 56, 56))   # black-forest-labs/FLUX.1-dev's transformer config


def _flux_model(**change):
    from diffusers import FluxTransformer2DModel

    with torch.device("meta"):
        return FluxTransformer2DModel(**{**FLUX_DEV, **change})


def _bfl(state: dict) -> dict:
    """Black Forest Labs' names for a diffusers FluxTransformer2DModel's state (shapes only, on the meta device):
    what `convert_flux_transformer_checkpoint_to_diffusers` reads, checked by running it back."""
    out: dict = {}
    fused: dict = {}
    simple = {"time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
              "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
              "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
              "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
              "time_text_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
              "time_text_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
              "context_embedder": "txt_in", "x_embedder": "img_in", "proj_out": "final_layer.linear",
              "norm_out.linear": "final_layer.adaLN_modulation.1"}
    double = {"norm1.linear": "img_mod.lin", "norm1_context.linear": "txt_mod.lin", "ff.net.0.proj": "img_mlp.0",
              "ff.net.2": "img_mlp.2", "ff_context.net.0.proj": "txt_mlp.0", "ff_context.net.2": "txt_mlp.2",
              "attn.to_out.0": "img_attn.proj", "attn.to_add_out": "txt_attn.proj"}
    double_norms = {"attn.norm_q.weight": "img_attn.norm.query_norm.scale",
                    "attn.norm_k.weight": "img_attn.norm.key_norm.scale",
                    "attn.norm_added_q.weight": "txt_attn.norm.query_norm.scale",
                    "attn.norm_added_k.weight": "txt_attn.norm.key_norm.scale"}
    single_norms = {"attn.norm_q.weight": "norm.query_norm.scale", "attn.norm_k.weight": "norm.key_norm.scale"}
    for name, t in state.items():
        module, _, leaf = name.rpartition(".")
        if module in simple:
            out[f"{simple[module]}.{leaf}"] = t
            continue
        block, i, rest = name.split(".", 2)
        sub, _, leaf = rest.rpartition(".")
        if block == "transformer_blocks":
            where = f"double_blocks.{i}."
            if rest in double_norms:
                out[where + double_norms[rest]] = t
            elif sub in double:
                out[f"{where}{double[sub]}.{leaf}"] = t
            else:   # q, k, v of the image and of the text stream, each fused as qkv
                stream = "txt_attn" if "add_" in sub else "img_attn"
                fused.setdefault(f"{where}{stream}.qkv.{leaf}", []).append(t)
        else:
            where = f"single_blocks.{i}."
            if rest in single_norms:
                out[where + single_norms[rest]] = t
            elif sub == "norm.linear":
                out[f"{where}modulation.lin.{leaf}"] = t
            elif sub == "proj_out":
                out[f"{where}linear2.{leaf}"] = t
            else:   # q, k, v and the MLP's input fused as linear1
                fused.setdefault(f"{where}linear1.{leaf}", []).append(t)
    out.update({k: torch.cat(v) for k, v in fused.items()})
    return out


def _sparse_safetensors(path, state: dict, prefix: str = "") -> None:
    """A bf16 safetensors file of this state's names and shapes over a hole (conftest.sparse_safetensors)."""
    sparse_safetensors(path, {n: ("BF16", list(t.shape)) for n, t in state.items()}, prefix)


@pytest.mark.parametrize("kind, change", [("flux-dev", {}), ("flux-schnell", {"guidance_embeds": False}),
                                          ("flux-fill", {"in_channels": 384, "out_channels": 64}),
                                          ("flux-depth", {"in_channels": 128, "out_channels": 64})])
def test_a_flux_transformer(tmp_path, kind, change):
    """FLUX.1's transformer at its real size (a sparse file), in Black Forest Labs' names."""
    _check_transformer(tmp_path, _flux_model(**change), _bfl,
                       single_file_utils.convert_flux_transformer_checkpoint_to_diffusers, kind, "flux")


def _check_transformer(tmp_path, model, original_names, converter, kind: str, family: str) -> None:
    """A diffusers transformer (on the meta device) written under its original names as a sparse file: diffusers'
    own converter turns the names back into its model's names and shapes, diffusers calls the file `kind`, and the
    model holds as many parameters as ckptstat counts (its buffers counted apart)."""
    state = model.state_dict()
    original = original_names(state)
    back = converter(dict(original))
    assert {k: tuple(v.shape) for k, v in back.items()} == {k: tuple(v.shape) for k, v in state.items()}
    assert single_file_utils.infer_diffusers_model_type(original) == kind
    path = tmp_path / "transformer.safetensors"
    _sparse_safetensors(path, original)
    r = summarize(open_checkpoint(str(path)))
    assert r["architecture"]["family"] == family and r["single_file"]["model_type"] == kind
    assert r["single_file"]["pipeline"] == single_file_utils.DIFFUSERS_DEFAULT_PIPELINE_PATHS[kind][
        "pretrained_model_name_or_path"]
    (row,) = r["single_file"]["components"]
    assert row["component"] == "transformer" and row["params"] == r["parameters"]["unique"] == sum(
        p.numel() for p in model.parameters())
    assert row["buffers"] == len(set(state) - {n for n, _ in model.named_parameters()})


def test_a_flux_all_in_one_file(tmp_path):
    """ComfyUI's all-in-one FLUX.1 file: the transformer under model.diffusion_model., beside the VAE and the two text
    encoders: each counted apart, the transformer as diffusers' model holds it."""
    _check_all_in_one(tmp_path, _flux_model(num_layers=1, num_single_layers=1), _bfl, {
        "vae.decoder.conv_in.weight": ("vae", (512, 16, 3, 3)),
        "text_encoders.clip_l.transformer.text_model.embeddings.token_embedding.weight": ("text_encoder", (49408, 768)),
        "text_encoders.t5xxl.transformer.shared.weight": ("text_encoder_2", (32128, 4096))},
        "flux-dev", "a FLUX.1 pipeline")


def _check_all_in_one(tmp_path, model, original_names, beside: dict, kind: str, what: str) -> None:
    """A transformer under model.diffusion_model. beside the tensors `beside` names ({name: (component, shape)}), as a
    sparse file: diffusers calls it `kind`, and each component holds what was written under it (the transformer as
    diffusers' model holds it)."""
    state = {"model.diffusion_model." + k: v for k, v in original_names(model.state_dict()).items()}
    state.update({n: torch.empty(shape, device="meta") for n, (_, shape) in beside.items()})
    assert single_file_utils.infer_diffusers_model_type(state) == kind
    path = tmp_path / "all-in-one.safetensors"
    _sparse_safetensors(path, state)
    one = summarize(open_checkpoint(str(path)))["single_file"]
    assert one["model_type"] == kind and one["what"] == what
    want = {"transformer": sum(p.numel() for p in model.parameters())}
    for component, shape in beside.values():
        want[component] = want.get(component, 0) + torch.Size(shape).numel()
    assert {c["component"]: c["params"] for c in one["components"]} == want


def test_flux1_does_not_claim_flux2_or_chroma():
    """(census/diffusion_dit.py reads them: tests/test_single_file_dit.py)"""
    names = {"double_blocks.0.img_attn.norm.key_norm.scale": 1, "single_stream_modulation.lin.weight": 1}
    assert layout(names, lambda n: (128,)) is None


@pytest.mark.parametrize("prefix, blocks", [("cond_stage_model.model.", 24), ("conditioner.embedders.1.model.", 32)])
def test_openclip_tensors_diffusers_leaves_out(prefix, blocks):
    """An OpenCLIP text encoder as 2.x (ViT-H, 24 blocks) and XL (bigG, 32) files hold it, with `logit_scale`:
    diffusers' convert_open_clip_checkpoint loads part of it (2.x: not the last block nor text_projection). What
    ckptstat counts as the text encoder is what that converter returns, element for element."""
    from ckptstat.census.diffusion import NOT_LOADED, component

    width = 16
    enc: dict = {"positional_embedding": (77, width), "token_embedding.weight": (1000, width),
                 "ln_final.weight": (width,), "ln_final.bias": (width,), "text_projection": (width, width),
                 "logit_scale": ()}
    for i in range(blocks):
        b = f"transformer.resblocks.{i}."
        enc.update({b + "attn.in_proj_weight": (3 * width, width), b + "attn.in_proj_bias": (3 * width,),
                    b + "attn.out_proj.weight": (width, width), b + "attn.out_proj.bias": (width,),
                    b + "ln_1.weight": (width,), b + "ln_1.bias": (width,), b + "ln_2.weight": (width,),
                    b + "ln_2.bias": (width,), b + "mlp.c_fc.weight": (4 * width, width), b + "mlp.c_fc.bias": (4 * width,),
                    b + "mlp.c_proj.weight": (width, 4 * width), b + "mlp.c_proj.bias": (width,)})
    d = {**_meta(fixture("single_file/sd15.safetensors")), **{prefix + k: torch.empty(s, device="meta")
                                                              for k, s in enc.items()}}
    loaded = single_file_utils.convert_open_clip_checkpoint(None, d, prefix=prefix)
    one = layout(d, lambda n: tuple(d[n].shape))
    assert one is not None
    parts = {n: component(n, one) for n in d if n.startswith(prefix)}
    mine = sum(d[n].numel() for n, p in parts.items() if p.startswith("text_encoder"))
    assert mine == sum(v.numel() for v in loaded.values())
    assert parts[prefix + "logit_scale"] == NOT_LOADED


def test_a_quantised_flux_gguf(tmp_path):
    """ComfyUI-GGUF's FLUX.1 (general.architecture "flux", Black Forest Labs' names, Q8_0 weights): the transformer's
    parameters are what the gguf library's reader counts, and the model type diffusers' on the same names and shapes."""
    import gguf
    import numpy as np

    model = _flux_model(num_layers=1, num_single_layers=1, attention_head_dim=32, num_attention_heads=2,
                        joint_attention_dim=64, pooled_projection_dim=32, axes_dims_rope=(8, 12, 12))
    bfl = _bfl(model.state_dict())
    path = str(tmp_path / "flux1-dev-Q8_0.gguf")
    w = gguf.GGUFWriter(path, "flux")
    for name, t in bfl.items():
        data = np.zeros(tuple(t.shape), dtype=np.float32)
        if data.ndim == 2 and data.shape[-1] % 32 == 0:   # (llama.cpp quantises matrices; vectors stay F32)
            w.add_tensor(name, gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    reader = gguf.GGUFReader(path)
    assert any(t.tensor_type == gguf.GGMLQuantizationType.Q8_0 for t in reader.tensors)
    r = summarize(open_checkpoint(path))
    assert r["architecture"]["family"] == "flux"
    assert r["single_file"]["model_type"] == single_file_utils.infer_diffusers_model_type(bfl) == "flux-dev"
    (row,) = r["single_file"]["components"]
    assert row["params"] == r["parameters"]["unique"] == sum(int(t.n_elements) for t in reader.tensors) == sum(
        p.numel() for p in model.parameters())


def test_sgm_denoiser_sigmas_are_a_buffer(tmp_path):
    """XL files written from SGM's DiffusionEngine hold its DiscreteDenoiser's `sigmas` (register_buffer in
    sgm/modules/diffusionmodules/denoiser.py): the noise schedule, not a parameter of any model diffusers loads."""
    from safetensors.torch import load_file, save_file

    state = load_file(fixture("single_file/sdxl.safetensors"))
    state["denoiser.sigmas"] = torch.linspace(0.03, 14.6, 1000)
    path = str(tmp_path / "sdxl-sgm.safetensors")
    save_file(state, path)
    r = summarize(open_checkpoint(path))
    assert r["parameters"]["unique"] == sum(EXPECTED["sdxl.safetensors"]["components"].values())
    rows = {c["component"]: c for c in r["single_file"]["components"]}
    assert rows["noise schedule"]["buffers"] == 1 and rows["noise schedule"]["params"] == 0


# ------------------------------------------------------------------------------------------------ SD 3 / 3.5

SD3_MEDIUM = dict(sample_size=128, patch_size=2, in_channels=16, num_layers=24, attention_head_dim=64,
                  num_attention_heads=24, joint_attention_dim=4096, caption_projection_dim=1536,
                  pooled_projection_dim=2048, out_channels=16, pos_embed_max_size=192)   # stabilityai's 3-medium config
SD3_KINDS = {
    "sd3": {},
    "sd35_medium": dict(pos_embed_max_size=384, qk_norm="rms_norm", dual_attention_layers=tuple(range(13))),
    "sd35_large": dict(num_layers=38, num_attention_heads=38, caption_projection_dim=2432, qk_norm="rms_norm"),
}


def _sd3_model(**change):
    from diffusers import SD3Transformer2DModel

    with torch.device("meta"):
        return SD3Transformer2DModel(**{**SD3_MEDIUM, **change})


def _sai(state: dict) -> dict:
    """Stability's MMDiT names for a diffusers SD3Transformer2DModel's state (shapes only): what
    `convert_sd3_transformer_checkpoint_to_diffusers` reads, checked by running it back."""
    simple = {"pos_embed.proj": "x_embedder.proj", "time_text_embed.timestep_embedder.linear_1": "t_embedder.mlp.0",
              "time_text_embed.timestep_embedder.linear_2": "t_embedder.mlp.2", "context_embedder": "context_embedder",
              "time_text_embed.text_embedder.linear_1": "y_embedder.mlp.0",
              "time_text_embed.text_embedder.linear_2": "y_embedder.mlp.2", "proj_out": "final_layer.linear",
              "norm_out.linear": "final_layer.adaLN_modulation.1"}
    block = {"attn.to_out.0": "x_block.attn.proj", "attn.to_add_out": "context_block.attn.proj",
             "attn2.to_out.0": "x_block.attn2.proj", "norm1.linear": "x_block.adaLN_modulation.1",
             "norm1_context.linear": "context_block.adaLN_modulation.1", "ff.net.0.proj": "x_block.mlp.fc1",
             "ff.net.2": "x_block.mlp.fc2", "ff_context.net.0.proj": "context_block.mlp.fc1",
             "ff_context.net.2": "context_block.mlp.fc2", "attn.norm_q": "x_block.attn.ln_q",
             "attn.norm_k": "x_block.attn.ln_k", "attn.norm_added_q": "context_block.attn.ln_q",
             "attn.norm_added_k": "context_block.attn.ln_k", "attn2.norm_q": "x_block.attn2.ln_q",
             "attn2.norm_k": "x_block.attn2.ln_k"}
    qkv = {"attn.to_": "x_block.attn.qkv", "attn.add_": "context_block.attn.qkv", "attn2.to_": "x_block.attn2.qkv"}
    out: dict = {}
    fused: dict = {}
    for name, t in state.items():
        module, _, leaf = name.rpartition(".")
        if name == "pos_embed.pos_embed":
            out["pos_embed"] = t
        elif module in simple:
            out[f"{simple[module]}.{leaf}"] = t
        else:
            _, i, sub = module.split(".", 2)
            where = f"joint_blocks.{i}."
            if sub in block:
                out[f"{where}{block[sub]}.{leaf}"] = t
            else:   # q, k, v (to_q, add_q_proj...) fused as qkv, in that order
                stem = next(k for k in qkv if sub.startswith(k))
                fused.setdefault(f"{where}{qkv[stem]}.{leaf}", {})[sub[len(stem)]] = t
    out.update({k: torch.cat([v["q"], v["k"], v["v"]]) for k, v in fused.items()})
    return out


@pytest.mark.parametrize("kind", sorted(SD3_KINDS))
def test_a_stable_diffusion_3_transformer(tmp_path, kind):
    """SD 3 medium, 3.5 medium and 3.5 large at their real sizes (sparse files), in Stability's names; `pos_embed` a
    buffer of diffusers' model."""
    _check_transformer(tmp_path, _sd3_model(**SD3_KINDS[kind]), _sai,
                       single_file_utils.convert_sd3_transformer_checkpoint_to_diffusers, kind, "stable_diffusion_3")


def test_a_stable_diffusion_3_all_in_one_file(tmp_path):
    """sd3_medium_incl_clips_t5xxlfp8.safetensors' layout: the MMDiT under model.diffusion_model., the VAE under
    first_stage_model., the three text encoders under text_encoders.*: each counted apart."""
    _check_all_in_one(tmp_path, _sd3_model(), _sai, {
        "first_stage_model.decoder.conv_in.weight": ("vae", (512, 16, 3, 3)),
        "text_encoders.clip_l.transformer.text_model.embeddings.position_embedding.weight": ("text_encoder", (77, 768)),
        "text_encoders.clip_g.transformer.text_model.embeddings.position_embedding.weight": ("text_encoder_2", (77, 1280)),
        "text_encoders.t5xxl.transformer.shared.weight": ("text_encoder_3", (32128, 4096))},
        "sd3", "a Stable Diffusion 3 pipeline")


# ------------------------------------------------------------------------------------------------ a VAE alone

def test_a_vae_alone(tmp_path):
    """A VAE in LDM's names alone (as `vae-ft-mse-840000-ema-pruned.safetensors` holds it): the 1.x fixture's VAE, which
    diffusers' conversion script wrote, without its prefix. AutoencoderKL.from_single_file loads it (with the tiny
    VAE's config) into a model of as many parameters as ckptstat counts, and of the latent channels it says."""
    from safetensors.torch import save_file

    state, path, model = ldm_vae(tmp_path)
    r = summarize(open_checkpoint(path))
    one = r["single_file"]
    assert r["architecture"]["family"] == "vae" and one["model_type"] is None
    assert f"{model.config.latent_channels} latent channels" in one["what"]
    (row,) = one["components"]
    assert row["component"] == "vae" and row["params"] == r["parameters"]["unique"] == sum(
        p.numel() for p in model.parameters()) == EXPECTED["sd15.safetensors"]["components"]["vae"]
    # a name outside an autoencoder's parts: not a VAE alone
    state["model.diffusion_model.out.2.weight"] = torch.zeros(2, 2)
    save_file(state, path)
    assert summarize(open_checkpoint(path))["single_file"] is None


# ------------------------------------------------------------------------------------------------------- AnimateDiff

MOTION_ADAPTERS = {   # the MotionAdapter configs of guoyww's diffusers repositories, by diffusers' model type
    "animatediff_v1": dict(use_motion_mid_block=False, motion_max_seq_length=24),
    "animatediff_v2": dict(use_motion_mid_block=True, motion_max_seq_length=32),
    "animatediff_v3": dict(use_motion_mid_block=False, motion_max_seq_length=32),
    "animatediff_sdxl_beta": dict(block_out_channels=(320, 640, 1280), use_motion_mid_block=False,
                                  motion_max_seq_length=32)}


def _guoyww(state: dict, frames: int) -> dict:
    """AnimateDiff's original names for a diffusers MotionAdapter's state (shapes only): what
    `convert_animatediff_checkpoint_to_diffusers` reads (checked by running it), with the positional encoding each
    attention block of the original registered and saved ([1, frames, width]), which that converter drops."""
    import re

    out: dict = {}
    for name, t in state.items():
        if name.endswith(".pos_embed.pe"):
            continue
        n = re.sub(r"(motion_modules\.\d+\.)", r"\1temporal_transformer.", name, count=1)
        for new, old in ((".attn1", ".attention_blocks.0"), (".attn2", ".attention_blocks.1"), (".norm1", ".norms.0"),
                         (".norm2", ".norms.1"), (".norm3", ".ff_norm")):
            n = n.replace(new, old)
        out[n] = t
        if n.endswith(".attention_blocks.0.to_q.weight") or n.endswith(".attention_blocks.1.to_q.weight"):
            out[n[:-len("to_q.weight")] + "pos_encoder.pe"] = torch.empty((1, frames, t.shape[0]), device="meta")
    return out


@pytest.mark.parametrize("kind", sorted(MOTION_ADAPTERS))
def test_animatediff_motion_modules(tmp_path, kind):
    """AnimateDiff's motion modules at their real sizes (sparse files) in their original names: diffusers' model type,
    MotionAdapter's parameters (its positional encodings, saved by the original code, counted apart as buffers)."""
    from diffusers import MotionAdapter

    with torch.device("meta"):
        adapter = MotionAdapter(**MOTION_ADAPTERS[kind])
    state = adapter.state_dict()
    original = _guoyww(state, adapter.config.motion_max_seq_length)
    back = single_file_utils.convert_animatediff_checkpoint_to_diffusers(original)
    assert {k: tuple(v.shape) for k, v in back.items()} == {
        k: tuple(v.shape) for k, v in state.items() if not k.endswith(".pos_embed.pe")}
    assert single_file_utils.infer_diffusers_model_type(original) == kind
    path = tmp_path / "mm.safetensors"
    _sparse_safetensors(path, original)
    r = summarize(open_checkpoint(str(path)))
    one = r["single_file"]
    assert r["architecture"]["family"] == "animatediff" and one["model_type"] == kind
    assert one["pipeline"] == single_file_utils.DIFFUSERS_DEFAULT_PIPELINE_PATHS[kind]["pretrained_model_name_or_path"]
    (row,) = one["components"]
    assert row["params"] == r["parameters"]["unique"] == sum(p.numel() for p in adapter.parameters())
    assert row["buffers"] == sum(n.endswith(".pos_encoder.pe") for n in original)
    assert f"{adapter.config.motion_max_seq_length} frames" in one["what"]
