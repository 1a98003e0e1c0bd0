"""Quantised safetensors/.bin checkpoints (issue 18, docs/quantized.md): every stored tensor gets a role,
every quantised weight its logical shape, and the summary counts the logical parameters the unquantised
transformers model has (its parameters() is the oracle), with stored bytes and bits per weight.

Writers: bitsandbytes (real, on CPU; committed under fixtures/quantized/ by fixtures/make_quantized.py),
compressed-tensors (real, its ModelCompressor, at test time); GPTQ, AWQ, FP8 and MXFP4 laid out by
fixtures/make_quantized.py as their loaders expect (their writers need a GPU)."""
from __future__ import annotations

import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import fixture_script  # noqa: E402

mq = fixture_script("make_quantized")
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from ckptstat.analysis.flops import run  # noqa: E402
from ckptstat.analysis.summary import summarize, tensors  # noqa: E402
from ckptstat.analysis.ties import audit  # noqa: E402
from ckptstat.census import layout, logical, resolve  # noqa: E402
from ckptstat.census.model import from_checkpoint  # noqa: E402
from ckptstat.formats.registry import open_checkpoint  # noqa: E402
from ckptstat.naming import QUANT_ROLES  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "quantized")
CT = {  # compressed-tensors preset scheme, format, group size, sparsity format (written by the installed release)
    "ct-w4a16": ("W4A16", "pack-quantized", 32, None),
    "ct-fp8-kv-cache": ("FP8", "float-quantized", None, None),   # with an FP8 kv_cache_scheme
    "ct-w4a16-asym": ("W4A16_ASYM", "pack-quantized", 32, None),
    "ct-fp8": ("FP8", "float-quantized", None, None),
    "ct-int8": ("W8A16", "int-quantized", 32, None),   # compressed-tensors 0.20: W8A16 is group-quantized (128)
    "ct-nvfp4": ("NVFP4A16", "nvfp4-pack-quantized", 16, None),
    "ct-mxfp6": ("MXFP6A16", "mxfp6-pack-quantized", 32, None),   # compressed-tensors 0.20: four E2M3 codes in 3 bytes
    "ct-mxfp8": ("MXFP8A16", "mxfp8-quantized", 32, None),        # float8 codes, an E8M0 byte a group of 32
}
# compressed-tensors 0.15 removed the sparse compressors (sparse-bitmask, sparse-24-bitmask), and 0.14 needs
# transformers < 5: those files are committed, written by 0.14 (fixtures/make_quantized.py --ct014), beside the record
# of what its compressors say each weight stores (mq.CT014_RECORD)
CT014 = mq.CT014_CASES
LAYOUT = {  # writer, model config, expected method
    "gptq-llama": (mq.write_gptq, mq.issue_llama_config, "gptq"),
    "awq-qwen2": (mq.write_awq, lambda: mq.tiny_config("qwen2"), "awq"),
    "fp8-mistral": (mq.write_fp8, lambda: mq.tiny_config("mistral"), "fp8 block-scaled"),
    "mxfp4-gpt-oss": (mq.write_mxfp4, lambda: mq.tiny_config("gpt_oss"), "mxfp4"),
}
BNB = {"bnb-nf4-llama": "bitsandbytes-nf4", "bnb-fp4-llama": "bitsandbytes-fp4", "bnb-int8-llama": "bitsandbytes-int8"}
CASES = [*LAYOUT, *CT, *CT014, *BNB]


