"""`ckptstat scan` of a Hugging Face folder's JSON configs (docs/security.md): the chat templates they carry
(analysis/scan/chat_templates.py) and the repository code they make transformers run.

`auto_map` (config.json, tokenizer_config.json, the processor configs) names classes by `module.Class`, or
`org/repo--module.Class` for another repository's. With `trust_remote_code=True`, transformers' dynamic module
loader (transformers/dynamic_module_utils.py `get_class_from_dynamic_module`, `get_cached_module_file`) copies that
module file, and the files it imports relatively, into its modules cache and imports it: the file's Python runs.
Without the flag transformers refuses to. scan does not vet Python: each module is `unknown`, named with the class
that loads it, whether the folder holds its file, and which repository it comes from.

sentence-transformers' `modules.json` names each module's class by `type`; one outside its own package is imported
the same way (`st_modules`), and is `unknown` alike.

diffusers' `model_index.json` names each component `[library, class]`, and the pipeline `_class_name`; a component
whose folder holds `<library>.py`, and a `_class_name` `[module, class]` with `<module>.py` beside it, are the
repository's own Python, which DiffusionPipeline.from_pretrained imports under trust_remote_code=True
(pipelines/pipeline_loading_utils.py `get_class_obj_and_candidates`, `_resolve_custom_pipeline_and_cls`;
diffusers 0.42.1): `unknown` alike (`diffusers_code`).

Three more ways in, each measured with the library itself (docs/security.md, thirteenth pass): a config.json's
`custom_pipelines` (`{task: {"impl": "module.Class"}}`), which transformers' `pipeline(model=folder,
trust_remote_code=True)` imports (pipelines/__init__.py: get_class_from_dynamic_module of `impl`); diffusers'
`modular_config.json`, whose `auto_map` ModularPipelineBlocks.from_pretrained (and ModularPipeline.from_pretrained)
imports under trust_remote_code=True (modular_pipelines/modular_pipeline.py); and a model folder's
`custom_generate/generate.py`, which transformers' `from_pretrained(..., trust_remote_code=True)` of a generative
model imports with no config naming it (generation/utils.py `load_custom_generate`): each `unknown` alike.
"""
from __future__ import annotations

import json
import os
import re
from typing import IO, Any

from ...core import files
from ...core.urls import file_name, is_url
from ...formats.keras_hub import is_keras_config
from .chat_templates import HF_RENDERERS, config_templates, template_report
from .jinja import SHOWN
from .keras import keras_report

# KerasHub presets' Keras object configs (keras_hub/src/utils/preset_utils.py: the backbone's config.json, task.json, and
# the tokenizer's, preprocessor's and converters'), which from_preset rebuilds with keras.saving.deserialize_keras_object
KERAS_HUB_CONFIGS = frozenset({"config.json", "task.json", "tokenizer.json", "preprocessor.json", "audio_converter.json",
                               "image_converter.json", "video_converter.json"})
KERAS_HUB_LOADER = "keras_hub's from_preset (keras.saving.deserialize_keras_object)"
KERAS_HUB_METADATA = "metadata.json"   # beside every preset's configs (save_to_preset)
HF_CONFIGS = frozenset({"config.json", "tokenizer_config.json", "chat_template.json", "processor_config.json",
                        "preprocessor_config.json", "video_preprocessor_config.json", "feature_extractor_config.json",
                        "image_processor_config.json", "modules.json", "model_index.json", "modular_config.json"})
CONFIGS = HF_CONFIGS | KERAS_HUB_CONFIGS
CONFIG_BYTES = 64 << 20    # a tokenizer_config.json with a large added-token table: tens of MiB
# `module.Class` or `org/repo--module.Class` (get_class_from_dynamic_module: the repository before `--`).
CLASS_REF = re.compile(r"\A(?:(?P<repo>[^\s]+?)--)?(?P<module>[\w.]+)\.(?P<cls>\w+)\Z")
ST_MODULES = "modules.json"   # sentence-transformers' modules: [{"idx", "name", "path", "type": "module.Class"}]
ST_CODE = ("sentence-transformers imports the module classes its modules.json names (a local folder's own file with no "
           "trust_remote_code before 6.1); scan does not vet Python")
DIFFUSERS_INDEX = "model_index.json"
DIFFUSERS_CODE = ("diffusers imports a pipeline's or component's own Python file when it loads with trust_remote_code=True "
                  "(pipeline_loading_utils.get_class_obj_and_candidates); scan does not vet Python")
REMOTE_CODE = ("transformers imports the repository's Python when it loads with trust_remote_code=True "
               "(dynamic_module_utils.get_class_from_dynamic_module); scan does not vet Python")
