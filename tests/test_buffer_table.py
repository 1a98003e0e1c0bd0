"""Buffers and parameters as each transformers class registers them (families/buffer_table.py, written by
fixtures/make_buffer_table.py): the census's role of every saved name equals the model object's, a persistent
buffer never counted as a parameter nor a parameter as a buffer.

The walk builds the classes of the tie table (families/tie_table.json: every model class transformers exports
that builds) on the meta device, as the generator does, and gives the census their saved names, dtypes and
shapes with a config.json naming the class (a header is all the census reads). By default it walks one class of
each model_type the buffer table lists and every 60th class (some 12 seconds); CKPTSTAT_FULL_WALK=1 walks them all
(about 3 minutes of CPU). tests/test_real_saves_wide.py, test_real_saves_class_ties.py and test_buffers_v5.py check real files.
"""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from conftest import fixture_script  # noqa: E402

construct = fixture_script("make_tie_table").construct   # before make_buffer_table, which imports it by name
entry, saved_roles = fixture_script("make_buffer_table").entry, fixture_script("make_buffer_table").saved_roles

from ckptstat.census.counts import placements  # noqa: E402
from ckptstat.core import Checkpoint, TensorInfo  # noqa: E402
from ckptstat.families import buffer_table, tie_table  # noqa: E402


def _json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return dict(json.load(f))


def _walked() -> list[str]:
    """Every class the tie table built (CKPTSTAT_FULL_WALK), else one class of each model_type the buffer table
    lists (the shortest name: its base model, the lightest) and every 60th class."""
    built = _json(tie_table._PATH)["classes"]
    if os.environ.get("CKPTSTAT_FULL_WALK"):
        return sorted(built)
    listed = {built[c]["model_type"]: c for c in sorted(buffer_table._table(), key=lambda c: (-len(c), c))}
    return sorted(set(listed.values()) | set(sorted(built)[::60]))


def test_table_is_fresh():
    """Written by the installed transformers, over the classes the tie table built: an upgrade (or a new class)
    fails here until `python fixtures/make_buffer_table.py` is run again."""
    table, ties = _json(buffer_table._PATH), _json(tie_table._PATH)
    assert table["transformers"] == T.__version__ == ties["transformers"]
    assert table["walked"] == len(ties["classes"])
    assert set(table["classes"]) | set(table["not_built"]) <= set(ties["classes"])


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cls", ["SamModel", "Sam2Model", "SamHQModel", "EncodecModel", "HYV3ForCausalLM",
                                 "AfmoeForCausalLM", "RTDetrForObjectDetection", "LlamaForCausalLM"])
def test_table_is_what_transformers_registers(cls):
    """The committed entry is what the installed transformers and today's name rules give (a name rule changed
    without regenerating the table fails here)."""
    assert entry(cls) == dict(buffer_table._table().get(cls, {}))


def _checkpoint(model, cls: str) -> tuple[Checkpoint, dict[str, str]]:
    roles = saved_roles(model)
    tensors = {n: TensorInfo(n, dtype, shape, "model.safetensors", None, 0, storage=n) for n, (_, dtype, shape) in roles.items()}
    config = {"architectures": [cls], "model_type": model.config.model_type}
    return Checkpoint(path="x", format="safetensors", tensors=tensors, files=("x",), config=config), \
        {n: role for n, (role, _, _) in roles.items()}


@pytest.mark.filterwarnings("ignore")
def test_walk_no_buffer_is_a_parameter():
    """Every walked class: each saved name's role in the census is the model's (parameter or buffer)."""
    T.logging.set_verbosity_error()
    wrong: dict[str, list[str]] = {}
    for cls in _walked():
        model_cls = getattr(T, cls, None)
        try:
            _, model = construct(model_cls.config_class, model_cls, True, device="meta")
        except Exception:   # noqa: BLE001 - a class that builds only on CPU, or not at all: the tables say why
            continue
        ckpt, real = _checkpoint(model, cls)
        got = placements(ckpt)
        bad = [f"{n}: {got[n].role} (model: {role})" for n, role in real.items() if got[n].role != role]
        if bad:
            wrong[cls] = bad
    assert not wrong, json.dumps(wrong, indent=1)[:4000]
