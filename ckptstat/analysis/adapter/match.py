"""Module names matched against the name lists and patterns of an adapter_config.json, as peft matches
them, in time linear in the names (docs/adapters.md, docs/security.md).

peft matches a target entry `n` when the module is `n` or ends with `.n` (tuners_utils.py
`check_target_module_exists`), a modules_to_save entry when the module's name ends with it at all (other.py
`_set_trainable`: `key.endswith(target_key)`, so `head` wraps `lm_head`), and a
rank_pattern / alpha_pattern key with `re.match(rf"(.*\\.)?({key})$", module)`, the first key in the
config's order winning (peft/utils/other.py `get_pattern_key`). Both lists come from the file: looping
over every entry for every module costs entries x modules (a 16 MB config against a 100 MB header:
~10^12 comparisons), and a pattern's backtracking grows as a power of the module name's length.

- Plain entries go into a trie of their `.`-separated parts, walked from a module's last part: "is
  `n` or ends with `.n`" is exactly "n's parts end module's parts", and a lookup costs the module's
  parts, whatever the number of entries.
- modules_to_save entries go into a trie of their characters, reversed: "ends with `n`" is a walk back from
  the name's end, as long as the longest entry at most; the walks over one report are bounded (MAX_WORK).
- Pattern keys (a regex character other than `.`, which peft's real keys use as a separator) are tried
  in order with peft's regex, except keys with two quantifiers or more or longer than MAX_KEY (backtracking
  a power of the name's length: `" * * * *"`, `"(a+)+"`), and names longer than MAX_NAME (a 200,000-dot
  name took 28 s against `.*x`): those compare as plain names. The regex work over one report is
  bounded (MAX_WORK, counted as the squared lengths of the names tried): past it, one error line.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ...errors import CorruptCheckpointError

_QUANTIFIER = re.compile(r"[*+{]|(?<!\()\?")
_REGEX = re.compile(r"[\\^$*+?{}\[\]|()]")
MAX_KEY = 200
MAX_NAME = 512
MAX_WORK = 1 << 30


class _Node:
    __slots__ = ("children", "name")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.name: str | None = None   # the entry whose last part ends here


class Names:
    """Plain names (targets, modules_to_save, the plain keys of a pattern): the first in list order that
    the module is, or ends with after a `.`."""

    def __init__(self, names: Iterable[str]):
        self.root = _Node()
        self.order: dict[str, int] = {}
        for i, n in enumerate(names):
            if n in self.order:
                continue
            self.order[n] = i
            node = self.root
            for part in reversed(n.split(".")):
                node = node.children.setdefault(part, _Node())
            node.name = n

    def match(self, module: str) -> str | None:
        best: str | None = None
        node: _Node | None = self.root
        for part in reversed(module.split(".")):
            node = node.children.get(part) if node is not None else None
            if node is None:
                break
            if node.name is not None and (best is None or self.order[node.name] < self.order[best]):
                best = node.name
        return best


class Patterns:
    """rank_pattern / alpha_pattern keys: `match(module)` is peft's get_pattern_key (None: no key)."""

    def __init__(self, keys: Iterable[str], config: str | None):
        self.config = config or "adapter_config.json"
        keys = list(dict.fromkeys(keys))
        self.order = {k: i for i, k in enumerate(keys)}
        self.regex = [k for k in keys if _REGEX.search(k) and len(k) <= MAX_KEY and len(_QUANTIFIER.findall(k)) <= 1]
        regex = set(self.regex)
        self.plain = Names(k for k in keys if k not in regex)
        self.work = 0

    def match(self, module: str) -> str | None:
        best = self.plain.match(module)
        if len(module) > MAX_NAME:
            return best
        limit = self.order[best] if best is not None else len(self.order)
        for key in self.regex:
            if self.order[key] >= limit:
                break
            self.work += (len(module) + 1) ** 2
            if self.work > MAX_WORK:
                raise CorruptCheckpointError(self.config, f"matching its {len(self.regex):,} rank/alpha pattern keys "
                                                          "against the adapter's modules takes more regex work than "
                                                          "ckptstat does (a crafted config or names)")
            try:
                if re.match(rf"(.*\.)?({key})$", module):
                    return key
            except re.error:
                continue
        return best


class Endings:
    """modules_to_save entries: `match(name)` is the entry the name ends with (peft's `key.endswith(entry)`),
    None when none does."""

    def __init__(self, names: Iterable[str]):
        self.root: dict[str, Any] = {}
        for n in names:
            node = self.root
            for ch in reversed(n):
                node = node.setdefault(ch, {})
            node[""] = n    # an entry ends here ("" is no character)
        self.work = 0

    def match(self, name: str, end: int | None = None) -> str | None:
        """The entry `name[:end]` ends with."""
        node = self.root
        if "" in node:
            return str(node[""])
        for i in reversed(range(len(name) if end is None else end)):
            nxt = node.get(name[i])
            if not isinstance(nxt, dict):
                return None
            node = nxt
            self.work += 1
            if self.work > MAX_WORK:
                raise CorruptCheckpointError("adapter_config.json", "matching its modules_to_save entries against "
                                                                    "the adapter's tensor names takes more work than "
                                                                    "ckptstat does (a crafted config or names)")
            if "" in node:
                return str(node[""])
        return None