DIFFUSERS_MODULAR = "modular_config.json"   # diffusers' modular pipeline blocks: {"auto_map": {base: "module.Class"}}
MODULAR_CODE = ("diffusers imports the module a modular_config.json's auto_map names when ModularPipelineBlocks (or "
                "ModularPipeline).from_pretrained loads with trust_remote_code=True; scan does not vet Python")
CUSTOM_GENERATE = "custom_generate/generate.py"
GENERATE_CODE = ("transformers imports a model folder's custom_generate/generate.py when a generative model loads with "
                 "trust_remote_code=True (GenerationMixin.load_custom_generate), whatever config.json says; scan does "
                 "not vet Python")


def is_config_file(path: str) -> bool:
    return file_name(path) in CONFIGS


def remote_code(config: dict[str, Any], folder: str | None, importer: str = "transformers") -> list[str]:
    """What `auto_map` makes transformers (or diffusers, `importer`) import, and what `custom_pipelines` makes
    transformers' pipeline() import: one line a module (the classes that load it); `folder`, the local folder the
    config is in (None for a URL: whether the file is there is not looked up)."""
    auto = config.get("auto_map")
    refs: list[tuple[str, object]] = []
    if isinstance(auto, dict):
        refs = [(str(auto_class), ref) for auto_class, value in auto.items()
                for ref in (value if isinstance(value, (list, tuple)) else [value])]
    out = _modules("auto_map", refs, folder, f"with trust_remote_code=True {importer} imports it")
    tasks = config.get("custom_pipelines")
    if isinstance(tasks, dict):   # {task: {"impl": "module.Class", "pt": [...], ...}} (pipelines/__init__.py)
        refs = [(f"task {str(task)[:80]}", spec.get("impl") if isinstance(spec, dict) else spec)
                for task, spec in tasks.items()]
        out += _modules("custom_pipelines", refs, folder,
                        "with trust_remote_code=True transformers' pipeline() imports it")
    return out


def _modules(key: str, refs: list[tuple[str, object]], folder: str | None, runs: str) -> list[str]:
    """One line a module the (who, `module.Class`) `refs` of a config's `key` name, with whether `folder` holds it."""
    modules: dict[tuple[str | None, str], list[str]] = {}
    out = []
    for who, ref in refs:
        if ref is None:
            continue
        m = CLASS_REF.match(ref) if isinstance(ref, str) else None
        if m is None:
            out.append(f"{key}: {who[:80]} = {ref!r:.80}, not a class reference scan can read")
            continue
        modules.setdefault((m.group("repo"), m.group("module")), []).append(f"{who} -> {m.group('cls')}")
    for (repo, module), users in list(modules.items())[:SHOWN]:
        file = module.replace(".", "/") + ".py"
        where = (f"from the repository {repo}" if repo else
                 "in this folder" if folder is not None and os.path.isfile(os.path.join(folder, file)) else
                 "not in this folder (the Hub repository's)" if folder is not None else "beside this config")
        out.append(f"{key}: {file} ({', '.join(users[:4])}), {where}: {runs} and its Python runs")
    if len(modules) > SHOWN:
        out.append(f"{key}: {len(modules) - SHOWN:,} more modules")
    return out


def is_generate_file(path: str) -> bool:
    """A model folder's `custom_generate/generate.py` (a URL's too)."""
    return path.replace(os.sep, "/").endswith("/" + CUSTOM_GENERATE) or path == CUSTOM_GENERATE


def judge_generate(path: str) -> dict[str, Any]:
    """The scan report of a `custom_generate/generate.py`: `unknown`, the Python transformers imports named."""
    return template_report(path, "Hugging Face custom_generate module", {}, GENERATE_CODE, "", [
        f"{CUSTOM_GENERATE}: with trust_remote_code=True transformers' from_pretrained of a generative model in this "
        "folder imports it and its Python runs"], [f"{CUSTOM_GENERATE} is Python"])


def st_modules(modules: list[Any], folder: str | None) -> list[str]:
    """What a sentence-transformers `modules.json` makes it import: one line a `type` outside its own package. Before
    6.1 (5.1.0, measured) a local folder's `module.Class` is loaded from `module.py` in the folder with no
    trust_remote_code (SentenceTransformer `_load_module_class_from_ref`: get_class_from_dynamic_module when the path
    exists), and any other name imported from the loading machine's path; 6.1+ asks trust_remote_code=True first."""
    out = []
    refs = [m.get("type") for m in modules if isinstance(m, dict)]
    foreign = [r for r in refs if isinstance(r, str) and not r.startswith("sentence_transformers.")]
    for ref in foreign[:SHOWN]:
        m = CLASS_REF.match(ref)
        if m is None:
            out.append(f"modules.json: {ref!r:.80}, not a class reference scan can read")
            continue
        file = m.group("module").replace(".", "/") + ".py"
        where = (f"from the repository {m.group('repo')}" if m.group("repo") else f"{file} in this folder"
                 if folder is not None and os.path.isfile(os.path.join(folder, file)) else
                 f"{file} beside this config, else a module of the loading machine")
        out.append(f"modules.json: {ref!r:.80}, {where}: sentence-transformers imports it and its Python runs")
    if len(foreign) > SHOWN:
        out.append(f"modules.json: {len(foreign) - SHOWN:,} more modules")
    return out


