"""The generic decoder template (families/generic.py) answers for a bare config.json only when it describes the
model (`describes`): every transformers model type no family module covers whose (shrunk) config it takes is
built, and its parameters and FlopCounterMode's FLOPs equal the template's; encoders, hybrids and decoders with
extra parts are refused (with weights, the checkpoint's parameter count decides: strict_params)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from test_families import fcm_flops, meta_model, ours  # noqa: E402
from transformers import CONFIG_MAPPING  # noqa: E402
from transformers.models.auto import modeling_auto as auto  # noqa: E402

from ckptstat.families import MODEL_TYPES, generic  # noqa: E402
from ckptstat.families.framework.graph import predict_params  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402

SIZES = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=320, head_dim=16, pad_token_id=0)


def _config(model_type: str):
    """The model type's config class at tiny sizes (None when it will not take them)."""
    try:
        return CONFIG_MAPPING[model_type](**SIZES)
    except Exception:
        return None


# the decoders transformers has a causal LM for (building every config class would also build vision backbones,
# some of which look for timm weights on the hub), plus the encoders and hybrids the refusals name
REFUSED = ("bert-generation", "convbert", "wav2vec2", "bamba", "falcon_h1", "jamba", "zamba2", "qwen3_next", "olmoe",
           "cohere", "starcoder2", "stablelm", "arcee", "bitnet", "olmo3", "hunyuan_v1_dense", "lfm2", "minimax",
           "llama4_text", "glm4_moe", "exaone4", "vaultgemma")
CANDIDATES = sorted({mt for mt in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if mt not in MODEL_TYPES}
                    | {mt for mt in REFUSED if mt in CONFIG_MAPPING})
CLAIMED = [mt for mt in CANDIDATES if (c := _config(mt)) is not None and generic.describes(c.to_dict())]


def test_llama_and_mixtral_fields_are_known():
    for cls in (T.LlamaConfig, T.MixtralConfig, T.PretrainedConfig):
        assert generic.KNOWN_FIELDS.issuperset(cls().to_dict()), cls.__name__


def test_claims_llama_shaped_types_only():
    """What is claimed today: renamed LLaMAs (InternLM3, EXAONE...; Helium, Ministral and Granite are the llama
    family's layouts now); no encoder, state-space hybrid, or decoder with q/k norms, shared experts, partial rotary
    or parallel blocks."""
    assert {"internlm3"} <= set(CLAIMED) and "granite" not in CLAIMED
    assert not {"glm", "glm4", "minimax_m2"} & set(CLAIMED)
    assert not set(REFUSED) & set(CLAIMED)


@pytest.mark.parametrize("model_type", CLAIMED)
def test_every_claimed_type_is_the_template(model_type):
    cls_name = auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if cls_name is None:   # a wrapper's text config (Qwen2-VL's): its wrapper is tested in test_wrappers.py
        pytest.skip(f"{model_type} has no causal LM class")
    cfg = _config(model_type)
    # routed experts run through grouped_mm in transformers 5, whose meta kernel takes bf16 only: tiny weights on
    # the CPU for an MoE
    device = "cpu" if getattr(cfg, "num_local_experts", 0) else "meta"
    model = meta_model(getattr(T, cls_name), cfg, device)
    spec = from_config(dict(cfg.to_dict(), architectures=[cls_name]))
    assert predict_params(spec)["total"] == sum(p.numel() for p in model.parameters())
    for seq in (8, 16):
        assert ours(spec, seq) == fcm_flops(model, seq, device=device)


@pytest.mark.parametrize("model_type", ["xlstm", "tapas"])
def test_bare_config_the_template_cannot_vouch_for_is_refused(cli, tmp_path, monkeypatch, model_type):
    """The static path refuses; without the `run` extra the refusal says what would answer, with it transformers
    answers on the meta device (tests/test_meta.py), a decoder or an encoder (TAPAS: no cache). The decoder: an xLSTM
    in mode "train", which families/xlstm.py refuses by name (every causal LM's default config is static now)."""
    import json

    from ckptstat.analysis import meta
    if model_type not in CONFIG_MAPPING:
        pytest.skip(model_type)
    cfg = (T.xLSTMConfig(hidden_size=128, num_hidden_layers=2, num_heads=4, vocab_size=320, mode="train")
           if model_type == "xlstm" else _config(model_type))
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    monkeypatch.setattr(meta, "available", lambda: False)
    code, out, err = cli("flops", str(tmp_path / "config.json"))
    assert code == 2 and not out and err.count("\n") == 1
    assert "cannot describe" in err or "no analytic model" in err or "is not a decoder" in err or \
        "xLSTM's mode 'train'" in err
    assert "`run` extra" in err
    monkeypatch.undo()
    code, out, err = cli("flops", str(tmp_path / "config.json"), "--json")
    assert code == 0 and json.loads(out)["computed_by"].startswith("computed by transformers")
    assert json.loads(out)["computed_by"].endswith("no cache") == (model_type == "tapas")


# ---- model types transformers has no causal LM for (families/not_causal_lm.json) ----

def test_not_causal_table_is_what_the_installed_transformers_maps():
    from conftest import fixture_script

    table = fixture_script("make_not_causal").table

    version, types = generic.not_causal()
    assert dict(types) == table(), f"regenerate: python fixtures/make_not_causal.py (written by transformers {version})"


def test_eurobert_saved_without_architectures_is_not_read_as_a_decoder(tmp_path, cli, capsys, monkeypatch):
    """EuroBERT's config holds LLaMA's fields and its weights LLaMA's names and shapes; transformers' class for it is
    an encoder (EuroBertForMaskedLM, bidirectional, no cache): a config without `architectures` is never read as a
    LLaMA decoder with a KV cache. Its own template (families/eurobert.py) answers it as the base model, EuroBertModel,
    without the meta path: its FLOPs, no KV line."""
    import json

    from ckptstat.analysis import meta
    cfg = T.EuroBertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=99, pad_token_id=0, bos_token_id=1, eos_token_id=2, mask_token_id=3)
    assert "eurobert" not in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    model = T.EuroBertModel(cfg)
    model.save_pretrained(tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    del d["architectures"]
    (tmp_path / "config.json").write_text(json.dumps(d))
    capsys.readouterr()   # save_pretrained's progress bar
    monkeypatch.setattr(meta, "available", lambda: False)
    code, out, err = cli("flops", str(tmp_path), "--json", "--seq", "8")
    r = json.loads(out)
    assert code == 0 and r["computed_by"] is None and r["parameters"]["agree"]
    assert (r["architecture"]["family"], r["architecture"]["head"]) == ("eurobert", "base")
    model = T.EuroBertModel._from_config(cfg, attn_implementation="eager").eval()   # the convention: eager attention
    with meta.flop_counter() as counter, torch.no_grad():
        model(input_ids=torch.zeros((1, 8), dtype=torch.long))
    assert r["runs"][0]["totals"]["flops"] == counter.get_total_flops()
    code, out, err = cli("memory", str(tmp_path), "--json")
    r = json.loads(out)
    assert code == 0 and r["computed_by"] is None and not any(x["group"] == "kv cache" for x in r["lines"])
