"""What a TF or Keras file says about a 2-D weight's layout through its variable's name
(docs/tensorflow.md): a Dense `kernel` (Keras 3: `_kernel`) is stored [in, out], for y = x @ kernel,
where torch's nn.Linear stores [out, in]. Shared by the TF bundle and Keras HDF5 readers. And which of a Keras 3
archive's variables its config.json freezes (frozen_roles)."""
from __future__ import annotations

import re

_KERNEL = re.compile(r"(^|[/.])_?kernel(:\d+|/\.ATTRIBUTES/VARIABLE_VALUE)?$")


def dense_layout(name: str, shape: tuple[int, ...]) -> str | None:
    """"in_out" for a 2-D Dense kernel, else None (the file says nothing about the layout)."""
    return "in_out" if len(shape) == 2 and _KERNEL.search(name) else None


def _snake(class_name: str) -> str:
    """A class name as Keras 3 names its layer's group in a weights file (keras/src/utils/naming.py to_snake_case)."""
    name = re.sub(r"\W+", "", class_name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


MAX_NESTING = 64   # models nested in models that _frozen_prefixes follows (config.json is at most 1 MiB)


def _frozen_prefixes(config: object) -> list[str]:
    """The weight-file groups (`layers/dense_1/`, `layers/functional/layers/dense/`) of the layers a Keras 3 model
    config marks `"trainable": false` (layer.trainable = False: count_params() still counts their weights, as
    non-trainable). A Sequential or Functional model saves its layers under `layers/`, each named by its class in snake
    case, the first of a class bare and the next `_1`, `_2`... in the order of its config's `layers` (keras/src/saving/
    saving_lib.py _save_container_state); a model nested in one is walked the same way. "" where the model itself is
    frozen."""
    out: list[str] = []
    stack: list[tuple[object, str, int]] = [(config, "", 0)]
    while stack:
        node, prefix, depth = stack.pop()
        inner = node.get("config") if isinstance(node, dict) else None
        if not isinstance(inner, dict):
            continue
        if inner.get("trainable") is False:
            out.append(prefix)
            continue
        layers = inner.get("layers")
        if not isinstance(layers, list) or depth >= MAX_NESTING:
            continue
        used: dict[str, int] = {}
        for layer in layers:
            if isinstance(layer, dict) and isinstance(layer.get("class_name"), str):
                name = _snake(layer["class_name"])
                used[name] = used.get(name, -1) + 1
                stack.append((layer, f"{prefix}layers/{name}{f'_{used[name]}' if used[name] else ''}/", depth + 1))
    return out


def frozen_roles(config: object, names: list[str]) -> dict[str, str]:
    """"non-trainable" for each variable (not optimizer state) of a layer the config freezes."""
    frozen = set(_frozen_prefixes(config))
    if not frozen:
        return {}
    out = {}
    for name in names:
        parts = name.split("/")
        if parts[0] != "optimizer" and any("/".join(parts[:i]) + "/" * bool(i) in frozen for i in range(len(parts))):
            out[name] = "non-trainable"
    return out
