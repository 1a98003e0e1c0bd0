"""KerasHub preset folders (keras_hub `save_to_preset`, keras_hub/src/utils/preset_utils.py; docs/keras_hub.md).

A preset holds `config.json`, the backbone's Keras object config (`{"module", "class_name": "GemmaBackbone",
"config": {...}, "registered_name": "keras_hub>GemmaBackbone"}`, not a transformers config); `metadata.json`
(`keras_version`, `keras_hub_version`, `parameter_count`: the backbone's `count_params()`, and the `tasks` it
serves); the backbone's weights, `model.weights.h5`, or Keras' sharded `model.weights.json` where the backbone is
over `max_shard_size` (10 GB by default); and for a task preset `task.json` (the task's config, its backbone nested)
with `task.weights.h5`, the weights the task adds to its backbone (a classifier's head: `Task.save_task_weights`
leaves the backbone's out). Tokenizer and preprocessor files and `assets/` hold no weights.

The folder is read as `keras_hub.models.Task.from_preset` loads it (the backbone's weights, then the task's): the
backbone's tensors under their HDF5 names, the task's under `task/` (both name their first Dense
`layers/dense/vars/0`). The config is kept as metadata (`keras.class_name`...) and read as the transformers config
keras_hub converted it from where its importers cover the class (keras_hub_configs.json, written from them by
fixtures/make_keras_hub_configs.py); metadata.json's parameter_count is checked against the backbone's variables.
"""
from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable
from typing import Any

from ..core import Checkpoint, files, urls
from ..core.files import check_inside
from ..core.limits import limits
from ..errors import CheckpointError, reading
from .configs import read_json
from .registry import _FOLDER_HOOKS
from .registry import _open_file as open_weights
from .training import merge_under

CONFIG, METADATA, TASK_CONFIG = "config.json", "metadata.json", "task.json"
BACKBONE_WEIGHTS = ("model.weights.h5", "model.weights.json")   # in the order KerasHub's loader tries them
TASK_WEIGHTS = "task.weights.h5"
TASK_PREFIX = "task/"
TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "keras_hub_configs.json")


def is_keras_config(cfg: object) -> bool:
    """A Keras object config (`keras.saving.serialize_keras_object`: class_name and config, with module or
    registered_name), which no transformers config is (those are flat and name model_type)."""
    return (isinstance(cfg, dict) and isinstance(cfg.get("class_name"), str) and isinstance(cfg.get("config"), dict)
            and ("module" in cfg or "registered_name" in cfg) and "model_type" not in cfg)


def _there(path: str) -> bool:
    """A file is there (a local symlink, dangling or out of the folder, too: refused where it is read)."""
    return files.isfile(path) if urls.is_url(path) else os.path.lexists(path)


def _json(ckpt: Checkpoint, path: str, what: str) -> Any:
    """An optional record of the preset (metadata.json, task.json): None, with a note, where it cannot be read."""
    if not _there(path):
        return None
    try:
        check_inside(path, what)   # (a preset's file linked out of the folder is refused, as its weights are)
        with reading(path, f"cannot read {what}"):
            return read_json(path, limits().config_bytes, what)
    except CheckpointError as e:   # the weights still answer
        ckpt.notes.append(f"{e}; ignored")
        return None


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    with open(TABLE, encoding="utf-8") as f:
        table: dict[str, Any] = json.load(f)
    return table


