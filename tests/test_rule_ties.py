"""Ties the class builds from its config (families/tie_table.py `rule_groups`, docs/ties.md "Ties named by the
class"): Zamba's and Zamba 2's shared transformer blocks, tied in `__init__` over the config's hybrid layers (Zamba 2
cycling over `num_mem_blocks` blocks), and (MM) Grounding DINO's box and class heads, tied by `_tied_weights_keys`
regexes that `decoder_bbox_embed_share` / `decoder_cls_embed_share` drop. Each model is built by transformers at a
layout and depth the table was not generated at, saved by `save_pretrained`; ckptstat's tie groups, unique parameters
and buffers must be the model object's (parameters over one storage, `model.parameters()`). Before, these groups
were `layer_groups_left_out` of the table: no tie named, or (without the table) the file's count only.
"""
from __future__ import annotations

import os
import re
import shutil

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from census_audit import model_oracle, reported, save_both, saved_names, tiny_config  # noqa: E402

L, H = "linear_attention", "hybrid"
ZAMBA = dict(vocab_size=64, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=2,
             attention_head_dim=8, mamba_d_state=4, mamba_dt_rank=2, n_mamba_heads=1, max_position_embeddings=64)
ZAMBA2 = dict(vocab_size=64, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=2,
              mamba_d_state=4, n_mamba_heads=2, mamba_headdim=8, max_position_embeddings=64, adapter_rank=4)


def _layout(kinds: list[str]) -> dict:
    return {"num_hidden_layers": len(kinds), "layers_block_type": kinds}


# (config class, model class, config overrides, the layered tie groups that must appear)
CASES = [
    ("ZambaConfig", "ZambaForCausalLM", {**ZAMBA, **_layout([L, H, L, H, H])}),
    ("ZambaConfig", "ZambaModel", {**ZAMBA, **_layout([H, L, L, H, L, H, L, H])}),
    ("ZambaConfig", "ZambaForCausalLM", {**ZAMBA, **_layout([L, H, L, H, H]), "tie_word_embeddings": False}),
    ("Zamba2Config", "Zamba2ForCausalLM", {**ZAMBA2, **_layout([L, H, L, H, H, H]), "num_mem_blocks": 2,
                                           "use_shared_attention_adapter": True}),
    ("Zamba2Config", "Zamba2ForCausalLM", {**ZAMBA2, **_layout([H, L, H, H, L, H, H, L, H])}),
    ("Zamba2Config", "Zamba2Model", {**ZAMBA2, **_layout([L, H, H, H, L, H, H, H]), "num_mem_blocks": 3}),
    ("Zamba2Config", "Zamba2ForSequenceClassification", {**ZAMBA2, **_layout([L, H, H, L, H]), "num_mem_blocks": 2}),
    ("GroundingDinoConfig", "GroundingDinoForObjectDetection", {"decoder_layers": 3}),
    ("GroundingDinoConfig", "GroundingDinoForObjectDetection", {"decoder_layers": 4, "decoder_bbox_embed_share": False}),
    ("GroundingDinoConfig", "GroundingDinoForObjectDetection", {"two_stage_bbox_embed_share": True}),
    # two_stage off: transformers 5.24's GroundingDinoModel init fails (`reference_points.bias` of an Embedding)
    ("GroundingDinoConfig", "GroundingDinoForObjectDetection", {"two_stage": False}),
    ("MMGroundingDinoConfig", "MMGroundingDinoForObjectDetection", {"decoder_layers": 3}),
    ("MMGroundingDinoConfig", "MMGroundingDinoForObjectDetection", {"decoder_layers": 4, "two_stage": False}),
    ("MMGroundingDinoConfig", "MMGroundingDinoForObjectDetection", {"decoder_bbox_embed_share": False,
                                                                    "decoder_cls_embed_share": False}),
    ("MMGroundingDinoConfig", "MMGroundingDinoForObjectDetection", {"decoder_cls_embed_share": False, "two_stage": False}),
    ("MMGroundingDinoConfig", "MMGroundingDinoForObjectDetection", {"tie_word_embeddings": False}),
]
IDS = [f"{m}-{'-'.join(f'{k}={v}' for k, v in o.items() if k not in ZAMBA and k not in ZAMBA2 and k != 'layers_block_type')}"
       for _, m, o in CASES]


