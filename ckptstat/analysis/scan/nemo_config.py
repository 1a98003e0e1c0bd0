"""What building a NeMo model from its `model_config.yaml` imports and calls, found without importing anything
(docs/torch.md, "NeMo archives"; analysis/scan/nemo.py reads the archive).

NeMo's restore_from (nemo/core/connectors/save_restore_connector.py `SaveRestoreConnector.load_config_and_state_dict`)
loads the YAML with OmegaConf.load and hands it (its `model` section when it has one) to the model class's
`from_config_dict` (nemo/core/classes/common.py `Serialization.from_config_dict`), which resolves every interpolation
(`OmegaConf.to_container(resolve=True)`), renames Hydra 0.x's `cls` to `_target_` and lifts `params` into its parent
(nemo/utils/model_utils.py `maybe_update_config_version`), then:

- a node with `_target_` goes to hydra.utils.instantiate (wrapped in `safe_instantiate` since NeMo 2.3.2, whose
  prefix allowlist `ALLOWED_TARGET_PREFIXES` refuses other modules; NeMo 2.3.1 and earlier call hydra directly).
  Hydra imports the dotted path (`_locate`: its first part with importlib.import_module, the rest as attributes or
  submodules) and calls what it finds with the node's other keys (and `_args_`), every nested node with a `_target_`
  instantiated first; `_partial_: true` wraps the call in functools.partial, the import still happens;
- else a node with `target` goes to `import_class_by_path` (model_utils.py: `__import__` of all but its last part),
  which no NeMo release checks against the allowlist: the class is imported and called with `cfg=` (and `trainer=`).

The models then instantiate their sub-configs the same way (`from_config_dict`, or hydra.utils.instantiate directly:
nemo/core/classes/modelPT.py optimizers, nemo/core/optim/lr_scheduler.py, several collections' losses), so every
`_target_`, `cls` and `target` anywhere in the file is judged as one the loading imports and calls:

- a Python standard-library module or builtins (`os.system`, `subprocess.Popen`, `builtins.exec`), or one of torch's
  loaders of code and pickles (`CODE_LOADERS`): a finding (unsafe);
- a module of NeMo's own packages or of the libraries NeMo's configs name (`KNOWN`: NeMo's allowlist, and
  torchmetrics and nemo_text_processing, which NeMo's example configs instantiate): nothing;
- any other module: suspicious (unknown): importing it runs that package's code; scan names it, the user decides.

An interpolation (`${...}`) is resolved before anything is instantiated: a target computed by one, and a resolver that
builds nodes (`oc.decode`, `oc.create`) or that scan does not know (a process may register any, `eval` included),
make the verdict unknown; plain node references and OmegaConf's, NeMo's and Hydra's own resolvers do not.
"""
from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass, field

from .yaml_lite import Entry, Unreadable, entries

TARGET_KEYS = ("_target_", "cls", "target")
# nemo/core/classes/common.py ALLOWED_TARGET_PREFIXES (NeMo 2.4), less `tests.collections.` (a test package any
# environment may hold), and the packages NeMo's own example configs name beyond it (examples/**/conf/*.yaml:
# torchmetrics' audio metrics, nemo_text_processing's normalizer); pytorch_lightning.* is lightning.pytorch.* under
# the name NeMo 1.x used.
KNOWN = ("nemo.collections.", "nemo.core.", "nemo.utils.", "nemo.lightning.", "torch.nn.", "torch.optim.",
         "torch.utils.data.", "lightning.pytorch.callbacks.", "lightning.pytorch.loggers.", "lightning.pytorch.strategies.",
         "lightning.pytorch.accelerators.", "pytorch_lightning.callbacks.", "pytorch_lightning.loggers.",
         "pytorch_lightning.strategies.", "pytorch_lightning.accelerators.", "omegaconf.", "megatron.", "torchmetrics.",
         "nemo_text_processing.")
# torch's functions that unpickle, compile or load code from a path their arguments name (torch/serialization.py, hub.py,
# jit, utils/cpp_extension.py, package, export; ops/classes.load_library): called by a target, they run what they load.
CODE_LOADERS = ("torch.load", "torch.serialization.load", "torch.hub.", "torch.jit.load", "torch.utils.cpp_extension.",
                "torch.package.", "torch.export.load", "torch.ops.load_library", "torch.classes.load_library")
# Resolvers that only read the config or the environment: OmegaConf's (omegaconf/resolvers/oc), NeMo's
# (nemo/core/classes/modelPT.py, nemo/core/config/hydra_runner.py) and Hydra's.
PLAIN_RESOLVERS = frozenset({"oc.env", "oc.select", "oc.deprecated", "oc.dict.keys", "oc.dict.values", "multiply", "sum",
                             "gpu_name", "now", "hydra"})
_NODE_REF = re.compile(r"\$\{\s*\.*[A-Za-z0-9_\-.\[\] ]*\}")
_RESOLVER = re.compile(r"\$\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*:")
KEPT = 1000         # targets and unknowns kept of each kind (and distinct imports); the rest only counted


