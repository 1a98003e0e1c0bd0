"""The name regexes of the families that walk with layout_base.Walk (families/framework/walk_names.py), derived from
the modules the walk records: for every sample and head model, the family's signature matches the tensors its walk
derives and the names save_pretrained writes (census_audit.saved_shapes), and detection from those names alone picks
the family (tests/test_families.py runs the shape look-ups without config.json on the saved names). No such family
spells a signature by hand; the picks and regexes themselves on a few recorded modules."""
from __future__ import annotations

import importlib
import inspect
import math
import re

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from census_audit import saved_shapes  # noqa: E402

from ckptstat.core import TensorInfo  # noqa: E402
from ckptstat.families import detect, get  # noqa: E402
from ckptstat.families.framework import walk_names  # noqa: E402
from ckptstat.families.framework.layout_base import Module  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402

WALKED = ("rwkv", "recurrent_gemma", "dory", "gemma4", "gemma3n", "inkling", "inkling2")
CASES = [pytest.param(name, s, m, id=f"{name}-{i}-{m}") for name in WALKED for i, s in enumerate(get(name).samples)
         for m in s.models]


def _infos(shapes: dict[str, tuple[int, ...]]) -> dict[str, TensorInfo]:
    return {n: TensorInfo(n, "F32", s, "model.safetensors", None, 4 * math.prod(s), storage=n) for n, s in shapes.items()}


@pytest.mark.parametrize("name,sample,model_name", CASES)
def test_the_derived_signature_detects_the_family(name, sample, model_name):
    cfg = getattr(T, sample.config)(**sample.kwargs)
    with torch.device("meta"):
        model = getattr(T, model_name)._from_config(cfg)
    spec = from_config(dict(cfg.to_dict(), architectures=[model_name]))
    family = get(name)
    derived, saved = family.expected_tensors(spec), saved_shapes(model, tied=False)
    for names in (derived, saved):
        assert detect(_infos(names), None).family == (sample.detected_as or name)
        if not sample.detected_as:
            assert any(re.search(family.signature, n) for n in names)


@pytest.mark.parametrize("name", WALKED)
def test_no_signature_spelled_beside_the_walk(name):
    source = inspect.getsource(importlib.import_module(f"ckptstat.families.{name}"))
    assert 'signature=r"' not in source and "signature_without=r" not in source


_MODULES = (Module("embed_tokens", "token_embd", (("weight", (8, 4)),)),
            Module("layers.{bid}.self_attn.k_proj", "blk.{bid}.attn_k", (("weight", (4, 4)), ("bias", (4,))), (0, 1)),
            Module("layers.{bid}.cross_attn.k_proj", None, (("weight", (4, 4)),), (1,)),
            Module("layers.{bid}.self_attn.sinks", None, (("", (2,)),), (0, 1)),
            Module("layers.{bid}.altup.router_norm", None, (("weight", (4,)),), (0, 1)),
            Module("layers.{bid}.altup.modality_router", None, (("weight", (2, 4)),), (0, 1)),
            Module("lm_head", "output", (("weight", (8, 4)),), top=True))


def test_modules_are_picked_by_llama_cpp_name_or_path_suffix():
    assert walk_names.module(_MODULES, "attn_k").path == "layers.{bid}.self_attn.k_proj"
    assert walk_names.module(_MODULES, "self_attn.sinks").path == "layers.{bid}.self_attn.sinks"
    for unknown in ("attn_q", "proj", "router_nor", "k_proj"):   # k_proj: two paths end so
        with pytest.raises(ValueError):
            walk_names.module(_MODULES, unknown)


def test_signatures_end_as_the_recorded_parameters():
    rx = re.compile(walk_names.signature(_MODULES, "sinks", "attn_k"))
    assert rx.search("model.layers.3.self_attn.sinks") and rx.search("model.layers.3.self_attn.k_proj.bias")
    assert not rx.search("model.layers.3.self_attn.sinks_extra") and not rx.search("model.layers.3.self_attn.q_proj.weight")
    under = re.compile(walk_names.signature(_MODULES, "altup"))   # a container: any module under it
    assert under.search("layers.0.altup.modality_router.weight") and not under.search("layers.0.altup_proj.weight")
    with pytest.raises(ValueError):
        walk_names.signature(_MODULES, "k_proj")   # two modules, under no one container


def test_patterns_read_a_parameter_and_the_layer():
    rx = re.compile(walk_names.pattern(_MODULES, "attn_k", layer=r"(\d+)"))
    m = rx.search("model.layers.12.self_attn.k_proj.weight")
    assert m is not None and m.group(1) == "12"
    assert re.search(walk_names.pattern(_MODULES, "attn_k", "bias"), "layers.0.self_attn.k_proj.bias")
    assert re.search(walk_names.pattern(_MODULES, "sinks"), "layers.0.self_attn.sinks")
    assert not re.search(walk_names.pattern(_MODULES, "output"), "model.lm_head_x.weight")


def test_a_layout_pattern_reads_a_parameter_without_weight():
    """layout.pattern's suffix "": the module's path is the parameter's name (gpt-oss's sinks, walk_names.layout_shape)."""
    from ckptstat.families.framework import layout
    from ckptstat.families.gpt_oss import GPT_OSS
    rx = layout.pattern(GPT_OSS, "attn_sinks", "")
    assert re.search(rx, "model.layers.3.self_attn.sinks") and not re.search(rx, "model.layers.3.self_attn.sinks.weight")
