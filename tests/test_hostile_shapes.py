"""A file that carries a family's tensor names with shapes its model never has (a hostile or foreign file, no
config.json): reading the architecture from those shapes is a one-line refusal (CkptstatError) or an answer, never
another exception. The names come from the real classes transformers 5 builds (their task heads' modules, which the
shape look-ups read without a config); each head tensor in turn takes a shape of another rank, or none."""
from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from census_audit import tiny_config  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

from ckptstat import CkptstatError, open_checkpoint, summarize  # noqa: E402
from ckptstat.census.model import load  # noqa: E402

# task heads whose look-ups read shapes from names alone (families/wav2vec2.py's x-vector TDNN layers crashed here)
CLASSES = ("Wav2Vec2ForXVector", "Wav2Vec2ForSequenceClassification", "GteForSequenceClassification",
           "XLNetForSequenceClassification", "ModernBertForMultipleChoice", "T5ForQuestionAnswering")
BODIES = ("wav2vec2.", "new.", "transformer.", "model.", "shared.", "encoder.", "decoder.")
SHAPES = ((), (0,), (3,), (2, 2, 2))


def _names(cls_name: str) -> dict[str, tuple[int, ...]]:
    cls = getattr(T, cls_name)
    with torch.device("meta"):
        model = cls._from_config(tiny_config(cls.config_class))
    return {n: tuple(p.shape) for n, p in model.state_dict().items()}


@pytest.mark.parametrize("cls_name", CLASSES)
def test_a_head_of_another_shape_is_refused_in_one_line(cls_name, tmp_path):
    shapes = _names(cls_name)
    heads = [n for n in shapes if not n.startswith(BODIES)]
    assert heads, "the class has a head beside its body"
    for name in heads:
        for bad in SHAPES:
            folder = tmp_path / f"{name}-{len(bad)}-{sum(bad)}"
            folder.mkdir()
            tensors = {n: np.zeros(bad if n == name else s, np.float16) for n, s in shapes.items()}
            save_file(tensors, os.fspath(folder / "model.safetensors"))
            summarize(open_checkpoint(os.fspath(folder)))   # the summary reports what it cannot model
            try:
                load(os.fspath(folder))
            except CkptstatError:
                pass
