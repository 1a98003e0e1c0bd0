"""Audit ckptstat's counts on tiny transformers models of every architecture the installed transformers
maps (docs/ties.md, "The wide audit"). Runnable by hand:

    python tests/census_audit.py                      # base models and the common heads
    python tests/census_audit.py --mappings all       # every MODEL_*_MAPPING_NAMES
    python tests/census_audit.py --only llama,bert    # some model types
    python tests/census_audit.py --json /tmp/audit.json

For each (config class, model class) of transformers' auto mappings: a tiny config (`tiny_config`: every
size-like attribute shrunk, nested sub-configs likewise), the model built on CPU under a time budget
(`--fork`: each in a forked child; skipped, with the reason, when it fails, is slow or stays large), saved by
`save_pretrained` (safetensors) and by `torch.save(state_dict)`, and ckptstat's unique parameter count,
buffer elements, tie groups and family compared with the model object's own. tests/test_real_saves_wide.py
runs the same comparison on a fixed set of architectures that build fast.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Iterator
from typing import Any

HIDDEN, FFN, SMALL = 16, 24, 8
# name -> (largest value kept); a value is only ever shrunk, never grown
INT_RULES: list[tuple[re.Pattern[str], int]] = [(re.compile(p), v) for p, v in [
    (r"^(hidden_size|d_model|n_embd|n_embed|embed_dim|dim|word_embed_proj_dim|d_embed|embedding_dim|text_embed_dim"
     r"|vision_embed_dim|hidden_dim_model|model_dim|width)$", HIDDEN),
    (r"^(intermediate_size|ffn_dim|encoder_ffn_dim|decoder_ffn_dim|d_ff|n_inner|hidden_dim|moe_intermediate_size"
     r"|shared_expert_intermediate_size|d_inner|ffn_hidden_size|decoder_intermediate_size|expert_intermediate_size"
     r"|intermediate_size_mlp|feed_forward_proj_dim|encoder_intermediate_size|mlp_dim|ff_dim|dense_dim"
     r"|time_step_rank|linear_units|ssm_intermediate_size)$", FFN),
    (r"^(num_hidden_layers|num_layers|n_layer|n_layers|encoder_layers|decoder_layers|num_decoder_layers"
     r"|num_encoder_layers|decoder_num_layers|encoder_num_layers|num_text_layers|num_vision_layers|depth"
     r"|num_blocks|num_hidden_groups_layers|n_blocks|num_stacks)$", 2),
    (r"^(num_attention_heads|n_head|n_heads|num_heads|encoder_attention_heads|decoder_attention_heads"
     r"|decoder_num_attention_heads|encoder_num_attention_heads|num_query_heads|attention_heads)$", 2),
    (r"^(num_key_value_heads|n_kv_heads|num_kv_heads|multi_query_group_num|num_kv_groups)$", 1),
    (r"^vocab_size$", 97),
    (r"^(head_dim|d_kv|kv_channels|qk_rope_head_dim|qk_nope_head_dim|v_head_dim|attention_head_size|d_head"
     r"|kv_lora_rank|q_lora_rank|attention_head_dim|dim_head|key_value_proj_dim|rotary_dim)$", SMALL),
    (r"^(max_position_embeddings|n_positions|max_source_positions|max_target_positions|n_ctx|max_seq_len"
     r"|max_sequence_length|seq_length|max_length_positions)$", 64),
    (r"^(num_experts|num_local_experts|n_routed_experts|moe_num_experts|num_experts_total|n_experts)$", 3),
    (r"^(num_experts_per_tok|moe_topk|num_selected_experts|moe_k|num_experts_per_token)$", 2),
    (r"^(n_shared_experts|num_shared_experts|n_group|topk_group)$", 1),
    (r"^(embedding_size|projection_dim|proj_dim|codevector_dim|proj_codevector_dim|classifier_proj_size"
     r"|xvector_output_dim|num_codevectors_per_group|output_hidden_size|adapter_size|bottleneck_dim"
     r"|lora_rank|num_conv_pos_embeddings|mm_hidden_size|state_size|d_state|ssm_state_size)$", SMALL),
    (r"^(num_conv_pos_embedding_groups)$", 2),
    (r"^(num_labels)$", 3),
]]
# generic fallback: an int attribute named like a width, larger than this, is shrunk to HIDDEN
WIDTH_NAME = re.compile(r"(dim|hidden|_size|channels|units|features|width)s?$")
KEEP = re.compile(r"^(image_size|patch_size|num_channels|num_mel_bins|sampling_rate|max_length|min_length|hop_length"
                  r"|sliding_window|window_size|chunk_size|n_fft|win_length|sample_rate|audio_channels|spatial_merge_size"
                  r"|temporal_patch_size|input_size|feature_size|conv_kernel|kernel_size|stride|num_frames|tubelet_size"
                  r"|.*_token_id|.*_token_index|.*_id|.*_ids|.*_idx|.*_index|.*_len|type_vocab_size|num_buckets"
                  r"|relative_attention_num_buckets|relative_attention_max_distance|max_relative_positions|.*_stride"
                  r"|.*_kernel.*|.*image_size.*|.*patch_size.*|.*_ratio.*|.*rope.*|.*_theta|.*_factor|block_size"
                  r"|attention_window|local_attention|axial_pos_.*|.*bins|mel_.*|.*_frames)$")
LIST_WIDTHS = re.compile(r"^(hidden_sizes|embed_dims|conv_dim|neck_hidden_sizes|embed_dim|dims|channels|widths"
                         r"|encoder_hidden_sizes|hidden_dims|block_out_channels|out_channels|tdnn_dim)$")
LIST_ONES = re.compile(r"^(depths|num_layers|layers|num_blocks|encoder_layers|block_layers|num_hidden_layers)$")
LIST_HEADS = re.compile(r"^(num_heads|num_attention_heads|heads|attention_heads|encoder_attention_heads)$")


def _small_token(key: str, value: Any, used: list[int]) -> Any:
    """Token ids at or past the small vocabulary move inside it (pad 0, bos 1, eos 2, others from 96 down)."""
    if isinstance(value, list):
        return [_small_token(key, v, used) for v in value]
    if not isinstance(value, int) or isinstance(value, bool) or value < 97:
        return value
    fixed = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1}
    if key in fixed:
        return fixed[key]
    used.append(96 - len(used))
    return used[-1]


def shrink(cfg: Any, used: list[int] | None = None) -> dict[str, Any]:
    """The overrides that make `cfg` (a PretrainedConfig instance of defaults) tiny: {key: value}, with a
    nested sub-config given as a dict of its own overrides plus its model_type."""
    from transformers import PretrainedConfig

    used = [] if used is None else used
    out: dict[str, Any] = {}
    for key, value in vars(cfg).items():
        if key.startswith("_") or key in ("architectures", "transformers_version", "torch_dtype", "dtype"):
            continue
        if isinstance(value, PretrainedConfig):
            sub = shrink(value, used)
            out[key] = {"model_type": value.model_type, **sub} if getattr(value, "model_type", "") else sub
            continue
        if isinstance(value, dict) and key.endswith("_config") and value:
            try:   # a sub-config kept as a dict (model_type names its class)
                from transformers import AutoConfig
                sub_cfg = AutoConfig.for_model(**value) if "model_type" in value else None
            except Exception:
                sub_cfg = None
            if sub_cfg is not None:
                out[key] = {**value, **shrink(sub_cfg, used)}
            continue
        if key.endswith(("_token_id", "_token_index", "token_id")):
            new = _small_token(key, value, used)
            if new != value:
                out[key] = new
            continue
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            new = _int_rule(key, value)
            if new is not None and new < value:
                out[key] = new
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            if LIST_WIDTHS.match(key):
                out[key] = [min(v, HIDDEN * 2 ** i) for i, v in enumerate(value)]
            elif LIST_ONES.match(key):
                out[key] = [1 for _ in value]
            elif LIST_HEADS.match(key):
                out[key] = [min(v, 2) for v in value]
    return out


def _int_rule(key: str, value: int) -> int | None:
    for pattern, limit in INT_RULES:
        if pattern.match(key):
            return limit
    if WIDTH_NAME.search(key) and not KEEP.match(key) and value > 64:
        return HIDDEN
    return None


def _unset(cfg: Any, over: dict[str, Any]) -> dict[str, Any]:
    """Sizes a config class leaves None for the checkpoint to give, which its model cannot be built without: Dots1's
    routed experts (n_routed_experts, num_experts_per_tok, n_shared_experts), HunYuan's head_dim (hidden / heads, what
    the classes that derive it derive), LFM2-MoE's layer_types (conv and attention layers alternating), Nemotron's
    num_key_value_heads (None means one per query head), a latent-attention model's (as many as query heads);
    and GPT-Neo's attention_types, which must cover num_layers."""
    unset = {k for k, v in vars(cfg).items() if v is None}
    out: dict[str, Any] = {}
    if "n_routed_experts" in unset:
        out.update(n_routed_experts=4, **{k: v for k, v in (("num_experts_per_tok", 2), ("n_shared_experts", 1)) if k in unset})
    if "head_dim" in unset and isinstance(h := over.get("hidden_size", getattr(cfg, "hidden_size", None)), int) \
            and isinstance(a := over.get("num_attention_heads", getattr(cfg, "num_attention_heads", None)), int) and a:
        out["head_dim"] = h // a
    if "layer_types" in unset and cfg.model_type == "lfm2_moe":
        L = over.get("num_hidden_layers", cfg.num_hidden_layers)
        out["layer_types"] = ["conv" if i % 2 == 0 else "full_attention" for i in range(L)]
    if "num_key_value_heads" in unset and isinstance(a := over.get("num_attention_heads"), int):
        out["num_key_value_heads"] = a
    # latent attention (MLA) expands keys and values to every query head and repeats none: as many kv heads as query
    # heads, as every MLA config class's defaults have (MiniCPM3, DeepSeek)
    if "kv_lora_rank" in vars(cfg) and isinstance(over.get("num_attention_heads"), int):
        out["num_key_value_heads"] = over["num_attention_heads"]
    if cfg.model_type == "gpt_neo" and "num_layers" in over:
        out["attention_types"] = [[["global", "local"], over["num_layers"] // 2]]
    return out


# hybrid models at two layers: one of each layer kind (a cache of only linear-attention layers has no
# get_seq_length, which transformers' masks call), and the SSM head counts that divide the tiny width
HYBRID: dict[str, dict[str, Any]] = {
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "mamba_dt_rank": SMALL},
    "bamba": {"attn_layer_indices": [1], "mamba_n_heads": 4, "mamba_d_head": SMALL, "mamba_d_state": SMALL},
    "granitemoehybrid": {"layer_types": ["mamba", "attention"], "mamba_n_heads": 4, "mamba_d_head": SMALL,
                         "mamba_d_state": SMALL, "mamba_chunk_size": 16},
    "mamba2": {"num_heads": 4, "head_dim": SMALL, "n_groups": 1, "chunk_size": 16},
    # two hybrid layers: their shared transformer is tied (the tie table's rule, fixtures/make_tie_table.py)
    "zamba2": {"num_hidden_layers": 3, "layers_block_type": ["hybrid", "mamba", "hybrid"], "n_mamba_heads": 2,
               "mamba_headdim": HIDDEN,
               "attention_hidden_size": 2 * HIDDEN,
               "mamba_d_state": SMALL, "chunk_size": 16},
    "qwen3_next": {"layer_types": ["linear_attention", "full_attention"]},
    "qwen3_5_text": {"layer_types": ["linear_attention", "full_attention"]},
    "qwen3_5_moe_text": {"layer_types": ["linear_attention", "full_attention"]},
    "kimi_linear": {"layer_types": ["linear_attention", "full_attention"], "mlp_layer_types": ["dense", "sparse"],
                    "num_key_value_heads": 2},   # MLA: its keys and values expand to every head
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},
}


