"""`stats` reads each quantised weight as its values, those the library that wrote it dequantises it to
(analysis/dequantized.py, docs/quantized.md "Statistics of quantised weights"), where it read none of them before (their
packed words, scales and zero points were left out by role); `diff` of a model and its quantised save compares them.

Oracles, each the writing library's own dequantiser: mx.dequantize's values for every quantised weight of the MLX
fixtures (fixtures/mlx-sources/<case>.mx_dequantize.safetensors, written by mlx itself, fixtures/make_mlx.py: every
mode and width, float16 and bfloat16); transformers' convert_moe_packed_tensors (gpt-oss MXFP4) and Fp8Dequantize
(block-scaled FP8); compressed-tensors' own compressors' decompress; bitsandbytes' dequantize_4bit
(fixtures/quantized/bnb-*-llama.dequantize_4bit.safetensors, written by bitsandbytes itself) and optimum-quanto's
dequantize and torchao's (fixtures/quantized/{quanto,torchao}-*-llama.dequantize.safetensors, written by them);
gptqmodel's dequantize_weight and dequantize_gemm (fixtures/quantized/gptqmodel-*.dequantize.safetensors).
Values read by torch;
numpy's reductions and np.quantile over them."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import load_file  # noqa: E402

from ckptstat.analysis import dequantized  # noqa: E402
from ckptstat.analysis.stats import QUANTILES, collect  # noqa: E402
from ckptstat.core.dtypes import bits16  # noqa: E402
from ckptstat.formats.registry import open_checkpoint  # noqa: E402

HERE = os.path.dirname(__file__)
FIX = os.path.join(HERE, "..", "fixtures")
SOURCES = os.path.join(FIX, "mlx-sources")
with open(os.path.join(FIX, "expected_mlx.json")) as _f:
    EXPECTED = json.load(_f)["cases"]
CASES = sorted(f.split(".")[0] for f in os.listdir(SOURCES) if f.endswith(".mx_dequantize.safetensors"))
DTYPES = {torch.float16: "F16", torch.bfloat16: "BF16"}


def _dequantized(case: str) -> dict[str, torch.Tensor]:
    return load_file(os.path.join(SOURCES, f"{case}.mx_dequantize.safetensors"))


def _report(path: str, **kw) -> dict:
    r = collect(open_checkpoint(path), **kw).report
    for k in ("seconds", "workers", "chunk_bytes"):
        r.pop(k)
    r["tensors"] = list(r["tensors"])
    return r


def _check(row: dict, x: torch.Tensor, exact: bool = True) -> None:
    """A row against numpy float64 over the values (one 16-bit tensor: every statistic exact but the moments' last bits;
    a group, `exact` False: its quantiles within the stated 2^-8 of their order statistics)."""
    v = x.float().numpy().astype(np.float64).reshape(-1)
    fin = v[np.isfinite(v)]
    assert row["count"] == v.size and row["finite"] == fin.size and row["zeros"] == int((v == 0).sum())
    assert row["min"] == fin.min() and row["max"] == fin.max()
    assert row["mean"] == pytest.approx(fin.mean(), rel=1e-12, abs=1e-15)
    assert row["std"] == pytest.approx(fin.std(), rel=1e-9, abs=1e-12)
    assert row["mean_abs"] == pytest.approx(np.abs(fin).mean(), rel=1e-12)
    assert row["l2"] == pytest.approx(np.linalg.norm(fin), rel=1e-12)
    assert row["quantiles_exact"] is exact
    srt = np.sort(fin)
    for p in QUANTILES:
        got, want = row["quantiles"][f"p{100 * p:g}"], float(np.quantile(fin, p))
        h = (fin.size - 1) * p
        a, b = srt[int(h)], srt[min(int(h) + 1, fin.size - 1)]
        assert abs(got - want) <= (1e-12 * abs(want) + 1e-300 if exact else 2.0 ** -8 * max(abs(a), abs(b)) + 2.0 ** -133)


def _by_name(r: dict) -> dict[str, dict]:
    """A stats report's tensor rows by name."""
    return {row["name"]: row for row in r["tensors"]}


def _rows_are(r: dict, values: dict[str, torch.Tensor]) -> dict[str, dict]:
    """Each of `values` (a library's dequantised weights, by name) is the report's row of that name: its dtype, shape
    and every statistic (_check). The rows by name."""
    rows = _by_name(r)
    assert values
    for name, x in values.items():
        assert rows[name]["dtype"] == DTYPES[x.dtype] and rows[name]["shape"] == list(x.shape), name
        _check(rows[name], x)
    return rows


@pytest.fixture(scope="module")
def reports() -> dict[str, dict]:
    return {case: _report(os.path.join(FIX, "mlx", case)) for case in CASES}


@pytest.mark.parametrize("case", CASES)
def test_every_quantised_weight_is_what_mx_dequantize_returns(reports, case):
    r, values = reports[case], _dequantized(case)
    weights = EXPECTED[case]["weights"]
    rows = _rows_are(r, values)
    assert set(values) == set(weights) and set(values) <= set(rows)
    members = {m for w in weights.values() for m in w["members"]} - set(weights)   # (the codes: the weight's own name)
    assert not members & set(rows) and not members & {s["name"] for s in r["skipped"]}
    modes = {}
    for w in weights.values():
        method = "mlx " + (f"affine {w['bits']}-bit" if w["mode"] == "affine" else w["mode"])
        modes[method] = modes.get(method, 0) + 1
    assert r["dequantized"]["weights"] == len(weights) and r["dequantized"]["methods"] == modes


@pytest.mark.parametrize("case", ["llama-4bit", "qwen3_moe-8bit", "mixtral-mxfp4"])
def test_the_total_holds_every_value_once(reports, case):
    """The total: the dequantised weights and the tensors stored as they are, each once (the packed words, scales and
    biases in none), as numpy over all of them; with a bucket row each."""
    stored = load_file(os.path.join(FIX, "mlx", case, "model.safetensors"))
    values = _dequantized(case)
    members = {m for w in EXPECTED[case]["weights"].values() for m in w["members"]}
    plain = [t for n, t in stored.items() if n not in members]
    every = torch.cat([t.float().reshape(-1) for t in [*values.values(), *plain]])
    r = reports[case]
    assert r["total"]["tensors"] == len(values) + len(plain)
    # exact where every value is one of bfloat16's (the total's bins)
    _check(r["total"], every, exact=bool((every.bfloat16().float() == every).all()))


