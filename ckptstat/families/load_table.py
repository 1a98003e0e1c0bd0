"""The parameters each transformers model class holds in another size than save_pretrained writes them
(load_table.json, written from transformers by fixtures/make_load_table.py): those it leaves out and recreates
when built (`_keys_to_ignore_on_save`: Marian's sinusoidal position tables) and those a 5.x converter writes
resized (`Inkling2UnpadVocab`: the unembedding padded to `vocab_size` rows, the model keeping
`unpadded_vocab_size`). Read only when a config.json names a class (`architectures`), as the tie table is;
transformers is never imported here. The file's own count is never changed: these are the differences between it
and `model.parameters()` of the class. docs/ties.md, "Parameters the class makes on load"."""
from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Mapping
from typing import Any

from ..core import TensorInfo
from .framework.base import architectures

_PATH = os.path.join(os.path.dirname(__file__), "load_table.json")


@functools.cache
def _table() -> Mapping[str, Any]:
    with open(_PATH, encoding="utf-8") as f:
        classes: Mapping[str, Any] = json.load(f)["classes"]
    return classes


def _value(cfg: Mapping[str, Any], key: str, default: int) -> int:
    """A config value by dotted key (`text_config.unpadded_vocab_size`); the config class's default where
    config.json omits it (save_pretrained writes only the values that differ from the defaults)."""
    node: Any = cfg
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node if isinstance(node, int) and not isinstance(node, bool) else default


def _shape(cfg: Mapping[str, Any], dims: list[Any], file: tuple[int, ...] = ()) -> tuple[int, ...]:
    return tuple(file[i] if d is None else d if isinstance(d, int) else _value(cfg, d[0], d[1])
                 for i, d in enumerate(dims))


def load_differences(cfg: Mapping[str, Any] | None, tensors: Mapping[str, TensorInfo]) -> list[dict[str, Any]]:
    """[{name, elements, why}]: what `model.parameters()` of the class config.json names holds beyond (+) or short
    of (-) the file's `tensors`, by the class's own record; [] when the class has none. Only the record's names are
    looked up (a 200k-tensor header's shapes are never gathered)."""
    if not cfg:
        return []
    table = _table()
    cls = next((c for c in architectures(cfg) if c in table), None)
    if cls is None:
        return []
    out = []
    for r in table[cls].get("recreated", ()):
        if r["name"] not in tensors:
            shape = _shape(cfg, r["shape"])
            out.append({"name": r["name"], "elements": math.prod(shape),
                        "why": f"{cls} recreates it {list(shape)} on load (_keys_to_ignore_on_save: never saved)"})
    for r in table[cls].get("resized", ()):
        if r["name"] in tensors:
            file = tensors[r["name"]].shape
            shape = _shape(cfg, r["shape"], file)
            if math.prod(shape) != math.prod(file):
                out.append({"name": r["name"], "elements": math.prod(shape) - math.prod(file),
                            "why": f"{cls} loads it as {r['model_name']} {list(shape)} (the file's {list(file)})"})
    return out
