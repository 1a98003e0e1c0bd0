"""Gemma 3n text (transformers modeling_gemma3n.py Gemma3nTextModel / Gemma3nForCausalLM, model_type gemma3n_text):
Gemma 4's text layers as families/gemma4.py walks them (sandwich norms, q/k and weightless v norms, attention scaled by
1.0, per-layer embeddings, KV-shared last layers), with one head_dim on every layer, each layer its own MLP width
(intermediate_size, a list), and no layer_scalar, plus:

* AltUp (Gemma3nTextAltUp): the stream is altup_num_inputs (K) streams, the embeddings and K - 1 projections of them
  (altup_projections), each layer predicting all K from the active one (router_norm, modality_router h -> K, tanh,
  prediction_coefs K -> K^2, a [h, K] x [K, K] matmul per token), running on the active stream and correcting the K
  (router_norm and modality_router again, correction_coefs K -> K), the active one scaled by correct_output_scale; the
  K - 1 projected back (altup_unembed_projections) and averaged before the final norm;
* LAuReL (Gemma3nTextLaurelBlock) beside the attention: linear_left h -> laurel_rank, linear_right back, its norm;
* activation sparsity (activation_sparsity_pattern): a Gaussian top-k cut of the MLP's gate, element-wise only.

The cache: DynamicCache(config), nothing for the KV-shared layers, s tokens on the others (sliding ones too: a view of
the last sliding_window - 1 keeps the whole forward's storage, base.SLIDING_HELD); gemma4.kv_cache's second line the
window's, what StaticCache and the cache after a decode step hold."""
from __future__ import annotations

from typing import Any

from ..errors import NoAnalyticModel, UsageError
from . import gemma4
from .framework import layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors


def from_config(c: Cfg) -> ArchSpec:
    L = c.int("num_hidden_layers")
    types = gemma4.layer_types(c, L, 5)   # Gemma3nTextConfig.__post_init__: every 5th layer full
    f = c.get("intermediate_size")
    widths = f if isinstance(f, list) else [f] * L
    if len(widths) != L or any(isinstance(x, bool) or not isinstance(x, int) or x <= 0 for x in widths):
        raise UsageError(f"{c.path}: config intermediate_size is not a positive integer or a list of {L} of them")
    if c.int("altup_active_idx", default=FROM_CLASS) >= c.int("altup_num_inputs", default=FROM_CLASS):
        raise UsageError(f"{c.path}: config altup_active_idx is not one of the altup_num_inputs streams")
    d, g = c.int("head_dim", default=FROM_CLASS), c.int("num_key_value_heads", default=FROM_CLASS)
    p = c.int("hidden_size_per_layer_input", default=FROM_CLASS)
    embedders = c.get("multimodal_embedders", default=None) or {}   # a wrapper's (families/wrappers.py EMBEDDERS)
    if not isinstance(embedders, dict) or any(isinstance(x, bool) or not isinstance(x, int) or x <= 0
                                              for x in embedders.values()):
        raise UsageError(f"{c.path}: a multimodal sub-config's hidden_size is not a positive integer")
    return gemma4.spec(c, types, widths[0], head_dims=(d,) * L, kv_heads=(g,) * L, widths=tuple(widths),
                       per_layer=p, per_layer_vocab=c.int("vocab_size_per_layer_input", default=FROM_CLASS),
                       altup=c.int("altup_num_inputs", default=FROM_CLASS), laurel=c.int("laurel_rank", default=FROM_CLASS),
                       altup_scale=bool(c.get("altup_correct_scale", default=FROM_CLASS)), layer_scalar=False,
                       embedders=tuple(embedders.items()))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    raise NoAnalyticModel("Gemma 3n without config.json: its windows, KV sharing and AltUp are config-only")


_SIZES = dict(vocab_size=97, hidden_size=16, intermediate_size=[24, 32, 24, 40], num_hidden_layers=4, num_attention_heads=2,
              num_key_value_heads=1, head_dim=8, vocab_size_per_layer_input=50, hidden_size_per_layer_input=4,
              laurel_rank=3, altup_num_inputs=3, num_kv_shared_layers=2, sliding_window=4,
              layer_types=["sliding_attention", "full_attention"] * 2, activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0])

FAMILY = Family(
    name="gemma3n",
    model_types=("gemma3n_text",),
    signature=gemma4.ALTUP,
    before=("gemma", "llama", "olmo", "qwen3"),   # its files hold Gemma3's pre_feedforward_layernorm and q_norm too
    from_config=from_config, from_tensors=from_tensors, build=gemma4.build, expected_tensors=gemma4.expected_tensors,
    **{**layout.decoder_lm(gemma4.LAYOUT), "kv_cache": gemma4.kv_cache},
    gguf_architectures=("gemma3n",),
    gguf_tensor_names=gemma4.gguf_tensor_names(gemma4.modules(per_layer=2, per_layer_vocab=8, altup=2, laurel=2,
                                                              layer_scalar=False)),
    samples=(
        Sample("Gemma3nTextConfig", _SIZES, ("Gemma3nTextModel", "Gemma3nForCausalLM"), device="cpu", infer=False),
        Sample("Gemma3nTextConfig", dict(_SIZES, intermediate_size=24, num_kv_shared_layers=0, tie_word_embeddings=False,
                                         altup_correct_scale=False),
               ("Gemma3nForCausalLM",), device="cpu", infer=False),
    ),
)
