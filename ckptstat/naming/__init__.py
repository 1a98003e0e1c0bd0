"""Tensor name -> (bucket, layer index, role). Pure functions over names (and dtype/rank), no I/O.

Buckets: embedding, encoder (per layer; a decoder-only model's blocks are its encoder-equivalent),
decoder (the decoder stack of an encoder-decoder model such as T5), pooler, cls (task and LM heads),
vision and audio (a multimodal model's image / audio towers and the projectors into its language model, their
blocks numbered apart from the language model's), other (whatever no rule places: listed, never dropped).
Roles: parameter, buffer (torch registered buffers: position-id tables, BatchNorm running statistics),
non-trainable (Keras non-trainable variables: BatchNormalization moving statistics, which Keras's
count_params() counts and torch's parameters() does not), metric (Keras metric state: totals and
counts), optimizer (optimizer state), counter (training step counters).

Rules are tables of regular expressions searched in the normalised name, first match wins, with a
`(?P<layer>\\d+)` group where the name carries a layer index. The comment on each names the families
it comes from. Names are normalised first: TF separators `/` become `.`, `:0` and
`/.ATTRIBUTES/VARIABLE_VALUE` suffixes go, so one table serves every format.
"""
from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat

from ..core import Checkpoint, dtypes
from ..errors import CorruptCheckpointError

BUCKETS = ("embedding", "encoder", "decoder", "pooler", "cls", "vision", "audio", "other")
ROLES: tuple[str, ...] = ("parameter", "buffer", "non-trainable", "metric", "optimizer", "counter")
# Roles of the stored pieces of a quantised weight (census/quant/ groups them; docs/quantized.md).
QUANT_ROLES = ("packed-weight", "quantized-weight", "scale", "zero-point", "group-index", "absmax", "quant-map",
               "quant-state", "logical-shape", "sparsity-mask", "sparsity-offsets", "input-scale", "kv-scale",
               "amax-history")   # Keras float8's delayed-scaling state (census/quant/keras.py)
ROLES += QUANT_ROLES


@dataclass(frozen=True)
class Placement:
    bucket: str
    layer: int | None
    role: str


_TF_LIST_ITEM = re.compile(r"_\._(\d+)")                      # HF TF: tf_bert_model/bert/encoder/layer_._3/
_TF_SUFFIX = re.compile(r"(\.\.ATTRIBUTES\.VARIABLE_VALUE|:\d+)$")  # TF2 object keys; Keras `:0`


@lru_cache(maxsize=1 << 18)  # every analysis normalises every name, often more than once
def normalize(name: str) -> str:
    n = name.replace("/", ".")
    if "_._" not in n and ":" not in n and "ATTRIBUTES" not in n:   # what the two rules need: most names skip them
        return n
    return _TF_SUFFIX.sub("", _TF_LIST_ITEM.sub(r".\1", n))


def _rules(table: list[tuple[str, str]]) -> list[tuple[re.Pattern[str], str]]:
    return [(re.compile(p), v) for p, v in table]


# A PaddlePaddle optimizer accumulator's suffix on its parameter's name (`linear_0.w_0_moment1_0`)
PADDLE_ACCUMULATOR = r"_(moment[12]|beta[12]_pow_acc|velocity|moment|mean_square|mean_grad)_\d+$"

