"""`ckptstat diff`: every tensor classified, the metrics checked against numpy on the same arrays
(read back by the real safetensors reader), tolerances, name alignment, the markdown report, exit codes
and bounded, single-pass reads."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
import torch
from safetensors.torch import load_file as torch_load
from safetensors.torch import save_file

from ckptstat import open_checkpoint
from ckptstat.analysis.diff import diff, natural_key, parse_rules
from ckptstat.errors import UsageError
from ckptstat.render.diff import diff_markdown

L = 6   # layers


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[str, str]:
    """A: a tiny 6-layer stack under `model.`; B: a "fine-tune" of its last 2 layers, saved under
    `module.model.` (DDP), with one dtype cast, one tensor added, one removed and one reshaped."""
    g = torch.Generator().manual_seed(0)
    a: dict[str, torch.Tensor] = {"model.embed_tokens.weight": torch.randn(32, 16, generator=g)}
    for i in range(L):
        a[f"model.layers.{i}.self_attn.q_proj.weight"] = torch.randn(16, 16, generator=g)
        a[f"model.layers.{i}.mlp.up_proj.weight"] = torch.randn(24, 16, generator=g)
    a["model.norm.weight"] = torch.ones(16)
    a["model.old_head.weight"] = torch.randn(4, 16, generator=g)
    a["model.proj.weight"] = torch.randn(8, 16, generator=g)
    b = {k.replace("model.", "module.model.", 1): v.clone() for k, v in a.items()}
    del b["module.model.old_head.weight"]
    b["module.model.new_head.weight"] = torch.randn(4, 16, generator=g)
    b["module.model.proj.weight"] = torch.randn(16, 8, generator=g)           # shape changed
    b["module.model.embed_tokens.weight"] = a["model.embed_tokens.weight"].to(torch.bfloat16)  # dtype changed
    for i in (L - 2, L - 1):                                                   # the fine-tune: last 2 layers
        for k in (f"layers.{i}.self_attn.q_proj.weight", f"layers.{i}.mlp.up_proj.weight"):
            b["module.model." + k] = a["model." + k] + 1e-2 * torch.randn(a["model." + k].shape, generator=g)
    b["module.model.norm.weight"] = a["model.norm.weight"] + 1e-7                 # within atol=1e-6 only
    d = tmp_path_factory.mktemp("diff")
    save_file(a, str(d / "a.safetensors"))
    save_file(b, str(d / "b.safetensors"))
    return str(d / "a.safetensors"), str(d / "b.safetensors")


def _oracle(x: np.ndarray, y: np.ndarray) -> dict:
    x, y = x.astype(np.float64).ravel(), y.astype(np.float64).ravel()
    return {"max_abs": np.max(np.abs(x - y)), "rel_l2": np.linalg.norm(x - y) / np.linalg.norm(x),
            "cosine": np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y))}


def test_every_tensor_classified_and_measured(pair) -> None:
    pa, pb = pair
    r = diff(open_checkpoint(pa), open_checkpoint(pb), chunk_bytes=256)
    by = {t["name"]: t for t in r["tensors"]}
    assert by["old_head.weight"]["status"] == "removed" and by["new_head.weight"]["status"] == "added"
    assert by["proj.weight"]["status"] == "shape"
    # cast to bf16: the values rounded to it (a faithful conversion, no difference unless --strict)
    assert by["embed_tokens.weight"]["status"] == "converted" and by["embed_tokens.weight"]["rounded_to"] == "BF16"
    assert by["norm.weight"]["status"] == "values"
    assert r["prefixes_stripped"] == {"a": ["model."], "b": ["module.model."]}
    ta, tb = torch_load(pa), torch_load(pb)
    for t in r["tensors"]:
        if t["status"] not in ("values", "converted"):
            continue
        x = ta[t["a_name"]].float().numpy()
        y = tb[t["b_name"]].float().numpy()
        want = _oracle(x, y)
        assert t["max_abs"] == want["max_abs"], t["name"]
        assert t["rel_l2"] == pytest.approx(want["rel_l2"], rel=1e-9), t["name"]
        assert t["cosine"] == pytest.approx(want["cosine"], rel=1e-9), t["name"]
    equal = {t["name"] for t in r["tensors"] if t["status"] == "equal"}
    # unchanged tensors are never listed as changed, and exactly those are equal
    same = {k[len("model."):] for k in ta if "module." + k in tb and ta[k].dtype == tb["module." + k].dtype
            and ta[k].shape == tb["module." + k].shape and torch.equal(ta[k], tb["module." + k])}
    assert equal == same and len(same) == 2 * (L - 2)
    assert all(by[n]["identical"] for n in same)
    # the fine-tune shows in the per-layer summary: the last 2 layers only
    layers = {x["layer"]: x for x in r["summary"]["layers"]}
    assert [k for k, x in layers.items() if x["changed"]] == [L - 2, L - 1]
    for i in (L - 2, L - 1):
        rels = [by[f"layers.{i}.{m}"]["rel_l2"] for m in ("self_attn.q_proj.weight", "mlp.up_proj.weight")]
        assert layers[i]["mean_rel_l2"] == pytest.approx(np.mean(rels))
    assert r["same"] is False and r["schema"] == "ckptstat.diff/4"


def test_tolerances(pair) -> None:
    pa, pb = pair
    by = {t["name"]: t for t in diff(open_checkpoint(pa), open_checkpoint(pb), atol=1e-6)["tensors"]}
    x, y = torch_load(pa)["model.norm.weight"].numpy(), torch_load(pb)["module.model.norm.weight"].numpy()
    assert np.allclose(y, x, atol=1e-6, rtol=0) and not np.array_equal(x, y)
    assert by["norm.weight"]["status"] == "equal" and by["norm.weight"]["identical"] is False
    assert by["layers.5.mlp.up_proj.weight"]["status"] == "values"
    by = {t["name"]: t for t in diff(open_checkpoint(pa), open_checkpoint(pb), rtol=1e-6)["tensors"]}
    assert by["norm.weight"]["status"] == "equal"   # 1e-7 <= 1e-6 * |1|
    with pytest.raises(UsageError):
        diff(open_checkpoint(pa), open_checkpoint(pb), atol=-1)


def test_reads_bounded_and_once(pair, monkeypatch) -> None:
    """Chunks smaller than the tensors: every read is at most chunk_bytes of stored values, and each
    tensor's elements are read exactly once."""
    pa, pb = pair
    ca, cb = open_checkpoint(pa), open_checkpoint(pb)
    seen: dict[tuple[str, str], int] = {}
    calls = []

    def spy(ckpt):
        real = ckpt._read

        def read(info, start, count):
            calls.append(count * info.dt.bits // 8)
            seen[(ckpt.path, info.name)] = seen.get((ckpt.path, info.name), 0) + count
            return real(info, start, count)
        monkeypatch.setattr(ckpt, "_read", read)

    spy(ca)
    spy(cb)
    r = diff(ca, cb, chunk_bytes=128)
    compared = [t for t in r["tensors"] if t["status"] in ("values", "equal", "converted")]
    assert max(calls) <= 128 and len(calls) > 2 * len(compared)
    for t in compared:
        assert seen[(ca.path, t["a_name"])] == ca[t["a_name"]].numel
        assert seen[(cb.path, t["b_name"])] == cb[t["b_name"]].numel
    calls.clear()
    diff(ca, cb, names_only=True)
    assert calls == []


def test_names_only_and_same_file(pair, cli) -> None:
    pa, pb = pair
    r = diff(open_checkpoint(pa), open_checkpoint(pb), names_only=True)
    statuses = {t["name"]: t["status"] for t in r["tensors"]}
    assert statuses["norm.weight"] == "unread" and statuses["embed_tokens.weight"] == "dtype"
    rc, out, err = cli("diff", pa, pa, "--json")
    assert rc == 0 and json.loads(out)["same"] is True and err == ""


def test_map_rules_and_natural_sort(tmp_path) -> None:
    g = torch.Generator().manual_seed(1)
    w = {f"model.layers.{i}.self_attn.q_proj.weight": torch.randn(4, 4, generator=g) for i in (0, 2, 10)}
    save_file(w, str(tmp_path / "hf.safetensors"))
    save_file({k.replace("model.layers.", "blk.").replace(".self_attn.q_proj", ".attn_q"): v for k, v in w.items()},
              str(tmp_path / "gg.safetensors"))
    rules = tmp_path / "rules.txt"
    rules.write_text("# llama.cpp -> HF\n\n^blk\\.(\\d+)\\.attn_q\\. -> model.layers.\\1.self_attn.q_proj.\n")
    r = diff(open_checkpoint(str(tmp_path / "hf.safetensors")), open_checkpoint(str(tmp_path / "gg.safetensors")),
             rules=parse_rules(rules.read_text()))
    assert r["same"] is True and [t["name"] for t in r["tensors"]] == [
        f"layers.{i}.self_attn.q_proj.weight" for i in (0, 2, 10)]
    assert sorted(["layers.10.w", "layers.2.w", "layers.1.w"], key=natural_key) == ["layers.1.w", "layers.2.w", "layers.10.w"]
    with pytest.raises(UsageError, match="rules:1"):
        parse_rules("no arrow here")
    with pytest.raises(UsageError, match="bad regex"):
        parse_rules("(unclosed -> x")


def test_cli_exit_codes_and_markdown(pair, cli, tmp_path) -> None:
    pa, pb = pair
    rc, out, err = cli("diff", pa, pb)
    assert rc == 1 and "values changed" in out and "module.model." in out and err == ""
    rc, out, _ = cli("diff", pa, pb, "--json")
    assert rc == 1 and json.loads(out)["counts"]["removed"] == 1
    rc, md, _ = cli("diff", pa, pb, "--format", "md")
    assert rc == 1 and md.startswith("# ckptstat diff")
    assert "## Summary per layer" in md and "## Summary per bucket" in md
    layer_rows = md.split("## Summary per layer")[1].split("\n\n")[1].splitlines()[2:]
    assert [row.split("|")[3].strip() for row in layer_rows] == ["0"] * (L - 2) + ["2", "2"]
    report = tmp_path / "report.md"
    rc, out, _ = cli("diff", pa, pb, "-o", str(report))
    assert rc == 1 and out == "" and report.read_text() == md
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
    before = open(pb, "rb").read()
    rc, out, err = cli("diff", pa, pb, "-o", pb)
    assert rc == 2 and "is an input" in err and "refusing to overwrite it" in err and err.count("\n") == 1
    assert open(pb, "rb").read() == before
    rules = tmp_path / "bad.rules"
    rules.write_text("x\n")
    rc, _, err = cli("diff", pa, pb, "--map", str(rules))
    assert rc == 2 and "bad.rules:1" in err and err.count("\n") == 1
    rc, _, err = cli("diff", pa, pb, "--map", str(tmp_path / "none.rules"))
    assert rc == 2 and "none.rules" in err and "Traceback" not in err
    rc, out, err = cli("diff", pa, pb, "-o", str(tmp_path / "no" / "such" / "r.md"))
    assert rc == 2 and out == "" and "r.md" in err and err.count("\n") == 1 and "Traceback" not in err
    rc, _, err = cli("diff", pa, pb, "--format", "pdf")
    assert rc == 2 and err.count("\n") == 1


# --- HF <-> GGUF: the family's table against gguf-py's own TensorNameMap, and a pair written by both writers
def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=3, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=32, tie_word_embeddings=False)
    return cfg, LlamaForCausalLM(cfg)


