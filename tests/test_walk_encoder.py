"""The families described once as a walk with families/framework/recorder.py's recorder (XLM / FlauBERT, XLNet, GIT,
HRM-Text, Splinter) against the library that wrote the files: for every sample and every head model, the tensors the walk
records are the names and shapes save_pretrained writes (census_audit.saved_shapes, tied names kept), and the op
template the same walk writes holds the parameters the file holds (each tied group once: saved_shapes with tied
False). No family module keeps a hand-written expected_tensors beside its walk."""
from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from census_audit import saved_shapes  # noqa: E402
from test_families import meta_model, spec_of  # noqa: E402

from ckptstat.families import get  # noqa: E402
from ckptstat.families.framework.ops import Builder  # noqa: E402

WALKED = ("xlm", "xlnet", "git", "hrm_text", "splinter", "luke", "fnet", "funnel")
CASES = [pytest.param(name, s, m, id=f"{name}-{s.config}-{i}-{m}") for name in WALKED
         for i, s in enumerate(get(name).samples) for m in s.models]


@pytest.mark.parametrize("name,sample,model_name", CASES)
def test_the_walk_records_what_save_pretrained_writes(name, sample, model_name):
    cfg = getattr(T, sample.config)(**sample.kwargs)
    cls = getattr(T, model_name)
    model, spec = meta_model(cls, cfg), spec_of(cls, cfg)
    family = get(name)
    assert family.expected_tensors is not None and family.expected_tensors(spec) == saved_shapes(model)
    # (a head whose FLOPs are refused by name, Family.flops_refused: its parameters at one token)
    seq = 1 if family.flops_refused is not None and family.flops_refused(spec) else 8
    B = Builder(spec, 1, seq, seq, 1, 1)
    family.build(B)
    assert sum(op.params for op in B.ops) == sum(math.prod(s) for s in saved_shapes(model, tied=False).values())


@pytest.mark.parametrize("name", WALKED)
def test_no_hand_written_copy_beside_the_walk(name):
    module = importlib.import_module(f"ckptstat.families.{name}")
    assert hasattr(module, "walk") and not hasattr(module, "expected_tensors")
