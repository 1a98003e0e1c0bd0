"""The census's shared facts about a checkpoint's tensors, each computed once per checkpoint:
placements (bucket, layer, role), aliases (names over one storage and view), the tensors the unique
parameter count sums, and the resolved architecture. Headers only."""
from __future__ import annotations

import fnmatch
import functools
import re

from ..core import Checkpoint, TensorInfo
from ..core.tensor_table import columns
from ..errors import CorruptCheckpointError
from ..naming import Placement, classify_columns, keras3_bn_stats, name_forms, role_of
from .diffusion import GATES, Layout, layout
from .diffusion import is_buffer as diffusion_buffer
from .diffusion_dit import GATES as DIT_GATES
from .diffusion_dit import layout as dit_layout
from .lora_file import is_buffer as lora_buffer
from .lora_file import naming
from .quant import logical
from .quant import roles as quant_roles
from .quant.mlx import as_converted


def placements(ckpt: Checkpoint) -> dict[str, Placement]:
    return ckpt.derived("placements", _placements)


def _placements(ckpt: Checkpoint) -> dict[str, Placement]:
    try:
        c = columns(ckpt.tensors)
        out = classify_columns(c.names, c.dtypes, c.shapes)
    except CorruptCheckpointError as e:   # a name naming cannot read (a 5,000-digit layer index): name the file
        raise CorruptCheckpointError(e.path or ckpt.path, e.reason) from None
    # a role the class config.json names decides against the name rules (transformers' or diffusers')
    if ckpt.config and (ckpt.config.get("architectures") or diffusers_class(ckpt)):
        from ..families.buffer_table import roles  # (the family modules load with a class to look up)
        out.update({n: Placement(out[n].bucket, out[n].layer, r) for n, r in roles(list(out), ckpt.config).items()
                    if out[n].role in ("parameter", "buffer")})
    # what a file that is no one model registers as buffers, under names the rules read as parameters: a one-file
    # diffusion model's EMA copy, noise schedule and SD 3's pos_embed; a LoRA file's alphas
    one_file = diffusion_layout(ckpt)
    buffer = (lambda n: diffusion_buffer(n, one_file)) if one_file else lora_buffer if lora_naming(ckpt) else None
    if buffer is not None:
        out.update({n: Placement(p.bucket, p.layer, "buffer") for n, p in out.items()
                    if p.role == "parameter" and buffer(n)})
    if ckpt.format == "gguf":
        out.update(_gguf_parameters(ckpt, out))
    forms = name_forms(ckpt)   # (a checkpoint without the literal pays no pass over its names: docs/performance.md)
    if forms is None or "batch_normalization" in forms:
        out.update({n: Placement(out[n].bucket, out[n].layer, "non-trainable") for n in keras3_bn_stats(out)
                    if out[n].role == "parameter"})
    # what the file says a tensor is (formats/torch/pt2.py: buffers and constants; formats/keras_zip.py: frozen layers)
    out.update({n: Placement(out[n].bucket, out[n].layer, r) for n, r in ckpt.roles.items()
                if n in out and out[n].role == "parameter"})
    # the pieces of quantised weights: packed weight, scale, zero point... (census/quant/)
    out.update({n: Placement(out[n].bucket, out[n].layer, role) for n, role in quant_roles(ckpt).items()})
    return out


def _gguf_parameters(ckpt: Checkpoint, out: dict[str, Placement]) -> dict[str, Placement]:
    """A GGUF tensor the name rules read as a buffer whose HF tensor (its family's gguf_tensor_names) they read as a
    parameter: a parameter. llama.cpp's exp_probs_b.bias is DeepSeek-V3's router buffer e_score_correction_bias, but
    Ernie 4.5 MoE's moe_statics.e_score_correction_bias, an nn.Parameter transformers' parameters() counts."""
    buffers = [n for n, p in out.items() if p.role == "buffer"]
    arch = (ckpt.metadata or {}).get("general.architecture") if buffers else None
    from ..families import by_gguf  # (the registry loads only for a GGUF file holding buffers)

    family = by_gguf(arch, ckpt.metadata) if arch else None
    if family is None:
        return {}
    found: dict[str, Placement] = {}
    for hf, gg in family.gguf_tensor_table(arch or "", ckpt.tensors.keys()):
        rx = re.compile("^" + re.escape(gg).replace(re.escape("{bid}"), r"(\d+)") + r"(\.weight|\.bias|)$")
        for n in buffers:
            if (m := rx.match(n)) and role_of(hf.replace("{bid}", m[1] if rx.groups > 1 else "") + m[rx.groups],
                                              ckpt.tensors[n].dtype, ckpt.tensors[n].shape) == "parameter":
                found[n] = Placement(out[n].bucket, out[n].layer, "parameter")
    return found


def aliases(ckpt: Checkpoint) -> dict[str, str]:
    """name -> the first name over the same storage and view, for every name that is an alias."""
    return ckpt.derived("aliases", _aliases)


