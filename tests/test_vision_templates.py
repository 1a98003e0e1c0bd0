"""The expected-tensor templates of the image families (vit.py, clip.py, resnet.py) end to end: `ckptstat
ties` on checkpoints save_pretrained writes finds every tensor it expects and nothing unexpected, and
counts model.parameters() of the class; ResNet's template in torchvision's names equals the parameters
under those names. (tests/test_families.py checks every template against named_parameters of every sample.)"""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from test_families import meta_model, tensor_infos  # noqa: E402
from test_vision import torchvision_name  # noqa: E402

from ckptstat.families import get  # noqa: E402
from ckptstat.families.framework.spec import from_tensors  # noqa: E402

_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, image_size=32, patch_size=4)
_TEXT = dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=40, projection_dim=24)
_VISION = dict(hidden_size=48, intermediate_size=40, num_hidden_layers=2, num_attention_heads=6, image_size=32, patch_size=4,
               projection_dim=24)
_RESNET = dict(embedding_size=8, hidden_sizes=[16, 32], depths=[1, 2])

SAVED = [
    ("ViTConfig", _VIT | dict(num_labels=3), "ViTForImageClassification"),
    ("ViTConfig", _VIT | dict(pooler_output_size=24), "ViTModel"),
    ("CLIPConfig", dict(text_config=_TEXT, vision_config=_VISION, projection_dim=24), "CLIPModel"),
    ("CLIPTextConfig", _TEXT, "CLIPTextModelWithProjection"),
    ("CLIPVisionConfig", _VISION, "CLIPVisionModel"),
    ("ResNetConfig", _RESNET | dict(num_labels=4), "ResNetForImageClassification"),
    ("ResNetConfig", _RESNET | dict(layer_type="basic", downsample_in_first_stage=True), "ResNetModel"),
]


