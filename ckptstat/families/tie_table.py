"""The weights each transformers model class ties, as the class itself ties them (tie_table.json, written from
transformers by fixtures/make_tie_table.py: the names of the class's parameters and buffers that are one object,
in the spelling save_pretrained writes, with whether `tie_word_embeddings` switches them). Read only when a
config.json names a class (`architectures`); transformers is never imported here. docs/ties.md, "Ties named by
the class"."""
from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .framework.base import architectures

_PATH = os.path.join(os.path.dirname(__file__), "tie_table.json")


@dataclass(frozen=True)
class ClassTies:
    cls: str                                  # the architectures class
    groups: tuple[tuple[str, ...], ...]       # the tie groups the class has under this config (each: one tensor)
    switch: bool                              # the config's tie_word_embeddings, as transformers resolves it
    switched: bool = False                    # the class has groups the switch turns on (its LM head's)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(n for g in self.groups for n in g)


@functools.cache
def _table() -> Mapping[str, Any]:
    with open(_PATH, encoding="utf-8") as f:
        classes: Mapping[str, Any] = json.load(f)["classes"]
    return classes


def _value(cfg: Any, default: bool) -> bool:
    value = cfg.get("tie_word_embeddings", default) if isinstance(cfg, Mapping) else default
    return value if isinstance(value, bool) else default


def tie_switch(cfg: Mapping[str, Any], switch: str | None, default: bool = True, default_sub: bool = True) -> bool:
    """transformers 5's switch, as each PreTrainedModel reads its own `config.tie_word_embeddings` after its config
    class's `__post_init__` (fixtures/make_tie_table.py finds which of config.json's values count): `switch` None,
    the top config's; `text_config` (or `decoder`, `generator`), the text sub-config's; `text_config|top`, either
    (LLaVA and Qwen2-VL copy one into the other); `text_config&top`, both. A value config.json omits is the config
    class's default (save_pretrained writes the field whenever it differs from it)."""
    top_on = _value(cfg, default)
    if not switch:
        return top_on
    sub_on = _value(cfg.get(switch.split("|")[0].split("&")[0]), default_sub)
    if switch.endswith("|top"):
        return top_on or sub_on
    return top_on and sub_on if switch.endswith("&top") else sub_on


@functools.cache
def _regex(name: str) -> re.Pattern[str]:
    return re.compile(r"(\d+)".join(re.escape(part) for part in name.split("#")))


def instantiate(pattern: Iterable[str], names: Collection[str]) -> set[frozenset[str]]:
    """The tie groups a layered pattern (names whose varying layer numbers are `#`, in the same order in each
    name: fixtures/make_tie_table.py `layer_patterns`) has in a file holding `names`: one group for each set of
    numbers a stored name of the pattern carries (RT-DETR's `bbox_embed.#.layers.#.weight` and
    `model.decoder.bbox_embed.#.layers.#.weight`, one group per decoder layer and MLP layer of the file)."""
    pattern = tuple(pattern)
    numbers = {m.groups() for p in pattern for n in names if (m := _regex(p).fullmatch(n))}
    return {frozenset(_fill(p, values) for p in pattern) for values in numbers}


def _fill(pattern: str, values: tuple[str, ...]) -> str:
    parts = pattern.split("#")
    return parts[0] + "".join(v + rest for v, rest in zip(values, parts[1:]))


def class_ties(cfg: Mapping[str, Any] | None, names: Collection[str] = ()) -> ClassTies | None:
    """The tie groups of the first `architectures` class the table knows, with only the groups this config
    switches on, layered patterns instantiated on the file's `names`; None when config.json names no such class
    (a class the table lists with no groups ties nothing the table could record)."""
    if not cfg:
        return None
    table = _table()
    for cls in architectures(cfg):
        entry = table.get(cls)
        if isinstance(entry, Mapping):
            # the class built from another model type's config writes that type's key layout (ShieldGemma 2)
            entry = {**entry, **entry.get("by_model_type", {}).get(cfg.get("model_type"), {})}
            on = tie_switch(cfg, entry.get("switch"), entry.get("default", True), entry.get("default_sub", True))
            groups: list[tuple[str, ...]] = []
            for g in entry.get("groups", ()):
                if g["when"] == "always" or on:
                    found = instantiate(g["names"], names) if g.get("layered") else [g["names"]]
                    groups += sorted(tuple(sorted(x)) for x in found)
            return ClassTies(cls, tuple(groups), on, any(g["when"] == "config" for g in entry.get("groups", ())))
    return None
