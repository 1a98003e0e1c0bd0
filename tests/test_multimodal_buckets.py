"""A multimodal model's towers in buckets of their own (naming/ TOWER_RULES, MODALITY_PROJECTORS; README "Counting
conventions"): every parameter outside the language model and its head (the vision or audio tower, the projector into
the text embedding) is `vision` or `audio`, and the tower's blocks are rows of their own, never summed into the
language model's layer of the same index. Oracles: transformers 5.25 objects, built tiny from their configs and saved
with save_pretrained; each row's parameters are the sum over that torch module's parameters."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from census_audit import tiny_config  # noqa: E402

# (class, the side its tower is on); Mllama's tower holds a second stack (global_transformer) and Video-LLaVA a second
# tower (video_tower): their blocks are in the bucket, not in rows (the first stack's indices are taken)
CASES = [
    ("LlavaForConditionalGeneration", "vision"), ("LlavaNextForConditionalGeneration", "vision"),
    ("Qwen2VLForConditionalGeneration", "vision"), ("Qwen2_5_VLForConditionalGeneration", "vision"),
    ("Qwen3VLForConditionalGeneration", "vision"), ("Gemma3ForConditionalGeneration", "vision"),
    ("PaliGemmaForConditionalGeneration", "vision"), ("Idefics3ForConditionalGeneration", "vision"),
    ("SmolVLMForConditionalGeneration", "vision"), ("Mistral3ForConditionalGeneration", "vision"),
    ("Llama4ForConditionalGeneration", "vision"), ("InternVLForConditionalGeneration", "vision"),
    ("Blip2ForConditionalGeneration", "vision"), ("Qwen2AudioForConditionalGeneration", "audio"),
    ("VoxtralForConditionalGeneration", "audio"), ("MllamaForConditionalGeneration", "vision"),
    ("VideoLlavaForConditionalGeneration", "vision"),
]
TOWERS = {"vision": ("vision_tower", "visual", "vision_model", "image_tower"), "audio": ("audio_tower",)}


def _attr(model, names):
    for owner in (model, getattr(model, "model", None)):
        for name in names:
            if owner is not None and isinstance(getattr(owner, name, None), torch.nn.Module):
                return getattr(owner, name)
    raise AssertionError(f"{type(model).__name__}: none of {names}")


def _blocks(module) -> torch.nn.ModuleList:
    """The module's stack of blocks: its longest ModuleList named layers / layer / blocks (Mllama's local one)."""
    stacks = [m for n, m in module.named_modules() if isinstance(m, torch.nn.ModuleList)
              and n.rsplit(".", 1)[-1] in ("layers", "layer", "blocks") and "global_transformer" not in n]
    return max(stacks, key=len)


def _params(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.fixture(scope="module", params=CASES, ids=[c for c, _ in CASES])
def saved(request, tmp_path_factory):
    cls_name, side = request.param
    cls = getattr(transformers, cls_name)
    torch.manual_seed(0)
    model = cls(tiny_config(cls.config_class)).eval()
    path = tmp_path_factory.mktemp(cls_name)
    model.save_pretrained(path)
    return model, side, str(path)


def test_tower_and_projector_in_their_bucket(cli, saved):
    model, side, path = saved
    rc, out, _ = cli(str(path), "--json")
    r = json.loads(out)
    buckets = {b["bucket"]: b["params"] for b in r["buckets"]}
    lm = _attr(model, ("language_model", "text_model"))
    inside = {id(p) for p in lm.parameters()} | {id(p) for p in model.get_output_embeddings().parameters()}
    outside = sum(p.numel() for p in model.parameters() if id(p) not in inside)   # (unique: a tied one once)
    assert rc == 0 and buckets.get(side) == outside, buckets
    assert "other" not in buckets


def test_tower_blocks_are_rows_of_their_own(cli, saved):
    model, side, path = saved
    r = json.loads(cli(str(path), "--json")[1])
    rows: dict[str, dict[int, int]] = {}
    for row in r["layers"]:
        rows.setdefault(row["bucket"], {})[row["layer"]] = row["params"]
    tower = _blocks(_attr(model, TOWERS[side]))
    text = _blocks(_attr(model, ("language_model", "text_model")))
    assert rows[side] == {i: _params(b) for i, b in enumerate(tower)}
    assert rows["encoder"] == {i: _params(b) for i, b in enumerate(text)}


def test_a_projector_name_without_a_tower_is_not_vision(cli, tmp_path):
    """`projector`, `connector`, `merger` are a multimodal projector's names only beside a tower."""
    import numpy as np
    from safetensors.numpy import save_file

    save_file({"projector.weight": np.zeros((4, 4), np.float32), "layers.0.mlp.weight": np.zeros((4, 4), np.float32)},
              str(tmp_path / "m.safetensors"))
    r = json.loads(cli(str(tmp_path / "m.safetensors"), "--json")[1])
    assert {b["bucket"] for b in r["buckets"]} == {"encoder", "other"}


