"""`ckptstat diff` of a transformers 5 MoE's save_pretrained against a torch.save of its `model.state_dict()`: the
same model. In memory its experts are fused (`mlp.experts.gate_up_proj` [E, 2I, H], `down_proj` [E, H, I]); the save
writes them per expert (Mixtral's `block_sparse_moe.experts.N.w1` / `w3` / `w2`, Qwen3-MoE's `mlp.experts.N.gate_proj`
...). Was: every expert `removed`, the fused stacks `added`, exit 1. Oracle: the tensors torch.load and safetensors
give back, the per-expert slices compared with torch.equal."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

SMALL = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             num_experts_per_tok=2)
MODELS = {"mixtral": (MixtralForCausalLM, MixtralConfig(intermediate_size=48, num_local_experts=3, **SMALL)),
          "qwen3_moe": (Qwen3MoeForCausalLM, Qwen3MoeConfig(intermediate_size=48, moe_intermediate_size=16, num_experts=4,
                                                           head_dim=8, **SMALL))}


def _diff(a: str, b: str) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "-m", "ckptstat", "diff", a, b, "--json"], capture_output=True, text=True)
    return p.returncode, json.loads(p.stdout)


@pytest.mark.parametrize("case", sorted(MODELS))
def test_fused_state_dict_against_save_pretrained(tmp_path, case) -> None:
    cls, config = MODELS[case]
    torch.manual_seed(0)
    model = cls(config)
    model.save_pretrained(str(tmp_path / "saved"))
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    fused = [k for k in sd if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]
    saved = load_file(str(tmp_path / "saved" / "model.safetensors"))
    assert fused and not any(k in saved for k in fused)          # the two layouts differ in their names
    torch.save(sd, str(tmp_path / "sd.pt"))
    rc, r = _diff(str(tmp_path / "saved"), str(tmp_path / "sd.pt"))
    assert rc == 0 and r["same"] and set(r["counts"]) and r["counts"]["equal"] == len(saved), r["counts"]

    # one element of expert 1's up rows and one of expert 2's down_proj moved: those two slices alone differ
    gu = next(k for k in fused if k.endswith("gate_up_proj"))
    dn = next(k for k in fused if k.endswith("down_proj"))
    changed = {k: v.clone() for k, v in sd.items()}
    half = changed[gu].shape[1] // 2
    changed[gu][1, half + 3, 5] += 0.25
    changed[dn][2, 4, 1] -= 0.5
    for fmt, path in (("pt", tmp_path / "changed.pt"), ("safetensors", tmp_path / "changed.safetensors")):
        torch.save(changed, str(path)) if fmt == "pt" else save_file(changed, str(path))
        rc, r = _diff(str(tmp_path / "saved"), str(path))
        differ = {t["name"]: t for t in r["tensors"] if t["status"] != "equal"}
        layer = gu.split(".experts.")[0].removeprefix("model.")
        assert rc == 1 and sorted(differ) == [f"{layer}.experts.1.up_proj.weight", f"{layer}.experts.2.down_proj.weight"]
        for name, (fused_name, e, rows) in {f"{layer}.experts.1.up_proj.weight": (gu, 1, slice(half, None)),
                                           f"{layer}.experts.2.down_proj.weight": (dn, 2, slice(None))}.items():
            b_side = changed[fused_name][e, rows].double()
            a_side = saved[differ[name]["a_name"]].double()
            assert not torch.equal(a_side, b_side)
            assert differ[name]["max_abs"] == (a_side - b_side).abs().max().item()
