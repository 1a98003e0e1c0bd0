"""Gemma, Gemma2 and Gemma3 text (transformers modeling_gemma.py, modeling_gemma2.py, modeling_gemma3.py's
Gemma3ForCausalLM / Gemma3TextModel, model_type gemma3_text): LLaMA-style decoders with head_dim from the
config (256 in most), a GeGLU MLP (gelu_pytorch_tanh(gate) x up), RMSNorm scaled by (1 + weight), the
embedding output multiplied by sqrt(hidden_size), and the LM head tied to the embedding by default.
Gemma2 adds pre/post feed-forward norms around the MLP (four norms a layer), tanh soft-capping of the
attention scores (attn_logit_softcapping) and of the final logits (final_logit_softcapping), and layers
that alternate between a sliding window (`sliding_window`) and global attention (`layer_types`).
Gemma3 keeps Gemma2's layer and adds q/k RMSNorm per head (q_norm, k_norm over head_dim), a second,
local rotary table (rope_local_base_freq) for the sliding layers, and 5 sliding layers to 1 global
(`layer_types`, or the older sliding_window_pattern).

Eager attention on one forward masks the window: the score and context bmm's span every key, so the
matmul FLOPs of sliding and global layers are alike; the window shows in the KV cache (sliding layers
keep only the window) and, with --causal-halving, in the unmasked pairs counted.

Family-specific switches (ArchSpec.extra, 1 or 0): sandwich (pre/post feed-forward norms), qk_norm,
attn_softcap, final_softcap, local_rope."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..errors import UsageError
from . import decoders, infer, llama
from .base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, TieRule, add_norm, decoder_kv_cache
from .decoders import count
from .decoders import flag as xs
from .ops import Builder, ew_cost

# Gemma2/3's default layer pattern: a global layer every `period` layers, sliding ones between
_PERIOD = {"gemma2": 2, "gemma3_text": 6}


def from_config(c: Cfg) -> ArchSpec:
    h, a, L = c.int("hidden_size"), c.int("num_attention_heads"), count(c, "num_hidden_layers")
    mt = c.model_type
    later = mt != "gemma"
    window = c.int("sliding_window", default=0) if later else 0
    types = c.get("layer_types", default=None) if later else None
    if types is None and later:
        period = c.int("sliding_window_pattern", default=_PERIOD.get(mt, 2))
        types = ["sliding_attention" if (i + 1) % period else "full_attention" for i in range(L)]
    if types is not None and (not isinstance(types, list) or len(types) != L):
        raise UsageError(f"{c.path}: config layer_types = {types!r} is not a list of {L} layer types")
    sliding = tuple(i for i, t in enumerate(types or ()) if t == "sliding_attention") if window else ()
    bias = bool(c.get("attention_bias", default=False))
    act = c.get("hidden_activation", default=None) or c.get("hidden_act", default="gelu_pytorch_tanh")
    extra = (("sandwich", int(later)), ("qk_norm", int(mt == "gemma3_text")),
             ("attn_softcap", int(later and c.get("attn_logit_softcapping", default=None) is not None)),
             ("final_softcap", int(later and c.get("final_logit_softcapping", default=None) is not None)),
             ("local_rope", int(mt == "gemma3_text")))
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=c.int("num_key_value_heads", default=a),
                    head_dim=c.int("head_dim", default=h // a), intermediate=c.int("intermediate_size"),
                    vocab=c.int("vocab_size"), context=c.int("max_position_embeddings", default=0),
                    activation=str(act), gated_mlp=True, norm="rmsnorm", qkv_bias=bias, o_bias=bias, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    # no window when no layer slides (layer_types all "full_attention"): an empty sliding_layers
                    # with a window would mean every layer slides (archspec.py)
                    sliding_window=(window or None) if sliding else None, sliding_layers=sliding, extra=extra,
                    **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Gemma2/3 files (pre_feedforward_layernorm; Gemma3 has q_norm too). Gemma 1's names are LLaMA's and
    are read by llama.py."""
    V, h, q, kv, d = decoders.attention_dims(T)
    qn = infer.find(T, r"self_attn\.q_norm\.weight$")
    g3 = qn is not None
    notes: tuple[str, ...] = ()
    if qn is not None:
        d = qn.shape[0]
    else:
        d = 256 if q % 256 == 0 and kv % 256 == 0 else d
        notes += (f"no config: head_dim assumed {d} (KV-cache bytes use the k_proj width, which is exact)",)
    L = infer.count_layers(T, r"layers\.(\d+)\.")
    mt, window = ("gemma3_text", 1024) if g3 else ("gemma2", 4096)
    sliding = tuple(i for i in range(L) if (i + 1) % _PERIOD[mt])
    notes += (f"no config: read as {mt}; sliding window {window} on layers {_PERIOD[mt] - 1} of every {_PERIOD[mt]}"
              " and soft-capping assumed as in the released models (only the KV cache depends on them)",)
    extra = (("sandwich", 1), ("qk_norm", int(g3)), ("attn_softcap", int(not g3)), ("final_softcap", int(not g3)),
             ("local_rope", int(g3)))
    return ArchSpec(layers=L, hidden=h, heads=q // d, kv_heads=kv // d, head_dim=d, vocab=V,
                    intermediate=infer.shape(T, r"mlp\.gate_proj\.weight$", "gate_proj")[0], gated_mlp=True,
                    norm="rmsnorm", qkv_bias=infer.has(T, r"q_proj\.bias$"), o_bias=infer.has(T, r"o_proj\.bias$"),
                    mlp_bias=False, tied_embeddings=infer.find(T, r"lm_head\.weight$") is None,
                    activation="gelu_pytorch_tanh", sliding_window=window, sliding_layers=sliding, extra=extra,
                    assumptions=notes, **common)


