"""The package's shape (docs/architecture.md): each module imports only from its own layer or the
layers below it, no import cycle (deferred imports included), no module over 600 lines, every family and format
registered, and a header-only command that imports no heavy library."""
from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "ckptstat")

# Lowest first. A module imports only from its own layer or one before it.
LAYERS = [
    ("errors", "version"),
    ("core",),
    ("formats", "sources"),
    ("naming",),
    ("families",),
    ("census",),
    ("analysis", "executor"),
    ("render",),
    ("cli", "commands", "__main__", "__init__"),
]
MAX_LINES = 600


def _modules() -> dict[str, str]:
    out = {}
    for folder, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                name = "ckptstat" if rel == "__init__" else "ckptstat." + rel.removesuffix(".__init__")
                out[name] = path
    return out


MODULES = _modules()


def layer_of(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module}: in no layer; add it to LAYERS and docs/architecture.md")


def _is_package(module: str) -> bool:
    return MODULES[module].endswith("__init__.py")


def imports(module: str, type_checking: bool = False) -> list[tuple[str, int, bool]]:
    """(imported ckptstat module, line, at module level) for every import; those under
    `if TYPE_CHECKING:` only with type_checking=True (they count as module level)."""
    tree = ast.parse(open(MODULES[module], encoding="utf-8").read())
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                if type_checking:
                    visit(child, top)
                continue
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, top) for a in child.names if a.name.startswith("ckptstat"))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    pkg = module if _is_package(module) else module.rpartition(".")[0]
                    for _ in range(child.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = pkg + ("." + child.module if child.module else "")
                else:
                    base = child.module or ""
                if not base.startswith("ckptstat"):
                    continue
                for a in child.names:
                    sub = f"{base}.{a.name}"
                    out.append((sub if sub in MODULES else base, child.lineno, top))
            else:
                nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                visit(child, top and not nested)

    visit(tree, True)
    return out


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    mine = layer_of(module)
    for target, line, _ in imports(module):
        if target == "ckptstat" and module != "ckptstat":   # `from .. import __version__` is the package's metadata
            continue
        assert layer_of(target) <= mine, (
            f"{module}:{line} imports {target}, a layer above it ({LAYERS[layer_of(target)]} > {LAYERS[mine]})")


def test_no_import_cycle():
    # Type-only and deferred (in-function) imports count too: a cycle through `if TYPE_CHECKING:` or through
    # a lazy import is still two modules that need each other; data flows one way.
    graph = {m: {t for t, _, _ in imports(m, type_checking=True) if t in MODULES and t != m} for m in MODULES}
    # A package's __init__ re-exporting its submodules is not a cycle with them when they import siblings.
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                dfs(n)
        stack.pop()
        state[m] = 2

    for m in sorted(MODULES):
        if m not in state:
            dfs(m)


# Within the analysis layer, its parts (subpackages and modules, docs/architecture.md), lowest first: a part
# imports only from its own tier or one before it. The cluster settings stats shares with audit put audit first.
ANALYSIS_TIERS = [
    ("quantized", "dequantized", "dequantized_codes", "dequantized_gptq", "dequantized_keras", "ties", "flops", "memory",
     "conversion", "conversion_mlx", "conversion_mla", "diff_experts", "scan", "adapter", "pipeline", "torch_flops"),
    ("meta", "optimizer_names"),
    ("summary", "diff"),
    ("audit",),
    ("stats", "trend"),
    ("report",),
]


def _analysis_tier(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 3 or parts[1] != "analysis":
        return None
    tier = next((i for i, names in enumerate(ANALYSIS_TIERS) if parts[2] in names), None)
    assert tier is not None, f"{module}: analysis part in no tier; add it to ANALYSIS_TIERS and docs/architecture.md"
    return tier


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("ckptstat.analysis.")))
def test_analysis_parts_point_down(module):
    mine = _analysis_tier(module)
    assert mine is not None
    for target, line, _ in imports(module, type_checking=True):
        theirs = _analysis_tier(target)
        assert theirs is None or theirs <= mine, (
            f"{module}:{line} imports {target}, an analysis part above it ({ANALYSIS_TIERS[theirs]} > {ANALYSIS_TIERS[mine]})")


FRAMEWORK = "ckptstat.families.framework"


def _is_family_module(module: str) -> bool:
    """A model family's module: it defines the FAMILY record the registry lists."""
    tree = ast.parse(open(MODULES[module], encoding="utf-8").read())
    return any(isinstance(n, (ast.Assign, ast.AnnAssign)) and "FAMILY" in ast.unparse(n).split("=")[0].split()
               for n in tree.body)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(FRAMEWORK)))
