"""BERT-style encoders: BERT, RoBERTa, XLM-R, CamemBERT and ELECTRA (factorised embeddings), from
transformers' modeling_bert.py, modeling_roberta.py (xlm_roberta and camembert are copies of it) and
modeling_electra.py; RoCBert (modeling_roc_bert.py: BERT's layers and heads, its embeddings with a pronunciation and
a glyph-shape table: RoCBertInputs). Post-LayerNorm layers (encoder.py), learned absolute positions, token types.
The BERT-likes that change a part of it (ModelType): Megatron-BERT (modeling_megatron_bert.py: pre-LayerNorm layers, no
embedding norm, a final encoder.ln), RemBERT (modeling_rembert.py: input embeddings narrower than hidden, mapped in by
encoder.embedding_hidden_mapping_in, and an MLM head to its own output_embedding_size, never tied: LMWidth), RoFormer
(modeling_roformer.py: no position table in the embeddings, rotary q/k (and v) from encoder.embed_positions, a frozen
nn.Embedding of [max_position_embeddings, head_dim] that is one of model.parameters(); ELECTRA's embedding_size and
embeddings_project), BigBird (modeling_big_bird.py: BERT's layers under `bert`, a pooler that is one Linear on every head;
its block-sparse attention, BlockSparse, is not described: a longer sequence goes to the meta path) and X-MOD
(modeling_xmod.py: RoBERTa with a bottleneck adapter per language after each layer's FFN: XmodAdapters), MPNet
(modeling_mpnet.py: RoBERTa's with its attention at attention.attn and a relative position bias table),
LayoutLM (modeling_layoutlm.py: BERT's with x / y / h / w position tables for the tokens' boxes: Layout2D, its pooler on
every head), I-BERT (modeling_ibert.py, quant_modules.py: RoBERTa's parameters and matmuls, its quantisation-aware
modules' integer copies, scaling factors and ranges buffers, naming/'s rules).

One description: `walk` writes the forward with encoder.py's recorded pieces, each module recorded as its op is
written, and the op template (build), the expected tensors of every head and the GGUF table all derive from it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NoAnalyticModel
from .framework import base, encoder, infer, summary
from .framework.archspec import Variant
from .framework.base import CHOICE, FROM_CLASS, ArchSpec, Cfg, Family, Sample, Shapes, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Recorder, Stack, linear_shapes
from .framework.walk_names import layers, pattern, signature, walked

LAYER: encoder.LayerNames = (
    "attention.self.query", "attention.self.key", "attention.self.value", "attention.self", "attention.output.dense",
    "attention.output.LayerNorm", "intermediate.dense", "intermediate act", "output.dense", "output.LayerNorm")
PRE_LN: encoder.LayerNames = (   # XLM-RoBERTa-XL: each sublayer's LayerNorm before it, the second at the layer's top
    "attention.self.query", "attention.self.key", "attention.self.value", "attention.self", "attention.output.dense",
    "attention.self_attn_layer_norm", "intermediate.dense", "intermediate act", "output.dense", "LayerNorm")
PRE_LN_ROBERTA: encoder.LayerNames = (   # RoBERTa-PreLayerNorm's names for the same places
    "attention.self.query", "attention.self.key", "attention.self.value", "attention.self", "attention.output.dense",
    "attention.LayerNorm", "intermediate.dense", "intermediate act", "output.dense", "intermediate.LayerNorm")
MPNET: encoder.LayerNames = (   # MPNet's: attention.attn.{q,k,v,o}, its LayerNorm at attention.LayerNorm
    "attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn", "attention.attn.o",
    "attention.LayerNorm", "intermediate.dense", "intermediate act", "output.dense", "output.LayerNorm")
MEGATRON: encoder.LayerNames = (   # Megatron-BERT's: attention.ln before the attention, the layer's ln before the FFN
    "attention.self.query", "attention.self.key", "attention.self.value", "attention.self", "attention.output.dense",
    "attention.ln", "intermediate.dense", "intermediate act", "output.dense", "ln")


@dataclass(frozen=True)
class ModelType:
    """What a model type of the family changes (transformers' modeling file of each)."""
    prefix: str                          # the base model's attribute in the *For* heads (its tensors' prefix there)
    roberta: bool = False                # RoBERTa's heads (lm_head.*, classifier.dense/out_proj) rather than BERT's
    layer: encoder.LayerNames = LAYER
    embedding_norm: bool = True          # embeddings.LayerNorm
    final_norm: str | None = None        # pre-LN: the LayerNorm after the last layer, under the base model
    token_types: bool = True             # embeddings.token_type_embeddings
    # the MLM / causal LM head's modules where they are not BERT's or (roberta) RoBERTa's (`lm`)
    mlm: encoder.LMHead | None = None
    electra: bool = False                # ELECTRA's generator (MLM) and discriminator (pretraining) heads, no pooler
    pooler: bool = True                  # the base model keeps a pooler
    # the heads whose base model keeps it (None: BERT's rule, `pooler` below); BigBird's every head but QA's
    pooled_heads: tuple[str, ...] | None = None
    pooler_path: str = "pooler.dense"    # BigBird's pooler is one nn.Linear, `pooler`
    # the embedding width's config key when it may differ from hidden (ELECTRA's and RoFormer's embedding_size,
    # RemBERT's input_embedding_size), and the E -> h projection under the base model: run only when E != h, or always
    embedding_key: str | None = None
    project: str = "embeddings_project"
    always_project: bool = False
    positions_in_embeddings: bool = True   # False: RoFormer's rotary table, encoder.embed_positions [P, head_dim]
    # the sequence classifier is RoBERTa's (dense + activation on the first token, out_proj), pooler or not
    dense_classifier: bool = False
    ties: bool = True                    # the MLM decoder can be the word embeddings (RemBERT's never is)
    # *ForQuestionAnswering's qa_classifier (BigBird's BigBirdForQuestionAnsweringHead): a BERT layer's FFN (intermediate,
    # output with its LayerNorm over the residual) before its qa_outputs; the question tokens' mask is no matmul
    qa_ffn: bool = False
    # MPNet's relative position bias: encoder.relative_attention_bias [relative_attention_num_buckets, heads], looked up
    # once a forward and added to every layer's scores (no matmul)
    relative_bias: bool = False
    decoder: bool = True                 # config is_decoder builds it as a decoder (MPNet has no such switch)
    extra_positions: int = 0             # rows of the position table past max_position_embeddings, ids from there
    choice_pre: str | None = None        # *ForMultipleChoice's Linear + ReLU on the first token before its classifier

    @property
    def lm(self) -> encoder.LMHead:
        """The MLM / causal LM head's modules (BertLMHeadModel's and RobertaForCausalLM's are their MLM head's)."""
        return self.mlm or (ROBERTA_LM if self.roberta else BERT_LM)


BERT_LM = encoder.LMHead("cls.predictions.decoder", "cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
                         "cls.predictions.bias")
ROBERTA_LM = encoder.LMHead("lm_head.decoder", "lm_head.dense", "lm_head.layer_norm", "lm_head.bias")


MODEL_TYPES = {
    "bert": ModelType("bert"), "electra": ModelType("electra", embedding_key="embedding_size", electra=True, mlm=encoder.LMHead(
        "generator_lm_head", "generator_predictions.dense", "generator_predictions.LayerNorm")),
    "ernie": ModelType("ernie"),   # BERT's, + task_type_embeddings with use_task_id
    "roberta": ModelType("roberta", roberta=True), "xlm-roberta": ModelType("roberta", roberta=True),
    "camembert": ModelType("roberta", roberta=True), "data2vec-text": ModelType("data2vec_text", roberta=True),
    "xlm-roberta-xl": ModelType("roberta", roberta=True, layer=PRE_LN, embedding_norm=False, final_norm="encoder.LayerNorm"),
    "roberta-prelayernorm": ModelType("roberta_prelayernorm", roberta=True, layer=PRE_LN_ROBERTA, final_norm="LayerNorm"),
    # BertGenerationEncoder (the base) and BertGenerationDecoder (`bert` + lm_head): no token types, no pooler
    "bert-generation": ModelType("bert", token_types=False, pooler=False,
                                 mlm=encoder.LMHead("lm_head.decoder", bias="lm_head.bias")),
    "roc_bert": ModelType("roc_bert"),   # BERT's, + RoCBertInputs
    "megatron-bert": ModelType("bert", layer=MEGATRON, embedding_norm=False, final_norm="encoder.ln"),
    "rembert": ModelType("rembert", embedding_key="input_embedding_size", project="encoder.embedding_hidden_mapping_in",
                         always_project=True, ties=False,   # + LMWidth; no *ForPreTraining
                         mlm=encoder.LMHead("cls.predictions.decoder", "cls.predictions.dense", "cls.predictions.LayerNorm")),
    "roformer": ModelType("roformer", embedding_key="embedding_size", positions_in_embeddings=False, pooler=False,
                          dense_classifier=True),
    "big_bird": ModelType("bert", pooled_heads=("base", "mlm", "lm", "pretraining", "seqcls", "tokcls", CHOICE),
                          pooler_path="pooler", dense_classifier=True, qa_ffn=True),
    "xmod": ModelType("roberta", roberta=True),   # + XmodAdapters
    "mpnet": ModelType("mpnet", roberta=True, layer=MPNET, token_types=False, relative_bias=True, decoder=False),
    # + Layout2D; the pooler on every head, no decoder
    "layoutlm": ModelType("layoutlm", pooled_heads=("base", "mlm", "seqcls", "tokcls", "qa"), decoder=False),
    # I-BERT: RoBERTa's parameters under `ibert`; its quantisation-aware modules (QuantLinear, IntSoftmax, IntGELU,
    # IntLayerNorm) run the same matmuls with quant_mode on or off, their integer copies and ranges buffers
    "ibert": ModelType("ibert", roberta=True, decoder=False),
    # YOSO, Nystromformer, MRA: BERT's layers and MLM head, a RoBERTa-style classification head, no pooler, a position table
    # of max_position_embeddings + 2 rows (ids from 2), DistilBERT's multiple-choice head; + ApproxAttention
    **{mt: ModelType(mt, pooler=False, dense_classifier=True, decoder=False, extra_positions=2,
                     choice_pre="pre_classifier") for mt in ("yoso", "nystromformer", "mra")},
}
@dataclass(frozen=True)
class ApproxAttention(Variant):
    """YOSO's, Nystromformer's and MRA's self-attention. YOSO's expectation (use_expectation) is (1 - acos(Q K^T) / pi) ^
    hash_code_len times V, Nystromformer's with num_landmarks == segment_means_seq_len softmax attention: the matmuls of
    softmax attention either way. `conv`: the kernel of the depthwise convolution over each head's values added to the
    context (conv_window, conv_kernel_size; 0: none); `refused`: the attention the template does not count (YOSO's LSH
    cumulation, CUDA kernels; Nystromformer's landmarks; MRA's always), its parameters still described."""
    conv: int
    refused: str = ""


@dataclass(frozen=True)
class ErnieTasks(Variant):
    """ERNIE's use_task_id: a task-type embedding table of this many rows beside the token types."""
    task_types: int


@dataclass(frozen=True)
class Layout2D(Variant):
    """LayoutLM's 2-D position tables (x, y, h and w_position_embeddings, this many rows: max_2d_position_embeddings),
    added to the embeddings: x and y looked up twice (a box's two corners), h and w once; bbox zeros when not given."""
    rows: int


@dataclass(frozen=True)
class RoCBertInputs(Variant):
    """RoCBert's pronunciation_embed and shape_embed tables (rows, width), always held; with concat_input each enabled
    one is looked up (ids 0 when none are given), concatenated after the word embedding and mapped back to hidden by
    map_inputs_layer (`mapped_from`: its input width; 0 without concat_input, where they are added only when their ids
    are given, never in a forward of input_ids alone)."""
    pronunciation: tuple[int, int]
    shape: tuple[int, int]
    mapped_from: int


@dataclass(frozen=True)
class LMWidth(Variant):
    """RemBERT's MLM head: cls.predictions.dense maps hidden to this width (output_embedding_size), then the activation,
    a LayerNorm and the decoder from it (RemBertLMPredictionHead), neither tied nor with a bias held apart."""
    width: int


@dataclass(frozen=True)
class BlockSparse(Variant):
    """BigBird's attention_type "block_sparse": BigBirdModel.forward runs full attention (original_full) while the
    sequence is at most (5 + 2 x num_random_blocks) x block_size tokens (`longest`) and block-sparse attention, which
    the template does not describe, beyond."""
    longest: int


@dataclass(frozen=True)
class XmodAdapters(Variant):
    """X-MOD's per-language adapters (XmodOutput): after each layer's FFN output and residual add, the (reused or own:
    `layer_norm`, output.adapter_layer_norm) LayerNorm, then the adapter of each token's language (dense1 h -> bottleneck,
    activation, dense2 back, adapter_modules.{language}); every token runs exactly one of them. `pre_norm`: the layers'
    norms before their sublayers and encoder.LayerNorm after the last."""
    languages: tuple[str, ...]
    bottleneck: int
    layer_norm: bool
    pre_norm: bool


def roc_bert_inputs(c: Cfg, h: int) -> RoCBertInputs:
    pron = (c.int("pronunciation_vocab_size"), c.int("pronunciation_embed_dim"))
    shape = (c.int("shape_vocab_size"), c.int("shape_embed_dim"))
    concat = bool(c.get("concat_input", default=True))
    width = h + pron[1] * bool(c.get("enable_pronunciation", default=True)) + shape[1] * bool(c.get("enable_shape", default=True))
    return RoCBertInputs(pron, shape, width if concat else 0)


def approx_attention(c: Cfg) -> ApproxAttention:
    if c.model_type == "mra":
        return ApproxAttention(0, "MRA's multi-resolution block attention (transformers' CUDA kernels; without them its "
                                  "mra2_attention returns zeros)")
    yoso = c.model_type == "yoso"
    conv = c.get("conv_window" if yoso else "conv_kernel_size", default=None)   # the class default: none, 65
    if conv is not None and (not isinstance(conv, int) or conv % 2 == 0):
        raise NoAnalyticModel(f"{c.path}: {c.model_type}'s value convolution of kernel {conv!r} (an even kernel's "
                              "output does not match the context: transformers cannot run it)")
    refused = ""
    if yoso and not c.get("use_expectation", default=FROM_CLASS):
        refused = "YOSO's LSH cumulation (use_expectation false: transformers' CUDA kernels)"
    landmarks, seq = (0, 0) if yoso else (c.int("num_landmarks", default=FROM_CLASS),
                                          c.int("segment_means_seq_len", default=FROM_CLASS))
    if landmarks != seq:
        refused = f"Nystromformer's landmark attention (num_landmarks {landmarks} != segment_means_seq_len {seq})"
    return ApproxAttention(conv or 0, refused)


def pooler(model_type: str, head: str) -> bool:
    """Which heads keep the pooler (transformers modeling_*.py: add_pooling_layer). ELECTRA has none;
    RoBERTa-style classifiers use their own dense on <s>."""
    v = MODEL_TYPES.get(model_type, MODEL_TYPES["bert"])
    if v.electra or not v.pooler:
        return False
    if v.pooled_heads is not None:
        return head in v.pooled_heads
    return head in ("base", "pretraining", "nsp", CHOICE) or (head == "seqcls" and not v.roberta)


# the summary_* values modeling_roformer.py's sequence summary falls back to (getattr): RoFormerConfig declares none
SUMMARY_FALLBACK = {"roformer": {"summary_type": "last", "summary_use_proj": False, "summary_activation": None}}

# XmodConfig's languages default (config_defaults.json keeps scalars; tests/test_config_defaults.py checks this one)
XMOD_LANGUAGES = ("en_XX",)


def variant_of(c: Cfg, h: int) -> Variant | None:
    """The model type's Variant, if any; NoAnalyticModel for a config that adds parts the template does not describe."""
    if c.head == CHOICE and not pooler(c.model_type, c.head) and not MODEL_TYPES[c.model_type].choice_pre:
        # ELECTRA's and RoFormer's multiple choice
        return summary.from_config(c, h, c.common.get("num_labels", 2), h, SUMMARY_FALLBACK.get(c.model_type))
    if c.model_type == "ernie" and c.get("use_task_id", default=False):
        return ErnieTasks(c.int("task_type_vocab_size"))
    if c.model_type == "roc_bert":
        return roc_bert_inputs(c, h)
    if c.model_type in ("yoso", "nystromformer", "mra"):
        return approx_attention(c)
    if c.model_type == "layoutlm":
        return Layout2D(c.int("max_2d_position_embeddings", default=FROM_CLASS))
    # a key the generated defaults table leaves out (output_*): a file without it is refused
    for key in {"rembert": ("output_embedding_size",)}.get(c.model_type, ()):
        if c.get(key, default=None) is None:
            raise NoAnalyticModel(f"{c.path}: config has no {key}, and families/config_defaults.json holds no default for it")
    if c.model_type == "rembert":
        return LMWidth(c.int("output_embedding_size"))
    if c.model_type == "big_bird":
        if not c.get("use_bias", default=FROM_CLASS):
            raise NoAnalyticModel(f"{c.path}: BigBird's use_bias false (q/k/v without biases): not described by the op template")
        if c.get("attention_type", default=FROM_CLASS) == "block_sparse":
            return BlockSparse((5 + 2 * c.int("num_random_blocks", default=FROM_CLASS)) * c.int("block_size", default=FROM_CLASS))
        return None
    if c.model_type == "xmod":
        langs = c.get("languages", default=None) or XMOD_LANGUAGES   # absent: the config class's (a list default)
        if not isinstance(langs, (list, tuple)) or not all(isinstance(x, str) for x in langs):
            raise NoAnalyticModel(f"{c.path}: config languages is not a list of names")
        return XmodAdapters(tuple(langs), h // c.int("adapter_reduction_factor", default=FROM_CLASS),
                            bool(c.get("adapter_layer_norm", default=FROM_CLASS)), bool(c.get("pre_norm", default=FROM_CLASS)))
    return None


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    v = MODEL_TYPES[c.model_type]
    e = c.int(v.embedding_key, default=h) if v.embedding_key else h
    act = c.get("hidden_act", default="gelu")
    types = c.int("type_vocab_size", default=FROM_CLASS) if v.token_types else 0
    variant = variant_of(c, h)
    return ArchSpec(variant=variant, is_decoder=v.decoder and bool(c.get("is_decoder", default=FROM_CLASS)),
                    relative_buckets=c.int("relative_attention_num_buckets", default=FROM_CLASS) if v.relative_bias else 0,
                    layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    positions=c.int("max_position_embeddings") + v.extra_positions, type_vocab=types, embedding_size=e,
                    activation=str(act),
                    pooler=pooler(c.model_type, c.head),
                    tied_embeddings=v.ties and bool(c.get("tie_word_embeddings", default=FROM_CLASS)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    d = encoder.dims(T, WALKED, LAYER)
    a, note = infer.heads_for(d["hidden"], 64)
    return ArchSpec(num_labels=infer.num_labels(T), layers=infer.count_layers(T, layers(WALKED, LAYER[0])), heads=a,
                    kv_heads=a, head_dim=d["hidden"] // a, pooler=infer.has(T, pattern(WALKED, "pooler.dense")),
                    assumptions=(note,),
                    **d, **common)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets (recorder.Recorder)."""
    r, s = Recorder(B), B.s
    h, L = s.hidden, s.layers
    v = MODEL_TYPES.get(s.model_type, MODEL_TYPES["bert"])
    if isinstance(s.variant, ErnieTasks):   # ERNIE's use_task_id: one more lookup added to the embeddings
        r.embedding("embeddings.task_type_embeddings", s.variant.task_types, h, B.seq, bucket="embedding")
    if isinstance(s.variant, Layout2D):
        for axis, lookups in (("x", 2), ("y", 2), ("h", 1), ("w", 1)):
            r.embedding(f"embeddings.{axis}_position_embeddings", s.variant.rows, h, lookups * B.seq, bucket="embedding")
    if isinstance(s.variant, RoCBertInputs):
        for name, (rows, dim) in (("pronunciation_embed", s.variant.pronunciation), ("shape_embed", s.variant.shape)):
            r.embedding(f"embeddings.{name}", rows, dim, B.seq, bucket="embedding")
        if s.variant.mapped_from:
            r.linear("embeddings.map_inputs_layer", r.tok, s.variant.mapped_from, h, True, bucket="embedding")
    if isinstance(s.variant, BlockSparse) and B.seq > s.variant.longest:
        raise NoAnalyticModel(f"BigBird's block-sparse attention runs on sequences longer than (5 + 2 x num_random_blocks)"
                              f" x block_size = {s.variant.longest} tokens (--seq {B.seq}): the op template describes its "
                              "full attention only (attention_type original_full, or a sequence that short)")
    encoder.embeddings(r, norm=v.embedding_norm, positions=v.positions_in_embeddings)
    if s.emb != h or v.always_project:   # ELECTRA-small style; RemBERT's input embeddings
        r.linear(v.project, r.tok, s.emb, h, True, bucket="embedding")
    if not v.positions_in_embeddings:   # RoFormer's sinusoidal table for the rotary q/k, looked up once a forward
        r.embedding("encoder.embed_positions", s.positions, s.head_dim, B.seq, bucket="embedding")
    if s.relative_buckets:
        r.embedding("encoder.relative_attention_bias", s.relative_buckets, s.heads, B.seq)
    stack = Stack(f"encoder.layer[{L}]", "encoder.layer.{bid}", L, L)
    encoder.stack_layers(r, stack, v.layer, value_conv=s.variant.conv if isinstance(s.variant, ApproxAttention) else 0)
    if isinstance(s.variant, XmodAdapters):
        xmod_adapters(r, s.variant, stack)
    if v.final_norm:
        r.norm(v.final_norm, r.tok, h, residual=False)
    if s.pooler:
        encoder.pooler(r, v.pooler_path)
    if s.head in ("mlm", "lm") or (s.head == "pretraining" and not v.electra):
        # MLM: transform to E (ELECTRA's generator, RoFormer's) or RemBERT's width, decoder tied to the word embeddings
        encoder.mlm_head(r, v.lm, s.variant.width if isinstance(s.variant, LMWidth) else s.emb)
    if s.head in ("pretraining", "nsp") and not v.electra:   # *ForNextSentencePrediction: this head alone
        r.linear("cls.seq_relationship", r.first, h, 2, True, bucket="cls", top=True)
    if s.head == "pretraining" and v.electra:
        r.linear("discriminator_predictions.dense", r.tok, h, h, True, bucket="cls", top=True)
        B.activation("discriminator_predictions act", "cls", r.tok, h, s.activation)
        r.linear("discriminator_predictions.dense_prediction", r.tok, h, 1, True, bucket="cls", top=True)
    elif s.head == "seqcls":   # RoBERTa / ELECTRA classification head where there is no pooler
        encoder.sequence_classifier(r, dense=not s.pooler or v.dense_classifier)
    elif s.head == CHOICE:   # on the pooled output, or ELECTRA's and RoFormer's sequence summary
        encoder.multiple_choice(r, s.variant if isinstance(s.variant, summary.SequenceSummary) else None, v.choice_pre)
    elif s.head == "qa" and v.qa_ffn:
        f, tok = s.intermediate, r.tok
        r.linear("qa_classifier.intermediate.dense", tok, h, f, True, bucket="cls", top=True)
        B.activation("qa_classifier.intermediate act", "cls", tok, f, s.activation)
        r.linear("qa_classifier.output.dense", tok, f, h, True, bucket="cls", top=True)
        r.norm("qa_classifier.output.LayerNorm", tok, h, bucket="cls", top=True)
        encoder.token_heads(r, "qa_classifier.qa_outputs")
    else:
        encoder.token_heads(r)
    return r


def build(B: Builder) -> None:
    # a refused attention (ApproxAttention.refused): its parameters at one token (graph.predict_params), no FLOPs beyond
    if flops_refused(B.s) and B.seq > 1:
        raise NoAnalyticModel(f"{flops_refused(B.s)}: not described by the op template")
    walk(B)


def flops_refused(s: ArchSpec) -> str | None:
    return s.variant.refused or None if isinstance(s.variant, ApproxAttention) else None


def xmod_adapters(r: Recorder, x: XmodAdapters, stack: Stack) -> None:
    """X-MOD's per-language adapters on every layer (XmodAdapters): each token through its language's alone."""
    h, n, L = r.s.hidden, len(x.languages), stack.calls
    at = f"{stack.label}.output.adapter_modules[{n} languages, one a token]"
    if x.layer_norm:
        r.norm("output.adapter_layer_norm", r.tok, h, stack, residual=False)
    for name, fin, fout in (("dense1", h, x.bottleneck), ("dense2", x.bottleneck, h)):
        for lang in x.languages:
            r.record(f"output.adapter_modules.{lang}.{name}", linear_shapes(fin, fout), stack)
        r.B.linear(f"{at}.{name}", "encoder", r.tok, fin, fout, True, L, copies=L * n, active_copies=L)
        if name == "dense1":
            r.B.activation(at + " act", "encoder", r.tok, x.bottleneck, r.s.activation, L)
    if x.pre_norm:
        r.norm("encoder.LayerNorm", r.tok, h, residual=False)


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> base.KVLines:
    """A BERT-like built as a decoder (config is_decoder) returns each layer's self-attention keys and values from its
    base model and its LM head (DynamicCache; Megatron-BERT's EncoderDecoderCache, its cross-attention half empty without
    encoder states): decoder_kv_cache's. An encoder, and the task heads, return none."""
    return base.decoder_kv_cache(s, b, n, nd, ab) if s.is_decoder and s.head in ("base", "lm") else []


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """The walk's modules: BERT / RoBERTa / ELECTRA encoders and their heads (ELECTRA's generator: generator_predictions
    and generator_lm_head at the embedding width; its discriminator: discriminator_predictions)."""
    if s.model_type not in MODEL_TYPES:
        return None
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" else MODEL_TYPES[s.model_type].prefix)


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64)
# heads whose model has an MLM decoder over the word embeddings (BertForPreTraining and BertLMHeadModel too)
_MLM = ("mlm", "pretraining", "lm")
_HEADS = ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")
_ROC_BERT = dict(pronunciation_vocab_size=7, pronunciation_embed_dim=8, shape_vocab_size=5, shape_embed_dim=12)
# every model type's *ForMultipleChoice: (config class, its sizes beside _SIZES)
_CHOICES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("BertConfig", {}), ("RobertaConfig", {}), ("XLMRobertaConfig", {}), ("CamembertConfig", {}),
    ("ElectraConfig", dict(embedding_size=16)),
    ("ElectraConfig", dict(embedding_size=16, summary_type="mean", summary_use_proj=False, summary_activation="tanh")),
    ("Data2VecTextConfig", {}), ("ErnieConfig", {}), ("XLMRobertaXLConfig", {}), ("RobertaPreLayerNormConfig", {}),
    ("RoCBertConfig", _ROC_BERT), ("MegatronBertConfig", {}),
    ("RemBertConfig", dict(input_embedding_size=16, output_embedding_size=24)), ("RoFormerConfig", {}),
    ("RoFormerConfig", dict(summary_type="first", summary_use_proj=True, summary_activation="tanh")),
    ("BigBirdConfig", {}), ("MPNetConfig", {}), ("XmodConfig", dict(default_language="en_XX")), ("IBertConfig", {}),
    ("YosoConfig", {}), ("NystromformerConfig", {}), ("MraConfig", {}))

# HF module -> llama.cpp GGUF tensor name, as convert_hf_to_gguf.py maps them (gguf-py tensor_mapping.py
# TensorNameMap, the oracle in tests/test_gguf_names.py), from the walk of a BERT holding every table: base-model names
# (convert_hf_to_gguf.py strips `bert.` / `roberta.` first); `ckptstat diff` aligns a GGUF file with HF through it.
# Not mapped: llama.cpp's `cls` / `cls.output` are BERT's `classifier` or RoBERTa's `classifier.dense` /
# `classifier.out_proj`: the GGUF name alone cannot say which
# The walk of a tiny BertModel with every table and its pooler: from_tensors' look-ups and the name signature read
# its paths
WALKED = walked(walk, "bert", type_vocab=2, pooler=True)
GGUF_TENSOR_NAMES = WALKED.gguf_names()

FAMILY = Family(
    name="bert",
    model_types=tuple(MODEL_TYPES),
    gguf_architectures=("bert", "roberta", "xlm-roberta", "electra", "camembert"),
    # BERT's attention.self.query; MPNet's attention.attn.q
    signature=signature(WALKED, LAYER[0]) + "|" + signature(walked(walk, "bert", model_type="mpnet"), MPNET[0]),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "mlm", "lm", "pretraining", "nsp", "seqcls", "tokcls", "qa", CHOICE),
    head_rules=encoder.HEAD_RULES,
    pooler=pooler,
    # transformers' _tied_weights_keys
    tie_rules=(
        # BERT's cls.predictions.decoder, RoBERTa's lm_head.decoder: the base model's word embeddings
        # (not BertGeneration's `bert` + lm_head.decoder: a rule for it would tie an lm_head into BERT's MLM files too;
        # its config's architectures name the class, whose ties families/tie_table.json holds)
        *(TieRule(f"{lm}.weight", f"{prefix}.embeddings.word_embeddings.weight", "config", heads=_MLM)
          for prefix, lm in dict.fromkeys((v.prefix, v.lm.decoder) for v in MODEL_TYPES.values()
                                          if not v.electra and v.lm.dense and v.ties)),
        TieRule("lm_head.decoder.weight", "camembert.embeddings.word_embeddings.weight", "config", heads=_MLM),
        # the decoder's bias and the one the head holds (LMHead.bias), tied with the weight in transformers 5
        *(TieRule(f"{decoder}.bias", bias, "config", heads=_MLM)
          for decoder, bias in dict.fromkeys((v.lm.decoder, v.lm.bias) for v in MODEL_TYPES.values()) if bias),
        # ELECTRA: ElectraForMaskedLM and ElectraForCausalLM have the generator head (ElectraForPreTraining is
        # the discriminator)
        TieRule("generator_lm_head.weight", "electra.embeddings.word_embeddings.weight", "config", heads=("mlm", "lm")),
    ),
    # RoBERTa-style embeddings number positions from padding_idx + 1 (pad_token_id 1), so the first two
    # rows of the table are never used for a real token: max_position_embeddings 514 gives 512 tokens
    # (transformers modeling_roberta.py create_position_ids_from_input_ids).
    # YOSO's and Nystromformer's tables hold 2 rows more, ids from 2 (extra_positions)
    position_offset={mt: 2 for mt, v in MODEL_TYPES.items() if v.roberta or v.extra_positions},
    longest_seq=lambda s: s.variant.longest if isinstance(s.variant, BlockSparse) else None,
    flops_refused=flops_refused,
    kv_cache=kv_cache,
    gguf_tensor_names=GGUF_TENSOR_NAMES,
    # convert_hf_to_gguf.py's BertModel.filter_tensors (conversion/bert.py, after `roberta.` / `distilbert.` and `bert.`
    # are stripped; RobertaModel, XLMRobertaModel, DistilBertModel, CamembertModel end in it): "we are only using BERT
    # for embeddings so we don't need the pooling layer", and the MLM / NSP heads
    gguf_dropped=tuple(("bert", rf"^(roberta\.|distilbert\.)?(bert\.)?{rx}") for rx in (
        r"(embeddings\.position_ids|pooler\.dense\.weight|pooler\.dense\.bias)$", r"cls\.predictions", r"cls\.seq_relationship")),
    samples=(
        # *ForMultipleChoice (head "mc"): a one-label sequence classifier's names (classifier [1, hidden] on the pooler,
        # ELECTRA's summary a Linear like its classifier's dense): config.json's architectures alone tells the head
        *(Sample(config, dict(_SIZES, **kw), (config.removesuffix("Config") + "ForMultipleChoice",), device="cpu",
                 infer=False) for config, kw in _CHOICES),
        Sample("BertConfig", _SIZES, ("BertModel", "BertForPreTraining") + tuple("Bert" + x for x in _HEADS)),
        Sample("BertConfig", _SIZES, ("BertForNextSentencePrediction",)),
        Sample("BertConfig", dict(_SIZES, num_labels=3), ("BertForSequenceClassification", "BertForTokenClassification")),
        # BertLMHeadModel stores what BertForMaskedLM does: its names show the MLM head
        Sample("BertConfig", dict(_SIZES, is_decoder=True), ("BertLMHeadModel",), infer=False),
        Sample("RobertaConfig", dict(_SIZES, num_labels=3), ("RobertaModel",) + tuple("Roberta" + x for x in _HEADS[:3])),
        Sample("RobertaConfig", _SIZES, ("RobertaForQuestionAnswering",)),
        Sample("XLMRobertaConfig", _SIZES, ("XLMRobertaModel", "XLMRobertaForMaskedLM", "XLMRobertaForSequenceClassification")),
        Sample("CamembertConfig", _SIZES, ("CamembertModel", "CamembertForMaskedLM", "CamembertForSequenceClassification")),
        Sample("ElectraConfig", dict(_SIZES, embedding_size=16),
               ("ElectraModel", "ElectraForSequenceClassification", "ElectraForTokenClassification",
                "ElectraForQuestionAnswering")),
        # Without a config, ELECTRA's generator and discriminator heads are taken for BERT's (model_type
        # "bert"): the tensor-name inference does not model them
        Sample("ElectraConfig", dict(_SIZES, embedding_size=16), ("ElectraForPreTraining", "ElectraForMaskedLM"), infer=False),
        Sample("Data2VecTextConfig", dict(_SIZES, num_labels=3), ("Data2VecTextModel", "Data2VecTextForMaskedLM",
                                                                  "Data2VecTextForSequenceClassification")),
        Sample("ErnieConfig", dict(_SIZES, num_labels=3), ("ErnieModel", "ErnieForMaskedLM", "ErnieForSequenceClassification")),
        # the *ForCausalLM store what *ForMaskedLM do: their names show the MLM head
        Sample("ErnieConfig", dict(_SIZES, is_decoder=True), ("ErnieForCausalLM",), infer=False),
        Sample("Data2VecTextConfig", dict(_SIZES, is_decoder=True), ("Data2VecTextForCausalLM",), infer=False),
        Sample("XLMRobertaXLConfig", dict(_SIZES, is_decoder=True), ("XLMRobertaXLForCausalLM",), infer=False),
        Sample("RobertaPreLayerNormConfig", dict(_SIZES, is_decoder=True), ("RobertaPreLayerNormForCausalLM",), infer=False),
        # without a config the names are read as BERT's: ERNIE's task types, the pre-LN variants' norms are not inferred
        Sample("ErnieConfig", dict(_SIZES, use_task_id=True, task_type_vocab_size=5), ("ErnieModel",), infer=False),
        Sample("BertGenerationConfig", _SIZES, ("BertGenerationEncoder",)),
        # RoCBert: without a config its names read as BERT's, its pronunciation and shape tables not inferred
        Sample("RoCBertConfig", dict(_SIZES, pronunciation_vocab_size=7, pronunciation_embed_dim=8, shape_vocab_size=5,
                                     shape_embed_dim=12), ("RoCBertModel", "RoCBertForMaskedLM"), infer=False),
        Sample("RoCBertConfig", dict(_SIZES, pronunciation_vocab_size=7, pronunciation_embed_dim=8, shape_vocab_size=5,
                                     shape_embed_dim=12, is_decoder=True, enable_shape=False), ("RoCBertForCausalLM",),
               infer=False),
        Sample("RoCBertConfig", dict(_SIZES, pronunciation_vocab_size=7, pronunciation_embed_dim=8, shape_vocab_size=5,
                                     shape_embed_dim=12, is_decoder=True, concat_input=False), ("RoCBertForCausalLM",),
               infer=False),
        # its lm_head is the decoder alone (lm_head.bias stored): the names show no MLM head
        Sample("BertGenerationConfig", dict(_SIZES, is_decoder=True), ("BertGenerationDecoder",), infer=False),
        Sample("XLMRobertaXLConfig", dict(_SIZES, num_labels=3),
               ("XLMRobertaXLModel", "XLMRobertaXLForMaskedLM", "XLMRobertaXLForSequenceClassification"), infer=False),
        Sample("RobertaPreLayerNormConfig", dict(_SIZES, num_labels=3),
               ("RobertaPreLayerNormModel", "RobertaPreLayerNormForMaskedLM", "RobertaPreLayerNormForSequenceClassification"),
               infer=False),
        # the BERT-likes below: without a config their names read as BERT's (or RoBERTa's), the parts that differ not
        # inferred
        Sample("MegatronBertConfig", dict(_SIZES, num_labels=3),
               ("MegatronBertModel", "MegatronBertForPreTraining", "MegatronBertForMaskedLM", "MegatronBertForCausalLM",
                "MegatronBertForSequenceClassification", "MegatronBertForTokenClassification"), device="cpu", infer=False),
        Sample("MegatronBertConfig", _SIZES, ("MegatronBertForQuestionAnswering",), device="cpu", infer=False),
        Sample("RemBertConfig", dict(_SIZES, input_embedding_size=16, output_embedding_size=24, num_labels=3),
               ("RemBertModel", "RemBertForMaskedLM", "RemBertForCausalLM", "RemBertForSequenceClassification",
                "RemBertForTokenClassification"), device="cpu", infer=False),
        Sample("RemBertConfig", dict(_SIZES, input_embedding_size=16, output_embedding_size=24),
               ("RemBertForQuestionAnswering",), device="cpu", infer=False),
        Sample("RoFormerConfig", dict(_SIZES, num_labels=3),
               ("RoFormerModel", "RoFormerForMaskedLM", "RoFormerForCausalLM", "RoFormerForSequenceClassification",
                "RoFormerForTokenClassification"), device="cpu", infer=False),
        Sample("RoFormerConfig", dict(_SIZES, embedding_size=16, rotary_value=True),
               ("RoFormerForMaskedLM", "RoFormerForQuestionAnswering"), device="cpu", infer=False),
        Sample("BigBirdConfig", dict(_SIZES, num_labels=3),
               ("BigBirdModel", "BigBirdForPreTraining", "BigBirdForMaskedLM", "BigBirdForCausalLM",
                "BigBirdForSequenceClassification", "BigBirdForTokenClassification", "BigBirdForQuestionAnswering"),
               device="cpu", infer=False),
        Sample("BigBirdConfig", dict(_SIZES, attention_type="original_full", tie_word_embeddings=False),
               ("BigBirdForMaskedLM",), device="cpu", infer=False),
        # MPNet's names are found as the family's, its shapes not inferred (they are read by BERT's names)
        Sample("MPNetConfig", dict(_SIZES, num_labels=3),
               ("MPNetModel", "MPNetForMaskedLM", "MPNetForSequenceClassification", "MPNetForTokenClassification"),
               device="cpu", infer=False),
        # (compute_position_bias looks up 32 buckets whatever relative_attention_num_buckets says: fewer fail to run)
        Sample("MPNetConfig", dict(_SIZES, relative_attention_num_buckets=40), ("MPNetForQuestionAnswering",), device="cpu",
               infer=False),
        # built as decoders (is_decoder: causal, a cache of each layer's keys and values)
        Sample("MegatronBertConfig", dict(_SIZES, is_decoder=True), ("MegatronBertForCausalLM",), device="cpu", infer=False),
        Sample("RemBertConfig", dict(_SIZES, input_embedding_size=16, output_embedding_size=24, is_decoder=True),
               ("RemBertForCausalLM",), device="cpu", infer=False),
        Sample("RoFormerConfig", dict(_SIZES, is_decoder=True), ("RoFormerForCausalLM",), device="cpu", infer=False),
        Sample("BigBirdConfig", dict(_SIZES, is_decoder=True), ("BigBirdForCausalLM",), device="cpu", infer=False),
        Sample("XmodConfig", dict(_SIZES, is_decoder=True, default_language="en_XX"), ("XmodForCausalLM",), device="cpu",
               infer=False),
        # X-MOD's adapters pick tokens by language (a boolean index: no meta kernel)
        Sample("XmodConfig", dict(_SIZES, num_labels=3, default_language="en_XX", languages=["en_XX", "de_DE"]),
               ("XmodModel", "XmodForMaskedLM", "XmodForCausalLM", "XmodForSequenceClassification",
                "XmodForTokenClassification"), device="cpu", infer=False),
        # LayoutLM: without a config its names read as BERT's, the 2-D tables not inferred (on the CPU:
        # LayoutLMModel.forward's warn_if_padding_and_no_attention_mask reads input_ids)
        Sample("LayoutLMConfig", dict(_SIZES, max_2d_position_embeddings=50, num_labels=3),
               ("LayoutLMModel", "LayoutLMForMaskedLM", "LayoutLMForSequenceClassification",
                "LayoutLMForTokenClassification"), device="cpu", infer=False),
        Sample("LayoutLMConfig", dict(_SIZES, tie_word_embeddings=False),
               ("LayoutLMForMaskedLM", "LayoutLMForQuestionAnswering"), device="cpu", infer=False),
        # I-BERT: without a config its names read as RoBERTa's (its buffers set apart by naming/)
        Sample("IBertConfig", dict(_SIZES, num_labels=3), ("IBertModel", "IBertForMaskedLM", "IBertForSequenceClassification",
                                                         "IBertForTokenClassification"), device="cpu", infer=False),
        Sample("IBertConfig", dict(_SIZES, quant_mode=True), ("IBertForMaskedLM", "IBertForQuestionAnswering"), device="cpu",
               infer=False),
        # YOSO, Nystromformer: without a config their names read as BERT's (the value convolution, the 2 extra position
        # rows not inferred)
        *(Sample(f"{name}Config", dict(_SIZES, num_labels=3, **kw), tuple(f"{name}{x}" for x in ("Model",) + _HEADS[:3]),
                 device="cpu", infer=False)
          for name, kw in (("Yoso", {}), ("Yoso", dict(conv_window=3)), ("Nystromformer", {}),
                           ("Nystromformer", dict(conv_kernel_size=3)))),
        Sample("YosoConfig", _SIZES, ("YosoForQuestionAnswering",), device="cpu", infer=False),
        Sample("NystromformerConfig", _SIZES, ("NystromformerForQuestionAnswering",), device="cpu", infer=False),
        # MRA: its attention refused (ApproxAttention), its parameters described
        Sample("MraConfig", dict(_SIZES, num_labels=3), ("MraModel", "MraForMaskedLM", "MraForSequenceClassification",
                                                         "MraForTokenClassification", "MraForQuestionAnswering"),
               device="cpu", infer=False),
        Sample("XmodConfig", dict(_SIZES, default_language="de_DE", languages=["en_XX", "de_DE", "fr_XX"], pre_norm=True,
                                  adapter_layer_norm=True, adapter_reduction_factor=4),
               ("XmodForMaskedLM", "XmodForQuestionAnswering"), device="cpu", infer=False),
    ),
)
