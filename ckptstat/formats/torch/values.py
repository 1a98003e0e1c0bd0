"""Non-tensor values a checkpoint stores beside its tensors, as shown (`Checkpoint.objects`): plain data kept as
JSON-able values, bounded, and flattened into dotted names as the loaders merge them back (a DCP folder's items,
formats/dcp/objects.py; Megatron's common.pt, formats/dcp/megatron.py; a torch.save's training-script data:
argparse.Namespace `args`, omegaconf `hyper_parameters`, data_classes.py)."""
from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from typing import Any

from .allowlist import DTypeRef, Named, StorageRef, TensorRef
from .data_classes import Member, NumpyArray, Unread
from .pickled_objects import Instance
from .unpickler import INT_TEXT_BITS, int_text, key_text

MAX_OBJECTS = 10_000     # non-tensor values kept per checkpoint (an optimizer's param_groups: 12 a group)
MAX_VALUE_ITEMS = 64     # items of a list / dict value kept; a bigger one is described, not kept
MAX_VALUE_DEPTH = 4
MAX_NAME_DEPTH = 8       # levels a torch.save'd object's values are named through (Lightning's loop progress: 6)
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
    if isinstance(v, Member):     # an Enum member: its value (its class is the row's type)
        return inert(v.value, depth)
    if isinstance(v, Unread):
        return f"<{v.what}>"
    if depth < MAX_VALUE_DEPTH and isinstance(v, (list, tuple)) and len(v) <= MAX_VALUE_ITEMS:
        return [inert(x, depth + 1) for x in v]
    if depth < MAX_VALUE_DEPTH and isinstance(v, dict) and len(v) <= MAX_VALUE_ITEMS \
            and all(isinstance(k, (str, int)) for k in v):
        return {key_text(k): inert(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple, dict)):   # plain, too big or deep to show: described (an optimizer's `params`)
        return f"<{getattr(v, 'shown', type(v).__name__)} of {len(v):,} items>"
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


_TENSORS = (TensorRef, StorageRef)


def _holds_tensor(v: Any, memo: dict[int, bool]) -> bool:
    """A tensor or storage is in `v` (its tensors are listed as tensors, not as a value); each container's answer
    kept in `memo`, so a walk asks about each once (walk() has bounded the nesting already)."""
    if isinstance(v, _TENSORS) or isinstance(v, Instance) and v.is_module():
        return True
    if not isinstance(v, (dict, list, tuple)):
        return False
    if id(v) not in memo:
        memo[id(v)] = False   # (a container holding itself: not asked again)
        memo[id(v)] = any(_holds_tensor(x, memo) for x in (v.values() if isinstance(v, dict) else v))
    return memo[id(v)]


def checkpoint_objects(obj: Any, path: str) -> dict[str, dict[str, Any]]:
    """Every value a torch.save'd object holds beside its tensors, by dotted name, as a DCP folder's items are shown
    (`extra_state.best`, `hyper_parameters.lr`, `optimizer.param_groups.0.lr`; an argparse.Namespace's attributes
    and an omegaconf config's values under its name, `args.lr`), named as `flat` names them, MAX_NAME_DEPTH levels
    deep (a container there is a value). A dict shared through the memo is listed under each name it has, as
    torch.load gives it back; one that holds tensors is walked once, and an empty one is a value, so every step of
    the walk lists a value or a tensor. Not values: tensors and storages, a value holding any (its tensors are
    listed), a pickled module (its tensors are its state_dict), and the top level's None and empty containers. At most
    MAX_OBJECTS."""
    file = os.path.basename(path)
    out: dict[str, dict[str, Any]] = {}
    seen: set[int] = set()
    holds: dict[int, bool] = {}

    def rec(o: Any, name: str, depth: int) -> None:
        if len(out) >= MAX_OBJECTS or id(o) in seen or isinstance(o, Instance) and o.is_module():
            return
        if depth < MAX_NAME_DEPTH and o and (isinstance(o, dict) and all(isinstance(k, (str, int)) for k in o) or
                                             isinstance(o, (list, tuple)) and all(
                                                 isinstance(x, (dict, list, tuple, *_TENSORS)) for x in o)):
            if _holds_tensor(o, holds):   # walked once (a tensor-free one is listed under each name, a row a leaf)
                seen.add(id(o))
            for k, v in o.items() if isinstance(o, dict) else enumerate(o):
                child = f"{name}.{key_text(k)}" if name else key_text(k)
                if depth or not (v is None or isinstance(v, (dict, list, tuple)) and not v):
                    rec(v, child, depth + 1)
        elif not _holds_tensor(o, holds):
            out[name or file] = row(file, o)

    if not (obj is None or isinstance(obj, (dict, list, tuple)) and not obj):   # (an empty object: no values)
        rec(obj, "", 0)
    return out
