"""core.jsontext.dumps writes what json.dumps(obj, indent=2) writes (the oracle: the standard library), on
real reports and on every JSON value hypothesis builds; values it does not own go to the standard library.
jsontext.write hands the same text over in pieces (a long list's items PIECE at a time)."""
import json
import math
import sys

import pytest
from conftest import fixture
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptstat.analysis.stats import stats
from ckptstat.analysis.summary import summarize
from ckptstat.core import jsontext
from ckptstat.core.jsontext import dumps
from ckptstat.core.table import Table
from ckptstat.formats.registry import open_checkpoint

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
values = st.recursive(scalars, lambda kids: st.lists(kids) | st.tuples(kids, kids)
                      | st.dictionaries(st.text() | st.integers() | st.floats() | st.booleans() | st.none(), kids),
                      max_leaves=40)


@given(values)
@settings(max_examples=400, deadline=None)
def test_any_json_value(v):
    assert dumps(v) == json.dumps(v, indent=2)


@pytest.mark.parametrize("ckpt", [("gpt2-tiny", "model.safetensors"), ("bert-tiny", "model.safetensors")])
def test_real_reports(ckpt):
    c = open_checkpoint(fixture(*ckpt))
    for report in (summarize(c), stats(c)):   # (stats' rows: a core.table.Table, written as the list of its rows)
        assert dumps(report) == json.dumps(report, indent=2, default=list)


def test_non_finite_and_edge_numbers():
    v = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "neg0": -0.0, "big": 10**40, "tiny": 5e-324,
         1: [1e16, 1e-5, 123456789.0], 2.5: None, None: True, False: {"e": [], "o": {}}}
    assert dumps(v) == json.dumps(v, indent=2)


class Named(str):
    pass


@pytest.mark.parametrize("v", [{"s": Named("x")}, [Named("y"), 1], {(1, 2): 3}, {"set": {1}}, [object()]])
def test_values_it_does_not_own_go_to_the_standard_library(v):
    try:
        expected: object = json.dumps(v, indent=2)
    except TypeError as e:
        with pytest.raises(TypeError, match=str(e)):
            dumps(v)
    else:
        assert dumps(v) == expected


def test_a_cycle_is_the_standard_librarys_error():
    v: list = []
    v.append(v)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps(v)


rows = st.integers(0, 4).flatmap(lambda k: st.lists(st.fixed_dictionaries(
    {**{f"k{i}%s": values for i in range(k)}, "q": st.fixed_dictionaries({"p1": scalars, "p%d": scalars})}),
    min_size=8, max_size=20))


@given(rows | st.lists(scalars | st.lists(scalars, max_size=3), min_size=8, max_size=20))
@settings(max_examples=300, deadline=None)
def test_long_lists_by_columns(v):
    """A list of at least MIN_COLUMN items is written a column at a time: dicts of the same keys (a stats report's
    rows), lists of scalars, mixed scalars."""
    assert dumps(v) == json.dumps(v, indent=2)
    assert dumps({"rows": v, "tail": [v, v]}) == json.dumps({"rows": v, "tail": [v, v]}, indent=2)


@given(rows | st.lists(scalars | st.lists(scalars, max_size=3), min_size=8, max_size=20), st.integers(1, 9))
@settings(max_examples=200, deadline=None)
def test_written_in_pieces(v, piece):
    """Pieces of any size (a piece boundary inside a list of dicts, lists or scalars) join into json's text."""
    assert _written({"rows": v, "tail": [v, "\ud800"]}, piece) == json.dumps({"rows": v, "tail": [v, "\ufffd"]},
                                                                               indent=2) + "\n"


def _written(obj: object, piece: int) -> str:
    """What jsontext.write hands over, joined, with long lists cut `piece` items at a time (hypothesis runs many
    examples in one test call: no function-scoped monkeypatch)."""
    out: list[str] = []
    saved = jsontext.PIECE
    jsontext.PIECE = piece
    try:
        jsontext.write(obj, out.append)
    finally:
        jsontext.PIECE = saved
    return "".join(out)


def test_long_lists_holding_cycles_are_the_standard_librarys_error():
    d: dict = {"a": None}
    d["a"] = d
    w: list = []
    w += [w] * 100
    for v in ([d] * 9, w):
        with pytest.raises(ValueError, match="Circular reference"):
            dumps(v)


