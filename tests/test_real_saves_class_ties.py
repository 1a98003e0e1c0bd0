"""Ties named by the class config.json names (families/tie_table.py, docs/ties.md "Ties named by the class"), and
no false `decoder.bias` tie for LM heads whose decoder has no bias of its own, on what transformers really saves.

Each model is built tiny from its config class (tests/census_audit.py's `tiny_config`), saved by `save_pretrained`
(safetensors: tied copies dropped, nothing records them) and by `torch.save(state_dict)` (tied names over one
storage). The oracle is the model object: its parameters, persistent buffers and tie groups
(census_audit.model_oracle, in the names save_pretrained writes). Before the class table, ckptstat found none of
the save_pretrained ties of these unregistered classes, and listed a `decoder.bias` tie LXMERT, ESM and
BridgeTower do not have.
"""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from census_audit import model_oracle, reported, save_both, saved_names, tiny_config  # noqa: E402

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.census.ties import find_ties  # noqa: E402
from ckptstat.families import MODEL_TYPES  # noqa: E402
from ckptstat.families.tie_table import class_ties, tie_switch  # noqa: E402

# (config class, model class, config overrides): each ties a weight save_pretrained drops
NAMED = [
    ("XGLMConfig", "XGLMForCausalLM", {}),
    ("BioGptConfig", "BioGptForCausalLM", {}),
    ("CTRLConfig", "CTRLLMHeadModel", {}),
    ("OpenAIGPTConfig", "OpenAIGPTLMHeadModel", {}),
    ("MptConfig", "MptForCausalLM", {}),
    ("XLNetConfig", "XLNetLMHeadModel", {}),
    ("XLMConfig", "XLMWithLMHeadModel", {}),
    ("FunnelConfig", "FunnelForMaskedLM", {}),
    ("ModernBertConfig", "ModernBertForMaskedLM", {}),
    ("FSMTConfig", "FSMTForConditionalGeneration", {}),
    ("ProphetNetConfig", "ProphetNetForConditionalGeneration", {}),
    ("LongT5Config", "LongT5ForConditionalGeneration", {}),
    ("UMT5Config", "UMT5ForConditionalGeneration", {}),
    ("M2M100Config", "M2M100ForConditionalGeneration", {}),
    ("PegasusConfig", "PegasusForCausalLM", {}),
    ("MarianConfig", "MarianForCausalLM", {}),
    ("BigBirdPegasusConfig", "BigBirdPegasusForCausalLM", {}),   # its decoder alone ties nothing (no _tied_weights_keys)
    ("Blip2Config", "Blip2ForConditionalGeneration", {}),
    ("SamConfig", "SamModel", {}),   # a buffer the prompt encoder views: two tensors over one storage
    # the switch off: the embedding groups that stay (LongT5's shared / embed_tokens), no LM-head tie
    ("LongT5Config", "LongT5ForConditionalGeneration", {"tie_word_embeddings": False}),
    ("XGLMConfig", "XGLMForCausalLM", {"tie_word_embeddings": False}),
    # LM heads whose decoder Linear has no bias (the head's `bias` is its own): no decoder.bias tie
    ("LxmertConfig", "LxmertForPreTraining", {}),
    ("EsmConfig", "EsmForMaskedLM", {"vocab_size": 33}),
    ("BridgeTowerConfig", "BridgeTowerForMaskedLM", {"vision_config.hidden_size": 64}),   # hidden_size / 64 heads
]
IDS = [f"{m}{'-untied' if o.get('tie_word_embeddings') is False else ''}" for _, m, o in NAMED]
VARIANTS = ["save_pretrained", "torch.save"]


def _config(cfg_name: str, over: dict):
    cfg_cls = getattr(T, cfg_name)
    try:
        cfg = tiny_config(cfg_cls)
    except Exception:   # ESM's defaults hold None sizes the shrinking cannot read
        cfg = cfg_cls(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2,
                      max_position_embeddings=64)
    text = cfg.get_text_config(decoder=True)
    # the switch lives on the text sub-config (a legacy encoder-decoder's get_text_config is a copy of the config)
    holder = next((getattr(cfg, n) for n in ("decoder", "generator", "text_config") if getattr(cfg, n, None) is text), cfg)
    for k, v in over.items():
        sub, _, key = k.rpartition(".")
        setattr(holder if k == "tie_word_embeddings" else getattr(cfg, sub) if sub else cfg, key, v)
    return cfg


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache: dict[str, tuple[dict, dict, dict[str, str]]] = {}
    T.logging.set_verbosity_error()

    def get(i: int) -> tuple[dict, dict, dict[str, str]]:
        if IDS[i] not in cache:
            cfg_name, cls, over = NAMED[i]
            torch.manual_seed(0)
            model = getattr(T, cls)(_config(cfg_name, over)).eval()
            oracle = model_oracle(model)
            cache[IDS[i]] = (oracle, saved_names(model, oracle), save_both(model, str(tmp_path_factory.mktemp(IDS[i]))))
        return cache[IDS[i]]

    return get


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("i", range(len(NAMED)), ids=IDS)
def test_counts_and_every_tie(built, i, variant):
    oracle, as_saved, paths = built(i)
    got = reported(paths[variant])
    assert (got["params"], got["buffers"]) == (oracle["params"], oracle["buffers"])
    assert got["ties"] == (as_saved if variant == "save_pretrained" else oracle)["ties"]


