"""HY-V4 (transformers modeling_hy_v4.py, configuration_hy_v4.py): DeepSeek's latent attention and MoE (deepseek.py,
its layout deepseek.HYV4) with GLM-5's indexer schedule (indexer_types: the "shared" layers reuse the previous
selection), a learned sink per head and an output gate (gate_proj of the layer's input, v_head_dim per head) on the
latent attention, and hyper-connections (DecoderLayout.hyper, DeepSeek-V4's form): the stream held as hc_mult copies;
before each layer's attention and MLP norms an fp32 linear of the copies (N x h -> 2N) mixes them into the sublayer's
input and spreads its output back; before the final norm the head's (N x h -> N) collapses them. Its routed experts are
transformers 5's grouped_mm (each token's top-k rows); the first mlp_layer_types "dense" layers a dense MLP. Total
parameters count every expert; active ones each token's top-k. KV cache: the MLA latent + rope key and, on the layers
with their own indexer, its key (deepseek.kv_cache). Its own family beside deepseek: llama.cpp has no architecture for
it (no GGUF names), and its files as transformers 5.24 saves them name its MLPs' gate_proj linear_gate."""
from __future__ import annotations

from . import deepseek
from .framework import layout
from .framework.base import ArchSpec, Cfg, Family, Sample


def from_config(c: Cfg) -> ArchSpec:
    return deepseek.latent_spec(deepseek.HYV4, c)


FAMILY = Family(
    name="hy_v4",
    # tried before them: its latent attention is deepseek's, its saved MLPs (up_proj, no gate_proj: saved as
    # linear_gate) arcee's, its held sinks (self_attn.sinks) flint's and its held attention gate afmoe's
    before=("deepseek", "arcee", "flint", "afmoe"),
    **{**layout.family_fields({"hy_v4": deepseek.HYV4}, "attn_kv_a_mqa"),
       "signature": r"(^|[./])layers[./]\d+[./](hc_pre[./]hc_attn_layer|attn_hc)[./]", "from_config": from_config,
       "from_tensors": deepseek.from_tensors, "kv_cache": deepseek.kv_cache, "gguf_tensor_names": ()},
    cache_heads=lambda s: 1,      # the latent: one head, whole on every tensor-parallel device
    gguf_architectures=(),
    samples=(
        # the token ids inside the tiny vocabulary (HYV4Config's are past it); transformers 5.24 saves HYV4Model's head
        # connection as hc_head.hc_pre.hc_head_fn, HYV4ForCausalLM's as model.hc_pre.hc_head.hc_head_fn (Paths.hc_head_base)
        Sample("HYV4Config", dict(deepseek._SIZES, pad_token_id=0, bos_token_id=1, eos_token_id=2, index_n_heads=2,
                                  index_head_dim=8, index_topk=4, hc_mult=2, indexer_types=["full", "full", "shared"]),
               ("HYV4Model", "HYV4ForCausalLM"), device="cpu"),
    ),
)
