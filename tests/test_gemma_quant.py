"""transformers' Gemma quantisation (quant_method gemma, integrations/gemma_quant.py; census/quant `gemma int2/4/8`,
docs/quantized.md): QuantizedLinear's int8 or packed int4 / int2 weights with per-row scales and SRQ activation
scales, QuantizedEmbedding's packed table. Oracle: transformers itself on the CPU: `replace_with_quant_layers` (as the
Gemma quantizer calls it, the LM head left out) and `save_pretrained` write the checkpoint; the unquantised model's
parameters are the logical count and shapes, and each quantised module's own `_dequantize_weights` has them too.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.summary import summarize  # noqa: E402
from ckptstat.census.quant import logical  # noqa: E402


@pytest.mark.parametrize("embeddings", [False, True])
def test_gemma_quantised_checkpoint_is_the_logical_model(tmp_path, embeddings):
    """(Untied: a quantised embedding table cannot stay tied to the unquantised LM head, which save_pretrained then
    stores beside it.)"""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    from transformers.integrations.gemma_quant import QuantizedEmbedding, QuantizedLinear, replace_with_quant_layers
    from transformers.utils.quantization_config import GemmaQuantizationConfig

    config = Gemma3TextConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False)
    model = Gemma3ForCausalLM(config)
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    quant = GemmaQuantizationConfig(num_bits=4, quantize_embeddings=embeddings, modules_to_not_convert=["lm_head"],
                                    module_quant_configs={r"mlp\.down_proj": {"num_bits": 2},
                                                          r"self_attn\.o_proj": {"num_bits": 8}})
    replace_with_quant_layers(model, quantization_config=quant, modules_to_not_convert=["lm_head"])
    model.config.quantization_config = quant
    model.save_pretrained(tmp_path)
    quantised = {name: m for name, m in model.named_modules() if isinstance(m, (QuantizedLinear, QuantizedEmbedding))}
    assert any(isinstance(m, QuantizedEmbedding) for m in quantised.values()) == embeddings

    ckpt = open_checkpoint(str(tmp_path))
    r = summarize(ckpt)
    assert r["parameters"]["unique"] == sum(torch.Size(s).numel() for s in shapes.values())
    view = logical(ckpt).tensors
    for name, m in quantised.items():
        want = tuple((m.weight if isinstance(m, QuantizedEmbedding) else m._dequantize_weights()).shape)
        assert tuple(view[name + ".weight"].shape) == want == shapes[name + ".weight"]
    bits = {m.num_bits for m in quantised.values()}
    assert {x["method"] for x in r["quantization"]["methods"]} == {f"gemma int{b}" for b in bits} == {
        "gemma int2", "gemma int4", "gemma int8"}
    assert sum(x["weights"] for x in r["quantization"]["methods"]) == len(quantised)
