"""Mistral's and Meta's own folders: `consolidated.safetensors` (Mistral, mistral_inference) or `consolidated.00.pth`
(Meta's `original/` folder) beside `params.json`, the model's description in their own keys, and no config.json.

Where no config.json is beside the weights, `params.json` is read as the transformers config its converters write
from it (docs/formats.md "Mistral's and Meta's own folders"), so the analytic model (FLOPs, memory, plan) has one:

- Mistral (a `hidden_dim` key): transformers' convert_mistral_weights_to_hf.py `convert_config` and vLLM's
  `adapt_config_dict` (dim -> hidden_size, n_layers, n_heads, n_kv_heads, hidden_dim -> intermediate_size,
  head_dim, norm_eps -> rms_norm_eps, rope_theta, sliding_window, tied_embeddings, max_seq_len); a `moe` of plain
  routed experts (num_experts, num_experts_per_tok) is Mixtral.
- Meta Llama (no `hidden_dim`): convert_llama_weights_to_hf.py, intermediate_size from dim, ffn_dim_multiplier and
  multiple_of (`compute_intermediate_size`).

What those converters read another way (multimodal, MLA, shared experts, Mamba, quantisation records, a sliding
window per layer) is no config: the weights are still counted, by their names, with a note saying why."""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from ..core import Checkpoint, urls

PARAMS = "params.json"
# what Mistral's and Meta's weights files are, and their names: params.json is looked for beside these alone
WEIGHTS_FORMATS, WEIGHTS_NAME = ("safetensors", "safetensors (sharded)", "pytorch (zip)"), "consolidated"
# keys of a params.json the converters turn into another architecture than plain Llama / Mistral / Mixtral
_OTHER = {"vision_encoder": "a vision encoder", "multimodal": "a vision or audio encoder", "vision_args": "a vision "
          "encoder (Llama 4)", "moe_args": "Llama 4's experts", "qk_nope_head_dim": "multi-head latent attention",
          "q_lora_rank": "multi-head latent attention", "kv_lora_rank": "multi-head latent attention",
          "quantization": "a quantisation record", "lora": "a LoRA description"}
_PLAIN_MOE = {"num_experts", "num_experts_per_tok"}
_READS = ("tok_embeddings.weight", "output.weight")
RANK = re.compile(r"^consolidated\.(\d{2})\.pth$")   # Meta's model-parallel files, one a rank


def find_params(weights_path: str) -> str | None:
    """The params.json beside the weights (a file or a folder), if any."""
    from .configs import beside

    return beside(weights_path, PARAMS)


def take(ckpt: Checkpoint, path: str) -> None:
    """No config.json beside the weights at `path`: the params.json there, if any, as the checkpoint's config
    (configs.take_config: `describe`); one that cannot be read is noted (another tool's file so named)."""
    from ..core.files import check_inside
    from ..errors import CheckpointError
    from .configs import load_config, take_config

    native = ckpt.format in WEIGHTS_FORMATS and any(urls.file_name(f).startswith(WEIGHTS_NAME) for f in ckpt.files)
    found = find_params(path) if native else None   # (no look-up, no request, beside any other file)
    if found is None:
        return
    rank = RANK.match(urls.file_name(path)) if not urls.is_url(path) else None
    if rank and os.path.exists(os.path.join(os.path.dirname(path), "consolidated.01.pth")):
        ckpt.notes.append(f"{urls.file_name(path)} is one of Meta's model-parallel files, a slice of every weight: "
                          f"{PARAMS} describes the whole model, not read as this file's config (open the folder "
                          "for the model: formats/model_parallel.py)")
        return
    check_inside(found, PARAMS, path)
    try:
        cfg = load_config(found)
    except CheckpointError as e:
        ckpt.notes.append(f"{e}; ignored")
        return
    take_config(ckpt, found, cfg)


def is_params(path: str, cfg: dict[str, Any]) -> bool:
    """A params.json (by name, with no model_type: a transformers config so named is read as one)."""
    return urls.file_name(path) == PARAMS and "model_type" not in cfg


def describe(ckpt: Checkpoint, params: Any) -> dict[str, Any] | None:
    """The transformers config `params` reads as (transformers_config), or None; a note either way."""
    cfg, how = transformers_config(params, {n: t.shape for n, t in ckpt.tensors.items() if n in _READS})
    ckpt.notes.append(f"{PARAMS}: {how}")
    return cfg


