"""optimum-quanto, HQQ, torchao and GPTQModel checkpoints (docs/quantized.md): counted by their logical shapes, as
the unquantised transformers model holds them.

Fixtures: fixtures/quantized/{quanto,hqq,torchao}-*, written by optimum-quanto (QuantizedModelForCausalLM.
save_pretrained), and by HQQ and torchao through transformers (HqqConfig, TorchAoConfig(Float8WeightOnlyConfig),
save_pretrained) on CPU, by fixtures/make_quantized2.py; fixtures/quantized/gptqmodel-* (GPTQ and AWQ), written by
GPTQModel's quantize and save on CPU, by fixtures/make_gptqmodel.py; fixtures/quantized/modelopt-* (NVFP4), written by
NVIDIA modelopt's quantize and export_hf_checkpoint on CPU, by fixtures/make_modelopt.py; each
expected.json was read from the writers' own objects (the unquantised model's parameters() and state_dict
shapes, each quantised module's state_dict names, the writer's bits). The writers are not needed here."""
from __future__ import annotations

import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from test_quantized import assert_bin_counts_the_same, assert_like_unquantised, header_sizes  # noqa: E402

from ckptstat.analysis.summary import summarize, tensors  # noqa: E402
from ckptstat.census import layout, resolve  # noqa: E402
from ckptstat.census.model import from_checkpoint  # noqa: E402
from ckptstat.census.quant import _LAYOUT_LITERALS  # noqa: E402
from ckptstat.census.quant.quanto_hqq_torchao import quanto_group  # noqa: E402
from ckptstat.formats.registry import open_checkpoint  # noqa: E402
from ckptstat.naming import QUANT_ROLES  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "quantized")
CASES = ["quanto-qint8-llama", "quanto-qfloat8-llama", "quanto-qint4-llama-grouped", "quanto-qint2-qwen2",
         "hqq-4bit-qwen2", "hqq-3bit-llama", "hqq-8bit-llama", "torchao-float8-llama",
         *sorted(c for c in os.listdir(FIXTURES) if c.startswith(("gptqmodel-", "modelopt-")) and "." not in c)]
NATIVE = "hqq-native-4bit-llama"   # HQQ's own save_quantized: qmodel.pt, its `shape` a torch.Size (no tensor)


def _path(case: str) -> str:
    return os.path.join(FIXTURES, case)


def _expected(case: str) -> dict:
    with open(os.path.join(_path(case), "expected.json")) as f:
        return json.load(f)


def _unquantised_config(path: str):
    from transformers import AutoConfig

    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cfg.pop("quantization_config", None)
    return AutoConfig.for_model(**cfg)


@pytest.mark.parametrize("case", [*CASES, NATIVE])
def test_logical_parameters_shapes_members_and_bits(case):
    path, e = _path(case), _expected(case)
    ckpt = open_checkpoint(path)
    r = summarize(ckpt)
    assert r["parameters"]["unique"] == e["parameters"]
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):   # the same oracle, rebuilt here from the fixture's own config.json
        model = AutoModelForCausalLM.from_config(_unquantised_config(path))
    assert r["parameters"]["unique"] == sum(p.numel() for p in model.parameters())
    q = layout(ckpt)
    assert q is not None and q.method == e["method"]
    assert {w.name: list(w.shape) for w in q.weights.values()} == e["shapes"]
    assert {w.name: sorted(w.members) for w in q.weights.values()} == e["members"]
    assert {w.name: w.bits for w in q.weights.values()} == e["bits"]
    assert r["quantization"]["notes"] == []
    # every piece has a quantisation role; nothing else is one (a bias stays a parameter)
    roles = {row["name"]: row["role"] for row in tensors(ckpt)["tensors"]}
    members = {m for ms in e["members"].values() for m in ms}
    assert all(roles[n] in QUANT_ROLES for n in members)
    assert all(roles[n] == "parameter" for n in roles if n not in members)
    # the literal pre-check (census/quant/) lets every weight through: one of its members holds a literal
    assert all(any(lit in m for m in ms for lit in _LAYOUT_LITERALS) for ms in e["members"].values())


