"""`flops --images N` of a vision-language wrapper (families/wrappers.py `image_path`): the vision tower and projector
run on each image and the language model reads the text tokens plus each image's tokens. The oracle is transformers'
own forward with pixel values, the image tokens in input_ids, under FlopCounterMode (eager attention, as every FLOPs
figure here): LLaVA over CLIP and over SigLIP (several feature layers, the "full" strategy, an unbiased projector),
PaliGemma and Gemma 3 with and without SigLIP's pooling head, from the save_pretrained folder and its bare config.json,
one image and batch 1, two images and batch 2."""
from __future__ import annotations

import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from census_audit import tiny_config  # noqa: E402

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
TEXT = 8   # text tokens a sequence


def _siglip(head: bool):
    from transformers import SiglipVisionConfig

    return SiglipVisionConfig(hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                              image_size=48, patch_size=8, vision_use_head=head)


def _config(case: str):
    from transformers import Gemma3Config, LlavaConfig, PaliGemmaConfig

    if case.startswith("llava"):
        cfg = tiny_config(LlavaConfig)
        if case == "llava-siglip":
            cfg.vision_config = _siglip(False)
            cfg.vision_feature_layer, cfg.vision_feature_select_strategy = [-2, -1], "full"
            cfg.multimodal_projector_bias = False
    elif case.startswith("paligemma"):
        cfg = tiny_config(PaliGemmaConfig)
        cfg.vision_config = _siglip(case.endswith("head"))
        cfg.projection_dim = cfg.vision_config.projection_dim = cfg.text_config.hidden_size
    else:
        cfg = tiny_config(Gemma3Config)
        cfg.vision_config = _siglip(case.endswith("head"))
        cfg.mm_tokens_per_image = 4   # a 6 x 6 grid pooled 3 x 3
    cfg._attn_implementation = "eager"
    return cfg


CASES = ["llava", "llava-siglip", "paligemma", "paligemma-head", "gemma3", "gemma3-head"]


def _measured(model, cfg, tokens: int, images: int, batch: int) -> tuple[int, int]:
    """FlopCounterMode's total of the wrapper's forward and of its vision tower alone."""
    from torch.utils.flop_counter import FlopCounterMode

    v = cfg.vision_config
    pixels = torch.randn(batch * images, v.num_channels, v.image_size, v.image_size)
    ids = torch.full((batch, TEXT + images * tokens), 5)
    for i in range(images):
        ids[:, 1 + i * tokens: 1 + (i + 1) * tokens] = cfg.image_token_id
    extra = {"token_type_ids": (ids == cfg.image_token_id).long()} if cfg.model_type != "llava" else {}
    with torch.no_grad(), FlopCounterMode(display=False) as whole:
        model(input_ids=ids, pixel_values=pixels, **extra)
    with torch.no_grad(), FlopCounterMode(display=False) as tower:
        model.model.vision_tower(pixel_values=pixels)
    return whole.get_total_flops(), tower.get_total_flops()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from transformers import AutoModelForImageTextToText

    out = {}
    for case in CASES:
        cfg = _config(case)
        torch.manual_seed(0)
        model = AutoModelForImageTextToText.from_config(cfg).eval()
        path = str(tmp_path_factory.mktemp(case))
        model.save_pretrained(path)
        out[case] = (model, cfg, path)
    return out


@pytest.mark.parametrize("case", CASES)
def test_image_flops_are_the_wrappers_forward_with_pixels(cli, saved, case):
    model, cfg, path = saved[case]
    v = cfg.vision_config
    with torch.no_grad():
        feats = model.model.get_image_features(pixel_values=torch.zeros(1, v.num_channels, v.image_size, v.image_size))
    per_image = feats.pooler_output[0].shape[-2]   # the features (tokens) one image becomes
    for images, batch in ((1, 1), (2, 2)):
        whole, tower = _measured(model, cfg, per_image, images, batch)
        for source in (path, os.path.join(path, "config.json")):
            code, out, err = cli("flops", source, "--images", str(images), "-b", str(batch), "-s", str(TEXT), "--json")
            assert code == 0, err
            run = json.loads(out)["runs"][0]
            assert run["totals"]["flops"] == whole, (source, images, batch)
            assert run["images"]["tower_flops"] == tower and run["images"]["tokens_each"] == per_image
            assert run["seq"] == TEXT + images * per_image and run["images"]["text_tokens"] == TEXT
    code, out, _ = cli("flops", path, "--images", "1", "-s", str(TEXT))   # the human output says it
    assert code == 0 and f"{per_image} tokens each" in out


def test_images_on_a_model_without_an_image_path_is_one_line(cli, saved):
    """A text model, and a wrapper whose image path is not modelled (a tower of another kind): exit 2, one line."""
    from transformers import Qwen2VLConfig

    code, out, err = cli("flops", os.path.join(FIX, "gpt2-tiny"), "--images", "1")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--images" in err and "Traceback" not in err
    cfg = tiny_config(Qwen2VLConfig)
    path = os.path.join(saved["llava"][2], "..", "qwen2vl.json")
    with open(path, "w") as f:
        json.dump(cfg.to_dict(), f)
    code, out, err = cli("flops", path, "--images", "1")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "qwen2" in err, err
    code, out, err = cli("flops", saved["llava"][2], "--images", "-1")
    assert code == 2 and "Traceback" not in err


@pytest.mark.parametrize("case", ["llava", "gemma3"])
def test_memory_holds_the_image_tokens_in_the_kv_cache(cli, saved, case):
    """`memory --images 2`: the KV cache line is the bytes of the cache transformers' forward with two images returns
    (its language model over the text and image tokens), and a note says the tower's activations are not in it."""
    model, cfg, path = saved[case]
    v = cfg.vision_config
    code, out, _ = cli("flops", path, "--images", "1", "--json")
    tokens = json.loads(out)["runs"][0]["images"]["tokens_each"]
    ids = torch.full((1, TEXT + 2 * tokens), 5)
    ids[0, 1: 1 + 2 * tokens] = cfg.image_token_id
    extra = {"token_type_ids": (ids == cfg.image_token_id).long()} if cfg.model_type != "llava" else {}
    with torch.no_grad():
        cache = model(input_ids=ids, pixel_values=torch.randn(2, v.num_channels, v.image_size, v.image_size),
                      use_cache=True, **extra).past_key_values
    held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    code, out, err = cli("memory", path, "--images", "2", "-s", str(TEXT), "--json")
    assert code == 0, err
    r = json.loads(out)
    kv = [line["bytes"] for line in r["lines"] if line["group"] == "kv cache"]
    assert kv == [held]
    assert any("--images 2" in n and "not in these lines" in n for n in r["notes"])