def _int(p: dict[str, Any], key: str) -> int | None:
    v = p.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def llama_intermediate_size(dim: int, multiplier: float = 1, multiple_of: int = 256) -> int:
    """Meta Llama's feed-forward width (llama's FeedForward; convert_llama_weights_to_hf.py)."""
    return multiple_of * ((int(multiplier * int(8 * dim / 3)) + multiple_of - 1) // multiple_of)


def transformers_config(params: Any, shapes: Mapping[str, tuple[int, ...]]) -> tuple[dict[str, Any] | None, str]:
    """(the transformers config params.json converts to, or None; what was done), `shapes` the weights' _READS
    tensors' (a vocabulary size of -1, Llama 1 and 2's, is the embedding's rows; no output.weight is a tied head)."""
    p = params.get("model", params) if isinstance(params, dict) else None   # (Meta's converter reads a nested "model")
    if not isinstance(p, dict) or not all(_int(p, k) for k in ("dim", "n_layers", "n_heads")):
        return None, "not a Mistral or Meta model description (no dim, n_layers and n_heads); ignored"
    other = [why for key, why in _OTHER.items() if p.get(key)]
    moe = p.get("moe")
    if moe and (not isinstance(moe, dict) or set(moe) - _PLAIN_MOE):
        other.append("experts beyond plain routed ones (shared experts, groups)")
    window = p.get("sliding_window")
    if window is not None and not (isinstance(window, int) and not isinstance(window, bool)):
        other.append("a sliding window per layer")
    if other:
        return None, (f"describes {', '.join(dict.fromkeys(other))}, which ckptstat does not convert: no analytic "
                      "model (the weights are counted by their names)")
    dim, heads = _int(p, "dim"), _int(p, "n_heads")
    assert dim is not None and heads is not None
    cfg: dict[str, Any] = {
        "hidden_size": dim, "num_hidden_layers": p["n_layers"], "num_attention_heads": heads,
        "num_key_value_heads": _int(p, "n_kv_heads") or heads, "head_dim": _int(p, "head_dim") or dim // heads,
        "rms_norm_eps": p.get("norm_eps", 1e-5), "rope_theta": p.get("rope_theta", 10000.0),
        "tie_word_embeddings": bool(p.get("tied_embeddings", "output.weight" not in shapes)),
    }
    vocab = _int(p, "vocab_size") or (shapes.get("tok_embeddings.weight") or (None,))[0]
    if vocab:
        cfg["vocab_size"] = vocab
    if isinstance(p.get("max_seq_len"), int):
        cfg["max_position_embeddings"] = p["max_seq_len"]
    if "hidden_dim" in p:
        if _int(p, "hidden_dim") is None:
            return None, "hidden_dim is not a positive integer; ignored"
        cfg["intermediate_size"] = p["hidden_dim"]
        if isinstance(window, int):
            cfg["sliding_window"] = window
        if moe:
            cfg.update(model_type="mixtral", architectures=["MixtralForCausalLM"],
                       num_local_experts=moe.get("num_experts"), num_experts_per_tok=moe.get("num_experts_per_tok"))
            return cfg, "read as Mixtral's config (transformers' and vLLM's Mistral converters)"
        cfg.update(model_type="mistral", architectures=["MistralForCausalLM"])
        return cfg, "read as Mistral's config (transformers' and vLLM's Mistral converters)"
    multiplier, multiple_of = p.get("ffn_dim_multiplier", 1), p.get("multiple_of", 256)
    if not isinstance(multiplier, (int, float)) or isinstance(multiplier, bool) or _int(p, "multiple_of") is None \
            and "multiple_of" in p:
        return None, "ffn_dim_multiplier or multiple_of is not a number; ignored"
    cfg.update(model_type="llama", architectures=["LlamaForCausalLM"],
               intermediate_size=llama_intermediate_size(dim, multiplier, multiple_of))
    return cfg, ("read as Llama's config (transformers' convert_llama_weights_to_hf.py: intermediate_size from dim, "
                 "ffn_dim_multiplier and multiple_of)")