@pytest.mark.parametrize("case", CASES)
def test_stored_bytes_and_bits_per_weight(case):
    """Stored bytes are the file's own tensor sizes (safetensors' header via safe_open); bits per weight =
    stored bytes x 8 / logical parameters."""
    path, e = _path(case), _expected(case)
    r = summarize(open_checkpoint(path))
    sizes = header_sizes(os.path.join(path, "model.safetensors"))
    q = r["quantization"]
    assert q["stored_bytes"] == sum(sizes[m] for ms in e["members"].values() for m in ms)
    assert q["logical_params"] == sum(torch.Size(s).numel() for s in e["shapes"].values())
    assert q["bits_per_weight"] == pytest.approx(q["stored_bytes"] * 8 / q["logical_params"], abs=1e-3)
    assert r["parameters"]["stored_bytes"] == sum(sizes.values())
    for b in r["buckets"]:
        assert b["bits_per_weight"] == pytest.approx(b["bytes"] * 8 / b["params"], abs=1e-3)


def test_roles():
    rows = {r["name"].split("q_proj.")[1]: r["role"]
            for r in tensors(open_checkpoint(_path("quanto-qint4-llama-grouped")), "*layers.0.self_attn.q_proj.*")["tensors"]}
    assert rows == {"weight._data._data": "packed-weight", "weight._scale": "scale", "weight._shift": "zero-point",
                    "input_scale": "input-scale", "output_scale": "input-scale"}
    rows = {r["name"].split("q_proj.")[1]: r["role"]
            for r in tensors(open_checkpoint(_path("quanto-qint8-llama")), "*layers.0.self_attn.q_proj.*")["tensors"]}
    assert rows == {"weight._data": "quantized-weight", "weight._scale": "scale", "input_scale": "input-scale",
                    "output_scale": "input-scale"}
    rows = {r["name"].split("q_proj.")[1]: r["role"]
            for r in tensors(open_checkpoint(_path("hqq-4bit-qwen2")), "*layers.0.self_attn.q_proj.*")["tensors"]}
    assert (rows.pop("W_q"), rows.pop("scale"), rows.pop("zero"), rows.pop("shape"), rows.pop("bias")) == \
        ("packed-weight", "scale", "zero-point", "logical-shape", "parameter")
    assert set(rows.values()) == {"quant-state"} and {"nbits", "group_size", "axis", "packing"} <= set(rows)
    rows = {r["name"].rpartition(".")[2]: r["role"]
            for r in tensors(open_checkpoint(_path("hqq-8bit-llama")), "*layers.0.self_attn.q_proj.W_q")["tensors"]}
    assert rows == {"W_q": "quantized-weight"}   # 8bit_u8: one value per byte
    rows = {r["name"].split("q_proj.")[1]: r["role"]
            for r in tensors(open_checkpoint(_path("torchao-float8-llama")), "*layers.0.self_attn.q_proj.*")["tensors"]}
    assert rows == {"_weight_qdata": "quantized-weight", "_weight_scale": "scale"}


