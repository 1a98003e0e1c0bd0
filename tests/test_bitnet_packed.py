"""BitNet b1.58's packed checkpoints (census/quant `bitnet`, docs/quantized.md): transformers' BitLinear stores four
ternary rows in each uint8 row (integrations/bitnet.py pack_weights) beside a one-element `weight_scale` buffer;
AutoBitLinear's offline checkpoints keep the ternary weights unpacked. Oracle: transformers itself, on the CPU: the
unquantised BitNetForCausalLM's parameters() are the logical count, `replace_with_bitnet_linear` (as
BitNetHfQuantizer calls it) and `save_pretrained` write the checkpoint, and transformers' own `unpack_weights` of each
stored weight has its logical shape.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.summary import summarize  # noqa: E402


@pytest.mark.parametrize("linear_class", ["bitlinear", "autobitlinear"])
@pytest.mark.parametrize("tied", [False, True])
def test_bitnet_packed_checkpoint_counts_the_logical_model(tmp_path, linear_class, tied):
    from safetensors import safe_open
    from transformers import BitNetConfig, BitNetForCausalLM
    from transformers.integrations.bitnet import replace_with_bitnet_linear, unpack_weights
    from transformers.utils.quantization_config import BitNetQuantConfig

    config = BitNetConfig(vocab_size=96, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    torch.manual_seed(0)
    model = BitNetForCausalLM(config)
    logical = {n: tuple(p.shape) for n, p in model.named_parameters()}
    quant = BitNetQuantConfig(linear_class=linear_class, quantization_mode="offline")
    # (BitNetHfQuantizer's call: the LM head, as get_modules_to_not_convert names it, stays unquantised)
    replace_with_bitnet_linear(model, modules_to_not_convert=["lm_head"], quantization_config=quant)
    model.config.quantization_config = quant
    model.save_pretrained(tmp_path)

    r = summarize(open_checkpoint(str(tmp_path)))
    assert r["parameters"]["unique"] == sum(torch.Size(s).numel() for s in logical.values()) == sum(
        p.numel() for p in BitNetForCausalLM(config).parameters())
    q = r["quantization"]
    packed = linear_class == "bitlinear"
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        stored = {n: f.get_tensor(n) for n in f.keys() if n.endswith("_proj.weight")}
    assert stored and all((t.dtype == torch.uint8) == packed for t in stored.values())
    for name, t in stored.items():   # transformers' own unpacking gives the logical shape
        assert tuple((unpack_weights(t, torch.float32) if packed else t).shape) == logical[name]
    assert [(m["method"], m["weights"]) for m in q["methods"]] == [("bitnet" if packed else "bitnet unpacked",
                                                                   len(stored))]
    assert {x["role"] for x in q["roles"]} == {"packed-weight" if packed else "quantized-weight", "scale"}