def test_gguf_table_matches_gguf_py() -> None:
    gguf = pytest.importorskip("gguf")
    from ckptstat.families import get

    cfg, model = _tiny_llama()
    table = get("llama").gguf_tensor_names
    oracle = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)
    for name in model.state_dict():
        want = oracle.get_name(name, try_suffixes=(".weight", ".bias"))
        stem = name.rpartition(".")[0]
        bid = re.search(r"\.layers\.(\d+)\.", name)
        b = bid.group(1) if bid else ""
        ours = [gg.replace("{bid}", b) for hf, gg in table if hf.replace("{bid}", b) == stem]
        assert ours == [want.rpartition(".")[0]], name


def test_gguf_pair_aligned(tmp_path) -> None:
    gguf = pytest.importorskip("gguf")
    cfg, model = _tiny_llama()
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(sd, str(tmp_path / "hf.safetensors"))
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(32)
    w.add_embedding_length(16)
    w.add_feed_forward_length(24)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    changed = "model.layers.1.mlp.down_proj.weight"
    for k, v in sd.items():
        x = v.numpy() + (np.float32(0.5) if k == changed else np.float32(0))
        if k.endswith(("q_proj.weight", "k_proj.weight")):   # LlamaModel.permute, as llama.cpp's loader reads q/k
            heads = 2 if k.endswith("q_proj.weight") else 1
            x = x.reshape(heads, 2, x.shape[0] // heads // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)
        w.add_tensor(names.get_name(k, try_suffixes=(".weight", ".bias")), x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = diff(open_checkpoint(str(tmp_path / "hf.safetensors")), open_checkpoint(str(tmp_path / "m.gguf")))
    assert r["builtin_map"] and "llama" in r["builtin_map"]
    status = {t["name"]: t["status"] for t in r["tensors"]}
    assert set(status) == {k.removeprefix("model.") for k in sd}
    assert {k for k, s in status.items() if s != "equal"} == {changed.removeprefix("model.")}
    t = next(t for t in r["tensors"] if t["status"] == "values")
    assert t["max_abs"] == pytest.approx(0.5) and r["rows"] == []


def test_html_report_self_contained(pair, cli, tmp_path) -> None:
    from html.parser import HTMLParser

    class Tables(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tables: list[list[list[str]]] = []
            self.refs: list[str] = []
            self.cell: list[str] | None = None

        def handle_starttag(self, tag, attrs):
            self.refs += [v for k, v in attrs if k in ("src", "href") and v]
            if tag == "table":
                self.tables.append([])
            elif tag == "tr":
                self.tables[-1].append([])
            elif tag in ("td", "th"):
                self.cell = []

        def handle_endtag(self, tag):
            if tag in ("td", "th") and self.cell is not None:
                self.tables[-1][-1].append("".join(self.cell))
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell.append(data)

    pa, pb = pair
    out = tmp_path / "report.html"
    rc, stdout, _ = cli("diff", pa, pb, "-o", str(out))
    assert rc == 1 and stdout == ""
    p = Tables()
    p.feed(out.read_text())
    # self-contained: the only reference is the heatmap, inline as a data URI
    assert all(ref.startswith("data:image/png;base64,") for ref in p.refs) and "<script" not in out.read_text()
    r = diff(open_checkpoint(pa), open_checkpoint(pb))
    layer_table = next(t for t in p.tables if t[0] == ["layer", "tensors", "changed", "mean rel L2"])
    assert [int(row[2]) for row in layer_table[1:]] == [x["changed"] for x in r["summary"]["layers"]]
    cells = {row[0]: row for t in p.tables if t[0][0] == "tensor" for row in t[1:]}
    assert set(cells) == {t["name"] for t in r["tensors"]}
    assert cells["proj.weight"][1] == "shape changed" and cells["old_head.weight"][1] == "removed"


def test_nonfinite_values(tmp_path) -> None:
    x = np.array([1.0, np.nan, np.inf, 2.0, np.nan, -np.inf], dtype=np.float32)
    y = np.array([1.5, np.nan, np.inf, 2.0, 3.0, np.inf], dtype=np.float32)
    save_file({"w": torch.from_numpy(x.copy()), "same": torch.from_numpy(x.copy())}, str(tmp_path / "a.safetensors"))
    save_file({"w": torch.from_numpy(y), "same": torch.from_numpy(x.copy())}, str(tmp_path / "b.safetensors"))
    r = diff(open_checkpoint(str(tmp_path / "a.safetensors")), open_checkpoint(str(tmp_path / "b.safetensors")), atol=1)
    by = {t["name"]: t for t in r["tensors"]}
    assert by["same"]["status"] == "equal" and by["same"]["identical"] is True
    # numpy: equal_nan isclose flags exactly the NaN-vs-3 and -inf-vs-inf positions at atol=1
    assert int(np.sum(~np.isclose(x, y, atol=1, rtol=0, equal_nan=True))) == by["w"]["nonfinite_mismatch"] == 2
    finite = np.isfinite(x) & np.isfinite(y)
    assert by["w"]["status"] == "values" and by["w"]["max_abs"] == np.max(np.abs(x[finite] - y[finite]))
    assert by["w"]["rel_l2"] is None and json.dumps(r, allow_nan=False)


def test_a_tied_name_is_no_difference(cli):
    # The same BertForPreTraining as torch.save wrote it (decoder weight and bias share the storage of the word
    # embeddings and cls.predictions.bias) and as TF re-saved it under google-research names (the decoder is
    # the embedding table, structurally): the aliased names are ties, not additions.
    import torch
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
    pt = os.path.join(root, "bert-tiny-pretraining", "pytorch_model.bin")
    tf = os.path.join(root, "tf1-bert", "model.ckpt-0")
    sd = torch.load(pt, map_location="cpu", weights_only=True)
    ptr = {n: t.untyped_storage().data_ptr() for n, t in sd.items()}
    shared = len(ptr) - len(set(ptr.values()))   # the oracle: torch's own storages (names beyond one a storage)
    assert shared
    for a, b, side in ((tf, pt, "b_name"), (pt, tf, "a_name")):
        rc, out, _ = cli("diff", a, b, "--json")
        r = json.loads(out)
        tied = {t[side]: t["tied_to"] for t in r["tensors"] if t["status"] == "tied"}
        assert rc == 0 and r["same"] and r["counts"]["added"] == r["counts"]["removed"] == 0
        assert len(tied) == shared and all(ptr[n] == ptr[t] and n != t for n, t in tied.items())
        rc, out, _ = cli("diff", a, b)
        assert rc == 0 and "no differences" in out and "tied" in out


def test_nonfinite_mismatch_is_named_in_every_table(tmp_path, cli, monkeypatch) -> None:
    """Was: a tensor whose only difference is a NaN read 'values changed' with max |a-b| 0 and an empty detail
    (max_abs leaves non-finite pairs out) in the text, markdown and HTML tables. Oracle: numpy's isclose."""
    monkeypatch.setenv("COLUMNS", "200")   # (the text table's detail column whole, whatever the runner's terminal)
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    y = x.copy()
    y[[3, 40]] = np.nan
    y[7] = np.inf
    save_file({"w": torch.from_numpy(x)}, str(tmp_path / "a.safetensors"))
    save_file({"w": torch.from_numpy(y)}, str(tmp_path / "b.safetensors"))
    n = int(np.sum(~np.isclose(x, y, equal_nan=True)))
    want = f"{n} NaN/Inf facing another value"
    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    rc, out, _ = cli("diff", a, b)
    assert rc == 1 and want in out
    for fmt in ("md", "html"):
        rc, _, _ = cli("diff", a, b, "--format", fmt, "-o", str(tmp_path / f"d.{fmt}"))
        assert rc == 1 and want in (tmp_path / f"d.{fmt}").read_text()


def test_a_bf16_value_beyond_float16_cast_to_f16_is_named(tmp_path, cli, monkeypatch) -> None:
    """A bf16 model converted to an f16 GGUF (convert_hf_to_gguf.py --outtype f16 casts with torch) whose values
    beyond float16's range became inf: was 'dtype changed, BF16 -> F16' with max |a-b| 0 and nothing else in the text,
    markdown and HTML tables (the JSON's nonfinite_mismatch said 2). Oracle: torch's cast, numpy's isinf."""
    import gguf

    monkeypatch.setenv("COLUMNS", "200")
    w = (torch.linspace(-1, 1, 64) * 0.1).to(torch.bfloat16).reshape(8, 8)
    w[0, 0], w[3, 4], w[5, 5] = 1e5, -70000.0, 60000.0   # two beyond float16's 65504, one within
    half = w.to(torch.float16).numpy()
    n = int(np.isinf(half).sum())
    assert n == 2
    hf = str(tmp_path / "a.safetensors")
    save_file({"w": w}, hf)
    out = str(tmp_path / "b.gguf")
    g = gguf.GGUFWriter(out, "llama")
    g.add_tensor("w", half)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    want = f"BF16 -> F16; {n} NaN/Inf facing another value"
    rc, text, _ = cli("diff", hf, out)
    assert rc == 1 and want in text
    rc, js, _ = cli("diff", hf, out, "--json")
    assert rc == 1 and [(t["status"], t["nonfinite_mismatch"]) for t in json.loads(js)["tensors"]] == [("dtype", n)]
    for fmt in ("md", "html"):
        rc, _, _ = cli("diff", hf, out, "--format", fmt, "-o", str(tmp_path / f"d.{fmt}"))
        assert rc == 1 and f"F16; {n} NaN/Inf facing another value" in (tmp_path / f"d.{fmt}").read_text()


def test_a_wrappers_text_model_nested_either_way_is_the_same(tmp_path) -> None:
    """A multimodal wrapper's text model as transformers 5 saves it (model.language_model.*, lm_head on top: the
    Qwen3-VL-MoE fixture's source) and as transformers 4 and mlx_lm nest it (language_model.model.*,
    language_model.lm_head): the same tensors, every one paired and equal."""
    src = os.path.join(os.path.dirname(__file__), "..", "fixtures", "mlx-sources", "qwen3_vl_moe-4bit-g32")
    w = torch_load(os.path.join(src, "model.safetensors"))
    nested = {re.sub(r"^model\.language_model\.", "language_model.model.", re.sub(r"^lm_head\.", "language_model.lm_head.", k)): v
              for k, v in w.items()}
    assert len(nested) == len(w) and any(k.startswith("language_model.model.") for k in nested)
    save_file(nested, str(tmp_path / "nested.safetensors"))
    r = diff(open_checkpoint(os.path.join(src, "model.safetensors")), open_checkpoint(str(tmp_path / "nested.safetensors")))
    assert r["same"] and {t["status"] for t in r["tensors"]} == {"equal"} and len(r["tensors"]) == len(w)


def test_non_tensor_values_that_differ(tmp_path, cli) -> None:
    """Two training checkpoints with the same tensors (a timm-style save, a Trainer's training_args.bin): the non-tensor
    values that differ, each as torch.load gives it back on either side (test_torch_data_classes' flattening), make the
    diff (exit 1); a copy is the same (exit 0); facing a safetensors file, which keeps no values, they are noted, not
    compared."""
    import argparse

    transformers = pytest.importorskip("transformers")
    from test_scan_plain_data import _as_read
    from test_torch_data_classes import _values

    sd = {"fc.weight": torch.ones(2, 3)}
    pairs = {
        "timm": ({"epoch": 1, "state_dict": sd, "args": argparse.Namespace(lr=0.1, model="resnet50")},
                 {"epoch": 2, "state_dict": sd, "args": argparse.Namespace(lr=0.2, model="resnet50"), "best": 0.5}),
        "training_args": tuple(transformers.TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], **kw)
                               for kw in ({"learning_rate": 5e-5}, {"learning_rate": 1e-4, "lr_scheduler_type": "cosine",
                                                                     "num_train_epochs": 1})),
    }
    for name, (obj_a, obj_b) in pairs.items():
        pa, pb = str(tmp_path / f"{name}-a.pt"), str(tmp_path / f"{name}-b.pt")
        torch.save(obj_a, pa)
        torch.save(obj_b, pb)
        va, vb = (_values(_as_read(torch.load(p, weights_only=False)), os.path.basename(p)) for p in (pa, pb))
        want = {n: ("added" if n not in va else "removed" if n not in vb else "changed", va.get(n), vb.get(n))
                for n in set(va) | set(vb) if va.get(n, KeyError) != vb.get(n, KeyError)}
        r = diff(open_checkpoint(pa), open_checkpoint(pb))
        assert want and {o["name"]: (o["status"], o["a"], o["b"]) for o in r["objects"]} == want, name
        assert not r["same"] and r["counts"]["equal"] == (1 if name == "timm" else 0)   # (fc.weight: the same)
        rc, out, _ = cli("diff", pa, pb)
        assert rc == 1 and "Non-tensor values that differ" in out
        assert cli("diff", pa, pa)[0] == 0
    plain = str(tmp_path / "model.safetensors")
    save_file(sd, plain)
    r = diff(open_checkpoint(str(tmp_path / "timm-a.pt")), open_checkpoint(plain))
    assert r["same"] and r["objects"] == [] and r["objects_note"].startswith("only A keeps non-tensor values")


def test_values_of_a_dcp_folder_and_its_torch_save_conversion(tmp_path) -> None:
    """torch's own converter (dcp_to_torch_save) of a DCP folder holding a model, an AdamW state and plain values:
    the same values by the same names on both sides (DCP's items, the torch.save's nested dicts), no difference; the
    conversion saved again with another `step` is one changed value."""
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    m = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    m(torch.ones(1, 4)).sum().backward()
    opt.step()
    folder, converted, edited = str(tmp_path / "dcp"), str(tmp_path / "c.pt"), str(tmp_path / "e.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": m.state_dict(), "optim": opt.state_dict(), "step": 3, "extra": {"best": 0.5}},
                 checkpoint_id=folder)
        dcp_to_torch_save(folder, converted)
    obj = torch.load(converted, weights_only=False)
    torch.save({**obj, "step": obj["step"] + 1}, edited)
    r = diff(open_checkpoint(folder), open_checkpoint(converted))
    assert r["same"] and r["objects"] == [] and r["objects_note"] is None
    r = diff(open_checkpoint(folder), open_checkpoint(edited))
    assert not r["same"] and r["objects"] == [{"name": "step", "status": "changed", "a": obj["step"],
                                               "b": obj["step"] + 1}]


