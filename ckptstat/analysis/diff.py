"""`ckptstat diff A B`: where two checkpoints' parameter counts part, module by module."""
from __future__ import annotations

from ..census import placements
from ..census.ties import find_ties
from ..core import Checkpoint
from ..naming import strip_prefixes

DIFF_SCHEMA = "ckptstat.diff/1"
COMPARED = ("unique parameters per module, base-model prefixes ignored; names and counts compared, "
            "not dtypes nor values")


def _by_module(ckpt: Checkpoint) -> dict[str, dict]:
    place = placements(ckpt)
    alias_of = {t.alias: t for t in find_ties(ckpt)}
    out: dict[str, dict] = {}
    for t in ckpt:
        if place[t.name].role != "parameter":
            continue
        module = strip_prefixes(t.name, base_models=True).rpartition(".")[0] or "(root)"
        row = out.setdefault(module, {"params": 0, "tied": []})
        tie = alias_of.get(t.name)
        if tie is None:
            row["params"] += t.numel
        else:
            row["tied"].append(f"{t.name} = {tie.target}")
    for tie in alias_of.values():  # names absent because tied: the module exists, at no cost
        if tie.alias not in ckpt.tensors:
            module = strip_prefixes(tie.alias, base_models=True).rpartition(".")[0] or "(root)"
            out.setdefault(module, {"params": 0, "tied": []})["tied"].append(f"{tie.alias} = {tie.target}")
    return out


def diff(a: Checkpoint, b: Checkpoint) -> dict:
    """Unique parameters per module of two checkpoints (base-model prefixes such as `bert.` ignored),
    itemising where their totals part: modules only in one, and modules whose counts differ.
    `same` is true when no row differs (what `ckptstat diff` turns into exit status 0)."""
    ma, mb = _by_module(a), _by_module(b)
    rows = []
    for module in sorted(set(ma) | set(mb)):
        pa, pb = ma.get(module, {}).get("params"), mb.get(module, {}).get("params")
        tied = ma.get(module, {}).get("tied", []) + mb.get(module, {}).get("tied", [])
        if pa != pb or tied and (module not in ma or module not in mb):
            rows.append({"module": module, "a": pa, "b": pb, "delta": (pb or 0) - (pa or 0), "tied": tied})
    ta = sum(r["params"] for r in ma.values())
    tb = sum(r["params"] for r in mb.values())
    return {"schema": DIFF_SCHEMA, "a": a.path, "b": b.path, "a_format": a.format, "b_format": b.format,
            "a_params": ta, "b_params": tb, "delta": tb - ta, "compared": COMPARED,
            "same": not rows and ta == tb, "rows": rows}