def _aliases(ckpt: Checkpoint) -> dict[str, str]:
    """The first name of each storage and view stands for it, a parameter before any other role (a parameter
    viewing a buffer's storage is a parameter: it must not vanish behind the buffer)."""
    if ckpt.distinct:   # the reader proved no overlap
        return {}
    keys = [t.alias_key for t in ckpt]
    if len(set(keys)) == len(keys):   # no two names over one storage and view (most files): no alias
        return {}
    place = placements(ckpt)
    first: dict[tuple, str] = {}
    for t in ckpt:
        key = t.alias_key
        if key not in first or (place[t.name].role == "parameter" and place[first[key]].role != "parameter"):
            first[key] = t.name
    return {t.name: first[t.alias_key] for t in ckpt if first[t.alias_key] != t.name}


def parameters(ckpt: Checkpoint) -> list[TensorInfo]:
    """The tensors the unique parameter count sums: role parameter, each storage and view once; a
    quantised weight as one tensor of its logical shape (census/quant/ logical)."""
    ckpt = logical(ckpt)
    place, alias_of = placements(ckpt), aliases(ckpt)
    return [t for t in ckpt if t.name not in alias_of and place[t.name].role == "parameter"]


def architecture(ckpt: Checkpoint) -> dict:
    return dict(ckpt.derived("architecture", _architecture))  # a copy: callers may extend it


def _architecture(ckpt: Checkpoint) -> dict:
    if ckpt.adapter is not None:   # a PEFT adapter's tensor names look like its base model's: never a model
        return {"family": "adapter", "source": "adapter_config.json", "model_type": str(ckpt.adapter.get("peft_type")),
                "architectures": []}
    meta = ckpt.metadata if ckpt.declared_architecture else None
    cls = diffusers_class(ckpt)
    if cls:   # a diffusers model's own config.json (a pipeline's unet/, vae/...): its class, no model_type
        return {"family": "diffusers", "source": "config.json", "model_type": None, "architectures": [cls]}
    how = lora_naming(ckpt)
    if how:   # its module names are a base model's: never a model
        return {"family": "adapter", "source": "tensor names", "model_type": f"{how} LoRA file", "architectures": []}
    one_file = diffusion_layout(ckpt)
    if one_file is not None:
        return {"family": one_file.family, "source": "tensor names", "model_type": one_file.model_type, "architectures": []}
    if not ckpt.config and not (meta or {}).get("general.architecture"):   # by the tensor names alone
        return {"family": name_family(logical(ckpt)), "source": "tensor names", "model_type": None, "architectures": []}
    from ..families import detect  # the registry loads when a command asks about the architecture

    a = detect(logical(ckpt).tensors, as_converted(ckpt.config, ckpt.metadata), meta)
    source = ckpt.config_kind if a.source == "config.json" else a.source   # (a pickled model's own config)
    return {"family": a.family, "source": source, "model_type": a.model_type, "architectures": list(a.architectures)}


def diffusers_class(ckpt: Checkpoint) -> str | None:
    """The class a diffusers model's config.json names (`_class_name`, beside `_diffusers_version`), else None."""
    cfg = ckpt.config or {}
    cls = cfg.get("_class_name")
    return cls if isinstance(cls, str) and "_diffusers_version" in cfg and not cfg.get("model_type") else None


def lora_naming(ckpt: Checkpoint) -> str | None:
    """A LoRA saved as one file without a PEFT config (census/lora_file.py): its naming, "kohya" or "diffusers"."""
    return ckpt.derived("lora_naming", lambda c: None if c.adapter is not None or c.config else naming(c.tensors))


ONE_FILE_GATES = GATES | DIT_GATES


def diffusion_layout(ckpt: Checkpoint) -> Layout | None:
    """A diffusion pipeline saved as one file (census/diffusion.py), without a config.json; else None. A GGUF file too:
    ComfyUI-GGUF's quantised FLUX.1 keeps Black Forest Labs' names (its general.architecture "flux")."""
    def find(c: Checkpoint) -> Layout | None:
        if c.config or c.adapter is not None or ONE_FILE_GATES.isdisjoint(c.tensors):   # (one pass over the names)
            return None
        def shape(n: str) -> tuple[int, ...] | None:
            return tuple(c.tensors[n].shape) if n in c.tensors else None
        return layout(c.tensors, shape) or dit_layout(c.tensors, shape)
    return ckpt.derived("diffusion_layout", find)


def name_family(ckpt: Checkpoint) -> str:
    """The family the tensor names alone say (families.detect without config or metadata), once per checkpoint:
    the architecture and the head resolution both ask."""
    from ..families import detect

    return ckpt.derived("name_family", lambda c: detect(c.tensors, None, forms=name_forms(c)).family)


def name_matches(name: str, pattern: str | None) -> bool:
    """The `--filter` rule of every command: a plain substring, or a glob on the whole name or on a trailing
    part of it that starts at a module boundary (after a '.'): `layers.0.*` matches
    `model.layers.0.self_attn.q_proj.weight`, `*attention*` and the full name as ever; `ayers.0.*` matches nothing."""
    return not pattern or pattern in name or _tail_glob(pattern).match(name) is not None


@functools.lru_cache(maxsize=64)
def _tail_glob(pattern: str) -> re.Pattern[str]:
    """fnmatch's regex for the pattern after an optional `<anything>.` prefix (case-sensitive, as fnmatchcase)."""
    return re.compile(r"(?s:.*\.)?" + fnmatch.translate(pattern))
