"""Config defaults come from transformers' config classes (families/config_defaults.json, written by
fixtures/make_config_defaults.py), not from numbers re-typed in the families: the table is what the installed
transformers gives, and no family states a default for a key that the table contradicts."""
from __future__ import annotations

import json
from typing import Any

import pytest

T = pytest.importorskip("transformers")

from conftest import fixture_script  # noqa: E402

_make_config_defaults = fixture_script("make_config_defaults")
OUT = _make_config_defaults.OUT
table = _make_config_defaults.table

from ckptstat.families import FAMILIES, generic  # noqa: E402
from ckptstat.families.framework import base as fbase  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402


def test_table_is_what_the_installed_transformers_gives():
    with open(OUT, encoding="utf-8") as f:
        saved = json.load(f)
    assert saved["defaults"] == json.loads(json.dumps(table())), f"regenerate (written by transformers {saved['transformers']})"


def test_not_null_table_is_what_the_installed_transformers_gives():
    """config_not_null.json: the keys each config class's type validators refuse null for (Cfg.get's error), and not
    Llama 4's attention_chunk_size, which Llama4TextConfig takes null (no chunked layers)."""
    with open(_make_config_defaults.OUT_NOT_NULL, encoding="utf-8") as f:
        saved = json.load(f)
    assert saved["not_null"] == table(_make_config_defaults.not_null_of), \
        f"regenerate (written by transformers {saved['transformers']})"
    assert "attention_chunk_size" not in saved["not_null"]["llama4_text"]
    T.Llama4TextConfig(attention_chunk_size=None)
    for key in saved["not_null"]["llama4_text"][:3]:
        with pytest.raises(Exception, match=key):
            T.Llama4TextConfig(**{key: None})


def _minimal(sample) -> dict[str, Any]:
    """config.json with only what the sample sets: every other key is left to its default."""
    cls = getattr(T, sample.config)
    return {"model_type": cls.model_type, "architectures": [sample.models[-1]], **sample.kwargs}


@pytest.mark.parametrize("family", [f.name for f in FAMILIES + (generic.FAMILY,)])
def test_no_family_states_a_default_the_config_class_contradicts(family, monkeypatch):
    f = next(x for x in FAMILIES + (generic.FAMILY,) if x.name == family)
    stated: list[str] = []
    real = fbase.Cfg.get

    def get(self, *keys, default=KeyError):
        present = real(self, *keys, default=None)
        theirs = next((v for v in (fbase.class_default(self.model_type, k) for k in keys) if v is not None), None)
        if present is None and default is not KeyError and default is not None and theirs is not None and default != theirs:
            stated.append(f"{self.model_type}.{keys[0]}: the family says {default!r}, the config class {theirs!r}")
        return real(self, *keys, default=default)

    monkeypatch.setattr(fbase.Cfg, "get", get)
    for sample in f.samples:
        if not hasattr(T, sample.config):
            continue
        from_config(_minimal(sample))
    assert not stated, "\n".join(sorted(set(stated)))


def test_list_defaults_a_family_states_are_the_config_class():
    """config_defaults.json keeps scalars; a list default a family needs is stated once in it and checked here."""
    from ckptstat.families import bert, recurrent_gemma
    assert list(recurrent_gemma.BLOCK_TYPES) == list(T.RecurrentGemmaConfig().block_types)
    assert list(bert.XMOD_LANGUAGES) == list(T.XmodConfig().languages)
