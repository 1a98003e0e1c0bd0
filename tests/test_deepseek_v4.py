"""DeepSeek-V4 (families/deepseek_v4.py) against transformers: matmul FLOPs and the cache at sequence lengths below, at and
past its sample's window (4) and compression rates (CSA 2, HCA 8), whose compressed entries, unclosed windows and overlap
states change with the length; and the published size built on the meta device, its parameters and its memory plan
against the meta path's (the same model answered by transformers)."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from test_families import BATCH, cache_bytes, fcm_flops, meta_model, ours, spec_of  # noqa: E402

from ckptstat.analysis import memory as mem  # noqa: E402
from ckptstat.analysis import meta  # noqa: E402
from ckptstat.analysis.memory.planner import Plan  # noqa: E402
from ckptstat.census.model import load as static_load  # noqa: E402
from ckptstat.families import deepseek_v4  # noqa: E402
from ckptstat.families.framework.ops import Builder  # noqa: E402

SEQS = (1, 2, 3, 4, 5, 7, 8, 9, 17)


@pytest.fixture(scope="module")
def tiny():
    cfg = T.DeepseekV4Config(**deepseek_v4._SIZES)
    cls = T.DeepseekV4ForCausalLM
    return meta_model(cls, cfg, "cpu"), spec_of(cls, cfg)


@pytest.mark.parametrize("seq", SEQS)
def test_flops_and_cache_at_every_length(tiny, seq):
    model, spec = tiny
    assert ours(spec, seq, BATCH) == fcm_flops(model, seq, BATCH, "cpu")
    assert deepseek_v4.kv_cache(spec, BATCH, seq, seq, 4)[0][1] == cache_bytes(model, seq, BATCH)


def _pairs(model, monkeypatch, seq: int) -> tuple[int, int]:
    """(the (query, key) pairs the forward's masks leave at 0, those they mask), summed over layers and heads: kept,
    the sliding window's and, concatenated to it, the block bias over the compressed entries (those a query's
    position has closed, on CSA layers at most index_topk of them, the indexer's picks)."""
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as modeling

    real, kept = modeling.eager_attention_forward, []

    def spy(module, q, k, v, mask, **kw):   # the mask [b, 1, s, s + T], one per layer, for every head
        kept.append((int((mask == 0).sum()) * q.shape[1], int((mask != 0).sum()) * q.shape[1]))
        return real(module, q, k, v, mask, **kw)

    monkeypatch.setattr(modeling, "eager_attention_forward", spy)
    with torch.no_grad():
        model(input_ids=torch.arange(BATCH * seq).reshape(BATCH, seq) % 97,
              attention_mask=torch.ones(BATCH, seq, dtype=torch.long))
    monkeypatch.undo()
    return sum(k for k, _ in kept), sum(m for _, m in kept)


@pytest.mark.parametrize("seq", (3, 5, 9, 17))
def test_causal_halving_counts_the_pairs_the_masks_keep(tiny, monkeypatch, seq):
    """With --causal-halving the scores are the (query, key) pairs the forward's mask leaves at 0."""
    model, spec = tiny
    B = Builder(spec, BATCH, seq, seq, 1, 1, causal_halving=True)
    deepseek_v4.walk(B)
    assert sum(op.macs * op.calls for op in B.ops if op.module.endswith(".scores (QK^T, + sinks)")) == \
        _pairs(model, monkeypatch, seq)[0] * spec.head_dim


@pytest.mark.parametrize("seq", (5, 9, 17))
def test_windowed_kernel_estimate_counts_the_compressed_entries(tiny, monkeypatch, tmp_path, seq):
    """Past the window, `ckptstat flops`' windowed-kernel figure is what the kernel attends: the eager count
    (FlopCounterMode's, test_flops_and_cache_at_every_length) less QK^T and PV over the pairs the real masks drop,
    the window's and the compressed entries' kept (the indexer's scores as they are); its note says so."""
    from ckptstat.analysis import flops

    model, _ = tiny
    model.config.to_json_file(tmp_path / "config.json")
    r = flops.run(static_load(str(tmp_path / "config.json")), BATCH, seq)
    dropped = _pairs(model, monkeypatch, seq)[1]
    assert r["totals"]["attention_flops"] - r["totals"]["windowed_attention_flops"] == 2 * 2 * dropped * model.config.head_dim
    assert dropped > 0
    assert "compressed entries" in " ".join(r["notes"])


# DeepSeek-V4-Flash (deepseek-ai/DeepSeek-V4-Flash-Base, the checkpoint DeepseekV4Config documents; its defaults are this
# model's sizes) as a config.json in the released form, the legacy keys the class folds (qk_rope_head_dim,
# num_hash_layers, compress_rate_csa / _hca); the layer schedule is the class's default (two HCA layers, then CSA / HCA)
FLASH = dict(architectures=["DeepseekV4ForCausalLM"], model_type="deepseek_v4", torch_dtype="bfloat16", vocab_size=129280,
             hidden_size=4096, moe_intermediate_size=2048, num_hidden_layers=43, num_attention_heads=64,
             num_key_value_heads=1, head_dim=512, qk_rope_head_dim=64, q_lora_rank=1024, o_groups=8, o_lora_rank=1024,
             n_routed_experts=256, n_shared_experts=1, num_experts_per_tok=6, num_hash_layers=3,
             scoring_func="sqrtsoftplus", routed_scaling_factor=1.5, norm_topk_prob=True, swiglu_limit=10.0,
             sliding_window=128, compress_rate_csa=4, compress_rate_hca=128, index_n_heads=64, index_head_dim=128,
             index_topk=512, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rope_theta=10000.0,
             compress_rope_theta=160000.0, max_position_embeddings=1048576, rms_norm_eps=1e-6,
             rope_scaling={"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32,
                           "beta_slow": 1},
             tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, num_nextn_predict_layers=1)


def _lines(r: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in r["fit"]["lines"]:
        out[x["group"]] = out.get(x["group"], 0) + x["bytes"]
    return out


@pytest.mark.slow
def test_flash_published_size_static_against_the_meta_model(tmp_path):
    """284.3 B parameters (13.8 B active), as transformers builds them; the memory plan's weights and cache as the meta
    path's, at lengths inside and past the window and the HCA rate; the activation estimate apart from the meta path's
    generic reading, which leaves out the shared expert (3 x moe_intermediate_size per token). At --tp 8 the K = V head
    stays whole on every rank, and the projections vLLM replicates are whole: the fused wq_a + wkv, the compressors' wkv
    + wgate, the indexers' wq_b and weights_proj, the hyper-connections' fn."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(FLASH))
    cfg = T.AutoConfig.from_pretrained(tmp_path)
    with torch.device("meta"):
        model = T.DeepseekV4ForCausalLM._from_config(cfg, dtype=torch.bfloat16)
    st = static_load(str(path))
    assert st.predicted["total"] == model.num_parameters() == 284_325_869_015
    mm = meta.model_of(FLASH, str(path), str(path))
    assert mm.predicted["active"] == st.predicted["active"]
    # the weights as transformers holds them at bf16: _keep_in_fp32_modules_strict's norms, hyper-connections, sinks
    # and position biases in float32 (families/fp32_table.py); the meta path names them as the model does, the op
    # template by the release's names (hc_attn_fn, attn.compressor ...), which match the patterns for the norms only
    held = sum(p.numel() * p.element_size() for p in model.parameters())
    kept = sum(p.numel() for p in model.parameters() if p.dtype == torch.float32)
    for s in (100, 4096):
        ours_r, theirs = _lines(mem.report(st, 1, s, None, Plan())), _lines(mem.report(mm, 1, s, None, Plan()))
        shared = 2 * 1 * s * 3 * FLASH["moe_intermediate_size"]
        assert ours_r.pop("activations") == theirs.pop("activations") + shared
        assert theirs.pop("weights") == held
        assert 0 < held - ours_r.pop("weights") < 2 * kept
        assert ours_r == theirs, s
    eight = mem.report(st, 1, 4096, None, Plan(tp=8, gpus=8))
    assert _lines(eight)["kv cache"] == _lines(mem.report(st, 1, 4096, None, Plan()))["kv cache"]
    whole = sum(m.weight.numel() for n, m in model.named_modules()
                if n.endswith((".q_a_proj", ".self_attn.kv_proj", "compressor.kv_proj", "compressor.gate_proj",
                               "indexer.kv_proj", "indexer.gate_proj", "indexer.q_b_proj", "scorer.weights_proj")))
    whole += sum(p.numel() for n, p in model.named_parameters() if n.endswith(("attn_hc.fn", "ffn_hc.fn")))
    assert eight["fit"]["replicated"]["DeepSeek-V4 single-head projections"] == whole
