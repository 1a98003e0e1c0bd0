"""A LoRA saved as one file under kohya's names (census/lora_file.py, docs/adapters.md "LoRA files under kohya's
names"): its adapted modules by part, their networks and ranks, read from the names and shapes alone.

Oracle: diffusers' own reading of such a file (lora_conversion_utils `_convert_non_diffusers_lora_to_diffusers`, what
`load_lora_weights` runs on it): the modules it finds for the UNet and each text encoder, their ranks (its lora down
weights' shapes) and their trainable tensors, against ckptstat's. The LoRAs are written as sd-scripts names them, over
the tiny Stable Diffusion 1.x and XL models of fixtures/make_single_file.py (diffusers and transformers build them):
every linear layer of the UNet's attention blocks and of the text encoders' layers, some at rank 8, the rest at 4,
each with its alpha; with and without DoRA's scales.
"""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
conversion = pytest.importorskip("diffusers.loaders.lora_conversion_utils")
from conftest import fixture_script  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.summary import summarize  # noqa: E402

PARTS = {"unet": "lora_unet_", "text_encoder": "lora_te_", "text_encoder_2": "lora_te2_"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return fixture_script("make_single_file")._pipelines(str(tmp_path_factory.mktemp("pipelines")))


def _kohya(models: dict, dora: bool) -> dict:
    """sd-scripts' names for a LoRA over these models (`lora_unet_<path with _>`, the text encoders under
    transformers 4's `text_model.` prefix, XL's as lora_te1_ / lora_te2_)."""
    prefixes = dict(PARTS, text_encoder="lora_te1_" if "text_encoder_2" in models else "lora_te_")
    out: dict = {}
    for part, prefix in prefixes.items():
        if part not in models:
            continue
        for i, (path, m) in enumerate(models[part].named_modules()):
            if not isinstance(m, torch.nn.Linear) or (part == "unet" and ".attentions." not in f".{path}"):
                continue
            if part != "unet" and not path.startswith("text_model."):
                path = "text_model." + path
            if part != "unet" and ".layers." not in path:
                continue
            rank = 8 if i % 5 == 0 else 4
            name = prefix + path.replace(".", "_")
            out[f"{name}.lora_down.weight"] = torch.randn(rank, m.in_features)
            out[f"{name}.lora_up.weight"] = torch.zeros(m.out_features, rank)
            out[f"{name}.alpha"] = torch.tensor(rank / 2)
            if dora:
                out[f"{name}.dora_scale"] = torch.ones(1, m.in_features)
    return out


@pytest.mark.parametrize("base", ["sd15", "sdxl"])
@pytest.mark.parametrize("dora", [False, True], ids=["lora", "dora"])
def test_modules_and_ranks_are_what_diffusers_reads(tmp_path, models, base, dora):
    state = _kohya(models[base], dora)
    path = str(tmp_path / "lora.safetensors")
    record = {"ss_network_module": "networks.lora", "ss_network_dim": "4", "ss_network_alpha": "2",
              "ss_base_model_version": "sd_v1", "ss_cache_latents": "True"}   # (the last: no line shows it)
    save_file(state, path, metadata=record)
    converted, alphas = conversion._convert_non_diffusers_lora_to_diffusers(dict(state))
    want: dict = {}
    for name, t in converted.items():
        part = name.split(".")[0]
        row = want.setdefault(part, {"modules": 0, "params": 0, "ranks": {}})
        row["params"] += t.numel()
        if re.search(r"(lora|lora_linear_layer)\.down\.weight$", name):
            row["modules"] += 1
            row["ranks"][str(t.shape[0])] = row["ranks"].get(str(t.shape[0]), 0) + 1
    assert len(alphas) == sum(r["modules"] for r in want.values())
    r = summarize(open_checkpoint(path))
    lora = r["lora_file"]
    got = {p["part"]: {"modules": p["modules"], "params": p["params"], "ranks": p["ranks"]} for p in lora["parts"]}
    for row in (*got.values(), *want.values()):
        row["ranks"] = dict(sorted(row["ranks"].items()))
    assert got == want
    assert lora["dora"] is dora and lora["modules"] == len(alphas)
    assert all(p["networks"] == {"DoRA" if dora else "LoRA": p["modules"]} for p in lora["parts"])
    assert r["architecture"]["family"] == "adapter" and r["parameters"]["unique"] == sum(
        t.numel() for t in converted.values())   # the alphas are buffers, as sd-scripts registers them
    assert lora["training"] == {k: v for k, v in record.items() if k != "ss_cache_latents"}


def test_the_cli_says_what_it_is(cli, tmp_path, models):
    path = str(tmp_path / "lora.safetensors")
    save_file(_kohya(models["sd15"], False), path, metadata={"ss_network_alpha": "2"})
    rc, out, _ = cli("summary", path)
    text = " ".join(out.split())
    assert rc == 0 and "a LoRA file (kohya naming)" in text and "alpha 2" in text and "no rule placed" not in text
    rc, out, err = cli("flops", path)
    assert rc == 2 and "a LoRA file (kohya naming), not a whole model" in " ".join((out + err).split())


def test_other_names_beside_are_no_lora_file(tmp_path, models):
    state = _kohya(models["sd15"], False)
    state["model.diffusion_model.out.2.weight"] = torch.zeros(4, 4)
    path = str(tmp_path / "merged.safetensors")
    save_file(state, path)
    assert summarize(open_checkpoint(path))["lora_file"] is None


# ------------------------------------------------------------------------------------ diffusers' names

TARGETS = {"unet": (["to_q", "to_k", "to_v", "to_out.0"], 4), "text_encoder": (["q_proj", "k_proj", "v_proj"], 8)}


@pytest.mark.parametrize("dora", [False, True], ids=["lora", "dora"])
def test_a_pipelines_save_lora_weights(tmp_path, dora):
    """What StableDiffusionPipeline.save_lora_weights writes (pytorch_lora_weights.safetensors, peft's names under each
    component): the modules peft injected in each model, their ranks, their trainable tensors. Before, ckptstat called
    such a file a llama."""
    from diffusers import StableDiffusionPipeline
    from peft import LoraConfig, get_peft_model_state_dict, inject_adapter_in_model

    models = fixture_script("make_single_file")._pipelines(str(tmp_path / "pipelines"))["sd15"]
    layers, want = {}, {}
    for part, (targets, rank) in TARGETS.items():
        model = inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=rank, target_modules=targets, use_dora=dora),
                                        models[part])
        adapted = [m for m in model.modules() if hasattr(m, "lora_A") and "default" in m.lora_A]
        saved = get_peft_model_state_dict(model)
        layers[f"{part}_lora_layers"] = saved
        want[part] = {"modules": len(adapted), "params": sum(t.numel() for t in saved.values()),
                      "ranks": {str(rank): len(adapted)}}
    StableDiffusionPipeline.save_lora_weights(str(tmp_path), **layers)
    r = summarize(open_checkpoint(str(tmp_path / "pytorch_lora_weights.safetensors")))
    lora = r["lora_file"]
    assert lora is not None and lora["naming"] == "diffusers" and lora["dora"] is dora
    assert {p["part"]: {k: p[k] for k in ("modules", "params", "ranks")} for p in lora["parts"]} == want
    assert r["architecture"]["family"] == "adapter" and r["architecture"]["model_type"] == "diffusers LoRA file"


