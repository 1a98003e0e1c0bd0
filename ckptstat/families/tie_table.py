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
MAX_LAYERS = 100_000   # a templated rule's numbers read from config.json: more is not a model, no tie is named
# wrappers whose decoder is AutoModelForCausalLM.from_config(config.decoder): its class ties what they tie
COMPOSITES = frozenset({"encoder-decoder", "vision-encoder-decoder", "speech-encoder-decoder"})


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


def _setting(cfg: Mapping[str, Any], rules: Mapping[str, Any], key: str) -> Any:
    """A config value a rule reads: config.json's, else the config class's default the table records."""
    return cfg.get(key, rules.get("defaults", {}).get(key))


def layer_ids(cfg: Mapping[str, Any], rules: Mapping[str, Any], over: Mapping[str, Any]) -> list[int]:
    """The numbers a templated rule runs over: `{"range": key}`, 0 .. the config's value - 1 (Grounding DINO's
    `decoder_layers`); `{"where": [key, value]}`, the positions of `value` in the config's list (Zamba's hybrid
    layers in `layers_block_type`)."""
    if "range" in over:
        n = _setting(cfg, rules, over["range"])   # from a file: bounded before a list is made of it
        return list(range(n)) if isinstance(n, int) and not isinstance(n, bool) and n <= MAX_LAYERS else []
    key, value = over["where"]
    kinds = _setting(cfg, rules, key)
    return [i for i, k in enumerate(kinds) if k == value] if isinstance(kinds, list) and len(kinds) <= MAX_LAYERS else []


