"""GGUF files of the families llama.cpp converts beyond LLaMA: Gemma (gemma, gemma2, gemma3), Falcon, T5
(t5, t5encoder), Qwen-MoE (qwen2moe, qwen3moe), DeepSeek (deepseek2), OLMo (olmo, olmo2), Qwen3, Phi-2, Phi-3, GPT-NeoX, BLOOM,
Mamba, gpt-oss and StarCoder (GPTBigCode).

For each case a family sample's transformers model is built on the meta device and "converted" as llama.cpp's
convert_hf_to_gguf.py converts it: the state dict as save_pretrained stores it (a tied weight once), every name
mapped by gguf-py's TensorNameMap (the converter's own map; a name it cannot map would stop the converter, so
every name must map), the converters' tensor rewrites that change names or shapes (routed experts stacked into
one 3-D tensor per projection, DeepSeek's kv_b_proj split into attn_k_b / attn_v_b, Mamba's conv1d squeezed,
gpt-oss's fused experts split and transposed), and the metadata the converter writes, through GGUFWriter's add_*
methods. Values are zeros: the converters' value rewrites (Falcon-40B's qkv row order) change no name or shape, but Gemma's
norm + 1 and Mamba's A = -exp(A_log) are applied (its norms stored as ones, Mamba's A as -1: zeros there would be the
HF layout, which llama.cpp reads wrong and `ckptstat diff` reports).

Then, with no config.json: the summary resolves the family and the model class from the GGUF metadata, its
unique parameter count is the transformers model's parameters() count, and the analytic model built from the
metadata predicts that count; and `ckptstat diff` of the GGUF file against the HF safetensors (zeros under HF
names) aligns every tensor, the converter's stacked or split tensors only excepted (listed per case)."""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gguf
import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import save_file

from ckptstat import open_checkpoint
from ckptstat.analysis.diff import diff
from ckptstat.analysis.summary import summarize
from ckptstat.families import get


# ------------------------------------------------------------------ metadata, as convert_hf_to_gguf.py writes it
def _sizes(w: Any, c: Any, ffn: int | None = None, kv: int | None = None) -> None:
    """The size keys: layers, context, width, MLP width and heads (a converter's own `ffn` or `kv` where it writes
    another value than the config's)."""
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size if ffn is None else ffn)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads if kv is None else kv)


def _text(w: Any, c: Any, head_dim: bool = True) -> None:
    """TextModel.set_gguf_parameters: the keys every decoder gets (head_dim only when the config has one)."""
    _sizes(w, c)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    if head_dim and getattr(c, "head_dim", None):
        w.add_key_length(c.head_dim)
        w.add_value_length(c.head_dim)
    if getattr(c, "num_experts_per_tok", None):
        w.add_expert_used_count(c.num_experts_per_tok)


def _gemma(w: Any, c: Any) -> None:
    """GemmaModel / Gemma2Model / Gemma3Model: the text keys with head_dim; Gemma2's soft-capping; Gemma2/3's window."""
    _text(w, c)
    if c.model_type == "gemma2":
        w.add_attn_logit_softcapping(c.attn_logit_softcapping)
        w.add_final_logit_softcapping(c.final_logit_softcapping)
    if c.model_type != "gemma":
        w.add_sliding_window(c.sliding_window)


def _falcon(w: Any, c: Any) -> None:
    """FalconModel: context 2048 and feed_forward_length 4h hard-coded, head_count_kv (1 for multi-query)."""
    w.add_context_length(2048)
    w.add_tensor_data_layout("jploski")
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(4 * c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_kv_heads if c.new_decoder_architecture else 1)
    w.add_layer_norm_eps(c.layer_norm_epsilon)


