"""GPT-2's and OpenAI GPT's *DoubleHeadsModel (head "lm+mc", families/framework/summary.py) beyond the registry
walk of tests/test_families.py (which builds each from its 2-D input_ids): against transformers' own classes,

* FLOPs: the real input, [batch, num_choices, seq] with the mc_token_ids that pick each choice's summary token, equals
  ckptstat's template at batch x num_choices sequences (the convention the summary op's label states), per
  summary_type and projection width, by FlopCounterMode;
* parameters: the summary_* settings the class reads (summary_use_proj, summary_proj_to_labels; num_labels, which the
  class forces to 1), predicted from config.json alone, equal model.parameters(); the names and shapes the template
  expects equal named_parameters();
* the other summary types (which index the choices, not the tokens, or are not implemented) are one line."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from census_audit import saved_shapes  # noqa: E402
from test_families import meta_model, ours  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from ckptstat.census.model import load  # noqa: E402
from ckptstat.errors import NoAnalyticModel  # noqa: E402
from ckptstat.families import get  # noqa: E402
from ckptstat.families.framework.graph import predict_params  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402

SIZES = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=64)
CLASSES = [("GPT2Config", "GPT2DoubleHeadsModel"), ("OpenAIGPTConfig", "OpenAIGPTDoubleHeadsModel")]
SUMMARIES = [dict(), dict(summary_proj_to_labels=False, summary_activation="tanh"), dict(summary_use_proj=False),
             dict(num_labels=3)]


def _spec_and_model(config, cls, kw):
    """ckptstat's spec from the config as the user wrote it (the class then sets num_labels = 1 on its copy), and the
    model on the CPU."""
    cfg = getattr(T, config)(**SIZES, **kw)
    spec = from_config(dict(cfg.to_dict(), architectures=[cls]))
    return spec, cfg, meta_model(getattr(T, cls), cfg, "cpu")


@pytest.mark.parametrize("kw", SUMMARIES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "defaults")
@pytest.mark.parametrize("config,cls", CLASSES, ids=[c[1] for c in CLASSES])
def test_flops_of_choices_and_parameters_equal_transformers(config, cls, kw):
    spec, cfg, model = _spec_and_model(config, cls, kw)
    assert spec.head == "lm+mc"
    assert predict_params(spec)["total"] == sum(p.numel() for p in model.parameters())
    assert get(spec.family).expected_tensors(spec) == saved_shapes(model)
    batch, choices, seq = 2, 3, 8
    ids = torch.arange(batch * choices * seq).reshape(batch, choices, seq) % cfg.vocab_size
    mc_token_ids = torch.tensor([[seq - 1, 2, 5], [0, seq - 1, 3]])
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        out = model(input_ids=ids, mc_token_ids=mc_token_ids)
    assert tuple(out.mc_logits.shape[:2]) == (batch, choices)
    assert ours(spec, seq, batch * choices) == counter.get_total_flops() > 0


@pytest.mark.parametrize("config,cls", CLASSES, ids=[c[1] for c in CLASSES])
def test_config_alone_predicts_the_summary(tmp_path, config, cls):
    """config.json alone (summary_proj_to_labels false: the projection is n_embd wide) against the class's parameters."""
    torch.manual_seed(0)
    cfg = getattr(T, config)(**SIZES, summary_proj_to_labels=False)
    model = getattr(T, cls)(cfg)
    model.save_pretrained(tmp_path)
    bare = tmp_path / "bare.json"
    bare.write_text((tmp_path / "config.json").read_text())
    assert load(str(bare)).predicted["total"] == sum(p.numel() for p in model.parameters())
    m = load(str(tmp_path))
    assert m.agree and m.checkpoint_params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("config,cls", CLASSES, ids=[c[1] for c in CLASSES])
def test_config_without_architectures_reads_the_summary(tmp_path, config, cls):
    """config.json naming no class: the head is the file's names' (lm+mc), the summary still the config's (here
    n_embd wide and tanh, not the class defaults' one output): the prediction equals the class's parameters."""
    import json

    torch.manual_seed(0)
    cfg = getattr(T, config)(**SIZES, summary_proj_to_labels=False, summary_activation="tanh")
    model = getattr(T, cls)(cfg)
    model.save_pretrained(tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    d.pop("architectures", None)
    (tmp_path / "config.json").write_text(json.dumps(d))
    m = load(str(tmp_path))
    assert m.spec.head == "lm+mc"
    assert m.agree and m.predicted["total"] == sum(p.numel() for p in model.parameters())
    assert (m.spec.variant.outputs, m.spec.variant.activation) == (model.multiple_choice_head.summary.out_features, "tanh")


@pytest.mark.parametrize("kind", ["last", "mean"])
def test_config_without_architectures_refuses_other_summary_types(tmp_path, kind):
    """The same with a summary_type the template does not describe for the choices: refused in one line."""
    import json

    torch.manual_seed(0)
    model = T.GPT2DoubleHeadsModel(T.GPT2Config(**SIZES, summary_type=kind))
    model.save_pretrained(tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    d.pop("architectures", None)
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(NoAnalyticModel, match="summary_type"):
        load(str(tmp_path))


@pytest.mark.parametrize("config,cls", CLASSES, ids=[c[1] for c in CLASSES])
def test_memory_counts_the_lm_logits(tmp_path, config, cls):
    """The double-heads model returns the LM head's logits too: `memory`'s logits line is the bytes of the
    logits a real forward returns (at batch x num_choices sequences, in the config's float32)."""
    from ckptstat.analysis import memory

    torch.manual_seed(0)
    cfg = getattr(T, config)(**SIZES)
    cfg.architectures = [cls]
    cfg.save_pretrained(tmp_path)
    batch, choices, seq = 2, 3, 8
    with torch.no_grad():
        out = getattr(T, cls)(cfg)(input_ids=torch.zeros(batch, choices, seq, dtype=torch.long))
    lines = memory.report(load(str(tmp_path / "config.json")), batch * choices, seq)["lines"]
    assert [x["bytes"] for x in lines if x["item"] == "logits"] == [out.logits.numel() * out.logits.element_size()]


@pytest.mark.parametrize("kind", ["last", "first", "mean", "attn"])
def test_other_summary_types_are_one_line(kind):
    """"attn" raises NotImplementedError in transformers; "last", "first" and "mean" index dim 1 of the hidden states,
    which for [batch, num_choices, seq] is the choices: the projection then runs on batch x seq rows (shown here), not
    one token per choice. Both are refused in one line; the LM head alone never reads summary_type."""
    d = T.GPT2Config(**SIZES).to_dict()
    d.update(architectures=["GPT2DoubleHeadsModel"], summary_type=kind)
    with pytest.raises(NoAnalyticModel, match=f"summary_type = '{kind}'"):
        from_config(d)
    assert from_config(dict(d, architectures=["GPT2LMHeadModel"])).head == "lm"
    if kind != "attn":
        model = meta_model(T.GPT2DoubleHeadsModel, T.GPT2Config(**SIZES, summary_type=kind), "cpu")
        with torch.no_grad():
            out = model(input_ids=torch.zeros((2, 3, 8), dtype=torch.long))
        assert tuple(out.mc_logits.shape) == (2, 8)   # one logit per token of a choice, not one per choice
