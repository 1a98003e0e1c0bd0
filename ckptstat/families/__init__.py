"""The model-family registry, and which architecture a checkpoint holds: from config.json when there is
one, else from a GGUF file's `general.architecture`, else from tensor names.

Each family is one module (families/<name>.py) exporting FAMILY (base.Family), listed once in _MODULES. The
order tried is explicit: a family names in `before` the families whose tensor-name signature or GGUF
architecture also matches its files (Mixtral before LLaMA), and `ordered` sorts the registry by it.

A family's module is imported when it is asked for: which family a model_type, a GGUF architecture or a tensor
name shows is read from index.json (each family's name, module, model types, GGUF architectures and signature,
in the order tried), which fixtures/make_family_index.py writes from the modules and tests/test_family_index.py
checks is what they say. FAMILIES (every family, in order) and MODEL_TYPES are made on first
use (`__getattr__`); FAMILIES imports every family module (docs/performance.md, "Start-up")."""
from __future__ import annotations

import functools
import importlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..errors import UsageError
from ..naming import joined_slices, normalize
from .framework.base import Family, architectures

# Every family's module, in any order (alphabetical): the registry tries them in `ordered`'s order.
_MODULES = (
    "afmoe", "albert", "apertus", "arcee", "aria_text", "bailing_hybrid", "bamba", "bart", "beam", "beit", "bert", "bitnet",
    "bloom", "clip", "cohere", "cohere2_moe", "convbert", "convnext", "cpmant", "ctrl", "dbrx", "deberta", "deberta_v2",
    "deepseek", "deepseek_v4", "diffllama", "dinov2", "distilbert", "doge", "dory", "dots1", "dots3_note", "ernie4_5",
    "ernie4_5_moe", "eurobert", "exaone4", "exaone_moe", "falcon", "falcon_h1", "flex_olmo", "flint", "fnet", "funnel",
    "fuyu", "gemma", "gemma3n", "gemma4", "git", "glm", "glm4_moe", "gpt2", "gpt_bigcode", "gpt_neo", "gpt_neox_japanese",
    "gpt_oss", "gptj", "gptneox", "granite_swa", "granitemoe", "granitemoe_swa", "granitemoehybrid", "gte", "hrm_text",
    "hunyuan_v1_dense", "hunyuan_v1_moe", "hy_v3", "hy_v4", "hyperclovax", "inkling", "inkling2", "jais2", "jamba", "jetmoe",
    "kimi_linear", "kolibri1", "laguna", "lara_mini", "led", "levit", "lfm2", "lfm3", "llama", "llama4", "longcat_flash",
    "longformer", "longt5", "luke", "mamba",
    "mamba2", "mellum", "mimo_v2_flash", "minicpm3", "minicpm5_moe", "minimax", "minimax_m2", "minimax_m3", "mixtral",
    "mllama", "mobilenet",
    "mobilebert", "modernbert", "modernbert_decoder", "mpt", "nanochat", "nemotron", "nemotron_h", "nomic_bert", "olmo",
    "olmo_hybrid", "olmoe", "openai_gpt", "opt", "persimmon", "phi", "phi3", "phimoe", "poolformer", "prophetnet", "pvt",
    "pvt_v2", "qwen3", "qwen3_5", "qwen3_next", "qwen4_exp",
    "qwen_moe", "recurrent_gemma", "regnet", "resnet", "rwkv", "seed_oss",
    "segformer", "siglip", "smollm3", "solar_open", "splinter", "stablelm", "starcoder2", "swin", "switch_transformers", "t5",
    "t5gemma", "t5gemma2", "vit", "wav2vec2", "whisper", "xlm", "xlnet", "xlstm", "zamba", "zamba2", "zaya",
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


class Entry(NamedTuple):
    """What index.json says of a registered family (its Family's fields of the same names)."""
    name: str
    module: str                         # families/<module>.py
    model_types: tuple[str, ...]
    gguf_names: tuple[str, ...]
    signature: str
    signature_together: tuple[str, ...]
    signature_without: str | None


INDEX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "index.json")
GENERIC = "generic"   # the module of the generic decoder fallback: not in FAMILIES, by_model_type consults it last


@functools.cache
def index() -> tuple[tuple[Entry, ...], str]:
    """(the registered families in the order tried, the fallback's family name), as index.json has them."""
    with open(INDEX, encoding="utf-8") as f:
        table = json.load(f)
    return tuple(Entry(n, m, tuple(mts), tuple(gg), sig, tuple(tog), without)
                 for n, m, mts, gg, sig, tog, without in table["families"]), table["fallback"]