def _t5(w: Any, c: Any) -> None:
    """T5Model / T5EncoderModel."""
    w.add_context_length(getattr(c, "n_positions", 512))
    w.add_embedding_length(c.d_model)
    w.add_feed_forward_length(c.d_ff)
    w.add_block_count(c.num_layers)
    if w.arch == "t5" and c.num_decoder_layers is not None:
        w.add_decoder_block_count(c.num_decoder_layers)
    w.add_head_count(c.num_heads)
    w.add_key_length(c.d_kv)
    w.add_value_length(c.d_kv)
    w.add_layer_norm_eps(c.layer_norm_epsilon)
    w.add_relative_attn_buckets_count(c.relative_attention_num_buckets)
    w.add_layer_norm_rms_eps(c.layer_norm_epsilon)
    if getattr(c, "decoder_start_token_id", None) is not None:   # real T5 configs have 0; transformers 5 has none
        w.add_decoder_start_token_id(c.decoder_start_token_id)


def _olmo(w: Any, c: Any) -> None:
    """OlmoModel.set_gguf_parameters: the text keys with a LayerNorm epsilon of 1e-5, and clip_qkv as clamp_kqv."""
    _sizes(w, c)
    w.add_layer_norm_eps(1e-5)
    if c.clip_qkv is not None:
        w.add_clamp_kqv(c.clip_qkv)


