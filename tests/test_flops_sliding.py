"""`windowed_attention_flops` of decoders whose sliding window covers only some layers (Qwen2 by
max_window_layers, Qwen3 by layer_types, Gemma2 alternating) or all of them (Mistral).

transformers' eager attention windows a layer by masking (create_sliding_window_causal_mask), so
FlopCounterMode sees every score whatever the window: the test checks that (the matmul total is the one
without a window) and takes the windowed figure's oracle from the model itself: which layers slide from
config.layer_types (Mistral: the DynamicSlidingWindowLayers of its cache), and the (query, key) pairs a
windowed kernel needs from the nonzero probabilities eager attention returns (output_attentions) in those
layers. The other layers count as attention_flops counts them: s x s. With --causal-halving attention_flops
itself counts every layer's unmasked pairs, windows included, and no second figure is given."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from ckptstat.analysis import flops as fl  # noqa: E402
from ckptstat.census.model import load  # noqa: E402

TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
            num_hidden_layers=4, max_position_embeddings=64, sliding_window=4)
CASES = [
    ("qwen2-max-window-layers", "Qwen2Config", "Qwen2ForCausalLM", dict(use_sliding_window=True, max_window_layers=2)),
    ("qwen3-layer-types", "Qwen3Config", "Qwen3ForCausalLM",
     dict(use_sliding_window=True, head_dim=8, layer_types=["sliding_attention", "full_attention"] * 2)),
    ("mistral-all-layers", "MistralConfig", "MistralForCausalLM", {}),
    ("gemma2-alternating", "Gemma2Config", "Gemma2ForCausalLM", dict(head_dim=8)),
]
BATCH, SEQ = 2, 10


def eager_model(tmp_path, cfg_name: str, model_name: str, config: dict):
    """(the transformers model, eager attention, seeded; its config.json naming the class) of `config`."""
    cfg = getattr(T, cfg_name)(**config)
    torch.manual_seed(0)
    model = getattr(T, model_name)._from_config(cfg, attn_implementation="eager").eval()
    d = cfg.to_dict()
    d["architectures"] = [model_name]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(d))
    return model, p


def _model_and_load(tmp_path, cfg_name: str, model_name: str, kwargs: dict):
    model, p = eager_model(tmp_path, cfg_name, model_name, {**TINY, **kwargs})
    return model, load(p)


def _sliding_layers(model) -> list[int]:
    types = getattr(model.config, "layer_types", None)
    if types is not None:
        return [i for i, t in enumerate(types) if t == "sliding_attention"]
    with torch.no_grad():    # MistralConfig has no layer_types: every layer gets a sliding cache layer
        cache = model(input_ids=torch.zeros((1, 2), dtype=torch.long), use_cache=True).past_key_values
    return [i for i, layer in enumerate(cache.layers) if type(layer).__name__ == "DynamicSlidingWindowLayer"]


@pytest.mark.parametrize("cfg_name,model_name,kwargs", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("halve", [False, True], ids=["eager", "causal-halving"])
def test_windowed_attention_counts_only_the_sliding_layers(tmp_path, cfg_name, model_name, kwargs, halve):
    model, m = _model_and_load(tmp_path, cfg_name, model_name, kwargs)
    ids = torch.arange(BATCH * SEQ).reshape(BATCH, SEQ) % TINY["vocab_size"]
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(input_ids=ids, output_attentions=True, use_cache=False)
    run = fl.run(m, BATCH, SEQ, causal_halving=halve)
    totals = run["totals"]
    if not halve:    # eager masks rather than skips: FlopCounterMode counts every score of every layer
        assert counter.get_total_flops() == totals["flops"]

    sliding = _sliding_layers(model)
    assert sliding and list(m.spec.sliding_layers or range(m.spec.layers)) == sliding
    d = model.config.head_dim if getattr(model.config, "head_dim", None) else TINY["hidden_size"] // TINY["num_attention_heads"]
    expected = 0
    for i, probs in enumerate(out.attentions):                 # [b, a, s_q, s_k] per layer
        unmasked = int((probs != 0).sum())
        pairs = unmasked if (i in sliding or halve) else probs.numel()
        expected += 2 * 2 * pairs * d                          # QK^T and PV, 2 FLOPs per MAC
    if halve:
        # --causal-halving already counts each sliding layer's window pairs (ops.causal_pairs): no second figure
        assert totals["attention_flops"] == expected and "windowed_attention_flops" not in totals
        return
    assert run["sliding_layers"] == sliding
    assert totals["windowed_attention_flops"] == expected
    assert totals["windowed_attention_flops"] < totals["attention_flops"]

    note = next(n for n in run["notes"] if n.startswith("sliding window"))
    n_layers = TINY["num_hidden_layers"]
    assert (f"all {n_layers} layers" in note) if len(sliding) == n_layers else (f"{len(sliding)} of {n_layers} layers" in note)
    assert "estimate" in note and "masks" in note


def test_no_windowed_figure_when_the_window_covers_the_sequence(tmp_path):
    _, m = _model_and_load(tmp_path, "Qwen2Config", "Qwen2ForCausalLM", dict(use_sliding_window=True, max_window_layers=2))
    run = fl.run(m, 1, TINY["sliding_window"])
    assert "windowed_attention_flops" not in run["totals"] and "sliding_layers" not in run


def test_layer_list_compresses_runs():
    assert fl._layer_list([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
