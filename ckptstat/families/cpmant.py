"""CPM-Ant (transformers modeling_cpmant.py, configuration_cpmant.py): the LLaMA layout (layout.py) with
prompt_length prompt tokens prepended to every input (their rows after the vocabulary in input_embedding, whose
prompt_types x prompt_length extra rows the LM head lacks), a segment embedding added to the token embeddings and a
segment-relative position bias added to every score in place of rotary (`positions="segments"`: Segments), the
layers and the cache over the prompt and the input, the output without the prompt; pre-RMS-norm layers
(self_att.layernorm_before_attention, ffn.layernorm_before_ffn) of unbiased project_q/k/v (num_attention_heads x
dim_head) and attention_out, a gated GELU MLP ffn.ffn.w_in.w_0 (gate) / w_in.w_1 / w_out of dim_ff,
encoder.output_layernorm, and an LM head never tied (CpmAntForCausalLM._tied_weights_keys is empty, whatever
tie_word_embeddings says). llama.cpp has no architecture for it."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors, class_default
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import FFNWidth, Segments

CPMANT = DecoderLayout(
    positions="segments", ffn_width=FFNWidth("dim_ff"), activation="gelu", ties=False, qkv_bias=False, o_bias=False,
    mlp_bias=False,
    paths=Paths(body="cpmant", embed="input_embedding", layers="encoder.layers", attn="self_att.self_attention",
                q="project_q", k="project_k", v="project_v", o="attention_out", attn_in="self_att.layernorm_before_attention",
                mlp_in="ffn.layernorm_before_ffn", mlp="ffn.ffn", gate="w_in.w_0", up="w_in.w_1", down="w_out",
                norm="encoder.output_layernorm"))
_FIELDS = layout.family_fields({"cpmant": CPMANT}, "attn_q")


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(CPMANT, Cfg({**c.cfg, "head_dim": c.int("dim_head")}, c.path, c.model_type, c.head,
                                               c.common))
    prompt = c.int("prompt_length")
    rows = spec.vocab + c.int("prompt_types") * prompt
    return replace(spec, prefix_tokens=prompt,
                   variant=Segments(rows, c.int("segment_types"), c.int("position_bias_num_buckets")))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The shapes' sizes (the heads from the position bias' columns); the prompt's length, which no shape gives
    alone, the config class's default."""
    spec = _FIELDS["from_tensors"](T, common)
    rows, segments = spec.vocab, infer.shape(T, r"segment_embedding\.weight$", "segment_embedding")[0]
    bias = infer.shape(T, r"relative_attention_bias$", "position_bias.relative_attention_bias")
    prompt = int(class_default("cpmant", "prompt_length"))
    lm = infer.find(T, layout.pattern(CPMANT, "output"))
    vocab = lm.shape[0] if lm is not None else rows - int(class_default("cpmant", "prompt_types")) * prompt
    heads = bias[1]   # the position bias has a column per head: head_dim is the q width over it
    return replace(spec, vocab=vocab, heads=heads, kv_heads=heads, head_dim=spec.heads * spec.head_dim // heads,
                   prefix_tokens=prompt,
                   tied_embeddings=False, variant=Segments(rows, segments, bias[0] - segments ** 2),
                   assumptions=(f"no config: prompt_length assumed {prompt}, the config class's default",))


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, dim_head=8, dim_ff=37, vocab_size=99,
              prompt_length=3, prompt_types=3, segment_types=4, position_bias_num_buckets=16, position_bias_max_distance=32)

FAMILY = Family(
    name="cpmant",
    # encoder.layers.N.self_att.self_attention.project_q: no other family's
    **{**_FIELDS, "gguf_tensor_names": (), "from_config": from_config, "from_tensors": from_tensors},
    gguf_architectures=(),   # llama.cpp has no architecture for it: no GGUF names either
    samples=(
        Sample("CpmAntConfig", _SIZES, ("CpmAntModel", "CpmAntForCausalLM")),
        Sample("CpmAntConfig", dict(_SIZES, dim_head=16, prompt_length=5, tie_word_embeddings=False), ("CpmAntForCausalLM",)),
    ),
)