def attention(B: Builder, lay: str, calls: int, window: int | None) -> None:
    s, b, n = B.s, B.b, B.seq
    h, a, g, d = s.hidden, s.heads, s.kv_heads, s.head_dim
    tok, at = (b, n), f"{lay}.self_attn"
    B.norm(f"{lay}.input_layernorm", "encoder", tok, h, calls, residual=False)
    B.linear(f"{at}.q_proj", "encoder", tok, h, a * d, s.qkv_bias, calls)
    B.linear(f"{at}.k_proj", "encoder", tok, h, g * d, s.qkv_bias, calls)
    B.linear(f"{at}.v_proj", "encoder", tok, h, g * d, s.qkv_bias, calls)
    if xs(s, "qk_norm"):
        B.norm(f"{at}.q_norm", "encoder", (b, n, a), d, calls, residual=False)
        B.norm(f"{at}.k_norm", "encoder", (b, n, g), d, calls, residual=False)
    B.add(f"{at} rotary", "activation", "encoder", calls, tok + ((a + g) * d,), tok + ((a + g) * d,),
          ew=b * n * (a + g) * d * ew_cost("rotary"))
    # scale, mask; soft-capping is tanh(x / cap) x cap on every score
    B.attention(at, "encoder", a, n, n, d, calls, causal=True, window=window,
                extra_ew=2 + (ew_cost("tanh") + 2 if xs(s, "attn_softcap") else 0))
    B.linear(f"{at}.o_proj", "encoder", tok, a * d, h, s.o_bias, calls)
    # Gemma: post_attention_layernorm is the MLP's pre-norm; Gemma2/3: it normalises the attention output
    B.norm(f"{lay}.post_attention_layernorm", "encoder", tok, h, calls)


def mlp(B: Builder, lay: str, calls: int) -> None:
    s, tok = B.s, (B.b, B.seq)
    h, f = s.hidden, s.intermediate
    if xs(s, "sandwich"):
        B.norm(f"{lay}.pre_feedforward_layernorm", "encoder", tok, h, calls, residual=False)
    B.linear(f"{lay}.mlp.gate_proj", "encoder", tok, h, f, False, calls)
    B.linear(f"{lay}.mlp.up_proj", "encoder", tok, h, f, False, calls)
    B.activation(f"{lay}.mlp act*up (GeGLU)", "encoder", tok, f, s.activation, calls, gated=True)
    B.linear(f"{lay}.mlp.down_proj", "encoder", tok, f, h, False, calls)
    if xs(s, "sandwich"):
        B.norm(f"{lay}.post_feedforward_layernorm", "encoder", tok, h, calls)