# Roles other than "parameter". Order matters: optimizer state first (its names embed parameter names).
ROLE_RULES = _rules([
    # torch training checkpoints, Lightning
    (r"(^|\.)(optimizer|optim|opt_state|optimizer_state_dict|optimizer_states)\.", "optimizer"),
    (r"(^|\.)(exp_avg|exp_avg_sq|max_exp_avg_sq|momentum_buffer|adam_m|adam_v)($|\.)", "optimizer"),  # torch Adam/SGD; TF1 BERT
    (r"\.OPTIMIZER_SLOT\.", "optimizer"),                                             # TF2 object-based slots
    # PaddlePaddle optimizers' accumulators (`<param>_moment1_0`, `_beta1_pow_acc_0`, Momentum's `_velocity_0`:
    # python/paddle/optimizer/{adam,adamw,momentum}.py _add_accumulator), and its LR scheduler's state (`.pdopt`)
    (PADDLE_ACCUMULATOR, "optimizer"),
    (r"^(LR_Scheduler|master_weights)\.", "optimizer"),
    (r"^optimizer_weights\.", "optimizer"),                                          # TF-Keras 2 full-model .h5
    (r"(^|\.)(global_step|save_counter|epoch|iteration|num_updates|step)$", "counter"),  # TF, torch loops
    # PyTorch Lightning .ckpt: callback, loop and scheduler state beside `state_dict` (lightning/pytorch/trainer/
    # connectors/checkpoint_connector.py dump_checkpoint: ModelCheckpoint's kth_value, best_model_score...)
    (r"^(callbacks|loops|lr_schedulers)\.", "metric"),
    (r"(^|\.)(position_ids|token_type_ids)$", "buffer"),                             # BERT-family registered buffers
    # rotary caches (LLaMA, GPT-NeoX; transformers 5: original_inv_freq, Gemma 3's {layer_type}_inv_freq), fairseq
    (r"(^|\.)([a-z_]*inv_freq|cos_cached|sin_cached|_float_tensor)$", "buffer"),
    # GGUF rope scaling tables (Llama 3, Phi-3)
    (r"^(rope_freqs|rope_factors_long|rope_factors_short)\.weight$", "buffer"),
    (r"(^|\.)(running_mean|running_var|num_batches_tracked)$", "buffer"),             # BatchNorm
    # Keras metric variables (tf_keras SavedModel/checkpoint `keras_api/metrics/0/total`, Keras `metrics/...`)
    (r"(^|\.)(keras_api\.)?(metrics|compiled_metrics)\.", "metric"),
    # Keras BatchNormalization moving statistics (Keras 2, HF TF, TF1 batch_norm); Keras 3: _KERAS3_BN_STAT
    (r"(^|\.)(moving_mean|moving_variance)$", "non-trainable"),
    # Keras 3 Normalization: adapt()'s mean, variance and count, all built trainable=False (keras/src/layers/
    # preprocessing/normalization.py build(); count_params() counts them)
    (r"(^|\.)layers\.normalization(_\d+)?\.vars\.\d+$", "non-trainable"),
    # Flax's batch_stats collection (nn.BatchNorm's running mean / var: PyTorch's running_mean / running_var buffers)
    (r"^batch_stats\.", "buffer"),
    (r"(^|\.)final_logits_bias$", "buffer"),                                         # BART, mBART, Pegasus, Marian: a buffer
    # Ernie 4.5 MoE keeps its router correction bias as nn.Parameter(requires_grad=False): parameters() counts it
    (r"(^|\.)moe_statics\.e_score_correction_bias$", "parameter"),
    (r"(^|\.)e_score_correction_bias$", "buffer"),                                   # DeepSeek-V3 router: register_buffer
    # transformers 5 buffers (nn.Buffer) under names that read as weights (tests/test_buffers_v5.py: real saves)
    (r"(^|\.)layers\.\d+\.layer_scalar$", "buffer"),     # Gemma 4, EmbeddingGemma 2, DiffusionGemma: per-layer scale
    (r"(^|\.)act_fn\.(beta|eps)$", "buffer"),             # Apertus, Apertus 1.5: XIELUActivation's constants
    (r"(^|\.)feed_forward\.expert_bias$", "buffer"),      # LFM2-MoE: the router's load-balancing bias
    (r"(^|\.)mlp\.gate\.expert_bias$", "buffer"),        # Sarvam-MoE (Glm4Moe's class): e_score_correction_bias, saved
    # EnCodec's EuclideanCodebook (EnCodec, MusicGen, Bark, X-Codec, WavTokenizer) and Mimi's (Mimi, CSM, Kyutai STT)
    (r"(^|\.)codebook\.(inited|initialized|cluster_size|cluster_usage|embed_avg|embed_sum|embed)$", "buffer"),
    (r"(^|\.)(input|output)_(min|max)$", "buffer"),       # Gemma 4 audio: its clipped linears' bounds
    (r"(^|\.)(n_points_scale|num_points_scale)$", "buffer"),   # RT-DETR v2, D-FINE, DEIMv2 deformable attention
    (r"(^|\.)global_(mean|invstd)$", "buffer"),           # Phi-4 multimodal audio: the input normaliser
    # I-BERT (transformers models/ibert/quant_modules.py): QuantEmbedding/QuantLinear's integer copies and
    # scaling factors, QuantAct's running range, IntLayerNorm's shift are registered buffers
    (r"(^|\.)(weight_integer|bias_integer|weight_scaling_factor|fc_scaling_factor|act_scaling_factor|x_min|x_max)$",
     "buffer"),
    (r"(^|\.)LayerNorm\.shift$", "buffer"),
    (r"(^|\.)self_attn\.(slope_rate|query_decay|key_decay|diagonal_decay)$", "buffer"),   # MiniMax lightning attention
    # SAM, SAM-HQ, SAM2, EdgeTAM: SamPositionalEmbedding's random Fourier features (the prompt encoder's view too)
    (r"(^|\.)(shared_image_embedding|shared_embedding)\.positional_embedding$", "buffer"),
    (r"(^|\.)pos_idx_to_embed$", "buffer"),                                          # Florence-2 sinusoidal table
    (r"^blk\.\d+\.exp_probs_b\.bias$", "buffer"),                                    # ...the same in GGUF (deepseek2)
    (r"(^|\.)attn\.masked_bias$", "buffer"),                                          # GPT-2 (older transformers)
    (r"\.OBJECT_GRAPH|_CHECKPOINTABLE_OBJECT_GRAPH", "counter"),                      # TF2 object graph (training state)
    # ONNX Constant nodes (shapes, scales, masks), as torch.onnx.export names their outputs:
    # `/encoder/layer.0/attention/self/Constant_5_output_0` (formats/onnx_model.py)
    (r"(^|\.)Constant(_\d+)?_output_\d+$", "buffer"),
])
# GPT-2's causal mask `h.N.attn.bias` is a buffer, but `attn.bias` of rank 1 would be a real bias.
_GPT2_MASK = re.compile(r"(^|\.)attn\.bias$")

