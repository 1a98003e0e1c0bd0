"""Gemma, Gemma2 and Gemma3 text (transformers modeling_gemma.py, modeling_gemma2.py, modeling_gemma3.py's
Gemma3ForCausalLM / Gemma3TextModel, model_type gemma3_text): LLaMA layouts (layout.py) with head_dim from the
config (256 in most), a GeGLU MLP (gelu_pytorch_tanh(gate) x up), RMSNorm scaled by (1 + weight) (the same
counts as LLaMA's), the embedding output multiplied by sqrt(hidden_size), and the LM head tied to the embedding
by default. Gemma2 adds sandwich norms (pre/post feed-forward norms around the MLP: four norms a layer), tanh
soft-capping of the attention scores (attn_logit_softcapping) and of the final logits (final_logit_softcapping),
and layers that alternate between a sliding window (`sliding_window`) and global attention (`layer_types`).
VaultGemma (modeling_vaultgemma.py) is Gemma2 less the two post norms (pre-norm layers).
Gemma3 keeps Gemma2's layer and adds q/k RMSNorm per head (q_norm, k_norm over head_dim), a second, local
rotary table (rope_local_base_freq) for the sliding layers, and 5 sliding layers to 1 global (`layer_types`,
or the older sliding_window_pattern).

Eager attention on one forward masks the window: the score and context bmm's span every key, so the
matmul FLOPs of sliding and global layers are alike; the window shows in the KV cache (sliding layers
keep only the window) and, with --causal-halving, in the unmasked pairs counted."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

# llama.cpp's gemma and gemma2 write no output tensor (they always read the LM head as the embedding); gemma3 does
GEMMA = DecoderLayout(mlp_bias=False, tied_default=True, embed_scale=True, gguf_renames=(("output", None),),
                      task_heads=("seqcls", "tokcls"), paths=Paths(tokcls="score"))
GEMMA2 = replace(GEMMA, placement="sandwich", softcap=True, paths=replace(GEMMA.paths, mlp_in="pre_feedforward_layernorm"))
GEMMA3 = replace(GEMMA2, qk_norm="head", local_rope=True, gguf_renames=())
VAULTGEMMA = replace(GEMMA2, placement="pre")   # Gemma2's layer without the post-attention and post-MLP norms
LAYOUTS = {"gemma": GEMMA, "gemma2": GEMMA2, "gemma3_text": GEMMA3, "vaultgemma": VAULTGEMMA}

# Gemma2/3's default layer pattern: a global layer every `period` layers, sliding ones between
_PERIOD = {"gemma2": 2, "gemma3_text": 6, "vaultgemma": 2}


def from_config(c: Cfg) -> ArchSpec:
    mt = c.model_type
    spec = layout.spec_from_config(LAYOUTS[mt], c)
    L = spec.layers
    later = mt != "gemma"
    window = c.int("sliding_window", default=0) if later else 0
    types = c.get("layer_types", default=None) if later else None
    if types is None and later:
        period = c.int("sliding_window_pattern", default=_PERIOD.get(mt, 2))
        types = ["sliding_attention" if (i + 1) % period else "full_attention" for i in range(L)]
    if types is not None and (not isinstance(types, list) or len(types) != L):
        raise UsageError(f"{c.path}: config layer_types = {types!r} is not a list of {L} layer types")
    sliding = tuple(i for i, t in enumerate(types or ()) if t == "sliding_attention") if window else ()
    act = c.get("hidden_activation", default=None) or c.get("hidden_act", default="gelu_pytorch_tanh")
    # no window when no layer slides (layer_types all "full_attention"): an empty sliding_layers with a window
    # would mean every layer slides (archspec.py)
    return replace(spec, activation=str(act),
                   sliding_window=(window or None) if sliding else None, sliding_layers=sliding)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Gemma2/3 and VaultGemma files (pre_feedforward_layernorm; Gemma3 has q_norm too, VaultGemma no
    post_feedforward_layernorm). Gemma 1's names are LLaMA's and are read by llama.py."""
    g3 = infer.has(T, layout.pattern(GEMMA3, "attn_q_norm"))
    vault = not infer.has(T, layout.pattern(GEMMA2, "post_ffw_norm"))
    mt, window = ("gemma3_text", 1024) if g3 else ("vaultgemma", 4096) if vault else ("gemma2", 4096)
    spec = layout.spec_from_tensors(LAYOUTS[mt], T, dict(common, model_type=mt))
    notes = spec.assumptions
    if not g3:      # head_dim 256 where it divides both widths (the released Gemma2's), else the layout's guess
        q, kv = spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim
        d = 256 if q % 256 == 0 and kv % 256 == 0 else spec.head_dim
        spec = replace(spec, heads=q // d, kv_heads=kv // d, head_dim=d)
        notes = (f"no config: head_dim assumed {d} (KV-cache bytes use the k_proj width, which is exact)",)
    L = spec.layers
    notes += (f"no config: read as {mt}; sliding window {window} on layers {_PERIOD[mt] - 1} of every {_PERIOD[mt]}"
              " and soft-capping assumed as in the released models (only the KV cache depends on them)",)
    return replace(spec, activation="gelu_pytorch_tanh", sliding_window=window, mlp_bias=False,
                   sliding_layers=tuple(i for i in range(L) if (i + 1) % _PERIOD[mt]), attn_softcap=not g3,
                   logit_softcap=not g3, assumptions=notes)


# llama.cpp architecture -> (model_type, class) (convert_hf_to_gguf.py GemmaModel, Gemma2Model, Gemma3Model).
GGUF_CLASSES = {"gemma": ("gemma", "GemmaForCausalLM"), "gemma2": ("gemma2", "Gemma2ForCausalLM"),
                "gemma3": ("gemma3_text", "Gemma3ForCausalLM")}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """`{arch}.*` keys as the converter writes them (head_dim is attention.key_length); Gemma2/3 add
    attention.sliding_window, and Gemma2 attn_logit_ / final_logit_softcapping. llama.cpp fixes which layers
    slide (every 2nd layer is global in Gemma2, every 6th in Gemma3: from_config's defaults) unless the file
    says attention.sliding_window_pattern (a period). The converter drops lm_head (llama.cpp always ties it)."""
    if arch not in GGUF_CLASSES:
        return None
    model_type, cls = GGUF_CLASSES[arch]
    cfg = infer.gguf_config(arch, metadata, tensors, cls)
    if cfg is None:
        return None
    cfg["model_type"] = model_type
    if (window := infer.gguf_int(metadata, f"{arch}.attention.sliding_window")) is not None:
        cfg["sliding_window"] = window
    if (period := infer.gguf_int(metadata, f"{arch}.attention.sliding_window_pattern")) is not None:
        cfg["sliding_window_pattern"] = period
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        cfg[key] = infer.gguf_float(metadata, f"{arch}.{key}")
    return cfg


# HF module -> llama.cpp GGUF tensor name (gguf-py tensor_mapping.py, MODEL_ARCH.GEMMA / GEMMA2 / GEMMA3), from the
# layouts' walk. Gemma 1's post_attention_layernorm is the MLP's pre-norm, ffn_norm, as LLaMA's (gguf_table);
# Gemma2/3's ffn_norm is pre_feedforward_layernorm. The converter adds 1 to every norm weight (llama.cpp's RMSNorm
# scales by w, Gemma's by 1 + w): the names align, the norms' values differ by 1.
GGUF_TENSOR_NAMES = layout.gguf_tensor_names(GEMMA3, GEMMA2)
_GEMMA1_NAMES = layout.gguf_tensor_names(GEMMA)


def gguf_table(arch: str, names: Collection[str]) -> tuple[tuple[str, str], ...]:
    return _GEMMA1_NAMES if arch == "gemma" else GGUF_TENSOR_NAMES


_SIZES = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=64)