@functools.cache
def _module_of() -> dict[str, str]:
    """family name -> its module, the fallback's included."""
    entries, fallback = index()
    return {**{e.name: e.module for e in entries}, fallback: GENERIC}


@functools.cache
def _model_types() -> dict[str, str]:
    """config.json model_type -> family name (the families ckptstat has analytic rules for)."""
    return {mt: e.name for e in index()[0] for mt in e.model_types}


@functools.cache
def _signature(e: Entry) -> tuple[re.Pattern[str], tuple[re.Pattern[str], ...], re.Pattern[str] | None, str]:
    """A family's tensor-name signature, compiled: (one name shows it, names that show it together, a name that rules it
    out, the family)."""
    return (re.compile(e.signature), tuple(map(re.compile, e.signature_together)),
            re.compile(e.signature_without) if e.signature_without else None, e.name)


def _family(module: str) -> Family:
    family: Family = importlib.import_module(f"{__name__}.{module}").FAMILY
    return family


def __getattr__(name: str) -> Any:
    """The registry's tables, made on first use (and kept): _ALL (every family, alphabetical), FAMILIES (in the order
    tried) and _BY_NAME (the fallback's included) import every family module; MODEL_TYPES is read from the index. A
    submodule by name (families.llama) is imported."""
    if name in ("_ALL", "FAMILIES", "_BY_NAME"):
        everyone = tuple(map(_family, _MODULES))
        families = ordered(everyone)
        globals().update(_ALL=everyone, FAMILIES=families,
                         _BY_NAME={f.name: f for f in families + (_family(GENERIC),)})
    elif name == "MODEL_TYPES":
        globals()[name] = _model_types()
    elif not name.startswith("_") and os.path.exists(os.path.join(os.path.dirname(INDEX), name + ".py")):
        return importlib.import_module(f"{__name__}.{name}")   # a submodule, as when the package imported them all
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return globals()[name]


def get(name: str) -> Family:
    """The registered family called `name` (ArchSpec.family); UsageError if there is none."""
    try:
        module = _module_of()[name]
    except KeyError:
        raise UsageError(f"no analytic model for family {name!r}") from None
    return _family(module)


def decoder_layout(s: Any) -> Any:
    """The DecoderLayout (framework/layout.py) a spec's family was made from, or None for a family written by hand."""
    from .framework.layout import layouts_of

    lays = layouts_of(get(s.family))
    return lays.of(s) if lays is not None else None


def by_model_type(model_type: object, config: Mapping[str, object] | None = None) -> Family | None:
    """The family of a config.json model_type; with the config, the generic decoder fallback when no
    family claims the model_type but the config has the standard fields (generic.py)."""
    name = _model_types().get(model_type) if isinstance(model_type, str) else None
    f = get(name) if name is not None else None
    inner = language_model(config) if f is None and config is not None else None
    if inner is not None:   # a vision-language wrapper: its language model's family
        return inner[1]
    if f is None and isinstance(model_type, str) and config is not None:
        from . import generic
        if generic.claims(config):
            return generic.FAMILY
    return f


def language_model(config: Mapping[str, object]) -> tuple[dict, Family] | None:
    """(the language model's config, its family) of a vision-language wrapper's config.json whose language
    model is a registered decoder family's (wrappers.py), or one the generic decoder claims by its fields (Granite 4
    Vision's Granite: generic.py); None for any other config."""
    mt = config.get("model_type")
    if not isinstance(mt, str) or mt in _model_types():
        return None
    from . import generic, wrappers
    inner = wrappers.language_config(config)
    name = _model_types().get(inner["model_type"]) if inner is not None else None
    f = get(name) if name is not None else None
    if inner is not None and f is None and generic.claims(inner):
        f = generic.FAMILY
    return (inner, f) if inner is not None and f is not None and not f.encoder_decoder else None


def by_gguf(arch: str, metadata: Mapping[str, str]) -> Family | None:
    """The family of a GGUF file whose general.architecture is `arch`: the first, in the order tried, whose GGUF
    architectures name it and that accepts the file (only those families' modules are imported)."""
    return next((f for e in index()[0] if arch in e.gguf_names and (f := get(e.name)).gguf_accepts(arch, metadata)),
                None)


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
    for pattern, together, without, family in map(_signature, index()[0]):
        if without is not None and any(without.search(n) for n in names):
            continue
        if any(pattern.search(n) for n in names) or (together and all(any(p.search(n) for n in names) for p in together)):
            return Architecture(family, "tensor names")
    return Architecture("unknown", "tensor names")
