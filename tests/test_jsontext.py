"""core.jsontext.dumps writes what json.dumps(obj, indent=2) writes (the oracle: the standard library), on
real reports and on every JSON value hypothesis builds; values it does not own go to the standard library.
jsontext.write hands the same text over in pieces (a long list's items PIECE at a time)."""
import json
import math

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