# unregistered model types (XGLM, CTRL and XLNet were ones until the bart, ctrl and xlnet families took them: their ties
# are then the families' rules)
EVIDENCE = [i for i, (_, c, _) in enumerate(NAMED) if c.startswith("FSMT")]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("i", EVIDENCE, ids=[IDS[i] for i in EVIDENCE])
def test_evidence_names_the_class(built, i):
    """A dropped copy no family or structural rule knows is reported with the class that ties it."""
    oracle, _, paths = built(i)
    cls = NAMED[i][1]
    mt = json.load(open(os.path.join(paths["save_pretrained"], "config.json")))["model_type"]
    assert mt not in MODEL_TYPES   # unregistered: before the class table, no rule named these ties
    dropped = [t for t in find_ties(open_checkpoint(paths["save_pretrained"])) if t.status == "absent from file"]
    assert {t.evidence for t in dropped} <= {f"config.json architectures {cls}"}
    assert bool(dropped) == bool(oracle["ties"])


SWITCHED = ["Blip2ForConditionalGeneration", "LlavaForConditionalGeneration", "Mistral3ForConditionalGeneration",
            "Qwen2VLForConditionalGeneration", "OPTForCausalLM", "FSMTForConditionalGeneration",
            "T5ForConditionalGeneration", "LongT5ForConditionalGeneration"]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cls", SWITCHED)
def test_switch_is_what_transformers_5_reads_from_config_json(cls):
    """Each way a config.json can hold `tie_word_embeddings` (absent, true, false; in the top config and in the
    text sub-config): the table's groups are the ties of the model transformers 5 builds from it (`from_dict`, as
    from_pretrained reads it; on meta). Blip-2 reads the text config's, Mistral 3 the top's whatever text_config
    says, LLaVA and Qwen2-VL either; T5 and LongT5 tie whatever config.json says (their config forces it on)."""
    from conftest import fixture_script

    tt = fixture_script("make_tie_table")
    _LAYER, _switch, tie_groups = tt._LAYER, tt._switch, tt.tie_groups

    model_cls = getattr(T, cls)
    base = tiny_config(model_cls.config_class)
    _, where = _switch(base)
    d = base.to_dict()
    for top in ("absent", True, False):
        for sub in ("absent", True, False) if where else ("absent",):
            cfg = {k: v for k, v in d.items() if k != "tie_word_embeddings"}
            if top != "absent":
                cfg["tie_word_embeddings"] = top
            if where:
                cfg[where] = {k: v for k, v in d[where].items() if k != "tie_word_embeddings"}
                if sub != "absent":
                    cfg[where]["tie_word_embeddings"] = sub
            with torch.device("meta"):
                model = model_cls(model_cls.config_class.from_dict(cfg))
            real = {g for g in tie_groups(model) if not any(_LAYER.search(n) for n in g)}
            own = class_ties({**cfg, "architectures": [cls]})
            assert own is not None and {frozenset(g) for g in own.groups} == real, (top, sub)


def test_table_switch_rules():
    """The switch rules the table writes, read as transformers 5 reads config.json (tie_switch)."""
    assert class_ties({"architectures": ["NoSuchClass"]}) is None
    for switch, top, sub, on in [(None, True, False, True), ("text_config", True, False, False),
                                 ("text_config|top", False, True, True), ("text_config|top", False, False, False),
                                 ("text_config&top", True, False, False), ("text_config&top", True, True, True)]:
        assert tie_switch({"tie_word_embeddings": top, "text_config": {"tie_word_embeddings": sub}}, switch) is on
    assert tie_switch({}, None, default=False) is False and tie_switch({}, "text_config", default_sub=False) is False
    # LlamaConfig's default is False: with config.json naming the class and no field, the switch is off
    own = class_ties({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    assert own is not None and own.switch is T.LlamaConfig().tie_word_embeddings is False and not own.groups


def test_t5_switch_as_transformers_5_reads_config_json():
    """A T5 config.json with tie_word_embeddings false (T5 v1.1, FLAN-T5): the model transformers 5 builds from it
    ties shared, both stacks' embed_tokens and the LM head; the table says so."""
    tiny = dict(vocab_size=32, d_model=8, d_kv=4, d_ff=8, num_layers=1, num_heads=2, tie_word_embeddings=False)
    with torch.device("meta"):
        model = T.T5ForConditionalGeneration(T.T5Config.from_dict(tiny))
    same = {n for n, p in model.named_parameters(remove_duplicate=False) if p is model.shared.weight}
    got = class_ties({"architectures": ["T5ForConditionalGeneration"], **tiny})
    assert got is not None and got.names == same


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cls", ["XGLMForCausalLM", "LxmertForPreTraining", "LongT5ForConditionalGeneration",
                                 "Blip2ForConditionalGeneration", "EsmForMaskedLM", "RTDetrV2ForObjectDetection",
                                 "UdopForConditionalGeneration", "Zamba2ForCausalLM"])
