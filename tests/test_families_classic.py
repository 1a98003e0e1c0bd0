"""The classic decoder families (families/opt.py, bloom.py, gptj.py with CodeGen, gpt_neo.py, gpt_bigcode.py; ctrl.py,
openai_gpt.py, mpt.py, cpmant.py, prophetnet.py) beyond the registry walk of tests/test_families.py: against tiny
transformers models on the CPU,

* KV cache (beyond tests/test_families.py's check of every decoder): GPTBigCode's multi-query cache holds one K/V head;
* GPT-Neo's local layers: with --causal-halving the attention MACs equal the (query, key) pairs each layer's own
  mask buffer lets through x heads x head_dim, both bmm's;
* OPT's position offset: the model runs max_position_embeddings tokens and fails on one more, as check_seq says;
* saves: save_pretrained (with config.json) and torch.save (a state dict, no config) read back with the model's
  unique parameters, its tie groups, the family (by tensor names: the Sample's detected_as), and, with the
  config, a prediction that agrees with the file (the vision encoders DINOv2, SigLIP and DeiT too)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from census_audit import model_oracle, reported, save_both  # noqa: E402
from test_families import meta_model, spec_of  # noqa: E402

from ckptstat.census.model import load as load_model  # noqa: E402
from ckptstat.errors import UsageError  # noqa: E402
from ckptstat.families import get  # noqa: E402
from ckptstat.families.framework.graph import build  # noqa: E402
from ckptstat.families.framework.spec import check_seq  # noqa: E402

FAMILIES = ("opt", "bloom", "gptj", "gpt_neo", "gpt_bigcode", "ctrl", "openai_gpt", "mpt", "cpmant", "prophetnet")
BATCH = 2

def _model(sample, name):
    cfg = getattr(T, sample.config)(**sample.kwargs)
    return getattr(T, name), cfg, meta_model(getattr(T, name), cfg, "cpu")


def test_bigcode_multi_query_caches_one_kv_head():
    sample = get("gpt_bigcode").samples[0]
    cls, cfg, model = _model(sample, "GPTBigCodeForCausalLM")
    assert spec_of(cls, cfg).kv_heads == 1 == model.transformer.h[0].attn.kv_heads


@pytest.mark.parametrize("sample", get("gpt_neo").samples, ids=["global-local", "local-local-global"])
def test_gpt_neo_halved_attention_is_each_layers_mask(sample):
    cls, cfg, model = _model(sample, "GPTNeoForCausalLM")
    spec = spec_of(cls, cfg)
    assert [i for i, k in enumerate(cfg.attention_layers) if k == "local"] == \
        list(spec.sliding_layers or range(spec.layers)) and spec.sliding_window == cfg.window_size
    for seq in (3, 8, 16):    # the window (4) is longer, then shorter than the sequence
        kept = sum(int(layer.attn.attention.bias[0, 0, :seq, :seq].sum()) for layer in model.transformer.h)
        macs = sum(op.macs * op.calls for op in build(spec, BATCH, seq, causal_halving=True) if op.kind == "attention")
        assert macs == 2 * BATCH * kept * spec.heads * spec.head_dim, seq


def test_opt_runs_max_position_embeddings_tokens_and_not_one_more():
    sample = get("opt").samples[0]
    cls, cfg, model = _model(sample, "OPTForCausalLM")
    spec, P = spec_of(cls, cfg), cfg.max_position_embeddings
    assert spec.positions == model.model.decoder.embed_positions.weight.shape[0] == P + 2
    with torch.no_grad():
        model(input_ids=torch.zeros((1, P), dtype=torch.long))
        with pytest.raises(IndexError):
            model(input_ids=torch.zeros((1, P + 1), dtype=torch.long))
    check_seq(spec, P)
    with pytest.raises(UsageError, match="exceeds the model's 64 learned positions"):
        check_seq(spec, P + 1)


# the vision encoders added beside them (families/dinov2.py, siglip.py, vit.py's DeiT) and the waveform encoders
# (wav2vec2.py), and the BERT-era encoders used as LMs (xlm.py, xlnet.py) read back the same way
ENCODERS = ("dinov2", "siglip", "vit", "wav2vec2", "xlm", "xlnet")
SAVE_CASES = [pytest.param(f, s, name, id=f"{f}-{name}-{i}") for f in FAMILIES + ENCODERS for i, s in enumerate(get(f).samples)
              for name in s.models[:1] + s.models[-1:] if name != s.models[0] or i == 0]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("family,sample,name", SAVE_CASES)
def test_saves_read_back_with_the_models_counts_ties_and_family(tmp_path, family, sample, name):
    _, _, model = _model(sample, name)
    oracle = model_oracle(model)
    paths = save_both(model, str(tmp_path))
    sd = reported(paths["torch.save"])
    assert (sd["params"], sd["ties"], sd["family"]) == (oracle["params"], oracle["ties"], sample.detected_as or family)
    hf = reported(paths["save_pretrained"])
    assert (hf["params"], hf["family"]) == (oracle["params"], family)
    assert hf["ties"] == oracle["ties"]
    m = load_model(paths["save_pretrained"])
    assert m.spec.family == family and m.agree
