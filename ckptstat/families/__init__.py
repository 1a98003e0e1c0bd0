"""Which architecture a checkpoint holds: from config.json when there is one, else from a GGUF file's
`general.architecture`, else from tensor names."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from ..naming import normalize

# config.json model_type -> family (the families ckptstat has analytic rules for).
MODEL_TYPES = {
    "bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "electra": "bert", "camembert": "bert",
    "albert": "albert", "distilbert": "distilbert",
    "gpt2": "gpt2",
    "llama": "llama", "mistral": "llama", "qwen2": "llama", "mixtral": "mixtral",
    "t5": "t5", "mt5": "t5",
}

# Tensor-name signatures, tried in order when there is no config.
NAME_SIGNATURES = [
    (re.compile(r"(^|[./])albert_layer_groups[./]"), "albert"),
    (re.compile(r"(^|[./])transformer[./]layer[./]\d+[./]attention[./]q_lin"), "distilbert"),
    (re.compile(r"(^|[./])block_sparse_moe[./]"), "mixtral"),
    (re.compile(r"(^|[./])layers[./]\d+[./]self_attn[./]q_proj"), "llama"),
    (re.compile(r"(^|[./])h[./]\d+[./]attn[./]c_attn"), "gpt2"),
    (re.compile(r"(^|[./])(encoder|decoder)[./]block[./]\d+[./]layer[./]\d+[./](SelfAttention|EncDecAttention)"), "t5"),
    (re.compile(r"(^|[./])layer[._/]\d+[./]attention[./]self[./]query"), "bert"),
]


@dataclass(frozen=True)
class Architecture:
    family: str                     # one of MODEL_TYPES' values, or "unknown"
    source: str                     # "config.json", "gguf general.architecture" or "tensor names"
    model_type: str | None = None
    architectures: tuple[str, ...] = ()


def detect(names: Iterable[str], config: dict | None, metadata: Mapping[str, str] | None = None) -> Architecture:
    """metadata: a GGUF file's key-values (Checkpoint.metadata of format "gguf"), else None."""
    if config:
        mt = config.get("model_type")
        archs = tuple(a for a in config.get("architectures") or () if isinstance(a, str))
        if isinstance(mt, str):
            return Architecture(MODEL_TYPES.get(mt, "unknown"), "config.json", mt, archs)
    # GGUF: general.architecture names llama.cpp's LLM_ARCH (llama, qwen2, gpt2, bert, t5... as
    # model_type does). llama.cpp converts Mistral and Mixtral to "llama"; experts tell Mixtral apart.
    arch = (metadata or {}).get("general.architecture")
    if arch:
        family = MODEL_TYPES.get(arch, "unknown")
        if family == "llama" and int((metadata or {}).get(f"{arch}.expert_count", "0") or 0) > 0:
            family = "mixtral"
        return Architecture(family, "gguf general.architecture", arch)
    # classify.normalize: HF TF's `tf_bert_model/bert/encoder/layer_._0/...:0` reads `...layer.0...`
    names = [normalize(n) for n in names]
    for pattern, family in NAME_SIGNATURES:
        if any(pattern.search(n) for n in names):
            return Architecture(family, "tensor names")
    return Architecture("unknown", "tensor names")
