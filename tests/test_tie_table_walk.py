"""A walk over the tie table's classes (families/tie_table.json: every model class the installed transformers
exports that builds), as issue 30 asks: "no buffer counted as a parameter, no tie missed or named on an absent
tensor, on a save of every class in the tie table". A deterministic sample, every EVERY-th class of the table in
its order (about a minute of CPU), each built tiny by tests/census_audit.py (`audit_one`: the shrunk config,
`save_pretrained`, ckptstat's parameters, buffers and tie groups against the model object's, in the names
save_pretrained writes). A class transformers cannot build tiny, or that takes longer than the budget, is skipped
with its reason; the whole walk is `python tests/census_audit.py --mappings all` (docs/ties.md, "The wide audit")."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from census_audit import _run_here, reason  # noqa: E402
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # noqa: E402

from ckptstat.families.tie_table import _PATH  # noqa: E402

EVERY = 20
BUDGET_S = 10


def _sample() -> list[tuple[str, str]]:
    with open(_PATH, encoding="utf-8") as f:
        classes = json.load(f)["classes"]
    return [(e["model_type"], cls) for i, (cls, e) in enumerate(sorted(classes.items())) if i % EVERY == 0]


@pytest.mark.filterwarnings("ignore")
def test_no_save_pretrained_save_differs_from_the_model():
    T.logging.set_verbosity_error()
    torch.set_num_threads(1)
    rows = {}
    for model_type, cls in _sample():
        try:   # transformers' lazy import outside the budget: an alarm inside an import leaves it half done
            getattr(T, cls), getattr(T, CONFIG_MAPPING_NAMES[model_type])
        except Exception as e:   # noqa: BLE001 - a backend not installed: skipped with its reason
            rows[cls] = {"status": "skipped", "why": reason(e)}
            continue
        rows[cls] = _run_here(model_type, cls, BUDGET_S)
    differ = {cls: r["mismatch"]["save_pretrained"] for cls, r in rows.items() if r.get("mismatch", {}).get("save_pretrained")}
    assert differ == {}
    built = sum(r["status"] == "built" for r in rows.values())
    assert built >= len(rows) * 3 // 4, {cls: r["why"] for cls, r in rows.items() if r["status"] != "built"}