def test_family_framework_names_no_family(module):
    """The family framework (families/framework/: the records, config access, op template, layout, the pieces
    several families share, the views over the registry) never imports a model family's module: it reaches
    the families through the registry (ckptstat.families) only, so a family is added without touching it."""
    for target, line, _ in imports(module, type_checking=True):
        if target in MODULES and target.startswith("ckptstat.families.") and _is_family_module(target):
            raise AssertionError(f"{module}:{line} imports the family module {target}; use the registry")


_CHECKPOINT_FIELDS = {"tensors", "config", "config_path", "metadata", "files", "readers", "dropped", "adapter"}


def _assigned_checkpoint_fields(module: str) -> list[str]:
    """`ckpt.tensors = ...`, `ckpt.tensors[k] = ...`, `del ckpt.config[k]`, `ckpt.tensors.pop(...)`: a Checkpoint
    (a name holding `ckpt` or `checkpoint`) changed in place."""
    tree = ast.parse(open(MODULES[module], encoding="utf-8").read())

    def field_of(node: ast.AST) -> str | None:
        while isinstance(node, ast.Subscript):
            node = node.value
        if (isinstance(node, ast.Attribute) and node.attr in _CHECKPOINT_FIELDS and isinstance(node.value, ast.Name)
                and ("ckpt" in node.value.id or "checkpoint" in node.value.id)):
            return f"{node.value.id}.{node.attr}"
        return None

    out = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("update", "pop", "clear", "setdefault", "popitem")):
            targets = [node.func.value]
        out += [f"line {node.lineno}: {f}" for f in map(field_of, targets) if f]
    return out


@pytest.mark.parametrize("module", sorted(m for m in MODULES if (m + ".x").split(".")[1] not in ("core", "formats")))
def test_checkpoints_are_not_changed_above_the_readers(module):
    """Checkpoint.derived computes each derived table once per key: sound because a Checkpoint's tensors and
    config are fixed once open_checkpoint returns. The readers (formats/) build them; anything above makes a new
    Checkpoint (dataclasses.replace) for a changed view."""
    changed = _assigned_checkpoint_fields(module)
    assert not changed, f"{module} changes a Checkpoint in place: {changed}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_size(module):
    with open(MODULES[module], encoding="utf-8") as f:
        n = sum(1 for _ in f)
    assert n <= MAX_LINES, f"{module} has {n} lines (at most {MAX_LINES}): split it"


def test_header_only_commands_import_no_heavy_library():
    """`ckptstat PATH` on a safetensors file reads headers: torch, h5py, matplotlib and transformers
    stay unimported; so do numpy and pydantic (typer's coercion), deferred by issue 22 (the quick path,
    tests/test_quick_path.py, also keeps typer and rich out)."""
    fixture = os.path.join(os.path.dirname(__file__), "..", "fixtures", "bert-tiny", "model.safetensors")
    code = ("import sys; from ckptstat.cli import main; main(['--json', " + repr(fixture) + "]); "
            "print(sorted(m for m in ('torch', 'h5py', 'matplotlib', 'transformers', 'tensorflow', 'numpy', 'pydantic')"
            " if m in sys.modules),"
            " file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "[]"


# The only modules that may import dask (issue 23): the `--scheduler` paths, imported on that path only.
DASK_MODULES = {"ckptstat.analysis.audit.cluster", "ckptstat.analysis.stats.cluster", "ckptstat.analysis.trend.cluster"}


def test_dask_only_on_the_scheduler_path():
    """dask and distributed are imported by DASK_MODULES alone, and never at their module level;
    nothing else imports those modules at module level (tests/test_audit.py runs `audit` without
    --scheduler and checks sys.modules)."""
    for module, path in MODULES.items():
        tree = ast.parse(open(path, encoding="utf-8").read())
        top = set(ast.iter_child_nodes(tree))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n.split(".")[0] in ("dask", "distributed") for n in names):
                assert module in DASK_MODULES and node not in top, f"{module}:{node.lineno} imports dask"
        for target, line, at_top in imports(module):
            assert not (at_top and target in DASK_MODULES) or module in DASK_MODULES, (
                f"{module}:{line} imports {target} at module level: dask would load without --scheduler")


def test_fixtures_folder_is_never_on_sys_path():
    """Tests load fixtures/ writer scripts by path (conftest.fixture_script): on sys.path, its folders (onnx/, torch/,
    flax/, gguf/, numpy/) would import as namespace packages and let importorskip pass without the library. Every
    test module has been imported by now (collection), so any that put it there would show."""
    fixtures = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "fixtures"))
    assert fixtures not in {os.path.realpath(p) for p in sys.path if p}