@pytest.mark.parametrize("case", ["quanto-qint4-llama-grouped", "quanto-qint2-qwen2"])
def test_quanto_groups_hide_the_split(case):
    """quanto stores a grouped qint4/qint2 weight as [out x in / group, group]: ckptstat's copy of quanto's group
    rule gives, for each logical [out, in], the group quanto itself picked (expected.json: the QModule's
    weight_group_size); the packed data hold out x in values in rows of that group, and the layout recovers
    [out, in] from the config."""
    e = _expected(case)
    ckpt = open_checkpoint(_path(case))
    q = layout(ckpt)
    for name, (out, n_in) in e["shapes"].items():
        g = e["group_size"][name]
        assert quanto_group(n_in) == g, name
        packed = ckpt.tensors[name + "._data._data"]
        assert packed.shape[1] == (g or n_in) and packed.shape[0] == -(-(out * n_in // (g or n_in)) // (8 // e["bits"][name]))
        assert q.weights[name].shape == (out, n_in)
    if case.endswith("-grouped"):   # the fixture is built so that quanto groups (192 and 320 inputs)
        assert all(e["group_size"].values())


@pytest.mark.parametrize("case", ["quanto-qint4-llama-grouped", "quanto-qint2-qwen2", "quanto-qint8-llama",
                                  "hqq-4bit-qwen2", "hqq-3bit-llama", "torchao-float8-llama", NATIVE,
                                  *(c for c in CASES if c.startswith(("gptqmodel-", "modelopt-")))])
def test_flops_ties_and_memory_work_from_logical_shapes(case, tmp_path):
    """The quantised checkpoint resolves, ties and counts FLOPs as the same model saved unquantised by
    transformers' save_pretrained."""
    from transformers import AutoModelForCausalLM

    path, plain = _path(case), str(tmp_path / "plain")
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(_unquantised_config(path)).half().save_pretrained(plain)
    assert_like_unquantised(path, plain)


@pytest.mark.parametrize("case", CASES)
def test_layout_alone_without_config(case, tmp_path):
    """Without config.json: HQQ's `shape` tensors, quanto's bias or the sizes the other tensors show give the same
    logical shapes, and shape inference resolves the same model as the unquantised file."""
    from transformers import AutoModelForCausalLM

    src = _path(case)
    shutil.copy(os.path.join(src, "model.safetensors"), tmp_path / "bare.safetensors")
    bare, full = open_checkpoint(str(tmp_path / "bare.safetensors")), open_checkpoint(src)
    assert summarize(bare)["parameters"]["unique"] == _expected(case)["parameters"]
    qb, qf = layout(bare), layout(full)
    assert qb is not None and qb.source == "tensor layout" and qb.method == qf.method
    assert {w.name: w.shape for w in qb.weights.values()} == {w.name: w.shape for w in qf.weights.values()}
    assert summarize(bare)["quantization"]["notes"] == []
    config = _unquantised_config(src)
    sd = AutoModelForCausalLM.from_config(config).half().state_dict()
    if config.tie_word_embeddings:
        sd.pop("lm_head.weight")
    save_file({k: v.contiguous() for k, v in sd.items()}, str(tmp_path / "plain.safetensors"))
    plain = open_checkpoint(str(tmp_path / "plain.safetensors"))
    rb, rp = resolve(bare), resolve(plain)
    assert (rb.label, rb.error) == (rp.label, rp.error)
    assert from_checkpoint(bare).predicted == from_checkpoint(plain).predicted


@pytest.mark.parametrize("case", ["quanto-qint4-llama-grouped", "hqq-4bit-qwen2"])
def test_pytorch_bin(case, tmp_path):
    assert_bin_counts_the_same(_path(case), tmp_path)


def test_cli_tensors_logical_shape(cli):
    rc, out, err = cli("tensors", _path("quanto-qint4-llama-grouped"), "--filter", "*layers.0.mlp.down_proj.weight._data._data",
                       "--json")
    row = json.loads(out)["tensors"][0]
    assert rc == 0, err
    assert row["role"] == "packed-weight" and row["logical_shape"] == [192, 320]
    rc, out, err = cli(_path("hqq-3bit-llama"))
    assert rc == 0 and "hqq 3-bit" in out


# ----------------------------------------------------------------------------------- hostile headers
def _hqq_module(shape: torch.Tensor, wq: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    return {"l.W_q": torch.zeros(16, 32, dtype=torch.uint8) if wq is None else wq, "l.scale": torch.ones(32, 1),
            "l.zero": torch.ones(32, 1), "l.shape": shape, "l.nbits": torch.tensor(4, dtype=torch.int32)}


@pytest.mark.parametrize("shape", [torch.tensor([2**40, 2**20]), torch.tensor([3, 5]), torch.tensor([-32, -32]),
                                   torch.zeros(1000, dtype=torch.int64), torch.tensor([1.5, 2.0])])
def test_hqq_shape_that_does_not_fit(shape, tmp_path):
    """An HQQ `shape` tensor claiming what W_q cannot hold (or too big to read, or not integers): a note, the
    size from the scales (32 groups x 32 columns), never a crash or an allocation of the claim."""
    save_file(_hqq_module(shape), str(tmp_path / "m.safetensors"))
    r = summarize(open_checkpoint(str(tmp_path / "m.safetensors")))
    assert r["parameters"]["unique"] == 32 * 32
    assert any("shape unknown" in n for n in r["quantization"]["notes"])


def test_hqq_nothing_fits(tmp_path):
    save_file(_hqq_module(torch.tensor([7, 7]), wq=torch.zeros(3, 5, dtype=torch.int32)), str(tmp_path / "m.safetensors"))
    r = summarize(open_checkpoint(str(tmp_path / "m.safetensors")))
    assert r["parameters"]["unique"] == 3 * 5 * 4 * 2 and any("does not fit" in n for n in r["quantization"]["notes"])


def test_quanto_scale_that_does_not_fit(tmp_path):
    save_file({"l.weight._data._data": torch.zeros(8, 16, dtype=torch.uint8), "l.weight._scale": torch.ones(1000, 1),
               "l.weight._shift": torch.ones(1000, 1), "l.input_scale": torch.ones(()), "l.output_scale": torch.ones(())},
              str(tmp_path / "m.safetensors"))
    r = summarize(open_checkpoint(str(tmp_path / "m.safetensors")))
    assert r["parameters"]["unique"] == 8 * 16 * 2 and any("does not fit" in n for n in r["quantization"]["notes"])


def test_quanto_degenerate(tmp_path):
    save_file({"l.weight._data._data": torch.zeros(0, 0, dtype=torch.uint8), "l.weight._scale": torch.ones(0, 1),
               "m.weight._data._data": torch.zeros(5, dtype=torch.uint8)}, str(tmp_path / "m.safetensors"))
    r = summarize(open_checkpoint(str(tmp_path / "m.safetensors")))
    assert r["parameters"]["unique"] == 10 and r["quantization"]["notes"]


def test_quanto_shape_unknown_is_said(tmp_path):
    """A grouped qint4 weight alone in a file (no config, no bias, no other tensor): its [out, in] split is not
    stored anywhere; the count is exact and a note says the split is a guess."""
    save_file({"l.weight._data._data": torch.zeros(256, 128, dtype=torch.uint8), "l.weight._scale": torch.ones(512, 1),
               "l.weight._shift": torch.ones(512, 1)}, str(tmp_path / "m.safetensors"))
    r = summarize(open_checkpoint(str(tmp_path / "m.safetensors")))
    assert r["parameters"]["unique"] == 512 * 128 and any("quanto keeps no shape" in n for n in r["quantization"]["notes"])


def test_torchao_packed_layout_is_named_not_guessed(tmp_path):
    """A torchao subclass packed into uint8 (Int4Tensor) keeps its shape in no tensor: a note, counted as stored."""
    save_file({"l._weight_qdata": torch.zeros(8, 4, dtype=torch.uint8), "l._weight_scale": torch.ones(8, 1)},
              str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "torchao"}}))
    r = summarize(open_checkpoint(str(tmp_path)))
    assert r["parameters"]["unique"] == 8   # as any stored uint8 tensor: a buffer (docs/quantized.md, Not decoded)
    assert any("does not decode" in n for n in r["quantization"]["notes"])


