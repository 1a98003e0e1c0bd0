"""`flops --causal-halving`: one rule (families/framework/ops.py causal_pairs, window_groups) for every decoder.

The oracle is the mask transformers itself hands each layer: a forward pre-hook on every self-attention
module of the eager model records its `attention_mask` (built by masking_utils' create_causal_mask /
create_sliding_window_causal_mask, or Qwen2-MoE's own causal mask, as the modeling code picks per layer),
and the halved attention MACs must equal the positions that mask lets through x heads x head_dim, for
both bmm's (QK^T and PV). Without --causal-halving nothing changes: FlopCounterMode's total, every
layer's full s x s square."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from test_families import flop_counter  # noqa: E402
from test_flops_sliding import eager_model  # noqa: E402

from ckptstat.analysis import flops as fl  # noqa: E402
from ckptstat.census.model import load  # noqa: E402
from ckptstat.cli import main  # noqa: E402

TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
            num_hidden_layers=4, max_position_embeddings=64)
BATCH, SEQ, WINDOW = 2, 10, 4
CASES = [
    ("llama-no-window", "LlamaConfig", "LlamaForCausalLM", {}),
    ("mistral-every-layer", "MistralConfig", "MistralForCausalLM", dict(sliding_window=WINDOW)),
    ("qwen2-max-window-layers", "Qwen2Config", "Qwen2ForCausalLM",
     dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=2)),
    ("qwen3-layer-types", "Qwen3Config", "Qwen3ForCausalLM",
     dict(use_sliding_window=True, sliding_window=WINDOW, head_dim=8,
          layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"])),
    ("phi3-every-layer", "Phi3Config", "Phi3ForCausalLM", dict(sliding_window=WINDOW, pad_token_id=0)),
    ("gemma2-alternating", "Gemma2Config", "Gemma2ForCausalLM", dict(sliding_window=WINDOW, head_dim=8)),
    ("gemma3-five-to-one", "Gemma3TextConfig", "Gemma3ForCausalLM",
     dict(sliding_window=WINDOW, head_dim=8, num_hidden_layers=7)),
    ("qwen2-moe-every-layer", "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
     dict(use_sliding_window=True, sliding_window=WINDOW, moe_intermediate_size=24, shared_expert_intermediate_size=40,
          num_experts=4, num_experts_per_tok=2, mlp_only_layers=[1])),
]


def _case(tmp_path, cfg_name: str, model_name: str, kwargs: dict):
    model, p = eager_model(tmp_path, cfg_name, model_name, {**TINY, **kwargs})
    return model, load(p), p


def _layer_masks(model) -> list[torch.Tensor]:
    """The attention_mask each decoder layer's self-attention receives in one eager forward, as booleans
    (True: the score is kept). Eager masks are additive (0 kept, dtype min masked) or boolean; Qwen2-MoE's
    is one column wider, and its eager attention slices it to the keys (`[:, :, :, : key_states.shape[-2]]`)."""
    masks: list[torch.Tensor] = []

    def grab(module, args, kwargs):
        m = kwargs["attention_mask"][:, :, :, :SEQ]
        masks.append(m if m.dtype == torch.bool else m == 0)

    hooks = [layer.self_attn.register_forward_pre_hook(grab, with_kwargs=True) for layer in model.model.layers]
    ids = torch.arange(BATCH * SEQ).reshape(BATCH, SEQ) % TINY["vocab_size"]
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for h in hooks:
        h.remove()
    assert len(masks) == model.config.num_hidden_layers
    return masks


def _attention_macs(run: dict) -> int:
    return sum(r["macs"] for r in run["modules"] if r["kind"] == "attention")


def _head_dim(cfg) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


@pytest.mark.parametrize("cfg_name,model_name,kwargs", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_halved_attention_counts_the_pairs_each_layers_mask_keeps(tmp_path, cfg_name, model_name, kwargs):
    model, m, _ = _case(tmp_path, cfg_name, model_name, kwargs)
    masks = _layer_masks(model)
    cfg = model.config
    per_pair = cfg.num_attention_heads * _head_dim(cfg)
    for mask in masks:   # [b, 1, s, s]: one mask broadcast over the heads
        assert tuple(mask.shape) == (BATCH, 1, SEQ, SEQ)
    kept = sum(int(mask.sum()) for mask in masks)           # batch included

    halved = fl.run(m, BATCH, SEQ, causal_halving=True)
    assert _attention_macs(halved) == 2 * kept * per_pair   # QK^T and PV over the same pairs
    scores = sum(r["macs"] for r in halved["modules"] if r["module"].endswith("scores (QK^T)"))
    assert scores == kept * per_pair
    assert "windowed_attention_flops" not in halved["totals"]   # the halved count is already windowed

    full = fl.run(m, BATCH, SEQ)
    assert _attention_macs(full) == 2 * sum(mask.numel() for mask in masks) * per_pair
    assert full["totals"]["flops"] - halved["totals"]["flops"] == 2 * (_attention_macs(full) - _attention_macs(halved))
    ids = torch.arange(BATCH * SEQ).reshape(BATCH, SEQ) % TINY["vocab_size"]
    with torch.no_grad(), flop_counter() as counter:   # grouped_mm too (Qwen2-MoE's experts, transformers 5's default)
        model(input_ids=ids, use_cache=False)
    assert counter.get_total_flops() == full["totals"]["flops"]     # unhalved: what eager computes

    # one element-wise rule for every family: a score row's element-wise estimate follows its pairs as
    # its MACs do (the same per-score cost, halved or not)
    rows = {r["module"]: r for r in full["modules"] if r["kind"] == "attention"}
    for r in halved["modules"]:
        if r["module"].endswith("scores (QK^T)"):
            f = rows[r["module"]]
            assert r["elementwise_flops"] * f["macs"] == f["elementwise_flops"] * r["macs"]


def test_sliding_and_full_layers_are_separate_rows(tmp_path):
    """A decoder with both kinds of layer shows each kind's attention apart; the layer count per kind
    is the config's (Qwen2: max_window_layers full, the rest sliding)."""
    _, m, _ = _case(tmp_path, "Qwen2Config", "Qwen2ForCausalLM",
                    dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1))
    calls = {r["module"]: r["calls"] for r in fl.run(m, BATCH, SEQ, causal_halving=True)["modules"] if r["kind"] == "attention"}
    assert calls == {"layers[3 sliding].self_attn.scores (QK^T)": 3, "layers[3 sliding].self_attn.context (PV)": 3,
                     "layers[1 full].self_attn.scores (QK^T)": 1, "layers[1 full].self_attn.context (PV)": 1}