# Multimodal towers (transformers 5.25's vision-language and audio-language wrappers, CLIP's and SigLIP's image half,
# OpenCLIP's `visual`): a tower's blocks would otherwise be `encoder.N` beside the language model's `layers.N`, one
# row for two layers. The tower is a component anywhere in the name (Gemma 3's `vision_tower.vision_model.encoder.
# layers.N`, Qwen2-VL's `visual.blocks.N`, Qwen-Omni's `thinker.audio_tower.layers.N`), its layer the first block
# number inside it (none for Qwen3-VL's `visual.deepstack_merger_list.N`, a projector). Modules named for their
# modality are that modality's, no layer; a projector named for none is placed by MODALITY_PROJECTORS. A second stack
# beside a tower's own (Mllama's `global_transformer`, Video-LLaVA's `video_tower` beside its `image_tower`,
# DeepSeek-VL-Hybrid's high-resolution tower) has no layer rows: its blocks would share the first stack's indices.
_VISION_TOWERS = (r"vision_tower|vision_model|visual|image_tower|vision_encoder|visual_tokenizer"
                  r"|vision_backbone|video_model|image_embed|vision_embed_tokens")   # (Phi-4-mm's, Phi-3-V's, Fuyu's)
_AUDIO_TOWERS = r"audio_tower|audio_encoder|speech_encoder|audio_embed"
_BLOCK = r"(?:[^.]+\.)*?(?:layers?|blocks?|resblocks|h|encoders)\.(?P<layer>\d+)\."   # (Phi-4-mm's conformer: encoders)
TOWER_RULES = [
    (rf"(^|\.)({_VISION_TOWERS})\.(.*\.)?global_transformer\.", "vision"),
    (rf"(^|\.)({_VISION_TOWERS})\.{_BLOCK}", "vision"),
    (rf"(^|\.)({_VISION_TOWERS})\.", "vision"),
    (rf"(^|\.)({_AUDIO_TOWERS})\.{_BLOCK}", "audio"),
    (rf"(^|\.)({_AUDIO_TOWERS})\.", "audio"),
    # projectors and tables named for images: LLaVA-NeXT's image_newline, Ovis's visual vocabulary (vte), Kosmos-2's,
    # LightOnOCR's, HyperCLOVAX's, Mistral Large 3's, Step's, DeepSeek-VL-Hybrid's, Gemma 3n's and Gemma 4's, Granite 4
    # Vision's Q-Formers; the image tokenizer (VQ-GAN) and image-generation head of Chameleon, Emu3 and Janus
    (r"(^|\.)(image_newline|visual_embeddings_table|vte|image_to_text_projection|vision_projection|vision_projector"
     r"|vision_adapter|vision_language_adapter|vit_large_projector|high_res_vision_\w+|video_tower|embed_vision"
     r"|layerwise_projectors|spatial_projectors|vqmodel|generation_(embeddings|aligner|head))(\.|$)", "vision"),
    (r"(^|\.)(embed_audio|audio_projector)(\.|$)", "audio"),   # Gemma 3n's / Gemma 4's audio embedder
    # llama.cpp's multimodal projector files (mmproj-*.gguf, tools/mtmd/clip-impl.h): `v.blk.N.*`, `a.blk.N.*`, and
    # `v.<module>.weight` (a module of a model's own named `v` or `a`, `v.weight`, is not one)
    (r"^v\.blk\.(?P<layer>\d+)\.", "vision"), (r"^v\.[^.]+\.", "vision"),
    (r"^a\.blk\.(?P<layer>\d+)\.", "audio"), (r"^(a|mm\.a)\.[^.]+\.", "audio"),
]
# Projectors into the language model named for no modality (LLaVA's multi_modal_projector, Idefics3's connector,
# MiniCPM-V's merger, BLIP-2's Q-Former...), as a name's first component: the image side's where the checkpoint
# holds a vision tower, else the audio side's (Qwen2-Audio's and Voxtral's multi_modal_projector, Granite Speech's
# projector; an mmproj GGUF's `mm.*` and `resampler.*`); in a checkpoint without a tower, whatever the rules below say
# (classify_columns)
MODALITY_PROJECTORS = re.compile(r"^(multi_modal_projector|mm_projector|connector|merger|aligner|projector|mlp1"
                                 r"|mlp_AR|language_projection|qformer|query_tokens|patch_merge_mlp|patch_merger"
                                 r"|pre_mm_projector_norm|resampler_model|resampler|mm)(\.|$)")

