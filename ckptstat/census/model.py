"""What the analytic commands start from: an ArchSpec plus, when there are weights, the checkpoint's
own parameter count and stored dtypes. A bare config.json (no weights) is accepted too."""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core import Checkpoint
from ..core.files import check_inside, external_allowed, scope_for, scoped
from ..core.limits import limits
from ..errors import FileNotFound, NoAnalyticModel, UsageError
from ..families import get, language_model
from ..families.fp32_table import canonical, kept_float32
from ..families.framework.base import KVLines
from ..families.framework.graph import Op, predict_params
from ..families.framework.spec import (
    DTYPE_BYTES,
    ArchSpec,
    from_config,
)
from ..families.framework.tensors import expected_tensors
from ..families.images import modelled
from ..families.load_table import load_differences
from ..families.wrappers import is_outside, outside_module
from ..formats.configs import load_config
from ..formats.registry import open_checkpoint, resolve_folder
from .counts import parameters
from .quant import stored
from .resolution import resolve
from .tally import optimizer_only, optimizer_only_text, tally


class NoArchitecture(NoAnalyticModel):
    """No family models the checkpoint (unknown model_type or tensor names, or a generic template its
    shapes disagree with). `memory` then reports what the tensors alone give (weights_only), as it does
    for any config it cannot use."""


class Oracle(Protocol):
    """A model no op template describes, answered by the library that defines it (analysis/meta.py: transformers
    on the meta device): the views the analyses otherwise derive from the family's template."""
    statement: str                     # what computed the figures, said in every report

    def ops(self) -> list[Op]: ...     # the parameterised modules, for the planner's placement
    def kv_cache(self, s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines: ...
    def flops_run(self, batch: int, seq: int, image: int = 0) -> dict: ...   # flops.run's dict (image: a side)


@dataclass(frozen=True)
class Model:
    spec: ArchSpec
    path: str
    config_path: str | None
    predicted: dict                    # predict_params(spec)
    checkpoint_params: int | None      # unique parameters in the weights (None: config only)
    param_bytes: dict[str, int] = field(default_factory=dict)   # stored dtype -> bytes of parameters
    notes: tuple[str, ...] = ()
    outside_params: int = 0            # of checkpoint_params, those outside the analytic model (ArchSpec.outside)
    outside_modules: tuple[str, ...] = ()   # the modules they are in (vision_tower, multi_modal_projector...)
    # parameters the class config.json names makes on load beyond the file's (families/load_table.py: MarianMTModel's
    # position tables, never saved), which the template counts
    on_load: int = 0
    oracle: Oracle | None = None       # no template: what answers instead (Oracle)
    # a bare config's quantization_config: the planner holds its weights as that checkpoint stores them
    # (analysis/memory/planner.py config_quant); a checkpoint's stored bytes already are
    quantization: dict | None = None
    # a vision-language wrapper's config.json, where ckptstat models its image path (families/images/): `--images`
    image_config: dict | None = None
    # the config the spec was built from (config.json, a URL's, --config's): what the planner reads beyond the spec
    # (dropout probabilities, clip_qkv: analysis/memory/saved.py); None for a GGUF's metadata or a tower
    config: Mapping[str, Any] | None = None
    # of the parameters, those the class keeps in float32 when loaded in float16 / bfloat16 (families/fp32_table.py)
    float32_kept: Mapping[str, int] = field(default_factory=dict)

    def bytes_in(self, dtype: str | None, width: float) -> float:
        """Bytes of the parameters loaded in `dtype` (`width` B each), those the class keeps in float32 at 4 B."""
        kept = self.float32_kept.get(canonical(dtype) or "", 0)
        return (self.params - kept) * width + kept * 4

    @property
    def params(self) -> int:
        return self.checkpoint_params if self.checkpoint_params is not None else self.predicted["total"]

    @property
    def agree(self) -> bool | None:
        return None if self.checkpoint_params is None else \
            self.checkpoint_params + self.on_load == self.predicted["total"] + self.outside_params

    @property
    def weight_bytes(self) -> float:
        """Bytes of the weights as stored; with no weights, in the config's dtype (fp32 if none) as transformers loads
        them (the parameters the class keeps in float32 at 4 B)."""
        if self.param_bytes:
            return sum(self.param_bytes.values())
        return self.bytes_in(self.spec.dtype, self.bytes_per_param)

    @property
    def bytes_per_param(self) -> float:
        if self.param_bytes and self.params:
            return sum(self.param_bytes.values()) / self.params
        return DTYPE_BYTES.get(self.spec.dtype or "float32", 4)

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element: the weights' float width, or 2 for integer/quantised weights."""
        b = self.bytes_per_param
        return int(b) if b >= 2 and float(b).is_integer() else 2


def is_bare_config(path: str) -> bool:
    """A .json file that is a model config (has model_type), not a sharded index."""
    if not (path.endswith(".json") and os.path.isfile(path)) or path.endswith(".index.json"):
        return False
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(limits().config_bytes).decode("utf-8"))   # (a 22k-class id2label: MBs)
    except (OSError, ValueError, RecursionError):   # (nested too deep: read as a file, its one-line error)
        return False
    return isinstance(data, dict) and "model_type" in data and "weight_map" not in data


