"""Image models beyond the registry walk (tests/test_families.py): ResNet checkpoints in torchvision's
naming, `--image-size` in flops/memory, and `ckptstat run` on ViT and CLIP with its --device check.
Oracles: torch's FlopCounterMode and model.parameters() on transformers' models; models are written by
save_pretrained into tmp_path."""
from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from conftest import fixture  # noqa: E402
from test_families import fcm_image_flops, meta_model, ours, tensor_infos  # noqa: E402

from ckptstat.families import detect  # noqa: E402
from ckptstat.families.framework.graph import build, predict_params  # noqa: E402
from ckptstat.families.framework.spec import from_tensors  # noqa: E402

# transformers' ResNet module names -> torchvision's (torchvision/models/resnet.py: conv1/bn1, layerN.i.convK/bnK,
# downsample.0/1, fc). torchvision itself is not installable beside the CPU torch 2.13.0 wheel (PyPI's
# torchvision 0.28.0 fails to load its C ops against it), so its names are made from transformers' model,
# the same v1.5 network; the oracle stays FlopCounterMode and parameters() on that model.
TV_NAMES = [
    (r"^resnet\.", ""),
    (r"^embedder\.embedder\.convolution\.", "conv1."), (r"^embedder\.embedder\.normalization\.", "bn1."),
    (r"^encoder\.stages\.(\d+)\.layers\.(\d+)\.shortcut\.convolution\.",
     lambda m: f"layer{int(m[1]) + 1}.{m[2]}.downsample.0."),
    (r"^encoder\.stages\.(\d+)\.layers\.(\d+)\.shortcut\.normalization\.",
     lambda m: f"layer{int(m[1]) + 1}.{m[2]}.downsample.1."),
    (r"^encoder\.stages\.(\d+)\.layers\.(\d+)\.layer\.(\d)\.convolution\.",
     lambda m: f"layer{int(m[1]) + 1}.{m[2]}.conv{int(m[3]) + 1}."),
    (r"^encoder\.stages\.(\d+)\.layers\.(\d+)\.layer\.(\d)\.normalization\.",
     lambda m: f"layer{int(m[1]) + 1}.{m[2]}.bn{int(m[3]) + 1}."),
    (r"^classifier\.1\.", "fc."),
]


def torchvision_name(name: str) -> str:
    for rx, repl in TV_NAMES:
        name = re.sub(rx, repl, name)
    return name


@pytest.mark.parametrize("kwargs", [
    dict(embedding_size=8, hidden_sizes=[16, 24, 32, 40], depths=[2, 1, 2, 1], num_labels=7),              # bottleneck
    dict(embedding_size=8, hidden_sizes=[8, 16, 24], depths=[2, 2, 1], layer_type="basic", num_labels=3),   # basic
])
@pytest.mark.parametrize("cls", ["ResNetModel", "ResNetForImageClassification"])
def test_resnet_from_torchvision_names(kwargs, cls):
    model = meta_model(getattr(T, cls), T.ResNetConfig(**kwargs))
    tensors = {torchvision_name(n): t for n, t in tensor_infos(model).items()}
    # the stem conv is the top-level conv1 wherever it stands in the file (layer1.0.conv1 first here)
    tensors = dict(sorted(tensors.items(), key=lambda kv: not kv[0].startswith("layer")))
    assert any(n.startswith("layer1.0.conv1") for n in tensors) and not any("stages" in n for n in tensors)
    assert detect(tensors, None).family == "resnet"
    spec = from_tensors("resnet", tensors)
    assert spec.head == ("imgcls" if cls.endswith("Classification") else "base")
    assert predict_params(spec)["total"] == sum(p.numel() for p in model.parameters())
    for side in (224, 97):
        assert ours(replace(spec, image_size=side), 1, 2) == fcm_image_flops(model, 1, 2, "meta", side, 3, None), side
    names = [op.module for op in build(spec)]
    assert names[0].startswith("conv1 ") and any(n.startswith("layer1.0.conv1") for n in names)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Tiny ViT, CLIP, ResNet, ConvNeXt and MobileNet V2 classifiers written by save_pretrained."""
    root = tmp_path_factory.mktemp("vision")
    torch.manual_seed(0)
    eager = dict(attn_implementation="eager")   # FlopCounterMode does not see SDPA's CPU kernel
    vit = T.ViTForImageClassification._from_config(T.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                  intermediate_size=37, image_size=32, patch_size=4, num_labels=3), **eager)
    clip = T.CLIPModel._from_config(T.CLIPConfig(
        text_config=dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                         max_position_embeddings=40),
        vision_config=dict(hidden_size=48, intermediate_size=40, num_hidden_layers=2, num_attention_heads=6, image_size=32,
                           patch_size=4), projection_dim=24), **eager)
    resnet = T.ResNetForImageClassification(T.ResNetConfig(embedding_size=8, hidden_sizes=[16, 32], depths=[1, 2], num_labels=4))
    convnext = T.ConvNextForImageClassification(T.ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 2], num_stages=2,
                                                                 num_labels=4))
    mobilenet = T.MobileNetV2ForImageClassification(T.MobileNetV2Config(depth_multiplier=0.25, min_depth=4, num_labels=4,
                                                                        first_layer_is_expansion=False))
    out = {}
    for name, m in (("vit", vit), ("clip", clip), ("resnet", resnet), ("convnext", convnext), ("mobilenet", mobilenet)):
        m.save_pretrained(root / name)
        out[name] = (str(root / name), m.eval())
    return out


@pytest.mark.parametrize("name", ["vit", "clip", "resnet", "convnext", "mobilenet"])
def test_every_vision_tensor_has_a_bucket(cli, saved, name):
    """The stems, final norms and CLIP's contrastive head are placed (bucket `other` is for what no rule knows);
    the totals are the model's own parameters() and buffers."""
    path, model = saved[name]
    r = json.loads(cli("summary", path, "--json")[1])
    assert "other" not in {b["bucket"] for b in r["buckets"]}, r["buckets"]
    assert r["parameters"]["unique"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["vit", "clip", "resnet", "convnext", "mobilenet"])
