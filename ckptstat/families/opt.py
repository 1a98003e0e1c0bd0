"""OPT (transformers modeling_opt.py, configuration_opt.py). The decoder (`decoder.` in OPTModel,
`model.decoder.` under a head):

* embed_tokens [V, E], E = word_embed_proj_dim (default hidden_size); when E != h (OPT-350m) project_in [h, E]
  after the lookup and project_out [E, h] after the last layer, both without bias;
* learned positions embed_positions [P + 2, h]: OPTLearnedPositionalEmbedding adds an offset of 2 to every
  position id, so the first two rows are never read and the model runs at most P tokens;
* layers of q/k/v/out_proj and fc1 / ReLU / fc2 (biased unless enable_bias is false) with
  self_attn_layer_norm and final_layer_norm, before the sublayer (do_layer_norm_before, default true) or after
  it (OPT-350m); LayerNorms without weights when layer_norm_elementwise_affine is false;
* a final LayerNorm only when do_layer_norm_before and not _remove_final_layer_norm;
* heads over E: lm_head tied to embed_tokens by default (OPTForCausalLM._tied_weights_keys), score, qa_outputs.

One description (layout.py): OPT (pre-norm) and OPT_POST (OPT-350m's post-norm layers, no final norm), the config's
do_layer_norm_before picking (ArchSpec.layout). Weightless LayerNorms (layer_norm_elementwise_affine false) and a
pre-norm model without its final norm (_remove_final_layer_norm) have no op template: the meta path answers them."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import BiasKeys, FFNWidth

OFFSET = 2   # OPTLearnedPositionalEmbedding.offset

OPT = DecoderLayout(norm="layernorm", mlp="plain", positions="learned", act_key="activation_function", tied_default=True,
                    embed_proj=True, task_heads=("seqcls", "qa"), ffn_width=FFNWidth(key="ffn_dim"),
                    bias_keys=BiasKeys(qkv="enable_bias", o="enable_bias", mlp="enable_bias"),
                    requires=(("layer_norm_elementwise_affine", True), ("_remove_final_layer_norm", False)),
                    paths=Paths(body="model.decoder", base="decoder", pos="embed_positions", o="out_proj", mlp="", up="fc1",
                                down="fc2", attn_in="self_attn_layer_norm", mlp_in="final_layer_norm",
                                attn_out="self_attn_layer_norm", mlp_out="final_layer_norm", norm="final_layer_norm"))
OPT_POST = replace(OPT, placement="post", final_norm=False, requires=(("layer_norm_elementwise_affine", True),))
_LAYOUTS = layout.Layouts({"opt": OPT, "opt_post": OPT_POST})


def from_config(c: Cfg) -> ArchSpec:
    name = "opt" if c.get("do_layer_norm_before", default=True) else "opt_post"
    s = layout.spec_from_config(_LAYOUTS.by_type[name], c)
    return replace(s, layout=name, positions=s.positions + OFFSET, embedding_size=c.int("word_embed_proj_dim", default=s.hidden))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's widths; hidden from the position table (embed_tokens is word_embed_proj_dim wide); post-norm layers
    where the decoder has no final norm (OPT-350m's), else pre-norm; head_dim assumed (neither shows in a tensor)."""
    name = "opt" if infer.has(T, r"(^|\.)decoder\.final_layer_norm\.weight$") else "opt_post"
    s = layout.spec_from_tensors(_LAYOUTS.by_type[name], T, common)
    h = infer.shape(T, r"decoder\.embed_positions\.weight$", "decoder.embed_positions")[1]
    a, note = infer.heads_for(h, 64 if h <= 2048 else 128)   # OPT-125m..1.3b: 64; 6.7b..66b: 128 (2.7b: 80)
    post = ("no config: post-norm layers assumed (no decoder.final_layer_norm: OPT-350m's layout)",) * (name == "opt_post")
    return replace(s, layout=name, hidden=h, embedding_size=s.hidden, heads=a, kv_heads=a, head_dim=h // a,
                   assumptions=(note, *post))


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=37, vocab_size=99,
              max_position_embeddings=64)

FAMILY = Family(
    name="opt",
    before=("llama",),   # tried before them: its layers.N.self_attn.q_proj names match llama's signature
    **{**layout.family_fields(_LAYOUTS.by_type, "attn_norm"), "model_types": ("opt",), "from_config": from_config,
       "from_tensors": from_tensors, "gguf_tensor_names": (),   # llama.cpp has no OPT architecture
       # the attention norm's path with its stack's name (XGLM's layers.N.self_attn_layer_norm has none)
       "signature": r"(^|[./])decoder[./]layers[./]\d+[./]self_attn_layer_norm[./]"},
    # an encoder-decoder without BART's layernorm_embedding (FSMT, Marian, Pegasus) shares its names, but has encoder
    # layers, and its *ForCausalLM (the decoder alone) cross-attention
    signature_without=r"(^|[./])(encoder[./]layers[./]\d+|decoder[./]layers[./]\d+[./]encoder_attn)[./]",
    position_offset={"opt": OFFSET},
    gguf_architectures=(),
    samples=(
        Sample("OPTConfig", _SIZES, ("OPTModel", "OPTForCausalLM", "OPTForQuestionAnswering")),
        # OPT-350m's layout: post-LayerNorm, no final norm, project_in / project_out
        Sample("OPTConfig", dict(_SIZES, word_embed_proj_dim=16, do_layer_norm_before=False, num_labels=3),
               ("OPTModel", "OPTForCausalLM", "OPTForSequenceClassification")),
        # (layer_norm_elementwise_affine=False is refused, the layout's `requires`: OPT's _init_weights fails on it)
        Sample("OPTConfig", dict(_SIZES, enable_bias=False, tie_word_embeddings=False), ("OPTForCausalLM",)),
    ),
)