def folder_config(path: str, config: str | None) -> str | None:
    """A local folder's config.json where the folder holds no weights file (a config downloaded alone): read as a
    bare config; None otherwise (a folder of weights, or one resolve_folder refuses for another reason)."""
    found = os.path.join(path, "config.json")
    if config is not None or not os.path.isdir(path):
        return None
    with scoped(scope_for(path, external_allowed())):   # a config.json linked out of the folder: refused, never read
        check_inside(found, "config", path)
    if not is_bare_config(found):
        return None
    try:
        resolve_folder(path)
    except FileNotFound:
        return found
    except UsageError:
        pass
    return None


def from_checkpoint(ckpt: Checkpoint) -> Model:
    c = tally(ckpt)   # the census's one pass (a quantised weight: its method and the bytes of all its pieces)
    count, by_dtype = c.total, c.stored_by_dtype()
    if not count and (held := optimizer_only(ckpt)):   # no model to size: never the config's figures beside 0 weights
        raise UsageError(f"{ckpt.path}: holds {optimizer_only_text(held)}")
    notes: list[str] = []
    r = resolve(ckpt)   # the one architecture and head resolution ties and the summary share
    if r.spec is None:
        if r.error:   # a config no op template describes (NoArchitecture: the meta path may), else a bad value
            raise NoArchitecture(r.error) if r.no_template else UsageError(r.error)
        if r.family is None and ckpt.config:
            try:
                from_config(ckpt.config, ckpt.config_path or "config.json")   # raises the usual unsupported-family error
            except UsageError as e:
                raise NoArchitecture(str(e)) from None
        if ckpt.adapter is not None:   # census.resolve says why: an adapter, not a whole model
            raise NoArchitecture(f"{ckpt.path}: {r.head_source}")
        raise NoArchitecture(f"{ckpt.path}: no config.json and the tensor names match no family ckptstat models; pass --config")
    spec = r.spec
    predicted = predict_params(spec)
    apart = [t for t in parameters(ckpt) if is_outside(t.name, spec.outside)] if spec.outside else []
    outside = sum(t.numel for t in apart)
    found = tuple(sorted({str(outside_module(t.name, spec.outside)) for t in apart}))
    if outside:
        notes.append(f"{outside:,} parameters in {', '.join(found)} (outside the analytic model) are counted from the "
                     "checkpoint")
    count -= outside   # what the template predicts
    # what the class makes on load beyond the file (its _keys_to_ignore_on_save recreated; less a table it loads
    # resized: families/load_table.py), where the template counts the class's parameters
    made = 0
    if predicted["total"] != count:
        differences = sum(d["elements"] for d in load_differences(ckpt.config, ckpt.tensors))
        if differences and predicted["total"] == count + differences:
            made = differences
            notes.append(f"{spec.architecture} holds {made:+,} parameters beyond the file's once loaded (tables it "
                         "recreates, never saved, or loads resized: the summary's parameters.on_load itemises them); "
                         "the template counts the class's")
    if predicted["total"] != count + made and r.family is not None and r.family.strict_params:
        raise NoArchitecture(f"{ckpt.path}: the {spec.family} template from the config's fields predicts {predicted['total']:,} "
                         f"parameters, the checkpoint holds {count:,}: its tensor shapes disagree with the template, "
                         f"so no FLOPs or activation memory from it")
    if predicted["total"] != count + made:
        source = "the config" if ckpt.config else "the architecture the tensor names show"
        notes.append(f"{source} predicts {predicted['total']:,} parameters for {spec.architecture or spec.head}, the "
                     f"checkpoint holds {count:,} (difference {count - predicted['total']:+,}): the weights and the "
                     f"architecture disagree (another head, or extra/missing tensors); FLOPs follow the architecture")
    return Model(spec, ckpt.path, ckpt.config_path, predicted, count + outside, by_dtype,
                 tuple(notes) + spec.assumptions, outside, found, on_load=made,
                 image_config=ckpt.config if ckpt.config and modelled(ckpt.config) else None, config=ckpt.config,
                 float32_kept=kept_float32(ckpt.config, lambda: ((t.name, t.numel) for t in parameters(ckpt))))