@pytest.mark.parametrize("sides", [("v",), ("a",), ("v", "a")], ids=["vision", "audio", "omni"])
def test_llama_cpp_mmproj_file(cli, tmp_path, sides):
    """An mmproj-*.gguf (llama.cpp's multimodal projector file) under the names gguf-py's MMPROJ table holds: its
    towers' blocks rows of their own, its projector (`mm.*`, `resampler.*`) on the tower's side, `mm.a.*` audio's."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    names = sorted({gguf.TENSOR_NAMES[t].format(bid=b) for t in gguf.MODEL_TENSORS[gguf.MODEL_ARCH.MMPROJ]
                    for b in (0, 1)})
    names = [n for n in names if n.split(".")[0] in sides or n.split(".")[0] in ("mm", "resampler")]
    names = [n for n in names if not n.startswith("mm.a.") or "a" in sides]
    w = gguf.GGUFWriter(str(tmp_path / "mmproj.gguf"), "clip")
    tensor = np.zeros((2, 2), np.float32)
    for n in names:
        w.add_tensor(n + ".weight", tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = json.loads(cli(str(tmp_path / "mmproj.gguf"), "--json")[1])
    want = {"vision": 0, "audio": 0}
    for n in names:
        side = "audio" if n.startswith(("a.", "mm.a.")) or (n.startswith(("mm.", "resampler.")) and sides == ("a",)) \
            else "vision"
        want[side] += tensor.size
    assert {b["bucket"]: b["params"] for b in r["buckets"]} == {k: v for k, v in want.items() if v}
    blocks = {(("vision" if n[0] == "v" else "audio"), int(n.split(".")[2])) for n in names if n.split(".")[1] == "blk"}
    assert {(row["bucket"], row["layer"]) for row in r["layers"]} == blocks


@pytest.mark.parametrize("cls_name,towers", [
    # Phi-4-multimodal: both towers inside the text model's embedding module (embed_tokens_extend.image_embed /
    # .audio_embed), the audio conformer's blocks `encoders.N`; Fuyu: no tower, patches projected by one Linear
    ("Phi4MultimodalForCausalLM", {"vision": "image_embed", "audio": "audio_embed"}),
    ("FuyuForCausalLM", {"vision": "vision_embed_tokens"}),
])
def test_towers_inside_the_embedding_module(cli, tmp_path, cls_name, towers):
    cls = getattr(transformers, cls_name)
    torch.manual_seed(0)
    model = cls(tiny_config(cls.config_class)).eval()
    model.save_pretrained(tmp_path)
    r = json.loads(cli(str(tmp_path), "--json")[1])
    buckets = {b["bucket"]: b["params"] for b in r["buckets"]}
    modules = dict(model.named_modules())
    for side, name in towers.items():
        tower = next(m for n, m in modules.items() if n.rsplit(".", 1)[-1] == name)
        assert buckets.get(side) == _params(tower), (side, buckets)
        blocks = [m for n, m in tower.named_modules() if isinstance(m, torch.nn.ModuleList)
                  and n.rsplit(".", 1)[-1] in ("layers", "encoders")]
        rows = {row["layer"]: row["params"] for row in r["layers"] if row["bucket"] == side}
        if blocks:
            assert rows == {i: _params(b) for i, b in enumerate(max(blocks, key=len))}
    assert "other" not in buckets