@dataclass(frozen=True)
class Target:
    line: int
    where: str        # the key's dotted path
    key: str
    name: str         # what is imported
    why: str


@dataclass
class ConfigVerdict:
    """What loading the config imports: `unsafe` and `suspicious` targets, `unknown` (what scan cannot read or
    tell), `imports` (every target named, and how often), `notes`."""
    unsafe: list[Target] = field(default_factory=list)
    suspicious: list[Target] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    imports: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    dropped: int = 0      # past KEPT

    def keep(self, items: list[Target] | list[str], item: Target | str) -> None:
        if len(items) < KEPT:
            items.append(item)  # type: ignore[arg-type]
        else:
            self.dropped += 1


def _standard(module: str) -> bool:
    return module in ("builtins", "__builtin__") or module in sys.stdlib_module_names


def classify(key: str, name: str) -> tuple[str, str] | None:
    """("unsafe" | "suspicious", why) for a target naming `name` under `key`, or None when nothing is imported (a `target`
    of one part: import_class_by_path imports its empty module name and fails) or it is of NeMo's known packages."""
    parts = name.split(".")
    if key == "target" and len(parts) < 2 or not name or "" in parts:
        return None       # import_class_by_path / hydra's _locate raise before importing anything
    how = ("NeMo's import_class_by_path imports it and calls it with cfg= (no NeMo release checks `target`)"
           if key == "target" else
           "hydra.utils.instantiate imports it and calls it with the node's other keys (NeMo 2.3.2+ refuses it in "
           "from_config_dict, but not where a model instantiates a sub-config with hydra directly)")
    if any(name == p or name.startswith(p if p.endswith(".") else p + ".") for p in CODE_LOADERS):
        return "unsafe", f"{how}: torch loads and runs the code or pickle its arguments name"
    if _standard(parts[0]):
        return "unsafe", f"{how}: a Python standard-library module (or builtins), never a model part"
    if name.startswith(KNOWN):
        return None
    return "suspicious", f"a module outside NeMo and the libraries its configs use: {how}; its package's code runs on import"


def _interpolations(text: str) -> str | None:
    """Why an interpolation in `text` may build or compute what scan cannot see, or None."""
    at = text.find("${")
    while at >= 0:
        if not _NODE_REF.match(text, at):
            m = _RESOLVER.match(text, at)
            if m is None:
                return f"an interpolation scan cannot read ({text[at:at + 40]!r})"
            if m.group(1) not in PLAIN_RESOLVERS:
                return (f"the resolver {m.group(1)!r}, which " + ("builds config nodes (a _target_ among them) when "
                        "from_config_dict resolves the config" if m.group(1) in ("oc.decode", "oc.create") else
                        "scan does not know (a loading process may register any, eval included)"))
        at = text.find("${", at + 2)
    return None


def judge_config(text: str, record: str) -> ConfigVerdict:
    """The targets and interpolations of the YAML `text` (the archive member `record`); see the module doc."""
    v = ConfigVerdict()
    try:
        for e in entries(text):
            _entry(v, e, record)
    except Unreadable as u:
        v.unknown.append(f"{record} line {u.line}: {u.why}: scan reads only the YAML OmegaConf.save writes, and "
                         "cannot tell what PyYAML reads there")
    except RecursionError:   # (never seen: the reader holds no recursion)
        v.unknown.append(f"{record}: nested too deep to read")
    return v


def _entry(v: ConfigVerdict, e: Entry, record: str) -> None:
    if e.style in ("plain", "single", "double", "block") and "${" in e.text:
        why = _interpolations(e.text)
        if why is not None:
            v.keep(v.unknown, f"{record} line {e.line}: {e.where}: {why}")
        if e.key in TARGET_KEYS:
            v.keep(v.unknown, f"{record} line {e.line}: {e.where}: a target computed by interpolation "
                              f"({e.text[:60]!r}), which from_config_dict resolves before importing it")
            return
    if e.key not in TARGET_KEYS or not e.is_string:
        return            # a non-string target (a mapping, a number, null): hydra raises, import_class_by_path imports nothing
    if not e.exact:
        style = {"plain": "plain scalar folded over lines", "single": "single-quoted scalar over lines",
                 "double": "double-quoted scalar with escapes or over lines", "block": "block scalar"}[e.style]
        v.keep(v.unknown, f"{record} line {e.line}: {e.where}: a {style}, which scan does not read exactly")
        return
    found = classify(e.key, e.text)
    if (e.key != "target" or "." in e.text) and (e.text in v.imports or len(v.imports) < KEPT):
        v.imports[e.text] += 1
    if found is None:
        return
    kind, why = found
    v.keep(v.unsafe if kind == "unsafe" else v.suspicious, Target(e.line, e.where[:200], e.key, e.text[:200], why))
