"""config.json's dtype when it holds both keys: transformers 5.25 keeps `dtype` (PretrainedConfig.__init__: "If both
are provided, keep `dtype`") and from_pretrained loads the weights in it. The oracle: the dtype and the bytes of
model.parameters() after transformers' own from_pretrained of the folder, against `ckptstat memory` / `flops` of its
config.json alone (the weights at the configured dtype, the KV cache at its width)."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

SIZES = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=101)
NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


@pytest.mark.parametrize("dtype, torch_dtype", [("float16", "float32"), ("bfloat16", "float16"),
                                                ("float32", "bfloat16"), (None, "bfloat16")])
def test_dtype_key_wins_as_in_transformers(cli, tmp_path, dtype, torch_dtype):
    T.LlamaForCausalLM(T.LlamaConfig(**SIZES)).save_pretrained(str(tmp_path))
    path = tmp_path / "config.json"
    cfg = json.loads(path.read_text())
    cfg.update(dtype=dtype, torch_dtype=torch_dtype)
    path.write_text(json.dumps(cfg))
    model = T.AutoModelForCausalLM.from_pretrained(str(tmp_path))
    held = {p.dtype for p in model.parameters()}
    assert len(held) == 1
    name = NAMES[held.pop()]
    assert name == (dtype or torch_dtype)
    real = sum(p.numel() * p.element_size() for p in model.parameters())
    with torch.no_grad():
        cache = model(input_ids=torch.ones((1, 8), dtype=torch.long), use_cache=True).past_key_values
    kv = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    rc, out, err = cli("memory", str(path), "--seq", "8", "--json")
    assert rc == 0, err
    lines = {(x["group"], x["item"]): x["bytes"] for x in json.loads(out)["lines"]}
    assert lines[("weights", f"as configured ({name})")] == real
    assert lines[("kv cache", "b=1, s=8")] == kv
    rc, out, err = cli("flops", str(path), "--json")
    assert rc == 0, err
    assert json.loads(out)["architecture"]["dtype"] == name