def load(path: str | os.PathLike[str], config: str | os.PathLike[str] | None = None) -> Model:
    """A weights file/folder/index (with its config.json when there is one), or a bare config.json."""
    path = os.fspath(path)
    if is_bare_config(path) and config is None:
        cfg = load_config(path)
        spec = from_config(cfg, path)
        vouch = get(spec.family).config_alone
        wrapped = language_model(cfg)   # a wrapper's language model is what the template describes
        if vouch is not None and not vouch(wrapped[0] if wrapped is not None else cfg):
            raise NoArchitecture(f"{path}: the {spec.family} template cannot describe model_type {spec.model_type!r} from "
                                 "its config alone (fields or an activation LLaMA's config lacks); give the weights too, "
                                 "whose parameter count checks the template")
        notes = spec.assumptions
        if spec.dtype is None:
            notes += ("no weights and no torch_dtype in the config: weight bytes assume float32",)
        q = cfg.get("quantization_config")
        kept = kept_float32(cfg, lambda: ((k, math.prod(v)) for k, v in (expected_tensors(spec) or {}).items()))
        return Model(spec, path, path, predict_params(spec), None, {}, notes, quantization=q if isinstance(q, dict) else None,
                     image_config=cfg if modelled(cfg) else None, config=cfg, float32_kept=kept)
    return from_checkpoint(open_checkpoint(path, config))


@dataclass(frozen=True)
class Weights:
    """What `memory` knows of a checkpoint without an architecture: its parameters and their stored bytes,
    and why no architecture (the error the analytic model gave)."""
    path: str
    config_path: str | None
    params: int
    param_bytes: dict[str, int]
    reason: str


def weights_only(path: str | os.PathLike[str], config: str | os.PathLike[str] | None, reason: str) -> Weights:
    """The parameters of a checkpoint whose architecture ckptstat cannot model; UsageError(reason) when
    there are no weights to count (a bare config.json, a file with no parameters)."""
    path = os.fspath(path)
    if is_bare_config(path) and config is None:
        raise UsageError(reason)
    w = weights_of(open_checkpoint(path, config), reason)
    if w is None:
        raise UsageError(reason)
    return w


def weights_of(ckpt: Checkpoint, reason: str) -> Weights | None:
    """An open checkpoint's parameters and their stored bytes by dtype; None when it holds no parameter."""
    by_dtype: dict[str, int] = {}
    count = 0
    for t in parameters(ckpt):
        count += t.numel
        label, nbytes = stored(t)   # a quantised weight: its method and the bytes of all its pieces
        by_dtype[label] = by_dtype.get(label, 0) + nbytes
    return Weights(ckpt.path, ckpt.config_path, count, by_dtype, reason) if count else None