def _unquantised(path: str) -> torch.nn.Module:
    """The transformers model the checkpoint quantises, built from its own config.json minus the
    quantization_config, on the meta device (only shapes are needed)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cfg.pop("quantization_config", None)
    config = AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("quantized")
    out = {}
    for name, (write, config, _) in LAYOUT.items():
        out[name] = write(mq.build(config()), str(root / name))
    for name, (scheme, fmt, group, sparsity) in CT.items():
        out[name] = mq.write_compressed(mq.build(mq.tiny_config("llama")), str(root / name), scheme, fmt, group, sparsity,
                                        kv_cache="kv-cache" in name)
    for name in [*CT014, *BNB]:
        out[name] = os.path.join(FIXTURES, name)
    return out


@pytest.mark.parametrize("case", CASES)
def test_logical_parameters_equal_the_unquantised_model(written, case):
    path = written[case]
    model = _unquantised(path)
    ckpt = open_checkpoint(path)
    r = summarize(ckpt)
    assert r["parameters"]["unique"] == sum(p.numel() for p in model.parameters())
    q = layout(ckpt)
    assert q is not None and q.weights
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    for w in q.weights.values():   # every quantised weight has the shape the unquantised model gives it
        assert w.shape == shapes[w.name], w.name
    # every stored tensor is a parameter or has a quantisation role; no piece is counted as a parameter
    roles = {row["name"]: row["role"] for row in tensors(ckpt)["tensors"]}
    members = {m for w in q.weights.values() for m in w.members}
    for name in members:
        assert roles[name] in QUANT_ROLES, (name, roles[name])
    assert r["non_parameters"] == [] or all(n["role"] in QUANT_ROLES for n in r["non_parameters"])


@pytest.mark.parametrize("case", CASES)
def test_stored_bytes_and_bits_per_weight(written, case):
    """Stored bytes are the file's own tensor sizes (safetensors' header, read with safe_open); bits per
    weight = stored bytes x 8 / logical parameters, per method, per bucket and in total."""
    path = written[case]
    ckpt = open_checkpoint(path)
    r = summarize(ckpt)
    q = r["quantization"]
    expected_method = LAYOUT[case][2] if case in LAYOUT else BNB.get(case, "compressed-tensors")
    assert expected_method in q["method"]
    if case in CT:   # (the format its config names: the layout tells mxfp6 from mxfp4, mxfp8 from float8)
        assert [m["method"] for m in q["methods"]] == [f"compressed-tensors {CT[case][1]}"]
    sizes = header_sizes(os.path.join(path, "model.safetensors"))
    weights = layout(ckpt).weights.values()
    assert q["stored_bytes"] == sum(sizes[m] for w in weights for m in w.members)
    assert q["logical_params"] == sum(w.numel for w in weights)
    assert q["bits_per_weight"] == pytest.approx(q["stored_bytes"] * 8 / q["logical_params"], abs=1e-3)
    total_bytes = sum(sizes.values()) - sum(sizes[n] for n in layout(ckpt).roles if n not in
                                           {m for w in weights for m in w.members})
    assert r["parameters"]["stored_bytes"] == total_bytes
    for b in r["buckets"]:
        assert b["bits_per_weight"] == pytest.approx(b["bytes"] * 8 / b["params"], abs=1e-3)


def test_issue_gptq_llama(written):
    """Issue 18: a GPTQ llama of 2,086,144 parameters was reported as 525,568 (fp16 scales counted,
    int32 qweight/qzeros/g_idx as buffers). The old rule's count is recomputed from the file to show
    this is that case."""
    path = written["gptq-llama"]
    model = _unquantised(path)
    assert sum(p.numel() for p in model.parameters()) == 2_086_144
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        old_rule = sum(f.get_tensor(k).numel() for k in f.keys() if f.get_tensor(k).is_floating_point())
    assert old_rule == 525_568
    ckpt = open_checkpoint(path)
    r = summarize(ckpt)
    assert r["parameters"]["unique"] == 2_086_144
    q = r["quantization"]
    assert q["source"] == "config.json quantization_config" and q["config"]["bits"] == 4 and q["config"]["group_size"] == 128
    # 4-bit values, plus per group of 128 an fp16 scale and a 4-bit zero, plus an int32 g_idx per input
    assert 4 + 20 / 128 < q["bits_per_weight"] < 4.5
    roles = {row["name"].rpartition(".")[2]: (row["role"], row.get("logical_shape"))
             for row in tensors(ckpt, "*layers.0.mlp.down_proj*")["tensors"]}
    assert roles == {"qweight": ("packed-weight", [256, 768]), "qzeros": ("zero-point", [256, 768]),
                     "scales": ("scale", [256, 768]), "g_idx": ("group-index", [256, 768])}


@pytest.mark.parametrize("case", ["gptq-llama", "awq-qwen2", "fp8-mistral", "ct-w4a16", "bnb-nf4-llama", "mxfp4-gpt-oss"])
def test_flops_ties_and_memory_work_from_logical_shapes(written, case, tmp_path):
    """The quantised checkpoint resolves, ties and counts FLOPs as the same model saved unquantised by
    transformers' save_pretrained."""
    path = written[case]
    plain = str(tmp_path / "plain")
    from transformers import AutoConfig, AutoModelForCausalLM

    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cfg.pop("quantization_config", None)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg)).half().save_pretrained(plain)
    assert_like_unquantised(path, plain)


