"""ArchSpec, the architecture record the analyses work from, in a module of its own so that both the
family record (base.py) and the op builder (ops.py) can use it without importing each other.

Notation follows docs/oracles.md: h hidden, a query heads, g key/value heads, d head dim, f intermediate,
V vocab, P positions, T type vocab, L layers, E embedding size (ALBERT/ELECTRA factorised embeddings).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeVar

# what each ArchSpec.seq_unit counts, in words
SEQ_UNITS = {"tokens": "tokens", "samples": "raw audio samples"}

@dataclass(frozen=True)
class Latent:
    """Multi-head latent attention's sizes (DeepSeek-V2/V3, layout.py): the query LoRA rank (0: one q_proj), the
    key/value latent's rank, the value head width. Its head_dim is qk_nope + qk_rope, its rope_dim qk_rope."""
    q_lora_rank: int
    kv_lora_rank: int
    v_head_dim: int
    # DeepSeek Sparse Attention's indexer (DecoderLayout.indexer): its heads and head width (0: no indexer)
    index_heads: int = 0
    index_head_dim: int = 0
    # the layers without an indexer of their own, which reuse the previous one's selection (GLM-5's "shared")
    index_shared: tuple[int, ...] = ()


@dataclass(frozen=True)
class DeltaNet:
    """A gated DeltaNet layer's sizes (Qwen3-Next's, Qwen3.5's linear attention, layout_linear.py): the key heads and
    their width, the value heads and their width, the short causal conv1d's kernel."""
    key_heads: int
    key_dim: int
    value_heads: int
    value_dim: int
    conv_kernel: int


@dataclass(frozen=True)
class SSM:
    """A state-space mixer's sizes (layout_ssm.py). Mamba2 (dt_rank 0; transformers' Mamba2Mixer and its copies in Bamba,
    Granite 4, NemotronH, FalconH1, Zamba2): heads x head_dim channels (`intermediate`, expand x hidden), a state of
    `state` per head and group of B/C, a depthwise conv1d of `conv_kernel` over x, B and C, the chunked scan's chunk
    length, and whether the conv1d and in_proj/out_proj have biases. Mamba1 (dt_rank > 0: Jamba's JambaMambaMixer,
    x_proj and dt_proj of that rank): one head of width 1 per channel (heads = intermediate, head_dim 1, groups 0: the
    conv over x alone), a state of `state` per channel, no chunks."""
    heads: int
    head_dim: int
    state: int
    groups: int
    conv_kernel: int
    chunk: int
    intermediate: int
    conv_bias: bool
    bias: bool
    dt_rank: int = 0
    # the mixer runs beside attention on its layers, both reading the layer's input norm, their outputs summed
    # (FalconH1: every layer), not in its place
    beside: bool = False
    out_bias: bool | None = None          # out_proj's bias where it is not in_proj's (FalconH1's projectors_bias)
    gated_norm: bool = True               # False: no RMSNormGated, the scan's output x silu(gate) (FalconH1's default)

    @property
    def conv_dim(self) -> int:
        """The conv1d's channels: x, B and C (intermediate + 2 x groups x state)."""
        return self.intermediate + 2 * self.groups * self.state


@dataclass(frozen=True)
class ShortConv:
    """The layers whose token mixer is a gated short convolution in place of attention (LFM2's Lfm2ShortConv,
    families/framework/mixers_conv.py): the depthwise conv1d's width (conv_L_cache) and whether its projections and
    conv are biased (conv_bias)."""
    kernel: int
    bias: bool
    layers: tuple[int, ...]


@dataclass(frozen=True)
class Lightning:
    """The layers whose token mixer is MiniMax's lightning attention (MiniMaxLightningAttention,
    families/framework/mixers_lightning.py): linear attention computed in blocks of block_size tokens."""
    block_size: int
    layers: tuple[int, ...]


class Variant:
    """What one family alone switches or sizes (OPT's final LayerNorm, Falcon's decoder generation, Mamba's state
    size, a CLIP tower's sizes): a frozen dataclass in the family's module that subclasses this, carried in
    ArchSpec.variant and read back with `ArchSpec.variant_as(cls)`, so that a misspelt name is a type error
    (mypy), not a silent 0."""

    def routed_choices(self, experts: int) -> int:
        """What a router picks its top-k from, given the `experts` the layers hold: those, unless the family's router
        also picks experts that hold no weights (LongCat-Flash's identity experts)."""
        return experts


