"""`ckptstat memory --tp`: a hybrid's conv and recurrent states per device, split as vLLM shards each mixer
(ckptstat/analysis/memory/tp_states.py, docs/memory_planner.md).

Oracles: the state and K/V bytes of the cache transformers 5 returns after a real forward of a tiny config in
bfloat16; the per-device share by vLLM's rule, written here from its source (vllm/model_executor/layers/mamba/
mamba_utils.py MambaStateShapeCalculator, mamba_mixer2.py MambaMixer2) and applied to those tensors' shapes:
- mamba2_state_shape: conv (intermediate + 2 x (n_groups + extra_groups_for_head_shards) x state) / tp channels,
  temporal state num_heads / tp; MambaMixer2 asserts num_heads % tp == 0 and n_groups % tp == 0 or n_groups == 1;
- mamba1_state_shape (MambaMixer, Jamba): conv and temporal state intermediate / tp channels;
- kda_state_shape (KimiDeltaAttention): conv (3 H d) / tp channels, recurrent H / tp heads;
- short_conv_state_shape (LFM2's ShortConv): hidden / tp channels;
- linear_attention_state_shape (MiniMaxText01LinearAttention): num_heads / tp.
Attention K/V split over the KV heads, replicated past them: / min(tp, g), as vLLM does. transformers keeps the conv
state over conv_kernel tokens (vLLM over conv_kernel - 1): the split is of channels and heads, in transformers' layout."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

import test_memory_planner  # noqa: E402
from test_memory_planner import _config, _group, _tensors_bytes  # noqa: E402

mem = test_memory_planner.mem   # the fixture


def _mamba2(heads: str, head_dim: str | None, groups: str, state: str, d_ssm: str | None = None):
    """MambaMixer2's conv channels on one of tp ranks, from the config's own names (mamba2_state_shape)."""
    def rank_channels(cfg, tp: int) -> float:
        inner = getattr(cfg, d_ssm) if d_ssm else getattr(cfg, heads) * getattr(cfg, head_dim)
        g = getattr(cfg, groups)
        assert getattr(cfg, heads) % tp == 0 and (g % tp == 0 or g == 1)   # MambaMixer2's asserts
        extra = 0 if g % tp == 0 else tp - g                                 # extra_groups_for_head_shards
        return (inner + 2 * (g + extra) * getattr(cfg, state)) / tp
    return rank_channels


BAMBA = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
             vocab_size=99, attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_n_groups=1,
             mamba_d_conv=3, mamba_chunk_size=4)
GRANITE = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
               vocab_size=99, num_experts_per_tok=2, num_local_experts=4, shared_intermediate_size=16,
               layer_types=["mamba", "attention", "mamba"], mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8,
               mamba_n_groups=1, mamba_d_conv=3, mamba_chunk_size=4)
FALCON_H1 = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
                 vocab_size=99, mamba_d_ssm=32, mamba_n_heads=4, mamba_d_head=8, mamba_d_state=8, mamba_n_groups=1,
                 mamba_d_conv=3, mamba_chunk_size=4)
NEMOTRON_H = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=37,
                  vocab_size=99, layers_block_type=["mamba", "attention", "mlp", "mamba"], mamba_num_heads=4,
                  mamba_head_dim=16, ssm_state_size=8, n_groups=4, conv_kernel=3, chunk_size=4)
MAMBA2 = dict(hidden_size=32, num_hidden_layers=2, num_heads=8, head_dim=8, state_size=8, n_groups=1, conv_kernel=3,
              chunk_size=4, vocab_size=99)

# (config class, model class, sizes, tp, conv channels per rank or None: the conv's channels / tp)
MAMBA2_CASES = {
    "bamba": ("BambaConfig", "BambaForCausalLM", BAMBA, 4,
              _mamba2("mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state")),
    "granite-4": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM", GRANITE, 4,
                  _mamba2("mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state")),
    "falcon-h1": ("FalconH1Config", "FalconH1ForCausalLM", FALCON_H1, 4,
                  _mamba2("mamba_n_heads", None, "mamba_n_groups", "mamba_d_state", d_ssm="mamba_d_ssm")),
    "nemotron-h": ("NemotronHConfig", "NemotronHForCausalLM", NEMOTRON_H, 4,
                   _mamba2("mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size")),
    "mamba2": ("Mamba2Config", "Mamba2ForCausalLM", MAMBA2, 4, _mamba2("num_heads", "head_dim", "n_groups", "state_size")),
}


def _cache_parts(config_cls: str, model_cls: str, sizes: dict, batch: int, seq: int):
    """The config and the bytes of transformers' cache after a real bf16 forward: attention K/V, conv states (with the
    conv tensors themselves) and recurrent states (LinearAttentionLayer's, MiniMaxCache's linear_cache)."""
    cfg = getattr(T, config_cls)(**sizes)
    torch.manual_seed(0)
    model = getattr(T, model_cls)(cfg).to(torch.bfloat16).eval()
    with torch.no_grad():
        cache = model(input_ids=torch.ones((batch, seq), dtype=torch.long), use_cache=True).past_key_values
    attn = sum(_tensors_bytes(getattr(layer, k, None)) for layer in cache.layers for k in ("keys", "values"))
    convs = [t for layer in cache.layers for t in (getattr(layer, "conv_states", None) or {}).values() if t is not None]
    rec = sum(_tensors_bytes(getattr(layer, "recurrent_states", None)) for layer in cache.layers)
    rec += _tensors_bytes(getattr(cache, "linear_cache", None))
    return model.config, attn, convs, rec


def _planned(tmp_path, mem, config_cls, model_cls, sizes, tp, batch, seq) -> tuple[int, int]:
    path = _config(tmp_path, config_cls, sizes, model_cls)
    args = ["--seq", str(seq), "--batch", str(batch), "--kv-dtype", "bf16"]
    one = _group(mem(path, *args), "kv cache")
    return one, _group(mem(path, *args, "--tp", str(tp), "--gpus", str(tp), "--gpu", "H100-80"), "kv cache")


@pytest.mark.parametrize("name", MAMBA2_CASES)
def test_mamba2_hybrid_states_split_as_mamba_mixer2(tmp_path, mem, name):
    """Bamba, Granite 4 and Falcon-H1 with one B/C group (replicated to every rank), NemotronH with 4 (one per rank),
    Mamba2: at tp 4 past their 2 KV heads, each rank holds heads / 4 of the recurrent state and (intermediate + 2 x
    groups x state) / 4 conv channels, groups padded to tp (was: the states divided by the KV heads, or by the heads)."""
    config_cls, model_cls, sizes, tp, rank_channels = MAMBA2_CASES[name]
    batch, seq = 2, 5
    cfg, attn, convs, rec = _cache_parts(config_cls, model_cls, sizes, batch, seq)
    conv = sum(_tensors_bytes(t) for t in convs)
    assert conv and rec
    one, per_device = _planned(tmp_path, mem, config_cls, model_cls, sizes, tp, batch, seq)
    assert one == attn + conv + rec
    kv_heads = getattr(cfg, "num_key_value_heads", 0)
    conv_rank = sum(t.numel() // t.shape[1] * rank_channels(cfg, tp) * t.element_size() for t in convs)
    expected = (attn / min(tp, kv_heads) if attn else 0) + conv_rank + rec / tp
    assert per_device == math.ceil(expected)


def test_jamba_mamba1_states_split_over_intermediate_channels(tmp_path, mem):
    """Jamba's Mamba1 mixer at tp 4 (2 KV heads): vLLM's MambaMixer holds intermediate / tp conv and state channels."""
    sizes = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
                 vocab_size=99, num_experts_per_tok=2, num_experts=4, attn_layer_period=2, attn_layer_offset=1,
                 expert_layer_period=2, expert_layer_offset=1, mamba_d_state=8, mamba_d_conv=3, mamba_dt_rank=4)
    batch, seq, tp = 2, 5, 4
    cfg, attn, convs, rec = _cache_parts("JambaConfig", "JambaForCausalLM", sizes, batch, seq)
    conv = sum(_tensors_bytes(t) for t in convs)
    assert all(t.shape[1] == cfg.mamba_expand * cfg.hidden_size for t in convs) and rec
    one, per_device = _planned(tmp_path, mem, "JambaConfig", "JambaForCausalLM", sizes, tp, batch, seq)
    assert one == attn + conv + rec
    assert per_device == math.ceil(attn / min(tp, cfg.num_key_value_heads) + (conv + rec) / tp)


def test_a_group_count_vllm_cannot_shard_is_a_usage_error(tmp_path, cli):
    """MambaMixer2 asserts n_groups % tp == 0 or n_groups == 1; and num_heads % tp == 0."""
    for sizes, tp, words in ((dict(BAMBA, mamba_n_groups=2), 4, "2 state-space groups"),
                             (MAMBA2, 3, "8 state-space heads")):
        config_cls, model_cls = ("BambaConfig", "BambaForCausalLM") if "mamba_n_heads" in sizes else \
            ("Mamba2Config", "Mamba2ForCausalLM")
        path = _config(tmp_path, config_cls, sizes, model_cls)
        rc, out, err = cli("memory", path, "--tp", str(tp), "--gpus", str(tp))
        assert rc == 2 and words in err, (rc, err)


KIMI = dict(vocab_size=99, pad_token_id=0, bos_token_id=1, eos_token_id=2, hidden_size=32, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=4, linear_num_heads=4, linear_head_dim=8, num_local_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=16, intermediate_size=48, kv_lora_rank=8, qk_nope_head_dim=8,
            qk_rope_head_dim=4, v_head_dim=8, n_group=1, topk_group=1,
            layer_types=["linear_attention", "full_attention", "linear_attention"])
BAILING = dict(vocab_size=99, pad_token_id=0, eos_token_id=1, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=4, head_dim=8, layer_group_size=2, first_k_dense_replace=1, num_local_experts=4,
               num_experts_per_tok=2, moe_intermediate_size=16, intermediate_size=48, kv_lora_rank=8, qk_nope_head_dim=8,
               qk_rope_head_dim=4, v_head_dim=8, n_group=1, topk_group=1, num_mtp_layers=0)
LFM2 = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
            vocab_size=99, max_position_embeddings=64, layer_types=["conv", "full_attention", "conv"], pad_token_id=0)
MINIMAX = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
               vocab_size=99, max_position_embeddings=64, num_experts_per_tok=2, num_local_experts=4, head_dim=8,
               block_size=4)

# every state channel and head split over tp: (config class, model class, sizes, tp, the K/V heads tp splits over)
SPLIT_CASES = {
    # kda_state_shape: conv (3 H d) / tp, recurrent H / tp; its MLA layer caches one latent head, whole on every rank
    "kimi-linear": ("KimiLinearConfig", "KimiLinearForCausalLM", KIMI, 4, lambda cfg: 1),
    # the same KDA rule beside DeepSeek's latent attention (Ling 3): one latent head, whole on every rank
    "bailing-hybrid": ("BailingHybridConfig", "BailingHybridForCausalLM", BAILING, 4, lambda cfg: 1),
    # short_conv_state_shape: hidden / tp
    "lfm2": ("Lfm2Config", "Lfm2ForCausalLM", LFM2, 4, lambda cfg: cfg.num_key_value_heads),
    # linear_attention_state_shape: heads / tp
    "minimax": ("MiniMaxConfig", "MiniMaxForCausalLM", MINIMAX, 4, lambda cfg: cfg.num_key_value_heads),
}


@pytest.mark.parametrize("name", SPLIT_CASES)
def test_linear_conv_and_lightning_states_split_over_tp(tmp_path, mem, name):
    """Kimi-Linear's KDA, LFM2's short convolution, MiniMax's lightning attention at tp 4: every rank holds 1/4 of the
    states (vLLM shards their heads or channels); the attention K/V / min(tp, 2 KV heads), Kimi's MLA latent whole
    (was: the states split with the K/V: / 2 for LFM2 and MiniMax, whole for Kimi-Linear)."""
    config_cls, model_cls, sizes, tp, kv_heads = SPLIT_CASES[name]
    batch, seq = 2, 5
    cfg, attn, convs, rec = _cache_parts(config_cls, model_cls, sizes, batch, seq)
    states = sum(_tensors_bytes(t) for t in convs) + rec
    assert states
    one, per_device = _planned(tmp_path, mem, config_cls, model_cls, sizes, tp, batch, seq)
    assert one == attn + states
    assert per_device == math.ceil((attn / min(tp, kv_heads(cfg)) if attn else 0) + states / tp)