# what the shrunk class defaults cannot build or run, set as the released configs have it (by model_type; a nested
# sub-config of that model_type takes it too)
SHAPED: dict[str, dict[str, Any]] = {
    # DBRX's attn_config carries rope_theta (DbrxAttention reads it; the class has no default), as databricks/dbrx's does
    "dbrx": {"attn_config": {"kv_n_heads": 1, "clip_qkv": 8, "rope_theta": 500000}},
    # DeepSeek-V2's class leaves top-k unset (DeepSeek-V2-Lite's greedy router picks 6 of 64)
    "deepseek_v2": {"num_experts_per_tok": 2},
    # the released DeepSeek-V3's first_k_dense_replace dense layers, then MoE ones (3 of 61): at two layers, one of each
    # (all-dense, its names are MiniCPM3's)
    "deepseek_v3": {"first_k_dense_replace": 1},
    # the differential attention splits the values along the kv heads: an even number of them
    "diffllama": {"num_key_value_heads": 2},
    # the class's layer pattern (mamba, mamba, hybrid, ...) needs three layers; two hybrid layers share the
    # transformer block, as Zyphra/Zamba-7B's do
    # transformer block on the embeddings concatenated to the hidden states (attention_hidden_size twice the width,
    # as Zyphra/Zamba-7B's 7424 of 3712, its heads 7424 / 16 wide)
    "zamba": {"num_hidden_layers": 4, "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"],
              "attention_hidden_size": 2 * HIDDEN, "attention_head_dim": HIDDEN},
    # the last num_kv_shared_layers reuse the cache of an earlier layer of each kind (google/gemma-3n-E2B: 30 layers,
    # sliding and full, the last 10 shared)
    "gemma3n_text": {"num_hidden_layers": 4, "num_kv_shared_layers": 2,
                     "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]},
    # every layer kind: sliding, CSA and HCA attention; a hash-routed MoE (tid2eid, a buffer) then score-routed ones
    # (the router's bias, saved as ffn.gate.bias, a buffer); the class's default at two layers is two HCA, two hash
    "deepseek_v4": {"num_hidden_layers": 3,
                    "layer_types": ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"],
                    "mlp_layer_types": ["hash_moe", "moe", "moe"]},
    # a dense layer, then a sparse one (the MoE's router_bias, a buffer); the class's default is three dense first
    "step3p5": {"mlp_layer_types": ["dense", "sparse"], "layer_types": ["full_attention", "sliding_attention"]},
    # Step3p7's language model is Step 3.5's class, whose window it leaves unset (its sliding layers need one)
    "step3p7": {"text_config": {"sliding_window": 512}},
    # Mistral 4 rotates the latent attention's rope part by head_dim x partial_rotary_factor (mistralai's 128 x 0.5 =
    # its qk_rope_head_dim, 64): a head twice the tiny rope part
    "mistral4": {"head_dim": 2 * SMALL},
    # DeepSeek-OCR 2's language model: a dense layer, then a routed one (the class leaves the list and top-k unset)
    "deepseek_ocr2_text": {"mlp_layer_types": ["dense", "sparse"], "num_experts_per_tok": 2},
    # HunYuan-VL rotates by 4 position rows (tencent/HunyuanOCR's sections of 16 each over a 128 head), which the
    # class's rope_parameters leave out: four of the tiny head's half
    "hunyuan_vl_text": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 1, 1]}},
    # ESM's class leaves the vocabulary and its padding unset (ESM-2's releases: 33 tokens, <pad> 1); ESM C has no
    # grouped-query attention
    "esm": {"vocab_size": 33, "pad_token_id": 1},
    "esmc": {"num_key_value_heads": 2},
    # Qwen2.5-Omni's thinker computes its M-RoPE positions from the tokens by its vision-start id, which the class
    # leaves out (Qwen/Qwen2.5-Omni-7B's 151652): one inside the tiny vocabulary
    "qwen2_5_omni_thinker": {"vision_start_token_id": 90},
    # the VQ-GAN image tokenizers' GroupNorms have 32 groups (Janus', Emu3's, Chameleon's): channels of 32, not the tiny 16
    "janus_vqgan": {"base_channels": 32, "embed_dim": 32},
    "emu3_vqgan": {"base_channels": 32, "embed_dim": 32},
    "chameleon_vqgan": {"base_channels": 32, "embed_dim": 32},
    # Emu3 and Chameleon map image tokens through the tokenizer's vocabulary_map (their classes hold none): the image
    # and end-of-line tokens inside the tiny vocabulary
    "emu3": {"vocabulary_map": {"<image>": 90, "<|extra_200|>": 91}},
    "chameleon": {"vocabulary_map": {"<image>": 90}},
    # Molmo2's adapter reads the vision tower's layers [24, 18] (its class's default, for the released 25): the tiny
    # tower's last two
    "molmo2_adapter": {"vision_feature_layer": [-1, -2]},
    # Granite 4 Vision injects vision layers' features into language layers ([vision, LLM] pairs) through Q-Former
    # windows ("1/4" as ibm-granite's), both left unset by the class, and samples the tiny towers' layers for its
    # spatial groups; its Q-Former has a head per 64 of the vision tower's width
    "granite4_vision": {"deepstack_layer_map": [[0, 0], [1, 1]], "spatial_target_layers": [0, 1, 0, 1],
                        "downsample_rate": "1/4", "vision_config": {"hidden_size": 64}},
    # the axial position embeddings' widths sum to hidden_size and their shape multiplies to max_position_embeddings
    # (google/reformer-crime-and-punishment's [64, 192] of 256, [512, 1024]); is_decoder stays the class's (False:
    # ReformerForMaskedLM's), coverage_walk.DECODERS sets it for ReformerModelWithLMHead
    "reformer": {"attn_layers": ["local", "lsh"], "axial_pos_embds_dim": [8, 8],
                 "axial_pos_shape": [8, 8]},
    # X-MOD routes each token through its language's adapter: a default language (facebook/xmod-base's en_XX)
    "xmod": {"default_language": "en_XX"},
    # one linear-attention and one attention layer (a cache of only linear layers has no get_seq_length)
    "bailing_hybrid": {"layer_types": ["linear_attention", "full_attention"]},
    # its attention layers are indexed (QSA): the indexer's sizes, which the class leaves unset
    "qwen4_exp_text": {"layer_types": ["linear_attention", "indexed_attention"], "indexer_n_heads": 2,
                       "indexer_kv_heads": 1, "indexer_head_dim": SMALL, "indexer_budget": 4, "indexer_compress_ratio": 2},
    # input, looped and output layers that add up to the layers (the released Dory's 8 + 20 + 8 of 36); the class's
    # defaults left alone give the looped block a negative count at two layers
    "dory": {"num_hidden_layers": 4, "n_input_layers": 1, "n_recurrent_layers": 2, "n_output_layers": 1},
    # rotary parameters per layer type (the rotary embedding reads rope_parameters[layer_type], None for a layer
    # without; the class's default, {}, names none): sliding layers rotate, full-attention layers do not
    "cohere_compass_text": {"layer_types": ["sliding_attention", "full_attention"],
                            "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 50000.0},
                                                "full_attention": None}},
    # the cache's states round the qk and v widths up to multiples of 64 and the layers do not: widths that are
    # multiples (NX-AI/xLSTM-7b's 4096)
    "xlstm": {"hidden_size": 128, "embedding_dim": 128},
}