def diffusers_code(index: dict[str, Any], folder: str | None) -> list[str]:
    """What a diffusers `model_index.json` makes DiffusionPipeline.from_pretrained import from the repository: one line
    a component whose folder holds `<library>.py`, and the pipeline's `[module, class]` with `<module>.py` beside the
    index; `folder` None (a URL): the pipeline's `[module, class]` said, the file not looked up, components not judged
    (whether a component's folder holds the file would take a listing: docs/security.md, known gaps)."""
    def here(file: str) -> bool:
        return folder is None or os.path.isfile(os.path.join(folder, file))

    out = []
    pipeline = index.get("_class_name")
    if isinstance(pipeline, (list, tuple)) and pipeline and isinstance(pipeline[0], str) and here(f"{pipeline[0]}.py"):
        out.append(f"{DIFFUSERS_INDEX}: _class_name {list(pipeline)!r:.80}, {pipeline[0]}.py "
                   f"{'beside this index' if folder is None else 'in this folder'}: diffusers imports it and its Python runs")
    for component, ref in index.items():
        if component.startswith("_") or not isinstance(ref, (list, tuple)) or not ref or not isinstance(ref[0], str):
            continue
        file = f"{component}/{ref[0]}.py"
        if folder is None or os.sep in ref[0] or "/" in ref[0] or not here(file):   # (a URL's: a known gap)
            continue
        out.append(f"{DIFFUSERS_INDEX}: {component} = {list(ref)!r:.80}, {file} in this folder: diffusers imports it "
                   "and its Python runs")
    return out[:SHOWN] + ([f"{DIFFUSERS_INDEX}: {len(out) - SHOWN:,} more modules"] if len(out) > SHOWN else [])


def judge_config(path: str, f: IO[bytes], size: int) -> dict[str, Any] | None:
    """The scan report of a Hugging Face JSON config's chat templates and remote code; None when it carries neither, or
    is not a JSON object (not a file scan looks at: torch.load's verdict stands, if any)."""
    name = file_name(path)
    if name in KERAS_HUB_CONFIGS - HF_CONFIGS and not files.exists(files.join(files.dirname(path), KERAS_HUB_METADATA)):
        return None   # (a transformers folder's tokenizer.json, tens of MB, is no Keras config: read only in a preset)
    if size > CONFIG_BYTES:   # unknown, never an error: a folder scan would not list the file (transformers reads it)
        return template_report(path, f"Hugging Face {name}", {}, HF_RENDERERS, "", [
            f"{name} is {size:,} bytes; scan reads at most {CONFIG_BYTES:,} (its chat templates and auto_map unread)"])
    f.seek(0)
    try:
        config = json.loads(f.read(size))
    except (ValueError, RecursionError):
        return None
    folder = None if is_url(path) else os.path.dirname(os.path.abspath(path))
    if name in KERAS_HUB_CONFIGS and is_keras_config(config):   # a KerasHub preset's: Keras' rules (scan/keras.py)
        keras = keras_report(path, f"KerasHub {name}", [(name, config)], KERAS_HUB_LOADER)
        return keras if keras["status"] != "safe" else None
    if name == ST_MODULES and isinstance(config, list):
        found: dict[str, str | int] = {}
        code, loader = st_modules(config, folder), ST_CODE
    elif name == DIFFUSERS_INDEX and isinstance(config, dict):
        found, code, loader = {}, diffusers_code(config, folder), DIFFUSERS_CODE
    elif name == DIFFUSERS_MODULAR and isinstance(config, dict):
        found, code, loader = {}, remote_code(config, folder, "diffusers"), MODULAR_CODE
    elif isinstance(config, dict):
        found, code, loader = config_templates(path, config), remote_code(config, folder), REMOTE_CODE
    else:
        return None
    if not found and not code:
        return None
    loaders = "; ".join(([HF_RENDERERS] if found else []) + ([loader] if code else []))
    return template_report(path, f"Hugging Face {name}", found, loaders, "", code,
                           [f"{' and '.join(dict.fromkeys(c.split(':', 1)[0] for c in code))} names {len(code)} "
                            "module(s) of Python"] if code else [])
