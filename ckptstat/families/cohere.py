"""Cohere (Command-R) and Cohere2 (Command R7B; transformers modeling_cohere.py, modeling_cohere2.py): LLaMA
layouts (layout.py) with one bias-free LayerNorm (input_layernorm) whose output feeds attention and the MLP in
parallel, no MLP bias, logits scaled by logit_scale (element-wise) and the LM head tied by default. Cohere2 slides
on the layers layer_types marks and applies rotary only on those. Cohere Compass's text decoder (modeling_cohere_compass.py
CohereCompassTextModel, its VL model's language model) is Cohere2's layer with rotary on the layer types
rope_parameters gives parameters (None: that type has none; a text forward's M-RoPE has the same position on every
axis, so it is plain rotary). Cohere's optional use_qk_norm (a LayerNorm over
each head's [heads, d], a weight shape the layout has no field for) has no op template: the meta path answers it."""
from __future__ import annotations

from dataclasses import replace

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout

# llama.cpp's command-r and cohere2 write no output tensor (they always read the LM head as the embedding)
COHERE = DecoderLayout(norm="layernorm_nobias", placement="parallel", mlp_bias=False, tied_default=True,
                       gguf_renames=(("output", None),), requires=(("use_qk_norm", False),), task_heads=("seqcls",))
COHERE2 = replace(COHERE, nope="global", requires=())
COHERE_COMPASS = replace(COHERE, nope="types", requires=())

_SIZES = dict(layout.TINY, pad_token_id=0)

FAMILY = Family(
    name="cohere",
    # its tensor names are LLaMA's less post_attention_layernorm: files without config.json read as llama
    **{**layout.family_fields({"cohere": COHERE, "cohere2": COHERE2, "cohere_compass_text": COHERE_COMPASS}, "attn_q"),
       "signature": r"(?!)"},
    gguf_architectures=("command-r", "cohere2"),
    samples=(
        Sample("CohereConfig", _SIZES, ("CohereModel", "CohereForCausalLM"), detected_as="llama"),
        Sample("CohereConfig", dict(_SIZES, attention_bias=True, tie_word_embeddings=False), ("CohereForCausalLM",),
               detected_as="llama"),
        Sample("Cohere2Config", dict(_SIZES, num_hidden_layers=4, sliding_window=4), ("Cohere2Model", "Cohere2ForCausalLM"),
               detected_as="llama"),
        Sample("CohereCompassTextConfig", dict(_SIZES, num_hidden_layers=4, sliding_window=4, layer_types=[
            "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"], rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 50000.0}, "full_attention": None}),
               ("CohereCompassTextModel", "CohereCompassForCausalLM"), detected_as="llama"),
        Sample("CohereCompassTextConfig", dict(_SIZES, attention_bias=True, tie_word_embeddings=False, layer_types=[
            "full_attention", "sliding_attention"], rope_parameters={
                "sliding_attention": None, "full_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
               ("CohereCompassForCausalLM",), detected_as="llama"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("CohereCompassTextConfig", dict(_SIZES, num_labels=3, layer_types=["full_attention", "sliding_attention"],
                                               rope_parameters={"sliding_attention": None, "full_attention": {
                                                   "rope_type": "default", "rope_theta": 10000.0}}),
               ("CohereCompassTextForSequenceClassification",), device="cpu", detected_as="llama"),
    ),
)
