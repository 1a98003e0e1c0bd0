"""LongCat-Flash (families/longcat_flash.py) beyond the registry walk of tests/test_families.py: transformers 5.25 runs
every pick of a token through a real expert (a zero expert's at weight 0), so the FLOPs are the same whichever experts
the router picks; a MoE of zero experts alone, which it cannot run, is refused by name; the torch.save form of the
experts; the configs transformers cannot run."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from test_families import BATCH, cache_bytes, fcm_flops, meta_model, ours, spec_of  # noqa: E402

from ckptstat.core import TensorInfo  # noqa: E402
from ckptstat.errors import NoAnalyticModel, UsageError  # noqa: E402
from ckptstat.families import detect, get  # noqa: E402
from ckptstat.families.framework.graph import predict_params  # noqa: E402
from ckptstat.families.framework.spec import from_tensors  # noqa: E402

SIZES = dict(vocab_size=97, hidden_size=32, num_layers=2, num_attention_heads=4, ffn_hidden_size=40, q_lora_rank=16,
             kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, head_dim=4, v_head_dim=6, expert_ffn_hidden_size=20,
             max_position_embeddings=64)
LM = T.LongcatFlashForCausalLM
SEQ = 8


def _steered(cfg, real: bool):
    """A CPU build whose routers pick only real experts (`real`) or only zero experts: e_score_correction_bias (added
    to the scores before the top-k) far up on the chosen kind."""
    model = meta_model(LM, cfg, "cpu")
    E = cfg.n_routed_experts
    for mod in model.modules():
        if hasattr(mod, "e_score_correction_bias"):
            bias = torch.zeros_like(mod.e_score_correction_bias)
            (bias[:E] if real else bias[E:]).fill_(100.0)
            mod.e_score_correction_bias.copy_(bias)
    return model


@pytest.mark.parametrize("E,Z,k", [(3, 2, 2), (4, 1, 3), (2, 6, 4), (3, 0, 2), (3, 2, 5)])
def test_every_routing_counts_the_same(E, Z, k):
    """Real and zero experts, the router steered onto either: FlopCounterMode counts the same (each zero pick runs a
    real expert at weight 0), and the template's FLOPs, parameters and cache equal transformers'."""
    cfg = T.LongcatFlashConfig(**SIZES, n_routed_experts=E, zero_expert_num=Z, moe_topk=k)
    real, zero = _steered(cfg, True), _steered(cfg, False)
    spec = spec_of(LM, cfg)
    assert get("longcat_flash").flops_refused(spec) is None
    for seq in (SEQ, 13):
        assert ours(spec, seq, BATCH) == fcm_flops(real, seq, BATCH, "cpu") == fcm_flops(zero, seq, BATCH, "cpu"), seq
    assert predict_params(spec)["total"] == real.num_parameters()
    assert get("longcat_flash").kv_cache(spec, BATCH, SEQ, SEQ, 4)[0][1] == cache_bytes(real, SEQ, BATCH)


def test_zero_experts_alone_are_refused_naming_why(tmp_path):
    """n_routed_experts 0: transformers 5.25 cannot run the MoE (its grouped experts need one); the FLOPs are refused
    in one line that says so, and the meta path's failure after it."""
    from ckptstat.analysis import flops, meta

    cfg = T.LongcatFlashConfig(**SIZES, n_routed_experts=0, zero_expert_num=3, moe_topk=2)
    with pytest.raises(RuntimeError):
        fcm_flops(_steered(cfg, False), SEQ, BATCH, "cpu")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(cfg.to_dict(), architectures=["LongcatFlashForCausalLM"]), default=str))
    with pytest.raises(UsageError) as e:
        flops.run(meta.load(str(path), None, [SEQ]), 1, SEQ)
    why = str(e.value)
    assert "\n" not in why and why.index("n_routed_experts 0") < why.index("on the meta device")


