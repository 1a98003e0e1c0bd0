"""The Python default arguments a SavedModel's restored functions fill in, by the concrete function's argument.

`tf.saved_model.load` rebuilds each tf.function with its FunctionSpec (saved_object_graph.proto): a call that leaves
out an argument gets the default the function was written with, as a tensor, when an input signature makes the
argument a tensor (measured, TensorFlow 2.21: `serve(self, data, path="/tmp/x")` writes to /tmp/x when called with
`data` alone). So a string default is a path the file chooses, like a literal in its graph.

The FunctionSpec's `fullargspec` (a FullArgSpec as a StructuredValue, tensorflow/core/protobuf/struct.proto) names
the arguments and their defaults; a concrete function's `canonicalized_input_signature` is `(args, kwargs)`, whose
tensor specs, flattened as `tf.nest` does (a dict's keys sorted), are its user arguments in order. Where the two
cannot be matched (a composite type spec, a count that differs), every string default is taken for every argument."""
from __future__ import annotations

from ...formats.tf_bundle.wire import fields, message

MAX_NESTING = 64           # StructuredValue levels followed
# StructuredValue fields
NONE, STRING, TENSOR_SPEC, TYPE_SPEC, BOUNDED_SPEC = 1, 13, 33, 34, 35
LIST, TUPLE, DICT, NAMED_TUPLE, TENSOR, NUMPY = 51, 52, 53, 54, 55, 56


def _value(raw: bytes) -> tuple[int, bytes | int]:
    """(kind, payload) of a StructuredValue (a oneof: its one field)."""
    for num, _, value in fields(raw):
        return num, value
    return NONE, b""


def _items(kind: int, payload: bytes | int) -> list[tuple[str, bytes]]:
    """The (key, StructuredValue) entries of a list, tuple, dict (keys sorted, as tf.nest flattens) or named tuple."""
    if kind in (LIST, TUPLE):
        return [("", message(v, "structured item")) for n, _, v in fields(message(payload, "structured list")) if n == 1]
    if kind in (DICT, NAMED_TUPLE):
        entries = [{k: v for k, _, v in fields(message(v, "structured pair"))}
                   for n, _, v in fields(message(payload, "structured map")) if n == (1 if kind == DICT else 2)]
        pairs = [(message(e.get(1, b""), "key").decode("utf-8", "replace"), message(e.get(2, b""), "value"))
                 for e in entries]
        return sorted(pairs) if kind == DICT else pairs
    return []


def _strings(raw: bytes) -> list[str]:
    """A default's text: a Python string, or a string tensor's values (TensorProto.string_val 8)."""
    kind, payload = _value(raw)
    if kind == STRING:
        return [message(payload, "string default").decode("utf-8", "replace")]
    if kind in (TENSOR, NUMPY):
        return [v.decode("utf-8", "replace") for n, _, v in fields(message(payload, "tensor default"))
                if n == 8 and isinstance(v, bytes)]
    return []


def _names(raw: bytes) -> list[str]:
    kind, payload = _value(raw)
    return [message(_value(v)[1], "argument name").decode("utf-8", "replace") for _, v in _items(kind, payload)
            if _value(v)[0] == STRING]


def _fullargspec(spec: bytes) -> tuple[list[str], dict[str, list[str]]]:
    """(the arguments a call passes, argument name -> its string default) of a FunctionSpec (fullargspec 1,
    is_method 2: a method's `self` is not passed)."""
    entries = {n: v for n, _, v in fields(spec)}
    kind, payload = _value(message(entries.get(1, b""), "fullargspec"))
    if kind != NAMED_TUPLE:
        return [], {}
    parts = dict(_items(kind, payload))
    args = _names(parts.get("args", b""))[1 if entries.get(2) else 0:]
    defaults = _items(*_value(parts.get("defaults", b"")))
    if len(defaults) > len(args):      # not what Python writes: any of them may fill any argument
        every = [text for _, raw in defaults for text in _strings(raw)]
        out = {name: every for name in args}
    else:
        out = {name: _strings(raw) for name, (_, raw) in zip(args[len(args) - len(defaults):], defaults)}
    out.update({name: _strings(raw) for name, raw in _items(*_value(parts.get("kwonlydefaults", b"")))})
    return args, {name: strings for name, strings in out.items() if strings}


def _leaves(raw: bytes, depth: int = 0) -> int | None:
    """How many tensors a signature's value is; None for a composite type spec (its components' count unknown)."""
    kind, payload = _value(raw)
    if kind in (TENSOR_SPEC, BOUNDED_SPEC):
        return 1
    if kind in (TYPE_SPEC, TENSOR, NUMPY) or depth > MAX_NESTING:
        return None
    total = 0
    for _, item in _items(kind, payload):
        n = _leaves(item, depth + 1)
        if n is None:
            return None
        total += n
    return total


def argument_defaults(spec: bytes, signature: bytes, n_args: int) -> tuple[dict[int, list[str]], list[str]]:
    """(user argument index of a concrete function of `n_args` -> the string default its Python function fills it
    with when a call leaves it out; the defaults that may fill any argument, where the two cannot be paired)."""
    args, defaults = _fullargspec(spec)
    if not defaults:
        return {}, []
    top = _items(*_value(signature))
    if len(top) == 2:
        flat = [(args[i] if i < len(args) else "", raw) for i, (_, raw) in enumerate(_items(*_value(top[0][1])))]
        out: dict[int, list[str]] = {}
        k = 0
        for name, raw in flat + _items(*_value(top[1][1])):
            n = _leaves(raw)
            if n is None:
                break
            if name in defaults:
                out.update(dict.fromkeys(range(k, k + n), defaults[name]))
            k += n
        else:
            if k == n_args:
                return out, []
    return {}, list(dict.fromkeys(s for strings in defaults.values() for s in strings))