@pytest.mark.parametrize("case", ["qwen3-tied-5bit-g32", "gpt_oss-mxfp4-experts", "llama-nvfp4"])
def test_any_chunk_and_workers_give_the_same_report(reports, case):
    """Chunks of one row (256 bytes: 8 values a read), a row and a half, and the default, in one process and two
    (forked workers): the same report, bit for bit."""
    path = os.path.join(FIX, "mlx", case)
    for kw in (dict(chunk_bytes=256), dict(chunk_bytes=32 * 96), dict(workers=2), dict(workers=2, chunk_bytes=256)):
        assert _report(path, **kw) == reports[case], kw


def test_the_cli_says_what_it_read(cli, tmp_path):
    """The human output names the dequantised weights and their methods, the JSON the rule; the input is not
    modified."""
    case = "llama-mixed_3_6"
    src = os.path.join(FIX, "mlx", case)
    dst = tmp_path / case
    shutil.copytree(src, dst)
    before = {p: open(os.path.join(dst, p), "rb").read() for p in os.listdir(dst)}
    code, out, err = cli("stats", str(dst))
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("dequantized"))
    assert "quantised weights read as the values their library dequantises them to" in " ".join(out.split())
    assert "mlx affine 3-bit" in " ".join(out.split()) and line
    code, out, _ = cli("stats", str(dst), "--json")
    r = json.loads(out)
    assert code == 0 and "mx.dequantize" in r["dequantized"]["rule"]
    assert {p: open(os.path.join(dst, p), "rb").read() for p in os.listdir(dst)} == before


@pytest.mark.parametrize("case", ["llama-nvfp4", "qwen3_moe-8bit"])
def test_over_http_as_locally(capsys, monkeypatch, case):
    """A folder served over a loopback socket: the same report (each chunk's codes, scales and biases read as ranges)."""
    from remote_server import Server

    from ckptstat import sources
    from ckptstat.cli import main
    from ckptstat.core.switches import Switches, set_switches

    set_switches(Switches())

    def report(path: str) -> dict:
        sources.reset()
        rc = main(["stats", "--json", path])
        out, err = capsys.readouterr()
        assert rc == 0, err
        r = json.loads(out)
        for k in ("seconds", "fetched", "path", "format"):
            r.pop(k, None)
        return r

    local = report(os.path.join(FIX, "mlx", case))
    with Server(os.path.join(FIX, "mlx")) as s:
        remote = report(f"{s.url}/{case}/")
    sources.reset()
    assert remote == local and local["dequantized"]["weights"] == len(EXPECTED[case]["weights"])


def test_other_quantised_pieces_stay_left_out_by_role(cli):
    """An optimum-quanto qint2 folder (its packed codes, scales and shifts; no dequantiser here) and a plain model:
    nothing dequantised, the pieces left out by role, no packed integer read as a weight."""
    code, out, _ = cli("stats", os.path.join(FIX, "quantized", "quanto-qint2-qwen2"), "--json")
    r = json.loads(out)
    assert code == 0 and r["dequantized"] is None
    reasons = {s["reason"] for s in r["skipped"]}
    assert {"role packed-weight (use --all-roles)", "role scale (use --all-roles)"} <= reasons
    assert all(row["dtype"] in ("F16", "BF16", "F32") for row in r["tensors"])
    code, out, _ = cli("stats", os.path.join(FIX, "bert-tiny"), "--json")
    assert code == 0 and json.loads(out)["dequantized"] is None


@pytest.mark.parametrize("case", ["bnb-int8-llama", "bnb-int8-qwen2", "bnb-int8-rounding"])
def test_bitsandbytes_int8_is_what_transformers_dequantize_returns(case):
    """bitsandbytes' LLM.int8 weights (fixtures/quantized/bnb-int8-<model>, written by bitsandbytes through
    transformers 4 (llama, float16) and 5 (qwen2, bfloat16, tied, q/k/v biases); `rounding`: the llama with codes and
    absmax values whose float16 values only bitsandbytes' own order of float32 roundings gives): each row is what
    transformers' own model.dequantize(dtype=the model's) returned for it on the CPU
    (bnb-int8-<model>.dequantize.safetensors, written by
    fixtures/make_quantized.py --bnb-dequantize), read whole, a row at a time and by two workers; `diff`'s reader gives
    the same values element by element; the SCB scales are no weight row."""
    path = os.path.join(FIX, "quantized", case)
    values = load_file(os.path.join(FIX, "quantized", f"{case}.dequantize.safetensors"))
    r = _report(path)
    rows = _rows_are(r, values)
    assert r["dequantized"]["methods"] == {"bitsandbytes-int8": len(values)}
    assert not any(row["name"].endswith(".SCB") for row in r["tensors"])
    assert _report(path, workers=2) == r
    small = _by_name(_report(path, chunk_bytes=64))
    assert all(small[n] == rows[n] for n in values)
    view = dequantized.view(open_checkpoint(path), True)
    for name, x in values.items():
        got = np.asarray(view.read(name)).reshape(-1)
        assert np.array_equal(got, x.float().numpy().reshape(-1)), name


def test_rounding_to_bfloat16_is_once_from_float64():
    """bits16: float64 values on either side of a bfloat16 tie by less than float32 resolves, rounded to the nearer
    (torch's float64 -> bfloat16 goes through float32, rounding twice: not the oracle here); ties to even; NaN, Inf
    and overflow; F16 as numpy's float16."""
    tie = np.float64(1.0 + 2.0 ** -8)   # halfway between bfloat16 1.0 (0x3F80) and 1.0078125 (0x3F81)
    x = np.array([tie, tie + 2.0 ** -40, tie - 2.0 ** -40, -(tie + 2.0 ** -40), 1.0 + 3 * 2.0 ** -8, np.nan, np.inf,
                  1e300, -1e300, 0.0])
    assert [hex(b) for b in bits16(x, "BF16")] == ["0x3f80", "0x3f81", "0x3f80", "0xbf81", "0x3f82", "0x7fc0",
                                                  "0x7f80", "0x7f80", "0xff80", "0x0"]
    y = np.array([1.0 + 2.0 ** -11, 1.0 + 2.0 ** -11 + 2.0 ** -40, 70000.0, -1e-9])
    assert (bits16(y, "F16") == y.astype(np.float16).view(np.uint16)).all()
    # any shape, each element as flat (the ties and NaNs found by flat index: a group's rows broadcast 2-D)
    assert (bits16(x.reshape(2, 5), "BF16") == bits16(x, "BF16").reshape(2, 5)).all()
    assert (bits16(x[::-1].reshape(5, 2), "BF16") == bits16(x[::-1], "BF16").reshape(5, 2)).all()


