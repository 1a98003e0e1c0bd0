"""diffusers pipeline folders (issue 18): tiny pipelines written at test time by diffusers' own
save_pretrained (fixtures/make_adapters.py) from random-init components; the oracle is each component's
parameters(). Each component is read as a local model folder is; the pipeline summary stays header-only."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import fixture_script

make_adapters = fixture_script("make_adapters")

from ckptstat.analysis.pipeline import pipeline_report  # noqa: E402
from ckptstat.errors import CheckpointError  # noqa: E402


@pytest.fixture(scope="session")
def pipes(tmp_path_factory) -> dict[str, tuple[str, dict[str, int]]]:
    root = tmp_path_factory.mktemp("pipelines")
    out = {name: (str(root / name), make_adapters.write_pipeline(name, str(root / name))) for name in make_adapters.PIPELINES}
    # the same pipeline with every component sharded (diffusion_pytorch_model.safetensors.index.json)
    out["sd-sharded"] = (str(root / "sd-sharded"), make_adapters.write_pipeline("sd", str(root / "sd-sharded"),
                                                                                max_shard_size="40KB"))
    return out


@pytest.mark.parametrize("name", ["sd", "dit", "sdxl", "sd-sharded"])
def test_components_agree_with_parameters(pipes, name):
    folder, oracle = pipes[name]
    r = pipeline_report(folder)
    got = {c["component"]: c["params"] for c in r["components"] if c["status"] == "weights"}
    assert got == oracle                                   # each component's parameters()
    assert r["total"]["params"] == sum(oracle.values())
    assert r["total"]["components"] == len(oracle)
    status = {c["component"]: c["status"] for c in r["components"]}
    assert status["scheduler"] == "no weights"


def test_public_api(pipes):
    import ckptstat

    folder, oracle = pipes["dit"]
    r = ckptstat.pipeline_summary(folder)
    assert r["schema"] == "ckptstat.pipeline/1" and r["total"]["params"] == sum(oracle.values())


def test_sharded_components_read_their_index(pipes):
    folder, _ = pipes["sd-sharded"]
    assert any(f.endswith(".index.json") for f in os.listdir(os.path.join(folder, "unet")))
    r = pipeline_report(folder)
    unet = next(c for c in r["components"] if c["component"] == "unet")
    assert "sharded" in unet["format"] and unet["files"] > 1


def test_sd_layout(pipes):
    folder, _ = pipes["sd"]
    r = pipeline_report(folder)
    assert r["pipeline"] == "StableDiffusionPipeline"
    rows = {c["component"]: c for c in r["components"]}
    assert rows["tokenizer"]["status"] == "absent"          # saved without one: [null, null]
    assert rows["unet"]["class"] == "UNet2DConditionModel" and rows["text_encoder"]["library"] == "transformers"


def test_cli(pipes, cli):
    folder, oracle = pipes["sd"]
    rc, out, err = cli(folder)
    assert rc == 0, err
    assert "StableDiffusionPipeline" in out and f"{sum(oracle.values()):,}" in out and "unet" in out
    rc, out, err = cli(folder, "--json")      # the quick path leaves pipelines to the typer command
    assert rc == 0, err
    assert json.loads(out)["schema"] == "ckptstat.pipeline/1"
    rc, out, err = cli(os.path.join(folder, "unet"), "--json")   # one component: a local model folder
    assert rc == 0, err
    assert json.loads(out)["parameters"]["unique"] == oracle["unet"]
    rc, _, err = cli("tensors", folder)
    assert rc == 2 and "diffusers pipeline" in err and len(err.strip().splitlines()) == 1
    rc, _, err = cli(folder, "--base", folder)
    assert rc == 2 and "--base" in err


def test_hostile_index(tmp_path, pipes, cli):
    """model_index.json names subfolders only; a component outside the pipeline folder is refused."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model_index.json").write_text(json.dumps({"_class_name": "X", "unet": ["diffusers", "UNet2DConditionModel"],
                                                      "../evil": ["diffusers", "AutoencoderKL"]}))
    with pytest.raises(CheckpointError, match="not the name of a subfolder"):
        pipeline_report(str(bad))
    rc, _, err = cli(str(bad))
    assert rc == 1 and len(err.strip().splitlines()) == 1
    (bad / "model_index.json").write_text("[1, 2]")
    rc, _, err = cli(str(bad))
    assert rc == 1 and "model_index.json" in err and len(err.strip().splitlines()) == 1
    outside, _ = pipes["sd"]
    link = tmp_path / "linked"
    link.mkdir()
    (link / "model_index.json").write_text(json.dumps({"vae": ["diffusers", "AutoencoderKL"]}))
    os.symlink(os.path.join(outside, "vae"), link / "vae")
    rc, _, err = cli(str(link))
    assert rc == 1 and "outside the checkpoint" in err and len(err.strip().splitlines()) == 1
    rc, _, err = cli("--allow-external", str(link))
    assert rc == 0, err


@pytest.mark.parametrize("component", ["", "unet", "text_encoder"])
def test_header_only(pipes, component):
    """The pipeline summary, and a component's, import no torch, transformers, diffusers, numpy or h5py."""
    folder, _ = pipes["sd-sharded"]
    code = ("import sys; from ckptstat.cli import main; rc = main([" + repr(os.path.join(folder, component)) + "]); "
            "print(rc, sorted(m for m in ('torch', 'h5py', 'matplotlib', 'transformers', 'diffusers', 'numpy') "
            "if m in sys.modules), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stderr.strip().splitlines()[-1] == "0 []", r.stderr


@pytest.mark.parametrize("name", ["sd", "dit", "sdxl"])
def test_a_diffusers_component_is_its_class(pipes, name):
    """A diffusers model folder (unet/, vae/, transformer/): the class diffusers wrote in model_index.json, not a
    family guessed from its tensor names (a UNet's names used to read as unknown, some as a text model's)."""
    from ckptstat import open_checkpoint
    from ckptstat.analysis.summary import summarize

    folder, _ = pipes[name]
    index = json.load(open(os.path.join(folder, "model_index.json")))
    diffusers_models = {k: v[1] for k, v in index.items() if isinstance(v, list) and v[0] == "diffusers"
                        and os.path.exists(os.path.join(folder, k, "config.json"))}
    assert diffusers_models
    for component, cls in diffusers_models.items():
        a = summarize(open_checkpoint(os.path.join(folder, component)))["architecture"]
        assert a == {"family": "diffusers", "source": "config.json", "model_type": None, "architectures": [cls]}