def _deepest_stack(f, *args) -> int:
    """How many Python frames deeper than the caller's `f(*args)` went (sys.setprofile's call and return events)."""
    depth = deepest = 0

    def profile(frame, event, arg):
        nonlocal depth, deepest
        if event == "call":
            depth += 1
            deepest = max(deepest, depth)
        elif event == "return":
            depth -= 1
    sys.setprofile(profile)
    try:
        f(*args)
    except ValueError:
        pass
    finally:
        sys.setprofile(None)
    return deepest


def test_a_cycle_is_found_far_from_the_recursion_limit():
    """A cycle (or nesting past MAX_DEPTH) goes to the standard library long before the interpreter's recursion
    limit: a finalizer the collector runs at that limit fails in turn, and pytest reported five such unraisable
    RecursionErrors on a cycle's test once in CI. Short lists, long lists of dicts, of lists, a Table of them."""
    d: dict = {"a": None}
    d["a"] = d
    short: list = []
    short.append(short)
    long: list = []
    long += [long] * 9
    deep: object = 0
    for _ in range(100):   # 200 levels: past MAX_DEPTH, inside what json itself writes
        deep = {"k": [deep]}
    for v in (short, [d] * 9, long, {"rows": [d] * 9}, deep):
        assert _deepest_stack(dumps, v) < sys.getrecursionlimit() // 2
    assert dumps(deep) == json.dumps(deep, indent=2)


@given(rows, st.integers(1, 9))
@settings(max_examples=200, deadline=None)
def test_a_table_is_written_as_the_list_of_its_rows(v, piece):
    """core.table.Table (a stats report's rows held as columns, a nested table for a dict-valued key) is written
    as json writes the list of its rows, in pieces of any size."""
    keys = tuple(sorted(v[0]))   # (hypothesis draws a fixed dictionary's keys in any order: one order for all)
    v = [{k: ({"p1": r[k]["p1"], "p%d": r[k]["p%d"]} if k == "q" else r[k]) for k in keys} for r in v]
    t = Table(keys, {"q": ("p1", "p%d")})
    t.extend(v)
    assert t == v and list(t) == v and t[3] == v[3] and list(t[2:5]) == v[2:5]
    assert _written({"tensors": t, "short": t[:3]}, piece) == json.dumps({"tensors": v, "short": v[:3]}, indent=2) + "\n"
    t.add_column("flags", [[k] for k in range(len(v))])
    assert dumps(t) == json.dumps([{**r, "flags": [k]} for k, r in enumerate(v)], indent=2)


def test_array_columns_joined_with_dict_rows_read_and_write_as_the_rows():
    """Tables of numpy columns (a run of tiny tensors' rows) joined with dict rows: a column stays one array where
    every value fits it (floats and None, NaN standing for None; ints; bools), else one list (a NaN of a row's own,
    an int beyond int64, an int among floats); either way it reads, and is written, as the plain rows."""
    import numpy as np

    def run(k: int) -> Table:
        t = Table(("f", "i", "b", "q"), {"q": ("p",)})
        t.columns["q"].columns = {"p": np.arange(k) / 3}
        t.columns.update(f=np.where(np.arange(k) % 3 == 0, np.nan, np.arange(k) * 0.1), i=np.arange(k) * 7,
                         b=np.arange(k) % 2 == 0)
        return t

    def plain(k: int) -> list[dict]:   # what run(k) holds, value by value
        return [{"f": None if j % 3 == 0 else j * 0.1, "i": j * 7, "b": j % 2 == 0, "q": {"p": j / 3}} for j in range(k)]

    single = {"f": None, "i": 1, "b": False, "q": {"p": 0.5}}
    for other, arrays in ((single, True), ({**single, "f": math.nan}, False), ({**single, "i": 1 << 70}, False),
                          ({**single, "f": 3}, False)):
        t = Table(("f", "i", "b", "q"), {"q": ("p",)})
        t.extend(run(9))
        t.append(other)
        t.extend([single])
        t.extend(run(11))
        rows = plain(9) + [other, single] + plain(11)
        assert isinstance(t.columns["b"], np.ndarray) and isinstance(t.columns["q"].columns["p"], np.ndarray)
        assert isinstance(t.columns["i"], np.ndarray) == (other["i"] == 1)
        assert isinstance(t.columns["f"], np.ndarray) == (arrays or other["i"] != 1)
        assert [json.dumps(r) for r in t] == [json.dumps(r) for r in rows]   # (NaN != NaN: compared as text)
        assert json.dumps(t[9]) == json.dumps(other) and json.dumps(t[-1]) == json.dumps(rows[-1])
        for piece in (1, 4, 4096):
            assert _written({"t": t, "short": t[:3]}, piece) == json.dumps({"t": rows, "short": rows[:3]}, indent=2) + "\n"


