"""A checkpoint no family models (no config.json, tensor names no family signature matches): the
summary's module tree (analysis/summary.py module_tree, rendered as a table) and `memory`'s lines that
need no architecture. The oracle is the transformers model the file was saved from: per-module totals
from its named_modules(), parameter bytes from its parameters()."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
st = pytest.importorskip("safetensors.torch")

import ckptstat  # noqa: E402

LAYERS = 3


@pytest.fixture(scope="module")
def gptj(tmp_path_factory):
    """A tiny SqueezeBERT (transformer.encoder.layers.N.post_attention...: no ckptstat family) saved without its config.
    (The fixture's name is GPT-J's, which had no family until families/gptj.py; CTRL's until families/ctrl.py, XLNet's
    until families/xlnet.py, FNet's until families/fnet.py.)"""
    torch.manual_seed(0)
    model = T.SqueezeBertForMaskedLM(T.SqueezeBertConfig(hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=4,
                                                         intermediate_size=36, vocab_size=99, embedding_size=32,
                                                         tie_word_embeddings=False))
    path = tmp_path_factory.mktemp("squeezebert") / "model.safetensors"
    st.save_model(model, str(path))
    return model, str(path)


def _find(nodes, name):
    return next(n for n in nodes if n["name"] == name)


def _params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_unknown_summary_groups_tensors_by_module_with_numbered_blocks_collapsed(gptj):
    model, path = gptj
    r = ckptstat.summarize(path)
    assert r["architecture"]["family"] == "unknown"
    tree = r["modules"]
    assert sum(n["params"] for n in tree) == r["parameters"]["unique"] == _params(model)
    body = _find(tree, "transformer")
    assert body["params"] == _params(model.transformer)
    blocks = _find(body["children"], "encoder.layers.{0..2}")   # (a one-child chain is one node)
    assert blocks["repeat"] == LAYERS and blocks["params"] == _params(model.transformer.encoder.layers)
    # inside the collapsed block: one block's figures
    layer = model.transformer.encoder.layers[0]
    assert _find(blocks["children"], "post_attention")["params"] == _params(layer.post_attention)
    assert _find(blocks["children"], "output")["params"] == _params(layer.output)
    assert _find(tree, "cls.predictions")["params"] == _params(model.cls)
    json.dumps(r)


def _bytes(module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def _unordered(nodes):
    return sorted(({**n, "children": _unordered(n["children"])} for n in nodes), key=lambda n: n["name"])


def _check_tree(nodes, model, prefix=""):
    """Every node of a summary's module tree against the modules it stands for (named_modules' paths): params and
    bytes summed over its members, repeat their count, its children against its first member's children."""
    for node in nodes:
        head, _, last = node["name"].rpartition(".")
        if last.startswith("{"):   # numbered siblings collapsed: {0..2} or {0,2}
            a, dots, b = last[1:-1].partition("..")
            members = [str(i) for i in range(int(a), int(b) + 1)] if dots else last[1:-1].split(",")
            paths = [prefix + (head + "." if head else "") + m for m in members]
        else:
            paths = [prefix + node["name"]]
        modules = [model.get_submodule(p) for p in paths]
        assert node["repeat"] == len(paths), node["name"]
        assert node["params"] == sum(map(_params, modules)) and node["bytes"] == sum(map(_bytes, modules)), paths
        _check_tree(node["children"], model, paths[0] + ".")


def test_module_tree_of_names_in_any_order_equals_named_modules(gptj, tmp_path):
    """The module tree is made in one pass holding only the current name's modules open (issue 35); a module the
    names come back to is reopened. Names of one module apart in the file: two dtypes (the writer sorts the data and
    the header by dtype), and three shards dealt round-robin. Every node equals the model's named_modules; a layer
    stored in another dtype no longer collapses with the others ({0,2} and 1)."""
    model, _ = gptj
    layers = model.transformer.encoder.layers
    for layer in layers:
        layer.intermediate.half()
    layers[1].output.half()
    try:
        mixed = str(tmp_path / "mixed.safetensors")
        st.save_model(model, mixed)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        names = list(state)
        weight_map = {}
        for i in range(3):
            shard = f"model-{i + 1:05d}-of-00003.safetensors"
            st.save_file({n: state[n] for n in names[i::3]}, str(tmp_path / shard))
            weight_map.update({n: shard for n in names[i::3]})
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
        trees = []
        for path in (mixed, str(tmp_path / "model.safetensors.index.json")):
            r = ckptstat.summarize(path)
            _check_tree(r["modules"], model)
            blocks = _find(_find(r["modules"], "transformer")["children"], "encoder.layers")["children"]
            assert sorted((b["name"], b["repeat"]) for b in blocks) == [("1", 1), ("{0,2}", 2)]
            trees.append(r["modules"])
        assert _unordered(trees[0]) == _unordered(trees[1])   # (siblings in the order each file first names them)
    finally:
        model.float()


def test_unknown_summary_human_output_is_a_tree(gptj, cli):
    _, path = gptj
    rc, out, err = cli(path)
    assert rc == 0, err
    assert "Parameters by module" in out and "layers.{0..2} x3" in out
    assert "no rule placed" not in out


def test_unknown_memory_prints_what_needs_no_architecture(gptj, cli):
    model, path = gptj
    rc, out, err = cli("memory", path, "--json")
    assert rc == 0, err
    r = json.loads(out)
    P = _params(model)
    lines = {(x["group"], x["item"]): x["bytes"] for x in r["lines"]}
    assert lines[("weights", "as stored (F32)")] == sum(p.numel() * p.element_size() for p in model.parameters())
    assert lines[("gradients", "float32")] == 4 * P
    assert lines[("optimizer state", "Adam / AdamW")] == 8 * P
    assert not any(g.startswith(("kv cache", "activations")) for g, _ in lines)
    assert any("kv cache" in x for x in r["needs_architecture"]["lines"])
    rc, out, err = cli("memory", path)
    assert rc == 0, err
    assert "needs an architecture" in out and "optimizer state" in out


def test_memory_of_a_bare_unknown_config_still_fails_in_one_line(tmp_path, cli):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "no_such_model", "hidden_size": 8}))
    rc, out, err = cli("memory", str(cfg))
    assert rc == 2 and "no_such_model" in err and len(err.strip().splitlines()) == 1   # a usage error, as before


