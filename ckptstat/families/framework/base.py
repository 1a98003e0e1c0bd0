"""What every model family shares: the architecture record the analyses work from (ArchSpec), the
record each family module exports (Family, registered in families/__init__.py), the config accessor
families read config.json through (Cfg), and the small records a family's tables are made of
(HeadRule, TieRule, Sample).

Notation follows docs/oracles.md: h hidden, a query heads, g key/value heads, d head dim, f intermediate,
V vocab, P positions, T type vocab, L layers, E embedding size (ALBERT/ELECTRA factorised embeddings).
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ...core import TensorInfo
from ...errors import UsageError
from .archspec import ArchSpec

if TYPE_CHECKING:
    from .ops import Builder

MC = "lm+mc"   # *DoubleHeadsModel (GPT-2's, OpenAI GPT's): the LM head and a multiple-choice summary (decoder_heads.py)
# *ForMultipleChoice: the body over [batch x num_choices, seq], one logit a sequence (encoder.multiple_choice): the op
# templates' batch counts those batch x num_choices sequences
CHOICE = "mc"
# Which head an `architectures` class name carries (HF naming), tried in order.
HEAD_SUFFIXES = [
    ("ForMaskedLM", "mlm"), ("LMHeadModel", "lm"), ("ForCausalLM", "lm"), ("ForConditionalGeneration", "lm"),
    ("DoubleHeadsModel", MC),
    ("ForPreTraining", "pretraining"), ("ForSequenceClassification", "seqcls"),
    ("ForTokenClassification", "tokcls"), ("ForQuestionAnswering", "qa"), ("ForMultipleChoice", CHOICE),
    ("ForNextSentencePrediction", "nsp"),   # BertForNextSentencePrediction: the pooled output's cls.seq_relationship
    ("ForQuestionAnsweringSimple", "qa"),   # XLM's, FlauBERT's, XLNet's qa_outputs (their *ForQuestionAnswering: SQuAD beams)
    ("EncoderModel", "encoder-only"),
    ("GenerationDecoder", "lm"), ("GenerationEncoder", "base"),   # BertGenerationDecoder / BertGenerationEncoder
    # ShieldGemma 2's classifier is Gemma 3's wrapper whole (modeling_shieldgemma2.py): every position's vocabulary
    # logits, of which its forward keeps the last position's Yes and No
    ("ShieldGemma2ForImageClassification", "lm"),
    ("ForImageClassification", "imgcls"), ("WithProjection", "projection"),   # ViT, ResNet; CLIP *ModelWithProjection
    ("ForImageClassificationWithTeacher", "imgcls+distillation"),   # DeiT's second classifier on its distillation token
    ("ForMaskedImageModeling", "mim"),   # ViT's, DeiT's: a 1x1 conv decoder back to pixels (SimMIM)
    # SegFormer's all-MLP decode head (families/segformer.py); another family's is then refused by name, not read as its
    # base model
    ("ForSemanticSegmentation", "semseg"),
    ("ForCTC", "ctc"),   # Wav2Vec2ForCTC and its copies: lm_head on every audio frame
    # wav2vec2-style speech encoders' classifier on every frame, and their speaker embedding (TDNN layers, statistics
    # pooling: families/wav2vec2.py)
    ("ForAudioFrameClassification", "framecls"), ("ForXVector", "xvector"),
    ("MarianMTModel", "lm"),   # Marian's ForConditionalGeneration (FSMTModel, ending alike, is a base model)
    ("Model", "base"),
]
# the heads whose output holds b x s x V vocabulary logits (memory's logits line)
VOCAB_LOGITS = ("lm", "mlm", "pretraining", MC)
# Bytes per element of a recurrent state transformers keeps in float32 whatever the model's dtype (Mamba2's and gated
# DeltaNet's scans, RWKV's WKV terms: they compute in float32 and the cache keeps what they return)
STATE_BYTES = 4
# Bytes per element of config `torch_dtype` / `dtype` values.
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8, "int8": 1}


def config_dtype(cfg: Mapping[str, Any]) -> str | None:
    """config.json's model dtype as transformers 5.25 reads it: `dtype`, else the older `torch_dtype`
    (PretrainedConfig.__init__ keeps `dtype` where both are given, and from_pretrained loads in it); None when that
    is not a string."""
    d = cfg.get("dtype")
    d = cfg.get("torch_dtype") if d is None else d
    return d if isinstance(d, str) else None

Shapes = dict[str, tuple[int, ...]]          # parameter name -> shape, PyTorch layout [out, in]
Tensors = Mapping[str, TensorInfo]
# (item, bytes, rule) lines of `ckptstat memory`'s "kv cache" group
KVLines = list[tuple[str, float, str]]


@dataclass(frozen=True)
class HeadRule:
    """A head shown by a tensor name (searched in canonical names, first rule that holds wins)."""
    pattern: str                      # a tensor of this head
    head: str
    requires: str | None = None       # ...and only if a tensor matching this is there too
    unless: str | None = None         # ...but when a tensor matching this is there, the head is `otherwise`
    otherwise: str | None = None


# Task heads of decoder-only models, tried before a family's "body prefix -> lm" rule: transformers'
# *ForSequenceClassification `score`, *ForTokenClassification `score` (LLaMA-likes) or `classifier` (GPT-2,
# Falcon, GPT-NeoX), *ForQuestionAnswering `qa_outputs`, all at the top level beside the body. These models
# have no LM head, so the LM-head tie never applies. A token classifier named `score` (GenericForTokenClassification)
# is told from the sequence classifier by its bias (token_classification_bias, default true; no sequence classifier's
# score has one); one saved without it resolves "seqcls" (config.json's architectures decides).
TASK_HEAD_RULES = (HeadRule(r"^score\.weight$", "seqcls", unless=r"^score\.bias$", otherwise="tokcls"),
                   HeadRule(r"^classifier\.weight$", "tokcls"), HeadRule(r"^qa_outputs\.weight$", "qa"))


def decoder_head_rules(lm: str, body: str) -> tuple[HeadRule, ...]:
    """A decoder-only family's head rules: its LM head's name, the task heads, then a name under its body
    prefix (an LM head the file left out: tied)."""
    return (HeadRule(lm, "lm"), *TASK_HEAD_RULES, HeadRule(body, "lm"))


@dataclass(frozen=True)
class TieRule:
    alias: str      # the name that is the same tensor as `target`, as its model names it
    target: str
    when: str       # "config": only if tie_word_embeddings; "always": the architecture ties it
    module: bool = False  # the whole module is shared (T5's embed_tokens is `shared`), not only a weight
    # the heads (HEAD_SUFFIXES values) whose model has `alias`; () = any head whose file holds the alias's module
    heads: tuple[str, ...] = ()
    model_types: tuple[str, ...] = ()   # the model types whose classes tie it; () = every one of the family's


@dataclass(frozen=True)
class Sample:
    """A transformers build of the family for tests/test_families.py: a config class with tiny sizes,
    and the model classes (one or more per head the family models) to build from it."""
    config: str                       # transformers config class name
    kwargs: Mapping[str, Any]
    models: tuple[str, ...]           # transformers model class names
    device: str = "meta"              # "cpu" when the forward needs real values (MoE routing)
    # the test also infers the architecture from the models' tensor names and shapes (no config); False
    # where the names cannot tell the head apart (say why beside the sample)
    infer: bool = True
    # the family the tensor names alone are detected as, when they cannot show this one (OLMo's names are
    # LLaMA's less the norm weights); shape inference is then not checked
    detected_as: str | None = None


FROM_CLASS = object()   # Cfg.get's default: the config class's constant default (config_defaults.json), which must exist


class Cfg:
    """A config.json dict as a family reads it: typed, validated accessors that raise UsageError naming
    the key, and the fields every ArchSpec takes from the config whatever the family (`common`)."""

    def __init__(self, cfg: Mapping[str, Any], path: str, model_type: str, head: str, common: dict[str, Any]):
        self.cfg, self.path, self.model_type, self.head = cfg, path, model_type, head
        self.common = common           # ArchSpec fields resolved before the family: family, model_type, head...
        self.loops: dict[str, int] = {}   # the nested loop counts read so far (_NESTED), by the name the file holds them

    def get(self, *keys: str, default: object = KeyError) -> Any:
        """The first key present, under its own name, the other name its config class gives it
        (config_aliases.json: transformers' attribute_map, so a 5.x save's `num_local_experts` answers for
        Qwen3-MoE's `num_experts`), or inside `rope_parameters`, where transformers 5 moved the rotary keys
        (rope_theta, partial_rotary_factor, the scaling). A key the file leaves out: with a `default` (the key
        is optional), the constant its model_type's config class gives it (config_defaults.json, generated from
        transformers), else `default` (the family's rule for a value the class derives); without one, an error. A key
        the file sets to null: `default`; with FROM_CLASS, null (None), or an error saying it is null where the config
        class refuses null for it (config_not_null.json)."""
        if (got := self._lookup(keys)) is not None:
            return got[1]
        saved_null = [name for k in keys for name in config_names(self.model_type, k) if name in self.cfg]
        if default is KeyError:
            raise UsageError(f"{self.path}: config {saved_null[0]} is null, needed for the analytic model" if saved_null
                             else f"{self.path}: config has no {' / '.join(keys)}, needed for the analytic model")
        # a key the file sets to null keeps null's meaning (DeepSeek-V2-Lite's q_lora_rank: no query LoRA), never the
        # class's: the family's `default`, or with FROM_CLASS null itself (Llama 4's attention_chunk_size: no chunking),
        # unless the config class refuses null for that key (config_not_null.json: its type validator raises)
        if saved_null and default is FROM_CLASS:
            if refused := [n for n in saved_null if n in _not_null().get(self.model_type, ())]:
                raise UsageError(f"{self.path}: config {refused[0]} is null, which the {self.model_type} config class "
                                 "does not take")
            return None
        theirs = None if saved_null else next((v for k in keys if (v := class_default(self.model_type, k)) is not None), None)
        if theirs is None and default is FROM_CLASS:
            raise UsageError(f"{self.path}: config has no {' / '.join(keys)}, and no default for it is known for "
                             f"model_type {self.model_type!r}")
        return default if theirs is None else theirs

    def _lookup(self, keys: tuple[str, ...]) -> tuple[str, Any] | None:
        """(the name the file holds it under, its value) of the first of `keys` the file sets (not null)."""
        rope = self.cfg.get("rope_parameters")
        for k in keys:
            for name in config_names(self.model_type, k):
                v = self.cfg.get(name)
                if v is None and isinstance(rope, Mapping):
                    v = rope.get(name)
                if v is not None:
                    return name, v
        return None

    def found(self, *keys: str) -> str:
        """The name the file holds the first of `keys` it has under (its own, an alias, inside rope_parameters), for an
        error to name what the user wrote; keys[0] when it has none."""
        got = self._lookup(keys)
        return keys[0] if got is None else got[0]

    def sub(self, key: str, model_type: str) -> Cfg:
        """A nested config (CLIP's text_config), read as its own config class's (`model_type` unless it names one; a
        class registered under none saves "": DBRX's ffn_config, whose defaults are the row "dbrx.ffn_config")."""
        sub = self.cfg.get(key) or {}
        if not isinstance(sub, Mapping):
            raise UsageError(f"{self.path}: config {key} is not an object")
        mt = sub.get("model_type")
        return Cfg(sub, f"{self.path} {key}", mt if isinstance(mt, str) and mt else model_type, self.head, self.common)

    def int(self, *keys: str, default: object = KeyError) -> int:
        """A non-negative integer (positive for _POSITIVE keys) up to _MAX_INT; the counts that templates
        loop over (_NESTED: layers, experts, groups) multiply to at most _MAX_BLOCKS (a config saying
        10^12 layers, or a 4200-digit size, is one line naming the field, never a hang)."""
        v = self.get(*keys, default=default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (v == 0 and keys[0] in _POSITIVE) or v > _MAX_INT:
            raise UsageError(f"{self.path}: config {self.found(*keys)} = {_shown(v)} is not a "
                             f"{'positive' if keys[0] in _POSITIVE else 'non-negative'} integer up to {_MAX_INT:,}")
        if keys[0] in _LOOPED and v > _MAX_BLOCKS:
            raise UsageError(f"{self.path}: config {self.found(*keys)} = {v:,} is more than the {_MAX_BLOCKS:,} ckptstat models")
        if keys[0] in _NESTED:   # a count read twice (or under another name) is one loop
            loops = {**self.loops, self.found(*keys): max(v, 1)}
            if math.prod(loops.values()) > _MAX_BLOCKS:
                raise UsageError(f"{self.path}: config {self.found(*keys)} = {v:,} makes more than {_MAX_BLOCKS:,} blocks "
                                 "(layers x experts x groups) for ckptstat to model")
            self.loops = loops
        return v


# The tables generated from transformers (fixtures/make_*.py) live beside the family modules that read them.
TABLES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def _aliases() -> Mapping[str, Mapping[str, str]]:
    with open(os.path.join(TABLES, "config_aliases.json"), encoding="utf-8") as f:
        table: Mapping[str, Mapping[str, str]] = json.load(f)["aliases"]
    return table


@functools.cache
def _defaults() -> Mapping[str, Mapping[str, Any]]:
    with open(os.path.join(TABLES, "config_defaults.json"), encoding="utf-8") as f:
        table: Mapping[str, Mapping[str, Any]] = json.load(f)["defaults"]
    return table


@functools.cache
def _not_null() -> Mapping[str, frozenset[str]]:
    with open(os.path.join(TABLES, "config_not_null.json"), encoding="utf-8") as f:
        return {mt: frozenset(keys) for mt, keys in json.load(f)["not_null"].items()}


def class_default(model_type: str, key: str) -> Any:
    """The constant default model_type's config class gives `key` (or a name it goes by), or None where the
    class has none or derives it from other fields (config_defaults.json)."""
    row = _defaults().get(model_type, {})
    return next((row[n] for n in config_names(model_type, key) if row.get(n) is not None), None)


def config_value(cfg: Mapping[str, Any], key: str, model_type: str | None = None) -> Any:
    """A (sub-)config dict's value of `key` (or a name its config class lets it go by), else that class's constant
    default: the class its model_type names, or `model_type` where the dict leaves it out (a wrapper's vision_config
    or text_config, read without building a spec)."""
    mt = str(cfg.get("model_type", model_type))
    for name in config_names(mt, key):
        if cfg.get(name) is not None:
            return cfg[name]
    return class_default(mt, key)


def config_names(model_type: str, key: str) -> tuple[str, ...]:
    """`key` and the names its model_type's config class lets it go by (either way round)."""
    amap = _aliases().get(model_type, {})
    other = [amap[key]] if key in amap else []
    return (key, *other, *(a for a, target in amap.items() if target == key))


def _shown(v: object) -> str:
    """A config value in a message: short, whatever the file holds (a 4200-digit integer, a long list)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"an integer of {v.bit_length():,} bits"
    text = "null" if v is None else repr(v) if isinstance(v, (int, float, str, bool)) else f"a {type(v).__name__}"
    return text if len(text) <= 40 else text[:40] + "..."


_MAX_INT = 1 << 31          # sizes, vocabularies, positions: int32, as the frameworks hold them
_MAX_BLOCKS = 1 << 15       # DeepSeek-V3: 61 layers x 256 experts; Kimi K2: 61 x 384
# Counts the family templates loop over, nested (a Mixtral layer loops over its experts).
_NESTED = {"num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_local_experts", "num_hidden_groups",
           "inner_group_num"}
_LOOPED = {"num_decoder_layers", "encoder_layers", "decoder_layers"}   # looped over, not nested in the others (T5, BART, Whisper)


# Sizes that divide others or that a model cannot lack.
_POSITIVE = {"hidden_size", "num_attention_heads", "n_embd", "n_head", "dim", "n_heads", "d_model", "num_heads",
             "d_kv", "head_dim", "num_key_value_heads", "num_local_experts", "num_experts_per_tok",
             "encoder_attention_heads", "decoder_attention_heads", "max_source_positions", "block_size", "chunk_size",
             "mamba_chunk_size", "time_step_rank", "mamba_dt_rank", "num_mem_blocks"}


_LAYER_COUNT = re.compile(r"^(num_|n_)?(hidden_|encoder_|decoder_)?layers?$|_layers$|^depth$")


def check_layer_counts(cfg: Mapping[str, Any], path: str, limit: int) -> None:
    """Refuse, in one line, a config (or sub-config) whose layer counts (num_hidden_layers, n_layer, encoder_layers,
    ... : integers under a key naming layers in the plural, or n_layer / depth) are negative or past `limit`, before
    a library builds them (a 1 KB config of 50,000 layers took transformers minutes and gigabytes). A key naming one
    layer (vision_feature_layer = -2) is an index, not a count."""
    stack: list[Any] = [cfg]
    for _ in range(100_000):
        if not stack:
            return
        node = stack.pop()
        items = node.items() if isinstance(node, Mapping) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            if isinstance(v, (Mapping, list)):
                stack.append(v)
            elif isinstance(k, str) and _LAYER_COUNT.search(k) and type(v) is int and not 0 <= v <= limit:
                raise UsageError(f"{path}: config {k} = {_shown(v)} is not a layer count from 0 to {limit:,}")
    raise UsageError(f"{path}: config holds more than 100,000 values to check")


def no_pooler(model_type: str, head: str) -> bool:
    return False


def any_gguf(arch: str, metadata: Mapping[str, str]) -> bool:
    return True


@dataclass(frozen=True)
class Family:
    """Everything ckptstat knows about one model family. A family module builds one and the registry
    (families/__init__.py) lists it; nothing outside the family module branches on its name."""

    name: str                                   # ArchSpec.family and the registry key
    model_types: tuple[str, ...]                # config.json model_type values it covers
    signature: str                              # regex on normalised tensor names that shows the family
    from_config: Callable[[Cfg], ArchSpec]      # config.json -> ArchSpec (Cfg.common carries the shared fields)
    # canonical tensors (infer.canonical_tensors) -> ArchSpec; the dict holds the shared fields incl. the head
    from_tensors: Callable[[Tensors, dict[str, Any]], ArchSpec]
    build: Callable[[Builder], None]            # the op template flops and memory walk (ops.Builder)
    heads: tuple[str, ...]                      # heads the op template models; each needs a Sample
    samples: tuple[Sample, ...]                 # transformers builds tests/test_families.py checks
    # regexes that show the family only together, each matched by some name (SigLIP's text tower as transformers
    # 5 saves it: CLIP's bare tower names beside a root `head.weight`, which alone shows nothing)
    signature_together: tuple[str, ...] = ()
    # families tried after this one (families/__init__.py orders the registry by it): their tensor-name signature
    # or GGUF architecture also matches this family's files
    before: tuple[str, ...] = ()
    # a regex no name of the family's files matches: OPT's decoder layers are an encoder-decoder's too (FSMT,
    # Marian, Pegasus), whose `encoder.layers` OPT has not
    signature_without: str | None = None
    head_rules: tuple[HeadRule, ...] = ()       # head from tensor names when the config names none
    no_head: str = "base"                       # ... and when no rule matches
    default_head: str = "base"                  # head when config.json names no known architectures class
    pooler: Callable[[str, str], bool] = no_pooler   # (model_type, head) -> keeps the pooler
    expected_tensors: Callable[[ArchSpec], Shapes | None] | None = None   # the config cross-check template
    tie_rules: tuple[TieRule, ...] = ()         # pairs transformers ties (its _tied_weights_keys)
    tied_by_default: bool = True                # transformers' tie_word_embeddings default for the family
    # learned positions a model_type cannot index (RoBERTa numbers from padding_idx + 1)
    position_offset: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    encoder_decoder: bool = False               # a decoder stack fed by an encoder (`--dec-seq` applies)
    # an encoder-decoder whose from_config describes *ForCausalLM, the decoder alone, as a spec with 0 encoder
    # layers (seq2seq.py); without it such a config is NoAnalyticModel
    decoder_alone: bool = False
    # a checkpoint whose parameter count differs from the template's is not this model: no FLOPs (generic.py)
    strict_params: bool = False
    # with strict_params: does a bare config.json (no weights to check the template against) suffice? None: always
    config_alone: Callable[[Mapping[str, Any]], bool] | None = None
    main_input: str = "input_ids"               # input_features: --seq counts mel frames (--frames, --audio-seconds)
    # the shortest --seq the model can run (a waveform encoder's conv stack needs its receptive field: wav2vec2.py);
    # None: any
    min_seq: Callable[[ArchSpec], int] | None = None
    # the longest --seq the op template describes, where a longer one runs a part it does not (BigBird's block-sparse
    # attention); None: any. analysis/meta.load hands a longer one to the meta path
    longest_seq: Callable[[ArchSpec], int | None] | None = None
    # what of the forward the op template does not count at any --seq, by name (YOSO's LSH attention), its parameters
    # still described; None: nothing. analysis/meta.load hands its FLOPs to the meta path
    flops_refused: Callable[[ArchSpec], str | None] | None = None
    # what a windowed attention kernel attends, where that is every pair causal halving counts on every layer and
    # more than the causal window (DeepSeek-V4: the window and the compressed entries): `ckptstat flops` estimates
    # it as the halved template's attention and says this; None: the sliding layers' window, the others as counted
    windowed_kernel: str | None = None
    kv_cache: Callable[[ArchSpec, int, int, int, int], KVLines] | None = None   # (spec, b, s, s_dec, bytes)
    # the heads the first cache line holds, which tensor parallelism splits (None: spec.kv_heads; MLA's latent: 1)
    cache_heads: Callable[[ArchSpec], int] | None = None
    # GGUF general.architecture values (None: the model_types, as llama.cpp names most architectures)
    gguf_architectures: tuple[str, ...] | None = None
    gguf_accepts: Callable[[str, Mapping[str, str]], bool] = any_gguf   # (arch, metadata): this family's file?
    # (arch, metadata, tensors) -> a config.json equivalent, or None
    gguf_config: Callable[[str, Mapping[str, str], Tensors], dict[str, Any] | None] | None = None
    # HF module name -> llama.cpp GGUF tensor name, `{bid}` the layer (.weight / .bias or nothing follows);
    # `ckptstat diff` aligns a GGUF file with an HF one through it. (`gguf_names` is taken: architectures.)
    gguf_tensor_names: tuple[tuple[str, str], ...] = ()
    # (arch, the file's tensor names) -> the table for that file, where one family's llama.cpp names mean two
    # HF modules (Gemma's ffn_norm, T5's ffn_up, Falcon's attn_norm); None: gguf_tensor_names for every file
    gguf_table: Callable[[str, Collection[str]], tuple[tuple[str, str], ...]] | None = None
    # what llama.cpp's convert_hf_to_gguf.py does to values on the way (its model class's modify_tensors), as
    # (GGUF architecture, regex on the HF name as `ckptstat diff` aligns it, kind): "rope_q" / "rope_k" (the
    # rotary row permutation of Q / K, per head), "plus_one" (w + 1), "qkv_groups" (a fused QKV's rows
    # regrouped into q, k, v blocks); analysis/conversion.py replays them
    gguf_transforms: tuple[tuple[str, str, str], ...] = ()
    # what that converter leaves out on purpose (its filter_tensors): (GGUF architecture, regex on the HF tensor's name
    # as stored); `ckptstat diff` lists such a tensor as "dropped", no difference (BERT's pooler and cls heads)
    gguf_dropped: tuple[tuple[str, str], ...] = ()

    def seq2seq(self, s: ArchSpec) -> bool:
        """Whether `s` runs an encoder and a decoder (`--dec-seq` applies): an encoder-decoder family's spec
        with encoder layers (its *ForCausalLM, the decoder alone, has none)."""
        return self.encoder_decoder and s.layers > 0

    @property
    def gguf_names(self) -> tuple[str, ...]:
        return self.model_types if self.gguf_architectures is None else self.gguf_architectures

    def gguf_tensor_table(self, arch: str, names: Collection[str]) -> tuple[tuple[str, str], ...]:
        """The GGUF -> HF name table for one file of this family (`ckptstat diff`)."""
        return self.gguf_table(arch, names) if self.gguf_table is not None else self.gguf_tensor_names


def add_linear(out: Shapes, name: str, fout: int, fin: int, bias: bool = True) -> None:
    """An expected nn.Linear: weight [out, in] and, with bias, [out]."""
    out[name + ".weight"] = (fout, fin)
    if bias:
        out[name + ".bias"] = (fout,)


def add_norm(out: Shapes, name: str, dim: int, bias: bool = True) -> None:
    """An expected LayerNorm (weight and bias) or RMSNorm (bias=False)."""
    out[name + ".weight"] = (dim,)
    if bias:
        out[name + ".bias"] = (dim,)


def architectures(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """config.json's `architectures` class names: the strings of a list, nothing from any other value."""
    archs = cfg.get("architectures")
    return tuple(a for a in archs if isinstance(a, str)) if isinstance(archs, (list, tuple)) else ()


def head_of(archs: Iterable[str], default: str) -> tuple[str, str | None, tuple[str, ...]]:
    """(head, the class name it came from, notes) from config `architectures`."""
    for name in archs:
        for suffix, head in HEAD_SUFFIXES:
            if name.endswith(suffix):
                return head, name, ()
    return default, None, (f"config names no known architectures class; assumed the {default!r} head",)


# What a sliding layer's K/V holds in memory right after a forward of s tokens (every family's first KV line says it)
SLIDING_HELD = ("a sliding layer's DynamicSlidingWindowLayer keeps a view of its last sliding_window - 1 tokens, whose "
                "storage is the whole forward's s tokens until the next decode step")


def decoder_kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """KV cache of a decoder-only model as transformers' DynamicCache holds it after a forward of n tokens:
    2 (K and V) x g x d x bytes per token and layer. With a sliding window (ArchSpec.sliding_window; on
    sliding_layers, or on every layer when that is empty) a sliding layer's DynamicSlidingWindowLayer
    (transformers cache_utils.py) keeps a view of the last sliding_window - 1 tokens, but of the states it
    concatenated: their storage, all n tokens, stays held until the next decode step replaces it (measured on an
    H200: Mistral-7B at b=4, s=8192 held its whole prefill, 4 GiB, not the window's 2 GiB). A second line, where it
    differs: from the first decode step on, and in StaticCache's StaticSlidingWindowLayer and rolling-window kernels,
    a sliding layer holds the window. A hybrid's
    state-space layers (ArchSpec.ssm_layers) hold no K/V but a LinearAttentionLayer's conv state [b, conv_dim, k] and
    recurrent state [b, heads, head_dim, N] each, whatever s (layout_ssm.py); the recurrent state in float32 whatever
    the model's dtype (mamba2_chunk_scan computes in float32 and the cache keeps what it returns)."""
    per = s.kv_heads * (s.head_dim + (s.v_head_dim or s.head_dim)) * ab   # K and V (ArchSpec.v_head_dim: V's own width)
    n += s.prefix_tokens   # CPM-Ant's prompt tokens
    if s.ssm is not None:
        m, ns, rb = s.ssm, len(s.ssm_layers), max(ab, STATE_BYTES)
        na = s.layers - len(s.ffn_layers) - (0 if m.beside else ns)   # the MLP-alone layers (NemotronH's) cache nothing
        state = m.conv_dim * m.conv_kernel * ab + m.heads * m.head_dim * m.state * rb
        kv = f"{na} attention layers x 2 x g x d x s x {ab} B (= {per * na:,} B/token) + " if na else ""
        return [(f"b={b}, s={n}", b * (per * na * n + state * ns),
                 f"{kv}{ns} state-space layers x (conv_dim x conv_kernel x {ab} B + heads x head_dim x state x {rb} B, "
                 f"float32) (= {state * ns:,} B/sequence, any s), x b")]
    w = s.sliding_window
    ns = (len(s.sliding_layers) or s.layers) if w else 0
    if not w or not ns:
        per_tok = per * s.layers
        return [(f"b={b}, s={n}", per_tok * b * n, f"2 x L x g x d x s x b x {ab} B = {per_tok:,} B/token")]
    full = s.layers - ns
    kind = "chunked (attention_chunk_size)" if s.chunked_attention else "sliding"
    slid = per * s.sliding_kv_heads // s.kv_heads if s.sliding_kv_heads else per   # ArchSpec.sliding_kv_heads' layers
    lines: KVLines = [(f"b={b}, s={n}", b * (per * full + slid * ns) * n,
                       f"2 x g x d x {ab} B = {per:,} B per token and layer, x b, x s = {n} tokens on all {s.layers} "
                       f"layers ({ns} {kind}: {SLIDING_HELD})")]
    static = b * (per * full * n + slid * ns * min(n, w))
    if static != lines[0][1]:
        lines.append((f"decoding or static cache, window {w}", static,
                      f"from the first decode step on, or transformers' StaticCache (max_cache_len = s) or a "
                      f"rolling-window kernel: {ns} sliding layers x sliding_window = {w} tokens, {full} full layers x s"))
    return lines