def test_a_long_tables_text_is_made_as_it_is_handed_over(monkeypatch):
    """A long Table of writable values is written a PIECE of rows at a time when its turn comes (its text never held
    whole); one that is not (a surrogate to clean, a value json writes) is made before anything is handed over."""
    rows = [{"name": f"t{i}", "x": i / 7, "shape": [i, 2]} for i in range(50)]
    made: list[int] = []
    items = jsontext._items
    monkeypatch.setattr(jsontext, "_items", lambda col, nl: made.append(len(col)) or items(col, nl))
    monkeypatch.setattr(jsontext, "PIECE", 16)
    for odd, written, later in ((None, None, True), ("a\ud800b", "a\ufffdb", False), (Named("n"), "n", False)):
        t = Table(("name", "x", "shape"))
        t.extend([{**r, "name": odd} if odd is not None and i == 3 else r for i, r in enumerate(rows)])
        made.clear()
        out = jsontext.pieces({"tensors": t, "after": 1})
        assert bool(made) != later   # (no row's text made yet: it comes as it is handed over)
        text = "".join(out)
        assert made == [16, 16, 16, 2] or not later
        want = [{**r, "name": written} if written is not None and i == 3 else r for i, r in enumerate(rows)]
        assert text == json.dumps({"tensors": want, "after": 1}, indent=2)


def test_nested_tables_of_any_depth():
    """A nested Table joins its parent's columns at any depth, in pieces of any size."""
    rows = [{"a": i, "q": {"x": {"deep": i / 3, "s": f"n{i}"}, "y": [i]}, "z": None} for i in range(10)]
    t = Table(("a", "q", "z"), {"q": ("x", "y")})
    t.columns["q"].columns["x"] = Table(("deep", "s"))
    for r in rows:
        t.columns["a"].append(r["a"])
        t.columns["q"].columns["x"].append(r["q"]["x"])
        t.columns["q"].columns["y"].append(r["q"]["y"])
        t.columns["z"].append(None)
    assert list(t) == rows
    for piece in (1, 3, 4096):
        assert _written({"t": t, "short": t[:3]}, piece) == json.dumps({"t": rows, "short": rows[:3]}, indent=2) + "\n"


@pytest.mark.parametrize("where", ["table column", "table key", "list of dicts", "dict key", "fallback"])
def test_a_surrogate_anywhere_is_written_as_the_replacement_character(where):
    bad, good = "a\ud800b", "a\ufffdb"
    def make(s: str) -> object:
        if where == "table column":
            t = Table(("name", "n"))
            t.extend([{"name": s if i == 5 else f"t{i}", "n": i} for i in range(10)])
            return {"rows": t}
        if where == "table key":
            t = Table((s, "n"))
            t.extend([{s: i, "n": i} for i in range(10)])
            return {"rows": t}
        if where == "list of dicts":
            return [{"k": s if i == 7 else "x"} for i in range(10)]
        if where == "dict key":
            return {"meta": {s: 1}}
        return {"obj": Named(s)}   # (a str subclass: the standard library writes the report)
    assert dumps(make(bad)) == json.dumps(_plain(make(good)), indent=2)


def _plain(o: object) -> object:
    if isinstance(o, Table):
        return list(o)
    if isinstance(o, dict):
        return {k: _plain(v) for k, v in o.items()}
    return o


def test_a_backslash_u_in_a_value_is_not_a_surrogate():
    """`\\ud` in json's text can be an escaped backslash followed by `ud` (a Windows path): cleaning finds nothing."""
    v = {"path": Named("C:\\udata"), "rows": [{"p": "C:\\udata"}] * 9}
    assert dumps(v) == json.dumps(v, indent=2)
