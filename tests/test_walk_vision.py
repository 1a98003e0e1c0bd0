"""The image encoders described once as a walk (families/framework/walk_vision.py: ViT and DeiT, DINOv2, CLIP's and
SigLIP's towers, Swin and its copies, the convnets: ConvNeXt and V2, MobileNet V1 and V2, RegNet) against the
library that wrote the files: for every sample model, the tensors the walk records are the names and shapes
save_pretrained writes (census_audit.saved_shapes), and the op template the same walk writes holds the file's
parameters, as tests/test_walk_encoder.py checks its walks."""
from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from census_audit import saved_shapes  # noqa: E402
from oracle_figures import Kind  # noqa: E402
from test_families import fcm_image_flops, meta_model, ours, spec_of, tensor_infos  # noqa: E402
from test_walk_encoder import test_the_walk_records_what_save_pretrained_writes as walk_check  # noqa: E402

from ckptstat.errors import UsageError  # noqa: E402
from ckptstat.families import get  # noqa: E402
from ckptstat.families.framework.graph import predict_params  # noqa: E402
from ckptstat.families.framework.spec import from_tensors  # noqa: E402
from ckptstat.families.framework.walk_vision import EncoderLayer  # noqa: E402

WALKED = ("vit", "dinov2", "beit", "clip", "siglip", "swin", "convnext", "mobilenet", "regnet", "segformer", "pvt_v2",
          "poolformer", "pvt", "levit")
CASES = [pytest.param(name, s, m, id=f"{name}-{s.config}-{m}-{i}")
         for name in WALKED for i, s in enumerate(get(name).samples) for m in s.models]


@pytest.mark.parametrize("name,sample,model_name", CASES)
def test_walked_tensors_are_what_save_pretrained_writes(name, sample, model_name):
    """tests/test_walk_encoder.py's check: tensors == save_pretrained's, the op template's parameters the file's."""
    walk_check(name, sample, model_name)


def test_walked_masked_image_modeling_keeps_the_mask_token():
    """ViTForMaskedImageModeling's ViTModel holds embeddings.mask_token [1, 1, h]: the walk records it when the variant
    says so (from_tensors reads it from the file)."""
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


# FlopCounterMode's FLOPs of one image on the meta device, kept (tests/oracle_figures.py): keyed by the config class,
# its arguments, the model class, the side and the side the positions are interpolated from
IMAGE_FLOPS = Kind(__name__, "image_flops", meta_model, fcm_image_flops)


def image_flops(model, key: list, side: int, native: int | None) -> int:
    return IMAGE_FLOPS([*key, side, native], fcm_image_flops, model, 8, 1, "meta", side, 3, native)


@pytest.mark.slow
@pytest.mark.parametrize("config,model_name,kwargs,sides", [
    ("SwinConfig", "SwinForImageClassification", {}, (224, 300)),   # Swin-T; at 300 px grids 75, 38, 19, 10: all padded
    ("Swinv2Config", "Swinv2ForImageClassification", {}, (224, 300)),
    ("DonutSwinConfig", "DonutSwinForImageClassification", {}, (224, 300)),
    # Swin-B at 384 px, window 12 (at another side its last grid shrinks the window below the bias table: transformers raises)
    ("SwinConfig", "SwinForImageClassification",
     dict(image_size=384, window_size=12, embed_dim=128, depths=[2, 2, 18, 2], num_heads=[4, 8, 16, 32]), (384,)),
    ("Swinv2Config", "Swinv2ForImageClassification", dict(image_size=256, window_size=16), (256, 300)),   # V2-T 256 px
])
def test_swin_at_full_size_equals_transformers(config, model_name, kwargs, sides):
    """The released shapes' parameters (num_parameters) and FlopCounterMode's FLOPs of one image on the meta device, at
    the config's side and one whose grids need padding."""
    cls, cfg = getattr(T, model_name), getattr(T, config)(**kwargs)
    model, spec = meta_model(cls, cfg), spec_of(cls, cfg)
    assert predict_params(spec)["total"] == sum(p.numel() for p in model.parameters())
    for side in sides:
        expected = image_flops(model, [config, kwargs, model_name], side, spec.image_size)
        assert ours(replace(spec, image_size=side), 8, 1) == expected, side