def test_a_torch_save_of_the_fused_experts_is_found_and_counted():
    """The in-memory form (mlp.experts.gate_up_proj [E, 2f, h], down_proj [E, h, f]) as a state_dict holds it."""
    cfg = T.LongcatFlashConfig(**SIZES, n_routed_experts=3, zero_expert_num=2, moe_topk=2, tie_word_embeddings=True)
    with torch.device("meta"):
        model = LM._from_config(cfg)
    first: dict[int, str] = {}
    names = {n: TensorInfo(n, "F32", tuple(t.shape), "pytorch_model.bin", None, 4 * t.numel(),
                           storage=first.setdefault(id(t), n)) for n, t in model.state_dict(keep_vars=True).items()}
    names = {n: t for n, t in names.items() if t.storage == n}
    assert "model.layers.0.mlp.experts.gate_up_proj" in names
    assert detect(names, None).family == "longcat_flash"
    inferred = from_tensors("longcat_flash", names)
    assert (inferred.experts, inferred.variant.zero_experts) == (3, 2)   # type: ignore[union-attr]
    assert predict_params(inferred)["total"] == model.num_parameters()


@pytest.mark.parametrize("bad", [dict(head_dim=8), dict(qk_head_dim=10)])
def test_configs_transformers_cannot_run_are_refused(bad):
    """head_dim other than qk_rope_head_dim (the rotary table's width) or a qk_head_dim other than nope + rope (the
    query's view): transformers' forward fails, ckptstat says why."""
    cfg = T.LongcatFlashConfig(**{**SIZES, **bad}, n_routed_experts=3, zero_expert_num=0, moe_topk=2)
    with pytest.raises(RuntimeError):
        fcm_flops(meta_model(LM, cfg, "cpu"), SEQ, 1, "cpu")
    with pytest.raises((UsageError, NoAnalyticModel), match="head_dim"):
        spec_of(LM, cfg)


def test_published_size_parameters_are_transformers_build():
    """LongcatFlashConfig's defaults (LongCat-Flash-Chat's sizes: 28 layers, 512 real and 256 zero experts, top 12): the
    parameters transformers builds on the meta device (num_parameters())."""
    cfg = T.LongcatFlashConfig()
    with torch.device("meta"):
        model = LM._from_config(cfg)
    assert predict_params(spec_of(LM, cfg))["total"] == model.num_parameters()


def test_a_config_naming_num_hidden_layers_has_half_as_many_layers():
    """LongcatFlashConfig's num_hidden_layers is 2 x num_layers (two attentions per layer); a config.json that names only
    it gets num_layers = num_hidden_layers // 2, as the class's setter does."""
    from ckptstat.families.framework.spec import from_config

    d = {**SIZES, "n_routed_experts": 3, "zero_expert_num": 0, "moe_topk": 2, "model_type": "longcat_flash",
         "architectures": ["LongcatFlashForCausalLM"]}
    d.pop("num_layers")
    cfg = T.LongcatFlashConfig.from_dict({**d, "num_hidden_layers": 6})
    spec = from_config({**d, "num_hidden_layers": 6})
    assert spec.layers == cfg.num_layers == 3
    assert predict_params(spec)["total"] == meta_model(LM, cfg).num_parameters()


def test_memory_of_zero_experts_alone_answers_weights_and_cache(tmp_path, cli):
    """`memory` counts no FLOPs: where only they are refused (no real expert), it answers from the op template, its
    weights = transformers' num_parameters() x 4 B and its cache the template's; no active parameter count, and a note
    says why; `flops` refuses."""
    cfg = T.LongcatFlashConfig(**SIZES, n_routed_experts=0, zero_expert_num=3, moe_topk=2)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(cfg.to_dict(), architectures=["LongcatFlashForCausalLM"], torch_dtype="float32"),
                               default=str))
    code, out, err = cli("memory", str(path), "--seq", str(SEQ), "--batch", str(BATCH), "--json")
    assert code == 0, err
    r = json.loads(out)
    lines = {(x["group"], x["item"]): x["bytes"] for x in r["fit"]["lines"]}
    assert lines[("weights", "resident")] == meta_model(LM, cfg).num_parameters() * 4
    spec = spec_of(LM, cfg)
    assert sum(v for (g, _), v in lines.items() if g == "kv cache") == \
        get("longcat_flash").kv_cache(spec, BATCH, SEQ, SEQ, 4)[0][1]
    assert not any("active" in item for _, item in lines) and r["parameters"]["active"] is None
    assert any("n_routed_experts 0" in n and "not its FLOPs" in n for n in r["notes"])
    code, out, err = cli("flops", str(path), "--seq", str(SEQ))
    assert code == 2 and not out and "n_routed_experts 0" in err
