"""Oracle figures kept: what torch and transformers computed for a test (a FlopCounterMode total, the bytes a cache
holds, the names a model saves), recorded by the libraries themselves into tests/oracles/<test module>.json with the
versions that computed them, so the suite reads them back instead of running the same forwards on every run.

A figure is one `Kind` (its name and the code that computes it) applied to a key (what it is computed from: the
sample's config, the model class, the sequence length...). The stored key is a digest of the kind's name, of the
source of the code it names, and of the key: a change to that code, or to the sample, is a figure not on record,
computed live. Modes, by the environment variable CKPTSTAT_ORACLES:

* unset: a figure is read from the table where the table was written by the installed releases of every library it
  names (`written_by`) and holds its key; else it is computed live. One figure in SPOT_CHECK is computed live as well
  and must equal the table's.
* `live`: every figure computed; no table read.
* `record`: every figure computed, and kept: each test process writes what it computed under tests/oracles/.record/;
  `python scripts/record_oracles.py` runs the modules that use figures and merges what they computed into their tables.

The table says how it was made; what the suite read, computed live for want of a record, and spot-checked is counted
in pytest's summary (a figure missing from the table is slow, never wrong: re-record)."""
from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.abspath(__file__))
TABLES = os.path.join(ROOT, "oracles")
RECORDS = os.path.join(TABLES, ".record")
LIBRARIES = ("torch", "transformers")
SPOT_CHECK = 16   # one figure in 16 (by its digest) is computed live beside the table's
MODE = os.environ.get("CKPTSTAT_ORACLES", "")

counts: Counter = Counter()   # read / live / missing / checked, reported by conftest
_tables: dict[str, dict[str, Any]] = {}
_recorded: dict[str, dict[str, Any]] = {}


def installed() -> dict[str, str]:
    """The installed release of each library the figures come from (a local build tag such as +cpu dropped)."""
    return {lib: importlib.metadata.version(lib).split("+")[0] for lib in LIBRARIES}


def _table(module: str) -> dict[str, Any]:
    """The module's figures, where its table was written by the installed releases; else none."""
    if module not in _tables:
        figures: dict[str, Any] = {}
        path = os.path.join(TABLES, module + ".json")
        if MODE == "" and os.path.exists(path):
            with open(path) as f:
                table = json.load(f)
            if table["written_by"] == installed():
                figures = table["figures"]
        _tables[module] = figures
    return _tables[module]


class Kind:
    """One kind of figure of a test module: computed by the functions in `code` (the oracle, and what of ckptstat's or
    the tests' it passes through: functions, classes or modules), whose source is part of every key."""

    def __init__(self, module: str, name: str, *code: Any):
        self.module, self.name = module, name
        self.code = hashlib.sha1("".join(inspect.getsource(x) for x in code).encode()).hexdigest()

    def digest(self, key: Any) -> str:
        """The figure's name in the table: the kind, its code and the key."""
        return hashlib.sha1(json.dumps([self.name, self.code, key], sort_keys=True, default=repr).encode()).hexdigest()[:20]

    def __call__(self, key: Any, compute: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """compute(*args, **kwargs), or its figure on record for `key` (JSON-able: what the figure is computed from).
        An argument given as Later (a model) is built only when a figure is computed."""
        digest = self.digest(key)
        table = _table(self.module)
        if digest in table:
            if int(digest, 16) % SPOT_CHECK:
                counts["read"] += 1
                return table[digest]
            live = _jsonable(compute(*_built(args), **kwargs))
            assert live == table[digest], (f"{self.module} {self.name} {key}: the table says {table[digest]}, "
                                           f"{installed()} computes {live}: record it again (scripts/record_oracles.py)")
            counts["checked"] += 1
            return live
        counts["missing" if MODE == "" else "live"] += 1
        value = _jsonable(compute(*_built(args), **kwargs))
        if MODE == "record":
            _recorded.setdefault(self.module, {})[digest] = value
        return value


class Later:
    """build(*args), made once, when a figure needs it: what a figure read never builds."""

    def __init__(self, build: Callable[..., Any], *args: Any):
        self.build, self.args, self.made = build, args, None

    def get(self) -> Any:
        if self.made is None:
            self.made = self.build(*self.args)
        return self.made


def _built(args: tuple) -> list:
    return [a.get() if isinstance(a, Later) else a for a in args]


def _jsonable(value: Any) -> Any:
    """The figure as the table holds it (tuples as lists), so a live figure compares equal to a read one."""
    return json.loads(json.dumps(value))


def write_records(worker: str) -> None:
    """Record mode, at the end of a test process: what it computed, one file per module."""
    if MODE != "record" or not _recorded:
        return
    os.makedirs(RECORDS, exist_ok=True)
    for module, figures in _recorded.items():
        with open(os.path.join(RECORDS, f"{module}.{worker}.json"), "w") as f:
            json.dump(figures, f)