def test_non_finite_scales_are_counted_not_raised(tmp_path):
    """A file whose scales hold NaN and +-Inf (a corrupt or hostile save): the values they make are counted as NaN and
    Inf and flagged, as torch computes them from the stored pieces in float16 (a product rounded, then a sum rounded:
    mx.dequantize's order), and the file is not modified. Quietly: an inf scale times a code of 0 made numpy print
    'RuntimeWarning: invalid value encountered in multiply' on the stderr of `ckptstat stats` (conversion_mlx.py)."""
    import warnings

    case, mod = "llama-4bit", "model.layers.0.mlp.up_proj"
    dst = tmp_path / case
    shutil.copytree(os.path.join(FIX, "mlx", case), dst)
    stored = load_file(str(dst / "model.safetensors"))
    s = stored[f"{mod}.scales"].clone()
    s[0, 0], s[1, 0], s[2, 0] = float("nan"), float("inf"), float("-inf")
    stored[f"{mod}.scales"] = s
    from safetensors.torch import save_file

    save_file(stored, str(dst / "model.safetensors"), metadata={"format": "mlx"})
    before = (dst / "model.safetensors").read_bytes()
    words = stored[f"{mod}.weight"].view(torch.int32)
    codes = torch.stack([(words >> (4 * k)) & 0xF for k in range(8)], dim=-1).reshape(words.shape[0], -1)
    group = codes.shape[1] // s.shape[1]
    product = (s.repeat_interleave(group, dim=1) * codes.half()).half()
    values = product + stored[f"{mod}.biases"].repeat_interleave(group, dim=1)
    assert values.dtype == torch.float16
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = _report(str(dst))
    row = next(x for x in r["tensors"] if x["name"] == f"{mod}.weight")
    v = values.float().numpy()
    assert (row["nan"], row["posinf"], row["neginf"]) == (int(np.isnan(v).sum()), int((v == np.inf).sum()),
                                                          int((v == -np.inf).sum()))
    assert row["nan"] > 0 and "nan_or_inf" in row["flags"]
    fin = v[np.isfinite(v)].astype(np.float64)
    assert row["finite"] == fin.size and row["min"] == fin.min() and row["max"] == fin.max()
    assert (dst / "model.safetensors").read_bytes() == before


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory) -> str:
    """A tiny gpt-oss with its experts in the release's MXFP4 layout (fixtures/make_quantized.py write_mxfp4: blocks
    and scales that transformers' own convert_moe_packed_tensors turns back into the experts' shapes)."""
    from conftest import fixture_script

    mq = fixture_script("make_quantized")
    return mq.write_mxfp4(mq.build(mq.tiny_config("gpt_oss")), str(tmp_path_factory.mktemp("gpt_oss") / "mxfp4"))


def test_gpt_oss_mxfp4_experts_are_what_transformers_dequantises(gpt_oss):
    """Each expert weight's row: the values transformers' convert_moe_packed_tensors returns from its blocks and scales
    (bfloat16), under the weight's name and transformers' shape; every other tensor as stored; the same report from
    two workers, the same rows from reads of one row."""
    from safetensors import safe_open
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    r = _report(gpt_oss)
    rows = _by_name(r)
    with safe_open(os.path.join(gpt_oss, "model.safetensors"), "pt") as f:
        names = [n[:-len("_blocks")] for n in f.keys() if n.endswith("_blocks")]
        assert names
        for name in names:
            x = convert_moe_packed_tensors(f.get_tensor(name + "_blocks"), f.get_tensor(name + "_scales"))
            assert rows[name]["dtype"] == "BF16" and rows[name]["shape"] == list(x.shape), name
            _check(rows[name], x)
        stored = [n for n in f.keys() if not n.endswith(("_blocks", "_scales"))]
        assert set(rows) == set(names) | set(stored)
    assert r["dequantized"]["methods"] == {"mxfp4": len(names)}
    assert _report(gpt_oss, workers=2) == r
    small = _by_name(_report(gpt_oss, chunk_bytes=64))   # (one row of 32 codes a read)
    assert all(small[n] == rows[n] for n in names)


def test_diff_of_gpt_oss_and_its_mxfp4_release_reads_transformers_values(gpt_oss, tmp_path):
    """`diff BF16 RELEASE` of gpt-oss: each MXFP4 expert weight compared in its logical [E, in, out] order as
    convert_moe_packed_tensors returns it (dequantised, then transposed): a bfloat16 save of those values is equal
    tensor for tensor (a faithful dequantisation), one with noise has numpy's metrics; at any chunk size, either
    order. Before, the experts stayed as stored (their blocks and scales added, the weights removed)."""
    from safetensors import safe_open
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    with safe_open(os.path.join(gpt_oss, "model.safetensors"), "pt") as f:
        values = {n[:-len("_blocks")]: convert_moe_packed_tensors(f.get_tensor(n), f.get_tensor(n[:-6] + "scales"))
                  for n in f.keys() if n.endswith("_blocks")}
        plain = {n: f.get_tensor(n) for n in f.keys() if not n.endswith(("_blocks", "_scales"))}
    _diff_reads_the_values(tmp_path, gpt_oss, plain, values, 1e-2)


def _diff_reads_the_values(tmp_path, quantised: str, plain: dict, values: dict, noise: float) -> None:  # noqa: ANN001
    """`diff SOURCE QUANTISED` reads each quantised weight as `values` (a library's, by name, in the logical shape):
    a source of `plain` tensors and those values exactly is equal tensor for tensor; one with Gaussian noise of
    `noise` added has the max |a - b|, relative L2 and cosine numpy computes; the same a few values a read (every
    boundary of the reads), either order."""
    from safetensors.torch import save_file

    from ckptstat.analysis.diff import diff

    gen = torch.Generator().manual_seed(0)
    noisy = {k: (v.double() + torch.randn(v.shape, generator=gen, dtype=torch.float64) * noise).to(v.dtype)
             for k, v in values.items()}
    for name, source in (("exact", values), ("noisy", noisy)):
        (tmp_path / name).mkdir()
        save_file({**plain, **{k: v.contiguous() for k, v in source.items()}}, str(tmp_path / name / "model.safetensors"))
        if os.path.exists(os.path.join(quantised, "config.json")):
            shutil.copy(os.path.join(quantised, "config.json"), tmp_path / name)
    for chunk in (16 << 20, 64):
        r = diff(open_checkpoint(str(tmp_path / "exact")), open_checkpoint(quantised), chunk_bytes=chunk)
        assert r["counts"]["added"] == r["counts"]["removed"] == 0
        assert {t["status"] for t in r["tensors"]} == {"equal"}, [t for t in r["tensors"] if t["status"] != "equal"]
        for a, b in ((str(tmp_path / "noisy"), quantised), (quantised, str(tmp_path / "noisy"))):
            by = {t["name"]: t for t in diff(open_checkpoint(a), open_checkpoint(b), chunk_bytes=chunk)["tensors"]}
            for n, v in values.items():
                x, y = noisy[n].double().numpy().ravel(), v.double().numpy().ravel()
                t = by[n.removeprefix("model.")]
                assert t["status"] == "values" and t["max_abs"] == np.max(np.abs(x - y)), n
                assert t["rel_l2"] == pytest.approx(np.linalg.norm(x - y) / np.linalg.norm(x if a != quantised else y),
                                                    rel=1e-9)
                assert t["cosine"] == pytest.approx(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y)), rel=1e-9)
            assert {t["status"] for n, t in by.items() if "model." + n not in values} == {"equal"}