V = TypeVar("V", bound=Variant)


@dataclass(frozen=True)
class ArchSpec:
    family: str                       # a registered Family.name
    model_type: str
    source: str                       # "config.json" or "tensor names"
    head: str                         # base, mlm, lm, pretraining, seqcls, tokcls, qa, encoder-only
    architecture: str | None          # the architectures[0] class name the head came from
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    positions: int = 0                # learned absolute positions (0: rotary / relative)
    context: int = 0                  # max_position_embeddings of rotary models (no parameters depend on it)
    type_vocab: int = 0
    embedding_size: int = 0           # ALBERT/ELECTRA factorised embeddings (== hidden when not factorised)
    activation: str = "gelu"
    gated_mlp: bool = False
    norm: str = "layernorm"           # layernorm | rmsnorm
    qkv_bias: bool = True
    o_bias: bool = True
    mlp_bias: bool = True
    tied_embeddings: bool = True
    pooler: bool = False
    num_labels: int = 2
    sliding_window: int | None = None
    experts: int = 0                  # MoE: experts per layer; 0 for dense
    top_k: int = 0
    decoder_layers: int = 0           # T5 decoder stack
    relative_buckets: int = 0         # T5 relative attention buckets
    shared_groups: int = 0            # ALBERT num_hidden_groups
    inner_group: int = 1              # ALBERT inner_group_num (layers run per group; 1 elsewhere)
    dtype: str | None = None          # config torch_dtype, when given
    assumptions: tuple[str, ...] = field(default=())
    # what one family alone switches or sizes (Variant): a record of its module's; None where it has none
    variant: Variant | None = None
    # encoder-decoders whose decoder differs from the encoder (BART's, Whisper's decoder_attention_heads and
    # decoder_ffn_dim; 0: the encoder's)
    decoder_heads: int = 0
    decoder_ffn: int = 0
    # image models: the side in pixels the model is analysed at (the config's image_size, or --image-size);
    # 0: the model reads no image
    image_size: int = 0
    # audio encoders (Whisper): log-mel bins, the encoder's positions (it reads 2x as many mel frames: conv2's
    # stride) and the decoder's learned positions
    mel_bins: int = 0
    source_positions: int = 0
    target_positions: int = 0
    # MoE models whose MLP is dense in some layers (DeepSeek first_k_dense_replace, Qwen-MoE mlp_only_layers and
    # decoder_sparse_step): those layer indices; () when every layer is alike
    dense_layers: tuple[int, ...] = ()
    # layers that attend only the last `sliding_window` tokens when not all do (Gemma2/3, Qwen2/3 layer_types;
    # empty with a sliding_window: every layer does, as Mistral's and Phi3's)
    sliding_layers: tuple[int, ...] = ()
    # the sliding layers attend within fixed chunks of sliding_window tokens, not the last sliding_window (Llama 4's
    # attention_chunk_size, its chunked_attention layers: the same DynamicSlidingWindowLayer cache, another mask)
    chunked_attention: bool = False
    # modules outside the analytic model whose parameters the checkpoint's count holds (a vision-language
    # model's vision tower and projector: families/wrappers.py); () when the model is the whole checkpoint
    outside: tuple[str, ...] = ()
    # the rotated dims per head when not all of head_dim (GLM-4's and Phi-3's partial_rotary_factor; Phi's, GPT-NeoX's
    # rotary_pct, GPT-J's rotary_dim; 0: all), and the layers whose attention has no rotary (SmolLM3's NoPE)
    rope_dim: int = 0
    nope_layers: tuple[int, ...] = ()
    # routed MoE layouts: the experts' width when not `intermediate` (Qwen-MoE's and DeepSeek's
    # moe_intermediate_size; 0: intermediate) and the shared expert's (0: none)
    moe_intermediate: int = 0
    shared_intermediate: int = 0
    # the width the routed experts run at when the MoE projects into a latent first (NemotronH's moe_latent_size: h ->
    # latent before the experts, latent -> h after; 0: none)
    moe_latent: int = 0
    # tanh soft-capping (x = cap x tanh(x / cap)) of the attention scores and of the final logits (Gemma2's
    # attn_logit_softcapping, final_logit_softcapping)
    attn_softcap: bool = False
    # layouts with q/k norms: whether this config has them (GLM-4.5's use_qk_norm; True where the layout fixes them);
    # Phi's qk_layernorm
    qk_norm: bool = True
    logit_softcap: bool = False
    latent: Latent | None = None      # multi-head latent attention (DeepSeek), None: q/k/v projections
    # hybrid decoders: the layers whose token mixer is a gated DeltaNet (config layer_types "linear_attention"), and
    # its sizes; () / None where every layer attends
    linear_layers: tuple[int, ...] = ()
    deltanet: DeltaNet | None = None
    # the flattened image patch (patch_size^2 x num_channels) a patch embedding reads that a text-only forward never
    # runs (Fuyu's vision_embed_tokens: DecoderLayout.patch_embed); 0: none
    patch_dim: int = 0
    # tokens the model prepends to every input, which its layers and cache hold and its output drops (CPM-Ant's
    # prompt_length prompt tokens)
    prefix_tokens: int = 0
    short_conv: ShortConv | None = None   # the short-convolution layers (LFM2), None: every layer attends
    lightning: Lightning | None = None    # the lightning-attention layers (MiniMax), None: every layer attends
    mrope: bool = False               # M-RoPE: a rotary table from 3 position rows (Qwen2-VL's, Qwen3-VL's: wrappers.py)
    # a layout's cross-attention layers, which a text-only forward skips (Mllama's cross_attention_layers without an
    # image): their parameters held, no op run, nothing cached (layout.walk)
    cross_layers: tuple[int, ...] = ()
    # the image states each sequence's cross-attention layers read (Mllama with --images: families/images reading);
    # 0: none, the layers skipped
    cross_states: int = 0
    # an encoder built as a decoder (BERT-likes' config is_decoder, as their *ForCausalLM is used): causal self-attention
    # whose keys and values the base model and the LM head return as a cache
    is_decoder: bool = False
    # the Mamba2 mixer's sizes (None: no state-space layers) and the layers whose token mixer it is in place of attention
    # (layout.attention_kinds: "state_space"; Mamba2 all of them, Bamba those not in attn_layer_indices)
    ssm: SSM | None = None
    ssm_layers: tuple[int, ...] = ()
    # the value heads' width when not head_dim, and the sliding layers' key/value heads when not kv_heads
    # (MiMo-V2-Flash's v_head_dim, and twice num_key_value_heads on its sliding layers); 0: as the others
    v_head_dim: int = 0
    sliding_kv_heads: int = 0
    # the layers that are their norm and the MLP alone, no token mixer and nothing cached (NemotronH's "mlp" and "moe"
    # blocks: DecoderLayout.one_mixer; layout.attention_kinds "none")
    ffn_layers: tuple[int, ...] = ()
    # what --seq counts: token ids (a text model's, the encoder's mel frames of Whisper), or the raw audio samples a
    # waveform encoder reads (wav2vec2.py: input_values; its conv stack turns them into the frames its layers run over)
    seq_unit: Literal["tokens", "samples"] = "tokens"
    # the family's layout (layout.Layouts) by name where the config picks among several for one model_type (OPT's
    # post-norm layers); "": the model_type's
    layout: str = ""

    def seq_notes(self, seq: int) -> list[str]:
        """What flops' output says of --seq when it counts something other than tokens."""
        return [f"--seq counts {SEQ_UNITS['samples']} ({seq:,} here), not tokens"] if self.seq_unit == "samples" else []

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """The layers whose MLP holds the routed experts: with experts, those that run an MLP (ffn_layers where the
        family lists them, NemotronH's; every layer otherwise) but the dense_layers. () where no layer does: a dense
        model, or a layer pattern that leaves every MLP dense (a NemotronH pattern without E, Jamba's expert period past
        the last layer, DeepSeek's first_k_dense_replace at L), whatever experts the config's defaults give."""
        if not self.experts:
            return ()
        return tuple(i for i in (self.ffn_layers or range(self.layers)) if i not in self.dense_layers)

    @property
    def routed_choices(self) -> int:
        """What each router picks its top_k from (Variant.routed_choices): the experts, or more."""
        return self.variant.routed_choices(self.experts) if isinstance(self.variant, Variant) else self.experts

    def variant_as(self, cls: type[V]) -> V:
        """The family's Variant record, checked to be `cls`."""
        if not isinstance(self.variant, cls):
            raise TypeError(f"{self.family} spec carries {type(self.variant).__name__}, not {cls.__name__}")
        return self.variant

    @property
    def emb(self) -> int:
        return self.embedding_size or self.hidden