@pytest.mark.parametrize("config,model_name,kwargs", [pytest.param(c, m, k, id=m) for c, k, m in SAVED])
def test_ties_cross_check_on_saved_vision_models(cli, tmp_path, config, model_name, kwargs):
    torch.manual_seed(0)
    model = getattr(T, model_name)(getattr(T, config)(**kwargs))
    model.save_pretrained(tmp_path)
    rc, out, err = cli("ties", str(tmp_path), "--json")
    assert rc == 0, err
    r = json.loads(out)
    cc = r["cross_check"]
    assert cc["available"], cc
    assert cc["expected"] == len(list(model.named_parameters(remove_duplicate=False)))
    assert cc["missing"] == [] and cc["unexpected"] == [] and cc["shape_mismatches"] == []
    params = {row["convention"]: row["params"] for row in r["counting"]["rows"]}
    assert params[f"model.parameters() of {model_name}"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("kwargs", [
    dict(embedding_size=8, hidden_sizes=[16, 24, 32, 40], depths=[2, 1, 2, 1], num_labels=7),              # bottleneck
    dict(embedding_size=8, hidden_sizes=[8, 16, 24], depths=[2, 2, 1], layer_type="basic", num_labels=3),   # basic
    dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic", downsample_in_first_stage=True),
])
@pytest.mark.parametrize("cls", ["ResNetModel", "ResNetForImageClassification"])
def test_resnet_template_in_torchvision_names(kwargs, cls):
    """A spec inferred from torchvision-named tensors (conv1, layerN.i.convK, downsample.0/1, fc): its
    template is the model's parameters under those names."""
    model = meta_model(getattr(T, cls), T.ResNetConfig(**kwargs))
    tensors = {torchvision_name(n): t for n, t in tensor_infos(model).items()}
    spec = from_tensors("resnet", tensors)
    template = get("resnet").expected_tensors
    assert template is not None
    assert template(spec) == {torchvision_name(n): tuple(p.shape) for n, p in model.named_parameters()}


# ---- CLIP's and SigLIP's one-tower models in both layouts transformers reads ----

_S_TEXT = dict(_TEXT, projection_size=48)
_S_VISION = dict(_VISION, hidden_size=48)
TOWERS = [("CLIPTextConfig", _TEXT, "CLIPTextModel", "clip"), ("CLIPVisionConfig", _VISION, "CLIPVisionModel", "clip"),
          ("SiglipTextConfig", _S_TEXT, "SiglipTextModel", "siglip"),
          ("SiglipVisionConfig", _S_VISION, "SiglipVisionModel", "siglip"),
          ("SiglipVisionConfig", dict(_S_VISION, vision_use_head=False), "SiglipVisionModel", "siglip")]


def _tower_layouts(tmp_path, config, kwargs, model_name):
    """(the model, {layout: folder}): "5.x" as save_pretrained writes a model built from its config (names without
    the tower prefix), "4.x" the same tensors under the prefix: transformers' conversion mapping for these classes is
    PrefixChange(prefix_to_remove="text_model" / "vision_model"), and its reverse is the rename written here. The
    oracle that "4.x" is the model's own layout: from_pretrained reads it with no key missing or unexpected, and
    save_pretrained writes the loaded model under the same names (what a transformers 5 user writes after loading a
    Hub file of transformers 4)."""
    from safetensors.torch import load_file, save_file
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import PrefixChange

    torch.manual_seed(0)
    cls = getattr(T, model_name)
    model = cls(getattr(T, config)(**kwargs))
    new, old, again = (tmp_path / x for x in ("v5", "v4", "v4_resaved"))
    model.save_pretrained(new)
    renames = [t.reverse_transform() for t in get_model_conversion_mapping(model, add_legacy=False)
               if isinstance(t, PrefixChange)]
    assert len(renames) == 1, renames

    def prefixed(name):
        renamed, matched = renames[0].rename_source_key(name)
        assert matched is not None, name
        return renamed

    old.mkdir()
    (old / "config.json").write_text((new / "config.json").read_text())
    save_file({prefixed(n): t for n, t in load_file(new / "model.safetensors").items()}, old / "model.safetensors",
              metadata={"format": "pt"})
    loaded, info = cls.from_pretrained(old, output_loading_info=True)
    assert not any(info.values()), info
    loaded.save_pretrained(again)
    assert set(load_file(again / "model.safetensors")) == set(load_file(old / "model.safetensors"))
    return model, {"5.x": new, "4.x": old}


@pytest.mark.parametrize("config,kwargs,model_name,family", [pytest.param(*t, id=f"{t[2]}-{i}") for i, t in enumerate(TOWERS)])
def test_tower_models_in_both_layouts(cli, tmp_path, config, kwargs, model_name, family):
    """Both layouts of CLIPTextModel, CLIPVisionModel, SiglipTextModel, SiglipVisionModel: `ckptstat ties`' config
    cross-check finds every tensor it expects and nothing else, and counts model.parameters(); without config.json
    the names show the family, and the shapes its parameters."""
    from ckptstat import open_checkpoint, summarize
    from ckptstat.families.framework.graph import predict_params

    model, layouts = _tower_layouts(tmp_path, config, kwargs, model_name)
    params = sum(p.numel() for p in model.parameters())
    for layout, folder in layouts.items():
        rc, out, err = cli("ties", str(folder), "--json")
        assert rc == 0, err
        r = json.loads(out)
        cc = r["cross_check"]
        assert cc["available"], (layout, cc)
        assert cc["expected"] == len(list(model.named_parameters())), layout
        assert (cc["missing"], cc["unexpected"], cc["shape_mismatches"]) == ([], [], []), layout
        counted = {row["convention"]: row["params"] for row in r["counting"]["rows"]}
        assert counted[f"model.parameters() of {model_name}"] == params, layout
        ckpt = open_checkpoint(str(folder / "model.safetensors"))   # the file alone: no config.json
        s = summarize(ckpt)
        assert (s["resolved"]["family"], s["parameters"]["unique"]) == (family, params), layout
        assert predict_params(from_tensors(family, ckpt.tensors))["total"] == params, layout
