"""The one description (families/framework/layout.py) against the libraries that wrote the files: for every family described
by a DecoderLayout and every sample model, the tensors its walk derives are the names and shapes save_pretrained
writes (transformers 5 reverts its in-memory renames and fused experts: census_audit.saved_shapes), and the GGUF
names it derives are gguf-py's TensorNameMap's for the llama.cpp architecture the family converts to (each routed
expert under its stacked name, as convert_hf_to_gguf.py writes them)."""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
from census_audit import saved_shapes  # noqa: E402
from test_families import assert_saved_shapes, saved_spec  # noqa: E402
from test_gguf_names import CONVERTS_AS  # noqa: E402

from ckptstat.families import FAMILIES, generic  # noqa: E402
from ckptstat.families.framework import layout as L  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402

DESCRIBED = [f for f in FAMILIES if L.layouts_of(f) is not None]
ARCHS = {name: arch for arch, name in gguf.MODEL_ARCH_NAMES.items()}
# model types whose llama.cpp converter maps its stacked experts under a name without the body's prefix
MERGED_WITHOUT_BODY = {"lfm2_moe"}
# model types whose llama.cpp converter strips the body's prefix from every name before mapping it (convert_hf_to_gguf.py
# BloomModel.modify_tensors: re.sub(r'transformer\.', '', name))
STRIPPED_BODY = {"bloom"}
CASES = [pytest.param(f, s, m, id=f"{f.name}-{s.config}-{m}") for f in DESCRIBED for s in f.samples for m in s.models]


def _built(sample, model_name):
    cfg = getattr(T, sample.config)(**sample.kwargs)
    with torch.device("meta"):
        model = getattr(T, model_name)._from_config(cfg)
    return cfg, model, from_config(dict(cfg.to_dict(), architectures=[model_name]))


def test_the_layout_families_are_described():
    assert {f.name for f in DESCRIBED} >= {"llama", "qwen3", "olmo", "phi3", "mixtral", "glm", "smollm3", "arcee", "qwen_moe",
                                          "gemma", "deepseek", "gpt_oss"}
    assert L.layouts_of(generic.FAMILY) is None   # its layout follows the config's experts (generic._layout)


@pytest.mark.parametrize("family,sample,model_name", CASES)
def test_derived_tensors_are_what_save_pretrained_writes(family, sample, model_name):
    spec = saved_spec(sample, model_name)
    assert_saved_shapes(L.expected_tensors(L.layouts_of(family).of(spec), spec), sample, model_name)


def _stacked(name: str) -> str:
    """An expert's name as llama.cpp's converter stacks it: `experts.N.` dropped."""
    return re.sub(r"\.experts\.\d+\.", ".experts.", name)


@pytest.mark.parametrize("family,sample,model_name", [c for c in CASES if c.values[2].endswith("ForCausalLM")])
def test_derived_gguf_names_are_tensor_name_maps(family, sample, model_name):
    cfg, model, spec = _built(sample, model_name)
    mt = cfg.model_type
    arch = ARCHS.get(CONVERTS_AS.get(mt, mt)) or next((ARCHS[n] for n in family.gguf_names if n in ARCHS), None)
    if arch is None:
        pytest.skip(f"llama.cpp has no architecture for {family.name}")
    oracle = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    lay = L.layouts_of(family).of(spec)
    body = lay.paths.body + "."
    ours = {}
    for m in L.modules(lay, spec):
        for i in m.layers or (0,):
            for suffix, _ in m.shapes:
                hf = ("" if m.top else body) + L.joined(m.path.format(bid=i, xid=0), suffix)
                ours[_stacked(hf)] = None if m.gguf is None else L.joined(m.gguf.format(bid=i), suffix)
    saved = {_stacked(n) for n in saved_shapes(model)}
    assert set(ours) == saved
    # llama.cpp's LFM2-MoE converter stacks the experts and maps them as layers.N.feed_forward.experts.w1 (no `model.`)
    merged = {n: n.removeprefix(body) if (mt in MERGED_WITHOUT_BODY and ".experts." in n) or mt in STRIPPED_BODY else n
              for n in saved}
    # every converter with a dt_bias renames it dt_proj.bias first (conversion/mamba.py Mamba2Model, qwen.py
    # Qwen3NextModel, kimi_linear.py, ... modify_tensors), which TensorNameMap then names ssm_dt
    renamed = {n: re.sub(r"\.dt_bias$", ".dt_proj.bias", merged[n]) for n in saved}
    theirs = {n: oracle.get_name(renamed[n], try_suffixes=(".weight", ".bias")) for n in saved}
    if mt == "granitemoehybrid" and not cfg.num_local_experts:
        # Granite 4 Micro: conversion/granite.py GraniteMoeModel.modify_tensors names the shared MLP's output_linear
        # FFN_DOWN, not TensorNameMap's ffn_down_shexp, when the config has no experts (its input_linear is split)
        theirs = {n: re.sub(r"_shexp(\.weight)$", r"\1", v) if v and ".shared_mlp.output_linear." in n else v
                  for n, v in theirs.items()}
    assert ours == theirs


def test_a_misspelt_variant_is_an_error():
    with pytest.raises(TypeError):
        L.DecoderLayout(norm="rms")   # type: ignore[arg-type]
    with pytest.raises(TypeError):
        L.DecoderLayout(qk_nrom="head")   # type: ignore[call-arg]


NEW = [("Glm4Config", dict(partial_rotary_factor=0.5, head_dim=8), "Glm4ForCausalLM", "GLM4"),
       ("SmolLM3Config", dict(num_hidden_layers=4, tie_word_embeddings=False), "SmolLM3ForCausalLM", "SMOLLM3"),
       ("ArceeConfig", {}, "ArceeForCausalLM", "ARCEE")]


@pytest.mark.parametrize("config,kwargs,model_name,arch", NEW, ids=[n[0] for n in NEW])
def test_a_gguf_file_of_a_new_layout_family_resolves_and_counts(tmp_path, config, kwargs, model_name, arch):
    """A GGUF file as convert_hf_to_gguf.py names it (TensorNameMap, LLaMA's size keys; zeros for values): the family
    from general.architecture, the config from its metadata (layout.gguf_reader), the predicted parameters the
    transformers model's."""
    import numpy as np
    from census_audit import saved_state
    from test_gguf_families import _sizes as gguf_sizes  # the size keys every llama.cpp converter writes

    from ckptstat import open_checkpoint
    from ckptstat.analysis.summary import summarize

    c = getattr(T, config)(**{**dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                     intermediate_size=37, vocab_size=99, pad_token_id=0), **kwargs})
    with torch.device("meta"):
        model = getattr(T, model_name)(c)
    a = getattr(gguf.MODEL_ARCH, arch)
    names = gguf.get_tensor_name_map(a, c.num_hidden_layers)
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), gguf.MODEL_ARCH_NAMES[a])
    gguf_sizes(w, c)
    d = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_key_length(d)
    w.add_rope_dimension_count(int(d * kwargs.get("partial_rotary_factor", 1.0)))
    for name, t in saved_state(model).items():
        w.add_tensor(names.get_name(name, try_suffixes=(".weight", ".bias")), np.zeros(t.shape, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = summarize(open_checkpoint(str(tmp_path / "m.gguf")))
    total = sum(p.numel() for p in model.parameters())
    assert r["architecture"]["family"] in {f.name for f in DESCRIBED}
    assert r["parameters"]["unique"] == r["analytic"]["predicted_params"] == total
