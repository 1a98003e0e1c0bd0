"""Falcon-H1 (transformers modeling_falcon_h1.py, FalconH1Model / FalconH1ForCausalLM): the LLaMA layout (layout.py)
whose every layer runs the Mamba2 mixer (FalconH1Mixer, Mamba2Mixer's code: layout_ssm.py, its sizes the config's
mamba_* keys, its width mamba_d_ssm where set) beside its attention, both reading the layer's input norm, their outputs
summed into the residual (DecoderLayout.hybrid "beside"); the mixer's out_proj biased by projectors_bias, its gated
RMSNorm only where mamba_rms_norm (else the scan's output x silu(gate)); the gated MLP at `feed_forward` after
`pre_ff_layernorm`, the final norm `final_layernorm`. The muP multipliers (embedding, key, attention and SSM in / out,
the in_proj output's mup_vector, a non-persistent buffer, the MLP's and the LM head's) are element-wise scalars, not
counted. The cache: K/V and a conv and a recurrent state per layer (base.decoder_kv_cache)."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import TINY, DecoderLayout, Paths
from .framework.layout_base import FALCON_H1_KEYS

FALCON_H1 = DecoderLayout(hybrid="beside", ssm_keys=FALCON_H1_KEYS,
                          paths=Paths(mlp="feed_forward", mlp_in="pre_ff_layernorm", norm="final_layernorm"))

_SIZES = dict(TINY, num_hidden_layers=2, mamba_d_ssm=32, mamba_n_heads=4, mamba_d_head=8, mamba_d_state=8,
              mamba_n_groups=2, mamba_d_conv=3, mamba_chunk_size=4)

FAMILY = Family(
    name="falcon_h1",
    # no GGUF table: llama.cpp's falcon-h1 tensor map names pre_ff_layernorm's weight `blk.N.ffn_norm`, no `.weight`
    # (gguf-py TensorNameMap's FFN_PRE_NORM key holds the suffix), which one layout module's name cannot say
    **{**layout.family_fields({"falcon_h1": FALCON_H1}, "ssm_in"), "gguf_tensor_names": ()},
    # the signature is the mixer's in_proj without its gated norm (mamba_rms_norm false, the config class's default) or
    # Jamba's x_proj, Granite 4's MoE and shared MLP, Zamba2's shared transformer. Its layers hold the mixer beside
    # attention where Bamba's hold one of them, which no name shows (detection reads every layer number as 0): a
    # FalconH1 with mamba_rms_norm is read as bamba without config.json
    signature_without=r"(^|[./])(mamba[./](norm|x_proj)|shared_mlp|block_sparse_moe|shared_transformer|mamba_decoder)[./]",
    samples=(
        Sample("FalconH1Config", _SIZES, ("FalconH1ForCausalLM", "FalconH1Model")),
        Sample("FalconH1Config", dict(_SIZES, mamba_d_ssm=None, mamba_d_head="auto", mamba_rms_norm=True,
                                      mamba_norm_before_gate=False, projectors_bias=True, attention_bias=True,
                                      mamba_proj_bias=True, mamba_conv_bias=False, mlp_bias=True, mamba_chunk_size=16,
                                      head_dim=16, tie_word_embeddings=True, mlp_multipliers=[0.5, 2.0],
                                      ssm_multipliers=[0.5, 1.0, 2.0, 1.0, 0.25]), ("FalconH1ForCausalLM",),
               detected_as="bamba"),   # its gated norm's names are Bamba's (the signature's comment)
    ),
)
