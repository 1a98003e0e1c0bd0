"""Non-tensor values a checkpoint stores beside its tensors, as shown (`Checkpoint.objects`): plain data kept as
JSON-able values, bounded, and flattened into dotted names as the loaders merge them back (a DCP folder's items,
formats/dcp/objects.py; Megatron's common.pt, formats/dcp/megatron.py; a torch.save's training-script data:
argparse.Namespace `args`, omegaconf `hyper_parameters`, data_classes.py)."""
from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from typing import Any

from .allowlist import DTypeRef, Named
from .data_classes import Attributes, Config, ConfigList, NumpyArray, Unread
from .pickled_objects import Instance
from .unpickler import INT_TEXT_BITS, int_text, key_text, named_leaves

MAX_OBJECTS = 10_000     # non-tensor values kept per checkpoint (an optimizer's param_groups: 12 a group)
MAX_VALUE_ITEMS = 64     # items of a list / dict value kept; a bigger one is described, not kept
MAX_VALUE_DEPTH = 4
MAX_TEXT = 200           # characters of a string value kept


class NotInert(Exception):
    pass


def inert(v: Any, depth: int = 0) -> Any:
    """`v` as a JSON-able value when it is plain data, small enough to show; else NotInert."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > INT_TEXT_BITS:
        return int_text(v)   # (str() and json.dumps refuse it)
    if v is None or isinstance(v, (bool, int, float)):
        return v
    if isinstance(v, str):
        return v if len(v) <= MAX_TEXT else v[:MAX_TEXT] + "..."
    if isinstance(v, (bytes, bytearray)):
        return f"<{len(v):,} bytes>"
    if isinstance(v, DTypeRef):   # a torch dtype (Megatron's args.params_dtype)
        return f"torch.{v.name}"
    if isinstance(v, Named):      # a global named, never called
        return f"<{v.name}>"
    if isinstance(v, (datetime.timedelta, datetime.timezone, complex)):
        return str(v)
    if isinstance(v, NumpyArray):
        return f"<{v!r}>"
    if isinstance(v, Unread):
        return f"<{v.what}>"
    if depth < MAX_VALUE_DEPTH and isinstance(v, (list, tuple)) and len(v) <= MAX_VALUE_ITEMS:
        return [inert(x, depth + 1) for x in v]
    if depth < MAX_VALUE_DEPTH and isinstance(v, dict) and len(v) <= MAX_VALUE_ITEMS \
            and all(isinstance(k, (str, int)) for k in v):
        return {key_text(k): inert(x, depth + 1) for k, x in v.items()}
    raise NotInert(type(v).__name__)


def flat(prefix: str, value: Any, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(dotted name, leaf) of a value, dicts and lists of containers flattened as Megatron's load merges them back
    into the state dict (and as DCP flattens its own items: `optimizer.param_groups.0.lr`)."""
    if depth < MAX_VALUE_DEPTH and isinstance(value, dict) and all(isinstance(k, (str, int)) for k in value):
        for k, v in value.items():
            yield from flat(f"{prefix}.{k}" if prefix else str(k), v, depth + 1)
    elif depth < MAX_VALUE_DEPTH and isinstance(value, (list, tuple)) and value and \
            all(isinstance(v, (dict, list, tuple)) for v in value):
        for i, v in enumerate(value):
            yield from flat(f"{prefix}.{i}", v, depth + 1)
    else:
        yield prefix, value


def row(file: str, value: Any) -> dict[str, Any]:
    """An `objects` entry: {file, type, value}, or `unread` where the value is not plain data."""
    out: dict[str, Any] = {"file": file}
    try:
        out["value"] = inert(value)
        out["type"] = getattr(value, "shown", type(value).__name__)   # a data class as the class it was saved as
    except NotInert as e:
        out["type"] = str(e)
        out["unread"] = "not plain data (a tensor, or a class torch's allowlist stubs): not shown"
    return out


_DATA = (Attributes, Config, ConfigList)


def data_objects(obj: Any, path: str) -> dict[str, dict[str, Any]]:
    """The training-script data (an argparse.Namespace's attributes, an omegaconf config's values, numpy arrays) a
    torch.save'd object holds, found through its plain dicts and lists, by dotted name (`args.lr`,
    `hyper_parameters.cfg.lr`)."""
    out: dict[str, dict[str, Any]] = {}
    file = os.path.basename(path)
    for name, o in named_leaves(obj, (NumpyArray, Unread, *_DATA), MAX_VALUE_DEPTH, lambda name: None):
        if isinstance(o, Instance) and o.is_module():   # a pickled model: its tensors are the state_dict, not values
            continue
        for leaf_name, leaf in flat(name, o) if isinstance(o, _DATA) else ((name, o),):
            if len(out) >= MAX_OBJECTS:
                return out
            out[leaf_name or file] = row(file, leaf)
    return out