# compressed-tensors preset scheme -> its format and group size (written by the installed release)
COMPRESSED = {
    "W4A16": ("pack-quantized", 32), "W8A16": ("int-quantized", 32), "FP8": ("float-quantized", None),
    "FP8_DYNAMIC": ("float-quantized", None), "W8A8": ("int-quantized", None), "W4A16_ASYM": ("pack-quantized", 32),
    "NVFP4A16": ("nvfp4-pack-quantized", 16), "MXFP4A16": ("mxfp4-pack-quantized", 32),
    "MXFP6A16": ("mxfp6-pack-quantized", 32), "MXFP8A16": ("mxfp8-quantized", 32),
}


@pytest.mark.parametrize("scheme", COMPRESSED)
def test_compressed_tensors_weights_are_what_its_decompressor_returns(tmp_path, scheme):
    """A tiny llama written by compressed-tensors itself (fixtures/make_quantized.py write_compressed: its own
    compressor) in each preset: each quantised weight's row is what the format's own compressor `decompress` returns
    from the module's pieces (group, channel and tensor scales; int4 packed in int32, int8, float8, fp4 two a byte;
    zero points packed along the rows), in the scales' dtype (fp4: bfloat16), read whole or a row at a time."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig
    from conftest import fixture_script

    mq = fixture_script("make_quantized")
    fmt, group = COMPRESSED[scheme]
    path = mq.write_compressed(mq.build(mq.tiny_config("llama")), str(tmp_path / scheme), scheme, fmt, group)
    with open(os.path.join(path, "config.json")) as f:
        qc = QuantizationConfig.model_validate(json.load(f)["quantization_config"])
    compressor = BaseCompressor.get_value_from_registry(qc.format)
    stored = load_file(os.path.join(path, "model.safetensors"))
    modules = sorted({k.rpartition(".")[0] for k in stored if k.endswith(".weight_scale")})
    r = _report(path)
    rows = _by_name(r)
    assert modules
    for m in modules:
        local = {k[len(m) + 1:]: v for k, v in stored.items() if k.startswith(m + ".")}
        x = compressor.decompress(local, qc.config_groups["group_0"])["weight"]
        assert rows[m + ".weight"]["dtype"] == DTYPES[x.dtype] and rows[m + ".weight"]["shape"] == list(x.shape)
        _check(rows[m + ".weight"], x)
    assert r["dequantized"]["methods"] == {f"compressed-tensors {fmt}": len(modules)}
    assert _report(path, workers=2) == r
    small = _by_name(_report(path, chunk_bytes=64))   # (a row a read)
    assert all(small[m + ".weight"] == rows[m + ".weight"] for m in modules)


@pytest.mark.parametrize("block,dtype", [((32, 32), "float16"), ((16, 32), "bfloat16"), ((1, 96), "bfloat16")])
def test_block_scaled_fp8_is_what_transformers_dequantises(tmp_path, block, dtype):
    """transformers' FineGrainedFP8 layout (DeepSeek-V3's: float8 `weight`, float32 `weight_scale_inv` a block;
    fixtures/make_quantized.py write_fp8): each weight's row is what transformers' own Fp8Dequantize returns in the
    model's dtype (code x scale in float32, then rounded to it), blocks of several rows and of one; the same rows read
    a block at a time and a row at a time."""
    from conftest import fixture_script
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize

    mq = fixture_script("make_quantized")
    path = mq.write_fp8(mq.build(mq.tiny_config("mistral")), str(tmp_path / "fp8"), block)
    cfg_path = os.path.join(path, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["dtype"] = dtype
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    stored = load_file(os.path.join(path, "model.safetensors"))
    r = _report(path)
    rows = _by_name(r)
    names = [k[:-len("_scale_inv")] for k in stored if k.endswith(".weight_scale_inv")]
    assert names
    for name in names:
        x = Fp8Dequantize(None)._dequantize_one(stored[name], stored[name + "_scale_inv"], getattr(torch, dtype))
        assert rows[name]["dtype"] == DTYPES[x.dtype] and rows[name]["shape"] == list(x.shape)
        _check(rows[name], x)
    assert r["dequantized"]["methods"] == {"fp8 block-scaled": len(names)}
    assert _report(path, workers=2) == r
    for chunk in (96, 96 * 4 * block[0] // 4):   # reads of one row (within blocks), of one row of blocks
        small = _by_name(_report(path, chunk_bytes=chunk))
        assert all(small[n] == rows[n] for n in names), chunk


def test_compressed_tensors_blocks_are_what_its_decompressor_returns(tmp_path):
    """compressed-tensors' FP8_BLOCK preset (128 x 128 blocks, the block in the config) on a llama whose weights hold
    whole blocks (256 x 384...): each row is what its compressor's decompress returns."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig
    from conftest import fixture_script
    from transformers import LlamaConfig

    mq = fixture_script("make_quantized")
    cfg = LlamaConfig(vocab_size=128, hidden_size=256, intermediate_size=384, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=64, torch_dtype="float16")
    path = mq.write_compressed(mq.build(cfg), str(tmp_path / "block"), "FP8_BLOCK", "float-quantized", None)
    with open(os.path.join(path, "config.json")) as f:
        qc = QuantizationConfig.model_validate(json.load(f)["quantization_config"])
    assert qc.config_groups["group_0"].weights.block_structure == [128, 128]
    stored = load_file(os.path.join(path, "model.safetensors"))
    modules = sorted({k.rpartition(".")[0] for k in stored if k.endswith(".weight_scale")})
    assert any(stored[m + ".weight_scale"].shape[0] > 1 for m in modules)
    r = _report(path)
    rows = _by_name(r)
    compressor = BaseCompressor.get_value_from_registry(qc.format)
    for m in modules:
        local = {k[len(m) + 1:]: v for k, v in stored.items() if k.startswith(m + ".")}
        _check(rows[m + ".weight"], compressor.decompress(local, qc.config_groups["group_0"])["weight"])
    assert r["dequantized"]["weights"] == len(modules)


