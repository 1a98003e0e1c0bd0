"""Every family's GGUF tensor-name table (Family.gguf_tensor_names, read by `ckptstat diff`) against
gguf-py's own TensorNameMap, the table llama.cpp's convert_hf_to_gguf.py names tensors by: for each
family sample's transformers model, every state-dict name that TensorNameMap maps to a GGUF name must
come back, through ckptstat's GGUF -> HF rules, to the same name (after the wrapper and base-model
prefixes diff strips). And a pair written by both writers diffs as equal."""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch
import transformers
from census_audit import saved_state
from safetensors.torch import save_file

from ckptstat import open_checkpoint
from ckptstat.analysis.conversion import gguf_rules
from ckptstat.analysis.diff import _key, diff
from ckptstat.core import Checkpoint, TensorInfo
from ckptstat.families import FAMILIES, get

gguf = pytest.importorskip("gguf")

ARCHS = {name: arch for arch, name in gguf.MODEL_ARCH_NAMES.items()}
WITH_TABLE = [f for f in FAMILIES if f.gguf_tensor_names]
# llama.cpp architectures whose names cannot be mapped back without more than the name (docs/gguf.md)
NOT_MAPPED = {
    "clip": "llama.cpp's mmproj files, not a model",
}
# transformers model_type -> llama.cpp architecture where the names differ (convert_hf_to_gguf.py's model classes)
CONVERTS_AS = {"gemma3_text": "gemma3", "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "deepseek_v2": "deepseek2",
               "deepseek_v3": "deepseek2", "glm4_moe": "glm4moe",
               "minimax_m2": "minimax-m2", "exaone_moe": "exaone-moe",
               "ernie4_5_moe": "ernie4_5-moe", "llama4_text": "llama4",
               "hunyuan_v1_moe": "hunyuan-moe", "qwen3_next": "qwen3next", "qwen3_5_text": "qwen35",
               "qwen3_5_moe_text": "qwen35moe", "lfm2_moe": "lfm2moe",
               # no llama.cpp architecture of its own: its modules are a subset of Gemma2's, named as gemma2 names them
               "vaultgemma": "gemma2",
               "granitemoehybrid": "granitehybrid",
               # the MoE blocks' names are in llama.cpp's nemotron_h_moe map, the others in both
               "nemotron_h": "nemotron_h_moe"}


def _arch(family, cfg):
    """The llama.cpp architecture a transformers config converts to (Mistral and Mixtral as llama)."""
    return ARCHS.get(CONVERTS_AS.get(cfg.model_type, cfg.model_type)) or next(ARCHS[n] for n in family.gguf_names if n in ARCHS)


def _gguf_file(family, arch, names=()) -> Checkpoint:
    """A header-only GGUF checkpoint of `arch` holding tensors `names`, to get diff's rules for it as for a real
    file (a family whose llama.cpp names mean two HF modules picks its table by the names: Family.gguf_table)."""
    meta = {"general.architecture": gguf.MODEL_ARCH_NAMES[arch], f"{gguf.MODEL_ARCH_NAMES[arch]}.expert_count":
            "4" if family.name == "mixtral" else "0"}
    tensors = {n: TensorInfo(n, "F32", (1,), "m.gguf", None, 4) for n in names}
    return Checkpoint(path="m.gguf", format="gguf", tensors=tensors, files=(), metadata=meta,
                      declared_architecture=meta["general.architecture"])


def _cases():
    for f in WITH_TABLE:
        for s in f.samples:
            for model in s.models:
                if model == "GPTNeoXModel":   # its names lack `gpt_neox.`, which diff does not strip (naming._BASE_MODELS)
                    continue
                yield pytest.param(f, s, model, id=f"{f.name}-{s.config}-{model}")


@pytest.mark.parametrize("family,sample,model_name", list(_cases()))
def test_table_matches_gguf_tensor_name_map(family, sample, model_name):
    cfg = getattr(transformers, sample.config)(**sample.kwargs)
    with torch.device("meta"):
        model = getattr(transformers, model_name)(cfg)
    arch = _arch(family, cfg)
    oracle = gguf.get_tensor_name_map(arch, max(cfg.num_hidden_layers, getattr(cfg, "num_decoder_layers", 0) or 0))
    mapped = {name: oracle.get_name(name, try_suffixes=(".weight", ".bias")) for name in saved_state(model)}
    what, rules = gguf_rules(_gguf_file(family, arch, [g for g in mapped.values() if g])) or (None, [])
    assert what and f"({family.name} family)" in what
    for name, g in mapped.items():
        if g is None:   # llama.cpp has no tensor for it (rotary tables, per-expert weights stacked 3-D...)
            continue
        if family.name == "bert" and re.match(r"cls(\.|$)", g):
            continue    # BERT's classifier or RoBERTa's classifier.dense: not in the table (families/bert.py)
        assert _key(g, rules)[1] == _key(name, [])[1], (name, g)


