"""`ckptstat diff MODEL_DIR model.gguf` where a tensor is stored in the HF layout, without the transform llama.cpp's
converter applies (docs/diff.md "Conversions"): the GGUF loaders of these architectures read only the transformed
layout (the non-NeoX rope's interleaved rows, Gemma's 1 + w, the q/k/v blocks of a fused QKV, GPT-2's [out, in]), so
such a file is broken whoever wrote it: a difference naming the tensor. The files are real conversions by llama.cpp's
convert_hf_to_gguf.py (fixtures/make_conversions.py, fixtures/make_conversions_vocabless.py) with one tensor put back
to its HF values through gguf-py's GGUFReader and GGUFWriter (every other key and tensor copied as it is)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file

HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "conversions")
VOCABLESS = os.path.join(HERE, "vocabless")


def rewrite(src: str, dst: str, replace: dict[str, np.ndarray], drop: tuple[str, ...] = ()) -> None:
    """`src` copied to `dst` by gguf-py, keys and tensors in order, the tensors named in `replace` given those values
    (float32; the tensor's own type is kept for the others), those in `drop` left out."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub)
    for t in reader.tensors:
        if t.name in drop:
            continue
        if t.name in replace:
            writer.add_tensor(t.name, np.ascontiguousarray(replace[t.name], dtype=np.float32))
        else:
            writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _stored(path: str, name: str) -> np.ndarray:
    import gguf

    t = next(t for t in gguf.GGUFReader(path).tensors if t.name == name)
    return gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])


# (folder, model, GGUF file, GGUF tensor, HF tensor, what the transform is called)
CASES = [
    (HERE, "llama", "llama.f32.gguf", "blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight",
     "rotary row permutation (q, 4 heads)"),
    (HERE, "llama", "llama.f32.gguf", "blk.1.attn_k.weight", "model.layers.1.self_attn.k_proj.weight",
     "rotary row permutation (k, 2 heads)"),
    (HERE, "gemma", "gemma.f32.gguf", "blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight", "norm + 1"),
    (VOCABLESS, "falcon", "falcon.f32.gguf", "blk.1.attn_qkv.weight",
     "transformer.h.1.self_attention.query_key_value.weight", "fused QKV regrouped into q, k, v"),
    # square ([32, 32]): the HF values fit the GGUF shape as they are
    (VOCABLESS, "gpt2", "gpt2.f32.gguf", "blk.0.attn_output.weight", "transformer.h.0.attn.c_proj.weight",
     "Conv1D transpose"),
]


@pytest.mark.parametrize("folder,model,file,gguf_name,hf,label", CASES, ids=[f"{c[1]}-{c[3]}" for c in CASES])
def test_a_tensor_stored_without_the_converters_transform_is_a_difference(folder, model, file, gguf_name, hf, label,
                                                                          tmp_path, cli) -> None:
    src = os.path.join(folder, file)
    values = load_file(os.path.join(folder, model, "model.safetensors"))[hf]
    before = _stored(src, gguf_name)
    assert before.shape == values.shape and not np.array_equal(before, values)   # the converter did transform it
    dst = str(tmp_path / file)
    rewrite(src, dst, {gguf_name: values})
    assert np.array_equal(_stored(dst, gguf_name), values)   # gguf-py reads back the HF layout
    rc, out, _ = cli("diff", os.path.join(folder, model), dst, "--json")
    r = json.loads(out)
    bad = [t for t in r["tensors"] if t["status"] not in ("equal", "converted", "tied")]
    assert rc == 1 and r["same"] is False and [t["a_name"] for t in bad] == [hf], bad
    assert bad[0]["status"] == "values" and bad[0]["b_name"] == gguf_name
    assert label in bad[0]["untransformed"] and bad[0]["untransformed"].startswith("stored without llama.cpp's")
    assert "llama.cpp would read it wrong" in bad[0]["untransformed"]
    rc, out, _ = cli("diff", os.path.join(folder, model), dst)
    # (the row's detail, checked in the JSON above, is folded or cut in a narrow terminal: the count line is not)
    assert rc == 1 and "1 tensor(s) stored in the HF layout" in out


def test_every_tensor_stored_untransformed(tmp_path, cli) -> None:
    """All of a Llama's q and k in the HF layout (a writer that skipped the permutation): each named."""
    values = load_file(os.path.join(HERE, "llama", "model.safetensors"))
    replace = {f"blk.{i}.attn_{p}.weight": values[f"model.layers.{i}.self_attn.{p}_proj.weight"]
               for i in range(2) for p in "qk"}
    dst = str(tmp_path / "llama.gguf")
    rewrite(os.path.join(HERE, "llama.f32.gguf"), dst, replace)
    rc, out, _ = cli("diff", os.path.join(HERE, "llama"), dst, "--json")
    r = json.loads(out)
    bad = {t["b_name"] for t in r["tensors"] if t.get("untransformed")}
    assert rc == 1 and bad == set(replace) and r["counts"]["values"] == 4


@pytest.mark.parametrize("folder,model,file", [(HERE, "llama", "llama.f32.gguf"), (HERE, "gemma", "gemma.f32.gguf"),
                                               (VOCABLESS, "falcon", "falcon.f32.gguf"),
                                               (VOCABLESS, "gpt2", "gpt2.f32.gguf")])
def test_the_intact_conversions_are_the_same_model(folder, model, file, tmp_path, cli) -> None:
    """The converter's own files, and their copies by the rewrite above (nothing replaced): exit 0, each tensor the
    converter transforms compared after its transform."""
    dst = str(tmp_path / file)
    rewrite(os.path.join(folder, file), dst, {})
    for path in (os.path.join(folder, file), dst):
        rc, out, _ = cli("diff", os.path.join(folder, model), path, "--json")
        r = json.loads(out)
        assert rc == 0 and r["same"] is True, [t for t in r["tensors"] if t["status"] not in ("equal", "tied")]
        assert not any(t.get("untransformed") for t in r["tensors"])
        assert any(t.get("transform") for t in r["tensors"])