@pytest.mark.parametrize("case,method", [("quanto-qint8-llama", "quanto qint8"), ("quanto-qfloat8-llama", "quanto qfloat8"),
                                         ("torchao-float8-llama", "torchao float8")])
def test_quanto_and_torchao_bytes_are_what_they_dequantize_to(case, method):
    """optimum-quanto's qint8 and qfloat8 weights and torchao's float8 ones (fixtures written by quanto and by
    transformers with torchao): each row is what the library's own dequantize returned for the reloaded model's
    weight (<case>.dequantize.safetensors, fixtures/make_quantized2.py --dequantize); the same from two workers."""
    path = os.path.join(FIX, "quantized", case)
    values = load_file(os.path.join(FIX, "quantized", f"{case}.dequantize.safetensors"))
    r = _report(path)
    _rows_are(r, values)
    assert r["dequantized"]["methods"] == {method: len(values)}
    assert _report(path, workers=2) == r


@pytest.mark.parametrize("mode", ["nf4", "fp4"])
def test_bitsandbytes_4bit_is_what_dequantize_4bit_returns(mode):
    """bitsandbytes' 4-bit weights (fixtures/quantized/bnb-<mode>-llama, written by bitsandbytes itself; double
    quantisation: nested absmax): each row is what bitsandbytes' own dequantize_4bit returned for it
    (bnb-<mode>-llama.dequantize_4bit.safetensors, written by fixtures/make_quantized.py --bnb-dequantize on the CPU),
    read whole, a block at a time and by two workers."""
    path = os.path.join(FIX, "quantized", f"bnb-{mode}-llama")
    values = load_file(os.path.join(FIX, "quantized", f"bnb-{mode}-llama.dequantize_4bit.safetensors"))
    r = _report(path)
    rows = _rows_are(r, values)
    assert r["dequantized"]["methods"] == {f"bitsandbytes-{mode}": len(values)}
    assert not any(s["name"].startswith(tuple(values)) for s in r["skipped"])
    assert _report(path, workers=2) == r
    small = _by_name(_report(path, chunk_bytes=64))   # (a block of 64 a read)
    assert all(small[n] == rows[n] for n in values)


GPTQMODEL = sorted(c for c in os.listdir(os.path.join(FIX, "quantized")) if c.startswith("gptqmodel-") and "." not in c)


@pytest.mark.parametrize("case", GPTQMODEL)
def test_gptq_and_awq_are_what_gptqmodel_dequantizes(case):
    """GPTQ (v1 and v2 zero points, act-order, 2, 3, 4 and 8 bits, one group, MoE experts) and AWQ GEMM weights,
    written by GPTQModel on the CPU (fixtures/make_gptqmodel.py): each row is what gptqmodel returned for the weight
    (GPTQ: the module's dequantize_weight after transformers' from_pretrained; AWQ: dequantize_gemm), read whole, 32
    input rows at a time and by two workers."""
    path = os.path.join(FIX, "quantized", case)
    values = load_file(os.path.join(FIX, "quantized", f"{case}.dequantize.safetensors"))
    r = _report(path)
    rows = _rows_are(r, values)
    assert r["dequantized"]["methods"] == {case.split("-")[1].split("_")[0]: len(values)}
    assert not any(s["name"].startswith(tuple(n[:-len("weight")] for n in values)) for s in r["skipped"])
    assert _report(path, workers=2) == r
    small = _by_name(_report(path, chunk_bytes=64))
    assert all(small[n] == rows[n] for n in values)


MODELOPT = sorted(c for c in os.listdir(os.path.join(FIX, "quantized")) if c.startswith("modelopt-") and "." not in c)


@pytest.mark.parametrize("case", MODELOPT)
def test_modelopt_nvfp4_and_fp8_are_what_modelopt_dequantizes(case, tmp_path):
    """NVIDIA modelopt's NVFP4 and FP8 weights (fixtures/make_modelopt.py: mtq.quantize and export_hf_checkpoint on the
    CPU; NVFP4 llama, tied qwen2, Qwen3-MoE's experts one linear each; FP8 llama): each row is what modelopt's
    NVFP4QTensor or FP8QTensor dequantize returned for the weight, read whole, a group at a time and by two workers;
    diff of a bfloat16 save of those values and the export is equal tensor for tensor (with noise, numpy's metrics).
    Before, NVFP4's packed uint8 weights were counted as buffers (18,510 parameters for the 47,296 of the llama) and
    FP8's weights were left out of the statistics."""
    path = os.path.join(FIX, "quantized", case)
    values = load_file(os.path.join(FIX, "quantized", f"{case}.dequantize.safetensors"))
    r = _report(path)
    rows = _rows_are(r, values)
    assert r["dequantized"]["methods"] == {"modelopt nvfp4" if "nvfp4" in case else "fp8": len(values)}
    assert _report(path, workers=2) == r
    small = _by_name(_report(path, chunk_bytes=16))
    assert all(small[n] == rows[n] for n in values)
    plain = {k: v for k, v in load_file(os.path.join(path, "model.safetensors")).items()
             if not k.endswith(("weight_scale", "weight_scale_2", "input_scale")) and k not in values}
    _diff_reads_the_values(tmp_path, path, plain, values, 1e-3)


@pytest.mark.parametrize("sidecar", [True, False])
def test_a_modelopt_export_with_only_hf_quant_config(tmp_path, sidecar):
    """modelopt's older exports record their quantisation only in hf_quant_config.json (what vLLM reads), not in
    config.json: its FP8 weights are read as FP8QTensor.dequantize returned them, as with the newer config.json; without
    the sidecar nothing says whose FP8 it is, and they are left out (counted, not read)."""
    path = shutil.copytree(os.path.join(FIX, "quantized", "modelopt-fp8-llama"), tmp_path / "export")
    with open(path / "config.json") as f:
        cfg = json.load(f)
    del cfg["quantization_config"]
    with open(path / "config.json", "w") as f:
        json.dump(cfg, f)
    if not sidecar:
        os.remove(path / "hf_quant_config.json")
    values = load_file(os.path.join(FIX, "quantized", "modelopt-fp8-llama.dequantize.safetensors"))
    r = _report(str(path))
    if not sidecar:
        assert not r.get("dequantized") and {s["name"] for s in r["skipped"]} >= set(values)
    if not sidecar:   # an unreadable record is said and ignored: the weights and config.json still answer
        with open(path / "hf_quant_config.json", "w") as f:
            f.write("{not json")
        assert {k: v for k, v in _report(str(path)).items() if k != "notes"} == {k: v for k, v in r.items() if k != "notes"}
        out = subprocess.run([sys.executable, "-m", "ckptstat", "summary", str(path)], capture_output=True, text=True,
                             env={**os.environ, "COLUMNS": "500"})
        assert out.returncode == 0 and "hf_quant_config.json" in out.stdout and "ignored" in out.stdout
    else:
        _rows_are(r, values)
        assert r["dequantized"]["methods"] == {"fp8": len(values)}
        # a config.json named elsewhere (--config) reads no record beside it: nothing the user did not point at
        elsewhere = shutil.copytree(path, tmp_path / "elsewhere")
        os.remove(elsewhere / "model.safetensors")
        os.remove(path / "hf_quant_config.json")
        assert not collect(open_checkpoint(str(path), config=str(elsewhere / "config.json"))).report.get("dequantized")
        newer = _report(os.path.join(FIX, "quantized", "modelopt-fp8-llama"))
        assert {k: v for k, v in r.items() if k != "path"} == {k: v for k, v in newer.items() if k != "path"}


