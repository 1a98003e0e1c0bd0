"""xLSTM (families/xlstm.py) beyond tests/test_families.py's walk: the fused weight mode's causal LM (transformers
cannot initialise it off the meta device, so it is built on meta and its weights set on the CPU), the kernels' split of
a sequence into chunks, recurrent steps and pieces at more lengths, the state's dtype, and the configs the template
refuses, each against what transformers does with them."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from test_families import BATCH, fcm_flops, meta_model, ours, spec_of  # noqa: E402

from ckptstat.errors import NoAnalyticModel, UsageError  # noqa: E402
from ckptstat.families import xlstm  # noqa: E402
from ckptstat.families.framework.graph import predict_params  # noqa: E402


def _state_bytes(model, seq: int, batch: int = BATCH) -> int:
    """The bytes of the xLSTMCache a forward with use_cache returns (its rnn_state: C, n, m per layer)."""
    with torch.no_grad():
        ids = torch.arange(batch * seq).reshape(batch, seq) % model.config.vocab_size
        out = model(input_ids=ids, use_cache=True)
    return sum(t.numel() * t.element_size() for states in out.cache.rnn_state.values() for t in states)


def _ours_state(spec, ab: int, batch: int = BATCH) -> int:
    return int(xlstm.state_cache(spec, batch, 8, 8, ab)[0][1])


def _cpu_from_meta(cls, cfg):
    """The model built on meta (no _init_weights failure), its weights then set on the CPU."""
    model = meta_model(cls, cfg).to_empty(device="cpu")
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
    return model


def test_fused_causal_lm_params_flops_and_state():
    """weight_mode "fused" (qkv_opreact, ifgate_preact, proj_up_gate_z), use_bias, tie_word_embeddings set (xLSTM
    never ties): parameters, FLOPs at one token (the step kernel) and more, and the state its forward returns."""
    cfg = T.xLSTMConfig(**xlstm.FUSED)
    spec = spec_of(T.xLSTMForCausalLM, cfg)
    model = meta_model(T.xLSTMForCausalLM, cfg)
    assert predict_params(spec)["total"] == sum(p.numel() for p in model.parameters())
    for seq in (1, 3, 8):
        assert ours(spec, seq, BATCH) == fcm_flops(model, seq, BATCH), seq
    cpu = _cpu_from_meta(T.xLSTMForCausalLM, cfg)
    assert cpu.num_parameters() == predict_params(spec)["total"]
    for seq in (1, 5):
        assert _ours_state(spec, 4) == _state_bytes(cpu, seq), seq


@pytest.mark.parametrize("seq", [1, 5, 8, 9, 12, 13, 24, 25, 40])
def test_chunks_steps_and_pieces(seq):
    """chunk_size 8, max_inference_chunksize 12: pieces of 12 tokens, each whole chunks then single steps, a last
    piece of one token the step kernel; FlopCounterMode on the CPU model (its real kernels)."""
    cfg = T.xLSTMConfig(hidden_size=128, num_hidden_layers=2, num_heads=8, v_dim_factor=0.5, vocab_size=99, chunk_size=8,
                        max_inference_chunksize=12)
    model = meta_model(T.xLSTMForCausalLM, cfg, "cpu")
    assert ours(spec_of(T.xLSTMForCausalLM, cfg), seq, BATCH) == fcm_flops(model, seq, BATCH, "cpu")


def test_state_is_in_the_models_dtype():
    """xLSTMCache takes the embeddings' dtype: a bfloat16 model's state is 2 B an element (memory's activation bytes)."""
    cfg = T.xLSTMConfig(hidden_size=128, num_hidden_layers=3, num_heads=2, qk_dim_factor=1.0, vocab_size=99)
    model = meta_model(T.xLSTMForCausalLM, cfg, "cpu").to(torch.bfloat16)
    spec = spec_of(T.xLSTMForCausalLM, cfg)
    assert _ours_state(spec, 2) == _state_bytes(model, 7)


def test_cache_widths_the_layer_does_not_have_are_refused():
    """hidden_size 96: the layer's q/k width int(96 x 0.5) = 48, xLSTMCache's rounded to 64: transformers' forward with
    use_cache fails (its step kernel checks the initial state's shape), and ckptstat refuses the state (its FLOPs and
    parameters stand)."""
    cfg = T.xLSTMConfig(hidden_size=96, num_hidden_layers=2, num_heads=4, vocab_size=99)
    model = meta_model(T.xLSTMForCausalLM, cfg, "cpu")
    with pytest.raises(ValueError, match="matC_old has wrong shape"):
        _state_bytes(model, 4)
    spec = spec_of(T.xLSTMForCausalLM, cfg)
    with pytest.raises(NoAnalyticModel, match="xLSTMCache's head widths"):
        _ours_state(spec, 4)
    assert predict_params(spec)["total"] == model.num_parameters()
    cfg.use_cache = False   # the forward without a cache runs: the same FLOPs
    assert ours(spec, 6, BATCH) == fcm_flops(model, 6, BATCH, "cpu")


def test_modes_and_sizes_not_modelled_are_refused():
    base = dict(hidden_size=128, num_hidden_layers=2, num_heads=4, vocab_size=99)
    for mode in ("train", "train_with_padding"):
        with pytest.raises(NoAnalyticModel, match="mode"):
            spec_of(T.xLSTMForCausalLM, T.xLSTMConfig(**base, mode=mode))
    with pytest.raises(NoAnalyticModel, match="num_blocks"):
        spec_of(T.xLSTMForCausalLM, T.xLSTMConfig(**dict(base, num_blocks=3)))
    with pytest.raises(UsageError, match="multiples of num_heads"):
        spec_of(T.xLSTMForCausalLM, T.xLSTMConfig(**dict(base, num_heads=3)))
