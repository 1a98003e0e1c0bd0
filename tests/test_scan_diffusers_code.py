"""`ckptstat scan` of a diffusers pipeline folder whose model_index.json makes DiffusionPipeline.from_pretrained import
the repository's own Python (analysis/scan/hf_config.py `diffusers_code`): a component `[library, class]` whose folder
holds `<library>.py`, and a pipeline `_class_name` `[module, class]` with `<module>.py` beside the index. The folder is
a real DDPMPipeline.save_pretrained, made custom as such repositories are; the oracle is diffusers itself:
`DiffusionPipeline.from_pretrained(folder, trust_remote_code=True)` in a subprocess runs the module (a marker file).
Before, a folder scan listed nothing (model_index.json was no file scan read), exit 0."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import library_runner
import pytest

pytest.importorskip("diffusers")
torch = pytest.importorskip("torch")

LOAD = ("import sys; from diffusers import DiffusionPipeline; "
        "DiffusionPipeline.from_pretrained(sys.argv[1], trust_remote_code=True)")
MODULE = """
    import os, pathlib
    from diffusers import {base}
    pathlib.Path(os.environ["MARKER"]).touch()
    class {cls}({base}):
        pass
"""


@pytest.fixture
def pipeline(tmp_path):
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, layers_per_block=1, block_out_channels=(8, 8),
                       down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D"),
                       norm_num_groups=4)
    folder = tmp_path / "pipe"
    DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=10)).save_pretrained(folder)
    return folder


def _scan(folder) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", str(folder), "--json"], capture_output=True, text=True,
                       timeout=120)
    return p.returncode, {f["path"]: f for f in json.loads(p.stdout)["files"]}


def _runs(folder, marker) -> bool:
    # (the modules diffusers copies out of the repository go to the test's folder, not the user's HF_MODULES_CACHE)
    library_runner.python(LOAD, str(folder), env=dict(os.environ, MARKER=str(marker)), check=True)
    return marker.exists()


def _index(folder, **change) -> None:
    index = json.loads((folder / "model_index.json").read_text())
    (folder / "model_index.json").write_text(json.dumps({**index, **change}))


def test_a_saved_pipeline_is_not_listed(pipeline):
    rc, files = _scan(pipeline)
    assert rc == 0 and "model_index.json" not in files


def test_a_components_own_module(pipeline, tmp_path):
    (pipeline / "unet" / "my_unet.py").write_text(textwrap.dedent(MODULE.format(base="UNet2DModel", cls="MyUNet")))
    _index(pipeline, unet=["my_unet", "MyUNet"])
    assert _runs(pipeline, tmp_path / "ran")
    rc, files = _scan(pipeline)
    assert rc == 1 and files["model_index.json"]["status"] == "unknown"
    assert files["model_index.json"]["unknown"] == [
        "model_index.json: unet = ['my_unet', 'MyUNet'], unet/my_unet.py in this folder: diffusers imports it and its "
        "Python runs"]


def test_a_custom_pipeline_class(pipeline, tmp_path):
    (pipeline / "my_pipeline.py").write_text(textwrap.dedent(MODULE.format(base="DDPMPipeline", cls="MyPipeline")))
    _index(pipeline, _class_name=["my_pipeline", "MyPipeline"])
    assert _runs(pipeline, tmp_path / "ran")
    rc, files = _scan(pipeline)
    assert rc == 1 and files["model_index.json"]["status"] == "unknown"
    assert "_class_name ['my_pipeline', 'MyPipeline'], my_pipeline.py in this folder" in files["model_index.json"]["verdict"]
