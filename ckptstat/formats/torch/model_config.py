"""The config a transformers model pickled whole carries (`torch.save(model)`, read with --pickled-objects): the
model's `config` attribute, a PretrainedConfig object, as the config.json `save_pretrained` would have written beside
it (docs/torch.md, "Pickled models").

The pickle holds the config's `__dict__` (its fields, sub-configs as objects of their own classes) but not its
`model_type`, a class attribute: config_classes.json (written from transformers by fixtures/make_config_classes.py)
maps each configuration class's qualified name to it. `architectures` left empty (a model built by `from_config`)
becomes the model's class, as save_pretrained sets it. Private fields (`_name_or_path`, `_attn_implementation_internal`)
are left out; a torch dtype is its name, as config.json writes it. transformers is never imported.
"""
from __future__ import annotations

import functools
import json
import os
from typing import Any

from .allowlist import DTypeRef
from .pickled_objects import Instance
from .unpickler import key_text

_TABLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "config_classes.json")
MAX_DEPTH = 8   # sub-configs in sub-configs (a multimodal model's text_config); deeper is left out
_SKIP = object()


@functools.cache
def config_classes() -> dict[str, str]:
    with open(_TABLE, encoding="utf-8") as f:
        classes: dict[str, str] = json.load(f)["classes"]
    return classes


def embedded_config(obj: Any) -> tuple[str, dict[str, Any]] | None:
    """(where it lies, the config) of the first transformers model the pickle holds whole: the pickled object itself,
    or a value of its top-level dict (`{"model": model, ...}`); None if there is none."""
    candidates = [("", obj)] if isinstance(obj, Instance) else \
        [(key_text(k), v) for k, v in obj.items()] if isinstance(obj, dict) else []
    for key, model in candidates:
        cfg = model.get("config") if isinstance(model, Instance) and model.is_module() else None
        if isinstance(cfg, Instance) and cfg.shown in config_classes():
            out = _config(cfg, 0)
            if not out.get("architectures"):
                out["architectures"] = [model.shown.rsplit(".", 1)[-1]]
            return (f"{key}.config" if key else "config"), out
    return None


def _config(cfg: Instance, depth: int) -> dict[str, Any]:
    out = {}
    for k, v in cfg.items():
        if isinstance(k, str) and not k.startswith("_"):
            value = _value(v, depth + 1)
            if value is not _SKIP:
                out[k] = value
    if cfg.shown in config_classes():
        out["model_type"] = config_classes()[cfg.shown]
    return out


def _value(v: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        return _SKIP
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, DTypeRef):
        return v.name
    if isinstance(v, Instance):   # a sub-config, a quantization config object: its fields
        return _config(v, depth)
    if isinstance(v, (list, tuple)):
        return [x for x in (_value(x, depth + 1) for x in v) if x is not _SKIP]
    if isinstance(v, dict):
        return {key_text(k): x for k, x in ((k, _value(x, depth + 1)) for k, x in v.items()) if x is not _SKIP}
    return _SKIP