def test_a_gptq_v2_save_with_only_quantize_config(tmp_path):
    """AutoGPTQ-era uploads record their quantisation only in quantize_config.json (which AutoGPTQ and GPTQModel read),
    not in config.json: GPTQModel's gptq_v2 save read through it is what gptqmodel dequantizes (its zero points as
    stored), where without a record the layout alone is read as v1 (zero points + 1: other values)."""
    case = "gptqmodel-gptq_v2-2bit-llama"
    path = shutil.copytree(os.path.join(FIX, "quantized", case), tmp_path / "upload")
    with open(path / "config.json") as f:
        cfg = json.load(f)
    del cfg["quantization_config"]
    with open(path / "config.json", "w") as f:
        json.dump(cfg, f)
    values = load_file(os.path.join(FIX, "quantized", f"{case}.dequantize.safetensors"))
    r = _report(str(path))
    _rows_are(r, values)
    out = subprocess.run([sys.executable, "-m", "ckptstat", "summary", str(path)], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "500"})
    assert out.returncode == 0 and "from quantize_config.json" in out.stdout


def _rewrite(src: str, dst, change) -> str:  # noqa: ANN001
    """A copy of the folder `src` whose model.safetensors has `change(tensors)` applied (safetensors' own writer)."""
    from safetensors.torch import save_file

    shutil.copytree(src, dst)
    stored = load_file(os.path.join(dst, "model.safetensors"))
    change(stored)
    save_file(stored, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return str(dst)


def _quant_state(stored: dict, **fields) -> None:
    for k in [k for k in stored if ".quant_state.bitsandbytes__" in k]:
        d = json.loads(bytes(stored[k].tolist()).decode())
        d.update(fields)
        stored[k] = torch.tensor(list(json.dumps(d).encode()), dtype=torch.uint8)


@pytest.mark.parametrize("case,change", [
    ("bnb-nf4-llama", lambda s: _quant_state(s, blocksize=10**12)),
    ("bnb-nf4-llama", lambda s: _quant_state(s, blocksize=-64, nested_blocksize=0)),
    ("bnb-nf4-llama", lambda s: _quant_state(s, dtype="float32")),
    ("bnb-nf4-llama", lambda s: s.update({k: torch.tensor(list(b"{not json"), dtype=torch.uint8) for k in s
                                          if ".quant_state." in k})),
    ("bnb-nf4-llama", lambda s: s.update({k: v[:8] for k, v in s.items() if k.endswith(".quant_map")})),
    ("gptqmodel-gptq-4bit-actorder-llama", lambda s: s.update({k: v.float() for k, v in s.items()
                                                               if k.endswith(".scales")})),
    ("gptqmodel-gptq-4bit-actorder-llama", lambda s: s.update({k: v[:, :-1].contiguous() for k, v in s.items()
                                                               if k.endswith(".qzeros")})),
    ("gptqmodel-awq-4bit-llama", lambda s: s.update({k: v[:1].contiguous() for k, v in s.items()
                                                     if k.endswith(".qzeros")})),
])
def test_pieces_that_do_not_add_up_are_left_as_stored(cli, tmp_path, case, change):
    """A quant state or piece that lies (a block size past the weight, negative, a float32 dtype, no JSON, a short
    code book; GPTQ's float32 scales or short zero points, AWQ's zero points of one group): those weights are not
    dequantised and their pieces are left out by role, one exit 0, no traceback; the input is not modified."""
    path = _rewrite(os.path.join(FIX, "quantized", case), tmp_path / case, change)
    before = open(os.path.join(path, "model.safetensors"), "rb").read()
    code, out, err = cli("stats", path, "--json")
    r = json.loads(out)
    assert code == 0 and "Traceback" not in err and r["dequantized"] is None
    assert all(row["dtype"] in ("F16", "BF16", "F32") for row in r["tensors"])
    assert open(os.path.join(path, "model.safetensors"), "rb").read() == before


def test_a_gptq_group_index_past_its_scales_is_one_line(cli, tmp_path):
    """A GPTQ g_idx naming a group the scales do not hold: `stats` exits non-zero with one line naming the file and
    the tensor, no traceback, nothing on stdout; the input is not modified."""
    def change(stored: dict) -> None:
        stored["model.layers.0.mlp.up_proj.g_idx"][5] = 2   # (up_proj: 2 groups of 32 inputs)

    path = _rewrite(os.path.join(FIX, "quantized", "gptqmodel-gptq-4bit-actorder-llama"), tmp_path / "bad", change)
    before = open(os.path.join(path, "model.safetensors"), "rb").read()
    code, out, err = cli("stats", path, "--json")
    assert code != 0 and out == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "model.safetensors" in err and "up_proj.g_idx" in err, err
    assert open(os.path.join(path, "model.safetensors"), "rb").read() == before


def test_compressed_pieces_that_do_not_add_up_are_left_as_stored(cli, tmp_path):
    """compressed-tensors weights whose scales have a shape of no strategy, or whose packed words are short: left as
    stored, the others still read."""
    from conftest import fixture_script

    mq = fixture_script("make_quantized")
    src = mq.write_compressed(mq.build(mq.tiny_config("llama")), str(tmp_path / "w4"), "W4A16", "pack-quantized", 32)

    def change(stored: dict) -> None:
        down, up = "model.layers.0.mlp.down_proj.weight_scale", "model.layers.0.mlp.up_proj.weight_packed"
        stored[down] = stored[down][:, :2].contiguous()   # (half the groups: a group size the config does not state)
        stored[up] = stored[up][:, :3].contiguous()

    path = _rewrite(src, tmp_path / "bad", change)
    code, out, err = cli("stats", path, "--json")
    r = json.loads(out)
    rows = {row["name"] for row in r["tensors"]}
    assert code == 0 and "Traceback" not in err
    assert "model.layers.0.mlp.down_proj.weight" not in rows and "model.layers.0.mlp.up_proj.weight" not in rows
    assert "model.layers.0.mlp.gate_proj.weight" in rows and r["dequantized"]["weights"] == len(
        [n for n in load_file(os.path.join(src, "model.safetensors")) if n.endswith(".weight_packed")]) - 2


@pytest.mark.parametrize("scheme", ["W4A16", "W4A16_ASYM", "FP8_DYNAMIC", "W8A16", "NVFP4A16", "MXFP4A16", "MXFP6A16",
                                    "MXFP8A16"])
def test_diff_of_a_model_and_its_compressed_tensors_save_measures_the_quantisation(tmp_path, scheme):
    """`diff MODEL QUANTISED`: each quantised weight compared with its source as the values compressed-tensors'
    decompress returns (not removed + added pieces): max |a - b|, relative L2 and cosine as numpy computes them
    over the source's and the decompressor's values; everything else equal; either order."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig
    from conftest import fixture_script

    from ckptstat.analysis.diff import diff

    mq = fixture_script("make_quantized")
    fmt, group = COMPRESSED[scheme]
    model = mq.build(mq.tiny_config("llama"))
    source = {n: p.detach().clone() for n, p in model.state_dict().items()}
    path = mq.write_compressed(model, str(tmp_path / scheme), scheme, fmt, group)
    src = tmp_path / "source"
    src.mkdir()
    from safetensors.torch import save_file

    save_file({n: t.contiguous() for n, t in source.items()}, str(src / "model.safetensors"))
    with open(os.path.join(path, "config.json")) as f:
        qc = QuantizationConfig.model_validate(json.load(f)["quantization_config"])
    compressor = BaseCompressor.get_value_from_registry(qc.format)
    stored = load_file(os.path.join(path, "model.safetensors"))
    modules = sorted({k.rpartition(".")[0] for k in stored if k.endswith(".weight_scale")})
    for a, b in ((str(src), path), (path, str(src))):
        r = diff(open_checkpoint(a), open_checkpoint(b))
        by = {t["name"]: t for t in r["tensors"]}
        assert r["counts"]["added"] == r["counts"]["removed"] == 0 and r["a_params"] == r["b_params"]
        for m in modules:
            local = {k[len(m) + 1:]: v for k, v in stored.items() if k.startswith(m + ".")}
            dequantised = compressor.decompress(local, qc.config_groups["group_0"])["weight"]
            y, x = dequantised.double().numpy().ravel(), source[m + ".weight"].double().numpy().ravel()
            t = by[m.removeprefix("model.") + ".weight"]   # (fp4 decompresses to bfloat16: a dtype change too)
            changed = "values" if dequantised.dtype == source[m + ".weight"].dtype else "dtype"
            assert t["status"] == changed and t["max_abs"] == np.max(np.abs(x - y)), m
            assert t["rel_l2"] == pytest.approx(np.linalg.norm(x - y) / np.linalg.norm(x if a == str(src) else y),
                                                rel=1e-9)
            assert t["cosine"] == pytest.approx(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y)), rel=1e-9)
        assert {t["status"] for n, t in by.items() if not n.endswith("_proj.weight")} == {"equal"}


@pytest.mark.parametrize("case", GPTQMODEL)
def test_diff_of_a_model_and_its_gptq_or_awq_save_reads_gptqmodels_values(tmp_path, case):
    """`diff SOURCE QUANTISED` of a GPTQ or AWQ save: each quantised weight compared, in its logical [out, in] order,
    as the values gptqmodel dequantises it to (<case>.dequantize.safetensors): a source holding those values exactly
    is equal to the save, tensor for tensor; one holding them plus noise has the max |a - b|, relative L2 and cosine
    numpy computes; the same a few values a read (every slab and word boundary), either order."""
    path = os.path.join(FIX, "quantized", case)
    values = load_file(os.path.join(FIX, "quantized", f"{case}.dequantize.safetensors"))
    plain = {k: v for k, v in load_file(os.path.join(path, "model.safetensors")).items()
             if not k.endswith(("qweight", "qzeros", "scales", "g_idx"))}
    _diff_reads_the_values(tmp_path, path, plain, values, 1e-3)


def test_diff_of_two_quantisations_of_one_model_compares_their_values():
    """`diff GPTQ_8BIT GPTQ_4BIT` of one llama (GPTQModel's 8-bit one-group and 4-bit act-order saves of the same source):
    each weight compared as the values gptqmodel dequantises each side to (max |a - b|, relative L2 and cosine as numpy
    computes them over the two sides' dequantize files), not their pieces as stored (which share no shapes); a save
    against itself is equal tensor for tensor."""
    from ckptstat.analysis.diff import diff

    one, two = (os.path.join(FIX, "quantized", f"gptqmodel-gptq-{c}-llama") for c in ("8bit", "4bit-actorder"))
    xs, ys = (load_file(p + ".dequantize.safetensors") for p in (one, two))
    r = diff(open_checkpoint(one), open_checkpoint(two))
    assert r["counts"]["added"] == r["counts"]["removed"] == 0
    by = {t["name"]: t for t in r["tensors"]}
    for n in xs:
        x, y = xs[n].double().numpy().ravel(), ys[n].double().numpy().ravel()
        t = by[n.removeprefix("model.")]
        assert t["status"] == "values" and t["max_abs"] == np.max(np.abs(x - y)), n
        assert t["rel_l2"] == pytest.approx(np.linalg.norm(x - y) / np.linalg.norm(x), rel=1e-9)
        assert t["cosine"] == pytest.approx(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y)), rel=1e-9)
    assert {t["status"] for n, t in by.items() if "model." + n not in xs} == {"equal"}
    assert {t["status"] for t in diff(open_checkpoint(two), open_checkpoint(two))["tensors"]} == {"equal"}


@pytest.mark.parametrize("older", [False, True])
def test_comfyui_fp8_is_what_comfyui_dequantizes(tmp_path, older):
    """ComfyUI's FP8 saves (comfy/ops.py MixedPrecisionOps: `weight` float8 E4M3, float32 `weight_scale`, `comfy_quant`;
    older files: `scale_weight`, `scale_input`): each row is TensorCoreFP8Layout.dequantize's value, the code cast to
    the compute dtype (bfloat16) times the float32 scale, written here as comfy/quant_ops.py writes it; `diff` of the
    model and its FP8 save compares those values."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = {f"blocks.{i}.ffn.0.weight": torch.randn(48, 32) * (i + 1) for i in range(3)}
    model.update({f"blocks.{i}.ffn.0.bias": torch.randn(48) for i in range(3)})
    saved, want = {}, {}
    for name, w in model.items():
        if not name.endswith(".weight"):
            saved[name] = w.to(torch.bfloat16)
            continue
        scale = (w.abs().amax() / torch.finfo(torch.float8_e4m3fn).max).to(torch.float32)   # TensorCoreFP8Layout.quantize
        codes = (w * (1.0 / scale).to(w.dtype)).to(torch.float8_e4m3fn)
        module = name[:-len("weight")]
        saved[name] = codes
        saved[module + ("scale_weight" if older else "weight_scale")] = scale
        if older:
            saved[module + "scale_input"] = torch.ones((), dtype=torch.float32)
        else:
            saved[module + "comfy_quant"] = torch.tensor(list(b'{"format": "float8_e4m3fn"}'), dtype=torch.uint8)
        want[name] = torch.ops.aten._to_copy.default(codes, dtype=torch.bfloat16) * scale   # its dequantize
    if older:
        saved["scaled_fp8"] = torch.empty(0, dtype=torch.float8_e4m3fn)
    path = str(tmp_path / "model_fp8.safetensors")
    save_file(saved, path)
    r = _report(path)
    _rows_are(r, want)
    assert r["dequantized"]["methods"] == {"comfyui scaled fp8" if older else "comfyui fp8": len(want)}
    original = str(tmp_path / "model_bf16.safetensors")
    save_file({n: w.to(torch.bfloat16) for n, w in model.items()}, original)
    from ckptstat.analysis.diff import diff

    d = diff(open_checkpoint(original), open_checkpoint(path))
    changed = {row["name"]: row for row in d["tensors"] if row["status"] == "values"}
    assert set(changed) == set(want)
    for name, x in want.items():
        a = model[name].to(torch.bfloat16).double()
        assert changed[name]["max_abs"] == pytest.approx((a - x.double()).abs().max().item(), rel=1e-12)
        assert changed[name]["b_dtype"] == "BF16" and changed[name]["b_shape"] == list(x.shape)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gemma_quantisation_is_what_its_layers_dequantize(tmp_path, dtype):
    """transformers' Gemma quantisation (int8, packed int4 and int2 Linear weights by module pattern, the quantised
    embedding table): each row is the module's own `_dequantize_weights` in the model's dtype (QuantizedLinear's with
    that dtype; QuantizedEmbedding's in its output dtype), codes and scales drawn at random."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    from transformers.integrations.gemma_quant import QuantizedEmbedding, QuantizedLinear, replace_with_quant_layers
    from transformers.utils.quantization_config import GemmaQuantizationConfig

    config = Gemma3TextConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False)
    model = Gemma3ForCausalLM(config).to(getattr(torch, dtype))
    quant = GemmaQuantizationConfig(num_bits=4, quantize_embeddings=True, modules_to_not_convert=["lm_head"],
                                    module_quant_configs={r"mlp\.down_proj": {"num_bits": 2},
                                                          r"self_attn\.o_proj": {"num_bits": 8}})
    replace_with_quant_layers(model, quantization_config=quant, modules_to_not_convert=["lm_head"])
    g = torch.Generator().manual_seed(0)
    want = {}
    for name, m in model.named_modules():
        if isinstance(m, QuantizedLinear):
            codes, scale = m.weight, m.weight_scale
        elif isinstance(m, QuantizedEmbedding):
            codes, scale = m.embedding_quantized, m.embedding_scale
        else:
            continue
        low, high = (-128, 128) if codes.dtype == torch.int8 else (0, 256)
        codes.data = torch.randint(low, high, codes.shape, generator=g).to(codes.dtype)
        scale.data = torch.rand(scale.shape, generator=g) * 0.02 + 1e-3
        want[name + ".weight"] = (m.weight if isinstance(m, QuantizedEmbedding)
                                  else m._dequantize_weights(getattr(torch, dtype))).detach()
    model.config.quantization_config = quant
    model.save_pretrained(tmp_path)
    with open(tmp_path / "config.json") as f:   # (the model's dtype, as a bfloat16 / float16 save records it)
        cfg = json.load(f)
    cfg["dtype"] = dtype
    with open(tmp_path / "config.json", "w") as f:
        json.dump(cfg, f)
    r = _report(str(tmp_path))
    _rows_are(r, want)
    assert sum(r["dequantized"]["methods"].values()) == len(want)
    assert set(r["dequantized"]["methods"]) == {"gemma int2", "gemma int4", "gemma int8"}


def test_compressed_weights_left_as_stored_are_said(cli, tmp_path):
    """A float32 model compressed by compressed-tensors keeps float32 scales, which no decoder reads (docs/quantized.md):
    its quantised weights are in no row, and the report says how many and why (it listed their pieces as skipped by
    role, and nothing else)."""
    from conftest import fixture_script

    mq = fixture_script("make_quantized")
    cfg = mq.tiny_config("llama")
    cfg.torch_dtype = "float32"
    model = mq.build(cfg).float()
    path = mq.write_compressed(model, str(tmp_path / "w4"), "W4A16", "pack-quantized", 32)
    packed = [n for n in load_file(os.path.join(path, "model.safetensors")) if n.endswith(".weight_packed")]
    scales = {str(t.dtype) for n, t in load_file(os.path.join(path, "model.safetensors")).items() if n.endswith("_scale")}
    code, out, _ = cli("stats", path, "--json")
    r = json.loads(out)
    assert code == 0 and scales == {"torch.float32"} and r["dequantized"] is None
    assert r["left_quantized"] == {"compressed-tensors pack-quantized": len(packed)}
    code, out, _ = cli("stats", path)
    assert f"not decoded  {len(packed)} quantised weight(s) left as stored" in out


def test_memory_of_a_config_whose_quantization_is_not_planned_says_so(cli, tmp_path):
    """A bare config.json whose quantization_config the planner does not model (here compressed-tensors with no
    config group): the weights line says the weights are at the config's dtype because of that."""
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      vocab_size=128).to_dict()
    cfg["quantization_config"] = {"quant_method": "compressed-tensors", "format": "pack-quantized"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, out, _ = cli("memory", str(tmp_path / "config.json"), "--json")
    weights = next(x for x in json.loads(out)["lines"] if x["group"] == "weights")
    assert code == 0 and "quant_method 'compressed-tensors'" in weights["rule"] and "is not planned" in weights["rule"]