BUCKET_RULES = _rules(TOWER_RULES + [
    # Embeddings
    (r"(^|\.)(embeddings(_project|_layer_norm)?|ngram_embeddings|position_embeddings|embed_global)\.", "embedding"),  # BERT,
    # RoBERTa, ALBERT, ELECTRA, DistilBERT; ProphetNet's decoder embeddings, PEGASUS-X's global tokens
    (r"(^|\.)embedding_hidden_mapping_in\.", "embedding"),           # ALBERT factorised embedding projection
    (r"(^|\.)(wte|wpe)\.|(^|\.)mask_emb$", "embedding"),            # GPT-2; XLNet's mask embedding
    # GPT-1's tables, XLM's (Flaubert's) embedding norm, CTRL's `w`, LUKE's entity embeddings; Gemma 3n's and Gemma 4's
    # per-layer embeddings and their projection from the main embedding (modeling_gemma3n.py get_per_layer_inputs)
    (r"(^|\.)(tokens_embed|positions_embed|layer_norm_emb|entity_embeddings|embed_tokens_per_layer"
     r"|per_layer_model_projection|per_layer_projection_norm)\.|^w\.weight$|^(sew|sew_d)\.layer_norm\.", "embedding"),
    # LLaMA/Mistral/Qwen2, Meta, GGUF, BLOOM (and its word_embeddings_layernorm), GPT-NeoX's embed_in, XLNet
    (r"(^|\.)(embed_tokens|embed_positions|tok_embeddings|token_embd|word_embeddings?(_layernorm)?|embed_in)\.", "embedding"),
    (r"^(token_embd_norm|position_embd|token_types)\.", "embedding"),  # GGUF (BERT, GPT-2, BLOOM)
    (r"^(shared|encoder\.embed_tokens|decoder\.embed_tokens)\.", "embedding"),  # T5 (after prefix strip)
    (r"(^|\.)encoder\.(conv\d+|layernorm_embedding)\.", "embedding"),  # Whisper conv front-end, BART embedding norm
    (r"(^|\.)(embedder|pre_layrnorm)\.", "embedding"),                # ResNet conv stem; CLIP vision pre-norm (sic)
    (r"(^|\.)conv_stem\.", "embedding"),                               # MobileNet's conv stem (timm EfficientNet's)
    # wav2vec2's front-end (HuBERT, WavLM, Data2VecAudio, UniSpeech, SEW): the conv feature encoder over the waveform,
    # its projection to the model width, the convolutional position embedding, the masked-frame vector
    (r"(^|\.)(feature_extractor\.conv_layers|feature_projection|encoder\.pos_conv_embed)\.|(^|\.)masked_spec_embed$",
     "embedding"),
    # Megatron-Core LanguageModelEmbedding (GPT, BERT, T5; NeMo 2.0): word, learned position and token-type tables
    (r"(^|\.)embedding\.(word_embeddings|position_embeddings|tokentype_embeddings)\.", "embedding"),
    # Encoder-decoder stacks (T5, BART): decoder blocks kept apart
    (r"(^|\.)decoder\.(block|layers?)\.(?P<layer>\d+)\.", "decoder"),
    (r"(^|\.)decoder\.(final_layer_norm|layer_norm|layernorm_embedding)\.", "decoder"),
    (r"^dec\.(blk\.(?P<layer>\d+)|output_norm)\.", "decoder"),     # GGUF T5: dec.blk.N., dec.output_norm
    # Megatron-Core distributed checkpoints store a block's layers stacked, one tensor per name with the layer as
    # its leading dimension (`decoder.layers.self_attention.linear_qkv.weight` [L, 3h, h]): the stack, no index
    # (formats/dcp/megatron.py marks the axis; census/tally.py splits it by layer)
    (r"(^|\.)decoder\.layers\.(?!\d)", "decoder"),
    (r"(^|\.)encoder\.layers\.(?!\d)", "encoder"),
    # Blocks: BERT `encoder.layer.N`, DistilBERT `transformer.layer.N`, GPT-2 `h.N`, LLaMA `layers.N`,
    # T5 `encoder.block.N`, ALBERT `albert_layer_groups.N`, TF1 BERT `layer_N`, GGUF `blk.N`
    (r"(^|\.)(layer|layers|h|block|blocks|blk|albert_layer_groups)[._](?P<layer>\d+)(\.|$)", "encoder"),
    # XLM (Flaubert) holds each layer's modules in lists of their own: attentions.N, layer_norm1.N, ffns.N, layer_norm2.N
    (r"(^|\.)(attentions|ffns|layer_norm\d+)\.(?P<layer>\d+)\.", "encoder"),   # (rules see numbers renumbered)
    # across the layers: hyper-connection mixers (DeepSeek-V4's and HY-V4's hc_head), Gemma 3n's AltUp projections,
    # MPNet's shared relative position bias, SEW's upsampling back to the frame rate
    (r"(^|\.)(hc_head|hyper_connection_mixer|altup_projections|altup_unembed_projections"
     r"|encoder\.relative_attention_bias|encoder\.upsample)(\.|$)", "encoder"),
    (r"(^|\.)downsampling_layer\.", "encoder"),                        # ConvNeXt's LayerNorm and conv between stages
    (r"(^|\.)conv_\d+x\d+\.", "encoder"),   # MobileNet V2's last conv, conv_1x1 (rules see numbers renumbered)
    # Final norms of a stack
    # GPT-2, LLaMA, T5, GGUF; ModernBERT's final_norm, LFM2's embedding_norm (after its last layer, modeling_lfm2.py)
    (r"(^|\.)(ln_f|norm|final_layer_norm|final_layernorm|output_norm|final_norm|embedding_norm)\.", "encoder"),
    # Mamba final norm; Whisper/mBART encoder final norm; XLM-RoBERTa-XL's encoder.LayerNorm, ESM's emb_layer_norm_after
    (r"(^|\.)(norm_f|encoder\.(layer_norm|LayerNorm|emb_layer_norm_after))\.", "encoder"),
    # Megatron-BERT's encoder.ln, RWKV's ln_out, xLSTM's out_norm
    (r"(^|\.)(encoder\.ln|ln_out|out_norm)\.", "encoder"),
    (r"(^|\.)(layernorm|post_layernorm)\.", "encoder"),            # ViT final norm; CLIP vision final norm
    # Pooler
    (r"(^|\.)pooler\.", "pooler"),                                   # BERT, ALBERT, RoBERTa
    # Heads: LM heads and task heads
    (r"(^|\.)(cls|lm_head|predictions|generator_predictions|generator_lm_head|discriminator_predictions|classification_head"
     r"|output_projection"
     r"|classifier|pre_classifier|qa_outputs|score|seq_relationship|sop_classifier|vocab_transform|embed_out|contact_head"
     r"|vocab_layer_norm|vocab_projector|lm_loss|output|sequence_summary|logits_proj|output_layer|lm_heads"
     r"|projection_head|entity_predictions|cls_classifier|distillation_classifier|pred_layer)\.|^proj_out\.", "cls"),
    # BERT, ALBERT, ELECTRA, DistilBERT, HF heads (XLM's and XLNet's sequence_summary, logits_proj), GGUF, Megatron-Core's
    # GPTModel output_layer, GPT-NeoX's embed_out, ESM's contact_head, BART's classification_head, FSMT's
    # output_projection, MusicGen's lm_heads, XLM's pred_layer, ModernVBERT's projection_head, LUKE's
    # entity_predictions, DeiT's two classifiers, an untied Whisper's proj_out; a top-level `head` (ModernBERT's MLM
    # head, timm's classifier) and ModernBERT's `decoder` Linear
    (r"^(head\.|decoder\.(weight|bias)$)", "cls"),
    # CLIP's contrastive head; SigLIP's text head and logit bias, CLAP's audio projection and two scales
    (r"(^|\.)(visual_projection|text_projection|audio_projection)\.|(^|\.)(logit_scale(_a|_t)?|logit_bias)$"
     r"|^text_model\.head\.", "cls"),
    # Keras 3 `.weights.h5` (KerasHub presets: formats/keras_hub.py) names a layer by its class, the first of a kind
    # bare and the next ones `_1`, `_2`...: `layers/gemma_decoder_block/...`, `layers/gemma_decoder_block_1/...`
    # (`first`: layer 0); the embeddings `reversible_embedding`, `position_embedding`, `token_and_position_embedding`;
    # a KerasHub task's own weights under `task/` (its head)
    (r"(^|\.)layers\.\w*(decoder|encoder)(_block|_layer)?_(?P<layer>\d+)\.", "encoder"),
    (r"(^|\.)layers\.\w*(decoder|encoder)(_block|_layer)?(?P<first>)\.", "encoder"),
    (r"(^|\.)layers\.(\w+_)?embedding(_\d+)?\.", "embedding"),
    (r"^task\.layers\.", "cls"),
    # last, after the heads' own norms (lm_head.layer_norm, predictions.LayerNorm): a base model's own final norm
    # (BioGPT's, XGLM's layer_norm, RoBERTa-PreLayerNorm's LayerNorm)
    (r"^(\w+\.)?(layer_norm|LayerNorm)\.", "encoder"),
])
FIRST = -1   # _bucket_of's layer position for a rule's `first` group: the first of its kind, layer 0 (Keras' bare name)
_NUMBER = re.compile(r"(\d+)")
_INDICES = [str(k) for k in range(64)]


