"""The image encoders described once as a walk (families/framework/walk_vision.py: ViT and DeiT, DINOv2, CLIP's and
SigLIP's towers, Swin and its copies) against the library that wrote the files: for every sample model, the tensors
the walk records are the names and shapes save_pretrained writes (census_audit.saved_shapes), and the op template the
same walk writes holds the file's parameters, as tests/test_walk_encoder.py checks its walks."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from census_audit import saved_shapes  # noqa: E402
from test_families import spec_of  # noqa: E402
from test_walk_encoder import test_the_walk_records_what_save_pretrained_writes as walk_check  # noqa: E402

from ckptstat.families import get  # noqa: E402
from ckptstat.families.framework.walk_vision import EncoderLayer  # noqa: E402

WALKED = ("vit", "dinov2", "clip", "siglip", "swin")
CASES = [pytest.param(name, s, m, id=f"{name}-{s.config}-{m}-{i}")
         for name in WALKED for i, s in enumerate(get(name).samples) for m in s.models]


@pytest.mark.parametrize("name,sample,model_name", CASES)
def test_walked_tensors_are_what_save_pretrained_writes(name, sample, model_name):
    """tests/test_walk_encoder.py's check: tensors == save_pretrained's, the op template's parameters the file's."""
    walk_check(name, sample, model_name)


def test_walked_masked_image_modeling_keeps_the_mask_token():
    """ViTForMaskedImageModeling's ViTModel holds embeddings.mask_token [1, 1, h]: the walk records it when the variant
    says so (from_tensors reads it from the file)."""
    from dataclasses import replace

    cfg = T.ViTConfig(**dict(get("vit").samples[0].kwargs))
    with torch.device("meta"):
        model = T.ViTModel(cfg, use_mask_token=True)
    spec = spec_of(T.ViTModel, cfg)
    spec = replace(spec, variant=replace(spec.variant, mask_token=True))
    assert get("vit").expected_tensors(spec) == saved_shapes(model)


def test_a_misspelt_encoder_variant_is_an_error():
    with pytest.raises(TypeError):
        EncoderLayer(mlp="swiglu2")   # type: ignore[arg-type]
    with pytest.raises(TypeError):
        EncoderLayer(layer_scal=True)   # type: ignore[call-arg]