@pytest.mark.parametrize("config,model_name,kwargs", [
    ("ConvNextConfig", "ConvNextForImageClassification", {}),   # ConvNeXt-T
    ("ConvNextV2Config", "ConvNextV2ForImageClassification", {}),   # ConvNeXt V2-T
    ("ConvNextV2Config", "ConvNextV2Model", dict(hidden_sizes=[40, 80, 160, 320], depths=[2, 2, 6, 2])),   # V2-Nano
    ("MobileNetV1Config", "MobileNetV1ForImageClassification", {}),   # mobilenet_v1_1.0_224 (TF padding)
    ("MobileNetV1Config", "MobileNetV1Model", dict(depth_multiplier=0.75, tf_padding=False)),
    ("MobileNetV2Config", "MobileNetV2ForImageClassification", {}),   # mobilenet_v2_1.0_224
    ("MobileNetV2Config", "MobileNetV2ForImageClassification", dict(depth_multiplier=1.4)),
    ("MobileNetV2Config", "MobileNetV2Model", dict(depth_multiplier=0.35, output_stride=16, tf_padding=False)),
    ("RegNetConfig", "RegNetForImageClassification", {}),   # the config's defaults: a Y of groups of 64
    ("RegNetConfig", "RegNetForImageClassification",   # regnet-x-002's shapes: X blocks, groups of 8
     dict(layer_type="x", hidden_sizes=[24, 56, 152, 368], depths=[1, 1, 4, 7], groups_width=8)),
])
def test_convnets_at_full_size_equal_transformers(config, model_name, kwargs):
    """The released shapes' parameters and FlopCounterMode's FLOPs on the meta device (depthwise convs counted as torch
    counts grouped convs), at 224 px and an odd side (97 px: floored by ConvNeXt's patchify and downsampling convs,
    padded by MobileNet's TF "SAME" padding)."""
    cls, cfg = getattr(T, model_name), getattr(T, config)(**kwargs)
    model, spec = meta_model(cls, cfg), spec_of(cls, cfg)
    assert predict_params(spec)["total"] == sum(p.numel() for p in model.parameters())
    for side in (224, 97):
        assert ours(replace(spec, image_size=side), 8, 1) == image_flops(model, [config, kwargs, model_name], side, None), side


@pytest.mark.parametrize("config,model_name,kwargs", [
    # microsoft/beit-base-patch16-224's config.json (ImageNet-22k then 1k: a bias table per layer, layer scale 0.1,
    # mean pooling, 1000 labels)
    ("BeitConfig", "BeitForImageClassification", dict(use_relative_position_bias=True, num_labels=1000)),
    # shaped like microsoft/beit-base-patch16-224-pt22k (self-supervised: the shared table, the mask token, the MIM head)
    ("BeitConfig", "BeitForMaskedImageModeling", dict(use_shared_relative_position_bias=True, use_mask_token=True,
                                                     use_mean_pooling=False)),
    # facebook/data2vec-vision-base-ft1k's
    ("Data2VecVisionConfig", "Data2VecVisionForImageClassification", dict(use_relative_position_bias=True, num_labels=1000)),
])
def test_beit_at_full_size_equals_transformers(config, model_name, kwargs):
    """The released shapes' parameters (num_parameters) and FlopCounterMode's FLOPs of one image on the meta device, at
    the config's 224 px and at 320 px (interpolated positions and bias tables)."""
    cls, cfg = getattr(T, model_name), getattr(T, config)(**kwargs)
    model, spec = meta_model(cls, cfg), spec_of(cls, cfg)
    assert predict_params(spec)["total"] == model.num_parameters()
    for side in (224, 320):
        expected = image_flops(model, [config, kwargs, model_name], side, spec.image_size)
        assert ours(replace(spec, image_size=side), 8, 1) == expected, side


