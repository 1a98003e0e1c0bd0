"""The model-family registry, and which architecture a checkpoint holds: from config.json when there is
one, else from a GGUF file's `general.architecture`, else from tensor names.

Each family is one module (families/<name>.py) exporting FAMILY (base.Family); FAMILIES lists them,
one line each. The order is the order tried: a family whose tensor names or GGUF files also match a
broader one's comes before it (Mixtral before LLaMA)."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import UsageError
from ..naming import normalize
from . import (
    albert,
    arcee,
    bart,
    bert,
    bloom,
    clip,
    deepseek,
    dinov2,
    distilbert,
    falcon,
    gemma,
    generic,
    glm,
    gpt2,
    gpt_bigcode,
    gpt_neo,
    gpt_oss,
    gptj,
    gptneox,
    llama,
    mamba,
    mixtral,
    olmo,
    opt,
    phi,
    phi3,
    qwen3,
    qwen_moe,
    resnet,
    siglip,
    smollm3,
    t5,
    vit,
    whisper,
    wrappers,
)
from .base import Family, architectures

FAMILIES: tuple[Family, ...] = (
    bert.FAMILY,
    albert.FAMILY,
    distilbert.FAMILY,
    gpt2.FAMILY,
    gpt_bigcode.FAMILY,  # after gpt2: the same tensor names (GPT-2's), so its files without config read as GPT-2
    gpt_neo.FAMILY,
    gptj.FAMILY,        # GPT-J and CodeGen
    dinov2.FAMILY,      # before vit: its embeddings.patch_embeddings.projection names match vit's signature
    vit.FAMILY,
    siglip.FAMILY,      # before clip: its towers' names match clip's signature
    clip.FAMILY,        # before bart: its text_model.encoder.layers.N.self_attn.q_proj names match bart's signature
    resnet.FAMILY,
    bart.FAMILY,        # before llama: its layers.N.self_attn.q_proj names match llama's signature
    whisper.FAMILY,     # before llama, as bart
    gemma.FAMILY,       # before olmo/qwen3/llama: Gemma3 files have self_attn.q_norm and LLaMA's q_proj names
    deepseek.FAMILY,    # before qwen_moe: its mlp.experts.N.gate_proj names match qwen_moe's signature
    qwen_moe.FAMILY,
    gpt_oss.FAMILY,     # before mixtral and llama: its fused experts and q_proj names match their signatures
    mixtral.FAMILY,     # after the MoE families whose transformers 5 fused experts it would take
    olmo.FAMILY,        # before qwen3: OLMo2 files have self_attn.q_norm too
    qwen3.FAMILY,       # before llama: its q_proj names match llama's signature
    phi3.FAMILY,
    glm.FAMILY,         # after phi3: Phi-3's files have gate_up_proj too
    phi.FAMILY,
    gptneox.FAMILY,
    bloom.FAMILY,       # before falcon: its h.N.self_attention.query_key_value names match falcon's signature
    falcon.FAMILY,
    opt.FAMILY,         # before llama: its layers.N.self_attn.q_proj names match llama's signature
    llama.FAMILY,
    smollm3.FAMILY,     # never from tensor names (LLaMA's): by model_type only
    arcee.FAMILY,       # as smollm3
    t5.FAMILY,
    mamba.FAMILY,
)

# generic.FAMILY is not in FAMILIES: it is the fallback by_model_type and detect consult last, by config fields.
_BY_NAME = {f.name: f for f in FAMILIES + (generic.FAMILY,)}
# config.json model_type -> family name (the families ckptstat has analytic rules for).
MODEL_TYPES = {mt: f.name for f in FAMILIES for mt in f.model_types}
# Tensor-name signatures, tried in order when there is no config: (one name shows it, names that show it together).
NAME_SIGNATURES = [(re.compile(f.signature), tuple(map(re.compile, f.signature_together)),
                    re.compile(f.signature_without) if f.signature_without else None, f.name) for f in FAMILIES]


def get(name: str) -> Family:
    """The registered family called `name` (ArchSpec.family); UsageError if there is none."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UsageError(f"no analytic model for family {name!r}") from None


def by_model_type(model_type: object, config: Mapping[str, object] | None = None) -> Family | None:
    """The family of a config.json model_type; with the config, the generic decoder fallback when no
    family claims the model_type but the config has the standard fields (generic.py)."""
    f = _BY_NAME.get(MODEL_TYPES.get(model_type, "")) if isinstance(model_type, str) else None
    inner = language_model(config) if f is None and config is not None else None
    if inner is not None:   # a vision-language wrapper: its language model's family
        return inner[1]
    if f is None and isinstance(model_type, str) and config is not None and generic.claims(config):
        return generic.FAMILY
    return f


