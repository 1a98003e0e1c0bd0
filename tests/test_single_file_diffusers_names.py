"""Parts of a diffusion pipeline saved alone in diffusers' own names, without the config.json beside them
(census/diffusion.py: `_vae`, `_dit_controlnet`): a VAE copied out of a pipeline's `vae/` folder (as
madebyollin/sdxl-vae-fp16-fix's `sdxl_vae.safetensors` is distributed), the transformers' ControlNets (InstantX's and
Shakker-Labs' FLUX.1 unions, SD 3's, Qwen-Image's, alibaba-pai's Z-Image Fun ControlNets).

Oracles, diffusers' own: each model's `state_dict()` names and shapes and `parameters()` (the VAE as
`AutoencoderKL.from_single_file` loads the 1.x fixture's; the ControlNets built on the meta device at their releases'
sizes), diffusers' reading of the older attention names (`_fix_state_dict_keys_on_load`), and
`infer_diffusers_model_type` on the same names (and, for Z-Image's 2.x, the zero `before_proj` values it reads).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
single_file_utils = pytest.importorskip("diffusers.loaders.single_file_utils")

from conftest import ldm_vae, sparse_safetensors  # noqa: E402

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.summary import summarize  # noqa: E402

LEGACY = {"to_q": "query", "to_k": "key", "to_v": "value", "to_out.0": "proj_attn"}


def _file(tmp_path, state: dict, name: str = "model.safetensors") -> dict:
    path = tmp_path / name
    sparse_safetensors(path, {n: ("BF16", tuple(t.shape)) for n, t in state.items()})
    return summarize(open_checkpoint(str(path)))


@pytest.mark.parametrize("legacy", [False, True])
def test_a_vae_alone_in_diffusers_names(tmp_path, legacy):
    """Its own state dict, and the same under the attention names diffusers used before (query / key / value /
    proj_attn: its loader still reads them, back into the model's names): a VAE, diffusers' AutoencoderKL, its latent
    channels, the model's parameters."""
    _, _, model = ldm_vae(tmp_path)
    state = model.state_dict()
    if legacy:
        old = {}
        for name, t in state.items():
            for new, was in LEGACY.items():
                if ".attentions." in name and f".{new}." in name:
                    name = name.replace(f".{new}.", f".{was}.")
            old[name] = t
        assert old != state and model._fix_state_dict_keys_on_load(dict(old)).keys() == state.keys()
        state = old
    r = _file(tmp_path, state)
    one = r["single_file"]
    assert r["architecture"]["family"] == "vae" and one["model_type"] is None
    assert one["what"] == f"a VAE (diffusers' AutoencoderKL, {model.config.latent_channels} latent channels)"
    assert r["parameters"]["unique"] == sum(p.numel() for p in model.parameters())


def test_flux2s_vae_in_diffusers_names(tmp_path):
    """AutoencoderKLFlux2 (its latent BatchNorm `bn.`, whose running statistics are buffers)."""
    with torch.device("meta"):
        model = diffusers.AutoencoderKLFlux2()
    r = _file(tmp_path, model.state_dict())
    assert r["architecture"]["family"] == "vae"
    assert r["parameters"]["unique"] == sum(p.numel() for p in model.parameters())
    assert r["single_file"]["components"][0]["buffers"] == len(dict(model.named_buffers()))


# label -> (diffusers class, the release's sizes, what ckptstat says)
# label -> (diffusers class, the release's sizes)
CONTROLNETS = {
    "instantx-flux-union": ("FluxControlNetModel", {"num_layers": 5, "num_single_layers": 10, "num_mode": 10}),
    "shakker-flux-union-pro-2": ("FluxControlNetModel", {"num_layers": 6, "num_single_layers": 0}),
    "sd3": ("SD3ControlNetModel", {"num_layers": 6}),
    "qwen-image-union": ("QwenImageControlNetModel", {"num_layers": 5, "extra_condition_channels": 4}),
    "z-image-1.0": ("ZImageControlNetModel", {"control_layers_places": [0, 5, 10, 15, 20, 25], "control_in_dim": 16}),
    "z-image-2.x": ("ZImageControlNetModel", {"control_layers_places": list(range(0, 30, 2)), "control_in_dim": 33,
                                               "add_control_noise_refiner": "control_layers",
                                               "control_refiner_layers_places": [0, 1]}),
    "z-image-2.x-refiner": ("ZImageControlNetModel", {
        "control_layers_places": list(range(0, 30, 2)), "control_in_dim": 33,
        "add_control_noise_refiner": "control_noise_refiner", "control_refiner_layers_places": [0, 1]}),
}


def _what(model) -> str:
    """What ckptstat should say of this ControlNet, from the built model's own stacks."""
    def n(stack: str) -> int:
        return len(getattr(model, stack, None) or [])
    name = type(model).__name__
    if name == "FluxControlNetModel":
        modes = ", control modes" if getattr(model, "controlnet_mode_embedder", None) is not None else ""
        return (f"a FLUX.1 ControlNet ({n('transformer_blocks')} double- and {n('single_transformer_blocks')} "
                f"single-stream blocks{modes})")
    if name == "ZImageControlNetModel":
        refiner = n("control_noise_refiner")
        return (f"a Z-Image ControlNet ({n('control_layers')} control layers"
                + (f", {refiner} noise-refiner layers)" if refiner else ")"))
    title = "Stable Diffusion 3" if name == "SD3ControlNetModel" else "Qwen-Image"
    return f"a {title} ControlNet ({n('transformer_blocks')} blocks)"


@pytest.mark.parametrize("label", sorted(CONTROLNETS))
def test_a_transformers_controlnet_alone(tmp_path, label):
    """A ControlNet of FLUX.1, SD 3, Qwen-Image or Z-Image alone: family controlnet, the model's parameters; its type
    diffusers' (none but Z-Image's: diffusers' rules fall to "v1"; Z-Image's 2.x with a noise refiner is 2.0 or 2.1 by
    its `before_proj` values, which a header does not give: none)."""
    cls, sizes = CONTROLNETS[label]
    with torch.device("meta"):
        model = getattr(diffusers, cls)(**sizes)
    state = model.state_dict()
    r = _file(tmp_path, state)
    one = r["single_file"]
    assert r["architecture"]["family"] == "controlnet" and one["what"] == _what(model)
    assert r["parameters"]["unique"] == sum(p.numel() for p in model.parameters())
    assert one["components"][0]["buffers"] == len(dict(model.named_buffers()))
    theirs = single_file_utils.infer_diffusers_model_type(
        {n: torch.zeros(t.shape) if "before_proj" in n else torch.empty(t.shape, device="meta") for n, t in state.items()})
    if label == "z-image-2.x-refiner":
        assert theirs == "z-image-turbo-controlnet-2.0" and one["model_type"] is None   # (zeros: 2.0; trained: 2.1)
    elif label.startswith("z-image"):
        assert one["model_type"] == theirs
    else:
        assert theirs == "v1" and one["model_type"] is None
