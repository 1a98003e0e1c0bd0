"""The model-family registry, and which architecture a checkpoint holds: from config.json when there is
one, else from a GGUF file's `general.architecture`, else from tensor names.

Each family is one module (families/<name>.py) exporting FAMILY (base.Family), listed once in _ALL. The
order tried is explicit: a family names in `before` the families whose tensor-name signature or GGUF
architecture also matches its files (Mixtral before LLaMA), and `ordered` sorts the registry by it."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import UsageError
from ..naming import joined_slices, normalize
from . import (
    afmoe,
    albert,
    apertus,
    arcee,
    aria_text,
    bailing_hybrid,
    bamba,
    bart,
    beam,
    beit,
    bert,
    bitnet,
    bloom,
    clip,
    cohere,
    cohere2_moe,
    convbert,
    convnext,
    cpmant,
    ctrl,
    dbrx,
    deberta,
    deberta_v2,
    deepseek,
    deepseek_v4,
    diffllama,
    dinov2,
    distilbert,
    doge,
    dory,
    dots1,
    dots3_note,
    ernie4_5,
    ernie4_5_moe,
    eurobert,
    exaone4,
    exaone_moe,
    falcon,
    falcon_h1,
    flex_olmo,
    flint,
    fnet,
    funnel,
    fuyu,
    gemma,
    gemma3n,
    gemma4,
    generic,
    git,
    glm,
    glm4_moe,
    gpt2,
    gpt_bigcode,
    gpt_neo,
    gpt_neox_japanese,
    gpt_oss,
    gptj,
    gptneox,
    granite_swa,
    granitemoe,
    granitemoe_swa,
    granitemoehybrid,
    gte,
    hrm_text,
    hunyuan_v1_dense,
    hunyuan_v1_moe,
    hy_v3,
    hy_v4,
    hyperclovax,
    inkling,
    inkling2,
    jais2,
    jamba,
    jetmoe,
    kimi_linear,
    kolibri1,
    laguna,
    lara_mini,
    levit,
    lfm2,
    lfm3,
    llama,
    llama4,
    longt5,
    luke,
    mamba,
    mamba2,
    mellum,
    mimo_v2_flash,
    minicpm3,
    minimax,
    minimax_m2,
    minimax_m3,
    mixtral,
    mllama,
    mobilebert,
    mobilenet,
    modernbert,
    modernbert_decoder,
    mpt,
    nanochat,
    nemotron,
    nemotron_h,
    nomic_bert,
    olmo,
    olmo_hybrid,
    olmoe,
    openai_gpt,
    opt,
    persimmon,
    phi,
    phi3,
    phimoe,
    poolformer,
    prophetnet,
    pvt,
    pvt_v2,
    qwen3,
    qwen3_5,
    qwen3_next,
    qwen_moe,
    recurrent_gemma,
    regnet,
    resnet,
    rwkv,
    seed_oss,
    segformer,
    siglip,
    smollm3,
    solar_open,
    splinter,
    stablelm,
    starcoder2,
    swin,
    switch_transformers,
    t5,
    t5gemma,
    vit,
    wav2vec2,
    whisper,
    wrappers,
    xlm,
    xlnet,
    zamba,
    zamba2,
)
from .framework.base import Family, architectures

# Every family, in any order (alphabetical): the registry tries them in `ordered`'s order.
_ALL: tuple[Family, ...] = (
    afmoe.FAMILY, albert.FAMILY, apertus.FAMILY, arcee.FAMILY, aria_text.FAMILY, bailing_hybrid.FAMILY,
    bamba.FAMILY, bart.FAMILY, beam.FAMILY, beit.FAMILY, bert.FAMILY, bitnet.FAMILY, bloom.FAMILY, clip.FAMILY, cohere.FAMILY,
    cohere2_moe.FAMILY, convbert.FAMILY, convnext.FAMILY, cpmant.FAMILY, ctrl.FAMILY, dbrx.FAMILY, deberta.FAMILY,
    deberta_v2.FAMILY,
    deepseek.FAMILY, deepseek_v4.FAMILY, diffllama.FAMILY, dinov2.FAMILY,
    distilbert.FAMILY, doge.FAMILY, dory.FAMILY, dots1.FAMILY, dots3_note.FAMILY, ernie4_5.FAMILY, ernie4_5_moe.FAMILY,
    eurobert.FAMILY, exaone4.FAMILY, exaone_moe.FAMILY, falcon.FAMILY, falcon_h1.FAMILY, flex_olmo.FAMILY,
    flint.FAMILY, fnet.FAMILY, funnel.FAMILY, fuyu.FAMILY, gemma.FAMILY, gemma3n.FAMILY, gemma4.FAMILY,
    git.FAMILY, glm.FAMILY, glm4_moe.FAMILY,
    gpt2.FAMILY, gpt_bigcode.FAMILY, gpt_neo.FAMILY, gpt_neox_japanese.FAMILY, gpt_oss.FAMILY, gptj.FAMILY,
    gptneox.FAMILY, granite_swa.FAMILY, granitemoe.FAMILY, granitemoe_swa.FAMILY, granitemoehybrid.FAMILY,
    gte.FAMILY, hrm_text.FAMILY, hunyuan_v1_dense.FAMILY, hunyuan_v1_moe.FAMILY, hy_v3.FAMILY, hy_v4.FAMILY,
    hyperclovax.FAMILY, inkling.FAMILY, inkling2.FAMILY, jais2.FAMILY, jamba.FAMILY, jetmoe.FAMILY,
    kimi_linear.FAMILY, kolibri1.FAMILY, laguna.FAMILY, lara_mini.FAMILY, levit.FAMILY, lfm2.FAMILY, lfm3.FAMILY, llama.FAMILY,
    llama4.FAMILY, longt5.FAMILY, luke.FAMILY, mamba.FAMILY, mamba2.FAMILY, mellum.FAMILY, mimo_v2_flash.FAMILY,
    minicpm3.FAMILY,
    minimax.FAMILY, minimax_m2.FAMILY, minimax_m3.FAMILY, mixtral.FAMILY, mllama.FAMILY, mobilenet.FAMILY, mobilebert.FAMILY,
    modernbert.FAMILY,
    modernbert_decoder.FAMILY, mpt.FAMILY, nanochat.FAMILY, nemotron.FAMILY, nemotron_h.FAMILY, nomic_bert.FAMILY,
    olmo.FAMILY, olmo_hybrid.FAMILY, olmoe.FAMILY, openai_gpt.FAMILY, opt.FAMILY, persimmon.FAMILY, phi.FAMILY,
    phi3.FAMILY, phimoe.FAMILY, poolformer.FAMILY, prophetnet.FAMILY, pvt.FAMILY, pvt_v2.FAMILY, qwen3.FAMILY,
    qwen3_5.FAMILY,
    qwen3_next.FAMILY, qwen_moe.FAMILY,
    recurrent_gemma.FAMILY, regnet.FAMILY, resnet.FAMILY, rwkv.FAMILY, seed_oss.FAMILY, segformer.FAMILY, siglip.FAMILY,
    smollm3.FAMILY, solar_open.FAMILY, splinter.FAMILY, stablelm.FAMILY, starcoder2.FAMILY, swin.FAMILY,
    switch_transformers.FAMILY,
    t5.FAMILY, t5gemma.FAMILY, vit.FAMILY, wav2vec2.FAMILY, whisper.FAMILY, xlm.FAMILY, xlnet.FAMILY, zamba.FAMILY, zamba2.FAMILY,
)


def ordered(families: tuple[Family, ...]) -> tuple[Family, ...]:
    """The families in the order tried: each before the families its `before` names (whose signature or GGUF
    architecture also matches its files), otherwise in the order given. UsageError on an unknown name or a cycle."""
    by_name = {f.name: f for f in families}
    after: dict[str, set[str]] = {f.name: set() for f in families}    # name -> the families that must come first
    for f in families:
        for later in f.before:
            if later not in by_name:
                raise UsageError(f"family {f.name!r} is to be tried before {later!r}, which is not registered")
            after[later].add(f.name)
    out: list[Family] = []
    while len(out) < len(families):
        done = {f.name for f in out}
        ready = next((f for f in families if f.name not in done and after[f.name] <= done), None)
        if ready is None:
            raise UsageError(f"the families' `before` orders form a cycle among {sorted(set(by_name) - done)}")
        out.append(ready)
    return tuple(out)


FAMILIES = ordered(_ALL)

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
    # one substitution over a slice of names at a time (naming.joined_slices), in C (normalize is then only `/` ->
    # `.`); names starting with a number are rare: their substitution only when some form starts with a digit (read
    # as 0)
    first = forms is None or forms.startswith("0") or "\n0" in forms
    shapes: set[str] = set()
    for _, _, text in joined_slices(names):
        look = text if forms is None else forms
        if look is None or text is None or "_._" in look or ":" in look or "ATTRIBUTES" in look:
            # a name holding a newline, or one of normalize's rarer rules: name by name
            return {_COMPONENT_NUMBER.sub("0", normalize(n)) for n in names}
        text = _DOT_NUMBER.sub(".0", text.replace("/", "."))
        shapes.update((_FIRST_NUMBER.sub("0", text) if first else text).split("\n"))
    return shapes


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
