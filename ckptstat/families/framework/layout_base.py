"""What a DecoderLayout is (layout.py): the typed variants of a LLaMA-shaped decoder, its module paths and bias keys,
and the recorder the walk writes with (`Walk`: each parameterised module met once, its op written to the Builder in
the same call), with the dense MLP every layout's walk can meet (`mlp`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from . import decoders
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
# gated: act(gate) x up, down (LLaMA); plain: act(up), down (Arcee); routed: a router over gated experts (Mixtral)
MLP = Literal["gated", "plain", "routed"]
# a routed MLP's shared expert, a gated MLP of ArchSpec.shared_intermediate run on every token: gated, scaled by
# sigmoid(shared_expert_gate(x)) (Qwen2-MoE); summed, added to the experts' output (DeepSeek); averaged, (experts +
# shared) / 2 (Cohere2-MoE's shared_expert_combination_strategy "average")
Shared = Literal["none", "gated", "summed", "averaged"]
# a routed MLP's router: linear, its matmul (Mixtral, Qwen-MoE, DeepSeek); topk_softmax, biased, the top-k of its
# logits and a softmax over those k counted too (gpt-oss's GptOssTopKRouter); topk_sigmoid, the top-k of its logits
# scattered into -inf elsewhere and a sigmoid over all E (Llama 4's Llama4Router)
Router = Literal["linear", "topk_softmax", "topk_sigmoid"]
# a layer's token mixer: full and sliding softmax attention are walked per layer today (DeepSeek's latent attention,
# on every layer, is DecoderLayout.latent); the others name what the next architectures need (Llama 4's chunked,
# Qwen3-Next's linear, Jamba's state-space); short_conv: LFM2's gated short convolution (mixers_conv.py); lightning:
# MiniMax's blocked linear attention (mixers_lightning.py)
Attention = Literal["full", "sliding", "chunked", "linear", "state_space", "latent", "short_conv", "lightning"]
# the layers without rotary (NoPE): none; flags: the config's no_rope_layers, 0 on such a layer (SmolLM3); global:
# the full-attention layers when some layers slide (Exaone 4, Cohere2: rotary only on the sliding ones); theta: the
# layers whose config layer_rope_theta is 0 (GraniteSWA)
NoPE = Literal["none", "flags", "global", "theta"]


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
    embed: str = "embed_tokens"
    layers: str = "layers"
    attn: str = "self_attn"
    q: str = "q_proj"
    k: str = "k_proj"
    v: str = "v_proj"
    qkv: str = "qkv_proj"
    o: str = "o_proj"
    q_norm: str = "q_norm"
    q_a: str = "q_a_proj"                 # latent attention: q_a, q_a_norm, q_b (or q), kv_a, kv_a_norm, kv_b, o
    q_a_norm: str = "q_a_layernorm"
    q_b: str = "q_b_proj"
    kv_a: str = "kv_a_proj_with_mqa"
    kv_a_norm: str = "kv_a_layernorm"
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
    experts: str = "experts"
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


@dataclass(frozen=True)
class BiasKeys:
    """The config keys that switch the biases on (LLaMA's by default): q/k/v, o_proj, the MLP."""
    qkv: str = "attention_bias"
    o: str = "attention_bias"
    mlp: str = "mlp_bias"


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
    # the layers ArchSpec.short_conv lists run a gated short convolution in place of attention (LFM2, mixers_conv.py)
    short_conv: bool = False
    # the layers ArchSpec.lightning lists run MiniMax's lightning attention in place of softmax attention
    lightning: bool = False
    sinks: bool = False                   # attention sinks: a learned logit per head, one more softmax column (gpt-oss)
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
    # the config's attn_logit_softcapping / final_logit_softcapping, when set, soft-cap the scores / logits (Gemma2)
    softcap: bool = False
    tied_default: bool = False            # the config class's tie_word_embeddings default
    bias_keys: BiasKeys = BiasKeys()
    paths: Paths = Paths()
    # llama.cpp names its converter gives this architecture in place of LLaMA's, None where it writes no such
    # tensor (gguf-py MODEL_TENSORS: Seed-OSS's mlp_in norm is post_attention_norm; Command-R has no output)
    gguf_renames: tuple[tuple[str, str | None], ...] = ()
    # (config key, value): the switches whose other values add parts the layout does not describe (Cohere's
    # use_qk_norm false); another value is NoAnalyticModel, so the meta path answers it
    requires: tuple[tuple[str, Any], ...] = ()

    def gguf(self, name: str) -> str | None:
        return dict(self.gguf_renames).get(name, name)

    def __post_init__(self) -> None:
        for name, kind in (("norm", Norm), ("placement", Placement), ("qk_norm", QKNorm), ("mlp", MLP), ("shared", Shared),
                           ("router", Router), ("nope", NoPE)):
            if getattr(self, name) not in get_args(kind):
                raise TypeError(f"DecoderLayout.{name} = {getattr(self, name)!r} is not one of {get_args(kind)}")


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


class Walk:
    """Records each module and writes its op; `layers` the layers the current part runs in."""

    def __init__(self, B: Builder, lay: DecoderLayout):
        self.B, self.s, self.lay, self.p = B, B.s, lay, lay.paths
        self.tok = (B.b, B.seq)
        self.modules: list[Module] = []

    def label(self, sub: str, layers: tuple[int, ...]) -> str:
        return f"{self.p.layers}[{len(layers)}].{sub}"

    def record(self, sub: str, gguf: str | None, shapes: tuple[tuple[str, tuple[int, ...]], ...],
               layers: tuple[int, ...] | None, experts: int = 0) -> None:
        path = sub if layers is None else f"{self.p.layers}.{{bid}}.{sub}"
        gguf = self.lay.gguf(gguf) if gguf is not None else None
        g = gguf if layers is None or gguf is None else f"blk.{{bid}}.{gguf}"
        self.modules.append(Module(path, g, shapes, layers or (), experts))

    def linear(self, sub: str, gguf: str, fin: int, fout: int, bias: bool, layers: tuple[int, ...],
               tokens: tuple[int, ...] | None = None, label: str | None = None, experts: int = 0) -> None:
        shapes = (("weight", (fout, fin)),) + ((("bias", (fout,)),) if bias else ())
        self.record(sub, gguf, shapes, layers, experts)
        L = len(layers)
        self.B.linear(label or self.label(sub, layers), "encoder", tokens or self.tok, fin, fout, bias, L,
                      copies=L * experts if experts else None, active_copies=L * self.s.top_k if experts else None)

    def norm(self, sub: str, gguf: str | None, dim: int, layers: tuple[int, ...] | None, residual: bool = True,
             tokens: tuple[int, ...] | None = None) -> None:
        kind, calls = self.lay.norm, len(layers) if layers is not None else 1
        module = sub if layers is None else self.label(sub, layers)
        if kind == "none":
            decoders.plain_norm(self.B, module, tokens or self.tok, dim, calls, residual)
            return
        bias = kind == "layernorm"
        self.record(sub, gguf, (("weight", (dim,)),) + ((("bias", (dim,)),) if bias else ()), layers)
        self.B.norm(module, "encoder", tokens or self.tok, dim, calls, residual=residual,
                    kind="rmsnorm" if kind == "rmsnorm" else "layernorm", bias=bias)


def joined(name: str, suffix: str) -> str:
    """A module's parameter name (or llama.cpp tensor name): `name.suffix`, or `name` for a suffix ""."""
    return f"{name}.{suffix}" if suffix else name


def mlp(w: Walk, layers: tuple[int, ...], kind: MLP, f: int, sub: str = "", gguf: str = "") -> None:
    """A dense MLP at {mlp}.{sub} (sub: "" or the shared expert's "shared_expert."), llama.cpp's ffn_*{gguf}."""
    s, p, B = w.s, w.p, w.B
    h, pre = s.hidden, f"{p.mlp}.{sub}"
    if kind == "plain":
        w.linear(pre + p.up, "ffn_up" + gguf, h, f, s.mlp_bias, layers)
    elif w.lay.fused_gate_up:      # [gate; up] in one weight, kept fused by llama.cpp as ffn_up
        w.linear(pre + p.gate_up, "ffn_up" + gguf, h, 2 * f, s.mlp_bias, layers)
    else:
        w.linear(pre + p.gate, "ffn_gate" + gguf, h, f, s.mlp_bias, layers)
        w.linear(pre + p.up, "ffn_up" + gguf, h, f, s.mlp_bias, layers)
    gated = kind != "plain"
    learned = LEARNED_ACTIVATIONS.get(s.activation, ())
    if learned:
        w.record(pre + p.act, None, learned, layers)
    B.activation(w.label(f"{pre.rstrip('.')} act" + ("*up" if gated else ""), layers), "encoder", w.tok, f, s.activation,
                 len(layers), gated=gated, params=len(layers) * sum(n for _, (n,) in learned))
    if w.lay.sub_norms:
        w.norm(pre + p.ffn_sub, "ffn_sub_norm" + gguf, f, layers, residual=False)
    w.linear(pre + p.down, "ffn_down" + gguf, f, h, s.mlp_bias, layers)