@pytest.mark.parametrize("name", ["lora_unet_x.lora_down.weight", "unet.x.lora_A.weight"])
def test_a_scalar_down_weight_has_no_rank(tmp_path, name):
    """A hostile header's 0-d down weight: the file is read, its module without a rank (`-`), no traceback."""
    path = str(tmp_path / "lora.safetensors")
    save_file({name: torch.tensor(1.0), name.replace("down", "up").replace("lora_A", "lora_B"): torch.zeros(4, 2)}, path)
    (part,) = summarize(open_checkpoint(path))["lora_file"]["parts"]
    assert part["ranks"] == {"-": 1}


def test_peft_weights_without_their_config(tmp_path):
    """A PEFT adapter's weights copied without their adapter_config.json (peft's own save, a torch .bin): a LoRA file
    under peft's names, its modules and ranks as peft's config set them, not the llama its module names look like."""
    import json
    import shutil

    make_adapters = fixture_script("make_adapters")
    make_adapters.write_adapter("llama-lora-bin", str(tmp_path / "case"))
    config = json.loads((tmp_path / "case" / "adapter" / "adapter_config.json").read_text())
    alone = tmp_path / "alone.bin"
    shutil.copy(tmp_path / "case" / "adapter" / "adapter_model.bin", alone)
    r = summarize(open_checkpoint(str(alone)))
    lora = r["lora_file"]
    assert lora["naming"] == "peft" and r["architecture"]["model_type"] == "peft LoRA file"
    (part,) = lora["parts"]
    assert part["part"] == "model" and set(part["ranks"]) == {str(config["r"])} and lora["dora"] is False