def rule_pairs(rules: Mapping[str, Any], cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(target module, source module) of each rule this config holds, as the class builds its `_tied_weights_keys`
    (fixtures/make_tie_table.py `class_rules`): a rule with `if` only where the config has those values (Grounding
    DINO drops `bbox_embed.(?![0])\\d+` without `decoder_bbox_embed_share`); a rule with `ids` once per number k
    from `period` on: `{id}` the k-th number, `{src}` the (k mod period)-th (Zamba 2's hybrid layers cycling over
    `num_mem_blocks` shared blocks; Zamba's and Grounding DINO's `x.(?!N\\.)\\d+` -> `x.N`: period 1)."""
    pairs: list[tuple[str, str]] = []
    for r in rules["rules"]:
        if any(_setting(cfg, rules, k) != v for k, v in r.get("if", {}).items()):
            continue
        if "ids" not in r:
            pairs.append((r["target"], r["source"]))
            continue
        ids = layer_ids(cfg, rules, r["ids"])
        period = r.get("period", 1)
        period = _setting(cfg, rules, period) if isinstance(period, str) else period
        if not isinstance(period, int) or isinstance(period, bool) or period < 1:
            continue
        pairs += [(r["target"].format(id=ids[k]), r["source"].format(src=ids[k % period])) for k in range(period, len(ids))]
    return pairs


def rule_groups(rules: Mapping[str, Any], cfg: Mapping[str, Any], names: Collection[str]) -> set[frozenset[str]]:
    """The tie groups the class's rules make in a model holding the file's `names`, as transformers 5's
    `get_expanded_tied_weights_keys` expands them over the model's parameters: each name under a rule's source
    module is one tensor with the same name under its target. save_pretrained drops the targets, so the model's
    names are the file's grown through the rules (Grounding DINO's `bbox_embed.1` from
    `bbox_embed.0`, then `model.decoder.bbox_embed.1` from it). Only groups holding a name of the file."""
    targets: dict[str, list[str]] = {}
    for t, s in rule_pairs(rules, cfg):
        if not (t + ".").startswith(s + ".") and not (s + ".").startswith(t + "."):   # a module in itself never ends
            targets.setdefault(s, []).append(t)
    parent: dict[str, str] = {}

    def root(n: str) -> str:
        while parent.get(n, n) != n:
            n = parent[n] = parent.get(parent[n], parent[n])
        return n

    todo, seen = list(names), set(names)
    while todo:   # each name of the model: the file's, then each copy a rule makes of one (a target's names)
        n = todo.pop()
        for cut in [i for i, c in enumerate(n) if c == "."]:
            for t in targets.get(n[:cut], ()):
                copy = t + n[cut:]
                parent[root(copy)] = root(n)
                if copy not in seen:
                    seen.add(copy)
                    todo.append(copy)
    groups: dict[str, set[str]] = {}
    for n in list(parent):
        groups.setdefault(root(n), {root(n)}).add(n)
    return {frozenset(g) for g in groups.values() if len(g) > 1 and g & set(names)}


def class_ties(cfg: Mapping[str, Any] | None, names: Collection[str] = ()) -> ClassTies | None:
    """The tie groups of the first `architectures` class the table knows, with only the groups this config
    switches on, layered patterns instantiated on the file's `names`; None when config.json names no such class
    (a class the table lists with no groups ties nothing the table could record)."""
    if not cfg:
        return None
    table = _table()
    for cls in architectures(cfg):
        entry = table.get(cls)
        if isinstance(entry, Mapping) and entry.get("model_type") in COMPOSITES:
            return _composite(cls, cfg, names)
        if isinstance(entry, Mapping):
            # the class built from another model type's config writes that type's key layout (ShieldGemma 2)
            entry = {**entry, **entry.get("by_model_type", {}).get(cfg.get("model_type"), {})}
            on = tie_switch(cfg, entry.get("switch"), entry.get("default", True), entry.get("default_sub", True))
            groups: list[tuple[str, ...]] = []
            for g in entry.get("groups", ()):
                if g["when"] == "always" or on:
                    found = instantiate(g["names"], names) if g.get("layered") else [g["names"]]
                    groups += sorted(tuple(sorted(x)) for x in found)
            # the class's own _tied_weights_keys, expanded while its PreTrainedModels' (the top) config ties
            if "rules" in entry and _value(cfg, entry.get("default", True)):
                groups += sorted(tuple(sorted(g)) for g in rule_groups(entry["rules"], cfg, names))
            return ClassTies(cls, tuple(groups), on, any(g["when"] == "config" for g in entry.get("groups", ())))
    return None


def _composite(cls: str, cfg: Mapping[str, Any], names: Collection[str]) -> ClassTies | None:
    """An EncoderDecoderModel's (Vision-, Speech-) ties: its decoder's, the causal LM class the table lists for
    config.json's `decoder.model_type` (a `*ForCausalLM`, else a `*LMHeadModel`: the class AutoModelForCausalLM builds,
    GPT2LMHeadModel for a TrOCR-style GPT-2 decoder) under its own switch, its names under `decoder.` (the table's
    rows for the wrappers were built with their default BERT decoder)."""
    sub = cfg.get("decoder")
    mt = sub.get("model_type") if isinstance(sub, Mapping) else None
    spelled = re.sub(r"[^a-z0-9]", "", mt.lower()) if isinstance(mt, str) else None

    def of_type(c: str, e: Any) -> bool:   # recorded under mt, or named after it (GPT2LMHeadModel is recorded as gpt-sw3's)
        named = re.sub(r"(ForCausalLM|LMHeadModel)$", "", c).lower()
        return isinstance(e, Mapping) and (e.get("model_type") == mt or named == spelled)

    lms = sorted((not c.endswith("ForCausalLM"), c) for c, e in _table().items()
                 if c.endswith(("ForCausalLM", "LMHeadModel")) and of_type(c, e))
    own = class_ties({**sub, "architectures": [lms[0][1]]}, [n[len("decoder."):] for n in names if n.startswith("decoder.")]) \
        if lms and isinstance(sub, Mapping) else None
    if own is None:
        return None
    return ClassTies(cls, tuple(tuple("decoder." + n for n in g) for g in own.groups), own.switch, own.switched)