def transformers_config(cfg: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The transformers config a KerasHub backbone config reads as, by keras_hub's own importers
    (keras_hub_configs.json, fixtures/make_keras_hub_configs.py), and what was done; (None, why) where the table
    has no model type for the class, or its config cannot be one of them."""
    name, inner = str(cfg["class_name"])[:80], cfg["config"]
    candidates = {mt: e for mt, e in _table()["model_types"].items() if e["backbone"] == name}
    if len(candidates) > 1:   # a backbone class several model types convert to (Gemma, Gemma 2): the importer's constants
        fits = {mt: e for mt, e in candidates.items() if all(inner.get(k) == v for k, v in e["constants"].items())}
        most = max((len(e["constants"]) for e in fits.values()), default=0)
        candidates = {mt: e for mt, e in fits.items() if len(e["constants"]) == most}
    if len(candidates) != 1:
        why = "no transformers model type is known for it" if not candidates else \
            f"it fits {len(candidates)} transformers model types ({', '.join(sorted(candidates))})"
        return None, f"not a transformers config, and {why}: no architecture, FLOPs or memory model is built from it"
    (model_type, entry), = candidates.items()
    parts = [k for k, v in inner.items() if k != "dtype" and is_keras_config(v)]
    if parts:   # a sub-model the importer's transformers config has no place for (Gemma 3's vision_encoder)
        return None, (f"it holds a {parts[0][:40]} ({str(inner[parts[0]]['class_name'])[:60]}) that keras_hub's "
                      f"{model_type} importer never writes: no architecture, FLOPs or memory model is built from it")
    out: dict[str, Any] = {"model_type": model_type, "architectures": list(entry["architectures"])}
    for key, (path, relation) in entry["keys"].items():
        if key not in inner:   # (the transformers default stands)
            continue
        value = inner[key]
        if value is None:   # a feature the backbone goes without (Mistral's sliding_window): without it in transformers
            _put(out, path, None)
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (relation == 1 and (number or isinstance(value, bool)) or relation == "not" and isinstance(value, bool)
                or isinstance(relation, int) and number and isinstance(value, int) and value % relation == 0):
            return None, (f"its {key} {value!r:.40} is not what keras_hub's importer makes of a transformers "
                          f"{path}: no architecture, FLOPs or memory model is built from it")
        _put(out, path, (not value) if relation == "not" else value // relation if relation != 1 else value)
    return out, (f"read as the transformers {model_type} config keras_hub converts to it ({entry['architectures'][0]}; "
                 "formats/keras_hub_configs.json)")


def archive_config(config: object) -> tuple[dict[str, Any] | None, str | None]:
    """The transformers config of a `.keras` archive's model (formats/keras_zip.py), and a note: a KerasHub backbone,
    or a causal LM task (its head is the backbone's embedding: no weights of its own), read as transformers_config
    reads the backbone's config; (None, None) for any other model."""
    if not isinstance(config, dict) or not is_keras_config(config) or not \
            str(config.get("registered_name") or config.get("module") or "").startswith("keras_hub"):
        return None, None
    name = str(config["class_name"])[:80]
    backbone = config if name.endswith("Backbone") else config["config"].get("backbone")
    if not name.endswith(("Backbone", "CausalLM")) or not isinstance(backbone, dict) or not is_keras_config(backbone):
        return None, (f"{CONFIG} is the Keras config of a KerasHub {name}: no transformers class is known to hold "
                      "its task; no architecture, FLOPs or memory model is built from it")
    translated, how = transformers_config(backbone)
    of = f"a {name}" if backbone is config else f"a {name} (its {str(backbone['class_name'])[:80]})"
    return translated, f"{CONFIG} is the Keras config of {of}, {how}"


def _put(cfg: dict[str, Any], path: str, value: Any) -> None:
    """cfg[a][b] = value for the path `a.b` (transformers 5's `rope_parameters.rope_theta`)."""
    *parents, leaf = path.split(".")
    for p in parents:
        cfg = cfg.setdefault(p, {})
    cfg[leaf] = value


def describe(ckpt: Checkpoint, config_path: str, cfg: dict[str, Any]) -> dict[str, Any] | None:
    """Keep a Keras object config found beside weights as metadata, with the preset's metadata.json; the
    transformers config it reads as (transformers_config), else None, with a note either way (registry.open_checkpoint
    uses it as config.json). A backbone's weights file (not task.weights.h5) is checked against metadata.json's
    parameter_count."""
    folder = files.dirname(config_path)
    ckpt.metadata["keras.class_name"] = str(cfg["class_name"])[:200]
    for key in ("module", "registered_name"):
        if isinstance(cfg.get(key), str):
            ckpt.metadata[f"keras.{key}"] = cfg[key][:200]
    meta = _json(ckpt, files.join(folder, METADATA), "KerasHub metadata")
    meta = meta if isinstance(meta, dict) else {}
    for key in ("keras_version", "keras_hub_version", "parameter_count", "date_saved"):
        if isinstance(meta.get(key), (str, int)) and not isinstance(meta.get(key), bool):
            ckpt.metadata[f"keras.{key}"] = str(meta[key])[:200]
    task = _json(ckpt, files.join(folder, TASK_CONFIG), "KerasHub task config")
    if isinstance(task, dict) and is_keras_config(task):
        ckpt.metadata["keras.task_class_name"] = str(task["class_name"])[:200]
    translated, how = transformers_config(cfg)
    ckpt.notes.append(_config_note(ckpt, how))
    if translated is not None and "tie_word_embeddings" not in translated and _ties(translated["model_type"]):
        tables = [n for n in ckpt.tensors if _REVERSIBLE.search(n)]   # (KerasHub's Llama saves no tie_word_embeddings)
        if tables and all(n.endswith("/vars/0") for n in tables):
            translated["tie_word_embeddings"] = True
            ckpt.notes.append(f"{CONFIG} says nothing of tie_word_embeddings and the weights hold one embedding table "
                              "(no reverse_embeddings): read as tied (KerasHub's Llama does not save the key; keras_hub "
                              "0.32's from_preset then builds an untied embedding and cannot load these weights)")
    claimed = meta.get("parameter_count")
    if isinstance(claimed, int) and not isinstance(claimed, bool) and urls.file_name(ckpt.path) in BACKBONE_WEIGHTS:
        backbone = sum(t.numel for name, t in ckpt.tensors.items()
                       if not name.startswith((TASK_PREFIX, "optimizer/")))
        verdict = "equal to" if backbone == claimed else f"NOT equal to the {backbone:,} of"
        ckpt.notes.append(f"{METADATA}: parameter_count {claimed:,} (the backbone's count_params()), {verdict} the "
                          "backbone's variables in its weights file")
    return translated


# ReversibleEmbedding's variables: 0 the embeddings, 1 the output table an untied model keeps (reverse_embeddings)
_REVERSIBLE = re.compile(r"(^|/)reversible_embedding(_\d+)?/vars/\d+$")


def _ties(model_type: str) -> bool:
    """Whether the table reads tie_word_embeddings from a `model_type` backbone's config."""
    return any(path == "tie_word_embeddings" for path, _ in _table()["model_types"][model_type]["keys"].values())


def _config_note(ckpt: Checkpoint, how: str) -> str:
    version = ckpt.metadata.get("keras.keras_hub_version")
    library = f"KerasHub {version}" if version else "Keras"
    return f"{CONFIG} is the {library} config of a {ckpt.metadata['keras.class_name']}, {how}"


def preset_folder(names: set[str] | list[str]) -> bool:
    """Do a folder's file names make it a KerasHub preset, read as one checkpoint (open_folder; `audit`'s one unit)?
    config.json and metadata.json beside the backbone's weights, as save_to_preset writes them."""
    return CONFIG in names and METADATA in names and any(n in names for n in BACKBONE_WEIGHTS)


def open_folder(folder: str, open_file: Callable[[str], Checkpoint]) -> Checkpoint | None:
    """A KerasHub preset folder (preset_folder) as one Checkpoint (registry._FOLDER_HOOKS); None for any other folder:
    the backbone's weights, opened with the config.json beside them (registry.open_checkpoint calls describe), and the
    task's own under `task/`."""
    listing = set(files.listdir(folder))   # (a URL folder's listing: one request)
    if not preset_folder(listing):
        return None
    weights = files.join(folder, next(n for n in BACKBONE_WEIGHTS if n in listing))
    ckpt = open_file(weights)
    if TASK_WEIGHTS in listing:
        task_weights = files.join(folder, TASK_WEIGHTS)
        check_inside(task_weights, "file", folder)
        merge_under(ckpt, open_weights(task_weights), TASK_PREFIX)   # (its file alone: the config is described once)
        ckpt.notes.append(f"{TASK_WEIGHTS} (the task's own weights, its backbone's left out) read under "
                          f"`{TASK_PREFIX}`, beside the backbone's {urls.file_name(weights)}")
        if ckpt.config is not None:   # the translation is the backbone's: no transformers class holds this head
            model = ckpt.config["architectures"][0]
            ckpt.notes = [n for n in ckpt.notes if not n.startswith(f"{CONFIG} is the ")]
            ckpt.notes.insert(0, _config_note(ckpt, f"read as the transformers {model} alone: with the task's head "
                                                    f"({ckpt.metadata.get('keras.task_class_name', 'task.json')}) no "
                                                    "architecture, FLOPs or memory model is built (open "
                                                    f"{urls.file_name(weights)} for the backbone's)"))
            ckpt.config = ckpt.config_path = None
    ckpt.path = folder
    return ckpt


_FOLDER_HOOKS.append(open_folder)
