"""Apple MLX checkpoints (docs/quantized.md, MLX): mlx_lm's packed uint32 weights with their scales and biases
count the logical parameters MLX itself counts, with the bits, group sizes and modes MLX built them with.

Fixtures: fixtures/mlx/<case>, written by mlx_lm's own convert from transformers models (fixtures/make_mlx.py);
fixtures/expected_mlx.json holds what MLX made of each (the model mlx_lm.load builds: its parameters, each quantised
module's bits, group size, mode and the shape mx.dequantize returns, mlx_lm's get_total_parameters and
compute_bits_per_weight). Neither mlx nor torch is needed here, except by the tests that build the unquantised
transformers model (importorskip)."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from ckptstat.analysis.audit import audit_record
from ckptstat.analysis.audit.find import discover
from ckptstat.analysis.flops import run
from ckptstat.analysis.memory import report as memory_report
from ckptstat.analysis.stats import collect
from ckptstat.analysis.summary import summarize, tensors
from ckptstat.analysis.ties import audit
from ckptstat.census import layout
from ckptstat.census.model import from_checkpoint
from ckptstat.census.quant import _LAYOUT_LITERALS
from ckptstat.census.resolution import resolve
from ckptstat.formats.registry import open_checkpoint

HERE = os.path.dirname(__file__)
FIXTURES = os.path.join(HERE, "..", "fixtures", "mlx")
with open(os.path.join(HERE, "..", "fixtures", "expected_mlx.json")) as _f:
    EXPECTED = json.load(_f)
CASES = sorted(c for c, e in EXPECTED["cases"].items() if e["weights"])   # quantised (the bf16 conversion: RELAID)
# mlx_lm stacks the experts (switch_mlp), splits MLA's kv_b_proj and keeps conv1d weights channels last: other
# names and shapes than transformers'
RELAID = ("qwen3_moe-8bit", "mixtral-mxfp4", "olmoe-4bit", "qwen2_moe-4bit", "granitemoe-4bit", "deepseek_v3-4bit-g32",
          "deepseek_v3-mla-4bit-g32", "ernie4_5_moe-4bit", "gpt_oss-mxfp4-experts", "qwen3_next-4bit-g32",
          "mamba2-4bit-g32", "deepseek_v3-bf16")
ROLES = {"weight": "packed-weight", "scales": "scale", "biases": "zero-point"}
# a multimodal wrapper's towers, which mlx_lm's sanitize drops (its llama4's to_remove, qwen3_vl_moe's pop("visual")):
# every tensor of the source (fixtures/mlx-sources) under these prefixes; the conversion holds the text model alone
TOWERS = {"llama4-4bit-g32": ("vision_model.", "multi_modal_projector."), "qwen3_vl_moe-4bit-g32": ("model.visual.",)}


def towers(case: str) -> dict[str, int]:
    """The source's tensors under the case's TOWERS, with their elements."""
    if case not in TOWERS:
        return {}
    source = open_checkpoint(os.path.join(HERE, "..", "fixtures", "mlx-sources", case))
    return {n: t.numel for n, t in source.tensors.items() if n.startswith(TOWERS[case])}


def _path(case: str) -> str:
    return os.path.join(FIXTURES, case)


def _method(w: dict) -> str:
    return "mlx " + (f"affine {w['bits']}-bit" if w["mode"] == "affine" else w["mode"])


@pytest.mark.parametrize("case", CASES)
def test_counts_bits_and_bytes_are_mlx_own(case):
    """The logical count is the unquantised transformers model's parameters() (less what mlx_lm drops), and MLX's
    every array less the buffers transformers saves (MLX has none: DeepSeek-V3's e_score_correction_bias is an MLX
    parameter), a quantised weight by the shape mx.dequantize returns; mlx_lm's get_total_parameters where it counts
    every array (it counts leaf modules only: Mamba 2's and Qwen3-Next's A_log, D and dt_bias, which the mixer holds
    itself, and gpt-oss's attention sinks are left out). Stored bytes are the arrays' nbytes, and bits per weight
    mlx_lm's compute_bits_per_weight rule (stored bits over parameters: it also counts arrays that are no parameter,
    gpt-oss's YaRN frequencies), each less the buffers."""
    e = EXPECTED["cases"][case]
    r = summarize(open_checkpoint(_path(case)))
    p = r["parameters"]
    buffers = [x for x in r["non_parameters"] if x["role"] == "buffer"]
    assert sorted(n for x in buffers for n in x["names"]) == e["unquantised_buffers"]
    held = sum(x["elements"] for x in buffers), sum(x["bytes"] for x in buffers)
    every = e["parameters_every_array"]
    assert p["unique"] == every - held[0]
    # the exceptions: mlx_lm drops ERNIE 4.5's e_score_correction_bias (test_relaid_like_unquantised) and a wrapper's
    # towers, the whole difference
    assert (p["unique"] == e["unquantised_parameters"] - sum(towers(case).values())) == (case != "ernie4_5_moe-4bit")
    assert (every == e["parameters"]) == (e["model"]["model_type"] not in ("mamba2", "qwen3_next", "gpt_oss"))
    assert p["stored_bytes"] == e["stored_bytes"] - held[1]
    assert e["bits_per_weight"] == pytest.approx(e["model_bytes"] * 8 / e["parameters"], abs=1e-4)   # mlx_lm's rule
    assert (e["model_bytes"] == e["stored_bytes"]) == (e["model"]["model_type"] != "gpt_oss")   # (its YaRN frequencies)
    assert p["bits_per_weight"] == pytest.approx((e["stored_bytes"] - held[1]) * 8 / (every - held[0]), abs=1e-4)
    q = r["quantization"]
    assert q["notes"] == [] and q["source"] == "config.json quantization (mlx)"
    assert q["method"] == ", ".join(sorted({_method(w) for w in e["weights"].values()}))
    assert q["config"]["bits"] == e["quantization"]["bits"] and q["config"]["group_size"] == e["quantization"]["group_size"]


@pytest.mark.parametrize("case", CASES)
def test_each_weight_is_what_mlx_built(case):
    """Per quantised module: the shape mx.dequantize returns, the parameters MLX's quantised module holds, its
    bits and mode; every stored piece has its role, everything else stays a parameter."""
    e = EXPECTED["cases"][case]
    ckpt = open_checkpoint(_path(case))
    q = layout(ckpt)
    assert q is not None
    assert {n: list(w.shape) for n, w in q.weights.items()} == {n: w["shape"] for n, w in e["weights"].items()}
    assert {n: sorted(w.members) for n, w in q.weights.items()} == {n: w["members"] for n, w in e["weights"].items()}
    assert {n: (w.bits, w.method) for n, w in q.weights.items()} == \
        {n: (w["bits"], _method(w)) for n, w in e["weights"].items()}
    roles = {row["name"]: row["role"] for row in tensors(ckpt)["tensors"]}
    assert set(roles) == set(e["tensors"])    # the names MLX's model holds, no more
    members = {m for w in e["weights"].values() for m in w["members"]}
    assert {n: r for n, r in roles.items() if n in members} == {m: ROLES[m.rpartition(".")[2]] for m in members}
    assert all(r == ("buffer" if n in e["unquantised_buffers"] else "parameter")
               for n, r in roles.items() if n not in members)
    assert all(any(lit in m for m in w["members"] for lit in _LAYOUT_LITERALS) for w in e["weights"].values())


def test_mixed_precision_recipe():
    """mlx_lm's mixed_3_6 recipe: 6 bits for lm_head and the v_proj/down_proj it picks, 3 for the rest, each named in
    config.json's quantization; the summary lists both widths with their bits per weight."""
    e = EXPECTED["cases"]["llama-mixed_3_6"]
    r = summarize(open_checkpoint(_path("llama-mixed_3_6")))
    rows = {m["method"]: m for m in r["quantization"]["methods"]}
    assert set(rows) == {"mlx affine 3-bit", "mlx affine 6-bit"}
    assert {b: sum(1 for w in e["weights"].values() if w["bits"] == b) for b in (3, 6)} == \
        {3: rows["mlx affine 3-bit"]["weights"], 6: rows["mlx affine 6-bit"]["weights"]}
    assert r["quantization"]["config"]["per_module"] == sum(isinstance(v, dict) for v in e["quantization"].values())


def test_tied_embedding():
    """mlx_lm drops lm_head when the config ties it (Qwen3 sanitize): the quantised embedding is counted once and
    the tie is named from the config, as for the transformers save."""
    case = "qwen3-tied-5bit-g32"
    assert EXPECTED["cases"][case]["tie_word_embeddings"]
    a = audit(open_checkpoint(_path(case)))
    assert [(t["alias"], t["target"]) for t in a["ties"]] == [("lm_head.weight", "model.embed_tokens.weight")]
    assert a["cross_check"]["unexpected"] == [] and a["cross_check"]["shape_mismatches"] == []


@pytest.mark.parametrize("case", ["llama-4bit", "llama-mixed_3_6", "qwen3-mxfp8"])
def test_memory_as_stored(case):
    e = EXPECTED["cases"][case]
    m = memory_report(from_checkpoint(open_checkpoint(_path(case))), 1, 16)
    stored = {line["item"]: line["bytes"] for line in m["lines"] if line["group"] == "weights"}
    assert sum(stored.values()) == e["stored_bytes"]
    assert {f"as stored ({_method(w)})" for w in e["weights"].values()} <= set(stored)


@pytest.mark.parametrize("case", CASES)
def test_stats_reads_no_packed_word(case):
    """`stats` reads each quantised weight as its values (tests/test_stats_dequantized.py holds them against
    mx.dequantize's), never its packed words, scales or biases as numbers (before, they were skipped by role; before
    that, the scales and biases were read as the model's weights)."""
    r = collect(open_checkpoint(_path(case))).report
    e = EXPECTED["cases"][case]
    members = {m for w in e["weights"].values() for m in w["members"]}
    skipped = {s["name"] for s in r["skipped"]}   # (a buffer, by role)
    assert not skipped & members
    assert {row["name"] for row in r["tensors"]} == set(e["tensors"]) - members - skipped | set(e["weights"])
    assert r["dequantized"]["weights"] == len(e["weights"])


def _bare(case: str, tmp_path) -> str:  # noqa: ANN001
    dst = str(tmp_path / f"{case}.safetensors")
    shutil.copy(os.path.join(_path(case), "model.safetensors"), dst)
    return dst


@pytest.mark.parametrize("case", CASES)
def test_without_config(case, tmp_path):
    """Without config.json the group size is nowhere in the file. The fp modes (one group each) and the affine
    weights whose input size only one group explains keep MLX's shapes; where several fit (a 2-bit group-128 weight
    packs as a 4-bit group-64 one), mlx_lm's default group is used and a note says the shapes may be wrong."""
    e = EXPECTED["cases"][case]
    ckpt = open_checkpoint(_bare(case, tmp_path))
    q = layout(ckpt)
    assert q is not None and q.source == "tensor layout"
    right = {n: list(w.shape) for n, w in q.weights.items()} == {n: w["shape"] for n, w in e["weights"].items()}
    if case == "llama-2bit-g128":
        assert not right
    assert right or any("mlx_lm's default group" in n for n in q.notes)
    if all(w["mode"] != "affine" for w in e["weights"].values()):
        assert right and q.notes == ()


def test_config_default_alone(tmp_path):
    """A config.json whose quantization holds only the default (its per-module entries lost): the input sizes of
    the model config.json describes give each module its group (mlx_lm's infer_quant_config), so the mixed
    recipe's 6-bit modules keep their shapes."""
    case = "llama-mixed_3_6"
    cfg = json.load(open(os.path.join(_path(case), "config.json")))
    for key in ("quantization", "quantization_config"):
        cfg[key] = {k: v for k, v in cfg[key].items() if not isinstance(v, dict)}
    shutil.copy(os.path.join(_path(case), "model.safetensors"), tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    q = layout(open_checkpoint(str(tmp_path)))
    e = EXPECTED["cases"][case]
    assert {n: (list(w.shape), w.bits) for n, w in q.weights.items()} == \
        {n: (w["shape"], w["bits"]) for n, w in e["weights"].items()}
    assert q.notes == ()


@pytest.mark.parametrize("entry", [{"bits": 4, "group_size": 64}, {"bits": "x"}, {"mode": "nope"}])
def test_config_entry_that_does_not_fit(entry, tmp_path):
    """A module entry claiming what the packing cannot hold: a note, the layout's reading (the model's input size)."""
    case = "llama-mixed_3_6"
    cfg = json.load(open(os.path.join(_path(case), "config.json")))
    cfg["quantization"]["lm_head"] = entry     # lm_head is 6-bit, group 64
    cfg.pop("quantization_config")
    shutil.copy(os.path.join(_path(case), "model.safetensors"), tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = summarize(open_checkpoint(str(tmp_path)))
    assert r["parameters"]["unique"] == EXPECTED["cases"][case]["parameters"]
    assert any("quantization['lm_head']" in n and "does not fit" in n for n in r["quantization"]["notes"])


def test_hostile_shapes(tmp_path):
    """uint8 scales whose ratio to the words fits no mlx mode, and empty tensors: a note, never a crash."""
    np = pytest.importorskip("numpy")
    from safetensors.numpy import save_file

    save_file({"a.weight": np.zeros((4, 3), np.uint32), "a.scales": np.zeros((4, 5), np.uint8),
               "b.weight": np.zeros((0, 0), np.uint32), "b.scales": np.zeros((0, 0), np.float16),
               "b.biases": np.zeros((0, 0), np.float16)}, str(tmp_path / "m.safetensors"))
    r = summarize(open_checkpoint(str(tmp_path / "m.safetensors")))
    assert any("no mlx mode fits" in n for n in r["quantization"]["notes"])


def test_cli(cli):
    rc, out, err = cli("tensors", _path("llama-4bit"), "--filter", "*layers.0.mlp.down_proj.weight", "--json")
    row = json.loads(out)["tensors"][0]
    assert rc == 0, err
    assert row["role"] == "packed-weight" and row["logical_shape"] == [64, 128] and row["quant_method"] == "mlx affine 4-bit"
    rc, out, err = cli(_path("mixtral-mxfp4"))
    assert rc == 0 and "mlx mxfp4" in out and "bits/weight" in out


# ------------------------------------------------------------------ against the unquantised transformers model
def _plain(case: str, tmp_path) -> str:  # noqa: ANN001
    """The case's model as transformers saves it unquantised (the config make_mlx.py built it from)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoConfig, AutoModelForCausalLM

    kw = dict(EXPECTED["cases"][case]["model"])
    config = AutoConfig.for_model(kw.pop("model_type"), **kw)
    torch.manual_seed(0)
    path = str(tmp_path / "plain")
    AutoModelForCausalLM.from_config(config).to(getattr(torch, kw["dtype"])).save_pretrained(path)
    return path


@pytest.mark.parametrize("case", [c for c in CASES if c not in RELAID and c not in TOWERS])   # (TOWERS: the next test)
def test_like_unquantised(case, tmp_path):
    """Resolution, the parameter count, FLOPs, ties and the config cross-check are those of the same model saved
    unquantised; its weight memory is what it stores."""
    plain = _plain(case, tmp_path)
    from test_quantized import assert_like_unquantised

    assert_like_unquantised(_path(case), plain)


@pytest.mark.parametrize("case", sorted(TOWERS))
def test_a_wrappers_conversion_is_its_text_model(case):
    """mlx_lm converts a multimodal wrapper's text model alone (its TOWERS dropped) and writes its config.json without
    vision_config: the conversion counts its source's parameters less the towers', resolves as its source does (read
    as a wrapper without its tower: census/quant/mlx.py as_converted), and predicts the same parameters and FLOPs
    (Llama 4's, Qwen3-VL-MoE's analytic models), the towers being outside it."""
    source, mlx = open_checkpoint(os.path.join(HERE, "..", "fixtures", "mlx-sources", case)), open_checkpoint(_path(case))
    unique = summarize(mlx)["parameters"]["unique"]
    assert unique == summarize(source)["parameters"]["unique"] - sum(towers(case).values())
    assert resolve(mlx).label == resolve(source).label
    assert resolve(mlx).spec is not None and resolve(source).spec is not None
    q, p = from_checkpoint(mlx), from_checkpoint(source)
    assert q.params == unique and q.agree and q.predicted["total"] == p.predicted["total"]
    assert run(q, 1, 32)["totals"]["flops"] == run(p, 1, 32)["totals"]["flops"]


@pytest.mark.parametrize("case", RELAID)
def test_relaid_like_unquantised(case, tmp_path):
    """mlx_lm's sanitize saves each MoE block's experts stacked, `switch_mlp.{gate,up,down}_proj` [experts, out, in]
    (from transformers' per-expert linears, or split from GraniteMoE's fused ones), MLA's kv_b_proj split per head into
    embed_q / unembed_out, and conv1d weights [out, kernel, in]: the cross-check pairs each such module with the
    tensors transformers saves for it (the same elements, over the config's experts or heads) and each conv1d weight
    with transformers' [out, in, kernel], so that nothing is missing, unexpected or mismatched; resolution, the count,
    FLOPs and ties are the unquantised model's (an unquantised bf16 conversion's, stored as large). What mlx_lm drops
    (ERNIE 4.5's e_score_correction_bias, which MLX's model does not have) is missing, and the count is short of it."""
    from test_quantized import assert_like_unquantised

    plain = _plain(case, tmp_path)
    e = EXPECTED["cases"][case]
    saved = {t["name"]: t for t in tensors(open_checkpoint(plain))["tensors"]}   # transformers' save
    cc = audit(open_checkpoint(_path(case)))["cross_check"]
    groups = cc["restacked"]
    paired = {n for g in groups for n in g["as"]}
    dropped = {n for n in saved if n not in e["tensors"]} - paired    # transformers' tensors MLX's model lacks
    assert paired <= set(saved) and {x["name"] for x in cc["missing"] if x["why"] == "not in the file"} == dropped
    assert bool(dropped) == (case == "ernie4_5_moe-4bit")
    q, p = from_checkpoint(open_checkpoint(_path(case))), from_checkpoint(open_checkpoint(plain))
    if dropped:
        assert q.params == p.params - sum(saved[n]["numel"] for n in dropped)
    elif e["weights"]:
        assert_like_unquantised(_path(case), plain)
    else:   # mlx_lm's bf16 conversion: the same model, stored as large
        assert (q.params, q.weight_bytes, q.agree) == (p.params, p.weight_bytes, True)
        assert resolve(open_checkpoint(_path(case))).label == resolve(open_checkpoint(plain)).label
    held = {n.rpartition(".")[0] for n in e["tensors"]}   # the modules MLX's model holds
    m = e["model"]
    experts = next((m[k] for k in ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts") if k in m),
                   None)
    for g in groups:
        assert g["elements"] == sum(saved[n]["numel"] for n in g["as"])
        assert {n.rpartition(".")[0] for n in g["stacked"]} <= held
        assert g["count"] == (experts if g["of"] == "experts" else m["num_attention_heads"])
    assert {g["of"] for g in groups} == {k for k, has in (("experts", experts), ("heads", "kv_lora_rank" in m)) if has}
    # MLX's own shapes where they differ from transformers' (its unquantised arrays: the conv1d weights)
    assert {r["name"]: (r["file"], r["config"]) for r in cc["relaid"]} == {
        n: (e["tensors"][n], saved[n]["shape"]) for n in saved if n in e["tensors"] and e["tensors"][n] != saved[n]["shape"]
        and n.endswith("weight") and n.rpartition(".")[0] + ".scales" not in e["tensors"]}
    assert bool(cc["relaid"]) == (m["model_type"] in ("qwen3_next", "mamba2"))
    units, _ = discover(_path(case))
    assert [audit_record(u, values=False)["config"]["verdict"] for u in units] == ["mismatch" if dropped else "match"]


@pytest.mark.parametrize("case, edit", [("olmoe-4bit", "one expert fewer in gate_proj"),
                                        ("deepseek_v3-4bit-g32", "embed_q dropped"),
                                        ("mamba2-4bit-g32", "saved as format pt"),
                                        ("olmoe-4bit", "saved as format pt")])
def test_what_does_not_add_up_stays_missing_unexpected_or_mismatched(case, edit, tmp_path):
    """A module whose restacked tensors do not hold what transformers' names hold (an expert short in one stack, half
    of a split kv_b_proj gone) is not paired: its tensors stay missing and unexpected. Modules are paired, and a
    conv1d weight in mlx's axis order relaid, only in a file mlx wrote (`format: mlx`); elsewhere they are missing,
    unexpected and mismatched."""
    pytest.importorskip("torch")   # numpy has no bfloat16
    from safetensors.torch import load_file, save_file

    shutil.copytree(_path(case), tmp_path / case)
    os.remove(tmp_path / case / "model.safetensors.index.json")   # it would name the tensors dropped
    path = tmp_path / case / "model.safetensors"
    state = load_file(str(path))
    if edit.startswith("one expert"):
        state = {n: (a[1:] if ".switch_mlp.gate_proj." in n else a) for n, a in state.items()}
    elif edit.startswith("embed_q"):
        state = {n: a for n, a in state.items() if ".embed_q." not in n}
    save_file(state, str(path), metadata={"format": "pt" if edit.endswith("pt") else "mlx"})
    cc = audit(open_checkpoint(str(tmp_path / case)))["cross_check"]
    if edit.endswith("pt"):
        convs = [n for n in EXPECTED["cases"][case]["tensors"] if n.endswith("conv1d.weight")]
        stacks = [n for n in EXPECTED["cases"][case]["tensors"] if ".switch_mlp." in n and n.endswith(".weight")]
        assert cc["relaid"] == [] and sorted(m["name"] for m in cc["shape_mismatches"]) == sorted(convs)
        assert cc["restacked"] == [] and sorted(u["name"] for u in cc["unexpected"]) == sorted(stacks)
        assert bool(convs) != bool(stacks)
        return
    block = "model.layers.0.mlp" if edit.startswith("one expert") else "model.layers.0.self_attn"
    assert all(g["module"] != block for g in cc["restacked"])
    assert {u["name"].rpartition(".")[0] for u in cc["unexpected"]} == \
        ({f"{block}.switch_mlp.{p}" for p in ("gate_proj", "up_proj", "down_proj")} if edit.startswith("one expert")
         else {f"{block}.unembed_out"})
    assert cc["missing"] and all(m["name"].startswith(block + ".") for m in cc["missing"])


def test_generic_template_reads_an_mlx_config():
    """mlx_lm adds `quantization` to the config it saves: the generic template still describes a LLaMA-shaped
    model_type it does not know (`ckptstat flops config.json`)."""
    from ckptstat.families import generic

    cfg = json.load(open(os.path.join(_path("llama-4bit"), "config.json")))
    assert generic.describes({**cfg, "model_type": "some-new-llama"})
