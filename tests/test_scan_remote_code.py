"""`ckptstat scan` of a Hugging Face folder whose configs make transformers import the repository's Python
(analysis/scan/hf_config.py): `auto_map` written by transformers itself (`register_for_auto_class`, then
`save_pretrained`), and measured: `from_pretrained(..., trust_remote_code=True)` of that folder runs the module (it
creates a marker file), in a subprocess. scan must never call such a folder clean: the config is `unknown`, naming the
module and the classes that load it; a config without `auto_map` or a template is not listed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import library_runner
import pytest

pytest.importorskip("transformers")

from remote_server import Server  # noqa: E402

from ckptstat.analysis.scan import scan_path  # noqa: E402
from ckptstat.analysis.scan.hf_config import remote_code  # noqa: E402

MODULES = {
    "configuration_evil.py": """
        import os, pathlib
        from transformers import PretrainedConfig
        pathlib.Path(os.environ["MARKER"]).touch()
        class EvilConfig(PretrainedConfig):
            model_type = "evil"
    """,
    "tokenization_evil.py": """
        import os, pathlib
        from transformers import PreTrainedTokenizerFast
        pathlib.Path(os.environ["MARKER"]).touch()
        class EvilTokenizer(PreTrainedTokenizerFast):
            pass
    """,
}
WRITE = """
import sys
sys.path.insert(0, sys.argv[1])
import configuration_evil, tokenization_evil
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
configuration_evil.EvilConfig.register_for_auto_class()
configuration_evil.EvilConfig(hidden=3).save_pretrained(sys.argv[2])
tokenization_evil.EvilTokenizer.register_for_auto_class()
tokenization_evil.EvilTokenizer(tokenizer_object=Tokenizer(WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
                                ).save_pretrained(sys.argv[2])
"""
LOAD = """
import sys
from transformers import AutoConfig, AutoTokenizer
getattr({"config": AutoConfig, "tokenizer": AutoTokenizer}[sys.argv[2]], "from_pretrained")(sys.argv[1],
                                                                                           trust_remote_code=True)
"""


def _python(code, *args, marker) -> int:
    return library_runner.python(code, *map(str, args), env={**os.environ, "MARKER": str(marker)})


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A folder transformers wrote: config.json and tokenizer_config.json with auto_map, the two module files."""
    root = tmp_path_factory.mktemp("remote_code")
    (root / "src").mkdir()
    for name, text in MODULES.items():
        (root / "src" / name).write_text(textwrap.dedent(text))
    assert _python(WRITE, root / "src", root / "model", marker=root / "written") == 0
    return root / "model"


def test_loading_the_folder_runs_its_modules(saved, tmp_path):
    for kind in ("config", "tokenizer"):
        marker = tmp_path / kind
        assert _python(LOAD, saved, kind, marker=marker) == 0 and marker.exists(), kind


def test_scan_of_the_folder_names_each_module(saved):
    p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", str(saved), "--json"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    files = {f["path"]: f for f in json.loads(p.stdout)["files"]}
    assert set(files) == {"config.json", "tokenizer_config.json"}
    assert all(f["status"] == "unknown" for f in files.values())
    config = json.loads((saved / "config.json").read_text())["auto_map"]
    assert files["config.json"]["unknown"] == [
        f"auto_map: configuration_evil.py (AutoConfig -> {config['AutoConfig'].split('.')[-1]}), in this folder: with "
        "trust_remote_code=True transformers imports it and its Python runs"]
    assert "tokenization_evil.py" in files["tokenizer_config.json"]["verdict"]
    assert files["config.json"]["verdict"].startswith("SUSPICIOUS: auto_map: configuration_evil.py")


def test_the_forms_auto_map_takes():
    """A list of (slow, fast) with a null, another repository's module, a module missing from the folder, a value
    that is no class reference: each named, never dropped."""
    lines = remote_code({"auto_map": {
        "AutoTokenizer": [None, "tokenization_x.XTokenizerFast"],
        "AutoModel": "org/code-repo--modeling_x.XModel",
        "AutoModelForCausalLM": "modeling_missing.XForCausalLM",
        "AutoConfig": 7}}, folder="/nonexistent")
    assert any("tokenization_x.py (AutoTokenizer -> XTokenizerFast), not in this folder" in x for x in lines)
    assert any("modeling_x.py (AutoModel -> XModel), from the repository org/code-repo" in x for x in lines)
    assert any("modeling_missing.py" in x for x in lines)
    assert any("AutoConfig = 7, not a class reference" in x for x in lines)
    assert remote_code({"model_type": "llama"}, folder="/x") == []


def test_configs_without_remote_code_or_templates_are_not_listed(tmp_path, cli):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 8}))
    (tmp_path / "preprocessor_config.json").write_text("[1, 2]")
    rc, out, _ = cli("scan", str(tmp_path), "--json")
    assert rc == 0 and json.loads(out)["files"] == []


def test_a_template_and_remote_code_in_one_config(tmp_path):
    """The worse wins: a hostile template is unsafe, the remote code stays listed among the unknowns."""
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": "{{ cycler.__init__.__globals__.os.name }}",
        "auto_map": {"AutoTokenizer": ["tokenization_x.XTokenizer", None]}}))
    r = scan_path(str(tmp_path / "tokenizer_config.json"))
    assert r["status"] == "unsafe" and any("tokenization_x.py" in u for u in r["unknown"])


def test_over_http(saved):
    with Server(str(saved)) as s:
        p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", f"{s.url}/config.json", "--json"],
                           capture_output=True, text=True, timeout=120)
    r = json.loads(p.stdout)
    assert p.returncode == 1 and r["status"] == "unknown", p.stderr
    assert "configuration_evil.py" in r["unknown"][0] and "beside this config" in r["unknown"][0]
