"""The one architecture and head resolution every analysis shares (issue 15): the family, the head and
the model class a checkpoint holds, computed once per checkpoint from config.json (`architectures`),
else from GGUF metadata, else from the tensor names (each family's head rules). `ckptstat ties`, the
summary's analytic block and the FLOPs/memory model all read it, so they never disagree about which
model the file is. Headers and config only; never raises (a config the analytic model cannot read
leaves `spec` None with the reason in `error`)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..core import Checkpoint
from ..errors import NoAnalyticModel, UsageError
from ..families import by_model_type, get
from ..families.framework.base import ArchSpec, Family, TieRule
from ..families.framework.spec import canonical_tensors, config_from_gguf, from_canonical, from_config, infer_head, with_head
from ..naming import name_forms
from .counts import aliases, diffusers_class, diffusion_layout, lora_naming, name_family
from .quant import logical
from .quant.mlx import as_converted


@dataclass(frozen=True)
class Resolution:
    family: Family | None          # the registered family, None when no family module covers the model
    model_type: str | None         # config.json model_type (or GGUF architecture), when known
    spec: ArchSpec | None          # the analytic model; None when it cannot be built (see error)
    head: str | None               # base, mlm, lm, pretraining, ... (None: unknown family)
    head_source: str               # how the head was decided, printed beside it
    error: str | None = None
    no_template: bool = False      # the error is NoAnalyticModel's: no op template describes it (the meta path may)

    @property
    def label(self) -> str:
        """The model class the resolution describes: the config's architectures class, else the family's
        head inferred from the tensor names."""
        if self.spec is not None and self.spec.architecture:
            return self.spec.architecture
        if self.family is None:
            return f"model_type {self.model_type!r} (no family rules)" if self.model_type else "unknown model"
        return f"{self.spec.model_type if self.spec else self.family.name} {self.head!r} head"

    @property
    def tie_rules(self) -> tuple[TieRule, ...]:
        """The tie rules of the resolved family and head only (families/<name>.py)."""
        if self.family is None or self.head is None:
            return ()
        model_type = self.spec.model_type if self.spec is not None else None
        rules = tuple(r for r in self.family.tie_rules if (not r.heads or self.head in r.heads)
                      and (not r.model_types or model_type in r.model_types))
        if self.spec is not None and self.spec.outside:
            # a vision-language wrapper (families/wrappers.py): transformers >= 4.52 keeps its language model
            # under `model.language_model.` with `lm_head` at the top (before: `language_model.model.`, which
            # the family's own rules meet under the outer prefix `language_model.`)
            rules += tuple(replace(r, target="model.language_model." + r.target.removeprefix("model."))
                           for r in rules if r.target.startswith("model."))
        return rules


def resolve(ckpt: Checkpoint) -> Resolution:
    # quantised weights resolve by their logical shapes (census/quant/), as the unquantised model's
    return ckpt.derived("resolution", lambda c: _resolve(logical(c)))


def _resolve(ckpt: Checkpoint) -> Resolution:
    if ckpt.adapter is not None:
        return Resolution(None, None, None, None, "a PEFT adapter (adapter_config.json), not a whole model: "
                          "`ckptstat summary ADAPTER --base BASE` (docs/adapters.md)")
    gguf_cfg = config_from_gguf(ckpt.metadata, ckpt.tensors) if ckpt.declared_architecture and not ckpt.config else None
    if ckpt.declared_architecture and not ckpt.config and gguf_cfg is None:   # llama.cpp names match no family's
        arch = ckpt.declared_architecture
        return Resolution(None, arch, None, None, "gguf general.architecture",
                          f"{ckpt.path}: GGUF general.architecture {arch!r} has no analytic model in ckptstat "
                          "(no family reads its metadata; pass --config with the model's config.json)")
    cfg = as_converted(ckpt.config, ckpt.metadata) or gguf_cfg
    if cls := diffusers_class(ckpt):
        return Resolution(None, None, None, None, "config.json", f"{ckpt.path}: a diffusers {cls}: no "
                          "analytic model (ckptstat models transformers' and llama.cpp's architectures)")
    if cfg:
        mt = cfg.get("model_type")
        family = by_model_type(mt, cfg)
        mt = mt if isinstance(mt, str) else None
        if family is None:
            return Resolution(None, mt, None, None, "no family module for this model_type")
        path = ckpt.config_path or ckpt.config_kind if ckpt.config else f"{ckpt.path} (GGUF metadata)"
        try:
            spec = from_config(cfg, path, ckpt.config_kind if ckpt.config else "GGUF metadata")
        except UsageError as e:
            return Resolution(family, mt, None, None, ckpt.config_kind, str(e), isinstance(e, NoAnalyticModel))
        if spec.architecture is not None or not ckpt.tensors:
            src = (f"{ckpt.config_kind} architectures" if ckpt.config else "gguf general.architecture") if spec.architecture \
                else "family default (no weights)"
            return Resolution(family, mt, spec, spec.head, src)
        spec, why = _head_from_weights(spec, ckpt)
        return Resolution(family, mt, spec, spec.head, why)
    how = lora_naming(ckpt)
    if how:
        return Resolution(None, None, None, None, "tensor names", f"{ckpt.path}: a LoRA file ({how} naming), not a "
                          "whole model: `ckptstat summary` lists its modules and ranks (docs/adapters.md)")
    one_file = diffusion_layout(ckpt)
    if one_file is not None:
        return Resolution(None, one_file.model_type, None, None, "tensor names",
                          f"{ckpt.path}: {one_file.what} in one file" + (f" ({one_file.model_type})" if one_file.model_type
                                                                         else "")
                          + ": no analytic model of a diffusion model's UNet or transformer, VAE or text encoders; "
                          "`ckptstat summary` counts each component")
    name = name_family(ckpt)
    if name == "unknown":
        return Resolution(None, None, None, None, "the tensor names match no family")
    # once: a 200k-tensor header pays per name (docs/performance.md)
    T = canonical_tensors(ckpt.tensors, ckpt.metadata, name_forms(ckpt))
    head, why = infer_head(name, T)
    if alias_of := aliases(ckpt):   # a name over another's storage (a tied head in a torch.save) is no tensor of its
        T = canonical_tensors({n: t for n, t in ckpt.tensors.items() if n not in alias_of}, ckpt.metadata)  # own
    try:
        spec = from_canonical(name, T, head)
    except UsageError as e:
        return Resolution(get(name), None, None, head, f"tensor names ({why})", str(e))
    return Resolution(get(name), None, spec, spec.head, "tensor names")


def _head_from_weights(spec: ArchSpec, ckpt: Checkpoint) -> tuple[ArchSpec, str]:
    """The config names no architectures class, so its head was a default guess: the tensor names say
    which head the weights hold (cls.predictions.*, lm_head.*, classifier.* ...)."""
    head, why = infer_head(spec.family, canonical_tensors(ckpt.tensors, ckpt.metadata, name_forms(ckpt)))
    note = (f"config names no known architectures class; the {head!r} head is inferred from the tensor names "
            f"({why if why == 'no head tensors' else 'e.g. ' + why})")
    kept = tuple(a for a in spec.assumptions if "names no known architectures class" not in a)
    out = with_head(spec, head) if head != spec.head else spec
    return replace(out, assumptions=kept + (note,)), "tensor names (config names no architectures class)"