def test_table_is_what_transformers_ties(cls):
    """The committed table (fixtures/make_tie_table.py's output) is what the installed transformers builds."""
    from conftest import fixture_script

    entry = fixture_script("make_tie_table").entry

    from ckptstat.families.tie_table import _table

    model_type = getattr(T, cls).config_class.model_type
    assert entry(model_type, cls) == _table()[cls]


def test_table_covers_every_class_the_installed_transformers_has():
    """Every model class make_tie_table.py walks in the installed transformers is in the table, built or with
    the reason it could not be: a transformers upgrade that adds a class fails here until the table is
    regenerated (python fixtures/make_tie_table.py)."""
    import json

    from census_audit import pairs
    from conftest import fixture_script

    from ckptstat.families.tie_table import _PATH

    other_classes = fixture_script("make_tie_table").other_classes

    with open(_PATH, encoding="utf-8") as f:
        table = json.load(f)
    known = set(table["classes"]) | set(table["not_built"])
    walked = {cls for _, cls in pairs(["all"], None) + other_classes() if hasattr(T, cls)}
    assert sorted(walked - known) == [], f"regenerate the tie table (written by transformers {table['transformers']})"


# Ties the class table records from numbered layers (fixtures/make_tie_table.py `layer_patterns`), checked on a save
# with more layers than the table was built with, and a class built from another model type's config, which writes
# that type's key layout (by_model_type). Before: UDOP's and RT-DETR v2's missed, ShieldGemma 2's named on a name
# the file does not hold. (RT-DETR's torch.save is left out: its frozen batch norms' buffers read as parameters.)
LAYERED = [
    ("UdopConfig", "UdopForConditionalGeneration", {"num_layers": 3, "num_decoder_layers": 3}),
    ("RTDetrV2Config", "RTDetrV2ForObjectDetection", {"decoder_layers": 4}),
    ("ShieldGemma2Config", "Gemma3ForConditionalGeneration", {}),
]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cfg_name,cls,over", LAYERED, ids=[f"{c[:-6]}-{m}" for c, m, _ in LAYERED])
def test_layered_and_model_type_ties_of_save_pretrained(tmp_path, cfg_name, cls, over):
    T.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = getattr(T, cls)(_config(cfg_name, over)).eval()
    oracle = saved_names(model, model_oracle(model))
    got = reported(save_both(model, str(tmp_path))["save_pretrained"])
    assert (got["params"], got["buffers"]) == (oracle["params"], oracle["buffers"])
    assert got["ties"] == oracle["ties"]
    if cls.startswith("RTDetr"):   # more decoder layers than the table's 2: the pattern reaches the 4th
        assert any("bbox_embed.3." in n for g in oracle["ties"] for n in g)


# Parameters the class holds in another size than its file (families/load_table.py): the file's unique count is
# the file's, the summary's `on_load` (and `ckptstat ties`' model.parameters() row) is the model's.
ON_LOAD = [
    ("MarianConfig", "MarianMTModel", "_keys_to_ignore_on_save"),   # sinusoidal position tables, never saved
    ("Inkling2TextConfig", "Inkling2ForCausalLM", "lm_head.weight"),   # unembedding saved padded to vocab_size
    ("Inkling2Config", "Inkling2ForConditionalGeneration", "lm_head.weight"),
]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cfg_name,cls,why", ON_LOAD, ids=[m for _, m, _ in ON_LOAD])
def test_parameters_made_on_load(tmp_path, cfg_name, cls, why):
    import math

    from safetensors import safe_open

    from ckptstat import summarize
    from ckptstat.analysis.ties import audit

    T.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = getattr(T, cls)(_config(cfg_name, {})).eval()
    oracle = model_oracle(model)
    path = save_both(model, str(tmp_path))["save_pretrained"]
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:   # what the file holds, as written
        in_file = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    r = summarize(open_checkpoint(path))
    p = r["parameters"]
    assert p["unique"] == in_file - oracle["buffers"] != oracle["params"]   # the file's own count, unchanged
    assert p["on_load"]["params"] == oracle["params"]
    assert all(why in d["why"] for d in p["on_load"]["differences"])
    row = audit(open_checkpoint(path))["counting"]["rows"][1]
    assert row["convention"].startswith("model.parameters()") and row["params"] == oracle["params"]


@pytest.mark.filterwarnings("ignore")
def test_load_table_is_what_transformers_makes():
    """The committed load table (fixtures/make_load_table.py's output) was written by the installed transformers
    over the tie table's classes, and its Marian and Inkling2 entries are what that transformers builds."""
    from conftest import fixture_script

    fixture_script("make_tie_table")   # make_load_table imports it by name
    entry = fixture_script("make_load_table").entry

    from ckptstat.families import load_table, tie_table

    with open(load_table._PATH, encoding="utf-8") as f:
        table = json.load(f)
    assert table["transformers"] == T.__version__ and table["walked"] == len(tie_table._table())
    for cls in ("MarianMTModel", "Inkling2ForCausalLM", "LlamaForCausalLM"):
        assert entry(cls) == table["classes"].get(cls, {})
