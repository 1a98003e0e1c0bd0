"""LongCat-Flash (families/longcat_flash.py) beyond the registry walk of tests/test_families.py: the zero experts make
the experts' FLOPs depend on the routing unless every routing runs as many real experts, and those configs are
refused by name (the walk's samples check the others, and the refused one's parameters and cache); the torch.save
form of the experts; the configs transformers cannot run."""
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


@pytest.mark.parametrize("E,Z,k", [(3, 2, 2), (4, 1, 3), (2, 6, 4)])
def test_routing_decides_the_flops_so_they_are_refused(E, Z, k):
    """With real and zero experts and picks that can fall on either, the same weights count differently as the router
    chooses: the FLOPs are refused by name; parameters and cache are not routing's and stay exact."""
    cfg = T.LongcatFlashConfig(**SIZES, n_routed_experts=E, zero_expert_num=Z, moe_topk=k)
    real, zero = _steered(cfg, True), _steered(cfg, False)
    a, b = fcm_flops(real, SEQ, BATCH, "cpu"), fcm_flops(zero, SEQ, BATCH, "cpu")
    # each pick of a real expert runs gate, up (h -> f) and down (f -> h) on its token: torch's own shapes
    h, f = cfg.hidden_size, real.model.layers[0].mlp.experts.down_proj.shape[-1]
    picks = min(k, E) - max(0, k - Z)
    assert a - b == 2 * 3 * h * f * BATCH * SEQ * cfg.num_layers * picks > 0
    spec = spec_of(LM, cfg)
    why = get("longcat_flash").flops_refused(spec)
    assert why and f"zero_expert_num {Z}" in why
    with pytest.raises(NoAnalyticModel, match="zero_expert_num"):
        ours(spec, SEQ, BATCH)
    assert predict_params(spec)["total"] == real.num_parameters()
    assert get("longcat_flash").kv_cache(spec, BATCH, SEQ, SEQ, 4)[0][1] == cache_bytes(real, SEQ, BATCH)


@pytest.mark.parametrize("E,Z,k,real", [(3, 0, 2, True), (3, 0, 2, False), (3, 2, 5, True), (3, 2, 5, False),
                                        (0, 4, 2, False)])
def test_exact_configs_count_the_same_whatever_the_routing(E, Z, k, real):
    """No zero experts, every expert picked, or no real ones: the template's FLOPs equal FlopCounterMode's however the
    router is steered."""
    cfg = T.LongcatFlashConfig(**SIZES, n_routed_experts=E, zero_expert_num=Z, moe_topk=k)
    model = _steered(cfg, real)
    spec = spec_of(LM, cfg)
    assert get("longcat_flash").flops_refused(spec) is None
    for seq in (SEQ, 13):
        assert ours(spec, seq, BATCH) == fcm_flops(model, seq, BATCH, "cpu"), seq


def test_a_torch_save_of_the_fused_experts_is_found_and_counted():
    """The in-memory form (mlp.experts.gate_up_proj [E + Z, 2f, h], down_proj [E, h, f]) as a state_dict holds it."""
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


def test_a_routing_dependent_config_is_refused_naming_why(tmp_path):
    """The flops command's path (meta.load, then the run): the op template refuses the FLOPs, transformers cannot run
    the model on the meta device either (torch.nonzero); the one-line refusal says both, the routing's first."""
    from ckptstat.analysis import flops, meta

    cfg = T.LongcatFlashConfig(**SIZES, n_routed_experts=3, zero_expert_num=2, moe_topk=2)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(cfg.to_dict(), architectures=["LongcatFlashForCausalLM"]), default=str))
    with pytest.raises(UsageError) as e:
        flops.run(meta.load(str(path), None, [SEQ]), 1, SEQ)
    why = str(e.value)
    assert "\n" not in why and why.index("zero_expert_num 2") < why.index("on the meta device")


def test_published_size_parameters_are_transformers_build():
    """LongcatFlashConfig's defaults (LongCat-Flash-Chat's sizes: 28 layers, 512 real and 256 zero experts, top 12): the
    parameters transformers builds on the meta device, the zero experts' gate/up rows included (num_parameters())."""
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


@pytest.mark.parametrize("E,Z,k", [(3, 2, 2), (2, 6, 4)])
def test_memory_of_a_routing_dependent_config_answers_weights_and_cache(tmp_path, cli, E, Z, k):
    """`memory` counts no FLOPs: where only they depend on the routing, it answers from the op template (was: refused,
    as `flops` still is), its weights = transformers' num_parameters() x 4 B and its cache = the cache a CPU forward
    returns, whichever experts the router picks; no active parameter count (the routing decides it), and a note says
    why."""
    cfg = T.LongcatFlashConfig(**SIZES, n_routed_experts=E, zero_expert_num=Z, moe_topk=k)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(cfg.to_dict(), architectures=["LongcatFlashForCausalLM"], torch_dtype="float32"),
                               default=str))
    code, out, err = cli("memory", str(path), "--seq", str(SEQ), "--batch", str(BATCH), "--json")
    assert code == 0, err
    r = json.loads(out)
    lines = {(x["group"], x["item"]): x["bytes"] for x in r["fit"]["lines"]}
    for real in (True, False):
        model = _steered(cfg, real)
        assert lines[("weights", "resident")] == model.num_parameters() * 4
        assert sum(v for (g, _), v in lines.items() if g == "kv cache") == cache_bytes(model, SEQ, BATCH)
    assert not any("active" in item for _, item in lines) and r["parameters"]["active"] is None
    assert any(f"zero_expert_num {Z}" in n and "not its FLOPs" in n for n in r["notes"])
    code, out, err = cli("flops", str(path), "--seq", str(SEQ))
    assert code == 2 and not out and f"zero_expert_num {Z}" in err