def test_families_without_a_table_are_the_known_gaps():
    missing = {f.name for f in FAMILIES
               if not f.gguf_tensor_names and any(n in ARCHS for n in f.gguf_names)}
    assert missing == set(NOT_MAPPED)


# ------------------------------------------------------------------ llama.cpp's converters, reimplemented from their code
# (llama-cpp-python 0.3.36's vendored llama.cpp, conversion/*.py), on the config as they read it (`hp`: self.hparams,
# ModelBase.load_hparams: AutoConfig.from_pretrained(...).to_dict())
def _gptneox_meta(w: Any, hp: dict) -> None:
    """GPTNeoXModel.set_gguf_parameters (conversion/gptneox.py): no head_count_kv. It reads hparams["rotary_pct"], which
    transformers 5's to_dict() no longer has (rope_parameters' partial_rotary_factor): read from there instead."""
    n_head = hp["num_attention_heads"]
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_block_count(hp["num_hidden_layers"])
    w.add_feed_forward_length(hp["intermediate_size"])
    rotary = (hp.get("rope_parameters") or {}).get("partial_rotary_factor", hp.get("rotary_pct", 1.0))
    w.add_rope_dimension_count(int(rotary * (hp["hidden_size"] // n_head)))
    w.add_head_count(n_head)
    w.add_parallel_residual(hp.get("use_parallel_residual", True))
    w.add_layer_norm_eps(hp["layer_norm_eps"])


def _bloom_like_qkv(name: str, data_torch: torch.Tensor, hp: dict, pattern: str) -> torch.Tensor:
    """GPTNeoXModel.modify_tensors and BloomModel.modify_tensors (conversion/gptneox.py, bloom.py), as written there:
    query_key_value's rows, per head [q_h k_h v_h], regrouped into the q, k and v blocks ("Map bloom-style qkv_linear
    to gpt-style qkv_linear"); `pattern` the converter's regex on the name, before `.weight` / `.bias`."""
    n_head = hp.get("n_head", hp.get("num_attention_heads"))
    n_embed = hp.get("hidden_size", hp.get("n_embed"))
    if re.match(pattern + r"\.weight", name):
        qkv_weights = data_torch.reshape((n_head, 3, n_embed // n_head, n_embed))
        data_torch = torch.cat((qkv_weights[:, 0, :, :].reshape((-1, n_embed)),
                                qkv_weights[:, 1, :, :].reshape((-1, n_embed)),
                                qkv_weights[:, 2, :, :].reshape((-1, n_embed))), dim=0)
    elif re.match(pattern + r"\.bias", name):
        qkv_bias = data_torch.reshape((n_head, 3, n_embed // n_head))
        data_torch = torch.cat((qkv_bias[:, 0, :].reshape((n_embed,)), qkv_bias[:, 1, :].reshape((n_embed,)),
                                qkv_bias[:, 2, :].reshape((n_embed,))), dim=0)
    return data_torch


def _gptneox(name: str, data_torch: torch.Tensor, hp: dict) -> tuple[str, torch.Tensor]:
    return name, _bloom_like_qkv(name, data_torch, hp, r"gpt_neox\.layers\.\d+\.attention\.query_key_value")


def _bloom(name: str, data_torch: torch.Tensor, hp: dict) -> tuple[str, torch.Tensor]:
    """BloomModel.modify_tensors: `transformer.` dropped from the name, then the regrouping."""
    name = re.sub(r"transformer\.", "", name)
    return name, _bloom_like_qkv(name, data_torch, hp, r"h\.\d+\.self_attention\.query_key_value")


def _falcon_kv(hp: dict) -> int:
    """FalconModel's n_head_kv: find_hparam(["num_kv_heads", "n_head_kv"], optional=True) or 1."""
    return next((hp[k] for k in ("num_kv_heads", "n_head_kv") if hp.get(k) is not None), None) or 1


def _falcon(name: str, data_torch: torch.Tensor, hp: dict) -> tuple[str, torch.Tensor]:
    """FalconModel.modify_tensors (conversion/falcon.py): the kv groups of query_key_value, each n_head / n_head_kv query
    heads then one key and one value head, rearranged into all q, all k, all v."""
    if "query_key_value" in name:
        n_head = hp["num_attention_heads"]
        n_head_kv = _falcon_kv(hp)
        head_dim = hp["hidden_size"] // n_head
        qkv = data_torch.view(n_head_kv, n_head // n_head_kv + 2, head_dim, head_dim * n_head)
        q = qkv[:, :-2].reshape(n_head * head_dim, head_dim * n_head)
        k = qkv[:, [-2]].reshape(n_head_kv * head_dim, head_dim * n_head)
        v = qkv[:, [-1]].reshape(n_head_kv * head_dim, head_dim * n_head)
        data_torch = torch.cat((q, k, v)).reshape_as(data_torch)
    return name, data_torch


def _falcon_meta(w: Any, hp: dict) -> None:
    """FalconModel.set_gguf_parameters."""
    w.add_context_length(2048)
    w.add_tensor_data_layout("jploski")
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(4 * hp["hidden_size"])
    w.add_block_count(hp["num_hidden_layers"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_head_count_kv(_falcon_kv(hp))
    w.add_layer_norm_eps(hp["layer_norm_epsilon"])


def _bloom_meta(w: Any, hp: dict) -> None:
    from test_gguf_families import _bloom as bloom_meta  # BloomModel.set_gguf_parameters

    bloom_meta(w, transformers.BloomConfig(**hp))


def _plain(name: str, data_torch: torch.Tensor, hp: dict) -> tuple[str, torch.Tensor]:
    return name, data_torch


def _find(hp: dict, keys: list[str]) -> Any:
    """ModelBase.find_hparam: the first of `keys` in config.json."""
    return next(hp[k] for k in keys if k in hp)


def _llama_permute(weights: torch.Tensor, n_head: int, n_head_kv: int | None) -> torch.Tensor:
    """LlamaModel.permute (conversion/llama.py), as written there."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))


def _llama(name: str, data_torch: torch.Tensor, hp: dict) -> tuple[str, torch.Tensor]:
    """LlamaModel.modify_tensors with undo_permute (ArceeModel, SmolLM3Model, GraniteModel's subclasses inherit it)."""
    n_head = _find(hp, ["n_heads", "num_attention_heads"])
    n_kv_head = _find(hp, ["n_kv_heads", "num_key_value_heads"])
    if name.endswith(("q_proj.weight", "q_proj.bias")):
        data_torch = _llama_permute(data_torch, n_head, n_head)
    if name.endswith(("k_proj.weight", "k_proj.bias")):
        data_torch = _llama_permute(data_torch, n_head, n_kv_head)
    return name, data_torch


def _granitemoe(name: str, data_torch: torch.Tensor, hp: dict) -> tuple[str, torch.Tensor] | list[tuple[str, torch.Tensor]]:
    """GraniteMoeModel.modify_tensors (conversion/granite.py): the experts' merged input_linear split into gate and up
    (blk.N.ffn_gate_exps / ffn_up_exps), the shared MLP's into ffn_gate_shexp / ffn_up_shexp; the rest LlamaModel's."""
    bid = re.search(r"\.(\d+)\.", name)
    for what, ffn, names in (("block_sparse_moe.input_linear.weight", "intermediate_size", ("ffn_gate_exps", "ffn_up_exps")),
                             ("shared_mlp.input_linear.weight", "shared_intermediate_size",
                              ("ffn_gate_shexp", "ffn_up_shexp"))):
        if name.endswith(what) and bid:
            gate, up = data_torch.split(hp[ffn], dim=-2)
            return [(f"blk.{bid[1]}.{names[0]}.weight", gate), (f"blk.{bid[1]}.{names[1]}.weight", up)]
    return _llama(name, data_torch, hp)


def _granitehybrid(name: str, data_torch: torch.Tensor, hp: dict) -> tuple[str, torch.Tensor] | list[tuple[str, torch.Tensor]]:
    """GraniteHybridModel.modify_tensors (conversion/granite.py): the MoE's input_linear and the shared MLP through
    GraniteMoeModel's, the attention layers (get_attn_layers: layer_types "attention") through GraniteMoeModel's, hence
    LlamaModel's permutation; the Mamba layers' dt_bias renamed dt_proj.bias (Mamba2Model.modify_tensors, conversion/
    mamba.py), with its A = -exp(A_log) (diff replays it; the reshapes are left out: diff compares squeezed shapes)."""
    bid = re.search(r"\.(\d+)\.", name)
    attn = [i for i, t in enumerate(hp["layer_types"]) if t == "attention"]
    if name.endswith("block_sparse_moe.input_linear.weight") or "shared_mlp" in name or (bid and int(bid[1]) in attn):
        return _granitemoe(name, data_torch, hp)
    if name.endswith(".dt_bias"):
        name = name.rpartition(".dt_bias")[0] + ".dt_proj.bias"
    if name.endswith(".A_log"):
        data_torch = -torch.exp(data_torch)
    return name, data_torch


def _qwen3next(name: str, data_torch: torch.Tensor, hp: dict) -> tuple[str, torch.Tensor]:
    """Qwen3NextModel.modify_tensors (conversion/qwen.py): A_log -> -exp(A_log), dt_bias renamed dt_proj.bias, conv1d
    squeezed, every norm.weight but linear_attn.norm's + 1 (its split of in_proj_qkvz into attn_qkv and attn_gate is left
    out here: diff aligns neither half)."""
    if name.endswith(".A_log"):
        data_torch = -torch.exp(data_torch)
    elif name.endswith(".dt_bias"):
        name = name.rpartition(".dt_bias")[0] + ".dt_proj.bias"
    elif "conv1d" in name:
        data_torch = data_torch.squeeze()
    elif name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
        data_torch = data_torch + 1
    return name, data_torch


def _reorder_v_heads(tensor: torch.Tensor, dim: int, num_k_heads: int, num_v_per_k: int, head_dim: int) -> torch.Tensor:
    """_LinearAttentionVReorderBase._reorder_v_heads (conversion/qwen.py), as written there (its LoRA branch aside)."""
    shape = list(tensor.shape)
    if dim < 0:
        dim += len(shape)
    new_shape = shape[:dim] + [num_k_heads, num_v_per_k, head_dim] + shape[dim + 1:]
    tensor = tensor.reshape(*new_shape)
    perm = list(range(len(new_shape)))
    perm[dim], perm[dim + 1] = perm[dim + 1], perm[dim]
    return tensor.permute(*perm).contiguous().reshape(*shape)


def _qwen35(name: str, data_torch: torch.Tensor, hp: dict) -> tuple[str, torch.Tensor]:
    """_LinearAttentionVReorderBase.modify_tensors (Qwen3_5TextModel): the linear attention's V heads from grouped to
    tiled order, then Qwen3NextModel's."""
    num_k_heads = hp.get("linear_num_key_heads", 0)
    num_v_heads = hp.get("linear_num_value_heads", 0)
    if num_k_heads > 0 and num_v_heads > 0 and num_k_heads != num_v_heads and "linear_attn." in name:
        head_k_dim = hp["linear_key_head_dim"]
        head_v_dim = hp["linear_value_head_dim"]
        num_v_per_k = num_v_heads // num_k_heads
        if ".in_proj_qkv." in name:
            q_dim = head_k_dim * num_k_heads
            k_dim = head_k_dim * num_k_heads
            q = data_torch[:q_dim]
            k = data_torch[q_dim:q_dim + k_dim]
            v = data_torch[q_dim + k_dim:]
            v = _reorder_v_heads(v, 0, num_k_heads, num_v_per_k, head_v_dim)
            data_torch = torch.cat([q, k, v], dim=0)
        elif ".in_proj_z." in name:
            data_torch = _reorder_v_heads(data_torch, 0, num_k_heads, num_v_per_k, head_v_dim)
        elif ".in_proj_b." in name or ".in_proj_a." in name:
            data_torch = _reorder_v_heads(data_torch, 0, num_k_heads, num_v_per_k, 1)
        elif ".A_log" in name or ".dt_bias" in name or ".dt_proj" in name:
            if data_torch.ndim == 1:
                data_torch = _reorder_v_heads(data_torch.unsqueeze(-1), 0, num_k_heads, num_v_per_k, 1).squeeze(-1)
            else:
                data_torch = _reorder_v_heads(data_torch, -1, num_k_heads, num_v_per_k, 1)
        elif ".conv1d" in name:
            data = data_torch.squeeze()
            qk_channels = head_k_dim * num_k_heads * 2
            qk_part = data[:qk_channels]
            v_part = data[qk_channels:]
            v_part = _reorder_v_heads(v_part, 0, num_k_heads, num_v_per_k, head_v_dim)
            data_torch = torch.cat([qk_part, v_part], dim=0)
        elif ".out_proj." in name:
            data_torch = _reorder_v_heads(data_torch, 1, num_k_heads, num_v_per_k, head_v_dim)
    return _qwen3next(name, data_torch, hp)


def _qwen35_meta(w: Any, hp: dict) -> None:
    """Qwen3NextModel.set_gguf_parameters' linear-attention keys (Qwen3.5's classes inherit them)."""
    _text_meta(w, hp)
    w.add_ssm_conv_kernel(hp["linear_conv_kernel_dim"])
    w.add_ssm_state_size(hp["linear_key_head_dim"])
    w.add_ssm_group_count(hp["linear_num_key_heads"])
    w.add_ssm_time_step_rank(hp["linear_num_value_heads"])
    w.add_ssm_inner_size(hp["linear_value_head_dim"] * hp["linear_num_value_heads"])


def _nemotron(name: str, data_torch: torch.Tensor, hp: dict) -> tuple[str, torch.Tensor]:
    """NemotronModel.modify_tensors (conversion/nemotron.py): LayerNorm1P's weights + 1."""
    if name.endswith("norm.weight"):
        data_torch = data_torch + 1
    return name, data_torch


def _gpt2(name: str, data_torch: torch.Tensor, hp: dict) -> tuple[str, torch.Tensor] | list[tuple[str, torch.Tensor]]:
    """GPT2Model.modify_tensors (conversion/gpt2.py): the attention's bias buffers dropped, the Conv1D weights
    transposed."""
    if name.endswith((".attn.bias", ".attn.masked_bias")):
        return []
    if name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight", ".c_proj.weight")):
        data_torch = data_torch.transpose(1, 0)
    return name, data_torch


def _gpt2_meta(w: Any, hp: dict) -> None:
    """GPT2Model.set_gguf_parameters (context n_ctx, which transformers 5's GPT2Config no longer writes: n_positions)."""
    w.add_block_count(hp["n_layer"])
    w.add_context_length(hp.get("n_ctx") or hp["n_positions"])
    w.add_embedding_length(hp["n_embd"])
    w.add_feed_forward_length(4 * hp["n_embd"])
    w.add_head_count(hp["n_head"])
    w.add_layer_norm_eps(hp["layer_norm_epsilon"])


def _text_meta(w: Any, hp: dict) -> None:
    """TextModel.set_gguf_parameters' size keys (the heads the permutation reads among them)."""
    w.add_block_count(hp["num_hidden_layers"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_head_count_kv(hp["num_key_value_heads"])


def _granitehybrid_meta(w: Any, hp: dict) -> None:
    """GraniteHybridModel.set_gguf_parameters: head_count_kv a per-layer array, 0 on the Mamba layers."""
    w.add_block_count(hp["num_hidden_layers"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_head_count_kv([hp["num_key_value_heads"] if t == "attention" else 0 for t in hp["layer_types"]])


def _no_meta(w: Any, hp: dict) -> None:
    pass


_FALCON = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=4)
_GQA = dict(vocab_size=64, hidden_size=32, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2)
PAIRS = {   # case: (family, config class, kwargs, model class, the converter's modify_tensors, its set_gguf_parameters)
    "qwen3": ("qwen3", "Qwen3Config", dict(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                           num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                           tie_word_embeddings=False), "Qwen3ForCausalLM", _plain, _no_meta),
    "gptneox": ("gptneox", "GPTNeoXConfig", dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                                 num_attention_heads=2), "GPTNeoXForCausalLM", _gptneox, _gptneox_meta),
    "phi": ("phi", "PhiConfig", dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                     num_attention_heads=2), "PhiForCausalLM", _plain, _no_meta),
    "bloom": ("bloom", "BloomConfig", dict(vocab_size=64, hidden_size=16, n_layer=2, n_head=4), "BloomForCausalLM", _bloom,
              _bloom_meta),
    # Falcon-40B's layout: 2 kv groups of 2 query heads; multi-head (transformers' per-head [q k v], num_kv_heads =
    # heads in its config); Falcon-7B's multi-query as the converter reads an original config.json without num_kv_heads
    # (one group, the rows unchanged; under transformers 5 AutoConfig fills num_kv_heads with the head count and the
    # converter's view of the multi-query rows fails: no such file is written)
    "falcon-40b": ("falcon", "FalconConfig", dict(_FALCON, new_decoder_architecture=True, num_kv_heads=2),
                   "FalconForCausalLM", _falcon, _falcon_meta),
    "falcon-mha": ("falcon", "FalconConfig", dict(_FALCON, multi_query=False), "FalconForCausalLM", _falcon, _falcon_meta),
    "falcon-7b": ("falcon", "FalconConfig", dict(_FALCON, multi_query=True), "FalconForCausalLM", _falcon, _falcon_meta),
    # LlamaModel's q/k rotary permutation, inherited by these converters; Nemotron's norms + 1
    "arcee": ("arcee", "ArceeConfig", dict(_GQA, attention_bias=True), "ArceeForCausalLM", _llama, _text_meta),
    "smollm3": ("smollm3", "SmolLM3Config", dict(_GQA, num_hidden_layers=4, tie_word_embeddings=False, pad_token_id=0),
                "SmolLM3ForCausalLM", _llama, _text_meta),
    "granitemoe": ("granitemoe", "GraniteMoeSharedConfig", dict(_GQA, num_local_experts=2, num_experts_per_tok=1,
                                                                shared_intermediate_size=16),
                   "GraniteMoeSharedForCausalLM", _granitemoe, _text_meta),
    "nemotron": ("nemotron", "NemotronConfig", dict(_GQA, head_dim=8), "NemotronForCausalLM", _nemotron, _text_meta),
    # Granite 4: the attention layer's q/k permuted, the K heads read from the per-layer head_count_kv
    "granitemoehybrid": ("granitemoehybrid", "GraniteMoeHybridConfig",
                         dict(_GQA, num_hidden_layers=3, num_local_experts=4, num_experts_per_tok=2,
                              shared_intermediate_size=16, layer_types=["mamba", "attention", "mamba"], mamba_n_heads=4,
                              mamba_d_head=16, mamba_d_state=8, mamba_n_groups=2, mamba_d_conv=3, mamba_chunk_size=4),
                         "GraniteMoeHybridForCausalLM", _granitehybrid, _granitehybrid_meta),
    # Qwen3-Next's norms + 1 (its own RMSNorm scales by 1 + w; the gated linear_attn.norm does not)
    "qwen3next": ("qwen3_next", "Qwen3NextConfig", dict(_GQA, moe_intermediate_size=16, shared_expert_intermediate_size=16,
                                                         num_hidden_layers=4, head_dim=8, num_experts=4, num_experts_per_tok=2,
                                                         linear_num_value_heads=4, linear_num_key_heads=2,
                                                         linear_key_head_dim=8, linear_value_head_dim=16,
                                                         linear_conv_kernel_dim=4), "Qwen3NextForCausalLM", _qwen3next,
                  _text_meta),
    # Qwen3.5: the linear attention's V heads reordered (4 V heads over 2 K heads), then Qwen3NextModel's rewrites
    "qwen35": ("qwen3_5", "Qwen3_5TextConfig", dict(_GQA, num_hidden_layers=4, head_dim=8, intermediate_size=37,
                                                    linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
                                                    linear_value_head_dim=16, linear_conv_kernel_dim=4),
               "Qwen3_5ForCausalLM", _qwen35, _qwen35_meta),
    # the Conv1D transposes: attn.c_proj is square ([h, h]: shapes alike, values not), the others [in, out] vs [out, in]
    "gpt2": ("gpt2", "GPT2Config", dict(vocab_size=64, n_embd=16, n_layer=2, n_head=2, n_positions=32, bos_token_id=0,
                                        eos_token_id=0, tie_word_embeddings=False), "GPT2LMHeadModel", _gpt2, _gpt2_meta),
}
# rewrites diff does not undo (docs/gguf.md): a tensor split under other names (removed / added), a value rewrite it does
# not replay (values); the HF names left out of the `transform` rows expected
SPLIT = {"granitemoe": r"input_linear\.weight$|\.ffn_(gate|up)_(exps|shexp)\.weight$",
         "granitemoehybrid": r"input_linear\.weight$|\.ffn_(gate|up)_(exps|shexp)\.weight$",
         # -exp(A_log), not replayed here (Mamba's is: tests/test_gguf_converted_families.py)
         "qwen3next": r"\.A_log$",
         "qwen35": r"\.A_log$"}


@pytest.mark.parametrize("case", list(PAIRS))
def test_hf_gguf_pair_diffs_equal(case, tmp_path):
    """The same weights saved by safetensors under HF names and by GGUFWriter as llama.cpp's converter writes them: its
    value rewrites (modify_tensors, reimplemented above from its code), TensorNameMap's names, its metadata. Where the
    converter regrouped a fused QKV, diff compares after replaying that (the row's `transform`) and finds every tensor
    equal; the regrouped tensors are not equal as stored (a test that diff replays it, not that the rows happen to
    agree)."""
    family, config, kwargs, cls, convert, meta = PAIRS[case]
    torch.manual_seed(0)
    cfg = getattr(transformers, config)(**kwargs)
    model = getattr(transformers, cls)(cfg)
    with torch.no_grad():   # biases too (initialised to zeros, which any row order leaves as they are)
        for p in model.parameters():
            p.copy_(torch.randn_like(p))
    sd = {k: v.detach().contiguous() for k, v in saved_state(model).items()}
    save_file(sd, str(tmp_path / "hf.safetensors"))
    hp = cfg.to_dict()
    if case == "falcon-7b":   # tiiuae/falcon-7b's config.json has no num_kv_heads (transformers 5 writes the head count)
        hp.pop("num_kv_heads")
    if case == "granitemoehybrid":   # Granite 4's config.json as released: transformers 5 writes full/linear_attention,
        # which GraniteHybridModel.get_attn_layers does not know (it then converts every layer as Mamba, no permutation)
        hp["layer_types"] = ["attention" if t == "full_attention" else "mamba" for t in hp["layer_types"]]
    arch = _arch(get(family), cfg)
    names = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), gguf.MODEL_ARCH_NAMES[arch])
    meta(w, hp)
    rewritten = set()
    stacks: dict[str, dict[int, torch.Tensor]] = {}
    for k, v in sd.items():
        if m := _EXPERT.match(k):   # Qwen2MoeModel.modify_tensors (Qwen3-Next's): each layer's experts stacked
            stacks.setdefault(f"{m[1]}.{m[3]}.weight", {})[int(m[2])] = v
            continue
        out = convert(k, v, hp)
        # rewritten in place: values moved or changed (a squeeze is neither; a split goes under other names)
        if not isinstance(out, list) and (out[1].numel() != v.numel() or not torch.equal(out[1].reshape(v.shape), v)):
            rewritten.add(k)
        for name, data in out if isinstance(out, list) else [out]:
            g = name if name.startswith("blk.") else names.get_name(name, try_suffixes=(".weight", ".bias"))
            if g is not None:
                w.add_tensor(g, data.float().numpy().astype(np.float32))
    for k, per in stacks.items():
        w.add_tensor(names.get_name(k, try_suffixes=(".weight",)), torch.stack([per[e] for e in range(len(per))]).numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = diff(open_checkpoint(str(tmp_path / "hf.safetensors")), open_checkpoint(str(tmp_path / "m.gguf")))
    assert r["builtin_map"] and family in r["builtin_map"]
    split = SPLIT.get(case, r"(?!)")
    assert {t["status"] for t in r["tensors"] if not re.search(split, t["a_name"] or t["b_name"])} == {"equal"}, \
        [(t["a_name"], t["b_name"], t["status"]) for t in r["tensors"]
         if t["status"] != "equal" and not re.search(split, t["a_name"] or t["b_name"])][:4]
    assert {t["status"] for t in r["tensors"] if re.search(split, t["a_name"] or t["b_name"])} <= {"removed", "added",
                                                                                                  "values"}
    assert {t["a_name"] for t in r["tensors"] if t.get("transform")} == {n for n in rewritten if not re.search(split, n)}
    regrouped = {"gptneox", "bloom", "falcon-40b", "falcon-mha"}
    assert bool(rewritten) == (case not in ("qwen3", "phi", "falcon-7b"))
    if case in regrouped:   # every layer's fused QKV weight, and its bias where the model has one
        assert {re.sub(r"\.\d+\.", ".N.", n) for n in rewritten} >= {
            re.sub(r"\.\d+\.", ".N.", n) for n in sd if n.endswith("query_key_value.weight")}


_EXPERT = re.compile(r"^(.*\.experts)\.(\d+)\.(\w+)\.weight$")
MOE = {   # family: (config class, kwargs, model class, llama.cpp architecture, GGUF metadata key -> the config's field)
    "mixtral": ("MixtralConfig", dict(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, num_local_experts=3),
                "MixtralForCausalLM", gguf.MODEL_ARCH.LLAMA, {"llama.expert_count": "num_local_experts"}),
    "qwen_moe": ("Qwen2MoeConfig", dict(vocab_size=64, hidden_size=64, intermediate_size=64, moe_intermediate_size=64,
                                        shared_expert_intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                        num_key_value_heads=1, num_experts=3, num_experts_per_tok=2),
                 "Qwen2MoeForCausalLM", gguf.MODEL_ARCH.QWEN2MOE, {}),
}


@pytest.mark.parametrize("family", list(MOE))
@pytest.mark.parametrize("q8", [False, True])
def test_stacked_experts_diff_slice_by_slice(family, q8, tmp_path):
    """llama.cpp's converter stacks each layer's experts into blk.N.ffn_{gate,up,down}_exps [experts, out, in]
    (np.stack in expert order; the stacked HF name is what TensorNameMap maps). diff compares expert E of the HF
    file with slice E of the stack: equal when written from the same weights (Q8_0 stacks within their
    quantisation error), and a changed expert shows as that expert alone. The oracle for Q8_0 values is gguf-py's
    dequantize."""
    from gguf import quants
    config, kwargs, cls, arch, meta = MOE[family]
    torch.manual_seed(0)
    model = getattr(transformers, cls)(getattr(transformers, config)(**kwargs))
    sd = {k: v.detach().float().contiguous() for k, v in saved_state(model).items()}
    save_file(sd, str(tmp_path / "hf.safetensors"))
    names = gguf.get_tensor_name_map(arch, kwargs["num_hidden_layers"])
    stacks: dict[str, dict[int, np.ndarray]] = {}
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), gguf.MODEL_ARCH_NAMES[arch])
    for key, field in meta.items():
        w.add_uint32(key, kwargs[field])
    for k, v in sd.items():
        if m := _EXPERT.match(k):
            stacks.setdefault(f"{m[1]}.{m[3]}.weight", {})[int(m[2])] = v.numpy()
        elif (g := names.get_name(k, try_suffixes=(".weight", ".bias"))) is not None:
            w.add_tensor(g, v.numpy())
    changed = None
    for k, per in stacks.items():
        data = np.stack([per[e] for e in range(len(per))])
        if changed is None:   # the first stack's expert 1, nudged
            data[1, 0, 0] += 1.0
            changed = (k, 1)
        g = names.get_name(k, try_suffixes=(".weight",))
        assert g is not None and g.endswith("_exps.weight"), k
        if q8:
            w.add_tensor(g, quants.quantize(data, gguf.GGMLQuantizationType.Q8_0), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(g, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    gg = open_checkpoint(str(tmp_path / "m.gguf"))
    r = diff(open_checkpoint(str(tmp_path / "hf.safetensors")), gg, atol=0.02 if q8 else 0.0)
    assert r["builtin_map"] and family in r["builtin_map"]
    prefix, proj = changed[0].rsplit(".experts.", 1)
    nudged = (f"{prefix}.experts.{changed[1]}.{proj}", f"{names.get_name(changed[0], try_suffixes=('.weight',))}[1]")
    slices = {(t["a_name"], t["b_name"]): t for t in r["tensors"] if (t["b_name"] or "").endswith("]")}
    assert len(slices) == sum(len(per) for per in stacks.values()) and nudged in slices
    assert all(t["a_shape"] == t["b_shape"] for t in slices.values())
    off = {(t["a_name"], t["b_name"]) for t in r["tensors"] if t["status"] != "equal"}
    if q8:   # F32 against Q8_0: every slice's dtype differs, each a faithful Q8_0 rounding ("converted") but
        # the nudged one, out of tolerance and of Q8_0's bound
        assert off == set(slices) and {k for k, t in slices.items() if t["status"] != "converted"} == {nudged}
        assert slices[nudged]["status"] == "dtype"
        assert [k for k, t in slices.items() if not t["within_tolerance"]] == [nudged]
    else:
        assert off == {nudged} and slices[nudged]["status"] == "values"
    assert len(r["tensors"]) == len(sd)   # every HF tensor has its GGUF counterpart, nothing left over
    if q8:   # the slices read as gguf-py dequantizes the stack
        stack = next(n for n in gg.tensors if n.endswith("_exps.weight"))
        from ckptstat.analysis.diff import _unstacked
        sliced = _unstacked(gg, gguf_rules(gg)[1], lambda key: True)
        whole = quants.dequantize(np.fromfile(str(tmp_path / "m.gguf"), np.uint8, gg.tensors[stack].nbytes,
                                              offset=gg.tensors[stack].offset).reshape(gg.tensors[stack].shape[0], -1),
                                  gguf.GGMLQuantizationType.Q8_0)
        for e in range(gg.tensors[stack].shape[0]):
            got = sliced.read(f"{stack}[{e}]")
            np.testing.assert_array_equal(got.reshape(-1), whole[e].reshape(-1))
