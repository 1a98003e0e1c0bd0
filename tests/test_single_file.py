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

from conftest import fixture  # noqa: E402

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.summary import summarize  # noqa: E402
from ckptstat.census.diffusion import KEYS, PIPELINES, layout  # noqa: E402

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
        assert rows["noise schedule"]["params"] == 0 and rows["noise schedule"]["buffers"] == 12
    assert sum(c["tensors"] for c in one["components"]) == r["parameters"]["tensors"] + sum(
        n["tensors"] for n in r["non_parameters"])


def test_the_ema_copy_holds_what_diffusers_extracts():
    """A trainer's `.ckpt`: the UNet diffusers extracts with extract_ema=True has as many parameters as the EMA copy's
    tensors hold elements (their names without LitEma's bookkeeping)."""
    path = fixture("single_file/sd15.ckpt")
    ckpt = open_checkpoint(path)
    shadow = [t for n, t in ckpt.tensors.items() if n.startswith("state_dict.model_ema.diffusion_model")]
    assert sum(t.numel for t in shadow) == EXPECTED["sd15.ckpt"]["ema_copy"]


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
    for kind, repo in PIPELINES.items():
        assert single_file_utils.DIFFUSERS_DEFAULT_PIPELINE_PATHS[kind]["pretrained_model_name_or_path"] == repo


def test_not_a_pipeline_in_one_file():
    """A bare UNet in the original names (no VAE, no text encoder beside it) and a VAE alone are no pipeline; a
    diffusers-named UNet neither."""
    d = _meta(fixture("single_file/sd15.safetensors"))
    for keep in ("model.diffusion_model.", "first_stage_model.", "cond_stage_model."):
        part = {k: v for k, v in d.items() if k.startswith(keep)}
        assert layout(part, lambda n, part=part: tuple(part[n].shape)) is None, keep


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