FAMILY = Family(
    name="gemma",
    before=("llama", "olmo", "qwen3"),   # tried before them: Gemma3 files have self_attn.q_norm and LLaMA's q_proj names
    **{**layout.family_fields(LAYOUTS, "attn_q"),
       # Gemma2/3's four norms a layer; Gemma 1's names are LLaMA's (its files read as llama, same counts)
       "signature": r"(^|[./])layers[./]\d+[./]pre_feedforward_layernorm[./]",
       "from_config": from_config, "from_tensors": from_tensors, "gguf_tensor_names": GGUF_TENSOR_NAMES},
    gguf_architectures=tuple(GGUF_CLASSES), gguf_config=gguf_config, gguf_table=gguf_table,
    # convert_hf_to_gguf.py's GemmaModel, Gemma2Model, Gemma3Model: `norm.weight` + 1, every norm
    gguf_transforms=tuple((arch, r"norm\.weight$", "plus_one") for arch in GGUF_CLASSES)
    + (("gemma3", r"(^|\.)embed_tokens\.weight$", "vocab_cut"),),   # Gemma3Model cuts it to the tokenizer's tokens
    samples=(
        # Gemma 1's tensor names are LLaMA's: detected as llama (the counts agree), no shape inference here
        Sample("GemmaConfig", _SIZES, ("GemmaModel", "GemmaForCausalLM"), detected_as="llama"),
        Sample("GemmaConfig", dict(_SIZES, tie_word_embeddings=False, attention_bias=True), ("GemmaForCausalLM",),
               detected_as="llama"),
        Sample("Gemma2Config", dict(_SIZES, sliding_window=4), ("Gemma2Model", "Gemma2ForCausalLM")),
        Sample("Gemma3TextConfig", dict(_SIZES, sliding_window=4, num_hidden_layers=4,
                                        layer_types=["sliding_attention", "full_attention"] * 2),
               ("Gemma3TextModel", "Gemma3ForCausalLM")),
        Sample("Gemma3TextConfig", dict(_SIZES, sliding_window=4, num_hidden_layers=7, tie_word_embeddings=False,
                                        final_logit_softcapping=30.0, attn_logit_softcapping=50.0),
               ("Gemma3ForCausalLM",)),
        Sample("VaultGemmaConfig", dict(_SIZES, sliding_window=4), ("VaultGemmaModel", "VaultGemmaForCausalLM")),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("Gemma2Config", dict(_SIZES, sliding_window=4, num_labels=3, pad_token_id=0),
               ("Gemma2ForSequenceClassification",), device="cpu"),
        Sample("Gemma3TextConfig", dict(_SIZES, sliding_window=4, num_hidden_layers=4, num_labels=3, pad_token_id=0,
                                        layer_types=["sliding_attention", "full_attention"] * 2),
               ("Gemma3TextForSequenceClassification",), device="cpu"),
        Sample("Gemma2Config", dict(_SIZES, sliding_window=4, num_labels=3, pad_token_id=0),
               ("Gemma2ForTokenClassification",), device="cpu"),
        Sample("GemmaConfig", dict(_SIZES, num_labels=3, pad_token_id=0),
               ("GemmaForSequenceClassification", "GemmaForTokenClassification"), device="cpu", detected_as="llama"),
    ),
)
