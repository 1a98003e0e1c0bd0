"""The name regexes derived from the modules a walk records (families/framework/walk_names.py, one set for the
layout_base.Walk families and the Recorder ones): for every sample and head model of a Walk family, its signature matches
the tensors its walk derives and the names save_pretrained writes (census_audit.saved_shapes), and detection from those
names alone picks the family (tests/test_families.py runs the shape look-ups without config.json on the saved names;
tests/test_walk_signatures.py the Recorder families'). No such family spells a signature by hand; the picks and
regexes themselves on a few recorded modules (a Walk's list, a Recorder's records)."""
from __future__ import annotations

import importlib
import inspect
import math
import re

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from census_audit import saved_shapes  # noqa: E402
from test_families import meta_model, spec_of  # noqa: E402

from ckptstat.core import TensorInfo  # noqa: E402
from ckptstat.families import detect, get  # noqa: E402
from ckptstat.families.framework import walk_names  # noqa: E402
from ckptstat.families.framework.layout_base import Module  # noqa: E402
from ckptstat.families.framework.ops import Builder  # noqa: E402
from ckptstat.families.framework.recorder import Recorder  # noqa: E402

WALKED = ("rwkv", "recurrent_gemma", "dory", "gemma4", "gemma3n", "inkling", "inkling2", "zamba2", "deepseek_v4")
CASES = [pytest.param(name, s, m, id=f"{name}-{i}-{m}") for name in WALKED for i, s in enumerate(get(name).samples)
         for m in s.models]


def _infos(shapes: dict[str, tuple[int, ...]]) -> dict[str, TensorInfo]:
    return {n: TensorInfo(n, "F32", s, "model.safetensors", None, 4 * math.prod(s), storage=n) for n, s in shapes.items()}


@pytest.mark.parametrize("name,sample,model_name", CASES)
def test_the_derived_signature_detects_the_family(name, sample, model_name):
    cfg = getattr(T, sample.config)(**sample.kwargs)
    cls = getattr(T, model_name)
    model, spec = meta_model(cls, cfg), spec_of(cls, cfg)
    family = get(name)
    derived, saved = family.expected_tensors(spec), saved_shapes(model, tied=False)
    for names in (derived, saved):
        assert detect(_infos(names), None).family == (sample.detected_as or name)
        if not sample.detected_as:
            assert any(re.search(family.signature, n) for n in names)


@pytest.mark.parametrize("name", WALKED)
def test_no_signature_spelled_beside_the_walk(name):
    source = inspect.getsource(importlib.import_module(f"ckptstat.families.{name}"))
    assert 'signature=r"' not in source and "signature_without=r" not in source


def test_one_set_of_name_helpers():
    """The Recorder families read their names with walk_names too: recorder.py keeps no copy of its helpers."""
    from ckptstat.families.framework import recorder
    assert not {"walked", "find", "module", "signature", "pattern", "layers", "numbered"} & set(vars(recorder))


_MODULES = (Module("embed_tokens", "token_embd", (("weight", (8, 4)),)),
            Module("layers.{bid}.self_attn.k_proj", "blk.{bid}.attn_k", (("weight", (4, 4)), ("bias", (4,))), (0, 1)),
            Module("layers.{bid}.cross_attn.k_proj", None, (("weight", (4, 4)),), (1,)),
            Module("layers.{bid}.self_attn.sinks", None, (("", (2,)),), (0, 1)),
            Module("layers.{bid}.altup.router_norm", None, (("weight", (4,)),), (0, 1)),
            Module("layers.{bid}.altup.modality_router", None, (("weight", (2, 4)),), (0, 1)),
            Module("lm_head", "output", (("weight", (8, 4)),), top=True))


def test_modules_are_picked_by_llama_cpp_name_or_path_suffix():
    assert walk_names.module(_MODULES, "attn_k").path == "layers.{bid}.self_attn.k_proj"
    assert walk_names.module(_MODULES, "self_attn.sinks").path == "layers.{bid}.self_attn.sinks"
    assert walk_names.module(_MODULES, "k_proj").path == "layers.{bid}.self_attn.k_proj"   # two end so: the first
    assert walk_names.find(_MODULES, "proj") is None
    for unknown in ("attn_q", "proj", "router_nor"):
        with pytest.raises(ValueError):
            walk_names.module(_MODULES, unknown)


def test_a_recorder_is_read_as_its_records():
    def run(B: Builder) -> Recorder:
        r = Recorder(B)
        r.embedding("embeddings.word_embeddings", 4, 4, 1, gguf="token_embd")
        r.linear("encoder.layer.{bid}.attention.self.query", r.tok, 4, 4, True, 1)
        return r
    r = walk_names.walked(run)   # a Recorder walk's walk is its Recorder, not a tuple of its Modules
    assert isinstance(r, Recorder)
    assert walk_names.module(r, "token_embd") is r.modules[0]
    assert walk_names.pattern(r, "attention.self.query", "bias") == walk_names.pattern(r.modules, "attention.self.query", "bias")