def header_sizes(path: str) -> dict[str, int]:
    """Each tensor's bytes as safetensors' own reader (safe_open) describes it: elements x dtype width."""
    width = {"F32": 4, "I32": 4, "I64": 8, "F16": 2, "BF16": 2}   # the rest of these files' dtypes are 1 byte
    sizes = {}
    with safe_open(path, "pt") as f:
        for k in f.keys():
            t = f.get_slice(k)
            n = 1
            for d in t.get_shape():
                n *= d
            sizes[k] = n * width.get(t.get_dtype(), 1)
    return sizes


def assert_like_unquantised(path: str, plain: str) -> None:
    """The quantised checkpoint at `path` resolves, counts, ties, cross-checks and counts FLOPs as `plain`,
    the same model saved unquantised; its weight memory is what it stores (less)."""
    q, p = open_checkpoint(path), open_checkpoint(plain)
    assert resolve(q).label == resolve(p).label
    mq_, mp = from_checkpoint(q), from_checkpoint(p)
    assert mq_.params == mp.params and mq_.agree
    assert run(mq_, 1, 32)["totals"]["flops"] == run(mp, 1, 32)["totals"]["flops"]
    aq, ap = audit(q), audit(p)
    assert [(t["alias"], t["target"]) for t in aq["ties"]] == [(t["alias"], t["target"]) for t in ap["ties"]]
    assert aq["cross_check"]["unexpected"] == [] and aq["cross_check"]["shape_mismatches"] == []
    assert [m["name"] for m in aq["cross_check"]["missing"]] == [m["name"] for m in ap["cross_check"]["missing"]]
    assert mq_.weight_bytes < mp.weight_bytes


@pytest.mark.parametrize("case", ["gptq-llama", "awq-qwen2", "fp8-mistral", "ct-w4a16", "bnb-nf4-llama", "mxfp4-gpt-oss"])
def test_layout_alone_without_config(written, case, tmp_path):
    """Without config.json the tensor layout still tells the method and the logical shapes (GPTQ and
    AWQ apart by which qweight dimension is packed)."""
    src = written[case]
    dst = tmp_path / "bare.safetensors"
    shutil.copy(os.path.join(src, "model.safetensors"), dst)
    bare, full = open_checkpoint(str(dst)), open_checkpoint(src)
    assert summarize(bare)["parameters"]["unique"] == summarize(full)["parameters"]["unique"]
    qb, qf = layout(bare), layout(full)
    assert qb is not None and qf is not None and qb.source == "tensor layout"
    assert {w.name: w.shape for w in qb.weights.values()} == {w.name: w.shape for w in qf.weights.values()}
    assert qb.method.split()[0] == qf.method.split()[0]
    # shape inference from tensor names alone resolves it as the same model saved unquantised
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = json.loads(open(os.path.join(src, "config.json")).read())
    cfg.pop("quantization_config")
    sd = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg)).half().state_dict()
    if cfg.get("tie_word_embeddings"):
        sd.pop("lm_head.weight")
    save_file({k: v.contiguous() for k, v in sd.items()}, str(tmp_path / "plain.safetensors"))
    plain = open_checkpoint(str(tmp_path / "plain.safetensors"))
    rb, rp = resolve(bare), resolve(plain)
    assert (rb.label, rb.error) == (rp.label, rp.error)
    if rp.spec is not None:
        assert from_checkpoint(bare).predicted == from_checkpoint(plain).predicted


@pytest.mark.parametrize("case", ["gptq-llama", "bnb-nf4-llama", "ct-w4a16"])
def test_pytorch_bin(written, case, tmp_path):
    assert_bin_counts_the_same(written[case], tmp_path)