def language_model(config: Mapping[str, object]) -> tuple[dict, Family] | None:
    """(the language model's config, its family) of a vision-language wrapper's config.json whose language
    model is a registered decoder family's (wrappers.py); None for any other config."""
    mt = config.get("model_type")
    if not isinstance(mt, str) or mt in MODEL_TYPES:
        return None
    inner = wrappers.language_config(config)
    f = _BY_NAME.get(MODEL_TYPES.get(inner["model_type"], "")) if inner is not None else None
    return (inner, f) if inner is not None and f is not None and not f.encoder_decoder else None


def by_gguf(arch: str, metadata: Mapping[str, str]) -> Family | None:
    """The family of a GGUF file whose general.architecture is `arch`."""
    return next((f for f in FAMILIES if arch in f.gguf_names and f.gguf_accepts(arch, metadata)), None)


@dataclass(frozen=True)
class Architecture:
    family: str                     # a registered family's name, or "unknown"
    source: str                     # "config.json", "gguf general.architecture" or "tensor names"
    model_type: str | None = None
    architectures: tuple[str, ...] = ()


# A whole numbered component (`layers.7.`, `experts.41.`) read as 0: no signature reads a component's
# value (tests/test_quick_path.py checks), so a 200k-tensor MoE header is matched by its few dozen
# distinct name shapes, not name by name (docs/performance.md).
_COMPONENT_NUMBER = re.compile(r"(?<![^.])\d+(?![^.])")


# The same over names joined by newlines, as two patterns that start with a literal or an anchor (re scans
# for those fast; a leading lookbehind is tried at every position): a number after a dot, one at a name's start.
_DOT_NUMBER = re.compile(r"\.\d+(?=\.|\n|\Z)")
_FIRST_NUMBER = re.compile(r"(?m)^\d+(?=\.|$)")


def _name_shapes(names: Iterable[str], forms: str | None = None) -> set[str]:
    """forms: the names' naming.digit_forms, if known: the literal checks scan them instead of every name."""
    names = list(names)
    text = "\n".join(names)
    look = text if forms is None else forms
    if text.count("\n") != len(names) - 1 or "_._" in look or ":" in look or "ATTRIBUTES" in look:
        # a name holding a newline, or one of normalize's rarer rules: name by name
        return {_COMPONENT_NUMBER.sub("0", normalize(n)) for n in names}
    # one substitution over all names, in C (normalize is then only `/` -> `.`); names starting with a
    # number are rare: their substitution only when some form starts with a digit (read as 0)
    text = _DOT_NUMBER.sub(".0", text.replace("/", "."))
    if forms is None or forms.startswith("0") or "\n0" in forms:
        text = _FIRST_NUMBER.sub("0", text)
    return set(text.split("\n")) if names else set()


def detect(names: Iterable[str], config: dict | None, metadata: Mapping[str, str] | None = None,
           forms: str | None = None) -> Architecture:
    """metadata: a GGUF file's key-values (Checkpoint.metadata of format "gguf"), else None; forms: the
    names' naming.digit_forms, if known (docs/performance.md)."""
    if config:
        mt = config.get("model_type")
        archs = architectures(config)
        if isinstance(mt, str):
            f = by_model_type(mt, config)
            return Architecture(f.name if f else "unknown", "config.json", mt, archs)
    # GGUF: general.architecture names llama.cpp's LLM_ARCH (llama, qwen2, gpt2, bert, t5... as
    # model_type does); a family's gguf_accepts tells apart files of one name (Mixtral's "llama" has experts).
    arch = (metadata or {}).get("general.architecture")
    if arch:
        f = by_gguf(arch, metadata or {})
        return Architecture(f.name if f else "unknown", "gguf general.architecture", arch)
    # naming.normalize: HF TF's `tf_bert_model/bert/encoder/layer_._0/...:0` reads `...layer.0...`
    names = _name_shapes(names, forms)
    for pattern, together, without, family in NAME_SIGNATURES:
        if without is not None and any(without.search(n) for n in names):
            continue
        if any(pattern.search(n) for n in names) or (together and all(any(p.search(n) for n in names) for p in together)):
            return Architecture(family, "tensor names")
    return Architecture("unknown", "tensor names")