def _layer_index(digits: str) -> int:
    """A layer index from a name's digits; a run past int()'s 4,300-digit limit is the name's error, one line
    (a hostile name, never an internal error)."""
    if len(digits) > 4000:
        raise CorruptCheckpointError(None, f"a tensor name holds a layer index of {len(digits):,} digits")
    return int(digits)


def _numbered(name: str) -> tuple[str, list[str]]:
    """The name with its k-th number replaced by k, and the numbers. No rule looks at a number's value,
    so names that differ only in layer or expert indices share one rule lookup (a 47k-tensor MoE header
    has a few dozen such shapes). One regex pass a name (docs/performance.md)."""
    parts = _NUMBER.split(name)   # text, number, text, number, ..., text
    numbers = parts[1::2]
    if not numbers:
        return name, numbers
    parts[1::2] = _INDICES[:len(numbers)] if len(numbers) <= len(_INDICES) else [str(k) for k in range(len(numbers))]
    return "".join(parts), numbers


# Keras 3 `.weights.h5` numbers a layer's variables instead of naming them: BatchNormalization's are
# gamma, beta, moving_mean, moving_variance (keras/src/layers/normalization/batch_normalization.py
# build(), default scale=True, center=True), so vars 2 and 3 are its moving statistics. The one rule
# that reads a number's value, so it is tried before the numbered lookup.
_KERAS3_BN_STAT = re.compile(r"(^|[./])layers[./]batch_normalization(_\d+)?[./]vars[./][23]$")
_KERAS3_BN_VAR = re.compile(r"((?:^|.*[./])layers[./]batch_normalization(?:_\d+)?[./]vars)[./](\d+)$")


def keras3_bn_stats(names: Iterable[str]) -> list[str]:
    """The moving statistics of Keras 3 BatchNormalization layers built with scale=False or center=False: build()
    adds gamma only with scale, beta only with center, then moving_mean and moving_variance, so the statistics are
    a layer's last two vars whatever it holds (vars 1 and 2, or 0 and 1), which _KERAS3_BN_STAT's 2 and 3 miss."""
    groups: dict[str, list[tuple[int, str, str]]] = {}
    for name in names:
        m = _KERAS3_BN_VAR.match(name) if "batch_normalization" in name else None
        if m:
            groups.setdefault(m[1], []).append((len(m[2]), m[2], name))   # (numbers compared as numbers, unbounded)
    return [name for held in groups.values() for *_, name in sorted(held)[-2:]]


def role_of(name: str, dtype: str = "F32", shape: tuple[int, ...] = ()) -> str:
    key = (name, dtype, len(shape) == 4)
    role = _ROLES_SEEN.get(key)
    if role is None:
        role = _remember(key, _role_from(name, _numbered(name)[0], dtype, key[2]))
    return role


# (name, dtype, rank 4) -> role, as classify found it: the census's placements and the families'
# canonical_tensors both ask, name by name (docs/performance.md). Bounded: cleared when full.
_ROLES_SEEN: dict[tuple[str, str, bool], str] = {}


