"""The parameters a transformers model class keeps in float32 when loaded in a 16-bit dtype (fp32_table.json, written
from transformers by fixtures/make_fp32_table.py): transformers 5.25 `PreTrainedModel._get_dtype_plan` upcasts
`_keep_in_fp32_modules` under float16 only (T5's `wo`, gpt-oss's norms) and `_keep_in_fp32_modules_strict` under
float16 and bfloat16 (DeepSeek-V3's and GLM-4.5's router `gate.weight`); core_model_loading.py searches each pattern
(`*` read as `.*`) anywhere in a parameter's name. Read only when a config.json names a class (`architectures`), as the
tie table is; transformers is never imported here. docs/memory_planner.md, "Weights"."""
from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .framework.base import architectures

_PATH = os.path.join(os.path.dirname(__file__), "fp32_table.json")
# the plan's lists under each 16-bit dtype (config.json's spellings and --weights-dtype's)
_LISTS = {"float16": ("fp16", "strict"), "half": ("fp16", "strict"), "fp16": ("fp16", "strict"),
          "bfloat16": ("strict",), "bf16": ("strict",)}
WIDTHS = ("float16", "bfloat16")   # what Model.float32_kept is keyed by
FP32_KEPT_RULE = "what the class keeps in float32 (transformers' _keep_in_fp32_modules) at 4 B"


@functools.cache
def _table() -> Mapping[str, Any]:
    with open(_PATH, encoding="utf-8") as f:
        classes: Mapping[str, Any] = json.load(f)["classes"]
    return classes


def _row(cfg: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The table's row of the first class config.json names that it knows; {} for none."""
    table = _table()
    cls = next((c for c in architectures(cfg) if c in table), None) if cfg else None
    return table[cls] if cls else {}


def canonical(dtype: str | None) -> str | None:
    """float16 or bfloat16 for a 16-bit float dtype's spelling; None for any other."""
    lists = _LISTS.get(dtype or "")
    return None if lists is None else "float16" if "fp16" in lists else "bfloat16"


def pattern(cfg: Mapping[str, Any] | None, dtype: str | None) -> re.Pattern[str] | None:
    """The patterns the class config.json names keeps in float32 when loaded in `dtype`, as one regex to search a
    parameter's name with; None when it keeps none there (or the table knows no class config.json names)."""
    row = _row(cfg) if (lists := _LISTS.get(dtype or "")) else {}
    found = [p for key in lists or () for p in row.get(key, ())]
    return re.compile("|".join(p.replace("*", ".*") for p in found)) if found else None


def unconverted(cfg: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The class's `_keep_in_fp32_modules` (whatever the dtype), which transformers' quantizers add to the modules they
    leave unquantised (quantizers/base.py `get_modules_to_not_convert`: bitsandbytes, FineGrainedFP8, MXFP4, AWQ):
    T5's `wo`, DeepSeek-V4's compressor projections."""
    return tuple(_row(cfg).get("fp16", ()))


def op_param(module: str) -> str:
    """An op template's module ("layers[2].mlp.gate (router)") as the name of its weight ("layers.0.mlp.gate.weight"),
    for `pattern` to search (the planner places each op's bytes)."""
    return re.sub(r"\[\d+\]", ".0", module.split(" ")[0]) + ".weight"


def kept_float32(cfg: Mapping[str, Any] | None, tensors: Callable[[], Iterable[tuple[str, int]]]) -> dict[str, int]:
    """{16-bit dtype: elements of the parameters `tensors()` gives ((name, elements) pairs; asked only for a class
    that keeps some) that the class config.json names keeps in float32 when loaded in it}; {} when it keeps none."""
    found = {width: rx for width in WIDTHS if (rx := pattern(cfg, width))}
    pairs = list(tensors()) if found else []
    return {width: n for width, rx in found.items() if (n := sum(k for name, k in pairs if rx.search(name)))}