def build(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, d, L = s.hidden, s.head_dim, s.layers
    B.embedding("embed_tokens", "embedding", s.vocab, h, n)
    B.add("embed_tokens x sqrt(hidden_size)", "activation", "embedding", 1, (b, n, h), (b, n, h), ew=b * n * h)
    # the rotary tables; Gemma3 has a second, local one for its sliding layers
    for name in ("rotary_emb", "rotary_emb_local") if xs(s, "local_rope") else ("rotary_emb",):
        decoders.rotary(B, d, name)
    ns = len(s.sliding_layers)
    for label, calls, window in ((f"layers[{ns} sliding]", ns, s.sliding_window), (f"layers[{L - ns} global]", L - ns, None)):
        if calls:
            attention(B, label, calls, window)
            mlp(B, label, calls)
    B.norm("norm", "encoder", (b, n), h, residual=False)
    if s.head == "lm":
        B.linear("lm_head" + (" (tied to embed_tokens)" if s.tied_embeddings else ""), "cls", (b, n), h, s.vocab, False,
                 tied=s.tied_embeddings)
        if xs(s, "final_softcap"):
            B.add("final logit soft-capping (tanh(x / cap) x cap)", "activation", "cls", 1, (b, n, s.vocab),
                  (b, n, s.vocab), ew=b * n * s.vocab * (ew_cost("tanh") + 2))


def layer_tensors(out: Shapes, q: str, s: ArchSpec) -> None:
    decoders.dense_mlp_tensors(out, q, s)
    if xs(s, "sandwich"):
        add_norm(out, q + "pre_feedforward_layernorm", s.hidden, bias=False)
        add_norm(out, q + "post_feedforward_layernorm", s.hidden, bias=False)
    if xs(s, "qk_norm"):
        add_norm(out, q + "self_attn.q_norm", s.head_dim, bias=False)
        add_norm(out, q + "self_attn.k_norm", s.head_dim, bias=False)


def expected_tensors(s: ArchSpec) -> Shapes:
    return decoders.decoder_tensors(s, layer_tensors)


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


# HF module -> llama.cpp GGUF tensor name (gguf-py tensor_mapping.py, MODEL_ARCH.GEMMA2 / GEMMA3). Gemma 1's
# post_attention_layernorm is the MLP's pre-norm, ffn_norm, as LLaMA's (gguf_table); Gemma2/3's ffn_norm is
# pre_feedforward_layernorm. The converter adds 1 to every norm weight (llama.cpp's RMSNorm scales by w, Gemma's
# by 1 + w): the names align, the norms' values differ by 1.
GGUF_TENSOR_NAMES = tuple(p for p in llama.GGUF_TENSOR_NAMES if p[1] != "blk.{bid}.ffn_norm") + (
    ("model.layers.{bid}.post_attention_layernorm", "blk.{bid}.post_attention_norm"),
    ("model.layers.{bid}.pre_feedforward_layernorm", "blk.{bid}.ffn_norm"),
    ("model.layers.{bid}.post_feedforward_layernorm", "blk.{bid}.post_ffw_norm"),
    ("model.layers.{bid}.self_attn.q_norm", "blk.{bid}.attn_q_norm"),
    ("model.layers.{bid}.self_attn.k_norm", "blk.{bid}.attn_k_norm"),
)


def gguf_table(arch: str, names: Collection[str]) -> tuple[tuple[str, str], ...]:
    return llama.GGUF_TENSOR_NAMES if arch == "gemma" else GGUF_TENSOR_NAMES


HEAD_RULES = llama.HEAD_RULES
_SIZES = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=64)

FAMILY = Family(
    name="gemma",
    before=("llama", "olmo", "qwen3"),   # tried before them: Gemma3 files have self_attn.q_norm and LLaMA's q_proj names
    model_types=("gemma", "gemma2", "gemma3_text"),
    # Gemma2/3's four norms a layer; Gemma 1's names are LLaMA's (its files read as llama, same counts)
    signature=r"(^|[./])layers[./]\d+[./]pre_feedforward_layernorm[./]",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm"),
    head_rules=HEAD_RULES,
    default_head="lm",
    # GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM: _tied_weights_keys ["lm_head.weight"]; tied by default
    tie_rules=(TieRule("lm_head.weight", "model.embed_tokens.weight", "config"),),
    tied_by_default=True,
    kv_cache=decoder_kv_cache,   # transformers' DynamicCache: a sliding layer keeps sliding_window - 1 tokens
    gguf_architectures=tuple(GGUF_CLASSES), gguf_config=gguf_config, gguf_tensor_names=GGUF_TENSOR_NAMES, gguf_table=gguf_table,
    # convert_hf_to_gguf.py's GemmaModel, Gemma2Model, Gemma3Model: `norm.weight` + 1, every norm
    gguf_transforms=tuple((arch, r"norm\.weight$", "plus_one") for arch in GGUF_CLASSES),
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
    ),
)