def _remember(key: tuple[str, str, bool], role: str) -> str:
    if len(_ROLES_SEEN) >= 1 << 18:
        _ROLES_SEEN.clear()
    _ROLES_SEEN[key] = role
    return role


def _role_from(name: str, numbered: str, dtype: str, rank4: bool) -> str:
    if _KERAS3_BN_STAT.search(name):
        return "non-trainable"
    return _role_of(numbered, dtype, rank4)


# A normalisation layer's gain (scale) vector: its values sit near 1.0 while the weights around it sit near 0,
# so `plot` draws gains in a panel of their own. BERT `LayerNorm.weight`, LLaMA `input_layernorm`/`norm`, GPT-2
# `ln_1`/`ln_f`, T5 `layer_norm`, Whisper `self_attn_layer_norm`, GGUF `attn_norm`/`output_norm`, TF/Keras `gamma`
# (of a LayerNormalization or BatchNormalization), Flax `scale`.
_NORM_GAIN = re.compile(r"(^|\.)(\w*norm\w*|ln_?\w*|layer_normalization\w*|batch_normalization\w*)\.(weight|gamma|scale)$"
                        r"|\.layer_norm_weight$",   # Megatron-Core: a norm fused into the next linear (linear_qkv.)
                        re.IGNORECASE)


def is_norm_gain(name: str) -> bool:
    tail = name[-6:].lower()   # (a cheap test first: a file of 200,000 tensors asks per name)
    return tail.endswith(("weight", "gamma", "scale")) and bool(_NORM_GAIN.search(normalize(name)))


@lru_cache(maxsize=1 << 16)
def _role_of(name: str, dtype: str, rank4: bool) -> str:
    n = normalize(name)
    for pattern, role in ROLE_RULES:
        if pattern.search(n):
            return role
    if _GPT2_MASK.search(n) and rank4:
        return "buffer"
    # Integer and boolean tensors are index tables and masks, never trainable parameters.
    d = dtypes.DTYPES.get(dtype)
    if not (d.is_float if d is not None else dtype.startswith(("F", "BF", "C"))):  # GGUF Q4_0... are float
        return "buffer"
    return "parameter"


# A quantised weight's member, by the suffix after its module (census/quant/ decides which tensors are
# members; docs/quantized.md cites each writer). `weight` itself is packed when it holds several logical
# values per stored element, quantised when one.
QUANT_MEMBER_ROLES = {
    "qweight": "packed-weight", "qzeros": "zero-point", "scales": "scale", "g_idx": "group-index",   # GPTQ, AWQ
    "weight_packed": "packed-weight", "weight_scale": "scale", "weight_zero_point": "zero-point",     # compressed-tensors
    "weight_g_idx": "group-index", "weight_shape": "logical-shape", "weight_global_scale": "scale",
    "compressed": "packed-weight", "bitmask": "sparsity-mask", "row_offsets": "sparsity-offsets",   # compressed-tensors sparse
    "shape": "logical-shape",
    "weight_scale_inv": "scale", "activation_scale": "input-scale",                                  # FP8 (DeepSeek-V3, fbgemm)
    "gate_up_proj_scale_inv": "scale", "down_proj_scale_inv": "scale",          # transformers' FP8 experts, scales fused
    "weight_scale_2": "scale",                                                                       # modelopt NVFP4
    "input_scale": "input-scale", "input_zero_point": "input-scale", "input_global_scale": "input-scale",
    "input_scale_ub": "input-scale",
    "k_scale": "kv-scale", "v_scale": "kv-scale", "q_scale": "kv-scale", "kv_scale": "kv-scale",       # FP8 KV cache
    "prob_scale": "kv-scale", "output_scale": "input-scale",
    "SCB": "scale", "weight_format": "quant-state",                                                  # bitsandbytes int8
    "comfy_quant": "quant-state", "scale_weight": "scale", "scale_input": "input-scale",              # ComfyUI
    "embedding_scale": "scale", "input_activation_scale": "input-scale",                             # Gemma's
    "output_activation_scale": "input-scale",
    "absmax": "absmax", "nested_absmax": "absmax", "quant_map": "quant-map",                         # bitsandbytes 4-bit
    "nested_quant_map": "quant-map",
    "blocks": "packed-weight",                                        # gpt-oss MXFP4 (its `scales`: scale)
    "_data": "quantized-weight", "_data._data": "packed-weight",      # optimum-quanto qint8/qfloat8, qint4/qint2
    "_scale": "scale", "_shift": "zero-point",                        # (`weight.` + QTensor inner names)
    "W_q": "packed-weight", "scale": "scale", "zero": "zero-point",   # HQQ (its nbits, axis, packing ...: quant-state)
    "_weight_qdata": "quantized-weight", "_weight_scale": "scale",    # torchao Float8Tensor / Int8Tensor (safetensors)
    "_weight_zero_point": "zero-point",
    "biases": "zero-point", "global_scale": "scale",                  # MLX (uint32 `weight`, its `scales`: scale)
}