@pytest.mark.parametrize("change", [{"intermediate_size": 100}, {"model_type": "no-such-model"}, {"hidden_size": "x"}])
def test_quanto_config_that_does_not_fit(change, tmp_path):
    """A config.json whose model does not fit the packed weights (or names no known model): its shapes are not
    used; the count stays exact and the shapes come from the checkpoint's own tensors."""
    src = _path("quanto-qint4-llama-grouped")
    shutil.copy(os.path.join(src, "model.safetensors"), tmp_path / "model.safetensors")
    cfg = json.loads(open(os.path.join(src, "config.json")).read())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, **change}))
    q = layout(open_checkpoint(str(tmp_path)))
    assert {w.name: list(w.shape) for w in q.weights.values()} == _expected("quanto-qint4-llama-grouped")["shapes"]


def test_hqq_native_stored_bytes(tmp_path):
    """HQQ's qmodel.pt (torch.save of {module: state dict}) read by the torch reader: stored bytes are the
    tensors torch.load finds; the shapes come from config.json's model (the pickle's torch.Size is no tensor)."""
    path = _path(NATIVE)
    saved = torch.load(os.path.join(path, "qmodel.pt"), weights_only=True)
    sizes = {f"{m}.{k}": v.numel() * v.element_size() for m, d in saved.items() for k, v in d.items()
             if isinstance(v, torch.Tensor)}
    assert all(not isinstance(d.get("shape"), torch.Tensor) for d in saved.values())
    r = summarize(open_checkpoint(path))
    e = _expected(NATIVE)
    assert r["quantization"]["stored_bytes"] == sum(sizes[m] for ms in e["members"].values() for m in ms)
    assert r["parameters"]["stored_bytes"] == sum(sizes.values())
    # without config.json the count is still exact; the shapes are then unknown, and a note says so
    shutil.copy(os.path.join(path, "qmodel.pt"), tmp_path / "qmodel.pt")
    bare = open_checkpoint(str(tmp_path / "qmodel.pt"))
    assert summarize(bare)["parameters"]["unique"] == e["parameters"]
    assert any("shape unknown" in n for n in summarize(bare)["quantization"]["notes"])


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
def test_transformers_fp8_moe_experts_keep_their_scales_fused(family, tmp_path, monkeypatch):
    """transformers 5's FineGrainedFP8 on a MoE (its quantizer run on the CPU: its GPU check bypassed, the code that
    quantises and saves is its own): save_pretrained splits the fused float8 experts back into per-expert linears but
    keeps each block's `<proj>_scale_inv` fused [E, ...]; those scales are the experts' scales, not parameters, so
    the count is the unquantised model's parameters() and the checkpoint resolves, cross-checks and counts FLOPs as
    the unquantised save does. Before: each fused scale counted as a parameter (384 too many here) and unexpected."""
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config, MixtralConfig, Qwen3MoeConfig
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer

    common = dict(vocab_size=128, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=64, torch_dtype="bfloat16", tie_word_embeddings=False)
    cfg = (Qwen3MoeConfig(**common, intermediate_size=256, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128,
                          head_dim=32) if family == "qwen3_moe"
           else MixtralConfig(**common, intermediate_size=128, num_local_experts=4, num_experts_per_tok=2))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    plain, quantised = str(tmp_path / "plain"), str(tmp_path / "fp8")
    model.save_pretrained(plain)
    monkeypatch.setattr(FineGrainedFP8HfQuantizer, "validate_environment", lambda self, *a, **k: None)
    q = AutoModelForCausalLM.from_pretrained(plain, quantization_config=FineGrainedFP8Config(weight_block_size=(32, 32)),
                                             device_map="cpu")
    q.save_pretrained(quantised)
    with safe_open(os.path.join(quantised, "model.safetensors"), "pt") as f:
        stored = {k: (str(f.get_slice(k).get_dtype()), f.get_slice(k).get_shape()) for k in f.keys()}
    fused = [k for k in stored if k.endswith("proj_scale_inv") and ".experts." in k and ".experts.0." not in k]
    assert fused and all(len(stored[k][1]) == 3 for k in fused)   # (the layout this test is about)
    r = summarize(open_checkpoint(quantised))
    assert r["parameters"]["unique"] == sum(p.numel() for p in model.parameters())
    roles = {row["name"]: row["role"] for row in tensors(open_checkpoint(quantised))["tensors"]}
    assert all(roles[k] == "scale" for k in fused)
    assert all(roles[k] == "quantized-weight" for k, (dt, _) in stored.items() if dt == "F8_E4M3")
    assert_like_unquantised(quantised, plain)
    # stats: each expert's weight is what transformers' Fp8Dequantize makes of the fused tensors its loader reads back
    # (the expert's slice of the fused weight and of its scale grid), in the model's dtype
    from test_stats_dequantized import _by_name, _check, _report
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize

    loaded = AutoModelForCausalLM.from_pretrained(quantised, device_map="cpu").state_dict()
    rows, checked = _by_name(_report(quantised)), 0
    for k, v in loaded.items():
        if k.endswith(("experts.gate_up_proj", "experts.down_proj")):
            layer, fused_name = k.split(".mlp.")[0] + ".", k.rpartition(".")[2] + "_scale_inv"   # (Mixtral's file:
            (at,) = [n.rpartition(".")[0] for n in stored if n.startswith(layer) and n.endswith("experts." + fused_name)]
            parts = [n for n in stored if n.startswith(at + ".0.")]   # block_sparse_moe, its experts w1, w3, w2)
            gate_up = k.endswith("gate_up_proj")
            names = sorted(parts, key=lambda n: ("gate" not in n and "w1" not in n, n))
            for e in range(v.shape[0]):
                x = Fp8Dequantize(None)._dequantize_one(v[e], loaded[k + "_scale_inv"][e], torch.bfloat16)
                split = (x[: x.shape[0] // 2], x[x.shape[0] // 2:]) if gate_up else (x,)
                mine = [n for n in names if ("down" in n or "w2" in n) != gate_up]
                for name, y in zip(mine, split):
                    name = name.replace(".experts.0.", f".experts.{e}.")
                    assert rows[name]["dtype"] == "BF16"
                    _check(rows[name], y)
                    checked += 1
    assert checked == sum(1 for dt, _ in stored.values() if dt == "F8_E4M3") - 8   # (all but the attention's)
