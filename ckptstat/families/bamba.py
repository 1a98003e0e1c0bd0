"""Bamba (transformers modeling_bamba.py, BambaModel / BambaForCausalLM): the LLaMA layout (layout.py) whose layers'
token mixer is attention on the config's attn_layer_indices and the Mamba2 mixer elsewhere (BambaMixer, Mamba2Mixer's
code: layout_ssm.py, its sizes the config's mamba_* keys); half of each head rotated (BambaConfig fixes
partial_rotary_factor 0.5), the MLP at `feed_forward` after `pre_ff_layernorm`, the final norm `final_layernorm`. The
cache: K/V per attention layer, a conv and a recurrent state per Mamba2 layer (base.decoder_kv_cache)."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import TINY, DecoderLayout, Paths
from .framework.layout_base import BAMBA_KEYS

BAMBA = DecoderLayout(hybrid="attn_indices", ssm_keys=BAMBA_KEYS, partial_rotary=0.5,
                      paths=Paths(mlp="feed_forward", mlp_in="pre_ff_layernorm", norm="final_layernorm"))

_SIZES = dict(TINY, num_hidden_layers=3, attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8,
              mamba_n_groups=2, mamba_d_conv=3, mamba_chunk_size=4)

FAMILY = Family(
    name="bamba",
    # no GGUF table: llama.cpp converts BambaForCausalLM as `granitehybrid`, the architecture Granite 4's hybrids
    # (GraniteMoeHybrid, other HF names for the same llama.cpp tensors) convert to too; granitemoehybrid.py claims
    # those files, its gguf_table giving one with a dense MLP and no router this layout's names
    **{**layout.family_fields({"bamba": BAMBA}, "ssm_norm"), "gguf_tensor_names": ()},
    # the signature is the mixer's gated norm (FalconH1's mixer has none by default: mamba_rms_norm); Granite 4's hybrids
    # (GraniteMoeHybrid) and Zamba2 hold it at model.layers.N.mamba too, beside their shared MLP / shared transformer.
    # (A FalconH1 with mamba_rms_norm, attention and mixer in every layer, shows no name of its own: read as bamba
    # without config.json)
    signature_without=r"(^|[./])(shared_mlp|block_sparse_moe|shared_transformer|mamba_decoder)[./]",
    samples=(
        Sample("BambaConfig", _SIZES, ("BambaForCausalLM", "BambaModel")),
        Sample("BambaConfig", dict(_SIZES, attn_layer_indices=[0, 2], attention_bias=True, mlp_bias=True,
                                   mamba_proj_bias=True, mamba_conv_bias=False, mamba_chunk_size=16,
                                   tie_word_embeddings=True), ("BambaForCausalLM",)),
    ),
)