def _shaped(model_type: str, over: dict[str, Any]) -> None:
    """Apply SHAPED's entry for `model_type` to `over`, and to each nested sub-config's overrides by its model_type."""
    for key, fix in SHAPED.get(model_type, {}).items():
        over[key] = {**over[key], **fix} if isinstance(fix, dict) and isinstance(over.get(key), dict) else fix
    for value in over.values():
        if isinstance(value, dict) and value.get("model_type") in SHAPED:
            _shaped(value["model_type"], value)


def tiny_config(cfg_cls: Any) -> Any:
    """A tiny instance of a transformers config class (class defaults, every size-like attribute shrunk)."""
    model_type = getattr(cfg_cls, "model_type", "")
    defaults = cfg_cls()
    over = shrink(defaults)
    _complete(defaults, over)
    _shaped(model_type, over)
    try:
        cfg = cfg_cls(**over)
    except Exception:   # some composite configs take their sub-configs as objects, not dicts
        from transformers import AutoConfig
        fixed = {k: (AutoConfig.for_model(**v) if isinstance(v, dict) and "model_type" in v else v) for k, v in over.items()}
        cfg = cfg_cls(**fixed)
    return cfg


def _complete(defaults: Any, over: dict[str, Any]) -> None:
    """Add to `over` the sizes `defaults` leaves unset (_unset) and its HYBRID layers, and so for each nested
    sub-config (a vision-language model's text_config: a latent-attention or hybrid language model), which also keeps
    the scalars the outer class sets apart from its sub-config class's defaults (PaliGemma's Gemma with one kv head:
    the overrides alone would build Gemma's 16)."""
    from transformers import PretrainedConfig

    over.update(_unset(defaults, over))
    over.update(HYBRID.get(getattr(defaults, "model_type", ""), {}))
    _fit_mrope(defaults, over)
    for key, value in vars(defaults).items():
        if isinstance(value, PretrainedConfig) and isinstance(over.get(key), dict):
            for k, v in value.to_diff_dict().items():
                if isinstance(v, (int, float, str)) and k not in over[key] and k not in (
                        "transformers_version", "torch_dtype", "dtype"):   # scalars: a layer list is sized for the default depth
                    over[key][k] = v
            _complete(value, over[key])