def test_signalling_nan_without_a_warning(tmp_path) -> None:
    """Widening a float32 signalling NaN printed numpy's 'invalid value encountered in cast' on stderr."""
    import warnings

    x = np.array([0x7F800001, 0x3F800000, 0x40000000], dtype=np.uint32).view(np.float32)
    y = np.array([1.0, 1.0, 2.5], dtype=np.float32)
    save_file({"w": torch.from_numpy(x.copy())}, str(tmp_path / "a.safetensors"))
    save_file({"w": torch.from_numpy(y)}, str(tmp_path / "b.safetensors"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = diff(open_checkpoint(str(tmp_path / "a.safetensors")), open_checkpoint(str(tmp_path / "b.safetensors")))
    w = r["tensors"][0]
    assert (w["nonfinite_mismatch"], w["max_abs"]) == (1, 0.5)


def test_huge_float64_metrics(tmp_path) -> None:
    """The bugs: cosine was ab / sqrt(aa * bb), whose product overflows for float64 values above ~1e77 although aa
    and bb are finite: cosine 0.0 where numpy's is 0.995; and two finite values whose difference is beyond float64's
    max (1e308 and -1e308) were counted as 'NaN/Inf facing another value', with max_abs 0."""
    x = np.array([1e100, 2e100, -1e100])
    y = np.array([1e100, 2.5e100, -1e100])
    save_file({"w": torch.from_numpy(x), "o": torch.tensor([1e308, 1.0], dtype=torch.float64)}, str(tmp_path / "a.safetensors"))
    save_file({"w": torch.from_numpy(y), "o": torch.tensor([-1e308, 1.0], dtype=torch.float64)}, str(tmp_path / "b.safetensors"))
    r = diff(open_checkpoint(str(tmp_path / "a.safetensors")), open_checkpoint(str(tmp_path / "b.safetensors")))
    by = {t["name"]: t for t in r["tensors"]}
    xs, ys = x * 1e-100, y * 1e-100   # numpy's oracle on the values scaled (its squares overflow too)
    cosine = float(np.dot(xs, ys) / (np.linalg.norm(xs) * np.linalg.norm(ys)))
    assert by["w"]["cosine"] == pytest.approx(cosine, rel=1e-12)
    assert by["w"]["rel_l2"] == pytest.approx(float(np.linalg.norm(xs - ys) / np.linalg.norm(xs)), rel=1e-12)
    o = by["o"]
    assert (o["status"], o["nonfinite_mismatch"], o["max_abs"], o["rel_l2"]) == ("values", 0, np.inf, None)


def test_summary_layers_of_an_encoder_decoder_are_per_stack(tmp_path) -> None:
    """The bug: summary.layers was keyed by the layer index alone, so an encoder-decoder's encoder layer 1 and decoder
    layer 1 were one row: a fine-tune of the decoder's layer 1 read '26 of 42 tensors changed' for 'layer 1', the
    untouched encoder layer 1 inside it. Each stack's layer is its own row now (bucket, layer), as stats keys them."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BartConfig(vocab_size=64, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                                  decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32)
    m = transformers.BartModel(cfg)
    m.save_pretrained(str(tmp_path / "a"))
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.startswith("decoder.layers.1."):
                p.add_(0.1)
    m.save_pretrained(str(tmp_path / "b"))
    r = diff(open_checkpoint(str(tmp_path / "a")), open_checkpoint(str(tmp_path / "b")))
    changed = {(x["bucket"], x["layer"]): x["changed"] for x in r["summary"]["layers"]}
    params = dict(m.named_parameters())
    per_stack = {(stack, i): sum(n.startswith(f"{stack}.layers.{i}.") for n in params) for stack in ("encoder", "decoder")
                 for i in range(2)}
    assert changed == {**{k: 0 for k in per_stack}, ("decoder", 1): per_stack[("decoder", 1)]}
    assert {(x["bucket"], x["layer"]): x["tensors"] for x in r["summary"]["layers"]} == per_stack
    md = diff_markdown(r)
    assert "| decoder.1 |" in md and "| encoder.1 |" in md