def _phi2(w: Any, c: Any) -> None:
    """Phi2Model.set_gguf_parameters: feed_forward_length written as 4 h, head_count_kv as head_count, the rotated
    dims per head from partial_rotary_factor, a LayerNorm epsilon."""
    _sizes(w, c, ffn=4 * c.hidden_size, kv=c.num_attention_heads)
    w.add_layer_norm_eps(c.layer_norm_eps)
    w.add_rope_dimension_count(int(_rotary_fraction(c) * c.hidden_size) // c.num_attention_heads)


def _gptneox(w: Any, c: Any) -> None:
    """GPTNeoXModel.set_gguf_parameters: the width keys (no head_count_kv), rotary_pct as the rotated dims per head,
    the residual layout."""
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_rope_dimension_count(int(_rotary_fraction(c) * (c.hidden_size // c.num_attention_heads)))
    w.add_parallel_residual(c.use_parallel_residual)
    w.add_layer_norm_eps(c.layer_norm_eps)


def _bloom(w: Any, c: Any) -> None:
    """BloomModel.set_gguf_parameters, read from config.json as it reads it (hparams.get("n_head", ...)): context_length
    seq_length else the width, feed_forward_length 4h, head_count_kv = head_count."""
    hp = c.to_dict()
    n_embed = hp.get("hidden_size", hp.get("n_embed"))
    n_head = hp.get("n_head", hp.get("num_attention_heads"))
    w.add_context_length(hp.get("seq_length", n_embed) or n_embed)
    w.add_embedding_length(n_embed)
    w.add_feed_forward_length(4 * n_embed)
    w.add_block_count(hp["n_layer"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_eps(hp["layer_norm_epsilon"])


def _phi3(w: Any, c: Any) -> None:
    """Phi3MiniModel.set_gguf_parameters: the text keys (no key_length), the rotated dims per head
    (int(partial_rotary_factor * hidden) // heads) and the window (0 when the config has none: Phi-4)."""
    _text(w, c, head_dim=False)
    w.add_rope_dimension_count(int(_rotary_fraction(c) * c.hidden_size) // c.num_attention_heads)
    w.add_sliding_window(c.sliding_window or 0)


def _qwen_moe(w: Any, c: Any) -> None:
    """Qwen2MoeModel / Qwen3MoeModel: the text keys, expert_count and the expert sizes."""
    _text(w, c)
    w.add_expert_count(c.num_experts)
    w.add_expert_feed_forward_length(c.moe_intermediate_size)
    if getattr(c, "shared_expert_intermediate_size", None):
        w.add_expert_shared_feed_forward_length(c.shared_expert_intermediate_size)


def _deepseek(w: Any, c: Any) -> None:
    """DeepseekV2Model (V2 and V3): MLA converted to MQA, so key/value_length are the cache's and *_mla the heads'."""
    _text(w, c, head_dim=False)   # DeepseekV2Model writes its own key_length / value_length
    w.add_leading_dense_block_count(c.first_k_dense_replace)
    if c.q_lora_rank is not None:
        w.add_q_lora_rank(c.q_lora_rank)
    w.add_kv_lora_rank(c.kv_lora_rank)
    w.add_key_length(c.kv_lora_rank + c.qk_rope_head_dim)
    w.add_value_length(c.kv_lora_rank)
    w.add_key_length_mla(c.qk_nope_head_dim + c.qk_rope_head_dim)
    w.add_value_length_mla(c.v_head_dim)
    w.add_expert_feed_forward_length(c.moe_intermediate_size)
    w.add_expert_count(c.n_routed_experts)
    w.add_expert_shared_count(c.n_shared_experts)
    w.add_expert_weights_scale(c.routed_scaling_factor)
    w.add_expert_weights_norm(c.norm_topk_prob)
    w.add_rope_dimension_count(c.qk_rope_head_dim)


def _gpt_oss(w: Any, c: Any) -> None:
    """GptOssModel: the text keys (num_local_experts as expert_count), the window, the experts' width, YaRN."""
    rope = c.rope_parameters   # transformers 5: rope_theta and the YaRN table in one dict
    _text(w, c)
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_expert_count(c.num_local_experts)
    w.add_sliding_window(c.sliding_window)
    w.add_expert_feed_forward_length(c.intermediate_size)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rope["factor"])
    w.add_rope_scaling_orig_ctx_len(rope.get("original_max_position_embeddings", 4096))


def _mamba(w: Any, c: Any) -> None:
    """MambaModel: feed_forward_length and head_count 0 ("unused, but seemingly required when loading")."""
    w.add_context_length(2 ** 20)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_block_count(c.num_hidden_layers)
    w.add_ssm_conv_kernel(c.conv_kernel)
    w.add_ssm_inner_size(c.intermediate_size)
    w.add_ssm_state_size(c.state_size)
    w.add_ssm_time_step_rank(c.time_step_rank)
    w.add_layer_norm_rms_eps(c.layer_norm_epsilon)


# ------------------------------------------------------------------ the cases
# gpt-oss's fused experts: gate_up split into gate / up stacks, the weights transposed (down_proj_bias aligns)
EXPERTS_SPLIT = r"experts\.(gate_up_proj(_bias)?|down_proj)$|\.ffn_(gate|up)_exps\.(weight|bias)$|\.ffn_down_exps\.weight$"


def _moe(w: Any, c: Any) -> None:
    """OlmoeModel, PhiMoeModel, MiniMaxM2Model, Glm4MoeModel, ExaoneMoeModel: the text keys, the
    expert counts and sizes under each config's names, the dense first layers, the rotated dims per head."""
    _text(w, c)
    w.add_expert_count(next(v for k in ("num_experts", "num_local_experts", "n_routed_experts") if (v := getattr(c, k, None))))
    if getattr(c, "moe_intermediate_size", None):
        w.add_expert_feed_forward_length(c.moe_intermediate_size)
    if (n := next((v for k in ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts") if (v := getattr(c, k, None))),
                  None)) is not None:
        w.add_expert_shared_count(n)
    if getattr(c, "first_k_dense_replace", None) is not None:
        w.add_leading_dense_block_count(c.first_k_dense_replace)
    d = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_rope_dimension_count(int(d * _rotary_fraction(c)))


def _starcoder(w: Any, c: Any) -> None:
    """StarCoderModel.set_gguf_parameters (GPTBigCodeForCausalLM): feed_forward_length 4 x n_embd and head_count_kv 1
    whatever the config says."""
    w.add_context_length(c.n_positions)
    w.add_embedding_length(c.n_embd)
    w.add_feed_forward_length(4 * c.n_embd)
    w.add_block_count(c.n_layer)
    w.add_head_count(c.n_head)
    w.add_head_count_kv(1)
    w.add_layer_norm_eps(c.layer_norm_epsilon)


@dataclass(frozen=True)
class Case:
    family: str
    sample: int                          # index into the family's samples
    model: str                           # transformers class
    arch: str                            # llama.cpp architecture
    meta: Callable[[Any, Any], None]
    head: str = "lm"
    changes: dict[str, Any] = field(default_factory=dict)   # kwargs changed from the sample's (and why)
    unaligned: str | None = None         # names (HF or GGUF) the converter splits: no counterpart


CASES = {
    # tied Gemma samples: the Gemma converters drop lm_head, which an untied sample would lose here too
    "gemma": Case("gemma", 0, "GemmaForCausalLM", "gemma", _gemma),
    "gemma2": Case("gemma", 2, "Gemma2ForCausalLM", "gemma2", _gemma),
    "gemma3": Case("gemma", 3, "Gemma3ForCausalLM", "gemma3", _gemma),
    "falcon-7b": Case("falcon", 0, "FalconForCausalLM", "falcon", _falcon),
    "falcon-40b": Case("falcon", 1, "FalconForCausalLM", "falcon", _falcon),
    "falcon2": Case("falcon", 2, "FalconForCausalLM", "falcon", _falcon),
    "t5": Case("t5", 0, "T5ForConditionalGeneration", "t5", _t5),
    "t5-v1.1": Case("t5", 2, "T5ForConditionalGeneration", "t5", _t5),
    "t5encoder": Case("t5", 2, "T5EncoderModel", "t5encoder", _t5, head="encoder-only"),
    # llama.cpp's qwen2moe/qwen3moe have no dense-MLP tensors: a model with mlp_only_layers does not convert
    # (their stacked experts, blk.N.ffn_*_exps, line up slice by slice with the HF experts: analysis/diff.py; DeepSeek's
    # attn_k_b / attn_v_b are read joined as the kv_b_proj they were split from: analysis/conversion_mla.py)
    "qwen2moe": Case("qwen_moe", 0, "Qwen2MoeForCausalLM", "qwen2moe", _qwen_moe, changes=dict(mlp_only_layers=[])),
    "qwen3moe": Case("qwen_moe", 2, "Qwen3MoeForCausalLM", "qwen3moe", _qwen_moe, changes=dict(mlp_only_layers=[])),
    "deepseek-v2": Case("deepseek", 0, "DeepseekV2ForCausalLM", "deepseek2", _deepseek),
    "deepseek-v2-lite": Case("deepseek", 1, "DeepseekV2ForCausalLM", "deepseek2", _deepseek),
    "deepseek-v3": Case("deepseek", 2, "DeepseekV3ForCausalLM", "deepseek2", _deepseek),
    "phi2": Case("phi", 0, "PhiForCausalLM", "phi2", _phi2),
    "phi2-tied": Case("phi", 0, "PhiForCausalLM", "phi2", _phi2, changes=dict(tie_word_embeddings=True)),
    "gptneox": Case("gptneox", 0, "GPTNeoXForCausalLM", "gptneox", _gptneox),
    "gptneox-sequential-tied": Case("gptneox", 1, "GPTNeoXForCausalLM", "gptneox", _gptneox),
    # tied; untied (its pretraining_tp slices, not in the file, change no count)
    "bloom": Case("bloom", 0, "BloomForCausalLM", "bloom", _bloom),
    "bloom-untied": Case("bloom", 1, "BloomForCausalLM", "bloom", _bloom),
    "phi3": Case("phi3", 0, "Phi3ForCausalLM", "phi3", _phi3),
    "phi3-partial-rotary": Case("phi3", 1, "Phi3ForCausalLM", "phi3", _phi3),
    "phi3-sliding": Case("phi3", 2, "Phi3ForCausalLM", "phi3", _phi3),
    "olmo": Case("olmo", 0, "OlmoForCausalLM", "olmo", _olmo),
    # (untied: a tied OLMo file has no output_norm, the weightless norms, so the structural GGUF tie rule cannot
    # see it is a decoder: docs/gguf.md)
    "olmo-bias": Case("olmo", 1, "OlmoForCausalLM", "olmo", _olmo, changes=dict(tie_word_embeddings=False)),
    "olmo2": Case("olmo", 2, "Olmo2ForCausalLM", "olmo2", _text),
    "qwen3": Case("qwen3", 0, "Qwen3ForCausalLM", "qwen3", _text),
    "qwen3-tied": Case("qwen3", 1, "Qwen3ForCausalLM", "qwen3", _text),
    "mamba": Case("mamba", 0, "MambaForCausalLM", "mamba", _mamba),
    # untied with attention biases; tied without (its layer_types, not in the file, change no count)
    "gpt-oss": Case("gpt_oss", 0, "GptOssForCausalLM", "gpt-oss", _gpt_oss, unaligned=EXPERTS_SPLIT),
    "gpt-oss-tied": Case("gpt_oss", 1, "GptOssForCausalLM", "gpt-oss", _gpt_oss, unaligned=EXPERTS_SPLIT),
    "mamba-untied": Case("mamba", 1, "MambaForCausalLM", "mamba", _mamba),
    # multi-query and tied; multi-head (multi_query false, which the converter's head_count_kv 1 does not say), untied
    "starcoder": Case("gpt_bigcode", 0, "GPTBigCodeForCausalLM", "starcoder", _starcoder),
    "starcoder-mha": Case("gpt_bigcode", 1, "GPTBigCodeForCausalLM", "starcoder", _starcoder, changes=dict(n_inner=48)),
    "olmoe": Case("olmoe", 0, "OlmoeForCausalLM", "olmoe", _moe),
    "phimoe": Case("phimoe", 1, "PhimoeForCausalLM", "phimoe", _moe),
    "minimax-m2": Case("minimax_m2", 0, "MiniMaxM2ForCausalLM", "minimax-m2", _moe),
    "glm4moe": Case("glm4_moe", 0, "Glm4MoeForCausalLM", "glm4moe", _moe),
    "exaone-moe": Case("exaone_moe", 0, "ExaoneMoeForCausalLM", "exaone-moe", _moe),
    # (not ernie4_5-moe: its moe_statics, a parameter in transformers, is llama.cpp's exp_probs_b, counted as a buffer
    # as DeepSeek-V3's is: the GGUF file's count is 1 x experts per MoE layer short; docs/gguf.md)
}


def _rotary_fraction(c: Any) -> float:
    """The rotated fraction of each head: transformers 5 keeps it in rope_parameters (GPT-NeoX's rotary_pct too)."""
    return float((getattr(c, "rope_parameters", None) or {}).get("partial_rotary_factor", 1.0))


def _model(case: Case) -> torch.nn.Module:
    sample = get(case.family).samples[case.sample]
    assert case.model in sample.models
    cfg = getattr(transformers, sample.config)(**{**sample.kwargs, **case.changes})
    with torch.device("meta"):
        return getattr(transformers, case.model)(cfg)


def _stored(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    """name -> shape as save_pretrained stores the model (transformers 5's original layout: experts one tensor
    each), a tied parameter once, persistent buffers too (DeepSeek-V3's e_score_correction_bias)."""
    from census_audit import _reverted

    return {k: tuple(v.shape) for k, v in _reverted(model, tied=False)[1].items()}


_EXPERT = re.compile(r"^(.*\.experts)\.(\d+)\.(\w+)\.weight$")


def _converted(hf: dict[str, tuple[int, ...]], arch: Any, cfg: Any) -> dict[str, tuple[int, ...]]:
    """GGUF name -> shape, as convert_hf_to_gguf.py's modify_tensors and map_tensor_name produce them."""
    pieces: list[tuple[str, tuple[int, ...]]] = []
    stacks: dict[str, dict[int, tuple[int, ...]]] = {}
    for name, shape in hf.items():
        if m := _EXPERT.match(name):   # Qwen2MoeModel, DeepseekV2Model: experts.E.w -> experts.w [E, out, in]
            stacks.setdefault(f"{m[1]}.{m[3]}.weight", {})[int(m[2])] = shape
        elif name.endswith("kv_b_proj.weight"):   # DeepseekV2Model: per head [k_nope | v] rows, k_b transposed
            a, nope, v, kvl = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
            assert shape == (a * (nope + v), kvl)
            pieces += [(name.replace("kv_b_proj", "k_b_proj"), (a, kvl, nope)),
                       (name.replace("kv_b_proj", "v_b_proj"), (a, v, kvl))]
        elif name.endswith(".e_score_correction_bias"):   # DeepseekV2Model renames it to map as a bias
            pieces.append((name.replace("e_score_correction_bias", "e_score_correction.bias"), shape))
        elif arch == gguf.MODEL_ARCH.MAMBA and name.endswith("conv1d.weight"):   # [i, 1, k] -> [i, k]
            pieces.append((name, tuple(d for d in shape if d != 1)))
        elif arch == gguf.MODEL_ARCH.GPT_OSS:   # GptOssModel: gate_up split (even/odd), weights [E, out, in]
            pieces += _gpt_oss_pieces(name, shape)
        elif arch == gguf.MODEL_ARCH.BLOOM:   # BloomModel.modify_tensors: re.sub(r'transformer\.', '', name), then mapped
            pieces.append((re.sub(r"transformer\.", "", name), shape))
        else:
            pieces.append((name, shape))
    for name, per in stacks.items():
        assert sorted(per) == list(range(len(per)))
        pieces.append((name, (len(per),) + per[0]))
    names = gguf.get_tensor_name_map(arch, max(getattr(cfg, "num_hidden_layers", 0), getattr(cfg, "num_decoder_layers", 0) or 0))
    out = {}
    for name, shape in pieces:
        g = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert g is not None, f"convert_hf_to_gguf.py cannot map {name!r}"
        out[g] = shape
    return out


def _gpt_oss_pieces(name: str, shape: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
    """GptOssModel.modify_tensors on an unquantised model: sinks get `.weight`; gate_up_proj [E, h, 2f] transposed,
    its even rows gate_proj.weight, odd rows up_proj.weight [E, f, h] (its bias likewise, [E, f]); down_proj [E, f, h]
    transposed to down_proj.weight [E, h, f]; down_proj_bias renamed down_proj.bias."""
    if name.endswith(".sinks"):
        return [(name + ".weight", shape)]
    if name.endswith("gate_up_proj_bias"):
        return [(name.replace("gate_up_proj_bias", f"{p}_proj.bias"), (shape[0], shape[1] // 2)) for p in ("gate", "up")]
    if name.endswith("gate_up_proj"):
        return [(name.replace("gate_up_proj", f"{p}_proj.weight"), (shape[0], shape[2] // 2, shape[1])) for p in ("gate", "up")]
    if name.endswith("experts.down_proj"):
        return [(name + ".weight", (shape[0], shape[2], shape[1]))]
    return [(name.replace("down_proj_bias", "down_proj.bias"), shape)]


@pytest.fixture(scope="module", params=list(CASES))
def converted(request, tmp_path_factory) -> tuple[Case, torch.nn.Module, str, str]:
    case = CASES[request.param]
    model = _model(case)
    hf = _stored(model)
    d = tmp_path_factory.mktemp(request.param)
    hf_path, gguf_path = str(d / "model.safetensors"), str(d / "model.gguf")
    save_file({k: torch.zeros(s) for k, s in hf.items()}, hf_path)
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == case.arch)
    w = gguf.GGUFWriter(gguf_path, case.arch)
    case.meta(w, model.config)
    for name, shape in _converted(hf, arch, model.config).items():
        plus_one = case.arch.startswith("gemma") and name.endswith("norm.weight")   # GemmaModel: data_torch + 1
        neg_exp = case.arch == "mamba" and name.endswith(".ssm_a")   # MambaModel: -torch.exp(data_torch), -1 for 0
        w.add_tensor(name, (np.ones if plus_one else np.zeros)(shape, dtype=np.float32) - neg_exp)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return case, model, hf_path, gguf_path


def test_summary_resolves_family_and_counts(converted, cli):
    case, model, _, path = converted
    ckpt = open_checkpoint(path)
    r = summarize(ckpt)
    # a tied LM head is not stored (llama.cpp reuses token_embd): a structural tie, counted once
    pairs = {(p["alias"], p["target"]) for p in (r["ties"] or {}).get("pairs", [])}
    tied = case.head == "lm" and "output.weight" not in ckpt.tensors
    assert (("output.weight", "token_embd.weight") in pairs) == tied
    assert tied == (case.head == "lm" and model.config.tie_word_embeddings)
    assert r["config"] is None and r["architecture"]["source"] == "gguf general.architecture"
    assert r["resolved"]["family"] == case.family
    assert (r["resolved"]["head"], r["resolved"]["model"]) == (case.head, case.model)
    assert r["parameters"]["unique"] == sum(p.numel() for p in model.parameters())
    a = r["analytic"]
    assert a["agree"] is True and a["predicted_params"] == r["parameters"]["unique"], a
    for command in ("flops", "memory"):   # the metadata stands in for config.json there too
        rc, out, err = cli(command, path, "--seq", "16", "--json")
        assert rc == 0 and json.loads(out)["parameters"]["agree"] is True, err


def test_diff_aligns_every_tensor(converted, cli):
    case, _, hf_path, path = converted
    r = diff(open_checkpoint(hf_path), open_checkpoint(path))
    rc, _, _ = cli("diff", hf_path, path, "--names-only")
    # diff(1): 0 when nothing differs. T5: the HF file's encoder/decoder.embed_tokens are tied to `shared` (T5's
    # tie rules, always), module rows the GGUF side (one token_embd, no tie of its own) does not have: listed,
    # at no parameter either side, so no difference
    assert rc == (1 if case.unaligned else 0)
    if case.family == "t5":
        assert {row["module"] for row in r["rows"]} >= {"encoder.embed_tokens", "decoder.embed_tokens"} - (
            {"decoder.embed_tokens"} if case.head == "encoder-only" else set())
        assert all((row["a"] or 0) == (row["b"] or 0) and row["tied"] for row in r["rows"])
    assert r["builtin_map"] and f"({case.family} family)" in r["builtin_map"]
    off = [(t["a_name"] or t["b_name"], t["status"]) for t in r["tensors"] if t["status"] != "equal"]
    expected = [(n, s) for n, s in off if case.unaligned and re.search(case.unaligned, n) and s in ("removed", "added")]
    assert off == expected, [x for x in off if x not in expected][:5]
    if case.unaligned:   # the stacks and splits are really there, and nothing else is unaligned
        assert {s for _, s in off} == {"removed", "added"}


@pytest.mark.parametrize("arch", ["gemma", "gemma2", "gemma3", "falcon", "t5", "t5encoder", "qwen2moe", "qwen3moe",
                                  "deepseek2", "mamba", "gpt-oss"])
def test_bad_metadata_is_a_note_not_a_crash(arch, tmp_path, cli):
    """Keys of the wrong type or beyond any model: the summary still opens the file, the analytic model says
    what is wrong in one line (families.framework.base.Cfg), nothing is allocated or looped over from the claim."""
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), arch)
    w.add_string(f"{arch}.block_count", "many")                    # not an integer: left out
    w.add_uint64(f"{arch}.embedding_length", 2 ** 40)              # beyond any model
    w.add_uint64(f"{arch}.expert_count", 2 ** 40)
    w.add_uint32(f"{arch}.rope.dimension_count", 4)
    w.add_uint32(f"{arch}.attention.key_length_mla", 2)            # DeepSeek: qk_nope would be negative
    w.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.zeros(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = summarize(open_checkpoint(str(tmp_path / "m.gguf")))
    assert r["architecture"]["family"] != "unknown" and r["parameters"]["unique"] == 36
    rc, out, err = cli("flops", str(tmp_path / "m.gguf"))
    assert rc != 0 and "Traceback" not in out + err and len((out + err).strip().splitlines()) == 1, out + err
