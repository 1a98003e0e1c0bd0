"""tests/oracle_figures.py, the suite's kept oracle figures: a figure is read only from a table the installed releases
wrote, under a key that holds the code computing it; what it needs is built only when it is computed; one in
SPOT_CHECK is computed again and must agree."""
from __future__ import annotations

import glob
import json
import os
import re
import sys

import oracle_figures as F
import pytest


def source_a(x):
    return x + 1


def source_b(x):
    return x + 2


@pytest.fixture
def tables(tmp_path, monkeypatch):
    """An empty tables folder, replay mode, fresh counts."""
    monkeypatch.setattr(F, "TABLES", str(tmp_path))
    monkeypatch.setattr(F, "RECORDS", str(tmp_path / ".record"))
    monkeypatch.setattr(F, "MODE", "")
    monkeypatch.setattr(F, "_tables", {})
    monkeypatch.setattr(F, "_recorded", {})
    monkeypatch.setattr(F, "counts", type(F.counts)())
    return tmp_path


def _record(tables, monkeypatch, kind, key, value):
    """What scripts/record_oracles.py writes for one figure, computed in record mode."""
    monkeypatch.setattr(F, "MODE", "record")
    kind(key, lambda: value)
    F.write_records("main")
    figures = json.loads((tables / ".record" / "mod.main.json").read_text())
    (tables / "mod.json").write_text(json.dumps({"written_by": F.installed(), "figures": figures}))
    monkeypatch.setattr(F, "MODE", "")
    monkeypatch.setattr(F, "_tables", {})
    monkeypatch.setattr(F, "_recorded", {})
    monkeypatch.setattr(F, "counts", type(F.counts)())
    return next(iter(figures))


def _unchecked_key(kind):
    """A key whose figure the spot check leaves alone."""
    return next(k for k in range(1000) if int(kind.digest(k), 16) % F.SPOT_CHECK)


def test_a_recorded_figure_is_read_without_building_anything(tables, monkeypatch):
    kind = F.Kind("mod", "figure", source_a)
    key = _unchecked_key(kind)
    _record(tables, monkeypatch, kind, key, (3, 4))
    built = []
    model = F.Later(lambda: built.append(1) or "model")
    assert kind(key, lambda m: 0, model) == [3, 4]   # the table's, as JSON holds it
    assert built == [] and F.counts["read"] == 1


def test_a_figure_off_record_is_computed_with_what_it_needs_built_once(tables):
    kind = F.Kind("mod", "figure", source_a)
    built = []
    model = F.Later(lambda n: built.append(n) or n * 10, 4)
    assert kind(1, lambda m, k: m + k, model, 2) == 42
    assert kind(2, lambda m, k: m + k, model, 3) == 43
    assert built == [4] and F.counts["missing"] == 2


def test_the_code_is_part_of_the_key(tables, monkeypatch):
    recorded = F.Kind("mod", "figure", source_a)
    key = _unchecked_key(recorded)
    _record(tables, monkeypatch, recorded, key, 99)
    assert F.Kind("mod", "figure", source_a)(key, lambda: 0) == 99
    assert F.Kind("mod", "figure", source_b)(key, lambda: 0) == 0   # other code: off record, computed


def test_a_table_of_other_releases_is_not_read(tables, monkeypatch):
    kind = F.Kind("mod", "figure", source_a)
    key = _unchecked_key(kind)
    _record(tables, monkeypatch, kind, key, 99)
    doc = json.loads((tables / "mod.json").read_text())
    doc["written_by"] = {**doc["written_by"], "torch": "0.0.1"}
    (tables / "mod.json").write_text(json.dumps(doc))
    assert kind(key, lambda: 7) == 7


def test_the_spot_check_computes_again_and_fails_on_a_wrong_table(tables, monkeypatch):
    kind = F.Kind("mod", "figure", source_a)
    key = next(k for k in range(1000) if not int(kind.digest(k), 16) % F.SPOT_CHECK)
    _record(tables, monkeypatch, kind, key, 5)
    assert kind(key, lambda: 5) == 5 and F.counts["checked"] == 1
    with pytest.raises(AssertionError, match="record_oracles"):
        kind(key, lambda: 6)


def test_live_mode_reads_no_table(tables, monkeypatch):
    kind = F.Kind("mod", "figure", source_a)
    key = _unchecked_key(kind)
    _record(tables, monkeypatch, kind, key, 99)
    monkeypatch.setattr(F, "MODE", "live")
    assert kind(key, lambda: 1) == 1 and F.counts["live"] == 1


def test_the_record_script_runs_every_module_that_asks_for_figures():
    sys.path.insert(0, os.path.join(os.path.dirname(F.ROOT), "scripts"))
    from record_oracles import USERS

    asking = set()
    for path in glob.glob(os.path.join(F.ROOT, "test_*.py")):
        with open(path) as f:
            if re.search(r"= Kind\(|assert_saved_shapes\(", f.read()):
                asking.add("tests/" + os.path.basename(path))
    assert asking == set(USERS)