def _numpy_mask(n: int, window: int | None) -> np.ndarray:
    """transformers masking_utils: causal_mask_function (kv <= q) and sliding_window_overlay (kv > q - w)."""
    q, kv = np.arange(n)[:, None], np.arange(n)[None, :]
    keep = kv <= q
    return keep & (kv > q - window) if window else keep


def test_moe_groups_split_by_window(tmp_path):
    """qwen_moe's layout (sparse and dense MLP layers) splits its attention by window: a config whose layer_types
    mark some layers sliding counts each layer's own mask (numpy, as transformers builds it), and the split
    changes neither the parameters nor the unhalved FLOPs."""
    types = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]
    base = dict(TINY, use_sliding_window=True, sliding_window=WINDOW, moe_intermediate_size=24, num_experts=4,
                num_experts_per_tok=2, head_dim=8, mlp_only_layers=[2], architectures=["Qwen3MoeForCausalLM"])
    cfg = T.Qwen3MoeConfig(**base).to_dict()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "b" / "config.json").write_text(json.dumps({**cfg, "layer_types": types}))
    every, some = load(tmp_path / "a" / "config.json"), load(tmp_path / "b" / "config.json")
    assert some.spec.sliding_layers == (0, 2, 3) and every.spec.sliding_layers == ()
    assert some.predicted == every.predicted
    assert fl.run(some, BATCH, SEQ)["totals"]["flops"] == fl.run(every, BATCH, SEQ)["totals"]["flops"]
    per_pair = TINY["num_attention_heads"] * 8
    for model, layer_types in ((some, types), (every, ["sliding_attention"] * 4)):
        kept = sum(int(_numpy_mask(SEQ, WINDOW if t == "sliding_attention" else None).sum()) for t in layer_types)
        assert _attention_macs(fl.run(model, BATCH, SEQ, causal_halving=True)) == 2 * BATCH * kept * per_pair
    labels = {r["module"].split(".")[0] for r in fl.run(some, BATCH, SEQ)["modules"] if r["kind"] == "attention"}
    assert labels == {"layers[3 sliding]", "layers[1 full]"}


def test_report_states_the_rule(tmp_path, capsys):
    _, m, p = _case(tmp_path, "MistralConfig", "MistralForCausalLM", dict(sliding_window=WINDOW))
    on = fl.report(m, BATCH, [SEQ], causal_halving=True)["counting"]["attention"]
    assert "min(i + 1, w)" in on and "sliding_window" in on and "element-wise" in on
    off = fl.report(m, BATCH, [SEQ])["counting"]["attention"]
    assert "sliding windows included" in off and "--causal-halving" in off
    assert main(["flops", str(p), "--seq", str(SEQ), "--causal-halving"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "query i seeing min(i + 1, w) keys" in text