def test_image_size_option_matches_flop_counter(cli, saved, name):
    path, model = saved[name]
    rc, out, err = cli("flops", path, "-b", "2", "-s", "8", "--image-size", "48", "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["parameters"]["agree"]
    vc = getattr(model.config, "vision_config", model.config)
    assert r["runs"][0]["totals"]["flops"] == fcm_image_flops(model, 8, 2, "cpu", 48, 3, getattr(vc, "image_size", None))
    assert any("48x48" in n for n in r["notes"])
    rc, out, err = cli("memory", path, "--image-size", "48", "--json")
    assert rc == 0, err


def test_clip_towers_reported_apart(cli, saved):
    path, model = saved["clip"]
    rc, out, _ = cli("flops", path, "--json")
    r = json.loads(out)
    buckets = r["parameters"]["predicted_buckets"]
    assert buckets["text"] == sum(p.numel() for p in model.text_model.parameters())
    assert buckets["vision"] == sum(p.numel() for p in model.vision_model.parameters())
    towers = ("text_model", "vision_model")
    assert buckets["cls"] == sum(p.numel() for n, p in model.named_parameters() if not n.startswith(towers))
    assert {m["module"].split(".")[0] for m in r["runs"][0]["modules"] if m["bucket"] in ("text", "vision")} \
        == {"text_model", "vision_model"}


def test_image_size_usage_errors(cli, saved):
    rc, out, err = cli("flops", fixture("bert-tiny"), "--image-size", "64")
    assert rc == 2 and out == "" and err.count("\n") == 1 and "--image-size" in err and "Traceback" not in err
    rc, out, err = cli("flops", saved["vit"][0], "--image-size", "2")      # below the 4x4 patch
    assert rc == 2 and out == "" and err.count("\n") == 1 and "--image-size" in err
    rc, _, err = cli("memory", saved["vit"][0], "--image-size", "0")
    assert rc == 2 and "--image-size" in err


@pytest.mark.parametrize("name", ["vit", "clip", "resnet"])
def test_run_builds_image_inputs(saved, name):
    from ckptstat.executor import execute

    r = execute(saved[name][0], batch=2, seq=8, warmup=0, iters=1)
    assert r["outputs_finite"] and r["weights"]["missing"] == []
    assert r["flops"]["measured"] == r["flops"]["analytic"]


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "gpu0", "cuda:7", "mps"])
def test_run_device_is_validated(cli, device):
    if device == "cuda:7" and torch.cuda.device_count() > 7 or device == "mps" and torch.backends.mps.is_available():
        pytest.skip("the device exists here")
    rc, out, err = cli("run", fixture("bert-tiny"), "--device", device)
    assert rc == 2 and out == "" and err.count("\n") == 1 and f"--device {device}" in err.replace("'", "")


@pytest.mark.parametrize("config,what", [
    (dict(model_type="vit", hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, patch_size=0),
     "patch_size"),
    (dict(model_type="clip", text_config="x"), "text_config"),
    (dict(model_type="clip_vision_model", hidden_size=30, num_attention_heads=4), "hidden size 30"),
    (dict(model_type="resnet", embedding_size=8, hidden_sizes="abc", depths=[1]), "hidden_sizes"),
    (dict(model_type="resnet", embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="weird"), "layer_type"),
])
def test_bad_image_configs_are_one_line_errors(cli, tmp_path, config, what):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    rc, out, err = cli("flops", str(path))
    assert rc == 2 and out == "" and err.count("\n") == 1 and what in err and str(path) in err
