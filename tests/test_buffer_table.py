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


def _deepseek_v4_kinds() -> dict[str, set[str]]:
    from transformers.models.deepseek_v4 import configuration_deepseek_v4 as c

    return {"layer_types": set(c.DEEPSEEK_V4_LAYER_TYPES), "mlp_layer_types": set(c.DEEPSEEK_V4_MLP_LAYER_TYPES)}


# classes whose layers come in kinds, some holding buffers of their own: the generator's tiny config (census_audit's
# SHAPED) builds every kind. DeepSeek-V4: hash-routed MoE (tid2eid) and score-routed (the router's bias, saved as
# ffn.gate.bias); Step 3.7: dense layers and sparse ones (moe.router_bias)
LAYER_KINDS = {"DeepseekV4ForCausalLM": _deepseek_v4_kinds, "DeepseekV4Model": _deepseek_v4_kinds,
               "Step3p7ForConditionalGeneration": lambda: {"mlp_layer_types": {"dense", "sparse"}},
               "Step3p7Model": lambda: {"mlp_layer_types": {"dense", "sparse"}}}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cls", sorted(LAYER_KINDS))
def test_every_layer_kind_as_save_pretrained_writes_it(cls, tmp_path):
    """The generator's tiny model has every layer kind; the file save_pretrained writes, read by the census with its
    config.json: each name's role is the model's (a persistent buffer where named_buffers has it, else a parameter),
    the router biases among the buffers, and the unique parameter count num_parameters()."""
    from ckptstat import open_checkpoint, summarize

    T.logging.set_verbosity_error()
    model_cls = getattr(T, cls)
    cfg, model = construct(model_cls.config_class, model_cls, True, device="cpu")
    text = cfg.get_text_config(decoder=True)
    assert {k: set(getattr(text, k)) for k in LAYER_KINDS[cls]()} == LAYER_KINDS[cls]()
    buffers = {n for n, (role, _, _) in saved_roles(model).items() if role == "buffer"}   # named_buffers' saved names
    assert any(n.endswith(("gate.bias", "router_bias")) for n in buffers)
    model.save_pretrained(tmp_path)
    ckpt = open_checkpoint(str(tmp_path))
    got = {n: p.role for n, p in placements(ckpt).items()}   # every other name: a parameter (experts split on save)
    assert got == {n: "buffer" if n in buffers else "parameter" for n in got} and buffers <= set(got)
    assert summarize(ckpt)["parameters"]["unique"] == model.num_parameters()
