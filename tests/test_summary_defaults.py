"""The sequence summary (families/framework/summary.py) of a config.json that leaves every summary_* key out: each
family's fallback is what transformers builds, for every class that holds a SequenceSummary (XLM's, FlauBERT's and
XLNet's sequence classifier, ELECTRA's and RoFormer's multiple choice, GPT-2's and OpenAI GPT's double heads):

* the activation is the config class's default (`XxxConfig().summary_activation`; RoFormerConfig declares none: the
  modeling file's getattr fallback), and the built summary module's activation is that one (nn.Identity for none);
* the summary type and the projection's width are the built module's."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from test_families import meta_model  # noqa: E402
from transformers.activations import get_activation  # noqa: E402

from ckptstat.families import FAMILIES  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402
from ckptstat.families.framework.summary import SequenceSummary  # noqa: E402

CLASSES = ["XLMForSequenceClassification", "FlaubertForSequenceClassification", "XLNetForSequenceClassification",
           "ElectraForMultipleChoice", "RoFormerForMultipleChoice", "GPT2DoubleHeadsModel", "OpenAIGPTDoubleHeadsModel"]


def _sample(name: str):
    """The first registry Sample that builds `name` and sets no summary_* key."""
    return next(s for f in FAMILIES for s in f.samples
                if name in s.models and not any(k.startswith("summary_") for k in s.kwargs))


@pytest.mark.parametrize("name", CLASSES)
def test_summary_left_out_of_the_config_is_what_transformers_builds(name):
    sample = _sample(name)
    config_cls = getattr(T, sample.config)
    spec = from_config({"model_type": config_cls.model_type, "architectures": [name], **sample.kwargs})
    sm = getattr(spec.variant, "summary", spec.variant)
    assert isinstance(sm, SequenceSummary)
    # the config class's default, as the modeling file reads it (getattr(config, "summary_activation", None))
    assert sm.activation == (getattr(config_cls(), "summary_activation", None) or None)
    model = meta_model(getattr(T, name), config_cls(**sample.kwargs))
    mod = next(m for m in model.modules() if type(m).__name__.endswith("SequenceSummary"))
    assert sm.kind == mod.summary_type
    assert type(mod.activation) is (type(get_activation(sm.activation)) if sm.activation else torch.nn.Identity)
    assert sm.outputs == (mod.summary.out_features if isinstance(mod.summary, torch.nn.Linear) else 0)