def assert_bin_counts_the_same(src: str, tmp_path) -> None:  # noqa: ANN001
    """The same tensors in a torch.save pytorch_model.bin count the same."""
    with safe_open(os.path.join(src, "model.safetensors"), "pt") as f:
        sd = {k: f.get_tensor(k) for k in f.keys()}
    torch.save(sd, tmp_path / "pytorch_model.bin")
    shutil.copy(os.path.join(src, "config.json"), tmp_path / "config.json")
    b, s = summarize(open_checkpoint(str(tmp_path))), summarize(open_checkpoint(src))
    assert b["parameters"]["unique"] == s["parameters"]["unique"]
    assert b["quantization"]["stored_bytes"] == s["quantization"]["stored_bytes"]


@pytest.mark.parametrize("bits,group", [(8, -1), (2, 32), (4, 16)])
def test_gptq_bits_and_group_sizes(bits, group, tmp_path):
    """GPTQ at 2/4/8 bits, per-channel (group_size -1) or grouped: bits come from the packing and agree
    with config.json; the logical count is the unquantised model's."""
    model = mq.build(mq.tiny_config("llama"))
    path = mq.write_gptq(model, str(tmp_path / "gptq"), bits=bits, group=group)
    ckpt = open_checkpoint(path)
    r = summarize(ckpt)
    assert r["parameters"]["unique"] == sum(p.numel() for p in _unquantised(path).parameters())
    assert {w.bits for w in layout(ckpt).weights.values()} == {bits}
    assert r["quantization"]["notes"] == []


AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]   # AutoAWQ awq/utils/packing_utils.py


def _unpack(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """int32 -> the 32 // bits values each holds, value j in bits [bits*j, bits*(j+1)), along `dim`."""
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)
    v = (packed.unsqueeze(-1) >> shifts) & (2**bits - 1)       # [..., cols, per]
    if dim == 0:
        return v.permute(0, 2, 1).reshape(-1, packed.shape[1])
    return v.reshape(packed.shape[0], -1)


@pytest.mark.parametrize("case", ["gptq-llama", "awq-qwen2"])
def test_packing_dequantises_back(written, case):
    """The generator's packing is the loaders': auto-gptq dequantises (q - (qzeros + 1)) * scales[g_idx]
    with q unpacked along qweight's rows; AutoAWQ unpacks along the columns and undoes its interleave
    with AWQ_REVERSE_ORDER [0, 4, 1, 5, 2, 6, 3, 7]. Both give back the unquantised weights."""
    path = written[case]
    write, config, _ = LAYOUT[case]
    model = mq.build(config())
    sd = model.state_dict()
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        for w in layout(open_checkpoint(path)).weights.values():
            m = w.name.rpartition(".")[0]
            qw, qz, sc = (f.get_tensor(f"{m}.{k}") for k in ("qweight", "qzeros", "scales"))
            bits = int(w.bits)
            if case.startswith("gptq"):
                q, z = _unpack(qw, bits, 0), _unpack(qz, bits, 1) + 1          # [in, out], [G, out]
                g = f.get_tensor(f"{m}.g_idx").long()
            else:
                q, z = (_unpack(t, bits, 1).reshape(t.shape[0], -1, 8)[..., AWQ_REVERSE_ORDER].reshape(t.shape[0], -1)
                        for t in (qw, qz))
                g = torch.arange(q.shape[0]) // (q.shape[0] // sc.shape[0])
            deq = ((q - z[g]).float() * sc.float()[g]).t()                     # [out, in]
            ref = sd[w.name].float()
            step = sc.float().max()
            assert deq.shape == ref.shape and (deq - ref).abs().max() <= step


