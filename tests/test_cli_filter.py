"""`--filter` (census.counts.name_matches, the one rule of tensors, stats and plot) on a real save_pretrained
Llama: a glob matches the whole name or a trailing part of it from a module boundary ('.') on, so
`layers.0.*` finds `model.layers.0.*`; a substring matches anywhere. Expected names come from the model's
own state_dict keys through fnmatch."""
import fnmatch
import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """(folder, state_dict keys) of a tiny untied LlamaForCausalLM (every state_dict key is saved)."""
    root = tmp_path_factory.mktemp("filter") / "llama"
    torch.manual_seed(0)
    model = T.LlamaForCausalLM(T.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                             num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False))
    model.save_pretrained(root)
    return str(root), list(model.state_dict())


def _expected(keys: list[str], pattern: str) -> set[str]:
    """fnmatch on the key and on each tail after a '.', or the pattern as a substring."""
    def tails(k: str) -> list[str]:
        return [k] + [k[i + 1:] for i, c in enumerate(k) if c == "."]
    return {k for k in keys if pattern in k or any(fnmatch.fnmatchcase(t, pattern) for t in tails(k))}


@pytest.mark.parametrize("pattern", ["layers.0.*", "self_attn.?_proj.weight", "*mlp*", "model.layers.1.*",
                                     "layers.[01].input_layernorm.weight", "norm.weight", "lm_head.*", "*"])
@pytest.mark.parametrize("command", ["tensors", "stats"])
def test_filter_matches_from_a_module_boundary(llama, cli, command, pattern):
    path, keys = llama
    want = _expected(keys, pattern)
    assert want and (pattern != "layers.0.*" or len(want) == 9)   # the reported case: one layer's 9 tensors
    rc, out, err = cli(command, path, "-f", pattern, "--json")
    assert rc == 0, err
    assert {t["name"] for t in json.loads(out)["tensors"]} == want


def test_filter_text_and_misses(llama, cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    path, keys = llama
    rc, out, err = cli("tensors", path, "-f", "layers.0.*")
    assert rc == 0 and all((k in out) == (".layers.0." in k) for k in keys), out
    for miss in ("ayers.0.*", "layers.2.*", "odel.layers.*"):   # a tail starts after a '.', not mid-word
        assert not _expected(keys, miss)
        rc, out, err = cli("tensors", path, "-f", miss)
        assert rc == 1 and "no tensor matches" in err, (miss, out, err)
