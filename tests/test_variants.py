"""A family's own switches and sizes are a typed record (archspec.Variant, issue #33), never string keys: every
sample's spec carries a frozen Variant dataclass or none, the family's op template reads it back by its class, and
asking for another family's class is an error rather than a silent 0."""
from __future__ import annotations

import dataclasses

import pytest

T = pytest.importorskip("transformers")

from ckptstat.families import FAMILIES  # noqa: E402
from ckptstat.families.framework.archspec import ArchSpec, Variant  # noqa: E402
from ckptstat.families.framework.layout_base import Segments  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402
from ckptstat.families.wav2vec2 import FeatureEncoder  # noqa: E402

SPECS = [(f.name, s.config, s.kwargs, m) for f in FAMILIES for s in f.samples for m in s.models]


def _spec(config: str, kwargs: dict, model: str) -> ArchSpec:
    return from_config(dict(getattr(T, config)(**kwargs).to_dict(), architectures=[model]))


def test_archspec_has_no_untyped_bag():
    names = {f.name for f in dataclasses.fields(ArchSpec)}
    assert "extra" not in names and "variant" in names


@pytest.mark.parametrize("family,config,kwargs,model", SPECS, ids=[f"{x[0]}-{x[3]}" for x in SPECS])
def test_variants_are_frozen_dataclasses(family, config, kwargs, model):
    v = _spec(config, kwargs, model).variant
    if v is None:
        return
    assert isinstance(v, Variant) and dataclasses.is_dataclass(v)
    field = dataclasses.fields(v)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(v, field, 0)


def test_another_familys_variant_is_an_error():
    sample = next(f for f in FAMILIES if f.name == "wav2vec2").samples[0]
    spec = _spec(sample.config, sample.kwargs, sample.models[0])
    assert spec.variant_as(FeatureEncoder).conv_dims == tuple(getattr(T, sample.config)(**sample.kwargs).conv_dim)
    with pytest.raises(TypeError, match="FeatureEncoder, not Segments"):
        spec.variant_as(Segments)