def test_signatures_end_as_the_recorded_parameters():
    rx = re.compile(walk_names.signature(_MODULES, "sinks", "attn_k", tf1=False))
    assert rx.search("model.layers.3.self_attn.sinks") and rx.search("model.layers.3.self_attn.k_proj.bias")
    assert not rx.search("model.layers.3.self_attn.sinks_extra") and not rx.search("model.layers.3.self_attn.q_proj.weight")
    assert not rx.search("model.layers_3.self_attn.sinks")
    under = re.compile(walk_names.signature(_MODULES, "altup"))   # a container: any module under it
    assert under.search("layers.0.altup.modality_router.weight") and not under.search("layers.0.altup_proj.weight")
    with pytest.raises(ValueError):
        walk_names.signature(_MODULES, "router")   # no module, no container


def test_a_signature_reads_tf1_names():
    """google-research TF1 names keep `layer_3` (naming.normalize): a number may follow an underscore, a `layer_1`
    component may be either spelling; `suffix` one parameter alone, `under` the start."""
    tf1 = (Module("encoder.layer.{bid}.ff.layer_1", None, (("weight", (4, 4)), ("bias", (4,))), (0,)),)
    rx = re.compile(walk_names.signature(tf1, "ff.layer_1", suffix="bias", under="^"))
    assert rx.search("encoder/layer_0/ff/layer_1/bias") and rx.search("encoder.layer.11.ff.layer.1.bias")
    assert not rx.search("encoder.layer.0.ff.layer_1.weight") and not rx.search("x.encoder.layer.0.ff.layer_1.bias")


def test_patterns_read_a_parameter_and_the_layer():
    rx = re.compile(walk_names.pattern(_MODULES, "attn_k", layer=r"(\d+)"))
    m = rx.search("model.layers.12.self_attn.k_proj.weight")
    assert m is not None and m.group(1) == "12"
    assert re.search(walk_names.pattern(_MODULES, "attn_k", "bias"), "layers.0.self_attn.k_proj.bias")
    assert not re.search(walk_names.pattern(_MODULES, "attn_k", "bias", layer="1"), "layers.0.self_attn.k_proj.bias")
    assert re.search(walk_names.pattern(_MODULES, "sinks"), "layers.0.self_attn.sinks")
    assert not re.search(walk_names.pattern(_MODULES, "output"), "model.lm_head_x.weight")


def test_a_bare_embedding_pattern_reads_a_tf_weight():
    """A bare `*_embeddings` parameter read from a TF file gets `.weight` (infer.canonical_name's TF1 rule: ViT's)."""
    vit = (Module("embeddings.position_embeddings", None, (("", (1, 5, 4)),)),)
    rx = walk_names.pattern(vit, "position_embeddings")
    assert re.search(rx, "vit.embeddings.position_embeddings") and re.search(rx, "vit.embeddings.position_embeddings.weight")


def test_layers_and_numbered_capture_the_indexes():
    """`layers`: the stored layer (or, `inner`, the layer within a group: ALBERT's `{xid}`) as group 1; `numbered`: every
    number in the path as groups 2, 3..."""
    albert = (Module("encoder.albert_layer_groups.{bid}.albert_layers.{xid}.ffn", None, (("weight", (4, 4)),), (0,), 1),)
    name = "albert.encoder.albert_layer_groups.2.albert_layers.5.ffn.weight"
    assert re.search(walk_names.layers(albert, "ffn"), name).group(1) == "2"
    assert re.search(walk_names.layers(albert, "ffn", inner=True), name).group(1) == "5"
    resnet = (Module("layer1.{bid}.conv1", None, (("weight", (4, 4, 3, 3)),), (0,)),)   # torchvision's
    assert re.search(walk_names.numbered(resnet, "conv1"), "layer3.2.conv1.weight").groups()[1:] == ("3", "2", "1")


def test_a_layout_pattern_reads_a_parameter_without_weight():
    """layout.pattern's suffix "": the module's path is the parameter's name (gpt-oss's sinks, walk_names.layout_shape)."""
    from ckptstat.families.framework import layout
    from ckptstat.families.gpt_oss import GPT_OSS
    rx = layout.pattern(GPT_OSS, "attn_sinks", "")
    assert re.search(rx, "model.layers.3.self_attn.sinks") and not re.search(rx, "model.layers.3.self_attn.sinks.weight")
