"""What a DecoderLayout is (layout.py): the typed variants of a LLaMA-shaped decoder, its module paths and bias keys,
and the recorder the walk writes with (`Walk`: each parameterised module met once, its op written to the Builder in
the same call); the walk's larger parts (the dense MLP, sinks, gates, the heads) are layout_parts.py's."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from . import decoder_heads, decoders
from .archspec import ArchSpec, Variant
from .layout_streams import gated_norm, hyper_connection
from .ops import Builder

# rmsnorm: RMSNorm with a weight; layernorm: LayerNorm with weight and bias; layernorm_nobias: weight only;
# none: a LayerNorm without parameters (OLMo's elementwise_affine=False)
Norm = Literal["rmsnorm", "layernorm", "layernorm_nobias", "none"]
# pre: a norm before attention and before the MLP (LLaMA); post: after each, none before (OLMo2);
# sandwich: both (GLM-4, Gemma2); parallel: one norm before attention whose output the MLP also reads, both
# added to the residual (Cohere)
Placement = Literal["pre", "post", "sandwich", "parallel"]
# head: RMSNorm over each head's d (Qwen3); width: over the whole q / k projection (OLMo2); l2: a parameterless L2
# norm over each head's d on the layers with rotary only (Llama 4's Llama4TextL2Norm)
QKNorm = Literal["none", "head", "width", "l2"]
# gated: act(gate) x up, down (LLaMA); plain: act(up), down (Arcee); routed: a router over gated experts (Mixtral);
# none: no MLP, the layer is its norm and token mixer alone (Mamba2's Mamba2Block)
MLP = Literal["gated", "plain", "routed", "none"]
# a routed MLP's shared expert, a gated MLP of ArchSpec.shared_intermediate run on every token: gated, scaled by
# sigmoid(shared_expert_gate(x)) (Qwen2-MoE); summed, added to the experts' output (DeepSeek); averaged, (experts +
# shared) / 2 (Cohere2-MoE's shared_expert_combination_strategy "average")
Shared = Literal["none", "gated", "summed", "averaged"]
# a routed MLP's router: linear, its matmul (Mixtral, Qwen-MoE, DeepSeek); topk_softmax, biased, the top-k of its
# logits and a softmax over those k counted too (gpt-oss's GptOssTopKRouter); topk_sigmoid, the top-k of its logits
# scattered into -inf elsewhere and a sigmoid over all E (Llama 4's Llama4Router)
Router = Literal["linear", "topk_softmax", "topk_sigmoid"]
# a layer's token mixer: full and sliding softmax attention and linear attention (a gated DeltaNet on
# ArchSpec.linear_layers, DecoderLayout.linear) are walked per layer today (DeepSeek's latent attention, on every layer,
# is DecoderLayout.latent), and Mamba's state-space mixer (layout_ssm.py); short_conv: LFM2's gated short convolution
# (mixers_conv.py); lightning: MiniMax's blocked linear attention (mixers_lightning.py); chunked names what Llama 4
# needs (ArchSpec.chunked_attention covers it today); none: no token mixer, the MLP alone (ArchSpec.ffn_layers)
Attention = Literal["full", "sliding", "chunked", "linear", "state_space", "latent", "short_conv", "lightning", "none"]
# the linear-attention layers' token mixer (ArchSpec.linear_layers, attention_kinds' "linear"; layout_linear.py): none;
# qkvz: a gated DeltaNet whose inputs come from in_proj_qkvz (q, k, v and the output gate z, grouped per key head) and
# in_proj_ba (beta and the decay's a) (Qwen3-Next); split: the same DeltaNet from in_proj_qkv, in_proj_z, in_proj_b,
# in_proj_a (Qwen3.5); separate: from q_proj, k_proj, v_proj (by the attention's Paths), b_proj, a_proj and the gate's
# g_proj, out through o_proj, beta doubled where config linear_allow_neg_eigval (OLMo-Hybrid); fused: split's four
# projections saved as one in_proj (Paths.in_fused, rows [q | k | v | z | b | a]: LaraMini's checkpoints, which
# transformers' conversion_mapping splits on load and joins on save); kda, kda_full: Kimi Delta Attention (mixers_kda.py:
# q_proj, k_proj, v_proj, the conv1d saved split, a per-channel forget gate, b_proj, an output gate, o_norm, out through
# o), its gates low-rank (f_a_proj / f_b_proj, g_a_proj / g_b_proj; A_log [1, 1, H, 1]: Kimi Linear) or full-rank
# (f_proj, g_proj; A_log [H]: Ling 3's BailingHybrid)
Linear = Literal["none", "qkvz", "split", "separate", "fused", "kda", "kda_full"]
# the layers without rotary (NoPE): none; flags: the config's no_rope_layers, 0 on such a layer (SmolLM3); global:
# the full-attention layers when some layers slide (Exaone 4, Cohere2: rotary only on the sliding ones); theta: the
# layers whose config layer_rope_theta is 0 (GraniteSWA); all: no rotary anywhere (Jamba's attention); types: the layers
# whose layer_types entry rope_parameters maps to None (Cohere Compass: rotary parameters per layer type); embedding_type:
# none anywhere unless config position_embedding_type is "rope" (Granite 4's hybrids: no rotary table either)
NoPE = Literal["none", "flags", "global", "theta", "all", "types", "embedding_type"]
# where a token's position enters: rotary on q and k (LLaMA); learned, a table of ArchSpec.positions rows ({pos}, no
# bias) added to the token embeddings (OpenAI GPT); sinusoidal, a fixed table (a buffer, no parameters) added to them
# (CTRL); alibi, a per-head linear bias added to every score (MPT)
# segments: CPM-Ant's segment embedding [segments, h] added to the token embeddings and a segment-relative position
# bias [segments^2 + buckets, heads] added to every score (Segments), over ArchSpec.prefix_tokens prompt tokens
# prepended to the input, whose embedding rows follow the vocabulary
# rotary_table: rotary on q and k from a sinusoid table built at init and gathered by position (GPT-J's
# embed_positions buffer): no inv_freq product in the forward
Positions = Literal["rotary", "rotary_table", "learned", "sinusoidal", "alibi", "segments"]
# a routed MLP's experts held as one 3-D tensor per projection in nn.Linear's [E, out, in] orientation, gate and up the
# halves of the first (GraniteMoE's): none; weights, saved as {experts}.{stacked_in}.weight [E, 2f, h] and
# {experts}.{stacked_out}.weight [E, h, f] (GraniteMoE, GraniteMoE-Shared: input_linear, output_linear); parameters,
# bare parameters at the same paths (GraniteMoE-SWA's experts.gate_up_proj, experts.down_proj, saved as held)
LinearExperts = Literal["none", "weights", "parameters"]
# an output gate on the attention: none; width, a projection {attn}.{attn_gate} of the layer's input to a x d, its
# activation (sigmoid, softplus) times the attention's output before o_proj (AFMoE's gate_proj; Laguna's g_proj with
# gating "per-element"); head, the projection to a, one gate per head (Laguna's g_proj with gating true); biased, width
# plus a bias per head broadcast over d, a parameter {attn}.{attn_gate_bias} [a] (Beam's gate_bias)
AttnGate = Literal["none", "width", "head", "biased"]
# which layers' token mixer is the Mamba2 state-space mixer (layout_ssm.py; ArchSpec.ssm_layers) in place of attention:
# none; all (Mamba2); attn_indices, all but the config's attn_layer_indices (Bamba); period, all but every
# attn_layer_period-th from attn_layer_offset (Jamba); layer_types, those config layer_types marks "mamba" (or
# "linear_attention", transformers 5's name for it; every layer when it has none: Granite 4's GraniteMoeHybrid); beside,
# every layer runs the mixer beside its attention, the two outputs summed (FalconH1; SSM.beside); blocks, the layers the
# family's from_config says, each one block kind (NemotronH's layers_block_type; DecoderLayout.one_mixer)
Hybrid = Literal["none", "all", "attn_indices", "period", "layer_types", "beside", "blocks"]
# the LM head's bias: none (LLaMA's lm_head); mlp, biased when the config's MLP is (EuroBERT's lm_head,
# nn.Linear(h, V, config.mlp_bias))
LMHeadBias = Literal["none", "mlp", "always"]
# the embeddings: tokens, embed_tokens alone (LLaMA); bert, BERT's embeddings module without positions: the word
# embeddings, the token types when the config's type_vocab_size is not 0, a LayerNorm (GTE's GteEmbeddings)
# embeddings, normed, embed_tokens then a norm at {embed_norm} (ModernBERT's tok_embeddings, norm)
Embeddings = Literal["tokens", "bert", "normed"]
# the LM head's transform before the decoder, a biased dense + this activation + a LayerNorm, {lm_dense} and {lm_norm}:
# none (LLaMA); gelu (GTE's GteLMHead); hidden_act, the config's (NomicBERT's cls.predictions.transform)
LMTransform = Literal["none", "gelu", "hidden_act"]
# the Mamba1 mixer's norms over dt, B and C after x_proj (layout_ssm.mamba1): weighted, RMSNorms with weights (Jamba's
# dt_layernorm, b_layernorm, c_layernorm); weightless, the same without parameters (FalconMamba's
# FalconMambaWeightlessRMSNorm); none (Mamba's MambaMixer)
SSMNorms = Literal["weighted", "weightless", "none"]


# The activations that hold parameters, by hidden_act, and their shapes: each MLP's {mlp}.{act} module has its own
# (transformers activations.py XIELUActivation: alpha_p and alpha_n, [1] each, parameters; its beta and eps are buffers,
# not counted); llama.cpp keeps them as metadata (gguf-py Keys.xIELU), no tensor
LEARNED_ACTIVATIONS: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = {"xielu": (("alpha_p", (1,)), ("alpha_n", (1,)))}

# The tiny sizes the layout families' Samples build their models at (each adds its own keys: head_dim, pad_token_id)
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
            vocab_size=99, max_position_embeddings=64)
# ... and those of a routed-MoE sample (with its own experts key): grouped_mm, transformers 5's experts kernel, needs
# 16-byte strides (an intermediate_size of 37 fails)
TINY_MOE = dict(TINY, intermediate_size=48, num_experts_per_tok=2)


@dataclass(frozen=True)
class Paths:
    """Module names as the modeling file names them, written once (the LLaMA names by default). Norms by
    role: attn_in before attention, attn_out after it, mlp_in before the MLP, mlp_out after it."""
    body: str = "model"                   # the base model inside *ForCausalLM
    # the same in the base model's files: none (LLaMA's); Fuyu's FuyuModel saves its language model under the
    # `language_model.model` FuyuForCausalLM does
    base: str = ""
    embed: str = "embed_tokens"
    # the embeddings' name in the base model's files where only the *ForCausalLM's are renamed on save ("": embed; Ling
    # 3's conversion renames model.embed_tokens to model.word_embeddings, so its base model keeps embed_tokens)
    base_embed: str = ""
    pos: str = "position_embeddings"      # DecoderLayout.positions "learned": the position table
    patch: str = "vision_embed_tokens"    # DecoderLayout.patch_embed: the image patches' linear embedding
    segment: str = "segment_embedding"    # DecoderLayout.positions "segments": the tables (Segments)
    segment_bias: str = "position_bias.relative_attention_bias"
    layers: str = "layers"
    attn: str = "self_attn"
    q: str = "q_proj"
    k: str = "k_proj"
    v: str = "v_proj"
    qkv: str = "qkv_proj"
    o: str = "o_proj"
    last_bias: str = "dense_bias"         # DecoderLayout.last_o_bias: {attn}.{last_bias}, a parameter without .weight
    q_norm: str = "q_norm"
    q_a: str = "q_a_proj"                 # latent attention: q_a, q_a_norm, q_b (or q), kv_a, kv_a_norm, kv_b, o
    q_a_norm: str = "q_a_layernorm"
    q_b: str = "q_b_proj"
    kv_a: str = "kv_a_proj_with_mqa"
    kv_a_norm: str = "kv_a_layernorm"
    k_rope_norm: str = "k_rope_only_layernorm"   # DecoderLayout.k_rope_norm
    kv_b: str = "kv_b_proj"
    k_norm: str = "k_norm"
    mlp: str = "mlp"
    gate: str = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"
    attn_sub: str = "attn_sub_norm"       # DecoderLayout.sub_norms: {attn}.{attn_sub}, {mlp}.{ffn_sub}
    ffn_sub: str = "ffn_sub_norm"
    act: str = "act_fn"                   # {mlp}.{act}: an activation module with parameters (LEARNED_ACTIVATIONS)
    gate_up: str = "gate_up_proj"
    router: str = "gate"                  # routed: {mlp}.{router} and {mlp}.{experts}.N.{gate,up,down}
    sinks: str = "sinks"                  # {attn}.{sinks}, a parameter without .weight
    # {attn}.{lambda_q1, lambda_k1, lambda_q2, lambda_k2}: DecoderLayout.differential's parameters, without .weight
    lambdas: tuple[str, ...] = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")
    moe_out_norm: str = "post_mlp_layernorm"   # DecoderLayout.moe_out_norm, saved at the layer level
    # DecoderLayout.indexer: {attn}.{indexer}.{idx_q, idx_k, idx_k_norm, idx_weights}
    indexer: str = "indexer"
    idx_q: str = "wq_b"
    idx_k: str = "wk"
    idx_k_norm: str = "k_norm"
    idx_weights: str = "weights_proj"
    experts: str = "experts"
    # the routed experts' gate, up and down where not the MLP's (Kimi Linear's saved w1, w3, w2): {experts}.N.{name}
    expert_names: tuple[str, str, str] | None = None
    stacked_in: str = "fc1"               # {mlp}.{experts}.{stacked_in}, .{stacked_out}: DecoderLayout.stacked_experts
    stacked_out: str = "fc2"
    shared: str = "shared_expert"         # {mlp}.{shared}.{gate,up,down}, {mlp}.{shared_gate}
    shared_gate: str = "shared_expert_gate"
    statics: str = "moe_statics.e_score_correction_bias"   # {mlp}.{statics}: DecoderLayout.router_statics
    attn_in: str = "input_layernorm"
    attn_out: str = "post_attention_layernorm"
    mlp_in: str = "post_attention_layernorm"
    mlp_out: str = "post_feedforward_layernorm"
    norm: str = "norm"
    lm_head: str = "lm_head"
    tokcls: str = "classifier"            # *ForTokenClassification's module (GenericForTokenClassification's: score)
    seqcls: str = "score"                 # *ForSequenceClassification's module (CTRL's: classifier, unbiased)
    qa_body: str = ""                     # the body in *ForQuestionAnswering where not {body} (its base_model_prefix)
    attn_gate: str = "gate_proj"          # {attn}.{attn_gate}, {attn}.{attn_gate_bias}: DecoderLayout.attn_gate
    attn_gate_bias: str = "gate_bias"
    dt_proj: str = "dt_proj"              # {attn}.{dt_proj}, {attn}.{dynamic_a}: DecoderLayout.dynamic_mask
    dynamic_a: str = "A"
    attn_residual: str = "input_residual"            # DecoderLayout.residual_scales, at the layer
    mlp_residual: str = "post_attention_residual"
    cross_attn: str = "cross_attn"        # ArchSpec.cross_layers: {cross_attn}.{q,k,v,o,q_norm,k_norm}, the gates
    cross_attn_gate: str = "cross_attn_attn_gate"
    cross_mlp_gate: str = "cross_attn_mlp_gate"
    score_bias: str = "expert_bias"       # {mlp}.{score_bias}: DecoderLayout.score_bias
    latent_down: str = "fc1_latent_proj"  # {mlp}.{latent_down}, {mlp}.{latent_up}: ArchSpec.moe_latent
    latent_up: str = "fc2_latent_proj"
    linear_attn: str = "linear_attn"      # a linear layer's mixer: {linear_attn}.{in_qkvz, in_ba | in_qkv, in_z, in_b, in_a},
    in_qkvz: str = "in_proj_qkvz"         # {conv}, {dt_bias}, {a_log}, {gated_norm}, {out}
    in_ba: str = "in_proj_ba"
    in_qkv: str = "in_proj_qkv"
    in_z: str = "in_proj_z"
    in_b: str = "in_proj_b"
    in_a: str = "in_proj_a"
    in_fused: str = "in_proj"             # Linear "fused": in_qkv, in_z, in_b, in_a saved as one
    kda_f: tuple[str, ...] = ("f_a_proj", "f_b_proj")   # Linear "kda" / "kda_full": the forget gate's projection(s),
    kda_g: tuple[str, ...] = ("g_a_proj", "g_b_proj")   # the output gate's
    sep_b: str = "b_proj"                 # Linear "separate": {linear_attn}.{q, k, v, sep_b, sep_a, sep_g}, out through {o}
    sep_a: str = "a_proj"
    sep_g: str = "g_proj"
    sep_conv: tuple[str, str, str] = ("q_conv1d", "k_conv1d", "v_conv1d")   # ... and its conv1d saved split, q / k / v
    conv: str = "conv1d"
    dt_bias: str = "dt_bias"
    a_log: str = "A_log"
    gated_norm: str = "norm"
    out: str = "out_proj"
    ssm: str = "mamba"                    # the state-space mixer of a hybrid layout's layers (DecoderLayout.hybrid)
    token_types: str = "embeddings.token_type_embeddings"   # DecoderLayout.embeddings "bert"
    embed_norm: str = "embeddings.LayerNorm"
    lm_dense: str = "lm_head.dense"       # DecoderLayout.lm_transform, beside the LM head (top level)
    lm_norm: str = "lm_head.layer_norm"
    lm_bias: str = ""                     # a second name of the LM head's bias, saved apart, tied with the embeddings
    project_in: str = "project_in"        # DecoderLayout.embed_proj: embeddings -> hidden, hidden -> the LM head's width
    project_out: str = "project_out"
                                          # (cls.predictions.bias)
    kv: str = "kv_proj"                   # DecoderLayout.moa: {attn}.{kv}, keys and values fused; the query experts at
    moa: str = "experts"                  # {attn}.{moa}.{router}, .{stacked_in}, .{stacked_out}, .{moe_bias}
    moe_bias: str = "bias"                # DecoderLayout.moe_bias: {mlp}.{moe_bias}, a parameter without .weight
    inner_norm: str = "norm"              # DecoderLayout.gated_norms: {norm}.{inner_norm}, .{norm_gate_in}, .{norm_gate_out}
    norm_gate_in: str = "W_down"
    norm_gate_out: str = "W_up"
    # DecoderLayout.hyper: each layer's connections before the attention and the MLP norms and the head's before the
    # final norm, their parameters as saved (HY-V4's hc_pre.hc_attn_layer.hc_fn, ...; held as attn_hc.fn, ...)
    hc_attn: str = "hc_pre.hc_attn_layer"
    hc_ffn: str = "hc_pre.hc_mlp_layer"
    hc_head: str = "hc_pre.hc_head"
    hc_head_base: str = "hc_head.hc_pre"  # ... as the base model's file names it (transformers 5.24's hy_v4 renames reversed)
    hc_params: tuple[str, str, str] = ("hc_fn", "hc_base", "hc_scale")
    hc_head_params: tuple[str, str, str] = ("hc_head_fn", "hc_head_base", "hc_head_scale")

    def numbered(self) -> str:
        r"""A regex on tensor names whose group 1 is the layer of a name under {layers} (infer.count_layers)."""
        return rf"{re.escape(self.layers)}\.(\d+)\."


@dataclass(frozen=True)
class BiasKeys:
    """The config keys that switch the biases on (LLaMA's by default): q/k/v, o_proj, the MLP."""
    qkv: str = "attention_bias"
    o: str = "attention_bias"
    mlp: str = "mlp_bias"


@dataclass(frozen=True)
class SSMKeys:
    """The config keys of the Mamba2 mixer's sizes (Mamba2Config's by default; Bamba's and Granite 4's are mamba_*)."""
    heads: str = "num_heads"
    head_dim: str = "head_dim"
    state: str = "state_size"
    groups: str = "n_groups"
    conv_kernel: str = "conv_kernel"
    chunk: str = "chunk_size"
    expand: str | None = "expand"         # None: intermediate = heads x head_dim (NemotronH's mamba_num_heads x mamba_head_dim)
    conv_bias: str = "use_conv_bias"
    bias: str = "use_bias"
    dt_rank: str | None = None            # Mamba1's x_proj / dt_proj rank ("auto": ceil(hidden / 16)); None: Mamba2
    # the mixer's width where a key gives it (FalconH1's mamba_d_ssm; null: expand x hidden); None: expand x hidden
    intermediate: str | None = None
    out_bias: str | None = None           # the key of out_proj's bias where it is not `bias`'s (FalconH1's projectors_bias)
    gated_norm: str | None = None         # the key that switches the gated norm on (FalconH1's mamba_rms_norm); None: always


@dataclass(frozen=True)
class LinearKeys:
    """The config keys of the linear-attention layers' sizes (layout_linear.from_config), each the first present of its
    names (Qwen3-Next's by default; BailingHybrid's saved linear_* keys, else the attention's it copies them from)."""
    key_heads: tuple[str, ...] = ("linear_num_key_heads",)
    key_dim: tuple[str, ...] = ("linear_key_head_dim",)
    value_heads: tuple[str, ...] = ("linear_num_value_heads",)
    value_dim: tuple[str, ...] = ("linear_value_head_dim",)
    conv_kernel: tuple[str, ...] = ("linear_conv_kernel_dim",)


BAMBA_KEYS = SSMKeys(heads="mamba_n_heads", head_dim="mamba_d_head", state="mamba_d_state", groups="mamba_n_groups",
                     conv_kernel="mamba_d_conv", chunk="mamba_chunk_size", expand="mamba_expand",
                     conv_bias="mamba_conv_bias", bias="mamba_proj_bias")
# FalconH1's: Bamba's, the width mamba_d_ssm where set, out_proj biased by projectors_bias, the gated norm by mamba_rms_norm
FALCON_H1_KEYS = replace(BAMBA_KEYS, intermediate="mamba_d_ssm", out_bias="projectors_bias", gated_norm="mamba_rms_norm")
# NemotronH's (NemotronHConfig's names: the mixer heads x head_dim wide, whatever expand says; in_proj and out_proj biased
# by use_bias)
NEMOTRON_H_KEYS = SSMKeys(heads="mamba_num_heads", head_dim="mamba_head_dim", state="ssm_state_size", expand=None)
# Jamba's Mamba1 mixer (no heads, groups or chunks)
JAMBA_KEYS = SSMKeys(state="mamba_d_state", conv_kernel="mamba_d_conv", expand="mamba_expand", conv_bias="mamba_conv_bias",
                     bias="mamba_proj_bias", dt_rank="mamba_dt_rank")


@dataclass(frozen=True)
class Segments(Variant):
    """DecoderLayout.positions "segments" (CPM-Ant): the token embedding's rows (the vocabulary, then prompt_types x
    prompt_length prompt rows), the segment types and the position-bias buckets."""
    embed_rows: int
    segments: int
    buckets: int


@dataclass(frozen=True)
class FFNWidth:
    """The MLP's width as the config gives it: the value of `key` (LLaMA's intermediate_size, CTRL's dff); with
    `times_hidden`, that many times hidden_size whatever the config says (OpenAI GPT's and MPT's 4); with `times_key`,
    hidden_size times that key's value (GPT-NeoX-Japanese's intermediate_multiple_size); with `else_times`, `key`'s
    value where the config sets it, else (absent or null) that many times hidden_size (GPT-2's n_inner)."""
    key: str = "intermediate_size"
    times_hidden: int = 0
    times_key: str | None = None
    else_times: int = 0


@dataclass(frozen=True)
class DecoderLayout:
    """What one LLaMA-shaped architecture is. Biases left None follow the config (the keys `bias_keys` names:
    attention_bias on q, k, v and o; mlp_bias); True / False where the model fixes them (Qwen2's biased q/k/v,
    unbiased o)."""
    norm: Norm = "rmsnorm"
    placement: Placement = "pre"
    qk_norm: QKNorm = "none"
    qk_norm_key: str | None = None        # the config key that switches the q/k norms on (GLM-4.5's use_qk_norm)
    latent: bool = False                  # multi-head latent attention (ArchSpec.latent's sizes) in place of q/k/v
    fused_qkv: bool = False
    fused_gate_up: bool = False
    mlp: MLP = "gated"
    shared: Shared = "none"
    router: Router = "linear"
    # routed: the experts held fused as 3-D parameters without .weight, gate and up interleaved (gpt-oss's
    # GptOssExperts: gate_up_proj [E, h, 2f], down_proj [E, f, h], their biases), their GLU clamped
    fused_experts: bool = False
    # routed: the experts saved stacked, one 3-D {experts}.{gate_up}.weight [E, h, 2f] (gate and up its halves) and one
    # {experts}.{down}.weight [E, f, h] per layer (Aria's fc1 and fc2; held in memory as gate_up_proj / down_proj)
    stacked_experts: bool = False
    # routed: every token through every expert (Llama 4's Llama4TextExperts): the input repeated E times, each copy
    # scaled by its expert's router score (0 outside the top-k), one bmm over the fused gate_up_proj [E, h, 2f] (gate
    # and up its halves), act(gate) x up, a bmm over down_proj [E, f, h], the E outputs summed: E x b x s rows
    every_expert: bool = False
    # routed: a [1, E] parameter (Paths.statics) added to the router's scores to pick the experts (Ernie 4.5's
    # Ernie4_5_MoeStatics; elsewhere e_score_correction_bias is a buffer, no parameter)
    router_statics: bool = False
    # an RMSNorm over the attention's output before o_proj and over the MLP's act(gate) x up before down_proj (BitNet's
    # attn_sub_norm, ffn_sub_norm)
    sub_norms: bool = False
    # the attention's output gated: q_proj twice as wide, its second half per head g, the attention's output x sigmoid(g)
    # before o_proj (Qwen3-Next's gated attention)
    gated_attention: bool = False
    linear: Linear = "none"               # the token mixer of ArchSpec.linear_layers (Linear)
    linear_keys: LinearKeys = LinearKeys()   # the config keys of its sizes
    # the norms' placement on those layers when not `placement` (OLMo-Hybrid: pre there, post on its attention layers)
    linear_placement: Placement | None = None
    # the layers ArchSpec.short_conv lists run a gated short convolution in place of attention (LFM2, mixers_conv.py)
    short_conv: bool = False
    # the layers ArchSpec.lightning lists run MiniMax's lightning attention in place of softmax attention
    lightning: bool = False
    sinks: bool = False                   # attention sinks: a learned logit per head, one more softmax column (gpt-oss)
    # differential attention (DiffLlama, arXiv 2410.05258): two eager attention calls with the same queries and keys,
    # each over one half of the value heads (repeated to all kv heads), the outputs joined per head and combined
    # head pair by head pair with a learned lambda (Paths.lambdas, four [head_dim] vectors), then a weightless RMSNorm
    differential: bool = False
    # routed: a norm over the MoE block's output (routed and shared experts summed), on the sparse layers only (A.X-K1's
    # AXK1MoE.post_mlp_layernorm, which save_pretrained writes at the layer level: Paths.moe_out_norm)
    moe_out_norm: bool = False
    # latent: DeepSeek Sparse Attention's indexer (DeepSeek-V3.2's DeepseekV32Indexer, ArchSpec.latent's index sizes):
    # wq_b over the query latent (index heads x index_head_dim), wk and its LayerNorm (one key per token, cached),
    # weights_proj (a weight per index head); its scores over every key, ReLU'd, weighted and summed over its heads pick
    # the keys the attention keeps, which eager attention applies as a mask (its matmuls still span every key)
    indexer: bool = False
    # routed: the layers ArchSpec.dense_layers lists run a dense gated MLP of `intermediate` (Qwen-MoE's
    # mlp_only_layers and decoder_sparse_step, DeepSeek's first_k_dense_replace)
    dense_layers: bool = False
    qkv_bias: bool | None = None
    o_bias: bool | None = None
    mlp_bias: bool | None = None
    # the config class's partial_rotary_factor default (GLM-4 0.5, Phi-3 1.0); None: no such field, all of head_dim
    partial_rotary: float | None = None
    nope: NoPE = "none"                   # which layers apply no rotary
    local_rope: bool = False              # a second rotary table for the sliding layers (Gemma3's rope_local_base_freq)
    embed_scale: bool = False             # the embedding output times sqrt(hidden_size) (Gemma)
    positions: Positions = "rotary"
    # weights stored [in, out] (GPT-2's Conv1D, which OpenAI GPT's layers use); the matmuls are the same
    conv1d: bool = False
    # a bias [h] on the last layer's attention only, a parameter beside the unbiased o (Paths.last_bias), expanded to
    # the stream's shape and added to it after o (GPT-NeoX-Japanese's dense_bias, bias_dropout_add)
    last_o_bias: bool = False
    # a biased linear embedding of image patches (Paths.patch, ArchSpec.patch_dim -> hidden) beside the language
    # model, held but never run by a text-only forward (Fuyu's vision_embed_tokens)
    patch_embed: bool = False
    ffn_width: FFNWidth = FFNWidth()
    # the activation the model fixes whatever the config says (MPT's GELU, CTRL's ReLU); None: the config's `act_key`
    activation: str | None = None
    act_key: str = "hidden_act"
    # the config's attn_logit_softcapping / final_logit_softcapping, when set, soft-cap the scores / logits (Gemma2)
    softcap: bool = False
    tied_default: bool = False            # the config class's tie_word_embeddings default
    ties: bool = True                     # the LM head can be the embeddings (CPM-Ant's never is: no _tied_weights_keys)
    bias_keys: BiasKeys = BiasKeys()
    # the layers whose token mixer is the Mamba2 mixer (layout_ssm.py), and the config keys of its sizes
    hybrid: Hybrid = "none"
    ssm_keys: SSMKeys = SSMKeys()
    paths: Paths = Paths()
    # llama.cpp names its converter gives this architecture in place of LLaMA's, None where it writes no such
    # tensor (gguf-py MODEL_TENSORS: Seed-OSS's mlp_in norm is post_attention_norm; Command-R has no output)
    gguf_renames: tuple[tuple[str, str | None], ...] = ()
    # (config key, value): the switches whose other values add parts the layout does not describe (Cohere's
    # use_qk_norm false); another value is NoAnalyticModel, so the meta path answers it
    requires: tuple[tuple[str, Any], ...] = ()
    linear_experts: LinearExperts = "none"
    # routed: the shared expert beside the routed MLP, at the layer's {shared}, not under {mlp} (GraniteMoE-Shared's
    # shared_mlp beside block_sparse_moe)
    shared_beside: bool = False
    # routed: the config may name a latent width the experts run at (ArchSpec.moe_latent: NemotronH's moe_latent_size)
    moe_latent: bool = False
    attn_gate: AttnGate = "none"
    # routed: a [E] parameter (Paths.score_bias; requires_grad false, still one of model.parameters()) added to the
    # router's scores to pick the experts (AFMoE's expert_bias, Laguna's gate.e_score_correction_bias); llama.cpp's
    # exp_probs_b
    score_bias: bool = False
    # Doge's dynamic mask: {attn}.{dt_proj} (g x d -> g, biased as q/k/v) over the values the cache holds (after its
    # update: a forward's own tokens, and the cached ones when decoding), exp(A x softplus(.)) with A a [g] parameter
    # ({attn}.{dynamic_a}), added to the mask (its top-k past keep_window_size keys is no matmul)
    dynamic_mask: bool = False
    # the residual scaled by a learned [h] vector before each add, {attn_residual} and {mlp_residual} at the layer (Doge)
    residual_scales: bool = False
    embed_extra: int = 0                  # rows embed_tokens holds beyond vocab_size (Mllama's 8 image tokens)
    # False: an encoder, every token attending to every other (EuroBERT's is_causal False, create_bidirectional_mask):
    # no causal halving, no KV cache, its LM head predicts masked tokens (head "mlm": *ForMaskedLM) rather than the next
    causal: bool = True
    lm_head_bias: LMHeadBias = "none"
    embeddings: Embeddings = "tokens"
    final_norm: bool = True               # the base model's norm after the last layer (GTE's post-LN layers: none)
    # the MLP's down projection's bias where the layout fixes it apart from gate and up (GTE's: biased, they are not)
    down_bias: bool | None = None
    lm_transform: LMTransform = "none"
    lm_dense_bias: bool = True            # the transform's dense biased (ModernBERT's head.dense: classifier_bias, false)
    first_attn_norm: bool = True          # False: layer 0's attention reads the embeddings' norm, none of its own (ModernBERT)
    # the task heads transformers builds beside the body (decoder_heads.TASK_HEADS: GPT-J's score and qa_outputs)
    task_heads: tuple[str, ...] = ()
    # embeddings ArchSpec.embedding_size wide where it is not hidden (OPT's word_embed_proj_dim): {project_in} [h, E]
    # after the lookup, {project_out} [E, h] after the final norm, both unbiased; the LM and task heads read E
    embed_proj: bool = False
    sliding_sinks: bool = False           # the sinks on the sliding layers alone (MiMo-V2-Flash's)
    # each layer its input norm and one mixer: a token mixer, or on ArchSpec.ffn_layers the MLP alone (NemotronH's
    # blocks: no second norm, no MLP beside a token mixer)
    one_mixer: bool = False
    # routed: the experts', the shared expert's and the dense layers' MLP kind (NemotronH's plain relu2 MLPs: up, down)
    routed_mlp: MLP = "gated"
    # routed: each projection's experts held as one flat 2-D parameter [E x f, h] without .weight, gate, up and down
    # alike, {experts}.{gate,up,down} (DBRX's experts.mlp.w1, v1, w2: x w1^T, x v1^T, then (act x up) w2), one
    # matmul per expert over its tokens (the eager loop of DbrxExperts): b x s x k rows
    flat_experts: bool = False
    # a [h] parameter {mlp}.{moe_bias} added to the routed experts' combined output (JetMoE's JetMoeMoE.bias)
    moe_bias: bool = False
    # mixture of attention heads (JetMoE's JetMoeMoA, mixers_moa.py) in place of q/k/v/o: the router picks top_k of E
    # query experts per token, each a [g x d, h] projection (ArchSpec.heads = top_k x kv_heads heads of d), keys and values
    # from one fused {kv}, each expert's output projection, the k outputs weighted and summed, plus a bias
    moa: bool = False
    # latent: q_b_proj reads the query latent beside its norm ([q_resid, q_compressed], 2 x q_lora_rank) and writes each
    # head's query and an output gate of v_head_dim; the attention's output x sigmoid(gate) before o_proj (A.X-K2's
    # q_gate_proj, saved as q_b_proj)
    q_gate: bool = False
    k_rope_norm: bool = False             # latent: an RMSNorm over the shared rope key before its rotary (Dots3Note)
    # the attention norm of every layer and the MLP norm of the routed ones are gated RMSNorms (A.X-K2's
    # AXK2GatedRMSNorm): the RMSNorm at {norm}.{inner_norm}, then y x sigmoid(W_up(silu(W_down(y)))), a low-rank MLP of
    # GatedNorm.rank (Paths.norm_gate_in, norm_gate_out, as saved; held as mlp.fc1, mlp.fc2)
    gated_norms: bool = False
    # hyper-connections (HY-V4's HYV4HyperConnection, DeepSeek-V4's form): the stream held as Hyper.mult copies; before
    # the attention norm and before the MLP norm of every layer a connection (an fp32 linear of the N copies, N x h ->
    # 2N, times their weightless RMSNorm; a sigmoid pre mix collapses the copies to the sublayer's input, a post mix
    # spreads its output back over them), and before the final norm the head's (N x h -> N) collapse
    hyper: bool = False
    # placement "parallel": the MLP reads a norm of its own ({mlp_in}) beside the attention's (Falcon-40B's ln_mlp)
    parallel_mlp_norm: bool = False
    # positions other than rotary, yet the rotary table's product runs, unused (FalconModel's rotary_emb under ALiBi)
    unused_rotary: bool = False
    # o and the MLP's down run as tensor-parallel slices whose outputs are summed (layout_tp.py: BLOOM's pretraining_tp
    # with slow_but_exact, its slice count ArchSpec.variant's TPSlices)
    tp_slices: bool = False
    ssm_norms: SSMNorms = "weighted"      # the Mamba1 mixer's norms over dt, B and C (SSMNorms)

    def gguf(self, name: str) -> str | None:
        return dict(self.gguf_renames).get(name, name)

    def __post_init__(self) -> None:
        for name, kind in (("norm", Norm), ("placement", Placement), ("qk_norm", QKNorm), ("mlp", MLP), ("shared", Shared),
                           ("router", Router), ("nope", NoPE), ("hybrid", Hybrid), ("positions", Positions),
                           ("linear_experts", LinearExperts), ("attn_gate", AttnGate), ("linear", Linear),
                           ("lm_head_bias", LMHeadBias), ("embeddings", Embeddings), ("lm_transform", LMTransform),
                           ("routed_mlp", MLP)):
            if getattr(self, name) not in get_args(kind):
                raise TypeError(f"DecoderLayout.{name} = {getattr(self, name)!r} is not one of {get_args(kind)}")
        if not set(self.task_heads) <= set(decoder_heads.TASK_HEADS):
            raise TypeError(f"DecoderLayout.task_heads = {self.task_heads!r}: not of {decoder_heads.TASK_HEADS}")
        if self.linear_placement is not None and self.linear_placement not in get_args(Placement):
            raise TypeError(f"DecoderLayout.linear_placement = {self.linear_placement!r} is not one of {get_args(Placement)}")
        if self.ssm_norms not in get_args(SSMNorms):
            raise TypeError(f"DecoderLayout.ssm_norms = {self.ssm_norms!r} is not one of {get_args(SSMNorms)}")


@dataclass(frozen=True)
class Module:
    """A parameterised module the walk met: its path (under the body unless top; `{bid}` the layer, `{xid}`
    the routed expert), its llama.cpp name (`{bid}` the layer; experts stacked into one), its parameters (suffix
    "": the path is the parameter's own name, as gpt-oss's sinks and fused experts)."""
    path: str
    gguf: str | None
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    layers: tuple[int, ...] = ()
    experts: int = 0
    top: bool = False                     # outside the body (the LM head)
    # the walk's llama.cpp-style name before DecoderLayout.gguf_renames: the key the shape look-ups find it by, also
    # where llama.cpp names it otherwise or not at all (CodeGen's qkv_proj)
    role: str | None = None


class Walk:
    """Records each module and writes its op; `layers` the layers the current part runs in."""

    def __init__(self, B: Builder, lay: DecoderLayout):
        self.B, self.s, self.lay, self.p = B, B.s, lay, lay.paths
        self.tok = (B.b, B.seq)
        self.modules: list[Module] = []

    def label(self, sub: str, layers: tuple[int, ...]) -> str:
        return f"{self.p.layers}[{len(layers)}].{sub}"

    def record(self, sub: str, gguf: str | None, shapes: tuple[tuple[str, tuple[int, ...]], ...],
               layers: tuple[int, ...] | None, experts: int = 0, top: bool = False) -> None:
        path = sub if layers is None else f"{self.p.layers}.{{bid}}.{sub}"
        def layered(name: str | None) -> str | None:
            return name if layers is None or name is None else f"blk.{{bid}}.{name}"

        renamed = self.lay.gguf(gguf) if gguf is not None else None
        self.modules.append(Module(path, layered(renamed), shapes, layers or (), experts, top, layered(gguf)))

    def linear(self, sub: str, gguf: str | None, fin: int, fout: int, bias: bool, layers: tuple[int, ...] | None,
               tokens: tuple[int, ...] | None = None, label: str | None = None, experts: int = 0, top: bool = False) -> None:
        """`layers` None: a module outside the layers, under the body unless `top`."""
        shapes = (("weight", (fin, fout) if self.lay.conv1d else (fout, fin)),) + ((("bias", (fout,)),) if bias else ())
        self.record(sub, gguf, shapes, layers, experts, top)
        L = len(layers) if layers is not None else 1
        self.B.linear(label or (sub if layers is None else self.label(sub, layers)), "encoder", tokens or self.tok, fin, fout,
                      bias, L, copies=L * experts if experts else None, active_copies=L * self.s.top_k if experts else None)

    def norm(self, sub: str, gguf: str | None, dim: int, layers: tuple[int, ...] | None, residual: bool = True,
             tokens: tuple[int, ...] | None = None, top: bool = False, kind: Norm | None = None) -> None:
        """A norm of the layout's kind (or `kind`); the gated ones where DecoderLayout.gated_norms says, after a
        hyper-connection where DecoderLayout.hyper says."""
        if self.lay.hyper and (sub in (self.p.attn_in, self.p.mlp_in) if layers is not None else sub == self.p.norm):
            hyper_connection(self, sub, layers)
        if self.lay.gated_norms and layers is not None and sub in (self.p.attn_in, self.p.mlp_in):
            gated = layers if sub == self.p.attn_in else tuple(i for i in layers if i not in self.s.dense_layers)
            if gated:
                gated_norm(self, sub, gated, residual)
            if not (layers := tuple(i for i in layers if i not in gated)):
                return
        kind, calls = kind or self.lay.norm, len(layers) if layers is not None else 1
        module = sub if layers is None else self.label(sub, layers)
        if kind == "none":
            decoders.plain_norm(self.B, module, tokens or self.tok, dim, calls, residual)
            return
        bias = kind == "layernorm"
        self.record(sub, gguf, (("weight", (dim,)),) + ((("bias", (dim,)),) if bias else ()), layers, top=top)
        self.B.norm(module, "encoder", tokens or self.tok, dim, calls, residual=residual,
                    kind="rmsnorm" if kind == "rmsnorm" else "layernorm", bias=bias)


def joined(name: str, suffix: str) -> str:
    """A module's parameter name (or llama.cpp tensor name): `name.suffix`, or `name` for a suffix ""."""
    return f"{name}.{suffix}" if suffix else name


def path_parts(path: str, layer: str = r"\d+") -> list[str]:
    """A module's path as regex components (layout.signature, walk_names): `{bid}` as `layer`, `{xid}` any expert."""
    return [layer if c == "{bid}" else r"\d+" if c == "{xid}" else re.escape(c) for c in path.split(".")]


def module_shapes(modules: list[Module], body: str) -> dict[str, tuple[int, ...]]:
    """Every parameter name and shape of the modules a walk met, those inside the body under `body` ("": none)."""
    body += "." if body else ""
    out: dict[str, tuple[int, ...]] = {}
    for m in modules:
        for i in m.layers or (0,):
            for x in range(m.experts or 1):
                path = m.path.format(bid=i, xid=x)
                for suffix, shape in m.shapes:
                    out[("" if m.top else body) + joined(path, suffix)] = shape
    return out



def walk_tensors(walk: Callable[[Builder], list[Module]], body: str) -> Callable[[ArchSpec], dict[str, tuple[int, ...]]]:
    """A family's expected tensors derived from its own walk (module_shapes of the modules it records at a tiny
    Builder), those inside the body under `body` in a head model's file (recorder.tensors: a Recorder walk's)."""
    return lambda s: module_shapes(walk(Builder(s, 1, 1, 1, 1, 1)), "" if s.head == "base" else body)
