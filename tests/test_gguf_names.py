"""Every family's GGUF tensor-name table (Family.gguf_tensor_names, read by `ckptstat diff`) against
gguf-py's own TensorNameMap, the table llama.cpp's convert_hf_to_gguf.py names tensors by: for each
family sample's transformers model, every state-dict name that TensorNameMap maps to a GGUF name must
come back, through ckptstat's GGUF -> HF rules, to the same name (after the wrapper and base-model
prefixes diff strips). And a pair written by both writers diffs as equal."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import save_file

from ckptstat import open_checkpoint
from ckptstat.analysis.diff import _key, diff, gguf_rules
from ckptstat.core import Checkpoint, TensorInfo
from ckptstat.families import FAMILIES, get

gguf = pytest.importorskip("gguf")

ARCHS = {name: arch for arch, name in gguf.MODEL_ARCH_NAMES.items()}
WITH_TABLE = [f for f in FAMILIES if f.gguf_tensor_names]
# llama.cpp architectures whose names cannot be mapped back without more than the name (docs/gguf.md)
NOT_MAPPED = {
    "clip": "llama.cpp's mmproj files, not a model",
}
# transformers model_type -> llama.cpp architecture where the names differ (convert_hf_to_gguf.py's model classes)
CONVERTS_AS = {"gemma3_text": "gemma3", "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "deepseek_v2": "deepseek2",
               "deepseek_v3": "deepseek2"}


def _arch(family, cfg):
    """The llama.cpp architecture a transformers config converts to (Mistral and Mixtral as llama)."""
    return ARCHS.get(CONVERTS_AS.get(cfg.model_type, cfg.model_type)) or next(ARCHS[n] for n in family.gguf_names if n in ARCHS)


def _gguf_file(family, arch, names=()) -> Checkpoint:
    """A header-only GGUF checkpoint of `arch` holding tensors `names`, to get diff's rules for it as for a real
    file (a family whose llama.cpp names mean two HF modules picks its table by the names: Family.gguf_table)."""
    meta = {"general.architecture": gguf.MODEL_ARCH_NAMES[arch], f"{gguf.MODEL_ARCH_NAMES[arch]}.expert_count":
            "4" if family.name == "mixtral" else "0"}
    tensors = {n: TensorInfo(n, "F32", (1,), "m.gguf", None, 4) for n in names}
    return Checkpoint(path="m.gguf", format="gguf", tensors=tensors, files=(), metadata=meta,
                      declared_architecture=meta["general.architecture"])


def _cases():
    for f in WITH_TABLE:
        for s in f.samples:
            for model in s.models:
                if model == "GPTNeoXModel":   # its names lack `gpt_neox.`, which diff does not strip (naming._BASE_MODELS)
                    continue
                yield pytest.param(f, s, model, id=f"{f.name}-{s.config}-{model}")


@pytest.mark.parametrize("family,sample,model_name", list(_cases()))
def test_table_matches_gguf_tensor_name_map(family, sample, model_name):
    cfg = getattr(transformers, sample.config)(**sample.kwargs)
    with torch.device("meta"):
        model = getattr(transformers, model_name)(cfg)
    arch = _arch(family, cfg)
    oracle = gguf.get_tensor_name_map(arch, max(cfg.num_hidden_layers, getattr(cfg, "num_decoder_layers", 0) or 0))
    mapped = {name: oracle.get_name(name, try_suffixes=(".weight", ".bias")) for name in model.state_dict()}
    what, rules = gguf_rules(_gguf_file(family, arch, [g for g in mapped.values() if g])) or (None, [])
    assert what and f"({family.name} family)" in what
    for name, g in mapped.items():
        if g is None:   # llama.cpp has no tensor for it (rotary tables, per-expert weights stacked 3-D...)
            continue
        if family.name == "bert" and re.match(r"cls(\.|$)", g):
            continue    # BERT's classifier or RoBERTa's classifier.dense: not in the table (families/bert.py)
        assert _key(g, rules)[1] == _key(name, [])[1], (name, g)


def test_families_without_a_table_are_the_known_gaps():
    missing = {f.name for f in FAMILIES
               if not f.gguf_tensor_names and any(n in ARCHS for n in f.gguf_names)}
    assert missing == set(NOT_MAPPED)


PAIRS = {   # family: (config class, kwargs, model class, GGUF writer metadata)
    "qwen3": ("Qwen3Config", dict(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                  num_attention_heads=2, num_key_value_heads=1, head_dim=8, tie_word_embeddings=False),
              "Qwen3ForCausalLM"),
    "gptneox": ("GPTNeoXConfig", dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2), "GPTNeoXForCausalLM"),
    "phi": ("PhiConfig", dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                              num_attention_heads=2), "PhiForCausalLM"),
}


@pytest.mark.parametrize("family", list(PAIRS))
def test_hf_gguf_pair_diffs_equal(family, tmp_path):
    """The same weights saved by safetensors under HF names and by GGUFWriter under TensorNameMap's."""
    config, kwargs, cls = PAIRS[family]
    torch.manual_seed(0)
    cfg = getattr(transformers, config)(**kwargs)
    model = getattr(transformers, cls)(cfg)
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(sd, str(tmp_path / "hf.safetensors"))
    arch = _arch(get(family), cfg)
    names = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), gguf.MODEL_ARCH_NAMES[arch])
    for k, v in sd.items():
        g = names.get_name(k, try_suffixes=(".weight", ".bias"))
        if g is not None:
            w.add_tensor(g, v.float().numpy().astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = diff(open_checkpoint(str(tmp_path / "hf.safetensors")), open_checkpoint(str(tmp_path / "m.gguf")))
    assert r["builtin_map"] and family in r["builtin_map"]
    assert {t["status"] for t in r["tensors"]} == {"equal"}, [t for t in r["tensors"] if t["status"] != "equal"][:3]