def test_sharded(written, tmp_path):
    """A GPTQ checkpoint split over two shards with model.safetensors.index.json: pieces of one weight
    may sit in different shards."""
    src = written["gptq-llama"]
    with safe_open(os.path.join(src, "model.safetensors"), "pt") as f:
        sd = {k: f.get_tensor(k) for k in f.keys()}
    names = sorted(sd)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, keys in shards.items():
        save_file({k: sd[k] for k in keys}, str(tmp_path / file), metadata={"format": "pt"})
    index = {"metadata": {"total_size": 0}, "weight_map": {k: file for file, keys in shards.items() for k in keys}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    shutil.copy(os.path.join(src, "config.json"), tmp_path / "config.json")
    r = summarize(open_checkpoint(str(tmp_path)))
    assert r["parameters"]["unique"] == 2_086_144
    assert r["quantization"]["stored_bytes"] == summarize(open_checkpoint(src))["quantization"]["stored_bytes"]


def test_mxfp4_logical_shape_is_what_transformers_dequantises(written):
    """transformers' own MXFP4 dequantiser (integrations/mxfp4.py convert_moe_packed_tensors) turns the
    stored blocks and scales into the logical shape ckptstat reports."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    path = written["mxfp4-gpt-oss"]
    ckpt = open_checkpoint(path)
    weights = layout(ckpt).weights
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        for name, w in weights.items():
            out = convert_moe_packed_tensors(f.get_tensor(name + "_blocks"), f.get_tensor(name + "_scales"))
            assert tuple(out.shape) == w.shape


def test_mxfp4_layout_is_what_transformers_loads(written):
    """transformers' own loader reads the written MXFP4 folder as the release's (on the CPU it dequantises the
    blocks and scales into the experts' parameters): nothing missing, unexpected or mismatched, and the model's
    parameters are the unquantised model's."""
    from transformers import GptOssForCausalLM

    path = written["mxfp4-gpt-oss"]
    model, info = GptOssForCausalLM.from_pretrained(path, output_loading_info=True)
    assert info == {"missing_keys": set(), "unexpected_keys": set(), "mismatched_keys": set(), "error_msgs": []}
    assert {n: p.shape for n, p in model.named_parameters()} == {
        n: p.shape for n, p in _unquantised(path).named_parameters()}


@pytest.mark.parametrize("case", CT014)
def test_compressed_tensors_014_shape_rule(written, case):
    """What compressed-tensors 0.14's quantisation compressor said each weight stores (compression_param_info, in
    the record its writer left): the file holds those shapes; under a sparsity format, the quantised weight it
    packs (compressed + bitmask) has the stated shape as its logical shape."""
    with open(mq.CT014_RECORD) as f:
        record = json.load(f)
    assert record["written_by"]["compressed-tensors"].startswith("0.14")
    ckpt = open_checkpoint(written[case])
    weights = layout(ckpt).weights
    for module, params in record["cases"][case].items():
        for param, shape in params.items():
            if CT014[case][3] and param == "weight":
                assert weights[f"{module}.weight"].shape == tuple(shape), module
            else:
                assert ckpt.tensors[f"{module}.{param}"].shape == tuple(shape), (module, param)


def test_kv_cache_scales(written):
    """compressed-tensors' kv_cache_scheme stores k_scale/v_scale on each attention module, no weight of
    their own: role kv-scale, counted apart from the parameters."""
    ckpt = open_checkpoint(written["ct014-fp8-kv-cache"])   # 0.20 on transformers 5 writes no k_scale/v_scale
    rows = {r["name"]: r["role"] for r in tensors(ckpt, "*_scale")["tensors"]}
    assert rows["model.layers.0.self_attn.k_scale"] == rows["model.layers.1.self_attn.v_scale"] == "kv-scale"
    assert rows["model.layers.0.self_attn.q_proj.input_scale"] == "input-scale"
    r = summarize(ckpt)
    assert [(n["role"], n["tensors"]) for n in r["non_parameters"]] == [("kv-scale", 4)]


def test_bitsandbytes_roles(written):
    ckpt = open_checkpoint(written["bnb-nf4-llama"])
    rows = {r["name"].split("q_proj.")[1]: r["role"] for r in tensors(ckpt, "*layers.0.self_attn.q_proj.*")["tensors"]}
    assert rows == {"weight": "packed-weight", "weight.absmax": "absmax", "weight.quant_map": "quant-map",
                    "weight.nested_absmax": "absmax", "weight.nested_quant_map": "quant-map",
                    "weight.quant_state.bitsandbytes__nf4": "quant-state"}
    rows = {r["name"].split("q_proj.")[1]: r["role"]
            for r in tensors(open_checkpoint(written["bnb-int8-llama"]), "*layers.0.self_attn.q_proj.*")["tensors"]}
    assert rows == {"weight": "quantized-weight", "SCB": "scale", "weight_format": "quant-state"}


def test_logical_view_is_stable(written):
    ckpt = open_checkpoint(written["gptq-llama"])
    view = logical(ckpt)
    assert logical(view) is view and logical(ckpt) is view
    assert view.tensors["model.layers.0.self_attn.q_proj.weight"].shape == (256, 256)
    assert "model.layers.0.self_attn.q_proj.qweight" in ckpt.tensors   # the checkpoint itself is untouched


# ----------------------------------------------------------------------------------- hostile headers
def test_bnb_quant_state_lying_about_its_shape(tmp_path):
    """A quant_state JSON whose shape does not fit the packed bytes: the packing decides, with a note."""
    state = json.dumps({"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [2**40, 2**20]}).encode()
    save_file({"l.weight": torch.zeros(32, 1, dtype=torch.uint8), "l.weight.absmax": torch.ones(1),
               "l.weight.quant_map": torch.ones(16),
               "l.weight.quant_state.bitsandbytes__nf4": torch.tensor(list(state), dtype=torch.uint8)},
              str(tmp_path / "m.safetensors"))
    r = summarize(open_checkpoint(str(tmp_path / "m.safetensors")))
    assert r["parameters"]["unique"] == 64
    assert any("does not fit" in n for n in r["quantization"]["notes"])


def test_compressed_tensors_weight_shape_lying(tmp_path):
    save_file({"l.weight_packed": torch.zeros(4, 2, dtype=torch.int32), "l.weight_scale": torch.ones(4, 1),
               "l.weight_shape": torch.tensor([4, 2**40])}, str(tmp_path / "m.safetensors"))
    r = summarize(open_checkpoint(str(tmp_path / "m.safetensors")))
    assert r["parameters"]["unique"] == 4 * 16   # int4 packing: 8 values per int32
    assert any("does not fit" in n for n in r["quantization"]["notes"])


def test_degenerate_qweight(tmp_path):
    save_file({"l.qweight": torch.zeros(0, 0, dtype=torch.int32), "l.scales": torch.zeros(0, 0, dtype=torch.float16),
               "l.qzeros": torch.zeros(0, 0, dtype=torch.int32)}, str(tmp_path / "m.safetensors"))
    assert summarize(open_checkpoint(str(tmp_path / "m.safetensors")))["parameters"]["unique"] == 0


def test_config_disagreeing_with_the_layout(written, tmp_path):
    """config.json is checked against the layout: the layout wins, a note says so; a quant_method whose
    tensors ckptstat cannot decode is named, and the tensors count as stored."""
    src = written["gptq-llama"]
    shutil.copy(os.path.join(src, "model.safetensors"), tmp_path / "model.safetensors")
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = summarize(open_checkpoint(str(tmp_path)))
    assert r["parameters"]["unique"] == 2_086_144 and r["quantization"]["method"] == "gptq"
    assert any("laid out as 4-bit GPTQ" in n for n in r["quantization"]["notes"])

    plain = tmp_path / "plain"
    mq.build(mq.tiny_config("llama")).save_pretrained(str(plain))
    cfg = json.loads((plain / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "hqq"}
    (plain / "config.json").write_text(json.dumps(cfg))
    r = summarize(open_checkpoint(str(plain)))
    assert r["quantization"]["method"] == "hqq" and r["quantization"]["weights"] == 0
    assert any("no tensor has a quantised layout" in n for n in r["quantization"]["notes"])


def test_cli_summary_and_tensors(written, cli):
    rc, out, err = cli(written["gptq-llama"])
    assert rc == 0, err
    assert "bits/weight" in out and "gptq" in out and "2,086,144" in out
    rc, out, err = cli("tensors", written["gptq-llama"], "--filter", "*layers.0.mlp.down_proj.qweight", "--json")
    row = json.loads(out)["tensors"][0]
    assert rc == 0 and row["role"] == "packed-weight" and row["logical_shape"] == [256, 768]
    rc, out, err = cli(written["gptq-llama"], "--json")
    data = json.loads(out)
    assert data["quantization"]["method"] == "gptq" and data["parameters"]["unique"] == 2_086_144
