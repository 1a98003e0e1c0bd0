"""DeepSeek-V2 and DeepSeek-V3 (transformers modeling_deepseek_v2.py, modeling_deepseek_v3.py).

Multi-head latent attention (MLA): queries through a low-rank pair q_a_proj (h -> q_lora_rank), RMSNorm,
q_b_proj (-> a x (qk_nope_head_dim + qk_rope_head_dim)), or one q_proj when q_lora_rank is null
(V2-Lite); keys and values from kv_a_proj_with_mqa (h -> kv_lora_rank + qk_rope_head_dim: the latent
and one shared rope key), RMSNorm on the latent, kv_b_proj (kv_lora_rank -> a x (qk_nope_head_dim +
v_head_dim)); scores over qk_nope + qk_rope dims, context over v_head_dim, o_proj (a x v_head_dim -> h).
The first first_k_dense_replace layers run a dense gated MLP (intermediate_size); the others a router
over n_routed_experts MLPs of moe_intermediate_size (top num_experts_per_tok per token) plus
n_shared_experts fused into one MLP of n_shared_experts x moe_intermediate_size. V3's noaux_tc router
scores by sigmoid and adds e_score_correction_bias (a buffer, not a parameter) when choosing experts;
its matmuls are V2's. The layout (layout.py: latent attention, a routed MLP with a summed shared expert and dense
layers) is the description; the routed experts' FLOPs are Qwen-MoE's (transformers 5's default grouped_mm experts
implementation, the top-k rows of each token).

KV cache: transformers 5, like an absorbed MLA kernel (DeepSeek's inference code, vLLM, SGLang), caches only the
normalised latent (kv_lora_rank) and the rope key (qk_rope_head_dim) per token and layer, one head that tensor
parallelism cannot split: the first line, what memory and the planner count. transformers 4's eager attention cached
the expanded per-head K (qk_nope + qk_rope) and V (v_head_dim) of every head: the second line, labelled.

ArchSpec: heads = key heads = num_attention_heads, head_dim = qk_nope + qk_rope, rope_dim = qk_rope, latent
(archspec.Latent): q_lora_rank (0: no q LoRA), kv_lora_rank, v_head_dim; moe_intermediate, shared_intermediate
(n_shared_experts x moe_intermediate_size)."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from .framework import infer, layout, mixers_kda
from .framework.archspec import Latent
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, KVLines, Sample, Tensors, class_default
from .framework.decoders import count
from .framework.layout import DecoderLayout, Paths
from .framework.layout_parts import task_labels
from .framework.layout_streams import GatedNorm, Hyper

DEEPSEEK = DecoderLayout(latent=True, mlp="routed", shared="summed", dense_layers=True,
                         paths=Paths(shared="shared_experts", tokcls="score"), task_heads=("seqcls", "tokcls"))
# GLM-4.7-Flash (modeling_glm4_moe_lite.py: DeepSeek-V3's attention in GLM-4-MoE's layers, the same MoE) and Youtu-LLM
# (modeling_youtu.py: DeepSeek-V3's attention in LLaMA's layers, every MLP dense: no n_routed_experts) are DeepSeek's
# A.X-K1 (modeling_axk1.py): DeepSeek-V3's with a norm over each MoE block's output; without mlp_layer_types its class
# places the MoE layers from first_k_dense_replace every moe_layer_freq layers (only 1 described here)
AXK1 = replace(DEEPSEEK, moe_out_norm=True, requires=(("moe_layer_freq", 1),))
# DeepSeek-V3.2 (modeling_deepseek_v32.py): V3's with DeepSeek Sparse Attention's indexer in every layer (always a query
# LoRA; its MLPs unbiased whatever mlp_bias says, as GLM-5's, A.X-K2's, HY-V4's, Dots3Note's); llama.cpp names the
# indexer's tensors only in its glm-dsa architecture, not in deepseek2's
V32 = replace(DEEPSEEK, indexer=True, mlp_bias=False, gguf_renames=tuple((g, None) for g in ("indexer.attn_q_b", "indexer.attn_k",
                                                                             "indexer.k_norm", "indexer.proj")))
# GLM-5 (modeling_glm_moe_dsa.py): V3.2's, with A.X-K1's attention (the same matmuls) and an indexer only on the
# layers its indexer_types marks "full" (the "shared" ones reuse the previous selection)
# A.X-K2 (modeling_axk2.py): V3.2's indexer (always a query LoRA), q_b_proj over [q_resid, q_compressed] writing each
# head's query and an output gate (DecoderLayout.q_gate), gated RMSNorms before the attention and before each MoE
# (gated_norms); its layers by mlp_layer_types, else A.X-K1's rule (moe_layer_freq 1 only)
AXK2 = replace(V32, q_gate=True, gated_norms=True, requires=(("moe_layer_freq", 1),))
# HY-V4 (modeling_hy_v4.py; its own family, hy_v4.py: llama.cpp has no architecture for it): GLM-5's indexer schedule
# (indexer_types), a learned sink per head and an output gate
# (gate_proj of the layer's input, v_head_dim per head) on the latent attention, hyper-connections over hc_mult copies
# of the stream (DecoderLayout.hyper), the experts held fused (gate_up_proj [E, 2f, h], down_proj [E, h, f]); saved as
# transformers 5.24 writes it back: the sinks as learnable_sink_param, every gate_proj (the attention's and the MLPs')
# as linear_gate, the connections under hc_pre (conversion_mapping.py's hy_v4 renames reversed)
HYV4 = replace(V32, sinks=True, attn_gate="width", hyper=True, linear_experts="parameters", task_heads=(),
               paths=Paths(shared="shared_experts", sinks="learnable_sink_param", attn_gate="linear_gate", gate="linear_gate",
                           stacked_in="gate_up_proj", stacked_out="down_proj"))
# Mistral 4 (modeling_mistral4.py): DeepSeek-V3's layers with DeepSeek-V2's router (no score-correction bias), the
# experts held fused (gate_up_proj [E, 2f, h], down_proj [E, h, f]) as save_pretrained writes them; its queries scaled
# by position (Llama 4's attention scale: element-wise)
MISTRAL4 = replace(DEEPSEEK, linear_experts="parameters",
                   paths=Paths(shared="shared_experts", tokcls="score", stacked_in="gate_up_proj", stacked_out="down_proj"))
LAYOUTS = {"deepseek_v2": DEEPSEEK, "deepseek_v3": DEEPSEEK, "glm4_moe_lite": DEEPSEEK, "youtu": DEEPSEEK, "axk1": AXK1,
           "deepseek_v32": V32, "glm_moe_dsa": V32, "axk2": AXK2, "mistral4": MISTRAL4}
# the dense layers when the config has no mlp_layer_types: the first first_k_dense_replace (DeepSeek's classes), or
# where the class has no such key, the first its class marks dense (Glm4MoeLiteConfig and AXK1Config: layer 0)
_FIRST_DENSE = {"glm4_moe_lite": 1, "axk1": 1, "axk2": 1, "hy_v4": 1}   # HY-V4: hy_v4.py


def _sizes(s: ArchSpec) -> Latent:
    assert s.latent is not None, "a DeepSeek spec has its latent attention's sizes"
    return s.latent


def _index_shared(c: Cfg, layers: int) -> tuple[int, ...]:
    """The layers config indexer_types marks "shared" (GLM-5; none without it). GlmMoeDsaConfig derives the list,
    when absent, from index_topk_pattern or index_topk_freq / index_skip_topk_offset: those are not described here."""
    kinds = c.cfg.get("indexer_types")
    if kinds is None:
        for key in ("index_topk_pattern", "index_topk_freq", "index_skip_topk_offset"):
            if c.cfg.get(key) is not None:
                raise NoAnalyticModel(f"{c.path}: config {key} without indexer_types: not described by the op template")
        return ()
    if not isinstance(kinds, list) or len(kinds) != layers or any(k not in ("full", "shared") for k in kinds):
        raise UsageError(f"{c.path}: config indexer_types is not a list of {layers} 'full' / 'shared'")
    return tuple(i for i, k in enumerate(kinds) if k == "shared")


def from_config(c: Cfg) -> ArchSpec:
    return latent_spec(LAYOUTS.get(c.model_type, DEEPSEEK), c)


def latent_spec(lay: DecoderLayout, c: Cfg, E: int | None = None, first: int | None = None) -> ArchSpec:
    """The spec of a DeepSeek-style config laid out as `lay` (HY-V4's, Kimi Linear's and Ling 3's too): the latent
    attention's sizes, E routed experts (None: n_routed_experts), the dense layers (mlp_layer_types, else the first
    `first`; None: first_k_dense_replace)."""
    # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    spec = layout.spec_from_config(lay, c)
    L, a = spec.layers, spec.heads
    nope, rope, v = c.int("qk_nope_head_dim"), c.int("qk_rope_head_dim"), c.int("v_head_dim")
    E = count(c, "n_routed_experts", default=0) if E is None else E
    first = c.int("first_k_dense_replace", default=_FIRST_DENSE.get(c.model_type, 0)) if first is None else first
    fe = c.int("moe_intermediate_size") if E else 0
    # q_lora_rank null (DeepSeek-V2-Lite): one q_proj, no query LoRA; absent: the config class's rank (DeepSeek-V3's
    # 1536; Ling 3's null)
    q_lora = c.get("q_lora_rank", default=None)
    q_lora = 0 if q_lora is None else c.int("q_lora_rank", default=FROM_CLASS)
    index = (c.int("index_n_heads"), c.int("index_head_dim"), _index_shared(c, L)) if lay.indexer else (0, 0, ())
    # A.X-K2, HY-V4: every layer's attention indexed (a layer_types "full_attention" caches no index keys)
    if (lay.gated_norms or lay.hyper) and any(t != "indexed_attention" for t in c.get("layer_types", default=None) or ()):
        raise NoAnalyticModel(f"{c.path}: config layer_types other than 'indexed_attention': not described by the op "
                              "template")
    if lay.gated_norms:
        spec = replace(spec, variant=GatedNorm(c.int("gated_norm_rank", default=FROM_CLASS)))
    if lay.hyper:
        spec = replace(spec, variant=Hyper(c.int("hc_mult", default=FROM_CLASS)))
    return replace(spec, kv_heads=a, head_dim=nope + rope, rope_dim=rope,
                   latent=Latent(q_lora, c.int("kv_lora_rank"), v, *index), experts=E,
                   top_k=c.int("num_experts_per_tok", default=FROM_CLASS) if E else 0, moe_intermediate=fe,
                   shared_intermediate=fe * c.int("n_shared_experts", default=0),
                   dense_layers=layout.mlp_dense_layers(c, L, first) if E else tuple(range(L)))


def from_tensors(T: Tensors, common: dict[str, Any], lay: DecoderLayout = DEEPSEEK) -> ArchSpec:
    """Every MLA size follows from the shapes: with X = a(nope + v) (kv_b_proj rows), Y = a v (o_proj
    columns), Z = a(nope + rope) (q_b_proj / q_proj rows) and rope = kv_a_proj_with_mqa rows - kv_lora_rank,
    a = (Z - X + Y) / rope. The module names `lay`'s (Kimi Linear's and Ling 3's latent layers too)."""
    def find(gguf: str, suffix: str = "weight") -> Any:
        return infer.find(T, layout.pattern(lay, gguf, suffix))

    def shape(gguf: str) -> tuple[int, ...]:
        return infer.shape(T, layout.pattern(lay, gguf), gguf)

    V, h = shape("token_embd")
    kvl = shape("attn_kv_a_norm")[0]
    rope = shape("attn_kv_a_mqa")[0] - kvl
    X, Y = shape("attn_kv_b")[0], shape("attn_output")[1]
    qa = find("attn_q_a")
    # A.X-K2's gated norms (W_down [rank, h], held as mlp.fc1); its q_b_proj (held as q_gate_proj) writes each head's
    # output gate (v_head_dim) too
    gate = infer.find(T, r"layers\.\d+\.input_layernorm\.(W_down|mlp\.fc1)\.weight$")
    Z = infer.shape(T, r"layers\.\d+\.self_attn\.(q_b_proj|q_gate_proj)\.weight$", "q_b_proj")[0] - Y \
        if gate is not None else shape("attn_q_b" if qa is not None else "attn_q")[0]
    if rope <= 0 or (Z - X + Y) % rope:
        raise UsageError("cannot infer the MLA head sizes from tensor shapes; pass --config")
    a = (Z - X + Y) // rope
    nope, v = (Z // a) - rope, Y // a
    L = infer.count_layers(T, r"layers\.(\d+)\.")
    router = re.compile(rf"layers\.(\d+)\.{re.escape(lay.paths.mlp)}\.{re.escape(lay.paths.router)}\.weight$")
    sparse = {int(m.group(1)) for n in T if (m := router.search(n))}
    E = shape("ffn_gate_inp")[0] if sparse else 0
    fe = infer.expert_width(T, layout.pattern(lay, "ffn_gate_exps"), "experts.0.gate_proj", lay.paths.mlp) if sparse else 0
    # HY-V4's hyper-connections (N copies: fn [2N, N x h]); its MLPs' gate_proj saved as linear_gate
    hc = infer.find(T, r"layers\.\d+\.(hc_pre\.hc_attn_layer\.hc_fn|attn_hc\.fn)$")
    fs, fd = (find(g) or infer.find(T, layout.pattern(HYV4, g)) for g in ("ffn_gate_shexp", "ffn_gate"))
    # V3's router stores e_score_correction_bias (a persistent buffer); V2's has none
    v3 = infer.has(T, rf"{re.escape(lay.paths.mlp)}\.gate\.e_score_correction_bias$")
    wk, iw = infer.find(T, r"self_attn\.indexer\.wk\.weight$"), infer.find(T, r"self_attn\.indexer\.weights_proj\.weight$")
    indexed = {int(m.group(1)) for n in T if (m := re.search(r"layers\.(\d+)\.self_attn\.indexer\.wk\.weight$", n))}
    index = (iw.shape[0], wk.shape[0], tuple(i for i in range(L) if i not in indexed)) \
        if wk is not None and iw is not None else (0, 0, ())
    kind = "hy_v4" if hc is not None else "axk2" if gate is not None else "deepseek_v32" if index[0] else \
        "axk1" if infer.has(T, r"post_mlp_layernorm\.weight$") else None
    k = 8 if v3 else 6
    notes = (f"no config: experts per token (top-k) assumed {k}, as in DeepSeek-{'V3' if v3 else 'V2'}",) if sparse else ()
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=a, head_dim=nope + rope, vocab=V,
                    intermediate=fd.shape[0] if fd is not None else fe, gated_mlp=True, norm="rmsnorm",
                    qkv_bias=find("attn_kv_a_mqa", "bias") is not None, o_bias=find("attn_output", "bias") is not None,
                    mlp_bias=infer.has(T, r"gate_proj\.bias$"), tied_embeddings=find("output") is None,
                    experts=E, top_k=k if sparse else 0, activation="silu", rope_dim=rope,
                    latent=Latent(qa.shape[0] if qa is not None else 0, kvl, v, *index), moe_intermediate=fe,
                    shared_intermediate=fs.shape[0] if fs is not None else 0,
                    dense_layers=tuple(i for i in range(L) if i not in sparse), assumptions=notes,
                    variant=GatedNorm(gate.shape[0]) if gate is not None else Hyper(hc.shape[0] // 2) if hc is not None
                    else None,
                    num_labels=task_labels(lay, T), **dict(common, model_type=kind) if kind else common)


def hybrid_from_tensors(lay: DecoderLayout, T: Tensors, common: dict[str, Any], model_type: str) -> ArchSpec:
    """A Kimi Delta Attention hybrid laid out as `lay` (Kimi Linear, Ling 3) read without config.json: the latent
    attention's sizes from its layers (from_tensors over every name but the KDA layers' mixers), the KDA layers' from
    theirs (mixers_kda.from_tensors); the experts per token, which no tensor shows, `model_type`'s config class's."""
    linear, deltanet = mixers_kda.from_tensors(lay, T)
    mixer = re.compile(rf"{re.escape(lay.paths.layers)}\.(\d+)\.{re.escape(lay.paths.attn)}\.")
    latent = {n: t for n, t in T.items() if not (m := mixer.search(n)) or int(m.group(1)) not in linear}
    spec = from_tensors(latent, dict(common, model_type=model_type), lay)
    k = int(class_default(model_type, "num_experts_per_tok"))
    return replace(spec, linear_layers=linear, deltanet=deltanet, top_k=k if spec.experts else 0,
                   assumptions=(f"no config: experts per token (top-k) assumed {k}, the {model_type} config class "
                                "default",) if spec.experts else ())


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """The cache per token. transformers 5 (modeling_deepseek_v3, v2) caches the compressed latent: per layer one
    shared head holding the normalised kv_lora_rank latent as the key and the rotated rope key as the value
    (DynamicCache's keys [b, 1, s, kv_lora_rank], values [b, 1, s, qk_rope_head_dim]); that line comes first and
    is what memory and the planner count. transformers 4's eager forward cached the full per-head K and V: the
    alternative line."""
    m = _sizes(s)
    # DeepSeek-V3.2: the indexer's key (index_head_dim) per token and layer too (DynamicIndexedLayer.indexer_keys)
    lat = (s.layers * (m.kv_lora_rank + s.rope_dim) + (s.layers - len(m.index_shared)) * m.index_head_dim) * ab
    full = s.layers * s.heads * (s.head_dim + m.v_head_dim) * ab
    return [(f"MLA latent b={b} s={n}", lat * b * n,
             f"transformers 5, the compressed latent + rope key, one head: L x (kv_lora_rank + qk_rope_head_dim"
             f"{' + index_head_dim' if m.index_head_dim else ''}) x s x b x {ab} B = {lat:,} B/token"),
            (f"per-head K+V b={b} s={n}", full * b * n,
             f"transformers 4 eager, full K and V: L x a x (qk_nope + qk_rope + v_head_dim) x s x b x {ab} B"
             f" = {full:,} B/token")]


# convert_hf_to_gguf.py DeepseekV2Model (DeepSeek-V2 and V3 alike, llama.cpp architecture deepseek2): its keys
# under DeepSeek's config names. attention.key_length / value_length are the MLA cache's (kv_lora_rank +
# qk_rope, kv_lora_rank) in files with key_length_mla; older files have no *_mla keys and key_length =
# qk_nope + qk_rope, value_length = v_head_dim.
_GGUF_KEYS = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size",
              "feed_forward_length": "intermediate_size", "attention.head_count": "num_attention_heads",
              "context_length": "max_position_embeddings", "expert_count": "n_routed_experts",
              "expert_used_count": "num_experts_per_tok", "expert_feed_forward_length": "moe_intermediate_size",
              "expert_shared_count": "n_shared_experts", "leading_dense_block_count": "first_k_dense_replace",
              "attention.q_lora_rank": "q_lora_rank", "attention.kv_lora_rank": "kv_lora_rank",
              "rope.dimension_count": "qk_rope_head_dim"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """V3 when the routers carry exp_probs_b (its e_score_correction_bias), else V2."""
    cfg = infer.gguf_config(arch, metadata, tensors, "DeepseekV2ForCausalLM", keys=_GGUF_KEYS) if arch == "deepseek2" else None
    if cfg is None:
        return None
    v3 = any(".exp_probs_b." in n for n in tensors)
    cfg.setdefault("q_lora_rank", None)   # the converter writes it only for a q LoRA (V2-Lite has none): not the class's 1536
    cfg.update(model_type="deepseek_v3" if v3 else "deepseek_v2",
               architectures=["DeepseekV3ForCausalLM" if v3 else "DeepseekV2ForCausalLM"])
    mla = infer.gguf_int(metadata, f"{arch}.attention.key_length_mla") is not None
    k = infer.gguf_int(metadata, f"{arch}.attention.key_length{'_mla' if mla else ''}")
    v = infer.gguf_int(metadata, f"{arch}.attention.value_length{'_mla' if mla else ''}")
    if k is not None and "qk_rope_head_dim" in cfg:
        cfg["qk_nope_head_dim"] = k - cfg["qk_rope_head_dim"]
    if v is not None:
        cfg["v_head_dim"] = v
    return cfg


# HF module -> llama.cpp GGUF tensor name (gguf-py tensor_mapping.py, MODEL_ARCH.DEEPSEEK2), from the layout's walk:
# the converter stacks the routed experts into blk.N.ffn_{gate,up,down}_exps [experts, out, in] (expert {xid} a
# slice of it), and (since llama.cpp's MLA rework) splits kv_b_proj per head into attn_k_b (k_nope part, transposed)
# and attn_v_b: no HF name maps to those; older files keep attn_kv_b. V3's e_score_correction_bias (a buffer, which
# the walk does not meet) is exp_probs_b.bias. Mistral 4's fused experts: ffn_gate_up_exps and ffn_down_exps (gguf-py's
# MODEL_ARCH.MISTRAL4, whose files are named by this table; their metadata is not read into a config: gguf_config).
GGUF_TENSOR_NAMES = layout.gguf_tensor_names(DEEPSEEK, MISTRAL4) + (
    ("model.layers.{bid}.mlp.gate.e_score_correction_bias", "blk.{bid}.exp_probs_b.bias"),
)

_SIZES = dict(vocab_size=97, hidden_size=32, intermediate_size=48, moe_intermediate_size=24, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, n_shared_experts=2,
              num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8,
              qk_rope_head_dim=4, v_head_dim=6, max_position_embeddings=64)

# the configs the task heads' samples build: DeepseekV2's sequence classifier; the others' token classifiers too
_TASK_CONFIGS = (("DeepseekV2Config", dict(n_group=2, topk_group=1, topk_method="group_limited_greedy")),
                 ("DeepseekV3Config", dict(n_group=2, topk_group=1)),
                 ("AXK1Config", dict(n_group=2, topk_group=1, mlp_layer_types=["dense", "sparse", "sparse"])),
                 ("AXK2Config", dict(n_group=2, topk_group=1, index_n_heads=2, index_head_dim=8, index_topk=4,
                                     gated_norm_rank=4, mlp_layer_types=["dense", "sparse", "sparse"])))

FAMILY = Family(
    name="deepseek",
    before=("llama", "mixtral"),   # tried before them: its q_proj and mlp.experts.N names match theirs
    # DeepseekV2/V3ForCausalLM: `model.` + lm_head, _tied_weights_keys ["lm_head.weight"], untied by default
    **{**layout.family_fields(LAYOUTS, "attn_kv_a_mqa"), "signature": r"(^|[./])self_attn[./]kv_a_proj_with_mqa[./]",
       "from_config": from_config, "from_tensors": from_tensors, "gguf_tensor_names": GGUF_TENSOR_NAMES,
       "kv_cache": kv_cache},
    cache_heads=lambda s: 1,      # the latent: one head, whole on every tensor-parallel device
    gguf_architectures=("deepseek2", "mistral4"), gguf_config=gguf_config,
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("DeepseekV2Config", dict(_SIZES, n_group=2, topk_group=1, topk_method="group_limited_greedy"),
               ("DeepseekV2Model", "DeepseekV2ForCausalLM"), device="cpu"),
        # V2-Lite: no q LoRA (q_proj), greedy top-k
        Sample("DeepseekV2Config", dict(_SIZES, q_lora_rank=None, n_shared_experts=1, first_k_dense_replace=2,
                                        tie_word_embeddings=True), ("DeepseekV2ForCausalLM",), device="cpu"),
        Sample("DeepseekV3Config", dict(_SIZES, n_group=2, topk_group=1), ("DeepseekV3Model", "DeepseekV3ForCausalLM"),
               device="cpu"),
        Sample("DeepseekV3Config", dict(_SIZES, q_lora_rank=None, n_shared_experts=1, n_group=1, topk_group=1,
                                        attention_bias=True), ("DeepseekV3ForCausalLM",), device="cpu"),
        Sample("Glm4MoeLiteConfig", dict(_SIZES, n_group=1, topk_group=1, mlp_layer_types=["dense", "sparse", "dense"]),
               ("Glm4MoeLiteModel", "Glm4MoeLiteForCausalLM"), device="cpu"),
        Sample("AXK1Config", dict(_SIZES, n_group=2, topk_group=1, mlp_layer_types=["dense", "sparse", "sparse"]),
               ("AXK1Model", "AXK1ForCausalLM"), device="cpu"),
        Sample("Mistral4Config", dict(_SIZES, n_group=1, topk_group=1), ("Mistral4Model", "Mistral4ForCausalLM"),
               device="cpu"),
        # the indexer's top-k smaller than the test's sequences: it masks keys (the matmuls still span them all)
        Sample("DeepseekV32Config", dict(_SIZES, n_group=2, topk_group=1, index_n_heads=2, index_head_dim=8, index_topk=4),
               ("DeepseekV32Model", "DeepseekV32ForCausalLM"), device="cpu"),
        Sample("GlmMoeDsaConfig", dict(_SIZES, n_group=1, topk_group=1, index_n_heads=2, index_head_dim=8, index_topk=4,
                                       indexer_types=["full", "shared", "full"]),
               ("GlmMoeDsaModel", "GlmMoeDsaForCausalLM"), device="cpu"),
        Sample("AXK2Config", dict(_SIZES, n_group=2, topk_group=1, index_n_heads=2, index_head_dim=8, index_topk=4,
                                  gated_norm_rank=4, mlp_layer_types=["dense", "sparse", "sparse"]),
               ("AXK2Model", "AXK2ForCausalLM"), device="cpu"),
        # the sequence classifier tests `pad_token_id in input_ids`: values (every sample has its causal LM: the KV tests)
        *(Sample(config, dict(_SIZES, num_labels=3, pad_token_id=0, **kw),
                 tuple(config.removesuffix("Config") + c for c in ("ForCausalLM", "ForSequenceClassification")), device="cpu")
          for config, kw in _TASK_CONFIGS),
        # Youtu's tensor names are MiniCPM3's (latent attention, a dense MLP in every layer): read as minicpm3 without
        # config.json
        Sample("YoutuConfig", {k: v for k, v in _SIZES.items() if "expert" not in k and k != "first_k_dense_replace"},
               ("YoutuModel", "YoutuForCausalLM"), detected_as="minicpm3"),
        # GenericForTokenClassification (DeepSeek-V2 has none)
        *(Sample(config, dict(_SIZES, num_labels=3, pad_token_id=0, **kw),
                 tuple(config.removesuffix("Config") + c for c in ("ForCausalLM", "ForTokenClassification")), device="cpu")
          for config, kw in _TASK_CONFIGS[1:]),
    ),
)