@pytest.mark.parametrize("config,model_name,kwargs", [
    ("SegformerConfig", "SegformerForImageClassification", dict(num_labels=1000)),   # nvidia/mit-b0: the defaults
    # nvidia/segformer-b0-finetuned-ade-512-512's shapes: MiT-b0 and the all-MLP decode head of 256, 150 classes
    ("SegformerConfig", "SegformerForSemanticSegmentation", dict(num_labels=150)),
    # nvidia/mit-b2's: widths 64, 128, 320, 512, depths 3, 4, 6, 3
    ("SegformerConfig", "SegformerModel", dict(hidden_sizes=[64, 128, 320, 512], depths=[3, 4, 6, 3])),
    ("PvtV2Config", "PvtV2ForImageClassification", dict(num_labels=1000)),   # OpenGVLab/pvt_v2_b0: the defaults
    # OpenGVLab/pvt_v2_b2_linear's: keys and values pooled to 7 x 7 in every block
    ("PvtV2Config", "PvtV2ForImageClassification", dict(hidden_sizes=[64, 128, 320, 512], depths=[3, 4, 6, 3],
                                                        linear_attention=True, num_labels=1000)),
    ("PoolFormerConfig", "PoolFormerForImageClassification", {}),   # sail/poolformer_s12: the defaults
    ("PoolFormerConfig", "PoolFormerModel", dict(depths=[6, 6, 18, 6], layer_scale_init_value=1e-6)),   # poolformer_s36
])
def test_pyramid_transformers_at_full_size_equal_transformers(config, model_name, kwargs):
    """The released shapes' parameters (num_parameters) and FlopCounterMode's FLOPs of one image on the meta device, at
    224 px, 512 px and an odd side (97 px: the overlapping patch embeddings' padding and the reducing convs floor it);
    without config.json, the same from the names and shapes (MiT's strides and heads, PoolFormer's strides and padding
    assumed)."""
    cls, cfg = getattr(T, model_name), getattr(T, config)(**kwargs)
    model, spec = meta_model(cls, cfg), spec_of(cls, cfg)
    assert predict_params(spec)["total"] == model.num_parameters()
    inferred = from_tensors(spec.family, tensor_infos(model))
    assert predict_params(inferred)["total"] == model.num_parameters()
    for side in (224, 512, 97):
        expected = image_flops(model, [config, kwargs, model_name], side, None)
        assert ours(replace(spec, image_size=side), 8, 1) == expected, side
        assert ours(replace(inferred, image_size=side), 8, 1) == expected, side


def test_pvt_tiny_at_full_size_equals_transformers():
    """Zetatech/pvt-tiny-224's shapes (PvtConfig's defaults: widths 64, 128, 320, 512, depths 2, 2, 2, 2, 1000 labels):
    num_parameters and FlopCounterMode's FLOPs on the meta device at 224 px and 227 px (the same grids: transformers
    reshapes each stored position table into the grid, so only sides flooring to the config's run), from config and from
    the names alone; at 320 px transformers raises and the walk refuses."""
    cls, cfg = T.PvtForImageClassification, T.PvtConfig()
    model, spec = meta_model(cls, cfg), spec_of(cls, cfg)
    inferred = from_tensors(spec.family, tensor_infos(model))
    for s in (spec, inferred):
        assert predict_params(s)["total"] == model.num_parameters()
    for side in (224, 227):
        expected = fcm_image_flops(model, 8, 1, "meta", side, 3, None)
        for s in (spec, inferred):
            assert ours(replace(s, image_size=side), 8, 1) == expected, side
    with pytest.raises(RuntimeError):
        fcm_image_flops(model, 8, 1, "meta", 320, 3, None)
    with pytest.raises(UsageError, match="stored positions"):
        ours(replace(spec, image_size=320), 8, 1)


def test_levit_128s_at_full_size_equals_transformers():
    """facebook/levit-128S's shapes (widths 128, 256, 384, heads 4, 6, 8, depths 2, 3, 4, key_dim 16, the derived
    down_ops, 1000 labels, the distilled classifiers): num_parameters and FlopCounterMode's FLOPs on the meta device at
    224 px and 223 px (the same 14 x 14 grid: the bias tables index the config's), from config and from the names alone;
    at 256 px transformers raises and the walk refuses."""
    cls = T.LevitForImageClassificationWithTeacher
    cfg = T.LevitConfig(hidden_sizes=[128, 256, 384], num_attention_heads=[4, 6, 8], depths=[2, 3, 4],
                        key_dim=[16, 16, 16], num_labels=1000)
    model, spec = meta_model(cls, cfg), spec_of(cls, cfg)
    inferred = from_tensors(spec.family, tensor_infos(model))
    for s in (spec, inferred):
        assert predict_params(s)["total"] == model.num_parameters()
    for side in (224, 223):
        expected = fcm_image_flops(model, 8, 1, "meta", side, 3, None)
        for s in (spec, inferred):
            assert ours(replace(s, image_size=side), 8, 1) == expected, side
    with pytest.raises(RuntimeError):
        fcm_image_flops(model, 8, 1, "meta", 256, 3, None)
    with pytest.raises(UsageError, match="bias tables"):
        ours(replace(spec, image_size=256), 8, 1)