def _build(cfg_name: str, cls: str, over: dict):
    cfg_cls = getattr(T, cfg_name)
    if cfg_name.startswith("Zamba"):
        cfg = cfg_cls(**over)
    else:   # the shrunk config, d_model a multiple of the 32 groups of its GroupNorms
        d = {**tiny_config(cfg_cls).to_dict(), "d_model": 32, **over}
        cfg = cfg_cls.from_dict(d)
    torch.manual_seed(0)
    try:
        return getattr(T, cls)(cfg_cls.from_dict(cfg.to_dict())).eval()
    except AttributeError as e:   # a config the installed transformers cannot build
        pytest.skip(f"transformers {T.__version__} cannot build it: {e}")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    cache: dict[str, tuple[dict, str, str, dict, str]] = {}

    def get(i: int) -> tuple[dict, str, str, dict, str]:
        if IDS[i] not in cache:
            T.logging.set_verbosity_error()
            model = _build(*CASES[i])
            raw = model_oracle(model)
            oracle = saved_names(model, raw)
            root = str(tmp_path_factory.mktemp("rules"))
            paths = save_both(model, root)
            folder = paths["save_pretrained"]
            bare = os.path.join(root, "bare")   # the same file without config.json
            os.makedirs(bare)
            shutil.copy(os.path.join(folder, "model.safetensors"), bare)
            cache[IDS[i]] = (oracle, folder, bare, raw, paths["torch.save"])
        return cache[IDS[i]]

    return get


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_ties_and_counts_of_save_pretrained(saved, i):
    oracle, folder, *_ = saved(i)
    got = reported(folder)
    assert (got["params"], got["buffers"]) == (oracle["params"], oracle["buffers"])
    assert got["ties"] == oracle["ties"]
    over = CASES[i][2]
    if over.get("tie_word_embeddings", True):   # the config's own layer groups are there, at its depth
        if CASES[i][0].startswith("Zamba"):
            hybrid = [k for k, x in enumerate(over["layers_block_type"]) if x == H]
            m = over.get("num_mem_blocks", 1)   # the k-th hybrid layer (k >= m) shares the (k mod m)-th's block
            hybrid = [h for k, h in enumerate(hybrid) if k >= m or k < len(hybrid) - m]
            shared = {int(x[1]) for g in oracle["ties"] for n in g if (x := re.search(r"layers\.(\d+)\.shared_transf", n))}
            assert shared == set(hybrid)
        else:
            last = over.get("decoder_layers", 2) - 1
            assert any(f"model.decoder.bbox_embed.{last}." in n for g in oracle["ties"] for n in g)
    else:
        assert not oracle["ties"]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_without_config_json_no_wrong_tie(saved, i):
    """Without config.json the class is unknown: no tie is named that the model does not have, and the count is
    the file's (each tensor once, which is model.parameters()). A bare `torch.save(state_dict)` keeps every tied
    name over one storage: its ties are the model's, all of them."""
    oracle, _, bare, raw, pickled = saved(i)
    got = reported(bare)
    assert got["params"] + got["buffers"] == oracle["params"] + oracle["buffers"]
    assert all(any(g <= h for h in oracle["ties"]) for g in got["ties"]), got["ties"]
    got = reported(pickled)
    assert (got["params"], got["buffers"], got["ties"]) == (raw["params"], raw["buffers"], raw["ties"])


def test_rules_read_config_json_as_written():
    """The rules read config.json's keys, a key it omits at the config class's default (the table's `defaults`):
    Zamba 2 with no `num_mem_blocks` cycles over one block; a config.json without `layers_block_type` (no hybrid
    layers known) or with `tie_word_embeddings` false gets no shared-block tie, never a guessed one."""
    from ckptstat.families.tie_table import class_ties

    names = {f"model.layers.{k}.shared_transformer.feed_forward.down_proj.weight" for k in (1, 3)} | {"lm_head.weight"}
    cfg = {"architectures": ["Zamba2ForCausalLM"], "layers_block_type": [L, H, L, H, H, H]}
    groups = {frozenset(g) for g in class_ties(cfg, names).groups if "lm_head.weight" not in g}
    block = "shared_transformer.feed_forward.down_proj.weight"
    assert groups == {frozenset(f"model.layers.{k}.{block}" for k in (1, 3, 4, 5))}
    two = {frozenset(g) for g in class_ties({**cfg, "num_mem_blocks": 2}, names).groups if "lm_head.weight" not in g}
    assert two == {frozenset(f"model.layers.{k}.{block}" for k in ks) for ks in ((1, 4), (3, 5))}
    for other in ({"architectures": ["Zamba2ForCausalLM"]}, {**cfg, "tie_word_embeddings": False}):
        assert not [g for g in class_ties(other, names).groups if "lm_head.weight" not in g]
    # sizes from a hostile config.json: bounded before a list is made of them, nothing named
    hostile = {"architectures": ["GroundingDinoForObjectDetection"], "decoder_layers": 10**12}
    got = class_ties(hostile, {"bbox_embed.0.layers.0.weight"}).groups   # the decoder's copy only, depth unread
    assert got == (("bbox_embed.0.layers.0.weight", "model.decoder.bbox_embed.0.layers.0.weight"),)
    assert not class_ties({**cfg, "layers_block_type": "hybrid", "num_mem_blocks": "2"}, names).groups[1:]