@pytest.mark.parametrize("experts", [4, 0])
def test_granite4_hybrid_weights_without_config_are_read_as_granitemoehybrid_not_granitemoe(tmp_path, cli, experts):
    """Granite 4's hybrid (GraniteMoeHybrid: Mamba2 layers beside attention, GraniteMoE's expert and shared-MLP names):
    its bare weights were read as GraniteMoE-Shared and given that template's FLOPs (its parameter count disagreeing),
    then refused; now its own family (families/granitemoehybrid.py) reads them, the template's parameters those of
    model.parameters(). Without experts (Granite 4 Micro: the shared MLP alone), its dense layout."""
    cfg = T.GraniteMoeHybridConfig(hidden_size=32, intermediate_size=64, shared_intermediate_size=32, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=99, num_local_experts=experts,
                                   num_experts_per_tok=2, layer_types=["mamba", "attention", "mamba", "attention"],
                                   mamba_d_state=8, mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=1, mamba_chunk_size=4)
    model = T.GraniteMoeHybridForCausalLM(cfg)
    path = tmp_path / "model.safetensors"
    st.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    code, out, err = cli("flops", str(path))
    assert code == 0 and out
    r = ckptstat.summarize(str(path))
    assert r["resolved"]["family"] == "granitemoehybrid"
    assert r["analytic"]["agree"] is True
    assert r["analytic"]["predicted_params"] == sum(p.numel() for p in model.parameters())