def _fit_mrope(defaults: Any, over: dict[str, Any]) -> None:
    """A config whose model rotates by multimodal RoPE (sections in its rope_parameters, or a default its modeling
    source reads, sized for the released head width): sections in the same proportions (time, height, width) that add
    up to half the tiny head's rotary width (of `qk_rope_head_dim` under latent attention), as the released configs'
    do, in `over`."""
    import importlib
    import inspect

    rope = getattr(defaults, "rope_parameters", None)
    if not isinstance(rope, dict) or not rope or any(isinstance(v, dict) for v in rope.values()):   # (or per layer type)
        return
    weights = rope.get("mrope_section")
    if weights is None:
        try:
            modeling = type(defaults).__module__.replace(".configuration_", ".modeling_")
            source = inspect.getsource(importlib.import_module(modeling))
        except (ImportError, OSError):
            return
        default = re.search(r'get\("mrope_section", \[([\d, ]+)\]\)', source)
        if default is None:
            return
        weights = [int(v) for v in default.group(1).split(",")]

    def size(key: str) -> Any:
        return over.get(key, getattr(defaults, key, None))

    if size("qk_rope_head_dim"):
        rotary = size("qk_rope_head_dim")
    else:
        rotary = int((size("head_dim") or size("hidden_size") // size("num_attention_heads"))
                     * (rope.get("partial_rotary_factor") or size("partial_rotary_factor") or 1.0))
    half = rotary // 2
    sections = [half * w // sum(weights) for w in weights]
    for i in range(half - sum(sections)):   # the remainder to the first sections
        sections[i % len(sections)] += 1
    over["rope_parameters"] = {**rope, **over.get("rope_parameters", {}), "mrope_section": sections}


def report_ties(report: dict[str, Any]) -> set[frozenset[str]]:
    """The tie groups of a `ties` report (analysis.ties.audit), each its stored target and its aliases."""
    groups: dict[str, set[str]] = {}
    for t in report["ties"]:
        groups.setdefault(t["target"], {t["target"]}).add(t["alias"])
    return {frozenset(g) for g in groups.values()}


def report_rows(report: dict[str, Any]) -> dict[str, int]:
    """A `ties` report's counting rows by convention: 'unique parameters', 'model.parameters()', ..."""
    return {r["convention"].split(" of ")[0]: r["params"] for r in report["counting"]["rows"]}


def model_oracle(model: Any) -> dict[str, Any]:
    """What the model object says: unique parameters, persistent buffer elements, tie groups."""
    params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    # a buffer one module registers under two names (SAM's positional_embedding) is one storage, counted once
    buffers = {(b.data_ptr(), tuple(b.shape), b.stride()): b.numel() for n, b in model.state_dict().items()
               if n not in params and b.numel()}
    return {"params": sum(p.numel() for p in model.parameters()), "buffers": sum(buffers.values()),
            "ties": state_dict_ties(model)}


def state_dict_ties(model: Any) -> set[frozenset[str]]:
    """Names of the state_dict over one storage and view: tied parameters (as test_real_saves'
    _tie_groups_of_model finds them) and persistent buffers one module registers under two names."""
    by_view: dict[tuple[int, tuple[int, ...], tuple[int, ...]], set[str]] = {}
    for name, t in model.state_dict().items():
        if t.numel():
            by_view.setdefault((t.data_ptr(), tuple(t.shape), t.stride()), set()).add(name)
    return {frozenset(g) for g in by_view.values() if len(g) > 1}


def reported(path: str) -> dict[str, Any]:
    """What ckptstat says about a save: unique parameters, buffer elements, tie groups, family, model."""
    from test_real_saves import _tie_groups_reported

    from ckptstat import open_checkpoint, summarize

    r = summarize(open_checkpoint(path))
    roles = {row["role"]: row["elements"] for row in r["non_parameters"]}
    # model.parameters(): the file's unique count, or where the class config.json names recreates or resizes
    # parameters on load (Marian, Inkling2: families/load_table.py), the summary's count for the class
    on_load = r["parameters"]["on_load"]
    return {"params": on_load["params"] if on_load else r["parameters"]["unique"], "buffers": roles.get("buffer", 0),
            "other_roles": {k: v for k, v in roles.items() if k != "buffer"},
            "ties": _tie_groups_reported(path),
            "family": r["resolved"]["family"], "model": r["resolved"]["model"]}


def _reverted(model: Any, buffers: bool = True, tied: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the model's state_dict keys, each a tensor object of its own, tied names included; what save_pretrained
    writes for them): transformers 5 saves the original layout (modeling_utils.save_pretrained:
    `revert_weight_conversion`, which undoes the conversion mapping: renamed modules such as ViT's
    `layers.N.attention.q_proj`, fused experts split back into one tensor per expert). tied False: each tied
    group under the one name save_pretrained keeps (its `remove_tied_weights_from_state_dict`: the name that is not
    a `_tied_weights_keys` target, whatever the modules' order; XLM-R's MLM head is registered before `roberta`)."""
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    keys = set(model.state_dict())
    named = [*model.named_parameters(remove_duplicate=False), *(model.named_buffers(remove_duplicate=False) if buffers else ())]
    state = {n: t.detach().view(t.shape) for n, t in named if n in keys}
    kept = state if tied else remove_tied_weights_from_state_dict(dict(state), model)
    return state, revert_weight_conversion(model, dict(kept))


def saved_state(model: Any) -> dict[str, Any]:
    """The state dict save_pretrained writes: the original layout, each tied group once, persistent buffers."""
    return _reverted(model, tied=False)[1]


def saved_shapes(model: Any, tied: bool = True) -> dict[str, tuple[int, ...]]:
    """The names and shapes save_pretrained writes for the model's parameters, tied copies kept (or, tied
    false, each tensor once, as the file holds it)."""
    return {n: tuple(t.shape) for n, t in _reverted(model, buffers=False, tied=tied)[1].items()}


def saved_name(model: Any, name: str) -> str:
    """The key save_pretrained writes for the state_dict key `name` (the same tensor renamed; a key a
    converter splits or merges keeps its name)."""
    cache = model.__dict__.setdefault("_ckptstat_saved_names", {})
    if not cache:
        state, saved = _reverted(model)
        renamed = {id(t): n for n, t in saved.items()}
        cache.update({n: renamed.get(id(t), n) for n, t in state.items()})
    return cache.get(name, name)


def saved_names(model: Any, oracle: dict[str, Any]) -> dict[str, Any]:
    """The oracle with its tie groups in the names save_pretrained writes."""
    return {**oracle, "ties": {frozenset(saved_name(model, n) for n in g) for g in oracle["ties"]}}


def save_both(model: Any, root: str) -> dict[str, str]:
    import torch

    folder = os.path.join(root, "hf")
    model.save_pretrained(folder)
    sd = os.path.join(root, "sd")
    os.makedirs(sd)
    torch.save(model.state_dict(), os.path.join(sd, "pytorch_model.bin"))
    return {"save_pretrained": folder, "torch.save": sd}


def compare(oracle: dict[str, Any], got: dict[str, Any]) -> list[str]:
    bad = []
    if got["params"] != oracle["params"]:
        bad.append(f"params {got['params']} != {oracle['params']}")
    if got["buffers"] != oracle["buffers"]:
        bad.append(f"buffers {got['buffers']} != {oracle['buffers']} (other roles {got['other_roles']})")
    if got["ties"] != oracle["ties"]:
        false = [sorted(g) for g in got["ties"] - oracle["ties"]]
        missed = [sorted(g) for g in oracle["ties"] - got["ties"]]
        bad.append(f"ties: reported-not-real {false} real-not-reported {missed}")
    return bad


def expected_families(model_type: str, config_class: str, config: dict | None = None,
                      cls: str | None = None) -> tuple[str | None, str | None]:
    """(the family config.json's model_type names, the family its tensor names are found as): None for an
    unregistered model type, but a vision-language wrapper's (`config` nests a registered decoder's text_config)
    is its language model's from the config; a family's Sample may say its names are another's (OLMo's are LLaMA's;
    with `cls`, only a Sample of that class: WhisperForCausalLM's names are the bart family's, Whisper's others not)."""
    from ckptstat.families import MODEL_TYPES, get, language_model

    name = MODEL_TYPES.get(model_type)
    if name is None:
        wrapped = language_model(config) if config is not None else None
        return (wrapped[1].name if wrapped else None), None
    f = get(name)
    return name, next((s.detected_as for s in f.samples if s.config == config_class and s.detected_as
                       and (cls is None or cls in s.models)), name)


MAX_PARAMS = 5_000_000


def audit_one(model_type: str, cls_name: str, workdir: str) -> dict[str, Any]:
    import torch
    import transformers as T
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    cfg_cls = getattr(T, CONFIG_MAPPING_NAMES[model_type])
    model_cls = getattr(T, cls_name)
    cfg = tiny_config(cfg_cls)
    with torch.device("meta"):
        n = sum(p.numel() for p in model_cls(cfg).parameters())
    if n > MAX_PARAMS:
        return {"status": "skipped", "why": f"still {n:,} parameters after shrinking"}
    torch.manual_seed(0)
    model = model_cls(cfg).eval()
    oracle = model_oracle(model)
    paths = save_both(model, workdir)
    out: dict[str, Any] = {"status": "built", "params": oracle["params"], "buffers": oracle["buffers"],
                           "ties": len(oracle["ties"]), "mismatch": {}}
    # the saved config's model_type (code_llama and gpt-sw3 write LlamaConfig's and GPT2Config's)
    expected, by_names = expected_families(cfg.model_type, type(cfg).__name__, cfg.to_dict(), cls_name)
    for variant, path in paths.items():
        got = reported(path)
        out[f"family ({variant})"], out[f"model ({variant})"] = got["family"], got["model"]
        bad = compare(saved_names(model, oracle) if variant == "save_pretrained" else oracle, got)
        if bad:
            out["mismatch"][variant] = bad
    # with config.json the family is the model_type's (None, or the generic decoder, when unmodelled)
    fam = out["family (save_pretrained)"]
    if fam not in (expected, "generic" if expected is None else expected):
        out["mismatch"]["family"] = [f"family {fam} from config.json for model_type {model_type} (modelled: {expected})"]
    # names only (torch.save): a modelled type must be found as its family; an unmodelled one found as a
    # modelled family is a names-only guess, listed apart (its counts are still checked)
    fam = out["family (torch.save)"]
    if expected is not None and fam != by_names:
        out["mismatch"]["family"] = [f"family {fam} from tensor names for model_type {model_type} (modelled: {expected})"]
    elif expected is None and fam is not None:
        out["names_guess"] = fam
    return out


class Overrun(Exception):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise Overrun()


@contextlib.contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Raise Overrun in this process (SIGALRM) once `seconds` have passed inside the block."""
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _run_here(model_type: str, cls_name: str, budget: float) -> dict[str, Any]:
    """audit_one in this process (about 10x less CPU than a fork a model: transformers' modules stay
    imported), stopped by SIGALRM after `budget` seconds."""
    try:
        with time_budget(budget), tempfile.TemporaryDirectory() as d:
            return audit_one(model_type, cls_name, d)
    except Overrun:
        return {"status": "skipped", "why": f"over the {budget:.0f} s budget"}
    except Exception as e:   # noqa: BLE001 - recorded as the reason for skipping
        return {"status": "skipped", "why": reason(e)}


def reason(e: BaseException) -> str:
    """An exception in one line: its type, its message's first line, and where it was raised."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" ({os.path.basename(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}{where}"


def _run_forked(model_type: str, cls_name: str, budget: float) -> dict[str, Any]:
    """audit_one in a forked child (memory, crashes and hangs stay there), killed after `budget` seconds."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # child
        os.close(r)
        signal.alarm(int(budget) + 1)
        try:
            with tempfile.TemporaryDirectory() as d:
                res = audit_one(model_type, cls_name, d)
        except BaseException as e:   # noqa: BLE001 - recorded as the reason for skipping
            res = {"status": "skipped", "why": reason(e)}
        with os.fdopen(w, "w") as f:
            f.write(json.dumps(res, default=str))
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + budget + 5
    chunks = []
    with os.fdopen(r) as f:
        import select
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([f], [], [], max(left, 0))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"status": "skipped", "why": f"over the {budget:.0f} s budget"}
            data = f.read()
            chunks.append(data)
            break
    _, st = os.waitpid(pid, 0)
    text = "".join(chunks)
    if not text:
        return {"status": "skipped", "why": f"child died (status {st})"}
    return dict(json.loads(text))


DEFAULT_MAPPINGS = ["MODEL_MAPPING_NAMES", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
                    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
                    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
                    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_PRETRAINING_MAPPING_NAMES",
                    "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "MODEL_FOR_CTC_MAPPING_NAMES",
                    "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"]


def pairs(mappings: list[str], only: set[str] | None) -> list[tuple[str, str]]:
    import transformers.models.auto.modeling_auto as auto
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if mappings == ["all"]:
        mappings = sorted(n for n in dir(auto) if n.startswith("MODEL_") and n.endswith("_MAPPING_NAMES"))
    seen: dict[tuple[str, str], None] = {}
    for m in mappings:
        for model_type, names in getattr(auto, m).items():
            if model_type not in CONFIG_MAPPING_NAMES or (only and model_type not in only):
                continue
            for name in (names,) if isinstance(names, str) else names:
                seen[(model_type, name)] = None
    return list(seen)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mappings", default=",".join(DEFAULT_MAPPINGS), help="comma-separated names, or 'all'")
    ap.add_argument("--only", default="", help="comma-separated model types")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per model (build, save, read)")
    ap.add_argument("--json", default="", help="write every row here")
    ap.add_argument("--fork", action="store_true", help="each model in a forked child (isolates crashes and memory; slower)")
    args = ap.parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"   # tiny random-init configs only: nothing is downloaded
    import torch
    import transformers

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    todo = pairs(args.mappings.split(","), set(args.only.split(",")) - {""} or None)
    rows = []
    for i, (model_type, cls_name) in enumerate(todo):
        t0 = time.monotonic()
        res = (_run_forked if args.fork else _run_here)(model_type, cls_name, args.budget)
        res.update(model_type=model_type, cls=cls_name, seconds=round(time.monotonic() - t0, 2))
        rows.append(res)
        flag = "MISMATCH" if res.get("mismatch") else res["status"]
        print(f"[{i + 1}/{len(todo)}] {model_type:28} {cls_name:48} {flag:8} {res.get('why', '')}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1, default=str)
    built = [r for r in rows if r["status"] == "built"]
    bad = [r for r in built if r.get("mismatch")]
    guesses = [r for r in built if r.get("names_guess")]
    print(f"\n{len(todo)} pairs: {len(built)} built, {len(rows) - len(built)} skipped, {len(bad)} mismatched; "
          f"{len(guesses)} pairs of unmodelled model types given a modelled family from tensor names alone")
    for r in bad:
        for variant, why in r["mismatch"].items():
            print(f"  {r['model_type']:24} {r['cls']:44} {variant:16} {'; '.join(why)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
