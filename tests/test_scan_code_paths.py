"""`ckptstat scan` of the ways a Hugging Face folder makes a library import its Python that the ninth and twelfth passes'
`auto_map`, `modules.json` and `model_index.json` rules did not cover (analysis/scan/hf_config.py; docs/security.md,
thirteenth pass). Each folder is written by the library itself, made custom as such repositories are, and the oracle is
the library loading it in another process (forked from a warm interpreter: tests/library_runner.py): the module runs
(a marker file). Before, each scan said `0 file(s) scanned`,
exit 0.

- a config.json `custom_pipelines` entry: transformers' `pipeline(model=folder, trust_remote_code=True)` imports `impl`;
- a diffusers `modular_config.json` whose `auto_map` names the folder's module: ModularPipelineBlocks.from_pretrained;
- a model folder's `custom_generate/generate.py`: transformers' `from_pretrained(..., trust_remote_code=True)` of a
  generative model imports it, with no config naming it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")

import library_runner  # noqa: E402
from remote_server import Server  # noqa: E402

MARK = "import os, pathlib\npathlib.Path(os.environ['MARKER']).touch()\n"


def _python(code: str, folder, marker) -> bool:
    library_runner.python(code, str(folder), env={**os.environ, "MARKER": str(marker)})
    return marker.exists()


def _scan(target: str) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", target, "--json"], capture_output=True, text=True,
                       timeout=120)
    assert p.stdout, p.stderr
    return p.returncode, {f["path"]: f for f in json.loads(p.stdout)["files"]}


def _save(code: str, folder) -> None:
    library_runner.python(code, str(folder), check=True)


BERT = """
import sys
from transformers import BertConfig, BertModel
BertModel(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=8)).save_pretrained(sys.argv[1])
"""
GPT2 = """
import sys
from transformers import GPT2Config, GPT2LMHeadModel
GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=8, n_layer=1, n_head=2, n_positions=16)).save_pretrained(sys.argv[1])
"""
PIPELINE = """
from transformers import Pipeline
class MyPipe(Pipeline):
    def _sanitize_parameters(self, **kw):
        return {}, {}, {}
    def preprocess(self, x):
        return x
    def _forward(self, x):
        return x
    def postprocess(self, x):
        return x
"""


def test_custom_pipelines_in_config_json(tmp_path):
    folder = tmp_path / "model"
    _save(BERT, folder)
    config = json.loads((folder / "config.json").read_text())
    config["custom_pipelines"] = {"my-task": {"impl": "my_pipe.MyPipe", "pt": ["AutoModel"], "type": "text"}}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "my_pipe.py").write_text(MARK + PIPELINE)
    assert _python("import sys; from transformers import pipeline; pipeline(model=sys.argv[1], trust_remote_code=True)",
                   folder, tmp_path / "ran")
    rc, files = _scan(str(folder))
    assert rc == 1 and files["config.json"]["status"] == "unknown"
    assert files["config.json"]["unknown"] == [
        "custom_pipelines: my_pipe.py (task my-task -> MyPipe), in this folder: with trust_remote_code=True "
        "transformers' pipeline() imports it and its Python runs"]


def test_a_saved_model_without_custom_pipelines_is_not_listed(tmp_path):
    _save(BERT, tmp_path / "model")
    rc, files = _scan(str(tmp_path / "model"))
    assert rc == 0 and files == {}


def test_diffusers_modular_config(tmp_path):
    pytest.importorskip("diffusers")
    folder = tmp_path / "blocks"
    folder.mkdir()
    (folder / "my_blocks.py").write_text(MARK + "from diffusers.modular_pipelines import ModularPipelineBlocks\n"
                                         "class MyBlocks(ModularPipelineBlocks):\n    pass\n")
    (folder / "modular_config.json").write_text(json.dumps({
        "_class_name": "MyBlocks", "_diffusers_version": "0.42.1",
        "auto_map": {"ModularPipelineBlocks": "my_blocks.MyBlocks"}}))
    assert _python("import sys; from diffusers.modular_pipelines import ModularPipelineBlocks as B; "
                   "B.from_pretrained(sys.argv[1], trust_remote_code=True)", folder, tmp_path / "ran")
    rc, files = _scan(str(folder))
    assert rc == 1 and files["modular_config.json"]["status"] == "unknown"
    assert files["modular_config.json"]["unknown"] == [
        "auto_map: my_blocks.py (ModularPipelineBlocks -> MyBlocks), in this folder: with trust_remote_code=True "
        "diffusers imports it and its Python runs"]


@pytest.fixture
def generative(tmp_path):
    folder = tmp_path / "gpt2"
    _save(GPT2, folder)
    (folder / "custom_generate").mkdir()
    (folder / "custom_generate" / "generate.py").write_text(MARK + "def generate(model, **kw):\n    return None\n")
    return folder


def test_custom_generate_module(generative, tmp_path):
    load = "import sys; from transformers import AutoModelForCausalLM as A; A.from_pretrained(sys.argv[1]{})"
    assert not _python(load.format(""), generative, tmp_path / "without")   # (the flag is what runs it)
    assert _python(load.format(", trust_remote_code=True"), generative, tmp_path / "ran")
    rc, files = _scan(str(generative))
    assert rc == 1 and set(files) == {"custom_generate/generate.py"}
    assert files["custom_generate/generate.py"]["status"] == "unknown"
    assert "from_pretrained of a generative model in this folder imports it" in files["custom_generate/generate.py"][
        "unknown"][0]


def test_custom_generate_module_over_http(generative):
    with Server(str(generative)) as s:
        rc, files = _scan(f"{s.url}/")
    assert rc == 1 and files["custom_generate/generate.py"]["status"] == "unknown"
