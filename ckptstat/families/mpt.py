"""MPT (transformers modeling_mpt.py, configuration_mpt.py): the LLaMA layout (layout.py) with ALiBi in place of
rotary (transformers builds it whatever attn_config.alibi and learned_pos_emb say), LayerNorms without bias
(norm_1, norm_2, norm_f), a fused unbiased attn.Wqkv [3h, h] and attn.out_proj, a plain unbiased MLP ffn.up_proj /
GELU / ffn.down_proj 4 x d_model wide (MptMLP ignores expansion_ratio), and an LM head tied to wte by default
(MptForCausalLM._tied_weights_keys). llama.cpp names it `mpt`."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import FFNWidth

MPT = DecoderLayout(
    norm="layernorm_nobias", fused_qkv=True, mlp="plain", qkv_bias=False, o_bias=False, mlp_bias=False, positions="alibi",
    ffn_width=FFNWidth(times_hidden=4), activation="gelu", tied_default=True,
    task_heads=("seqcls", "tokcls", "qa"),
    paths=Paths(body="transformer", embed="wte", layers="blocks", attn="attn", qkv="Wqkv", o="out_proj", mlp="ffn",
                attn_in="norm_1", mlp_in="norm_2", norm="norm_f"))

_SIZES = dict(d_model=32, n_layers=2, n_heads=4, vocab_size=99, max_seq_len=64)

FAMILY = Family(
    name="mpt",
    # blocks.N.attn.Wqkv: no other family's
    **layout.family_fields({"mpt": MPT}, "attn_qkv"),
    samples=(
        Sample("MptConfig", _SIZES, ("MptModel", "MptForCausalLM")),
        Sample("MptConfig", dict(_SIZES, tie_word_embeddings=False, expansion_ratio=2), ("MptForCausalLM",)),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("MptConfig", dict(_SIZES, num_labels=3, pad_token_id=0),
               ("MptForSequenceClassification", "MptForTokenClassification", "MptForQuestionAnswering"), device="cpu"),
    ),
)
