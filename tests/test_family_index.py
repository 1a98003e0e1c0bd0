"""The registry's index (ckptstat/families/index.json, written by fixtures/make_family_index.py) is what the family
modules say, every family module is registered, and a command that needs one family imports that family's module
alone (docs/performance.md, "Start-up")."""
from __future__ import annotations

import ast
import os
import subprocess
import sys

from conftest import fixture_script

import ckptstat.families as families

make = fixture_script("make_family_index")
FAMILIES_DIR = os.path.dirname(families.__file__)


def test_index_is_what_the_family_modules_say():
    with open(make.OUT, encoding="utf-8") as f:
        assert f.read() == make.text(), ("ckptstat/families/index.json is not what the family modules say: "
                                         "run `python fixtures/make_family_index.py`")


def test_every_family_module_is_registered():
    """A module defining FAMILY is in _MODULES (the generic fallback apart), and each registered one defines it."""
    defining = set()
    for name in os.listdir(FAMILIES_DIR):
        if name.endswith(".py") and name != "__init__.py":
            with open(os.path.join(FAMILIES_DIR, name), encoding="utf-8") as f:
                tree = ast.parse(f.read())
            if any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "FAMILY" for t in n.targets)
                   for n in tree.body):
                defining.add(name[:-3])
    assert defining - {families.GENERIC} == set(families._MODULES), "list the family module in families._MODULES"


def test_tables_made_from_the_index_are_the_modules():
    """MODEL_TYPES and the signatures detection compiles (from the index) are what FAMILIES (every module) makes; get()
    answers with the module's own record."""
    assert families.MODEL_TYPES == {mt: f.name for f in families.FAMILIES for mt in f.model_types}
    signatures = map(families._signature, families.index()[0])
    assert [(p.pattern, tuple(t.pattern for t in tog), w and w.pattern, n) for p, tog, w, n in signatures] == [
        (f.signature, f.signature_together, f.signature_without, f.name) for f in families.FAMILIES]
    for f in families.FAMILIES + (families.generic.FAMILY,):
        assert families.get(f.name) is f and families._BY_NAME[f.name] is f


def _family_modules_after(code: str) -> list[str]:
    """The family modules (families/<name>.py with a FAMILY) a fresh interpreter has imported after `code`."""
    probe = (f"{code}\nimport sys\nprint(' '.join(sorted(m.rsplit('.', 1)[1] for m in sys.modules "
             "if m.startswith('ckptstat.families.') and hasattr(sys.modules[m], 'FAMILY'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(FAMILIES_DIR))).stdout
    return out.split()


def test_a_model_type_imports_its_family_alone():
    assert _family_modules_after("from ckptstat.families import by_model_type\nby_model_type('gpt2', {})") == ["gpt2"]
    # the framework imports without any family (it reaches them through the registry)
    assert _family_modules_after("import ckptstat.families.framework.layout, ckptstat.families.framework.spec") == []


def test_detection_from_names_imports_no_family():
    code = ("from ckptstat.families import detect\n"
            "assert detect(['model.layers.0.self_attn.q_proj.weight'], None).family == 'llama'")
    assert _family_modules_after(code) == []


def test_a_gguf_architecture_imports_the_families_that_name_it():
    """Mixtral is tried before LLaMA ("llama" files with experts): both are asked, in that order, nothing else."""
    assert [e.name for e in families.index()[0] if "llama" in e.gguf_names] == ["mixtral", "llama"]
    code = "from ckptstat.families import by_gguf\nassert by_gguf('llama', {}).name == 'llama'"
    assert _family_modules_after(code) == ["llama", "mixtral"]
    code = "from ckptstat.families import by_gguf\nassert by_gguf('gpt2', {}).name == 'gpt2'"
    assert _family_modules_after(code) == ["gpt2"]