def quant_member_role(suffix: str, method: str) -> str:
    """The role of a quantised weight's member from its suffix (`qzeros`, `weight.absmax` -> `absmax`)."""
    if suffix.startswith("quant_state."):
        return "quant-state"
    if suffix in ("weight", "embedding_quantized"):
        return ("packed-weight" if method.startswith(("bitsandbytes-nf4", "bitsandbytes-fp4", "mlx", "modelopt nvfp4",
                                                      "comfyui nvfp4")) or method in ("bitnet", "gemma int4", "gemma int2")
                else "quantized-weight")
    if suffix == "W_q" and method == "hqq 8-bit":   # HQQ's 8bit_u8 packing: one value per byte
        return "quantized-weight"
    return QUANT_MEMBER_ROLES.get(suffix, "quant-state")


_WRAPPERS = re.compile(r"^((module|_orig_mod|model|transformer|base_model|state_dict)\.)+")  # DDP, compile, training ckpts
_BASE_MODELS = re.compile(r"^((module|_orig_mod|model|transformer|base_model|state_dict|bert|roberta|electra|albert"
                          r"|distilbert|camembert|tf_bert_model)\.)+")


def strip_prefixes(name: str, base_models: bool = False) -> str:
    """The normalised name without its wrapper prefixes (`module.`, `_orig_mod.`, `model.`...) and,
    with base_models, the base model's own (`bert.`, `roberta.`...): what a name means across
    files, heads and formats. TF list items `layer_3` become `layer.3`."""
    n = (_BASE_MODELS if base_models else _WRAPPERS).sub("", normalize(name))
    return re.sub(r"(^|\.)layer_(\d+)(?=\.|$)", r"\1layer.\2", n) if base_models else n


def bucket_of(name: str) -> tuple[str, int | None]:
    numbered, numbers = _numbered(name)
    bucket, k = _bucket_of(numbered)
    return bucket, _layer_of(numbers, k)


def _layer_of(numbers: list[str], k: int | None) -> int | None:
    """The layer index a rule found: the name's k-th number, 0 for FIRST, None for none."""
    return None if k is None else 0 if k == FIRST else _layer_index(numbers[k])


@lru_cache(maxsize=1 << 16)
def _bucket_of(numbered: str) -> tuple[str, int | None]:
    """(bucket, which of the name's numbers is its layer index, FIRST for layer 0) for a name from _numbered."""
    n = strip_prefixes(numbered)
    for pattern, bucket in BUCKET_RULES:
        m = pattern.search(n)
        if m:
            found = m.groupdict()
            if found.get("first") is not None:
                return bucket, FIRST
            layer = found.get("layer")
            return bucket, int(layer) if layer is not None else None
    return "other", None


def classify(name: str, dtype: str = "F32", shape: tuple[int, ...] = ()) -> Placement:
    """bucket_of and role_of in one pass over the name: its numbered form is computed once."""
    numbered, numbers = _numbered(name)
    bucket, k = _bucket_of(numbered)
    rank4 = len(shape) == 4
    role = _remember((name, dtype, rank4), _role_from(name, numbered, dtype, rank4))
    return Placement(bucket, _layer_of(numbers, k), role)


_DIGIT_TO_HASH = str.maketrans("0123456789", "#" * 10)


class _Masked:
    """classify of every name, a slice of names at a time (`add`), with the rule look-ups shared by every name of
    one mask (its digits as `#`, from one str.translate over the slice's names, in C), dtype and rank, and one
    Placement per (bucket, layer, role): a 200k-tensor MoE header has a few dozen masks (docs/performance.md).
    Names of one mask have one numbered form, and their layer index is the same span of each name. The per-name
    work is whole columns in C (map, zip, slices, dicts of strings, whose hashes are cached): Python runs once per
    key and once per (key, layer index). Slices bound the per-name strings alive at once (the masks, the keys and
    the rows: 270 MB at 1M tensors, all at once). The caller sends names holding \\x00 or \\x01 (the keys'
    separators) name by name."""

    def __init__(self, tag_dtypes: bool, tag_ranks: bool):
        # key: the mask, and the dtype and rank where the checkpoint has more than one (decided over all its names,
        # so that a key means one thing in every slice)
        self.tag_dtypes, self.tag_ranks = tag_dtypes, tag_ranks
        self.rules: dict[str, tuple[str, str, slice, bool]] = {}
        self.made: dict[tuple[str, str | None, str], Placement] = {}
        self.out: dict[str, Placement] = {}

    def add(self, names: list[str], dtypes: list[str], ranks: list[int], masks: list[str]) -> None:
        keys = masks
        for column, tagged in ((dtypes, self.tag_dtypes), (ranks, self.tag_ranks)):
            if tagged:
                tag = {t: f"\x00{t}" for t in set(column)}
                keys = list(map(operator.add, keys, map(tag.__getitem__, column)))
        rules = self.rules
        first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1)))   # each key's first name
        for key, i in first.items():
            if key in rules:
                continue
            name, dtype, rank = names[i], dtypes[i], ranks[i]
            numbered, _ = _numbered(name)
            bucket, k = _bucket_of(numbered)
            span = [m.span() for m in _HASHES.finditer(key)][k] if k not in (None, FIRST) else (0, 0)   # "": none
            rules[key] = (bucket, _role_from(name, numbered, dtype, rank == 4), slice(*span), k == FIRST)
        cuts = {key: rules[key][2] for key in first}
        # each name's row: its key and its layer index's digits ("" for none: a real span holds a digit)
        digits = map(operator.getitem, names, map(cuts.__getitem__, keys))
        rows = list(map(operator.add, map(operator.add, keys, repeat("\x01")), digits))
        made = self.made
        place: dict[str, Placement] = {}
        for row, key in dict(zip(rows, keys)).items():
            bucket, role, _, at_first = rules[key]
            index = "0" if at_first else row[len(key) + 1:] or None
            p = made.get((bucket, index, role))
            if p is None:
                p = made[(bucket, index, role)] = Placement(bucket, _layer_index(index) if index is not None else None, role)
            place[row] = p
        self.out.update(zip(names, map(place.__getitem__, rows)))

    def has_encoder(self) -> bool:
        return any(bucket == "encoder" and (cut.stop or at_first) for bucket, _, cut, at_first in self.rules.values())


