"""The saved tensors whose role each transformers model class decides against ckptstat's name rules
(buffer_table.json, written from transformers by fixtures/make_buffer_table.py: a persistent buffer the rules read as
a parameter, or a parameter they read as a buffer, under the name save_pretrained writes, every run of digits as
`#`). One name can be both: SamModel's `shared_image_embedding.positional_embedding` is a parameter, Sam2Model's a
buffer. Read only when a config.json names a class (`architectures`), as the tie table is; transformers is never
imported here. docs/ties.md, "Buffers named by the class"."""
from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from .framework.base import architectures

_PATH = os.path.join(os.path.dirname(__file__), "buffer_table.json")
_DIFFUSERS = os.path.join(os.path.dirname(__file__), "diffusers_buffer_table.json")   # fixtures/make_diffusers_buffer_table.py
_DIGITS = re.compile(r"\d+")


@functools.cache
def _table(path: str = _PATH) -> Mapping[str, Mapping[str, str]]:
    with open(path, encoding="utf-8") as f:
        classes: Mapping[str, Mapping[str, str]] = json.load(f)["classes"]
    return classes


def class_roles(cfg: Mapping[str, Any] | None) -> Mapping[str, str]:
    """{name, digits as `#`: role} of the first `architectures` class the table lists, or of the diffusers class a
    diffusers model's config names (`_class_name`); {} when config.json names none (the name rules are right for
    every class the tables leave out)."""
    if not cfg:
        return {}
    if "_diffusers_version" in cfg and isinstance(cls := cfg.get("_class_name"), str):
        return _table(_DIFFUSERS).get(cls, {})
    table = _table()
    return next((table[c] for c in architectures(cfg) if c in table), {})


def roles(names: list[str], cfg: Mapping[str, Any] | None) -> dict[str, str]:
    """{name: role} of the names whose role the class config.json names decides against the name rules."""
    own = class_roles(cfg)
    if not own:
        return {}
    return {n: own[k] for n in names if (k := _DIGITS.sub("#", n)) in own}