# Passes that make a string a name (a mask, a form, a shape, a search's text) go a slice of names at a time: one
# slice's strings alive at once, not a 1M-tensor header's (hundreds of MB; ~15 MiB at slices of 65,536 names).
SLICE_NAMES = 1 << 14


def joined_slices(names: list[str]) -> Iterator[tuple[int, list[str], str | None]]:
    """(start, names[start:start + SLICE_NAMES], those names joined by newlines) for each slice; the text is None
    when a name of the slice holds a newline (a line would then not be a name)."""
    for start in range(0, len(names), SLICE_NAMES):
        part = names[start:start + SLICE_NAMES]
        text = "\n".join(part)
        yield start, part, text if text.count("\n") == len(part) - 1 else None


_HASHES = re.compile("#+")
_DIGITS_TO_ZERO = str.maketrans("123456789", "000000000")


def digit_forms(names: Iterable[str]) -> str | None:
    """The distinct names with every ASCII digit read as 0, joined by newlines; None when a name holds a
    newline. A literal without digits is in some name exactly when it is in this text, which is a few dozen
    lines for a 200k-tensor header (against its 4 MB of names): each pre-check of a rule's literals scans
    this, not the names (docs/performance.md). A literal holding 0 may match a name holding another digit."""
    names = list(names)
    forms: dict[str, None] = {}
    for _, _, text in joined_slices(names):   # (a slice's forms at once, not every name's)
        if text is None:
            return None
        forms.update(dict.fromkeys(text.translate(_DIGITS_TO_ZERO).split("\n")))
    return "\n".join(forms)


def name_forms(ckpt: Checkpoint) -> str | None:
    """digit_forms of the checkpoint's names, once per checkpoint."""
    return ckpt.derived("name_forms", lambda c: digit_forms(c.tensors))


def classify_all(tensors: Iterable[tuple[str, str, tuple[int, ...]]]) -> dict[str, Placement]:
    """Classify every tensor; a model with decoder blocks and no encoder blocks is decoder-only,
    so its decoder stack is its encoder-equivalent (OPT's `model.decoder.layers.N`)."""
    items = list(tensors)
    return classify_columns([n for n, _, _ in items], [d for _, d, _ in items], [s for _, _, s in items])


def classify_columns(names: list[str], dtypes: list[str], shapes: list[tuple[int, ...]]) -> dict[str, Placement]:
    """classify_all of the tensors given as columns (names, dtypes, shapes): what the census passes."""
    masked = _Masked(len(set(dtypes)) > 1, len(set(map(len, shapes))) > 1)
    for i, part, text in joined_slices(names):
        # name by name when a name holds `#`, a newline or a non-ASCII digit (re's \d: the masks are ASCII only), or
        # Keras 3's BatchNormalization numbering (a rule that reads a number's value)
        if (text is None or "#" in text or not text.isascii() or "batch_normalization" in text
                or "\x00" in text or "\x01" in text):
            out = {name: classify(name, dtype, shape) for name, dtype, shape in zip(names, dtypes, shapes)}
            has_encoder = any(p.bucket == "encoder" and p.layer is not None for p in out.values())
            placed = set(map(operator.attrgetter("bucket"), out.values()))
            break
        masked.add(part, dtypes[i:i + SLICE_NAMES], list(map(len, shapes[i:i + SLICE_NAMES])),
                   text.translate(_DIGIT_TO_HASH).split("\n"))
    else:
        out, has_encoder = masked.out, masked.has_encoder()
        placed = {bucket for bucket, *_ in masked.rules.values()}   # (a few dozen rules, not every name)
    if _place_projectors(out, placed):   # (a Q-Former's layers were `encoder`: BLIP-2's OPT is then decoder-only)
        has_encoder = any(p.bucket == "encoder" and p.layer is not None for p in set(out.values()))
    if not has_encoder:   # decoder layers alone are the encoder stack; the dict changed in place, not made twice
        encoder: dict[int, Placement] = {}   # id of a decoder placement -> its encoder one
        for k, p in out.items():
            if p.bucket == "decoder":
                q = encoder.get(id(p))
                if q is None:
                    q = encoder[id(p)] = Placement("encoder", p.layer, p.role)
                out[k] = q
    return out


def _place_projectors(out: dict[str, Placement], placed: set[str]) -> bool:
    """MODALITY_PROJECTORS' tensors placed on the side of the checkpoint's tower (vision before audio), in place;
    False where the checkpoint holds no tower (no bucket of `placed`) or no such projector."""
    side = "vision" if "vision" in placed else "audio" if "audio" in placed else None
    if side is None:
        return False
    made: dict[str, Placement] = {}
    moved = False
    for name, p in out.items():
        if p.bucket not in ("vision", "audio") and MODALITY_PROJECTORS.match(strip_prefixes(name)):
            out[name] = made.get(p.role) or made.setdefault(p.role, Placement(side, None, p.role))
            moved = True
    return moved
